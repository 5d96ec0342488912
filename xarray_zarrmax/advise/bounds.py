"""Lower bounds on a mix's predicted time under many layouts at once, in numpy: what lets the layout search
(`search`) cost only the layouts that could win. No I/O; the counts bounded are `model.count_read`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from xarray_zarrmax.advise.model import Costs, PointRead, Reader
from xarray_zarrmax.core.geometry import Selection


class SearchBounds:
    """Lower bounds on a mix's predicted time (the low end of its range: `Costs.spread` at the fast end) under
    many layouts at once, in numpy over layouts and windows: what lets the search cost only the layouts that
    could win (`search.branch_and_bound`).

    Per pattern, each count that `predict_terms` charges is bounded from below, and every term grows with its
    count (the transfer is charged at the largest bandwidth any number of requests gets, the decode at the
    largest thread speedup), so the bound never exceeds the prediction:

    - chunks decoded: exact for boxes (the product over dimensions of the chunks each range touches, summed over
      windows; `count_read` decodes each touched chunk once per window), one per pointwise read;
    - bytes: the stored bytes of those chunks (edge chunks at their fraction inside the array when compressed),
      less half a byte each for rounding, and of each shard index read; ranges and whole-shard reads only add;
    - requests: one per object a window touches; round trips: per window, the objects over the concurrency
      (rounded up, at least one), and one more for a selection touching only objects no earlier one touched
      and, in its first object, fewer chunks than ``full_shard_fraction`` of it (that shard is not read whole:
      its index, not cached, comes first, and the read waits for its slowest object); shard
      indexes: the most objects one window touches (none cached before it);
    - bandwidth: ``request_bps`` times the most requests the read can send (one per object, chunk and
      ``split_size`` of bytes), within ``concurrency`` and ``aggregate_bps``.

    ``outer`` may be the array's whole shape (``sharded`` true, ``per_object`` one): a bound for every sharding
    of the chunk shape at once.
    """

    def __init__(self, selections: Mapping[str, Sequence[Selection | PointRead]], weights: Mapping[str, float],
                 shape: Sequence[int], itemsize: int, costs: Costs, reader: Reader, compressed: bool = True) -> None:
        self.shape = np.asarray([int(n) for n in shape], dtype=np.int64)
        self.itemsize, self.costs, self.reader, self.compressed = itemsize, costs, reader, compressed
        self.patterns = []
        for name, sels in selections.items():
            starts, stops, pointed = [], [], []
            for sel in sels:
                axes = sel.box if isinstance(sel, PointRead) else sel
                dims = set(sel.dims) if isinstance(sel, PointRead) else set()
                starts.append([0 if d in dims else a.start for d, a in enumerate(axes)])
                stops.append([1 if d in dims else a.stop for d, a in enumerate(axes)])
                pointed.append([d in dims for d in range(len(axes))])
            self.patterns.append((float(weights[name]), np.asarray(starts, dtype=np.int64).reshape(len(sels), -1),
                                  np.asarray(stops, dtype=np.int64).reshape(len(sels), -1),
                                  np.asarray(pointed, dtype=bool).reshape(len(sels), -1)))
        factors = costs.factors()
        self.low = {name: f[0] for name, f in factors.items()}
        threads = max(reader.threads, 1)
        self.speedup = max(costs.speedup(1), costs.speedup(threads))

    def seconds(self, chunks: np.ndarray, outer: np.ndarray, sharded: np.ndarray, per_object: np.ndarray,
                pairwise: bool = True) -> np.ndarray:
        """The bound, weighted over the mix, for each row of ``chunks`` and ``outer`` (``(k, ndim)``);
        ``pairwise`` False: a quicker, lower one: objects counted in the first `_QUICK` selections of each
        pattern alone (one each for the rest), the bandwidth taken at its most, only the first selection taken
        as finding no index cached."""
        chunks = np.asarray(chunks, dtype=np.int64).reshape(-1, self.shape.size)
        outer = np.asarray(outer, dtype=np.int64).reshape(chunks.shape)
        total = np.zeros(chunks.shape[0])
        for w, starts, stops, pointed in self.patterns:
            rest = 0 if pairwise else max(0, starts.shape[0] - _QUICK)
            block = max(1, (1 << 21) // max(1, starts.shape[0]))  # rows x windows held at once
            for lo in range(0, chunks.shape[0], block):
                hi = lo + block
                # the chunks and their bytes always of every selection (the decode and transfer of a batch)
                sums = self._chunk_sums(chunks[lo:hi], starts, stops, pointed) if rest else None
                total[lo:hi] += w * self._pattern(chunks[lo:hi], outer[lo:hi], np.asarray(sharded)[lo:hi],
                                                  np.asarray(per_object)[lo:hi], starts[:starts.shape[0] - rest],
                                                  stops[:starts.shape[0] - rest], pointed[:starts.shape[0] - rest],
                                                  pairwise, sums, rest)
        return total

    def _chunk_sums(self, chunks: np.ndarray, starts: np.ndarray, stops: np.ndarray,
                    pointed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row, the chunks every selection touches and their stored fraction, summed over selections."""
        touched = np.ones((chunks.shape[0], starts.shape[0]))
        fraction = np.ones(touched.shape)
        for d in range(self.shape.size):
            t, f = self._along(d, chunks[:, d:d + 1], starts[None, :, d], stops[None, :, d])
            pt = pointed[None, :, d]
            touched *= np.where(pt, 1, t)
            fraction *= np.where(pt, 0.0, f)
        return touched.sum(axis=1), fraction.sum(axis=1)

    def _along(self, d: int, c: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Chunks of length ``c`` that [s, e) touches along dimension ``d``, and their fraction inside the array
        summed (the array's last chunk holds n - (n // c) * c elements when c does not divide n)."""
        n = int(self.shape[d])
        last = (e - 1) // c
        t = last - s // c + 1
        edge = ((n - 1) // c == last) & (n % c != 0)
        return t, t - np.where(edge, 1.0 - (n % c) / c, 0.0)

    def _pattern(self, chunks: np.ndarray, outer: np.ndarray, sharded: np.ndarray, per_object: np.ndarray,
                 starts: np.ndarray, stops: np.ndarray, pointed: np.ndarray, pairwise: bool,
                 sums: tuple[np.ndarray, np.ndarray] | None = None, rest: int = 0) -> np.ndarray:
        """One pattern's bound; ``rest`` selections left out of ``starts`` and ``stops`` (each still one round
        trip and one request), ``sums`` the chunks and fractions of all of them."""
        k, windows = chunks.shape[0], starts.shape[0]
        touched = np.ones((k, windows))
        fraction = np.ones((k, windows))
        objects = np.ones((k, windows))
        corner = np.ones((k, windows))
        for d in range(self.shape.size):
            c, o = chunks[:, d:d + 1], outer[:, d:d + 1]
            s, e, pt = starts[None, :, d], stops[None, :, d], pointed[None, :, d]
            first, last = s // c, (e - 1) // c
            t, f = self._along(d, c, s, e)
            # chunks of the selection's first object along the dimension (its corner object: at most every
            # chunk of the shard along a pointed one)
            per_dim = np.maximum(o // c, 1)
            corner *= np.where(pt, per_dim, np.minimum(last, (first // per_dim + 1) * per_dim - 1) - first + 1)
            touched *= np.where(pt, 1, t)
            fraction *= np.where(pt, 0.0, f)
            objects *= np.where(pt, 1, (e - 1) // o - s // o + 1)
        chunk_count = touched.sum(axis=1) if sums is None else sums[0]
        fraction_sum = fraction.sum(axis=1) if sums is None else sums[1]
        requests = objects.sum(axis=1) + rest
        round_trips = np.ceil(objects / max(1, self.reader.concurrency)).sum(axis=1) + rest
        # a selection whose shards no earlier one touched finds no index cached: one it touches in fewer chunks
        # than read it whole (full_shard_fraction) waits for its index, then its ranges
        ranged = sharded[:, None] & (corner < self.reader.full_shard_fraction * per_object[:, None])
        fresh = np.zeros(ranged.shape, dtype=bool)
        fresh[:, 0] = True
        rows = (np.flatnonzero(ranged[:, 1:].any(axis=1)) if windows > 1 and pairwise
                else np.zeros(0, dtype=np.int64))
        if rows.size:  # only rows that could gain (in a bound for every sharding nothing is apart)
            fresh[rows] = self._fresh(outer[rows], starts, stops, pointed)
        round_trips = round_trips + (ranged & fresh).sum(axis=1)
        indexes = np.where(sharded, objects.max(axis=1), 0.0)
        chunk_dec = self.itemsize * np.prod(chunks.astype(np.float64), axis=1)
        chunk_enc = np.maximum(1.0, np.round(chunk_dec * self.costs.ratio))
        nbytes = (np.maximum(0.0, chunk_enc * fraction_sum - 0.5 * chunk_count) if self.compressed
                  else chunk_enc * chunk_count)
        nbytes = nbytes + indexes * (16 * per_object + (4 if self.reader.index_crc32c else 0))  # each index read
        costs, low = self.costs, self.low
        # the bytes stream at most at request_bps per request in flight (and aggregate_bps in all), and a read
        # sends at most one request per object (an index), one per chunk and one per split_size part: an upper
        # bound of the requests that grows with the bytes, so the time it gives still grows with them
        any_sharding = sharded & (per_object <= 1)
        most_requests = (np.where(any_sharding, chunk_count, requests) + chunk_count
                         + nbytes / max(1, self.reader.split_size))
        if not pairwise:  # some selections left out: the most requests of all of them is not known
            most_requests = np.full(k, np.inf)
        streams = costs.request_bps * np.minimum(max(1, self.reader.concurrency), np.maximum(most_requests, 1.0))
        bandwidth = np.minimum(streams, costs.aggregate_bps)
        transfer = min(low.get("request_bps", 1.0), low.get("aggregate_bps", 1.0))
        rate = _decode_rates(costs, chunk_dec)
        return (round_trips * costs.latency_s * low.get("latency_s", 1.0)
                + requests * costs.request_s * low.get("request_s", 1.0)
                + np.minimum(requests, self.reader.concurrency) * costs.connect_s * low.get("connect_s", 1.0)
                + indexes * costs.index_s * low.get("index_s", 1.0)
                + indexes * per_object * costs.index_entry_s * low.get("index_entry_s", 1.0)
                + chunk_count * costs.chunk_s * low.get("chunk_s", 1.0)
                + nbytes / bandwidth * transfer
                + chunk_count * chunk_dec / rate / self.speedup * low.get("decode_bps", 1.0))


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
        # per dimension, the first and last object of each selection (a pointwise read: its whole dimension)
        o = outer[:, None, :]
        lo = np.where(pointed[None], 0, starts[None] // o)
        hi = np.where(pointed[None], np.iinfo(np.int64).max, (stops[None] - 1) // o)
        # (rows, later, earlier, ndim): apart along a dimension; fresh when apart from every earlier one. In
        # blocks of rows: a batch of 1024 windows compares a million pairs a row
        later = ~np.tri(windows, k=-1, dtype=bool)[None]
        step = max(1, (1 << 24) // (windows * windows * max(1, outer.shape[1])))
        for a in range(0, k, step):
            b = a + step
            apart = ((lo[a:b, None, :, :] > hi[a:b, :, None, :]) | (hi[a:b, None, :, :] < lo[a:b, :, None, :]))
            fresh[a:b] |= (apart.any(axis=3) | later).all(axis=2)
        return fresh


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
