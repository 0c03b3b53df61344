"""The quickstart end to end on the real Multi30k (../shared/data/multi30k as RAW_DIR), with a tiny model and 20
updates (MAX_UPDATE: no clock, so the same run on any machine), and the benchmark that runs it against fairseq's
`transformer` on the same prepared data.

Outputs are cut at 3 tokens (EXTRA_GENERATE_ARGS), as in tests/test_recipes.py: an untrained model would
otherwise run to input + 50 tokens on every one of the 1,000 test sentences.
"""

import os
import re
import subprocess
import sys
from datetime import datetime

import numpy
import pytest
import torch
from cli_helpers import NATIVE_BF16, SHARED_DATA
from conftest import lane_job
from doc_blocks import block, run_shell, substituted
from matplotlib.image import imread
from test_recipes import NEEDS_CPU_PATH, REPO, TINY, hypotheses, ran_the_documented_preparation, run_recipe

pytestmark = pytest.mark.e2e  # the whole quickstart on the real Multi30k

# The 20 updates the checks below need (two log windows, the dev BLEU twice), counted: no wall-clock budget, which a
# slow or loaded machine would reach first.
TINY_QUICKSTART = dict(
    RAW_DIR=str(SHARED_DATA / "multi30k"),
    MAX_UPDATE="20",
    BPE_MERGES="500",
    SAVE_INTERVAL_UPDATES="4",
    AVERAGE_LAST="2",
    EXTRA_TRAIN_ARGS=TINY,
    EXTRA_GENERATE_ARGS="--max-len-a 0 --max-len-b 3",
    DEV_SCORE="1",
    DEV_SCORE_EVERY="8",
    DEV_SCORE_SENTENCES="10",
)
DEV_EVERY = 8


@lane_job
def quickstart_run(tmp_path_factory, lane):
    """bash recipes/quickstart.sh in the layout benchmarks/quickstart_vs_fairseq.sh uses, so that the
    benchmark finds the plugin's half done."""
    root = tmp_path_factory.mktemp("quickstart")
    env = dict(TINY_QUICKSTART, WORK_DIR=str(root / "seed1" / "vaswani_transformer"), DATA_DIR=str(root / "data"))
    # First a dry run (the commands it prints, in root/dry_run.txt), then the run.
    dry = run_recipe("quickstart.sh", dict(env, DRY_RUN="1"), command=block("README.md", "test:quickstart"))
    (root / "dry_run.txt").write_text(dry.stdout)
    return root, run_recipe("quickstart.sh", env, command=block("README.md", "test:quickstart"))


@lane_job
def quickstart_benchmark_run(tmp_path_factory, lane):
    """benchmarks/quickstart_vs_fairseq.sh for seed 1 where quickstart_run left its runs."""
    root, _ = lane["quickstart_run"].result()
    env = dict(TINY_QUICKSTART, WORK_DIR=str(root), SEEDS="1", REPORT="0")  # its curves only: no report.md
    return subprocess.run(
        ["bash", str(REPO / "benchmarks" / "quickstart_vs_fairseq.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, **env, PYTHON=sys.executable),
    )


@NEEDS_CPU_PATH
@pytest.mark.lane("quickstart_run")
def test_quickstart_from_raw_files_to_bleu_translations_and_pictures(lane):
    root, result = lane["quickstart_run"].result()
    work, data = root / "seed1" / "vaswani_transformer", root / "data"

    # Data: the three real splits in full, joint BPE.
    sizes = {
        split: len((data / "text" / f"{split}.de").read_text(encoding="utf-8").splitlines())
        for split in ("train", "valid", "test")
    }
    assert sizes == {"train": 29000, "valid": 1014, "test": 1000}
    ran_the_documented_preparation(result.stderr, 2)
    # The dry run before it printed the very fairseq-train command the run then ran (its logged command line).
    (planned,) = [line for line in (root / "dry_run.txt").read_text().splitlines() if " -m fairseq_cli.train " in line]
    assert re.search(r"\] stage train: (\S+ -m fairseq_cli\.train .*)$", result.stderr, re.M)[1] == planned
    assert (data / "data-bin" / "dict.en.txt").read_text() == (data / "data-bin" / "dict.de.txt").read_text()

    # Training stopped at MAX_UPDATE, with no clock; the average is that of the last 2 interval checkpoints.
    log = (work / "checkpoints" / "train.log").read_text()
    last = torch.load(work / "checkpoints" / "checkpoint_last.pt", weights_only=True)
    assert last["optimizer_history"][-1]["num_updates"] == 20
    assert "'max_update': 20," in log and "'stop_time_hours': 0.0," in log and "'max_epoch': 30," in log
    assert "'model': {'_name': 'vaswani_transformer'," in log
    # BF16=auto: bfloat16 autocast where this CPU multiplies bfloat16 natively, float32 elsewhere; the task
    # decides and says so.
    assert "'task': {'_name': 'vaswani_translation'" in log and "'bf16_autocast': 'auto'" in log
    assert ("| precision: bfloat16 autocast (--bf16-autocast auto: this CPU has " in log) == NATIVE_BF16
    assert ("| precision: float32 (--bf16-autocast auto: no native bfloat16 on this CPU)" in log) != NATIVE_BF16
    assert log.count("| precision: ") == 1
    interval = sorted((work / "checkpoints").glob("checkpoint_*_*.pt"), key=lambda path: int(path.stem.split("_")[-1]))
    assert len(interval) == 2
    states = [torch.load(path, weights_only=True)["model"] for path in interval]
    average = torch.load(work / "checkpoints" / "checkpoint_average.pt", weights_only=True)["model"]
    for name, value in average.items():
        torch.testing.assert_close(value, (states[0][name] + states[1][name]) / 2)

    # Every test sentence translated and scored; examples shown next to source and reference.
    assert len(hypotheses(work / "test2016.generate.txt")) == 1000
    assert re.search(r"^sacreBLEU = \d+\.\d+ .*nrefs:1", result.stdout, re.M)
    assert re.search(r"^sentences = 1000$", result.stdout, re.M)
    first_source = (data / "text" / "test.en").read_text(encoding="utf-8").splitlines()[0]
    assert f"example 1\n  source:      {first_source}\n" in result.stdout

    # Attention pictures of the first test sentence, and the summary that says where everything is.
    pictures = work / "attention"
    for kind in ("encoder_self", "decoder_self", "encoder_decoder"):
        (grid,) = pictures.glob(f"{kind}_layer*_all_heads.png")  # each stack's last layer
        assert imread(grid).ndim == 3
    arrays = numpy.load(pictures / "attention.npz")
    assert arrays["encoder_decoder"].shape[-1] == len(arrays["source_tokens"])
    assert str(pictures) in result.stderr and str(work / "checkpoints" / "checkpoint_average.pt") in result.stderr
    watched_training_is_recorded_drawn_and_reported(work, log)


def logged(lines, kind):
    """(update, {name: value}) of each fairseq log line of a kind: train_inner's `name=value, ...`, valid's
    `| name value`, read here apart from training/progress.py."""
    found = []
    for line in lines:
        if kind == "train" and "| train_inner |" in line:
            pairs = dict(pair.split("=") for pair in line.split(" / ", 1)[1].split(" ", 1)[1].split(", "))
        elif kind == "valid" and "valid on 'valid' subset" in line:
            pairs = dict(part.strip().split(" ", 1) for part in line.split(" subset | ", 1)[1].split(" | "))
        else:
            continue
        found.append((int(pairs["num_updates"]), {name: float(value) for name, value in pairs.items()}))
    return found


def watched_training_is_recorded_drawn_and_reported(work, log):
    """The ETA after every log interval, the dev BLEU at the promised checkpoints, the records, curves and report
    (training/progress.py, training_curves.py, run_report.py) against the log's own values."""
    lines = log.splitlines()
    inner = [index for index, line in enumerate(lines) if "| train_inner |" in line]
    assert len(inner) >= 2 and all(lines[index + 1].startswith("[progress] update ") for index in inner)
    assert re.search(
        r"^\[progress\] update \d+ of 20 \(.* left \(updates\), ends about [\d-]+ [\d:]+$", lines[inner[-1] + 1]
    )
    # A validation at each checkpoint (every 4 updates); the BLEU at the first one after every DEV_EVERY updates.
    valid, due, expected = logged(lines, "valid"), DEV_EVERY, []
    for update, _ in valid:
        if update >= due:
            expected.append(update)
            due = (update // DEV_EVERY + 1) * DEV_EVERY
    assert len(expected) >= 2
    assert [update for update, values in valid if "bleu" in values] == expected
    assert all(values["dev_sentences"] == 10 and "tok_bleu" in values for _, values in valid if "bleu" in values)
    assert sum(line.startswith("[progress] dev at update ") for line in lines) == len(expected)

    # The curves: what draw() plots is what fairseq logged, point for point at both ends.
    from vaswani_plugin.tools.training_curves import draw
    from vaswani_plugin.training.progress import read_records, stitched

    plotted = draw({"run": stitched(read_records(work / "checkpoints" / "progress.jsonl"))}, work / "redrawn")
    panels = plotted["updates.png"]["run"]
    train = logged(lines, "train")
    for key, title in (("loss", "training loss (bits)"), ("lr", "learning rate (eq. 3)"), ("gnorm", "gradient norm")):
        x, y = panels[title][key]
        assert len(x) == len(train) and (x[0], y[0]) == (train[0][0], train[0][1][key])
        assert (x[-1], y[-1]) == (train[-1][0], train[-1][1][key])
    x, y = panels["dev score"]["bleu"]
    assert list(zip(x, y)) == [(update, values["bleu"]) for update, values in valid if "bleu" in values]
    assert panels["dev loss (bits)"]["loss"][1] == [values["loss"] for _, values in valid]
    # Against the clock: the hours between points are the seconds between fairseq's log lines (stamped in whole
    # seconds).
    hours = plotted["wall_clock.png"]["run"]["training loss (bits)"]["loss"][0]
    stamps = [
        datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S").timestamp() for line in lines if "| train_inner |" in line
    ]
    assert hours == sorted(hours) and hours[0] > 0 and len(hours) == len(stamps)
    for hour, stamp in zip(hours, stamps):
        assert abs((hour - hours[0]) * 3600 - (stamp - stamps[0])) < 1.5, (hours, stamps)
    for folder in (work / "curves", work / "redrawn"):  # the recipe's and this test's
        for picture in ("updates.png", "wall_clock.png"):
            image = imread(folder / picture)
            assert image.shape[:2] == (520, 1040)
            drawn = (image[..., :3] < 0.9).any(axis=-1)  # not white
            assert drawn[60:240, 60:330].mean() > 0.02  # the first panel holds a curve, not only its frame

    report = (work / "report.md").read_text()
    assert "-m fairseq_cli.train " in report and "--dev-score bleu" in report  # the training stage's plan
    assert "- precision: " in report and "- machine: " in report
    assert report.count("\n| ") == len(valid) + 1  # the dev table: a row a validation, and its header
    assert "![against updates](curves/updates.png)" in report and "test2016.generate.txt.bleu" in report
    assert re.search(r"^sacreBLEU = ", report, re.M) and "](attention/encoder_decoder_layer" in report


@NEEDS_CPU_PATH
@pytest.mark.lane("quickstart_run", "quickstart_benchmark_run")
def test_benchmark_against_fairseq_transformer(lane, tmp_path):
    root, _ = lane["quickstart_run"].result()
    result = lane["quickstart_benchmark_run"].result()
    assert result.returncode == 0, result.stderr[-4000:]
    runs = root / "seed1"
    assert "stage train: done before, skipped" in (runs / "vaswani_transformer.log").read_text()
    log = (runs / "transformer" / "checkpoints" / "train.log").read_text()
    assert "arch='transformer'" in log and "encoder_embed_dim=32" in log  # fairseq's model config: a Namespace
    # fairseq's side is trained with fairseq's own criterion and the pair's seed.
    assert "'_name': 'label_smoothed_cross_entropy'" in log and "'seed': 1," in log
    # float32, as fairseq trains on CPU (FAIRSEQ_BF16=0)
    assert "'bf16_autocast': 'off'" in log and "| precision: float32 (--bf16-autocast off)" in log
    assert "on core 1" in result.stderr  # the two runs of a seed side by side, pinned

    scores = {}
    for arch in ("vaswani_transformer", "transformer"):
        bleu = (runs / arch / "test2016.generate.txt.bleu").read_text()
        scores[arch] = float(re.search(r"^sacreBLEU = ([\d.]+)", bleu, re.M)[1])
        precision = "bf16 autocast" if arch == "vaswani_transformer" and NATIVE_BF16 else "float32"
        assert re.search(rf"^ +1 {arch} +{precision} +\d+ +{scores[arch]:.2f} ", result.stdout, re.M), result.stdout
    difference = scores["vaswani_transformer"] - scores["transformer"]
    assert f"sacrebleu: mean {difference:+.2f} over 1 seed(s)" in result.stdout, result.stdout
    # Both runs scored the dev set, and their curves share one picture.
    for arch in ("vaswani_transformer", "transformer"):
        assert "| tok_bleu " in (runs / arch / "checkpoints" / "train.log").read_text()
    assert imread(runs / "curves" / "wall_clock.png").ndim == 3
    assert str(runs / "curves" / "wall_clock.png") in result.stderr
    # docs/recipes.md's command for it, run as written where the benchmark's WORK_DIR is.
    command = block("docs/recipes.md", "test:curves").replace("work/quickstart_vs_fairseq", str(root))
    drawn = run_shell(command, tmp_path)
    assert drawn.returncode == 0, drawn.stderr[-3000:]
    assert imread(tmp_path / "curves" / "wall_clock.png").shape == imread(runs / "curves" / "wall_clock.png").shape


@NEEDS_CPU_PATH
@pytest.mark.lane("quickstart_run")
def test_translating_your_own_sentence_as_the_readme_says(lane):
    root, _ = lane["quickstart_run"].result()
    command = (
        block("README.md", "test:interactive")
        .replace("work/quickstart/data", str(root / "data"))
        .replace("work/quickstart", str(root / "seed1" / "vaswani_transformer"))
    )
    result = run_shell(command, REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    # fairseq-interactive Moses-tokenised and BPE-segmented the sentence itself, then translated it.
    (source,) = re.findall(r"^S-0\t(.*)$", result.stdout, re.M)
    assert source.replace("@@ ", "") == "A little girl climbs into a wooden playhouse ."
    assert re.search(r"^H-0\t-?\d+\.\d+\t", result.stdout, re.M) and re.search(r"^D-0\t", result.stdout, re.M)


@NEEDS_CPU_PATH
@pytest.mark.lane("quickstart_run")
def test_the_curves_of_a_trainings_records_as_the_reference_shows(lane, tmp_path):
    """docs/reference.md's block, on the records the quickstart's training wrote from its own process."""
    root, _ = lane["quickstart_run"].result()
    records = root / "seed1" / "vaswani_transformer" / "checkpoints" / "progress.jsonl"
    command = substituted(block("docs/reference.md", "test:progress"), {"checkpoints/progress.jsonl": str(records)})
    result = run_shell(command, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert imread(tmp_path / "curves" / "updates.png").ndim == 3
