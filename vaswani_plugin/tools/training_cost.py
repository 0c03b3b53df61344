"""Training cost as in Table 2: FLOPs = training time × number of GPUs × each GPU's peak FLOP/s.

`python -m vaswani_plugin.tools.training_cost --checkpoint checkpoint_last.pt --gpus 8 [--peak-tflops X]` reads the
cumulative training time fairseq keeps in the checkpoint (resumed runs included) and the precision it trained in
(vaswani_plugin.precision.trained_precision), whose peak it counts.
"""

import argparse

import torch

from vaswani_plugin.checkpoints.storage import load_checkpoint, seconds_of, stored_config
from vaswani_plugin.cli import run_command
from vaswani_plugin.precision import PRECISIONS, trained_precision

# Dense peak TFLOP/s per GPU: (fp32, TF32 tensor cores, fp16/bf16 tensor cores). Table 2 used 2.8, 3.7, 6.0 and 9.5
# TFLOPS for K80, K40, M40 and P100 ("sustained single-precision floating-point capacity").
PEAK_TFLOPS = {
    "K80": (2.8, None, None),
    "K40": (3.7, None, None),
    "M40": (6.0, None, None),
    "P100": (9.5, None, 18.7),
    "V100": (15.7, None, 125.0),
    "T4": (8.1, None, 65.0),
    "A10": (31.2, 62.5, 125.0),
    "A100": (19.5, 156.0, 312.0),
    "L4": (30.3, 60.0, 121.0),
    "L40": (90.5, 90.5, 181.0),
    "H100": (67.0, 494.7, 989.0),
    "H200": (67.0, 494.7, 989.0),
}
# Table 2's training costs, for comparison.
PAPER_COST = {"base": 3.3e18, "big": 2.3e19}


def peak_for(device_name: str, precision: str):
    """The peak TFLOP/s of a GPU model named in `device_name` in one of precision.PRECISIONS (a column the card
    lacks: float32's), or None when it is not in the table."""
    column = {"fp32": 0, "tf32": 1}.get(precision, 2)
    for model, peaks in sorted(PEAK_TFLOPS.items(), key=lambda item: -len(item[0])):
        if model in device_name.upper():
            return peaks[column] or peaks[0]
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(prog="vaswani_plugin.tools.training_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="checkpoint_last.pt of the finished run")
    parser.add_argument("--gpus", type=int, required=True, help="GPUs the run used (all nodes)")
    parser.add_argument(
        "--precision", choices=sorted(PRECISIONS), help="count this precision's peak (default: the checkpoint's)"
    )
    parser.add_argument("--peak-tflops", type=float, help="peak TFLOP/s per GPU (default: looked up by GPU name)")
    parser.add_argument("--paper", choices=sorted(PAPER_COST), help="print Table 2's cost of this model too")
    run_command(parser, cost_command, argv)


def cost_command(args) -> None:
    state = load_checkpoint(args.checkpoint)
    seconds = seconds_of(state, args.checkpoint)
    precision = args.precision or trained_precision(stored_config(state) if state.get("cfg") is not None else {})
    precision = "fp32" if precision == "auto" else precision  # auto: a CPU's run
    peak, source = args.peak_tflops, "--peak-tflops"
    if peak is None and torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        peak, source = peak_for(name, precision), f"{name} {precision} peak"
    paper = f"; paper (Table 2): {PAPER_COST[args.paper]:.1e}" if args.paper else ""
    if peak is None:
        print(
            f"Training cost: {seconds:.0f} s x {args.gpus} GPUs; peak FLOP/s unknown for this device "
            f"(set PEAK_TFLOPS / --peak-tflops to estimate FLOPs){paper}"
        )
        return
    flops = seconds * args.gpus * peak * 1e12
    print(f"Training cost: {flops:.2e} FLOPs = {seconds:.0f} s x {args.gpus} GPUs x {peak:g} TFLOP/s ({source}){paper}")


if __name__ == "__main__":
    main()
