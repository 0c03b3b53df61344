"""§3.5: sinusoidal positional encodings, element by element, for left- and right-padded batches."""

import math

import torch
from conftest import build_model, random_tokens

from vaswani_plugin.models.layers import position_indices, sinusoidal_positions


def formula(pos: int, index: int, d_model: int) -> float:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))."""
    two_i = index - index % 2
    angle = pos / 10000 ** (two_i / d_model)
    return math.sin(angle) if index % 2 == 0 else math.cos(angle)


def test_encodings_equal_the_formula_element_wise():
    for d_model in (8, 7, 512):
        positions = torch.tensor([0, 1, 2, 17, 255, 4999])
        table = sinusoidal_positions(positions, d_model)
        expected = torch.tensor(
            [[formula(p, i, d_model) for i in range(d_model)] for p in positions.tolist()], dtype=torch.float64
        )
        assert table.shape == (len(positions), d_model)
        torch.testing.assert_close(table, expected, rtol=0, atol=1e-12)


def test_position_zero_is_the_first_real_token_whatever_the_padding():
    pad = torch.tensor(
        [
            [False, False, False, True, True],  # right-padded
            [True, True, False, False, False],
        ]
    )  # left-padded
    positions = position_indices(pad)
    assert positions[0, :3].tolist() == [0, 1, 2]
    assert positions[1, 2:].tolist() == [0, 1, 2]


def embedded_encodings(model, tokens):
    """What the encoder adds to √d_model · embedding: recovered by subtracting the scaled embedding."""
    embedding = model.encoder.embedding
    with torch.no_grad():
        scaled = embedding.embed_tokens(tokens) * math.sqrt(embedding.dim)
        padding = tokens.eq(model.encoder.padding_idx)
        return embedding(tokens, position_indices(padding)) - scaled


def test_model_adds_the_formula_for_left_and_right_padded_batches(dictionary):
    model = build_model(dictionary).eval()
    d_model = model.encoder.embedding.dim
    generator = torch.Generator().manual_seed(0)
    lengths = [6, 3, 1]
    for left_pad in (False, True):
        tokens = random_tokens(dictionary, 3, 6, generator, lengths=lengths, left_pad=left_pad)
        added = embedded_encodings(model, tokens)
        for row, n in enumerate(lengths):
            first = 6 - n if left_pad else 0
            for pos in range(n):
                expected = torch.tensor([formula(pos, i, d_model) for i in range(d_model)])
                torch.testing.assert_close(added[row, first + pos], expected, rtol=0, atol=1e-5)


def test_sinusoids_have_no_parameters_and_no_length_limit(dictionary):
    model = build_model(dictionary).eval()
    assert not any("position" in name for name, _ in model.named_parameters())
    # Far longer than --max-source-positions (1024 by default): nothing to index out of.
    tokens = random_tokens(dictionary, 1, 3000, torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model.encoder(tokens)["memory"][0]
    assert out.shape == (1, 3000, 32) and torch.isfinite(out).all()
    # The encodings are computed once and kept outside the state (not saved); a longer input, another dtype or
    # device computes them again, from the formula.
    assert not any("sinusoid" in name for name in model.state_dict())
    added = embedded_encodings(model, tokens)
    for pos in (0, 255, 256, 2999):
        expected = torch.tensor([formula(pos, i, 32) for i in range(32)])
        torch.testing.assert_close(added[0, pos], expected, rtol=0, atol=1e-5)
    model.double()
    added = embedded_encodings(model, tokens[:, :5])
    assert added.dtype == torch.float64
    expected = torch.tensor([[formula(pos, i, 32) for i in range(32)] for pos in range(5)], dtype=torch.float64)
    torch.testing.assert_close(added[0], expected, rtol=0, atol=1e-12)


def test_learned_positions_option_is_a_table_of_max_positions(dictionary):
    model = build_model(
        dictionary, encoder_learned_pos=True, decoder_learned_pos=True, max_source_positions=50, max_target_positions=40
    )
    assert model.encoder.embedding.learned_positions.weight.shape == (50, 32)
    assert model.decoder.embedding.learned_positions.weight.shape == (40, 32)
