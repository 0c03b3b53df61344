"""The GPU acceptance's markdown report: the machine, stage (s)'s speed runs and targets, stage (a)'s training and
decoding, stage (b)'s levers and fairseq-train comparison, each stage's checks and the runs; rewritten whole as each
stage ends, with an archive of the logs so far."""

import os
import tarfile
from datetime import UTC, datetime

from acceptance_logs import one_window
from acceptance_plan import ALPHA, CRITERIA, PLUGIN_ONLY, STAGES, TOLERANCE_FLOOR
from acceptance_speed import measured, targets_held
from common import PAPER


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
            f"{row['calls']:.0f} | {_f(row['syncs'], '.0f')} |"
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
