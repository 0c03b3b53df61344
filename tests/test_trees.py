"""Trees for §6.3: reading and cleaning Penn Treebank brackets, the sequence form and its inverse, repair."""

import pytest
from cli_helpers import SHARED_DATA

from vaswani_plugin.scoring.trees import (
    PLACEHOLDER,
    Tree,
    clean,
    delinearise,
    is_bracket,
    is_one_tree,
    linearise,
    read_trees,
    repair,
)

PTB_SAMPLE = SHARED_DATA / "ptb_sample"


@pytest.mark.shared_data
def test_round_trip_is_exact_on_every_tree_of_the_wsj_sample():
    files = sorted(PTB_SAMPLE.glob("wsj_*.mrg"))
    assert len(files) == 179
    count = 0
    for path in files:
        for tree in read_trees(path.read_text(encoding="utf-8")):
            tree = clean(tree)
            for keep_words in (True, False):
                tokens = linearise(tree, keep_words)
                leaves = [token for token in tokens if not is_bracket(token)]
                assert leaves == (tree.words() if keep_words else [PLACEHOLDER] * len(tree.words()))
                assert str(delinearise(tokens, tree.words(), tree.tags())) == str(tree)
            count += 1
    assert count > 3500


def test_reading_and_cleaning_as_the_standard_does():
    text = """( (S (NP-SBJ-1 (NNP Mr.) (NNP Vinken) ) (VP (VBZ is) (S (NP-SBJ (-NONE- *-1) ) (ADVP|PRT (RB up) ))
               (NP=2 (-LRB- -LRB-) (CD 3) (-RRB- -RRB-) ) ) (. .) ))
               (ROOT (FRAG (NN Quinoa)))"""
    wsj, gum = read_trees(text)
    assert str(clean(wsj)) == (
        "(TOP (S (NP (NNP Mr.) (NNP Vinken)) (VP (VBZ is) (S (ADVP (RB up))) "
        "(NP (-LRB- -LRB-) (CD 3) (-RRB- -RRB-))) (. .)))"
    )
    assert str(gum) == "(TOP (FRAG (NN Quinoa)))"
    assert linearise(clean(wsj), keep_words=False) == [
        "(S",
        "(NP",
        "XX",
        "XX",
        ")NP",
        "(VP",
        "XX",
        "(S",
        "(ADVP",
        "XX",
        ")ADVP",
        ")S",
        "(NP",
        "XX",
        "XX",
        "XX",
        ")NP",
        ")VP",
        "XX",
        ")S",
    ]
    assert (
        " ".join(linearise(clean(wsj)))
        == "(S (NP Mr. Vinken )NP (VP is (S (ADVP up )ADVP )S (NP -LRB- 3 -RRB- )NP )VP . )S"
    )
    with pytest.raises(ValueError, match="unbalanced"):
        read_trees("( (S (NN a) )")


@pytest.mark.parametrize(
    "text, message",
    [
        ("(S (NN a))\n\n( (S (NN b)\n", r"^line 3 \(tree 2\): the tree starting here is never closed"),
        ("(S (NN a)))", r"^line 1 \(tree 2\): a closing bracket with nothing open"),
        ("(S (NN a))\nb", r"^line 2 \(tree 2\): a word outside any bracket: 'b'"),
        # A bracket as a word, unescaped: read as structure, it leaves a bracket empty.
        ("(S (NN a)\n  (-LRB- ())", r"^line 2 \(tree 1\): \( \) holds nothing: a bracket written as a word\?"),
        ("(S (NN a) (-RRB- )) )", r"^line 1 \(tree 1\): \(-RRB- \) holds nothing"),
    ],
)
def test_malformed_treebank_text_is_an_error_naming_the_line_and_tree(text, message):
    with pytest.raises(ValueError, match=message):
        read_trees(text)


def test_a_bracket_as_a_word_is_written_as_the_treebank_writes_it():
    tree = delinearise("(S XX (NP XX XX )NP )S".split(), ["see", "(", ")"], ["VB", "-LRB-", "-RRB-"])
    assert str(tree) == "(TOP (S (VB see) (NP (-LRB- -LRB-) (-RRB- -RRB-))))"
    assert read_trees(str(tree))[0].words() == ["see", "-LRB-", "-RRB-"]


WORDS = ["The", "cat", "sat", "."]
GOLD = "(S (NP XX XX )NP (VP XX )VP XX )S".split()


@pytest.mark.parametrize(
    "output, expected",
    [
        ("(S (NP XX XX )NP (VP XX )VP XX )S", "(S (NP XX XX )NP (VP XX )VP XX )S"),  # well-formed: unchanged
        # A closing bracket too many ends S early; the rest hangs from TOP; the last )S has nothing to close.
        ("(S (NP XX XX )NP )NP (VP XX )VP XX )S", "(S (NP XX XX )NP )S (VP XX )VP XX"),
        ("(S (NP XX XX (VP XX XX", "(S (NP XX XX (VP XX XX )VP )NP )S"),  # missing closes
        ("(S (NP XX XX )NP (VP XX XX XX )VP XX )S", "(S (NP XX XX )NP (VP XX XX )VP )S"),  # too many words
        ("(S (NP XX )NP )S", "(S (NP XX )NP )S XX XX XX"),  # too few words: added where the output ended
        ("(S (NP XX XX )NP (ADJP )ADJP (VP XX )VP XX )S", "(S (NP XX XX )NP (VP XX )VP XX )S"),  # empty constituent
        # Any token but a bracket token is a leaf, whatever it is; the 5th leaf and what it leaves empty go.
        ("(S <unk> (NP XX XX )NP ) (VP XX )VP XX )S", "(S <unk> (NP XX XX )NP ) )S"),
        # Word leaves: the same rules; the words come back from the input, in order.
        ("(S (NP The cat )NP (VP sat sat )VP . )S", "(S (NP The cat )NP (VP sat sat )VP )S"),
        ("(S (NP The )NP (VP cat )VP", "(S (NP The )NP (VP cat )VP XX XX )S"),
    ],
)
def test_repair_gives_a_tree_over_exactly_the_words(output, expected):
    repaired = repair(output.split(), len(WORDS))
    assert repaired == expected.split()
    tree = delinearise(repaired, WORDS)  # well-formed, over the right words
    assert tree.words() == WORDS and tree.label == "TOP"


def test_repair_closes_the_innermost_constituent_with_the_missing_words():
    assert repair("(S (NP XX".split(), 3) == "(S (NP XX XX XX )NP )S".split()
    assert repair([], 2) == ["XX", "XX"]
    assert str(delinearise(repair([], 2), ["a", "b"], ["DT", "NN"])) == "(TOP (DT a) (NN b))"


def test_delinearise_refuses_malformed_sequences():
    for tokens in ("(S XX XX XX )S".split(), "(S XX XX XX XX XX )S".split(), "(S XX XX XX XX".split()):
        with pytest.raises(ValueError):
            delinearise(tokens, WORDS)
    assert isinstance(delinearise(GOLD, WORDS), Tree)


@pytest.mark.parametrize(
    "tokens, expected",
    [
        ("(S w1 (NP w2 )NP )S", True),
        ("(S w1 )S (NP w2 )NP", False),  # two constituents at the top
        ("(S w1 )S w2", False),  # a word after the root closed
        ("w1 (S w2 )S", False),  # a word before it
        ("w1 w2", False),
        ("", False),
    ],
)
def test_one_tree_is_one_constituent_over_everything(tokens, expected):
    assert is_one_tree(tokens.split()) is expected
