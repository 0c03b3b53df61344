"""fairseq-train with fairseq's own --fp16 / --memory-efficient-fp16 on a CPU, for tests: the two places where
fairseq's float16 path assumes CUDA are patched in this process only (nothing of fairseq changes on disk), by
benchmarks/float16_on_cpu.py, which says what they are (benchmarks/host_cost.py takes the same patches).

    python tests/fp16_on_cpu.py <fairseq-train arguments, with --cpu>

FP16_ON_CPU_OVERFLOW_AT=N makes one gradient element of the N-th batch (N-th backward pass, from 1) infinite
after the backward pass, as a float16 overflow would, so that fairseq's dynamic loss scaler reacts to it.
"""

import os
import sys
from pathlib import Path

from fairseq.optim.fp16_optimizer import _FP16OptimizerMixin, _MemoryEfficientFP16OptimizerMixin
from fairseq_cli.train import cli_main  # first: it sets up fairseq-train's logging before fairseq is imported

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from float16_on_cpu import float16_on_cpu  # noqa: E402

float16_on_cpu()


def overflow_at(batch: int):
    """Wrap both float16 optimizers' backward so that the gradient of the BATCH-th backward pass overflows."""
    calls = 0

    def wrap(backward):
        def backward_with_overflow(self, loss):
            nonlocal calls
            backward(self, loss)
            calls += 1
            if calls == batch:
                params = self.fp16_params if hasattr(self, "fp16_params") else self.params
                next(p for p in params if p.grad is not None).grad.view(-1)[0] = float("inf")

        return backward_with_overflow

    for mixin in (_FP16OptimizerMixin, _MemoryEfficientFP16OptimizerMixin):
        mixin.backward = wrap(mixin.backward)


if __name__ == "__main__":
    if "FP16_ON_CPU_OVERFLOW_AT" in os.environ:
        overflow_at(int(os.environ["FP16_ON_CPU_OVERFLOW_AT"]))
    sys.argv[0] = "fairseq-train"
    cli_main()
    # fairseq's batch prefetcher is a daemon thread that may be inside torch when the interpreter finalises, which
    # then aborts ("terminate called without an active exception": about 1 run in 2 with an overflow, here and
    # for fairseq's own model). Training and its log are complete: leave without finalising.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
