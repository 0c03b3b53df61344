"""Optimizer `vaswani_adam`: §5.3's Adam (β1 = 0.9, β2 = 0.98, ε = 1e-9) stepping every parameter in a few calls.

fairseq's `adam` without NVIDIA's apex loops over the parameter tensors in Python (about ten kernels each: 193
tensors in the base model) and so does its gradient-norm clipping; this is torch's AdamW (fairseq's weight decay
is decoupled too) with its fused kernel, or its multi-tensor (foreach) one, and the norm taken with foreach calls.
ε is added to √v before the bias correction, as in fairseq's adam and TensorFlow's (tensor2tensor's, the
paper's code): θ -= lr·√(1-β2^t)/(1-β1^t) · m / (√v + ε). torch adds it after (√v/√(1-β2^t) + ε), so the ε
it is given is ε/√(1-β2^t), set before each step.
"""

import logging
import math
from dataclasses import dataclass, field
from typing import Any, List

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import FairseqOptimizer, register_optimizer
from omegaconf import II, OmegaConf

from vaswani_plugin import paper
from vaswani_plugin.errors import VaswaniConfigError

logger = logging.getLogger(__name__)

IMPLEMENTATIONS = ("auto", "fused", "foreach")


@dataclass
class VaswaniAdamConfig(FairseqDataclass):
    adam_betas: Any = field(
        default=f"({paper.ADAM_BETAS[0]},{paper.ADAM_BETAS[1]})", metadata={"help": "Adam's (β1, β2), §5.3: (0.9,0.98)"}
    )
    adam_eps: float = field(default=paper.ADAM_EPS, metadata={"help": "Adam's ε, §5.3: 1e-9"})
    weight_decay: float = field(default=0.0, metadata={"help": "decoupled weight decay, as fairseq's adam (0)"})
    adam_implementation: str = field(
        default="auto",
        metadata={
            "help": "auto (fused where torch has it for the parameters, else foreach), fused "
            "or foreach: torch's kernels that step all parameters at once"
        },
    )
    lr: List[float] = II("optimization.lr")


def fused_supported(params: List[torch.Tensor]) -> bool:
    """Whether torch's fused AdamW takes these parameters: floating point, on a device it has the kernel for."""
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    devices = set(_get_fused_kernels_supported_devices())
    return all(p.is_floating_point() and p.device.type in devices for p in params)


def betas(value) -> tuple:
    """--adam-betas as given: "(0.9,0.98)" on a command line, a list or tuple from a config."""
    if isinstance(value, str):
        value = value.strip().strip("()[]").split(",")
    elif not isinstance(value, (list, tuple)):
        value = OmegaConf.to_container(value)
    try:
        beta1, beta2 = (float(beta) for beta in value)
    except (TypeError, ValueError):
        raise VaswaniConfigError(f"--adam-betas {value!r}: give two numbers, e.g. '(0.9,0.98)'") from None
    return beta1, beta2


@register_optimizer("vaswani_adam", dataclass=VaswaniAdamConfig)
class VaswaniAdam(FairseqOptimizer):
    """§5.3: Adam with torch's fused or foreach kernels; fairseq's `adam` computes the same update."""

    def __init__(self, cfg: VaswaniAdamConfig, params):
        super().__init__(cfg)
        if cfg.adam_implementation not in IMPLEMENTATIONS:
            raise VaswaniConfigError(
                f"--adam-implementation {cfg.adam_implementation}: choose one of {', '.join(IMPLEMENTATIONS)}"
            )
        params = list(params)
        tensors = [p for group in params for p in (group["params"] if isinstance(group, dict) else [group])]
        fused = cfg.adam_implementation == "fused" or (cfg.adam_implementation == "auto" and fused_supported(tensors))
        if fused and not fused_supported(tensors):
            raise VaswaniConfigError(
                "--adam-implementation fused: torch has no fused Adam for these parameters "
                f"({tensors[0].device.type}, {tensors[0].dtype}); use foreach"
            )
        self.implementation = "fused" if fused else "foreach"
        self._optimizer = torch.optim.AdamW(params, **self.optimizer_config, **{self.implementation: True})
        self.steps = 0  # steps taken, kept on the host (torch's count lives on the device with fused)
        self.beta2 = betas(cfg.adam_betas)[1]
        logger.info(f"vaswani_adam: torch's {self.implementation} AdamW over {len(tensors)} parameter tensors")

    @property
    def optimizer_config(self):
        lr = self.cfg.lr[0] if isinstance(self.cfg.lr, (list, tuple)) or OmegaConf.is_list(self.cfg.lr) else self.cfg.lr
        return {
            "lr": lr,
            "betas": betas(self.cfg.adam_betas),
            "eps": self.cfg.adam_eps,
            "weight_decay": self.cfg.weight_decay,
        }

    @property
    def supports_flat_params(self):
        return True  # fairseq's --fp16 steps one flat float32 copy: one tensor to torch's AdamW

    def step(self, closure=None, scale=1.0, groups=None):
        """fairseq's step, with ε placed as fairseq's adam places it (the module's docstring)."""
        self.steps += 1
        for group in self.optimizer.param_groups:
            group["eps"] = self.cfg.adam_eps / math.sqrt(1.0 - self.beta2**self.steps)
        super().step(closure, scale, groups)

    def load_state_dict(self, state_dict, optimizer_overrides=None):
        """fairseq's, then this run's implementation, whichever the checkpoint's run used (fused keeps its step
        counts on the parameters' device, foreach on the CPU)."""
        super().load_state_dict(state_dict, optimizer_overrides)
        fused = self.implementation == "fused"
        steps = [value["step"] for value in self.optimizer.state.values() if "step" in value]
        self.steps = int(max(steps)) if steps else 0  # read once, when a run resumes
        for group in self.optimizer.param_groups:
            group["fused"], group["foreach"] = fused, not fused
            for p in group["params"]:
                step = self.optimizer.state.get(p, {}).get("step")
                if torch.is_tensor(step):
                    self.optimizer.state[p]["step"] = step.to(p.device if fused else "cpu", torch.float32)

    def clip_grad_norm(self, max_norm, aggregate_norm_fn=None):
        """fairseq's clip_grad_norm_ (the total 2-norm in float32; scaled down to max_norm if above and
        max_norm > 0), in foreach calls instead of a norm per tensor. The gradients as they are: they require no
        gradient, so fairseq's .detach() of each (a new tensor object each, 90 us an update for 144) adds nothing."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return torch.tensor(0.0) if not self.params else self.params[0].new_tensor(0.0)
        norms = torch._foreach_norm(grads, 2, dtype=torch.float32)
        total_norm = torch.linalg.vector_norm(torch.stack(norms))
        if aggregate_norm_fn is not None:
            total_norm = aggregate_norm_fn(total_norm)
        if max_norm > 0:
            clip_coef = (float(max_norm) / (total_norm + 1e-6)).clamp_(max=1)
            torch._foreach_mul_(grads, clip_coef)
        return total_norm
