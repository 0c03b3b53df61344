"""Stage (s) of the GPU acceptance, the speed of the recipes' default: benchmarks/host_cost.py's runs (SPEED_RUNS;
stage (b)'s levers run the same way), each a process of its own within its share of the stage's time, their rows
read from host_cost.py's output, and TARGETS held or not."""

import os
import re
import shlex
import subprocess
import sys
import time

from acceptance_plan import DEFAULT, ONCE_ON_A_CPU, SAME_BATCH, SPEED_RUN_OVERHEAD_S, SPEED_RUNS, TARGETS, finished, say
from acceptance_worker import pythonpath, run_until
from common import RECIPES_OPTIMIZER, REPO

HOST_COST_ROW = re.compile(
    r"^(float32|fp16|amp|bf16) +(transformer|vaswani_transformer) +(adam|vaswani_adam) +"
    r"(\d+) +(\d+) +(\S+) +(\S+) +(\S+) +(\S+) +([\d.]+) +([\d.]+) +([\d.]+) +(\S+)",
    re.M,
)
HOST_COST_TOKENS = re.compile(r"^host cost of an update: .*, (\d+) tokens a batch,", re.M)
HOST_COST_PRODUCTS = re.compile(r"the matrix products at ([\d.]+) TFLOP/s", re.M)  # the kernel-time breakdown's
HOST_COST_CALLS = re.compile(
    r"^(float32|fp16|amp|bf16) +(transformer|vaswani_transformer) +(adam|vaswani_adam) +"
    r"([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+|-) +"
    r"([\d.]+|-)$",  # syncs: '-' under --compile-layers
    re.M,
)


def parse_host_cost(text):
    """benchmarks/host_cost.py's row of one configuration: its tokens a batch, its device table (updates, tokens/s,
    MFU and busy as shares, peak MB, the memory model's MB and their ratio, wall ms, the host's ms in forward and
    backward and in the optimizer, the device's idle ms; None for '-'), its host table (host ms, data wait ms,
    kernel-like calls, syncs: None where not counted) and the matrix products' TFLOP/s (its kernel time by kind);
    None without one."""

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
        syncs=value(host.group(11)),
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
                env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=pythonpath()),
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


def stage_s(context):
    """The recipes' default precision at both sizes against fairseq's --fp16 and --amp: SPEED_RUNS."""
    deadline, end = context["ends"][0]
    started = time.time()
    speed = run_speed(context["mode"], context["work"], SPEED_RUNS, deadline, end, context["default"][0])
    return finished(context, started, speed=speed, checks=speed_checks(speed), jobs=[], results={})
