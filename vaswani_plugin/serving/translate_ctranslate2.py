"""Translate raw text, a sentence a line, with a model exported by export_ctranslate2, on CTranslate2.

    python -m vaswani_plugin.serving.translate_ctranslate2 --model DIR --source-lang en --target-lang de \\
        --bpe-codes data/bpe/codes [--beam N] [--compute-type int8] < input.txt > output.txt

Text handling, batching, the length limit and --length-penalty: docs/reference.md#serving-with-ctranslate2.
"""

import argparse
import sys
import time
from pathlib import Path

from vaswani_plugin.errors import CTRANSLATE2_MISSING, MissingExtra, VaswaniConfigError

try:
    import ctranslate2
except ImportError:
    raise MissingExtra(CTRANSLATE2_MISSING) from None

from vaswani_plugin import paper
from vaswani_plugin.cli import run_command
from vaswani_plugin.generation.length import length_limit
from vaswani_plugin.serving.text import TextPipeline

COMPUTE_TYPES = (
    "default",
    "auto",
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float32",
    "float16",
    "bfloat16",
)


def decoding_options(sources, *, beam: int, length_penalty: float, max_len_a: float, max_len_b: int) -> dict:
    """CTranslate2's translate_batch options for one batch of sources (tokens, without </s>) that decode as
    fairseq-generate does: from </s> (the exported model's config), at least one token, never <pad> (the exported
    model's bias), at most max_len_a x (the longest source and its </s>) + max_len_b tokens."""
    limit = length_limit(max_len_a, max_len_b, max(map(len, sources)) + 1)
    return dict(
        beam_size=beam,
        length_penalty=length_penalty,
        max_decoding_length=limit,
        min_decoding_length=1,
        max_input_length=0,
    )


def translate_batches(translator, batches, **options):
    """Each batch's best hypotheses (token lists), in order. The batches are all submitted at once, so that a
    translator with inter_threads > 1 decodes as many in parallel, one thread each or intra_threads each."""
    pending = [
        translator.translate_batch(batch, asynchronous=True, **decoding_options(batch, **options)) if batch else []
        for batch in batches
    ]
    for results in pending:
        yield [result.result().hypotheses[0] for result in results]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="vaswani_plugin.serving.translate_ctranslate2",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", required=True, help="a directory written by export_ctranslate2")
    parser.add_argument("--source-lang", required=True, help="source language, for the Moses tokeniser (en, ...)")
    parser.add_argument("--target-lang", required=True, help="target language, for the Moses detokeniser (de, ...)")
    subwords = parser.add_mutually_exclusive_group(required=True)
    subwords.add_argument(
        "--bpe-codes", help="subword-nmt codes the data was segmented with (the quickstart's data/bpe/codes)"
    )
    subwords.add_argument("--sentencepiece-model", help="sentencepiece model the data was segmented with (En-Fr)")
    parser.add_argument(
        "--beam", type=int, default=paper.BEAM, help=f"beam size; 1: greedy (default {paper.BEAM}, §6.1)"
    )
    parser.add_argument(
        "--length-penalty",
        type=float,
        default=1.0,
        help="CTranslate2's: hypotheses ranked by log P / |Y|^p (|Y| with </s>), fairseq-generate's "
        "--lenpen; 0: by log P. Not GNMT's ((5+|Y|)/6)^alpha (docs/reference.md) (default 1)",
    )
    parser.add_argument("--max-len-a", type=float, default=0, help="length limit a x source length + b (default 0)")
    parser.add_argument("--max-len-b", type=int, default=200, help="length limit a x source length + b (default 200)")
    parser.add_argument(
        "--compute-type",
        default="default",
        choices=COMPUTE_TYPES,
        help="CTranslate2's computation type; default: the exported weights' (int8 is the fast one on CPUs)",
    )
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument(
        "--threads", type=int, default=0, help="CPU threads of each batch (CTranslate2's intra_threads; 0: its default)"
    )
    parser.add_argument(
        "--parallel-batches",
        type=int,
        default=1,
        help="batches translated at once, each on its own --threads (CTranslate2's inter_threads; "
        "default 1); docs/results.md has the fastest settings measured",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    run_command(parser, translate_command, argv)


def translate_command(args) -> None:
    if min(args.beam, args.batch_size, args.parallel_batches) < 1:
        raise VaswaniConfigError("--beam, --batch-size and --parallel-batches must be at least 1")
    if not Path(args.model, "model.bin").is_file():
        raise VaswaniConfigError(
            f"--model {args.model}: no CTranslate2 model there (write one with "
            "python -m vaswani_plugin.serving.export_ctranslate2)"
        )
    pipeline = TextPipeline(args.source_lang, args.target_lang, args.bpe_codes, args.sentencepiece_model)
    translator = ctranslate2.Translator(
        args.model,
        device=args.device,
        compute_type=args.compute_type,
        intra_threads=args.threads,
        inter_threads=args.parallel_batches,
    )
    start = reported = time.perf_counter()
    lines = sys.stdin.read().splitlines()
    sources = [pipeline.encode(line) for line in lines]
    # As fairseq-generate batches: sources of similar length together (less padding), output in input order.
    order = sorted((number for number, tokens in enumerate(sources) if tokens), key=lambda n: len(sources[n]))
    batches = [order[first : first + args.batch_size] for first in range(0, len(order), args.batch_size)]
    translations = translate_batches(
        translator,
        [[sources[number] for number in batch] for batch in batches],
        beam=args.beam,
        length_penalty=args.length_penalty,
        max_len_a=args.max_len_a,
        max_len_b=args.max_len_b,
    )
    outputs = [""] * len(lines)  # an empty line stays empty
    done = 0
    for batch in batches:
        try:
            hypotheses = next(translations)
        except RuntimeError as error:  # CTranslate2's, e.g. a length beyond the exported position table
            longest = batch[-1]
            raise VaswaniConfigError(
                f"line {longest + 1} ({len(sources[longest])} subwords, the longest of its "
                f"batch of {len(batch)}): {error}"
            ) from None
        for number, tokens in zip(batch, hypotheses):
            outputs[number] = pipeline.decode(tokens)
        done += len(batch)
        if time.perf_counter() - reported > 10:
            reported = time.perf_counter()
            print(f"translated {done}/{len(order)} lines", file=sys.stderr, flush=True)
    sys.stdout.write("".join(output + "\n" for output in outputs))
    seconds = time.perf_counter() - start
    print(
        f"translated {len(lines)} lines in {seconds:.1f} s ({len(lines) / max(seconds, 1e-9):.1f} lines/s; "
        f"beam {args.beam}, compute type {translator.compute_type})",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
