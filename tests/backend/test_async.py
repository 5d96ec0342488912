"""Async loading: ``Dataset.load_async()``, ``DataArray.load_async()`` and ``Variable.load_async()`` give
engine="zarr"'s values, and the reads of many variables are in flight together on the package's I/O loop."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.storage import MemoryStore

from tests.support.inflight import InFlight

N_VARS = 8


def write_group(store: Any) -> None:
    group = zarr.open_group(store, mode="w", zarr_format=3)
    x = group.create_array("x", shape=(40,), chunks=(40,), dtype="i8", dimension_names=["x"])
    x[:] = np.arange(40)
    for i in range(N_VARS):
        arr = group.create_array(f"v{i}", shape=(40, 6), chunks=(10, 6), shards=(20, 6), dtype="f4",
                                 dimension_names=["x", "y"], fill_value=np.nan)
        arr[:] = np.arange(240, dtype="f4").reshape(40, 6) + i
    s = group.create_array("s", shape=(40,), chunks=(10,), dtype=str, dimension_names=["x"])  # zarr-python reads it
    s[:] = [f"n{i}" for i in range(40)]


def _open(written, engine):
    if engine == "zarr":
        return xr.open_dataset(written.oracle_store, engine="zarr", consolidated=False)
    return xr.open_dataset(written.target, engine="zarrmax", **written.open_kwargs)


def test_load_async_matches_engine_zarr(store_factory):
    if store_factory.kind.startswith("icechunk"):
        pytest.importorskip("icechunk")
    written = store_factory.new()
    write_group(written.store)
    written.finish()
    oracle = _open(written, "zarr").load()

    async def load_everything():
        ds = _open(written, "zarrmax")
        whole = await ds.load_async()
        one = await _open(written, "zarrmax")["v3"].load_async()
        var = await _open(written, "zarrmax")["v5"].variable.load_async()
        outer = await _open(written, "zarrmax").isel(x=[0, 39, 17], y=slice(1, None, 2)).load_async()
        points = await _open(written, "zarrmax").isel(x=xr.DataArray([3, 30], dims="p"),
                                                        y=xr.DataArray([5, 0], dims="p")).load_async()
        return whole, one, var, outer, points

    whole, one, var, outer, points = asyncio.run(load_everything())
    xr.testing.assert_identical(whole, oracle)
    assert whole["s"].dtype == oracle["s"].dtype
    xr.testing.assert_identical(one, oracle["v3"])
    np.testing.assert_array_equal(var.values, oracle["v5"].values)
    xr.testing.assert_identical(outer, oracle.isel(x=[0, 39, 17], y=slice(1, None, 2)))
    xr.testing.assert_identical(points, oracle.isel(x=xr.DataArray([3, 30], dims="p"),
                                                    y=xr.DataArray([5, 0], dims="p")))


def test_load_async_sends_every_variables_reads_together():
    """Each variable is two shards read whole: one GET each. Variable after variable, at most two would be
    in flight; together, all of them."""
    memory = MemoryStore()
    write_group(memory)
    store = InFlight(memory)
    ds = xr.open_dataset(store, engine="zarrmax").drop_vars("s")
    store.hold_until(2 * N_VARS)
    loaded = asyncio.run(ds.load_async())
    assert store.most >= 2 * N_VARS, f"at most {store.most} GETs were in flight together"
    np.testing.assert_array_equal(loaded["v7"].values, np.arange(240, dtype="f4").reshape(40, 6) + 7)


def test_load_async_does_not_block_the_callers_loop():
    memory = MemoryStore()
    write_group(memory)
    store = InFlight(memory)
    ds = xr.open_dataset(store, engine="zarrmax")

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        await ds.load_async()
        task.cancel()
        return ticks

    assert asyncio.run(main()) > 3  # the caller's loop ran other work while the reads were in flight
