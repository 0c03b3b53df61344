"""Eq. 1, Attention(Q, K, V) = softmax(QK^T / √d_k) V: the one place it is computed (layers and beam cache)."""

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from vaswani_plugin.models.dropout import apply_dropout


def attention_probabilities(q: Tensor, k: Tensor, mask: Optional[Tensor] = None, is_causal: bool = False) -> Tensor:
    """softmax(QK^T / √d_k) of eq. 1 per head (batch, heads, queries, keys); `mask` True where a key may be seen,
    or added to the scores."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    if is_causal:
        mask = torch.ones(q.size(2), k.size(2), dtype=torch.bool, device=q.device).tril()
    if mask is not None and mask.is_floating_point():
        scores = scores + mask
    elif mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores.float(), dim=-1).type_as(q)


def attention_dtype(x: Tensor) -> torch.dtype:
    """The dtype attention() computes in for inputs projected from x: on a CPU under autocast float32 (below), on
    another device under autocast the autocast dtype, else x's."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        return torch.float32 if device == "cpu" else torch.get_autocast_dtype(device)
    return x.dtype


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Optional[Tensor] = None,
    is_causal: bool = False,
    dropout: float = 0.0,
    need_weights: bool = False,
) -> Tuple[Tensor, Optional[Tensor]]:
    """Eq. 1 over (batch, heads, time, d) tensors, masked as torch's SDPA masks (True where a key may be seen, or
    added to the scores). Returns the output and, with need_weights, the probabilities (written out then; SDPA's
    fused kernels otherwise)."""
    if need_weights:
        probs = attention_probabilities(q, k, mask, is_causal)
        return torch.matmul(apply_dropout(probs, dropout, True), v), probs
    if q.device.type == "cpu":
        if torch.is_autocast_enabled("cpu"):
            # In float32: torch's CPU flash attention runs its backward far slower in bfloat16 (docs/design.md).
            with torch.autocast("cpu", enabled=False):
                return F.scaled_dot_product_attention(
                    q.float(), k.float(), v.float(), attn_mask=mask, dropout_p=dropout, is_causal=is_causal
                ), None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal), None
    # Not cuDNN's fused attention, which torch picks first on H100s: it builds a graph for each new shape, and
    # translation batches change length nearly every step (docs/results.md "GPU": 304 ms a training step with it,
    # 56 without). Set around the call (1-2 µs) and restored: the caller's choice stays theirs elsewhere.
    cudnn = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal), None
    finally:
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
