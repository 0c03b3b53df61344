"""WMT14 En-De or En-Fr, from the upstream archives to a fairseq data-bin, in resumable stages.

    python -m prepare.wmt14 --pair en-de --work-dir W [--raw-dir R] [--bpe-merges 32000] [--train-lines N]
    python -m prepare.wmt14 --pair en-fr --work-dir W [--raw-dir R] [--spm-vocab 32000] [--train-lines N]

Stages (each also a module of its own, see `python -m prepare`), and where they write (L = de or fr):

    1 download   W/raw/                       upstream archives (read in place from R with --raw-dir R)
    2 extract    W/text/{train,valid,test}.{en,L}   plain text: train = the corpora concatenated,
                                               valid = newstest2013, test = newstest2014 (full, from SGM)
    3 tokenize   W/tok/{train,valid,test}.{en,L}    Moses-normalised and -tokenised, "@-@" compound splits
    4 learn      W/bpe/codes                  en-de: joint BPE merges (subword-nmt)
                 W/spm/spm.model, dict.txt    en-fr: sentencepiece model and its fairseq dictionary
    5 apply      W/{bpe|spm}/{train.unclean,valid,test}.{en,L}   every split in subwords
    6 clean      W/{bpe|spm}/train.{en,L}     training pairs of 1..250 subwords, length ratio <= 1.5
    7 binarize   W/data-bin/                  fairseq-preprocess --joined-dictionary: train, valid, test

A finished stage writes W/.stamps/STAGE.json (its settings and results) after its outputs. A re-run skips
every stage whose stamp has the same settings; a changed setting (say --bpe-merges) or a deleted stamp
re-runs that stage and all later ones. Intermediate files may be deleted once later stages are done: a
stage runs again only when a stage that must run needs its output. One run at a time per work dir (a
lock; recipes sharing W wait for each other). W/prepare.json lists the paths a recipe needs; the last
line printed (the only one on stdout) is the data-bin directory.
"""

import argparse
import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Dict, List

from vaswani_plugin import durable

from . import binarize, bpe, clean, download, extract, spm, tokenize
from ._common import ArgumentParser, available_cores, log, positive_int, run_cli
from .steps import Step, run_steps, stamp_path

LANGS = extract.LANGS
# Rough disk needs of a full run (downloads excluded), for a warning only.
_DISK_GB = {"en-de": 10, "en-fr": 80}


@contextlib.contextmanager
def _exclusive(lock_path: Path):
    """One preparation at a time per work dir (recipes may share one); others wait."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no locking
        yield
        return
    with open(lock_path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            log(f"prepare: another run is using {lock_path.parent}; waiting for it to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


class Pipeline:
    name = "prepare.wmt14"  # for the log; prepare.multi30k reuses this pipeline with its own files
    files_key = None  # the download.FILES entry to fetch (default: the pair)
    max_ratio = 1.5  # clean-corpus-n's length-ratio limit for training pairs

    def __init__(self, args):
        self.args = args
        self.pair = args.pair
        self.src, self.tgt = LANGS[args.pair]
        self.work = args.work_dir.resolve()
        self.raw_dir = args.raw_dir.resolve() if args.raw_dir else None
        self.raw = self.work / "raw"
        self.text = self.work / "text"
        self.tok = self.work / "tok"
        self.sub = self.work / ("bpe" if self.pair == "en-de" else "spm")
        self.data_bin = self.work / "data-bin"
        self.stamps = self.work / ".stamps"
        self.results: Dict[str, dict] = {}
        self.dataset = self.files_key or self.pair
        self.raw_names = download.FILES[self.dataset]

    # -- paths ------------------------------------------------------------------------------------------
    def files(self, folder: Path, splits=("train", "valid", "test"), train_name="train") -> List[Path]:
        return [
            folder / f"{train_name if split == 'train' else split}.{lang}"
            for split in splits
            for lang in (self.src, self.tgt)
        ]

    def raw_paths(self) -> Dict[str, Path]:
        return {name: (self.raw_dir or self.raw) / name for name in self.raw_names}

    @property
    def codes(self) -> Path:
        return self.sub / "codes"

    @property
    def spm_model(self) -> Path:
        return self.sub / "spm.model"

    @property
    def spm_dict(self) -> Path:
        return self.sub / "dict.txt"

    # -- stages -----------------------------------------------------------------------------------------
    def stages(self) -> List[Step]:
        a = self.args
        tok_train = [self.tok / f"train.{lang}" for lang in (self.src, self.tgt)]
        if self.pair == "en-de":
            learn = Step(
                "learn",
                f"learn joint BPE, {a.bpe_merges:,} merges (subword-nmt)",
                {"merges": a.bpe_merges, "min_frequency": 2},
                tok_train,
                [self.codes],
                self.learn_bpe,
            )
        else:
            learn = Step(
                "learn",
                f"train sentencepiece, {a.spm_vocab:,} pieces ({a.spm_model_type})",
                {
                    "vocab_size": a.spm_vocab,
                    "model_type": a.spm_model_type,
                    "sample": a.spm_sample,
                    "character_coverage": 0.9999,
                },
                tok_train,
                [self.spm_model, self.spm_dict],
                self.learn_spm,
            )
        segmented = self.files(self.sub, train_name="train.unclean")
        cleaned = self.files(self.sub, ("train",))
        return [
            Step(
                "download",
                "the upstream archives" + (f" (offline, from {self.raw_dir})" if self.raw_dir else ""),
                {"pair": self.pair},
                [],
                list(self.raw_paths().values()),
                self.download,
            ),
            Step(
                "extract",
                "plain text: train (corpora), valid (newstest2013), test (newstest2014 SGM)",
                {"pair": self.pair, "train_lines": a.train_lines},
                list(self.raw_paths().values()),
                self.files(self.text),
                self.extract,
            ),
            Step(
                "tokenize",
                "Moses normalisation and tokenisation (sacremoses, -a, no escaping)",
                {"aggressive_dash_splits": True, "escape": False},
                self.files(self.text),
                self.files(self.tok),
                self.tokenize,
            ),
            learn,
            Step(
                "apply",
                "segment every split into subwords",
                {},
                self.files(self.tok) + learn.outputs,
                segmented,
                self.apply,
            ),
            Step(
                "clean",
                f"drop training pairs outside 1..250 tokens or with length ratio > {self.max_ratio}",
                {"min": 1, "max": 250, "ratio": self.max_ratio},
                segmented[:2],
                cleaned,
                self.clean,
            ),
            Step(
                "binarize",
                "fairseq-preprocess --joined-dictionary",
                {},
                cleaned + segmented[2:] + (learn.outputs[1:] if self.pair == "en-fr" else []),
                [
                    self.data_bin / f"{split}.{self.src}-{self.tgt}.{lang}.{ext}"
                    for split in ("train", "valid", "test")
                    for lang in (self.src, self.tgt)
                    for ext in ("idx", "bin")
                ]
                + [self.data_bin / f"dict.{lang}.txt" for lang in (self.src, self.tgt)],
                self.binarize,
            ),
        ]

    def download(self) -> dict:
        if self.raw_dir is None:
            needed = _DISK_GB.get(self.dataset, 1)
            self.work.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(self.work).free / 1e9
            if free < needed:
                log(
                    f"  note: {self.work} has {free:.0f} GB free; preparing {self.pair} needs about {needed} GB "
                    "besides the downloads"
                )
        paths = download.obtain(self.dataset, self.raw, self.raw_dir)
        return {"files": {name: path.stat().st_size for name, path in paths.items()}}

    def extract(self) -> dict:
        raw = {name: download.locate(name, self.raw_dir, self.raw) for name in self.raw_names}
        return extract.extract_wmt14(self.pair, raw, self.text, self.args.train_lines)

    def tokenize(self) -> dict:
        for source, target in zip(self.files(self.text), self.files(self.tok)):
            lang = source.suffix[1:]
            tokenize.tokenize_file(source, target, lang, self.args.workers, label=f"tokenize {source.name}")
        return {}

    def learn_bpe(self) -> dict:
        inputs = [self.tok / f"train.{lang}" for lang in (self.src, self.tgt)]
        learned, characters = bpe.learn(inputs, self.codes, self.args.bpe_merges, 2, self.args.workers)
        return {"merges": learned, "characters": characters}

    def learn_spm(self) -> dict:
        a = self.args
        inputs = [self.tok / f"train.{lang}" for lang in (self.src, self.tgt)]
        spm.train(inputs, self.sub / "spm", a.spm_vocab, a.spm_model_type, a.spm_sample, 0.9999, a.workers)
        entries = spm.write_fairseq_dict(self.spm_model, self.spm_dict)
        return {"pieces": spm.load(self.spm_model).get_piece_size(), "dict_entries": entries}

    def apply(self) -> dict:
        for source, target in zip(self.files(self.tok), self.files(self.sub, train_name="train.unclean")):
            label = f"{'BPE' if self.pair == 'en-de' else 'sentencepiece'} {source.name}"
            if self.pair == "en-de":
                bpe.apply_file(self.codes, source, target, self.args.workers, label=label)
            else:
                spm.encode_file(self.spm_model, source, target, self.args.workers, label=label)
        return {}

    def clean(self) -> dict:
        s, t = self.src, self.tgt
        kept, total = clean.clean_corpus(
            self.sub / f"train.unclean.{s}",
            self.sub / f"train.unclean.{t}",
            self.sub / f"train.{s}",
            self.sub / f"train.{t}",
            1,
            250,
            self.max_ratio,
        )
        return {"kept": kept, "total": total}

    def binarize(self) -> dict:
        prefixes = {split: self.sub / split for split in ("train", "valid", "test")}
        srcdict = self.spm_dict if self.pair == "en-fr" else None
        counts = binarize.binarize(self.src, self.tgt, prefixes, self.data_bin, self.args.workers, srcdict)
        dictionary = [
            line.split(" ")[0]
            for line in (self.data_bin / f"dict.{self.src}.txt").read_text(encoding="utf-8").splitlines()
        ]
        padding = sum(1 for word in dictionary if word.startswith("madeupword"))
        return {
            "sentences": counts,
            "dict_tokens": len(dictionary) - padding,
            "dict_padding": padding,
            "dict_size": len(dictionary) + 4,
        }

    # -- driver -----------------------------------------------------------------------------------------
    def stamp(self, stage: Step) -> Path:
        return stamp_path(self.stamps, stage)

    def run(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        with _exclusive(self.work / ".lock"):
            self._run()

    def _run(self) -> None:
        log(f"{self.name} {self.pair}: work dir {self.work}")
        run_steps(self.stages(), self.stamps, self.results)
        self.report()

    def report(self) -> None:
        binarized = self.results.get("binarize", {})
        counts = binarized.get("sentences", {})
        paths = {
            "pair": self.pair,
            "source_lang": self.src,
            "target_lang": self.tgt,
            "data_bin": str(self.data_bin),
            "test_source": str(self.text / f"test.{self.src}"),
            "test_reference": str(self.text / f"test.{self.tgt}"),
            "test_reference_tokenized": str(self.tok / f"test.{self.tgt}"),
            "valid_reference": str(self.text / f"valid.{self.tgt}"),
            "valid_reference_tokenized": str(self.tok / f"valid.{self.tgt}"),
            "detokenizer_lang": self.tgt,
            "subword": "bpe" if self.pair == "en-de" else "sentencepiece",
            "subword_model": str(self.codes if self.pair == "en-de" else self.spm_model),
            "post_process": "subword_nmt" if self.pair == "en-de" else "sentencepiece",
            "sentences": counts,
            "dict_size": binarized.get("dict_size"),
        }
        durable.write_text(self.work / "prepare.json", json.dumps(paths, indent=1) + "\n")
        learn = self.results.get("learn", {})
        if self.pair == "en-de":
            vocab = (
                f"BPE: {learn.get('merges', 0):,} merges, {learn.get('characters', 0):,} characters -> "
                f"{binarized.get('dict_tokens', 0):,} distinct tokens in train "
                f"(at most merges + 2 x characters)"
            )
        else:
            vocab = (
                f"sentencepiece: {learn.get('pieces', 0):,} pieces "
                f"({learn.get('dict_entries', 0):,} without <unk> <s> </s>)"
            )
        cleaned = self.results.get("clean", {})
        log(f"{self.name} {self.pair}: done")
        log(
            f"  {vocab}; fairseq dictionary: {binarized.get('dict_size', 0):,} symbols "
            f"(4 special, {binarized.get('dict_padding', 0)} padding)"
        )
        log(
            f"  sentence pairs: train {counts.get('train', 0)} (cleaning kept {cleaned.get('kept', 0)} of "
            f"{cleaned.get('total', 0)}), valid {counts.get('valid', 0)}, test {counts.get('test', 0)}"
        )
        model = "BPE codes" if self.pair == "en-de" else "sentencepiece model"
        for label, path in (
            ("test source", paths["test_source"]),
            ("test reference", paths["test_reference"]),
            ("tokenised test reference", paths["test_reference_tokenized"]),
            (model, paths["subword_model"]),
            ("paths (JSON)", self.work / "prepare.json"),
        ):
            log(f"  {label + ':':27} {path}")
        log(f"  {'detokeniser:':27} sacremoses MosesDetokenizer('{self.tgt}')")
        log(f"  {'data-bin (stdout):':27} {self.data_bin}")
        print(self.data_bin, flush=True)


def parse_args(argv=None):
    parser = ArgumentParser(
        prog="python -m prepare.wmt14", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pair", required=True, choices=sorted(LANGS), help="en-de (BPE) or en-fr (sentencepiece)")
    parser.add_argument("--work-dir", required=True, type=Path, help="where every stage writes (see the layout)")
    parser.add_argument(
        "--raw-dir",
        type=Path,
        default=None,
        help="offline: read the upstream archives from here, download nothing (default: $RAW_DIR)",
    )
    parser.add_argument(
        "--bpe-merges",
        type=positive_int,
        default=None,
        help="en-de: joint BPE merge operations (default 32000, about 37k tokens)",
    )
    parser.add_argument(
        "--spm-vocab", type=positive_int, default=None, help="en-fr: sentencepiece vocabulary size (default 32000)"
    )
    parser.add_argument("--spm-model-type", choices=["unigram", "bpe"], default=None, help="en-fr (default unigram)")
    parser.add_argument(
        "--spm-sample",
        type=positive_int,
        default=None,
        help="en-fr: training sentences sampled for sentencepiece (default 5M)",
    )
    parser.add_argument(
        "--train-lines", type=positive_int, default=None, help="keep only the first N training pairs (quick trials)"
    )
    parser.add_argument(
        "--workers", type=positive_int, default=available_cores(), help="processes (default: the available cores)"
    )
    args = parser.parse_args(argv)
    if args.pair == "en-de":
        for option in ("spm_vocab", "spm_model_type", "spm_sample"):
            if getattr(args, option) is not None:
                parser.error(f"--{option.replace('_', '-')} is for en-fr (sentencepiece); en-de uses --bpe-merges")
        args.bpe_merges = args.bpe_merges or 32000
    else:
        if args.bpe_merges is not None:
            parser.error("--bpe-merges is for en-de (BPE); en-fr uses --spm-vocab")
        args.spm_vocab = args.spm_vocab or 32000
        args.spm_model_type = args.spm_model_type or "unigram"
        args.spm_sample = args.spm_sample or 5_000_000
    return check_dirs(parser, args)


def check_dirs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Fill in --raw-dir from $RAW_DIR; a --raw-dir or --work-dir that is no directory is a parser error."""
    if args.raw_dir is None and os.environ.get("RAW_DIR"):
        args.raw_dir = Path(os.environ["RAW_DIR"])
    if args.raw_dir is not None and not args.raw_dir.is_dir():
        parser.error(f"--raw-dir {args.raw_dir} is not a directory")
    if args.work_dir.exists() and not args.work_dir.is_dir():
        parser.error(f"--work-dir {args.work_dir} is not a directory")
    return args


def main(argv=None) -> None:
    Pipeline(parse_args(argv)).run()


if __name__ == "__main__":
    run_cli(main)
