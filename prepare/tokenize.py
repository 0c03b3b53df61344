"""Moses punctuation normalisation and tokenisation (sacremoses), one sentence per line.

    python -m prepare.tokenize -l de -i text/train.de -o tok/train.de [--workers N]
    echo 'Die Haus-Tür' | python -m prepare.tokenize -l de        # -> Die Haus @-@ Tür

The pipeline of fairseq's prepare-wmt14en2*.sh, in Python: normalize-punctuation.perl -l L |
remove-non-printing-char.perl | tokenizer.perl -a -l L, that is MosesPunctNormalizer(L), then every
Unicode control/format character (\\p{C}) becomes a space, then MosesTokenizer(L) with

- aggressive_dash_splits=True (-a): a hyphen between letters or digits becomes its own token "@-@"
  ("Haus-Tür" -> "Haus @-@ Tür"). This is the compound splitting of the tokenised-BLEU convention of the
  paper's En-De results (tensor2tensor's get_ende_bleu.sh writes the same split as "##AT##-##AT##");
  MosesDetokenizer joins "@-@" back.
- escape=False: no XML escaping (tokenizer.perl's default writes &quot; &apos; &amp; ...). Characters stay
  themselves in the vocabulary, and detokenised output needs no unescaping.

Whitespace in the output is squeezed to single spaces. Long files are split over --workers processes.
"""

import regex
from sacremoses import MosesPunctNormalizer, MosesTokenizer

from ._common import ArgumentParser, available_cores, display, map_lines, positive_int, run_cli

_CONTROL = regex.compile(r"\p{C}")


class Tokenizer:
    """Callable: one line of text -> one line of space-separated Moses tokens."""

    def __init__(self, lang: str, aggressive_dash_splits: bool = True, normalize: bool = True):
        self.lang = lang
        self.aggressive_dash_splits = aggressive_dash_splits
        self.normalizer = MosesPunctNormalizer(lang) if normalize else None
        self.tokenizer = MosesTokenizer(lang)

    def __call__(self, line: str) -> str:
        if self.normalizer is not None:
            line = self.normalizer.normalize(line)
        line = _CONTROL.sub(" ", line)
        tokens = self.tokenizer.tokenize(
            line, aggressive_dash_splits=self.aggressive_dash_splits, escape=False, return_str=True
        )
        return " ".join(tokens.split())


def tokenize_file(
    source, target, lang: str, workers: int = 1, aggressive_dash_splits: bool = True, normalize: bool = True, label=None
) -> int:
    """Tokenise file `source` into `target` ("-": stdin/stdout); returns the number of lines."""
    return map_lines(
        Tokenizer,
        (lang, aggressive_dash_splits, normalize),
        source,
        target,
        workers,
        label or f"tokenize {display(source)}",
    )


def main(argv=None) -> None:
    parser = ArgumentParser(prog="python -m prepare.tokenize", description=__doc__.split("\n\n")[0])
    parser.add_argument("-l", "--lang", required=True, help="language code for the Moses rules (en, de, fr, ...)")
    parser.add_argument("-i", "--input", default="-", help="input file (default: stdin)")
    parser.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=available_cores(),
        help="processes for long files (default: the available cores)",
    )
    parser.add_argument("--no-aggressive-dash-splits", action="store_true", help="keep hyphenated words whole")
    parser.add_argument("--no-normalize", action="store_true", help="skip the punctuation normalisation")
    args = parser.parse_args(argv)
    tokenize_file(
        args.input, args.output, args.lang, args.workers, not args.no_aggressive_dash_splits, not args.no_normalize
    )


if __name__ == "__main__":
    run_cli(main)
