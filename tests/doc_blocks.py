"""The fenced blocks of README.md and docs/*.md, and how each is accounted for.

A block is one of:
- a command block (```sh or ```python) with `<!-- test:NAME -->` on the line above: a test reads it with
  block(path, "test:NAME") and runs it (tests/test_doc_blocks.py checks that some test names it);
- a command block with `<!-- ci:NAME -->` above: .ci/run runs it (the README's set-up and test commands);
- a command block with a visible line above it, `*Not run by the tests: REASON.*` (say, it needs GPUs);
- a ```text block: what a command prints, or a layout; no command.
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*```(\S*)\s*$")  # list items indent theirs
MARKER = re.compile(r"^\s*<!-- ((?:test|ci):[a-z0-9_-]+) -->$")
NOT_RUN = re.compile(r"^\s*\*Not run by the tests: (.+)\.\*$")


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, from 1
    language: str  # sh, python, text, or "" (a fence without one)
    text: str
    marker: Optional[str]  # "test:NAME" or "ci:NAME"
    not_run: Optional[str]  # the visible reason

    def __str__(self):
        name = self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path.name
        return f"{name}:{self.line} ({self.language or 'no language'})"


def blocks(path: Path):
    """Every fenced block of a markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].lstrip().startswith("```"))
            above = lines[i - 1] if i else ""
            marker, not_run = MARKER.match(above), NOT_RUN.match(above)
            indent = len(lines[i]) - len(lines[i].lstrip())
            text = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
            yield Block(path, i + 1, opening[1], text, marker and marker[1], not_run and not_run[1])
            i = end
        i += 1


def block(path, marker: str) -> str:
    """The text of the one block of `path` (a Path, or a name below the repository) under `<!-- marker -->`."""
    path = REPO / path if not isinstance(path, Path) else path
    (found,) = [b for b in blocks(path) if b.marker == marker]
    return found.text


def substituted(text: str, replacements) -> str:
    """`text` with each old -> new, every old present (a block that changed fails here, not later)."""
    for old, new in replacements.items():
        assert old in text, f"the block no longer has {old!r}:\n{text}"
        text = text.replace(old, new)
    return text


def joined(text: str) -> str:
    """A shell block with its continued lines (a backslash at the end) joined."""
    return re.sub(r"\\\n\s*", "", text)


def commands(text: str):
    """The commands of a shell block: continued lines joined, one command a line, comments and blanks left out."""
    lines = [re.sub(r"\s+# .*$", "", line) for line in joined(text).splitlines()]  # a comment after a command
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def run_shell(command: str, cwd, timeout=300, **env):
    """A block's command in bash, as a user's shell runs it: this environment's `python` and tools first on PATH,
    safe checkpoint loading left on; `env` added."""
    import os
    import subprocess
    import sys

    environment = {k: v for k, v in os.environ.items() if k != "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"}
    environment.update(env, PATH=f"{Path(sys.executable).parent}:{environment['PATH']}")
    return subprocess.run(
        ["bash", "-c", "set -eo pipefail\n" + command],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_here(command: str, cwd, plugin: Optional[str] = None):
    """A block's `python -m MODULE ARGS` or `fairseq-TOOL ARGS` (with `echo "TEXT" |` before, `< FILE` or `> FILE`
    after) run in this process, as its console script or `-m` would run it, in `cwd`: without the 4-5 s of a new
    process's fairseq import. `"$(python -m vaswani_plugin)"` becomes `plugin`. Returns (exit status, stdout,
    stderr: what they printed); what `> FILE` names is written too."""
    import shlex

    from cli_helpers import run_in_process

    command = joined(command)
    if plugin is not None:
        command = command.replace('"$(python -m vaswani_plugin)"', shlex.quote(plugin))
    assert "$(" not in command and "`" not in command, command
    words = shlex.split(command)
    stdin = None
    if words[0] == "echo":
        assert words[2] == "|", command
        stdin, words = words[1] + "\n", words[3:]
    redirect = {}
    while len(words) > 2 and words[-2] in ("<", ">"):
        redirect[words[-2]], words = words[-1], words[:-2]
    assert not {"|", "<", ">", "&&", ";"} & set(words), f"more shell than run_here reads: {command}"
    if "<" in redirect:
        stdin = (Path(cwd) / redirect["<"]).read_text(encoding="utf-8")
    status, out, err = run_in_process(words, cwd, stdin)
    if ">" in redirect:
        (Path(cwd) / redirect[">"]).write_text(out, encoding="utf-8")
    return status, out, err
