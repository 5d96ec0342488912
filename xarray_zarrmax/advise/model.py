"""The layout advisor's cost model: pure arithmetic on geometry, no I/O.

For a candidate layout (inner chunk shape, shard shape or none) and a read (one or more box selections) it
counts what our reader sends, decision for decision as `xarray_zarrmax.read.fetch` makes them: one GET per
unsharded chunk; for a shard, one whole-object GET (in ``split_size`` parts on remote stores) when the read
needs at least ``full_shard_fraction`` of its chunks and its index is not cached, otherwise one suffix GET
of the index (``16 * n + 4`` bytes, then cached for the rest of the open) and one GET per run of chunks
coalesced within ``coalesce_gap``. Counts come from `layout.plan_reads` run on each dimension alone; objects
whose per-dimension footprints are the same fetch the same way, so a full scan of millions of chunks costs
as many simulated objects as there are distinct footprints (a handful), not millions.

Time is then ``round_trips * latency + requests * request_s + indexes * index_s + chunks * chunk_s +
bytes / bandwidth + decoded_bytes / decode_rate`` (the rate at the chunk's size): see `predict`.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from xarray_zarrmax.core.geometry import Axis, Selection, plan_reads, task_chunks
from xarray_zarrmax.tuning import JOB_BYTES, PIECE_BYTES, STREAM_BYTES


@dataclass(frozen=True, slots=True)
class Layout:
    """A candidate storage layout for one variable: inner chunks, and the shard holding them (None: unsharded)."""

    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None = None

    @property
    def outer(self) -> tuple[int, ...]:
        """The stored object's shape: the shard, or the chunk when unsharded."""
        return self.shards if self.shards is not None else self.chunks

    def chunks_per_object(self) -> int:
        return math.prod(o // c for o, c in zip(self.outer, self.chunks, strict=True))

    def encoding(self) -> dict[str, tuple[int, ...]]:
        """The ``to_zarr`` encoding entry for this layout (``chunks`` is the shard shape when sharded, as
        xarray's ``encoding["shards"]`` convention wants the inner chunk in ``chunks``)."""
        enc: dict[str, tuple[int, ...]] = {"chunks": self.chunks}
        if self.shards is not None:
            enc["shards"] = self.shards
        return enc

    def __str__(self) -> str:
        chunks = "x".join(map(str, self.chunks))
        return chunks if self.shards is None else f"{chunks} in {'x'.join(map(str, self.shards))}"


@dataclass(frozen=True, slots=True)
class Reader:
    """How our reader fetches: the `Config` fields the counts depend on, and whether the store is local
    (local files are read whole in one request; remote objects above ``split_size`` in parts)."""

    concurrency: int = 128
    full_shard_fraction: float = 0.5
    coalesce_gap: int = 2**20
    split_size: int = 16 * 2**20
    inflight_bytes: int = 512 * 2**20
    task_bytes: int = 0  # config.task_bytes (chunks={} groups small objects; advise passes the config in); 0: none
    threads: int = 1
    local: bool = False
    index_crc32c: bool = True  # zarr-python writes a crc32c after every shard index


@dataclass(frozen=True, slots=True)
class Costs:
    """Calibration: what a store and a decoder deliver (from `advise_probe`, or given)."""

    latency_s: float = 0.02  # first byte of a GET
    request_bps: float = 80e6  # one request's stream
    aggregate_bps: float = 2e9  # every stream together (the NIC, or the server)
    decode_bps: float = 1e9  # decoded bytes per second per thread, of large chunks
    ratio: float = 1.0  # encoded / decoded bytes of a chunk
    request_s: float = 0.0  # work per request that does not overlap (client, and server and proxy where they
    #                         share the cores): the wall time of many tiny requests at once, per request
    chunk_s: float = 0.0  # our reader's fixed work per inner chunk (hand-off, decode call, placement), wall
    index_s: float = 0.0  # our reader's work per shard index it parses (parse, check, coalesce), wall: a shard
    #                       read whole has its index parsed as much as one read through its index
    index_entry_s: float = 0.0  # and per entry of that index (its checks sort every entry): a map's shard of
    #                             7,200 chunks costs 20 times an 8-chunk shard's
    connect_s: float = 0.0  # opening a connection to a remote store, per request in flight at once: a first
    #                         read after an open opens one for each (the client's pool starts empty)
    decode_curve: tuple[tuple[int, float], ...] = ()  # (decoded bytes of a chunk, decoded bytes per second per
    #                         thread) at a few chunk sizes, ascending: zstd decodes a 16 kB chunk at half the rate
    #                         of a 1 MB one (each block's tables are built afresh). Empty: decode_bps at any size

    def __post_init__(self) -> None:
        # sorted tuples whatever came in (a list of lists from JSON; sizes in any order): interpolation needs
        # ascending sizes, and a frozen Costs stays hashable
        curve = tuple(sorted((int(n), float(r)) for n, r in self.decode_curve))
        if any(n <= 0 or not r > 0 for n, r in curve):
            raise ValueError(f"expected decode_curve points (chunk bytes > 0, bytes/s > 0). Got {curve!r} instead.")
        object.__setattr__(self, "decode_curve", curve)

    def decode_s(self, chunks: int, decoded_bytes: int) -> float:
        """Seconds on one thread to decode ``chunks`` chunks of ``decoded_bytes`` in all: at the rate of
        ``decode_curve`` for their mean size (linear in the logarithm of the size between two probed sizes,
        the end's rate beyond either end), or ``decode_bps``."""
        if decoded_bytes <= 0:
            return 0.0
        return decoded_bytes / decode_rate(self.decode_curve, decoded_bytes / max(chunks, 1), self.decode_bps)


def decode_rate(curve: Sequence[tuple[int, float]], chunk_bytes: float, default: float) -> float:
    """The decode rate at ``chunk_bytes`` from ``(size, rate)`` points in ascending size (see
    `Costs.decode_curve`)."""
    if not curve:
        return default
    sizes = [math.log(max(float(n), 1.0)) for n, _ in curve]
    return float(np.interp(math.log(max(chunk_bytes, 1.0)), sizes, [float(r) for _, r in curve]))


@dataclass(frozen=True, slots=True)
class ReadCounts:
    """What one read (a pattern) costs under one layout."""

    objects: int = 0  # stored objects touched
    requests: int = 0  # GETs, index reads included
    index_requests: int = 0
    bytes: int = 0  # bytes fetched
    decoded_bytes: int = 0  # bytes of chunks decoded
    round_trips: int = 0  # sequential latencies on the critical path
    peak_bytes: int = 0  # result + fetched-not-decoded bytes + one decoded chunk per thread
    chunks: int = 0  # inner chunks decoded
    indexes: int = 0  # shard indexes parsed: one per shard whose index is not cached, read whole or by ranges
    index_entries: int = 0  # the entries of those indexes (chunks per shard, each)

    def __add__(self, other: ReadCounts) -> ReadCounts:
        return ReadCounts(
            self.objects + other.objects, self.requests + other.requests,
            self.index_requests + other.index_requests, self.bytes + other.bytes,
            self.decoded_bytes + other.decoded_bytes, self.round_trips + other.round_trips,
            max(self.peak_bytes, other.peak_bytes), self.chunks + other.chunks, self.indexes + other.indexes,
            self.index_entries + other.index_entries,
        )


@dataclass(frozen=True, slots=True)
class Prediction:
    """A read's counts and its predicted seconds."""

    counts: ReadCounts
    seconds: float


@dataclass(slots=True)
class IndexCache:
    """The shard indexes a read has seen (our reader caches them per open); keyed by object coordinates."""

    seen: set[tuple[int, ...]] = field(default_factory=set)


@lru_cache(maxsize=256)
def _write_order(chunks_per_shard: tuple[int, ...]) -> np.ndarray:
    """The chunk coordinates of a shard in the order of its bytes, ``(n, ndim)``: the Morton order zarr-python
    writes them in (`morton_order`)."""
    return morton_order(chunks_per_shard)


def morton_order(shape: tuple[int, ...]) -> np.ndarray:
    """Every coordinate of a grid of ``shape`` in zarr-python's Morton (Z) order, ``(n, ndim)``: sorted by a
    code interleaving their bits, lowest first and dimension 0 first at each bit, a dimension dropping out
    once its bits (those of its largest coordinate) are used up. zarr builds tuples of Python ints for it;
    costing a search's layouts spent 70% of its time there."""
    if not shape:
        return np.zeros((1, 0), dtype=np.int64)  # a 0-d grid: its one coordinate
    coords = np.indices(shape).reshape(len(shape), -1)
    bits = [(int(n) - 1).bit_length() for n in shape]
    code = np.zeros(coords.shape[1], dtype=np.int64)
    out_bit = 0
    for bit in range(max(bits, default=0)):
        for d, used in enumerate(bits):
            if bit < used:
                code |= ((coords[d] >> bit) & 1) << out_bit
                out_bit += 1
    return np.ascontiguousarray(coords[:, np.argsort(code, kind="stable")].T)


@lru_cache(maxsize=1024)
def _stored_layout(grid: tuple[int, ...], extents: tuple[int, ...], chunks: tuple[int, ...], chunk_enc: int,
                   compressed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Where a shard's chunks lie in its bytes: per chunk of the grid, its rank among the stored chunks
    (write order; -1 where it is not stored), and per rank its encoded size.

    ``extents`` are the shard's elements inside the array along each dimension. Chunks wholly outside are
    not stored (zarr does not store chunks holding only the fill value). A chunk partly outside is stored;
    compressed, its fill-value part costs almost nothing, so its size is ``chunk_enc`` times the fraction
    of it inside the array (a 361-row grid in 30-row chunks ends in a chunk of one row: 1/30 of the bytes,
    which decides whether the ranges around it merge); uncompressed, it is stored whole."""
    inside = [np.clip(e - np.arange(g) * c, 0, c) / c for g, e, c in zip(grid, extents, chunks, strict=True)]
    fraction = np.ones(grid)
    for d, f in enumerate(inside):
        fraction = fraction * f.reshape([-1 if i == d else 1 for i in range(len(grid))])
    order = _write_order(grid)
    in_order = fraction[tuple(order.T)]
    stored = in_order > 0
    rank = np.full(grid, -1, dtype=np.int64)
    rank[tuple(order[stored].T)] = np.arange(int(stored.sum()))
    if compressed:
        sizes = np.maximum(1, np.round(in_order[stored] * chunk_enc)).astype(np.int64)
    else:
        sizes = np.full(int(stored.sum()), chunk_enc, dtype=np.int64)
    return rank, sizes


def coalesced_runs(ranks: np.ndarray, sizes: np.ndarray, gap: int) -> tuple[int, int]:
    """(requests, bytes) of `layout.coalesce` applied to the byte ranges of the distinct stored chunks
    ``ranks``, where chunk ``r`` is ``sizes[r]`` bytes laid end to end in rank order: consecutive ranges
    merge when the bytes between them are at most ``gap``."""
    r = np.sort(ranks)
    if r.size == 0:
        return 0, 0
    ends = np.cumsum(sizes)
    starts_at = ends - sizes
    breaks = starts_at[r[1:]] - ends[r[:-1]] > gap
    starts = np.concatenate(([r[0]], r[1:][breaks]))
    stops = np.concatenate((r[:-1][breaks], [r[-1]]))
    return int(starts.size), int((ends[stops] - starts_at[starts]).sum())


def capped_runs(ranks: np.ndarray, sizes: np.ndarray, gap: int, cap: int) -> tuple[int, int]:
    """(requests, bytes) of a local shard read in pieces (`fetch._pieces`): as `coalesced_runs`, but a read
    grows by the next chunk only while it spans at most ``cap`` bytes (and always holds one chunk)."""
    r = np.sort(ranks)
    if r.size == 0:
        return 0, 0
    ends = np.cumsum(sizes)
    s, e = (ends - sizes)[r], ends[r]
    bounds = np.concatenate(([0], np.flatnonzero(s[1:] - e[:-1] > gap) + 1, [r.size]))
    requests = nbytes = 0
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        if e[b - 1] - s[a] <= cap:  # the common case: a run short enough to be one read
            requests, nbytes = requests + 1, nbytes + int(e[b - 1] - s[a])
            continue
        i = int(a)
        while i < b:
            j = max(i + 1, i + int(np.searchsorted(e[i:b], s[i] + cap, side="right")))
            requests, nbytes = requests + 1, nbytes + int(e[j - 1] - s[i])
            i = j
    return requests, nbytes


@lru_cache(maxsize=65536)
def _footprints(start: int, stop: int, n: int, outer: int, inner: int) -> tuple[tuple[int, tuple[int, ...]], ...]:
    return tuple((coords[0], tuple(p.coords[0] for p in pieces))
                 for coords, pieces in plan_reads((Axis(start, stop),), (n,), (outer,), (inner,)))


def _dimension_footprints(axis: Axis, n: int, outer: int, inner: int) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """Per object along one dimension: its index and the chunk indices (inside it) the read touches."""
    if axis.indices is not None:
        raise ValueError("expected box selections (ranges along every dimension)")
    return _footprints(axis.start, axis.stop, n, outer, inner)


def _extent(n: int, outer: int, obj: int) -> int:
    """Elements of object ``obj`` inside the array along one dimension (less than ``outer`` at the edge)."""
    return min(outer, n - obj * outer)


def _object_fetch(shape: Sequence[int], layout: Layout, obj: tuple[int, ...], touched: Sequence[tuple[int, ...]],
                  chunk_enc: int, chunk_dec: int, reader: Reader, cached: bool,
                  compressed: bool) -> tuple[int, int, int, int]:
    """(requests, index requests, bytes, round trips) for one object read of the chunks ``touched``
    (per dimension, their indices inside it), as `fetch._fetch_object_once` does it, or for a local shard
    whose touched chunks decode to `tuning.STREAM_BYTES` or more, as `fetch._read_local_shard` does: the index
    (or, for a file of at most `tuning.PIECE_BYTES` of which at least ``full_shard_fraction`` of the chunks are
    read, the whole file), then the chunks in pieces of at most PIECE_BYTES."""
    extents = tuple(_extent(int(n), o, i) for n, o, i in zip(shape, layout.outer, obj, strict=True))
    if layout.shards is None:
        inside = math.prod(e / c for e, c in zip(extents, layout.chunks, strict=True))
        nbytes = max(1, round(chunk_enc * inside)) if compressed else chunk_enc
        parts = 1 if reader.local else max(1, -(-nbytes // reader.split_size))
        return parts, 0, nbytes, 1 + (parts > 1)
    grid = tuple(o // c for o, c in zip(layout.shards, layout.chunks, strict=True))
    rank, sizes = _stored_layout(grid, extents, layout.chunks, chunk_enc, compressed)
    index_nbytes = 16 * layout.chunks_per_object() + (4 if reader.index_crc32c else 0)
    pieces = math.prod(len(t) for t in touched)
    if reader.local and pieces * chunk_dec >= STREAM_BYTES:
        stored = int(sizes.sum()) + index_nbytes
        if not cached and stored <= PIECE_BYTES and pieces >= reader.full_shard_fraction * layout.chunks_per_object():
            # one read of the file; the pieces are slices of it
            return 1, 0, stored, 1
        runs, nbytes = capped_runs(rank[np.ix_(*touched)].ravel(), sizes, reader.coalesce_gap, PIECE_BYTES)
        index = 0 if cached else 1
        return runs + index, index, nbytes + index * index_nbytes, 1 + index
    if not cached and pieces >= reader.full_shard_fraction * layout.chunks_per_object():
        stored = int(sizes.sum()) + index_nbytes
        parts = 1 if reader.local else max(1, -(-stored // reader.split_size))
        return parts, 0, stored, 1 + (parts > 1)
    runs, nbytes = coalesced_runs(rank[np.ix_(*touched)].ravel(), sizes, reader.coalesce_gap)
    index = 0 if cached else 1
    return runs + index, index, nbytes + (0 if cached else index_nbytes), 1 + index


def count_read(selections: Sequence[Selection], shape: Sequence[int], itemsize: int, layout: Layout,
               chunk_enc: int, reader: Reader, cache: IndexCache | None = None, *,
               compressed: bool = False) -> ReadCounts:
    """Count what reading ``selections`` one after the other costs (a fresh open unless ``cache`` is given).

    Parameters
    ----------
    selections
        Box selections (one `Axis` per dimension, ranges only), read in order.
    chunk_enc
        Encoded bytes of one chunk wholly inside the array.
    compressed
        Whether the codecs compress: then a chunk partly outside the array is stored at ``chunk_enc`` times
        the fraction of it inside (its fill-value part compresses to almost nothing); else at full size.
    """
    cache = IndexCache() if cache is None else cache
    total = ReadCounts()
    chunk_dec = itemsize * math.prod(layout.chunks)
    for axes in selections:
        per_dim = [_dimension_footprints(a, int(n), o, c)
                   for a, n, o, c in zip(axes, shape, layout.outer, layout.chunks, strict=True)]
        if any(not d for d in per_dim):
            continue
        # Objects with the same (extent inside the array, touched chunks) along every dimension fetch alike: per
        # dimension, count the objects of each footprint, and simulate one object per combination of footprints.
        # Cached indexes break that symmetry, so reads of several selections (ML batches: small) go one by one.
        one_by_one = len(selections) > 1 or bool(cache.seen)
        keyed: list[Counter[tuple[int, int, tuple[int, ...]]]] = []
        for d, n, o in zip(per_dim, shape, layout.outer, strict=True):
            keyed.append(Counter((i if one_by_one else -1, _extent(int(n), o, i), t) for i, t in d))
        groups: list[tuple[int, tuple[int, ...], list[tuple[int, ...]], bool]] = []
        for combo in itertools.product(*(k.items() for k in keyed)):
            count = math.prod(m for _, m in combo)
            keys = [k for k, _ in combo]
            obj = tuple(i for i, _, _ in keys) if one_by_one else _representative(keys, shape, layout)
            groups.append((count, obj, [t for _, _, t in keys], one_by_one and obj in cache.seen))
        objects = requests = index_requests = nbytes = decoded = chunks = indexes = 0
        per_index = layout.chunks_per_object() if layout.shards is not None else 0
        rounds_per_object = 1
        largest = 1  # the largest single fetch, as the reader's in-flight budget counts it
        for count, obj, touched, seen in groups:
            r, ir, b, rt = _object_fetch(shape, layout, obj, touched, chunk_enc, chunk_dec, reader, seen, compressed)
            objects += count
            requests += r * count
            index_requests += ir * count
            nbytes += b * count
            decoded += math.prod(len(t) for t in touched) * chunk_dec * count
            chunks += math.prod(len(t) for t in touched) * count
            indexes += (layout.shards is not None and not seen) * count
            rounds_per_object = max(rounds_per_object, rt)
            # what one fetch holds of the reader's in-flight budget (fetch._fetch_object_once): a whole object
            # at its decoded size; a shard index at its size; a shard's ranges at their size, once indexed
            n_touched = math.prod(len(t) for t in touched)
            whole_dec = chunk_dec * layout.chunks_per_object()
            if not layout.shards or (not seen and n_touched >= reader.full_shard_fraction * layout.chunks_per_object()):
                largest = max(largest, whole_dec)
            else:
                index = 16 * layout.chunks_per_object() + (4 if reader.index_crc32c else 0)
                largest = max(largest, b if seen else max(index, b - index))
        if layout.shards is not None and one_by_one:
            cache.seen.update(obj for _, obj, _, _ in groups)
        slots = max(1, min(reader.concurrency, reader.inflight_bytes // largest))
        waves = max(-(-objects // slots) * rounds_per_object, -(-requests // reader.concurrency))
        result = itemsize * math.prod(a.size for a in axes)
        in_flight = min(objects, slots) * (nbytes // max(objects, 1))
        peak = result + in_flight + reader.threads * chunk_dec
        total = total + ReadCounts(objects, requests, index_requests, nbytes, decoded, waves, peak, chunks, indexes,
                                   indexes * per_index)
    return total


def _representative(keys: Sequence[tuple[int, int, tuple[int, ...]]], shape: Sequence[int],
                    layout: Layout) -> tuple[int, ...]:
    """An object coordinate with the given extent inside the array along each dimension: the last object
    where that extent is the edge's, else the first (only the extents matter to `_object_fetch`)."""
    coords = []
    for (_, extent, _), n, o in zip(keys, shape, layout.outer, strict=True):
        last = -(-int(n) // o) - 1
        coords.append(last if _extent(int(n), o, last) == extent else 0)
    return tuple(coords)


def predict(counts: ReadCounts, costs: Costs, reader: Reader) -> float:
    """Seconds for a read: every round trip pays the latency; every request its own work (``request_s``),
    every request in flight at once a connection (``connect_s``: the read is the first after an open), every
    shard index parsed the reader's work on it (``index_s``, shards read whole included; ``index_entry_s`` per
    entry) and every inner chunk the reader's work (``chunk_s``), all probed as wall time with many at once;
    the bytes stream at the smaller of what the requests in flight and the store as a whole deliver; decoding
    runs on ``threads`` threads alongside (one for a local read decoding less than `tuning.JOB_BYTES`, which
    our reader keeps in the calling thread)."""
    if counts.requests == 0:
        return 0.0
    in_flight = min(counts.requests, reader.concurrency)
    bandwidth = min(costs.request_bps * in_flight, costs.aggregate_bps)
    threads = 1 if reader.local and counts.decoded_bytes < JOB_BYTES else max(reader.threads, 1)
    return (counts.round_trips * costs.latency_s + counts.requests * costs.request_s + in_flight * costs.connect_s
            + counts.indexes * costs.index_s + counts.index_entries * costs.index_entry_s
            + counts.chunks * costs.chunk_s + counts.bytes / bandwidth
            + costs.decode_s(counts.chunks, counts.decoded_bytes) / threads)


def task_memory(shape: Sequence[int], layout: Layout, itemsize: int, ratio: float, task_bytes: int) -> int:
    """Peak bytes of one dask task of a ``chunks={}`` read: its block's decoded values plus their encoded bytes.

    A task reads whole stored objects: one, or (objects under ``task_bytes / 2``) a group of about
    ``task_bytes`` of them, as `layout.task_chunks` groups them.
    """
    block = task_chunks(shape, layout.outer, itemsize, task_bytes)  # regular grids: ints only
    decoded = itemsize * math.prod(min(b, int(n)) for b, n in zip(block, shape, strict=True) if isinstance(b, int))
    return decoded + int(decoded * ratio)


def object_nbytes(layout: Layout, itemsize: int, ratio: float) -> int:
    return int(itemsize * math.prod(layout.outer) * ratio)


def object_count(shape: Sequence[int], layout: Layout) -> int:
    return math.prod(-(-int(n) // o) for n, o in zip(shape, layout.outer, strict=True))


__all__ = ["Costs", "IndexCache", "Layout", "Prediction", "ReadCounts", "Reader", "count_read", "decode_rate",
           "object_count",
           "object_nbytes", "predict", "task_memory"]
