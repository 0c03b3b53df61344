"""Stage records: what a stage of a recipe, or of a preparation, ran with, so that a re-run can tell what changed.

    python -m prepare.records check  WORK_DIR STAGE [--after STAGE] [--input FILE]... < PLAN
                                     same | changed | interrupted | new | inputs-changed LINE
    python -m prepare.records start  WORK_DIR STAGE [--after STAGE] [--input FILE]... [--started-from N] < PLAN
    python -m prepare.records finish WORK_DIR STAGE                          the stage finished
    python -m prepare.records data   DATA_DIR --recipe-dir WORK_DIR [--raw DIR]... [--restarting] [--write]
                                     [NAME=VALUE]...                 same | new | changed LINE | refuse LINE

A record, WORK_DIR/.stages/STAGE.json, holds the stage's plan (the commands it runs, as DRY_RUN=1 prints them,
WORK_DIR written as $WORK_DIR; compared word by word), the id of the record of the stage before it when it ran
(`after`), its own id, when it started and finished, the versions of the plugin, fairseq and torch, and the identity
of its inputs (--input: the data's dictionaries for training; and the update it started from), and the outputs it
writes (recipes/stages.py's), fsynced before `finish` records that it finished. An input that is not what the stage
read is `inputs-changed` and a line naming it. A stage whose plan, or whose previous stage's record, is not the one
it ran after has `changed`; its outputs go aside and it runs again (recipes/stages.py); one that started with the
same plan and never finished is `interrupted`. A version that changed is one warning line, never a
reason to run again.

`data` is the record of the data recipes train on, DATA_DIR/.stages/data.json: the preparation's settings
(NAME=VALUE, NAME being the recipe's variable), the identity of the raw files, each by its name, size and SHA-256,
not its path (a checksum is computed once per file size and modification time, cached beside it), and the
WORK_DIRs that train on it. It prints `same`, `new` (no record), `changed` and a line naming the first setting
that changed with its old and new values, or `refuse` and that line when a WORK_DIR that trains on the data
holds checkpoints (--restarting: but the recipe's own are being set aside); --write records the settings given.
prepare/steps.py's run_steps keeps the preparations' step stamps with `read` and `write` below.
"""

import argparse
import shlex
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, Iterable, Optional

from vaswani_plugin import durable
from vaswani_plugin import stage_records as _store

from ._common import file_digest

VERSIONED = ("vaswani-plugin", "ve-fairseq", "torch")


# -- one record file: vaswani_plugin/stage_records.py, the store's one home -------------------------------------
read, write, record_path = _store.read, _store.write, _store.record_path


def versions() -> Dict[str, str]:
    from importlib import metadata  # 15 ms, for the records that need it

    found = {}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def version_warning(record: dict, stage: str) -> Optional[str]:
    """One line naming what changed between the versions a stage ran with and today's, or None."""
    old = record.get("versions") or {}
    changed = [
        f"{name} {old[name]} -> {version}"
        for name, version in versions().items()
        if name in old and old[name] != version
    ]
    if not changed:
        return None
    return f"warning: {', '.join(changed)} since stage {stage} ran; going on with its outputs"


# -- recipe stages -------------------------------------------------------------------------------------------
def normalised(plan: str, work_dir: Path) -> str:
    return plan.replace(str(Path(work_dir).resolve()), "$WORK_DIR").strip()


def same_plan(recorded: Optional[str], plan: str) -> bool:
    """The same commands, word for word: quoted by bash's printf %q (records before recipes/training.py) or by
    Python's shlex, a plan reads the same."""
    try:
        return recorded is not None and shlex.split(recorded) == shlex.split(plan)
    except ValueError:  # not shell words: compared as text
        return recorded == plan


def after_id(work_dir: Path, previous: Optional[str]) -> Optional[str]:
    record = read(record_path(work_dir, previous)) if previous else None
    return record.get("id") if record else None


def identity(files: Iterable[Path]) -> Dict[str, list]:
    """{file name: [size, sha256]} of each file (small files: the dictionaries)."""
    return {Path(path).name: [Path(path).stat().st_size, file_digest(path)] for path in files}


def check(work_dir: Path, stage: str, previous: Optional[str], plan: str, inputs: Iterable[Path] = ()) -> str:
    record = read(record_path(work_dir, stage))
    if record is None:
        return "new"
    warning = version_warning(record, stage)
    if warning:
        print(warning, file=sys.stderr)
    for name, (size, digest) in identity(inputs).items():
        if name in record.get("inputs", {}) and record["inputs"][name] != [size, digest]:
            return f"inputs-changed the data's {name} is not the one stage {stage} read ({size:,} bytes now)"
    changed = not same_plan(record.get("plan"), normalised(plan, work_dir))
    changed = changed or record.get("after") != after_id(work_dir, previous)
    if changed:
        return "changed"
    return "same" if record.get("finished") else "interrupted"


def start(
    work_dir: Path,
    stage: str,
    previous: Optional[str],
    plan: str,
    inputs: Iterable[Path] = (),
    started_from: Optional[int] = None,
    outputs: Iterable[Path] = (),
) -> None:
    write(
        record_path(work_dir, stage),
        {
            "stage": stage,
            "plan": normalised(plan, work_dir),
            "after": after_id(work_dir, previous),
            "id": uuid.uuid4().hex,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "finished": None,
            "versions": versions(),
            "inputs": identity(inputs),
            "started_from": started_from,
            "outputs": [str(Path(output).resolve()) for output in outputs],
        },
    )


def finish(work_dir: Path, stage: str) -> None:
    """The stage's record says it finished, once the outputs its start named are on disk (a crash after this
    loses none of what the record claims)."""
    path = record_path(work_dir, stage)
    record = read(path)
    if record is None:
        raise SystemExit(f"prepare.records: error: stage {stage} has no record to finish ({path})")
    durable.sync(record.get("outputs") or [])
    record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write(path, record)


# -- the data a recipe trains on -----------------------------------------------------------------------------
def checksums(folders: Iterable[Path], cache_path: Path, keep: bool = True) -> Dict[str, list]:
    """{file name relative to its folder: [size, sha256]} of every file under the folders; `keep`: the new
    checksums are cached."""
    cache = read(cache_path) or {}
    found, computed = {}, False
    for folder in folders:
        folder = Path(folder)
        paths = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else [folder]
        for path in paths:
            info = path.stat()
            key = f"{path.resolve()}:{info.st_size}:{info.st_mtime_ns}"
            if key not in cache:
                cache[key], computed = file_digest(path), True
            name = str(path.relative_to(folder)) if folder.is_dir() else path.name
            found[name] = [info.st_size, cache[key]]
    if keep and computed:
        write(cache_path, cache)
    return found


def data_change(old: dict, new: dict) -> Optional[str]:
    """The first difference between two data records, as a line; raw files are compared where both have them."""
    for name, value in new["settings"].items():
        if name in old.get("settings", {}) and old["settings"][name] != value:
            return f"{name} changed from {old['settings'][name] or '(empty)'} to {value or '(empty)'}"
    for name, (size, digest) in new["raw"].items():
        if name in old.get("raw", {}) and old["raw"][name] != [size, digest]:
            return f"the raw file {name} changed ({old['raw'][name][0]:,} bytes before, {size:,} now)"
    return None


def has_checkpoints(work_dir: Path) -> bool:
    """Whether WORK_DIR holds checkpoints a recipe trained (those set aside under previous/ do not count)."""
    return any("previous" not in path.relative_to(work_dir).parts[:1] for path in Path(work_dir).rglob("*.pt"))


def data(
    data_dir: Path,
    raw: Iterable[Path],
    settings: Dict[str, str],
    work_dir: Path,
    restarting: bool,
    write_it: bool,
    dry_run: bool = False,
) -> str:
    path = record_path(data_dir, "data")
    old = read(path)
    new = {
        "settings": settings,
        "raw": checksums(raw, path.with_name("checksums.json"), keep=not dry_run),
        "versions": versions(),
        "trained_in": sorted({*(old or {}).get("trained_in", []), str(Path(work_dir).resolve())}),
    }
    if write_it:
        write(path, new)
        return "written"
    if old is None:
        return "new"
    change = data_change(old, new)
    if change is None:
        return "same"
    holders = [
        folder
        for folder in new["trained_in"]
        if Path(folder).is_dir()
        and has_checkpoints(Path(folder))
        and not (restarting and Path(folder) == Path(work_dir).resolve())
    ]
    if holders:
        return f"refuse {change}, but {holders[0]} holds checkpoints trained on the data in {Path(data_dir).resolve()}"
    return f"changed {change}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m prepare.records", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["check", "start", "finish", "data"])
    parser.add_argument("work_dir", type=Path)
    parser.add_argument("stage", nargs="?", help="check, start, finish: the stage")
    parser.add_argument("settings", nargs="*", help="data: NAME=VALUE, the preparation's settings")
    parser.add_argument("--after", default=None, help="the stage before it")
    parser.add_argument("--input", type=Path, action="append", default=[], help="check, start: a file it reads")
    parser.add_argument("--started-from", type=int, default=None, help="start: the update training resumes from")
    parser.add_argument("--raw", type=Path, action="append", default=[], help="data: a folder (or file) of raw data")
    parser.add_argument("--write", action="store_true", help="data: record these settings")
    parser.add_argument(
        "--recipe-dir",
        dest="work_dir_of_recipe",
        type=Path,
        default=Path.cwd(),
        help="data: the WORK_DIR of the recipe that trains on it",
    )
    parser.add_argument("--restarting", action="store_true", help="data: its checkpoints are set aside (RESTART_FROM)")
    parser.add_argument("--dry-run", action="store_true", help="data: write nothing, not even the checksums' cache")
    args = parser.parse_intermixed_args(argv)
    if args.action == "data":
        pairs = ([args.stage] if args.stage else []) + args.settings
        if any("=" not in pair for pair in pairs):
            parser.error(f"data takes NAME=VALUE settings, not {pairs}")
        print(
            data(
                args.work_dir,
                [path for path in args.raw if path.exists()],
                dict(pair.split("=", 1) for pair in pairs),
                args.work_dir_of_recipe,
                args.restarting,
                args.write,
                args.dry_run,
            )
        )
    elif args.action == "finish":
        finish(args.work_dir, args.stage)
    else:
        plan = sys.stdin.read()
        inputs = [path for path in args.input if path.is_file()]
        if args.action == "check":
            print(check(args.work_dir, args.stage, args.after, plan, inputs))
        else:
            start(args.work_dir, args.stage, args.after, plan, inputs, args.started_from)


if __name__ == "__main__":
    main()
