"""The soak of issue 46, as figures: open/read/close cycles of a store with the shard-index cache, the
decoded-chunk cache, conditional reads and the writer in the loop (`tests.support.soak` says what a cycle does;
the test runs the same), on local disk and MinIO. For each store, what the process holds at the start, after
the warm-up (median over cycles 200-400), at the end (median over the last 200) and at most: resident memory,
open descriptors, threads (Python's and the OS's), TCP connections to MinIO while a Dataset is open, the shard
indexes kept (while open, and after close), the decoded chunks kept, the writer's pooled buffers and the stores
a worker keeps, each cache against its cap; then whether each metric stayed within its margin (what
tests/properties/test_soak.py asserts).

    .venv/bin/python -m asv_bench.tables.soak [--cycles 2000] [--stores local,minio] [--out docs/dev/soak.md]

Writes the tables, with this command, to ``--out`` (``--out ''``: print only).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
import tempfile
import time
from collections import Counter
from typing import Any

from asv_bench.shared.process import ROOT
from asv_bench.shared.runner import Session, Table, add_flags, execute
from tests.support import soak

LABELS = {"rss_mib": "resident memory (MiB)", "fds": "open descriptors", "threads": "threads (Python)",
          "os_threads": "threads (OS)", "connections": "TCP connections to the store, while open",
          "index_open": "shard indexes kept, while open", "index_entries": "shard indexes kept, after close",
          "index_kib": "index cache (KiB counted)", "chunk_entries": "decoded chunks kept",
          "chunk_mib": "decoded-chunk cache (MiB)", "pool_mib": "pooled write buffers (MiB)",
          "recent_stores": "unpickled stores held", "live_stores": "unpickled stores alive"}


def flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, stores=True, json_file=True)
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--out", default=str(ROOT / "docs" / "dev" / "soak.md"),
                        help="write the tables here ('' to print only)")


def stores(session: Session) -> list[soak.Store]:
    found = []
    if "local" in session.args.stores:
        found.append(soak.Store("local", str(tempfile.mkdtemp(prefix="zarrmax-soak-")) + "/soak.zarr"))
    if session.services is not None:
        minio, endpoint = session.minio("soak")
        found.append(soak.Store("minio", "s3://soak/soak.zarr", {"storage_options": minio.storage_options(endpoint)},
                                minio.port))
    return found


def table(result: soak.Result, seconds: float) -> str:
    from xarray_zarrmax import get_config

    caps = {**soak.caps(), "connections": get_config().concurrency}
    figures = soak.figures(result.samples)
    cycles = result.samples[-1].cycle
    reread, rewrites = result.gets_after_rewrite()
    served, others = result.one_get()
    counts = ", ".join(f"{n} {name}" for name, n in result.chunk_counts.items())
    lines = [f"**{result.store}**: {cycles} cycles in {seconds:.0f} s ({1000 * seconds / max(cycles, 1):.1f} ms "
             f"a cycle, sampled every {result.samples[1].cycle - result.samples[0].cycle}); {rewrites} rewrites, "
             f"after which the second read sent {_gets(result.second_gets[True])} ({reread} more than one: the "
             f"index or chunks kept from before found stale and read again); other second reads sent "
             f"{_gets(result.second_gets[False])} ({served} of {others} exactly one); {result.index_kept} "
             f"cycles had a shard index kept while open; the decoded-chunk cache counted {counts}.", "",
             "| metric | start | after warm-up | end | max | cap |", "| --- | --- | --- | --- | --- | --- |"]
    for metric in soak.METRICS:
        row = figures[metric]
        cap = caps.get(metric)
        lines.append(f"| {LABELS[metric]} | {row['start']:g} | {row['warm']:g} | {row['end']:g} | {row['max']:g} | "
                     f"{'' if cap is None else f'{cap:g}'} |")
    found = soak.problems(result.samples)
    lines += ["", "Within every margin." if not found else "Over a margin: " + "; ".join(found) + "."]
    return "\n".join(lines)


def _gets(counts: list[int]) -> str:
    found = Counter(counts)
    return ", ".join(f"{n} GET{'s' if n != 1 else ''} {times}x" for n, times in sorted(found.items()))


def run(session: Session) -> int:
    args = session.args
    sections: list[str] = []
    payload: dict[str, Any] = {}
    failed = False
    for store in stores(session):
        start = time.perf_counter()
        result = soak.run(store, args.cycles)
        seconds = time.perf_counter() - start
        text = table(result, seconds)
        print(text + "\n", flush=True)
        sections.append(text)
        payload[store.kind] = {"seconds": seconds, "samples": soak.as_dicts(result.samples),
                               "second_gets": {str(k): v for k, v in result.second_gets.items()}}
        failed |= bool(soak.problems(result.samples))
    if args.json:
        session.save_json(args.json, payload)
    if args.out:
        command = ".venv/bin/python -m asv_bench.tables.soak " + shlex.join(sys.argv[1:])
        header = [
            "# Soak: open/read/write/close cycles", "",
            "What the process holds over many open/read/close cycles of one store, with the shard-index cache, "
            "the decoded-chunk cache (capped at 2 MiB, so that it evicts all along), conditional reads and the "
            "writer in the loop (issue 46; the cycle is described in `tests/support/soak.py`, and "
            "tests/properties/test_soak.py asserts the same margins). Start: before the first cycle; after "
            f"warm-up: the median over cycles {soak.WARM[0]}-{soak.WARM[1]}; end: the median over the last "
            f"{soak.LAST}; samples every 20 cycles, after a garbage collection. When it was written, it found "
            "every closed open's shard indexes left in the cache (fixed: [design.md](design.md#coherence-a-cached-"
            "index-is-only-used-for-the-object-it-came-from)).", "",
            f"Produced by `{command.strip()}` on {datetime.date.today()} ({platform.machine()}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}; load average "
            f"{', '.join(f'{x:.1f}' for x in session.before['load_average'])} before the run).", "",
        ]
        with open(args.out, "w") as f:
            f.write("\n".join(header) + "\n" + "\n\n".join(sections) + "\n")
    return 1 if failed else 0


TABLE = Table(__doc__ or "", run, flags, services="minio")

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
