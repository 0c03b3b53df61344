"""host_cost.py's memory: a GPU run's peak over every step (PeakMemory), a CPU run's from the live tensors and
torch.profiler's allocations, and the plugin's memory model (vaswani_plugin/models/memory.py) beside them; the
recipes' one-GPU batch, which that model chooses."""

from common import PAPER

from vaswani_plugin.models import memory as MEMORY  # the memory model the recipes choose a GPU's batch by


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


def float_storages() -> dict:
    """The floating-point CPU tensors Python holds (gc's objects): their storages' addresses and bytes, each once."""
    import gc

    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    storages = {}
    for thing in gc.get_objects():
        try:  # torch.compile leaves dead weak proxies (ReferenceError) and FakeTensors ("cpu" ones hold nothing)
            if isinstance(thing, FakeTensor):
                continue
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
    tokens = MEMORY.step_split(PAPER.TOKENS_PER_STEP, 1, largest)[1]
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
