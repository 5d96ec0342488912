"""Full read of the 3-D float32 cube: dask.distributed LocalCluster (2 worker processes) against the threaded
scheduler, on MinIO and on local disk.

    .venv/bin/python -m asv_bench.tables.distributed_read [--mib 512] [--repeat 5] [--stores local,minio]

Each run reads every shard and reduces it where it was read (a sum per block), so what is timed is the read
and decode on the workers, not shipping the array to the client. Prints medians as a markdown table.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from asv_bench.shared.read_layouts import layouts, write
from asv_bench.shared.runner import Session, Table, add_flags, execute
from asv_bench.shared.timing import median_time


def read_reduced(target: Any, kw: dict[str, Any]) -> float:
    import xarray as xr

    ds = xr.open_dataset(target, engine="zarrmax", chunks={}, **kw)
    return float(ds["v"].sum().compute())


def flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, mib=512, repeat=5, stores=True)


def run(session: Session) -> int:
    import dask
    import distributed
    import zarr

    args = session.args
    cube = layouts(args.mib)[-1]
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="zarrmax-dist-"))
    targets = []
    if "local" in args.stores:
        write(str(tmp / "cube.zarr"), cube)
        targets.append(("local", str(tmp / "cube.zarr"), {}))
    if session.services is not None:
        minio = session.services.minio
        bucket = minio.make_bucket("distbench")
        write(zarr.storage.ObjectStore(minio.obstore(bucket, "cube.zarr")), cube)
        targets.append(("minio", f"s3://{bucket}/cube.zarr", {"storage_options": minio.storage_options()}))
    for store, target, kw in targets:
        with dask.config.set(scheduler="threads"):
            t_threads = median_time(lambda: read_reduced(target, kw), args.repeat)
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=None, silence_logs=40) as cluster, \
                distributed.Client(cluster):
            t_cluster = median_time(lambda: read_reduced(target, kw), args.repeat)
        rows.append((store, t_threads, t_cluster))
    gb = cube.nbytes / 1e9
    print(f"\n3-D float32 cube {cube.shape}, {gb:.2f} GB, zstd, 64 MB shards; full read reduced per block; "
          f"median of {args.repeat}\n")
    print("| store | threaded (2 threads) GB/s | LocalCluster (2 processes x 1 thread) GB/s | cluster / threaded |")
    print("|---|---|---|---|")
    for store, t_threads, t_cluster in rows:
        print(f"| {store} | {gb / t_threads:.2f} | {gb / t_cluster:.2f} | {t_threads / t_cluster:.2f}x |")
    return 0


TABLE = Table(__doc__ or "", run, flags, services="minio")

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
