"""A tiny offline mirror of the WMT14 upstream files, in their upstream names and layout, for the tests and
benchmarks/chaos.py.

build_mirror(raw_dir, pair, lines) writes into raw_dir what `python -m prepare.wmt14 --raw-dir raw_dir`
reads:

- the training archives (training-parallel-europarl-v7.tgz, -commoncrawl.tgz, -nc-v9.tgz; for en-fr also
  training-parallel-un.tgz and training-giga-fren.tar with gzipped members), each corpus with `lines`
  generated sentence pairs. The English side draws words from the vocabulary of the real newstest2013.en
  (Zipf-like, deterministic seed); the other side is a word-by-word pseudo-translation (every English word
  has one made-up German or French word, some German ones hyphenated compounds, some French ones with an
  elided article "l'"), so the two sides are correlated and a model can learn something. Every 29th pair
  has a target three times too long, every 41st an empty target and every 53rd an empty source: pairs
  that cleaning must drop. The archives of the corpora shared by both pairs (Europarl, Common Crawl,
  News Commentary) hold the de-en and the fr-en members, as upstream, so one raw_dir can serve both pairs.
- dev.tgz: dev/newstest2013.{en,de} are the real files from ../shared/data/wmt14 (3000 lines).
  ../shared/data has no newstest2013.fr; dev/newstest2013.fr is the documented substitute: the real
  newstest2013.en put word by word through the same pseudo-French mapping (3000 lines, line-aligned).
- test-full.tgz: test-full/newstest2014-{deen,fren}-{src,ref}.*.sgm, the real SGM files of
  ../shared/data/wmt14/sgm (3003 segments each).

build_mirror(..., part=True) keeps the first PART_LINES lines of newstest2013 and the first PART_DOCUMENTS
documents of each newstest2014 SGM file (newstest2014_sentences() counts them): for the recipe runs that test
other stages (another model, data parallel, resuming); the whole real sets are prepared and translated by the
base recipe's test and test_prepare.py.

The shared data is only read here, when a mirror is built; nothing of it is stored in the repository. Archives are
byte-for-byte reproducible (fixed seeds and timestamps).
"""

import gzip
import hashlib
import io
import random
import re
import tarfile
from collections import Counter
from pathlib import Path
from typing import Dict, List

# The real data of the tests and benchmarks, beside the repository, never in it (tests/cli_helpers.py's too).
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
WMT14 = SHARED_DATA / "wmt14"

_MTIME = 1_400_000_000
_SYLLABLES = {
    "de": [
        "ber",
        "gen",
        "schaf",
        "lich",
        "keit",
        "ung",
        "tor",
        "wer",
        "sto",
        "ein",
        "haus",
        "zu",
        "mit",
        "ver",
        "an",
        "der",
        "stra",
        "für",
        "über",
        "schön",
        "groß",
        "mäß",
        "bau",
        "land",
        "stadt",
        "wirt",
        "zei",
        "kun",
    ],
    "fr": [
        "le",
        "la",
        "re",
        "con",
        "tion",
        "ment",
        "é",
        "è",
        "ai",
        "eau",
        "ou",
        "ça",
        "qu",
        "ière",
        "vil",
        "ent",
        "pré",
        "mai",
        "son",
        "gar",
        "çon",
        "fê",
        "te",
        "bon",
        "jour",
        "ci",
        "té",
        "ro",
        "ma",
        "nou",
    ],
}
_PAIRS = {"en-de": "de", "en-fr": "fr"}
# part=True: 301 dev lines, 17 test documents (395 en-de and 353 en-fr segments): as in the whole sets, none a
# multiple of 8, so that fairseq's default batch-size multiple of 8 would drop some (fairseq #5036).
PART_LINES, PART_DOCUMENTS = 301, 17


def _shared(path: Path) -> Path:
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the test mirror reads the real newstest2013/2014 from "
            f"{SHARED_DATA} (../shared/data relative to the repository)"
        )
    return path


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256("\x00".join(map(str, parts)).encode()).digest()[:8], "big")


def pseudo_word(word: str, lang: str) -> str:
    """The made-up `lang` word for an English word (deterministic)."""
    digest = hashlib.sha256(f"{lang}:{word}".encode()).digest()
    syllables = _SYLLABLES[lang]
    count = max(1, min(4, (len(word) + 1) // 3))
    out = "".join(syllables[digest[1 + i] % len(syllables)] for i in range(count))
    if lang == "de" and count >= 3 and digest[10] % 3 == 0:
        cut = len(syllables[digest[1] % len(syllables)])
        out = out[:cut].capitalize() + "-" + out[cut:].capitalize()  # a hyphenated compound: "Haus-Tor"
    elif lang == "fr" and digest[11] % 6 == 0:
        out = "l'" + out
    return out


def _lexicon(size: int = 600) -> List[str]:
    counts = Counter(
        word
        for line in _shared(WMT14 / "newstest2013.en").read_text(encoding="utf-8").splitlines()
        for word in re.findall(r"[a-z]+", line.lower())
        if len(word) > 1 or word == "a"
    )
    return [word for word, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:size]]


def _render(tokens: List[str], comma: int, end: str) -> str:
    words = [token + ("," if index == comma else "") for index, token in enumerate(tokens)]
    text = " ".join(words) + end
    return text[0].upper() + text[1:]


def _corpus(name: str, lang: str, lines: int, lexicon: List[str]) -> (List[str], List[str]):
    rng = random.Random(_seed(name, lang))
    weights = [1.0 / (rank + 1) for rank in range(len(lexicon))]
    english, foreign = [], []
    for index in range(lines):
        tokens = rng.choices(lexicon, weights, k=rng.randint(4, 18))
        if rng.random() < 0.2:
            tokens.insert(rng.randrange(len(tokens)), str(rng.randint(2, 2000)))
        comma = rng.randrange(2, len(tokens) - 1) if len(tokens) > 8 and rng.random() < 0.4 else -1
        end = rng.choice([".", ".", ".", "?", "!"])
        source = _render(tokens, comma, end)
        target = _render([token if token.isdigit() else pseudo_word(token, lang) for token in tokens], comma, end)
        if index % 29 == 3:
            target = " ".join([target] * 3)
        if index % 41 == 7:
            target = ""
        if index % 53 == 11:
            source = ""
        english.append(source)
        foreign.append(target)
    return english, foreign


def _text(lines: List[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


def _write_tar(path: Path, members: Dict[str, bytes], compress: bool = True) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), _MTIME, 0o644
            tar.addfile(info, io.BytesIO(data))
    data = buffer.getvalue()
    if compress:
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)


def _pseudo_line(line: str, lang: str) -> str:
    tokens = re.findall(r"[^\W\d_]+|\d+|[^\w\s]", line)
    out = [pseudo_word(t.lower(), lang) if t.isalpha() else t for t in tokens]
    text = re.sub(r" ([.,;:!?)\]\"'])", r"\1", " ".join(out))
    return text[:1].upper() + text[1:]


def _first_documents(sgm: bytes, documents: int) -> bytes:
    """The SGM file cut after its first `documents` documents, closed as the whole file is."""
    text = sgm.decode("utf-8")
    ends = [match.end() for match in re.finditer(r"</doc>\n?", text)]
    closing = text[text.rindex("</doc>") + len("</doc>") :].lstrip("\n")
    return (text[: ends[documents - 1]] + closing).encode("utf-8")


def newstest2014_sentences(raw_dir: Path, pair: str) -> int:
    """The newstest2014 segments of the mirror in raw_dir (3003, or fewer with part=True)."""
    with tarfile.open(Path(raw_dir) / "test-full.tgz") as tar:
        name = f"test-full/newstest2014-{pair[3:]}{pair[:2]}-src.en.sgm"
        return tar.extractfile(name).read().count(b"<seg ")


def build_mirror(raw_dir: Path, pair: str, lines: int = 300, part: bool = False) -> None:
    """Write the upstream files that `python -m prepare.wmt14 --pair PAIR --raw-dir RAW_DIR` reads."""
    if pair not in _PAIRS:
        raise ValueError(f"pair must be one of {sorted(_PAIRS)}, not {pair!r}")
    if lines < 1:
        raise ValueError("lines must be at least 1")
    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    lexicon = _lexicon()

    def members(prefix: str, names: Dict[str, str], gz: bool = False) -> Dict[str, bytes]:
        out = {}
        for lang, corpus in names.items():
            english, foreign = _corpus(corpus, lang, lines, lexicon)
            for side, text in (("en", english), (lang, foreign)):
                data = _text(text)
                out[prefix.format(lang=lang) + f".{side}" + (".gz" if gz else "")] = (
                    gzip.compress(data, mtime=0) if gz else data
                )
        return out

    both = {"de": None, "fr": None}
    _write_tar(
        raw_dir / "training-parallel-europarl-v7.tgz",
        members("training/europarl-v7.{lang}-en", {lang: f"europarl-{lang}" for lang in both}),
    )
    _write_tar(
        raw_dir / "training-parallel-commoncrawl.tgz",
        members("commoncrawl.{lang}-en", {lang: f"commoncrawl-{lang}" for lang in both}),
    )
    _write_tar(
        raw_dir / "training-parallel-nc-v9.tgz",
        members("training/news-commentary-v9.{lang}-en", {lang: f"nc-v9-{lang}" for lang in both}),
    )
    if pair == "en-fr":
        _write_tar(raw_dir / "training-parallel-un.tgz", members("un/undoc.2000.{lang}-en", {"fr": "un"}))
        _write_tar(
            raw_dir / "training-giga-fren.tar",
            members("giga-fren.release2.fixed", {"fr": "giga-fren"}, gz=True),
            compress=False,
        )

    def dev_file(lang: str) -> bytes:
        data = _shared(WMT14 / f"newstest2013.{lang}").read_bytes()
        return b"".join(line + b"\n" for line in data.split(b"\n")[:PART_LINES]) if part else data

    newstest2013_en = dev_file("en")
    english_lines = newstest2013_en.decode("utf-8").split("\n")[:-1]  # "\n" only: as prepare reads it
    substitute_fr = "".join(_pseudo_line(line, "fr") + "\n" for line in english_lines)
    _write_tar(
        raw_dir / "dev.tgz",
        {
            "dev/newstest2013.en": newstest2013_en,
            "dev/newstest2013.de": dev_file("de"),
            "dev/newstest2013.fr": substitute_fr.encode("utf-8"),
        },
    )
    sgm = sorted((WMT14 / "sgm").glob("newstest2014-*.sgm"))
    if len(sgm) < 4:
        raise FileNotFoundError(f"{WMT14 / 'sgm'} lacks the newstest2014 SGM files")
    _write_tar(
        raw_dir / "test-full.tgz",
        {
            f"test-full/{path.name}": _first_documents(path.read_bytes(), PART_DOCUMENTS) if part else path.read_bytes()
            for path in sgm
        },
    )
