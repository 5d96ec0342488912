"""Seed 001's field, layouts, operations and stores (issue 13): what the access-pattern table measures and the
asv access benchmarks time.

Data: a float32 (time, lat, lon) field, smooth (a latitude profile, a travelling daily wave, a slow seasonal
term) plus Gaussian noise, quantized to 1/16 so zstd (level 3) compresses it as it does real model output
(about half). Layouts (`layouts`): seed 001's extremes (contiguous in time; one map per chunk), its
compromise (120 x 100 x 50, each scaled by our shape / GEOS-FP's), and small inner chunks in large shards of
several shapes. Operations (`operations`, seed 001's, at its places and times): the time series at Seattle;
the map at 2020-06-01T00; the time series of the mean over Ohio; the map of the mean over 2020-06-01T00-05.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DIMS = ("time", "lat", "lon")
SEED_SHAPE = (5136, 721, 1152)  # GEOS-FP in seed 001, (time, lat, lon)
DEFAULT_SHAPE = (1000, 361, 576)  # 0.83 GB of float32, about 20 minutes a run here: see the module docstring
QUICK_SHAPE = (96, 73, 144)
OPS = ("timeseries", "map", "region-mean", "map-mean")
ENGINES = ("zarr", "zarrmax")
LIMITS = ("replay", "decode")  # the physical limits of a zarrmax read (access_limits.py)
MAP_TIME = np.datetime64("2020-06-01T00")
POINT = (47.61, -122.19)  # Seattle (lat, lon)
REGION = ((38.21, 42.25), (-84.91, -80.5))  # Ohio
MEAN_STEPS = 6
MIXES: dict[str, dict[str, float]] = {
    "timeseries-heavy": {"timeseries": 0.4, "region-mean": 0.4, "map": 0.1, "map-mean": 0.1},
    "map-heavy": {"timeseries": 0.1, "region-mean": 0.1, "map": 0.4, "map-mean": 0.4},
    "balanced": {"timeseries": 0.25, "region-mean": 0.25, "map": 0.25, "map-mean": 0.25},
}
MB = 1e6
EXACT = {"coalesce_gap": 0, "full_shard_fraction": 1.0}  # the reader's settings that fetch only what is touched


# -- layouts and data -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One stored layout of the variable "v": inner chunks, shards (None: unsharded), and where it came from
    ("seed": seed 001's; "sharded": ours; "advised": the advisor's own pick for a mix)."""

    name: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    kind: str

    @property
    def key(self) -> str:
        inner = "x".join(map(str, self.chunks))
        return f"{inner}" + (f"-in-{'x'.join(map(str, self.shards))}" if self.shards else "") + ".zarr"

    @property
    def label(self) -> str:
        inner = "x".join(map(str, self.chunks))
        return f"{self.name}: {inner}" + (f" in {'x'.join(map(str, self.shards))}" if self.shards else "")

    def model(self) -> Any:
        from xarray_zarrmax.advise import Layout

        return Layout(self.chunks, self.shards)


def layouts(shape: Sequence[int]) -> list[Spec]:
    """Seed 001's three layouts, and five of small chunks in large shards.

    The time-contiguous extreme keeps seed 001's 10 x 10 cells per chunk (scaling them with the grid would
    keep its 8,300 chunks per map at any shape: minutes per map for engine="zarr" at 10 requests in flight);
    the compromise is scaled per dimension by our shape / GEOS-FP's, as the issue asks."""
    t, y, x = shape

    def scaled(c: int, d: int) -> int:
        return max(1, min(shape[d], round(c * shape[d] / SEED_SHAPE[d])))

    def cover(n: int, c: int) -> int:  # a shard spanning the dimension: a multiple of the chunk
        return -(-n // c) * c

    cube = (max(4, t // 64), max(4, y // 24), max(4, x // 36))  # 15x15x16 at 1000x361x576: 14 kB
    tile = (max(2, t // 250), max(4, y // 12), max(4, x // 18))  # 4x30x32: 15 kB
    return [
        Spec("time-contiguous", (t, min(10, y), min(10, x)), None, "seed"),
        Spec("map-contiguous", (1, y, x), None, "seed"),
        Spec("compromise", (scaled(120, 0), scaled(100, 1), scaled(50, 2)), None, "seed"),
        Spec("cubes in time-series shards", cube, (cover(t, cube[0]), 8 * cube[1], 8 * cube[2]), "sharded"),
        Spec("cubes in map shards", cube, (8 * cube[0], cover(y, cube[1]), cover(x, cube[2])), "sharded"),
        Spec("cubes in cube shards", cube, (8 * cube[0], 8 * cube[1], 8 * cube[2]), "sharded"),
        Spec("tiles in column shards", tile, (cover(t, tile[0]) // 2 if t > 2 * tile[0] else cover(t, tile[0]),
                                              2 * tile[1], 2 * tile[2]), "sharded"),
        Spec("tiles in slab shards", tile, (16 * tile[0], cover(y, tile[1]), cover(x, tile[2])), "sharded"),
    ]


def coords(shape: Sequence[int]) -> dict[str, np.ndarray]:
    """Hourly times with 2020-06-01T00 at 60 % of the axis; a regular global grid."""
    t, y, x = shape
    start = MAP_TIME - np.timedelta64(int(0.6 * t), "h")
    return {"time": start + np.arange(t).astype("timedelta64[h]"),
            "lat": np.linspace(-90, 90, y), "lon": np.linspace(-180, 180, x, endpoint=False)}


def field(shape: Sequence[int], seed: int = 1) -> np.ndarray:
    """Smooth plus noise, quantized to 1/16 (float32), built a block of time steps at a time."""
    t, y, x = shape
    rng = np.random.default_rng(seed)
    lat = np.linspace(-np.pi / 2, np.pi / 2, y, dtype="f4")[None, :, None]
    lon = np.linspace(0, 2 * np.pi, x, endpoint=False, dtype="f4")[None, None, :]
    out = np.empty(shape, dtype="f4")
    for a in range(0, t, 64):
        b = min(t, a + 64)
        hours = np.arange(a, b, dtype="f4")[:, None, None]
        smooth = (250 + 40 * np.cos(lat) + 6 * np.cos(lat) * np.sin(2 * lon + 2 * np.pi * hours / 24)
                  + 3 * np.sin(3 * lat + lon + hours / 240))
        noisy = smooth + rng.normal(scale=0.4, size=(b - a, y, x)).astype("f4")
        out[a:b] = np.round(noisy * 16) / 16
    return out


def write_local(path: Path, spec: Spec, data: np.ndarray, shape: Sequence[int]) -> None:
    import xarray as xr
    from zarr.codecs import ZstdCodec

    import xarray_zarrmax

    ds = xr.Dataset({"v": (DIMS, data)}, coords=coords(shape))
    enc: dict[str, Any] = {"chunks": spec.chunks, "compressors": [ZstdCodec(level=3)]}
    if spec.shards is not None:
        enc["shards"] = spec.shards
    xarray_zarrmax.to_zarr(ds, str(path), encoding={"v": enc}, mode="w", consolidated=True)


def upload(root: Path, store: Any) -> int:
    """Every file under ``root`` PUT to ``store`` under its relative path; returns the bytes sent."""
    import obstore

    files = [p for p in root.rglob("*") if p.is_file()]

    async def run() -> None:
        sem = asyncio.Semaphore(32)

        async def one(p: Path) -> None:
            async with sem:
                await obstore.put_async(store, str(p.relative_to(root)), p.read_bytes())

        await asyncio.gather(*(one(p) for p in files))

    asyncio.run(run())
    return sum(p.stat().st_size for p in files)


# -- operations ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One operation: its index box (a slice or an index per dimension) and how it reduces."""

    name: str
    box: dict[str, int | slice]
    mean_over: tuple[str, ...]

    def run(self, ds: Any) -> np.ndarray:
        v = ds["v"].isel(self.box)
        return np.asarray((v.mean(list(self.mean_over)) if self.mean_over else v).values)

    def expected(self, data: np.ndarray) -> np.ndarray:
        sel = data[tuple(self.box.get(d, slice(None)) for d in DIMS)]
        axes = tuple(i for i, d in enumerate(d for d in DIMS if not isinstance(self.box.get(d), int))
                     if d in self.mean_over)
        return sel.mean(axis=axes, dtype="f8") if axes else sel

    def axes(self, shape: Sequence[int]) -> tuple[Any, ...]:
        from xarray_zarrmax.core.geometry import Axis

        out = []
        for d, n in zip(DIMS, shape, strict=True):
            k = self.box.get(d, slice(0, n))
            out.append(Axis(k, k + 1) if isinstance(k, int) else Axis(*k.indices(n)[:2]))
        return tuple(out)


def operations(shape: Sequence[int]) -> list[Op]:
    c = coords(shape)

    def nearest(values: np.ndarray, v: float) -> int:
        return int(np.argmin(np.abs(values - v)))

    def inclusive(values: np.ndarray, lo: float, hi: float) -> slice:
        idx = np.flatnonzero((values >= lo) & (values <= hi))
        if idx.size == 0:  # a coarse grid: the nearest cell
            i = nearest(values, (lo + hi) / 2)
            return slice(i, i + 1)
        return slice(int(idx[0]), int(idx[-1]) + 1)

    it = int(np.flatnonzero(c["time"] == MAP_TIME)[0])
    lat, lon = inclusive(c["lat"], *REGION[0]), inclusive(c["lon"], *REGION[1])
    return [
        Op("timeseries", {"lat": nearest(c["lat"], POINT[0]), "lon": nearest(c["lon"], POINT[1])}, ()),
        Op("map", {"time": it}, ()),
        Op("region-mean", {"lat": lat, "lon": lon}, ("lat", "lon")),
        Op("map-mean", {"time": slice(it, min(shape[0], it + MEAN_STEPS))}, ("time",)),
    ]


def check(label: str, got: np.ndarray, want: np.ndarray, exact: bool) -> None:
    ok = got.shape == want.shape and (np.array_equal(got, want) if exact else
                                      np.allclose(got, want, rtol=1e-5, atol=1e-4))
    if not ok:
        raise AssertionError(f"{label}: wrong values (shape {got.shape}, expected {want.shape})")


# -- stores --------------------------------------------------------------------------------------------------


@dataclass
class Store:
    """Where the layouts are read from: a local directory, or MinIO through the latency proxy."""

    kind: str  # "local" | "minio"
    root: Path  # local copies (the reference for stored bytes and indexes, and the local store itself)
    minio: Any = None
    bucket: str = ""
    proxied: str = ""  # the proxy's endpoint

    def open(self, spec: Spec, engine: str, counts: Counter[str] | None = None) -> Any:
        import xarray as xr
        import zarr

        from xarray_zarrmax.testing import counting_store

        if engine == "zarrmax":
            if self.kind == "local":
                return xr.open_dataset(str(self.root / spec.key), engine="zarrmax", chunks=None, consolidated=True)
            return xr.open_dataset(f"s3://{self.bucket}/{spec.key}", engine="zarrmax", chunks=None,
                                   consolidated=True, storage_options=self.minio.storage_options(self.proxied))
        store: Any = (zarr.storage.LocalStore(self.root / spec.key, read_only=True) if self.kind == "local" else
                      zarr.storage.ObjectStore(self.minio.obstore(self.bucket, spec.key, self.proxied),
                                               read_only=True))
        if counts is not None:
            store = counting_store(store, counts)
        return xr.open_dataset(store, engine="zarr", chunks=None, consolidated=True)

    def probe_target(self) -> tuple[str, dict[str, Any] | None]:
        if self.kind == "local":
            path = self.root / "probe"
            path.mkdir(exist_ok=True)
            return str(path), None
        return f"s3://{self.bucket}/probe/", self.minio.storage_options(self.proxied)

