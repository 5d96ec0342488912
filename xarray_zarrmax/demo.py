"""The demo: write a small sharded ERA5-like dataset locally, read it with engine="zarr" and "zarrmax".

    python -m xarray_zarrmax.demo [--dir demo_data] [--repeat 3]

Prints the median time of a full read with each engine (dask, threaded scheduler) and checks that the
values are identical.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np


def make_dataset(path: Path, n_time: int = 240, n_lat: int = 181, n_lon: int = 360) -> Path:
    import pandas as pd
    import xarray as xr

    if (path / "zarr.json").exists():
        return path
    t = np.arange(n_time)[:, None, None]
    lat = np.linspace(90, -90, n_lat)
    lon = np.arange(n_lon, dtype="f8")
    rng = np.random.default_rng(42)
    t2m = (273.15 + 25 * np.cos(np.deg2rad(lat))[None, :, None] + 5 * np.sin(2 * np.pi * t / 24)
           + np.sin(np.deg2rad(lon))[None, None, :] + rng.normal(scale=0.5, size=(n_time, n_lat, n_lon)))
    ds = xr.Dataset(
        {
            "t2m": (("time", "latitude", "longitude"), t2m.astype("f4"), {"units": "K"}),
            "u10": (("time", "latitude", "longitude"), (t2m * 0.01 - 2.5).astype("f4"), {"units": "m s-1"}),
        },
        coords={"time": pd.date_range("2024-01-01", periods=n_time, freq="h"), "latitude": lat, "longitude": lon},
    )
    encoding = {name: {"chunks": (24, 91, 90), "shards": (48, 182, 360)} for name in ("t2m", "u10")}
    ds.to_zarr(path, mode="w", zarr_format=3, consolidated=False, encoding=encoding)
    return path


def timed_read(path: Path, engine: str) -> tuple[float, dict[str, np.ndarray]]:
    import xarray as xr

    start = time.perf_counter()
    kwargs: dict[str, Any] = {"consolidated": False} if engine == "zarr" else {}
    ds = xr.open_dataset(path, engine=engine, chunks={}, **kwargs)
    values = {str(name): ds[name].values for name in ds.data_vars}
    return time.perf_counter() - start, values


def main(argv: list[str] | None = None) -> int:
    import dask

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="demo_data", help="where to write the dataset (default: demo_data)")
    parser.add_argument("--repeat", type=int, default=3, help="reads per engine; the median is printed")
    args = parser.parse_args(argv)

    path = make_dataset(Path(args.dir) / "era5_demo.zarr")
    nbytes = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    print(f"dataset: {path} ({nbytes / 1e6:.0f} MB on disk, 2 variables, 48x182x360 shards of 24x91x90 chunks)")
    results = {}
    with dask.config.set(scheduler="threads"):
        for engine in ("zarr", "zarrmax"):
            runs = [timed_read(path, engine) for _ in range(args.repeat)]
            results[engine] = (statistics.median(t for t, _ in runs), runs[-1][1])
    for engine, (seconds, values) in results.items():
        size = sum(v.nbytes for v in values.values())
        print(f"engine={engine!r:10} median {seconds:.3f} s  ({size / seconds / 1e9:.2f} GB/s decoded)")
    same = all(np.array_equal(results["zarr"][1][k], results["zarrmax"][1][k], equal_nan=True)
               for k in results["zarr"][1])
    print(f"speed-up: {results['zarr'][0] / results['zarrmax'][0]:.2f}x; values identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
