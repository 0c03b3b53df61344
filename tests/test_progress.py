"""training/progress.py and training/progress_meter.py: the ETA against the target, the dev line, a resumed run's
pieces stitched, the refresh after validations; the task as the one place that attaches the hooks (the meter, a
signal's stop), whatever the criterion; and what fairseq-train started by hand (the README's own pipeline, no pipe)
writes from its own process, against its own log lines: under `--task vaswani_translation` its progress, under
fairseq's `--task translation` none."""

import json
import math
import re
import shlex
import signal
import sys
from types import SimpleNamespace

import doc_blocks
import pytest
import torch
from cli_helpers import plugin_dir
from conftest import OWN_PIPELINE_COUNTS, OWN_PIPELINE_TINY, build_model, make_dictionary
from fairseq import metrics
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
from test_bf16_autocast import PlainOptimizer, tiny_batch

from vaswani_plugin import stage_records
from vaswani_plugin.criterions.vaswani_label_smoothed_cross_entropy import VaswaniLabelSmoothedCrossEntropy
from vaswani_plugin.progress_options import ProgressOptions
from vaswani_plugin.tasks.vaswani_translation import VaswaniTranslationConfig, VaswaniTranslationTask
from vaswani_plugin.training import preemption, progress_meter, stopping
from vaswani_plugin.training.progress import Progress, Target, read_records, stitched


def train_record(update, loss=5.0, wps=1000.0, ups=2.0):
    return dict(kind="train", update=update, loss=loss, nll_loss=loss - 0.5, wps=wps, ups=ups, num_updates=update)


def valid_record(update, bleu=None):
    scores = {"bleu": bleu, "tok_bleu": bleu + 1} if bleu is not None else {}
    return dict(kind="valid", update=update, loss=8.646, nll_loss=8.485, dev_sentences=30, **scores)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_eta_is_the_updates_left_at_the_measured_rate_or_the_budget_left(tmp_path):
    clock = Clock()
    progress = Progress(tmp_path / "p.jsonl", Target(max_update=1000, max_epoch=30), clock=clock)
    progress.add(train_record(100))
    clock.now += 50  # 100 updates in 50 s: 2 a second
    (said,) = progress.add(train_record(200))
    assert said.startswith("[progress] update 200 of 1,000 (20.0 %) | 2.00 updates/s | 1,000 target tokens/s | ")
    assert "| 6 min 40 s left (updates)" in said  # 800 updates at 2 a second
    record = read_records(tmp_path / "p.jsonl")[-1]
    assert (record["target_update"], record["seconds_left"], record["rate"]) == (1000, 400.0, 2.0)
    assert progress.done(200) == 20.0

    # The epochs bind first once the first epoch has ended: 3 epochs of 100 updates.
    progress = Progress(tmp_path / "q.jsonl", Target(max_epoch=3), clock=clock)
    assert math.isnan(progress.done(50))  # before the first epoch's end its length is unknown
    progress.add(dict(kind="epoch", update=100))
    progress.add(train_record(100))
    clock.now += 10
    (said,) = progress.add(train_record(150))
    assert " of 300 " in said and "| 0 min 30 s left (updates)" in said and progress.done(150) == 50.0
    # ... and a resumed piece reads the epoch's length from the records before it.
    assert Progress(tmp_path / "q.jsonl", Target(max_epoch=3), clock=clock).target_update() == 300

    # A time budget of 0.1 h: 360 s, of which 60 s are gone, at 5 updates a second.
    budget = Progress(tmp_path / "r.jsonl", Target(stop_time_hours=0.1, max_update=100000), clock=clock)
    clock.now += 30
    budget.add(train_record(150))
    clock.now += 30
    (said,) = budget.add(train_record(300))
    assert "| 5 min 00 s left (the time budget)" in said and "at about update 1,800" in said


def test_dev_scores_are_said_and_recorded(tmp_path):
    clock = Clock()
    progress = Progress(tmp_path / "p.jsonl", Target(), clock=clock)
    assert progress.add(valid_record(8)) == []  # a loss alone: no dev line
    progress.begin_validation(clock.now)
    clock.now += 6.5
    progress.begin_validation(clock.now)  # a later batch of the same validation
    (said,) = progress.add(valid_record(16, bleu=20.25))
    # the prefix is read by test_quickstart; then sentences, sacreBLEU, tokenised BLEU and loss
    assert said.startswith("[progress] dev at update 16 "), said
    assert re.findall(r"\d+(?:\.\d+)?", said) == ["16", "30", "20.25", "21.25", "8.646"], said
    valid = [r for r in read_records(tmp_path / "p.jsonl") if r["kind"] == "valid"]
    assert [r.get("bleu") for r in valid] == [None, 20.25]
    assert "validation_seconds" not in valid[0] and valid[1]["validation_seconds"] == 6.5


def test_a_resumed_run_is_stitched_and_its_budget_counts_every_piece(tmp_path):
    path, clock = tmp_path / "p.jsonl", Clock()
    first = Progress(path, Target(stop_time_hours=1), clock=clock)
    for update in (10, 20, 30):
        clock.now += 100
        first.add(train_record(update))
    with open(path, "a") as file:
        file.write('{"kind": "train", "upd')  # killed while writing
    clock.now += 1000  # the time between the kill and the restart is not training
    second = Progress(path, Target(stop_time_hours=1), clock=clock)
    assert second.before == 300.0  # the first piece trained 300 s
    second.add({"kind": "resumed", "update": 20})
    clock.now += 100
    (said,) = second.add(train_record(30))
    assert "| 53 min 20 s left (the time budget)" in said  # 3,600 s - 300 s (the first piece) - 100 s (this one)
    train = [r for r in stitched(read_records(path)) if r["kind"] == "train"]
    assert [r["update"] for r in train] == [10, 20, 30]  # update 30 of the first piece replaced
    assert [r["seconds"] for r in train] == [100.0, 200.0, 400.0]


def test_a_run_continued_from_another_runs_checkpoint_counts_its_training_time(tmp_path):
    # The parsing recipe's fine-tuning: a new SAVE_DIR, --continue-once the pre-training's checkpoint (1,200 s of
    # training), a budget of 0.5 h in all: fairseq stops 600 s after it, and so does the estimate.
    pretrained, save_dir = tmp_path / "pretrain" / "checkpoint_last.pt", tmp_path / "train"
    pretrained.parent.mkdir()
    torch.save({"extra_state": {"previous_training_time": 1200.25}}, pretrained)
    checkpoint = SimpleNamespace(restore_file="checkpoint_last.pt", continue_once=str(pretrained))
    run = progress_meter._Run(progress_meter.Settings(save_dir=str(save_dir)), SimpleNamespace(checkpoint=checkpoint))
    assert progress_meter.trained_before(run) == {"training_seconds": 1200.25}
    save_dir.mkdir()  # resumed in its own folder later: its own checkpoint_last.pt, as fairseq reads it
    torch.save({"extra_state": {"previous_training_time": 1500.0}}, save_dir / "checkpoint_last.pt")
    assert progress_meter.trained_before(run) == {"training_seconds": 1500.0}
    checkpoint.restore_file = str(tmp_path / "missing.pt")  # --restore-file's; unreadable: the records' time
    assert progress_meter.trained_before(run) == {}

    clock = Clock()
    progress = Progress(save_dir / "p.jsonl", Target(stop_time_hours=0.5), clock=clock)
    progress.add({"kind": "resumed", "update": 8000, "training_seconds": 1200.0})
    clock.now += 100
    (said,) = progress.add(train_record(8600))
    assert "| 8 min 20 s left (the time budget)" in said  # 1,800 s - 1,200 s - 100 s (this piece)


def test_the_refresh_runs_after_validations_at_most_once_an_interval(tmp_path):
    marks, clock = tmp_path / "marks", Clock()
    command = f"{sys.executable} -c \"open('{marks}', 'a').write('x')\""
    progress = Progress(tmp_path / "p.jsonl", Target(), refresh=command, refresh_interval=60, clock=clock)
    progress.add(valid_record(2))  # 0 s after the start: waits for the interval
    assert progress.refresh is None and progress.refresh_pending
    clock.now += 60
    progress.add(valid_record(4))
    progress.refresh.wait()
    clock.now += 30
    progress.add(valid_record(8))  # 30 s after the first: waits
    assert progress.refresh is None and progress.refresh_pending
    clock.now += 30
    progress.add(train_record(9))  # the interval has passed: the pending refresh runs
    progress.finish()
    assert marks.read_text() == "xx"


def plugin_task():
    """The plugin's task and criterion, built outside fairseq-train (the meter's run each test configures after)."""
    dictionary = make_dictionary(20)
    task = VaswaniTranslationTask(VaswaniTranslationConfig(), dictionary, dictionary)
    return task, VaswaniLabelSmoothedCrossEntropy(task, label_smoothing=0.1, sentence_avg=False)


def reduce_as_fairseq_trains(steps, task, log_interval=2):
    """fairseq_cli.train's and its trainer's aggregators around the task's reduce_metrics (`task`: plugin_task's),
    `steps` updates: the one-update reduction (read at once, as the trainer reads it), then a window at each log
    interval."""
    task, criterion = task
    log = {"loss": 2.0, "nll_loss": 1.5, "ntokens": 10, "nsentences": 2, "sample_size": 10, "n_correct": 5, "total": 10}
    logged = []
    with metrics.aggregate(new_root=True), metrics.aggregate("train"):
        for step in range(1, steps + 1):
            with metrics.aggregate("train_inner"):
                metrics.log_scalar("num_updates", step, weight=0)
                with metrics.aggregate() as one_update:
                    task.reduce_metrics([log], criterion)
                    one_update.get_smoothed_values()
            if step % log_interval == 0:
                logged.append(metrics.get_smoothed_values("train_inner"))
                metrics.reset_meters("train_inner")
    return logged


def test_the_meter_writes_on_rank_0_only_and_a_failure_of_its_own_never_stops_training(tmp_path, monkeypatch, capsys):
    task = plugin_task()  # before the command line is fairseq-train's: no signal handlers in this process
    monkeypatch.setattr(sys, "argv", ["fairseq-train", "data-bin"])
    progress_meter.configure(progress_meter.Settings(save_dir=str(tmp_path / "rank0"), max_update=4))
    logged = reduce_as_fairseq_trains(4, task)
    progress_meter.close()
    assert [window[progress_meter.METER] for window in logged] == [50.0, 100.0]  # the target's share, in the log
    records = read_records(tmp_path / "rank0" / "progress.jsonl")
    assert [r["kind"] for r in records] == ["start", "train", "train"] and records[0]["argv"] == ["data-bin"]
    assert [(r["update"], r["loss"]) for r in records[1:]] == [(2, round(0.2 / math.log(2), 3))] * 1 + [
        (4, round(0.2 / math.log(2), 3))
    ]
    assert capsys.readouterr().out.count("[progress] update ") == 2

    monkeypatch.setattr(progress_meter.distributed_utils, "get_global_rank", lambda: 1)
    progress_meter.configure(progress_meter.Settings(save_dir=str(tmp_path / "rank1"), max_update=4))
    reduce_as_fairseq_trains(4, task)
    progress_meter.close()
    assert not (tmp_path / "rank1").exists() and "[progress]" not in capsys.readouterr().out

    monkeypatch.setattr(progress_meter.distributed_utils, "get_global_rank", lambda: 0)
    monkeypatch.setattr(Progress, "add", lambda self, record: 1 / 0)
    progress_meter.configure(progress_meter.Settings(save_dir=str(tmp_path / "broken"), max_update=4))
    logged = reduce_as_fairseq_trains(4, task)
    progress_meter.close()
    assert all(math.isnan(window[progress_meter.METER]) for window in logged)
    assert capsys.readouterr().out.splitlines() == [
        "[progress] no more estimates or records (ZeroDivisionError: division by zero); training goes on"
    ]


def test_the_task_alone_attaches_the_hooks_whatever_the_criterion(tmp_path, monkeypatch):
    """The task (not the model, not the criterion: fairseq's own here) tells the meter the update it trains, puts this
    rank's signal flag in each training step's logging output, and after an update whose summed outputs carry a
    signal stops the training: fairseq's time limit made tiny, no validation, the marker the recipes read."""
    dictionary = make_dictionary(20)
    model = build_model(dictionary, dropout=0.0)
    task = VaswaniTranslationTask(VaswaniTranslationConfig(), dictionary, dictionary)
    criterion = LabelSmoothedCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1)
    root = SimpleNamespace(
        optimization=SimpleNamespace(stop_time_hours=0.0), dataset=SimpleNamespace(disable_validation=False)
    )
    progress_meter.configure(progress_meter.Settings(save_dir=str(tmp_path)), root)
    _, _, logging_output = task.train_step(tiny_batch(dictionary), model, criterion, PlainOptimizer(), update_num=6)
    assert progress_meter.current() == (str(tmp_path), 7, 0) and logging_output[preemption.KEY] == 0
    monkeypatch.setattr(preemption, "_received", signal.SIGUSR1)
    _, _, logging_output = task.train_step(tiny_batch(dictionary), model, criterion, PlainOptimizer(), update_num=6)
    assert logging_output[preemption.KEY] == preemption.flag() > 0
    with metrics.aggregate(new_root=True):
        task.reduce_metrics([logging_output, dict(logging_output, **{preemption.KEY: 0})], criterion)
    progress_meter.close()
    assert root.optimization.stop_time_hours == 1e-12 and root.dataset.disable_validation
    assert stage_records.read(tmp_path / stopping.MARKER) == {"reason": "signal", "signal": "SIGUSR1", "update": 7}


@pytest.fixture(scope="module")
def under_the_plugins_task(reversal_data, tmp_path_factory):
    """The README's own-pipeline fairseq-train as conftest's reversal_training runs it, `--task vaswani_translation`
    appended (docs/reference.md, "Watching training"), in this process: (its checkpoints' folder, its log)."""
    train = doc_blocks.commands(doc_blocks.block("README.md", "test:own-pipeline"))[0]
    data = {"fairseq-train DATA": f"fairseq-train {reversal_data / 'joined'}"}
    train = doc_blocks.substituted(train, {**data, **OWN_PIPELINE_COUNTS})
    folder = tmp_path_factory.mktemp("own_pipeline_task")
    tiny = shlex.join([*OWN_PIPELINE_TINY, "--task", "vaswani_translation"])
    status, out, err = doc_blocks.run_here(f"{train} {tiny}", folder, plugin=plugin_dir())
    progress_meter.close()
    assert status == 0, err[-3000:]
    return folder / "checkpoints", out + err


def test_the_readme_pipeline_under_fairseqs_own_task_writes_no_progress(reversal_training):
    """The README's own pipeline as written (fairseq's --task translation, the plugin's criterion): no ETA lines, no
    records, no `done` in fairseq's log; the progress is the plugin's task's (below)."""
    save_dir, log = reversal_training
    assert "[progress]" not in log and not (save_dir / "progress.jsonl").exists()
    windows = [
        json.loads(line.split("| train_inner | ", 1)[1]) for line in log.splitlines() if "| train_inner |" in line
    ]
    assert len(windows) == 6 and not [window for window in windows if progress_meter.METER in window]


def test_a_fairseq_train_started_by_hand_writes_its_progress(under_the_plugins_task):
    """The README's own pipeline with --task vaswani_translation (fairseq's json log, no pipe): each window's ETA
    line right after fairseq's line, and the records hold the values fairseq logged."""
    save_dir, log = under_the_plugins_task
    lines = [line for line in log.splitlines() if "| train_inner |" in line or line.startswith("[progress] ")]
    windows = [json.loads(line.split("| train_inner | ", 1)[1]) for line in lines if "| train_inner |" in line]
    assert len(windows) == 6 and len(lines) == 12
    for index, window in enumerate(windows):
        update = int(window["num_updates"])
        assert lines[2 * index + 1].startswith(f"[progress] update {update} of 6 ({100 * update / 6:.1f} %) | ")
        assert float(window[progress_meter.METER]) == round(100 * update / 6, 1)
    records = read_records(save_dir / "progress.jsonl")
    assert records[0]["kind"] == "start" and records[0]["max_update"] == 6
    train = [r for r in records if r["kind"] == "train"]
    assert [(r["update"], r["loss"], r["lr"]) for r in train] == [
        (int(w["num_updates"]), float(w["loss"]), float(w["lr"])) for w in windows
    ]
    validations = [json.loads(line.split("| valid | ", 1)[1]) for line in log.splitlines() if "| valid | " in line]
    assert len(validations) >= 3  # one at each checkpoint (every 2 updates) and at each epoch's end
    assert [(r["update"], r["loss"]) for r in records if r["kind"] == "valid"] == [
        (int(v["valid_num_updates"]), float(v["valid_loss"])) for v in validations
    ]


def test_the_options_the_progress_mirrors_are_those_a_resumed_run_compares_where_they_live():
    from dataclasses import fields

    from vaswani_plugin.checkpoints.resume import ALLOWED, MIRRORED_OPTIONS

    mirrored = [f.name for f in fields(ProgressOptions) if not f.name.startswith("_")]
    assert mirrored == list(MIRRORED_OPTIONS)
    assert set(mirrored) <= ALLOWED["task"] & ALLOWED["criterion"]
