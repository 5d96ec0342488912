"""A pointwise read's counts bounded under many layouts at once, for `bounds.SearchBounds`: the distinct chunks and
objects holding its points, and the requests its ranges take at least (`merges`). Each worked out once per distinct
lengths (or chunk shape) in a search and remembered across its calls: a search asks of millions of layouts, and the
points are what costs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from xarray_zarrmax.advise import kernels
from xarray_zarrmax.advise.memo import KeyedValues
from xarray_zarrmax.advise.merges import MOST_PAIRED, MOST_POINTS, point_breaks, point_components
from xarray_zarrmax.advise.model import Costs, Reader
from xarray_zarrmax.advise.ranged import CHUNKS_PER_WINDOW, POINT_WINDOWS

#: Chunks at most of a pointwise read whose box crosses chunks along a dimension it does not point along (points times
#: those chunks) for which `PointBounds.aligned_reads` ranks every one: about 60-90 ns of a thread a chunk (16 us a
#: layout of up to 256 chunks, 172 us of 2,049-4,096, profiles at 100 points at e2570bb), against the ranges' count
#: (`ranged.ranged_points`, a level up, in one thread) of about 220 us a layout there. Chosen for time on the
#: search-time table's profiles (docs/dev/logs/advise_search_profiles_ab.md), fitted on neither validation set
MOST_CELLS = 4096

#: Layouts at least of one chunk length (along the dimensions a read does not point along) for `aligned_reads`
#: to rank their chunks: a call's own work (its cells, about 100 us) costs more than it spares a few layouts. Measured
#: on a point of a 5-D read crossing up to 256 chunks (3,257 such lengths of 3.5 layouts each), warm, against none
#: ranked: 1 took 1.40-1.47 s against 1.05-1.08, 4 took 1.28-1.30 against 1.13-1.17, 8 1.18-1.21 against 1.13-1.22;
#: profiles at 100 points on MinIO (345 lengths of 86 layouts) 2-3% slower at 8 than at 1
ROWS_A_CALL = 8

#: `MOST_CELLS` where the package was built without its compiled kernels: none. Numpy's form of the ranks costs far
#: more a chunk than the ranges' count it would spare (a review measured profiles at 100 points on MinIO 226.7 s with
#: it, 25.6 s without); the tests set it to hold that form to the same bound
MOST_CELLS_NUMPY = 0


def cells_ranked() -> int:
    """The chunks at most of a read through several chunks that `PointBounds.aligned_reads` ranks one by one:
    `MOST_CELLS` with the compiled kernels, `MOST_CELLS_NUMPY` without (`kernels.compiled`)."""
    return MOST_CELLS if kernels.compiled is not None else MOST_CELLS_NUMPY

#: Points of a read at most whose cells the compiled kernel counts; past them numpy's sort of each row's codes is the
#: faster (measured on 4-D rows: the compiled count 2.8x at 30 points, 1.4x at 300, 0.97x at 3,000, 0.76x at 10^5)
COMPILED_CELLS = 1024


class PointBounds:
    """The bounds of pointwise reads in an array ``shape`` long, of ``itemsize`` bytes an element, under ``costs``
    and ``reader``: `pointed` (chunks, their fractions and objects), `requests` and `aligned_requests` (the
    requests of a read's ranges), remembered per set of points (`cells_of`, `components_of`)."""

    def __init__(self, shape: Sequence[int], itemsize: int, costs: Costs, reader: Reader, compressed: bool) -> None:
        self.shape = np.asarray([int(n) for n in shape], dtype=np.int64)
        self.itemsize, self.costs, self.reader, self.compressed = itemsize, costs, reader, compressed
        self.gap = min(int(reader.coalesce_gap), 1 << 62)
        self._cells: dict[int, tuple[KeyedValues, np.ndarray]] = {}  # `cells_of`
        self._merges: dict[int, tuple[KeyedValues, np.ndarray]] = {}  # `components_of`

    def pointed(self, chunks: np.ndarray, outer: np.ndarray, dims: list[int],
                points: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per row, for a pointwise read along ``dims`` (as `counting._count_points` reads it): the distinct
        chunks holding its ``points`` (along those dimensions), their fractions inside the array summed, the
        distinct objects holding them, and two bounds of their chunks an object (the read waits for an index
        when one object holds few, and holds a whole object in flight when one holds many): at least one object
        holds at most the lesser of their mean and the fewest points an object holds, and one at least their
        mean. The chunks depend on the chunk lengths alone and the objects on the object lengths alone: each
        worked out once per distinct lengths along ``dims`` in a search (`cells_of`), never per (layout,
        point)."""
        k = chunks.shape[0]
        if points.shape[0] == 0:
            return np.zeros(k), np.zeros(k), np.zeros(k), np.zeros(k), np.zeros(k)
        touched, fraction, _ = self.cells_of(chunks[:, dims], dims, points)
        objects, _, least = self.cells_of(outer[:, dims], dims, points)
        mean = touched / objects
        return touched, fraction, objects, np.minimum(mean, least), mean

    def cells_of(self, lengths: np.ndarray, dims: list[int], points: np.ndarray) -> np.ndarray:
        """``(3, rows)``: per row of cell ``lengths`` along ``dims``, the distinct cells holding ``points``, their
        fractions inside the array summed, and the fewest points a cell holds; remembered per (points, lengths)
        across the search's calls (its levels ask again of the same lengths), each row of lengths keyed by one
        mixed-radix code (`memo.KeyedValues`: a search asks of millions of rows)."""
        return self._remembered(self._cells, points, lengths, self.shape[dims], 3,
                                lambda rows: self._count_cells(rows, dims, points))

    def requests(self, objects: np.ndarray, touched: np.ndarray, per_object: np.ndarray, merged: np.ndarray,
                 joined: np.ndarray) -> np.ndarray:
        """The requests at least of a pointwise read of sharded layouts, from the components of its chunks
        (`components_of`): with every shard read by ranges (fewer than ``full_shard_fraction`` of a shard's chunks
        touched in all: ``objects`` index requests and a run at least each, runs at least ``merged``); with some
        read whole, at least ``joined`` (one fetch of a whole shard joins its chunks); for every sharding at once
        (``per_object`` 1), the lesser."""
        return point_requests(self.reader.full_shard_fraction, objects, touched, per_object, merged, joined)

    def aligned_requests(self, chunks: np.ndarray, outer: np.ndarray, sharded: np.ndarray, per_object: np.ndarray,
                         start: np.ndarray, stop: np.ndarray, dims: list[int], points: np.ndarray,
                         ranked: bool = False) -> np.ndarray:
        """Per layout, the requests at least of a pointwise read (its box ``start`` to ``stop``, its ``points``
        along ``dims``) from each shard's own alignment (`aligned_reads`)."""
        return self.aligned_reads(chunks, outer, sharded, per_object, start, stop, dims, points, ranked)[0]

    def aligned_reads(self, chunks: np.ndarray, outer: np.ndarray, sharded: np.ndarray, per_object: np.ndarray,
                      start: np.ndarray, stop: np.ndarray, dims: list[int],
                      points: np.ndarray, ranked: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Per layout, the requests at least of a pointwise read (its box ``start`` to ``stop``, its ``points``
        along ``dims``) from each shard's own alignment (`merges.point_breaks`; ``ranked``: from its chunks'
        ranks, as `bounds.SearchBounds` asks from `PAIRWISE` on): an index and a run a shard read by ranges, a run
        more each break between its chunks, a request at least a shard read whole; and (``ranked``, on an object
        store) the bytes at least between the chunks its runs merge. Where the read touches more than one chunk along
        a dimension it does not point along (a profile through several chunks of time), every chunk it touches
        (`wide_cells`), ranked only, on an object store and up to `cells_ranked` of them (and as many as the ranges'
        level counts, `ranged.CHUNKS_PER_WINDOW` a point up to `ranged.POINT_WINDOWS` points), for chunk lengths of
        `ROWS_A_CALL` layouts or more. 0 (no bound) for layouts not sharded, past those chunks, or past
        `merges.MOST_POINTS` points."""
        out, between = np.zeros(chunks.shape[0]), np.zeros(chunks.shape[0])
        if points.shape[0] > MOST_POINTS:
            return out, between
        others = [d for d in range(self.shape.size) if d not in dims]
        first, last = start[others] // chunks[:, others], (stop[others] - 1) // chunks[:, others]
        single = np.all(first == last, axis=1)
        bounded = np.asarray(sharded, dtype=bool) & (per_object > 1)
        rows = np.flatnonzero(bounded & single)
        if rows.size:
            at = np.repeat(start[None], points.shape[0], axis=0)
            at[:, dims] = points
            self._breaks(rows, chunks, outer, at, ranked, out, between)
        # every chunk of a box crossing chunks: on an object store only (locally no merged byte is known read, and
        # ranking them spared no layout a local search measured: 1.56-1.70 s against 1.82-1.97 s on a 5-D read),
        # and only as far as the kernel's form affords (`cells_ranked`)
        if not ranked or not others or self.reader.local:
            return out, between
        # (no more than the ranges' level counts a layout's ranges for, `ranged.ranged_points`: past them the layout is
        # costed sooner than ranked; a point of a 5-D read crossing 4,096 chunks took a search 1.2x as long)
        most = min(cells_ranked(), CHUNKS_PER_WINDOW * min(points.shape[0], POINT_WINDOWS))
        cells = points.shape[0] * np.prod((last - first + 1).astype(np.float64), axis=1)
        wide = np.flatnonzero(bounded & ~single & (cells <= most))
        if wide.size < ROWS_A_CALL:
            return out, between
        # the read's chunks depend on the chunk lengths along the other dimensions: a call per distinct lengths, the
        # calls at once on the machine's cores (most are of fewer layouts than a call splits)
        lengths, inverse, many = np.unique(chunks[wide][:, others], axis=0, return_inverse=True, return_counts=True)
        inverse = inverse.ravel()
        groups = [(wide[inverse == g], wide_cells(start, stop, dims, points, others, along))
                  for g, along in enumerate(lengths) if many[g] >= ROWS_A_CALL]
        if len(groups) > 1 and sum(rows.size for rows, _ in groups) >= kernels.ROWS_A_THREAD:
            kernels.in_threads([functools.partial(self._breaks, rows, chunks, outer, at, True, out, between, False)
                                for rows, at in groups])
        else:  # (one call at a time, each split over the cores if large)
            for rows, at in groups:
                self._breaks(rows, chunks, outer, at, True, out, between)
        return out, between

    def _breaks(self, rows: np.ndarray, chunks: np.ndarray, outer: np.ndarray, at: np.ndarray, ranked: bool,
                out: np.ndarray, between: np.ndarray, split: bool = True) -> None:
        """`aligned_reads` of the layouts ``rows`` of a read of one chunk a cell of ``at`` (``(cells, ndim)``),
        written into ``out`` and ``between`` (``split``: as `merges.point_breaks`)."""
        rows = rows[np.lexsort(chunks[rows].T)]  # a chunk shape's layouts together: its points' chunks found once
        shards, ranged, breaks, merged = point_breaks(chunks[rows], outer[rows] // chunks[rows], self.shape, at,
                                                      self._chunk_enc(chunks[rows]), self.gap,
                                                      self.reader.full_shard_fraction, self.compressed, ranked, split)
        out[rows] = shards + ranged + breaks
        if not self.reader.local:  # (a local read of a large shard's ranges is read in pieces: no gap known read)
            between[rows] = merged

    def components_of(self, chunks: np.ndarray, start: np.ndarray, stop: np.ndarray, dims: list[int],
                      points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row of ``chunks`` (whole chunk shapes), `merges.point_components` of a pointwise read (its box
        ``start`` to ``stop``, its ``points`` along ``dims``): the components of its chunks that could merge in one
        range, and that could also share a shard read whole; zeros (no bound) past `merges.MOST_PAIRED` points.
        Remembered per chunk shape across the search's calls, as `cells_of`."""
        k = chunks.shape[0]
        if points.shape[0] > MOST_PAIRED or k == 0:
            return np.zeros(k), np.zeros(k)
        merged, joined = self._remembered(self._merges, points, chunks, self.shape, 2,
                                          lambda rows: self._components(rows, start, stop, dims, points))
        return merged, joined

    def _components(self, rows: np.ndarray, start: np.ndarray, stop: np.ndarray, dims: list[int],
                    points: np.ndarray) -> np.ndarray:
        """`components_of`, worked out: ``(2, rows)``."""
        others = [d for d in range(self.shape.size) if d not in dims]
        first, last = start[others] // rows[:, others], (stop[others] - 1) // rows[:, others]
        touched = self.cells_of(rows[:, dims], dims, points)[0] * np.prod(last - first + 1, axis=1)
        # along the other dimensions the read touches a chunk partly outside the array (compressed: smaller)
        n = self.shape[others]
        partial = (self.compressed & ((last == (n - 1) // rows[:, others]) & (n % rows[:, others] != 0)).any(axis=1)
                   if others else np.zeros(rows.shape[0], dtype=bool))
        fraction = self.reader.full_shard_fraction
        whole = touched / fraction if fraction > 0 else np.full(rows.shape[0], np.inf)
        across = (last > first).any(axis=1)  # two chunks' codes may first differ along one of those
        full_cells = self.gap // self._chunk_enc(rows).astype(np.int64)
        return np.stack(point_components(rows[:, dims], points, self.shape[dims], full_cells, self.gap, partial, whole,
                                         across, self.compressed))

    def _chunk_enc(self, chunks: np.ndarray) -> np.ndarray:
        """Each chunk shape's stored bytes, as the model takes them (at least one)."""
        return np.maximum(1.0, np.round(self.itemsize * np.prod(chunks.astype(np.float64), axis=1) * self.costs.ratio))

    @staticmethod
    def _remembered(memos: dict[int, tuple[KeyedValues, np.ndarray]], points: np.ndarray, lengths: np.ndarray,
                    extent: np.ndarray, width: int, work: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """``(width, rows)``: ``work`` (of distinct rows of ``lengths``) for each row, remembered per set of
        ``points`` in ``memos`` across the search's calls, each row keyed by one mixed-radix code of lengths up to
        8 times ``extent`` (a shard may be longer than the array); worked out afresh, no key, where the codes
        could overflow or a row is longer."""
        radix = 8 * extent + 1
        if float(np.prod(radix.astype(np.float64))) >= 2.0**62 or (lengths >= radix).any():
            distinct, inverse = np.unique(lengths, axis=0, return_inverse=True)
            return work(distinct)[:, inverse.ravel()]
        code = np.zeros(lengths.shape[0], dtype=np.int64)
        for d in range(radix.size):
            code = code * radix[d] + lengths[:, d]
        memo = memos.setdefault(id(points), (KeyedValues(width), points))[0]  # (the points held: their id stays
        found, values = memo.find(code)  # theirs). Every row looked up, the distinct worked out only of the new ones
        if not found.all():
            missing = np.unique(code[~found])
            rows = np.empty((missing.size, radix.size), dtype=np.int64)
            rest = missing.copy()
            for d in range(radix.size - 1, -1, -1):
                rows[:, d], rest = rest % radix[d], rest // radix[d]
            memo.add(missing, work(rows))
            values[:, ~found] = memo.find(code[~found])[1]
        return values

    def _count_cells(self, lengths: np.ndarray, dims: list[int], points: np.ndarray) -> np.ndarray:
        """`cells_of`, worked out: compiled where the package was built so (`kernels`) and the read holds at most
        `COMPILED_CELLS` points, else `_cells_numpy`: the same counts."""
        n = self.shape[dims]
        out = np.zeros((3, lengths.shape[0]))
        if points.shape[0] == 0 or lengths.shape[0] == 0:
            return out
        if kernels.compiled is None or points.shape[0] > COMPILED_CELLS:
            return _cells_numpy(lengths, n, points)
        ints = kernels.ints
        kernels.compiled.count_cells(lengths.shape[0], lengths.shape[1], points.shape[0], ints(lengths), ints(points),
                                     ints(n), out[0], out[1], out[2])
        return out


def wide_cells(start: np.ndarray, stop: np.ndarray, dims: list[int], points: np.ndarray, others: list[int],
               along: np.ndarray) -> np.ndarray:
    """``(cells, ndim)``: an element of each chunk a pointwise read touches (its box ``start`` to ``stop``, its
    ``points`` along ``dims``), of chunks ``along`` long along the ``others`` dimensions: each point with the first
    element inside the box of each chunk the box crosses along those."""
    axes = [np.maximum(int(start[d]), np.arange(int(start[d]) // c, (int(stop[d]) - 1) // c + 1, dtype=np.int64) * c)
            for d, c in zip(others, along.tolist(), strict=True)]
    box = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(others))
    at = np.empty((points.shape[0] * box.shape[0], start.size), dtype=np.int64)
    at[:, dims] = np.repeat(points, box.shape[0], axis=0)
    at[:, others] = np.tile(box, (points.shape[0], 1))
    return at


def point_requests(fraction: float, objects: np.ndarray, touched: np.ndarray, per_object: np.ndarray,
                   merged: np.ndarray, joined: np.ndarray) -> np.ndarray:
    """`PointBounds.requests` under a reader's ``full_shard_fraction`` (``fraction``): also what `listed.listed_numpy`
    charges each layout listed."""
    ranged = fraction * per_object > touched
    return np.where(per_object <= 1, np.minimum(1 + merged, joined),
                    np.where(ranged, objects + np.maximum(objects, merged), joined))


def _cells_numpy(lengths: np.ndarray, n: np.ndarray, points: np.ndarray) -> np.ndarray:
    """`PointBounds.cells_of` in numpy (the reference its compiled form is held to, and the count where it was not
    built), of ``points`` in an array ``n`` long along their dimensions: each point's cell as one C-order code,
    sorted a row at a time, in blocks of at most 2^21 (row, point) pairs (a read of 10^5 points costs no more memory
    than one of a few)."""
    count = points.shape[0]
    grid = -(-n[None] // lengths)  # (rows, m) cells along each dimension
    out = np.zeros((3, lengths.shape[0]))
    if float(np.prod(n.astype(np.float64))) >= 2.0**62:  # codes could overflow: a row at a time
        for r, along in enumerate(lengths):
            cells, held = np.unique(points // along, axis=0, return_counts=True)
            out[:, r] = (cells.shape[0], np.prod(np.minimum(along, n - cells * along) / along, axis=1).sum(),
                         held.min())
        return out
    step = max(1, (1 << 21) // count)
    for a in range(0, lengths.shape[0], step):
        along, cells = lengths[a:a + step], grid[a:a + step]
        code = points[None, :, 0] // along[:, 0, None]
        for d in range(1, n.size):
            code = code * cells[:, d, None] + points[None, :, d] // along[:, d, None]
        code.sort(axis=1)
        new = np.ones(code.shape, dtype=bool)
        new[:, 1:] = code[:, 1:] != code[:, :-1]
        per_row = new.sum(axis=1)
        out[0, a:a + step] = per_row
        # each cell's points: from its first to the next cell's (a row's first is always new)
        begins = np.flatnonzero(new.ravel())
        held = np.diff(np.append(begins, new.size))
        out[2, a:a + step] = np.minimum.reduceat(held, np.cumsum(per_row) - per_row)
        # a cell's fraction inside: less than whole only along a dimension where it is the array's last
        inside = np.ones(code.shape)
        for d in range(n.size - 1, -1, -1):
            ids, code = code % cells[:, d, None], code // cells[:, d, None]
            c = along[:, d, None]
            inside *= np.minimum(c, n[d] - ids * c) / c
        out[1, a:a + step] = np.where(new, inside, 0.0).sum(axis=1)
    return out
