"""A pointwise pattern of many points (issue 42's review): the search's bounds work per distinct point and per
distinct chunk lengths, never per (layout, point) pair at once, so 50,000 points on a small array cost memory of
their distinct cells, not of every layout times every point (which asked numpy for 27.5 GiB at 10^6 points)."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import xarray as xr

from xarray_zarrmax.advise import Costs, Points, advise
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
