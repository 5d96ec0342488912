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
"""

from __future__ import annotations

import os
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

ObjectId = tuple[str, str, ChunkCodec, ShardFormat | None]  # (store label, key, codec, shard format)
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
    held_bytes: int
    cap_bytes: int


@dataclass(slots=True)
class _Entry:
    version: Hashable
    chunk: np.ndarray  # read-only; callers copy out of it

    @property
    def cost(self) -> int:
        return self.chunk.nbytes + CHUNK_ENTRY_BYTES


class DecodedChunks:
    """The LRU store behind the module functions; thread-safe."""

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[ObjectId, Coords], _Entry] = OrderedDict()
        self._of_object: dict[ObjectId, set[Coords]] = {}
        self._held = 0
        self._counts = dict.fromkeys(("hits", "misses", "revalidations", "evictions", "invalidations"), 0)
        self._lock = threading.Lock()

    def reset_lock(self) -> None:
        self._lock = threading.Lock()  # after fork: a lock held by a thread that did not survive would never open

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

    def keep(self, obj: ObjectId, version: Hashable, coords: Coords, chunk: np.ndarray) -> None:
        """Keep a decoded chunk (the caller's own copy, made read-only here) of the object version ``version``."""
        cap = get_config().cache_bytes
        entry = _Entry(version, chunk)
        if entry.cost > cap:
            return
        chunk.flags.writeable = False
        evicted = 0
        with self._lock:
            kept = self._of_object.setdefault(obj, set())
            if kept:
                first = self._entries[(obj, next(iter(kept)))]
                if first.version != version:  # a newer (or older) version: never mix two in one object
                    self._invalidations_locked(obj)
                    kept = self._of_object.setdefault(obj, set())
            old = self._entries.pop((obj, coords), None)
            if old is not None:
                self._held -= old.cost
            self._entries[(obj, coords)] = entry
            kept.add(coords)
            self._held += entry.cost
            while self._held > cap:
                (old_obj, old_coords), evicted_entry = self._entries.popitem(last=False)
                self._held -= evicted_entry.cost
                self._drop_member(old_obj, old_coords)
                evicted += 1
            self._counts["evictions"] += evicted
        accounting.record_cache("evictions", evicted)

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
        cap = get_config().cache_bytes
        evicted = 0
        with self._lock:
            while self._entries and self._held > cap:
                (obj, coords), entry = self._entries.popitem(last=False)
                self._held -= entry.cost
                self._drop_member(obj, coords)
                evicted += 1
            self._counts["evictions"] += evicted

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._of_object.clear()
            self._held = 0

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(**self._counts, entries=len(self._entries), held_bytes=self._held,
                             cap_bytes=get_config().cache_bytes)


chunks = DecodedChunks()
os.register_at_fork(after_in_child=chunks.reset_lock)


def enabled() -> bool:
    return get_config().cache_bytes > 0


def cache_info() -> CacheInfo:
    """Hits, misses, revalidations, evictions and invalidations since the process started (or `clear_cache`),
    and what the cache holds now: entries, ``held_bytes`` (never above ``cap_bytes``, ``config.cache_bytes``)."""
    chunks.shrink()  # a cap lowered by set_config applies from the next use; report it applied
    return chunks.info()


def clear_cache() -> None:
    """Drop every decoded chunk the process keeps (the counts stay)."""
    chunks.clear()
