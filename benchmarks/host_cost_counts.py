"""host_cost.py's counters of an update under torch.profiler: kernel-like aten calls by phase (fairseq's ranges in
Trainer.train_step), the calls that make the host wait for a GPU (named by the plugin or fairseq frame that made
them), and the device's busy time."""

import os
import sys
from collections import Counter

# Calls that make the host wait for a GPU's results (torch's CUDA sync debug mode flags the same kernels).
SYNCING = {
    "__bool__",
    "item",
    "tolist",
    "__int__",
    "__float__",
    "__index__",
    "nonzero",
    "masked_select",
    "unique",
    "cpu",
    "numpy",
    "equal",
    "allclose",
    "repeat_interleave",
    "is_nonzero",
}
# Leaf aten calls that launch no kernel: views, shape and metadata queries, allocations, no-op conversions.
METADATA_OPS = {
    "view",
    "_unsafe_view",
    "_reshape_alias",
    "as_strided",
    "expand",
    "expand_as",
    "t",
    "transpose",
    "permute",
    "unsqueeze",
    "squeeze",
    "select",
    "slice",
    "narrow",
    "detach",
    "alias",
    "lift_fresh",
    "unbind",
    "split",
    "split_with_sizes",
    "chunk",
    "view_as",
    "empty",
    "empty_like",
    "empty_strided",
    "resize_",
    "set_",
    "result_type",
    "to",
    "contiguous",
    "reshape",
    "size",
    "stride",
    "numel",
    "dim",
    "is_floating_point",
    "is_complex",
    "_has_compatible_shallow_copy_type",
    "is_same_size",
    "lift",
    "_shape_as_tensor",
    "resolve_conj",
    "resolve_neg",
    "conj",
    "_neg_view",
    "_conj",
    "movedim",
    "flatten",
    "unflatten",
    "type_as",
    "promote_types",
    "new_empty",
    "dropout",
}
# fairseq's record_function ranges inside Trainer.train_step, gathered into the columns printed.
PHASES = {
    "forward": "fwd+bwd",
    "backward": "fwd+bwd",
    "reduce-grads": "grads",
    "multiply-grads": "grads",
    "clip-grads": "grads",
    "optimizer": "optimizer",
}
COLUMNS = ("fwd+bwd", "grads", "optimizer", "other")


class HostSyncs:
    """A TorchFunctionMode that counts the calls in SYNCING by the first plugin or fairseq frame that made them.
    counting False (a run under --compile-layers): nothing entered, calls None. dynamo would trace the mode into
    the compiled layers and compile them again each time its counter changed, up to its recompile limit."""

    def __init__(self, counting=True):
        from torch.overrides import TorchFunctionMode

        syncs = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = getattr(func, "__name__", "")
                boolean_index = (
                    name in ("__getitem__", "__setitem__")
                    and len(args) > 1
                    and any(
                        getattr(index, "dtype", None) is not None and str(index.dtype) == "torch.bool"
                        for index in (args[1] if isinstance(args[1], tuple) else (args[1],))
                    )
                )
                if name in SYNCING or boolean_index:
                    syncs.calls[(name, caller())] += 1
                return func(*args, **(kwargs or {}))

        self.calls = Counter() if counting else None
        self.mode = Mode() if counting else None

    def __enter__(self):
        if self.mode is not None:
            self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return None if self.mode is None else self.mode.__exit__(*exc)


def caller() -> str:
    """'plugin PATH:FUNCTION' or 'fairseq PATH:FUNCTION' of the innermost frame in either package ('other' if none),
    and, when the next such frame outwards is the other package's, 'via' it (the plugin calling fairseq.utils.item)."""
    frames, frame = [], sys._getframe(2)
    while frame is not None and len(frames) < 2:
        path = frame.f_code.co_filename.replace(os.sep, "/")
        package = next((name for name in ("vaswani_plugin", "fairseq") if f"/{name}/" in path), None)
        if package is not None:
            where = f"{'plugin' if package == 'vaswani_plugin' else 'fairseq'} {package}/"
            where += path.rsplit(f"/{package}/", 1)[1] + ":" + frame.f_code.co_name
            if not frames or frames[-1].split()[0] != where.split()[0]:
                frames.append(where)
        frame = frame.f_back
    if not frames:
        return "other"
    return frames[0] if len(frames) == 1 else f"{frames[0]} (via {frames[1]})"


def kernel_calls(profile) -> Counter:
    """Kernel-like calls per column of COLUMNS (and per (column, operator)), from a torch.profiler run: aten calls
    that are not metadata-only and under which no such call runs (a composite's are counted instead). A foreach
    or fused call (torch._foreach_mul_, Adam's fused step) counts once, as on a GPU, where it is one or a few
    multi-tensor kernels (on a CPU torch loops over the tensors inside it)."""
    counts, launching = Counter(), {}

    def aten_name(event):
        return event.name[6:] if event.name.startswith("aten::") else None

    def counted(event) -> bool:
        name = aten_name(event)
        if name is None or name in METADATA_OPS:
            return False
        return name.startswith(MULTI_TENSOR) or not any(launches(child) for child in event.cpu_children)

    def launches(event) -> bool:  # the event or a call under it counts
        if id(event) not in launching:
            launching[id(event)] = counted(event) or any(launches(child) for child in event.cpu_children)
        return launching[id(event)]

    for event in profile.events():
        if not counted(event) or within_multi_tensor_call(event):
            continue
        phase = phase_of(event)
        counts[phase] += 1
        counts[(phase, aten_name(event))] += 1
    return counts


MULTI_TENSOR = ("_foreach_", "_fused_")


def within_multi_tensor_call(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(tuple(f"aten::{prefix}" for prefix in MULTI_TENSOR)):
            return True
        parent = parent.cpu_parent
    return False


def phase_of(event) -> str:
    """The column of COLUMNS whose fairseq range runs around an event ('other' outside them)."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name in PHASES:
            return PHASES[parent.name]
        parent = parent.cpu_parent
    return "other"


def device_busy_us(events) -> float:
    """Microseconds in which the device ran a kernel or a copy: the union of its events' intervals, overlapping
    streams counted once. Left out: the host's ops (which carry their kernels' time too) and the profiler's user
    annotations, fairseq's and host_cost's ranges mirrored onto the device, which span the kernels they hold
    (summed with them, the first H200 run's busy share read 150 %)."""
    from torch.autograd import DeviceType

    spans = sorted(
        (event.time_range.start, event.time_range.end)
        for event in events
        if event.device_type != DeviceType.CPU and not event.is_user_annotation
    )
    busy, reached = 0.0, float("-inf")
    for start, end in spans:
        busy += max(0.0, end - max(start, reached))
        reached = max(reached, end)
    return busy
