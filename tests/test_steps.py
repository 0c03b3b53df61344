"""prepare/steps.py: the steps of a preparation: which of them run, row by row of its rule, on files in a folder;
and that stamps written before the engine (prepare/wsj_parsing.py's own `run_stage` wrote {"params", "result"} too)
read as done."""

import json

import pytest

from prepare.steps import Step, run_steps


def chain(folder, ran, settings=None):
    """Three steps a -> b -> c, each writing its output file from the one before (c reads b's, b reads a's)."""
    settings = settings or {}
    files = {name: folder / f"{name}.txt" for name in "abc"}

    def runner(name, source):
        def run():
            ran.append(name)
            files[name].write_text(name + (source.read_text() if source else ""))
            return {"made": name}

        return run

    return [
        Step("a", "first", {"n": settings.get("a", 1)}, [], [files["a"]], runner("a", None)),
        Step("b", "second", {"n": settings.get("b", 1)}, [files["a"]], [files["b"]], runner("b", files["a"])),
        Step("c", "third", {"n": settings.get("c", 1)}, [files["b"]], [files["c"]], runner("c", files["b"])),
    ]


@pytest.fixture
def done(tmp_path):
    """A folder whose three steps have all run once."""
    ran = []
    run_steps(chain(tmp_path, ran), tmp_path / ".stamps", {})
    assert ran == ["a", "b", "c"]
    return tmp_path


def again(folder, settings=None):
    ran, results = [], {}
    run_steps(chain(folder, ran, settings), folder / ".stamps", results)
    assert results == {name: {"made": name} for name in "abc"}  # run or read from the stamps
    return ran


def test_nothing_runs_again_when_every_stamp_holds_the_same_settings(done, capsys):
    assert again(done) == []
    assert "[2/3] b: second: done before, skipping (stamp " in capsys.readouterr().err


def test_a_changed_setting_runs_its_step_and_every_later_one(done, capsys):
    assert again(done, {"b": 2}) == ["b", "c"]
    assert "[2/3] b: second: settings changed, running it again" in capsys.readouterr().err
    assert again(done, {"b": 2}) == []


@pytest.mark.parametrize("damage", ["missing", "damaged", "without settings"])
def test_a_missing_or_damaged_stamp_runs_its_step_and_every_later_one(done, damage):
    stamp = done / ".stamps" / "b.json"
    {"missing": stamp.unlink, "damaged": lambda: stamp.write_text('{"params": '),
     "without settings": lambda: stamp.write_text("{}")}[damage]()  # fmt: skip
    assert again(done) == ["b", "c"]


def test_an_intermediate_output_may_go_once_used(done):
    (done / "a.txt").unlink()  # b has read it; nothing that runs needs it
    assert again(done) == []


def test_the_last_steps_output_gone_runs_it(done):
    (done / "c.txt").unlink()
    assert again(done) == ["c"]


def test_a_step_that_runs_brings_back_the_outputs_it_reads_that_are_gone(done, capsys):
    (done / "a.txt").unlink()
    (done / "c.txt").unlink()  # c runs and reads b's output, which is there: a stays skipped
    assert again(done) == ["c"]
    (done / "b.txt").unlink()
    (done / "c.txt").unlink()  # c reads b's, gone; b reads a's, gone: from a
    assert again(done) == ["a", "b", "c"]
    assert "[1/3] a: first: its output is gone, running it again" in capsys.readouterr().err


def test_stamps_written_before_the_engine_read_as_done(tmp_path):
    """prepare/wsj_parsing.py's run_stage and prepare/wmt14.py's driver wrote STAMPS/NAME.json as
    {"params": ..., "result": ...}: a prepared folder is neither redone nor refused."""
    ran = []
    for step in chain(tmp_path, ran):
        step.outputs[0].write_text(step.name)
        (tmp_path / ".stamps").mkdir(exist_ok=True)
        (tmp_path / ".stamps" / f"{step.name}.json").write_text(
            json.dumps({"params": step.params, "result": {"made": step.name}})
        )
    assert again(tmp_path) == []


def test_a_step_killed_midway_leaves_no_later_stamp_that_claims_done(done):
    """The later stamps go before the first step runs: a preparation killed in b re-runs b and c."""
    broken = chain(done, [], {"b": 2})
    broken[1].run = lambda: 1 / 0
    with pytest.raises(ZeroDivisionError):
        run_steps(broken, done / ".stamps", {})
    assert sorted(path.name for path in (done / ".stamps").iterdir()) == ["a.json"]
    assert again(done, {"b": 2}) == ["b", "c"]
