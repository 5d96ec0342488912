"""Timing on a shared, noisy virtual machine: memory touched before a timed call, one warm-up call then the
median of repeated calls, seeded interleaved orders, and what the machine was doing meanwhile (load average,
the hypervisor's steal time).
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any


def warm_memory(nbytes: int) -> None:
    """Touch and free ``nbytes`` of fresh memory, untimed, before a timed read.

    On a virtual machine with free page reporting (virtio-balloon, as here), memory a process frees and leaves
    unused for about 2 s goes back to the host, and the next first touch of it costs the host's page fault:
    512 MiB took 0.45-1.3 s to allocate and touch after a 2-8 s pause, 0.06 s right after a free (measured
    here: the performance analysis, "The hypervisor takes memory back"). A timed read then mostly measures the
    hypervisor, by an amount that depends on how long the machine idled before it. Touching the memory just
    before the read makes every stack start from memory the guest has, as on bare metal; the page zeroing of a
    fresh output stays in every stack's time.
    """
    import numpy as np

    block = np.empty(nbytes, dtype=np.uint8)
    block[:: 4096] = 1
    del block


def median_time(fn: Callable[[], Any], repeat: int, *, warmup: bool = True) -> float:
    """Median wall time of ``repeat`` calls, after one untimed call (imports, connections, first-touch
    page faults of fresh allocations)."""
    return statistics.median(wall_times(fn, repeat, warmup=warmup))


def wall_times(fn: Callable[[], Any], repeat: int, *, warmup: bool = True) -> list[float]:
    """The wall time of each of ``repeat`` calls, after one untimed call if ``warmup``."""
    if warmup:
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def shuffled_rounds[T](items: Sequence[T], rounds: int, seed: int) -> Iterator[list[T]]:
    """The order of each of ``rounds`` interleaved rounds: ``items`` shuffled again every round by a generator
    seeded with ``seed``, so every run takes the same orders.

    A fresh order each round, because a stack can slow the one after it (right after a TensorStore read,
    zarrmax's next read ran at 0.94 GB/s instead of 2.3 GB/s here, page cache intact, no CPU left busy): one
    order rotated kept every stack's neighbour."""
    order = list(items)
    shuffle = random.Random(seed).shuffle
    for _ in range(rounds):
        shuffle(order)
        yield list(order)


def steal_ticks() -> int:
    """The machine's "steal" time so far, in clock ticks (/proc/stat; 0 where there is none): CPU time the
    hypervisor took from this virtual machine."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return 0
    return int(fields[8]) if len(fields) > 8 else 0


def cpu_reference(repeat: int = 15) -> float:
    """Least seconds of ``repeat`` runs of a fixed single-threaded workload, the same on every machine and at
    every commit: in kind the work of the advisor's search (a Python loop of numpy operations on arrays of a few
    thousand integers and floats, gathers, a sort), none of this project's code. Recorded with tables of CPU-bound work
    so that tables run on different machines can be compared: the load average says how busy a machine was,
    not how fast it is (the search-time table at one commit took 2.6-3.3x as long on one 2-core machine as on
    another, both idle). The least, not the median: noise only adds, and an idle virtual machine here flipped
    between two speeds (0.18 and 0.29 s) from one few-second span to the next. A rough scale, not a conversion:
    machines differ by workload."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.integers(1, 1 << 20, 4096)
    b = rng.integers(1, 64, 4096)
    order = rng.permutation(4096)

    def once() -> float:
        total = 0.0
        for i in range(2000):
            j = i % 300
            q = (a >> (i % 7)) // b
            r = np.minimum(q, a % 97).astype(np.float64)
            total += float((r[order] * 0.5 + np.sqrt(r)).sum()) + float(np.sort(q[: 512 + j]).sum())
            total += sum(range(j * 10)) % 7
        return total

    return min(wall_times(once, repeat))


def machine_state() -> dict[str, Any]:
    """What the machine is doing now: cores, load average (1, 5, 15 min), steal ticks; recorded before and
    after every table run, since other work on a shared machine moves every number."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not on this platform
        load = []
    return {"time": time.time(), "cores": os.cpu_count() or 1, "load_average": load, "steal_ticks": steal_ticks()}
