"""layout.py is pure: checked exhaustively against numpy."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from xarray_zarrmax.layout import box_shape, coalesce, count_chunks, iter_pieces, normalize_selection


@st.composite
def shape_and_key(draw):
    shape = tuple(draw(st.lists(st.integers(1, 12), min_size=1, max_size=4)))
    key = []
    for n in shape:
        if draw(st.booleans()):
            key.append(draw(st.integers(-n, n - 1)))
        else:
            step = draw(st.sampled_from([None, 1, 2, 3, -1, -2]))
            key.append(slice(draw(st.one_of(st.none(), st.integers(-n - 2, n + 2))),
                             draw(st.one_of(st.none(), st.integers(-n - 2, n + 2))), step))
    return shape, tuple(key)


@settings(max_examples=500, deadline=None)
@given(shape_and_key())
def test_box_then_post_index_equals_numpy(case):
    shape, key = case
    data = np.arange(int(np.prod(shape))).reshape(shape)
    box, post, _ = normalize_selection(key, shape)
    region = data[tuple(slice(lo, hi) for lo, hi in box)]
    assert region.shape == box_shape(box)
    np.testing.assert_array_equal(region[post], data[key])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_pieces_tile_the_box_exactly_once(data):
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.integers(1, 15)) for _ in range(ndim))
    chunks = tuple(data.draw(st.integers(1, n)) for n in shape)
    box = tuple(tuple(sorted(data.draw(st.tuples(st.integers(0, n), st.integers(0, n))))) for n in shape)
    box = tuple((lo, hi) for lo, hi in box)
    array = np.arange(int(np.prod(shape))).reshape(shape)
    out = np.full(box_shape(box), -1)
    pieces = list(iter_pieces(box, chunks, shape))
    assert len(pieces) == count_chunks(box, chunks) or any(hi == lo for lo, hi in box)
    for p in pieces:
        origin = tuple(c * k for c, k in zip(p.coords, chunks, strict=True))
        chunk = array[tuple(slice(o, o + k) for o, k in zip(origin, chunks, strict=True))]
        assert (out[p.out_region] == -1).all()  # no element written twice
        out[p.out_region] = chunk[p.chunk_region]
        assert p.covers_chunk == (chunk[p.chunk_region].shape == chunk.shape)
    np.testing.assert_array_equal(out, array[tuple(slice(lo, hi) for lo, hi in box)])


def test_coalesce_merges_close_ranges_and_keeps_members():
    assert coalesce([(100, 110), (0, 10), (12, 20)], gap=5) == [(0, 20, [1, 2]), (100, 110, [0])]
    assert coalesce([(0, 10), (12, 20)], gap=0) == [(0, 10, [0]), (12, 20, [1])]
    assert coalesce([], gap=10) == []


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_outer_selection_with_index_arrays_equals_numpy(data):
    from xarray_zarrmax.layout import apply_outer

    shape = tuple(data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    key, numpy_key = [], []
    for n in shape:
        kind = data.draw(st.sampled_from(["int", "slice", "array"]))
        if kind == "int":
            i = data.draw(st.integers(-n, n - 1))
            key.append(i)
            numpy_key.append(np.array([i % n]))
        elif kind == "slice":
            s = slice(data.draw(st.integers(0, n)), None, data.draw(st.integers(1, 3)))
            key.append(s)
            numpy_key.append(np.arange(n)[s])
        else:
            a = np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=5)))
            key.append(a)
            numpy_key.append(a % n)
    array = np.arange(int(np.prod(shape))).reshape(shape)
    box, post, touched = normalize_selection(tuple(key), shape)
    region = array[tuple(slice(lo, hi) for lo, hi in box)]
    expected = array[np.ix_(*numpy_key)]
    expected = expected.reshape([n for n, k in zip(expected.shape, key, strict=True) if not isinstance(k, int)])
    np.testing.assert_array_equal(apply_outer(region, post), expected)
    for t, k, n in zip(touched, key, shape, strict=True):
        if isinstance(k, np.ndarray):
            np.testing.assert_array_equal(t, np.unique(k % n))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000), st.sampled_from([1, 3, 9]))
def test_zstd_declared_size_matches_what_zstd_decodes(payload, level):
    import numcodecs

    from xarray_zarrmax.decode import declared_size

    frame = numcodecs.Zstd(level=level).encode(payload)
    assert declared_size("zstd", frame) == len(payload)
    blosc = numcodecs.Blosc(cname="lz4").encode(payload) if payload else None
    if blosc is not None:
        assert declared_size("blosc", blosc) == len(payload)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=6), st.data())
def test_segments_view_equals_the_joined_bytes(parts, data):
    from xarray_zarrmax.stores import Segments, view

    joined = b"".join(parts)
    seg = Segments(parts)
    assert len(seg) == len(joined)
    a = data.draw(st.integers(0, len(joined)))
    b = data.draw(st.integers(a, len(joined)))
    assert bytes(view(seg, a, b)) == joined[a:b]
    assert bytes(view(joined, a, b)) == joined[a:b]
