"""Handing a local read's batches to the decode pool: one pool job per batch (`pool.map`, the caller woken as
each finishes) against one job per thread taking batches until none is left (`core.loop.run_batches`).

zarrmax's own read (`chunks=None`) of local copies of the read table's layouts, in one process, the two ways
alternating, the second by putting a `pool.map` in place of `run_batches` in `fetch` and `local_reads`: same
batches, same work.

    .venv/bin/python -m asv_bench.experiments.pool_handoffs --layouts 0,1,2 --repeat 15
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from asv_bench.shared.read_layouts import indexes, local_copies
from asv_bench.shared.runner import Session, Table, add_flags, execute
from asv_bench.shared.timing import warm_memory


def one_job_per_batch(fn: Callable[[Any], object], batches: Sequence[Any]) -> None:
    from xarray_zarrmax.core import decode_pool

    list(decode_pool().map(fn, batches))  # what fetch did before run_batches


def timed_read(path: str, nbytes: int) -> float:
    import xarray as xr

    ds = xr.open_dataset(path, engine="zarrmax", chunks=None)
    warm_memory(2 * nbytes)
    start = time.perf_counter()
    ds["v"].values  # noqa: B018
    return time.perf_counter() - start


def flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, mib=512)
    parser.add_argument("--layouts", default="0,1,2", help="indexes into the read table's layouts")
    add_flags(parser, repeat=15)


def run(session: Session) -> int:
    from xarray_zarrmax.core import loop as _loop
    from xarray_zarrmax.read import fetch, local_reads

    args = session.args
    ways = {"one job per batch": one_job_per_batch, "one job per thread": _loop.run_batches}
    for layout, where in local_copies(args.mib, indexes(args.layouts), "pool-handoffs-"):
        path = str(where)
        times: dict[str, list[float]] = {way: [] for way in ways}
        for rep in range(args.repeat + 1):  # the first round warms up (imports, page cache)
            for way, handoff in ways.items():
                fetch.run_batches = local_reads.run_batches = handoff  # type: ignore[attr-defined]
                elapsed = timed_read(path, layout.nbytes)
                if rep:
                    times[way].append(elapsed)
        fetch.run_batches = local_reads.run_batches = _loop.run_batches  # type: ignore[attr-defined]
        med = {way: statistics.median(t) for way, t in times.items()}
        for way, t in times.items():
            q = statistics.quantiles(t)
            print(f"{layout.name:45s} {way:20s} median {med[way] * 1e3:6.1f} ms  "
                  f"(quartiles {q[0] * 1e3:.1f}-{q[2] * 1e3:.1f})")
        print(f"{layout.name:45s} speed-up: {med['one job per batch'] / med['one job per thread']:.2f}x",
              flush=True)
    return 0


TABLE = Table(__doc__ or "", run, flags)

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
