"""Make SAVE_DIR/checkpoint_last.pt resumable again after a job was killed at any instant (a cut-off copy is kept
aside and the newest intact checkpoint copied durably in its place); and say whether a training command may go
on from SAVE_DIR's checkpoints, by fairseq's parsed configuration against the one the newest stored.

    python -m vaswani_plugin.checkpoints.resume SAVE_DIR
    python -m vaswani_plugin.checkpoints.resume --plan [--repair] < COMMANDS   run | finished | resume N | refuse LINE
    python -m vaswani_plugin.checkpoints.resume --optimizer SAVE_DIR   the --optimizer its checkpoints trained under

Details: docs/reference.md#resuming-after-a-kill; --plan (it reads, never writes): docs/recipes.md, "Re-running a
recipe".
"""

import argparse
import contextlib
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Optional

from vaswani_plugin.checkpoints.storage import (
    UnreadableCheckpoint,
    copy_atomically,
    load_checkpoint,
    newest_training_checkpoint,
    stored_config,
)
from vaswani_plugin.cli import run_command
from vaswani_plugin.durable import temporaries
from vaswani_plugin.errors import VaswaniConfigError

PROG = "vaswani_plugin.checkpoints.resume"


def keep(last: Path) -> Path:
    """A second name for the unreadable checkpoint_last.pt, dated by its modification time (when the job died)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(last.stat().st_mtime))
    kept = last.with_name(f"checkpoint_last.unreadable-{stamp}.pt")
    if not (kept.exists() and kept.samefile(last)):  # a run killed after this step linked it already
        try:
            os.link(last, kept)
        except OSError:  # a file system without hard links
            shutil.copyfile(last, kept)
    return kept


def resume(save_dir) -> None:
    """See the module docstring."""
    save_dir = Path(save_dir)
    last = save_dir / "checkpoint_last.pt"
    for stale in temporaries(last):  # copies of a run of this command that was killed
        stale.unlink()
    if not last.exists():
        return
    try:
        load_checkpoint(last)
        return
    except UnreadableCheckpoint as error:
        print(f"{PROG}: {error}; kept as {keep(last).name}", file=sys.stderr)
    newest = newest_training_checkpoint(save_dir)
    if newest is None:
        last.unlink()
        print(f"{PROG}: no intact training checkpoint in {save_dir}: training starts from the beginning")
        return
    updates, path = newest
    copy_atomically(path, last)
    print(f"{PROG}: resuming from {path.name} (update {updates}), copied to checkpoint_last.pt")


# fairseq's own options that the task's configuration mirrors for the progress (vaswani_plugin/progress_options.py's
# ProgressOptions, in the criterion's too): compared where they live, in fairseq's groups
MIRRORED_OPTIONS = (
    "save_dir",
    "no_save",
    "max_update",
    "max_epoch",
    "stop_time_hours",
    "distributed_world_size",
    "valid_subset",
)
# What a resumed run may change: fairseq's configuration groups compared field by field, and the fields of the
# other groups that are compared too. Fields one side lacks (another fairseq or plugin version) are not compared.
COMPARED_GROUPS = ("model", "criterion", "optimizer", "lr_scheduler", "task")
ALLOWED = {
    "task": {
        "data",
        "bf16_autocast",
        "tf32",  # TF32 products, as bfloat16 autocast: the same weights and optimizer state
        "compile_layers",  # how the layers run, not what they compute
        "search",
        "gnmt_alpha",
        "parse_constrained",
        "eval_bleu",
        "eval_bleu_args",
        "eval_bleu_detok",
        "eval_bleu_detok_args",
        "eval_tokenized_bleu",
        "eval_bleu_remove_bpe",
        "eval_bleu_print_samples",
        "dev_score",
        "dev_score_interval_updates",
        "dev_score_sentences",
        "dev_score_reference",
        "dev_score_args",
        "dev_score_post_process",
        "leave_epochs",  # a share of the time or update limit, as --stop-time-hours and --max-update
        "leave_epochs_of",
        *MIRRORED_OPTIONS,  # fairseq's own options, mirrored for the progress: compared where they live
    },
    "criterion": {"loss_chunk_logits", *MIRRORED_OPTIONS},  # loss_chunk_logits: how the loss is computed, not what
}
PRECISION_FIELDS = ("fp16", "bf16", "memory_efficient_fp16", "memory_efficient_bf16", "amp")  # fairseq's, in common
COMPARED_FIELDS = {
    "common": PRECISION_FIELDS,
    "optimization": ("clip_norm", "sentence_avg", "lr", "stop_min_lr"),
}
# After a divergence (training/stopping.py) a run may go on from its last intact checkpoint with a lower rate or a
# longer warm-up: eq. 3's settings and Adam's rate. A precision is no such change (fairseq resumes no optimizer
# state under another optimizer class: fp16's, amp's).
RETUNABLE = {"lr_scheduler": None, "optimization": ("lr", "clip_norm")}  # None: every field of the group
TOKENS_TOLERANCE = 0.02  # the recipes' rounding of TOKENS_PER_STEP over the workers stays well inside it


def training_config(plan: str):
    """fairseq-train's configuration (a plain dict) for the fairseq_cli.train command among the plan's lines."""
    import vaswani_plugin

    vaswani_plugin.register()  # the plan's --user-dir: this package, already imported, is not imported again
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    for line in plan.splitlines():
        words = shlex.split(line)
        if words[1:3] == ["-m", "fairseq_cli.train"]:
            parser = options.get_training_parser()
            cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, words[3:]))
            return OmegaConf.to_container(cfg, resolve=True)
    raise VaswaniConfigError("the plan holds no `python -m fairseq_cli.train` command")


def tokens_per_step(cfg: dict) -> Optional[int]:
    tokens = cfg["dataset"].get("max_tokens")
    if not tokens:
        return None
    return tokens * cfg["optimization"]["update_freq"][0] * cfg["distributed_training"]["distributed_world_size"]


def retunable(group: str, name: str) -> bool:
    if group not in RETUNABLE or name == "_name":  # another --lr-scheduler is another schedule
        return False
    return RETUNABLE[group] is None or name in RETUNABLE[group]


def configuration_change(old: dict, new: dict, retuning: bool = False, precision: bool = True) -> Optional[str]:
    """The first setting of `new` that a run going on from a checkpoint trained under `old` may not change;
    `retuning`: after a divergence, RETUNABLE may change too; `precision`: fairseq's precision is compared."""
    fields = [
        (group, name)
        for group in COMPARED_GROUPS
        for name in (new.get(group) or {})
        if name not in ALLOWED.get(group, ()) and name != "_name"
    ]
    fields = [(group, "_name") for group in COMPARED_GROUPS] + fields
    fields += [(group, name) for group, names in COMPARED_FIELDS.items() for name in names]
    if retuning:
        fields = [(group, name) for group, name in fields if not retunable(group, name)]
    if not precision:
        fields = [(group, name) for group, name in fields if not (group == "common" and name in PRECISION_FIELDS)]
    for group, name in fields:
        if name in (old.get(group) or {}) and name in (new.get(group) or {}) and old[group][name] != new[group][name]:
            # A group's _name is the choice of --arch (the model's), --criterion, --optimizer, ...
            option = f"--{'arch' if group == 'model' else group}" if name == "_name" else f"--{name}"
            option = option.replace("_", "-")
            return f"{option} is {new[group][name]!r} now, {old[group][name]!r} in the checkpoints"
    before, now = tokens_per_step(old), tokens_per_step(new)
    if before and now and abs(now - before) > TOKENS_TOLERANCE * before:
        return f"the tokens per step (TOKENS_PER_STEP) are {now:,} now, {before:,} in the checkpoints"
    return None


def resumed_state(save_dir: Path) -> Optional[dict]:
    """The checkpoint training resumes from: checkpoint_last.pt, or where it is missing or cut off the newest intact
    training checkpoint (which resume() makes checkpoint_last.pt before training); None without one."""
    with contextlib.suppress(UnreadableCheckpoint):
        return load_checkpoint(save_dir / "checkpoint_last.pt")
    newest = newest_training_checkpoint(save_dir) if save_dir.is_dir() else None
    return None if newest is None else load_checkpoint(newest[1])


def trained_config(save_dir: Path) -> Optional[dict]:
    """The fairseq configuration (a plain dict) of the checkpoint SAVE_DIR's training resumes from; None without one.
    The recipes read its optimizer and precision (vaswani_plugin.precision.trained_precision) from it."""
    state = resumed_state(save_dir)
    return None if state is None else stored_config(state)


def trained_optimizer(save_dir: Path) -> Optional[str]:
    """The --optimizer SAVE_DIR's checkpoints were trained under (fairseq resumes none under another): that of the
    checkpoint training resumes from; None without one."""
    cfg = trained_config(save_dir)
    return None if cfg is None else cfg["optimizer"]["_name"]


def plan_decision(plan: str, repair: bool = False, retuning: bool = False) -> str:
    """See the module docstring (--plan); `repair`: first resume() the --save-dir, its notes on stderr; `retuning`:
    the run diverged, and its rate and warm-up may change (RETUNABLE)."""
    new = training_config(plan)
    save_dir = Path(new["checkpoint"]["save_dir"])
    if repair:
        with contextlib.redirect_stdout(sys.stderr):
            resume(save_dir)
    state = resumed_state(save_dir)
    if state is None:
        return "run"
    old = stored_config(state)
    updates = state["optimizer_history"][-1]["num_updates"]
    extra = state.get("extra_state") or {}
    target = new["optimization"]
    ended_epochs = extra.get("train_iterator", {}).get("epoch", 1) - 1
    trained = extra.get("previous_training_time", 0)
    # --leave-epochs moves the time or update limit while training, and the checkpoint keeps the limits it had: those
    # that stopped the training in its last (a limit raised since goes to what comes after: the fine-tuning). Hours
    # compared as kept: seconds / 3600 * 3600 can come back an ulp above.
    left = new["task"].get("leave_epochs") and old["task"].get("leave_epochs")
    moved = old["optimization"]
    finished = (
        (target["max_update"] and updates >= target["max_update"])
        or (target["stop_time_hours"] and trained >= target["stop_time_hours"] * 3600)
        or (left and moved["stop_time_hours"] and trained / 3600 >= moved["stop_time_hours"])
        or (left and target["max_update"] and moved["max_update"] and updates >= moved["max_update"])
        or (target["max_epoch"] and ended_epochs >= target["max_epoch"])
    )
    change = configuration_change(old, new, retuning)
    # A finished run trains no more: another precision (a default that changed, a card that differs) changes nothing.
    if change and not (finished and configuration_change(old, new, retuning, precision=False) is None):
        return f"refuse {change}"
    if target["max_update"] and updates > target["max_update"]:
        return (
            f"refuse --max-update is {target['max_update']:,} now (MAX_UPDATE), but the checkpoints in "
            f"{save_dir} are at update {updates:,}"
        )
    return "finished" if finished else f"resume {updates}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("save_dir", nargs="?", help="fairseq-train's --save-dir")
    parser.add_argument("--plan", action="store_true", help="read commands from stdin; say whether training resumes")
    parser.add_argument("--repair", action="store_true", help="with --plan: first do what SAVE_DIR alone does")
    parser.add_argument(
        "--optimizer",
        action="store_true",
        help="print the --optimizer SAVE_DIR's checkpoints trained under (nothing without one)",
    )

    def command(args):
        if args.plan:
            print(plan_decision(sys.stdin.read(), args.repair))
        elif args.optimizer and args.save_dir:
            print(trained_optimizer(Path(args.save_dir)) or "")
        elif args.save_dir:
            resume(args.save_dir)
        else:
            raise VaswaniConfigError("give SAVE_DIR, or --plan")

    run_command(parser, command, argv)


if __name__ == "__main__":
    main()
