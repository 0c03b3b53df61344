"""Safe checkpoint loading, durable writes (fairseq-train's too), recognising a checkpoint file that is cut short or
no checkpoint, and what fairseq-train kept in one: the update count it resumes from, its training time.

torch >= 2.6 loads with weights_only=True; exactly the classes fairseq checkpoints hold besides tensors are
allow-listed (tests/test_checkpoint_loading.py): argparse.Namespace (cfg["model"] of argparse-style
architectures) and numpy's array reconstruction, ndarray and dtypes (--eval-bleu's metrics). A missing, empty,
cut-short or foreign file is a one-line UnreadableCheckpoint naming it, not torch's traceback.
"""

import argparse
import os
import re
import shutil
import stat
import zipfile
from pathlib import Path
from typing import Callable, Optional, Tuple

import numpy
import torch
from torch.torch_version import TorchVersion

from vaswani_plugin.durable import write_atomically
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.fairseq_internals import checkpoint_being_read, replace_checkpoint_writes

# torch.save writes a zip archive; torch < 1.6 wrote a pickle stream that begins with torch's magic number
# (pickle's LONG1 opcode, 10 bytes, little-endian).
ZIP_SIGNATURE = b"PK\x03\x04"
LEGACY_SIGNATURE = b"\x8a\x0a" + torch.serialization.MAGIC_NUMBER.to_bytes(10, "little")


def fairseq_checkpoint_globals():
    multiarray = numpy._core.multiarray if hasattr(numpy, "_core") else numpy.core.multiarray
    return [
        argparse.Namespace,
        multiarray._reconstruct,
        # Checkpoints written under numpy 1.x name the same function by its old module.
        (multiarray._reconstruct, "numpy.core.multiarray._reconstruct"),
        numpy.ndarray,
        numpy.dtype,
        type(numpy.dtype(numpy.int64)),
    ]


def allow_fairseq_checkpoint_classes():
    """Add fairseq's checkpoint classes to torch's weights_only allow-list (torch >= 2.6 loads safely by default)."""
    if TorchVersion(torch.__version__) >= (2, 6):
        torch.serialization.add_safe_globals(fairseq_checkpoint_globals())


class UnreadableCheckpoint(VaswaniConfigError):
    """A checkpoint file that torch cannot read: missing, empty, cut short, damaged, or not a torch file."""


def checkpoint_problem(path, error: Optional[BaseException] = None) -> Optional[str]:
    """Why the file at `path` is no intact torch checkpoint, or None.

    Reads its first bytes and, for a zip archive, its central directory, the last thing written: a write or
    copy cut short lacks it. `error`, raised while loading the file, counts when torch's zip reader raised it
    (an archive damaged inside); any other error (torch's refusal of a class, say) is not about the file.
    """
    path = Path(path)
    if not path.is_file():
        return "no such file"
    with open(path, "rb") as file:
        head = file.read(32)
    if not head:
        return "an empty file, not a checkpoint"
    if head.startswith(ZIP_SIGNATURE):
        if not zipfile.is_zipfile(path):
            return "cut short: torch's zip archive without its end (a write or copy that was interrupted)"
        if isinstance(error, RuntimeError) and "PytorchStreamReader" in str(error):
            return f"a damaged torch archive ({str(error).split('. ')[0]})"
        return None
    if head.startswith(b"\x80") and LEGACY_SIGNATURE in head:
        return None
    return "not a torch checkpoint (neither torch's zip format nor its legacy one)"


def load_checkpoint(path, load: Optional[Callable] = None):
    """The checkpoint at `path` on CPU, loaded safely (weights_only); UnreadableCheckpoint, one line naming the
    file, when it is missing, empty, cut short, damaged or no torch file.

    Memory-mapped: tensors are read when used, so reading a checkpoint's bookkeeping (update count, training
    time) costs no time even for the big model with Adam's state. `load`: read the file with this function
    instead (fairseq's checkpoint_utils.load_checkpoint_to_cpu, which upgrades old checkpoints). torch's
    refusal of a class (safe loading, "Weights only load failed") is not caught: its message says what to do.
    """
    problem = checkpoint_problem(path)
    if problem is None:
        allow_fairseq_checkpoint_classes()
        try:
            if load is not None:
                return load(str(path))
            return torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
        except RuntimeError as error:
            problem = checkpoint_problem(path, error)
            if problem is None:
                raise
    raise UnreadableCheckpoint(f"{path}: {problem}")


def stored_config(state: dict) -> dict:
    """A checkpoint's fairseq configuration as a plain dict (a DictConfig when another fairseq version wrote it)."""
    cfg = state["cfg"]
    if not isinstance(cfg, dict):
        from omegaconf import OmegaConf

        cfg = OmegaConf.to_container(cfg, resolve=True)
    return cfg


def unreadable_checkpoint_message(exc: BaseException) -> Optional[str]:
    """The one line for an exception raised while fairseq's checkpoint_utils.load_checkpoint_to_cpu read a file
    that is no intact torch checkpoint, naming the file; None otherwise (any other error keeps its traceback).
    Which file: fairseq_internals.checkpoint_being_read."""
    being_read = checkpoint_being_read(exc)
    if being_read is None:
        return None
    path, local_path = being_read
    problem = checkpoint_problem(local_path, exc)
    if problem is None:
        return None
    hint = ""
    if os.path.basename(path) == "checkpoint_last.pt":  # fairseq-train resuming
        hint = (
            f"; `python -m vaswani_plugin.checkpoints.resume {os.path.dirname(path) or '.'}` "
            "resumes from the newest intact checkpoint there"
        )
    return f"{path}: {problem}{hint}"


def save_atomically(state: dict, output) -> None:
    """torch.save to a temporary file next to `output`, fsynced, then renamed (durable.write_atomically): the old
    checkpoint or the new one, whole, whenever the writer is killed or its node lost."""
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    write_atomically(output, lambda file: torch.save(state, file))


def copy_atomically(source, target) -> None:
    """Copy `source` over `target` as durable.write_atomically writes, with the source's mode."""

    def copy(file):
        with open(source, "rb") as original:
            shutil.copyfileobj(original, file)
        os.fchmod(file.fileno(), stat.S_IMODE(os.stat(source).st_mode))

    write_atomically(target, copy)


def durable_fairseq_checkpoints() -> None:
    """fairseq-train's checkpoints written as the plugin writes its own: checkpoint_N.pt and the copies fairseq
    makes of it (checkpoint_last.pt, checkpoint_best.pt) each through a temporary, fsynced, renamed, the folder
    fsynced (fairseq_internals.replace_checkpoint_writes). Called by fairseq_setup.set_up_fairseq."""
    replace_checkpoint_writes(save_atomically, copy_atomically)


# -- which checkpoint of a folder training resumes from ------------------------------------------------------
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


def seconds_of(state: dict, checkpoint: str) -> float:
    """The training time fairseq-train stored in a checkpoint's state (all runs of a resumed training together)."""
    try:
        return float(state["extra_state"]["previous_training_time"])
    except (KeyError, TypeError):
        raise VaswaniConfigError(
            f"{checkpoint}: no training time in it (extra_state.previous_training_time); "
            "not a checkpoint written by fairseq-train"
        ) from None


def training_seconds(checkpoint: str) -> float:
    """The training time fairseq-train stored in the checkpoint (all runs of a resumed training together)."""
    return seconds_of(load_checkpoint(checkpoint), checkpoint)


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


def last_intact_checkpoint(save_dir: Path) -> str:
    """The checkpoint a re-run resumes from, named with its update; or that there is none."""
    last = Path(save_dir) / "checkpoint_last.pt"
    updates = training_updates(last) if last.exists() else None
    found = (updates, last) if updates is not None else newest_training_checkpoint(Path(save_dir))
    if found is None:
        return f"none in {save_dir} (a re-run starts from the beginning)"
    return f"{found[1]} (update {found[0]:,})"
