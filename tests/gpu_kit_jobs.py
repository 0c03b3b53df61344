"""The second lane's jobs of the GPU kit (benchmarks/gpu_kit.py), in a clone of the repository as CI's is: the kit
built by the documented command with the default folder and the shared Multi30k, once a session, for this machine's
Python; the command it prints run as the device tool runs it, with the CPU stand-in of the acceptance; the
acceptance without a GPU and without a work folder; what git sees in the clone after each."""

import os
import shutil
import subprocess
import sys

from cli_helpers import REPO, SHARED_DATA
from conftest import lane_job
from doc_blocks import block, commands

PYTHON_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
GIT = ["git", "-c", "user.name=tests", "-c", "user.email=tests@localhost"]


def git_status(folder):
    """`git status --porcelain` of the folder: empty when git sees nothing new or changed."""
    return subprocess.run(
        ["git", "-C", str(folder), "status", "--porcelain"], capture_output=True, text=True, check=True
    ).stdout


def clone_of_the_working_tree(dest):
    """A git clone of the repository with the working tree's uncommitted changes committed in it, so that the code
    under test is what the clone holds and a clean `git status` there means what it does in CI's fresh clone."""
    subprocess.run(["git", "clone", "-q", str(REPO), str(dest)], check=True)
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
        elif (dest / name).is_file():  # deleted in the working tree
            (dest / name).unlink()
    subprocess.run([*GIT, "-C", str(dest), "add", "-A"], check=True)
    if subprocess.run(["git", "-C", str(dest), "diff", "--cached", "--quiet"]).returncode:
        subprocess.run([*GIT, "-C", str(dest), "commit", "-q", "-m", "the working tree under test"], check=True)
    return dest


@lane_job
def gpu_kit(tmp_path_factory, lane):
    """`bash benchmarks/gpu_kit.sh --python-version <this Python> --raw-dir <the shared Multi30k>` in a clone (3.11
    here: the same builder as the GPU's 3.12; a clone in a temporary folder has no ../shared): (clone, its .gpu_kit/,
    the raw files it copied, the builder's CompletedProcess, `git status` after)."""
    clone = clone_of_the_working_tree(tmp_path_factory.mktemp("gpu_kit") / "clone")
    raw = SHARED_DATA / "multi30k"
    command = commands(block("docs/recipes.md", "test:gpu-acceptance"))[1]  # bash benchmarks/gpu_kit.sh
    built = subprocess.run(
        ["bash", "-c", f"{command} --python-version {PYTHON_VERSION} --raw-dir {raw}"],
        cwd=clone,
        env=dict(os.environ, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=600,
    )
    return clone, clone / ".gpu_kit", raw, built, git_status(clone)


def device_tool_env(root, **variables):
    """The environment the device tool gives the kit's command: $OUT and $TMPDIR of its own, python3 this Python."""
    (root / "tmp").mkdir()
    return dict(
        os.environ,
        OUT=str(root / "out"),
        TMPDIR=str(root / "tmp"),
        PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]),
        **variables,
    )


@lane_job
def gpu_acceptance_stand_in(tmp_path_factory, lane):
    """The kit's printed command, run in the clone's root by bash as the device tool does, with the CPU stand-in
    (GPU_ACCEPTANCE_STAND_IN=1): (work folder, $OUT, the command, its CompletedProcess, `git status` after)."""
    clone, kit, _, built, _ = lane["gpu_kit"].result()
    assert built.returncode == 0, built.stderr[-3000:]
    command = built.stdout.splitlines()[-1]
    root = tmp_path_factory.mktemp("gpu_kit_command")
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=600,
        env=device_tool_env(root, GPU_ACCEPTANCE_STAND_IN="1"),
    )
    return root / "tmp" / "gpu_acceptance", root / "out", command, done, git_status(clone)


@lane_job
def gpu_acceptance_without_gpu(tmp_path_factory, lane):
    """In the clone, after the stand-in: `bash benchmarks/gpu_acceptance.sh` with no GPU visible and no WORK_DIR,
    as a user would first try it (its report in benchmarks/): (its CompletedProcess, `git status` after)."""
    clone = lane["gpu_kit"].result()[0]
    lane["gpu_acceptance_stand_in"].result()  # done first: the same clone
    env = {key: value for key, value in os.environ.items() if key not in ("WORK_DIR", "GPU_ACCEPTANCE_STAND_IN")}
    command = commands(block("docs/recipes.md", "test:gpu-acceptance"))[0]  # bash benchmarks/gpu_acceptance.sh
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(env, CUDA_VISIBLE_DEVICES="", PYTHON=sys.executable),
    )
    return done, git_status(clone)
