"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a fairseq plugin.

Importing this package (``--user-dir``) runs register(): the architecture family ``vaswani_transformer``, the LR
scheduler ``noam``, the optimizer ``vaswani_adam``, the criterion ``vaswani_label_smoothed_cross_entropy`` and the
task ``vaswani_translation`` (GNMT length penalty) registered with fairseq, fairseq's checkpoint classes
allow-listed for torch's safe (``weights_only``) loading, and fairseq-train's checkpoints written durably (each
fsynced before its rename, its folder after: vaswani_plugin/durable.py). ``python -m vaswani_plugin.COMMAND``
leaves that to the commands that use fairseq.
"""

import sys

# The leaves prepare/ may have loaded by their paths first (prepare._common.plugin_leaf): bound here as the
# package's attributes, which such a load leaves unset.
from vaswani_plugin import durable, errors, paper  # noqa: F401
from vaswani_plugin.errors import VaswaniConfigError


def register():
    """Register the plugin's components with fairseq, allow-list fairseq's checkpoint classes, make fairseq-train's
    checkpoint writes durable and install the one-line error hook of fairseq's commands; a second call does nothing
    new."""
    try:
        import fairseq  # noqa: F401
    except ImportError as error:
        raise ImportError(
            "vaswani_plugin needs fairseq, which is not importable here "
            f"({error}). Install it with `pip install 'vaswani_plugin[fairseq]'` "
            "(ve-fairseq 0.12.3, for Python 3.11 and 3.12)."
        ) from None
    from vaswani_plugin.checkpoints.storage import allow_fairseq_checkpoint_classes, durable_fairseq_checkpoints
    from vaswani_plugin.cli import install_error_hook

    install_error_hook()
    allow_fairseq_checkpoint_classes()
    durable_fairseq_checkpoints()
    from vaswani_plugin.criterions import vaswani_label_smoothed_cross_entropy  # noqa: F401
    from vaswani_plugin.lr_scheduler import noam  # noqa: F401
    from vaswani_plugin.models import vaswani_transformer  # noqa: F401  (registers the model and archs)
    from vaswani_plugin.optim import vaswani_adam  # noqa: F401  (registers the optimizer)
    from vaswani_plugin.tasks import vaswani_translation  # noqa: F401  (registers the task)


def quiet_fairseq_import():
    """fairseq's import logs "Please install tensorboardX" (its text_to_speech task, loaded with every task) in every
    command; the plugin's commands leave it out. fairseq-train says what matters where TensorBoard is asked for
    (--tensorboard-logdir without tensorboard or tensorboardX installed)."""
    import logging

    logging.getLogger("fairseq.tasks.text_to_speech").addFilter(
        lambda record: not record.getMessage().startswith("Please install tensorboardX")
    )


def locating_a_command(argv, orig_argv) -> bool:
    """Whether `python -m vaswani_plugin.COMMAND` is importing this package to find COMMAND: sys.argv[0] is "-m"
    until it is found (Python's documentation of -m), and sys.orig_argv names the module."""
    if list(argv[:1]) != ["-m"]:
        return False
    for index, word in enumerate(orig_argv[1:], 1):
        if word.startswith("-m"):
            module = word[2:] or (orig_argv[index + 1] if index + 1 < len(orig_argv) else "")
            return module.split(".")[0] == __name__
    return False


quiet_fairseq_import()  # before any of the package's modules imports fairseq
# Then the commands that need fairseq call register(), and scoring, averaging or reading a checkpoint's bookkeeping
# start without fairseq's import (3 s); any other importer, `python -m` of another package included, registers.
if not locating_a_command(getattr(sys, "argv", []), getattr(sys, "orig_argv", [])):
    register()

__all__ = ["VaswaniConfigError", "register"]
