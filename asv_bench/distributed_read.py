"""Full read of the 3-D float32 cube: dask.distributed LocalCluster (2 worker processes) against the threaded
scheduler, on MinIO and on local disk.

    .venv/bin/python asv_bench/distributed_read.py [--mib 512] [--repeat 5] [--stores local,minio]

Each run reads every shard and reduces it where it was read (a sum per block), so what is timed is the read
and decode on the workers, not shipping the array to the client. Prints medians as a markdown table.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).parent))

from benchutil import median_time  # noqa: E402
from throughput import layouts, write  # noqa: E402


def run(target: Any, kw: dict[str, Any]) -> float:
    import xarray as xr

    ds = xr.open_dataset(target, engine="zarrmax", chunks={}, **kw)
    return float(ds["v"].sum().compute())



def main(argv: list[str] | None = None) -> int:
    import dask
    import distributed
    import zarr

    from xarray_zarrmax.testing import MinioServer, minio_binary

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--stores", default="local,minio")
    args = parser.parse_args(argv)
    cube = layouts(args.mib)[-1]
    rows = []
    minio = None
    tmp = Path(tempfile.mkdtemp(prefix="zarrmax-dist-"))
    try:
        targets = []
        if "local" in args.stores:
            write(str(tmp / "cube.zarr"), cube)
            targets.append(("local", str(tmp / "cube.zarr"), {}))
        if "minio" in args.stores:
            binary = minio_binary()
            if binary is None:
                print("MinIO not found: run `bash ci/install_services.sh`", file=sys.stderr)
                return 2
            minio = MinioServer(binary).start()
            bucket = minio.make_bucket("distbench")
            write(zarr.storage.ObjectStore(minio.obstore(bucket, "cube.zarr")), cube)
            targets.append(("minio", f"s3://{bucket}/cube.zarr", {"storage_options": minio.storage_options()}))
        for store, target, kw in targets:
            with dask.config.set(scheduler="threads"):
                t_threads = median_time(lambda: run(target, kw), args.repeat)
            with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                          dashboard_address=None, silence_logs=40) as cluster, \
                    distributed.Client(cluster):
                t_cluster = median_time(lambda: run(target, kw), args.repeat)
            rows.append((store, t_threads, t_cluster))
    finally:
        if minio is not None:
            minio.close()
    gb = cube.nbytes / 1e9
    print(f"\n3-D float32 cube {cube.shape}, {gb:.2f} GB, zstd, 64 MB shards; full read reduced per block; "
          f"median of {args.repeat}\n")
    print("| store | threaded (2 threads) GB/s | LocalCluster (2 processes x 1 thread) GB/s | cluster / threaded |")
    print("|---|---|---|---|")
    for store, t_threads, t_cluster in rows:
        print(f"| {store} | {gb / t_threads:.2f} | {gb / t_cluster:.2f} | {t_threads / t_cluster:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
