"""Outputs of 4 MiB or more start on a 2 MiB boundary, so they fault in whole huge pages (see `_memory`)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.codecs import ZstdCodec

from xarray_zarrmax.core import memory as _memory

ALIGNED = _memory.HUGE_PAGE


@pytest.mark.parametrize("shape, dtype", [((1 << 20,), "i8"), ((300, 7, 1001), "f4"), ((5, 1 << 20), "c16"),
                                          ((1 << 20,), "S5"), ((1 << 19,), [("a", "i4"), ("b", "f8")])])
def test_large_outputs_start_on_a_huge_page(shape, dtype):
    out = _memory.empty(shape, np.dtype(dtype))
    assert out.ctypes.data % ALIGNED == 0
    assert out.shape == shape and out.dtype == np.dtype(dtype)
    assert out.flags.c_contiguous and out.flags.writeable and out.flags.aligned
    raw = out.base
    while raw.base is not None:
        raw = raw.base
    assert out.nbytes <= raw.nbytes <= out.nbytes + ALIGNED  # the spare bytes are at most one huge page


def test_small_and_reference_holding_outputs_are_plain_arrays():
    small = _memory.empty((1000,), np.dtype("i8"))
    assert small.base is None and small.shape == (1000,)
    objects = _memory.empty((1 << 20,), np.dtype(object))  # a view of bytes as objects is not allowed
    assert objects.dtype == object and objects.base is None
    strings = _memory.empty((1 << 20,), np.dtypes.StringDType())
    assert strings.dtype == np.dtypes.StringDType() and strings.base is None
    assert _memory.empty((0, 1 << 30), np.dtype("i8")).shape == (0, 1 << 30)


@pytest.mark.parametrize("chunks", [None, {}])
def test_read_outputs_start_on_a_huge_page_and_hold_zarrs_values(tmp_path, chunks):
    path = tmp_path / "a.zarr"
    values = np.random.default_rng(0).integers(0, 1000, size=(3, 1 << 20), dtype="i8")
    group = zarr.open_group(path, mode="w")
    group.create_array("a", shape=values.shape, chunks=(1, 1 << 19), shards=(1, 1 << 20), dtype="i8",
                       dimension_names=["y", "x"], compressors=[ZstdCodec(level=1)])[:] = values
    ds = xr.open_dataset(path, engine="zarrmax", chunks=chunks, consolidated=False)
    if chunks is None:
        blocks = [ds["a"].values]
    else:  # as each dask task hands its block on (compute would copy the blocks into one array)
        by_id: dict[tuple[int, ...], np.ndarray] = {}
        ds["a"].data.map_blocks(lambda block, block_id: by_id.setdefault(block_id, block)[:0],
                                meta=np.empty((0, 0), "i8")).compute()
        blocks = [by_id[block_id] for block_id in sorted(by_id)]
    assert all(block.nbytes >= _memory.ALIGN_FROM_BYTES for block in blocks)
    assert all(block.ctypes.data % ALIGNED == 0 for block in blocks)
    expected = xr.open_dataset(path, engine="zarr", consolidated=False)["a"].values
    np.testing.assert_array_equal(np.concatenate(blocks), expected)
