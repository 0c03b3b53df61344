"""Make SAVE_DIR/checkpoint_last.pt resumable again after a job was killed at any instant.

    python -m vaswani_plugin.checkpoints.resume SAVE_DIR

fairseq-train copies each checkpoint to checkpoint_last.pt with a plain copy, so a kill during it leaves the file
cut off. If it is unreadable, it is kept under a new name and the newest intact training checkpoint is copied
atomically in its place (with none, training starts afresh); this can itself be killed anywhere and run again.
Details: docs/reference.md#resuming-after-a-kill.
"""

import argparse
import os
import re
import shutil
import stat
import sys
import time
from pathlib import Path
from typing import Optional, Tuple

import vaswani_plugin  # noqa: F401  (allow-lists fairseq's checkpoint classes for weights_only loading)
from vaswani_plugin.cli import run_command
from vaswani_plugin.checkpoints.storage import UnreadableCheckpoint, load_checkpoint, write_atomically

PROG = "vaswani_plugin.checkpoints.resume"
INTERVAL_CHECKPOINT = re.compile(r"checkpoint_\d+_\d+\.pt")


def training_updates(path: Path) -> Optional[int]:
    """The update count fairseq-train would resume from with this checkpoint; None for an unreadable file or
    one that cannot resume training (an average: no optimizer state; not written by fairseq-train)."""
    try:
        state = load_checkpoint(path)
    except UnreadableCheckpoint:
        return None
    if not isinstance(state, dict) or state.get("last_optimizer_state") is None or not state.get("optimizer_history"):
        return None
    if "train_iterator" not in (state.get("extra_state") or {}):
        return None
    return state["optimizer_history"][-1].get("num_updates")


def newest_training_checkpoint(save_dir: Path) -> Optional[Tuple[int, Path]]:
    """(updates, path) of the intact training checkpoint with the most updates in save_dir, if any; of equals,
    the interval checkpoint (checkpoint_best.pt can hold the same state)."""
    found = []
    for path in save_dir.glob("checkpoint*.pt"):
        if path.name not in ("checkpoint_last.pt", "checkpoint_average.pt"):
            updates = training_updates(path)
            if updates is not None:
                found.append((updates, INTERVAL_CHECKPOINT.fullmatch(path.name) is not None, path))
    if not found:
        return None
    updates, _, path = max(found)
    return updates, path


def copy_atomically(source: Path, target: Path) -> None:
    """Copy `source` over `target` through a temporary file, flushed to disk, with the source's mode."""
    def copy(file):
        with open(source, "rb") as original:
            shutil.copyfileobj(original, file)
        file.flush()
        os.fsync(file.fileno())
        os.fchmod(file.fileno(), stat.S_IMODE(os.stat(source).st_mode))

    write_atomically(target, copy)


def keep(last: Path) -> Path:
    """A second name for the unreadable checkpoint_last.pt, dated by its modification time (when the job died)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(last.stat().st_mtime))
    kept = last.with_name(f"checkpoint_last.unreadable-{stamp}.pt")
    if not (kept.exists() and kept.samefile(last)):  # a run killed after this step linked it already
        try:
            os.link(last, kept)
        except OSError:  # a file system without hard links
            shutil.copyfile(last, kept)
    return kept


def resume(save_dir) -> None:
    """See the module docstring."""
    save_dir = Path(save_dir)
    last = save_dir / "checkpoint_last.pt"
    for stale in save_dir.glob(f".{last.name}.*.tmp"):  # copies of a run of this command that was killed
        stale.unlink()
    if not last.exists():
        return
    try:
        load_checkpoint(last)
        return
    except UnreadableCheckpoint as error:
        print(f"{PROG}: {error}; kept as {keep(last).name}", file=sys.stderr)
    newest = newest_training_checkpoint(save_dir)
    if newest is None:
        last.unlink()
        print(f"{PROG}: no intact training checkpoint in {save_dir}: training starts from the beginning")
        return
    updates, path = newest
    copy_atomically(path, last)
    print(f"{PROG}: resuming from {path.name} (update {updates}), copied to checkpoint_last.pt")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("save_dir", help="fairseq-train's --save-dir")
    run_command(parser, lambda args: resume(args.save_dir), argv)


if __name__ == "__main__":
    main()
