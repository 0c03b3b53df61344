"""prepare/: the shared WMT14 data preparation, on a tiny offline mirror (benchmarks/wmt_mirror.py) that holds
generated training corpora and the real newstest2013 / newstest2014 from ../shared/data/wmt14; Multi30k's
extraction and download on its real files, read in place from ../shared/data/multi30k."""

import dataclasses
import gzip
import hashlib
import http.server
import json
import random
import re
import shutil
import subprocess
import sys
import threading
from argparse import Namespace
from pathlib import Path

import pytest
from cli_helpers import SHARED_DATA
from fairseq.data import Dictionary, data_utils
from wmt_mirror import WMT14, build_mirror

from prepare import PrepareError, clean, download, extract, tokenize
from prepare._common import run_cli
from prepare.multi30k import extract_multi30k
from prepare.steps import step_decisions
from prepare.wmt14 import Pipeline, parse_args

REPO = Path(__file__).resolve().parents[1]
SGM = WMT14 / "sgm"
MULTI30K = SHARED_DATA / "multi30k"  # the real {train,val,test_2016_flickr}.{en,de}.gz, never copied here
MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
MERGES, SPM_VOCAB, LINES = 300, 300, 300


def squeezed(path: Path):
    """The lines of a plain-text file ("\\n"-separated), whitespace squeezed."""
    return [re.sub(r"\s+", " ", line).strip() for line in path.read_text(encoding="utf-8").split("\n")[:-1]]


def lines(path: Path):
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def prepare_cli(*args, cwd=REPO, module="wmt14"):
    return subprocess.run(
        [sys.executable, "-m", f"prepare.{module}", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_line_error(result) -> str:
    """The error line of a failed prepare command, which must be its only one and its last."""
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert errors == [result.stderr.strip().splitlines()[-1]]
    return errors[0]


# -- newstest2014 from the real SGM files ---------------------------------------------------------------


@pytest.mark.shared_data
@pytest.mark.parametrize(
    "sgm, plain",
    [
        ("newstest2014-deen-src.en.sgm", "newstest2014.en"),
        ("newstest2014-deen-ref.de.sgm", "newstest2014.de"),
        ("newstest2014-fren-src.en.sgm", "newstest2014-fr.en"),
        ("newstest2014-fren-ref.fr.sgm", "newstest2014.fr"),
    ],
)
def test_sgm_extraction_is_the_plain_newstest2014(sgm, plain):
    segments = extract.read_sgm(SGM / sgm)
    assert len(segments) == 3003
    assert segments == squeezed(WMT14 / plain)


def test_sgm_segments_are_unescaped_and_squeezed():
    sgm = [
        '<srcset setid="x" srclang="any">\n',
        '<doc docid="d" genre="news">\n',
        '<seg id="1">  Tom &amp; Jerry\t say &quot;hi&quot;  </seg>\n',
        "<p>\n",
        '<seg id="2">a &lt;b&gt;\u00a0c</seg>\n',
        "</doc>\n",
    ]
    assert list(extract.sgm_segments(sgm)) == ['Tom & Jerry say "hi"', "a <b> c"]


# -- tokenisation and cleaning --------------------------------------------------------------------------


def test_tokenisation_splits_compounds_with_at_dash_at():
    german = tokenize.Tokenizer("de")
    assert german("Die Haus-Tür ist 3-mal so „groß“.") == 'Die Haus @-@ Tür ist 3 @-@ mal so " groß " .'
    # no XML escaping; control characters become spaces (remove-non-printing-char.perl)
    assert tokenize.Tokenizer("en")("Tom's & Jerry's\x07cat") == "Tom 's & Jerry 's cat"
    assert tokenize.Tokenizer("fr")("L'homme au-dessus") == "L' homme au @-@ dessus"


def test_tokenize_command_line(tmp_path):
    source = tmp_path / "in.de"
    source.write_text("Die Haus-Tür.\nZwei  Zeilen\n", encoding="utf-8")
    run_cli(tokenize.main, ["-l", "de", "-i", str(source), "-o", str(tmp_path / "out.de")])
    assert lines(tmp_path / "out.de") == ["Die Haus @-@ Tür .", "Zwei Zeilen"]


def test_cleaning_drops_exactly_the_pairs_of_the_rule(tmp_path):
    pairs = [
        ("a b c", "x y z", True),
        ("", "x", False),  # fewer than 1 token
        ("a", "   ", False),
        ("a b", "x y z", True),  # ratio 1.5 exactly: kept
        ("a b c", "x y", True),
        ("a b", "x y z w", False),  # 2.0
        ("a b c d", "x y", False),  # 2.0 the other way
        (" ".join(["a"] * 250), " ".join(["x"] * 250), True),  # 250 tokens: kept
        (" ".join(["a"] * 251), " ".join(["x"] * 250), False),  # 251
        ("  a\t b  ", "x   y", True),  # kept, whitespace squeezed
    ]
    (tmp_path / "s").write_text("".join(p[0] + "\n" for p in pairs), encoding="utf-8")
    (tmp_path / "t").write_text("".join(p[1] + "\n" for p in pairs), encoding="utf-8")
    kept, total = clean.clean_corpus(tmp_path / "s", tmp_path / "t", tmp_path / "s.out", tmp_path / "t.out")
    expected = [(" ".join(s.split()), " ".join(t.split())) for s, t, keep in pairs if keep]
    assert (kept, total) == (5, 10)
    assert list(zip(lines(tmp_path / "s.out"), lines(tmp_path / "t.out"))) == expected
    assert clean.keep(3, 2) and not clean.keep(4, 2) and not clean.keep(0, 0) and clean.keep(10, 15)
    assert not clean.keep(10, 16) and not clean.keep(16, 10)


@pytest.mark.shared_data
def test_train_lines_keeps_the_first_pairs_across_corpora(tmp_path):
    build_mirror(tmp_path / "raw", "en-de", lines=40)
    raw = {name: tmp_path / "raw" / name for name in download.FILES["en-de"]}
    assert extract.extract_train("en-de", raw, tmp_path / "all") == 120
    assert extract.extract_train("en-de", raw, tmp_path / "cut", train_lines=50) == 50
    for lang in ("en", "de"):
        assert lines(tmp_path / "cut" / f"train.{lang}") == lines(tmp_path / "all" / f"train.{lang}")[:50]


@pytest.mark.shared_data
def test_mirror_is_reproducible(tmp_path):
    digests = []
    for copy in ("a", "b"):
        build_mirror(tmp_path / copy, "en-de", lines=20)
        digests.append({p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / copy).iterdir()})
    assert digests[0] == digests[1] and len(digests[0]) == 5


# -- Multi30k -------------------------------------------------------------------------------------------


def gzip_lines(path: Path):
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as text:
        return text.read().split("\n")[:-1]


@pytest.mark.shared_data
def test_multi30k_extraction_of_the_real_files(tmp_path):
    raw = {name: MULTI30K / name for name in download.FILES["multi30k"]}
    counts = extract_multi30k(raw, tmp_path)
    assert counts == {"train": 29_000, "valid": 1_014, "test": 1_000}
    for split, name in [("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")]:
        for lang in ("en", "de"):
            extracted = lines(tmp_path / f"{split}.{lang}")
            assert len(extracted) == counts[split]
            assert extracted[0] == gzip_lines(MULTI30K / f"{name}.{lang}.gz")[0]
    assert lines(tmp_path / "train.en")[0].startswith("Two young, White males are outside near many bushes")
    # --train-lines N: the first N training pairs, the other splits whole.
    assert extract_multi30k(raw, tmp_path / "first", train_lines=100) == {"train": 100, "valid": 1_014, "test": 1_000}
    for lang in ("en", "de"):
        assert lines(tmp_path / "first" / f"train.{lang}") == lines(tmp_path / f"train.{lang}")[:100]


def test_multi30k_sides_of_different_lengths_are_an_error(tmp_path):
    for name in download.FILES["multi30k"]:
        with gzip.open(tmp_path / name, "wt", encoding="utf-8") as out:
            out.write("a\nb\n" if name == "val.de.gz" else "a\nb\nc\n")
    raw = {name: tmp_path / name for name in download.FILES["multi30k"]}
    with pytest.raises(PrepareError, match=r"^val.en.gz has 3 lines but val.de.gz 2$"):
        extract_multi30k(raw, tmp_path / "text")


@pytest.mark.shared_data
def test_the_multi30k_manifest_is_that_of_the_real_files():
    for name in download.FILES["multi30k"]:
        data, file = (MULTI30K / name).read_bytes(), download.MANIFEST[name]
        assert (file.size, file.sha256) == (len(data), hashlib.sha256(data).hexdigest()), name
        assert file.url == MULTI30K_URL + name


def test_a_missing_multi30k_raw_dir_file_is_a_one_line_error(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for name in download.FILES["multi30k"]:
        if name != "val.de.gz":
            (raw / name).touch()
    result = prepare_cli("--work-dir", tmp_path / "w", "--raw-dir", raw, module="multi30k")
    assert one_line_error(result) == (
        f"prepare: error: {raw}/val.de.gz is missing: download {MULTI30K_URL}val.de.gz "
        f"into {raw}, or leave out --raw-dir to download it"
    )


# -- user mistakes: one line, exit status 1 -------------------------------------------------------------


@pytest.mark.shared_data
def test_a_missing_raw_dir_file_is_a_one_line_error(tmp_path):
    raw = tmp_path / "raw"
    build_mirror(raw, "en-de", lines=5)
    (raw / "training-parallel-commoncrawl.tgz").unlink()
    result = prepare_cli("--pair", "en-de", "--work-dir", tmp_path / "w", "--raw-dir", raw)
    assert one_line_error(result) == (
        f"prepare: error: {raw}/training-parallel-commoncrawl.tgz is missing: download "
        f"http://statmt.org/wmt13/training-parallel-commoncrawl.tgz into {raw}, or "
        "leave out --raw-dir to download it"
    )


@pytest.mark.parametrize(
    "module, argv, message",
    [
        ("wmt14", ["--pair", "en-xx", "--work-dir", "w"], "argument --pair: invalid choice: 'en-xx'"),
        ("wmt14", ["--pair", "en-fr", "--work-dir", "w", "--bpe-merges", "100"], "--bpe-merges is for en-de"),
        ("wmt14", ["--pair", "en-de", "--work-dir", "w", "--spm-vocab", "100"], "--spm-vocab is for en-fr"),
        ("wmt14", ["--pair", "en-de", "--work-dir", "w", "--bpe-merges", "0"], "must be at least 1"),
        ("wmt14", ["--pair", "en-de", "--work-dir", "w", "--raw-dir", "/nonexistent"], "is not a directory"),
        ("multi30k", ["--work-dir", "w", "--raw-dir", "NOT_A_DIR"], "--raw-dir NOT_A_DIR is not a directory"),
        ("multi30k", ["--work-dir", __file__], f"--work-dir {__file__} is not a directory"),
        ("multi30k", ["--work-dir", "w", "--pair", "en-de"], "unrecognized arguments: --pair en-de"),
        ("multi30k", ["--work-dir", "w", "--bpe-merges", "0"], "must be at least 1"),
    ],
)
def test_bad_options_are_one_line_errors(module, argv, message, capsys):
    with pytest.raises(SystemExit) as exit:
        __import__(f"prepare.{module}", fromlist=["parse_args"]).parse_args(argv)
    assert exit.value.code == 1
    error = capsys.readouterr().err
    assert error.startswith("prepare: error: ") and message in error and error.count("\n") == 1


@pytest.mark.parametrize(
    "module", ["download", "extract", "tokenize", "clean", "bpe", "spm", "binarize", "wmt14", "multi30k"]
)
def test_every_step_has_help(module, capsys):
    main = __import__(f"prepare.{module}", fromlist=["main"]).main
    with pytest.raises(SystemExit) as exit:
        main(["--help"])
    assert exit.value.code == 0
    assert f"python -m prepare.{module}" in capsys.readouterr().out


# -- downloads ------------------------------------------------------------------------------------------


class _Server:
    """A tiny HTTP server on 127.0.0.1 that serves files (name -> bytes) and honours Range requests (or not)."""

    def __init__(self, files, honour_range: bool = True):
        server = self
        self.files = files if isinstance(files, dict) else {"file.tgz": files}
        self.honour_range, self.ranges, self.names, self.bytes_sent = honour_range, [], [], 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                name = self.path.rsplit("/", 1)[-1]
                server.names.append(name)
                content = server.files.get(name)
                if content is None:
                    self.send_error(404)
                    return
                requested = self.headers.get("Range")
                server.ranges.append(requested)
                start = 0
                if requested and server.honour_range:
                    start = int(re.fullmatch(r"bytes=(\d+)-", requested).group(1))
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(content) - 1}/{len(content)}")
                else:
                    self.send_response(200)
                body = content[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                server.bytes_sent += len(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.url = f"{self.base}/file.tgz"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def content(monkeypatch):
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    return random.Random(0).randbytes(300_000)


def test_resuming_a_part_file_asks_for_the_rest_with_a_range_request(tmp_path, content):
    server = _Server(content)
    try:
        dest = tmp_path / "file.tgz"
        (tmp_path / "file.tgz.part").write_bytes(content[:120_000])
        status = download.fetch(server.url, dest, size=len(content), sha256=hashlib.sha256(content).hexdigest())
    finally:
        server.close()
    assert status == "downloaded"
    assert server.ranges == ["bytes=120000-"] and server.bytes_sent == len(content) - 120_000
    assert dest.read_bytes() == content and not (tmp_path / "file.tgz.part").exists()


def test_a_fresh_download_and_a_server_that_ignores_ranges(tmp_path, content):
    server = _Server(content, honour_range=False)
    try:
        download.fetch(server.url, tmp_path / "fresh.tgz", size=len(content))
        (tmp_path / "again.tgz.part").write_bytes(content[:1000])
        download.fetch(server.url, tmp_path / "again.tgz", size=len(content), md5=hashlib.md5(content).hexdigest())
    finally:
        server.close()
    assert server.ranges == [None, "bytes=1000-"]
    assert (tmp_path / "fresh.tgz").read_bytes() == content == (tmp_path / "again.tgz").read_bytes()


def test_a_file_already_there_with_the_right_size_is_not_downloaded(tmp_path, capsys):
    dest = tmp_path / "dev.tgz"
    dest.write_bytes(b"x" * 1234)
    # port 9 on the loopback: any connection attempt would fail
    assert download.fetch("http://127.0.0.1:9/dev.tgz", dest, size=1234) == "present"
    assert "present (1,234 bytes), skipping the download" in capsys.readouterr().err
    with pytest.raises(PrepareError, match="has 1,234 bytes but http://127.0.0.1:9/dev.tgz has 999"):
        download.fetch("http://127.0.0.1:9/dev.tgz", dest, size=999)


def test_download_failures_are_clear_errors(tmp_path, content):
    server = _Server(content)
    try:
        with pytest.raises(PrepareError, match=r"is 300,000 bytes on the server, but 299,999 are expected"):
            download.fetch(server.url, tmp_path / "a.tgz", size=299_999)
        with pytest.raises(PrepareError, match=r"download of .*/nothing.tgz failed: HTTP 404"):
            download.fetch(server.url.replace("file.tgz", "nothing.tgz"), tmp_path / "b.tgz")
        with pytest.raises(PrepareError, match=r"sha256 .* is not the expected"):
            download.fetch(server.url, tmp_path / "c.tgz", size=len(content), sha256="0" * 64)
    finally:
        server.close()
    with pytest.raises(PrepareError, match=r"download of http://127.0.0.1:9/x.tgz failed: .*run again to resume"):
        download.fetch("http://127.0.0.1:9/x.tgz", tmp_path / "d.tgz")
    big = download.RawFile("huge.tgz", "http://127.0.0.1:9/huge.tgz", 10**18)
    with pytest.raises(PrepareError, match="not enough disk space"):
        download.check_disk_space(tmp_path, [big])


@pytest.mark.shared_data
def test_obtain_downloads_every_file_of_the_pair_once(tmp_path, monkeypatch, capsys):
    build_mirror(tmp_path / "mirror", "en-de", lines=5)
    files = {path.name: path.read_bytes() for path in (tmp_path / "mirror").iterdir()}
    server = _Server(files)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    for name, data in files.items():  # the mirror's files, sizes and (for test-full.tgz) checksum
        file = download.MANIFEST[name]
        monkeypatch.setitem(
            download.MANIFEST,
            name,
            download.RawFile(
                name,
                f"{server.base}/{name}",
                None if file.size is None else len(data),
                md5=hashlib.md5(data).hexdigest() if file.md5 else None,
            ),
        )
    try:
        paths = download.obtain("en-de", tmp_path / "raw")
        assert {name: path.read_bytes() for name, path in paths.items()} == files
        assert len(server.ranges) == 5
        download.obtain("en-de", tmp_path / "raw")
        assert len(server.ranges) == 5  # the second time nothing is fetched (sizes known or not)
    finally:
        server.close()
    assert capsys.readouterr().err.count("skipping the download") == 5


@pytest.mark.shared_data
def test_obtain_downloads_the_six_multi30k_files_once(tmp_path, monkeypatch, capsys):
    files = {name: (MULTI30K / name).read_bytes() for name in download.FILES["multi30k"]}
    server = _Server(files)
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    for name in files:  # the manifest's sizes and SHA-256, the URLs of the local server
        monkeypatch.setitem(
            download.MANIFEST, name, dataclasses.replace(download.MANIFEST[name], url=f"{server.base}/{name}")
        )
    try:
        paths = download.obtain("multi30k", tmp_path / "raw")
        assert {name: path.read_bytes() for name, path in paths.items()} == files
        assert sorted(server.names) == sorted(files) and server.ranges == [None] * 6
        download.obtain("multi30k", tmp_path / "raw")
        assert len(server.names) == 6  # the second time nothing is fetched
    finally:
        server.close()
    assert capsys.readouterr().err.count("skipping the download") == 6


# -- the orchestrator end to end ------------------------------------------------------------------------


def _prepare(tmp_path_factory, pair, *options):
    root = tmp_path_factory.mktemp(pair)
    build_mirror(root / "raw", pair, LINES)
    work = root / "work"
    result = prepare_cli("--pair", pair, "--work-dir", work, "--raw-dir", root / "raw", "--workers", 2, *options)
    assert result.returncode == 0, result.stderr[-3000:]
    return Namespace(root=root, work=work, raw=root / "raw", result=result, options=options, pair=pair)


@pytest.fixture(scope="module")
def en_de(tmp_path_factory):
    return _prepare(tmp_path_factory, "en-de", "--bpe-merges", MERGES)


@pytest.fixture(scope="module")
def en_fr(tmp_path_factory):
    return _prepare(tmp_path_factory, "en-fr", "--spm-vocab", SPM_VOCAB)


def _binarized(work: Path, src: str, tgt: str):
    dictionary = Dictionary.load(str(work / "data-bin" / f"dict.{src}.txt"))
    data = {
        (split, lang): data_utils.load_indexed_dataset(
            str(work / "data-bin" / f"{split}.{src}-{tgt}.{lang}"), dictionary
        )
        for split in ("train", "valid", "test")
        for lang in (src, tgt)
    }
    return dictionary, data


def _check_common(run, src, tgt, subword_dir):
    work = run.work
    assert run.result.stdout.strip().splitlines()[-1] == str(work / "data-bin")
    # valid is the real newstest2013, test the real newstest2014 (plain, from SGM)
    assert lines(work / "text" / f"valid.{src}") == lines(WMT14 / "newstest2013.en")
    test_plain = {"de": "newstest2014.de", "fr": "newstest2014.fr"}[tgt]
    test_source = {"de": "newstest2014.en", "fr": "newstest2014-fr.en"}[tgt]
    assert lines(work / "text" / f"test.{tgt}") == squeezed(WMT14 / test_plain)
    assert lines(work / "text" / f"test.{src}") == squeezed(WMT14 / test_source)
    assert len(lines(work / "tok" / f"test.{tgt}")) == 3003
    assert len(lines(work / "text" / "train.en")) == LINES * (3 if tgt == "de" else 5)
    # binarised sentences = text lines; train = what cleaning kept
    dictionary, data = _binarized(work, src, tgt)
    kept = lines(subword_dir / f"train.{src}")
    for lang in (src, tgt):
        assert len(data["valid", lang]) == 3000 and len(data["test", lang]) == 3003
        assert len(data["train", lang]) == len(kept) == len(lines(subword_dir / f"train.{tgt}"))
    assert dictionary.string(data["train", src][0]) == kept[0]
    test_line = lines(subword_dir / f"test.{tgt}")[5]  # has tokens unseen in training: <unk>
    assert data["test", tgt][5].tolist() == dictionary.encode_line(test_line, add_if_not_exist=False).tolist()
    # cleaning dropped every pair with an empty side, and nothing from dev and test
    extracted = list(zip(lines(work / "text" / f"train.{src}"), lines(work / "text" / f"train.{tgt}")))
    empty = sum(1 for s, t in extracted if not s.strip() or not t.strip())
    assert empty > 0 and len(kept) <= len(extracted) - empty
    assert len(lines(subword_dir / f"train.unclean.{src}")) == len(extracted)
    paths = json.loads((work / "prepare.json").read_text())
    for key in ("data_bin", "test_source", "test_reference", "test_reference_tokenized", "subword_model"):
        assert Path(paths[key]).exists(), key
    assert paths["detokenizer_lang"] == tgt and paths["sentences"] == {"train": len(kept), "valid": 3000, "test": 3003}
    return dictionary


@pytest.mark.e2e
def test_en_de_end_to_end(en_de):
    work = en_de.work
    dictionary = _check_common(en_de, "en", "de", work / "bpe")
    assert "@-@" in (work / "tok" / "test.de").read_text(encoding="utf-8")
    codes = [line for line in lines(work / "bpe" / "codes") if not line.startswith("#version")]
    assert len(codes) == MERGES
    # the BPE vocabulary: every distinct token of the segmented training text, at most merges + 2 x characters
    tokens = {
        token for lang in ("en", "de") for line in lines(work / "bpe" / f"train.{lang}") for token in line.split()
    }
    characters = {
        char
        for lang in ("en", "de")
        for line in lines(work / "tok" / f"train.{lang}")
        for char in line.replace(" ", "")
    }
    assert len(tokens) <= MERGES + 2 * len(characters)
    assert len(tokens) > MERGES // 2
    padding = [symbol for symbol in dictionary.symbols if symbol.startswith("madeupword")]
    assert set(dictionary.symbols[dictionary.nspecial :]) - set(padding) == tokens
    assert len(dictionary) == dictionary.nspecial + len(tokens) + len(padding) and len(dictionary) % 8 == 0
    assert (work / "data-bin" / "dict.en.txt").read_bytes() == (work / "data-bin" / "dict.de.txt").read_bytes()
    assert f"{len(tokens):,} distinct tokens in train" in en_de.result.stderr


@pytest.mark.e2e
def test_en_fr_end_to_end(en_fr):
    work = en_fr.work
    dictionary = _check_common(en_fr, "en", "fr", work / "spm")
    import sentencepiece

    model = sentencepiece.SentencePieceProcessor(model_file=str(work / "spm" / "spm.model"))
    assert model.get_piece_size() == SPM_VOCAB
    assert len(dictionary) == SPM_VOCAB - 3 + dictionary.nspecial  # spm's <unk> <s> </s> are fairseq's own
    assert (work / "data-bin" / "dict.en.txt").read_bytes() == (work / "data-bin" / "dict.fr.txt").read_bytes()
    assert len(lines(work / "text" / "valid.fr")) == 3000
    encoded = lines(work / "spm" / "test.en")[0].split()
    assert "".join(encoded).replace("\u2581", " ").strip() == lines(work / "tok" / "test.en")[0]


@pytest.mark.e2e
@pytest.mark.parametrize("run", ["en_de", "en_fr"])
def test_a_rerun_skips_every_stage(run, request):
    prepared = request.getfixturevalue(run)
    before = {p.name: p.stat().st_mtime_ns for p in (prepared.work / "data-bin").iterdir()}
    result = prepare_cli(
        "--pair",
        prepared.pair,
        "--work-dir",
        prepared.work,
        "--raw-dir",
        prepared.raw,
        "--workers",
        2,
        *prepared.options,
    )
    assert result.returncode == 0, result.stderr
    skipped = re.findall(r"^\[(\d)/7\] (\w+): .*: done before, skipping", result.stderr, re.M)
    assert [name for _, name in skipped] == ["download", "extract", "tokenize", "learn", "apply", "clean", "binarize"]
    assert "finished in" not in result.stderr
    assert result.stdout.strip() == str(prepared.work / "data-bin")
    assert before == {p.name: p.stat().st_mtime_ns for p in (prepared.work / "data-bin").iterdir()}


@pytest.mark.e2e
def test_what_reruns_after_a_change(en_de, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(en_de.work, work)

    def first(*extra):
        pipeline = Pipeline(
            parse_args(
                [
                    "--pair",
                    "en-de",
                    "--work-dir",
                    str(work),
                    "--raw-dir",
                    str(en_de.raw),
                    "--bpe-merges",
                    str(MERGES),
                    *extra,
                ]
            )
        )
        stages = pipeline.stages()
        stamps = [
            json.loads(pipeline.stamp(stage).read_text()) if pipeline.stamp(stage).is_file() else None
            for stage in stages
        ]
        decisions = step_decisions(stages, stamps)
        return [stage.name for stage, decision in zip(stages, decisions) if decision.action != "skip"]

    assert first() == []
    # intermediate files may go once used
    shutil.rmtree(work / "text")
    (work / "tok" / "train.de").unlink()
    assert first() == []
    # a changed setting re-runs its stage and all later ones
    assert first("--train-lines", "100") == ["extract", "tokenize", "learn", "apply", "clean", "binarize"]
    # missing outputs re-run the stages that make them, back to what is still there
    (work / "data-bin" / "train.en-de.en.bin").unlink()
    assert first() == ["binarize"]
    (work / "bpe" / "train.de").unlink()
    assert first() == ["clean", "binarize"]
    # ... and further back: apply needs tok/train.de, tokenize needs the text, which is gone
    (work / "bpe" / "train.unclean.de").unlink()
    assert first() == ["extract", "tokenize", "learn", "apply", "clean", "binarize"]
