"""vaswani_plugin/tools/watchdog.py: a rank that stops answering ends a data-parallel run within STALL_MINUTES, in one
line naming it. In process on a clock of its own; then two gloo processes, one frozen with SIGSTOP inside the loop
of all-reduces a training makes, the other ended by its watchdog though blocked in the collective."""

import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

from vaswani_plugin.tools import progress_meter, watchdog
from vaswani_plugin.tools.watchdog import Watchdog


def test_the_line_names_the_rank_whose_heartbeat_stopped_once_the_wait_reaches_stall_minutes(tmp_path):
    clock = SimpleNamespace(now=1000.0)  # a clock of the test's own, moved by hand
    zero, one = (Watchdog(tmp_path, rank, 2, minutes=1, clock=lambda: clock.now) for rank in (0, 1))
    for _ in range(6):  # 30 s of beats and steps; then rank 1 freezes at update 5
        zero.step(5), one.step(5)
        assert zero.check() is None and one.check() is None
        clock.now += zero.beat_seconds
    for _ in range(11):  # rank 0 waits in a collective: beating, no step, for a minute less a beat
        assert zero.check() is None
        clock.now += zero.beat_seconds
    line = zero.check()
    assert line.startswith("rank 0 made no training step for 1.0 minutes (STALL_MINUTES=1) after update 5: rank 1 (")
    silent = f", pid {os.getpid()}, update 5, silent 60 s) stopped answering; the last checkpoint: see {tmp_path};"
    assert silent in line
    # Every heartbeat fresh but no step (a collective that hangs elsewhere): said as such.
    one.check()
    assert "every rank still answers" in zero.check()


FROZEN_RANK = """
import importlib.util, sys, time, torch, torch.distributed as dist
rank, port, save_dir, path = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
spec = importlib.util.spec_from_file_location("watchdog", path)  # the module alone, without fairseq's start-up
watchdog = importlib.util.module_from_spec(spec)
spec.loader.exec_module(watchdog)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
watchdog.start(save_dir, rank, 2, last_checkpoint=lambda save_dir: "none")
update = 0
while True:  # a training's per-update all-reduce
    update += 1
    dist.all_reduce(torch.ones(1))
    watchdog.step(update)
    print(update, flush=True)
    time.sleep(0.05)
"""


def test_a_rank_blocked_on_a_frozen_peer_ends_in_one_line(tmp_path):
    env = dict(os.environ, VASWANI_STALL_MINUTES="0.05")  # 3 s
    port = str(29700 + os.getpid() % 200)
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", FROZEN_RANK, str(rank), port, str(tmp_path), watchdog.__file__],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    try:
        while ranks[1].stdout.readline().strip() != "20":  # both train
            assert ranks[1].poll() is None, ranks[1].stderr.read()
        ranks[1].send_signal(signal.SIGSTOP)
        started = time.monotonic()
        _, err = ranks[0].communicate(timeout=40)
        assert ranks[0].returncode == 1 and time.monotonic() - started < 30
        line = err.strip().splitlines()[-1]
        assert line.startswith("vaswani_plugin: error: rank 0 made no training step for "), err
        assert "rank 1 (" in line and f"pid {ranks[1].pid}, update " in line and "stopped answering" in line
    finally:
        for process in ranks:
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.communicate()


def test_a_training_process_of_several_watches_when_the_recipes_ask(tmp_path, monkeypatch):
    """progress_meter starts the watchdog with fairseq's configuration (VASWANI_STALL_MINUTES set, more than one
    process) and notes each reduction as a step; one process, or no setting, is not watched."""
    cfg = SimpleNamespace(
        save_dir=str(tmp_path), no_save=False, max_update=10, max_epoch=0, stop_time_hours=0.0,
        distributed_world_size=2, valid_subset="valid",
    )  # fmt: skip
    for minutes, world_size, watched in (("", 2, False), ("1", 1, False), ("1", 2, True)):
        monkeypatch.setenv(watchdog.ENV, minutes)
        progress_meter.configure_from(SimpleNamespace(**{**vars(cfg), "distributed_world_size": world_size}))
        try:
            assert (watchdog._watchdog is not None) == watched
            if watched:
                progress_meter.loaded(4)
                progress_meter.observe()
                assert watchdog._watchdog.update == 5 and watchdog._watchdog.save_dir == tmp_path
        finally:
            progress_meter.close()
        assert watchdog._watchdog is None
