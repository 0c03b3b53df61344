"""§5.3, eq. 3: lrate = d_model^-0.5 · min(step_num^-0.5, step_num · warmup_steps^-1.5)."""

import math

import pytest
import torch
from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig
from omegaconf import OmegaConf

from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.lr_scheduler.noam import NoamConfig, NoamSchedule


def eq3(step, d_model=512, warmup=4000):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def adam():
    config = OmegaConf.structured(FairseqAdamConfig(lr=[0.25], tpu=False))
    return FairseqAdam(config, [torch.nn.Parameter(torch.zeros(1))])


def make_schedule(**noam_options):
    """A noam schedule inside a root config, as fairseq-train builds it (d_model from the model section)."""
    root = OmegaConf.create(
        {
            "model": {"encoder_embed_dim": 512},
            "optimization": {"lr": [0.25]},
            "lr_scheduler": OmegaConf.structured(NoamConfig(**noam_options)),
        }
    )
    optimizer = adam()
    return NoamSchedule(root.lr_scheduler, optimizer), optimizer


def test_rate_of_each_update_follows_eq3():
    schedule, optimizer = make_schedule()
    # fairseq calls step_update(n) after n updates; the rate then set is the one update n + 1 uses.
    assert optimizer.get_lr() == pytest.approx(eq3(1), rel=1e-12)
    for step in (1, 100, 4000, 4001, 100000):
        schedule.step_update(step - 1)
        assert optimizer.get_lr() == pytest.approx(eq3(step), rel=1e-12), step
    # Hand-computed anchors: the peak at step 4000 and the first step.
    schedule.step_update(3999)
    assert optimizer.get_lr() == pytest.approx(1 / math.sqrt(512 * 4000), rel=1e-12)
    assert eq3(1) == pytest.approx(1.7469e-07, rel=1e-4)


def test_model_dim_warmup_and_factor_options():
    schedule, optimizer = make_schedule(model_dim=1024, warmup_updates=100, factor=2.0)
    schedule.step_update(49)
    assert optimizer.get_lr() == pytest.approx(2.0 * eq3(50, 1024, 100), rel=1e-12)


def test_resuming_continues_the_schedule():
    schedule, _ = make_schedule()
    for n in range(5):
        schedule.step_update(n)
    state = schedule.state_dict()
    resumed, optimizer = make_schedule()
    resumed.load_state_dict(state)
    # What fairseq's Trainer does after loading a checkpoint written after 12345 updates.
    resumed.step_update(12345)
    assert optimizer.get_lr() == pytest.approx(eq3(12346), rel=1e-12)


def test_missing_model_dim_is_a_clear_error():
    optimizer = adam()
    root = OmegaConf.create(
        {"model": {}, "optimization": {"lr": [0.25]}, "lr_scheduler": OmegaConf.structured(NoamConfig())}
    )
    with pytest.raises(VaswaniConfigError, match="--model-dim"):
        NoamSchedule(root.lr_scheduler, optimizer)
