"""A training run that stops before its target, in one line and one marker. Divergence: a non-finite loss or
gradient, or fp16's and amp's minimum loss scale, on which fairseq raises FloatingPointError (after writing crash.pt
and re-running the step under its NaN detector, whose own failure may follow). The plugin's error hook (cli.py,
given these by training/progress_meter.py) prints `vaswani_plugin: error: training diverged at update N ...` instead
of the tracebacks, and rank 0 writes SAVE_DIR/stopped.json, which the recipes' engine (recipes/stages.py) keeps in
the stage's record, so that a re-run with nothing changed refuses rather than diverging again. A full disk (or a
file-size limit) while saving: one line naming the folder, the free space there and the checkpoint a re-run
resumes from, instead of the traceback of torch's zip writer. A leaf: the recipes read its marker without fairseq."""

import errno
import logging
import shutil
import sys
from pathlib import Path
from typing import Callable, Optional, Tuple

MARKER = "stopped.json"
ADVICE = (
    "try a lower learning rate (eq. 3's --factor, or --lr), --amp or BF16=1 rather than --fp16, or a longer warm-up "
    "(--warmup-updates)"
)


FULL = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}  # no space left, a file-size limit (ulimit -f), a quota


def in_chain(error: Optional[BaseException], matches: Callable[[BaseException], bool]) -> Optional[BaseException]:
    """The first exception of `error`'s chain (what it was raised from, or while handling) that `matches`."""
    seen = set()
    while error is not None and id(error) not in seen:
        if matches(error):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def divergence(error: BaseException) -> Optional[FloatingPointError]:
    """fairseq's FloatingPointError in the chain of `error` (the NaN detector's re-run may have failed after it)."""
    return in_chain(error, lambda cause: isinstance(cause, FloatingPointError))


def full_disk(error: BaseException) -> Optional[OSError]:
    """A write that found no room, in the chain of `error` (torch's zip writer raises RuntimeError from it)."""
    return in_chain(error, lambda cause: isinstance(cause, OSError) and cause.errno in FULL)


Run = Optional[Tuple[str, int, int]]  # a watched fairseq-train's (save_dir, update being trained, rank)


def diverged(error: BaseException, run: Run, last_checkpoint: Callable[[Path], str]) -> Optional[str]:
    """None unless training diverged; else the line, the marker written on rank 0."""
    cause = divergence(error)
    if cause is None:
        return None
    if run is None:  # not a fairseq-train of the plugin's task
        return f"training diverged ({str(cause).splitlines()[0]}); {ADVICE}"
    save_dir, update, rank = run
    line = (
        f"training diverged at update {update:,} ({str(cause).splitlines()[0]}); the last intact checkpoint: "
        f"{last_checkpoint(Path(save_dir))}; {ADVICE}"
    )
    if rank == 0:
        write_marker(Path(save_dir), {"reason": "diverged", "update": update, "line": line})
    return line


def no_room(error: BaseException, run: Run, last_checkpoint: Callable[[Path], str]) -> Optional[str]:
    """None unless a write found no room; else the line. fairseq saves through a temporary file renamed when
    complete, so the checkpoints written before are intact; the cut-off temporary is removed."""
    cause = full_disk(error)
    if cause is None:
        return None
    folder = Path(cause.filename).parent if cause.filename else Path(run[0] if run else ".")
    for partial in folder.glob("*.pt.tmp"):  # fairseq's temporary of the save that failed
        partial.unlink(missing_ok=True)
    free = shutil.disk_usage(folder).free if folder.is_dir() else 0
    resumes = f"; a re-run resumes from {last_checkpoint(folder)}" if run else ""
    return (
        f"writing in {folder.resolve()} failed: {cause.strerror} ({free / 2**30:,.1f} GiB free there; a file-size "
        f"limit, `ulimit -f`, gives the same error){resumes}; make room and run the same command again"
    )


class _FullDiskTraceback(logging.Filter):
    """fairseq logs the traceback of a save that failed before raising it again; the error hook's line says it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno >= logging.ERROR and full_disk(sys.exc_info()[1]) is not None)


def quiet_full_disk_tracebacks() -> None:
    logger = logging.getLogger("fairseq.checkpoint_utils")
    if not any(isinstance(existing, _FullDiskTraceback) for existing in logger.filters):
        logger.addFilter(_FullDiskTraceback())


def write_marker(save_dir: Path, marker: dict) -> None:
    """SAVE_DIR/MARKER, written as the stage records are (the recipes read it with them). Imported here, in
    fairseq-train, so that the recipes load this module alone."""
    from vaswani_plugin.stage_records import write

    write(save_dir / MARKER, marker)
