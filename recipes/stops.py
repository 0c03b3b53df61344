"""A stop of a recipe (docs/recipes.md, "Stopping a recipe"): what recipes/common.sh's stoppable asks once the
recipe's shell received SIGTERM, SIGUSR1 or SIGINT while a stage ran as its job.

    python -m recipes.stops end PID             PID and every process below it ended, and waited for
    python -m recipes.stops line WHAT SIGNAL    the recipe's last line, on stderr

The standard library only (and recipes/training.py's requeue for the line): it runs in the shell's trap.
"""

import os
import signal
import subprocess
import sys
import time
from typing import Dict, List

WAIT_SECONDS = 10.0  # for the processes below PID to end once sent SIGTERM (none of a stage's handles it)


def table() -> Dict[int, List[int]]:
    """Each process's children, by pid: from /proc (Linux), else from `ps` ({} without either)."""
    parents = {}
    if os.path.isdir("/proc/self"):
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as stat:
                    parents[int(name)] = int(stat.read().rpartition(")")[2].split()[1])  # after its name: state, ppid
            except (OSError, IndexError, ValueError):  # ended meanwhile
                continue
    else:
        try:
            listed = subprocess.run(["ps", "-A", "-o", "pid=", "-o", "ppid="], capture_output=True, text=True).stdout
        except OSError:
            listed = ""
        parents = {int(pid): int(ppid) for pid, ppid in (line.split() for line in listed.splitlines())}
    children: Dict[int, List[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    return children


def running(pid: int) -> bool:
    """Not ended: neither gone nor a zombie (ended, for its parent or init to reap)."""
    if os.path.isdir("/proc/self"):
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
                return stat.read().rpartition(")")[2].split()[0] != "Z"
        except (OSError, IndexError):
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def end(pid: int, wait: float = WAIT_SECONDS) -> None:
    """PID and every process below it stopped (SIGSTOP, each before its children are listed, so that none starts
    another unseen), sent SIGTERM and continued; then those below waited for until each has ended (PID is the
    shell's child: the shell waits for it), for at most `wait` seconds."""
    tree, below = [], [pid]
    while below:
        process = below.pop(0)
        try:
            os.kill(process, signal.SIGSTOP)
        except OSError:  # ended meanwhile
            continue
        tree.append(process)
        below += table().get(process, [])
    for number in (signal.SIGTERM, signal.SIGCONT):
        for process in tree:
            try:
                os.kill(process, number)
            except OSError:
                pass
    deadline = time.monotonic() + wait
    while any(running(process) for process in tree[1:]) and time.monotonic() < deadline:
        time.sleep(0.05)


def said(how: str, run) -> str:
    """A stopped recipe's last line, `RECIPE: stopped: HOW; run the same command again` (or the SLURM requeue's
    words for the stages.Run `run`): the shell's after a stage it ended (line) and recipes/training.py's."""
    from recipes import stages, training

    return f"{stages.env('RECIPE')}: stopped: {how}; {training.requeue(run)}"


def line(what: str, name: str) -> str:
    """`RECIPE: stopped: WHAT stopped by SIGNAME; ...` for this run."""
    from recipes import stages

    return said(f"{what} stopped by SIG{name}", stages.Run.from_environment())


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["end"] and len(argv) == 2:
        end(int(argv[1]))
    elif argv[:1] == ["line"] and len(argv) == 3:
        print(line(argv[1], argv[2]), file=sys.stderr, flush=True)
    else:
        sys.exit("usage: python -m recipes.stops end PID | line WHAT SIGNAL")


if __name__ == "__main__":
    main()
