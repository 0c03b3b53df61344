"""host_cost.py's printed tables: per configuration the host's ms and kernel-like calls, the device's figures, the
ratios plugin / fairseq, the memory model against the peak, the syncs by frame, kernel time by kind, host ms by
frame and the interleaved rounds."""

import statistics

from host_cost_counts import COLUMNS
from host_cost_frames import AREAS
from host_cost_kinds import KINDS
from host_cost_measure import REFERENCE, TORCH_DROPOUT, round_ratios


def percent(share) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


def figure(value, spec) -> str:
    return "-" if value is None else format(value, spec)


def sync_total(result, who=None):
    """The syncs per update (those of `who`'s frames: 'plugin' or 'fairseq'); None where they were not counted."""
    if result["syncs"] is None:
        return None
    return sum(count for (_, site), count in result["syncs"].items() if who is None or site.startswith(who + " "))


def report(results, spec):
    header = (
        f"{'precision':<9} {'implementation':<20} {'optimizer':<12} {'host ms':>8} {'wait ms':>8} "
        + " ".join(f"{column:>9}" for column in COLUMNS)
        + f" {'calls':>7} {'syncs':>6} {'plugin':>6}"
    )
    print(header)
    for (precision, implementation, optimizer), result in results.items():
        calls = result["calls"]
        print(
            f"{precision:<9} {implementation:<20} {optimizer:<12} {result['host_ms']:8.1f} {result['wait_ms']:8.2f} "
            + " ".join(f"{calls[column]:9.0f}" for column in COLUMNS)
            + f" {sum(calls.values()):7.0f} {figure(sync_total(result), '6.1f'):>6}"
            + f" {figure(sync_total(result, 'plugin'), '6.1f'):>6}"
        )
    print(
        f"{'precision':<9} {'implementation':<20} {'optimizer':<12} {'updates':>7} {'tok/s':>9} {'MFU':>6} "
        f"{'busy':>6} {'peak MB':>8} {'model MB':>8} {'wall ms':>8} {'fwd+bwd':>8} {'optim':>7} {'idle ms':>8}"
    )
    for (precision, implementation, optimizer), result in results.items():
        device, wall = result["device_ms"], result["wall_ms"]
        host = result["host_ranges"]
        print(
            f"{precision:<9} {implementation:<20} {optimizer:<12} {result['updates']:7d} "
            f"{result['tokens_per_s']:9.0f} {percent(result['mfu']):>6} "
            f"{percent(None if device is None else device / wall):>6} {figure(result['peak_mb'], '8.1f'):>8} "
            f"{figure(result['model_mb'], '8.1f'):>8} "
            f"{wall:8.1f} {host['fwd+bwd']:8.1f} {host['grads'] + host['optimizer']:7.1f} "
            f"{figure(None if device is None else wall - device, '8.1f'):>8}"
            + (f"  ({result['epochs_ended']} epoch end(s) in the timed window)" if result["epochs_ended"] else "")
        )
    for precision in spec.precisions:
        reference = results.get((precision, *REFERENCE))
        ours = results.get((precision, "vaswani_transformer", spec.recipes_optimizer))
        if reference is None or ours is None:
            continue
        total = sum(ours["calls"].values()) / sum(reference["calls"].values())
        forward_backward = ours["calls"]["fwd+bwd"] / reference["calls"]["fwd+bwd"]
        print(
            f"ratio {precision} vaswani_transformer+{spec.recipes_optimizer} / transformer+adam: "
            f"{cpu_headline(ours['rounds'], reference['rounds'])}"
            f"kernel-like calls {total:.2f}, in forward and backward {forward_backward:.2f}, "
            f"host ms {ours['host_ms'] / reference['host_ms']:.2f}; the plugin's own syncs "
            f"{figure(sync_total(ours, 'plugin'), '.0f')}"
        )
    for (precision, implementation, optimizer), result in results.items():
        if result["model_mb"] is not None and result["peak_mb"]:
            print(
                f"memory model {precision} {implementation} {optimizer}: {result['model_mb']:.2f} MB for the "
                f"measured peak's {result['peak_mb']:.2f} MB, ratio {result['model_mb'] / result['peak_mb']:.2f}"
            )
    if spec.operators:
        print(f"the {spec.operators} most frequent kernel-like calls per update:")
        for (precision, implementation, optimizer), result in results.items():
            common = sorted(result["operators"].items(), key=lambda item: -item[1])[: spec.operators]
            print(
                f"  {precision} {implementation} {optimizer}: "
                + ", ".join(f"{name} ({phase}) {count:g}" for (phase, name), count in common)
            )
    print("syncs per update, by the frame that made them:")
    for (precision, implementation, optimizer), result in results.items():
        if result["syncs"] is None:
            print(f"  {precision} {implementation} {optimizer}: not counted under --compile-layers (-)")
            continue
        for (name, site), count in sorted(result["syncs"].items(), key=lambda item: item[0][1]):
            print(f"  {precision} {implementation} {optimizer}: {count:g} x {name} in {site}")
    report_kinds(results, spec)
    report_frames(results, spec)
    report_rounds(results, spec)


def cpu_headline(ours, theirs) -> str:
    """The headline ratio on a CPU: the median over the interleaved rounds of process CPU ms ('' without rounds)."""
    if not ours:
        return ""
    median, low, high, ratios = round_ratios(ours, theirs)
    return f"process CPU ms {median:.2f} (median of {len(ratios)} interleaved rounds, {low:.2f}-{high:.2f}), "


def report_kinds(results, spec):
    where = (
        "the device time of the kernels each aten call launched; those none launched in other"
        if spec.device == "cuda"
        else "each aten call's own CPU time"
    )
    print(f"kernel time by kind, ms per update of the {spec.profiled} profiled ({where}):")
    for (precision, implementation, optimizer), result in results.items():
        total, (wall, cpu) = result["kernel_ms"], result["profiled_ms"]
        print(
            f"  {precision} {implementation} {optimizer}: {total:.2f} ms, the matrix products at "
            f"{figure(result['tflops'], '.3f')} TFLOP/s; the updates profiled: {wall:.1f} ms wall, {cpu:.1f} ms "
            "process CPU"
        )
        for kind in KINDS:
            spent = result["kinds"].get(kind, 0.0)
            line = f"    {kind:<32} {spent:9.2f} {percent(spent / total if total else None):>6}"
            held = sorted(((ms, name) for (which, name), ms in result["kind_calls"].items() if which == kind))[::-1]
            if kind == "other" and held:  # what it holds, largest first
                line += "  (" + ", ".join(f"{name} {ms:.2f}" for ms, name in held[:3]) + ")"
            print(line)


def report_frames(results, spec):
    print(
        f"host ms per update by Python frame, {spec.profiled} more update(s) under cProfile (Trainer.train_step, "
        "its overhead in them): each area's Python, and the C calls made from it (torch's operators: on a CPU their "
        "arithmetic); other packages' Python (omegaconf, the standard library) counted to the areas calling it"
    )
    for (precision, implementation, optimizer), result in results.items():
        areas = result["areas"]
        print(f"  {precision} {implementation} {optimizer}: {sum(areas.values()):.2f} ms")
        for name in AREAS:
            python, native = areas.get((name, "python"), 0.0), areas.get((name, "C"), 0.0)
            if python or native:
                print(f"    {name:<22} {python:8.2f} {native:8.2f}")
        for package, count in (("vaswani_plugin/", 10), ("fairseq/", 5)):
            functions = result["functions"].items()
            own = sorted(((mine, whole, name) for name, (mine, whole) in functions if name.startswith(package)))[::-1]
            if own:
                print(f"    {package[:-1]}'s functions by own ms (with what they call):")
                for mine, whole, name in own[:count]:
                    print(f"      {mine:7.2f} {whole:8.2f}  {name}")


def report_rounds(results, spec):
    if not any(result["rounds"] for result in results.values()):
        return
    print(
        f"interleaved: {spec.rounds} rounds, the configurations in turn, every other round in reverse; process CPU "
        "ms per update by round, and wall ms:"
    )
    for (precision, implementation, optimizer), result in results.items():
        cpu, wall = zip(*result["rounds"])
        print(
            f"  {precision} {implementation} {optimizer}: {' '.join(f'{ms:.1f}' for ms in cpu)} "
            f"(median {statistics.median(cpu):.1f}); wall {' '.join(f'{ms:.1f}' for ms in wall)} "
            f"(median {statistics.median(wall):.1f})"
        )
    for precision in spec.precisions:
        for optimizer in spec.optimizers:
            # the plugin against fairseq's transformer with adam; torch's F.dropout in the plugin against its own draw
            for ours, theirs in (
                (("vaswani_transformer", optimizer), REFERENCE),
                ((TORCH_DROPOUT, optimizer), ("vaswani_transformer", optimizer)),
            ):
                if (precision, *ours) not in results or (precision, *theirs) not in results:
                    continue
                cpu, wall = (
                    round_ratios(results[precision, *ours]["rounds"], results[precision, *theirs]["rounds"], which)
                    for which in (0, 1)
                )
                print(
                    f"  ratio {precision} {'+'.join(ours)} / {'+'.join(theirs)} by round, process CPU ms "
                    f"{' '.join(f'{ratio:.2f}' for ratio in cpu[3])}: median {cpu[0]:.2f} ({cpu[1]:.2f}-{cpu[2]:.2f}); "
                    f"wall ms median {wall[0]:.2f} ({wall[1]:.2f}-{wall[2]:.2f})"
                )
