"""host_cost.py's measurement: each configuration (precision x implementation x optimizer) built by fairseq's own
parser, task and Trainer from the same flags, trained on the same synthetic batches, timed (on a CPU in interleaved
rounds) and profiled (calls, syncs, kernel time by kind, memory, host frames)."""

import contextlib
import copy
import statistics
import time
from collections import Counter
from pathlib import Path

from common import DROPOUT, PLUGIN, paper_training, size_arguments
from host_cost_counts import COLUMNS, PHASES, HostSyncs, device_busy_us, kernel_calls
from host_cost_frames import frame_time
from host_cost_kinds import kernel_time, ranges
from host_cost_memory import PeakMemory, allocated_peak, float_storages, live_bytes, model_megabytes

IMPLEMENTATIONS = {  # name: (--arch, --criterion, --task)
    "transformer": ("transformer", "label_smoothed_cross_entropy", "translation"),
    "vaswani_transformer": ("vaswani_transformer", "vaswani_label_smoothed_cross_entropy", "vaswani_translation"),
}
# The plugin with torch's F.dropout in place of models/dropout.py's CPU draw: that draw's A/B in one run.
TORCH_DROPOUT = "vaswani_F.dropout"
IMPLEMENTATIONS[TORCH_DROPOUT] = IMPLEMENTATIONS["vaswani_transformer"]
PLUGIN_MODELS = ("vaswani_transformer", TORCH_DROPOUT)
REFERENCE = ("transformer", "adam")  # what a user gets by doing nothing
MFU_FLOPS_PER_PARAMETER_TOKEN = 6  # a training step's model FLOPs ~ 6 x parameters x tokens (forward 2, backward 4)


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


def compiles_layers(spec, implementation) -> bool:
    """Whether this configuration trains with the plugin task's --compile-layers (torch.compile of its layers)."""
    return implementation in PLUGIN_MODELS and spec.compile_layers != "off"


def arguments(spec, data_dir, implementation, optimizer):
    """fairseq-train's arguments of one configuration in float32: the paper's Adam and label smoothing with fairseq's
    inverse_sqrt schedule, the model of spec's size, the synthetic data's dictionaries, no checkpoint or log."""
    arch, criterion, task = IMPLEMENTATIONS[implementation]
    words = [
        data_dir,
        "--user-dir",
        PLUGIN,
        "--task",
        task,
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--arch",
        arch,
        "--share-all-embeddings",
        *size_arguments(spec.dim, spec.ffn or 4 * spec.dim, spec.heads, spec.layers),
        "--dropout",
        DROPOUT,
        *paper_training(optimizer, criterion, "inverse_sqrt"),
        "--lr",
        "5e-4",
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
    if compiles_layers(spec, implementation):  # the task's torch.compile lever
        words += ["--compile-layers", spec.compile_layers]
    if implementation in PLUGIN_MODELS and spec.length_buckets:  # padded batch shapes (issue 65)
        words += ["--length-buckets", spec.length_buckets]
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
        self.dropout = torch_dropout if implementation == TORCH_DROPOUT else contextlib.nullcontext
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
        with self.dropout():
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


@contextlib.contextmanager
def torch_dropout():
    """The plugin's layers draw their dropout with torch's F.dropout inside this block (TORCH_DROPOUT's runs)."""
    import torch.nn.functional as F

    from vaswani_plugin.models import attention, layers

    own = layers.apply_dropout, attention.apply_dropout
    layers.apply_dropout = attention.apply_dropout = lambda x, p, training: F.dropout(x, p, training) if p else x
    try:
        yield
    finally:
        layers.apply_dropout, attention.apply_dropout = own


def profiled(spec, run, precision, implementation, excluded=frozenset()) -> dict:
    """Per update, spec.profiled updates under torch.profiler: kernel-like calls per column, kernel time by kind,
    the matrix products' FLOPs, sync calls, the host's ms in fairseq's ranges, the device's busy ms and on a CPU the
    peak memory (the storages in `excluded` left out: other configurations'); then as many under cProfile: the
    host's ms by Python frame."""
    import cProfile
    import pstats

    from torch.profiler import ProfilerActivity, profile

    syncs, cuda = HostSyncs(counting=not compiles_layers(spec, implementation)), run.cuda
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
        syncs=None if syncs.calls is None else {site: count / spec.profiled for site, count in syncs.calls.items()},
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

    import vaswani_plugin

    vaswani_plugin.register()  # as --user-dir would: this process imported the package before fairseq read that
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


def configurations(spec):
    """(precision, implementation, optimizer): fairseq's transformer with adam, the plugin (and TORCH_DROPOUT) with
    each --optimizers."""
    for precision in spec.precisions:
        if "transformer" in spec.implementations and precision != "bf16":  # fairseq's --bf16 is for TPUs
            yield (precision, *REFERENCE)
        for implementation in (name for name in PLUGIN_MODELS if name in spec.implementations):
            for optimizer in spec.optimizers:
                yield precision, implementation, optimizer
