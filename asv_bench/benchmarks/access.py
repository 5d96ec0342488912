"""Seed 001's four operations (`asv_bench.shared.access`, the access-pattern table's) on its ``--quick`` field,
per layout, engine and store: wall time of the operation after a fresh open, and the requests it sends.

The field (96 x 73 x 144 float32, zstd) is written once per run in ``setup_cache`` in three layouts -- seed
001's two extremes and small chunks in large shards -- to a local directory and to a MinIO data directory;
MinIO is read through toxiproxy adding 20 ms to every response. asv runs ``setup`` before every sample, so
each timed operation is a first access: the open happens in ``setup``, and zarrmax's shard index cache is keyed
per open. The full study (every layout, the floor, the advisor's predictions) is the table script
``asv_bench.tables.access_patterns``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from asv_bench.shared import access as ap

from . import skip
from .helpers import BUCKET, ENGINES, endpoint_with_latency, minio_on, writing_minio

LAYOUTS = ["time-contiguous", "map-contiguous", "tiles in slab shards"]
OPS = list(ap.OPS)
LATENCY_MS = 20


def specs() -> dict[str, ap.Spec]:
    return {s.name: s for s in ap.layouts(ap.QUICK_SHAPE) if s.name in LAYOUTS}


def write_access_data(_self: Any = None) -> dict[str, Any]:
    """``setup_cache``: the quick field in each layout, locally and (when MinIO is installed) in a bucket."""
    from xarray_zarrmax.testing import minio_binary

    root = Path.cwd().resolve() / "access-data"
    local = root / "local"
    local.mkdir(parents=True, exist_ok=True)
    data = ap.field(ap.QUICK_SHAPE)
    for spec in specs().values():
        ap.write_local(local / spec.key, spec, data, ap.QUICK_SHAPE)
    minio_root = None
    if minio_binary() is not None:
        minio_root = root / "minio"
        with writing_minio(minio_root) as server:
            for spec in specs().values():
                ap.upload(local / spec.key, server.obstore(BUCKET, spec.key))
    return {"local": str(local), "minio": None if minio_root is None else str(minio_root)}


write_access_data.timeout = 300  # type: ignore[attr-defined]


class _Access:
    params = [ENGINES, LAYOUTS, OPS, ["local", "minio"]]
    param_names = ["engine", "layout", "op", "store"]
    setup_cache = write_access_data

    def _store(self, cache: dict[str, Any], store: str) -> Any:
        if store == "local":
            return ap.Store("local", Path(cache["local"]))
        if cache["minio"] is None:
            skip("MinIO binary not found when setup_cache ran: run `bash ci/install_services.sh`")
        server = minio_on(cache["minio"])
        return ap.Store("minio", Path(cache["local"]), server, BUCKET, endpoint_with_latency(server, LATENCY_MS))

    def _op(self, name: str) -> Any:
        return next(op for op in ap.operations(ap.QUICK_SHAPE) if op.name == name)


class AccessPatterns(_Access):
    """Wall time of one operation after a fresh ``open_dataset`` (``chunks=None``; the open is not timed)."""

    timeout = 300
    repeat = (3, 10, 20.0)
    number = 1

    _warm: set[tuple[str, ...]] = set()

    def setup(self, cache: dict[str, Any], engine: str, layout: str, op: str, store: str) -> None:
        self.op = self._op(op)
        where = self._store(cache, store)
        key = (engine, layout, op, store)
        if key not in self._warm:  # once per process (asv reruns setup before every sample): imports, pools,
            self.op.run(where.open(specs()[layout], engine))  # connections; not a first access to the data
            self._warm.add(key)
        self.ds = where.open(specs()[layout], engine)

    def time_operation(self, cache: dict[str, Any], engine: str, layout: str, op: str, store: str) -> None:
        self.op.run(self.ds)


class AccessRequests(_Access):
    """GET requests one operation sends after a fresh open (zarrmax: ``request_counts()``; engine="zarr": a
    counting wrapper around its store), values checked against the field."""

    timeout = 300
    unit = "requests"

    def track_requests(self, cache: dict[str, Any], engine: str, layout: str, op: str, store: str) -> int:
        import numpy as np

        import xarray_zarrmax

        operation = self._op(op)
        counts: Counter[str] = Counter()
        ds = self._store(cache, store).open(specs()[layout], engine, counts if engine == "zarr" else None)
        counts.clear()
        with xarray_zarrmax.request_counts() as c:
            got = operation.run(ds)
        ap.check(f"{engine} {layout} {op}", np.asarray(got), operation.expected(ap.field(ap.QUICK_SHAPE)),
                 exact=not operation.mean_over)
        return c.total("get") if engine == "zarrmax" else counts["get"]
