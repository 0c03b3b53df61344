"""The README's set-up on the Pythons it names: on 3.12 (the GPU image's) pip resolves the whole command (CI sets
it up on 3.11 for real); on 3.9 and 3.10 it stops at once with one line; pyproject.toml's requires-python says the same.
The Pythons come from pyenv (or PATH): this machine has 3.9 to 3.13."""

import glob
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from cli_helpers import REPO
from conftest import lane_job
from doc_blocks import block, substituted

SETUP = block("README.md", "ci:setup")
FILES = ["pyproject.toml", "README.md", "check_python.py", "vaswani_plugin"]  # what the set-up reads


def interpreter(version: str) -> str:
    """That Python's executable: pyenv's, or one on PATH."""
    found = sorted(glob.glob(str(Path.home() / ".pyenv" / "versions" / f"{version}.*" / "bin" / f"python{version}")))
    found = found or [path for path in [shutil.which(f"python{version}")] if path]
    assert found, f"no python{version} here: the README names it, so the test needs it (pyenv install {version})"
    return found[-1]


def set_up(version: str, folder: Path, setup: str = SETUP) -> subprocess.Popen:
    """The set-up block as a user runs it with `python3` being that Python, in a copy of what it reads; its output
    in folder/stdout and folder/stderr."""
    for name in FILES:
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, folder / name)
    (folder / "bin").mkdir()
    (folder / "bin" / "python3").symlink_to(interpreter(version))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{folder / 'bin'}:/usr/bin:/bin"
    with open(folder / "stdout", "w") as out, open(folder / "stderr", "w") as err:
        return subprocess.Popen(["bash", "-c", f"set -e\n{setup}"], cwd=folder, env=env, stdout=out, stderr=err)


def finished(process: subprocess.Popen, folder: Path, timeout: float):
    """(exit status, stdout, stderr) of a set-up once it has ended."""
    process.wait(timeout=timeout)
    return process.returncode, (folder / "stdout").read_text(), (folder / "stderr").read_text()


@lane_job
def setup_on_python_3_12(tmp_path_factory, lane):
    """The set-up on 3.12, pip resolving all of it (--dry-run: nothing installed; the network, 30 s), started in the
    background at once: the lane goes on, the test waits for it."""
    folder = tmp_path_factory.mktemp("python3.12")
    dry_run = substituted(
        SETUP,
        {
            "pip install -e": "pip install --dry-run --quiet --report report.json -e",
            " && pip uninstall -y -q torchaudio": "",
        },
    )
    return folder, set_up("3.12", folder, dry_run)


@pytest.mark.lane("setup_on_python_3_12")
def test_pip_resolves_the_set_up_on_python_3_12(lane):
    folder, process = lane["setup_on_python_3_12"].result()
    status, _, err = finished(process, folder, 600)
    assert status == 0, err[-3000:]
    installs = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
        for item in json.loads((folder / "report.json").read_text())["install"]
    }
    assert installs["ve-fairseq"] == "0.12.3" and installs["torch"] == "2.13.0"
    assert {"vaswani-plugin", "ctranslate2", "transformers", "sacremoses", "subword-nmt", "sacrebleu"} <= set(installs)


@pytest.mark.parametrize("version", ["3.9", "3.10", "3.13"])
def test_another_python_stops_at_once_with_one_line(version, tmp_path):
    status, out, err = finished(set_up(version, tmp_path), tmp_path, 60)
    full = subprocess.run([interpreter(version), "--version"], capture_output=True, text=True).stdout.split()[1]
    assert status == 1 and out == ""
    assert err == (
        f"vaswani_plugin needs Python 3.11 or 3.12 (ve-fairseq 0.12.3 has wheels for those only); this "
        f"is Python {full}: run the set-up with python3.11 or python3.12\n"
    )
    assert not (tmp_path / ".venv").exists()  # nothing created, nothing downloaded


def test_pyproject_and_the_check_name_the_same_pythons():
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11,<3.13"
    namespace = {}
    exec(compile((REPO / "check_python.py").read_text().split("\nif ", 1)[0], "check_python.py", "exec"), namespace)
    assert namespace["SUPPORTED"] == [(3, 11), (3, 12)]
    assert sys.version_info[:2] in namespace["SUPPORTED"]  # the suite's own Python, set up by CI
