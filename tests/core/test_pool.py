"""`run_batches`: every batch once, on as many pool jobs as threads (not one per batch), the earliest failure
raised, and no batch still running when it returns, also when the caller is interrupted."""

from __future__ import annotations

import threading
import time

import pytest

import xarray_zarrmax
from xarray_zarrmax.core import loop as _loop
from xarray_zarrmax.core.loop import run_batches


class _CountingSubmits:
    """Wraps the decode pool's submit to count the jobs handed to it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        pool = _loop.decode_pool()
        submit = pool.submit

        def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            self.count += 1
            return submit(*args, **kwargs)

        monkeypatch.setattr(pool, "submit", counting)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_every_batch_runs_once_on_one_job_per_thread(monkeypatch, threads):
    with xarray_zarrmax.set_config(threads=threads):
        submits = _CountingSubmits(monkeypatch)
        seen: list[int] = []
        lock = threading.Lock()

        def record(batch: list[int]) -> None:
            with lock:
                seen.extend(batch)

        batches = [list(range(i, i + 3)) for i in range(0, 300, 3)]
        run_batches(record, batches)
        assert sorted(seen) == list(range(300))
        # a job per batch (100 hand-offs, a wake-up of the caller each) is what this replaced
        assert submits.count == threads
        run_batches(record, batches[:1])
        assert submits.count == threads + 1  # never more jobs than batches
        run_batches(record, [])
        assert submits.count == threads + 1


def test_the_earliest_failed_batch_is_raised_and_no_batch_starts_after_a_failure():
    started: list[int] = []
    lock = threading.Lock()

    def work(batch: int) -> None:
        with lock:
            started.append(batch)
        if batch in (3, 5):
            time.sleep(0.05 if batch == 3 else 0)  # batch 5 fails first in time, batch 3 first in order
            raise ValueError(f"batch {batch}")
        time.sleep(0.001)

    with xarray_zarrmax.set_config(threads=2), pytest.raises(ValueError, match="batch 3"):
        run_batches(work, list(range(200)))
    assert len(started) < 20  # the jobs stopped taking batches at the first failure


def test_an_interrupted_caller_returns_only_when_no_batch_runs(monkeypatch):
    # A caller interrupted while it waits (Ctrl-C) closes a file the batches read from: run_batches must not
    # return while one still runs, and must start no new one.
    running: set[int] = set()
    started: list[int] = []
    seen_running_at_return: set[int] = set()
    lock = threading.Lock()
    real_wait = _loop.wait
    calls = 0

    def interrupted_wait(jobs):  # noqa: ANN001, ANN202
        nonlocal calls
        calls += 1
        if calls == 1:
            time.sleep(0.02)  # some batches are under way
            raise KeyboardInterrupt
        return real_wait(jobs)

    def work(batch: int) -> None:
        with lock:
            running.add(batch)
            started.append(batch)
        time.sleep(0.005)
        with lock:
            running.discard(batch)

    monkeypatch.setattr(_loop, "wait", interrupted_wait)
    with xarray_zarrmax.set_config(threads=2), pytest.raises(KeyboardInterrupt):
        try:
            run_batches(work, list(range(1000)))
        finally:
            seen_running_at_return |= running
    assert not seen_running_at_return
    assert 0 < len(started) < 100
