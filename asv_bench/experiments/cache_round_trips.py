"""Where the time of a read of kept chunks goes on S3 (issue 43's two MinIO misses): each such read proves its
objects unchanged with one conditional HEAD each, sent at once, so it cannot take less than one round trip.
This measures, on MinIO behind toxiproxy (``--latency-ms``, 20 by default), with the cache on and every chunk
already kept:

- ``slabs-1``: one-step slabs of the cache table's cube (`asv_bench.shared.cache_workloads`), one read each;
- ``epoch``: a batch of the training windows, 8 reads at once in 8 threads (the table's epochs);

per read (or batch): the median wall time, the HEADs and GETs it sent, against the physical floor of the rule,
a raw conditional HEAD of the same object (obstore, no reader; for a batch, its objects' HEADs at once). Then
what the rule allows at best for the table's workloads: slabs-1 is 256 reads, so at least 256 round trips,
against slabs-64's 4 reads that fetch and decode.

    .venv/bin/python -m asv_bench.experiments.cache_round_trips [--latency-ms 20] [--repeat 31]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from asv_bench.shared import cache_workloads as w


def _raw_heads(store: Any, keys: list[str], etags: dict[str, str]) -> float:
    """Seconds for conditional HEADs of ``keys`` sent at once, each answered 304."""
    import obstore

    async def one(key: str) -> None:
        try:
            await obstore.get_async(store, key, options={"head": True, "if_none_match": etags[key]})
        except Exception as err:  # obstore raises on 304 Not Modified: the answer wanted
            if "304" not in str(err) and "Not Modified" not in str(err) and "NotModified" not in type(err).__name__:
                raise

    async def all_() -> None:
        await asyncio.gather(*(one(k) for k in keys))

    start = time.perf_counter()
    asyncio.run(all_())
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=31)
    args = parser.parse_args()
    os.environ["XARRAY_ZARRMAX_CACHE_BYTES"] = str(256 << 20)
    import obstore
    import xarray as xr
    import zarr
    from obstore.store import S3Store

    import xarray_zarrmax
    from asv_bench.shared.services import running

    with running(proxy=True, latency_ms=args.latency_ms) as services:
        if services is None:
            raise SystemExit("MinIO and toxiproxy are needed: bash ci/install_services.sh")
        minio = services.minio
        minio.make_bucket("roundtrips")
        data, training = w.cube(), w.train()
        w.write(zarr.storage.ObjectStore(minio.obstore("roundtrips", "cube.zarr")), data, training)
        options = services.storage_options()
        url = "s3://roundtrips/cube.zarr"
        raw = S3Store("roundtrips", prefix="cube.zarr", client_options={"allow_http": True},
                      **minio.storage_options(services.endpoint))
        etags = {m["path"]: m["e_tag"] for batch in obstore.list(raw) for m in batch}

        ds = xr.open_dataset(url, engine="zarrmax", consolidated=False, storage_options=options)
        v, wv = ds["v"], ds["w"]
        for t in range(w.SHAPE[0]):  # keep every chunk of the cube (thin slabs: kept at once)
            np.asarray(v.isel(t=slice(t, t + 1)).values)
        slab_s, slab_req = [], []
        for i in range(args.repeat):
            t = (i * 37) % w.SHAPE[0]
            with xarray_zarrmax.request_counts() as c:
                start = time.perf_counter()
                got = v.isel(t=slice(t, t + 1)).values
                slab_s.append(time.perf_counter() - start)
            np.testing.assert_array_equal(got, data[t:t + 1])
            slab_req.append((c.total("head"), c.total("get"), c.cache.misses))
        shard = f"v/c/{0}/0/0"
        raw_head = [_raw_heads(raw, [shard], etags) for _ in range(args.repeat)]

        starts = w.windows()

        def window(i: int) -> np.ndarray:
            s, y, x = starts[i]
            return wv.isel(s=slice(s, s + w.WINDOW[0]), p=slice(y, y + w.WINDOW[1]),
                           q=slice(x, x + w.WINDOW[2])).values

        batch = list(range(w.BATCH))
        with ThreadPoolExecutor(w.BATCH) as pool:
            for _ in range(2):  # kept: in part at once, whole the second time
                list(pool.map(window, range(len(starts))))
            batch_s, batch_req = [], []
            for _ in range(args.repeat):
                with xarray_zarrmax.request_counts() as c:
                    start = time.perf_counter()
                    list(pool.map(window, batch))
                    batch_s.append(time.perf_counter() - start)
                batch_req.append((c.total("head"), c.total("get"), c.cache.misses))
        shards = sorted({f"w/c/{starts[i][0] // w.TRAIN_SHARDS[0]}/0/0" for i in batch})
        raw_batch = [_raw_heads(raw, shards, etags) for _ in range(args.repeat)]

    load = os.getloadavg()
    slab, floor = statistics.median(slab_s), statistics.median(raw_head)
    bat, bfloor = statistics.median(batch_s), statistics.median(raw_batch)
    print(f"MinIO behind {args.latency_ms} ms, every chunk kept; medians of {args.repeat}; load average "
          f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}\n")
    print("| read | wall (ms) | HEADs, GETs, decodes per read | raw conditional HEADs at once (ms) | wall / raw |")
    print("|---|---|---|---|---|")
    print(f"| slabs-1 (one slab) | {slab * 1e3:.1f} | {statistics.mode(slab_req)} | {floor * 1e3:.1f} (1 object) "
          f"| {slab / floor:.2f}x |")
    print(f"| epoch (a batch of {w.BATCH} windows) | {bat * 1e3:.1f} | {statistics.mode(batch_req)} | "
          f"{bfloor * 1e3:.1f} ({len(shards)} objects) | {bat / bfloor:.2f}x |")
    reads = w.SHAPE[0] - 8  # the table's slabs-1: 8 of its 256 reads decode (one per time chunk)
    print(f"\nFloor of the freshness rule for the table's slabs-1: {reads} reads of kept chunks x {floor * 1e3:.1f} ms "
          f"= {reads * floor:.2f} s; an epoch of {len(starts) // w.BATCH} batches: "
          f"{len(starts) // w.BATCH * bfloor:.3f} s.")


if __name__ == "__main__":
    main()
