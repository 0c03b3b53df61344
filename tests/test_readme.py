"""The README lists every registered name and every command-line option of the plugin."""

import dataclasses
from pathlib import Path

import pytest

from vaswani_plugin.criterions.vaswani_label_smoothed_cross_entropy import VaswaniLabelSmoothedCrossEntropyConfig
from vaswani_plugin.lr_scheduler.noam import NoamConfig
from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerConfig

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


@pytest.mark.parametrize("config", [VaswaniTransformerConfig, NoamConfig, VaswaniLabelSmoothedCrossEntropyConfig])
def test_every_option_is_documented(config):
    for option in dataclasses.fields(config):
        if option.metadata.get("help"):  # fields without help are not command-line options
            flag = "--" + option.name.replace("_", "-")
            assert f"`{flag}`" in README or f"`{flag}," in README or f" {flag}`" in README, flag


def test_every_registered_name_is_documented():
    for name in ("vaswani_transformer", "vaswani_transformer_big", "vaswani_transformer_big_en_fr",
                 "vaswani_transformer_parsing", "noam", "vaswani_label_smoothed_cross_entropy"):
        assert f"| `{name}` |" in README
