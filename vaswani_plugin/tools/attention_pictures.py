"""Attention pictures as in Figures 3-5: every head's attention probabilities for one sentence pair.

    python -m vaswani_plugin.tools.attention_pictures --path checkpoint_best.pt --data data-bin \\
        --source "the cat sat" --output-dir pictures [--target "die Katze saß"] [--layer 6 --head 3]

Sentences are dictionary tokens, or raw text with --bpe-codes; without --target the source is translated (§6.1's beam).
One teacher-forced pass records encoder_self [layers, heads, S, S], decoder_self [.., T, T] and encoder_decoder
[.., T, S]; the output directory gets heatmaps and attention.npz. Details: docs/reference.md#attention-pictures.
"""

import argparse
import logging
import math
import sys
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import numpy
import torch
from fairseq.dataclass.configs import GenerationConfig
from torch import Tensor

from vaswani_plugin import paper
from vaswani_plugin.cli import run_command
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerModel
from vaswani_plugin.serving.loading import load_model
from vaswani_plugin.serving.text import TextPipeline

# kind -> (title, stack, attention sub-layer of that stack's layers)
KINDS = {
    "encoder_self": ("Encoder self-attention", "encoder", "self_attention"),
    "decoder_self": ("Decoder self-attention", "decoder", "self_attention"),
    "encoder_decoder": ("Encoder-decoder attention", "decoder", "encoder_attention"),
}
# kind -> the tokens along (queries, keys); see the module docstring.
AXES = {
    "encoder_self": ("source", "source"),
    "decoder_self": ("target", "decoder_input"),
    "encoder_decoder": ("target", "source"),
}
AXIS_NAMES = {"source": "source token", "target": "decoder output", "decoder_input": "decoder input"}
# §6.1's beam size and maximum output length (input length + 50).
BEAM, MAX_LEN_A, MAX_LEN_B = paper.BEAM, paper.MAX_LEN_A, paper.MAX_LEN_B


def _store_probabilities(slots: List[Optional[Tensor]], index: int, attention, args, kwargs, output) -> None:
    """Forward hook: recompute the module's per-head probabilities from its own inputs and projections."""
    if kwargs.get("cache") is not None:
        raise RuntimeError("attention capture needs full forward passes, not incremental decoding")
    slots[index] = attention.head_probabilities(
        args[0], kwargs.get("memory"), kwargs.get("mask"), kwargs.get("is_causal", False)
    )


@contextmanager
def captured_attention(model: VaswaniTransformerModel) -> Iterator[Dict[str, List[Optional[Tensor]]]]:
    """Within the block, full forward passes store kind -> [per layer: (batch, heads, queries, keys)] in the dict.

    Hooks, removed on exit, so that the model's own computation (and its speed elsewhere) is untouched.
    """
    captured, handles = {}, []
    for kind, (_, stack, sublayer) in KINDS.items():
        layers = getattr(model, stack).layers
        captured[kind] = [None] * len(layers)
        for index, layer in enumerate(layers):
            attention = getattr(layer, sublayer).sublayer
            handles.append(
                attention.register_forward_hook(partial(_store_probabilities, captured[kind], index), with_kwargs=True)
            )
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def attention_maps(model: VaswaniTransformerModel, src_tokens: Tensor, prev_output_tokens: Tensor) -> Dict[str, Tensor]:
    """One sentence (1-D token tensors), teacher-forced in eval mode: kind -> [layers, heads, queries, keys]."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), captured_attention(model) as captured:
            model(src_tokens[None], torch.tensor([len(src_tokens)]), prev_output_tokens[None])
    finally:
        model.train(was_training)
    return {kind: torch.stack([weights[0] for weights in layers]) for kind, layers in captured.items()}


def encode(dictionary, sentence: str, option: str) -> Tensor:
    """Whitespace tokens -> indices ending in </s>; unknown words become <unk>, with one warning."""
    words = sentence.split()
    if not words:
        raise VaswaniConfigError(f"{option} is empty")
    unknown = [word for word in words if dictionary.index(word) == dictionary.unk()]
    if unknown:
        print(
            f"warning: {option}: not in the dictionary, read as {dictionary.unk_word}: {' '.join(unknown)}",
            file=sys.stderr,
        )
    return dictionary.encode_line(" ".join(words), add_if_not_exist=False, append_eos=True).long()


def translate(task, model, src_tokens: Tensor) -> Tensor:
    """The best beam-search hypothesis for one sentence (1-D), ending in </s>."""
    generator = task.build_generator([model], GenerationConfig(beam=BEAM, max_len_a=MAX_LEN_A, max_len_b=MAX_LEN_B))
    sample = {"net_input": {"src_tokens": src_tokens[None], "src_lengths": torch.tensor([len(src_tokens)])}}
    with torch.no_grad():
        return task.inference_step(generator, [model], sample)[0][0]["tokens"]


def check_range(option: str, value: int, counts: Dict[str, int]) -> None:
    """A 1-based --layer/--head must exist in every stack (counts: stack -> layers or heads)."""
    if not 1 <= value <= min(counts.values()):
        sizes = ", ".join(f"{stack} {count}" for stack, count in counts.items())
        raise VaswaniConfigError(
            f"{option} {value} is out of range: valid {option.lstrip('-')}s are 1..{min(counts.values())} ({sizes})"
        )


def labelled_heatmap(
    axes,
    weights: numpy.ndarray,
    query_tokens,
    key_tokens,
    vmax: float,
    label_keys: bool = True,
    label_queries: bool = True,
):
    """Draw one [queries, keys] map with the tokens on the axes; returns the image for a colorbar."""
    image = axes.imshow(weights, cmap="viridis", vmin=0.0, vmax=vmax)
    axes.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=8)
    axes.set_yticks(range(len(query_tokens)), query_tokens, fontsize=8)
    axes.tick_params(labelbottom=label_keys, labelleft=label_queries)
    return image


def panel_size(query_tokens, key_tokens):
    """Inches for one map: a margin for the labels plus a quarter inch per token, at least 3 x 3."""
    return max(3.0, 1.5 + 0.25 * len(key_tokens)), max(3.0, 1.5 + 0.25 * len(query_tokens))


def write_pictures(
    maps: Dict[str, Tensor], tokens: Dict[str, List[str]], layers: Dict[str, int], head: int, output_dir: Path
) -> List[Path]:
    """Per kind a heatmap of one head and a grid of all heads of one layer (1-based); returns the PNG paths."""
    try:
        from matplotlib.figure import Figure  # Figure.savefig renders PNG with Agg; pyplot is never touched
    except ImportError:
        raise VaswaniConfigError("the pictures need matplotlib: pip install matplotlib") from None
    written = []
    for kind, (title, _, _) in KINDS.items():
        query_side, key_side = AXES[kind]
        queries, keys = tokens[query_side], tokens[key_side]
        layer_maps = maps[kind][layers[kind] - 1].numpy()
        width, height = panel_size(queries, keys)
        heading = f"{title}, layer {layers[kind]}"

        figure = Figure(figsize=(width + 1.0, height), layout="constrained")
        axes = figure.add_subplot()
        weights = layer_maps[head - 1]
        image = labelled_heatmap(axes, weights, queries, keys, weights.max())
        axes.set(
            title=f"{heading}, head {head}",
            xlabel=f"key ({AXIS_NAMES[key_side]})",
            ylabel=f"query ({AXIS_NAMES[query_side]})",
        )
        figure.colorbar(image, ax=axes, label="attention probability")
        written.append(output_dir / f"{kind}_layer{layers[kind]}_head{head}.png")
        figure.savefig(written[-1], dpi=120, bbox_inches="tight")

        heads = len(layer_maps)
        columns = min(heads, 4)
        rows = math.ceil(heads / columns)
        figure = Figure(figsize=(columns * width + 1.0, rows * height + 0.5), layout="constrained")
        grid = figure.subplots(rows, columns, squeeze=False)
        for index, axes in enumerate(grid.flat):
            if index >= heads:
                axes.set_axis_off()
                continue
            # One colour scale for the whole layer, so that the heads compare at a glance; tokens only on the
            # outer panels (far fewer labels to lay out).
            image = labelled_heatmap(
                axes,
                layer_maps[index],
                queries,
                keys,
                layer_maps.max(),
                label_keys=index + columns >= heads,
                label_queries=index % columns == 0,
            )
            axes.set_title(f"head {index + 1}", fontsize=10)
        figure.suptitle(f"{heading}, all heads (rows: {AXIS_NAMES[query_side]}, columns: {AXIS_NAMES[key_side]})")
        figure.colorbar(image, ax=grid.ravel().tolist(), label="attention probability")
        written.append(output_dir / f"{kind}_layer{layers[kind]}_all_heads.png")
        figure.savefig(written[-1], dpi=120, bbox_inches="tight")
    return written


def write_attention_pictures(args: argparse.Namespace) -> List[Path]:
    """The whole command: load, (translate,) capture, write the pictures and attention.npz; returns the paths."""
    task, model = load_model(args.path, args.data, args.source_lang, args.target_lang)
    stacks = ("encoder", "decoder")
    if args.layer is not None:
        check_range("--layer", args.layer, {stack: getattr(model.cfg, f"{stack}_layers") for stack in stacks})
    if args.head is not None:
        check_range("--head", args.head, {stack: getattr(model.cfg, f"{stack}_attention_heads") for stack in stacks})
    layers = {kind: args.layer or getattr(model.cfg, f"{stack}_layers") for kind, (_, stack, _) in KINDS.items()}

    source, target_text = args.source, args.target
    if args.bpe_codes:
        source = " ".join(TextPipeline(task.cfg.source_lang, task.cfg.source_lang, args.bpe_codes).encode(source))
        if target_text is not None:
            target_text = " ".join(
                TextPipeline(task.cfg.target_lang, task.cfg.target_lang, args.bpe_codes).encode(target_text)
            )
    src_tokens = encode(task.source_dictionary, source, "--source")
    print(f"source: {task.source_dictionary.string(src_tokens)}")
    if target_text is None:
        target = translate(task, model, src_tokens)
        print(f"target (beam search, beam {BEAM}): {task.target_dictionary.string(target)}")
    else:
        target = encode(task.target_dictionary, target_text, "--target")
        print(f"target: {task.target_dictionary.string(target)}")
    # Teacher forcing: the decoder reads </s> + target and outputs target + </s>.
    decoder_input = torch.cat([target.new_tensor([task.target_dictionary.eos()]), target[:-1]])
    maps = attention_maps(model, src_tokens, decoder_input)

    tokens = {
        "source": [task.source_dictionary[i] for i in src_tokens],
        "target": [task.target_dictionary[i] for i in target],
        "decoder_input": [task.target_dictionary[i] for i in decoder_input],
    }
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    written = write_pictures(maps, tokens, layers, args.head or 1, output_dir)
    written.append(output_dir / "attention.npz")
    numpy.savez(
        written[-1],
        **{kind: weights.numpy() for kind, weights in maps.items()},
        **{f"{side}_tokens": numpy.array(words) for side, words in tokens.items()},
    )
    return written


def main(argv: Optional[List[str]] = None) -> None:
    """Parse the command line, write the pictures, print their paths; user mistakes end in one line."""
    parser = argparse.ArgumentParser(
        prog="vaswani_plugin.tools.attention_pictures",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--path", required=True, help="vaswani_transformer checkpoint written by fairseq-train")
    parser.add_argument("--data", required=True, help="directory with dict.SRC.txt and dict.TGT.txt")
    parser.add_argument("--source-lang", help="source language (default: the checkpoint's task)")
    parser.add_argument("--target-lang", help="target language (default: the checkpoint's task)")
    parser.add_argument("--source", required=True, help="the source sentence, in dictionary tokens")
    parser.add_argument("--target", help="the target sentence (default: the beam-search translation)")
    parser.add_argument("--bpe-codes", help="sentences are raw text: Moses-tokenise and apply these BPE codes")
    parser.add_argument("--layer", type=int, help="1-based layer of the pictures (default: each stack's last)")
    parser.add_argument("--head", type=int, help="1-based head of the single-head pictures (default: 1)")
    parser.add_argument("--output-dir", required=True, help="where to write the PNGs and attention.npz")
    run_command(parser, lambda args: print(*write_attention_pictures(args), sep="\n"), argv)


if __name__ == "__main__":
    # fairseq's speech tasks set the root logger to DEBUG on import; the command prints what it has to say.
    logging.getLogger().setLevel(logging.WARNING)
    main()
