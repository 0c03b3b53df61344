"""The host's cost of a training update: fairseq-train's own Trainer, the plugin against fairseq's `transformer`.

    python benchmarks/host_cost.py                       # 6+6 layers at d_model 64, 5 rounds of 4 updates, 1 thread
    python benchmarks/host_cost.py --smoke               # seconds: 1+1 layers, 2 rounds of 1 update (the test suite)
    python benchmarks/host_cost.py --device cuda --size big --precisions amp --seconds 45   # the GPU acceptance's
    python benchmarks/host_cost.py --precisions float32 --implementations vaswani_transformer vaswani_F.dropout \
        --optimizers vaswani_adam --rounds 12 --updates 36   # the plugin's CPU dropout draw against torch's

Each configuration (precision x implementation x optimizer) is built by fairseq's own parser, task and Trainer from
the same flags and trained on the same synthetic batches (host_cost_measure.py); per update it prints the host's ms
and the data wait, kernel-like calls by phase and the syncs by frame (host_cost_counts.py), on a GPU tokens/s, MFU,
busy share and idle time, peak memory beside the plugin's memory model (host_cost_memory.py), kernel time by kind
(host_cost_kinds.py) and host ms by Python frame (host_cost_frames.py), as host_cost_report.py prints them. On a CPU,
where arithmetic is negligible at this size, the configurations are timed in --rounds interleaved rounds, the ratio
plugin / fairseq their median; on a GPU each alone. fp16 and amp take fairseq's float16 optimizers on a CPU through
float16_on_cpu.py (amp's GradScaler is disabled without CUDA: float32 arithmetic on its optimizer path); bf16 is
the plugin's --bf16-autocast on. The figures: docs/results.md, "The host's cost of an update".
"""

import argparse
import sys
import tempfile
from pathlib import Path

from common import PAPER, PLUGIN, cpu_model
from float16_on_cpu import float16_on_cpu
from host_cost_measure import IMPLEMENTATIONS, TORCH_DROPOUT, measure, write_dictionary
from host_cost_memory import one_gpu_default
from host_cost_report import report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="cuda: also tokens/s, MFU, the GPU's busy share, peak memory, where an update's time goes",
    )
    parser.add_argument(
        "--size",
        choices=sorted(PAPER.MODELS),
        help="a model of vaswani_plugin/paper.py (sets --layers, --dim, --ffn, --heads)",
    )
    parser.add_argument("--layers", type=int, default=6, help="N, encoder and decoder (default 6, the paper's)")
    parser.add_argument("--dim", type=int, default=64, help="d_model (default 64)")
    parser.add_argument("--ffn", type=int, help="d_ff (default 4 d_model)")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--symbols", type=int, default=1000, help="vocabulary size (joined dictionary)")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=1024,
        help="tokens a batch; 0 with --device cuda and one precision: the recipes' one-GPU default "
        "(the paper's step, in as few batches as the memory model lets the GPU hold)",
    )
    parser.add_argument("--sentences", type=int, default=2000, help="synthetic training sentence pairs")
    parser.add_argument("--warmup", type=int, default=5, help="updates before timing")
    parser.add_argument(
        "--updates", type=int, default=20, help="timed updates (the median is printed); on a CPU split over --rounds"
    )
    parser.add_argument("--seconds", type=float, default=0, help="time the updates of this many seconds instead")
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="on a CPU: time the configurations in this many interleaved rounds (the ratios: their medians)",
    )
    parser.add_argument("--profiled", type=int, default=3, help="updates under torch.profiler, for the counts")
    parser.add_argument("--num-workers", type=int, default=1, help="fairseq's --num-workers (its default 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads (0: torch's default)")
    parser.add_argument(
        "--compile-layers",
        choices=["off", "dynamic", "reduce-overhead"],
        default="off",
        help="the plugin task's --compile-layers (torch.compile of its layers; reduce-overhead: CUDA graphs)",
    )
    parser.add_argument(
        "--length-buckets",
        type=int,
        default=0,
        metavar="N",
        help="the plugin task's --length-buckets (each batch padded to one of a few shapes; 0: off)",
    )
    parser.add_argument(
        "--precisions",
        nargs="+",
        default=["float32", "fp16", "amp"],
        choices=["float32", "fp16", "amp", "bf16"],
        help="bf16: the plugin's --bf16-autocast on (the plugin alone)",
    )
    parser.add_argument(
        "--implementations",
        nargs="+",
        default=["transformer", "vaswani_transformer"],
        choices=list(IMPLEMENTATIONS),
        help=f"fairseq's and the plugin's models; {TORCH_DROPOUT}: the plugin's with torch's F.dropout in place of "
        "its own CPU draw (models/dropout.py), its ratio to the plugin's printed (default: the first two)",
    )
    parser.add_argument(
        "--no-cudnn-sdpa",
        action="store_true",
        help="turn cuDNN's fused attention off for the whole run (fairseq's transformer as patched)",
    )
    parser.add_argument(
        "--optimizers",
        nargs="+",
        default=["adam", "vaswani_adam"],
        choices=["adam", "vaswani_adam"],
        help="the plugin's model is measured with each; fairseq's transformer with adam alone",
    )
    parser.add_argument("--recipes-optimizer", default="vaswani_adam", help="the optimizer the ratios take")
    parser.add_argument(
        "--operators",
        type=int,
        default=0,
        metavar="N",
        help="also print each configuration's N most frequent kernel-like calls",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="1+1 layers at d_model 32, 2 updates after 1 in 2 rounds, 1 profiled; the plugin with the recipes' "
        "optimizer only",
    )
    spec = parser.parse_args(argv)
    if spec.smoke:
        spec.layers, spec.dim, spec.symbols, spec.sentences, spec.warmup, spec.updates, spec.profiled = (
            1,
            32,
            100,
            64,
            1,
            2,
            1,
        )
        spec.max_tokens, spec.num_workers, spec.optimizers, spec.rounds = 256, 0, [spec.recipes_optimizer], 2
    if spec.size:
        size = PAPER.MODELS[spec.size]
        spec.layers, spec.dim, spec.ffn, spec.heads = size["layers"], size["d_model"], size["d_ff"], size["heads"]
    import torch

    if spec.threads:
        torch.set_num_threads(spec.threads)
    if spec.no_cudnn_sdpa:
        torch.backends.cuda.enable_cudnn_sdp(False)
    if spec.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    if spec.rounds < 1 or spec.updates < 1:
        parser.error("--rounds and --updates: at least 1")
    if spec.max_tokens == 0 and (spec.device != "cuda" or len(spec.precisions) != 1):
        parser.error("--max-tokens 0 (the one-GPU default) needs --device cuda and one precision")
    if spec.device == "cpu" and {"fp16", "amp"} & set(spec.precisions):
        float16_on_cpu()  # fairseq's float16 optimizers on a CPU: patched in this process
    import warnings

    warnings.filterwarnings("ignore", message=".*GradScaler.*")  # amp on a CPU: disabled, as the docstring says
    warnings.filterwarnings("ignore", module="hydra")  # fairseq's use of hydra: deprecation notices
    warnings.filterwarnings("ignore", message=".*validated against ConfigStore.*")
    timed = f"{spec.seconds:g} s of updates" if spec.seconds else f"{spec.updates} updates"
    if spec.device == "cpu":
        timed = (
            f"{spec.rounds} interleaved rounds of {spec.seconds / spec.rounds:g} s of updates"
            if spec.seconds
            else f"{spec.rounds} interleaved rounds of {-(-spec.updates // spec.rounds)} updates"
        )
    folder = tempfile.TemporaryDirectory()
    data_dir = Path(folder.name)
    for side in ("src", "tgt"):
        write_dictionary(data_dir / f"dict.{side}.txt", spec.symbols)
    if spec.max_tokens == 0:
        spec.max_tokens = one_gpu_default(spec, data_dir)
    print(
        f"host cost of an update: fairseq's Trainer, {spec.layers}+{spec.layers} layers, d_model {spec.dim}, "
        f"d_ff {spec.ffn or 4 * spec.dim}, {spec.max_tokens} tokens a batch, {timed} after {spec.warmup} (median), "
        f"{spec.profiled} profiled; CPU {cpu_model()}, {torch.get_num_threads()} thread(s), torch "
        f"{torch.__version__}; the plugin from {PLUGIN}",
        flush=True,
    )
    with folder:
        results = measure(spec, data_dir)
    report(results, spec)
    print(f"the plugin measured: {sys.modules['vaswani_plugin'].__file__}")


if __name__ == "__main__":
    main()
