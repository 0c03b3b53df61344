"""benchmarks/gpu_acceptance.py and its modules (benchmarks/acceptance_*.py) without a GPU: its parsing and
report on log lines written by fairseq's own json progress bar and host_cost.py's tables; the order of its stages
(the default's speed first), the default precision by the card (faked), the ratio against fairseq's faster run, the
levers' deadlines; the whole pipeline as its CPU stand-in (a tiny model, run through the GPU kit's command on the
second lane, on the shared Multi30k: tests/gpu_kit_jobs.py) with its report checked against the logs and files it
came from; the checkpoint stage (a) decodes, near-ties and real differences between two devices' hypotheses, peak
memory over every step, the worker's recovery from a dead run and its stage deadline, the report and exit status
without a GPU, and the one-line errors. With a GPU (the device tool) the tiny pipeline also runs in fp16 and amp."""

import io
import json
import logging
import math
import os
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import gpu_kit_jobs  # noqa: F401  (the second lane's jobs read below)
import pytest
import torch
from cli_helpers import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import acceptance_decoding  # noqa: E402
import acceptance_levers  # noqa: E402
import acceptance_logs  # noqa: E402
import acceptance_plan  # noqa: E402
import acceptance_report  # noqa: E402
import acceptance_speed  # noqa: E402
import acceptance_worker  # noqa: E402
import gpu_acceptance  # noqa: E402
import host_cost_memory  # noqa: E402

SCRIPT = REPO / "benchmarks" / "gpu_acceptance.py"


def fairseq_json_log(windows, notes=()):
    """A fairseq-train log: `windows` (stats of each log window) written by fairseq's JsonProgressBar with
    fairseq-train's line format, an end-of-epoch record, and `notes` (other log lines) after the first window."""
    from fairseq.logging.progress_bar import JsonProgressBar, logger

    text = io.StringIO()
    handler = logging.StreamHandler(text)
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s"))
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        by_step = {stats["num_updates"]: stats for stats in windows}
        bar = JsonProgressBar(range(max(by_step) + 1), epoch=1, log_interval=1)
        for step in bar:
            if step in by_step:
                bar.log(by_step[step], tag="train_inner", step=step)
                if step == min(by_step):
                    for note in notes:
                        text.write(f"2026-11-23 12:00:00 | INFO | fairseq.trainer | {note}\n")
        bar.print({"loss": 1.0, "wps": 1e9, "num_updates": windows[-1]["num_updates"]}, tag="train")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return text.getvalue()


def window_stats(losses, wps, scales=None, every=25):
    """Stats of log windows of `every` updates, as fairseq's trainer logs them (loss_scale: fp16 and amp)."""
    return [
        dict(
            loss=loss,
            nll_loss=loss - 0.3,
            wps=speed,
            ups=speed / 4000,
            num_updates=every * (i + 1),
            **({"loss_scale": scales[i]} if scales else {}),
        )
        for i, (loss, speed) in enumerate(zip(losses, wps))
    ]


FP16_LOG = window_stats([13.1, 9.25, 8.5, 7.75], [900.0, 41000.0, 40000.0, 45000.0], scales=[128, 128, 64, 64])
OVERFLOW_NOTE = "NOTE: gradient overflow detected, ignoring gradient, setting loss scale to: 64.0"


def test_training_summary_from_fairseq_json_lines():
    text = fairseq_json_log(FP16_LOG, notes=[OVERFLOW_NOTE])
    assert text.count("| train_inner | {") == 4 and "| train | {" in text  # the end-of-epoch record is not a window
    summary = acceptance_logs.summarize_training(*acceptance_logs.parse_train_log(text))
    assert summary["steps"] == 100
    assert (summary["first_loss"], summary["last_loss"]) == (13.1, 7.75)
    assert summary["finite"] and summary["falling"]
    assert summary["tokens_per_s"] == statistics.median(w["wps"] for w in FP16_LOG[1:])
    assert summary["loss_scales"] == [(25, 128), (50, 128), (75, 64), (100, 64)]
    assert summary["overflows"] == 1


@pytest.mark.parametrize(
    "losses, finite, falling",
    [
        ([13.1, 9.2, float("nan"), 7.7], False, True),
        ([13.1, 9.2, 8.5, float("inf")], False, False),
        ([6.0, 6.5, 7.0, 7.5], True, False),
    ],
)
def test_a_loss_that_is_not_finite_or_does_not_fall_fails_the_check(losses, finite, falling):
    text = fairseq_json_log(window_stats(losses, [1.0, 2.0, 3.0, 4.0]))
    summary = acceptance_logs.summarize_training(*acceptance_logs.parse_train_log(text))
    assert (summary["finite"], summary["falling"]) == (finite, falling)
    assert all(
        math.isnan(a) and math.isnan(b) or a == b
        for a, b in zip((summary["first_loss"], summary["last_loss"]), (losses[0], losses[-1]))
    )
    training = {("fp32", impl): summary for impl in acceptance_plan.CRITERIA}
    checks = dict(
        zip(acceptance_plan.CRITERIA, acceptance_logs.training_checks(training, ["fp32"], acceptance_plan.CRITERIA))
    )
    assert not checks["vaswani_transformer"][1]
    assert checks["transformer"][1] == finite  # the baseline: a finite loss is enough


def test_a_run_stopped_before_its_first_window_is_read_from_its_end_of_epoch_record():
    """fairseq's transformer on the H200 (stage b, fp16): 9 updates in its 10 s, no train_inner line."""
    text = fairseq_json_log(window_stats([13.43], [3652.6], scales=[32], every=9))
    text = "\n".join(line for line in text.splitlines() if "| train_inner |" not in line)
    summary = acceptance_logs.summarize_training(*acceptance_logs.parse_train_log(text))
    # fairseq_json_log's end-of-epoch record: loss 1.0, wps 1e9, the last window's num_updates
    assert (summary["steps"], summary["first_loss"], summary["tokens_per_s"]) == (9, 1.0, 1e9)
    assert summary["whole_run"] and summary["windows"] == 1 and not summary["falling"]
    training = {("fp16", impl): dict(summary, peak_memory_mb=2200.0) for impl in acceptance_plan.CRITERIA}
    assert (
        "| fp16 | 1000000000 (whole run, start-up included) | 1000000000 (whole run, start-up included) | 1.00 |"
        in "\n".join(acceptance_report.comparison_section(training, ["fp16"]))
    )
    checks = acceptance_logs.training_checks(training, ["fp16"], acceptance_plan.CRITERIA)
    assert checks == [
        (
            "fp16 vaswani_transformer: trained 9 steps, loss finite and falling (no log window: the run's "
            "end-of-epoch record)",
            False,
        ),
        (
            "fp16 transformer (the baseline): trained 9 steps, loss finite (no log window: the run's end-of-epoch "
            "record)",
            True,
        ),
    ]
    assert acceptance_logs.summarize_training(*acceptance_logs.parse_train_log("no record")) == {
        "error": "no train_inner line in the log"
    }


def test_one_log_window_cannot_show_a_falling_loss():
    """The H100's first stage (b) run logged one window (20 updates in its 20 s): its first loss is its last."""
    summary = acceptance_logs.summarize_training(
        *acceptance_logs.parse_train_log(fairseq_json_log(window_stats([12.4], [7000.0])))
    )
    assert summary["windows"] == 1 and not summary["falling"]
    training = {("fp16", impl): dict(summary, peak_memory_mb=2044.0) for impl in acceptance_plan.PLUGIN_ONLY}
    (check,) = acceptance_logs.training_checks(training, ["fp16"], acceptance_plan.PLUGIN_ONLY)
    assert check == (
        "fp16 vaswani_transformer: trained 25 steps, loss finite and falling (one log window: no later "
        "loss to compare)",
        False,
    )
    assert (
        "| 12.400 → 12.400 | NO (one log window: no later loss to compare) |"
        in acceptance_report.training_rows(training, ["fp16"], acceptance_plan.PLUGIN_ONLY)[0]
    )


def test_the_output_layers_float16_line_is_read_from_the_log(monkeypatch):
    """models/output_layer_loss.py's one line about a device's float16 products, as fairseq-train logs it (this
    CPU's torch refuses the out_dtype kernel), is what the report shows for the run."""
    from vaswani_plugin.models import output_layer_loss

    text = io.StringIO()
    handler = logging.StreamHandler(text)
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s"))
    monkeypatch.setattr(output_layer_loss, "FLOAT16_PRODUCTS_IN_FLOAT32", {})
    output_layer_loss.logger.addHandler(handler)
    try:
        output_layer_loss.float16_products_in_float32(torch.device("cpu"))
    finally:
        output_layer_loss.logger.removeHandler(handler)
    (line,) = text.getvalue().splitlines()
    assert acceptance_logs.PRODUCTS.findall(text.getvalue()) == [line.split(" | ", 3)[3]]
    assert line.split(" | ", 3)[3].startswith("float16 products on cpu: torch.mm(out_dtype=torch.float32) refused")


def test_generate_timing_and_hypotheses():
    log = (
        "2026-11-23 12:00:00 | INFO | fairseq_cli.generate | Translated 1,000 sentences (12,345 tokens) in 2.5s "
        "(400.00 sentences/s, 4938.00 tokens/s)\n"
    )
    ours = "S-0\ta b\nH-0\t-0.5\tx y\nP-0\t-0.1 -0.2\nH-1\t-0.7\tx\nH-2\t-0.1\tz z z\n"
    theirs = "H-1\t-0.6\tx\nH-0\t-0.4\tx y z\nH-3\t-0.1\tw\n"
    timing, hypotheses, scores = acceptance_logs.parse_generate(log, ours)
    assert timing == dict(sentences=1000, tokens=12345, seconds=2.5, sentences_per_s=400.0, tokens_per_s=4938.0)
    assert hypotheses == {0: "x y", 1: "x", 2: "z z z"} and scores == {0: -0.5, 1: -0.7, 2: -0.1}
    reference = acceptance_logs.parse_generate(log, theirs)[1]
    # Brute force: 0 differs, 1 is the same, 2 and 3 each lack the other's.
    assert acceptance_logs.differing(hypotheses, reference) == [0, 2, 3]
    assert acceptance_logs.parse_generate("no timing", ours)[0] is None


HOST_COST_OUTPUT = """host cost of an update: fairseq's Trainer, 6+6 layers, d_model 1024, d_ff 4096, \
4096 tokens a batch, 45 s of updates after 10 (median)
precision implementation       optimizer     host ms  wait ms   fwd+bwd     grads optimizer     other   calls  syncs plugin
amp       vaswani_transformer  vaswani_adam    120.5     0.40       760        10         2        25     797    6.0    0.0
precision implementation       optimizer    updates     tok/s    MFU   busy  peak MB model MB  wall ms  fwd+bwd   optim  idle ms
amp       vaswani_transformer  vaswani_adam     380     33000  41.5%  92.0%  21000.0  25200.0    124.1     60.2     1.5      9.9
kernel time by kind, ms per update of the 5 profiled (each kernel's own device time):
  amp vaswani_transformer vaswani_adam: 110.20 ms, the matrix products at 412.5 TFLOP/s; the updates profiled: 124.0 ms wall
"""  # noqa: E501  (host_cost.py's own output, as it prints it)


def host_cost_run(name, tokens, tokens_per_s, busy, mfu="41.5%", precision="amp", implementation=None):
    output = (
        HOST_COST_OUTPUT.replace("33000", str(tokens_per_s))
        .replace("amp       vaswani_transformer", f"{precision:<9} {implementation or 'vaswani_transformer'}")
        .replace("92.0%", busy)
        .replace("41.5%", mfu)
        .replace("4096 tokens", f"{tokens} tokens")
    )
    return dict(
        name=name,
        tokens=tokens,
        command="python benchmarks/host_cost.py ...",
        output=output,
        row=acceptance_speed.parse_host_cost(output),
    )


def test_host_cost_rows_and_the_targets_they_hold():
    row = acceptance_speed.parse_host_cost(HOST_COST_OUTPUT)
    assert row == dict(
        precision="amp",
        implementation="vaswani_transformer",
        optimizer="vaswani_adam",
        max_tokens=4096,
        updates=380,
        tokens_per_s=33000.0,
        mfu=0.415,
        busy=0.92,
        peak_memory_mb=21000.0,
        model_memory_mb=25200.0,
        model_over_peak=1.2,
        wall_ms=124.1,
        forward_backward_ms=60.2,
        optimizer_ms=1.5,
        idle_ms=9.9,
        host_ms=120.5,
        wait_ms=0.4,
        calls=797.0,
        syncs=6.0,
        products_tflops=412.5,
    )
    assert acceptance_speed.parse_host_cost("no table") is None
    uncounted = HOST_COST_OUTPUT.replace("797    6.0    0.0", "797      -      -")  # under --compile-layers
    assert acceptance_speed.parse_host_cost(uncounted) == dict(row, syncs=None)
    bf16 = acceptance_speed.parse_host_cost(HOST_COST_OUTPUT.replace("amp       vaswani", "bf16      vaswani"))
    assert bf16["precision"] == "bf16" and bf16["tokens_per_s"] == 33000  # the recipes' default from 8.0
    assert acceptance_speed.parse_host_cost(HOST_COST_OUTPUT.split("kernel time")[0])["products_tflops"] is None


def test_the_targets_ratio_is_against_the_faster_of_fairseqs_fp16_and_amp():
    """The plugin's tokens/s over the faster of fairseq's --fp16 and --amp runs (cuDNN's SDPA off), whichever it
    is; one that did not run leaves the other; neither: not measured."""
    plugin = [host_cost_run("plugin", 25000, 33000, "92.0%", "26.0%"), host_cost_run("plugin", 3125, 30000, "86.0%")]

    def fairseqs(fp16, amp):
        return [
            host_cost_run("fairseq --fp16", 25000, fp16, "50.0%", precision="fp16", implementation="transformer")
            if fp16
            else dict(name="fairseq --fp16", error="not run"),
            host_cost_run("fairseq --amp", 25000, amp, "50.0%", implementation="transformer"),
        ]

    assert acceptance_speed.targets_held(plugin + fairseqs(20000, 25000)) == [
        ("MFU of the plugin at the one-GPU default >= 40 %", False, "0.26"),
        ("kernel time >= 85 % of wall time at 3,125 tokens a GPU", True, "0.86"),
        ("MFU of the plugin at 3,125 tokens a GPU >= 25 %", True, "0.41"),
        (
            "tokens/s >= 1.5x the faster of fairseq's --fp16 and --amp (cuDNN's SDPA off), same batch",
            False,
            "1.32x of fairseq --amp",
        ),
        ("the memory model >= the measured peak at the one-GPU default", True, "1.20"),
        ("the memory model >= the measured peak at 3,125 tokens a GPU", True, "1.20"),
    ]
    ratio = acceptance_speed.targets_held(plugin + fairseqs(22000, 11000))[3]
    assert ratio[1:] == (True, "1.50x of fairseq --fp16")  # fp16 the faster now
    assert acceptance_speed.targets_held(plugin + fairseqs(None, 22000))[3][1:] == (True, "1.50x of fairseq --amp")
    assert acceptance_speed.targets_held(plugin + [dict(name="f", error="x")] * 2)[3][1:] == (None, "-")


def test_report_of_a_gpu_run_from_synthetic_logs():
    """What the CPU stand-in cannot show: fp16/amp rows with loss scales, MFU in %, a failed run, a failed check,
    GPU hypotheses that are not the CPU's; and the report as stage (a) leaves it, before stage (b) has run."""
    fp16 = acceptance_logs.summarize_training(
        *acceptance_logs.parse_train_log(fairseq_json_log(FP16_LOG, notes=[OVERFLOW_NOTE]))
    )
    precisions = ["fp16", "amp", "bf16-autocast"]
    plugin = {
        ("fp16", "vaswani_transformer"): dict(fp16, peak_memory_mb=1000.0),
        ("amp", "vaswani_transformer"): {"error": "not run: stage (a)'s 3 minutes were spent"},
        ("bf16-autocast", "vaswani_transformer"): dict(fp16, loss_scales=[], peak_memory_mb=900.0),
    }
    training_a = {**{(p, "transformer"): {"note": "needs a GPU"} for p in precisions}, **plugin}
    timing = dict(sentences=100, tokens=1200, seconds=4.0, sentences_per_s=25.0, tokens_per_s=300.0)
    plugin["fp16", "vaswani_transformer"]["products"] = [
        "float16 products on cuda:0: torch.mm(out_dtype=torch.float32), checked against float32"
    ]
    hypotheses = {"cpu": {i: "a b" for i in range(100)}, "fp32": {**{i: "a b" for i in range(100)}, 7: "a c", 9: "b"}}
    found = acceptance_decoding.agreement(
        hypotheses["cpu"],
        hypotheses["fp32"],
        dict(drift=2e-5, tolerance=4e-5, rescored={"7": [-1.5, -1.50003], "9": [-1.5, -2.5]}),
    )
    decoding = {
        "checkpoint": "the fp16 run's",
        "sentences": 100,
        "agreement": found,
        "fp16_differing": [3, 7],
        "cpu": timing,
        "fp32": dict(timing, sentences_per_s=250.0),
        "fp16": dict(timing, sentences_per_s=500.0),
        "hypotheses": hypotheses,
    }
    checks_a = acceptance_logs.training_checks(training_a, precisions, acceptance_plan.PLUGIN_ONLY)
    checks_a.append(("beam 4 in float32: no real difference between the GPU's hypotheses and the CPU's", False))
    speed = [
        host_cost_run("the plugin at the one-GPU default", 4096, 33000, "92.0%", precision="bf16"),
        dict(
            name="the plugin at 3,125 tokens a GPU",
            tokens=3125,
            command="python benchmarks/host_cost.py",
            output="Killed",
            error="stopped after 70 s",
        ),
        host_cost_run("fairseq --fp16", 4096, 20000, "50.0%", precision="fp16", implementation="transformer"),
        host_cost_run("fairseq --amp", 4096, 22000, "50.0%", implementation="transformer"),
    ]
    facts = dict(
        mode=acceptance_plan.BASE,
        precisions=precisions,
        device="cuda",
        machine={"GPU": "NVIDIA H100 80GB HBM3"},
        work=Path("/w"),
        data=Path("/d"),
        date="2026-11-23 12:00 UTC",
        command="python benchmarks/gpu_acceptance.py",
        wall_minutes=2.0,
        data_ready=1.25,
        default=("bf16", "bf16-autocast", "NVIDIA H100 80GB HBM3 (compute capability 9.0): bfloat16 tensor cores"),
        commands=[],
        s=dict(speed=speed, checks=acceptance_speed.speed_checks(speed), minutes=0.5, ended=2.0),
    )
    report = acceptance_report.render_report(facts)  # as stage (s) leaves it, before (a) has run
    assert (
        "The recipes' default precision here: NVIDIA H100 80GB HBM3 (compute capability 9.0): bfloat16 tensor "
        "cores." in report
    )
    assert (
        "| the plugin at the one-GPU default | bf16 | 4096 | 380 | 33000 | 41.5 % | 92.0 % | 412 | 21000 | 25200 | "
        "124.1 | 60.2 | 1.5 | 9.9 | 0.40 | 797 | 6 |" in report
    )
    assert "| the plugin at 3,125 tokens a GPU | | 3125 | FAILED: stopped after 70 s |" in report
    assert "- held: MFU of the plugin at the one-GPU default >= 40 % (0.41)" in report
    assert (
        "- held: tokens/s >= 1.5x the faster of fairseq's --fp16 and --amp (cuDNN's SDPA off), same batch "
        "(1.50x of fairseq --amp)" in report
    )
    assert "- held: the memory model >= the measured peak at the one-GPU default (1.20)" in report
    assert "- not measured: kernel time >= 85 % of wall time at 3,125 tokens a GPU (-)" in report
    assert "scaling to 8 GPUs stays unmeasured" in report
    assert "- FAIL: speed run: the plugin at 3,125 tokens a GPU (stopped after 70 s)" in report
    assert "- pass: speed run: the plugin at the one-GPU default" in report
    assert (
        "- wall time: 2.0 minutes from the command's start (the install and the data: 1.2; stage (s) 0.5, ended "
        "at minute 2.0 of at most 4.5)" in report
    )
    assert report.index("## (s) Checks") < report.index(
        "## (a) Correctness\n\nNot written yet: stage (a) is running, or the run was cut short before it ended."
    )
    assert "## (a) Training" not in report and "## (b) Levers\n\nNot written yet" in report

    facts.update(
        wall_minutes=3.0,
        commands=[("fairseq-train /d --fp16", {"seconds": 30.0})],
        a=dict(training=training_a, decoding=decoding, checks=checks_a, minutes=1.5, ended=3.0),
    )
    report = acceptance_report.render_report(facts)
    tokens = statistics.median(w["wps"] for w in FP16_LOG[1:])
    assert (
        f"| fp16 | vaswani_transformer | 100 | 13.100 → 7.750 | yes | {tokens:.0f} | 1000 | 128 → 64, min 64 "
        "| 1 |" in report
    )
    assert "| amp | vaswani_transformer | FAILED: not run: stage (a)'s 3 minutes were spent |" in report
    assert "- fp16, vaswani_transformer: 25: 128, 50: 128, 75: 64, 100: 64" in report
    assert "| GPU, float32 | 100 | 250.0 | 300.0 | 4.0 |" in report and "| CPU, float32 | 100 | 25.0 |" in report
    assert "GPU float32 against the CPU, of 100 sentences: 98 identical, 1 near-ties, 1 real differences " in report
    assert "a near-tie's scores differ by at most 4.00e-05: twice the drift between the devices, 2.00e-05," in report
    assert (
        "- sentence 7, near-tie (gap 3.00e-05): CPU `a b`; GPU `a c`\n"
        "- sentence 9, REAL DIFFERENCE (gap 1.00e+00): CPU `a b`; GPU `b`" in report
    )
    assert "fp16 / float32 sentences/s: 2.00; hypotheses that differ: 2 of 100" in report
    assert "- FAIL: beam 4 in float32: no real difference between the GPU's hypotheses and the CPU's" in report
    assert (
        "- fp16, vaswani_transformer: float16 products on cuda:0: torch.mm(out_dtype=torch.float32), checked "
        "against float32" in report
    )
    assert (
        "- wall time: 3.0 minutes from the command's start (the install and the data: 1.2; stage (s) 0.5, ended "
        "at minute 2.0 of at most 4.5; stage (a) 1.5, ended at minute 3.0 of at most 7)" in report
    )
    assert report.index("## (s) Checks") < report.index("## (a) Training") < report.index("## (a) Checks")
    assert report.index("## (a) Checks") < report.index(
        "## (b) Levers\n\nNot written yet: stage (b) is running, or the run was cut short before it ended."
    )

    levers = [
        dict(host_cost_run(acceptance_plan.LEVERS[0][0], 3125, 24000, "80.0%"), against=1),
        dict(host_cost_run(acceptance_plan.LEVERS[1][0], 4096, 36300, "95.0%"), against=0),
        dict(name=acceptance_plan.LEVERS[2][0], tokens=3125, against=1, error="not run: not started by minute 8.4"),
        dict(name=acceptance_plan.LEVERS[3][0], tokens=3125, against=1, note="GPU only: not run"),
    ]
    checks_b = acceptance_speed.speed_checks(levers, "lever")
    assert [ok for _, ok in checks_b] == [True, True, False]  # the note is no check
    slower = [dict(w, wps=w["wps"] / 2) for w in FP16_LOG]
    fairseq_fp16 = acceptance_logs.summarize_training(*acceptance_logs.parse_train_log(fairseq_json_log(slower)))
    training_b = {  # the fairseq-train rows, if time allows
        **plugin,
        ("fp16", "transformer"): dict(fairseq_fp16, peak_memory_mb=1600.0, gpu_busy=88.0),
        ("amp", "vaswani_transformer"): {"note": "not run: past stage (b)'s end (if time allows)"},
        ("amp", "transformer"): {"error": "FloatingPointError: Minimum loss scale reached (0.0001)."},
        ("bf16-autocast", "transformer"): dict(fp16, loss_scales=[], peak_memory_mb=None),
    }
    checks_b += acceptance_logs.training_checks(training_b, ["fp16"], acceptance_plan.CRITERIA)
    checks_b += acceptance_logs.training_checks(training_b, ["amp"], ["transformer"])
    facts.update(wall_minutes=8.5, b=dict(levers=levers, training=training_b, checks=checks_b, minutes=5.5, ended=8.5))
    report = acceptance_report.render_report(facts)
    assert "Not written yet" not in report and "; stage (b) 5.5, ended at minute 8.5 of at most 9.5)" in report
    # Against the default at the same size: the one-GPU default's 33000 tokens/s; 3,125's did not run.
    assert (
        f"| {acceptance_plan.LEVERS[1][0]} | 4096 | 36300 | 1.10 | 41.5 % | 95.0 % | 412 | 21000 | 124.1 | 120.5 |"
        in report
    )
    assert f"| {acceptance_plan.LEVERS[0][0]} | 3125 | 24000 | - | 41.5 % | 80.0 % |" in report
    assert f"| {acceptance_plan.LEVERS[2][0]} | 3125 | FAILED: not run: not started by minute 8.4 |" in report
    assert f"| {acceptance_plan.LEVERS[3][0]} | 3125 | GPU only: not run |" in report
    assert f"- FAIL: lever: {acceptance_plan.LEVERS[2][0]} (not run: not started by minute 8.4)" in report
    assert report.index("## (a) Checks") < report.index("## (b) Levers") < report.index("## (b) Training")
    assert report.index("## (b) Training") < report.index("## (b) The plugin against") < report.index("## (b) Checks")
    tokens = statistics.median(w["wps"] for w in FP16_LOG[1:])
    assert "| amp | transformer | FAILED: FloatingPointError: Minimum loss scale reached (0.0001). |" in report
    assert "| amp | vaswani_transformer | not run: past stage (b)'s end (if time allows) |" in report
    assert (
        f"| bf16-autocast | vaswani_transformer | 100 | 13.100 → 7.750 | yes | {tokens:.0f} | 900 | - | 1 |" in report
    )
    # The plugin against fairseq (half its tokens/s): the ratios of their rows.
    assert f"| fp16 | {tokens:.0f} | {tokens / 2:.0f} | 2.00 | 1000 | 1600 | {1000 / 1600:.2f} |" in report
    assert f"| bf16-autocast | {tokens:.0f} | {tokens:.0f} | 1.00 | 900 | - | - |" in report
    assert "| amp | not run: past stage (b)'s end (if time allows) |" in report
    assert (
        "the median of its 250 ms samples; a step bound by the host leaves the GPU idle): fp16: plugin - %, "
        "fairseq 88 %; amp: plugin - %, fairseq - %; bf16-autocast: plugin - %, fairseq - %" in report
    )
    assert "- FAIL: amp transformer trained (FloatingPointError: Minimum loss scale reached (0.0001).)" in report
    assert "- pass: fp16 transformer (the baseline): trained 100 steps, loss finite" in report
    assert "- 30.0 s: `fairseq-train /d --fp16`" in report


def test_the_recipes_default_precision_by_the_card(monkeypatch):
    """vaswani_plugin.precision's choice for the visible card: bfloat16 autocast from compute capability 8.0,
    fairseq's --fp16 on 7.x, float32 below; on a CPU the task's auto, by the CPU's flags."""
    from fake_gpus import fake

    from vaswani_plugin import precision

    for spec, chosen in [
        ("8.0:NVIDIA A100-SXM4-40GB:40", ("bf16", "bf16-autocast")),
        ("9.0:NVIDIA H200:141", ("bf16", "bf16-autocast")),
        ("7.0:Tesla V100-SXM2-16GB:16", ("fp16", "fp16")),
        ("6.0:Tesla P100-PCIE-16GB:16", ("float32", "fp32")),
    ]:
        fake(torch, spec, monkeypatch.setattr)
        found = acceptance_plan.default_precision("cuda")
        assert found[:2] == chosen and found[2] == precision.decide("auto", "cuda", precision.visible_gpus())[1]
    native = precision.bf16_autocast_enabled("auto", "cpu")[0]
    assert acceptance_plan.default_precision("cpu")[:2] == (
        ("bf16", "bf16-autocast") if native else ("float32", "fp32")
    )


def fake_host_cost(monkeypatch, commands, tokens=4096):
    """run_until in place of host_cost.py's process: the command recorded, HOST_COST_OUTPUT printed for its
    --precisions and --implementations (and, with --max-tokens 0, the one-GPU default `tokens`), exit status 0."""

    def run_until(command, seconds, stdout, **popen):
        commands.append(command)
        flag = {word: command[i + 1] for i, word in enumerate(command[:-1]) if word.startswith("--")}
        batch = tokens if flag["--max-tokens"] == "0" else int(flag["--max-tokens"])
        stdout.write(
            host_cost_run(
                "x", batch, 33000, "92.0%", precision=flag["--precisions"], implementation=flag["--implementations"]
            )["output"]
        )
        return 0

    monkeypatch.setattr(acceptance_speed, "run_until", run_until)


def test_stage_s_measures_the_cards_default_against_fairseqs_fp16_and_amp_at_the_same_batch(monkeypatch, tmp_path):
    """On an A100 (faked): the plugin in bf16 at the one-GPU default and at 3,125 tokens, fairseq's transformer in
    --fp16 and --amp with cuDNN's SDPA off at the plugin's measured batch; torch's default threads throughout."""
    from fake_gpus import fake

    fake(torch, "8.0:NVIDIA A100-SXM4-40GB:40", monkeypatch.setattr)
    commands = []
    fake_host_cost(monkeypatch, commands, tokens=24576)
    context = dict(
        mode=acceptance_plan.BASE,
        work=tmp_path,
        default=acceptance_plan.default_precision("cuda"),
        ends=[(time.time() + 600, "the end")],
        minute=lambda: 0.0,
    )
    stage = acceptance_speed.stage_s(context)
    assert [ok for _, ok in stage["checks"]] == [True] * 4
    flags = [{word: command[i + 1] for i, word in enumerate(command[:-1])} for command in commands]
    assert [(f["--implementations"], f["--precisions"], f["--max-tokens"]) for f in flags] == [
        ("vaswani_transformer", "bf16", "0"),
        ("vaswani_transformer", "bf16", "3125"),
        ("transformer", "fp16", "24576"),  # the plugin's one-GPU default, as its run measured it
        ("transformer", "amp", "24576"),
    ]
    assert all(f["--threads"] == "0" and f["--device"] == "cuda" for f in flags)
    assert ["--no-cudnn-sdpa" in command for command in commands] == [False, False, True, True]
    assert [run["row"]["max_tokens"] for run in stage["speed"]] == [24576, 3125, 24576, 24576]


def test_the_default_speed_runs_come_first_and_are_written_before_correctness_runs(monkeypatch, tmp_path):
    """main() runs stage (s), then (a), then (b); each finds the report the stages before it wrote."""
    data = tmp_path / "data-bin"
    data.mkdir()
    for split in ("train", "test"):
        (data / f"{split}.en-de.en.bin").write_bytes(b"")
    seen = []

    def stage(name, part):
        def run(context):
            report = (tmp_path / "work" / "gpu_acceptance_report.md").read_text() if seen else ""
            seen.append((name, report))
            return dict(part, checks=[(f"stage {name}", True)], jobs=[], results={}, minutes=0.1, ended=0.2)

        return run

    speed = [host_cost_run(name, 200, 1000, "-") for name, _, _ in acceptance_plan.SPEED_RUNS]
    levers = [dict(run, against=0) for run in speed[:1]]
    decoding = dict(checkpoint="none", sentences=100, hypotheses={}, fp16_differing=[])
    decoding.update({name: {"error": "not run"} for name in acceptance_plan.DECODES})
    monkeypatch.setattr(gpu_acceptance, "stage_s", stage("s", dict(speed=speed)))
    monkeypatch.setattr(
        gpu_acceptance, "stage_a", stage("a", dict(training=dict.fromkeys([], None), decoding=decoding))
    )
    monkeypatch.setattr(gpu_acceptance, "stage_b", stage("b", dict(levers=levers)))
    monkeypatch.setattr(acceptance_report, "training_section", lambda *args: ["## (a) Training"])
    status = gpu_acceptance.main(
        ["--device", "cpu", "--tiny", "--data", str(data), "--work-dir", str(tmp_path / "work")]
    )
    assert status == 0 and [name for name, _ in seen] == ["s", "a", "b"]
    assert seen[0][1] == ""  # nothing written before the default's speed
    before_a = seen[1][1]
    assert "## (s) Speed of the recipes' default" in before_a and "- pass: stage s" in before_a
    assert "## (a) Correctness\n\nNot written yet" in before_a and "- pass: stage a" not in before_a
    assert "## (a) Training" in seen[2][1] and "## (b) Levers\n\nNot written yet" in seen[2][1]


def test_a_lever_not_started_by_its_deadline_is_not_run(monkeypatch, tmp_path):
    """Each lever starts only before its own minute; one past it is not run and says so (a failed check); the
    CUDA-graph lever is skipped with a note on a CPU, no check."""
    commands, minutes = [], iter([0.0, 46.0, 100.0, 100.0])  # TINY's starts: minutes 45, 50, 55, 58
    fake_host_cost(monkeypatch, commands)
    mode = acceptance_plan.TINY
    levers = acceptance_speed.run_speed(
        mode,
        tmp_path,
        acceptance_plan.LEVERS,
        time.time() + 600,
        "the end",
        "bf16",
        "b",
        lambda: next(minutes),
        mode.lever_starts,
    )
    threads = [[c[i + 1] for i, word in enumerate(c) if word == "--threads"] for c in commands]
    assert threads == [["0", "1"], ["0"]]  # the lever's --threads 1 after the default's 0: the last word wins
    assert len(commands) == 2 and "--compile-layers" in commands[1] and "dynamic" in commands[1]
    assert "row" in levers[0] and "row" in levers[1]
    assert levers[2]["error"] == "not run: not started by minute 55 of the command, its deadline"
    assert levers[3] == dict(levers[3], note="GPU only (CUDA graphs): not run in the CPU stand-in")
    assert "error" not in levers[3] and "row" not in levers[3]
    assert acceptance_speed.speed_checks(levers, "lever") == [
        (f"lever: {acceptance_plan.LEVERS[0][0]}", True),
        (f"lever: {acceptance_plan.LEVERS[1][0]}", True),
        (
            f"lever: {acceptance_plan.LEVERS[2][0]} (not run: not started by minute 55 of the command, its deadline)",
            False,
        ),
    ]


def test_gpu_busy_is_the_median_of_nvidia_smis_samples_within_each_run():
    """nvidia-smi's `timestamp, utilization.gpu` lines, local time as time.time() counts; a line cut short by the
    stop is left out; a run's share is the median of the samples within its start and end."""
    start = datetime(2026, 11, 26, 16, 16, 0)
    lines = [
        f"{(start + timedelta(seconds=i / 4)).strftime('%Y/%m/%d %H:%M:%S.%f')[:-3]}, {percent}"
        for i, percent in enumerate([10, 20, 90, 80, 70, 30])
    ] + ["2026/11/26 16:16:0"]
    samples = acceptance_levers.parse_gpu_busy("\n".join(lines) + "\n")
    assert [percent for _, percent in samples] == [10, 20, 90, 80, 70, 30]
    assert samples[0][0] == pytest.approx(start.timestamp()) and samples[5][0] - samples[0][0] == pytest.approx(1.25)
    first = start.timestamp()
    assert acceptance_levers.busy_during(samples, first + 0.5, first + 1.0) == 80  # 90, 80, 70
    assert acceptance_levers.busy_during(samples, first + 2, first + 3) is None
    assert (
        acceptance_levers.busy_during(samples, None, None) is None and acceptance_levers.busy_during(None, 0, 1) is None
    )


def test_stage_a_decodes_the_first_precision_that_trained(tmp_path):
    """fp16, else amp, else bfloat16 autocast: the first whose run finished with its checkpoint and a finite,
    falling loss; a failed precision costs only its own checks."""
    good = acceptance_logs.summarize_training(*acceptance_logs.parse_train_log(fairseq_json_log(FP16_LOG)))
    rising = dict(good, falling=False)
    precisions = ["fp16", "amp", "bf16-autocast"]
    for precision in precisions:
        (tmp_path / precision).mkdir()
        (tmp_path / precision / "checkpoint_last.pt").write_bytes(b"")

    def chosen(*rows):
        return acceptance_decoding.decoded_precision(
            {(p, "vaswani_transformer"): row for p, row in zip(precisions, rows)}, precisions, tmp_path
        )

    assert chosen(good, good, good) == "fp16"
    assert chosen({"error": "RuntimeError: CUDA error"}, good, good) == "amp"
    assert chosen(dict(good, finite=False), rising, good) == "bf16-autocast"
    assert chosen(rising, rising, rising) is None
    (tmp_path / "fp16" / "checkpoint_last.pt").unlink()  # stopped before it saved
    assert chosen(good, good, good) == "amp"


def test_stage_a_s_worker_decodes_the_checkpoint_it_chooses_after_training(tmp_path):
    """From the training runs' results and logs on disk: fp16 failed, amp trained, so a decoding job runs on amp's
    checkpoint (here a job that fails naming the path it was given); with none trained it is not run."""
    work = tmp_path / "work"
    for folder in ("results", "logs", "checkpoints/amp", "checkpoints/bf16-autocast"):
        (work / folder).mkdir(parents=True)
    (work / "results" / "train-a-fp16.json").write_text(json.dumps({"error": "RuntimeError: CUDA error"}))
    for precision in ("amp", "bf16-autocast"):
        (work / "results" / f"train-a-{precision}.json").write_text(json.dumps({"seconds": 1.0}))
        (work / "logs" / f"train-a-{precision}.log").write_text(fairseq_json_log(FP16_LOG))
        (work / "checkpoints" / precision / "checkpoint_last.pt").write_bytes(b"")
    precisions = ["fp16", "amp", "bf16-autocast"]
    checkpoint = work / "checkpoints" / "amp" / "checkpoint_last.pt"
    assert acceptance_decoding.decoded_checkpoint(work, precisions) == ("amp", checkpoint)
    job = dict(
        name="decode",
        tool="subset",
        argv=[acceptance_plan.CHOSEN, "test", "1", str(tmp_path / "dest")],
        log=str(tmp_path / "decode.log"),
        result=str(tmp_path / "decode.json"),
        decodes=dict(work=str(work), precisions=precisions),
    )
    (tmp_path / "jobs.json").write_text(json.dumps([job]))

    def decoded():
        acceptance_worker.worker(tmp_path / "jobs.json")  # the worker's loop, in this process
        return json.loads((tmp_path / "decode.json").read_text())

    assert decoded()["error"] == f"FileNotFoundError: no test.*.idx in {checkpoint}"
    (work / "logs" / "train-a-amp.log").write_text(fairseq_json_log([dict(w, loss=float("nan")) for w in FP16_LOG]))
    (work / "checkpoints" / "bf16-autocast" / "checkpoint_last.pt").unlink()
    assert acceptance_decoding.decoded_checkpoint(work, precisions) == (None, None)
    assert decoded() == {"error": "not run: no precision trained"}


def test_near_ties_and_real_differences_between_two_devices(trained, tmp_path):
    """Two tokens made indistinguishable (one embedding row copied onto another: the model shares its embeddings)
    give a hypothesis an exact tie with the CPU's; dropping a word from one is a real difference. The scores that
    compare them are the search's own (the H- lines' scores, base 2), and each is counted where it belongs."""
    from fairseq.data import Dictionary

    from vaswani_plugin.checkpoints.storage import load_checkpoint

    checkpoint, data, _ = trained
    dictionary = Dictionary.load(str(data / "dict.src.txt"))
    a, b = dictionary.index("x3"), dictionary.index("x11")
    state = load_checkpoint(checkpoint)
    for weight in state["model"].values():
        if weight.dim() == 2 and weight.size(0) == len(dictionary):  # the embeddings and the output projection
            weight[b] = weight[a]
    torch.save(state, tmp_path / "tied.pt")
    job = dict(
        name="generate",
        tool="generate",
        log=str(tmp_path / "generate.log"),
        argv=acceptance_worker.generate_argv(data, "test", tmp_path / "tied.pt", False, "cpu", tmp_path / "cpu"),
    )
    assert "error" not in acceptance_worker.run_job(job)
    text = (tmp_path / "cpu" / "generate-test.txt").read_text()
    _, cpu, h_scores = acceptance_logs.parse_generate("", text)
    tie = next(i for i, h in sorted(cpu.items()) if "x3" in h.split() or "x11" in h.split())
    real = next(i for i, h in sorted(cpu.items()) if i != tie and len(h.split()) > 2)
    swap = {"x3": "x11", "x11": "x3"}
    device = dict(cpu)
    device[tie] = " ".join(swap.get(word, word) for word in cpu[tie].split())
    device[real] = " ".join(cpu[real].split()[:-1])
    (tmp_path / "device.txt").write_text("".join(f"H-{i}\t{h_scores[i]}\t{h}\n" for i, h in device.items()))

    comparison = acceptance_decoding.compare_on_both_devices(
        data, tmp_path / "tied.pt", tmp_path / "cpu" / "generate-test.txt", tmp_path / "device.txt", "cpu"
    )
    for i, score in h_scores.items():  # fairseq-generate prints scores in base 2
        assert comparison["scores"][str(i)] == pytest.approx(score * math.log(2), abs=1e-4), i
    assert comparison["drift"] == 0 and comparison["tolerance"] == acceptance_plan.TOLERANCE_FLOOR
    assert sorted(comparison["rescored"]) == sorted([str(tie), str(real)])
    found = acceptance_decoding.agreement(cpu, device, comparison)
    assert (found["identical"], found["near_ties"], found["real"]) == (len(cpu) - 2, [tie], [real])
    assert not found["passed"] and found["gaps"][real] > 0.1
    assert acceptance_decoding.agreement(cpu, {**device, real: cpu[real]}, comparison)["passed"]
    # More near-ties than the cap fail too, as does a sentence the device lacks.
    assert not acceptance_decoding.agreement(cpu, {**device, real: cpu[real]}, comparison, cap=0)["passed"]
    lacking = acceptance_decoding.agreement(cpu, {i: h for i, h in cpu.items() if i != real}, comparison)
    assert lacking["real"] == [real] and not lacking["passed"]


class FakeCuda:
    """torch.cuda's peak-memory counter, as fairseq's trainer uses it: allocate() raises the peak, and
    reset_peak_memory_stats brings it down to what is allocated now."""

    def __init__(self):
        self.allocated = self.peak = 0

    def allocate(self, now, peak):
        self.allocated, self.peak = now, max(self.peak, peak)

    def max_memory_allocated(self, device=None):
        return self.peak

    def reset_peak_memory_stats(self, device=None):
        self.peak = self.allocated


def fairseq_steps(cuda, reset=None):
    """Three training steps whose activations peak at 9, 12 and 8 MiB over 2 MiB of weights, the counter reset
    after each step as fairseq's trainer does (to log gb_free) by `reset` (default cuda's own)."""
    for peak in (9, 12, 8):
        cuda.allocate(2 * 2**20, peak * 2**20)
        (reset or cuda.reset_peak_memory_stats)()


def test_peak_memory_includes_every_steps_peak(monkeypatch):
    cuda = FakeCuda()
    fairseq_steps(cuda)
    assert cuda.max_memory_allocated() == 2 * 2**20  # what reading the counter once after the run gets
    cuda = FakeCuda()
    with host_cost_memory.PeakMemory(cuda) as peak:
        fairseq_steps(cuda)
    assert peak.megabytes == 12
    assert cuda.reset_peak_memory_stats.__func__ is FakeCuda.reset_peak_memory_stats  # put back
    # The worker's runs go through it: a run's result is its peak over every step.
    cuda = FakeCuda()
    for name in ("is_available", "empty_cache", "max_memory_allocated", "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, getattr(cuda, name, lambda: True))
    monkeypatch.setattr(
        acceptance_worker,
        "write_first_sentences",
        lambda *argv: fairseq_steps(cuda, lambda: torch.cuda.reset_peak_memory_stats()),
    )
    result = acceptance_worker.run_job(dict(name="steps", tool="subset", argv=[], log=os.devnull))
    assert result["peak_memory_mb"] == 12


def test_a_run_that_kills_the_worker_fails_alone_and_the_rest_still_run(tmp_path):
    """Each of these jobs kills the worker (its log cannot be opened): one worker per job, each job failed."""
    jobs = [
        dict(
            name=f"job{i}",
            tool="train",
            argv=[],
            log=str(tmp_path / "missing" / f"job{i}.log"),
            result=str(tmp_path / f"job{i}.json"),
        )
        for i in range(2)
    ]
    results = acceptance_worker.run_jobs(jobs, tmp_path, tmp_path / "worker.log")
    assert list(results) == ["job0", "job1"]
    for result in results.values():
        assert result["error"].startswith("the worker died (exit status 1) in this run")
    assert (tmp_path / "worker.log").read_text().count("FileNotFoundError") == 2


def test_no_job_starts_after_its_stage_deadline(tmp_path):
    """Jobs past the deadline are not run (these would kill the worker): their results say why."""
    jobs = [
        dict(
            name=f"job{i}",
            tool="train",
            argv=[],
            log=str(tmp_path / "missing" / f"job{i}.log"),
            result=str(tmp_path / f"job{i}.json"),
        )
        for i in range(2)
    ]
    results = acceptance_worker.run_jobs(jobs, tmp_path, tmp_path / "worker.log", time.time() - 1, "the end")
    assert results == {"job0": {"error": "not run: past the end"}, "job1": {"error": "not run: past the end"}}


def test_the_run_in_progress_at_the_deadline_is_stopped(tmp_path):
    """A run that would go on for ever (its log a FIFO nobody reads: opening it blocks) is stopped at the deadline,
    the worker killed; the run after it is not started."""
    os.mkfifo(tmp_path / "blocking.log")
    jobs = [
        dict(name=name, tool="train", argv=[], log=str(tmp_path / log), result=str(tmp_path / f"{name}.json"))
        for name, log in (("forever", "blocking.log"), ("next", "next.log"))
    ]
    started = time.monotonic()
    results = acceptance_worker.run_jobs(jobs, tmp_path, tmp_path / "worker.log", time.time() + 2, "the end")
    assert 2 <= time.monotonic() - started < 30
    assert results == {"forever": {"error": "stopped at the end"}, "next": {"error": "not run: past the end"}}


def test_without_a_gpu_a_report_of_what_the_machine_showed_and_exit_1(tmp_path):
    """No GPU visible and no stand-in: nothing prepared or run; the report (in --report-dir, the kit command's
    $OUT) says so with torch's own view of CUDA, and the one line on stderr says where it is."""
    out = tmp_path / "out"
    result = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_acceptance.sh"), "--report-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES="", WORK_DIR=str(tmp_path / "work"), PYTHON=sys.executable),
    )
    assert result.returncode == 1 and result.stdout == ""
    try:
        torch.cuda.init()
        init = "no error"
    except Exception as error:
        init = " ".join(f"{type(error).__name__}: {error}".split())
    assert result.stderr == (
        f"gpu_acceptance: error: no GPU visible (torch.cuda.is_available() is False; "
        f"torch.cuda.init(): {init}); report written to {out / 'gpu_acceptance_report.md'}\n"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]  # nothing prepared
    assert [path.name for path in out.iterdir()] == ["gpu_acceptance_report.md"]
    report = (out / "gpu_acceptance_report.md").read_text()
    assert report.startswith("# GPU acceptance of vaswani_plugin: NOT RUN, no GPU visible\n")
    cuda = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU build"
    assert table_row(report, "", "torch") == ["torch", f"{torch.__version__} ({cuda})"]
    assert table_row(report, "", "torch.cuda.is_available()")[1] == "False"
    assert table_row(report, "", "torch.cuda.init()")[1] == init
    assert table_row(report, "", "CUDA_VISIBLE_DEVICES")[1] == "'' (empty: CUDA is shown no GPU)"
    assert "- command: `python benchmarks/gpu_acceptance.py --report-dir " in report


@pytest.mark.parametrize("case", ["past stage (s)'s end", "prepare fails"])
def test_multi30k_not_prepared_is_a_report_and_exit_1(case, tmp_path, monkeypatch, capsys):
    """The command started an hour ago (past stage (s)'s end: nothing is started), or prepare.multi30k fails
    (no raw files): no stage runs; the report says why, with the end of prepare's log."""
    (tmp_path / "raw").mkdir()
    late = case == "past stage (s)'s end"
    monkeypatch.setenv("GPU_ACCEPTANCE_STARTED", str(int(time.time()) - 3600 * late))
    out, work = tmp_path / "out", tmp_path / "work"
    with pytest.raises(SystemExit) as exit:  # main(), in this process
        gpu_acceptance.main(
            [
                "--device",
                "cpu",
                "--tiny",
                "--raw-dir",
                str(tmp_path / "raw"),
                "--work-dir",
                str(work),
                "--report-dir",
                str(out),
            ]
        )
    why = (
        "Multi30k not prepared: past stage (s)'s end, 20 s before minute 20 of the command"
        if late
        else "preparing Multi30k failed (exit status 1)"
    )
    printed = capsys.readouterr()
    assert exit.value.code == 1 and printed.out == ""
    assert (
        printed.err.splitlines()[-1]
        == f"gpu_acceptance: error: {why}; report written to {out / 'gpu_acceptance_report.md'}"
    )
    report = (out / "gpu_acceptance_report.md").read_text()
    assert report.startswith("# GPU acceptance of vaswani_plugin: NOT RUN, Multi30k not prepared\n")
    assert f"\n{why}. The last lines of {work / 'prepare.log'}:\n" in report
    assert (work / "prepare.log").exists() != late and not (work / "data" / "data-bin").exists()
    if not late:
        assert (work / "prepare.log").read_text().splitlines()[-1] in report


def test_user_errors_are_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        result.stderr.splitlines()[-1]
        == "gpu_acceptance: error: --device cpu trains the base model for hours: add --tiny (the CPU stand-in)"
    )
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--data", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr == (
        f"gpu_acceptance: error: --data {tmp_path}: no binarised train and test splits there "
        "(fairseq-preprocess output)\n"
    )
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "kit.json").write_text('{"complete": false}')
    for argv, env, message in [
        (["--kit", str(tmp_path)], {}, f"--kit {tmp_path}: no kit.json there (made by benchmarks/gpu_kit.sh)"),
        (
            ["--kit", str(tmp_path / "unfinished")],
            {},
            f"--kit {tmp_path / 'unfinished'}: its build did not finish: run benchmarks/gpu_kit.sh again",
        ),
        ([], {"GPU_ACCEPTANCE_STAND_IN": "yes"}, "GPU_ACCEPTANCE_STAND_IN=yes: 1 (the CPU stand-in) or 0"),
        (
            [],
            {"GPU_ACCEPTANCE_STARTED": "$(date +%s)"},
            "GPU_ACCEPTANCE_STARTED=$(date +%s): the command's start in seconds since the epoch, "
            "as `date +%s` prints it",
        ),
    ]:
        result = subprocess.run(
            [sys.executable, str(SCRIPT), *argv],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ, **env),
        )
        assert result.returncode == 2 and result.stderr.splitlines()[-1] == f"gpu_acceptance: error: {message}"


# ---------------------------------------------------------------------------------------------------------
# The CPU stand-in, end to end.


def run_acceptance(data, work, *options):
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--data", str(data), "--work-dir", str(work), *options],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )


def stand_in(lane):
    """The stand-in run through the GPU kit's command: (work folder, $OUT, its CompletedProcess, the report)."""
    work, out, _, result, _ = lane["gpu_acceptance_stand_in"].result()
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    return work, out, result, (out / "gpu_acceptance_report.md").read_text()


def table_row(report, section, *first_cells):
    """The cells of the table row that starts with `first_cells` in the report's section whose title starts with
    `section`."""
    (text,) = [part for part in report.split("\n## ") if part.startswith(section)]
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[: len(first_cells)] == list(first_cells):
            return cells
    raise AssertionError(f"no row {first_cells} in the report")


def log_windows(path):
    """The train_inner records of a fairseq json log, read here independently of gpu_acceptance."""
    return [
        json.loads(line.split(" | ", 3)[3]) for line in path.read_text().splitlines() if " | train_inner | " in line
    ]


STAND_IN = ("gpu_kit", "gpu_acceptance_stand_in")


@pytest.mark.shared_data
@pytest.mark.lane(*STAND_IN)
def test_stand_in_reports_the_machine_and_passes_every_check(lane):
    work, out, result, report = stand_in(lane)
    kit = ".gpu_kit"  # the command's own words: the device tool runs it in the repository's root
    assert result.stdout.splitlines()[0] == f"gpu_acceptance: report written to {out / 'gpu_acceptance_report.md'}"
    assert "gpu_acceptance: 17 of 17 checks passed" in result.stdout
    assert table_row(report, "Machine", "torch") == ["torch", torch.__version__]
    cpu = re.search(r"^model name\s*: (.*)$", Path("/proc/cpuinfo").read_text(), re.M)[1]
    assert table_row(report, "Machine", "CPU") == ["CPU", f"{cpu}, {os.cpu_count()} cores"]
    assert re.search(r"^- date: \d{4}-\d\d-\d\d \d\d:\d\d UTC$", report, re.M)
    assert (
        f"- command: `GPU_ACCEPTANCE_STAND_IN=1 python benchmarks/gpu_acceptance.py --kit {kit} --raw-dir "
        f"{kit}/multi30k --work-dir {work} --report-dir {out}`" in report
    )
    assert f"- data: {work / 'data' / 'data-bin'}" in report  # the kit's Multi30k, prepared there
    assert report.count("- pass: ") == 17 and "FAIL" not in report  # (s) 4, (a) 7, (b) 2 levers and 4 runs
    assert re.search(
        r"^- wall time: [\d.]+ minutes from the command's start \(the install and the data: [\d.]+; "
        r"stage \(s\) [\d.]+, ended at minute [\d.]+ of at most 20; stage \(a\) [\d.]+, ended at minute "
        r"[\d.]+ of at most 40; stage \(b\) [\d.]+, ended at minute [\d.]+ of at most 60\)$",
        report,
        re.M,
    )
    # In priority order: the default's speed, correctness, the levers.
    assert report.index("## (s) Checks") < report.index("## (a) Training") < report.index("## (b) Levers")
    assert report.index("## (b) Levers") < report.index("## (b) Training")  # if time allows: the lowest priority


def stand_in_runs():
    """(report section, log and result name, implementation) of each training run of the stand-in."""
    for precision in ("fp32", "bf16-autocast"):
        yield "(a) Training", f"train-a-{precision}", precision, "vaswani_transformer"
        for impl in acceptance_plan.CRITERIA:
            yield "(b) Training", f"train-b-{precision}-{impl}", precision, impl


@pytest.mark.shared_data
@pytest.mark.lane(*STAND_IN)
def test_stand_in_training_rows_are_those_of_the_logs(lane):
    work, _, _, report = stand_in(lane)
    tokens_per_s = {}
    for section, name, precision, impl in stand_in_runs():
        log = work / "logs" / f"{name}.log"
        windows = log_windows(log)
        assert len(windows) == 4  # 20 steps, a window every 5
        losses = [float(w["loss"]) for w in windows]
        tokens_per_s[section, precision, impl] = statistics.median(float(w["wps"]) for w in windows[1:])
        peak = json.loads((work / "results" / f"{name}.json").read_text())["peak_memory_mb"]
        cells = table_row(report, section, precision, impl)
        assert cells[2:6] == [
            "20",
            f"{losses[0]:.3f} → {losses[-1]:.3f}",
            "yes",
            f"{tokens_per_s[section, precision, impl]:.0f}",
        ]
        assert losses[-1] < losses[0] and all(map(math.isfinite, losses))
        assert cells[6:] == [f"{peak:.0f}", "-", "0"]
        # What fairseq ran, from its own config dump: the implementation, its criterion, the precision.
        text = log.read_text()
        assert re.search(rf"'model': (\{{'_name': '{impl}'|Namespace\(.*\barch='{impl}')", text)
        assert f"'criterion': {{'_name': '{acceptance_plan.CRITERIA[impl]}'" in text
        assert ("'bf16_autocast': 'on'" in text) == (precision == "bf16-autocast")
        assert ("| precision: bfloat16 autocast (--bf16-autocast on)" in text) == (precision == "bf16-autocast")
        assert "'fp16': False" in text and "'amp': False" in text
        saved = f"'save_dir': '{work / 'checkpoints' / precision}'" if name.startswith("train-a") else "'no_save': True"
        assert saved in text  # stage (a) saves each precision's checkpoint: the first that trained is decoded
    for precision in ("fp16", "amp"):
        assert table_row(report, "(a) Training", precision, "vaswani_transformer")[2] == "needs a GPU"
        for impl in acceptance_plan.CRITERIA:
            assert table_row(report, "(b) Training", precision, impl)[2] == "needs a GPU"
        assert table_row(report, "(b) The plugin against", precision)[1] == "needs a GPU"
    with pytest.raises(AssertionError, match="no row"):  # stage (a) trains the plugin alone
        table_row(report, "(a) Training", "fp32", "transformer")
    for precision in ("fp32", "bf16-autocast"):
        ratio = (
            tokens_per_s["(b) Training", precision, "vaswani_transformer"]
            / tokens_per_s["(b) Training", precision, "transformer"]
        )
        cells = table_row(report, "(b) The plugin against", precision)
        assert float(cells[3]) == pytest.approx(ratio, abs=0.006)
        assert float(cells[6]) == pytest.approx(float(cells[4]) / float(cells[5]), abs=0.01)


@pytest.mark.shared_data
@pytest.mark.lane(*STAND_IN)
def test_stand_in_decodes_the_first_100_test_sentences_on_cpu_and_device_and_counts_the_differences(lane):
    work, _, _, report = stand_in(lane)
    sources = (work / "data" / "bpe" / "test.en").read_text().splitlines()
    assert len(sources) == 1000  # test2016
    assert "from the fp32 run's checkpoint" in report
    sources = sources[:100]
    hypotheses = {}
    for name, title in (
        ("cpu", "CPU, float32"),
        ("fp32", "stand-in device (the CPU), float32"),
        ("fp16", "stand-in device (the CPU), fp16"),
    ):
        text = (work / f"generate-{name}" / "generate-test.txt").read_text()
        hypotheses[name] = dict(line.split("\t")[::2] for line in text.splitlines() if line.startswith("H-"))
        assert dict(line.split("\t") for line in text.splitlines() if line.startswith("S-")) == {
            f"S-{i}": source for i, source in enumerate(sources)
        }  # the first 100 of 103, each once
        log = (work / "logs" / f"generate-{name}.log").read_text()
        timing = re.search(r"Translated (\d+) sentences .* \(([\d.]+) sentences/s, ([\d.]+) tokens/s\)", log)
        assert table_row(report, "(a) Beam-4", title)[1:4] == [
            "100",
            f"{float(timing[2]):.1f}",
            f"{float(timing[3]):.1f}",
        ]
        assert ("'fp16': True" in log) == (name == "fp16") and "'cpu': True" in log
        # On the device, an untimed run of the same decoding came first (CUDA's kernels load at their first use).
        warm_up = work / f"warm-up-{name}" / "generate-test.txt"
        assert warm_up.exists() == (name != "cpu")
        if name != "cpu":
            assert warm_up.read_text() == text
            runs = report[report.index("## Runs") :]
            assert runs.index(f"--results-path {warm_up.parent} ") < runs.index(
                f"--results-path {work / f'generate-{name}'} "
            )
    same = sum(hypotheses["fp32"][i] == hypotheses["cpu"][i] for i in hypotheses["cpu"])
    assert (
        f"stand-in device (the CPU) float32 against the CPU, of 100 sentences: {same} identical, "
        f"{100 - same} near-ties, 0 real differences" in report
    )
    # Two CPUs: no drift, so the tolerance is its floor.
    assert (
        f"a near-tie's scores differ by at most {acceptance_plan.TOLERANCE_FLOOR:.2e}: twice the drift between "
        "the devices, 0.00e+00," in report
    )
    changed = sum(hypotheses["fp16"][i] != hypotheses["fp32"][i] for i in hypotheses["fp32"])
    assert f"hypotheses that differ: {changed} of 100 " in report


@pytest.mark.shared_data
@pytest.mark.lane(*STAND_IN)
def test_stand_in_speed_runs_are_host_costs(lane):
    """Each speed run's row in the report is benchmarks/host_cost.py's, from its own output (kept in the report): the
    plugin in the CPU's default precision, fairseq's transformer in --fp16 and --amp at the plugin's batch."""
    work, _, _, report = stand_in(lane)
    default = acceptance_plan.default_precision("cpu")
    assert f"The recipes' default precision here: {default[2]}." in report
    for index, (name, which, _) in enumerate(acceptance_plan.SPEED_RUNS):
        printed = (work / f"host_cost-{index}.txt").read_text()
        assert printed.rstrip() in report
        row = acceptance_speed.parse_host_cost(printed)
        fairseq = "fairseq" in name
        assert row["implementation"] == ("transformer" if fairseq else "vaswani_transformer")
        assert row["optimizer"] == ("adam" if fairseq else "vaswani_adam")
        assert row["precision"] == (("fp16" if "fp16" in name else "amp") if fairseq else default[0])
        tokens = acceptance_plan.TINY.host_cost_tokens[0 if fairseq else which]  # fairseq: the plugin's batch
        assert row["max_tokens"] == tokens
        command = re.search(rf"^{re.escape(name)}: `(.*)`$", report, re.M)[1].split()
        assert command[command.index("--threads") + 1] == "0"  # torch's default threads, as the recipes' GPUs
        assert (
            f"| {name} | {row['precision']} | {tokens} | {row['updates']} | {row['tokens_per_s']:.0f} | - | - | "
            in report
        )  # no GPU: no MFU, busy
        assert (row["model_memory_mb"] is None) == fairseq  # the plugin's model
    assert "- not measured: MFU of the plugin at the one-GPU default >= 40 % (-)" in report  # no GPU
    assert re.search(r"^- (not )?held: tokens/s >= 1\.5x the faster of fairseq's .*x of fairseq's", report, re.M)


@pytest.mark.shared_data
@pytest.mark.lane(*STAND_IN)
def test_stand_in_runs_the_levers_a_cpu_can(lane):
    """One thread per process and --compile-layers dynamic run on a CPU, each against the default's run at the same
    size (the compilation once, at the first size: minutes on a CPU); the CUDA-graph lever is skipped with a note."""
    work, _, _, report = stand_in(lane)
    speed = [acceptance_speed.parse_host_cost((work / f"host_cost-{i}.txt").read_text()) for i in range(2)]
    for index, (name, which, options, against, gpu_only) in enumerate(acceptance_plan.LEVERS):
        log = work / f"host_cost-b{index}.txt"
        cells = table_row(report, "(b) Levers", name)
        if gpu_only:
            assert not log.exists() and cells[1:] == ["200", "GPU only (CUDA graphs): not run in the CPU stand-in"]
            continue
        if any(earlier[2] == options for earlier in acceptance_plan.LEVERS[:index]):  # a lever at its second size
            assert not log.exists() and cells[1:] == ["200", acceptance_plan.ONCE_ON_A_CPU]
            continue
        printed = log.read_text()
        row = acceptance_speed.parse_host_cost(printed)
        assert printed.rstrip() in report and row["max_tokens"] == acceptance_plan.TINY.host_cost_tokens[which]
        assert which == against  # the same size
        assert (row["syncs"] is None) == ("--compile-layers" in options)  # uncounted: dynamo would trace the counter
        assert "recompile_limit" not in printed  # the compiled layers never fell back to eager
        assert cells[1:4] == [
            str(row["max_tokens"]),
            f"{row['tokens_per_s']:.0f}",
            f"{row['tokens_per_s'] / speed[against]['tokens_per_s']:.2f}",
        ]
        command = re.search(rf"^{re.escape(name)}: `(.*)`$", report, re.M)[1].split()
        threads = [command[i + 1] for i, word in enumerate(command) if word == "--threads"]
        assert threads == (["0", "1"] if "--threads" in options else ["0"])  # the last word wins
        assert ", 1 thread(s)," in printed or "--threads" not in options
        assert f"- pass: lever: {name}" in report


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (the device tool); CI has none")
def test_tiny_pipeline_on_a_gpu_in_fp16_amp_and_bf16(reversal_data, tmp_path):
    result = run_acceptance(reversal_data / "joined", tmp_path, "--device", "cuda")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    report = (tmp_path / "gpu_acceptance_report.md").read_text()
    for precision in ("bf16-autocast", "fp16"):  # the recipes' defaults, by the card
        cells = table_row(report, "(a) Training", precision, "vaswani_transformer")
        assert cells[4] == "yes" and (cells[7] != "-") == (precision != "bf16-autocast")
    assert table_row(report, "(a) Training", "amp", "vaswani_transformer")[2].startswith("not trained")
    assert "- pass: beam 4 in float32: no real difference between the GPU's hypotheses and the CPU's (" in report
