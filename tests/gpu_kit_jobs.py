"""The second lane's jobs of the GPU kit (benchmarks/gpu_kit.py): the kit built for this machine's Python, once a
session, and the command it prints run as the device tool runs it, with the CPU stand-in of the acceptance."""

import gzip
import os
import subprocess
import sys

from cli_helpers import REPO, TEST_SENTENCES, write_reversal_corpus
from conftest import lane_job

PYTHON_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


def tiny_multi30k(folder):
    """Multi30k's six raw files, under their names, holding the reversal corpus (English: the source words)."""
    folder.mkdir()
    write_reversal_corpus(folder, {"train": 300, "val": 101, "test_2016_flickr": TEST_SENTENCES})
    for split in ("train", "val", "test_2016_flickr"):
        for side, lang in (("src", "en"), ("tgt", "de")):
            text = folder / f"{split}.{side}"
            (folder / f"{split}.{lang}.gz").write_bytes(gzip.compress(text.read_bytes()))
            text.unlink()
    return folder


@lane_job
def gpu_kit(tmp_path_factory, lane):
    """The kit for this Python (3.11 here: the same builder as the GPU's 3.12) with the tiny Multi30k:
    (kit folder, the raw files it copied, the builder's CompletedProcess)."""
    root = tmp_path_factory.mktemp("gpu_kit")
    raw = tiny_multi30k(root / "raw")
    built = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_kit.py"), str(root / "kit"),
                            "--python-version", PYTHON_VERSION, "--raw-dir", str(raw)],
                           capture_output=True, text=True, timeout=600)
    return root / "kit", raw, built


@lane_job
def gpu_acceptance_stand_in(tmp_path_factory, lane):
    """The kit's printed command, run in the repository root by bash as the device tool does, with the CPU stand-in
    (GPU_ACCEPTANCE_STAND_IN=1), $OUT and $TMPDIR of its own and python3 this Python:
    (work folder, $OUT, the command, its CompletedProcess)."""
    kit, _, built = lane["gpu_kit"].result()
    assert built.returncode == 0, built.stderr[-3000:]
    command = built.stdout.splitlines()[-1]
    root = tmp_path_factory.mktemp("gpu_kit_command")
    (root / "tmp").mkdir()
    env = dict(os.environ, GPU_ACCEPTANCE_STAND_IN="1", OUT=str(root / "out"), TMPDIR=str(root / "tmp"),
               PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    done = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    return root / "tmp" / "gpu_acceptance", root / "out", command, done
