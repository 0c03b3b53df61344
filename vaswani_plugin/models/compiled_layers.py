"""--compile-layers (issue 65): torch.compile of each encoder and decoder layer's training forward, in place.

Only `forward` is replaced, on each layer instance: parameter names gain no `_orig_mod.`, so checkpoints load alike
in eager and compiled runs. Layers in eval mode (validation, beam search's incremental state) run eager. dynamo
compiles one graph for all the layers of a class and, with dynamic=True, for every batch shape. reduce-overhead's
CUDA graphs are recorded anew for each batch shape (--max-tokens batches vary in both dimensions): the task's
--length-buckets (tasks/length_buckets.py) pads the batches to a few.
"""

import functools
import logging
import time
import types
import weakref

import torch

from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.models.layers import DecoderLayer, EncoderLayer

logger = logging.getLogger(__name__)

SETTINGS = {"off": None, "dynamic": dict(dynamic=True), "reduce-overhead": dict(mode="reduce-overhead")}
TIMED_STEPS = 10  # the training steps after the first whose mean time the log line reports
CLOCKS = weakref.WeakKeyDictionary()  # model -> its StepClock, from its first training step


def compile_layers(model: torch.nn.Module, setting: str) -> None:
    """--compile-layers SETTING at each training step: the first compiles model's layers, the next are timed."""
    if setting not in SETTINGS:
        raise VaswaniConfigError(f"--compile-layers {setting}: choose one of {', '.join(SETTINGS)}")
    if setting == "off":
        return
    if model not in CLOCKS:
        CLOCKS[model] = StepClock(setting, compile_in_place(model, setting))
    CLOCKS[model].tick()


def compile_in_place(model: torch.nn.Module, setting: str) -> list:
    """Every EncoderLayer and DecoderLayer in model (or its wrapper), its forward compiled in training mode."""
    device = next(model.parameters()).device
    if setting == "reduce-overhead" and device.type != "cuda":
        raise VaswaniConfigError(
            f"--compile-layers reduce-overhead records CUDA graphs: it needs a GPU, this model is on {device.type}; "
            "use --compile-layers dynamic or off"
        )
    layers = [module for module in model.modules() if isinstance(module, (EncoderLayer, DecoderLayer))]
    if not layers:
        raise VaswaniConfigError("--compile-layers compiles the layers of a vaswani_transformer: this model has none")
    for layer in layers:
        layer.forward = types.MethodType(training_forward(compiled_forward(type(layer), setting)), layer)
    return layers


@functools.cache
def compiled_forward(kind: type, setting: str):
    """kind.forward under torch.compile, made once a process: dynamo's graph serves every layer of the class."""
    return torch.compile(kind.forward, **SETTINGS[setting])


def training_forward(compiled):
    """A layer's forward: compiled in training mode, its class's eager one in eval mode (bound, so a deepcopy of
    the layer calls the copy)."""

    def forward(layer, *args, **kwargs):
        return (compiled if layer.training else type(layer).forward)(layer, *args, **kwargs)

    return forward


class StepClock:
    """The first compiled training step's time (compilation) and the mean of the TIMED_STEPS after it, logged once."""

    def __init__(self, setting: str, layers: list):
        self.setting, self.layers, self.starts = setting, layers, []
        self.device = next(layers[0].parameters()).device

    def tick(self):
        """A training step starts (and the one before it has ended)."""
        if self.setting == "reduce-overhead" and self.accumulating():
            raise VaswaniConfigError(
                "--compile-layers reduce-overhead: gradients accumulate over batches here (--update-freq > 1), "
                "and CUDA graphs overwrite them (pytorch/pytorch#96693); use --compile-layers dynamic"
            )
        if len(self.starts) == TIMED_STEPS + 2:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # the steps' own time, not their kernels' launch
        self.starts.append(time.perf_counter())
        if len(self.starts) == TIMED_STEPS + 2:
            first, *later = (end - start for start, end in zip(self.starts, self.starts[1:]))
            logger.info(
                f"compile-layers {self.setting}: {len(self.layers)} layers compiled; the first training step took "
                f"{first:.1f} s (compilation), the next {len(later)} took {sum(later) / len(later):.3f} s each"
            )

    def accumulating(self) -> bool:
        """Whether the layers still hold an earlier batch's gradients (fairseq sets them to None at each update)."""
        return any(next(layer.parameters()).grad is not None for layer in self.layers)
