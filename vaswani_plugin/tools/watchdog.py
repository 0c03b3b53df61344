"""A rank that stops answering ends a data-parallel fairseq-train within STALL_MINUTES, whatever the backend.

Each process of the run has a thread that every few seconds writes its heartbeat, SAVE_DIR/.heartbeats/rank-N.json
(host, pid, update, time), and reads the others'. The training itself only notes each step it makes (an update or a
validation batch: fairseq's reduction of its values, tools/progress_meter.py), in memory. When a process has made no
step for STALL_MINUTES, its thread names the ranks whose heartbeat stopped (a frozen process writes none; one
blocked in a collective still does), prints one line and ends the process with os._exit: an exception would not
interrupt a collective blocked on a frozen peer. Opt-in through the environment (VASWANI_STALL_MINUTES; the recipes
set it from STALL_MINUTES, default 10); a run of one process has nobody to wait for. Under NCCL untested here.
"""

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional

ENV = "VASWANI_STALL_MINUTES"


class Watchdog:
    def __init__(
        self,
        save_dir: Path,
        rank: int,
        world_size: int,
        minutes: float,
        clock: Callable[[], float] = time.time,
        last_checkpoint: Callable[[Path], str] = lambda save_dir: "see " + str(save_dir),
    ):
        self.folder = Path(save_dir) / ".heartbeats"
        self.rank, self.world_size, self.minutes = rank, world_size, minutes
        self.clock, self.last_checkpoint, self.save_dir = clock, last_checkpoint, Path(save_dir)
        self.beat_seconds = max(0.5, min(5.0, minutes * 60 / 6))  # six beats a stall at least
        self.update = 0
        self.stepped = clock()
        self.stopped = threading.Event()

    def step(self, update: int) -> None:
        """The training made a step (constant work: no I/O, no lock)."""
        self.update, self.stepped = update, self.clock()

    def heartbeat_path(self, rank: int) -> Path:
        return self.folder / f"rank-{rank}.json"

    def beat(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.heartbeat_path(self.rank)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        record = {"host": socket.gethostname(), "pid": os.getpid(), "update": self.update, "time": self.clock()}
        temporary.write_text(json.dumps(record), encoding="utf-8")
        os.replace(temporary, path)

    def silent(self) -> List[str]:
        """The other ranks whose heartbeat is older than three beats (or missing), each as `rank N (host, pid P,
        update U, S s ago)`."""
        now, found = self.clock(), []
        for rank in range(self.world_size):
            if rank == self.rank:
                continue
            try:
                beat = json.loads(self.heartbeat_path(rank).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                found.append(f"rank {rank} (no heartbeat)")
                continue
            if now - beat["time"] > 3 * self.beat_seconds:
                found.append(
                    f"rank {rank} ({beat['host']}, pid {beat['pid']}, update {beat['update']:,}, silent "
                    f"{now - beat['time']:.0f} s)"
                )
        return found

    def check(self) -> Optional[str]:
        """One beat: this process's heartbeat written; the line, once it has waited STALL_MINUTES."""
        self.beat()
        waited = self.clock() - self.stepped
        if waited < self.minutes * 60:
            return None
        silent = self.silent()
        who = ", ".join(silent) + " stopped answering" if silent else "every rank still answers (a hung collective?)"
        return (
            f"rank {self.rank} made no training step for {waited / 60:.1f} minutes (STALL_MINUTES={self.minutes:g}) "
            f"after update {self.update:,}: {who}; the last checkpoint: {self.last_checkpoint(self.save_dir)}; "
            "ending this process: run the same command again once every node answers"
        )

    def watch(self, end: Callable[[int], None] = os._exit) -> None:
        """The thread's loop: beat until the stall, then the line and the end of the process."""
        while not self.stopped.wait(self.beat_seconds):
            line = self.check()
            if line is not None:
                print(f"vaswani_plugin: error: {line}", file=sys.stderr, flush=True)
                end(1)
                return


_watchdog: Optional[Watchdog] = None


def start(save_dir: str, rank: int, world_size: int, last_checkpoint: Callable[[Path], str]) -> None:
    """At the start of a training process: a watchdog when VASWANI_STALL_MINUTES asks for one (> 0) and the run
    has more than one process; one a process. `last_checkpoint`: the checkpoint a re-run resumes from, said."""
    global _watchdog
    minutes = float(os.environ.get(ENV) or 0)
    if _watchdog is not None or minutes <= 0 or world_size <= 1:
        return
    _watchdog = Watchdog(Path(save_dir), rank, world_size, minutes, last_checkpoint=last_checkpoint)
    threading.Thread(target=_watchdog.watch, name="vaswani_plugin watchdog", daemon=True).start()


def step(update: int) -> None:
    if _watchdog is not None:
        _watchdog.step(update)


def stop() -> None:
    """The training process ends (or a test's run): the thread stops at its next beat."""
    global _watchdog
    if _watchdog is not None:
        _watchdog.stopped.set()
    _watchdog = None
