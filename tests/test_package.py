"""The package stands alone: it imports nothing of the repository beside it (prepare/ is not shipped), and its
wheel, installed non-editable, holds every subpackage and draws attention pictures from raw text. The repository's
folders are layered, vaswani_plugin <- prepare <- recipes <- benchmarks <- tests: each imports only those before it."""

import ast
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile

import doc_blocks
import grimp
import numpy
import pytest
from cli_helpers import REPO

PACKAGE = REPO / "vaswani_plugin"
# What the package may import: itself, fairseq and what fairseq itself needs (omegaconf for its configs), torch,
# numpy, the standard library and the [recipes], [ctranslate2] and [huggingface] extras of pyproject.toml.
ALLOWED = {
    "vaswani_plugin",
    "fairseq",
    "omegaconf",
    "torch",
    "numpy",
    "sacremoses",
    "subword_nmt",
    "sentencepiece",
    "sacrebleu",
    "matplotlib",
    "ctranslate2",
    "transformers",
}
SUBPACKAGES = {
    "checkpoints",
    "scoring",
    "tools",
    "training",
    "models",
    "criterions",
    "lr_scheduler",
    "tasks",
    "generation",
    "serving",
}
# What the build needs of the repository; the rest (tests, recipes, work/, checkpoints) stays out of the copy.
BUILD_INPUTS = ("setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in", "README.md", "vaswani_plugin", "prepare")


def test_the_package_imports_only_itself_fairseq_torch_the_standard_library_and_its_extras():
    """Every import of the package, a function's too, as grimp (import-linter's graph) reads them. The folders'
    layers, the models' and criterion's independence of the training's hooks and the absence of import circles are
    import-linter's contracts (pyproject.toml; `lint-imports`, the README's test command)."""
    graph = grimp.build_graph("vaswani_plugin", include_external_packages=True)
    outside = {module for module in graph.modules if graph.is_module_squashed(module)}
    assert {"fairseq", "torch", "os"} <= outside and "prepare" not in graph.modules
    assert sorted(outside - ALLOWED - set(sys.stdlib_module_names)) == []


def test_the_benchmarks_import_nothing_of_the_tests():
    """benchmarks/, a folder of scripts above the packages (whose layers import-linter checks), imports no module of
    tests/ (the folder's own modules and packages import each other by name)."""
    own = {path.stem for path in (REPO / "tests").glob("*.py")} | {"tests"}
    imported = {
        f"{path.name}: {name}"
        for path in (REPO / "benchmarks").glob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0)
        for name in ([alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module])
        if name.split(".")[0] in own
    }
    assert "fp16_on_cpu" in own and imported == set()


# Run in the installed copy, with prepare/ made unimportable and the editable install's finder removed: the
# package imports every module of its own, then draws the pictures as `python -m` would.
STANDALONE = textwrap.dedent("""
    import importlib, os, pkgutil, runpy, sys
    site, repo = sys.argv[1:3]
    sys.modules["prepare"] = None
    sys.meta_path[:] = [finder for finder in sys.meta_path if "__editable__" not in getattr(finder, "__module__", "")]
    sys.path.insert(0, site)
    try:
        import prepare
        raise SystemExit("prepare/ is importable")
    except ImportError:
        pass
    import vaswani_plugin
    print("package:", vaswani_plugin.__file__)
    for module in pkgutil.walk_packages(vaswani_plugin.__path__, "vaswani_plugin."):
        if module.name != "vaswani_plugin.__main__":
            importlib.import_module(module.name)
    sys.argv = ["attention_pictures", *sys.argv[3:]]
    runpy.run_module("vaswani_plugin.tools.attention_pictures", run_name="__main__", alter_sys=True)
    venv = os.path.join(repo, ".venv")
    from_repo = sorted(name for name, module in list(sys.modules.items()) if getattr(module, "__file__", None)
                       and module.__file__.startswith(repo + os.sep) and not module.__file__.startswith(venv))
    print("modules from the repository:", from_repo)
""")


def test_the_wheel_installed_alone_draws_pictures_from_raw_text(reversal_data, reversal_training, tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in BUILD_INPUTS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif (REPO / name).is_file():
            shutil.copy(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-cache-dir"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", tmp_path / "wheel", source],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "wheel").glob("vaswani_plugin-*.whl")

    # Every module of the source tree is in the wheel, every subpackage with its __init__.py; prepare/ is not.
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {path.relative_to(REPO).as_posix() for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts}
    assert sources - names == set()
    assert {f"vaswani_plugin/{package}/__init__.py" for package in SUBPACKAGES} <= names
    assert not [name for name in names if not name.startswith(("vaswani_plugin/", "vaswani_plugin-"))]

    site = tmp_path / "site"
    installed = subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "-q", "--target", site, wheel],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]

    # Sentences in raw text: Moses splits off the full stop (unknown to the dictionary), BPE rebuilds w12 and
    # x12. A target given, not translated: an untrained model's 50-token output makes larger pictures to draw.
    save_dir, _ = reversal_training
    codes = tmp_path / "codes"
    codes.write_text("#version: 0.2\nw 1\nw1 2</w>\nw 3</w>\nx 1\nx1 2</w>\nx 3</w>\n")
    pictures = tmp_path / "pictures"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")}
    run_dir = tmp_path / "cwd"
    run_dir.mkdir()
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            STANDALONE,
            site,
            REPO,
            "--path",
            save_dir / "checkpoint_last.pt",
            "--data",
            reversal_data / "joined",
            "--bpe-codes",
            codes,
            "--source",
            "w3 w12.",
            "--target",
            "x12 x3.",
            "--output-dir",
            pictures,
        ],
        cwd=run_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"package: {site / 'vaswani_plugin' / '__init__.py'}" in result.stdout
    assert "source: w3 w12 <unk>\ntarget: x12 x3 <unk>\n" in result.stdout, result.stdout
    assert "modules from the repository: []" in result.stdout
    for kind in ("encoder_self", "decoder_self", "encoder_decoder"):
        assert len(list(pictures.glob(f"{kind}_layer*_all_heads.png"))) == 1
        assert len(list(pictures.glob(f"{kind}_*.png"))) == 2
    arrays = numpy.load(pictures / "attention.npz")
    assert list(arrays["source_tokens"]) == ["w3", "w12", "<unk>", "</s>"]
    assert list(arrays["target_tokens"]) == ["x12", "x3", "<unk>", "</s>"]
    assert arrays["encoder_decoder"].shape[-2:] == (4, 4)


def test_commands_that_need_no_fairseq_start_without_it():
    """The package's import has no fairseq (3 s) and reads no command line: scoring, averaging, the resumption
    plan's reading of checkpoints, the training cost, the curves and the report (with the progress records they
    read) import no fairseq, and prepare/'s and recipes/'s commands, which the recipes start about ten times, no
    torch either; and so does `python -m` of one of them, as the recipes and docs print it."""
    commands = [
        "vaswani_plugin",
        "vaswani_plugin.checkpoints.average",
        "vaswani_plugin.checkpoints.resume",
        "vaswani_plugin.tools.training_cost",
        "vaswani_plugin.scoring.bleu",
        "vaswani_plugin.scoring.parses",
        "vaswani_plugin.tools.training_curves",
        "vaswani_plugin.tools.run_report",
    ]
    without_torch = ["prepare.records", "recipes.launch", "recipes.stages", "recipes.training"]
    code = (
        f"import sys, {', '.join(without_torch)}; "
        "print(sorted(name for name in sys.modules if name.split('.')[0] in ('fairseq', 'torch'))); "
        f"import {', '.join(commands)}; "
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'fairseq'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.splitlines() == ["[]", "[]"], out
    for command in ("vaswani_plugin.scoring.bleu", "recipes.launch"):
        timed = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", command, "--help"], capture_output=True, text=True, cwd=REPO
        )
        assert timed.returncode == 0, timed.stderr[-3000:]
        imported = {line.rpartition("|")[2].strip() for line in timed.stderr.splitlines() if "|" in line}
        assert "vaswani_plugin" in imported and "fairseq" not in imported, command


# Each component, as fairseq's registries name it, in a fresh process. --user-dir imports the package (one that
# is imported already, fairseq leaves alone, and its tasks/ and models/ too).
COMPONENTS = """
import sys
if sys.argv[1] == "register":
    import vaswani_plugin
print("fairseq" in sys.modules)
from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
from fairseq.optim import OPTIMIZER_REGISTRY
from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY
from fairseq.tasks import TASK_REGISTRY

def registered():
    return sorted(
        name
        for registry in (MODEL_REGISTRY, ARCH_MODEL_REGISTRY, TASK_REGISTRY, CRITERION_REGISTRY, OPTIMIZER_REGISTRY,
                         LR_SCHEDULER_REGISTRY)
        for name, component in registry.items()
        if component.__module__.startswith("vaswani_plugin")
    )

def set_up():
    from fairseq import checkpoint_utils
    return [getattr(sys.excepthook, "_vaswani_plugin", False),
            getattr(checkpoint_utils.torch_persistent_save, "replaced_by_the_plugin", False)]

print(registered(), set_up())
if sys.argv[1] == "register":
    exec(sys.argv[3])  # docs/reference.md's block: the import, then register()
    vaswani_plugin.register()  # a second call does nothing new
else:  # what fairseq-train, fairseq-generate and fairseq-interactive do with --user-dir
    from argparse import Namespace
    from fairseq.utils import import_user_module
    import_user_module(Namespace(user_dir=sys.argv[2]))
print(registered(), set_up())
"""
REGISTERED = [
    "noam",
    "vaswani_adam",
    "vaswani_label_smoothed_cross_entropy",
    "vaswani_transformer",
    "vaswani_transformer",
    "vaswani_transformer_big",
    "vaswani_transformer_big_en_fr",
    "vaswani_transformer_parsing",
    "vaswani_translation",
]


@pytest.mark.parametrize("how", ["register", "--user-dir"])
def test_the_package_registers_through_register_or_user_dir_only(how, tmp_path):
    """`import vaswani_plugin` registers nothing and imports no fairseq, whatever the command line (another package
    that imports it registers nothing: its users call register()); register(), or fairseq's --user-dir import of
    the package's tasks/ and models/, registers the five components and sets fairseq up
    (fairseq_setup.set_up_fairseq)."""
    block = doc_blocks.block("docs/reference.md", "test:register")
    done = subprocess.run(
        [sys.executable, "-c", COMPONENTS, how, PACKAGE, block],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["False", "[] [False, False]", f"{REGISTERED} [True, True]"]
