"""Archives -> plain text: the WMT14 training corpora, newstest2013 (valid) and newstest2014 (test, from SGM).

    python -m prepare.extract wmt14 --pair en-de --raw-dir W/raw --out W/text [--train-lines N]
    python -m prepare.extract sgm newstest2014-deen-ref.de.sgm [-o test.de]

Training text is the concatenation of the corpora in the order of fairseq's prepare-wmt14en2*.sh, read
straight from the archives (nothing is unpacked to disk); `--train-lines N` keeps the first N pairs of that
concatenation. valid is newstest2013 from dev.tgz, as distributed. test is newstest2014 from the "full"
test set: the text of each <seg ...>...</seg> of the SGM files, with XML entities unescaped and whitespace
squeezed, which is what sacrebleu's `-t wmt14/full` reference is (WMT14's SGM files contain no entities).
Characters that some tools take for line breaks (\\r, \\x0b, \\x0c, \\x1c-\\x1e, \\x85, \\u2028, \\u2029) become
spaces, so that every file keeps exactly one sentence per "\\n"-terminated line.
"""

import gzip
import io
import re
import tarfile
import zlib
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, TextIO
from xml.sax.saxutils import unescape

from ._common import LINE_BREAKING, ArgumentParser, PrepareError, log, open_read, open_write, positive_int, run_cli

LANGS = {"en-de": ("en", "de"), "en-fr": ("en", "fr")}


class Corpus(NamedTuple):
    archive: str  # upstream file name (prepare.download.MANIFEST)
    prefix: str  # member name without the language suffix
    gzipped: bool = False


CORPORA: Dict[str, List[Corpus]] = {
    "en-de": [
        Corpus("training-parallel-europarl-v7.tgz", "training/europarl-v7.de-en"),
        Corpus("training-parallel-commoncrawl.tgz", "commoncrawl.de-en"),
        Corpus("training-parallel-nc-v9.tgz", "training/news-commentary-v9.de-en"),
    ],
    "en-fr": [
        Corpus("training-parallel-europarl-v7.tgz", "training/europarl-v7.fr-en"),
        Corpus("training-parallel-commoncrawl.tgz", "commoncrawl.fr-en"),
        Corpus("training-parallel-un.tgz", "un/undoc.2000.fr-en"),
        Corpus("training-parallel-nc-v9.tgz", "training/news-commentary-v9.fr-en"),
        Corpus("training-giga-fren.tar", "giga-fren.release2.fixed", gzipped=True),
    ],
}
DEV = ("dev.tgz", "dev/newstest2013")
TEST = (
    "test-full.tgz",
    {
        "en-de": ("test-full/newstest2014-deen-src.en.sgm", "test-full/newstest2014-deen-ref.de.sgm"),
        "en-fr": ("test-full/newstest2014-fren-src.en.sgm", "test-full/newstest2014-fren-ref.fr.sgm"),
    },
)

_SEG = re.compile(r"^\s*<seg\b[^>]*>(.*)</seg>")
_SPACES = re.compile(r"\s+")


def clean_line(line: str) -> str:
    """One sentence, without its line end, with line-breaking characters turned into spaces."""
    return line.rstrip("\n").translate(LINE_BREAKING)


def sgm_segments(lines: Iterable[str]) -> Iterator[str]:
    """The text of every <seg>...</seg> line of an SGM file: unescaped, whitespace-squeezed."""
    for line in lines:
        match = _SEG.match(line)
        if match:
            text = unescape(match.group(1), {"&quot;": '"', "&apos;": "'"})
            yield _SPACES.sub(" ", text).strip()


def read_sgm(path) -> List[str]:
    with open_read(path) as handle:
        return list(sgm_segments(handle))


class _Unseekable(io.RawIOBase):
    """A tar member read in stream mode, as a plain readable stream (tarfile's own object raises on
    .seekable(), which io.TextIOWrapper calls)."""

    def __init__(self, stream):
        self._stream = stream

    def readable(self):
        return True

    def seekable(self):
        return False

    def readinto(self, buffer):
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _text(stream, gzipped: bool = False) -> TextIO:
    stream = io.BufferedReader(_Unseekable(stream), 1 << 20)
    if gzipped:
        stream = gzip.GzipFile(fileobj=stream, mode="rb")
    return io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="\n")


def _members(archive: Path, wanted: Dict[str, object]):
    """Yield (wanted key, binary stream) for each wanted member of a tar archive, read as a stream (no
    seeking, so a .tgz is decompressed once). Members are matched by base name, so that a "./" or another
    top directory in a re-packed archive does not matter. Stops reading once all were found."""
    by_base = {name.rsplit("/", 1)[-1]: name for name in wanted}
    found = set()
    try:
        with tarfile.open(archive, mode="r|*") as tar:
            for member in tar:
                key = by_base.get(member.name.rsplit("/", 1)[-1])
                if key is None or not member.isfile() or key in found:
                    continue
                found.add(key)
                yield key, tar.extractfile(member)
                if len(found) == len(wanted):
                    break
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise PrepareError(
            f"cannot read {archive} ({error}): incomplete or not the upstream file? Remove it and run again"
        ) from None
    missing = sorted(set(wanted) - found)
    if missing:
        raise PrepareError(f"{archive} has no {', '.join(missing)}: not the upstream file?")


def extract_train(pair: str, raw: Dict[str, Path], out_dir: Path, train_lines: Optional[int] = None) -> int:
    """Write out_dir/train.{src,tgt}: every corpus of the pair, concatenated; returns the number of pairs."""
    src, tgt = LANGS[pair]
    out_dir = Path(out_dir)
    total = 0
    with open_write(out_dir / f"train.{src}") as out_src, open_write(out_dir / f"train.{tgt}") as out_tgt:
        outputs = {src: out_src, tgt: out_tgt}
        for corpus in CORPORA[pair]:
            if train_lines is not None and total >= train_lines:
                break
            limit = None if train_lines is None else train_lines - total
            suffix = ".gz" if corpus.gzipped else ""
            wanted = {f"{corpus.prefix}.{lang}{suffix}": lang for lang in (src, tgt)}
            counts = {}
            for member, stream in _members(raw[corpus.archive], wanted):
                lang = wanted[member]
                count, out = 0, outputs[lang]
                try:
                    for line in _text(stream, corpus.gzipped):
                        if limit is not None and count >= limit:
                            break
                        out.write(clean_line(line) + "\n")
                        count += 1
                except (EOFError, zlib.error, gzip.BadGzipFile, tarfile.TarError) as error:
                    raise PrepareError(
                        f"cannot read {member} in {raw[corpus.archive]} ({error}): incomplete or not the upstream file?"
                    ) from None
                counts[lang] = count
                log(f"  {corpus.archive}: {member}: {count:,} lines")
            if counts[src] != counts[tgt]:
                raise PrepareError(
                    f"{raw[corpus.archive]}: {corpus.prefix} has {counts[src]:,} {src} lines but "
                    f"{counts[tgt]:,} {tgt} lines"
                )
            total += counts[src]
    log(f"  train: {total:,} sentence pairs")
    return total


def extract_valid(pair: str, dev_tgz: Path, out_dir: Path) -> int:
    """out_dir/valid.{src,tgt} = newstest2013 as distributed (plain text in dev.tgz)."""
    src, tgt = LANGS[pair]
    wanted = {f"{DEV[1]}.{lang}": lang for lang in (src, tgt)}
    counts = {}
    for member, stream in _members(Path(dev_tgz), wanted):
        lang = wanted[member]
        with open_write(Path(out_dir) / f"valid.{lang}") as out:
            counts[lang] = 0
            for line in _text(stream):
                out.write(clean_line(line) + "\n")
                counts[lang] += 1
    if counts[src] != counts[tgt]:
        raise PrepareError(f"{dev_tgz}: newstest2013.{src} has {counts[src]} lines, .{tgt} {counts[tgt]}")
    log(f"  valid (newstest2013): {counts[src]:,} sentence pairs")
    return counts[src]


def extract_test(pair: str, test_tgz: Path, out_dir: Path) -> int:
    """out_dir/test.{src,tgt} = newstest2014 from the SGM files of test-full.tgz."""
    src, tgt = LANGS[pair]
    wanted = dict(zip(TEST[1][pair], (src, tgt)))
    segments = {}
    for member, stream in _members(Path(test_tgz), wanted):
        segments[wanted[member]] = list(sgm_segments(_text(stream)))
    if len(segments[src]) != len(segments[tgt]):
        raise PrepareError(f"{test_tgz}: {len(segments[src])} source but {len(segments[tgt])} reference segments")
    for lang, lines in segments.items():
        with open_write(Path(out_dir) / f"test.{lang}") as out:
            out.writelines(line + "\n" for line in lines)
    log(f"  test (newstest2014, full): {len(segments[src]):,} sentence pairs")
    return len(segments[src])


def extract_wmt14(pair: str, raw: Dict[str, Path], out_dir: Path, train_lines: Optional[int] = None) -> Dict[str, int]:
    """All three splits; returns split -> number of sentence pairs."""
    return {
        "train": extract_train(pair, raw, out_dir, train_lines),
        "valid": extract_valid(pair, raw[DEV[0]], out_dir),
        "test": extract_test(pair, raw[TEST[0]], out_dir),
    }


def main(argv=None) -> None:
    parser = ArgumentParser(prog="python -m prepare.extract", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    sgm = commands.add_parser("sgm", help="print the segments of an SGM file, one per line")
    sgm.add_argument("file", type=Path)
    sgm.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    wmt = commands.add_parser("wmt14", help="all splits of WMT14 En-De or En-Fr from the upstream archives")
    wmt.add_argument("--pair", required=True, choices=sorted(LANGS))
    wmt.add_argument("--raw-dir", required=True, type=Path, help="directory with the upstream archives")
    wmt.add_argument("--out", required=True, type=Path, help="output directory")
    wmt.add_argument("--train-lines", type=positive_int, help="keep only the first N training pairs")
    args = parser.parse_args(argv)
    if args.command == "sgm":
        lines = read_sgm(args.file)
        with open_write(args.output) as out:
            out.writelines(line + "\n" for line in lines)
        return
    from .download import FILES, locate

    raw = {name: locate(name, args.raw_dir, args.raw_dir) for name in FILES[args.pair]}
    extract_wmt14(args.pair, raw, args.out, args.train_lines)


if __name__ == "__main__":
    run_cli(main)
