"""The GPU kit: built on a CPU machine with a package index, everything that a borrowed GPU machine without one
needs to run benchmarks/gpu_acceptance.py; the last line printed is the command to run there.

    bash benchmarks/gpu_kit.sh [DIR] [--python-version 3.12] [--raw-dir R]    # DIR: .gpu_kit/ at the repo root

The GPU machines' image (Python 3.12, torch, numpy, sacrebleu, ...: IMAGE_PACKAGES) has no fairseq. The kit holds,
at most 50 MiB in all:
- wheels of ve-fairseq and of each package that fairseq, the plugin and prepare.multi30k import and the image lacks
  (KIT_PACKAGES), at the versions installed in the Python that runs this (those the test suite ran with), for
  CPython 3.12 on manylinux x86_64 (pip download --only-binary); antlr4-python3-runtime 4.9.3 has only a source
  release on PyPI (omegaconf 2.3 pins 4.9.*), so pip builds its wheel here: pure Python, py3-none-any;
- the plugin's own wheel (pip wheel --no-deps, from a copy of its sources), so that with the kit installed the
  python3 there has the plugin and fairseq as after the README's set-up; the acceptance itself runs the working
  tree's vaswani_plugin/ (the repository first on its path), which travels with the tree;
- Multi30k's six raw files, in multi30k/: from ../shared/data/multi30k (or --raw-dir), else downloaded and checked
  as prepare.download does. The kit folder is git-ignored (a folder in the repository that git would take in is
  refused): the data's licence forbids committing it;
- kit.json: the Python version, the packages' versions, the date and the commit it was built from.
The command notes its start (GPU_ACCEPTANCE_STARTED: the acceptance's deadlines count from it), installs the
wheels with pip --no-index --target under $TMPDIR (default /tmp), puts that first on PYTHONPATH (before what it
holds already: the tests' start-up folder here) and runs the acceptance with the kit's Multi30k, its work under
$TMPDIR and its report, with an archive of the logs, in $OUT when that is set (the device tool's), else in the kit
folder. The device tool runs it from the repository root with carry: [".gpu_kit"]. --python-version 3.11 builds a
kit for this machine's Python instead: the tests run the same command here, on CPU (GPU_ACCEPTANCE_STAND_IN=1).
"""

import argparse
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from common import REPO, git_describe, shared_multi30k

from prepare import PrepareError, download  # the repository's, on the import path by common

# The Python packages of the GPU machines' image ('cuda'), as KINDS.md of the device tool lists them ("Python
# packages already there", read on a machine on 2026-11-17; Python 3.12.3, torch 2.11.0, numpy 2.5.2).
IMAGE_PACKAGES = frozenset(
    """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy
peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
zipp
""".split()
)
# What the image lacks of what a training, generation and preparation run imports (tests/test_gpu_kit.py checks
# that this is all): fairseq, its configuration (hydra, omegaconf, antlr4), bitarray (fairseq.data imports it),
# prepare.multi30k's Moses tokeniser and BPE.
KIT_PACKAGES = (
    "ve-fairseq",
    "hydra-core",
    "omegaconf",
    "antlr4-python3-runtime",
    "bitarray",
    "sacremoses",
    "subword-nmt",
)
SOURCE_ONLY = ("antlr4-python3-runtime",)  # no wheel on PyPI: built here (pure Python)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
PLUGIN_SOURCES = ("pyproject.toml", "README.md", "vaswani_plugin")  # what building the plugin's wheel reads
LIMIT_MIB = 50


class KitError(Exception):
    """A mistake the user can fix: one line, exit status 1."""


def say(message):
    print(f"[gpu_kit] {message}", file=sys.stderr, flush=True)


def normalize(name):
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_versions(names):
    """name -> version installed in this Python, the versions the kit takes."""
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            raise KitError(
                f"{name} is not installed in {sys.executable}: run with the Python of the README's "
                "set-up (PYTHON=.venv/bin/python)"
            ) from None
    return versions


def pip(*arguments):
    """Run pip of this Python; a failure is a KitError with pip's last line."""
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *map(str, arguments)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()] or [f"exit status {done.returncode}"]
        raise KitError(f"pip {arguments[0]} failed: {lines[-1].strip()}")


def fetch_wheels(kit, versions, python_version):
    """The wheels of KIT_PACKAGES for CPython `python_version` on manylinux x86_64, and the plugin's, into kit."""
    binary = [f"{name}=={version}" for name, version in versions.items() if name not in SOURCE_ONLY]
    platforms = [x for platform in PLATFORMS for x in ("--platform", platform)]
    say(f"pip download (CPython {python_version}, manylinux x86_64): {' '.join(binary)}")
    pip(
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        *platforms,
        "-d",
        kit,
        *binary,
    )
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "vaswani_plugin"  # a copy: setuptools' build/ in the tree may hold deleted files
        source.mkdir()
        for name in PLUGIN_SOURCES:
            if (REPO / name).is_dir():
                shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy(REPO / name, source / name)
        built = [f"{name}=={versions[name]}" for name in SOURCE_ONLY]
        say(f"pip wheel (from source): {' '.join(built)} and the plugin")
        pip("wheel", "-q", "--no-deps", "--no-binary", ",".join(SOURCE_ONLY), "-w", kit, *built, source)
    for name in SOURCE_ONLY:
        wheels = list(kit.glob(f"{normalize(name).replace('-', '_')}-*.whl"))
        if not all(wheel.name.endswith("-py3-none-any.whl") for wheel in wheels):
            raise KitError(f"{name} was built as {wheels[0].name}, not pure Python: it would not load on the GPU")


def fetch_multi30k(kit, raw_dir):
    """Multi30k's six raw files into kit/multi30k: copied from raw_dir, else downloaded (sizes and SHA-256 checked)."""
    dest = kit / "multi30k"
    dest.mkdir()
    try:
        if raw_dir:
            say(f"Multi30k from {raw_dir}")
            for name, path in download.obtain("multi30k", dest, raw_dir).items():
                shutil.copyfile(path, dest / name)
        else:
            say("Multi30k: downloading (nothing at ../shared/data/multi30k)")
            download.obtain("multi30k", dest)
    except PrepareError as error:
        raise KitError(str(error)) from None


def kit_size(kit):
    """Bytes of every file under kit."""
    return sum(path.stat().st_size for path in kit.rglob("*") if path.is_file())


def check_size(kit):
    size = kit_size(kit)
    if size > LIMIT_MIB * 2**20:
        raise KitError(f"the kit is {size / 2**20:.1f} MiB, over {LIMIT_MIB} MiB: {kit}")
    return size


def check_wheels(kit, python_version):
    """One wheel of each package, each for this CPython (or pure Python) on manylinux x86_64 (or any platform)."""
    tag = "cp" + python_version.replace(".", "")
    seen = {}
    for wheel in sorted(kit.glob("*.whl")):
        name, _, *rest = wheel.name[: -len(".whl")].split("-")
        python, abi, platform = rest[-3:]
        if (
            python not in (tag, "py3", "py2.py3")
            or abi not in (tag, "abi3", "none")
            or not all(p == "any" or re.fullmatch(r"manylinux\w*_x86_64", p) for p in platform.split("."))
        ):
            raise KitError(f"{wheel.name} is not a wheel for CPython {python_version} on manylinux x86_64")
        if normalize(name) in seen:
            raise KitError(f"two wheels of {name}: {seen[normalize(name)]} and {wheel.name}")
        seen[normalize(name)] = wheel.name
    missing = {normalize(name) for name in (*KIT_PACKAGES, "vaswani_plugin")} - set(seen)
    if missing:
        raise KitError(f"no wheel of {', '.join(sorted(missing))} in {kit}")


def git_ignored(folder):
    """Whether git leaves the folder out, made yet or not (asked as FOLDER/: .gitignore's `/.gpu_kit/` names a
    folder); True where there is no git or no checkout (nothing to guard then)."""
    try:
        done = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", f"{folder}/"], capture_output=True)
    except OSError:
        return True
    return done.returncode != 1


def command(kit):
    """The command that installs the kit and runs the acceptance, from the repository root of the GPU machine."""
    where = os.path.relpath(kit, REPO) if kit.is_relative_to(REPO) else str(kit)
    quoted = shlex.quote(where)
    return (
        f"export GPU_ACCEPTANCE_STARTED=$(date +%s) && python3 -m pip install -q --no-index --no-deps --no-compile "
        f'--upgrade --target "${{TMPDIR:-/tmp}}/gpu_kit" {quoted}/*.whl && '
        f'PYTHONPATH="${{TMPDIR:-/tmp}}/gpu_kit${{PYTHONPATH:+:$PYTHONPATH}}" '
        f"python3 benchmarks/gpu_acceptance.py --kit {quoted} --raw-dir {quoted}/multi30k --work-dir "
        f'"${{TMPDIR:-/tmp}}/gpu_acceptance" --report-dir "${{OUT:-{where}}}"'
    )


def build(kit, python_version, raw_dir):
    """Build the kit in `kit` (replacing an earlier kit there); returns its size in bytes."""
    if kit.exists() and any(kit.iterdir()) and not (kit / "kit.json").is_file():
        raise KitError(f"{kit} is neither empty nor a kit (no kit.json): name another folder")
    if kit.is_relative_to(REPO) and not git_ignored(kit):
        raise KitError(
            f"{kit} is not git-ignored: the kit holds Multi30k, whose licence forbids committing it "
            "(use .gpu_kit/, or ignore the folder)"
        )
    shutil.rmtree(kit, ignore_errors=True)
    kit.mkdir(parents=True)
    (kit / "kit.json").write_text(json.dumps({"complete": False}))  # marks the folder as a kit to replace
    versions = installed_versions(KIT_PACKAGES)
    fetch_wheels(kit, versions, python_version)
    fetch_multi30k(kit, raw_dir)
    check_wheels(kit, python_version)
    (kit / "kit.json").write_text(
        json.dumps(
            dict(
                complete=True,
                python=python_version,
                packages=versions,
                built=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                commit=git_describe(),
            ),
            indent=1,
        )
        + "\n"
    )
    size = check_size(kit)
    for path in sorted(p for p in kit.rglob("*") if p.is_file()):
        say(f"  {path.stat().st_size / 2**20:7.2f} MiB  {path.relative_to(kit)}")
    say(f"  {size / 2**20:7.2f} MiB  in all (at most {LIMIT_MIB})")
    return size


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="gpu_kit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "dir",
        nargs="?",
        type=Path,
        default=REPO / ".gpu_kit",
        help="the kit folder (default .gpu_kit/ at the repository root, git-ignored)",
    )
    parser.add_argument(
        "--python-version", default="3.12", help="the CPython the wheels are for: the GPU image's 3.12 (default)"
    )
    parser.add_argument(
        "--raw-dir",
        type=Path,
        help="Multi30k's {train,val,test_2016_flickr}.{en,de}.gz (default ../shared/data/multi30k "
        "if there, else downloaded)",
    )
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python_version):
        parser.error(f"--python-version {args.python_version}: a CPython version such as 3.12")
    kit = args.dir.resolve()
    raw_dir = args.raw_dir or shared_multi30k()
    try:
        build(kit, args.python_version, raw_dir)
    except KitError as error:
        print(f"gpu_kit: error: {error}", file=sys.stderr)
        return 1
    if not kit.is_relative_to(REPO):
        say(f"{kit} is outside the repository: the device tool carries only paths inside it")
    print(command(kit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
