"""Training curves of one run or several side by side (the plugin against fairseq), from their progress records.

    python -m vaswani_plugin.tools.training_curves WORK_DIR [WORK_DIR ...] [--output-dir DIR]

Reads each run's rank-0 record (WORK_DIR/checkpoints/progress.jsonl, written while training by
training/progress_meter.py; a resumed run's pieces stitched in order) and draws updates.png and wall_clock.png:
training loss and nll, the learning rate (eq. 3), the gradient norm, the dev loss and the dev score (BLEU or F1),
against updates and against hours.
"""

import argparse
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from vaswani_plugin.cli import run_command
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.training.progress import DEV_SCORES, read_records, stitched

RECORDS = ("checkpoints/progress.jsonl", "progress.jsonl")
# (title, record kind, the record's keys drawn in that panel)
PANELS = (
    ("training loss (bits)", "train", ("loss", "nll_loss")),
    ("learning rate (eq. 3)", "train", ("lr",)),
    ("gradient norm", "train", ("gnorm",)),
    ("dev loss (bits)", "valid", ("loss", "nll_loss")),
    ("dev score", "valid", tuple(DEV_SCORES)),
)
NAMES = {**DEV_SCORES, "nll_loss": "nll"}  # the legends'
AXES = {"updates.png": ("update", "updates"), "wall_clock.png": ("hours", "wall-clock hours of training")}
Series = Dict[str, Tuple[List[float], List[float]]]


def records_of(run: Path) -> Path:
    """The record file of a run: the file itself, or the one its WORK_DIR (or checkpoints folder) holds."""
    if run.is_file():
        return run
    for relative in RECORDS:
        if (run / relative).is_file():
            return run / relative
    raise VaswaniConfigError(
        f"{run}: no progress record ({' or '.join(RECORDS)}); fairseq-train writes it with the plugin's task "
        "(--task vaswani_translation)"
    )


def labels(runs: Sequence[Path]) -> List[str]:
    """Each run's name: its folder's, or more of its path where two share it."""
    folders = [run.parent.parent if run.is_file() else run for run in runs]
    names = [folder.absolute().name or str(run) for folder, run in zip(folders, runs)]
    if len(set(names)) < len(names):
        names = ["/".join(folder.absolute().parts[-2:]) for folder in folders]
    return names


def series(records: List[dict]) -> Dict[str, Dict[str, Series]]:
    """{x axis: {panel title: {key: (x values, y values)}}} of one run's stitched records."""
    drawn: Dict[str, Dict[str, Series]] = {name: {} for name in AXES}
    for title, kind, keys in PANELS:
        points = [r for r in records if r.get("kind") == kind and r.get("subset", "valid") == "valid"]
        for picture, (axis, _) in AXES.items():
            panel = {}
            for key in keys:
                kept = [r for r in points if key in r]
                if kept:
                    x = [r["update"] if axis == "update" else r["seconds"] / 3600 for r in kept]
                    panel[key] = (x, [float(r[key]) for r in kept])
            if panel:
                drawn[picture][title] = panel
    return drawn


def summary(label: str, records: List[dict], color: str) -> str:
    """A run's lines beside its curves: its name and colour, updates and hours trained, its last dev score."""
    trained = [r for r in records if r.get("kind") in ("train", "epoch")]
    lines = [f"{label} ({color})"]
    if trained:
        lines.append(
            f"{max(r['update'] for r in trained):,} updates in {max(r['seconds'] for r in trained) / 3600:.2f} h"
        )
    scored = [r for r in records if r.get("kind") == "valid" and any(key in r for key in ("bleu", "f1"))]
    if scored:
        last = scored[-1]
        lines.append(
            f"dev at update {last['update']:,}: "
            + ", ".join(f"{name} {last[key]:.2f}" for key, name in DEV_SCORES.items() if key in last)
        )
    return "\n".join(lines)


def draw(runs: Dict[str, List[dict]], output_dir: Path, dpi: int = 80) -> Dict[str, Dict[str, Dict[str, Series]]]:
    """Draw the pictures of the runs (label: stitched records) into output_dir; return what each picture plots:
    {picture: {run: {panel: {key: (x, y)}}}}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    output_dir.mkdir(parents=True, exist_ok=True)
    plotted = {picture: {label: series(records)[picture] for label, records in runs.items()} for picture in AXES}
    for picture, (_, axis_title) in AXES.items():
        figure, axes = plt.subplots(2, 3, figsize=(13, 6.5))
        for axis, (title, _, _) in zip(axes.flat, PANELS):
            axis.set_title(title, fontsize=10)
            axis.set_xlabel(axis_title, fontsize=8)
            axis.tick_params(labelsize=8)
            for run_index, (label, panels) in enumerate(plotted[picture].items()):
                for key_index, (key, (x, y)) in enumerate(panels.get(title, {}).items()):
                    name = f"{label}: {NAMES.get(key, key)}" if len(runs) > 1 else NAMES.get(key, key)
                    axis.plot(
                        x,
                        y,
                        color=f"C{run_index}",
                        linestyle=("-", "--", ":")[key_index % 3],
                        marker="o" if len(x) < 30 else None,
                        markersize=3,
                        label=name,
                    )
            if title.startswith("learning rate"):
                axis.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
            if axis.lines:
                axis.legend(fontsize=7)
            else:
                axis.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=axis.transAxes)
        axes.flat[-1].axis("off")
        axes.flat[-1].text(
            0,
            0.5,
            "\n\n".join(summary(label, records, f"C{i}") for i, (label, records) in enumerate(runs.items())),
            fontsize=9,
            va="center",
            wrap=True,
        )
        figure.tight_layout()
        temporary = output_dir / f".{picture}.tmp"
        figure.savefig(temporary, dpi=dpi, format="png")
        temporary.replace(output_dir / picture)  # a report being read never shows half a picture
        plt.close(figure)
    return plotted


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="vaswani_plugin.tools.training_curves",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("runs", nargs="+", type=Path, help="WORK_DIRs (or their progress.jsonl files)")
    parser.add_argument("--output-dir", type=Path, help="where the PNGs go (default: the first run's curves/)")
    run_command(parser, curves_command, argv)


def curves_command(args):
    runs = {label: stitched(read_records(records_of(run))) for label, run in zip(labels(args.runs), args.runs)}
    output_dir = args.output_dir or (args.runs[0].parent.parent if args.runs[0].is_file() else args.runs[0]) / "curves"
    plotted = draw(runs, output_dir)
    for picture in plotted:
        print(output_dir / picture)


if __name__ == "__main__":
    main()
