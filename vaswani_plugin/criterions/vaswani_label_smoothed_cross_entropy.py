"""Criterion `vaswani_label_smoothed_cross_entropy`: label smoothing of §5.4. The loss only: a training's progress,
its signal stop and its watchdog are the task's (tasks/vaswani_translation.py), under any criterion."""

import math
from dataclasses import dataclass, field

import torch
from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from omegaconf import II

from vaswani_plugin import paper
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.models.output_layer_loss import SmoothedLoss
from vaswani_plugin.progress_options import ProgressOptions


@dataclass
class VaswaniLabelSmoothedCrossEntropyConfig(ProgressOptions):  # unused here: checkpoints of older runs hold them
    label_smoothing: float = field(default=paper.LABEL_SMOOTHING, metadata={"help": "epsilon_ls of §5.4"})
    loss_chunk_logits: int = field(
        default=0,
        metadata={
            "help": "logits per chunk of the output layer and loss; 0: by device (2^22 on a CPU, "
            "1/32 of a GPU's memory on a GPU: one chunk for most batches)"
        },
    )
    sentence_avg: bool = II("optimization.sentence_avg")


@register_criterion("vaswani_label_smoothed_cross_entropy", dataclass=VaswaniLabelSmoothedCrossEntropyConfig)
class VaswaniLabelSmoothedCrossEntropy(FairseqCriterion):
    """Cross-entropy against the label-smoothed target distribution (§5.4); logs loss, nll_loss, accuracy."""

    def __init__(self, task, label_smoothing, sentence_avg, loss_chunk_logits=0):
        super().__init__(task)
        self.epsilon = label_smoothing
        self.sentence_avg = sentence_avg
        self.loss_chunk_logits = loss_chunk_logits

    def forward(self, model, sample, reduce=True):
        if getattr(model.decoder, "adaptive_softmax", None) is not None:
            raise VaswaniConfigError(
                "vaswani_label_smoothed_cross_entropy needs a full softmax output layer; use "
                "fairseq's adaptive_loss criterion with --adaptive-softmax-cutoff"
            )
        projection = getattr(model.decoder, "output_projection", None)
        if not isinstance(projection, torch.nn.Linear) or projection.bias is not None:
            raise VaswaniConfigError(
                "vaswani_label_smoothed_cross_entropy needs a decoder whose output layer is "
                "output_projection, a linear map without bias (§3.4)"
            )
        smoothed_loss = SmoothedLoss(
            sample["target"], self.epsilon, self.padding_idx, sample["ntokens"], self.loss_chunk_logits
        )
        # The model's features, then the output layer (§3.4) and the loss in chunks, for the plugin's model and
        # fairseq's alike; the plugin's decoder returns the W to use, seen by data-parallel wrappers (its forward).
        features, extra = model(**sample["net_input"], features_only=True)
        loss, nll_loss, n_correct = smoothed_loss(features, extra.get("output_weight", projection.weight))
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
            "n_correct": n_correct.data,
            "total": sample["ntokens"],
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
            lambda meters: (
                round(100.0 * meters["n_correct"].sum / meters["total"].sum, 3)
                if meters["total"].sum > 0
                else float("nan")
            ),
        )

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
