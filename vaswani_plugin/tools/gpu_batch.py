"""The most tokens a GPU's batch holds for a training command: the recipes' MAX_TOKENS_PER_GPU when unset.

    python -m vaswani_plugin.tools.gpu_batch DATA_BIN --user-dir vaswani_plugin --arch vaswani_transformer_big \
        --share-all-embeddings --fp16 ...   # fairseq-train's arguments; prints the tokens

The model's sizes, dictionaries and precision are read from the command as fairseq-train parses it; the batch is
the largest whose peak (vaswani_plugin/models/memory.py, an upper bound checked against measured peaks) stays
within GPU_MEMORY_SHARE of the smallest visible GPU's memory. One line on stderr says what it chose and why.
"""

import argparse
import sys

import torch

from vaswani_plugin.cli import run_command
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.models.memory import GPU_MEMORY_SHARE, Sizes, largest_batch
from vaswani_plugin.models.output_layer_loss import chunk_logits_for


def precision_of(args) -> str:
    """memory.PRECISIONS' name of the command's precision (--bf16-autocast on; auto is float32 on a GPU)."""
    if getattr(args, "fp16", False):
        return "fp16"
    if getattr(args, "amp", False):
        return "amp"
    return "bf16" if str(getattr(args, "bf16_autocast", "off")).lower() in ("on", "1", "true") else "float32"


def sizes_of(args, source_vocabulary: int, target_vocabulary: int) -> Sizes:
    """The model's sizes from fairseq's parsed arguments; the encoder's and decoder's must agree but for depth."""
    for name in ("embed_dim", "ffn_embed_dim", "attention_heads"):
        if getattr(args, f"encoder_{name}") != getattr(args, f"decoder_{name}"):
            raise VaswaniConfigError(f"the memory model takes one {name.replace('_', ' ')} for encoder and decoder "
                                     f"(got {getattr(args, f'encoder_{name}')} and {getattr(args, f'decoder_{name}')})"
                                     "; set MAX_TOKENS_PER_GPU")
    share = ("all" if args.share_all_embeddings else
             "output" if args.share_decoder_input_output_embed else "none")
    return Sizes(args.encoder_layers, args.encoder_embed_dim, args.encoder_ffn_embed_dim,
                 args.encoder_attention_heads, source_vocabulary, target_vocabulary, share, args.decoder_layers)


def largest_on_gpus(sizes: Sizes, precision: str):
    """(tokens, why): the largest batch on the smallest visible GPU, and a line saying how it was chosen."""
    if not torch.cuda.is_available():
        raise VaswaniConfigError("no GPU visible: the batch is chosen from a GPU's memory; set MAX_TOKENS_PER_GPU")
    devices = [torch.device("cuda", index) for index in range(torch.cuda.device_count())]
    device = min(devices, key=lambda each: torch.cuda.get_device_properties(each).total_memory)
    properties = torch.cuda.get_device_properties(device)
    budget = int(properties.total_memory * GPU_MEMORY_SHARE)
    tokens = largest_batch(sizes, precision, budget, chunk_logits_for(device))
    why = (f"{tokens} tokens a batch fit {GPU_MEMORY_SHARE:.0%} of {properties.name}'s "
           f"{properties.total_memory / 2**30:.0f} GiB for d_model {sizes.d_model}, d_ff {sizes.d_ff}, "
           f"{sizes.layers}+{sizes.decoder_layers or sizes.layers} layers, {sizes.target_vocabulary} symbols in "
           f"{precision} (vaswani_plugin/models/memory.py)")
    if tokens == 0:
        raise VaswaniConfigError(f"the model's weights, gradients and Adam's state alone exceed {why.split(' fit ')[1]}")
    return tokens, why


PROG = "vaswani_plugin.tools.gpu_batch"


def main(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0],
                                     usage="%(prog)s DATA_BIN [fairseq-train arguments]")
    parser.add_argument("training", nargs=argparse.REMAINDER, help="fairseq-train's arguments, DATA_BIN first")
    run_command(parser, lambda args: print(command_batch(args.training)), argv)


def command_batch(training) -> int:
    """The tokens for fairseq-train's arguments `training`, said on stderr."""
    from fairseq import options, tasks
    parsed = options.parse_args_and_arch(options.get_training_parser(), list(training))
    task = tasks.setup_task(parsed)  # its dictionaries; no data is read
    sizes = sizes_of(parsed, len(task.source_dictionary), len(task.target_dictionary))
    tokens, why = largest_on_gpus(sizes, precision_of(parsed))
    print(f"{PROG}: {why}", file=sys.stderr)
    return tokens


if __name__ == "__main__":
    main()
