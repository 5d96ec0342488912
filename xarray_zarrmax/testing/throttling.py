"""Throttling seen from inside each process of a cluster: what a test or a benchmark runs on every worker
(``client.run(start_watching)``, then ``client.run(stop_watching)``) to learn what the store answered it and
how far its request limiter came down.

`request_counts` and `limiter_stats` see only the process they run in; these carry them out of a worker.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from xarray_zarrmax.core.accounting import RequestCounts, request_counts
from xarray_zarrmax.core.budget import busiest_limiter, limiter_stats

_watch: dict[str, Any] = {}


def _sample(stop: threading.Event, period_s: float, samples: list[tuple[float, int, int, int]]) -> None:
    while not stop.wait(period_s):
        limiter = busiest_limiter()
        if limiter is not None:
            samples.append((time.monotonic(), limiter.capacity(), limiter.in_flight, limiter.waiting))


def start_watching(period_s: float = 0.05) -> None:
    """Count this process's requests from now on, and sample its limiter (capacity, requests in flight and
    waiting) every ``period_s`` seconds."""
    stop_watching()
    block = request_counts()
    counts = block.__enter__()
    stop = threading.Event()
    samples: list[tuple[float, int, int, int]] = []
    thread = threading.Thread(target=_sample, args=(stop, period_s, samples), daemon=True,
                              name="xarray_zarrmax-watch")
    thread.start()
    _watch.update(block=block, counts=counts, stop=stop, thread=thread, samples=samples, cpu=time.process_time())


def stop_watching() -> dict[str, Any]:
    """What happened since `start_watching` (empty figures where it was not called): totals of the request
    counts, `limiter_stats`, the samples as (monotonic time, capacity, in flight, waiting), and the CPU seconds
    this process used meanwhile (every thread)."""
    if not _watch:
        return {}
    _watch["stop"].set()
    _watch["thread"].join(5)
    _watch["block"].__exit__(None, None, None)
    counts: RequestCounts = _watch["counts"]
    out = {"counts": {kind: counts.total(kind) for kind in ("get", "bytes", "retries", "throttled")},
           "limiter": limiter_stats(), "samples": list(_watch["samples"]),
           "cpu_seconds": time.process_time() - _watch["cpu"]}
    _watch.clear()
    return out
