"""The optimizer `vaswani_adam` (§5.3) against fairseq's own `adam`: the same weights after N updates, the same
gradient clipping, resuming across its two implementations, its one-line errors."""

import pytest
import torch
from conftest import build_model, make_dictionary, random_tokens
from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig
from fairseq.utils import clip_grad_norm_

from vaswani_plugin import paper
from vaswani_plugin.criterions.vaswani_label_smoothed_cross_entropy import VaswaniLabelSmoothedCrossEntropy
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.optim.vaswani_adam import VaswaniAdam, VaswaniAdamConfig

BETAS = f"({paper.ADAM_BETAS[0]},{paper.ADAM_BETAS[1]})"
# The same update up to float32 rounding in another order (fused or foreach kernels against fairseq's loop),
# over 30 updates at rate 1e-3 (they differ by at most 1.2e-7 here).
TOLERANCE = dict(rtol=0, atol=1e-6)


def fairseq_adam(params, lr):
    return FairseqAdam(FairseqAdamConfig(adam_betas=BETAS, adam_eps=paper.ADAM_EPS, lr=[lr], tpu=False), params)


def vaswani_adam(params, lr, implementation="auto", **options):
    return VaswaniAdam(VaswaniAdamConfig(lr=[lr], adam_implementation=implementation, **options), params)


def batches(dictionary, count, seed=0):
    generator = torch.Generator().manual_seed(seed)
    for _ in range(count):
        source = random_tokens(dictionary, 4, 7, generator, lengths=[7, 5, 6, 3], left_pad=True)
        target = random_tokens(dictionary, 4, 6, generator, lengths=[6, 2, 4, 5])
        prev = torch.cat([torch.full((4, 1), dictionary.eos()), target[:, :-1]], dim=1)
        prev[target.eq(dictionary.pad())] = dictionary.pad()
        yield {
            "net_input": {
                "src_tokens": source,
                "src_lengths": source.ne(dictionary.pad()).sum(1),
                "prev_output_tokens": prev,
            },
            "target": target,
            "ntokens": int(target.ne(dictionary.pad()).sum()),
        }


def train(optimizer_for, updates, model=None, optimizer=None, seed=0):
    """(model, optimizer) after `updates` fairseq-style updates (summed loss, gradients / tokens, clip 0)."""
    dictionary = make_dictionary(20)
    if model is None:
        torch.manual_seed(0)
        model = build_model(dictionary, dropout=0.0).train()
    optimizer = optimizer or optimizer_for(list(model.parameters()))
    criterion = VaswaniLabelSmoothedCrossEntropy(
        type("Task", (), {"target_dictionary": dictionary})(), label_smoothing=0.1, sentence_avg=False
    )
    for sample in batches(dictionary, updates, seed):
        optimizer.zero_grad()
        loss, sample_size, _ = criterion(model, sample)
        optimizer.backward(loss)
        optimizer.multiply_grads(1.0 / sample_size)
        optimizer.clip_grad_norm(0.0)
        optimizer.step()
    return model, optimizer


def without_key_biases(model):
    """Every parameter but the key projections' biases, whose true gradient is 0 (a bias added to every key shifts
    each query's scores alike, which softmax ignores): Adam normalises their rounding noise into steps of ~lr, which
    differ between any two orders of float operations, and change nothing the model computes."""
    for name, p in model.named_parameters():
        if name.endswith("qkv_proj.bias") or name.endswith("kv_proj.bias"):
            qk = p.numel() - (p.numel() // 3 if name.endswith("qkv_proj.bias") else p.numel() // 2)
            keys = slice(qk // 2, qk) if name.endswith("qkv_proj.bias") else slice(0, qk)
            p = torch.cat([p[: keys.start], p[keys.stop :]])
        yield name, p


def log_probabilities(model):
    sample = next(batches(make_dictionary(20), 1, seed=7))
    with torch.no_grad():
        return model.eval().get_normalized_probs(model(**sample["net_input"]), log_probs=True)


@pytest.mark.parametrize("implementation", ["fused", "foreach"])
def test_same_weights_as_fairseqs_adam(implementation):
    reference, _ = train(lambda params: fairseq_adam(params, 1e-3), 30)
    model, optimizer = train(lambda params: vaswani_adam(params, 1e-3, implementation), 30)
    assert optimizer.implementation == implementation
    start, _ = train(lambda params: fairseq_adam(params, 1e-3), 0)
    moved = max((p - q).abs().max() for (_, p), (_, q) in zip(without_key_biases(reference), without_key_biases(start)))
    assert moved > 1e-2  # the updates are far larger than the tolerance
    for (name, ours), (_, theirs) in zip(without_key_biases(model), without_key_biases(reference)):
        torch.testing.assert_close(ours, theirs, **TOLERANCE, msg=name)
    torch.testing.assert_close(log_probabilities(model), log_probabilities(reference), rtol=0, atol=1e-5)


def test_gradient_clipping_is_fairseqs():
    generator = torch.Generator().manual_seed(1)
    for max_norm in (0.0, 0.5, 1e3):
        grads = [torch.randn(shape, generator=generator) for shape in ((5, 3), (7,), (2, 2, 2))]
        ours = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        theirs = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        for params in (ours, theirs):
            for p, g in zip(params, grads):
                p.grad = g.clone()
        norm = vaswani_adam(ours, 1e-3).clip_grad_norm(max_norm)
        torch.testing.assert_close(norm, clip_grad_norm_(theirs, max_norm), rtol=1e-6, atol=0)
        for p, q in zip(ours, theirs):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=0)


def test_resumes_across_implementations():
    """A checkpoint's optimizer state written by one implementation (a GPU's fused run) goes on under the other
    (foreach), as if never interrupted: the same 20 batches (10 of seed 0, then 10 of seed 1) in one run."""
    model, first = train(lambda params: vaswani_adam(params, 1e-3, "fused"), 10)
    second = vaswani_adam(list(model.parameters()), 1e-3, "foreach")
    second.load_state_dict(first.state_dict())
    assert not second.optimizer.param_groups[0]["fused"] and second.optimizer.param_groups[0]["foreach"]
    assert second.steps == first.steps == 10  # ε's bias correction goes on from there
    train(None, 10, model=model, optimizer=second, seed=1)
    reference, reference_optimizer = train(lambda params: vaswani_adam(params, 1e-3, "foreach"), 10)
    train(None, 10, model=reference, optimizer=reference_optimizer, seed=1)
    for (name, ours), (_, theirs) in zip(without_key_biases(model), without_key_biases(reference)):
        torch.testing.assert_close(ours, theirs, **TOLERANCE, msg=name)


def test_one_line_errors():
    params = [torch.nn.Parameter(torch.zeros(3))]
    with pytest.raises(VaswaniConfigError, match="--adam-implementation fast: choose one of auto, fused, foreach"):
        vaswani_adam(params, 1e-3, "fast")
    with pytest.raises(VaswaniConfigError, match="--adam-betas"):
        vaswani_adam(params, 1e-3, adam_betas="(0.9)")
    with pytest.raises(VaswaniConfigError, match="no fused Adam"):
        vaswani_adam([torch.nn.Parameter(torch.zeros(3, dtype=torch.complex64))], 1e-3, "fused")
