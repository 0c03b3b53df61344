"""What the benchmarks share: the repository on the import path, the paper's settings as fairseq's arguments, the
model sizes they measure, the machine's description and the shared Multi30k.

The benchmarks are scripts (`python benchmarks/NAME.py`): Python puts this folder first on the import path, so they
import each other by name, and this module puts the repository's root before it, once, for prepare/ (not installed)
and the working tree's vaswani_plugin/ (the package the benchmarks measure, before any installed copy).
"""

import platform
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from vaswani_plugin import paper as PAPER  # noqa: E402  (the paper's settings, vaswani_plugin/paper.py)

PLUGIN = REPO / "vaswani_plugin"  # fairseq's --user-dir
DROPOUT = PAPER.number(PAPER.MODELS["base"]["dropout"])  # §5.4's P_drop of the base model, every size's here


def paper_size(name: str) -> tuple:
    """d_model, d_ff, h, N of paper.MODELS[name]."""
    return tuple(PAPER.MODELS[name][key] for key in ("d_model", "d_ff", "heads", "layers"))


SIZES = {  # d_model, d_ff, h, N; small = the quickstart's, base and big = Table 3's.
    "tiny": (32, 64, 4, 2),
    "small": paper_size("quickstart"),
    "base": paper_size("base"),
    "big": paper_size("big"),
}


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


_TRAINING = PAPER.arguments("training")
RECIPES_OPTIMIZER = _TRAINING[_TRAINING.index("--optimizer") + 1]  # the plugin's, as the recipes train it


def cpu_model() -> str:
    """The CPU's model name, as /proc/cpuinfo gives it (else the platform's word for it, or 'unknown')."""
    cpuinfo = Path("/proc/cpuinfo")
    models = re.findall(r"^model name\s*: (.*)$", cpuinfo.read_text(), re.M) if cpuinfo.exists() else []
    return models[0].strip() if models else platform.processor() or "unknown"


def git_describe() -> str:
    """The commit of the working tree, or why there is none (the device tool copies the tree without .git)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return "no git here"
    return f"git {done.stdout.strip()}" if done.returncode == 0 else "not a git checkout"


def shared_multi30k():
    """Multi30k's six raw files where the tests and the GPU kit find them: ../shared/data/multi30k beside the
    repository, else shared/data/multi30k in it; None if neither is there."""
    places = (REPO.parent / "shared/data/multi30k", REPO / "shared/data/multi30k")
    return next((path for path in places if path.is_dir()), None)
