"""Table 2's training cost: time × GPUs × peak FLOP/s per GPU, in the precision the checkpoint trained in."""

import pytest
import torch
from fake_gpus import fake

from vaswani_plugin.tools.training_cost import main, peak_for


def test_peak_lookup_by_gpu_name():
    assert peak_for("Tesla P100-SXM2-16GB", "fp32") == 9.5  # the paper's P100 figure
    assert peak_for("NVIDIA A100-SXM4-40GB", "fp32") == 19.5  # not the A10's
    assert peak_for("NVIDIA A10", "fp16") == 125.0
    assert peak_for("NVIDIA H100 80GB HBM3", "bf16") == peak_for("NVIDIA H100 80GB HBM3", "amp") == 989.0
    assert peak_for("NVIDIA H100 80GB HBM3", "tf32") == 494.7
    assert peak_for("Tesla V100-SXM2-16GB", "tf32") == 15.7  # no TF32 tensor cores: float32's
    assert peak_for("NVIDIA L4", "fp32") == 30.3 and peak_for("NVIDIA L40S", "fp32") == 90.5
    assert peak_for("Some Future GPU", "fp32") is None


def checkpoint_of(tmp_path, seconds, common=None, task=None):
    """A checkpoint with fairseq's training time and, where given, the configuration it trained under."""
    path = tmp_path / "checkpoint_last.pt"
    state = {"extra_state": {"previous_training_time": seconds}}
    if common is not None:
        state["cfg"] = {"common": common, "task": task or {}}
    torch.save(state, path)
    return str(path)


def test_cost_line_multiplies_time_gpus_and_peak(tmp_path, capsys):
    checkpoint = checkpoint_of(tmp_path, 12 * 3600.0)
    main(["--checkpoint", checkpoint, "--gpus", "8", "--peak-tflops", "9.5", "--paper", "base"])
    line = capsys.readouterr().out.strip()
    # 12 hours on 8 P100s at 9.5 TFLOP/s: 3.28e18, the paper's 3.3e18 for the base model.
    assert line.startswith("Training cost: 3.28e+18 FLOPs = 43200 s x 8 GPUs x 9.5 TFLOP/s")
    assert line.endswith("paper (Table 2): 3.3e+18")


@pytest.mark.parametrize(
    "common,task,counted",
    [
        ({"fp16": False, "amp": False}, {"bf16_autocast": "on"}, "bf16"),  # the recipes' default on an H200
        ({"fp16": True}, {"bf16_autocast": "off"}, "fp16"),
        ({"amp": True}, {"bf16_autocast": "off"}, "amp"),
        ({"fp16": False}, {"bf16_autocast": "off", "tf32": True}, "tf32"),
        ({"fp16": False}, {"bf16_autocast": "0"}, "fp32"),
        ({"fp16": False, "cpu": False}, {"bf16_autocast": "auto"}, "fp32"),  # auto on a GPU before it chose by card
    ],
)
def test_the_peak_is_the_precisions_the_checkpoint_trained_in(monkeypatch, tmp_path, capsys, common, task, counted):
    """On a (faked) H200: the checkpoint's precision picks the peak's column; --precision overrides it."""
    fake(torch, "9.0:NVIDIA H200:141", monkeypatch.setattr)
    checkpoint = checkpoint_of(tmp_path, 3600.0, common, task)
    main(["--checkpoint", checkpoint, "--gpus", "8"])
    peak = peak_for("NVIDIA H200", counted)
    assert capsys.readouterr().out.strip() == (
        f"Training cost: {3600 * 8 * peak * 1e12:.2e} FLOPs = 3600 s x 8 GPUs x {peak:g} TFLOP/s "
        f"(NVIDIA H200 {counted} peak)"
    )
    main(["--checkpoint", checkpoint, "--gpus", "8", "--precision", "fp32"])
    assert "x 67 TFLOP/s (NVIDIA H200 fp32 peak)" in capsys.readouterr().out


def test_unknown_peak_says_how_to_give_it(tmp_path, capsys):
    main(["--checkpoint", checkpoint_of(tmp_path, 10.0), "--gpus", "1"])
    assert "set PEAK_TFLOPS / --peak-tflops" in capsys.readouterr().out
