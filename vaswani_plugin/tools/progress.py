"""fairseq-train's progress with an end: a filter its output passes through, which adds an ETA line at each log
interval and keeps a JSON-lines record of the run (training, dev scores, checkpoints) for programs and curves.

    fairseq-train ... 2>&1 | python -m vaswani_plugin.tools.progress --records SAVE_DIR/progress.jsonl \\
        [--on-checkpoint COMMAND] -- ARGS-OF-FAIRSEQ-TRAIN

The target is read from the training's arguments: --max-update, --max-epoch (updates per epoch from the log) and
--stop-time-hours (the time budget, counted over a resumed run's pieces as fairseq counts it).
"""

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

from vaswani_plugin.cli import run_command

TRAIN_INNER = re.compile(r"\| train_inner \| epoch (\d+):\s+(\d+) / (\d+) (.*)$")
EPOCH = re.compile(r"\| train \| epoch (\d+) \| (.*)$")
VALID = re.compile(r"\| valid \| epoch (\d+) \| valid on '([^']+)' subset \| (.*)$")
SAVED = re.compile(r"Saved checkpoint (\S+) \(epoch (\d+) @ (\d+) updates")
LOADED = re.compile(r"Loaded checkpoint (\S+) \(epoch (\d+) @ (\d+) updates\)")
PRECISION = re.compile(r"\| precision: (.*)$")
VALIDATING = re.compile(r'begin validation on "([^"]+)" subset')
DEV_SCORES = {"bleu": "sacreBLEU", "tok_bleu": "tokenised BLEU", "f1": "F1"}  # a valid record's scores, named
RATE_WINDOW = 5  # intervals the update rate is measured over (validations and saves included)


def numbers(pairs: List[List[str]]) -> Dict[str, float]:
    found = {}
    for pair in pairs:
        if len(pair) == 2:
            try:
                found[pair[0].strip()] = float(pair[1])
            except ValueError:
                pass
    return found


def parse_line(line: str) -> Optional[dict]:
    """A record of one of fairseq-train's log lines (simple format), or None for the others."""
    if match := TRAIN_INNER.search(line):
        values = numbers([pair.split("=", 1) for pair in match[4].split(", ")])
        return dict(
            values,
            kind="train",
            epoch=int(match[1]),
            epoch_updates=int(match[3]),
            update=int(values.get("num_updates", 0)),
        )
    if match := VALID.search(line):
        values = numbers([pair.strip().split(" ", 1) for pair in match[3].split(" | ")])
        return dict(
            values, kind="valid", subset=match[2], epoch=int(match[1]), update=int(values.get("num_updates", 0))
        )
    if match := EPOCH.search(line):
        values = numbers([pair.strip().split(" ", 1) for pair in match[2].split(" | ")])
        return dict(values, kind="epoch", epoch=int(match[1]), update=int(values.get("num_updates", 0)))
    if match := SAVED.search(line):
        return {"kind": "checkpoint", "path": match[1], "epoch": int(match[2]), "update": int(match[3])}
    if match := LOADED.search(line):
        return {"kind": "resumed", "path": match[1], "epoch": int(match[2]), "update": int(match[3])}
    if match := PRECISION.search(line):
        return {"kind": "precision", "precision": match[1].strip()}
    return None


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
    """The filter's state: the target, the rate and the records of this piece."""

    def __init__(
        self,
        records_path: Path,
        target: argparse.Namespace,
        on_checkpoint: Optional[str] = None,
        workers: int = 1,
        refresh_interval: float = 0.0,
        clock=time.time,
    ):
        self.records_path, self.target, self.on_checkpoint, self.clock = records_path, target, on_checkpoint, clock
        self.started = clock()
        # The first refresh a --refresh-interval after the start: a short run is drawn once, by the recipe at its end.
        self.refresh_interval, self.refreshed, self.validating = refresh_interval, self.started, None
        self.before = self.previous_seconds()
        self.recent: List[tuple] = []  # (time, update) of the last intervals
        self.refresh: Optional[subprocess.Popen] = None
        self.refresh_pending = False
        if records_path.exists() and records_path.stat().st_size:
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

    def previous_seconds(self) -> float:
        """The training time of the pieces before this one (a resumed run), as fairseq's budget counts it."""
        if not self.records_path.exists():
            return 0.0
        seconds = [r["seconds"] for r in stitched(read_records(self.records_path)) if "seconds" in r]
        return max(seconds, default=0.0)

    def write(self, record: dict):
        self.records_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.records_path, "a", encoding="utf-8") as file:
            file.write(json.dumps(record) + "\n")

    def line(self, line: str) -> List[str]:
        """The lines to print after `line` (which is printed as it is)."""
        record = parse_line(line)
        now = self.clock()
        if VALIDATING.search(line):
            self.validating = now
        if record is None:
            self.poll_refresh()
            return []
        record.update(time=round(now, 3), elapsed=round(now - self.started, 3))
        said = []
        if record["kind"] == "train":
            said.append(self.estimate(record, now))
        elif record["kind"] == "valid":
            if self.validating is not None:  # the validation's seconds: its share of training, in the report
                record["validation_seconds"], self.validating = round(now - self.validating, 3), None
            said.extend(dev_line(record))
        self.write(record)
        if record["kind"] == "checkpoint" and self.on_checkpoint:
            self.refresh_pending = True
        self.poll_refresh()
        return said

    def estimate(self, record: dict, now: float) -> str:
        """The ETA line; the record gets the target update and the seconds left."""
        update = record["update"]
        self.recent = (self.recent + [(now, update)])[-(RATE_WINDOW + 1) :]
        (first_time, first_update), rate = self.recent[0], record.get("ups", 0.0)
        if now > first_time and update > first_update:
            rate = (update - first_update) / (now - first_time)
        targets = []
        if self.target.max_update:
            targets.append(self.target.max_update)
        if self.target.max_epoch:
            targets.append(self.target.max_epoch * record["epoch_updates"])
        target = min(targets) if targets else None
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

    def poll_refresh(self):
        """Run --on-checkpoint after a checkpoint, one at a time, at low priority and at most once every
        --refresh-interval seconds, never waiting for it."""
        if self.refresh is not None and self.refresh.poll() is None:
            return
        self.refresh = None
        now = self.clock()
        if self.refresh_pending and now - self.refreshed >= self.refresh_interval:
            self.refresh_pending, self.refreshed = False, now
            self.refresh = subprocess.Popen(
                self.on_checkpoint,
                shell=True,
                stdin=subprocess.DEVNULL,
                stdout=sys.stderr,
                preexec_fn=lambda: os.nice(10),
            )

    def finish(self):
        """At the end of training's output: the refresh under way waited for, so that none outlives the training
        (the recipe writes the last report itself)."""
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


def training_target(argv: List[str]) -> argparse.Namespace:
    """What ends the training, from fairseq-train's arguments (the last of a repeated option, as fairseq)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--max-update", type=int, default=0)
    parser.add_argument("--max-epoch", type=int, default=0)
    parser.add_argument("--stop-time-hours", type=float, default=0.0)
    target, _ = parser.parse_known_args(argv)
    target.argv = argv
    return target


def main(argv=None):
    parser = argparse.ArgumentParser(prog="vaswani_plugin.tools.progress", description=__doc__.splitlines()[0])
    parser.add_argument("--records", required=True, type=Path, help="the JSON-lines record, appended to")
    parser.add_argument(
        "--on-checkpoint",
        help="a shell command run in the background after each checkpoint "
        "(one at a time, low priority): the recipes redraw curves and report",
    )
    parser.add_argument(
        "--refresh-interval",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="run --on-checkpoint at most this often, the first time this long after the start "
        "(default: after every checkpoint)",
    )
    parser.add_argument("--workers", type=int, default=1, help="processes training together (for the report)")
    parser.add_argument("training", nargs="*", help="fairseq-train's arguments, after --")
    run_command(parser, progress_command, argv)


def progress_command(args):
    progress = Progress(
        args.records, training_target(args.training), args.on_checkpoint, args.workers, args.refresh_interval
    )
    try:
        for line in sys.stdin:
            sys.stdout.write(line)
            if progress is not None:
                try:
                    for said in progress.line(line.rstrip("\n")):
                        sys.stdout.write(said + "\n")
                except Exception as error:  # noqa: BLE001  (a broken pipe here would stop the training)
                    sys.stdout.write(
                        f"[progress] no more estimates or records ({type(error).__name__}: {error}); training goes on\n"
                    )
                    progress.finish()
                    progress = None
            sys.stdout.flush()
    finally:
        if progress is not None:
            progress.finish()


if __name__ == "__main__":
    main()
