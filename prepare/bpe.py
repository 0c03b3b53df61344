"""Joint byte-pair encoding with subword-nmt: learn merges on source + target text together, apply them.

    python -m prepare.bpe learn --merges 32000 -i tok/train.en tok/train.de -o bpe/codes
    python -m prepare.bpe apply --codes bpe/codes -i tok/test.en -o bpe/test.en [--workers N]

Learning counts the words of all inputs together (the vocabulary is written next to the codes as
CODES.vocab, "word count" per line) and learns up to --merges merge operations from it
(subword_nmt.learn_bpe; it stops early when no pair of symbols occurs twice). Applying splits words into
the learned symbols, marking every non-final piece with "@@" ("Haus@@ tür"); fairseq's
`--post-process subword_nmt` (or `sed -r 's/(@@ )|(@@ ?$)//g'`) undoes it.

How merges map to the vocabulary. Before any merge every symbol is a character, in two forms: word-final
("t") and word-internal ("t@@"). Each merge adds one symbol, and a symbol that later merges always absorb
no longer shows up in the output. So the segmented text has at most merges + 2 x characters distinct
tokens, and in practice a few thousand more than merges on WMT data (rare characters from Common Crawl).
The paper's "shared source-target vocabulary of about 37000 tokens" (§5.1) is what 32,000 merges give on
the WMT En-De training data: the vocab.bpe.32000 of Google's wmt16_en_de.sh (same corpora, News Commentary
v11) has 36,546 tokens. `fairseq-preprocess --joined-dictionary` adds 4 special symbols and pads the
dictionary to a multiple of 8; `prepare.wmt14` prints the merges, characters and dictionary size it got.
"""

import io
import multiprocessing
from collections import Counter
from pathlib import Path
from typing import List, Tuple

from subword_nmt.apply_bpe import BPE
from subword_nmt.learn_bpe import learn_bpe

from ._common import (
    ArgumentParser,
    PrepareError,
    Progress,
    available_cores,
    display,
    log,
    map_lines,
    open_read,
    positive_int,
    run_cli,
)


def count_words(path) -> Counter:
    counts = Counter()
    progress = Progress(f"count words {path}")
    with open_read(path) as lines:
        batch = []
        for line in lines:
            batch.append(line)
            if len(batch) == 10_000:
                counts.update(word for text in batch for word in text.split())
                progress.add(len(batch))
                batch = []
        counts.update(word for text in batch for word in text.split())
        progress.add(len(batch))
    progress.done()
    return counts


def learn(inputs: List, codes, merges: int, min_frequency: int = 2, workers: int = 1) -> Tuple[int, int]:
    """Learn joint BPE on all `inputs` (tokenised text) and write `codes` and `codes`.vocab.
    Returns (merges learned, distinct characters of the vocabulary)."""
    codes = Path(codes)
    codes.parent.mkdir(parents=True, exist_ok=True)
    for path in inputs:
        if not Path(path).is_file():
            raise PrepareError(f"{path} does not exist")
    if workers > 1 and len(inputs) > 1:
        with multiprocessing.get_context("fork").Pool(min(workers, len(inputs))) as pool:
            counters = pool.map(count_words, [str(path) for path in inputs])
    else:
        counters = [count_words(path) for path in inputs]
    vocabulary = counters[0]
    for counter in counters[1:]:
        vocabulary.update(counter)
    if not vocabulary:
        raise PrepareError(f"no words in {', '.join(map(str, inputs))}: cannot learn BPE")
    vocab_path = Path(f"{codes}.vocab")
    with open(vocab_path, "w", encoding="utf-8", newline="\n") as out:
        for word, count in sorted(vocabulary.items(), key=lambda item: (-item[1], item[0])):
            out.write(f"{word} {count}\n")
    characters = len({char for word in vocabulary for char in word})
    log(
        f"  learn BPE: {len(vocabulary):,} distinct words, {characters:,} distinct characters, "
        f"{merges:,} merges to learn"
    )
    with (
        open(vocab_path, encoding="utf-8", newline="\n") as vocab_in,
        open(codes, "w", encoding="utf-8", newline="\n") as codes_out,
    ):
        learn_bpe(vocab_in, codes_out, merges, min_frequency=min_frequency, is_dict=True)
    learned = sum(1 for line in open(codes, encoding="utf-8") if not line.startswith("#version"))
    if learned < merges:
        log(f"  learn BPE: only {learned:,} merges possible (no pair left that occurs {min_frequency}+ times)")
    return learned, characters


class Segmenter:
    """Callable: one line of tokenised text -> the same line in BPE pieces."""

    def __init__(self, codes: str, separator: str = "@@"):
        with open(codes, encoding="utf-8") as handle:
            self.bpe = BPE(io.StringIO(handle.read()), separator=separator)

    def __call__(self, line: str) -> str:
        return self.bpe.segment(line).strip()


def apply_file(codes, source, target, workers: int = 1, label=None) -> int:
    if not Path(codes).is_file():
        raise PrepareError(f"{codes} does not exist: learn the codes first (python -m prepare.bpe learn)")
    return map_lines(Segmenter, (str(codes),), source, target, workers, label or f"apply BPE {display(source)}")


def main(argv=None) -> None:
    parser = ArgumentParser(prog="python -m prepare.bpe", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    learn_cmd = commands.add_parser("learn", help="learn joint BPE merges on one or more tokenised files")
    learn_cmd.add_argument("-i", "--input", nargs="+", required=True, help="tokenised files (source and target)")
    learn_cmd.add_argument("-o", "--codes", required=True, help="where to write the merges")
    learn_cmd.add_argument("--merges", type=positive_int, default=32000, help="merge operations (default 32000)")
    learn_cmd.add_argument("--min-frequency", type=positive_int, default=2)
    apply_cmd = commands.add_parser("apply", help="segment a tokenised file with learned merges")
    apply_cmd.add_argument("--codes", required=True)
    apply_cmd.add_argument("-i", "--input", default="-", help="input file (default: stdin)")
    apply_cmd.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    for sub in (learn_cmd, apply_cmd):
        sub.add_argument("--workers", type=positive_int, default=available_cores())
    args = parser.parse_args(argv)
    if args.command == "learn":
        learned, _ = learn(args.input, args.codes, args.merges, args.min_frequency, args.workers)
        log(f"  {learned:,} merges written to {args.codes}")
    else:
        apply_file(args.codes, args.input, args.output, args.workers)


if __name__ == "__main__":
    run_cli(main)
