"""The steps of a preparation (prepare/wmt14.py and prepare/multi30k.py, prepare/wsj_parsing.py) and the one rule of
which of them run. A step's stamp (STAMPS/NAME.json) holds the settings it ran with and its result. The first step
whose stamp is missing, damaged or of other settings runs, and every step after it (their results are stale); so
does an earlier step whose outputs a step from there on reads and that are gone (intermediate files may be deleted
once used). The others are skipped, their results read from their stamps."""

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

from . import records
from ._common import log


@dataclass
class Step:
    name: str
    title: str
    params: dict  # the settings it runs with: another value runs it again
    inputs: List[Path]  # files of earlier steps' outputs that it reads
    outputs: List[Path]
    run: Callable[[], dict]  # its result, kept in its stamp


def first_to_run(steps: List[Step], stamps: List[Optional[dict]]) -> int:
    """The index of the first step that runs (len(steps): none)."""
    stale = (i for i, (step, stamp) in enumerate(zip(steps, stamps)) if (stamp or {}).get("params") != step.params)
    first = next(stale, len(steps))
    if first == len(steps) and steps and not all(path.exists() for path in steps[-1].outputs):
        first = len(steps) - 1
    changed = True
    while changed:
        changed = False
        for step in steps[first:]:
            for path in step.inputs:
                producer = next((i for i in range(first) if path in steps[i].outputs), None)
                if producer is not None and not path.exists():
                    first, changed = producer, True
                    break
            if changed:
                break
    return first


def stamp_path(stamps: Path, step: Step) -> Path:
    return stamps / f"{step.name}.json"


def run(steps: List[Step], stamps: Path, results: Dict[str, dict]) -> Dict[str, dict]:
    """Run what first_to_run says, each step's result into `results` (which later steps' `run` may read)."""
    found = [records.read(stamp_path(stamps, step)) for step in steps]  # None for a damaged stamp: run it again
    first = first_to_run(steps, found)
    for step in steps[first:]:  # a step that runs makes every later result stale
        stamp_path(stamps, step).unlink(missing_ok=True)
    for index, (step, previous) in enumerate(zip(steps, found)):
        header = f"[{index + 1}/{len(steps)}] {step.name}: {step.title}"
        if index < first:
            log(f"{header}: done before, skipping (stamp {stamp_path(stamps, step)})")
            results[step.name] = previous.get("result", {})
            continue
        if index == first and previous is not None:
            reason = "settings changed" if previous.get("params") != step.params else "its output is gone"
            log(f"{header}: {reason}, running it again")
        else:
            log(header)
        started = time.monotonic()
        results[step.name] = step.run()
        records.write(stamp_path(stamps, step), {"params": step.params, "result": results[step.name]})
        log(f"  {step.name} finished in {time.monotonic() - started:.1f} s")
    return results
