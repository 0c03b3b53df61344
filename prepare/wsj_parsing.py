"""English constituency parsing data for §6.3: treebank files to a fairseq data-bin of words -> tree sequences.

    python -m prepare.wsj_parsing --work-dir W --wsj-dir LDC/parsed/mrg/wsj      # the paper's WSJ splits
    python -m prepare.wsj_parsing --work-dir W --sample-dir ../shared/data/ptb_sample   # public sample

--wsj-dir: the LDC Penn Treebank's WSJ folder holding sections 00..24 (wsj_NNNN.mrg in each): sections 02-21
train, 22 valid (where the paper tuned dropout and learning rate), 23 test. --sample-dir: NLTK's public
sample (wsj_0001..0179): files 0001-0149 train (3,253 trees), 0150-0164 valid (210), 0165-0179 test (206).
--extra-train adds tree files, or every .ptb and .mrg file of a folder, to the training data only (the
semi-supervised setting, with --source-vocabulary 32000), e.g. GUM's constituency trees
(../shared/data/gum_const/const: 263 files, 14,597 trees; ROOT is the outer bracket); dev and test stay the
treebank's. Trees longer than --max-positions (the model's, 1024: words + </s>, or tree tokens + </s>) are left
out of training and are an error in dev or test; a malformed file is an error naming its line.

--leaves: the tree sequences' leaves are the words themselves (default: "(S (NP The cat )NP (VP sat )VP . )S";
one dictionary for both sides, so the decoder's input embeds the very word it placed, and the training words seen
once become <unk> so that <unk>, which every unseen dev or test word is, is trained on both sides), or XX (Vinyals
& Kaiser's placeholders: "(S (NP XX XX )NP (VP XX )VP XX )S", one dictionary per side). On the public sample the
word leaves learn far faster (docs/parsing.md).

    1 linearise  W/text/{split}.words (source: the words), W/text/{split}.tree (target: the tree sequence,
                 vaswani_plugin.scoring.trees), W/gold/{split}.trees (cleaned gold trees, one per line, for EVALB) and
                 W/gold/{split}.tags (their part-of-speech tags)
    2 model text W/model/{split}.words, .tree: what the model reads and writes; the text's, or with
                 --unknown-words signatures every word outside the vocabulary (seen twice in the treebank's own
                 training trees) as its shape (prepare.word_signatures), and the treebank's training trees
                 --treebank-copies times before the extra ones; with extra trees also W/model/train_treebank.*,
                 the treebank's training trees once (the sample's fine-tuning: recipes/wsj_parsing.sh)
    3 binarize   W/data-bin: fairseq-preprocess, the --source-vocabulary most frequent words (§6.3: 16K; the rest
                 <unk>: the scorer takes the words back from W/text untouched); word leaves: one joined
                 dictionary; XX leaves: one per side; train_treebank with the same dictionaries

prepare/steps.py decides which steps run (run_steps): one whose stamp (W/.stamps) holds other settings runs again,
and every step after it. The data-bin's path is printed on stdout.
"""

import argparse
import shutil
from pathlib import Path
from typing import Dict, List

from vaswani_plugin.scoring.trees import clean, is_bracket, linearise, read_trees

from . import binarize
from ._common import ArgumentParser, PrepareError, available_cores, log, open_write, positive_int, run_cli
from .steps import Step, run_steps
from .word_signatures import replace_unknown, vocabulary

WSJ_SECTIONS = {"train": range(2, 22), "valid": [22], "test": [23]}
SAMPLE_FILES = {"train": range(1, 150), "valid": range(150, 165), "test": range(165, 180)}
SOURCE, TARGET = "words", "tree"
LEAVES = ("words", "XX")
UNKNOWN_WORDS = ("unk", "signatures")
TREE_FILES = ("*.ptb", "*.mrg")
TREEBANK = "train_treebank"  # the treebank's own training trees, once, beside extra ones: fine-tuning's split


def extra_train_files(paths: List[Path]) -> List[Path]:
    """--extra-train's files: a folder stands for its .ptb and .mrg files."""
    files = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for pattern in TREE_FILES for p in path.glob(pattern))
            if not found:
                raise PrepareError(f"--extra-train {path}: no {' or '.join(TREE_FILES)} files in that folder")
            files += found
        else:
            files.append(path)
    return files


def describe(paths: List[Path]) -> str:
    """Where the extra training trees came from, in a few words: folder/*.ptb, or the files' names."""
    folders = {}
    for path in paths:
        folders.setdefault(path.parent, []).append(path)
    parts = []
    for folder, files in folders.items():
        suffixes = sorted({p.suffix for p in files})
        everything = sorted(p for s in suffixes for p in folder.glob(f"*{s}")) == sorted(files)
        if everything and len(files) > 3:
            pattern = suffixes[0] if len(suffixes) == 1 else "{" + ",".join(suffixes) + "}"
            parts.append(f"{folder}/*{pattern}, {len(files)} files")
        else:
            parts.append(", ".join(str(p) for p in files))
    return "; ".join(parts)


def treebank_files(args) -> Dict[str, List[Path]]:
    """split -> the .mrg files of that split, checked to exist; the extra training files come last in train."""
    if args.wsj_dir:
        files = {
            split: sorted(p for s in sections for p in (args.wsj_dir / f"{s:02d}").glob("wsj_*.mrg"))
            for split, sections in WSJ_SECTIONS.items()
        }
        where = f"--wsj-dir {args.wsj_dir} (sections {{02..21, 22, 23}}/wsj_*.mrg)"
    else:
        files = {
            split: [
                args.sample_dir / f"wsj_{n:04d}.mrg"
                for n in numbers
                if (args.sample_dir / f"wsj_{n:04d}.mrg").is_file()
            ]
            for split, numbers in SAMPLE_FILES.items()
        }
        where = f"--sample-dir {args.sample_dir} (wsj_0001.mrg .. wsj_0179.mrg)"
    for split, paths in files.items():
        if not paths:
            raise PrepareError(f"no {split} trees found in {where}")
    files["train"] = files["train"] + args.extra_files
    return files


def write_split(paths: List[Path], work: Path, split: str, max_positions: int, keep_words: bool = True) -> List[int]:
    """Clean and linearise every tree of `paths` into the split's four files; returns the number of trees of
    each file. A training tree longer than the model's positions is left out; a dev or test one is an error."""
    counts, too_long = [], 0
    with (
        open_write(work / "text" / f"{split}.{SOURCE}") as words,
        open_write(work / "text" / f"{split}.{TARGET}") as sequences,
        open_write(work / "gold" / f"{split}.trees") as gold,
        open_write(work / "gold" / f"{split}.tags") as tags,
    ):
        for path in paths:
            try:
                trees = read_trees(path.read_text(encoding="utf-8"))
            except UnicodeDecodeError as error:
                raise PrepareError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
            except PrepareError as error:  # read_trees's own class (vaswani_plugin.errors), naming the line
                raise PrepareError(f"{path}: {error}") from None
            count = 0
            for number, tree in enumerate(map(clean, trees), 1):
                if tree is None:  # nothing but traces
                    continue
                tokens = linearise(tree, keep_words)
                longest = max(len(tree.words()), len(tokens)) + 1  # with </s>
                if longest > max_positions:
                    if split != "train":
                        raise PrepareError(
                            f"{path}: tree {number} has {len(tree.words())} words and {len(tokens)} "
                            f"tree tokens, more than the model's {max_positions} positions "
                            "(--max-positions) with </s>"
                        )
                    too_long += 1
                    continue
                words.write(" ".join(tree.words()) + "\n")
                sequences.write(" ".join(tokens) + "\n")
                gold.write(f"{tree}\n")
                tags.write(" ".join(tree.tags()) + "\n")
                count += 1
            counts.append(count)
    log(f"  {split}: {sum(counts):,} trees from {len(paths)} files")
    if too_long:
        log(f"  {split}: {too_long:,} trees left out, longer than the model's {max_positions} positions")
    return counts


def write_model_text(
    text: Path,
    out: Path,
    splits: List[str],
    treebank_trees: int,
    most: int,
    word_leaves: bool,
    signatures: bool,
    copies: int,
) -> dict:
    """The model's text (out/{split}.words, .tree) from the linearised one: with `signatures`, every word outside
    the vocabulary (seen twice in the treebank's own training trees, the `most` most frequent) replaced by its
    signature, in the input and, with word leaves, in the tree's leaves; the treebank's training trees `copies`
    times, before the extra ones. With extra trees, also out/train_treebank.*: the treebank's training trees once,
    for the sample's fine-tuning stage (recipes/wsj_parsing.sh, FINETUNE_MINUTES)."""
    for side in (SOURCE, TARGET):
        (out / f"{TREEBANK}.{side}").unlink(missing_ok=True)  # one of an earlier run with extra trees
    known = None
    if signatures:
        with open(text / f"train.{SOURCE}", encoding="utf-8") as handle:
            known = vocabulary((line.split() for _, line in zip(range(treebank_trees), handle)), 2, most)
    replaced = {}
    for split in splits:
        with open(text / f"{split}.{SOURCE}", encoding="utf-8") as handle:
            sentences = handle.read().splitlines()
        with open(text / f"{split}.{TARGET}", encoding="utf-8") as handle:
            sequences = handle.read().splitlines()
        if split == "train":
            sentences = sentences[:treebank_trees] * copies + sentences[treebank_trees:]
            sequences = sequences[:treebank_trees] * copies + sequences[treebank_trees:]
        count = 0
        with open_write(out / f"{split}.{SOURCE}") as source, open_write(out / f"{split}.{TARGET}") as target:
            for line, sequence in zip(sentences, sequences):
                words = line.split()
                tokens = sequence.split()
                if known is not None:
                    shapes = replace_unknown(words, known)
                    count += sum(a != b for a, b in zip(words, shapes))
                    words = shapes
                    if word_leaves:  # the leaves are the words, in order
                        leaves = iter(shapes)
                        tokens = [token if is_bracket(token) else next(leaves) for token in tokens]
                source.write(" ".join(words) + "\n")
                target.write(" ".join(tokens) + "\n")
        replaced[split] = count
        if split == "train" and len(sentences) > treebank_trees * copies:
            for side in (SOURCE, TARGET):
                with (
                    open(out / f"train.{side}", encoding="utf-8") as lines,
                    open_write(out / f"{TREEBANK}.{side}") as own,
                ):
                    own.writelines(line for _, line in zip(range(treebank_trees), lines))
    if known is not None:
        log(
            f"  vocabulary: {len(known):,} words (seen twice in the treebank's training trees); replaced by their "
            "signatures: " + ", ".join(f"{split} {count:,} words" for split, count in replaced.items())
        )
    if copies > 1:
        log(f"  training: the treebank's {treebank_trees:,} trees {copies} times")
    return replaced


def binarize_all(model_text: Path, data_bin: Path, splits: List[str], workers: int, words: bool, most: int) -> dict:
    """The splits binarised; the treebank's own training trees (model_text/train_treebank.*, where extra trees were
    given) too, with the dictionaries just built. Joined (word leaves), a word is counted once on each side: at
    least 4 is seen at least twice in training."""
    threshold = 4 if words else None
    counts = binarize.binarize(
        SOURCE, TARGET, {s: model_text / s for s in splits}, data_bin, workers, joined=words, source_words=most,
        threshold=threshold,
    )  # fmt: skip
    for path in data_bin.glob(f"{TREEBANK}.*"):
        path.unlink()
    if (model_text / f"{TREEBANK}.{SOURCE}").exists():
        apart = data_bin / f".{TREEBANK}"
        dictionaries = {"srcdict": data_bin / f"dict.{SOURCE}.txt"}
        if not words:
            dictionaries["tgtdict"] = data_bin / f"dict.{TARGET}.txt"
        counts[TREEBANK] = binarize.binarize(
            SOURCE, TARGET, {"train": model_text / TREEBANK}, apart, workers, joined=words, **dictionaries
        )["train"]
        for path in apart.glob("train.*"):
            path.replace(data_bin / (TREEBANK + path.name[len("train") :]))
        shutil.rmtree(apart)
    return counts


def prepare(args) -> Path:
    work = args.work_dir.resolve()
    args.extra_files = extra_train_files(args.extra_train)
    files = treebank_files(args)
    extra = len(args.extra_files)

    def linearise_all():
        counts = {
            split: write_split(paths, work, split, args.max_positions, args.leaves == "words")
            for split, paths in files.items()
        }
        result = {split: sum(numbers) for split, numbers in counts.items()}
        result["train_extra"] = sum(counts["train"][len(counts["train"]) - extra :]) if extra else 0
        return result

    sources = {
        "files": {s: [str(p) for p in ps] for s, ps in files.items()},
        "max_positions": args.max_positions,
        "leaves": args.leaves,
    }
    words = args.leaves == "words"
    model_text = work / "model"
    data_bin = work / "data-bin"
    # The model's text and the binarised data follow the linearised text: new sources make them stale.
    params = {
        "sources": sources,
        "source_vocabulary": args.source_vocabulary,
        "unknown_words": args.unknown_words,
        "treebank_copies": args.treebank_copies,
        **({"treebank_split": TREEBANK} if extra else {}),
    }
    results: Dict[str, dict] = {}
    run_steps(
        [
            Step(
                "linearise",
                "the trees as sequences, the gold trees",
                sources,
                [],
                [],
                linearise_all,
                writes=[work / "text", work / "gold"],
            ),
            Step(
                "model_text",
                "the model's text",
                params,
                [],
                [],
                lambda: write_model_text(
                    work / "text",
                    model_text,
                    list(files),
                    results["linearise"]["train"] - results["linearise"]["train_extra"],
                    args.source_vocabulary,
                    words,
                    args.unknown_words == "signatures",
                    args.treebank_copies,
                ),
                writes=[model_text],
            ),
            Step(
                "binarize",
                "fairseq-preprocess",
                params,
                [],
                [],
                lambda: binarize_all(model_text, data_bin, list(files), args.workers, words, args.source_vocabulary),
                writes=[data_bin],
            ),
        ],
        work / ".stamps",
        results,
    )
    linearised = results["linearise"]
    trees = {split: linearised[split] for split in files}
    log("prepare.wsj_parsing: done; trees: " + ", ".join(f"{s} {n:,}" for s, n in trees.items()))
    treebank = "WSJ sections 02-21" if args.wsj_dir else "WSJ sample"
    seen = f"training trees: {trees['train'] - linearised['train_extra']:,} {treebank}"
    if extra:
        seen += f" + {linearised['train_extra']:,} extra ({describe(args.extra_files)})"
    log(seen)
    log(f"  tree leaves: {args.leaves}")
    log(f"  gold trees (EVALB): {work / 'gold'}/{{train,valid,test}}.trees")
    log(f"  data-bin (stdout):  {data_bin}")
    print(data_bin, flush=True)
    return data_bin


def main(argv=None) -> None:
    parser = ArgumentParser(
        prog="python -m prepare.wsj_parsing", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work-dir", required=True, type=Path, help="where the text, gold trees and data-bin go")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--wsj-dir", type=Path, help="the LDC treebank's WSJ folder (sections 00..24)")
    source.add_argument("--sample-dir", type=Path, help="NLTK's WSJ sample (wsj_0001..0179.mrg)")
    parser.add_argument(
        "--extra-train",
        type=Path,
        nargs="*",
        default=[],
        help="more tree files, or folders of .ptb/.mrg files, for training only (the "
        "semi-supervised setting; e.g. ../shared/data/gum_const/const)",
    )
    parser.add_argument(
        "--source-vocabulary",
        type=positive_int,
        default=16000,
        help="source words kept (§6.3: 16000 WSJ only, 32000 semi-supervised)",
    )
    parser.add_argument(
        "--leaves",
        choices=LEAVES,
        default="words",
        help="the tree sequences' leaves: the words (default; one joined dictionary, words seen "
        "once in training become <unk>) or XX (Vinyals & Kaiser's placeholders)",
    )
    parser.add_argument(
        "--unknown-words",
        choices=UNKNOWN_WORDS,
        default="unk",
        help="words outside the vocabulary: <unk> (default, §6.3) or signatures of their shape "
        "(prepare.word_signatures: <unk-C-ing>, ...; the vocabulary is then the words seen "
        "twice in the treebank's own training trees)",
    )
    parser.add_argument(
        "--treebank-copies",
        type=positive_int,
        default=1,
        help="the treebank's training trees this many times in the training data (with "
        "--extra-train: its weight against the extra trees; default 1)",
    )
    parser.add_argument(
        "--max-positions",
        type=positive_int,
        default=1024,
        help="the model's source and target positions (the architectures' 1024): longer trees "
        "are left out of training and an error in dev or test",
    )
    parser.add_argument("--workers", type=positive_int, default=available_cores())
    args = parser.parse_args(argv)
    for option in ("wsj_dir", "sample_dir"):
        folder = getattr(args, option)
        if folder is not None and not folder.is_dir():
            parser.error(f"--{option.replace('_', '-')} {folder} is not a directory")
    for path in args.extra_train:
        if not path.is_file() and not path.is_dir():
            parser.error(f"--extra-train {path} is neither a file nor a folder")
    prepare(args)


if __name__ == "__main__":
    run_cli(main)
