"""Helpers for tests that run fairseq's command-line tools as a user does (subprocesses)."""

import functools
import os
import random
import re
import subprocess
import sys
from pathlib import Path

from vaswani_plugin import paper

REPO = Path(__file__).resolve().parents[1]
# The real data of the end-to-end tests (Multi30k, newstest, the WSJ sample), beside the repository, never in it;
# tests/conftest.py skips the tests marked e2e or shared_data where it is absent.
SHARED_DATA = REPO.parent / "shared" / "data"
# Whether this machine multiplies bfloat16 natively, read independently of vaswani_plugin.precision.
NATIVE_BF16 = Path("/proc/cpuinfo").exists() and \
    re.search(r"\b(avx512_bf16|amx_bf16)\b", Path("/proc/cpuinfo").read_text()) is not None
BIN = Path(sys.executable).parent
TINY_MODEL = ("--encoder-layers 1 --decoder-layers 2 --encoder-embed-dim 32 --decoder-embed-dim 32 "
              "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --encoder-attention-heads 4 "
              "--decoder-attention-heads 4").split()
PAPER_TRAINING = [*paper.arguments("training"), "--warmup-updates", str(paper.WARMUP_STEPS),
                  "--max-tokens", "1000", "--cpu", "--seed", "1", "--required-batch-size-multiple", "1"]
TEST_SENTENCES = 103  # not a multiple of 8: every one must come back (fairseq issue #5036)


def paper_options(section, *names):
    """The options `names` of paper.arguments(section), each with its value, in the order named."""
    values = dict(zip(*[iter(paper.arguments(section))] * 2))
    return [word for name in names for word in (name, values[name])]


def run_command(name, command, cwd, stdin=None, check=True):
    """Run a command of this environment (`name` for the failure message) with safe checkpoint loading left on."""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"}
    result = subprocess.run(list(map(str, command)), cwd=cwd, input=stdin, env=env, capture_output=True, text=True,
                            timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"{name} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result


def run(tool, *args, cwd, stdin=None, check=True):
    """Run fairseq-TOOL (from this environment) with safe checkpoint loading left on."""
    return run_command(f"fairseq-{tool}", [BIN / f"fairseq-{tool}", *args], cwd, stdin, check)


def run_module(module, *args, cwd, check=True):
    """Run `python -m MODULE` (one of this package's commands) as a user does."""
    return run_command(f"python -m {module}", [sys.executable, "-m", module, *args], cwd, check=check)


@functools.lru_cache(maxsize=None)
def plugin_dir() -> str:
    """The installed package's directory, as the README tells users to get it (once a process: 4-5 s each)."""
    out = subprocess.run([sys.executable, "-m", "vaswani_plugin"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def write_reversal_corpus(folder: Path, sizes):
    """Source: random words w0..w14; target: the words reversed and renamed x0..x14."""
    rng = random.Random(0)
    for split, count in sizes.items():
        with open(folder / f"{split}.src", "w") as src, open(folder / f"{split}.tgt", "w") as tgt:
            for _ in range(count):
                sentence = [rng.randrange(15) for _ in range(rng.randint(2, 7))]
                src.write(" ".join(f"w{i}" for i in sentence) + "\n")
                tgt.write(" ".join(f"x{i}" for i in reversed(sentence)) + "\n")
