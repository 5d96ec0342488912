"""Read throughput per layout, against the raw ceiling and engine="zarr", on local disk and on MinIO.

    .venv/bin/python asv_bench/throughput.py [--mib 512] [--repeat 3] [--workers 16] [--stores local,minio]
                                             [--json out.json] [--plot docs/throughput.png]

Layouts (issue "Throughput"): 1-D int64 random data (incompressible, zstd) in 0.8, 3 and 12.5 MB chunks, and
1 MB chunks in 64 MB shards; a 3-D float32 (time, lat, lon) cube of smooth data with zstd in 64 MB shards.
For each layout and store, in the same run: the raw ceiling (plain concurrent file reads or obstore GETs of
every stored object, no decode), engine="zarr" with dask, engine="zarrmax" with dask; both engines on the
threaded scheduler with ``--workers`` threads. Medians of ``--repeat`` full reads (``.values``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import textwrap
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from benchutil import median_time  # noqa: E402

warnings.filterwarnings("ignore")


@dataclass(frozen=True)
class Layout:
    name: str
    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    smooth: bool = False

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize

    def data(self) -> np.ndarray:
        rng = np.random.default_rng(1)
        if not self.smooth:
            return rng.integers(0, 2**63 - 1, self.shape, dtype=self.dtype)
        nt, ny, nx = self.shape
        lat = np.linspace(-np.pi / 2, np.pi / 2, ny, dtype="f4")[None, :, None]
        lon = np.linspace(0, 2 * np.pi, nx, dtype="f4")[None, None, :]
        t = np.arange(nt, dtype="f4")[:, None, None]
        cube = 273.0 + 30 * np.cos(lat) + 5 * np.sin(lon + t / 24) + np.cos(3 * lat + t / 100)
        noise = rng.normal(scale=0.05, size=(1, ny, nx)).astype("f4")
        return (cube + noise).astype(self.dtype)


def layouts(mib: int) -> list[Layout]:
    n = mib * 2**20 // 8
    cube_t = max(mib * 2**20 // (512 * 512 * 4), 64)
    return [
        Layout("int64, 0.8 MB chunks", (n,), "i8", (100_000,), None),
        Layout("int64, 3 MB chunks", (n,), "i8", (375_000,), None),
        Layout("int64, 12.5 MB chunks", (n,), "i8", (1_562_500,), None),
        Layout("int64, 1 MB chunks in 64 MB shards", (n,), "i8", (131_072,), (8_388_608,)),
        Layout("float32 cube, 4 MB chunks in 64 MB shards", (cube_t, 512, 512), "f4", (16, 256, 256),
               (64, 512, 512), smooth=True),
    ]


def write(store: Any, layout: Layout) -> None:
    import zarr
    from zarr.codecs import ZstdCodec

    dims = ["time", "lat", "lon"][: len(layout.shape)] if layout.smooth else ["x"]
    group = zarr.open_group(store, mode="w", zarr_format=3)
    arr = group.create_array("v", shape=layout.shape, dtype=layout.dtype, chunks=layout.chunks,
                             shards=layout.shards, compressors=[ZstdCodec(level=1)], dimension_names=dims)
    arr[...] = layout.data()


def ceiling_local(root: Path, workers: int) -> int:
    files = [p for p in (root / "v").rglob("*") if p.is_file() and p.name != "zarr.json"]

    def read(p: Path) -> int:
        with open(p, "rb") as f:
            return len(f.read())

    with ThreadPoolExecutor(workers) as ex:
        return sum(ex.map(read, files))


def ceiling_s3(store: Any, concurrency: int) -> int:
    import obstore

    async def run() -> int:
        keys = [o["path"] for batch in obstore.list(store, "v/c") for o in batch]
        sem = asyncio.Semaphore(concurrency)

        async def one(k: str) -> int:
            async with sem:
                result = await obstore.get_async(store, k)
                return len(await result.bytes_async())

        return sum(await asyncio.gather(*(one(k) for k in keys)))

    return asyncio.run(run())


def read_engine(target: Any, engine: str, workers: int, *, use_dask: bool = True, **kw: Any) -> int:
    """Open ``target`` with ``engine`` and load the variable "v" fully; returns the bytes loaded."""
    import dask
    import xarray as xr

    extra = {"consolidated": False} if engine == "zarr" else {}
    ds = xr.open_dataset(target, engine=engine, chunks={} if use_dask else None, **extra, **kw)
    with dask.config.set(scheduler="threads", num_workers=workers):
        return ds["v"].values.nbytes


# VmHWM (peak resident set of this process's address space) starts afresh at exec, unlike ru_maxrss, which a
# child inherits from its parent at fork.
_PEAK_SCRIPT = """
import sys, json, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, {here!r})
import numpy, xarray, zarr, dask, obstore, xarray_zarrmax.backend
from throughput import read_engine

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

before = status("VmRSS")
target, engine, kw = json.loads(sys.argv[1])
read_engine(target, engine, 16, use_dask=kw.pop("use_dask"), **kw)
print(json.dumps({{"before": before, "peak": status("VmHWM")}}))
"""


def peak_memory(target: Any, engine: str, use_dask: bool, kw: dict[str, Any]) -> int:
    """Peak resident memory (bytes) of a fresh process that opens and reads the array once, minus its
    resident memory before the read (interpreter and imports)."""
    import subprocess

    script = _PEAK_SCRIPT.format(here=str(Path(__file__).parent))
    args = json.dumps([target, engine, {**kw, "use_dask": use_dask}])
    out = subprocess.run([sys.executable, "-c", script, args], capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return int(result["peak"] - result["before"])



def main(argv: list[str] | None = None) -> int:
    import zarr

    from xarray_zarrmax import get_config
    from xarray_zarrmax.testing import MinioServer, minio_binary

    parser = argparse.ArgumentParser(description="read throughput benchmark")
    parser.add_argument("--mib", type=int, default=512, help="size of each array (MiB)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workers", type=int, default=16, help="dask threads, both engines")
    parser.add_argument("--stores", default="local,minio")
    parser.add_argument("--layouts", default="", help="comma-separated indexes into the layout list")
    parser.add_argument("--peakmem", action="store_true", help="also measure peak memory (local store only)")
    parser.add_argument("--json")
    parser.add_argument("--plot")
    args = parser.parse_args(argv)
    stores = args.stores.split(",")
    chosen = layouts(args.mib)
    if args.layouts:
        chosen = [chosen[int(i)] for i in args.layouts.split(",")]

    minio = None
    if "minio" in stores:
        binary = minio_binary()
        if binary is None:
            print("MinIO not found: run `bash ci/install_services.sh`", file=sys.stderr)
            return 2
        minio = MinioServer(binary).start()
        bucket = minio.make_bucket("throughput")
    tmp = Path(tempfile.mkdtemp(prefix="zarrmax-throughput-"))
    rows: list[dict[str, Any]] = []
    try:
        for layout in chosen:
            for store_kind in stores:
                key = f"l{chosen.index(layout)}.zarr"
                if store_kind == "local":
                    write(str(tmp / key), layout)
                    target, kw = str(tmp / key), {}
                    zarr_target: Any = str(tmp / key)
                    ceiling = lambda: ceiling_local(tmp / key, args.workers)  # noqa: E731
                else:
                    assert minio is not None
                    obs = minio.obstore(bucket, key)
                    write(zarr.storage.ObjectStore(obs), layout)
                    target, kw = f"s3://{bucket}/{key}", {"storage_options": minio.storage_options()}
                    zarr_target = zarr.storage.ObjectStore(obs, read_only=True)
                    ceiling = lambda: ceiling_s3(obs, get_config().concurrency)  # noqa: E731
                os.sync()  # no writeback of the data just written competes with the reads
                stored = ceiling()
                t_ceiling = median_time(ceiling, args.repeat)
                t_zarr = median_time(lambda: read_engine(zarr_target, "zarr", args.workers), args.repeat)
                t_max = median_time(lambda: read_engine(target, "zarrmax", args.workers, **kw), args.repeat)
                t_zarr_nd = median_time(lambda: read_engine(zarr_target, "zarr", args.workers, use_dask=False),
                                  args.repeat)
                t_max_nd = median_time(lambda: read_engine(target, "zarrmax", args.workers, use_dask=False, **kw),
                                 args.repeat)
                row = {"layout": layout.name, "store": store_kind, "nbytes": layout.nbytes, "stored": stored,
                       "ceiling_s": t_ceiling, "zarr_s": t_zarr, "zarrmax_s": t_max,
                       "zarr_nodask_s": t_zarr_nd, "zarrmax_nodask_s": t_max_nd}
                if args.peakmem and store_kind == "local":
                    for engine in ("zarr", "zarrmax"):
                        for use_dask in (True, False):
                            key_name = f"peak_{engine}_{'dask' if use_dask else 'nodask'}"
                            row[key_name] = peak_memory(target, engine, use_dask, {})
                    print("peak memory / output size:", {k: round(v / layout.nbytes, 2) for k, v in row.items()
                                                         if k.startswith("peak_")}, file=sys.stderr, flush=True)
                rows.append(row)
                print(_format_row(row), file=sys.stderr, flush=True)
                if store_kind == "local":
                    import shutil

                    shutil.rmtree(tmp / key, ignore_errors=True)
    finally:
        if minio is not None:
            minio.close()
    print()
    print(table(rows, args))
    peaks = [r for r in rows if "peak_zarrmax_dask" in r]
    if peaks:
        print("\nPeak resident memory of one full read in a fresh process, as a multiple of the output size "
              "(local store):\n")
        print("| layout | zarr, dask | zarrmax, dask | zarr, no dask | zarrmax, no dask |\n|---|---|---|---|---|")
        for r in peaks:
            cells = " | ".join(f"{r[k] / r['nbytes']:.2f}" for k in ("peak_zarr_dask", "peak_zarrmax_dask",
                                                                       "peak_zarr_nodask", "peak_zarrmax_nodask"))
            print(f"| {r['layout']} | {cells} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    if args.plot:
        plot(rows, args.plot)
    return 0


def _format_row(r: dict[str, Any]) -> str:
    gb = r["nbytes"] / 1e9
    return (
        f"| {r['layout']} | {r['store']} | {r['stored'] / r['ceiling_s'] / 1e9:.2f} "
        f"| {gb / r['zarr_s']:.2f} | {gb / r['zarrmax_s']:.2f} "
        f"| {r['ceiling_s'] / r['zarrmax_s']:.2f}x | {r['zarr_s'] / r['zarrmax_s']:.2f}x "
        f"| {gb / r['zarr_nodask_s']:.2f} | {gb / r['zarrmax_nodask_s']:.2f} "
        f"| {r['ceiling_s'] / r['zarrmax_nodask_s']:.2f}x | {r['zarr_nodask_s'] / r['zarrmax_nodask_s']:.2f}x |"
    )


def table(rows: list[dict[str, Any]], args: Any) -> str:
    head = (
        f"Full read (`.values`) of each array ({args.mib} MiB), median of {args.repeat}. \"dask\": `chunks={{}}`, "
        f"threaded scheduler with {args.workers} threads for both engines; \"no dask\": `chunks=None`, the engine's "
        "own concurrency. GB/s of decoded output; the raw ceiling is GB/s of stored bytes, and ratios to it are "
        "ratios of time for the same objects.\n\n"
        "| layout | store | raw ceiling | zarr, dask | zarrmax, dask | zarrmax dask / ceiling | zarrmax / zarr, dask "
        "| zarr, no dask | zarrmax, no dask | zarrmax no dask / ceiling | zarrmax / zarr, no dask |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|"
    )
    return "\n".join([head] + [_format_row(r) for r in rows])


def plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stores = sorted({r["store"] for r in rows})
    fig, axes = plt.subplots(1, len(stores), figsize=(6 * len(stores), 4.5), squeeze=False)
    for ax, store in zip(axes[0], stores, strict=True):
        sub = [r for r in rows if r["store"] == store]
        x = np.arange(len(sub))
        stacks = (("raw ceiling", "ceiling_s"), ('zarr, dask', "zarr_s"), ("zarrmax, dask", "zarrmax_s"),
                  ("zarr, no dask", "zarr_nodask_s"), ("zarrmax, no dask", "zarrmax_nodask_s"))
        width = 0.8 / len(stacks)
        for i, (label, key) in enumerate(stacks):
            size = [r["stored"] if key == "ceiling_s" else r["nbytes"] for r in sub]
            ax.bar(x + (i - (len(stacks) - 1) / 2) * width, [s / r[key] / 1e9 for s, r in zip(size, sub, strict=True)],
                   width, label=label)
        ax.set_xticks(x, [textwrap.fill(r["layout"], 16) for r in sub], fontsize=7)
        ax.set_ylabel("GB/s")
        ax.set_title(f"{store}: full read")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    os.environ.setdefault("ICECHUNK_LOG", "error")
    raise SystemExit(main())
