"""The decoded-chunk cache against no cache and zarr-python's stored-bytes cache, on local disk and on MinIO behind
20 ms (issue 43).

    .venv/bin/python -m asv_bench.tables.chunk_cache [--repeat 3] [--stores local,minio] [--cap-mib 64]
                                                     [--json out.json] [--plot docs/dev/cache.png]

Workloads (`asv_bench.shared.cache_workloads`): slabs of 64, 16, 4 and 1 steps, an overlapping rolling mean,
three epochs of random training windows, an interactive session revisiting maps. Stacks: engine="zarr";
engine="zarr" over zarr's ``CacheStore`` (stored bytes kept in a MemoryStore of the same cap: no fetch, still
a decode); engine="zarrmax" with the cache off (``cache_bytes=0``) and on (``--cap-mib``). Each stack and store
runs in a fresh process (its peak resident memory measured there), the repeats interleaved, each round in
another order; medians. Every workload starts with an empty cache (a new session), except that epochs 2 and 3
follow epoch 1 in the same session. Decodes per stored chunk: zarrmax's cache misses over the distinct chunks
the workload touches.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from asv_bench.shared import cache_workloads as w
from asv_bench.shared.runner import Session, Table, add_flags, execute
from asv_bench.shared.timing import shuffled_rounds

STACKS = {"zarr": 'engine="zarr"', "zarr_cachestore": 'engine="zarr" + CacheStore', "zarrmax_off": "zarrmax, no cache",
          "zarrmax_cache": "zarrmax, cache"}
WORKLOADS = [*(f"slabs-{t}" for t in w.SLABS), "rolling", "epoch-1", "epochs-2-3", "interactive"]
# distinct chunks each workload touches (the cube has 8 x 2 x 2 = 32)
CHUNKS_TOUCHED = {**{f"slabs-{t}": 32 for t in w.SLABS}, "rolling": 32, "interactive": None, "epoch-1": None}


def _worker(stack: str, store: str, where: dict[str, Any], cap: int) -> dict[str, Any]:
    """One stack on one store, every workload, in this (fresh) process."""
    import xarray as xr
    import zarr

    import xarray_zarrmax

    data, training = w.cube(), w.train()

    def zarr_store() -> Any:
        if store == "local":
            return zarr.storage.LocalStore(where["path"], read_only=True)
        from obstore.store import S3Store

        return zarr.storage.ObjectStore(S3Store(where["bucket"], prefix=where["prefix"],
                                                client_options={"allow_http": True}, **where["options"]),
                                        read_only=True)

    def open_ds() -> Any:
        if stack == "zarr":
            return xr.open_dataset(zarr_store(), engine="zarr", consolidated=False, cache=False)
        if stack == "zarr_cachestore":
            from zarr.experimental.cache_store import CacheStore

            cached = CacheStore(zarr_store(), cache_store=zarr.storage.MemoryStore(), max_size=cap)
            return xr.open_dataset(cached, engine="zarr", consolidated=False, cache=False)
        xarray_zarrmax.clear_cache()  # a new session: nothing kept from the workload before
        target = where["path"] if store == "local" else f"s3://{where['bucket']}/{where['prefix']}"
        options = {} if store == "local" else {"storage_options": where["options"]}
        return xr.open_dataset(target, engine="zarrmax", consolidated=False, cache=False, **options)

    counts: dict[str, dict[str, int]] = {}
    with xarray_zarrmax.set_config(cache_bytes=cap if stack == "zarrmax_cache" else 0), \
            xarray_zarrmax.request_counts() as c:
        def snapshot() -> dict[str, int]:
            return {"misses": c.cache.misses, "hits": c.cache.hits, "revalidations": c.cache.revalidations,
                    "gets": c.total("get"), "heads": c.total("head")}

        before = snapshot()

        def after(name: str) -> None:
            nonlocal before
            now = snapshot()
            counts[name] = {k: now[k] - before[k] for k in now}
            before = now

        seconds = w.run_all(open_ds, data, training, after)
        info = xarray_zarrmax.cache_info()
    seconds["epochs-2-3"] = (seconds.pop("epoch-2") + seconds.pop("epoch-3")) / 2
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"seconds": seconds, "counts": counts, "peak_rss": peak, "evictions": info.evictions,
            "entries_at_end": info.entries, "held_bytes_at_end": info.held_bytes}


def flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, repeat=3, stores=True, latency_ms=20, json_file=True, plot_file=True)
    parser.add_argument("--cap-mib", type=int, default=64, help="the cache's cap (zarrmax) and CacheStore's")
    parser.add_argument("--worker", help=argparse.SUPPRESS)


def run(session: Session) -> int:
    args = session.args
    cap = args.cap_mib * 2**20
    if args.worker:  # a child: one stack on one store
        stack, store, where = json.loads(args.worker)
        print(json.dumps(_worker(stack, store, where, cap)))
        return 0
    import zarr

    tmp = Path(tempfile.mkdtemp(prefix="zarrmax-cache-"))
    data, training = w.cube(), w.train()
    wheres: dict[str, dict[str, Any]] = {}
    for store in args.stores.split(","):
        if store == "local":
            w.write(str(tmp / "cube.zarr"), data, training)
            wheres["local"] = {"path": str(tmp / "cube.zarr")}
        else:
            minio, endpoint = session.minio("cache")
            w.write(zarr.storage.ObjectStore(minio.obstore("cache", "cube.zarr")), data, training)
            wheres["minio"] = {"bucket": "cache", "prefix": "cube.zarr", "options": minio.storage_options(endpoint)}
    os.sync()
    import time

    time.sleep(2.1)  # local files older than the racy window (`tuning.RACY_WINDOW_NS`), as a store read later is
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    combos = [(s, st) for st in wheres for s in STACKS]
    for order in shuffled_rounds(combos, args.repeat, 43):
        for stack, store in order:
            cmd = [sys.executable, "-m", "asv_bench.tables.chunk_cache", "--cap-mib", str(args.cap_mib),
                   "--stores", "local", "--worker", json.dumps([stack, store, wheres[store]])]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                return 1
            runs.setdefault((stack, store), []).append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"{store} {stack}: {runs[(stack, store)][-1]['seconds']}", file=sys.stderr, flush=True)
    rows = _rows(runs)
    print(_table(rows, args))
    if args.json:
        session.save_json(args.json, {"rows": rows})
    if args.plot:
        _plot(rows, args.plot)
    return 0


def _rows(runs: dict[tuple[str, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for (stack, store), results in runs.items():
        row: dict[str, Any] = {"stack": stack, "store": store,
                               "peak_rss_mib": statistics.median(r["peak_rss"] for r in results) / 2**20}
        for name in WORKLOADS:
            row[name] = statistics.median(r["seconds"][name] for r in results)
            rounds = [r["seconds"][name] for r in results]
            row[f"{name} range"] = (min(rounds), max(rounds))
        if stack.startswith("zarrmax"):
            counts = results[-1]["counts"]
            row["decodes_per_chunk"] = {n: counts[n]["misses"] / CHUNKS_TOUCHED[n] for n in counts
                                        if CHUNKS_TOUCHED.get(n)}
            row["counts"] = counts
        rows.append(row)
    return rows


def _table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [f"Seconds, median of {args.repeat} (each stack and store in a fresh process); cap {args.cap_mib} MiB; "
             f"MinIO behind {args.latency_ms} ms.", "",
             "| store | stack | " + " | ".join(WORKLOADS) + " | peak RSS (MiB) |",
             "|---|---|" + "---|" * len(WORKLOADS) + "---|"]
    for r in sorted(rows, key=lambda r: (r["store"], list(STACKS).index(r["stack"]))):
        cells = " | ".join(f"{r[n]:.3f}" for n in WORKLOADS)
        lines.append(f"| {r['store']} | {STACKS[r['stack']]} | {cells} | {r['peak_rss_mib']:.0f} |")
    lines += ["", "Targets:", ""]
    for store in sorted({r["store"] for r in rows}):
        by = {r["stack"]: r for r in rows if r["store"] == store}
        on, off = by.get("zarrmax_cache"), by.get("zarrmax_off")
        if on is None or off is None:
            continue
        decodes = on["decodes_per_chunk"]
        lines.append(f"- {store}: decodes per stored chunk with the cache: "
                     + ", ".join(f"{k} {v:.2f}" for k, v in decodes.items()))
        lines.append(f"- {store}: slabs-1 / slabs-64 with the cache: {on['slabs-1'] / on['slabs-64']:.2f}x "
                     f"(target <= 2); without: {off['slabs-1'] / off['slabs-64']:.2f}x")
        lines.append(f"- {store}: epoch 1 / epochs 2-3 with the cache: {on['epoch-1'] / on['epochs-2-3']:.2f}x "
                     f"(target >= 5 on MinIO)")
        worst = max(WORKLOADS, key=lambda n: on[n] / off[n])
        (on_lo, on_hi), (off_lo, off_hi) = on[f"{worst} range"], off[f"{worst} range"]
        # beyond noise: every round with the cache slower than every round without
        verdict = "slower beyond noise" if on_lo > off_hi else "within noise: the rounds' ranges overlap"
        lines.append(f"- {store}: cache on / off, worst workload: {worst} {on[worst] / off[worst]:.2f}x, rounds "
                     f"{on_lo:.3f}-{on_hi:.3f} s against {off_lo:.3f}-{off_hi:.3f} s: {verdict} (target: no slower "
                     f"beyond noise); peak RSS on - off: {on['peak_rss_mib'] - off['peak_rss_mib']:.0f} MiB "
                     "(target <= cap)")
    return "\n".join(lines)


def _plot(rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stores = sorted({r["store"] for r in rows})
    fig, axes = plt.subplots(1, len(stores), figsize=(7 * len(stores), 4.5), squeeze=False)
    for ax, store in zip(axes[0], stores, strict=True):
        by = {r["stack"]: r for r in rows if r["store"] == store}
        x = np.arange(len(WORKLOADS))
        width = 0.8 / len(by)
        for i, (stack, r) in enumerate(sorted(by.items(), key=lambda kv: list(STACKS).index(kv[0]))):
            ax.bar(x + i * width, [r[n] for n in WORKLOADS], width, label=STACKS[stack])
        ax.set_xticks(x + 0.4 - width / 2, WORKLOADS, rotation=30, ha="right")
        ax.set_yscale("log")
        ax.set_ylabel("seconds (log)")
        ax.set_title(store)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


TABLE = Table(__doc__ or "", run, flags, services="proxied")

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
