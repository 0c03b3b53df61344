"""Self-training data: unlabelled English parsed by a trained parsing run, the best-scored trees kept, as a tree file
for the parsing recipe's EXTRA_TRAIN_TREES (§6.3's semi-supervised setting; McClosky et al. 2006).

    python -m prepare.silver_trees --run work/wsj_parsing --text ../shared/data/wmt14/newstest2013.en \\
        --output work/silver.ptb
    EXTRA_TRAIN_TREES="../shared/data/gum_const/const work/silver.ptb" SAMPLE_DIR=... bash recipes/wsj_parsing.sh

--run is a recipes/wsj_parsing.sh WORK_DIR (its data/data-bin dictionary and checkpoints/checkpoint_average.pt, or
--checkpoint). Each line of --text is a sentence, Penn-Treebank-tokenised (prepare.ptb_tokenize; --tokenized: it is
already), those of --min-words to --max-words words kept once each; words outside the run's vocabulary become their
signatures (prepare.word_signatures) where the run's dictionary has them, <unk> otherwise, as the run's own text.
They are decoded as the recipe decodes (§6.3: constrained, beam 21, α 0.3) and the --keep share with the best scores
(the search's, fairseq-generate's H lines) is written, one tree a line, the real words as leaves, XX as tags. The
working files (fairseq-generate's output among them) stay in the folder .NAME.work beside the output.
docs/parsing.md ("Self-training") says what such trees gave.
"""

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from vaswani_plugin import paper as PAPER  # §6.3's beam, α and length limit
from vaswani_plugin.scoring.trees import delinearise, is_one_tree, repair

from . import binarize
from ._common import ArgumentParser, PrepareError, log, open_read, open_write, run_cli
from .ptb_tokenize import ptb_tokenize
from .word_signatures import PREFIX, replace_unknown

HYPOTHESIS = re.compile(r"H-(\d+)\t(\S+)\t(.*)")
BATCHES = re.compile(r"progress_bar.*?(\d+) / (\d+)")


def sentences(paths, tokenized: bool, shortest: int, longest: int) -> list:
    """The --text files' sentences as token lists, of shortest..longest words, each once, in order."""
    seen, kept = set(), []
    for path in paths:
        with open_read(path) as lines:
            for line in lines:
                words = line.split() if tokenized else ptb_tokenize(line)
                key = " ".join(words)
                if shortest <= len(words) <= longest and key not in seen:
                    seen.add(key)
                    kept.append(words)
    return kept


def decode(data_bin: Path, checkpoint: Path, output: Path, beam: int, device: str, count: int, more: list) -> None:
    """fairseq-generate under the tree constraint, as recipes/wsj_parsing.sh decodes; its batches as progress."""
    command = [sys.executable, "-m", "fairseq_cli.generate", str(data_bin), "--user-dir",
               str(Path(__file__).resolve().parents[1] / "vaswani_plugin"), "--task", "vaswani_translation",
               "--path", str(checkpoint), "--gen-subset", "test", "--search", "paper",
               *PAPER.arguments("parsing-decoding"), "--beam", str(beam), "--parse-constrained",  # the last --beam wins
               "--batch-size", "32", "--required-batch-size-multiple", "1", "--log-interval", "10",
               *(["--cpu"] if device == "cpu" else []), *more]  # fmt: skip
    log(f"parsing {count:,} sentences with {checkpoint} (beam {beam}, {device}) ...")
    started, last, tail = time.monotonic(), 0.0, []
    with open_write(output) as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.PIPE, text=True)
        for line in process.stderr:
            tail = (tail + [line.rstrip()])[-5:]
            found = BATCHES.search(line)
            if found and time.monotonic() - last > 30:
                last = time.monotonic()
                log(f"  batch {found[1]} of {found[2]}, {last - started:.0f} s")
        if process.wait():
            raise PrepareError(f"fairseq-generate failed: {tail[-1] if tail else '?'}")
    seconds = time.monotonic() - started
    log(f"  parsed in {seconds:.0f} s ({count / seconds:.1f} sentences a second)")


def best_trees(generated: Path, words: list, keep: float) -> tuple:
    """(the trees of the best-scored `keep` share, best first, as lines; the lowest score kept; outputs that were
    not one tree over their words, left out)."""
    scored, broken = [], 0
    with open_read(generated) as lines:
        for match in filter(None, map(HYPOTHESIS.fullmatch, (line.rstrip("\n") for line in lines))):
            sentence, tokens = words[int(match[1])], match[3].split()
            if repair(tokens, len(sentence)) != tokens or not is_one_tree(tokens):
                broken += 1
                continue
            scored.append((float(match[2]), str(delinearise(tokens, sentence))))
    scored.sort(key=lambda pair: -pair[0])
    kept = scored[: round(len(scored) * keep)]
    return [tree for _, tree in kept], kept[-1][0] if kept else None, broken


def main(argv=None) -> None:
    parser = ArgumentParser(
        prog="python -m prepare.silver_trees", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", required=True, type=Path, help="a recipes/wsj_parsing.sh WORK_DIR")
    parser.add_argument("--checkpoint", type=Path, help="default: RUN/checkpoints/checkpoint_average.pt")
    parser.add_argument("--text", required=True, type=Path, nargs="+", help="English, one sentence a line")
    parser.add_argument("--tokenized", action="store_true", help="the text is Penn Treebank tokens already")
    parser.add_argument("--output", required=True, type=Path, help="the trees, one a line (EXTRA_TRAIN_TREES)")
    parser.add_argument("--keep", type=float, default=0.8, help="the best-scored share kept (default 0.8)")
    parser.add_argument("--min-words", type=int, default=3, help="shorter sentences are left out (default 3)")
    parser.add_argument("--max-words", type=int, default=40, help="longer sentences are left out (default 40)")
    parser.add_argument("--beam", type=int, default=PAPER.PARSING_BEAM, help="default: §6.3's 21")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to decode (default: cpu)")
    parser.add_argument("--generate-args", default="", help="more fairseq-generate arguments (EXTRA_GENERATE_ARGS)")
    args = parser.parse_args(argv)
    if not 0 < args.keep <= 1:
        parser.error(f"--keep {args.keep}: a share, more than 0 and at most 1")
    if not 1 <= args.min_words <= args.max_words or args.beam < 1:
        parser.error("--min-words, --max-words and --beam must be positive, --min-words at most --max-words")
    data_bin = args.run / "data" / "data-bin"
    checkpoint = args.checkpoint or args.run / "checkpoints" / "checkpoint_average.pt"
    for path in (data_bin / "dict.words.txt", data_bin / "dict.tree.txt", checkpoint, *args.text):
        if not path.is_file():
            raise PrepareError(f"{path} does not exist (--run: a recipes/wsj_parsing.sh WORK_DIR after its training)")
    words = sentences(args.text, args.tokenized, args.min_words, args.max_words)
    if not words:
        files = " ".join(map(str, args.text))
        raise PrepareError(f"no sentence of {args.min_words} to {args.max_words} words in {files}")
    log(f"{len(words):,} sentences of {args.min_words} to {args.max_words} words, each once")
    with open_read(data_bin / "dict.words.txt") as lines:
        dictionary = {line.split(" ", 1)[0] for line in lines}
    if any(symbol.startswith(PREFIX) for symbol in dictionary):  # the run's model reads signatures for unknown words
        model_text = [" ".join(replace_unknown(sentence, dictionary)) for sentence in words]
    else:  # fairseq's binarisation makes them <unk>
        model_text = [" ".join(sentence) for sentence in words]
    work = args.output.parent / f".{args.output.name}.work"
    for side in ("words", "tree"):  # the target is not read: the source stands in for it
        with open_write(work / f"text.{side}") as out:
            out.writelines(line + "\n" for line in model_text)
    dictionaries = {"srcdict": data_bin / "dict.words.txt", "tgtdict": data_bin / "dict.tree.txt"}  # joined: 2 copies
    binarize.binarize("words", "tree", {"test": work / "text"}, work / "data-bin", 1, joined=False, **dictionaries)
    generated = work / "generate.txt"
    decode(work / "data-bin", checkpoint, generated, args.beam, args.device, len(words), args.generate_args.split())
    trees, lowest, broken = best_trees(generated, words, args.keep)
    if not trees:
        raise PrepareError(f"--keep {args.keep} of {len(words) - broken} parsed sentences keeps no tree")
    with open_write(args.output) as out:
        out.writelines(tree + "\n" for tree in trees)
    log(f"{args.output}: {len(trees):,} trees, the best-scored {args.keep:.0%} (score at least {lowest:.3f})"
        + (f"; {broken} outputs not one tree over their words left out" if broken else ""))  # fmt: skip


if __name__ == "__main__":
    run_cli(main)
