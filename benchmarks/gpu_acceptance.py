"""GPU acceptance in one command, on one GPU, in two stages; each writes its part of the markdown report as soon as
it ends, so that a run cut short (killed at a time limit) still leaves stage (a)'s:

    bash benchmarks/gpu_acceptance.sh        # = python benchmarks/gpu_acceptance.py [--work-dir W] [--raw-dir R]
    bash benchmarks/gpu_kit.sh               # on a CPU machine: wheels and data for a GPU machine without a package
                                             # index, and the command that runs this there
    GPU_ACCEPTANCE_STAND_IN=1 python benchmarks/gpu_acceptance.py ...   # = --device cpu --tiny: the CPU stand-in

On Multi30k (prepared by `python -m prepare.multi30k`: 45 s on 2 CPU cores), on an H100; the minutes are estimates
(no GPU has run it yet), enforced as caps: a run of a stage not started when the stage's minutes are spent is not run
(a failed check), speed.py is stopped then, and each training run stops after its updates or its seconds of
training (fairseq's --stop-time-hours), whichever comes first.
(a) correctness, at most 3 minutes (about 1.5 estimated): fairseq-train of the plugin's base model (Table 3) for 50
   updates (30 s at most) in fp16 (--fp16), fp16 autocast (--amp) and bfloat16 autocast (the plugin task's
   --bf16-autocast): loss of the first and last log window (finite and falling?) and fp16's and amp's loss-scale
   history; then beam-4 decoding (§6.1: α = 0.6, at most input + 50 tokens) of the first 100 test2016 sentences with
   the fp16 run's checkpoint, by fairseq-generate on the CPU (--cpu) and on the GPU in float32 (the same hypotheses
   as the CPU's?) and in fp16 (how many differ from float32's: reported, not a failure);
(b) speed, at most 6 minutes (about 4.5 estimated): fairseq-train of both the plugin and fairseq's own `transformer`,
   each with its own criterion, for 200 updates (20 s at most) in each precision: the same data, batch size,
   optimiser, schedule and seed; target tokens/s (the median of the log windows after the first, which holds the
   start-up) and peak memory (torch.cuda.max_memory_allocated); then `benchmarks/speed.py --amp --sizes base big
   --no-ctranslate2`: training tokens/s, peak memory and MFU, and beam-4 sentences/s, of both implementations.
Every run is fairseq's own command-line entry point, run in one worker process per stage (CUDA starts once; a run
that kills the worker is recorded as failed and the worker starts again for the rest). The exit status is 1 when a
check fails (a run failed or was not run, a loss is not finite or does not fall, the GPU's float32 hypotheses are
not the CPU's); the report is written either way. The CPU stand-in (--device cpu --tiny, or the variable
GPU_ACCEPTANCE_STAND_IN=1) runs the same code in fp32 and bfloat16 autocast with a tiny model, its "GPU" the CPU.
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
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from speed import SIZES  # noqa: E402  (d_model, d_ff, h, N of the sizes speed.py measures)

PLUGIN = REPO / "vaswani_plugin"
SKIPPED = "gpu_acceptance: no GPU visible (torch.cuda.is_available() is False): skipped"
STAND_IN = "GPU_ACCEPTANCE_STAND_IN"  # =1: the CPU stand-in, as --device cpu --tiny
REPORT, LOGS = "gpu_acceptance_report.md", "gpu_acceptance_logs.tar.gz"
PRECISIONS = {  # fairseq-train arguments of each precision; the same for both implementations
    "fp16": ["--task", "translation", "--fp16"],
    "amp": ["--task", "translation", "--amp"],
    "bf16-autocast": ["--task", "vaswani_translation", "--bf16-autocast", "on"],  # fairseq's --bf16 assumes a TPU
    "fp32": ["--task", "translation"],
}
CRITERIA = {  # each implementation with its own criterion, as it is trained
    "vaswani_transformer": "vaswani_label_smoothed_cross_entropy", "transformer": "label_smoothed_cross_entropy"}
PLUGIN_ONLY = ["vaswani_transformer"]
DECODES = {  # stage (a)'s decoding runs: name -> (on the CPU?, --fp16?)
    "cpu": (True, False), "fp32": (False, False), "fp16": (False, True)}


@dataclass(frozen=True)
class Runs:
    """A stage's fairseq-train runs."""
    steps: int
    log_interval: int
    warmup: int      # eq. 3's warmup_steps
    seconds: float   # a cap on each run's training time (fairseq's --stop-time-hours)


@dataclass(frozen=True)
class Mode:
    """What the acceptance trains and measures."""
    size: str            # a size of benchmarks/speed.py, trained by fairseq-train
    max_tokens: int
    check: Runs          # stage (a)
    speed: Runs          # stage (b)
    sentences: int       # the first test sentences, decoded on the CPU and on the device
    minutes: tuple       # each stage's budget: no run of it starts later, and speed.py is stopped then
    speed_args: tuple    # benchmarks/speed.py's sizes and counts


# The base model on Multi30k. Stage (a): a warmup of 250 steps gives a rate of 5.6e-4 at step 50, the paper's order
# (its peak is 7e-4, at step 4,000), so that the loss falls within 50 updates. Stage (b): 1,000 steps, 2.8e-4 at
# step 200 (only speed is measured there).
BASE = Mode("base", 4096, Runs(50, 10, 250, 30), Runs(200, 20, 1000, 20), 100, (3, 6),
            ("--sizes", "base", "big", "--sentences", "128"))
TINY = Mode("tiny", 512, Runs(20, 5, 20, 45), Runs(20, 5, 20, 45), 100, (10, 10),
            ("--sizes", "tiny", "--max-tokens", "512", "--warmup", "1", "--updates", "2", "--sentences", "16",
             "--pretrain-steps", "0"))


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
HYPOTHESIS = re.compile(r"^H-(\d+)\t([^\t]*)\t(.*)$", re.M)


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
    """fairseq-generate's timing line ({sentences, tokens, seconds, sentences_per_s, tokens_per_s}), its
    hypotheses (sentence id -> H- line's tokens) and their scores (id -> the H- line's score)."""
    found = TRANSLATED.search(log_text)
    lines = HYPOTHESIS.findall(output_text)
    hypotheses, scores = {int(i): tokens for i, _, tokens in lines}, {int(i): float(score) for i, score, _ in lines}
    if not found:
        return None, hypotheses, scores
    sentences, tokens, seconds, per_s, tokens_per_s = (float(x.replace(",", "")) for x in found.groups())
    timing = dict(sentences=int(sentences), tokens=int(tokens), seconds=seconds, sentences_per_s=per_s,
                  tokens_per_s=tokens_per_s)
    return timing, hypotheses, scores


def differing(hypotheses, reference):
    """The sentence ids (of either set) with a different hypothesis, or none, in `hypotheses`, in order."""
    return sorted(i for i in set(hypotheses) | set(reference) if hypotheses.get(i) != reference.get(i))


def parse_speed_table(text):
    """benchmarks/speed.py's rows: (size, implementation) -> train tokens/s, peak MB, beam-4 sentences/s and MFU
    (None: '-')."""
    rows = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 9 and fields[1] in CRITERIA and re.fullmatch(r"\d+\.\d+", fields[2]):
            mfu = float(fields[8][:-1]) / 100 if fields[8].endswith("%") else None
            rows[fields[0], fields[1]] = dict(tokens_per_s=float(fields[2]), peak_memory_mb=float(fields[3]),
                                              beam4_sentences_per_s=float(fields[4]), mfu=mfu)
    return rows


# ---------------------------------------------------------------------------------------------------------
# The machine.

def machine(device, kit):
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
    rows["Python"] = f"{sys.version.split()[0]} ({sys.executable})"
    rows["fairseq"] = _fairseq()
    rows["vaswani_plugin"] = f"--user-dir {PLUGIN}, {_git()}"
    if kit:
        manifest = json.loads((kit / "kit.json").read_text())
        rows["GPU kit"] = (f"{kit}: built {manifest['built']} from {manifest['commit']} for Python "
                           f"{manifest['python']}; " + ", ".join(f"{name} {version}" for name, version
                                                                in manifest["packages"].items()))
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
        done = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True,
                              text=True, timeout=60)
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
    sizes = [x for side in ("encoder", "decoder") for x in (f"--{side}-embed-dim", dim, f"--{side}-ffn-embed-dim",
                                                             ffn, f"--{side}-attention-heads", heads,
                                                             f"--{side}-layers", layers)]
    save = ["--save-dir", save_dir, "--no-epoch-checkpoints", "--save-interval", "1000000",
            "--no-save-optimizer-state"] if save_dir else ["--no-save"]
    return [str(x) for x in [
        data, "--user-dir", PLUGIN, *PRECISIONS[precision], "--arch", impl, "--share-all-embeddings",
        *sizes, "--dropout", "0.1",
        "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--adam-eps", "1e-9",
        "--lr-scheduler", "noam", "--warmup-updates", runs.warmup,
        "--criterion", CRITERIA[impl], "--label-smoothing", "0.1",
        "--max-tokens", mode.max_tokens, "--required-batch-size-multiple", "1", "--seed", "1",
        "--distributed-world-size", "1",  # one GPU, however many the machine has
        "--max-update", runs.steps, "--stop-time-hours", runs.seconds / 3600, "--disable-validation",
        "--log-format", "json", "--log-interval", runs.log_interval, *save, *DATA_LOADING,
        *(["--cpu"] if device == "cpu" else [])]]


def generate_argv(data, subset, checkpoint, fp16, device, results):
    """fairseq-generate's arguments: §6.1's beam search over a split."""
    return [str(x) for x in [
        data, "--user-dir", PLUGIN, "--task", "vaswani_translation", "--path", checkpoint, "--gen-subset", subset,
        "--beam", "4", "--gnmt-alpha", "0.6", "--max-len-a", "1", "--max-len-b", "50", "--batch-size", "128",
        "--required-batch-size-multiple", "1", "--results-path", results, *DATA_LOADING,
        *(["--fp16"] if fp16 else []), *(["--cpu"] if device == "cpu" else [])]]


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
        elif job["tool"] == "generate":  # fairseq-generate's cli_main
            fairseq_cli.generate.main(options.parse_args_and_arch(options.get_generation_parser(), job["argv"]))
        else:
            write_first_sentences(*job["argv"])
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
    """Run the jobs one after another; each one's result goes to its own file as soon as it is known. A job whose
    deadline (time.time()) has passed is not run: its result says so."""
    for job in json.loads(Path(jobs_file).read_text()):
        late = job.get("deadline") is not None and time.time() > job["deadline"]
        result = {"error": job["late"]} if late else run_job(job)
        Path(job["result"]).write_text(json.dumps(result))


def run_jobs(jobs, work, log, deadline=None, late=None):
    """Run all jobs in worker processes: one, unless a run kills it (then that run failed, the rest go on). No job
    starts after `deadline` (time.time()); its result is then the error `late`."""
    pending = [dict(job, deadline=deadline, late=late) for job in jobs]
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


def training_rows(training, precisions, impls):
    """Markdown rows of a training table: (precision, implementation) -> summary (or a note)."""
    rows = []
    for precision in precisions:
        for impl in impls:
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


def training_section(title, runs, mode, training, precisions, impls):
    """A stage's training table, with the loss-scale history of the runs that have one."""
    lines = [f"## {title}: the {mode.size} model, {runs.steps} updates of {mode.max_tokens} tokens per precision", "",
             f"fairseq-train with --log-format json --log-interval {runs.log_interval}, stopped after {runs.steps} "
             f"updates or {runs.seconds:g} s of training; loss (base 2, label smoothed) of the first and last log "
             f"window; tokens/s: target tokens, the median `wps` of the windows after the first; peak memory: "
             f"torch.cuda.max_memory_allocated (CPU stand-in: the worker's peak RSS in the run); loss scale: fp16 "
             f"and amp only, first → last logged value; overflows: fairseq's overflow notes.", "",
             "| precision | implementation | steps | loss first → last | finite and falling | tokens/s "
             "| peak MB | loss scale | overflows |", "|---|---|---|---|---|---|---|---|---|"]
    lines += training_rows(training, precisions, impls)
    scaled = [(p, i) for p in precisions for i in impls if training[p, i].get("loss_scales")]
    if scaled:
        lines += ["", "Loss-scale history (update: scale, one value per log window):", ""]
        lines += [f"- {p}, {i}: " + ", ".join(f"{step}: {scale:g}" for step, scale in training[p, i]["loss_scales"])
                  for p, i in scaled]
    return lines


def decoding_section(decoding, device):
    """Stage (a)'s decoding: the CPU's float32 hypotheses against the device's in float32 and fp16."""
    on = "GPU" if device == "cuda" else "stand-in device (the CPU)"
    names = {"cpu": "CPU, float32", "fp32": f"{on}, float32", "fp16": f"{on}, fp16"}
    lines = [f"## (a) Beam-4 decoding: the {on} against the CPU", "",
             f"fairseq-generate --beam 4 --gnmt-alpha 0.6 --batch-size 128 of the first {decoding['sentences']} "
             f"test sentences (a data-bin of their own, first-sentences/), from {decoding['checkpoint']} checkpoint: "
             f"on the CPU (--cpu), and on the {on} without and with --fp16; each its own timing line.", "",
             "| run | sentences | sentences/s | tokens/s | seconds |", "|---|---|---|---|---|"]
    for name, title in names.items():
        timing = decoding[name]
        lines.append(f"| {title} | {timing['sentences']} | {timing['sentences_per_s']:.1f} | "
                     f"{timing['tokens_per_s']:.1f} | {timing['seconds']:.1f} |" if "sentences" in timing
                     else f"| {title} | FAILED: {timing['error']} | | | |")
    if "sentences" in decoding["cpu"] and "sentences" in decoding["fp32"]:
        total, changed = decoding["compared"], decoding["not_cpu"]
        lines += ["", f"{on} float32 against the CPU: {total - len(changed)} of {total} hypotheses identical."]
        hypotheses, scores = decoding["hypotheses"], decoding["scores"]
        for i in changed[:10]:
            lines += [f"- sentence {i}: CPU ({_f(scores['cpu'].get(i), '.4f')}) `{hypotheses['cpu'].get(i)}`; "
                      f"{on} ({_f(scores['fp32'].get(i), '.4f')}) `{hypotheses['fp32'].get(i)}`"]
    if "sentences" in decoding["fp32"] and "sentences" in decoding["fp16"]:
        lines += ["", f"fp16 / float32 sentences/s: "
                      f"{decoding['fp16']['sentences_per_s'] / decoding['fp32']['sentences_per_s']:.2f}; "
                      f"hypotheses that differ: {len(decoding['fp16_differing'])} of {decoding['fp32']['sentences']} "
                      f"(fp16 may differ in a few: reported, not a failure)"]
    return lines


def comparison_section(training, precisions):
    """Stage (b)'s ratios of the plugin to fairseq's transformer, precision by precision."""
    lines = ["## (b) The plugin against fairseq's `transformer` (same data, batch size and precision)", "",
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
    return lines


def speed_section(speed, device):
    """Stage (b)'s table of benchmarks/speed.py, and its output."""
    lines = ["## (b) MFU and beam-4 speed (benchmarks/speed.py)", "",
             f"`{speed['command']}`: training tokens/s and peak memory; MFU, model FLOPs per second / the GPU's peak, "
             f"during training" + (" (no MFU on a CPU)" if device == "cpu" else "") + "; beam-4 sentences/s of each "
             "implementation's own search.", ""]
    if speed["rows"]:
        lines += ["| size | implementation | train tokens/s | peak MB | beam-4 sentences/s | MFU |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {size} | {impl} | {row['tokens_per_s']:.1f} | {row['peak_memory_mb']:.1f} | "
                  f"{row['beam4_sentences_per_s']:.1f} | "
                  f"{'-' if row['mfu'] is None else format(100 * row['mfu'], '.1f') + '%'} |"
                  for (size, impl), row in speed["rows"].items()]
    if speed["error"]:
        lines += [""] * bool(speed["rows"]) + [f"FAILED: {speed['error']}"]
    return lines + ["", "speed.py's output:", "", "```", speed["output"].rstrip(), "```"]


def checks_section(title, checks):
    return [f"## {title}", ""] + [f"- {'pass' if ok else 'FAIL'}: {what}" for what, ok in checks]


def render_report(facts):
    """The markdown report from the facts main() gathered: stage (a), and stage (b) once it has run."""
    mode, shown, a, b = facts["mode"], facts["precisions"], facts["a"], facts.get("b")
    stages = f"stage (a) {a['minutes']:.1f} of at most {mode.minutes[0]}" + (
        f", stage (b) {b['minutes']:.1f} of at most {mode.minutes[1]}" if b else "")
    lines = ["# GPU acceptance of vaswani_plugin", "",
             f"- date: {facts['date']}", f"- command: `{facts['command']}`",
             f"- data: {facts['data']}", f"- wall time: {facts['wall_minutes']:.1f} minutes ({stages})", "",
             "## Machine", "", "| | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in facts["machine"].items()]
    lines += [""] + training_section("(a) Training", mode.check, mode, a["training"], shown, PLUGIN_ONLY)
    lines += [""] + decoding_section(a["decoding"], facts["device"])
    lines += [""] + checks_section("(a) Checks", a["checks"])
    if b:
        lines += [""] + training_section("(b) Training", mode.speed, mode, b["training"], shown, CRITERIA)
        lines += [""] + comparison_section(b["training"], shown)
        lines += [""] + speed_section(b["speed"], facts["device"])
        lines += [""] + checks_section("(b) Checks", b["checks"])
    else:
        lines += ["", "## (b) Speed", "", "Not written yet: stage (b) is running, or the run was cut short before it "
                  "ended."]
    lines += ["", "## Runs", "", f"Each a fairseq command line, run in the worker (logs in {facts['work']}/logs), "
              "and its seconds:", ""]
    lines += [f"- {_f(result.get('seconds'), '.1f')} s: `{command}`" for command, result in facts["commands"]]
    return "\n".join(lines) + "\n"


def write_report(facts, report, logs):
    """The report (replaced whole, never half written) and, with --report-dir, an archive of the logs so far."""
    partial = report.with_name(report.name + ".partial")
    partial.write_text(render_report(facts))
    os.replace(partial, report)
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
    return [dict(name=name, tool=tool, argv=argv, log=str(work / "logs" / f"{name}.log"),
                 result=str(work / "results" / f"{name}.json")) for name, tool, argv in specs]


def described(job):
    """A job as the report's list of runs shows it: the fairseq command line."""
    if job["tool"] == "subset":
        data, split, count, dest = job["argv"]
        return f"the first {count} sentences of {split} in {data}, written to {dest}"
    return f"fairseq-{job['tool']} {shlex.join(job['argv'])}"


def trained(work, results, name):
    """A training run's summary from its log, with the worker's result (seconds, peak memory, error)."""
    log = work / "logs" / f"{name}.log"
    summary = summarize_training(*parse_train_log(log.read_text() if log.exists() else ""))
    return {**summary, **results[name]}


def stage_a(context):
    """Correctness: the plugin trained in each precision, its checkpoint decoded on the CPU and on the device."""
    work, data, mode, device, precisions = (context[k] for k in ("work", "data", "mode", "device", "precisions"))
    started, first, checkpoints = time.time(), work / "first-sentences", work / "checkpoints"
    specs = [("first-sentences", "subset", [str(data), "test", str(mode.sentences), str(first)])]
    specs += [(f"train-a-{p}", "train", train_argv(data, mode, mode.check, p, PLUGIN_ONLY[0], device,
                                                   checkpoints if p == precisions[0] else None)) for p in precisions]
    specs += [(f"generate-{name}", "generate", generate_argv(first, "test", checkpoints / "checkpoint_last.pt", fp16,
                                                            "cpu" if cpu else device, work / f"generate-{name}"))
              for name, (cpu, fp16) in DECODES.items()]
    jobs = stage_jobs(work, specs)
    results = run_jobs(jobs, work, work / "worker-a.log", started + 60 * mode.minutes[0],
                       f"not run: stage (a)'s {mode.minutes[0]} minutes were spent")

    training = {(p, i): {"note": "needs a GPU"} for p in context["shown"] for i in CRITERIA}
    for precision in precisions:
        training[precision, PLUGIN_ONLY[0]] = trained(work, results, f"train-a-{precision}")
    decoding = {"checkpoint": f"the {precisions[0]} run's", "sentences": mode.sentences, "hypotheses": {},
                "scores": {}}
    for name in DECODES:
        output = work / f"generate-{name}" / "generate-test.txt"
        log = work / "logs" / f"generate-{name}.log"
        timing, decoding["hypotheses"][name], decoding["scores"][name] = parse_generate(
            log.read_text() if log.exists() else "", output.read_text() if output.exists() else "")
        decoding[name] = timing or {"error": results[f"generate-{name}"].get("error", "no timing line in its log")}
    hypotheses = decoding["hypotheses"]
    decoding["not_cpu"] = differing(hypotheses["fp32"], hypotheses["cpu"])
    decoding["compared"] = len(set(hypotheses["fp32"]) | set(hypotheses["cpu"]))
    decoding["fp16_differing"] = differing(hypotheses["fp16"], hypotheses["fp32"])
    checks = training_checks(training, precisions, PLUGIN_ONLY)
    if "error" in results["first-sentences"]:
        checks.append((f"the first {mode.sentences} test sentences written ({results['first-sentences']['error']})",
                       False))
    checks += [(f"beam-4 decoding ran: {name}", "sentences" in decoding[name]) for name in DECODES]
    on = "GPU" if device == "cuda" else "stand-in device"
    same = decoding["compared"] - len(decoding["not_cpu"])
    checks.append((f"beam 4 in float32: the {on}'s hypotheses are the CPU's ({same} of {decoding['compared']})",
                   "sentences" in decoding["cpu"] and decoding["compared"] > 0 and not decoding["not_cpu"]))
    return dict(training=training, decoding=decoding, checks=checks, jobs=jobs, results=results,
                minutes=(time.time() - started) / 60)


def stage_b(context):
    """Speed: both implementations trained in each precision, then benchmarks/speed.py."""
    work, data, mode, device, precisions = (context[k] for k in ("work", "data", "mode", "device", "precisions"))
    started = time.time()
    deadline, late = started + 60 * mode.minutes[1], f"not run: stage (b)'s {mode.minutes[1]} minutes were spent"
    jobs = stage_jobs(work, [(f"train-b-{p}-{impl}", "train", train_argv(data, mode, mode.speed, p, impl, device))
                             for p in precisions for impl in CRITERIA])
    results = run_jobs(jobs, work, work / "worker-b.log", deadline, late)
    training = {(p, i): {"note": "needs a GPU"} for p in context["shown"] for i in CRITERIA}
    for precision in precisions:
        for impl in CRITERIA:
            training[precision, impl] = trained(work, results, f"train-b-{precision}-{impl}")
    speed = run_speed(data, mode, device, work, deadline - time.time(), mode.minutes[1])
    checks = training_checks(training, precisions, CRITERIA)
    checks.append(("benchmarks/speed.py ran" + (f" ({speed['error']})" if speed["error"] else ""),
                   not speed["error"]))
    if device == "cuda":
        checks += [(f"MFU measured: {size} {impl}", row["mfu"] is not None)
                   for (size, impl), row in speed["rows"].items()]
    return dict(training=training, speed=speed, checks=checks, jobs=jobs, results=results,
                minutes=(time.time() - started) / 60)


def training_checks(training, precisions, impls):
    """(what, passed) of each training run: it ran, and its loss is finite and falls."""
    checks = []
    for precision in precisions:
        for impl in impls:
            row = training[precision, impl]
            if "error" in row:
                checks.append((f"{precision} {impl} trained ({row['error']})", False))
            else:
                checks.append((f"{precision} {impl}: trained {row['steps']} steps, loss finite and falling",
                               row["finite"] and row["falling"]))
    return checks


# ---------------------------------------------------------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(prog="gpu_acceptance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", type=Path, default=os.environ.get("WORK_DIR") or None,
                        help="data, logs, checkpoints and the report gpu_acceptance_report.md (default: $WORK_DIR; "
                             "without it ./work/gpu_acceptance, the report in benchmarks/)")
    parser.add_argument("--report-dir", type=Path,
                        help="where the report goes instead, with gpu_acceptance_logs.tar.gz (the logs so far), "
                             "both rewritten as each stage ends (the GPU kit's command: $OUT)")
    parser.add_argument("--raw-dir", type=Path, default=os.environ.get("RAW_DIR") or None,
                        help="Multi30k's six .gz files, offline (default: $RAW_DIR, else ../shared/data/multi30k or "
                             "shared/data/multi30k from the repo if there, else downloaded)")
    parser.add_argument("--data", type=Path, help="a fairseq data-bin with train and test (a joined dictionary) "
                                                  "instead of preparing Multi30k")
    parser.add_argument("--kit", type=Path, help="the GPU kit this Python's packages came from: its kit.json "
                                                 "(versions, the commit it was built from) goes into the report")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cuda (default): the first GPU; cpu: the stand-in, with --tiny")
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
        die(f"fairseq is not importable by {sys.executable}: install the plugin with fairseq (README \"Set-up\"), "
            "or the GPU kit's wheels (benchmarks/gpu_kit.sh); set PYTHON to the environment that has it")
    if args.data and not all(any(args.data.glob(f"{split}.*.bin")) for split in ("train", "test")):
        die(f"--data {args.data}: no binarised train and test splits there (fairseq-preprocess output)")
    started = time.perf_counter()
    mode = TINY if args.tiny else BASE
    work = (args.work_dir or Path("work/gpu_acceptance")).resolve()
    report_dir = (args.report_dir or (work if args.work_dir else REPO / "benchmarks")).resolve()
    report, logs = report_dir / REPORT, report_dir / LOGS if args.report_dir else None
    say(f"work in {work}; the report will be {report}" + (f", the logs {logs}" if logs else ""))
    precisions = ["fp16", "amp", "bf16-autocast"] if args.device == "cuda" else ["fp32", "bf16-autocast"]
    shown = ["fp16", "amp", "bf16-autocast"] + (["fp32"] if "fp32" in precisions else [])  # GPU rows always
    for stale in ("logs", "results", "checkpoints", "first-sentences", *(f"generate-{name}" for name in DECODES)):
        shutil.rmtree(work / stale, ignore_errors=True)
    for folder in ("logs", "results"):
        (work / folder).mkdir(parents=True)
    report_dir.mkdir(parents=True, exist_ok=True)

    data = args.data.resolve() if args.data else prepare_multi30k(work, args.raw_dir and args.raw_dir.resolve())
    prefix = f"{STAND_IN}=1 " if os.environ.get(STAND_IN) == "1" else ""
    facts = dict(mode=mode, precisions=shown, device=args.device, machine=machine(args.device, args.kit), work=work,
                 data=data, date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                 command=prefix + shlex.join(["python", "benchmarks/gpu_acceptance.py", *(argv or sys.argv[1:])]))
    context = dict(work=work, data=data, mode=mode, device=args.device, precisions=precisions, shown=shown)
    checks = []
    for stage, run in (("a", stage_a), ("b", stage_b)):
        say(f"stage ({stage}): at most {mode.minutes['ab'.index(stage)]} minutes")
        facts[stage] = run(context)
        checks += facts[stage]["checks"]
        done = [facts[s] for s in "ab" if s in facts]
        facts.update(wall_minutes=(time.perf_counter() - started) / 60, commands=[
            (described(job), part["results"][job["name"]]) for part in done for job in part["jobs"]])
        write_report(facts, report, logs)
        say(f"stage ({stage}) done in {facts[stage]['minutes']:.1f} minutes; written to {report}")
    failed = [what for what, ok in checks if not ok]
    print(f"gpu_acceptance: report written to {report}")
    print(f"gpu_acceptance: {len(checks) - len(failed)} of {len(checks)} checks passed"
          + "".join(f"\n  FAIL: {what}" for what in failed))
    return 1 if failed else 0


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


def run_speed(data, mode, device, work, seconds, minutes):
    """benchmarks/speed.py on the same data, stopped (its whole process group) after `seconds`: its printed table,
    parsed, as far as it got."""
    command = ["benchmarks/speed.py", "--data", str(data), "--device", device, "--no-ctranslate2",
               *(["--amp"] if device == "cuda" else []), *mode.speed_args]
    result = dict(command=f"python {shlex.join(command)}", output="", rows={}, error=None)
    if seconds <= 0:
        return dict(result, error=f"not run: stage (b)'s {minutes} minutes were spent")
    say(f"python {shlex.join(command)} (at most {seconds:.0f} s)")
    with open(work / "speed.txt", "w") as out:
        process = subprocess.Popen([sys.executable, *command], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                   env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True)
        try:
            status = process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # speed.py and the worker processes it started
            process.wait()
            status = None
    output = (work / "speed.txt").read_text()
    result.update(output=output, rows=parse_speed_table(output))
    if status is None:
        result["error"] = f"stopped after {seconds:.0f} s, at the end of stage (b)'s {minutes} minutes"
    elif status != 0:
        result["error"] = f"exit status {status}: {(output.strip().splitlines() or [''])[-1]}"
    elif not result["rows"]:
        result["error"] = "no table rows in its output"
    return result


if __name__ == "__main__":
    sys.exit(main())
