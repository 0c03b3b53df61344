"""Binarise with fairseq-preprocess (one joined source-target dictionary), then check the sentence counts.

    python -m prepare.binarize --source-lang en --target-lang de --trainpref bpe/train \\
        --validpref bpe/valid --testpref bpe/test --destdir data-bin [--srcdict spm/dict.txt] [--workers N]

Runs `fairseq-preprocess --joined-dictionary --workers N` (N: the available cores) and checks that every
binarised split has as many sentences as its text file has lines. Without --srcdict the dictionary is
every token of the training text (source and target together); with it, that dictionary file. fairseq's
own log goes to DESTDIR/preprocess.log; its summary lines are printed.
"""

import struct
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

from ._common import ArgumentParser, PrepareError, available_cores, count_lines, log, positive_int, run_cli

_MMAP_MAGIC = b"MMIDIDX\x00\x00"


def fairseq_preprocess_command():
    """The fairseq-preprocess of this Python environment (next to the interpreter), else the module."""
    script = Path(sys.executable).parent / "fairseq-preprocess"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "fairseq_cli.preprocess"]


def binarized_sentences(index_file) -> int:
    """Sentences in a fairseq mmap dataset, from its .idx header (magic, version <Q, dtype <B, count <Q)."""
    with open(index_file, "rb") as handle:
        header = handle.read(len(_MMAP_MAGIC) + 8 + 1 + 8)
    if not header.startswith(_MMAP_MAGIC):
        raise PrepareError(f"{index_file} is not a fairseq mmap index")
    return struct.unpack("<Q", header[-8:])[0]


def binarize(
    src: str,
    tgt: str,
    prefixes: Dict[str, Path],
    destdir,
    workers: int = 1,
    srcdict: Optional[Path] = None,
    joined: bool = True,
    tgtdict: Optional[Path] = None,
    source_words: Optional[int] = None,
    threshold: Optional[int] = None,
) -> Dict[str, int]:
    """fairseq-preprocess the splits in `prefixes` (split -> text prefix, files PREFIX.src / PREFIX.tgt) into
    `destdir`; returns split -> sentences, checked against the text line counts. joined=False: a dictionary
    per side (tgtdict: the target's, given); source_words: keep the most frequent N source tokens (the rest become
    <unk>); threshold: keep only source tokens counted at least that often (joined: in both sides' training text)."""
    destdir = Path(destdir)
    lines = {}
    for split, prefix in prefixes.items():
        counts = {}
        for lang in (src, tgt):
            path = Path(f"{prefix}.{lang}")
            if not path.is_file():
                raise PrepareError(f"{path} does not exist")
            counts[lang] = count_lines(path)
        if counts[src] != counts[tgt]:
            raise PrepareError(f"{prefix}.{src} has {counts[src]:,} lines but {prefix}.{tgt} {counts[tgt]:,}")
        lines[split] = counts[src]
    destdir.mkdir(parents=True, exist_ok=True)
    for lang in (src, tgt):  # fairseq-preprocess refuses to overwrite a dictionary; the rest it overwrites
        (destdir / f"dict.{lang}.txt").unlink(missing_ok=True)
    command = fairseq_preprocess_command() + [
        "--source-lang",
        src,
        "--target-lang",
        tgt,
        "--destdir",
        str(destdir),
        "--workers",
        str(workers),
    ]
    if joined:
        command.append("--joined-dictionary")
    if source_words is not None:
        command += ["--nwordssrc", str(source_words)]
    if threshold is not None:
        command += ["--thresholdsrc", str(threshold)]
    for split in ("train", "valid", "test"):
        if split in prefixes:
            command += [f"--{split}pref", str(prefixes[split])]
    if srcdict is not None:
        command += ["--srcdict", str(srcdict)]
    if tgtdict is not None:
        command += ["--tgtdict", str(tgtdict)]
    log(f"  {' '.join(command)}")
    try:
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as error:
        raise PrepareError(
            f"cannot run fairseq-preprocess ({error}): install fairseq (pip install -e '.[fairseq]')"
        ) from None
    output = result.stdout or ""
    if result.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-15:])
        log(tail)
        raise PrepareError(f"fairseq-preprocess failed (exit status {result.returncode}); its output is above")
    for line in output.splitlines():
        if "] Dictionary:" in line or " sents, " in line:  # fairseq's summary of each split
            log("  fairseq-preprocess: " + line.split("fairseq_cli.preprocess", 1)[-1].lstrip(":| "))
    counts = {}
    for split in prefixes:
        for lang in (src, tgt):
            got = binarized_sentences(destdir / f"{split}.{src}-{tgt}.{lang}.idx")
            if got != lines[split]:
                raise PrepareError(f"{destdir}: {split}.{lang} has {got:,} sentences, its text {lines[split]:,} lines")
        counts[split] = lines[split]
    log("  binarised: " + ", ".join(f"{split} {n:,}" for split, n in counts.items()) + " sentence pairs")
    return counts


def main(argv=None) -> None:
    parser = ArgumentParser(prog="python -m prepare.binarize", description=__doc__.split("\n\n")[0])
    parser.add_argument("--source-lang", required=True)
    parser.add_argument("--target-lang", required=True)
    parser.add_argument("--trainpref", required=True, type=Path, help="files TRAINPREF.SRC and TRAINPREF.TGT")
    parser.add_argument("--validpref", type=Path)
    parser.add_argument("--testpref", type=Path)
    parser.add_argument(
        "--destdir", required=True, type=Path, help="output directory (its dict.SRC.txt, dict.TGT.txt are replaced)"
    )
    parser.add_argument("--srcdict", type=Path, help="use this dictionary instead of building one")
    parser.add_argument("--workers", type=positive_int, default=available_cores())
    args = parser.parse_args(argv)
    prefixes = {split: getattr(args, f"{split}pref") for split in ("train", "valid", "test")}
    binarize(
        args.source_lang,
        args.target_lang,
        {k: v for k, v in prefixes.items() if v},
        args.destdir,
        args.workers,
        args.srcdict,
    )


if __name__ == "__main__":
    run_cli(main)
