"""Example datasets: an ERA5-like reanalysis field and the write tests' sample, with the layouts they are
stored in."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

#: the size of ``sample()``'s (time, y, x) dimensions
NT, NY, NX = 20, 6, 8
SHARDED = {"chunks": (2, 3, 4), "shards": (8, 6, 8)}  # 3 shards along time, the last one partial


def era5_like(n_time: int = 24) -> xr.Dataset:
    """Hourly 2 m temperature and precipitation on a coarse global grid, a land-sea mask, a CF-scaled variable,
    a NaN and a scalar coordinate: a small ERA5-like Dataset."""
    rng = np.random.default_rng(0)
    time = pd.date_range("2020-01-01", periods=n_time, freq="h")
    lat = np.linspace(90, -90, 19)
    lon = np.arange(0, 360, 20.0)
    t2m = (280 + 10 * np.sin(np.arange(n_time))[:, None, None] + rng.normal(size=(n_time, 19, 18))).astype("f4")
    t2m[0, 0, 0] = np.nan
    ds = xr.Dataset(
        {
            "t2m": (("time", "latitude", "longitude"), t2m, {"units": "K", "long_name": "2 m temperature"}),
            "tp": (("time", "latitude", "longitude"), rng.gamma(1.0, size=t2m.shape).astype("f8")),
            "lsm": (("latitude", "longitude"), (rng.random((19, 18)) > 0.5).astype("i1")),
            "scaled": (("time",), np.arange(n_time, dtype="f8")),
        },
        coords={"time": time, "latitude": lat, "longitude": lon, "level": 850},
        attrs={"title": "ERA5-like test data", "Conventions": "CF-1.8"},
    )
    ds["scaled"].encoding = {"scale_factor": 0.5, "add_offset": 1.0, "dtype": "i2", "_FillValue": -1}
    return ds


def write_with_zarr(ds: xr.Dataset, path: Any, zarr_format: int = 3, consolidated: bool = False,
                    sharded: bool = True, **kw: Any) -> Any:
    """Write an ``era5_like`` Dataset with zarr-python (``Dataset.to_zarr``, mode "w"); in format 3 and
    ``sharded``, ``t2m`` in shards of 2x2x2 chunks and ``tp`` in chunks of whole maps. Returns ``path``."""
    encoding = {}
    if sharded and zarr_format == 3:
        encoding = {"t2m": {"chunks": (4, 10, 9), "shards": (8, 20, 18)}, "tp": {"chunks": (6, 19, 18)}}
    ds.to_zarr(path, zarr_format=zarr_format, consolidated=consolidated, encoding=encoding, mode="w", **kw)
    return path


def sample(nt: int = NT, t0: int = 0) -> xr.Dataset:
    """CF time, NaNs, attributes, ints, a string coordinate and a scalar: what encoding must get right."""
    rng = np.random.default_rng(t0)
    temp = rng.normal(size=(nt, NY, NX)).astype("f4")
    temp[0, 0, :3] = np.nan
    return xr.Dataset(
        {
            "temp": (("time", "y", "x"), temp, {"units": "K", "long_name": "temperature"}),
            "count": (("time",), np.arange(t0, t0 + nt, dtype="i4")),
            "flag": ((), np.int8(3)),
        },
        coords={
            "time": pd.date_range("2020-01-01", periods=nt, freq="6h") + pd.Timedelta(hours=6 * t0),
            "y": np.linspace(-1, 1, NY),
            "x": np.arange(NX),
            "station": (("x",), np.array([f"s{i}" for i in range(NX)])),
        },
        attrs={"title": "sample", "history": "made in a test"},
    )
