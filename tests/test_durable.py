"""vaswani_plugin/durable.py: writes that survive a node's crash. Fault injection at the write's boundaries (an error
or a kill between the write and the rename, and between the rename and the folder's fsync): the file holds its old
content or its new one, whole, and the re-run writes it again. A kill is not a power loss (the page cache survives
it): what a crash keeps is the order of the calls, checked with a spy at each call site that matters, fsync of the
file, then the rename, then fsync of the folder: the plugin's checkpoints, fairseq-train's (checkpoint_N.pt and its
copy to checkpoint_last.pt), resume's repair, a stage record, a preparation step's files and stamp, a stage's
outputs before its record says it finished."""

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch

from prepare import records
from prepare.steps import Step, run_steps
from vaswani_plugin import durable, stage_records
from vaswani_plugin.checkpoints import resume, storage
from vaswani_plugin.training.watchdog import Watchdog

OLD, NEW = b"old " * 50_000, b"new " * 250_000  # 1 MB: written in pieces


def write_in_pieces(file, content=NEW, pieces=10):
    step = len(content) // pieces
    for start in range(0, len(content), step):
        file.write(content[start : start + step])


# -- an error at a boundary ------------------------------------------------------------------------------------
def failing(monkeypatch, boundary):
    """os.replace or the folder's fsync made to raise at `boundary`."""
    if boundary == "before the rename":

        def replace(source, target):
            raise OSError("injected: before the rename")

        monkeypatch.setattr(os, "replace", replace)
    elif boundary == "before the folder's fsync":
        fsync = os.fsync

        def folder_fsync(descriptor):
            if os.path.isdir(f"/proc/self/fd/{descriptor}"):
                raise OSError("injected: before the folder's fsync")
            fsync(descriptor)

        monkeypatch.setattr(os, "fsync", folder_fsync)
    else:

        def write(file):
            write_in_pieces(file, NEW[: len(NEW) // 2], 5)
            raise OSError("injected: while writing")

        return write
    return write_in_pieces


@pytest.mark.parametrize("boundary", ["while writing", "before the rename", "before the folder's fsync"])
def test_an_error_at_a_boundary_leaves_the_old_file_or_the_new_one_whole(boundary, tmp_path, monkeypatch):
    path = tmp_path / "checkpoint_last.pt"
    path.write_bytes(OLD)
    with monkeypatch.context() as patched:
        write = failing(patched, boundary)
        with pytest.raises(OSError, match="injected"):
            durable.write_atomically(path, write)
    assert path.read_bytes() == (NEW if boundary == "before the folder's fsync" else OLD)
    assert durable.temporaries(path) == []  # a write that raised removes its temporary
    durable.write_atomically(path, write_in_pieces)  # the re-run
    assert path.read_bytes() == NEW


# -- a kill at a boundary: a process of its own, os._exit at the boundary ----------------------------------------
KILLED = textwrap.dedent("""
    import os, sys
    from vaswani_plugin import durable  # as prepare/ and recipes/ import it: no fairseq
    path, boundary = sys.argv[1], sys.argv[2]
    new, replace = b"new " * 250_000, os.replace

    def write(file):
        for start in range(0, len(new), len(new) // 10):
            file.write(new[start : start + len(new) // 10])
            if boundary == "while writing" and start >= len(new) // 2:
                file.flush()
                os._exit(9)

    def killed_replace(source, target):
        if boundary == "before the folder's fsync":
            replace(source, target)
        os._exit(9)

    os.replace = killed_replace
    durable.write_atomically(path, write)
""")


@pytest.mark.parametrize("boundary", ["while writing", "before the rename", "before the folder's fsync"])
def test_a_kill_at_a_boundary_leaves_the_old_file_or_the_new_one_and_the_rerun_writes_again(boundary, tmp_path):
    path = tmp_path / "record.json"
    path.write_bytes(OLD)
    killed = subprocess.run([sys.executable, "-c", KILLED, str(path), boundary], capture_output=True)
    assert killed.returncode == 9, killed.stderr.decode()[-2000:]
    assert path.read_bytes() == (NEW if boundary == "before the folder's fsync" else OLD)
    left = durable.temporaries(path)
    assert len(left) == (0 if boundary == "before the folder's fsync" else 1)  # the kill's, never read
    durable.write_atomically(path, write_in_pieces)  # the re-run: a name of its own, the leftover ignored
    assert path.read_bytes() == NEW and durable.temporaries(path) == left


def test_resume_removes_checkpoint_lasts_leftover_temporaries(tmp_path):
    last = tmp_path / "checkpoint_last.pt"
    torch.save({"model": {}}, last)
    killed = subprocess.run([sys.executable, "-c", KILLED, str(last), "while writing"], capture_output=True)
    assert killed.returncode == 9 and len(durable.temporaries(last)) == 1
    resume.resume(tmp_path)
    assert durable.temporaries(last) == [] and storage.load_checkpoint(last) == {"model": {}}


# -- the order of the calls, at each call site -----------------------------------------------------------------
@pytest.fixture
def calls(monkeypatch):
    """Every os.fsync (the file or folder it synced) and os.replace (source, target), in order."""
    found = []
    fsync, replace = os.fsync, os.replace

    def spy_fsync(descriptor):
        found.append(("fsync", os.path.realpath(f"/proc/self/fd/{descriptor}")))
        fsync(descriptor)

    def spy_replace(source, target):
        found.append(("replace", os.path.realpath(source), os.path.realpath(target)))
        replace(source, target)

    monkeypatch.setattr(os, "fsync", spy_fsync)
    monkeypatch.setattr(os, "replace", spy_replace)
    return found


def written_durably(calls, path) -> bool:
    """The last write of `path`: its temporary fsynced, renamed over it, then its folder fsynced."""
    path = os.path.realpath(path)
    renames = [i for i, call in enumerate(calls) if call[0] == "replace" and call[2] == path]
    if not renames:
        return False
    at = renames[-1]
    synced = ("fsync", calls[at][1]) in calls[:at]
    return synced and ("fsync", os.path.dirname(path)) in calls[at + 1 :]


def synced_before(calls, paths, record) -> bool:
    """Each of `paths` (a file or folder) fsynced, and its folder, before `record` was renamed into place."""
    record = os.path.realpath(record)
    at = max(i for i, call in enumerate(calls) if call[0] == "replace" and call[2] == record)
    done = {call[1] for call in calls[:at] if call[0] == "fsync"}
    paths = [os.path.realpath(path) for path in paths]
    return all(path in done and os.path.dirname(path) in done for path in paths)


def test_the_spy_tells_a_durable_write_from_one_without_a_folder_fsync_or_with_fsync_after_the_rename(tmp_path, calls):
    path = tmp_path / "file"
    durable.write_atomically(path, write_in_pieces)
    assert written_durably(calls, path)
    calls.clear()
    durable.write_atomically(path, write_in_pieces, durable=False)
    assert not written_durably(calls, path)
    calls[:] = [("replace", "/t/.f.tmp", str(path)), ("fsync", "/t/.f.tmp"), ("fsync", str(tmp_path))]
    assert not written_durably(calls, path)


def test_the_plugins_checkpoints_and_resumes_repair_are_written_durably(tmp_path, calls):
    average = tmp_path / "checkpoint_average.pt"
    storage.save_atomically({"model": {"w": torch.ones(2)}}, average)
    assert written_durably(calls, average)
    last = tmp_path / "checkpoint_last.pt"
    storage.copy_atomically(average, last)
    assert written_durably(calls, last) and last.read_bytes() == average.read_bytes()


def test_fairseq_trains_checkpoint_and_its_checkpoint_last_copy_are_written_durably(tmp_path, calls):
    """fairseq's own checkpoint_utils.save_checkpoint and Trainer.save_checkpoint, on a trainer that holds a
    tensor: checkpoint_1_4.pt written, then copied to checkpoint_last.pt, each through the plugin's durable write
    (installed by register(), which conftest's import of the package ran)."""
    from fairseq import checkpoint_utils
    from fairseq.dataclass.configs import CheckpointConfig
    from fairseq.trainer import Trainer

    class TinyTrainer:
        data_parallel_rank, checkpoint_suffix, task = 0, "", None
        should_save_checkpoint_on_current_rank, always_call_state_dict_during_save_checkpoint = True, False
        cfg = SimpleNamespace(checkpoint=SimpleNamespace(write_checkpoints_asynchronously=False))
        save_checkpoint = Trainer.save_checkpoint  # fairseq's: checkpoint_utils.torch_persistent_save

        def consolidate_optimizer(self):
            pass

        def get_num_updates(self):
            return 4

        def state_dict(self):
            return {"model": {"w": torch.ones(3)}, "extra_state": {}}

    epoch = SimpleNamespace(epoch=1, end_of_epoch=lambda: False, state_dict=lambda: {})
    config = CheckpointConfig(save_dir=str(tmp_path), save_interval_updates=2)
    checkpoint_utils.save_checkpoint(config, TinyTrainer(), epoch, None)
    interval, last = tmp_path / "checkpoint_1_4.pt", tmp_path / "checkpoint_last.pt"
    assert written_durably(calls, interval) and written_durably(calls, last)
    assert torch.equal(storage.load_checkpoint(last)["model"]["w"], torch.ones(3))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint_1_4.pt", "checkpoint_last.pt"]


def test_a_stage_record_is_written_durably(tmp_path, calls):
    path = stage_records.record_path(tmp_path, "train")
    records.start(tmp_path, "train", None, "python -m fairseq_cli.train data")
    assert written_durably(calls, path)
    calls.clear()
    records.finish(tmp_path, "train")
    assert written_durably(calls, path) and stage_records.read(path)["finished"]


def test_a_stages_outputs_are_on_disk_before_its_record_says_it_finished(tmp_path, calls):
    translations = tmp_path / "translate" / "test.hyp"
    records.start(tmp_path, "translate", None, "translate", outputs=[translations, tmp_path / "pictures"])
    translations.parent.mkdir()
    translations.write_text("written by fairseq-generate's redirection\n")  # another program's, unsynced
    calls.clear()
    records.finish(tmp_path, "translate")
    assert synced_before(calls, [translations], stage_records.record_path(tmp_path, "translate"))


def test_a_preparation_steps_files_are_on_disk_before_its_stamp(tmp_path, calls):
    """A step whose files another program writes (here `sh`, as fairseq-preprocess writes the data-bin): its
    outputs and the folders it names as written synced, then its stamp written durably."""
    data_bin, text = tmp_path / "data-bin", tmp_path / "text"

    def binarize():
        command = f"mkdir -p {data_bin} {text} && echo 1 > {data_bin}/train.bin && echo 2 > {text}/train.en"
        subprocess.run(["sh", "-c", command], check=True)
        return {}

    step = Step("binarize", "fairseq-preprocess", {}, [], [data_bin / "train.bin"], binarize, writes=[text])
    run_steps([step], tmp_path / ".stamps", {})
    stamp = tmp_path / ".stamps" / "binarize.json"
    assert synced_before(calls, [data_bin / "train.bin", text / "train.en", text], stamp)
    assert written_durably(calls, stamp)


def test_a_watchdogs_heartbeat_is_renamed_into_place_without_fsync(tmp_path, calls):
    """A heartbeat says a process is alive now, which a crash ends anyway: atomic, but no fsync every beat."""
    watchdog = Watchdog(tmp_path, rank=0, world_size=2, minutes=1)
    watchdog.beat()
    path = watchdog.heartbeat_path(0)
    assert [call[0] for call in calls] == ["replace"] and calls[0][2] == os.path.realpath(path)
    assert stage_records.read(path)["pid"] == os.getpid()


def test_sync_covers_files_folders_and_missing_paths(tmp_path, calls):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("x")
    (tmp_path / "g").write_text("y")
    durable.sync([tmp_path / "a", tmp_path / "g", tmp_path / "missing"])
    synced = {call[1] for call in calls}
    expected = {tmp_path / "a" / "b" / "f", tmp_path / "a" / "b", tmp_path / "a", tmp_path / "g", tmp_path}
    assert synced == {os.path.realpath(path) for path in expected}
    assert [call[1] for call in calls][-1] == os.path.realpath(tmp_path)  # the deepest folders first
