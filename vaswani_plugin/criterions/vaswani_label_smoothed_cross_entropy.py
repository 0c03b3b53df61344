"""Criterion `vaswani_label_smoothed_cross_entropy`: label smoothing of §5.4."""

import math
from dataclasses import dataclass, field

import torch
from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from omegaconf import II


@dataclass
class VaswaniLabelSmoothedCrossEntropyConfig(FairseqDataclass):
    label_smoothing: float = field(default=0.1, metadata={"help": "epsilon_ls of §5.4"})
    sentence_avg: bool = II("optimization.sentence_avg")


class LabelSmoothedLoss(torch.autograd.Function):
    """§5.4 from the logits z: loss = -Σ_k q(k) log p(k), p = softmax(z), q(k) = (1-ε)[k = y] + ε/K.

    K = V-1: the non-padding symbols. The gradient is written out, ∂loss/∂z = p - (1-ε)[k = y] - (ε/K)[k ≠ pad],
    and computed in place in the log-probabilities: autograd through log_softmax, gather and sum allocates
    several (tokens, V) tensors and adds them up, which on CPU was ~40% of a small model's training step.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, epsilon: float, padding_idx: int):
        """logits (tokens, V), target (tokens,) without padding. Returns per-token (loss, nll, whether the most
        probable word is the target); fp16 and bf16 logits give fp32 losses."""
        lprobs = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
        nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        correct = lprobs.argmax(dim=-1).eq(target)  # on the fp32 copy: argmax over bf16 is 6x slower on CPU
        non_padding_symbols = lprobs.size(-1) - 1
        uniform = -(lprobs.sum(dim=-1) - lprobs[:, padding_idx])  # -Σ_{k≠pad} log p(k)
        loss = (1.0 - epsilon) * nll + epsilon / non_padding_symbols * uniform
        ctx.save_for_backward(lprobs, target)
        ctx.epsilon, ctx.padding_idx, ctx.logits_dtype, ctx.used = epsilon, padding_idx, logits.dtype, False
        ctx.mark_non_differentiable(nll, correct)
        return loss, nll, correct

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll, _grad_correct):
        if ctx.used:
            raise RuntimeError("LabelSmoothedLoss computes its gradient in place: backward only once")
        ctx.used = True
        lprobs, target = ctx.saved_tensors
        smoothing = ctx.epsilon / (lprobs.size(-1) - 1)
        grad = lprobs.exp_()  # p
        grad.sub_(smoothing)
        grad[:, ctx.padding_idx] += smoothing
        grad.scatter_add_(-1, target.unsqueeze(-1), grad.new_full((target.numel(), 1), ctx.epsilon - 1.0))
        grad.mul_(grad_loss.unsqueeze(-1))
        return grad.to(ctx.logits_dtype), None, None, None


@register_criterion("vaswani_label_smoothed_cross_entropy", dataclass=VaswaniLabelSmoothedCrossEntropyConfig)
class VaswaniLabelSmoothedCrossEntropy(FairseqCriterion):
    """Cross-entropy against the label-smoothed target distribution (§5.4); logs loss, nll_loss, accuracy."""

    def __init__(self, task, label_smoothing, sentence_avg):
        super().__init__(task)
        self.epsilon = label_smoothing
        self.sentence_avg = sentence_avg

    def forward(self, model, sample, reduce=True):
        if getattr(model.decoder, "adaptive_softmax", None) is not None:
            raise ValueError("vaswani_label_smoothed_cross_entropy needs a full softmax output layer; use "
                             "fairseq's adaptive_loss criterion with --adaptive-softmax-cutoff")
        # The output layer (§3.4) runs on the non-padding target positions only.
        features, _ = model(**sample["net_input"], features_only=True)
        target = sample["target"]
        keep = target.ne(self.padding_idx)
        logits = model.decoder.output_layer(features[keep])
        target = target[keep]
        loss, nll, correct = LabelSmoothedLoss.apply(logits, target, self.epsilon, self.padding_idx)
        loss, nll_loss = loss.sum(), nll.sum()
        n_correct = correct.sum()
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
            "n_correct": n_correct.data,
            "total": target.numel(),
        }
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        """Losses in base 2, as fairseq reports them; ppl = 2^nll_loss is per-wordpiece perplexity."""
        def total(key):
            return utils.item(sum(log.get(key, 0) for log in logging_outputs))

        sample_size, ntokens = total("sample_size"), total("ntokens")
        metrics.log_scalar("loss", total("loss") / sample_size / math.log(2), sample_size, round=3)
        metrics.log_scalar("nll_loss", total("nll_loss") / ntokens / math.log(2), ntokens, round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))
        metrics.log_scalar_sum("n_correct", total("n_correct"))
        metrics.log_scalar_sum("total", total("total"))
        metrics.log_derived(
            "accuracy",
            lambda meters: round(100.0 * meters["n_correct"].sum / meters["total"].sum, 3)
            if meters["total"].sum > 0 else float("nan"))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
