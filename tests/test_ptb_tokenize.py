"""prepare.ptb_tokenize against the Penn Treebank's own tokenisation: the guidelines' cases, and the sample's dev and
test sentences (../shared/data/ptb_sample) taken back to plain text by sacremoses' detokeniser and tokenised again.
Broken on purpose, each failed here: clitics left on their word; a full stop split inside the sentence."""

import pytest
from cli_helpers import SHARED_DATA
from sacremoses import MosesDetokenizer

from prepare.ptb_tokenize import BRACKETS, ptb_tokenize
from vaswani_plugin.scoring.trees import clean, read_trees


@pytest.mark.parametrize(
    "text, tokens",
    [
        ("They'll save and invest more.", "They 'll save and invest more ."),  # the treebank's guidelines
        ("I can't.", "I ca n't ."),
        ('"We\'re done," she said.', "`` We 're done , '' she said ."),
        (
            "The U.S. unit earned $5.3 billion (net), up 50%.",
            "The U.S. unit earned $ 5.3 billion -LRB- net -RRB- , up 50 % .",
        ),
        ("Sales of 1,000 cars at 10:30 a.m.; it cannot last", "Sales of 1,000 cars at 10:30 a.m. ; it can not last"),
        ("\u201cThey\u2019re mortgaging items \u2013 fast,\u201d", "`` They 're mortgaging items -- fast , ''"),
    ],
)
def test_the_guidelines_cases(text, tokens):
    assert " ".join(ptb_tokenize(text)) == tokens


@pytest.mark.shared_data
def test_the_samples_sentences_come_back_as_the_treebank_tokenised_them():
    """The 416 dev and test sentences (wsj_0150-0179), detokenised by sacremoses, tokenised again: at least 95%
    exactly as in the treebank (406 here; the rest are the detokeniser's: "U.S.." at an end, Dunkin' split)."""
    detokenizer, words = MosesDetokenizer(lang="en"), []
    plain = {tag: text for text, tag in BRACKETS.items()} | {"``": '"', "''": '"'}
    for number in range(150, 180):
        trees = read_trees((SHARED_DATA / "ptb_sample" / f"wsj_{number:04d}.mrg").read_text())
        words += [tree.words() for tree in map(clean, trees) if tree is not None]
    plain_text = [detokenizer.detokenize([plain.get(word, word) for word in sentence]) for sentence in words]
    same = sum(ptb_tokenize(text) == sentence for text, sentence in zip(plain_text, words))
    assert len(words) == 416 and same >= 0.95 * len(words)
