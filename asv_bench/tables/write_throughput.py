"""Write throughput per layout, against the raw PUT ceiling, the encode ceiling and Dataset.to_zarr, on local
disk and on MinIO.

    .venv/bin/python -m asv_bench.tables.write_throughput [--mib 512] [--repeat 5] [--stores local,minio]
                                                          [--layouts 0,4] [--json out.json] [--plot out.png]

Layouts: those of the read table (`asv_bench.shared.read_layouts`, seed 000: 1-D int64 random data with zstd in
0.8, 3 and 12.5 MB chunks, and 1 MB chunks in 64 MB shards; a float32 (time, lat, lon) cube in 64 MB shards),
the same encoding (zstd level 1) for every stack. Stacks (`asv_bench.shared.writes`), each writing the whole array to a
fresh target:

- ``put``: the raw PUT ceiling: the stored objects of the array (encoded beforehand, metadata included) sent
  with nothing else: concurrent obstore PUTs at zarrmax's concurrency (MinIO), or files written by a thread
  per object slot (local, ``--workers`` threads; on Linux each written with no name, ``O_TMPFILE``, then
  linked in: the fastest raw write measured here, and what zarrmax does);
- ``encode``: the encode ceiling: every stored object encoded with zarr's codecs (what zarrmax runs) by a
  thread per core, nothing written; each object's pooled buffer given back once encoded, as zarrmax's sinks
  give it back once written (`xarray_zarrmax.core.buffers`), so the ceiling is the encoder's work alone;
- ``to_zarr``: ``Dataset.to_zarr`` (engine zarr, Zarr v3) of the dask-chunked Dataset (one dask chunk per
  stored object), dask's threaded scheduler with ``--workers`` threads;
- ``zarrmax``: ``xarray_zarrmax.to_zarr`` of the same Dataset, same scheduler.

Repeats are interleaved across stacks (one untimed warm-up round first); medians. Every written store is read
back once with engine="zarrmax" and compared with the data (the encode stack: its objects are compared with
those of ``put``, byte for byte). Peak memory (``--peakmem``, default on): each stack once more in a fresh
process, its peak resident set (VmHWM) minus its resident set before the write (interpreter, imports, the
source data, and for ``put`` the encoded objects), as a multiple of the array's size.

Ratios are of time: ``zarrmax / ceiling`` is the slower ceiling's time over zarrmax's (1.0: as fast as the
binding limit, PUT or encode), ``zarrmax / to_zarr`` is to_zarr's time over zarrmax's (above 1: zarrmax
faster). GB/s are of the array's decoded size, but for ``put``: of the stored bytes.

A second table says where the cores go: the CPU time (user + system) of each stack's write, this process's
and, on MinIO, the server's (it runs on the same cores). Each ceiling is measured alone with every core; a
write needs both stages' work, so on few cores it cannot beat the *shared-cores bound*: the two ceilings' CPU
time added, over the cores (and never less than either ceiling's time). ``zarrmax / encode-then-put`` is the
two ceilings' times added over zarrmax's, as the read table's read-then-decode.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from asv_bench.shared.read_layouts import Layout, chosen
from asv_bench.shared.runner import Session, Table, add_flags, execute
from asv_bench.shared.timing import shuffled_rounds, warm_memory
from asv_bench.shared.writes import BUCKET, STACKS, Target, dataset, peak_memory, reference, save_objects


def measure(layout: Layout, layout_index: int, target: Target, args: Any) -> dict[str, Any]:
    import time

    data = layout.data()
    ds = dataset(layout, data)
    objects = reference(layout, data, target.tmp)
    times: dict[str, list[float]] = {s: [] for s in STACKS}
    cpu: dict[str, list[tuple[float, float]]] = {s: [] for s in STACKS}  # (this process, MinIO) per write
    # round 0: warm-up, and the one read-back check per stack; then a new order each timed round (the same in every
    # run): a stack can slow the one after it
    for round_, order in enumerate([list(STACKS), *shuffled_rounds(STACKS, args.repeat, layout_index)]):
        for stack in order:
            where = target.fresh(stack)
            warm_memory(2 * layout.nbytes)  # memory the guest has, not the hypervisor's: timing.warm_memory
            cpu_before = target.cpu_seconds()
            start = time.perf_counter()
            result = target.write(stack, where, ds, data, layout, objects, keep=round_ == 0)
            elapsed = time.perf_counter() - start
            cpu_after = target.cpu_seconds()
            if round_ == 0:
                if stack == "encode":
                    expected = {k: v for k, v in objects.items() if not k.endswith("zarr.json")}
                    if result != expected:
                        raise AssertionError(f"{layout.name}: the encode ceiling's objects differ from the stored ones")
                else:
                    target.check(where, data)
            else:
                times[stack].append(elapsed)
                cpu[stack].append((cpu_after[0] - cpu_before[0], cpu_after[1] - cpu_before[1]))
            if stack != "encode":
                target.remove(where)
    row: dict[str, Any] = {"layout": layout.name, "store": target.kind, "nbytes": layout.nbytes,
                           "stored": sum(len(v) for k, v in objects.items() if not k.endswith("zarr.json")),
                           "objects": len(objects)}
    for stack in STACKS:
        row[f"{stack}_s"] = float(np.median(times[stack]))
        row[f"{stack}_cpu_s"] = float(np.median([c for c, _ in cpu[stack]]))
        row[f"{stack}_server_cpu_s"] = float(np.median([m for _, m in cpu[stack]]))
    row["cores"] = os.cpu_count() or 1
    if args.peakmem and os.path.exists("/proc/self/status"):
        reference_dir = save_objects(target.tmp / f"reference-{layout_index}.zarr", objects)
        for stack in STACKS:
            row[f"{stack}_peak"] = peak_memory(stack, layout_index, args.mib, args.workers, target, reference_dir)
        shutil.rmtree(reference_dir, ignore_errors=True)
    return row


def ratios(r: dict[str, Any]) -> tuple[float, str, float]:
    """(slower ceiling's time / zarrmax's, which ceiling, to_zarr's time / zarrmax's)."""
    bound = "put" if r["put_s"] >= r["encode_s"] else "encode"
    return r[f"{bound}_s"] / r["zarrmax_s"], bound, r["to_zarr_s"] / r["zarrmax_s"]


def format_row(r: dict[str, Any]) -> str:
    gb = r["nbytes"] / 1e9
    to_ceiling, bound, to_zarr = ratios(r)
    peaks = " | ".join(f"{r[f'{s}_peak'] / r['nbytes']:.2f}" if f"{s}_peak" in r else "-" for s in STACKS)
    return (f"| {r['layout']} | {r['store']} | {r['stored'] / r['put_s'] / 1e9:.2f} | {gb / r['encode_s']:.2f} "
            f"| {gb / r['to_zarr_s']:.2f} | {gb / r['zarrmax_s']:.2f} | {to_ceiling:.2f}x ({bound}) "
            f"| {to_zarr:.2f}x | {peaks} |")


def table(rows: list[dict[str, Any]], args: Any) -> str:
    head = (
        f"Whole-array writes ({args.mib} MiB each), median of {args.repeat} interleaved rounds; dask's threaded "
        f"scheduler with {args.workers} threads for to_zarr and zarrmax. GB/s of the array's size (put: of the "
        "stored bytes). Ratios of time: the slower ceiling's / zarrmax's, to_zarr's / zarrmax's. Peak memory: "
        "of one write in a fresh process, as a multiple of the array's size.\n\n"
        "| layout | store | PUT ceiling | encode ceiling | Dataset.to_zarr | zarrmax | zarrmax / ceiling "
        "| zarrmax / to_zarr | peak put | peak encode | peak to_zarr | peak zarrmax |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    return "\n".join([head] + [format_row(r) for r in rows])


def cpu_bound_s(r: dict[str, Any]) -> float:
    """The shortest a write can take when its two stages share the cores: the CPU time of the PUT ceiling (this
    process and MinIO's) plus the encode ceiling's, over the cores, and never less than either ceiling."""
    work = r["put_cpu_s"] + r["put_server_cpu_s"] + r["encode_cpu_s"] + r["encode_server_cpu_s"]
    return max(r["put_s"], r["encode_s"], work / r["cores"])


def cpu_table(rows: list[dict[str, Any]]) -> str:
    """Where the cores go: CPU seconds of each stack's write (this process + MinIO's), and zarrmax against the
    bound both stages set when they share the cores (`cpu_bound_s`), and against encode-then-put (their times
    added, as the read table's read-then-decode). The last column is to_zarr's time over that bound: the most
    any writer could be faster than to_zarr on this machine (where it is under 2, so is any writer's ratio), and
    the slower ceiling's time over that bound: the most of the binding ceiling any writer can reach here (where
    it is under 0.9, so is any writer's ratio to the ceiling)."""
    head = ("| layout | store | put CPU s | encode CPU s | to_zarr CPU s | zarrmax CPU s | shared-cores bound s "
            "| zarrmax s | zarrmax / shared-cores bound | zarrmax / encode-then-put "
            "| to_zarr / shared-cores bound (most any writer can gain over to_zarr) "
            "| ceiling / shared-cores bound (most of the ceiling any writer can reach) |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|")

    def cell(r: dict[str, Any], stack: str) -> str:
        me, server = r[f"{stack}_cpu_s"], r[f"{stack}_server_cpu_s"]
        return f"{me:.2f}" + (f" + {server:.2f}" if r["store"] != "local" else "")

    lines = [head]
    for r in rows:
        bound = cpu_bound_s(r)
        lines.append(f"| {r['layout']} | {r['store']} | {cell(r, 'put')} | {cell(r, 'encode')} | {cell(r, 'to_zarr')} "
                     f"| {cell(r, 'zarrmax')} | {bound:.3f} | {r['zarrmax_s']:.3f} | {bound / r['zarrmax_s']:.2f}x "
                     f"| {(r['put_s'] + r['encode_s']) / r['zarrmax_s']:.2f}x | {r['to_zarr_s'] / bound:.2f}x "
                     f"| {max(r['put_s'], r['encode_s']) / bound:.2f}x |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stores = sorted({r["store"] for r in rows})
    fig, axes = plt.subplots(1, len(stores), figsize=(6 * len(stores), 4.5), squeeze=False)
    for ax, store in zip(axes[0], stores, strict=True):
        sub = [r for r in rows if r["store"] == store]
        x = np.arange(len(sub))
        width = 0.8 / len(STACKS)
        for i, stack in enumerate(STACKS):
            size = [r["stored"] if stack == "put" else r["nbytes"] for r in sub]
            ax.bar(x + (i - (len(STACKS) - 1) / 2) * width,
                   [s / r[f"{stack}_s"] / 1e9 for s, r in zip(size, sub, strict=True)], width, label=stack)
        ax.set_xticks(x, [textwrap.fill(r["layout"], 16) for r in sub], fontsize=7)
        ax.set_ylabel("GB/s")
        ax.set_title(f"{store}: whole-array write")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, mib=512, repeat=5)
    parser.add_argument("--workers", type=int, default=16, help="dask threads (to_zarr, zarrmax); local PUT threads")
    add_flags(parser, stores=True, layouts=True)
    parser.add_argument("--no-peakmem", dest="peakmem", action="store_false", help="skip the peak-memory runs")
    add_flags(parser, json_file=True, plot_file=True)


def run(session: Session) -> int:
    args = session.args
    stores = args.stores.split(",")
    minio = session.services.minio if session.services is not None else None
    if minio is not None:
        minio.make_bucket(BUCKET)
    tmp = Path(tempfile.mkdtemp(prefix="zarrmax-write-throughput-"))
    rows: list[dict[str, Any]] = []
    try:
        for index, layout in chosen(args.mib, args.layouts):
            for kind in stores:
                options = None if minio is None or kind == "local" else minio.storage_options()
                pid = None if minio is None or kind == "local" else minio.proc.pid
                row = measure(layout, index, Target(kind, tmp, options, args.workers, pid), args)
                rows.append(row)
                print(format_row(row), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(table(rows, args))
    print()
    print(cpu_table(rows))
    if args.json:
        session.save_json(args.json, {"rows": rows})
    if args.plot:
        plot(rows, args.plot)
    return 0


TABLE = Table(__doc__ or "", run, flags, services="minio")

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
