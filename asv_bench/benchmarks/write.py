"""Whole-array writes of the layouts of ``asv_bench/throughput.py``, to a local directory and to MinIO, by the
stacks of ``asv_bench/write_throughput.py``: ``put`` (the raw PUT ceiling: the encoded objects sent with
nothing else), ``encode`` (the encode ceiling: every object encoded into memory, a thread per core),
``to_zarr`` (``Dataset.to_zarr``, engine zarr, dask) and ``zarrmax`` (``xarray_zarrmax.to_zarr``).

Each array is ``ZARRMAX_ASV_MIB`` MiB (default 64), made in ``setup`` with its stored objects (for ``put``).
Every sample writes to a fresh target, removed in ``teardown``. The first sample of each process is read back
and compared with the data.
"""

from __future__ import annotations

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
