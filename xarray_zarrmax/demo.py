"""The demo: write a small sharded ERA5-like dataset locally, read it with engine="zarr" and "zarrmax".

    python -m xarray_zarrmax.demo [--dir demo_data] [--repeat 5]

Prints, for each engine, the median time to open the dataset and read it whole (dask, threaded scheduler;
the engines alternate, after one untimed warm-up read each) and the requests that took, then checks that the
values are identical.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
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


def _open(path: Path, engine: str, counts: Counter[str]) -> Any:
    import xarray as xr
    from zarr.storage import LocalStore

    from xarray_zarrmax.testing.stores import counting_store

    if engine == "zarr":  # zarr-python's requests, counted by a wrapper around its store
        return xr.open_dataset(counting_store(LocalStore(path, read_only=True), counts), engine="zarr", chunks={},
                               consolidated=False)
    return xr.open_dataset(path, engine=engine, chunks={}, consolidated=False)


def timed_read(path: Path, engine: str) -> tuple[float, Counter[str]]:
    """Seconds to open the dataset and read every variable, and the requests that took. The values are dropped
    before returning, so the next read does not run on memory this one still holds."""
    from xarray_zarrmax.core.accounting import request_counts

    counts: Counter[str] = Counter()
    with request_counts() as ours:
        start = time.perf_counter()
        ds = _open(path, engine, counts)
        values = [ds[name].values for name in ds.data_vars]
        seconds = time.perf_counter() - start
    del values, ds
    for kind in ("get", "list", "head"):
        counts[kind] += ours.total(kind)  # engine="zarrmax" counts its own; engine="zarr" is counted above
    return seconds, counts


def read_values(path: Path, engine: str) -> dict[str, np.ndarray]:
    ds = _open(path, engine, Counter())
    return {str(name): ds[name].values for name in ds.data_vars}


def main(argv: list[str] | None = None) -> int:
    import dask

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="demo_data", help="where to write the dataset (default: demo_data)")
    parser.add_argument("--repeat", type=int, default=5, help="timed reads per engine; the median is printed")
    args = parser.parse_args(argv)

    path = make_dataset(Path(args.dir) / "era5_demo.zarr")
    nbytes = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    print(f"dataset: {path} ({nbytes / 1e6:.0f} MB on disk, 2 variables, 48x182x360 shards of 24x91x90 chunks)")
    engines = ("zarr", "zarrmax")
    with dask.config.set(scheduler="threads"):
        for engine in engines:
            timed_read(path, engine)  # warm-up: imports, page cache, thread pools; not timed
        runs: dict[str, list[tuple[float, Counter[str]]]] = {e: [] for e in engines}
        for _ in range(args.repeat):  # alternate, so both engines see the same machine state
            for engine in engines:
                runs[engine].append(timed_read(path, engine))
        decoded = sum(v.nbytes for v in read_values(path, "zarr").values())
        same = _identical(read_values(path, "zarr"), read_values(path, "zarrmax"))
    medians = {e: statistics.median(t for t, _ in runs[e]) for e in engines}
    print(f"open + full read of {decoded / 1e6:.0f} MB (dask, threaded scheduler), median of {args.repeat}:")
    for engine in engines:
        counts = runs[engine][-1][1]
        print(f"  engine={engine!r:10} {medians[engine]:.3f} s  {decoded / medians[engine] / 1e9:5.2f} GB/s  "
              f"requests: {counts['get']} GET, {counts['list']} LIST, {counts['head']} HEAD")
    print(f"speed-up: {medians['zarr'] / medians['zarrmax']:.2f}x; values identical: {same}")
    return 0 if same else 1


def _identical(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)


if __name__ == "__main__":
    raise SystemExit(main())
