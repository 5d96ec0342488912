"""zarrmax with dask (`chunks={}`) against zarrmax without (`chunks=None`), on local copies of the read table's
layouts (`asv_bench.shared.read_layouts`), in one process, reads alternating: the time, CPU and page faults of
each (issue 15's "dask >= 0.85x").

The dask read keeps a copy of one element of each block (a map_blocks), as the read table's dask stack does,
so it measures the read path, not `concatenate`, and each block is freed once read. (A view of the element
would keep every block alive to the end: 512 MiB held in 16-32 MiB pieces, 1.5-2x slower on this machine.)

Then, with one dask thread, how much of the dask read is zarrmax's own read (`read_selection`, summed over
the tasks) and how much is around it (dask's scheduler, xarray's lazy indexing, the block's free), per task.

    .venv/bin/python -m asv_bench.experiments.dask_vs_direct --layouts 0,3,4 --repeat 7 [--threads 16]

With ``--decompose``, instead: where the dask read's time goes, each variant alternating with the direct read
in one process (medians, ratios of time against the direct read):
- dask with tasks of 32, 128 and 512 MiB (the whole array: one task), threaded and synchronous scheduler;
- no dask: the same 32 MiB blocks read one after another through xarray (``ds["v"][block].values``), and the
  time inside zarrmax's read (`read_selection`) summed over them, so what one call costs beyond its share of
  a whole-array read shows without dask's scheduler.

    .venv/bin/python -m asv_bench.experiments.dask_vs_direct --layouts 1 --repeat 11 --decompose
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

from asv_bench.shared.read_layouts import indexes, local_copies
from asv_bench.shared.runner import Session, Table, add_flags, execute
from asv_bench.shared.timing import warm_memory


def read(path: str, mode: str, threads: int, task_bytes: int | None = None) -> None:
    """One whole read: ``mode`` "direct" (``chunks=None``), "dask" (threaded scheduler, ``threads``),
    "dask-sync" (synchronous scheduler) or "blocks" (no dask: the dask read's blocks one after another)."""
    import dask
    import xarray as xr

    from xarray_zarrmax import set_config

    if mode == "direct":
        xr.open_dataset(path, engine="zarrmax", chunks=None)["v"].values  # noqa: B018
        return
    changes = {} if task_bytes is None else {"task_bytes": task_bytes}  # None: the default, as the read table
    with set_config(**changes):
        blocks = xr.open_dataset(path, engine="zarrmax", chunks={})["v"]
    if mode == "blocks":
        plain = xr.open_dataset(path, engine="zarrmax", chunks=None)["v"]
        for region in _block_regions(blocks.data.chunks):
            plain[region].values  # noqa: B018
        return
    data = blocks.data
    sliver = data.map_blocks(lambda b: b.reshape(-1)[:1].copy().reshape((1,) * b.ndim),
                             chunks=tuple((1,) * len(c) for c in data.chunks))
    if mode == "dask-sync":
        with dask.config.set(scheduler="synchronous"):
            sliver.compute()
        return
    with dask.config.set(scheduler="threads", num_workers=threads):
        sliver.compute()


def _block_regions(chunks: tuple[tuple[int, ...], ...]) -> list[tuple[slice, ...]]:
    """The index of every block of a dask array with ``chunks``, in C order."""
    import itertools

    edges = [list(itertools.accumulate(c, initial=0)) for c in chunks]
    return [tuple(slice(e[i], e[i + 1]) for e, i in zip(edges, index, strict=True))
            for index in itertools.product(*(range(len(c)) for c in chunks))]


@contextlib.contextmanager
def timed_reads() -> Iterator[list[float]]:
    """Within the block, the seconds of every call of zarrmax's read (`read_selection`), appended to the list
    yielded (the caller clears it between reads). Every module of the backend that calls the read by that name
    (its lazy array's) gets the timed one."""
    import xarray_zarrmax.backend  # noqa: F401  (every module of the backend loaded)
    from xarray_zarrmax.read import read_selection as real

    inside: list[float] = []

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            inside.append(time.perf_counter() - start)

    users = [m for name, m in list(sys.modules.items())
             if name.startswith("xarray_zarrmax.backend") and getattr(m, "read_selection", None) is real]
    if not users:
        raise RuntimeError("found no module of xarray_zarrmax.backend that calls read_selection by name")
    for module in users:
        module.read_selection = timed  # type: ignore[attr-defined]
    try:
        yield inside
    finally:
        for module in users:
            module.read_selection = real  # type: ignore[attr-defined]


def split(path: str, nbytes: int, repeat: int) -> tuple[float, float, int]:
    """Median (dask read, time inside read_selection) with one dask thread, and the number of tasks."""
    with timed_reads() as inside:
        runs = []
        for _ in range(repeat):
            inside.clear()
            runs.append((measure(path, "dask", 1, nbytes)["wall"], sum(inside), len(inside)))
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), runs[0][2]


def measure(path: str, mode: str, threads: int, nbytes: int,
            task_bytes: int | None = None) -> dict[str, float]:
    warm_memory(2 * nbytes)  # as the read table does before every timed read
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    read(path, mode, threads, task_bytes)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"wall": wall, "user": after.ru_utime - before.ru_utime, "sys": after.ru_stime - before.ru_stime,
            "minflt": after.ru_minflt - before.ru_minflt}


#: (label, mode, task MiB) of each variant --decompose times against the direct read
DECOMPOSE = (("dask, 32 MiB tasks", "dask", 32), ("dask, 128 MiB tasks", "dask", 128),
             ("dask, one task", "dask", 0), ("dask synchronous, 32 MiB tasks", "dask-sync", 32),
             ("dask synchronous, one task", "dask-sync", 0), ("no dask, 32 MiB blocks in a loop", "blocks", 32))


def decompose(path: str, name: str, nbytes: int, repeat: int, threads: int) -> None:
    """Every DECOMPOSE variant and the direct read, alternating in one process; then, for the blocks read in a
    loop and the direct read, the time inside `read_selection`."""
    variants = [("direct", "direct", 0), *DECOMPOSE]
    for _, mode, mib in variants:  # warm-up: imports, page cache, the pool
        read(path, mode, threads, (mib << 20) or 2 * nbytes)
    walls: dict[str, list[float]] = {label: [] for label, _, _ in variants}
    calls: dict[str, list[tuple[float, int]]] = {"direct": [], "no dask, 32 MiB blocks in a loop": []}
    with timed_reads() as inside:
        for _ in range(repeat):
            for label, mode, mib in variants:
                inside.clear()
                walls[label].append(measure(path, mode, threads, nbytes, (mib << 20) or 2 * nbytes)["wall"])
                if label in calls:
                    calls[label].append((sum(inside), len(inside)))
    direct = statistics.median(walls["direct"])
    for label, times in walls.items():
        wall = statistics.median(times)
        print(f"{name:25s} {label:34s} {wall * 1e3:6.1f} ms  {direct / wall:5.2f}x of direct", flush=True)
    for label, runs in calls.items():
        total = statistics.median(r[0] for r in runs)
        print(f"{name:25s} {label:34s} in read_selection {total * 1e3:6.1f} ms over {runs[0][1]} calls",
              flush=True)


def flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, mib=512)
    parser.add_argument("--layouts", default="0,3,4", help="indexes into the read table's layouts")
    add_flags(parser, repeat=7)
    parser.add_argument("--threads", type=int, default=16, help="dask threads (the read table uses 16)")
    parser.add_argument("--decompose", action="store_true",
                        help="task sizes, schedulers and blocks without dask against the direct read")


def run(session: Session) -> int:
    args = session.args
    for layout, where in local_copies(args.mib, indexes(args.layouts), "dask-vs-direct-"):
        path = str(where)
        if args.decompose:
            decompose(path, layout.name, layout.nbytes, args.repeat, args.threads)
            continue
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


TABLE = Table(__doc__ or "", run, flags)

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
