"""Issue 42, cause 3: the search's highest bound counts the byte ranges each window of a batch reads from a shard
(`advise.ranged`), as the model does (`counting.coalesced_runs` over the shard's Morton layout), without laying
the shard out: each chunk's place in zarr's order and the bytes before it come from `morton.box_offsets`."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np
import pytest

from xarray_zarrmax.advise import ranged
from xarray_zarrmax.advise.counting import _stored_layout, coalesced_runs, count_read
from xarray_zarrmax.advise.model import Layout, PointRead, Reader
from xarray_zarrmax.advise.morton import block_offsets, box_offsets, whole_blocks
from xarray_zarrmax.advise.ranged import Ranged, ranged_points, ranged_runs
from xarray_zarrmax.core.geometry import Axis
from xarray_zarrmax.tuning import STREAM_BYTES


def _random_shard(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """A shard's chunk grid, chunk shape and extents inside the array (at the array's edge or not)."""
    ndim = int(rng.integers(1, 5))
    grid = tuple(int(g) for g in rng.integers(1, 13, ndim))
    chunks = tuple(int(c) for c in rng.integers(1, 6, ndim))
    if rng.integers(0, 2):
        return grid, chunks, tuple(g * c for g, c in zip(grid, chunks, strict=True))
    return grid, chunks, tuple(int(rng.integers(1, g * c + 1)) for g, c in zip(grid, chunks, strict=True))


@pytest.mark.parametrize("seed", range(6))
def test_morton_offsets_are_each_chunks_place_and_bytes_in_the_shards_layout(seed: int) -> None:
    """Against the shard laid out whole (`counting._stored_layout`, itself checked against zarr's write order):
    every stored chunk's rank, and the bytes before it within the rounding of each chunk's size."""
    rng = np.random.default_rng(seed)
    for _ in range(80):
        grid, chunks, extents = _random_shard(rng)
        enc = int(rng.choice([7, 1000, 10**6]))
        rank, sizes = _stored_layout(grid, extents, chunks, enc, True)
        stored = [-(-e // c) for e, c in zip(extents, chunks, strict=True)]
        last = [(e - (s - 1) * c) / c for e, s, c in zip(extents, stored, chunks, strict=True)]
        cells = np.asarray(list(itertools.product(*[range(s) for s in stored])), dtype=np.int64)
        n = len(cells)
        # each cell a box of one, and the whole stored box at once (C order): the same ranks and offsets
        got, before, _ = box_offsets(cells, np.ones_like(cells), np.tile(stored, (n, 1)), np.tile(grid, (n, 1)),
                                     np.tile(last, (n, 1)))
        want = rank[tuple(cells.T)]
        np.testing.assert_array_equal(got, want)
        whole, whole_before, _ = box_offsets(np.zeros((1, len(grid)), dtype=np.int64), np.asarray([stored]),
                                             np.asarray([stored]), np.asarray([grid]), np.asarray([last]))
        np.testing.assert_array_equal(whole, want)
        np.testing.assert_allclose(whole_before, before)
        offsets = np.concatenate(([0], np.cumsum(sizes)))[want]
        # each chunk before is max(1, round(fraction x enc)) bytes: within half a byte below, a byte above
        assert (offsets >= before * enc - 0.5 * want - 1e-6).all()
        assert (offsets <= before * enc + want + 1e-6).all()


def _random_sharded(rng: np.random.Generator, min_ndim: int,
                    longest: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], bool]:
    """A random array shape, chunk shape, chunks per shard and shard shape (shards of one chunk included), and
    whether chunks and shards divide the array (every chunk whole)."""
    ndim = int(rng.integers(min_ndim, 5))
    shape = tuple(int(n) for n in rng.integers(4, longest if ndim < 3 else 14, ndim))
    chunks = tuple(int(rng.integers(1, n + 1)) for n in shape)
    per = tuple(int(rng.integers(1, -(-n // c) + 1)) for n, c in zip(shape, chunks, strict=True))
    outer = tuple(k * c for k, c in zip(per, chunks, strict=True))
    even = all(n % o == 0 and n % c == 0 for n, o, c in zip(shape, outer, chunks, strict=True))
    return shape, chunks, per, outer, even


def _brute(shape: tuple[int, ...], chunks: tuple[int, ...], outer: tuple[int, ...], windows: list[tuple[slice, ...]],
           enc: int, compressed: bool, fraction: float, gap: int, several: bool = False,
           max_objects: int = 1 << 62) -> tuple[int, int]:
    """Per window and shard it reads by ranges (fewer than ``fraction`` of its chunks touched, or, ``several``, a
    shard an earlier window touched: its index cached, where both touch at most ``max_objects`` shards), the
    requests beyond the first and the bytes between its chunks, as the model counts them (`coalesced_runs` of the
    shard laid out whole)."""
    per = [o // c for o, c in zip(outer, chunks, strict=True)]
    extra_requests = extra_bytes = 0
    seen: set[tuple[int, ...]] = set()
    for window in windows:
        first = [s.start // c for s, c in zip(window, chunks, strict=True)]
        last = [(s.stop - 1) // c for s, c in zip(window, chunks, strict=True)]
        shards = [range(f // k, la // k + 1) for f, la, k in zip(first, last, per, strict=True)]
        small = math.prod(len(r) for r in shards) <= max_objects  # else costed whole: the cache left alone
        for shard in itertools.product(*shards):
            extents = tuple(min(o, n - i * o) for i, o, n in zip(shard, outer, shape, strict=True))
            rank, sizes = _stored_layout(tuple(per), extents, chunks, enc, compressed)
            box = tuple(slice(max(f, i * k) - i * k, min(la, i * k + k - 1) - i * k + 1)
                        for f, la, i, k in zip(first, last, shard, per, strict=True))
            touched = rank[box].ravel()
            cached = several and small and shard in seen
            if small:
                seen.add(shard)
            if touched.size >= fraction * math.prod(per) and not cached:
                continue  # read whole at its first touch: not counted
            runs, nbytes = coalesced_runs(touched, sizes, gap)
            extra_requests += runs - 1
            extra_bytes += nbytes - int(sizes[touched].sum())
    return extra_requests, extra_bytes


def _ranged_of_one(shape: tuple[int, ...], chunks: tuple[int, ...], outer: tuple[int, ...], per: tuple[int, ...],
                   windows: list[tuple[slice, ...]], enc: int, compressed: bool, fraction: float, gap: int,
                   several: bool) -> Ranged:
    """`ranged_runs` of one layout (a remote read of itemsize 4) for ``windows``."""
    return ranged_runs(np.asarray(shape), np.asarray([chunks]), np.asarray([outer]),
                       np.asarray([float(math.prod(per))]), np.asarray([[w.start for w in win] for win in windows]),
                       np.asarray([[w.stop for w in win] for win in windows]),
                       np.asarray([float(enc)]), compressed, fraction, gap, False, 4, several=several)


@pytest.mark.usefixtures("bound_kernels")
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("compressed", [True, False])
@pytest.mark.parametrize("several", [False, True])
def test_ranged_runs_are_at_most_the_models_and_exact_where_chunk_sizes_are(seed: int, compressed: bool,
                                                                           several: bool) -> None:
    """The requests beyond one a shard, and the bytes merged between chunks, of random windows over random
    sharded layouts: never more than the model's; equal where every chunk of a shard has one size (uncompressed,
    or no chunk partly outside the array), as a gap's size is then known to the byte. Windows of one read
    (``several``) read a shard an earlier one touched by ranges, however many of its chunks (its index cached):
    was, such a shard was left uncounted (a batch's maps of one shard, read again, merged the gaps between their
    chunks: 5 MB a layout the search did not see)."""
    rng = np.random.default_rng(100 + seed)
    for _ in range(30):
        shape, chunks, per, outer, even = _random_sharded(rng, 1, 40)
        windows = []
        for _ in range(int(rng.integers(1, 6))):
            lengths = [int(rng.integers(1, n + 1)) for n in shape]
            starts = [int(rng.integers(0, n - w + 1)) for n, w in zip(shape, lengths, strict=True)]
            windows.append(tuple(slice(s, s + w) for s, w in zip(starts, lengths, strict=True)))
        enc = int(rng.choice([3, 100, 4096]))
        fraction, gap = float(rng.choice([0.25, 0.5, 1.0])), int(rng.choice([0, 1, 150, 5000]))
        windows += windows[:int(rng.integers(0, len(windows) + 1))]  # read again
        want_requests, want_bytes = _brute(shape, chunks, outer, windows, enc, compressed, fraction, gap, several)
        found = _ranged_of_one(shape, chunks, outer, per, windows, enc, compressed, fraction, gap, several)
        if found.rows.size == 0:
            continue  # more chunks than it counts: left to the lower bounds
        requests, nbytes = float(found.requests[0]), float(found.gap_bytes[0])
        assert requests <= want_requests and nbytes <= want_bytes + 1e-6, (shape, chunks, outer, windows)
        if not compressed or even:
            assert (requests, nbytes) == (want_requests, want_bytes), (shape, chunks, outer, windows)


@pytest.mark.usefixtures("bound_kernels")
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_objects", [3, 10, 1 << 30])
def test_a_batch_of_maps_counts_each_shard_it_crosses(seed: int, max_objects: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of maps (each window whole along some dimensions, one index along the others, some read again)
    crosses the same shards along its whole dimensions: the shards inside that range are counted as one, times
    their number. Each still counts as a shard of its own: its index cached once an earlier window touched it,
    and a window touching more than `tuning.MAX_WINDOW_OBJECTS` shards (here made small) costed whole, its
    shards neither found nor kept in the cache. Exact against the model where chunk sizes are known."""
    monkeypatch.setattr(ranged, "MAX_WINDOW_OBJECTS", max_objects)
    rng = np.random.default_rng(700 + seed)
    counted = 0
    for _ in range(30):
        shape, chunks, per, outer, even = _random_sharded(rng, 2, 40)
        whole = rng.uniform(size=len(shape)) < 0.6  # the dimensions each map spans
        windows = []
        for _ in range(int(rng.integers(2, 6))):
            at = [int(rng.integers(0, n)) for n in shape]
            windows.append(tuple(slice(0, n) if w else slice(a, a + 1) for n, w, a in zip(shape, whole, at,
                                                                                          strict=True)))
        windows += windows[:int(rng.integers(0, len(windows) + 1))]
        enc, compressed = int(rng.choice([3, 100, 4096])), bool(rng.integers(0, 2))
        fraction, gap = float(rng.choice([0.5, 1.0])), int(rng.choice([0, 150, 5000]))
        want_requests, want_bytes = _brute(shape, chunks, outer, windows, enc, compressed, fraction, gap, True,
                                           max_objects)
        found = _ranged_of_one(shape, chunks, outer, per, windows, enc, compressed, fraction, gap, True)
        if found.rows.size == 0:
            continue
        counted += 1
        requests, nbytes = float(found.requests[0]), float(found.gap_bytes[0])
        where = (shape, chunks, outer, windows, enc, compressed, fraction, gap)
        assert requests <= want_requests and nbytes <= want_bytes + 1e-6, where
        if not compressed or even:
            assert (requests, nbytes) == (want_requests, pytest.approx(want_bytes)), where
    assert counted >= 10


def _counts_of(kind: str, rows: np.ndarray, case: dict) -> Ranged:
    """`ranged_points` (``kind`` "points") or `ranged_runs` (of boxes, ``several`` unless "boxes") of the layouts
    ``rows`` of ``case``."""
    c = case
    layout = (c["shape"], c["chunks"][rows], c["outer"][rows], c["per_object"][rows])
    reading = (c["compressed"], c["fraction"], c["gap"], False, 4)
    if kind == "points":
        return ranged_points(*layout, np.asarray([b.start for b in c["box"]]), np.asarray([b.stop for b in c["box"]]),
                             c["dims"], c["points"], c["enc"][rows], *reading, 16.0 * c["per_object"][rows] + 4, 500)
    return ranged_runs(*layout, c["starts"], c["stops"], c["enc"][rows], *reading, several=kind != "boxes")


@pytest.mark.usefixtures("bound_kernels")
@pytest.mark.parametrize("seed", range(4))
def test_many_layouts_at_once_count_as_each_alone(seed: int) -> None:
    """The search counts many layouts of one array in one call: each layout's counts are those of a call of its
    own, whatever the others (a layout's boxes are told apart from the next layout's: which shards its boxes
    all cross alike along a dimension, `ranged._runs`, is decided layout by layout)."""
    rng = np.random.default_rng(900 + seed)
    for _ in range(25):
        shape = tuple(int(n) for n in rng.integers(6, 30, int(rng.integers(2, 4))))
        layouts = []
        for _ in range(int(rng.integers(2, 7))):
            chunks = tuple(int(rng.integers(1, max(2, n // 3) + 1)) for n in shape)
            per = tuple(int(rng.integers(1, -(-n // c) + 1)) for n, c in zip(shape, chunks, strict=True))
            layouts.append((chunks, tuple(k * c for k, c in zip(per, chunks, strict=True)), float(math.prod(per))))
        chunks, outer, per_object = (np.asarray([lay[i] for lay in layouts]) for i in range(3))
        enc = rng.choice([3.0, 100.0, 4096.0], len(layouts))
        compressed, fraction, gap = bool(rng.integers(0, 2)), float(rng.choice([0.5, 1.0])), int(rng.choice([0, 150]))
        # a batch of maps (alike along the dimensions they span) and random windows, read again
        whole = rng.uniform(size=len(shape)) < 0.5
        starts = np.asarray([[0 if w else int(rng.integers(0, n)) for n, w in zip(shape, whole, strict=True)]
                             for _ in range(3)] + [[int(rng.integers(0, n // 2)) for n in shape]])
        stops = np.asarray([[n if w else a + 1 for n, w, a in zip(shape, whole, row, strict=True)]
                            for row in starts[:3]] + [[int(rng.integers(n // 2 + 1, n + 1)) for n in shape]])
        starts, stops = np.concatenate([starts, starts[:2]]), np.concatenate([stops, stops[:2]])
        dims, points, box = _random_point_read(rng, shape)
        case = {"shape": np.asarray(shape), "chunks": chunks, "outer": outer, "per_object": per_object, "enc": enc,
                "compressed": compressed, "fraction": fraction, "gap": gap, "starts": starts, "stops": stops,
                "box": box, "dims": dims, "points": points}
        for kind in ("boxes", "boxes read together", "points"):
            together = _counts_of(kind, np.arange(len(layouts)), case)
            for i in range(len(layouts)):
                alone = _counts_of(kind, np.asarray([i]), case)
                at = np.flatnonzero(together.rows == i)
                assert at.size == alone.rows.size, (shape, layouts[i], kind)
                for field in ("requests", "gap_bytes", "by_ranges", "whole_extra", "whole_parts"):
                    np.testing.assert_allclose(getattr(together, field)[at], getattr(alone, field),
                                               rtol=1e-12, err_msg=f"{field} of {layouts[i]} in {shape}, {kind}")


@pytest.mark.usefixtures("bound_kernels")
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("compressed", [True, False])
def test_ranged_points_count_a_pointwise_reads_fetches_as_the_model_does(seed: int, compressed: bool) -> None:
    """A pointwise read (`counting._count_points`): per object, one fetch of the distinct chunks holding its
    points (along the pointed dimensions) times the box's chunks along the others; of those read by ranges, the
    requests beyond the first and the bytes between chunks, never more than the model's and equal where chunk
    sizes are known to the byte."""
    rng = np.random.default_rng(300 + seed)
    for _ in range(30):
        shape, chunks, per, outer, even = _random_sharded(rng, 2, 30)
        dims, points, box = _random_point_read(rng, shape)
        enc = int(rng.choice([3, 100, 4096]))
        fraction, gap = float(rng.choice([0.25, 0.5, 1.0])), int(rng.choice([0, 1, 150, 5000]))
        # the model's fetches: per object, the chunks it holds
        want_requests = want_bytes = 0
        held: dict[tuple[int, ...], set[tuple[int, ...]]] = {}
        for chunk in _point_chunks(chunks, dims, points, box):
            held.setdefault(tuple(i // k for i, k in zip(chunk, per, strict=True)), set()).add(chunk)
        for shard, inside in held.items():
            extents = tuple(min(o, n - i * o) for i, o, n in zip(shard, outer, shape, strict=True))
            rank, sizes = _stored_layout(per, extents, chunks, enc, compressed)
            if len(inside) >= fraction * math.prod(per):
                continue
            touched = np.asarray([rank[tuple(i - s * k for i, s, k in zip(ch, shard, per, strict=True))]
                                  for ch in inside])
            runs, nbytes = coalesced_runs(touched, sizes, gap)
            want_requests += runs - 1
            want_bytes += nbytes - int(sizes[touched].sum())
        found = ranged_points(np.asarray(shape), np.asarray([chunks]), np.asarray([outer]),
                              np.asarray([float(math.prod(per))]), np.asarray([b.start for b in box]),
                              np.asarray([b.stop for b in box]), dims, points, np.asarray([float(enc)]),
                              compressed, fraction, gap, False, 4, np.zeros(1), 1 << 30)
        if found.rows.size == 0:
            continue
        requests, nbytes = float(found.requests[0]), float(found.gap_bytes[0])
        assert requests <= want_requests and nbytes <= want_bytes + 1e-6, (shape, chunks, outer, dims, points, box)
        if not compressed or even:
            assert (requests, nbytes) == (want_requests, want_bytes), (shape, chunks, outer, dims, points, box)


@pytest.mark.usefixtures("bound_kernels")
@pytest.mark.parametrize("seed", range(8))
def test_a_pointwise_reads_requests_and_bytes_are_the_models_where_sizes_are_known(seed: int) -> None:
    """Against `count_read` itself: a pointwise read finds no index cached, so each shard it reads by ranges costs
    its index's request besides its ranges, and each other is read whole (its untouched chunks' bytes, in
    ``split_size`` parts on an object store). One request an object plus `ranged_points`' requests, index
    requests and parts: the model's requests; the chunks touched, the gaps merged, the untouched chunks of whole
    shards and an index each: its bytes. Equal where chunk sizes are known to the byte, never more.
    Was: only the gaps were counted, and a 4-D search costed 1,110 layouts where 11 could tie."""
    rng = np.random.default_rng(500 + seed)
    for _ in range(25):
        shape, chunks, per, outer, even = _random_sharded(rng, 2, 30)
        dims, points, box = _random_point_read(rng, shape)
        enc = int(rng.choice([3, 100, 4096]))
        compressed = bool(rng.integers(0, 2))
        local = bool(rng.integers(0, 2))
        reader = Reader(local=local, full_shard_fraction=float(rng.choice([0.25, 0.5, 1.0])),
                        coalesce_gap=int(rng.choice([0, 150, 5000])), split_size=int(rng.choice([500, 16 << 20])))
        layout = Layout(chunks, outer)
        index_bytes = 16 * math.prod(per) + 4
        axes = tuple(Axis(b.start, b.stop) for b in box)
        counts = count_read([PointRead(tuple(dims), points, axes)], shape, 1, layout, enc, reader,
                            compressed=compressed)
        found = ranged_points(np.asarray(shape), np.asarray([chunks]), np.asarray([outer]),
                              np.asarray([float(math.prod(per))]), np.asarray([b.start for b in box]),
                              np.asarray([b.stop for b in box]), dims, points, np.asarray([float(enc)]),
                              compressed, reader.full_shard_fraction, reader.coalesce_gap, local, 1,
                              np.asarray([float(index_bytes)]), reader.split_size)
        assert found.rows.tolist() == [0]  # counted: its chunks are few
        requests = counts.objects + found.requests[0] + found.by_ranges[0] + found.whole_parts[0]
        touched = (enc * counts.chunks if not compressed or even
                   else _touched_bytes(shape, chunks, dims, points, box, enc))
        nbytes = touched + found.gap_bytes[0] + found.whole_extra[0] + counts.objects * index_bytes
        where = (shape, chunks, outer, dims, points.tolist(), box, enc, compressed, reader)
        assert requests <= counts.requests and nbytes <= counts.bytes + 1e-6, where
        if (not compressed or even) and (not local or counts.chunks * 1 < STREAM_BYTES):
            assert requests == counts.requests, where
            if not local:  # a local read of a whole shard holds no bytes known beyond its chunks'
                assert nbytes == pytest.approx(counts.bytes, abs=1e-6), where


def _touched_bytes(shape: tuple[int, ...], chunks: tuple[int, ...], dims: list[int], points: np.ndarray,
                   box: tuple[slice, ...], enc: int) -> float:
    """The least bytes of the distinct chunks a pointwise read touches, compressed: each its fraction inside the
    array of ``enc``, less half a byte (the model rounds each)."""
    total = 0.0
    for chunk in _point_chunks(chunks, dims, points, box):
        inside = math.prod(min(c, n - i * c) / c for i, c, n in zip(chunk, chunks, shape, strict=True))
        total += max(1.0, enc * inside - 0.5)
    return total


def _random_point_read(rng: np.random.Generator,
                       shape: tuple[int, ...]) -> tuple[list[int], np.ndarray, tuple[slice, ...]]:
    """A pointwise read of up to 7 points (repeats possible) along one or more dimensions, with a box along
    the others: its dimensions, points and box (one element along the pointed dimensions)."""
    ndim = len(shape)
    dims = sorted(rng.choice(ndim, int(rng.integers(1, ndim)), replace=False).tolist())
    count = int(rng.integers(1, 8))
    points = np.stack([rng.integers(0, shape[d], count) for d in dims], axis=1)
    box = tuple(slice(0, 1) if d in dims else slice(s := int(rng.integers(0, n)), int(rng.integers(s + 1, n + 1)))
                for d, n in enumerate(shape))
    return dims, points, box


def _point_chunks(chunks: tuple[int, ...], dims: list[int], points: np.ndarray,
                  box: tuple[slice, ...]) -> Iterator[tuple[int, ...]]:
    """Each chunk a pointwise read touches, once: a distinct chunk of its points along ``dims`` with every chunk
    of its box along the others."""
    for point in {tuple(int(i) for i in p) for p in points // np.asarray(chunks)[dims]}:
        ranges = [range(b.start // c, (b.stop - 1) // c + 1) for b, c in zip(box, chunks, strict=True)]
        for j, d in enumerate(dims):
            ranges[d] = range(point[j], point[j] + 1)
        yield from itertools.product(*ranges)


def test_objects_meet_agrees_with_each_layouts_own_object_size_and_count() -> None:
    """The search drops layouts whose objects break a constraint before bounding them (`model.objects_meet`): it
    must say what `object_nbytes` and `object_count` say, layout by layout, at the limits' edges too."""
    from xarray_zarrmax.advise.candidates import candidate_layouts
    from xarray_zarrmax.advise.model import object_count, object_nbytes, objects_meet

    shape = (60, 10, 45, 90)
    layouts = list(candidate_layouts(shape, 4))[::13]
    outer = np.asarray([lay.outer for lay in layouts])
    for ratio in (0.37, 1.0):
        sizes = [object_nbytes(lay, 4, ratio) for lay in layouts]
        counts = [object_count(shape, lay) for lay in layouts]
        for limit_bytes, limit_count in [(None, None), (sizes[5], None), (None, counts[9]), (sizes[3], counts[3]),
                                         (sizes[7] - 1, counts[2] - 1)]:
            want = [(limit_bytes is None or b <= limit_bytes) and (limit_count is None or n <= limit_count)
                    for b, n in zip(sizes, counts, strict=True)]
            assert objects_meet(shape, 4, ratio, outer, limit_bytes, limit_count).tolist() == want


def test_morton_offsets_of_boxes_alike_are_each_boxs_own() -> None:
    """Boxes that repeat (a pointwise read crosses many shards at the same place) are worked out once and copied:
    each box's cells still get its own ranks, offsets and sizes, in order, wherever the repeats fall."""
    rng = np.random.default_rng(3)
    for _ in range(40):
        grid, chunks, extents = _random_shard(rng)
        stored = np.asarray([-(-e // c) for e, c in zip(extents, chunks, strict=True)])
        last = np.asarray([(e - (s - 1) * c) / c for e, s, c in zip(extents, stored, chunks, strict=True)])
        lo = (rng.uniform(size=(4, len(grid))) * stored).astype(np.int64)
        length = 1 + (rng.uniform(size=lo.shape) * (stored - lo)).astype(np.int64)
        picks = rng.integers(0, 4, 30)
        n = picks.size
        together = box_offsets(lo[picks], length[picks], np.tile(stored, (n, 1)), np.tile(grid, (n, 1)),
                               np.tile(last, (n, 1)))
        alone = [box_offsets(lo[i:i + 1], length[i:i + 1], stored[None], np.asarray([grid]), last[None])
                 for i in picks]
        for got, want in zip(together, zip(*alone, strict=True), strict=True):
            np.testing.assert_array_equal(got, np.concatenate(want))
        # and each box's ranks are those of the shard laid out whole, box by box in C order
        rank, _ = _stored_layout(grid, extents, chunks, 1000, True)
        boxes = [rank[tuple(slice(a, a + n) for a, n in zip(lo[i], length[i], strict=True))].ravel() for i in picks]
        np.testing.assert_array_equal(together[0], np.concatenate(boxes))


@pytest.mark.parametrize("seed", range(4))
def test_morton_offsets_of_boxes_of_many_grids_at_once_are_each_boxs_own(seed: int) -> None:
    """A search's call mixes shards of a few chunks with shards of thousands, and works each bit of the code only
    on the boxes whose grid holds it: each box's ranks (to the bit), sizes before and own sizes (of cells, and of
    blocks) are those of the box worked out alone, whatever the order of the grids, with one-cell boxes among
    them."""
    rng = np.random.default_rng(300 + seed)
    ndim = int(rng.integers(1, 5))
    for _ in range(30):
        lo, length, stored, grid, last = [], [], [], [], []
        for _ in range(int(rng.integers(2, 7))):
            g = rng.integers(1, 40 if ndim < 3 else 13, ndim)
            c = rng.integers(1, 6, ndim)
            extents = np.where(rng.uniform(size=ndim) < 0.5, g * c, 1 + (rng.uniform(size=ndim) * g * c).astype(int))
            s = -(-extents // c)
            for _ in range(int(rng.integers(1, 5))):
                a = (rng.uniform(size=ndim) * s).astype(np.int64)
                n = 1 + (rng.uniform(size=ndim) * (s - a)).astype(np.int64) if rng.integers(0, 3) else np.ones(ndim)
                for given, value in zip((lo, length, stored, grid, last), (a, n, s, g, (extents - (s - 1) * c) / c),
                                        strict=True):
                    given.append(value)
        lo, length, stored, grid, last = (np.asarray(v) for v in (lo, length, stored, grid, last))
        length = length.astype(np.int64)
        together = box_offsets(lo, length, stored, grid, last)
        alone = [box_offsets(lo[i:i + 1], length[i:i + 1], stored[i:i + 1], grid[i:i + 1], last[i:i + 1])
                 for i in range(lo.shape[0])]
        _same(together, [np.concatenate(want) for want in zip(*alone, strict=True)])
        width = whole_blocks(lo, length, stored, grid)
        count = -(-length // width)
        blocks = block_offsets(lo, count, stored, grid, last, width)
        one_by_one = [block_offsets(lo[i:i + 1], count[i:i + 1], stored[i:i + 1], grid[i:i + 1], last[i:i + 1],
                                    width[i:i + 1]) for i in range(lo.shape[0])]
        _same(blocks, [np.concatenate(want) for want in zip(*one_by_one, strict=True)])


def _same(got: tuple[np.ndarray, ...], want: list[np.ndarray]) -> None:
    """Ranks (and stored cells) to the bit; sums of sizes to rounding (a dimension of one cell in every grid of a
    call scales the sums after, not inside them)."""
    assert len(got) == len(want)
    for mine, theirs in zip(got, want, strict=True):
        if mine.dtype.kind == "i":
            np.testing.assert_array_equal(mine, theirs)
        else:
            np.testing.assert_allclose(mine, theirs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_morton_offsets_of_one_cell_boxes_are_bitwise_those_of_the_cells_in_a_box(seed: int) -> None:
    """Boxes of one cell each (a read of points along every dimension) take their own path, with no gather and
    no search for repeats: each cell's rank, sizes before it and own size are, to the bit, those of the same cell
    worked out inside the shard's whole stored box (the general path), in any order and with repeats."""
    rng = np.random.default_rng(100 + seed)
    for _ in range(60):
        grid, chunks, extents = _random_shard(rng)
        stored = np.asarray([-(-e // c) for e, c in zip(extents, chunks, strict=True)])
        last = np.asarray([(e - (s - 1) * c) / c for e, s, c in zip(extents, stored, chunks, strict=True)])
        whole = box_offsets(np.zeros((1, len(grid)), dtype=np.int64), stored[None], stored[None],
                            np.asarray([grid]), last[None])
        cells = (rng.uniform(size=(int(rng.integers(1, 40)), len(grid))) * stored).astype(np.int64)
        n = cells.shape[0]
        got = box_offsets(cells, np.ones_like(cells), np.tile(stored, (n, 1)), np.tile(grid, (n, 1)),
                          np.tile(last, (n, 1)))
        flat = np.ravel_multi_index(tuple(cells.T), tuple(stored))
        for mine, general in zip(got, whole, strict=True):
            want = np.broadcast_to(general, (int(stored.prod()),))[flat]
            assert mine.dtype == np.asarray(general).dtype
            assert np.array_equal(mine, want), (grid, extents, cells)


def test_boxes_in_no_shard_and_in_two_are_not_taken_for_boxes_in_one_each() -> None:
    """`ranged._runs` takes each box as its own entry only when every box lies in exactly one shard: a box of no
    chunks (in no shard) beside one crossing two shards has as many entries as boxes, and must still be split
    (a review found the shortcut taken on the count of entries alone)."""
    layouts = ranged._Layouts(np.asarray([28]), np.asarray([[3], [5]]), np.asarray([[15], [20]]), np.asarray([5, 4]),
                              np.asarray([56.67, 11.73]), True, 1.0, 10, False, 4, np.asarray([80.0, 64.0]), 2)
    found = ranged._runs(layouts, np.asarray([0, 1]), np.asarray([0, 0]), np.asarray([[5], [1]]),
                         np.asarray([[0], [5]]))
    assert found[2].tolist() == [0, 2]  # reads by ranges: none of the empty box, both shards of the other


def test_distinct_rows_are_told_apart_when_their_keys_collide() -> None:
    """Rows are keyed by a hash of their columns; two rows of one key that differ are still two sets (checked
    against each key's first row, then by their bytes)."""
    from xarray_zarrmax.advise.morton import _distinct_rows, _mix, _row_keys

    # the key of (a, b) is mix(mix(a) ^ b): (1, mix(1) ^ mix(0)) has the key of (0, 0)
    word = _mix(np.asarray([1], dtype=np.uint64)) ^ _mix(np.asarray([0], dtype=np.uint64))
    collides = int(word.view(np.int64)[0])
    table = np.asarray([[0, 0], [1, collides], [0, 0], [5, 5], [1, collides]], dtype=np.int64)
    assert _row_keys(table)[0] == _row_keys(table)[1]
    firsts, which = _distinct_rows(table)
    assert firsts.tolist() == [0, 1, 3]
    assert which.tolist() == [0, 1, 0, 2, 1]


@pytest.mark.parametrize("seed", range(4))
def test_a_boxs_whole_blocks_are_ranks_in_a_row_holding_its_cells(seed: int) -> None:
    """`morton.whole_blocks` groups a box's cells into blocks contiguous in the shard's order, and
    `block_offsets` gives each block its first cell's rank and sizes before it (to the bit, as for the cell
    alone), its stored cells (their ranks in a row) and their sizes summed: against every cell of the shard's whole
    stored box (the general path). Boxes are drawn aligned and whole along their first dimensions, as a column
    through a shard is, and at random."""
    rng = np.random.default_rng(200 + seed)
    widest = 1
    for _ in range(60):
        grid, chunks, extents = _random_shard(rng)
        ndim = len(grid)
        stored = np.asarray([-(-e // c) for e, c in zip(extents, chunks, strict=True)])
        last = np.asarray([(e - (s - 1) * c) / c for e, s, c in zip(extents, stored, chunks, strict=True)])
        cell_rank, cell_before, _ = (np.broadcast_to(a, (int(stored.prod()),)).reshape(tuple(stored)) for a in
                                     box_offsets(np.zeros((1, ndim), dtype=np.int64), stored[None], stored[None],
                                                 np.asarray([grid]), last[None]))
        # a cell's size, by hand: the product of its last stored fractions
        cell_own = np.ones(tuple(stored))
        for d in range(ndim):
            cell_own[(slice(None),) * d + (-1,)] *= last[d]
        boxes = int(rng.integers(1, 8))
        lo = (rng.uniform(size=(boxes, ndim)) * stored).astype(np.int64)
        length = 1 + (rng.uniform(size=lo.shape) * (stored - lo)).astype(np.int64)
        whole = rng.uniform(size=lo.shape) < 0.6  # whole along a dimension: its cells from 0 to the last stored
        lo, length = np.where(whole, 0, lo), np.where(whole, stored, length)
        aligned = 1 << rng.integers(0, 3, size=lo.shape)  # or aligned to 2 or 4
        lo = np.where(~whole & (lo // aligned * aligned + aligned <= stored), lo // aligned * aligned, lo)
        length = np.minimum(length, stored - lo)
        tile = np.tile
        width = whole_blocks(lo, length, tile(stored, (boxes, 1)), tile(grid, (boxes, 1)))
        widest = max(widest, int(width.max()))
        count = -(-length // width)
        rank, before, own, held = block_offsets(lo, count, tile(stored, (boxes, 1)), tile(grid, (boxes, 1)),
                                                tile(last, (boxes, 1)), width)
        at = 0
        for i in range(boxes):
            covered = 0
            for block in itertools.product(*[range(int(n)) for n in count[i]]):
                first = lo[i] + np.asarray(block) * width[i]
                cells = tuple(slice(int(a), int(min(a + w, lo_ + n)))
                              for a, w, lo_, n in zip(first, width[i], lo[i], length[i], strict=True))
                ranks = np.sort(cell_rank[cells].ravel())
                np.testing.assert_array_equal(ranks, rank[at] + np.arange(held[at]))  # in a row, from the first
                assert before[at] == cell_before[tuple(first)], (grid, extents, lo[i], length[i], width[i])
                assert own[at] == pytest.approx(float(cell_own[cells].sum()), rel=1e-12)
                covered += ranks.size
                at += 1
            assert covered == int(np.prod(length[i]))  # the blocks hold the box's cells, each once
        assert at == rank.size
    assert widest >= 4  # blocks of several cells were drawn
