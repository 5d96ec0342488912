"""Per-chunk cost of reading small chunks: one 64x390x576 float32 shard of 3744 zstd chunks of 4x30x32 (15 KB),
as the access-pattern layouts keep them, read whole from local disk by zarrmax, engine="zarr", zarr-python with
zarrs and TensorStore; wall and CPU time per chunk, medians.

    .venv/bin/python -m asv_bench.experiments.small_chunks [--repeat 7] [--threads 1,2] [--profile]

``--profile``: a cProfile of one zarrmax read on one thread (deterministic; py-spy's sampling distorts these
short threaded reads), by time spent in each function.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from asv_bench.shared.runner import Session, Table, add_flags, execute

SHAPE, CHUNKS = (64, 390, 576), (4, 30, 32)
NCHUNKS = 16 * 13 * 18


def write(path: Path) -> np.ndarray:
    import xarray as xr
    import zarr

    rng = np.random.default_rng(0)
    field = np.sin(np.arange(SHAPE[2]) / 50)[None, None, :] * 10 + rng.normal(size=SHAPE)
    values = np.round(field, 2).astype("f4")
    encoding = {"t": {"chunks": CHUNKS, "shards": SHAPE, "compressors": zarr.codecs.ZstdCodec(level=3)}}
    xr.Dataset({"t": (("time", "lat", "lon"), values)}).to_zarr(path, mode="w", zarr_format=3,
                                                               consolidated=False, encoding=encoding)
    return values


def timed(read: Callable[[], Any], expected: np.ndarray, repeat: int) -> tuple[float, float]:
    """Median (wall, CPU) seconds of ``read``, its values checked once."""
    got = np.asarray(read())
    if not np.array_equal(got, expected):
        raise AssertionError("wrong values")
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        read()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return float(np.median(walls)), float(np.median(cpus))


def stacks(path: Path, threads: int) -> dict[str, Callable[[], Any]]:
    import xarray as xr
    import zarr

    from xarray_zarrmax import set_config

    def zarrmax() -> Any:
        with set_config(threads=threads):
            return xr.open_dataset(path, engine="zarrmax", chunks=None, consolidated=False)["t"].values

    def with_pipeline(name: str) -> Callable[[], Any]:
        def read() -> Any:
            with zarr.config.set({"codec_pipeline.path": name, "threading.max_workers": threads}):
                return zarr.open_array(path / "t", mode="r")[:]
        return read

    found = {"zarrmax": zarrmax,
             "engine=zarr": lambda: xr.open_dataset(path, engine="zarr", chunks=None,
                                                    consolidated=False)["t"].values}
    try:
        import zarrs  # noqa: F401

        found["zarr-python + zarrs"] = with_pipeline("zarrs.ZarrsCodecPipeline")
    except ImportError:
        pass
    try:
        import tensorstore as ts

        context = ts.Context({"data_copy_concurrency": {"limit": threads},
                              "file_io_concurrency": {"limit": threads}})
        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path / "t")}}
        found["TensorStore"] = lambda: ts.open(spec, context=context).result().read().result()
    except ImportError:
        pass
    return found


def flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, repeat=7)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--profile", action="store_true")


def run(session: Session) -> int:
    args = session.args
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "small.zarr"
        values = write(path)
        print("| threads | stack | wall ms | CPU ms | wall us/chunk | CPU us/chunk |\n|---|---|---|---|---|---|")
        for threads in (int(t) for t in args.threads.split(",")):
            for name, read in stacks(path, threads).items():
                wall, cpu = timed(read, values, args.repeat)
                print(f"| {threads} | {name} | {wall * 1e3:.0f} | {cpu * 1e3:.0f} | {wall / NCHUNKS * 1e6:.1f} "
                      f"| {cpu / NCHUNKS * 1e6:.1f} |", flush=True)
        if args.profile:
            read = stacks(path, 1)["zarrmax"]
            profile = cProfile.Profile()
            profile.runcall(read)
            pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(20)
    return 0


TABLE = Table(__doc__ or "", run, flags)

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
