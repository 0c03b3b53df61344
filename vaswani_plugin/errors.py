"""Errors a user can make, reported as one line on the command line instead of a deep traceback."""

import os
import sys
import traceback
from typing import Optional


class VaswaniConfigError(ValueError):
    """A user's mistake (a bad combination of options, a malformed input file); the message says what to change."""


class MissingExtra(VaswaniConfigError, ImportError):
    """An optional package is not installed: an ImportError to code that imports the module needing it, one line
    (install_error_hook) from a `python -m` command."""


CTRANSLATE2_MISSING = 'this needs the package ctranslate2: pip install -e ".[ctranslate2]" (or pip install ctranslate2)'


def unreadable_checkpoint_message(exc: BaseException) -> Optional[str]:
    """The one line for an exception raised while fairseq's checkpoint_utils.load_checkpoint_to_cpu read a file
    that is no intact torch checkpoint (cut short, empty, another format), naming the file; None otherwise.

    The file is read from that function's frame; whether it is unreadable is decided by looking at the file
    (and at errors of torch's zip reader), so torch's refusal of a class in an intact checkpoint, or any other
    error, keeps its traceback and explanation.
    """
    # Imported here: checkpoint_loading imports this module.
    from vaswani_plugin.checkpoints.storage import checkpoint_problem

    for frame, _ in traceback.walk_tb(exc.__traceback__):
        if frame.f_globals.get("__name__") == "fairseq.checkpoint_utils" and \
                frame.f_code.co_name == "load_checkpoint_to_cpu":
            path = frame.f_locals["path"]
            problem = checkpoint_problem(frame.f_locals.get("local_path", path), exc)
            if problem is None:
                return None
            hint = ""
            if os.path.basename(path) == "checkpoint_last.pt":  # fairseq-train resuming
                hint = (f"; `python -m vaswani_plugin.checkpoints.resume {os.path.dirname(path) or '.'}` "
                        "resumes from the newest intact checkpoint there")
            return f"{path}: {problem}{hint}"
    return None


def install_error_hook():
    """Print an uncaught VaswaniConfigError, or a checkpoint file fairseq could not read, as
    `vaswani_plugin: error: ...`; leave every other exception alone.

    fairseq's command-line tools build the model inside their main(); without this hook a wrong option
    ends in a 30-line traceback. Library callers still get an ordinary exception they can catch.
    """
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
