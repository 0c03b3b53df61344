"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a fairseq plugin.

Importing the package imports no fairseq and registers nothing, so that scoring, averaging or reading a
checkpoint's bookkeeping start without fairseq's import (3 s). Two ways register its components:

- fairseq's ``--user-dir``: fairseq imports the package, then every module of its tasks/ and models/ folders
  (fairseq.utils.import_user_module); the task's module imports the criterion, optimizer and scheduler and sets up
  fairseq (fairseq_setup.py).
- ``vaswani_plugin.register()``, for a library user, and the package's commands that use fairseq's registries.

Either way: the architecture family ``vaswani_transformer``, the LR scheduler ``noam``, the optimizer
``vaswani_adam``, the criterion ``vaswani_label_smoothed_cross_entropy`` and the task ``vaswani_translation`` (GNMT
length penalty) registered with fairseq, fairseq's checkpoint classes allow-listed for torch's safe
(``weights_only``) loading, fairseq-train's checkpoints written durably (each fsynced before its rename, its folder
after: vaswani_plugin/durable.py) and fairseq's commands' one-line error hook installed.
"""

from vaswani_plugin.errors import VaswaniConfigError


def register():
    """Register the plugin's components with fairseq and set fairseq up as --user-dir does (fairseq_setup.py);
    a second call does nothing new."""
    try:
        import fairseq  # noqa: F401
    except ImportError as error:
        raise ImportError(
            "vaswani_plugin needs fairseq, which is not importable here "
            f"({error}). Install it with `pip install 'vaswani_plugin[fairseq]'` "
            "(ve-fairseq 0.12.3, for Python 3.11 and 3.12)."
        ) from None
    from vaswani_plugin.criterions import vaswani_label_smoothed_cross_entropy  # noqa: F401
    from vaswani_plugin.fairseq_setup import set_up_fairseq
    from vaswani_plugin.lr_scheduler import noam  # noqa: F401
    from vaswani_plugin.models import vaswani_transformer  # noqa: F401  (registers the model and archs)
    from vaswani_plugin.optim import vaswani_adam  # noqa: F401  (registers the optimizer)
    from vaswani_plugin.tasks import vaswani_translation  # noqa: F401  (registers the task)

    set_up_fairseq()


def quiet_fairseq_import():
    """fairseq's import logs "Please install tensorboardX" (its text_to_speech task, loaded with every task) in every
    command; the plugin's commands leave it out. fairseq-train says what matters where TensorBoard is asked for
    (--tensorboard-logdir without tensorboard or tensorboardX installed)."""
    import logging

    logging.getLogger("fairseq.tasks.text_to_speech").addFilter(
        lambda record: not record.getMessage().startswith("Please install tensorboardX")
    )


quiet_fairseq_import()  # before any of the package's modules imports fairseq (the logging module only)

__all__ = ["VaswaniConfigError", "register"]
