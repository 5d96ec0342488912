"""zarrmax's direct local read of many unsharded objects against the leanest Python loop doing the same work.

The loop opens, fstats, preads, fstats again and closes each chunk file, and decodes it into the output with
numcodecs (the system calls and decoder the reader uses), on ``--threads`` threads in jobs of 5 objects. The
difference is the reader's own Python per object and its scheduling (the performance analysis, "Local reads of
whole chunks: the Python around each object").

    .venv/bin/python -m asv_bench.experiments.local_loop --mib 512 --threads 1,2
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from asv_bench.shared.read_layouts import local_copies
from asv_bench.shared.runner import Session, Table, add_flags, execute


def lean_read(files: list[str], n: int, per: int, dtype: str, pool: ThreadPoolExecutor | None) -> np.ndarray:
    import numcodecs

    zstd = numcodecs.Zstd()
    out = np.empty(n, dtype=dtype)

    def job(indexes: list[int]) -> None:
        for i in indexes:
            fd = os.open(files[i], os.O_RDONLY)
            size = os.fstat(fd).st_size
            raw = np.empty(size, np.uint8)
            os.preadv(fd, [raw], 0)
            os.fstat(fd)
            os.close(fd)
            target = out[i * per:(i + 1) * per]
            if target.size == per:
                zstd.decode(raw, out=target)
            else:  # the last chunk, partly outside the array
                target[:] = np.frombuffer(zstd.decode(raw), dtype)[: target.size]

    every = list(range(len(files)))
    batches = [every[j:j + 5] for j in range(0, len(every), 5)]
    if pool is None:
        job(every)
    else:
        list(pool.map(job, batches))
    return out


def flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, mib=512)
    parser.add_argument("--threads", default="1,2")
    add_flags(parser, repeat=7)


def run(session: Session) -> int:
    import xarray as xr

    import xarray_zarrmax

    args = session.args
    for layout, path in local_copies(args.mib, [0], "zarrmax-local-loop-"):  # int64, 0.8 MB chunks
        files = sorted((str(p) for p in (path / "v" / "c").iterdir()), key=lambda p: int(Path(p).name))
        expected = layout.data()
        print(f"{layout.name}: {len(files)} objects, {layout.nbytes / 2**20:.0f} MiB; median of {args.repeat}")
        for threads in (int(t) for t in args.threads.split(",")):
            pool = ThreadPoolExecutor(threads) if threads > 1 else None

            def lean(pool: ThreadPoolExecutor | None = pool) -> np.ndarray:
                return lean_read(files, layout.shape[0], layout.chunks[0], layout.dtype, pool)

            def ours(threads: int = threads) -> np.ndarray:
                with xarray_zarrmax.set_config(threads=threads):
                    return xr.open_dataset(path, engine="zarrmax", chunks=None, consolidated=False)["v"].values

            for name, fn in (("lean loop", lean), ("zarrmax", ours)):
                if not np.array_equal(fn(), expected):
                    raise AssertionError(f"{name} read wrong values")
            times: dict[str, list[float]] = {"lean loop": [], "zarrmax": []}
            for _ in range(args.repeat):
                for name, fn in (("lean loop", lean), ("zarrmax", ours)):
                    start = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - start)
            cells = ", ".join(f"{name} {statistics.median(t):.3f} s ({layout.nbytes / statistics.median(t) / 1e9:.2f}"
                              " GB/s)" for name, t in times.items())
            print(f"threads={threads}: {cells}")
            if pool is not None:
                pool.shutdown()
    return 0


TABLE = Table(__doc__ or "", run, flags)

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
