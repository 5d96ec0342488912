"""Handing a local read's batches to the decode pool: one pool job per batch (`pool.map`, the caller woken as
each finishes) against one job per thread taking batches until none is left (`_loop.run_batches`).

zarrmax's own read (`chunks=None`) of local copies of throughput.py's layouts, in one process, the two ways
alternating, the second by putting a `pool.map` in place of `fetch.run_batches`: same batches, same work.

    .venv/bin/python asv_bench/pool_handoffs.py --layouts 0,1,2 --repeat 15
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

from benchutil import warm_memory  # noqa: E402
from throughput import layouts, write  # noqa: E402

warnings.filterwarnings("ignore")


def one_job_per_batch(fn: Callable[[Any], object], batches: Sequence[Any]) -> None:
    from xarray_zarrmax.core.loop import decode_pool

    list(decode_pool().map(fn, batches))  # what fetch did before run_batches


def timed_read(path: str, nbytes: int) -> float:
    import xarray as xr

    ds = xr.open_dataset(path, engine="zarrmax", chunks=None)
    warm_memory(2 * nbytes)
    start = time.perf_counter()
    ds["v"].values  # noqa: B018
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    import zarr

    from xarray_zarrmax.core import loop as _loop
    from xarray_zarrmax.read import fetch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--layouts", default="0,1,2", help="indexes into throughput.layouts")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    ways = {"one job per batch": one_job_per_batch, "one job per thread": _loop.run_batches}
    with tempfile.TemporaryDirectory(prefix="pool-handoffs-") as tmp:
        for index in (int(i) for i in args.layouts.split(",")):
            layout = layouts(args.mib)[index]
            path = str(Path(tmp) / f"layout{index}.zarr")
            write(zarr.storage.LocalStore(path), layout)
            times: dict[str, list[float]] = {way: [] for way in ways}
            for rep in range(args.repeat + 1):  # the first round warms up (imports, page cache)
                for way, run in ways.items():
                    fetch.run_batches = run  # type: ignore[attr-defined]
                    elapsed = timed_read(path, layout.nbytes)
                    if rep:
                        times[way].append(elapsed)
            fetch.run_batches = _loop.run_batches  # type: ignore[attr-defined]
            med = {way: statistics.median(t) for way, t in times.items()}
            for way, t in times.items():
                q = statistics.quantiles(t)
                print(f"{layout.name:45s} {way:20s} median {med[way] * 1e3:6.1f} ms  "
                      f"(quartiles {q[0] * 1e3:.1f}-{q[2] * 1e3:.1f})")
            print(f"{layout.name:45s} speed-up: {med['one job per batch'] / med['one job per thread']:.2f}x",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
