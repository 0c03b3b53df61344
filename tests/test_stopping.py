"""vaswani_plugin/tools/stopping.py: a training that diverges ends in one line naming the update and the last intact
checkpoint, and leaves the marker the recipes' engine records (tests/test_stages.py: the re-run that refuses;
tests/test_recipes.py: a diverging recipe)."""

import shutil
import subprocess
import sys

import pytest

from vaswani_plugin.cli import install_error_hook
from vaswani_plugin.tools import progress_meter, stage_records, stopping


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
    progress_meter.loaded(6)
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


FULL_DISK_SAVE = """
import resource, sys
from pathlib import Path
import torch
import vaswani_plugin
from fairseq import checkpoint_utils
from vaswani_plugin.tools import progress_meter

save_dir = Path(sys.argv[1])
progress_meter.configure(progress_meter.Settings(save_dir=str(save_dir)))
checkpoint_utils.time.sleep = lambda seconds: None  # fairseq tries three times, 2.5 s apart
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
checkpoint_utils.torch_persistent_save({"weights": torch.zeros(100_000)}, str(save_dir / "checkpoint_1_4.pt"))
"""


def test_a_save_that_finds_no_room_is_one_line_and_leaves_the_earlier_checkpoints(tmp_path):
    """fairseq's own checkpoint write under a file-size limit (as a full disk fails it): one line naming the folder
    and the free space, no traceback (fairseq logs one before raising), the earlier checkpoint untouched and the
    cut-off temporary removed."""
    earlier = tmp_path / "checkpoint_1_2.pt"
    earlier.write_bytes(b"an earlier checkpoint")
    result = subprocess.run(
        [sys.executable, "-c", FULL_DISK_SAVE, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(f"vaswani_plugin: error: writing in {tmp_path} failed: File too large (")
    )
    assert earlier.read_bytes() == b"an earlier checkpoint" and sorted(tmp_path.iterdir()) == [earlier]
