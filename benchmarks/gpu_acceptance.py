"""GPU acceptance in one command: the plugin's mixed-precision training, its speed against fairseq's own
`transformer`, its MFU and its fp16 beam search on one GPU, written up as a markdown report.

    bash benchmarks/gpu_acceptance.sh        # = python benchmarks/gpu_acceptance.py [--work-dir W] [--raw-dir R]
    python benchmarks/gpu_acceptance.py --device cpu --tiny --data DATA_BIN --work-dir W   # CPU stand-in (tests)

On Multi30k (prepared by `python -m prepare.multi30k`), in about 8 minutes on an H100 (an estimate: no GPU has
run it yet; each training run stops after at most 45 s of training):
1. fairseq-train of the base model (Table 3) for 300 updates in each precision, fp16 (--fp16), fp16 autocast
   (--amp) and bfloat16 autocast (the plugin task's --bf16-autocast), once with --arch vaswani_transformer and
   its criterion, once with fairseq's --arch transformer and label_smoothed_cross_entropy: the same data, batch
   size, optimiser, schedule and seed. From fairseq's json logs: loss of the first and last log window (finite
   and falling?), the loss-scale history of fp16 and amp, target tokens/s (the median of the windows after the
   first, which holds the start-up); the worker measures each run's peak memory (torch.cuda.max_memory_allocated);
2. beam-4 decoding (§6.1: α = 0.6, at most input + 50 tokens) of test2016 with fairseq-generate, fp32 and --fp16,
   from the plugin's fp16 checkpoint: speed of each and how many hypotheses differ;
3. `benchmarks/speed.py --amp --sizes base big`: training tokens/s and MFU of both implementations.
Every run is fairseq's own command-line entry point, run in one worker process (CUDA starts once; a run that
kills the worker is recorded as failed and the worker starts again for the rest). The exit status is 1 when a
check fails (a run failed, a loss is not finite or does not fall); the report is written either way.
The CPU stand-in (--device cpu --tiny) runs the same code in fp32 and bfloat16 autocast with a tiny model.
"""

import argparse
import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from speed import SIZES  # noqa: E402  (d_model, d_ff, h, N of the sizes speed.py measures)

PLUGIN = REPO / "vaswani_plugin"
SKIPPED = "gpu_acceptance: no GPU visible (torch.cuda.is_available() is False): skipped"
PRECISIONS = {  # fairseq-train arguments of each precision; the same for both implementations
    "fp16": ["--task", "translation", "--fp16"],
    "amp": ["--task", "translation", "--amp"],
    "bf16-autocast": ["--task", "vaswani_translation", "--bf16-autocast", "on"],  # fairseq's --bf16 assumes a TPU
    "fp32": ["--task", "translation"],
}
CRITERIA = {  # each implementation with its own criterion, as it is trained
    "vaswani_transformer": "vaswani_label_smoothed_cross_entropy", "transformer": "label_smoothed_cross_entropy"}


@dataclass(frozen=True)
class Mode:
    """What one run of the acceptance trains and measures."""
    size: str            # a size of benchmarks/speed.py, trained by fairseq-train
    steps: int
    log_interval: int
    warmup: int          # eq. 3's warmup_steps
    max_tokens: int
    stop_minutes: float  # a cap on each run's training time, so that the whole stays within 10 minutes
    speed_args: tuple    # benchmarks/speed.py's sizes and counts


# The base model on Multi30k: a warmup of 1,000 steps gives a rate of 4.2e-4 at step 300, the paper's order
# (its peak is 7e-4 at step 4,000), so the loss falls well within a few hundred steps.
BASE = Mode("base", 300, 25, 1000, 4096, 0.75, ("--sizes", "base", "big", "--sentences", "128"))
TINY = Mode("tiny", 20, 5, 20, 512, 0.75,
            ("--sizes", "tiny", "--max-tokens", "512", "--warmup", "1", "--updates", "2", "--sentences", "16"))


def say(message):
    print(f"[gpu_acceptance {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def die(message):
    print(f"gpu_acceptance: error: {message}", file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------------------------------------------------
# Reading fairseq's output.

TRAIN_INNER = re.compile(r"\| train_inner \| (\{.*\})\s*$", re.M)
OVERFLOW = re.compile(r"gradient overflow detected|AMP: overflow detected")
TRANSLATED = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s "
                        r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)")
HYPOTHESIS = re.compile(r"^H-(\d+)\t[^\t]*\t(.*)$", re.M)


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def parse_train_log(text):
    """The log windows of a fairseq-train json log (its train_inner records, numbers as floats) and how many
    gradient overflows fp16/amp reported (each one lowers the loss scale and skips or repeats the step)."""
    windows = [{key: _number(value) for key, value in json.loads(record).items()}
               for record in TRAIN_INNER.findall(text)]
    return windows, len(OVERFLOW.findall(text))


def summarize_training(windows, overflows):
    """Steps, loss of the first and last window, whether it is finite and falling, tokens/s, loss scales."""
    if not windows:
        return {"error": "no train_inner line in the log"}
    losses = [window["loss"] for window in windows]
    timed = windows[1:] or windows  # the first window holds the start-up (CUDA, data loading)
    return {
        "steps": int(windows[-1]["num_updates"]), "first_loss": losses[0], "last_loss": losses[-1],
        "finite": all(isinstance(x, float) and math.isfinite(x) for x in losses),
        "falling": losses[-1] < losses[0],
        "tokens_per_s": statistics.median(window["wps"] for window in timed),
        "loss_scales": [(int(w["num_updates"]), w["loss_scale"]) for w in windows if "loss_scale" in w],
        "overflows": overflows,
    }


def parse_generate(log_text, output_text):
    """fairseq-generate's timing line ({sentences, tokens, seconds, sentences_per_s, tokens_per_s}) and its
    hypotheses (sentence id -> H- line's tokens)."""
    found = TRANSLATED.search(log_text)
    if not found:
        return None, {}
    sentences, tokens, seconds, per_s, tokens_per_s = (float(x.replace(",", "")) for x in found.groups())
    timing = dict(sentences=int(sentences), tokens=int(tokens), seconds=seconds, sentences_per_s=per_s,
                  tokens_per_s=tokens_per_s)
    return timing, {int(i): tokens for i, tokens in HYPOTHESIS.findall(output_text)}


def differing(hypotheses, reference):
    """How many sentences (of either set) have a different hypothesis, or none, in `hypotheses`."""
    return sum(hypotheses.get(i) != reference.get(i) for i in set(hypotheses) | set(reference))


def parse_speed_table(text):
    """benchmarks/speed.py's rows: (size, implementation) -> train tokens/s, peak MB and MFU (None: '-')."""
    rows = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 9 and fields[1] in CRITERIA and re.fullmatch(r"\d+\.\d+", fields[2]):
            mfu = float(fields[8][:-1]) / 100 if fields[8].endswith("%") else None
            rows[fields[0], fields[1]] = dict(tokens_per_s=float(fields[2]), peak_memory_mb=float(fields[3]),
                                              mfu=mfu)
    return rows


# ---------------------------------------------------------------------------------------------------------
# The machine.

def machine(device):
    """Rows of the report's machine table."""
    import torch
    rows = {}
    if device == "cuda":
        from vaswani_plugin.tools.training_cost import peak_for  # imports fairseq: only here
        name = torch.cuda.get_device_name(0)
        peak = peak_for(name, True)
        rows["GPU"] = name + (f" (dense fp16/bf16 peak {peak:g} TFLOP/s, vaswani_plugin.tools.training_cost)" if peak
                              else " (peak FLOP/s unknown to vaswani_plugin.tools.training_cost: no MFU)")
    else:
        rows["GPU"] = "none: the CPU stand-in (--device cpu --tiny)"
    rows["driver / CUDA"] = _nvidia_smi(["nvidia-smi"], r"Driver Version: *\S+.*?CUDA Version: *\S+")
    rows["nvidia-smi"] = _nvidia_smi(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,power.limit",
                                      "--format=csv,noheader"], r".+")
    rows["torch"] = torch.__version__ + (f", CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}"
                                         if torch.version.cuda else "")
    models = re.findall(r"^model name\s*: (.*)$", Path("/proc/cpuinfo").read_text(), re.M) \
        if Path("/proc/cpuinfo").exists() else []
    rows["CPU"] = f"{models[0] if models else 'unknown'}, {os.cpu_count()} cores"
    return rows


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


def train_argv(data, mode, precision, impl, device, save_dir=None):
    """fairseq-train's arguments: §5's training (Adam, eq. 3, label smoothing 0.1) of one size, json logs."""
    dim, ffn, heads, layers = SIZES[mode.size]
    sizes = [x for side in ("encoder", "decoder") for x in (f"--{side}-embed-dim", dim, f"--{side}-ffn-embed-dim",
                                                             ffn, f"--{side}-attention-heads", heads,
                                                             f"--{side}-layers", layers)]
    save = ["--save-dir", save_dir, "--no-epoch-checkpoints", "--save-interval", "1000000"] if save_dir \
        else ["--no-save"]
    return [str(x) for x in [
        data, "--user-dir", PLUGIN, *PRECISIONS[precision], "--arch", impl, "--share-all-embeddings",
        *sizes, "--dropout", "0.1",
        "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--adam-eps", "1e-9",
        "--lr-scheduler", "noam", "--warmup-updates", mode.warmup,
        "--criterion", CRITERIA[impl], "--label-smoothing", "0.1",
        "--max-tokens", mode.max_tokens, "--required-batch-size-multiple", "1", "--seed", "1",
        "--distributed-world-size", "1",  # one GPU, however many the machine has
        "--max-update", mode.steps, "--stop-time-hours", mode.stop_minutes / 60, "--disable-validation",
        "--log-format", "json", "--log-interval", mode.log_interval, *save, *DATA_LOADING,
        *(["--cpu"] if device == "cpu" else [])]]


def generate_argv(data, checkpoint, fp16, device, results):
    """fairseq-generate's arguments: §6.1's beam search over the test split."""
    return [str(x) for x in [
        data, "--user-dir", PLUGIN, "--task", "vaswani_translation", "--path", checkpoint, "--gen-subset", "test",
        "--beam", "4", "--gnmt-alpha", "0.6", "--max-len-a", "1", "--max-len-b", "50", "--batch-size", "128",
        "--required-batch-size-multiple", "1", "--results-path", results, *DATA_LOADING,
        *(["--fp16"] if fp16 else []), *(["--cpu"] if device == "cpu" else [])]]


def run_job(job):
    """One fairseq command-line run in this process, its log in job["log"]; returns its result."""
    import gc
    import logging
    handler = logging.FileHandler(job["log"], mode="w")  # fairseq's log format, as its command-line tools set it
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                                           datefmt="%Y-%m-%d %H:%M:%S"))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.INFO)

    import torch
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.distributed import utils as distributed_utils
    import fairseq_cli.generate
    import fairseq_cli.train

    gc.collect()  # the runs before this one: their models and optimisers are garbage in reference cycles
    cuda = torch.cuda.is_available() and "--cpu" not in job["argv"]
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    else:
        _reset_peak_rss()
    start = time.perf_counter()
    result = {}
    try:
        if job["tool"] == "train":  # fairseq-train's cli_main
            args = options.parse_args_and_arch(options.get_training_parser(), job["argv"])
            distributed_utils.call_main(convert_namespace_to_omegaconf(args), fairseq_cli.train.main)
        else:  # fairseq-generate's cli_main
            fairseq_cli.generate.main(options.parse_args_and_arch(options.get_generation_parser(), job["argv"]))
    except (Exception, SystemExit) as error:  # fairseq's argument errors exit; the next job still runs
        logging.getLogger("gpu_acceptance").exception("the run failed")
        result["error"] = f"{type(error).__name__}: {error}"
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    result["seconds"] = time.perf_counter() - start
    result["peak_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20 if cuda else _peak_rss_mb()
    return result


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
    """Run the jobs one after another; each one's result goes to its own file as soon as it is known."""
    for job in json.loads(Path(jobs_file).read_text()):
        Path(job["result"]).write_text(json.dumps(run_job(job)))


def run_jobs(jobs, work):
    """Run all jobs in worker processes: one, unless a run kills it (then that run failed, the rest go on)."""
    pending, log = list(jobs), work / "worker.log"
    with open(log, "w") as out:
        while pending:
            (work / "jobs.json").write_text(json.dumps(pending))
            say(f"worker: {', '.join(job['name'] for job in pending)} (log {log})")
            done = subprocess.run([sys.executable, __file__, "--worker", str(work / "jobs.json")], stdout=out,
                                  stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=_pythonpath()))
            unfinished = [job for job in pending if not Path(job["result"]).exists()]
            if unfinished:
                error = f"the worker died (exit status {done.returncode}) in this run; see {log}"
                Path(unfinished[0]["result"]).write_text(json.dumps({"error": error}))
            pending = unfinished[1:]
    return {job["name"]: json.loads(Path(job["result"]).read_text()) for job in jobs}


def _pythonpath():
    return os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))


# ---------------------------------------------------------------------------------------------------------
# The report.

def _f(value, spec):
    return "-" if value is None else format(value, spec)


def training_rows(training, precisions):
    """Markdown rows of the training table: (precision, implementation) -> summary (or a note)."""
    rows = []
    for precision in precisions:
        for impl in CRITERIA:
            row = training[precision, impl]
            if "note" in row or "error" in row:
                rows.append(f"| {precision} | {impl} | {row.get('note') or 'FAILED: ' + row['error']} |"
                            + " |" * 6)
                continue
            scales = row["loss_scales"]
            scale = f"{scales[0][1]:g} → {scales[-1][1]:g}, min {min(s for _, s in scales):g}" if scales else "-"
            rows.append(f"| {precision} | {impl} | {row['steps']} | {row['first_loss']:.3f} → {row['last_loss']:.3f}"
                        f" | {'yes' if row['finite'] and row['falling'] else 'NO'} | {row['tokens_per_s']:.0f}"
                        f" | {_f(row['peak_memory_mb'], '.0f')} | {scale} | {row['overflows']} |")
    return rows


def render_report(facts):
    """The markdown report from the facts main() gathered."""
    mode, precisions, training = facts["mode"], facts["precisions"], facts["training"]
    lines = ["# GPU acceptance of vaswani_plugin", "",
             f"- date: {facts['date']}", f"- command: `{facts['command']}`",
             f"- data: {facts['data']}", f"- wall time: {facts['wall_minutes']:.1f} minutes", "",
             "## Machine", "", "| | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in facts["machine"].items()]
    lines += ["", f"## Training: the {mode.size} model, {mode.steps} steps of {mode.max_tokens} tokens per "
                  f"precision", "",
              f"fairseq-train with --log-format json --log-interval {mode.log_interval}; loss (base 2, label "
              f"smoothed) of the first and last log window; tokens/s: target tokens, the median `wps` of the "
              f"windows after the first; "
              f"peak memory: torch.cuda.max_memory_allocated (CPU stand-in: the worker's peak RSS in the run); "
              f"loss scale: fp16 and amp only, first → last logged value; overflows: fairseq's overflow notes.", "",
              "| precision | implementation | steps | loss first → last | finite and falling | tokens/s "
              "| peak MB | loss scale | overflows |", "|---|---|---|---|---|---|---|---|---|"]
    lines += training_rows(training, precisions)
    scaled = [(p, i) for p in precisions for i in CRITERIA if training[p, i].get("loss_scales")]
    if scaled:
        lines += ["", "Loss-scale history (update: scale, one value per log window):", ""]
        lines += [f"- {p}, {i}: " + ", ".join(f"{step}: {scale:g}" for step, scale in training[p, i]["loss_scales"])
                  for p, i in scaled]

    lines += ["", "## The plugin against fairseq's `transformer` (same data, batch size and precision)", "",
              "| precision | plugin tokens/s | fairseq tokens/s | ratio | plugin peak MB | fairseq peak MB | ratio |",
              "|---|---|---|---|---|---|---|"]
    for precision in precisions:
        ours, theirs = training[precision, "vaswani_transformer"], training[precision, "transformer"]
        if "tokens_per_s" not in ours or "tokens_per_s" not in theirs:
            lines.append(f"| {precision} | {ours.get('note') or 'a run failed'} |" + " |" * 5)
            continue
        memory = [ours["peak_memory_mb"], theirs["peak_memory_mb"]]
        ratio = memory[0] / memory[1] if None not in memory else None
        lines.append(f"| {precision} | {ours['tokens_per_s']:.0f} | {theirs['tokens_per_s']:.0f} | "
                     f"{ours['tokens_per_s'] / theirs['tokens_per_s']:.2f} | {_f(memory[0], '.0f')} | "
                     f"{_f(memory[1], '.0f')} | {_f(ratio, '.2f')} |")

    speed = facts["speed"]
    lines += ["", "## MFU (benchmarks/speed.py)", "",
              f"`{speed['command']}`: model FLOPs per second / the GPU's peak, during training"
              + (" (no MFU on a CPU)." if facts["device"] == "cpu" else "."), ""]
    if speed["rows"]:
        lines += ["| size | implementation | train tokens/s | peak MB | MFU |", "|---|---|---|---|---|"]
        lines += [f"| {size} | {impl} | {row['tokens_per_s']:.1f} | {row['peak_memory_mb']:.1f} | "
                  f"{'-' if row['mfu'] is None else format(100 * row['mfu'], '.1f') + '%'} |"
                  for (size, impl), row in speed["rows"].items()]
    else:
        lines.append(f"FAILED: {speed['error']}")
    lines += ["", "speed.py's output:", "", "```", speed["output"].rstrip(), "```"]

    decoding = facts["decoding"]
    lines += ["", f"## Beam-4 decoding of the test split, fp16 against fp32", "",
              f"fairseq-generate --beam 4 --gnmt-alpha 0.6 --batch-size 128, with and without --fp16, from "
              f"{decoding['checkpoint']}; its own timing line.", "",
              "| precision | sentences | sentences/s | tokens/s | seconds |", "|---|---|---|---|---|"]
    for name in ("fp32", "fp16"):
        timing = decoding[name]
        lines.append(f"| {name} | {timing['sentences']} | {timing['sentences_per_s']:.1f} | "
                     f"{timing['tokens_per_s']:.1f} | {timing['seconds']:.1f} |" if "sentences" in timing
                     else f"| {name} | FAILED: {timing['error']} | | | |")
    if "sentences" in decoding["fp32"] and "sentences" in decoding["fp16"]:
        lines += ["", f"fp16 / fp32 sentences/s: "
                      f"{decoding['fp16']['sentences_per_s'] / decoding['fp32']['sentences_per_s']:.2f}; "
                      f"hypotheses that differ: {decoding['differing']} of {decoding['fp32']['sentences']} "
                      f"(fp16 may differ in a few: reported, not a failure)"]

    lines += ["", "## Checks", ""] + [f"- {'pass' if ok else 'FAIL'}: {what}" for what, ok in facts["checks"]]
    lines += ["", "## Runs", "", f"Each a fairseq command line, run in the worker (logs in {facts['work']}/logs), "
              "and its seconds:", ""]
    lines += [f"- {_f(result.get('seconds'), '.1f')} s: `{command}`" for command, result in facts["commands"]]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(prog="gpu_acceptance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", type=Path, default=os.environ.get("WORK_DIR") or None,
                        help="data, logs, checkpoints and the report gpu_acceptance_report.md (default: $WORK_DIR; "
                             "without it ./work/gpu_acceptance, the report in benchmarks/)")
    parser.add_argument("--raw-dir", type=Path, default=os.environ.get("RAW_DIR") or None,
                        help="Multi30k's six .gz files, offline (default: $RAW_DIR, else ../shared/data/multi30k or "
                             "shared/data/multi30k from the repo if there, else downloaded)")
    parser.add_argument("--data", type=Path, help="a fairseq data-bin with train and test (a joined dictionary) "
                                                  "instead of preparing Multi30k")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cuda (default): the first GPU; cpu: the stand-in, with --tiny")
    parser.add_argument("--tiny", action="store_true", help="a tiny model, few steps: the pipeline in seconds")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.device == "cpu" and not args.tiny:
        parser.error("--device cpu trains the base model for hours: add --tiny (the CPU stand-in)")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args.worker)
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print(SKIPPED)
        return 0
    if importlib.util.find_spec("fairseq") is None:
        die(f"fairseq is not importable by {sys.executable}: install the plugin with fairseq (README \"Set-up\"); "
            "set PYTHON to the environment that has it")
    if args.data and not all(any(args.data.glob(f"{split}.*.bin")) for split in ("train", "test")):
        die(f"--data {args.data}: no binarised train and test splits there (fairseq-preprocess output)")
    started = time.perf_counter()
    mode = TINY if args.tiny else BASE
    work = (args.work_dir or Path("work/gpu_acceptance")).resolve()
    report = (work if args.work_dir else REPO / "benchmarks") / "gpu_acceptance_report.md"
    say(f"work in {work}; the report will be {report}")
    precisions = ["fp16", "amp", "bf16-autocast"] if args.device == "cuda" else ["fp32", "bf16-autocast"]
    shown = ["fp16", "amp", "bf16-autocast"] + (["fp32"] if "fp32" in precisions else [])  # GPU rows always
    for stale in ("logs", "results", "checkpoints", "generate-fp32", "generate-fp16"):
        shutil.rmtree(work / stale, ignore_errors=True)
    for folder in ("logs", "results"):
        (work / folder).mkdir(parents=True)

    data = args.data.resolve() if args.data else prepare_multi30k(work, args.raw_dir)

    # The runs: both implementations in each precision, then the first precision's plugin checkpoint decoded.
    jobs, checkpoints = [], work / "checkpoints"
    for precision in precisions:
        for impl in CRITERIA:
            save = checkpoints if (precision, impl) == (precisions[0], "vaswani_transformer") else None
            jobs.append(dict(name=f"train-{precision}-{impl}", tool="train",
                             argv=train_argv(data, mode, precision, impl, args.device, save)))
    checkpoint = checkpoints / "checkpoint_last.pt"
    for name in ("fp32", "fp16"):
        jobs.append(dict(name=f"generate-{name}", tool="generate", argv=generate_argv(
            data, checkpoint, name == "fp16", args.device, work / f"generate-{name}")))
    for job in jobs:
        job.update(log=str(work / "logs" / f"{job['name']}.log"),
                   result=str(work / "results" / f"{job['name']}.json"))
    results = run_jobs(jobs, work)

    training = {(p, i): {"note": "needs a GPU"} for p in shown for i in CRITERIA}
    for precision in precisions:
        for impl in CRITERIA:
            name = f"train-{precision}-{impl}"
            summary = summarize_training(*parse_train_log(Path(work / "logs" / f"{name}.log").read_text()))
            training[precision, impl] = {**summary, **results[name]}
    decoding = {"checkpoint": f"the {precisions[0]} vaswani_transformer run"}
    hypotheses = {}
    for name in ("fp32", "fp16"):
        output = work / f"generate-{name}" / "generate-test.txt"
        timing, hypotheses[name] = parse_generate((work / "logs" / f"generate-{name}.log").read_text(),
                                                  output.read_text() if output.exists() else "")
        decoding[name] = timing or {"error": results[f"generate-{name}"].get("error", "no timing line in its log")}
    decoding["differing"] = differing(hypotheses["fp16"], hypotheses["fp32"])

    speed = run_speed(data, mode, args.device, work)

    checks = verdicts(precisions, training, decoding, speed, args.device)
    facts = dict(mode=mode, precisions=shown, training=training, decoding=decoding, speed=speed, checks=checks,
                 device=args.device, machine=machine(args.device), work=work, data=data,
                 date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                 command=shlex.join(["python", "benchmarks/gpu_acceptance.py", *(argv or sys.argv[1:])]),
                 wall_minutes=(time.perf_counter() - started) / 60,
                 commands=[(f"fairseq-{job['tool']} {shlex.join(job['argv'])}", results[job["name"]])
                           for job in jobs])
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(render_report(facts))
    failed = [what for what, ok in checks if not ok]
    print(f"gpu_acceptance: report written to {report}")
    print(f"gpu_acceptance: {len(checks) - len(failed)} of {len(checks)} checks passed"
          + "".join(f"\n  FAIL: {what}" for what in failed))
    return 1 if failed else 0


def verdicts(precisions, training, decoding, speed, device):
    """(what, passed) of each check: every run ran, every loss is finite and falls; speeds are only reported."""
    checks = []
    for precision in precisions:
        for impl in CRITERIA:
            row = training[precision, impl]
            if "error" in row:
                checks.append((f"{precision} {impl} trained ({row['error']})", False))
            else:
                checks.append((f"{precision} {impl}: trained {row['steps']} steps, loss finite and falling",
                               row["finite"] and row["falling"]))
    for name in ("fp32", "fp16"):
        checks.append((f"beam-4 decoding in {name} ran", "sentences" in decoding[name]))
    checks.append(("benchmarks/speed.py ran" + (f" ({speed['error']})" if speed["error"] else ""),
                   not speed["error"]))
    if device == "cuda":
        checks += [(f"MFU measured: {size} {impl}", row["mfu"] is not None)
                   for (size, impl), row in speed["rows"].items()]
    return checks


def prepare_multi30k(work, raw_dir):
    """Multi30k as the quickstart prepares it; the data-bin's path."""
    raw_dir = raw_dir or next(
        (path for path in (REPO.parent / "shared/data/multi30k", REPO / "shared/data/multi30k") if path.is_dir()),
        None)
    command = [sys.executable, "-m", "prepare.multi30k", "--work-dir", str(work / "data"),
               *(["--raw-dir", str(raw_dir)] if raw_dir else [])]
    say(f"preparing Multi30k: {shlex.join(command[1:])} (log {work / 'prepare.log'})")
    with open(work / "prepare.log", "w") as log:
        done = subprocess.run(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                              env=dict(os.environ, PYTHONPATH=_pythonpath()))
    if done.returncode != 0:
        die(f"preparing Multi30k failed; see {work / 'prepare.log'}")
    return work / "data" / "data-bin"


def run_speed(data, mode, device, work):
    """benchmarks/speed.py on the same data: its printed table, parsed."""
    command = ["benchmarks/speed.py", "--data", str(data), "--device", device,
               *(["--amp"] if device == "cuda" else []), *mode.speed_args]
    say(f"python {shlex.join(command)}")
    done = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True)
    (work / "speed.txt").write_text(done.stdout + done.stderr)
    rows = parse_speed_table(done.stdout)
    error = None
    if done.returncode != 0:
        error = f"exit status {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}"
    elif not rows:
        error = "no table rows in its output"
    return dict(command=f"python {shlex.join(command)}", output=done.stdout + done.stderr, rows=rows, error=error)


if __name__ == "__main__":
    sys.exit(main())
