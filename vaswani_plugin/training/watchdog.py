"""A rank that stops answering ends a data-parallel fairseq-train within STALL_MINUTES, whatever the backend.

Each process of the run has a thread that every few seconds writes its heartbeat, SAVE_DIR/.heartbeats/rank-N.json
(host, pid, update, time), and reads the others'. The training itself only notes each step it makes (an update or a
validation batch: fairseq's reduction of its values, training/progress_meter.py), in memory. When a process has made no
step for STALL_MINUTES, its thread names the ranks whose heartbeat stopped (a frozen process writes none; one
blocked in a collective still does), prints one line and ends the process with os._exit: an exception would not
interrupt a collective blocked on a frozen peer. A peer that died outright (killed, its node lost) fails the
collective at once instead (gloo: "Connection reset by peer"): the plugin's error hook (cli.py, given `lost` by
training/progress_meter.py) waits two beats and names the ranks whose heartbeat did not change meanwhile. Before its
first step, a process is ended only where another rank is silent: the ranks' start-up (building, loading, batching,
each at its own pace) is not a stall however long it takes while every rank answers. Opt-in
through the environment (VASWANI_STALL_MINUTES; the recipes set it from STALL_MINUTES, default 10); a run of one
process has nobody to wait for. Under NCCL untested here.
"""

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from vaswani_plugin.durable import write_text

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
        self.update, self.started = 0, False
        self.stepped = clock()
        self.stopped = threading.Event()

    def step(self, update: int) -> None:
        """The training made a step (constant work: no I/O, no lock)."""
        self.update, self.stepped, self.started = update, self.clock(), True

    def heartbeat_path(self, rank: int) -> Path:
        return self.folder / f"rank-{rank}.json"

    def beat(self) -> None:
        """This process's heartbeat, written atomically (a reader never sees half of one) but not durably: it says
        the process is alive now, which a crash ends anyway; no fsync every few seconds for it (durable.py)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        record = {"host": socket.gethostname(), "pid": os.getpid(), "update": self.update, "time": self.clock()}
        write_text(self.heartbeat_path(self.rank), json.dumps(record), durable=False)

    def heartbeats(self) -> Dict[int, Optional[dict]]:
        """The other ranks' last heartbeats (None: none readable)."""
        found: Dict[int, Optional[dict]] = {}
        for rank in range(self.world_size):
            if rank != self.rank:
                try:
                    found[rank] = json.loads(self.heartbeat_path(rank).read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    found[rank] = None
        return found

    def named(self, rank: int, beat: Optional[dict]) -> str:
        """`rank N (host, pid P, update U, silent S s)`."""
        if beat is None:
            return f"rank {rank} (no heartbeat)"
        silent = self.clock() - beat["time"]
        return f"rank {rank} ({beat['host']}, pid {beat['pid']}, update {beat['update']:,}, silent {silent:.0f} s)"

    def silent(self) -> List[str]:
        """The other ranks whose heartbeat is older than three beats (or missing), named."""
        now = self.clock()
        beats = self.heartbeats().items()
        return [
            self.named(rank, beat) for rank, beat in beats if beat is None or now - beat["time"] > 3 * self.beat_seconds
        ]

    def line(self, what: str, silent: List[str]) -> str:
        who = ", ".join(silent) + " stopped answering" if silent else "every rank still answers (a hung collective?)"
        return (
            f"rank {self.rank} {what} after update {self.update:,}: {who}; the last checkpoint: "
            f"{self.last_checkpoint(self.save_dir)}; ending this process: run the same command again once every node "
            "answers"
        )

    def check(self) -> Optional[str]:
        """One beat: this process's heartbeat written; the line, once it has waited STALL_MINUTES (before its first
        step: and another rank is silent)."""
        self.beat()
        waited = self.clock() - self.stepped
        if waited < self.minutes * 60:
            return None
        silent = self.silent()
        if not silent and not self.started:  # still starting, every rank answering
            return None
        what = f"made no training step for {waited / 60:.1f} minutes (STALL_MINUTES={self.minutes:g})"
        return self.line(what, silent)

    def lost(self, error: BaseException, sleep: Callable[[float], None] = time.sleep) -> Optional[str]:
        """After this process's training raised `error` (a collective whose peer died fails at once): the other ranks
        whose heartbeat did not change over the next two beats, named in the line (this process's thread beats
        meanwhile, so the other ranks' hooks see it alive); None when every rank beat (this rank's own error)."""
        before = self.heartbeats()
        sleep(2 * self.beat_seconds)
        after = self.heartbeats()
        gone = [self.named(rank, beat) for rank, beat in after.items() if beat is None or beat == before[rank]]
        if not gone:
            return None
        said = " ".join(f"{type(error).__name__}: {error}".split())
        return self.line(f"lost a peer in a collective ({said[:160]}{'...' if len(said) > 160 else ''})", gone)

    def watch(self, end: Callable[[int], None] = os._exit) -> None:
        """The thread's loop: beat (from the start) until the stall, then the line and the end of the process. The
        line goes to the process's own stderr: sys.stderr may be torch's buffer, while its error hook runs."""
        while True:
            line = self.check()
            if line is not None:
                print(f"vaswani_plugin: error: {line}", file=sys.__stderr__, flush=True)
                end(1)
                return
            if self.stopped.wait(self.beat_seconds):
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


def lost(error: BaseException) -> Optional[str]:
    """The error hook's line when a rank being watched raised `error` because another rank died; else None."""
    if _watchdog is None or not isinstance(error, RuntimeError):  # a failed collective is one (gloo's, NCCL's)
        return None
    return _watchdog.lost(error)


def step(update: int) -> None:
    if _watchdog is not None:
        _watchdog.step(update)


def stop() -> None:
    """The training process ends (or a test's run): the thread stops at its next beat."""
    global _watchdog
    if _watchdog is not None:
        _watchdog.stopped.set()
    _watchdog = None
