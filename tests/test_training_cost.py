"""Table 2's training cost: time × GPUs × peak FLOP/s per GPU."""

import torch

from vaswani_plugin.tools.training_cost import main, peak_for


def test_peak_lookup_by_gpu_name():
    assert peak_for("Tesla P100-SXM2-16GB", fp16=False) == 9.5  # the paper's P100 figure
    assert peak_for("NVIDIA A100-SXM4-40GB", fp16=False) == 19.5  # not the A10's
    assert peak_for("NVIDIA A10", fp16=True) == 125.0
    assert peak_for("NVIDIA H100 80GB HBM3", fp16=True) == 989.0
    assert peak_for("NVIDIA L4", fp16=False) == 30.3 and peak_for("NVIDIA L40S", fp16=False) == 90.5
    assert peak_for("Some Future GPU", fp16=False) is None


def test_cost_line_multiplies_time_gpus_and_peak(tmp_path, capsys):
    checkpoint = tmp_path / "checkpoint_last.pt"
    torch.save({"extra_state": {"previous_training_time": 12 * 3600.0}}, checkpoint)
    main(["--checkpoint", str(checkpoint), "--gpus", "8", "--peak-tflops", "9.5", "--paper", "base"])
    line = capsys.readouterr().out.strip()
    # 12 hours on 8 P100s at 9.5 TFLOP/s: 3.28e18, the paper's 3.3e18 for the base model.
    assert line.startswith("Training cost: 3.28e+18 FLOPs = 43200 s x 8 GPUs x 9.5 TFLOP/s")
    assert line.endswith("paper (Table 2): 3.3e+18")


def test_unknown_peak_says_how_to_give_it(tmp_path, capsys):
    checkpoint = tmp_path / "checkpoint_last.pt"
    torch.save({"extra_state": {"previous_training_time": 10.0}}, checkpoint)
    main(["--checkpoint", str(checkpoint), "--gpus", "1"])
    assert "set PEAK_TFLOPS / --peak-tflops" in capsys.readouterr().out
