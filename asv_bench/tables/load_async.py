"""``Dataset.load_async()`` of many variables on MinIO behind a latency proxy: engine="zarr" against zarrmax.

    .venv/bin/python -m asv_bench.tables.load_async [--variables 40] [--latency-ms 20] [--repeat 5]

A v3 group of ``--variables`` float32 variables (time, lat, lon), each 4 shards of 8 chunks, zstd, written to
MinIO; every read goes through toxiproxy adding ``--latency-ms`` to each response. For each engine, in the
same run: ``asyncio.run(ds.load_async())`` and the synchronous ``ds.load()`` (no dask), medians of
``--repeat`` loads, each on a freshly opened Dataset (the open is not timed). The floor is the proxy's added
latency once per wave of ``concurrency`` requests: every shard object in flight at once, nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import numpy as np

from asv_bench.shared.runner import Session, Table, add_flags, execute


def write(store: Any, n_vars: int) -> int:
    import zarr

    group = zarr.open_group(store, mode="w", zarr_format=3)
    rng = np.random.default_rng(0)
    shape, chunks, shards = (96, 32, 64), (12, 16, 32), (24, 32, 64)  # small: latency, not bytes, decides
    for i in range(n_vars):
        arr = group.create_array(f"v{i:02d}", shape=shape, chunks=chunks, shards=shards, dtype="f4",
                                 dimension_names=["time", "lat", "lon"], compressors=[zarr.codecs.ZstdCodec()])
        arr[:] = (rng.normal(size=shape) + i).astype("f4")
    return int(np.prod(shape)) * 4 * n_vars


def load(target: Any, kw: dict[str, Any], engine: str, *, use_async: bool) -> float:
    import xarray as xr

    ds = xr.open_dataset(target, engine=engine, **kw)
    start = time.perf_counter()
    if use_async:
        asyncio.run(ds.load_async())
    else:
        ds.load()
    return time.perf_counter() - start


def raw_gets(store: Any, concurrency: int) -> float:
    """Seconds to GET every shard object at once through the proxy (no decode): the physical limit."""
    import obstore

    async def run() -> None:
        keys = [o["path"] for batch in obstore.list(store) for o in batch if "/c/" in o["path"]]
        sem = asyncio.Semaphore(concurrency)

        async def one(key: str) -> None:
            async with sem:
                await (await obstore.get_async(store, key)).bytes_async()

        await asyncio.gather(*(one(k) for k in keys))

    start = time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - start


def flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--variables", type=int, default=40)
    add_flags(parser, latency_ms=20, repeat=5)


def run(session: Session) -> int:
    import zarr

    from xarray_zarrmax import get_config

    args = session.args
    minio, endpoint = session.minio("loadasync")
    nbytes = write(zarr.storage.ObjectStore(minio.obstore("loadasync", "g.zarr")), args.variables)
    zarr_store = zarr.storage.ObjectStore(minio.obstore("loadasync", "g.zarr", endpoint), read_only=True)
    targets = {
        "zarr": (zarr_store, {"consolidated": False}, "zarr"),
        "zarrmax": ("s3://loadasync/g.zarr", {"storage_options": minio.storage_options(endpoint)}, "zarrmax"),
    }
    times: dict[tuple[str, bool], list[float]] = {(e, a): [] for e in targets for a in (True, False)}
    for (engine, use_async) in times:
        load(*targets[engine], use_async=use_async)  # warm-up: imports, connections
    proxied = minio.obstore("loadasync", "g.zarr", endpoint)
    raw_gets(proxied, get_config().concurrency)  # warm-up
    ceiling: list[float] = []
    for _ in range(args.repeat):  # engines, modes and the raw GETs interleaved
        ceiling.append(raw_gets(proxied, get_config().concurrency))
        for (engine, use_async), runs in times.items():
            runs.append(load(*targets[engine], use_async=use_async))
    med = {k: statistics.median(v) for k, v in times.items()}
    raw = statistics.median(ceiling)
    # Every shard object is one GET: with all of them in flight at once, a load takes one proxied round trip per
    # wave of `concurrency` requests, and nothing less.
    objects = 4 * args.variables
    waves = -(-objects // get_config().concurrency)
    floor = waves * args.latency_ms / 1000
    print(f"\n{args.variables} variables x 4 shards ({nbytes / 2**20:.0f} MiB, zstd) on MinIO behind toxiproxy "
          f"+{args.latency_ms} ms, median of {args.repeat} loads of a freshly opened Dataset, seconds:\n")
    print("| load | engine=\"zarr\" | zarrmax | zarr / zarrmax | zarrmax / raw GETs | zarrmax / latency floor |")
    print("|---|---|---|---|---|---|")
    for use_async, label in ((True, "`await ds.load_async()`"), (False, "`ds.load()`")):
        z, m = med[("zarr", use_async)], med[("zarrmax", use_async)]
        print(f"| {label} | {z:.3f} | {m:.3f} | {z / m:.2f}x | {m / raw:.2f}x | {m / floor:.1f}x |")
    print(f"\nraw GETs: {raw:.3f} s for the same {objects} shard objects through the proxy, all at once (obstore, no "
          "decode)")
    print(f"\nfloor: {floor:.3f} s = {waves} wave(s) of at most {get_config().concurrency} concurrent GETs for the "
          f"{objects} shard objects x {args.latency_ms} ms added by the proxy per response")
    return 0


TABLE = Table(__doc__ or "", run, flags, services="proxied")

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
