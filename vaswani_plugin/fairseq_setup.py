"""What fairseq's commands get of the plugin besides its components, once a process (a second call does nothing
new): set_up_fairseq, called by the task's module at its import (fairseq's --user-dir imports it) and by
vaswani_plugin.register()."""

from vaswani_plugin.checkpoints.storage import (
    allow_fairseq_checkpoint_classes,
    durable_fairseq_checkpoints,
    unreadable_checkpoint_message,
)
from vaswani_plugin.cli import EXPLAINERS, install_error_hook
from vaswani_plugin.fairseq_internals import trusted_broadcasts


def set_up_fairseq():
    """The one-line error hook (cli.py; a checkpoint fairseq could not read among what it explains), fairseq's
    checkpoint classes allow-listed for torch's safe (weights_only) loading, fairseq-train's checkpoints written
    durably (checkpoints/storage.py) and the checkpoint state rank 0 broadcasts read whole by the others
    (fairseq_internals.trusted_broadcasts)."""
    if unreadable_checkpoint_message not in EXPLAINERS:
        EXPLAINERS.insert(0, unreadable_checkpoint_message)
    install_error_hook()
    allow_fairseq_checkpoint_classes()
    durable_fairseq_checkpoints()
    trusted_broadcasts()
