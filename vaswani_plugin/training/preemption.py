"""A signal before a time limit, or a preemption, ends training after the next update (docs/recipes.md, "When
training stops early"). SLURM's `--signal=USR1@N` (or `B:USR1@N`, which the recipes pass on), a scheduler's SIGTERM
and Ctrl-C's SIGINT reach fairseq-train, where the handler only sets a flag. The task puts the flag in each
update's logging output (tasks/vaswani_translation.py's train_step), which fairseq sums over the ranks in the
all-reduce it makes anyway: on a sum above 0 every rank stops after that same update, and rank 0 saves
checkpoint_last.pt without validating first (training/progress_meter.py's stop_for_signal). The flag carries the
signal, WIDTH bits of the sum for each, so that every rank names the signals the job's ranks received. A leaf: the
recipes read EXIT_STATUS without fairseq."""

import signal
import sys
import threading
from pathlib import Path
from typing import List

SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
KEY = "stop_signal"  # the logging output's entry: flag() on each rank, summed over the ranks by fairseq
# Bits of the sum per signal of SIGNALS: they count the batches of the update whose rank had received it (one a rank
# and --update-freq step), fewer than 2**16 in all; the 48 bits are exact in the double of fairseq's all-reduce.
WIDTH = 16
EXIT_STATUS = 75  # sysexits.h's EX_TEMPFAIL: stopped early, run the same command again
_received = 0


def install() -> None:
    """Flag SIGNALS from now on, in fairseq-train's own process (`fairseq-train` or `python -m fairseq_cli.train`:
    not in a program that runs fairseq's training in its own, whose signals stay its own) and its main thread,
    where Python's handlers live."""
    main = getattr(sys.modules.get("__main__"), "__spec__", None)
    command = getattr(main, "name", None) == "fairseq_cli.train" or Path(sys.argv[0]).name == "fairseq-train"
    if command and threading.current_thread() is threading.main_thread():
        for number in SIGNALS:
            signal.signal(number, _flag)


def _flag(number, frame) -> None:
    global _received
    _received = _received or number


def received() -> int:
    """The first of SIGNALS this process received, or 0."""
    return _received


def flag() -> int:
    """This rank's entry of the logging output: the first signal it received, the i-th of SIGNALS, as 2**(WIDTH * i)
    (a count of 1 in that signal's bits); 0 for none."""
    return 1 << (WIDTH * SIGNALS.index(_received)) if _received else 0


def summed(total: float) -> List[int]:
    """The signals of SIGNALS that a rank received, from the sum of the ranks' flags (0: none)."""
    total = int(total)
    return [number for i, number in enumerate(SIGNALS) if (total >> (WIDTH * i)) & ((1 << WIDTH) - 1)]


def name(numbers) -> str:
    """`SIGUSR1`, or `SIGTERM and SIGUSR1` where the job's ranks received more than one (in the order of SIGNALS)."""
    return " and ".join(signal.Signals(number).name for number in numbers)
