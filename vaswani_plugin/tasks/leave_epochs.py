"""--leave-epochs N --leave-epochs-of SPLIT: a training that stops before its limit, leaving another split N epochs
(the parsing recipe's pre-training leaves its fine-tuning about 10 epochs of the sample's trees: docs/parsing.md,
"Fine-tuning on the sample's own trees"). N epochs are N x the split's updates per epoch, fairseq's batches of it
as a training on it batches them.

--max-update: the limit becomes --max-update less those updates, once, before the first update: a count, the same
on any machine.
--stop-time-hours: after each update the limit becomes the budget less those updates x the seconds an update has
taken since the run's SKIPPED-th update. Each rank puts its seconds since its first update in the step's logging
output, which fairseq sums over the ranks with the rest: every rank sets the same limit, and fairseq compares it with
its training time, agreed between the ranks too, so that all of them stop after the same update.
Both set: both limits move; fairseq stops at the first it reaches."""

import logging
import math
import time
from typing import List, Optional, Tuple

from fairseq import utils

from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.training import progress_meter
from vaswani_plugin.training.progress import duration

logger = logging.getLogger(__name__)

SECONDS, OUTPUTS = "leave_epochs_seconds", "leave_epochs_outputs"  # the logging output's entries, summed
SKIPPED = 10  # the run's first updates, left out of its pace (loading, the first batches' allocations)
MEASURED = 20  # updates measured before the limit first moves (it is measured again after each)


class LeaveEpochs:
    """The rule of one fairseq-train; `root`: its whole configuration (None outside fairseq-train: off)."""

    def __init__(self, epochs: float, split: str, root=None):
        self.epochs, self.split = epochs, split
        self.optimization = getattr(root, "optimization", None) if epochs > 0 else None
        self.root = root
        self.budget_hours = 0.0 if self.optimization is None else self.optimization.stop_time_hours
        self.max_update = 0 if self.optimization is None else self.optimization.max_update
        self.started: Optional[float] = None  # this rank's first update, by its clock
        self.first: Optional[int] = None  # the run's first update
        self.reference: Optional[Tuple[int, float]] = None  # (update, the ranks' mean seconds) after SKIPPED
        self.epoch_updates: Optional[int] = None
        self.said = False
        if epochs < 0:
            raise VaswaniConfigError(f"--leave-epochs {epochs:g}: give 0 (off) or more")
        if self.optimization is not None:
            if not split:
                raise VaswaniConfigError(
                    f"--leave-epochs {epochs:g} needs --leave-epochs-of, the split it leaves time for"
                )
            if not (self.budget_hours > 0 or self.max_update > 0):
                raise VaswaniConfigError(
                    f"--leave-epochs {epochs:g} leaves part of --max-update or --stop-time-hours: set one"
                )

    @property
    def enabled(self) -> bool:
        return self.optimization is not None

    @property
    def timed(self) -> bool:
        """Whether the rule moves a time limit (--stop-time-hours), which the ranks' clocks measure."""
        return self.enabled and self.budget_hours > 0

    def count(self, task, model) -> None:
        """The split's updates per epoch, once: fairseq's batches of it under this run's batch settings and ranks."""
        if not self.enabled or self.epoch_updates is not None:
            return
        dataset, optimization = self.root.dataset, self.root.optimization
        try:
            if self.split not in task.datasets:
                task.load_dataset(self.split, combine=True, epoch=1)
        except FileNotFoundError as error:
            raise VaswaniConfigError(f"--leave-epochs-of {self.split}: {error}") from None
        world = self.root.distributed_training.distributed_world_size
        batches = task.get_batch_iterator(
            dataset=task.dataset(self.split),
            max_tokens=dataset.max_tokens,
            max_sentences=dataset.batch_size,
            max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions(), dataset.max_tokens),
            ignore_invalid_inputs=True,
            required_batch_size_multiple=dataset.required_batch_size_multiple,
            seed=self.root.common.seed,
            num_shards=world,
            shard_id=0,
            epoch=1,
            disable_iterator_cache=True,
        )
        self.epoch_updates = math.ceil(len(batches) / optimization.update_freq[0])
        if self.max_update > 0:
            reserve = math.ceil(self.epochs * self.epoch_updates)
            optimization.max_update = max(self.max_update - reserve, 1)  # 0 would be fairseq's "no limit"
            progress_meter.limit_moved("max_update", optimization.max_update)
            logger.info(
                f"--leave-epochs {self.epochs:g}: {self.epochs:g} epochs of {self.split} ({self.epoch_updates:,} "
                f"updates each) are {reserve:,} of --max-update {self.max_update:,}: training stops after update "
                f"{optimization.max_update:,}"
            )

    def output(self, logging_output: dict) -> None:
        """A training step's logging output gets this rank's seconds since its first update (a time limit only)."""
        if self.timed:
            now = time.monotonic()
            self.started = now if self.started is None else self.started
            logging_output[SECONDS], logging_output[OUTPUTS] = now - self.started, 1

    def reduce(self, logging_outputs: List[dict], update: int) -> None:
        """After update `update` (its outputs summed over the ranks): fairseq's time limit moved as measured."""
        # Each sum read once (after fairseq's all-reduce they are tensors on the device: one copy to the host each).
        outputs = float(sum(log.get(OUTPUTS, 0) for log in logging_outputs)) if self.timed else 0.0
        if not outputs:  # a validation's, or off
            return
        seconds = float(sum(log.get(SECONDS, 0) for log in logging_outputs)) / outputs
        self.first = update if self.first is None else self.first
        if self.reference is None:
            if update - self.first >= SKIPPED:
                self.reference = (update, seconds)
            return
        measured = update - self.reference[0]
        if measured < MEASURED:
            return
        pace = (seconds - self.reference[1]) / measured  # seconds an update
        if pace <= 0:
            return
        reserve = self.epochs * self.epoch_updates * pace
        hours = max(self.budget_hours - reserve / 3600, 1e-12)
        self.optimization.stop_time_hours = hours
        progress_meter.limit_moved("stop_time_hours", hours)
        if not self.said:
            self.said = True
            logger.info(
                f"--leave-epochs {self.epochs:g}: {self.epochs:g} epochs of {self.split} ({self.epoch_updates:,} "
                f"updates each) take about {duration(reserve)} at this run's {1 / pace:.2f} updates/s: training "
                f"stops at about {duration(hours * 3600)} of {duration(self.budget_hours * 3600)} (fairseq's "
                "--stop-time-hours, measured again after every update)"
            )
