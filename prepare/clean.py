"""Drop training pairs by length, like Moses' clean-corpus-n.perl (as fairseq's prepare-wmt14en2*.sh runs it:
-ratio 1.5, min 1, max 250).

    python -m prepare.clean --src bpe/train.unclean.en --tgt bpe/train.unclean.de \\
        --out-src bpe/train.en --out-tgt bpe/train.de [--min 1 --max 250 --ratio 1.5]

Lengths are counts of whitespace-separated tokens. A pair is dropped when either side has fewer than
--min or more than --max tokens, or when one side is more than --ratio times as long as the other (in
either direction). Kept lines are written with whitespace squeezed to single spaces, as the Perl script does.
Only ever apply it to training data: dev and test sets are scored as they are.
"""

from typing import Tuple

from ._common import ArgumentParser, PrepareError, log, open_read, open_write, run_cli


def keep(src_tokens: int, tgt_tokens: int, min_len: int = 1, max_len: int = 250, ratio: float = 1.5) -> bool:
    """clean-corpus-n.perl's rule for one pair of token counts."""
    if not (min_len <= src_tokens <= max_len and min_len <= tgt_tokens <= max_len):
        return False
    return src_tokens <= ratio * tgt_tokens and tgt_tokens <= ratio * src_tokens


def clean_corpus(
    src, tgt, out_src, out_tgt, min_len: int = 1, max_len: int = 250, ratio: float = 1.5
) -> Tuple[int, int]:
    """Write the pairs of (src, tgt) that `keep`; returns (kept, total)."""
    kept = total = 0
    with (
        open_read(src) as src_lines,
        open_read(tgt) as tgt_lines,
        open_write(out_src) as src_out,
        open_write(out_tgt) as tgt_out,
    ):
        for src_line in src_lines:
            tgt_line = tgt_lines.readline()
            if not tgt_line:
                raise PrepareError(f"{tgt} has fewer lines than {src} ({total:,})")
            total += 1
            src_tokens, tgt_tokens = src_line.split(), tgt_line.split()
            if keep(len(src_tokens), len(tgt_tokens), min_len, max_len, ratio):
                src_out.write(" ".join(src_tokens) + "\n")
                tgt_out.write(" ".join(tgt_tokens) + "\n")
                kept += 1
        if tgt_lines.readline():
            raise PrepareError(f"{tgt} has more lines than {src} ({total:,})")
    log(
        f"  clean: kept {kept:,} of {total:,} pairs (dropped {total - kept:,}: "
        f"outside {min_len}..{max_len} tokens or length ratio above {ratio})"
    )
    return kept, total


def main(argv=None) -> None:
    parser = ArgumentParser(prog="python -m prepare.clean", description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", required=True, help="source side, one sentence per line")
    parser.add_argument("--tgt", required=True, help="target side, line-aligned with --src")
    parser.add_argument("--out-src", required=True)
    parser.add_argument("--out-tgt", required=True)
    parser.add_argument("--min", type=int, default=1, help="fewest tokens a side may have (default 1)")
    parser.add_argument("--max", type=int, default=250, help="most tokens a side may have (default 250)")
    parser.add_argument("--ratio", type=float, default=1.5, help="largest length ratio, both ways (default 1.5)")
    args = parser.parse_args(argv)
    if args.min > args.max or args.ratio < 1:
        parser.error("need --min <= --max and --ratio >= 1")
    clean_corpus(args.src, args.tgt, args.out_src, args.out_tgt, args.min, args.max, args.ratio)


if __name__ == "__main__":
    run_cli(main)
