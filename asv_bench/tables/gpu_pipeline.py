"""Seed 004's GPU workload: zarrmax device="cuda" against zarr's GPU mode and zarr + NumPy.

    .venv/bin/python -m asv_bench.tables.gpu_pipeline [--dir /tmp/gpu_bench] [--repeat 3] [--workers 4] [--scale 1.0]

A 1-D float32 array of 819,200,000 elements (3.2 GB) in 256,000-element zstd chunks, 400 chunks per shard,
8 shards, on local disk; a compute step per shard (matrix products and reductions). Each implementation reads
and computes every shard; printed: median seconds and the ratio to the hand-written pipeline's 0.478 s.
NVTX ranges (zarrmax::read / transfer / decode, bench::compute) show per-shard stages in an nsys profile:
    nsys profile -t cuda,nvtx .venv/bin/python -m asv_bench.tables.gpu_pipeline --repeat 1
Needs a CUDA GPU, cupy and nvidia-nvcomp (pip install '.[gpu]'); exits with status 2 without them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from asv_bench.shared.runner import Session, Table, add_flags, execute

HAND_WRITTEN_S = 0.478  # seed 004, "Custom / CuPy", 3.2 GB on an H100-class GPU
CHUNK, PER_SHARD, SHARDS = 256_000, 400, 8


def make(path: Path, scale: float) -> tuple[int, int]:
    import zarr
    from zarr.codecs import ZstdCodec

    shard = CHUNK * PER_SHARD
    n_shards = max(1, int(SHARDS * scale))
    if (path / "v" / "zarr.json").exists():
        return shard, n_shards
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(shard * n_shards,), chunks=(CHUNK,), shards=(shard,), dtype="f4",
                             compressors=[ZstdCodec(level=1)], dimension_names=["x"])
    rng = np.random.default_rng(0)
    for i in range(n_shards):  # compressible, about 5x like the seed's data
        arr[i * shard:(i + 1) * shard] = rng.integers(0, 1024, shard // 8).repeat(8).astype("f4") / 8
    return shard, n_shards


def compute(xp: Any, block: Any) -> Any:
    """The per-shard compute step: products and reductions over the shard, in the array's own library."""
    m = block[: (block.size // 1024) * 1024].reshape(-1, 1024)
    head = m[:2048]
    return float((head @ head.T).sum() + m.sum() + (m * m).mean())


def nvtx(name: str) -> Any:
    from xarray_zarrmax.gpu.cuda import nvtx_range

    return nvtx_range(name)


def zarr_numpy(path: Path, shard: int, n: int, workers: int) -> float:
    import zarr

    arr = zarr.open_array(str(path), path="v")
    return sum(compute(np, arr[i * shard:(i + 1) * shard]) for i in range(n))


def zarr_gpu(path: Path, shard: int, n: int, workers: int) -> float:
    import cupy
    import zarr

    with zarr.config.enable_gpu():
        arr = zarr.open_array(str(path), path="v")
        total = sum(compute(cupy, arr[i * shard:(i + 1) * shard]) for i in range(n))
    cupy.cuda.runtime.deviceSynchronize()
    return total


def zarrmax_cuda(path: Path, shard: int, n: int, workers: int) -> float:
    import cupy
    import dask
    import xarray as xr

    ds = xr.open_dataset(path, engine="zarrmax", chunks={}, device="cuda")

    def per_shard(block: Any) -> Any:
        with nvtx("bench::compute"):
            return np.array([compute(cupy, block)])

    with dask.config.set(scheduler="threads", num_workers=workers):
        parts = ds["v"].data.map_blocks(per_shard, chunks=(1,), dtype="f8", meta=np.array((), "f8")).compute()
    cupy.cuda.runtime.deviceSynchronize()
    return float(parts.sum())


def flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default="/tmp/zarrmax_gpu_bench")
    add_flags(parser, repeat=3)
    parser.add_argument("--workers", type=int, default=4, help="dask threads (each has its own CUDA stream)")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the 8 shards to use")
    parser.add_argument("--skip-numpy", action="store_true", help="skip the slow zarr + NumPy baseline")


def run(session: Session) -> int:
    args = session.args
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
        from nvidia import nvcomp  # noqa: F401
    except Exception as err:  # ImportError, or a CUDA runtime error without a driver
        print(f"gpu_pipeline: needs a CUDA GPU with cupy and nvidia-nvcomp: {err}", file=sys.stderr)
        return 2
    path = Path(args.dir) / "seed004.zarr"
    shard, n = make(path, args.scale)
    stacks = {"zarrmax device=cuda": zarrmax_cuda, "zarr enable_gpu()": zarr_gpu}
    if not args.skip_numpy:
        stacks["zarr + NumPy"] = zarr_numpy
    results = {}
    answers = {}
    for name, fn in stacks.items():
        answers[name] = fn(path, shard, n, args.workers)  # warm-up (file cache, CUDA context, kernels)
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            fn(path, shard, n, args.workers)
            times.append(time.perf_counter() - start)
        results[name] = statistics.median(times)
    gb = shard * n * 4 / 1e9
    print(f"\n{gb:.2f} GB float32, {n} shards of {PER_SHARD} zstd chunks, median of {args.repeat} "
          f"(GPU: {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()})\n")
    print("| implementation | seconds | GB/s | vs hand-written 0.478 s (x scale) |")
    print("|---|---|---|---|")
    for name, seconds in results.items():
        print(f"| {name} | {seconds:.3f} | {gb / seconds:.2f} | {seconds / (HAND_WRITTEN_S * n / SHARDS):.2f}x |")
    reference = answers["zarr enable_gpu()"]
    for name, value in answers.items():
        if not np.isclose(value, reference, rtol=1e-4):
            print(f"MISMATCH: {name} computed {value}, zarr computed {reference}", file=sys.stderr)
            return 1
    return 0


TABLE = Table(__doc__ or "", run, flags)

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
