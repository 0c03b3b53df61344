"""Speed of vaswani_transformer against fairseq's own `transformer`, on the same computation.

    python benchmarks/speed.py --data work/quickstart/data/data-bin [--checkpoint FAIRSEQ.pt] [--sizes small base]
    python benchmarks/speed.py --smoke          # seconds: a tiny model on synthetic data (CI)

For each size, fairseq's model is loaded from --checkpoint (a fairseq `transformer` checkpoint of that size) or
else trained for --pretrain-steps updates here (trained weights: an untrained model runs every hypothesis to the
length limit, which is not how decoding spends its time), and converted with
vaswani_plugin.checkpoints.convert_fairseq, so both start from the same weights and compute the same function.
Then, each implementation in its own process (so that peak memory is its own):
- training: --warmup updates, then target tokens/s over --updates updates (Adam, label smoothing 0.1, each
  with its own criterion: vaswani_label_smoothed_cross_entropy / fairseq's label_smoothed_cross_entropy);
  peak memory: max RSS of the process on CPU, torch.cuda.max_memory_allocated on GPU;
- generation over the first --sentences test sentences, batches of 128, at most input + 50 tokens: beam 4 and
  greedy, sentences/s and generated tokens/s, by fairseq's SequenceGenerator on each model and by the task's
  two searches on the plugin's model: `--search fairseq` (fairseq's generator as the task builds it, whose
  hypotheses must be fairseq's: checked, printed) and `--search paper` (vaswani_plugin.generation.beam_search,
  §6.1: GNMT α = 0.6, early stop, each sentence's own limit; other hypotheses, their mean GNMT score printed).
- CTranslate2 (vaswani_plugin.serving.export_ctranslate2; not with --no-ctranslate2) on the plugin's model, exported
  with float32 and with int8 weights, on 1 thread, 2 threads a batch and 2 batches at once (a thread each), in a
  process of its own: the same batches, beam 4 and greedy, length penalty 1 (fairseq-generate's --lenpen 1) and the
  same limit; how many of its hypotheses are the plugin's; BLEU of the plugin's beam 4 and of both exports
  (sacrebleu, tokenize none: on the data's Moses tokens with the BPE joined, against the test references so
  written); and how often each
  length_penalty finds the hypothesis of the plugin's --search paper (GNMT alpha 0.6).
On GPU (--device cuda) with --amp, fp16 autocast; the model FLOP utilisation (model FLOPs per second / the
GPU's peak) is printed for training. With --bf16-autocast on (or auto, on a CPU that multiplies bfloat16
natively: vaswani_plugin.precision decides, as for the task's option), the plugin's training steps run under
bfloat16 autocast. Ratios are plugin / fairseq.
"""

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from argparse import Namespace
from pathlib import Path

from common import PAPER, REPO, SIZES  # SIZES: d_model, d_ff, h, N; small = the quickstart's, base and big = Table 3's


def fairseq_args(size: str) -> Namespace:
    from fairseq.models.transformer import base_architecture

    dim, ffn, heads, layers = SIZES[size]
    args = Namespace(
        encoder_embed_dim=dim,
        decoder_embed_dim=dim,
        encoder_ffn_embed_dim=ffn,
        decoder_ffn_embed_dim=ffn,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_layers=layers,
        decoder_layers=layers,
        share_all_embeddings=True,
        dropout=0.1,
        arch="transformer",
    )
    base_architecture(args)
    return args


def load_data(spec):
    """(dictionary, train dataset, test dataset): the binarised data, or synthetic sentences (--smoke)."""
    import torch
    from fairseq.data import Dictionary, LanguagePairDataset

    if spec["data"]:
        from fairseq.tasks.translation import TranslationConfig, TranslationTask

        # These three refer to fairseq's global config, which only its command line resolves: fairseq's defaults.
        config = TranslationConfig(
            data=spec["data"], dataset_impl="mmap", required_seq_len_multiple=1, train_subset="train"
        )
        task = TranslationTask.setup_task(config)
        for split in ("train", "test"):
            task.load_dataset(split)
        return task.source_dictionary, task.dataset("train"), task.dataset("test")
    dictionary = Dictionary()
    for index in range(200):
        dictionary.add_symbol(f"w{index}")
    generator = torch.Generator().manual_seed(0)

    def sentences(count):
        lengths = torch.randint(3, 20, (count,), generator=generator).tolist()
        tokens = [
            torch.cat([torch.randint(4, len(dictionary), (n,), generator=generator), torch.tensor([dictionary.eos()])])
            for n in lengths
        ]
        return tokens, [len(t) for t in tokens]

    def dataset(count):
        (src, src_sizes), (tgt, tgt_sizes) = sentences(count), sentences(count)
        return LanguagePairDataset(src, src_sizes, dictionary, tgt, tgt_sizes, dictionary, shuffle=False)

    return dictionary, dataset(400), dataset(64)


def build_model(spec, dictionary):
    """(model, fairseq args): fairseq's model, or (spec["impl"] == "vaswani_transformer") its conversion."""
    import torch
    from fairseq.models.transformer import TransformerModel

    from vaswani_plugin.checkpoints.convert_fairseq import convert_state, fairseq_options, vaswani_config
    from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerConfig, VaswaniTransformerModel

    task = Namespace(source_dictionary=dictionary, target_dictionary=dictionary)
    if spec["checkpoint"]:
        state = torch.load(spec["checkpoint"], map_location="cpu", weights_only=True)  # after vaswani_plugin.register()
        args = state["cfg"]["model"]
    else:
        torch.manual_seed(1)
        args, state = fairseq_args(spec["size"]), None
    fairseq_model = TransformerModel.build_model(args, task)
    if state is not None:
        fairseq_model.load_state_dict(state["model"])
    if spec["impl"] == "transformer":
        return fairseq_model, args
    options = fairseq_options(args)
    config = {k: v for k, v in vaswani_config(options).items() if k != "_name"}
    model = VaswaniTransformerModel.build_model(VaswaniTransformerConfig(**config), task)
    model.load_state_dict(convert_state(fairseq_model.state_dict(), options, dictionary.pad()))
    return model, args


def to_device(sample, device):
    """A fairseq sample (nested dicts of tensors) on `device`."""
    import torch

    return {
        k: to_device(v, device) if isinstance(v, dict) else v.to(device) if torch.is_tensor(v) else v
        for k, v in sample.items()
    }


def training_flops(args, dictionary, sample) -> float:
    """Model FLOPs of one training step (3 x forward, matrix products only), non-padding tokens."""
    d, ff, vocab = args.encoder_embed_dim, args.encoder_ffn_embed_dim, len(dictionary)
    src = sample["net_input"]["src_tokens"]
    src_tokens = int(src.ne(dictionary.pad()).sum())
    tgt_tokens, src_len, tgt_len = int(sample["ntokens"]), src.size(1), sample["target"].size(1)
    encoder = args.encoder_layers * src_tokens * (8 * d * d + 4 * d * ff + 4 * d * src_len)
    decoder = args.decoder_layers * (
        tgt_tokens * (12 * d * d + 4 * d * ff + 4 * d * tgt_len + 4 * d * src_len) + src_tokens * 4 * d * d
    )
    return 3.0 * (encoder + decoder + tgt_tokens * 2 * d * vocab)


def worker(spec) -> dict:
    import torch
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    import vaswani_plugin

    vaswani_plugin.register()  # what --user-dir does: the model, task and criterion in fairseq's registries
    from vaswani_plugin.criterions.vaswani_label_smoothed_cross_entropy import VaswaniLabelSmoothedCrossEntropy
    from vaswani_plugin.models.output_layer_loss import chunk_logits_for
    from vaswani_plugin.tools.training_cost import peak_for

    device = torch.device(spec["device"])
    dictionary, train, test = load_data(spec)
    task = Namespace(source_dictionary=dictionary, target_dictionary=dictionary)
    model, args = build_model(spec, dictionary)
    model = model.to(device)
    if spec["impl"] == "transformer":
        criterion = LabelSmoothedCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=PAPER.LABEL_SMOOTHING)
    else:
        criterion = VaswaniLabelSmoothedCrossEntropy(
            task, label_smoothing=PAPER.LABEL_SMOOTHING, sentence_avg=False, loss_chunk_logits=spec["loss_chunk_logits"]
        )

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize()

    # Training.
    batches = train.batch_by_size(train.ordered_indices(), max_tokens=spec["max_tokens"])
    order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(0)).tolist()
    steps = spec["warmup"] + spec["updates"]
    samples = [to_device(train.collater([train[i] for i in batches[j]]), device) for j in (order * steps)[:steps]]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=PAPER.ADAM_BETAS, eps=PAPER.ADAM_EPS)
    scaler = torch.amp.GradScaler("cuda", enabled=spec["amp"])
    precision = dict(dtype=torch.float16, enabled=spec["amp"])
    if spec["bf16_autocast"] and spec["impl"] == "vaswani_transformer":  # as its task's --bf16-autocast trains
        precision = dict(dtype=torch.bfloat16, enabled=True)
    model.train()
    tokens = flops = 0.0
    for step, sample in enumerate(samples):
        if step == spec["warmup"]:
            synchronize()
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
        with torch.autocast(device.type, **precision):
            loss, _, _ = criterion(model, sample)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if step >= spec["warmup"]:
            tokens += sample["ntokens"]
            flops += training_flops(args, dictionary, sample)
    synchronize()
    seconds = time.perf_counter() - start
    result = {"train_tokens_per_s": tokens / seconds}
    if spec["impl"] == "vaswani_transformer":
        rows = max(1, (criterion.loss_chunk_logits or chunk_logits_for(device)) // len(dictionary))
        result["loss_chunks"] = sum(-(-sample["ntokens"] // rows) for sample in samples) / len(samples)
    if device.type == "cuda":
        result["peak_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
        peak = peak_for(torch.cuda.get_device_name(0), "amp" if spec["amp"] else "fp32")
        if peak:
            result["mfu"] = flops / seconds / (peak * 1e12)
    else:
        result["peak_memory_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    # Generation: the first --sentences test sentences, batches of 128, from the starting weights again (the two
    # trainings drew different dropout masks, so only the starting weights are the same).
    model = build_model(spec, dictionary)[0].to(device).eval()
    indices = list(range(min(spec["sentences"], len(test))))
    batches = [
        to_device(test.collater([test[i] for i in indices[first : first + 128]]), device)
        for first in range(0, len(indices), 128)
    ]
    for generator_name, generator_class, options in generators(spec["impl"]):
        for name, beam in (("beam4", PAPER.BEAM), ("greedy", 1)):
            generator = generator_class(
                [model], dictionary, beam_size=beam, max_len_a=PAPER.MAX_LEN_A, max_len_b=PAPER.MAX_LEN_B, **options
            )
            outputs, generated, score = [], 0, 0.0
            with torch.no_grad(), torch.autocast(device.type, dtype=torch.float16, enabled=spec["amp"]):
                warm_up = to_device(test.collater([test[i] for i in indices[:8]]), device)
                generator.generate([model], warm_up)
                synchronize()
                start = time.perf_counter()
                for sample in batches:
                    for hypotheses in generator.generate([model], sample):
                        best = hypotheses[0]
                        outputs.append(best["tokens"].tolist())
                        generated += len(outputs[-1])
                        score += gnmt_score(best, PAPER.ALPHA)
                synchronize()
            seconds = time.perf_counter() - start
            key = f"{generator_name}_{name}"
            result[f"{key}_sentences_per_s"] = len(indices) / seconds
            result["sentences"] = len(indices)
            result[f"{key}_tokens_per_s"] = generated / seconds
            result[f"{key}_hypotheses"] = hash(json.dumps(outputs))
            result[f"{key}_mean_gnmt_score"] = score / len(indices)
    if spec["impl"] == "vaswani_transformer":
        result["beam4_split"] = decoding_split(model, dictionary, batches, synchronize)
    return result


def decoding_split(model, dictionary, batches, synchronize) -> dict:
    """Seconds of the task's beam-4 search (--search fairseq) over `batches`, and of its calls to the decoder
    (the layers and the output projection) and to the output projection alone: what any search over this model
    must still spend. Measured in a run of its own, so that the timers do not touch the figures above."""
    import torch

    from vaswani_plugin.generation.generators import PlainSequenceGenerator

    seconds = {"decoder": 0.0, "projection": 0.0}

    def timed(name, function):
        def call(*args, **kwargs):
            synchronize()
            start = time.perf_counter()
            out = function(*args, **kwargs)
            synchronize()
            seconds[name] += time.perf_counter() - start
            return out

        return call

    decoder, projection = model.decoder, model.decoder.output_projection
    decoder.forward, projection.forward = timed("decoder", decoder.forward), timed("projection", projection.forward)
    generator = PlainSequenceGenerator(
        [model], dictionary, beam_size=PAPER.BEAM, max_len_a=PAPER.MAX_LEN_A, max_len_b=PAPER.MAX_LEN_B
    )
    try:
        with torch.no_grad():
            synchronize()
            start = time.perf_counter()
            for sample in batches:
                generator.generate([model], sample)
            synchronize()
            seconds["total"] = time.perf_counter() - start
    finally:
        del decoder.forward, projection.forward  # the instance attributes: the classes' methods again
    return seconds


def generators(impl):
    """(name, class, options) of the generators measured on an implementation's model."""
    from fairseq.sequence_generator import SequenceGenerator

    from vaswani_plugin.generation.beam_search import BeamSearchGenerator
    from vaswani_plugin.generation.generators import PlainSequenceGenerator

    if impl == "transformer":
        return [("fairseq_generator", SequenceGenerator, {})]
    return [
        ("fairseq_generator", SequenceGenerator, {}),
        ("search_fairseq", PlainSequenceGenerator, {}),
        ("search_paper", BeamSearchGenerator, {"gnmt_alpha": PAPER.ALPHA}),
    ]


def gnmt_score(hypothesis, alpha: float) -> float:
    """The hypothesis's GNMT score log P / ((5+|Y|)/6)^alpha, whatever its generator ranked it by."""
    from vaswani_plugin.generation.length import gnmt_length_penalty

    return float(hypothesis["positional_scores"].sum()) / gnmt_length_penalty(len(hypothesis["tokens"]), alpha)


def pretrain(spec) -> dict:
    """Train fairseq's model for spec["steps"] updates (Adam, eq. 3's warmup then inverse square root, label
    smoothing 0.1) and save it as a checkpoint build_model reads; returns the last updates' mean loss."""
    import torch
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    import vaswani_plugin

    vaswani_plugin.register()  # what --user-dir does: the model, task and criterion in fairseq's registries

    device = torch.device(spec["device"])  # on the GPU too: 300 base updates on its host's CPU took minutes
    dictionary, train, _ = load_data(spec)
    model, args = build_model(dict(spec, impl="transformer", checkpoint=None), dictionary)
    model = model.to(device)
    criterion = LabelSmoothedCrossEntropyCriterion(
        Namespace(target_dictionary=dictionary), sentence_avg=False, label_smoothing=PAPER.LABEL_SMOOTHING
    )
    batches = train.batch_by_size(train.ordered_indices(), max_tokens=spec["max_tokens"])
    order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(0)).tolist()
    # The quickstart's schedule (eq. 3 scaled by 0.7, peak at step 300), its warmup shortened to a third.
    peak = 0.7 * args.encoder_embed_dim**-0.5 * 300**-0.5
    warmup = max(1, spec["steps"] // 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=peak, betas=PAPER.ADAM_BETAS, eps=PAPER.ADAM_EPS)
    model.train()
    losses = []
    for step in range(1, spec["steps"] + 1):
        for group in optimizer.param_groups:
            group["lr"] = peak * min(step / warmup, (warmup / step) ** 0.5)
        batch = batches[order[step % len(order)]]
        loss, _, log = criterion(model, to_device(train.collater([train[i] for i in batch]), device))
        (loss / log["ntokens"]).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(log["nll_loss"]) / log["ntokens"] / 0.6931)
    torch.save({"cfg": {"model": args}, "model": model.state_dict()}, spec["pretrain_to"])
    return {"nll_loss": sum(losses[-20:]) / len(losses[-20:])}


def measure(spec) -> dict:
    """One implementation's figures, measured in a fresh process."""
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", PYTHONHASHSEED="0")
    done = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        sys.exit(f"speed: {spec['impl']} ({spec['size']}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="benchmarks/speed.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", help="fairseq data-bin with train and test splits (a joined dictionary)")
    parser.add_argument("--checkpoint", help="a fairseq `transformer` checkpoint to start from (one size only)")
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["small", "base"])
    parser.add_argument("--device", default="cuda" if _cuda() else "cpu", choices=["cpu", "cuda"])
    parser.add_argument("--amp", action="store_true", help="fp16 autocast (GPU)")
    parser.add_argument(
        "--bf16-autocast",
        choices=["auto", "on", "off"],
        nargs="?",
        const="on",
        default="off",
        help="the plugin's training steps under bfloat16 autocast, as its task's --bf16-autocast "
        "(the same values, decided by the same function; a bare --bf16-autocast is on) trains; "
        "fairseq's stay float32, as fairseq trains on a CPU. Not the same computation: the "
        "training ratio is then the quickstart's, not the converter's (generation stays fp32)",
    )
    parser.add_argument("--max-tokens", type=int, default=4096, help="tokens per training batch")
    parser.add_argument(
        "--loss-chunk-logits",
        type=int,
        default=0,
        help="logits per chunk of the plugin's output layer and loss (the criterion's option); "
        "0: by device, as training chooses",
    )
    parser.add_argument("--warmup", type=int, default=5, help="untimed training updates first")
    parser.add_argument("--updates", type=int, default=20, help="timed training updates")
    parser.add_argument("--sentences", type=int, default=512, help="test sentences to translate")
    parser.add_argument(
        "--pretrain-steps",
        type=int,
        default=300,
        help="without --checkpoint: train fairseq's model this many updates first (batches of "
        "--max-tokens), so that generation runs on trained weights",
    )
    parser.add_argument(
        "--ctranslate2",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="CTranslate2's rows (default); --no-ctranslate2 leaves them out (GPU kit: no ctranslate2)",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and counts, synthetic data: seconds")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        spec = json.loads(args.worker)
        print(
            json.dumps(
                pretrain(spec)
                if spec.get("pretrain_to")
                else ctranslate2_worker(spec)
                if spec["impl"] == "ctranslate2"
                else worker(spec)
            )
        )
        return
    if args.smoke:
        args.sizes, args.data, args.checkpoint = ["tiny"], None, None
        args.max_tokens, args.warmup, args.updates, args.sentences, args.pretrain_steps = 512, 1, 2, 16, 3
    elif not args.data:
        parser.error("--data DATA_BIN is needed (or --smoke); e.g. the quickstart's work/quickstart/data/data-bin")
    elif not all(any(Path(args.data).glob(f"{split}.*.bin")) for split in ("train", "test")):
        parser.error(f"--data {args.data}: no binarised train and test splits there (fairseq-preprocess output)")
    if args.checkpoint and len(args.sizes) != 1:
        parser.error("--checkpoint fixes the model: give the one --sizes it has")
    if args.amp and args.device != "cuda":
        parser.error("--amp is for GPUs (--device cuda)")
    if args.ctranslate2 and importlib.util.find_spec("ctranslate2") is None:
        parser.error("ctranslate2 is not installed (the [ctranslate2] extra): install it, or pass --no-ctranslate2")
    from vaswani_plugin import VaswaniConfigError
    from vaswani_plugin.precision import bf16_autocast_enabled, precision_line

    amp = "--amp" if args.amp else None
    try:
        bf16_autocast, reason = bf16_autocast_enabled(args.bf16_autocast, args.device, amp)
    except VaswaniConfigError:
        parser.error("--amp and --bf16-autocast are two precisions: choose one")

    import torch

    from vaswani_plugin.models.output_layer_loss import chunk_logits_for

    device = torch.cuda.get_device_name(0) if args.device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    chunk_logits = args.loss_chunk_logits or chunk_logits_for(torch.device(args.device))
    precision = "fp16 AMP" if args.amp else "fp32, the plugin's training in bf16 autocast" if bf16_autocast else "fp32"
    print(
        f"device: {device}; torch {torch.__version__}; {precision}; training batches of "
        f"{args.max_tokens} tokens, {args.updates} timed updates after {args.warmup}; the plugin's loss in chunks "
        f"of {chunk_logits:,} logits ({'--loss-chunk-logits' if args.loss_chunk_logits else 'by device'}); "
        f"generation of {args.sentences} sentences, batches of 128, max length input + {PAPER.MAX_LEN_B}"
    )
    print(f"the plugin's training {precision_line(bf16_autocast, reason, amp)}")
    print(
        "generation by the plugin's model: the task's default (--search fairseq, fairseq's generator); below, "
        "every generator"
    )
    columns = [
        ("train_tokens_per_s", "train tok/s"),
        ("peak_memory_mb", "peak MB"),
        ("beam4_sentences_per_s", "beam4 sent/s"),
        ("beam4_tokens_per_s", "beam4 tok/s"),
        ("greedy_sentences_per_s", "greedy sent/s"),
        ("greedy_tokens_per_s", "greedy tok/s"),
    ]
    print(f"{'size':6} {'implementation':22}" + "".join(f"{title:>15}" for _, title in columns) + f"{'MFU':>8}")
    # Each implementation's generation as a user gets it: fairseq's generator, the task's default search.
    own = {"transformer": "fairseq_generator", "vaswani_transformer": "search_fairseq"}
    with tempfile.TemporaryDirectory() as scratch:
        for size in args.sizes:
            checkpoint = args.checkpoint
            common = dict(size=size, data=args.data, device=args.device, max_tokens=args.max_tokens)
            if not checkpoint and args.pretrain_steps:
                checkpoint = str(Path(scratch) / f"{size}.pt")
                trained = measure(dict(common, impl="pretrain", steps=args.pretrain_steps, pretrain_to=checkpoint))
                print(
                    f"{size:6} fairseq's transformer trained {args.pretrain_steps} updates here: nll loss "
                    f"{trained['nll_loss']:.2f} bits per token over the last 20"
                )
            results = {}
            for impl in ("transformer", "vaswani_transformer"):
                spec = dict(
                    common,
                    impl=impl,
                    checkpoint=checkpoint,
                    amp=args.amp,
                    bf16_autocast=bf16_autocast,
                    loss_chunk_logits=args.loss_chunk_logits,
                    warmup=args.warmup,
                    updates=args.updates,
                    sentences=args.sentences,
                )
                results[impl] = measure(spec)
                for key in ("beam4", "greedy"):
                    for unit in ("sentences_per_s", "tokens_per_s", "hypotheses"):
                        results[impl][f"{key}_{unit}"] = results[impl][f"{own[impl]}_{key}_{unit}"]
            for impl, row in results.items():
                mfu = f"{100 * row['mfu']:7.1f}%" if "mfu" in row else f"{'-':>8}"
                print(f"{size:6} {impl:22}" + "".join(f"{row[key]:15.1f}" for key, _ in columns) + mfu)
            ours, theirs = results["vaswani_transformer"], results["transformer"]
            print(
                f"{size:6} {'ratio plugin/fairseq':22}"
                + "".join(f"{ours[key] / theirs[key]:15.2f}" for key, _ in columns)
            )
            same = all(ours[f"{name}_hypotheses"] == theirs[f"{name}_hypotheses"] for name in ("beam4", "greedy"))
            print(
                f"{size:6} same hypotheses (beam 4 and greedy): {'yes' if same else 'NO'}; the plugin's loss took "
                f"{ours['loss_chunks']:.1f} chunks per training batch"
            )
            print_generators(size, results)
            print_split(size, results)
            if args.ctranslate2:
                ctranslate2 = measure(dict(common, impl="ctranslate2", checkpoint=checkpoint, sentences=args.sentences))
                print_ctranslate2(size, results, ctranslate2)


def print_generators(size, results):
    """Every generator's sentences/s, its ratio to fairseq-generate (fairseq's generator on fairseq's model),
    whether its hypotheses are fairseq-generate's, and the mean GNMT score (α = 0.6) of the best hypotheses."""
    rows = [
        ("transformer", "fairseq_generator", "transformer, fairseq's SequenceGenerator"),
        ("vaswani_transformer", "fairseq_generator", "vaswani_transformer, fairseq's SequenceGenerator"),
        ("vaswani_transformer", "search_fairseq", "vaswani_transformer, --search fairseq"),
        ("vaswani_transformer", "search_paper", "vaswani_transformer, --search paper"),
    ]
    reference = results["transformer"]
    print(
        f"{'size':6} {'model, generator':50}{'beam4 sent/s':>14}{'ratio':>7}{'greedy sent/s':>15}{'ratio':>7}"
        f"{'same hyps':>11}{'GNMT score':>12}"
    )
    for impl, generator, title in rows:
        row = results[impl]
        figures = ""
        for name in ("beam4", "greedy"):
            speed = row[f"{generator}_{name}_sentences_per_s"]
            figures += f"{speed:{14 if name == 'beam4' else 15}.1f}"
            figures += f"{speed / reference[f'fairseq_generator_{name}_sentences_per_s']:7.2f}"
        same = all(
            row[f"{generator}_{name}_hypotheses"] == reference[f"fairseq_generator_{name}_hypotheses"]
            for name in ("beam4", "greedy")
        )
        print(
            f"{size:6} {title:50}{figures}{'yes' if same else 'no':>11}"
            f"{row[f'{generator}_beam4_mean_gnmt_score']:12.4f}"
        )


def print_split(size, results):
    """What bounds the plugin's beam-4 decoding: the shares of its time and the ratio to fairseq-generate that a
    search costing nothing beside the decoder would reach."""
    split = results["vaswani_transformer"]["beam4_split"]
    fairseq_seconds = (
        results["vaswani_transformer"]["sentences"] / results["transformer"]["fairseq_generator_beam4_sentences_per_s"]
    )
    print(
        f"{size:6} beam 4, --search fairseq: decoder calls {100 * split['decoder'] / split['total']:.0f}% of the "
        f"time (its output projection alone {100 * split['projection'] / split['total']:.0f}%), the search "
        f"around them {100 * (1 - split['decoder'] / split['total']):.0f}%; with a search costing nothing the "
        f"plugin would be at most {fairseq_seconds / split['decoder']:.2f}x fairseq-generate (this run: "
        f"{fairseq_seconds / split['total']:.2f}x, timers on)"
    )


CT2_WEIGHTS = ("float32", "int8")
# (intra_threads, inter_threads): one thread; two threads on each batch; two batches at once, one thread each.
CT2_THREADS = ((1, 1), (2, 1), (1, 2))
CT2_LENGTH_PENALTIES = (0.2, 0.4, 0.5, 0.6, 0.8, 1.0)


def ctranslate2_worker(spec) -> dict:
    """CTranslate2 on the plugin's model (built as the plugin's worker builds it, from the same weights), exported
    by vaswani_plugin.serving.export_ctranslate2 with float32 and int8 weights: beam 4 and greedy over the generators'
    batches (length penalty 1 as theirs, at most input + 50, at least one token), at each of CT2_THREADS (CPU;
    one run on a GPU). Torch keeps to one thread in this process: a torch thread pool that has run beside
    CTranslate2's slowed its 2-thread decoding by a third. Each hypothesis is compared with the plugin's own
    search's (--search fairseq, untimed here); BLEU of the plugin's beam 4 and each export's; and how many of
    float32's hypotheses with each of CT2_LENGTH_PENALTIES are those of the plugin's --search paper (GNMT 0.6)."""
    import torch

    torch.set_num_threads(1)
    import ctranslate2
    from sacrebleu.metrics import BLEU

    import vaswani_plugin

    vaswani_plugin.register()  # what --user-dir does: the model, task and criterion in fairseq's registries
    from vaswani_plugin.generation.beam_search import BeamSearchGenerator
    from vaswani_plugin.generation.generators import PlainSequenceGenerator
    from vaswani_plugin.serving.export_ctranslate2 import export
    from vaswani_plugin.serving.translate_ctranslate2 import translate_batches

    dictionary, _, test = load_data(spec)
    model = build_model(dict(spec, impl="vaswani_transformer"), dictionary)[0].eval()
    indices = list(range(min(spec["sentences"], len(test))))
    samples = [test.collater([test[i] for i in indices[first : first + 128]]) for first in range(0, len(indices), 128)]
    special = {dictionary.pad(), dictionary.eos()}
    sources = [
        [[dictionary[i] for i in row if i not in special] for row in sample["net_input"]["src_tokens"].tolist()]
        for sample in samples
    ]
    plugin = {}
    for name, beam, generator_class, options in (
        ("beam4", PAPER.BEAM, PlainSequenceGenerator, {}),
        ("greedy", 1, PlainSequenceGenerator, {}),
        ("paper", PAPER.BEAM, BeamSearchGenerator, {"gnmt_alpha": PAPER.ALPHA}),
    ):
        generator = generator_class(
            [model], dictionary, beam_size=beam, max_len_a=PAPER.MAX_LEN_A, max_len_b=PAPER.MAX_LEN_B, **options
        )
        with torch.no_grad():
            plugin[name] = [
                hypotheses[0]["tokens"].tolist()
                for sample in samples
                for hypotheses in generator.generate([model], sample)
            ]

    def text(tokens):
        # The collater pads targets, and Dictionary.string would keep their <pad>s.
        return dictionary.string(torch.tensor(tokens), "subword_nmt", extra_symbols_to_ignore={dictionary.pad()})

    def translate(translator, beam, length_penalty=1.0):
        """Every batch's best hypotheses as the generators give them: ids and </s> (fairseq ends a hypothesis at
        the limit with it)."""
        batches = translate_batches(
            translator,
            sources,
            beam=beam,
            length_penalty=length_penalty,
            max_len_a=PAPER.MAX_LEN_A,
            max_len_b=PAPER.MAX_LEN_B,
        )
        return [
            [dictionary.index(token) for token in tokens] + [dictionary.eos()]
            for hypotheses in batches
            for tokens in hypotheses
        ]

    references = [text(row) for sample in samples for row in sample["target"].tolist()]
    bleu = BLEU(tokenize="none")
    result = {
        "sentences": len(indices),
        "bleu_plugin_beam4": bleu.corpus_score([text(tokens) for tokens in plugin["beam4"]], [references]).score,
    }
    device = spec["device"]
    with tempfile.TemporaryDirectory() as scratch:
        for weights in CT2_WEIGHTS:
            path = export(model, dictionary, dictionary, Path(scratch) / weights, quantization=weights)
            for intra, inter in CT2_THREADS if device == "cpu" else CT2_THREADS[:1]:
                translator = ctranslate2.Translator(
                    path, device=device, compute_type=weights, intra_threads=intra, inter_threads=inter
                )
                for name, beam in (("beam4", PAPER.BEAM), ("greedy", 1)):
                    list(
                        translate_batches(
                            translator,
                            [sources[0][:8]],
                            beam=beam,
                            length_penalty=1.0,
                            max_len_a=PAPER.MAX_LEN_A,
                            max_len_b=PAPER.MAX_LEN_B,
                        )
                    )  # warm-up
                    start = time.perf_counter()
                    outputs = translate(translator, beam)
                    seconds = time.perf_counter() - start
                    key = f"ct2_{weights}_{intra}x{inter}_{name}"
                    result[f"{key}_sentences_per_s"] = len(indices) / seconds
                    result[f"{key}_tokens_per_s"] = sum(map(len, outputs)) / seconds
                    result[f"{key}_same_as_plugin"] = sum(a == b for a, b in zip(outputs, plugin[name]))
                    if name == "beam4":
                        result[f"bleu_{weights}_beam4"] = bleu.corpus_score(
                            [text(t) for t in outputs], [references]
                        ).score
            if weights == "float32":
                # Which length_penalty p (scores log P / |Y|^p) comes closest to GNMT's ((5+|Y|)/6)^0.6 (§6.1)?
                for penalty in CT2_LENGTH_PENALTIES:
                    outputs = translate(translator, PAPER.BEAM, penalty)
                    result[f"paper_same_at_{penalty}"] = sum(a == b for a, b in zip(outputs, plugin["paper"]))
    return result


def print_ctranslate2(size, results, ct2):
    """CTranslate2's sentences/s and its ratio to fairseq-generate (fairseq's generator on fairseq's model, at
    torch's threads), its hypotheses that are the plugin's, and BLEU."""
    reference = results["transformer"]
    print(
        f"{size:6} {'CTranslate2 (same batches, length penalty 1)':50}{'beam4 sent/s':>14}{'ratio':>7}"
        f"{'greedy sent/s':>15}{'ratio':>7}{'same hyps beam4/greedy':>24}"
    )
    for weights in CT2_WEIGHTS:
        for intra, inter in CT2_THREADS:
            key = f"ct2_{weights}_{intra}x{inter}"
            if f"{key}_beam4_sentences_per_s" not in ct2:
                continue
            figures = ""
            for name in ("beam4", "greedy"):
                speed = ct2[f"{key}_{name}_sentences_per_s"]
                figures += f"{speed:{14 if name == 'beam4' else 15}.1f}"
                figures += f"{speed / reference[f'fairseq_generator_{name}_sentences_per_s']:7.2f}"
            same = f"{ct2[f'{key}_beam4_same_as_plugin']}/{ct2[f'{key}_greedy_same_as_plugin']} of {ct2['sentences']}"
            threads = (
                "1 thread"
                if intra * inter == 1
                else f"{intra} threads a batch"
                if inter == 1
                else f"{inter} batches at once, {intra} thread each"
            )
            print(f"{size:6} {f'{weights} weights, {threads}':50}{figures}{same:>24}")
    print(
        f"{size:6} BLEU, beam 4 (sacrebleu, tokenize none: Moses tokens, BPE joined): the plugin "
        f"{ct2['bleu_plugin_beam4']:.2f}, CTranslate2 float32 {ct2['bleu_float32_beam4']:.2f}, int8 "
        f"{ct2['bleu_int8_beam4']:.2f}"
    )
    same = ", ".join(f"{penalty}: {ct2[f'paper_same_at_{penalty}']}" for penalty in CT2_LENGTH_PENALTIES)
    print(
        f"{size:6} CTranslate2 float32 beam 4 with length_penalty p against the plugin's --search paper (GNMT "
        f"alpha {PAPER.ALPHA}): the same hypothesis for {same} of {ct2['sentences']} sentences"
    )


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()
