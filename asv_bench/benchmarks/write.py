"""Whole-array writes of the layouts of ``asv_bench/throughput.py``, to a local directory and to MinIO, by the
stacks of ``asv_bench/write_throughput.py``: ``put`` (the raw PUT ceiling: the encoded objects sent with
nothing else), ``encode`` (the encode ceiling: every object encoded into memory, a thread per core),
``to_zarr`` (``Dataset.to_zarr``, engine zarr, dask) and ``zarrmax`` (``xarray_zarrmax.to_zarr``).

Each array is ``ZARRMAX_ASV_MIB`` MiB (default 64), made in ``setup`` with its stored objects (for ``put``).
Every sample writes to a fresh target, removed in ``teardown``. The first sample of each process is read back
and compared with the data.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from . import helpers
from .helpers import LAYOUTS, MIB, WORKERS

STACKS = ["put", "encode", "to_zarr", "zarrmax"]
_SCRIPT = Path(__file__).resolve().parent.parent / "write_throughput.py"


def write_throughput() -> Any:
    """``asv_bench/write_throughput.py`` as a module (its ``Target``, ``dataset``, ``reference``...)."""
    helpers.throughput()  # its imports of "throughput" and "benchutil" resolve beside it
    return helpers.load_script("zarrmax_asv_write_throughput", _SCRIPT)


class WriteThroughput:
    """One whole-array write per layout, store and stack."""

    params = [STACKS, LAYOUTS, ["local", "minio"]]
    param_names = ["stack", "layout", "store"]
    timeout = 300
    repeat = (2, 5, 30.0)
    number = 1
    _checked: set[tuple[str, str, str]] = set()

    def setup(self, stack: str, layout: str, store: str) -> None:
        wt = write_throughput()
        root = Path.cwd().resolve() / "write-data"
        minio = None
        if store == "minio":
            server = helpers.minio_on(str(root / "minio"))
            server.make_bucket(wt.BUCKET)
            minio = server.storage_options()
        (root / "local").mkdir(parents=True, exist_ok=True)
        self.layout = helpers.layouts()[layout]
        self.data = self.layout.data()
        self.ds = wt.dataset(self.layout, self.data)
        self.target = wt.Target(store, root / "local", minio, WORKERS)
        self.objects = wt.reference(self.layout, self.data, root / "local") if stack in ("put", "encode") else {}
        self.stack = stack
        self.where = self.target.fresh(stack)
        self.params = (stack, layout, store)

    def teardown(self, stack: str, layout: str, store: str) -> None:
        if stack != "encode" and self.params not in self._checked:
            self.target.check(self.where, self.data)  # once per process: what was written reads back
            self._checked.add(self.params)
        if stack != "encode":
            self.target.remove(self.where)

    def time_write(self, stack: str, layout: str, store: str) -> None:
        self.target.write(stack, self.where, self.ds, self.data, self.layout, self.objects)


class WritePeakMemory:
    """Peak resident memory of one write in a fresh process, beyond what it held before (interpreter, imports,
    the source data; for ``put``, the encoded objects): ``peak_memory`` of write_throughput.py (VmHWM, Linux)."""

    params = [STACKS, LAYOUTS]
    param_names = ["stack", "layout"]
    timeout = 300
    unit = "bytes"

    def setup(self, stack: str, layout: str) -> None:
        import os

        if not os.path.exists("/proc/self/status"):
            helpers.skip("needs /proc (Linux)", service=False)
        wt = write_throughput()
        self.root = Path.cwd().resolve() / "write-peak"
        self.layout_index = LAYOUTS.index(layout)
        layout_obj = helpers.layouts()[layout]
        objects = wt.reference(layout_obj, layout_obj.data(), self.root.parent) if stack in ("put", "encode") else {}
        self.reference = self.root / f"reference-{self.layout_index}.zarr"
        for key, value in objects.items():
            (self.reference / key).parent.mkdir(parents=True, exist_ok=True)
            (self.reference / key).write_bytes(value)
        self.target = wt.Target("local", self.root, None, WORKERS)

    def track_write_peak_memory(self, stack: str, layout: str) -> int:
        import types

        args = types.SimpleNamespace(mib=MIB, workers=WORKERS)
        return int(write_throughput().peak_memory(stack, self.layout_index, args, self.target, self.reference))


_LATENCY_SCRIPT = Path(__file__).resolve().parent.parent / "writes_under_latency.py"
_COUNTER = itertools.count()


def writes_under_latency() -> Any:
    """``asv_bench/writes_under_latency.py`` as a module (its ``CASES`` and ``dataset``)."""
    return helpers.load_script("zarrmax_asv_writes_under_latency", _LATENCY_SCRIPT)


class WriteRequests:
    """Data requests (GETs and PUTs of stored objects) of each write of ``asv_bench/writes_under_latency.py``
    by ``xarray_zarrmax.to_zarr`` on MinIO (no proxy: the counts do not depend on latency). An append's new
    edge objects are created without being read first; a regression shows as GETs."""

    params = [[case.title for case in writes_under_latency().CASES]]
    param_names = ["write"]
    timeout = 120

    def setup(self, title: str) -> None:
        import xarray_zarrmax

        wul = writes_under_latency()
        self.case = next(case for case in wul.CASES if case.title == title)
        server = helpers.minio_on(str(Path.cwd().resolve() / "write-requests" / "minio"))
        server.make_bucket("requests")
        self.options = {"storage_options": server.storage_options()}
        self.url = f"s3://requests/w{next(_COUNTER)}-{id(self)}.zarr"
        first = wul.dataset(self.case.shape, 0)
        if self.case.appended:
            xarray_zarrmax.to_zarr(first, self.url, encoding={"v": self.case.layout}, consolidated=False,
                                   **self.options)
            self.timed = wul.dataset((self.case.appended, *self.case.shape[1:]), self.case.shape[0])
            self.kwargs: dict[str, Any] = {"append_dim": "d0"}
        else:
            self.timed, self.kwargs = first, {"encoding": {"v": self.case.layout}}
        if self.case.dask:
            chunks = self.case.layout.get("shards") or self.case.layout["chunks"]
            self.timed = self.timed.chunk(dict(zip(self.timed["v"].dims, chunks, strict=True)))

    def track_write_requests(self, title: str) -> int:
        import xarray_zarrmax

        with xarray_zarrmax.request_counts() as counts:
            xarray_zarrmax.to_zarr(self.timed, self.url, consolidated=False, **self.kwargs, **self.options)
        return sum(1 for _, kind, key in counts.keys if kind in ("get", "put") and "/c/" in key)

    track_write_requests.unit = "requests"  # type: ignore[attr-defined]
