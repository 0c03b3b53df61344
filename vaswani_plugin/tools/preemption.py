"""A signal before a time limit, or a preemption, ends training after the next update (docs/recipes.md, "When
training stops early"). SLURM's `--signal=USR1@N` (or `B:USR1@N`, which the recipes pass on) and a scheduler's
SIGTERM reach fairseq-train, where the handler only sets a flag. The criterion puts the flag in each update's
logging output, which fairseq sums over the ranks in the all-reduce it makes anyway: on a sum above 0 every rank
stops after that same update, and rank 0 saves checkpoint_last.pt without validating first
(tools/progress_meter.py's stop_for_signal). A leaf: the recipes read EXIT_STATUS without fairseq."""

import signal
import sys
import threading
from pathlib import Path

SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
KEY = "stop_signal"  # the logging output's entry: 1 on a rank that received one of SIGNALS
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


def name(number: int) -> str:
    return signal.Signals(number).name if number else "a signal to another rank"
