"""The one way the package's commands load a vaswani_transformer checkpoint with the dictionaries of a data-bin."""

import argparse
import pickle
import re
from pathlib import Path
from typing import Optional

from fairseq import checkpoint_utils
from fairseq.data import data_utils
from fairseq.models import ARCH_MODEL_REGISTRY

import vaswani_plugin
from vaswani_plugin.checkpoints.storage import UnreadableCheckpoint, load_checkpoint
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerModel

# The parameters whose sizes the dictionaries set: the embeddings and the pre-softmax projection (§3.4).
DICTIONARY_SIZED = ("embed_tokens.weight", "output_projection.weight")


def dictionary_mismatch(error: RuntimeError) -> bool:
    """Whether load_state_dict's error is about the dictionaries' sizes alone: only "size mismatch" lines, each for
    a parameter in DICTIONARY_SIZED (torch writes one line per problem after the first)."""
    problems = str(error).split("\n")[1:]
    names = [re.match(r"\s*size mismatch for ([\w.]+):", line) for line in problems]
    return bool(names) and all(name is not None and name[1].endswith(DICTIONARY_SIZED) for name in names)


def load_model(
    path, data, source_lang: Optional[str] = None, target_lang: Optional[str] = None, option: str = "--path"
):
    """(task, model in eval mode) through fairseq's loader, the dictionaries read from `data`; a mistake is one
    VaswaniConfigError naming `option` (the command's name for the checkpoint)."""
    vaswani_plugin.register()  # the checkpoint's task and model, by their registered names
    if not Path(path).is_file():
        raise VaswaniConfigError(f"{option} {path}: no such checkpoint file")
    try:
        state = load_checkpoint(path, checkpoint_utils.load_checkpoint_to_cpu)
        cfg = state["cfg"]
        arch = getattr(cfg.model, "arch", None) or getattr(cfg.model, "_name", None)
    except (UnreadableCheckpoint, pickle.UnpicklingError):
        raise  # one line naming the file; torch's own explanation of a class that safe loading refuses
    except Exception:  # a torch file that is no fairseq checkpoint fails in fairseq's upgrade, many ways
        raise VaswaniConfigError(f"{option} {path} is not a fairseq checkpoint") from None
    model_class = ARCH_MODEL_REGISTRY.get(arch)
    if model_class is None or not issubclass(model_class, VaswaniTransformerModel):
        raise VaswaniConfigError(
            f"{option} {path} holds a {arch!r} model, not a vaswani_transformer (a fairseq "
            "transformer: convert it first with python -m "
            "vaswani_plugin.checkpoints.convert_fairseq)"
        )
    if not Path(data).is_dir():
        raise VaswaniConfigError(f"--data {data}: no such directory")
    source_lang = source_lang or getattr(cfg.task, "source_lang", None)
    target_lang = target_lang or getattr(cfg.task, "target_lang", None)
    if source_lang is None or target_lang is None:
        # fairseq-train found the pair from the file names of the data directory; do the same.
        inferred = data_utils.infer_language_pair(str(data))
        source_lang, target_lang = source_lang or inferred[0], target_lang or inferred[1]
    if source_lang is None or target_lang is None:
        raise VaswaniConfigError(f"cannot tell the language pair from {data}: give --source-lang and --target-lang")
    for lang in (source_lang, target_lang):
        if not (Path(data) / f"dict.{lang}.txt").is_file():
            raise VaswaniConfigError(f"--data {data} has no dict.{lang}.txt")
    cfg.task.update({"data": str(data), "source_lang": source_lang, "target_lang": target_lang})
    try:
        models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], state=state)
    except RuntimeError as error:
        if dictionary_mismatch(error):  # load_state_dict: embedding sizes follow the dictionaries
            raise VaswaniConfigError(
                f"the dictionaries in --data {data} are not the ones {path} was trained with"
            ) from error
        raise VaswaniConfigError(f"{option} {path} does not load: {' '.join(str(error).split())}") from error
    return task, models[0].eval()


def add_export_arguments(parser: argparse.ArgumentParser, output_help: str) -> None:
    """The options every export command takes: the checkpoint, its data-bin, the languages, the output."""
    parser.add_argument("--checkpoint", required=True, help="a vaswani_transformer checkpoint")
    parser.add_argument("--data", required=True, help="its data-bin (fairseq-preprocess output): the dictionaries")
    parser.add_argument("--output", required=True, help=output_help)
    parser.add_argument("--source-lang", help="default: the checkpoint's, else the data-bin's")
    parser.add_argument("--target-lang", help="default: the checkpoint's, else the data-bin's")
    parser.add_argument("--force", action="store_true", help="replace --output if it exists")


def refuse_existing_output(output, force: bool) -> None:
    """An export never overwrites its --output unless --force says so."""
    if Path(output).exists() and not force:
        raise VaswaniConfigError(f"{output} exists; choose another --output, or --force to replace it")


def load_for_export(args):
    """(task, model) of an export command's --checkpoint and --data, once --output is known to be free."""
    refuse_existing_output(args.output, args.force)
    print(f"loading {args.checkpoint} with the dictionaries of {args.data}", flush=True)
    return load_model(args.checkpoint, args.data, args.source_lang, args.target_lang, "--checkpoint")
