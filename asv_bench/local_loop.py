"""zarrmax's direct local read of many unsharded objects against the leanest Python loop doing the same work.

The loop opens, fstats, preads, fstats again and closes each chunk file, and decodes it into the output with
numcodecs (the system calls and decoder the reader uses), on ``--threads`` threads in jobs of 5 objects. The
difference is the reader's own Python per object and its scheduling (docs/performance-analysis.md).

    .venv/bin/python asv_bench/local_loop.py --mib 512 --threads 1,2
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from throughput import layouts, write  # noqa: E402


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


def main(argv: list[str] | None = None) -> int:
    import xarray as xr

    import xarray_zarrmax

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    layout = layouts(args.mib)[0]  # int64, 0.8 MB chunks
    with tempfile.TemporaryDirectory(prefix="zarrmax-local-loop-") as tmp:
        path = Path(tmp) / "a.zarr"
        write(str(path), layout)
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


if __name__ == "__main__":
    sys.exit(main())
