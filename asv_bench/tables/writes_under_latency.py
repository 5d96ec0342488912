"""Writes of many small objects on MinIO behind toxiproxy (+20 ms each way by default), where round trips,
not bytes, set the time: a new array from memory and from dask, and appends (`asv_bench.shared.writes.CASES`).
Per write, medians, interleaved:

- ``raw PUTs``: the data objects that zarrmax's write stored, sent again by obstore all at once (up to
  ``config.concurrency`` in flight) to a fresh prefix: the floor for the data, without metadata;
- ``Dataset.to_zarr`` (engine zarr, Zarr v3) through the same proxy;
- ``zarrmax``: `xarray_zarrmax.to_zarr`;
- ``zarrmax, one task per object, read first``: the same, with in-memory data cut into one dask block per object
  and every partial object read before its PUT (what it did before both were changed), for the ablation.

Values are checked after every write, by engine="zarrmax" (and engine="zarr" for Dataset.to_zarr's). Data
requests (keys with ``/c/``) of zarrmax's last write of each case are listed.

    .venv/bin/python -m asv_bench.tables.writes_under_latency [--repeat 5] [--latency-ms 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from asv_bench.shared.runner import Session, Table, add_flags, execute
from asv_bench.shared.writes import CASES, NAMES, Case, timed_write

STACKS = ("raw PUTs", "Dataset.to_zarr", "zarrmax", "zarrmax, one task per object, read first")


@contextlib.contextmanager
def as_before() -> Iterator[None]:
    """One object per write task (in-memory data and dask blocks alike), and no object guessed absent (each
    partial one read first)."""
    from xarray_zarrmax.write import dataset as write
    from xarray_zarrmax.write import plan as write_plan

    def one(*_: Any, **__: Any) -> int:
        return 1

    saved = write.ArrayTarget.likely_new, write.per_group, write_plan.per_group
    write.ArrayTarget.likely_new = lambda self, coords: False  # type: ignore[method-assign]
    write.per_group = write_plan.per_group = one
    try:
        yield
    finally:
        write.ArrayTarget.likely_new, write.per_group, write_plan.per_group = saved  # type: ignore[method-assign]


class Target:
    def __init__(self, minio: Any, endpoint: str) -> None:
        self.minio, self.endpoint = minio, endpoint
        self.options = {"storage_options": minio.storage_options(endpoint)}

    def obstore(self, name: str) -> Any:
        return self.minio.obstore("latency", name, self.endpoint)

    def raw_puts(self, objects: dict[str, bytes]) -> float:
        import obstore

        from xarray_zarrmax import get_config

        store = self.obstore(f"raw{next(NAMES)}")
        limit = asyncio.Semaphore(get_config().concurrency)

        async def one(key: str, data: bytes) -> None:
            async with limit:
                await obstore.put_async(store, key, data)

        async def run() -> None:
            await asyncio.gather(*(one(k, v) for k, v in objects.items()))

        start = time.perf_counter()
        asyncio.run(run())
        return time.perf_counter() - start


def one_write(stack: str, case: Case, target: Target, first: Any, timed: Any, expected: np.ndarray,
              objects: dict[str, bytes]) -> tuple[float, dict[str, int]]:
    import xarray as xr
    from zarr.storage import ObjectStore

    import xarray_zarrmax as zm

    if stack == "raw PUTs":
        return target.raw_puts(objects), {}
    name = f"w{next(NAMES)}.zarr"
    append: dict[str, Any] = {"append_dim": "d0"} if case.appended else {}
    if stack == "Dataset.to_zarr":
        store = ObjectStore(target.obstore(name))
        if case.appended:
            first.to_zarr(store, encoding={"v": case.layout}, zarr_format=3, consolidated=False)
        kwargs = {} if case.appended else {"encoding": {"v": case.layout}, "zarr_format": 3}
        start = time.perf_counter()
        timed.to_zarr(store, consolidated=False, **append, **kwargs)
        took = time.perf_counter() - start
        got = xr.open_dataset(store, engine="zarr", consolidated=False)["v"].values
        counts: dict[str, int] = {}
    else:
        url = f"s3://latency/{name}"
        if case.appended:
            zm.to_zarr(first, url, encoding={"v": case.layout}, consolidated=False, **target.options)
        kwargs: dict[str, Any] = {} if case.appended else {"encoding": {"v": case.layout}}
        with contextlib.ExitStack() as stack_:
            if stack != "zarrmax":
                stack_.enter_context(as_before())
            requests = stack_.enter_context(zm.request_counts())
            start = time.perf_counter()
            zm.to_zarr(timed, url, consolidated=False, **append, **kwargs, **target.options)
            took = time.perf_counter() - start
        counts = {}
        for _, kind, key in requests.keys:
            if "/c/" in key:
                counts[kind] = counts.get(kind, 0) + 1
        got = xr.open_dataset(url, engine="zarrmax", **target.options)["v"].values
        if stack == "zarrmax" and not objects:  # the objects this write stored: what raw PUTs send
            keys = [key for _, kind, key in requests.keys if kind == "put" and "/c/" in key]
            store = target.obstore(name)
            objects.update({k: bytes(store.get(k).bytes()) for k in keys})  # type: ignore[attr-defined]
    if not np.array_equal(got, expected):
        raise AssertionError(f"{stack}, {case.title}: the store does not read back as written")
    return took, counts


def run_case(case: Case, target: Target, repeat: int) -> dict[str, Any]:
    first, timed, _ = timed_write(case)
    expected = np.concatenate([first["v"].values, timed["v"].values]) if case.appended else first["v"].values
    objects: dict[str, bytes] = {}
    one_write("zarrmax", case, target, first, timed, expected, objects)  # warm-up; the objects raw PUTs send
    times: dict[str, list[float]] = {s: [] for s in STACKS}
    requests: dict[str, dict[str, int]] = {}
    for _ in range(repeat):
        for stack in STACKS:
            took, counts = one_write(stack, case, target, first, timed, expected, objects)
            times[stack].append(took)
            requests[stack] = counts
    return {"median": {s: statistics.median(v) for s, v in times.items()}, "requests": requests,
            "objects": len(objects)}


def flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, repeat=5, latency_ms=20)


def run(session: Session) -> int:
    import dask

    args = session.args
    minio, endpoint = session.minio("latency")
    target = Target(minio, endpoint)
    threads = dask.config.get("num_workers", None) or dask.system.CPU_COUNT
    print(f"MinIO behind toxiproxy +{args.latency_ms} ms, dask's threaded scheduler with {threads} threads, "
          f"medians of {args.repeat}, seconds (ratio: the stack's time over zarrmax's); zarrmax's data "
          "requests per write\n")
    print("| write | objects written | " + " | ".join(STACKS) + " | zarrmax's requests | before: requests |")
    print("| --- | --- | " + " | ".join("---" for _ in STACKS) + " | --- | --- |")
    for case in CASES:
        result = run_case(case, target, args.repeat)
        med, req = result["median"], result["requests"]
        cells = [f"{med[s]:.3f}" + ("" if s == "zarrmax" else f" ({med[s] / med['zarrmax']:.2f}x)")
                 for s in STACKS]
        print(f"| {case.title} | {result['objects']} | " + " | ".join(cells)
              + f" | {_requests(req['zarrmax'])} | {_requests(req[STACKS[-1]])} |", flush=True)
    return 0


def _requests(kinds: dict[str, int]) -> str:
    return " + ".join(f"{n} {k.upper()}" for k, n in sorted(kinds.items())) or "none"


TABLE = Table(__doc__ or "", run, flags, services="proxied")

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
