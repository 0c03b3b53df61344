"""A run's one-page report, WORK_DIR/report.md: the command and settings (the stage records), the machine, the
progress, the dev scores per checkpoint, the curves (drawn into WORK_DIR/curves/), the final scores, Table 2's
training-cost line and the attention pictures. The recipes write it at each checkpoint and at the end.

    python -m vaswani_plugin.tools.run_report WORK_DIR
"""

import argparse
import time
from pathlib import Path
from typing import List

from vaswani_plugin.cli import run_command
from vaswani_plugin.stage_records import stage_records
from vaswani_plugin.tools.training_curves import draw, records_of
from vaswani_plugin.training.progress import DEV_SCORES, duration, pieces, read_records, stitched

SCORES = ("*.bleu", "*.f1")  # the recipes' score outputs, beside the translations
COST = "training_cost.txt"  # the recipes' Table 2 line


def stage_lines(work_dir: Path) -> List[str]:
    """Each stage's record: when it ran and what it ran (its plan)."""
    lines = []
    records = stage_records(work_dir)
    for record in records:
        state = f"finished {record['finished']}" if record.get("finished") else "not finished"
        lines += [
            f"- **{record.get('stage')}**: started {record.get('started')}, {state}",
            "",
            "  ```",
            *[f"  {line}" for line in record["plan"].splitlines() if line.strip()],
            "  ```",
        ]
    versions = next((r.get("versions") for r in records if r.get("versions")), None)
    if versions:
        lines.append("- versions: " + ", ".join(f"{name} {version}" for name, version in versions.items()))
    return lines or ["(no stage records: a run outside the recipes)"]


def progress_lines(records: List[dict], raw: List[dict]) -> List[str]:
    starts = [r for r in raw if r.get("kind") == "start"]
    train = [r for r in records if r.get("kind") == "train"]
    lines = []
    if starts:
        lines.append(f"- machine: {starts[-1].get('machine')}; {starts[-1].get('workers', 1)} training process(es)")
    precision = [r["precision"] for r in raw if r.get("kind") == "precision"]
    if precision:
        lines.append(f"- precision: {precision[-1]}")
    lines.append(f"- pieces of training (starts, resumptions included): {len(pieces(raw))}")
    if train:
        last = train[-1]
        target = f" of {last['target_update']:,}" if last.get("target_update") else ""
        lines.append(
            f"- update {last['update']:,}{target} after {duration(last['seconds'])} of training; "
            f"training loss {last.get('loss', float('nan')):.3f}, lr {last.get('lr', float('nan')):.3g}"
        )
        if last.get("seconds_left") is not None:
            lines.append(f"- estimated time left at the last record: {duration(last['seconds_left'])}")
    valid = [r for r in records if r.get("kind") == "valid" and r.get("subset", "valid") == "valid"]
    validating = sum(r.get("validation_seconds", 0) for r in records if r.get("kind") == "valid")
    if validating and train:
        lines.append(
            f"- validating (dev loss and scores): {duration(validating)}, "
            f"{100 * validating / max(train[-1]['seconds'], 1e-9):.1f} % of the training time"
        )
    if valid:
        shown = [(key, name) for key, name in DEV_SCORES.items() if any(key in r for r in valid)]
        lines += [
            "",
            "| update | dev loss | " + " | ".join(name for _, name in shown) + " |",
            "|---:|---:|" + "---:|" * len(shown),
        ]
        for record in valid:
            scores = " | ".join(f"{record[key]:.2f}" if key in record else "" for key, _ in shown)
            lines.append(f"| {record['update']:,} | {record.get('loss', float('nan')):.3f} | {scores} |")
    return lines


def report(work_dir: Path) -> Path:
    """Write the curves and WORK_DIR/report.md; return the report's path."""
    source = records_of(work_dir)
    raw = read_records(source)
    records = stitched(raw)
    draw({work_dir.name: records}, work_dir / "curves")
    lines = [
        f"# Report: {work_dir.name}",
        "",
        f"Written {time.strftime('%Y-%m-%d %H:%M:%S %Z')} from "
        f"{source.relative_to(work_dir)}; refreshed at each checkpoint and at the end.",
        "",
        "## Command and settings",
        "",
        *stage_lines(work_dir),
        "",
        "## Machine and progress",
        "",
        *progress_lines(records, raw),
        "",
        "## Curves",
        "",
        "![against updates](curves/updates.png)",
        "",
        "![against wall-clock time](curves/wall_clock.png)",
    ]
    scores = sorted(path for pattern in SCORES for path in work_dir.glob(pattern))
    if scores:
        lines += ["", "## Final scores", ""]
        for path in scores:
            lines += [f"{path.name}:", "", "```", path.read_text(encoding="utf-8").strip(), "```", ""]
    if (work_dir / COST).is_file():
        lines += ["", "## Training cost (Table 2)", "", (work_dir / COST).read_text(encoding="utf-8").strip()]
    pictures = sorted((work_dir / "attention").glob("*_all_heads.png"))
    if pictures:
        lines += ["", "## Attention (Figures 3-5)", ""]
        lines += [f"![{path.stem}](attention/{path.name})" for path in pictures]
    path = work_dir / "report.md"
    temporary = path.with_suffix(".md.tmp")
    temporary.write_text("\n".join(lines) + "\n", encoding="utf-8")
    temporary.replace(path)  # a reader never sees half a report
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="vaswani_plugin.tools.run_report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("work_dir", type=Path, help="the recipe's WORK_DIR")
    run_command(parser, lambda args: print(report(args.work_dir)), argv)


if __name__ == "__main__":
    main()
