"""Padding: every sentence of a padded batch gets the decoder outputs and gradients it gets alone, without
padding; right-padded targets need only SDPA's causal flag."""

import pytest
import torch
from conftest import build_model, random_tokens

from vaswani_plugin.models.layers import causal_attention_mask, padding_attention_mask

LENGTHS = [6, 3, 5, 1]


def batch(dictionary, left_pad):
    generator = torch.Generator().manual_seed(4)
    source = random_tokens(dictionary, 4, 5, generator, lengths=[5, 2, 4, 3], left_pad=True)
    target = random_tokens(dictionary, 4, 6, generator, lengths=LENGTHS, left_pad=left_pad)
    return source, target


def real_rows(tokens, dictionary):
    """Each row's real tokens, without padding."""
    return [row[row.ne(dictionary.pad())] for row in tokens]


@pytest.mark.parametrize("left_pad", [False, True], ids=["right_padded", "left_padded"])
def test_each_sentence_of_a_padded_batch_gets_what_it_gets_alone(dictionary, left_pad):
    torch.manual_seed(5)
    model = build_model(dictionary, decoder_normalize_before=left_pad, decoder_learned_pos=left_pad).eval()
    source, target = batch(dictionary, left_pad)
    with torch.no_grad():
        features, _ = model(source, None, target, features_only=True)
        keep = target.ne(dictionary.pad())
        for n, (src, tgt) in enumerate(zip(real_rows(source, dictionary), real_rows(target, dictionary))):
            alone, _ = model(src[None], None, tgt[None], features_only=True)
            torch.testing.assert_close(features[n][keep[n]], alone[0], rtol=1e-5, atol=1e-5)


def test_gradients_of_a_padded_batch_are_the_sum_over_its_sentences(dictionary):
    torch.manual_seed(6)
    model = build_model(dictionary, dropout=0.0)
    source, target = batch(dictionary, left_pad=False)

    def gradients(src, tgt):
        model.zero_grad()
        features, _ = model(src, None, tgt, features_only=True)
        logits = model.decoder.output_layer(features[tgt.ne(dictionary.pad())])
        torch.log_softmax(logits, -1)[:, 4].sum().backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    batched = gradients(source, target)
    alone = [gradients(s[None], t[None]) for s, t in zip(real_rows(source, dictionary), real_rows(target, dictionary))]
    assert "decoder.layers.0.feed_forward.sublayer.inner.weight" in batched
    for name, grad in batched.items():
        torch.testing.assert_close(grad, sum(g[name] for g in alone if name in g), rtol=1e-4, atol=1e-5)


def test_right_padding_needs_only_the_causal_flag():
    padding = torch.tensor([[False, False, True], [False, False, False]])
    assert causal_attention_mask(padding) == (None, True)
    mask, is_causal = causal_attention_mask(padding.flip(1))  # left padding: an explicit mask
    assert not is_causal and mask.shape == (2, 1, 3, 3) and not mask[0, 0, 2, 0] and mask[0, 0, 2, 1]


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16_autocast"])
def test_training_masks_padding_as_validation_does(dictionary, autocast):
    """A training forward pass builds the key-padding masks once, added to the scores (0 or -inf), in the dtype
    attention computes in; validation passes SDPA the boolean ones. Without dropout both compute the same."""
    allowed = padding_attention_mask(torch.tensor([[True, False, False]]))
    added = padding_attention_mask(torch.tensor([[True, False, False]]), torch.float32)
    assert allowed.tolist() == [[[[False, True, True]]]] and added.tolist() == [[[[float("-inf"), 0.0, 0.0]]]]
    torch.manual_seed(7)
    model = build_model(dictionary, dropout=0.0)
    source, target = batch(dictionary, left_pad=False)
    outputs = []
    for training in (True, False):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            outputs.append(
                model.train(training)(source, None, target, features_only=True, return_attention=False)[0].float()
            )
    torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=1e-6)
