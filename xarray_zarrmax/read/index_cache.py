"""Shard indexes kept across reads, per process, each only for the object version it was read from.

A partial read of a shard needs its index first: one more request on the critical path. Keeping the index saves
that request, so the cache must prove freshness at no extra request: an entry is keyed by (store token, key) and
holds the version (ETag, file identity and timestamps) of the object it came from; the ranges read with it are
conditional on that version, and a changed object drops the entry (`forget`) and is read afresh. Only versions
that change whenever the object does are cached (`Fetched.cacheable`). Bounded by `tuning.INDEX_CACHE_BYTES`,
least recently used first out, each entry counted with what it costs beyond its index (`tuning.INDEX_ENTRY_BYTES`).

A store's token is its open's (`ZarrmaxStore`): no later open uses its entries, so closing the Dataset drops them
(`forget_store`); without that, every open/read/close cycle left its indexes behind until the cap pushed them out.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from xarray_zarrmax.storage.abc import Fetched
from xarray_zarrmax.tuning import INDEX_CACHE_BYTES, INDEX_ENTRY_BYTES


@dataclass(frozen=True, slots=True)
class CachedIndex:
    index: np.ndarray
    version: Hashable  # the object version the index was read from: every use proves it still holds


_index_cache: OrderedDict[tuple[str, str], CachedIndex] = OrderedDict()
_index_cache_bytes = 0
_keys_of: dict[str, set[str]] = {}  # the keys kept for each store token, for `forget_store`
_index_lock = threading.Lock()


def _after_fork() -> None:
    global _index_lock
    _index_lock = threading.Lock()  # a lock held by a thread that did not survive fork would never open


os.register_at_fork(after_in_child=_after_fork)


def lookup(token: str, key: str) -> CachedIndex | None:
    """The index kept for ``key`` of the store ``token`` names, if any: the caller proves its version holds."""
    with _index_lock:
        entry = _index_cache.get((token, key))
        if entry is not None:
            _index_cache.move_to_end((token, key))
        return entry


def remember(token: str, key: str, index: np.ndarray, fetched: Fetched) -> None:
    """Remember an index, only when its object's version proves freshness on later reads."""
    global _index_cache_bytes
    if not fetched.cacheable:
        forget(token, key)
        return
    with _index_lock:
        _drop(token, key)
        _index_cache[(token, key)] = CachedIndex(index, fetched.version)
        _keys_of.setdefault(token, set()).add(key)
        _index_cache_bytes += _cost(index)
        while _index_cache_bytes > INDEX_CACHE_BYTES and len(_index_cache) > 1:
            (old_token, old_key), _ = next(iter(_index_cache.items()))
            _drop(old_token, old_key)


def forget(token: str, key: str) -> None:
    """Drop the index kept for ``key``: its object changed, or its version cannot prove freshness."""
    with _index_lock:
        _drop(token, key)


def forget_store(token: str) -> None:
    """Drop every index kept for the store ``token`` names: it was closed, and no other store shares a token."""
    with _index_lock:
        for key in list(_keys_of.get(token, ())):
            _drop(token, key)


def _cost(index: np.ndarray) -> int:
    return index.nbytes + INDEX_ENTRY_BYTES


def _drop(token: str, key: str) -> None:
    """Drop one entry, if kept; the caller holds the lock."""
    global _index_cache_bytes
    previous = _index_cache.pop((token, key), None)
    if previous is None:
        return
    _index_cache_bytes -= _cost(previous.index)
    keys = _keys_of[token]
    keys.discard(key)
    if not keys:
        del _keys_of[token]


def tokens() -> set[str]:
    """The store tokens that have indexes kept (for benchmarks that check what a read cached)."""
    with _index_lock:
        return {token for token, _ in _index_cache}


def size() -> tuple[int, int]:
    """The indexes kept and the bytes counted against `INDEX_CACHE_BYTES` (for soaks that watch the cap)."""
    with _index_lock:
        return len(_index_cache), _index_cache_bytes
