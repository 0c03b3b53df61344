"""The one way every `python -m vaswani_plugin.*` command reports a user's mistake: one line, exit status 1."""

import argparse
import sys
from typing import Callable, Optional, Sequence

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
