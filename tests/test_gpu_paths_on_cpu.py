"""What the GPU training path needs of the model and criterion, proven on CPU: float16 weight gradients that
overflow only where fairseq's autograd would, no gradient work without grad mode, DDP with
find_unused_parameters, no host syncs a GPU would wait on, chunks chosen by device, and the declared torch floor."""

import re
import tomllib
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from cli_helpers import benchmark
from conftest import build_model, make_dictionary, random_tokens
from torch.utils.flop_counter import FlopCounterMode

from vaswani_plugin.criterions.vaswani_label_smoothed_cross_entropy import VaswaniLabelSmoothedCrossEntropy
from vaswani_plugin.models import output_layer_loss
from vaswani_plugin.models.output_layer_loss import SmoothedLoss, real_positions

REPO = Path(__file__).resolve().parents[1]
PAD = 1
host_cost_counts = benchmark("host_cost_counts")  # host_cost.py's counter of the calls that make a host wait for a GPU


def sample_for(dictionary, batch=4, generator=None, lengths=(6, 2, 4, 5)):
    generator = generator or torch.Generator().manual_seed(0)
    source = random_tokens(dictionary, batch, 7, generator, lengths=[7, 5, 6, 3][:batch])
    target = random_tokens(dictionary, batch, max(lengths), generator, lengths=list(lengths)[:batch])
    prev = torch.cat([torch.full((batch, 1), dictionary.eos()), target[:, :-1]], dim=1)
    prev[target.eq(dictionary.pad())] = dictionary.pad()
    return {
        "net_input": {
            "src_tokens": source,
            "src_lengths": source.ne(dictionary.pad()).sum(1),
            "prev_output_tokens": prev,
        },
        "target": target,
        "ntokens": int(target.ne(dictionary.pad()).sum()),
    }


def criterion_for(dictionary, **options):
    task = SimpleNamespace(target_dictionary=dictionary)
    return VaswaniLabelSmoothedCrossEntropy(task, label_smoothing=0.1, sentence_avg=False, **options)


def smoothed_loss_sum(logits, target, epsilon):
    """§5.4 summed over tokens, through autograd (float32 log-probabilities, as fairseq's criterion takes them)."""
    lprobs = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
    q = torch.full_like(lprobs, epsilon / (lprobs.size(-1) - 1))
    q[:, PAD] = 0.0
    q[torch.arange(len(target)), target] += 1 - epsilon
    return -(q * lprobs).sum()


def test_float16_weight_gradient_overflows_only_where_autograd_would():
    """V = 100, 16k tokens, one frequent symbol, features with a common offset: the sum over tokens of dL/dW for
    that symbol is ~1.2e5, past float16's 65504, but fairseq's loss scale (2^-6 here) brings it back in range."""
    generator = torch.Generator().manual_seed(0)
    tokens, dim, vocab = 16384, 16, 100
    features = (torch.randn(tokens, dim, generator=generator) + 8.0).half()
    weight = (torch.randn(vocab, dim, generator=generator) * 0.01).half()
    target = torch.randint(4, vocab, (tokens,), generator=generator)
    target[torch.rand(tokens, generator=generator) < 0.9] = 5
    for scale, finite in ((2.0**-6, True), (2.0**4, False)):
        # fairseq's path: F.linear in float16, log_softmax in float32, (loss x scale).backward().
        x_ref, w_ref = features.clone().requires_grad_(), weight.clone().requires_grad_()
        (smoothed_loss_sum(F.linear(x_ref, w_ref), target, 0.1) * scale).backward()
        assert bool(torch.isfinite(w_ref.grad).all()) == finite  # the case is the one described
        x, w = features.clone().requires_grad_(), weight.clone().requires_grad_()
        loss, _, _ = SmoothedLoss(target[None], 0.1, PAD, tokens)(x[None], w)
        (loss * scale).backward()
        assert w.grad.dtype == x.grad.dtype == torch.float16
        assert bool(torch.isfinite(w.grad).all()) == finite  # overflows exactly where autograd does
    # Where finite, the gradient is the float64 one, scaled, within float16 rounding.
    x64, w64 = features.double().requires_grad_(), weight.double().requires_grad_()
    (smoothed_loss_sum(x64 @ w64.T, target, 0.1) * 2.0**-6).backward()
    x, w = features.clone().requires_grad_(), weight.clone().requires_grad_()
    (SmoothedLoss(target[None], 0.1, PAD, tokens)(x[None], w)[0] * 2.0**-6).backward()
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=1e-2, atol=1e-3)
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-2, atol=1e-6)


def test_float16_gradients_keep_small_probabilities():
    """∂loss/∂z of a confident model is mostly tiny probabilities (here ~1e-7, below float16's normal range) that
    float16 would flush or round coarsely unless scaled, as fairseq's loss scale does in autograd. The gradient
    for W of those rare words equals float64's within float16 rounding."""
    generator = torch.Generator().manual_seed(1)
    features = (1 + 0.1 * torch.randn(512, 8, generator=generator)).half()
    weight = 0.1 * torch.randn(50, 8, generator=generator)
    weight[5] += 1  # the target: logit ~8
    weight[10:20] -= 1.2  # rare words: logit ~-10, p ~ e^-18, under half of float16's smallest subnormal
    weight, target = weight.half(), torch.full((512,), 5)
    x, w = features.clone().requires_grad_(), weight.clone().requires_grad_()
    (SmoothedLoss(target[None], 0.0, PAD, 512)(x[None], w)[0] * 1024).backward()
    w64 = weight.double().requires_grad_()
    (F.cross_entropy(features.double() @ w64.T, target, reduction="sum") * 1024).backward()
    probabilities = (features.double() @ weight.double().T).softmax(-1)[:, 10:20]
    assert probabilities.median() < 2.9e-8  # unscaled, most would flush to zero in float16
    torch.testing.assert_close(w.grad.double()[10:20], w64.grad[10:20], rtol=1e-2, atol=0)


def output_layer_flops(dictionary, grad_mode):
    torch.manual_seed(0)
    model = build_model(dictionary).eval()
    sample = sample_for(dictionary)
    criterion = criterion_for(dictionary)
    with torch.set_grad_enabled(grad_mode):
        with FlopCounterMode(display=False) as with_loss:
            criterion(model, sample)
        with FlopCounterMode(display=False) as features_only:
            model(**sample["net_input"], features_only=True)
    return with_loss.get_total_flops() - features_only.get_total_flops(), sample["ntokens"]


def test_no_gradient_work_without_grad_mode(dictionary):
    """Validation (fairseq's valid_step, fairseq-validate) runs under no_grad with parameters that require grad:
    the output layer's forward product only, 2·tokens·V·d FLOPs; training adds the two gradient products."""
    flops, tokens = output_layer_flops(dictionary, grad_mode=False)
    assert flops == 2 * tokens * len(dictionary) * 32
    flops, tokens = output_layer_flops(dictionary, grad_mode=True)
    assert flops == 3 * 2 * tokens * len(dictionary) * 32


def test_real_positions_without_a_sync_equal_boolean_indexing():
    generator = torch.Generator().manual_seed(3)
    target = random_tokens(make_dictionary(20), 5, 9, generator, lengths=[9, 1, 4, 7, 3])
    features = torch.randn(5, 9, 6, generator=generator)
    keep = target.ne(PAD)
    x, y = real_positions(features, target, PAD, int(keep.sum()))
    torch.testing.assert_close(x, features[keep])
    assert torch.equal(y, target[keep])


def test_chunks_by_device(monkeypatch):
    """CPU: 2^22 logits (16 MB in float32). GPU: 1/32 of its memory, so the recipes' batches (up to 4,096 tokens,
    V = 37,000) are one chunk on an 80 GB card and a few on a 16 GB one, and the loss is the same in any chunking."""
    assert output_layer_loss.chunk_logits_for(torch.device("cpu")) == 2**22
    for gigabytes, chunks in ((80, 1), (16, 4)):
        monkeypatch.setattr(
            torch.cuda, "get_device_properties", lambda device, gb=gigabytes: SimpleNamespace(total_memory=gb * 10**9)
        )
        rows = output_layer_loss.chunk_logits_for(torch.device("cuda")) // 37000
        assert -(-4096 // rows) == chunks
    dictionary = make_dictionary(30)
    torch.manual_seed(0)
    model = build_model(dictionary).eval()
    sample = sample_for(dictionary)
    one = criterion_for(dictionary)(model, sample)[0]
    many = criterion_for(dictionary, loss_chunk_logits=2 * len(dictionary))(model, sample)[0]  # 2 tokens a chunk
    torch.testing.assert_close(many, one, rtol=1e-6, atol=0)


def test_no_host_sync_in_a_training_forward(dictionary):
    """Model forward and loss of a training step: no sync. Right-padded targets (what the task collates) take
    SDPA's causal kernel unasked; a batch padded otherwise stops on the device's check (here at once, on the CPU).
    Control: the counter sees fairseq's own transformer sync on its padding masks."""
    torch.manual_seed(0)
    model = build_model(dictionary).train()
    sample = sample_for(dictionary)
    with host_cost_counts.HostSyncs() as syncs:
        loss, _, _ = criterion_for(dictionary)(model, sample)
    assert not syncs.calls
    left = {**sample, "net_input": {**sample["net_input"], "prev_output_tokens": left_padded(sample, dictionary)}}
    with pytest.raises(RuntimeError, match="padded before a real token"):
        criterion_for(dictionary)(model, left)
    from fairseq.models.transformer import TransformerModel, base_architecture

    args = Namespace(
        encoder_embed_dim=32,
        decoder_embed_dim=32,
        encoder_ffn_embed_dim=64,
        decoder_ffn_embed_dim=64,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_layers=1,
        decoder_layers=1,
        share_all_embeddings=True,
    )
    base_architecture(args)
    fairseq_model = TransformerModel.build_model(
        args, SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    ).train()
    with host_cost_counts.HostSyncs() as syncs:
        criterion_for(dictionary)(fairseq_model, sample)
    assert len(syncs.calls) >= 2


def left_padded(sample, dictionary):
    prev = sample["net_input"]["prev_output_tokens"]
    rows = [row[row.ne(dictionary.pad())] for row in prev]
    return torch.stack([torch.cat([row.new_full((prev.size(1) - len(row),), dictionary.pad()), row]) for row in rows])


def test_left_padded_targets_train_as_the_task_declares_them(dictionary):
    """A task with left_pad_target true: the model masks every row explicitly and trains without a sync; each
    sentence's loss is the one of its right-padded form (positions count from its first real token)."""
    sample = sample_for(dictionary)
    right = build_model(dictionary, dropout=0.0).train()
    task = SimpleNamespace(
        source_dictionary=dictionary, target_dictionary=dictionary, cfg=SimpleNamespace(left_pad_target=True)
    )
    left = type(right).build_model(right.cfg, task).train()
    left.load_state_dict(right.state_dict())
    target = sample["target"]
    rows = [row[row.ne(dictionary.pad())] for row in target]
    left_target = torch.stack(
        [torch.cat([row.new_full((target.size(1) - len(row),), dictionary.pad()), row]) for row in rows]
    )
    left_sample = {
        **sample,
        "target": left_target,
        "net_input": {**sample["net_input"], "prev_output_tokens": left_padded(sample, dictionary)},
    }
    with host_cost_counts.HostSyncs() as syncs:
        left_loss = criterion_for(dictionary)(left, left_sample)[0]
    assert not syncs.calls
    torch.testing.assert_close(left_loss, criterion_for(dictionary)(right, sample)[0])


def ddp_worker(rank, folder):
    """Rank `rank` of 2: one step of DDP(find_unused_parameters=True) as fairseq wraps models (ModuleProxyWrapper),
    tied and untied output layers; saves its all-reduced gradients and the single-process reference."""
    from fairseq.distributed import ModuleProxyWrapper
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{folder}/init", rank=rank, world_size=2)
    try:
        dictionary = make_dictionary(20)
        samples = [sample_for(dictionary, generator=torch.Generator().manual_seed(seed)) for seed in (0, 1)]
        for tied in (False, True):
            torch.manual_seed(0)
            model = build_model(dictionary, dropout=0.0, share_all_embeddings=tied)
            reference = build_model(dictionary, dropout=0.0, share_all_embeddings=tied)
            reference.load_state_dict(model.state_dict())
            wrapped = ModuleProxyWrapper(DistributedDataParallel(model, find_unused_parameters=True))
            criterion = criterion_for(dictionary)
            criterion(wrapped, samples[rank])[0].backward()
            for sample in samples:  # DDP averages over ranks
                (criterion(reference, sample)[0] / 2).backward()
            torch.save(
                (
                    {n: p.grad for n, p in model.named_parameters()},
                    {n: p.grad for n, p in reference.named_parameters()},
                ),
                f"{folder}/{rank}-{tied}.pt",
            )
    finally:
        dist.destroy_process_group()


def test_ddp_with_find_unused_parameters(tmp_path):
    """The criterion's output layer is part of the wrapped model's forward: DDP with --find-unused-parameters
    (gloo, 2 CPU processes) trains untied and tied output layers, and its averaged gradients are the single-process
    ones."""
    mp.start_processes(ddp_worker, args=(str(tmp_path),), nprocs=2, start_method="spawn")
    for rank in (0, 1):
        for tied in (False, True):
            grads, expected = torch.load(tmp_path / f"{rank}-{tied}.pt", weights_only=True)
            assert grads.keys() == expected.keys() and None not in grads.values()
            for name, grad in grads.items():
                torch.testing.assert_close(grad, expected[name], rtol=1e-5, atol=1e-7, msg=name)


# The torch release that introduced each API the package uses, found by these patterns in its source.
# torch.mm(out_dtype=...) (2.8) is used only where a first product shows it works (float16_products_in_float32).
TORCH_APIS = {
    r"torch\.get_autocast_dtype\(": (2, 4),
    r"torch\.is_autocast_enabled\(\w": (2, 4),  # with a device type
    r"scaled_dot_product_attention\(": (2, 0),
    r"is_causal=": (2, 0),
    r"argsort\([^)]*stable=": (1, 13),
    r"weights_only=": (1, 13),
    r"mmap=": (2, 1),
}


def test_declared_torch_floor_is_the_apis_used():
    source = "\n".join(path.read_text() for path in (REPO / "vaswani_plugin").rglob("*.py"))
    used = {pattern: version for pattern, version in TORCH_APIS.items() if re.search(pattern, source)}
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    declared = re.fullmatch(r"torch>=(\d+)\.(\d+)", " ".join(d for d in dependencies if d.startswith("torch")))
    assert declared, "pyproject.toml declares no torch floor"
    assert tuple(map(int, declared.groups())) == max(used.values()), used
    assert callable(torch.get_autocast_dtype) and callable(torch.is_autocast_enabled)


def fp16_output_layer_gradients():
    """Gradients for x and W of the float16 output layer on a case whose per-chunk sums pass 65504 (as in
    test_float16_weight_gradient_overflows_only_where_autograd_would), and float64's, scaled by 2^-6."""
    generator = torch.Generator().manual_seed(0)
    tokens, vocab = 4096, 100
    features = (torch.randn(tokens, 16, generator=generator) + 8.0).half()
    weight = (torch.randn(vocab, 16, generator=generator) * 0.01).half()
    target = torch.randint(4, vocab, (tokens,), generator=generator)
    target[torch.rand(tokens, generator=generator) < 0.9] = 5
    x, w = features.clone().requires_grad_(), weight.clone().requires_grad_()
    (SmoothedLoss(target[None], 0.1, PAD, tokens)(x[None], w)[0] * 2.0**-6).backward()
    x64, w64 = features.double().requires_grad_(), weight.double().requires_grad_()
    (smoothed_loss_sum(x64 @ w64.T, target, 0.1) * 2.0**-6).backward()
    return (x.grad, w.grad), (x64.grad, w64.grad)


def float32_kernel(a, b):
    """A right out_dtype kernel: float16 products summed in float32."""
    return torch.mm(a.float(), b.float())


FAULTY_KERNELS = {  # what a GPU's kernel could get wrong, and what the check says
    "sums in float16": (lambda a, b: torch.mm(a, b).float(), "gave wrong numbers (relative error inf against"),
    "ignores a transposed operand's strides": (
        lambda a, b: torch.mm(torch.as_strided(a, a.shape, (a.size(1), 1)).float(), b.float()),
        "gave wrong numbers",
    ),
    "returns float16": (lambda a, b: torch.mm(a, b), "returned torch.float16 (16, 24) for float32 (16, 24)"),
    "refuses": (
        lambda a, b: torch.mm(a, b, out_dtype=torch.float32),
        "refused (NotImplementedError: Could not run 'aten::mm.dtype' with arguments from the 'CPU' backend)",
    ),
}


@pytest.mark.parametrize("fault", FAULTY_KERNELS)
def test_float16_products_fall_back_to_float32_where_the_kernel_fails(fault, monkeypatch, caplog):
    """The out_dtype kernel (CUDA only: this CPU's torch refuses it, the last case) is tried on a device's first
    float16 product; a refusal or wrong numbers give float32 products, one log line, and float64's gradients."""
    kernel, problem = FAULTY_KERNELS[fault]
    calls = []
    monkeypatch.setattr(output_layer_loss, "FLOAT16_PRODUCTS_IN_FLOAT32", {})
    monkeypatch.setattr(output_layer_loss, "mm_out_float32", lambda a, b: calls.append(1) or kernel(a, b))
    with caplog.at_level("INFO", logger=output_layer_loss.__name__):
        for _ in range(2):
            (x_grad, w_grad), (x64, w64) = fp16_output_layer_gradients()
            torch.testing.assert_close(w_grad.double(), w64, rtol=1e-2, atol=1e-3)
            torch.testing.assert_close(x_grad.double(), x64, rtol=1e-2, atol=1e-6)
    assert output_layer_loss.FLOAT16_PRODUCTS_IN_FLOAT32 == {"cpu": False}
    assert len(calls) <= 2  # the check's two layouts; no product after it
    (record,) = caplog.records  # one line for the device, however many products
    assert record.levelname == "WARNING" and record.getMessage().startswith(
        f"float16 products on cpu: torch.mm(out_dtype=torch.float32) {problem}"
    )
    assert record.getMessage().endswith("; the operands are converted to float32 instead")


def test_float16_products_use_the_kernel_where_it_passes(monkeypatch, caplog):
    calls = []
    monkeypatch.setattr(output_layer_loss, "FLOAT16_PRODUCTS_IN_FLOAT32", {})
    monkeypatch.setattr(
        output_layer_loss, "mm_out_float32", lambda a, b: calls.append(a.stride()) or float32_kernel(a, b)
    )
    with caplog.at_level("INFO", logger=output_layer_loss.__name__):
        (x_grad, w_grad), (x64, w64) = fp16_output_layer_gradients()
    torch.testing.assert_close(w_grad.double(), w64, rtol=1e-2, atol=1e-3)
    torch.testing.assert_close(x_grad.double(), x64, rtol=1e-2, atol=1e-6)
    assert output_layer_loss.FLOAT16_PRODUCTS_IN_FLOAT32 == {"cpu": True}
    # The check's two layouts, then the products: ∂loss/∂z row-major for x, its transposed view for W.
    assert calls[:2] == [(128, 1), (1, 128)] and calls[2:] == [(100, 1), (1, 100)]
    assert [r.getMessage() for r in caplog.records] == [
        "float16 products on cpu: torch.mm(out_dtype=torch.float32), checked against float32"
    ]
