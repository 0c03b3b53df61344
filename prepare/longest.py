"""The longest example of binarised splits, in tokens (</s> included), as fairseq's batching counts it.

    python -m prepare.longest DATA_BIN [SPLIT ...]      # prints `TOKENS SPLIT`; splits: train valid (default)

fairseq refuses a batch budget (--max-tokens) below it; the recipes check theirs against it before training.
"""

from array import array
from pathlib import Path

from ._common import ArgumentParser, PrepareError, run_cli
from .binarize import binarized_sentences


def longest(index_file) -> int:
    """The largest size in a fairseq mmap index: its int32 sizes follow a 34-byte header (binarized_sentences)."""
    count = binarized_sentences(index_file)
    sizes = array("i")
    with open(index_file, "rb") as handle:
        handle.seek(34)
        sizes.fromfile(handle, count)
    return max(sizes, default=0)


def longest_example(data_bin: Path, splits) -> tuple:
    """(tokens, split) of the longest example (source or target) of SPLITS in DATA_BIN."""
    found = []
    for split in splits:
        files = sorted(data_bin.glob(f"{split}.*-*.*.idx"))
        if not files:
            raise PrepareError(f"{data_bin} holds no binarised {split} split ({split}.SRC-TGT.LANG.idx)")
        found += [(longest(path), split) for path in files]
    return max(found)


def main(argv=None) -> None:
    parser = ArgumentParser(prog="python -m prepare.longest", description=__doc__.split("\n\n")[0])
    parser.add_argument("data_bin", type=Path)
    parser.add_argument("splits", nargs="*", default=["train", "valid"])
    args = parser.parse_args(argv)
    tokens, split = longest_example(args.data_bin, args.splits)
    print(tokens, split)


if __name__ == "__main__":
    run_cli(main)
