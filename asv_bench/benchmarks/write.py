"""Whole-array writes of seed 000's layouts (`asv_bench.shared.read_layouts`), to a local directory and to MinIO,
by the write table's stacks (`asv_bench.shared.writes`): ``put`` (the raw PUT ceiling: the encoded objects sent
with nothing else), ``encode`` (the encode ceiling: every object encoded into memory, a thread per core),
``to_zarr`` (``Dataset.to_zarr``, engine zarr, dask) and ``zarrmax`` (``xarray_zarrmax.to_zarr``).

Each array is ``ZARRMAX_ASV_MIB`` MiB (default 64), made in ``setup`` with its stored objects (for ``put``).
Every sample writes to a fresh target, removed in ``teardown``. The first sample of each process is read back
and compared with the data.
"""

from __future__ import annotations

from pathlib import Path

from asv_bench.shared import writes

from . import skip
from .helpers import LAYOUTS, MIB, WORKERS, layouts, minio_on


class WriteThroughput:
    """One whole-array write per layout, store and stack."""

    params = [list(writes.STACKS), LAYOUTS, ["local", "minio"]]
    param_names = ["stack", "layout", "store"]
    timeout = 300
    repeat = (2, 5, 30.0)
    number = 1
    _checked: set[tuple[str, str, str]] = set()

    def setup(self, stack: str, layout: str, store: str) -> None:
        root = Path.cwd().resolve() / "write-data"
        minio = None
        if store == "minio":
            server = minio_on(str(root / "minio"))
            server.make_bucket(writes.BUCKET)
            minio = server.storage_options()
        (root / "local").mkdir(parents=True, exist_ok=True)
        self.layout = layouts()[layout]
        self.data = self.layout.data()
        self.ds = writes.dataset(self.layout, self.data)
        self.target = writes.Target(store, root / "local", minio, WORKERS)
        self.objects = writes.reference(self.layout, self.data, root / "local") if stack in ("put", "encode") else {}
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
    the source data; for ``put``, the encoded objects): the write table's `writes.peak_memory` (VmHWM, Linux)."""

    params = [list(writes.STACKS), LAYOUTS]
    param_names = ["stack", "layout"]
    timeout = 300
    unit = "bytes"

    def setup(self, stack: str, layout: str) -> None:
        import os

        if not os.path.exists("/proc/self/status"):
            skip("needs /proc (Linux)", service=False)
        self.root = Path.cwd().resolve() / "write-peak"
        self.layout_index = LAYOUTS.index(layout)
        layout_obj = layouts()[layout]
        objects = (writes.reference(layout_obj, layout_obj.data(), self.root.parent) if stack in ("put", "encode")
                   else {})
        self.reference = writes.save_objects(self.root / f"reference-{self.layout_index}.zarr", objects)
        self.target = writes.Target("local", self.root, None, WORKERS)

    def track_write_peak_memory(self, stack: str, layout: str) -> int:
        return int(writes.peak_memory(stack, self.layout_index, MIB, WORKERS, self.target, self.reference))


class WriteRequests:
    """Data requests (GETs and PUTs of stored objects) of each write of the latency table (`writes.CASES`) by
    ``xarray_zarrmax.to_zarr`` on MinIO (no proxy: the counts do not depend on latency). An append's new edge
    objects are created without being read first; a regression shows as GETs."""

    params = [[case.title for case in writes.CASES]]
    param_names = ["write"]
    timeout = 120

    def setup(self, title: str) -> None:
        import xarray_zarrmax

        self.case = next(case for case in writes.CASES if case.title == title)
        server = minio_on(str(Path.cwd().resolve() / "write-requests" / "minio"))
        server.make_bucket("requests")
        self.options = {"storage_options": server.storage_options()}
        self.url = f"s3://requests/w{next(writes.NAMES)}-{id(self)}.zarr"
        first, self.timed, self.kwargs = writes.timed_write(self.case)
        if self.case.appended:
            xarray_zarrmax.to_zarr(first, self.url, encoding={"v": self.case.layout}, consolidated=False,
                                   **self.options)

    def track_write_requests(self, title: str) -> int:
        import xarray_zarrmax

        with xarray_zarrmax.request_counts() as counts:
            xarray_zarrmax.to_zarr(self.timed, self.url, consolidated=False, **self.kwargs, **self.options)
        return sum(1 for _, kind, key in counts.keys if kind in ("get", "put") and "/c/" in key)

    track_write_requests.unit = "requests"  # type: ignore[attr-defined]
