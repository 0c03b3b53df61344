"""Task `vaswani_translation`: fairseq's `translation` with §6.1's decoding (--search, --gnmt-alpha; the
generators are vaswani_plugin.generation's), parsing's tree constraint (§6.3, --parse-constrained) and training
under bfloat16 autocast (--bf16-autocast auto|on|off, decided by vaswani_plugin.precision)."""

import logging
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from fairseq.optim.amp_optimizer import AMPOptimizer
from fairseq.optim.fp16_optimizer import _FP16OptimizerMixin, _MemoryEfficientFP16OptimizerMixin
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.generation.generators import SEARCH_RULES, GeneratorChoice
from vaswani_plugin.precision import bf16_autocast_enabled, bf16_autocast_setting, precision_line
from vaswani_plugin.tasks.resumable_iterator import resumable

logger = logging.getLogger(__name__)


@dataclass
class VaswaniTranslationConfig(TranslationConfig):
    gnmt_alpha: Optional[float] = field(
        default=None, metadata={"help": "rank beam-search hypotheses by log P(Y|X) / ((5+|Y|)/6)^alpha, the "
                                        "GNMT length penalty of §6.1 (0.6 in the paper); replaces --lenpen"})
    search: str = field(
        default="fairseq", metadata={
            "help": "the beam search's rule: fairseq (default), fairseq-generate's hypotheses; paper, §6.1's (GNMT "
                    "penalty and early stop, each sentence's own limit); docs/reference.md#vaswani_translation-61"})
    parse_constrained: bool = field(
        default=False, metadata={"help": "parsing (§6.3): beam search emits only well-formed trees over exactly the "
                                         "input's words (docs/reference.md)"})
    bf16_autocast: str = field(
        default="off", metadata={
            "argparse_const": "on",
            "help": "auto, on or off (default off; bare: on): train under bfloat16 autocast, weights, loss and Adam "
                    "in float32; auto: on only on a CPU with AVX512-BF16 or AMX. Not fairseq's --bf16 (TPUs)"})

def fairseq_precision(optimizer, dtype: torch.dtype) -> Optional[str]:
    """fairseq's own mixed precision, told by its optimizer wrapper and the model's dtype; None for float32."""
    if isinstance(optimizer, AMPOptimizer):
        return "--amp"
    half = "bf16" if dtype == torch.bfloat16 else "fp16"
    if isinstance(optimizer, _MemoryEfficientFP16OptimizerMixin):
        return f"--memory-efficient-{half}"
    if isinstance(optimizer, _FP16OptimizerMixin):
        return f"--{half}"
    return None


@register_task("vaswani_translation", dataclass=VaswaniTranslationConfig)
class VaswaniTranslationTask(GeneratorChoice, TranslationTask):
    """fairseq's `translation`, plus --gnmt-alpha for beam search as in §6.1, --parse-constrained for parsing
    (§6.3) and --bf16-autocast for training."""

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        bf16_autocast_setting(cfg.bf16_autocast)  # a bad value: an error before the model and data load
        self.bf16_autocast = None  # decided at the first training step, where the device and optimizer are known
        if cfg.search not in SEARCH_RULES:
            raise VaswaniConfigError(f"--search {cfg.search}: choose one of {', '.join(SEARCH_RULES)}")
        self.inputs_seen = 0  # sentences given to build_dataset_for_inference so far (fairseq-interactive's lines)

    def decide_bf16_autocast(self, model, optimizer) -> bool:
        """The precision of this run, decided once and logged as one line."""
        if self.bf16_autocast is None:
            parameter = next(model.parameters())
            half = fairseq_precision(optimizer, parameter.dtype)
            self.bf16_autocast, reason = bf16_autocast_enabled(self.cfg.bf16_autocast, parameter.device, half)
            logger.info(precision_line(self.bf16_autocast, reason, half))
        return self.bf16_autocast

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if not self.decide_bf16_autocast(model, optimizer):
            return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
        device = next(model.parameters()).device.type

        def criterion_under_autocast(model, sample):
            # Only the forward pass: fairseq's train_step runs the backward pass outside, as autocast asks.
            with torch.autocast(device, dtype=torch.bfloat16):
                return criterion(model, sample)

        return super().train_step(sample, model, criterion_under_autocast, optimizer, update_num, ignore_grad)

    def get_batch_iterator(self, *args, **kwargs):
        """fairseq's, resumable on another number of processes or --max-tokens (resumable_iterator.py)."""
        return resumable(super().get_batch_iterator(*args, **kwargs))

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        """fairseq's, remembering where its sentences start among all inputs so far (fairseq-interactive reads
        its input in chunks, one dataset each): a sentence too long is then named by its input line."""
        dataset = super().build_dataset_for_inference(src_tokens, src_lengths, constraints)
        dataset.first_input_line = self.inputs_seen + 1
        self.inputs_seen += len(src_lengths)
        return dataset

    def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        """fairseq's, with a sentence longer than the model's positions reported as one line naming it (by its
        input line for fairseq-interactive's and the hub's inputs)."""
        kept, too_long = dataset.filter_indices_by_size(indices, max_positions)
        if not len(too_long):
            return kept
        if not ignore_invalid_inputs:
            others = f" (and {len(too_long) - 1} more)" if len(too_long) > 1 else ""
            sizes = np.asarray(dataset.size(too_long[0])).tolist()
            first_line = getattr(dataset, "first_input_line", None)
            name = f"sentence {too_long[0]}" if first_line is None else f"input line {first_line + too_long[0]}"
            raise VaswaniConfigError(
                f"{name}{others} is longer than the model takes: {sizes} tokens (source, target: "
                f"</s> included), positions {max_positions}; --skip-invalid-size-inputs-valid-test leaves such "
                "sentences out")
        return super().filter_indices_by_size(indices, dataset, max_positions, ignore_invalid_inputs)
