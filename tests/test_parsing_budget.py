"""benchmarks/parsing_budget.py: a parsing run's kept checkpoints as budgets. On test_wsj_parsing's LDC-layout run
(4 updates, 2 an epoch): the whole run as one budget gives the recipe's own checkpoint and dev F1; the checkpoints a
budget takes, and its one-line errors, on files of the test's."""

import re
import shutil
import subprocess
import sys

import pytest
import torch
from cli_helpers import REPO, benchmark
from test_recipes import NEEDS_CPU_PATH
from test_wsj_parsing import SHORT_OUTPUTS

sys.path.insert(0, str(REPO / "benchmarks"))  # parsing_budget.py imports its neighbours by name
budget = benchmark("parsing_budget")


@pytest.mark.e2e
@NEEDS_CPU_PATH
@pytest.mark.lane("wsj_ldc_run")
def test_the_whole_run_as_one_budget_is_the_recipes_average_and_f1(lane, tmp_path):
    root, _ = lane["wsj_ldc_run"].result()
    work = tmp_path / "work"
    shutil.copytree(root / "work", work, symlinks=True)
    # Its updates 2 and 4 end epochs (no interval checkpoint: the recipe decoded checkpoint_last.pt), so update 4's
    # interval checkpoint is made here, a copy, and averaged alone.
    shutil.copy(work / "checkpoints" / "checkpoint_last.pt", work / "checkpoints" / "checkpoint_2_4.pt")
    minutes = budget.logged_walls(work / "checkpoints" / "train.log")[-1][1] / 60
    done = subprocess.run(
        [sys.executable, REPO / "benchmarks" / "parsing_budget.py", work, "--minutes", str(minutes), "--average", "1",
         "--splits", "valid", f"--generate-args={SHORT_OUTPUTS}"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    recipe = (work / "valid.f1.number").read_text().strip()
    assert done.stdout.rstrip().endswith(f"| {minutes:g} minutes | 4 | {float(recipe):.2f} |")
    out = work / "budget" / f"{minutes:g}min"
    assert (out / "valid.generate.txt").read_text() == (work / "valid.generate.txt").read_text()
    paths = out / "average.pt", work / "checkpoints" / "checkpoint_average.pt"
    ours, theirs = (torch.load(path, weights_only=True)["model"] for path in paths)
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[name], theirs[name]) for name in ours)


def test_a_budget_takes_the_last_checkpoints_saved_by_then_or_says_why_not(tmp_path):
    for update in range(50, 401, 50):
        (tmp_path / f"checkpoint_{update // 200 + 1}_{update}.pt").touch()
    walls = [(update, update // 2) for update in range(10, 411, 10)]  # 2 updates a second: 205 s in all
    names = ["checkpoint_2_250.pt", "checkpoint_2_300.pt", "checkpoint_2_350.pt"]  # 3 minutes: update 360
    assert [path.name for path in budget.chosen(tmp_path, walls, 3, 3)] == names
    with pytest.raises(SystemExit, match=f"the run in {tmp_path} trained 3.4 minutes: it holds no budget of 4$"):
        budget.chosen(tmp_path, walls, 4, 3)
    keep = re.escape(budget.KEEP) + "$"
    few = f"by 1 minutes \\(update 120\\) {tmp_path} holds 2 interval checkpoints, fewer than --average 3{keep}"
    with pytest.raises(SystemExit, match=few):
        budget.chosen(tmp_path, walls, 1, 3)
    (tmp_path / "checkpoint_2_300.pt").unlink()  # as fairseq skips one that ends an epoch
    skipped = ["checkpoint_2_200.pt", "checkpoint_2_250.pt", "checkpoint_2_350.pt"]
    assert [path.name for path in budget.chosen(tmp_path, walls, 3, 3)] == skipped
    (tmp_path / "checkpoint_2_250.pt").unlink()
    gone = f"some checkpoints between updates 150 and 360 are gone from {tmp_path}{keep}"
    with pytest.raises(SystemExit, match=gone):
        budget.chosen(tmp_path, walls, 3, 3)
    (tmp_path / "checkpoint_2_350.pt").unlink()
    with pytest.raises(SystemExit, match=gone.replace("150", "100")):
        budget.chosen(tmp_path, walls, 3, 3)
