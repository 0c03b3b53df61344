"""Chaos: a recipe killed and stopped at seeded instants of every stage, run again after each, and its outputs at the
end against those of the same run never interrupted (issue 66).

    python benchmarks/chaos.py --seeds 1 2 3 --kills 17 --stops 7 [--work-dir DIR] [--recipe wmt14_en_de_big]

The recipe (wmt14_en_de_big, the default, on the tiny offline WMT14 mirror of wmt_mirror.py; or quickstart, on the
first lines of ../shared/data/multi30k) trains a tiny model for MAX_UPDATE=8 updates (a count: no clock) on one
thread, no GPU. It runs once unbroken (DIR/unbroken). Its stages are the parts of a run between the recipe's stage
lines on stderr (`[RECIPE HH:MM:SS] stage NAME: ...`): prepare (from the start), train, average, translate, and score
(from translate's end to the recipe's: the BLEU lines, the training cost). Then, for each seed, in fresh folders
(DIR/seedS-kills, DIR/seedS-stops: a WORK_DIR and a DATA_DIR of their own):

- kills: N instants, every stage given N // 5 of them and the rest drawn (random.Random), each a drawn fraction of
  that stage's time in the unbroken run on this machine, counted from the stage's first line in the attempt under
  way. The recipe starts in a process group of its own, the whole group is sent SIGKILL at the instant, and the same
  command runs again: the next instant comes in that run. After the last, the run goes on to its end.
- stops: M instants placed alike, each SIGTERM or SIGUSR1 (drawn) to the recipe's shell alone, as a scheduler sends
  it. A stop must end the recipe with status 75 (training/preemption.py's EXIT_STATUS), its last line
  `RECIPE: stopped: ... by SIGNAL ...; run the same command again` (recipes/common.sh, recipes/training.py) and no
  process of its group left.

`--at events` places the instants at counted events instead, drawn from the unbroken run's output: a preparation
step's line (`[3/7] tokenize:`), an update's (`num_updates=5, `), the lines of average and translate, the BLEU lines
(EVENTS); the signal goes as soon as the attempt prints it. An instant the attempt never reaches (it ended first) is
missed.

Equal outputs: every hypothesis (fairseq-generate's H- lines), both BLEU lines, the averaged checkpoint's tensors
(torch.equal) and every data-bin file (fairseq-preprocess' log aside: it names the folders) as the unbroken run's.
Each interruption is a line on stderr (seed, instant, when it was sent, the stage it landed in, what the recipe did);
a table on stdout. Exit status 1 when a series' outputs differ, a stop did not end as above, or a run failed on its
own. Each attempt's output stays in its series' logs/. The suite runs a small seeded version of it with these
functions (tests/test_resume.py: resume_killed_runs).
"""

import argparse
import datetime
import gzip
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `python -m benchmarks.chaos` as well
from common import REPO, cpu_model, size_arguments  # noqa: E402
from wmt_mirror import SHARED_DATA, build_mirror  # noqa: E402

from vaswani_plugin.training.preemption import EXIT_STATUS  # noqa: E402  (75, a stop's)

STAGES = ("prepare", "train", "average", "translate", "score")
STAGE_LINE = re.compile(r"^\[\S+ \d\d:\d\d:\d\d\] stage (\w+): (.*)$")
AGAIN = "run the same command again"  # a stop's last words outside SLURM (recipes/training.py's requeue)
# The events an instant may wait for (--at events), by stage: what the unbroken run printed that matches.
EVENTS = {
    "prepare": r"^\[\d+/\d+\] \w+:",
    "train": r"num_updates=\d+, ",
    "average": r"stage average: starting|^averaged \d+ checkpoints",
    "translate": r"stage translate: starting|loading model\(s\) from|Translated [\d,]+ sentences",
    "score": r"stage translate: finished|^BLEU \(|^sacreBLEU = ",  # (the training cost's line: the very end)
}
# A recipe run in seconds: a tiny model, 8 updates, a checkpoint every 2 and the last 2 averaged, outputs cut at 3
# tokens, no validation, no curves or report.
TINY = dict(
    CPU="1",
    REPORT="0",
    MAX_UPDATE="8",
    SAVE_INTERVAL_UPDATES="2",
    AVERAGE_LAST="2",
    TOKENS_PER_STEP="2000",
    BPE_MERGES="300",
    EXTRA_TRAIN_ARGS=" ".join([*size_arguments(32, 64, 4, 2), "--log-interval", "1", "--disable-validation"]),
    EXTRA_GENERATE_ARGS="--max-len-a 0 --max-len-b 3",
)


def multi30k_head(raw: Path, lines=(2000, 100, 100)) -> None:
    """The first lines of Multi30k's train, val and test2016 (../shared/data/multi30k): the quickstart's RAW_DIR."""
    raw.mkdir(parents=True, exist_ok=True)
    for split, count in zip(("train", "val", "test_2016_flickr"), lines):
        for lang in ("en", "de"):
            with gzip.open(SHARED_DATA / "multi30k" / f"{split}.{lang}.gz", "rt", encoding="utf-8") as whole:
                head = "".join(line for _, line in zip(range(count), whole))
            (raw / f"{split}.{lang}.gz").write_bytes(gzip.compress(head.encode("utf-8"), mtime=0))


@dataclass(frozen=True)
class Recipe:
    script: str  # under recipes/
    translations: str  # fairseq-generate's output, in WORK_DIR
    corpus: Callable[[Path], None]  # writes a tiny RAW_DIR
    settings: Dict[str, str] = field(default_factory=dict)


RECIPES = {
    # The mirror's part of newstest2014: 395 sentences.
    "wmt14_en_de_big": Recipe(
        "wmt14_en_de_big.sh", "newstest2014.generate.txt", lambda raw: build_mirror(raw, "en-de", part=True)
    ),
    # float32, as on a CPU without bfloat16 (PRECISION=auto's choice varies with the CPU).
    "quickstart": Recipe("quickstart.sh", "test2016.generate.txt", multi30k_head, dict(PRECISION="fp32")),
}


@dataclass(frozen=True)
class Run:
    """A recipe's command, its environment and its folders."""

    command: List[str]
    env: Dict[str, str]
    name: str  # RECIPE, as its lines say it
    work: Path  # WORK_DIR
    data: Path  # DATA_DIR
    translations: str


def recipe_run(script: str, settings: Dict[str, str]) -> Run:
    """bash recipes/SCRIPT with SETTINGS (WORK_DIR, DATA_DIR and RAW_DIR among them) and this interpreter's
    environment first on PATH, on one thread, with no GPU visible."""
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        PYTHON=sys.executable,
        OMP_NUM_THREADS="1",
        CUDA_VISIBLE_DEVICES="",
        **settings,
    )
    name = Path(script).stem
    return Run(
        ["bash", str(REPO / "recipes" / script)],
        env,
        name,
        Path(settings["WORK_DIR"]),
        Path(settings["DATA_DIR"]),
        RECIPES[name].translations,
    )


@dataclass(frozen=True)
class Instant:
    """When an attempt is interrupted, and how: FRACTION of STAGE's time in the unbroken run after the stage's first
    line in the attempt, or as soon as the attempt prints EVENT (part of a line); SIGNAL KILL to the recipe's
    process group, TERM or USR1 to its shell alone."""

    stage: str
    fraction: float = 0.0
    event: str = ""
    signal: str = "KILL"

    def due(self, printed: bool, entered: Dict[int, float], now: float, times: Dict[str, float]) -> bool:
        """Whether an attempt that is NOW seconds old, entered its stages at ENTERED and just PRINTED the event (or
        not) is at the instant."""
        if self.event:
            return printed
        stage = STAGES.index(self.stage)
        return stage in entered and now >= entered[stage] + self.fraction * times[self.stage]

    def __str__(self) -> str:
        where = repr(self.event) if self.event else f"{self.fraction:.2f} of {self.stage}"
        return f"SIG{self.signal} at {where}"


def plan(seed, count: int, signals=("KILL",), events: Optional[Dict[str, List[str]]] = None) -> List[Instant]:
    """COUNT instants, every stage given count // 5 and the rest drawn, in the order of the stages (within one, in
    the order the unbroken run printed its events), each with a fraction (or one of EVENTS, a stage's events in
    the order printed) and a signal drawn by random.Random(f"{signals} {seed}")."""
    rng = random.Random(f"{' '.join(signals)} {seed}")
    stages = sorted([*STAGES * (count // len(STAGES)), *rng.sample(STAGES, count % len(STAGES))], key=STAGES.index)
    instants = []
    for stage in stages:
        if events:
            event = rng.choice(events[stage])
            instants.append(Instant(stage, event=event, signal=rng.choice(signals)))
        else:
            instants.append(Instant(stage, fraction=round(rng.random(), 3), signal=rng.choice(signals)))
    if events:
        instants.sort(key=lambda instant: (STAGES.index(instant.stage), events[instant.stage].index(instant.event)))
    return instants


def counted_events(*outputs: str) -> Dict[str, List[str]]:
    """EVENTS' matches in a run's outputs, once each, in the order of OUTPUTS, then of their lines: stderr first,
    where each stage's line comes before what the stage prints on stdout, gives each stage's in the order printed."""
    found = {stage: [] for stage in STAGES}
    for output in outputs:
        for line in output.splitlines():
            for stage, pattern in EVENTS.items():
                match = re.search(pattern, line)
                if match and match.group(0) not in found[stage]:
                    found[stage].append(match.group(0))
    return found


def stage_after(line: str, stage: int) -> int:
    """The stage (its index in STAGES) a run is in after LINE of its stderr, from STAGE: a stage line moves it on
    (translate's end to score), never back."""
    match = STAGE_LINE.match(line)
    if not match or match.group(1) not in STAGES:
        return stage
    index = STAGES.index(match.group(1))
    if index == STAGES.index("translate") and match.group(2).startswith(("finished", "done before")):
        index = STAGES.index("score")
    return max(stage, index)


class _Follow:
    """The lines appended to a file since the last call."""

    def __init__(self, path: Path):
        self.file, self.rest = open(path, "rb"), b""

    def lines(self) -> List[str]:
        data = self.file.read()
        if not data:
            return []
        *lines, self.rest = (self.rest + data).split(b"\n")
        return [line.decode("utf-8", "replace") for line in lines]


@dataclass
class Attempt:
    """One run of the recipe's command: its exit status, when it entered each stage (seconds after its start, by
    index in STAGES), when it ended, and the interruption: when sent, the stage it landed in."""

    log: Path  # LOG.out, LOG.err
    status: int = 0
    entered: Dict[int, float] = field(default_factory=lambda: {0: 0.0})
    ended: float = 0.0
    sent: Optional[float] = None
    landed: str = ""
    left: List[int] = field(default_factory=list)  # processes of its group alive after it ended
    timed_out: bool = False

    def output(self) -> Tuple[str, str]:
        return tuple(self.log.with_suffix(suffix).read_text(errors="replace") for suffix in (".out", ".err"))

    def last_line(self) -> str:
        lines = [line for line in self.output()[1].splitlines() if line.strip()]
        return lines[-1] if lines else "(nothing on stderr)"

    def times(self) -> Dict[str, float]:
        """Each stage's seconds (to the next stage's first line, the last to the end)."""
        starts = [self.entered.get(index) for index in range(len(STAGES))] + [self.ended]
        return {stage: starts[index + 1] - starts[index] for index, stage in enumerate(STAGES)}


def group_left(group: int, wait: float = 5.0) -> List[int]:
    """The processes of process group GROUP still alive (zombies aside) after up to WAIT seconds."""
    deadline = time.monotonic() + wait
    while True:
        alive = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == group and fields[0] != "Z":
                alive.append(int(stat.parent.name))
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def attempt(
    run: Run, log: Path, instant: Optional[Instant] = None, times: Optional[Dict[str, float]] = None, timeout=900
) -> Attempt:
    """RUN's command once, its output in LOG.out and LOG.err, interrupted at INSTANT (TIMES: the unbroken run's
    stage times, for a fraction) if it gets there. After TIMEOUT seconds its group is killed (a failure)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    result = Attempt(log)
    with open(log.with_suffix(".out"), "wb") as out, open(log.with_suffix(".err"), "wb") as err:
        process = subprocess.Popen(run.command, env=run.env, stdout=out, stderr=err, cwd=REPO, start_new_session=True)
    start, stage = time.monotonic(), 0
    errors, outputs = _Follow(log.with_suffix(".err")), _Follow(log.with_suffix(".out"))

    def follow() -> bool:
        """Read what the run printed; whether the instant's event is among it."""
        nonlocal stage
        printed = False
        err_lines, out_lines = errors.lines(), outputs.lines()
        for line in err_lines:
            now = stage_after(line, stage)
            for index in range(stage + 1, now + 1):
                result.entered[index] = time.monotonic() - start
            stage = now
        if instant is not None and instant.event:
            printed = any(instant.event in line for line in err_lines + out_lines)
        return printed

    try:
        while process.poll() is None:
            printed = follow()
            now = time.monotonic() - start
            if instant is not None and result.sent is None:
                if instant.due(printed, result.entered, now, times):
                    if instant.signal == "KILL":
                        os.killpg(process.pid, signal.SIGKILL)
                    else:
                        os.kill(process.pid, getattr(signal, f"SIG{instant.signal}"))
                    result.sent, result.landed = now, STAGES[stage]
            if now > timeout:
                os.killpg(process.pid, signal.SIGKILL)
                result.timed_out = True
            time.sleep(0.01)
    finally:
        if process.poll() is None:  # interrupted here (Ctrl-C): the recipe goes too
            os.killpg(process.pid, signal.SIGKILL)
        result.status, result.ended = process.wait(), time.monotonic() - start
        follow()
        errors.file.close()
        outputs.file.close()
    result.left = group_left(process.pid)
    if result.left:
        os.killpg(process.pid, signal.SIGKILL)
    return result


def stop_line(name: str, number: str) -> re.Pattern:
    return re.compile(rf"^{re.escape(name)}: stopped: .*\bSIG{number}\b.*; {AGAIN}$")


def judged(run: Run, instant: Instant, done: Attempt) -> Tuple[str, str]:
    """(what the attempt did, its verdict): `interrupted` as it should, `missed` (it ended first), or `failed`."""
    if done.timed_out:
        return f"still running after {done.ended:.0f} s: killed", "failed"
    if done.sent is None:
        if done.status == 0:
            return "ended before the instant", "missed"
        return f"failed on its own, status {done.status}: {done.last_line()}", "failed"
    left = f"; {len(done.left)} of its processes left (pids {done.left})" if done.left else ""
    if instant.signal == "KILL":
        return f"killed (status {done.status}){left}", "failed" if left else "interrupted"
    stopped = done.status == EXIT_STATUS and stop_line(run.name, instant.signal).match(done.last_line())
    return f"status {done.status}: {done.last_line()}{left}", "interrupted" if stopped and not left else "failed"


def differences(reference: Run, run: Run) -> List[str]:
    """What of RUN's outputs is not the unbroken REFERENCE's: the hypotheses, the BLEU lines, the averaged
    checkpoint's tensors (bit for bit), the data-bin files (byte for byte; preprocess.log, which names the folders,
    aside)."""
    import torch

    found = []

    def lines(folder: Run, name: str, starts: tuple) -> List[str]:
        path = folder.work / name
        return [line for line in path.read_text().splitlines() if line.startswith(starts)] if path.exists() else []

    for name, starts, what in [
        (run.translations, ("H-",), "hypotheses"),
        (run.translations + ".bleu", ("BLEU", "sacreBLEU"), "BLEU lines"),
    ]:
        ours, theirs = lines(run, name, starts), lines(reference, name, starts)
        if not theirs or ours != theirs:
            differing = sum(a != b for a, b in zip(ours, theirs)) + abs(len(ours) - len(theirs))
            found.append(f"{what} ({name}): {differing} of {len(theirs)} differ")
    average = Path("checkpoints") / "checkpoint_average.pt"
    if not (run.work / average).exists():
        found.append(f"no {average}")
    else:
        ours, theirs = (torch.load(folder.work / average, weights_only=True)["model"] for folder in (run, reference))
        differing = [name for name in theirs if name not in ours or not torch.equal(ours[name], theirs[name])]
        if differing or ours.keys() != theirs.keys():
            found.append(f"{average}: {len(differing)} of {len(theirs)} tensors differ ({', '.join(differing[:3])})")

    def data_bin(folder: Run) -> Dict[str, bytes]:
        files = [path for path in (folder.data / "data-bin").rglob("*") if path.is_file()]
        return {
            str(path.relative_to(folder.data)): path.read_bytes() for path in files if path.name != "preprocess.log"
        }

    ours, theirs = data_bin(run), data_bin(reference)
    differing = sorted(name for name in ours.keys() | theirs.keys() if ours.get(name) != theirs.get(name))
    if differing or not theirs:
        found.append(f"data-bin: {len(differing)} of {len(theirs)} files differ ({', '.join(differing[:3])})")
    return found


@dataclass
class Series:
    """One seed's interruptions of a run in fresh folders, its last attempt and how its outputs compare."""

    seed: object
    kind: str  # kills, stops
    done: List[Tuple[Instant, Attempt, str, str]] = field(default_factory=list)  # instant, attempt, what, verdict
    final: Optional[Attempt] = None
    differ: List[str] = field(default_factory=list)

    def count(self, verdict: str) -> int:
        return sum(done[3] == verdict for done in self.done)

    @property
    def ok(self) -> bool:
        return not self.count("failed") and self.final is not None and self.final.status == 0 and not self.differ


def series(
    run: Run, reference: Run, instants: List[Instant], logs: Path, times=None, seed=None, kind="kills", say=print
) -> Series:
    """RUN interrupted at each of INSTANTS in turn, its command run again after each, then to its end; its outputs
    against REFERENCE's. A run that fails on its own ends the series."""
    result = Series(seed, kind)
    for number, instant in enumerate(instants, 1):
        done = attempt(run, logs / f"{number:02d}", instant, times)
        what, verdict = judged(run, instant, done)
        when = f"at {done.sent:.1f} s in {done.landed}" if done.sent is not None else f"ended at {done.ended:.1f} s"
        say(f"seed {seed} {kind[:-1]} {number}/{len(instants)}: {instant}, {when}: {verdict}: {what}")
        result.done.append((instant, done, what, verdict))
        if verdict == "failed" and done.sent is None:
            return result
    result.final = attempt(run, logs / "final")
    if result.final.status != 0:
        say(f"seed {seed} {kind}: the last run failed, status {result.final.status}: {result.final.last_line()}")
        return result
    result.differ = differences(reference, run)
    say(f"seed {seed} {kind}: finished; outputs {'differ: ' + '; '.join(result.differ) if result.differ else 'equal'}")
    return result


def table(all_series: List[Series], times: Dict[str, float]) -> str:
    """The summary: a row a series and one for all, then the unbroken run's stage times."""
    head = ["seed", "series", "sent", *STAGES, "missed", "failed", "outputs"]
    rows = [head, ["---"] * len(head)]
    for group in [[series] for series in all_series] + ([all_series] if len(all_series) > 1 else []):
        sent = [done for series in group for done in series.done if done[1].sent is not None]
        landed, signals = Counter(done[1].landed for done in sent), Counter(done[0].signal for done in sent)
        kinds = sorted({series.kind for series in group})
        rows.append(
            [
                str(group[0].seed) if len(group) == 1 else "all",
                f"{', '.join(kinds)} ({', '.join(f'SIG{name} {count}' for name, count in sorted(signals.items()))})",
                str(len(sent)),
                *(str(landed[stage]) for stage in STAGES),
                str(sum(series.count("missed") for series in group)),
                str(sum(series.count("failed") for series in group)),
                "equal" if all(series.ok for series in group) else "**not equal, or failed**",
            ]
        )
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    spent = ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in times.items())
    return "\n".join([*lines, "", f"The unbroken run's stages: {spent} ({sum(times.values()):.1f} s)."])


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/chaos.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", nargs="+", default=["1"], help="one series of kills and one of stops a seed")
    parser.add_argument("--kills", type=int, default=17, help="SIGKILLs to the process group a series (default 17)")
    parser.add_argument("--stops", type=int, default=7, help="SIGTERMs or SIGUSR1s to the shell a series (default 7)")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="wmt14_en_de_big")
    parser.add_argument("--at", choices=["fractions", "events"], default="fractions", help="where instants go")
    parser.add_argument("--work-dir", type=Path, default=Path("work/chaos"), help="default: ./work/chaos")
    parser.add_argument("--raw-dir", type=Path, help="the recipe's RAW_DIR (default: a tiny corpus made in DIR/raw)")
    return parser


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    recipe, root = RECIPES[args.recipe], args.work_dir.resolve()
    raw = args.raw_dir.resolve() if args.raw_dir else root / "raw"
    if not args.raw_dir and not raw.exists():
        recipe.corpus(raw)

    def say(line: str) -> None:
        print(f"[chaos {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    def fresh(name: str) -> Run:
        shutil.rmtree(root / name, ignore_errors=True)
        folders = dict(WORK_DIR=root / name / "work", DATA_DIR=root / name / "data", RAW_DIR=raw)
        return recipe_run(recipe.script, {**TINY, **recipe.settings, **{k: str(v) for k, v in folders.items()}})

    say(f"{args.recipe} on {cpu_model()}, {datetime.date.today()}, in {root}")
    reference = fresh("unbroken")
    unbroken = attempt(reference, root / "unbroken" / "logs" / "run")
    if unbroken.status != 0:
        say(f"the unbroken run failed, status {unbroken.status}: {unbroken.last_line()}")
        return 1
    times = unbroken.times()
    events = counted_events(*reversed(unbroken.output())) if args.at == "events" else None  # stderr, stdout
    say("the unbroken run: " + ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in times.items()))
    done = []
    for kind, count, signals in (("kills", args.kills, ("KILL",)), ("stops", args.stops, ("TERM", "USR1"))):
        for seed in args.seeds if count else []:
            run = fresh(f"seed{seed}-{kind}")
            instants = plan(seed, count, signals, events)
            done.append(series(run, reference, instants, run.work.parent / "logs", times, seed, kind, say))
    print(table(done, times))
    return 0 if all(series.ok for series in done) else 1


if __name__ == "__main__":
    sys.exit(main())
