"""zarrmax with dask (`chunks={}`) against zarrmax without (`chunks=None`), on local copies of throughput.py's
layouts, in one process, reads alternating: the time, CPU and page faults of each (issue 15's "dask >= 0.85x").

The dask read keeps a copy of one element of each block (a map_blocks), as throughput.py's dask stack does,
so it measures the read path, not `concatenate`, and each block is freed once read. (A view of the element
would keep every block alive to the end: 512 MiB held in 16-32 MiB pieces, 1.5-2x slower on this machine.)

Then, with one dask thread, how much of the dask read is zarrmax's own read (`read_selection`, summed over
the tasks) and how much is around it (dask's scheduler, xarray's lazy indexing, the block's free), per task.

    .venv/bin/python asv_bench/dask_vs_direct.py --layouts 0,3,4 --repeat 7 [--threads 16]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import peers  # noqa: E402
from benchutil import warm_memory  # noqa: E402
from throughput import layouts, write  # noqa: E402

warnings.filterwarnings("ignore")


def read(path: str, mode: str, threads: int) -> None:
    import dask
    import xarray as xr

    from xarray_zarrmax import set_config

    if mode == "direct":
        xr.open_dataset(path, engine="zarrmax", chunks=None)["v"].values  # noqa: B018
        return
    with set_config(task_bytes=peers.DASK_TASK_BYTES):  # as throughput.py's dask stack opens it
        blocks = xr.open_dataset(path, engine="zarrmax", chunks={})["v"].data
    sliver = blocks.map_blocks(lambda b: b.reshape(-1)[:1].copy().reshape((1,) * b.ndim),
                               chunks=tuple((1,) * len(c) for c in blocks.chunks))
    with dask.config.set(scheduler="threads", num_workers=threads):
        sliver.compute()


def split(path: str, nbytes: int, repeat: int) -> tuple[float, float, int]:
    """Median (dask read, time inside read_selection) with one dask thread, and the number of tasks."""
    import xarray_zarrmax.backend as backend

    inside: list[float] = []
    real = backend.read_selection

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            inside.append(time.perf_counter() - start)

    backend.read_selection = timed  # type: ignore[assignment]
    try:
        runs = []
        for _ in range(repeat):
            inside.clear()
            runs.append((measure(path, "dask", 1, nbytes)["wall"], sum(inside), len(inside)))
    finally:
        backend.read_selection = real  # type: ignore[assignment]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), runs[0][2]


def measure(path: str, mode: str, threads: int, nbytes: int) -> dict[str, float]:
    warm_memory(2 * nbytes)  # as throughput.py does before every timed read
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    read(path, mode, threads)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"wall": wall, "user": after.ru_utime - before.ru_utime, "sys": after.ru_stime - before.ru_stime,
            "minflt": after.ru_minflt - before.ru_minflt}


def main(argv: list[str] | None = None) -> int:
    import zarr

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--layouts", default="0,3,4", help="indexes into throughput.layouts")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=16, help="dask threads (throughput.py uses 16)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dask-vs-direct-") as tmp:
        for index in (int(i) for i in args.layouts.split(",")):
            layout = layouts(args.mib)[index]
            path = str(Path(tmp) / f"layout{index}.zarr")
            write(zarr.storage.LocalStore(path), layout)
            for mode in ("direct", "dask"):
                read(path, mode, args.threads)  # warm-up: imports, page cache
            runs: dict[str, list[dict[str, float]]] = {"direct": [], "dask": []}
            for _ in range(args.repeat):
                for mode in runs:
                    runs[mode].append(measure(path, mode, args.threads, layout.nbytes))
            med: dict[str, Any] = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for m, rs in runs.items()}
            for mode in runs:
                m = med[mode]
                print(f"{layout.name:45s} {mode:6s} wall {m['wall'] * 1e3:6.1f} ms  user {m['user'] * 1e3:6.1f}  "
                      f"sys {m['sys'] * 1e3:6.1f}  minor faults {m['minflt']:7.0f}")
            print(f"{layout.name:45s} dask / direct (speed): {med['direct']['wall'] / med['dask']['wall']:.2f}x",
                  flush=True)
            wall, inside, tasks = split(path, layout.nbytes, args.repeat)
            print(f"{layout.name:45s} one dask thread: wall {wall * 1e3:6.1f} ms, in read_selection "
                  f"{inside * 1e3:6.1f} ms, around it {(wall - inside) * 1e3 / tasks:.2f} ms per task ({tasks} tasks)",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
