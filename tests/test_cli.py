"""Every `python -m vaswani_plugin.*` command ends a user's mistake in one line through cli.run_command."""

import ast
import importlib
from pathlib import Path

import pytest

import vaswani_plugin

PACKAGE = Path(vaswani_plugin.__file__).parent

# A missing input file for each command: its one-line error names the file.
MISSING_INPUT = {
    "checkpoints.average": lambda missing, tmp: ["--inputs", missing, "--output", tmp / "o.pt"],
    "checkpoints.convert_fairseq": lambda missing, tmp: ["--input", missing, "--output", tmp / "o.pt"],
    "scoring.bleu": lambda missing, tmp: ["--generate-output", missing, "--reference", missing, "--target-lang", "de"],
    "scoring.evalb": lambda missing, tmp: ["--gold", missing, "--test", missing],
    "scoring.parses": lambda missing, tmp: [
        "--generate-output",
        missing,
        "--words",
        missing,
        "--tags",
        missing,
        "--gold",
        missing,
    ],
    "tools.training_cost": lambda missing, tmp: ["--checkpoint", missing, "--gpus", "1"],
    "tools.training_curves": lambda missing, tmp: [missing, "--output-dir", tmp],
    "tools.run_report": lambda missing, tmp: [missing],
    "tools.gpu_batch": lambda missing, tmp: [
        missing,
        "--user-dir",
        PACKAGE,
        "--task",
        "vaswani_translation",
        "--arch",
        "vaswani_transformer",
    ],
    "tools.attention_pictures": lambda missing, tmp: [
        "--path",
        missing,
        "--data",
        tmp,
        "--source",
        "w1",
        "--output-dir",
        tmp,
    ],
    "serving.export_ctranslate2": lambda missing, tmp: [
        "--checkpoint",
        missing,
        "--data",
        tmp,
        "--output",
        tmp / "o.pt",
    ],
    "serving.export_huggingface": lambda missing, tmp: [
        "--checkpoint",
        missing,
        "--data",
        tmp,
        "--output",
        tmp / "o.pt",
        "--bpe-codes",
        missing,
    ],
    "serving.translate_ctranslate2": lambda missing, tmp: [
        "--model",
        missing,
        "--source-lang",
        "en",
        "--target-lang",
        "de",
        "--bpe-codes",
        missing,
    ],
}


def command_modules():
    """Dotted names (below vaswani_plugin) of the modules runnable with python -m, but the package's own."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "__main__.py" and 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"):
            names.append(".".join(path.relative_to(PACKAGE).with_suffix("").parts))
    return names


def test_the_list_of_commands_is_complete():
    # resume reads a folder that may lack checkpoints, precision the GPUs: no input file of theirs can be missing
    # (precision's one line without a GPU: test_bf16_autocast.py).
    assert sorted(command_modules()) == sorted([*MISSING_INPUT, "checkpoints.resume", "precision"])


@pytest.mark.parametrize("name", command_modules())
def test_each_command_reports_errors_through_run_command_only(name):
    tree = ast.parse((PACKAGE / Path(*name.split("."))).with_suffix(".py").read_text(encoding="utf-8"))
    calls = [node.func for node in ast.walk(tree) if isinstance(node, ast.Call)]
    called = {
        func.id if isinstance(func, ast.Name) else func.attr
        for func in calls
        if isinstance(func, (ast.Name, ast.Attribute))
    }
    assert "run_command" in called
    assert not called & {"exit", "error"}, "one-line errors go through vaswani_plugin.cli.run_command"


@pytest.mark.parametrize("name", sorted(MISSING_INPUT))
def test_a_missing_input_file_is_one_line_naming_it(name, tmp_path):
    main = importlib.import_module(f"vaswani_plugin.{name}").main
    missing = tmp_path / "no_such_file"
    with pytest.raises(SystemExit) as exit:
        main([str(argument) for argument in MISSING_INPUT[name](missing, tmp_path)])
    message = exit.value.code
    assert isinstance(message, str) and "\n" not in message, message
    assert message.startswith(f"vaswani_plugin.{name}: error: ") and str(missing) in message, message
    assert not (tmp_path / "o.pt").exists()
