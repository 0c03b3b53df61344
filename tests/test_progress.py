"""tools/progress.py: fairseq-train's log lines as records, the ETA against the target, a resumed run's pieces
stitched, and the refresh after checkpoints. The lines are fairseq 0.12's simple log format, as
tests/test_quickstart.py's real run also checks."""

import io
import json
import subprocess
import sys

import pytest
from cli_helpers import REPO

from vaswani_plugin.tools.progress import Progress, parse_line, read_records, stitched, training_target


def train_line(update, epoch=1, per_epoch=100, loss=5.0, wps=1000.0, ups=2.0):
    return (
        f"2026-11-27 02:40:24 | INFO | train_inner | epoch {epoch:03d}:     {update % per_epoch} / {per_epoch} "
        f"loss={loss}, nll_loss={loss - 0.5}, ppl=12.3, wps={wps}, ups={ups}, wpb=1459, bsz=117, "
        f"num_updates={update}, lr=0.000209631, gnorm=1.578, train_wall=0, wall=2"
    )


def valid_line(update, bleu=None):
    scores = f" | bleu {bleu} | tok_bleu {bleu + 1}" if bleu is not None else ""
    return (
        f"2026-11-27 02:54:34 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.646 | nll_loss 8.485"
        f" | dev_sentences 30 | ppl 358.2{scores} | wps 616.7 | wpb 741.7 | bsz 26.7 | num_updates {update}"
    )


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_log_lines_become_records():
    record = parse_line(train_line(42, epoch=3, per_epoch=227))
    assert (record["kind"], record["update"], record["epoch"], record["epoch_updates"]) == ("train", 42, 3, 227)
    assert (record["loss"], record["nll_loss"], record["lr"], record["gnorm"]) == (5.0, 4.5, 0.000209631, 1.578)
    valid = parse_line(valid_line(50, bleu=12.5))
    assert (valid["kind"], valid["update"], valid["bleu"], valid["tok_bleu"], valid["loss"]) == (
        "valid",
        50,
        12.5,
        13.5,
        8.646,
    )
    saved = parse_line(
        "2026-11-27 02:40:24 | INFO | fairseq.checkpoint_utils | Saved checkpoint /w/checkpoint_1_4.pt "
        "(epoch 1 @ 4 updates, score None) (writing took 0.02 seconds)"
    )
    assert saved == {"kind": "checkpoint", "path": "/w/checkpoint_1_4.pt", "epoch": 1, "update": 4}
    assert parse_line("2026-11-27 02:40:24 | INFO | fairseq_cli.train | begin training") is None


def test_eta_is_the_updates_left_at_the_measured_rate_or_the_budget_left(tmp_path):
    clock = Clock()
    progress = Progress(
        tmp_path / "p.jsonl", training_target(["--max-update", "1000", "--max-epoch", "30"]), clock=clock
    )
    progress.line(train_line(100))
    clock.now += 50  # 100 updates in 50 s: 2 a second
    (said,) = progress.line(train_line(200))
    assert said.startswith("[progress] update 200 of 1,000 (20.0 %) | 2.00 updates/s | 1,000 target tokens/s | ")
    assert "6 min 40 s left (updates)" in said  # 800 updates at 2 a second
    record = read_records(tmp_path / "p.jsonl")[-1]
    assert (record["target_update"], record["seconds_left"], record["rate"]) == (1000, 400.0, 2.0)

    # The epochs bind first: 3 epochs of 100 updates.
    progress = Progress(tmp_path / "q.jsonl", training_target(["--max-epoch", "3"]), clock=clock)
    progress.line(train_line(100))
    clock.now += 10
    (said,) = progress.line(train_line(150))
    assert " of 300 " in said and "0 min 30 s left (updates)" in said

    # A time budget of 0.1 h: 360 s, of which 60 s are gone, at 5 updates a second.
    budget = Progress(
        tmp_path / "r.jsonl", training_target(["--stop-time-hours", "0.1", "--max-update", "100000"]), clock=clock
    )
    clock.now += 30
    budget.line(train_line(150))
    clock.now += 30
    (said,) = budget.line(train_line(300))
    assert "5 min 00 s left (the time budget)" in said and "at about update 1,800" in said


def test_dev_scores_are_said_and_recorded(tmp_path):
    clock = Clock()
    progress = Progress(tmp_path / "p.jsonl", training_target([]), clock=clock)
    assert progress.line(valid_line(8)) == []  # a loss alone: no dev line
    progress.line('2026-11-27 02:54:30 | INFO | fairseq_cli.train | begin validation on "valid" subset')
    clock.now += 6.5
    (said,) = progress.line(valid_line(16, bleu=20.25))
    assert said == "[progress] dev at update 16 (30 sentences): sacreBLEU 20.25, tokenised BLEU 21.25, loss 8.646"
    valid = [r for r in read_records(tmp_path / "p.jsonl") if r["kind"] == "valid"]
    assert [r.get("bleu") for r in valid] == [None, 20.25]
    assert "validation_seconds" not in valid[0] and valid[1]["validation_seconds"] == 6.5


def test_a_resumed_run_is_stitched_and_its_budget_counts_every_piece(tmp_path):
    path, clock = tmp_path / "p.jsonl", Clock()
    first = Progress(path, training_target(["--stop-time-hours", "1"]), clock=clock)
    for update in (10, 20, 30):
        clock.now += 100
        first.line(train_line(update))
    first.line("... | Saved checkpoint /w/checkpoint_1_20.pt (epoch 1 @ 20 updates, score None) (writing took 0 s)")
    with open(path, "a") as file:
        file.write('{"kind": "train", "upd')  # killed while writing
    clock.now += 1000  # the time between the kill and the restart is not training
    second = Progress(path, training_target(["--stop-time-hours", "1"]), clock=clock)
    assert second.before == 300.0  # the first piece trained 300 s
    second.line("| INFO | fairseq.trainer | Loaded checkpoint /w/checkpoint_last.pt (epoch 1 @ 20 updates)")
    clock.now += 100
    (said,) = second.line(train_line(30))
    assert "53 min 20 s left (the time budget)" in said  # 3,600 s - 300 s (the first piece) - 100 s (this one)
    train = [r for r in stitched(read_records(path)) if r["kind"] == "train"]
    assert [r["update"] for r in train] == [10, 20, 30]  # update 30 of the first piece replaced
    assert [r["seconds"] for r in train] == [100.0, 200.0, 400.0]


def test_the_refresh_runs_after_checkpoints_at_most_once_an_interval(tmp_path):
    marks, clock = tmp_path / "marks", Clock()
    command = f"{sys.executable} -c \"open('{marks}', 'a').write('x')\""
    progress = Progress(
        tmp_path / "p.jsonl", training_target([]), on_checkpoint=command, refresh_interval=60, clock=clock
    )
    saved = "| Saved checkpoint /w/checkpoint_1_{0}.pt (epoch 1 @ {0} updates, score None)"
    progress.line(saved.format(2))  # 0 s after the start: waits for the interval
    assert progress.refresh is None and progress.refresh_pending
    clock.now += 60
    progress.line(saved.format(4))
    progress.refresh.wait()
    clock.now += 30
    progress.line(saved.format(8))  # 30 s after the first: waits
    assert progress.refresh is None and progress.refresh_pending
    clock.now += 30
    progress.line(train_line(9))  # the interval has passed: the pending refresh runs
    progress.finish()
    assert marks.read_text() == "xx"


def test_the_filter_passes_every_line_through(tmp_path):
    lines = [train_line(10), "anything else", valid_line(10, bleu=1.0)]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vaswani_plugin.tools.progress",
            "--records",
            tmp_path / "p.jsonl",
            "--",
            "--max-update",
            "20",
        ],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    out = result.stdout.splitlines()
    assert [line for line in out if not line.startswith("[progress] ")] == lines
    assert out[1].startswith("[progress] update 10 of 20 (50.0 %)") and out[4].startswith("[progress] dev at update 10")
    assert json.loads((tmp_path / "p.jsonl").read_text().splitlines()[0])["max_update"] == 20


@pytest.mark.parametrize(
    "argv, expected",
    [
        ([], (0, 0, 0.0)),
        (["--max-update", "5", "--max-update", "7"], (7, 0, 0.0)),
        (["--stop-time-hours", "0.5", "--max-epoch", "3"], (0, 3, 0.5)),
    ],
)
def test_the_target_is_read_from_fairseq_trains_arguments(argv, expected):
    target = training_target(argv + ["--arch", "x"])
    assert (target.max_update, target.max_epoch, target.stop_time_hours) == expected


def test_a_failing_estimate_never_stops_the_lines(tmp_path, monkeypatch, capsys):
    """The filter stands between fairseq-train and its log: a failure of its own is said once, and every line still
    passes (a broken pipe would end the training)."""
    from vaswani_plugin.tools import progress as module

    monkeypatch.setattr(module.Progress, "line", lambda self, line: 1 / 0)
    monkeypatch.setattr(sys, "stdin", io.StringIO("one\ntwo\n"))
    module.main(["--records", str(tmp_path / "p.jsonl")])
    assert capsys.readouterr().out.splitlines() == [
        "one",
        "[progress] no more estimates or records (ZeroDivisionError: division by zero); training goes on",
        "two",
    ]
