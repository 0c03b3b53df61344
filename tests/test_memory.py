"""vaswani_plugin/models/memory.py (the memory a training step holds) and tools/gpu_batch.py (the GPU's batch the
recipes choose by it). The model against measured peaks: tests/test_host_cost.py (a CPU's), the GPU acceptance."""

import dataclasses
import types

import pytest
import torch
from cli_helpers import REPO, benchmark
from conftest import build_model, make_dictionary, random_tokens
from fake_gpus import fake

from recipes import stages, training
from vaswani_plugin.models import memory
from vaswani_plugin.tools import gpu_batch

GIB = 2**30


def fake_gpu(monkeypatch, gib, capability=(9, 0)):
    """torch sees one GPU of `gib` GiB and compute `capability` (its properties only: nothing runs on it)."""
    fake(torch, f"{capability[0]}.{capability[1]}:Fake GPU {gib:g}:{gib}", monkeypatch.setattr)


@pytest.mark.parametrize("share", ["all", "output", "none"])
def test_parameters_are_the_built_models(share):
    source, target = make_dictionary(30), make_dictionary(30 if share == "all" else 45)
    model = build_model(
        source,
        target,
        encoder_layers=2,
        decoder_layers=3,
        share_all_embeddings=share == "all",
        share_decoder_input_output_embed=share == "output",
    )
    sizes = memory.Sizes(2, 32, 64, 4, len(source), len(target), share, decoder_layers=3)
    assert memory.parameters(sizes) == sum(p.numel() for p in model.parameters())


def test_the_largest_batch_is_the_brute_force_largest():
    """largest_batch solves peak <= memory for the tokens; brute force: every multiple of 256 tried, with source and
    target both at the bound and the output layer's chunk full (chunks of 300 logits: full from the first token)."""
    sizes = memory.Sizes(6, 1024, 4096, 16, 37000, 37000)
    for precision in memory.PRECISIONS:
        for gib in (16, 80):
            budget = int(gib * GIB * memory.GPU_MEMORY_SHARE)
            fitting = [
                tokens
                for tokens in range(0, 400_000, memory.TOKENS_MULTIPLE)
                if memory.peak_bytes(sizes, precision, tokens, tokens, 300) <= budget
            ]
            assert memory.largest_batch(sizes, precision, budget, 300) == max(fitting) > 0
    assert memory.largest_batch(sizes, "float32", 16 * memory.parameters(sizes), 300) == 0  # the state alone


def test_gpu_batch_reads_the_model_and_precision_of_the_command(monkeypatch, reversal_data, capsys):
    fake_gpu(monkeypatch, 80)
    data = reversal_data / "joined"
    words = [
        str(data),
        "--user-dir",
        str(REPO / "vaswani_plugin"),
        "--task",
        "vaswani_translation",
        "--arch",
        "vaswani_transformer_big",
        "--share-all-embeddings",
        "--encoder-ffn-embed-dim",
        "2048",
        "--decoder-ffn-embed-dim",
        "2048",
    ]
    vocabulary = len(make_dictionary(0).load(str(data / "dict.src.txt")))
    chunk = int(80 * GIB / 32) // memory.BYTES_PER_LOGIT  # output_layer_loss.chunk_logits_for an 80 GiB card
    for flags, capability, precision in (
        ([], (9, 0), "float32"),
        (["--tf32"], (9, 0), "float32"),
        (["--fp16"], (9, 0), "fp16"),
        (["--amp"], (7, 0), "amp"),
        (["--bf16-autocast", "on"], (6, 0), "bf16"),
        # auto as the task decides it on the smallest card: bfloat16 from compute capability 8.0, not below.
        (["--bf16-autocast", "auto"], (9, 0), "bf16"),
        (["--bf16-autocast", "auto"], (8, 0), "bf16"),
        (["--bf16-autocast", "auto"], (7, 5), "float32"),
        (["--bf16-autocast", "auto", "--fp16"], (8, 0), "fp16"),
    ):
        fake_gpu(monkeypatch, 80, capability)
        gpu_batch.main(words + flags)
        expected = memory.largest_batch(
            memory.Sizes(6, 1024, 2048, 16, vocabulary, vocabulary),
            precision,
            int(80 * GIB * memory.GPU_MEMORY_SHARE),
            chunk,
        )
        printed, said = capsys.readouterr()
        assert printed.strip() == str(expected) and f"in {precision} (" in said and "Fake GPU 80's 80 GiB" in said


def test_the_one_gpu_default_is_the_papers_step_in_the_fewest_batches(monkeypatch, tmp_path, capsys):
    """host_cost.py --max-tokens 0, what the acceptance's speed runs train: 25,000 tokens in one batch where the
    card holds it, else split evenly."""
    host_cost = benchmark("host_cost")
    for side in ("src", "tgt"):
        host_cost.write_dictionary(tmp_path / f"dict.{side}.txt", 37000)
    spec = types.SimpleNamespace(layers=6, dim=1024, ffn=4096, heads=16, precisions=["float32"])
    for gib in (80, 16):
        fake_gpu(monkeypatch, gib)
        largest = memory.largest_batch(
            memory.Sizes(6, 1024, 4096, 16, 37004, 37004),
            "float32",
            int(gib * GIB * memory.GPU_MEMORY_SHARE),
            int(gib * GIB / 32) // 12,
        )
        batches = -(-25000 // largest)
        assert host_cost.one_gpu_default(spec, tmp_path) == -(-25000 // batches)
    assert batches == 3 and "8334" in capsys.readouterr().out  # 16 GiB: three batches of 8334 tokens, said


def test_run_zero_chooses_the_batch_from_its_gpu_and_every_run_takes_it(reversal_data, tmp_path, monkeypatch, capsys):
    """MAX_TOKENS_PER_GPU unset on GPUs: run 0's card decides (80 GiB: 25,000 tokens over 2 workers in one batch
    each); run 1, on an 8 GiB card, which alone would choose three batches, takes run 0's (recipes/training.py's
    batch, sized and checked against the longest sentence in its process). A dry run says it is chosen at run time."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "data-bin").symlink_to(reversal_data / "joined")
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("RECIPE", "test")
    for name in ("MAX_TOKENS_PER_GPU", "TOKENS_PER_STEP"):
        monkeypatch.delenv(name, raising=False)
    model = ["--user-dir", str(REPO / "vaswani_plugin"), "--task", "vaswani_translation", "--bf16-autocast", "0"]
    model += ["--share-all-embeddings", "--arch", "vaswani_transformer_big"]

    def batch(rank, gib, dry_run=False):
        fake(torch, f"9.0:Fake GPU {gib}:{gib}", monkeypatch.setattr)
        monkeypatch.setenv("DRY_RUN", str(int(dry_run)))
        run = stages.Run(tmp_path / "work", rank=rank, name=f"node {rank}", launch_id="job 7", workers=2)
        run = dataclasses.replace(run, dry_run=dry_run)
        return training.batch(run, model)

    assert batch(0, 80) == (12500, 1)
    said = capsys.readouterr().err
    assert "MAX_TOKENS_PER_GPU unset: " in said and "of Fake GPU 80's 80 GiB" in said
    vocabulary = len(make_dictionary(0).load(str(reversal_data / "joined" / "dict.src.txt")))
    alone = memory.largest_batch(
        memory.Sizes(6, 1024, 4096, 16, vocabulary, vocabulary),
        "float32",
        int(8 * GIB * memory.GPU_MEMORY_SHARE),
        int(8 * GIB / 32) // memory.BYTES_PER_LOGIT,
    )
    assert memory.step_split(25000, 2, alone)[0] > 1  # what run 1's card would choose
    assert batch(1, 8) == (12500, 1)
    assert batch(0, 16, dry_run=True) == (3125, 4)  # 25,000 over 2 x 4 of 4,096
    assert "MAX_TOKENS_PER_GPU unset: chosen at run time" in capsys.readouterr().err


@pytest.mark.parametrize("precision", ["float32", "bf16"])
def test_saved_per_token_is_what_autograd_keeps(precision):
    """What the forward pass keeps for the backward pass, counted by autograd's own hooks (each storage once, the
    weights and their autocast copies, which state_bytes counts, left out) on a CPU in training mode."""
    torch.manual_seed(0)
    dictionary = make_dictionary(50)
    model = build_model(dictionary, encoder_layers=2, decoder_layers=3, dropout=0.1, share_all_embeddings=True)
    model.train()
    batch, source_length, target_length = 5, 11, 9  # no activation of a weight's shape
    source = random_tokens(dictionary, batch, source_length)
    target = random_tokens(dictionary, batch, target_length)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    shapes = {tuple(sorted(p.shape)) for p in model.parameters()}  # of a weight or its transpose
    kept = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        is_weight = storage.data_ptr() in weights or (
            tensor.dtype == torch.bfloat16 and tuple(sorted(tensor.shape)) in shapes
        )
        if not is_weight:
            kept[storage.data_ptr()] = storage.nbytes()
        return tensor

    with (
        torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor),
        torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"),
    ):
        model(source, torch.full((batch,), source_length), target, features_only=True)  # as the criterion calls it
    vocabulary = len(dictionary)
    per_source, per_target = memory.saved_per_token(
        memory.Sizes(2, 32, 64, 4, vocabulary, vocabulary, decoder_layers=3), precision, "cpu"
    )
    assert sum(kept.values()) == pytest.approx(
        per_source * batch * source_length + per_target * batch * target_length, rel=0.01
    )
