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


def label_smoothed_loss(lprobs: torch.Tensor, target: torch.Tensor, epsilon: float, padding_idx: int):
    """§5.4: loss = -Σ_k q(k) log p(k), q(k) = (1-ε)[k = y] + ε/K over the K = V-1 non-padding symbols.

    lprobs: (tokens, V) log-probabilities; target: (tokens,). Padding targets contribute nothing.
    Returns (loss, nll_loss), both summed over the non-padding targets.
    """
    keep = target.ne(padding_idx)
    lprobs, target = lprobs[keep], target[keep]
    nll = -lprobs.gather(dim=-1, index=target.unsqueeze(-1)).squeeze(-1)
    non_padding_symbols = lprobs.size(-1) - 1
    # Σ over the non-padding symbols k of -log p(k): all symbols, less the padding one.
    uniform = -(lprobs.sum(dim=-1) - lprobs[:, padding_idx])
    loss = (1.0 - epsilon) * nll + epsilon / non_padding_symbols * uniform
    return loss.sum(), nll.sum()


@register_criterion("vaswani_label_smoothed_cross_entropy", dataclass=VaswaniLabelSmoothedCrossEntropyConfig)
class VaswaniLabelSmoothedCrossEntropy(FairseqCriterion):
    """Cross-entropy against the label-smoothed target distribution (§5.4); logs loss, nll_loss, accuracy."""

    def __init__(self, task, label_smoothing, sentence_avg):
        super().__init__(task)
        self.epsilon = label_smoothing
        self.sentence_avg = sentence_avg

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        lprobs = lprobs.view(-1, lprobs.size(-1))
        target = model.get_targets(sample, net_output).view(-1)
        loss, nll_loss = label_smoothed_loss(lprobs, target, self.epsilon, self.padding_idx)
        keep = target.ne(self.padding_idx)
        n_correct = lprobs.argmax(dim=-1).eq(target).logical_and(keep).sum()
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
            "n_correct": n_correct.data,
            "total": keep.sum().data,
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
