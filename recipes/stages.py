"""A recipe's stages and whether each runs: the one engine of docs/recipes.md, "Re-running a recipe".

    python -m recipes.stages begin NAME [--output PATH]... < PLAN
        the decision, as one line on stdout: skip ..., run, rerun; or the refusal as the recipe's one-line error
        (exit 1). Sets the outputs aside and starts the record as it says.
    python -m recipes.stages finish NAME                       the stage's command ended well: its record says so
    python -m recipes.stages prepare MODULE [--raw PATH]... [NAME=VALUE]... -- ARGS...
        the data's stage: its gate and record around prepare.MODULE ARGS (its steps: prepare/steps.py)

A stage is a value (`Stage`): its name, its plan (the commands it runs, as DRY_RUN=1 prints them), the stage before
it, its outputs, the files it reads and, for training, its checkpoints' folder. `decide` turns the stage's record
(prepare/records.py) and, for training, fairseq's parsed configuration against the newest checkpoint's
(vaswani_plugin/checkpoints/resume.py's plan_decision) into a `Decision`. Run 0 of a job decides training and the
data and publishes WORK_DIR/.stages/NAME.decision for this launch; the job's other runs follow it. The training
stage is recipes/training.py's, in process.

The run's place comes from the environment recipes/common.sh exports: RECIPE, WORK_DIR, DATA_DIR, STAGES (the
recipe's stages, in order), RESTART_FROM, DRY_RUN, ASIDE (where outputs go), RUN_RANK, RUN_NAME, LAUNCH_ID, WORKERS,
DECISION_WAIT, PYTHON. Imports neither torch nor fairseq, but to compare a training command with its checkpoints.
"""

import argparse
import contextlib
import importlib
import io
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional

from prepare import records
from vaswani_plugin import durable
from vaswani_plugin import errors as ERRORS
from vaswani_plugin.training import stopping as STOPPING  # how fairseq-train says it stopped short (a divergence)

StageError = ERRORS.VaswaniConfigError  # the recipe stops with `RECIPE: error: LINE`


def env(name: str, default: str = "") -> str:
    return os.environ.get(name) or default


def say(message: str) -> None:
    print(f"[{env('RECIPE')} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Run:
    """This run of the recipe: its place in its job, its folders and what the user asked of the re-run."""

    work_dir: Path
    stages: List[str] = field(default_factory=list)
    restart_from: str = ""
    dry_run: bool = False
    aside: Optional[Path] = None
    rank: int = 0
    name: str = "node 0"
    launch_id: str = ""
    workers: int = 1
    wait_seconds: int = 1800

    @classmethod
    def from_environment(cls) -> "Run":
        work_dir = Path(env("WORK_DIR", "."))
        return cls(
            work_dir=work_dir,
            stages=env("STAGES").split(),
            restart_from=env("RESTART_FROM"),
            dry_run=env("DRY_RUN", "0") == "1",
            aside=Path(env("ASIDE")) if env("ASIDE") else work_dir / "previous" / time.strftime("%Y%m%d-%H%M%S"),
            rank=int(env("RUN_RANK", "0")),
            name=env("RUN_NAME", "node 0"),
            launch_id=env("LAUNCH_ID"),
            workers=int(env("WORKERS", "1")),
            wait_seconds=int(env("DECISION_WAIT", "1800")),
        )

    def restarting(self, stage: str) -> bool:
        """RESTART_FROM names this stage or one before it: its outputs go aside and it runs again."""
        if not self.restart_from:
            return False
        if stage not in self.stages:
            return self.restart_from == stage
        return self.restart_from in self.stages[: self.stages.index(stage) + 1]

    @property
    def writes(self) -> bool:
        """Only run 0 writes the records and moves outputs; a dry run writes nothing."""
        return self.rank == 0 and not self.dry_run


@dataclass(frozen=True)
class Stage:
    name: str
    plan: str  # the commands it runs, as DRY_RUN=1 prints them
    after: Optional[str] = None  # the stage before it, whose record it ran after
    outputs: List[Path] = field(default_factory=list)
    inputs: List[Path] = field(default_factory=list)  # files it reads, recorded by identity (training: dictionaries)
    save_dir: Optional[Path] = None  # a training stage's checkpoints


@dataclass(frozen=True)
class Decision:
    """skip, run, rerun (its previous outputs aside first), resume (from `detail`: an update, or "(interrupted
    before)") or refuse (`detail`: the line saying why)."""

    action: str
    detail: str = ""

    def line(self) -> str:
        return f"{self.action} {self.detail}".strip()

    @classmethod
    def parse(cls, line: str) -> "Decision":
        action, _, detail = line.strip().partition(" ")
        if action not in ("skip", "run", "rerun", "resume", "refuse"):
            raise StageError(f"internal: {line!r} is not a stage decision")
        return cls(action, detail)

    @property
    def from_update(self) -> Optional[int]:
        return int(self.detail) if self.action == "resume" and self.detail.isdigit() else None


def previous(run: Run, name: str, after: Optional[str] = None) -> Optional[str]:
    """The stage whose record this one runs after: `after` when given ("" for none), else the recipe's stage before
    it (none after prepare, whose record is the data's)."""
    if after is not None:
        return after or None
    index = run.stages.index(name) if name in run.stages else 0
    return run.stages[index - 1] if index > 0 and run.stages[index - 1] != "prepare" else None


def diverged(stopped: Optional[str]) -> bool:
    """A record's `stopped` says a divergence (a signal's stop goes on as an interruption)."""
    return bool(stopped) and stopped.startswith("diverged")


def has_checkpoints(save_dir: Path) -> bool:
    return any(Path(save_dir).glob("checkpoint*.pt"))


def decide(
    stage: Stage, state: str, restarting: bool, resume_plan: Callable[[], str], stopped: Optional[str] = None
) -> Decision:
    """The re-run table's rows. `state`: prepare.records.check's word for the stage's record; `resume_plan`: for a
    training stage with checkpoints, plan_decision's answer (run, resume N, finished, refuse LINE); `stopped`: how
    its record says the stage stopped (diverged at update N)."""
    if restarting:
        return Decision("run")
    if state == "same":
        return Decision("skip")
    if stage.save_dir is None:
        return Decision("rerun" if state == "changed" else "run")
    if state == "interrupted" and diverged(stopped):  # the same settings would diverge again, checkpoints or none
        return Decision("refuse", f"training {stopped} with these very settings; change one: {STOPPING.ADVICE}")
    if not has_checkpoints(stage.save_dir):
        return Decision("run")  # nothing to compare with
    if state.startswith("inputs-changed"):
        return Decision("refuse", f"{state.split(' ', 1)[1]}, but {stage.save_dir} holds its checkpoints")
    if state == "interrupted":  # killed while training with this very command: it goes on
        return Decision("resume", "(interrupted before)")
    answer = resume_plan()
    if answer == "finished":
        return Decision("skip", "(its checkpoints reached the target)")
    return Decision.parse(answer)


@contextlib.contextmanager
def checkpoint_notes(stage: Stage, doing: str):
    """vaswani_plugin.checkpoints.resume, its notes (a cut-off checkpoint_last.pt repaired) said on stderr and kept
    in the stage's train.log; an error of it is the recipe's one line, `cannot DOING (ERROR)`."""
    resume = importlib.import_module("vaswani_plugin.checkpoints.resume")  # fairseq's parser and checkpoints
    notes = io.StringIO()
    try:
        with contextlib.redirect_stderr(notes), contextlib.redirect_stdout(notes):
            yield resume
    except (Exception, SystemExit) as error:
        sys.stderr.write(notes.getvalue())
        raise StageError(f"cannot {doing} ({error})") from None
    lines = [line for line in notes.getvalue().splitlines() if line.startswith(f"{resume.PROG}: ")]
    if lines:
        print("\n".join(lines), file=sys.stderr)
        with open(Path(stage.save_dir) / "train.log", "a", encoding="utf-8") as log:
            log.write("\n".join(lines) + "\n")


def training_plan_decision(stage: Stage, repair: bool, retuning: bool = False) -> str:
    """plan_decision of the stage's plan, in this process; `repair`: a cut-off checkpoint_last.pt made resumable
    first (run 0: fairseq's rank 0 reads it and sends it to the others); `retuning`: it diverged before, and its
    rate and warm-up may change."""
    with checkpoint_notes(stage, "compare the training command with its checkpoints") as resume:
        return resume.plan_decision(stage.plan, repair=repair, retuning=retuning)


# -- one decision for every run of a job ---------------------------------------------------------------------
def decision_path(run: Run, name: str) -> Path:
    return run.work_dir / ".stages" / f"{name}.decision"


def publish(run: Run, name: str, line: str) -> None:
    if run.dry_run or run.workers == 1:
        return
    path = decision_path(run, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    durable.write_text(path, f"{run.launch_id}\t{line}\n", durable=False)  # this launch's: a crash ends it


def follow(run: Run, name: str, poll: float = 1.0) -> str:
    """Run 0's line for this launch (another launch's is not this one's), waited for."""
    path, started = decision_path(run, name), time.monotonic()
    said = -60.0
    while True:
        with contextlib.suppress(OSError):
            launch, _, line = path.read_text(encoding="utf-8").rstrip("\n").partition("\t")
            if launch == run.launch_id:
                return line
        waited = time.monotonic() - started
        if waited >= run.wait_seconds:
            raise StageError(
                f"{run.name.split()[0]} 0 of this job ({run.launch_id}) decided nothing on stage {name} in "
                f"{run.wait_seconds} s"
            )
        if waited - said >= 60:
            say(f"{run.name}: waiting for {run.name.split()[0]} 0's decision on stage {name}")
            said = waited
        time.sleep(poll)


def agreed(run: Run, name: str, decide_here: Callable[[], str]) -> str:
    """Run 0 decides and publishes; every other run of the job follows, so that all skip, run or refuse alike."""
    if run.rank == 0 or run.dry_run:
        line = decide_here()
        publish(run, name, line)
        return line
    return follow(run, name)


# -- acting on a decision ------------------------------------------------------------------------------------
def set_aside(run: Run, paths) -> None:
    """Move each path that exists to ASIDE, at its place under WORK_DIR: nothing is deleted."""
    work_dir = run.work_dir.resolve()
    for path in map(Path, paths):
        if not path.exists():
            continue
        try:
            relative = path.resolve().relative_to(work_dir)
        except ValueError:
            raise StageError(f"internal: {path} is not in WORK_DIR") from None
        target = run.aside / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), str(target))


def refusal(name: str, why: str) -> StageError:
    return StageError(
        f"stage {name}: {why}. Nothing was changed; to go on, use a new WORK_DIR, or set RESTART_FROM={name} to move "
        "its outputs and every later stage's aside (to WORK_DIR/previous/) and run them again"
    )


def begin(run: Run, stage: Stage) -> Decision:
    """Decide the stage (run 0 for training, and the others follow), say so, and act: set aside, record."""
    restarting = run.restarting(stage.name)
    state, repaired = "new", False

    def decide_here() -> str:
        nonlocal state
        stopped = None
        if not restarting:
            state = records.check(run.work_dir, stage.name, stage.after, stage.plan, existing(stage.inputs))
            stopped = (records.read(records.record_path(run.work_dir, stage.name)) or {}).get("stopped")

        def plan() -> str:
            nonlocal repaired
            repaired = run.writes
            return training_plan_decision(stage, repair=run.writes, retuning=diverged(stopped))

        return decide(stage, state, restarting, plan, stopped).line()

    line = agreed(run, stage.name, decide_here) if stage.save_dir is not None else decide_here()
    decision = Decision.parse(line)
    if decision.action == "refuse":
        raise refusal(stage.name, decision.detail)
    if decision.action == "skip":
        say(f"stage {stage.name}: done before, skipped{' ' + decision.detail if decision.detail else ''}")
        if state in ("new", "interrupted") and stage.save_dir is not None and run.writes:
            record(run, stage, None)  # finished, but not recorded (killed in between, or trained before records)
            records.finish(run.work_dir, stage.name)
        return decision
    would, doing, why = "run", "starting", ""
    if restarting:
        why = f" (RESTART_FROM={run.restart_from}: its outputs moved to {run.aside})"
    if decision.action == "rerun":
        would, doing = "run again", "running again"
        why = f" (its plan or the stage before it changed; its outputs moved to {run.aside})"
    elif decision.action == "resume":
        would, doing = "resume", "resuming"
        if decision.from_update is None:
            why = " from its checkpoints (interrupted before)"
        else:
            why = f" from update {decision.from_update}"
    if run.dry_run:
        say(f"stage {stage.name}: would {would}{why}")
        return decision
    say(f"stage {stage.name}: {doing}{why}")
    if run.rank == 0:
        if restarting or decision.action == "rerun":
            set_aside(run, [*stage.outputs, records.record_path(run.work_dir, stage.name)])
        record(run, stage, decision.from_update)
        if stage.save_dir is not None:  # how an earlier run stopped is in its record, not this one's
            (Path(stage.save_dir) / STOPPING.MARKER).unlink(missing_ok=True)
        last = None if stage.save_dir is None else Path(stage.save_dir) / "checkpoint_last.pt"
        if last is not None and last.exists() and not repaired:  # an interrupted run's may be cut off
            with checkpoint_notes(stage, f"make {last} resumable") as resume:
                resume.resume(stage.save_dir)
    return decision


def record(run: Run, stage: Stage, started_from: Optional[int]) -> None:
    records.start(
        run.work_dir, stage.name, stage.after, stage.plan, existing(stage.inputs), started_from, stage.outputs
    )


def existing(paths) -> List[Path]:
    return [Path(path) for path in paths if Path(path).is_file()]


def stopped(run: Run, name: str, save_dir: Path, signal: Optional[str] = None) -> Optional[str]:
    """A training stage's command ended before its target: where fairseq-train left a marker (training/stopping.py), its
    record says how it stopped. A divergence is the recipe's one-line error saying what to do; a signal's stop
    (training/preemption.py) is returned, `stopped by SIGUSR1 at update N` (`signal`: the one this run received),
    and resumes when run again."""
    marker = records.read(Path(save_dir) / STOPPING.MARKER)
    if marker is None:
        return None
    if marker["reason"] == "signal":
        how = f"stopped by {signal or marker['signal']} at update {marker['update']:,}"
    else:
        how = f"{marker['reason']} at update {marker['update']:,}"
    if run.writes:
        path = records.record_path(run.work_dir, name)
        record = records.read(path)
        if record is not None:
            records.write(path, dict(record, stopped=how))
    if marker["reason"] == "signal":
        return how
    raise StageError(
        f"stage {name}: training {how}; change a setting and run the same command again ({STOPPING.ADVICE}), or set "
        f"RESTART_FROM={name} to train from the beginning"
    )


def finish(run: Run, name: str) -> None:
    if run.writes:
        records.finish(run.work_dir, name)
    say(f"stage {name}: finished")


def data_gate(run: Run, data_dir: Path, raw: List[Path], settings: dict) -> None:
    """Before the preparation: its settings and raw files against those the data was prepared with; refused once
    checkpoints trained on it exist; RESTART_FROM=prepare sets the data (inside WORK_DIR) aside first."""
    restarting = run.restarting("prepare")

    def decide_here() -> str:
        return records.data(data_dir, existing_raw(raw), settings, run.work_dir, restarting, False, run.dry_run)

    line = agreed(run, "prepare", decide_here)
    word, _, why = line.partition(" ")
    if word == "refuse":
        raise StageError(
            f"stage prepare: {why}. Nothing was changed; to go on, use a new WORK_DIR and DATA_DIR, or set "
            "RESTART_FROM=prepare (with DATA_DIR in WORK_DIR) to move the data, the checkpoints and every later "
            "output aside (to WORK_DIR/previous/) and run them again"
        )
    if word == "changed":
        say(f"stage prepare: {why}; no checkpoint was trained on the data: preparing it again")
    if not restarting:
        return
    if run.work_dir.resolve() not in Path(data_dir).resolve().parents:
        raise StageError(
            f"RESTART_FROM=prepare: DATA_DIR {data_dir} is outside WORK_DIR (other recipes may share it); give a "
            "new DATA_DIR instead"
        )
    say(f"stage prepare: RESTART_FROM=prepare: the data moved to {run.aside}")
    if run.writes:
        set_aside(run, [data_dir])


def existing_raw(raw: List[Path]) -> List[Path]:
    return [Path(path) for path in raw if Path(path).exists()]


# -- the data -------------------------------------------------------------------------------------------------
def setting_names(args: List[str]) -> Dict[str, str]:
    """A preparation's settings by the recipe's names: --bpe-merges 32000 as BPE_MERGES=32000."""
    settings, name = {}, None
    for word in args:
        if word.startswith("--"):
            name = word[2:].upper().replace("-", "_")
            settings[name] = ""
        elif name is not None:
            settings[name] += word
    return settings


def data_dir() -> str:
    """DATA_DIR (by default WORK_DIR/data), spelt as the shell spells it (the plans' words)."""
    return env("DATA_DIR") or env("WORK_DIR", ".") + "/data"


def prepare(run: Run, module: str, raw: List[Path], settings: Dict[str, str], args: List[str]) -> None:
    """The data's stage: its settings and raw files against the data's record (data_gate), prepare.MODULE run (its
    steps skip what they finished before: prepare/steps.py's run_steps), the record written. `raw` and `settings`
    default to RAW_DIR (given to the module as --raw-dir) or DATA_DIR/raw, and the module's arguments by the recipe's
    names."""
    data = data_dir()
    line = [env("PYTHON", sys.executable), "-m", f"prepare.{module}", "--work-dir", data, *args]
    if not raw:
        raw = [Path(env("RAW_DIR") or data + "/raw")]
        line += ["--raw-dir", env("RAW_DIR")] if env("RAW_DIR") else []
    settings = dict(settings or setting_names(args), EXTRA_PREPARE_ARGS=env("EXTRA_PREPARE_ARGS"))
    line += shlex.split(env("EXTRA_PREPARE_ARGS"))
    data_gate(run, Path(data), raw, settings)
    say(f"stage prepare: {' '.join(['python', *line[1:]])}")
    if run.dry_run:
        say("stage prepare: would run (it skips the steps it finished before, each by its settings)")
        print(shlex.join(line), flush=True)
        return
    status = subprocess.run(line).returncode
    if status:
        sys.exit(status)  # the preparation said why
    if run.writes:
        records.data(Path(data), existing_raw(raw), settings, run.work_dir, False, True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m recipes.stages", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["begin", "finish", "prepare"])
    parser.add_argument("name", help="the stage (prepare: the module of prepare/)")
    parser.add_argument("settings", nargs="*", help="prepare: NAME=VALUE, the preparation's settings")
    parser.add_argument("--output", type=Path, action="append", default=[], help="begin: a path it writes")
    parser.add_argument("--raw", type=Path, action="append", default=[], help="prepare: raw data, a folder or file")
    argv = sys.argv[1:] if argv is None else list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_intermixed_args(argv[:split])
    run = Run.from_environment()

    def command():
        if args.action == "begin":
            print(begin(run, Stage(args.name, sys.stdin.read(), previous(run, args.name), args.output)).line())
        elif args.action == "finish":
            finish(run, args.name)
        else:
            if any("=" not in pair for pair in args.settings):
                parser.error(f"prepare takes NAME=VALUE settings, not {args.settings}")
            settings = dict(pair.split("=", 1) for pair in args.settings)
            prepare(run, args.name, args.raw, settings, argv[split + 1 :])

    ERRORS.run_reported(env("RECIPE") or parser.prog, command)


if __name__ == "__main__":
    main()
