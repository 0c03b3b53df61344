"""host_cost.py's kernel time by kind (KINDS: matrix products, attention, normalisation with dropout, ...): each aten
call's own time (a GPU's kernels', else the CPU's) to the kind its surrounding calls, its phase or host_cost's ranges
around the model and the criterion name, and the matrix products' FLOPs."""

from collections import Counter

from host_cost_counts import METADATA_OPS, phase_of

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
        "rand",  # a training step's only random draws: the plugin's CPU dropout masks (models/dropout.py)
        "uniform_",
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
