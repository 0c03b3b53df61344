"""The second lane's scheduling (tests/conftest.py): a job the foreground reads before the lane has started it runs
in the foreground, once, and every reader gets its result or its error."""

import threading
from concurrent.futures import ThreadPoolExecutor

import conftest
import pytest


def test_a_job_the_lane_has_not_started_runs_in_the_foreground_once(monkeypatch):
    started, release, ran = threading.Event(), threading.Event(), []

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

    def reading(tmp_path_factory, lane):  # a later job reads an earlier one that the foreground ran
        return lane["waiting"].result(), threading.current_thread().name

    jobs = {job.__name__: job for job in (busy, waiting, failing, reading)}
    for name, job in jobs.items():
        monkeypatch.setitem(conftest.LANE_JOBS, name, job)
    for table in ("LANE_SECONDS", "FOREGROUND_SECONDS", "FOREGROUND_WAITS"):
        monkeypatch.setattr(conftest, table, {})
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
    assert lane["busy"].result().startswith("second-lane")  # started by the lane: waited for
    assert lane["reading"].result() == ("MainThread", lane["busy"].result())
    pool.shutdown(wait=True)
    assert sorted(ran) == ["busy", "failing", "waiting"]  # each once: the lane skipped the two run here
    assert set(conftest.FOREGROUND_SECONDS) == {"waiting", "failing"}
    assert set(conftest.LANE_SECONDS) == {"busy", "reading"}
    assert {"busy", "reading"} <= set(conftest.FOREGROUND_WAITS) and "waiting" not in conftest.FOREGROUND_WAITS
