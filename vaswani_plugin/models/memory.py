"""The memory a training step of the model holds, from its sizes: what the recipes' batch per GPU is chosen from.

A leaf that imports nothing (the recipes load it without torch). Counted from models/layers.py, attention.py and
output_layer_loss.py as fairseq's Trainer runs them with fused attention (no (time x time) tensor is kept): the
state (weights, gradients, Adam's moments, fp16's and autocast's copies), what the forward pass keeps for the
backward pass per source and target token, and the output layer's forward, which writes its gradients at once.
The peak counts all three (an upper bound on a CPU: the gradients are counted whole, although the backward pass
frees activations as it writes them; within 0.5 % of an H200's peak). benchmarks/host_cost.py prints it beside
measured peaks (a CPU's in the suite, the GPU acceptance's); docs/results.md, "The memory model".
"""

from dataclasses import dataclass, replace

PRECISIONS = ("float32", "fp16", "amp", "bf16")  # fairseq's default, --fp16, --amp, the plugin's --bf16-autocast
# On a GPU the model's peak may take this share of the card's memory; the rest is for what the allocator does not
# count (the CUDA context, cuBLAS and NCCL workspaces) and its fragmentation over changing batch shapes.
GPU_MEMORY_SHARE = 0.8
TOKENS_MULTIPLE = 256  # a chosen batch is rounded down to this many tokens
# Bytes the output layer holds per logit of a chunk: the logits (2-4), their float32 log-probabilities, which become
# ∂loss/∂z in place (4), and ∂loss/∂z in the products' dtype (2-4). output_layer_loss.py sizes its chunks by it.
BYTES_PER_LOGIT = 12
SINUSOID_ROWS = 256  # §3.5's table is computed for this many positions at least (longer inputs: more)


@dataclass(frozen=True)
class Sizes:
    """A model's sizes as fairseq's options give them (encoder and decoder alike, as every paper model is)."""

    layers: int
    d_model: int
    d_ff: int
    heads: int
    source_vocabulary: int
    target_vocabulary: int
    share: str = "all"  # "all" (one matrix: §3.4), "output" (the decoder's embedding and W), "none"
    decoder_layers: int = 0  # 0: as many as the encoder's


def parameters(sizes: Sizes) -> int:
    """Weights and biases: §3.1's layers, §3.4's embeddings and output matrix (shared as sizes.share says)."""
    d, f = sizes.d_model, sizes.d_ff
    attention = 4 * d * d + 4 * d  # W^Q, W^K, W^V, W^O and their biases
    feed_forward = 2 * d * f + f + d  # eq. 2's W_1, b_1, W_2, b_2
    encoder = attention + feed_forward + 2 * 2 * d  # and two layer norms
    decoder = 2 * attention + feed_forward + 3 * 2 * d
    matrices = {"all": 1, "output": 2, "none": 3}[sizes.share]
    embeddings = sizes.source_vocabulary * d + (matrices - 1) * sizes.target_vocabulary * d
    return sizes.layers * encoder + (sizes.decoder_layers or sizes.layers) * decoder + embeddings


def state_bytes(sizes: Sizes, precision: str) -> int:
    """Weights, gradients and Adam's moments (float32 each: 16 bytes a parameter); fp16 adds float16 weights and
    gradients (fairseq's FP16Optimizer keeps float32 masters); amp and bf16 autocast a 2-byte copy of each matrix
    the layers' products cast (the output layer casts its own: output_bytes). And §3.5's sinusoids, a table of
    SINUSOID_ROWS positions for each side (layers.TokenEmbedding)."""
    total = 16 * parameters(sizes) + 2 * SINUSOID_ROWS * sizes.d_model * 4
    if precision == "fp16":
        return total + 4 * parameters(sizes)
    if precision in ("amp", "bf16"):
        matrices = parameters(replace(sizes, source_vocabulary=0, target_vocabulary=0))
        return total + 2 * matrices
    return total


def activation_bytes(precision: str):
    """(a, r): bytes of a product's output and of the residual stream (layer norms run in float32 under autocast)."""
    return {"float32": (4, 4), "fp16": (2, 2), "amp": (2, 4), "bf16": (2, 4)}[precision]


def saved_per_token(sizes: Sizes, precision: str, device: str = "cuda"):
    """Bytes the forward pass keeps for the backward pass per (source token, target token), padding included.

    Per sublayer: the input of each product (a·d, the autocast copy or the layer norm's output), dropout's mask
    (1 byte a value on a GPU; on a CPU torch keeps it in its input's dtype), the layer norm's input (r·d) and its
    mean and 1/σ (8 bytes). Self-attention: Q, K, V from one product (3a·d), SDPA's output (a·d; its fused kernels
    write it heads last, so the heads joined for W^O are a view of it) and log-sum-exp (4 bytes a head).
    Encoder-decoder attention: Q (a·d) per target token and K, V (2a·d) per source token, and the encoder's output
    (r·d once, or each layer's autocast copy). FFN: ReLU's output (a·d_ff), which W_2 keeps too. Embeddings:
    dropout's mask and the indices (16 bytes).
    On a CPU under autocast attention runs in float32 (attention.py): Q, K, V and its output are float32 (s = 4),
    and W^O keeps its autocast copy of the heads joined (a·d)."""
    a, r = activation_bytes(precision)
    s, joined = (4, a) if device == "cpu" and precision == "bf16" else (a, 0)
    d, f, h = sizes.d_model, sizes.d_ff, sizes.heads
    mask, embedding_mask = (a, r) if device == "cpu" else (1, 1)  # dropout's, after a sublayer and an embedding
    sublayer = mask * d + r * d + 8  # dropout mask, layer norm input and statistics
    self_attention = a * d + 3 * s * d + s * d + 4 * h + joined * d + sublayer
    feed_forward = a * d + a * f + sublayer
    encoder_attention = a * d + s * d + s * d + 4 * h + joined * d + sublayer
    embedding = embedding_mask * d + 16
    decoder_layers = sizes.decoder_layers or sizes.layers
    memory = decoder_layers * a * d if a != r else r * d  # the encoder's output as K, V's products read it
    source = embedding + sizes.layers * (self_attention + feed_forward) + decoder_layers * 2 * s * d + memory
    target = embedding + decoder_layers * (self_attention + encoder_attention + feed_forward)
    return source, target


def output_bytes(sizes: Sizes, precision: str, target_tokens: int, chunk_logits: int, device: str = "cuda") -> int:
    """The output layer's forward (output_layer_loss.py): per target token the decoder's output and its copy at the
    real positions (r·d each; and the product's autocast copy), ∂x (float32 for fp16 and float32, else 2 bytes);
    ∂W (float32), W cast to the product's dtype under autocast, and one chunk of at most chunk_logits logits
    (BYTES_PER_LOGIT each). float16 products on a CPU go through float32 copies of W and of the chunk."""
    d, vocabulary = sizes.d_model, sizes.target_vocabulary
    a, r = activation_bytes(precision)
    features = 2 * r + (a if a != r else 0)
    gradient = features + (2 if precision == "bf16" else 4)
    cast = 2 * vocabulary * d if precision in ("amp", "bf16") else 0
    per_logit = BYTES_PER_LOGIT
    if device == "cpu" and precision == "fp16":
        cast, per_logit = 4 * vocabulary * d, BYTES_PER_LOGIT + 4
    chunk = min(chunk_logits, target_tokens * vocabulary)
    return gradient * target_tokens * d + 4 * vocabulary * d + cast + per_logit * chunk


def peak_bytes(
    sizes: Sizes, precision: str, source_tokens: int, target_tokens: int, chunk_logits: int, device: str = "cuda"
) -> int:
    """A training step's peak: the state, what the forward pass keeps and the output layer's forward."""
    source, target = saved_per_token(sizes, precision, device)
    return (
        state_bytes(sizes, precision)
        + source * source_tokens
        + target * target_tokens
        + output_bytes(sizes, precision, target_tokens, chunk_logits, device)
    )


def largest_batch(sizes: Sizes, precision: str, memory: int, chunk_logits: int) -> int:
    """The most tokens a batch (fairseq's --max-tokens: source and target each padded to it, at worst) whose peak
    stays within `memory` bytes, rounded down to TOKENS_MULTIPLE; 0 if not even the state fits."""
    source, target = saved_per_token(sizes, precision)
    fixed = peak_bytes(sizes, precision, 0, 0, 0) + BYTES_PER_LOGIT * chunk_logits  # a full chunk: an upper bound
    per_token = source + target + output_bytes(sizes, precision, 1, 0) - output_bytes(sizes, precision, 0, 0)
    tokens = (memory - fixed) // per_token if memory > fixed else 0
    return tokens // TOKENS_MULTIPLE * TOKENS_MULTIPLE


def step_split(tokens_per_step: int, workers: int, per_gpu: int):
    """§5.1's step over `workers`: (update_freq, max_tokens) such that workers x update_freq batches of max_tokens,
    each at most per_gpu, hold about tokens_per_step tokens."""
    update_freq = -(-tokens_per_step // (workers * per_gpu))
    return update_freq, -(-tokens_per_step // (workers * update_freq))
