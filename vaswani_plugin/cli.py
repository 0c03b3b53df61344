"""A user's mistake in one line (vaswani_plugin.errors): the package's commands through run_command, fairseq's own
commands through install_error_hook (installed with the rest of fairseq's set-up: fairseq_setup.py)."""

import argparse
import sys
from typing import Callable, List, Optional, Sequence

from vaswani_plugin.errors import VaswaniConfigError, error_line, run_reported


def run_command(
    parser: argparse.ArgumentParser, command: Callable[[argparse.Namespace], None], argv: Optional[Sequence[str]] = None
) -> None:
    """Parse `argv` with `parser` and run `command(args)` through errors.run_reported: a VaswaniConfigError (bad
    options or input, an unreadable checkpoint) or an OSError (a missing or unwritable file) ends as
    `PROG: error: MESSAGE` and exit status 1, Ctrl-C as `PROG: interrupted` and 130, not as a traceback."""
    args = parser.parse_args(argv)
    run_reported(parser.prog, lambda: command(args))


# More exceptions the hook states in one line: each a function of the exception, its line or None (a checkpoint
# fairseq could not read: fairseq_setup.py adds it; a training's divergence, a save that found no room:
# training/progress_meter.py adds them while a training is watched).
EXPLAINERS: List[Callable[[BaseException], Optional[str]]] = []


def install_error_hook():
    """For fairseq's own commands: print an uncaught VaswaniConfigError, or what EXPLAINERS explain, as
    `vaswani_plugin: error: ...`; leave every other exception alone (library callers can catch them)."""
    previous_hook = sys.excepthook
    if getattr(previous_hook, "_vaswani_plugin", False):
        return

    def hook(exc_type, exc, tb):
        message = str(exc) if issubclass(exc_type, VaswaniConfigError) else None
        for explain in EXPLAINERS:
            message = message or explain(exc)
        if message is not None:
            print(error_line("vaswani_plugin", message), file=sys.stderr)
        else:
            previous_hook(exc_type, exc, tb)

    hook._vaswani_plugin = True
    sys.excepthook = hook
