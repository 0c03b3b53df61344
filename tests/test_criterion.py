"""§5.4 label smoothing: q(k) = (1-ε)[k = y] + ε/K over the K = V-1 non-padding symbols."""

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import build_model, random_tokens
from fairseq import metrics

from vaswani_plugin.criterions.vaswani_label_smoothed_cross_entropy import VaswaniLabelSmoothedCrossEntropy
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.models.output_layer_loss import CPU_CHUNK_LOGITS, OutputLayerLoss

PAD = 1


def output_layer_loss(features, weight, target, epsilon, chunk_logits=CPU_CHUNK_LOGITS):
    """OutputLayerLoss over non-padding rows, gradients as grad mode asks (as SmoothedLoss calls it)."""
    return OutputLayerLoss.apply(features, weight, target, epsilon, PAD, chunk_logits, torch.is_grad_enabled())


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
    """The criterion's loss and nll summed over the non-padding targets (logits through an identity W)."""
    keep = target.ne(padding_idx)
    identity = torch.eye(logits.size(-1), dtype=logits.dtype)
    loss, nll, _ = OutputLayerLoss.apply(
        logits[keep], identity, target[keep], epsilon, padding_idx, CPU_CHUNK_LOGITS, torch.is_grad_enabled()
    )
    return loss, nll


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
        assert nll.item() == pytest.approx(
            F.nll_loss(lprobs, target, ignore_index=PAD, reduction="sum").item(), rel=1e-6
        )


def test_epsilon_zero_is_nll(example):
    lprobs, target = example
    loss, nll = label_smoothed_loss(lprobs, target, 0.0, PAD)
    assert loss.item() == pytest.approx(F.nll_loss(lprobs, target, ignore_index=PAD, reduction="sum").item(), rel=1e-6)
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
    sample = {
        "net_input": {"src_tokens": source, "src_lengths": torch.tensor([5, 5, 5]), "prev_output_tokens": prev},
        "target": target,
        "ntokens": int(target.ne(dictionary.pad()).sum()),
    }
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
    assert values["ppl"] == pytest.approx(2**nll_bits, rel=1e-2)
    correct = lprobs.argmax(-1).eq(target).logical_and(target.ne(dictionary.pad())).sum().item()
    assert values["accuracy"] == pytest.approx(100.0 * correct / 9, abs=1e-3)


def test_logits_give_the_loss_of_their_log_probabilities(example):
    """The loss reads logits: any shift of a row (log_softmax is one) leaves it unchanged."""
    lprobs, target = example
    logits = lprobs + torch.randn(lprobs.size(0), 1) * 5
    for epsilon in (0.0, 0.1):
        assert label_smoothed_loss(logits, target, epsilon, PAD)[0].item() == pytest.approx(
            direct_loss(lprobs, target, epsilon), rel=1e-6
        )


@pytest.mark.parametrize("chunk_logits", [2**22, 24], ids=["one_chunk", "chunks_of_2_tokens"])
def test_gradients_equal_autograd_of_the_definition(chunk_logits):
    """The written-out gradients for x and W of z = x W^T, chunk by chunk, against autograd through the
    projection, log_softmax and the explicit q; scaled as the loss is."""
    generator = torch.Generator().manual_seed(1)
    features = torch.randn(7, 5, generator=generator, dtype=torch.float64) * 2
    weight = torch.randn(11, 5, generator=generator, dtype=torch.float64)
    target = torch.tensor([4, 0, 10, 3, 3, 2, 7])
    epsilon = 0.1
    q = torch.full((7, 11), epsilon / 10, dtype=torch.float64)
    q[:, PAD] = 0.0
    q[torch.arange(7), target] += 1 - epsilon
    x_ref, w_ref = features.clone().requires_grad_(), weight.clone().requires_grad_()
    reference = -(q * torch.log_softmax(x_ref @ w_ref.T, dim=-1)).sum()
    (reference * 0.7).backward()
    x, w = features.clone().requires_grad_(), weight.clone().requires_grad_()
    loss, nll, correct = output_layer_loss(x, w, target, epsilon, chunk_logits)
    (loss * 0.7).backward()
    torch.testing.assert_close(loss, reference.detach(), rtol=1e-12, atol=0)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(w.grad, w_ref.grad, rtol=1e-10, atol=1e-12)
    logits = features @ weight.T
    assert nll.item() == pytest.approx(F.cross_entropy(logits, target, reduction="sum").item(), rel=1e-12)
    assert correct.item() == logits.argmax(-1).eq(target).sum().item()


def test_without_gradients_nothing_is_kept_for_backward():
    features, weight = torch.randn(4, 3), torch.randn(6, 3)
    with torch.no_grad():
        loss, _, _ = output_layer_loss(features, weight, torch.tensor([0, 2, 4, 5]), 0.1)
    assert loss.grad_fn is None
    frozen_weight = weight.clone()
    x = features.clone().requires_grad_()
    output_layer_loss(x, frozen_weight, torch.tensor([0, 2, 4, 5]), 0.1)[0].backward()
    assert x.grad is not None and frozen_weight.grad is None


def test_half_precision_gets_float32_loss_and_gradients_of_its_dtype():
    generator = torch.Generator().manual_seed(2)
    features = torch.randn(5, 8, generator=generator)
    weight = torch.randn(13, 8, generator=generator)
    target = torch.tensor([2, 3, 12, 0, 5])
    x, w = features.to(torch.bfloat16).requires_grad_(), weight.to(torch.bfloat16).requires_grad_()
    loss, nll, _ = output_layer_loss(x, w, target, 0.1)
    assert loss.dtype == nll.dtype == torch.float32
    x_ref, w_ref = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    output_layer_loss(x_ref, w_ref, target, 0.1)[0].backward()
    loss.backward()
    assert x.grad.dtype == w.grad.dtype == torch.bfloat16
    torch.testing.assert_close(x.grad.float(), x_ref.grad, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(w.grad.float(), w_ref.grad, rtol=2e-2, atol=2e-2)


def test_an_output_layer_other_than_a_bias_free_projection_is_refused(dictionary):
    model = build_model(dictionary)
    model.decoder.output_projection = torch.nn.Linear(32, len(dictionary))  # with a bias: not §3.4's
    task = type("Task", (), {"target_dictionary": dictionary})()
    criterion = VaswaniLabelSmoothedCrossEntropy(task, label_smoothing=0.1, sentence_avg=False)
    target = random_tokens(dictionary, 2, 4)
    sample = {
        "net_input": {"src_tokens": target, "src_lengths": torch.tensor([4, 4]), "prev_output_tokens": target},
        "target": target,
        "ntokens": 8,
    }
    with pytest.raises(ValueError, match="output_projection, a linear map without bias"):
        criterion(model, sample)
    # A user's mistake: fairseq's commands print it in one line (cli.install_error_hook).
    with pytest.raises(VaswaniConfigError):
        criterion(model, sample)
