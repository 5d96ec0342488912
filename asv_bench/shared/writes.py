"""The whole-array writes the write table compares, on local disk and on MinIO, and the writes of many small
objects the latency table times; the asv write benchmarks run the same.

Stacks (`Target.write`), each writing the whole array of a read layout (`layouts`) to a fresh target, the same
encoding (zstd level 1) for every stack:

- ``put``: the raw PUT ceiling: the stored objects of the array (encoded beforehand, metadata included) sent
  with nothing else: concurrent obstore PUTs at zarrmax's concurrency (MinIO), or files written by a thread
  per object slot (local; on Linux each written with no name, ``O_TMPFILE``, then linked in: the fastest raw
  write measured here, and what zarrmax does);
- ``encode``: the encode ceiling: every stored object encoded with zarr's codecs (what zarrmax runs) by a
  thread per core, nothing written; each object's pooled buffer given back once encoded, as zarrmax's sinks
  give it back once written (`xarray_zarrmax.core.buffers`), so the ceiling is the encoder's work alone;
- ``to_zarr``: ``Dataset.to_zarr`` (engine zarr, Zarr v3) of the dask-chunked Dataset (one dask chunk per
  stored object), dask's threaded scheduler;
- ``zarrmax``: ``xarray_zarrmax.to_zarr`` of the same Dataset, same scheduler.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from asv_bench.shared.process import in_fresh_process, vm_status
from asv_bench.shared.read_layouts import Layout, layouts

STACKS = ("put", "encode", "to_zarr", "zarrmax")
UNNAMED_FILES = hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")
BUCKET = "write-throughput"


def dataset(layout: Layout, data: np.ndarray | None = None) -> Any:
    """The layout's data as a Dataset of one variable "v", dask-chunked one chunk per stored object."""
    import xarray as xr

    dims = ("time", "lat", "lon") if layout.smooth else ("x",)
    ds = xr.Dataset({"v": (dims, layout.data() if data is None else data)})
    return ds.chunk(dict(zip(dims, layout.shards or layout.chunks, strict=True)))


def encoding(layout: Layout) -> dict[str, Any]:
    from zarr.codecs import ZstdCodec

    enc: dict[str, Any] = {"chunks": layout.chunks, "compressors": [ZstdCodec(level=1)]}
    if layout.shards:
        enc["shards"] = layout.shards
    return {"v": enc}


class Target:
    """Fresh places to write on one store kind ("local" or "minio"), and how each stack writes there."""

    def __init__(self, kind: str, tmp: Path, minio: dict[str, Any] | None, workers: int,
                 server_pid: int | None = None) -> None:
        self.kind, self.tmp, self.minio, self.workers = kind, tmp, minio, workers
        self.server_pid = server_pid  # MinIO's process, whose CPU time counts too: it shares these cores

    def cpu_seconds(self) -> tuple[float, float]:
        """CPU time used so far (user + system): by this process, and by the MinIO server (0 locally)."""
        import resource

        me = resource.getrusage(resource.RUSAGE_SELF)
        server = 0.0
        if self.server_pid is not None:
            with open(f"/proc/{self.server_pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            server = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
        return me.ru_utime + me.ru_stime, server

    def fresh(self, stack: str) -> str:
        name = f"{stack}-{uuid.uuid4().hex[:8]}.zarr"
        return str(self.tmp / name) if self.kind == "local" else name

    def _obstore(self, prefix: str) -> Any:
        from obstore.store import S3Store

        assert self.minio is not None
        return S3Store(BUCKET, prefix=prefix, client_options={"allow_http": True}, **self.minio)

    def url(self, where: str) -> tuple[str, dict[str, Any]]:
        """What xarray_zarrmax opens and writes: a path, or an s3:// URL with its storage options."""
        return (where, {}) if self.kind == "local" else (f"s3://{BUCKET}/{where}", {"storage_options": self.minio})

    def write(self, stack: str, where: str, ds: Any, data: np.ndarray, layout: Layout,
              objects: dict[str, bytes], keep: bool = False) -> Any:
        """Write the array with ``stack``: ``ds`` is ``dataset(layout, data)``, ``objects`` its stored objects.
        ``keep``: the encode ceiling returns the objects it encoded (to check them) rather than their size."""
        import dask

        if stack == "put":
            return self.put(where, objects)
        if stack == "encode":
            return encode_all(data, layout, objects, keep=keep)
        with dask.config.set(scheduler="threads", num_workers=self.workers):
            if stack == "to_zarr":
                import zarr

                store: Any = where if self.kind == "local" else zarr.storage.ObjectStore(self._obstore(where))
                ds.to_zarr(store, mode="w", encoding=encoding(layout), zarr_format=3, consolidated=False)
            elif stack == "zarrmax":
                import xarray_zarrmax

                url, kw = self.url(where)
                xarray_zarrmax.to_zarr(ds, url, mode="w", encoding=encoding(layout), consolidated=False, **kw)
            else:
                raise ValueError(f"stack must be one of {STACKS}. Got {stack!r} instead.")
        return None

    def put(self, where: str, objects: dict[str, bytes]) -> int:
        if self.kind == "local":
            root = Path(where)

            def one(item: tuple[str, bytes]) -> int:
                path = root / item[0]
                if not UNNAMED_FILES:
                    path.write_bytes(item[1])
                    return len(item[1])
                # The fastest raw write measured here: a file with no name, written, then linked in (about 1.2x
                # faster than writing a named file, for 0.8-1 MB objects on ext4); zarrmax writes so too.
                fd = os.open(path.parent, os.O_TMPFILE | os.O_WRONLY, 0o666)
                try:
                    view = memoryview(item[1])
                    while view:
                        view = view[os.write(fd, view):]
                    os.link(f"/proc/self/fd/{fd}", path.name, dst_dir_fd=dirs[str(path.parent)])
                finally:
                    os.close(fd)
                return len(item[1])

            dirs: dict[str, int] = {}
            for parent in {str((root / key).parent) for key in objects}:
                os.makedirs(parent, exist_ok=True)
                dirs[parent] = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)

            try:
                with ThreadPoolExecutor(self.workers) as ex:
                    return sum(ex.map(one, objects.items()))
            finally:
                for fd in dirs.values():
                    os.close(fd)
        import obstore

        from xarray_zarrmax import get_config

        store = self._obstore(where)

        async def run() -> int:
            sem = asyncio.Semaphore(get_config().concurrency)

            async def one(key: str, data: bytes) -> int:
                async with sem:
                    await obstore.put_async(store, key, data, use_multipart=False)
                    return len(data)

            return sum(await asyncio.gather(*(one(k, v) for k, v in objects.items())))

        return asyncio.run(run())

    def check(self, where: str, data: np.ndarray) -> None:
        import xarray as xr

        url, kw = self.url(where)
        with xr.open_dataset(url, engine="zarrmax", **kw) as ds:
            got = ds["v"].values
        if got.shape != data.shape or not np.array_equal(got, data):
            raise AssertionError(f"{url}: what was read back differs from what was written")

    def remove(self, where: str) -> None:
        if self.kind == "local":
            shutil.rmtree(where, ignore_errors=True)
            return
        from xarray_zarrmax.storage import ObstoreSink, ObstoreSource

        ObstoreSink(ObstoreSource(self._obstore(where))).delete_prefix("")


def stored_objects(root: Path) -> dict[str, bytes]:
    """Every file of a local Zarr store, by key."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def save_objects(root: Path, objects: dict[str, bytes]) -> Path:
    """``objects`` as the files of a local store at ``root`` (what `peak_write`'s ``put`` and ``encode`` read
    back in their fresh process); returns ``root``."""
    for key, value in objects.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(value)
    return root


def encode_all(values: np.ndarray, layout: Layout, reference: dict[str, bytes], *,
               keep: bool = False) -> dict[str, bytes] | int:
    """Every stored object of "v" (metadata from ``reference``) encoded with zarr's codecs (xarray_zarrmax's
    ObjectCodec) by a thread per core. Timed (``keep`` False): the encoder alone, each object's buffer given back
    once encoded as a sink gives it back once written (`xarray_zarrmax.core.buffers`), returning the bytes encoded.
    ``keep``: the objects, by key, to check against the stored ones."""
    import zarr

    from xarray_zarrmax.core.buffers import release
    from xarray_zarrmax.core.bytes import joined, parts_of
    from xarray_zarrmax.write.codec import ObjectCodec
    from xarray_zarrmax.write.dataset import _full_object
    from xarray_zarrmax.write.plan import objects_for_block

    metadata = zarr.core.metadata.v3.ArrayV3Metadata.from_dict(json.loads(reference["v/zarr.json"]))
    codec = ObjectCodec(metadata, False)
    parts = list(objects_for_block(values.shape, codec.object_shape, (0,) * values.ndim, values.shape))

    def one(part: Any) -> tuple[str, Any]:
        key = "v/" + metadata.encode_chunk_key(part.coords)
        encoded = codec.encode(_full_object(codec, values, part.in_object, part.in_block), pooled=True)
        if encoded is None or keep:
            return key, None if encoded is None else joined(encoded)
        release(parts_of(encoded))
        return key, len(encoded)

    with ThreadPoolExecutor(os.cpu_count() or 1) as ex:
        done = [(k, v) for k, v in ex.map(one, parts) if v is not None]
    return dict(done) if keep else sum(v for _, v in done)


def reference(layout: Layout, data: np.ndarray, tmp: Path) -> dict[str, bytes]:
    """The stored objects of the array (metadata included), as xarray_zarrmax.to_zarr writes them locally:
    what ``put`` sends and ``encode`` must reproduce."""
    import xarray_zarrmax

    where = tmp / f"reference-{uuid.uuid4().hex[:8]}.zarr"
    xarray_zarrmax.to_zarr(dataset(layout, data), where, encoding=encoding(layout), consolidated=False)
    objects = stored_objects(where)
    shutil.rmtree(where)
    return objects


# -- peak memory in a fresh process --------------------------------------------------------------------------


def peak_write(spec: dict[str, Any]) -> int:
    """In a fresh process (`peak_memory`): run one stack once; its peak resident memory beyond what the
    process held before the write (interpreter, imports, the source data, for ``put`` the encoded objects)."""
    import dask  # noqa: F401  (imports before the baseline: what is measured is the write)
    import xarray  # noqa: F401
    import zarr  # noqa: F401

    import xarray_zarrmax  # noqa: F401

    layout = layouts(spec["mib"])[spec["layout"]]
    target = Target(spec["store"], Path(spec["tmp"]), spec["minio"], spec["workers"])
    data = layout.data()
    ds = dataset(layout, data)
    objects = stored_objects(Path(spec["reference"])) if spec["stack"] in ("put", "encode") else {}
    where = target.fresh(spec["stack"])
    before = vm_status("VmRSS")
    target.write(spec["stack"], where, ds, data, layout, objects)
    peak = vm_status("VmHWM")
    target.remove(where)
    return peak - before


def peak_memory(stack: str, layout_index: int, mib: int, workers: int, target: Target, reference_dir: Path) -> int:
    """Peak resident memory of one write by ``stack`` of layout ``layout_index`` in a fresh process, beyond what
    it held before (`peak_write`); ``reference_dir``: a local copy of the stored objects (``put``, ``encode``)."""
    spec = {"stack": stack, "layout": layout_index, "mib": mib, "store": target.kind, "tmp": str(target.tmp),
            "minio": target.minio, "workers": workers, "reference": str(reference_dir)}
    return int(in_fresh_process("asv_bench.shared.writes:peak_write", spec))


# -- many small objects behind latency (the latency table, the asv write-request benchmark) -----------------


@dataclass(frozen=True)
class Case:
    """One write of the latency table: a first write of ``shape``, then, where ``appended``, that many rows
    appended along the first dimension (the append is what is timed)."""

    title: str
    shape: tuple[int, ...]  # of the first write
    layout: dict[str, Any]
    appended: int = 0  # rows appended along the first dimension (0: the first write is what is timed)
    dask: bool = False  # the timed write's data as dask, one chunk per object


CASES = [
    Case("new (2, 721, 1440) f4 in chunks (1, 100, 100), from memory", (2, 721, 1440), {"chunks": (1, 100, 100)}),
    Case("new (2, 721, 1440) f4 in chunks (1, 100, 100), dask chunks = chunks", (2, 721, 1440),
         {"chunks": (1, 100, 100)}, dask=True),
    Case("append 16 to 1-D, chunks 2 in shards of 8 (last shard new)", (96,), {"chunks": (2,), "shards": (8,)}, 16),
    Case("append 50 steps to (t, 37) in chunks (1, 64)", (20, 37), {"chunks": (1, 64)}, 50),
    Case("append 16 to (t, 45, 90), chunks (1, 10, 20) in shards (4, 40, 40)", (8, 45, 90),
         {"chunks": (1, 10, 20), "shards": (4, 40, 40)}, 16),
]
NAMES = itertools.count()  # fresh prefixes within one process


def ramp(shape: tuple[int, ...], start: int) -> Any:
    """A Dataset of one float32 variable "v" over dimensions d0, d1, ...: consecutive values from row
    ``start`` on, so an append continues what came before."""
    import xarray as xr

    row = int(np.prod(shape[1:]))
    values = np.arange(start * row, (start + shape[0]) * row, dtype="f4").reshape(shape)
    return xr.Dataset({"v": (tuple(f"d{i}" for i in range(len(shape))), values)})


def timed_write(case: Case) -> tuple[Any, Any, dict[str, Any]]:
    """A case's first write, the data of its timed write, and the timed write's extra arguments (the append
    dimension, or the encoding of a new array)."""
    first = ramp(case.shape, 0)
    if case.appended:
        timed = ramp((case.appended, *case.shape[1:]), case.shape[0])
        kwargs: dict[str, Any] = {"append_dim": "d0"}
    else:
        timed, kwargs = first, {"encoding": {"v": case.layout}}
    if case.dask:
        chunks = case.layout.get("shards") or case.layout["chunks"]
        timed = timed.chunk(dict(zip(timed["v"].dims, chunks, strict=True)))
    return first, timed, kwargs
