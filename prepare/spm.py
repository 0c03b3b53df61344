"""Word-pieces with sentencepiece: train a model, encode text with it, write its fairseq dictionary.

    python -m prepare.spm train --vocab-size 32000 -i tok/train.en tok/train.fr --model-prefix spm/spm
    python -m prepare.spm encode --model spm/spm.model -i tok/test.en -o spm/test.en [--workers N]
    python -m prepare.spm dict --model spm/spm.model -o spm/dict.txt

§5.1 gives En-Fr "a 32000 word-piece vocabulary". Here the model is trained jointly on both sides of the
Moses-tokenised training text (the same tokenisation as En-De, so both pairs are scored the same way:
decoded pieces are Moses tokens again, detokenised by MosesDetokenizer). Training reads a random sample
of --sample sentences (default 5M; sentencepiece holds the sample in memory, and the 2 x 36M lines of
WMT14 En-Fr would not fit), with character_coverage 0.9999 (the rarest characters become <unk>) and the
unigram model (--model-type bpe for merges). The vocabulary has exactly --vocab-size pieces,
sentencepiece's <unk>, <s>, </s> included; `dict` writes the other vocab-size - 3 pieces as a fairseq
dictionary (fairseq adds its own 4 special symbols: vocab-size + 1 entries), used with fairseq-preprocess
--srcdict --joined-dictionary so that the embedding matrix covers exactly this vocabulary. fairseq's
`--post-process sentencepiece` undoes the encoding.
"""

from pathlib import Path
from typing import List

import sentencepiece

from ._common import ArgumentParser, PrepareError, available_cores, display, log, map_lines, positive_int, run_cli

SPECIALS = ("<unk>", "<s>", "</s>")


def train(
    inputs: List,
    model_prefix,
    vocab_size: int,
    model_type: str = "unigram",
    sample: int = 5_000_000,
    character_coverage: float = 0.9999,
    threads: int = 1,
) -> Path:
    """Train on all `inputs` (one sentence per line); writes model_prefix.model and .vocab."""
    for path in inputs:
        if not Path(path).is_file():
            raise PrepareError(f"{path} does not exist")
    Path(model_prefix).parent.mkdir(parents=True, exist_ok=True)
    log(
        f"  train sentencepiece ({model_type}): {vocab_size:,} pieces, on at most {sample:,} sampled "
        f"sentences of {', '.join(map(str, inputs))}"
    )
    try:
        sentencepiece.SentencePieceTrainer.train(
            input=[str(path) for path in inputs],
            model_prefix=str(model_prefix),
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            input_sentence_size=sample,
            shuffle_input_sentence=True,
            num_threads=threads,
            minloglevel=2,
        )
    except (RuntimeError, OSError) as error:
        # e.g. "Vocabulary size is too high (32000). Please set it to a value <= 1234."
        raise PrepareError(f"sentencepiece training failed: {str(error).strip().splitlines()[-1]}") from None
    model = Path(f"{model_prefix}.model")
    log(f"  wrote {model} ({load(model).get_piece_size():,} pieces)")
    return model


def load(model) -> sentencepiece.SentencePieceProcessor:
    if not Path(model).is_file():
        raise PrepareError(f"{model} does not exist: train it first (python -m prepare.spm train)")
    return sentencepiece.SentencePieceProcessor(model_file=str(model))


class Encoder:
    """Callable: one line of text -> space-separated pieces."""

    def __init__(self, model: str):
        self.processor = sentencepiece.SentencePieceProcessor(model_file=model)

    def __call__(self, line: str) -> str:
        return " ".join(self.processor.encode(line, out_type=str))


def encode_file(model, source, target, workers: int = 1, label=None) -> int:
    load(model)  # a clear error if it is missing
    return map_lines(Encoder, (str(model),), source, target, workers, label or f"encode {display(source)}")


def write_fairseq_dict(model, target) -> int:
    """A fairseq dictionary of the model's pieces but <unk>, <s>, </s> (fairseq has its own), in model
    order; the counts are pseudo-counts (vocab size - id), which fairseq only uses for sorting. Returns the
    number of entries written."""
    processor = load(model)
    size = processor.get_piece_size()
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(target, "w", encoding="utf-8", newline="\n") as out:
        for index in range(size):
            piece = processor.id_to_piece(index)
            if piece in SPECIALS or processor.is_control(index) or processor.is_unknown(index):
                continue
            out.write(f"{piece} {size - index}\n")
            written += 1
    return written


def main(argv=None) -> None:
    parser = ArgumentParser(prog="python -m prepare.spm", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train_cmd = commands.add_parser("train", help="train a sentencepiece model")
    train_cmd.add_argument("-i", "--input", nargs="+", required=True, help="training text (source and target)")
    train_cmd.add_argument("--model-prefix", required=True, help="writes PREFIX.model and PREFIX.vocab")
    train_cmd.add_argument("--vocab-size", type=positive_int, default=32000)
    train_cmd.add_argument("--model-type", choices=["unigram", "bpe"], default="unigram")
    train_cmd.add_argument(
        "--sample", type=positive_int, default=5_000_000, help="sentences sampled for training (default 5M)"
    )
    train_cmd.add_argument("--character-coverage", type=float, default=0.9999)
    train_cmd.add_argument("--threads", type=positive_int, default=available_cores())
    encode_cmd = commands.add_parser("encode", help="encode text into pieces")
    encode_cmd.add_argument("--model", required=True)
    encode_cmd.add_argument("-i", "--input", default="-", help="input file (default: stdin)")
    encode_cmd.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    encode_cmd.add_argument("--workers", type=positive_int, default=available_cores())
    dict_cmd = commands.add_parser("dict", help="write the model's vocabulary as a fairseq dictionary")
    dict_cmd.add_argument("--model", required=True)
    dict_cmd.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    if args.command == "train":
        train(
            args.input,
            args.model_prefix,
            args.vocab_size,
            args.model_type,
            args.sample,
            args.character_coverage,
            args.threads,
        )
    elif args.command == "encode":
        encode_file(args.model, args.input, args.output, args.workers)
    else:
        log(f"  {write_fairseq_dict(args.model, args.output):,} pieces written to {args.output}")


if __name__ == "__main__":
    run_cli(main)
