"""Fetch the WMT14 archives from statmt.org (exactly those of fairseq's prepare-wmt14en2*.sh) or Multi30k.

Downloads are resumable (the bytes so far live in NAME.part; a re-run asks the server for the rest with an
HTTP Range request), checked against the byte sizes in MANIFEST (and a checksum, where one is known), and
skipped when the file is already there with the right size. Free disk space is checked first.

Offline: ``--raw-dir R`` (or RAW_DIR=R) reads the files from R under their upstream names and downloads
nothing; a missing file is a one-line error that names it and its URL.

    python -m prepare.download --pair en-de --dest W/raw
    python -m prepare.download --pair multi30k --dest W/raw
    python -m prepare.download --list
"""

import http.client
import os
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from vaswani_plugin import durable

from ._common import ArgumentParser, PrepareError, file_digest, log, run_cli


@dataclass(frozen=True)
class RawFile:
    name: str
    url: str
    size: Optional[int]  # bytes; None where no size was on record (then the server's Content-Length is used)
    sha256: Optional[str] = None
    md5: Optional[str] = None
    what: str = ""


# Sizes and SHA-256 of the training archives as recorded from these statmt.org URLs by TensorFlow Datasets
# (tensorflow_datasets/url_checksums/wmt13_translate.txt, wmt14_translate.txt) and Hugging Face datasets
# (datasets/wmt14/dataset_infos.json). No size of dev.tgz and test-full.tgz was on record: those two are
# checked against the Content-Length the server sends, and test-full.tgz also against the MD5 that
# sacrebleu checks for its wmt14/full test set.
_MULTI30K = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
MANIFEST: Dict[str, RawFile] = {
    f.name: f
    for f in [
        RawFile(
            "training-parallel-europarl-v7.tgz",
            "http://statmt.org/wmt13/training-parallel-europarl-v7.tgz",
            657_632_379,
            sha256="0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7",
            what="Europarl v7",
        ),
        RawFile(
            "training-parallel-commoncrawl.tgz",
            "http://statmt.org/wmt13/training-parallel-commoncrawl.tgz",
            918_311_367,
            sha256="c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5",
            what="Common Crawl",
        ),
        RawFile(
            "training-parallel-nc-v9.tgz",
            "http://statmt.org/wmt14/training-parallel-nc-v9.tgz",
            80_418_416,
            sha256="cb8953f292298e6877ae433c98912b927cb0766b303f4540512ddd286c748485",
            what="News Commentary v9",
        ),
        RawFile(
            "training-parallel-un.tgz",
            "http://statmt.org/wmt13/training-parallel-un.tgz",
            2_365_634_246,
            sha256="29141b5c1eba149a94f7a59d3b1a834b2e47fe0f8758d68dcd77a3d3f497ee47",
            what="UN corpus",
        ),
        RawFile(
            "training-giga-fren.tar",
            "http://statmt.org/wmt10/training-giga-fren.tar",
            2_595_102_720,
            sha256="3ff8319f6919393520559bfbc7ad6a747ec81b3abc7be9993b338d4b017b4d9a",
            what="10^9 French-English corpus",
        ),
        RawFile("dev.tgz", "http://statmt.org/wmt14/dev.tgz", None, what="dev sets (newstest2013)"),
        RawFile(
            "test-full.tgz",
            "http://statmt.org/wmt14/test-full.tgz",
            None,
            md5="a8cd784e006feb32ac6f3d9ec7eb389a",
            what="test sets (newstest2014, full)",
        ),
    ]
    + [
        # Multi30k task 1 (Elliott et al., 2016), the raw text of github.com/multi30k/dataset, data/task1/raw;
        # sizes and SHA-256 recorded from a copy of those files (2026-11).
        RawFile(
            f"{split}.{lang}.gz", f"{_MULTI30K}/{split}.{lang}.gz", size, sha256=sha256, what=f"Multi30k {split}.{lang}"
        )
        for split, lang, size, sha256 in [
            ("train", "en", 568_929, "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f"),
            ("train", "de", 637_044, "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6"),
            ("val", "en", 21_650, "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28"),
            ("val", "de", 24_681, "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a"),
            ("test_2016_flickr", "en", 21_077, "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9"),
            ("test_2016_flickr", "de", 22_890, "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8"),
        ]
    ]
}

FILES: Dict[str, List[str]] = {
    "en-de": [
        "training-parallel-europarl-v7.tgz",
        "training-parallel-commoncrawl.tgz",
        "training-parallel-nc-v9.tgz",
        "dev.tgz",
        "test-full.tgz",
    ],
    "en-fr": [
        "training-parallel-europarl-v7.tgz",
        "training-parallel-commoncrawl.tgz",
        "training-parallel-un.tgz",
        "training-parallel-nc-v9.tgz",
        "training-giga-fren.tar",
        "dev.tgz",
        "test-full.tgz",
    ],
    "multi30k": [f"{split}.{lang}.gz" for split in ("train", "val", "test_2016_flickr") for lang in ("en", "de")],
}

# For the disk check only, where MANIFEST has no size.
_SIZE_GUESS = {"dev.tgz": 20_000_000, "test-full.tgz": 5_000_000}

_CHUNK = 1 << 20
_TIMEOUT_S = 60


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def check_disk_space(dest: Path, files: List[RawFile]) -> None:
    """PrepareError unless `dest` has room for what is still to be downloaded of `files`."""
    needed = 0
    for file in files:
        target = dest / file.name
        if target.exists():
            continue
        size = file.size or _SIZE_GUESS.get(file.name, 0)
        part = dest / (file.name + ".part")
        needed += max(0, size - (part.stat().st_size if part.exists() else 0))
    dest.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(dest).free
    if needed and free < needed * 1.02:
        raise PrepareError(
            f"not enough disk space in {dest}: the downloads need {needed / 1e9:.2f} GB, {free / 1e9:.2f} GB are free"
        )


def fetch(
    url: str, dest: Path, size: Optional[int] = None, sha256: Optional[str] = None, md5: Optional[str] = None
) -> str:
    """Download `url` to `dest`, resuming from dest.part. Returns "present" (already there with the expected
    size, nothing fetched) or "downloaded". Any failure is a PrepareError; the .part file is kept."""
    dest = Path(dest)
    name = dest.name
    if dest.exists():
        have = dest.stat().st_size
        if size is not None and have != size:
            raise PrepareError(
                f"{dest} has {have:,} bytes but {url} has {size:,}: remove it and run again to download it anew"
            )
        log(f"  {name}: present ({have:,} bytes), skipping the download")
        return "present"

    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(name + ".part")
    offset = part.stat().st_size if part.exists() else 0
    if size is not None and offset > size:
        part.unlink()
        offset = 0
    hint = f"run again to resume, or fetch {url} yourself and use --raw-dir"

    if size is None or offset < size:
        headers = {"User-Agent": "vaswani_plugin-prepare"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        try:
            response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=_TIMEOUT_S)
        except urllib.error.HTTPError as error:
            if error.code == 416 and offset and size is None:
                response = None  # the server says nothing is left: the .part file is complete
            else:
                raise PrepareError(f"download of {url} failed: HTTP {error.code} {error.reason}; {hint}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            reason = getattr(error, "reason", None) or error
            raise PrepareError(f"download of {url} failed: {reason}; {hint}") from None

        if response is not None:
            with response:
                status = response.status
                if offset and status == 206:
                    log(f"  {name}: resuming at {_mb(offset)}")
                    mode = "ab"
                else:
                    if offset:
                        log(f"  {name}: the server ignored the range request; starting again")
                    offset, mode = 0, "wb"
                length = response.headers.get("Content-Length")
                total = offset + int(length) if length and length.isdigit() else size
                if size is not None and total is not None and total != size:
                    raise PrepareError(
                        f"{url} is {total:,} bytes on the server, but {size:,} are expected "
                        "(prepare/download.py MANIFEST): not the upstream file?"
                    )
                _stream(response, part, mode, offset, total, name, url, hint)
        expected = size if size is not None else (total if response is not None else None)
    else:
        expected = size

    have = part.stat().st_size
    if expected is not None and have != expected:
        if have > expected:
            part.unlink()
            raise PrepareError(
                f"download of {url} gave {have:,} bytes, more than the {expected:,} expected; "
                "removed it, run again to download it anew"
            )
        raise PrepareError(f"download of {url} stopped at {have:,} of {expected:,} bytes; {hint}")
    for algorithm, want in (("sha256", sha256), ("md5", md5)):
        if want:
            got = file_digest(part, algorithm)
            if got != want:
                part.unlink()
                raise PrepareError(
                    f"{url}: {algorithm} {got} is not the expected {want}; "
                    "removed the file, run again to download it anew"
                )
    durable.replace_durably(part, dest)  # once renamed, a crash cannot leave a short `dest` that reads as present
    log(f"  {name}: downloaded, {have:,} bytes")
    return "downloaded"


def _stream(response, part: Path, mode: str, offset: int, total: Optional[int], name: str, url: str, hint: str) -> None:
    done, started, last_report = offset, time.monotonic(), 0.0
    try:
        with open(part, mode) as out:
            while True:
                block = response.read(_CHUNK)
                if not block:
                    break
                out.write(block)
                done += len(block)
                now = time.monotonic()
                if now - last_report >= 10 or (total and done == total):
                    speed = (done - offset) / max(now - started, 1e-6)
                    share = f" of {_mb(total)} ({100 * done / total:.0f}%)" if total else ""
                    log(f"  {name}: {_mb(done)}{share}, {speed / 1e6:.1f} MB/s")
                    last_report = now
    except (TimeoutError, OSError, http.client.HTTPException) as error:
        if isinstance(error, OSError) and error.errno == 28:  # ENOSPC
            raise PrepareError(f"disk full while downloading {url} to {part}") from None
        raise PrepareError(f"download of {url} broke off after {done:,} bytes ({error}); {hint}") from None


def locate(name: str, raw_dir: Optional[Path], dest: Path) -> Path:
    """Where upstream file `name` is read from: raw_dir/name offline, else dest/name."""
    if raw_dir is None:
        return Path(dest) / name
    path = Path(raw_dir) / name
    if not path.is_file():
        raise PrepareError(
            f"{path} is missing: download {MANIFEST[name].url} into {raw_dir}, or leave out --raw-dir to download it"
        )
    return path


def obtain(pair: str, dest: Path, raw_dir: Optional[Path] = None) -> Dict[str, Path]:
    """Make every upstream file of `pair` available; returns name -> path."""
    names = FILES[pair]
    if raw_dir is not None:
        raw_dir = Path(raw_dir)
        if not raw_dir.is_dir():
            raise PrepareError(f"--raw-dir {raw_dir} is not a directory")
        paths = {name: locate(name, raw_dir, dest) for name in names}  # every missing file fails first
        for name, path in paths.items():
            have, want = path.stat().st_size, MANIFEST[name].size
            note = "" if want is None or have == want else f" (upstream has {want:,}: a subset or another copy)"
            log(f"  {name}: using {path}, {have:,} bytes{note}")
        return paths
    files = [MANIFEST[name] for name in names]
    check_disk_space(Path(dest), files)
    for file in files:
        fetch(file.url, Path(dest) / file.name, file.size, sha256=file.sha256, md5=file.md5)
    return {name: Path(dest) / name for name in names}


def main(argv=None) -> None:
    parser = ArgumentParser(prog="python -m prepare.download", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--pair", choices=sorted(FILES), help="the WMT14 language pair whose files to fetch, or multi30k"
    )
    parser.add_argument("--dest", type=Path, help="download directory (e.g. WORK_DIR/raw)")
    parser.add_argument(
        "--raw-dir",
        type=Path,
        default=None,
        help="offline: only check that the files are in this directory (also: RAW_DIR=...)",
    )
    parser.add_argument("--list", action="store_true", help="print the manifest and exit")
    args = parser.parse_args(argv)
    if args.list:
        for file in MANIFEST.values():
            size = f"{file.size:,} bytes" if file.size else "size from the server"
            pairs = ", ".join(p for p, names in FILES.items() if file.name in names)
            print(f"{file.name:36} {size:>22}  {pairs:13} {file.url}")
        return
    raw_dir = args.raw_dir or (Path(os.environ["RAW_DIR"]) if os.environ.get("RAW_DIR") else None)
    if not args.pair or (not args.dest and raw_dir is None):
        parser.error("--pair and --dest (or --raw-dir) are required")
    obtain(args.pair, args.dest or raw_dir, raw_dir)


if __name__ == "__main__":
    run_cli(main)
