"""§5.4, residual dropout (and the model's other dropouts): each value kept with probability 1 - P_drop, scaled by
1 / (1 - P_drop), the gradient masked alike; the one place the model draws it.

On a GPU, and under torch.compile (--compile-layers), it is torch's own (`F.dropout`: one fused kernel draws the mask
and applies it; dynamo cannot trace an in-place `random_`). Eager on a CPU, torch draws its mask with `bernoulli_`,
one element at a time (pytorch/pytorch#138199); here each value's 30 uniform random bits are compared with P_drop
2^30, the same law, then scaled and multiplied as torch's CPU dropout does (the kept values equal, in float32,
bfloat16 and float16; the backward pass keeps the scaled mask in the input's dtype, as models/memory.py counts), in
about half the time (docs/results.md, "The host's cost of an update").
"""

import torch
import torch.nn.functional as F
from torch import Tensor


def apply_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """x with each value zeroed with probability p and the rest scaled by 1 / (1 - p) when training; else x."""
    if not training or p == 0:
        return x
    if x.device.type != "cpu" or p >= 1 or torch.compiler.is_compiling():  # dynamo cannot trace random_()
        return F.dropout(x, p, True)
    # 30 uniform bits a value, two values from each of torch's 64-bit draws (its top bit is 0): mt19937 costs about
    # 2 ns a call whatever width is asked for. P(drop) = round(p 2^30) / 2^30 (torch.rand's: p within 2^-24).
    bits = torch.empty((x.numel() + 1) // 2, dtype=torch.int64, device=x.device).random_().view(torch.int32)
    keep = bits[: x.numel()].view(x.shape).bitwise_and_(2**30 - 1).ge_(round(p * 2**30))
    return x * keep.to(x.dtype).div_(1.0 - p)
