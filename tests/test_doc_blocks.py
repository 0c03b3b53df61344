"""Every fenced block of README.md and docs/*.md is run by a test or by CI, or says why not, or is printed output
(tests/doc_blocks.py says how a block is marked)."""

import re

from doc_blocks import DOCUMENTS, REPO, blocks

# What a ```text block must not start a line with: a command, which would then escape every check.
COMMAND = re.compile(
    r"^\s*(\$ |python3? |bash |sh |fairseq-\S+ |pip |echo |export |torchrun |srun |sbatch |"
    r"[A-Z][A-Z0-9_]*=\S* )"
)
TEST_SOURCES = sorted((REPO / "tests").glob("*.py"))


def unaccounted(document):
    """The blocks of `document` that are neither run (test: or ci: marker) nor marked not run nor output."""
    missing = []
    for block in blocks(document):
        if block.language == "text":
            if any(COMMAND.match(line) for line in block.text.splitlines()):
                missing.append(f"{block}: a command in a text block")
        elif block.language not in ("sh", "python"):
            missing.append(f"{block}: a block is sh, python (commands) or text (output)")
        elif not (block.marker or block.not_run):
            missing.append(
                f"{block}: neither run by a test (<!-- test:NAME -->) nor marked '*Not run by the tests: REASON.*'"
            )
    return missing


def test_every_block_is_run_or_says_why_not():
    missing = [problem for document in DOCUMENTS for problem in unaccounted(document)]
    assert not missing, "\n".join(missing)


def test_every_test_marker_is_read_by_a_test():
    sources = "".join(path.read_text(encoding="utf-8") for path in TEST_SOURCES if path.name != "test_doc_blocks.py")
    markers = [
        block.marker
        for document in DOCUMENTS
        for block in blocks(document)
        if block.marker and block.marker.startswith("test:")
    ]
    assert len(markers) == len(set(markers)), "a marker names one block"
    unread = [marker for marker in markers if f'"{marker}"' not in sources]
    assert not unread, f"markers no test reads: {unread}"


def test_ci_runs_the_readme_blocks_its_markers_name():
    ci = {
        block.marker
        for document in DOCUMENTS
        for block in blocks(document)
        if block.marker and block.marker.startswith("ci:")
    }
    assert ci == {"ci:setup", "ci:test"}
    run = (REPO / ".ci" / "run").read_text()
    assert "block_after setup" in run and "block_after test" in run


def test_the_check_sees_every_kind_of_block(tmp_path):
    found = [block for document in DOCUMENTS for block in blocks(document)]
    assert len(found) > 30 and {block.language for block in found} == {"sh", "python", "text"}
    assert any(block.not_run for block in found) and any(block.marker for block in found)
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- test:a -->\n```sh\nbash run.sh\n```\n\n*Not run by the tests: needs GPUs.*\n```sh\nbash "
        "gpu.sh\n```\n\n```sh\nbash forgotten.sh\n```\n\n```text\nBLEU = 1\n```\n\n```text\n$ ls\n```\n"
        "\n```\nno language\n```\n"
    )
    assert [re.match(r"page\.md:(\d+) ", problem)[1] for problem in unaccounted(page)] == ["11", "19", "23"]
