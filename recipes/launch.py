"""How a recipe's run was started and what it trains on: the launch plan (for recipes/common.sh, shell assignments) and
the batch (batch_plan, for recipes/training.py).

    python -m recipes.launch devices --python PYTHON --shell-pid PID   # LAUNCH, RUN_RANK, WORKERS, DEVICE_ARGS ...
    python -m recipes.launch paper --shell | SECTION...   # vaswani_plugin/paper.py's settings (bash; arguments);
                                                          # --shell checks the recipe's variables first (CHECKED)

Reads the recipe's variables (NUM_GPUS, CPU, NUM_NODES, ...) and the launchers' (SLURM_*, torchrun's RANK ...) from
the environment; says what it chose on stderr as the recipes do, or stops with one line (exit 1). Its import
leaves torch and fairseq out: the recipe's PYTHON counts the GPUs for `devices`; batch_plan reads the longest sentence
and sizes a GPU's batch (vaswani_plugin/tools/gpu_batch.py: torch and fairseq) in recipes/training.py's own process,
only when asked. Launchers: docs/recipes.md, "SLURM", "Several nodes".
"""

import argparse
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from vaswani_plugin import errors as ERRORS
from vaswani_plugin import paper
from vaswani_plugin import precision as PRECISION  # the recipes' PRECISION and what auto chooses
from vaswani_plugin.models import memory as MEMORY

CPU_TRAINING_ENV = {  # glibc keeps allocations over 32 MB in the heap: 1.25x tokens/s (docs/results.md)
    "MALLOC_MMAP_THRESHOLD_": "4294967296",
    "MALLOC_TRIM_THRESHOLD_": "4294967296",
}
# On GPUs torch's caching allocator grows segments instead of allocating new ones for each new batch shape
# (translation batches change length nearly every step; NeMo reported ~30 % of a step lost to reallocation);
# unmeasured here (docs/results.md, "The host's cost of an update").
GPU_TRAINING_ENV = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
# GPU_THREADS=N: torch's intra-op threads in each GPU's process (OMP_NUM_THREADS; unset, torch's default). fairseq
# #3342: one a process took a DGX A100 from 30 % to 97 % busy; the GPU acceptance measures 1 against the default.


def gpu_threads(devices) -> dict:
    """{"export OMP_NUM_THREADS": N} for GPU_THREADS=N on GPUs; a one-line error for a bad value or on a CPU."""
    threads = env("GPU_THREADS")
    if not threads:
        return {}
    if devices.cpu:
        raise LaunchError("GPU_THREADS is for the processes of GPUs; on a CPU set OMP_NUM_THREADS")
    if not digits(threads) or int(threads) == 0:
        raise LaunchError(f"GPU_THREADS={threads}: use a number of threads, 1 or more")
    return {"export OMP_NUM_THREADS": int(threads)}


# A setting the user can fix: the recipe stops with `RECIPE: error: MESSAGE` (the plugin's one family of user errors
# and its reporter, vaswani_plugin/errors.py).
LaunchError = ERRORS.VaswaniConfigError
# MAX_TOKENS_PER_GPU when unset on a CPU, or for a recipe that names no model (the GPUs' memory model chooses
# otherwise: vaswani_plugin/tools/gpu_batch.py).
FIXED_TOKENS_PER_GPU = 4096


def env(name: str) -> str:
    """A variable as the recipes read it: unset and empty are the same."""
    return os.environ.get(name, "")


def digits(*values: str) -> bool:
    return all(value.isdigit() and value.isascii() for value in values)


def say(message: str) -> None:
    print(f"[{env('RECIPE')} {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Launch:
    """One run of the recipe among those that train together. nodes: one run, or one a node (NUM_NODES); slurm: a
    task of an srun step, one a GPU; torchrun: one of its workers. A step of one task a node is `nodes`."""

    kind: str = "nodes"
    run_rank: int = 0
    run_name: str = "node 0"
    launch_id: str = ""
    num_nodes: int = 1
    node_rank: Optional[int] = None  # known here from SLURM's one task a node; else NODE_RANK's
    master_addr: str = ""
    master_port: str = ""
    task_workers: Optional[int] = None  # one run a worker (several SLURM tasks a node, torchrun):
    task_rank: int = 0  # its rank,
    task_local: int = 0  # its place on the node,
    tasks_per_node: int = 1
    init_method: str = ""  # and how the workers meet


def launcher(shell_pid: str) -> Launch:
    """How this run was started (the SLURM step's, torchrun's or the NUM_NODES variables)."""
    if env("SLURM_STEP_NUM_TASKS"):
        launch = slurm_task()
    elif env("RANK") and env("WORLD_SIZE") and env("LOCAL_RANK"):
        launch = torchrun_process()
    elif (env("SLURM_JOB_NUM_NODES") or env("SLURM_NNODES") or "1") != "1":
        raise LaunchError(
            f"this SLURM job has {env('SLURM_JOB_NUM_NODES') or env('SLURM_NNODES')} nodes but the "
            'recipe is not a task of an srun step: start it with srun (docs/recipes.md, "SLURM")'
        )
    else:
        launch = Launch(master_addr=env("MASTER_ADDR"), master_port=env("MASTER_PORT"))
    if launch.kind == "nodes":
        nodes_by_hand(launch, shell_pid)
    if env("SLURM_RESTART_COUNT"):  # a requeued job: no run reads a decision of the job before the requeue
        launch.launch_id += f", restart {env('SLURM_RESTART_COUNT')}"
    return launch


def nodes_by_hand(launch: Launch, shell_pid: str) -> None:
    """One run a node, all reaching node 0 over TCP (fairseq's multi-node start), or one run alone."""
    nodes = env("NUM_NODES") or str(launch.num_nodes)
    if not digits(nodes) or int(nodes) < 1 or nodes.startswith("0"):
        raise LaunchError(f"NUM_NODES={nodes}: use a number of nodes, 1 or more")
    launch.num_nodes = int(nodes)
    rank = env("NODE_RANK") or ("" if launch.node_rank is None else str(launch.node_rank))
    if launch.num_nodes > 1:
        if not (launch.master_addr and launch.master_port and rank):
            raise LaunchError(
                f"NUM_NODES={nodes} needs MASTER_ADDR, MASTER_PORT (node 0's address and a free port)"
                " and NODE_RANK (0 .. NUM_NODES-1) on every node"
            )
        if not digits(rank) or int(rank) >= launch.num_nodes:
            raise LaunchError(f"NODE_RANK={rank}: use 0 .. {launch.num_nodes - 1} (NUM_NODES={nodes})")
        launch.node_rank = int(rank)
    else:
        launch.node_rank = 0
    launch.run_rank, launch.run_name = launch.node_rank, f"node {launch.node_rank}"
    launch.launch_id = (
        f"nodes {launch.num_nodes} via {launch.master_addr or socket.gethostname()}:{launch.master_port or shell_pid}"
    )


def slurm_task() -> Launch:
    """Task SLURM_PROCID of an srun step; the tasks agree on the master through scontrol. fairseq's own SLURM
    inference is bypassed: without scontrol it silently trains one process per task."""
    tasks, nodes, procid = (
        env("SLURM_STEP_NUM_TASKS"),
        env("SLURM_STEP_NUM_NODES") or env("SLURM_NNODES"),
        env("SLURM_PROCID"),
    )
    job = f"SLURM step of {tasks} task(s) on {nodes or '?'} node(s)"
    if not digits(tasks, nodes or "x", procid or "x", env("SLURM_LOCALID") or "x", env("SLURM_NODEID") or "x"):
        raise LaunchError(
            f"{job}: SLURM_STEP_NUM_TASKS, SLURM_STEP_NUM_NODES, SLURM_PROCID, SLURM_LOCALID and "
            "SLURM_NODEID must all be set, as srun sets them"
        )
    if env("NUM_NODES") or env("NODE_RANK"):
        raise LaunchError(f"{job}: SLURM gives the tasks their ranks; unset NUM_NODES and NODE_RANK")
    tasks, nodes, procid = int(tasks), int(nodes), int(procid)
    if nodes == 0 or tasks % nodes:
        raise LaunchError(f"{job}: the nodes hold different numbers of tasks; give each the same (--ntasks-per-node)")
    if procid >= tasks:
        raise LaunchError(f"{job}: SLURM_PROCID={procid} is not one of its tasks")
    launch = Launch(master_addr=env("MASTER_ADDR"), master_port=env("MASTER_PORT"))
    if tasks == 1:  # a step of one task (srun --pty bash, say) is a single node: nothing to agree on
        return launch
    if not launch.master_addr:
        launch.master_addr = first_node(job)
    # One port for every task of the step, from the job's numbers unless MASTER_PORT is given.
    launch.master_port = launch.master_port or str(
        20000 + (int(env("SLURM_JOB_ID") or 0) * 16 + int(env("SLURM_STEP_ID") or 0)) % 40000
    )
    launch.tasks_per_node = tasks // nodes
    if launch.tasks_per_node == 1:  # one task a node: it starts the node's workers, as NUM_NODES does
        launch.num_nodes, launch.node_rank = nodes, int(env("SLURM_NODEID"))
    else:
        launch.kind, launch.task_workers, launch.task_rank = "slurm", tasks, procid
        launch.task_local, launch.run_rank, launch.run_name = int(env("SLURM_LOCALID")), procid, f"task {procid}"
        launch.init_method = f"tcp://{launch.master_addr}:{launch.master_port}"
        launch.launch_id = f"SLURM step {env('SLURM_JOB_ID')}.{env('SLURM_STEP_ID')}"
    say(f"{job}: this is task {procid}; master {launch.master_addr}:{launch.master_port}")
    return launch


def first_node(job: str) -> str:
    """The step's first node, by `scontrol show hostnames` (as fairseq finds it)."""
    if shutil.which("scontrol") is None:
        raise LaunchError(
            f"{job}: scontrol is not on PATH, so the tasks cannot agree on a master; put SLURM's "
            "scontrol on PATH or set MASTER_ADDR to the first node's address"
        )
    nodelist = env("SLURM_STEP_NODELIST") or env("SLURM_JOB_NODELIST")
    names = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True).stdout
    if not names.split():
        raise LaunchError(f"{job}: 'scontrol show hostnames {nodelist}' named no node")
    return names.split()[0]


def torchrun_process() -> Launch:
    """One of torchrun's workers (`torchrun --no-python bash RECIPE`); they meet through its store (env://)."""
    rank, world, local, local_world = env("RANK"), env("WORLD_SIZE"), env("LOCAL_RANK"), env("LOCAL_WORLD_SIZE")
    if not digits(rank, world, local, local_world or "x") or int(rank) >= int(world):
        raise LaunchError(
            f"torchrun: RANK={rank}, WORLD_SIZE={world}, LOCAL_RANK={local}, LOCAL_WORLD_SIZE="
            f"{local_world} do not describe a worker; start the recipe as 'torchrun --nproc_per_node N "
            "--no-python bash RECIPE'"
        )
    if env("NUM_NODES") or env("NODE_RANK"):
        raise LaunchError("torchrun gives the workers their ranks; unset NUM_NODES and NODE_RANK")
    return Launch(
        kind="torchrun",
        task_workers=int(world),
        task_rank=int(rank),
        task_local=int(local),
        tasks_per_node=int(local_world),
        run_rank=int(rank),
        run_name=f"rank {rank}",
        init_method="env://",
        master_addr=env("MASTER_ADDR"),
        master_port=env("MASTER_PORT"),
        launch_id=f"torchrun {env('TORCHELASTIC_RUN_ID')} via {env('MASTER_ADDR')}:{env('MASTER_PORT')}",
    )


@dataclass
class Devices:
    """What fairseq-train and fairseq-generate get: WORKERS processes train in parallel."""

    workers: int
    num_gpus: int
    train: List[str] = field(default_factory=list)
    evaluate: List[str] = field(default_factory=list)
    cpu: bool = False


def worker(world: int, rank: int, init_method: str, device: int) -> List[str]:
    """One worker process whose rank is given outright (no spawning, no inference from the environment)."""
    return [
        "--distributed-world-size",
        str(world),
        "--distributed-rank",
        str(rank),
        "--distributed-init-method",
        init_method,
        "--distributed-no-spawn",
        "--device-id",
        str(device),
    ]


def visible_gpus(python: str) -> int:
    """The GPUs this run sees: NUM_GPUS in a dry run (the run's, not this machine's); none where
    CUDA_VISIBLE_DEVICES is set and empty; else torch's count, in the recipe's python."""
    if env("DRY_RUN") == "1" and env("NUM_GPUS") and env("CPU") != "1":
        return int(env("NUM_GPUS")) if digits(env("NUM_GPUS")) else 0
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset") == "":
        return 0
    counted = subprocess.run(
        [python, "-c", "import torch; print(torch.cuda.device_count())"], capture_output=True, text=True
    )
    if counted.returncode or not digits(counted.stdout.strip()):
        raise LaunchError("python with torch not found")
    return int(counted.stdout)


def on_cpu(launch: Launch) -> Devices:
    """One process a node or task (torch spreads its products over every core; fairseq cannot start several CPU
    processes itself: its spawn counts GPUs), joined over gloo with legacy_ddp's all-reduce (pytorch_ddp on CPU
    fails on device_ids=[0])."""
    if env("CPU") != "1":
        raise LaunchError(
            "no GPU visible. The paper trains on 8 GPUs; to try the pipeline on CPU (very slow, for "
            "testing only) set CPU=1"
        )
    if (env("NUM_GPUS") or "1") != "1":
        raise LaunchError(
            f"NUM_GPUS={env('NUM_GPUS')}: on CPU a node trains in one process, which uses every core; "
            "for more processes start more nodes (NUM_NODES, NODE_RANK)"
        )
    say("no GPU: training on CPU because CPU=1")
    devices = Devices(workers=launch.num_nodes, num_gpus=1, evaluate=["--cpu"], cpu=True)
    if launch.task_workers is not None:
        devices.workers = launch.task_workers
        devices.train = worker(devices.workers, launch.task_rank, launch.init_method, 0)
    elif launch.num_nodes > 1:
        devices.train = worker(devices.workers, launch.node_rank, f"tcp://{launch.master_addr}:{launch.master_port}", 0)
    if devices.workers > 1:
        devices.train += ["--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp"]
    devices.train.append("--cpu")
    return devices


def on_gpus(launch: Launch, visible: int) -> Devices:
    """A process a GPU: one a worker the launcher started (seeing all of its node's GPUs, or its own alone), or
    fairseq's own spawn of NUM_GPUS a node."""
    if launch.task_workers is not None:
        if env("NUM_GPUS") and env("NUM_GPUS") != str(launch.tasks_per_node):
            raise LaunchError(
                f"NUM_GPUS={env('NUM_GPUS')} but {launch.kind} starts {launch.tasks_per_node} processes "
                "a node, one per GPU: unset NUM_GPUS"
            )
        if visible not in (1, launch.tasks_per_node):
            raise LaunchError(
                f"{launch.run_name} sees {visible} GPUs, but {launch.kind} starts "
                f"{launch.tasks_per_node} processes a node: give each process one GPU (srun "
                f"--gpus-per-task 1) or each all {launch.tasks_per_node}"
            )
        device = launch.task_local if visible == launch.tasks_per_node else 0
        return Devices(
            launch.task_workers,
            launch.tasks_per_node,
            worker(launch.task_workers, launch.task_rank, launch.init_method, device),
        )
    gpus = int(env("NUM_GPUS")) if env("NUM_GPUS") else visible
    if gpus > visible:
        raise LaunchError(f"NUM_GPUS={gpus} but only {visible} GPUs are visible")
    devices = Devices(gpus * launch.num_nodes, gpus, ["--distributed-world-size", str(gpus * launch.num_nodes)])
    if launch.num_nodes > 1:
        devices.train += [
            "--distributed-init-method",
            f"tcp://{launch.master_addr}:{launch.master_port}",
            "--distributed-rank",
            str(launch.node_rank * gpus),
        ]
    return devices


def devices_plan(python: str, shell_pid: str) -> dict:
    """The launch and its devices, the run's facts common.sh exports read-only (fairseq's arguments as words)."""
    visible = visible_gpus(python)
    launch = launcher(shell_pid)
    devices = on_gpus(launch, visible) if visible else on_cpu(launch)
    setting, said = PRECISION.recipe_setting(os.environ)  # a bad value: one line before anything runs
    PRECISION.check_device(setting, "cpu" if devices.cpu else "cuda")  # ... and one for the wrong device
    if not devices.cpu:
        chosen = "at training, by the GPUs' compute capability" if setting == "auto" else said
        nodes = devices.workers // devices.num_gpus
        say(f"training on {devices.num_gpus} GPU(s) x {nodes} node(s), {setting} ({chosen})")
    if devices.workers != 1:
        say(f"{launch.run_name}: world size {devices.workers} (started as {launch.kind})")
    return dict(
        LAUNCH=launch.kind,
        LAUNCH_ID=launch.launch_id,
        RUN_RANK=launch.run_rank,
        RUN_NAME=launch.run_name,
        NUM_NODES=launch.num_nodes,
        NODE_RANK="" if launch.node_rank is None else launch.node_rank,
        MASTER_ADDR=launch.master_addr,
        MASTER_PORT=launch.master_port,
        WORKERS=devices.workers,
        NUM_GPUS=devices.num_gpus,
        DEVICE_ARGS=shlex.join(devices.train),
        EVAL_DEVICE_ARGS=shlex.join(devices.evaluate),
        **{
            "export " + name: value
            for name, value in (CPU_TRAINING_ENV if devices.cpu else GPU_TRAINING_ENV).items()
            if not env(name)
        },
        **gpu_threads(devices),
    )


def tokens_per_gpu(data_bin: str, training: List[str]) -> str:
    """MAX_TOKENS_PER_GPU, or when unset: on GPUs, for the model of `training` (fairseq-train's arguments but the
    data), the most tokens the smallest GPU's memory holds (vaswani_plugin/tools/gpu_batch.py, in this process); a
    dry run says so and plans FIXED_TOKENS_PER_GPU's; FIXED_TOKENS_PER_GPU without a model or on CPU."""
    if env("MAX_TOKENS_PER_GPU"):
        return env("MAX_TOKENS_PER_GPU")
    if not training or "--cpu" in training:
        return str(FIXED_TOKENS_PER_GPU)
    if env("DRY_RUN") == "1":
        say(
            f"batch: MAX_TOKENS_PER_GPU unset: chosen at run time, the most tokens the GPU's memory holds for the "
            f"model (vaswani_plugin/models/memory.py); the plan shows {FIXED_TOKENS_PER_GPU}'s: set "
            "MAX_TOKENS_PER_GPU to see another's"
        )
        return str(FIXED_TOKENS_PER_GPU)
    from vaswani_plugin.tools import gpu_batch  # torch and fairseq

    try:
        tokens, why = gpu_batch.command_batch([data_bin, *training])
    except ERRORS.VaswaniConfigError as error:
        raise LaunchError(f"MAX_TOKENS_PER_GPU unset and {error} ({gpu_batch.PROG})") from None
    except SystemExit:  # fairseq's parser, its usage and error above
        raise LaunchError(f"MAX_TOKENS_PER_GPU unset and fairseq cannot parse the command ({gpu_batch.PROG})") from None
    say(f"batch: MAX_TOKENS_PER_GPU unset: {why}")
    return str(tokens)


def batch_plan(workers: int, data_bin: str, default_tokens: int, training: List[str] = ()) -> dict:
    """§5.1: MAX_TOKENS a worker and UPDATE_FREQ such that one step holds about TOKENS_PER_STEP tokens, however
    many workers there are (each batch at most tokens_per_gpu's); a batch holds the longest sentence (fairseq
    asserts it: train, and valid at the same --max-tokens)."""
    from prepare.longest import longest_example

    tokens, per_gpu = env("TOKENS_PER_STEP") or str(default_tokens), tokens_per_gpu(data_bin, list(training))
    if not digits(tokens, per_gpu) or int(tokens) == 0 or int(per_gpu) == 0:
        raise LaunchError(f"TOKENS_PER_STEP={tokens}, MAX_TOKENS_PER_GPU={per_gpu}: use positive numbers of tokens")
    tokens, per_gpu = int(tokens), int(per_gpu)
    update_freq, max_tokens = MEMORY.step_split(tokens, workers, per_gpu)
    say(f"batch: {workers} worker(s) x {max_tokens} tokens x update-freq {update_freq} ~ {tokens} tokens per step")
    if env("DRY_RUN") == "1":
        say("batch: whether a batch holds the longest sentence is known once the data is prepared (at run time)")
        return dict(UPDATE_FREQ=update_freq, MAX_TOKENS=max_tokens)
    try:
        longest, split = longest_example(Path(data_bin), ["train", "valid"])
    except ERRORS.VaswaniConfigError as error:
        raise LaunchError(f"cannot read the longest sentence of {data_bin}: {error}") from None
    except OSError as error:
        raise LaunchError(f"cannot read the longest sentence of {data_bin}: {ERRORS.os_error_message(error)}") from None
    if per_gpu < longest:
        raise LaunchError(
            f"MAX_TOKENS_PER_GPU={per_gpu} is below the longest {split} sentence ({longest} tokens): "
            f"set MAX_TOKENS_PER_GPU to at least {longest}"
        )
    if max_tokens < longest and update_freq == 1:
        raise LaunchError(
            f"TOKENS_PER_STEP={tokens} over {workers} worker(s) gives each a batch of {max_tokens} "
            f"tokens, below the longest {split} sentence ({longest} tokens): set TOKENS_PER_STEP to at "
            f"least {longest * workers}"
        )
    if max_tokens < longest:  # the step's even split rounded below it: the GPU holds it
        say(f"batch: {longest} tokens a worker instead, to hold the longest {split} sentence")
        max_tokens = longest
    return dict(UPDATE_FREQ=update_freq, MAX_TOKENS=max_tokens)


def paper_variables(paper) -> dict:
    """paper.py's settings as the recipes' variables: PAPER_BEAM=4 ... for each number, the argument sections as
    arrays (PAPER_TRAINING_ARGS, PAPER_DECODING_ARGS, PAPER_PARSING_DECODING_ARGS) and each model's sizes
    (PAPER_MODEL_QUICKSTART ...)."""
    variables = {
        f"PAPER_{name}": paper.number(value)
        for name, value in vars(paper).items()
        if name.isupper() and isinstance(value, (int, float))
    }
    for section in ("training", "decoding", "parsing-decoding"):
        variables[f"PAPER_{section.replace('-', '_').upper()}_ARGS"] = paper.arguments(section)
    for model in paper.MODELS:
        variables[f"PAPER_MODEL_{model.upper()}"] = paper.arguments(f"model:{model}")
    return variables


CHECKED = {  # a recipe's variables: their values, and what the line says of them
    "DRY_RUN": (r"[01]", "use 1 (print what would run, run nothing) or 0"),
    "REPORT": (r"[01]", "use 1 (draw the curves and write report.md) or 0"),
    "DEV_SCORE": (r"[01]", "use 1 (score the dev set while training) or 0"),
    "STALL_MINUTES": (
        r"[0-9]+(\.[0-9]+)?",
        "use the minutes a rank may wait for the others (default 10; 0: no watchdog)",
    ),
}


def check_variables() -> None:
    """The recipe's variables that are set, each one of its values, or its one line."""
    for name, (pattern, use) in CHECKED.items():
        if env(name) and not re.fullmatch(pattern, env(name)):
            raise LaunchError(f"{name}={env(name)}: {use}")


def shell(assignments: dict, declare: str = "") -> str:
    """NAME=VALUE lines for bash's eval, each after `declare` (a name may carry its own: `export NAME`); lists become
    arrays."""
    lines = []
    for name, value in assignments.items():
        prefix = "" if " " in name else declare
        if isinstance(value, list):
            lines.append(f"{prefix}{name}=({' '.join(shlex.quote(word) for word in value)})")
        else:
            lines.append(f"{prefix}{name}={shlex.quote(str(value))}")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="recipes.launch", description=__doc__.split("\n")[0])
    parser.add_argument("plan", choices=["devices", "paper"])
    parser.add_argument(
        "sections",
        nargs="*",
        help="paper: training, decoding, parsing-decoding or model:NAME, printed as fairseq arguments, one per line",
    )
    parser.add_argument("--shell", action="store_true", help="paper: every setting as bash variables")
    parser.add_argument("--python", default=sys.executable, help="the recipe's interpreter (it has torch)")
    parser.add_argument("--shell-pid", default=str(os.getppid()), help="the recipe's $$, in a lone run's launch id")
    args = parser.parse_args(argv)
    ERRORS.run_reported(env("RECIPE") or parser.prog, lambda: print(plan(args)))


def plan(args) -> str:
    """What the command prints: assignments for bash's eval, or the paper's arguments."""
    if args.plan == "devices":
        return shell(devices_plan(args.python, args.shell_pid), declare="declare -grx ")
    if args.shell:
        check_variables()
        return shell(paper_variables(paper))
    try:
        return "\n".join(word for section in args.sections for word in paper.arguments(section))
    except KeyError as error:
        raise LaunchError(
            f"paper.py has no section {error}; use training, decoding, parsing-decoding or model:NAME "
            f"({', '.join(paper.MODELS)})"
        ) from None


if __name__ == "__main__":
    main()
