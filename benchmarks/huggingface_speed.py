"""Beam-4 BLEU and sentences/s of the transformers export against the plugin's own decoding, on one model.

    python benchmarks/huggingface_speed.py --checkpoint work/quickstart/checkpoints/checkpoint_average.pt \\
        --data work/quickstart/data/data-bin --bpe-codes work/quickstart/data/bpe/codes \\
        --source RAW_TEST.en --reference RAW_TEST.de [--sentences 1000] [--threads 2]

In one process, on the first --sentences test sentences of the data-bin, batches of --batch-size in fairseq's
length order, at most input + 50 tokens: the plugin's --search paper (§6.1: GNMT alpha 0.6, early stop) and the
exported MarianMTModel under transformers' generate (beam 4, the export's generation config, the same token ids,
max_new_tokens = the batch's longest input + 51); then the exported directory on the raw source lines (its
tokenizer, generate, batch_decode: translate_raw), tokenisation included. BLEU: sacreBLEU of the detokenised
output against --reference. Last, how many hypotheses of generate equal --search paper's for each
--length-penalties value (the export's default is chosen from these). Ratios are transformers / plugin.
"""

import argparse
import gzip
import tempfile
import time
from pathlib import Path

from common import PAPER  # §6.1's beam, α and length limit (vaswani_plugin/paper.py)


def read_lines(path, count):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for _, line in zip(range(count), lines)]


def batches(task, count, batch_size):
    """The data-bin's first `count` test sentences in fairseq-generate's batches (every sentence, none dropped)."""
    task.load_dataset("test")
    dataset = task.dataset("test")
    indices = [i for i in dataset.ordered_indices() if i < count]
    return [
        dataset.collater([dataset[i] for i in indices[start : start + batch_size]])
        for start in range(0, len(indices), batch_size)
    ]


def plugin_decode(model, task, samples, alpha):
    import torch

    from vaswani_plugin.generation.beam_search import BeamSearchGenerator

    generator = BeamSearchGenerator(
        [model],
        task.target_dictionary,
        beam_size=PAPER.BEAM,
        max_len_a=PAPER.MAX_LEN_A,
        max_len_b=PAPER.MAX_LEN_B,
        gnmt_alpha=alpha,
    )
    out = {}
    with torch.no_grad():
        for sample in samples:
            for sentence_id, hypotheses in zip(sample["id"].tolist(), generator.generate([model], sample)):
                out[sentence_id] = hypotheses[0]["tokens"].tolist()
    return out


def right_padded(net_input, pad):
    """A fairseq batch's sources (padded on the left) padded on the right, as transformers' tokenizers pad them;
    and the longest source's length (</s> included)."""
    import torch

    left, lengths = net_input["src_tokens"], net_input["src_lengths"]
    right = torch.full_like(left, pad)
    for row, n in enumerate(lengths.tolist()):
        right[row, :n] = left[row, left.size(1) - n :]
    return right, int(lengths.max())


def until_eos(output, eos):
    """generate's rows as fairseq's hypotheses: after the start token, up to and with </s> (padding dropped)."""
    rows = [row[1:] for row in output.tolist()]
    return [row[: row.index(eos) + 1] if eos in row else row for row in rows]


def marian_decode(marian, samples, pad, eos, **options):
    import torch

    out = {}
    with torch.no_grad():
        for sample in samples:
            ids, longest = right_padded(sample["net_input"], pad)
            output = marian.generate(
                input_ids=ids, attention_mask=ids.ne(pad), max_new_tokens=longest + PAPER.MAX_LEN_B + 1, **options
            )
            out.update(zip(sample["id"].tolist(), until_eos(output, eos)))
    return out


def translate_raw(directory, lines, batch_size=128, **options):
    """Raw lines through an exported directory as transformers 4's pipeline("translation") did (transformers 5
    removed it): AutoTokenizer, AutoModelForSeq2SeqLM's generate, batch_decode without special tokens; at most
    the batch's longest input + 50 tokens before </s> (§6.1) unless max_new_tokens is given."""
    import torch

    from vaswani_plugin.serving.export_huggingface import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(directory).eval()
    out = []
    for start in range(0, len(lines), batch_size):
        batch = tokenizer(lines[start : start + batch_size], return_tensors="pt", padding=True)
        with torch.no_grad():
            limit = {"max_new_tokens": batch["input_ids"].size(1) + PAPER.MAX_LEN_B + 1, **options}
            out += tokenizer.batch_decode(model.generate(**batch, **limit), skip_special_tokens=True)
    return out


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="benchmarks/huggingface_speed.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--checkpoint", required=True, help="a vaswani_transformer checkpoint")
    parser.add_argument("--data", required=True, help="its data-bin, with the test split")
    parser.add_argument("--bpe-codes", required=True, help="the subword-nmt codes the data-bin was made with")
    parser.add_argument("--source", required=True, help="raw source lines of the test split (.gz or text)")
    parser.add_argument("--reference", required=True, help="raw reference lines of the test split")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--length-penalties", type=float, nargs="*", default=[0.4, 0.6, 0.8, 1.0, 1.2])
    args = parser.parse_args(argv)

    import sacrebleu
    import torch

    from vaswani_plugin.serving import export_huggingface
    from vaswani_plugin.serving.loading import load_model
    from vaswani_plugin.serving.text import TextPipeline

    torch.set_num_threads(args.threads)
    task, model = load_model(args.checkpoint, args.data, option="--checkpoint")
    source_lang, target_lang = task.cfg.source_lang, task.cfg.target_lang
    dictionary = task.target_dictionary
    samples = batches(task, args.sentences, args.batch_size)
    sources = read_lines(args.source, args.sentences)
    references = read_lines(args.reference, args.sentences)
    text = TextPipeline(source_lang, target_lang, bpe_codes=args.bpe_codes)

    def detokenised(hypotheses):
        return [
            text.decode(
                dictionary.string(
                    torch.tensor(hypotheses[i][:-1] if hypotheses[i][-1:] == [dictionary.eos()] else hypotheses[i])
                ).split()
            )
            for i in range(len(sources))
        ]

    def bleu(lines):
        return sacrebleu.corpus_bleu(lines, [references]).score

    with tempfile.TemporaryDirectory() as directory:
        export_huggingface.export(
            model,
            task.source_dictionary,
            dictionary,
            Path(directory) / "model",
            source_lang=source_lang,
            target_lang=target_lang,
            bpe_codes=args.bpe_codes,
        )
        marian = export_huggingface.MarianMTModel.from_pretrained(Path(directory) / "model").eval()

        plugin, plugin_seconds = timed(plugin_decode, model, task, samples, PAPER.ALPHA)
        exported, marian_seconds = timed(marian_decode, marian, samples, dictionary.pad(), dictionary.eos())
        pipeline_lines, pipeline_seconds = timed(translate_raw, Path(directory) / "model", sources, args.batch_size)
        rows = [
            ("plugin --search paper (fairseq-generate)", plugin_seconds, bleu(detokenised(plugin))),
            ("transformers generate, exported", marian_seconds, bleu(detokenised(exported))),
            ("transformers on raw text (tokenizer included)", pipeline_seconds, bleu(pipeline_lines)),
        ]
        print(f"{len(sources)} sentences, beam {PAPER.BEAM}, {args.threads} threads, batches of {args.batch_size}")
        for name, seconds, score in rows:
            print(
                f"  {name:42s} {len(sources) / seconds:8.1f} sent/s  {seconds / plugin_seconds:5.2f}x time  "
                f"sacreBLEU {score:.2f}"
            )
        agree = sum(exported[i] == plugin[i] for i in plugin)
        print(
            f"  generate (length_penalty {export_huggingface.LENGTH_PENALTY}) = --search paper on {agree} of "
            f"{len(plugin)}"
        )
        for penalty in args.length_penalties:
            found = marian_decode(marian, samples, dictionary.pad(), dictionary.eos(), length_penalty=penalty)
            print(
                f"  length_penalty {penalty}: --search paper's hypothesis on "
                f"{sum(found[i] == plugin[i] for i in plugin)} of {len(plugin)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
