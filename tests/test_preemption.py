"""tools/preemption.py through a recipe's shell (recipes/common.sh's train, recipes/training.py): SIGUSR1 to the
recipe's shell while it trains stops training after the next update, saved without validating, the recipe's last
line naming the signal and its exit status 75, no process of its group left; the same command again resumes. On two
nodes, a signal to one stops both after the same update. The SLURM requeue, in process."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from test_recipes import NEEDS_CPU_PATH, REPO, TINY

from vaswani_plugin.tools import preemption

TRAIN = f'stages train; detect_devices; train "$WORK_DIR/c" --arch vaswani_transformer {TINY} --max-update 12 '
TRAIN += "--save-interval-updates 50 --log-interval 1"


def updates_of(checkpoint):
    return torch.load(checkpoint, weights_only=True)["optimizer_history"][-1]["num_updates"]


def start(tmp_path, **more):
    env = dict(os.environ, PYTHON=sys.executable, RECIPE="test", WORK_DIR=str(tmp_path), CPU="1", REPORT="0", **more)
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", TOKENS_PER_STEP="200", DEV_SCORE="0")
    command = ["bash", "-c", f"source {REPO}/recipes/common.sh; {TRAIN}"]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


@NEEDS_CPU_PATH
def test_sigusr1_to_the_recipe_stops_after_the_next_update_and_a_rerun_resumes(reversal_data, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "data-bin").symlink_to(reversal_data / "joined")  # DATA_DIR's default, WORK_DIR/data
    log = tmp_path / "c" / "train.log"
    recipe, deadline = start(tmp_path), time.monotonic() + 120
    while "num_updates=3," not in (log.read_text() if log.exists() else ""):
        assert recipe.poll() is None and time.monotonic() < deadline, recipe.communicate()
        time.sleep(0.1)
    os.kill(recipe.pid, signal.SIGUSR1)  # the recipe's shell, as SLURM's --signal=B:USR1@N does
    stopped_at = time.monotonic()
    out, err = recipe.communicate(timeout=60)
    assert time.monotonic() - stopped_at < 60
    assert recipe.returncode == preemption.EXIT_STATUS, err.decode()[-3000:]
    last = err.decode().strip().splitlines()[-1]
    assert last.startswith("test: stopped: training stopped by SIGUSR1 at update "), last
    assert last.endswith("; run the same command again")
    with pytest.raises(ProcessLookupError):
        os.killpg(recipe.pid, 0)  # no process of the recipe's group is left
    saved = updates_of(tmp_path / "c" / "checkpoint_last.pt")
    assert 3 <= saved < 12 and f"SIGUSR1 at update {saved};" in last
    assert sorted(path.name for path in (tmp_path / "c").glob("checkpoint_*_*.pt")) == []  # no interval one in between
    assert "begin validation" not in log.read_text()
    again = start(tmp_path, DRY_RUN="1")  # the same command again resumes (the resuming itself: test_resume.py)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err.decode()[-3000:]
    assert "stage train: would resume from its checkpoints (interrupted before)" in err.decode()


@NEEDS_CPU_PATH
def test_sigusr1_to_every_process_of_one_rank_stops_both_after_the_same_update(reversal_data, tmp_path):
    """Two nodes (NUM_NODES=2, gloo); SIGUSR1 to every process of node 1's recipe (its shell, recipes/training.py,
    fairseq-train, its data workers), none to node 0: the flag, summed in fairseq's all-reduce, stops both after the
    same update (a rank stopping alone would leave the other's all-reduce failing); both exit 75."""
    from test_data_parallel import free_port

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "data-bin").symlink_to(reversal_data / "joined")
    nodes = dict(NUM_NODES="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), STALL_MINUTES="1")
    node0, node1 = (start(tmp_path, NODE_RANK=str(rank), **nodes) for rank in (0, 1))
    log, deadline = tmp_path / "c" / "train.log", time.monotonic() + 120
    while "num_updates=3," not in (log.read_text() if log.exists() else ""):
        assert node0.poll() is None and node1.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    os.killpg(node1.pid, signal.SIGUSR1)
    said = {}
    for rank, node in ((0, node0), (1, node1)):
        out, err = node.communicate(timeout=60)
        assert node.returncode == preemption.EXIT_STATUS, err.decode()[-3000:]
        said[rank] = err.decode().strip().splitlines()[-1]
    update = json.loads((tmp_path / "c" / "stopped.json").read_text())["update"]
    assert updates_of(tmp_path / "c" / "checkpoint_last.pt") == update >= 3
    again = "; run the same command again"
    assert said[1] == f"test: stopped: training stopped by SIGUSR1 at update {update}{again}"
    # node 0 received none: its line names what a rank's marker says (SIGUSR1, or that another rank received one)
    assert said[0] in (
        said[1],
        f"test: stopped: training stopped by a signal to another rank at update {update}{again}",
    )


@pytest.mark.parametrize("allowed", [True, False])
def test_run_0_of_a_slurm_job_that_allows_it_requeues_it(allowed, tmp_path, monkeypatch):
    """recipes/training.py's requeue, in process, with a stand-in scontrol that records what it is asked."""
    from recipes import stages, training

    asked = tmp_path / "asked"
    requeue = 1 if allowed else 0
    shown = f"JobId=5 JobName=x Requeue={requeue} Restarts=0"
    scontrol = f'#!/bin/sh\necho "$*" >> {asked}\n[ "$1" = show ] && echo "{shown}"\nexit 0\n'
    (tmp_path / "scontrol").write_text(scontrol)
    (tmp_path / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "5")
    said = training.requeue(stages.Run(tmp_path, rank=0))
    if allowed:
        assert said == "SLURM job 5 requeued: it resumes when SLURM starts it again"
        assert asked.read_text().splitlines() == ["show job -o 5", "requeue 5"]
    else:
        assert said == "SLURM job 5 does not allow requeueing (sbatch --requeue): submit it again"
        assert asked.read_text().splitlines() == ["show job -o 5"]
    asked.unlink()
    assert training.requeue(stages.Run(tmp_path, rank=1)) == "run the same command again" and not asked.exists()
