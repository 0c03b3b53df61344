"""vaswani_plugin/tasks/resumable_iterator.py: an epoch saved by 2 processes resumed by 1 (and the other way)
goes on at the same place in the epoch, where fairseq's own iterator re-reads batches or fails. And the task's
get_batch_iterator (tasks/vaswani_translation.py): a run resumed in a later epoch batches the examples as the
unbroken run did, where fairseq's own task batches them anew."""

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary, LanguagePairDataset, ListDataset, iterators
from fairseq.tasks.translation import TranslationTask

from vaswani_plugin.tasks.resumable_iterator import resumable
from vaswani_plugin.tasks.vaswani_translation import VaswaniTranslationConfig, VaswaniTranslationTask


class Sentences(torch.utils.data.Dataset):
    def __init__(self, count):
        self.count = count

    def __getitem__(self, index):
        return index

    def __len__(self):
        return self.count


def epoch(batches: int, shards: int = 1, shard: int = 0, plain: bool = False):
    """An iterator over `batches` one-sentence batches (sentence i is batch i), this process's shard of them."""
    iterator = iterators.EpochBatchIterator(
        dataset=Sentences(batches),
        collate_fn=lambda items: items,
        batch_sampler=[[i] for i in range(batches)],
        num_shards=shards,
        shard_id=shard,
        seed=1,
    )
    return iterator if plain else resumable(iterator)


def read(iterator, count=None):
    batches = iterator.next_epoch_itr(shuffle=False)
    return [next(batches)[0] for _ in range(count)] if count else [batch[0] for batch in batches]


def test_two_processes_to_one_goes_on_where_the_epoch_stopped():
    two = epoch(5, shards=2)
    assert read(two, 1) == [0]  # shard 0 of 2 read batches 0 and (its partner) 1
    state = two.state_dict()
    one = epoch(5)
    one.load_state_dict(state)
    assert read(one) == [2, 3, 4]
    plain = epoch(5, plain=True)
    plain.load_state_dict(state)
    assert read(plain) == [1, 2, 3, 4]  # fairseq's: batch 1 read twice


def test_one_process_to_two_past_a_shards_length_is_no_dataloader_mismatch():
    one = epoch(10)
    read(one, 7)
    state = one.state_dict()
    with pytest.raises(RuntimeError, match="dataloader mismatch"):
        epoch(10, shards=2, plain=True).load_state_dict(state)
    two = epoch(10, shards=2)
    two.load_state_dict(state)
    assert read(two) == [8]  # 7 of 10 read, 3.5 of shard 0's 5 (batches 0 2 4 6 8): it goes on at its fifth


def test_an_epoch_read_to_its_end_resumes_at_the_next():
    one = epoch(4)
    read(one, 3)
    state = dict(one.state_dict(), iterations_in_epoch=4, epoch_batches=4)
    two = epoch(6, shards=2)
    two.load_state_dict(state)
    assert two.epoch == 2 and two.iterations_in_epoch == 0


def test_the_same_layout_is_fairseqs_resumption():
    first = epoch(6, shards=2, shard=1)
    read(first, 2)
    again = epoch(6, shards=2, shard=1)
    again.load_state_dict(first.state_dict())
    assert read(again) == [5]


def pairs():
    """60 sentence pairs of 2 to 5 tokens (many ties in length: fairseq breaks them at random), one dictionary."""
    dictionary = Dictionary()
    dictionary.add_symbol("w")
    sentences = [torch.tensor([dictionary.index("w")] * (1 + i % 4) + [dictionary.eos()]) for i in range(60)]
    sizes = np.array([len(sentence) for sentence in sentences])
    dataset = ListDataset(sentences, sizes)
    return dictionary, LanguagePairDataset(dataset, sizes, dictionary, dataset, sizes, dictionary, shuffle=True)


def batches_read(task_class, dictionary, dataset, epoch, position=0, epochs_before=0):
    """The batches (example ids) of `epoch` that a new process of `task_class` reads: resumed at `position` of it
    (as fairseq's trainer resumes: the iterator made for the epoch, then the checkpoint's state), or after reading
    `epochs_before` whole epochs first (an unbroken run from epoch 1)."""
    config = VaswaniTranslationConfig() if task_class is VaswaniTranslationTask else None
    task = task_class(config, dictionary, dictionary)
    start = 1 if epochs_before else epoch
    iterator = task.get_batch_iterator(dataset=dataset, max_tokens=12, seed=1, epoch=start)
    if epochs_before:
        for _ in range(epochs_before):
            list(iterator.next_epoch_itr(shuffle=True))
    else:
        iterator.load_state_dict({"version": 2, "epoch": epoch, "iterations_in_epoch": position, "shuffle": True})
    assert iterator.next_epoch_idx == epoch
    return [sorted(batch["id"].tolist()) for batch in iterator.next_epoch_itr(shuffle=True)]


@pytest.mark.parametrize("position", [0, 3])
def test_a_run_resumed_in_a_later_epoch_reads_the_batches_of_the_unbroken_run(position):
    dictionary, dataset = pairs()
    unbroken = batches_read(VaswaniTranslationTask, dictionary, dataset, 3, epochs_before=2)
    assert sorted(sum(unbroken, [])) == list(range(60))
    assert batches_read(VaswaniTranslationTask, dictionary, dataset, 3, position) == unbroken[position:]
    # fairseq's own task batches the examples anew for the epoch it starts in: the same number of batches, others
    plain = batches_read(TranslationTask, dictionary, dataset, 3, position)
    assert len(plain) == len(unbroken) - position and plain != unbroken[position:]
