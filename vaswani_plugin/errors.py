"""The one family of user errors, the plugin's and prepare/'s, and the one reporter of their commands.

A leaf (the standard library only): prepare/ and recipes/ import it without fairseq (the package's import has
none).
"""

import os
import sys
from typing import Callable


class VaswaniConfigError(ValueError):
    """A user's mistake (a bad combination of options, a malformed or missing input file, a failed download): the
    message says what to change. The family's root; prepare/ calls it PrepareError."""


class MissingExtra(VaswaniConfigError, ImportError):
    """An optional package is not installed: an ImportError to code that imports the module needing it, one line
    from a command."""


CTRANSLATE2_MISSING = 'this needs the package ctranslate2: pip install -e ".[ctranslate2]" (or pip install ctranslate2)'
TRANSFORMERS_MISSING = (
    'this needs the package transformers: pip install -e ".[huggingface]" (or pip install transformers)'
)
INTERRUPTED = "interrupted"


def error_line(prog: str, message) -> str:
    """How every command states a user's mistake: `PROG: error: MESSAGE`."""
    return f"{prog}: error: {message}"


def os_error_message(error: OSError) -> str:
    """An OSError (a missing or unwritable file, a full disk) as its words and the file it names."""
    where = f": {error.filename}" if getattr(error, "filename", None) else ""
    also = f" -> {error.filename2}" if where and getattr(error, "filename2", None) else ""
    return f"{error.strerror or error}{where}{also}"


def run_reported(prog: str, action: Callable[[], object], interrupted: str = INTERRUPTED) -> None:
    """Run action() as a command: a VaswaniConfigError or an OSError ends as one line, error_line(prog, ...), and
    exit status 1; a reader that closed the output (`... | head`) quietly with 1; Ctrl-C as `PROG: INTERRUPTED`
    and 130. Anything else is a bug and keeps its traceback."""
    try:
        action()
    except VaswaniConfigError as error:
        sys.exit(error_line(prog, error))
    except BrokenPipeError:
        try:  # stdout's flush at exit would fail again: send what is left to nowhere
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        finally:
            sys.exit(1)
    except OSError as error:
        sys.exit(error_line(prog, os_error_message(error)))
    except KeyboardInterrupt:
        print(f"{prog}: {interrupted}", file=sys.stderr, flush=True)
        sys.exit(130)
