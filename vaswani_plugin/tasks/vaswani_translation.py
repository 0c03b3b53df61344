"""Task `vaswani_translation`: fairseq's `translation` with the GNMT length penalty of §6.1 (α = 0.6), and
training under bfloat16 autocast (on CPUs too, which fairseq's own --bf16, made for TPUs, cannot)."""

from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq.optim.amp_optimizer import AMPOptimizer
from fairseq.optim.fp16_optimizer import _FP16OptimizerMixin, _MemoryEfficientFP16OptimizerMixin
from fairseq.sequence_generator import SequenceGenerator, SequenceGeneratorWithAlignment
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from vaswani_plugin.errors import VaswaniConfigError


def gnmt_length_penalty(length: int, alpha: float) -> float:
    """§6.1 (Wu et al., 2016, eq. 14): lp(Y) = ((5 + |Y|) / 6)^α, |Y| counting </s>."""
    return ((5 + length) / 6) ** alpha


class GnmtLengthPenalty:
    """Scores each finished hypothesis log P(Y|X) / lp(Y) instead of fairseq's log P(Y|X) / |Y|^lenpen.

    fairseq divides the cumulative scores in place *after* deriving the positional scores from them, so
    normalisation is turned off and the stored scores of the hypotheses this step finalised are divided
    afterwards: positional scores stay the raw per-token log-probabilities, and fairseq's final sort
    (by "score") ranks by the penalised scores. Beam search itself never looks at normalised scores.
    """

    def __init__(self, *args, gnmt_alpha: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.normalize_scores = False
        self.gnmt_alpha = gnmt_alpha

    def finalize_hypos(self, step, bbsz_idx, eos_scores, tokens, scores, finalized, finished, beam_size,
                       attn, src_lengths, max_len):
        counts = [len(hypotheses) for hypotheses in finalized]
        newly_finished = super().finalize_hypos(step, bbsz_idx, eos_scores, tokens, scores, finalized,
                                                finished, beam_size, attn, src_lengths, max_len)
        penalty = gnmt_length_penalty(step + 1, self.gnmt_alpha)  # step + 1 tokens, </s> included
        for hypotheses, count in zip(finalized, counts):
            for hypothesis in hypotheses[count:]:
                hypothesis["score"] = hypothesis["score"] / penalty
        return newly_finished


class GnmtSequenceGenerator(GnmtLengthPenalty, SequenceGenerator):
    """fairseq's beam search, hypotheses ranked by the GNMT length penalty (§6.1)."""


class GnmtSequenceGeneratorWithAlignment(GnmtLengthPenalty, SequenceGeneratorWithAlignment):
    """The same, for --print-alignment (§6.1)."""


@dataclass
class VaswaniTranslationConfig(TranslationConfig):
    gnmt_alpha: Optional[float] = field(
        default=None, metadata={"help": "rank beam-search hypotheses by log P(Y|X) / ((5+|Y|)/6)^alpha, the "
                                        "GNMT length penalty of §6.1 (0.6 in the paper); replaces --lenpen"})
    bf16_autocast: bool = field(
        default=False, metadata={"help": "train under torch.autocast in bfloat16 on the model's device (CPU or "
                                         "GPU): matrix products in bfloat16; weights, loss, gradients and Adam in "
                                         "float32. Faster only where the hardware multiplies bfloat16 natively "
                                         "(AVX512-BF16 or AMX CPUs, Ampere or newer GPUs). Not fairseq's --bf16, "
                                         "which assumes a TPU"})


@register_task("vaswani_translation", dataclass=VaswaniTranslationConfig)
class VaswaniTranslationTask(TranslationTask):
    """fairseq's `translation`, plus --gnmt-alpha for beam search as in §6.1 and --bf16-autocast for training."""

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if not self.cfg.bf16_autocast:
            return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
        if isinstance(optimizer, (AMPOptimizer, _FP16OptimizerMixin, _MemoryEfficientFP16OptimizerMixin)):
            raise VaswaniConfigError("--bf16-autocast is a precision of its own: drop --fp16, --amp and --bf16")
        device = next(model.parameters()).device.type

        def criterion_under_autocast(model, sample):
            # Only the forward pass: fairseq's train_step runs the backward pass outside, as autocast asks.
            with torch.autocast(device, dtype=torch.bfloat16):
                return criterion(model, sample)

        return super().train_step(sample, model, criterion_under_autocast, optimizer, update_num, ignore_grad)

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        alpha = self.cfg.gnmt_alpha
        if alpha is None or getattr(args, "score_reference", False):
            return super().build_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs,
                                           prefix_allowed_tokens_fn)
        if getattr(args, "lenpen", 1) != 1 or getattr(args, "unnormalized", False):
            option = "--unnormalized" if getattr(args, "unnormalized", False) else f"--lenpen {args.lenpen}"
            raise VaswaniConfigError(f"--gnmt-alpha {alpha} replaces fairseq's length normalisation; "
                                     f"drop {option}")
        if seq_gen_cls is not None:
            raise VaswaniConfigError(f"--gnmt-alpha ranks fairseq's SequenceGenerator, not {seq_gen_cls.__name__}")
        extra_gen_cls_kwargs = {**(extra_gen_cls_kwargs or {}), "gnmt_alpha": alpha}
        seq_gen_cls = GnmtSequenceGenerator
        if getattr(args, "print_alignment", False):
            seq_gen_cls = GnmtSequenceGeneratorWithAlignment
            extra_gen_cls_kwargs["print_alignment"] = args.print_alignment
        return super().build_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs, prefix_allowed_tokens_fn)
