"""Criterion `vaswani_label_smoothed_cross_entropy`: label smoothing of §5.4."""

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor
from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from omegaconf import II


@dataclass
class VaswaniLabelSmoothedCrossEntropyConfig(FairseqDataclass):
    label_smoothing: float = field(default=0.1, metadata={"help": "epsilon_ls of §5.4"})
    sentence_avg: bool = II("optimization.sentence_avg")


# Logits per chunk of OutputLayerLoss (rows = CHUNK_ELEMENTS // V tokens): 16 MB in float32.
CHUNK_ELEMENTS = 2**22


def smoothed_losses(lprobs: Tensor, target: Tensor, epsilon: float, padding_idx: int):
    """§5.4 per token: loss = -Σ_k q(k) log p(k), q(k) = (1-ε)[k = y] + ε/K over the K = V-1 non-padding
    symbols; also the nll and whether the most probable word is the target."""
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    uniform = -(lprobs.sum(dim=-1) - lprobs[:, padding_idx])  # -Σ_{k≠pad} log p(k)
    loss = (1.0 - epsilon) * nll + epsilon / (lprobs.size(-1) - 1) * uniform
    return loss, nll, lprobs.argmax(dim=-1).eq(target)


def logits_gradient_(lprobs: Tensor, target: Tensor, epsilon: float, padding_idx: int) -> Tensor:
    """∂loss/∂z = p - (1-ε)[k = y] - (ε/K)[k ≠ pad], written over the log-probabilities (in place)."""
    smoothing = epsilon / (lprobs.size(-1) - 1)
    grad = lprobs.exp_()  # p
    grad.sub_(smoothing)
    grad[:, padding_idx] += smoothing
    return grad.scatter_add_(-1, target.unsqueeze(-1), grad.new_full((target.numel(), 1), epsilon - 1.0))


class OutputLayerLoss(torch.autograd.Function):
    """§3.4 + §5.4: the logits z = x W^T of the real target positions and their label-smoothed loss.

    The tokens go through in chunks, and each chunk's gradients for x and W are taken at once from the
    written-out ∂loss/∂z, so no (tokens, V) tensor outlives its chunk. Autograd through the projection,
    log_softmax, gather and sum kept several whole ones: the largest tensors of a small model's step.
    """

    @staticmethod
    def forward(ctx, features: Tensor, weight: Tensor, target: Tensor, epsilon: float, padding_idx: int):
        """features (tokens, d), weight (V, d), target (tokens,) without padding. Returns the sums over the
        tokens of the loss, the nll and the correct guesses; losses in float32 at least (fp16, bf16)."""
        device = features.device.type
        # The products run in the autocast dtype if autocast is on (as nn.Linear would), else in W's.
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype
        wide = torch.promote_types(dtype, torch.float32)
        need_x, need_w = ctx.needs_input_grad[:2]
        with torch.autocast(device, enabled=False):
            w, x = weight.to(dtype), features.to(dtype)
            grad_x = torch.empty_like(x) if need_x else None
            grad_w = torch.zeros_like(weight, dtype=wide) if need_w else None
            totals = torch.zeros(3, dtype=wide, device=features.device)
            rows = max(1, CHUNK_ELEMENTS // w.size(0))
            for start in range(0, x.size(0), rows):
                chunk, y = x[start:start + rows], target[start:start + rows]
                lprobs = torch.log_softmax(torch.mm(chunk, w.t()).to(wide), dim=-1)
                totals += torch.stack([part.sum() for part in smoothed_losses(lprobs, y, epsilon, padding_idx)])
                if need_x or need_w:
                    grad_z = logits_gradient_(lprobs, y, epsilon, padding_idx).to(dtype)
                    if need_x:
                        torch.mm(grad_z, w, out=grad_x[start:start + rows])
                    if need_w:
                        grad_w += torch.mm(grad_z.t(), chunk)
        ctx.save_for_backward(grad_x, grad_w)
        ctx.dtypes = features.dtype, weight.dtype
        loss, nll, correct = (total.clone() for total in totals.unbind())  # three tensors, not views
        ctx.mark_non_differentiable(nll, correct)
        return loss, nll, correct

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll, _grad_correct):
        grad_x, grad_w = ctx.saved_tensors
        x_dtype, w_dtype = ctx.dtypes
        return (None if grad_x is None else (grad_x * grad_loss).to(x_dtype),
                None if grad_w is None else (grad_w * grad_loss).to(w_dtype), None, None, None)


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
        projection = getattr(model.decoder, "output_projection", None)
        if not isinstance(projection, torch.nn.Linear) or projection.bias is not None:
            raise ValueError("vaswani_label_smoothed_cross_entropy needs a decoder whose output layer is "
                             "output_projection, a linear map without bias (§3.4)")
        # The output layer (§3.4) runs on the non-padding target positions only.
        features, _ = model(**sample["net_input"], features_only=True)
        target = sample["target"]
        keep = target.ne(self.padding_idx)
        target = target[keep]
        loss, nll_loss, n_correct = OutputLayerLoss.apply(features[keep], projection.weight, target, self.epsilon,
                                                          self.padding_idx)
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
