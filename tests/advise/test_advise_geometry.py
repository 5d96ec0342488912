"""Issue 42, causes 3, 5 and 7: costing time on 4-D arrays, a search over a stated grid whose pruning is proven
against costing the whole grid, and patterns as lists of boxes, points and batches with seeds and positions."""

from __future__ import annotations

import math
import time

import dask.array as da
import numpy as np
import pytest
import xarray as xr

import xarray_zarrmax
from xarray_zarrmax.advise import Batch, Costs, Layout, Points, Reader, pattern_selections, rank
from xarray_zarrmax.advise.counting import count_read
from xarray_zarrmax.advise.model import IndexCache, PointRead, ReadCounts
from xarray_zarrmax.core.geometry import Axis, plan_points, vectorized_points
from xarray_zarrmax.errors import AdviceInputError, AdviceTypeError

DIMS4 = ("time", "lev", "lat", "lon")
SHAPE4 = (365, 10, 181, 360)


def _lazy(shape: tuple[int, ...], dims: tuple[str, ...]) -> xr.Dataset:
    return xr.Dataset({"v": (dims, da.zeros(shape, dtype="f4", chunks=shape))})


# -- cause 3: costing time independent of the number of dimensions ------------------------------------------


def test_a_4d_search_of_three_patterns_costs_in_seconds() -> None:
    """Was: random-batch on a 4-D array took 34 s to cost (every grid layout costed window by window)."""
    t0 = time.perf_counter()
    report = xarray_zarrmax.advise(_lazy(SHAPE4, DIMS4), {"random-batch": 1.0, "timeseries": 1.0, "map": 1.0},
                                   costs=Costs(), batch=Batch(64), progress=False)
    seconds = time.perf_counter() - t0
    assert report.best.score > 0
    assert seconds < 30, seconds  # 9-10 s here (a 2-core machine shared with other work); main took 36 s


def test_pointwise_counts_equal_the_readers_plan() -> None:
    """The points pattern touches, per object, the chunks `plan_points` lists (our reader's pointwise plan)."""
    shape = (20, 30, 40)
    rng = np.random.default_rng(3)
    lat, lon = rng.integers(0, 30, 25), rng.integers(0, 40, 25)
    read = pattern_selections("p", (1.0, Points({"lat": lat, "lon": lon})), ("time", "lat", "lon"), shape)[0]
    assert isinstance(read, PointRead)
    points, _ = vectorized_points((np.asarray(lat)[:, None], np.asarray(lon)[:, None], slice(None)),
                                  (30, 40, 20))
    for layout in (Layout((4, 3, 8)), Layout((4, 3, 8), (8, 6, 40)), Layout((20, 1, 1), (20, 30, 40))):
        counts = count_read([read], shape, 4, layout, 4 * math.prod(layout.chunks), Reader(), compressed=False)
        # the plan of the same points in (time, lat, lon) order
        pts = np.stack([points[:, 2], points[:, 0], points[:, 1]], axis=-1)
        reads = plan_points(pts, layout.outer, layout.chunks)
        assert counts.objects == len(reads)
        assert counts.chunks == sum(len(pieces) for _, pieces in reads)


def test_two_pointwise_reads_along_other_dimensions_are_each_counted_as_their_own() -> None:
    """Two pointwise reads in one count, along different dimensions, whose chunk ids and box ranges look alike:
    each is its own fetch (the fetch memo keyed them alike and counted the second as the first, so the order of
    the two changed the requests: 6 or 8; 7 is right). Found by an adversarial review of the search's bounds,
    which a pattern of these broke by a request (no pattern the API builds holds two)."""
    shape = (14, 11, 11)
    layout = Layout((12, 8, 8), (12, 24, 24))
    reader = Reader(local=True, full_shard_fraction=1.0, coalesce_gap=0)
    a = PointRead((1,), np.array([[9], [10], [5]]), (Axis(0, 14), Axis(0, 1), Axis(0, 8)))
    b = PointRead((2,), np.array([[10], [5], [0], [10]]), (Axis(0, 7), Axis(4, 5), Axis(0, 1)))

    def requests(reads: list[PointRead]) -> int:
        return count_read(reads, shape, 1, layout, 768, reader, compressed=True).requests

    assert requests([a, b]) == requests([b, a]) == requests([a]) + requests([b]) == 7


# -- cause 5: the grid, and pruning that never drops the model's optimum ------------------------------------


def test_the_grid_holds_chunks_under_64_kib_and_exact_fits() -> None:
    from xarray_zarrmax.advise.candidates import _sizes, chunk_grid

    assert {1, 2, 3, 6, 12, 18, 23, 36, 45, 72, 90, 180, 360} <= set(_sizes(360))  # divisors and exact fits
    assert {91, 46, 23} <= set(_sizes(181))  # a prime length split evenly
    grid = chunk_grid((365, 10, 181, 360), 2)
    assert (2 * grid.prod(axis=1) < 64 << 10).any()  # no 64 KiB floor: the model rates small chunks


def test_the_search_finds_a_layout_the_old_grid_could_not() -> None:
    """The measured best of issue 42 was a chunk under 64 KiB; the search now finds such layouts when the model
    rates them best (the old grid's best for this batch scored 1.467; this one 1.434)."""
    ranked = rank(SHAPE4, DIMS4, 4, {"random-batch": 1.0, "map": 1.0, "timeseries": 1.0}, costs=Costs(),
                  reader=Reader(), batch=Batch(64))
    assert 4 * math.prod(ranked[0].layout.chunks) < 64 << 10
    assert ranked[0].score < 1.467


def _exhaustive(shape: tuple[int, ...], dims: tuple[str, ...], itemsize: int, mix: dict, costs: Costs,
                reader: Reader, batch: Batch) -> list:
    from xarray_zarrmax.advise.candidates import candidate_layouts

    return rank(shape, dims, itemsize, mix, costs=costs, reader=reader, batch=batch,
                layouts=list(candidate_layouts(shape, itemsize)))


MIXES = [{"timeseries": 1.0}, {"map": 1.0}, {"random-batch": 1.0}, {"timeseries": 0.5, "map": 0.5},
         {"full-scan": 0.2, "random-batch": 1.0, "region-mean": 0.3}]


#: The most layouts a grid costed whole may hold (`test_pruning_never_drops_the_grids_optimum`)
_EXHAUSTIVE_MOST = 12_000


@pytest.mark.parametrize("seed", range(6))
def test_pruning_never_drops_the_grids_optimum(seed: int) -> None:
    """Random small arrays, costs and mixes: the pruned search's best scores no worse than costing every layout
    of the grid, and every layout of the grid scoring the best score is costed. An array whose grid holds over
    `_EXHAUSTIVE_MOST` layouts is drawn again: costing every layout takes milliseconds each (seed 4 drew a
    37 x 35 x 21 array of 30,492, two minutes of a CI run)."""
    from xarray_zarrmax.advise.candidates import candidate_layouts

    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(2, 4))
    shape = tuple(int(n) for n in rng.integers(3, 40, ndim))
    while sum(1 for _ in candidate_layouts(shape, 4)) > _EXHAUSTIVE_MOST:
        shape = tuple(int(n) for n in rng.integers(3, 40, ndim))
    dims = ("time", "lat", "lon")[:ndim]
    costs = Costs(latency_s=float(rng.choice([1e-4, 2e-3, 0.02])), request_bps=float(rng.choice([8e7, 1e9])),
                  decode_bps=float(rng.choice([2e8, 1e9])), ratio=float(rng.choice([0.3, 1.0])),
                  request_s=float(rng.choice([0.0, 3e-5])), chunk_s=float(rng.choice([0.0, 2e-5])),
                  index_s=float(rng.choice([0.0, 5e-5])))
    reader = Reader(local=bool(rng.integers(0, 2)), threads=int(rng.integers(1, 3)), concurrency=16)
    mix = MIXES[seed % len(MIXES)]
    batch = Batch(int(rng.integers(1, 9)), {"time": 2, "lat": 3, "lon": 4}, seed=seed)
    found = rank(shape, dims, 4, mix, costs=costs, reader=reader, batch=batch)
    every = _exhaustive(shape, dims, 4, mix, costs, reader, batch)
    best = min(c.score for c in every)
    assert found[0].score <= best * (1 + 1e-12)
    costed = {c.layout for c in found}
    assert {c.layout for c in every if c.score <= best} <= costed | {found[0].layout}


def test_the_bound_never_exceeds_the_prediction() -> None:
    """`SearchBounds` is a lower bound of every layout's score, on a grid of a small 3-D array."""
    from xarray_zarrmax.advise.bounds import ALIGNED, LISTED, RANGES, SearchBounds
    from xarray_zarrmax.advise.candidates import candidate_layouts
    from xarray_zarrmax.advise.search import LEVELS, layout_terms
    shape, dims = (24, 13, 30), ("time", "lat", "lon")
    mix = {"timeseries": 1.0, "map": 1.0, "random-batch": 1.0}
    costs, reader = Costs(latency_s=1e-3, request_s=2e-5, chunk_s=1e-5, index_s=3e-5, ratio=0.4), Reader()
    batch = Batch(6, {"time": 3, "lat": 4, "lon": 5})
    sels = {n: pattern_selections(n, 1.0, dims, shape, batch=batch) for n in mix}
    bounds = SearchBounds(sels, mix, shape, 4, costs, reader)
    layouts = list(candidate_layouts(shape, 4))[::7]
    scored = {c.layout: c.score for c in rank(shape, dims, 4, mix, costs=costs, reader=reader, batch=batch,
                                             layouts=layouts)}
    rows = (np.asarray([lay.chunks for lay in layouts]), np.asarray([lay.outer for lay in layouts]),
            np.asarray([lay.shards is not None for lay in layouts]),
            np.asarray([lay.chunks_per_object() for lay in layouts], dtype=float))
    # each level of a layout's own bound (LISTED and ALIGNED, raises of a listed row: test_advise_search_proof.py)
    for level in [level for level in LEVELS if level not in (LISTED, ALIGNED)]:
        low = layout_terms(bounds, layouts) @ bounds.key_factors if level == RANGES else bounds.seconds(*rows, level)
        for layout, b in zip(layouts, low, strict=True):
            assert b <= scored[layout] * (1 + 1e-9), (layout, b, scored[layout])


def test_the_bound_of_a_level_that_is_a_raise_is_refused() -> None:
    """`ALIGNED` is the search's level between `LISTED` and `QUICK`, a raise of listed rows (`SearchBounds.aligned`),
    not a level `SearchBounds.terms` works out: asked of it, it says so rather than answer with another level's."""
    from xarray_zarrmax.advise.bounds import ALIGNED, SearchBounds
    shape, dims = (24, 13, 30), ("time", "lat", "lon")
    bounds = SearchBounds({"map": pattern_selections("map", 1.0, dims, shape)}, {"map": 1.0}, shape, 4, Costs(),
                          Reader())
    chunks = np.asarray([[4, 13, 30]])
    with pytest.raises(ValueError, match="expects a level of its own .* got ALIGNED instead"):
        bounds.terms(chunks, chunks, np.zeros(1, dtype=bool), np.ones(1), ALIGNED)


# -- cause 7: lists of boxes, points, batches with seeds and positions ---------------------------------------


def test_a_list_of_boxes_is_read_one_after_another() -> None:
    boxes = [{"time": slice(0, 4), "lat": 3}, {"time": 7, "lon": slice(2, 9)}]
    sels = pattern_selections("mine", (1.0, boxes), ("time", "lat", "lon"), (10, 20, 30))  # type: ignore[arg-type]
    boxes_read = [[(a.start, a.stop) for a in s] for s in sels]  # type: ignore[union-attr]
    assert boxes_read == [[(0, 4), (3, 4), (0, 30)], [(7, 8), (0, 20), (2, 9)]]
    layout = Layout((2, 5, 10))
    one = [count_read([s], (10, 20, 30), 4, layout, 400, Reader()) for s in sels]
    both = count_read(sels, (10, 20, 30), 4, layout, 400, Reader(), IndexCache())
    assert both.requests == sum(c.requests for c in one) and both.bytes == sum(c.bytes for c in one)


def test_a_batchs_index_cache_answers_and_grows_as_a_set_would() -> None:
    """`counting._remember` (a window's shards looked up in the sorted cache, then inserted) says which were
    cached and leaves the cache sorted, distinct and holding them all, whatever order the window lists them in."""
    from xarray_zarrmax.advise.counting import _remember

    rng = np.random.default_rng(3)
    cache, known = IndexCache(), set()
    for _ in range(200):
        codes = rng.choice(5000, size=int(rng.integers(1, 40)), replace=False).astype(np.int64)
        seen = _remember(cache, codes)
        assert seen.tolist() == [int(c) in known for c in codes]
        known |= set(codes.tolist())
        assert cache.seen.tolist() == sorted(known)


def test_batch_seed_and_positions_give_the_windows_costed() -> None:
    dims, shape = ("time", "lat", "lon"), (50, 40, 60)
    assert Batch().selections(dims, shape) == Batch(seed=0).selections(dims, shape)
    assert Batch(seed=1).selections(dims, shape) != Batch(seed=0).selections(dims, shape)
    batch = Batch(window={"time": 4, "lat": 8, "lon": 8}, positions=[{"time": 2, "lat": 30}, {"lon": 52}])
    assert batch.windows == 2
    assert batch.selections(dims, shape) == [
        {"time": slice(2, 6), "lat": slice(30, 38), "lon": slice(0, 8)},
        {"time": slice(0, 4), "lat": slice(0, 8), "lon": slice(52, 60)}]
    costed = pattern_selections("random-batch", 1.0, dims, shape, batch=batch)
    windows = [{d: slice(a.start, a.stop) for d, a in zip(dims, w, strict=True)}  # type: ignore[arg-type]
               for w in costed]
    assert windows == batch.selections(dims, shape)
    values = np.arange(50 * 40 * 60).reshape(shape)
    da_ = xr.DataArray(values, dims=dims)
    assert all(da_.isel(s).shape == (4, 8, 8) for s in batch.selections(dims, shape))


def test_points_read_as_vectorised_indexing() -> None:
    dims, shape = ("time", "lat", "lon"), (10, 20, 30)
    points = Points({"lat": [1, -1, 5], "lon": [0, 29, 7]}, box={"time": slice(2, 5)})
    indexers = points.isel(dims, shape)
    np.testing.assert_array_equal(indexers["lat"], [1, 19, 5])
    values = xr.DataArray(np.arange(6000).reshape(shape), dims=dims)
    picked = values.isel({d: xr.DataArray(v, dims="points") if isinstance(v, np.ndarray) else v
                          for d, v in indexers.items()})
    assert picked.sizes == {"time": 3, "points": 3}
    read = pattern_selections("p", (1.0, points), dims, shape)[0]
    assert isinstance(read, PointRead) and read.size == 9
    report = xarray_zarrmax.advise(_lazy(shape, dims), {"profiles": (1.0, points), "map": 1.0}, costs=Costs(),
                                   progress=False)
    assert report.best.predictions["profiles"].counts.chunks >= 1


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: Batch(seed=-1), AdviceInputError, "expected Batch seed as a seed, a whole number >= 0. Got -1"),
    (lambda: Batch(seed=1.5), AdviceTypeError, "expected Batch seed as a seed"),  # type: ignore[arg-type]
    (lambda: Batch(3, positions=[{"time": 0}]), AdviceInputError, "expected Batch windows equal to the number of "
                                                                  "positions (1)"),
    (lambda: Batch(positions=[{"time": -2}]), AdviceInputError, "expected Batch positions[0]['time'] as a window "
                                                                "start >= 0. Got -2"),
    (lambda: Batch(positions={"time": 1}), AdviceTypeError,  # type: ignore[arg-type]
     "expected Batch positions as a list of window starts"),
    (lambda: Batch(positions=[]), AdviceInputError, "expected Batch positions as a list"),
    (lambda: Points({}), AdviceTypeError, "expected Points indices as a mapping {dim: indices}"),
    (lambda: Points({"lat": [1, 2], "lon": [3]}), AdviceInputError, "expected Points indices of one length per "
                                                                    "dimension"),
    (lambda: Points({"lat": [1.5]}), AdviceTypeError,  # type: ignore[list-item]
     "expected Points indices['lat'] as a non-empty list of whole numbers"),
    (lambda: Points({"lat": [1]}, box={"lat": 2}), AdviceInputError, "expected Points box over dimensions other "
                                                                     "than the points'"),
])
def test_new_pattern_values_name_what_was_wrong(make, error, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error) as caught:
        make()
    assert str(caught.value).startswith(message), str(caught.value)


@pytest.mark.parametrize(("spec", "message"), [
    ((1.0, Points({"lat": [0, 20]})), "pattern 'mine': expected point indices of dimension 'lat' from -20 to 19 "
                                      "(variable 'v' has 20 elements along it). Got 20 instead."),
    ((1.0, Points({"depth": [0]})), "pattern 'mine' points along dimension 'depth', which variable 'v' does not "
                                    "have"),
    ((1.0, Batch(window={"time": 4}, positions=[{"time": 8}])), "pattern 'mine': expected Batch positions[0]"
                                                                "['time'] from 0 to 6, so that a window of 4 fits"),
    ((1.0, Batch(positions=[{"depth": 1}])), "pattern 'mine': Batch positions[0] names dimension 'depth'"),
    ((1.0, [{"time": 0}, {"lat": 99}]), "pattern 'mine[1]': expected an index of dimension 'lat' from -20 to 19"),
])
def test_new_patterns_are_checked_against_the_variable(spec, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(AdviceInputError) as caught:
        xarray_zarrmax.advise(_lazy((10, 20, 30), ("time", "lat", "lon")), {"mine": spec}, costs=Costs(),
                              progress=False)
    assert str(caught.value).startswith(message), str(caught.value)


def test_user_patterns_of_the_wrong_kind_are_refused() -> None:
    with pytest.raises(AdviceTypeError, match=r"^expected patterns\['x'\] as a weight, or \(weight"):
        xarray_zarrmax.advise(_lazy((10, 20, 30), ("time", "lat", "lon")), {"x": (1.0, [])}, costs=Costs(),
                              progress=False)


def test_box_selections_keep_their_counts() -> None:
    """Speed did not change the answer: boxes and batches count as before (fixed values from the old model)."""
    shape = (40, 30, 50)
    windows = pattern_selections("random-batch", 1.0, ("time", "lat", "lon"), shape,
                                 batch=Batch(6, {"lat": 7, "lon": 9}))
    for layout in (Layout((4, 5, 10)), Layout((4, 5, 10), (8, 10, 50)), Layout((40, 1, 1), (40, 30, 50))):
        for sels in (windows, [tuple(Axis(0, n) for n in shape)]):
            new = count_read(sels, shape, 4, layout, 4 * math.prod(layout.chunks) // 2, Reader(), compressed=True)
            assert new == _old_counts(sels, shape, layout)


def _old_counts(sels: list, shape: tuple[int, ...], layout: Layout) -> ReadCounts:
    """The counts today's main gave for the layouts above (recorded there)."""
    return ReadCounts(*OLD[(str(layout), len(sels))])


OLD = {
    ('4x5x10', 6): (46, 46, 0, 18400, 36800, 6, 7616, 46, 0, 0),
    ('4x5x10', 1): (300, 300, 0, 120000, 240000, 3, 292000, 300, 0, 0),
    ('4x5x10 in 8x10x50', 6): (16, 25, 9, 28116, 36800, 10, 11616, 46, 9, 180),
    ('4x5x10 in 8x10x50', 1): (15, 15, 0, 124860, 240000, 1, 365660, 300, 15, 300),
    ('40x1x1 in 40x30x50', 6): (6, 7, 1, 148004, 60480, 7, 50260, 378, 1, 1500),
    ('40x1x1 in 40x30x50', 1): (1, 1, 0, 144004, 240000, 1, 384164, 1500, 1, 1500),
}
