"""Timing shared by the benchmark scripts: one warm-up call, then the median of repeated calls."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def median_time(fn: Callable[[], Any], repeat: int, *, warmup: bool = True) -> float:
    """Median wall time of ``repeat`` calls, after one untimed call (imports, connections, first-touch
    page faults of fresh allocations)."""
    if warmup:
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def start_minio(bucket: str) -> tuple[Any, str] | None:
    """A MinIO server with ``bucket`` made, or None (and a hint on stderr) when its binary is not installed."""
    import sys

    from xarray_zarrmax.testing import MinioServer, minio_binary

    binary = minio_binary()
    if binary is None:
        print("MinIO not found: run `bash ci/install_services.sh`", file=sys.stderr)
        return None
    server = MinioServer(binary).start()
    return server, server.make_bucket(bucket)
