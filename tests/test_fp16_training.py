"""fairseq's own float16 training (--fp16: FP16Optimizer, --memory-efficient-fp16: MemoryEfficientFP16Optimizer,
both with dynamic loss scaling) on a CPU, through the test harness tests/fp16_on_cpu.py, for the plugin's model and
criterion and, as the control that validates the harness, for fairseq's own `transformer` and
`label_smoothed_cross_entropy`. Each float16 run is compared update by update with the float32 run of the same
settings (plain fairseq-train, no harness), and has one gradient overflow injected at batch OVERFLOW_AT."""

import json
import math
import os
import subprocess
import sys

import pytest
from cli_helpers import BIN, REPO, TINY_MODEL, paper_options
from conftest import lane_job, reversal_corpus

MODELS = {
    "fairseq-transformer": ["--arch", "transformer", "--criterion", "label_smoothed_cross_entropy"],
    "vaswani_transformer": [
        "--user-dir",
        "vaswani_plugin",
        "--arch",
        "vaswani_transformer",
        "--criterion",
        "vaswani_label_smoothed_cross_entropy",
    ],
}
FLOAT16 = {"fp16": ["--fp16"], "memory-efficient-fp16": ["--memory-efficient-fp16"]}
UPDATES, OVERFLOW_AT, INIT_SCALE = 30, 21, 128
# §5.3's Adam (fairseq's adam: its models and both its float16 optimizers take it; the plugin's vaswani_adam is
# checked under --fp16 by benchmarks/host_cost.py's smoke run) with fairseq's inverse_sqrt (eq. 3's shape) warmed
# up over 10 updates, so that 30 updates learn; no dropout, so that both precisions compute the same function.
TRAINING = [
    *TINY_MODEL,
    "--share-all-embeddings",
    "--dropout",
    "0",
    "--optimizer",
    "adam",
    *paper_options("training", "--label-smoothing", "--adam-betas", "--adam-eps"),
    "--lr-scheduler",
    "inverse_sqrt",
    "--warmup-updates",
    "10",
    "--lr",
    "3e-3",
    "--max-tokens",
    "200",
    "--cpu",
    "--seed",
    "1",
    "--required-batch-size-multiple",
    "1",
    "--max-update",
    str(UPDATES),
    "--fp16-init-scale",
    str(INIT_SCALE),
    "--no-save",
    "--disable-validation",
    "--log-format",
    "json",
    "--log-interval",
    "1",
]
# float16 keeps 11 significant bits (relative rounding 2^-11 = 5e-4), so activations and logits differ from
# float32 by ~1e-3 relative, and the measured losses by at most 0.005 bits per token per update. 0.05 leaves ten
# times that for the two runs drifting apart, and is a 30th of the 1.5-2 bits float32 learns before the overflow;
# with all-zero gradients (what a wrong harness gives FP16Optimizer) float16 stays near its first loss. Gradient
# norms measured agree within 0.3%; all-zero gradients have norm 0.
LOSS_TOLERANCE, GNORM_TOLERANCE = 0.05, 0.05
# After the skipped batch, float16 sees at update k the batch float32 saw at k + 1, one update behind: about
# what float32's loss falls per update over its first 20 on average (0.08-0.1 bits); measured: at most 0.03.
SKIPPED_UPDATE_TOLERANCE = 0.1


def train(data, save_dir, model, float16=None):
    """fairseq-train (float16: through the harness, with an overflow at batch OVERFLOW_AT) on one thread;
    returns the per-update train_inner records and the whole log. fairseq writes a probe file into SAVE_DIR even
    with --no-save, so every run has its own."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if float16:
        command = [sys.executable, REPO / "tests" / "fp16_on_cpu.py", *FLOAT16[float16]]
        env["FP16_ON_CPU_OVERFLOW_AT"] = str(OVERFLOW_AT)
    else:
        command = [BIN / "fairseq-train"]
    arguments = [*command, data / "joined", *MODELS[model], *TRAINING, "--save-dir", save_dir]
    result = subprocess.run(list(map(str, arguments)), cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"{model} {float16 or 'float32'} failed:\n{log[-3000:]}"
    records = [json.loads(line[line.index("{") :]) for line in log.splitlines() if "train_inner" in line]
    records = [{key: float(value) for key, value in record.items()} for record in records]
    return records, log


@lane_job
def fp16_runs(tmp_path_factory, lane):
    """All six runs, one after another on the second lane, on the session's reversal corpus (conftest's)."""
    data = reversal_corpus(tmp_path_factory)
    return {
        (model, float16): train(data, tmp_path_factory.mktemp("run"), model, float16)
        for model in MODELS
        for float16 in (None, *FLOAT16)
    }


@pytest.fixture
def runs(lane):
    return lambda model, float16: lane["fp16_runs"].result()[model, float16]


@pytest.mark.lane("fp16_runs")
@pytest.mark.parametrize("float16", FLOAT16)
@pytest.mark.parametrize("model", MODELS)
def test_float16_trains_like_float32(runs, model, float16):
    reference, _ = runs(model, None)
    half, _ = runs(model, float16)
    before = slice(0, OVERFLOW_AT - 1)  # updates 1 .. OVERFLOW_AT - 1, on the same batches in both runs
    learned = [r["loss"] for r in reference[before]]
    assert sum(learned[:5]) / 5 - sum(learned[-5:]) / 5 > 1.0  # float32 learns: the comparison means something
    assert [r["num_updates"] for r in half[before]] == [r["num_updates"] for r in reference[before]]
    for r32, r16 in zip(reference[before], half[before]):
        assert r16["loss"] == pytest.approx(r32["loss"], abs=LOSS_TOLERANCE), f"update {r16['num_updates']}"
        assert r16["gnorm"] == pytest.approx(r32["gnorm"], rel=GNORM_TOLERANCE), f"update {r16['num_updates']}"
        assert r16["loss_scale"] == INIT_SCALE


@pytest.mark.lane("fp16_runs")
@pytest.mark.parametrize("float16", FLOAT16)
@pytest.mark.parametrize("model", MODELS)
def test_an_overflow_halves_the_loss_scale_and_training_goes_on(runs, model, float16):
    reference, _ = runs(model, None)
    half, _ = runs(model, float16)
    assert [r["num_updates"] for r in half] == [r["num_updates"] for r in reference] == list(range(1, UPDATES + 1))
    assert [r["loss_scale"] for r in half] == [INIT_SCALE] * (OVERFLOW_AT - 1) + [INIT_SCALE / 2] * (
        UPDATES - OVERFLOW_AT + 1
    )
    after = half[OVERFLOW_AT - 1 :]
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["gnorm"]) and r["gnorm"] > 0 for r in after)
    for r16, r32 in zip(after, reference[OVERFLOW_AT:]):  # float16's update k took float32's batch k + 1
        assert r16["loss"] == pytest.approx(r32["loss"], abs=SKIPPED_UPDATE_TOLERANCE), f"update {r16['num_updates']}"
