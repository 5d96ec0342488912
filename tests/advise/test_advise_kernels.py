"""Issue 42, cause 3: the search's costliest bounds are compiled (`advise/_kernels.c`, built by setup.py where a C
compiler is at hand: `advise.kernels`) and must count exactly what their numpy forms count: the gaps a read leaves in
a shard (`ranged.gap_counts`, `ranged._gaps_numpy`), the shards a batch touches first (`revisits`,
`revisits._block_numpy`), a pointwise read's components and breaks (`merges`) and the cells holding its points
(`point_bounds._cells_numpy`). The numpy forms are checked against the model (tests/advise/test_advise_ranges.py,
test_advise_merges.py and test_advise_search_proof.py run under both: the `bound_kernels` fixture)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from xarray_zarrmax.advise import kernels, ranged, revisits

#: CI builds the package with a compiler: there the compiled count must exist, never be skipped
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
compiled = pytest.mark.skipif(kernels.compiled is None and not IN_CI,
                              reason="xarray_zarrmax.advise._kernels not built here (no C compiler at install)")


def test_ci_builds_the_compiled_kernels() -> None:
    """The suite in CI runs the search with the compiled kernels, as a release's wheel holds them
    (ci/release_check.sh checks the wheel)."""
    if not IN_CI:
        pytest.skip("checked in CI (CI=true), where the package is built with a C compiler")
    assert kernels.in_use() == "C"


def _random_reads(rng: np.random.Generator) -> tuple:
    """`gap_counts`' arguments for random reads: per read a shard (a random grid, its stored chunks cut at the
    array's edge, the last chunk along a dimension partly outside it) and 1-3 disjoint boxes of chunks in it (a
    batch's windows, a pointwise read's chunks), of a random layout."""
    ndim, k = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    reads = int(rng.integers(1, 7))
    read, row, lo, length, stored, grid, last = [], [], [], [], [], [], []
    pieces = np.zeros(reads)
    for r in range(reads):
        g = rng.integers(1, 12, ndim)
        s = np.asarray([int(rng.integers(1, n + 1)) if rng.integers(0, 3) == 0 else int(n) for n in g])
        partial = rng.integers(0, 3, ndim) == 0
        frac = np.where(partial, rng.choice([0.25, 0.5, 0.75], ndim), 1.0)
        taken: list[tuple[np.ndarray, np.ndarray]] = []
        layout = int(rng.integers(0, k))
        for _ in range(int(rng.integers(1, 4))):
            a = np.asarray([int(rng.integers(0, n)) for n in s])
            n = np.asarray([int(rng.integers(1, m - x + 1)) for m, x in zip(s, a, strict=True)])
            if any(np.all((a < b + m) & (b < a + n)) for b, m in taken):
                continue  # a read's boxes are disjoint
            taken.append((a, n))
            read.append(r), row.append(layout), lo.append(a), length.append(n), stored.append(s), grid.append(g)
            last.append(frac)
            pieces[r] += float(np.prod(n))
    arrays = [np.asarray(x, dtype=np.int64).reshape(len(read), -1) for x in (lo, length, stored, grid)]
    return (np.asarray(read, dtype=np.int64), np.asarray(row, dtype=np.int64), *arrays,
            np.asarray(last, dtype=np.float64).reshape(len(read), -1), pieces,
            rng.choice([1.0, 2.0, 5.0], reads), rng.choice([1.0, 7.0, 1000.0, 4096.0], k),
            rng.choice([4.0, 1e6, 1e9], k), bool(rng.integers(0, 2)), bool(rng.integers(0, 2)),
            int(rng.choice([0, 1, 150, 5000, 10**6])), float(rng.choice([1e3, 1e7])), k)


@compiled
@pytest.mark.parametrize("seed", range(8))
def test_the_compiled_gap_count_is_the_numpy_one(seed: int) -> None:
    """Random reads of random shards (grids not powers of two, chunks cut at the array's edge, boxes wide and
    one chunk long, several a read, compressed or not, local reads capped or not): the same requests, and the
    same bytes merged but for the last bits of their sums (the sizes before a block are summed in another
    order)."""
    rng = np.random.default_rng(4200 + seed)
    gaps = 0
    for _ in range(300):
        args = _random_reads(rng)
        want = ranged._gaps_numpy(*args)
        got = ranged.gap_counts(*args)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-9)
        gaps += int((want[0] > 0).sum() + (want[1] > 0).sum())
    assert gaps > 100  # the reads leave gaps, merged and not: the check is not of zeros


@compiled
def test_the_compiled_gap_count_refuses_what_it_would_read_out_of_bounds() -> None:
    """A box outside its shard's stored chunks, reads out of order, a read or layout past the arrays, an array
    of the wrong length: a ValueError naming what, never a read out of bounds."""
    args = list(_random_reads(np.random.default_rng(7)))
    ranged.gap_counts(*args)  # as made: fine

    def refused(at: int, value: object, match: str) -> None:
        bad = list(args)
        bad[at] = value
        with pytest.raises(ValueError, match=match):
            ranged.gap_counts(*bad)

    n = args[0].size
    refused(2, args[2] + args[4], "outside its shard")  # lo past the stored chunks
    refused(3, args[3] + 100, "outside its shard")  # too long
    refused(1, args[1] + 99, "out of range")  # a layout past k
    refused(0, args[0] + 50, "out of range")  # a read past pieces
    if n > 1 and args[0][0] != args[0][-1]:
        refused(0, args[0][::-1].copy(), "not ascending")
    refused(8, args[8][:-1] if args[8].size > 1 else np.zeros(3), "read_weight holds")


def _random_batch(rng: np.random.Generator) -> tuple:
    """`revisits`' arguments for a random batch over random sharded layouts: windows of every shape (one element
    long, whole, across shard edges), some read again, shards cut at the array's edge, a local or remote store."""
    ndim, k = int(rng.integers(1, 5)), int(rng.integers(1, 9))
    shape = rng.integers(3, 40, ndim)
    chunks = np.stack([rng.integers(1, n + 1, k) for n in shape], axis=1)
    per = np.stack([rng.integers(1, 6, k) for _ in shape], axis=1)
    windows = int(rng.integers(1, 9))
    lengths = np.stack([rng.integers(1, n + 1, windows) for n in shape], axis=1)
    starts = np.stack([rng.integers(0, n - lengths[:, d] + 1) for d, n in enumerate(shape)], axis=1)
    again = rng.integers(0, windows, int(rng.integers(0, windows + 1)))
    stops = starts + lengths
    starts, stops = np.concatenate([starts, starts[again]]), np.concatenate([stops, stops[again]])
    enc = rng.choice([1.0, 3.0, 100.0, 4096.0], k)
    split = None if rng.integers(0, 2) else int(rng.choice([1, 50, 1000]))
    return (shape, chunks, per * chunks, np.prod(per, axis=1).astype(np.float64), starts, stops,
            float(rng.choice([0.25, 0.5, 1.0])), enc, bool(rng.integers(0, 2)), 16.0 * np.prod(per, axis=1) + 4,
            split, bool(rng.integers(0, 2)))


@compiled
@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_first_touches_are_the_numpy_ones(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random batches over random sharded layouts: the same selections waiting for an index, shards and indexes
    counted, whole shards' untouched bytes and parts (to the bit: summed in one order) and splits."""
    rng = np.random.default_rng(4300 + seed)
    seen = 0
    for _ in range(150):
        args = _random_batch(rng)
        got = revisits.revisits(*args)
        with monkeypatch.context() as m:
            m.setattr(kernels, "compiled", None)
            want = revisits.revisits(*args)
        for field in ("rows", "waits", "first", "ranged_first", "whole_extra", "parts", "splits"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=field)
        seen += int(want.waits.sum() + (want.whole_extra > 0).sum() + (want.parts > 0).sum())
    assert seen > 100  # indexes waited for, shards read whole and in parts: the check is not of zeros


@compiled
def test_the_compiled_first_touches_refuse_arrays_of_the_wrong_size() -> None:
    """An array that does not hold a number per layout (or window) as the counts say: a ValueError naming it."""
    shape, chunks, outer = np.asarray([8]), np.asarray([[2]]), np.asarray([[4]])
    lo, hi, starts, stops = np.zeros((1, 1, 1)), np.ones((1, 1, 1)), np.asarray([[0]]), np.asarray([[8]])
    out = (np.zeros((1, 1), dtype=bool), np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(1),
           np.zeros(1), np.zeros((1, 1), dtype=bool))
    assert kernels.compiled is not None
    kernels.compiled.first_touches(1, 1, 1, shape, chunks, outer, np.asarray([2.0]), lo.astype(np.int64),
                                   hi.astype(np.int64), starts, stops, np.asarray([[2]]), np.asarray([5.0]),
                                   np.asarray([36.0]), 1.0, True, -1, *out)
    assert out[1][0] == 2  # the window's two shards, each touched first
    with pytest.raises(ValueError, match="first_touches: span holds 16 bytes, expected 8"):
        kernels.compiled.first_touches(1, 1, 1, shape, chunks, outer, np.asarray([2.0]), lo.astype(np.int64),
                                       hi.astype(np.int64), starts, stops, np.asarray([[2, 2]]), np.asarray([5.0]),
                                       np.asarray([36.0]), 1.0, True, -1, *out)


def test_the_report_says_when_the_search_ran_its_numpy_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """A package installed without a C compiler searches with the numpy forms: the same advice, and the report says
    why it took longer. With the compiled kernels it says nothing of them."""
    import xarray as xr

    from xarray_zarrmax.advise import advise
    from xarray_zarrmax.advise.model import Costs

    ds = xr.Dataset({"v": (("time", "lat", "lon"), np.zeros((48, 37, 72), dtype="f4"))})
    mix, costs = {"timeseries": 0.5, "random-batch": 0.5}, Costs(ratio=0.5, request_s=2e-4, chunk_s=2e-5)
    with monkeypatch.context() as m:
        m.setattr(kernels, "compiled", None)
        slow = advise(ds, mix, costs=costs, progress=False)
    assert slow.search is not None and slow.search.kernels == "numpy"
    assert "search: ran its bounds' numpy kernels (xarray_zarrmax was installed without a C compiler" in str(slow)
    if kernels.compiled is not None:
        fast = advise(ds, mix, costs=costs, progress=False)
        assert fast.search is not None and fast.search.kernels == "C" and "numpy kernels" not in str(fast)
        assert fast.best.layout == slow.best.layout and fast.best.score == slow.best.score


@compiled
def test_the_compiled_kernels_refuse_counts_that_would_overflow() -> None:
    """Inputs past any layout the search lists (a review's reproducers): a shard of 2^60 chunks along a dimension, a
    read of 2^33 blocks (2^64 + 1 wrapped to 1 block and wrote past its buffer), a shard of 2^54 chunks in all, a
    batch's span whose product wrapped, a read naming two layouts: a ValueError, never memory written out of bounds
    nor a count charged to another layout."""
    def one_box(lo: list[int], length: list[int], stored: list[int]) -> tuple:
        ints = [np.asarray([x], dtype=np.int64) for x in (lo, length, stored, stored)]
        return (np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64), *ints, np.ones((1, len(lo))),
                np.asarray([2.0]), np.ones(1), np.asarray([1000.0]), np.asarray([1e6]), True, False, 150, 1e7, 1)

    with pytest.raises(ValueError, match="more than 2\\^40 chunks along a dimension"):
        ranged.gap_counts(*one_box([1], [2**60 + 1], [2**60 + 2]))
    with pytest.raises(ValueError, match="more than 2\\^32 blocks"):
        ranged.gap_counts(*one_box([1], [2**33], [2**33 + 1]))
    two = list(one_box([0], [1], [4]))
    two[:7] = [np.asarray([0, 0]), np.asarray([0, 1]), np.asarray([[0], [2]]), np.asarray([[1], [1]]),
               np.asarray([[4], [4]]), np.asarray([[4], [4]]), np.ones((2, 1))]
    two[9], two[10], two[-1] = np.asarray([1000.0, 1000.0]), np.asarray([1e6, 1e6]), 2
    with pytest.raises(ValueError, match="more than 2\\^52 chunks"):  # ranks past a double's exact integers
        ranged.gap_counts(*one_box([1, 1], [2, 2], [2**27, 2**27]))
    with pytest.raises(ValueError, match="a read's boxes of more than one layout"):
        ranged.gap_counts(*two)
    i = lambda *v: np.asarray(v, dtype=np.int64)  # noqa: E731
    with pytest.raises(ValueError, match="a grid of shards past 2\\^40, or a span past it"):
        revisits._block(i(2**62, 2**62), i(1, 1)[None], i(1, 1)[None], np.ones(1), i(0, 0)[None, None],
                        i(2**62, 2**62)[None, None], i(0, 0)[None], i(2**62, 2**62)[None],
                        i(274177, 67280421310721)[None], 1, 0.5, np.ones(1), True, np.ones(1), None)


@compiled
@pytest.mark.parametrize("split_size", [-7, 0, 2**63, 2**70])
def test_the_compiled_first_touches_take_any_split_size_as_the_numpy_ones(split_size: int,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A split size below 1 is 1 to both forms, and one past int64 is past every shard's bytes (a review found the
    compiled form read a negative one as none, and refused one past int64)."""
    args = list(_random_batch(np.random.default_rng(11)))
    args[10] = split_size
    got = revisits.revisits(*args)
    monkeypatch.setattr(kernels, "compiled", None)
    want = revisits.revisits(*args)
    for field in ("parts", "splits", "whole_extra"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=field)


def _random_point_components(rng: np.random.Generator) -> tuple:
    """`merges.point_components`' arguments: random chunk lengths along 1-4 dimensions, points (repeats and the
    array's partial last chunks among them), gaps in whole chunks and bytes, whole-shard sizes, and reads across
    other dimensions or not."""
    m, rows, count = int(rng.integers(1, 5)), int(rng.integers(1, 40)), int(rng.integers(1, 30))
    extent = rng.integers(1, 200, m)
    lengths = np.stack([rng.integers(1, n + 1, rows) for n in extent], axis=1)
    points = np.stack([rng.integers(0, n, count) for n in extent], axis=1)
    points[: count // 4] = points[count // 4: 2 * (count // 4)]  # points in one chunk
    return (lengths, points, extent, rng.choice([0, 1, 3, 50, 1 << 62], rows), int(rng.choice([0, 5, 1000])),
            rng.integers(0, 2, rows).astype(bool), rng.choice([0.0, 2.0, 30.0, np.inf], rows),
            rng.integers(0, 2, rows).astype(bool), bool(rng.integers(0, 2)))


@compiled
@pytest.mark.parametrize("seed", range(4))
def test_the_compiled_components_are_the_numpy_ones(seed: int) -> None:
    """Random reads and chunk shapes: the same components, merged and joined, and both seen between none and
    every chunk apart (the check is not of ones)."""
    from xarray_zarrmax.advise import merges

    rng = np.random.default_rng(5100 + seed)
    kinds = set()
    for _ in range(60):
        args = _random_point_components(rng)
        got = merges.point_components(*args)
        want = merges._components_numpy(args[0], args[1], args[2], np.minimum(args[3], 1 << 62), *args[4:])
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        kinds |= {int(np.sign(w - 1)) for w in want[0]} | {int(np.sign(w - 1)) for w in want[1]}
    assert kinds == {0, 1}


@compiled
@pytest.mark.parametrize("seed", range(4))
def test_the_compiled_breaks_are_the_numpy_ones(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random sharded layouts and points along every dimension (repeats, edge shards, compressed or not, ranked or
    not): the same shards, shards read by ranges and breaks between runs, some of each."""
    from xarray_zarrmax.advise import merges

    rng = np.random.default_rng(5200 + seed)
    seen = np.zeros(4)
    for _ in range(40):
        ndim, k, count = int(rng.integers(1, 5)), int(rng.integers(1, 30)), int(rng.integers(1, 40))
        shape = rng.integers(2, (400, 60, 20, 12)[ndim - 1], ndim)
        chunks = np.stack([rng.integers(1, max(2, n // 2) + 1, k) for n in shape], axis=1)
        grid = -(-shape[None] // chunks)
        per = np.where(rng.integers(0, 3, (k, ndim)) == 0, grid, 1 + (rng.random((k, ndim)) * grid).astype(np.int64))
        points = np.stack([rng.integers(0, n, count) for n in shape], axis=1)
        args = (chunks, per, shape, points, rng.choice([1.0, 7.0, 100.0, 4096.0], k), int(rng.choice([0, 150, 5000])),
                float(rng.choice([0.25, 0.5, 1.0])), bool(rng.integers(0, 2)), bool(rng.integers(0, 2)))
        got = merges.point_breaks(*args)
        with monkeypatch.context() as patch:
            patch.setattr(kernels, "compiled", None)
            want = merges.point_breaks(*args)
        for g, w, name in zip(got, want, ("shards", "ranged", "breaks", "merged"), strict=True):
            np.testing.assert_array_equal(g, w, err_msg=name)
        seen += [(w > 1).sum() for w in want]
    assert (seen > 20).all(), seen


@compiled
def test_the_compiled_merge_bounds_refuse_arrays_of_the_wrong_size_and_empty_lengths() -> None:
    """An array not of the size the counts say, or a chunk of no length: a ValueError naming it."""
    assert kernels.compiled is not None
    one, out = np.ones(1, dtype=np.int64), (np.zeros(1), np.zeros(1))
    with pytest.raises(ValueError, match="point_components: points holds 8 bytes, expected 16"):
        kernels.compiled.point_components(1, 1, 2, one, one, one, one, 0, one, np.ones(1), one, True, *out)
    with pytest.raises(ValueError, match="point_components: row 0: lengths and extents must be positive"):
        kernels.compiled.point_components(1, 1, 1, one * 0, one, one, one, 0, one, np.ones(1), one, True, *out)
    with pytest.raises(ValueError, match="point_breaks: chunk_enc holds 16 bytes, expected 8"):
        kernels.compiled.point_breaks(1, 1, 1, one, one, one, one, np.ones(2), 0, 0.5, True, False, *out, np.zeros(1),
                                      np.zeros(1))
    with pytest.raises(ValueError, match="point_breaks: layout 0: chunks, shards and shape must be positive"):
        kernels.compiled.point_breaks(1, 1, 1, one, one * 0, one, one, np.ones(1), 0, 0.5, True, True, *out,
                                      np.zeros(1), np.zeros(1))


@compiled
@pytest.mark.parametrize("seed", range(4))
def test_the_compiled_cell_counts_are_the_numpy_ones(seed: int) -> None:
    """Random cell lengths and points along 1 to 5 dimensions (repeated points, cells cut at the array's end, up to
    300 points: both sorts): the same distinct cells and fewest points a cell holds, and their fractions inside the
    array to the last bits of their sum."""
    from xarray_zarrmax.advise import point_bounds

    rng = np.random.default_rng(4200 + seed)
    seen = np.zeros(3)
    for _ in range(40):
        m, rows = int(rng.integers(1, 6)), int(rng.integers(1, 30))
        count = int(rng.choice([1, 2, int(rng.integers(3, 33)), int(rng.integers(33, 300))]))
        n = rng.integers(1, (5000, 300, 60, 20, 9)[m - 1], m)
        lengths = np.stack([rng.integers(1, max(1, d // 2) + 2, rows) for d in n], axis=1)
        points = np.stack([rng.integers(0, d, count) for d in n], axis=1)
        if count > 1 and rng.random() < 0.5:
            points[count // 2:] = points[:count - count // 2]  # repeats: cells holding several points
        want = point_bounds._cells_numpy(lengths, n, points)
        got = np.zeros((3, rows))
        kernels.compiled.count_cells(rows, m, count, kernels.ints(lengths), kernels.ints(points), kernels.ints(n),
                                     got[0], got[1], got[2])
        np.testing.assert_array_equal(got[0], want[0], err_msg="cells")
        np.testing.assert_array_equal(got[2], want[2], err_msg="least")
        np.testing.assert_allclose(got[1], want[1], rtol=1e-13, atol=0, err_msg="fraction")
        seen += [(want[0] > 1).sum(), (want[2] > 1).sum(), (want[1] % 1 != 0).sum()]
    assert (seen > 20).all(), seen  # several cells, cells of several points, cells cut at the end: each seen
    # an array whose C-order codes would pass 2^62: the numpy form counts a row at a time, the compiled one alike
    n = np.full(3, 1 << 21)
    lengths = np.asarray([[1, 1, 1], [1 << 20, 3, 7], [1 << 21, 1 << 21, 1 << 21], [5, 1 << 21, 999]])
    points = np.stack([rng.integers(0, 1 << 21, 50) for _ in range(3)], axis=1)
    points[25:] = points[:25]
    want = point_bounds._cells_numpy(lengths, n, points)
    got = np.zeros((3, 4))
    kernels.compiled.count_cells(4, 3, 50, kernels.ints(lengths), kernels.ints(points), kernels.ints(n), *got)
    np.testing.assert_array_equal(got[[0, 2]], want[[0, 2]])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-13, atol=0)
    # 10^5 cells each a third inside the array (a review's reproducer): a running sum drifted 1.3e-12 from the exact
    # 33333.33...; the kept one stays as close as numpy's pairwise sum
    count = 100_000
    n, lengths = np.asarray([count, 1]), np.asarray([[1, 3]])
    points = np.stack([np.arange(count), np.zeros(count, dtype=np.int64)], axis=1)
    got = np.zeros((3, 1))
    kernels.compiled.count_cells(1, 2, count, kernels.ints(lengths), kernels.ints(points), kernels.ints(n), *got)
    np.testing.assert_allclose(got[1], point_bounds._cells_numpy(lengths, n, points)[1], rtol=1e-14, atol=0)
    np.testing.assert_allclose(got[1], count / 3, rtol=1e-14, atol=0)


@compiled
def test_the_compiled_cell_counts_refuse_points_outside_and_empty_lengths() -> None:
    """A point outside the array (the numpy form would floor a negative one, C would truncate it), a cell of no
    length, or an array of the wrong size: a ValueError naming it."""
    assert kernels.compiled is not None
    one, out = np.ones(1, dtype=np.int64), (np.zeros(1), np.zeros(1), np.zeros(1))
    with pytest.raises(ValueError, match="count_cells: point 0 lies outside the array along dimension 0"):
        kernels.compiled.count_cells(1, 1, 1, one, one * -1, one * 5, *out)
    with pytest.raises(ValueError, match="count_cells: point 0 lies outside the array along dimension 0"):
        kernels.compiled.count_cells(1, 1, 1, one, one * 5, one * 5, *out)
    with pytest.raises(ValueError, match="count_cells: row 0: lengths must be positive"):
        kernels.compiled.count_cells(1, 1, 1, one * 0, one, one * 5, *out)
    with pytest.raises(ValueError, match="count_cells: lengths holds 8 bytes, expected 16"):
        kernels.compiled.count_cells(1, 2, 1, one, np.ones(2, dtype=np.int64), np.ones(2, dtype=np.int64) * 5, *out)
    # counts whose products with the dimensions would wrap (2^62 x 4 is 0 in 64 bits: a review's reproducer wrote
    # past a buffer of none): refused before any buffer is sized from them
    empty = np.zeros(0, dtype=np.int64)
    with pytest.raises(ValueError, match="count_cells: 1 rows, 4 dimensions and 4611686018427387904 points"):
        kernels.compiled.count_cells(1, 4, 2**62, one.repeat(4), empty, one.repeat(4), *out)
    with pytest.raises(ValueError, match="point_components: 4 dimensions and 4611686018427387904 points"):
        kernels.compiled.point_components(1, 4, 2**62, one.repeat(4), empty, one.repeat(4), one, 0, one, np.ones(1),
                                          one, True, np.zeros(1), np.zeros(1))
    with pytest.raises(ValueError, match="point_breaks: 4 dimensions and 4611686018427387904 points"):
        kernels.compiled.point_breaks(1, 4, 2**62, one.repeat(4), one.repeat(4), one.repeat(4), empty, np.ones(1), 0,
                                      0.5, True, True, np.zeros(1), np.zeros(1), np.zeros(1), np.zeros(1))


@compiled
@pytest.mark.parametrize("seed", range(12))
def test_the_compiled_listed_bounds_are_the_numpy_ones(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The `LISTED` bound of every sharding of every chunk shape of a random case (the proof's: several patterns of
    every kind, points, batches with repeated windows, both readers, costs with and without spread): the same rows
    as `listed.listed_numpy`, within rounding (numpy's log and exp may differ from the C library's in the last
    bit), some raised above the floor (the check is not of the floor alone)."""
    from xarray_zarrmax.advise.bounds import QUICK, SearchBounds
    from xarray_zarrmax.advise.candidates import chunk_grid, shardings
    from xarray_zarrmax.advise.patterns import pattern_selections, weight

    from .test_advise_search_proof import _case

    shape, dims, patterns, costs, reader = _case(9100 + seed)
    selections = {n: pattern_selections(n, spec, dims, shape) for n, spec in patterns.items()}
    bounds = SearchBounds(selections, {n: weight(s) for n, s in patterns.items()}, shape, 4, costs, reader)
    grid = np.asarray(chunk_grid(shape, 4), dtype=np.int64)
    whole = np.broadcast_to(np.asarray(shape, dtype=np.int64), grid.shape)
    floor = bounds.terms(grid, whole, np.ones(len(grid), dtype=bool), np.ones(len(grid)), QUICK)
    owner, _, which = shardings(grid, shape)
    got = bounds.sharded_floor(floor, grid, owner, which)
    with monkeypatch.context() as patch:
        patch.setattr(kernels, "compiled", None)
        want = bounds.sharded_floor(floor, grid, owner, which)
    assert owner.size > 10
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    assert (want > floor[owner] * (1 + 1e-9)).any()


@compiled
def test_the_compiled_listed_bounds_refuse_tables_that_do_not_fit() -> None:
    """A layout of a chunk shape or option past the tables, a read of a pattern that is not there, or an array of
    the wrong size: a ValueError naming it, nothing read out of bounds."""
    assert kernels.compiled is not None
    f, i = np.zeros, lambda n: np.zeros(n, dtype=np.int64)

    def call(owner: np.ndarray | None = None, which: np.ndarray | None = None, read_pattern: np.ndarray | None = None,
             rows: np.ndarray | None = None) -> None:
        assert kernels.compiled is not None
        owner, which = i(1) if owner is None else owner, i(2) if which is None else which
        read_pattern, rows = i(1) if read_pattern is None else read_pattern, f(11) if rows is None else rows
        kernels.compiled.listed_floor(1, 1, 2, 1, 1, owner, which, np.ones(8, dtype=np.int64), f(11), np.ones(1),
                                      np.ones(1, dtype=np.int64), i(1), f(8), np.ones(8), read_pattern, i(1),
                                      np.ones(1), np.ones(8), f(1), f(1), f(1), np.ones(8), rows)

    call()
    with pytest.raises(ValueError, match="layout 0 is of chunk shape 1, expected 0-0"):
        call(owner=np.ones(1, dtype=np.int64))
    with pytest.raises(ValueError, match="option along dimension 1 is 4, expected 0-3"):
        call(which=np.asarray([0, 4], dtype=np.int64))
    with pytest.raises(ValueError, match="pointwise read 0 is of pattern 1, expected 0-0"):
        call(read_pattern=np.ones(1, dtype=np.int64))
    with pytest.raises(ValueError, match="listed_floor: rows holds 80 bytes, expected 88"):
        call(rows=f(10))


@compiled
@pytest.mark.parametrize("seed", range(4))
def test_the_compiled_tie_test_is_the_numpy_one(seed: int) -> None:
    """Rows of term bounds about the fastest's (equal terms, terms of zero, an infinite factor): the same least
    difference to the bit, +inf where a row is not near, rows on both sides of a tie, and no NaN (an equal term at an
    infinite factor adds nothing)."""
    from xarray_zarrmax.advise import search

    rng = np.random.default_rng(5400 + seed)
    n = 3000
    own = np.abs(rng.normal(size=11)) * rng.choice([0.0, 1.0], 11, p=[0.2, 0.8])
    rows = own[None] * rng.choice([0.0, 0.9, 1.0, 1.0, 1.1, 3.0], (n, 11))
    low, high = rng.uniform(0.5, 1.0, 11), rng.uniform(1.0, 3.0, 11)
    if seed == 3:
        high[int(rng.integers(0, 6))] = np.inf
    speedups = rng.uniform(0.7, 1.3, int(rng.integers(1, 3)))
    corners = np.asarray([(f, s) for f in rng.uniform(0.8, 1.2, 2) for s in speedups])
    columns = (6, 7, 8, 9, 10)
    near = rng.random(n) < 0.8
    want = np.full(n, np.inf)
    want[near] = search._tie_least_numpy(rows[near], own, low, high, corners, *columns)
    assert kernels.compiled is not None
    got = np.empty(n)
    kernels.compiled.tie_least(n, len(corners), *columns, rows, near, own, low, high, corners, got)
    np.testing.assert_array_equal(got, want)
    tol = 1e-12 * own.sum()
    assert (want[near] <= tol).any() and (want[near] > tol).any()
    assert not np.isnan(want).any()


@compiled
def test_the_compiled_tie_test_refuses_arrays_of_the_wrong_size() -> None:
    assert kernels.compiled is not None
    z = np.zeros

    def call(rows: np.ndarray | None = None, near: np.ndarray | None = None, column: int = 6) -> None:
        assert kernels.compiled is not None
        rows, near = z(22) if rows is None else rows, np.ones(2, dtype=bool) if near is None else near
        kernels.compiled.tie_least(2, 1, column, 7, 8, 9, 10, rows, near, z(11), z(11), z(11), z(2), z(2))

    call()
    with pytest.raises(ValueError, match="tie_least: rows holds 168 bytes, expected 176"):
        call(rows=z(21))
    with pytest.raises(ValueError, match="tie_least: near holds 3 bytes, expected 2"):
        call(near=np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match="tie_least: column 11, expected 0-10"):
        call(column=11)


@compiled
@pytest.mark.parametrize("ndim", range(1, 6))
def test_the_compiled_shardings_are_the_numpy_ones(ndim: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random arrays and chunk shapes (chunks along a dimension of 1, 2, 8 and others, shards capped by
    MAX_SHARD_CHUNKS): the same layouts in the same order, some of every option."""
    from xarray_zarrmax.advise import candidates

    rng = np.random.default_rng(5500 + ndim)
    monkeypatch.setattr(candidates, "MAX_SHARD_CHUNKS", int(rng.choice([64, 1 << 20])))
    shape = rng.integers(1, 400, ndim)
    lengths = [np.unique(np.concatenate([[1, n], -(-n // np.asarray([1, 2, 8])), rng.integers(1, n + 1, 4)]))
               for n in shape]
    chunks = np.stack([rng.choice(options, 300) for options in lengths], axis=1)
    got = candidates.shardings(chunks, shape.tolist())
    want = candidates._shardings_numpy(chunks, shape.tolist())
    for g, w, name in zip(got, want, ("owner", "ks", "which"), strict=True):
        np.testing.assert_array_equal(g, w, err_msg=name)
    # every option (1 along one dimension only where another shards: a shard holds more than one chunk)
    assert set(np.unique(want[2]).tolist()) == ({1, 2, 3} if ndim == 1 else {0, 1, 2, 3}) and want[0].size > 100


@compiled
def test_the_compiled_shardings_refuse_what_does_not_fit() -> None:
    assert kernels.compiled is not None
    out = [np.empty(4, dtype=np.int64), np.empty((4, 1), dtype=np.int64), np.empty((4, 1), dtype=np.int64)]
    assert kernels.compiled.list_shardings(1, 1, np.asarray([20], dtype=np.int64), 1e6, *out) == 3  # 2, 8 and 20
    with pytest.raises(ValueError, match="more layouts than the 2 the outputs hold"):
        kernels.compiled.list_shardings(1, 1, np.asarray([20], dtype=np.int64), 1e6, *(a[:2] for a in out))
    with pytest.raises(ValueError, match="holds 0 chunks along dimension 0, expected 1 or more"):
        kernels.compiled.list_shardings(1, 1, np.asarray([0], dtype=np.int64), 1e6, *out)


@compiled
def test_the_compiled_breaks_of_one_chunk_shape_in_a_row_are_the_numpy_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Layouts of one chunk shape in a row (the kernel reuses the points' chunks of the one before), with a layout
    past the codes' room between two shapes (no bound, and nothing worked out for it; given to the kernel itself,
    which `merges.point_breaks` never does): the same counts as numpy."""
    from xarray_zarrmax.advise import merges

    rng = np.random.default_rng(5600)
    shape = np.asarray([64, 16, 16])
    points = np.stack([rng.integers(0, n, 25) for n in shape], axis=1)
    a, b = [2, 2, 2], [4, 1, 2]
    chunks = np.asarray([a, a, a, b, b, a, b, b], dtype=np.int64)
    per = np.asarray([[8, 8, 8], [32, 8, 8], [2, 8, 8], [1 << 40, 1 << 30, 1], [16, 16, 8], [32, 2, 8], [8, 16, 8],
                      [16, 8, 8]])
    enc = np.full(len(chunks), 30.0)
    with monkeypatch.context() as patch:
        patch.setattr(kernels, "compiled", None)
        want = merges.point_breaks(chunks, per, shape, points, enc, 200, 0.5, True, False)
    assert kernels.compiled is not None
    got = np.zeros((4, len(chunks)))
    kernels.compiled.point_breaks(len(chunks), 3, len(points), chunks, per, shape, points, enc, 200, 0.5, True, False,
                                  got[0], got[1], got[2], got[3])
    for g, w, name in zip(got, want, ("shards", "ranged", "breaks", "merged"), strict=True):
        np.testing.assert_array_equal(g, w, err_msg=name)
    assert want[0][3] == 0 and (want[0] > 1).sum() >= 4 and (want[2] > 0).sum() >= 4, want


_EDGES = {
    # a grid of 2^62 - 1 shards, whose float product rounds up to 2^62 (an adversarial review's case): both forms work
    # it out, as the kernel's exact product says it fits, where numpy's float test had left it unbounded
    "2^62 - 1 shards": ((np.asarray([[1, 1]]), np.asarray([[2, 2]]), np.asarray([2 * (2**31 + 1), 2 * (2**31 - 1)]),
                         np.asarray([[0, 0], [1, 1], [0, 1], [5, 5]]), np.asarray([10.0]), 0, 1.0, True, False),
                        [[2.0], [2.0], [1.0], [0.0]]),
    # an array 2^63 - 1 long (another review's case): the kernel's grids of chunks and shards worked out without a sum
    # that wraps (it had counted no break and -4 bytes merged where numpy counts 3 and 7)
    "2^63 - 1 long": ((np.asarray([[3]]), np.asarray([[1 << 62]]), np.asarray([(1 << 63) - 1]),
                       np.asarray([[5], [9], [1000], [(1 << 63) - 2], [(1 << 63) - 10]]), np.asarray([7.0]), 10, 0.5,
                       True, True),
                      [[1.0], [1.0], [3.0], [7.0]]),
}


@compiled
@pytest.mark.parametrize("edge", list(_EDGES))
def test_the_breaks_at_the_edge_of_int64s_room_are_the_same_compiled_or_not(edge: str,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrays and grids at the edge of int64's room: the same breaks compiled or not, and the ones worked out by
    hand."""
    from xarray_zarrmax.advise import merges

    args, expected = _EDGES[edge]
    got = merges.point_breaks(*args)
    with monkeypatch.context() as patch:
        patch.setattr(kernels, "compiled", None)
        want = merges.point_breaks(*args)
    assert [g.tolist() for g in got] == [w.tolist() for w in want] == expected


@compiled
def test_the_kernels_split_over_threads_give_the_rows_of_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """`kernels.across_threads` with three threads and parts of a row or more (the kernels run without the GIL): a
    search of scattered points on a 4-D array on an object store calls the breaks' and the listing's kernels in more
    parts than calls, and ranks the same layouts with the same scores and ties as in one thread."""
    import math

    from xarray_zarrmax.advise import Costs, Points, Reader, rank

    assert kernels.compiled is not None
    shape, dims = (20, 6, 15, 18), ("time", "lev", "lat", "lon")
    rng = np.random.default_rng(42)
    cells = np.unravel_index(rng.choice(math.prod(shape), size=12, replace=False), shape)
    mix = {"points": (1.0, Points(dict(zip(dims, (c.tolist() for c in cells), strict=True))))}
    costs = Costs(latency_s=0.02, request_bps=8e7, request_s=8e-4, connect_s=3e-4, ratio=0.4, local=False,
                  spread=(("latency_s", 0.006, 0.06), ("request_s", 3e-4, 2e-3), ("request_bps", 2e7, 3e8)))
    calls: dict[str, int] = {}
    for name in ("point_breaks", "listed_floor"):
        kernel = getattr(kernels.compiled, name)

        def counted(*args, _kernel=kernel, _name=name):  # type: ignore[no-untyped-def]
            calls[_name] = calls.get(_name, 0) + 1
            return _kernel(*args)

        monkeypatch.setattr(kernels.compiled, name, counted)
    runs = []
    for threads, rows in ((1, 2048), (3, 1)):
        monkeypatch.setattr(kernels, "THREADS", threads)
        monkeypatch.setattr(kernels, "ROWS_A_THREAD", rows)
        calls.clear()
        found = rank(shape, dims, 4, mix, costs=costs, reader=Reader(local=False))
        runs.append((dict(calls), [(str(c.layout), c.score, c.tied) for c in found]))
    (one_calls, one), (split_calls, split) = runs
    assert split == one and sum(tied for _, _, tied in one) > 100
    for name in ("point_breaks", "listed_floor"):
        assert split_calls[name] > one_calls[name], (name, one_calls, split_calls)
    # and each kernel's own rows, split or not: the breaks of random layouts, the listed bounds of every sharding of
    # some chunk shapes
    from xarray_zarrmax.advise import merges, pattern_selections
    from xarray_zarrmax.advise.bounds import QUICK, SearchBounds
    from xarray_zarrmax.advise.candidates import shardings
    from xarray_zarrmax.advise.patterns import parse_patterns, weight

    k = 50
    chunks = np.stack([rng.integers(1, n + 1, k) for n in shape], axis=1)
    per = 1 + (rng.random((k, 4)) * -(-np.asarray(shape)[None] // chunks)).astype(np.int64)
    points = np.stack([rng.integers(0, n, 30) for n in shape], axis=1)
    args = (chunks, per, np.asarray(shape), points, rng.choice([7.0, 4096.0], k), 5000, 0.5, True, True)
    patterns = parse_patterns(mix)
    bounds = SearchBounds({n: pattern_selections(n, spec, dims, shape) for n, spec in patterns.items()},
                          {n: weight(spec) for n, spec in patterns.items()}, shape, 4, costs, Reader(local=False))
    grid = chunks[:8]
    whole = np.broadcast_to(np.asarray(shape), grid.shape)
    floor = bounds.terms(grid, whole, np.ones(len(grid), dtype=bool), np.ones(len(grid)), QUICK)
    at, _, which = shardings(grid, shape)
    rows = []
    for threads, least in ((1, 2048), (3, 1)):
        monkeypatch.setattr(kernels, "THREADS", threads)
        monkeypatch.setattr(kernels, "ROWS_A_THREAD", least)
        rows.append((np.stack(merges.point_breaks(*args)), bounds.sharded_floor(floor, grid, at, which)))
    assert len(at) > 10
    for one_rows, split_rows in zip(*rows, strict=True):
        np.testing.assert_array_equal(split_rows, one_rows)


@compiled
def test_the_breaks_of_profiles_in_the_pools_threads_are_those_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Profiles through several chunks of time and level: their breaks for many chunk shapes at once, a call per
    chunk lengths along time and level given to the pool's threads together (`kernels.in_threads`), are those worked
    out one call after another."""
    from xarray_zarrmax.advise import Costs, Reader, point_bounds
    from xarray_zarrmax.advise.point_bounds import PointBounds

    monkeypatch.setattr(point_bounds, "ROWS_A_CALL", 1)  # (random chunk shapes: a few layouts a chunk length)
    rng = np.random.default_rng(43)
    shape = np.asarray([40, 10, 30, 36])
    k = 200
    chunks = np.stack([rng.integers(1, n // 2 + 1, k) for n in shape], axis=1)
    per = 1 + (rng.random((k, 4)) * -(-shape[None] // chunks)).astype(np.int64)
    points = np.stack([rng.integers(0, n, 20) for n in shape[2:]], axis=1)
    start, stop = np.asarray([0, 0, 0, 0]), np.asarray([40, 10, 1, 1])
    bounds = PointBounds(shape.tolist(), 4, Costs(local=False), Reader(local=False, coalesce_gap=5000), True)
    given: list[int] = []
    in_threads = kernels.in_threads
    monkeypatch.setattr(kernels, "in_threads", lambda tasks: (given.append(len(tasks)), in_threads(tasks))[1])
    runs = []
    for threads, rows in ((1, 10**6), (3, 1)):
        monkeypatch.setattr(kernels, "THREADS", threads)
        monkeypatch.setattr(kernels, "ROWS_A_THREAD", rows)
        runs.append(np.stack(bounds.aligned_reads(chunks, chunks * per, np.ones(k, dtype=bool),
                                                  np.prod(per, axis=1).astype(float), start, stop, [2, 3], points,
                                                  ranked=True)))
    assert given and given[0] > 10, given
    assert (runs[0][0] > 0).sum() > 50
    np.testing.assert_array_equal(runs[1], runs[0])


def test_kernels_given_to_the_pool_from_its_own_thread_run_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """`kernels.in_threads` (and a split) called from a task of the pool itself (a review's case: the pool's threads
    waited on each other, forever): the tasks run one after another in that thread, each once."""
    import threading

    monkeypatch.setattr(kernels, "THREADS", 2)
    monkeypatch.setattr(kernels, "ROWS_A_THREAD", 1)
    monkeypatch.setattr(kernels, "_pool", None)
    seen: list[tuple[str, int, int]] = []

    def inner(lo: int, hi: int) -> None:
        seen.append((threading.current_thread().name, lo, hi))

    def outer() -> None:
        kernels.across_threads(4, inner)

    done = threading.Thread(target=kernels.in_threads, args=([outer, outer],), daemon=True)
    done.start()
    done.join(10)
    assert not done.is_alive()  # (alive: the pool's threads wait on each other)
    assert sorted((lo, hi) for _, lo, hi in seen) == [(0, 2), (0, 2), (2, 4), (2, 4)]
    assert all(name.startswith("xarray_zarrmax-kernels") for name, _, _ in seen)


@pytest.mark.parametrize("form", ["compiled", "numpy"])
def test_a_point_outside_the_array_is_refused_by_the_breaks(form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`merges.point_breaks` of a point past the array's end or before its start (the kernel's tables of a layout's
    chunks end at the array's: a review read past them, and crashed): a ValueError naming the point, in both forms,
    and from the kernel called alone."""
    from xarray_zarrmax.advise import merges

    if form == "numpy":
        monkeypatch.setattr(kernels, "compiled", None)
    elif kernels.compiled is None:
        pytest.skip("xarray_zarrmax.advise._kernels not built here (no C compiler at install)")
    points = np.arange(0, 100, 5).reshape(-1, 1)
    args = (np.asarray([[10]]), np.asarray([[4]]), np.asarray([100]))
    for bad, message in ((10**11, "point 3 is 100000000000 along dimension 0, expected 0 to 99"),
                         (-1, "point 3 is -1 along dimension 0, expected 0 to 99")):
        points[3, 0] = bad
        with pytest.raises(ValueError, match=message):
            merges.point_breaks(*args, points, np.asarray([100.0]), 0, 0.5, False, True)
        if form == "compiled":
            assert kernels.compiled is not None
            out = [np.zeros(1) for _ in range(4)]
            with pytest.raises(ValueError, match=message):
                kernels.compiled.point_breaks(1, 1, 20, *(kernels.ints(a) for a in (*args, points)),
                                              np.asarray([100.0]), 0, 0.5, False, True, *out)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_splits_the_kernels_with_a_pool_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that split a kernel over threads, then forked (a dask worker, a multiprocessing pool): the child's
    split runs on threads of its own (the parent's pool has none there: work given to it waited forever)."""
    import threading
    import time
    import warnings

    monkeypatch.setattr(kernels, "THREADS", 2)
    monkeypatch.setattr(kernels, "ROWS_A_THREAD", 1)
    seen: list[tuple[int, int]] = []
    both = threading.Barrier(2, timeout=10)  # both parts at once: the pool's two threads started

    def part(lo: int, hi: int) -> None:
        both.wait()
        seen.append((lo, hi))

    kernels.across_threads(4, part)
    assert sorted(seen) == [(0, 2), (2, 4)] and kernels._pool is not None
    time.sleep(0.2)  # the pool's threads idle, as long after a search
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (forking a process that has threads: on purpose)
        pid = os.fork()
    if pid == 0:  # the child: its split, waited for at most 10 s
        done: list[int] = []
        split = threading.Thread(target=kernels.across_threads, args=(4, lambda lo, hi: done.append(hi - lo)),
                                 daemon=True)
        split.start()
        split.join(10)
        os._exit(0 if sorted(done) == [2, 2] else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # 1: the child's split did not end


def test_a_failing_part_is_raised_once_every_part_has_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """`kernels.across_threads` with a part that fails at once and one still working: the error comes after both
    ended (no part still writes into the caller's arrays when it reaches the caller)."""
    import threading
    import time

    monkeypatch.setattr(kernels, "THREADS", 2)
    monkeypatch.setattr(kernels, "ROWS_A_THREAD", 1)
    ended: list[int] = []
    started = threading.Event()

    def work(lo: int, hi: int) -> None:
        if lo == 0:
            started.wait(10)
            raise ValueError("part 0 failed")
        started.set()
        time.sleep(0.3)
        ended.append(lo)

    with pytest.raises(ValueError, match="part 0 failed"):
        kernels.across_threads(2, work)
    assert ended == [1]


def test_parts_the_pool_refuses_run_in_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The interpreter shutting down (a search in a thread still running then, or in an atexit handler: a review's
    case), the pool refuses new work: `kernels.across_threads` runs those parts itself, every row once."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(kernels, "THREADS", 3)
    monkeypatch.setattr(kernels, "ROWS_A_THREAD", 1)
    closed = ThreadPoolExecutor(1)
    closed.shutdown()
    monkeypatch.setattr(kernels, "_pool", closed)
    seen: list[tuple[int, int]] = []
    kernels.across_threads(6, lambda lo, hi: seen.append((lo, hi)))
    assert sorted(seen) == [(0, 2), (2, 4), (4, 6)]
