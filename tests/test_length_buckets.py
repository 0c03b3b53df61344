"""--length-buckets (tasks/length_buckets.py): a training batch padded to its bucket's shape, rows and time added,
gives the unpadded batch's loss, gradients and counts; an added row is finite and counts nothing; the batches of a
split take the shapes the log line says, among the documented ones. Eager here (--compile-layers dynamic with
buckets: tests/test_compiled_layers.py). Batches are fairseq's own collation (sources left-padded by default)."""

import logging
import re

import numpy as np
import pytest
import torch
from fairseq.data import LanguagePairDataset, ListDataset
from fairseq.data.language_pair_dataset import collate
from test_compiled_layers import DICTIONARY, PlainOptimizer, training_setup

from vaswani_plugin import VaswaniConfigError
from vaswani_plugin.tasks.length_buckets import bucket_sizes

# float32 sums over other row and time counts, blocked otherwise by the matrix products and attention: the added
# positions only add exact zeros (masked keys weigh exp(-inf) = 0, ignored targets send no gradient), so each sum
# moves by rounding, about sqrt(positions) x 1.2e-7 of its terms (1.5e-7 of a tensor's largest entry measured here,
# ~100 positions). 1e-5, relative and of each gradient's largest entry, is 10x that estimate; a padded row or
# position that counted would move the loss and gradients by a share of a row, 1e-2 or more.
RTOL = 1e-5
BUCKETS = ("--length-buckets", "4", "--max-tokens", "40")  # lengths 1, 4, 12, 40 (40 ** (i / 3), rounded up)
PAIRS = [(7, 3), (5, 5), (6, 2)]  # (source, target) lengths with </s>: 3 rows x 7 <= 40 tokens; padded to (8, 12, 12)


def sentence(generator, length):
    words = torch.randint(DICTIONARY.nspecial, len(DICTIONARY), (length,), generator=generator)
    words[-1] = DICTIONARY.eos()
    return words


def fairseq_batch(task, pairs, seed=1):
    """The batch fairseq's LanguagePairDataset collates of sentence pairs of these lengths, padded as task says."""
    generator = torch.Generator().manual_seed(seed)
    samples = [
        {"id": index, "source": sentence(generator, source), "target": sentence(generator, target)}
        for index, (source, target) in enumerate(pairs)
    ]
    return collate(samples, DICTIONARY.pad(), DICTIONARY.eos(), task.cfg.left_pad_source, task.cfg.left_pad_target)


def trained(task, model, criterion, sample):
    """One train_step: (loss, sample size, logging output, every parameter's gradient by name)."""
    model.zero_grad(set_to_none=True)
    loss, sample_size, logging_output = task.train_step(sample, model, criterion, PlainOptimizer(), update_num=0)
    return loss.detach(), sample_size, logging_output, {name: p.grad for name, p in model.named_parameters()}


def assert_same_step(padded, unpadded, rtol):
    """Two train_steps' losses (and the logging output's) and gradients equal within rtol (of each tensor's largest
    entry too), and their counts exactly."""
    (loss, sample_size, logging_output, gradients), (loss_0, sample_size_0, logging_output_0, gradients_0) = (
        padded,
        unpadded,
    )
    torch.testing.assert_close(loss, loss_0, rtol=rtol, atol=0)
    assert sample_size == sample_size_0 and logging_output.keys() == logging_output_0.keys()
    for key, value in logging_output.items():  # the sums within rtol (an AVX2 CPU's sums differ in the last bits)
        if torch.is_tensor(value) and value.is_floating_point():
            torch.testing.assert_close(value, logging_output_0[key], rtol=rtol, atol=0, msg=key)
        else:
            assert value == logging_output_0[key], key
    for name, gradient in gradients.items():
        scale = gradients_0[name].abs().max().item()
        torch.testing.assert_close(gradient, gradients_0[name], rtol=rtol, atol=rtol * scale, msg=name)


def buckets_and_eager(*arguments):
    """((task, model, criterion) with BUCKETS, (task, model, criterion) without), both models alike."""
    bucketed, eager = training_setup(*BUCKETS, *arguments), training_setup("--max-tokens", "40", *arguments)
    eager[1].load_state_dict(bucketed[1].state_dict())
    return bucketed, eager


@pytest.mark.parametrize(
    "arguments",
    [[], ["--left-pad-source"], ["--left-pad-target"], ["--sentence-avg"]],
    ids=["source-left-padded", "source-right-padded", "target-left-padded", "sentence-avg"],
)
def test_a_padded_batch_has_the_batchs_loss_gradients_and_counts(arguments):
    """5 rows added, 5 and 7 positions, each side where fairseq pads it: the loss, every gradient, the sample
    size and the logging output (ntokens, nsentences) as the unpadded batch's."""
    bucketed, eager = buckets_and_eager(*arguments)
    sample = fairseq_batch(bucketed[0], PAIRS)
    padded, _ = bucketed[0].length_buckets().padded(sample, eager[2], DICTIONARY, DICTIONARY)
    assert padded["net_input"]["src_tokens"].shape == padded["target"].shape == (8, 12)
    assert_same_step(trained(*bucketed, sample), trained(*eager, sample), RTOL)


def test_an_added_row_is_finite_and_counts_nothing():
    """The added rows: a source of one </s> (a key for every attention: a wholly masked row is NaN in the full
    softmax of eval's attention probabilities), all-padding targets; every output finite, in eval and training,
    and so every gradient (that they add nothing is the test above's)."""
    task, model, criterion = training_setup(*BUCKETS)
    sample = fairseq_batch(task, PAIRS)
    padded, _ = task.length_buckets().padded(sample, criterion, DICTIONARY, DICTIONARY)
    model.eval()
    with torch.no_grad():
        logits, extra = model(**padded["net_input"])
    assert torch.isfinite(logits).all() and torch.isfinite(extra["attn"][0]).all()
    source, target = padded["net_input"]["src_tokens"][3:], padded["target"][3:]
    assert source.ne(DICTIONARY.pad()).sum(1).tolist() == [1] * 5 and source[:, -1].eq(DICTIONARY.eos()).all()
    assert target.eq(DICTIONARY.pad()).all()
    assert padded["net_input"]["prev_output_tokens"][3:].eq(DICTIONARY.pad()).all()
    model.train()
    assert torch.isfinite(model(**padded["net_input"])[0]).all()
    loss, _, _, gradients = trained(task, model, criterion, sample)
    assert torch.isfinite(loss) and all(torch.isfinite(gradient).all() for gradient in gradients.values())


def test_the_sizes_rows_and_shapes_are_as_documented():
    """s_i = ceil(longest^(i/(N-1))); rows at s_k: max_tokens // (s_(k-1) + 1); every batch fairseq's --max-tokens
    makes is padded to one of the (number of sizes)^2 shapes, within r x max_tokens positions a side."""
    assert bucket_sizes(5, 16) == [1, 2, 4, 8, 16] and bucket_sizes(4, 40) == [1, 4, 12, 40]
    assert bucket_sizes(16, 1024)[:8] == [1, 2, 3, 4, 7, 11, 16, 26]  # 1024^(6/15) is 16, not 17
    task, _, _ = training_setup(*BUCKETS)
    buckets = task.length_buckets()
    assert buckets.rows == [40, 20, 8, 3]
    documented = {
        (buckets.rows[max(i, j)], s, t) for i, s in enumerate(buckets.sizes) for j, t in enumerate(buckets.sizes)
    }
    assert len(documented) == buckets.allowed() == 16
    ratio = 40 ** (1 / 3)
    for rows in range(1, 41):
        for source in range(1, 40 // rows + 1):
            for target in range(1, 40 // rows + 1):
                shape = buckets.shape(rows, source, target)
                assert shape in documented and shape[1] >= source and shape[2] >= target and shape[0] >= rows
                assert shape[0] * max(shape[1:]) <= ratio * 40


def test_the_log_line_counts_the_shapes_a_splits_batches_take(caplog):
    """At the training split's iterator: the sizes, the allowed shapes, and how many its batches take, padded
    (each one padded here as a training step pads it) and not."""
    task, _, criterion = training_setup(*BUCKETS)
    generator = torch.Generator().manual_seed(3)
    lengths = torch.randint(1, 14, (120, 2), generator=generator).tolist()
    sources, targets = ([sentence(generator, pair[side]) for pair in lengths] for side in (0, 1))
    source_sizes, target_sizes = (np.array([len(s) for s in side]) for side in (sources, targets))
    dataset = LanguagePairDataset(
        ListDataset(sources, source_sizes),
        source_sizes,
        DICTIONARY,
        ListDataset(targets, target_sizes),
        target_sizes,
        DICTIONARY,
    )
    task.datasets["train"] = dataset
    with caplog.at_level(logging.INFO, logger="vaswani_plugin.tasks.vaswani_translation"):
        iterator = task.get_batch_iterator(dataset, max_tokens=40, required_batch_size_multiple=8)
        task.get_batch_iterator(dataset, max_tokens=40)  # the same iterator again: no second line
    lines = [record.getMessage() for record in caplog.records if record.getMessage().startswith("length buckets")]
    assert len(lines) == 1, lines
    shapes, unpadded, positions = set(), set(), [0, 0]
    for sample in iterator.next_epoch_itr(shuffle=False):
        padded, _ = task.length_buckets().padded(sample, criterion, DICTIONARY, DICTIONARY)
        for seen, batch, kind in ((shapes, padded, 1), (unpadded, sample, 0)):
            rows, source = batch["net_input"]["src_tokens"].shape
            seen.add((rows, source, batch["target"].size(1)))
            positions[kind] += rows * (source + batch["target"].size(1))
    batches = len(iterator.frozen_batches)
    # the line's numbers in order: sizes, allowed shapes, batches, shapes taken (unpadded), position ratio
    counts = [str(batches), str(len(shapes)), str(len(unpadded)), f"{positions[1] / positions[0]:.2f}"]
    assert re.findall(r"\d+(?:\.\d+)?", lines[0]) == ["4", "1", "4", "12", "40", "16", *counts], lines[0]
    assert len(shapes) < len(unpadded), lines[0]


def test_one_size_or_no_batch_limit_is_a_one_line_error():
    with pytest.raises(VaswaniConfigError, match=re.escape("--length-buckets 1: give 0 (off) or 2 sizes or more")):
        training_setup("--length-buckets", "1")
    task, model, criterion = training_setup("--length-buckets", "8")
    message = "--length-buckets 8 pads a batch's rows up to what --max-tokens or --batch-size allows: set one"
    with pytest.raises(VaswaniConfigError, match=re.escape(message)):
        trained(task, model, criterion, fairseq_batch(task, PAIRS))
    assert training_setup("--length-buckets", "2", "--batch-size", "3")[0].length_buckets().rows == [3, 3]
