"""vaswani_plugin/errors.py: one family of user errors and one reporter for the plugin's commands and prepare/'s,
which loads it without importing fairseq; the same one-line messages and exit statuses from both."""

import argparse
import ast
import builtins
import re
import subprocess
import sys

import pytest
from cli_helpers import REPO

from prepare import PrepareError
from prepare._common import run_cli
from prepare.wsj_parsing import write_split
from vaswani_plugin.cli import run_command
from vaswani_plugin.errors import VaswaniConfigError

RESUME_HINT = "interrupted; run the same command again to continue"
BUILTIN_EXCEPTIONS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
}


def exception_classes():
    """name -> the names of its bases, of every exception class that vaswani_plugin/ and prepare/ define."""
    classes = {}
    for path in [*(REPO / "vaswani_plugin").rglob("*.py"), *(REPO / "prepare").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = {
                    base.id if isinstance(base, ast.Name) else base.attr
                    for base in node.bases
                    if isinstance(base, (ast.Name, ast.Attribute))
                }
    family = {
        name
        for name, bases in classes.items()
        if bases & BUILTIN_EXCEPTIONS or any(base.endswith(("Error", "Exception")) for base in bases)
    }
    while True:  # and those deriving from them
        grown = family | {name for name, bases in classes.items() if bases & family}
        if grown == family:
            return {name: classes[name] for name in family}
        family = grown


def test_one_root_for_the_plugin_and_prepare():
    classes = exception_classes()
    assert {"VaswaniConfigError", "MissingExtra", "UnreadableCheckpoint"} <= set(classes)
    roots = {name for name, bases in classes.items() if not bases & set(classes)}
    assert roots == {"VaswaniConfigError"}
    assert PrepareError is VaswaniConfigError


# prepare/ as its commands import it, then the package's commands and its registration in the same process.
SAME_CLASSES = """
import sys
import prepare.clean
from prepare import PrepareError
print(sorted(name for name in ("fairseq", "torch", "vaswani_plugin") if name in sys.modules))
import vaswani_plugin
from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.checkpoints.storage import UnreadableCheckpoint
vaswani_plugin.register()
print(PrepareError is VaswaniConfigError is vaswani_plugin.VaswaniConfigError,
      issubclass(UnreadableCheckpoint, PrepareError))
print("sacremoses" in sys.modules)  # the package imports it where it tokenises, not where it registers
"""


def test_prepare_imports_the_family_without_fairseq_and_the_package_has_the_same_classes():
    done = subprocess.run([sys.executable, "-c", SAME_CLASSES], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["['vaswani_plugin']", "True True", "False"]
    # The package's import of fairseq leaves out fairseq's import-time line about TensorBoard (it trains nothing).
    assert "Please install tensorboardX" not in done.stderr


def exit_of(call, capsys):
    """(exit status, stderr) of call(), as the interpreter ends a process on the SystemExit it raises: a string
    code is printed on stderr, exit status 1."""
    try:
        call()
    except SystemExit as ended:
        code, printed = ended.code, capsys.readouterr().err
    except KeyboardInterrupt:  # through to pytest, it would end the whole run
        pytest.fail("KeyboardInterrupt went through, not reported")
    else:
        pytest.fail("no SystemExit")
    return (1, printed + code + "\n") if isinstance(code, str) else (code, printed)


def raising(error):
    def command(*_):
        raise error

    return command


RAISED = {  # what a command raises -> exit status, stderr ({prog}: the command's; {interrupted}: its words)
    "user error": (
        VaswaniConfigError("--beam 0 must be at least 1"),
        1,
        "{prog}: error: --beam 0 must be at least 1\n",
    ),
    "missing file": (
        FileNotFoundError(2, "No such file or directory", "/no/such/file"),
        1,
        "{prog}: error: No such file or directory: /no/such/file\n",
    ),
    "its own words": (FileNotFoundError("nothing at /no/such/file"), 1, "{prog}: error: nothing at /no/such/file\n"),
    "interrupted": (KeyboardInterrupt(), 130, "{prog}: {interrupted}\n"),
}


@pytest.mark.parametrize("case", sorted(RAISED))
def test_a_plugin_command_and_a_prepare_command_end_alike(case, capsys):
    error, status, stderr = RAISED[case]
    parser = argparse.ArgumentParser(prog="vaswani_plugin.some.command")
    plugin = exit_of(lambda: run_command(parser, raising(error), []), capsys)
    assert plugin == (status, stderr.format(prog="vaswani_plugin.some.command", interrupted="interrupted"))
    assert exit_of(lambda: run_cli(raising(error), []), capsys) == (
        status,
        stderr.format(prog="prepare", interrupted=RESUME_HINT),
    )


def test_a_bug_keeps_its_traceback():
    with pytest.raises(ZeroDivisionError):
        run_cli(lambda argv: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        run_command(argparse.ArgumentParser(prog="p"), lambda args: 1 / 0, [])


def prepare_clean(*arguments, flags=()):
    return subprocess.run(
        [sys.executable, *flags, "-m", "prepare.clean", *map(str, arguments)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_prepare_command_reports_a_users_mistake_in_one_line_without_fairseq_or_torch(tmp_path):
    missing = tmp_path / "train.en"
    done = prepare_clean(
        "--src",
        missing,
        "--tgt",
        missing,
        "--out-src",
        tmp_path / "o.en",
        "--out-tgt",
        tmp_path / "o.de",
        flags=["-X", "importtime"],
    )
    timings = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in timings}
    # The package's errors.py, the family: its import has no fairseq.
    assert {"prepare", "vaswani_plugin"} <= imported and not imported & {"fairseq", "torch"}, sorted(imported)
    assert (done.returncode, [line for line in done.stderr.splitlines() if line not in timings]) == (
        1,
        [f"prepare: error: {missing} does not exist"],
    )


def test_a_prepare_command_reports_an_os_error_in_one_line(tmp_path):
    (tmp_path / "train.en").write_text("a b\n")
    (tmp_path / "file").write_text("")
    done = prepare_clean(
        "--src",
        tmp_path / "train.en",
        "--tgt",
        tmp_path / "train.en",
        "--out-src",
        tmp_path / "file" / "o.en",
        "--out-tgt",
        tmp_path / "o.de",
    )
    assert (done.returncode, done.stderr) == (1, f"prepare: error: File exists: {tmp_path / 'file'}\n")


STEP = """
from prepare._common import run_cli
def main(argv):
    raise {error}
run_cli(main)
"""


@pytest.mark.parametrize(
    "error, status, stderr",
    [
        ("KeyboardInterrupt", 130, f"prepare: {RESUME_HINT}\n"),
        ("BrokenPipeError(32, 'Broken pipe')", 1, ""),  # `python -m prepare.extract ... | head`: nothing to say
    ],
)
def test_a_prepare_steps_exit_status_as_a_shell_sees_it(error, status, stderr):
    done = subprocess.run(
        [sys.executable, "-c", STEP.format(error=error)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert (done.returncode, done.stderr) == (status, stderr)


def test_a_plugin_command_reports_a_users_mistake_in_one_line(tmp_path):
    (tmp_path / "gold").write_text("(S (NN a))\n")
    (tmp_path / "test").write_text("(S (NN a))\n(S (NN b))\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vaswani_plugin.scoring.evalb",
            "--gold",
            tmp_path / "gold",
            "--test",
            tmp_path / "test",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    errors = [line for line in done.stderr.splitlines() if not line.startswith("INFO:")]  # fairseq's, on import
    assert (done.returncode, errors) == (1, ["vaswani_plugin.scoring.evalb: error: 1 gold trees but 2 test trees"])


def test_wsj_parsing_passes_the_plugins_tree_error_on_naming_the_file(tmp_path):
    """read_trees (vaswani_plugin.scoring.trees) raises the family's own class: prepare/ adds the file's name, no
    conversion from one framework to another."""
    (tmp_path / "bad.mrg").write_text("( (S (NP (NN x))\n")
    with pytest.raises(PrepareError) as raised:
        write_split([tmp_path / "bad.mrg"], tmp_path, "train", max_positions=1024)
    assert type(raised.value) is VaswaniConfigError
    assert re.fullmatch(
        rf"{re.escape(str(tmp_path / 'bad.mrg'))}: line 1 \(tree 1\): the tree starting here is "
        r"never closed \(unbalanced brackets\)",
        str(raised.value),
    )
