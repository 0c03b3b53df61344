"""Data-parallel training on CPU through the recipes, started the three ways users start it: as the tasks of a SLURM
step, under torchrun, and by hand on every node (NUM_NODES, NODE_RANK).

recipes/wmt14_en_de_base.sh runs on the tiny offline WMT14 mirror (benchmarks/wmt_mirror.py), all runs of a job
sharing one WORK_DIR and DATA_DIR, as nodes share a file system:
- a simulated srun step of two tasks on one node (SLURM_* variables as srun sets them, a stub `scontrol` on PATH
  that names 127.0.0.1, MASTER_PORT given) prepares the data from nothing and trains;
- `torchrun --nproc_per_node 2 --no-python bash RECIPE` trains on the same data, its dev BLEU summed over both;
- a one-process run (no launcher) is the reference: with TOKENS_PER_STEP fixed it takes --update-freq 2 where each
  of two workers takes 1, so a step of either holds the same batches (fairseq deals an epoch's batches out to the
  ranks in turn), and with dropout off every update must log the same loss. The epoch has an odd number of
  batches, so its last step holds one batch: the one process's group of one, and rank 0's batch beside rank 1's
  empty one;
- three workers (NUM_NODES=3, one a node) train, then node 0 averages, translates every newstest2014 sentence and
  scores.
"""

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import lane_job
from doc_blocks import block, commands, substituted
from fairseq.data import Dictionary, LanguagePairDataset
from fairseq.data.indexed_dataset import MMapIndexedDataset
from test_recipes import (
    CPU_ONLY,
    LAUNCHED,
    NEEDS_CPU_PATH,
    REPO,
    TINY,
    data_bin,
    hypotheses,
    launched,
    run_common,
    tiny_env,
)
from wmt_mirror import build_mirror, newstest2014_sentences

from vaswani_plugin.precision import bf16_autocast_enabled

# Batches of at most 4,000 tokens: the mirror's 735 training pairs make 5 of them, 3 updates of 2 batches (the
# last of one) an epoch, so MAX_UPDATE=4 also starts the second epoch. No validation on the dev sentences (the
# mirror's part of the newstest sets: wmt_mirror.py).
SETTINGS = dict(
    MAX_UPDATE=4,
    TOKENS_PER_STEP=8000,
    MAX_TOKENS_PER_GPU=4000,
    STOP_AFTER="train",
    EXTRA_TRAIN_ARGS=f"{TINY} --dropout 0 --log-format json --log-interval 1 --disable-validation",
)
# The torchrun pair also validates, at each checkpoint and epoch's end, on 3 newstest2013 sentences a batch each, the
# last time with BLEU (DEV_SCORE): rank 0 validates two batches, rank 1 one and fairseq's stand-in batch, which must
# count nothing. (Validation draws no random numbers: the pair's updates stay the one process's.)
VALIDATING_PAIR = dict(
    SETTINGS,
    DEV_SCORE_SENTENCES="3",
    DEV_SCORE_EVERY="4",
    EXTRA_TRAIN_ARGS=SETTINGS["EXTRA_TRAIN_ARGS"].replace("--disable-validation", "--batch-size-valid 1"),
)
# NODE_COUNT workers of 1,000 tokens, one a node: three, more than the docs' two and an odd count (each worker is a
# fairseq process of about 2 CPU-s before its first step: eight cost five more). Interval checkpoints are averaged.
# Greedy: the translation stage is what node 0 alone runs; every sentence is still translated and scored.
NODE_COUNT = 3
ON_NODES = dict(
    MAX_UPDATE=4,
    TOKENS_PER_STEP=1000 * NODE_COUNT,
    EXTRA_TRAIN_ARGS=f"{TINY} --disable-validation",
    EXTRA_GENERATE_ARGS="--max-len-a 0 --max-len-b 3 --beam 1",
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def slurm_task(rank: int, tasks: int, port: int, stub_dir: Path) -> dict:
    """What srun sets for task RANK of a step of TASKS tasks on one node (job 4242), with scontrol's stub on PATH."""
    return dict(
        SLURM_JOB_ID=4242,
        SLURM_STEP_ID=0,
        SLURM_JOB_NODELIST="gpu01",
        SLURM_STEP_NODELIST="gpu01",
        SLURM_NNODES=1,
        SLURM_JOB_NUM_NODES=1,
        SLURM_STEP_NUM_NODES=1,
        SLURM_NTASKS=tasks,
        SLURM_STEP_NUM_TASKS=tasks,
        SLURM_STEP_TASKS_PER_NODE=tasks,
        SLURM_PROCID=rank,
        SLURM_LOCALID=rank,
        SLURM_NODEID=0,
        MASTER_PORT=port,
        PATH=f"{stub_dir}:{os.environ['PATH']}",
    )


def stub_scontrol(root: Path) -> Path:
    """A folder holding an `scontrol` that answers `scontrol show hostnames LIST` with 127.0.0.1."""
    stub = root / "bin"
    stub.mkdir(exist_ok=True)
    (stub / "scontrol").write_text('#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && echo 127.0.0.1\n')
    (stub / "scontrol").chmod(0o755)
    return stub


def start(root: Path, name: str, settings: dict, command=(), shell=None) -> subprocess.Popen:
    """The base recipe in the background (behind COMMAND, a launcher; or SHELL, a documentation block's line that
    runs it), as test_recipes.run_recipe runs it, its output in root/NAME.out and root/NAME.err."""
    env = dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1", **CPU_ONLY)
    env.update({key: str(value) for key, value in settings.items()})  # PATH too, with scontrol's stub
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    with open(root / f"{name}.out", "w") as out, open(root / f"{name}.err", "w") as err:
        argv = ["bash", "-c", shell] if shell else [*command, "bash", str(REPO / "recipes" / "wmt14_en_de_base.sh")]
        return subprocess.Popen(argv, env=env, stdout=out, stderr=err, cwd=REPO, start_new_session=True)


def wait_for(root: Path, runs: dict, timeout=600):
    """Wait for every run (name -> process); once one fails (or time is up), stop the others, which would otherwise
    wait for it until gloo's 30-minute timeout. Returns name -> (stdout, stderr), after asserting exit status 0."""
    deadline = time.monotonic() + timeout
    while any(run.poll() is None for run in runs.values()):
        if time.monotonic() > deadline or any(run.returncode for run in runs.values()):
            for run in runs.values():
                if run.poll() is None:
                    os.killpg(run.pid, signal.SIGKILL)  # the recipe's bash and its python children
                    run.wait()
            break
        time.sleep(0.5)
    outputs = {name: ((root / f"{name}.out").read_text(), (root / f"{name}.err").read_text()) for name in runs}
    for name, run in runs.items():
        assert run.returncode == 0, f"{name} failed ({run.returncode}):\n{outputs[name][1][-4000:]}"
    return outputs


@lane_job
def data_parallel_runs(tmp_path_factory, lane):
    """Two SLURM tasks from nothing; then, at once, on the data they prepared: torchrun's two workers and the
    one-process reference (training only), and NODE_COUNT NUM_NODES workers (the whole recipe, in root/nodes). At once,
    as the lane is the suite's longest path and these runs mostly start Python. Returns (root, {run name:
    (stdout, stderr)})."""
    root = tmp_path_factory.mktemp("data_parallel")
    build_mirror(root / "raw", "en-de", part=True)
    stub, port = stub_scontrol(root), free_port()
    runs = {
        f"task{rank}": start(
            root,
            f"task{rank}",
            {**tiny_env(root / "slurm", root / "raw", root / "data", **SETTINGS), **slurm_task(rank, 2, port, stub)},
        )
        for rank in (0, 1)
    }
    outputs = wait_for(root, runs)
    torchrun = [
        str(Path(sys.executable).parent / "torchrun"),
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        "--no-python",
    ]
    pair = tiny_env(root / "torchrun", root / "raw", root / "data", **VALIDATING_PAIR)
    runs = {
        "torchrun": start(root, "torchrun", pair, torchrun),
        "one": start(root, "one", tiny_env(root / "one", root / "raw", root / "data", **SETTINGS)),
    }
    # docs/recipes.md's two NUM_NODES lines, made NODE_COUNT as a user would: the same line on each, its NODE_RANK.
    first, second = commands(block(REPO / "docs" / "recipes.md", "test:num-nodes"))
    assert second == first.replace("NODE_RANK=0", "NODE_RANK=1")
    port = free_port()
    on_nodes = tiny_env(root / "nodes", root / "raw", root / "data", **ON_NODES)
    nodes = {
        f"node{rank}": start(
            root,
            f"node{rank}",
            on_nodes,
            shell=substituted(
                first,
                {
                    "NUM_NODES=2": f"NUM_NODES={NODE_COUNT}",
                    "NODE_RANK=0": f"NODE_RANK={rank}",
                    "MASTER_PORT=29500": f"MASTER_PORT={port}",
                },
            ),
        )
        for rank in range(NODE_COUNT)
    }
    try:
        outputs.update(wait_for(root, runs))
    except AssertionError:
        for run in nodes.values():  # waiting for each other, for gloo's 30 minutes otherwise
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        raise
    # Beside the nodes: the torchrun pair's WORK_DIR again, on one process, two updates on (docs/recipes.md: the
    # hardware layout may change, the tokens per step kept).
    resumed = tiny_env(root / "torchrun", root / "raw", root / "data", **{**VALIDATING_PAIR, "MAX_UPDATE": 6})
    nodes["resumed"] = start(root, "resumed", resumed)
    outputs.update(wait_for(root, nodes))
    return root, outputs


def updates(train_log: Path):
    """fairseq's json log line of every update, as a dict of numbers."""
    lines = re.findall(r"\| train_inner \| (\{.*\})$", train_log.read_text(), re.M)
    return [{key: float(value) for key, value in json.loads(line).items()} for line in lines]


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("data_parallel_runs")
def test_two_slurm_tasks_find_rank_world_size_and_master_from_slurm(lane):
    root, outputs = lane["data_parallel_runs"].result()
    (_, err0), (_, err1) = outputs["task0"], outputs["task1"]
    port = re.search(r"master 127\.0\.0\.1:(\d+)$", err0, re.M).group(1)
    for rank, err in enumerate((err0, err1)):
        assert re.search(rf"\btask {rank}\b.*127\.0\.0\.1:{port}$", err, re.M)
        assert "batch: 2 worker(s) x 4000 tokens x update-freq 1 ~ 8000 tokens per step" in err
        assert "STOP_AFTER=train: stopping here" in err

    # One task prepared the shared DATA_DIR; the other waited for its lock, then found every step done.
    prepared, waited = sorted((err0, err1), key=lambda err: "another run is using" in err)
    assert "prepare: another run is using" in waited, (err0, err1)
    assert not re.search(r"^\[\d+/\d+\] .*: done before, skipping", prepared, re.M), prepared
    skipped = re.findall(r"^\[\d+/(\d+)\] .*: done before, skipping", waited, re.M)
    assert skipped and len(skipped) == int(skipped[0]), waited

    # Both trained in one process each, joined over TCP at scontrol's first host and MASTER_PORT; one log a task.
    checkpoints = root / "slurm" / "checkpoints"
    task0, task1 = (checkpoints / "train.log").read_text(), (checkpoints / "train.task1.log").read_text()
    for rank, log in enumerate((task0, task1)):
        assert f"[wmt14_en_de_base] task {rank}: world size 2 (started as slurm)" in log
        assert f"distributed init (rank {rank}): tcp://127.0.0.1:{port}" in log
        assert re.search(rf"initialized host \S+ as rank {rank}$", log, re.M), log[-3000:]
    assert "'distributed_world_size': 2" in task0 and "'distributed_backend': 'gloo'" in task0
    assert "train_inner" not in task1


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("data_parallel_runs")
def test_torchrun_workers_take_their_ranks_from_torchrun(lane):
    root, outputs = lane["data_parallel_runs"].result()
    checkpoints = root / "torchrun" / "checkpoints"
    rank0, rank1 = (checkpoints / "train.log").read_text(), (checkpoints / "train.rank1.log").read_text()
    for rank, log in enumerate((rank0, rank1)):
        assert f"[wmt14_en_de_base] rank {rank}: world size 2 (started as torchrun)" in log
        assert f"distributed init (rank {rank}): env://" in log
    assert outputs["torchrun"][1].count("STOP_AFTER=train: stopping here") == 2

    # Validated at the checkpoints (updates 2 and 4) and the epoch's end (3); the dev set's statistics summed over
    # both workers at update 4 only: its 3 sentences, each counted once (rank 1's stand-in batch none).
    valid = [json.loads(line) for line in re.findall(r"\| valid \| (\{.*\})$", rank0, re.M)][:3]  # then resumed's
    assert [
        (record["valid_num_updates"], record.get("valid_dev_sentences"), "valid_bleu" in record) for record in valid
    ] == [("2", None, False), ("3", None, False), ("4", "3", True)], valid


def epoch_batches(data_bin: Path, max_tokens: int) -> int:
    """The batches of an epoch of the training set, made as fairseq makes them (sorted by length, packed)."""
    dictionary = Dictionary.load(str(data_bin / "dict.en.txt"))
    source, target = (MMapIndexedDataset(str(data_bin / f"train.en-de.{lang}")) for lang in ("en", "de"))
    dataset = LanguagePairDataset(source, source.sizes, dictionary, target, target.sizes, dictionary)
    return len(dataset.batch_by_size(dataset.ordered_indices(), max_tokens=max_tokens))


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("data_parallel_runs")
@pytest.mark.parametrize("launch", ["slurm", "torchrun"])
def test_two_workers_update_as_one_with_twice_the_update_freq(lane, launch):
    root, outputs = lane["data_parallel_runs"].result()
    one_err = outputs["one"][1]
    assert "batch: 1 worker(s) x 4000 tokens x update-freq 2 ~ 8000 tokens per step" in one_err
    assert (
        "STOP_AFTER=train: stopping here" in one_err
        and not (root / "one" / "checkpoints" / "checkpoint_average.pt").exists()
    )
    two_log, one_log = root / launch / "checkpoints" / "train.log", root / "one" / "checkpoints" / "train.log"
    assert "'update_freq': [1]" in two_log.read_text() and "'update_freq': [2]" in one_log.read_text()

    # The epoch ends on a step of one batch, and the run goes on into the next epoch.
    batches = epoch_batches(root / "data" / "data-bin", max_tokens=4000)
    assert batches % 2 == 1, f"{batches} batches an epoch: choose MAX_TOKENS_PER_GPU for an odd number"
    per_epoch = (batches + 1) // 2
    sentences = len(MMapIndexedDataset(str(root / "data" / "data-bin" / "train.en-de.en")))
    # The first MAX_UPDATE (the torchrun pair's folder goes on later: test_two_workers_resumed_by_one_...).
    two, one = updates(two_log)[: int(SETTINGS["MAX_UPDATE"])], updates(one_log)
    assert len(two) == len(one) == int(SETTINGS["MAX_UPDATE"]) > per_epoch
    for run in (two, one):
        assert [update["epoch"] for update in run] == [1] * per_epoch + [2] * (len(run) - per_epoch)
        assert sum(update["bsz"] for update in run[:per_epoch]) == sentences  # each once, none left out

    # Same sentences and tokens each update; the same loss and gradient norm to the log's 3 decimals (the sums
    # run in another order, which can move a value across a rounding boundary).
    for two_update, one_update in zip(two, one):
        assert (two_update["bsz"], two_update["wpb"]) == (one_update["bsz"], one_update["wpb"])
        for key in ("loss", "nll_loss", "gnorm"):
            assert two_update[key] == pytest.approx(one_update[key], abs=1.001e-3), (key, two_update, one_update)


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("data_parallel_runs")
def test_two_workers_resumed_by_one_go_on_where_the_epoch_stopped(lane):
    """Stopped at update 4, one batch of each worker into epoch 2 (3 updates an epoch); one process goes on with the
    epoch's other batches: every sentence once in epoch 2, which ends at update 6 (fairseq's own position, one batch
    of one process, would read the second batch twice)."""
    root, outputs = lane["data_parallel_runs"].result()
    assert "stage train: resuming from update 4" in outputs["resumed"][1]
    log = updates(root / "torchrun" / "checkpoints" / "train.log")
    sentences = len(MMapIndexedDataset(str(root / "data" / "data-bin" / "train.en-de.en")))
    assert [update["epoch"] for update in log] == [1, 1, 1, 2, 2, 2]
    assert sum(update["bsz"] for update in log[3:]) == sentences


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("data_parallel_runs")
def test_workers_on_nodes_train_then_node_0_averages_translates_and_scores(lane):
    root, outputs = lane["data_parallel_runs"].result()
    checkpoints = root / "nodes" / "checkpoints"
    for rank in range(NODE_COUNT):
        out, err = outputs[f"node{rank}"]
        assert (
            f"batch: {NODE_COUNT} worker(s) x 1000 tokens x update-freq 1 ~ {1000 * NODE_COUNT} tokens per step" in err
        )
        log = (checkpoints / ("train.log" if rank == 0 else f"train.node{rank}.log")).read_text()
        assert f"[wmt14_en_de_base] node {rank}: world size {NODE_COUNT} (started as nodes)" in log
        assert re.search(rf"initialized host \S+ as rank {rank}$", log, re.M), log[-3000:]
        if rank:
            assert "stage average" not in err and "BLEU" not in out and "Training cost" not in out
            assert "train_inner" not in log
    train_log = (checkpoints / "train.log").read_text()
    assert f"'distributed_world_size': {NODE_COUNT}," in train_log and "'max_tokens': 1000" in train_log
    assert re.findall(r"\| train \| epoch \d+ \|.*\| num_updates (\d+) \|", train_log)[-1] == str(
        ON_NODES["MAX_UPDATE"]
    )

    # Node 0 alone goes on: the average of the last two checkpoints, every newstest2014 sentence, both BLEU
    # lines, the cost of NODE_COUNT workers.
    out0 = outputs["node0"][0]
    assert (checkpoints / "checkpoint_average.pt").exists()
    sentences = newstest2014_sentences(root / "raw", "en-de")
    assert len(hypotheses(root / "nodes" / "newstest2014.generate.txt")) == sentences
    assert re.search(r"^BLEU \(tokenised, compound-split\) = \d+\.\d+ ", out0, re.M), out0
    assert re.search(r"^sacreBLEU = \d+\.\d+ .*nrefs:1\|case:mixed", out0, re.M), out0
    assert re.search(rf"^sentences = {sentences}$", out0, re.M), out0
    assert re.search(rf"^Training cost: \d+ s x {NODE_COUNT} GPUs;", out0, re.M), out0


NODES = dict(NUM_NODES="2", NODE_RANK="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")


@pytest.mark.parametrize(
    "gpus,settings,message",
    [
        (
            0,
            {**NODES, "MASTER_PORT": ""},
            "NUM_NODES=2 needs MASTER_ADDR, MASTER_PORT (node 0's address and a free port) "
            "and NODE_RANK (0 .. NUM_NODES-1) on every node",
        ),
        (
            8,
            {**NODES, "NODE_RANK": ""},
            "NUM_NODES=2 needs MASTER_ADDR, MASTER_PORT (node 0's address and a free port) "
            "and NODE_RANK (0 .. NUM_NODES-1) on every node",
        ),
        (0, {**NODES, "NODE_RANK": "2"}, "NODE_RANK=2: use 0 .. 1 (NUM_NODES=2)"),
        (8, {**NODES, "NODE_RANK": "one"}, "NODE_RANK=one: use 0 .. 1 (NUM_NODES=2)"),
        (0, {"NUM_NODES": "0"}, "NUM_NODES=0: use a number of nodes, 1 or more"),
        (
            0,
            {"NUM_GPUS": "2"},
            "NUM_GPUS=2: on CPU a node trains in one process, which uses every core; for more "
            "processes start more nodes (NUM_NODES, NODE_RANK)",
        ),
    ],
)
def test_node_settings_are_one_line_errors(gpus, settings, message, tmp_path):
    result = run_common(tmp_path, "detect_devices", gpus=gpus, CPU="1", **settings)
    assert result.returncode == 1 and result.stderr.strip() == f"test: error: {message}"


def test_bf16_auto_chooses_autocast_for_every_cpu_process(tmp_path):
    """BF16=auto with 1 or 2 nodes: every process's fairseq-train gets --bf16-autocast auto and --cpu, and its task
    decides on the CPU it trains on: autocast where the CPU multiplies bfloat16 natively (flags faked here)."""
    command = 'stages train; detect_devices; echo "$WORKERS"; train "$WORK_DIR/c"'
    data_bin(tmp_path)
    for settings, workers in (({}, "1"), (NODES, "2")):
        if settings:  # node 1 trains as node 0 decided for this launch (recipes/stages.py)
            (tmp_path / ".stages" / "train.decision").write_text("nodes 2 via 127.0.0.1:29500\trun\n")
        result = run_common(tmp_path, command, gpus=0, CPU="1", BF16="auto", **settings)
        assert result.returncode == 0, result.stderr
        count, *world, fairseq_train = result.stdout.splitlines()
        assert count == workers
        assert world == ([] if workers == "1" else ["[test] node 1: world size 2 (started as nodes)"])
        assert " --task vaswani_translation --bf16-autocast auto " in fairseq_train and " --cpu" in fairseq_train
    assert bf16_autocast_enabled("auto", "cpu", flags=frozenset({"avx2", "avx512_bf16"})) == (
        True,
        "--bf16-autocast auto: this CPU has avx512_bf16",
    )


def slurm_step(tasks: int, nodes: int, rank: int, tmp_path: Path, **more) -> dict:
    """srun's variables for task RANK of TASKS on NODES nodes (tasks spread evenly), scontrol's stub on PATH."""
    per_node = tasks // nodes if tasks % nodes == 0 else 1
    settings = slurm_task(rank, tasks, 29500, stub_scontrol(tmp_path))
    settings.update(
        SLURM_NNODES=nodes,
        SLURM_JOB_NUM_NODES=nodes,
        SLURM_STEP_NUM_NODES=nodes,
        SLURM_LOCALID=rank % per_node,
        SLURM_NODEID=rank // per_node,
        **more,
    )
    return {key: str(value) for key, value in settings.items()}


TORCHRUN = dict(
    RANK="5", WORLD_SIZE="8", LOCAL_RANK="5", LOCAL_WORLD_SIZE="8", MASTER_ADDR="127.0.0.1", MASTER_PORT="29400"
)


@pytest.mark.parametrize(
    "gpus,job,expected",
    [
        # One task per GPU, each seeing all of its node's GPUs: task 11 is node 1's fourth, on its GPU 3.
        (
            8,
            dict(tasks=16, nodes=2, rank=11),
            "workers=16 args=--distributed-world-size 16 --distributed-rank 11 "
            "--distributed-init-method tcp://127.0.0.1:29500 --distributed-no-spawn --device-id 3 update_freq=1 "
            "max_tokens=1563 run=task 11",
        ),
        # One GPU bound to each task (srun --gpus-per-task 1): it is the task's GPU 0.
        (
            1,
            dict(tasks=16, nodes=2, rank=11),
            "workers=16 args=--distributed-world-size 16 --distributed-rank 11 "
            "--distributed-init-method tcp://127.0.0.1:29500 --distributed-no-spawn --device-id 0 update_freq=1 "
            "max_tokens=1563 run=task 11",
        ),
        # One task per node: it starts its node's 8 workers, as NUM_NODES does.
        (
            8,
            dict(tasks=2, nodes=2, rank=1),
            "workers=16 args=--distributed-world-size 16 --distributed-init-method "
            "tcp://127.0.0.1:29500 --distributed-rank 8 update_freq=1 max_tokens=1563 run=node 1",
        ),
        # No MASTER_PORT: every task of the step derives the same one from the job's numbers (job 4242, step 0).
        (
            8,
            dict(tasks=8, nodes=1, rank=0, MASTER_PORT=""),
            "workers=8 args=--distributed-world-size 8 "
            "--distributed-rank 0 --distributed-init-method tcp://127.0.0.1:47872 --distributed-no-spawn --device-id 0 "
            "update_freq=1 max_tokens=3125 run=task 0",
        ),
        # A step of one task (srun --pty bash, say) is one node, with no master to agree on (no scontrol needed).
        (
            8,
            dict(tasks=1, nodes=1, rank=0, PATH="/usr/bin:/bin"),
            "workers=8 args=--distributed-world-size 8 update_freq=1 max_tokens=3125 run=node 0",
        ),
        # torchrun's worker 5 of 8 meets the others through torchrun's store.
        (
            8,
            "torchrun",
            "workers=8 args=--distributed-world-size 8 --distributed-rank 5 --distributed-init-method env:// "
            "--distributed-no-spawn --device-id 5 update_freq=1 max_tokens=3125 run=rank 5",
        ),
        # On CPU a task is one process, over gloo.
        (
            0,
            dict(tasks=2, nodes=1, rank=1, CPU=1),
            "workers=2 args=--distributed-world-size 2 --distributed-rank 1 "
            "--distributed-init-method tcp://127.0.0.1:29500 --distributed-no-spawn --device-id 0 "
            "--distributed-backend gloo --ddp-backend legacy_ddp --cpu update_freq=4 max_tokens=3125 run=task 1",
        ),
    ],
)
def test_launchers_give_each_worker_its_rank_device_and_master(gpus, job, expected, tmp_path):
    settings = TORCHRUN if job == "torchrun" else slurm_step(tmp_path=tmp_path, **job)
    if settings.get("MASTER_PORT") == "":
        del settings["MASTER_PORT"]
    run = LAUNCHED.replace("{batch}", "{batch} run=$RUN_NAME")
    assert launched(run_common(tmp_path, run, gpus=gpus, **settings)) == expected


@pytest.mark.parametrize(
    "gpus,job,message",
    [
        (
            8,
            dict(tasks=2, nodes=1, rank=0, PATH="/usr/bin:/bin"),
            "SLURM step of 2 task(s) on 1 node(s): scontrol is not on PATH, so the tasks cannot agree on a master; put "
            "SLURM's scontrol on PATH or set MASTER_ADDR to the first node's address",
        ),
        (
            8,
            dict(tasks=3, nodes=2, rank=0),
            "SLURM step of 3 task(s) on 2 node(s): the nodes hold different numbers of "
            "tasks; give each the same (--ntasks-per-node)",
        ),
        (
            8,
            dict(tasks=2, nodes=1, rank=2),
            "SLURM step of 2 task(s) on 1 node(s): SLURM_PROCID=2 is not one of its tasks",
        ),
        (
            8,
            dict(tasks=2, nodes=1, rank=1, NUM_NODES=2),
            "SLURM step of 2 task(s) on 1 node(s): SLURM gives the tasks their ranks; unset NUM_NODES and NODE_RANK",
        ),
        (
            4,
            dict(tasks=8, nodes=1, rank=1),
            "task 1 sees 4 GPUs, but slurm starts 8 processes a node: give each process "
            "one GPU (srun --gpus-per-task 1) or each all 8",
        ),
        (
            8,
            dict(tasks=8, nodes=1, rank=1, NUM_GPUS=4),
            "NUM_GPUS=4 but slurm starts 8 processes a node, one per GPU: unset NUM_GPUS",
        ),
        (
            8,
            "batch",
            "this SLURM job has 2 nodes but the recipe is not a task of an srun step: start it with srun "
            '(docs/recipes.md, "SLURM")',
        ),
        (8, "torchrun", "torchrun gives the workers their ranks; unset NUM_NODES and NODE_RANK"),
    ],
)
def test_a_job_whose_workers_cannot_agree_is_a_one_line_error(gpus, job, message, tmp_path):
    if job == "batch":  # the sbatch script itself, on the first of the job's 2 nodes
        settings = dict(
            SLURM_JOB_ID="4242", SLURM_JOB_NUM_NODES="2", SLURM_NNODES="2", SLURM_NTASKS="16", SLURM_PROCID="0"
        )
    elif job == "torchrun":
        settings = dict(TORCHRUN, NUM_NODES="2")
    else:
        settings = slurm_step(tmp_path=tmp_path, **job)
    result = run_common(tmp_path, "detect_devices", gpus=gpus, **settings)
    assert result.returncode == 1 and result.stderr.strip().splitlines()[-1] == f"test: error: {message}"
    assert "world size" not in result.stderr


def plan(tmp_path: Path, block_text: str, launcher: str, gpus: int = 8, **settings):
    """A docs/recipes.md block for GPUs, planned on this machine with DRY_RUN=1 and NUM_GPUS: run as written from a
    folder holding the repository's recipes/, with `launcher` (srun or torchrun) a stub that starts one of the
    workers it would (the variables in `settings` are what it would give that worker). Returns the training
    command's arguments, as the dry run prints them, and the recipe's stderr."""
    folder = tmp_path / "job"
    (folder / "bin").mkdir(parents=True)
    for name in ("recipes", "prepare", "vaswani_plugin"):
        (folder / name).symlink_to(REPO / name)
    stub = folder / "bin" / launcher
    # srun's options, or torchrun's up to --no-python, are the launcher's; what follows is the worker's command.
    skip = (
        'while [ "$1" != bash ]; do shift; done'
        if launcher == "srun"
        else 'while [ "$1" != --no-python ]; do shift; done; shift'
    )
    stub.write_text(f'#!/bin/sh\n{skip}\nexec "$@"\n')
    stub.chmod(0o755)
    env = dict(os.environ, PYTHON=sys.executable, DRY_RUN="1", NUM_GPUS=str(gpus), **settings)
    env["PATH"] = f"{folder / 'bin'}:{settings.get('PATH', os.environ['PATH'])}"
    result = subprocess.run(["bash", "-c", block_text], cwd=folder, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    (train,) = [shlex.split(line) for line in result.stdout.splitlines() if " -m fairseq_cli.train " in line]
    assert not (folder / "work").exists()  # planned: nothing prepared, trained or written
    return train[3:], result.stderr


def parsed_by_fairseq(argv):
    """fairseq-train's parser on these arguments (the plugin's options included): its namespace, or its error."""
    from fairseq import options

    at = argv.index("--user-dir") + 1  # the job folder's link to this package: the package imported here
    argv = [*argv[:at], str(Path(argv[at]).resolve()), *argv[at + 1 :]]
    return options.parse_args_and_arch(options.get_training_parser(), argv)


def test_the_sbatch_and_torchrun_blocks_plan_and_fairseq_accepts_their_arguments(tmp_path):
    """docs/recipes.md's sbatch script (2 nodes of 8 GPUs) and torchrun lines, dry runs without GPUs:
    the worker's launch plan is the one the block promises, and fairseq-train's parser accepts its arguments."""
    recipes_md = REPO / "docs" / "recipes.md"
    script = block(recipes_md, "test:sbatch")
    # srun's task 11 of 16: node 1's fourth GPU.
    argv, err = plan(tmp_path / "sbatch", script, "srun", **slurm_step(tasks=16, nodes=2, rank=11, tmp_path=tmp_path))
    args = parsed_by_fairseq(argv)
    # PRECISION unset: chosen at run time by the cards; the plan shows bf16's (the task's bfloat16 autocast).
    assert (args.arch, args.bf16_autocast, args.fp16, args.distributed_world_size, args.distributed_rank) == (
        "vaswani_transformer_big",
        "on",
        False,
        16,
        11,
    )
    assert args.device_id == 3
    assert (args.max_tokens, args.update_freq, args.max_update) == (1563, [1], 300000)
    assert args.save_dir == str(tmp_path / "sbatch" / "job" / "work" / "wmt14_en_de_big" / "checkpoints")
    assert "16 workers" in (REPO / "docs" / "recipes.md").read_text()  # what the text after the block says
    one_node, two_nodes = commands(block(recipes_md, "test:torchrun"))
    for line, world, settings in (
        (one_node, 8, TORCHRUN),
        (two_nodes, 16, dict(TORCHRUN, RANK="13", WORLD_SIZE="16", GROUP_RANK="1")),
    ):
        argv, _ = plan(tmp_path / str(world), line, "torchrun", **settings)
        args = parsed_by_fairseq(argv)
        assert (args.distributed_world_size, args.distributed_rank, args.device_id, args.max_tokens) == (
            world,
            int(settings["RANK"]),
            5,
            3125 if world == 8 else 1563,
        )
