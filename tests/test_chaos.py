"""benchmarks/chaos.py's pieces on stand-in recipes (a few lines of bash with the recipes' stage lines): where its
instants go, the stage a signal lands in, what counts as a stop that ended as it should, and what differs between
two runs' outputs. The benchmark's own recipe runs, a small seeded version of them: tests/test_resume.py."""

import dataclasses
import os
import shlex
import signal
from pathlib import Path

import chaos
import pytest
import torch
from doc_blocks import block, commands

# A recipe of four stages of SECONDS each (LONG: 60 s), a sleep as a job its shell waits for (so that a trap runs at
# once), each skipped once its marker is in WORK_DIR, then its scores. STOP: the trap's last command (exit 75, after
# the recipes' line); BACKGROUND: a command started first, which outlives the shell unless the group is killed.
STAND_IN = """
say() { echo "[stand_in $(date +%H:%M:%S)] $*" >&2; }
trap 'kill $! 2> /dev/null; echo "stand_in: stopped: stage $stage stopped by SIGTERM; run the same command again" >&2
      '"$STOP" TERM
eval "$BACKGROUND"
for stage in prepare train average translate; do
    if [ -e "$WORK_DIR/$stage" ]; then say "stage $stage: done before, skipped"; continue; fi
    say "stage $stage: starting"
    seconds=$SECONDS_EACH && [ "$stage" != "$LONG" ] || seconds=60
    echo "$stage is $seconds s long"
    sleep "$seconds" & wait $!
    touch "$WORK_DIR/$stage" && say "stage $stage: finished"
done
echo "H-0	-0.5	a translation" > "$WORK_DIR/out.txt"
echo "BLEU = 1.0" | tee "$WORK_DIR/out.txt.bleu"
"""


def stand_in(tmp_path, seconds=0.2, long="", stop="exit 75", background=":") -> chaos.Run:
    work = tmp_path / "work"
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, WORK_DIR=str(work), SECONDS_EACH=str(seconds), LONG=long, STOP=stop, BACKGROUND=background)
    return chaos.Run(["bash", "-c", STAND_IN], env, "stand_in", work, tmp_path / "data", "out.txt")


@pytest.fixture(autouse=True)
def quick_look_for_processes_left(monkeypatch):
    """Processes left in a stand-in's group counted after half a second (the benchmark's recipes: 5 s)."""
    look = chaos.group_left
    monkeypatch.setattr(chaos, "group_left", lambda group: look(group, wait=0.5))


def test_every_stage_gets_its_share_of_the_instants_in_the_order_of_the_stages():
    instants = chaos.plan(1, 12)
    stages = [instant.stage for instant in instants]
    assert stages == sorted(stages, key=chaos.STAGES.index)
    assert sorted(stages.count(stage) for stage in chaos.STAGES) == [2, 2, 2, 3, 3]
    assert all(0 <= instant.fraction < 1 and instant.signal == "KILL" for instant in instants)
    assert chaos.plan(1, 12) == instants and chaos.plan(2, 12) != instants  # seeded
    stops = chaos.plan(1, 40, ("TERM", "USR1"))
    assert {instant.signal for instant in stops} == {"TERM", "USR1"}


def test_events_are_the_unbroken_runs_lines_drawn_in_the_order_it_printed_them():
    out = "".join(f"| train_inner | epoch 001: num_updates={k}, lr=1\n" for k in range(1, 9)) + "BLEU (t) = 0.0\n"
    err = "[1/7] download: x\n[2/7] extract: y\n[r 01:02:03] stage average: starting\n" + (
        "INFO:fairseq_cli.generate:loading model(s) from c.pt\n[r 01:02:04] stage translate: finished\n"
    )
    events = chaos.counted_events(err, out)
    assert events["prepare"] == ["[1/7] download:", "[2/7] extract:"]
    assert events["train"] == [f"num_updates={k}, " for k in range(1, 9)]
    assert events["average"] == ["stage average: starting"] and events["translate"] == ["loading model(s) from"]
    assert events["score"] == ["stage translate: finished", "BLEU ("]  # stderr's, then stdout's
    instants = chaos.plan(3, 10, events=events)
    train = [events["train"].index(instant.event) for instant in instants if instant.stage == "train"]
    assert len(train) == 2 and train == sorted(train)


def test_the_stage_lines_move_a_run_on_and_never_back():
    lines = [
        ("[wmt14_en_de_big 01:02:03] no GPU: training on CPU because CPU=1", "prepare"),
        ("[wmt14_en_de_big 01:02:03] stage prepare: python -m prepare.wmt14 --pair en-de", "prepare"),
        ("[wmt14_en_de_big 01:02:09] stage train: resuming from update 4", "train"),
        ("[wmt14_en_de_big 01:02:16] stage average: done before, skipped", "average"),
        ("2026-12-02 01:08:13 | INFO | stage prepare: a line of another program", "average"),
        ("[wmt14_en_de_big 01:02:18] stage translate: running again", "translate"),
        ("[wmt14_en_de_big 01:02:18] stage train: a late line", "translate"),
        ("[quickstart 01:02:24] stage translate: done before, skipped", "score"),
    ]
    stage = 0
    for line, expected in lines:
        stage = chaos.stage_after(line, stage)
        assert chaos.STAGES[stage] == expected, line


def test_a_kill_lands_at_its_fraction_of_the_stage_and_leaves_no_process(tmp_path):
    run = stand_in(tmp_path, long="prepare", background="sleep 60 &")
    times = dict.fromkeys(chaos.STAGES, 2.0)
    done = chaos.attempt(run, tmp_path / "logs" / "1", chaos.Instant("prepare", fraction=0.5), times)
    assert done.status == -signal.SIGKILL and done.landed == "prepare" and done.left == []
    assert done.sent >= done.entered[0] + 1.0
    assert chaos.judged(run, chaos.Instant("prepare"), done) == ("killed (status -9)", "interrupted")
    assert "prepare is 60 s long" in done.output()[0]


def test_a_stop_ends_as_it_should_only_with_75_the_line_and_no_process_left(tmp_path):
    instant = chaos.Instant("train", event="train is", signal="TERM")
    for name, stop, background, verdict in [
        ("stopped", "exit 75", ":", "interrupted"),
        ("status 0", "exit 0", ":", "failed"),
        ("left", "exit 75", "sleep 60 &", "failed"),
    ]:
        run = stand_in(tmp_path / name, long="train", stop=stop, background=background)
        done = chaos.attempt(run, tmp_path / name / "logs", instant)
        what, judged = chaos.judged(run, instant, done)
        assert (done.landed, judged) == ("train", verdict), what
        assert what.startswith(f"status {75 if stop == 'exit 75' else 0}: stand_in: stopped: stage train stopped by")
        assert ("processes left" in what) == (name == "left")
    assert not chaos.stop_line("stand_in", "USR1").match(done.last_line())  # another signal's line


def test_a_run_that_fails_on_its_own_or_ends_first_is_no_interruption(tmp_path):
    run, late = stand_in(tmp_path, seconds=0), chaos.Instant("score", fraction=0.99)
    done = chaos.attempt(run, tmp_path / "logs" / "1", late, dict.fromkeys(chaos.STAGES, 60.0))
    assert done.sent is None and chaos.judged(run, late, done)[1] == "missed"
    broken = dataclasses.replace(run, command=["bash", "-c", "echo 'stand_in: error: no data' >&2; exit 1"])
    done = chaos.attempt(broken, tmp_path / "logs" / "2", late)
    what, verdict = chaos.judged(broken, late, done)
    assert verdict == "failed" and "status 1" in what and what.endswith("stand_in: error: no data"), what


def test_a_series_runs_the_command_again_after_each_interruption_and_compares_at_the_end(tmp_path):
    """Killed in train, stopped in translate: each re-run skips the stages done before, the last one finishes."""
    reference = stand_in(tmp_path / "reference", seconds=0)
    assert chaos.attempt(reference, tmp_path / "reference.log").status == 0
    run, said = stand_in(tmp_path / "run", seconds=0.5), []
    for path in (reference, run):  # the other outputs the comparison reads, equal
        outputs(path.work.parent, made=False)
    instants = [
        chaos.Instant("train", event="train is"),
        chaos.Instant("translate", event="translate is", signal="TERM"),
    ]
    done = chaos.series(run, reference, instants, tmp_path / "logs", seed=7, say=said.append)
    assert [verdict for *_, verdict in done.done] == ["interrupted", "interrupted"] and done.ok, said
    assert [attempt.landed for _, attempt, *_ in done.done] == ["train", "translate"]
    assert all(part in said[0] for part in ("seed 7", "SIGKILL", "'train is'")), said[0]
    assert done.final.status == 0 and not done.differ, said[-1]
    skipped = done.final.output()[1]
    assert all(f"stage {stage}: done before, skipped" in skipped for stage in ("prepare", "train", "average"))
    assert "| 7 | kills (SIGKILL 1, SIGTERM 1) | 2 | 0 | 1 | 0 | 1 | 0 | 0 | 0 | equal |" in chaos.table([done], {})


def outputs(folder: Path, hypothesis="a translation", bleu="BLEU = 1.0", weight=1.0, data=b"\x01\x02", made=True):
    """FOLDER's work/ and data/ as a recipe leaves them, with these values; MADE=False: the translations and scores
    left as they are."""
    (folder / "work" / "checkpoints").mkdir(parents=True, exist_ok=True)
    (folder / "data" / "data-bin").mkdir(parents=True)
    if made:
        (folder / "work" / "out.txt").write_text(f"S-0\tsource\nH-0\t-0.5\t{hypothesis}\nD-0\t-0.5\t{hypothesis}\n")
        (folder / "work" / "out.txt.bleu").write_text(f"{bleu}\nsacreBLEU = 1.0 nrefs:1\nsentences = 1\n")
    model = {"encoder.weight": torch.full((2, 2), weight), "decoder.bias": torch.zeros(2)}
    torch.save({"model": model}, folder / "work" / "checkpoints" / "checkpoint_average.pt")
    (folder / "data" / "data-bin" / "train.en-de.en.bin").write_bytes(data)
    (folder / "data" / "data-bin" / "preprocess.log").write_text(f"destdir='{folder}/data/data-bin'\n")
    return chaos.Run([], {}, "stand_in", folder / "work", folder / "data", "out.txt")


def test_outputs_differ_by_a_hypothesis_a_bleu_line_a_tensor_bit_or_a_data_byte(tmp_path):
    reference, same = outputs(tmp_path / "reference"), outputs(tmp_path / "same")
    assert chaos.differences(reference, same) == []  # preprocess.log's folders aside
    one_bit = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0)).item()
    for name, change, expected in [
        ("hypothesis", dict(hypothesis="another"), "hypotheses (out.txt): 1 of 1 differ"),
        ("bleu", dict(bleu="BLEU = 1.1"), "BLEU lines (out.txt.bleu): 1 of 2 differ"),
        ("tensor", dict(weight=one_bit), "checkpoints/checkpoint_average.pt: 1 of 2 tensors differ (encoder.weight)"),
        ("data", dict(data=b"\x01\x03"), "data-bin: 1 of 1 files differ (data-bin/train.en-de.en.bin)"),
    ]:
        assert chaos.differences(reference, outputs(tmp_path / name, **change)) == [expected], name
    (same.work / "checkpoints" / "checkpoint_average.pt").unlink()
    (same.work / "out.txt").unlink()
    assert chaos.differences(reference, same) == [
        "hypotheses (out.txt): 1 of 1 differ",
        "no checkpoints/checkpoint_average.pt",
    ]


def test_the_documented_commands_plan_at_least_50_kills_and_20_stops():
    """docs/results.md's commands, read by the benchmark's parser: seeds times kills, and times stops."""
    planned = {"kills": 0, "stops": 0}
    for command in commands(block("docs/results.md", "test:chaos")):
        words = shlex.split(command)
        assert words[:2] == ["python", "benchmarks/chaos.py"], command
        args = chaos.parser().parse_args(words[2:])
        assert args.recipe == "wmt14_en_de_big" and args.at == "fractions"
        for kind in planned:
            planned[kind] += len(args.seeds) * getattr(args, kind)
    assert planned["kills"] >= 50 and planned["stops"] >= 20, planned
