"""Writes that survive a node's crash, in one place: checkpoints, stage records, prepared data.

A file is written to a temporary next to it (.NAME.<pid>.<random>.tmp), flushed and fsynced, renamed over NAME
(os.replace: atomic on POSIX), then its folder is fsynced, which puts the rename itself on disk. Killed, or the node
lost, at any instant, NAME holds the old content or the new one, whole; a temporary left behind is never read (each
write takes a new name; checkpoints/resume.py removes checkpoint_last.pt's). `durable=False` keeps the rename and
leaves out both fsyncs: for what a crash need not keep (a watchdog's heartbeat, a launch's decision).

Files another program wrote (fairseq-preprocess' data-bin) are made durable with `sync` before a record claims them
(prepare/steps.py's run_steps, prepare/records.py's finish). A leaf: the standard library only, so that prepare/
and recipes/ import it without fairseq or torch.
"""

import errno
import os
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, List

# A folder's fsync that the file system does not offer (some network and FUSE ones): nothing more can be done there.
UNSUPPORTED = (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF)


def temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")


def temporaries(path) -> List[Path]:
    """The temporaries of writes to `path` that never finished (a process killed before its rename)."""
    path = Path(path)
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


def sync_folder(folder) -> None:
    """fsync of the folder: a rename, creation or removal in it is on disk once this returns."""
    descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in UNSUPPORTED:
            raise
    finally:
        os.close(descriptor)


def sync_file(path) -> None:
    """fsync of a file that is already written (by this process or another)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def replace_durably(temporary, path) -> None:
    """A complete file `temporary` made `path`: fsync, rename over `path`, fsync of the folder."""
    sync_file(temporary)
    os.replace(temporary, path)
    sync_folder(Path(path).parent)


def write_atomically(path, write: Callable[[BinaryIO], None], durable: bool = True, mode: int = 0o666) -> None:
    """write(file) into a temporary next to `path` (its permissions `mode` less the umask), then renamed over
    `path`; `durable`: fsynced before the rename and its folder after (see the module's docstring). A write that
    raises leaves `path` as it was and no temporary."""
    path = Path(path)
    temporary = temporary_name(path)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(descriptor, "wb") as file:
            write(file)
            if durable:
                file.flush()
                os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if durable:
        sync_folder(path.parent)


def write_text(path, text: str, durable: bool = True) -> None:
    """`text` (UTF-8) as the file at `path`, written as write_atomically writes."""
    write_atomically(path, lambda file: file.write(text.encode("utf-8")), durable)


def sync(paths: Iterable) -> None:
    """Every file and folder at or under `paths` fsynced, and the folder holding each path: what another program
    wrote is on disk before a record says it is there. Paths that do not exist are left out; a file with nothing
    unwritten costs little."""
    folders = set()
    for path in map(Path, paths):
        if not path.exists():
            continue
        folders.add(path.resolve().parent)
        if path.is_dir():
            for root, _, files in os.walk(path):
                for name in files:
                    if not os.path.islink(os.path.join(root, name)):
                        sync_file(os.path.join(root, name))
                folders.add(Path(root).resolve())
        else:
            sync_file(path)
    for folder in sorted(folders, key=lambda folder: -len(folder.parts)):  # the deepest first, their parents after
        sync_folder(folder)
