"""The fairseq internals the plugin depends on, beyond fairseq's public classes and registries, in one place.

Each was checked against ve-fairseq 0.12.3 (FAIRSEQ_CHECKED); a newer fairseq that changes one of them changes
this module. A leaf under the package: it imports torch and the standard library, and fairseq inside the functions
that need it (a command that only reads a checkpoint never imports fairseq); nothing of vaswani_plugin.
"""

import traceback
from typing import Callable, Optional, Tuple

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


def replace_checkpoint_writes(save: Callable[[dict, str], None], copy: Callable[[str, str], None]) -> None:
    """fairseq-train's checkpoint writes replaced by `save(state, path)` and `copy(source, target)` (the plugin's
    durable ones: checkpoints/storage.py), for local paths; once a process, a second call does nothing.

    ve-fairseq 0.12.3: Trainer.save_checkpoint calls checkpoint_utils.torch_persistent_save(state, path,
    async_write), which writes PATH.tmp and renames it, and checkpoint_utils.save_checkpoint copies that file to the
    other names due (checkpoint_last.pt, checkpoint_best.pt, ...) with the PathManager its module imported,
    PathManager.copy(source, target, overwrite=True): in place, and nothing of either fsynced. Both are looked up in
    checkpoint_utils' namespace when called, where they are replaced: torch_persistent_save, and PathManager by a
    subclass whose copy is `copy` (the module's other uses of PathManager stay fairseq's). --write-checkpoints-
    asynchronously and a path of iopath's handlers (a remote store) keep fairseq's own writes.
    """
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    fairseq_save = checkpoint_utils.torch_persistent_save
    if getattr(fairseq_save, "replaced_by_the_plugin", False):
        return

    def torch_persistent_save(obj, filename, async_write: bool = False):
        if async_write or PathManager.path_requires_pathmanager(str(filename)):
            return fairseq_save(obj, filename, async_write)
        save(obj, filename)

    class CheckpointPathManager(PathManager):
        @staticmethod
        def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
            if not overwrite or PathManager.path_requires_pathmanager(str(dst_path)):
                return PathManager.copy(src_path, dst_path, overwrite)
            copy(src_path, dst_path)
            return True

    torch_persistent_save.replaced_by_the_plugin = True
    checkpoint_utils.torch_persistent_save = torch_persistent_save
    checkpoint_utils.PathManager = CheckpointPathManager


def trusted_broadcasts() -> None:
    """fairseq's broadcast of an object from one rank to the others (rank 0's checkpoint state when a run of several
    processes resumes) unpickled whole on the others: torch >= 2.6 loads with weights_only=True by default, which
    refuses the omegaconf configuration rank 0 made of the checkpoint's, and every rank but 0 failed to resume. Rank 0
    read the file safely; the bytes are the job's own. Once a process, a second call does nothing.

    ve-fairseq 0.12.3: distributed.utils.broadcast_object sends what is not a tensor through _broadcast_object_slow
    (torch.save, two broadcasts, torch.load), looked up in that module's namespace when called, where it is replaced
    by the same function whose torch.load is given weights_only=False.
    """
    import io

    from fairseq.distributed import utils

    if getattr(utils._broadcast_object_slow, "replaced_by_the_plugin", False):
        return

    def _broadcast_object_slow(obj, src_rank: int, group, dist_device: torch.device):
        if utils.get_rank(group) == src_rank:
            buffer = io.BytesIO()
            torch.save(obj, buffer)
            buffer = torch.ByteTensor(buffer.getbuffer()).to(dist_device)
            utils.broadcast(torch.LongTensor([len(buffer)]).to(dist_device), src=src_rank, group=group)
            utils.broadcast(buffer, src=src_rank, group=group)
            return obj
        length = torch.LongTensor([0]).to(dist_device)
        utils.broadcast(length, src=src_rank, group=group)
        buffer = torch.ByteTensor(int(length.item())).to(dist_device)
        utils.broadcast(buffer, src=src_rank, group=group)
        return torch.load(io.BytesIO(buffer.cpu().numpy()), map_location="cpu", weights_only=False)

    _broadcast_object_slow.replaced_by_the_plugin = True
    utils._broadcast_object_slow = _broadcast_object_slow
