"""Data that changes under an open Dataset: one sharded array ``v`` written for a case, then changed (a shard
rewritten at the same size or another size, deleted, or added where there was none), and the reads that
compare the two engines before and after."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import xarray as xr
import zarr

SHAPE, CHUNKS, SHARDS = (64, 8), (4, 8), (32, 8)
CASES = ("same-size", "other-size", "deleted", "added")
#: the first shard as the "same-size" change leaves it
SAME_SIZE_SHARD0 = -np.arange(32 * 8.0).reshape(32, 8)
SAME_SIZE_SHARD0[8:12] = -1.0
SELECTIONS = [
    {},
    {"t": slice(0, 12)},
    {"t": slice(16, 20)},
    {"t": slice(40, 44)},
    {"t": [1, 17, 45], "x": [0, 7]},
]


def create_case(store: Any, case: str) -> None:
    """Write array ``v`` (two shards of 8 chunks, incompressible values) as ``case`` needs it before the change."""
    compressors = None if case == "same-size" else [zarr.codecs.ZstdCodec(level=3)]
    group = zarr.open_group(store, mode="a", zarr_format=3)
    arr = group.create_array("v", shape=SHAPE, chunks=CHUNKS, shards=SHARDS, dtype="f8", dimension_names=["t", "x"],
                             compressors=compressors, fill_value=-1.0)
    rng = np.random.default_rng(0)
    values = rng.normal(size=SHAPE)  # incompressible: a rewrite with zeros shrinks the shard
    if case == "added":
        arr[:32] = values[:32]  # shard 1 is never written
    else:
        arr[:] = values
    if case == "same-size":
        arr[4:8] = -1.0  # chunk 1 holds the fill value, so it is not stored


def change_case(store: Any, case: str) -> None:
    """Make ``case``'s change to array ``v`` written by ``create_case``."""
    arr = zarr.open_array(store, path="v", mode="r+")
    if case == "same-size":
        arr[:32] = SAME_SIZE_SHARD0  # chunk 1 stored, chunk 2 not: as many bytes, other offsets
    elif case == "other-size":
        arr[:32] = 0.0
        arr[4:8] = -1.0  # fill value: this chunk is no longer stored
    elif case == "deleted":
        asyncio.run(store.delete("v/c/0/0"))
    else:
        arr[32:] = np.arange(32 * 8.0).reshape(32, 8)


def read_selections(ds: xr.Dataset) -> list[np.ndarray]:
    """The values of ``v`` at each of ``SELECTIONS`` and at three points (a vectorized selection)."""
    values = [ds["v"].isel(sel).values for sel in SELECTIONS]
    points = {"t": xr.DataArray([2, 33, 60], dims="p"), "x": xr.DataArray([1, 5, 7], dims="p")}
    return [*values, ds["v"].isel(points).values]
