"""Labelled bracketing scores as EVALB computes them (Sekine & Collins), for §6.3's F1 on parsing.

    python -m vaswani_plugin.scoring.evalb --gold gold.trees --test parsed.trees [--per-sentence]

One bracketed tree per line in each file; EVALB's COLLINS.prm (the WSJ standard: punctuation deleted, ADVP =
PRT, function tags cut), all sentences and those of at most 40 words. Checked against EVALB's own sample
results (tests/test_evalb.py); details: docs/parsing.md.
"""

import argparse
from dataclasses import dataclass, field
from typing import FrozenSet, List, Sequence, Tuple

from vaswani_plugin.cli import run_command
from vaswani_plugin.errors import VaswaniConfigError


@dataclass(frozen=True)
class Parameters:
    """EVALB's parameter file (COLLINS.prm by default)."""

    delete_labels: FrozenSet[str] = frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."})
    delete_labels_for_length: FrozenSet[str] = frozenset({"-NONE-"})
    equivalent_labels: Tuple[Tuple[str, str], ...] = (("ADVP", "PRT"),)
    equivalent_words: Tuple[Tuple[str, str], ...] = ()
    labeled: bool = True
    cutoff_length: int = 40

    def same_label(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.equivalent_labels or (b, a) in self.equivalent_labels

    def same_word(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.equivalent_words or (b, a) in self.equivalent_words


COLLINS = Parameters()


@dataclass
class Sentence:
    """One tree as EVALB reads it: the kept (tag, word) terminals and the (label, start, end) brackets."""

    terminals: List[Tuple[str, str]] = field(default_factory=list)
    brackets: List[Tuple[str, int, int]] = field(default_factory=list)
    length: int = 0  # words, less those tagged with a delete-for-length label


def tokens(line: str) -> List[str]:
    return line.replace("(", " ( ").replace(")", " ) ").split()


def read_sentence(line: str, parameters: Parameters = COLLINS) -> Sentence:
    """EVALB's read_line: "(LABEL word)" is a terminal, "(LABEL ...)" a bracket over the words inside it."""
    sentence, stack, items, i = Sentence(), [], tokens(line), 0
    while i < len(items):
        item = items[i]
        if item == "(":
            label = items[i + 1] if i + 1 < len(items) and items[i + 1] not in "()" else ""
            i += 1 if label == "" else 2
            if i + 1 < len(items) and items[i] not in "()" and items[i + 1] == ")":  # a terminal
                word = items[i]
                if label not in parameters.delete_labels_for_length:
                    sentence.length += 1
                if label not in parameters.delete_labels:
                    sentence.terminals.append((label, word))
                i += 2
                continue
            stack.append((label, len(sentence.terminals)))
        elif item == ")":
            if not stack:
                raise VaswaniConfigError(f"unbalanced brackets (too many closing) in: {line.strip()}")
            label, start = stack.pop()
            sentence.brackets.append((label, start, len(sentence.terminals)))
            i += 1
        else:
            raise VaswaniConfigError(f"a word outside a (TAG word) bracket: {item!r} in: {line.strip()}")
    if stack:
        raise VaswaniConfigError(f"unbalanced brackets (too many opening) in: {line.strip()}")
    return sentence


def scored_brackets(sentence: Sentence, parameters: Parameters) -> List[Tuple[str, int, int]]:
    """Brackets that count: not empty, label cut at "-"/"=", not a delete label."""
    kept = []
    for label, start, end in sentence.brackets:
        if start == end:
            continue
        for mark in "-=":
            label = label.split(mark, 1)[0]
        if any(parameters.same_label(label, deleted) for deleted in parameters.delete_labels):
            continue
        kept.append((label, start, end))
    return kept


@dataclass
class Result:
    """One sentence: status 0 = scored, 1 = error (words differ), 2 = skipped (empty test)."""

    status: int
    length: int
    matched: int = 0
    gold: int = 0
    test: int = 0
    crossing: int = 0
    words: int = 0
    correct_tags: int = 0


def compare(gold_line: str, test_line: str, parameters: Parameters = COLLINS) -> Result:
    gold, test = read_sentence(gold_line, parameters), read_sentence(test_line, parameters)
    if not test.terminals:
        return Result(2, gold.length)
    if len(gold.terminals) != len(test.terminals) or not all(
        parameters.same_word(g, t) for (_, g), (_, t) in zip(gold.terminals, test.terminals)
    ):
        return Result(1, gold.length)
    gold_brackets, test_brackets = scored_brackets(gold, parameters), scored_brackets(test, parameters)
    used = [False] * len(test_brackets)
    matched = 0
    for label, start, end in gold_brackets:
        for j, (test_label, test_start, test_end) in enumerate(test_brackets):
            if (
                not used[j]
                and (start, end) == (test_start, test_end)
                and (not parameters.labeled or parameters.same_label(label, test_label))
            ):
                used[j] = True
                matched += 1
                break
    crossing = sum(any(s < ts < e < te or ts < s < te < e for _, s, e in gold_brackets) for _, ts, te in test_brackets)
    correct_tags = sum(parameters.same_label(g, t) for (g, _), (t, _) in zip(gold.terminals, test.terminals))
    return Result(
        0, gold.length, matched, len(gold_brackets), len(test_brackets), crossing, len(gold.terminals), correct_tags
    )


@dataclass
class Summary:
    sentences: int
    errors: int
    skipped: int
    valid: int
    recall: float
    precision: float
    f1: float
    complete_match: float
    average_crossing: float
    no_crossing: float
    two_or_less_crossing: float
    tagging_accuracy: float


def percent(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0


def bracketing(matched: float, gold: float, test: float) -> Tuple[float, float, float]:
    """(recall, precision, F1) in percent from bracket counts summed over the scored sentences."""
    recall, precision = percent(matched, gold), percent(matched, test)
    return recall, precision, 2 * recall * precision / (recall + precision) if recall + precision else 0.0


def summarise(results: Sequence[Result]) -> Summary:
    valid = [r for r in results if r.status == 0]
    recall, precision, f1 = bracketing(*(sum(getattr(r, key) for r in valid) for key in ("matched", "gold", "test")))
    return Summary(
        sentences=len(results),
        errors=sum(r.status == 1 for r in results),
        skipped=sum(r.status == 2 for r in results),
        valid=len(valid),
        recall=recall,
        precision=precision,
        f1=f1,
        complete_match=percent(sum(r.matched == r.gold == r.test for r in valid), len(valid)),
        average_crossing=sum(r.crossing for r in valid) / len(valid) if valid else 0.0,
        no_crossing=percent(sum(r.crossing == 0 for r in valid), len(valid)),
        two_or_less_crossing=percent(sum(r.crossing <= 2 for r in valid), len(valid)),
        tagging_accuracy=percent(sum(r.correct_tags for r in valid), sum(r.words for r in valid)),
    )


def evaluate(gold_lines: Sequence[str], test_lines: Sequence[str], parameters: Parameters = COLLINS):
    """(per-sentence results, summary of all, summary of sentences of at most cutoff_length words)."""
    if len(gold_lines) != len(test_lines):
        raise VaswaniConfigError(f"{len(gold_lines)} gold trees but {len(test_lines)} test trees")
    results = [compare(g, t, parameters) for g, t in zip(gold_lines, test_lines)]
    short = [r for r in results if r.length <= parameters.cutoff_length]
    return results, summarise(results), summarise(short)


def summary_lines(title: str, summary: Summary) -> List[str]:
    return [
        f"-- {title} --",
        f"Number of sentence        = {summary.sentences:6d}",
        f"Number of Error sentence  = {summary.errors:6d}",
        f"Number of Skip  sentence  = {summary.skipped:6d}",
        f"Number of Valid sentence  = {summary.valid:6d}",
        f"Bracketing Recall         = {summary.recall:6.2f}",
        f"Bracketing Precision      = {summary.precision:6.2f}",
        f"Bracketing FMeasure       = {summary.f1:6.2f}",
        f"Complete match            = {summary.complete_match:6.2f}",
        f"Average crossing          = {summary.average_crossing:6.2f}",
        f"No crossing               = {summary.no_crossing:6.2f}",
        f"2 or less crossing        = {summary.two_or_less_crossing:6.2f}",
        f"Tagging accuracy          = {summary.tagging_accuracy:6.2f}",
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="vaswani_plugin.scoring.evalb", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gold", required=True, help="gold trees, one per line")
    parser.add_argument("--test", required=True, help="parser output trees, one per line, in the same order")
    parser.add_argument("--per-sentence", action="store_true", help="print EVALB's per-sentence table first")
    run_command(parser, evalb_command, argv)


def evalb_command(args) -> None:
    with open(args.gold, encoding="utf-8") as gold, open(args.test, encoding="utf-8") as test:
        results, everything, short = evaluate(gold.read().splitlines(), test.read().splitlines())
    if args.per_sentence:
        print("  Sent.  Len. Stat. Recal  Prec.  Matched  gold test  Cross  Words  Correct tags")
        for i, r in enumerate(results, 1):
            print(
                f"{i:6d} {r.length:5d} {r.status:4d} {percent(r.matched, r.gold):6.2f} "
                f"{percent(r.matched, r.test):6.2f} {r.matched:7d} {r.gold:6d} {r.test:4d} {r.crossing:6d} "
                f"{r.words:6d} {r.correct_tags:6d}"
            )
    print("\n".join(summary_lines("All", everything) + [""] + summary_lines(f"len<={COLLINS.cutoff_length}", short)))


if __name__ == "__main__":
    main()
