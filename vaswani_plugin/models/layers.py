"""The building blocks of §3: positional encodings, multi-head attention, feed-forward and the layers.

Tensors are batch-first throughout: (batch, time, channels) for activations and (batch, heads, time, d_k)
inside attention, which is the layout torch's scaled_dot_product_attention wants.
"""

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani_plugin.models.attention import attention, attention_probabilities
from vaswani_plugin.models.beam_cache import LayerCache
from vaswani_plugin.models.dropout import apply_dropout
from vaswani_plugin.models.memory import SINUSOID_ROWS


def sinusoidal_positions(positions: Tensor, dim: int) -> Tensor:
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))."""
    # float64 so that the encodings equal the formula to fp32 precision at any position.
    two_i = torch.arange(0, dim, 2, device=positions.device, dtype=torch.float64)
    angle = positions.to(torch.float64).unsqueeze(-1) / torch.pow(10000.0, two_i / dim)
    encoding = torch.empty(*positions.shape, dim, device=positions.device, dtype=torch.float64)
    encoding[..., 0::2] = torch.sin(angle)
    encoding[..., 1::2] = torch.cos(angle[..., : dim // 2])
    return encoding


def position_indices(padding_mask: Tensor) -> Tensor:
    """Position of each token counted from 0 at the first real token, for left- or right-padded batches."""
    return ((~padding_mask).cumsum(dim=1) - 1).clamp(min=0)


class TokenEmbedding(nn.Module):
    """§3.4 + §3.5 + §5.4: Dropout(Embedding(token) · √d_model + PE(pos))."""

    def __init__(self, embed_tokens: nn.Embedding, *, dropout: float, learned_positions: int = 0):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.dim = embed_tokens.embedding_dim
        self.scale = math.sqrt(self.dim)
        # Table 3 row (E): learned positional embeddings instead of sinusoids; 0 = sinusoidal.
        self.learned_positions = nn.Embedding(learned_positions, self.dim) if learned_positions > 0 else None
        if self.learned_positions is not None:
            nn.init.normal_(self.learned_positions.weight, mean=0.0, std=self.dim**-0.5)
        self.dropout = dropout
        self.sinusoids: Optional[Tensor] = None  # §3.5's encodings, computed once (not a parameter, not saved)

    def forward(self, tokens: Tensor, positions: Tensor, length: Optional[int] = None) -> Tensor:
        """tokens, positions (batch, time); every position below `length`, the padded input's length (default:
        the positions' own, the whole input's)."""
        x = self.embed_tokens(tokens) * self.scale
        if self.learned_positions is not None:
            x = x + self.learned_positions(positions)
        else:
            x = x + F.embedding(positions, self.sinusoid_table(length or positions.size(-1), x))
        return apply_dropout(x, self.dropout, self.training)

    def sinusoid_table(self, length: int, like: Tensor) -> Tensor:
        """PE of positions 0 .. length-1 at least, in like's dtype and device: computed in float64 when a longer
        input, another device or dtype comes, then indexed (one kernel a forward pass instead of ten)."""
        table = self.sinusoids
        if table is None or table.size(0) < length or table.device != like.device or table.dtype != like.dtype:
            rows = max(length, SINUSOID_ROWS if table is None else table.size(0))
            positions = torch.arange(rows, device=like.device)
            self.sinusoids = table = sinusoidal_positions(positions, self.dim).to(like.dtype)
        return table


def padding_attention_mask(key_padding: Tensor, dtype: Optional[torch.dtype] = None) -> Tensor:
    """SDPA mask of shape (batch, 1, 1, keys): boolean (True = may attend), or with a dtype added to the scores
    (0, or -inf at padding), which SDPA would otherwise make of the boolean one in each layer's call (a training
    forward pass builds it once). Always a mask: asking whether anything is padded would cost a host sync, and
    nearly every batch pads some source sentence."""
    if dtype is None:
        return (~key_padding)[:, None, None, :]
    additive = torch.zeros(key_padding.shape, dtype=dtype, device=key_padding.device)
    return additive.masked_fill_(key_padding, float("-inf"))[:, None, None, :]


def causal_attention_mask(key_padding: Tensor, right_padded: Optional[bool] = None) -> Tuple[Optional[Tensor], bool]:
    """Decoder self-attention mask (§3.2.3): no position attends to later ones, nor to padding.

    Returns (mask, is_causal). Without padding, or with padding only at the end of each row (fairseq's training
    and scoring batches), the causal flag alone masks every padding key from every real query and lets SDPA
    pick its fused kernels; padding queries then see earlier padding, but no real position reads them.
    Otherwise a query always keeps its own key, so a padding query never has an empty row (NaN).
    right_padded, what a training step's data declares: True, the causal flag, checked on the device
    (torch._assert_async: no host sync); False, the full mask. None: asked of the tensor, a host sync on a GPU.
    """
    padded_inside = (key_padding[:, :-1] & ~key_padding[:, 1:]).any() if right_padded is not False else None
    if right_padded:
        torch._assert_async(~padded_inside, RIGHT_PADDING_BROKEN)
        return None, True
    if right_padded is None and not padded_inside:
        return None, True
    length = key_padding.size(1)
    causal = torch.ones(length, length, dtype=torch.bool, device=key_padding.device).tril()
    own_key = torch.eye(length, dtype=torch.bool, device=key_padding.device)
    mask = causal & ((~key_padding)[:, None, None, :] | own_key)
    return mask, False


RIGHT_PADDING_BROKEN = (
    "vaswani_transformer: a training batch's decoder input is padded before a real token, but "
    "the task builds the model for right-padded targets (left_pad_target false)"
)


class MultiHeadAttention(nn.Module):
    """§3.2.2: MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(QW_i^Q, KW_i^K, VW_i^V).

    Self-attention projects Q, K and V with one fused matrix; encoder-decoder attention projects Q from the
    decoder and K, V (fused) from the encoder output ("memory"). d_k and d_v are free (Table 3 rows A, B).
    """

    def __init__(
        self, dim: int, heads: int, *, key_dim: int, value_dim: int, dropout: float, memory_dim: Optional[int] = None
    ):
        super().__init__()
        self.heads, self.key_dim, self.value_dim = heads, key_dim, value_dim
        self.dropout = dropout
        self.self_attention = memory_dim is None
        qk, v = heads * key_dim, heads * value_dim
        if self.self_attention:
            self.qkv_proj = nn.Linear(dim, 2 * qk + v)
            projections = [(self.qkv_proj, (qk, qk, v))]
        else:
            self.q_proj = nn.Linear(dim, qk)
            self.kv_proj = nn.Linear(memory_dim, qk + v)
            projections = [(self.q_proj, (qk,)), (self.kv_proj, (qk, v))]
        self.out_proj = nn.Linear(v, dim)
        # The paper gives no initialisation; this is fairseq's (the same distributions, so a fairseq model and
        # this one start alike): Xavier-uniform with gain 1/√2 per W^Q, W^K, W^V block (also inside the fused
        # matrices) and their biases as nn.Linear's; W^O Xavier-uniform, bias 0. Gain 1 for W^Q, W^K, W^V
        # (and Xavier FFNs) trained markedly slower (docs/results.md#initialisation).
        for linear, sizes in projections:
            for block in linear.weight.split(sizes, dim=0):
                nn.init.xavier_uniform_(block, gain=2**-0.5)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.out_proj.bias)
        self.qk_size, self.v_size = qk, v

    def _split_heads(self, x: Tensor, head_dim: int) -> Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.heads, head_dim).transpose(1, 2)

    def _keys_values(self, memory: Tensor) -> Tuple[Tensor, Tensor]:
        k, v = self.kv_proj(memory).split((self.qk_size, self.v_size), dim=-1)
        return self._split_heads(k, self.key_dim), self._split_heads(v, self.value_dim)

    def _queries_keys_values(self, x: Tensor, memory: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
        """Q, K, V split into heads: all three from x (fused) in self-attention, K and V from memory otherwise."""
        if not self.self_attention:
            return (self._split_heads(self.q_proj(x), self.key_dim), *self._keys_values(memory))
        q, k, v = self.qkv_proj(x).split((self.qk_size, self.qk_size, self.v_size), dim=-1)
        return (
            self._split_heads(q, self.key_dim),
            self._split_heads(k, self.key_dim),
            self._split_heads(v, self.value_dim),
        )

    def head_probabilities(
        self, x: Tensor, memory: Optional[Tensor] = None, mask: Optional[Tensor] = None, is_causal: bool = False
    ) -> Tensor:
        """Each head's softmax(QK^T / √d_k) (batch, heads, queries, keys) for the arguments of a full forward."""
        q, k, _ = self._queries_keys_values(x, memory)
        return attention_probabilities(q, k, mask, is_causal)

    def forward(
        self,
        x: Tensor,
        memory: Optional[Tensor] = None,
        mask: Optional[Tensor] = None,
        is_causal: bool = False,
        cache: Optional[LayerCache] = None,
        need_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """x: (batch, time, dim). cache: the layer's LayerCache in incremental decoding (beam_cache.py).

        Returns the output and, if need_weights, the attention probabilities averaged over heads
        (batch, queries, keys).
        """
        if cache is not None:
            # Step-by-step decoding: the newest position only, keys/values from the beam cache.
            if self.self_attention:
                return self.out_proj(cache.attend_self(*self._queries_keys_values(x, None))), None
            q = self._split_heads(self.q_proj(x), self.key_dim)
            out, weights = cache.attend_memory(q, lambda: self._keys_values(memory), mask, need_weights)
            return self.out_proj(out), weights
        q, k, v = self._queries_keys_values(x, memory)
        out, probs = attention(q, k, v, mask, is_causal, self.dropout if self.training else 0.0, need_weights)
        batch, _, length, _ = out.shape
        out = out.transpose(1, 2).reshape(batch, length, self.v_size)
        return self.out_proj(out), None if probs is None else probs.mean(dim=1)


class FeedForward(nn.Module):
    """§3.3, eq. 2: FFN(x) = max(0, xW_1 + b_1) W_2 + b_2."""

    def __init__(self, dim: int, inner_dim: int, *, activation_dropout: float):
        super().__init__()
        self.inner = nn.Linear(dim, inner_dim)
        self.outer = nn.Linear(inner_dim, dim)
        self.activation_dropout = activation_dropout
        # W_1, W_2, b_1, b_2 keep nn.Linear's initialisation, as in fairseq (see MultiHeadAttention).

    def forward(self, x: Tensor) -> Tensor:
        return self.outer(apply_dropout(F.relu(self.inner(x)), self.activation_dropout, self.training))


class Residual(nn.Module):
    """§3.1 + §5.4: LayerNorm(x + Dropout(Sublayer(x))); pre-norm: x + Dropout(Sublayer(LayerNorm(x)))."""

    def __init__(self, sublayer: nn.Module, dim: int, *, dropout: float, normalize_before: bool):
        super().__init__()
        self.sublayer = sublayer
        self.norm = nn.LayerNorm(dim)
        self.dropout = dropout
        self.normalize_before = normalize_before

    def forward(self, x: Tensor, **kwargs) -> Tuple[Tensor, Optional[Tensor]]:
        out = self.sublayer(self.norm(x) if self.normalize_before else x, **kwargs)
        out, weights = out if isinstance(out, tuple) else (out, None)
        x = x + apply_dropout(out, self.dropout, self.training)
        return (x if self.normalize_before else self.norm(x)), weights


class EncoderLayer(nn.Module):
    """§3.1: multi-head self-attention, then the position-wise feed-forward network."""

    def __init__(
        self,
        dim: int,
        *,
        ffn_dim: int,
        heads: int,
        key_dim: int,
        value_dim: int,
        dropout: float,
        attention_dropout: float,
        activation_dropout: float,
        normalize_before: bool,
    ):
        super().__init__()
        self.self_attention = Residual(
            MultiHeadAttention(dim, heads, key_dim=key_dim, value_dim=value_dim, dropout=attention_dropout),
            dim,
            dropout=dropout,
            normalize_before=normalize_before,
        )
        self.feed_forward = Residual(
            FeedForward(dim, ffn_dim, activation_dropout=activation_dropout),
            dim,
            dropout=dropout,
            normalize_before=normalize_before,
        )

    def forward(self, x: Tensor, mask: Optional[Tensor]) -> Tensor:
        x, _ = self.self_attention(x, mask=mask)
        x, _ = self.feed_forward(x)
        return x


class DecoderLayer(nn.Module):
    """§3.1: masked self-attention, encoder-decoder attention, then the feed-forward network."""

    def __init__(
        self,
        dim: int,
        *,
        memory_dim: int,
        ffn_dim: int,
        heads: int,
        key_dim: int,
        value_dim: int,
        dropout: float,
        attention_dropout: float,
        activation_dropout: float,
        normalize_before: bool,
    ):
        super().__init__()
        self.self_attention = Residual(
            MultiHeadAttention(dim, heads, key_dim=key_dim, value_dim=value_dim, dropout=attention_dropout),
            dim,
            dropout=dropout,
            normalize_before=normalize_before,
        )
        self.encoder_attention = Residual(
            MultiHeadAttention(
                dim, heads, key_dim=key_dim, value_dim=value_dim, dropout=attention_dropout, memory_dim=memory_dim
            ),
            dim,
            dropout=dropout,
            normalize_before=normalize_before,
        )
        self.feed_forward = Residual(
            FeedForward(dim, ffn_dim, activation_dropout=activation_dropout),
            dim,
            dropout=dropout,
            normalize_before=normalize_before,
        )

    def forward(self, x, memory, self_mask, self_is_causal, memory_mask, cache=None, need_weights=False):
        x, _ = self.self_attention(x, mask=self_mask, is_causal=self_is_causal, cache=cache)
        x, weights = self.encoder_attention(x, memory=memory, mask=memory_mask, cache=cache, need_weights=need_weights)
        x, _ = self.feed_forward(x)
        return x, weights
