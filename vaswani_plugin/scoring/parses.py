"""Parser output to trees and labelled F1 (§6.3, Table 4): fairseq-generate's sequences -> EVALB scores.

    python -m vaswani_plugin.scoring.parses --generate-output test.generate.txt --words text/test.words \\
        --gold gold/test.trees --tags gold/test.tags --output test.parsed.trees

Each output is repaired into a tree over its sentence's words (scoring.trees.repair), given the gold
part-of-speech tags (the model predicts XX) and scored with EVALB; --right-branching scores the floor.
Details: docs/reference.md#scoring-parses and docs/parsing.md.
"""

import argparse

from vaswani_plugin.cli import run_command
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.scoring.bleu import read_hypotheses
from vaswani_plugin.scoring.evalb import COLLINS, evaluate, summary_lines
from vaswani_plugin.scoring.trees import Tree, delinearise, is_one_tree, repair


def read_lines(path):
    with open(path, encoding="utf-8") as file:
        return file.read().splitlines()


def check_sentences(words, tags, words_path, tags_path):
    """A one-line error for the first sentence no tree can be made of: no words, or not one tag per word."""
    for line, (sentence, sentence_tags) in enumerate(zip(words, tags), 1):
        count, tag_count = len(sentence.split()), len(sentence_tags.split())
        if not count:
            raise VaswaniConfigError(f"{words_path}, line {line}: an empty sentence; a tree needs a word")
        if count != tag_count:
            raise VaswaniConfigError(f"line {line}: {count} words in {words_path} but {tag_count} tags in {tags_path}")


def parse_trees(outputs, words, tags):
    """(trees as lines, number of outputs that had to change: repaired, or a forest (several constituents or
    words at the top) that the tree's unlabelled root gathers)."""
    trees, repaired = [], 0
    for output, sentence, sentence_tags in zip(outputs, words, tags):
        tokens, sentence, sentence_tags = output.split(), sentence.split(), sentence_tags.split()
        fixed = repair(tokens, len(sentence))
        repaired += fixed != tokens or not is_one_tree(fixed)
        trees.append(str(delinearise(fixed, sentence, sentence_tags)))
    return trees, repaired


def right_branching(words, tags) -> Tree:
    """The baseline tree (S w1 (S w2 ... (S w(n-1) wn))): every constituent from a word to the sentence's end,
    all labelled S (the commonest label of the top constituent)."""
    inner = Tree(tags[-1], [words[-1]])
    for word, tag in zip(reversed(words[:-1]), reversed(tags[:-1])):
        inner = Tree("S", [Tree(tag, [word]), inner])
    return Tree("TOP", [inner if len(words) > 1 else Tree("S", [inner])])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="vaswani_plugin.scoring.parses", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    output = parser.add_mutually_exclusive_group(required=True)
    output.add_argument("--generate-output", help="fairseq-generate's output (H-/D- lines)")
    output.add_argument(
        "--right-branching",
        action="store_true",
        help="score the right-branching baseline instead, (S w1 (S w2 ... (S w(n-1) wn))) over "
        "every sentence: the floor a parser must beat",
    )
    parser.add_argument("--words", required=True, help="the input sentences, one per line (prepare: text/SPLIT.words)")
    parser.add_argument("--tags", required=True, help="their gold POS tags (prepare: gold/SPLIT.tags)")
    parser.add_argument("--gold", required=True, help="gold trees, one per line (prepare: gold/SPLIT.trees)")
    parser.add_argument("--output", help="write the parsed trees here, one per line")
    parser.add_argument("--f1-file", help="also write the F1 alone here, for scripts (the recipe's summary)")
    run_command(parser, parses_command, argv)


def parses_command(args) -> None:
    words, tags, gold = read_lines(args.words), read_lines(args.tags), read_lines(args.gold)
    if args.right_branching:
        if not len(words) == len(tags) == len(gold):
            raise VaswaniConfigError(f"{len(words)} sentences, {len(tags)} tag lines and {len(gold)} gold trees")
        check_sentences(words, tags, args.words, args.tags)
        trees = [str(right_branching(w.split(), t.split())) for w, t in zip(words, tags)]
        return report(gold, trees, args, None)
    outputs, ids = read_hypotheses(args.generate_output)
    if ids is None:
        raise VaswaniConfigError(f"{args.generate_output} holds no fairseq-generate H-/D- lines")
    if ids != list(range(len(words))) or not len(words) == len(tags) == len(gold):
        raise VaswaniConfigError(
            f"{len(outputs)} outputs (ids {ids[:1]}..{ids[-1:]}) for {len(words)} sentences, "
            f"{len(tags)} tag lines and {len(gold)} gold trees: every sentence must be "
            "translated once (fairseq-generate --required-batch-size-multiple 1)"
        )
    check_sentences(words, tags, args.words, args.tags)
    trees, repaired = parse_trees(outputs, words, tags)
    report(gold, trees, args, repaired)


def report(gold, trees, args, repaired) -> None:
    """Write the trees and the F1 (if asked), print the repair count (if any was made) and EVALB's summaries."""
    results, everything, short = evaluate(gold, trees, COLLINS)
    if args.f1_file:
        with open(args.f1_file, "w", encoding="utf-8") as file:
            file.write(f"{everything.f1:.2f}\n")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            file.write("\n".join(trees) + "\n")
    if repaired is not None:
        print(f"outputs repaired into well-formed trees: {repaired} of {len(trees)}")
    for title, summary in (("All", everything), (f"len<={COLLINS.cutoff_length}", short)):
        print("\n".join(line for line in summary_lines(title, summary) if "Tagging" not in line))
    print(
        f"F1 = {everything.f1:.2f} (labelled bracketing, EVALB COLLINS.prm, {everything.valid} of "
        f"{everything.sentences} sentences scored)"
    )


if __name__ == "__main__":
    main()
