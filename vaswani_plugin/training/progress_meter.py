"""fairseq-train's progress written in its own process, on rank 0: training/progress.py's ETA line, dev line and
records, from the values fairseq logs, not from its text. The plugin's task, which alone attaches these hooks
(tasks/vaswani_translation.py), adds a derived meter `done` (the target's share reached, in percent) to fairseq's
metrics; fairseq evaluates it where it logs a training window, an epoch's end or a validation, and once an update in
the trainer's own reduction (a lookup here: no sync, no I/O)."""

import atexit
import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from fairseq import metrics
from fairseq.distributed import utils as distributed_utils
from omegaconf.errors import OmegaConfBaseException

from vaswani_plugin import cli
from vaswani_plugin.checkpoints.storage import last_intact_checkpoint, training_seconds
from vaswani_plugin.progress_options import ProgressOptions
from vaswani_plugin.training import stopping, watchdog
from vaswani_plugin.training.progress import Progress, Target

METER = "done"
REFRESH = "VASWANI_PROGRESS_REFRESH"  # a shell command run after validations, in the background (the recipes' report)
REFRESH_SECONDS = "VASWANI_PROGRESS_REFRESH_SECONDS"  # at most this often (default 0: after each validation)


@dataclass
class Settings:
    """What the run's configuration says of it."""

    save_dir: str = "checkpoints"
    no_save: bool = False
    max_update: int = 0
    max_epoch: int = 0
    stop_time_hours: float = 0.0
    workers: int = 1
    valid_subsets: List[str] = field(default_factory=lambda: ["valid"])


class _Run:
    """One fairseq-train's progress: made when the task is built, writing from its first training update."""

    def __init__(self, settings: Settings, config=None):
        self.settings, self.progress, self.broken = settings, None, False
        self.config = config  # fairseq-train's whole configuration, which a signal's stop changes
        self.stopping = False
        self.notes: List[dict] = []  # records from before the first update (the precision, a resumption)
        self.first_update: Optional[int] = None
        self.update = 0  # the update being trained (the model is told the count of those done before it)
        self.valid_index = 0  # which of the valid subsets the next validation's end is
        self.stepped = 0.0  # when the last update's values were reduced (a validation starts after it)
        self.pending: List[str] = []  # lines printed after fairseq's next log line
        self.handler: Optional[logging.Handler] = None

    def evaluate(self, meters) -> float:
        """The meter's value; on rank 0 in fairseq-train's loop also the record and line of what is being logged."""
        if self.broken:
            return math.nan
        try:
            return self.observed(meters)
        except Exception as error:  # noqa: BLE001  (a failure of the progress must never stop the training)
            self.broken = True
            print(f"[progress] no more estimates or records ({type(error).__name__}: {error}); training goes on")
            return math.nan

    def observed(self, meters) -> float:
        inner, active = metrics.get_meters("train_inner"), metrics.get_active_aggregators()
        if meters is inner:
            kind = "train"
        elif meters is metrics.get_meters("train"):
            kind = "epoch"
        elif any(meters is aggregator for aggregator in active):
            # One update's or one validation batch's own values, which the trainer reads as it reduces them.
            if inner is not None and any(inner is aggregator for aggregator in active):
                if self.progress is None and distributed_utils.get_global_rank() == 0:
                    self.start()
                self.valid_index, self.stepped = 0, time.time()
            elif self.progress is not None:
                self.progress.begin_validation(self.stepped)
            return math.nan
        else:
            kind = "valid"  # the end of a validation: its aggregator, no longer active, evaluated for the log
        if self.progress is None:
            return math.nan
        self.flush()
        values = {}
        for key in meters.keys():
            if key != METER and not key.startswith("_"):
                value = meters.get_smoothed_value(key)
                if isinstance(value, (int, float)) or hasattr(value, "item"):
                    values[key] = float(f"{float(value):g}")  # as fairseq's log lines show it
        update = values.get("num_updates")
        if update is None:  # a validation logs no update count: the trainer's
            update = metrics.get_meter("default", "num_updates").val
        record = dict(values, kind=kind, update=int(update))
        if kind == "valid":
            subsets = self.settings.valid_subsets
            record["subset"] = subsets[min(self.valid_index, len(subsets) - 1)]
            self.valid_index += 1
        self.pending += self.progress.add(record)
        return self.progress.done(record["update"])

    def start(self):
        settings = self.settings
        target = Target(settings.max_update, settings.max_epoch, settings.stop_time_hours, sys.argv[1:])
        records = None if settings.no_save else Path(settings.save_dir) / "progress.jsonl"
        refresh_seconds = float(os.environ.get(REFRESH_SECONDS) or 0)
        self.progress = Progress(records, target, os.environ.get(REFRESH), settings.workers, refresh_seconds)
        for record in self.notes:
            self.progress.add(record)
        # The lines go after fairseq's line of the same values: a handler after fairseq's own, on the root logger.
        self.handler = _AfterFairseqsLine(self)
        logging.getLogger().addHandler(self.handler)

    def note(self, record: dict):
        if self.progress is None:
            self.notes.append(record)
        else:
            self.progress.add(record)

    def flush(self):
        lines, self.pending = self.pending, []
        for line in lines:
            print(line, flush=True)

    def close(self):
        if self.handler is not None:
            logging.getLogger().removeHandler(self.handler)
        self.flush()
        if self.progress is not None:
            self.progress.finish()


class _AfterFairseqsLine(logging.Handler):
    def __init__(self, run: _Run):
        super().__init__()
        self.run = run

    def emit(self, record):
        if self.run.pending:
            self.run.flush()


_run: Optional[_Run] = None


def configure(settings: Settings, config=None):
    """A new run (an earlier one in this process closed): how it stops early is said in one line too; `config`:
    fairseq-train's whole configuration, for a signal's stop."""
    global _run
    close()
    _run = _Run(settings, config)
    if explain_stop not in cli.EXPLAINERS:
        cli.EXPLAINERS.append(explain_stop)
    stopping.quiet_full_disk_tracebacks()


def explain_stop(error: BaseException) -> Optional[str]:
    """The error hook's line for a training that diverged or a save that found no room (training/stopping.py), or a
    collective failed by a rank that died (training/watchdog.py)."""
    run = current()
    return (
        stopping.diverged(error, run, last_intact_checkpoint)
        or stopping.no_room(error, run, last_intact_checkpoint)
        or watchdog.lost(error)
    )


def configure_from(cfg: ProgressOptions):
    """The task, when fairseq builds it from a configuration with ProgressOptions' fields; one that cannot resolve
    them (a checkpoint's own configuration, read for decoding) trains nothing to watch."""
    try:
        settings = Settings(
            save_dir=cfg.save_dir,
            no_save=cfg.no_save,
            max_update=cfg.max_update,
            max_epoch=cfg.max_epoch,
            stop_time_hours=cfg.stop_time_hours,
            workers=cfg.distributed_world_size,
            valid_subsets=cfg.valid_subset.split(","),
        )
    except (AttributeError, KeyError, OmegaConfBaseException):
        return
    configure(settings, cfg._get_root() if hasattr(cfg, "_get_root") else None)
    watchdog.start(settings.save_dir, distributed_utils.get_global_rank(), settings.workers, last_intact_checkpoint)


def observe():
    """The task's reduce_metrics, at each reduction: the meter in the aggregators logged to."""
    if _run is not None:
        metrics.log_derived(METER, _evaluate, priority=1000)
        watchdog.step(_run.update)  # a step (an update or a validation batch): the watchdog's sign of progress


def stop_for_signal(how: str):
    """Every rank, in the update whose summed logging output carried a signal (training/preemption.py), named `how` as
    the job's ranks received it: fairseq's own stop at this update (its time limit, made tiny) without its validation,
    rank 0 saving checkpoint_last.pt; each rank leaves the marker (SAVE_DIR/stopped.json) that the recipes read."""
    if _run is None or _run.stopping or _run.config is None:
        return
    _run.stopping = True
    _run.config.optimization.stop_time_hours = 1e-12
    _run.config.dataset.disable_validation = True
    update = _run.update
    line = f"{how}: training stops after update {update:,}, checkpoint_last.pt saved without validating first"
    logging.getLogger(__name__).warning(line)
    # Every rank (the runs of other nodes read theirs: a recipe's WORK_DIR is shared), with the same update.
    stopping.write_marker(Path(_run.settings.save_dir), {"reason": "signal", "signal": how, "update": update})


def limit_moved(name: str, value):
    """fairseq's time or update limit (`stop_time_hours`, `max_update`), moved by the task (--leave-epochs): the ETA
    counts to it."""
    if _run is not None:
        setattr(_run.settings, name, value)
        if _run.progress is not None:
            setattr(_run.progress.target, name, value)


def _evaluate(meters) -> float:
    """The meter's function: the current run's (an aggregator may outlive a run of an earlier task)."""
    return math.nan if _run is None else _run.evaluate(meters)


def training_step(update: int):
    """The task's train_step, before each of its batches: `update` updates are done (fairseq's count, which its
    trainer set from the checkpoint it resumed from). The first: where this run starts, a resumption's record when
    it is past 0."""
    if _run is not None:
        _run.update = update + 1
    if _run is not None and _run.first_update is None:
        _run.first_update = update
        if update > 0:  # rank 0 alone writes the records: the others' would be read for nothing
            seconds = trained_before(_run) if distributed_utils.get_global_rank() == 0 else {}
            _run.note({"kind": "resumed", "update": update, **seconds})


def trained_before(run: _Run) -> dict:
    """The training time of the checkpoint fairseq resumed from (extra_state's previous_training_time, which
    --stop-time-hours counts on from), as {"training_seconds": s}; {} where it cannot be read. Which checkpoint, as
    fairseq's checkpoint_utils decides: SAVE_DIR/checkpoint_last.pt, on a first launch --continue-once's (another
    run's, as the parsing recipe's fine-tuning), or --restore-file's."""
    checkpoint = getattr(run.config, "checkpoint", None)
    restore = getattr(checkpoint, "restore_file", None) or "checkpoint_last.pt"
    path = Path(run.settings.save_dir) / "checkpoint_last.pt" if restore == "checkpoint_last.pt" else Path(restore)
    continued = getattr(checkpoint, "continue_once", None)
    if restore == "checkpoint_last.pt" and continued and not path.exists():
        path = Path(continued)
    try:  # memory-mapped: the bookkeeping alone is read
        return {"training_seconds": round(training_seconds(path), 3)}
    except Exception:  # noqa: BLE001  (the progress must never stop the training: the records' time is used)
        return {}


def current():
    """(save_dir, the update being trained, rank) of the run being watched; None outside fairseq-train."""
    if _run is None:
        return None
    return _run.settings.save_dir, _run.update, distributed_utils.get_global_rank()


def note(record: dict):
    """A record of the task's (the precision it decided)."""
    if _run is not None:
        _run.note(record)


@atexit.register
def close():
    """At the end of the process: the refresh under way waited for, the last lines printed."""
    global _run
    if _run is not None:
        _run.close()
    _run = None
    watchdog.stop()
