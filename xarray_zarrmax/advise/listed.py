"""The `LISTED` bound of many sharded layouts at once (`bounds.SearchBounds.sharded_floor`), from what it works out
per chunk shape and option of chunks per shard: a layout's rows raised from its chunk shape's bound of every sharding
by what its own shards add at least. Compiled where the package was built so (`kernels`: a search lists millions of
layouts), else `listed_numpy`: the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xarray_zarrmax.advise import kernels
from xarray_zarrmax.advise.point_bounds import point_requests


def listed_rows(tables: ListedTables, owner: np.ndarray, which: np.ndarray, scalars: np.ndarray) -> np.ndarray:
    """``(layouts, 11)``: each layout's `LISTED` bound (chunk shape ``owner``, option ``which`` along each
    dimension), under the reader's and costs' ``scalars`` (concurrency, full_shard_fraction, latency_s, request_s,
    connect_s, index_s, index_entry_s, and the most bandwidth any read gets)."""
    if kernels.compiled is None:
        return listed_numpy(tables, owner, which, scalars)
    reads = tables.reads
    assert reads is not None
    n, ndim = which.shape
    m = tables.table.shape[0]
    rows = np.empty((n, tables.floor.shape[1]))
    if n == 0:
        return rows
    compiled, ints, floats = kernels.compiled, kernels.ints, kernels.floats
    owner, which, held = ints(owner), ints(which), floats(reads.held).reshape(-1, n)
    shared = (ints(tables.table), floats(tables.floor), floats(tables.weights), ints(tables.windows),
              ints(tables.first_pointed), floats(tables.logmean), floats(tables.corner), ints(reads.pattern),
              ints(reads.first))
    per_shape = (floats(reads.objects), floats(reads.touched), floats(reads.merged), floats(reads.joined),
                 floats(scalars))

    def part(lo: int, hi: int) -> None:  # (the kernel runs without the GIL: parts at once on a machine's cores)
        compiled.listed_floor(hi - lo, m, ndim, tables.weights.size, reads.pattern.size, owner[lo:hi], which[lo:hi],
                              *shared, np.ascontiguousarray(held[:, lo:hi]), *per_shape, rows[lo:hi])

    kernels.across_threads(n, part)
    return rows


@dataclass(slots=True)
class PointTables:
    """`ListedTables` of each pointwise read (its rows, in the patterns' order): the shards holding its points per
    layout, its objects along its other dimensions per (chunk shape, dimension, option; 1 along its own), its
    chunks, `merges` components (merged, joined) per chunk shape, its pattern, and whether it is its first."""

    held: np.ndarray
    objects: np.ndarray
    touched: np.ndarray
    merged: np.ndarray
    joined: np.ndarray
    pattern: np.ndarray
    first: np.ndarray


@dataclass(slots=True)
class ListedTables:
    """What `SearchBounds.sharded_floor` works out per chunk shape and option of chunks per shard (``(m, ndim, 4)``,
    as `candidates.multiples`) before it raises each listed layout's bound: the options, the bound of every sharding
    of each chunk shape, per pattern its weight, selections and whether its first points, the mean log of its
    selections' objects and its first selection's chunks in its first object (``(patterns, m, ndim, 4)``)."""

    table: np.ndarray
    floor: np.ndarray
    weights: np.ndarray
    windows: np.ndarray
    first_pointed: np.ndarray
    logmean: np.ndarray
    corner: np.ndarray
    reads: PointTables | None = None


def listed_numpy(tables: ListedTables, owner: np.ndarray, which: np.ndarray, scalars: np.ndarray) -> np.ndarray:
    """`listed_rows` in numpy (the reference `_kernels.c`'s listed_floor is held to, and the bound where it was not
    built): per layout (chunk shape ``owner``, option ``which`` along each
    dimension) and pattern, the selections' objects' geometric mean (AM-GM: their sum at least their count times
    it), a request each and the ranges of its pointwise reads beyond one an object, an index each, a round trip each
    ``concurrency`` of them; the first selection waits for an index when it reads its first shard by ranges."""
    concurrency, fraction, latency_s, request_s, connect_s, index_s, index_entry_s, most = scalars.tolist()
    n, ndim = which.shape
    reads = tables.reads
    assert reads is not None
    at = (owner[:, None], np.arange(ndim)[None], which)  # each layout's (chunk shape, dimension, option)
    per_object = np.prod(tables.table[at].astype(np.float64), axis=1)
    rows = tables.floor[owner].copy()
    lat, req, conn, idx = np.zeros((4, n))
    for p, weight in enumerate(tables.weights.tolist()):
        windows = int(tables.windows[p])
        if windows == 0:
            continue
        logs, corner = np.zeros(n), np.ones(n)
        for d in range(ndim):
            logs += tables.logmean[p, owner, d, which[:, d]]
            corner *= tables.corner[p, owner, d, which[:, d]]
        extra, point_wait = np.zeros(n), np.zeros(n)
        for r in np.flatnonzero(reads.pattern == p).tolist():
            held = reads.held[r]
            logs += np.log(held) / windows
            others = np.ones(n)
            for d in range(ndim):
                others *= reads.objects[r, owner, d, which[:, d]]
            objects, touched = held * others, reads.touched[r, owner]
            merged, joined = reads.merged[r, owner], reads.joined[r, owner]
            extra += np.maximum(0.0, point_requests(fraction, objects, touched, per_object, merged, joined) - objects)
            if reads.first[r]:  # every shard read by ranges: the read waits for an index first
                point_wait = (fraction * per_object > touched).astype(np.float64)
        mean = np.exp(logs) * (1 - 1e-12)  # the objects' geometric mean (a hair low: rounding)
        requests_p = np.maximum(windows, windows * mean) + extra
        indexes_p = np.maximum(1.0, mean)
        waves = np.maximum(0.0, np.ceil(requests_p / max(1.0, concurrency) - 1e-9) - windows)
        waits = np.zeros(n)
        if not tables.first_pointed[p]:  # the first selection finds no index cached: by ranges, it waits
            waits = (corner < fraction * per_object).astype(np.float64)
        else:  # a pointwise one: its wait is a round trip of the waves' (each at least one a selection)
            waves = np.maximum(waves, point_wait)
        lat += (waits + waves) * weight
        req += requests_p * weight
        conn += np.minimum(requests_p, concurrency) * weight
        idx += indexes_p * weight
    rows[:, 0] += lat * latency_s
    rows[:, 1] = np.maximum(rows[:, 1], req * request_s)
    rows[:, 2] = np.maximum(rows[:, 2], conn * connect_s)
    rows[:, 3] = np.maximum(rows[:, 3], idx * index_s)
    rows[:, 4] = np.maximum(rows[:, 4], idx * per_object * index_entry_s)
    # each index's entries beyond the one the floor counted, at the most bandwidth any read gets
    rows[:, 8] += idx * 16 * (per_object - 1) / most
    return rows
