"""layout.py is pure: checked exhaustively against numpy."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from xarray_zarrmax.core.geometry import (
    Axis,
    PointPiece,
    apply_outer,
    coalesce,
    normalize_selection,
    plan_points,
    plan_reads,
    selection_shape,
    vectorized_points,
)


@st.composite
def shape_and_key(draw):
    shape = tuple(draw(st.lists(st.integers(1, 12), min_size=1, max_size=4)))
    key = []
    for n in shape:
        kind = draw(st.sampled_from(["int", "slice", "array"]))
        if kind == "int":
            key.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            step = draw(st.sampled_from([None, 1, 2, 3, -1, -2]))
            key.append(slice(draw(st.one_of(st.none(), st.integers(-n - 2, n + 2))),
                             draw(st.one_of(st.none(), st.integers(-n - 2, n + 2))), step))
        else:
            key.append(np.array(draw(st.lists(st.integers(-n, n - 1), max_size=6)), dtype=np.int64))
    return shape, tuple(key)


def numpy_outer(array, key):
    """What an outer selection returns, by NumPy alone."""
    per_dim = [np.arange(n)[k] if isinstance(k, slice) else np.atleast_1d(np.asarray(k) % n)
               for k, n in zip(key, array.shape, strict=True)]
    result = array[np.ix_(*per_dim)]
    return result.reshape([n for n, k in zip(result.shape, key, strict=True) if not isinstance(k, int)])


def chunk_of(array, coords, chunks):
    return array[tuple(slice(c * k, (c + 1) * k) for c, k in zip(coords, chunks, strict=True))]


@settings(max_examples=500, deadline=None)
@given(shape_and_key())
def test_compact_selection_then_post_index_equals_numpy(case):
    shape, key = case
    data = np.arange(int(np.prod(shape))).reshape(shape)
    axes, post = normalize_selection(key, shape)
    compact = data[np.ix_(*(a.indices if a.indices is not None else np.arange(a.start, a.stop) for a in axes))]
    assert compact.shape == selection_shape(axes)
    np.testing.assert_array_equal(apply_outer(compact, post), numpy_outer(data, key))


@settings(max_examples=500, deadline=None)
@given(shape_and_key(), st.data())
def test_pieces_fill_the_selection_exactly_once_and_touch_only_needed_chunks(case, data):
    shape, key = case
    inner = tuple(data.draw(st.integers(1, n)) for n in shape)
    outer = tuple(c * data.draw(st.integers(1, 3)) for c in inner)
    array = np.arange(int(np.prod(shape))).reshape(shape)
    axes, post = normalize_selection(key, shape)
    out = np.full(selection_shape(axes), -1)
    needed = {tuple(int(i) for i in idx) for idx in np.argwhere(np.ones(selection_shape(axes), bool))}
    touched = set()
    for obj, pieces in plan_reads(axes, shape, outer, inner):
        for p in pieces:
            absolute = tuple(o * (so // si) + c for o, c, so, si in zip(obj, p.coords, outer, inner, strict=True))
            touched.add(absolute)
            chunk = chunk_of(array, absolute, inner)
            assert (out[p.out_region] == -1).all()  # no element written twice
            out[p.out_region] = chunk[p.chunk_index()]
            assert p.covers_chunk == (chunk[p.chunk_index()].shape == chunk.shape)
    assert (out != -1).all() or not needed
    np.testing.assert_array_equal(apply_outer(out, post), numpy_outer(array, key))
    # every chunk listed holds a selected element: a sparse selection reads nothing else
    selected = [a.indices if a.indices is not None else np.arange(a.start, a.stop) for a in axes]
    wanted = {tuple(int(x) for x in c) for c in np.argwhere(np.ones(selection_shape(axes), bool))}
    expected_chunks = {tuple(int(selected[d][i]) // inner[d] for d, i in enumerate(c)) for c in wanted}
    assert touched == expected_chunks


def test_a_sparse_selection_of_a_huge_dimension_stays_small():
    n = 2**40
    axes, post = normalize_selection((np.array([0, n - 1, 5]),), (n,))
    assert selection_shape(axes) == (3,)
    reads = plan_reads(axes, (n,), (2**30,), (2**20,))
    assert [(obj, [p.coords for p in pieces]) for obj, pieces in reads] == [((0,), [(0,)]), ((1023,), [(1023,)])]
    np.testing.assert_array_equal(apply_outer(np.array([0, 5, n - 1]), post), [0, n - 1, 5])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_vectorized_points_equal_xarray_semantics(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 8), min_size=1, max_size=3)))
    npoints = data.draw(st.integers(0, 5))
    key = []
    for n in shape:
        if data.draw(st.booleans()):
            key.append(np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=npoints, max_size=npoints)),
                                dtype=np.int64))
        else:
            key.append(slice(data.draw(st.integers(0, n)), None, data.draw(st.sampled_from([1, 2, -1]))))
    if not any(isinstance(k, np.ndarray) for k in key):
        key[0] = np.array([0] * npoints, dtype=np.int64)
    array = np.arange(int(np.prod(shape))).reshape(shape)
    points, result_shape = vectorized_points(tuple(key), shape)
    got = array[tuple(points.T)].reshape(result_shape)
    from xarray.core.indexing import NumpyIndexingAdapter, VectorizedIndexer

    expected = NumpyIndexingAdapter(array).vindex[VectorizedIndexer(tuple(key))]
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_point_pieces_gather_every_point_from_its_own_chunk(data):
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.integers(1, 10)) for _ in range(ndim))
    inner = tuple(data.draw(st.integers(1, n)) for n in shape)
    outer = tuple(c * data.draw(st.integers(1, 3)) for c in inner)
    n = data.draw(st.integers(0, 20))
    points = np.array([[data.draw(st.integers(0, s - 1)) for s in shape] for _ in range(n)],
                      dtype=np.int64).reshape(n, ndim)
    array = np.arange(int(np.prod(shape))).reshape(shape)
    out = np.full(n, -1)
    seen_chunks = []
    for obj, pieces in plan_points(points, outer, inner):
        for p in pieces:
            assert isinstance(p, PointPiece)
            absolute = tuple(o * (so // si) + c for o, c, so, si in zip(obj, p.coords, outer, inner, strict=True))
            seen_chunks.append(absolute)
            assert (out[p.positions] == -1).all()
            out[p.positions] = chunk_of(array, absolute, inner)[tuple(p.local.T)]
    assert len(seen_chunks) == len(set(seen_chunks))  # each chunk read once
    np.testing.assert_array_equal(out, array[tuple(points.T)] if n else out)


def test_axis_of_consecutive_indices_is_a_range():
    assert Axis.of_indices(np.array([3, 4, 5])).indices is None
    assert Axis.of_indices(np.array([3, 5])).indices is not None


def test_coalesce_merges_close_ranges_and_keeps_members():
    assert coalesce([(100, 110), (0, 10), (12, 20)], gap=5) == [(0, 20, [1, 2]), (100, 110, [0])]
    assert coalesce([(0, 10), (12, 20)], gap=0) == [(0, 10, [0]), (12, 20, [1])]
    assert coalesce([], gap=10) == []


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000), st.sampled_from([1, 3, 9]))
def test_zstd_declared_size_matches_what_zstd_decodes(payload, level):
    import numcodecs

    from xarray_zarrmax.codecs.decode import declared_size

    frame = numcodecs.Zstd(level=level).encode(payload)
    assert declared_size("zstd", frame) == len(payload)
    blosc = numcodecs.Blosc(cname="lz4").encode(payload) if payload else None
    if blosc is not None:
        assert declared_size("blosc", blosc) == len(payload)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=6), st.data())
def test_segments_view_equals_the_joined_bytes(parts, data):
    from xarray_zarrmax.core.bytes import Segments, view

    joined = b"".join(parts)
    seg = Segments(parts)
    assert len(seg) == len(joined)
    a = data.draw(st.integers(0, len(joined)))
    b = data.draw(st.integers(a, len(joined)))
    assert bytes(view(seg, a, b)) == joined[a:b]
    assert bytes(view(joined, a, b)) == joined[a:b]


def test_decode_batches_split_work_evenly_in_order():
    from xarray_zarrmax.read.work import split_batches as _batches

    work = list(range(10))
    assert _batches(work, 4) == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert _batches(work, 1) == [work]
    assert _batches(work[:3], 8) == [[0], [1], [2]]  # never an empty batch while work remains
    assert _batches([], 4) == [[]]
    assert sum(_batches(work, 3), []) == work


def test_task_chunks_group_small_objects_innermost_dimension_first():
    from xarray_zarrmax.core.geometry import task_chunks

    mib = 2**20
    # 1-D: 0.8 MB chunks of int64 grouped to about 32 MiB (41 chunks), never past the array
    assert task_chunks((67_108_864,), (100_000,), 8, 32 * mib) == (4_100_000,)
    assert task_chunks((250_000,), (100_000,), 8, 32 * mib) == (250_000,)
    # an object of at least half the target stays one task; 0 turns grouping off
    assert task_chunks((10**8,), (2_097_152,), 8, 32 * mib) == (2_097_152,)
    assert task_chunks((10**8,), (100_000,), 8, 0) == (100_000,)
    # 3-D: lon spans the array first, then lat, then time; an inner dimension not spanned stops the growth
    assert task_chunks((1000, 721, 1440), (1, 721, 1440), 4, 32 * mib) == (8, 721, 1440)
    assert task_chunks((1000, 720, 1440), (24, 90, 90), 4, 32 * mib) == (24, 180, 1440)
    assert task_chunks((1000, 720, 1440), (24, 90, 90), 4, 4 * mib) == (24, 90, 450)
    # rectilinear (irregular) dimensions are left as stored
    assert task_chunks((10, 10), ((3, 3, 4), 5), 8, 32 * mib) == ((3, 3, 4), 5)
    # empty arrays: nothing to group
    assert task_chunks((0, 10), (5, 5), 8, 32 * mib) == (5, 5)
