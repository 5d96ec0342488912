"""Reading from a store that throttles (issue 46, "Throttling and many workers"): a MinIO started with a request
limit (``MINIO_API_REQUESTS_MAX``: at most ``--limit`` requests served at once, the rest refused with 429 Too
Many Requests, MinIO's answer where AWS S3 answers 503 SlowDown), read by dask LocalClusters of worker processes,
each with its own request limiter.

    .venv/bin/python -m asv_bench.tables.throttling [--limit 8] [--workers 4,8] [--mib 64] [--repeat 3]
                                                    [--compare NAME=A,B] [--json out.json]

One array of float32, uncompressed, in 64 KiB shards (4 chunks of 16 KiB each): a full read is one GET per
shard, so the store's request limit, not its bandwidth, decides. Each read sums every dask block where it was
read (64 shards a block: 64 GETs at once), checked against the data written. Rows, all against the one server:

- server capacity: one process (a LocalCluster of 1 worker, 2 threads) with concurrency = the limit: the
  well-tuned client, never refused;
- one process with the default concurrency (128): refused until its limiter comes down;
- N worker processes (1 thread each) with the default concurrency each: the cluster the issue describes; with
  ``--compare NAME=A,B``, one such row per value of a tuning number of `core.overload` or `storage.retry`
  (``THROTTLE_DECREASE``, ``THROTTLE_QUIET_S``, ``OVERLOAD_BACKOFF_S``, ...), patched on the workers;
- control: the same cluster with the limit split by hand (limit / N requests each): what N processes cost on
  this machine without any throttling;
- "before": the one process and the cluster with obstore's own retries (``retry_config`` given in
  ``storage_options``: every request backs off on its own, unseen, nothing lowers the requests in flight), as
  every ``s3://`` read was before issue 46.

Every rig runs in a fresh LocalCluster, in rounds: each round starts every rig's cluster in turn (a new order
each round), reads once to warm it up (connections, imports, and the first wave of refusals, shown apart: it
meets every process at full concurrency), then reads once timed, and closes it; GB/s is the median over
``--repeat`` rounds, so a busy spell of this shared machine hits every rig alike. Per row also: the overload
answers (429s) and retries per read summed over the processes, the lowest limit any process came down to, and
the processes' limits summed over the median read's time (sampled every 20 ms in each process), and the CPU
seconds a read took in the server, the workers (summed) and the client (with dask's scheduler): on a small
machine shared with other work, what N processes cost decides as much as the store's limit.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from asv_bench.shared.runner import Session, Table, add_flags, execute
from asv_bench.shared.timing import shuffled_rounds

SHARD, CHUNK = (64, 256), (64, 64)  # float32: 64 KiB shards of 4 chunks
COLUMNS = 4096
SLICES = 8


def flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, mib=64, mib_help="size of the array (MiB)", repeat=3, json_file=True)
    parser.add_argument("--limit", type=int, default=8, help="MINIO_API_REQUESTS_MAX: requests served at once")
    parser.add_argument("--workers", default="4,8", help="comma-separated numbers of worker processes")
    parser.add_argument("--compare", default="", help="NAME=A,B: a tuning number of core.overload or storage.retry "
                        "and the values to compare on the N-process rows")
    parser.add_argument("--no-before", action="store_true", help="leave out the rows with obstore's retries")


def write_array(minio: Any, mib: int) -> tuple[str, float, int]:
    """The array, written with fewer requests in flight than the limit; its URL, sum and size in bytes."""
    import numpy as np
    import zarr

    rows = max(SHARD[0], (mib * 2**20 // (4 * COLUMNS)) // SHARD[0] * SHARD[0])
    data = np.random.default_rng(46).random((rows, COLUMNS), dtype="f4")
    bucket = minio.make_bucket("throttling")
    group = zarr.open_group(zarr.storage.ObjectStore(minio.obstore(bucket, "a.zarr")), mode="w", zarr_format=3)
    array = group.create_array("v", shape=data.shape, dtype="f4", chunks=CHUNK, shards=SHARD, compressors=None,
                               dimension_names=["y", "x"])
    with zarr.config.set({"async.concurrency": 2}):
        array[:] = data
    return f"s3://{bucket}/a.zarr", float(data.sum(dtype="f8")), data.nbytes


def read_sum(url: str, options: dict[str, Any]) -> float:
    """Every shard read and summed where it was read: 4 rows of shards (64 GETs at once) a dask task."""
    import xarray as xr

    ds = xr.open_dataset(url, engine="zarrmax", chunks={"y": 4 * SHARD[0], "x": COLUMNS}, consolidated=False,
                         storage_options=options)
    return float(ds["v"].sum(dtype="f8").compute())


def patch_tuning(values: dict[str, float]) -> None:
    """On a worker: tuning numbers of `core.overload` and `storage.retry` replaced (for a comparison only)."""
    from xarray_zarrmax.core import overload
    from xarray_zarrmax.storage import retry

    for name, value in values.items():
        found = [module for module in (overload, retry) if hasattr(module, name)]
        if not found:
            raise ValueError(f"--compare: neither core.overload nor storage.retry uses {name!r}")
        for module in found:
            setattr(module, name, value)


@dataclass
class Rig:
    """One row: ``workers`` processes of ``threads`` threads, ``concurrency`` set in their environment (None:
    the default), read with ``options``; ``patch`` applied on each worker first."""

    label: str
    workers: int
    threads: int
    concurrency: int | None
    options: dict[str, Any]
    patch: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def started(self) -> Iterator[Callable[[Callable[[], Any]], list[dict[str, Any]]]]:
        """The cluster; ``watch(fn)`` runs ``fn`` and returns what each worker saw meanwhile."""
        import distributed

        from xarray_zarrmax.testing.throttling import start_watching, stop_watching

        env = {} if self.concurrency is None else {"XARRAY_ZARRMAX_CONCURRENCY": str(self.concurrency)}
        with distributed.LocalCluster(n_workers=self.workers, threads_per_worker=self.threads, processes=True,
                                      dashboard_address=None, silence_logs=50, env=env) as local, \
                distributed.Client(local) as client:
            if self.patch:
                client.run(patch_tuning, self.patch)

            def watch(fn: Callable[[], Any]) -> list[dict[str, Any]]:
                client.run(start_watching, 0.02)
                try:
                    fn()
                finally:
                    seen = client.run(stop_watching)
                return list(seen.values())

            yield watch


def cpu_seconds(pid: int) -> float:
    """CPU seconds process ``pid`` used so far (every thread; Linux's /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_read(watch: Any, url: str, options: dict[str, Any], expected: float, server: int) -> dict[str, Any]:
    """One checked read: its seconds, start time, load average, what each process saw, and the CPU seconds of
    the server (process ``server``), the workers and this process (the client and dask's scheduler)."""
    got: list[float] = []
    load = os.getloadavg()[0]
    cpu = (cpu_seconds(server), time.process_time())
    start = time.monotonic()
    seen = watch(lambda: got.append(read_sum(url, options)))
    seconds = time.monotonic() - start
    cpu = (cpu_seconds(server) - cpu[0], time.process_time() - cpu[1])
    if abs(got[0] - expected) > 1e-6 * abs(expected):
        raise AssertionError(f"read a sum of {got[0]}, expected {expected}")
    return figures({"seconds": seconds, "start": start, "processes": seen, "load": load, "cpu": cpu})


def figures(read: dict[str, Any]) -> dict[str, Any]:
    processes = read["processes"]
    lowest = [p["limiter"]["lowest"] for p in processes if p["limiter"]["lowest"] is not None]
    return {"seconds": read["seconds"], "load": read["load"], "cpu_server": read["cpu"][0],
            "cpu_workers": sum(p["cpu_seconds"] for p in processes), "cpu_client": read["cpu"][1],
            "throttled": sum(p["counts"]["throttled"] for p in processes),
            "retries": sum(p["counts"]["retries"] for p in processes),
            "gets": sum(p["counts"]["get"] for p in processes),
            "refused_retries": sum(p["limiter"]["retries_refused"] for p in processes),
            "lowest": min(lowest) if lowest else None,
            "timeline": timeline(read)}


def timeline(read: dict[str, Any]) -> list[tuple[float, float]]:
    """The processes' limits and requests in flight, each summed over the processes, in `SLICES` equal slices
    of the read's time (each process's mean in the slice)."""
    start, seconds = read["start"], read["seconds"]
    out = []
    for i in range(SLICES):
        a, b = start + seconds * i / SLICES, start + seconds * (i + 1) / SLICES
        limit = in_flight = 0.0
        for process in read["processes"]:
            inside = [s for s in process["samples"] if a <= s[0] < b]
            if inside:
                limit += statistics.fmean(s[1] for s in inside)
                in_flight += statistics.fmean(s[2] for s in inside)
        out.append((limit, in_flight))
    return out


def rigs(args: argparse.Namespace, ours: dict[str, Any], before: dict[str, Any], default: int) -> list[Rig]:
    name, _, values = args.compare.partition("=")
    compared = [float(v) for v in values.split(",") if v]
    out = [Rig(f"server capacity: 1 process, concurrency {args.limit} (= the limit)", 1, 2, args.limit, ours),
           Rig(f"1 process, concurrency {default} (default)", 1, 2, None, ours)]
    if not args.no_before:
        out.append(Rig(f"before: 1 process, concurrency {default}, obstore's retries", 1, 2, None, before))
    for n in (int(w) for w in args.workers.split(",") if w):
        if compared:
            out += [Rig(f"{n} processes, concurrency {default} each, {name} = {v:g}", n, 1, None, ours, {name: v})
                    for v in compared]
        else:
            out.append(Rig(f"{n} processes, concurrency {default} each (default)", n, 1, None, ours))
        if not args.no_before:
            out.append(Rig(f"before: {n} processes, concurrency {default} each, obstore's retries", n, 1, None,
                           before))
        share = max(1, args.limit // n)
        out.append(Rig(f"control: {n} processes, concurrency {share} each (the limit split by hand)", n, 1, share,
                       ours))
    return out


def run(session: Session) -> int:
    import xarray_zarrmax
    from xarray_zarrmax.storage.obstore import default_retry_config
    from xarray_zarrmax.testing import MinioServer, minio_binary

    args = session.args
    binary = minio_binary()
    if binary is None:
        print("MinIO not found: run `bash ci/install_services.sh`")
        return 2
    minio = MinioServer.throttled(binary, args.limit).start()
    server = minio.proc.pid
    try:
        url, expected, nbytes = write_array(minio, args.mib)
        ours = minio.storage_options()
        before = {**ours, "retry_config": default_retry_config()}  # obstore retries, unseen: as before issue 46
        table = rigs(args, ours, before, xarray_zarrmax.get_config().concurrency)
        reads: dict[str, dict[str, list[dict[str, Any]]]] = {r.label: {"warmup": [], "timed": []} for r in table}
        for order in shuffled_rounds(table, args.repeat, seed=46):
            for rig in order:
                with rig.started() as watch:
                    for which in ("warmup", "timed"):
                        reads[rig.label][which].append(one_read(watch, url, rig.options, expected, server))
                timed = reads[rig.label]["timed"][-1]
                print(f"{rig.label}: {nbytes / 1e9 / timed['seconds']:.3f} GB/s, {timed['throttled']} 429s, "
                      f"load {timed['load']:.1f}", flush=True)
    finally:
        minio.close()
    print_tables(table, reads, nbytes, args)
    if args.json:
        session.save_json(args.json, {"nbytes": nbytes, "reads": reads})
    return 0


def median_read(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]


def print_tables(table: list[Rig], reads: dict[str, Any], nbytes: int, args: argparse.Namespace) -> None:
    gb = nbytes / 1e9
    base = median_read(reads[table[0].label]["timed"])["seconds"]
    loads = [r["load"] for each in reads.values() for r in each["timed"]]
    print(f"\n{gb * 1e3:.0f} MB of float32 in {nbytes // (4 * SHARD[0] * SHARD[1])} shards of 64 KiB (one GET each); "
          f"MinIO limited to {args.limit} requests at once; median of {args.repeat} rounds; 1-minute load average "
          f"{min(loads):.1f}-{max(loads):.1f} at the timed reads\n")
    print("| reader | GB/s | x capacity | 429s / read | retries / read | retries refused | lowest limit | "
          "CPU s / read: server, workers, client | first read: GB/s, 429s, retries |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rig in table:
        timed, warm = reads[rig.label]["timed"], reads[rig.label]["warmup"]
        med = median_read(timed)
        first = median_read(warm)
        per = lambda key, runs: statistics.median(r[key] for r in runs)  # noqa: E731
        print(f"| {rig.label} | {gb / med['seconds']:.3f} | {base / med['seconds']:.2f} | "
              f"{per('throttled', timed):.0f} | {per('retries', timed):.0f} | {per('refused_retries', timed):.0f} | "
              f"{med['lowest'] if med['lowest'] is not None else '-'} | {per('cpu_server', timed):.2f}, "
              f"{per('cpu_workers', timed):.2f}, {per('cpu_client', timed):.2f} | {gb / first['seconds']:.3f}, "
              f"{per('throttled', warm):.0f}, {per('retries', warm):.0f} |")
    print(f"\nRequests in flight allowed (the processes' limits, summed) / in flight, in {SLICES} equal slices of the "
          "median timed read, then of the median first read:\n")
    print("| reader | read | " + " | ".join(f"{100 * i // SLICES}-{100 * (i + 1) // SLICES}%" for i in range(SLICES))
          + " |")
    print("|---|---|" + "---|" * SLICES)
    for rig in table:
        for which, runs in (("timed", reads[rig.label]["timed"]), ("first", reads[rig.label]["warmup"])):
            cells = " | ".join(f"{limit:.0f} / {busy:.0f}" for limit, busy in median_read(runs)["timeline"])
            print(f"| {rig.label} | {which} | {cells} |")


TABLE = Table(__doc__ or "", run, flags)

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
