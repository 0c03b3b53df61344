"""A stop through a recipe's shell (recipes/common.sh's stoppable, recipes/training.py, training/preemption.py): SIGTERM
(or SIGUSR1) to the recipe's shell while it trains stops training after the next update, saved without validating, the
recipe's last line naming the signal and its exit status 75, no process of its group left; the same command again
resumes (under `ulimit -f`, failing in one line to save: training/stopping.py's full disk) and ends with the model of a
run never stopped. A stop while the data is prepared (SIGTERM to the shell, a terminal's Ctrl-C) or after training
(SIGUSR1 in translate, average, the scoring) ends every process of the stage with the shell, in the stop line and 75;
the preparation run again resumes its steps and ends with the data of a run never stopped. In a simulated SLURM step of
two nodes, SIGUSR1 to one stops both after the same update, both lines naming it, and run 0 requeues the job; with
NUM_NODES=2, a frozen node 1 ends node 0 at STALL_MINUTES, a killed one after two heartbeats, and both nodes again
resume and finish. In process: the requeue's answers, the summed flag's signals, and a stop that ends fairseq-train
outside an update."""

import contextlib
import gzip
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import lane_job, reversal_corpus
from test_recipes import NEEDS_CPU_PATH, REPO, TINY

from vaswani_plugin.training import preemption
from vaswani_plugin.training.watchdog import Watchdog

TRAIN = f'stages train; detect_devices; train "$WORK_DIR/c" --arch vaswani_transformer {TINY} --log-interval 1 '


@pytest.fixture(autouse=True)
def nothing_left(tmp_path):
    """After each test, whatever of its recipes a failure left running (a node waiting for gloo's 30 minutes, a
    frozen one, a stage held by a FIFO) killed."""
    yield
    kill_what_names(tmp_path)


def kill_what_names(folder):
    """Every process whose command line names `folder` (naming's) killed."""
    for pid in naming(folder):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def updates_of(checkpoint):
    return torch.load(checkpoint, weights_only=True)["optimizer_history"][-1]["num_updates"]


def start(work_dir, name, train="--max-update 12 --save-interval-updates 50", before="", recipe=None, **more):
    """A recipe's training stage (its shell sourcing common.sh: TRAIN, then fairseq-train's arguments `train`; or the
    shell commands `recipe`, or with a recipe's file name, `bash recipes/RECIPE`) in a process group of its own, its
    output in WORK_DIR/NAME.out and .err; BEFORE: shell commands run first."""
    env = dict(os.environ, PYTHON=sys.executable, RECIPE="test", WORK_DIR=str(work_dir), CPU="1", REPORT="0")
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", TOKENS_PER_STEP="200", DEV_SCORE="0")
    env.update(more)
    command = ["bash", "-c", f"{before}source {REPO}/recipes/common.sh; {recipe or TRAIN + train}"]
    if recipe and recipe.endswith(".sh"):
        command = ["bash", str(REPO / "recipes" / recipe)]
    work_dir.mkdir(parents=True, exist_ok=True)
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


def wait_until(seen, runs, poll=0.1):
    """Until seen() is true, asked every `poll` seconds; else, after 120 s or once one of `runs` ends, every run
    killed (a node left alone would wait for gloo's 30-minute timeout) and the ends of their output and errors."""
    deadline = time.monotonic() + 120
    while not seen():
        if any(run.poll() is not None for run in runs) or time.monotonic() > deadline:
            for run in runs:
                if run.poll() is None:
                    os.killpg(run.pid, signal.SIGKILL)
            pytest.fail("\n".join(out[-800:] + err[-1200:] for out, err in map(output, runs)))
        time.sleep(poll)


def text(path, start=0):
    return path.read_text()[start:] if path.exists() else ""


def wait_for_update(update, folders, runs, start=0, poll=0.1):
    """Until each folder's train.log shows `update` (past its first `start` characters); see wait_until."""
    for log in (folder / "c" / "train.log" for folder in folders):
        wait_until(lambda log=log: f"num_updates={update}," in text(log, start), runs, poll)


def pending(pid, number) -> bool:
    """Whether signal `number` waits to be handled by process `pid` (stopped, it handles none)."""
    (mask,) = [
        line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("ShdPnd:")
    ]
    return bool(int(mask, 16) & (1 << (number - 1)))


def stopped_now(pid) -> bool:
    """Whether process `pid` is stopped by a signal now (state T in /proc/PID/stat), not only asked to stop; an
    ended process counts as stopped (nothing of it left to take a signal)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except FileNotFoundError:
        return True


def ended(run, status, within=120):
    """The run's last line on stdout and on stderr ("" for none), once it has ended with `status` within `within`
    seconds (else its group killed: a stage held by a test waits forever)."""
    try:
        run.wait(timeout=within)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        raise
    out, err = output(run)
    assert run.returncode == status, (out[-2000:], err[-2000:])
    return tuple((said.strip().splitlines() or [""])[-1] for said in (out, err))


@NEEDS_CPU_PATH
def test_sigterm_to_the_recipe_stops_after_the_next_update_and_the_reruns_end_with_the_model_never_stopped(
    reversal_data, reversal_training, tmp_path
):
    """SIGTERM to the recipe's shell at update 2 (SIGUSR1's path: both trapped by common.sh's train), training as the
    README's own pipeline does (conftest's reversal_training: 6 updates of 1000 tokens): fairseq-train held (SIGSTOP)
    as soon as its log shows update 2 and let go once the signal, passed on, waits for it, so that a fast machine's
    updates cannot run to the end first. Then, from copies of what
    it left: the same command under `ulimit -f` below a checkpoint's size (a full disk): it resumes, and its save
    fails in one line, checkpoint_last.pt intact; and the same command: it ends with the model of the README's
    run, never stopped (test_resume.py's criterion: on one thread, the same tensors)."""
    stopped = with_data(tmp_path / "stopped", reversal_data)
    as_readme = dict(train="--max-update 6 --save-interval-updates 50", TOKENS_PER_STEP="1000")
    recipe, checkpoints = start(stopped, "stop", **as_readme), stopped / "c"
    wait_for_update(2, [stopped], [recipe], poll=0.005)
    held = training_processes(recipe)  # fairseq-train and its data workers
    for pid in held:
        os.kill(pid, signal.SIGSTOP)
    # Stopped for real first: a process that has not run since SIGSTOP came would take a later SIGTERM first.
    wait_until(lambda: all(stopped_now(pid) for pid in held), [recipe])
    os.kill(recipe.pid, signal.SIGTERM)  # the recipe's shell, as SLURM's --signal=B:TERM@N does
    wait_until(lambda: pending(min(held), signal.SIGTERM), [recipe])  # passed on by recipes/training.py
    for pid in held:
        os.kill(pid, signal.SIGCONT)
    _, last = ended(recipe, preemption.EXIT_STATUS, within=60)
    assert last.startswith("test: stopped: training stopped by SIGTERM at update "), last
    assert last.endswith("; run the same command again")
    assert left(recipe, stopped) == {}
    saved = updates_of(checkpoints / "checkpoint_last.pt")
    assert 3 <= saved < 6 and f"SIGTERM at update {saved};" in last
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


def processes(run, named):
    """The processes of the run's group whose command line holds `named` (fairseq_cli.train: fairseq-train itself and
    its data workers)."""
    listed = subprocess.run(["ps", "-eww", "-o", "pid=,pgid=,args="], capture_output=True, text=True).stdout
    listed = listed.splitlines()  # -ww: every command line whole
    return [int(line.split()[0]) for line in listed if int(line.split()[1]) == run.pid and named in line]


def training_processes(run):
    return processes(run, "fairseq_cli.train")


def naming(folder):
    """The processes whose command line names `folder` (or a path in it), by pid."""
    found = {}
    for process in (entry for entry in os.scandir("/proc") if entry.name.isdigit()):
        with contextlib.suppress(OSError):  # ended meanwhile
            with open(f"{process.path}/cmdline", "rb") as read:
                words = read.read().decode(errors="replace").split("\0")
            if any(str(folder) in word for word in words):
                found[int(process.name)] = " ".join(words)
    return found


def left(run, work_dir):
    """What is left of an ended recipe, by pid: a process of its group, or any whose command line names its WORK_DIR;
    not a zombie (it has ended: an orphan's waits for init to reap it)."""
    found = naming(work_dir)
    for process in (entry for entry in os.scandir("/proc") if entry.name.isdigit()):
        with contextlib.suppress(OSError):
            with open(f"{process.path}/stat") as stat:
                state, _, group = stat.read().rpartition(")")[2].split()[:3]
            if state != "Z" and int(group) == run.pid:
                found.setdefault(int(process.name), "a process of the recipe's group")
    return found


def captions(folder, pairs=60):
    """A tiny Multi30k of generated captions, in its upstream names ({train,val,test_2016_flickr}.{en,de}.gz)."""
    words = {
        "a": "ein", "man": "mann", "dog": "hund", "girl": "mädchen", "runs": "läuft", "sits": "sitzt", "on": "auf",
        "the": "dem", "grass": "gras", "street": "straße", "beach": "strand", "red": "roter", "small": "kleiner",
    }  # fmt: skip
    draw = random.Random(30)
    folder.mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        english = [" ".join(draw.choices(sorted(words), k=draw.randint(4, 9))) + " ." for _ in range(pairs)]
        for lang, lines in (("en", english), ("de", [" ".join(words.get(w, w) for w in e.split()) for e in english])):
            with gzip.GzipFile(folder / f"{split}.{lang}.gz", "wb", mtime=0) as out:
                out.write("".join(line + "\n" for line in lines).encode())
    return folder


def prepared(data_dir):
    """The files a preparation made in DATA_DIR, by path (not its logs or records, which name their folders)."""
    folders = [data_dir / name for name in ("text", "tok", "bpe", "data-bin", ".stamps")]
    paths = sorted(path for folder in folders for path in folder.rglob("*") if path.name != "preprocess.log")
    return {str(path.relative_to(data_dir)): path.read_bytes() for path in paths}


@NEEDS_CPU_PATH
def test_a_stop_while_the_data_is_prepared_ends_its_processes_and_the_rerun_resumes_the_steps(tmp_path):
    """The quickstart's preparation of a tiny corpus held at its tokenize step (its last output a FIFO that nothing
    reads: the step cannot end before the stop, however fast the machine): SIGTERM to the recipe's shell, and SIGINT
    to its whole group as a terminal's Ctrl-C sends it. Each ends in the stop line and 75, and no process of the recipe
    is left (recipes.stages, prepare.multi30k: the shell ended them first). The same command again, the FIFO gone,
    skips the steps finished before and ends with the files of a preparation never stopped, prepared meanwhile."""
    raw = captions(tmp_path / "raw")
    quickstart = "quickstart.sh"
    settings = dict(RAW_DIR=str(raw), BPE_MERGES="30", STOP_AFTER="prepare", EXTRA_PREPARE_ARGS="--workers 1")
    held = {}
    for how in ("term", "int"):
        (tmp_path / how / "data" / "tok").mkdir(parents=True)
        os.mkfifo(tmp_path / how / "data" / "tok" / "test.de")  # tokenize's last output
        held[how] = start(tmp_path / how, "held", recipe=quickstart, **settings)
    unbroken = start(tmp_path / "unbroken", "run", recipe=quickstart, **settings)
    errors = [run.output.with_suffix(".err") for run in held.values()]
    wait_until(lambda: all("[3/7] tokenize" in text(err) for err in errors), [*held.values(), unbroken])
    os.kill(held["term"].pid, signal.SIGTERM)
    os.killpg(held["int"].pid, signal.SIGINT)
    for how, run in held.items():
        _, last = ended(run, preemption.EXIT_STATUS)
        assert last == f"test: stopped: stage prepare stopped by SIG{how.upper()}; run the same command again"
        assert left(run, tmp_path / how) == {}

    (tmp_path / "term" / "data" / "tok" / "test.de").unlink()
    again = start(tmp_path / "term", "again", recipe=quickstart, **settings)
    for run in (again, unbroken):
        assert "] STOP_AFTER=prepare: stopping here; run again without it" in ended(run, 0)[1]
    said = output(again)[1]
    skipped = [line.split(":")[0] for line in said.splitlines() if ": done before, skipping (stamp " in line]
    assert skipped == ["[1/7] download", "[2/7] extract"]
    assert "\n[3/7] tokenize: Moses" in said
    resumed, expected = prepared(tmp_path / "term" / "data"), prepared(tmp_path / "unbroken" / "data")
    assert resumed.keys() == expected.keys() and "data-bin/train.en-de.de.bin" in expected
    assert [name for name, data in expected.items() if resumed[name] != data] == []


def test_a_stop_outside_the_stages_ends_the_recipe_once_its_command_has_ended(tmp_path):
    """SIGTERM while the shell waits for a command of its own (cat, held by a FIFO): the recipe stops once it has
    ended, before the next command, in the stop line and 75."""
    os.mkfifo(tmp_path / "fifo")
    run = start(tmp_path, "outside", recipe='cat "$WORK_DIR/fifo"; echo next')
    wait_until(lambda: processes(run, f"cat {tmp_path}/fifo"), [run])
    os.kill(run.pid, signal.SIGTERM)
    (tmp_path / "fifo").write_text("the command's output\n")  # cat, alive, reads it and ends
    said = ended(run, preemption.EXIT_STATUS)
    assert said == ("the command's output", "test: stopped: the recipe stopped by SIGTERM; run the same command again")


def test_a_stages_job_is_ended_with_every_process_below_it(tmp_path):
    """recipes/stops.py's end, in process: a shell whose children are a process and a shell with its own child, each
    stopped before its children are listed, then ended (SIGTERM): none is left, the orphans of the shell below too."""
    from recipes import stops

    sleeper = f"{sys.executable} -c 'import time; time.sleep(300)' {tmp_path}"
    (tmp_path / "below.sh").write_text(f"{sleeper} & wait\n")
    with open(tmp_path / "job.out", "wb") as out, open(tmp_path / "job.err", "wb") as err:
        job = subprocess.Popen(["sh", "-c", f"{sleeper} & sh {tmp_path}/below.sh & wait"], stdout=out, stderr=err)
    job.output = tmp_path / "job"
    wait_until(lambda: len(naming(tmp_path)) == 4, [job])  # the shell, the sleepers, below.sh
    stops.end(job.pid)
    assert job.wait(timeout=60) == -signal.SIGTERM and naming(tmp_path) == {}


# A stage after training, by name: the recipe's commands (common.sh's functions), the process a stop finds it in, and
# the stop line's name for it. translate's fairseq-generate is held by its checkpoint, a FIFO nothing writes; average's
# and the scoring's commands by an interpreter that waits on that FIFO before it runs them (held_python).
AFTER_TRAINING = {
    "translate": (
        'stages translate; detect_devices; stage translate --output "$WORK_DIR/valid.txt" translate --checkpoint '
        '"$WORK_DIR/held" --subset valid --output "$WORK_DIR/valid.txt"',
        "fairseq_cli.generate",
        "stage translate",
    ),
    "average": (
        'stages average; stage average --output "$WORK_DIR/c/checkpoint_average.pt" average "$WORK_DIR/c" 2',
        "vaswani_plugin.checkpoints.average",
        "stage average",
    ),
    "score": (
        'score --generate-output "$WORK_DIR/valid.txt" --subset valid',
        "vaswani_plugin.scoring.bleu",
        "the scoring",
    ),
}


def held_python(folder, module):
    """An interpreter that runs `python -m MODULE ...` only once FOLDER/held, a FIFO, has been written, and anything
    else at once."""
    wrapper = folder / "python"
    held = f'case "$*" in *"-m {module} "*) cat "{folder}/held" > /dev/null;; esac'
    wrapper.write_text(f'#!/bin/sh\n{held}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@NEEDS_CPU_PATH
@pytest.mark.parametrize("name", sorted(AFTER_TRAINING))
def test_a_stop_after_training_ends_its_stage_and_the_stage_runs_again(name, reversal_data, tmp_path):
    """SIGUSR1 to the recipe's shell once the stage (translate, average, or the scoring) runs, held: the stop line
    naming it, 75, no process left; the same command again would run the stage."""
    recipe, process, what = AFTER_TRAINING[name]
    work = with_data(tmp_path / name, reversal_data)
    os.mkfifo(work / "held")
    python = sys.executable if name == "translate" else held_python(work, process)
    run = start(work, "held", recipe=recipe, PYTHON=python, TARGET_LANG="tgt")
    wait_until(lambda: processes(run, process), [run])
    os.kill(run.pid, signal.SIGUSR1)
    _, last = ended(run, preemption.EXIT_STATUS)
    assert last == f"test: stopped: {what} stopped by SIGUSR1; run the same command again"
    assert left(run, work) == {}
    if what.startswith("stage "):
        planned = start(work, "planned", recipe=recipe, DRY_RUN="1")
        ended(planned, 0)
        assert "[test " in output(planned)[1] and f"stage {name}: would run\n" in output(planned)[1]


@NEEDS_CPU_PATH
@pytest.mark.lane("two_nodes_stopped_frozen_and_killed")
def test_a_signal_to_one_node_stops_both_and_a_frozen_or_killed_node_ends_the_other(lane):
    """two_nodes_stopped_frozen_and_killed, on the second lane: its runs mostly wait (for a stall, two beats), which
    the other lane's work fills; its checks fail there, and here."""
    lane["two_nodes_stopped_frozen_and_killed"].result()


@lane_job
def two_nodes_stopped_frozen_and_killed(tmp_path_factory, lane):
    """Two runs of two nodes at once, node 1 hit at update 3. A simulated srun step (srun's variables, a stand-in
    scontrol recording what it is asked; test_data_parallel.py's), the job allowing a requeue: SIGUSR1 to every
    process of node 1's recipe (its shell, recipes/training.py, fairseq-train, its data workers), none to node 0: the
    flag, summed in fairseq's all-reduce, stops both after the same update, both lines naming SIGUSR1; both exit 75,
    and run 0 requeues the job. NUM_NODES=2 with STALL_MINUTES=0.1 (6 s): node 1's fairseq-train frozen (SIGSTOP):
    node 0's watchdog ends it in one line naming rank 1 and the checkpoint a re-run resumes from (training/watchdog.py);
    node 1's fairseq-train then killed: its recipe says so. Both nodes again, resuming, with STALL_MINUTES=0.3 (beats
    of 3 s, a stall at 18 s): node 1's fairseq-train killed (SIGKILL, its data workers too) at an update: node 0's
    collective fails at once, and it ends two beats later in one line naming rank 1 as the lost peer. Both again: they
    resume and finish."""
    tmp_path = tmp_path_factory.mktemp("two_nodes")
    try:
        two_nodes(tmp_path, reversal_corpus(tmp_path_factory))
    finally:  # what a failure left running (a node waiting for gloo's 30 minutes, a frozen one)
        kill_what_names(tmp_path)


def two_nodes(tmp_path, reversal_data):
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
    stopped, again = "test: stopped: training stopped by SIGUSR1", "SLURM job 4242 is requeued by its first run"
    assert said[1] == f"{stopped} at update {update}; {again} where the job allows it"
    # node 0 received none: the summed flag carries the signal node 1 received (a flag without it, 1, reads SIGTERM)
    assert said[0] == f"{stopped} at update {update}; SLURM job 4242 requeued: it resumes when SLURM starts it again"
    assert (signalled / "asked").read_text().splitlines()[-2:] == ["show job -o 4242", "requeue 4242"]

    line, _ = ended(nodes[frozen][0], 1, within=60)
    assert line.startswith("vaswani_plugin: error: rank 0 made no training step for 0.1 minutes (STALL_MINUTES=0.1)")
    named, ending = f": rank 1 ({socket.gethostname()}, pid ", "; ending this process: run the same command again once"
    assert named in line and " stopped answering; the last checkpoint: " in line and ending in line
    assert f"{frozen / 'c'}/checkpoint_last.pt (update " in line
    killed(nodes[frozen][1])
    _, line = ended(nodes[frozen][1], 1)
    again = f"test: error: fairseq-train was ended by SIGKILL; run the same command again (it resumes from {frozen}/c)"
    assert line == again

    log = frozen / "c" / "train.log"
    seen, beat = len(text(log)), Watchdog(frozen, 0, 2, minutes=0.3).beat_seconds
    settings.update(MASTER_PORT=str(free_port()), STALL_MINUTES="0.3")  # another launch: another port
    lost = [start(frozen, f"lost{rank}", train, NODE_RANK=str(rank), **settings) for rank in (0, 1)]
    wait_until(lambda: "num_updates=" in text(log, seen), lost)  # an update of this launch
    since = time.monotonic()
    killed(lost[1])
    line, _ = ended(lost[0], 1, within=60)
    assert time.monotonic() - since >= 2 * beat  # the hook waited two beats for the heartbeats
    # through the plugin's error hook, which torch's own wraps in a distributed run: its lines begin with the rank
    assert line.startswith("[rank0]: vaswani_plugin: error: rank 0 lost a peer in a collective (RuntimeError: "), line
    assert named in line and " stopped answering; the last checkpoint: " in line and ending in line
    assert ended(lost[1], 1)[1] == again

    saved = updates_of(frozen / "c" / "checkpoint_last.pt")
    settings.update(MASTER_PORT=str(free_port()))
    train = f"--max-update {saved + 2} --save-interval-updates 2"
    finished = [start(frozen, f"again{rank}", train, NODE_RANK=str(rank), **settings) for rank in (0, 1)]
    for run in finished:
        ended(run, 0, within=180)
    resumed = re.search(
        f"Loaded checkpoint {frozen}/c/checkpoint_last.pt \\(epoch \\d+ @ {saved} updates\\)", output(finished[0])[0]
    )
    assert resumed and updates_of(frozen / "c" / "checkpoint_last.pt") == saved + 2


def killed(run):
    """fairseq-train's processes in the run's group killed (SIGKILL), as a lost node's: each listed until none is
    left, so that a data worker it started meanwhile goes too."""
    while training_processes(run):
        for pid in training_processes(run):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


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


def test_the_summed_flag_names_the_signals_the_ranks_received(monkeypatch):
    """training/preemption.py's flag, summed as fairseq sums the logging outputs (in a double): the signals some rank
    received, each whatever the number of ranks that received it (up to 2**16 - 1), none from a sum of none."""

    def flags(*received):
        for number in received:
            monkeypatch.setattr(preemption, "_received", number)
            yield preemption.flag()

    usr1, term, sigint = signal.SIGUSR1, signal.SIGTERM, signal.SIGINT
    assert preemption.summed(float(sum(flags(0, usr1, 0, 0)))) == [usr1]
    assert preemption.summed(float(sum(flags(term, 0, usr1, term)))) == [term, usr1]
    assert preemption.name(preemption.summed(float(sum(flags(usr1, term))))) == "SIGTERM and SIGUSR1"
    assert preemption.summed(float(sum(flags(0, 0)))) == [] and preemption.name([sigint]) == "SIGINT"
    everyone = float(sum(flags(*[sigint] * (2**16 - 1), term)))
    assert preemption.summed(torch.tensor(everyone, dtype=torch.double).item()) == [term, sigint]


def test_a_stop_that_ends_fairseq_train_outside_an_update_is_the_stop_line_and_a_kill_is_not(
    tmp_path, monkeypatch, capsys
):
    """recipes/training.py's ended, in process, with no record of a stop (fairseq-train's Python, finalising after its
    last update, has restored the default handlers when the stop passed on reaches it): ended by the signal this run
    passed on, the stop line and 75; by another (a SIGKILL after a stop), or with none received, the kill's line."""
    from recipes import stages, training

    monkeypatch.setenv("RECIPE", "test")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    run = stages.Run(tmp_path, rank=0)
    monkeypatch.setattr(training, "RECEIVED", [signal.SIGTERM])
    with pytest.raises(SystemExit) as exit:
        training.ended(run, "train", tmp_path, -signal.SIGTERM)
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit.value.code == preemption.EXIT_STATUS
    assert said == "test: stopped: training stopped by SIGTERM; run the same command again"
    for received in ([signal.SIGTERM], []):
        monkeypatch.setattr(training, "RECEIVED", received)
        with pytest.raises(stages.StageError, match=r"^fairseq-train was ended by SIGKILL; run the same command"):
            training.ended(run, "train", tmp_path, -signal.SIGKILL)
