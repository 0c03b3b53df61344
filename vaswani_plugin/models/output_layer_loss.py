"""§3.4 + §5.4: the output layer (logits z = x W^T) and the label-smoothed loss, in one chunked Function.

The tokens go through in chunks, and each chunk's gradients for x and W are taken at once from the written-out
∂loss/∂z, so no (tokens, V) tensor outlives its chunk. Autograd through the projection, log_softmax, gather and
sum kept several whole ones: the largest tensors of a small model's step.
"""

import logging
from typing import Dict, NamedTuple, Optional

import torch
from torch import Tensor

from vaswani_plugin.models.memory import BYTES_PER_LOGIT  # a chunk's bytes per logit, as the memory model counts

# Logits per chunk on a CPU (16 MB in float32): the working set of a chunk stays small and its blocks are reused
# step after step, which took the largest tensors out of a small model's step (docs/results.md, Speed).
CPU_CHUNK_LOGITS = 2**22
# On a GPU each chunk is ~20 kernel launches and a turn of a host loop, so chunks are as large as 1/32 of the
# device's memory allows: a 4k-token batch at V = 37k is one chunk on an 80 GB card, four on a 16 GB one.
GPU_MEMORY_FRACTION = 1 / 32
# float16 ∂loss/∂z, whose entries lie in [-1, 1], is stored times 2^15, as a loss scale would, so that small
# probabilities keep their precision; the products come back in float32 and are divided again.
FLOAT16_GRADIENT_SCALE = 2.0**15
# Whether torch.mm(a, b, out_dtype=float32) (CUDA, torch >= 2.8: float16 products summed and returned in float32)
# gives a device's float16 products right, decided on that device's first one: str(device) -> bool.
FLOAT16_PRODUCTS_IN_FLOAT32: Dict[str, bool] = {}

logger = logging.getLogger(__name__)


def chunk_logits_for(device: torch.device) -> int:
    """Logits per chunk on this device: CPU_CHUNK_LOGITS on a CPU, 1/32 of a GPU's memory on a GPU."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory * GPU_MEMORY_FRACTION) // BYTES_PER_LOGIT
    return CPU_CHUNK_LOGITS


def smoothed_losses(lprobs: Tensor, target: Tensor, epsilon: float, padding_idx: int):
    """§5.4 per token: loss = -Σ_k q(k) log p(k), q(k) = (1-ε)[k = y] + ε/K over the K = V-1 non-padding
    symbols; also the nll and whether the most probable word is the target."""
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    uniform = -(lprobs.sum(dim=-1) - lprobs[:, padding_idx])  # -Σ_{k≠pad} log p(k)
    loss = (1.0 - epsilon) * nll + epsilon / (lprobs.size(-1) - 1) * uniform
    return loss, nll, lprobs.argmax(dim=-1).eq(target)


def logits_gradient_(lprobs: Tensor, target: Tensor, epsilon: float, padding_idx: int) -> Tensor:
    """∂loss/∂z = p - (1-ε)[k = y] - (ε/K)[k ≠ pad], written over the log-probabilities (in place)."""
    smoothing = epsilon / (lprobs.size(-1) - 1)
    grad = lprobs.exp_()  # p
    grad.sub_(smoothing)
    grad[:, padding_idx] += smoothing
    return grad.scatter_add_(-1, target.unsqueeze(-1), grad.new_full((target.numel(), 1), epsilon - 1.0))


def mm_out_float32(a: Tensor, b: Tensor) -> Tensor:
    """The kernel wide_product prefers for float16 operands: their products summed and returned in float32."""
    return torch.mm(a, b, out_dtype=torch.float32)


def float16_product_problem(device: torch.device) -> Optional[str]:
    """Why mm_out_float32 cannot do `device`'s float16 products, or None: tried on wide_product's two operand
    layouts (row-major ∂loss/∂z times W, its transposed view times x) with sums past float16's 65504, and compared
    with products of the operands in float32."""
    generator = torch.Generator().manual_seed(0)
    grad_z = (torch.rand(16, 128, generator=generator) * 2048).half().to(device)  # sums ~1.3e5
    w = (torch.rand(128, 24, generator=generator) + 0.5).half().to(device)
    x = (torch.rand(16, 24, generator=generator) + 0.5).half().to(device)
    with torch.no_grad():
        for a, b in ((grad_z, w), (grad_z.t(), x)):
            try:
                got = mm_out_float32(a, b)
            except Exception as error:  # no such overload (torch < 2.8), no kernel for this device, ...
                first = (str(error).split(". ")[0].splitlines() or [""])[0][:200]  # its first sentence
                return f"refused ({type(error).__name__}: {first})"
            expected = torch.mm(a.float(), b.float())
            if got.dtype != torch.float32 or got.shape != expected.shape:
                return f"returned {got.dtype} {tuple(got.shape)} for float32 {tuple(expected.shape)}"
            error = ((got - expected).abs() / expected.abs()).max().item()
            if not error <= 1e-3:  # NaN too
                return f"gave wrong numbers (relative error {error:.1e} against float32 products)"
    return None


def float16_products_in_float32(device: torch.device) -> bool:
    """Whether mm_out_float32 does this device's float16 products; decided and logged (one line) on the first."""
    key = str(device)
    if key not in FLOAT16_PRODUCTS_IN_FLOAT32:
        problem = float16_product_problem(device)
        if problem is None:
            logger.info(f"float16 products on {key}: torch.mm(out_dtype=torch.float32), checked against float32")
        else:
            logger.warning(
                f"float16 products on {key}: torch.mm(out_dtype=torch.float32) {problem}; the "
                "operands are converted to float32 instead"
            )
        FLOAT16_PRODUCTS_IN_FLOAT32[key] = problem is None
    return FLOAT16_PRODUCTS_IN_FLOAT32[key]


def wide_product(a: Tensor, b: Tensor, out: Optional[Tensor] = None) -> Tensor:
    """a @ b, in float32 for float16 inputs: a chunk's sum over its tokens may pass float16's 65504 before the
    loss scale is applied, where autograd's scaled product would not."""
    if a.dtype != torch.float16:
        return torch.mm(a, b, out=out)
    if float16_products_in_float32(a.device):
        product = mm_out_float32(a, b)
    else:
        product = torch.mm(a.float(), b.float())
    return product if out is None else out.copy_(product)


class OutputLayerLoss(torch.autograd.Function):
    """§3.4 + §5.4: the logits z = x W^T of the real target positions and the sums of their label-smoothed loss,
    nll and correct guesses; gradients for x and W only where grad mode asked for them (want_gradients)."""

    @staticmethod
    def forward(
        ctx,
        features: Tensor,
        weight: Tensor,
        target: Tensor,
        epsilon: float,
        padding_idx: int,
        chunk_logits: int,
        want_gradients: bool,
    ):
        """features (tokens, d), weight (V, d), target (tokens,) without padding. Losses in float32 at least."""
        device = features.device.type
        # The products run in the autocast dtype if autocast is on (as nn.Linear would), else in W's.
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype
        wide = torch.promote_types(dtype, torch.float32)
        need_x, need_w = (want_gradients and need for need in ctx.needs_input_grad[:2])
        # float16 keeps its gradients in float32 until the loss scale is known (backward); others in their dtype.
        grad_dtype = wide if dtype == torch.float16 else dtype
        scale = FLOAT16_GRADIENT_SCALE if dtype == torch.float16 else 1.0
        with torch.autocast(device, enabled=False):
            w, x = weight.to(dtype), features.to(dtype)
            grad_x = x.new_empty(x.shape, dtype=grad_dtype) if need_x else None
            grad_w = torch.zeros_like(weight, dtype=wide) if need_w else None
            totals = torch.zeros(3, dtype=wide, device=features.device)
            rows = max(1, chunk_logits // w.size(0))
            for start in range(0, x.size(0), rows):
                chunk, y = x[start : start + rows], target[start : start + rows]
                lprobs = torch.log_softmax(torch.mm(chunk, w.t()).to(wide), dim=-1)
                totals += torch.stack([part.sum() for part in smoothed_losses(lprobs, y, epsilon, padding_idx)])
                if need_x or need_w:
                    grad_z = logits_gradient_(lprobs, y, epsilon, padding_idx).mul_(scale).to(dtype)
                    if need_x:
                        wide_product(grad_z, w, out=grad_x[start : start + rows])
                    if need_w:
                        grad_w += wide_product(grad_z.t(), chunk)
            for grad in (grad_x, grad_w):
                if grad is not None and scale != 1.0:
                    grad.div_(scale)
        ctx.save_for_backward(grad_x, grad_w)
        ctx.dtypes = features.dtype, weight.dtype
        loss, nll, correct = (total.clone() for total in totals.unbind())  # three tensors, not views
        ctx.mark_non_differentiable(nll, correct)
        return loss, nll, correct

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll, _grad_correct):
        grad_x, grad_w = ctx.saved_tensors
        x_dtype, w_dtype = ctx.dtypes
        return (
            None if grad_x is None else (grad_x * grad_loss).to(x_dtype),
            None if grad_w is None else (grad_w * grad_loss).to(w_dtype),
            None,
            None,
            None,
            None,
            None,
        )


def real_positions(features: Tensor, target: Tensor, padding_idx: int, ntokens: Optional[int]):
    """The features (tokens, d) and targets (tokens,) of the non-padding positions, in order. Given their count
    (fairseq's sample["ntokens"]) this takes no host sync: a stable sort puts them first."""
    keep = target.ne(padding_idx).flatten()
    if ntokens is None:
        index = keep.nonzero().squeeze(1)
    else:
        index = torch.argsort(keep.to(torch.uint8), descending=True, stable=True)[:ntokens]
    return features.flatten(0, -2).index_select(0, index), target.flatten().index_select(0, index)


class SmoothedLoss(NamedTuple):
    """What the criterion asks of a forward pass: the output layer and loss of §3.4 + §5.4 for these targets.

    chunk_logits 0 takes the device's default (chunk_logits_for); ntokens, the count of non-padding targets, spares
    a host sync."""

    target: Tensor
    epsilon: float
    padding_idx: int
    ntokens: Optional[int] = None
    chunk_logits: int = 0

    def __call__(self, features: Tensor, weight: Tensor):
        """(loss, nll_loss, n_correct) summed over the non-padding targets; features (batch, time, d)."""
        x, y = real_positions(features, self.target, self.padding_idx, self.ntokens)
        chunk_logits = self.chunk_logits or chunk_logits_for(x.device)
        return OutputLayerLoss.apply(
            x, weight, y, self.epsilon, self.padding_idx, chunk_logits, torch.is_grad_enabled()
        )
