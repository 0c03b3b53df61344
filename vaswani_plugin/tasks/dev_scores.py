"""The development set scored while training (Table 3's newstest2013; §6.3's section 22): BLEU (sacreBLEU and
tokenised) or bracketing F1 of the paper's decoding, on a fixed subset of the valid split, at fairseq's
validations (each checkpoint) once every --dev-score-interval-updates updates. Each batch adds up its corpus
statistics, which fairseq sums over batches and workers; the score is computed from the sums.
"""

import json
from argparse import Namespace
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch

from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.scoring.bleu import bleu_from_statistics, bleu_statistics, read_lines
from vaswani_plugin.scoring.evalb import bracketing, compare
from vaswani_plugin.scoring.parses import parse_trees

KINDS = ("none", "bleu", "f1")
BLEUS = {"bleu": "sacrebleu", "tok_bleu": "tokenised"}  # the valid log's names: sacreBLEU as fairseq's --eval-bleu
F1_COUNTS = ("matched", "gold", "test")


def subset_ids(size: int, sentences: int) -> np.ndarray:
    """`sentences` ids spread evenly over a split of `size` (every one when 0 or more than it has)."""
    if sentences <= 0 or sentences >= size:
        return np.arange(size)
    return (np.arange(sentences) * size) // sentences


class DevScoring:
    """What the task does for --dev-score: which validations score, which sentences, and their statistics."""

    def __init__(self, cfg, target_lang: Optional[str]):
        self.kind, self.every, self.sentences = cfg.dev_score, cfg.dev_score_interval_updates, cfg.dev_score_sentences
        self.reference, self.post_process, self.target_lang = (
            cfg.dev_score_reference,
            cfg.dev_score_post_process,
            target_lang,
        )
        if self.kind not in KINDS:
            raise VaswaniConfigError(f"--dev-score {self.kind}: choose one of {', '.join(KINDS)}")
        try:
            self.generation = Namespace(**json.loads(cfg.dev_score_args))
        except (ValueError, TypeError) as error:
            raise VaswaniConfigError(f"--dev-score-args {cfg.dev_score_args!r}: not a JSON object ({error})") from None
        self.next_due, self.scored_at, self.generator, self.texts = None, None, None, None

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    def due_after(self, updates: int) -> int:
        """The first update count after `updates` that scores."""
        return (updates // self.every + 1) * self.every if self.every > 0 else 0

    def before_training_step(self, update_num: int):
        """fairseq's update_num: the updates done before this step. At the first step the reference files are read
        (a missing one is an error now, not at the first scoring)."""
        if self.next_due is None:
            self.texts = self.read_references() if self.texts is None else self.texts
            self.next_due = self.due_after(update_num)
        if self.scored_at is not None:  # the validation before this step scored
            self.next_due, self.scored_at = self.due_after(self.scored_at), None

    def due(self, updates_done: Optional[int]) -> bool:
        return self.enabled and self.next_due is not None and updates_done is not None and updates_done >= self.next_due

    def read_references(self) -> Dict[str, List[str]]:
        if self.kind == "bleu":
            if not self.target_lang:
                raise VaswaniConfigError("--dev-score bleu needs the target language (--target-lang)")
            return {"reference": self.read(Path(self.reference or ""))}
        folder, split = Path(self.reference or ""), "valid"
        return {
            "words": self.read(folder / "text" / f"{split}.words"),
            "tags": self.read(folder / "gold" / f"{split}.tags"),
            "gold": self.read(folder / "gold" / f"{split}.trees"),
        }

    def read(self, path: Path) -> List[str]:
        if not path.is_file():
            raise VaswaniConfigError(
                f"--dev-score {self.kind}: {path} is not a file (--dev-score-reference: "
                + (
                    "the valid split's plain reference text)"
                    if self.kind == "bleu"
                    else "the folder prepare.wsj_parsing wrote, with text/ and gold/)"
                )
            )
        return read_lines(path)

    def statistics(self, task, sample, model, updates_done: int) -> Dict[str, object]:
        """The batch's statistics for the logging output: the paper's decoding of its sentences (those of the
        subset) scored against their references."""
        self.scored_at = updates_done
        ids = sample["id"].tolist()
        if not of_the_valid_split(task, sample):
            return self.counts([], [])  # fairseq's stand-in batch for a worker with none left: its logs count 0
        if self.generator is None:
            self.generator = task.build_generator([model], self.generation)
        hypotheses = task.inference_step(self.generator, [model], sample)
        strip = {task.target_dictionary.eos(), task.target_dictionary.bos()}
        outputs = [
            task.target_dictionary.string(h[0]["tokens"].int().cpu(), self.post_process, extra_symbols_to_ignore=strip)
            for h in hypotheses
        ]
        return self.counts(ids, outputs)

    def counts(self, ids: List[int], outputs: List[str]) -> Dict[str, object]:
        """The statistics of the outputs (text, subwords joined) of the valid split's sentences `ids`."""
        counts: Dict[str, float] = {"_dev_sentences": float(len(ids))}
        if self.kind == "bleu":
            references = [self.line("reference", i) for i in ids]
            for name in BLEUS.values():  # every key in every log, as fairseq's sum over workers needs
                counts.update(numbered(f"_dev_{name}", [0.0] * 10))
            if ids:
                for name, statistics in bleu_statistics(outputs, references, self.target_lang).items():
                    counts.update(numbered(f"_dev_{name}", statistics))
        else:
            words, tags = [self.line("words", i) for i in ids], [self.line("tags", i) for i in ids]
            trees, _ = parse_trees(outputs, words, tags)
            results = [compare(self.line("gold", i), tree) for i, tree in zip(ids, trees)]
            counts.update(
                numbered("_dev_brackets", [sum(getattr(r, key) for r in results if r.status == 0) for key in F1_COUNTS])
            )
        return counts

    def subset(self, indices: np.ndarray, size: int) -> np.ndarray:
        """The valid split's `indices` (fairseq's batching order) that belong to the subset (--dev-score-sentences)."""
        return indices[np.isin(indices, subset_ids(size, self.sentences))]

    def line(self, name: str, index: int) -> str:
        lines = self.texts[name]
        if index >= len(lines):
            raise VaswaniConfigError(
                f"--dev-score-reference: sentence {index} of the valid split has no line in "
                f"its {name} file ({len(lines)} lines): the files of another split?"
            )
        return lines[index]

    def log(self, logging_outputs, metrics):
        """Into fairseq's metrics (task.reduce_metrics): the summed statistics, one float each (a checkpoint keeps
        them, and safe loading reads floats), and the scores derived from them."""
        present = [log for log in logging_outputs if "_dev_sentences" in log]
        if not present:
            return
        for key in sorted({key for log in present for key in log if key.startswith("_dev_")}):
            metrics.log_scalar_sum(key, float(sum(log.get(key, 0) for log in present)))
        metrics.log_derived("dev_sentences", lambda meters: int(meters["_dev_sentences"].sum))
        if self.kind == "bleu":
            for shown, name in BLEUS.items():
                metrics.log_derived(
                    shown,
                    lambda meters, name=name: round(
                        bleu_from_statistics(name, summed(meters, f"_dev_{name}", 10), self.target_lang), 2
                    ),
                )
        else:
            metrics.log_derived("f1", lambda meters: round(bracketing(*summed(meters, "_dev_brackets", 3))[2], 2))


def of_the_valid_split(task, sample) -> bool:
    """Whether a batch is the valid split's: a worker whose share of it is done gets the first training batch,
    whose logs fairseq multiplies by 0 (trainer.valid_step's dummy batch); it is not decoded."""
    dataset = task.datasets.get("valid")
    first = int(sample["id"][0])
    if dataset is None or first >= len(dataset):
        return False
    tokens = sample["net_input"]["src_tokens"][0]
    return torch.equal(tokens[tokens.ne(task.source_dictionary.pad())].cpu(), dataset[first]["source"])


def numbered(prefix: str, values) -> Dict[str, float]:
    """A vector as logging-output floats PREFIX_0, PREFIX_1, ... (fairseq sums each over batches and workers)."""
    return {f"{prefix}_{index}": float(value) for index, value in enumerate(values)}


def summed(meters, prefix: str, count: int) -> List[float]:
    return [meters[f"{prefix}_{index}"].sum for index in range(count)]
