"""Decoded chunks kept across reads, per process, each only for the object version it was decoded from.

A read that needs a chunk it decoded before (an overlapping window, a slab next to the last one, a second epoch)
copies it from here instead of fetching and decoding it again. Never stale: an entry names the version of its
stored object (a local file's identity and timestamps, an S3 ETag, an Icechunk snapshot), and a read uses it
only after proving that version still holds, once per object per read: a local file's ``fstat``; for a remote
object, the version the read's own fetch of the chunks it lacks came from, or, when it lacks none, one
conditional request (``If-None-Match``: an unchanged object answers 304, no body). Objects whose version cannot
prove freshness (`Fetched.cacheable`: stores without versions, a local file written within the file system's
timestamp granularity) are never kept.

Keyed by (store label, key, codec, shard format) and chunk coordinates: the codec because the same bytes decode
differently under other metadata, the shard format because a new shard layout over the same shard files puts
other bytes at a chunk's place (found by an adversarial review). All entries of one object hold one version:
keeping a chunk of a newer version drops the others. Bounded by ``config.cache_bytes`` (0: off), each chunk
counted with what its entry costs beyond its bytes (`tuning.CHUNK_ENTRY_BYTES`), least recently used first out
(`asv_bench.experiments.cache_policy`: as good as the clairvoyant optimum on streaming reuse, and as any policy
that cannot see the future on random reuse); a chunk larger than the cap is not kept. One per process: each dask
worker has its own.

What is kept (admission): a chunk a read used only in part is kept when decoded (a neighbouring read, a slab
or window next to this one, will want the rest of it); a chunk a read used whole is kept only the second time
it is decoded, the first time only remembered (its key, no bytes). A read that passes once over whole chunks
(a scan, a one-pass ETL, the first epoch over aligned tiles) then costs nothing: keeping costs a copy into
memory the process has not touched yet, which on the machines measured costs as much as the read itself
(0.4-2 ms per MiB of page faults: slabs of whole chunks took 2.2x as long with every chunk kept), and a scan
pushes out at most `REMEMBERED_SHARE` of what other reads come back to (the scan resistance of 2Q and ARC, on
the same evidence of reuse). Remembered keys cost `CHUNK_ENTRY_BYTES` each, counted under the cap, and are
forgotten oldest first once the chunks they stand for would fill the cap or the keys their share of it.
Evicted buffers of the same size are reused for new entries: once the cache is full, keeping touches no new
memory.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

import numpy as np

from xarray_zarrmax.codecs.decode import ChunkCodec
from xarray_zarrmax.codecs.sharding import ShardFormat
from xarray_zarrmax.config import get_config
from xarray_zarrmax.core import accounting
from xarray_zarrmax.tuning import CHUNK_ENTRY_BYTES

ObjectId = tuple[Hashable, str, int]  # (store, key, the number `object_id` gives its codec and shard format)
Coords = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CacheInfo:
    """The process's decoded-chunk cache: what `cache_info` returns."""

    hits: int  # chunks copied from the cache
    misses: int  # chunks looked for and not there (decoded from storage)
    revalidations: int  # conditional requests sent to prove an object unchanged
    evictions: int  # chunks dropped to stay under the cap
    invalidations: int  # chunks dropped because their object changed
    entries: int
    held_bytes: int  # the entries' bytes and overhead, and the remembered keys' overhead
    cap_bytes: int
    remembered: int = 0  # chunks read whole once: their keys, kept if decoded again (the admission rule)


@dataclass(slots=True)
class _Entry:
    version: Hashable
    chunk: np.ndarray  # read-only, owns its memory; callers copy out of it

    @property
    def cost(self) -> int:
        return self.chunk.nbytes + CHUNK_ENTRY_BYTES


Key = tuple[ObjectId, Coords]
#: The most of the cap remembered keys may take (`DecodedChunks.keep`'s admission rule): so much of what is
#: kept a scan of whole chunks can push out at worst, and keys enough for a repeated read of chunks of 1.5 KiB
#: and more filling the cap.
REMEMBERED_SHARE = 0.25


class DecodedChunks:
    """The LRU store behind the module functions; thread-safe."""

    def __init__(self) -> None:
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._of_object: dict[ObjectId, set[Coords]] = {}
        self._seen: OrderedDict[Key, int] = OrderedDict()  # chunks read whole once -> their bytes
        self._seen_bytes = 0
        self._held = 0  # entries' costs + CHUNK_ENTRY_BYTES per remembered key
        self._reserved = 0  # room taken for copies under way (made outside the lock)
        self._counts = dict.fromkeys(("hits", "misses", "revalidations", "evictions", "invalidations"), 0)
        self._lock = threading.Lock()

    def after_fork(self) -> None:
        """In a forked child: a lock held by a thread that did not survive would never open, and the room it
        reserved for a copy would never come back (found by an adversarial review)."""
        self._lock = threading.Lock()
        self._reserved = 0

    def lookup(self, obj: ObjectId, coords: Iterable[Coords]) -> tuple[Hashable | None, dict[Coords, np.ndarray]]:
        """The kept chunks of ``obj`` among ``coords``, and the one version they all hold (None: none kept).
        Not yet counted as hits: the caller proves the version first (`hit` / `invalidate`)."""
        found: dict[Coords, np.ndarray] = {}
        version = None
        with self._lock:
            kept = self._of_object.get(obj)
            if not kept:
                return None, found
            for c in coords:
                if c in kept:
                    entry = self._entries[(obj, c)]
                    self._entries.move_to_end((obj, c))
                    found[c] = entry.chunk
                    version = entry.version
        return version, found

    def count(self, name: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self._counts[name] += n
            accounting.record_cache(name, n)

    def keep(self, obj: ObjectId, version: Hashable, coords: Coords, chunk: np.ndarray, *, whole: bool) -> None:
        """Keep a copy of ``chunk``, decoded from the object version ``version``, by the admission rule (module
        docstring): at once where the read used part of it, the second time where it used it ``whole``."""
        cap = get_config().cache_bytes
        cost = chunk.nbytes + CHUNK_ENTRY_BYTES
        if cost > cap:
            return
        key = (obj, coords)
        with self._lock:
            if whole and key not in self._entries:
                nbytes = self._seen.pop(key, None)
                if nbytes is None:  # first time: remember the key only
                    self._remember_locked(key, chunk.nbytes, cap)
                    evicted = self._evict_locked(cap)
                    self._counts["evictions"] += evicted
                    accounting.record_cache("evictions", evicted)
                    return
                self._forgot_locked(nbytes)
            buffer, evicted = self._make_room_locked(cost, cap, chunk)
            self._reserved += cost
        try:  # the copy outside the lock: nothing else can reach ``buffer`` now
            if buffer is None:
                buffer = np.empty(chunk.shape, chunk.dtype)
            else:
                buffer.flags.writeable = True
            np.copyto(buffer, chunk)
            buffer.flags.writeable = False
        finally:
            with self._lock:
                self._reserved -= cost
        cap = get_config().cache_bytes  # again: it may have been lowered during the copy
        with self._lock:
            kept = self._of_object.setdefault(obj, set())
            if kept:
                first = self._entries[(obj, next(iter(kept)))]
                if first.version != version:  # a newer (or older) version: never mix two in one object
                    self._invalidations_locked(obj)
                    kept = self._of_object.setdefault(obj, set())
            old = self._entries.pop(key, None)
            if old is not None:
                self._held -= old.cost
            self._entries[key] = _Entry(version, buffer)
            kept.add(coords)
            self._held += cost
            evicted += self._evict_locked(cap)  # others kept meanwhile, or the cap lowered
            self._counts["evictions"] += evicted
        accounting.record_cache("evictions", evicted)

    def _remember_locked(self, key: Key, nbytes: int, cap: int) -> None:
        """Remember a chunk read whole; forget the oldest once the remembered chunks would fill the cap, or
        their keys take more than `REMEMBERED_SHARE` of it (a sixteenth kept a repeated read of 2,000 chunks of
        1 KiB under a 4 MiB cap from ever being kept: an adversarial review)."""
        self._seen[key] = nbytes
        self._seen_bytes += nbytes
        self._held += CHUNK_ENTRY_BYTES
        while self._seen and (self._seen_bytes > cap
                              or len(self._seen) * CHUNK_ENTRY_BYTES > cap * REMEMBERED_SHARE):
            self._forgot_locked(self._seen.popitem(last=False)[1])

    def _forgot_locked(self, nbytes: int) -> None:
        self._seen_bytes -= nbytes
        self._held -= CHUNK_ENTRY_BYTES

    def _make_room_locked(self, cost: int, cap: int, chunk: np.ndarray) -> tuple[np.ndarray | None, int]:
        """Evict least recently used entries until ``cost`` more fits under ``cap``; an evicted buffer of
        ``chunk``'s shape and dtype that no reader still holds is returned for reuse (its pages are touched)."""
        recycled, evicted = None, 0
        while self._entries and self._held + self._reserved + cost > cap:
            (obj, coords), entry = self._entries.popitem(last=False)
            self._held -= entry.cost
            self._drop_member(obj, coords)
            evicted += 1
            # references: the entry's, and getrefcount's argument; any more is a reader copying out of it
            if (recycled is None and entry.chunk.shape == chunk.shape and entry.chunk.dtype == chunk.dtype
                    and sys.getrefcount(entry.chunk) == 2):
                recycled = entry.chunk
        while self._seen and self._held + self._reserved + cost > cap:
            self._forgot_locked(self._seen.popitem(last=False)[1])
        return recycled, evicted

    def _evict_locked(self, cap: int) -> int:
        """Drop least recently used entries, then the oldest remembered keys, until within ``cap``."""
        evicted = 0
        while self._entries and self._held + self._reserved > cap:
            (obj, coords), entry = self._entries.popitem(last=False)
            self._held -= entry.cost
            self._drop_member(obj, coords)
            evicted += 1
        while self._seen and self._held + self._reserved > cap:
            self._forgot_locked(self._seen.popitem(last=False)[1])
        return evicted

    def invalidate(self, obj: ObjectId) -> None:
        """Drop every chunk kept for ``obj``: it changed (or vanished) since they were decoded."""
        with self._lock:
            dropped = self._invalidations_locked(obj)
        accounting.record_cache("invalidations", dropped)

    def _invalidations_locked(self, obj: ObjectId) -> int:
        kept = self._of_object.pop(obj, set())
        for c in kept:
            self._held -= self._entries.pop((obj, c)).cost
        self._counts["invalidations"] += len(kept)
        return len(kept)

    def _drop_member(self, obj: ObjectId, coords: Coords) -> None:
        kept = self._of_object.get(obj)
        if kept is not None:
            kept.discard(coords)
            if not kept:
                del self._of_object[obj]

    def shrink(self) -> None:
        """Drop least recently used chunks until the cache is within ``config.cache_bytes`` (a lowered cap)."""
        self.info()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._of_object.clear()
            self._seen.clear()
            self._seen_bytes = 0
            self._held = 0

    def info(self) -> CacheInfo:
        """The counts and what is held, within the cap now set: a cap lowered since the last use applies first,
        under the same lock (apart, a keep could insert between them and report above the cap)."""
        cap = get_config().cache_bytes
        with self._lock:
            evicted = self._evict_locked(cap)
            self._counts["evictions"] += evicted
            info = CacheInfo(**self._counts, entries=len(self._entries), held_bytes=self._held, cap_bytes=cap,
                             remembered=len(self._seen))
        accounting.record_cache("evictions", evicted)
        return info

    @property
    def held_bytes(self) -> int:
        return self._held  # one int read, a hint: `info` takes the lock


chunks = DecodedChunks()
os.register_at_fork(after_in_child=chunks.after_fork)


_formats: dict[tuple[ChunkCodec, ShardFormat | None], int] = {}
_numbers = itertools.count()  # next() is atomic: two formats met at once never get one number


def object_id(scope: Hashable, key: str, codec: ChunkCodec, shard: ShardFormat | None) -> ObjectId:
    """What keys an object's chunks: its store, its key, and its codec and shard format as a small number (equal
    formats, equal numbers). A lookup hashes the key once per chunk; hashing the formats themselves each time
    (dataclasses of tuples) was a fifth of a read of kept chunks."""
    number = _formats.get((codec, shard))
    if number is None:
        number = _formats.setdefault((codec, shard), next(_numbers))
    return (scope, key, number)


def enabled() -> bool:
    """Whether reads use the cache (its cap is above 0); what it holds beyond a cap lowered (or turned off)
    since is let go first, not kept until the next `cache_info`."""
    cap = get_config().cache_bytes
    if chunks.held_bytes > cap:
        chunks.shrink()
    return cap > 0


def cache_info() -> CacheInfo:
    """Hits, misses, revalidations, evictions and invalidations since the process started (or `clear_cache`),
    and what the cache holds now: entries, ``held_bytes`` (never above ``cap_bytes``, ``config.cache_bytes``)."""
    return chunks.info()


def clear_cache() -> None:
    """Drop every decoded chunk the process keeps (the counts stay)."""
    chunks.clear()
