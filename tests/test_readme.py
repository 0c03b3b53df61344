"""The README lists every registered name and every command-line option of the plugin."""

import dataclasses
from pathlib import Path

import pytest

from fairseq.tasks.translation import TranslationConfig

from vaswani_plugin.criterions.vaswani_label_smoothed_cross_entropy import VaswaniLabelSmoothedCrossEntropyConfig
from vaswani_plugin.lr_scheduler.noam import NoamConfig
from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerConfig
from vaswani_plugin.tasks.vaswani_translation import VaswaniTranslationConfig

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def own_fields(config):
    """The config's command-line options (fields with help), less those inherited from fairseq."""
    inherited = {f.name for f in dataclasses.fields(TranslationConfig)} if issubclass(config, TranslationConfig) \
        else set()
    return [f for f in dataclasses.fields(config) if f.metadata.get("help") and f.name not in inherited]


@pytest.mark.parametrize("config", [VaswaniTransformerConfig, NoamConfig, VaswaniLabelSmoothedCrossEntropyConfig,
                                    VaswaniTranslationConfig])
def test_every_option_is_documented(config):
    assert own_fields(config)
    for option in own_fields(config):
        flag = "--" + option.name.replace("_", "-")
        assert f"`{flag}`" in README or f"`{flag}," in README or f" {flag}`" in README, flag


def test_every_registered_name_is_documented():
    for name in ("vaswani_transformer", "vaswani_transformer_big", "vaswani_transformer_big_en_fr",
                 "vaswani_transformer_parsing", "noam", "vaswani_label_smoothed_cross_entropy",
                 "vaswani_translation"):
        assert f"| `{name}` |" in README
