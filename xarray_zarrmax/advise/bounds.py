"""Lower bounds on a mix's predicted time under many layouts at once, in numpy: what lets the layout search
(`search`) cost only the layouts that could win. No I/O; the counts bounded are `model.count_read`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from xarray_zarrmax.advise.candidates import multiples
from xarray_zarrmax.advise.listed import ListedTables, PointTables, listed_rows
from xarray_zarrmax.advise.model import Costs, PointRead, Reader
from xarray_zarrmax.advise.point_bounds import PointBounds
from xarray_zarrmax.advise.ranged import ranged_points, ranged_runs
from xarray_zarrmax.advise.revisits import revisits
from xarray_zarrmax.core.geometry import Selection
from xarray_zarrmax.tuning import JOB_BYTES

#: `SearchBounds`' levels of bound, each higher and slower than the one before. LISTED: a sharded layout as its chunk
#: shape's bound of every sharding, raised by its own shards' objects and indexes (`SearchBounds.sharded_floor`).
#: QUICK: objects counted in the first `_QUICK` selections of each pattern alone (one each for the rest), the
#: bandwidth taken at its most, a selection taken as finding no index cached only when it is the first or its
#: shards are apart from every earlier one's (`_fresh`). PAIRWISE: every selection, each shard's index cached from
#: its first touch on (`revisits`). SAMPLED: and the ranges a quarter of the selections read from a shard, merged
#: or not (`ranged`), with every pointwise read's index requests and whole shards. RANGES: the ranges of every
#: selection. ALIGNED, not a level of `SearchBounds.terms` but the search's between LISTED and QUICK: a LISTED row
#: with its requests raised by its pointwise reads' shards' alignment (`SearchBounds.aligned`)
LISTED, QUICK, PAIRWISE, SAMPLED, RANGES, ALIGNED = 0, 1, 2, 3, 4, 5


@dataclass(frozen=True, slots=True)
class _Pattern:
    """One pattern's selections as arrays: weight, starts and stops ``(windows, ndim)`` (0 and 1 along a pointed
    dimension), which dimensions each points along, and per pointwise read (its index, dimensions, points)."""

    weight: float
    starts: np.ndarray
    stops: np.ndarray
    pointed: np.ndarray
    points: tuple[tuple[int, list[int], np.ndarray], ...]


class SearchBounds:
    """Lower bounds of a mix's predicted time, term by term (`terms`; `seconds`: their sum at the fast end of each
    cost's spread), under many layouts at once, in numpy over layouts and windows: what lets the search cost
    only the layouts that could be the fastest or tie with it (`search.branch_and_bound`).

    Per pattern, each count that `predict_terms` charges is bounded from below, and every term grows with its
    count, so no term of the bound exceeds the prediction's (`tests/advise/test_advise_search_proof.py`):

    - chunks decoded and their stored bytes (edge chunks at their fraction inside the array when compressed,
      less half a byte each for rounding): exact for boxes, and for points (the distinct chunks holding them);
      the decode on one thread for each local read under `JOB_BYTES`, as the model charges it;
    - requests: one per object touched, plus the `split_size` parts of whole objects on an object store;
    - round trips per window: its objects over the slots the reader's in-flight bytes leave, twice when it
      reads a whole object in parts, and once more when it first touches a shard it reads by ranges (its index
      comes first): for layouts whose windows touch at most 64 shards each, shard by shard (`revisits`), which
      also counts each index once, each index request and the untouched bytes of shards read whole; else by
      the window's first shard, for windows whose shards no earlier one touched;
    - from `SAMPLED` up, the ranges of shards read by ranges (`ranged`): of a batch's windows, also those of a
      shard an earlier window touched (its index cached, however many of its chunks); of a pointwise read (no
      index cached), each such shard's index request, and each shard it reads whole, its untouched bytes and parts;
    - below `SAMPLED`, a pointwise read's ranges from where its chunks lie (`merges`): of every sharding at once and
      each listed, the components of its chunks that could merge (or share a shard read whole; up to
      `merges.MOST_PAIRED` points), and a round trip more at `LISTED` when every shard is read by ranges (the read
      waits for an index); of each layout, its shards' own breaks between runs (from `PAIRWISE` on, ranked, and on
      an object store the bytes between the chunks its runs merge; up to `merges.MOST_POINTS` points; where its box
      crosses chunks along a dimension it does not point along, from `PAIRWISE` on only, through every chunk it
      touches, up to `point_bounds.MOST_CELLS`);
    - bandwidth: ``request_bps`` times the most requests the read can send, within ``concurrency`` and
      ``aggregate_bps``; the transfer is put under the rate that bounds it where the requests' bounds tell.

    ``outer`` may be the array's whole shape (``sharded`` true, ``per_object`` one): a bound for every sharding
    of the chunk shape at once.
    """

    def __init__(self, selections: Mapping[str, Sequence[Selection | PointRead]], weights: Mapping[str, float],
                 shape: Sequence[int], itemsize: int, costs: Costs, reader: Reader, compressed: bool = True) -> None:
        self.shape = np.asarray([int(n) for n in shape], dtype=np.int64)
        self.itemsize, self.costs, self.reader, self.compressed = itemsize, costs, reader, compressed
        self.patterns = []
        for name, sels in selections.items():
            starts, stops, pointed, points = [], [], [], []
            for j, sel in enumerate(sels):
                axes = sel.box if isinstance(sel, PointRead) else sel
                dims = set(sel.dims) if isinstance(sel, PointRead) else set()
                starts.append([0 if d in dims else a.start for d, a in enumerate(axes)])
                stops.append([1 if d in dims else a.stop for d, a in enumerate(axes)])
                pointed.append([d in dims for d in range(len(axes))])
                if isinstance(sel, PointRead):
                    # the distinct points: the bounds count the distinct chunks and objects holding them
                    at = np.asarray(sel.points, dtype=np.int64).reshape(-1, len(dims))
                    points.append((j, list(sel.dims), np.unique(at, axis=0) if at.shape[0] > 1 else at))
            self.patterns.append(_Pattern(float(weights[name]),
                                          np.asarray(starts, dtype=np.int64).reshape(len(sels), -1),
                                          np.asarray(stops, dtype=np.int64).reshape(len(sels), -1),
                                          np.asarray(pointed, dtype=bool).reshape(len(sels), -1), tuple(points)))
        self.pointwise = PointBounds(self.shape.tolist(), itemsize, costs, reader, compressed)
        low = {name: f[0] for name, f in costs.factors().items()}
        # per term, the factor of its low end, at most 1 (a spread's quartiles need not hold the value itself)
        self.key_factors = np.asarray([min(1.0, low.get(name, 1.0)) for name in TERMS[:8]]
                                      + [min(1.0, low.get("request_bps", 1.0), low.get("aggregate_bps", 1.0)),
                                         min(1.0, low.get("decode_bps", 1.0)), min(1.0, low.get("decode_pool", 1.0))])

    def seconds(self, chunks: np.ndarray, outer: np.ndarray, sharded: np.ndarray, per_object: np.ndarray,
                level: int = RANGES) -> np.ndarray:
        """The bound of each row's time, weighted over the mix: `terms` with each at the low end of its spread
        (and no more than its value: a bound of both the score and its low end)."""
        return self.terms(chunks, outer, sharded, per_object, level) @ self.key_factors

    def terms(self, chunks: np.ndarray, outer: np.ndarray, sharded: np.ndarray, per_object: np.ndarray,
              level: int = RANGES) -> np.ndarray:
        """``(k, len(TERMS))``: a lower bound of each term of `predict_terms`, weighted over the mix, for each
        row of ``chunks`` and ``outer`` (``(k, ndim)``). The transfer is put under the rate that bounds it where
        the bounds of the requests tell which, else under "transfer". Each ``level`` is higher and slower than
        the one before (`QUICK`, `PAIRWISE`, `SAMPLED`, `RANGES`; `LISTED` is `sharded_floor`, `ALIGNED` `aligned`):
        the search takes a layout up level by level while it could still win."""
        if level == ALIGNED:
            raise ValueError("SearchBounds.terms expects a level of its own (QUICK, PAIRWISE, SAMPLED or RANGES); got "
                             "ALIGNED instead, a raise of LISTED rows (SearchBounds.aligned)")
        chunks = np.asarray(chunks, dtype=np.int64).reshape(-1, self.shape.size)
        outer = np.asarray(outer, dtype=np.int64).reshape(chunks.shape)
        total = np.zeros((chunks.shape[0], len(TERMS)))
        for pattern in self.patterns:
            windows = pattern.starts.shape[0]
            rest = 0 if level >= PAIRWISE else max(0, windows - _QUICK)
            block = max(1, (1 << 21) // max(1, windows))  # rows x windows held at once
            for lo in range(0, chunks.shape[0], block):
                hi = lo + block
                # the chunks and their bytes always of every selection (the decode and transfer of a batch)
                sums = self._chunk_sums(chunks[lo:hi], outer[lo:hi], pattern) if rest else None
                total[lo:hi] += pattern.weight * self._pattern(
                    chunks[lo:hi], outer[lo:hi], np.asarray(sharded)[lo:hi], np.asarray(per_object)[lo:hi],
                    pattern, windows - rest, level, sums, rest)
        return total

    def sharded_floor(self, floor: np.ndarray, chunks: np.ndarray, owner: np.ndarray,
                      which: np.ndarray) -> np.ndarray:
        """The `LISTED` bound of many sharded layouts, in O(ndim) a layout: ``floor`` (`terms` at `QUICK` of
        each row of ``chunks`` with ``outer`` the array's shape: a bound of every sharding of that chunk shape
        at once) raised by what each layout's own shards add at least. Per pattern, a selection's objects are a
        product over dimensions of each dimension's (a pointwise read's: times the distinct objects holding its
        points, `point_bounds.PointBounds.cells_of` per distinct object lengths, as `QUICK` counts them); over
        the selections their sum (a request each) is at least their count times the product of each dimension's
        geometric mean over them (AM-GM), and their most (shards whose index is parsed, each its entries and
        bytes) at least that product, and a round trip each `Reader.concurrency` of them; the first selection,
        when it reads its first shard by ranges, waits for the shard's index (a round trip). ``owner``: each
        layout's row of ``chunks``; ``which``: per dimension, which of `candidates.multiples` its chunks per
        shard are."""
        if owner.size == 0:  # (every layout of these chunk shapes left out)
            return np.zeros((0, len(TERMS)))
        table = multiples(chunks, self.shape.tolist())  # (m, ndim, 4) chunks per shard
        m, ndim = chunks.shape
        dim = np.arange(ndim)[None]
        tables = ListedTables(table, floor, np.asarray([p.weight for p in self.patterns], dtype=np.float64),
                               np.asarray([p.starts.shape[0] for p in self.patterns], dtype=np.int64),
                               np.asarray([bool(p.pointed[0].any()) if p.starts.shape[0] else False
                                           for p in self.patterns], dtype=np.int64),
                               np.zeros((len(self.patterns), m, ndim, 4)), np.ones((len(self.patterns), m, ndim, 4)))
        held, objects, touched, merged, joined, read_pattern, read_first = [], [], [], [], [], [], []
        picked = None
        for p, pattern in enumerate(self.patterns):
            windows = pattern.starts.shape[0]
            if windows == 0:
                continue
            for d in range(ndim):
                per = table[:, d, :, None]  # (m, 4, 1)
                c = chunks[:, d, None, None]
                first, last = pattern.starts[None, None, :, d] // c, (pattern.stops[None, None, :, d] - 1) // c
                objects_d = last // per - first // per + 1  # (m, 4, windows): objects along d (of whole chunks)
                tables.logmean[p, :, d] = np.log(objects_d).mean(axis=2)
                # the first selection's chunks in its first object along d
                ends = np.minimum(last[:, :, 0], (first[:, :, 0] // per[:, :, 0] + 1) * per[:, :, 0] - 1)
                tables.corner[p, :, d] = ends - first[:, :, 0] + 1
            for j, dims, points in pattern.points:  # a pointwise read: times the objects holding its points
                if picked is None:
                    picked = table[owner[:, None], dim, which]  # (layouts, ndim) chunks per shard
                held.append(self.pointwise.cells_of((picked * chunks[owner])[:, dims], dims, points)[0])
                # and the requests its ranges take at least (`point_bounds.PointBounds.requests`): beyond one an object
                others = [d for d in range(ndim) if d not in dims]
                first = pattern.starts[j, others] // chunks[:, others]
                last = (pattern.stops[j, others] - 1) // chunks[:, others]
                along = np.ones((m, ndim, 4))
                along[:, others] = last[:, :, None] // table[:, others] - first[:, :, None] // table[:, others] + 1
                objects.append(along)
                touched.append(self.pointwise.cells_of(chunks[:, dims], dims, points)[0]
                               * np.prod(last - first + 1, axis=1))
                merged_j, joined_j = self.pointwise.components_of(chunks, pattern.starts[j], pattern.stops[j], dims,
                                                                  points)
                merged.append(merged_j)
                joined.append(joined_j)
                read_pattern.append(p)
                read_first.append(j == 0)  # every shard read by ranges: the read waits for an index first
        n = owner.size
        per_shape = [np.asarray(v, dtype=np.float64).reshape(-1, m) for v in (touched, merged, joined)]
        tables.reads = PointTables(np.asarray(held).reshape(-1, n), np.asarray(objects).reshape(-1, m, ndim, 4),
                                    per_shape[0], per_shape[1], per_shape[2], np.asarray(read_pattern, dtype=np.int64),
                                    np.asarray(read_first, dtype=np.int64))
        costs = self.costs
        scalars = np.asarray([self.reader.concurrency, self.reader.full_shard_fraction, costs.latency_s,
                              costs.request_s, costs.connect_s, costs.index_s, costs.index_entry_s,
                              min(costs.request_bps * max(1, self.reader.concurrency), costs.aggregate_bps)],
                             dtype=np.float64)
        return listed_rows(tables, owner, which, scalars)

    def aligned(self, rows: np.ndarray, chunks: np.ndarray, outer: np.ndarray, per_object: np.ndarray) -> np.ndarray:
        """``rows`` (bounds of sharded layouts: ``chunks``, ``outer``, ``per_object`` chunks a shard) with their
        requests and connections raised to what each pattern takes at least from its pointwise reads' shards alone
        (`point_bounds.PointBounds.aligned_requests`: a shard's index and runs from where its chunks lie, the read's
        requests at least), and a request each other selection: what `QUICK` knows of a read of scattered points
        and `LISTED` does not, for a few microseconds a layout of the `QUICK` bound's dozens. Each pattern's
        requests so bounded are at most the prediction's; their weighted sum replaces a row's term only where it is
        higher."""
        out = np.array(rows, dtype=np.float64, copy=True)
        k = chunks.shape[0]
        if k == 0 or not any(pattern.points for pattern in self.patterns):
            return out
        sharded = np.ones(k, dtype=bool)
        requests, connections = np.zeros(k), np.zeros(k)
        for pattern in self.patterns:
            windows = pattern.starts.shape[0]
            if windows == 0:
                continue
            least = np.full(k, float(windows - len(pattern.points)))  # a request each selection not pointwise
            for j, dims, points in pattern.points:
                least += np.maximum(1.0, self.pointwise.aligned_requests(
                    chunks, outer, sharded, per_object, pattern.starts[j], pattern.stops[j], dims, points))
            requests += pattern.weight * least
            connections += pattern.weight * np.minimum(least, self.reader.concurrency)
        out[:, 1] = np.maximum(out[:, 1], requests * self.costs.request_s)
        out[:, 2] = np.maximum(out[:, 2], connections * self.costs.connect_s)
        return out

    def _chunk_sums(self, chunks: np.ndarray, outer: np.ndarray,
                    pattern: _Pattern) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row, the chunks every selection touches and their stored fraction, summed over selections, and the
        chunks of those decoded in the calling thread (`_calling`)."""
        starts, stops, pointed = pattern.starts, pattern.stops, pattern.pointed
        touched = np.ones((chunks.shape[0], starts.shape[0]))
        fraction = np.ones(touched.shape)
        for d in range(self.shape.size):
            t, f = self._along(d, chunks[:, d:d + 1], starts[None, :, d], stops[None, :, d])
            pt = pointed[None, :, d]
            touched *= np.where(pt, 1, t)
            fraction *= np.where(pt, 1.0, f)
        for j, dims, points in pattern.points:
            t_p, f_p, *_ = self.pointwise.pointed(chunks, outer, dims, points)
            touched[:, j] *= t_p
            fraction[:, j] *= f_p
        return touched.sum(axis=1), fraction.sum(axis=1), self._calling(chunks, touched)

    def _calling(self, chunks: np.ndarray, touched: np.ndarray) -> np.ndarray:
        """Per row, the chunks of the selections (``touched``: each one's, ``(k, windows)``) that our reader
        decodes in the calling thread, as `counting.count_read` marks them: each selection is a read of its own,
        and a local one decoding under JOB_BYTES keeps the pool out (the chunks counted are the read's own, so
        the bytes decoded are exact)."""
        if not self.reader.local:
            return np.zeros(chunks.shape[0])
        chunk_dec = self.itemsize * np.prod(chunks.astype(np.float64), axis=1)
        return np.where(touched * chunk_dec[:, None] < JOB_BYTES, touched, 0.0).sum(axis=1)

    def _along(self, d: int, c: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Chunks of length ``c`` that [s, e) touches along dimension ``d``, and their fraction inside the array
        summed (the array's last chunk holds n - (n // c) * c elements when c does not divide n)."""
        return self._touched(d, c, s // c, (e - 1) // c)

    def _touched(self, d: int, c: np.ndarray, first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`_along` of the chunks ``first`` to ``last`` along dimension ``d``."""
        n = int(self.shape[d])
        t = last - first + 1
        edge = ((n - 1) // c == last) & (n % c != 0)
        return t, t - np.where(edge, 1.0 - (n % c) / c, 0.0)

    def _pattern(self, chunks: np.ndarray, outer: np.ndarray, sharded: np.ndarray, per_object: np.ndarray,
                 pattern: _Pattern, windows: int, level: int,
                 sums: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                 rest: int = 0) -> np.ndarray:
        """One pattern's bound over its first ``windows`` selections; ``rest`` selections left out (each still
        one round trip and one request), ``sums`` the chunks and fractions of all of them."""
        pairwise = level >= PAIRWISE
        starts, stops, pointed = pattern.starts[:windows], pattern.stops[:windows], pattern.pointed[:windows]
        k = chunks.shape[0]
        touched = np.ones((k, windows))
        fraction = np.ones((k, windows))
        objects = np.ones((k, windows))
        corner = np.ones((k, windows))
        any_pointed = bool(pointed.any())
        whole_chunks = bool(np.all(outer % chunks == 0))  # objects of whole chunks (every sharding listed)
        for d in range(self.shape.size):
            c, o = chunks[:, d:d + 1], outer[:, d:d + 1]
            s, e, pt = starts[None, :, d], stops[None, :, d], pointed[None, :, d]
            first, last = s // c, (e - 1) // c
            t, f = self._touched(d, c, first, last)
            # chunks of the selection's first object along the dimension (its corner object; along pointed
            # dimensions, of the objects holding points one holding at most ``corner``, one at least ``most``)
            per_dim = np.maximum(o // c, 1)
            first_object = first // per_dim
            corner_d = np.minimum(last, (first_object + 1) * per_dim - 1) - first + 1
            # objects touched: of whole chunks, the chunks' objects (floor of a floor: the same, fewer divisions)
            objects_d = last // per_dim - first_object + 1 if whole_chunks else (e - 1) // o - s // o + 1
            if any_pointed:
                corner_d, t, f, objects_d = (np.where(pt, 1, corner_d), np.where(pt, 1, t), np.where(pt, 1.0, f),
                                             np.where(pt, 1, objects_d))
            corner *= corner_d
            touched *= t
            fraction *= f
            objects *= objects_d
        most = corner.copy()
        for j, dims, points in pattern.points:
            if j < windows:  # along the pointed dimensions: the distinct chunks and objects of its points
                t_p, f_p, o_p, fewest, mean = self.pointwise.pointed(chunks, outer, dims, points)
                touched[:, j] *= t_p
                fraction[:, j] *= f_p
                objects[:, j] *= o_p
                most[:, j] = corner[:, j] * mean
                corner[:, j] *= fewest
        chunk_dec = self.itemsize * np.prod(chunks.astype(np.float64), axis=1)
        chunk_enc = np.maximum(1.0, np.round(chunk_dec * self.costs.ratio))
        part_extra, split_plain = np.zeros(k), np.zeros((k, windows), dtype=bool)
        plain = ~sharded
        if not self.reader.local and plain.any():
            # an object store reads each unsharded chunk in split_size parts: at least the window's bytes over
            # split_size requests, and a second round trip a wave when its mean chunk is above split_size
            enc = chunk_enc[plain, None]
            bytes_lb = (np.maximum(0.0, enc * fraction[plain] - 0.5 * touched[plain]) if self.compressed
                        else enc * touched[plain])
            split = max(1, self.reader.split_size)
            part_extra[plain] = np.maximum(0.0, np.ceil(bytes_lb / split) - objects[plain]).sum(axis=1)
            split_plain[plain] = bytes_lb > split * objects[plain]
        chunk_count = touched.sum(axis=1) if sums is None else sums[0]
        fraction_sum = fraction.sum(axis=1) if sums is None else sums[1]
        calling_count = self._calling(chunks, touched) if sums is None else sums[2]
        requests = objects.sum(axis=1) + rest + part_extra
        # a pointwise read finds no index cached: each object it reads by ranges (fewer than full_shard_fraction
        # of its chunks) asks for its index too. Those read whole hold that many chunks each, so there are at
        # most its chunks over that many (`ranged_points` counts them object by object from SAMPLED on)
        whole_at_least = self.reader.full_shard_fraction * per_object
        point_indexes = {j: np.where(sharded & (whole_at_least > 0), np.maximum(
            0.0, objects[:, j] - np.floor(touched[:, j] / np.maximum(whole_at_least, 1e-300) + 1e-9)), 0.0)
            for j, _, _ in pattern.points if j < windows}
        # and the ranges of its shards at least, beyond one an object (`point_bounds.PointBounds.requests`)
        point = self.pointwise
        # (from PAIRWISE on, also the bytes at least between the chunks its runs merge)
        aligned = {j: point.aligned_reads(chunks, outer, sharded, per_object, pattern.starts[j], pattern.stops[j],
                                          dims, points, level >= PAIRWISE)
                   for j, dims, points in pattern.points if j < windows}
        point_runs = {j: np.where(sharded, np.maximum(0.0, np.maximum(point.requests(
            objects[:, j], touched[:, j], per_object,
            *point.components_of(chunks, pattern.starts[j], pattern.stops[j], dims, points)), aligned[j][0])
            - objects[:, j] - point_indexes[j]), 0.0) for j, dims, points in pattern.points if j < windows}
        point_gaps = {j: got[1] for j, got in aligned.items()}
        if level < SAMPLED:
            requests += sum(point_indexes.values(), np.zeros(k)) + sum(point_runs.values(), np.zeros(k))
        # a selection whose shards no earlier one touched finds no index cached: one it touches in fewer chunks
        # than read it whole (full_shard_fraction) waits for its index, then its ranges
        ranged = sharded[:, None] & (corner < self.reader.full_shard_fraction * per_object[:, None])
        # objects in flight at once: fewer than the concurrency when the largest fetch (`counting._tally`: a
        # whole object at its decoded size) fills the reader's in-flight bytes. Known to be whole: an unsharded
        # chunk, and the first selection's corner shard when it is read whole (not for every sharding at once; of a
        # pointwise read, an object holding at least ``most``)
        largest = np.ones((k, windows))
        largest[~sharded] = chunk_dec[~sharded, None]
        whole_first = (sharded & (per_object > 1) & (most[:, 0] >= self.reader.full_shard_fraction * per_object)
                       if windows else np.zeros(k, dtype=bool))
        if windows:
            largest[whole_first, 0] = (chunk_dec * per_object)[whole_first]
        slots = np.maximum(1.0, np.minimum(self.reader.concurrency, self.reader.inflight_bytes // largest))
        waves = np.ceil(objects / slots)
        round_trips = (waves * (1 + split_plain)).sum(axis=1) + rest
        fresh = np.zeros(ranged.shape, dtype=bool)
        fresh[:, 0] = True
        indexes = np.where(sharded, objects.max(axis=1), 0.0)
        whole_extra = np.zeros(k)  # bytes of shards read whole beyond the chunks touched in them
        gap_bytes = np.zeros(k)  # bytes between the chunks of the ranges merged
        index_bytes = 16 * per_object + (4 if self.reader.index_crc32c else 0)
        counted = np.zeros(0, dtype=np.int64)
        if pairwise and not pattern.points and windows:
            # shard by shard where selections touch few: every selection that waits for an index, every index
            # parsed once, each index request
            found = revisits(self.shape, chunks[sharded], outer[sharded], per_object[sharded].astype(np.float64),
                             starts, stops, self.reader.full_shard_fraction, chunk_enc[sharded], self.compressed,
                             index_bytes[sharded], None if self.reader.local else self.reader.split_size,
                             self.reader.local)
            counted = np.flatnonzero(sharded)[found.rows]
            # a selection that waits for an index, or reads a shard whole in parts, takes two round trips a wave
            round_trips[counted] += (waves[counted] * (found.waits | found.splits)).sum(axis=1)
            indexes[counted] = found.first
            requests[counted] += found.ranged_first + found.parts
            whole_extra[counted] = found.whole_extra
        if level >= SAMPLED and windows and sharded.any():
            # the shards read by ranges: a request a gap too wide to merge, the bytes of each merged one (SAMPLED:
            # of the first quarter of the selections, each adding to the count)
            sampled = windows if level >= RANGES else max(1, windows // 4)
            where = np.flatnonzero(sharded)
            args = (chunk_enc[sharded], self.compressed, self.reader.full_shard_fraction, self.reader.coalesce_gap,
                    self.reader.local, self.itemsize)
            for j, dims, points in pattern.points:
                # a pointwise read finds no index cached (`counting._count_points`): each shard it reads by ranges,
                # its index a request of its own; each other, whole, in split_size parts (the gaps of those
                # sampled)
                runs = ranged_points(self.shape, chunks[sharded], outer[sharded], per_object[sharded], starts[j],
                                     stops[j], dims, points, *args, index_bytes[sharded],
                                     max(1, self.reader.split_size), gaps=j < sampled)
                at = where[runs.rows]
                requests[at] += runs.requests + runs.by_ranges + runs.whole_parts
                point_indexes[j][at] = point_runs[j][at] = 0.0  # counted object by object; the rest as at PAIRWISE
                if j < sampled:  # and their gaps' bytes
                    point_gaps[j][at] = 0.0
                requests += point_indexes[j] + point_runs[j]
                gap_bytes[at] += runs.gap_bytes
                whole_extra[at] += runs.whole_extra
            pointwise = {j for j, _, _ in pattern.points}
            boxes = [j for j in range(sampled) if j not in pointwise]
            if boxes:
                runs = ranged_runs(self.shape, chunks[sharded], outer[sharded], per_object[sharded], starts[boxes],
                                   stops[boxes], *args, several=pattern.starts.shape[0] > 1)
                requests[where[runs.rows]] += runs.requests
                gap_bytes[where[runs.rows]] += runs.gap_bytes
        gap_bytes += sum(point_gaps.values(), np.zeros(k))
        rows = np.flatnonzero(ranged[:, 1:].any(axis=1)) if windows > 1 else np.zeros(0, dtype=np.int64)
        rows = np.setdiff1d(rows, counted, assume_unique=True)
        if rows.size:  # only rows that could gain (in a bound for every sharding nothing is apart)
            fresh[rows] = self._fresh(outer[rows], starts, stops, pointed)
        uncounted = np.ones(k, dtype=bool)
        uncounted[counted] = False
        round_trips = round_trips + np.where(uncounted, (ranged & fresh).sum(axis=1), 0)
        nbytes = (np.maximum(0.0, chunk_enc * fraction_sum - 0.5 * chunk_count) if self.compressed
                  else chunk_enc * chunk_count) + whole_extra + gap_bytes
        nbytes = nbytes + indexes * index_bytes  # each index read
        costs = self.costs
        # the bytes stream at most at request_bps per request in flight (and aggregate_bps in all); the most
        # requests a read can send: per object touched, its split_size parts read whole (an unsharded chunk,
        # or a whole shard and its index), or its index and a range per chunk touched
        split = 1 if self.reader.local else max(1, self.reader.split_size)
        touches = objects.sum(axis=1)
        parts = np.ceil(np.where(sharded, per_object * chunk_enc + index_bytes, chunk_enc) / split)
        most_requests = np.where(sharded, touches * (1 + parts) + chunk_count, touches * parts)
        if not pairwise:  # some selections left out, or every sharding at once: not known
            most_requests = np.full(k, np.inf)
        most_requests[sharded & (per_object <= 1)] = np.inf
        streams = costs.request_bps * np.minimum(max(1, self.reader.concurrency), np.maximum(most_requests, 1.0))
        bandwidth = np.minimum(streams, costs.aggregate_bps)
        rate = _decode_rates(costs, chunk_dec)
        # as `predict`: decoded on one thread ("decode_bps"), every chunk with one thread, else those of local
        # reads under JOB_BYTES each (`_calling`); the rest on the pool's ("decode_pool")
        one_count = chunk_count if max(self.reader.threads, 1) == 1 else calling_count
        terms = np.empty((k, len(TERMS)))
        terms[:, 0] = round_trips * costs.latency_s
        terms[:, 1] = requests * costs.request_s
        terms[:, 2] = np.minimum(requests, self.reader.concurrency) * costs.connect_s
        terms[:, 3] = indexes * costs.index_s
        terms[:, 4] = indexes * per_object * costs.index_entry_s
        terms[:, 5] = chunk_count * costs.chunk_s
        # the transfer under the rate that bounds it, where the requests' bounds tell which (`predict_terms`):
        # at least requests_lb in flight stream past aggregate_bps; at most most_requests stream below it
        transfer = nbytes / bandwidth
        in_flight = np.minimum(max(1, self.reader.concurrency), np.maximum(requests, 1.0))
        aggregate = costs.request_bps * in_flight >= costs.aggregate_bps
        per_request = ~aggregate & (streams < costs.aggregate_bps)
        terms[:, 6] = np.where(per_request, transfer, 0.0)
        terms[:, 7] = np.where(aggregate, transfer, 0.0)
        terms[:, 8] = np.where(aggregate | per_request, 0.0, transfer)
        terms[:, 9] = one_count * chunk_dec / rate
        terms[:, 10] = ((chunk_count - one_count) * chunk_dec / rate
                        / costs.speedups(max(self.reader.threads, 1), chunk_dec))
        return terms

    @staticmethod
    def _fresh(outer: np.ndarray, starts: np.ndarray, stops: np.ndarray, pointed: np.ndarray) -> np.ndarray:
        """``(k, windows)``: whether each selection touches only objects no earlier one touched (its box of
        objects disjoint from each earlier one's along some dimension). The first always; the others only
        checked for up to `_PAIRWISE` selections (pairs of them)."""
        k, windows = outer.shape[0], starts.shape[0]
        fresh = np.zeros((k, windows), dtype=bool)
        fresh[:, 0] = True
        if windows > _PAIRWISE or windows < 2:
            return fresh
        # per dimension, the first and last object of each selection (a pointwise read: its whole dimension), in
        # 32 bits where they fit: the pairs below are memory-bound
        small = int(stops.max(initial=0)) < 2 ** 31
        o = outer[:, None, :]
        lo = np.where(pointed[None], 0, starts[None] // o)
        hi = np.where(pointed[None], np.iinfo(np.int32 if small else np.int64).max, (stops[None] - 1) // o)
        if small:
            lo, hi = lo.astype(np.int32), hi.astype(np.int32)
        # (rows, later, earlier): apart along some dimension (or not earlier); fresh when apart from every earlier
        # one. In blocks of rows: a batch of 1024 windows compares a million pairs a row
        later = ~np.tri(windows, k=-1, dtype=bool)[None]
        step = max(1, (1 << 22) // (windows * windows))
        for a in range(0, k, step):
            b = a + step
            apart = np.repeat(later, min(b, k) - a, axis=0)
            for d in range(outer.shape[1]):
                low, high = lo[a:b, :, d], hi[a:b, :, d]
                apart |= low[:, None, :] > high[:, :, None]
                apart |= high[:, None, :] < low[:, :, None]
            fresh[a:b] |= apart.all(axis=2)
        return fresh


#: The terms `SearchBounds.terms` bounds, in its columns: `model.predict_terms`' keys, the transfer as one
TERMS = ("latency_s", "request_s", "connect_s", "index_s", "index_entry_s", "chunk_s", "request_bps", "aggregate_bps",
         "transfer", "decode_bps", "decode_pool")  # "transfer": at either rate (which one bounds it is not known)

#: Selections of each pattern in `SearchBounds`' quick bound
_QUICK = 16

#: Selections at most for which `SearchBounds` checks each against every earlier one
_PAIRWISE = 1024  # tuning.MAX_BATCH_WINDOWS: every batch


def _decode_rates(costs: Costs, chunk_bytes: np.ndarray) -> np.ndarray:
    """`decode_rate` at many chunk sizes at once."""
    curve = costs.decode_curve
    if not curve:
        return np.full(chunk_bytes.shape, float(costs.decode_bps))
    sizes = [math.log(max(float(n), 1.0)) for n, _ in curve]
    return np.interp(np.log(np.maximum(chunk_bytes, 1.0)), sizes, [float(r) for _, r in curve])
