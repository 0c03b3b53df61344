"""§6.1's length rules: the GNMT length penalty and the output limit, the one place each is computed."""

import numpy
import torch


def gnmt_length_penalty(length, alpha: float):
    """§6.1 (Wu et al., 2016, eq. 14): lp(Y) = ((5 + |Y|) / 6)^α, |Y| counting </s>; an int or a tensor."""
    return ((5 + length) / 6) ** alpha


def length_limit(max_len_a: float, max_len_b: float, source_lengths, max_positions=None):
    """§6.1's "maximum output length ... input length + 50": ⌊a·|x| + b⌋ tokens before </s>, |x| counting the
    source's </s>, at most max_positions − 1; for an int (an int), an array or a tensor (of each length)."""
    if isinstance(source_lengths, torch.Tensor):
        limits = (max_len_a * source_lengths.double() + max_len_b).floor().long()
        return limits if max_positions is None else limits.clamp(max=max_positions - 1)
    limits = numpy.floor(max_len_a * numpy.asarray(source_lengths, dtype=numpy.float64) + max_len_b).astype(numpy.int64)
    if max_positions is not None:
        limits = numpy.minimum(limits, max_positions - 1)
    return int(limits) if limits.ndim == 0 else limits
