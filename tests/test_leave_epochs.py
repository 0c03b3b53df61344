"""tasks/leave_epochs.py: --leave-epochs N --leave-epochs-of SPLIT moves fairseq's time limit to the budget less N
epochs of the split at the pace measured from the ranks' summed clocks; its update limit, counted, the parsing
recipe's pre-training runs end to end (test_wsj_parsing.py: the split's updates per epoch against the fine-tuning's
own epochs); a finished one is not resumed (test_resume.py)."""

import re
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest
from cli_helpers import PAPER_TRAINING, TINY_MODEL, plugin_dir

from vaswani_plugin.errors import VaswaniConfigError
from vaswani_plugin.tasks.leave_epochs import MEASURED, OUTPUTS, SECONDS, SKIPPED, LeaveEpochs
from vaswani_plugin.training import progress_meter


def root(hours: float) -> SimpleNamespace:
    return SimpleNamespace(optimization=SimpleNamespace(stop_time_hours=hours, max_update=0))


def summed(*ranks: float) -> list:
    """One update's logging outputs as fairseq hands them to the task after its all-reduce: one dict of sums."""
    return [{"loss": 1.0, SECONDS: sum(ranks), OUTPUTS: len(ranks)}]


def test_the_limit_is_the_budget_less_the_epochs_at_the_pace_the_ranks_measured_together():
    """Two ranks whose clocks started 2 s apart and run 0.5 s an update: after SKIPPED + MEASURED updates the limit
    is 1 h less 10 epochs x 120 updates x 0.5 s; before, the budget; a validation's outputs move nothing; the ETA's
    target follows the limit."""
    config = root(1.0)
    progress_meter.configure(progress_meter.Settings(no_save=True, stop_time_hours=1.0))
    progress_meter._run.start()
    rule = LeaveEpochs(10, "train_treebank", config)
    rule.epoch_updates = 120
    first = 7  # a resumed run's first update
    for update in range(first, first + SKIPPED + MEASURED):
        rule.reduce(summed(0.5 * (update - first) + 2, 0.5 * (update - first)), update)
        assert config.optimization.stop_time_hours == 1.0, update
    update = first + SKIPPED + MEASURED
    rule.reduce(summed(0.5 * (update - first) + 2, 0.5 * (update - first)), update)
    expected = 1.0 - 10 * 120 * 0.5 / 3600
    assert config.optimization.stop_time_hours == pytest.approx(expected, abs=1e-12)
    assert progress_meter._run.progress.target.stop_time_hours == config.optimization.stop_time_hours
    # The pace measured again: slower updates (1 s each) leave more time.
    rule.reduce(summed(0.5 * (update - first) + 2 + 60, 0.5 * (update - first) + 60), update + 60)
    slower = (0.5 * MEASURED + 60) / (MEASURED + 60)
    assert config.optimization.stop_time_hours == pytest.approx(1.0 - 10 * 120 * slower / 3600, abs=1e-12)
    before = config.optimization.stop_time_hours
    rule.reduce([{"loss": 1.0}], update + 61)  # a validation
    assert config.optimization.stop_time_hours == before
    progress_meter.close()
    # A budget shorter than the epochs: the limit is past at once (fairseq stops after this update).
    config = root(0.01)
    rule = LeaveEpochs(10, "train_treebank", config)
    rule.epoch_updates = 120
    for update in range(SKIPPED + MEASURED + 1):
        rule.reduce(summed(0.5 * update), update)
    assert 0 < config.optimization.stop_time_hours < 1e-9


def test_a_rank_puts_its_seconds_in_the_step_and_the_rule_is_off_outside_training():
    rule = LeaveEpochs(10, "train_treebank", root(1.0))
    first, second = {}, {}
    rule.output(first)
    rule.output(second)
    assert first[SECONDS] == 0 and first[OUTPUTS] == second[OUTPUTS] == 1 and second[SECONDS] >= 0
    for off in (LeaveEpochs(0, "", root(0.0)), LeaveEpochs(10, "train_treebank", None)):
        step = {}
        off.output(step)
        off.count(None, None)
        off.reduce(summed(1.0), 100)
        assert step == {} and not off.enabled


@pytest.mark.parametrize(
    "epochs,split,hours,message",
    [
        (-1, "train_treebank", 1.0, "--leave-epochs -1: give 0 (off) or more"),
        (10, "", 1.0, "--leave-epochs 10 needs --leave-epochs-of, the split it leaves time for"),
        (10, "train_treebank", 0.0, "--leave-epochs 10 leaves part of --max-update or --stop-time-hours: set one"),
    ],
)
def test_settings_the_rule_cannot_follow_are_one_line_errors(epochs, split, hours, message):
    with pytest.raises(VaswaniConfigError) as error:
        LeaveEpochs(epochs, split, root(hours))
    assert str(error.value) == message


def test_two_ranks_over_gloo_stop_after_the_same_update_at_the_moved_limit(reversal_data, tmp_path):
    """Two fairseq-train processes (gloo, as tests/test_data_parallel.py's) with a 6-minute budget and a million
    epochs of the valid split to leave: the limit is past when it first moves (after update SKIPPED + MEASURED + 1,
    on any machine's pace), rank 0's log says the moved limit, below the budget, stopped training after that update,
    and both exit (a rank stopping alone would leave the other waiting in its next all-reduce until the timeout);
    --max-epoch is the backstop of a rule that never moved the limit (a --max-update would move too)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    budget, backstop = 0.1, 4 * (SKIPPED + MEASURED)
    command = [
        sys.executable, "-m", "fairseq_cli.train", str(reversal_data / "joined"), "--user-dir", plugin_dir(),
        "--task", "vaswani_translation", "--arch", "vaswani_transformer", *TINY_MODEL, *PAPER_TRAINING,
        "--max-tokens", "300", "--stop-time-hours", str(budget), "--max-epoch", str(backstop),
        "--leave-epochs", "1000000", "--leave-epochs-of", "valid",
        "--disable-validation", "--no-save", "--log-format", "simple", "--distributed-world-size", "2",
        "--distributed-init-method", f"tcp://127.0.0.1:{port}", "--distributed-no-spawn", "--device-id", "0",
        "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp",
    ]  # fmt: skip
    ranks = [
        subprocess.Popen([*command, "--distributed-rank", str(rank)], cwd=tmp_path, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for rank in (0, 1)
    ]  # fmt: skip
    try:
        logs = [rank.communicate(timeout=300)[0] for rank in ranks]
    except subprocess.TimeoutExpired:
        pytest.fail("a rank was still training after 300 s: the ranks did not stop after the same update")
    finally:
        for rank in ranks:
            rank.kill()
    assert [rank.returncode for rank in ranks] == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    said = "--leave-epochs 1e+06" in logs[0]  # the estimate's line; the stop and the updates below are the behaviour
    stop = re.search(r"cumulative_training_time: (\S+) > stop_time_hours: (\S+) hour", logs[0])
    assert said and stop, logs[0][-3000:]
    assert float(stop[2]) < budget
    # The first update is the run's 1st: the limit first moves after update 1 + SKIPPED + MEASURED, and is past.
    updates = re.findall(r"\bnum_updates (\d+)", logs[0])
    assert updates and int(updates[-1]) == 1 + SKIPPED + MEASURED, logs[0][-3000:]
