"""A training run that stops before its target, in one line and one marker. Divergence: a non-finite loss or
gradient, or fp16's and amp's minimum loss scale, on which fairseq raises FloatingPointError (after writing crash.pt
and re-running the step under its NaN detector, whose own failure may follow). The plugin's error hook (cli.py)
prints `vaswani_plugin: error: training diverged at update N ...` instead of the tracebacks, and rank 0 writes
SAVE_DIR/stopped.json, which the recipes' engine (recipes/stages.py) keeps in the stage's record, so that a re-run
with nothing changed refuses rather than diverging again."""

import json
import os
from pathlib import Path
from typing import Optional

MARKER = "stopped.json"
ADVICE = (
    "try a lower learning rate (eq. 3's --factor, or --lr), --amp or BF16=1 rather than --fp16, or a longer warm-up "
    "(--warmup-updates)"
)


def divergence(error: BaseException) -> Optional[FloatingPointError]:
    """fairseq's FloatingPointError in the chain of `error` (the NaN detector's re-run may have failed after it)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, FloatingPointError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def last_intact_checkpoint(save_dir: Path) -> str:
    """The checkpoint a re-run resumes from, named with its update; or that there is none."""
    from vaswani_plugin.checkpoints.resume import newest_training_checkpoint, training_updates

    last = Path(save_dir) / "checkpoint_last.pt"
    updates = training_updates(last) if last.exists() else None
    found = (updates, last) if updates is not None else newest_training_checkpoint(Path(save_dir))
    if found is None:
        return f"none in {save_dir} (a re-run starts from the beginning)"
    return f"{found[1]} (update {found[0]:,})"


def diverged(error: BaseException) -> Optional[str]:
    """For the error hook: None unless training diverged; else the line, the marker written on rank 0."""
    cause = divergence(error)
    if cause is None:
        return None
    from vaswani_plugin.tools import progress_meter

    run = progress_meter.current()
    if run is None:  # not a fairseq-train of the plugin's criterion or task
        return f"training diverged ({str(cause).splitlines()[0]}); {ADVICE}"
    save_dir, update, rank = run
    line = (
        f"training diverged at update {update:,} ({str(cause).splitlines()[0]}); the last intact checkpoint: "
        f"{last_intact_checkpoint(save_dir)}; {ADVICE}"
    )
    if rank == 0:
        write_marker(Path(save_dir), {"reason": "diverged", "update": update, "line": line})
    return line


def write_marker(save_dir: Path, marker: dict) -> None:
    save_dir.mkdir(parents=True, exist_ok=True)
    temporary = save_dir / f".{MARKER}.{os.getpid()}"
    temporary.write_text(json.dumps(marker) + "\n", encoding="utf-8")
    os.replace(temporary, save_dir / MARKER)


def read_marker(save_dir: Path) -> Optional[dict]:
    try:
        return json.loads((Path(save_dir) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
