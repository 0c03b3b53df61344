"""Convert a checkpoint of fairseq's `transformer` into a `vaswani_transformer` that computes the same thing.

    python -m vaswani_plugin.checkpoints.convert_fairseq --input fairseq/checkpoint_best.pt --output vaswani.pt

Q, K and V are fused, every other tensor renamed; fairseq's positions (learned, or its sinusoids, which are not
§3.5's) become fixed learned positions; features this model lacks are refused by name; the optimizer state is
dropped. Details: docs/reference.md#converting-fairseq-transformer-checkpoints.
"""

import argparse
from pathlib import Path

import torch
from fairseq.modules import SinusoidalPositionalEmbedding

from vaswani_plugin.checkpoints.storage import UnreadableCheckpoint, load_checkpoint, save_atomically
from vaswani_plugin.cli import run_command
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerConfig

# fairseq options that change the computation in ways vaswani_transformer cannot express, when set.
UNSUPPORTED = (
    "layernorm_embedding",
    "no_scale_embedding",
    "adaptive_input",
    "adaptive_softmax_cutoff",
    "cross_self_attention",
    "no_token_positional_embeddings",
    "encoder_layers_to_keep",
    "decoder_layers_to_keep",
    "quant_noise_pq",
    "no_decoder_final_norm",
    "tie_adaptive_weights",
)
COPIED = [
    "encoder_embed_dim",
    "encoder_ffn_embed_dim",
    "encoder_layers",
    "encoder_attention_heads",
    "encoder_normalize_before",
    "decoder_embed_dim",
    "decoder_ffn_embed_dim",
    "decoder_layers",
    "decoder_attention_heads",
    "decoder_normalize_before",
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "share_all_embeddings",
    "share_decoder_input_output_embed",
    "max_source_positions",
    "max_target_positions",
]


def fairseq_options(model_cfg) -> dict:
    options = dict(vars(model_cfg)) if isinstance(model_cfg, argparse.Namespace) else dict(model_cfg)
    name = options.get("_name") or options.get("arch", "")
    if not str(name).startswith("transformer") or "encoder_layers" not in options:
        raise VaswaniConfigError(f"not a checkpoint of fairseq's transformer (its model is {name!r})")
    return options


def vaswani_config(options: dict) -> dict:
    """This model's cfg["model"] for the fairseq options; refuses options it cannot reproduce."""
    for option in UNSUPPORTED:
        if options.get(option) not in (None, False, 0, ""):
            raise VaswaniConfigError(
                f"the checkpoint uses --{option.replace('_', '-')} "
                f"({options[option]!r}), which vaswani_transformer does not have"
            )
    if options.get("activation_fn", "relu") != "relu":
        raise VaswaniConfigError(f"the checkpoint uses --activation-fn {options['activation_fn']}; §3.3 is ReLU")
    for side in ("decoder_output_dim", "decoder_input_dim"):
        if options.get(side, options["decoder_embed_dim"]) != options["decoder_embed_dim"]:
            raise VaswaniConfigError(f"the checkpoint's --{side.replace('_', '-')} differs from its decoder_embed_dim")
    config = {
        field: options[field] if field in COPIED else getattr(VaswaniTransformerConfig, field)
        for field in VaswaniTransformerConfig.__dataclass_fields__
    }
    config["_name"] = "vaswani_transformer"
    # Learned positions either way: fairseq's own, or fairseq's sinusoid table held fixed in their place.
    config["encoder_learned_pos"] = config["decoder_learned_pos"] = True
    return config


def position_rows(state: dict, side: str, options: dict, padding_idx: int) -> torch.Tensor:
    """Row p = the position embedding fairseq adds at the sentence's p-th token (p from 0)."""
    dim, count = options[f"{side}_embed_dim"], options[f"max_{'source' if side == 'encoder' else 'target'}_positions"]
    first = padding_idx + 1
    if options.get(f"{side}_learned_pos", False):
        table = state[f"{side}.embed_positions.weight"]
        if table.size(0) < first + count:
            raise VaswaniConfigError(
                f"{side}.embed_positions has {table.size(0)} rows, fewer than "
                f"padding_idx + 1 + max positions = {first + count}"
            )
    else:
        table = SinusoidalPositionalEmbedding.get_embedding(first + count, dim, padding_idx)
    return table[first : first + count].clone()


def attention(state: dict, source: str, target: str, self_attention: bool) -> dict:
    q, k, v = (f"{source}.{name}_proj" for name in "qkv")
    converted = {f"{target}.out_proj.{p}": state[f"{source}.out_proj.{p}"] for p in ("weight", "bias")}
    for p in ("weight", "bias"):
        if self_attention:
            converted[f"{target}.qkv_proj.{p}"] = torch.cat([state[f"{q}.{p}"], state[f"{k}.{p}"], state[f"{v}.{p}"]])
        else:
            converted[f"{target}.q_proj.{p}"] = state[f"{q}.{p}"]
            converted[f"{target}.kv_proj.{p}"] = torch.cat([state[f"{k}.{p}"], state[f"{v}.{p}"]])
    return converted


def renamed(state: dict, pairs) -> dict:
    return {f"{new}.{p}": state[f"{old}.{p}"] for old, new in pairs for p in ("weight", "bias")}


def convert_state(state: dict, options: dict, padding_idx: int) -> dict:
    """fairseq transformer state_dict -> vaswani_transformer state_dict."""
    model = {}
    for side in ("encoder", "decoder"):
        model[f"{side}.embedding.embed_tokens.weight"] = state[f"{side}.embed_tokens.weight"]
        model[f"{side}.embedding.learned_positions.weight"] = position_rows(state, side, options, padding_idx)
        attentions = [("self_attn", "self_attention", True)]
        if side == "decoder":
            attentions.append(("encoder_attn", "encoder_attention", False))
        for i in range(options[f"{side}_layers"]):
            old, new = f"{side}.layers.{i}", f"{side}.layers.{i}"
            for fairseq_name, name, is_self in attentions:
                model.update(attention(state, f"{old}.{fairseq_name}", f"{new}.{name}.sublayer", is_self))
                model.update(renamed(state, [(f"{old}.{fairseq_name}_layer_norm", f"{new}.{name}.norm")]))
            model.update(
                renamed(
                    state,
                    [
                        (f"{old}.fc1", f"{new}.feed_forward.sublayer.inner"),
                        (f"{old}.fc2", f"{new}.feed_forward.sublayer.outer"),
                        (f"{old}.final_layer_norm", f"{new}.feed_forward.norm"),
                    ],
                )
            )
        if options[f"{side}_normalize_before"]:
            model.update(renamed(state, [(f"{side}.layer_norm", f"{side}.final_norm")]))
    model["decoder.output_projection.weight"] = state["decoder.output_projection.weight"]
    return model


def convert_checkpoint(path) -> dict:
    """A fairseq transformer checkpoint file -> the state of an equivalent vaswani_transformer checkpoint."""
    if not Path(path).is_file():
        raise VaswaniConfigError("not a checkpoint file")
    checkpoint = load_checkpoint(path)
    if not isinstance(checkpoint, dict) or not checkpoint.get("cfg") or "model" not in checkpoint:
        raise VaswaniConfigError("not a fairseq >= 0.10 checkpoint (it has no 'cfg' and 'model')")
    options = fairseq_options(checkpoint["cfg"]["model"])
    # fairseq's dictionaries put <pad> at 1; the tables are laid out around it.
    padding_idx = 1
    checkpoint["model"] = convert_state(checkpoint["model"], options, padding_idx)
    checkpoint["cfg"]["model"] = vaswani_config(options)
    checkpoint.pop("last_optimizer_state", None)
    return checkpoint


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="vaswani_plugin.checkpoints.convert_fairseq",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--input", required=True, help="checkpoint of fairseq's transformer (any transformer_* arch)")
    parser.add_argument("--output", required=True, help="where to write the vaswani_transformer checkpoint")
    run_command(parser, convert_command, argv)


def convert_command(args) -> None:
    try:
        checkpoint = convert_checkpoint(args.input)
    except UnreadableCheckpoint:  # names the file itself
        raise
    except VaswaniConfigError as error:
        raise VaswaniConfigError(f"{args.input}: {error}") from None
    save_atomically(checkpoint, args.output)
    model = checkpoint["cfg"]["model"]
    print(
        f"converted {args.input} -> {args.output}: vaswani_transformer, d_model {model['encoder_embed_dim']}, "
        f"N {model['encoder_layers']}/{model['decoder_layers']}, h {model['encoder_attention_heads']}, "
        f"{len(checkpoint['model'])} tensors; generate with --user-dir vaswani_plugin"
    )


if __name__ == "__main__":
    main()
