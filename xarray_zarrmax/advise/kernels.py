"""The layout search's compiled kernels, where the package was built with them: the one place that knows.

What holds most of a long search's time is compiled: the gaps a read leaves between the chunks it takes from a shard
(`ranged.gap_counts`), the shards a batch's selections touch first (`revisits`), a pointwise read's chunks that
could share a range under any sharding and the breaks between its runs under one (`merges`), the distinct cells
holding its points per distinct cell lengths (`point_bounds`), the table those counts are remembered in (`memo`),
the sharded layouts of many chunk shapes (`candidates.shardings`), their listed bound (`bounds.SearchBounds.
sharded_floor`) and the test of which could tie with the fastest (`search.could_tie`). Each also has a numpy
form, the reference its compiled form (`_kernels.c`) is tested against, and the one used where the package was
installed without a C compiler (setup.py builds the extension as optional): the same counts, the longest searches
slower (1.6x before `merges`, measured; its numpy forms cost more). `in_use` says which a search runs. The two that
take most of a search of scattered points (the breaks of `merges`, the listed bound) run without the GIL, a large call
split over the machine's cores (`across_threads`), or many calls given to them at once (`in_threads`).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from types import ModuleType

import numpy as np

compiled: ModuleType | None
try:
    from xarray_zarrmax.advise import _kernels as compiled
except ImportError:  # installed without a C compiler: the numpy forms
    compiled = None

#: Threads a large call of a kernel that lets them run (`across_threads`) is split over: the machine's cores, up to 4
THREADS = max(1, min(4, os.cpu_count() or 1))

#: Rows at least in each thread's part: below, one call (a thread's start costs about as much as 100 rows of the
#: costliest kernel)
ROWS_A_THREAD = 2048

_POOL_NAME = "xarray_zarrmax-kernels"  # its threads' names begin so
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()  # (two searches in two threads make one pool)


def _forget_pool() -> None:
    """In a forked child: the parent's pool's threads are not there (work given to it would wait forever), nor is
    whichever thread held the lock."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def across_threads(rows: int, work: Callable[[int, int], None]) -> None:
    """``work(lo, hi)`` over ``range(rows)`` in `THREADS` contiguous parts at once, each of at least `ROWS_A_THREAD`
    rows (one call where there are fewer): for a kernel that writes each row's outputs alone and runs without the
    GIL (`in_threads`)."""
    parts = min(THREADS, rows // ROWS_A_THREAD)
    if parts <= 1:
        work(0, rows)
        return
    edges = [rows * i // parts for i in range(parts + 1)]
    in_threads([functools.partial(work, lo, hi) for lo, hi in zip(edges[:-1], edges[1:], strict=True)])


def in_threads(tasks: Sequence[Callable[[], None]]) -> None:
    """Each of ``tasks`` in the module's pool of `THREADS` threads, as many at once as it has: for calls of kernels
    that run without the GIL, each writing outputs of its own. Called from a task of the pool itself, they run one
    after another in its thread (the pool's threads would wait on each other). A task the pool refuses (the
    interpreter shutting down) runs in this thread. An exception in any is raised here once all have ended."""
    if threading.current_thread().name.startswith(_POOL_NAME):
        for task in tasks:
            task()
        return
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(THREADS, thread_name_prefix=_POOL_NAME)
        pool = _pool
    futures, here = [], []
    for task in tasks:
        try:
            futures.append(pool.submit(task))
        except RuntimeError:  # "cannot schedule new futures after (interpreter) shutdown"
            here.append(task)
    try:
        for task in here:
            task()
    finally:
        wait(futures)  # every task ended before any error is raised: none still writes into the caller's arrays then
    for future in futures:
        future.result()


def in_use() -> str:
    """The kernels a search started now runs: "C" (`_kernels.c`), or "numpy" (not built, or set aside as the
    tests do)."""
    return "numpy" if compiled is None else "C"


def ints(a: np.ndarray) -> np.ndarray:
    """``a`` as the compiled kernels read an integer array: C-contiguous int64 (a copy only where it is not)."""
    return np.ascontiguousarray(a, dtype=np.int64)


def floats(a: np.ndarray) -> np.ndarray:
    """``a`` as the compiled kernels read a real array: C-contiguous float64 (a copy only where it is not)."""
    return np.ascontiguousarray(a, dtype=np.float64)
