"""recipes/launch.py in process: the launchers' variables to ranks, devices and batches (tests/test_data_parallel.py
and tests/test_recipes.py run it through recipes/common.sh, and real launches)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipes import launch

REPO = Path(__file__).resolve().parent.parent
LAUNCH_VARIABLES = (
    "SLURM_",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NUM_NODES",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NUM_GPUS",
    "CPU",
    "PRECISION",
    "FP16",
    "BF16",
    "GPU_THREADS",
    "DRY_RUN",
    "TOKENS_PER_STEP",
    "MAX_TOKENS_PER_GPU",
    "TORCHELASTIC_RUN_ID",
)


@pytest.fixture
def environment(monkeypatch, tmp_path):
    """A clean launch environment with an scontrol stub (the step's first node: n7) on PATH; returns a setter."""
    for name in list(os.environ):
        if name.startswith(LAUNCH_VARIABLES):
            monkeypatch.delenv(name)
    (tmp_path / "scontrol").write_text('#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && printf "n7\\nn8\\n"\n')
    (tmp_path / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("RECIPE", "test")

    def set_variables(**variables):
        for name, value in variables.items():
            monkeypatch.setenv(name, str(value))

    return set_variables


def slurm(tasks, nodes, procid, **more):
    per_node = tasks // nodes
    return dict(
        SLURM_JOB_ID=4242,
        SLURM_STEP_ID=1,
        SLURM_STEP_NUM_TASKS=tasks,
        SLURM_STEP_NUM_NODES=nodes,
        SLURM_PROCID=procid,
        SLURM_LOCALID=procid % per_node,
        SLURM_NODEID=procid // per_node,
        SLURM_STEP_NODELIST="n[7-8]",
        **more,
    )


def test_a_lone_run_is_node_0_of_1(environment):
    plan = launch.launcher("123")
    assert (plan.kind, plan.run_rank, plan.num_nodes, plan.task_workers) == ("nodes", 0, 1, None)
    assert plan.launch_id.startswith("nodes 1 via ") and plan.launch_id.endswith(":123")


def test_a_slurm_task_a_gpu_meets_the_others_at_the_first_node(environment):
    environment(**slurm(16, 2, 11))
    plan = launch.launcher("1")
    # The port every task derives alike: 20000 + (job * 16 + step) % 40000.
    assert plan.master_addr == "n7" and plan.master_port == str(20000 + (4242 * 16 + 1) % 40000)
    assert (plan.kind, plan.task_workers, plan.task_rank, plan.task_local, plan.tasks_per_node) == (
        "slurm",
        16,
        11,
        3,
        8,
    )
    assert plan.init_method == f"tcp://n7:{plan.master_port}" and plan.launch_id == "SLURM step 4242.1"
    devices = launch.on_gpus(plan, visible=8)  # all of the node's GPUs: its own is its place on the node
    assert devices.workers == 16 and devices.train == launch.worker(16, 11, plan.init_method, 3)
    assert launch.on_gpus(plan, visible=1).train[-1] == "0"  # one GPU bound to the task
    environment(SLURM_RESTART_COUNT=2)  # requeued: its runs decide afresh
    assert launch.launcher("1").launch_id == "SLURM step 4242.1, restart 2"


def test_a_slurm_task_a_node_is_a_node_of_num_nodes(environment):
    environment(**slurm(2, 2, 1, MASTER_PORT=29500))
    plan = launch.launcher("1")
    assert (plan.kind, plan.num_nodes, plan.node_rank, plan.run_name) == ("nodes", 2, 1, "node 1")
    devices = launch.on_gpus(plan, visible=8)
    assert devices.train == [
        "--distributed-world-size",
        "16",
        "--distributed-init-method",
        "tcp://n7:29500",
        "--distributed-rank",
        "8",
    ]


def test_torchrun_workers_meet_through_its_store(environment):
    environment(
        RANK=5, WORLD_SIZE=8, LOCAL_RANK=5, LOCAL_WORLD_SIZE=8, TORCHELASTIC_RUN_ID="r1", MASTER_ADDR="h", MASTER_PORT=1
    )
    plan = launch.launcher("1")
    assert (plan.kind, plan.init_method, plan.run_name, plan.launch_id) == (
        "torchrun",
        "env://",
        "rank 5",
        "torchrun r1 via h:1",
    )
    assert (plan.master_addr, plan.master_port) == ("h", "1")  # kept for env://, which reads them


@pytest.mark.parametrize(
    "variables,message",
    [
        (dict(NUM_NODES=2, NODE_RANK=0, MASTER_ADDR="a"), "NUM_NODES=2 needs MASTER_ADDR, MASTER_PORT"),
        (dict(NUM_NODES=2, NODE_RANK="", MASTER_ADDR="a", MASTER_PORT=1), "NUM_NODES=2 needs MASTER_ADDR, MASTER_PORT"),
        (dict(NUM_NODES="02"), "NUM_NODES=02: use a number of nodes, 1 or more"),
        (dict(NUM_NODES=2, NODE_RANK=2, MASTER_ADDR="a", MASTER_PORT=1), "NODE_RANK=2: use 0 .. 1 (NUM_NODES=2)"),
        (dict(slurm(3, 2, 0)), "the nodes hold different numbers of tasks"),
        (dict(slurm(2, 1, 0), SLURM_LOCALID=""), "SLURM_LOCALID and SLURM_NODEID must all be set"),
        (dict(slurm(8, 1, 0), NODE_RANK=0), "SLURM gives the tasks their ranks; unset NUM_NODES and NODE_RANK"),
        (dict(SLURM_JOB_NUM_NODES=2), "this SLURM job has 2 nodes but the recipe is not a task of an srun step"),
        (dict(RANK=8, WORLD_SIZE=8, LOCAL_RANK=0, LOCAL_WORLD_SIZE=8), "do not describe a worker"),
    ],
)
def test_launches_that_cannot_agree_are_refused(environment, variables, message):
    environment(**variables)
    with pytest.raises(launch.LaunchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        launch.launcher("1")


def test_cpu_processes_join_over_gloo(environment):
    environment(CPU=1, NUM_NODES=2, NODE_RANK=1, MASTER_ADDR="a", MASTER_PORT=1)
    devices = launch.on_cpu(launch.launcher("1"))
    assert devices.train == launch.worker(2, 1, "tcp://a:1", 0) + [
        "--distributed-backend",
        "gloo",
        "--ddp-backend",
        "legacy_ddp",
        "--cpu",
    ]
    assert devices.evaluate == ["--cpu"] and devices.cpu


def brute_force_batch(tokens, per_gpu, workers):
    """The fewest batches a worker (update_freq) that hold TOKENS at PER_GPU tokens each, then the smallest even
    share of the step a batch needs."""
    update_freq = next(n for n in range(1, tokens + 1) if workers * per_gpu * n >= tokens)
    max_tokens = next(m for m in range(1, per_gpu + 1) if workers * update_freq * m >= tokens)
    return update_freq, max_tokens


@pytest.mark.parametrize(
    "tokens,per_gpu,workers",
    [(25000, 4096, 1), (25000, 4096, 8), (25000, 4096, 16), (8000, 4000, 2), (2048, 2048, 3), (25000, 3125, 8)],
)
def test_a_step_holds_tokens_per_step_however_many_workers(environment, tokens, per_gpu, workers):
    """§5.1: about 25,000 tokens a step, the default from vaswani_plugin/paper.py."""
    environment(DRY_RUN=1, MAX_TOKENS_PER_GPU=per_gpu, **({} if tokens == 25000 else {"TOKENS_PER_STEP": tokens}))
    plan = launch.batch_plan(workers, "unread", default_tokens=25000)
    assert (plan["UPDATE_FREQ"], plan["MAX_TOKENS"]) == brute_force_batch(tokens, per_gpu, workers)


def test_the_plan_is_bash_assignments_and_imports_neither_torch_nor_fairseq(tmp_path):
    """`devices` on CPU=1 through bash's eval: words with spaces and parentheses stay words; the module's import
    leaves torch and fairseq out (a recipe's call costs milliseconds)."""
    assert launch.shell({"A": ["x y", "(0.9,0.98)"], "B": "it's"}) == "A=('x y' '(0.9,0.98)')\nB='it'\"'\"'s'"
    env = {name: value for name, value in os.environ.items() if not name.startswith(LAUNCH_VARIABLES)}
    env.update(CPU="1", RECIPE="test", PYTHONPATH=str(REPO), CUDA_VISIBLE_DEVICES="")
    script = (
        'eval "$(python -m recipes.launch devices --shell-pid 7)"; '
        'echo "$WORKERS|${DEVICE_ARGS[*]}|$RUN_NAME|$LAUNCH_ID|$MALLOC_MMAP_THRESHOLD_"'
    )
    result = subprocess.run(
        ["bash", "-c", script.replace("python", sys.executable, 1)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.strip().split("|")[:3] == ["1", "--cpu", "node 0"], result.stderr
    assert result.stdout.strip().endswith(":7|4294967296")
    assert "CPU=1" in result.stderr  # the reason it said for --cpu
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, recipes.launch; print(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('torch', 'fairseq', 'numpy')))",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert imported.stdout.strip() == "[]", imported.stderr


def test_the_allocators_settings_by_device(environment, monkeypatch):
    """GPUs: torch's caching allocator grows its segments (PYTORCH_CUDA_ALLOC_CONF); CPUs: glibc keeps large blocks.
    A value the user set is kept (not exported again)."""
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.setattr(launch, "visible_gpus", lambda python: 1)
    gpu = launch.devices_plan(sys.executable, "7")
    assert gpu["export PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert not any("MALLOC" in name for name in gpu)
    environment(PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
    assert "export PYTORCH_CUDA_ALLOC_CONF" not in launch.devices_plan(sys.executable, "7")
    monkeypatch.setattr(launch, "visible_gpus", lambda python: 0)
    environment(CPU=1)
    cpu = launch.devices_plan(sys.executable, "7")
    assert "export PYTORCH_CUDA_ALLOC_CONF" not in cpu and cpu["export MALLOC_MMAP_THRESHOLD_"] == "4294967296"


def test_gpu_threads_sets_each_gpu_process_threads_and_is_refused_elsewhere(environment, monkeypatch):
    monkeypatch.setattr(launch, "visible_gpus", lambda python: 8)
    assert "export OMP_NUM_THREADS" not in launch.devices_plan(sys.executable, "7")  # unset: torch's default
    environment(GPU_THREADS="1")
    assert launch.devices_plan(sys.executable, "7")["export OMP_NUM_THREADS"] == 1
    for value in ("0", "two"):
        environment(GPU_THREADS=value)
        with pytest.raises(launch.LaunchError, match=f"^GPU_THREADS={value}: use a number of threads, 1 or more$"):
            launch.devices_plan(sys.executable, "7")
    monkeypatch.setattr(launch, "visible_gpus", lambda python: 0)
    environment(CPU=1, GPU_THREADS="1")
    with pytest.raises(launch.LaunchError, match="^GPU_THREADS is for the processes of GPUs; on a CPU set OMP_NUM"):
        launch.devices_plan(sys.executable, "7")
