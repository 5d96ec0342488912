"""The layout advisor's cost model: pure arithmetic on geometry, no I/O.

For a candidate layout (inner chunk shape, shard shape or none) and a read (one or more box selections) it
counts what our reader sends, decision for decision as `xarray_zarrmax.read.fetch` makes them: one GET per
unsharded chunk; for a shard, one whole-object GET (in ``split_size`` parts on remote stores) when the read
needs at least ``full_shard_fraction`` of its chunks and its index is not cached, otherwise one suffix GET
of the index (``16 * n + 4`` bytes, then cached for the rest of the open) and one GET per run of chunks
coalesced within ``coalesce_gap``. Per dimension, the objects a range touches and the chunks it touches in
each come in closed form (what `geometry.plan_reads` lists, in at most three groups); objects whose
per-dimension footprints are the same fetch the same way, so a full scan of millions of chunks costs as many
simulated objects as there are distinct footprints (a handful), not millions. Nothing is materialised in
proportion to the array: only a shard's own chunks (at most `tuning.MAX_SHARD_CHUNKS`) are laid out.

Time is then ``round_trips * latency + requests * request_s + indexes * index_s + chunks * chunk_s +
bytes / bandwidth + decoded_bytes / decode_rate`` (the rate at the chunk's size): see `predict`.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from xarray_zarrmax.advise.validate import nonnegative_number, positive_number, shown
from xarray_zarrmax.core.geometry import Axis, Selection, task_chunks
from xarray_zarrmax.errors import AdviceInputError, AdviceTypeError
from xarray_zarrmax.tuning import JOB_BYTES, MAX_WINDOW_OBJECTS, MODEL_CACHE_BYTES, PIECE_BYTES, STREAM_BYTES


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
        for name in ("latency_s", "request_s", "chunk_s", "index_s", "index_entry_s", "connect_s"):
            nonnegative_number(f"Costs {name}", getattr(self, name), "a number of seconds >= 0")
        for name in ("request_bps", "aggregate_bps", "decode_bps"):
            positive_number(f"Costs {name}", getattr(self, name), "a positive number of bytes per second")
        positive_number("Costs ratio", self.ratio, "a positive ratio of encoded to decoded bytes")
        # sorted tuples whatever came in (a list of lists from JSON; sizes in any order): interpolation needs
        # ascending sizes, and a frozen Costs stays hashable
        expected = "expected decode_curve points (chunk bytes > 0, bytes/s > 0)"
        try:
            curve = tuple(sorted((int(n), float(r)) for n, r in self.decode_curve))
        except TypeError:
            raise AdviceTypeError(f"{expected}. Got {shown(self.decode_curve, typed=True)} instead.") from None
        except ValueError:
            raise AdviceInputError(f"{expected}. Got {shown(self.decode_curve)} instead.") from None
        if any(n <= 0 or not 0 < r < math.inf for n, r in curve):
            raise AdviceInputError(f"{expected}. Got {curve!r} instead.")
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


class _ArrayCache:
    """Least recently used results of numpy arrays, kept up to `tuning.MODEL_CACHE_BYTES` in all (a count of
    entries would not bound them: one shard of 2^20 chunks lays out 50 MB)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.nbytes = limit, 0
        self.items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key][0]
        value = make()
        size = sum(a.nbytes for a in (value if isinstance(value, tuple) else (value,)))
        self.items[key] = (value, size)
        self.nbytes += size
        while self.nbytes > self.limit and len(self.items) > 1:
            _, (_, dropped) = self.items.popitem(last=False)
            self.nbytes -= dropped
        return value


_CACHE = _ArrayCache(MODEL_CACHE_BYTES)


def _write_order(grid: tuple[int, ...]) -> np.ndarray:
    """The flat (C-order) indices of a shard's chunks in the order of its bytes: the Morton order zarr-python
    writes them in (`morton_order`)."""
    return _CACHE.get(("order", grid), lambda: _morton_permutation(grid))  # type: ignore[no-any-return]


def _morton_permutation(shape: tuple[int, ...]) -> np.ndarray:
    """The flat (C-order) indices of a grid's cells in Morton order (see `morton_order`). The code of a cell
    is the OR of its coordinates' parts, each built on one dimension's coordinates alone and broadcast."""
    bits = [(int(n) - 1).bit_length() for n in shape]
    parts = [np.zeros(int(n), dtype=np.int64) for n in shape]
    out_bit = 0
    for bit in range(max(bits, default=0)):
        for d, used in enumerate(bits):
            if bit < used:
                parts[d] |= ((np.arange(int(shape[d]), dtype=np.int64) >> bit) & 1) << out_bit
                out_bit += 1
    code = np.zeros(shape, dtype=np.int64)
    for d, part in enumerate(parts):
        code |= part.reshape([-1 if i == d else 1 for i in range(len(shape))])
    return np.argsort(code.reshape(-1), kind="stable")


def morton_order(shape: tuple[int, ...]) -> np.ndarray:
    """Every coordinate of a grid of ``shape`` in zarr-python's Morton (Z) order, ``(n, ndim)``: sorted by a
    code interleaving their bits, lowest first and dimension 0 first at each bit, a dimension dropping out
    once its bits (those of its largest coordinate) are used up. zarr builds tuples of Python ints for it;
    costing a search's layouts spent 70% of its time there."""
    if not shape:
        return np.zeros((1, 0), dtype=np.int64)  # a 0-d grid: its one coordinate
    return np.stack(np.unravel_index(_morton_permutation(shape), shape), axis=-1).astype(np.int64)


def _inside(grid: tuple[int, ...], extents: tuple[int, ...], chunks: tuple[int, ...]) -> np.ndarray | None:
    """The fraction of each chunk of a shard inside the array (``grid``-shaped); None when every chunk is
    wholly inside (a shard away from the array's edges)."""
    if all(e >= g * c for g, e, c in zip(grid, extents, chunks, strict=True)):
        return None
    fraction = np.ones(grid)
    for d, (g, e, c) in enumerate(zip(grid, extents, chunks, strict=True)):
        f = np.clip(e - np.arange(g) * c, 0, c) / c
        fraction = fraction * f.reshape([-1 if i == d else 1 for i in range(len(grid))])
    return fraction


@lru_cache(maxsize=4096)
def _stored_bytes(grid: tuple[int, ...], extents: tuple[int, ...], chunks: tuple[int, ...], chunk_enc: int,
                  compressed: bool) -> int:
    """The bytes of a shard's stored chunks (`_stored_layout`'s sizes, summed), with no array of its chunks:
    along each dimension its chunks are whole, one partly inside or wholly outside (not stored), so a shard
    holds at most 2^ndim kinds of stored chunk, each counted by the product of its dimensions' counts."""
    kinds = []
    for g, e, c in zip(grid, extents, chunks, strict=True):
        whole, part = divmod(min(e, g * c), c)
        kinds.append([(whole, 1.0)] + ([(1, part / c)] if part else []))
    total = 0
    for combo in itertools.product(*kinds):
        count = math.prod(k for k, _ in combo)
        if count:
            fraction = math.prod(f for _, f in combo)
            total += count * (max(1, round(fraction * chunk_enc)) if compressed else chunk_enc)
    return total


def _stored_layout(grid: tuple[int, ...], extents: tuple[int, ...], chunks: tuple[int, ...], chunk_enc: int,
                   compressed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Where a shard's chunks lie in its bytes: per chunk of the grid, its rank among the stored chunks
    (write order; -1 where it is not stored), and per rank its encoded size.

    ``extents`` are the shard's elements inside the array along each dimension. Chunks wholly outside are
    not stored (zarr does not store chunks holding only the fill value). A chunk partly outside is stored;
    compressed, its fill-value part costs almost nothing, so its size is ``chunk_enc`` times the fraction
    of it inside the array (a 361-row grid in 30-row chunks ends in a chunk of one row: 1/30 of the bytes,
    which decides whether the ranges around it merge); uncompressed, it is stored whole."""
    key = ("stored", grid, extents, chunks, chunk_enc, compressed)
    return _CACHE.get(key, lambda: _lay_out(grid, extents, chunks, chunk_enc, compressed))  # type: ignore[no-any-return]


def _lay_out(grid: tuple[int, ...], extents: tuple[int, ...], chunks: tuple[int, ...], chunk_enc: int,
             compressed: bool) -> tuple[np.ndarray, np.ndarray]:
    order = _write_order(grid)
    fraction = _inside(grid, extents, chunks)
    rank = np.full(order.size, -1, dtype=np.int64)
    if fraction is None:  # every chunk stored whole
        rank[order] = np.arange(order.size)
        return rank.reshape(grid), np.full(order.size, chunk_enc, dtype=np.int64)
    in_order = fraction.reshape(-1)[order]
    stored = in_order > 0
    rank[order[stored]] = np.arange(int(stored.sum()))
    if compressed:
        sizes = np.maximum(1, np.round(in_order[stored] * chunk_enc)).astype(np.int64)
    else:
        sizes = np.full(int(stored.sum()), chunk_enc, dtype=np.int64)
    return rank.reshape(grid), sizes


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
    """(requests, bytes) of a local shard read in pieces (`local_reads.local_pieces`): as `coalesced_runs`, but a read
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


#: Objects along one dimension that a read touches alike: (first object, objects, elements of each inside the
#: array, chunks touched inside each)
Footprint = tuple[int, int, int, range]


@lru_cache(maxsize=65536)
def _footprints(start: int, stop: int, n: int, outer: int, inner: int) -> tuple[Footprint, ...]:
    """The objects of ``outer`` elements (of chunks of ``inner``) along a dimension of ``n`` that the range
    [start, stop) touches, as `geometry.plan_reads` finds them, in at most three groups: the first object,
    those wholly inside the range (every chunk of each), the last. O(1) whatever the dimension's length."""
    if stop <= start:
        return ()
    first, last = start // outer, (stop - 1) // outer

    def one(i: int) -> Footprint:
        lo = i * outer
        extent = min(outer, n - lo)
        return i, 1, extent, range((max(start, lo) - lo) // inner, (min(stop, lo + extent) - 1 - lo) // inner + 1)

    if first == last:
        return (one(first),)
    between = ((first + 1, last - first - 1, outer, range(outer // inner)),) if last - first > 1 else ()
    return (one(first), *between, one(last))


def _dimension_footprints(axis: Axis, n: int, outer: int, inner: int) -> tuple[Footprint, ...]:
    """The objects along one dimension the read touches, grouped by footprint (`_footprints`)."""
    if axis.indices is not None:
        raise ValueError("expected box selections (ranges along every dimension)")
    return _footprints(axis.start, axis.stop, n, outer, inner)


def _object_fetch(layout: Layout, extents: tuple[int, ...], touched: Sequence[Sequence[int]], chunk_enc: int,
                  chunk_dec: int, reader: Reader, cached: bool, compressed: bool) -> tuple[int, int, int, int]:
    """(requests, index requests, bytes, round trips) for one object (``extents`` of it inside the array along
    each dimension) read of the chunks ``touched``
    (per dimension, their indices inside it), as `fetch._fetch_object_once` does it, or for a local shard
    whose touched chunks decode to `tuning.STREAM_BYTES` or more, as `local_reads.read_local_shard` does: the index
    (or, for a file of at most `tuning.PIECE_BYTES` of which at least ``full_shard_fraction`` of the chunks are
    read, the whole file), then the chunks in pieces of at most PIECE_BYTES."""
    if layout.shards is None:
        inside = math.prod(e / c for e, c in zip(extents, layout.chunks, strict=True))
        nbytes = max(1, round(chunk_enc * inside)) if compressed else chunk_enc
        parts = 1 if reader.local else max(1, -(-nbytes // reader.split_size))
        return parts, 0, nbytes, 1 + (parts > 1)
    grid = tuple(o // c for o, c in zip(layout.shards, layout.chunks, strict=True))
    index_nbytes = 16 * layout.chunks_per_object() + (4 if reader.index_crc32c else 0)
    pieces = math.prod(len(t) for t in touched)
    stored = _stored_bytes(grid, extents, layout.chunks, chunk_enc, compressed) + index_nbytes
    whole = not cached and pieces >= reader.full_shard_fraction * layout.chunks_per_object()
    if reader.local and pieces * chunk_dec >= STREAM_BYTES:
        if whole and stored <= PIECE_BYTES:
            # one read of the file; the pieces are slices of it
            return 1, 0, stored, 1
        rank, sizes = _stored_layout(grid, extents, layout.chunks, chunk_enc, compressed)
        runs, nbytes = capped_runs(rank[np.ix_(*touched)].ravel(), sizes, reader.coalesce_gap, PIECE_BYTES)
        index = 0 if cached else 1
        return runs + index, index, nbytes + index * index_nbytes, 1 + index
    if whole:
        parts = 1 if reader.local else max(1, -(-stored // reader.split_size))
        return parts, 0, stored, 1 + (parts > 1)
    rank, sizes = _stored_layout(grid, extents, layout.chunks, chunk_enc, compressed)
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
    fetches: dict[tuple[Any, ...], tuple[int, ...]] = {}  # objects that fetch alike, within this read
    read: set[tuple[tuple[int, int], ...]] = set()
    again: dict[tuple[tuple[int, int], ...], ReadCounts] = {}
    alike: dict[tuple[Any, ...], ReadCounts] = {}
    for axes in selections:
        if layout.shards is None:
            # No index to cache: a selection costs what any other of the same size and footprints costs, wherever
            # it lies (a batch's windows, most of them)
            shape_key = tuple((a.size, tuple(g[1:] for g in _dimension_footprints(a, int(n), o, c)))
                              for a, n, o, c in zip(axes, shape, layout.outer, layout.chunks, strict=True))
            if shape_key not in alike:
                alike[shape_key] = _count_selection(axes, False, shape, itemsize, layout, chunk_enc, reader, cache,
                                                    compressed, fetches)
            total = total + alike[shape_key]
            continue
        # A selection read before costs what it cost the second time from then on: its shard indexes are
        # all cached (a batch of 1000 windows on a small array repeats most of them)
        key = tuple((a.start, a.stop) for a in axes)
        if key in again:
            total = total + again[key]
            continue
        counts = _count_selection(axes, len(selections) > 1, shape, itemsize, layout, chunk_enc, reader, cache,
                                  compressed, fetches)
        if key in read:
            again[key] = counts
        read.add(key)
        total = total + counts
    return total


def _count_selection(axes: Selection, several: bool, shape: Sequence[int], itemsize: int, layout: Layout,
                     chunk_enc: int, reader: Reader, cache: IndexCache, compressed: bool,
                     fetches: dict[tuple[Any, ...], tuple[int, ...]]) -> ReadCounts:
    """`count_read` of one selection, ``several`` when it is one of many (a batch window)."""
    chunk_dec = itemsize * math.prod(layout.chunks)
    per_dim = [_dimension_footprints(a, int(n), o, c)
               for a, n, o, c in zip(axes, shape, layout.outer, layout.chunks, strict=True)]
    if any(not d for d in per_dim):
        return ReadCounts()
    # Objects with the same (extent inside the array, touched chunks) along every dimension fetch alike: per
    # dimension, count the objects of each footprint, and simulate one object per combination of footprints.
    # Cached indexes break that symmetry, so reads of several selections (ML batches: small) go one by one,
    # up to MAX_WINDOW_OBJECTS objects (a larger window is costed as a whole, its indexes taken as not cached).
    touching = math.prod(sum(count for _, count, _, _ in d) for d in per_dim)
    one_by_one = (several or bool(cache.seen)) and touching <= MAX_WINDOW_OBJECTS
    keyed: list[Counter[tuple[int, int, range]]] = []
    for d in per_dim:
        keys: Counter[tuple[int, int, range]] = Counter()
        for first, count, extent, chunks_in in d:
            if one_by_one:
                keys.update((i, extent, chunks_in) for i in range(first, first + count))
            else:
                keys[(-1, extent, chunks_in)] += count
        keyed.append(keys)
    sharded = layout.shards is not None
    per_object = layout.chunks_per_object()
    index_nbytes = 16 * per_object + (4 if reader.index_crc32c else 0)
    objects = requests = index_requests = nbytes = chunks = indexes = 0
    rounds_per_object = 1
    largest = 1  # the largest single fetch, as the reader's in-flight budget counts it
    read: list[tuple[int, ...]] = []
    for combo in itertools.product(*(k.items() for k in keyed)):
        count = math.prod(m for _, m in combo)
        seen = False
        if one_by_one and sharded:
            obj = tuple(key[0] for key, _ in combo)
            seen = obj in cache.seen
            read.append(obj)
        memo = (tuple(key[1] for key, _ in combo), tuple(key[2] for key, _ in combo), seen)
        fetch = fetches.get(memo)
        if fetch is None:
            extents, touched, _ = memo
            r, ir, b, rt = _object_fetch(layout, extents, touched, chunk_enc, chunk_dec, reader, seen, compressed)
            n_touched = math.prod(len(t) for t in touched)
            # what one fetch holds of the reader's in-flight budget (fetch._fetch_object_once): a whole object
            # at its decoded size; a shard index at its size; a shard's ranges at their size, once indexed
            if not sharded or (not seen and n_touched >= reader.full_shard_fraction * per_object):
                hold = chunk_dec * per_object
            else:
                hold = b if seen else max(index_nbytes, b - index_nbytes)
            fetch = fetches[memo] = (r, ir, b, rt, n_touched, hold)
        r, ir, b, rt, n_touched, hold = fetch
        objects += count
        requests += r * count
        index_requests += ir * count
        nbytes += b * count
        chunks += n_touched * count
        indexes += (sharded and not seen) * count
        rounds_per_object = max(rounds_per_object, rt)
        largest = max(largest, hold)
    decoded = chunks * chunk_dec
    per_index = per_object if sharded else 0
    cache.seen.update(read)
    slots = max(1, min(reader.concurrency, reader.inflight_bytes // largest))
    waves = max(-(-objects // slots) * rounds_per_object, -(-requests // reader.concurrency))
    result = itemsize * math.prod(a.size for a in axes)
    in_flight = min(objects, slots) * (nbytes // max(objects, 1))
    peak = result + in_flight + reader.threads * chunk_dec
    return ReadCounts(objects, requests, index_requests, nbytes, decoded, waves, peak, chunks, indexes,
                      indexes * per_index)


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
