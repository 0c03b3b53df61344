"""§5.4 label smoothing: q(k) = (1-ε)[k = y] + ε/K over the K = V-1 non-padding symbols."""

import math

import pytest
import torch
import torch.nn.functional as F
from fairseq import metrics

from conftest import build_model, random_tokens
from vaswani_plugin.criterions.vaswani_label_smoothed_cross_entropy import (
    LabelSmoothedLoss,
    VaswaniLabelSmoothedCrossEntropy,
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


def label_smoothed_loss(logits, target, epsilon, padding_idx):
    """The criterion's loss and nll summed over the non-padding targets."""
    keep = target.ne(padding_idx)
    loss, nll, _ = LabelSmoothedLoss.apply(logits[keep], target[keep], epsilon, padding_idx)
    return loss.sum(), nll.sum()


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
    assert sample_size == 9 and log["total"] == 9
    with metrics.aggregate() as aggregator:
        VaswaniLabelSmoothedCrossEntropy.reduce_metrics([log])
        values = aggregator.get_smoothed_values()
    nll_bits = log["nll_loss"].item() / 9 / math.log(2)
    assert values["nll_loss"] == pytest.approx(nll_bits, abs=1e-3)
    assert values["ppl"] == pytest.approx(2 ** nll_bits, rel=1e-2)
    correct = lprobs.argmax(-1).eq(target).logical_and(target.ne(dictionary.pad())).sum().item()
    assert values["accuracy"] == pytest.approx(100.0 * correct / 9, abs=1e-3)


def test_logits_give_the_loss_of_their_log_probabilities(example):
    """The loss reads logits: any shift of a row (log_softmax is one) leaves it unchanged."""
    lprobs, target = example
    logits = lprobs + torch.randn(lprobs.size(0), 1) * 5
    for epsilon in (0.0, 0.1):
        assert label_smoothed_loss(logits, target, epsilon, PAD)[0].item() == pytest.approx(
            direct_loss(lprobs, target, epsilon), rel=1e-6)


def test_gradient_equals_autograd_of_the_definition():
    """The hand-written backward against autograd through log_softmax and the explicit q."""
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(7, 11, generator=generator, dtype=torch.float64) * 3
    target = torch.tensor([4, 0, 10, 3, 3, 2, 7])
    weights = torch.rand(7, generator=generator, dtype=torch.float64)
    epsilon = 0.1
    q = torch.full((7, 11), epsilon / 10, dtype=torch.float64)
    q[:, PAD] = 0.0
    q[torch.arange(7), target] += 1 - epsilon
    reference = logits.clone().requires_grad_()
    (-(q * torch.log_softmax(reference, dim=-1)).sum(-1) * weights).sum().backward()
    ours = logits.clone().requires_grad_()
    loss, *_ = LabelSmoothedLoss.apply(ours, target, epsilon, PAD)
    (loss * weights).sum().backward()
    torch.testing.assert_close(ours.grad, reference.grad, rtol=1e-10, atol=1e-12)


def test_second_backward_through_the_same_graph_is_refused():
    """The gradient overwrites the saved log-probabilities, so a retained graph must not be reused."""
    logits = torch.randn(3, 5, requires_grad=True)
    loss, *_ = LabelSmoothedLoss.apply(logits, torch.tensor([0, 2, 4]), 0.1, PAD)
    loss.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward only once"):
        loss.sum().backward()


def test_half_precision_logits_get_float32_loss_and_gradients_of_their_dtype():
    logits = torch.randn(5, 13).to(torch.bfloat16).requires_grad_()
    target = torch.tensor([2, 3, 12, 0, 5])
    loss, nll, _ = LabelSmoothedLoss.apply(logits, target, 0.1, PAD)
    assert loss.dtype == nll.dtype == torch.float32
    reference = logits.detach().float().requires_grad_()
    LabelSmoothedLoss.apply(reference, target, 0.1, PAD)[0].sum().backward()
    loss.sum().backward()
    assert logits.grad.dtype == torch.bfloat16
    torch.testing.assert_close(logits.grad.float(), reference.grad, rtol=1e-2, atol=1e-3)
