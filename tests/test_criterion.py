"""§5.4 label smoothing: q(k) = (1-ε)[k = y] + ε/K over the K = V-1 non-padding symbols."""

import math

import pytest
import torch
import torch.nn.functional as F
from fairseq import metrics

from conftest import build_model, random_tokens
from vaswani_plugin.criterions.vaswani_label_smoothed_cross_entropy import (
    VaswaniLabelSmoothedCrossEntropy,
    label_smoothed_loss,
)

PAD = 1


def direct_loss(lprobs, target, epsilon):
    """-Σ_k q(k) log p(k), summed over non-padding positions, with q built as an explicit vector."""
    vocab = lprobs.size(1)
    total = 0.0
    for row, y in enumerate(target.tolist()):
        if y == PAD:
            continue
        q = torch.full((vocab,), epsilon / (vocab - 1), dtype=torch.float64)
        q[PAD] = 0.0
        q[y] += 1.0 - epsilon
        total -= (q * lprobs[row].double()).sum().item()
    return total


@pytest.fixture
def example():
    generator = torch.Generator().manual_seed(0)
    lprobs = torch.log_softmax(torch.randn(6, 9, generator=generator), dim=-1)
    target = torch.tensor([4, 0, 8, PAD, 3, PAD])
    return lprobs, target


def test_smoothed_target_is_a_distribution_over_non_padding_symbols():
    vocab, epsilon = 9, 0.1
    q = torch.full((vocab,), epsilon / (vocab - 1))
    q[PAD] = 0.0
    q[4] += 1 - epsilon
    assert q.sum().item() == pytest.approx(1.0)


def test_loss_equals_direct_computation(example):
    lprobs, target = example
    for epsilon in (0.1, 0.3):
        loss, nll = label_smoothed_loss(lprobs, target, epsilon, PAD)
        assert loss.item() == pytest.approx(direct_loss(lprobs, target, epsilon), rel=1e-6)
        assert nll.item() == pytest.approx(F.nll_loss(lprobs, target, ignore_index=PAD, reduction="sum").item(),
                                           rel=1e-6)


def test_epsilon_zero_is_nll(example):
    lprobs, target = example
    loss, nll = label_smoothed_loss(lprobs, target, 0.0, PAD)
    assert loss.item() == pytest.approx(F.nll_loss(lprobs, target, ignore_index=PAD, reduction="sum").item(),
                                        rel=1e-6)
    assert loss.item() == pytest.approx(nll.item(), rel=1e-12)


def test_padding_contributes_nothing(example):
    lprobs, target = example
    loss, nll = label_smoothed_loss(lprobs, target, 0.1, PAD)
    # Other log-probabilities at padding positions change nothing ...
    changed = lprobs.clone()
    changed[target.eq(PAD)] = torch.log_softmax(torch.randn(2, 9), dim=-1)
    assert label_smoothed_loss(changed, target, 0.1, PAD)[0].item() == pytest.approx(loss.item(), rel=1e-12)
    # ... and dropping the padding positions altogether changes nothing.
    keep = target.ne(PAD)
    assert label_smoothed_loss(lprobs[keep], target[keep], 0.1, PAD)[0].item() == pytest.approx(loss.item())


def test_criterion_logs_loss_nll_ppl_and_accuracy(dictionary):
    torch.manual_seed(0)
    model = build_model(dictionary).eval()
    generator = torch.Generator().manual_seed(0)
    source = random_tokens(dictionary, 3, 5, generator)
    target = random_tokens(dictionary, 3, 4, generator, lengths=[4, 2, 3])
    prev = torch.roll(target, 1, dims=1)
    sample = {"net_input": {"src_tokens": source, "src_lengths": torch.tensor([5, 5, 5]),
                            "prev_output_tokens": prev},
              "target": target, "ntokens": int(target.ne(dictionary.pad()).sum())}
    task = type("Task", (), {"target_dictionary": dictionary})()
    criterion = VaswaniLabelSmoothedCrossEntropy(task, label_smoothing=0.1, sentence_avg=False)
    loss, sample_size, log = criterion(model, sample)
    lprobs = model.get_normalized_probs(model(**sample["net_input"]), log_probs=True)
    expected = direct_loss(lprobs.view(-1, len(dictionary)), target.view(-1), 0.1)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert sample_size == 9 and log["total"].item() == 9
    with metrics.aggregate() as aggregator:
        VaswaniLabelSmoothedCrossEntropy.reduce_metrics([log])
        values = aggregator.get_smoothed_values()
    nll_bits = log["nll_loss"].item() / 9 / math.log(2)
    assert values["nll_loss"] == pytest.approx(nll_bits, abs=1e-3)
    assert values["ppl"] == pytest.approx(2 ** nll_bits, rel=1e-2)
    correct = lprobs.argmax(-1).eq(target).logical_and(target.ne(dictionary.pad())).sum().item()
    assert values["accuracy"] == pytest.approx(100.0 * correct / 9, abs=1e-3)
