"""Checkpoint averaging of §6.1 ("averaging the last 5 checkpoints ... written at 10-minute intervals").

    python -m vaswani_plugin.checkpoints.average --inputs CKPT_DIR --num-update-checkpoints 5 --output avg.pt
    python -m vaswani_plugin.checkpoints.average --inputs CKPT_DIR --num-epoch-checkpoints 5 --output avg.pt
    python -m vaswani_plugin.checkpoints.average --inputs a.pt b.pt c.pt --output avg.pt

Every floating-point tensor of state["model"] is averaged in float64 and cast back to its dtype; all else
(integer buffers, cfg, optimizer_history, extra_state) is the last checkpoint's: the newest one when
selected with --num-*-checkpoints, the last one listed otherwise. The optimizer state is dropped: the
result is for generation (continuing training from it starts Adam afresh).
"""

import argparse
import re
from pathlib import Path
from typing import List, Sequence

from vaswani_plugin.checkpoints.storage import load_checkpoint, save_atomically
from vaswani_plugin.cli import run_command
from vaswani_plugin.errors import VaswaniConfigError

PATTERNS = {"update": re.compile(r"checkpoint_(\d+)_(\d+)\.pt"), "epoch": re.compile(r"checkpoint(\d+)\.pt")}
NAMES = {"update": "checkpoint_<epoch>_<updates>.pt", "epoch": "checkpoint<epoch>.pt"}


def last_checkpoints(folder, count: int, kind: str) -> List[Path]:
    """The last `count` checkpoints of `folder` by update number (kind "update") or epoch ("epoch"), oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        raise VaswaniConfigError(f"--num-{kind}-checkpoints needs one checkpoint directory, got {folder}")
    found = [
        (int(m.group(m.lastindex)), path) for path in folder.iterdir() if (m := PATTERNS[kind].fullmatch(path.name))
    ]
    if len(found) < count:
        raise VaswaniConfigError(
            f"--num-{kind}-checkpoints {count} asks for more than the {len(found)} {NAMES[kind]} files in {folder}"
        )
    return [path for _, path in sorted(found)[len(found) - count :]]


def average_checkpoints(paths: Sequence) -> dict:
    """The state of the last (newest) path, its model tensors replaced by the float64 mean over all paths."""
    if not paths:
        raise VaswaniConfigError("no checkpoints to average")
    sums, state = {}, None
    for path in paths:
        if not Path(path).is_file():
            raise VaswaniConfigError(f"{path} is not a checkpoint file")
        state = load_checkpoint(path)
        model = state.get("model") if isinstance(state, dict) else None
        if model is None:
            raise VaswaniConfigError(f"{path} is not a fairseq checkpoint (it has no 'model')")
        if sums and set(model) != set(sums):
            different = sorted(set(model) ^ set(sums))
            raise VaswaniConfigError(
                f"{path} has other parameters than {paths[0]}: "
                f"{', '.join(different[:3])}{' ...' if len(different) > 3 else ''}"
            )
        for key, tensor in model.items():
            if key in sums and sums[key].shape != tensor.shape:
                raise VaswaniConfigError(
                    f"{key} has shape {tuple(tensor.shape)} in {path} but {tuple(sums[key].shape)} in {paths[0]}"
                )
            if tensor.is_floating_point():
                sums[key] = sums[key] + tensor.double() if key in sums else tensor.double()
            else:
                sums[key] = tensor
    state["model"] = {
        key: (total / len(paths)).to(state["model"][key].dtype) if state["model"][key].is_floating_point() else total
        for key, total in sums.items()
    }
    state.pop("last_optimizer_state", None)
    return state


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="vaswani_plugin.checkpoints.average",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--inputs",
        nargs="+",
        required=True,
        help="checkpoint files, or one directory with --num-update/epoch-checkpoints",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--num-update-checkpoints",
        type=int,
        metavar="N",
        help="average the last N checkpoint_<epoch>_<updates>.pt by update count",
    )
    group.add_argument(
        "--num-epoch-checkpoints", type=int, metavar="N", help="average the last N checkpoint<epoch>.pt by epoch"
    )
    parser.add_argument("--output", required=True, help="where to write the averaged checkpoint")
    run_command(parser, average_command, argv)


def average_command(args) -> None:
    paths = args.inputs
    for kind, count in (("update", args.num_update_checkpoints), ("epoch", args.num_epoch_checkpoints)):
        if count is not None:
            if count < 1 or len(args.inputs) != 1:
                raise VaswaniConfigError(f"--num-{kind}-checkpoints needs N >= 1 and one directory in --inputs")
            paths = last_checkpoints(args.inputs[0], count, kind)
    save_atomically(average_checkpoints(paths), args.output)
    print(f"averaged {len(paths)} checkpoints (optimizer state dropped) into {args.output}:")
    for path in paths:
        print(f"  {path}")


if __name__ == "__main__":
    main()
