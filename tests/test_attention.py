"""§3.2: attention against a naive softmax(QK^T/√d_k)V, with padding and causal masks; d_k, d_v free."""

import math

import pytest
import torch
from conftest import build_model, random_tokens

from vaswani_plugin.models.layers import MultiHeadAttention, causal_attention_mask, padding_attention_mask


def naive_attention(attention: MultiHeadAttention, x, memory, allowed):
    """Eq. 1 and §3.2.2 head by head, with explicit loops; allowed[b, i, j]: query i may see key j."""
    h, d_k, d_v = attention.heads, attention.key_dim, attention.value_dim
    if attention.self_attention:
        w, b = attention.qkv_proj.weight, attention.qkv_proj.bias
        w_q, w_k, w_v = w.split((h * d_k, h * d_k, h * d_v))
        b_q, b_k, b_v = b.split((h * d_k, h * d_k, h * d_v))
        memory = x
    else:
        w_q, b_q = attention.q_proj.weight, attention.q_proj.bias
        w_k, w_v = attention.kv_proj.weight.split((h * d_k, h * d_v))
        b_k, b_v = attention.kv_proj.bias.split((h * d_k, h * d_v))
    batch, queries = x.size(0), x.size(1)
    out = torch.zeros(batch, queries, h * d_v)
    for n in range(batch):
        for head in range(h):
            q = x[n] @ w_q[head * d_k : (head + 1) * d_k].T + b_q[head * d_k : (head + 1) * d_k]
            k = memory[n] @ w_k[head * d_k : (head + 1) * d_k].T + b_k[head * d_k : (head + 1) * d_k]
            v = memory[n] @ w_v[head * d_v : (head + 1) * d_v].T + b_v[head * d_v : (head + 1) * d_v]
            scores = q @ k.T / math.sqrt(d_k)
            scores = scores.masked_fill(~allowed[n], float("-inf"))
            out[n, :, head * d_v : (head + 1) * d_v] = torch.softmax(scores, dim=-1) @ v
    return attention.out_proj(out)


@pytest.mark.parametrize("key_dim,value_dim", [(8, 8), (6, 10), (3, 5)])
def test_self_attention_with_padding_equals_naive(key_dim, value_dim):
    torch.manual_seed(0)
    attention = MultiHeadAttention(32, 4, key_dim=key_dim, value_dim=value_dim, dropout=0.0).eval()
    x = torch.randn(3, 7, 32)
    padding = torch.zeros(3, 7, dtype=torch.bool)
    padding[1, 5:] = True  # right padding
    padding[2, :3] = True  # left padding
    out, _ = attention(x, mask=padding_attention_mask(padding))
    allowed = (~padding)[:, None, :].expand(3, 7, 7)
    expected = naive_attention(attention, x, None, allowed)
    keep = ~padding
    torch.testing.assert_close(out[keep], expected[keep], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("with_padding", [False, True])
def test_causal_self_attention_equals_naive(with_padding):
    torch.manual_seed(1)
    attention = MultiHeadAttention(32, 4, key_dim=6, value_dim=10, dropout=0.0).eval()
    x = torch.randn(2, 6, 32)
    padding = torch.zeros(2, 6, dtype=torch.bool)
    if with_padding:
        padding[1, :2] = True
    mask, is_causal = causal_attention_mask(padding)
    assert is_causal == (not with_padding)
    out, _ = attention(x, mask=mask, is_causal=is_causal)
    allowed = torch.ones(6, 6, dtype=torch.bool).tril() & (~padding)[:, None, :]
    expected = naive_attention(attention, x, None, allowed)
    keep = ~padding
    torch.testing.assert_close(out[keep], expected[keep], rtol=1e-5, atol=1e-5)


def test_encoder_decoder_attention_equals_naive_and_its_weights_are_probabilities():
    torch.manual_seed(2)
    attention = MultiHeadAttention(32, 4, key_dim=5, value_dim=7, dropout=0.0, memory_dim=24).eval()
    x, memory = torch.randn(2, 4, 32), torch.randn(2, 9, 24)
    padding = torch.zeros(2, 9, dtype=torch.bool)
    padding[0, 6:] = True
    mask = padding_attention_mask(padding)
    out, _ = attention(x, memory=memory, mask=mask)
    expected = naive_attention(attention, x, memory, (~padding)[:, None, :].expand(2, 4, 9))
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    # The explicit path (for alignments) computes the same output, and probabilities over the real keys.
    out_with_weights, weights = attention(x, memory=memory, mask=mask, need_weights=True)
    torch.testing.assert_close(out_with_weights, out, rtol=1e-5, atol=1e-6)
    assert weights.shape == (2, 4, 9)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4))
    assert weights[0, :, 6:].abs().max() == 0


def test_future_target_tokens_never_change_earlier_decoder_outputs(dictionary):
    torch.manual_seed(3)
    model = build_model(dictionary, attention_key_dim=6, attention_value_dim=10).eval()
    generator = torch.Generator().manual_seed(3)
    source = random_tokens(dictionary, 2, 7, generator)
    target = random_tokens(dictionary, 2, 8, generator)
    changed = target.clone()
    changed[:, 5:] = random_tokens(dictionary, 2, 3, generator)
    with torch.no_grad():
        before, _ = model(source, None, target)
        after, _ = model(source, None, changed)
    torch.testing.assert_close(before[:, :5], after[:, :5], rtol=0, atol=1e-6)
    assert (before[:, 5:] - after[:, 5:]).abs().max() > 1e-3


def test_padding_never_changes_real_outputs(dictionary):
    """A sentence alone and inside a padded batch (left-padded source, right-padded target) agree."""
    torch.manual_seed(4)
    model = build_model(dictionary).eval()
    generator = torch.Generator().manual_seed(4)
    source = random_tokens(dictionary, 1, 5, generator)
    target = random_tokens(dictionary, 1, 4, generator)
    padded_source = torch.cat([torch.full((1, 3), dictionary.pad()), source], dim=1)
    padded_target = torch.cat([target, torch.full((1, 2), dictionary.pad())], dim=1)
    with torch.no_grad():
        alone, _ = model(source, None, target)
        batched, extra = model(padded_source, None, padded_target)
    torch.testing.assert_close(batched[:, :4], alone, rtol=1e-5, atol=1e-5)
    # Alignment attention (eval mode) gives padding nothing.
    assert extra["attn"][0][:, :4, :3].abs().max() == 0


def test_head_sizes_are_free_of_d_model(dictionary):
    model = build_model(dictionary, attention_key_dim=6, attention_value_dim=10)
    attention = model.encoder.layers[0].self_attention.sublayer
    assert attention.qkv_proj.weight.shape == (4 * (6 + 6 + 10), 32)
    assert attention.out_proj.weight.shape == (32, 4 * 10)


def test_on_a_gpu_attention_never_runs_cudnns_kernel_and_leaves_the_setting_as_it_was(monkeypatch):
    """cuDNN's SDPA builds a graph per shape (docs/results.md "GPU"): off during the call on any device but the CPU
    (here meta tensors, as no GPU is at hand), restored after; on the CPU the setting is not touched."""
    from vaswani_plugin.models import attention as module

    seen = []

    def recorder(q, k, v, **options):
        seen.append((q.device.type, torch.backends.cuda.cudnn_sdp_enabled()))
        return q

    monkeypatch.setattr(module.F, "scaled_dot_product_attention", recorder)
    assert torch.backends.cuda.cudnn_sdp_enabled()
    for device in ("meta", "cpu"):
        q = torch.zeros(2, 4, 3, 8, device=device)
        module.attention(q, q, q)
    assert seen == [("meta", False), ("cpu", True)] and torch.backends.cuda.cudnn_sdp_enabled()
