"""recipes/stages.py in process: docs/recipes.md's re-run table, one test a row (and the prose's rows below it:
RESTART_FROM, an interrupted training, the runs of one job following run 0). The training rows compare real
checkpoints (the README's own-pipeline training, reversal_training) through fairseq's parsed configuration; the
recipes' own runs of the table: test_recipes.py, test_records.py and test_resume.py."""

import dataclasses
import json
import shutil

import pytest

from prepare import records
from recipes import stages

STAGES = ["prepare", "train", "average", "translate"]


def a_run(tmp_path, **settings) -> stages.Run:
    return stages.Run(work_dir=tmp_path, stages=STAGES, aside=tmp_path / "previous" / "T", **settings)


def recorded(run, name, plan, after=None, inputs=(), finished=True):
    records.start(run.work_dir, name, after, plan, inputs)
    if finished:
        records.finish(run.work_dir, name)


def decoding_stages(run):
    """average and translate, recorded as finished after a finished train, their outputs written."""
    recorded(run, "train", "python -m fairseq_cli.train data")
    for name, after in (("average", "train"), ("translate", "average")):
        recorded(run, name, f"python -m {name} 1", after=after)
        (run.work_dir / f"{name}.out").write_text(name)


def decoding_stage(run, name, plan_argument="1"):
    after = {"average": "train", "translate": "average"}[name]
    return stages.Stage(name, f"python -m {name} {plan_argument}", after, [run.work_dir / f"{name}.out"])


@pytest.fixture
def trained_before(training_plan, reversal_training, tmp_path):
    """A WORK_DIR whose train stage finished with training_plan, the fixture's checkpoints (at update 6)."""
    run = a_run(tmp_path)
    recorded(run, "train", training_plan)
    save_dir, _ = reversal_training
    return run, lambda change="": stages.Stage("train", f"{training_plan} {change}", save_dir=save_dir)


def test_nothing_changed_skips_every_stage(tmp_path):
    run = a_run(tmp_path)
    decoding_stages(run)
    train = stages.Stage("train", "python -m fairseq_cli.train data", save_dir=tmp_path)
    (tmp_path / "checkpoint_last.pt").touch()
    assert stages.begin(run, train) == stages.Decision("skip")
    for name in ("average", "translate"):
        assert stages.begin(run, decoding_stage(run, name)) == stages.Decision("skip")


def test_max_update_raised_resumes_and_decodes_again_keeping_the_old_outputs(trained_before):
    run, train = trained_before
    recorded(run, "average", "python -m average 1", after="train")
    (run.work_dir / "average.out").write_text("before")
    assert stages.begin(run, train("--max-update 9")) == stages.Decision("resume", "6")
    assert records.read(records.record_path(run.work_dir, "train"))["started_from"] == 6
    assert stages.begin(run, decoding_stage(run, "average")) == stages.Decision("rerun")
    assert (run.aside / "average.out").read_text() == "before" and not (run.work_dir / "average.out").exists()


def test_max_update_below_the_checkpoints_is_refused_naming_both_counts(trained_before, reversal_training):
    run, train = trained_before
    with pytest.raises(stages.StageError) as refused:
        stages.begin(run, train("--max-update 4"))
    assert str(refused.value).startswith(
        f"stage train: --max-update is 4 now (MAX_UPDATE), but the checkpoints in {reversal_training[0]} are at "
        "update 6. Nothing was changed; to go on, use a new WORK_DIR, or set RESTART_FROM=train"
    )


def test_decoding_changed_runs_again_from_the_first_changed_stage(tmp_path):
    run = a_run(tmp_path)
    decoding_stages(run)
    assert stages.begin(run, decoding_stage(run, "average")) == stages.Decision("skip")
    assert stages.begin(run, decoding_stage(run, "translate", "2")) == stages.Decision("rerun")
    assert (run.aside / "translate.out").read_text() == "translate"
    assert (run.aside / ".stages" / "translate.json").is_file()  # the old record, kept beside its outputs
    # A changed average makes the translation run again though its own plan is as recorded.
    decoding_stages(run)
    assert stages.begin(run, decoding_stage(run, "average", "2")) == stages.Decision("rerun")
    assert stages.begin(run, decoding_stage(run, "translate")) == stages.Decision("rerun")


def data_run(tmp_path, bpe_merges):
    data_dir, raw = tmp_path / "data", tmp_path / "raw"
    raw.mkdir(exist_ok=True)
    (raw / "train.en.gz").write_bytes(b"one")
    return data_dir, [raw], {"BPE_MERGES": bpe_merges}


def test_data_changed_once_checkpoints_exist_is_refused_before_preparing(tmp_path):
    run = a_run(tmp_path)
    data_dir, raw, settings = data_run(tmp_path, "100")
    records.data(data_dir, raw, settings, tmp_path, False, True)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "checkpoint_last.pt").touch()
    with pytest.raises(stages.StageError) as refused:
        stages.data_gate(run, data_dir, raw, {"BPE_MERGES": "200"})
    assert str(refused.value).startswith(
        f"stage prepare: BPE_MERGES changed from 100 to 200, but {tmp_path} holds checkpoints trained on the data"
    )


def test_data_changed_before_any_training_is_prepared_again(tmp_path, capsys):
    run = a_run(tmp_path)
    data_dir, raw, settings = data_run(tmp_path, "100")
    records.data(data_dir, raw, settings, tmp_path, False, True)
    stages.data_gate(run, data_dir, raw, {"BPE_MERGES": "200"})
    said = capsys.readouterr().err.rstrip().splitlines()[-1]
    assert said.endswith(
        "stage prepare: BPE_MERGES changed from 100 to 200; no checkpoint was trained on the data: preparing it again"
    )


def test_a_dictionary_not_the_one_training_read_is_refused_naming_it(tmp_path):
    run, dictionary = a_run(tmp_path), tmp_path / "dict.en.txt"
    dictionary.write_text("the 10\n")
    recorded(run, "train", "python -m fairseq_cli.train data", inputs=[dictionary])
    dictionary.write_text("the 10\na 5\n")
    (tmp_path / "checkpoint_last.pt").touch()
    train = stages.Stage("train", "python -m fairseq_cli.train data", inputs=[dictionary], save_dir=tmp_path)
    with pytest.raises(stages.StageError) as refused:
        stages.begin(run, train)
    assert str(refused.value).startswith(
        f"stage train: the data's dict.en.txt is not the one stage train read (11 bytes now), but {tmp_path} holds "
        "its checkpoints."
    )


def test_the_model_changed_once_checkpoints_exist_is_refused_naming_the_option(trained_before):
    run, train = trained_before
    with pytest.raises(stages.StageError) as refused:
        stages.begin(run, train("--dropout 0.3"))
    assert str(refused.value).startswith("stage train: --dropout is 0.3 now, 0.1 in the checkpoints. Nothing was")


def test_another_hardware_layout_with_the_tokens_per_step_kept_goes_on(trained_before):
    run, train = trained_before
    assert stages.begin(run, train("--distributed-world-size 2 --max-tokens 500")) == stages.Decision(
        "skip", "(its checkpoints reached the target)"
    )
    assert stages.begin(run, train("--max-update 9 --max-tokens 500 --update-freq 2")) == stages.Decision("resume", "6")


def test_checkpoint_cadence_and_logging_are_allowed(trained_before):
    run, train = trained_before
    assert stages.begin(run, train("--save-interval-updates 3 --log-interval 5")).action == "skip"


def test_a_version_change_is_one_warning_line_never_a_rerun(tmp_path, capsys):
    run = a_run(tmp_path)
    decoding_stages(run)
    path = records.record_path(tmp_path, "average")
    record = json.loads(path.read_text())
    record["versions"]["torch"] = "1.0"
    path.write_text(json.dumps(record))
    assert stages.begin(run, decoding_stage(run, "average")) == stages.Decision("skip")
    assert "warning: torch 1.0 -> " in capsys.readouterr().err


def test_restart_from_runs_that_stage_and_every_later_one_again_its_outputs_aside(tmp_path):
    run = a_run(tmp_path, restart_from="average")
    decoding_stages(run)
    train = stages.Stage("train", "python -m fairseq_cli.train data", save_dir=tmp_path)
    assert stages.begin(run, train) == stages.Decision("skip")
    for name in ("average", "translate"):
        assert stages.begin(run, decoding_stage(run, name)) == stages.Decision("run")
        assert (run.aside / f"{name}.out").read_text() == name


def test_restart_from_train_trains_again_though_its_checkpoints_reached_the_target(trained_before, tmp_path):
    run, train = trained_before
    run = a_run(tmp_path, restart_from="train", dry_run=True)  # a dry run: the fixture's checkpoints stay put
    assert stages.begin(run, train()) == stages.Decision("run")


def test_an_interrupted_training_resumes_and_an_interrupted_stage_runs_again(tmp_path):
    run = a_run(tmp_path)
    recorded(run, "train", "python -m fairseq_cli.train data", finished=False)
    (tmp_path / "checkpoint_last.pt").touch()
    train = stages.Stage("train", "python -m fairseq_cli.train data", save_dir=tmp_path)
    assert stages.begin(run, train) == stages.Decision("resume", "(interrupted before)")
    recorded(run, "average", "python -m average 1", after="train", finished=False)
    assert stages.begin(run, decoding_stage(run, "average")) == stages.Decision("run")


def test_the_other_runs_of_a_job_follow_run_0s_decision_of_this_launch(tmp_path):
    zero = a_run(tmp_path, rank=0, workers=2, launch_id="job 1")
    one = a_run(tmp_path, rank=1, name="node 1", workers=2, launch_id="job 1", wait_seconds=0)
    stages.publish(zero, "train", "refuse --dropout is 0.3 now")
    assert stages.agreed(one, "train", lambda: "run") == "refuse --dropout is 0.3 now"
    other_launch = a_run(tmp_path, rank=1, name="node 1", workers=2, launch_id="job 2", wait_seconds=0)
    with pytest.raises(stages.StageError, match="node 0 of this job \\(job 2\\) decided nothing on stage train"):
        stages.agreed(other_launch, "train", lambda: "run")


def test_a_dry_run_decides_as_a_run_and_writes_nothing(tmp_path):
    run = a_run(tmp_path, dry_run=True)
    decoding_stages(run)
    before = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*"))
    assert stages.begin(run, decoding_stage(run, "translate", "2")) == stages.Decision("rerun")
    assert sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*")) == before


def test_run_0_makes_a_cut_off_checkpoint_last_resumable_before_training_goes_on(reversal_training, tmp_path):
    """A run killed while fairseq copied checkpoint_last.pt: the engine that lets it resume repairs it first (the
    newest intact checkpoint in its place, the note in train.log); the job's other runs touch nothing."""
    save_dir, _ = reversal_training
    work = tmp_path / "work"
    copy = shutil.copytree(save_dir, work / "checkpoints", ignore=shutil.ignore_patterns("*.log", "tensorboard"))
    intact = (copy / "checkpoint_last.pt").read_bytes()
    (copy / "checkpoint_last.pt").write_bytes(intact[: len(intact) // 2])
    run = a_run(work)
    recorded(run, "train", "python -m fairseq_cli.train data", finished=False)
    train = stages.Stage("train", "python -m fairseq_cli.train data", save_dir=copy)
    follower = a_run(work, rank=1, name="node 1", workers=2, launch_id="job", wait_seconds=0)
    stages.publish(dataclasses.replace(follower, rank=0), "train", "resume (interrupted before)")
    stages.begin(follower, train)
    assert len((copy / "checkpoint_last.pt").read_bytes()) == len(intact) // 2
    assert stages.begin(run, train) == stages.Decision("resume", "(interrupted before)")
    (note,) = [line for line in (copy / "train.log").read_text().splitlines() if " resuming from " in line]
    newest = note.split(" resuming from ")[1].split()[0]
    assert "(update 6)" in note and (copy / "checkpoint_last.pt").read_bytes() == (copy / newest).read_bytes()


def test_a_training_that_diverged_is_recorded_so_and_refused_until_a_setting_changes(tmp_path):
    """docs/recipes.md: a divergence ends in one line and its record says "diverged at update N"; the same command
    again refuses (it would diverge again); a changed setting goes on, and its record starts afresh."""
    run = a_run(tmp_path)
    recorded(run, "train", "python -m fairseq_cli.train data --factor 1e9", finished=False)
    (tmp_path / "checkpoint_last.pt").touch()
    stopping = stages.STOPPING
    stopping.write_marker(tmp_path, {"reason": "diverged", "update": 7, "line": "..."})
    with pytest.raises(stages.StageError, match="^stage train: training diverged at update 7; change a setting"):
        stages.stopped(run, "train", tmp_path)
    assert records.read(records.record_path(tmp_path, "train"))["stopped"] == "diverged at update 7"
    again = stages.Stage("train", "python -m fairseq_cli.train data --factor 1e9", save_dir=tmp_path)
    with pytest.raises(stages.StageError, match="^stage train: training diverged at update 7 with these very"):
        stages.begin(run, again)
    changed = stages.Stage("train", "python -m fairseq_cli.train data --factor 1", save_dir=tmp_path)
    decision = stages.decide(changed, "changed", False, lambda: "resume 6", "diverged at update 7")
    assert decision == stages.Decision("resume", "6")
    stages.begin(dataclasses.replace(run, restart_from="train"), changed)
    assert "stopped" not in records.read(records.record_path(tmp_path, "train"))
    assert records.read(tmp_path / stopping.MARKER) is None


def test_after_a_divergence_a_lower_rate_or_longer_warm_up_goes_on_from_the_last_checkpoint(trained_before):
    """The line's advice, taken: eq. 3's settings and Adam's rate may change on a run that diverged (refused on one
    that did not: docs/recipes.md's table); a precision may not (fairseq resumes no optimizer state of another)."""
    run, train = trained_before
    path = records.record_path(run.work_dir, "train")
    record = records.read(path)
    with pytest.raises(stages.StageError, match="--warmup-updates is 8000 now, 4000 in the checkpoints"):
        stages.begin(run, train("--max-update 9 --warmup-updates 8000"))
    records.write(path, dict(record, finished=None, stopped="diverged at update 7"))
    assert stages.begin(run, train("--max-update 9 --warmup-updates 8000 --factor 0.5")) == stages.Decision(
        "resume", "6"
    )
    still = (("--fp16", "--fp16 is True now, False"), ("--stop-min-lr 0.001", "--stop-min-lr is 0.001 now"))
    for change, refused in still:
        records.write(path, dict(record, finished=None, stopped="diverged at update 7"))
        with pytest.raises(stages.StageError, match=refused):
            stages.begin(run, train(f"--max-update 9 {change}"))


def test_a_stage_runs_after_the_recipes_stage_before_it(tmp_path):
    """Its record's `after`: the declared stage before it; none after prepare (whose record is the data's), none for
    a stage that says so (Table 3's variants); the one it names."""
    run = a_run(tmp_path)
    assert [stages.previous(run, name) for name in STAGES] == [None, None, "train", "average"]
    assert stages.previous(run, "translate", after="") is None
    assert stages.previous(run, "translate", after="train") == "train"


def test_a_plan_quoted_by_bash_or_python_is_the_same_plan():
    """Records written before recipes/training.py hold bash's printf %q quoting; the engine's plans, shlex's."""
    bash = 'python -m x --adam-betas \\(0.9\\,0.98\\) --args \\{\\"beam\\":\\ 4\\}'
    assert records.same_plan(bash, """python -m x --adam-betas '(0.9,0.98)' --args '{"beam": 4}'""")
    assert not records.same_plan(bash, "python -m x --adam-betas '(0.9,0.99)' --args '{\"beam\": 4}'")
    assert not records.same_plan(None, "python -m x")


def test_a_preparations_settings_are_named_as_the_recipes_variables():
    assert stages.setting_names(["--pair", "en-de", "--bpe-merges", "32000"]) == {
        "PAIR": "en-de",
        "BPE_MERGES": "32000",
    }


def test_a_training_stopped_by_a_signal_is_recorded_so_and_resumes(tmp_path):
    """docs/recipes.md: a signal's stop (training/preemption.py) is returned, not an error; its record says "stopped by
    SIGUSR1 at update N", and the same command again resumes from its checkpoints."""
    run = a_run(tmp_path)
    recorded(run, "train", "python -m fairseq_cli.train data", finished=False)
    (tmp_path / "checkpoint_last.pt").touch()
    stages.STOPPING.write_marker(tmp_path, {"reason": "signal", "signal": "SIGUSR1", "update": 7})
    assert stages.stopped(run, "train", tmp_path) == "stopped by SIGUSR1 at update 7"
    assert records.read(records.record_path(tmp_path, "train"))["stopped"] == "stopped by SIGUSR1 at update 7"
    again = stages.Stage("train", "python -m fairseq_cli.train data", save_dir=tmp_path)
    assert stages.begin(run, again) == stages.Decision("resume", "(interrupted before)")
    assert records.read(tmp_path / stages.STOPPING.MARKER) is None
