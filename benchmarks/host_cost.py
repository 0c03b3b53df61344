"""The host's cost of a training update: fairseq-train's own Trainer, the plugin against fairseq's `transformer`.

    python benchmarks/host_cost.py                       # 6+6 layers at d_model 64, 20 updates after 5, 1 thread
    python benchmarks/host_cost.py --smoke               # seconds: 1+1 layers, 2 updates (the test suite)
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
  here (amp on a CPU computes in float32: no model).
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
        phase, parent = "other", event.cpu_parent
        while parent is not None:
            if parent.name in PHASES:
                phase = PHASES[parent.name]
                break
            parent = parent.cpu_parent
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
    return [str(word) for word in words]


def measure(spec, data_dir, precision, implementation, optimizer) -> dict:
    """Per update, for one configuration: host ms, data wait ms, kernel-like calls per column and sync calls; on a
    GPU also target tokens/s, MFU, the device's busy share, peak memory and where an update's wall time goes."""
    import torch
    from fairseq import options, tasks
    from fairseq.data import iterators
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer
    from torch.profiler import ProfilerActivity, profile

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
    task = tasks.setup_task(cfg.task)
    task.datasets["train"] = synthetic_dataset(task, spec.sentences, seed=1)
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    parameters = sum(p.numel() for p in model.parameters())
    trainer = Trainer(cfg, task, model, criterion)
    epoch_itr = trainer.get_train_iterator(epoch=1, load_dataset=False)
    cuda = spec.device == "cuda"
    state = dict(batches=iterators.GroupedIterator(epoch_itr.next_epoch_itr(shuffle=True), 1), tokens=0, epochs=0)
    waits, steps = [], []
    seen = [0, 0]  # the largest padded source and target since the peak was reset

    def synchronize():
        if cuda:
            torch.cuda.synchronize()

    def next_samples():
        try:
            return next(state["batches"])
        except StopIteration:  # the corpus ran out: another epoch (counted: a timed window should hold none)
            state["epochs"] += 1
            state["batches"] = iterators.GroupedIterator(epoch_itr.next_epoch_itr(shuffle=True), 1)
            return next(state["batches"])

    def update():
        start = time.perf_counter()
        samples = next_samples()
        middle = time.perf_counter()
        trainer.train_step(samples)
        waits.append(middle - start)
        steps.append(time.perf_counter() - middle)
        for sample in samples:
            if sample:
                state["tokens"] += sample["ntokens"]
                seen[:] = (
                    max(seen[0], sample["net_input"]["src_tokens"].numel()),
                    max(seen[1], sample["net_input"]["prev_output_tokens"].numel()),
                )

    for _ in range(spec.warmup):
        update()
    synchronize()
    if cuda:
        seen[:] = 0, 0
    waits.clear(), steps.clear()
    state.update(tokens=0, epochs=0)
    with PeakMemory(torch.cuda if cuda else None) as memory:  # fairseq resets the counter after each step
        begin = time.perf_counter()
        while (time.perf_counter() - begin < spec.seconds) if spec.seconds else len(steps) < spec.updates:
            update()
        synchronize()
        wall = time.perf_counter() - begin
    result = dict(
        updates=len(steps),
        epochs_ended=state["epochs"],
        host_ms=1000 * statistics.median(steps),
        wait_ms=1000 * statistics.mean(waits),
        wall_ms=1000 * wall / len(steps),
        tokens_per_s=state["tokens"] / wall,
        parameters=parameters,
        mfu=None,
        peak_mb=None,
        device_ms=None,
    )
    if cuda:
        from vaswani_plugin.tools.training_cost import peak_for

        peak = peak_for(torch.cuda.get_device_name(0), precision in ("fp16", "amp", "bf16"))
        result["peak_mb"] = memory.megabytes
        result["mfu"] = (
            None
            if peak is None
            else MFU_FLOPS_PER_PARAMETER_TOKEN * parameters * result["tokens_per_s"] / (peak * 1e12)
        )
    syncs = HostSyncs()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if not cuda:  # the profiler records no free of a block allocated before it started: the gradients go first,
        trainer.zero_grad()  # as train_step's first act would free them
        seen[:], live = (0, 0), live_bytes()
    with profile(activities=activities, profile_memory=not cuda) as profiled, syncs:
        for _ in range(spec.profiled):
            update()
        synchronize()
    if not cuda:
        result["peak_mb"] = (live + allocated_peak(profiled)) / 2**20
    result["model_mb"] = model_megabytes(spec, task, precision, implementation, seen)
    calls = kernel_calls(profiled)
    ranges = Counter()
    for event in profiled.events():
        if event.name in PHASES:
            ranges[PHASES[event.name]] += event.cpu_time_total / 1000 / spec.profiled
    if cuda:  # the device's own time per update, against the unprofiled update's wall time
        result["device_ms"] = device_busy_us(profiled.events()) / 1000 / spec.profiled
    return dict(
        result,
        calls={column: calls[column] / spec.profiled for column in COLUMNS},
        operators={key: count / spec.profiled for key, count in calls.items() if isinstance(key, tuple)},
        syncs={site: count / spec.profiled for site, count in syncs.calls.items()},
        host_ranges={column: ranges[column] for column in ("fwd+bwd", "grads", "optimizer")},
    )


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


def live_bytes() -> int:
    """Bytes of the floating-point CPU tensors Python holds (gc's objects; each storage once): at an update's
    boundary the weights, gradients, optimizer state and caches, as no autograd graph is alive. The data set and
    its batches (integers), which a GPU's count leaves out too, are left out."""
    import gc

    import torch

    storages = {}
    for thing in gc.get_objects():
        if isinstance(thing, torch.Tensor) and thing.device.type == "cpu" and thing.is_floating_point():
            storage = thing.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


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
    parser.add_argument("--updates", type=int, default=20, help="timed updates (the median is printed)")
    parser.add_argument("--seconds", type=float, default=0, help="time the updates of this many seconds instead")
    parser.add_argument("--profiled", type=int, default=3, help="updates under torch.profiler, for the counts")
    parser.add_argument("--num-workers", type=int, default=1, help="fairseq's --num-workers (its default 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads")
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
        help="1+1 layers at d_model 32, 2 updates after 1, 1 profiled; the plugin with the recipes' optimizer only",
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
        spec.max_tokens, spec.num_workers, spec.optimizers = 256, 0, [spec.recipes_optimizer]
    if spec.size:
        size = PAPER_SIZES[spec.size]
        spec.layers, spec.dim, spec.ffn, spec.heads = size["layers"], size["d_model"], size["d_ff"], size["heads"]
    import torch

    torch.set_num_threads(spec.threads)
    if spec.no_cudnn_sdpa:
        torch.backends.cuda.enable_cudnn_sdp(False)
    if spec.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
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
    folder = tempfile.TemporaryDirectory()
    data_dir = Path(folder.name)
    for side in ("src", "tgt"):
        write_dictionary(data_dir / f"dict.{side}.txt", spec.symbols)
    if spec.max_tokens == 0:
        spec.max_tokens = one_gpu_default(spec, data_dir)
    print(
        f"host cost of an update: fairseq's Trainer, {spec.layers}+{spec.layers} layers, d_model {spec.dim}, "
        f"d_ff {spec.ffn or 4 * spec.dim}, {spec.max_tokens} tokens a batch, {timed} after {spec.warmup} (median), "
        f"{spec.profiled} profiled; CPU {cpu}, {spec.threads} thread(s), torch {torch.__version__}; the plugin from "
        f"{REPO / 'vaswani_plugin'}",
        flush=True,
    )
    results = {}
    with folder:
        for configuration in configurations(spec):
            results[configuration] = measure(spec, data_dir, *configuration)
    report(results, spec)
    print(f"the plugin measured: {sys.modules['vaswani_plugin'].__file__}")


if __name__ == "__main__":
    main()
