"""benchmarks/gpu_kit.sh: the kit a GPU machine without a package index needs, built once a session for this Python
on the second lane (tests/gpu_kit_jobs.py) by the documented command in a clone of the repository, into the default
.gpu_kit/ with the shared Multi30k: at most 50 MiB, one wheel of each package, each for this CPython on manylinux
x86_64 or pure Python; every module a run imports comes from the GPU image's packages or the kit; the printed
command fits the device tool and, run there as it would be run on the GPU machine, installs the kit and writes both
stages' report to $OUT; git sees nothing new in the clone after the build and the runs; the builder's one-line
errors."""

import ast
import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from cli_helpers import REPO
from doc_blocks import block
from gpu_kit_jobs import PYTHON_VERSION, git_status

sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_kit  # noqa: E402

TAG = "cp" + PYTHON_VERSION.replace(".", "")
# The repository's own modules: its packages and the benchmarks (scripts that import each other by name).
OWN = {"vaswani_plugin", "prepare", "recipes", *(path.stem for path in (REPO / "benchmarks").glob("*.py"))}
# What a GPU run of the acceptance executes of benchmarks/: its modules, host_cost.py's, what they share, speed.py.
ACCEPTANCE = ("gpu_acceptance.py", "acceptance_*.py", "host_cost*.py", "float16_on_cpu.py", "common.py", "speed.py")
# Imported by the repository's code but by no run of the acceptance, and left out of the kit on purpose.
LEFT_OUT = {
    "ctranslate2": "the [ctranslate2] extra, a 43 MB wheel: no run of the acceptance exports to CTranslate2",
}


def built_kit(lane):
    """(the clone, its kit folder, the raw Multi30k the kit copied, the builder's CompletedProcess)."""
    clone, kit, raw, built, _ = lane["gpu_kit"].result()
    assert built.returncode == 0, built.stderr[-3000:]
    return clone, kit, raw, built


def wheels(kit):
    """(distribution, version, python tag, abi tag, platform tags) of each wheel, from its file name."""
    for wheel in sorted(kit.glob("*.whl")):
        name, version, *_, python, abi, platforms = wheel.stem.split("-")
        yield name, version, python, abi, platforms.split(".")


@pytest.mark.shared_data
@pytest.mark.lane("gpu_kit")
def test_kit_is_at_most_50_mib_with_one_wheel_of_each_package_for_this_python(lane):
    _, kit, raw, _ = built_kit(lane)
    assert sum(path.stat().st_size for path in kit.rglob("*") if path.is_file()) <= 50 * 2**20
    found = list(wheels(kit))
    names = [gpu_kit.normalize(name) for name, *_ in found]
    assert len(names) == len(set(names))  # one version of each
    assert set(names) == {gpu_kit.normalize(name) for name in (*gpu_kit.KIT_PACKAGES, "vaswani_plugin")}
    for name, version, python, abi, platforms in found:
        assert python in (TAG, "py3", "py2.py3") and abi in (TAG, "none", "abi3"), name
        assert all(p == "any" or re.fullmatch(r"manylinux(1|2010|2014|_2_\d+)_x86_64", p) for p in platforms), name
        if name != "vaswani_plugin":  # the versions the suite runs with
            assert version == importlib.metadata.version(name.replace("_", "-")), name
    manifest = json.loads((kit / "kit.json").read_text())
    assert manifest["complete"] and manifest["python"] == PYTHON_VERSION
    names = ["test_2016_flickr.de.gz", "test_2016_flickr.en.gz", "train.de.gz", "train.en.gz", "val.de.gz", "val.en.gz"]
    assert sorted(path.name for path in (kit / "multi30k").iterdir()) == names
    for name in names:
        assert (kit / "multi30k" / name).read_bytes() == (raw / name).read_bytes()


# A run's imports: fairseq-train's and fairseq-generate's modules and the command lines of the acceptance parsed as
# they parse them (hydra's own imports come then), the plugin, prepare.multi30k and the benchmarks.
RECORD_IMPORTS = """
import json, sys
before = set(sys.modules)
sys.path[:0] = [{repo!r}, {repo!r} + "/benchmarks"]
import fairseq_cli.generate, fairseq_cli.preprocess, fairseq_cli.train
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
import acceptance_plan, acceptance_worker, gpu_acceptance, host_cost, prepare.multi30k, speed, vaswani_plugin
vaswani_plugin.register()  # as the acceptance's worker does before fairseq reads --user-dir
mode = acceptance_plan.BASE
train = acceptance_worker.train_argv("data", mode, mode.check, "fp16", "vaswani_transformer", "cuda", "save")
generate = acceptance_worker.generate_argv("data", "test", "save/checkpoint_last.pt", True, "cuda", "results")
convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), train))
convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_generation_parser(), generate))
spec = lambda module: getattr(getattr(module, "__spec__", None), "name", None)
print(json.dumps({{name: spec(sys.modules[name]) for name in set(sys.modules) - before if "." not in name}}))
"""


def repository_imports():
    """Top-level modules that the code a GPU run executes imports anywhere (lazily too): module -> a file."""
    files = [
        *(REPO / "vaswani_plugin").rglob("*.py"),
        *(REPO / "prepare").glob("*.py"),
        *(REPO / "recipes").glob("*.py"),
        *(path for pattern in ACCEPTANCE for path in (REPO / "benchmarks").glob(pattern)),
    ]
    found = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], path.relative_to(REPO).as_posix())
    return found


def kit_modules(kit):
    """Top-level modules the kit's wheels install (from their RECORD)."""
    modules = set()
    for wheel in kit.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            (record,) = [n for n in archive.namelist() if n.endswith(".dist-info/RECORD")]
            for line in archive.read(record).decode().splitlines():
                top = line.split(",")[0].split("/")[0]
                if not top.endswith((".dist-info", ".data")):
                    modules.add(top.split(".")[0])
    return modules


def standard(module):
    """Whether the module is Python's own (sysconfig's platform data, _sysconfigdata_*, too)."""
    if module in sys.stdlib_module_names:
        return True
    spec = importlib.util.find_spec(module)
    return bool(spec and spec.origin) and Path(spec.origin).parent == Path(sysconfig.get_paths()["stdlib"])


@pytest.mark.shared_data
@pytest.mark.lane("gpu_kit")
def test_every_module_a_run_imports_is_in_the_gpu_image_or_the_kit(lane):
    _, kit, _, _ = built_kit(lane)
    done = subprocess.run(
        [sys.executable, "-c", RECORD_IMPORTS.format(repo=str(REPO))],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # A name whose module's spec has another (Cython's shared modules, scipy's extensions registered twice) is
    # not imported by that name: its package is.
    loaded = {
        name: "loaded by a run" for name, spec in json.loads(done.stdout.splitlines()[-1]).items() if spec == name
    }
    modules = {**loaded, **repository_imports()}
    assert {
        "fairseq",
        "hydra",
        "omegaconf",
        "antlr4",
        "bitarray",
        "sacremoses",
        "subword_nmt",
        "sacrebleu",
        "numpy",
        "torch",
        "ctranslate2",
    } <= set(modules)  # the walk sees what it must
    distributions = importlib.metadata.packages_distributions()
    in_kit = kit_modules(kit)
    missing = []
    for module, where in sorted(modules.items()):
        if standard(module) or module in OWN | set(LEFT_OUT) | in_kit:
            continue
        if module not in distributions or not any(
            gpu_kit.normalize(dist) in gpu_kit.IMAGE_PACKAGES for dist in distributions[module]
        ):
            missing.append(f"{module} ({', '.join(distributions.get(module, ['no distribution']))}; {where})")
    assert not missing, f"neither in the GPU image nor in the kit: {missing}"


@pytest.mark.shared_data
@pytest.mark.lane("gpu_kit")
def test_the_last_line_printed_is_the_command_and_fits_the_device_tool(lane):
    clone, kit, _, built = built_kit(lane)
    command = built.stdout.splitlines()[-1]
    assert built.stdout.count("\n") == 1  # the progress went to stderr
    assert kit == clone / ".gpu_kit" and len(command) <= 2000  # as the device tool runs it: carry [".gpu_kit"]
    assert command.startswith(
        "export GPU_ACCEPTANCE_STARTED=$(date +%s) && python3 -m pip install -q --no-index --no-deps --no-compile "
    )
    assert " .gpu_kit/*.whl && " in command and '--report-dir "${OUT:-.gpu_kit}"' in command
    assert command == gpu_kit.command(REPO / ".gpu_kit")  # the same from this checkout
    assert "outside the repository" not in built.stderr
    outside = gpu_kit.command(Path("/elsewhere/kit"))
    assert " /elsewhere/kit/*.whl && " in outside and '--report-dir "${OUT:-/elsewhere/kit}"' in outside


@pytest.mark.shared_data
@pytest.mark.lane("gpu_kit", "gpu_acceptance_stand_in", "gpu_acceptance_without_gpu")
def test_git_sees_nothing_new_in_the_clone_after_the_build_and_the_runs(lane):
    """The kit folder, the stand-in's run and a run without a GPU and without WORK_DIR (its report in benchmarks/)
    leave `git status` clean; so would the recipes' and benchmarks' default work/."""
    clone, kit, _, _ = built_kit(lane)
    assert lane["gpu_kit"].result()[-1] == ""
    assert lane["gpu_acceptance_stand_in"].result()[-1] == ""
    done, status = lane["gpu_acceptance_without_gpu"].result()
    assert done.returncode == 1 and (clone / "benchmarks" / "gpu_acceptance_report.md").is_file()
    assert status == ""
    (clone / "work" / "quickstart").mkdir(parents=True)
    (clone / "work" / "quickstart" / "train.log").write_text("a local run's output")
    assert git_status(clone) == ""
    assert (kit / "kit.json").is_file()


@pytest.mark.shared_data
@pytest.mark.lane("gpu_kit", "gpu_acceptance_stand_in")
def test_the_command_installs_the_kit_and_writes_both_stages_to_out(lane):
    built_kit(lane)
    work, out, command, done, _ = lane["gpu_acceptance_stand_in"].result()
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert sorted(path.name for path in out.iterdir()) == ["gpu_acceptance_logs.tar.gz", "gpu_acceptance_report.md"]
    report = (out / "gpu_acceptance_report.md").read_text()
    site = work.parent / "gpu_kit"  # ${TMPDIR:-/tmp}/gpu_kit: the kit's fairseq, not this environment's
    assert f"| fairseq | ve-fairseq {importlib.metadata.version('ve-fairseq')}, {site / 'fairseq'} |" in report
    assert "| GPU kit | .gpu_kit: built " in report  # as the command names it
    assert "## (a) Checks" in report and "## (b) Checks" in report and "FAIL" not in report
    archived = subprocess.run(
        ["tar", "tzf", str(out / "gpu_acceptance_logs.tar.gz")], capture_output=True, text=True, check=True
    ).stdout.split()
    assert {
        "gpu_acceptance/logs/train-a-fp32.log",
        "gpu_acceptance/logs/train-b-fp32-transformer.log",
        "gpu_acceptance/host_cost-0.txt",
        "gpu_acceptance/prepare.log",
    } <= set(archived)


def test_docs_show_the_command_the_default_kit_prints():
    """docs/results.md "GPU" shows the command to run on the GPU machine: the one the default kit prints."""
    assert block("docs/results.md", "test:gpu-kit-command") == gpu_kit.command(REPO / ".gpu_kit") + "\n"


def test_the_default_kit_folder_is_ignored_before_it_exists(tmp_path):
    """git is asked about the folder, not a file of that name: .gitignore's `/.gpu_kit/` names a folder."""
    assert gpu_kit.git_ignored(REPO / ".gpu_kit") and not gpu_kit.git_ignored(REPO / "benchmarks" / "kit")


def test_builder_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert gpu_kit.main([str(tmp_path)]) == 1
    assert capsys.readouterr().err == (
        f"gpu_kit: error: {tmp_path} is neither empty nor a kit (no kit.json): name another folder\n"
    )
    assert (tmp_path / "notes.txt").read_text() == "mine"  # nothing touched
    assert gpu_kit.main([str(REPO / "benchmarks" / "kit")]) == 1  # a folder git would take in
    assert capsys.readouterr().err == (
        f"gpu_kit: error: {REPO / 'benchmarks' / 'kit'} is not git-ignored: the kit "
        "holds Multi30k, whose licence forbids committing it (use .gpu_kit/, or ignore "
        "the folder)\n"
    )
    assert not (REPO / "benchmarks" / "kit").exists()
    with open(tmp_path / "big.whl", "wb") as big:  # sparse: 51 MiB that take no disk
        big.truncate(51 * 2**20)
    with pytest.raises(gpu_kit.KitError, match=rf"^the kit is 51.0 MiB, over 50 MiB: {re.escape(str(tmp_path))}$"):
        gpu_kit.check_size(tmp_path)
    with pytest.raises(SystemExit):
        gpu_kit.main(["--python-version", "312"])
    assert (
        capsys.readouterr().err.splitlines()[-1]
        == "gpu_kit: error: --python-version 312: a CPython version such as 3.12"
    )
