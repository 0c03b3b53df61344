"""Safe checkpoint loading (torch >= 2.6 loads with weights_only=True): allow-list what fairseq checkpoints hold."""

import torch


def allow_fairseq_checkpoint_classes():
    """Placeholder until the exact list is measured."""
