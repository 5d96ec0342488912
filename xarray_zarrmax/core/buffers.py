"""Output buffers reused from one encoded object to the next.

An encoder that returns a new bytes object per chunk makes the process fault in fresh pages for every chunk:
glibc hands large freed blocks back to the kernel (munmap, or madvise when it trims a thread's heap), and the
next allocation of the same size is zeroed and mapped again. For incompressible 1 MB chunks that cost more CPU
than the zstd that filled them (docs/dev/performance-analysis.md, "Encoded objects in reused buffers"). Here an
encoder takes a buffer from a pool, and the sink that wrote its bytes gives it back for the next object of its
size class.

A `Reused` object stands for the encoded bytes until then: it supports the buffer protocol (``os.write``,
``bytes()``, obstore and ``b"".join`` take it as they take bytes), and once released any further use raises
rather than reading bytes that another object now owns. Only a sink that has finished with the bytes releases
them (the local sink, after write(2) returned); one that never does leaves the buffer to the garbage collector,
as a bytes object would be.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from xarray_zarrmax.config import get_config
from xarray_zarrmax.tuning import GRANULE


class BufferPool:
    """Free buffers by size class, reused last in, first out (the most recently touched pages first), at most
    ``keep_bytes`` of them (None: the config's ``write_buffer_bytes`` when one is given back); beyond that a
    given-back buffer is freed."""

    def __init__(self, keep_bytes: int | None = None) -> None:
        self.keep_bytes = keep_bytes
        self._free: dict[int, list[np.ndarray]] = {}
        self._kept = 0
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray:
        """A uint8 buffer of at least ``nbytes`` whose contents are undefined."""
        size = max(GRANULE, -(-nbytes // GRANULE) * GRANULE)
        with self._lock:
            free = self._free.get(size)
            if free:
                self._kept -= size
                return free.pop()
        return np.empty(size, dtype=np.uint8)

    def give(self, buffer: np.ndarray) -> None:
        """Keep ``buffer`` for reuse: the caller must hold no view of it any more. Room is made by freeing the
        oldest buffers of the size class given back least recently: classes of an earlier write (another chunk
        size) must not fill the pool and leave the current write a fresh allocation per chunk, as they did in a
        benchmark that wrote 12.5 MB chunks, then 1 MB ones (0.99 GB/s against 3.3 alone). A limit lowered
        since frees what is kept beyond it."""
        limit = get_config().write_buffer_bytes if self.keep_bytes is None else self.keep_bytes
        size = buffer.nbytes
        keep = size <= limit
        with self._lock:
            room = limit - size if keep else limit
            while self._kept > room:
                oldest_class = next(iter(self._free))  # dicts keep order: least recently given back first
                bucket = self._free[oldest_class]
                bucket.pop(0)
                self._kept -= oldest_class
                if not bucket:
                    del self._free[oldest_class]
            if keep:
                bucket = self._free.pop(size, [])  # put back last: the most recently given class
                bucket.append(buffer)
                self._free[size] = bucket
                self._kept += size

    def kept_bytes(self) -> int:
        with self._lock:
            return self._kept

    def clear(self) -> None:
        """Free every kept buffer (a write has ended: no reason to hold its memory)."""
        with self._lock:
            self._free.clear()
            self._kept = 0

    def forget_after_fork(self) -> None:
        """In a forked child: a new lock (one held by a parent's thread would never open) and nothing kept."""
        self._lock = threading.Lock()
        self.clear()


#: The pool the encoders take from (one per process: buffers are sized by object, not by array).
POOL = BufferPool()
os.register_at_fork(after_in_child=POOL.forget_after_fork)


class Reused:
    """The first ``nbytes`` of a pooled buffer: one encoded object's bytes, until `release`."""

    __slots__ = ("_buffer", "_pool", "nbytes")

    def __init__(self, buffer: np.ndarray, nbytes: int, pool: BufferPool = POOL) -> None:
        if not 0 <= nbytes <= buffer.nbytes:
            raise ValueError(f"a buffer of {buffer.nbytes} bytes cannot hold {nbytes}")
        self._buffer: np.ndarray | None = buffer
        self._pool = pool
        self.nbytes = nbytes

    def __buffer__(self, flags: int) -> memoryview:
        if self._buffer is None:
            raise ValueError("these encoded bytes were released after they were written; they are gone")
        return memoryview(self._buffer)[:self.nbytes].toreadonly()

    def __len__(self) -> int:
        return self.nbytes

    def __bytes__(self) -> bytes:
        return bytes(memoryview(self))

    def __repr__(self) -> str:
        state = "released" if self._buffer is None else "held"
        return f"Reused({self.nbytes} bytes, {state})"

    def release(self) -> None:
        """Give the buffer back to its pool: no view of it may be in use (the bytes were written)."""
        buffer, self._buffer = self._buffer, None
        if buffer is not None:
            self._pool.give(buffer)


def release(parts: tuple[object, ...]) -> None:
    """Give back the pooled buffers among ``parts`` (an object's parts, once written)."""
    for part in parts:
        if isinstance(part, Reused):
            part.release()
