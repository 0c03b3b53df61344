"""Configuration errors reported as one line on the command line instead of a deep traceback."""

import sys


class VaswaniConfigError(ValueError):
    """A bad combination of options; the message says what to change."""


def install_error_hook():
    """Print an uncaught VaswaniConfigError as `vaswani_plugin: error: ...`; leave every other exception alone.

    fairseq's command-line tools build the model inside their main(); without this hook a wrong option
    ends in a 30-line traceback. Library callers still get an ordinary exception they can catch.
    """
    previous_hook = sys.excepthook
    if getattr(previous_hook, "_vaswani_plugin", False):
        return

    def hook(exc_type, exc, tb):
        if issubclass(exc_type, VaswaniConfigError):
            print(f"vaswani_plugin: error: {exc}", file=sys.stderr)
        else:
            previous_hook(exc_type, exc, tb)

    hook._vaswani_plugin = True
    sys.excepthook = hook
