"""The GPU acceptance's plan: what each stage runs, in which mode (BASE on a GPU, TINY for the CPU stand-in), by
which minute of the command (the stages' deadlines and the levers' starts: the time budget), the targets that stage
(s)'s runs are held to, the recipes' default precision on the card, and the acceptance's progress lines."""

import sys
import time
from dataclasses import dataclass

from common import PAPER

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
    (0, PAPER.TOKENS_PER_STEP // 8),  # the one-GPU default; the paper's step over its 8 GPUs (§5.2): 3,125
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
    (  # CUDA graphs over a few padded shapes: without buckets a graph is recorded for every batch's own shape
        "--compile-layers reduce-overhead (CUDA graphs), --length-buckets 16, 3,125 tokens a GPU",
        1,
        [*PLUGIN_DEFAULT, "--compile-layers", "reduce-overhead", "--length-buckets", "16"],
        1,
        True,
    ),
]
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


def stage_ends(mode, started):
    """(time.time() at which its runs end, those words) of each stage: MARGIN_S before its deadline, which leaves
    the time to write the report and the logs."""
    return [
        (
            started + 60 * minutes - MARGIN_S,
            f"stage ({stage})'s end, {MARGIN_S} s before minute {minutes} of the command",
        )
        for stage, minutes in zip(STAGES, mode.deadlines)
    ]


def finished(context, started, **part):
    """A stage's part of the facts (what it found, its checks, jobs and their results), with the minutes it took since
    `started` (time.time()) and the minute of the command at which it ended."""
    return dict(part, minutes=(time.time() - started) / 60, ended=context["minute"]())


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
