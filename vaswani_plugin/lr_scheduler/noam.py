"""LR scheduler `noam`: the learning-rate schedule of §5.3, eq. 3."""

import logging
from dataclasses import dataclass, field
from typing import List, Optional

from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

from vaswani_plugin import paper
from vaswani_plugin.errors import VaswaniConfigError

logger = logging.getLogger(__name__)


@dataclass
class NoamConfig(FairseqDataclass):
    warmup_updates: int = field(default=paper.WARMUP_STEPS, metadata={"help": "warmup_steps of eq. 3"})
    model_dim: Optional[int] = field(
        default=None, metadata={"help": "d_model of eq. 3; default: the model's --encoder-embed-dim"}
    )
    factor: float = field(default=1.0, metadata={"help": "multiplies eq. 3 (1.0 in the paper)"})
    lr: List[float] = II("optimization.lr")
    # Not a command-line option (no help): the model's d_model. fairseq copies the flat argparse value for
    # argparse-style models (its `transformer`) and resolves the interpolation for dataclass models (ours).
    encoder_embed_dim: Optional[int] = II("model.encoder_embed_dim")


def noam_learning_rate(step: int, model_dim: int, warmup_updates: int, factor: float = 1.0) -> float:
    """Eq. 3: lrate = d_model^-0.5 · min(step_num^-0.5, step_num · warmup_steps^-1.5), step_num from 1."""
    return factor * model_dim**-0.5 * min(step**-0.5, step * warmup_updates**-1.5)


def model_dim_from_config(cfg) -> int:
    """The model's --encoder-embed-dim, or a clear error for models that have none."""
    try:
        model_dim = cfg.encoder_embed_dim
    except Exception:  # omegaconf raises several error types for a missing interpolation target
        model_dim = None
    if model_dim is None:
        raise VaswaniConfigError("noam could not read d_model from the model's --encoder-embed-dim; pass --model-dim")
    return model_dim


@register_lr_scheduler("noam", dataclass=NoamConfig)
class NoamSchedule(FairseqLRScheduler):
    """Linear warm-up for warmup_updates steps, then decay with the inverse square root of the step (§5.3).

    The rate is absolute: fairseq's --lr is not used (fairseq requires one; its value is ignored), and the
    start-up log says so. The rate depends on the update count alone, so resuming from a checkpoint
    continues the schedule exactly.
    """

    def __init__(self, cfg: NoamConfig, optimizer):
        super().__init__(cfg, optimizer)
        self.model_dim = cfg.model_dim or model_dim_from_config(cfg)
        if self.model_dim <= 0 or cfg.warmup_updates <= 0:
            raise VaswaniConfigError(
                f"noam needs a positive --model-dim and --warmup-updates, got {self.model_dim} and {cfg.warmup_updates}"
            )
        peak = noam_learning_rate(cfg.warmup_updates, self.model_dim, cfg.warmup_updates, cfg.factor)
        logger.info(
            f"noam (§5.3, eq. 3): lr = {cfg.factor} * {self.model_dim}^-0.5 * min(step^-0.5, step * "
            f"{cfg.warmup_updates}^-1.5), peak {peak:.6g} at step {cfg.warmup_updates}; "
            f"--lr {cfg.lr[0]} is not used"
        )
        self.step_update(0)

    def step_update(self, num_updates: int) -> float:
        """Set the rate for the next update; after num_updates updates that is step_num = num_updates + 1."""
        lr = noam_learning_rate(num_updates + 1, self.model_dim, self.cfg.warmup_updates, self.cfg.factor)
        self.optimizer.set_lr(lr)
        return lr
