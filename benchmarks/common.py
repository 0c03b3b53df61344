"""What the benchmarks share: the repository on the import path, the paper's settings as fairseq's arguments, the
machine's description, and fairseq's float16 optimizers on a CPU.

The benchmarks are scripts (`python benchmarks/NAME.py`): Python puts this folder first on the import path, so they
import each other by name, and this module puts the repository's root before it, once, for prepare/ (not installed)
and the working tree's vaswani_plugin/, whose leaves (paper.py, models/memory.py) load without fairseq's import.
"""

import platform
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from prepare._common import plugin_leaf  # noqa: E402

PAPER = plugin_leaf("paper")  # the paper's settings (vaswani_plugin/paper.py), without the package's fairseq import
PLUGIN = REPO / "vaswani_plugin"  # fairseq's --user-dir
DROPOUT = PAPER.number(PAPER.MODELS["base"]["dropout"])  # §5.4's P_drop of the base model, every size's here


def size_arguments(dim, ffn, heads, layers) -> list:
    """fairseq's options of a model's size, the encoder's and the decoder's alike."""
    return [
        str(word)
        for side in ("encoder", "decoder")
        for word in (
            f"--{side}-embed-dim",
            dim,
            f"--{side}-ffn-embed-dim",
            ffn,
            f"--{side}-attention-heads",
            heads,
            f"--{side}-layers",
            layers,
        )
    ]


def paper_training(optimizer=None, criterion=None, scheduler=None) -> list:
    """paper.arguments("training"): §5.3's Adam and eq. 3, §5.4's label smoothing, with the plugin's optimizer,
    criterion and LR scheduler, or those given in their place."""
    words = PAPER.arguments("training")
    for option, value in (("--optimizer", optimizer), ("--criterion", criterion), ("--lr-scheduler", scheduler)):
        if value is not None:
            words[words.index(option) + 1] = value
    return words


def cpu_model() -> str:
    """The CPU's model name, as /proc/cpuinfo gives it (else the platform's word for it, or 'unknown')."""
    cpuinfo = Path("/proc/cpuinfo")
    models = re.findall(r"^model name\s*: (.*)$", cpuinfo.read_text(), re.M) if cpuinfo.exists() else []
    return models[0].strip() if models else platform.processor() or "unknown"


def float16_on_cpu():
    """fairseq's own --fp16 and --amp (FP16Optimizer, AMPOptimizer) on a CPU: the two places where fairseq's
    float16 path assumes CUDA, patched in this process only (nothing of fairseq changes on disk).

    - FP16Optimizer keys its flat float32 master weights by torch.cuda.current_device() and later copies the
      float16 gradients into them grouped by p.device.index, which is None on a CPU: current_device() answers None
      here, so the keys match. (With any other key the copy finds no parameters and every update has all-zero
      gradients.)
    - On a gradient overflow the trainer sets grad_norm = torch.tensor(0.0).cuda(): .cuda() leaves a tensor on the
      CPU.
    """
    import torch

    torch.cuda.current_device = lambda: None
    torch.Tensor.cuda = lambda tensor, *args, **kwargs: tensor
