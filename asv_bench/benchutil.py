"""Timing shared by the benchmark scripts: one warm-up call, then the median of repeated calls."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any


def warm_memory(nbytes: int) -> None:
    """Touch and free ``nbytes`` of fresh memory, untimed, before a timed read.

    On a virtual machine with free page reporting (virtio-balloon, as here), memory a process frees and leaves
    unused for about 2 s goes back to the host, and the next first touch of it costs the host's page fault:
    512 MiB took 0.45-1.3 s to allocate and touch after a 2-8 s pause, 0.06 s right after a free (measured here,
    see docs/performance-analysis.md). A timed read then mostly measures the hypervisor, by an amount that
    depends on how long the machine idled before it. Touching the memory just before the read makes every stack
    start from memory the guest has, as on bare metal; the page zeroing of a fresh output stays in every
    stack's time.
    """
    import numpy as np

    block = np.empty(nbytes, dtype=np.uint8)
    block[:: 4096] = 1
    del block


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


@contextlib.contextmanager
def proxied_minio(latency_ms: int) -> Iterator[tuple[Any, str] | None]:
    """A MinIO server and the endpoint of a toxiproxy proxy in front of it adding ``latency_ms`` to each
    response (none for 0); both stopped on exit. None (and a hint on stderr) when either is not installed."""
    import sys

    from xarray_zarrmax.testing import MinioServer, Toxiproxy, minio_binary, toxiproxy_binaries

    binary, toxi = minio_binary(), toxiproxy_binaries()
    if binary is None or toxi is None:
        print("MinIO/toxiproxy not found: run `bash ci/install_services.sh`", file=sys.stderr)
        yield None
        return
    minio = MinioServer(binary).start()
    proxy = Toxiproxy(toxi[0]).start()
    try:
        endpoint = proxy.proxy("s3", minio.port)
        if latency_ms:
            proxy.add_toxic("s3", "latency", latency=latency_ms)
        yield minio, endpoint
    finally:
        proxy.stop()
        minio.close()
