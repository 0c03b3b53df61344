"""Parameter counts equal the closed form of §3 (Table 3's 65M / 213M with a 37,000-symbol joined dictionary)."""

from argparse import Namespace

import pytest
import torch
from conftest import make_dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY

from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerConfig, VaswaniTransformerModel


def arch_config(arch, **command_line):
    """The config fairseq-train builds for `--arch ARCH` plus command-line options."""
    args = Namespace(**command_line)
    ARCH_CONFIG_REGISTRY[arch](args)
    return VaswaniTransformerConfig.from_namespace(args)


def build_on_meta(cfg, dictionary):
    task = Namespace(source_dictionary=dictionary, target_dictionary=dictionary)
    with torch.device("meta"):  # sizes only: no memory, no initialisation time
        return VaswaniTransformerModel.build_model(cfg, task)


def closed_form(vocab, layers, d_model, d_ff, heads, d_k=None, d_v=None):
    """Shared embedding V·d; per attention W^Q, W^K (d·h·d_k), W^V (d·h·d_v), W^O (h·d_v·d) with biases;
    FFN 2·d·d_ff + d_ff + d (eq. 2); a LayerNorm 2d per sub-layer; no positional table, no output bias."""
    d_k = d_k or d_model // heads
    d_v = d_v or d_model // heads
    attention = (
        2 * (d_model * heads * d_k + heads * d_k)
        + (d_model * heads * d_v + heads * d_v)
        + heads * d_v * d_model
        + d_model
    )
    ffn = 2 * d_model * d_ff + d_ff + d_model
    norm = 2 * d_model
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    return vocab * d_model + layers * (encoder_layer + decoder_layer)


@pytest.fixture(scope="module")
def joined_dictionary():
    dictionary = make_dictionary(37000 - 4)  # plus fairseq's 4 special symbols
    assert len(dictionary) == 37000
    return dictionary


@pytest.mark.parametrize(
    "arch,sizes,approx",
    [
        ("vaswani_transformer", dict(layers=6, d_model=512, d_ff=2048, heads=8), 63.1e6),
        ("vaswani_transformer_big", dict(layers=6, d_model=1024, d_ff=4096, heads=16), 214.3e6),
    ],
)
def test_parameter_count_equals_closed_form(arch, sizes, approx, joined_dictionary):
    model = build_on_meta(arch_config(arch, share_all_embeddings=True), joined_dictionary)
    count = sum(p.numel() for p in model.parameters())
    assert count == closed_form(37000, **sizes)
    assert abs(count - approx) < 0.1e6


def test_d_k_and_d_v_enter_the_count(joined_dictionary):
    cfg = arch_config("vaswani_transformer", share_all_embeddings=True, attention_key_dim=32, attention_value_dim=128)
    model = build_on_meta(cfg, joined_dictionary)
    assert sum(p.numel() for p in model.parameters()) == closed_form(37000, 6, 512, 2048, 8, 32, 128)


def test_unshared_embeddings_add_their_matrices():
    source, target = make_dictionary(100), make_dictionary(60)
    cfg = arch_config("vaswani_transformer")
    task = Namespace(source_dictionary=source, target_dictionary=target)
    with torch.device("meta"):
        model = VaswaniTransformerModel.build_model(cfg, task)
    shared = closed_form(0, 6, 512, 2048, 8)
    assert sum(p.numel() for p in model.parameters()) == shared + (104 + 2 * 64) * 512


@pytest.mark.parametrize(
    "arch,expected",
    [
        (
            "vaswani_transformer",
            dict(
                encoder_layers=6,
                encoder_embed_dim=512,
                encoder_ffn_embed_dim=2048,
                encoder_attention_heads=8,
                decoder_embed_dim=512,
                dropout=0.1,
            ),
        ),
        (
            "vaswani_transformer_big",
            dict(
                encoder_layers=6,
                encoder_embed_dim=1024,
                encoder_ffn_embed_dim=4096,
                encoder_attention_heads=16,
                decoder_attention_heads=16,
                dropout=0.3,
            ),
        ),
        (
            "vaswani_transformer_big_en_fr",
            dict(encoder_embed_dim=1024, decoder_ffn_embed_dim=4096, decoder_attention_heads=16, dropout=0.1),
        ),
        (
            "vaswani_transformer_parsing",
            dict(
                encoder_layers=4,
                decoder_layers=4,
                encoder_embed_dim=1024,
                decoder_embed_dim=1024,
                encoder_ffn_embed_dim=2048,
                encoder_attention_heads=8,
                dropout=0.1,
            ),
        ),
    ],
)
def test_architectures_set_the_papers_sizes_and_yield_to_the_command_line(arch, expected):
    cfg = arch_config(arch)
    assert {name: getattr(cfg, name) for name in expected} == expected
    assert cfg.attention_dropout == 0.0 and cfg.activation_dropout == 0.0
    assert not cfg.encoder_normalize_before and not cfg.encoder_learned_pos
    overridden = arch_config(arch, dropout=0.25, encoder_layers=3)
    assert overridden.dropout == 0.25 and overridden.encoder_layers == 3


def test_sharing_options_tie_the_right_matrices():
    dictionary = make_dictionary(30)
    task = Namespace(source_dictionary=dictionary, target_dictionary=dictionary)
    with torch.device("meta"):
        tied = VaswaniTransformerModel.build_model(
            arch_config("vaswani_transformer", share_decoder_input_output_embed=True), task
        )
        shared = VaswaniTransformerModel.build_model(
            arch_config("vaswani_transformer", share_all_embeddings=True), task
        )
    decoder_embedding = tied.decoder.embedding.embed_tokens.weight
    assert tied.decoder.output_projection.weight is decoder_embedding
    assert tied.encoder.embedding.embed_tokens.weight is not decoder_embedding
    assert shared.encoder.embedding.embed_tokens.weight is shared.decoder.embedding.embed_tokens.weight
    assert shared.decoder.output_projection.weight is shared.decoder.embedding.embed_tokens.weight
    assert tied.decoder.output_projection.bias is None


def test_initialisation_has_fairseq_transformers_distributions():
    """The paper gives no initialisation; every tensor is drawn as fairseq's `transformer` draws its counterpart
    (Q/K/V Xavier gain 1/√2, W^O Xavier, FFN as nn.Linear, embeddings N(0, d^-1/2)): same bounds, same spread."""
    from fairseq.models.transformer import TransformerModel, base_architecture

    from vaswani_plugin.checkpoints.convert_fairseq import convert_state, fairseq_options

    dictionary = make_dictionary(3000)
    task = Namespace(source_dictionary=dictionary, target_dictionary=dictionary)
    sizes = dict(
        encoder_embed_dim=256,
        decoder_embed_dim=256,
        encoder_ffn_embed_dim=1024,
        decoder_ffn_embed_dim=1024,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_layers=1,
        decoder_layers=1,
    )
    args = Namespace(**sizes, share_all_embeddings=True)
    base_architecture(args)
    torch.manual_seed(0)
    theirs = convert_state(
        TransformerModel.build_model(args, task).state_dict(),
        fairseq_options(Namespace(**vars(args), arch="transformer")),
        dictionary.pad(),
    )
    ours = VaswaniTransformerModel.build_model(
        VaswaniTransformerConfig(**sizes, share_all_embeddings=True), task
    ).state_dict()
    assert set(ours) == set(theirs) - {
        "encoder.embedding.learned_positions.weight",
        "decoder.embedding.learned_positions.weight",
    }
    for name, tensor in ours.items():
        expected = theirs[name]
        # Fused matrices hold [Q; K; V] (or [K; V]) blocks of d_model rows: compare block by block. The 99th
        # percentile of |w| tells uniform (0.99 bound = 1.71 sd) from normal (2.58 sd) draws.
        for ours_block, their_block in zip(tensor.split(256), expected.split(256)):
            rel = 0.05 if ours_block.numel() >= 10000 else 0.3  # biases: 256 draws
            assert ours_block.std().item() == pytest.approx(their_block.std().item(), rel=rel, abs=1e-6), name
            if ours_block.numel() >= 10000:
                assert ours_block.abs().quantile(0.99).item() == pytest.approx(
                    their_block.abs().quantile(0.99).item(), rel=0.05
                ), name
