"""Write throughput per layout, against the raw PUT ceiling, the encode ceiling and Dataset.to_zarr, on local
disk and on MinIO.

    .venv/bin/python asv_bench/write_throughput.py [--mib 512] [--repeat 5] [--stores local,minio]
                                                   [--layouts 0,4] [--json out.json] [--plot out.png]

Layouts: those of ``asv_bench/throughput.py`` (seed 000: 1-D int64 random data with zstd in 0.8, 3 and
12.5 MB chunks, and 1 MB chunks in 64 MB shards; a float32 (time, lat, lon) cube in 64 MB shards), the same
encoding (zstd level 1) for every stack. Stacks, each writing the whole array to a fresh target:

- ``put``: the raw PUT ceiling: the stored objects of the array (encoded beforehand, metadata included) sent
  with nothing else: concurrent obstore PUTs at zarrmax's concurrency (MinIO), or files written by a thread
  per object slot (local, ``--workers`` threads; on Linux each written with no name, ``O_TMPFILE``, then
  linked in: the fastest raw write measured here, and what zarrmax does);
- ``encode``: the encode ceiling: every stored object encoded with zarr's codecs (what zarrmax runs) by a
  thread per core, nothing written; each object's pooled buffer given back once encoded, as zarrmax's sinks
  give it back once written (`xarray_zarrmax.core.buffers`), so the ceiling is the encoder's work alone;
- ``to_zarr``: ``Dataset.to_zarr`` (engine zarr, Zarr v3) of the dask-chunked Dataset (one dask chunk per
  stored object), dask's threaded scheduler with ``--workers`` threads;
- ``zarrmax``: ``xarray_zarrmax.to_zarr`` of the same Dataset, same scheduler.

Repeats are interleaved across stacks (one untimed warm-up round first); medians. Every written store is read
back once with engine="zarrmax" and compared with the data (the encode stack: its objects are compared with
those of ``put``, byte for byte). Peak memory (``--peakmem``, default on): each stack once more in a fresh
process, its peak resident set (VmHWM) minus its resident set before the write (interpreter, imports, the
source data, and for ``put`` the encoded objects), as a multiple of the array's size.

Ratios are of time: ``zarrmax / ceiling`` is the slower ceiling's time over zarrmax's (1.0: as fast as the
binding limit, PUT or encode), ``zarrmax / to_zarr`` is to_zarr's time over zarrmax's (above 1: zarrmax
faster). GB/s are of the array's decoded size, but for ``put``: of the stored bytes.

A second table says where the cores go: the CPU time (user + system) of each stack's write, this process's
and, on MinIO, the server's (it runs on the same cores). Each ceiling is measured alone with every core; a
write needs both stages' work, so on few cores it cannot beat the *shared-cores bound*: the two ceilings' CPU
time added, over the cores (and never less than either ceiling's time). ``zarrmax / encode-then-put`` is the
two ceilings' times added over zarrmax's, as the read table's read-then-decode.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchutil import warm_memory  # noqa: E402
from throughput import Layout, layouts  # noqa: E402

warnings.filterwarnings("ignore")

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
        from xarray_zarrmax.storage.sinks import ObstoreSink
        from xarray_zarrmax.storage.sources import ObstoreSource

        ObstoreSink(ObstoreSource(self._obstore(where))).delete_prefix("")


def stored_objects(root: Path) -> dict[str, bytes]:
    """Every file of a local Zarr store, by key."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


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


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _child(spec: dict[str, Any]) -> None:
    """Run one stack once in this (fresh) process; print its peak memory beyond what it held before."""
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
    before = _status("VmRSS")
    target.write(spec["stack"], where, ds, data, layout, objects)
    peak = _status("VmHWM")
    target.remove(where)
    print(json.dumps({"peak": peak - before}))


def peak_memory(stack: str, layout_index: int, args: Any, target: Target, reference_dir: Path) -> int:
    spec = {"stack": stack, "layout": layout_index, "mib": args.mib, "store": target.kind, "tmp": str(target.tmp),
            "minio": target.minio, "workers": args.workers, "reference": str(reference_dir)}
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True,
                         check=True).stdout
    return int(json.loads(out.strip().splitlines()[-1])["peak"])


# -- the run ---------------------------------------------------------------------------------------------------


def measure(layout: Layout, layout_index: int, target: Target, args: Any) -> dict[str, Any]:
    import time

    data = layout.data()
    ds = dataset(layout, data)
    objects = reference(layout, data, target.tmp)
    times: dict[str, list[float]] = {s: [] for s in STACKS}
    cpu: dict[str, list[tuple[float, float]]] = {s: [] for s in STACKS}  # (this process, MinIO) per write
    order = list(STACKS)
    shuffle = random.Random(layout_index).shuffle  # the same orders in every run
    for round_ in range(args.repeat + 1):  # round 0: warm-up, and the one read-back check per stack
        if round_:
            shuffle(order)  # a new order each timed round: a stack can slow the one after it
        for stack in order:
            where = target.fresh(stack)
            warm_memory(2 * layout.nbytes)  # memory the guest has, not the hypervisor's: benchutil.warm_memory
            cpu_before = target.cpu_seconds()
            start = time.perf_counter()
            result = target.write(stack, where, ds, data, layout, objects, keep=round_ == 0)
            elapsed = time.perf_counter() - start
            cpu_after = target.cpu_seconds()
            if round_ == 0:
                if stack == "encode":

                    expected = {k: v for k, v in objects.items() if not k.endswith("zarr.json")}
                    if result != expected:
                        raise AssertionError(f"{layout.name}: the encode ceiling's objects differ from the stored ones")
                else:
                    target.check(where, data)
            else:
                times[stack].append(elapsed)
                cpu[stack].append((cpu_after[0] - cpu_before[0], cpu_after[1] - cpu_before[1]))
            if stack != "encode":
                target.remove(where)
    row: dict[str, Any] = {"layout": layout.name, "store": target.kind, "nbytes": layout.nbytes,
                           "stored": sum(len(v) for k, v in objects.items() if not k.endswith("zarr.json")),
                           "objects": len(objects)}
    for stack in STACKS:
        row[f"{stack}_s"] = float(np.median(times[stack]))
        row[f"{stack}_cpu_s"] = float(np.median([c for c, _ in cpu[stack]]))
        row[f"{stack}_server_cpu_s"] = float(np.median([m for _, m in cpu[stack]]))
    row["cores"] = os.cpu_count() or 1
    if args.peakmem and os.path.exists("/proc/self/status"):
        reference_dir = target.tmp / f"reference-{layout_index}.zarr"
        for key, value in objects.items():
            (reference_dir / key).parent.mkdir(parents=True, exist_ok=True)
            (reference_dir / key).write_bytes(value)
        for stack in STACKS:
            row[f"{stack}_peak"] = peak_memory(stack, layout_index, args, target, reference_dir)
        shutil.rmtree(reference_dir, ignore_errors=True)
    return row


def ratios(r: dict[str, Any]) -> tuple[float, str, float]:
    """(slower ceiling's time / zarrmax's, which ceiling, to_zarr's time / zarrmax's)."""
    bound = "put" if r["put_s"] >= r["encode_s"] else "encode"
    return r[f"{bound}_s"] / r["zarrmax_s"], bound, r["to_zarr_s"] / r["zarrmax_s"]


def format_row(r: dict[str, Any]) -> str:
    gb = r["nbytes"] / 1e9
    to_ceiling, bound, to_zarr = ratios(r)
    peaks = " | ".join(f"{r[f'{s}_peak'] / r['nbytes']:.2f}" if f"{s}_peak" in r else "-" for s in STACKS)
    return (f"| {r['layout']} | {r['store']} | {r['stored'] / r['put_s'] / 1e9:.2f} | {gb / r['encode_s']:.2f} "
            f"| {gb / r['to_zarr_s']:.2f} | {gb / r['zarrmax_s']:.2f} | {to_ceiling:.2f}x ({bound}) "
            f"| {to_zarr:.2f}x | {peaks} |")


def table(rows: list[dict[str, Any]], args: Any) -> str:
    head = (
        f"Whole-array writes ({args.mib} MiB each), median of {args.repeat} interleaved rounds; dask's threaded "
        f"scheduler with {args.workers} threads for to_zarr and zarrmax. GB/s of the array's size (put: of the "
        "stored bytes). Ratios of time: the slower ceiling's / zarrmax's, to_zarr's / zarrmax's. Peak memory: "
        "of one write in a fresh process, as a multiple of the array's size.\n\n"
        "| layout | store | PUT ceiling | encode ceiling | Dataset.to_zarr | zarrmax | zarrmax / ceiling "
        "| zarrmax / to_zarr | peak put | peak encode | peak to_zarr | peak zarrmax |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    return "\n".join([head] + [format_row(r) for r in rows])


def cpu_bound_s(r: dict[str, Any]) -> float:
    """The shortest a write can take when its two stages share the cores: the CPU time of the PUT ceiling (this
    process and MinIO's) plus the encode ceiling's, over the cores, and never less than either ceiling."""
    work = r["put_cpu_s"] + r["put_server_cpu_s"] + r["encode_cpu_s"] + r["encode_server_cpu_s"]
    return max(r["put_s"], r["encode_s"], work / r["cores"])


def cpu_table(rows: list[dict[str, Any]]) -> str:
    """Where the cores go: CPU seconds of each stack's write (this process + MinIO's), and zarrmax against the
    bound both stages set when they share the cores (`cpu_bound_s`), and against encode-then-put (their times
    added, as the read table's read-then-decode). The last column is to_zarr's time over that bound: the most
    any writer could be faster than to_zarr on this machine (where it is under 2, so is any writer's ratio), and
    the slower ceiling's time over that bound: the most of the binding ceiling any writer can reach here (where
    it is under 0.9, so is any writer's ratio to the ceiling)."""
    head = ("| layout | store | put CPU s | encode CPU s | to_zarr CPU s | zarrmax CPU s | shared-cores bound s "
            "| zarrmax s | zarrmax / shared-cores bound | zarrmax / encode-then-put "
            "| to_zarr / shared-cores bound (most any writer can gain over to_zarr) "
            "| ceiling / shared-cores bound (most of the ceiling any writer can reach) |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|")

    def cell(r: dict[str, Any], stack: str) -> str:
        me, server = r[f"{stack}_cpu_s"], r[f"{stack}_server_cpu_s"]
        return f"{me:.2f}" + (f" + {server:.2f}" if r["store"] != "local" else "")

    lines = [head]
    for r in rows:
        bound = cpu_bound_s(r)
        lines.append(f"| {r['layout']} | {r['store']} | {cell(r, 'put')} | {cell(r, 'encode')} | {cell(r, 'to_zarr')} "
                     f"| {cell(r, 'zarrmax')} | {bound:.3f} | {r['zarrmax_s']:.3f} | {bound / r['zarrmax_s']:.2f}x "
                     f"| {(r['put_s'] + r['encode_s']) / r['zarrmax_s']:.2f}x | {r['to_zarr_s'] / bound:.2f}x "
                     f"| {max(r['put_s'], r['encode_s']) / bound:.2f}x |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stores = sorted({r["store"] for r in rows})
    fig, axes = plt.subplots(1, len(stores), figsize=(6 * len(stores), 4.5), squeeze=False)
    for ax, store in zip(axes[0], stores, strict=True):
        sub = [r for r in rows if r["store"] == store]
        x = np.arange(len(sub))
        width = 0.8 / len(STACKS)
        for i, stack in enumerate(STACKS):
            size = [r["stored"] if stack == "put" else r["nbytes"] for r in sub]
            ax.bar(x + (i - (len(STACKS) - 1) / 2) * width,
                   [s / r[f"{stack}_s"] / 1e9 for s, r in zip(size, sub, strict=True)], width, label=stack)
        ax.set_xticks(x, [textwrap.fill(r["layout"], 16) for r in sub], fontsize=7)
        ax.set_ylabel("GB/s")
        ax.set_title(f"{store}: whole-array write")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    from benchutil import start_minio

    parser = argparse.ArgumentParser(description="write throughput benchmark")
    parser.add_argument("--mib", type=int, default=512, help="size of each array (MiB)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workers", type=int, default=16, help="dask threads (to_zarr, zarrmax); local PUT threads")
    parser.add_argument("--stores", default="local,minio")
    parser.add_argument("--layouts", default="", help="comma-separated indexes into the layout list")
    parser.add_argument("--no-peakmem", dest="peakmem", action="store_false", help="skip the peak-memory runs")
    parser.add_argument("--json")
    parser.add_argument("--plot")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(json.loads(args.child))
        return 0
    stores = args.stores.split(",")
    if unknown := set(stores) - {"local", "minio"}:
        parser.error(f"--stores takes local and minio. Got {sorted(unknown)}.")
    chosen = list(enumerate(layouts(args.mib)))
    if args.layouts:
        chosen = [chosen[int(i)] for i in args.layouts.split(",")]

    minio = None
    tmp = Path(tempfile.mkdtemp(prefix="zarrmax-write-throughput-"))
    rows: list[dict[str, Any]] = []
    try:
        if "minio" in stores:
            started = start_minio(BUCKET)
            if started is None:
                return 2
            minio = started[0]
        for index, layout in chosen:
            for kind in stores:
                options = None if minio is None or kind == "local" else minio.storage_options()
                pid = None if minio is None or kind == "local" else minio.proc.pid
                row = measure(layout, index, Target(kind, tmp, options, args.workers, pid), args)
                rows.append(row)
                print(format_row(row), file=sys.stderr, flush=True)
    finally:
        if minio is not None:
            minio.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(table(rows, args))
    print()
    print(cpu_table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("ICECHUNK_LOG", "error")
    raise SystemExit(main())
