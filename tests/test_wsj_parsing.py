"""§6.3 parsing: prepare.wsj_parsing, score_parses (repair + EVALB) and recipes/wsj_parsing.sh end to end on a
few files of the public WSJ sample (../shared/data/ptb_sample) and of GUM (../shared/data/gum_const), with a tiny
model, seconds of training and tree-constrained decoding; bad input as one-line errors."""

import collections
import re
import shutil
import subprocess
import sys

import pytest
import torch
from cli_helpers import REPO, SHARED_DATA, TINY_MODEL
from conftest import lane_job
from doc_blocks import block, commands, run_shell, substituted
from test_recipes import NEEDS_CPU_PATH, run_recipe

from prepare.binarize import binarized_sentences
from prepare.ptb_tokenize import ptb_tokenize
from prepare.wsj_parsing import describe, extra_train_files, write_split
from vaswani_plugin.scoring import parses
from vaswani_plugin.scoring.evalb import evaluate
from vaswani_plugin.scoring.trees import delinearise, read_trees
from vaswani_plugin.training.progress import read_records

FILES = {"train": ["0001", "0002", "0003"], "valid": ["0150"], "test": ["0165"]}
# docs/parsing.md's paths, which the tests' own replace.
SAMPLE, LDC = "../shared/data/ptb_sample", "/path/to/treebank_3/parsed/mrg/wsj"
FIVE_FILES = [number for numbers in FILES.values() for number in numbers]
GUM_FILES = ["GUM_bio_byron.ptb", "GUM_news_iodine.ptb"]  # 66 trees: the semi-supervised setting's extra trees
# An untrained model's outputs, cut short: at most input + 4 tokens (a tree over n words needs n + 1 with </s>).
SHORT_OUTPUTS = "--max-len-a 1 --max-len-b 4"
SAMPLE_UPDATES, FINETUNE_EPOCHS = 40, 3  # the sample run's: its last 3 epochs' updates on the sample's own trees


def copy_sample_files(folder, numbers):
    folder.mkdir(parents=True, exist_ok=True)
    for number in numbers:
        shutil.copy(SHARED_DATA / "ptb_sample" / f"wsj_{number}.mrg", folder)


@pytest.fixture(scope="module")
def few_files(tmp_path_factory):
    """Five files of the sample, in a folder of their own (a copy in the test's temporary directory)."""
    folder = tmp_path_factory.mktemp("ptb")
    copy_sample_files(folder, FIVE_FILES)
    return folder


@pytest.fixture(scope="module")
def prepared(few_files, tmp_path_factory):
    work = tmp_path_factory.mktemp("prepared")
    result = subprocess.run(
        [sys.executable, "-m", "prepare.wsj_parsing", "--work-dir", str(work), "--sample-dir", str(few_files)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == str(work / "data-bin")
    return work, result.stderr


@pytest.mark.shared_data
def test_prepare_splits_files_and_keeps_the_trees_recoverable(prepared, few_files):
    work, log = prepared
    for split, numbers in FILES.items():
        trees = [t for n in numbers for t in read_trees((few_files / f"wsj_{n}.mrg").read_text())]
        words = (work / "text" / f"{split}.words").read_text().splitlines()
        sequences = (work / "text" / f"{split}.tree").read_text().splitlines()
        gold = (work / "gold" / f"{split}.trees").read_text().splitlines()
        tags = (work / "gold" / f"{split}.tags").read_text().splitlines()
        assert len(words) == len(sequences) == len(gold) == len(tags) == len(trees)
        assert re.search(rf"^ *{split}: {len(trees)}\D.*\b{len(numbers)}\b", log, re.M), log  # trees, files
        for w, s, g, t in zip(words, sequences, gold, tags):
            assert str(delinearise(s.split(), w.split(), t.split())) == g
            assert "-NONE-" not in g and "-SBJ" not in g
    # Word leaves (the default): one dictionary for both sides, the words seen twice or more in training and the
    # tree tokens; the words seen once are <unk> (the LDC-layout recipe run checks XX leaves).
    assert "tree leaves: words\n" in log and "XX" not in sequences[0].split()
    tree_dict = (work / "data-bin" / "dict.tree.txt").read_text().split()[::2]
    assert tree_dict == (work / "data-bin" / "dict.words.txt").read_text().split()[::2]
    counts = collections.Counter((work / "text" / "train.words").read_text().split())
    assert "(S" in tree_dict and ")S" in tree_dict and counts["Vinken"] == 2 and "Vinken" in tree_dict
    assert {word for word, count in counts.items() if count == 1} & set(tree_dict) == set()


def write_generate_output(path, outputs):
    """fairseq-generate's lines for the outputs, in a shuffled order as fairseq writes them."""
    order = sorted(range(len(outputs)), key=lambda i: (i * 7) % len(outputs))
    path.write_text("".join(f"S-{i}\tx\nH-{i}\t-1.0\t{outputs[i]}\nD-{i}\t-1.0\t{outputs[i]}\n" for i in order))


def score(work, generate_output, tmp_path):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "vaswani_plugin.scoring.parses",
            "--generate-output",
            str(generate_output),
            "--words",
            str(work / "text" / "valid.words"),
            "--tags",
            str(work / "gold" / "valid.tags"),
            "--gold",
            str(work / "gold" / "valid.trees"),
            "--output",
            str(tmp_path / "parsed.trees"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.shared_data
def test_score_parses_repairs_outputs_and_scores_them_as_evalb(prepared, tmp_path):
    work, _ = prepared
    gold_sequences = (work / "text" / "valid.tree").read_text().splitlines()
    # Perfect outputs for all but two sentences: one truncated (unbalanced), one with a word too many.
    outputs = list(gold_sequences)
    outputs[0] = " ".join(outputs[0].split()[:-3])
    tokens = outputs[1].split()
    first_leaf = next(i for i, token in enumerate(tokens) if not token.startswith(("(", ")")))
    outputs[1] = " ".join(tokens[: first_leaf + 1] + tokens[first_leaf:])
    write_generate_output(tmp_path / "generate.txt", outputs)
    result = score(work, tmp_path / "generate.txt", tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"outputs repaired into well-formed trees: 2 of {len(outputs)}" in result.stdout
    parsed = (tmp_path / "parsed.trees").read_text().splitlines()
    gold = (work / "gold" / "valid.trees").read_text().splitlines()
    assert parsed[2:] == gold[2:]
    _, summary, _ = evaluate(gold, parsed)
    assert 50 < summary.f1 < 100 and summary.valid == len(gold)  # two of the 9 sentences are off
    assert re.search(
        rf"^F1 = {summary.f1:.2f} \(labelled bracketing, EVALB COLLINS.prm, {len(gold)} of "
        rf"{len(gold)} sentences scored\)$",
        result.stdout,
        re.M,
    )


@pytest.mark.shared_data
def test_score_parses_needs_every_sentence(prepared, tmp_path):
    work, _ = prepared
    gold_sequences = (work / "text" / "valid.tree").read_text().splitlines()
    write_generate_output(tmp_path / "generate.txt", gold_sequences[:-1])  # fairseq dropped the last one
    result = score(work, tmp_path / "generate.txt", tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "every sentence must be translated once" in result.stderr


def check_parsed_and_scored(work, log):
    """A recipe run's dev and test: every sentence generated under the tree constraint, already a tree over its
    words (none repaired), and scored."""
    assert "'parse_constrained': True" in log and "'parse_constrained': False" not in log
    for split in ("valid", "test"):
        generated = (work / f"{split}.generate.txt").read_text()
        gold = (work / "data" / "gold" / f"{split}.trees").read_text().splitlines()
        parsed = (work / f"{split}.parsed.trees").read_text().splitlines()
        assert len(parsed) == len(gold) and len(re.findall(r"^H-\d+\t", generated, re.M)) == len(gold)
        for tree, reference in zip(parsed, gold):  # well-formed trees over the gold words
            assert read_trees(tree)[0].words() == read_trees(reference)[0].words()
        scores = (work / f"{split}.f1").read_text()
        assert f"outputs repaired into well-formed trees: 0 of {len(gold)}\n" in scores
        assert re.search(
            rf"^F1 = \d+\.\d\d \(labelled bracketing, EVALB COLLINS.prm, {len(gold)} of {len(gold)} ", scores, re.M
        )
        assert re.search(rf"\] {split}, constrained: F1 \d+\.\d\d$", log, re.M)
        assert re.search(rf"\] {split}, right-branching baseline: F1 \d+\.\d\d$", log, re.M)


@lane_job
def wsj_sample_run(tmp_path_factory, lane):
    """The documented line for anyone (SAMPLE_DIR alone) on five files of the sample, with two of GUM's in the
    gum_const/const folder beside it (../shared/data's layout: the default extra trees), MAX_UPDATE updates of
    training (counted: the same run on any machine), the last FINETUNE_EPOCHS epochs' worth on the sample alone."""
    root = tmp_path_factory.mktemp("wsj-sample")
    sample, _ = sample_and_gum(root / "data")
    # No interval checkpoint (the recipe then decodes checkpoint_last.pt; the LDC run below averages).
    env = dict(
        WORK_DIR=str(root / "work"),
        MAX_UPDATE=str(SAMPLE_UPDATES),
        FINETUNE_EPOCHS=str(FINETUNE_EPOCHS),
        REPORT="0",
        SAVE_INTERVAL_UPDATES="1000",
        AVERAGE_LAST="2",
        EXTRA_TRAIN_ARGS=" ".join(TINY_MODEL),
        EXTRA_GENERATE_ARGS=SHORT_OUTPUTS,
    )
    line = commands(block("docs/parsing.md", "test:parsing"))[1]  # the line for anyone, with this sample
    return root, run_recipe("wsj_parsing.sh", env, command=substituted(line, {SAMPLE: str(sample)}))


def sample_and_gum_folders(data):
    """(DATA/ptb_sample, DATA/gum_const/const): the sample and GUM's trees beside it, as ../shared/data holds them."""
    return data / "ptb_sample", data / "gum_const" / "const"


def sample_and_gum(data):
    """FIVE_FILES of the sample and GUM_FILES in DATA's sample_and_gum_folders: those folders."""
    sample, gum = sample_and_gum_folders(data)
    copy_sample_files(sample, FIVE_FILES)
    gum.mkdir(parents=True)
    for name in GUM_FILES:
        shutil.copy(SHARED_DATA / "gum_const" / "const" / name, gum)
    return sample, gum


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("wsj_sample_run")
def test_recipe_end_to_end_on_a_few_sample_files(lane):
    root, result = lane["wsj_sample_run"].result()
    work = root / "work"
    log = (work / "checkpoints" / "train.log").read_text()
    assert "'model': {'_name': 'vaswani_transformer_parsing'" in log and "'share_all_embeddings': True" in log
    assert "tree leaves: words\n" in result.stderr
    check_parsed_and_scored(work, result.stderr)
    assert "'beam': 21" in result.stderr and "'gnmt_alpha': 0.3" in result.stderr
    # Pre-trained on every tree until the updates left were those of FINETUNE_EPOCHS epochs of the sample's own trees
    # (--leave-epochs, counted from --max-update), then fine-tuned on them from there: the step (eq. 3) and the
    # training time go on, with no clock.
    pretrain = (work / "pretrain" / "train.log").read_text()
    for text, split in ((pretrain, "train"), (log, "train_treebank")):
        assert f"'train_subset': '{split}'" in text and "'stop_time_hours': 0.0," in text
        assert f"'max_update': {SAMPLE_UPDATES}," in text
    epoch = int(
        re.search(
            rf"--leave-epochs {FINETUNE_EPOCHS}: {FINETUNE_EPOCHS} epochs of train_treebank \((\d+) updates each\)",
            pretrain,
        )[1]
    )
    stop = SAMPLE_UPDATES - FINETUNE_EPOCHS * epoch
    assert (
        0 < stop
        and f"are {FINETUNE_EPOCHS * epoch} of --max-update {SAMPLE_UPDATES}: training stops after update {stop}\n"
        in pretrain
    )
    assert f"Stopping training due to num_updates: {stop} >= max_update: {stop}" in pretrain
    assert f"Loaded checkpoint {work / 'pretrain' / 'checkpoint_last.pt'} (epoch " in log
    pretrained, finetuned = (
        torch.load(path, weights_only=True)
        for path in (work / "pretrain" / "checkpoint_last.pt", work / "checkpoints" / "checkpoint_last.pt")
    )
    steps = [state["optimizer_history"][-1]["num_updates"] for state in (pretrained, finetuned)]
    assert steps == [stop, SAMPLE_UPDATES]
    # The split's epoch as the rule counted it: as long as each of the fine-tuning's own epochs.
    ends = [steps[0]] + [int(n) for n in re.findall(r"\| epoch \d+ \|.*\| num_updates (\d+) \|", log)]
    assert ends == list(range(stop, SAMPLE_UPDATES + 1, epoch))
    times = [state["extra_state"]["previous_training_time"] for state in (pretrained, finetuned)]
    assert 0 < times[0] < times[1]
    # ... and the fine-tuning's time left is counted from the pre-training's, as fairseq counts it.
    (resumed,) = [r for r in read_records(work / "checkpoints" / "progress.jsonl") if r["kind"] == "resumed"]
    assert resumed["training_seconds"] == round(pretrained["extra_state"]["previous_training_time"], 3)
    # The data the model saw: the sample's training files and GUM's trees, for training only.
    wsj, gum = tree_counts(root / "data")
    assert len((work / "data" / "text" / "train.words").read_text().splitlines()) == wsj + gum
    assert len((work / "data" / "text" / "valid.words").read_text().splitlines()) == len(
        read_trees((sample_and_gum_folders(root / "data")[0] / "wsj_0150.mrg").read_text())
    )
    # The sample's defaults: bfloat16 where the CPU has it; unknown words as signatures in what the model reads,
    # the scorer's words untouched.
    assert "'bf16_autocast': 'auto'" in log
    assert "--unknown-words signatures" in result.stderr
    model_words = (work / "data" / "model" / "valid.words").read_text().split()
    words = (work / "data" / "text" / "valid.words").read_text().split()
    assert len(model_words) == len(words) and "<unk-C>" in model_words
    assert not any(word.startswith("<unk") for word in words)


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("wsj_sample_run")
def test_silver_trees_parse_plain_english_with_the_runs_model_and_keep_the_best_scored(lane, tmp_path):
    """prepare.silver_trees on the recipe's run above: plain sentences Penn-Treebank-tokenised, each once, those of
    3..12 words; what the model read (signatures for words it does not know); the best-scored half of fairseq's
    outputs, best first, as trees over their words that prepare.wsj_parsing reads as extra training trees."""
    root, _ = lane["wsj_sample_run"].result()
    kept = ['The Zyxwv company said it would "sell" its shares.', "Profits rose 5% in (late) 1989.", "It can't be."]
    raw = tmp_path / "raw.en"
    raw.write_text("\n".join([kept[0], "Too short", kept[1], kept[0], "word " * 13, kept[2]]) + "\n")
    output = tmp_path / "silver.ptb"
    newstest = "../shared/data/wmt14/newstest2013.en ../shared/data/wmt14/newstest2014.en"
    (documented,) = commands(block("docs/parsing.md", "test:silver-trees"))
    paths = {"work/wsj_parsing": str(root / "work"), newstest: str(raw), "work/silver.ptb": str(output)}
    command = substituted(documented, paths)
    result = run_shell(f"{command} --keep 0.5 --beam 3 --max-words 12 --generate-args '{SHORT_OUTPUTS}'", REPO, 120)
    assert result.returncode == 0, result.stderr
    work = tmp_path / ".silver.ptb.work"
    words = [ptb_tokenize(sentence) for sentence in kept]
    read = (work / "text.words").read_text().splitlines()
    assert read[0].split()[:2] == ["The", "<unk-C>"] and len(read) == 3  # Zyxwv: a word the run does not know
    generated = (work / "generate.txt").read_text()
    scores = {int(i): float(score) for i, score in re.findall(r"^H-(\d+)\t(\S+)\t", generated, re.M)}
    best = sorted(scores, key=lambda i: -scores[i])[:2]  # round(3 * 0.5)
    trees = read_trees(output.read_text())
    assert [tree.words() for tree in trees] == [words[i] for i in best]
    # the trees written, the share kept, the lowest score kept (a log probability: negative)
    (line,) = [line for line in result.stderr.splitlines() if line.startswith(f"{output}: ")]
    assert re.findall(r"-?\d+(?:\.\d+)?", line[len(str(output)) :]) == ["2", "50", f"{scores[best[-1]]:.3f}"], line
    assert write_split([output], tmp_path / "prepared", "train", 1024) == [2]


def tree_counts(data):
    """(the training trees of the sample's files in DATA/ptb_sample, GUM's in DATA/gum_const/const)."""
    sample, gum = sample_and_gum_folders(data)
    wsj = sum(len(read_trees((sample / f"wsj_{n}.mrg").read_text())) for n in FILES["train"])
    return wsj, sum(len(read_trees((gum / name).read_text())) for name in GUM_FILES)


@pytest.mark.shared_data
@NEEDS_CPU_PATH
@pytest.mark.lane("wsj_sample_run")
def test_the_sample_trains_with_gum_beside_it_by_default(lane, tmp_path):
    """SAMPLE_DIR alone (the sample's run above): GUM's trees from the gum_const/const folder beside the sample
    (../shared/data's layout), the sample's trees twice; EXTRA_TRAIN_TREES=none: the sample alone; no GUM there:
    one line, nothing run."""
    root, result = lane["wsj_sample_run"].result()
    wsj, gum_trees = tree_counts(root / "data")
    paths = ", ".join(str(sample_and_gum_folders(root / "data")[1] / name) for name in GUM_FILES)
    assert f"training trees: {wsj} WSJ sample + {gum_trees} extra ({paths})\n" in result.stderr
    model = (root / "work" / "data" / "model" / "train.words").read_text().splitlines()
    assert len(model) == 2 * wsj + gum_trees
    # The fine-tuning's split: the sample's trees once, as the model reads them, binarised with the dictionary.
    own = (root / "work" / "data" / "model" / "train_treebank.words").read_text().splitlines()
    assert own == model[:wsj]
    data_bin = root / "work" / "data" / "data-bin"
    assert binarized_sentences(data_bin / "train_treebank.words-tree.tree.idx") == wsj
    assert sorted(path.name for path in data_bin.glob("dict.*")) == ["dict.tree.txt", "dict.words.txt"]
    sample, gum = sample_and_gum(tmp_path / "data")  # the other runs' own copies (the last one removes GUM's)
    paths = ", ".join(str(gum / name) for name in GUM_FILES)
    settings = dict(SAMPLE_DIR=str(sample), STOP_AFTER="prepare")
    ldc_with_gum, alone = commands(block("docs/parsing.md", "test:parsing-extra-trees"))
    result = run_recipe(
        "wsj_parsing.sh",
        dict(STOP_AFTER="prepare", WORK_DIR=str(tmp_path / "alone")),
        command=substituted(alone, {SAMPLE: str(sample)}),
    )
    assert f"training trees: {wsj} WSJ sample\n" in result.stderr
    assert not list((tmp_path / "alone" / "data").glob("*/train_treebank.*"))  # no fine-tuning without extra trees
    ldc_layout(tmp_path / "wsj")
    ldc_trees = ldc_tree_counts(tmp_path / "wsj")["train"]
    result = run_recipe(
        "wsj_parsing.sh",
        dict(STOP_AFTER="prepare", WORK_DIR=str(tmp_path / "ldc"), CPU="1"),
        command=substituted(
            ldc_with_gum, {"WSJ_DIR=...": f"WSJ_DIR={tmp_path / 'wsj'}", "../shared/data/gum_const/const": str(gum)}
        ),
    )
    assert f"training trees: {ldc_trees} WSJ sections 02-21 + {gum_trees} extra ({paths})\n" in result.stderr
    result = run_recipe(
        "wsj_parsing.sh", dict(settings, WORK_DIR=str(tmp_path / "f"), FINETUNE_MINUTES="30"), check=False
    )
    assert result.returncode == 1 and list((tmp_path / "f").iterdir()) == []
    assert result.stderr.strip() == (
        "wsj_parsing: error: FINETUNE_MINUTES=30 must be 0 or more and less than BUDGET_MINUTES=30"
    )
    for wrong, message in [
        (dict(FINETUNE_EPOCHS="-1"), "FINETUNE_EPOCHS=-1 must be 0 or more"),
        (dict(FINETUNE_EPOCHS="5", FINETUNE_MINUTES="3"), "set FINETUNE_EPOCHS or FINETUNE_MINUTES, not both"),
    ]:
        result = run_recipe("wsj_parsing.sh", dict(settings, WORK_DIR=str(tmp_path / "f"), **wrong), check=False)
        assert result.returncode == 1 and result.stderr.strip() == f"wsj_parsing: error: {message}"
    shutil.rmtree(tmp_path / "data" / "gum_const")
    result = run_recipe("wsj_parsing.sh", dict(settings, WORK_DIR=str(tmp_path / "none")), check=False)
    assert result.returncode == 1 and list((tmp_path / "none").iterdir()) == []  # nothing prepared
    assert result.stderr.strip() == (
        f"wsj_parsing: error: EXTRA_TRAIN_TREES: {gum} does not exist (the sample's "
        "default: GUM's trees beside it, ../shared/data/gum_const/const); set "
        "EXTRA_TRAIN_TREES to GUM's const folder, or to none for the WSJ sample alone"
    )


# The LDC treebank's parsed/mrg/wsj layout: sections 02-21 train, 22 dev, 23 test; files in other sections (00, 24)
# must be left out.
LDC_LAYOUT = {"02": ["0001", "0002"], "21": ["0003"], "22": ["0150"], "23": ["0165"], "00": ["0004"], "24": ["0166"]}


def ldc_layout(wsj):
    """Sample files laid out in `wsj` as LDC_LAYOUT says."""
    for section, numbers in LDC_LAYOUT.items():
        copy_sample_files(wsj / section, numbers)


def ldc_tree_counts(wsj):
    """The trees of each split of an ldc_layout: train 02-21, valid 22, test 23."""
    return {
        split: sum(len(read_trees((wsj / s / f"wsj_{n}.mrg").read_text())) for s in sections for n in LDC_LAYOUT[s])
        for split, sections in {"train": ["02", "21"], "valid": ["22"], "test": ["23"]}.items()
    }


@lane_job
def wsj_ldc_run(tmp_path_factory, lane):
    """The recipe on sample files laid out as the LDC treebank (WSJ_DIR), for 4 updates, with XX leaves; section
    22's F1 while training (DEV_SCORE, on by default there) on 4 of its sentences, at update 4."""
    root = tmp_path_factory.mktemp("wsj-ldc")
    ldc_layout(root / "wsj")
    env = dict(
        WORK_DIR=str(root / "work"),
        CPU="1",
        MAX_UPDATE="4",
        LEAVES="XX",
        REPORT="0",
        DEV_SCORE_SENTENCES="4",
        DEV_SCORE_EVERY="4",
        SAVE_INTERVAL_UPDATES="2",
        AVERAGE_LAST="2",
        TOKENS_PER_STEP="2000",
        MAX_TOKENS_PER_GPU="2000",
        EXTRA_TRAIN_ARGS=" ".join(TINY_MODEL),
        EXTRA_GENERATE_ARGS=SHORT_OUTPUTS,
    )
    ldc = commands(block("docs/parsing.md", "test:parsing"))[0]  # the paper's row, on CPU (CPU=1)
    return root, run_recipe("wsj_parsing.sh", env, command=substituted(ldc, {LDC: str(root / "wsj")}))


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("wsj_ldc_run")
def test_recipe_on_the_ldc_layout_uses_sections_02_21_22_23(lane):
    root, result = lane["wsj_ldc_run"].result()
    work = root / "work"
    log = (work / "checkpoints" / "train.log").read_text()
    assert "'model': {'_name': 'vaswani_transformer_parsing'" in log and "'max_update': 4" in log
    assert "'dropout': 0.1" in log and "'attention_dropout': 0.0" in log
    scored = [line for line in log.splitlines() if "valid on 'valid' subset" in line and "| f1 " in line]
    assert len(scored) == 1 and re.search(r"\| dev_sentences 4 \| f1 [\d.]+ \| .*\| num_updates 4\b", scored[0])
    # XX leaves: a dictionary per side, the tree side without words; the target embedding tied to the output.
    assert "tree leaves: XX\n" in result.stderr and "'share_decoder_input_output_embed': True" in log
    tree_dict = (work / "data" / "data-bin" / "dict.tree.txt").read_text().split()[::2]
    assert "XX" in tree_dict and "(S" in tree_dict and "Vinken" not in tree_dict
    assert "Vinken" in (work / "data" / "data-bin" / "dict.words.txt").read_text().split()[::2]
    counts = ldc_tree_counts(root / "wsj")
    for split, count in counts.items():
        assert len((work / "data" / "text" / f"{split}.words").read_text().splitlines()) == count
    assert f"training trees: {counts['train']} WSJ sections 02-21\n" in result.stderr
    # §6.3's vocabulary: the words outside it one <unk>, no signatures.
    assert "--unknown-words unk" in result.stderr and "'bf16_autocast': 'off'" in log  # float32, as on every CPU
    assert "<unk-" not in (work / "data" / "model" / "train.words").read_text()
    check_parsed_and_scored(work, result.stderr)


# Bad input, in-process and without the shared data.


def score_in_process(tmp_path, outputs, words, tags, gold):
    files = {}
    for name, lines in dict(words=words, tags=tags, gold=gold).items():
        files[name] = tmp_path / name
        files[name].write_text("".join(f"{line}\n" for line in lines))
    write_generate_output(tmp_path / "generate.txt", outputs)
    return parses.main(
        [
            "--generate-output",
            str(tmp_path / "generate.txt"),
            "--words",
            str(files["words"]),
            "--tags",
            str(files["tags"]),
            "--gold",
            str(files["gold"]),
            "--output",
            str(tmp_path / "parsed.trees"),
        ]
    )


def test_score_parses_writes_bracket_words_as_the_treebank_does(tmp_path, capsys):
    score_in_process(
        tmp_path,
        ["(S XX (NP XX )NP XX )S"],
        ["see ( it"],
        ["VB -LRB- PRP"],
        ["(TOP (S (VB see) (NP (-LRB- -LRB-)) (PRP it)))"],
    )
    assert (tmp_path / "parsed.trees").read_text() == "(TOP (S (VB see) (NP (-LRB- -LRB-)) (PRP it)))\n"
    assert "outputs repaired into well-formed trees: 0 of 1\n" in capsys.readouterr().out


@pytest.mark.parametrize(
    "words, tags, message",
    [
        (["a b", ""], ["DT NN", ""], r"words, line 2: an empty sentence; a tree needs a word$"),
        (["a b", "c d e"], ["DT NN", "DT NN"], r"line 2: 3 words in \S+words but 2 tags in \S+tags$"),
    ],
)
def test_score_parses_refuses_sentences_without_a_tree_in_one_line(tmp_path, words, tags, message):
    with pytest.raises(SystemExit) as exit:
        score_in_process(tmp_path, ["XX XX", "XX"], words, tags, ["(TOP (DT a) (NN b))", "(TOP (NN c))"])
    assert re.search(message, str(exit.value.code)) and "\n" not in str(exit.value.code)
    assert not (tmp_path / "parsed.trees").exists()  # refused before anything was scored or written


GUM_LIKE = "(ROOT\n  (S\n    (NP (NNP Byron))\n    (VP (VBD wrote))))\n\n(ROOT (FRAG (NN poems)))\n"


def test_extra_training_trees_a_folder_of_files_and_how_the_log_names_them(tmp_path):
    for name in ("a.ptb", "b.ptb", "c.mrg", "d.ptb", "notes.txt"):
        (tmp_path / name).write_text(GUM_LIKE)
    files = extra_train_files([tmp_path, tmp_path / "notes.txt"])
    assert [p.name for p in files] == ["a.ptb", "b.ptb", "c.mrg", "d.ptb", "notes.txt"]
    assert describe(files[:2]) == f"{tmp_path}/a.ptb, {tmp_path}/b.ptb"  # a few files: named
    assert describe(files[:4]) == f"{tmp_path}/*{{.mrg,.ptb}}, 4 files"  # a whole folder
    (tmp_path / "empty").mkdir()
    with pytest.raises(Exception, match=r"--extra-train \S+empty: no \*\.ptb or \*\.mrg files in that folder"):
        extra_train_files([tmp_path / "empty"])


def test_prepare_leaves_long_training_trees_out_refuses_long_test_trees_and_names_bad_lines(tmp_path):
    (tmp_path / "gum.ptb").write_text(GUM_LIKE)  # trees of 2 and 1 words, 8 and 3 tree tokens
    assert write_split([tmp_path / "gum.ptb"], tmp_path, "train", max_positions=6) == [1]
    assert (tmp_path / "text" / "train.words").read_text() == "poems\n"
    with pytest.raises(
        Exception,
        match=r"gum.ptb: tree 1 has 2 words and 8 tree tokens, more than the model's 6 "
        r"positions \(--max-positions\) with </s>",
    ):
        write_split([tmp_path / "gum.ptb"], tmp_path, "test", max_positions=6)
    # A bracket as a word (unescaped): an error naming the line, not a tree read wrong.
    (tmp_path / "bad.ptb").write_text(GUM_LIKE + "(ROOT (S (NP (-LRB- () (NN x))\n  (VP (VBD y))))\n")
    with pytest.raises(
        Exception,
        match=r"bad.ptb: line 7 \(tree 3\): \( \) holds nothing: a bracket written "
        r"as a word\?",
    ):
        write_split([tmp_path / "bad.ptb"], tmp_path, "train", max_positions=1024)


def test_right_branching_baseline_scores_as_counted_by_hand(tmp_path, capsys):
    """(S a (S b c)) against (S (NP a b) (VP c)): S over a..c matches, S over b..c does not, NP and VP are
    missed: precision 1/2, recall 1/3, F1 40.00; a one-word sentence is (S a), matching its gold S."""
    words, tags = ["a b c", "d"], ["DT NN VB", "UH"]
    gold = ["(TOP (S (NP (DT a) (NN b)) (VP (VB c))))", "(TOP (S (UH d)))"]
    for name, lines in dict(words=words, tags=tags, gold=gold).items():
        (tmp_path / name).write_text("".join(f"{line}\n" for line in lines))
    parses.main(
        [
            "--right-branching",
            "--words",
            str(tmp_path / "words"),
            "--tags",
            str(tmp_path / "tags"),
            "--gold",
            str(tmp_path / "gold"),
            "--output",
            str(tmp_path / "trees"),
        ]
    )
    assert (tmp_path / "trees").read_text().splitlines() == ["(TOP (S (DT a) (S (NN b) (VB c))))", "(TOP (S (UH d)))"]
    printed = capsys.readouterr().out
    # Both sentences: 2 of 3 test brackets match, 2 of 4 gold ones: P 66.67, R 50.00, F1 57.14.
    assert "F1 = 57.14 (labelled bracketing, EVALB COLLINS.prm, 2 of 2 sentences scored)" in printed
    assert "repaired" not in printed


def test_every_output_the_scorer_changes_is_counted_forests_too():
    """A forest is well-formed but no tree: the tree's unlabelled root gathers it, and it counts as changed, as a
    repaired output does; one tree does not count."""
    outputs = ["(S w1 (NP w2 )NP )S", "(S w1 )S (NP w2 )NP", "(S w1 )S w2", "(S w1 (NP w2 )S"]
    trees, changed = parses.parse_trees(outputs, ["a b"] * 4, ["DT NN"] * 4)
    assert changed == 3
    assert trees[0] == "(TOP (S (DT a) (NP (NN b))))"
