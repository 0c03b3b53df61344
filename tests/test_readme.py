"""The documentation: docs/reference.md lists every registered name and every command-line option of the plugin;
README.md stays short; every relative link in README.md and docs/*.md points to an existing file."""

import dataclasses
import re
from pathlib import Path

import pytest
from fairseq.tasks.translation import TranslationConfig

from vaswani_plugin.criterions.vaswani_label_smoothed_cross_entropy import VaswaniLabelSmoothedCrossEntropyConfig
from vaswani_plugin.lr_scheduler.noam import NoamConfig
from vaswani_plugin.models.vaswani_transformer import VaswaniTransformerConfig
from vaswani_plugin.optim.vaswani_adam import VaswaniAdamConfig
from vaswani_plugin.tasks.vaswani_translation import VaswaniTranslationConfig

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
REFERENCE = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
# A markdown link or image: ](target) or ](target "title").
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def own_fields(config):
    """The config's command-line options (fields with help), less those inherited from fairseq."""
    inherited = (
        {f.name for f in dataclasses.fields(TranslationConfig)} if issubclass(config, TranslationConfig) else set()
    )
    return [f for f in dataclasses.fields(config) if f.metadata.get("help") and f.name not in inherited]


@pytest.mark.parametrize(
    "config",
    [
        VaswaniTransformerConfig,
        NoamConfig,
        VaswaniLabelSmoothedCrossEntropyConfig,
        VaswaniTranslationConfig,
        VaswaniAdamConfig,
    ],
)
def test_every_option_is_documented(config):
    assert own_fields(config)
    for option in own_fields(config):
        flag = "--" + option.name.replace("_", "-")
        assert f"`{flag}`" in REFERENCE or f"`{flag}," in REFERENCE or f" {flag}`" in REFERENCE, flag


def test_every_registered_name_is_documented():
    for name in (
        "vaswani_transformer",
        "vaswani_transformer_big",
        "vaswani_transformer_big_en_fr",
        "vaswani_transformer_parsing",
        "noam",
        "vaswani_adam",
        "vaswani_label_smoothed_cross_entropy",
        "vaswani_translation",
    ):
        assert f"| `{name}` |" in REFERENCE, name


def relative_links(path: Path):
    """The link targets of a markdown file that name a file of this repository: not web addresses, not anchors
    within the same page; a target's own #anchor is dropped. Fenced code blocks are skipped."""
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue
        yield target.split("#", 1)[0]


DOCUMENTS = [README, *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("document", DOCUMENTS, ids=[str(p.relative_to(REPO)) for p in DOCUMENTS])
def test_relative_links_point_to_files(document):
    broken = [target for target in relative_links(document) if not (document.parent / target).exists()]
    assert not broken, f"{document.relative_to(REPO)} links to missing files: {broken}"


def test_the_link_check_sees_links():
    links = list(relative_links(README))
    assert "docs/reference.md" in links and "docs/results.md" in links


def module_table_rows():
    """(modules, test files) of docs/design.md's module -> tests table, as paths below vaswani_plugin/ and tests/."""
    design = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    table = design.split("| module | tests |", 1)[1].split("\n\n", 1)[0]
    for row in table.splitlines()[2:]:
        modules, tests = row.strip("|").split("|")
        yield re.findall(r"`([^`]+\.py)`", modules), re.findall(r"`(test_[^`]+\.py)`", tests)


def test_the_module_to_tests_table_is_complete():
    rows = list(module_table_rows())
    listed = {module for modules, _ in rows for module in modules}
    package = REPO / "vaswani_plugin"
    modules = {
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if path.name != "__init__.py" or path.parent == package
    }
    assert modules - listed == set(), "modules without a row in docs/design.md's module -> tests table"
    assert listed - modules == set(), "rows for modules that do not exist"
    missing = {test for _, tests in rows for test in tests if not (REPO / "tests" / test).is_file()}
    assert not missing and all(tests for _, tests in rows), f"test files that do not exist: {missing}"
