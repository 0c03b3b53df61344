"""The bracketing scorer against EVALB itself: EVALB's own sample (sample/sample.gld, sample.tst, sample.prm)
with the results EVALB prints for it (sample/sample.rsl), and hand-made WSJ-style cases under COLLINS.prm."""

import pytest

from vaswani_plugin.scoring.evalb import COLLINS, Parameters, compare, evaluate

GOLD = "(S (A (P this)) (B (Q is) (A (R a) (T test))))"
LONG = " ".join(["(A (P this)) (B (Q is) (A (R a) (T test)))"] * 11)
# EVALB's sample: (test tree, gold tree or GOLD); its gold lines 21-24 differ from GOLD.
SAMPLE = [
    ("(S (A (P this)) (B (Q is) (A (R a) (T test))))", GOLD),
    ("(S (A (P this)) (B (Q is) (C (R a) (T test))))", GOLD),
    ("(S (A (P this)) (B (Q is) (A (R a) (U test))))", GOLD),
    ("(S (C (P this)) (B (Q is) (A (R a) (U test))))", GOLD),
    ("(S (A (P this)) (B (Q is) (R a) (A (T test))))", GOLD),
    ("(S (A (P this) (Q is)) (A (R a) (T test)))", GOLD),
    ("(S (P this) (Q is) (R a) (T test))", GOLD),
    ("(P this) (Q is) (R a) (T test)", GOLD),
    ("(S (A (P this)) (B (Q is) (A (A (R a) (T test)))))", GOLD),
    ("(S (A (P this)) (B (Q is) (A (A (A (A (A (R a) (T test))))))))", GOLD),
    ("", GOLD),
    ("(S (A (P this)) (B (Q was) (A (A (R a) (T test)))))", GOLD),
    ("(S (A (P this)) (B (Q is) (U not) (A (A (R a) (T test)))))", GOLD),
    ("", GOLD),
    ("(TOP (S (A (P this)) (B (Q is) (A (R a) (T test)))))", GOLD),
    ("(S (A (P this)) (NONE *) (B (Q is) (A (R a) (T test))))", GOLD),
    ("(S (A (P this)) (S (NONE abc) (A (NONE *))) (B (Q is) (A (R a) (T test))))", GOLD),
    ("(S (A (P this)) (B (Q is) (A (R a) (TT test))))", GOLD),
    ("(S (A (P This)) (B (Q is) (A (R a) (T test))))", GOLD),
    ("(S (A (P That)) (B (Q is) (A (R a) (T test))))", GOLD),
    ("(S (A (P this)) (B (Q is) (A (R a) (T test))))", "(S (A-SBJ-1 (P this)) (B-WHATEVER (Q is) (A (R a) (T test))))"),
    (f"(S {LONG})", f"(S {LONG})"),
    (
        "(S (A (P this)) (B (Q is) (A (R a) (T test))) (-NONE- *))",
        "(S (A (P this)) (B (Q is) (A (R a) (T test))) (-NONE- *))",
    ),
    ("(S (A (P this)) (B (Q is) (A (R a) (T test))) (: *))", "(S (A (P this)) (B (Q is) (A (R a) (T test))) (: *))"),
]
# sample.rsl: (status, matched, gold, test, crossing, words, correct tags) per sentence.
EXPECTED = [
    (0, 4, 4, 4, 0, 4, 4),
    (0, 3, 4, 4, 0, 4, 4),
    (0, 4, 4, 4, 0, 4, 3),
    (0, 3, 4, 4, 0, 4, 3),
    (0, 3, 4, 4, 0, 4, 4),
    (0, 2, 4, 3, 1, 4, 4),
    (0, 1, 4, 1, 0, 4, 4),
    (0, 0, 4, 0, 0, 4, 4),
    (0, 4, 4, 5, 0, 4, 4),
    (0, 4, 4, 8, 0, 4, 4),
    (2,) + (0,) * 6,
    (1,) + (0,) * 6,
    (1,) + (0,) * 6,
    (2,) + (0,) * 6,
    (0, 4, 4, 4, 0, 4, 4),
    (1,) + (0,) * 6,
    (1,) + (0,) * 6,
    (0, 4, 4, 4, 0, 4, 4),
    (0, 4, 4, 4, 0, 4, 4),
    (1,) + (0,) * 6,
    (0, 4, 4, 4, 0, 4, 4),
    (0, 34, 34, 34, 0, 44, 44),
    (0, 4, 4, 4, 0, 4, 4),
    (0, 4, 4, 4, 0, 4, 4),
]
# sample.prm: COLLINS.prm without "." among the delete labels, with T = TT and This = this.
SAMPLE_PRM = Parameters(
    delete_labels=frozenset({"TOP", "-NONE-", ",", ":", "``", "''"}),
    equivalent_labels=(("T", "TT"),),
    equivalent_words=(("This", "this"),),
)


def test_every_sentence_of_evalbs_sample_as_evalb_scores_it():
    for number, ((test, gold), expected) in enumerate(zip(SAMPLE, EXPECTED), 1):
        r = compare(gold, test, SAMPLE_PRM)
        actual = (r.status,) if r.status else (r.status, r.matched, r.gold, r.test, r.crossing, r.words, r.correct_tags)
        assert actual == expected[: len(actual)], f"sentence {number}"


def test_evalbs_sample_summary():
    results, everything, short = evaluate([g for _, g in SAMPLE], [t for t, _ in SAMPLE], SAMPLE_PRM)
    assert (everything.sentences, everything.errors, everything.skipped, everything.valid) == (24, 5, 2, 17)
    assert round(everything.recall, 2) == 87.76 and round(everything.precision, 2) == 90.53
    assert round(everything.complete_match, 2) == 52.94 and round(everything.average_crossing, 2) == 0.06
    assert round(everything.no_crossing, 2) == 94.12 and everything.two_or_less_crossing == 100.0
    assert round(everything.tagging_accuracy, 2) == 98.15
    assert everything.f1 == pytest.approx(2 * 87.7551 * 90.5263 / (87.7551 + 90.5263), abs=1e-3)
    assert (short.sentences, short.errors, short.skipped, short.valid) == (23, 5, 2, 16)
    assert round(short.recall, 2) == 81.25 and round(short.precision, 2) == 85.25
    assert round(short.complete_match, 2) == 50.00 and round(short.tagging_accuracy, 2) == 96.88


WSJ_GOLD = "(TOP (S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat) (PP-LOC (IN on) (NP (DT the) (NN mat)))) (. .)))"


@pytest.mark.parametrize(
    "test, expected",
    [
        # Gold against gold: 100. Brackets S, NP, VP, PP, NP = 5 (TOP and the "." word are deleted).
        (WSJ_GOLD, (5, 5, 5)),
        # A missing bracket (the PP): precision 100, recall 80.
        ("(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (IN on) (NP (DT the) (NN mat))) (. .)))", (4, 5, 4)),
        # A wrong label (ADJP for the inner NP): 4 of 5 each way.
        ("(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (ADJP (DT the) (NN mat)))) (. .)))", (4, 5, 5)),
        # Only punctuation differs (attached inside the VP): the "." is deleted, so nothing changes.
        ("(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat))) (. .))))", (5, 5, 5)),
    ],
)
def test_hand_made_wsj_cases_under_collins_prm(test, expected):
    r = compare(WSJ_GOLD, test, COLLINS)
    assert r.status == 0 and (r.matched, r.gold, r.test) == expected and r.words == 6


def test_advp_and_prt_are_one_label_under_collins_prm():
    gold = "(TOP (S (NP (PRP He)) (VP (VBD gave) (PRT (RP up)))))"
    test = "(TOP (S (NP (PRP He)) (VP (VBD gave) (ADVP (RP up)))))"
    assert (compare(gold, test).matched, compare(gold, test).gold) == (4, 4)  # S, NP, VP, PRT = ADVP
    assert compare(gold, test.replace("ADVP", "ADJP")).matched == 3
