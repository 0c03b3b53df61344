"""Data-parallel training on CPU through the recipes' multi-node variables: two processes on one machine.

recipes/wmt14_en_de_base.sh runs twice at once on the tiny offline WMT14 mirror (tests/wmt_mirror.py), as
NODE_RANK 0 and 1 of NUM_NODES=2 sharing one WORK_DIR and DATA_DIR, as nodes share a file system. A third,
one-process run (NUM_NODES unset) on the same prepared data is the reference: with TOKENS_PER_STEP fixed it
takes --update-freq 2 where each of the two processes takes 1, so a step of either holds the same batches
(fairseq deals an epoch's batches out to the ranks in turn), and with dropout off every update must log the
same loss. The epoch has an odd number of batches, so its last step holds one batch: the one process's group
of one, and rank 0's batch beside rank 1's empty one.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fairseq.data import Dictionary, LanguagePairDataset
from fairseq.data.indexed_dataset import MMapIndexedDataset

from conftest import lane_job
from test_recipes import NEEDS_CPU_PATH, REPO, TINY, hypotheses, run_common, run_recipe, tiny_env
from vaswani_plugin.precision import bf16_autocast_enabled
from wmt_mirror import build_mirror

# Batches of at most 4,000 tokens: the mirror's 735 training pairs make 5 of them, 3 updates of 2 batches (the
# last of one) an epoch, so MAX_UPDATE=4 also starts the second epoch. No validation on the 3,000 dev sentences.
SETTINGS = dict(MAX_UPDATE=4, TOKENS_PER_STEP=8000, MAX_TOKENS_PER_GPU=4000,
                EXTRA_TRAIN_ARGS=f"{TINY} --dropout 0 --log-format json --log-interval 1 --disable-validation")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_node(rank: int, port: int, root: Path) -> subprocess.Popen:
    """One "node" of the recipe in the background, as run_recipe runs it, its output in root/node{rank}.*."""
    settings = tiny_env(root / "work", root / "raw", root / "data", NUM_NODES=2, NODE_RANK=rank, NUM_GPUS=1,
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **SETTINGS)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", PYTHON=sys.executable,
               OMP_NUM_THREADS="1", **settings)
    with open(root / f"node{rank}.out", "w") as out, open(root / f"node{rank}.err", "w") as err:
        return subprocess.Popen(["bash", str(REPO / "recipes" / "wmt14_en_de_base.sh")], env=env, stdout=out,
                                stderr=err, cwd=REPO, start_new_session=True)


def wait_for(nodes, timeout=600):
    """Wait for every node; once one fails (or time is up), stop the others, which would otherwise wait for it
    until gloo's 30-minute timeout. Returns the exit codes."""
    deadline = time.monotonic() + timeout
    while any(node.poll() is None for node in nodes):
        if time.monotonic() > deadline or any(node.returncode for node in nodes):
            for node in nodes:
                if node.poll() is None:
                    os.killpg(node.pid, signal.SIGKILL)  # the recipe's bash and its python children
                    node.wait()
            break
        time.sleep(0.5)
    return [node.returncode for node in nodes]


@lane_job
def data_parallel_runs(tmp_path_factory, lane):
    """Two nodes from nothing, then the one-process reference on the data they prepared (its training only).
    Returns (root, [node 0's and node 1's (stdout, stderr)], the reference's result)."""
    root = tmp_path_factory.mktemp("data_parallel")
    build_mirror(root / "raw", "en-de")
    port = free_port()
    codes = wait_for([start_node(rank, port, root) for rank in (0, 1)])
    nodes = [((root / f"node{rank}.out").read_text(), (root / f"node{rank}.err").read_text()) for rank in (0, 1)]
    for rank, code in enumerate(codes):
        assert code == 0, f"node {rank} failed ({code}):\n{nodes[rank][1][-4000:]}"
    one = run_recipe("wmt14_en_de_base.sh", tiny_env(root / "one", root / "raw", root / "data", STOP_AFTER="train",
                                                     **SETTINGS))
    return root, nodes, one


def updates(train_log: Path):
    """fairseq's json log line of every update, as a dict of numbers."""
    lines = re.findall(r"\| train_inner \| (\{.*\})$", train_log.read_text(), re.M)
    return [{key: float(value) for key, value in json.loads(line).items()} for line in lines]


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("data_parallel_runs")
def test_two_cpu_processes_train_then_node_0_averages_translates_and_scores(lane):
    root, ((out0, err0), (out1, err1)), _ = lane["data_parallel_runs"].result()
    work = root / "work"

    # One node prepared the shared DATA_DIR; the other waited for its lock, then found every step done.
    prepared, waited = sorted((err0, err1), key=lambda err: "another run is using" in err)
    assert "prepare: another run is using" in waited, (err0, err1)
    assert not re.search(r"^\[\d+/\d+\] .*: done before, skipping", prepared, re.M), prepared
    skipped = re.findall(r"^\[\d+/(\d+)\] .*: done before, skipping", waited, re.M)
    assert skipped and len(skipped) == int(skipped[0]), waited

    # Both trained, in one process each, joined over TCP; one log per node, never interleaved.
    for err in (err0, err1):
        assert "batch: 2 worker(s) x 4000 tokens x update-freq 1 ~ 8000 tokens per step" in err
    train_log = (work / "checkpoints" / "train.log").read_text()
    assert "'distributed_world_size': 2" in train_log and "'distributed_backend': 'gloo'" in train_log
    assert "initialized host" in train_log and "as rank 0" in train_log
    assert len(updates(work / "checkpoints" / "train.log")) == 4
    assert "train_inner" not in (work / "checkpoints" / "train.node1.log").read_text()

    # Node 0 alone goes on: both BLEU lines, every newstest2014 sentence, the cost of 2 processes.
    assert "node 1: training finished; node 0 averages, translates and scores" in err1
    assert "stage average" not in err1 and "BLEU" not in out1 and "Training cost" not in out1
    assert (work / "checkpoints" / "checkpoint_average.pt").exists()
    assert len(hypotheses(work / "newstest2014.generate.txt")) == 3003
    assert re.search(r"^BLEU \(tokenised, compound-split\) = \d+\.\d+ ", out0, re.M), out0
    assert re.search(r"^sacreBLEU = \d+\.\d+ .*nrefs:1\|case:mixed", out0, re.M), out0
    assert re.search(r"^sentences = 3003$", out0, re.M), out0
    assert re.search(r"^Training cost: \d+ s x 2 GPUs;", out0, re.M), out0


def epoch_batches(data_bin: Path, max_tokens: int) -> int:
    """The batches of an epoch of the training set, made as fairseq makes them (sorted by length, packed)."""
    dictionary = Dictionary.load(str(data_bin / "dict.en.txt"))
    source, target = (MMapIndexedDataset(str(data_bin / f"train.en-de.{lang}")) for lang in ("en", "de"))
    dataset = LanguagePairDataset(source, source.sizes, dictionary, target, target.sizes, dictionary)
    return len(dataset.batch_by_size(dataset.ordered_indices(), max_tokens=max_tokens))


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("data_parallel_runs")
def test_two_processes_update_as_one_with_twice_the_update_freq(lane):
    root, ((_, err0), _), one = lane["data_parallel_runs"].result()
    assert "batch: 2 worker(s) x 4000 tokens x update-freq 1 ~ 8000 tokens per step" in err0
    assert "batch: 1 worker(s) x 4000 tokens x update-freq 2 ~ 8000 tokens per step" in one.stderr
    assert "STOP_AFTER=train: stopping here" in one.stderr and not (root / "one" / "checkpoints" /
                                                                     "checkpoint_average.pt").exists()
    two_log, one_log = root / "work" / "checkpoints" / "train.log", root / "one" / "checkpoints" / "train.log"
    assert "'update_freq': [1]" in two_log.read_text() and "'update_freq': [2]" in one_log.read_text()

    # The epoch ends on a step of one batch, and the run goes on into the next epoch.
    batches = epoch_batches(root / "data" / "data-bin", max_tokens=4000)
    assert batches % 2 == 1, f"{batches} batches an epoch: choose MAX_TOKENS_PER_GPU for an odd number"
    per_epoch = (batches + 1) // 2
    sentences = len(MMapIndexedDataset(str(root / "data" / "data-bin" / "train.en-de.en")))
    two, one = updates(two_log), updates(one_log)
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


NODES = dict(NUM_NODES="2", NODE_RANK="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")


@pytest.mark.parametrize("gpus,settings,message", [
    (0, {**NODES, "MASTER_PORT": ""}, "NUM_NODES=2 needs MASTER_ADDR, MASTER_PORT (node 0's address and a free port) "
                                      "and NODE_RANK (0 .. NUM_NODES-1) on every node"),
    (8, {**NODES, "NODE_RANK": ""}, "NUM_NODES=2 needs MASTER_ADDR, MASTER_PORT (node 0's address and a free port) "
                                    "and NODE_RANK (0 .. NUM_NODES-1) on every node"),
    (0, {**NODES, "NODE_RANK": "2"}, "NODE_RANK=2: use 0 .. 1 (NUM_NODES=2)"),
    (8, {**NODES, "NODE_RANK": "one"}, "NODE_RANK=one: use 0 .. 1 (NUM_NODES=2)"),
    (0, {"NUM_NODES": "0"}, "NUM_NODES=0: use a number of nodes, 1 or more"),
    (0, {"NUM_GPUS": "2"}, "NUM_GPUS=2: on CPU a node trains in one process, which uses every core; for more "
                           "processes start more nodes (NUM_NODES, NODE_RANK)"),
])
def test_node_settings_are_one_line_errors(gpus, settings, message, tmp_path):
    result = run_common(tmp_path, "detect_devices", gpus=gpus, CPU="1", **settings)
    assert result.returncode == 1 and result.stderr.strip() == f"test: error: {message}"


def test_bf16_auto_chooses_autocast_for_every_cpu_process(tmp_path):
    """BF16=auto with 1 or 2 nodes: every process's fairseq-train gets --bf16-autocast auto and --cpu, and its task
    decides on the CPU it trains on: autocast where the CPU multiplies bfloat16 natively (flags faked here)."""
    command = 'detect_devices; DATA_BIN=data-bin MAX_TOKENS=1000 UPDATE_FREQ=1; echo "$WORKERS"; train "$WORK_DIR/c"'
    for settings, workers in (({}, "1"), (NODES, "2")):
        result = run_common(tmp_path, command, gpus=0, CPU="1", BF16="auto", **settings)
        assert result.returncode == 0, result.stderr
        count, fairseq_train = result.stdout.splitlines()
        assert count == workers
        assert " --task vaswani_translation --bf16-autocast auto " in fairseq_train and " --cpu" in fairseq_train
    assert bf16_autocast_enabled("auto", "cpu", flags=frozenset({"avx2", "avx512_bf16"})) == \
        (True, "--bf16-autocast auto: this CPU has avx512_bf16")
