"""``device=`` reads give engine="zarr"'s values on the CPU: zstd decoded on the device and the codecs decoded on
the host, sharded and not, whole and partial selections, fill values, and corrupt frames refused.

Marked ``gpu``: on the NumPy stand-in by default (CI), on CUDA with ``XARRAY_ZARRMAX_TEST_DEVICE=cuda``
(``ci/gpu_check.sh``); tests/support/devices.py says how the device is chosen.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from numcodecs import Zstd
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ZstdCodec

from tests.support.corrupt import shard_file, sharded_store
from tests.support.devices import block_type, to_host
from xarray_zarrmax import CorruptDataError
from xarray_zarrmax.backend import ZarrmaxStore
from xarray_zarrmax.gpu.read import device_decodable
from xarray_zarrmax.storage import resolve_source

pytestmark = pytest.mark.gpu

SHAPE, CHUNKS, SHARDS = (10, 12, 14), (3, 4, 5), (6, 8, 10)

# name: (zarr_format, create_array keywords, whether the device decodes the chunks itself)
LAYOUTS: dict[str, tuple[int, dict[str, Any], bool]] = {
    "zstd, sharded": (3, {"shards": SHARDS, "compressors": [ZstdCodec(level=1)]}, True),
    "zstd + crc32c, sharded": (3, {"shards": SHARDS, "compressors": [ZstdCodec(level=1), Crc32cCodec()]}, True),
    "zstd, unsharded": (3, {"compressors": [ZstdCodec(level=1)]}, True),
    "zstd, v2": (2, {"compressors": Zstd(level=1)}, True),
    "gzip, sharded (decoded on the host)": (3, {"shards": SHARDS, "compressors": [GzipCodec()]}, False),
    "blosc (decoded on the host)": (3, {"compressors": [BloscCodec(cname="lz4")]}, False),
    "uncompressed, sharded": (3, {"shards": SHARDS, "compressors": None}, False),
}

SELECTIONS: dict[str, dict[str, Any]] = {
    "everything": {},
    "a box across shards": {"t": slice(2, 9), "y": slice(3, 11), "x": slice(4, 13)},
    "one element": {"t": 7, "y": 5, "x": 13},
    "steps": {"t": slice(None, None, 3), "x": slice(1, None, 4)},
    "lists (outer)": {"t": [0, 9, 4], "x": [13, 0, 6, 6]},
    "points (vectorized)": {"t": xr.DataArray([0, 5, 9], dims="p"), "y": xr.DataArray([11, 0, 6], dims="p")},
}


def _write(path: Any, zarr_format: int, kwargs: dict[str, Any]) -> np.ndarray:
    """float32 with NaN as the fill value, a chunk of every shard left unwritten and one whole shard missing
    (sharded) or a block of chunks missing (unsharded)."""
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    kwargs = dict(kwargs)
    if zarr_format == 2:
        kwargs["compressor"] = kwargs.pop("compressors")
    arr = group.create_array("v", shape=SHAPE, chunks=CHUNKS, dtype="f4", fill_value=np.nan,
                             dimension_names=None if zarr_format == 2 else ["t", "y", "x"], **kwargs)
    if zarr_format == 2:
        arr.attrs["_ARRAY_DIMENSIONS"] = ["t", "y", "x"]
    data = np.arange(np.prod(SHAPE), dtype="f4").reshape(SHAPE) / 7
    data[6:, 8:, :] = np.nan  # never written: the shard (or chunks) at (1, 1, *) stay missing
    arr[:6] = data[:6]
    arr[6:, :8] = data[6:, :8]
    data[0:3, 0:4, 0:5] = np.nan
    arr[0:3, 0:4, 0:5] = np.nan  # written as fill: zarr-python drops the chunk (write_empty_chunks=False)
    return data


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("use_dask", [False, True], ids=["lazy", "dask"])
def test_device_reads_equal_zarr_on_the_cpu(tmp_path, device, layout, use_dask):
    zarr_format, kwargs, on_device = LAYOUTS[layout]
    path = tmp_path / "p.zarr"
    data = _write(path, zarr_format, kwargs)
    store = ZarrmaxStore.open(resolve_source(str(path)), consolidated=False)
    assert device_decodable(store.wrapper(store.group.arrays["v"]).plan.codec) == on_device  # the path meant
    chunks = {} if use_dask else None
    ours = xr.open_dataset(path, engine="zarrmax", chunks=chunks, device=device, consolidated=False)["v"]
    oracle = xr.open_dataset(path, engine="zarr", consolidated=False)["v"]
    np.testing.assert_array_equal(oracle.values, data)  # the oracle reads what was written
    for name, selection in SELECTIONS.items():
        got = ours.isel(selection).compute().data
        assert isinstance(got, block_type()), (name, type(got))
        expected = oracle.isel(selection).values
        assert got.dtype == expected.dtype and got.shape == expected.shape, name
        np.testing.assert_array_equal(to_host(got), expected, err_msg=name)


@pytest.mark.parametrize("fill_value", [0, -9999, 255])
def test_missing_chunks_and_shards_read_as_the_fill_value(tmp_path, device, fill_value):
    group = zarr.open_group(str(tmp_path / "f.zarr"), mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(64, 8), chunks=(4, 8), shards=(16, 8), dtype="i2", fill_value=fill_value,
                             compressors=[ZstdCodec(level=1)], dimension_names=["x", "y"])
    arr[20:28] = np.arange(64, dtype="i2").reshape(8, 8)  # one shard partly written, three missing
    ours = xr.open_dataset(tmp_path / "f.zarr", engine="zarrmax", chunks={}, device=device, mask_and_scale=False,
                           consolidated=False)
    oracle = xr.open_dataset(tmp_path / "f.zarr", engine="zarr", consolidated=False, mask_and_scale=False)
    got = to_host(ours["v"].compute().data)
    np.testing.assert_array_equal(got, oracle["v"].values)
    assert (got[:16] == fill_value).all() and (got[32:] == fill_value).all()


@pytest.mark.parametrize("where", ["the frame's magic number", "a reserved bit of the frame header"])
def test_a_corrupt_zstd_frame_in_a_shard_is_refused(tmp_path, device, where):
    """Corruption zstd itself detects (no checksum in the chain): engine="zarr" refuses it, and so must we."""
    path = sharded_store(tmp_path / "c.zarr", crc_inner=False)
    blob = bytearray(open(shard_file(path), "rb").read())
    if where == "the frame's magic number":
        blob[0:4] = b"\xde\xad\xbe\xef"
    else:
        blob[4] |= 0x08  # Frame_Header_Descriptor bit 3 must be zero
    open(shard_file(path), "wb").write(bytes(blob))
    with pytest.raises(Exception):  # noqa: B017 - the oracle's type is zarr's/numcodecs', ours is checked below
        xr.open_dataset(path, engine="zarr", consolidated=False)["v"].values
    with pytest.raises(CorruptDataError, match=r"v/c/0"):
        xr.open_dataset(path, engine="zarrmax", chunks={}, device=device, consolidated=False)["v"].compute()
    # the other shard still reads, and equals engine="zarr"'s values
    ours = xr.open_dataset(path, engine="zarrmax", chunks={}, device=device, consolidated=False)["v"]
    np.testing.assert_array_equal(to_host(ours.isel(x=slice(40, 80)).compute().data), np.arange(40, 80, dtype="i4"))
