"""Every recipe end to end on a tiny offline mirror of WMT14 (CPU, tiny model, a few updates).

The mirror (benchmarks/wmt_mirror.py) holds a few hundred generated training lines per corpus and the real
newstest2013 and newstest2014 SGM files from ../shared/data/wmt14, so dev and test have their real sizes,
3000 and 3003 sentences, and every one of them must be translated (the base recipe's and Table 3's runs; the
runs on the second lane use a part of them, wmt_mirror.py's part=True). To keep the suite fast, outputs are cut
at 3 tokens (EXTRA_GENERATE_ARGS): an untrained model would otherwise run to input + 50 tokens.
"""

import importlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sentencepiece
import torch
from cli_helpers import TINY_MODEL
from conftest import lane_job
from doc_blocks import block, commands
from fairseq.data import Dictionary, indexed_dataset
from fairseq.data.indexed_dataset import MMapIndexedDataset
from wmt_mirror import build_mirror, newstest2014_sentences

from recipes import launch
from vaswani_plugin import VaswaniConfigError

REPO = Path(__file__).resolve().parents[1]
TINY = " ".join(TINY_MODEL)
NEEDS_CPU_PATH = pytest.mark.skipif(torch.cuda.is_available(), reason="runs the recipes' CPU=1 path")
# No GPU is visible where these recipe runs go (NEEDS_CPU_PATH): said outright, the recipe need not import torch to
# count none.
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": ""}


def run_recipe(script, env_overrides, *args, check=True, cwd=None, command=None):
    """bash recipes/SCRIPT with this test environment's python first on PATH, on one thread: a second thread
    does not speed up a tiny model, and spinning OpenMP threads would slow a run on the second lane beside it.
    `command`: a documentation block's shell line that runs it, run as written (from the repository root)."""
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        PYTHON=sys.executable,
        OMP_NUM_THREADS="1",
        **CPU_ONLY,
        **env_overrides,
    )
    argv = ["bash", "-c", command] if command else ["bash", str(REPO / "recipes" / script), *args]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=cwd or REPO)
    if check and result.returncode != 0:
        raise AssertionError(f"{script} failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result


def ran_the_documented_preparation(stderr, line):
    """docs/recipes.md says every recipe prepares its data with one of its three commands: the recipe's logged
    `stage prepare:` command is line LINE's (module, --pair), with the recipe's own folder and settings; the
    defaults the block's comments name are the command's."""
    documented = commands(block("docs/recipes.md", "test:prepare"))[line].split()
    (logged,) = re.findall(r"stage prepare: (python -m prepare\.\S+ .*)$", stderr, re.M)
    logged = logged.split()
    assert logged[:3] == documented[:3], (logged, documented)  # python -m prepare.X
    module = importlib.import_module(documented[2])
    ours, theirs = vars(module.parse_args(documented[3:])), vars(module.parse_args(logged[3:]))
    given = {word[2:].replace("-", "_") for word in documented[3:] if word.startswith("--")} - {"work_dir"}
    assert {key: ours[key] for key in given} == {key: theirs[key] for key in given}
    comment = block("docs/recipes.md", "test:prepare").splitlines()[line]
    for option, value in re.findall(r"--(bpe-merges|spm-vocab) (\d+)", comment.split("#", 1)[1]):
        assert ours[option.replace("-", "_")] == int(value), comment


def tiny_env(work_dir, raw_dir, data_dir, **more):
    """A recipe run in seconds. No validation on the 3,000 dev sentences at every checkpoint (7 s a run): Table 3's
    test validates with fairseq-validate. No curves or report (REPORT=0: matplotlib, 1-4 s a run): the quickstart's
    tests read them."""
    settings = dict(
        WORK_DIR=work_dir,
        RAW_DIR=raw_dir,
        DATA_DIR=data_dir,
        CPU=1,
        MAX_UPDATE=4,
        REPORT=0,
        SAVE_INTERVAL_UPDATES=2,
        AVERAGE_LAST=2,
        TOKENS_PER_STEP=2000,
        BPE_MERGES=300,
        SPM_VOCAB=400,
        EXTRA_TRAIN_ARGS=f"{TINY} --disable-validation",
        EXTRA_GENERATE_ARGS="--max-len-a 0 --max-len-b 3",
    )
    settings.update(more)
    return {key: str(value) for key, value in settings.items()}


def whole_en_de_mirror(tmp_path_factory):
    """(the whole En-De mirror, an empty DATA_DIR)."""
    mirror = tmp_path_factory.mktemp("mirror") / "en-de"
    build_mirror(mirror, "en-de")
    return mirror, tmp_path_factory.mktemp("data-en-de")


def en_de_data(tmp_path_factory, lane):
    """(the whole mirror, a DATA_DIR): the base recipe's job's, which prepared it, as the README suggests the base
    and Table 3 runs share one; where the base test is not selected, a new one to prepare."""
    if "en_de_base_runs" in lane:
        return lane["en_de_base_runs"].result()
    return whole_en_de_mirror(tmp_path_factory)


def hypotheses(generate_output: Path):
    return [line for line in generate_output.read_text().splitlines() if line.startswith("H-")]


def check_scores(stdout: str, sentences: int):
    assert re.search(r"^BLEU \(tokenised, compound-split\) = \d+\.\d+ ", stdout, re.M), stdout
    assert re.search(r"^sacreBLEU = \d+\.\d+ .*nrefs:1\|case:mixed", stdout, re.M), stdout
    assert re.search(rf"^sentences = {sentences}$", stdout, re.M), stdout
    assert re.search(r"^Training cost: \d+ s x 1 GPUs; peak FLOP/s unknown", stdout, re.M), stdout


def updates_of(checkpoint: Path) -> int:
    return torch.load(checkpoint, weights_only=True)["optimizer_history"][-1]["num_updates"]


def binarised_sentences(data_bin: Path, split: str, pair: str) -> int:
    source = pair.split("-")[0]
    return len(MMapIndexedDataset(str(data_bin / f"{split}.{pair}.{source}")))


@NEEDS_CPU_PATH
def test_no_gpu_is_a_clear_error(tmp_path):
    result = run_recipe("wmt14_en_de_big.sh", dict(WORK_DIR=str(tmp_path)), check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "wmt14_en_de_big: error: no GPU visible. The paper trains on 8 GPUs; to try the pipeline on CPU "
        "(very slow, for testing only) set CPU=1"
    )
    assert not (tmp_path / "data").exists()  # failed before downloading anything


@lane_job
def en_de_base_runs(tmp_path_factory, lane):
    """The base recipe from nothing on the whole mirror, then run again as docs/recipes.md's re-run table says,
    each run's checks made as it ends (later runs change what an earlier one left): (the mirror, its DATA_DIR)."""
    mirror, data = whole_en_de_mirror(tmp_path_factory)
    work = tmp_path_factory.mktemp("base") / "base"
    env = tiny_env(work, mirror, data, REPORT_EVERY=0)  # REPORT=0: not even at each checkpoint
    result = run_recipe("wmt14_en_de_base.sh", env)
    data_bin = data / "data-bin"

    # Data: joint BPE with 300 merges gives at most 300 + 2 x characters symbols; every dev/test sentence.
    dictionary = Dictionary.load(str(data_bin / "dict.en.txt"))
    assert (data_bin / "dict.de.txt").read_text() == (data_bin / "dict.en.txt").read_text()  # joined
    merges = [line for line in (data / "bpe" / "codes").read_text().splitlines() if not line.startswith("#version")]
    assert len(merges) == 300 and 300 < len(dictionary) - dictionary.nspecial < 300 + 2 * 200
    assert binarised_sentences(data_bin, "valid", "en-de") == 3000
    assert binarised_sentences(data_bin, "test", "en-de") == 3003
    train_lines = len((data / "bpe" / "train.en").read_text().splitlines())
    assert binarised_sentences(data_bin, "train", "en-de") == train_lines > 0

    # Training: the base arch with the paper's settings; checkpoints every 2 updates, the last 2 averaged.
    train_log = (work / "checkpoints" / "train.log").read_text()
    assert "'model': {'_name': 'vaswani_transformer'," in train_log and "'dropout': 0.1" in train_log
    assert "'lr_scheduler': {'_name': 'noam'" in train_log
    checkpoints = [
        torch.load(work / "checkpoints" / name, weights_only=True)["model"]
        for name in ("checkpoint_1_2.pt", "checkpoint_1_4.pt", "checkpoint_average.pt")
    ]
    for name, average in checkpoints[2].items():
        torch.testing.assert_close(average, (checkpoints[0][name] + checkpoints[1][name]) / 2)

    # Every newstest2014 sentence translated; both BLEU lines and the cost line.
    assert len(hypotheses(work / "newstest2014.generate.txt")) == 3003
    check_scores(result.stdout, 3003)
    assert (
        f"REPORT=0: no curves or report.md (python -m vaswani_plugin.tools.run_report {work} draws them)"
        in result.stderr
    )
    assert (work / "checkpoints" / "progress.jsonl").is_file()
    assert not (work / "report.md").exists() and not (work / "curves").exists()

    # Re-run: nothing to do but print the scores again.
    again = run_recipe("wmt14_en_de_base.sh", env)
    for name in ("train", "average", "translate"):
        assert f"stage {name}: done before, skipped" in again.stderr
    check_scores(again.stdout, 3003)

    # docs/recipes.md's re-run table on this WORK_DIR. MAX_UPDATE raised (and BF16, a precision of the hardware,
    # changed): training resumes to the new count, the later stages run again on the new model, their previous
    # outputs kept.
    resumed = run_recipe("wmt14_en_de_base.sh", {**env, "MAX_UPDATE": "6", "BF16": "1"})
    assert "stage train: resuming from update 4" in resumed.stderr
    assert updates_of(work / "checkpoints" / "checkpoint_last.pt") == 6
    assert json.loads((work / ".stages" / "train.json").read_text())["started_from"] == 4
    assert "stage translate: running again" in resumed.stderr
    check_scores(resumed.stdout, 3003)
    (kept,) = (work / "previous").iterdir()
    assert len(hypotheses(kept / "newstest2014.generate.txt")) == 3003
    assert (kept / "checkpoints" / "checkpoint_average.pt").is_file()

    # Refused, one line each, nothing touched: a model setting, the data (MAX_UPDATE below the checkpoints:
    # test_resume.py).
    before = {path: path.stat().st_mtime_ns for path in [*data_bin.iterdir(), *(work / "checkpoints").iterdir()]}
    for change, names in (
        ({"EXTRA_TRAIN_ARGS": env["EXTRA_TRAIN_ARGS"] + " --dropout 0.3"}, ["--dropout"]),
        ({"BPE_MERGES": "200"}, ["BPE_MERGES changed from 300 to 200"]),
    ):
        refused = run_recipe("wmt14_en_de_base.sh", {**env, **change}, check=False)
        assert refused.returncode == 1
        error = refused.stderr.strip().splitlines()[-1]
        assert error.startswith("wmt14_en_de_base: error: stage ") and "RESTART_FROM=" in error, refused.stderr
        assert all(name in error for name in names), error
    assert {path: path.stat().st_mtime_ns for path in before} == before

    # A recipe killed in training, re-run, resumes from checkpoint_last.pt and runs the later stages again:
    # test_resume.py. The other rows of the table: test_a_stage_runs_again_when_its_plan_changes_..., test_records.py.
    return mirror, data


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("en_de_base_runs")
def test_en_de_base_from_nothing_to_bleu_then_skips_what_is_done(lane):
    lane["en_de_base_runs"].result()  # its checks: made by the job, run by run


def run_on_a_mirror_of_its_own(tmp_path_factory, script, pair, **settings):
    """SCRIPT from nothing on its own mirror and DATA_DIR (root/raw, root/data; WORK_DIR root/work), so that it
    can run beside the base recipe's job, which prepares its DATA_DIR for Table 3 too. The mirror holds a part of
    the newstest sets (wmt_mirror.py): the base recipe's job prepares and translates them whole. Returns (root,
    result)."""
    root = tmp_path_factory.mktemp(Path(script).stem)
    build_mirror(root / "raw", pair, part=True)
    return root, run_recipe(script, tiny_env(root / "work", root / "raw", root / "data", **settings))


# The big recipe's run is also the uninterrupted run that test_resume.py's killed runs must end like.
BIG_RUN = dict(MAX_UPDATE=8, EXTRA_TRAIN_ARGS=f"{TINY} --log-interval 1 --disable-validation")


@lane_job
def en_de_big_run(tmp_path_factory, lane):
    return run_on_a_mirror_of_its_own(tmp_path_factory, "wmt14_en_de_big.sh", "en-de", **BIG_RUN)


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("en_de_big_run")
def test_en_de_big(lane):
    root, result = lane["en_de_big_run"].result()
    work = root / "work"
    train_log = (work / "checkpoints" / "train.log").read_text()
    assert "'model': {'_name': 'vaswani_transformer_big'," in train_log and "'dropout': 0.3" in train_log
    ran_the_documented_preparation(result.stderr, 0)
    assert (work / "checkpoints" / "checkpoint_average.pt").exists()
    sentences = newstest2014_sentences(root / "raw", "en-de")
    assert len(hypotheses(work / "newstest2014.generate.txt")) == sentences
    check_scores(result.stdout, sentences)


@lane_job
def en_fr_big_run(tmp_path_factory, lane):
    return run_on_a_mirror_of_its_own(tmp_path_factory, "wmt14_en_fr_big.sh", "en-fr")


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("en_fr_big_run")
def test_en_fr_big(lane):
    root, result = lane["en_fr_big_run"].result()
    work, data = root / "work", root / "data"
    model = sentencepiece.SentencePieceProcessor(model_file=str(data / "spm" / "spm.model"))
    assert model.get_piece_size() == 400
    sentences = newstest2014_sentences(root / "raw", "en-fr")
    assert binarised_sentences(data / "data-bin", "test", "en-fr") == sentences
    train_log = (work / "checkpoints" / "train.log").read_text()
    assert "'model': {'_name': 'vaswani_transformer_big_en_fr'," in train_log and "'dropout': 0.1" in train_log
    ran_the_documented_preparation(result.stderr, 1)
    generated = hypotheses(work / "newstest2014.generate.txt")
    assert len(generated) == sentences and not any("▁" in line for line in generated)
    check_scores(result.stdout, sentences)


@lane_job
def table3_row_e(tmp_path_factory, lane):
    """Table 3's row E on the base recipe's DATA_DIR: (whether it was prepared before, WORK_DIR, the run)."""
    mirror, data = en_de_data(tmp_path_factory, lane)
    prepared_before = (data / "data-bin").exists()  # by the base recipe's job, unless its test was deselected
    work = tmp_path_factory.mktemp("table3") / "table3"
    return prepared_before, work, run_recipe("table3.sh", tiny_env(work, mirror, data), "E")


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("table3_row_e")
def test_table3_row_prints_ours_next_to_the_papers(lane):
    prepared_before, work, result = lane["table3_row_e"].result()
    if prepared_before:  # the shared DATA_DIR is reused: every preparation stage is skipped
        skipped = re.findall(r"^\[\d+/(\d+)\] .*: done before, skipping", result.stderr, re.M)
        assert skipped and len(skipped) == int(skipped[0]), result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-3].startswith("Table 3 row (E)") and "newstest2013" in lines[-3], lines[-3]  # the row, its dev set
    row = re.match(r"learned positions\s+(\d+\.\d+) \( 4.92\)\s+(\d+\.\d+) \(25.7\)\s+(\d+\.\d)M \(-M\)", lines[-1])
    assert row, lines[-1]
    assert float(row.group(1)) > 1.0  # a perplexity
    train_log = (work / "E-1" / "train.log").read_text()
    assert "'encoder_learned_pos': True" in train_log and "'decoder_learned_pos': True" in train_log


@lane_job
def diverging_runs(tmp_path_factory, lane):
    """The base recipe on its DATA_DIR with eq. 3's rate scaled by 1e9 after one warm-up update, twice."""
    mirror, data = en_de_data(tmp_path_factory, lane)
    diverging = f"{TINY} --disable-validation --warmup-updates 1 --factor 1e9"
    env = tiny_env(tmp_path_factory.mktemp("diverging"), mirror, data, STOP_AFTER="train", EXTRA_TRAIN_ARGS=diverging)
    return [run_recipe("wmt14_en_de_base.sh", env, check=False) for _ in range(2)]


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("diverging_runs")
def test_a_diverging_training_ends_in_one_line_and_is_refused_until_a_setting_changes(lane):
    """docs/recipes.md, "When training stops early": eq. 3's rate scaled by 1e9 after one warm-up update diverges.
    One line names the update, no traceback; the same command again refuses in one line without training."""
    first, again = lane["diverging_runs"].result()
    said = first.stdout + first.stderr
    assert first.returncode == 1 and "Traceback" not in said, said[-3000:]
    update = re.search(r"^vaswani_plugin: error: training diverged at update (\d+) \(", said, re.M).group(1)
    assert (
        first.stderr.strip()
        .splitlines()[-1]
        .startswith(f"wmt14_en_de_base: error: stage train: training diverged at update {update}; change a setting")
    )
    assert again.returncode == 1 and "fairseq_cli.train" not in again.stderr
    assert f"training diverged at update {update} with these very settings" in again.stderr.strip().splitlines()[-1]
    # A lower rate goes on: test_stages.py, on real checkpoints in process (a third recipe run costs 15 s).


def test_table3_needs_a_row():
    result = run_recipe("table3.sh", {"CPU": "1"}, "F", check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == "table3: error: usage: bash recipes/table3.sh A|B|C|D|E|big (a row of Table 3)"


def run_common(tmp_path, commands, gpus=8, **settings):
    """Source recipes/common.sh and run COMMANDS, with a stand-in python that reports GPUS visible GPUs, runs the
    stage records and decisions (prepare.records, recipes.stages), the launch plan and paper's settings
    (recipes.launch) and the training stage (recipes.training: torch seeing the GPUs of FAKE_GPUS, tests/fake_gpus.py;
    by default H200s), and prints any other command it is given (`python ARGS...`) instead of running it."""
    fake_python = tmp_path / "python"
    fake_python.write_text(
        f'#!/bin/sh\nif [ "$1" = -c ]; then echo {gpus}; '
        f'elif [ "$2" = recipes.training ]; then exec {sys.executable} {REPO / "tests" / "fake_gpus.py"} "$@"; '
        f'elif [ "$2" = prepare.records ] || [ "${{2%.*}}" = recipes ]; then exec {sys.executable} "$@"; '
        f'else echo "python $*"; fi\n'
    )
    fake_python.chmod(0o755)
    env = dict(os.environ, PYTHON=str(fake_python), RECIPE="test", WORK_DIR=str(tmp_path), TENSORBOARD="0")
    env.update({"FAKE_GPUS": ",".join(["9.0:NVIDIA H200:141"] * gpus)}, **settings)
    return subprocess.run(
        ["bash", "-c", f"source {REPO}/recipes/common.sh; {commands}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


# A run's launch and batch: what detect_devices sets, echoed, and the batch of the fairseq-train command that a dry run
# of train plans, where the echo says {batch} (launched: update_freq=U max_tokens=M).
LAUNCHED = (
    'stages train; detect_devices; echo "workers=$WORKERS args=$DEVICE_ARGS {batch}"; DRY_RUN=1 train "$WORK_DIR/c"'
)


def launched(result) -> str:
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    train = shlex.split(next(line for line in lines if " -m fairseq_cli.train " in line))
    batch = f"update_freq={train[train.index('--update-freq') + 1]} max_tokens={train[train.index('--max-tokens') + 1]}"
    return lines[0].replace("{batch}", batch)


@pytest.mark.parametrize(
    "settings,expected",
    [
        # The paper's 8 GPUs: one step = 8 x 3125 tokens.
        ({}, "workers=8 args=--distributed-world-size 8 update_freq=1 max_tokens=3125"),
        # Fewer GPUs: --update-freq grows so that a step still holds about 25,000 tokens.
        ({"NUM_GPUS": "1"}, "workers=1 args=--distributed-world-size 1 update_freq=7 max_tokens=3572"),
        ({"NUM_GPUS": "4", "FP16": "1"}, "workers=4 args=--distributed-world-size 4 update_freq=2 max_tokens=3125"),
        # Two nodes of 8: this node's processes start at rank 8 and reach node 0 over TCP.
        (
            {"NUM_NODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"},
            "workers=16 args=--distributed-world-size 16 --distributed-init-method tcp://node0:29500 "
            "--distributed-rank 8 update_freq=1 max_tokens=1563",
        ),
    ],
)
def test_gpu_batch_arithmetic(settings, expected, tmp_path):
    """The GPU path of the recipes (this machine has none)."""
    assert launched(run_common(tmp_path, LAUNCHED, **settings)) == expected


def test_a_stage_runs_again_when_its_plan_changes_and_so_does_every_later_one(tmp_path):
    """Table row "nothing": every stage skipped. Row "decoding only": a stage whose commands changed runs again, its
    previous outputs kept aside under previous/, and every later stage runs again; the stages before it do not."""
    recipe = (
        'stages train average translate; avg() { run_to "$WORK_DIR/average.txt" echo "average ${X:-}"; }; '
        'stage train echo train; stage average --output "$WORK_DIR/average.txt" avg; stage translate echo translate'
    )
    assert run_common(tmp_path, recipe).stdout.split() == ["train", "translate"]
    unchanged = run_common(tmp_path, recipe)
    assert unchanged.stdout.split() == [] and unchanged.stderr.count("done before, skipped") == 3
    again = run_common(tmp_path, recipe, X="beam 5")
    assert again.stdout.split() == ["translate"], again.stderr
    assert (tmp_path / "average.txt").read_text() == "average beam 5\n"
    (kept,) = (tmp_path / "previous").glob("*/average.txt")
    assert kept.read_text() == "average \n" and (kept.parent / ".stages" / "average.json").is_file()
    assert "stage average: running again (its plan or the stage before it changed; its outputs moved to" in again.stderr
    assert "stage train: done before, skipped" in again.stderr
    assert run_common(tmp_path, recipe, X="beam 5").stdout.split() == []


def test_an_interrupted_stage_runs_again(tmp_path):
    recipe = 'stages one two; stage one echo one; stage two sh -c "echo two; exit ${FAIL:-0}"'
    assert run_common(tmp_path, recipe, FAIL="1").returncode == 1
    assert run_common(tmp_path, recipe).stdout.split() == ["two"]


def test_more_gpus_than_visible_is_an_error(tmp_path):
    result = run_common(tmp_path, "detect_devices", NUM_GPUS="9")
    assert result.returncode == 1
    assert result.stderr.strip() == "test: error: NUM_GPUS=9 but only 8 GPUs are visible"


# What train() runs: fairseq-train's arguments, printed by run_common's stand-in python. Its data: data_bin's; the
# batch per GPU set (the memory model's, vaswani_plugin/tools/gpu_batch.py, needs a real model: test_memory.py).
TRAIN = 'stages train; detect_devices; MAX_TOKENS_PER_GPU=4096 train "$WORK_DIR/checkpoints" --arch a'


def data_bin(work_dir: Path) -> None:
    """WORK_DIR/data/data-bin with train and valid splits, written by fairseq's own builder, whose longest sentence
    has 100 tokens: all that the recipes' batch check reads."""
    folder = work_dir / "data" / "data-bin"
    folder.mkdir(parents=True, exist_ok=True)
    for split, lengths in (("train", (3, 100, 7)), ("valid", (5,))):
        prefix = folder / f"{split}.src-tgt.src"
        builder = indexed_dataset.MMapIndexedDatasetBuilder(f"{prefix}.bin", dtype=np.int32)
        for length in lengths:
            builder.add_item(torch.arange(length, dtype=torch.int32))
        builder.finalize(f"{prefix}.idx")


H200, V100, P100 = "9.0:NVIDIA H200:141", "7.0:Tesla V100-SXM2-16GB:16", "6.0:Tesla P100-PCIE-16GB:16"
BF16, FP16, FP32 = "--bf16-autocast on", "--bf16-autocast off --fp16", "--bf16-autocast off"


@pytest.mark.parametrize(
    "gpus,settings,passed,why",
    [
        # PRECISION unset: mixed precision by the smallest card's compute capability (run 0's node decides).
        (H200, {}, BF16, "NVIDIA H200, compute capability 9.0: bfloat16 tensor cores"),
        ("8.0:NVIDIA A100-SXM4-40GB:40", {}, BF16, "compute capability 8.0: bfloat16 tensor cores"),
        (V100, {}, FP16, "Tesla V100-SXM2-16GB, compute capability 7.0: float16 tensor cores, no bfloat16 ones"),
        (f"{H200},{V100}", {}, FP16, "Tesla V100-SXM2-16GB, compute capability 7.0"),
        (P100, {}, FP32, "compute capability 6.0: no tensor cores for mixed precision, so float32"),
        # Set: as said, on any card, and no line; an older spelling as before (BF16=0: float32). Every other
        # spelling's arguments: tests/test_bf16_autocast.py, in process (the two functions this command calls for them).
        (H200, {"PRECISION": "amp"}, "--bf16-autocast off --amp", None),
        (H200, {"BF16": "0"}, FP32, None),
        (V100, {"BF16": "auto"}, FP16, "compute capability 7.0"),
        # A CPU: float32 unless auto is asked for (the quickstart's default): then the task's own, by the CPU's flags
        # (tests/test_bf16_autocast.py fakes other CPUs).
        ("", {"CPU": "1"}, FP32, None),
        ("", {"CPU": "1", "PRECISION": "auto"}, "--bf16-autocast auto", None),
        ("", {"CPU": "1", "BF16": "auto"}, "--bf16-autocast auto", None),
        ("", {"CPU": "1", "PRECISION": "bf16"}, BF16, None),
    ],
)
def test_the_precision_is_chosen_once_from_precision_or_the_gpus(gpus, settings, passed, why, tmp_path):
    """recipes/training.py's command for PRECISION (and FP16, BF16) on the cards of FAKE_GPUS: the arguments it gives
    fairseq-train, and, where it chose, the `precision:` line and why the task is told (VASWANI_PRECISION_DEFAULT)."""
    data_bin(tmp_path)
    result = run_common(tmp_path, TRAIN, gpus=len(gpus.split(",")) if gpus else 0, FAKE_GPUS=gpus, **settings)
    assert result.returncode == 0, result.stderr
    (command,) = [line for line in result.stdout.splitlines() if line.startswith("python -m fairseq_cli.train ")]
    assert f" --task vaswani_translation {passed} --share-all-embeddings " in command
    said = re.findall(r"\] precision: (.*)", result.stderr)
    if why is None:
        assert said == []
    else:
        (line,) = said
        assert line.startswith(f"{passed.split()[-1].strip('-').replace('on', 'bf16').replace('off', 'fp32')} (")
        assert "PRECISION unset" in line or "BF16=auto" in line
        assert why in line
    assert (tmp_path / "checkpoints" / "train.log").read_text() == result.stdout  # the node's log


@pytest.mark.parametrize(
    "gpus,settings,message",
    [
        (8, {"FP16": "1", "BF16": "1"}, "FP16=1 and BF16=1 are two precisions: set PRECISION=fp16 or PRECISION=bf16"),
        (8, {"PRECISION": "bf16", "FP16": "1"}, "PRECISION=bf16 and FP16=1 disagree: set PRECISION alone"),
        (8, {"PRECISION": "fp8"}, "PRECISION=fp8: use auto, fp32, tf32, fp16, amp, bf16"),
        (8, {"BF16": "yes"}, "BF16=yes: use 1 (PRECISION=bf16), 0 (PRECISION=fp32) or auto"),
        (
            0,
            {"CPU": "1", "PRECISION": "fp16"},
            "PRECISION=fp16 is for GPUs (fairseq's fp16 needs CUDA): on a CPU use auto, fp32 or bf16",
        ),
    ],
)
def test_a_precision_the_recipe_cannot_follow_is_one_line_before_anything_runs(gpus, settings, message, tmp_path):
    result = run_common(tmp_path, TRAIN, gpus=gpus, **settings)
    assert result.returncode == 1 and result.stderr.strip().splitlines()[-1] == f"test: error: {message}"
    assert not (tmp_path / "checkpoints").exists()


@NEEDS_CPU_PATH
def test_a_bad_bf16_setting_is_the_tasks_one_line_error(reversal_data, tmp_path):
    """fairseq-train itself, on a tiny corpus: the task refuses the value (given past the recipe's PRECISION, in
    EXTRA_TRAIN_ARGS) before the model is built."""
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        PYTHON=sys.executable,
        OMP_NUM_THREADS="1",
        RECIPE="test",
        WORK_DIR=str(tmp_path),
        CPU="1",
        EXTRA_TRAIN_ARGS="--bf16-autocast yes",
        TOKENS_PER_STEP="1000",
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "data-bin").symlink_to(reversal_data / "joined")  # DATA_DIR's default, WORK_DIR/data
    command = f'stages train; detect_devices; train "$WORK_DIR/checkpoints" --arch vaswani_transformer {TINY}'
    result = subprocess.run(
        ["bash", "-c", f"source {REPO}/recipes/common.sh; {command}"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    message = "vaswani_plugin: error: --bf16-autocast yes: use auto, on (1) or off (0)"
    assert result.stdout.strip().splitlines()[-1] == message  # fairseq-train's output, through tee
    assert (tmp_path / "checkpoints" / "train.log").read_text().strip().splitlines()[-1] == message
    assert "Traceback" not in result.stdout + result.stderr


def test_translate_takes_the_decoding_as_arguments(tmp_path):
    """§6.1 (the WMT recipes) and §6.3 (parsing: no subwords to join) through the one translate function."""
    translate = (
        "detect_devices; translate --checkpoint model.pt --subset {} "
        '--output "$WORK_DIR/out.txt" {}; cat "$WORK_DIR/out.txt"'
    )
    wmt = run_common(tmp_path, translate.format("test", "--post-process subword_nmt"))
    assert wmt.returncode == 0, wmt.stderr
    assert (
        "--path model.pt --gen-subset test --search paper --beam 4 --gnmt-alpha 0.6 --max-len-a 1 --max-len-b 50 "
        "--batch-size 128 --required-batch-size-multiple 1 --post-process subword_nmt" in wmt.stdout
    )
    parsing = run_common(
        tmp_path,
        translate.format("valid", "--beam 21 --alpha 0.3 --max-len-b 300 --batch-size 32"),
        EXTRA_GENERATE_ARGS="--x 1",
    )
    assert parsing.returncode == 0, parsing.stderr
    assert parsing.stdout.strip().endswith(
        "--path model.pt --gen-subset valid --search paper --beam 21 --gnmt-alpha 0.3 --max-len-a 1 --max-len-b 300 "
        "--batch-size 32 --required-batch-size-multiple 1 --x 1"
    )
    assert "--post-process" not in parsing.stdout


@pytest.mark.parametrize("settings,dropout", [({}, None), ({"DROPOUT": "0.2"}, "0.2")])
def test_the_wmt14_recipe_takes_the_papers_values_for_its_model(settings, dropout, tmp_path):
    """The big model's steps, checkpoint cadence and average (paper.py), the user's variables over them; P_drop is
    the architecture's unless DROPOUT is set: as a dry run of the big recipe plans them."""

    def planned(**more):
        env = dict(WORK_DIR=str(tmp_path / "work"), DRY_RUN="1", CPU="1", **settings, **more)
        lines = run_recipe("wmt14_en_de_big.sh", env).stdout.splitlines()
        return {shlex.split(line)[2]: shlex.split(line)[3:] for line in lines if line.split()[1] == "-m"}

    plan, checkpoints, text = planned(), tmp_path / "work" / "checkpoints", tmp_path / "work" / "data" / "text"
    train = plan["fairseq_cli.train"]
    dev = [
        *("--dev-score", "bleu", "--dev-score-reference", f"{text}/valid.de", "--search", "paper"),
        *("--gnmt-alpha", "0.6", "--dev-score-args", '{"beam": 4, "max_len_a": 1, "max_len_b": 50}'),
        *("--dev-score-post-process", "subword_nmt", "--dev-score-interval-updates", "0", "--dev-score-sentences", "0"),
    ]
    assert train[train.index("--arch") :] == [
        *("--arch", "vaswani_transformer_big", *(("--dropout", dropout) if dropout else ())),
        *("--max-update", "300000", "--save-interval-updates", "600", "--keep-interval-updates", "20", *dev),
    ]
    assert plan["vaswani_plugin.checkpoints.average"][:4] == [
        "--inputs",
        str(checkpoints),
        "--num-update-checkpoints",
        "20",
    ]
    generate = plan["fairseq_cli.generate"]
    assert generate[generate.index("--path") + 1] == f"{checkpoints}/checkpoint_average.pt"
    cost = plan["vaswani_plugin.tools.training_cost"]
    assert cost[cost.index("--paper") + 1] == "big"
    train = planned(MAX_UPDATE="8", SAVE_INTERVAL_UPDATES="2", AVERAGE_LAST="3")["fairseq_cli.train"]
    assert train[train.index("--max-update") :][:6] == [
        *("--max-update", "8", "--save-interval-updates", "2", "--keep-interval-updates", "3")
    ]


@pytest.mark.parametrize(
    "script,args,settings,stages",
    [
        ("wmt14_en_de_base.sh", (), {}, "prepare train average translate"),
        ("wmt14_en_de_big.sh", (), {}, "prepare train average translate"),
        ("wmt14_en_fr_big.sh", (), {}, "prepare train average translate"),
        ("quickstart.sh", (), {}, "prepare train average translate"),
        ("table3.sh", ("B",), {}, "prepare train-B-1 translate-B-1 train-B-2 translate-B-2"),
        (
            "wsj_parsing.sh",
            (),
            {"SAMPLE_DIR": "x"},
            "prepare pretrain train average constrained_valid constrained_test",
        ),
        (
            "wsj_parsing.sh",
            (),
            {"SAMPLE_DIR": "x", "UNCONSTRAINED": "1"},
            "prepare pretrain train average constrained_valid unconstrained_valid constrained_test unconstrained_test",
        ),
    ],
)
def test_stop_after_naming_no_stage_is_an_error_before_anything_runs(script, args, settings, stages, tmp_path):
    result = run_recipe(script, dict(WORK_DIR=str(tmp_path), STOP_AFTER="trian", **settings), *args, check=False)
    recipe = Path(script).stem
    assert result.returncode == 1
    assert (
        result.stderr.strip() == f"{recipe}: error: STOP_AFTER=trian is not a stage of {recipe}; its stages: {stages}"
    )
    assert list(tmp_path.iterdir()) == []  # nothing prepared, nothing trained


def test_stop_after_prepare_stops_once_the_data_is_prepared(tmp_path):
    recipe = "stages prepare train; detect_devices; prepare_data multi30k -- --bpe-merges 10; echo trained"
    result = run_common(tmp_path, recipe, STOP_AFTER="prepare")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("python -m prepare.multi30k --work-dir ") and "trained" not in result.stdout
    assert result.stderr.strip().endswith(
        "STOP_AFTER=prepare: stopping here; run again without it for the later stages"
    )


def batch_for(monkeypatch, data_bin: Path, workers: int, **settings):
    """The batch of WORKERS workers on DATA_BIN (recipes/launch.py's, which recipes/training.py takes), in process:
    (MAX_TOKENS, UPDATE_FREQ), or the recipe's one line as the error it raises."""
    for name in ("TOKENS_PER_STEP", "MAX_TOKENS_PER_GPU", "DRY_RUN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    plan = launch.batch_plan(workers, str(data_bin), default_tokens=25000)
    return plan["MAX_TOKENS"], plan["UPDATE_FREQ"]


def test_a_batch_below_the_longest_sentence_is_a_one_line_error(reversal_data, monkeypatch, capsys):
    """fairseq asserts `Sentences lengths should not exceed max_tokens` at its first batch; the recipe says so before
    training, with the numbers and what to set. The longest example, read here through fairseq's own dataset."""
    data_bin = reversal_data / "joined"
    sides = {
        (split, lang): MMapIndexedDataset(str(data_bin / f"{split}.src-tgt.{lang}"))
        for split in ("train", "valid")
        for lang in ("src", "tgt")
    }  # kept open while their sizes are read
    longest, split = max((int(dataset.sizes.max()), split) for (split, _), dataset in sides.items())
    with pytest.raises(VaswaniConfigError) as short:
        batch_for(monkeypatch, data_bin, 8, TOKENS_PER_STEP=str(8 * (longest - 1)))
    assert str(short.value) == (
        f"TOKENS_PER_STEP={8 * (longest - 1)} over 8 worker(s) gives each a batch of {longest - 1} "
        f"tokens, below the longest {split} sentence ({longest} tokens): set TOKENS_PER_STEP to at least {8 * longest}"
    )
    assert batch_for(monkeypatch, data_bin, 8, TOKENS_PER_STEP=str(8 * longest)) == (longest, 1)
    with pytest.raises(VaswaniConfigError) as small:
        batch_for(monkeypatch, data_bin, 8, MAX_TOKENS_PER_GPU=str(longest - 1))
    assert str(small.value) == (
        f"MAX_TOKENS_PER_GPU={longest - 1} is below the longest {split} sentence ({longest} tokens): "
        f"set MAX_TOKENS_PER_GPU to at least {longest}"
    )
    # A GPU that holds it, where the step's even split would round below it: batches of the longest sentence.
    tokens = 2 * (longest + 1) + 1  # 3 batches of at most longest + 1 tokens; split evenly, fewer than longest
    assert -(-tokens // 3) < longest
    capsys.readouterr()
    rounded = batch_for(monkeypatch, data_bin, 1, TOKENS_PER_STEP=str(tokens), MAX_TOKENS_PER_GPU=str(longest + 1))
    assert rounded == (longest, 3)
    assert f"batch: {longest} tokens a worker instead, to hold the longest" in capsys.readouterr().err


def test_longest_of_a_folder_without_the_split_is_a_one_line_error(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "prepare.longest", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1 and result.stderr.strip() == (
        f"prepare: error: {tmp_path} holds no binarised train split (train.SRC-TGT.LANG.idx)"
    )


def test_an_empty_cuda_visible_devices_hides_every_gpu(tmp_path):
    """Set and empty, it hides every GPU (as CUDA reads it): the stand-in's 8 are not even asked for."""
    hidden = run_common(tmp_path, "detect_devices", gpus=8, CUDA_VISIBLE_DEVICES="")
    assert hidden.returncode == 1 and hidden.stderr.startswith("test: error: no GPU visible.")
    shown = run_common(tmp_path, 'detect_devices; echo "$WORKERS"', gpus=8, CUDA_VISIBLE_DEVICES="0")
    assert shown.returncode == 0 and shown.stdout.strip() == "8"


@pytest.mark.parametrize(
    "script, args, settings",
    [
        ("quickstart.sh", [], {}),
        ("wmt14_en_de_base.sh", [], {"NUM_GPUS": "8", "FP16": "1"}),
        ("wmt14_en_de_big.sh", [], {"CPU": "1"}),
        ("wmt14_en_fr_big.sh", [], {"NUM_GPUS": "2"}),
        ("table3.sh", ["B"], {"NUM_GPUS": "8"}),
        # The sample's default extra trees are GUM's beside it: without ../shared/data the recipe stops at them.
        pytest.param("wsj_parsing.sh", [], {"SAMPLE_DIR": "../shared/data/ptb_sample"}, marks=pytest.mark.shared_data),
    ],
)
def test_dry_run_prints_every_command_and_writes_nothing(script, args, settings, tmp_path):
    """DRY_RUN=1 on an empty WORK_DIR: the launch plan, what each stage would do and each command as it would run
    (stdout, shell-quoted); nothing downloaded, prepared, trained or created, on a machine without the GPUs."""
    work = tmp_path / "work"
    result = run_recipe(script, dict(DRY_RUN="1", WORK_DIR=str(work), **settings), *args)
    lines = [shlex.split(line) for line in result.stdout.splitlines()]
    modules = [words[2] for words in lines]
    assert all(words[:2] == [sys.executable, "-m"] for words in lines), result.stdout
    assert modules[0].startswith("prepare.") and "fairseq_cli.train" in modules and "fairseq_cli.generate" in modules
    (train, *more) = [words for words in lines if words[2] == "fairseq_cli.train"]
    assert train[train.index("--save-dir") + 1].startswith(str(work)) and "--adam-betas" in train
    assert train[train.index("--adam-betas") + 1] == "(0.9,0.98)"  # as the shell passes it
    gpus = int(settings.get("NUM_GPUS", 0))
    assert ("--fp16" in train) == ("FP16" in settings) and ("--cpu" in train) == (gpus == 0)
    if gpus > 1:
        assert train[train.index("--distributed-world-size") + 1] == str(gpus)
        assert f"training on {gpus} GPU(s) x 1 node(s)" in result.stderr
    assert re.search(r"stage train\S*: would run", result.stderr) and "at run time" in result.stderr
    if script == "quickstart.sh":  # an argument with spaces, one word (quoted) on the printed line
        (pictures,) = [words for words in lines if words[2] == "vaswani_plugin.tools.attention_pictures"]
        assert pictures[pictures.index("--source") + 1] == "{the first test sentence}"
    assert not work.exists() and list(tmp_path.iterdir()) == []


def train_words(result):
    (train,) = [shlex.split(line) for line in result.stdout.splitlines() if " -m fairseq_cli.train " in line]
    return train


def test_dry_runs_plan_dev_scores_and_tensorboard_as_their_variables_say(tmp_path):
    """WMT: newstest2013's BLEU at every checkpoint with §6.1's decoding (DEV_SCORE=0: none); --tensorboard-logdir
    where tensorboardX or tensorboard is importable (here: a stand-in package) unless TENSORBOARD=0; the quickstart
    validates nothing by default."""
    stand_in = tmp_path / "site" / "tensorboardX"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").touch()
    base = dict(DRY_RUN="1", WORK_DIR=str(tmp_path / "work"), NUM_GPUS="8")
    train = train_words(run_recipe("wmt14_en_de_base.sh", dict(base, PYTHONPATH=str(stand_in.parent))))
    option = {word: train[index + 1] for index, word in enumerate(train[:-1]) if word.startswith("--dev-score")}
    assert option == {
        "--dev-score": "bleu",
        "--dev-score-reference": str(tmp_path / "work/data/text/valid.de"),
        "--dev-score-args": json.dumps({"beam": 4, "max_len_a": 1, "max_len_b": 50}),
        "--dev-score-post-process": "subword_nmt",
        "--dev-score-interval-updates": "0",
        "--dev-score-sentences": "0",
    }
    assert train[train.index("--search") + 1] == "paper" and train[train.index("--gnmt-alpha") + 1] == "0.6"
    assert train[train.index("--tensorboard-logdir") + 1] == str(tmp_path / "work/checkpoints/tensorboard")
    train = train_words(
        run_recipe("wmt14_en_de_base.sh", dict(base, PYTHONPATH=str(stand_in.parent), DEV_SCORE="0", TENSORBOARD="0"))
    )
    assert "--dev-score" not in train and "--tensorboard-logdir" not in train
    train = train_words(run_recipe("quickstart.sh", dict(base, NUM_GPUS="")))
    assert "--disable-validation" in train and "--dev-score" not in train


@pytest.fixture(scope="module")
def quickstart_plan(tmp_path_factory):
    """A function of a WORK_DIR: the training command of the quickstart's DRY_RUN there, as a stage's plan names it
    (the interpreter `python`). One DRY_RUN for the module's tests."""
    work = tmp_path_factory.mktemp("plan") / "work"
    first = run_recipe("quickstart.sh", dict(DRY_RUN="1", WORK_DIR=str(work)))
    (train,) = [
        line.replace(sys.executable, "python", 1)
        for line in first.stdout.splitlines()
        if " -m fairseq_cli.train " in line
    ]
    return lambda work_dir: train.replace(str(work), str(work_dir))


def test_dry_run_says_what_a_finished_stage_would_do(quickstart_plan, tmp_path):
    """A finished stage: skipped (and what depends on it planned as it would run); nothing written."""
    work = tmp_path / "work"
    train = quickstart_plan(work)
    for action in ("start", "finish"):
        subprocess.run(
            [sys.executable, "-m", "prepare.records", action, str(work), "train"],
            input=train,
            text=True,
            check=True,
            cwd=REPO,
        )
    (work / "checkpoints").mkdir()
    (work / "checkpoints" / "checkpoint_last.pt").touch()
    written = sorted(path.name for path in work.rglob("*"))
    result = run_recipe("quickstart.sh", dict(DRY_RUN="1", WORK_DIR=str(work)))
    assert "stage train: done before, skipped" in result.stderr and "stage average: would run" in result.stderr
    assert "fairseq_cli.train" not in result.stdout and "checkpoints.average" in result.stdout
    assert sorted(path.name for path in work.rglob("*")) == written


def test_a_run_started_under_fairseqs_adam_goes_on_with_it(quickstart_plan, tmp_path):
    """The recipes train with vaswani_adam; a run whose checkpoints trained under fairseq's adam (started before)
    resumes with adam, which fairseq requires (it resumes no checkpoint under another optimizer).
    (test_resume.py: which optimizer a folder's checkpoints name.)"""
    from vaswani_plugin.checkpoints.resume import training_config

    work = tmp_path / "work"
    train = quickstart_plan(work)
    assert " --optimizer vaswani_adam " in train
    cfg = training_config(train)  # the checkpoint fairseq-train would have written after 5 updates, under adam
    cfg["optimizer"]["_name"] = "adam"
    (work / "checkpoints").mkdir(parents=True)
    torch.save(
        {
            "cfg": cfg,
            "optimizer_history": [{"num_updates": 5, "optimizer_name": "FairseqAdam"}],
            "last_optimizer_state": {},
            "extra_state": {"train_iterator": {"epoch": 1}},
        },
        work / "checkpoints" / "checkpoint_last.pt",
    )
    result = run_recipe("quickstart.sh", dict(DRY_RUN="1", WORK_DIR=str(work)))
    (resumed,) = [
        line.replace(sys.executable, "python", 1)
        for line in result.stdout.splitlines()
        if " -m fairseq_cli.train " in line
    ]
    assert "stage train: would resume from update 5" in result.stderr
    assert resumed == train.replace(" --optimizer vaswani_adam ", " --optimizer adam ")


def test_dry_run_takes_0_or_1():
    result = run_recipe("quickstart.sh", {"DRY_RUN": "yes"}, check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == "quickstart: error: DRY_RUN=yes: use 1 (print what would run, run nothing) or 0"


def test_report_0_plans_no_report_and_takes_0_or_1(tmp_path):
    """The report at the end is planned unless REPORT=0 (test_en_de_base_...: nor at the checkpoints)."""
    settings = dict(DRY_RUN="1", WORK_DIR=str(tmp_path / "work"))
    report = [sys.executable, "-m", "vaswani_plugin.tools.run_report", str(tmp_path / "work")]
    planned = [shlex.split(line) for line in run_recipe("quickstart.sh", settings).stdout.splitlines()]
    assert planned[-1] == report
    result = run_recipe("quickstart.sh", dict(settings, REPORT="0"))
    assert report not in [shlex.split(line) for line in result.stdout.splitlines()]
    assert "REPORT=0: no curves or report.md" in result.stderr
    result = run_recipe("quickstart.sh", dict(settings, REPORT="no"), check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == "quickstart: error: REPORT=no: use 1 (draw the curves and write report.md) or 0"


def test_the_documented_dry_run_plans_the_big_model_on_eight_gpus(tmp_path):
    """docs/recipes.md's DRY_RUN block as written, from a folder with the recipes (its default WORK_DIR, ./work/...,
    relative to it): 8 GPUs, the big model, nothing written; the precision chosen at run time (the plan: bf16's)."""
    (tmp_path / "recipes").symlink_to(REPO / "recipes")
    result = run_recipe("wmt14_en_de_big.sh", {}, command=block("docs/recipes.md", "test:dry-run"), cwd=tmp_path)
    (train,) = [shlex.split(line) for line in result.stdout.splitlines() if " -m fairseq_cli.train " in line]
    assert train[train.index("--arch") + 1] == "vaswani_transformer_big" and "--fp16" not in train
    assert train[train.index("--bf16-autocast") + 1] == "on"
    assert train[train.index("--distributed-world-size") + 1] == "8"
    assert "training on 8 GPU(s) x 1 node(s), auto (at training, by the GPUs' compute capability)" in result.stderr
    assert "precision: PRECISION unset: chosen at run time by the GPUs' compute capability" in result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["recipes"]


@pytest.mark.parametrize(
    "commands,message",
    [
        ("stages train; train x --arch a", "internal: train needs the run's launch: call detect_devices before it"),
        (
            "detect_devices; translate --checkpoint c --subset test --output o --beams 5",
            "internal: translate takes --checkpoint --subset --output --beam --alpha --max-len-b --batch-size "
            "--post-process, not --beams",
        ),
    ],
)
def test_a_function_called_out_of_order_or_with_an_unknown_option_says_so(commands, message, tmp_path):
    result = run_common(tmp_path, commands)
    assert result.returncode == 1 and result.stderr.strip().splitlines()[-1] == f"test: error: {message}"
