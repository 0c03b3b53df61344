"""The one place that reports a user's mistake on the command line, for fairseq's commands and the package's."""

import argparse
import sys
from typing import Callable, Optional, Sequence

from vaswani_plugin.checkpoints.storage import unreadable_checkpoint_message
from vaswani_plugin.errors import VaswaniConfigError


def run_command(parser: argparse.ArgumentParser, command: Callable[[argparse.Namespace], None],
                argv: Optional[Sequence[str]] = None) -> None:
    """Parse `argv` with `parser` and run `command(args)`. A VaswaniConfigError (bad options or input, an
    unreadable checkpoint) or an OSError (a missing or unwritable file) ends as `PROG: error: MESSAGE` on
    stderr instead of a traceback; anything else is a bug and keeps its traceback."""
    args = parser.parse_args(argv)
    try:
        command(args)
    except (VaswaniConfigError, OSError) as error:
        sys.exit(f"{parser.prog}: error: {error}")


def install_error_hook():
    """For fairseq's own commands: print an uncaught VaswaniConfigError, or a checkpoint file fairseq could not
    read, as `vaswani_plugin: error: ...`; leave every other exception alone (library callers can catch them)."""
    previous_hook = sys.excepthook
    if getattr(previous_hook, "_vaswani_plugin", False):
        return

    def hook(exc_type, exc, tb):
        message = str(exc) if issubclass(exc_type, VaswaniConfigError) else unreadable_checkpoint_message(exc)
        if message is not None:
            print(f"vaswani_plugin: error: {message}", file=sys.stderr)
        else:
            previous_hook(exc_type, exc, tb)

    hook._vaswani_plugin = True
    sys.excepthook = hook
