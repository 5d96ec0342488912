"""Request accounting a user can see: how many GET/LIST/HEAD/PUT/DELETE requests, and how many bytes, per store;
and how many were sent again (``retries``) and answered "overloaded" (``throttled``).

>>> with xarray_zarrmax.request_counts() as counts:
...     ds = xr.open_dataset(url, engine="zarrmax", chunks={})
>>> counts.total("get"), counts.by_store
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

KINDS = ("get", "list", "head", "put", "delete")
#: What happened to requests rather than requests asked for: ``retries``, requests sent again after a failure
#: (each one more request on the wire, not counted in its kind again); ``throttled``, answers that said the store
#: is overloaded (503 SlowDown, 429), each followed by a retry or an error.
EVENTS = ("retries", "throttled")


@dataclass(slots=True)
class StoreCounts:
    """Counts for one store label. ``get`` counts every GET, whole-object or ranged, once however often it was
    sent; ``retries`` and ``throttled`` are `EVENTS`."""

    get: int = 0
    list: int = 0
    head: int = 0
    put: int = 0  # every PUT, conditional or not (a local file written counts as one)
    delete: int = 0
    bytes: int = 0
    retries: int = 0
    throttled: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"get": self.get, "list": self.list, "head": self.head, "put": self.put, "delete": self.delete,
                "bytes": self.bytes, "retries": self.retries, "throttled": self.throttled}


@dataclass(slots=True)
class CacheCounts:
    """What the reads inside a `request_counts` block got from the process's decoded-chunk cache: chunks copied
    from it (``hits``), chunks looked for and decoded from storage (``misses``), version checks made to use kept
    chunks (``revalidations``: a conditional request remotely, a ``stat`` locally), chunks dropped to stay under
    the cap (``evictions``) and because their object changed (``invalidations``)."""

    hits: int = 0
    misses: int = 0
    revalidations: int = 0
    evictions: int = 0
    invalidations: int = 0


@dataclass(slots=True)
class RequestCounts:
    """What the code inside a `request_counts` block asked of each store (keyed by a label without secrets)."""

    by_store: dict[str, StoreCounts] = field(default_factory=dict)
    keys: list[tuple[str, str, str]] = field(default_factory=list)
    cache: CacheCounts = field(default_factory=CacheCounts)

    def total(self, kind: str) -> int:
        if kind not in (*KINDS, "bytes", *EVENTS):
            raise ValueError(f"kind must be one of {(*KINDS, 'bytes', *EVENTS)}. Got {kind!r} instead.")
        return sum(getattr(c, kind) for c in self.by_store.values())

    def __repr__(self) -> str:
        inner = ", ".join(f"{k!r}: {v.as_dict()}" for k, v in self.by_store.items())
        return f"RequestCounts({{{inner}}})"


_lock = threading.Lock()
_active: list[RequestCounts] = []


def _store(counts: RequestCounts, store_label: str) -> StoreCounts:
    c = counts.by_store.get(store_label)
    if c is None:
        c = counts.by_store[store_label] = StoreCounts()
    return c


def record(store_label: str, kind: str, key: str, nbytes: int = 0) -> None:
    """Called by the byte sources for every request they send."""
    if not _active:
        return
    with _lock:
        for counts in _active:
            c = _store(counts, store_label)
            setattr(c, kind, getattr(c, kind) + 1)
            c.bytes += nbytes
            counts.keys.append((store_label, kind, key))


def record_event(store_label: str, event: str) -> None:
    """Called by the byte sources for each of the `EVENTS` (``retries``, ``throttled``); not a request of its own
    in ``keys``."""
    if not _active:
        return
    with _lock:
        for counts in _active:
            c = _store(counts, store_label)
            setattr(c, event, getattr(c, event) + 1)


def record_cache(what: str, n: int = 1) -> None:
    """Called by the decoded-chunk cache: ``n`` more of ``what`` (a `CacheCounts` field)."""
    if not _active or not n:
        return
    with _lock:
        for counts in _active:
            setattr(counts.cache, what, getattr(counts.cache, what) + n)


@contextlib.contextmanager
def request_counts() -> Iterator[RequestCounts]:
    """Count the requests made in this process (every thread) while the block runs.

    Requests made by dask workers in other processes are not seen; use the threaded scheduler to count.
    """
    counts = RequestCounts()
    with _lock:
        _active.append(counts)
    try:
        yield counts
    finally:
        with _lock:
            _active.remove(counts)
