"""Safe checkpoint loading: allow-list exactly the classes that fairseq checkpoints hold besides tensors.

torch >= 2.6 loads with weights_only=True, which refuses any class it does not know. Safe loading stays on;
only these classes are added (measured on fairseq 0.12.3 checkpoints, see tests/test_checkpoint_loading.py):
- argparse.Namespace: cfg["model"] of fairseq's argparse-style architectures (e.g. `transformer`);
- numpy's array reconstruction, ndarray, dtype and the int64 dtype class: the n-gram counts that
  `--eval-bleu` keeps in extra_state["metrics"].
Checkpoints of this plugin's own model hold none of them.
"""

import argparse

import numpy
import torch
from torch.torch_version import TorchVersion


def fairseq_checkpoint_globals():
    multiarray = numpy._core.multiarray if hasattr(numpy, "_core") else numpy.core.multiarray
    return [
        argparse.Namespace,
        multiarray._reconstruct,
        # Checkpoints written under numpy 1.x name the same function by its old module.
        (multiarray._reconstruct, "numpy.core.multiarray._reconstruct"),
        numpy.ndarray,
        numpy.dtype,
        type(numpy.dtype(numpy.int64)),
    ]


def allow_fairseq_checkpoint_classes():
    """Add fairseq's checkpoint classes to torch's weights_only allow-list (torch >= 2.6 loads safely by default)."""
    if TorchVersion(torch.__version__) >= (2, 6):
        torch.serialization.add_safe_globals(fairseq_checkpoint_globals())
