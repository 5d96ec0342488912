"""A zarr store wrapper that counts the GETs in flight at once: how many requests a read sends together."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from zarr.storage import MemoryStore, WrapperStore


class InFlight(WrapperStore[MemoryStore]):
    """Counts the GETs in flight at once; each GET holds for a moment, as a remote store would.

    With ``until``, a GET holds until that many are in flight (or a second has passed): how many a reader
    sends before any answer comes back, whatever the machine's speed (a fixed short hold undercounts when
    a loaded machine launches the reads more slowly than the hold)."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.now = self.most = 0
        self.until: int | None = None
        self._enough: asyncio.Event | None = None

    def hold_until(self, count: int) -> None:
        """From now on, count from zero and hold each GET until ``count`` are in flight."""
        self.most, self.until, self._enough = 0, count, None

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            if self.until is None:
                await asyncio.sleep(0.02)
            else:
                if self._enough is None:
                    self._enough = asyncio.Event()  # on the loop the reads run on
                if self.now >= self.until:
                    self._enough.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._enough.wait(), timeout=1.0)
            return await super().get(key, prototype, byte_range)
        finally:
            self.now -= 1
