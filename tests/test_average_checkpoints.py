"""`python -m vaswani_plugin.checkpoints.average`: checkpoint averaging of §6.1. The documented commands, on a real
training's checkpoints and then decoded: tests/test_doc_commands.py and tests/test_fairseq_commands.py."""

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from vaswani_plugin.checkpoints.average import average_checkpoints, last_checkpoints, main
from vaswani_plugin.errors import VaswaniConfigError


def average(*args, cwd, check=True):
    """The command as a user runs it: a process of its own (for its exit status and stderr)."""
    result = subprocess.run(
        [sys.executable, "-m", "vaswani_plugin.checkpoints.average", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and result.returncode != 0:
        raise AssertionError(result.stderr[-3000:])
    return result


def average_here(*args, cwd, monkeypatch, capsys):
    """The command's main in this process (what it writes and prints), without a 4.5 s start-up of fairseq."""
    monkeypatch.chdir(cwd)
    main([str(arg) for arg in args])
    return SimpleNamespace(stdout=capsys.readouterr().out)


def fake_checkpoint(path, seed, updates, **model):
    generator = torch.Generator().manual_seed(seed)
    state = {
        "model": {
            "weight": torch.randn(3, 4, generator=generator),
            "half": torch.randn(5, generator=generator).half(),
            "count": torch.tensor([seed]),
            **model,
        },
        "cfg": {"updates": updates},
        "last_optimizer_state": {"state": torch.zeros(3)},
        "optimizer_history": [{"num_updates": updates}],
    }
    torch.save(state, path)
    return state


def test_two_checkpoints_average_to_the_elementwise_mean(tmp_path, monkeypatch, capsys):
    first = fake_checkpoint(tmp_path / "a.pt", 1, 100)["model"]
    second = fake_checkpoint(tmp_path / "b.pt", 2, 200)["model"]
    result = average_here(
        "--inputs", "a.pt", "b.pt", "--output", "out/avg.pt", cwd=tmp_path, monkeypatch=monkeypatch, capsys=capsys
    )
    assert result.stdout.splitlines() == [
        "averaged 2 checkpoints (optimizer state dropped) into out/avg.pt:",
        "  a.pt",
        "  b.pt",
    ]
    averaged = torch.load(tmp_path / "out" / "avg.pt", weights_only=True)
    mean = (first["weight"].double() + second["weight"].double()) / 2
    assert torch.equal(averaged["model"]["weight"], mean.float())
    assert averaged["model"]["weight"].dtype == torch.float32
    assert averaged["model"]["half"].dtype == torch.float16
    assert torch.equal(averaged["model"]["half"], ((first["half"].double() + second["half"].double()) / 2).half())
    assert averaged["model"]["count"].tolist() == [2]  # not floating point: the newest one's
    assert averaged["cfg"] == {"updates": 200} and "last_optimizer_state" not in averaged
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["avg.pt"]  # no temporary file left


def test_selection_is_by_update_number_not_by_name(tmp_path):
    for name in [
        "checkpoint_5_9000.pt",
        "checkpoint_5_10000.pt",
        "checkpoint_4_8000.pt",
        "checkpoint_5_900.pt",
        "checkpoint_last.pt",
        "checkpoint_best.pt",
        "checkpoint9.pt",
        "checkpoint10.pt",
        "checkpoint2.pt",
        "checkpoint_5_9500.pt.tmp",
    ]:
        (tmp_path / name).touch()
    assert [p.name for p in last_checkpoints(tmp_path, 2, "update")] == [
        "checkpoint_5_9000.pt",
        "checkpoint_5_10000.pt",
    ]
    assert [p.name for p in last_checkpoints(tmp_path, 3, "update")] == [
        "checkpoint_4_8000.pt",
        "checkpoint_5_9000.pt",
        "checkpoint_5_10000.pt",
    ]
    assert [p.name for p in last_checkpoints(tmp_path, 2, "epoch")] == ["checkpoint9.pt", "checkpoint10.pt"]
    with pytest.raises(VaswaniConfigError, match=r"--num-update-checkpoints 5 asks for more than the 4 "):
        last_checkpoints(tmp_path, 5, "update")


def test_errors_are_one_line(tmp_path):
    fake_checkpoint(tmp_path / "checkpoint_1_10.pt", 1, 10)
    result = average(
        "--inputs", tmp_path, "--num-update-checkpoints", "2", "--output", "avg.pt", cwd=tmp_path, check=False
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"vaswani_plugin.checkpoints.average: error: --num-update-checkpoints 2 asks for more than the 1 "
        f"checkpoint_<epoch>_<updates>.pt files in {tmp_path}"
    )
    assert not (tmp_path / "avg.pt").exists()
    fake_checkpoint(tmp_path / "extra.pt", 2, 20, bias=torch.zeros(2))
    with pytest.raises(VaswaniConfigError, match="extra.pt has other parameters than .*: bias"):
        average_checkpoints([tmp_path / "checkpoint_1_10.pt", tmp_path / "extra.pt"])
    fake_checkpoint(tmp_path / "wide.pt", 3, 30, weight=torch.zeros(3, 5))
    with pytest.raises(VaswaniConfigError, match=r"weight has shape \(3, 5\) in .*wide.pt but \(3, 4\) in"):
        average_checkpoints([tmp_path / "checkpoint_1_10.pt", tmp_path / "wide.pt"])
