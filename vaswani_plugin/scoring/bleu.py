"""BLEU as reported in §6.1 / Table 2 (tokenised, compound-split), and sacreBLEU on detokenised output.

    python -m vaswani_plugin.scoring.bleu --hypotheses generate.out --reference newstest2014.de --target-lang de

Hypotheses: fairseq-generate's D- lines (best per id, by id) or a plain file; the reference: plain, detokenised
text. Tokenised BLEU follows tensor2tensor's get_ende_bleu.sh (Moses tokens, hyphens split as ##AT##-##AT##,
multi-bleu.perl's corpus BLEU); sacreBLEU uses its defaults. Details: docs/reference.md#scoring-translations and
docs/recipes.md#bleu-conventions.
"""

import argparse
import functools
import re
from dataclasses import dataclass
from typing import List, Optional, Sequence

from sacrebleu.metrics import BLEU

from vaswani_plugin.cli import run_command
from vaswani_plugin.errors import VaswaniConfigError

GENERATE_LINE = re.compile(r"([HD])-(\d+)\t[^\t]*\t(.*)")
BPE_MARKERS = {"subword_nmt": "@@ ", "sentencepiece": "\u2581"}
DROPPED_HINT = " (fairseq dropped some: pass --required-batch-size-multiple 1)"


@dataclass(frozen=True)
class Scores:
    tokenised_bleu: float  # BLEU (tokenised, compound-split)
    sacrebleu: float
    signature: str  # sacreBLEU's
    sentences: int
    report: str  # what the command prints


def split_compounds(text: str) -> str:
    """get_ende_bleu.sh: perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'."""
    return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", text)


def read_lines(path) -> List[str]:
    """The lines of a UTF-8 text file, without their ends; a file that is not UTF-8 is a one-line error (an
    output cut short, by a killed job, can end inside a character)."""
    try:
        with open(path, encoding="utf-8") as file:
            return [line.rstrip("\r\n") for line in file]
    except UnicodeDecodeError as error:
        raise VaswaniConfigError(
            f"{path}: not UTF-8 text ({error.reason}: cut short inside a character, or another encoding)"
        ) from None


def read_hypotheses(path, remove_bpe: Optional[str] = None):
    """(hypotheses sorted by sentence id, their ids or None for a plain file); see the module docstring."""
    lines = read_lines(path)
    found = {"H": {}, "D": {}}
    for match in filter(None, map(GENERATE_LINE.fullmatch, lines)):
        found[match[1]].setdefault(int(match[2]), match[3])  # the first (best) of --nbest
    by_id = found["D"] or found["H"]
    ids = sorted(by_id) if by_id else None
    hypotheses = [by_id[i] for i in ids] if by_id else lines
    if remove_bpe:
        from fairseq.data.data_utils import post_process  # fairseq-generate's own (3 s to import: only here)

        hypotheses = [post_process(h, remove_bpe) for h in hypotheses]
    return hypotheses, ids


def compared_texts(hypotheses: Sequence[str], references: Sequence[str], target_lang: str):
    """{"tokenised": (hypotheses, references), "sacrebleu": (...)}: both sides as each BLEU reads them, from
    Moses-tokenised hypotheses (fairseq's output, subwords joined) and plain references."""
    detokeniser, tokeniser = moses(target_lang)
    detokenised = [detokeniser.detokenize(h.split()) for h in hypotheses]

    def prepare(text: str) -> str:
        return split_compounds(tokeniser.tokenize(text, escape=False, return_str=True))

    return {
        "tokenised": ([prepare(h) for h in detokenised], [prepare(r) for r in references]),
        "sacrebleu": (detokenised, list(references)),
    }


@functools.cache
def moses(target_lang: str):
    """(detokeniser, tokeniser) of the language, made once (0.1 s each; a validation scores batch by batch).
    sacremoses is imported here, not with the module: every fairseq command that loads the plugin imports this
    module (the task's dev scores), and sacremoses' import alone takes 0.25 s."""
    from sacremoses import MosesDetokenizer, MosesTokenizer

    return MosesDetokenizer(lang=target_lang), MosesTokenizer(lang=target_lang)


@functools.cache
def metrics(target_lang: str):
    """The two BLEUs: multi-bleu.perl's on the tokenised texts (no smoothing), sacreBLEU's defaults."""
    return {
        "tokenised": BLEU(tokenize="none", smooth_method="none", force=True),
        "sacrebleu": BLEU(trg_lang=target_lang),
    }


def bleu_statistics(hypotheses: Sequence[str], references: Sequence[str], target_lang: str):
    """{metric: [hypothesis length, reference length, 4 n-gram matches, 4 n-gram counts]}: corpus BLEU's
    statistics, which add up over sentences (the batches and workers of a validation)."""
    texts, bleus = compared_texts(hypotheses, references, target_lang), metrics(target_lang)
    statistics = {}
    for name, (hyps, refs) in texts.items():
        score = bleus[name].corpus_score(hyps, [refs])
        statistics[name] = [score.sys_len, score.ref_len, *score.counts, *score.totals]
    return statistics


def bleu_from_statistics(name: str, statistics: Sequence[float], target_lang: str) -> float:
    """The corpus BLEU of summed bleu_statistics (score_lines' on the same sentences)."""
    sys_len, ref_len, counts, totals = statistics[0], statistics[1], statistics[2:6], statistics[6:10]
    bleu = metrics(target_lang)[name]
    return bleu.compute_bleu(
        [int(c) for c in counts],
        [int(t) for t in totals],
        int(sys_len),
        int(ref_len),
        smooth_method=bleu.smooth_method,
        smooth_value=bleu.smooth_value,
    ).score


def score_lines(hypotheses: Sequence[str], references: Sequence[str], target_lang: str) -> Scores:
    """Both BLEU scores of hypotheses against one reference per sentence."""
    if len(hypotheses) != len(references) or not references:
        raise VaswaniConfigError(f"{len(hypotheses)} hypotheses for {len(references)} reference lines")
    texts, bleus = compared_texts(hypotheses, references, target_lang), metrics(target_lang)
    tokenised = bleus["tokenised"].corpus_score(texts["tokenised"][0], [texts["tokenised"][1]])
    plain = bleus["sacrebleu"].corpus_score(texts["sacrebleu"][0], [texts["sacrebleu"][1]])
    signature = str(bleus["sacrebleu"].get_signature())
    report = (
        f"BLEU (tokenised, compound-split) = {str(tokenised).split(' = ', 1)[1]}\n"
        f"sacreBLEU = {str(plain).split(' = ', 1)[1]} {signature}\n"
        f"sentences = {len(references)}"
    )
    return Scores(tokenised.score, plain.score, signature, len(references), report)


def score_files(hypotheses, reference, target_lang: str, remove_bpe: Optional[str] = None) -> Scores:
    """score_lines on a fairseq-generate output or plain hypothesis file and a plain reference file."""
    lines, ids = read_hypotheses(hypotheses, remove_bpe)
    references = read_lines(reference)
    if len(lines) != len(references):
        hint = DROPPED_HINT if ids is not None and len(lines) < len(references) else ""
        raise VaswaniConfigError(f"{len(lines)} hypotheses for {len(references)} reference lines{hint}")
    if ids is not None and ids != list(range(len(ids))):
        raise VaswaniConfigError(f"{hypotheses}: sentence ids are not 0..{len(ids) - 1} (output of another test set?)")
    for name, marker in BPE_MARKERS.items():
        if not remove_bpe and any(marker in line + " " for line in lines):
            raise VaswaniConfigError(f"hypotheses still contain {marker.strip()!r}: pass --remove-bpe {name}")
    return score_lines(lines, references, target_lang)


def examples(hypotheses, reference, source, target_lang: str, count: int, remove_bpe: Optional[str] = None) -> str:
    """The first `count` sentences side by side: source, reference and the detokenised translation."""
    lines, _ = read_hypotheses(hypotheses, remove_bpe)
    detokeniser, _ = moses(target_lang)
    texts = [read_lines(source), read_lines(reference)]
    shown = []
    for index, (src, ref, hyp) in enumerate(zip(texts[0], texts[1], lines[:count])):
        shown.append(
            f"example {index + 1}\n  source:      {src}\n  reference:   {ref}\n"
            f"  translation: {detokeniser.detokenize(hyp.split())}"
        )
    return "\n".join(shown)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        prog="vaswani_plugin.scoring.bleu", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--hypotheses",
        "--generate-output",
        required=True,
        dest="hypotheses",
        help="fairseq-generate output, or one hypothesis a line",
    )
    parser.add_argument("--reference", required=True, help="plain reference, one sentence a line")
    parser.add_argument("--target-lang", required=True, help="target language for the Moses (de)tokeniser, e.g. de")
    parser.add_argument(
        "--remove-bpe",
        choices=sorted(BPE_MARKERS),
        help="undo BPE if fairseq-generate ran without --remove-bpe/--post-process",
    )
    parser.add_argument(
        "--examples",
        type=int,
        default=0,
        metavar="N",
        help="first print N example translations next to --source and the reference",
    )
    parser.add_argument("--source", help="plain source text, for --examples")
    run_command(parser, score_command, argv)


def score_command(args) -> None:
    if args.examples and not args.source:
        raise VaswaniConfigError("--examples needs --source")
    scores = score_files(args.hypotheses, args.reference, args.target_lang, args.remove_bpe)
    if args.examples:
        print(examples(args.hypotheses, args.reference, args.source, args.target_lang, args.examples, args.remove_bpe))
    print(scores.report)


if __name__ == "__main__":
    main()
