"""One request budget per process: at most ``config.concurrency`` requests in flight, whoever sends them."""

from __future__ import annotations

import asyncio

from .config import get_config

_semaphores: dict[tuple[int, int], asyncio.Semaphore] = {}


def request_slot() -> asyncio.Semaphore:
    """The semaphore every network request of this process acquires (per loop, per concurrency setting)."""
    loop = asyncio.get_running_loop()
    key = (id(loop), get_config().concurrency)
    sem = _semaphores.get(key)
    if sem is None:
        sem = _semaphores[key] = asyncio.Semaphore(key[1])
    return sem
