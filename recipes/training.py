"""A recipe's training stage: fairseq-train's command built once, decided by the engine, run here.

    python -m recipes.training [--stage NAME] [--first] [--share all|decoder] SAVE_DIR [MODEL ARGS...]

The command is §5's set-up (paper.py's training arguments: Adam's β and ε, eq. 3, label smoothing) with the
recipe's MODEL ARGS, this run's devices (recipes/launch.py's, as recipes/common.sh exports them) and a batch of about
TOKENS_PER_STEP tokens a step however many workers there are (§5.1; on GPUs without MAX_TOKENS_PER_GPU, as many as
the smallest GPU's memory holds: run 0 decides, the others follow). The engine (recipes/stages.py) compares it with
the stage's record and checkpoints: skip, run, resume or refuse. The precision is PRECISION's (unset: on GPUs auto,
mixed precision by their compute capability, run 0 deciding; on a CPU float32; auto on a CPU: the task's choice by
its flags; a run in progress goes on in its checkpoints'; vaswani_plugin/precision.py). fairseq-train's
output goes to stdout and to SAVE_DIR/train.log (train.node1.log ... for the other runs of a job); it writes its own
progress records, refreshes the report (REPORT, REPORT_EVERY) and ends a rank that waits STALL_MINUTES for the others.
SIGUSR1, SIGTERM and SIGINT are passed on to it: it stops after its next update (vaswani_plugin/training/preemption.py),
the record says so, run 0 of a SLURM job that allows it requeues it, and the exit status is 75.
--share: one matrix for both embeddings and the pre-softmax projection (§3.4, all) or the target's only (decoder).
--first: no stage before it (Table 3's variants are independent of each other).
"""

import argparse
import importlib.util
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

from recipes import launch, stages, stops
from vaswani_plugin import paper
from vaswani_plugin import precision as PRECISION
from vaswani_plugin.training import preemption as PREEMPTION

RECEIVED: List[int] = []  # PREEMPTION.SIGNALS received, passed on to fairseq-train
TRAINING: List[subprocess.Popen] = []  # fairseq-train, once started
SHARING = {"all": "--share-all-embeddings", "decoder": "--share-decoder-input-output-embed"}


def received(number, frame) -> None:
    """Kept, and passed on to fairseq-train at once when it runs."""
    RECEIVED.append(number)
    for process in TRAINING:
        process.send_signal(number)


def data_bin() -> str:
    return stages.data_dir() + "/data-bin"


def words(name: str) -> List[str]:
    return shlex.split(stages.env(name))


def batch(run: stages.Run, model: List[str]) -> Tuple[int, int]:
    """(MAX_TOKENS, UPDATE_FREQ) of launch.batch_plan for `model` (fairseq-train's arguments but the data and batch),
    run 0's for every run of the job."""

    def decide_here() -> str:
        plan = launch.batch_plan(run.workers, data_bin(), paper.TOKENS_PER_STEP, model)
        return f"{plan['MAX_TOKENS']} {plan['UPDATE_FREQ']}"

    if stages.env("MAX_TOKENS_PER_GPU") or "--cpu" in model or run.dry_run:
        max_tokens, update_freq = decide_here().split()  # the same on every run
    else:  # the GPUs' memory decides, and the cards of a job's runs may differ
        max_tokens, update_freq = stages.agreed(run, "batch", decide_here).split()
    return int(max_tokens), int(update_freq)


def precision(run: stages.Run, trained: Optional[str]) -> Tuple[str, str]:
    """(one of PRECISION.PRECISIONS, or auto on a CPU; why, where the recipe chose it) for this run: PRECISION's
    (FP16's, BF16's) if set (launch.devices_plan refused what the devices cannot train in); else its checkpoints'
    (`trained`); else auto, on GPUs decided by run 0 for every run."""
    setting, said = PRECISION.recipe_setting(os.environ)
    on_cpu = "--cpu" in words("DEVICE_ARGS")
    if setting != "auto":
        return setting, ""
    if trained is not None:
        return trained, f"{said}: the precision its checkpoints trained in"
    if on_cpu:  # unset, float32 as the recipes always trained on CPUs; auto (the quickstart's): the task's choice
        return ("fp32" if said == "PRECISION unset" else "auto"), ""
    if run.dry_run:
        stages.say(
            "precision: PRECISION unset: chosen at run time by the GPUs' compute capability (bf16 from 8.0, fp16 on "
            "7.x, fp32 below; vaswani_plugin/precision.py); the plan shows bf16's: set PRECISION to see another's"
        )
        return "bf16", ""

    chosen, why = stages.agreed(run, "precision", PRECISION.on_these_gpus).split(" ", 1)
    stages.say(f"precision: {chosen} ({said}: {why})")
    return chosen, f"{said}: {why}"


def command(run: stages.Run, python: str, save_dir: str, share: str, model: List[str]) -> Tuple[List[str], str]:
    """(fairseq-train's command, the interpreter first; why the recipe chose its precision, or "")."""
    training = paper.arguments("training")
    # A run whose checkpoints trained under fairseq's adam (the recipes' optimizer before vaswani_adam) goes on with
    # it: fairseq resumes no checkpoint under another optimizer. PRECISION unset: it goes on in its precision too.
    # In this process: the engine's decision imports the same module (fairseq's checkpoints) next.
    trained = None
    if stages.has_checkpoints(save_dir):
        resume = importlib.import_module("vaswani_plugin.checkpoints.resume")
        trained_under = resume.trained_config(Path(save_dir))  # one read of the checkpoint for both
        if trained_under is not None and trained_under["optimizer"]["_name"] == "adam":
            training = ["adam" if word == "vaswani_adam" else word for word in training]
        trained = None if trained_under is None else PRECISION.trained_precision(trained_under)
    chosen, why = precision(run, trained)
    plugin = str(Path(__file__).resolve().parent.parent / "vaswani_plugin")
    task = ["--user-dir", plugin, "--task", "vaswani_translation", *PRECISION.arguments(chosen)]
    extra = words("DEVICE_ARGS") + model + words("EXTRA_TRAIN_ARGS")
    max_tokens, update_freq = batch(run, task + [SHARING[share]] + extra)
    line = [python, "-m", "fairseq_cli.train", data_bin(), *task, SHARING[share], *training]
    line += ["--max-tokens", str(max_tokens), "--update-freq", str(update_freq), "--required-batch-size-multiple", "1"]
    line += ["--save-dir", save_dir, "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", "100"]
    line += extra
    tensorboard = importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX")
    if stages.env("TENSORBOARD", "auto") != "0" and tensorboard:
        line += ["--tensorboard-logdir", save_dir + "/tensorboard"]
    return line, why


def watched(python: str, work_dir: Path, precision_why: str = "") -> dict:
    """fairseq-train's environment: the watchdog's STALL_MINUTES (training/watchdog.py), why the recipe chose the
    precision (for the task's `precision:` line) and, after a validation, the curves and report redrawn at most every
    REPORT_EVERY seconds (training/progress_meter.py)."""
    variables = {"VASWANI_STALL_MINUTES": stages.env("STALL_MINUTES", "10"), "VASWANI_PRECISION_DEFAULT": precision_why}
    if stages.env("REPORT", "1") != "0":
        report = shlex.join([python, "-m", "vaswani_plugin.tools.run_report", str(work_dir)])
        variables.update(VASWANI_PROGRESS_REFRESH_SECONDS=stages.env("REPORT_EVERY", "300"))
        variables.update(VASWANI_PROGRESS_REFRESH=f"{report} > /dev/null")
    return dict(os.environ, **variables)


def tee(line: List[str], environment: dict, log: Path, first: bytes) -> int:
    """Run `line`, its output to stdout and appended to `log`; its exit status. PREEMPTION.SIGNALS (Ctrl-C's SIGINT
    among them, which reaches fairseq-train too in a terminal's process group) are passed on to it
    (training/preemption.py: it stops after its next update)."""
    with open(log, "ab") as kept:
        for out in (sys.stdout.buffer, kept):
            out.write(first)
            out.flush()
        # fairseq-train starts ignoring PREEMPTION.SIGNALS until the plugin flags them: one received (RECEIVED) is
        # sent again with each of its outputs too.
        keep = {number: signal.signal(number, signal.SIG_IGN) for number in PREEMPTION.SIGNALS}
        process = subprocess.Popen(line, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment)
        TRAINING.append(process)
        for number, handler in keep.items():
            signal.signal(number, handler)
        for chunk in iter(lambda: process.stdout.read1(65536), b""):
            for out in (sys.stdout.buffer, kept):
                out.write(chunk)
                out.flush()
            if RECEIVED:
                process.send_signal(RECEIVED[0])
        return process.wait()


def requeue(run: stages.Run) -> str:
    """Under SLURM, run 0 of a job that allows it (--requeue) puts it back in the queue: what the line says."""
    job = stages.env("SLURM_JOB_ID")
    if job and run.rank != 0:
        return f"SLURM job {job} is requeued by its first run where the job allows it"
    if not job or not shutil.which("scontrol"):
        return "run the same command again"
    shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True)
    if "Requeue=1" not in shown.stdout.split():
        return f"SLURM job {job} does not allow requeueing (sbatch --requeue): submit it again"
    if subprocess.run(["scontrol", "requeue", job]).returncode:
        return f"scontrol requeue {job} failed: submit it again"
    return f"SLURM job {job} requeued: it resumes when SLURM starts it again"


def train(args) -> None:
    if not stages.env("LAUNCH_ID"):
        raise stages.StageError("internal: train needs the run's launch: call detect_devices before it")
    run, python = stages.Run.from_environment(), stages.env("PYTHON", sys.executable)
    line, precision_why = command(run, python, args.save_dir, args.share, args.model)
    save_dir = Path(args.save_dir)
    inputs = sorted(Path(data_bin()).glob("dict.*.txt"))  # what training reads
    after = "" if args.first else None
    plan = shlex.join(["python", *line[1:]])
    stage = stages.Stage(args.stage, plan, stages.previous(run, args.stage, after), [save_dir], inputs, save_dir)
    decision = stages.begin(run, stage)
    if decision.action == "skip":
        return
    if run.dry_run:
        if run.rank == 0 and (save_dir / "checkpoint_last.pt").exists():  # the engine makes it resumable first
            stages.say(f"stage {args.stage}: would resume from {save_dir / 'checkpoint_last.pt'}")
            print(shlex.join([python, "-m", "vaswani_plugin.checkpoints.resume", str(save_dir)]))
        stages.say(f"stage {args.stage}: {shlex.join(line)}")
        print(shlex.join(line), flush=True)
        return
    save_dir.mkdir(parents=True, exist_ok=True)
    log = save_dir / ("train.log" if run.rank == 0 else f"train.{run.name.replace(' ', '')}.log")
    stages.say(f"stage {args.stage}: {shlex.join(line)}")
    world = f"[{stages.env('RECIPE')}] {run.name}: world size {run.workers} (started as {stages.env('LAUNCH')})\n"
    status = tee(line, watched(python, run.work_dir, precision_why), log, world.encode() if run.workers != 1 else b"")
    ended(run, args.stage, save_dir, status)
    stages.finish(run, args.stage)


def ended(run: stages.Run, name: str, save_dir: Path, status: int) -> None:
    """fairseq-train's end, unless it trained to its target: a divergence, its record's one line; a stop (this run's
    signal, else the job's in the record), the stop line and EXIT_STATUS, also where the signal passed on ended
    fairseq-train outside an update (its Python finalising restores the default handlers); a kill, one line."""
    signal_name = PREEMPTION.name(RECEIVED[:1]) if RECEIVED else None
    how = stages.stopped(run, name, save_dir, signal_name)
    if how is None and RECEIVED and status == -RECEIVED[0]:
        how = f"stopped by {signal_name}"
    if how is not None:  # the run resumes from checkpoint_last.pt
        print(stops.said(f"training {how}", run), file=sys.stderr, flush=True)
        sys.exit(PREEMPTION.EXIT_STATUS)
    if status < 0:  # a kill (kill -9, the out-of-memory killer): fairseq-train could not say why
        raise stages.StageError(
            f"fairseq-train was ended by {signal.Signals(-status).name}; run the same command again (it resumes "
            f"from {save_dir})"
        )
    if status:
        sys.exit(1)  # fairseq-train said why


def main(argv=None) -> None:
    for number in PREEMPTION.SIGNALS:  # from the start (fairseq-train ignores them until the plugin flags them)
        signal.signal(number, received)
    parser = argparse.ArgumentParser(
        prog="python -m recipes.training",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--stage", default="train", help="the stage's name (default train)")
    parser.add_argument("--first", action="store_true", help="no stage before it")
    parser.add_argument("--share", choices=sorted(SHARING), default="all", help="the embeddings shared (§3.4)")
    parser.add_argument("save_dir", help="the checkpoints' folder (fairseq-train's --save-dir)")
    parser.add_argument("model", nargs=argparse.REMAINDER, help="fairseq-train's arguments of the model and run")
    args = parser.parse_args(argv)
    stages.ERRORS.run_reported(stages.env("RECIPE") or parser.prog, lambda: train(args))


if __name__ == "__main__":
    main()
