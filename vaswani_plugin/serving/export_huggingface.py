"""Export a vaswani_transformer checkpoint to a transformers MarianMTModel directory with its tokenizer (§3.1–§3.5).

    python -m vaswani_plugin.serving.export_huggingface --checkpoint CKPT --data DATA_BIN --output DIR \\
        --bpe-codes CODES          # or --sentencepiece MODEL

Marian is the paper's model with the sinusoids written [sin | cos] instead of interleaved (§3.5): one permutation
of the d_model coordinates, applied to every weight that reads or writes the residual stream, makes them equal.
What is written and how it decodes: docs/reference.md#sharing-on-the-hugging-face-hub.
"""

import argparse
from pathlib import Path

import torch

from vaswani_plugin.errors import TRANSFORMERS_MISSING, MissingExtra, VaswaniConfigError

try:
    import transformers
    from transformers import GenerationConfig, MarianConfig, MarianMTModel
except ImportError:
    raise MissingExtra(TRANSFORMERS_MISSING) from None
except OSError as error:  # transformers imports any torchaudio installed, and one built for another torch fails
    raise MissingExtra(
        f"transformers does not load: {error}; a torchaudio built for another torch is the usual "
        "cause (ve-fairseq pulls one in): pip uninstall torchaudio"
    ) from None

from vaswani_plugin import paper  # noqa: E402
from vaswani_plugin.cli import run_command  # noqa: E402
from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerModel, head_dims  # noqa: E402
from vaswani_plugin.serving.huggingface_tokenizer import write_fsmt_tokenizer, write_marian_tokenizer  # noqa: E402
from vaswani_plugin.serving.loading import add_export_arguments, load_for_export, refuse_existing_output  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# transformers' beam score is log P / |Y|^p, §6.1's (GNMT) log P / ((5 + |Y|) / 6)^α; p = LENGTH_PENALTY agreed
# best with --search paper on the quickstart model (docs/results.md#hugging-face-transformers).
LENGTH_PENALTY = 0.5
# transformers has no limit relative to the input (§6.1's input + 50): fairseq-generate's default fixed one.
MAX_NEW_TOKENS = 200


def residual_permutation(dim: int) -> torch.Tensor:
    """Coordinate k of Marian's residual stream is coordinate perm[k] of the plugin's: §3.5 interleaves
    PE(pos, 2i) = sin, PE(pos, 2i+1) = cos; Marian writes all sines first, then all cosines."""
    return torch.cat([torch.arange(0, dim, 2), torch.arange(1, dim, 2)])


def check_exportable(model: VaswaniTransformerModel):
    """One line for each variant Marian cannot compute (read from the model's config): learned positions, pre-norm,
    d_k or d_v ≠ d_model / h, different encoder and decoder widths."""
    cfg = model.cfg
    if cfg.encoder_learned_pos or cfg.decoder_learned_pos:
        raise VaswaniConfigError(
            "the model has learned positional embeddings (Table 3 row E); transformers' "
            "MarianMTModel has sinusoids only: export it with export_ctranslate2 instead"
        )
    if cfg.encoder_normalize_before or cfg.decoder_normalize_before:
        raise VaswaniConfigError(
            "the model is pre-norm (--encoder/decoder-normalize-before); transformers' "
            "MarianMTModel is post-norm (§3.1) only: export it with export_ctranslate2 instead"
        )
    if cfg.encoder_embed_dim != cfg.decoder_embed_dim:
        raise VaswaniConfigError(
            f"the encoder's d_model {cfg.encoder_embed_dim} differs from the decoder's "
            f"{cfg.decoder_embed_dim}; MarianMTModel has one d_model"
        )
    for side in ("encoder", "decoder"):
        (key_dim, value_dim), heads = head_dims(cfg, side), getattr(cfg, f"{side}_attention_heads")
        dim = getattr(cfg, f"{side}_embed_dim")
        if key_dim * heads != dim or value_dim != key_dim:
            raise VaswaniConfigError(
                f"the {side} has d_k = {key_dim}, d_v = {value_dim} with h = {heads} "
                f"and d_model = {dim}; MarianMTModel needs d_k = d_v = d_model / h"
            )


def shares(model: VaswaniTransformerModel):
    """(one matrix for both embeddings, the target embedding is the output projection) — §3.4's sharing."""
    embeddings = model.encoder.embedding.embed_tokens.weight is model.decoder.embedding.embed_tokens.weight
    output = model.decoder.output_projection.weight is model.decoder.embedding.embed_tokens.weight
    return embeddings, output


def marian_config(model: VaswaniTransformerModel, source_dictionary, target_dictionary) -> MarianConfig:
    """The model's sizes (its config) as Marian's."""
    cfg = model.cfg
    shared_embeddings, tied_output = shares(model)
    return MarianConfig(
        vocab_size=len(source_dictionary),
        decoder_vocab_size=len(target_dictionary),
        share_encoder_decoder_embeddings=shared_embeddings,
        tie_word_embeddings=tied_output,
        d_model=cfg.encoder_embed_dim,
        scale_embedding=True,
        activation_function="relu",
        encoder_layers=cfg.encoder_layers,
        decoder_layers=cfg.decoder_layers,
        encoder_attention_heads=cfg.encoder_attention_heads,
        decoder_attention_heads=cfg.decoder_attention_heads,
        encoder_ffn_dim=cfg.encoder_ffn_embed_dim,
        decoder_ffn_dim=cfg.decoder_ffn_embed_dim,
        dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout,
        activation_dropout=cfg.activation_dropout,
        max_position_embeddings=max(cfg.max_source_positions, cfg.max_target_positions),
        # fairseq's conventions: <s> 0, <pad> 1, </s> 2; the source ends in </s>, decoding starts from </s>.
        pad_token_id=target_dictionary.pad(),
        eos_token_id=target_dictionary.eos(),
        bos_token_id=target_dictionary.bos(),
        decoder_start_token_id=target_dictionary.eos(),
        forced_eos_token_id=target_dictionary.eos(),
    )


def generation_config(config: MarianConfig, target_dictionary, max_new_tokens: int) -> GenerationConfig:
    """§6.1 as far as transformers can say it: its beam (paper.BEAM), stop once as many hypotheses have ended
    (fairseq's rule), <pad> never generated (removed after the softmax, as fairseq does), a fixed length limit
    (transformers has none relative to the input: max_new_tokens = the batch's longest input + 51 per call gives
    §6.1's)."""
    return GenerationConfig(
        num_beams=paper.BEAM,
        length_penalty=LENGTH_PENALTY,
        early_stopping=True,
        max_new_tokens=max_new_tokens,
        decoder_start_token_id=config.decoder_start_token_id,
        eos_token_id=config.eos_token_id,
        forced_eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        suppress_tokens=[target_dictionary.pad()],
    )


def attention_weights(prefix: str, residual, perm) -> dict:
    """§3.2.2: W^Q, W^K, W^V read the residual stream (columns permuted), W^O writes it (rows and bias)."""
    attention = residual.sublayer
    if attention.self_attention:
        q, k, v = attention.qkv_proj.weight.split((attention.qk_size, attention.qk_size, attention.v_size))
        q_bias, k_bias, v_bias = attention.qkv_proj.bias.split((attention.qk_size, attention.qk_size, attention.v_size))
    else:
        q, q_bias = attention.q_proj.weight, attention.q_proj.bias
        k, v = attention.kv_proj.weight.split((attention.qk_size, attention.v_size))
        k_bias, v_bias = attention.kv_proj.bias.split((attention.qk_size, attention.v_size))
    weights = {}
    for name, weight, bias in (("q_proj", q, q_bias), ("k_proj", k, k_bias), ("v_proj", v, v_bias)):
        weights[f"{prefix}.{name}.weight"], weights[f"{prefix}.{name}.bias"] = weight[:, perm], bias
    weights[f"{prefix}.out_proj.weight"] = attention.out_proj.weight[perm]
    weights[f"{prefix}.out_proj.bias"] = attention.out_proj.bias[perm]
    return weights


def layer_norm_weights(prefix: str, norm, perm) -> dict:
    return {f"{prefix}.weight": norm.weight[perm], f"{prefix}.bias": norm.bias[perm]}


def feed_forward_weights(prefix: str, residual, perm) -> dict:
    """§3.3, eq. 2: W_1 reads the residual stream, W_2 and b_2 write it."""
    inner, outer = residual.sublayer.inner, residual.sublayer.outer
    return {
        f"{prefix}.fc1.weight": inner.weight[:, perm],
        f"{prefix}.fc1.bias": inner.bias,
        f"{prefix}.fc2.weight": outer.weight[perm],
        f"{prefix}.fc2.bias": outer.bias[perm],
        **layer_norm_weights(f"{prefix}.final_layer_norm", residual.norm, perm),
    }


def marian_state_dict(model: VaswaniTransformerModel) -> dict:
    """The plugin's parameters under MarianMTModel's names, the residual coordinates permuted; the sinusoid tables
    are Marian's own (computed, never stored)."""
    perm = residual_permutation(model.cfg.encoder_embed_dim)
    encoder, decoder = model.encoder, model.decoder
    weights = {
        "model.encoder.embed_tokens.weight": encoder.embedding.embed_tokens.weight[:, perm],
        "model.decoder.embed_tokens.weight": decoder.embedding.embed_tokens.weight[:, perm],
        "lm_head.weight": decoder.output_projection.weight[:, perm],
    }
    if shares(model)[0]:
        weights["model.shared.weight"] = weights["model.encoder.embed_tokens.weight"]
    for index, layer in enumerate(encoder.layers):
        prefix = f"model.encoder.layers.{index}"
        weights.update(attention_weights(f"{prefix}.self_attn", layer.self_attention, perm))
        weights.update(layer_norm_weights(f"{prefix}.self_attn_layer_norm", layer.self_attention.norm, perm))
        weights.update(feed_forward_weights(prefix, layer.feed_forward, perm))
    for index, layer in enumerate(decoder.layers):
        prefix = f"model.decoder.layers.{index}"
        weights.update(attention_weights(f"{prefix}.self_attn", layer.self_attention, perm))
        weights.update(layer_norm_weights(f"{prefix}.self_attn_layer_norm", layer.self_attention.norm, perm))
        weights.update(attention_weights(f"{prefix}.encoder_attn", layer.encoder_attention, perm))
        weights.update(layer_norm_weights(f"{prefix}.encoder_attn_layer_norm", layer.encoder_attention.norm, perm))
        weights.update(feed_forward_weights(prefix, layer.feed_forward, perm))
    weights["final_logits_bias"] = torch.zeros(1, len(decoder.dictionary))
    return {name: tensor.detach().clone() for name, tensor in weights.items()}


def to_marian(
    model: VaswaniTransformerModel, source_dictionary, target_dictionary, max_new_tokens: int = MAX_NEW_TOKENS
) -> MarianMTModel:
    """The MarianMTModel (eval mode, float32) that computes what `model` computes; its generation config stops at
    max_new_tokens (</s> included), at most what the positions allow."""
    check_exportable(model)
    if len(source_dictionary) != len(target_dictionary) and int(transformers.__version__.split(".")[0]) < 5:
        raise VaswaniConfigError(
            f"the source and target vocabularies differ ({len(source_dictionary)}, {len(target_dictionary)}): "
            f"transformers {transformers.__version__}'s MarianMTModel gives the decoder the source's; "
            "export with transformers >= 5 (pip install -U transformers)"
        )
    config = marian_config(model, source_dictionary, target_dictionary)
    marian = MarianMTModel(config)
    state = marian_state_dict(model)
    expected = {name for name in marian.state_dict() if not name.endswith("embed_positions.weight")}
    if set(state) != expected:  # a transformers release that renamed or added parameters
        raise VaswaniConfigError(
            f"transformers {transformers.__version__}'s MarianMTModel has other parameters "
            f"than this exporter writes: {sorted(set(state) ^ expected)}"
        )
    marian.load_state_dict(state, strict=False)
    limit = min(max_new_tokens, model.decoder.max_positions() - 1)
    marian.generation_config = generation_config(config, target_dictionary, limit)
    return marian.eval()


def export(
    model,
    source_dictionary,
    target_dictionary,
    output_dir,
    *,
    source_lang: str,
    target_lang: str,
    bpe_codes=None,
    sentencepiece_model=None,
    dtype: str = "float32",
    max_new_tokens: int = MAX_NEW_TOKENS,
    force: bool = False,
) -> Path:
    """Write `model` and its tokenizer as a transformers model directory; returns its path."""
    output_dir = Path(output_dir)
    if (bpe_codes is None) == (sentencepiece_model is None):
        raise VaswaniConfigError("give one of --bpe-codes (Moses + subword-nmt) and --sentencepiece (word-pieces)")
    if max_new_tokens < 1:
        raise VaswaniConfigError(f"--max-new-tokens {max_new_tokens}: at least 1 (the </s>)")
    if dtype not in DTYPES:
        raise VaswaniConfigError(f"--dtype {dtype}: not one of {', '.join(DTYPES)}")
    refuse_existing_output(output_dir, force)
    marian = to_marian(model, source_dictionary, target_dictionary, max_new_tokens).to(DTYPES[dtype])
    output_dir.mkdir(parents=True, exist_ok=True)
    marian.save_pretrained(output_dir)
    if bpe_codes is not None:
        write_fsmt_tokenizer(output_dir, bpe_codes, source_dictionary, target_dictionary, source_lang, target_lang)
    else:
        write_marian_tokenizer(
            output_dir, sentencepiece_model, source_dictionary, target_dictionary, source_lang, target_lang
        )
    return output_dir


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="vaswani_plugin.serving.export_huggingface",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_export_arguments(parser, "the transformers model directory to write")
    subwords = parser.add_mutually_exclusive_group(required=True)
    subwords.add_argument("--bpe-codes", help="subword-nmt codes of a Moses + BPE model (En-De, the quickstart)")
    subwords.add_argument("--sentencepiece", help="sentencepiece model of a word-piece model (En-Fr)")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="float32", help="weight type written")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=MAX_NEW_TOKENS,
        help="the generation config's length limit (default: fairseq-generate's 200)",
    )
    run_command(parser, export_command, argv)


def export_command(args) -> None:
    for option, path in (("--bpe-codes", args.bpe_codes), ("--sentencepiece", args.sentencepiece)):
        if path is not None and not Path(path).is_file():
            raise VaswaniConfigError(f"{option} {path}: no such file")
    task, model = load_for_export(args)
    source_lang, target_lang = task.cfg.source_lang, task.cfg.target_lang
    print(f"writing {args.output} (transformers {transformers.__version__}, MarianMTModel, {args.dtype})", flush=True)
    export(
        model,
        task.source_dictionary,
        task.target_dictionary,
        args.output,
        source_lang=source_lang,
        target_lang=target_lang,
        bpe_codes=args.bpe_codes,
        sentencepiece_model=args.sentencepiece,
        dtype=args.dtype,
        max_new_tokens=args.max_new_tokens,
        force=args.force,
    )
    print(
        f"exported {args.checkpoint} -> {args.output}: d_model {model.cfg.encoder_embed_dim}, N "
        f"{model.cfg.encoder_layers}/{model.cfg.decoder_layers}, vocabularies "
        f"{len(task.source_dictionary)}/{len(task.target_dictionary)}; load it with transformers' AutoTokenizer "
        f'and AutoModelForSeq2SeqLM.from_pretrained("{args.output}")'
    )


if __name__ == "__main__":
    main()
