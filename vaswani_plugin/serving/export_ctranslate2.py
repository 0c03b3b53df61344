"""Export a vaswani_transformer checkpoint to a CTranslate2 model directory, weight for weight (§3.1–§3.5).

    python -m vaswani_plugin.serving.export_ctranslate2 --checkpoint CKPT --data DATA_BIN --output DIR

What is written and how it decodes: docs/reference.md#serving-with-ctranslate2.
"""

import argparse

from vaswani_plugin.errors import CTRANSLATE2_MISSING, MissingExtra, VaswaniConfigError

try:
    import ctranslate2
    from ctranslate2.converters.converter import Converter
    from ctranslate2.specs import common_spec, transformer_spec
except ImportError:
    raise MissingExtra(CTRANSLATE2_MISSING) from None

import numpy
import torch
from fairseq.data import Dictionary

from vaswani_plugin.cli import run_command
from vaswani_plugin.models.layers import sinusoidal_positions
from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerModel, head_dims
from vaswani_plugin.serving.loading import add_export_arguments, load_for_export, refuse_existing_output

QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")


def array(tensor: torch.Tensor) -> numpy.ndarray:
    return tensor.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()


def vocabulary(dictionary: Dictionary):
    """fairseq's symbols in id order, <pad> renamed <blank> (OpenNMT's name for it) as CTranslate2's own fairseq
    converter does."""
    return ["<blank>" if index == dictionary.pad() else symbol for index, symbol in enumerate(dictionary.symbols)]


def head_dim(model: VaswaniTransformerModel, side: str):
    """CTranslate2's head_dim for a stack (from the model's config), None where it is d_model / h; refuses
    d_k ≠ d_v (§3.2.2), which CTranslate2's attention cannot hold (it splits keys and values into equal heads)."""
    cfg = model.cfg
    key_dim, value_dim = head_dims(cfg, side)
    if key_dim != value_dim:
        raise VaswaniConfigError(
            f"the {side} has d_k = {key_dim} and d_v = {value_dim} "
            "(--attention-key-dim/--attention-value-dim); CTranslate2's attention needs d_k = d_v"
        )
    return None if key_dim * getattr(cfg, f"{side}_attention_heads") == getattr(cfg, f"{side}_embed_dim") else key_dim


def position_table(embedding, rows: int) -> numpy.ndarray:
    """Row p = what the model adds at position p, counted from 0 at the first token (§3.5 or Table 3 (E))."""
    if embedding.learned_positions is not None:
        return array(embedding.learned_positions.weight[:rows])
    return array(sinusoidal_positions(torch.arange(rows), embedding.dim))


def set_embedding(spec, embeddings_spec, embedding, rows: int):
    """§3.4 + §3.5: Embedding(token) · √d_model + PE(pos)."""
    embeddings_spec.weight = array(embedding.embed_tokens.weight)
    spec.scale_embeddings = numpy.float32(embedding.scale)
    spec.position_encodings.encodings = position_table(embedding, rows)


def set_linear(spec, linear):
    spec.weight = array(linear.weight)
    if linear.bias is not None:
        spec.bias = array(linear.bias)


def set_layer_norm(spec, norm):
    spec.gamma = array(norm.weight)
    spec.beta = array(norm.bias)


def set_attention(spec, residual):
    """§3.2.2: the fused projections as CTranslate2 holds them: [W^Q; W^K; W^V] for self-attention, W^Q and
    [W^K; W^V] for encoder-decoder attention; then W^O; the residual's LayerNorm."""
    attention = residual.sublayer
    if attention.self_attention:
        set_linear(spec.linear[0], attention.qkv_proj)
    else:
        set_linear(spec.linear[0], attention.q_proj)
        set_linear(spec.linear[1], attention.kv_proj)
    set_linear(spec.linear[-1], attention.out_proj)
    set_layer_norm(spec.layer_norm, residual.norm)


def set_feed_forward(spec, residual):
    """§3.3, eq. 2."""
    set_linear(spec.linear_0, residual.sublayer.inner)
    set_linear(spec.linear_1, residual.sublayer.outer)
    set_layer_norm(spec.layer_norm, residual.norm)


def layer_norm_epsilon(model) -> float:
    epsilons = {module.eps for module in model.modules() if isinstance(module, torch.nn.LayerNorm)}
    if len(epsilons) != 1:
        raise VaswaniConfigError(f"the model's layer norms have several epsilons {sorted(epsilons)}")
    return epsilons.pop()


def transformer_spec_of(
    model: VaswaniTransformerModel,
    source_dictionary: Dictionary,
    target_dictionary: Dictionary,
    max_source_positions: int,
    max_target_positions: int,
):
    """The ctranslate2.specs.TransformerSpec that computes what `model` computes (sizes from its config)."""
    cfg, encoder, decoder = model.cfg, model.encoder, model.decoder
    encoder_pre_norm, decoder_pre_norm = cfg.encoder_normalize_before, cfg.decoder_normalize_before
    encoder_spec = transformer_spec.TransformerEncoderSpec(
        cfg.encoder_layers,
        cfg.encoder_attention_heads,
        pre_norm=encoder_pre_norm,
        activation=common_spec.Activation.RELU,
        head_dim=head_dim(model, "encoder"),
    )
    decoder_spec = transformer_spec.TransformerDecoderSpec(
        cfg.decoder_layers,
        cfg.decoder_attention_heads,
        pre_norm=decoder_pre_norm,
        activation=common_spec.Activation.RELU,
        head_dim=head_dim(model, "decoder"),
    )

    set_embedding(encoder_spec, encoder_spec.embeddings[0], encoder.embedding, max_source_positions)
    for layer_spec, layer in zip(encoder_spec.layer, encoder.layers):
        set_attention(layer_spec.self_attention, layer.self_attention)
        set_feed_forward(layer_spec.ffn, layer.feed_forward)
    if encoder_pre_norm:
        set_layer_norm(encoder_spec.layer_norm, encoder.final_norm)

    set_embedding(decoder_spec, decoder_spec.embeddings, decoder.embedding, max_target_positions)
    for layer_spec, layer in zip(decoder_spec.layer, decoder.layers):
        set_attention(layer_spec.self_attention, layer.self_attention)
        set_attention(layer_spec.attention, layer.encoder_attention)
        set_feed_forward(layer_spec.ffn, layer.feed_forward)
    if decoder_pre_norm:
        set_layer_norm(decoder_spec.layer_norm, decoder.final_norm)
    # §3.4's pre-softmax projection (no bias in the model). fairseq's generator never emits <pad>: the bias
    # keeps it out here too, before the softmax (fairseq removes it after; see docs/reference.md).
    decoder_spec.projection.weight = array(decoder.output_projection.weight)
    no_padding = numpy.zeros(len(target_dictionary), dtype=numpy.float32)
    no_padding[target_dictionary.pad()] = numpy.finfo(numpy.float32).min
    decoder_spec.projection.bias = no_padding

    spec = transformer_spec.TransformerSpec(encoder_spec, decoder_spec)
    spec.config.layer_norm_epsilon = layer_norm_epsilon(model)
    # fairseq's conventions: the source ends in </s>, decoding starts from </s>.
    spec.config.bos_token, spec.config.eos_token, spec.config.unk_token = (
        target_dictionary[target_dictionary.bos()],
        target_dictionary[target_dictionary.eos()],
        target_dictionary[target_dictionary.unk()],
    )
    spec.config.decoder_start_token = spec.config.eos_token
    spec.config.add_source_eos = True
    spec.register_source_vocabulary(vocabulary(source_dictionary))
    spec.register_target_vocabulary(vocabulary(target_dictionary))
    return spec


class VaswaniConverter(Converter):
    """CTranslate2's Converter for an in-memory vaswani_transformer and its dictionaries."""

    def __init__(
        self,
        model: VaswaniTransformerModel,
        source_dictionary: Dictionary,
        target_dictionary: Dictionary,
        max_source_positions: int = None,
        max_target_positions: int = None,
    ):
        self.model, self.source_dictionary, self.target_dictionary = model, source_dictionary, target_dictionary
        self.max_source_positions = max_source_positions or model.encoder.max_positions()
        self.max_target_positions = max_target_positions or model.decoder.max_positions()

    def _load(self):
        with torch.no_grad():
            return transformer_spec_of(
                self.model,
                self.source_dictionary,
                self.target_dictionary,
                self.max_source_positions,
                self.max_target_positions,
            )


def export(
    model: VaswaniTransformerModel,
    source_dictionary: Dictionary,
    target_dictionary: Dictionary,
    output_dir,
    quantization: str = None,
    force: bool = False,
) -> str:
    """Write `model` as a CTranslate2 model directory; returns its path. quantization: one of QUANTIZATIONS
    (the weights' type on disk; CTranslate2 converts on load to the compute_type asked for)."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise VaswaniConfigError(f"--quantization {quantization}: not one of {', '.join(QUANTIZATIONS)}")
    refuse_existing_output(output_dir, force)
    return VaswaniConverter(model, source_dictionary, target_dictionary).convert(
        str(output_dir), quantization=quantization, force=force
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="vaswani_plugin.serving.export_ctranslate2",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_export_arguments(parser, "the CTranslate2 model directory to write")
    parser.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        help="weight type on disk (default: float32); int8 is the fast one on CPUs",
    )
    run_command(parser, export_command, argv)


def export_command(args) -> None:
    task, model = load_for_export(args)
    source_dictionary, target_dictionary = task.source_dictionary, task.target_dictionary
    print(
        f"writing {args.output} (ctranslate2 {ctranslate2.__version__}, weights {args.quantization or 'float32'})",
        flush=True,
    )
    export(model, source_dictionary, target_dictionary, args.output, args.quantization, args.force)
    cfg = model.cfg
    print(
        f"exported {args.checkpoint} -> {args.output}: d_model {cfg.encoder_embed_dim}, N "
        f"{cfg.encoder_layers}/{cfg.decoder_layers}, {'pre' if cfg.encoder_normalize_before else 'post'}-norm, "
        f"vocabularies {len(source_dictionary)}/{len(target_dictionary)}; translate with "
        f"python -m vaswani_plugin.serving.translate_ctranslate2 --model {args.output}"
    )


if __name__ == "__main__":
    main()
