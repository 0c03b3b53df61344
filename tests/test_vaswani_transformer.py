"""models/vaswani_transformer.py: the encoder output reordered in any order, as the reordered sources give it."""

import torch
from conftest import build_model, random_tokens


def test_reorder_encoder_out_across_sentences_at_constant_size(dictionary):
    """Rows moved between sentences without changing their count (no fairseq generator does this; the encoder
    must not rely on it): full and step-by-step decoding see the sources in the new order."""
    torch.manual_seed(2)
    model = build_model(dictionary).eval()
    generator = torch.Generator().manual_seed(2)
    source = random_tokens(dictionary, 3, 6, generator, lengths=[6, 3, 5], left_pad=True)
    target = random_tokens(dictionary, 3, 4, generator)
    first, second = torch.tensor([2, 0, 1]), torch.tensor([1, 1, 0])
    with torch.no_grad():
        reordered = model.encoder.reorder_encoder_out(model.encoder(source), first)
        reordered = model.encoder.reorder_encoder_out(reordered, second)
        # The reference: the encoder run on the sources in the composed order.
        expected_out = model.encoder(source[first[second]])
        reference = model.decoder(target, expected_out)[0]
        torch.testing.assert_close(model.decoder(target, reordered)[0], reference, rtol=0, atol=1e-5)
        state = {}
        for step in range(1, target.size(1) + 1):
            out = model.decoder(target[:, :step], reordered, incremental_state=state)[0]
        torch.testing.assert_close(out[:, -1], reference[:, -1], rtol=0, atol=1e-5)
        # Fewer rows (a sentence left): the noted order still applies.
        fewer = model.encoder.reorder_encoder_out(reordered, torch.tensor([2, 0]))
        torch.testing.assert_close(model.decoder(target[[2, 0]], fewer)[0], reference[[2, 0]], rtol=0, atol=1e-5)
