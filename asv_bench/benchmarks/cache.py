"""The decoded-chunk cache's workloads (`asv_bench.shared.cache_workloads`, the cache table's): wall time of
slabs of 1 and 64 steps and of training epochs after the first, per engine and store, engine="zarrmax" with the
cache off and on (64 MiB), engine="zarr" as the baseline. MinIO is read through toxiproxy adding 20 ms.

Each sample opens the store anew with an empty cache (a new session); epochs 2-3 run epoch 1 in ``setup``.
The full comparison (zarr's CacheStore, every workload, peak memory, decodes per chunk) is the table script
``asv_bench.tables.chunk_cache``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from asv_bench.shared import cache_workloads as w

from . import skip
from .helpers import BUCKET, endpoint_with_latency, minio_on, writing_minio

STACKS = ["zarr", "zarrmax", "zarrmax-cache"]
WORKLOADS = ["slabs-64", "slabs-1", "epochs-2-3"]
CAP = 64 * 2**20
LATENCY_MS = 20


def write_cube(_self: Any = None) -> dict[str, Any]:
    """``setup_cache``: the cube locally and (when MinIO is installed) in a bucket."""
    import zarr

    from xarray_zarrmax.testing import minio_binary

    root = Path.cwd().resolve() / "cache-data"
    root.mkdir(parents=True, exist_ok=True)
    data, training = w.cube(), w.train()
    w.write(str(root / "cube.zarr"), data, training)
    minio_root = None
    if minio_binary() is not None:
        minio_root = root / "minio"
        with writing_minio(minio_root) as server:
            w.write(zarr.storage.ObjectStore(server.obstore(BUCKET, "cube.zarr")), data, training)
    time.sleep(2.1)  # older than the racy window: the local files may be kept (`tuning.RACY_WINDOW_NS`)
    return {"local": str(root / "cube.zarr"), "minio": None if minio_root is None else str(minio_root)}


write_cube.timeout = 300  # type: ignore[attr-defined]


class ChunkCache:
    """Seconds of one workload after a fresh open and an empty cache (``chunks=None``)."""

    params = [STACKS, WORKLOADS, ["local", "minio"]]
    param_names = ["stack", "workload", "store"]
    setup_cache = write_cube
    timeout = 300
    repeat = (3, 10, 30.0)
    number = 1

    def setup(self, cache: dict[str, Any], stack: str, workload: str, store: str) -> None:
        import xarray as xr
        import zarr

        import xarray_zarrmax

        self.data, self.training = w.cube(), w.train()
        xarray_zarrmax.clear_cache()
        self._config = xarray_zarrmax.set_config(cache_bytes=CAP if stack == "zarrmax-cache" else 0)
        self._config.__enter__()
        if store == "local":
            target: Any = cache["local"]
            options: dict[str, Any] = {}
            zarr_target: Any = cache["local"]
        else:
            if cache["minio"] is None:
                skip("MinIO binary not found when setup_cache ran: run `bash ci/install_services.sh`")
            server = minio_on(cache["minio"])
            endpoint = endpoint_with_latency(server, LATENCY_MS)
            target, options = f"s3://{BUCKET}/cube.zarr", {"storage_options": server.storage_options(endpoint)}
            zarr_target = zarr.storage.ObjectStore(server.obstore(BUCKET, "cube.zarr", endpoint), read_only=True)
        if stack == "zarr":
            ds = xr.open_dataset(zarr_target, engine="zarr", consolidated=False, cache=False)
        else:
            ds = xr.open_dataset(target, engine="zarrmax", consolidated=False, cache=False, **options)
        self.v, self.w = ds["v"], ds["w"]
        self.starts = w.windows()
        if workload == "epochs-2-3":
            w.epoch(self.w, self.training, self.starts, 1)

    def teardown(self, cache: dict[str, Any], stack: str, workload: str, store: str) -> None:
        self._config.__exit__(None, None, None)

    def time_workload(self, cache: dict[str, Any], stack: str, workload: str, store: str) -> None:
        if workload == "epochs-2-3":
            w.epoch(self.w, self.training, self.starts, 2)
            w.epoch(self.w, self.training, self.starts, 3)
        else:
            w.slabs(self.v, self.data, int(workload.split("-")[1]))
