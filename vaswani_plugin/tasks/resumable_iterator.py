"""fairseq's epoch iterator, resumable on another hardware layout: its saved position says how much of the epoch
was read, so that a run resumed on more or fewer processes (or another --max-tokens) goes on where it stopped.

fairseq saves the position as a count of this process's batches; resumed where an epoch has another number of
them, fairseq raises "dataloader mismatch" (the count is past the end) or re-reads or skips batches. Here the
state also holds the epoch's batches and shards, and a state saved under another layout is moved to the same
share of the epoch, rounded to a batch (exact where the batches are the same and only the shards changed).
"""

import logging

from fairseq.data import iterators

logger = logging.getLogger(__name__)


class ResumableEpochBatchIterator(iterators.EpochBatchIterator):
    def state_dict(self):
        state = super().state_dict()
        state["epoch_batches"], state["shards"] = len(self.frozen_batches), self.num_shards
        return state

    def load_state_dict(self, state_dict):
        position, batches, shards = (state_dict.get(key) for key in ("iterations_in_epoch", "epoch_batches", "shards"))
        if position and batches and shards and (batches, shards) != (len(self.frozen_batches), self.num_shards):
            share = min(1.0, position * shards / batches)  # of the epoch's batches, read by all shards together
            moved = round(share * len(self.frozen_batches) / self.num_shards)
            logger.info(
                f"resuming epoch {state_dict['epoch']} {share:.1%} of the way through: saved at batch "
                f"{position} of {batches} in {shards} shard(s), now batch {moved} of "
                f"{len(self.frozen_batches)} in {self.num_shards}"
            )
            state_dict = dict(state_dict, iterations_in_epoch=moved)
            if moved >= len(self):  # the epoch was read to its end
                state_dict.update(epoch=state_dict["epoch"] + 1, iterations_in_epoch=0)
        super().load_state_dict(state_dict)


def resumable(iterator):
    """Make one of fairseq's EpochBatchIterators resumable on another layout (the class is all that changes)."""
    if type(iterator) is iterators.EpochBatchIterator:
        iterator.__class__ = ResumableEpochBatchIterator
    return iterator
