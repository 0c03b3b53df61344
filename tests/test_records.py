"""prepare/records.py and the recipes' use of it (recipes/common.sh, recipes/stages.py): the re-run table of
docs/recipes.md for the data, versions, the WORK_DIR lock and one decision for every run of a job. The training rows:
test_resume.py (test_a_training_plan_...) and test_recipes.py (the base recipe re-run)."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from importlib import metadata

from test_recipes import REPO, TRAIN, data_bin, run_common

PREPARE = 'stages prepare train; detect_devices; prepare_data multi30k -- --bpe-merges "$M"'


def records(*args, plan=""):
    return subprocess.run(
        [sys.executable, "-m", "prepare.records", *map(str, args)], input=plan, text=True, capture_output=True, cwd=REPO
    )


def test_a_version_change_is_one_warning_line_never_a_rerun(tmp_path):
    for action in ("start", "finish"):
        records(action, tmp_path, "train", plan="python -m fairseq_cli.train data")
    record_file = tmp_path / ".stages" / "train.json"
    record = json.loads(record_file.read_text())
    record["versions"]["torch"] = "1.0"
    record_file.write_text(json.dumps(record))
    checked = records("check", tmp_path, "train", plan="python -m fairseq_cli.train data")
    assert checked.stdout.strip() == "same"
    assert checked.stderr.strip().splitlines() == [
        f"warning: torch 1.0 -> {metadata.version('torch')} since stage train ran; going on with its outputs"
    ]


def test_data_settings_prepare_again_before_training_and_are_refused_after(tmp_path):
    """Before any checkpoint, a changed BPE_MERGES prepares again; once checkpoints exist it is refused before the
    preparation runs, in one line; RESTART_FROM=prepare moves the data aside first (nothing deleted)."""
    work = tmp_path / "work"
    work.mkdir()
    first = run_common(work, PREPARE, M="100", CPU="1")
    assert first.returncode == 0 and "-m prepare.multi30k" in first.stdout, first.stderr
    again = run_common(work, PREPARE, M="200", CPU="1")
    assert (
        "stage prepare: BPE_MERGES changed from 100 to 200; no checkpoint was trained on the data: preparing it again"
        in again.stderr
        and "-m prepare.multi30k" in again.stdout
    )
    (work / "checkpoints").mkdir()
    (work / "checkpoints" / "checkpoint_last.pt").touch()
    refused = run_common(work, PREPARE, M="300", CPU="1")
    assert refused.returncode == 1 and "prepare.multi30k" not in refused.stdout
    error = refused.stderr.strip().splitlines()[-1]
    assert error.startswith("test: error: stage prepare: BPE_MERGES changed from 200 to 300, but ")
    assert "RESTART_FROM=prepare" in error
    (work / "data" / "data-bin").mkdir(parents=True)
    restarted = run_common(work, PREPARE, M="300", CPU="1", RESTART_FROM="prepare")
    assert restarted.returncode == 0 and "-m prepare.multi30k" in restarted.stdout, restarted.stderr
    (kept,) = (work / "previous").glob("*/data/data-bin")
    assert not (work / "data" / "data-bin").exists()


def test_a_changed_raw_file_is_refused_once_checkpoints_exist(tmp_path):
    work, raw = tmp_path / "work", tmp_path / "raw"
    work.mkdir()
    raw.mkdir()
    (raw / "train.en.gz").write_bytes(b"one")
    assert run_common(work, PREPARE, M="1", RAW_DIR=str(raw), CPU="1").returncode == 0
    (work / "checkpoints").mkdir()
    (work / "checkpoints" / "checkpoint_1_2.pt").touch()
    time.sleep(0.01)
    (raw / "train.en.gz").write_bytes(b"three")
    refused = run_common(work, PREPARE, M="1", RAW_DIR=str(raw), CPU="1")
    assert refused.returncode == 1
    assert "the raw file train.en.gz changed (3 bytes before, 5 now)" in refused.stderr.strip().splitlines()[-1]


def test_another_run_on_the_same_work_dir_stops_in_one_line(tmp_path):
    holder = subprocess.Popen(
        # It holds the lock until killed below: no sleep the second run must beat.
        ["bash", "-c", f"source {REPO}/recipes/common.sh; detect_devices; sleep 600"],
        env={**run_env(tmp_path)},
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120  # a safety timeout, for a hang only
        while "since" not in ((tmp_path / ".lock").read_text() if (tmp_path / ".lock").exists() else ""):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        second = run_common(tmp_path, "detect_devices", LOCK_WAIT="0", CPU="1")
        assert second.returncode == 1
        assert (
            second.stderr.strip()
            .splitlines()[-1]
            .startswith(f"test: error: {tmp_path} is in use by another run (nodes 1 via ")
        )
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # bash and its sleep
        holder.wait()


def run_env(tmp_path):
    return dict(
        os.environ, RECIPE="test", WORK_DIR=str(tmp_path), CPU="1", CUDA_VISIBLE_DEVICES="", PYTHON=sys.executable
    )


def test_every_other_run_of_a_job_follows_run_0s_decision(tmp_path):
    """Node 1 of two does what node 0 decided for this launch, here a refusal, in node 0's words."""
    nodes = dict(NUM_NODES="2", NODE_RANK="1", MASTER_ADDR="10.0.0.1", MASTER_PORT="29500", MAX_TOKENS_PER_GPU="4096")
    (tmp_path / ".stages").mkdir()
    (tmp_path / ".stages" / "train.decision").write_text(
        "nodes 2 via 10.0.0.1:29500\trefuse --dropout is 0.3 now, 0.1 in the checkpoints\n"
    )  # ... and before it, the precision (PRECISION unset: node 0's card chose)
    (tmp_path / ".stages" / "precision.decision").write_text("nodes 2 via 10.0.0.1:29500\tbf16 NVIDIA H200, ...\n")
    data_bin(tmp_path)
    followed = run_common(tmp_path, TRAIN, **nodes)
    assert followed.returncode == 1
    assert (
        followed.stderr.strip()
        .splitlines()[-1]
        .startswith("test: error: stage train: --dropout is 0.3 now, 0.1 in the checkpoints. Nothing was changed")
    )
    # Another launch's decision is not this one's: node 1 waits, then says so.
    timed_out = run_common(
        tmp_path, TRAIN, **{**nodes, "MASTER_PORT": "29501", "DECISION_WAIT": "1", "PRECISION": "bf16"}
    )  # (a precision set: no decision of node 0's on it to wait for first)
    assert timed_out.returncode == 1 and "decided nothing on stage train" in timed_out.stderr


def test_a_dictionary_changed_under_the_checkpoints_is_refused(tmp_path):
    """Training's record holds the identity of the data's dictionaries (and the update it resumed from): a dictionary
    that is not the one the checkpoints were trained with stops the recipe in one line, whatever made it."""
    work, folder = tmp_path / "work", tmp_path / "work" / "data" / "data-bin"  # DATA_DIR's default
    data_bin(work)
    (folder / "dict.en.txt").write_text("the 10\n")
    assert run_common(work, TRAIN, CPU="1").returncode == 0
    record = json.loads((work / ".stages" / "train.json").read_text())
    assert record["inputs"]["dict.en.txt"][0] == 7 and record["started_from"] is None
    (work / "checkpoints" / "checkpoint_last.pt").touch()
    (folder / "dict.en.txt").write_text("der 10\n")
    refused = run_common(work, TRAIN, CPU="1")
    assert refused.returncode == 1
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "test: error: stage train: the data's dict.en.txt is not the one stage train read (7 bytes now), but "
            f"{work}/checkpoints holds its checkpoints. Nothing was changed"
        )
    )


def test_a_training_recorded_before_the_engine_reads_as_done(tmp_path):
    """The engine before recipes/training.py recorded as a training stage's plan the command quoted by bash's
    `printf %q` (`python -m fairseq_cli.train ... --adam-betas \\(0.9\\,0.98\\) ...`); recipes/training.py builds the
    same words and quotes them as Python's shlex does: such a record reads as done."""
    train = 'stages train; detect_devices; MAX_TOKENS_PER_GPU=4096 train "$WORK_DIR/c" --arch a'
    data_bin(tmp_path)
    dry = run_common(tmp_path, train, CPU="1", DRY_RUN="1")
    (line,) = [shlex.split(line) for line in dry.stdout.splitlines() if " -m fairseq_cli.train " in line]
    quoted = subprocess.run(
        ["bash", "-c", 'printf "%q " "$@"', "-", "python", *line[1:]], capture_output=True, text=True
    )
    assert "\\(0.9\\,0.98\\)" in quoted.stdout  # bash's quoting, not Python's
    for action in ("start", "finish"):
        records(action, tmp_path, "train", plan=quoted.stdout.strip() + "\n")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "checkpoint_last.pt").touch()
    again = run_common(tmp_path, train, CPU="1")
    assert again.returncode == 0 and "fairseq_cli.train" not in again.stdout, again.stderr
    assert "stage train: done before, skipped" in again.stderr
