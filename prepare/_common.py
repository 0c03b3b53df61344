"""Helpers shared by the prepare steps: one-line errors, logging, line-safe file I/O, parallel line mapping."""

import argparse
import hashlib
import os
import sys
from collections import deque
from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, TextIO

from vaswani_plugin import errors as _errors

# A mistake the user can fix (missing file, bad option, failed download): the plugin's one family of user errors
# (vaswani_plugin/errors.py), under prepare/'s name for it.
PrepareError = _errors.VaswaniConfigError
INTERRUPTED = "interrupted; run the same command again to continue"


def log(message: str) -> None:
    """Progress and notes go to stderr, so that stdout stays free for data (and the orchestrator's result)."""
    print(message, file=sys.stderr, flush=True)


def run_cli(main: Callable[[Optional[Sequence[str]]], None], argv: Optional[Sequence[str]] = None) -> None:
    """Run a step's main() through the plugin's reporter (vaswani_plugin.errors.run_reported): a user's mistake or
    an OSError is `prepare: error: ...` and exit status 1, Ctrl-C 130, never a traceback."""
    _errors.run_reported("prepare", lambda: main(argv), INTERRUPTED)


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad option is `prepare: error: ...` (exit 1) like every other user mistake."""

    def error(self, message):
        print(_errors.error_line("prepare", f"{message} (see {self.prog} --help)"), file=sys.stderr, flush=True)
        sys.exit(1)


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


# Every file here is UTF-8 with "\n" line ends. Python's default universal-newline mode would also split
# at "\r" (and str.splitlines at \x0b, \x0c, \x1c-\x1e, \x85, \u2028, \u2029), which would silently shift
# one side of a parallel corpus against the other; prepare.extract replaces those characters by spaces and
# every reader below splits at "\n" only.
LINE_BREAKING = dict.fromkeys(map(ord, "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), " ")


def open_read(path) -> TextIO:
    if str(path) == "-":
        return open(sys.stdin.fileno(), encoding="utf-8", newline="\n", closefd=False)
    path = Path(path)
    if not path.is_file():
        raise PrepareError(f"{path} does not exist")
    return open(path, encoding="utf-8", newline="\n")


def open_write(path) -> TextIO:
    if str(path) == "-":
        return open(sys.stdout.fileno(), "w", encoding="utf-8", newline="\n", closefd=False)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return open(path, "w", encoding="utf-8", newline="\n")


def display(path) -> str:
    return "stdin" if str(path) == "-" else str(path)


def file_digest(path, algorithm: str = "sha256") -> str:
    """The hex digest of a file, read in 1 MiB blocks (a WMT archive is gigabytes)."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def count_lines(path) -> int:
    count = 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            count += block.count(b"\n")
    return count


class Progress:
    """Prints `label: N lines` every `every` lines and once at the end."""

    def __init__(self, label: str, every: int = 200_000):
        self.label, self.every, self.count, self._next = label, every, 0, every

    def add(self, lines: int) -> None:
        self.count += lines
        if self.count >= self._next:
            log(f"  {self.label}: {self.count:,} lines")
            self._next = (self.count // self.every + 1) * self.every

    def done(self) -> int:
        log(f"  {self.label}: {self.count:,} lines, done")
        return self.count


def _chunks(lines: Iterable[str], size: int) -> Iterator[List[str]]:
    chunk = []
    for line in lines:
        chunk.append(line.rstrip("\n"))
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


_WORKER_FUNCTION = None


def _init_worker(factory, args):
    global _WORKER_FUNCTION
    _WORKER_FUNCTION = factory(*args)


def _work(chunk: List[str]) -> List[str]:
    return [_WORKER_FUNCTION(line) for line in chunk]


# Below this input size a process pool costs more (start-up, building a tokeniser per worker) than it saves.
PARALLEL_MIN_BYTES = 256 * 1024


def map_lines(
    factory: Callable,
    args: tuple,
    source,
    target,
    workers: int = 1,
    label: Optional[str] = None,
    chunk_lines: int = 2000,
) -> int:
    """Write factory(*args)(line) for every line of `source` to `target` (paths, "-" for stdin/stdout), in
    order, on `workers` processes. factory must be importable (module level). Returns the number of lines."""
    if workers > 1 and str(source) != "-" and Path(source).stat().st_size < PARALLEL_MIN_BYTES:
        workers = 1
    progress = Progress(label or display(source))
    with open_read(source) as lines, open_write(target) as out:
        if workers <= 1:
            function = factory(*args)
            for chunk in _chunks(lines, chunk_lines):
                out.writelines(function(line) + "\n" for line in chunk)
                progress.add(len(chunk))
        else:
            import multiprocessing  # here: the stage records (prepare.records) import this module in milliseconds

            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else None)
            with context.Pool(workers, initializer=_init_worker, initargs=(factory, args)) as pool:
                pending = deque()  # bounded, so that a 36M-line file is never read into memory at once

                def write_oldest():
                    results = pending.popleft().get()
                    out.writelines(line + "\n" for line in results)
                    progress.add(len(results))

                for chunk in _chunks(lines, chunk_lines):
                    pending.append(pool.apply_async(_work, (chunk,)))
                    if len(pending) >= 4 * workers:
                        write_oldest()
                while pending:
                    write_oldest()
    return progress.done()
