"""A training run's progress with an end: an ETA line at each log interval, the dev scores at each validation and a
JSON-lines record (SAVE_DIR/progress.jsonl) for programs and curves, written inside fairseq-train's own process on
rank 0 by training/progress_meter.py (from the values fairseq logs); the readers (`stitched`) for curves and report.
"""

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

DEV_SCORES = {"bleu": "sacreBLEU", "tok_bleu": "tokenised BLEU", "f1": "F1"}  # a valid record's scores, named
RATE_WINDOW = 5  # intervals the update rate is measured over (validations and saves included)


@dataclass
class Target:
    """What ends the training (fairseq's --max-update, --max-epoch, --stop-time-hours; 0: not set)."""

    max_update: int = 0
    max_epoch: int = 0
    stop_time_hours: float = 0.0
    argv: List[str] = field(default_factory=list)


def read_records(path) -> List[dict]:
    """The records of a file, a line cut short by a kill left out."""
    records = []
    with open(path, encoding="utf-8") as file:
        for line in file:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def pieces(records: List[dict]) -> List[List[dict]]:
    """The runs of fairseq-train that wrote the records (a resumed training: one piece per start), in order."""
    found: List[List[dict]] = []
    for record in records:
        if record.get("kind") == "start" or not found:
            found.append([])
        found[-1].append(record)
    return found


def stitched(records: List[dict]) -> List[dict]:
    """One run's records in update order: each piece's `seconds` continue from the piece before it (its time is
    spent), and the records of updates a resumed piece did again (after its checkpoint) replace the earlier ones."""
    kept: List[dict] = []
    offset = 0.0
    for piece in pieces(records):
        resumed_at = next((r["update"] for r in piece if r.get("kind") == "resumed"), None)
        if resumed_at is not None:
            kept = [r for r in kept if r.get("update", 0) <= resumed_at or r.get("kind") == "start"]
        elapsed = [r["elapsed"] for r in piece if "elapsed" in r]
        for record in piece:
            if "elapsed" in record:
                kept.append(dict(record, seconds=offset + record["elapsed"]))
        offset += max(elapsed, default=0.0)
    return kept


def duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours} h {rest // 60:02d} min" if hours else f"{rest // 60} min {rest % 60:02d} s"


class Progress:
    """The ETA, the records of this piece of training and the refresh: what training/progress_meter.py feeds it."""

    def __init__(
        self,
        records_path: Optional[Path],
        target: Target,
        refresh: Optional[str] = None,
        workers: int = 1,
        refresh_interval: float = 0.0,
        clock=time.time,
    ):
        self.records_path, self.target, self.refresh_command, self.clock = records_path, target, refresh, clock
        self.started = clock()
        # The first refresh a refresh_interval after the start: a short run is drawn once, by the recipe at its end.
        self.refresh_interval, self.refreshed, self.validating = refresh_interval, self.started, None
        earlier = stitched(read_records(records_path)) if records_path and records_path.exists() else []
        self.before = max((r["seconds"] for r in earlier if "seconds" in r), default=0.0)
        # Updates an epoch: the update at the end of the run's first epoch (fairseq counts epochs from the start)
        self.epoch_updates = next((r["update"] for r in earlier if r.get("kind") == "epoch"), None)
        self.recent: List[tuple] = []  # (time, update) of the last intervals
        self.refresh: Optional[subprocess.Popen] = None
        self.refresh_pending = False
        if records_path and records_path.exists() and records_path.stat().st_size:
            with open(records_path, "rb+") as file:  # a record cut short by a kill: ended, so the next line parses
                file.seek(-1, os.SEEK_END)
                if file.read(1) != b"\n":
                    file.write(b"\n")
        self.write(
            {
                "kind": "start",
                "argv": target.argv,
                "workers": workers,
                "machine": machine(),
                "max_update": target.max_update,
                "max_epoch": target.max_epoch,
                "stop_time_hours": target.stop_time_hours,
            }
        )

    def write(self, record: dict):
        if self.records_path is None:
            return
        self.records_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.records_path, "a", encoding="utf-8") as file:
            file.write(json.dumps(record) + "\n")

    def begin_validation(self, since: float):
        """A validation began at `since` (the end of the last update; its first batch is seen once it is done)."""
        if self.validating is None:
            self.validating = since

    def add(self, record: dict) -> List[str]:
        """Record one of fairseq's logged sets of values (kind train, valid, epoch, resumed or precision); the
        lines to print after fairseq's own."""
        now = self.clock()
        record = dict(record, time=round(now, 3), elapsed=round(now - self.started, 3))
        said = []
        if record["kind"] == "train":
            said.append(self.estimate(record, now))
        elif record["kind"] == "valid":
            if self.validating is not None:  # the validation's seconds: its share of training, in the report
                record["validation_seconds"], self.validating = round(now - self.validating, 3), None
            said.extend(dev_line(record))
            self.refresh_pending = bool(self.refresh_command)  # a checkpoint follows its validation
        elif record["kind"] == "epoch" and self.epoch_updates is None:
            self.epoch_updates = record["update"]
        elif record["kind"] == "resumed" and "training_seconds" in record:
            self.before = record["training_seconds"]  # fairseq's own, from the checkpoint: what its budget counts
        self.write(record)
        self.poll_refresh()
        return said

    def estimate(self, record: dict, now: float) -> str:
        """The ETA line; the record gets the target update and the seconds left."""
        update = record["update"]
        self.recent = (self.recent + [(now, update)])[-(RATE_WINDOW + 1) :]
        (first_time, first_update), rate = self.recent[0], record.get("ups", 0.0)
        if now > first_time and update > first_update:
            rate = (update - first_update) / (now - first_time)
        target = self.target_update()
        left_by_updates = (target - update) / rate if target and rate > 0 else None
        left_by_budget = None
        if self.target.stop_time_hours:
            left_by_budget = self.target.stop_time_hours * 3600 - (self.before + now - self.started)
        lefts = [s for s in (left_by_updates, left_by_budget) if s is not None]
        left = max(min(lefts), 0.0) if lefts else None
        record.update(target_update=target, seconds_left=None if left is None else round(left, 1), rate=round(rate, 4))
        parts = [
            f"update {update:,}" + (f" of {target:,} ({100 * update / target:.1f} %)" if target else ""),
            f"{rate:.2f} updates/s",
            f"{record.get('wps', 0):,.0f} target tokens/s",
        ]
        if left is not None:
            ends = time.strftime("%Y-%m-%d %H:%M", time.localtime(now + left))
            why = "the time budget" if left_by_budget is not None and left == max(left_by_budget, 0.0) else "updates"
            reach = f", at about update {update + int(rate * left):,}" if why == "the time budget" else ""
            parts.append(f"{duration(left)} left ({why}), ends about {ends}{reach}")
        return "[progress] " + " | ".join(parts)

    def target_update(self) -> Optional[int]:
        """The update that ends training: --max-update, or --max-epoch's once the first epoch has ended (fairseq's
        values do not say an epoch's length before), whichever comes first; None without either."""
        targets = [self.target.max_update] if self.target.max_update else []
        if self.target.max_epoch and self.epoch_updates:
            targets.append(self.target.max_epoch * self.epoch_updates)
        return min(targets) if targets else None

    def done(self, update: int) -> float:
        """The share of the target update reached, in percent (fairseq's log lines show it as `done`); NaN
        without one."""
        target = self.target_update()
        return round(100 * update / target, 1) if target else float("nan")

    def poll_refresh(self):
        """Run the refresh command after a validation (each checkpoint follows one), one at a time, at low
        priority and at most once every refresh_interval seconds, never waiting for it."""
        if self.refresh is not None and self.refresh.poll() is None:
            return
        self.refresh = None
        now = self.clock()
        if self.refresh_pending and now - self.refreshed >= self.refresh_interval:
            self.refresh_pending, self.refreshed = False, now
            self.refresh = subprocess.Popen(
                self.refresh_command,
                shell=True,
                stdin=subprocess.DEVNULL,
                stdout=sys.stderr,
                preexec_fn=lambda: os.nice(10),
            )

    def finish(self):
        """At the end of training: the refresh under way waited for, so that none outlives the training (the
        recipe writes the last report itself)."""
        if self.refresh is not None:
            self.refresh.wait()
        self.refresh = None


def dev_line(record: dict) -> List[str]:
    scores = [f"{name} {record[key]:.2f}" for key, name in DEV_SCORES.items() if key in record]
    if not scores:
        return []
    sentences = f" ({int(record['dev_sentences']):,} sentences)" if "dev_sentences" in record else ""
    return [
        f"[progress] dev at update {record['update']:,}{sentences}: {', '.join(scores)}, "
        f"loss {record.get('loss', 0):.3f}"
    ]


def machine() -> str:
    """The GPUs (nvidia-smi's names) or else the CPU model, as the report states it."""
    if shutil.which("nvidia-smi"):
        try:
            names = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
            ).stdout.split("\n")
            names = [name.strip() for name in names if name.strip()]
            if names:
                return f"{len(names)} x {names[0]} (this node)"
        except (OSError, subprocess.SubprocessError):
            pass
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            model = next((line.split(":", 1)[1].strip() for line in file if line.startswith("model name")), model)
    except OSError:
        pass
    return f"CPU: {model}, {os.cpu_count()} cores"
