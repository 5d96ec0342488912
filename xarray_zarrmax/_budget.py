"""One request budget per process: at most ``config.concurrency`` requests in flight, whoever sends them."""

from __future__ import annotations

import asyncio
import weakref

from .config import get_config

# Keyed by the loop object itself (weakly): an id() could be reused by a later loop after fork or GC, and a
# semaphore bound to a dead loop would fail every request.
_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def request_slot() -> asyncio.Semaphore:
    """The semaphore every network request of this process acquires (per loop, per concurrency setting)."""
    loop = asyncio.get_running_loop()
    concurrency = get_config().concurrency
    per_loop = _semaphores.setdefault(loop, {})
    sem = per_loop.get(concurrency)
    if sem is None:
        sem = per_loop[concurrency] = asyncio.Semaphore(concurrency)
    return sem
