"""A soak: many open/read/close cycles of one store with the shard-index cache, conditional reads and the writer
in the loop, sampling what the process holds (issue 46): resident memory, open descriptors, threads, TCP
connections to the store and the size of every cache against its cap, so that a leak shows as growth after the
warm-up. The test (tests/properties/test_soak.py) and the table (asv_bench/tables/soak.py) run it.

Each cycle opens the store with engine="zarrmax", reads a window of one shard (the shard's index is fetched and
cached, or the chunk comes from the decoded-chunk cache once its object is proven unchanged), every
`REWRITE_EVERY` cycles (then in a shard of the first half) rewrites that shard with `xarray_zarrmax.to_zarr` (a
region: the whole shard in one PUT, or every other time its first half, a read-merge-write sent as a conditional
PUT), reads a window of another chunk of the same shard (ranges conditional on the version the cached index came
from: after a rewrite they fail, 412 on S3 or another file locally, and the index is read again), checks both
windows against what the store must hold, and closes the Dataset. Every `DASK_EVERY`-th cycle reads through
dask (``chunks={}``, the threaded scheduler) instead.

The decoded-chunk cache is capped at `CHUNK_CACHE_BYTES`, a quarter of the array, so that it is full and
evicting all along (at its default cap, a sixteenth of the machine's memory, it would hold the whole array after
the warm-up and serve most reads, and the shard-index cache would hardly be used).

Samples are taken every ``sample_every`` cycles after a ``gc.collect()`` (cyclic garbage not yet collected is
no leak).
"""

from __future__ import annotations

import gc
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

#: The array: 8 shards of 16 time steps, each of 4 chunks of 256 KiB (chunks from 256 KiB are encoded into the
#: writer's pooled buffers, so that pool is in the loop too). Only the first half of the shards is ever rewritten:
#: the files of the others are older than `tuning.RACY_WINDOW_NS` 2 s into the soak, so that their indexes and
#: chunks are kept locally too, however fast the cycles go.
SHAPE, CHUNKS, SHARDS = (128, 128, 128), (4, 128, 128), (16, 128, 128)
REWRITE_EVERY = 20
DASK_EVERY = 7
CHUNK_CACHE_BYTES = 2 * 2**20
#: What the checks compare: the median over these cycles (after the warm-up) with the median of the last ones.
WARM = (200, 400)
LAST = 200

METRICS = ("rss_mib", "fds", "threads", "os_threads", "connections", "index_open", "index_entries", "index_kib",
           "chunk_entries", "chunk_mib", "pool_mib", "recent_stores", "live_stores")


@dataclass(frozen=True)
class Store:
    """What a soak reads and writes: ``target`` (a path or an s3:// URL) with ``options`` for both engines and
    `to_zarr`; ``port`` the server's, whose connections are counted (None: local, no connections)."""

    kind: str
    target: str
    options: dict[str, Any] = field(default_factory=dict)
    port: int | None = None


@dataclass(frozen=True)
class Sample:
    cycle: int
    seconds: float
    rss_mib: float
    fds: int
    threads: int  # threading.active_count(): Python's threads
    os_threads: int  # the process's, Rust's (obstore's runtime) included
    connections: int  # TCP sockets of this process to the store's port, any state, while a Dataset is open
    index_open: int  # shard indexes kept while it is open (its own: the cache is in the loop)
    index_entries: int
    index_kib: float
    chunk_entries: int  # the decoded-chunk cache's (read.chunk_cache)
    chunk_mib: float
    pool_mib: float  # the writer's pooled buffers
    recent_stores: int  # stores unpickled here and held (storage.registry)
    live_stores: int  # stores unpickled here still referenced


def caps() -> dict[str, float]:
    """Each cache's cap, in the units of its metric."""
    from xarray_zarrmax import get_config
    from xarray_zarrmax.tuning import INDEX_CACHE_BYTES, RECENT_STORES

    return {"index_kib": INDEX_CACHE_BYTES / 1024, "chunk_mib": CHUNK_CACHE_BYTES / 2**20,
            "pool_mib": get_config().write_buffer_bytes / 2**20, "recent_stores": RECENT_STORES}


def connections(port: int | None) -> int:
    """The TCP sockets of this process to ``port``, in any state (0 for None)."""
    import psutil

    if port is None:
        return 0
    return sum(1 for c in psutil.Process().net_connections("tcp") if c.raddr and c.raddr.port == port)


def sample(cycle: int, start: float, while_open: tuple[int, int]) -> Sample:
    """What the process holds now; ``while_open``: the connections and indexes counted while the cycle's Dataset
    was open."""
    import psutil

    from xarray_zarrmax.core.buffers import POOL
    from xarray_zarrmax.read import cache_info, index_cache
    from xarray_zarrmax.storage import registry

    gc.collect()
    proc = psutil.Process()
    entries, nbytes = index_cache.size()
    chunks = cache_info()
    return Sample(cycle, time.perf_counter() - start, proc.memory_info().rss / 2**20, proc.num_fds(),
                  threading.active_count(), proc.num_threads(), *while_open, entries, nbytes / 1024,
                  chunks.entries, chunks.held_bytes / 2**20, POOL.kept_bytes() / 2**20, len(registry._recent),
                  len(registry._registry))


class Soak:
    """The store's array and what it must hold; `cycle` runs one open/read/(write)/close cycle."""

    def __init__(self, store: Store, seed: int = 0) -> None:
        self.store = store
        self.rng = np.random.default_rng(seed)
        self.expected = self.rng.normal(size=SHAPE).astype("f4")
        self.rewrites = 0
        # GETs of each cycle's second read, by whether the shard was rewritten since the first read: one where
        # the index the first read cached served (or a kept chunk, proven unchanged), more where what was kept
        # was found stale and read again
        self.second_gets: dict[bool, list[int]] = {True: [], False: []}
        self.index_kept = 0  # cycles whose Dataset had a shard index kept once read

    def setup(self) -> None:
        import xarray as xr

        import xarray_zarrmax

        ds = xr.Dataset({"v": (("t", "y", "x"), self.expected)}, coords={"t": np.arange(SHAPE[0])})
        xarray_zarrmax.to_zarr(ds, self.store.target, mode="w", encoding={"v": {"chunks": CHUNKS, "shards": SHARDS}},
                               **self._write_options())

    def _write_options(self) -> dict[str, Any]:
        so = self.store.options.get("storage_options")
        return {} if so is None else {"storage_options": so}

    def _window(self, shard: int, chunk: int) -> tuple[slice, ...]:
        start = shard * SHARDS[0] + chunk * CHUNKS[0]
        t0 = start + int(self.rng.integers(0, CHUNKS[0]))
        t1 = int(self.rng.integers(t0 + 1, start + CHUNKS[0] + 1))
        y0, x0 = (int(self.rng.integers(0, n - 8)) for n in SHAPE[1:])
        return slice(t0, t1), slice(y0, y0 + 8), slice(x0, x0 + 16)

    def _read(self, ds: Any, window: tuple[slice, ...]) -> None:
        got = ds["v"][window].values
        if not np.array_equal(got, self.expected[window]):
            raise AssertionError(f"{self.store.kind}: window {window} does not read what the store holds")

    def _rewrite(self, shard: int) -> None:
        import xarray as xr

        import xarray_zarrmax

        self.rewrites += 1
        steps = SHARDS[0] if self.rewrites % 2 else SHARDS[0] // 2  # every other one a merge of half the shard
        start = shard * SHARDS[0]
        values = self.rng.normal(size=(steps, *SHAPE[1:])).astype("f4")
        xarray_zarrmax.to_zarr(xr.Dataset({"v": (("t", "y", "x"), values)}), self.store.target,
                               region={"t": slice(start, start + steps)}, **self._write_options())
        self.expected[start:start + steps] = values

    def cycle(self, i: int, while_open: Callable[[], None] | None = None) -> None:
        """Cycle ``i``; ``while_open`` is called after the reads, before the Dataset is closed."""
        import dask
        import xarray as xr

        import xarray_zarrmax
        from xarray_zarrmax.read import index_cache

        rewritten = i % REWRITE_EVERY == 0
        nshards = SHAPE[0] // SHARDS[0]
        per_shard = SHARDS[0] // CHUNKS[0]
        shard = int(self.rng.integers(0, nshards // 2 if rewritten else nshards))
        first, second = (int(c) for c in self.rng.choice(per_shard, 2, replace=False))
        chunks = {} if i % DASK_EVERY == DASK_EVERY - 1 else None
        with dask.config.set(scheduler="threads"), \
                xr.open_dataset(self.store.target, engine="zarrmax", chunks=chunks, **self.store.options) as ds:
            self._read(ds, self._window(shard, first))
            if rewritten:
                self._rewrite(shard)
            with xarray_zarrmax.request_counts() as counts:
                self._read(ds, self._window(shard, second))
            self.second_gets[rewritten].append(counts.total("get"))
            self.index_kept += index_cache.size()[0] > 0
            if while_open is not None:
                while_open()


@dataclass
class Result:
    """A soak's samples (the first before the first cycle), the GETs of its cycles' second reads
    (`Soak.second_gets`) and what the decoded-chunk cache counted meanwhile (hits, misses, revalidations,
    evictions, invalidations)."""

    store: str
    samples: list[Sample]
    second_gets: dict[bool, list[int]]
    chunk_counts: dict[str, int]
    index_kept: int  # cycles whose Dataset had a shard index kept once read

    def gets_after_rewrite(self) -> tuple[int, int]:
        """Second reads after a rewrite that sent more than one GET (the first read's cached index or chunks
        found stale: read again), and all of them."""
        after = self.second_gets[True]
        return sum(1 for n in after if n > 1), len(after)

    def one_get(self) -> tuple[int, int]:
        """Second reads with no rewrite served with one GET (a range with the index the first read cached, or
        a chunk kept decoded, proven unchanged by a conditional request), and all of them."""
        others = self.second_gets[False]
        return sum(1 for n in others if n == 1), len(others)


_COUNTS = ("hits", "misses", "revalidations", "evictions", "invalidations")


def run(store: Store, cycles: int, *, sample_every: int = 20, seed: int = 0,
        progress: Callable[[Sample], None] | None = None) -> Result:
    """``cycles`` cycles of a fresh soak of ``store``, sampled every ``sample_every`` cycles, with the
    decoded-chunk cache capped at `CHUNK_CACHE_BYTES` (and emptied first) and the shard-index cache emptied."""
    import xarray_zarrmax
    from xarray_zarrmax.read import cache_info, clear_cache, index_cache

    soak = Soak(store, seed)
    counted = (0, 0)

    def count() -> None:
        nonlocal counted
        counted = (connections(store.port), index_cache.size()[0])

    with xarray_zarrmax.set_config(cache_bytes=CHUNK_CACHE_BYTES):
        clear_cache()
        for token in index_cache.tokens():  # indexes of Datasets left open before (other tests in this process):
            index_cache.forget_store(token)  # the figures are the soak's own
        soak.setup()
        before = cache_info()
        start = time.perf_counter()
        samples = [sample(0, start, (0, 0))]
        for i in range(cycles):
            due = (i + 1) % sample_every == 0
            soak.cycle(i, count if due else None)
            if due:
                samples.append(sample(i + 1, start, counted))
                if progress is not None:
                    progress(samples[-1])
        after = cache_info()
    counts = {name: getattr(after, name) - getattr(before, name) for name in _COUNTS}
    return Result(store.kind, samples, soak.second_gets, counts, soak.index_kept)


def figures(samples: list[Sample], warm: tuple[int, int] = WARM, last: int = LAST) -> dict[str, dict[str, float]]:
    """Each metric at the start (the first sample), after the warm-up (the median over cycles ``warm``), at the
    end (the median over the last ``last`` cycles) and its largest."""
    end = samples[-1].cycle
    warm_samples = [s for s in samples if warm[0] <= s.cycle <= warm[1]] or samples
    last_samples = [s for s in samples if s.cycle > end - last] or samples[-1:]
    out = {}
    for metric in METRICS:
        out[metric] = {"start": float(getattr(samples[0], metric)),
                       "warm": float(statistics.median(getattr(s, metric) for s in warm_samples)),
                       "end": float(statistics.median(getattr(s, metric) for s in last_samples)),
                       "max": float(max(getattr(s, metric) for s in samples))}
    return out


#: How much a metric may grow from after the warm-up to the end: (absolute, fraction of the warm value); the
#: larger of the two. Caches must also stay under their caps, and connections under the request budget.
MARGINS = {"rss_mib": (64.0, 0.2), "fds": (8, 0.0), "threads": (4, 0.0), "os_threads": (4, 0.0),
           "connections": (4, 0.0), "index_open": (16, 0.0), "index_entries": (16, 0.0), "index_kib": (64, 0.0),
           "chunk_entries": (4, 0.0), "chunk_mib": (1, 0.0), "pool_mib": (16, 0.0), "recent_stores": (2, 0.0),
           "live_stores": (2, 0.0)}


def problems(samples: list[Sample], warm: tuple[int, int] = WARM, last: int = LAST) -> list[str]:
    """What grew past its margin after the warm-up, or past its cap; empty when the soak was flat."""
    from xarray_zarrmax import get_config

    found = []
    table = figures(samples, warm, last)
    for metric, (absolute, fraction) in MARGINS.items():
        row = table[metric]
        allowed = row["warm"] + max(absolute, fraction * row["warm"])
        if row["end"] > allowed:
            found.append(f"{metric} grew from {row['warm']:g} after the warm-up to {row['end']:g} at the end "
                         f"(allowed {allowed:g})")
    for metric, cap in {**caps(), "connections": get_config().concurrency}.items():
        if table[metric]["max"] > cap:
            found.append(f"{metric} reached {table[metric]['max']:g}, over its cap {cap:g}")
    return found


def as_dicts(samples: list[Sample]) -> list[dict[str, Any]]:
    return [asdict(s) for s in samples]
