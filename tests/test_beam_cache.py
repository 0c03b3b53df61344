"""Incremental decoding (cached keys/values) gives the full forward pass's log-probabilities, beams reordered."""

import pytest
import torch
from conftest import build_model, random_tokens


def log_probs(model, decoder_out):
    return model.get_normalized_probs(decoder_out, log_probs=True)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"decoder_normalize_before": True, "encoder_normalize_before": True},
        {"decoder_learned_pos": True, "attention_key_dim": 6, "attention_value_dim": 10},
    ],
)
def test_incremental_equals_full_forward(dictionary, options):
    torch.manual_seed(0)
    model = build_model(dictionary, **options).eval()
    generator = torch.Generator().manual_seed(0)
    source = random_tokens(dictionary, 3, 7, generator, lengths=[7, 4, 2], left_pad=True)
    target = random_tokens(dictionary, 3, 6, generator)
    with torch.no_grad():
        encoder_out = model.encoder(source)
        full = log_probs(model, model.decoder(target, encoder_out))
        state = {}
        for step in range(1, target.size(1) + 1):
            out = model.decoder(target[:, :step], encoder_out, incremental_state=state, return_attention=True)
            torch.testing.assert_close(log_probs(model, out)[:, -1], full[:, step - 1], rtol=0, atol=1e-5)
            # Alignment attention of the newest position, when asked for, matches the full pass too.
            torch.testing.assert_close(
                out[1]["attn"][0][:, -1],
                model.decoder(target, encoder_out)[1]["attn"][0][:, step - 1],
                rtol=0,
                atol=1e-5,
            )
        # Beam search itself does not ask: step by step, no attention is computed.
        assert model.decoder(target[:, :1], encoder_out, incremental_state={})[1]["attn"] == [None]


def test_incremental_after_beam_reorder_and_finished_sentences(dictionary):
    """As SequenceGenerator does: beams reorder within their sentence, then a finished sentence leaves."""
    torch.manual_seed(1)
    model = build_model(dictionary).eval()
    generator = torch.Generator().manual_seed(1)
    sentences, beam = 2, 3
    source = random_tokens(dictionary, sentences, 6, generator, lengths=[6, 3], left_pad=True)
    beam_rows = torch.arange(sentences).repeat_interleave(beam)
    hypotheses = random_tokens(dictionary, sentences * beam, 7, generator)
    with torch.no_grad():
        encoder_out = model.encoder.reorder_encoder_out(model.encoder(source), beam_rows)
        state = {}
        tokens = hypotheses[:, :3]
        for step in range(1, 4):
            model.decoder(tokens[:, :step], encoder_out, incremental_state=state)
        # Beam search keeps beam 2 of sentence 0 twice and permutes sentence 1's beams.
        new_order = torch.tensor([2, 2, 0, 5, 3, 4])
        model.decoder.reorder_incremental_state_scripting(state, new_order)
        encoder_out = model.encoder.reorder_encoder_out(encoder_out, new_order)
        tokens = torch.cat([tokens[new_order], hypotheses[:, 3:5]], dim=1)
        for step in (4, 5):
            out = model.decoder(tokens[:, :step], encoder_out, incremental_state=state)
        full = log_probs(model, model.decoder(tokens, encoder_out))
        torch.testing.assert_close(log_probs(model, out)[:, -1], full[:, -1], rtol=0, atol=1e-5)
        # Sentence 0 finishes: only sentence 1's beams remain.
        survivors = torch.tensor([3, 4, 5])
        model.decoder.reorder_incremental_state_scripting(state, survivors)
        encoder_out = model.encoder.reorder_encoder_out(encoder_out, survivors)
        tokens = torch.cat([tokens[survivors], hypotheses[:3, 5:6]], dim=1)
        out = model.decoder(tokens, encoder_out, incremental_state=state)
        full = log_probs(model, model.decoder(tokens, encoder_out))
        torch.testing.assert_close(log_probs(model, out)[:, -1], full[:, -1], rtol=0, atol=1e-5)


def test_encoder_decoder_keys_and_values_are_computed_once_per_sentence(dictionary):
    model = build_model(dictionary).eval()
    generator = torch.Generator().manual_seed(2)
    source = random_tokens(dictionary, 2, 5, generator)
    target = random_tokens(dictionary, 2, 4, generator)
    calls = []
    kv_proj = model.decoder.layers[0].encoder_attention.sublayer.kv_proj
    kv_proj.register_forward_hook(lambda *args: calls.append(1))
    with torch.no_grad():
        encoder_out = model.encoder(source)
        state = {}
        for step in range(1, 5):
            model.decoder(target[:, :step], encoder_out, incremental_state=state)
    assert len(calls) == 1


@pytest.mark.parametrize("announced_beam", [None, 3])
def test_beam_cache_through_beam_search_reorders_shrinks_and_other_orders(dictionary, announced_beam):
    """Every kind of reorder the beam cache distinguishes, each step checked against the full forward pass:
    beam search's first reorder (all beams continue the sentence's first row), moves within sentences,
    a sentence leaving from the middle (slabs keep its group), a second leaving (slabs compacted),
    and an order that is no beam pattern (histories copied). With the beam size announced (as fairseq's
    SequenceGenerator does), beams are grouped from the first step and the encoder-decoder keys/values are
    computed once per sentence."""
    torch.manual_seed(3)
    model = build_model(dictionary).eval()
    if announced_beam:
        model.set_beam_size(announced_beam)  # as SequenceGenerator calls it
    memory_rows = []
    model.decoder.layers[0].encoder_attention.sublayer.kv_proj.register_forward_hook(
        lambda module, inputs, output: memory_rows.append(inputs[0].size(0))
    )
    generator = torch.Generator().manual_seed(3)
    source = random_tokens(dictionary, 3, 6, generator, lengths=[6, 3, 5], left_pad=True)
    encoder_out = model.encoder.reorder_encoder_out(model.encoder(source), torch.arange(3).repeat_interleave(3))
    tokens = torch.empty(9, 0, dtype=torch.long)
    reorders = [
        torch.tensor([0, 0, 0, 3, 3, 3, 6, 6, 6]),
        torch.tensor([2, 2, 0, 4, 3, 5, 8, 6, 6]),
        torch.tensor([1, 0, 0, 8, 7, 6]),
        torch.tensor([5, 3, 4]),
        torch.tensor([2, 0]),
    ]
    state = {}
    with torch.no_grad():
        for new_order in [None] + reorders:
            if new_order is not None:
                model.decoder.reorder_incremental_state_scripting(state, new_order)
                encoder_out = model.encoder.reorder_encoder_out(encoder_out, new_order)
                tokens = tokens[new_order]
            for _ in range(2):
                tokens = torch.cat([tokens, random_tokens(dictionary, tokens.size(0), 1, generator)], dim=1)
                out = model.decoder(tokens, encoder_out, incremental_state=state, return_attention=True)
                full = model.decoder(tokens, encoder_out)
                torch.testing.assert_close(
                    log_probs(model, out)[:, -1], log_probs(model, full)[:, -1], rtol=0, atol=1e-5
                )
                torch.testing.assert_close(out[1]["attn"][0][:, -1], full[1]["attn"][0][:, -1], rtol=0, atol=1e-5)
    cache = model.decoder.get_incremental_state(state, "beam_cache")
    assert (cache.group_size, cache.slab_groups) == (1, 2)  # the last order was no beam pattern
    assert memory_rows[0] == (3 if announced_beam else 9)  # the first step's, before any full pass


def test_announced_beam_size_without_beam_layout_keeps_rows_apart(dictionary):
    """Rows that do not share an encoder output are not grouped, whatever beam size was announced."""
    torch.manual_seed(4)
    model = build_model(dictionary).eval()
    model.set_beam_size(3)
    generator = torch.Generator().manual_seed(4)
    encoder_out = model.encoder(random_tokens(dictionary, 3, 5, generator))
    target = random_tokens(dictionary, 3, 2, generator)
    state = {}
    with torch.no_grad():
        for step in (1, 2):
            out = model.decoder(target[:, :step], encoder_out, incremental_state=state)
        full = model.decoder(target, encoder_out)
    torch.testing.assert_close(log_probs(model, out)[:, -1], log_probs(model, full)[:, -1], rtol=0, atol=1e-5)
    assert model.decoder.get_incremental_state(state, "beam_cache").group_size == 1
