"""Seed 001's four everyday operations on a GEOS-FP-like field in many layouts, against their floor, and the
layout advisor's predictions against the measured times (issue 13, parts 1 and 3).

    PYTHONPATH=. .venv/bin/python asv_bench/access_patterns.py --markdown docs/access_patterns.md \\
        --json access_patterns.json --plot docs/access_patterns

    [--shape T,Y,X] [--repeat N] [--quick] [--stores local,minio] [--latency-ms 20] [--no-search]

One run does everything below; ``--quick`` is a tiny setting (96 x 73 x 144, one repeat: about 3 minutes,
most of it writing and uploading the compromise layout's 9,000 chunks) for smoke tests. The default shape,
1000 x 361 x 576 (0.83 GB), is half the issue's 2000 x 361 x 576 example in time so that the whole run takes
about 20 minutes on a 2-core machine (extrapolated from 4.3 minutes for 500 x 181 x 288 at one repeat: the
extremes' full reads grow with the data, the rest mostly with the number of opens and requests); the issue's
shape (``--shape 2000,361,576``) should take about twice that.

Data: a float32 (time, lat, lon) field, smooth (a latitude profile, a travelling daily wave, a slow seasonal
term) plus Gaussian noise, quantized to 1/16 so zstd (level 3) compresses it as it does real model output
(about half). Layouts (`layouts`): seed 001's extremes (contiguous in time; one map per chunk), its
compromise (120 x 100 x 50, each scaled by our shape / GEOS-FP's), and small inner chunks in large shards of
several shapes. Each is written once to a local directory (``xarray_zarrmax.to_zarr``) and the same files are
uploaded to MinIO, read through toxiproxy adding ``--latency-ms`` to every response.

Operations (seed 001's, at its places and times): the time series at Seattle (47.61 N, 122.19 W); the map at
2020-06-01T00; the time series of the mean over Ohio (38.21-42.25 N, 84.91-80.5 W); the map of the mean over
2020-06-01T00-05 (6 steps). Coordinates become index ranges once (as ``.sel`` would pick them: nearest point,
inclusive ranges) and each operation is ``ds["v"].isel(...)`` (then ``.mean``) and ``.values``, with
``chunks=None``: xarray hands the whole selection to the backend in one call (no dask), for both engines.

Timing. Every timed call is a first access: a fresh ``xr.open_dataset`` (and, for engine="zarr", a new store
object), then the operation alone is timed -- the open is not. zarrmax caches shard indexes per process keyed
by ``(token, key)``, where the token is a new random id per ``open_dataset`` (``backend.ZarrmaxStore``); the
script checks that the open cached nothing and that the operation's indexes land under the new token only, so
every timed operation starts with a cold index cache. Rounds are interleaved (repeat i of every cell before
repeat i + 1 of any), each round in another seeded random order; medians are reported. Engine "zarr" runs at
zarr-python's defaults (``async.concurrency`` 10), zarrmax at its defaults. MinIO serves from this machine's
page cache, so "first access" is cold for the readers, not for the disk.

Counted in one untimed pass per cell before the timed rounds (which also checks the values of both engines
against the numpy data): requests and bytes -- zarrmax with ``xarray_zarrmax.request_counts()``, engine="zarr"
through ``testing.counting_store`` (a zarr ``WrapperStore`` counting every GET and the bytes returned) -- and
peak memory with ``tracemalloc`` (the peak of Python and NumPy allocations during the operation; buffers
held only on obstore's Rust side are not seen, so remote numbers are a lower bound).

Floor, per operation, layout and store: ``round trips x latency + bytes / raw-GET ceiling``, where the latency
(median tiny GET through the proxy; a tiny ``pread`` locally) and the ceiling (8 concurrent GETs of large
objects with obstore, or 8 threads reading large files; bytes/s, best of 3) are measured in the same run; the
bytes are what the operation needs: the stored bytes of the chunks it touches (read from each shard's index),
plus each touched shard's index once; the round trips are `advise_model.count_read`'s for those objects with
zarrmax's request budget (and no other limit). Targets (issue 13): on sharded layouts zarrmax fetches nothing
outside the touched chunks but the indexes; every operation within 1.5x of its floor; a sharded layout with a
performance bias (slowest / fastest of the four operations, seed 001's metric) of at most 2.

Physical limits, per zarrmax cell, timed in the same interleaved rounds (access_limits.py): "replay", the
reader's own requests for the operation (derived from the stored indexes and checked equal, in number and
bytes, to the reader's counted requests) sent raw -- obstore range GETs from a fresh client, each object's index
before its ranges, or ``pread`` of local files -- with nothing else; "decode", our zstd decoder alone on the
touched chunks' compressed bytes, already in memory. zarrmax's time against their sum says how much of a miss
of the floor is the store's per-request work and the decode (physical) and how much is the reader's own.
Sharded cells are also read with ``coalesce_gap=0, full_shard_fraction=1`` (`EXACT`, counted and timed): the
settings under which the reader fetches only the touched chunks and the indexes.

Validation: the advisor is calibrated by its own probes (``advise(..., store=...)``: `advise_probe.probe_store`
on the same proxied MinIO and on a local directory, `probe_decoder` on a sample of the data) and predicts the
seconds of each operation (given to it as user-defined selections, exactly the boxes read) on every measured
layout: Spearman rank correlation per operation and store (target >= 0.9); then for three pattern mixes, the
advisor's top layout among the measured ones, and the top of its own search over candidate layouts (written
and measured too, zarrmax only), each against the best measured layout for that mix (target <= 1.25x).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # access_limits, beside this script

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
        from xarray_zarrmax.advise.model import Layout

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


def measure_floor(store: Store, size: int, count: int = 8) -> dict[str, float]:
    """Latency (median of tiny reads) and the raw-GET ceiling (``count`` large objects read at once, no decode,
    best of 3) of a store, in bytes/s."""
    payload = [os.urandom(size) for _ in range(count)]
    if store.kind == "local":
        folder = store.root / "ceiling"
        folder.mkdir(exist_ok=True)
        for i, p in enumerate(payload):
            (folder / f"o{i}").write_bytes(p)
        (folder / "tiny").write_bytes(b"x" * 16)
        os.sync()

        def tiny() -> None:
            fd = os.open(folder / "tiny", os.O_RDONLY)
            os.pread(fd, 16, 0)
            os.close(fd)

        # Into buffers allocated and touched once: fresh pages per read would time the page faults (this
        # machine's host reclaims freed memory; the ceiling swung 1.1-5.7 GB/s between runs with read_bytes).
        buffers = [np.ones(size, dtype=np.uint8) for _ in range(count)]

        def read_into(i: int) -> None:
            fd = os.open(folder / f"o{i}", os.O_RDONLY)
            try:
                os.preadv(fd, [buffers[i]], 0)
            finally:
                os.close(fd)

        def big() -> None:
            with ThreadPoolExecutor(count) as ex:
                list(ex.map(read_into, range(count)))
    else:
        import obstore

        direct = store.minio.obstore(store.bucket, "ceiling")
        for i, p in enumerate(payload):
            obstore.put(direct, f"o{i}", p)
        obstore.put(direct, "tiny", b"x" * 16)
        proxied = store.minio.obstore(store.bucket, "ceiling", store.proxied)

        def tiny() -> None:
            obstore.get(proxied, "tiny").bytes()

        def big() -> None:
            async def run() -> None:
                got = await asyncio.gather(*(obstore.get_async(proxied, f"o{i}") for i in range(count)))
                await asyncio.gather(*(g.bytes_async() for g in got))

            asyncio.run(run())
    tiny()
    lat = []
    for _ in range(21):
        t0 = time.perf_counter()
        tiny()
        lat.append(time.perf_counter() - t0)
    latency = statistics.median(lat)
    big()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        big()
        best = min(best, time.perf_counter() - t0)
    net = best - latency if store.kind == "minio" else best
    return {"latency_s": latency, "ceiling_bps": size * count / max(net, 1e-6)}


# -- what an operation needs on a layout -----------------------------------------------------------------------


def stored_objects(path: Path) -> dict[tuple[int, ...], Path]:
    root = path / "v" / "c"
    return {tuple(int(p) for p in f.relative_to(root).parts): f for f in root.rglob("*") if f.is_file()}


EXACT = {"coalesce_gap": 0, "full_shard_fraction": 1.0}  # the reader's settings that fetch only what is touched


def needs(spec: Spec, op: Op, shape: Sequence[int], path: Path) -> dict[str, Any]:
    """What an operation needs on a stored layout and the reader's requests for it (`access_limits.Needed`),
    from a local file (``local``) and from an object store (``remote``), at the default settings and with
    `EXACT` (the ``_exact`` twins)."""
    from access_limits import reader_requests

    import xarray_zarrmax
    from xarray_zarrmax.core.geometry import plan_reads

    outer = spec.shards or spec.chunks
    reads = plan_reads(op.axes(shape), shape, outer, spec.chunks)
    out = {}
    for suffix, settings in (("", {}), ("_exact", EXACT)):
        with xarray_zarrmax.set_config(**settings):
            for where in ("local", "remote"):
                out[where + suffix] = reader_requests(path, spec.chunks, spec.shards, reads, local=where == "local")
    return out


def floor_round_trips(spec: Spec, op: Op, shape: Sequence[int], chunk_enc: int, local: bool) -> int:
    """Round trips the operation needs with zarrmax's request budget: `advise_model.count_read` for the objects
    it touches, with no limit on objects in flight but the budget."""
    from xarray_zarrmax import get_config
    from xarray_zarrmax.advise.model import Reader, count_read

    c = get_config()
    reader = Reader(concurrency=c.concurrency, full_shard_fraction=c.full_shard_fraction,
                    coalesce_gap=c.coalesce_gap, split_size=c.split_size, inflight_bytes=2**62, local=local)
    return count_read([op.axes(shape)], shape, 4, spec.model(), chunk_enc, reader).round_trips


# -- measuring ------------------------------------------------------------------------------------------------


def _index_tokens() -> set[str]:
    from xarray_zarrmax.read import fetch

    return {token for token, _ in list(fetch._index_cache)}


def counted_pass(store: Store, spec: Spec, engine: str, op: Op, data: np.ndarray,
                 need: Mapping[str, Any]) -> dict[str, Any]:
    """One untimed read: values checked, requests and bytes counted, tracemalloc's peak. For zarrmax the
    requests and bytes must be exactly those `needs` derived (so the replay replays the reader's requests); on
    sharded layouts a second read with `EXACT` settings is counted and checked too."""
    import xarray_zarrmax

    counts: Counter[str] = Counter()
    ds = store.open(spec, engine, counts if engine == "zarr" else None)
    counts.clear()  # the open's own requests are not the operation's
    tracemalloc.start()
    try:
        if engine == "zarrmax":
            with xarray_zarrmax.request_counts() as c:
                got = op.run(ds)
            requests, nbytes = c.total("get"), c.total("bytes")
        else:
            got = op.run(ds)
            requests, nbytes = counts["get"], counts["bytes"]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    where = f"{engine} {store.kind} {spec.label} {op.name}"
    check(where, got, op.expected(data), exact=not op.mean_over)
    out = {"requests": requests, "bytes": nbytes, "peak_bytes": peak}
    if engine == "zarrmax":
        side = "local" if store.kind == "local" else "remote"
        expect = need[side]
        if (requests, nbytes) != (expect.requests, expect.nbytes):
            raise AssertionError(f"{where}: {requests} requests for {nbytes} bytes, its reader's rules send "
                                 f"{expect.requests} for {expect.nbytes}")
        if spec.shards is not None:
            ds = store.open(spec, engine)
            with xarray_zarrmax.set_config(**EXACT), xarray_zarrmax.request_counts() as c:
                check(where, op.run(ds), op.expected(data), exact=not op.mean_over)
            exact = need[side + "_exact"]
            if (c.total("get"), c.total("bytes")) != (exact.requests, exact.nbytes):
                raise AssertionError(f"{where}, {EXACT}: {c.total('get')} requests for {c.total('bytes')} bytes, "
                                     f"its reader's rules send {exact.requests} for {exact.nbytes}")
            out |= {"exact_requests": c.total("get"), "exact_bytes": c.total("bytes")}
    return out


def timed(store: Store, spec: Spec, engine: str, op: Op) -> float:
    """A first access: a fresh open (not timed), then the operation (timed) with a cold shard index cache;
    ``zarrmax_exact``: zarrmax with `EXACT` settings."""
    import xarray_zarrmax

    before = _index_tokens()
    settings = EXACT if engine == "zarrmax_exact" else {}
    with xarray_zarrmax.set_config(**settings):
        ds = store.open(spec, engine.removesuffix("_exact"))
        if engine != "zarr" and _index_tokens() != before:
            raise AssertionError("opening cached shard indexes: the timed read would not start cold")
        t0 = time.perf_counter()
        op.run(ds)
        elapsed = time.perf_counter() - t0
    if engine != "zarr" and len(_index_tokens() - before) > 1:
        raise AssertionError("one open's indexes were cached under more than one token")
    return elapsed


def limit(store: Store, spec: Spec, what: str, needed: Any, pool: Any) -> float:
    """``replay``: the reader's requests alone (`access_limits.replay_*`); ``decode``: the decoder alone on
    the touched chunks (`access_limits.decode_alone`; the bytes are read first, not timed)."""
    from access_limits import decode_alone, load_frames, replay_local, replay_remote

    import xarray_zarrmax

    threads = xarray_zarrmax.get_config().threads
    if what == "decode":
        return decode_alone(load_frames(store.root / spec.key, needed), needed, pool, threads)
    if store.kind == "local":
        return replay_local(store.root / spec.key, needed, pool, threads)
    client = store.minio.obstore(store.bucket, spec.key, store.proxied)  # a fresh client, as an open makes
    return replay_remote(client, needed, xarray_zarrmax.get_config().concurrency)


# -- model ---------------------------------------------------------------------------------------------------


def rank_correlation(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rho: Pearson's correlation of the ranks (ties share their mean rank)."""
    def ranks(x: Sequence[float]) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        order = np.argsort(x, kind="mergesort")
        r = np.empty(len(x))
        r[order] = np.arange(len(x), dtype=float)
        for v in np.unique(x):
            same = x == v
            r[same] = r[same].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    if len(ra) < 2 or ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def patterns_for(ops: Sequence[Op], weights: Mapping[str, float]) -> dict[str, Any]:
    """The operations as the advisor's user-defined patterns: ``name -> (weight, {dim: slice or int})``."""
    return {op.name: (weights[op.name], dict(op.box)) for op in ops}


# -- the run -------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="seed 001's access patterns, their floor, the advisor's model")
    parser.add_argument("--shape", help=f"T,Y,X (default {','.join(map(str, DEFAULT_SHAPE))})")
    parser.add_argument("--repeat", type=int, help="timed first accesses per cell (default 3; --quick: 1)")
    parser.add_argument("--quick", action="store_true", help=f"tiny: shape {QUICK_SHAPE}, 1 repeat")
    parser.add_argument("--stores", default="local,minio")
    parser.add_argument("--latency-ms", type=int, default=20)
    parser.add_argument("--no-search", action="store_true",
                        help="skip writing and measuring the advisor's own top layout per mix")
    parser.add_argument("--markdown", help="write the tables here too")
    parser.add_argument("--json")
    parser.add_argument("--plot", help="PNG prefix: PREFIX-heatmap.png, PREFIX-predicted.png")
    args = parser.parse_args(argv)
    shape = tuple(int(s) for s in args.shape.split(",")) if args.shape else (QUICK_SHAPE if args.quick else
                                                                             DEFAULT_SHAPE)
    repeat = args.repeat or (1 if args.quick else 3)
    kinds = args.stores.split(",")
    started = time.perf_counter()
    result = run(shape, repeat, kinds, args.latency_ms, search=not args.no_search, quick=args.quick)
    result["wall_s"] = time.perf_counter() - started
    text = report(result)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    if args.plot:
        plot(result, args.plot)
    return 0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run(shape: tuple[int, ...], repeat: int, kinds: list[str], latency_ms: int, *, search: bool,
        quick: bool) -> dict[str, Any]:
    import xarray as xr

    import xarray_zarrmax
    from xarray_zarrmax.advise.advisor import rank
    from xarray_zarrmax.storage import sources as zstores
    from xarray_zarrmax.testing import MinioServer, Toxiproxy, minio_binary, toxiproxy_binaries

    tmp = Path(tempfile.mkdtemp(prefix="zarrmax-access-"))
    minio = proxy = None
    try:
        data = field(shape)
        ops = operations(shape)
        specs = layouts(shape)
        log(f"field {shape}: {data.nbytes / MB:.0f} MB; writing {len(specs)} layouts")
        t0 = time.perf_counter()
        for spec in specs:
            t1 = time.perf_counter()
            write_local(tmp / spec.key, spec, data, shape)
            log(f"  {spec.label}: written in {time.perf_counter() - t1:.1f} s")
        stores: dict[str, Store] = {}
        if "local" in kinds:
            stores["local"] = Store("local", tmp)
        if "minio" in kinds:
            binary, toxi = minio_binary(), toxiproxy_binaries()
            if binary is None or toxi is None:
                raise SystemExit("MinIO/toxiproxy not found: run `bash ci/install_services.sh`")
            minio = MinioServer(binary).start()
            proxy = Toxiproxy(toxi[0]).start()
            bucket = minio.make_bucket("access")
            endpoint = proxy.proxy("s3", minio.port)
            if latency_ms:
                proxy.add_toxic("s3", "latency", latency=latency_ms)
            stores["minio"] = Store("minio", tmp, minio, bucket, endpoint)
            t1 = time.perf_counter()
            for spec in specs:
                upload(tmp / spec.key, minio.obstore(bucket, spec.key))
            log(f"  uploaded to MinIO in {time.perf_counter() - t1:.1f} s")
        write_s = time.perf_counter() - t0
        # Local files written less than RACY_WINDOW_NS ago are never index-cached; wait them out so both stores
        # read settled data (no cached index crosses opens anyway: see the module docstring).
        time.sleep(zstores.RACY_WINDOW_NS / 1e9)
        os.sync()

        # Floors, calibration and the advisor (before measuring: its own picks are measured too).
        floors = {k: measure_floor(s, (2 if quick else 16) * 2**20) for k, s in stores.items()}
        # the decoder probe reads the first time steps: cheap on the map-contiguous layout
        sample = xr.open_dataset(str(tmp / specs[1].key), engine="zarrmax", chunks=None, consolidated=True)
        calibration: dict[str, Any] = {}
        advised: dict[str, dict[str, str]] = {}
        for kind, store in stores.items():
            target, options = store.probe_target()
            report0 = xarray_zarrmax.advise.advisor(sample, patterns_for(ops, MIXES["balanced"]), store=target,
                                            storage_options=options, layouts=[s.model() for s in specs],
                                            progress=False)
            calibration[kind] = {"costs": report0.costs, "reader": report0.reader}
            if search:
                advised[kind] = {}
                for mix, weights in MIXES.items():
                    top = rank(shape, DIMS, 4, patterns_for(ops, weights), costs=report0.costs,
                               reader=report0.reader)[0].layout
                    existing = next((s for s in specs if s.model() == top), None)
                    if existing is None:
                        existing = Spec(f"advised ({kind}, {mix})", top.chunks, top.shards, "advised")
                        dup = next((s for s in specs if s.key == existing.key), None)
                        if dup is None:
                            specs.append(existing)
                            write_local(tmp / existing.key, existing, data, shape)
                            if minio is not None:
                                upload(tmp / existing.key, minio.obstore(stores["minio"].bucket, existing.key))
                        else:
                            existing = dup
                    advised[kind][mix] = existing.key
        if search:
            time.sleep(zstores.RACY_WINDOW_NS / 1e9)
            os.sync()

        # Stored sizes and what each operation needs.
        stored = {s.key: sum(p.stat().st_size for p in (tmp / s.key / "v" / "c").rglob("*") if p.is_file())
                  for s in specs}
        n_chunks = {s.key: math.prod(-(-n // c) for n, c in zip(shape, s.chunks, strict=True)) for s in specs}
        need = {(s.key, op.name): needs(s, op, shape, tmp / s.key) for s in specs for op in ops}

        # Counted, checked passes, then interleaved timed rounds: the reads, zarrmax with EXACT settings on
        # sharded layouts, and the physical limits of every zarrmax cell (the reader's requests replayed, the
        # decoder alone).
        reads = [(s, e, op) for s in specs for e in ENGINES for op in ops if e == "zarrmax" or s.kind != "advised"]
        cells = reads + [(s, e, op) for s in specs for e in (*LIMITS, "zarrmax_exact") for op in ops
                         if e != "zarrmax_exact" or s.shards is not None]
        counted: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        times: dict[tuple[str, str, str, str], list[float]] = {}
        rng = np.random.default_rng(0)
        pool = ThreadPoolExecutor(xarray_zarrmax.get_config().threads)
        for kind, store in stores.items():
            side = "local" if kind == "local" else "remote"
            log(f"{kind}: counted pass over {len(reads)} cells")
            for spec, engine, op in reads:
                counted[(kind, spec.key, engine, op.name)] = counted_pass(store, spec, engine, op, data,
                                                                          need[(spec.key, op.name)])
            for i in range(repeat):
                log(f"{kind}: round {i + 1}/{repeat} ({len(cells)} cells)")
                for j in rng.permutation(len(cells)):
                    spec, engine, op = cells[j]
                    if engine in LIMITS:
                        t = limit(store, spec, engine, need[(spec.key, op.name)][side], pool)
                    else:
                        t = timed(store, spec, engine, op)
                    times.setdefault((kind, spec.key, engine, op.name), []).append(t)
        pool.shutdown()
        measure_s = time.perf_counter() - t0 - write_s
    finally:
        if proxy is not None:
            proxy.stop()
        if minio is not None:
            minio.close()
        shutil.rmtree(tmp, ignore_errors=True)

    return assemble(shape, repeat, latency_ms, specs, ops, stores, floors, calibration, advised, stored, n_chunks,
                    need, counted, times, write_s, measure_s, data.nbytes)


def assemble(shape: tuple[int, ...], repeat: int, latency_ms: int, specs: list[Spec], ops: list[Op],
             stores: Mapping[str, Store], floors: Mapping[str, Any], calibration: Mapping[str, Any],
             advised: Mapping[str, Mapping[str, str]], stored: Mapping[str, int], n_chunks: Mapping[str, int],
             need: Mapping[tuple[str, str], dict[str, int]], counted: Mapping[tuple[str, str, str, str], Any],
             times: Mapping[tuple[str, str, str, str], list[float]], write_s: float, measure_s: float,
             nbytes: int) -> dict[str, Any]:
    """Every number of the run as plain rows (for the tables, the JSON and the plots)."""
    from dataclasses import asdict

    from xarray_zarrmax.advise.advisor import rank

    rows = []
    for kind in stores:
        costs, reader = calibration[kind]["costs"], calibration[kind]["reader"]
        fl = floors[kind]
        predicted = {}
        for c in rank(shape, DIMS, 4, patterns_for(ops, {o.name: 1.0 for o in ops}), costs=costs, reader=reader,
                      layouts=[s.model() for s in specs]):
            for name, p in c.predictions.items():
                predicted[(str(c.layout), name)] = p
        for spec in specs:
            chunk_enc = max(1, stored[spec.key] // n_chunks[spec.key])
            for op in ops:
                nd = need[(spec.key, op.name)]["local" if kind == "local" else "remote"]
                needed = nd.touched_nbytes + nd.index_nbytes
                rt = floor_round_trips(spec, op, shape, chunk_enc, kind == "local")
                floor = rt * fl["latency_s"] + needed / fl["ceiling_bps"]
                p = predicted[(str(spec.model()), op.name)]
                row = {"store": kind, "layout": spec.key, "label": spec.label, "kind": spec.kind, "op": op.name,
                       "sharded": spec.shards is not None,
                       "needed_bytes": needed, "touched_bytes": nd.touched_nbytes, "touched_chunks": len(nd.chunks),
                       "index_bytes": nd.index_nbytes, "reader_bytes": nd.nbytes, "reader_requests": nd.requests,
                       "objects": len(nd.objects), "whole_shards": nd.whole if spec.shards else 0,
                       "floor_round_trips": rt, "floor_s": floor,
                       "predicted_s": p.seconds, "predicted_requests": p.counts.requests,
                       "predicted_bytes": p.counts.bytes, "predicted_round_trips": p.counts.round_trips}
                for engine in (*ENGINES, *LIMITS, "zarrmax_exact"):
                    key = (kind, spec.key, engine, op.name)
                    if key not in times:
                        continue
                    row[f"{engine}_s"] = statistics.median(times[key])
                    row[f"{engine}_all_s"] = times[key]
                    row |= {f"{engine}_{k}": v for k, v in counted.get(key, {}).items()}
                rows.append(row)
    return {
        "shape": list(shape), "repeat": repeat, "latency_ms": latency_ms, "nbytes": nbytes,
        "layouts": [{"key": s.key, "label": s.label, "name": s.name, "kind": s.kind, "chunks": s.chunks,
                     "shards": s.shards, "stored_bytes": stored[s.key], "chunks_count": n_chunks[s.key]}
                    for s in specs],
        "ops": [{"name": o.name, "box": {k: (v if isinstance(v, int) else [v.start, v.stop]) for k, v in o.box.items()}}
                for o in ops],
        "floors": dict(floors),
        "calibration": {k: {"costs": asdict(v["costs"]), "reader": asdict(v["reader"])}
                        for k, v in calibration.items()},
        "advised": {k: dict(v) for k, v in advised.items()},
        "rows": rows, "write_s": write_s, "measure_s": measure_s,
    }


# -- report ---------------------------------------------------------------------------------------------------


def _rows(result: Mapping[str, Any], store: str, **match: Any) -> list[dict[str, Any]]:
    return [r for r in result["rows"] if r["store"] == store and all(r[k] == v for k, v in match.items())]


def bias(result: Mapping[str, Any], store: str, layout: str, engine: str) -> float:
    t = [r[f"{engine}_s"] for r in _rows(result, store, layout=layout) if f"{engine}_s" in r]
    return max(t) / min(t) if len(t) == len(OPS) else float("nan")


def mix_scores(result: Mapping[str, Any], store: str, weights: Mapping[str, float], key: str) -> dict[str, float]:
    """Per layout, sum of weight x ``key`` (zarrmax_s or predicted_s) over the operations."""
    out: dict[str, float] = {}
    for r in _rows(result, store):
        if key in r:
            out[r["layout"]] = out.get(r["layout"], 0.0) + weights[r["op"]] * r[key]
    return out


def _curve_text(curve: Sequence[Sequence[float]]) -> str:
    """The probed decode rate per chunk size, as ``(4 kB: 430, 16 kB: 710, ...)`` MB/s."""
    if not curve:
        return ""
    return " (by chunk size: " + ", ".join(f"{n / 1e3:.0f} kB {r / 1e6:.0f}" for n, r in curve) + ")"


def validation(result: Mapping[str, Any]) -> dict[str, Any]:
    stores = sorted({r["store"] for r in result["rows"]})
    kinds = {lay["key"]: lay["kind"] for lay in result["layouts"]}
    rho = {(s, op): rank_correlation([r["predicted_s"] for r in _rows(result, s, op=op)],
                                     [r["zarrmax_s"] for r in _rows(result, s, op=op)])
           for s in stores for op in OPS}
    mixes = []
    for s in stores:
        for mix, weights in MIXES.items():
            measured = mix_scores(result, s, weights, "zarrmax_s")
            pred = mix_scores(result, s, weights, "predicted_s")
            chosen = [k for k in measured if kinds[k] != "advised"]
            best = min(chosen, key=measured.__getitem__)
            pick = min(chosen, key=pred.__getitem__)
            searched = result["advised"].get(s, {}).get(mix)
            mixes.append({"store": s, "mix": mix, "best": best, "best_s": measured[best], "pick": pick,
                          "pick_ratio": measured[pick] / measured[best], "searched": searched,
                          "searched_ratio": measured[searched] / measured[best] if searched else float("nan"),
                          "searched_predicted_s": pred.get(searched, float("nan")) if searched else float("nan")})
    return {"rho": rho, "mixes": mixes}


def physical_ratio(row: Mapping[str, Any]) -> float:
    """zarrmax's time against its physical limits: the reader's requests replayed, then the decode alone."""
    return row["zarrmax_s"] / (row["replay_s"] + row["decode_s"])


def overlap_ratio(row: Mapping[str, Any]) -> float:
    """zarrmax's time against the slower of its two limits: what a reader overlapping them perfectly takes."""
    return row["zarrmax_s"] / max(row["replay_s"], row["decode_s"])


def _median_of(rows: Sequence[Mapping[str, Any]], num: str, den: str) -> float:
    return statistics.median(r[num] / r[den] for r in rows) if rows else math.nan


def _exact_text() -> str:
    return ", ".join(f"{k}={v:g}" for k, v in EXACT.items())


def report(result: Mapping[str, Any]) -> str:
    labels = {lay["key"]: lay["label"] for lay in result["layouts"]}
    kinds = {lay["key"]: lay["kind"] for lay in result["layouts"]}
    stores = sorted({r["store"] for r in result["rows"]})
    out = []
    shape = "x".join(map(str, result["shape"]))
    out.append(f"GEOS-FP-like float32 field {shape} (time x lat x lon, {result['nbytes'] / MB:.0f} MB), zstd level "
               f"3; MinIO behind toxiproxy +{result['latency_ms']} ms and local disk; median of {result['repeat']} "
               f"first accesses per cell (fresh open, not timed; cold index cache), chunks=None. Run took "
               f"{result['wall_s'] / 60:.1f} min (writing {result['write_s']:.0f} s).")
    out.append("")
    out.append("| layout | kind | stored MB | objects stored |")
    out.append("|---|---|---|---|")
    for lay in result["layouts"]:
        objects = lay["chunks_count"] if not lay["shards"] else math.prod(
            -(-n // s) for n, s in zip(result["shape"], lay["shards"], strict=True))
        out.append(f"| {lay['label']} | {lay['kind']} | {lay['stored_bytes'] / MB:.1f} | {objects} |")
    for s in stores:
        fl = result["floors"][s]
        out.append("")
        out.append(f"### {s}: latency {fl['latency_s'] * 1e3:.3g} ms, raw-GET ceiling "
                   f"{fl['ceiling_bps'] / 1e9:.2f} GB/s")
        out.append("")
        out.append("Wall time of the operation (s, median), zarr / zarrmax, and seed 001's performance bias "
                   "(slowest / fastest of the four operations):")
        out.append("")
        out.append("| layout | " + " | ".join(OPS) + " | bias zarr | bias zarrmax |")
        out.append("|---" * (len(OPS) + 3) + "|")
        for key in labels:
            rs = {r["op"]: r for r in _rows(result, s, layout=key)}
            cells = [f"{rs[o]['zarr_s']:.3f} / {rs[o]['zarrmax_s']:.3f}" if "zarr_s" in rs[o] else
                     f"- / {rs[o]['zarrmax_s']:.3f}" for o in OPS]
            out.append(f"| {labels[key]} | " + " | ".join(cells) + f" | {bias(result, s, key, 'zarr'):.1f} | "
                       f"{bias(result, s, key, 'zarrmax'):.1f} |")
        out.append("")
        out.append("Requests and MB fetched by the operation (zarr / zarrmax), and tracemalloc peak MB "
                   "(zarr / zarrmax):")
        out.append("")
        out.append("| layout | " + " | ".join(f"{o} requests | {o} MB | {o} peak MB" for o in OPS) + " |")
        out.append("|---" * (3 * len(OPS) + 1) + "|")
        for key in labels:
            rs = {r["op"]: r for r in _rows(result, s, layout=key)}
            cells = []
            for o in OPS:
                r = rs[o]
                z = "zarr_requests" in r
                cells += [f"{r['zarr_requests'] if z else '-'} / {r['zarrmax_requests']}",
                          f"{r['zarr_bytes'] / MB if z else float('nan'):.2f} / {r['zarrmax_bytes'] / MB:.2f}",
                          f"{r['zarr_peak_bytes'] / MB if z else float('nan'):.1f} / "
                          f"{r['zarrmax_peak_bytes'] / MB:.1f}"]
            out.append(f"| {labels[key]} | " + " | ".join(cells) + " |")
        out.append("")
        out.append("Floor = round trips x latency + needed bytes / raw-GET ceiling (needed: the touched chunks' "
                   "stored bytes plus each touched shard's index); measured / floor per engine; predicted: the "
                   "advisor's model, calibrated by its probes. The floor has no CPU term: on local disk, where "
                   "the latency is microseconds, it is a lower bound no Python reader approaches. \"reader round "
                   "trips\": the model's count for zarrmax, whose objects in flight are also bounded by "
                   "inflight_bytes (each fetch as it is sent: a whole object at its decoded size, an index or a "
                   "shard's ranges at their size). The physical limits, measured in the same rounds: \"replay\", "
                   "the reader's own requests (checked equal to its counted ones) sent raw with nothing else; "
                   "\"decode\", our decoder alone on the touched chunks, already in memory; zarrmax against "
                   "their sum (read then decode, both stages on the same cores) and against the slower of the two "
                   "(the stages overlapped perfectly):")
        out.append("")
        out.append("| layout | op | round trips | reader round trips | needed MB | floor s | replay s | decode s | "
                   "zarrmax s | zarrmax / floor | zarrmax / (replay + decode) | zarrmax / max(replay, decode) | "
                   "zarr / floor | predicted s | predicted / zarrmax |")
        out.append("|---" * 15 + "|")
        for r in _rows(result, s):
            z = f"{r['zarr_s'] / r['floor_s']:.1f}x" if "zarr_s" in r else "-"
            out.append(f"| {labels[r['layout']]} | {r['op']} | {r['floor_round_trips']} | "
                       f"{r['predicted_round_trips']} | "
                       f"{r['needed_bytes'] / MB:.3f} | {r['floor_s']:.4f} | {r['replay_s']:.4f} | "
                       f"{r['decode_s']:.4f} | {r['zarrmax_s']:.4f} | "
                       f"{r['zarrmax_s'] / r['floor_s']:.2f}x | {physical_ratio(r):.2f}x | {overlap_ratio(r):.2f}x | "
                       f"{z} | "
                       f"{r['predicted_s']:.4f} | {r['predicted_s'] / r['zarrmax_s']:.2f} |")
        out.append("")
        out.append("Sharded layouts, zarrmax: bytes fetched beyond the touched chunks and one index per touched "
                   "shard, at the default settings (whole-shard GETs: the reader's choice when it needs >= "
                   "full_shard_fraction of a shard's chunks, to save the index's round trip; gaps: ranges merged "
                   f"within coalesce_gap, to save requests) and with {_exact_text()}:")
        out.append("")
        out.append("| layout | op | shards | whole-shard GETs | touched MB | index MB | fetched MB | beyond MB | "
                   "requests | s | exact: beyond MB | requests | s |")
        out.append("|---" * 13 + "|")
        for r in _rows(result, s):
            if not r["sharded"]:
                continue
            beyond = r["zarrmax_bytes"] - r["needed_bytes"]
            out.append(f"| {labels[r['layout']]} | {r['op']} | {r['objects']} | {r['whole_shards']} | "
                       f"{r['touched_bytes'] / MB:.3f} | {r['index_bytes'] / MB:.3f} | "
                       f"{r['zarrmax_bytes'] / MB:.3f} | {beyond / MB:.3f} | {r['zarrmax_requests']} | "
                       f"{r['zarrmax_s']:.4f} | {(r['zarrmax_exact_bytes'] - r['needed_bytes']) / MB:.3f} | "
                       f"{r['zarrmax_exact_requests']} | {r['zarrmax_exact_s']:.4f} |")
    out.append("")
    out.append("### Targets")
    out.append("")
    out.append("| target | store | result | detail |")
    out.append("|---|---|---|---|")
    for s in stores:
        sharded = [r for r in _rows(result, s) if r["sharded"]]
        over = [r for r in sharded if r["zarrmax_bytes"] > r["needed_bytes"]]
        over_exact = [r for r in sharded if r["zarrmax_exact_bytes"] > r["needed_bytes"]]
        extra = sum(r["zarrmax_bytes"] - r["needed_bytes"] for r in over)
        cost = statistics.median(r["zarrmax_exact_s"] / r["zarrmax_s"] for r in sharded) if sharded else math.nan
        more = (sum(r["zarrmax_exact_requests"] for r in sharded) / max(1, sum(r["zarrmax_requests"] for r in sharded)))
        out.append(f"| sharded: no byte beyond touched chunks + one index per shard | {s} | "
                   f"{'met' if not over_exact else 'missed'} with {_exact_text()} "
                   f"({len(sharded) - len(over_exact)}/{len(sharded)} operations); "
                   f"{'met' if not over else 'missed'} at the defaults ({len(sharded) - len(over)}/{len(sharded)}) | "
                   f"the defaults fetch {extra / MB:.2f} MB more in all (whole-shard GETs and ranges merged across "
                   f"gaps); the exact settings send {more:.1f}x the requests (all operations' requests summed) "
                   f"and take {cost:.2f}x the defaults' time (median of the per-operation ratios) |")
        rs = _rows(result, s)
        within = [r for r in rs if r["zarrmax_s"] <= 1.5 * r["floor_s"]]
        worst = sorted(rs, key=lambda r: -r["zarrmax_s"] / r["floor_s"])[:3]
        outside = [r for r in rs if r["zarrmax_s"] > 1.5 * r["floor_s"]]
        limited = [r for r in outside if physical_ratio(r) <= 1.5]
        rest = statistics.median([r["zarrmax_s"] - r["replay_s"] - r["decode_s"] for r in outside
                                  if physical_ratio(r) > 1.5] or [math.nan])
        out.append(f"| every operation within 1.5x of its floor (zarrmax) | {s} | "
                   f"{'met' if len(within) == len(rs) else 'missed'} | {len(within)}/{len(rs)}; worst: "
                   + ", ".join(f"{r['layout'].removesuffix('.zarr')} {r['op']} {r['zarrmax_s'] / r['floor_s']:.1f}x"
                               for r in worst)
                   + f". Of the {len(outside)} others, {len(limited)} are within 1.5x of their physical limits "
                   "measured in this run (replay + decode; median "
                   f"{statistics.median(physical_ratio(r) for r in outside) if outside else math.nan:.2f}x), "
                   f"{len([r for r in outside if overlap_ratio(r) <= 1.5])} within 1.5x of max(replay, decode) "
                   f"(median {statistics.median(overlap_ratio(r) for r in outside) if outside else math.nan:.2f}x): "
                   f"there the replay alone is {_median_of(outside, 'replay_s', 'floor_s'):.1f}x the floor and the "
                   f"decode alone {_median_of(outside, 'decode_s', 'floor_s'):.1f}x (medians)"
                   + (f"; the {len(outside) - len(limited)} beyond 1.5x spend a median {rest * 1e3:.1f} ms beyond "
                      "replay + decode (the reader's own work per object and chunk, xarray's indexing and mean)"
                      if len(outside) > len(limited) else "") + " |")
        biases = {lay["key"]: bias(result, s, lay["key"], "zarrmax") for lay in result["layouts"]
                  if lay["shards"]}
        ours = {k: v for k, v in biases.items() if kinds[k] == "sharded"}
        best = min(biases, key=biases.__getitem__) if biases else None
        best_ours = min(ours, key=ours.__getitem__) if ours else None
        out.append(f"| a sharded layout with bias <= 2 (zarrmax) | {s} | "
                   f"{'met' if best and biases[best] <= 2 else 'missed'} | best: "
                   f"{labels[best] if best else '-'} {biases.get(best, float('nan')):.2f}; of the five chosen "
                   f"beforehand: {labels[best_ours] if best_ours else '-'} {ours.get(best_ours, float('nan')):.2f} "
                   "(seed 001's best: 4) |")
    v = validation(result)
    out.append("")
    out.append("### Validation: the advisor's model against the measured times (zarrmax)")
    out.append("")
    for s in stores:
        c = result["calibration"][s]["costs"]
        out.append(f"- {s}: probed latency {c['latency_s'] * 1e3:.3g} ms, {c['request_bps'] / 1e6:.0f} MB/s per "
                   f"request, {c['aggregate_bps'] / 1e6:.0f} MB/s in all; zstd {c['decode_bps'] / 1e6:.0f} MB/s "
                   f"per thread{_curve_text(c.get('decode_curve', ()))}, ratio {c['ratio']:.2f}; "
                   f"work {c['request_s'] * 1e6:.0f} us per request, "
                   f"{c.get('connect_s', 0.0) * 1e6:.0f} us per connection opened, "
                   f"{c.get('index_s', 0.0) * 1e6:.0f} us per shard index and "
                   f"{c.get('index_entry_s', 0.0) * 1e9:.0f} ns per index entry, {c['chunk_s'] * 1e6:.0f} us per chunk")
    out.append("")
    out.append("Spearman rank correlation of predicted and measured seconds across layouts (target >= 0.9):")
    out.append("")
    out.append("| op | " + " | ".join(stores) + " |")
    out.append("|---" * (len(stores) + 1) + "|")
    for op in OPS:
        out.append(f"| {op} | " + " | ".join(
            f"{v['rho'][(s, op)]:.2f} ({'met' if v['rho'][(s, op)] >= 0.9 else 'missed'})" for s in stores) + " |")
    out.append("")
    out.append("Pattern mixes (weights: " + "; ".join(
        f"{m} " + ", ".join(f"{k} {w:g}" for k, w in ws.items()) for m, ws in MIXES.items())
        + "). Measured score = sum of weight x measured seconds; ratios to the best measured layout of the "
        "table above (target <= 1.25x):")
    out.append("")
    out.append("| store | mix | best measured | its score s | advisor's pick among those | ratio | advisor's own "
               "search: top layout | ratio |")
    out.append("|---" * 8 + "|")
    for m in v["mixes"]:
        ok = "met" if m["pick_ratio"] <= 1.25 else "missed"
        sr = m["searched_ratio"]
        searched = labels.get(m["searched"], "-") if m["searched"] else "-"
        out.append(f"| {m['store']} | {m['mix']} | {labels[m['best']]} | {m['best_s']:.3f} | {labels[m['pick']]} | "
                   f"{m['pick_ratio']:.2f}x ({ok}) | {searched} | "
                   + (f"{sr:.2f}x ({'met' if sr <= 1.25 else 'missed'})" if m["searched"] else "-") + " |")
    return "\n".join(out)


def plot(result: Mapping[str, Any], prefix: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    stores = sorted({r["store"] for r in result["rows"]})
    lays = [lay for lay in result["layouts"] if lay["kind"] != "advised"]
    values = [r[f"{e}_s"] for r in result["rows"] for e in ENGINES if f"{e}_s" in r]
    norm = LogNorm(vmin=min(values), vmax=max(values))
    fig, axes = plt.subplots(len(stores), 2, figsize=(13, 1.2 + 0.55 * len(lays) * len(stores)), squeeze=False)
    for i, s in enumerate(stores):
        for j, engine in enumerate(ENGINES):
            ax = axes[i, j]
            grid = np.array([[next(r[f"{engine}_s"] for r in _rows(result, s, layout=lay["key"], op=op))
                              for op in OPS] for lay in lays])
            im = ax.imshow(grid, norm=norm, cmap="viridis_r", aspect="auto")
            for (a, b), val in np.ndenumerate(grid):
                ax.text(b, a, f"{val:.3g}", ha="center", va="center", fontsize=7,
                        color="white" if norm(val) > 0.5 else "black")
            ax.set_xticks(range(len(OPS)), OPS, fontsize=8)
            ax.set_yticks(range(len(lays)), [lay["label"] for lay in lays] if j == 0 else [], fontsize=7)
            ax.set_title(f'{s}, engine="{engine}": seconds', fontsize=9)
    fig.colorbar(im, ax=axes, shrink=0.6, label="seconds (log)")
    fig.savefig(f"{prefix}-heatmap.png", dpi=110, bbox_inches="tight")
    plt.close(fig)

    fig, axes = plt.subplots(1, len(stores), figsize=(5.5 * len(stores), 5), squeeze=False)
    markers = dict(zip(OPS, "osD^", strict=True))
    for ax, s in zip(axes[0], stores, strict=True):
        rs = _rows(result, s)
        for op in OPS:
            pts = [(r["predicted_s"], r["zarrmax_s"]) for r in rs if r["op"] == op]
            ax.scatter(*zip(*pts, strict=True), marker=markers[op], label=op, alpha=0.8)
        lo = min(min(r["predicted_s"], r["zarrmax_s"]) for r in rs) / 1.5
        hi = max(max(r["predicted_s"], r["zarrmax_s"]) for r in rs) * 1.5
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="predicted s (advisor)",
               ylabel="measured s (zarrmax)", title=f"{s}: one marker per layout and operation")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{prefix}-predicted.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
