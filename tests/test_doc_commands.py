"""The command blocks of docs/reference.md, run as written in a user's folder (its data-bin/, checkpoints/, avg.pt
...), on the reversal model: averaging (three ways), fairseq-generate (two ways), scoring, converting, pictures.
Each runs in this process (tests/doc_blocks.run_here), as its console script or `python -m` would."""

import re
import shutil

import pytest
import torch
from cli_helpers import TEST_SENTENCES, plugin_dir
from doc_blocks import block, commands, run_here, substituted
from test_quickstart import quickstart_run  # noqa: F401  (registers the second lane's job read here)

REFERENCE = "docs/reference.md"


@pytest.fixture
def folder(reversal_data, reversal_training, tmp_path):
    """A user's folder: the data (data-bin/ and DATA), the training's checkpoints/, the test references."""
    save_dir, _ = reversal_training
    (tmp_path / "data-bin").symlink_to(reversal_data / "joined")
    shutil.copytree(save_dir, tmp_path / "checkpoints")
    shutil.copy(reversal_data / "test.tgt", tmp_path / "newstest2014.de")
    return tmp_path


def run(command, folder):
    status, out, err = run_here(command, folder, plugin=plugin_dir())
    assert status == 0, err[-3000:]
    return out


def mean_of(paths):
    states = [torch.load(path, weights_only=True)["model"] for path in paths]
    return {name: sum(state[name].double() for state in states) / len(states) for name in states[0]}


def assert_average(path, inputs):
    """The parameters the mean of the inputs' (in float64, cast back), the rest the newest input's."""
    expected, averaged = mean_of(inputs), torch.load(path, weights_only=True)
    assert averaged["model"].keys() == expected.keys()
    for name, value in averaged["model"].items():
        assert torch.equal(value, expected[name].to(value.dtype)), name
    newest = torch.load(inputs[-1], weights_only=True)
    assert averaged["optimizer_history"] == newest["optimizer_history"] and "last_optimizer_state" not in averaged


def pictures_in(folder):
    return sorted(path.name for path in folder.iterdir() if path.suffix == ".png")


def test_averaging_three_ways_then_generating_and_scoring(folder):
    by_updates, by_epochs, by_files = commands(block(REFERENCE, "test:averaging"))
    checkpoints = folder / "checkpoints"
    interval = sorted(checkpoints.glob("checkpoint_*_*.pt"), key=lambda path: int(path.stem.split("_")[-1]))
    epochs = sorted(checkpoints.glob("checkpoint[0-9]*.pt"), key=lambda path: int(path.stem[len("checkpoint") :]))
    assert len(interval) == 2 and len(epochs) == 2  # 6 updates, 3 an epoch, one saved every 2 within an epoch
    # The blocks average 5; this training wrote 2 of each kind: the user's change, appended (the last counts).
    out = run(by_updates + " --num-update-checkpoints 2", folder)
    assert out.splitlines()[1:] == [f"  {path.relative_to(folder)}" for path in interval]
    assert_average(folder / "avg.pt", interval)
    shutil.move(folder / "avg.pt", folder / "by_updates.pt")
    out = run(by_epochs + " --num-epoch-checkpoints 2", folder)
    assert out.splitlines()[1:] == [f"  {path.relative_to(folder)}" for path in epochs]
    assert_average(folder / "avg.pt", epochs)
    for name, path in zip(("a.pt", "b.pt", "c.pt"), [*interval, epochs[0]]):
        shutil.copy(path, folder / name)
    run(by_files, folder)
    assert_average(folder / "avg.pt", [folder / "a.pt", folder / "b.pt", folder / "c.pt"])

    paper, fairseq_rule = (
        substituted(block(REFERENCE, marker), {"fairseq-generate DATA": "fairseq-generate data-bin"})
        for marker in ("test:generate-paper", "test:generate-fairseq")
    )
    for name, command in (("paper", paper), ("fairseq", fairseq_rule)):
        run(command.strip(), folder)
        found = re.findall(r"^H-(\d+)\t\S+\t.*$", (folder / "gen.out").read_text(), re.M)
        assert sorted(map(int, found)) == list(range(TEST_SENTENCES)), name  # every sentence (#5036)
    (score,) = commands(block(REFERENCE, "test:scoring"))
    out = run(score, folder)  # the last gen.out
    assert re.search(r"^BLEU \(tokenised, compound-split\) = \d+\.\d+ ", out, re.M)
    assert re.search(r"^sacreBLEU = \d+\.\d+ .*nrefs:1", out, re.M)
    assert f"sentences = {TEST_SENTENCES}" in out


def test_attention_pictures_of_a_checkpoint(folder):
    first, _ = commands(block(REFERENCE, "test:attention-pictures"))
    run(first, folder)
    pictures = pictures_in(folder / "pictures")
    for kind in ("encoder_self", "decoder_self", "encoder_decoder"):  # every head of every layer, each kind
        assert any(name.startswith(f"{kind}_layer") and name.endswith("_all_heads.png") for name in pictures), kind


@pytest.fixture
def quickstart_folder(lane, tmp_path):
    """The README's layout (work/quickstart/{checkpoints,data}) and docs/reference.md's (avg.pt, data-bin/, bpe/),
    over the second lane's tiny quickstart run, in a folder of their own."""
    root, _ = lane["quickstart_run"].result()
    checkpoints = root / "seed1" / "vaswani_transformer" / "checkpoints"
    (tmp_path / "work" / "quickstart").mkdir(parents=True)
    (tmp_path / "work" / "quickstart" / "checkpoints").symlink_to(checkpoints)
    (tmp_path / "work" / "quickstart" / "data").symlink_to(root / "data")
    (tmp_path / "avg.pt").symlink_to(checkpoints / "checkpoint_average.pt")
    (tmp_path / "data-bin").symlink_to(root / "data" / "data-bin")
    (tmp_path / "bpe").symlink_to(root / "data" / "bpe")
    return tmp_path


@pytest.mark.e2e
@pytest.mark.lane("quickstart_run")
def test_pictures_and_ctranslate2_of_the_quickstart(quickstart_folder):
    """README's attention pictures and CTranslate2 blocks as written, on the quickstart's files; then
    docs/reference.md's second pictures command and its CTranslate2 block (avg.pt, data-bin/, bpe/)."""
    folder = quickstart_folder
    out = run(block("README.md", "test:pictures"), folder)
    assert len(pictures_in(folder / "pictures")) > 3, out  # every head of every layer and kind
    export, translate = commands(block("README.md", "test:ctranslate2"))
    run(export, folder)
    assert (folder / "work" / "quickstart" / "ct2-int8" / "model.bin").exists()
    (translation,) = run(translate, folder).splitlines()
    assert translation.strip()

    _, second = commands(block(REFERENCE, "test:attention-pictures"))
    # --layer 6 --head 3 are the base model's; the tests' quickstart has 1 encoder layer: the user's change.
    shutil.rmtree(folder / "pictures")
    run(substituted(second, {"--layer 6": "--layer 1"}), folder)
    # The chosen layer of each kind of attention: its head 3, and all its heads.
    assert pictures_in(folder / "pictures") == sorted(
        f"{kind}_layer1_{which}.png"
        for which in ("head3", "all_heads")
        for kind in ("encoder_self", "decoder_self", "encoder_decoder")
    )
    (folder / "input.txt").write_text("A man is sleeping.\nTwo dogs play in the snow.\n")
    export, translate = commands(block(REFERENCE, "test:ctranslate2-reference"))
    run(export, folder)
    run(translate, folder)
    lines = (folder / "output.txt").read_text().splitlines()
    assert len(lines) == 2 and all(line.strip() for line in lines)


@pytest.mark.e2e
@pytest.mark.lane("quickstart_run")
def test_huggingface_export_and_transformers_alone(quickstart_folder, capsys, monkeypatch):
    """docs/reference.md's export and its Python block (transformers alone) as written, in the same folder."""
    folder = quickstart_folder
    (export,) = commands(block(REFERENCE, "test:huggingface-export"))
    assert "exported " in run(export, folder)
    capsys.readouterr()
    monkeypatch.chdir(folder)
    exec(compile(block(REFERENCE, "test:huggingface-python"), "docs/reference.md", "exec"), {"__name__": "__main__"})
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"\['[^']*', '[^']*'\]", printed), printed
