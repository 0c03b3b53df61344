"""tools/preemption.py through a recipe's shell (recipes/common.sh's train, recipes/training.py): SIGTERM (or
SIGUSR1) to the recipe's shell while it trains stops training after the next update, saved without validating, the
recipe's last line naming the signal and its exit status 75, no process of its group left; the same command again
resumes (under `ulimit -f`, failing in one line to save: tools/stopping.py's full disk) and ends with the model of a
run never stopped. In a simulated SLURM step of two nodes, SIGUSR1 to one stops both after the same update and run 0
requeues the job. The requeue's answers, in process."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
from test_recipes import NEEDS_CPU_PATH, REPO, TINY

from vaswani_plugin.tools import preemption

TRAIN = f'stages train; detect_devices; train "$WORK_DIR/c" --arch vaswani_transformer {TINY} --log-interval 1 '


def updates_of(checkpoint):
    return torch.load(checkpoint, weights_only=True)["optimizer_history"][-1]["num_updates"]


def start(work_dir, name, train="--max-update 12 --save-interval-updates 50", before="", **more):
    """A recipe's training stage (its shell sourcing common.sh: TRAIN, then fairseq-train's arguments `train`) in a
    process group of its own, its output in WORK_DIR/NAME.out and .err; BEFORE: shell commands run first."""
    env = dict(os.environ, PYTHON=sys.executable, RECIPE="test", WORK_DIR=str(work_dir), CPU="1", REPORT="0")
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", TOKENS_PER_STEP="200", DEV_SCORE="0")
    env.update(more)
    command = ["bash", "-c", f"{before}source {REPO}/recipes/common.sh; {TRAIN}{train}"]
    with open(work_dir / f"{name}.out", "wb") as out, open(work_dir / f"{name}.err", "wb") as err:
        run = subprocess.Popen(command, env=env, stdout=out, stderr=err, start_new_session=True)
    run.output = work_dir / name
    return run


def with_data(work_dir, reversal_data):
    (work_dir / "data").mkdir(parents=True)
    (work_dir / "data" / "data-bin").symlink_to(reversal_data / "joined")  # DATA_DIR's default, WORK_DIR/data
    return work_dir


def output(run):
    return run.output.with_suffix(".out").read_text(), run.output.with_suffix(".err").read_text()


def wait_for_update(update, folders, runs):
    """Until each folder's train.log shows `update`; else, after 120 s or once one of `runs` ends, every run killed
    (a node left alone would wait for gloo's 30-minute timeout) and the ends of their output and errors."""
    deadline = time.monotonic() + 120
    for log in (folder / "c" / "train.log" for folder in folders):
        while f"num_updates={update}," not in (log.read_text() if log.exists() else ""):
            if any(run.poll() is not None for run in runs) or time.monotonic() > deadline:
                for run in runs:
                    if run.poll() is None:
                        os.killpg(run.pid, signal.SIGKILL)
                pytest.fail("\n".join(out[-800:] + err[-1200:] for out, err in map(output, runs)))
            time.sleep(0.1)


def ended(run, status, within=120):
    """The run's last line on stdout and on stderr, once it has ended with `status` within `within` seconds."""
    run.wait(timeout=within)
    out, err = output(run)
    assert run.returncode == status, (out[-2000:], err[-2000:])
    return out.strip().splitlines()[-1], err.strip().splitlines()[-1]


@NEEDS_CPU_PATH
def test_sigterm_to_the_recipe_stops_after_the_next_update_and_the_reruns_end_with_the_model_never_stopped(
    reversal_data, reversal_training, tmp_path
):
    """SIGTERM to the recipe's shell at update 2 (SIGUSR1's path: both trapped by common.sh's train), training as the
    README's own pipeline does (conftest's reversal_training: 6 updates of 1000 tokens). Then, from copies of what
    it left: the same command under `ulimit -f` below a checkpoint's size (a full disk): it resumes, and its save
    fails in one line, checkpoint_last.pt intact; and the same command: it ends with the model of the README's
    run, never stopped (test_resume.py's criterion: on one thread, the same tensors)."""
    stopped = with_data(tmp_path / "stopped", reversal_data)
    as_readme = dict(train="--max-update 6 --save-interval-updates 50", TOKENS_PER_STEP="1000")
    recipe, checkpoints = start(stopped, "stop", **as_readme), stopped / "c"
    wait_for_update(2, [stopped], [recipe])
    os.kill(recipe.pid, signal.SIGTERM)  # the recipe's shell, as SLURM's --signal=B:TERM@N does
    _, last = ended(recipe, preemption.EXIT_STATUS, within=60)
    assert last.startswith("test: stopped: training stopped by SIGTERM at update "), last
    assert last.endswith("; run the same command again")
    with pytest.raises(ProcessLookupError):
        os.killpg(recipe.pid, 0)  # no process of the recipe's group is left
    saved = updates_of(checkpoints / "checkpoint_last.pt")
    assert 2 <= saved < 6 and f"SIGTERM at update {saved};" in last
    assert sorted(path.name for path in checkpoints.glob("checkpoint_*_*.pt")) == []  # no interval one in between
    after_the_stop = (checkpoints / "train.log").read_text().split(f"training stops after update {saved}")[1]
    assert "begin validation" not in after_the_stop  # (an epoch ends every 2 updates: one may have validated before)

    full = tmp_path / "full"
    shutil.copytree(stopped, full, symlinks=True)
    blocks = (checkpoints / "checkpoint_last.pt").stat().st_size // 2 // 1024  # bash's ulimit -f counts KiB
    runs = start(full, "full", before=f"ulimit -f {blocks}; ", **as_readme), start(stopped, "again", **as_readme)
    line, _ = ended(runs[0], 1)
    assert re.search(
        f"Loaded checkpoint {full}/c/checkpoint_last.pt \\(epoch . @ {saved} updates\\)", output(runs[0])[0]
    )
    assert line.startswith(f"vaswani_plugin: error: writing in {full / 'c'} failed: File too large ("), line
    resumes = f"a re-run resumes from {full / 'c' / 'checkpoint_last.pt'} (update {saved})"
    assert line.endswith(f"{resumes}; make room and run the same command again")
    assert updates_of(full / "c" / "checkpoint_last.pt") == saved and not list((full / "c").glob("*.tmp"))
    assert "Traceback" not in "".join(output(runs[0]))  # fairseq logs one before raising: the line says it
    ended(runs[1], 0)
    final = torch.load(checkpoints / "checkpoint_last.pt", weights_only=True)
    expected = torch.load(reversal_training[0] / "checkpoint_last.pt", weights_only=True)
    assert final["optimizer_history"][-1]["num_updates"] == 6 and final["model"].keys() == expected["model"].keys()
    for name, tensor in expected["model"].items():
        torch.testing.assert_close(final["model"][name], tensor, msg=name)


def training_processes(run):
    """fairseq-train's processes in the run's group (itself and its data workers)."""
    listed = subprocess.run(["ps", "-e", "-o", "pid=,pgid=,args="], capture_output=True, text=True).stdout.splitlines()
    return [int(line.split()[0]) for line in listed if int(line.split()[1]) == run.pid and "fairseq_cli.train" in line]


@NEEDS_CPU_PATH
def test_a_signal_to_one_node_stops_both_and_a_frozen_node_ends_the_other(reversal_data, tmp_path):
    """Two runs of two nodes at once, node 1 hit at update 3. A simulated srun step (srun's variables, a stand-in
    scontrol recording what it is asked; test_data_parallel.py's), the job allowing a requeue: SIGUSR1 to every
    process of node 1's recipe (its shell, recipes/training.py, fairseq-train, its data workers), none to node 0: the
    flag, summed in fairseq's all-reduce, stops both after the same update; both exit 75, and run 0 requeues the job.
    NUM_NODES=2 with STALL_MINUTES=0.1 (6 s): node 1's fairseq-train frozen (SIGSTOP): node 0's watchdog ends it in
    one line naming rank 1 and the checkpoint a re-run resumes from (tools/watchdog.py); node 1's fairseq-train then
    killed: its recipe says so. (A rank killed outright, whose peers' collective fails at once: test_watchdog.py.)"""
    from test_data_parallel import free_port, slurm_step

    signalled, frozen = (with_data(tmp_path / name, reversal_data) for name in ("signal", "frozen"))
    stub, port = scontrol(signalled, requeue=1), free_port()
    steps = [slurm_step(2, 2, rank, signalled, MASTER_PORT=port, STALL_MINUTES="1") for rank in (0, 1)]
    train = "--max-update 400 --save-interval-updates 50"  # neither ends before the other reaches update 3
    nodes = {signalled: [start(signalled, f"node{rank}", train, **dict(step, PATH=f"{stub}:{os.environ['PATH']}"))
                         for rank, step in enumerate(steps)]}  # fmt: skip
    settings = dict(NUM_NODES="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), STALL_MINUTES="0.1")
    train = "--max-update 400 --save-interval-updates 2"
    nodes[frozen] = [start(frozen, f"node{rank}", train, NODE_RANK=str(rank), **settings) for rank in (0, 1)]
    wait_for_update(3, list(nodes), [run for runs in nodes.values() for run in runs])
    os.killpg(nodes[signalled][1].pid, signal.SIGUSR1)
    os.kill(min(training_processes(nodes[frozen][1])), signal.SIGSTOP)

    said = [ended(node, preemption.EXIT_STATUS)[1] for node in nodes[signalled]]
    update = json.loads((signalled / "c" / "stopped.json").read_text())["update"]
    assert updates_of(signalled / "c" / "checkpoint_last.pt") == update >= 3
    stopped, again = "test: stopped: training stopped by ", "SLURM job 4242 is requeued by its first run"
    assert said[1] == f"{stopped}SIGUSR1 at update {update}; {again} where the job allows it"
    # node 0 received none: its line names what a rank's marker says (SIGUSR1, or that another rank received one)
    requeued = f" at update {update}; SLURM job 4242 requeued: it resumes when SLURM starts it again"
    assert said[0] in (f"{stopped}SIGUSR1{requeued}", f"{stopped}a signal to another rank{requeued}")
    assert (signalled / "asked").read_text().splitlines()[-2:] == ["show job -o 4242", "requeue 4242"]

    line, _ = ended(nodes[frozen][0], 1, within=60)
    assert line.startswith("vaswani_plugin: error: rank 0 made no training step for 0.1 minutes (STALL_MINUTES=0.1)")
    assert f": rank 1 ({socket.gethostname()}, pid " in line and " stopped answering; the last checkpoint: " in line
    assert f"{frozen / 'c'}/checkpoint_last.pt (update " in line
    assert line.endswith("; ending this process: run the same command again once every node answers")
    for pid in training_processes(nodes[frozen][1]):
        os.kill(pid, signal.SIGKILL)
    _, line = ended(nodes[frozen][1], 1)
    again = f"run the same command again (it resumes from {frozen / 'c'})"
    assert line == f"test: error: fairseq-train was ended by SIGKILL; {again}"


def scontrol(folder, requeue):
    """A folder holding a stand-in `scontrol`: it records what it is asked in FOLDER/asked, names 127.0.0.1 as the
    step's hosts and shows job 4242 with Requeue=REQUEUE."""
    stub = folder / "scontrol-stub"
    stub.mkdir()
    shown = f"JobId=4242 JobName=x Requeue={requeue} Restarts=0"
    script = f'#!/bin/sh\necho "$*" >> {folder / "asked"}\n[ "$1 $2" = "show hostnames" ] && echo 127.0.0.1\n'
    (stub / "scontrol").write_text(script + f'[ "$1 $2" = "show job" ] && echo "{shown}"\nexit 0\n')
    (stub / "scontrol").chmod(0o755)
    return stub


@pytest.mark.parametrize("allowed", [True, False])
def test_run_0_of_a_slurm_job_that_allows_it_requeues_it(allowed, tmp_path, monkeypatch):
    """recipes/training.py's requeue, in process, with a stand-in scontrol that records what it is asked."""
    from recipes import stages, training

    asked = tmp_path / "asked"
    monkeypatch.setenv("PATH", f"{scontrol(tmp_path, 1 if allowed else 0)}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    said = training.requeue(stages.Run(tmp_path, rank=0))
    if allowed:
        assert said == "SLURM job 4242 requeued: it resumes when SLURM starts it again"
        assert asked.read_text().splitlines() == ["show job -o 4242", "requeue 4242"]
    else:
        assert said == "SLURM job 4242 does not allow requeueing (sbatch --requeue): submit it again"
        assert asked.read_text().splitlines() == ["show job -o 4242"]
    asked.unlink()
    said = "SLURM job 4242 is requeued by its first run where the job allows it"
    assert training.requeue(stages.Run(tmp_path, rank=1)) == said and not asked.exists()
    monkeypatch.delenv("SLURM_JOB_ID")
    assert training.requeue(stages.Run(tmp_path, rank=0)) == "run the same command again" and not asked.exists()
