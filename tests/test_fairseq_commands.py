"""Through fairseq's own command-line tools, as a user runs them (subprocesses, other working directories)."""

import json
import re

import doc_blocks
import pytest
from cli_helpers import PAPER_TRAINING, REPO, TEST_SENTENCES, TINY_MODEL, plugin_dir, run
from test_doc_commands import assert_average


def logged(log: str, kind: str):
    """The json records fairseq logs for `train_inner` or `valid`."""
    records = []
    for line in log.splitlines():
        marker = f"| {kind} | "
        if marker in line and line.rstrip().endswith("}"):
            records.append(json.loads(line.split(marker, 1)[1]))
    return records


def eq3(step, d_model=32, warmup=4000):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def test_training_uses_the_registered_names_and_the_noam_rate(reversal_training):
    save_dir, log = reversal_training
    assert "VaswaniTransformerModel" in log and "VaswaniLabelSmoothedCrossEntropy" in log
    assert "--lr 0.25 is not used" in log
    records = logged(log, "train_inner")
    assert [int(r["num_updates"]) for r in records] == [1, 2, 3, 4, 5, 6]
    for record in records:  # fairseq logs the rate set for the next update
        assert float(record["lr"]) == pytest.approx(eq3(int(record["num_updates"]) + 1), rel=1e-4)
    valid = logged(log, "valid")[-1]
    assert float(valid["valid_ppl"]) == pytest.approx(2 ** float(valid["valid_nll_loss"]), rel=0.02)
    assert (save_dir / "checkpoint_last.pt").exists() and (save_dir / "checkpoint_best.pt").exists()


def test_resume_from_checkpoint_last_continues_the_schedule(reversal_data, reversal_training, tmp_path):
    save_dir, _ = reversal_training
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    (resumed_dir / "checkpoint_last.pt").write_bytes((save_dir / "checkpoint_last.pt").read_bytes())
    result = run(
        "train",
        reversal_data / "joined",
        "--user-dir",
        plugin_dir(),
        "--arch",
        "vaswani_transformer",
        "--share-all-embeddings",
        *TINY_MODEL,
        *PAPER_TRAINING,
        "--max-update",
        "9",
        "--save-dir",
        resumed_dir,
        "--log-format",
        "json",
        "--log-interval",
        "1",
        cwd=tmp_path,
    )
    log = result.stdout + result.stderr
    records = logged(log, "train_inner")
    assert [int(r["num_updates"]) for r in records] == [7, 8, 9]
    for record in records:
        assert float(record["lr"]) == pytest.approx(eq3(int(record["num_updates"]) + 1), rel=1e-4)


def test_generate_from_another_directory_with_alignment(reversal_data, reversal_training, tmp_path):
    save_dir, _ = reversal_training
    result = run(
        "generate",
        reversal_data / "joined",
        "--user-dir",
        plugin_dir(),
        "--path",
        save_dir / "checkpoint_best.pt",
        "--beam",
        "4",
        "--batch-size",
        "16",
        "--required-batch-size-multiple",
        "1",
        "--print-alignment",
        "--cpu",
        cwd=tmp_path,
    )
    lines = result.stdout.splitlines()
    hypotheses = [line for line in lines if line.startswith("H-")]
    alignments = {line.split("\t")[0][2:]: line.split("\t")[1] for line in lines if line.startswith("A-")}
    sources = {line.split("\t")[0][2:]: line.split("\t")[1].split() for line in lines if line.startswith("S-")}
    outputs = {line.split("\t")[0][2:]: line.split("\t")[2].split() for line in hypotheses}
    # One positional score per output token and </s> (the H- text can hide special symbols).
    lengths = {line.split("\t")[0][2:]: len(line.split("\t")[1].split()) - 1 for line in lines if line.startswith("P-")}
    assert len(hypotheses) == TEST_SENTENCES
    assert sorted(int(i) for i in outputs) == list(range(TEST_SENTENCES))
    assert len(alignments) == TEST_SENTENCES
    for sid, alignment in alignments.items():
        for pair in alignment.split():
            source_index, target_index = map(int, pair.split("-"))
            assert 0 <= source_index < len(sources[sid]) and 0 <= target_index < lengths[sid]


def test_interactive_from_another_directory(reversal_data, reversal_training, tmp_path):
    save_dir, _ = reversal_training
    sentences = "w1 w2 w3\nw4 w5\nw6 w7 w8 w9\n"
    result = run(
        "interactive",
        reversal_data / "joined",
        "--user-dir",
        plugin_dir(),
        "--path",
        save_dir / "checkpoint_last.pt",
        "--beam",
        "4",
        "--source-lang",
        "src",
        "--target-lang",
        "tgt",
        "--cpu",
        cwd=tmp_path,
        stdin=sentences,
    )
    hypotheses = [line for line in result.stdout.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == 3


def test_fairseq_transformer_checkpoint_loads_and_noam_reads_its_d_model(reversal_data, tmp_path):
    """fairseq's own `transformer` (an argparse-style arch) with noam; its checkpoint loads safely."""
    save_dir = tmp_path / "fairseq_transformer"
    result = run(
        "train",
        reversal_data / "joined",
        "--user-dir",
        plugin_dir(),
        "--arch",
        "transformer",
        "--share-all-embeddings",
        *TINY_MODEL,
        *PAPER_TRAINING,
        "--max-update",
        "2",
        "--save-dir",
        save_dir,
        "--log-format",
        "json",
        "--log-interval",
        "1",
        cwd=tmp_path,
    )
    records = logged(result.stdout + result.stderr, "train_inner")
    assert float(records[0]["lr"]) == pytest.approx(eq3(2, d_model=32), rel=1e-4)
    generated = run(
        "generate",
        reversal_data / "joined",
        "--user-dir",
        plugin_dir(),
        "--path",
        save_dir / "checkpoint_last.pt",
        "--beam",
        "2",
        "--required-batch-size-multiple",
        "1",
        "--cpu",
        cwd=tmp_path,
    )
    assert sum(line.startswith("H-") for line in generated.stdout.splitlines()) == TEST_SENTENCES


def one_line_error(result):
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_shared_embeddings_need_a_joined_dictionary(reversal_data, tmp_path):
    result = run(
        "train",
        reversal_data / "separate",
        "--user-dir",
        plugin_dir(),
        "--arch",
        "vaswani_transformer",
        "--share-all-embeddings",
        *TINY_MODEL,
        *PAPER_TRAINING,
        "--max-update",
        "1",
        "--save-dir",
        tmp_path,
        cwd=tmp_path,
        check=False,
    )
    assert one_line_error(result).startswith("vaswani_plugin: error: --share-all-embeddings needs one dictionary")


def test_indivisible_d_model_is_a_one_line_error(reversal_data, tmp_path):
    result = run(
        "train",
        reversal_data / "joined",
        "--user-dir",
        plugin_dir(),
        "--arch",
        "vaswani_transformer",
        *TINY_MODEL,
        "--encoder-embed-dim",
        "30",
        *PAPER_TRAINING,
        "--max-update",
        "1",
        "--save-dir",
        tmp_path,
        cwd=tmp_path,
        check=False,
    )
    assert one_line_error(result) == (
        "vaswani_plugin: error: --encoder-embed-dim 30 is not divisible by --encoder-attention-heads 4; change "
        "one, or set --attention-key-dim and --attention-value-dim (d_k, d_v) explicitly"
    )


def test_unknown_architecture_option_is_refused(reversal_data, tmp_path):
    result = run(
        "train",
        reversal_data / "joined",
        "--user-dir",
        plugin_dir(),
        "--arch",
        "vaswani_transformer",
        "--encoder-flux-capacitor",
        "3",
        *PAPER_TRAINING,
        "--save-dir",
        tmp_path,
        cwd=tmp_path,
        check=False,
    )
    assert one_line_error(result) == "fairseq-train: error: unrecognized arguments: --encoder-flux-capacitor 3"


def test_checkpoint_without_user_dir_fails_as_the_readme_says(reversal_data, reversal_training, tmp_path):
    save_dir, _ = reversal_training
    result = run(
        "generate",
        reversal_data / "joined",
        "--path",
        save_dir / "checkpoint_best.pt",
        "--cpu",
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode != 0
    # fairseq's own message is lost: its assert message is formatted with the checkpoint's braces.
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line == "KeyError: \"'_name'\""
    assert '"Available models: {}".format(MODEL_DATACLASS_REGISTRY.keys())' in result.stderr
    readme = (REPO / "README.md").read_text()
    assert last_line in readme and '"Available models: {}"' in readme


def test_the_readme_pipeline_stops_averages_and_decodes(reversal_data, reversal_training):
    """README's "own fairseq pipeline" block as written: the training (reversal_training) stops at its
    --max-update and writes the interval checkpoints that the averaging reads; the decoding runs §6.1's search
    with its length limit on every test sentence."""
    save_dir, log = reversal_training
    folder = save_dir.parent
    assert [int(r["num_updates"]) for r in logged(log, "train_inner")][-1] == 6
    interval = sorted(save_dir.glob("checkpoint_*_*.pt"), key=lambda path: int(path.stem.split("_")[-1]))
    assert [int(path.stem.split("_")[-1]) for path in interval] == [2, 4]  # within epochs of 3 updates
    _, average, generate = doc_blocks.commands(doc_blocks.block("README.md", "test:own-pipeline"))
    user_dir = {'"$(python -m vaswani_plugin)"': plugin_dir()}
    # Two interval checkpoints here, where the block averages 5: the user's change, appended (the last counts).
    result = doc_blocks.run_shell(average + " --num-update-checkpoints 2", folder)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_average(folder / "avg.pt", interval)
    command = doc_blocks.substituted(
        generate, {"fairseq-generate DATA": f"fairseq-generate {reversal_data / 'joined'}", **user_dir}
    )
    result = doc_blocks.run_shell(command, folder)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "'search': 'paper'" in result.stderr and "'max_len_a': 1.0, 'max_len_b': 50" in result.stderr
    sources = dict(re.findall(r"^S-(\d+)\t(.*)$", result.stdout, re.M))
    hypotheses = dict(re.findall(r"^H-(\d+)\t\S+\t(.*)$", result.stdout, re.M))
    assert sorted(map(int, hypotheses)) == list(range(TEST_SENTENCES))
    # §6.1's limit, input + 50 tokens before </s>, the input's </s> counted (generation/length.py): this barely
    # trained model runs to it.
    assert max(len(hypotheses[i].split()) - (len(sources[i].split()) + 1) for i in hypotheses) == 50
