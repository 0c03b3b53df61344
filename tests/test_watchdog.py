"""vaswani_plugin/training/watchdog.py: a rank that stops answering ends a data-parallel run within STALL_MINUTES, and a
rank that died ends the others' failed collective, in one line naming it; in process, on a clock of their own (a
recipe's frozen node: tests/test_preemption.py)."""

import os
from types import SimpleNamespace

from vaswani_plugin.training import progress_meter, watchdog
from vaswani_plugin.training.watchdog import Watchdog


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


def test_before_the_first_step_only_a_silent_rank_ends_the_wait(tmp_path):
    """Start-up (building, loading, batching: as slow as a loaded machine makes it) is no stall while every rank
    answers; a rank frozen before its first step is named once STALL_MINUTES have passed and its heartbeat aged."""
    clock = SimpleNamespace(now=1000.0)
    zero, one = (Watchdog(tmp_path, rank, 2, minutes=1, clock=lambda: clock.now) for rank in (0, 1))
    for _ in range(30):  # two and a half minutes of start-up, both beating, no step
        assert zero.check() is None and one.check() is None
        clock.now += zero.beat_seconds
    for _ in range(3):  # rank 1 freezes: its heartbeat is not yet older than three beats
        assert zero.check() is None
        clock.now += zero.beat_seconds
    line = zero.check()
    assert line.startswith("rank 0 made no training step for 2.") and "after update 0: rank 1 (" in line
    assert "silent 20 s) stopped answering" in line


def test_after_a_failed_collective_the_line_names_the_ranks_that_stopped_beating(tmp_path):
    """A rank that died fails the others' collective at once: two beats later its heartbeat has not changed while
    the living ranks' (blocked in their own error hooks, their threads beating) have; no rank gone, no line."""
    clock = SimpleNamespace(now=1000.0)
    zero, one, two = (Watchdog(tmp_path, rank, 3, minutes=10, clock=lambda: clock.now) for rank in range(3))
    for watched in (zero, one, two):
        watched.step(8)
        watched.beat()
    error = RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:56237: Connection reset by peer.")

    def two_beats(living):
        def sleep(seconds):
            assert seconds == 2 * zero.beat_seconds
            clock.now += seconds
            for watched in living:
                watched.beat()

        return sleep

    line = zero.lost(error, sleep=two_beats([zero, two]))
    assert line.startswith(f"rank 0 lost a peer in a collective (RuntimeError: {str(error)[:130]}")
    assert f"after update 8: rank 1 (vm, pid {os.getpid()}, update 8, silent 10 s) stopped answering; " in line.replace(
        os.uname().nodename, "vm"
    )
    assert zero.lost(error, sleep=two_beats([zero, one, two])) is None


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
                progress_meter.training_step(4)
                progress_meter.observe()
                assert watchdog._watchdog.update == 5 and watchdog._watchdog.save_dir == tmp_path
        finally:
            progress_meter.close()
        assert watchdog._watchdog is None
