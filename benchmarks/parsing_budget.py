"""F1 against the training budget (docs/parsing.md, "F1 against the budget"), from one run of the parsing recipe.

    SAMPLE_DIR=../shared/data/ptb_sample WORK_DIR=work/parse120 BUDGET_MINUTES=120 FINETUNE_MINUTES=0 \\
        EXTRA_TRAIN_ARGS="--keep-interval-updates 1000000" bash recipes/wsj_parsing.sh
    python benchmarks/parsing_budget.py work/parse120 --minutes 15 30 60 120

Eq. 3's rate depends on the step alone, so a run of T minutes on all trees throughout (FINETUNE_MINUTES=0) is the
first T minutes of a longer one. For each budget, the last --average interval checkpoints saved by then (fairseq's
`wall` in the train.log) are averaged (§6.1) and decoded as recipes/wsj_parsing.sh decodes them (§6.3: constrained,
beam 21, α 0.3, input + 300 tokens), then scored with EVALB's COLLINS.prm (vaswani_plugin.scoring.parses). --ensemble
decodes the same checkpoints as an ensemble instead of averaging their weights: fairseq's search (--search fairseq,
its probabilities averaged at each step; the plugin's search takes one model), against which --search fairseq gives
the averaged model's F1. Output: WORK_DIR/budget/<minutes>min[-ensemble][-fairseq]/, a line per budget and a table
at the end.
"""

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from common import PAPER, PLUGIN  # PAPER: §6.3's beam, α and length limit (vaswani_plugin/paper.py)

LOGGED = re.compile(r"num_updates[= ](\d+)\b.*\bwall[= ](\d+)")
CHECKPOINT = re.compile(r"checkpoint_\d+_(\d+)\.pt")
KEEP = ' (the recipe keeps 5: train with EXTRA_TRAIN_ARGS="--keep-interval-updates 1000000" to keep them all)'


def fail(message: str) -> None:
    sys.exit(f"parsing_budget: error: {message}")


def logged_walls(log: Path) -> list:
    """(update, seconds of training) of each line of fairseq's train.log that gives both, in order."""
    if not log.is_file():
        fail(f"{log} is missing: give the WORK_DIR of a recipes/wsj_parsing.sh run")
    return [(int(m.group(1)), int(m.group(2))) for m in map(LOGGED.search, log.read_text().splitlines()) if m]


def chosen(checkpoints: Path, walls: list, minutes: float, count: int) -> list:
    """The last `count` interval checkpoints saved by `minutes` of training, oldest first."""
    if not walls or walls[-1][1] < minutes * 60 * 0.99:
        trained = walls[-1][1] / 60 if walls else 0
        fail(f"the run in {checkpoints} trained {trained:.1f} minutes: it holds no budget of {minutes:g}")
    reached = max((update for update, wall in walls if wall <= minutes * 60), default=0)
    saved = sorted((int(m.group(1)), path) for path in checkpoints.iterdir() if (m := CHECKPOINT.fullmatch(path.name)))
    before = [update for update, _ in saved if update <= reached]
    if len(before) < count:
        fail(f"by {minutes:g} minutes (update {reached:,}) {checkpoints} holds {len(before)} interval checkpoints, "
             f"fewer than --average {count}{KEEP}")  # fmt: skip
    # Saved every N updates, but not on an update that ends an epoch (fairseq's --no-epoch-checkpoints): the last
    # `count` by then are at most 2N apart, the newest at most 2N before `reached`.
    every = min(b - a for a, b in zip(before, before[1:])) if len(before) > 1 else before[0]
    last = before[-count:]
    if reached - last[-1] > 2 * every or any(b - a > 2 * every for a, b in zip(last, last[1:])):
        fail(f"some checkpoints between updates {last[0]:,} and {reached:,} are gone from {checkpoints}{KEEP}")
    return [dict(saved)[update] for update in last]


def run(command: list, output: Path = None) -> None:
    """A step's command, its output to `output`; its error in one line."""
    with open(output or "/dev/null", "w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        fail(f"{' '.join(map(str, command[:3]))} ... failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")


def snapshot(work_dir: Path, walls: list, minutes: float, args) -> dict:
    """One budget: its checkpoints averaged (or ensembled), each split decoded and scored."""
    paths = chosen(work_dir / "checkpoints", walls, minutes, args.average)
    out = work_dir / "budget" / f"{minutes:g}min{'-ensemble' if args.ensemble else ''}{'-fairseq' * fairseq(args)}"
    out.mkdir(parents=True, exist_ok=True)
    if args.ensemble:
        model = ":".join(map(str, paths))
    else:
        model = str(out / "average.pt")
        run([sys.executable, "-m", "vaswani_plugin.checkpoints.average", "--inputs", *paths, "--output", model])
    data = work_dir / "data"
    update = int(CHECKPOINT.fullmatch(paths[-1].name).group(1))
    result = {"minutes": minutes, "update": update}
    device = [] if args.device == "cuda" else ["--cpu"]
    for split in args.splits:
        started = time.monotonic()
        generate = out / f"{split}.generate.txt"
        run(
            [sys.executable, "-m", "fairseq_cli.generate", data / "data-bin", "--user-dir", PLUGIN,
             "--task", "vaswani_translation", "--path", model, "--gen-subset", split, "--search", args.search,
             *PAPER.arguments("parsing-decoding"), "--batch-size", "32", "--required-batch-size-multiple", "1",
             "--parse-constrained", *device, *args.generate_args.split()],
            generate,
        )  # fmt: skip
        number = out / f"{split}.f1.number"
        run(
            [sys.executable, "-m", "vaswani_plugin.scoring.parses", "--generate-output", generate,
             "--words", data / "text" / f"{split}.words", "--tags", data / "gold" / f"{split}.tags",
             "--gold", data / "gold" / f"{split}.trees", "--output", out / f"{split}.parsed.trees",
             "--f1-file", number],
            out / f"{split}.f1",
        )  # fmt: skip
        result[split] = float(number.read_text())
        result[f"{split} seconds"] = time.monotonic() - started
    how = "as an ensemble" if args.ensemble else "averaged"
    scores = ", ".join(f"{split} F1 {result[split]:.2f} ({result[split + ' seconds']:.0f} s)" for split in args.splits)
    print(f"{minutes:g} minutes: update {update:,}, checkpoints of updates "
          f"{', '.join(CHECKPOINT.fullmatch(p.name).group(1) for p in paths)} {how}: {scores}", flush=True)  # fmt: skip
    return result


def fairseq(args) -> bool:
    return args.search == "fairseq" and not args.ensemble  # an ensemble's is fairseq's, said in its folder's name


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work_dir", type=Path, help="the WORK_DIR of a recipes/wsj_parsing.sh run")
    parser.add_argument("--minutes", type=float, nargs="+", default=[15, 30], help="budgets (default: 15 30)")
    parser.add_argument("--average", type=int, default=5, help="checkpoints per budget (the recipe's AVERAGE_LAST)")
    parser.add_argument("--ensemble", action="store_true", help="decode them as an ensemble, not averaged")
    parser.add_argument("--search", choices=["paper", "fairseq"], help="default: the recipe's (paper); fairseq's")
    parser.add_argument("--splits", nargs="+", default=["valid", "test"], help="default: valid test")
    parser.add_argument("--generate-args", default="", help="more fairseq-generate arguments (EXTRA_GENERATE_ARGS)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to decode (default: cpu)")
    args = parser.parse_args(argv)
    if args.average < 1:
        fail("--average needs at least 1 checkpoint")
    if args.ensemble and args.search == "paper":
        fail("--ensemble decodes with fairseq's search: --search paper takes one model")
    args.search = args.search or ("fairseq" if args.ensemble else "paper")
    walls = logged_walls(args.work_dir / "checkpoints" / "train.log")
    results = [snapshot(args.work_dir, walls, minutes, args) for minutes in args.minutes]
    print("\n| budget | steps | " + " | ".join(args.splits) + " |\n|---|---|" + "---|" * len(args.splits))
    for result in results:
        scores = " | ".join(f"{result[split]:.2f}" for split in args.splits)
        print(f"| {result['minutes']:g} minutes | {result['update']:,} | {scores} |")


if __name__ == "__main__":
    main()
