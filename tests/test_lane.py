"""The second lane's scheduling (tests/conftest.py): a job nobody has started runs in the thread that reads it,
once (the foreground, or the lane for a job queued after the one it runs), and every reader gets its result or its
error; each job's seconds are its own, on a clock the test moves."""

import threading
from concurrent.futures import ThreadPoolExecutor

import conftest
import pytest


def test_a_job_nobody_has_started_runs_once_where_it_is_read(monkeypatch):
    started, release, ran, now = threading.Event(), threading.Event(), [], [0.0]

    def busy(tmp_path_factory, lane):  # holds the lane
        started.set()
        assert release.wait(60)
        ran.append("busy")
        return threading.current_thread().name

    def waiting(tmp_path_factory, lane):
        ran.append("waiting")
        return threading.current_thread().name

    def failing(tmp_path_factory, lane):
        ran.append("failing")
        raise ValueError("the job's own error")

    def reading(tmp_path_factory, lane):  # reads one it ran in the foreground, and one queued after it
        now[0] += 1
        return lane["waiting"].result(), lane["later"].result(), threading.current_thread().name

    def later(tmp_path_factory, lane):
        ran.append("later")
        now[0] += 5
        return threading.current_thread().name

    jobs = {job.__name__: job for job in (busy, waiting, failing, reading, later)}
    for name, job in jobs.items():
        monkeypatch.setitem(conftest.LANE_JOBS, name, job)
    for table in ("LANE_SECONDS", "FOREGROUND_SECONDS", "FOREGROUND_WAITS"):
        monkeypatch.setattr(conftest, table, {})
    monkeypatch.setattr(conftest, "clock", lambda: now[0])
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="second-lane")
    lane = {}
    lane.update({name: conftest._Job(name, pool, (None, lane)) for name in jobs})
    assert started.wait(60)

    assert lane["waiting"].result() == "MainThread"  # the lane is busy: the foreground ran it
    with pytest.raises(ValueError, match="the job's own error"):
        lane["failing"].result()
    with pytest.raises(ValueError, match="the job's own error"):  # a second reader gets the same error
        lane["failing"].result()
    release.set()
    lane_thread = lane["busy"].result()  # started by the lane: waited for
    assert lane_thread.startswith("second-lane")
    reading_future = lane["reading"].future  # the lane's: a lane that waited on its own queue fails here, not hangs
    assert reading_future.result(timeout=60) == ("MainThread", lane_thread, lane_thread)
    assert lane["reading"].result() == reading_future.result()
    assert lane["later"].result() == lane_thread
    pool.shutdown(wait=True)
    assert sorted(ran) == ["busy", "failing", "later", "waiting"]  # each once: the lane skipped the ones run inside
    assert set(conftest.FOREGROUND_SECONDS) == {"waiting", "failing"}
    assert conftest.LANE_SECONDS == {"busy": 0, "reading": 1, "later": 5}  # each its own seconds
    assert {"busy", "reading"} <= set(conftest.FOREGROUND_WAITS) and "waiting" not in conftest.FOREGROUND_WAITS
