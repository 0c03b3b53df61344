"""GPU acceptance in one command, on one GPU, in three stages, in priority order; each writes its part of the
markdown report as soon as it ends, so that a run cut short (killed at a time limit) still leaves the stages before:

    bash benchmarks/gpu_acceptance.sh        # = python benchmarks/gpu_acceptance.py [--work-dir W] [--raw-dir R]
    bash benchmarks/gpu_kit.sh               # on a CPU machine: wheels and data for a GPU machine without a package
                                             # index, and the command that runs this there
    GPU_ACCEPTANCE_STAND_IN=1 python benchmarks/gpu_acceptance.py ...   # = --device cpu --tiny: the CPU stand-in

On Multi30k (prepared by `python -m prepare.multi30k`) and synthetic WMT-like data; it has run on an H200. Deadlines
count from the command's start (GPU_ACCEPTANCE_STARTED, which the GPU kit's command sets before it installs; else
this process's start): stage (s) has written the report by minute 4.5, (a) by 7, (b) by 9.5 (the device tool allows
10). Each stage's runs stop MARGIN_S before its deadline: a run not started by then is not run, the run in progress is
stopped (its process killed); each is a failed check. A training run also stops after its updates or its seconds.
(s) speed of the recipes' default: benchmarks/host_cost.py (fairseq's Trainer, the big model, timed after warm-up)
   in the precision the recipes choose for the card (vaswani_plugin.precision.decide: bfloat16 autocast from compute
   capability 8.0, fairseq's --fp16 on 7.x; on a CPU the task's --bf16-autocast auto) with torch's default threads:
   the plugin at the one-GPU default and at 3,125 tokens a GPU (the paper's, of 8), fairseq's transformer in --fp16
   and in --amp with cuDNN's SDPA off at the plugin's batch: tokens/s, MFU, busy, peak memory, kernel time by kind,
   host time by frame; and TARGETS, held or not (the plugin against the faster of fairseq's two);
(a) correctness: fairseq-train of the plugin's base model (Table 3) for 50 updates in the default-relevant precisions
   (bfloat16 autocast and fp16; the stand-in: fp32 and bfloat16 autocast): loss finite and falling, loss scales, the
   output layer's float16 products; from the first that trained, beam-4 decoding (§6.1) of the first 100 test2016
   sentences on the CPU and on the GPU in float32 and fp16; a real difference from the CPU's float32 hypotheses, or
   more than NEAR_TIES near-ties, fails;
(b) levers, LEVERS, each a host_cost.py run against the default's at the same size (a ratio), each started only by
   its own deadline: one thread per process, --compile-layers dynamic, --compile-layers reduce-overhead (CUDA
   graphs: GPU only, skipped with a note in the stand-in, which compiles once, at the first size); then, if time
   allows (a run not started is a note, not
   a failure), fairseq-train of both implementations in stage (a)'s precisions for 10 s each, the same batch.
fairseq-train and fairseq-generate run in one worker process a stage (a run that kills it fails alone); the exit
status is 1 when a check fails; the report is written either way. Without a visible GPU (and without the stand-in)
nothing runs: the report says what the machine showed of CUDA. The CPU stand-in (--device cpu --tiny, or
GPU_ACCEPTANCE_STAND_IN=1) runs the same code with a tiny model, its "GPU" the CPU.
"""

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from host_cost_memory import PeakMemory  # noqa: E402  (torch.cuda.max_memory_allocated over every step)
from speed import PAPER, SIZES  # noqa: E402  (vaswani_plugin/paper.py; d_model, d_ff, h, N of speed.py's sizes)

PLUGIN = REPO / "vaswani_plugin"
STAND_IN = "GPU_ACCEPTANCE_STAND_IN"  # =1: the CPU stand-in, as --device cpu --tiny
STARTED = "GPU_ACCEPTANCE_STARTED"  # the command's start, in seconds since the epoch (`date +%s`; default: now)
MARGIN_S = 20  # a stage's runs are stopped this long before its deadline: time to write the report and the logs
NEAR_TIES = 5  # at most this many of the decoded sentences may be near-ties between the device and the CPU
TOLERANCE_FLOOR = 1e-4  # of a near-tie's score gap: float32's rounding in a batch, where the devices agree exactly
REPORT, LOGS = "gpu_acceptance_report.md", "gpu_acceptance_logs.tar.gz"
PRECISIONS = {  # fairseq-train arguments of each precision; the same for both implementations
    "fp16": ["--task", "translation", "--fp16"],
    "amp": ["--task", "translation", "--amp"],
    "bf16-autocast": ["--task", "vaswani_translation", "--bf16-autocast", "on"],  # fairseq's --bf16 assumes a TPU
    "fp32": ["--task", "translation"],
}
CRITERIA = {  # each implementation with its own criterion, as it is trained
    "vaswani_transformer": "vaswani_label_smoothed_cross_entropy",
    "transformer": "label_smoothed_cross_entropy",
}
PLUGIN_ONLY = ["vaswani_transformer"]
STAGES = {"s": "Speed of the default", "a": "Correctness", "b": "Levers"}  # in the order they run
DECODES = {  # stage (a)'s decoding runs: name -> (on the CPU?, --fp16?)
    "cpu": (True, False),
    "fp32": (False, False),
    "fp16": (False, True),
}
ALPHA = PAPER.ALPHA  # §6.1's length penalty, of the decoding runs and of the scores that compare their hypotheses
CHOSEN = "{the checkpoint stage (a) decodes}"  # in a decoding job's argv: the worker puts the checkpoint it chose


@dataclass(frozen=True)
class Runs:
    """A stage's fairseq-train runs."""

    steps: int
    log_interval: int
    warmup: int  # eq. 3's warmup_steps
    seconds: float  # a cap on each run's training time (fairseq's --stop-time-hours)


@dataclass(frozen=True)
class Mode:
    """What the acceptance trains and measures."""

    size: str  # a size of benchmarks/speed.py, trained by fairseq-train
    max_tokens: int
    check: Runs  # stage (a)
    speed: Runs  # stage (b)'s fairseq-train runs of both implementations, if time allows
    sentences: int  # the first test sentences, decoded on the CPU and on the device
    deadlines: tuple  # minutes after the command's start by which stage (s), (a), then (b), has written the report
    host_cost_args: tuple  # benchmarks/host_cost.py's model, data and counts for the speed runs (stages s and b)
    host_cost_tokens: tuple  # its tokens a batch: (the one-GPU default (0: the memory model's), the paper's 3,125
    # a GPU of 8)
    host_cost_seconds: float  # the timed window of each of stage (s)'s runs, after warm-up (0: --updates)
    lever_seconds: float  # the timed window of each lever's run (0: --updates)
    lever_starts: tuple  # minutes after the command's start by which each of LEVERS must have started
    prepare_args: tuple  # prepare.multi30k's options beyond its defaults (the quickstart's data)


# Stage (a): the base model on Multi30k; a warmup of 250 steps gives a rate of 5.6e-4 at step 50, the paper's order
# (its peak is 7e-4, at step 4,000), so that the loss falls within 50 updates. Stages (s) and (b): the speed at the
# sizes users train, the big model in benchmarks/host_cost.py (fairseq's Trainer) on 600,000 synthetic sentence
# pairs of WMT's lengths (19 million tokens a side: an epoch outlasts a 45 s window up to 400,000 tokens/s) over the
# paper's 37,000 symbols, timed after 10 updates of warm-up; the one-GPU default is the recipes' (--max-tokens 0).
BASE = Mode(
    "base",
    4096,
    Runs(50, 10, 250, 30),
    Runs(200, 10, 1000, 10),
    100,
    (4.5, 7, 9.5),
    (
        "--device",
        "cuda",
        "--size",
        "big",
        "--symbols",
        "37000",
        "--sentences",
        "600000",
        "--warmup",
        "10",
        "--profiled",
        "5",
    ),
    (0, 3125),
    30,
    15,
    (7.2, 7.8, 8.4, 8.9),
    (),
)
TINY = Mode(
    "tiny",
    512,
    Runs(20, 5, 20, 45),
    Runs(20, 5, 20, 45),
    100,
    (20, 40, 60),
    (
        "--device",
        "cpu",
        "--layers",
        "1",
        "--dim",
        "32",
        "--heads",
        "4",
        "--symbols",
        "100",
        "--sentences",
        "64",
        "--warmup",
        "1",
        "--updates",
        "2",
        "--rounds",
        "1",
        "--profiled",
        "1",
        "--num-workers",
        "0",
    ),
    (256, 200),
    0,
    0,
    (45, 50, 55, 58),
    ("--train-lines", "2000", "--bpe-merges", "500"),
)
DEFAULT = "{the recipes' default precision}"  # in a speed run's options: default_precision()'s, put in at run time
SAME_BATCH = "{the plugin's batch at the one-GPU default}"  # its --max-tokens: what the plugin's first run measured
# Stage (s)'s speed runs: the recipes' default (torch's default threads, as the recipes run on GPUs) against fairseq.
SPEED_RUNS = [  # (name, which of host_cost_tokens, host_cost.py's arguments)
    ("the plugin at the one-GPU default", 0, ["--implementations", "vaswani_transformer", "--precisions", DEFAULT]),
    ("the plugin at 3,125 tokens a GPU", 1, ["--implementations", "vaswani_transformer", "--precisions", DEFAULT]),
    (
        "fairseq's transformer --fp16, cuDNN's SDPA off",
        SAME_BATCH,
        ["--implementations", "transformer", "--precisions", "fp16", "--no-cudnn-sdpa"],
    ),
    (
        "fairseq's transformer --amp, cuDNN's SDPA off",
        SAME_BATCH,
        ["--implementations", "transformer", "--precisions", "amp", "--no-cudnn-sdpa"],
    ),
]
FAIRSEQS = (2, 3)  # SPEED_RUNS' fairseq runs: the faster is the ratio's reference
ONCE_ON_A_CPU = "run once in the CPU stand-in, at the size above"
# Stage (b)'s levers (issue 65, item 4), in priority order: (name, which of host_cost_tokens, arguments beyond the
# default's, the SPEED_RUNS run it is compared with, GPU only?)
PLUGIN_DEFAULT = ["--implementations", "vaswani_transformer", "--precisions", DEFAULT]
LEVERS = [
    ("one thread per process (--threads 1), 3,125 tokens a GPU", 1, [*PLUGIN_DEFAULT, "--threads", "1"], 1, False),
    ("--compile-layers dynamic, the one-GPU default", 0, [*PLUGIN_DEFAULT, "--compile-layers", "dynamic"], 0, False),
    ("--compile-layers dynamic, 3,125 tokens a GPU", 1, [*PLUGIN_DEFAULT, "--compile-layers", "dynamic"], 1, False),
    (
        "--compile-layers reduce-overhead (CUDA graphs), 3,125 tokens a GPU",
        1,
        [*PLUGIN_DEFAULT, "--compile-layers", "reduce-overhead"],
        1,
        True,
    ),
]
_TRAINING = PAPER.arguments("training")
RECIPES_OPTIMIZER = _TRAINING[_TRAINING.index("--optimizer") + 1]  # the plugin's, as the recipes train it
SPEED_RUN_OVERHEAD_S = 25  # a speed run's start-up, data, warm-up and profiled updates, beyond its timed window
# Issue 50's and 65's targets on one GPU, read off stage (s)'s runs: (what, run, measure, at least; against: a run,
# or runs whose largest measure is the reference, if a ratio)
TARGETS = [
    ("MFU of the plugin at the one-GPU default >= 40 %", 0, "mfu", 0.40, None),
    ("kernel time >= 85 % of wall time at 3,125 tokens a GPU", 1, "busy", 0.85, None),
    ("MFU of the plugin at 3,125 tokens a GPU >= 25 %", 1, "mfu", 0.25, None),
    (
        "tokens/s >= 1.5x the faster of fairseq's --fp16 and --amp (cuDNN's SDPA off), same batch",
        0,
        "tokens_per_s",
        1.5,
        FAIRSEQS,
    ),
    # Item 3: the memory model (vaswani_plugin/models/memory.py) bounds the measured peaks it sizes batches by.
    ("the memory model >= the measured peak at the one-GPU default", 0, "model_over_peak", 1.0, None),
    ("the memory model >= the measured peak at 3,125 tokens a GPU", 1, "model_over_peak", 1.0, None),
]


def default_precision(device, gpus=None):
    """The recipes' default precision on this device, as host_cost.py's --precisions and stage (a)'s name, and why:
    vaswani_plugin.precision.decide("auto", ...) by the card (bf16, fp16 or fp32); on a CPU the task's
    --bf16-autocast auto, on where the CPU has native bfloat16."""
    from vaswani_plugin import precision

    if device == "cuda":
        chosen, why = precision.decide("auto", "cuda", precision.visible_gpus() if gpus is None else gpus)
    else:
        chosen, why = precision.decide("auto", "cpu")
        enabled, reason = precision.bf16_autocast_enabled("auto", "cpu")
        chosen, why = ("bf16" if enabled else "fp32"), f"{why}: {reason}"
    return (
        {"bf16": "bf16", "fp16": "fp16", "fp32": "float32"}[chosen],
        {"bf16": "bf16-autocast", "fp16": "fp16", "fp32": "fp32"}[chosen],
        why,
    )


def say(message):
    print(f"[gpu_acceptance {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def die(message):
    print(f"gpu_acceptance: error: {message}", file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------------------------------------------------
# Reading fairseq's output.

TRAIN_INNER = re.compile(r"\| train_inner \| (\{.*\})\s*$", re.M)
TRAIN_SUMMARY = re.compile(r"\| train \| (\{.*\})\s*$", re.M)  # fairseq's end-of-epoch record, keys "train_..."
OVERFLOW = re.compile(r"gradient overflow detected|AMP: overflow detected")
TRANSLATED = re.compile(
    r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s "
    r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)"
)
HYPOTHESIS = re.compile(r"^H-(\d+)\t([^\t]*)\t(.*)$", re.M)
PRODUCTS = re.compile(r"\| (float16 products on \S+: .*)$", re.M)  # models/output_layer_loss.py's one line


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def parse_train_log(text):
    """The log windows of a fairseq-train json log (its train_inner records, numbers as floats) and how many
    gradient overflows fp16/amp reported (each one lowers the loss scale and skips or repeats the step). A run
    stopped before its first window (fairseq's transformer on the H200, 9 updates in 10 s) has its end-of-epoch
    record as its one window, marked "whole_run": its tokens/s include the start-up."""
    windows = [
        {key: _number(value) for key, value in json.loads(record).items()} for record in TRAIN_INNER.findall(text)
    ]
    if not windows and TRAIN_SUMMARY.search(text):
        record = json.loads(TRAIN_SUMMARY.findall(text)[-1])
        windows = [dict({key.removeprefix("train_"): _number(value) for key, value in record.items()}, whole_run=True)]
    return windows, len(OVERFLOW.findall(text))


def summarize_training(windows, overflows):
    """Steps, loss of the first and last window, whether it is finite and falling, tokens/s, loss scales."""
    if not windows:
        return {"error": "no train_inner line in the log"}
    losses = [window["loss"] for window in windows]
    timed = windows[1:] or windows  # the first window holds the start-up (CUDA, data loading)
    return {
        "steps": int(windows[-1]["num_updates"]),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "finite": all(isinstance(x, float) and math.isfinite(x) for x in losses),
        "windows": len(windows),
        "falling": len(losses) > 1 and losses[-1] < losses[0],
        "tokens_per_s": statistics.median(window["wps"] for window in timed),
        "loss_scales": [(int(w["num_updates"]), w["loss_scale"]) for w in windows if "loss_scale" in w],
        "overflows": overflows,
        "whole_run": windows[0].get("whole_run", False),
    }


def parse_generate(log_text, output_text):
    """fairseq-generate's timing line ({sentences, tokens, seconds, sentences_per_s, tokens_per_s}), its
    hypotheses (sentence id -> H- line's tokens) and their scores (id -> the H- line's score)."""
    found = TRANSLATED.search(log_text)
    lines = HYPOTHESIS.findall(output_text)
    hypotheses, scores = {int(i): tokens for i, _, tokens in lines}, {int(i): float(score) for i, score, _ in lines}
    if not found:
        return None, hypotheses, scores
    sentences, tokens, seconds, per_s, tokens_per_s = (float(x.replace(",", "")) for x in found.groups())
    timing = dict(
        sentences=int(sentences), tokens=int(tokens), seconds=seconds, sentences_per_s=per_s, tokens_per_s=tokens_per_s
    )
    return timing, hypotheses, scores


def differing(hypotheses, reference):
    """The sentence ids (of either set) with a different hypothesis, or none, in `hypotheses`, in order."""
    return sorted(i for i in set(hypotheses) | set(reference) if hypotheses.get(i) != reference.get(i))


HOST_COST_ROW = re.compile(
    r"^(float32|fp16|amp|bf16) +(transformer|vaswani_transformer) +(adam|vaswani_adam) +"
    r"(\d+) +(\d+) +(\S+) +(\S+) +(\S+) +(\S+) +([\d.]+) +([\d.]+) +([\d.]+) +(\S+)",
    re.M,
)
HOST_COST_TOKENS = re.compile(r"^host cost of an update: .*, (\d+) tokens a batch,", re.M)
HOST_COST_PRODUCTS = re.compile(r"the matrix products at ([\d.]+) TFLOP/s", re.M)  # the kernel-time breakdown's
HOST_COST_CALLS = re.compile(
    r"^(float32|fp16|amp|bf16) +(transformer|vaswani_transformer) +(adam|vaswani_adam) +"
    r"([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +"
    r"([\d.]+)$",
    re.M,
)


def parse_host_cost(text):
    """benchmarks/host_cost.py's row of one configuration: its tokens a batch, its device table (updates, tokens/s,
    MFU and busy as shares, peak MB, the memory model's MB and their ratio, wall ms, the host's ms in forward and
    backward and in the optimizer, the device's idle ms; None for '-'), its host table (host ms, data wait ms,
    kernel-like calls, syncs) and the matrix products' TFLOP/s (its kernel time by kind); None without one."""

    def value(word, share=False):
        return None if word == "-" else float(word.rstrip("%")) / (100 if share else 1)

    device, host = HOST_COST_ROW.search(text), HOST_COST_CALLS.search(text)
    if device is None or host is None:
        return None
    updates, tokens, mfu, busy, peak, model, wall, forward_backward, optimizer, idle = device.groups()[3:]
    batch, products = HOST_COST_TOKENS.search(text), HOST_COST_PRODUCTS.search(text)
    return dict(
        precision=device.group(1),
        implementation=device.group(2),
        optimizer=device.group(3),
        max_tokens=int(batch.group(1)) if batch else None,
        updates=int(updates),
        tokens_per_s=float(tokens),
        mfu=value(mfu, True),
        busy=value(busy, True),
        peak_memory_mb=value(peak),
        model_memory_mb=value(model),
        model_over_peak=value(model) / value(peak) if value(model) and value(peak) else None,
        wall_ms=float(wall),
        forward_backward_ms=float(forward_backward),
        optimizer_ms=float(optimizer),
        idle_ms=value(idle),
        host_ms=float(host.group(4)),
        wait_ms=float(host.group(5)),
        calls=float(host.group(10)),
        syncs=float(host.group(11)),
        products_tflops=float(products.group(1)) if products else None,
    )


def measured(runs, index, measure):
    """A run's measure, None where it did not run or did not measure it."""
    return (runs[index].get("row") or {}).get(measure) if index < len(runs) else None


def reference(runs, against, measure):
    """(the largest measure of the runs `against`, that run's index), or (None, None) where none measured it."""
    found = [(measured(runs, i, measure), i) for i in against if measured(runs, i, measure)]
    return max(found) if found else (None, None)


def targets_held(runs):
    """(what, held: True, False or None when not measured, the figures) of each of TARGETS; a ratio's reference is
    the faster of its runs (the figures name it)."""
    found = []
    for what, run, measure, least, against in TARGETS:
        value, of = measured(runs, run, measure), ""
        if against is not None and value is not None:
            other, index = reference(runs, against if isinstance(against, tuple) else (against,), measure)
            value = None if not other else value / other
            of = f" of {runs[index]['name']}" if other and isinstance(against, tuple) else ""
        found.append(
            (
                what,
                None if value is None else value >= least,
                "-" if value is None else f"{value:.2f}" + ("x" + of if against is not None else ""),
            )
        )
    return found


# ---------------------------------------------------------------------------------------------------------
# The machine.


def machine(device, kit):
    """Rows of the report's machine table."""
    import torch

    rows = {}
    if device == "cuda":
        from vaswani_plugin.tools.training_cost import peak_for  # imports fairseq: only here

        name = torch.cuda.get_device_name(0)
        peak = peak_for(name, "amp")
        rows["GPU"] = name + (
            f" (dense fp16/bf16 peak {peak:g} TFLOP/s, vaswani_plugin.tools.training_cost)"
            if peak
            else " (peak FLOP/s unknown to vaswani_plugin.tools.training_cost: no MFU)"
        )
    else:
        rows["GPU"] = "none: the CPU stand-in (--device cpu --tiny)"
    rows["driver / CUDA"] = _nvidia_smi(["nvidia-smi"], r"Driver Version: *\S+.*?CUDA Version: *\S+")
    rows["nvidia-smi"] = _nvidia_smi(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,power.limit", "--format=csv,noheader"], r".+"
    )
    rows["torch"] = torch.__version__ + (
        f", CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}" if torch.version.cuda else ""
    )
    models = (
        re.findall(r"^model name\s*: (.*)$", Path("/proc/cpuinfo").read_text(), re.M)
        if Path("/proc/cpuinfo").exists()
        else []
    )
    rows["CPU"] = f"{models[0] if models else 'unknown'}, {os.cpu_count()} cores"
    rows["Python"] = f"{sys.version.split()[0]} ({sys.executable})"
    rows["fairseq"] = _fairseq()
    rows["vaswani_plugin"] = f"--user-dir {PLUGIN}, {_git()}"
    if kit:
        manifest = json.loads((kit / "kit.json").read_text())
        rows["GPU kit"] = (
            f"{kit}: built {manifest['built']} from {manifest['commit']} for Python "
            f"{manifest['python']}; " + ", ".join(f"{name} {version}" for name, version in manifest["packages"].items())
        )
    return rows


def cuda_rows():
    """What this machine shows of CUDA, for the report of a run that found no GPU."""
    import glob

    import torch

    rows = {
        "torch": f"{torch.__version__} ({'CUDA ' + torch.version.cuda if torch.version.cuda else 'a CPU build'})",
        "torch.cuda.is_available()": str(torch.cuda.is_available()),
        "torch.cuda.device_count()": str(torch.cuda.device_count()),
    }
    try:
        torch.cuda.init()
        rows["torch.cuda.init()"] = "no error"
    except Exception as error:  # the driver's or the build's own words
        rows["torch.cuda.init()"] = " ".join(f"{type(error).__name__}: {error}".split())
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    rows["CUDA_VISIBLE_DEVICES"] = (
        "not set"
        if visible is None
        else f"{visible!r}" + (" (empty: CUDA is shown no GPU)" if not visible.strip() else "")
    )
    rows["/dev/nvidia*"] = ", ".join(sorted(glob.glob("/dev/nvidia*"))) or "none"
    rows["nvidia-smi -L"] = _nvidia_smi(["nvidia-smi", "-L"], r".+")
    rows["Python"] = f"{sys.version.split()[0]} ({sys.executable})"
    return rows


def _fairseq():
    """fairseq's distribution, version and folder, as this Python imports it."""
    spec = importlib.util.find_spec("fairseq")
    for dist in ("ve-fairseq", "fairseq"):
        try:
            return f"{dist} {importlib.metadata.version(dist)}, {Path(spec.origin).parent}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return f"version unknown, {Path(spec.origin).parent}"


def _git():
    """The commit of the working tree, or why there is none (the device tool copies the tree without .git)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return "no git here"
    return f"git {done.stdout.strip()}" if done.returncode == 0 else "not a git checkout"


def _nvidia_smi(command, pattern):
    try:
        output = subprocess.run(command, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "nvidia-smi not found"
    found = re.search(pattern, output)
    return " ".join(found[0].split()) if found else "not in nvidia-smi's output"


# ---------------------------------------------------------------------------------------------------------
# The runs: jobs of one worker process.

# Batches are collated in the run's own process: a DataLoader worker process takes 5 s to shut down after each
# run in the shared worker, and a Multi30k batch collates in about a millisecond.
DATA_LOADING = ["--num-workers", "0"]


def train_argv(data, mode, runs, precision, impl, device, save_dir=None):
    """fairseq-train's arguments: §5's training (Adam, eq. 3, label smoothing 0.1) of one size, json logs."""
    dim, ffn, heads, layers = SIZES[mode.size]
    paper = PAPER.arguments("training")  # the implementation's own criterion in place of the plugin's
    if impl not in PLUGIN_ONLY:  # fairseq's transformer with fairseq's own adam: what a user gets by doing nothing
        paper = ["adam" if word == "vaswani_adam" else word for word in paper]
    criterion = paper.index("--criterion")
    sizes = [
        x
        for side in ("encoder", "decoder")
        for x in (
            f"--{side}-embed-dim",
            dim,
            f"--{side}-ffn-embed-dim",
            ffn,
            f"--{side}-attention-heads",
            heads,
            f"--{side}-layers",
            layers,
        )
    ]
    save = (
        ["--save-dir", save_dir, "--no-epoch-checkpoints", "--save-interval", "1000000", "--no-save-optimizer-state"]
        if save_dir
        else ["--no-save"]
    )
    return [
        str(x)
        for x in [
            data,
            "--user-dir",
            PLUGIN,
            *PRECISIONS[precision],
            "--arch",
            impl,
            "--share-all-embeddings",
            *sizes,
            "--dropout",
            "0.1",
            *paper[:criterion],
            "--warmup-updates",
            runs.warmup,
            "--criterion",
            CRITERIA[impl],
            *paper[criterion + 2 :],
            "--max-tokens",
            mode.max_tokens,
            "--required-batch-size-multiple",
            "1",
            "--seed",
            "1",
            "--distributed-world-size",
            "1",  # one GPU, however many the machine has
            "--max-update",
            runs.steps,
            "--stop-time-hours",
            runs.seconds / 3600,
            "--disable-validation",
            "--log-format",
            "json",
            "--log-interval",
            runs.log_interval,
            *save,
            *DATA_LOADING,
            *(["--cpu"] if device == "cpu" else []),
        ]
    ]


def generate_argv(data, subset, checkpoint, fp16, device, results):
    """fairseq-generate's arguments: §6.1's beam search over a split."""
    return [
        str(x)
        for x in [
            data,
            "--user-dir",
            PLUGIN,
            "--task",
            "vaswani_translation",
            "--path",
            checkpoint,
            "--gen-subset",
            subset,
            *PAPER.arguments("decoding"),
            "--batch-size",
            "128",
            "--required-batch-size-multiple",
            "1",
            "--results-path",
            results,
            *DATA_LOADING,
            *(["--fp16"] if fp16 else []),
            *(["--cpu"] if device == "cpu" else []),
        ]
    ]


def write_first_sentences(data, split, count, dest):
    """A data-bin in `dest` with data's dictionaries and the first `count` sentences of its binarised split (both
    languages, fairseq's mmap format), so that fairseq-generate decodes those alone."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset, MMapIndexedDatasetBuilder

    indexes = sorted(Path(data).glob(f"{split}.*.idx"))
    if not indexes:
        raise FileNotFoundError(f"no {split}.*.idx in {data}")
    Path(dest).mkdir()
    for dictionary in Path(data).glob("dict.*.txt"):
        shutil.copyfile(dictionary, Path(dest) / dictionary.name)
    for index in indexes:
        dataset = MMapIndexedDataset(str(index.with_suffix("")))
        out = Path(dest) / index.stem
        builder = MMapIndexedDatasetBuilder(f"{out}.bin", dtype=dataset._index.dtype)
        for i in range(min(int(count), len(dataset))):
            builder.add_item(dataset[i])
        builder.finalize(f"{out}.idx")


def token_log_probs(model, sources, hypotheses, device, dictionary, batch=32):
    """log p of each hypothesis token (</s> last) given the source and the tokens before it, teacher-forced in
    float32 on `device`: one CPU tensor per hypothesis."""
    import torch
    from fairseq.data import data_utils

    pad, eos, scores = dictionary.pad(), dictionary.eos(), []
    with torch.no_grad():
        for start in range(0, len(hypotheses), batch):
            src, hyp = sources[start : start + batch], hypotheses[start : start + batch]
            logits, _ = model(
                data_utils.collate_tokens(src, pad, left_pad=True).to(device),
                torch.tensor([len(tokens) for tokens in src], device=device),
                data_utils.collate_tokens(hyp, pad, eos, move_eos_to_beginning=True).to(device),
            )
            target = data_utils.collate_tokens(hyp, pad).to(device)
            lprobs = torch.log_softmax(logits.float(), dim=-1).gather(-1, target.unsqueeze(-1)).squeeze(-1).cpu()
            scores += [lprobs[row, : len(tokens)] for row, tokens in enumerate(hyp)]
    return scores


def compare_on_both_devices(data, checkpoint, cpu_output, device_output, device):
    """The CPU's and the device's beam-search hypotheses (fairseq-generate's outputs), scored as the search scores
    them (Σ log p / lp(|Y|), §6.1, α = ALPHA) in float32. drift: the largest |device - CPU| of the running sums of
    log p over every CPU hypothesis, teacher-forced on both devices (the same batch); a gap up to 2 × drift between
    two hypotheses can flip their order from one device to the other, so that is the tolerance of a near-tie
    (TOLERANCE_FLOOR at least). rescored: where the device's hypothesis differs, both scored on the CPU."""
    import copy

    from vaswani_plugin.generation.length import gnmt_length_penalty
    from vaswani_plugin.serving.loading import load_model

    task, model = load_model(checkpoint, data)
    model.float()
    task.load_dataset("test")
    sources, dictionary = task.dataset("test").src, task.target_dictionary
    cpu = parse_generate("", Path(cpu_output).read_text())[1]
    ours = parse_generate("", Path(device_output).read_text())[1]

    def tokens(text):
        return dictionary.encode_line(text, add_if_not_exist=False, append_eos=True).long()

    def scores(ids, hypotheses, on, at):
        found = token_log_probs(on, [sources[i] for i in ids], [tokens(hypotheses[i]) for i in ids], at, dictionary)
        return dict(zip(ids, found))

    ids = sorted(cpu)
    on_cpu = scores(ids, cpu, model, "cpu")
    on_device = scores(ids, cpu, copy.deepcopy(model).to(device), device)
    drift = max([float((on_device[i].cumsum(0) - on_cpu[i].cumsum(0)).abs().max()) for i in ids] or [0.0])
    changed = [i for i in ids if i in ours and ours[i] != cpu[i]]
    theirs = scores(changed, ours, model, "cpu")

    def score(lprobs):
        return float(lprobs.sum()) / gnmt_length_penalty(len(lprobs), ALPHA)

    return dict(
        drift=drift,
        tolerance=max(2 * drift, TOLERANCE_FLOOR),
        scores={str(i): score(on_cpu[i]) for i in ids},
        rescored={str(i): [score(on_cpu[i]), score(theirs[i])] for i in changed},
    )


def agreement(cpu, device, comparison, cap=NEAR_TIES):
    """The device's hypotheses against the CPU's (sentence id -> text), three ways: identical; near-ties, which
    both score within comparison's tolerance of each other on the CPU; real differences (farther apart, or a
    hypothesis that one side lacks). Passed: no real difference and at most `cap` near-ties."""
    gaps = {int(i): abs(ours - theirs) for i, (ours, theirs) in comparison["rescored"].items()}
    changed = differing(device, cpu)
    near = [i for i in changed if i in gaps and gaps[i] <= comparison["tolerance"]]
    real = [i for i in changed if i not in near]
    return dict(
        compared=len(set(cpu) | set(device)),
        identical=len(set(cpu) | set(device)) - len(changed),
        near_ties=near,
        real=real,
        gaps=gaps,
        tolerance=comparison["tolerance"],
        drift=comparison["drift"],
        passed=not real and len(near) <= cap,
        cap=cap,
    )


def run_job(job):
    """One fairseq command-line run in this process, its log in job["log"]; returns its result."""
    import gc
    import logging

    handler = logging.FileHandler(job["log"], mode="w")  # fairseq's log format, as its command-line tools set it
    handler.setFormatter(
        logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    )
    root, level = logging.getLogger(), logging.getLogger().level
    root.addHandler(handler)
    root.setLevel(logging.INFO)

    import fairseq_cli.generate
    import fairseq_cli.train
    import torch
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils

    gc.collect()  # the runs before this one: their models and optimisers are garbage in reference cycles
    cuda = torch.cuda.is_available() and "--cpu" not in job["argv"]
    if cuda:
        torch.cuda.empty_cache()
    else:
        _reset_peak_rss()
    start = time.perf_counter()
    result = {"started": time.time()}
    try:
        with PeakMemory(torch.cuda if cuda else None) as peak:
            if job["tool"] == "train":  # fairseq-train's cli_main
                args = options.parse_args_and_arch(options.get_training_parser(), job["argv"])
                distributed_utils.call_main(convert_namespace_to_omegaconf(args), fairseq_cli.train.main)
            elif job["tool"] == "generate":  # fairseq-generate's cli_main
                fairseq_cli.generate.main(options.parse_args_and_arch(options.get_generation_parser(), job["argv"]))
            elif job["tool"] == "compare":
                result.update(compare_on_both_devices(*job["argv"]))
            else:
                write_first_sentences(*job["argv"])
    except (Exception, SystemExit) as error:  # fairseq's argument errors exit; the next job still runs
        logging.getLogger("gpu_acceptance").exception("the run failed")
        result["error"] = f"{type(error).__name__}: {error}"
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()
    result["seconds"] = time.perf_counter() - start
    result["ended"] = time.time()
    result["peak_memory_mb"] = peak.megabytes if cuda else _peak_rss_mb()
    return result


class GpuBusy:
    """nvidia-smi's GPU utilisation, a sample every 250 ms into `path`, while it is entered: how much of each
    training run the GPU was busy. The H100's first runs were host-bound (21-57 % busy, docs/results.md "GPU"). Where
    there is no GPU or no nvidia-smi, nothing is sampled."""

    COMMAND = ["nvidia-smi", "--query-gpu=timestamp,utilization.gpu", "--format=csv,noheader,nounits", "-lms", "250"]

    def __init__(self, path, device):
        self.path, self.device, self.process = Path(path), device, None

    def __enter__(self):
        if self.device == "cuda" and shutil.which(self.COMMAND[0]):
            with open(self.path, "w") as out:
                self.process = subprocess.Popen(self.COMMAND, stdout=out, stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc):
        if self.process is not None:
            self.process.terminate()
            self.process.wait()

    def samples(self):
        """(time.time(), percent) of every sample taken, or None if none was."""
        return parse_gpu_busy(self.path.read_text()) if self.process is not None else None


def parse_gpu_busy(text):
    """nvidia-smi's `timestamp, utilization.gpu` lines (local time, as time.time() counts) as (seconds, percent)."""
    samples = []
    for line in text.splitlines():
        stamp, _, percent = line.partition(",")
        try:
            samples.append((datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp(), float(percent)))
        except ValueError:
            continue  # a line cut short when nvidia-smi was stopped
    return samples


def busy_during(samples, started, ended):
    """The median GPU utilisation (%) of the samples taken between `started` and `ended`, or None."""
    inside = [percent for moment, percent in samples or [] if started is not None and started <= moment <= ended]
    return statistics.median(inside) if inside else None


def _reset_peak_rss():
    """Linux: restart the process's peak RSS (VmHWM) from its current RSS, so that each run has its own."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _peak_rss_mb():
    try:
        kilobytes = re.search(r"^VmHWM:\s*(\d+) kB", Path("/proc/self/status").read_text(), re.M)[1]
    except (OSError, TypeError):
        return None
    return int(kilobytes) / 1024


def worker(jobs_file):
    """Run the jobs one after another; each one's result goes to its own file as soon as it is known. A job whose
    deadline (time.time()) has passed is not run: its result says so. A decoding job of stage (a) ("decodes": the
    work folder and the precisions) runs on the checkpoint chosen when it starts: CHOSEN in its argv."""
    for job in json.loads(Path(jobs_file).read_text()):
        if job.get("deadline") is not None and time.time() > job["deadline"]:
            result = {"error": job["late"]}
        elif "decodes" in job:
            _, checkpoint = decoded_checkpoint(Path(job["decodes"]["work"]), job["decodes"]["precisions"])
            result = (
                {"error": "not run: no precision trained"}
                if checkpoint is None
                else run_job(dict(job, argv=[str(checkpoint) if x == CHOSEN else x for x in job["argv"]]))
            )
        else:
            result = run_job(job)
        Path(job["result"]).write_text(json.dumps(result))


def run_jobs(jobs, work, log, deadline=None, end="the deadline"):
    """Run all jobs in worker processes: one, unless a run kills it (then that run failed, the rest go on). At
    `deadline` (time.time()) the worker is stopped: the run in progress then failed ("stopped at END"), and the runs
    not started are not run ("not run: past END")."""
    late = f"not run: past {end}"
    pending = [dict(job, deadline=deadline, late=late) for job in jobs]
    with open(log, "w") as out:
        while pending:
            if deadline is not None and time.time() > deadline:
                for job in pending:
                    Path(job["result"]).write_text(json.dumps({"error": late}))
                break
            (work / "jobs.json").write_text(json.dumps(pending))
            say(f"worker: {', '.join(job['name'] for job in pending)} (log {log})")
            status = run_until(
                [sys.executable, __file__, "--worker", str(work / "jobs.json")],
                None if deadline is None else deadline - time.time(),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, PYTHONPATH=_pythonpath()),
            )
            error = (
                f"stopped at {end}"
                if status is None
                else f"the worker died (exit status {status}) in this run; see {log}"
            )
            unfinished = [job for job in pending if not Path(job["result"]).exists()]
            if unfinished:
                Path(unfinished[0]["result"]).write_text(json.dumps({"error": error}))
            pending = unfinished[1:]
    return {job["name"]: json.loads(Path(job["result"]).read_text()) for job in jobs}


def run_until(command, seconds, **popen):
    """Run a command, its whole process group (it and what it started) killed after `seconds` (None: no limit):
    its exit status, or None if it was stopped."""
    process = subprocess.Popen(command, start_new_session=True, **popen)
    try:
        return process.wait(timeout=None if seconds is None else max(0.0, seconds))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return None


def _pythonpath():
    return os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))


# ---------------------------------------------------------------------------------------------------------
# The report.


def _f(value, spec):
    return "-" if value is None else format(value, spec)


def _percent(share):
    return "-" if share is None else f"{100 * share:.1f} %"


def training_rows(training, precisions, impls):
    """Markdown rows of a training table: (precision, implementation) -> summary (or a note)."""
    rows = []
    for precision in precisions:
        for impl in impls:
            row = training[precision, impl]
            if "note" in row or "error" in row:
                rows.append(f"| {precision} | {impl} | {row.get('note') or 'FAILED: ' + row['error']} |" + " |" * 6)
                continue
            scales = row["loss_scales"]
            scale = f"{scales[0][1]:g} → {scales[-1][1]:g}, min {min(s for _, s in scales):g}" if scales else "-"
            rows.append(
                f"| {precision} | {impl} | {row['steps']} | {row['first_loss']:.3f} → {row['last_loss']:.3f}"
                f" | {'yes' if row['finite'] and row['falling'] else 'NO' + one_window(row)}"
                f" | {row['tokens_per_s']:.0f}"
                f" | {_f(row['peak_memory_mb'], '.0f')} | {scale} | {row['overflows']} |"
            )
    return rows


def training_section(title, runs, mode, training, precisions, impls):
    """A stage's training table, with the loss-scale history of the runs that have one."""
    lines = [
        f"## {title}: the {mode.size} model, {runs.steps} updates of {mode.max_tokens} tokens per precision",
        "",
        f"fairseq-train with --log-format json --log-interval {runs.log_interval}, stopped after {runs.steps} "
        f"updates or {runs.seconds:g} s of training; loss (base 2, label smoothed) of the first and last log "
        f"window; tokens/s: target tokens, the median `wps` of the windows after the first; peak memory: "
        f"torch.cuda.max_memory_allocated over the whole run, every step's peak included (the worker reads it "
        f"before fairseq's trainer resets it after each step; CPU stand-in: the worker's peak RSS in the run); "
        f"loss scale: fp16 "
        f"and amp only, first → last logged value; overflows: fairseq's overflow notes.",
        "",
        "| precision | implementation | steps | loss first → last | finite and falling | tokens/s "
        "| peak MB | loss scale | overflows |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += training_rows(training, precisions, impls)
    scaled = [(p, i) for p in precisions for i in impls if training[p, i].get("loss_scales")]
    if scaled:
        lines += ["", "Loss-scale history (update: scale, one value per log window):", ""]
        lines += [
            f"- {p}, {i}: " + ", ".join(f"{step}: {scale:g}" for step, scale in training[p, i]["loss_scales"])
            for p, i in scaled
        ]
    products = [(p, i) for p in precisions for i in impls if training[p, i].get("products")]
    if products:
        lines += [
            "",
            "The output layer's float16 products (models/output_layer_loss.py, its line in the run's log):",
            "",
        ]
        lines += [f"- {p}, {i}: {training[p, i]['products'][0]}" for p, i in products]
    return lines


def decoding_section(decoding, device):
    """Stage (a)'s decoding: the CPU's float32 hypotheses against the device's in float32 and fp16."""
    on = "GPU" if device == "cuda" else "stand-in device (the CPU)"
    names = {"cpu": "CPU, float32", "fp32": f"{on}, float32", "fp16": f"{on}, fp16"}
    lines = [
        f"## (a) Beam-4 decoding: the {on} against the CPU",
        "",
        f"fairseq-generate --beam {PAPER.BEAM} --gnmt-alpha {ALPHA} --batch-size 128 of the first "
        f"{decoding['sentences']} test sentences (a data-bin of their own, first-sentences/), from "
        f"{decoding['checkpoint']} checkpoint (the first precision that trained): on the CPU (--cpu), and on the "
        f"{on} without and with --fp16; each its own timing line, on the {on} the second of two runs (the first "
        f"loads CUDA's kernels).",
        "",
        "| run | sentences | sentences/s | tokens/s | seconds |",
        "|---|---|---|---|---|",
    ]
    for name, title in names.items():
        timing = decoding[name]
        lines.append(
            f"| {title} | {timing['sentences']} | {timing['sentences_per_s']:.1f} | "
            f"{timing['tokens_per_s']:.1f} | {timing['seconds']:.1f} |"
            if "sentences" in timing
            else f"| {title} | FAILED: {timing['error']} | | | |"
        )
    found = decoding.get("agreement")
    if found:
        hypotheses, gaps = decoding["hypotheses"], found["gaps"]
        lines += [
            "",
            f"{on} float32 against the CPU, of {found['compared']} sentences: {found['identical']} "
            f"identical, {len(found['near_ties'])} near-ties, {len(found['real'])} real differences "
            f"(passes with no real difference and at most {found['cap']} near-ties). Both hypotheses of a "
            f"sentence are scored on the CPU as the search scores them (Σ log p / lp(|Y|), α = {ALPHA}); "
            f"a near-tie's scores differ by at most {found['tolerance']:.2e}: twice the drift between the "
            f"devices, {found['drift']:.2e}, the largest difference of running sums of log p over the "
            f"CPU's hypotheses teacher-forced on both in float32 (at least {TOLERANCE_FLOOR:g}).",
        ]
        for kind, ids in (("near-tie", found["near_ties"]), ("REAL DIFFERENCE", found["real"])):
            for i in ids[:10]:
                lines += [
                    f"- sentence {i}, {kind} (gap {_f(gaps.get(i), '.2e')}): CPU `{hypotheses['cpu'].get(i)}`; "
                    f"{on} `{hypotheses['fp32'].get(i)}`"
                ]
    if "sentences" in decoding["fp32"] and "sentences" in decoding["fp16"]:
        lines += [
            "",
            f"fp16 / float32 sentences/s: "
            f"{decoding['fp16']['sentences_per_s'] / decoding['fp32']['sentences_per_s']:.2f}; "
            f"hypotheses that differ: {len(decoding['fp16_differing'])} of {decoding['fp32']['sentences']} "
            f"(fp16 may differ in a few: reported, not a failure)",
        ]
    return lines


def comparison_section(training, precisions):
    """Stage (b)'s ratios of the plugin to fairseq's transformer, precision by precision."""
    lines = [
        "## (b) The plugin against fairseq's `transformer` (same data, batch size and precision)",
        "",
        "| precision | plugin tokens/s | fairseq tokens/s | ratio | plugin peak MB | fairseq peak MB | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for precision in precisions:
        ours, theirs = training[precision, "vaswani_transformer"], training[precision, "transformer"]
        if "tokens_per_s" not in ours or "tokens_per_s" not in theirs:
            lines.append(f"| {precision} | {ours.get('note') or 'a run failed'} |" + " |" * 5)
            continue
        memory = [ours["peak_memory_mb"], theirs["peak_memory_mb"]]
        ratio = memory[0] / memory[1] if None not in memory else None
        speeds = [
            f"{row['tokens_per_s']:.0f}" + (" (whole run, start-up included)" if row.get("whole_run") else "")
            for row in (ours, theirs)
        ]
        lines.append(
            f"| {precision} | {speeds[0]} | {speeds[1]} | "
            f"{ours['tokens_per_s'] / theirs['tokens_per_s']:.2f} | {_f(memory[0], '.0f')} | "
            f"{_f(memory[1], '.0f')} | {_f(ratio, '.2f')} |"
        )
    busy = {(p, i): training[p, i].get("gpu_busy") for p in precisions for i in CRITERIA}
    if any(value is not None for value in busy.values()):
        lines += [
            "",
            "GPU busy during each run (nvidia-smi's utilisation, the median of its 250 ms samples; a step "
            "bound by the host leaves the GPU idle): "
            + "; ".join(
                f"{p}: plugin {_f(busy[p, 'vaswani_transformer'], '.0f')} %, fairseq "
                f"{_f(busy[p, 'transformer'], '.0f')} %"
                for p in precisions
            ),
        ]
    else:
        lines += ["", "GPU busy during each run: not measured (no GPU, or no nvidia-smi, on this machine)"]
    return lines


def host_cost_section(runs, device, why):
    """Stage (s)'s speed at the sizes users train: benchmarks/host_cost.py's runs, the targets, their outputs."""
    lines = [
        "## (s) Speed of the recipes' default at the sizes users train (benchmarks/host_cost.py)",
        "",
        f"The recipes' default precision here: {why}. "
        "Each run one configuration in a process of its own, fairseq's Trainer: target tokens/s over the timed "
        "window; MFU = 6 x parameters x tokens/s / the card's peak (training_cost.peak_for); busy = the "
        "device's time per update (torch.profiler, kernels and copies) / the wall time of an unprofiled update; "
        "peak memory (torch.cuda.max_memory_allocated) and the plugin's memory model's (vaswani_plugin/models/"
        "memory.py, for the largest padded batch of the same updates: an upper bound, by which the recipes "
        "choose the one-GPU default); an update's wall time, the host's time in forward and "
        "backward and in the gradients and optimizer (fairseq's ranges), and the device's idle time."
        + (
            " On a CPU there is no device time or MFU; its peak is counted by torch.profiler."
            if device == "cpu"
            else ""
        ),
        "",
        "| run | precision | tokens a batch | updates | tokens/s | MFU | busy | products TFLOP/s | peak MB | model MB "
        "| wall ms | fwd+bwd host ms | optimizer host ms | idle ms | data wait ms | kernel-like calls | syncs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        row = run.get("row")
        if row is None:
            lines.append(f"| {run['name']} | | {run['tokens']} | FAILED: {run['error']} |")
            continue
        lines.append(
            f"| {run['name']} | {row['precision']} | {row['max_tokens'] or run['tokens']} | {row['updates']} | "
            f"{row['tokens_per_s']:.0f} | {_percent(row['mfu'])} | {_percent(row['busy'])} | "
            f"{_f(row.get('products_tflops'), '.3g')} | "
            f"{_f(row['peak_memory_mb'], '.0f')} | {_f(row['model_memory_mb'], '.0f')} | "
            f"{row['wall_ms']:.1f} | "
            f"{row['forward_backward_ms']:.1f} | "
            f"{row['optimizer_ms']:.1f} | {_f(row['idle_ms'], '.1f')} | {row['wait_ms']:.2f} | "
            f"{row['calls']:.0f} | {row['syncs']:.0f} |"
        )
    lines += ["", "Issue 50's and 65's targets on one GPU:", ""]
    lines += [
        f"- {'held' if held else 'not held' if held is not None else 'not measured'}: {what} ({figures})"
        for what, held, figures in targets_held(runs)
    ]
    lines += ["", "One card makes no gradient all-reduce: scaling to 8 GPUs stays unmeasured."]
    return lines + outputs(runs)


def outputs(runs):
    """Each run's command and host_cost.py's whole output (kernel time by kind, host time by frame)."""
    lines = []
    for run in runs:
        if run.get("output"):
            lines += ["", f"{run['name']}: `{run['command']}`", "", "```", run["output"].rstrip(), "```"]
    return lines


def levers_section(levers, speed):
    """Stage (b)'s levers, each against stage (s)'s run of the default at the same size."""
    lines = [
        "## (b) Levers, each against the default at the same size (benchmarks/host_cost.py)",
        "",
        "Each lever started only by its own deadline, in this order; x default: its tokens/s over the default's "
        "(stage s) at the same size.",
        "",
        "| lever | tokens a batch | tokens/s | x default | MFU | busy | products TFLOP/s | peak MB | wall ms | "
        "host ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in levers:
        row, base = run.get("row"), measured(speed, run["against"], "tokens_per_s")
        if row is None:
            lines.append(f"| {run['name']} | {run['tokens']} | {run.get('note') or 'FAILED: ' + run['error']} |")
            continue
        lines.append(
            f"| {run['name']} | {row['max_tokens'] or run['tokens']} | {row['tokens_per_s']:.0f} | "
            f"{_f(base and row['tokens_per_s'] / base, '.2f')} | {_percent(row['mfu'])} | {_percent(row['busy'])} | "
            f"{_f(row.get('products_tflops'), '.3g')} | {_f(row['peak_memory_mb'], '.0f')} | {row['wall_ms']:.1f} | "
            f"{row['host_ms']:.1f} |"
        )
    return lines + outputs(levers)


def checks_section(title, checks):
    return [f"## {title}", ""] + [f"- {'pass' if ok else 'FAIL'}: {what}" for what, ok in checks]


def render_report(facts):
    """The markdown report from the facts main() gathered: stage (s), then (a) and (b) once they have run."""
    mode, shown = facts["mode"], facts["precisions"]
    parts = {name: facts.get(name) for name in STAGES}
    stages = "; ".join(
        f"stage ({name}) {part['minutes']:.1f}, ended at minute {part['ended']:.1f} of at most {deadline:g}"
        for (name, part), deadline in zip(parts.items(), mode.deadlines)
        if part
    )
    lines = [
        "# GPU acceptance of vaswani_plugin",
        "",
        f"- date: {facts['date']}",
        f"- command: `{facts['command']}`",
        f"- data: {facts['data']}",
        f"- wall time: {facts['wall_minutes']:.1f} minutes from the command's start (the install and the data: "
        f"{facts['data_ready']:.1f}; {stages})",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
    ]
    lines += [f"| {key} | {value} |" for key, value in facts["machine"].items()]
    speed, a, b = parts["s"], parts["a"], parts["b"]
    if speed:
        lines += [""] + host_cost_section(speed["speed"], facts["device"], facts["default"][2])
        lines += [""] + checks_section("(s) Checks", speed["checks"])
    if a:
        lines += [""] + training_section("(a) Training", mode.check, mode, a["training"], shown, PLUGIN_ONLY)
        lines += [""] + decoding_section(a["decoding"], facts["device"])
        lines += [""] + checks_section("(a) Checks", a["checks"])
    if b:
        lines += [""] + levers_section(b["levers"], speed["speed"])
        if "training" in b:
            lines += [""] + training_section("(b) Training", mode.speed, mode, b["training"], shown, CRITERIA)
            lines += [""] + comparison_section(b["training"], shown)
        lines += [""] + checks_section("(b) Checks", b["checks"])
    for name, title in STAGES.items():
        if not parts[name]:
            lines += [
                "",
                f"## ({name}) {title}",
                "",
                f"Not written yet: stage ({name}) is running, or the run was cut short before it ended.",
            ]
    lines += [
        "",
        "## Runs",
        "",
        f"Each a fairseq command line, run in the worker (logs in {facts['work']}/logs), and its seconds:",
        "",
    ]
    lines += [f"- {_f(result.get('seconds'), '.1f')} s: `{command}`" for command, result in facts["commands"]]
    return "\n".join(lines) + "\n"


def render_not_run_report(why, command, text, rows=None):
    """The report of a run that measured nothing: why, in a title, a paragraph and a table of `rows`."""
    lines = [
        f"# GPU acceptance of vaswani_plugin: NOT RUN, {why}",
        "",
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- command: `{command}`",
        "",
        text,
    ]
    if rows:
        lines += ["", "| | |", "|---|---|"] + [f"| {key} | {value} |" for key, value in rows.items()]
    return "\n".join(lines) + "\n"


def write_text_atomically(path, text):
    """Replace the file whole, never half written (a run killed meanwhile leaves the one before)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def write_report(facts, report, logs):
    """The report and, with --report-dir, an archive of the logs so far."""
    write_text_atomically(report, render_report(facts))
    if logs:
        work = facts["work"]
        with tarfile.open(logs.with_name(logs.name + ".partial"), "w:gz") as archive:
            for path in sorted(work.iterdir()):
                if path.name not in ("data", "checkpoints", "first-sentences") and not path.name.startswith("jobs"):
                    archive.add(path, arcname=f"gpu_acceptance/{path.name}")
        os.replace(logs.with_name(logs.name + ".partial"), logs)


# ---------------------------------------------------------------------------------------------------------
# The two stages.


def stage_jobs(work, specs):
    """Jobs from (name, tool, argv): their logs and results under work."""
    return [
        dict(
            name=name,
            tool=tool,
            argv=argv,
            log=str(work / "logs" / f"{name}.log"),
            result=str(work / "results" / f"{name}.json"),
        )
        for name, tool, argv in specs
    ]


def described(job):
    """A job as the report's list of runs shows it: the fairseq command line."""
    if job["tool"] == "subset":
        data, split, count, dest = job["argv"]
        return f"the first {count} sentences of {split} in {data}, written to {dest}"
    if job["tool"] == "compare":
        data, checkpoint, cpu, device_output, device = job["argv"]
        return (
            f"{cpu} and {device_output} scored by {checkpoint}, teacher-forced on the CPU and on {device} "
            "(compare_on_both_devices)"
        )
    return f"fairseq-{job['tool']} {shlex.join(job['argv'])}"


def trained(work, results, name):
    """A training run's summary from its log, with the worker's result (seconds, peak memory, error) and the
    output layer's float16 product line, if it logged one."""
    log = work / "logs" / f"{name}.log"
    text = log.read_text() if log.exists() else ""
    summary = summarize_training(*parse_train_log(text))
    return {**summary, **results[name], "products": PRODUCTS.findall(text)[:1]}


def decoded_checkpoint(work, precisions):
    """Stage (a)'s decoded precision and its checkpoint (decoded_precision), or (None, None), from the training
    runs' results and logs in `work`: the worker decides with it when decoding starts, the report after."""
    training = {}
    for precision in precisions:
        name = f"train-a-{precision}"
        path = work / "results" / f"{name}.json"
        result = json.loads(path.read_text()) if path.exists() else {"error": "no result"}
        training[precision, PLUGIN_ONLY[0]] = trained(work, {name: result}, name)
    chosen = decoded_precision(training, precisions, work / "checkpoints")
    return chosen, chosen and work / "checkpoints" / chosen / "checkpoint_last.pt"


def decoded_precision(training, precisions, checkpoints):
    """The first precision whose run trained (finished, saved its checkpoint, loss finite and falling): stage (a)
    decodes its checkpoint; None if none did."""
    for precision in precisions:
        row = training[precision, PLUGIN_ONLY[0]]
        if (
            "error" not in row
            and row.get("finite")
            and row.get("falling")
            and (checkpoints / precision / "checkpoint_last.pt").is_file()
        ):
            return precision
    return None


def stage_a(context):
    """Correctness: the plugin trained in each precision; the first that trained decoded on the CPU and on the
    device, and their hypotheses compared."""
    work, data, mode, device, precisions = (context[k] for k in ("work", "data", "mode", "device", "precisions"))
    deadline, end = context["ends"][1]
    started, first, checkpoints = time.time(), work / "first-sentences", work / "checkpoints"
    specs = [("first-sentences", "subset", [str(data), "test", str(mode.sentences), str(first)])]
    specs += [
        (f"train-a-{p}", "train", train_argv(data, mode, mode.check, p, PLUGIN_ONLY[0], device, checkpoints / p))
        for p in precisions
    ]
    # The decoding jobs run in the same worker (CUDA starts once), on the checkpoint it chooses after training.
    # Each run on the device follows an untimed one of the same decoding: CUDA loads a kernel at its first use,
    # which took 5 of the H100's 5.4 s for its first fp16 decoding of 100 sentences.
    outputs = {name: work / f"generate-{name}" for name in DECODES}
    decodes = [
        (
            f"{run}-{name}",
            "generate",
            generate_argv(first, "test", CHOSEN, fp16, "cpu" if cpu else device, work / f"{run}-{name}"),
        )
        for name, (cpu, fp16) in DECODES.items()
        for run in ["warm-up"] * (not cpu) + ["generate"]
    ]
    decodes.append(
        (
            "compare",
            "compare",
            [
                str(first),
                CHOSEN,
                str(outputs["cpu"] / "generate-test.txt"),
                str(outputs["fp32"] / "generate-test.txt"),
                device,
            ],
        )
    )
    jobs = stage_jobs(work, specs) + [
        dict(job, decodes=dict(work=str(work), precisions=precisions)) for job in stage_jobs(work, decodes)
    ]
    results = run_jobs(jobs, work, work / "worker-a.log", deadline, end)
    training = {(p, i): {"note": context["note"]} for p in context["shown"] for i in CRITERIA}
    for precision in precisions:
        training[precision, PLUGIN_ONLY[0]] = trained(work, results, f"train-a-{precision}")
    chosen, checkpoint = decoded_checkpoint(work, precisions)
    for job in jobs:  # the report's list of runs: as they ran
        job["argv"] = [str(checkpoint) if x == CHOSEN and checkpoint else x for x in job["argv"]]

    decoding = {
        "checkpoint": f"the {chosen} run's" if chosen else "none (no precision trained)",
        "sentences": mode.sentences,
        "hypotheses": {},
    }
    for name in DECODES:
        output = outputs[name] / "generate-test.txt"
        log = work / "logs" / f"generate-{name}.log"
        timing, decoding["hypotheses"][name], _ = parse_generate(
            log.read_text() if log.exists() else "", output.read_text() if output.exists() else ""
        )
        decoding[name] = timing or {"error": results[f"generate-{name}"].get("error", "no timing line in its log")}
    hypotheses = decoding["hypotheses"]
    decoding["fp16_differing"] = differing(hypotheses["fp16"], hypotheses["fp32"])
    checks = training_checks(training, precisions, PLUGIN_ONLY)
    if "error" in results["first-sentences"]:
        checks.append(
            (f"the first {mode.sentences} test sentences written ({results['first-sentences']['error']})", False)
        )
    checks += [(f"beam-4 decoding ran: {name}", "sentences" in decoding[name]) for name in DECODES]
    on = "GPU" if device == "cuda" else "stand-in device"
    if "error" in results["compare"]:
        checks.append(
            (f"beam 4 in float32: the {on}'s hypotheses compared with the CPU's ({results['compare']['error']})", False)
        )
    else:
        found = decoding["agreement"] = agreement(hypotheses["cpu"], hypotheses["fp32"], results["compare"])
        checks += [
            (
                f"beam 4 in float32: no real difference between the {on}'s hypotheses and the CPU's "
                f"({found['identical']} identical, {len(found['near_ties'])} near-ties, {len(found['real'])} "
                f"real differences of {found['compared']})",
                found["compared"] > 0 and not found["real"],
            ),
            (
                f"beam 4 in float32: at most {found['cap']} near-ties ({len(found['near_ties'])})",
                len(found["near_ties"]) <= found["cap"],
            ),
        ]
    return dict(
        training=training,
        decoding=decoding,
        checks=checks,
        jobs=jobs,
        results=results,
        minutes=(time.time() - started) / 60,
        ended=context["minute"](),
    )


def stage_s(context):
    """The recipes' default precision at both sizes against fairseq's --fp16 and --amp: SPEED_RUNS."""
    deadline, end = context["ends"][0]
    started = time.time()
    speed = run_speed(context["mode"], context["work"], SPEED_RUNS, deadline, end, context["default"][0])
    return dict(
        speed=speed,
        checks=speed_checks(speed),
        jobs=[],
        results={},
        minutes=(time.time() - started) / 60,
        ended=context["minute"](),
    )


def stage_b(context):
    """The levers, LEVERS, each against the default's run at the same size (stage s); then, if time allows, both
    implementations trained by fairseq-train in stage (a)'s precisions (a run not started by the stage's end is a
    note, not a failure: the lowest priority)."""
    work, data, mode, device, precisions = (context[k] for k in ("work", "data", "mode", "device", "precisions"))
    deadline, end = context["ends"][2]
    started = time.time()
    levers = run_speed(
        mode, work, LEVERS, deadline, end, context["default"][0], "b", context["minute"], mode.lever_starts
    )
    jobs = stage_jobs(
        work,
        [
            (f"train-b-{p}-{impl}", "train", train_argv(data, mode, mode.speed, p, impl, device))
            for p in precisions
            for impl in CRITERIA
        ],
    )
    with GpuBusy(work / "gpu_busy.csv", device) as busy:
        results = run_jobs(jobs, work, work / "worker-b.log", deadline, end)
    samples = busy.samples()
    training = {(p, i): {"note": context["note"]} for p in context["shown"] for i in CRITERIA}
    ran = []
    for precision in precisions:
        for impl in CRITERIA:
            name = f"train-b-{precision}-{impl}"
            if results[name].get("error", "").startswith("not run: past"):
                training[precision, impl] = {"note": f"{results[name]['error']} (if time allows)"}
                continue
            row = training[precision, impl] = trained(work, results, name)
            row["gpu_busy"] = None if samples is None else busy_during(samples, row.get("started"), row.get("ended"))
            ran.append((precision, impl))
    checks = speed_checks(levers, "lever")
    checks += [check for p, i in ran for check in training_checks(training, [p], [i])]
    return dict(
        levers=levers,
        training=training,
        checks=checks,
        jobs=jobs,
        results=results,
        minutes=(time.time() - started) / 60,
        ended=context["minute"](),
    )


def one_window(row):
    """Why a run's loss cannot be seen to fall: it logged one window (the H100's first fp16 run in stage (b)), or
    none, and its end-of-epoch record stands in (fairseq's transformer on the H200)."""
    if row.get("whole_run"):
        return " (no log window: the run's end-of-epoch record)"
    return " (one log window: no later loss to compare)" if row.get("windows", 2) < 2 else ""


def training_checks(training, precisions, impls):
    """(what, passed) of each training run: it ran, and its loss is finite and falls. fairseq's transformer is the
    comparison's baseline, not under test: it passes with a finite loss (on the H200 it trained 7-9 updates in its
    10 s, cuDNN's attention building a graph for each new shape: too few to see a loss fall)."""
    checks = []
    for precision in precisions:
        for impl in impls:
            row = training[precision, impl]
            if "error" in row:
                checks.append((f"{precision} {impl} trained ({row['error']})", False))
            elif impl == "transformer":
                checks.append(
                    (
                        f"{precision} {impl} (the baseline): trained {row['steps']} steps, loss finite"
                        + one_window(row),
                        row["finite"],
                    )
                )
            else:
                checks.append(
                    (
                        f"{precision} {impl}: trained {row['steps']} steps, loss finite and falling" + one_window(row),
                        row["finite"] and row["falling"],
                    )
                )
    return checks


# ---------------------------------------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="gpu_acceptance", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=os.environ.get("WORK_DIR") or None,
        help="data, logs, checkpoints and the report gpu_acceptance_report.md (default: $WORK_DIR; "
        "without it ./work/gpu_acceptance, the report in benchmarks/)",
    )
    parser.add_argument(
        "--report-dir",
        type=Path,
        help="where the report goes instead, with gpu_acceptance_logs.tar.gz (the logs so far), "
        "both rewritten as each stage ends (the GPU kit's command: $OUT)",
    )
    parser.add_argument(
        "--raw-dir",
        type=Path,
        default=os.environ.get("RAW_DIR") or None,
        help="Multi30k's six .gz files, offline (default: $RAW_DIR, else ../shared/data/multi30k or "
        "shared/data/multi30k from the repo if there, else downloaded)",
    )
    parser.add_argument(
        "--data",
        type=Path,
        help="a fairseq data-bin with train and test (a joined dictionary) instead of preparing Multi30k",
    )
    parser.add_argument(
        "--kit",
        type=Path,
        help="the GPU kit this Python's packages came from: its kit.json "
        "(versions, the commit it was built from) goes into the report",
    )
    parser.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        default="cuda",
        help="cuda (default): the first GPU; cpu: the stand-in, with --tiny",
    )
    parser.add_argument("--tiny", action="store_true", help="a tiny model, few steps: the pipeline in seconds")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    stand_in = os.environ.get(STAND_IN, "")
    if stand_in not in ("", "0", "1"):
        parser.error(f"{STAND_IN}={stand_in}: 1 (the CPU stand-in) or 0")
    if stand_in == "1":
        args.device, args.tiny = "cpu", True
    if args.device == "cpu" and not args.tiny:
        parser.error("--device cpu trains the base model for hours: add --tiny (the CPU stand-in)")
    if args.kit and not (args.kit / "kit.json").is_file():
        parser.error(f"--kit {args.kit}: no kit.json there (made by benchmarks/gpu_kit.sh)")
    if args.kit and not json.loads((args.kit / "kit.json").read_text()).get("complete"):
        parser.error(f"--kit {args.kit}: its build did not finish: run benchmarks/gpu_kit.sh again")
    started = os.environ.get(STARTED, "")
    if started and not re.fullmatch(r"\d+(\.\d+)?", started):
        parser.error(f"{STARTED}={started}: the command's start in seconds since the epoch, as `date +%s` prints it")
    args.started = float(started) if started else time.time()
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args.worker)
    mode = TINY if args.tiny else BASE
    work = (args.work_dir or Path("work/gpu_acceptance")).resolve()
    report_dir = (args.report_dir or (work if args.work_dir else REPO / "benchmarks")).resolve()
    report, logs = report_dir / REPORT, report_dir / LOGS if args.report_dir else None
    command = (f"{STAND_IN}=1 " if os.environ.get(STAND_IN) == "1" else "") + shlex.join(
        ["python", "benchmarks/gpu_acceptance.py", *(argv or sys.argv[1:])]
    )
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        rows = cuda_rows()
        report_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomically(
            report,
            render_not_run_report(
                "no GPU visible",
                command,
                "torch.cuda.is_available() is False: nothing was prepared, trained or "
                "measured. What this machine showed of CUDA:",
                rows,
            ),
        )
        die(
            f"no GPU visible (torch.cuda.is_available() is False; torch.cuda.init(): {rows['torch.cuda.init()']}); "
            f"report written to {report}"
        )
    if importlib.util.find_spec("fairseq") is None:
        die(
            f'fairseq is not importable by {sys.executable}: install the plugin with fairseq (README "Set-up"), '
            "or the GPU kit's wheels (benchmarks/gpu_kit.sh); set PYTHON to the environment that has it"
        )
    if args.data and not all(any(args.data.glob(f"{split}.*.bin")) for split in ("train", "test")):
        die(f"--data {args.data}: no binarised train and test splits there (fairseq-preprocess output)")
    started = args.started

    def minute():
        return (time.time() - started) / 60

    # Each stage's runs end MARGIN_S before its deadline, which leaves the time to write the report and the logs.
    ends = [
        (
            started + 60 * minutes - MARGIN_S,
            f"stage ({stage})'s end, {MARGIN_S} s before minute {minutes} of the command",
        )
        for stage, minutes in zip(STAGES, mode.deadlines)
    ]
    say(
        f"work in {work}; the report will be {report}"
        + (f", the logs {logs}" if logs else "")
        + f"; minute {minute():.1f} of the command"
    )
    default = default_precision(args.device)  # (host_cost.py's --precisions, stage (a)'s name, why)
    if args.device == "cuda":  # stage (a): the default first, then the other mixed precision a card may get
        precisions = [default[1]] + [p for p in ("bf16-autocast", "fp16") if p != default[1]]
        shown, note = precisions + ["amp"], "not trained: the recipes' defaults are bfloat16 autocast and fp16"
    else:
        precisions, note = ["fp32", "bf16-autocast"], "needs a GPU"
        shown = ["fp16", "amp", "bf16-autocast", "fp32"]  # the GPU's rows always
    for stale in (
        "logs",
        "results",
        "checkpoints",
        "first-sentences",
        *(f"{run}-{name}" for name in DECODES for run in ("warm-up", "generate")),
        *(f"host_cost-{index}.txt" for index in range(len(SPEED_RUNS))),
        *(f"host_cost-b{index}.txt" for index in range(len(LEVERS))),
    ):
        if (work / stale).is_dir():
            shutil.rmtree(work / stale)
        elif (work / stale).exists():
            (work / stale).unlink()
    for folder in ("logs", "results"):
        (work / folder).mkdir(parents=True)
    report_dir.mkdir(parents=True, exist_ok=True)

    try:
        data = (
            args.data.resolve()
            if args.data
            else prepare_multi30k(work, args.raw_dir and args.raw_dir.resolve(), mode.prepare_args, *ends[0])
        )
    except NotPrepared as error:
        log = (work / "prepare.log").read_text() if (work / "prepare.log").exists() else ""
        write_text_atomically(
            report,
            render_not_run_report(
                "Multi30k not prepared",
                command,
                "\n".join(
                    [f"{error}. The last lines of {work / 'prepare.log'}:", "", "```", *log.splitlines()[-20:], "```"]
                ),
            ),
        )
        die(f"{error}; report written to {report}")
    facts = dict(
        mode=mode,
        precisions=shown,
        device=args.device,
        machine=machine(args.device, args.kit),
        work=work,
        data=data,
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        command=command,
        data_ready=minute(),
        default=default,
    )
    context = dict(
        work=work,
        data=data,
        mode=mode,
        device=args.device,
        precisions=precisions,
        shown=shown,
        note=note,
        default=default,
        ends=ends,
        minute=minute,
    )
    checks = []
    for stage, run in zip(STAGES, (stage_s, stage_a, stage_b)):
        say(f"stage ({stage}): from minute {minute():.1f} until {ends[list(STAGES).index(stage)][1]}")
        facts[stage] = run(context)
        checks += facts[stage]["checks"]
        done = [facts[s] for s in STAGES if s in facts]
        facts.update(
            wall_minutes=minute(),
            commands=[(described(job), part["results"][job["name"]]) for part in done for job in part["jobs"]],
        )
        write_report(facts, report, logs)
        say(
            f"stage ({stage}) done in {facts[stage]['minutes']:.1f} minutes, at minute {minute():.1f} of the "
            f"command; written to {report}"
        )
    failed = [what for what, ok in checks if not ok]
    print(f"gpu_acceptance: report written to {report}")
    print(
        f"gpu_acceptance: {len(checks) - len(failed)} of {len(checks)} checks passed"
        + "".join(f"\n  FAIL: {what}" for what in failed)
    )
    return 1 if failed else 0


class NotPrepared(Exception):
    """Multi30k could not be prepared in time: nothing to measure."""


def prepare_multi30k(work, raw_dir, options, deadline, end):
    """Multi30k as the quickstart prepares it (the tiny mode: a part of it, fewer BPE merges), stopped at `deadline`
    (the first stage's `end`: no stage could run after it); the data-bin's path."""
    raw_dir = raw_dir or next(
        (path for path in (REPO.parent / "shared/data/multi30k", REPO / "shared/data/multi30k") if path.is_dir()), None
    )
    command = [
        sys.executable,
        "-m",
        "prepare.multi30k",
        "--work-dir",
        str(work / "data"),
        *options,
        *(["--raw-dir", str(raw_dir)] if raw_dir else []),
    ]
    say(f"preparing Multi30k: {shlex.join(command[1:])} (log {work / 'prepare.log'})")
    if time.time() >= deadline:
        raise NotPrepared(f"Multi30k not prepared: past {end}")
    with open(work / "prepare.log", "w") as log:
        status = run_until(
            command,
            deadline - time.time(),
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=_pythonpath()),
        )
    if status is None:
        raise NotPrepared(f"preparing Multi30k was stopped at {end}")
    if status != 0:
        raise NotPrepared(f"preparing Multi30k failed (exit status {status})")
    return work / "data" / "data-bin"


def host_cost_command(mode, tokens, options, precision, seconds):
    """benchmarks/host_cost.py's command line of one speed run: the mode's model and data, its batch, the recipes'
    optimizer, torch's default threads (as the recipes run on GPUs; a lever may say otherwise: the last word wins)."""
    options = [precision if word == DEFAULT else word for word in options]
    return [
        "benchmarks/host_cost.py",
        *mode.host_cost_args,
        "--threads",
        "0",
        "--max-tokens",
        str(tokens),
        "--optimizers",
        RECIPES_OPTIMIZER,
        *options,
    ] + (["--seconds", f"{seconds:.0f}"] if seconds else [])


def run_speed(mode, work, specs, deadline, end, precision, tag="", minute=None, starts=()):
    """Speed runs, one benchmarks/host_cost.py process each: specs of SPEED_RUNS' form or, with `starts`, LEVERS'
    (each then started only before minute starts[i] of the command, `minute()` now, and timed for
    mode.lever_seconds); stage (s)'s share the time left before `deadline` (each stopped, its process group, past its
    share). [{name, tokens, command, output, row or error or note}]; SAME_BATCH is the first run's measured batch."""
    runs = []
    for index, spec in enumerate(specs):
        name, which, options = spec[:3]
        lever = bool(starts)
        share = (deadline - time.time()) / (1 if lever else len(specs) - index)
        window = mode.lever_seconds if lever else mode.host_cost_seconds
        seconds = min(window, share - SPEED_RUN_OVERHEAD_S) if window else 0
        if which == SAME_BATCH:
            tokens = (runs[0].get("row") or {}).get("max_tokens") or mode.host_cost_tokens[0]
        else:
            tokens = mode.host_cost_tokens[which]
        command = host_cost_command(mode, tokens, options, precision, seconds)
        run = dict(name=name, tokens=tokens or "the memory model's", command=f"python {shlex.join(command)}", output="")
        if lever:
            run["against"] = spec[3]
        runs.append(run)
        on_cpu = mode.host_cost_args[mode.host_cost_args.index("--device") + 1] != "cuda"
        if lever and spec[4] and on_cpu:
            run["note"] = "GPU only (CUDA graphs): not run in the CPU stand-in"
            continue
        if lever and minute() > starts[index]:
            run["error"] = f"not run: not started by minute {starts[index]:g} of the command, its deadline"
            continue
        if lever and on_cpu and any(done.get("options") == options for done in runs[:-1]):
            run["note"] = ONCE_ON_A_CPU  # the same lever at another size: inductor's compilation, minutes on a CPU
            continue
        run["options"] = options
        if share <= 0 or (window and seconds < 10):
            run["error"] = f"not run: {share:.0f} s left before {end}"
            continue
        say(f"{run['command']} (at most {share:.0f} s)")
        log = work / f"host_cost-{tag}{index}.txt"
        with open(log, "w") as out:
            status = run_until(
                [sys.executable, *command],
                share,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=_pythonpath()),
            )
        run["output"] = log.read_text()
        row = parse_host_cost(run["output"])
        if status is None:
            run["error"] = f"stopped after {share:.0f} s, at its share of the time before {end}"
        elif status != 0:
            run["error"] = f"exit status {status}: {(run['output'].strip().splitlines() or [''])[-1]}"
        elif row is None:
            run["error"] = "no row in its output"
        else:
            run["row"] = row
    return runs


def speed_checks(runs, what="speed run"):
    """(what, passed) of each speed run: it ran and printed its row (a note: skipped, no check)."""
    return [
        (f"{what}: {run['name']}" + (f" ({run['error']})" if "error" in run else ""), "error" not in run)
        for run in runs
        if "note" not in run
    ]


if __name__ == "__main__":
    sys.exit(main())
