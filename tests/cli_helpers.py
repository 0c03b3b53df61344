"""Helpers for tests that run fairseq's command-line tools and the package's commands as a user does (in the test
process where a run must succeed, else as processes of their own)."""

import contextlib
import functools
import importlib
import importlib.util
import io
import logging
import os
import random
import re
import runpy
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from vaswani_plugin import paper

REPO = Path(__file__).resolve().parents[1]
# benchmarks/ on the import path, after the tests' own modules: the modules they share with the benchmarks
# (wmt_mirror.py, chaos.py), imported by name as the benchmarks import each other.
sys.path.append(str(REPO / "benchmarks"))
# The real data of the end-to-end tests (Multi30k, newstest, the WSJ sample), beside the repository, never in it;
# tests/conftest.py skips the tests marked e2e or shared_data where it is absent.
SHARED_DATA = REPO.parent / "shared" / "data"
# Whether this machine multiplies bfloat16 natively, read independently of vaswani_plugin.precision.
NATIVE_BF16 = (
    Path("/proc/cpuinfo").exists()
    and re.search(r"\b(avx512_bf16|amx_bf16)\b", Path("/proc/cpuinfo").read_text()) is not None
)
BIN = Path(sys.executable).parent
TINY_MODEL = (
    "--encoder-layers 1 --decoder-layers 2 --encoder-embed-dim 32 --decoder-embed-dim 32 "
    "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --encoder-attention-heads 4 "
    "--decoder-attention-heads 4"
).split()
PAPER_TRAINING = [
    *paper.arguments("training"),
    "--warmup-updates",
    str(paper.WARMUP_STEPS),
    "--max-tokens",
    "1000",
    "--cpu",
    "--seed",
    "1",
    "--required-batch-size-multiple",
    "1",
]
TEST_SENTENCES = 103  # not a multiple of 8: every one must come back (fairseq issue #5036)


def benchmark(name):
    """benchmarks/NAME.py as a module, for the tests that check its pieces (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def paper_options(section, *names):
    """The options `names` of paper.arguments(section), each with its value, in the order named."""
    values = dict(zip(*[iter(paper.arguments(section))] * 2))
    return [word for name in names for word in (name, values[name])]


def run_command(name, command, cwd, stdin=None, check=True):
    """Run a command of this environment (`name` for the failure message) with safe checkpoint loading left on."""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"}
    result = subprocess.run(
        list(map(str, command)), cwd=cwd, input=stdin, env=env, capture_output=True, text=True, timeout=300
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{name} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result


def run(tool, *args, cwd, stdin=None, check=True):
    """Run fairseq-TOOL (from this environment) with safe checkpoint loading left on, as run_tool() runs it."""
    return run_tool([f"fairseq-{tool}", *map(str, args)], cwd, stdin, check)


def run_module(module, *args, cwd, check=True):
    """Run `python -m MODULE` (one of this package's commands) as a user does, as run_tool() runs it."""
    return run_tool(["python", "-m", module, *map(str, args)], cwd, None, check)


def run_tool(words, cwd, stdin, check):
    """A command that must succeed (check) runs in this process, as its console script or -m would (no 3-4 s of a
    new process's fairseq import); one whose failure a test reads (its exit status, its last line) runs as a
    process of its own, this environment's `python` or fairseq-TOOL, and so does every run of the second lane's
    thread (a run in this process changes its folder and standard streams)."""
    python = words[0] == "python"
    name = " ".join(words[:3]) if python else words[0]
    if not check or threading.current_thread() is not threading.main_thread():
        process = [sys.executable if python else BIN / words[0], *words[1:]]
        return run_command(name, process, cwd, stdin, check)
    status, out, err = run_in_process(words, cwd, stdin)
    if status != 0:
        raise AssertionError(f"{name} failed ({status}):\n{err[-3000:]}")
    return subprocess.CompletedProcess(words, status, out, err)


LOADING_TOOLS = ("fairseq-train", "fairseq-generate", "fairseq-interactive", "fairseq-validate")


def forget_the_last_training(command):
    """What fairseq-train keeps a process long, on its functions: the best validation loss (checkpoint_best.pt is
    written only below it; early stopping's count), gone as in a new process."""
    from fairseq import checkpoint_utils

    for function, names in (
        (checkpoint_utils.save_checkpoint, ("best",)),
        (getattr(command, "should_stop_early", None), ("best", "num_runs")),
    ):
        for name in names:
            if hasattr(function, name):
                delattr(function, name)


def run_in_process(words, cwd, stdin=None):
    """`fairseq-TOOL ARGS` or `python -m MODULE ARGS` (words) run in this process, in `cwd`, as its console script
    or `-m` runs it: fairseq's log lines to stdout as its commands configure them, safe checkpoint loading on.
    Returns (exit status, stdout, stderr). The main thread's only: the folder and the streams are the process's."""
    assert threading.current_thread() is threading.main_thread(), "run_in_process outside the main thread"
    out, err, status = io.StringIO(), io.StringIO(), 0
    # fairseq's commands call logging.basicConfig(stream=sys.stdout, level=INFO) when first imported, which does
    # nothing where a handler is already there (pytest's): the same lines, to this run's stdout.
    log = logging.StreamHandler(out)
    log.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s", "%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    level = root.level
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        patch.chdir(cwd)
        patch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", raising=False)
        if stdin is not None:
            patch.setattr(sys, "stdin", io.StringIO(stdin))
        root.addHandler(log)
        root.setLevel(logging.INFO)
        try:
            if words[:2] == ["python", "-m"]:
                patch.setattr(sys, "argv", [words[2], *words[3:]])
                runpy.run_module(words[2], run_name="__main__", alter_sys=True)
            else:
                assert words[0].startswith("fairseq-"), words
                if words[0] in LOADING_TOOLS and not any(word.startswith("--num-workers") for word in words):
                    # Batches read here, not by forked worker processes: workers forked from this threaded
                    # process outlive the run, and shutting them down when collected took 5 s each.
                    words = [*words, "--num-workers", "0"]
                patch.setattr(sys, "argv", list(words))
                command = importlib.import_module(f"fairseq_cli.{words[0][len('fairseq-') :]}")
                forget_the_last_training(command)
                command.cli_main()
        except SystemExit as exit:
            status = exit.code if isinstance(exit.code, int) else 1 if exit.code else 0
            if isinstance(exit.code, str):
                print(exit.code, file=sys.stderr)
        finally:
            root.removeHandler(log)
            root.setLevel(level)
    return status, out.getvalue(), err.getvalue()


@functools.cache
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
