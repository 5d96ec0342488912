"""A pointwise pattern of many points (issue 42's review): the search's bounds work per distinct point and per
distinct chunk lengths, never per (layout, point) pair at once, so 50,000 points on a small array cost memory of
their distinct cells, not of every layout times every point (which asked numpy for 27.5 GiB at 10^6 points)."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest
import xarray as xr

from xarray_zarrmax.advise import Costs, Points, Reader, advise, pattern_selections
from xarray_zarrmax.advise.bounds import QUICK, TERMS, SearchBounds
from xarray_zarrmax.advise.candidates import multiples
from xarray_zarrmax.advise.counting import _distinct_cells
from xarray_zarrmax.advise.ranged import _point_chunks


def test_many_points_cost_the_memory_of_their_distinct_cells_not_of_every_layout_times_every_point():
    ds = xr.Dataset({"v": (("time", "lat", "lon"), np.zeros((100, 50, 60), "f4"))})
    rng = np.random.default_rng(0)
    lat, lon = rng.integers(0, 50, 50_000), rng.integers(0, 60, 50_000)
    tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            many = advise(ds, {"points": (1, Points({"lat": lat, "lon": lon}))}, costs=Costs(), progress=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # every layout times every point, as the bounds held them before: 1,848 layouts x 50,000 x 2 x 8 bytes
    assert peak < 200 * 2**20, f"peak {peak / 2**20:.0f} MiB"
    # the same reads as the distinct points' (a chunk holding several points is read once)
    cells = np.unique(np.stack([lat, lon], axis=1), axis=0)
    once = advise(ds, {"points": (1, Points({"lat": cells[:, 0], "lon": cells[:, 1]}))}, costs=Costs(),
                  progress=False)
    assert many.best.layout == once.best.layout
    assert many.best.predictions["points"].counts.requests == once.best.predictions["points"].counts.requests


def test_a_points_chunks_are_worked_out_per_distinct_chunk_lengths_as_per_layout():
    rng = np.random.default_rng(3)
    for _ in range(50):
        m = int(rng.integers(1, 4))
        lengths = rng.integers(1, 6, size=(int(rng.integers(1, 30)), m))
        points = rng.integers(0, 40, size=(int(rng.integers(1, 25)), m))
        row, ids = _point_chunks(lengths, points)
        expected = [(r, *chunk) for r in range(len(lengths))
                    for chunk in sorted({tuple(p // lengths[r]) for p in points.tolist()})]
        assert [(r, *c) for r, c in zip(row.tolist(), ids.tolist(), strict=True)] == [
            tuple(int(x) for x in e) for e in expected]


def test_distinct_cells_are_numpys_whether_or_not_their_codes_fit_in_63_bits():
    rng = np.random.default_rng(4)
    for grid in ([7], [5, 9], [3, 4, 2], [2**40, 2**30]):
        g = np.asarray(grid, dtype=np.int64)
        ids = np.stack([rng.integers(0, n, 200) for n in grid], axis=1)
        ids[::3] = ids[1::3][: len(ids[::3])] if len(ids) > 3 else ids[::3]  # repeats
        found = _distinct_cells(ids, g)
        assert found.dtype == np.int64
        np.testing.assert_array_equal(found, np.unique(ids, axis=0))


def _pointed_by_hand(shape: tuple[int, ...], chunks: np.ndarray, outer: np.ndarray,
                     points: np.ndarray) -> tuple[float, ...]:
    """One layout's distinct chunks holding ``points``, their fractions inside the array, distinct objects, the
    fewest and most chunks an object holds, and the fewest points an object holds: sets of tuples."""
    n = np.asarray(shape)
    cells = {tuple(p // chunks) for p in points.tolist()}
    fraction = sum(float(np.prod(np.minimum(chunks, n - np.asarray(c) * chunks) / chunks)) for c in cells)
    per_object: dict[tuple[int, ...], set[tuple[int, ...]]] = {}
    held: dict[tuple[int, ...], int] = {}
    for p in points.tolist():
        key = tuple(np.asarray(p) // outer)
        per_object.setdefault(key, set()).add(tuple(np.asarray(p) // chunks))
        held[key] = held.get(key, 0) + 1
    sizes = [len(s) for s in per_object.values()]
    return len(cells), fraction, len(per_object), min(sizes), max(sizes), min(held.values())


@pytest.mark.parametrize("huge", [False, True], ids=["codes", "past-2^62"])
def test_a_pointwise_reads_chunks_and_objects_are_bounded_per_distinct_lengths(huge: bool) -> None:
    """`SearchBounds.pointwise.pointed` (`point_bounds`), worked out once per distinct chunk lengths and once per
    distinct object lengths, against each layout by hand: its chunks, their fractions and its objects exactly; and
    of the chunks an object holds, the bound of the fewest at least the fewest (the read waits for an index only if
    one holds few) and the mean at most the most (it holds a whole object in flight only if one holds many)."""
    rng = np.random.default_rng(11 + huge)
    for _ in range(25):
        m = int(rng.integers(1, 4))
        shape = tuple(int(2**31 - rng.integers(0, 5)) if huge else int(rng.integers(3, 40)) for _ in range(m))
        count = int(rng.integers(1, 40))
        points = np.stack([rng.integers(max(0, n - 60), n, count) if huge else rng.integers(0, n, count)
                           for n in shape], axis=1)
        points = np.unique(points, axis=0)  # as the bounds hold them
        dims = list(range(m))
        names = ("time", "lat", "lon")[:m]
        read = Points({names[d]: points[:, d] for d in dims})
        selections = {"p": pattern_selections("p", (1.0, read), names, shape)}
        bounds = SearchBounds(selections, {"p": 1.0}, shape, 4, Costs(), Reader())
        k = int(rng.integers(1, 12))
        chunks = np.stack([rng.integers(1, 9 if huge else n + 1, k) for n in shape], axis=1)
        chunks[k // 2:] = chunks[: k - k // 2]  # layouts sharing chunk lengths, sharded otherwise
        outer = chunks * rng.integers(1, 4, size=chunks.shape)
        outer[0] *= 1 + 40 * int(rng.integers(0, 2))  # now and then a shard far longer than the array
        for _ in range(2):  # and asked again: what is remembered is the same
            touched, fraction, objects, fewest, mean = bounds.pointwise.pointed(chunks, outer, dims, points)
            for r in range(k):
                cells, frac, objs, least_chunks, most_chunks, least_points = _pointed_by_hand(
                    shape, chunks[r], outer[r], points)
                assert (touched[r], objects[r]) == (cells, objs)
                assert fraction[r] == pytest.approx(frac, rel=1e-12)
                assert mean[r] == cells / objs and fewest[r] == min(cells / objs, least_points)
                assert least_chunks <= fewest[r] and mean[r] <= most_chunks


def test_the_listed_bound_of_a_pointwise_read_counts_the_objects_holding_its_points() -> None:
    """`SearchBounds.sharded_floor` (`LISTED`, a sharded layout's first bound) counts a pointwise read's objects as
    `QUICK` does: points each in a shard of their own are a request each, not one for the read (was: one object
    along each pointed dimension, so 30 random points on a 4-D array took 3.5 million layouts up to `QUICK`)."""
    shape, names = (64, 40, 30), ("time", "lat", "lon")
    rng = np.random.default_rng(7)
    points = np.unique(np.stack([rng.integers(0, n, 25) for n in shape], axis=1), axis=0)
    read = Points({name: points[:, d] for d, name in enumerate(names)})
    costs = Costs(request_s=1e-3, latency_s=1e-6, connect_s=0.0)
    bounds = SearchBounds({"p": pattern_selections("p", (1.0, read), names, shape)}, {"p": 1.0}, shape, 4, costs,
                          Reader(concurrency=1000))
    chunks = np.asarray([[1, 1, 1], [2, 4, 3], [8, 5, 6]])
    floor = bounds.terms(chunks, np.broadcast_to(np.asarray(shape), chunks.shape), np.ones(3, dtype=bool),
                         np.ones(3), QUICK)
    for which in ([0, 0, 0], [1, 1, 1], [2, 0, 1], [3, 3, 2]):  # 1, 2, 8 or all chunks per shard
        at = np.asarray([which] * 3)
        listed = bounds.sharded_floor(floor, chunks, np.arange(3), at)
        per = np.take_along_axis(multiples(chunks, shape), at[:, :, None], axis=2)[:, :, 0]
        for r in range(3):
            objects = len({tuple(p // (per[r] * chunks[r])) for p in points.tolist()})
            assert listed[r, TERMS.index("request_s")] >= objects * costs.request_s * (1 - 1e-9), (chunks[r], per[r])
