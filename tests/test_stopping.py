"""vaswani_plugin/training/stopping.py: a training that diverges ends in one line naming the update and the last intact
checkpoint, and leaves the marker the recipes' engine records (tests/test_stages.py: the re-run that refuses;
tests/test_recipes.py: a diverging recipe)."""

import shutil
import sys

import pytest

from vaswani_plugin import stage_records
from vaswani_plugin.cli import install_error_hook
from vaswani_plugin.training import progress_meter, stopping


def fairseqs_divergence():
    """What fairseq's trainer raises: FloatingPointError, and the NaN detector's re-run failing while handling it."""
    try:
        try:
            raise FloatingPointError("gradients are Nan/Inf")
        except FloatingPointError:
            raise StopIteration  # noqa: B904  (as fairseq's re-run fails: the divergence is its implicit context)
    except StopIteration as error:
        return error


@pytest.fixture
def watched(tmp_path):
    """A fairseq-train being watched (progress_meter) at update 7 (6 done), its checkpoints in tmp_path."""
    progress_meter.configure(progress_meter.Settings(save_dir=str(tmp_path)))
    progress_meter.training_step(6)
    yield tmp_path
    progress_meter.close()


def test_fairseqs_floating_point_error_is_found_through_the_nan_detectors_failure():
    assert isinstance(stopping.divergence(fairseqs_divergence()), FloatingPointError)
    assert stopping.divergence(ValueError("other")) is None


def test_a_divergence_is_one_line_and_a_marker_naming_the_update(watched, reversal_training, capsys):
    line = progress_meter.explain_stop(fairseqs_divergence())
    assert line == (
        f"training diverged at update 7 (gradients are Nan/Inf); the last intact checkpoint: none in {watched} (a "
        f"re-run starts from the beginning); {stopping.ADVICE}"
    )
    assert stage_records.read(watched / stopping.MARKER) == {"reason": "diverged", "update": 7, "line": line}
    save_dir, _ = reversal_training
    shutil.copy(save_dir / "checkpoint_last.pt", watched / "checkpoint_last.pt")
    assert f"the last intact checkpoint: {watched / 'checkpoint_last.pt'} (update 6); " in (
        progress_meter.explain_stop(fairseqs_divergence())
    )


def test_fairseqs_commands_print_the_line_instead_of_the_tracebacks(watched, monkeypatch, capsys):
    monkeypatch.setattr("sys.excepthook", lambda *exc: print("traceback"))
    install_error_hook()
    error = fairseqs_divergence()
    sys.excepthook(type(error), error, error.__traceback__)
    line = stage_records.read(watched / stopping.MARKER)["line"]
    assert capsys.readouterr().err.splitlines() == [f"vaswani_plugin: error: {line}"]
    sys.excepthook(ValueError, ValueError("x"), None)
    assert capsys.readouterr().out == "traceback\n"
