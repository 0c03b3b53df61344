"""--length-buckets N: each training batch padded to one of a few shapes, so that --compile-layers reduce-overhead
records a CUDA graph for each of those instead of for every batch's own shape (issue 65). An engineering choice: the
paper pads nothing, and the loss, gradients and counts are the batch's own.

The lengths: N sizes, geometric from 1 to the longest a batch holds (the larger of --max-source-positions and
--max-target-positions, --max-tokens if smaller), s_i = ceil(longest^(i / (N - 1))), repeats dropped. Each is at
most r = longest^(1 / (N - 1)) times the one below it plus one. A batch's source and target lengths are each padded
up to the next size. Its rows: fairseq's --max-tokens batches hold rows x max(source, target length) <= max_tokens,
so a batch whose longer side pads to s_k has at most max_tokens // (s_(k-1) + 1) rows (and --batch-size at most):
its rows are padded up to that. A padded batch so holds at most r x max_tokens positions a side, and its shape is
one of at most (number of sizes)^2, one for each pair of padded lengths (the encoder's layers see fewer).

fairseq's own --num-batch-buckets and --required-seq-len-multiple pad lengths (of every split), never rows; these
pad training batches only. Each side is padded where fairseq pads it (sources on the left by default), and the
model's positions count from a row's first real token (layers.position_indices): a real token keeps its position.
An added row is one </s> of source (a key for every attention to see: a wholly masked softmax row is NaN) and
target padding, which the criterion ignores; its counts (nsentences, and the sample size under --sentence-avg)
are set back to the batch's own rows.
"""

import bisect
import math
from typing import Callable, List, Tuple

import numpy as np
import torch.nn.functional as F

from vaswani_plugin.errors import VaswaniConfigError


def bucket_sizes(count: int, longest: int) -> List[int]:
    """The padded lengths: `count` sizes geometric from 1 to `longest`, rounded up (repeats dropped)."""
    return sorted({math.ceil(round(longest ** (i / (count - 1)), 6)) for i in range(count)})


class LengthBuckets:
    """--length-buckets of one training: the sizes, the rows each allows, and the padding of a batch."""

    def __init__(self, count: int, cfg, root):
        dataset = getattr(root, "dataset", None)
        max_tokens, max_sentences = (getattr(dataset, key, None) for key in ("max_tokens", "batch_size"))
        if not max_tokens and not max_sentences:
            raise VaswaniConfigError(
                f"--length-buckets {count} pads a batch's rows up to what --max-tokens or --batch-size allows: set one"
            )
        longest = max(cfg.max_source_positions, cfg.max_target_positions)
        self.sizes = bucket_sizes(count, min(longest, max_tokens or longest))
        caps = [[max_tokens // (below + 1)] if max_tokens else [] for below in [0, *self.sizes[:-1]]]
        self.rows = [min(cap + [max_sentences or math.inf]) for cap in caps]
        self.left_pad_source, self.left_pad_target = cfg.left_pad_source, cfg.left_pad_target

    def shape(self, rows: int, source_length: int, target_length: int) -> Tuple[int, int, int]:
        """(rows, source length, target length) of a batch so shaped once padded; a length beyond the sizes (not a
        batch of fairseq-train's) keeps the batch as it is."""
        longer = bisect.bisect_left(self.sizes, max(source_length, target_length))
        if longer == len(self.sizes):
            return rows, source_length, target_length
        source, target = (self.sizes[bisect.bisect_left(self.sizes, n)] for n in (source_length, target_length))
        return max(rows, self.rows[longer]), source, target

    def allowed(self) -> int:
        """How many shapes padded batches take at most: one for each pair of padded lengths."""
        return len(self.sizes) ** 2

    def padded(self, sample: dict, criterion: Callable, source_dict, target_dict) -> Tuple[dict, Callable]:
        """(sample padded to its bucket's shape, criterion counting the sample's own rows)."""
        net_input = sample["net_input"]
        source, target = net_input["src_tokens"], sample["target"]
        rows = source.size(0)
        padded_rows, source_length, target_length = self.shape(rows, source.size(1), target.size(1))
        source = grown(source, padded_rows, source_length, source_dict.pad(), self.left_pad_source)
        source[rows:, -1 if self.left_pad_source else 0] = source_dict.eos()

        def target_side(tokens):
            return grown(tokens, padded_rows, target_length, target_dict.pad(), self.left_pad_target)

        net_input = dict(
            net_input,
            src_tokens=source,
            src_lengths=F.pad(net_input["src_lengths"], (0, padded_rows - rows), value=1),
            prev_output_tokens=target_side(net_input["prev_output_tokens"]),
        )
        return dict(sample, net_input=net_input, target=target_side(target)), counting_rows(criterion, rows)

    def described(self, batches, source_sizes, target_sizes) -> str:
        """The log line on a training split's batches (arrays of indices) and its examples' lengths."""
        rows = np.array([len(batch) for batch in batches])
        starts, indices = np.cumsum(rows) - rows, np.concatenate(batches)
        lengths = [np.maximum.reduceat(sizes[indices], starts) for sizes in (source_sizes, target_sizes)]
        unpadded, counts = np.unique(np.stack([rows, *lengths], axis=1), axis=0, return_counts=True)
        padded = np.array([self.shape(*map(int, shape)) for shape in unpadded])
        positions = [
            int((counts * shapes[:, 0] * (shapes[:, 1] + shapes[:, 2])).sum()) for shapes in (unpadded, padded)
        ]
        taken = len(np.unique(padded, axis=0))
        return (
            f"length buckets: {len(self.sizes)} lengths ({', '.join(map(str, self.sizes))}) allow "
            f"{self.allowed()} batch shapes; this split's {len(batches):,} batches take {taken} "
            f"({len(unpadded):,} unpadded), with {positions[1] / max(positions[0], 1):.2f} x their positions"
        )


def grown(tokens, rows: int, length: int, pad: int, left: bool):
    """tokens (batch, time) padded with `pad` to (rows, length): rows below, time on the left or the right."""
    more = length - tokens.size(1)
    return F.pad(tokens, ((more, 0) if left else (0, more)) + (0, rows - tokens.size(0)), value=pad)


def counting_rows(criterion: Callable, rows: int) -> Callable:
    """criterion on a padded batch, its nsentences (and sample size under --sentence-avg) `rows`, the batch's own."""

    def criterion_of_the_rows(model, sample):
        loss, sample_size, logging_output = criterion(model, sample)
        if getattr(criterion, "sentence_avg", False):
            sample_size = rows
            logging_output = dict(logging_output, sample_size=rows)
        return loss, sample_size, dict(logging_output, nsentences=rows)

    return criterion_of_the_rows
