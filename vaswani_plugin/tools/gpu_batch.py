"""The most tokens a GPU's batch holds for a training command: the recipes' MAX_TOKENS_PER_GPU when unset.

    python -m vaswani_plugin.tools.gpu_batch DATA_BIN --user-dir vaswani_plugin --arch vaswani_transformer_big \
        --share-all-embeddings --bf16-autocast on ...   # fairseq-train's arguments; prints the tokens

The model's sizes, dictionaries and precision are read from the command as fairseq-train parses it; the batch is
the largest whose peak (vaswani_plugin/models/memory.py, an upper bound checked against measured peaks) stays
within GPU_MEMORY_SHARE of the smallest visible GPU's memory. One line on stderr says what it chose and why.
"""

import argparse
import sys

import torch

import vaswani_plugin
from vaswani_plugin.cli import run_command
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.models.memory import GPU_MEMORY_SHARE, Sizes, largest_batch
from vaswani_plugin.models.output_layer_loss import chunk_logits_for
from vaswani_plugin.precision import bf16_autocast_enabled


def precision_of(args, gpu) -> str:
    """memory.PRECISIONS' name of the command's precision on `gpu` (its compute capability and name), bfloat16
    autocast decided as the task decides it there (vaswani_plugin.precision: auto by the capability, on beside
    --fp16 or --amp an error); TF32 products hold what float32's do."""
    fairseq = "fp16" if getattr(args, "fp16", False) else "amp" if getattr(args, "amp", False) else None
    bf16, _ = bf16_autocast_enabled(getattr(args, "bf16_autocast", "off"), "cuda", fairseq and f"--{fairseq}", gpu=gpu)
    return "bf16" if bf16 else fairseq or "float32"


def sizes_of(args, source_vocabulary: int, target_vocabulary: int) -> Sizes:
    """The model's sizes from fairseq's parsed arguments; the encoder's and decoder's must agree but for depth."""
    for name in ("embed_dim", "ffn_embed_dim", "attention_heads"):
        if getattr(args, f"encoder_{name}") != getattr(args, f"decoder_{name}"):
            raise VaswaniConfigError(
                f"the memory model takes one {name.replace('_', ' ')} for encoder and decoder "
                f"(got {getattr(args, f'encoder_{name}')} and {getattr(args, f'decoder_{name}')})"
                "; set MAX_TOKENS_PER_GPU"
            )
    share = "all" if args.share_all_embeddings else "output" if args.share_decoder_input_output_embed else "none"
    return Sizes(
        args.encoder_layers,
        args.encoder_embed_dim,
        args.encoder_ffn_embed_dim,
        args.encoder_attention_heads,
        source_vocabulary,
        target_vocabulary,
        share,
        args.decoder_layers,
    )


def smallest_gpu():
    """(torch.device, properties) of the visible GPU with the least memory."""
    if not torch.cuda.is_available():
        raise VaswaniConfigError("no GPU visible: the batch is chosen from a GPU's memory; set MAX_TOKENS_PER_GPU")
    return min(
        (
            (torch.device("cuda", index), torch.cuda.get_device_properties(index))
            for index in range(torch.cuda.device_count())
        ),
        key=lambda pair: pair[1].total_memory,
    )


def largest_on_gpus(sizes: Sizes, precision: str, gpu=None):
    """(tokens, why): the largest batch on the smallest visible GPU (`gpu`: smallest_gpu()'s), and a line saying how
    it was chosen."""
    device, properties = gpu or smallest_gpu()
    tokens = largest_batch(sizes, precision, int(properties.total_memory * GPU_MEMORY_SHARE), chunk_logits_for(device))
    budget = (
        f"{GPU_MEMORY_SHARE:.0%} of {properties.name}'s {properties.total_memory / 2**30:.0f} GiB for d_model "
        f"{sizes.d_model}, d_ff {sizes.d_ff}, {sizes.layers}+{sizes.decoder_layers or sizes.layers} layers, "
        f"{sizes.target_vocabulary} symbols in {precision} (vaswani_plugin/models/memory.py)"
    )
    if tokens == 0:
        raise VaswaniConfigError(f"the model's weights, gradients and Adam's state alone exceed {budget}")
    return tokens, f"{tokens} tokens a batch fit {budget}"


PROG = "vaswani_plugin.tools.gpu_batch"


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n")[0], usage="%(prog)s DATA_BIN [fairseq-train arguments]"
    )
    parser.add_argument("training", nargs=argparse.REMAINDER, help="fairseq-train's arguments, DATA_BIN first")
    run_command(parser, lambda args: print(said(command_batch(args.training))), argv)


def said(batch) -> int:
    tokens, why = batch
    print(f"{PROG}: {why}", file=sys.stderr)
    return tokens


def command_batch(training):
    """(tokens, why) for fairseq-train's arguments `training` (DATA_BIN first)."""
    vaswani_plugin.register()  # their --user-dir: this package, already imported, is not imported again
    from fairseq import options, tasks

    parsed = options.parse_args_and_arch(options.get_training_parser(), list(training))
    task = tasks.setup_task(parsed)  # its dictionaries; no data is read
    sizes = sizes_of(parsed, len(task.source_dictionary), len(task.target_dictionary))
    device, properties = gpu = smallest_gpu()
    capability = (properties.major, properties.minor)
    return largest_on_gpus(sizes, precision_of(parsed, (capability, properties.name)), gpu)


if __name__ == "__main__":
    main()
