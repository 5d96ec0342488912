"""Open latency of a 277-array ERA5-like group on MinIO behind a latency proxy, against the floor.

    .venv/bin/python -m asv_bench.tables.open_latency [--latency-ms 20] [--repeat 15] [--json out.json]

In one run, for an unconsolidated and a consolidated copy of the group:
- floor: one LIST plus concurrent GETs of every zarr.json with obstore (unconsolidated), or one GET of the
  root zarr.json (consolidated) -- nothing else;
- engine="zarr" at zarr's default async.concurrency and at 100;
- engine="zarrmax";
all with ``chunks={}``. Then engine="zarr" (concurrency 100) and engine="zarrmax" again with ``chunks=None``:
the difference is what xarray and dask spend building one dask array per variable after the backend has
returned, the same code for every engine.
Prints markdown tables of medians (seconds) and ratios; starts MinIO and toxiproxy itself on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from asv_bench.shared.runner import Session, Table, add_flags, execute
from asv_bench.shared.timing import median_time


def floor_unconsolidated(minio: Any, bucket: str, prefix: str, endpoint: str) -> None:
    import obstore

    store = minio.obstore(bucket, prefix, endpoint)

    async def run() -> None:
        listing = await obstore.list_with_delimiter_async(store)
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in listing["common_prefixes"]]
        keys = ["zarr.json"] + [f"{n}/zarr.json" for n in names]
        results = await asyncio.gather(*(obstore.get_async(store, k) for k in keys))
        await asyncio.gather(*(r.bytes_async() for r in results))

    asyncio.run(run())


def floor_consolidated(minio: Any, bucket: str, prefix: str, endpoint: str) -> None:
    import obstore

    store = minio.obstore(bucket, prefix, endpoint)
    obstore.get(store, "zarr.json").bytes()


def open_zarr(minio: Any, bucket: str, prefix: str, endpoint: str, concurrency: int | None,
              consolidated: bool, chunks: dict[str, Any] | None = None) -> None:
    import xarray as xr
    import zarr

    store = zarr.storage.ObjectStore(minio.obstore(bucket, prefix, endpoint), read_only=True)
    config = {"async.concurrency": concurrency} if concurrency else {}
    with zarr.config.set(config):
        xr.open_dataset(store, engine="zarr", chunks=chunks, consolidated=consolidated)


def open_zarrmax(minio: Any, bucket: str, prefix: str, endpoint: str, consolidated: bool,
                 chunks: dict[str, Any] | None = None) -> None:
    import xarray as xr

    xr.open_dataset(f"s3://{bucket}/{prefix}", engine="zarrmax", chunks=chunks,
                    storage_options=minio.storage_options(endpoint), consolidated=consolidated)


def flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, latency_ms=20, repeat=15, json_file=True)


def run(session: Session) -> int:
    import zarr

    from xarray_zarrmax.testing import write_many_variable_group

    args = session.args
    bucket = "bench"
    minio, endpoint = session.minio(bucket)
    for prefix, consolidated in (("era5.zarr", False), ("era5-consolidated.zarr", True)):
        write_many_variable_group(zarr.storage.ObjectStore(minio.obstore(bucket, prefix)), 273,
                                  consolidated=consolidated)
    default_concurrency = zarr.config.get("async.concurrency")
    rows = []
    for prefix, consolidated in (("era5.zarr", False), ("era5-consolidated.zarr", True)):
        floor_fn = floor_consolidated if consolidated else floor_unconsolidated
        t = {
            "floor": median_time(lambda: floor_fn(minio, bucket, prefix, endpoint), args.repeat),
            f"zarr (concurrency {default_concurrency})": median_time(
                lambda: open_zarr(minio, bucket, prefix, endpoint, None, consolidated, {}), args.repeat),
            "zarr (concurrency 100)": median_time(
                lambda: open_zarr(minio, bucket, prefix, endpoint, 100, consolidated, {}), args.repeat),
            "zarrmax": median_time(
                lambda: open_zarrmax(minio, bucket, prefix, endpoint, consolidated, {}), args.repeat),
            "zarr (concurrency 100), chunks=None": median_time(
                lambda: open_zarr(minio, bucket, prefix, endpoint, 100, consolidated, None), args.repeat),
            "zarrmax, chunks=None": median_time(
                lambda: open_zarrmax(minio, bucket, prefix, endpoint, consolidated, None), args.repeat),
        }
        rows.append(("consolidated" if consolidated else "unconsolidated", t))

    print(f"\n277-array group (273 variables + 4 coordinates), MinIO behind toxiproxy +{args.latency_ms} ms, "
          f"median of {args.repeat} opens (s), chunks={{}}\n")
    header = [h for h in rows[0][1] if "chunks=None" not in h]
    print("| metadata | " + " | ".join(header) + " | zarrmax / floor | zarr@100 / zarrmax |")
    print("|---" * (len(header) + 3) + "|")
    for label, t in rows:
        cells = " | ".join(f"{t[h]:.3f}" for h in header)
        print(f"| {label} | {cells} | {t['zarrmax'] / t['floor']:.2f}x | "
              f"{t['zarr (concurrency 100)'] / t['zarrmax']:.2f}x |")
    print("\nThe same opens with chunks=None (no dask), and what building the dask arrays added (chunks={} minus "
          "chunks=None: xarray's and dask's code, after the backend returned)\n")
    print("| metadata | floor | zarr (concurrency 100) | zarrmax | zarrmax / floor | zarr@100 / zarrmax "
          "| dask arrays, zarr | dask arrays, zarrmax |")
    print("|---" * 9 + "|")
    for label, t in rows:
        zarr_none, ours_none = t["zarr (concurrency 100), chunks=None"], t["zarrmax, chunks=None"]
        print(f"| {label} | {t['floor']:.3f} | {zarr_none:.3f} | {ours_none:.3f} | {ours_none / t['floor']:.2f}x | "
              f"{zarr_none / ours_none:.2f}x | {t['zarr (concurrency 100)'] - zarr_none:+.3f} | "
              f"{t['zarrmax'] - ours_none:+.3f} |")
    if args.json:
        session.save_json(args.json, {"latency_ms": args.latency_ms, "repeat": args.repeat, "rows": rows})
    return 0


TABLE = Table(__doc__ or "", run, flags, services="proxied")

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
