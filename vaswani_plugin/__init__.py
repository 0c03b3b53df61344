"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a fairseq plugin.

Importing this package (``--user-dir``) registers the architecture family ``vaswani_transformer``, the LR
scheduler ``noam``, the criterion ``vaswani_label_smoothed_cross_entropy`` and the task
``vaswani_translation`` (GNMT length penalty), and allow-lists the classes
that fairseq checkpoints hold for torch's safe (``weights_only``) loading.
"""

try:
    import fairseq  # noqa: F401
except ImportError as error:
    raise ImportError(
        "vaswani_plugin needs fairseq, which is not importable here "
        f"({error}). Install it with `pip install 'vaswani_plugin[fairseq]'` "
        "(ve-fairseq 0.12.3, for Python 3.11 and 3.12)."
    ) from None

# The leaves prepare/ may have loaded by their paths first (prepare._common.plugin_leaf): bound here as the
# package's attributes, which such a load leaves unset.
from vaswani_plugin import errors, paper  # noqa: E402,F401
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.cli import install_error_hook
from vaswani_plugin.checkpoints.storage import allow_fairseq_checkpoint_classes

install_error_hook()
allow_fairseq_checkpoint_classes()

from vaswani_plugin.models import vaswani_transformer  # noqa: E402,F401  (registers the model and archs)
from vaswani_plugin.criterions import vaswani_label_smoothed_cross_entropy  # noqa: E402,F401
from vaswani_plugin.lr_scheduler import noam  # noqa: E402,F401
from vaswani_plugin.tasks import vaswani_translation  # noqa: E402,F401  (registers the task)

__all__ = ["VaswaniConfigError"]
