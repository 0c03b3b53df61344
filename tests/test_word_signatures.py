"""prepare.word_signatures: unknown words as signatures of their shape, and the vocabulary that decides which are
unknown; prepare.wsj_parsing's model text built from them (the signatures in the input and in the tree's leaves,
the treebank's trees repeated before the extra ones)."""

import pytest
from cli_helpers import SHARED_DATA

from prepare.word_signatures import replace_unknown, signature, vocabulary
from prepare.wsj_parsing import write_model_text, write_split
from vaswani_plugin.scoring.trees import is_bracket


@pytest.mark.parametrize(
    "word, expected",
    [
        ("brokering", "<unk-ing>"),  # lower case, an ending
        ("Fed-led", "<unk-C-h-ed>"),  # capitalised, a hyphen, an ending
        ("NASDAQ", "<unk-A>"),  # all capitals
        ("I", "<unk-C>"),  # one capital letter is not "all capitals"
        ("1.5", "<unk-N>"),  # a number: digits and number punctuation only
        ("2,000", "<unk-N>"),
        ("1980s", "<unk-n>"),  # digits among letters: no ending read
        ("mid-1980s", "<unk-n-h>"),
        ("happiness", "<unk-ness>"),  # the longest ending wins over -s
        ("bus", "<unk>"),  # too short for its ending: at least three letters must remain
        ("%", "<unk>"),
    ],
)
def test_signature_keeps_the_shape_of_the_word(word, expected):
    assert signature(word) == expected


def test_vocabulary_keeps_words_seen_twice_the_most_frequent_first():
    sentences = [["a", "b", "c", "a"], ["b", "a", "d"], ["d", "e"]]
    assert vocabulary(sentences) == {"a", "b", "d"}
    assert vocabulary(sentences, most=1) == {"a"}
    assert replace_unknown(["a", "Zebras", "d"], {"a"}) == ["a", "<unk-C-s>", "<unk>"]


@pytest.mark.shared_data
def test_model_text_replaces_unknown_words_on_both_sides_and_repeats_the_treebank(tmp_path):
    text = tmp_path / "text"
    sample = SHARED_DATA / "ptb_sample"
    treebank = write_split(
        [sample / "wsj_0001.mrg", sample / "wsj_0002.mrg", sample / "wsj_0003.mrg"], tmp_path, "train", 1024
    )
    extra = write_split([SHARED_DATA / "gum_const" / "const" / "GUM_bio_byron.ptb"], tmp_path, "extra", 1024)
    write_split([sample / "wsj_0150.mrg"], tmp_path, "valid", 1024)
    for suffix in ("words", "tree"):  # the treebank's training trees, then the extra ones, as prepare writes them
        (text / f"train.{suffix}").write_text(
            (text / f"train.{suffix}").read_text() + (text / f"extra.{suffix}").read_text()
        )
    trees = sum(treebank)
    result = write_model_text(text, tmp_path / "model", ["train", "valid"], trees, 16000, True, True, 2)
    words = {
        split: [line.split() for line in (text / f"{split}.words").read_text().splitlines()]
        for split in ("train", "valid")
    }
    known = {
        word
        for word in set(sum(words["train"][:trees], []))
        if sum(line.count(word) for line in words["train"][:trees]) >= 2
    }
    model = {
        split: [line.split() for line in (tmp_path / "model" / f"{split}.words").read_text().splitlines()]
        for split in ("train", "valid")
    }
    sequences = [line.split() for line in (tmp_path / "model" / "train.tree").read_text().splitlines()]
    expected = [[w if w in known else signature(w) for w in line] for line in words["train"]]
    assert model["train"] == expected[:trees] * 2 + expected[trees:]
    assert [[t for t in s if not is_bracket(t)] for s in sequences] == model["train"]
    assert model["valid"] == [[w if w in known else signature(w) for w in line] for line in words["valid"]]
    assert result["valid"] == sum(w not in known for line in words["valid"] for w in line) > 0
    assert len(model["train"]) == 2 * trees + sum(extra)
