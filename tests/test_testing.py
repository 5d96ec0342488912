"""The suite's own helpers: the counting store wrapper counts requests and the bytes they returned."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import xarray as xr
import zarr

from xarray_zarrmax.testing import counting_store


def test_counting_store_counts_get_bytes(tmp_path: Path) -> None:
    """A full read through engine="zarr" GETs every stored object once, whole: the bytes counted are the stored
    objects' sizes, and a partial read of one shard counts fewer bytes than the shard."""
    path = tmp_path / "v.zarr"
    values = np.arange(4 * 6 * 8, dtype="f4").reshape(4, 6, 8)
    xr.Dataset({"v": (("t", "y", "x"), values)}).to_zarr(
        path, encoding={"v": {"chunks": (2, 3, 4), "shards": (4, 6, 4)}}, zarr_format=3, consolidated=False)
    stored = sorted(p for p in (path / "v" / "c").rglob("*") if p.is_file())
    assert len(stored) == 2  # two shards along x

    counts: Counter[str] = Counter()
    ds = xr.open_dataset(counting_store(zarr.storage.LocalStore(path, read_only=True), counts), engine="zarr",
                         chunks=None, consolidated=False)
    counts.clear()
    np.testing.assert_array_equal(ds["v"].values, values)
    assert counts["bytes"] == sum(p.stat().st_size for p in stored)
    assert counts["get"] >= len(stored)

    ds = xr.open_dataset(counting_store(zarr.storage.LocalStore(path, read_only=True), counts), engine="zarr",
                         chunks=None, consolidated=False)  # anew: xarray keeps what .values loaded
    counts.clear()
    np.testing.assert_array_equal(ds["v"][0, 0, 0].values, values[0, 0, 0])
    assert 0 < counts["bytes"] < stored[0].stat().st_size
