"""The fairseq internals the plugin depends on, beyond fairseq's public classes and registries, in one place.

Each was checked against ve-fairseq 0.12.3 (FAIRSEQ_CHECKED); a newer fairseq that changes one of them changes
this module. A leaf under the package: it imports torch and the standard library, and fairseq inside the functions
that need it (a command that only reads a checkpoint never imports fairseq); nothing of vaswani_plugin.
"""

import traceback
from typing import Optional, Tuple

import torch

FAIRSEQ_CHECKED = "ve-fairseq 0.12.3"


def fairseq_precision(optimizer, dtype: torch.dtype) -> Optional[str]:
    """fairseq's own mixed precision (--amp, --fp16, --memory-efficient-bf16, ...) told by the class fairseq-train
    wraps its optimizer in and the model's dtype; None for float32.

    ve-fairseq 0.12.3: --amp builds an AMPOptimizer, --fp16/--bf16 an FP16Optimizer, their --memory-efficient-
    forms a MemoryEfficientFP16Optimizer: the only users of the private _FP16OptimizerMixin and
    _MemoryEfficientFP16OptimizerMixin that the task tested before.
    """
    from fairseq.optim.amp_optimizer import AMPOptimizer
    from fairseq.optim.fp16_optimizer import FP16Optimizer, MemoryEfficientFP16Optimizer

    if isinstance(optimizer, AMPOptimizer):
        return "--amp"
    half = "bf16" if dtype == torch.bfloat16 else "fp16"
    if isinstance(optimizer, MemoryEfficientFP16Optimizer):
        return f"--memory-efficient-{half}"
    if isinstance(optimizer, FP16Optimizer):
        return f"--{half}"
    return None


def checkpoint_being_read(exc: BaseException) -> Optional[Tuple[str, str]]:
    """(path as given, local path) of the file fairseq was reading when `exc` was raised inside
    checkpoint_utils.load_checkpoint_to_cpu, else None.

    ve-fairseq 0.12.3: read from that function's stack frame in the traceback, its locals `path` and `local_path`
    (the latter set once PathManager has the file). fairseq's commands call it inside their own main(), which the
    plugin does not wrap: the frame is the only place the path is known.
    """
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        if (
            frame.f_globals.get("__name__") == "fairseq.checkpoint_utils"
            and frame.f_code.co_name == "load_checkpoint_to_cpu"
        ):
            path = frame.f_locals["path"]
            return path, frame.f_locals.get("local_path", path)
    return None
