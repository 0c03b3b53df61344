"""GPU acceptance in one command, on one GPU, in three stages in priority order, each writing its part of the
markdown report as soon as it ends (a run killed at a time limit keeps the stages before):

    bash benchmarks/gpu_acceptance.sh        # = python benchmarks/gpu_acceptance.py [--work-dir W] [--raw-dir R]
    bash benchmarks/gpu_kit.sh               # on a CPU machine: wheels and data for a GPU machine without a package
                                             # index, and the command that runs this there
    GPU_ACCEPTANCE_STAND_IN=1 python benchmarks/gpu_acceptance.py ...   # = --device cpu --tiny: the CPU stand-in

(s) the speed of the recipes' default precision on the card against fairseq's transformer (acceptance_speed.py);
(a) correctness: the plugin trained in the card's mixed precisions, its beam search on the device against the CPU's
(acceptance_correctness.py, acceptance_decoding.py); (b) levers, and if time allows both implementations trained
side by side (acceptance_levers.py). Each stage stops by its deadline, in minutes from the command's start
(acceptance_plan.py; GPU_ACCEPTANCE_STARTED, which the GPU kit's command sets, else now); fairseq's runs go through
one worker process a stage (acceptance_worker.py); acceptance_report.py writes the report. The exit status is 1 when
a check fails. Without a visible GPU (and without the stand-in) nothing runs: the report says what the machine showed
of CUDA. The CPU stand-in runs the same code with a tiny model, its "GPU" the CPU. The GPU runs so far and what they
found: docs/results.md, "GPU".
"""

import argparse
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from acceptance_correctness import stage_a
from acceptance_levers import stage_b
from acceptance_machine import cuda_rows, machine
from acceptance_plan import (
    BASE,
    DECODES,
    LEVERS,
    LOGS,
    REPORT,
    SPEED_RUNS,
    STAGES,
    STAND_IN,
    STARTED,
    TINY,
    default_precision,
    die,
    say,
    stage_ends,
)
from acceptance_report import render_not_run_report, write_report, write_text_atomically
from acceptance_speed import stage_s
from acceptance_worker import described, pythonpath, run_until
from common import REPO, shared_multi30k


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

    ends = stage_ends(mode, started)
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
    clear(work)
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


def clear(work):
    """The work folder without an earlier run's logs, results, checkpoints and outputs (its data kept)."""
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


class NotPrepared(Exception):
    """Multi30k could not be prepared in time: nothing to measure."""


def prepare_multi30k(work, raw_dir, options, deadline, end):
    """Multi30k as the quickstart prepares it (the tiny mode: a part of it, fewer BPE merges), stopped at `deadline`
    (the first stage's `end`: no stage could run after it); the data-bin's path."""
    raw_dir = raw_dir or shared_multi30k()
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
            env=dict(os.environ, PYTHONPATH=pythonpath()),
        )
    if status is None:
        raise NotPrepared(f"preparing Multi30k was stopped at {end}")
    if status != 0:
        raise NotPrepared(f"preparing Multi30k failed (exit status {status})")
    return work / "data" / "data-bin"


if __name__ == "__main__":
    sys.exit(main())
