"""Sparse selections of huge arrays: only the chunks holding selected elements are read, and nothing beyond
the result and the chunks being decoded is allocated (measured with tracemalloc, which sees NumPy's buffers).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import xarray as xr
import zarr

from xarray_zarrmax import request_counts

N = 2**40  # 1 TiB of int8 if a read allocated the bounding box
CHUNK, SHARD = 2**20, 2**30
BUDGET = 16 * 2**20  # a few decoded 1 MiB chunks, with room to spare


@pytest.fixture(scope="module")
def huge_1d(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("sparse") / "huge1d.zarr")
    group = zarr.open_group(path, mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(N,), chunks=(CHUNK,), shards=(SHARD,), dtype="i1", dimension_names=["x"],
                             fill_value=7)
    arr[:CHUNK] = (np.arange(CHUNK) % 100).astype("i1")
    arr[N - CHUNK:] = -(np.arange(CHUNK) % 100).astype("i1")
    return path


@pytest.fixture(scope="module")
def huge_2d(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("sparse") / "huge2d.zarr")
    side = 2**20
    group = zarr.open_group(path, mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(side, side), chunks=(1024, 1024), shards=(2**15, 2**15), dtype="i1",
                             dimension_names=["y", "x"], fill_value=3)
    corner = (np.arange(1024 * 1024) % 120).astype("i1").reshape(1024, 1024)
    arr[:1024, :1024] = corner
    arr[side - 1024:, side - 1024:] = -corner
    return path


def _measured(read):
    tracemalloc.start()
    try:
        with request_counts() as counts:
            values = read()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return values, peak, counts


def _oracle(path):
    return xr.open_dataset(path, engine="zarr", consolidated=False)["v"]


@pytest.mark.parametrize("indexer", [
    [0, N - 1],
    [N - 1, 5, 0, 0, -3],  # unsorted, repeated and negative
    slice(0, None, 2**38),  # strided: one element in every 256th shard
    slice(N - 1, 0, -(2**39)),
])
def test_sparse_selection_of_a_huge_1d_array(huge_1d, indexer):
    ours = xr.open_dataset(huge_1d, engine="zarrmax")["v"]
    values, peak, counts = _measured(lambda: ours.isel(x=indexer).values)
    np.testing.assert_array_equal(values, _oracle(huge_1d).isel(x=indexer).values)
    assert peak < BUDGET, f"a {values.size}-element selection allocated {peak / 2**20:.1f} MiB"
    assert counts.total("bytes") < 4 * CHUNK  # the stored chunks holding selected elements, and indexes


def test_outer_selection_of_corners_of_a_huge_2d_array(huge_2d):
    ours = xr.open_dataset(huge_2d, engine="zarrmax")["v"]
    sel = {"y": [0, 2**20 - 1], "x": [1, 2**20 - 2]}
    values, peak, counts = _measured(lambda: ours.isel(sel).values)
    np.testing.assert_array_equal(values, _oracle(huge_2d).isel(sel).values)
    assert peak < BUDGET
    assert counts.total("get") == 4  # two shard indexes, the two stored chunks; the other corners are empty


def test_pointwise_selection_of_a_huge_2d_array(huge_2d):
    ours = xr.open_dataset(huge_2d, engine="zarrmax")["v"]
    side = 2**20
    points = {"y": xr.DataArray([0, side - 1, 5, 1000, side // 2], dims="p"),
              "x": xr.DataArray([side - 1, side - 1, 7, -1, 3], dims="p")}
    values, peak, counts = _measured(lambda: ours.isel(points).values)
    np.testing.assert_array_equal(values, _oracle(huge_2d).isel(points).values)
    # xarray itself turns the lazy full-slice key into one int64 arange per dimension before the backend
    # sees the points (engine="zarr" pays the same): 2 x 8 MiB here.
    xarray_own = 2 * 8 * side
    assert peak < BUDGET + xarray_own, f"{peak / 2**20:.1f} MiB"
    assert counts.total("bytes") < 4 * 2**20


def test_pointwise_with_slices_and_2d_index_arrays_matches_engine_zarr(tmp_path):
    path = str(tmp_path / "small.zarr")
    group = zarr.open_group(path, mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(20, 30, 4), chunks=(3, 7, 2), shards=(6, 14, 4), dtype="f4",
                             dimension_names=["t", "y", "x"], fill_value=np.nan)
    arr[:] = np.arange(20 * 30 * 4, dtype="f4").reshape(20, 30, 4)
    arr[6:12] = np.nan  # a shard left unstored
    ours = xr.open_dataset(path, engine="zarrmax")["v"]
    oracle = _oracle(path)
    t = xr.DataArray([[0, 18], [7, -1]], dims=("a", "b"))
    y = xr.DataArray([[29, 0], [13, 14]], dims=("a", "b"))
    for sel in ({"t": t, "y": y}, {"t": t, "x": xr.DataArray([[3, 0], [1, 2]], dims=("a", "b")), "y": slice(2, 9, 3)}):
        np.testing.assert_array_equal(ours.isel(sel).values, oracle.isel(sel).values)
        np.testing.assert_array_equal(ours.isel(t=slice(1, None)).isel(sel).values,
                                      oracle.isel(t=slice(1, None)).isel(sel).values)
