"""The recipes' stage records, WORK_DIR/.stages/STAGE.json, read and written in one place: prepare/records.py (what
a stage ran with; and the preparations' step stamps, prepare/steps.py), recipes/stages.py (whether it runs again),
tools/run_report.py (the report's commands) and training/stopping.py (the marker of how a training stopped) all go
through it. Written durably (vaswani_plugin/durable.py): a record that says a stage finished is on disk. A leaf of
the package, as durable.py is, the one module it imports: prepare/ and recipes/ import it without fairseq or torch."""

import json
from pathlib import Path
from typing import List, Optional

from vaswani_plugin.durable import write_text


def record_path(work_dir: Path, stage: str) -> Path:
    return Path(work_dir) / ".stages" / f"{stage}.json"


def read(path: Path) -> Optional[dict]:
    """The record at `path`; None if there is none or it is damaged (a stage killed while writing it)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write(path: Path, record: dict) -> None:
    """Write `record` to `path` atomically and durably: a reader, or a re-run after a crash, sees the old record or
    the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(record, indent=1) + "\n")


def stage_records(work_dir: Path) -> List[dict]:
    """Every stage's record in WORK_DIR, in the order the stages started (damaged ones and the data's left out)."""
    found = [read(path) for path in sorted((Path(work_dir) / ".stages").glob("*.json"))]
    return sorted((r for r in found if r and "plan" in r), key=lambda record: record.get("started") or "")
