"""Seed 004's GPU workload: zarrmax device="cuda" against zarr's GPU mode and zarr + NumPy, with the split
into stages.

    .venv/bin/python -m asv_bench.tables.gpu_pipeline [--dir /tmp/gpu_bench] [--repeat 3] [--workers 4] [--scale 1.0]
                                                      [--device cuda|host] [--json out.json]

A 1-D float32 array of 819,200,000 elements (3.2 GB) in 256,000-element zstd chunks, 400 chunks per shard,
8 shards, on local disk; a compute step per shard (matrix products and reductions). Each implementation reads
and computes every shard; printed: median seconds and the ratio to the hand-written pipeline's 0.478 s.

Stages, each alone on every shard in turn on one thread, synchronised after each (the physical limits of the
pipeline's parts, seed 004's table): read (the shard file into host memory), transfer (the frames packed
16-byte aligned into a pinned buffer and copied to the device in one copy), decode (one batched nvCOMP zstd
call into the output), compute. Their sum against the end-to-end time shows what overlapping them gained.
NVTX ranges (zarrmax::read / transfer / decode, bench::compute) show per-shard stages in an nsys profile:
    nsys profile -t cuda,nvtx .venv/bin/python -m asv_bench.tables.gpu_pipeline --repeat 1

``--device cuda`` (default) needs a CUDA GPU, cupy and nvidia-nvcomp (pip install '.[gpu]') and exits with
status 2 without them. ``--device host`` runs the same code on the NumPy stand-in (`HostDevice`) without zarr's
GPU mode: what ``ci/gpu_check.sh --dry-run`` does in CI so this script cannot rot while no GPU is lent.
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
    for i in range(n_shards):  # about 5x with zstd level 1, as the seed's data (77.5 MB stored per 410 MB shard)
        arr[i * shard:(i + 1) * shard] = rng.integers(0, 1024, shard // 3 + 1).repeat(3)[:shard].astype("f4") / 8
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


def zarrmax_on(device: Any, xp: Any) -> Any:
    """zarrmax with ``device=`` (``"cuda"`` or a `HostDevice`), computing with ``xp`` (CuPy or NumPy)."""

    def read(path: Path, shard: int, n: int, workers: int) -> float:
        import dask
        import xarray as xr

        ds = xr.open_dataset(path, engine="zarrmax", chunks={}, device=device, consolidated=False)

        def per_shard(block: Any) -> Any:
            with nvtx("bench::compute"):
                return np.array([compute(xp, block)])

        with dask.config.set(scheduler="threads", num_workers=workers):
            parts = ds["v"].data.map_blocks(per_shard, chunks=(1,), dtype="f8", meta=np.array((), "f8")).compute()
        _synchronize(xp)
        return float(parts.sum())

    return read


def _synchronize(xp: Any) -> None:
    if xp is not np:
        xp.cuda.runtime.deviceSynchronize()


def stages(path: Path, n: int, device: Any, xp: Any) -> dict[str, float]:
    """Seconds of each stage alone over every shard (the module docstring), through the `Device` interface the
    pipeline uses, so the same code runs on CUDA and on the stand-in."""
    from xarray_zarrmax.gpu.cuda import cuda_device

    dev = cuda_device() if device == "cuda" else device
    stream = dev.stream()
    index_bytes = PER_SHARD * 16 + 4  # (offset, nbytes) uint64 pairs and a crc32c, at the end (the default)
    totals = dict.fromkeys(("read", "transfer", "decode", "compute"), 0.0)
    checksum = 0.0
    for i in range(n):
        start = time.perf_counter()
        blob = (path / "v" / "c" / str(i)).read_bytes()
        totals["read"] += time.perf_counter() - start

        index = np.frombuffer(blob[-index_bytes:-4], dtype="<u8").reshape(PER_SHARD, 2)
        sizes = [int(x) for x in index[:, 1]]
        offsets = [0]
        for size in sizes[:-1]:
            offsets.append(offsets[-1] + -(-size // 16) * 16)
        start = time.perf_counter()
        staging = dev.pinned(offsets[-1] + sizes[-1])
        for (at, size), to in zip(index, offsets, strict=True):
            staging[to:to + int(size)] = np.frombuffer(blob, np.uint8, int(size), int(at))
        packed = dev.to_device(staging, stream)
        dev.record(stream).synchronize()
        totals["transfer"] += time.perf_counter() - start

        out = dev.empty((CHUNK * PER_SHARD,), np.dtype("f4"))
        views = [out[j * CHUNK:(j + 1) * CHUNK].view(np.uint8) for j in range(PER_SHARD)]
        start = time.perf_counter()
        dev.decode_zstd(packed, offsets, sizes, stream, out=views)
        dev.record(stream).synchronize()
        totals["decode"] += time.perf_counter() - start

        start = time.perf_counter()
        checksum += compute(xp, out)
        _synchronize(xp)
        totals["compute"] += time.perf_counter() - start
    totals["checksum"] = checksum
    return totals


def flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default="/tmp/zarrmax_gpu_bench")
    add_flags(parser, repeat=3, json_file=True)
    parser.add_argument("--workers", type=int, default=4, help="dask threads (each has its own CUDA stream)")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the 8 shards to use")
    parser.add_argument("--device", choices=("cuda", "host"), default="cuda",
                        help="host: the NumPy stand-in, no GPU needed (a dry run of this script)")
    parser.add_argument("--skip-numpy", action="store_true", help="skip the slow zarr + NumPy baseline")
    parser.add_argument("--numpy-repeat", type=int, default=1,
                        help="timed reads of the zarr + NumPy baseline (about 40x slower), after no warm-up")


def _cuda_or_exit() -> Any:
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
        from nvidia import nvcomp  # noqa: F401
    except Exception as err:  # ImportError, or a CUDA runtime error without a driver
        print(f"gpu_pipeline: needs a CUDA GPU with cupy and nvidia-nvcomp (or --device host): {err}",
              file=sys.stderr)
        return None
    return cupy


def _timed(fn: Any, repeat: int, warm: bool, *args: Any) -> tuple[float, float]:
    """(answer, median seconds of ``repeat`` runs), after one untimed run when ``warm``."""
    answer = fn(*args) if warm else None
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        answer = fn(*args)
        times.append(time.perf_counter() - start)
    return float(answer), statistics.median(times)


def run(session: Session) -> int:
    args = session.args
    if args.device == "cuda":
        cupy = _cuda_or_exit()
        if cupy is None:
            return 2
        xp, device, gpu = cupy, "cuda", cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    else:
        from xarray_zarrmax.gpu.device import HostDevice

        xp, device, gpu = np, HostDevice(), "none: the NumPy stand-in (--device host)"
    path = Path(args.dir) / "seed004.zarr"
    shard, n = make(path, args.scale)
    stacks: dict[str, tuple[Any, int, bool]] = {f"zarrmax device={args.device}": (zarrmax_on(device, xp),
                                                                                   args.repeat, True)}
    if args.device == "cuda":
        stacks["zarr enable_gpu()"] = (zarr_gpu, args.repeat, True)
    if not args.skip_numpy:  # its file reads come after the others warmed the page cache
        stacks["zarr + NumPy"] = (zarr_numpy, args.numpy_repeat, False)
    results, answers = {}, {}
    for name, (fn, repeat, warm) in stacks.items():
        answers[name], results[name] = _timed(fn, repeat, warm, path, shard, n, args.workers)
    split = [stages(path, n, device, xp) for _ in range(args.repeat)]
    stage_s = {k: statistics.median(s[k] for s in split) for k in ("read", "transfer", "decode", "compute")}
    gb = shard * n * 4 / 1e9
    stored = sum((path / "v" / "c" / str(i)).stat().st_size for i in range(n)) / 1e9
    hand_written = HAND_WRITTEN_S * n / SHARDS
    print(f"\n{gb:.2f} GB float32 ({stored:.2f} GB stored), {n} shards of {PER_SHARD} zstd chunks, "
          f"median of {args.repeat} (zarr + NumPy: {args.numpy_repeat}); GPU: {gpu}\n")
    print(f"| implementation | seconds | GB/s | vs hand-written {HAND_WRITTEN_S} s (x scale) |")
    print("|---|---|---|---|")
    for name, seconds in results.items():
        print(f"| {name} | {seconds:.3f} | {gb / seconds:.2f} | {seconds / hand_written:.2f}x |")
    print("\nStages alone, every shard in turn on one thread (seed 004's split):\n")
    print("| stage | seconds | GB/s stored | GB/s decoded |\n|---|---|---|---|")
    for name, seconds in stage_s.items():
        print(f"| {name} | {seconds:.3f} | {stored / seconds:.2f} | {gb / seconds:.2f} |")
    ours = results[f"zarrmax device={args.device}"]
    print(f"| sum of stages | {sum(stage_s.values()):.3f} | | |  (zarrmax end to end: {ours:.3f} s)")
    if args.json:
        session.save_json(args.json, {"gpu": gpu, "device": args.device, "gb": gb, "stored_gb": stored,
                                      "shards": n, "seconds": results, "stages_s": stage_s,
                                      "hand_written_s": hand_written, "vs_hand_written": ours / hand_written})
    reference = answers.get("zarr enable_gpu()", answers.get("zarr + NumPy"))
    checks = {**answers, "stages": statistics.median(s["checksum"] for s in split)}
    for name, value in checks.items():
        if reference is not None and not np.isclose(value, reference, rtol=1e-4):
            print(f"MISMATCH: {name} computed {value}, zarr computed {reference}", file=sys.stderr)
            return 1
    return 0


TABLE = Table(__doc__ or "", run, flags)

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
