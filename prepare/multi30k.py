"""Multi30k task 1 English-German, from its public release to a fairseq data-bin: the quickstart's data.

    python -m prepare.multi30k --work-dir W [--raw-dir R] [--bpe-merges 10000] [--train-lines N]

The stages and layout of `python -m prepare.wmt14` (stamps, resumption, W/prepare.json, the data-bin on
stdout), with Multi30k in place of the WMT14 archives:

    1 download   W/raw/{train,val,test_2016_flickr}.{en,de}.gz   from github.com/multi30k/dataset
                                               (data/task1/raw; read in place from R with --raw-dir R)
    2 extract    W/text/{train,valid,test}.{en,de}   train 29,000, valid = val 1,014, test = test2016 1,000
    3-7          tokenize, learn joint BPE, apply, clean, binarize: as for WMT14 En-De, but cleaning keeps
                 pairs of any length ratio (Multi30k is clean; the ratio 1.5 would drop 2.6% of it)
"""

import argparse
import gzip
from pathlib import Path
from typing import Dict, Optional

from . import download, wmt14
from ._common import (
    LINE_BREAKING,
    ArgumentParser,
    PrepareError,
    available_cores,
    log,
    open_write,
    positive_int,
    run_cli,
)

SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}  # fairseq split -> Multi30k name


def extract_multi30k(raw: Dict[str, Path], out_dir: Path, train_lines: Optional[int] = None) -> Dict[str, int]:
    """Unzip every split into out_dir/{train,valid,test}.{en,de} (of train only the first `train_lines` pairs, if
    given); returns split -> sentence pairs."""
    counts = {}
    for split, name in SPLITS.items():
        lines = {}
        for lang in ("en", "de"):
            source = raw[f"{name}.{lang}.gz"]
            with (
                gzip.open(source, "rt", encoding="utf-8", newline="\n") as text,
                open_write(Path(out_dir) / f"{split}.{lang}") as out,
            ):
                lines[lang] = 0
                for line in text:
                    if split == "train" and lines[lang] == train_lines:
                        break
                    out.write(line.rstrip("\n").translate(LINE_BREAKING) + "\n")
                    lines[lang] += 1
        if lines["en"] != lines["de"]:
            raise PrepareError(f"{name}.en.gz has {lines['en']:,} lines but {name}.de.gz {lines['de']:,}")
        log(f"  {split} ({name}): {lines['en']:,} sentence pairs")
        counts[split] = lines["en"]
    return counts


class Pipeline(wmt14.Pipeline):
    """prepare.wmt14's En-De pipeline with Multi30k's download and extraction."""

    name = "prepare.multi30k"
    files_key = "multi30k"
    # Multi30k's pairs are clean, short captions: the WMT ratio 1.5 would drop 766 of them (2.6%), mostly
    # short English captions with longer German ones. Only lengths are checked (1..250 subwords).
    max_ratio = 9.0

    def stages(self):
        stages = wmt14.Pipeline.stages(self)
        fetch, extract = stages[0], stages[1]
        fetch.title = "Multi30k task 1, raw" + (f" (offline, from {self.raw_dir})" if self.raw_dir else "")
        fetch.params = {"dataset": "multi30k"}
        extract.title = "plain text: train, valid (val), test (test_2016_flickr)"
        extract.params = {"dataset": "multi30k", "train_lines": self.args.train_lines}
        return stages

    def extract(self) -> dict:
        raw = {name: download.locate(name, self.raw_dir, self.raw) for name in self.raw_names}
        return extract_multi30k(raw, self.text, self.args.train_lines)


def parse_args(argv=None):
    parser = ArgumentParser(
        prog="python -m prepare.multi30k", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work-dir", required=True, type=Path, help="where every stage writes (see the layout)")
    parser.add_argument(
        "--raw-dir",
        type=Path,
        default=None,
        help="offline: read SPLIT.{en,de}.gz from here, download nothing (default: $RAW_DIR)",
    )
    parser.add_argument(
        "--bpe-merges", type=positive_int, default=10000, help="joint BPE merge operations (default 10000)"
    )
    parser.add_argument(
        "--train-lines", type=positive_int, default=None, help="keep only the first N training pairs (quick trials)"
    )
    parser.add_argument(
        "--workers", type=positive_int, default=available_cores(), help="processes (default: the available cores)"
    )
    args = parser.parse_args(argv)
    args.pair = "en-de"
    return wmt14.check_dirs(parser, args)


def main(argv=None) -> None:
    Pipeline(parse_args(argv)).run()


if __name__ == "__main__":
    run_cli(main)
