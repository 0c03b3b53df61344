"""A preparation's steps and which of them run (prepare/wmt14.py, prepare/multi30k.py, prepare/wsj_parsing.py): the
one rule of docs/recipes.md's "Resuming, and stopping after a stage" for prepare/'s steps. The recipe's stages are
decided in recipes/stages.py, which runs a preparation as `python -m prepare.MODULE`; its steps are decided here.

A step's stamp, STAMPS/NAME.json (prepare/records.py's `read` and `write`), holds the settings it ran with and its
result, written once its outputs and `writes` are on disk (vaswani_plugin.durable.sync): after a crash, a step
either has its stamp and its files or runs again."""

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from vaswani_plugin import durable

from . import records
from ._common import log


@dataclass
class Step:
    """A step of a preparation (the module docstring says what its stamp holds, and when it is written)."""

    name: str
    title: str
    params: dict  # the settings it runs with: another value runs it again
    inputs: List[Path]  # files of earlier steps' outputs that it reads
    outputs: List[Path]
    run: Callable[[], dict]  # its result, kept in its stamp
    writes: List[Path] = field(default_factory=list)  # folders it writes besides `outputs` (those it does not check)


@dataclass(frozen=True)
class StepDecision:
    """skip, run, or rerun (`detail`: why: its settings changed, or its output is gone)."""

    action: str
    detail: str = ""


def step_decisions(steps: List[Step], stamps: List[Optional[dict]]) -> List[StepDecision]:
    """The first step whose stamp is missing, damaged or of other settings runs, and every step after it (their
    results are stale); so does an earlier step whose outputs a step from there on reads and that are gone
    (intermediate files may be deleted once used), and the last step when its outputs are gone. The others skip."""
    stale = (i for i, (step, stamp) in enumerate(zip(steps, stamps)) if (stamp or {}).get("params") != step.params)
    first = next(stale, len(steps))
    if first == len(steps) and steps and not all(path.exists() for path in steps[-1].outputs):
        first = len(steps) - 1
    while True:
        gone = [
            index
            for step in steps[first:]
            for path in step.inputs
            for index in range(first)
            if path in steps[index].outputs and not path.exists()
        ]
        if not gone:
            break
        first = gone[0]
    decisions = []
    for index, (step, stamp) in enumerate(zip(steps, stamps)):
        if index < first:
            decisions.append(StepDecision("skip"))
        elif index == first and stamp is not None:
            changed = stamp.get("params") != step.params
            decisions.append(StepDecision("rerun", "settings changed" if changed else "its output is gone"))
        else:
            decisions.append(StepDecision("run"))
    return decisions


def stamp_path(stamps: Path, step: Step) -> Path:
    return stamps / f"{step.name}.json"


def run_steps(steps: List[Step], stamps: Path, results: Dict[str, dict]) -> Dict[str, dict]:
    """Each step as step_decisions says, its result into `results` (which later steps' `run` may read)."""
    found = [records.read(stamp_path(stamps, step)) for step in steps]  # None for a damaged stamp: run it again
    decisions = step_decisions(steps, found)
    for step, decision in zip(steps, decisions):  # a step that runs makes every later result stale
        if decision.action != "skip":
            stamp_path(stamps, step).unlink(missing_ok=True)
    for index, (step, previous, decision) in enumerate(zip(steps, found, decisions)):
        header = f"[{index + 1}/{len(steps)}] {step.name}: {step.title}"
        if decision.action == "skip":
            log(f"{header}: done before, skipping (stamp {stamp_path(stamps, step)})")
            results[step.name] = previous.get("result", {})
            continue
        log(f"{header}: {decision.detail}, running it again" if decision.action == "rerun" else header)
        started = time.monotonic()
        results[step.name] = step.run()
        durable.sync([*step.outputs, *step.writes])  # on disk before the stamp says so, whatever wrote them
        records.write(stamp_path(stamps, step), {"params": step.params, "result": results[step.name]})
        log(f"  {step.name} finished in {time.monotonic() - started:.1f} s")
    return results
