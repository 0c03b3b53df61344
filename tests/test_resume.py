"""Resuming after a kill at any instant, and one-line errors for checkpoint files that are cut off or no checkpoint.

fairseq writes checkpoint_<epoch>_<updates>.pt atomically but copies it to checkpoint_last.pt with a plain copy;
a job killed during the copy leaves a cut-off checkpoint_last.pt. The command vaswani_plugin.checkpoints.resume
(run by the recipes before fairseq-train) is checked on real checkpoints of a tiny training, and the big recipe
is killed with SIGKILL at seeded events of three of its stages (benchmarks/chaos.py's functions), once in training
with checkpoint_last.pt then cut as a kill during fairseq's copy leaves it, and must end with the outputs of an
uninterrupted run.
"""

import fractions
import io
import os
import random
import sys
from pathlib import Path

import chaos
import pytest
import torch
from cli_helpers import plugin_dir, run
from conftest import lane_job
from fairseq import checkpoint_utils
from test_recipes import BIG_RUN, NEEDS_CPU_PATH, check_scores, hypotheses, tiny_env
from wmt_mirror import newstest2014_sentences

from recipes import stages, training
from vaswani_plugin.checkpoints import average as average_checkpoints
from vaswani_plugin.checkpoints import convert_fairseq
from vaswani_plugin.checkpoints.average import average_checkpoints as averaged
from vaswani_plugin.checkpoints.resume import main as resume_main
from vaswani_plugin.checkpoints.resume import trained_config
from vaswani_plugin.checkpoints.storage import unreadable_checkpoint_message
from vaswani_plugin.precision import trained_precision
from vaswani_plugin.scoring import bleu as score
from vaswani_plugin.tools import attention_pictures, training_cost

PROG = "vaswani_plugin.checkpoints.resume"
CUT_SHORT = "cut short: torch's zip archive without its end (a write or copy that was interrupted)"
NOT_TORCH = "not a torch checkpoint (neither torch's zip format nor its legacy one)"


def cut_to_half(source: Path, target: Path) -> bytes:
    data = source.read_bytes()[: source.stat().st_size // 2]
    target.write_bytes(data)
    return data


def with_updates(state: dict, updates: int, path: Path) -> Path:
    """The training checkpoint `state`, saved as if fairseq had written it after `updates` updates."""
    state["optimizer_history"][-1]["num_updates"] = updates
    torch.save(state, path)
    return path


@pytest.fixture
def training_state(reversal_training):
    save_dir, _ = reversal_training
    return torch.load(save_dir / "checkpoint_last.pt", weights_only=True)


def test_cut_off_checkpoint_last_becomes_the_newest_intact_checkpoint(training_state, tmp_path, capsys):
    for updates in (2, 4, 6):
        with_updates(training_state, updates, tmp_path / f"checkpoint_1_{updates}.pt")
    with_updates(training_state, 2, tmp_path / "checkpoint_best.pt")
    # Newer by name, date or update count, but nothing to resume from: cut off, averaged (no optimizer state).
    cut_to_half(tmp_path / "checkpoint_1_6.pt", tmp_path / "checkpoint_1_6.pt")
    os.utime(tmp_path / "checkpoint_1_2.pt", (2e9, 2e9))
    for name in ("checkpoint_average.pt", "checkpoint_exported.pt"):
        torch.save(averaged([with_updates(training_state, 9, tmp_path / f"{name}.source")]), tmp_path / name)
    # checkpoint_last.pt as a kill during fairseq's copy leaves it, and what a kill of the command itself leaves.
    cut = cut_to_half(tmp_path / "checkpoint_1_4.pt", tmp_path / "checkpoint_last.pt")
    (tmp_path / ".checkpoint_last.pt.x1y2.tmp").write_bytes(b"partial")

    resume_main([str(tmp_path)])
    out, err = capsys.readouterr()
    kept = next(tmp_path.glob("checkpoint_last.unreadable-*.pt"))
    assert err == f"{PROG}: {tmp_path}/checkpoint_last.pt: {CUT_SHORT}; kept as {kept.name}\n"
    assert out == f"{PROG}: resuming from checkpoint_1_4.pt (update 4), copied to checkpoint_last.pt\n"
    assert kept.read_bytes() == cut
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == (tmp_path / "checkpoint_1_4.pt").read_bytes()
    assert not list(tmp_path.glob(".checkpoint_last.pt.*"))
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "checkpoint_last.pt"))  # as fairseq resumes
    assert state["optimizer_history"][-1]["num_updates"] == 4

    resume_main([str(tmp_path)])  # now intact: nothing to do
    assert capsys.readouterr() == ("", "")


def test_intact_or_missing_checkpoint_last_is_left_alone(training_state, tmp_path, capsys):
    resume_main([str(tmp_path)])  # no checkpoint yet: a first run
    with_updates(training_state, 2, tmp_path / "checkpoint_1_2.pt")
    with_updates(training_state, 1, tmp_path / "checkpoint_last.pt")  # older than checkpoint_1_2.pt, but intact
    before = {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in tmp_path.iterdir()}
    resume_main([str(tmp_path)])
    assert capsys.readouterr() == ("", "")
    assert {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in tmp_path.iterdir()} == before


def test_without_an_intact_checkpoint_training_starts_from_the_beginning(training_state, tmp_path, capsys):
    cut_to_half(with_updates(training_state, 2, tmp_path / "checkpoint_1_2.pt"), tmp_path / "checkpoint_1_2.pt")
    torch.save(
        averaged([with_updates(training_state, 2, tmp_path / "average.source")]), tmp_path / "checkpoint_average.pt"
    )
    (tmp_path / "checkpoint_last.pt").write_text("not a checkpoint\n")
    resume_main([str(tmp_path)])
    out, err = capsys.readouterr()
    kept = next(tmp_path.glob("checkpoint_last.unreadable-*.pt"))
    assert err == f"{PROG}: {tmp_path}/checkpoint_last.pt: {NOT_TORCH}; kept as {kept.name}\n"
    assert out == f"{PROG}: no intact training checkpoint in {tmp_path}: training starts from the beginning\n"
    assert kept.read_text() == "not a checkpoint\n" and not (tmp_path / "checkpoint_last.pt").exists()


@pytest.fixture
def bad_files(reversal_training, tmp_path):
    """A real checkpoint cut to half its bytes, and a text file: (path, what is wrong with it)."""
    save_dir, _ = reversal_training
    cut_to_half(save_dir / "checkpoint_last.pt", tmp_path / "cut.pt")
    (tmp_path / "notes.pt").write_text("H-0\t-0.1\tnot a checkpoint\n")
    return [(tmp_path / "cut.pt", CUT_SHORT), (tmp_path / "notes.pt", NOT_TORCH)]


def one_line_error(result) -> str:
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


def test_fairseq_generate_and_interactive_name_the_unreadable_file(reversal_data, bad_files, tmp_path):
    (cut, cut_problem), (text, text_problem) = bad_files
    data, user_dir = reversal_data / "joined", plugin_dir()
    generate = run("generate", data, "--user-dir", user_dir, "--path", cut, "--cpu", cwd=tmp_path, check=False)
    assert one_line_error(generate) == f"vaswani_plugin: error: {cut}: {cut_problem}"
    interactive = run(
        "interactive", data, "--user-dir", user_dir, "--path", text, "--cpu", cwd=tmp_path, stdin="w1 w2\n", check=False
    )
    assert one_line_error(interactive) == f"vaswani_plugin: error: {text}: {text_problem}"


def test_other_errors_of_fairseqs_checkpoint_loading_keep_their_traceback(training_state, bad_files, tmp_path, capsys):
    """torch's refusal of a class in an intact checkpoint explains itself; the hook passes it on unchanged."""
    assert getattr(sys.excepthook, "_vaswani_plugin", False)  # installed by `import vaswani_plugin`
    training_state["extra_state"]["ratio"] = fractions.Fraction(1, 3)
    torch.save(training_state, tmp_path / "refused.pt")
    for path, problem in [*bad_files, (tmp_path / "refused.pt", None)]:
        with pytest.raises(Exception) as error:
            checkpoint_utils.load_checkpoint_to_cpu(str(path))
        expected = problem and f"{path}: {problem}"
        assert unreadable_checkpoint_message(error.value) == expected
        sys.excepthook(error.type, error.value, error.tb)
        printed = capsys.readouterr().err
        if problem:
            assert printed == f"vaswani_plugin: error: {expected}\n"
        else:
            assert printed.startswith("Traceback") and "Weights only load failed" in printed
            assert "Unsupported global: GLOBAL fractions.Fraction" in printed


def test_the_hook_points_a_cut_off_checkpoint_last_to_the_resume_command(bad_files, tmp_path):
    (cut, _), _ = bad_files
    cut.rename(tmp_path / "checkpoint_last.pt")
    with pytest.raises(Exception) as error:
        checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "checkpoint_last.pt"))
    assert unreadable_checkpoint_message(error.value).endswith(
        f"; `python -m {PROG} {tmp_path}` resumes from the newest intact checkpoint there"
    )


COMMANDS = {
    "checkpoints.average": (average_checkpoints.main, lambda path, tmp: ["--inputs", path, "--output", tmp / "o.pt"]),
    "tools.training_cost": (training_cost.main, lambda path, tmp: ["--checkpoint", path, "--gpus", "1"]),
    "checkpoints.convert_fairseq": (
        convert_fairseq.main,
        lambda path, tmp: ["--input", path, "--output", tmp / "o.pt"],
    ),
    "tools.attention_pictures": (
        attention_pictures.main,
        lambda path, tmp: ["--path", path, "--data", tmp, "--source", "w1", "--output-dir", tmp],
    ),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_packages_commands_name_the_unreadable_file(command, bad_files, tmp_path):
    main, arguments = COMMANDS[command]
    for path, problem in bad_files:
        with pytest.raises(SystemExit) as exit:
            main([str(argument) for argument in arguments(path, tmp_path)])
        assert exit.value.code == f"vaswani_plugin.{command}: error: {path}: {problem}"
    assert not (tmp_path / "o.pt").exists()


def test_a_generate_output_cut_short_is_one_line(tmp_path):
    sentences = ["Die Brücke ist schön .", "Grüße aus Köln .", "Das ist alles ."]
    output = "".join(f"S-{i}\tsource {i}\nH-{i}\t-0.5\t{h}\nD-{i}\t-0.5\t{h}\n" for i, h in enumerate(sentences))
    (tmp_path / "ref.de").write_text("\n".join(sentences) + "\n")
    data = output.encode()
    inside_a_character = data.index("ü".encode()) + 1
    for name, content, message in [
        (
            "cut_in_a_character.out",
            data[:inside_a_character],
            "not UTF-8 text (unexpected end of data: cut short inside a character, or another encoding)",
        ),
        ("cut_after_a_line.out", data[: data.index(b"S-2")], None),
    ]:
        (tmp_path / name).write_bytes(content)
        with pytest.raises(SystemExit) as exit:
            score.main(
                [
                    "--generate-output",
                    str(tmp_path / name),
                    "--reference",
                    str(tmp_path / "ref.de"),
                    "--target-lang",
                    "de",
                ]
            )
        expected = f"{tmp_path / name}: {message}" if message else "2 hypotheses for 3 reference lines"
        assert exit.value.code.startswith(f"vaswani_plugin.scoring.bleu: error: {expected}")
        assert "\n" not in exit.value.code


# The big recipe killed at seeded events of its run and run again after each, in folders of its own (WORK_DIR and
# DATA_DIR), then to its end; its outputs against those of the same run never killed, test_recipes.py's en_de_big_run
# (8 updates with the recipe's dropout; no validation, to keep the runs short): a small seeded version of
# benchmarks/chaos.py's kills, by its functions. One kill while the data is prepared, one while it trains past a
# checkpoint (after which checkpoint_last.pt is cut to half, as a kill during fairseq's own copy in place leaves it),
# one in average, translate or score; each at an event the unbroken run printed (a preparation step's line,
# `num_updates=K`, a stage's line), so that no run has a time to beat.
RECIPE = "wmt14_en_de_big.sh"
MAX_UPDATE = BIG_RUN["MAX_UPDATE"]
SEED = 66


def seeded_kills(reference, seed=SEED):
    """The kills' instants for SEED, at events of the unbroken run REFERENCE's output."""
    events = chaos.counted_events(reference.stderr, reference.stdout)
    rng = random.Random(seed)
    past_a_checkpoint = [event for event in events["train"] if 4 < int(event[len("num_updates=") : -2]) < MAX_UPDATE]
    later = [
        chaos.Instant(stage, event=event) for stage in ("average", "translate", "score") for event in events[stage]
    ]
    return [
        chaos.Instant("prepare", event=rng.choice(events["prepare"])),
        chaos.Instant("train", event=rng.choice(past_a_checkpoint)),
        rng.choice(later),
    ]


def resumable_update(checkpoints: Path) -> int:
    """Brute force, with torch alone: the update a correct resume goes on from. checkpoint_last.pt's, or, when it
    does not load, the newest interval checkpoint that does; 0 without either."""

    def updates(path):
        try:
            return torch.load(path, weights_only=True)["optimizer_history"][-1]["num_updates"]
        except Exception:
            return None

    last = updates(checkpoints / "checkpoint_last.pt")
    if last is not None:
        return last
    return max(filter(None, map(updates, checkpoints.glob("checkpoint_*_*.pt"))), default=0)


@lane_job
def resume_killed_runs(tmp_path_factory, lane):
    """The same run killed at seeded_kills(), each kill's re-run the next one's run, then run to its end; the kill in
    training followed by checkpoint_last.pt cut to half. Returns (the run, its attempts killed, the update the re-run
    after the cut should resume from, the last attempt)."""
    root, reference = lane["en_de_big_run"].result()
    run = chaos.recipe_run(
        RECIPE, tiny_env(root / "killed" / "work", root / "raw", root / "killed" / "data", **BIG_RUN)
    )
    checkpoints, killed, resume = run.work / "checkpoints", [], None
    for number, instant in enumerate(seeded_kills(reference)):
        killed.append((instant, chaos.attempt(run, run.work.parent / "logs" / str(number), instant, timeout=300)))
        if instant.stage == "train" and killed[-1][1].sent is not None:
            cut_to_half(checkpoints / "checkpoint_last.pt", checkpoints / "checkpoint_last.pt")
            resume = resumable_update(checkpoints)
    return run, killed, resume, chaos.attempt(run, run.work.parent / "logs" / "final", timeout=300)


def first_and_last_update(log_part: str):
    updates = [int(part.split(",")[0]) for part in log_part.split("num_updates=")[1:]]
    return updates[0], updates[-1]


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("en_de_big_run", "resume_killed_runs")
def test_recipe_killed_at_seeded_instants_ends_with_the_uninterrupted_outputs(lane):
    run, killed, resume, final = lane["resume_killed_runs"].result()
    root, _ = lane["en_de_big_run"].result()
    judged = [chaos.judged(run, instant, attempt) for instant, attempt in killed]
    said = [f"{instant}, in {attempt.landed}: {what}" for (instant, attempt), (what, _) in zip(killed, judged)]
    assert [verdict for _, verdict in judged] == ["interrupted"] * 3, said
    landed = [chaos.STAGES.index(attempt.landed) for _, attempt in killed]
    assert landed[:2] == [0, 1] and landed[2] >= chaos.STAGES.index(killed[2][0].stage), said
    assert final.status == 0, final.output()[1][-3000:]

    # fairseq seeds every update with seed + update number and stores the data position, so on one thread the
    # killed and re-run training computes what the uninterrupted one did: every hypothesis, both BLEU lines, the
    # averaged checkpoint's tensors bit for bit and the data-bin files are the unbroken run's.
    reference = chaos.recipe_run(RECIPE, tiny_env(root / "work", root / "raw", root / "data", **BIG_RUN))
    assert chaos.differences(reference, run) == [], said

    # Each fairseq-train run starts by looking for checkpoint_last.pt: the one killed, the re-run after the cut.
    checkpoints = run.work / "checkpoints"
    log = (checkpoints / "train.log").read_text()
    runs = log.split(f"Preparing to load checkpoint {checkpoints}/checkpoint_last.pt")[1:]
    assert len(runs) == 2, said
    assert "No existing checkpoint found" in runs[0] and first_and_last_update(runs[0])[0] == 1
    # The killed run trained past a checkpoint; its re-run found checkpoint_last.pt cut off, resumed from the newest
    # intact one, and the step count went on.
    assert resume >= 4
    kept = next(checkpoints.glob("checkpoint_last.unreadable-*.pt"))
    assert f"{PROG}: {checkpoints}/checkpoint_last.pt: {CUT_SHORT}; kept as {kept.name}" in log
    assert f"{PROG}: resuming from checkpoint_1_{resume}.pt (update {resume})" in log
    assert f"Loaded checkpoint {checkpoints}/checkpoint_last.pt (epoch 1 @ {resume} updates)" in runs[1]
    assert first_and_last_update(runs[1]) == (resume + 1, MAX_UPDATE)

    sentences = newstest2014_sentences(root / "raw", "en-de")
    assert len(hypotheses(run.work / "newstest2014.generate.txt")) == sentences
    check_scores(final.output()[0], sentences)


def plan_decision(plan: str, capsys, *options) -> str:
    """What `python -m vaswani_plugin.checkpoints.resume --plan [OPTIONS]` prints on stdout for PLAN on stdin (in
    this process); its stderr stays in capsys."""
    stdin, sys.stdin = sys.stdin, io.StringIO(plan)
    try:
        resume_main(["--plan", *options])
    finally:
        sys.stdin = stdin
    out = capsys.readouterr()
    sys.stderr.write(out.err)
    return out.out.strip()


@pytest.mark.parametrize(
    "change,decision",
    [
        ("", "finished"),  # as trained: 6 updates reached
        # MAX_UPDATE raised, with another hardware layout (the tokens per step kept), checkpoint cadence and logging.
        ("--max-update 9 --max-tokens 500 --update-freq 2 --save-interval-updates 3 --log-interval 5", "resume 6"),
        ("--distributed-world-size 2 --max-tokens 500", "finished"),
        # A time budget (the quickstart's): raised past the training time so far, resumed; below it, finished.
        ("--max-update 0 --stop-time-hours 1", "resume 6"),
        ("--max-update 0 --stop-time-hours 0.00001", "finished"),
        # The model, the optimisation (§5.3, eq. 3, §5.4), fp16, the tokens per step: refused by name.
        ("--dropout 0.3", "refuse --dropout is 0.3 now, 0.1 in the checkpoints"),
        ("--adam-betas (0.9,0.999)", "refuse --adam-betas is '(0.9,0.999)' now, '(0.9,0.98)' in the checkpoints"),
        ("--warmup-updates 8000", "refuse --warmup-updates is 8000 now, 4000 in the checkpoints"),
        ("--label-smoothing 0", "refuse --label-smoothing is 0.0 now, 0.1 in the checkpoints"),
        ("--fp16 --max-update 9", "refuse --fp16 is True now, False in the checkpoints"),
        ("--amp --max-update 9", "refuse --amp is True now, False in the checkpoints"),
        # A finished run trains no more: not refused for another precision (a default or a card that changed) ...
        ("--fp16", "finished"),
        # ... but for a change that is more than one.
        ("--fp16 --dropout 0.3", "refuse --dropout is 0.3 now, 0.1 in the checkpoints"),
        ("--max-tokens 2000", "refuse the tokens per step (TOKENS_PER_STEP) are 2,000 now, 1,000 in the checkpoints"),
        (
            "--max-update 4",
            "refuse --max-update is 4 now (MAX_UPDATE), but the checkpoints in {save_dir} are at update 6",
        ),
    ],
)
def test_a_training_plan_resumes_only_what_its_checkpoints_allow(
    training_plan, reversal_training, change, decision, capsys
):
    """docs/recipes.md's re-run table, training rows: fairseq's parsed configuration against the checkpoint's (the
    other commands of a plan are not read)."""
    save_dir, _ = reversal_training
    plan = f"python -m vaswani_plugin.checkpoints.average --inputs x\n{training_plan} {change}\n"
    assert plan_decision(plan, capsys) == decision.format(save_dir=save_dir)


def test_a_training_that_left_epochs_is_finished_at_the_limit_its_checkpoint_kept(
    training_plan, reversal_training, tmp_path, capsys
):
    """--leave-epochs moves fairseq's time limit while training, or its update limit (tasks/leave_epochs.py), and the
    checkpoint keeps it: its command run again finds the training finished where the limit was reached, and resumes
    where it was not (a checkpoint saved before the end) or where the command no longer leaves epochs."""
    save_dir, _ = reversal_training
    state = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)
    trained, updates = state["extra_state"]["previous_training_time"], state["optimizer_history"][-1]["num_updates"]
    command = f"{training_plan} --save-dir {tmp_path} --task vaswani_translation"
    timed, counted = f"{command} --max-update 0 --stop-time-hours 1", f"{command} --max-update 40 --stop-time-hours 0"
    leave = " --leave-epochs 10 --leave-epochs-of valid"
    state["cfg"]["task"]["_name"] = "vaswani_translation"  # the README's training: fairseq's translation task
    for limits, command, decision in [
        ((trained, 0), timed + leave, "finished"),
        ((trained + 1, 0), timed + leave, f"resume {updates}"),
        ((trained, 0), timed, f"resume {updates}"),
        ((0, updates), counted + leave, "finished"),
        ((0, updates + 1), counted + leave, f"resume {updates}"),
        ((0, updates), counted, f"resume {updates}"),
    ]:
        state["cfg"]["task"]["leave_epochs"], state["cfg"]["task"]["leave_epochs_of"] = 10, "valid"
        state["cfg"]["optimization"]["stop_time_hours"] = limits[0] / 3600
        state["cfg"]["optimization"]["max_update"] = limits[1]
        torch.save(state, tmp_path / "checkpoint_last.pt")
        assert plan_decision(command, capsys) == decision, (limits, command)


def test_a_folder_names_the_optimizer_its_checkpoints_trained_under(reversal_training, tmp_path, capsys):
    """What the recipes ask before choosing the optimizer of a run that goes on (test_recipes.py): the README's
    training's vaswani_adam; adam for a run started under fairseq's; nothing for a folder without checkpoints."""
    save_dir, _ = reversal_training
    state = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)
    state["cfg"]["optimizer"]["_name"] = "adam"
    cut_to_half(save_dir / "checkpoint_last.pt", tmp_path / "checkpoint_last.pt")  # unreadable: the newest intact
    torch.save(state, tmp_path / "checkpoint_1_6.pt")
    for folder, expected in ((save_dir, "vaswani_adam"), (tmp_path, "adam"), (tmp_path / "none", "")):
        folder.mkdir(exist_ok=True)
        resume_main(["--optimizer", str(folder)])
        assert capsys.readouterr().out == expected + "\n"


def test_a_run_in_progress_goes_on_in_the_precision_its_checkpoints_trained_in(
    reversal_training, tmp_path, monkeypatch
):
    """recipes/training.py's precision with PRECISION unset, for a folder whose checkpoints trained in float32 (the
    README's training) or under fairseq's --fp16: the checkpoints' precision, named as the reason; set, PRECISION's
    (the re-run table then decides: test_a_training_plan_resumes_only_what_its_checkpoints_allow)."""
    save_dir, _ = reversal_training
    state = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)
    state["cfg"]["common"]["fp16"] = True
    torch.save(state, tmp_path / "checkpoint_last.pt")
    assert trained_precision(trained_config(save_dir)) == "fp32"
    assert trained_precision(trained_config(tmp_path)) == "fp16"
    assert trained_config(tmp_path / "none") is None
    run = stages.Run(tmp_path / "work", rank=0, name="node 0", launch_id="job", workers=8)
    for name in ("PRECISION", "FP16", "BF16"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DEVICE_ARGS", "--distributed-world-size 8")  # GPUs (no --cpu)
    why = "PRECISION unset: the precision its checkpoints trained in"
    assert training.precision(run, "fp16") == ("fp16", why)
    assert training.precision(run, "fp32") == ("fp32", why)
    monkeypatch.setenv("BF16", "1")
    assert training.precision(run, "fp16") == ("bf16", "")


def test_a_plan_without_checkpoints_runs(training_plan, tmp_path, capsys):
    assert plan_decision(f"{training_plan} --save-dir {tmp_path}", capsys) == "run"


def test_plan_with_repair_first_makes_a_cut_off_checkpoint_last_resumable(
    training_plan, reversal_training, tmp_path, capsys
):
    """The recipes decide and repair in one command (--plan --repair): the cut-off file kept aside, the newest intact
    interval checkpoint (update 4 of 6) in its place, and training resumes from it."""
    save_dir, _ = reversal_training
    for path in save_dir.glob("checkpoint_*_*.pt"):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    cut_to_half(save_dir / "checkpoint_last.pt", tmp_path / "checkpoint_last.pt")
    assert plan_decision(f"{training_plan} --max-update 9 --save-dir {tmp_path}", capsys, "--repair") == "resume 4"
    err = capsys.readouterr().err
    assert f"{PROG}: resuming from checkpoint_2_4.pt (update 4), copied to checkpoint_last.pt" in err
    assert torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)["optimizer_history"][-1]["num_updates"] == 4
