"""The host's cost of a training update: fairseq-train's own Trainer, the plugin against fairseq's `transformer`.

    python benchmarks/host_cost.py                       # 6+6 layers at d_model 64, 5 rounds of 4 updates, 1 thread
    python benchmarks/host_cost.py --smoke               # seconds: 1+1 layers, 2 rounds of 1 update (the test suite)
    python benchmarks/host_cost.py --device cuda --size big --precisions amp --seconds 45   # the GPU acceptance's

On a GPU an update of a model at the sizes users train is a few milliseconds of arithmetic: the host's work sets
the speed. This measures that work where arithmetic is negligible (a small model on the CPU): each configuration
(precision x implementation x optimizer) is built by fairseq's own parser, task and Trainer from the same flags,
trained on the same synthetic batches (variable lengths, right-padded targets as fairseq collates them), and
per update it prints
- host ms: the wall time of Trainer.train_step (on a CPU this includes the small model's arithmetic);
- data wait ms: the time the loop waited for its next batch (fairseq's iterator, --num-workers);
- kernel-like operator calls (torch.profiler: aten calls under which no other such call runs, views and other
  metadata-only calls left out, a foreach or fused call counted once), in
  forward and backward, in the gradients' multiply and clip, in the optimizer step, and the rest of train_step;
- the calls that would make the host wait for a GPU (item, tolist, nonzero, bool(), .cpu() ...; counted on any
  tensor, as a GPU run may hold it on the device), each named by the first plugin or fairseq frame that made it;
- with --device cuda also target tokens/s, MFU (6 x parameters x tokens/s / the card's peak), the device's busy
  share (its own time per update in torch.profiler / an unprofiled update's wall time), and the host's
  milliseconds in fairseq's forward/backward and optimizer ranges against the device's idle time;
- peak memory (a GPU's allocator; on a CPU the live tensors at the profiled updates' start, gc's, the gradients
  freed, plus the profiler's allocations after it) beside the plugin's memory model (vaswani_plugin/models/
  memory.py) for the largest padded source and target of the same updates: the model is an upper bound, checked
  here (amp on a CPU computes in float32: no model);
- kernel time by kind (KINDS: matrix products, attention, normalisation with dropout, residual and other
  element-wise, softmax and loss, optimizer, casts and copies, other), ms and share: each aten call's own CPU time
  (metadata-only calls left out), on a GPU its kernels' device time (the kernels no call launched in other), to the
  kind that the innermost call around it names, or its phase (the gradients' multiply and clip, the optimizer step),
  or the range host_cost puts around the criterion but not the model (the loss), or its outermost call's name; a
  backward call looks at the forward call that made its autograd node. With it the matrix products' TFLOP/s:
  torch.profiler's FLOPs of mm, addmm, bmm and baddbmm (with_flops: 2 m n k) over their kind's time;
- the host's ms by Python frame, from cProfile over as many more updates: the plugin's areas (models/, criterions/,
  tasks/, tools/, optim/: its per-step hooks and its model), fairseq's (trainer.py, optim/, logging/, ...) and
  torch's, each as its own Python and the C calls made from it (other packages' Python, omegaconf's, the standard
  library's, counted to the areas that called it), and the plugin's 10 and fairseq's 5 functions of most own time.
On a CPU all configurations are built, warmed up and profiled first, then timed in --rounds interleaved rounds (the
configurations in turn, every other round in reverse, the same batches in a round): per round the process CPU ms
and wall ms per update and the ratio plugin / fairseq, whose median over the rounds is the headline ratio, so that
a drift of the machine's speed (other load, its clock) cannot decide it. On a GPU each configuration is timed alone.
Precisions: float32; fp16 and amp take fairseq's FP16Optimizer and AMPOptimizer paths on a CPU through the tests'
shims (tests/fp16_on_cpu.py; amp's GradScaler is disabled without CUDA, so amp runs float32 arithmetic on its
optimizer path); bf16 is the plugin's --bf16-autocast on, the plugin alone. Ratios are (plugin with the recipes'
optimizer) / (fairseq's transformer with fairseq's adam).
"""

import argparse
import copy
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from prepare._common import plugin_leaf  # noqa: E402

PAPER_SIZES = plugin_leaf("paper").MODELS  # the paper's models (vaswani_plugin/paper.py), without fairseq's import
MEMORY = plugin_leaf("models.memory")  # the memory model the recipes choose a GPU's batch by

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
IMPLEMENTATIONS = {  # name: (--arch, --criterion, --task)
    "transformer": ("transformer", "label_smoothed_cross_entropy", "translation"),
    "vaswani_transformer": ("vaswani_transformer", "vaswani_label_smoothed_cross_entropy", "vaswani_translation"),
}
REFERENCE = ("transformer", "adam")  # what a user gets by doing nothing
MFU_FLOPS_PER_PARAMETER_TOKEN = 6  # a training step's model FLOPs ~ 6 x parameters x tokens (forward 2, backward 4)


class HostSyncs:
    """A TorchFunctionMode that counts the calls in SYNCING by the first plugin or fairseq frame that made them."""

    def __init__(self):
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

        self.calls = Counter()
        self.mode = Mode()

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


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


# Kernel time by kind. An aten call's own time (on a GPU its kernels' device time, on a CPU its own CPU time) goes to
# the kind the innermost call around it names (addmm's bias copy is a matrix product's, the mask multiply inside
# dropout dropout's); a call in backward also looks at the forward call that made its autograd node. Calls in the
# gradients' multiply and clip and in the optimizer step are the optimizer's; in the criterion but not in the model
# the loss's; the rest by their outermost call's name (softmax outside the loss is attention's).
KINDS = (
    "matrix products",
    "attention",
    "normalisation with dropout",
    "residual and other element-wise",
    "softmax and loss",
    "optimizer",
    "casts and copies",
    "other",
)
NAMED_KINDS = {  # aten calls that name the kind of what runs in them
    "matrix products": {"mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "linear", "einsum", "addmv", "mv", "dot"},
    "attention": {
        "scaled_dot_product_attention",
        "_scaled_dot_product_attention_math",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_efficient_attention_backward",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_cudnn_attention_backward",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "_flash_attention_forward",
        "_flash_attention_backward",
        "_efficient_attention_forward",
        "_efficient_attention_backward",
    },
    "normalisation with dropout": {
        "layer_norm",
        "native_layer_norm",
        "native_layer_norm_backward",
        "rms_norm",
        "_fused_rms_norm",
        "_fused_rms_norm_backward",
        "dropout",
        "feature_dropout",
        "native_dropout",
        "native_dropout_backward",
        "_fused_dropout",
        "_masked_scale",
        "bernoulli_",
    },
    "softmax and loss": {
        "log_softmax",
        "_log_softmax",
        "_log_softmax_backward_data",
        "cross_entropy_loss",
        "nll_loss",
        "nll_loss_nd",
        "nll_loss_forward",
        "nll_loss_backward",
        "logsumexp",
    },
    "casts and copies": {"_to_copy"},  # a dtype or device conversion, autocast's inside a product too
}
SOFTMAX = {"softmax", "_softmax", "_safe_softmax", "_softmax_backward_data"}
ELEMENTWISE = {
    *("add", "add_", "sub", "sub_", "rsub", "mul", "mul_", "div", "div_", "neg", "abs", "sign", "square", "reciprocal"),
    *("exp", "exp_", "log", "pow", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "relu_", "threshold_backward"),
    *("gelu", "gelu_backward", "silu", "silu_backward", "clamp", "clamp_", "clamp_min", "clamp_min_", "where"),
    *("masked_fill", "masked_fill_", "eq", "ne", "lt", "le", "gt", "ge", "isfinite", "isnan", "isinf"),
    *("logical_not", "logical_and", "logical_or", "bitwise_not", "bitwise_and", "bitwise_or", "__and__", "__or__"),
    *("fill_", "zero_", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_full", "new_zeros"),
    *("addcmul", "addcmul_", "addcdiv", "addcdiv_", "lerp", "lerp_"),
}
COPIES = {"copy_", "clone", "cat", "stack", "_copy_from", "_copy_from_and_resize"}
FLOP_COUNTED = {"mm", "addmm", "bmm", "baddbmm"}  # the products torch.profiler's with_flops counts (2 m n k)
MODEL_RANGE, CRITERION_RANGE = "host_cost: model", "host_cost: criterion"  # ranges() puts them around the forwards
BACKWARD_FUNCTION = 1  # an autograd node's event: torch.profiler's RecordScope


class ranges:
    """The model's and the criterion's forward under record_function ranges of their own, while entered."""

    def __init__(self, model, criterion):
        self.modules = ((model, MODEL_RANGE), (criterion, CRITERION_RANGE))

    def __enter__(self):
        from torch.autograd.profiler import record_function

        self.held = [module.__dict__.get("forward") for module, _ in self.modules]  # an instance's own, if any
        for module, name in self.modules:

            def forward(*args, _forward=module.forward, _name=name, **kwargs):
                with record_function(_name):
                    return _forward(*args, **kwargs)

            module.forward = forward  # an instance attribute: nn.Module's __call__ finds it first

    def __exit__(self, *exc):
        for (module, _), held in zip(self.modules, self.held):
            if held is None:
                del module.forward
            else:
                module.forward = held


def backward_node(event):
    """The autograd node's event a backward call runs in, or None (a forward call)."""
    while event is not None and event.scope != BACKWARD_FUNCTION:
        event = event.cpu_parent
    return event


def surrounding(event):
    """The event and the events around it, innermost first."""
    while event is not None:
        yield event
        event = event.cpu_parent


def kernel_kinds(events):
    """(aten event, its kind of KINDS, its outermost aten call's name) for every aten call on the host but the
    metadata-only ones (METADATA_OPS: their own time is the host's dispatch, no kernel's)."""
    from torch.autograd import DeviceType

    forward_of = {}  # (sequence number, thread): the last forward aten call recorded with it, the node's maker or in it
    for event in events:
        if event.sequence_nr >= 0 and event.name.startswith("aten::") and backward_node(event) is None:
            forward_of[(event.sequence_nr, event.thread)] = event
    for event in events:
        if event.device_type != DeviceType.CPU or not event.name.startswith("aten::") or event.name[6:] in METADATA_OPS:
            continue
        calls = [outer.name[6:] for outer in surrounding(event) if outer.name.startswith("aten::")]
        outermost = [name for name in calls if name not in METADATA_OPS][-1]  # reshape's copy: a clone
        yield event, kind_of(event, calls, outermost, forward_of), outermost


def kind_of(event, calls: list, outermost: str, forward_of: dict) -> str:
    """The kind of an aten call: `calls` its own name and those of the aten calls around it, innermost first,
    `outermost` the outermost of them that is not metadata-only."""
    node = backward_node(event)
    origin = event if node is None else forward_of.get((node.sequence_nr, node.fwd_thread))
    around = [outer.name for outer in surrounding(origin)]  # the forward's ranges, and its calls
    named = calls + ([name[6:] for name in around if name.startswith("aten::")] if node is not None else [])
    kind = next((kind for name in named for kind, names in NAMED_KINDS.items() if name in names), None)
    if phase_of(event) in ("grads", "optimizer"):
        return "optimizer"
    if kind is not None:
        return kind
    if CRITERION_RANGE in around and MODEL_RANGE not in around:
        return "softmax and loss"
    if outermost in SOFTMAX:
        return "attention"
    if outermost in ELEMENTWISE or outermost.startswith("_foreach_"):
        return "residual and other element-wise"
    return "casts and copies" if outermost in COPIES else "other"


def kernel_time(events, device: bool) -> dict:
    """Microseconds by kind and by (kind, outermost aten call), the kernels' total and the matrix products' FLOPs.
    device: each call's kernels' device time, and the kernels no aten call launched in "other"; else CPU time."""
    from torch.autograd import DeviceType

    kinds, calls, flops = Counter(), Counter(), 0
    for event, kind, outermost in kernel_kinds(events):
        spent = event.self_device_time_total if device else event.self_cpu_time_total
        kinds[kind] += spent
        calls[(kind, outermost)] += spent
        if event.name[6:] in FLOP_COUNTED and not any(outer.flops for outer in surrounding(event.cpu_parent)):
            flops += event.flops or 0
    total = sum(kinds.values())
    if device:  # every kernel and copy the device ran, against those an aten call launched
        total = sum(
            event.time_range.elapsed_us()
            for event in events
            if event.device_type != DeviceType.CPU and not event.is_user_annotation
        )
        kinds["other"] += max(0.0, total - sum(kinds.values()))
    return dict(kinds=kinds, calls=calls, total=total, flops=flops)


# Host time by Python frame, from cProfile: a function's own time goes to the area its file lies in; that of a C
# function (torch's operators, Python's builtins) and of Python outside the plugin, fairseq and torch (omegaconf, the
# standard library) to the area of the frames that called it, each call's share to its caller's.
PLUGIN_AREAS = ("models/", "criterions/", "tasks/", "tools/", "optim/")
FAIRSEQ_AREAS = ("trainer.py", "optim/", "logging/", "models/", "modules/", "criterions/", "tasks/", "utils.py")
AREAS = (
    *(f"plugin {area}" for area in (*PLUGIN_AREAS, "other")),
    *(f"fairseq {area}" for area in (*FAIRSEQ_AREAS, "other")),
    "torch",
    "other",
)


def area(path: str) -> str:
    """The area of AREAS a Python file lies in: the plugin's and fairseq's by folder (or file), then torch's."""
    path = path.replace(os.sep, "/")
    for package, who, areas in (("vaswani_plugin", "plugin", PLUGIN_AREAS), ("fairseq", "fairseq", FAIRSEQ_AREAS)):
        if f"/{package}/" in path:
            inside = path.rsplit(f"/{package}/", 1)[1]
            top = inside.split("/")[0] + ("/" if "/" in inside else "")
            return f"{who} {top if top in areas else 'other'}"
    return "torch" if "/torch/" in path else "other"


def frame_time(stats: dict, updates: int) -> tuple:
    """From pstats.Stats(...).stats: ms per update by (area, 'python' or 'C'), and by plugin or fairseq function
    ('vaswani_plugin/PATH:LINE NAME': (its own ms, with what it called))."""
    owners = {}

    def owner(function) -> dict:  # {area: share}: for whom a function's calls are made
        if function not in owners:
            where = "other" if function[0] == "~" else area(function[0])
            owners[function] = {where: 1.0}  # also a cycle's answer, while the callers are asked
            if where == "other" and function in stats:
                callers = stats[function][4]
                spent = charged(callers, 3) or charged(callers, 0)  # by time spent in calls from each, or by calls
                if spent:
                    owners[function] = {where: amount / sum(spent.values()) for where, amount in spent.items()}
        return owners[function]

    def charged(callers: dict, which: int) -> Counter:  # {area: edge[which] summed over the callers' owners}
        result = Counter()
        for caller, edge in callers.items():
            for where, share in owner(caller).items():
                result[where] += share * edge[which]
        return +result

    areas, functions = Counter(), {}
    for function, (_, _, own, cumulative, callers) in stats.items():
        path, line, name = function
        column = "C" if path == "~" else "python"
        where = "other" if path == "~" else area(path)
        for charged_area, seconds in (charged(callers, 2) if where == "other" and callers else {where: own}).items():
            areas[(charged_area, column)] += 1000 * seconds / updates
        if where.startswith(("plugin ", "fairseq ")):
            package = "vaswani_plugin" if where.startswith("plugin ") else "fairseq"
            name = f"{package}/{path.replace(os.sep, '/').rsplit(f'/{package}/', 1)[1]}:{line} {name}"
            functions[name] = (1000 * own / updates, 1000 * cumulative / updates)
    return areas, functions


def interleaved(runs: dict, rounds: int, window) -> tuple:
    """window(run) for each run in turn, `rounds` times, every other round in reverse (a steady drift of the machine
    then weighs alike on neighbours): the order the runs ran in and each run's windows' results, round by round."""
    order, results, keys = [], {key: [] for key in runs}, list(runs)
    for index in range(rounds):
        for key in keys if index % 2 == 0 else keys[::-1]:
            order.append(key)
            results[key].append(window(runs[key]))
    return order, results


def round_ratios(ours: list, theirs: list, which: int = 0) -> tuple:
    """ours[round][which] / theirs[round][which], round by round: (their median, lowest, highest, the ratios)."""
    ratios = [mine[which] / other[which] for mine, other in zip(ours, theirs)]
    return statistics.median(ratios), min(ratios), max(ratios), ratios


def write_dictionary(path: Path, symbols: int):
    path.write_text("".join(f"w{index} {1000 - index % 1000}\n" for index in range(symbols)))


class Slices:
    """Sentence i = words[starts[i]:starts[i + 1]], made when read (hundreds of thousands of views take seconds)."""

    def __init__(self, words, starts):
        self.words, self.starts = words, starts

    def __len__(self):
        return len(self.starts) - 1

    def __getitem__(self, index):
        return self.words[self.starts[index] : self.starts[index + 1]]


def synthetic_dataset(task, sentences: int, seed: int):
    """Sentence pairs of 4-60 tokens (targets of the source's length +-20 %: WMT's lengths after BPE, mean ~32)
    over the task's dictionaries."""
    import torch
    from fairseq.data import LanguagePairDataset

    generator = torch.Generator().manual_seed(seed)
    vocabulary = task.source_dictionary
    lengths = torch.randint(4, 61, (sentences,), generator=generator)
    target_lengths = (lengths * (0.8 + 0.4 * torch.rand(sentences, generator=generator))).round().long().clamp(min=2)
    pairs = []
    for counts in (lengths, target_lengths):  # each sentence a slice of one tensor, its last word end-of-sentence
        words = torch.randint(
            vocabulary.nspecial, len(vocabulary), (int(counts.sum()) + sentences,), generator=generator
        )
        ends = torch.cumsum(counts + 1, 0)
        words[ends - 1] = vocabulary.eos()
        pairs.append(Slices(words, [0] + ends.tolist()))
    sizes = [(counts + 1).numpy() for counts in (lengths, target_lengths)]
    return LanguagePairDataset(
        pairs[0],
        sizes[0],
        vocabulary,
        pairs[1],
        sizes[1],
        task.target_dictionary,
        left_pad_source=True,
        left_pad_target=False,
    )


CONFIGS = {}  # (implementation, optimizer): fairseq's configuration in float32


def arguments(spec, data_dir, implementation, optimizer):
    arch, criterion, task = IMPLEMENTATIONS[implementation]
    ffn = spec.ffn or 4 * spec.dim
    sizes = [
        "--encoder-layers",
        spec.layers,
        "--decoder-layers",
        spec.layers,
        "--encoder-embed-dim",
        spec.dim,
        "--decoder-embed-dim",
        spec.dim,
        "--encoder-ffn-embed-dim",
        ffn,
        "--decoder-ffn-embed-dim",
        ffn,
        "--encoder-attention-heads",
        spec.heads,
        "--decoder-attention-heads",
        spec.heads,
    ]
    words = [
        data_dir,
        "--user-dir",
        REPO / "vaswani_plugin",
        "--task",
        task,
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--arch",
        arch,
        "--share-all-embeddings",
        *sizes,
        "--dropout",
        "0.1",
        "--criterion",
        criterion,
        "--label-smoothing",
        "0.1",
        "--optimizer",
        optimizer,
        "--adam-betas",
        "(0.9,0.98)",
        "--adam-eps",
        "1e-9",
        "--lr",
        "5e-4",
        "--lr-scheduler",
        "inverse_sqrt",
        "--warmup-updates",
        "100",
        "--max-tokens",
        spec.max_tokens,
        "--required-batch-size-multiple",
        "1",
        "--num-workers",
        spec.num_workers,
        "--seed",
        "1",
        "--save-dir",
        data_dir / "checkpoints",
        "--no-save",
        "--disable-validation",
        "--log-format",
        "none",
        "--no-progress-bar",
        "--distributed-world-size",
        "1",
    ]
    words += ["--cpu"] if spec.device == "cpu" else []
    if implementation == "vaswani_transformer" and spec.compile_layers != "off":  # the task's torch.compile lever
        words += ["--compile-layers", spec.compile_layers]
    return [str(word) for word in words]


class Run:
    """One configuration built by fairseq's parser, task and Trainer from the same flags, trained on the synthetic
    batches update by update."""

    def __init__(self, spec, data_dir, precision, implementation, optimizer):
        import torch
        from fairseq import options, tasks
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf
        from fairseq.trainer import Trainer

        key = (implementation, optimizer)
        if key not in CONFIGS:  # hydra's compose takes 1.5 s: once per model and optimizer, the precision set after
            parser = options.get_training_parser()
            CONFIGS[key] = convert_namespace_to_omegaconf(
                options.parse_args_and_arch(parser, arguments(spec, data_dir, implementation, optimizer))
            )
        cfg = copy.deepcopy(CONFIGS[key])
        cfg.common.fp16, cfg.common.amp = precision == "fp16", precision == "amp"
        if precision == "bf16":  # the plugin's task alone
            cfg.task.bf16_autocast = "on"
        torch.manual_seed(1)
        self.task = tasks.setup_task(cfg.task)
        self.task.datasets["train"] = synthetic_dataset(self.task, spec.sentences, seed=1)
        model, criterion = self.task.build_model(cfg.model), self.task.build_criterion(cfg.criterion)
        self.parameters = sum(p.numel() for p in model.parameters())
        self.trainer = Trainer(cfg, self.task, model, criterion)
        self.epoch_itr = self.trainer.get_train_iterator(epoch=1, load_dataset=False)
        self.batches = self.epoch_batches()
        self.cuda = spec.device == "cuda"
        self.tokens = self.epochs = 0  # target tokens trained, epochs begun since the first
        self.seen = [0, 0]  # the largest padded source and target since it was last reset
        self.timed, self.wall = [], 0.0  # the timed updates' (wait, wall, CPU) seconds; their windows' wall seconds
        self.timed_tokens = self.timed_epochs = 0

    def epoch_batches(self):
        from fairseq.data import iterators

        return iterators.GroupedIterator(self.epoch_itr.next_epoch_itr(shuffle=True), 1)

    def synchronize(self):
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def next_samples(self):
        try:
            return next(self.batches)
        except StopIteration:  # the corpus ran out: another epoch (counted: a timed window should hold none)
            self.epochs += 1
            self.batches = self.epoch_batches()
            return next(self.batches)

    def update(self, frames=None) -> tuple:
        """One update (train_step under the cProfile `frames` if given): seconds waited for its batch, wall and
        process CPU seconds of train_step."""
        start = time.perf_counter()
        samples = self.next_samples()
        middle, cpu = time.perf_counter(), time.process_time()
        if frames is not None:
            frames.enable()
        self.trainer.train_step(samples)
        if frames is not None:
            frames.disable()
        times = (middle - start, time.perf_counter() - middle, time.process_time() - cpu)
        for sample in samples:
            if sample:
                self.tokens += sample["ntokens"]
                self.seen[:] = (
                    max(self.seen[0], sample["net_input"]["src_tokens"].numel()),
                    max(self.seen[1], sample["net_input"]["prev_output_tokens"].numel()),
                )
        return times

    def window(self, updates: int, seconds: float) -> tuple:
        """`updates` timed updates (or those of `seconds`) from a synchronized start: process CPU ms and wall ms per
        update."""
        self.synchronize()
        tokens, epochs, times = self.tokens, self.epochs, []
        begin = time.perf_counter()
        while (time.perf_counter() - begin < seconds) if seconds else len(times) < updates:
            times.append(self.update())
        self.synchronize()
        wall = time.perf_counter() - begin
        self.timed += times
        self.wall += wall
        self.timed_tokens += self.tokens - tokens
        self.timed_epochs += self.epochs - epochs
        return 1000 * sum(cpu for _, _, cpu in times) / len(times), 1000 * wall / len(times)

    def timing(self) -> dict:
        """The timed windows' figures per update."""
        return dict(
            updates=len(self.timed),
            epochs_ended=self.timed_epochs,
            host_ms=1000 * statistics.median(step for _, step, _ in self.timed),
            wait_ms=1000 * statistics.mean(wait for wait, _, _ in self.timed),
            wall_ms=1000 * self.wall / len(self.timed),
            tokens_per_s=self.timed_tokens / self.wall,
            parameters=self.parameters,
        )


def profiled(spec, run, precision, implementation, excluded=frozenset()) -> dict:
    """Per update, spec.profiled updates under torch.profiler: kernel-like calls per column, kernel time by kind,
    the matrix products' FLOPs, sync calls, the host's ms in fairseq's ranges, the device's busy ms and on a CPU the
    peak memory (the storages in `excluded` left out: other configurations'); then as many under cProfile: the
    host's ms by Python frame."""
    import cProfile
    import pstats

    from torch.profiler import ProfilerActivity, profile

    syncs, cuda = HostSyncs(), run.cuda
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if not cuda:  # the profiler records no free of a block allocated before it started: the gradients go first,
        run.trainer.zero_grad()  # as train_step's first act would free them
        run.seen[:], live = (0, 0), live_bytes(excluded)
    with profile(activities=activities, profile_memory=not cuda, with_flops=True) as torch_profile, syncs:
        with ranges(run.trainer.model, run.trainer.criterion):
            times = [run.update() for _ in range(spec.profiled)]
            run.synchronize()
    seen = tuple(run.seen)  # of the updates profiled, whose peak was measured on a CPU
    frames = cProfile.Profile()
    for _ in range(spec.profiled):
        run.update(frames)
    run.synchronize()
    events = torch_profile.events()
    calls = kernel_calls(torch_profile)
    host_ranges = Counter()
    for event in events:
        if event.name in PHASES:
            host_ranges[PHASES[event.name]] += event.cpu_time_total / 1000 / spec.profiled
    kernels = kernel_time(events, cuda)
    areas, functions = frame_time(pstats.Stats(frames).stats, spec.profiled)
    return dict(
        calls={column: calls[column] / spec.profiled for column in COLUMNS},
        operators={key: count / spec.profiled for key, count in calls.items() if isinstance(key, tuple)},
        syncs={site: count / spec.profiled for site, count in syncs.calls.items()},
        host_ranges={column: host_ranges[column] for column in ("fwd+bwd", "grads", "optimizer")},
        # the device's own time per update, against the unprofiled updates' wall time
        device_ms=device_busy_us(events) / 1000 / spec.profiled if cuda else None,
        peak_mb=None if cuda else (live + allocated_peak(torch_profile)) / 2**20,
        model_mb=model_megabytes(spec, run.task, precision, implementation, seen),
        kinds={kind: spent / 1000 / spec.profiled for kind, spent in kernels["kinds"].items()},
        kind_calls={key: spent / 1000 / spec.profiled for key, spent in kernels["calls"].items()},
        kernel_ms=kernels["total"] / 1000 / spec.profiled,
        # the profiled updates' wall and process CPU ms: a CPU's profile counts wall time, which other load inflates
        profiled_ms=tuple(1000 * sum(spent[which] for spent in times) / spec.profiled for which in (1, 2)),
        tflops=kernels["flops"] / products / 1e6 if (products := kernels["kinds"]["matrix products"]) else None,
        areas=areas,
        functions=functions,
    )


def measure(spec, data_dir) -> dict:
    """Each configuration's figures per update. On a GPU one after the other, each warmed up, timed and profiled
    alone (its memory its own); on a CPU all are built, warmed up and profiled first, then timed in interleaved
    rounds (process CPU time too), so that a drift of the machine's speed weighs alike on each."""
    import gc

    import torch

    results = {}
    if spec.device == "cuda":
        from vaswani_plugin.tools.training_cost import peak_for

        for precision, implementation, optimizer in configurations(spec):
            run = Run(spec, data_dir, precision, implementation, optimizer)
            for _ in range(spec.warmup):
                run.update()
            run.seen[:] = 0, 0
            with PeakMemory(torch.cuda) as memory:  # fairseq resets the counter after each step
                run.window(spec.updates, spec.seconds)
            result = dict(run.timing(), **profiled(spec, run, precision, implementation), rounds=None)
            peak = peak_for(torch.cuda.get_device_name(0), precision in ("fp16", "amp", "bf16"))
            result["peak_mb"] = memory.megabytes
            result["mfu"] = (
                None
                if peak is None
                else MFU_FLOPS_PER_PARAMETER_TOKEN * run.parameters * result["tokens_per_s"] / (peak * 1e12)
            )
            results[(precision, implementation, optimizer)] = result
            del run
            gc.collect()  # its tensors freed before the next configuration's peak
        return results
    runs = {}
    for configuration in configurations(spec):
        gc.collect()  # what is left is the configurations built before: idle, their tensors' addresses held
        excluded = set(float_storages())
        runs[configuration] = run = Run(spec, data_dir, *configuration)
        for _ in range(spec.warmup):
            run.update()
        results[configuration] = profiled(spec, run, *configuration[:2], excluded)
    updates = -(-spec.updates // spec.rounds)
    _, rounds = interleaved(runs, spec.rounds, lambda run: run.window(updates, spec.seconds / spec.rounds))
    for configuration, run in runs.items():
        results[configuration].update(run.timing(), rounds=rounds[configuration], mfu=None)
    return results


class PeakMemory:
    """torch.cuda.max_memory_allocated over a whole run, though fairseq's trainer resets that counter after every
    step (to log gb_free): while it is entered, torch.cuda.reset_peak_memory_stats first records the peak so far.
    `cuda` None (a CPU run): nothing to follow."""

    def __init__(self, cuda):
        self.cuda, self.peak = cuda, 0

    def __enter__(self):
        if self.cuda is not None:
            self.reset = self.cuda.reset_peak_memory_stats
            self.reset()
            self.cuda.reset_peak_memory_stats = self.record_and_reset
        return self

    def record_and_reset(self, *args, **kwargs):
        self.peak = max(self.peak, self.cuda.max_memory_allocated(*args, **kwargs))
        self.reset(*args, **kwargs)

    def __exit__(self, *exc):
        if self.cuda is not None:
            self.peak = max(self.peak, self.cuda.max_memory_allocated())
            self.cuda.reset_peak_memory_stats = self.reset

    @property
    def megabytes(self):
        return self.peak / 2**20


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


def float_storages() -> dict:
    """The floating-point CPU tensors Python holds (gc's objects): their storages' addresses and bytes, each once."""
    import gc

    import torch

    storages = {}
    for thing in gc.get_objects():
        try:  # torch.compile leaves dead weak proxies (ReferenceError) and FakeTensors without storage (RuntimeError)
            if isinstance(thing, torch.Tensor) and thing.device.type == "cpu" and thing.is_floating_point():
                storage = thing.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
        except (ReferenceError, RuntimeError):
            continue
    return storages


def live_bytes(excluded=frozenset()) -> int:
    """Bytes of the floating-point CPU tensors Python holds but those at the addresses `excluded`: at an update's
    boundary the weights, gradients, optimizer state and caches, as no autograd graph is alive. The data set and
    its batches (integers), which a GPU's count leaves out too, are left out."""
    return sum(size for address, size in float_storages().items() if address not in excluded)


def allocated_peak(profiled) -> int:
    """The most bytes allocated at once, counted from the profile's start: its memory events in time order."""
    events = sorted(
        (event.start_ns(), event.nbytes())
        for event in profiled.profiler.kineto_results.events()
        if event.name() == "[memory]"
    )
    total = peak = 0
    for _, size in events:
        total += size
        peak = max(peak, total)
    return peak


def sizes_for(spec, vocabulary):
    """The memory model's sizes of the configurations measured (a joined dictionary, all embeddings shared)."""
    return MEMORY.Sizes(spec.layers, spec.dim, spec.ffn or 4 * spec.dim, spec.heads, vocabulary, vocabulary, "all")


def one_gpu_default(spec, data_dir) -> int:
    """The batch the recipes give one GPU of this kind when MAX_TOKENS_PER_GPU is unset: the paper's step in as few
    batches as the memory model lets the GPU hold (vaswani_plugin/tools/gpu_batch.py), split evenly."""
    from fairseq.data import Dictionary

    from vaswani_plugin.tools.gpu_batch import largest_on_gpus

    sizes = sizes_for(spec, len(Dictionary.load(str(data_dir / "dict.tgt.txt"))))
    largest, why = largest_on_gpus(sizes, spec.precisions[0])
    tokens = MEMORY.step_split(plugin_leaf("paper").TOKENS_PER_STEP, 1, largest)[1]
    print(f"--max-tokens 0: {tokens} tokens a batch, the paper's step split for one GPU of which {why}", flush=True)
    return tokens


def model_megabytes(spec, task, precision, implementation, seen):
    """The memory model's peak for the plugin at the largest padded source and target seen; None for fairseq's
    model and for amp on a CPU (float32 arithmetic under another optimizer)."""
    if implementation != "vaswani_transformer" or (precision == "amp" and spec.device == "cpu"):
        return None
    import torch

    from vaswani_plugin.models.output_layer_loss import chunk_logits_for

    chunk = chunk_logits_for(torch.device(spec.device))
    return MEMORY.peak_bytes(sizes_for(spec, len(task.target_dictionary)), precision, *seen, chunk, spec.device) / 2**20


def configurations(spec):
    """(precision, implementation, optimizer): fairseq's transformer with adam, the plugin with each --optimizers."""
    for precision in spec.precisions:
        if "transformer" in spec.implementations and precision != "bf16":  # fairseq's --bf16 is for TPUs
            yield (precision, *REFERENCE)
        for optimizer in spec.optimizers if "vaswani_transformer" in spec.implementations else ():
            yield precision, "vaswani_transformer", optimizer


def percent(share) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


def figure(value, spec) -> str:
    return "-" if value is None else format(value, spec)


def sync_total(result, who=None) -> float:
    return sum(count for (_, site), count in result["syncs"].items() if who is None or site.startswith(who + " "))


def report(results, spec):
    header = (
        f"{'precision':<9} {'implementation':<20} {'optimizer':<12} {'host ms':>8} {'wait ms':>8} "
        + " ".join(f"{column:>9}" for column in COLUMNS)
        + f" {'calls':>7} {'syncs':>6} {'plugin':>6}"
    )
    print(header)
    for (precision, implementation, optimizer), result in results.items():
        calls = result["calls"]
        print(
            f"{precision:<9} {implementation:<20} {optimizer:<12} {result['host_ms']:8.1f} {result['wait_ms']:8.2f} "
            + " ".join(f"{calls[column]:9.0f}" for column in COLUMNS)
            + f" {sum(calls.values()):7.0f} {sync_total(result):6.1f} {sync_total(result, 'plugin'):6.1f}"
        )
    print(
        f"{'precision':<9} {'implementation':<20} {'optimizer':<12} {'updates':>7} {'tok/s':>9} {'MFU':>6} "
        f"{'busy':>6} {'peak MB':>8} {'model MB':>8} {'wall ms':>8} {'fwd+bwd':>8} {'optim':>7} {'idle ms':>8}"
    )
    for (precision, implementation, optimizer), result in results.items():
        device, wall = result["device_ms"], result["wall_ms"]
        host = result["host_ranges"]
        print(
            f"{precision:<9} {implementation:<20} {optimizer:<12} {result['updates']:7d} "
            f"{result['tokens_per_s']:9.0f} {percent(result['mfu']):>6} "
            f"{percent(None if device is None else device / wall):>6} {figure(result['peak_mb'], '8.1f'):>8} "
            f"{figure(result['model_mb'], '8.1f'):>8} "
            f"{wall:8.1f} {host['fwd+bwd']:8.1f} {host['grads'] + host['optimizer']:7.1f} "
            f"{figure(None if device is None else wall - device, '8.1f'):>8}"
            + (f"  ({result['epochs_ended']} epoch end(s) in the timed window)" if result["epochs_ended"] else "")
        )
    for precision in spec.precisions:
        reference = results.get((precision, *REFERENCE))
        ours = results.get((precision, "vaswani_transformer", spec.recipes_optimizer))
        if reference is None or ours is None:
            continue
        total = sum(ours["calls"].values()) / sum(reference["calls"].values())
        forward_backward = ours["calls"]["fwd+bwd"] / reference["calls"]["fwd+bwd"]
        print(
            f"ratio {precision} vaswani_transformer+{spec.recipes_optimizer} / transformer+adam: "
            f"{cpu_headline(ours['rounds'], reference['rounds'])}"
            f"kernel-like calls {total:.2f}, in forward and backward {forward_backward:.2f}, "
            f"host ms {ours['host_ms'] / reference['host_ms']:.2f}; the plugin's own syncs "
            f"{sync_total(ours, 'plugin'):.0f}"
        )
    for (precision, implementation, optimizer), result in results.items():
        if result["model_mb"] is not None and result["peak_mb"]:
            print(
                f"memory model {precision} {implementation} {optimizer}: {result['model_mb']:.2f} MB for the "
                f"measured peak's {result['peak_mb']:.2f} MB, ratio {result['model_mb'] / result['peak_mb']:.2f}"
            )
    if spec.operators:
        print(f"the {spec.operators} most frequent kernel-like calls per update:")
        for (precision, implementation, optimizer), result in results.items():
            common = sorted(result["operators"].items(), key=lambda item: -item[1])[: spec.operators]
            print(
                f"  {precision} {implementation} {optimizer}: "
                + ", ".join(f"{name} ({phase}) {count:g}" for (phase, name), count in common)
            )
    print("syncs per update, by the frame that made them:")
    for (precision, implementation, optimizer), result in results.items():
        for (name, site), count in sorted(result["syncs"].items(), key=lambda item: item[0][1]):
            print(f"  {precision} {implementation} {optimizer}: {count:g} x {name} in {site}")
    report_kinds(results, spec)
    report_frames(results, spec)
    report_rounds(results, spec)


def cpu_headline(ours, theirs) -> str:
    """The headline ratio on a CPU: the median over the interleaved rounds of process CPU ms ('' without rounds)."""
    if not ours:
        return ""
    median, low, high, ratios = round_ratios(ours, theirs)
    return f"process CPU ms {median:.2f} (median of {len(ratios)} interleaved rounds, {low:.2f}-{high:.2f}), "


def report_kinds(results, spec):
    where = (
        "the device time of the kernels each aten call launched; those none launched in other"
        if spec.device == "cuda"
        else "each aten call's own CPU time"
    )
    print(f"kernel time by kind, ms per update of the {spec.profiled} profiled ({where}):")
    for (precision, implementation, optimizer), result in results.items():
        total, (wall, cpu) = result["kernel_ms"], result["profiled_ms"]
        print(
            f"  {precision} {implementation} {optimizer}: {total:.2f} ms, the matrix products at "
            f"{figure(result['tflops'], '.3f')} TFLOP/s; the updates profiled: {wall:.1f} ms wall, {cpu:.1f} ms "
            "process CPU"
        )
        for kind in KINDS:
            spent = result["kinds"].get(kind, 0.0)
            line = f"    {kind:<32} {spent:9.2f} {percent(spent / total if total else None):>6}"
            held = sorted(((ms, name) for (which, name), ms in result["kind_calls"].items() if which == kind))[::-1]
            if kind == "other" and held:  # what it holds, largest first
                line += "  (" + ", ".join(f"{name} {ms:.2f}" for ms, name in held[:3]) + ")"
            print(line)


def report_frames(results, spec):
    print(
        f"host ms per update by Python frame, {spec.profiled} more update(s) under cProfile (Trainer.train_step, "
        "its overhead in them): each area's Python, and the C calls made from it (torch's operators: on a CPU their "
        "arithmetic); other packages' Python (omegaconf, the standard library) counted to the areas calling it"
    )
    for (precision, implementation, optimizer), result in results.items():
        areas = result["areas"]
        print(f"  {precision} {implementation} {optimizer}: {sum(areas.values()):.2f} ms")
        for name in AREAS:
            python, native = areas.get((name, "python"), 0.0), areas.get((name, "C"), 0.0)
            if python or native:
                print(f"    {name:<22} {python:8.2f} {native:8.2f}")
        for package, count in (("vaswani_plugin/", 10), ("fairseq/", 5)):
            functions = result["functions"].items()
            own = sorted(((mine, whole, name) for name, (mine, whole) in functions if name.startswith(package)))[::-1]
            if own:
                print(f"    {package[:-1]}'s functions by own ms (with what they call):")
                for mine, whole, name in own[:count]:
                    print(f"      {mine:7.2f} {whole:8.2f}  {name}")


def report_rounds(results, spec):
    if not any(result["rounds"] for result in results.values()):
        return
    print(
        f"interleaved: {spec.rounds} rounds, the configurations in turn, every other round in reverse; process CPU "
        "ms per update by round, and wall ms:"
    )
    for (precision, implementation, optimizer), result in results.items():
        cpu, wall = zip(*result["rounds"])
        print(
            f"  {precision} {implementation} {optimizer}: {' '.join(f'{ms:.1f}' for ms in cpu)} "
            f"(median {statistics.median(cpu):.1f}); wall {' '.join(f'{ms:.1f}' for ms in wall)} "
            f"(median {statistics.median(wall):.1f})"
        )
    for precision in spec.precisions:
        reference = results.get((precision, *REFERENCE))
        for optimizer in spec.optimizers:
            ours = results.get((precision, "vaswani_transformer", optimizer))
            if reference is None or ours is None:
                continue
            cpu, wall = (round_ratios(ours["rounds"], reference["rounds"], which) for which in (0, 1))
            print(
                f"  ratio {precision} vaswani_transformer+{optimizer} / transformer+adam by round, process CPU ms "
                f"{' '.join(f'{ratio:.2f}' for ratio in cpu[3])}: median {cpu[0]:.2f} ({cpu[1]:.2f}-{cpu[2]:.2f}); "
                f"wall ms median {wall[0]:.2f} ({wall[1]:.2f}-{wall[2]:.2f})"
            )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="cuda: also tokens/s, MFU, the GPU's busy share, peak memory, where an update's time goes",
    )
    parser.add_argument(
        "--size",
        choices=sorted(PAPER_SIZES),
        help="a model of vaswani_plugin/paper.py (sets --layers, --dim, --ffn, --heads)",
    )
    parser.add_argument("--layers", type=int, default=6, help="N, encoder and decoder (default 6, the paper's)")
    parser.add_argument("--dim", type=int, default=64, help="d_model (default 64)")
    parser.add_argument("--ffn", type=int, help="d_ff (default 4 d_model)")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--symbols", type=int, default=1000, help="vocabulary size (joined dictionary)")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=1024,
        help="tokens a batch; 0 with --device cuda and one precision: the recipes' one-GPU default "
        "(the paper's step, in as few batches as the memory model lets the GPU hold)",
    )
    parser.add_argument("--sentences", type=int, default=2000, help="synthetic training sentence pairs")
    parser.add_argument("--warmup", type=int, default=5, help="updates before timing")
    parser.add_argument(
        "--updates", type=int, default=20, help="timed updates (the median is printed); on a CPU split over --rounds"
    )
    parser.add_argument("--seconds", type=float, default=0, help="time the updates of this many seconds instead")
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="on a CPU: time the configurations in this many interleaved rounds (the ratios: their medians)",
    )
    parser.add_argument("--profiled", type=int, default=3, help="updates under torch.profiler, for the counts")
    parser.add_argument("--num-workers", type=int, default=1, help="fairseq's --num-workers (its default 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads (0: torch's default)")
    parser.add_argument(
        "--compile-layers",
        choices=["off", "dynamic", "reduce-overhead"],
        default="off",
        help="the plugin task's --compile-layers (torch.compile of its layers; reduce-overhead: CUDA graphs)",
    )
    parser.add_argument(
        "--precisions",
        nargs="+",
        default=["float32", "fp16", "amp"],
        choices=["float32", "fp16", "amp", "bf16"],
        help="bf16: the plugin's --bf16-autocast on (the plugin alone)",
    )
    parser.add_argument("--implementations", nargs="+", default=list(IMPLEMENTATIONS), choices=list(IMPLEMENTATIONS))
    parser.add_argument(
        "--no-cudnn-sdpa",
        action="store_true",
        help="turn cuDNN's fused attention off for the whole run (fairseq's transformer as patched)",
    )
    parser.add_argument(
        "--optimizers",
        nargs="+",
        default=["adam", "vaswani_adam"],
        choices=["adam", "vaswani_adam"],
        help="the plugin's model is measured with each; fairseq's transformer with adam alone",
    )
    parser.add_argument("--recipes-optimizer", default="vaswani_adam", help="the optimizer the ratios take")
    parser.add_argument(
        "--operators",
        type=int,
        default=0,
        metavar="N",
        help="also print each configuration's N most frequent kernel-like calls",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="1+1 layers at d_model 32, 2 updates after 1 in 2 rounds, 1 profiled; the plugin with the recipes' "
        "optimizer only",
    )
    spec = parser.parse_args(argv)
    if spec.smoke:
        spec.layers, spec.dim, spec.symbols, spec.sentences, spec.warmup, spec.updates, spec.profiled = (
            1,
            32,
            100,
            64,
            1,
            2,
            1,
        )
        spec.max_tokens, spec.num_workers, spec.optimizers, spec.rounds = 256, 0, [spec.recipes_optimizer], 2
    if spec.size:
        size = PAPER_SIZES[spec.size]
        spec.layers, spec.dim, spec.ffn, spec.heads = size["layers"], size["d_model"], size["d_ff"], size["heads"]
    import torch

    if spec.threads:
        torch.set_num_threads(spec.threads)
    if spec.no_cudnn_sdpa:
        torch.backends.cuda.enable_cudnn_sdp(False)
    if spec.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    if spec.rounds < 1 or spec.updates < 1:
        parser.error("--rounds and --updates: at least 1")
    if spec.max_tokens == 0 and (spec.device != "cuda" or len(spec.precisions) != 1):
        parser.error("--max-tokens 0 (the one-GPU default) needs --device cuda and one precision")
    if spec.device == "cpu" and {"fp16", "amp"} & set(spec.precisions):
        sys.path.insert(0, str(REPO / "tests"))
        import fp16_on_cpu  # noqa: F401  (fairseq's float16 optimizers on a CPU: patched in this process)
    import warnings

    warnings.filterwarnings("ignore", message=".*GradScaler.*")  # amp on a CPU: disabled, as the docstring says
    warnings.filterwarnings("ignore", module="hydra")  # fairseq's use of hydra: deprecation notices
    warnings.filterwarnings("ignore", message=".*validated against ConfigStore.*")
    cpu = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").exists()
        else ""
    )
    timed = f"{spec.seconds:g} s of updates" if spec.seconds else f"{spec.updates} updates"
    if spec.device == "cpu":
        timed = (
            f"{spec.rounds} interleaved rounds of {spec.seconds / spec.rounds:g} s of updates"
            if spec.seconds
            else f"{spec.rounds} interleaved rounds of {-(-spec.updates // spec.rounds)} updates"
        )
    folder = tempfile.TemporaryDirectory()
    data_dir = Path(folder.name)
    for side in ("src", "tgt"):
        write_dictionary(data_dir / f"dict.{side}.txt", spec.symbols)
    if spec.max_tokens == 0:
        spec.max_tokens = one_gpu_default(spec, data_dir)
    print(
        f"host cost of an update: fairseq's Trainer, {spec.layers}+{spec.layers} layers, d_model {spec.dim}, "
        f"d_ff {spec.ffn or 4 * spec.dim}, {spec.max_tokens} tokens a batch, {timed} after {spec.warmup} (median), "
        f"{spec.profiled} profiled; CPU {cpu}, {torch.get_num_threads()} thread(s), torch {torch.__version__}; the "
        f"plugin from {REPO / 'vaswani_plugin'}",
        flush=True,
    )
    with folder:
        results = measure(spec, data_dir)
    report(results, spec)
    print(f"the plugin measured: {sys.modules['vaswani_plugin'].__file__}")


if __name__ == "__main__":
    main()
