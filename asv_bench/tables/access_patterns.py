"""Seed 001's four everyday operations on a GEOS-FP-like field in many layouts, against their floor, and the
layout advisor's predictions against the measured times (issue 13, parts 1 and 3).

    .venv/bin/python -m asv_bench.tables.access_patterns --markdown docs/dev/logs/access_patterns.md \\
        --json docs/dev/logs/access_patterns.json --plot docs/dev/logs/access_patterns

    [--shape T,Y,X] [--repeat N] [--quick] [--stores local,minio] [--latency-ms 20] [--no-search]

One run does everything below; ``--quick`` is a tiny setting (96 x 73 x 144, one repeat: about 3 minutes,
most of it writing and uploading the compromise layout's 9,000 chunks) for smoke tests. The default shape,
1000 x 361 x 576 (0.83 GB), is half the issue's 2000 x 361 x 576 example in time so that the whole run takes
about 20 minutes on a 2-core machine (extrapolated from 4.3 minutes for 500 x 181 x 288 at one repeat: the
extremes' full reads grow with the data, the rest mostly with the number of opens and requests); the issue's
shape (``--shape 2000,361,576``) should take about twice that.

Data (`asv_bench.shared.access`): a float32 (time, lat, lon) field, smooth (a latitude profile, a travelling daily
wave, a slow seasonal term) plus Gaussian noise, quantized to 1/16 so zstd (level 3) compresses it as it does real
model output (about half). Layouts (`layouts`): seed 001's extremes (contiguous in time; one map per chunk), its
compromise (120 x 100 x 50, each scaled by our shape / GEOS-FP's), and small inner chunks in large shards of several
shapes. Each is written once to a local directory (``xarray_zarrmax.to_zarr``) and the same files are uploaded to
MinIO, read through toxiproxy adding ``--latency-ms`` to every response.

Operations (seed 001's, at its places and times): the time series at Seattle (47.61 N, 122.19 W); the map at
2020-06-01T00; the time series of the mean over Ohio (38.21-42.25 N, 84.91-80.5 W); the map of the mean over
2020-06-01T00-05 (6 steps). Coordinates become index ranges once (as ``.sel`` would pick them: nearest point,
inclusive ranges) and each operation is ``ds["v"].isel(...)`` (then ``.mean``) and ``.values``, with
``chunks=None``: xarray hands the whole selection to the backend in one call (no dask), for both engines.

Timing. Every timed call is a first access: a fresh ``xr.open_dataset`` (and, for engine="zarr", a new store
object), then the operation alone is timed -- the open is not. zarrmax caches shard indexes per process keyed
by ``(token, key)``, where the token is a new random id per ``open_dataset`` (``backend.ZarrmaxStore``); the
script checks that the open cached nothing and that the operation's indexes land under the new token only, so
every timed operation starts with a cold index cache. Rounds are interleaved (repeat i of every cell before
repeat i + 1 of any), each round in another seeded random order; medians are reported. Engine "zarr" runs at
zarr-python's defaults (``async.concurrency`` 10), zarrmax at its defaults. MinIO serves from this machine's
page cache, so "first access" is cold for the readers, not for the disk.

Counted in one untimed pass per cell before the timed rounds (which also checks the values of both engines
against the numpy data): requests and bytes -- zarrmax with ``xarray_zarrmax.request_counts()``, engine="zarr"
through ``testing.counting_store`` (a zarr ``WrapperStore`` counting every GET and the bytes returned) -- and
peak memory with ``tracemalloc`` (the peak of Python and NumPy allocations during the operation; buffers
held only on obstore's Rust side are not seen, so remote numbers are a lower bound).

Floor, per operation, layout and store: ``round trips x latency + bytes / raw-GET ceiling``, where the latency
(median tiny GET through the proxy; a tiny ``pread`` locally) and the ceiling (8 concurrent GETs of large
objects with obstore, or 8 threads reading large files; bytes/s, best of 3) are measured in the same run; the
bytes are what the operation needs: the stored bytes of the chunks it touches (read from each shard's index),
plus each touched shard's index once; the round trips are `advise.model.count_read`'s for those objects with
zarrmax's request budget (and no other limit). Targets (issue 13): on sharded layouts zarrmax fetches nothing
outside the touched chunks but the indexes; every operation within 1.5x of its floor; a sharded layout with a
performance bias (slowest / fastest of the four operations, seed 001's metric) of at most 2.

Physical limits, per zarrmax cell, timed in the same interleaved rounds (`asv_bench.shared.access_limits`):
"replay", the reader's own requests for the operation (derived from the stored indexes and checked equal, in number
and bytes, to the reader's counted requests) sent raw -- obstore range GETs from a fresh client, each object's index
before its ranges, or ``pread`` of local files -- with nothing else; "decode", our zstd decoder alone on the touched
chunks' compressed bytes, already in memory. zarrmax's time against their sum says how much of a miss of the floor
is the store's per-request work and the decode (physical) and how much is the reader's own. Sharded cells are also
read with ``coalesce_gap=0, full_shard_fraction=1`` (`EXACT`, counted and timed): the settings under which the
reader fetches only the touched chunks and the indexes.

Validation: the advisor is calibrated by its own probes (``advise(..., store=...)``: `advise.probe.probe_store`
on the same proxied MinIO and on a local directory, `probe_decoder` on a sample of the data) and predicts the
seconds of each operation (given to it as user-defined selections, exactly the boxes read) on every measured
layout: Spearman rank correlation per operation and store (target >= 0.9); then for three pattern mixes, the
advisor's top layout among the measured ones, and the top of its own search over candidate layouts (written
and measured too, zarrmax only), each against the best measured layout for that mix (target <= 1.25x).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from asv_bench.shared.access import (
    DEFAULT_SHAPE,
    DIMS,
    ENGINES,
    EXACT,
    LIMITS,
    MB,
    MIXES,
    QUICK_SHAPE,
    Op,
    Spec,
    Store,
    check,
    field,
    layouts,
    operations,
    upload,
    write_local,
)
from asv_bench.shared.runner import Session, Table, add_flags, execute
from asv_bench.shared.services import Services
from asv_bench.tables.access_report import plot, report


def measure_floor(store: Store, size: int, count: int = 8) -> dict[str, float]:
    """Latency (median of tiny reads) and the raw-GET ceiling (``count`` large objects read at once, no decode,
    best of 3) of a store, in bytes/s."""
    payload = [os.urandom(size) for _ in range(count)]
    if store.kind == "local":
        folder = store.root / "ceiling"
        folder.mkdir(exist_ok=True)
        for i, p in enumerate(payload):
            (folder / f"o{i}").write_bytes(p)
        (folder / "tiny").write_bytes(b"x" * 16)
        os.sync()

        def tiny() -> None:
            fd = os.open(folder / "tiny", os.O_RDONLY)
            os.pread(fd, 16, 0)
            os.close(fd)

        # Into buffers allocated and touched once: fresh pages per read would time the page faults (this
        # machine's host reclaims freed memory; the ceiling swung 1.1-5.7 GB/s between runs with read_bytes).
        buffers = [np.ones(size, dtype=np.uint8) for _ in range(count)]

        def read_into(i: int) -> None:
            fd = os.open(folder / f"o{i}", os.O_RDONLY)
            try:
                os.preadv(fd, [buffers[i]], 0)
            finally:
                os.close(fd)

        def big() -> None:
            with ThreadPoolExecutor(count) as ex:
                list(ex.map(read_into, range(count)))
    else:
        import obstore

        direct = store.minio.obstore(store.bucket, "ceiling")
        for i, p in enumerate(payload):
            obstore.put(direct, f"o{i}", p)
        obstore.put(direct, "tiny", b"x" * 16)
        proxied = store.minio.obstore(store.bucket, "ceiling", store.proxied)

        def tiny() -> None:
            obstore.get(proxied, "tiny").bytes()

        def big() -> None:
            async def run() -> None:
                got = await asyncio.gather(*(obstore.get_async(proxied, f"o{i}") for i in range(count)))
                await asyncio.gather(*(g.bytes_async() for g in got))

            asyncio.run(run())
    tiny()
    lat = []
    for _ in range(21):
        t0 = time.perf_counter()
        tiny()
        lat.append(time.perf_counter() - t0)
    latency = statistics.median(lat)
    big()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        big()
        best = min(best, time.perf_counter() - t0)
    net = best - latency if store.kind == "minio" else best
    return {"latency_s": latency, "ceiling_bps": size * count / max(net, 1e-6)}


# -- what an operation needs on a layout -----------------------------------------------------------------------


def stored_objects(path: Path) -> dict[tuple[int, ...], Path]:
    root = path / "v" / "c"
    return {tuple(int(p) for p in f.relative_to(root).parts): f for f in root.rglob("*") if f.is_file()}


def needs(spec: Spec, op: Op, shape: Sequence[int], path: Path) -> dict[str, Any]:
    """What an operation needs on a stored layout and the reader's requests for it (`access_limits.Needed`),
    from a local file (``local``) and from an object store (``remote``), at the default settings and with
    `EXACT` (the ``_exact`` twins)."""
    import xarray_zarrmax
    from asv_bench.shared.access_limits import reader_requests
    from xarray_zarrmax.core.geometry import plan_reads

    outer = spec.shards or spec.chunks
    reads = plan_reads(op.axes(shape), shape, outer, spec.chunks)
    out = {}
    for suffix, settings in (("", {}), ("_exact", EXACT)):
        with xarray_zarrmax.set_config(**settings):
            for where in ("local", "remote"):
                out[where + suffix] = reader_requests(path, spec.chunks, spec.shards, reads, local=where == "local")
    return out


def floor_round_trips(spec: Spec, op: Op, shape: Sequence[int], chunk_enc: int, local: bool) -> int:
    """Round trips the operation needs with zarrmax's request budget: `advise_model.count_read` for the objects
    it touches, with no limit on objects in flight but the budget."""
    from xarray_zarrmax import get_config
    from xarray_zarrmax.advise import Reader
    from xarray_zarrmax.advise.counting import count_read

    c = get_config()
    reader = Reader(concurrency=c.concurrency, full_shard_fraction=c.full_shard_fraction,
                    coalesce_gap=c.coalesce_gap, split_size=c.split_size, inflight_bytes=2**62, local=local)
    return count_read([op.axes(shape)], shape, 4, spec.model(), chunk_enc, reader).round_trips


# -- measuring ------------------------------------------------------------------------------------------------


def _index_tokens() -> set[str]:
    from xarray_zarrmax.read import index_cache

    return index_cache.tokens()


def counted_pass(store: Store, spec: Spec, engine: str, op: Op, data: np.ndarray,
                 need: Mapping[str, Any]) -> dict[str, Any]:
    """One untimed read: values checked, requests and bytes counted, tracemalloc's peak. For zarrmax the
    requests and bytes must be exactly those `needs` derived (so the replay replays the reader's requests); on
    sharded layouts a second read with `EXACT` settings is counted and checked too."""
    import xarray_zarrmax

    counts: Counter[str] = Counter()
    ds = store.open(spec, engine, counts if engine == "zarr" else None)
    counts.clear()  # the open's own requests are not the operation's
    tracemalloc.start()
    try:
        if engine == "zarrmax":
            with xarray_zarrmax.request_counts() as c:
                got = op.run(ds)
            requests, nbytes = c.total("get"), c.total("bytes")
        else:
            got = op.run(ds)
            requests, nbytes = counts["get"], counts["bytes"]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    where = f"{engine} {store.kind} {spec.label} {op.name}"
    check(where, got, op.expected(data), exact=not op.mean_over)
    out = {"requests": requests, "bytes": nbytes, "peak_bytes": peak}
    if engine == "zarrmax":
        side = "local" if store.kind == "local" else "remote"
        expect = need[side]
        if (requests, nbytes) != (expect.requests, expect.nbytes):
            raise AssertionError(f"{where}: {requests} requests for {nbytes} bytes, its reader's rules send "
                                 f"{expect.requests} for {expect.nbytes}")
        if spec.shards is not None:
            ds = store.open(spec, engine)
            with xarray_zarrmax.set_config(**EXACT), xarray_zarrmax.request_counts() as c:
                check(where, op.run(ds), op.expected(data), exact=not op.mean_over)
            exact = need[side + "_exact"]
            if (c.total("get"), c.total("bytes")) != (exact.requests, exact.nbytes):
                raise AssertionError(f"{where}, {EXACT}: {c.total('get')} requests for {c.total('bytes')} bytes, "
                                     f"its reader's rules send {exact.requests} for {exact.nbytes}")
            out |= {"exact_requests": c.total("get"), "exact_bytes": c.total("bytes")}
    return out


def timed(store: Store, spec: Spec, engine: str, op: Op) -> float:
    """A first access: a fresh open (not timed), then the operation (timed) with a cold shard index cache;
    ``zarrmax_exact``: zarrmax with `EXACT` settings."""
    import xarray_zarrmax

    before = _index_tokens()
    settings = EXACT if engine == "zarrmax_exact" else {}
    with xarray_zarrmax.set_config(**settings):
        ds = store.open(spec, engine.removesuffix("_exact"))
        if engine != "zarr" and _index_tokens() != before:
            raise AssertionError("opening cached shard indexes: the timed read would not start cold")
        t0 = time.perf_counter()
        op.run(ds)
        elapsed = time.perf_counter() - t0
    if engine != "zarr" and len(_index_tokens() - before) > 1:
        raise AssertionError("one open's indexes were cached under more than one token")
    return elapsed


def limit(store: Store, spec: Spec, what: str, needed: Any, pool: Any) -> float:
    """``replay``: the reader's requests alone (`access_limits.replay_*`); ``decode``: the decoder alone on
    the touched chunks (`access_limits.decode_alone`; the bytes are read first, not timed)."""
    import xarray_zarrmax
    from asv_bench.shared.access_limits import decode_alone, load_frames, replay_local, replay_remote

    threads = xarray_zarrmax.get_config().threads
    if what == "decode":
        return decode_alone(load_frames(store.root / spec.key, needed), needed, pool, threads)
    if store.kind == "local":
        return replay_local(store.root / spec.key, needed, pool, threads)
    client = store.minio.obstore(store.bucket, spec.key, store.proxied)  # a fresh client, as an open makes
    return replay_remote(client, needed, xarray_zarrmax.get_config().concurrency)


# -- model ---------------------------------------------------------------------------------------------------


def patterns_for(ops: Sequence[Op], weights: Mapping[str, float]) -> dict[str, Any]:
    """The operations as the advisor's user-defined patterns: ``name -> (weight, {dim: slice or int})``."""
    return {op.name: (weights[op.name], dict(op.box)) for op in ops}


# -- the run -------------------------------------------------------------------------------------------------



# -- the run -------------------------------------------------------------------------------------------------


def flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", help=f"T,Y,X (default {','.join(map(str, DEFAULT_SHAPE))})")
    parser.add_argument("--repeat", type=int, help="timed first accesses per cell (default 3; --quick: 1)")
    parser.add_argument("--quick", action="store_true", help=f"tiny: shape {QUICK_SHAPE}, 1 repeat")
    add_flags(parser, stores=True, latency_ms=20)
    parser.add_argument("--no-search", action="store_true",
                        help="skip writing and measuring the advisor's own top layout per mix")
    parser.add_argument("--markdown", help="write the tables here too")
    parser.add_argument("--json")
    parser.add_argument("--plot", help="PNG prefix: PREFIX-heatmap.png, PREFIX-predicted.png")


def run(session: Session) -> int:
    args = session.args
    shape = tuple(int(s) for s in args.shape.split(",")) if args.shape else (QUICK_SHAPE if args.quick else
                                                                             DEFAULT_SHAPE)
    repeat = args.repeat or (1 if args.quick else 3)
    kinds = args.stores.split(",")
    started = time.perf_counter()
    result = measure_all(shape, repeat, kinds, args.latency_ms, search=not args.no_search, quick=args.quick,
                         services=session.services)
    result["wall_s"] = time.perf_counter() - started
    text = report(result)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    if args.json:
        session.save_json(args.json, result, default=str)
    if args.plot:
        plot(result, args.plot)
    return 0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def measure_all(shape: tuple[int, ...], repeat: int, kinds: list[str], latency_ms: int, *, search: bool,
                quick: bool, services: Services | None) -> dict[str, Any]:
    """Every layout written, then the floors, the advisor's calibration and picks, and the counted and timed
    passes over every cell on each store; ``services``: MinIO behind the latency proxy (for "minio")."""
    import xarray as xr

    import xarray_zarrmax
    from xarray_zarrmax.advise import rank
    from xarray_zarrmax.tuning import RACY_WINDOW_NS

    tmp = Path(tempfile.mkdtemp(prefix="zarrmax-access-"))
    minio = services.minio if services is not None else None
    try:
        data = field(shape)
        ops = operations(shape)
        specs = layouts(shape)
        log(f"field {shape}: {data.nbytes / MB:.0f} MB; writing {len(specs)} layouts")
        t0 = time.perf_counter()
        for spec in specs:
            t1 = time.perf_counter()
            write_local(tmp / spec.key, spec, data, shape)
            log(f"  {spec.label}: written in {time.perf_counter() - t1:.1f} s")
        stores: dict[str, Store] = {}
        if "local" in kinds:
            stores["local"] = Store("local", tmp)
        if "minio" in kinds:
            assert services is not None and minio is not None
            bucket = minio.make_bucket("access")
            stores["minio"] = Store("minio", tmp, minio, bucket, services.endpoint)
            t1 = time.perf_counter()
            for spec in specs:
                upload(tmp / spec.key, minio.obstore(bucket, spec.key))
            log(f"  uploaded to MinIO in {time.perf_counter() - t1:.1f} s")
        write_s = time.perf_counter() - t0
        # Local files written less than RACY_WINDOW_NS ago are never index-cached; wait them out so both stores
        # read settled data (no cached index crosses opens anyway: see the module docstring).
        time.sleep(RACY_WINDOW_NS / 1e9)
        os.sync()

        # Floors, calibration and the advisor (before measuring: its own picks are measured too).
        floors = {k: measure_floor(s, (2 if quick else 16) * 2**20) for k, s in stores.items()}
        # the decoder probe reads the first time steps: cheap on the map-contiguous layout
        sample = xr.open_dataset(str(tmp / specs[1].key), engine="zarrmax", chunks=None, consolidated=True)
        calibration: dict[str, Any] = {}
        advised: dict[str, dict[str, str]] = {}
        for kind, store in stores.items():
            target, options = store.probe_target()
            report0 = xarray_zarrmax.advise(sample, patterns_for(ops, MIXES["balanced"]), store=target,
                                            storage_options=options, layouts=[s.model() for s in specs],
                                            progress=False)
            calibration[kind] = {"costs": report0.costs, "reader": report0.reader}
            if search:
                advised[kind] = {}
                for mix, weights in MIXES.items():
                    top = rank(shape, DIMS, 4, patterns_for(ops, weights), costs=report0.costs,
                               reader=report0.reader)[0].layout
                    existing = next((s for s in specs if s.model() == top), None)
                    if existing is None:
                        existing = Spec(f"advised ({kind}, {mix})", top.chunks, top.shards, "advised")
                        dup = next((s for s in specs if s.key == existing.key), None)
                        if dup is None:
                            specs.append(existing)
                            write_local(tmp / existing.key, existing, data, shape)
                            if minio is not None:
                                upload(tmp / existing.key, minio.obstore(stores["minio"].bucket, existing.key))
                        else:
                            existing = dup
                    advised[kind][mix] = existing.key
        if search:
            time.sleep(RACY_WINDOW_NS / 1e9)
            os.sync()

        # Stored sizes and what each operation needs.
        stored = {s.key: sum(p.stat().st_size for p in (tmp / s.key / "v" / "c").rglob("*") if p.is_file())
                  for s in specs}
        n_chunks = {s.key: math.prod(-(-n // c) for n, c in zip(shape, s.chunks, strict=True)) for s in specs}
        need = {(s.key, op.name): needs(s, op, shape, tmp / s.key) for s in specs for op in ops}

        # Counted, checked passes, then interleaved timed rounds: the reads, zarrmax with EXACT settings on
        # sharded layouts, and the physical limits of every zarrmax cell (the reader's requests replayed, the
        # decoder alone).
        reads = [(s, e, op) for s in specs for e in ENGINES for op in ops if e == "zarrmax" or s.kind != "advised"]
        cells = reads + [(s, e, op) for s in specs for e in (*LIMITS, "zarrmax_exact") for op in ops
                         if e != "zarrmax_exact" or s.shards is not None]
        counted: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        times: dict[tuple[str, str, str, str], list[float]] = {}
        rng = np.random.default_rng(0)
        pool = ThreadPoolExecutor(xarray_zarrmax.get_config().threads)
        for kind, store in stores.items():
            side = "local" if kind == "local" else "remote"
            log(f"{kind}: counted pass over {len(reads)} cells")
            for spec, engine, op in reads:
                counted[(kind, spec.key, engine, op.name)] = counted_pass(store, spec, engine, op, data,
                                                                          need[(spec.key, op.name)])
            for i in range(repeat):
                log(f"{kind}: round {i + 1}/{repeat} ({len(cells)} cells)")
                for j in rng.permutation(len(cells)):
                    spec, engine, op = cells[j]
                    if engine in LIMITS:
                        t = limit(store, spec, engine, need[(spec.key, op.name)][side], pool)
                    else:
                        t = timed(store, spec, engine, op)
                    times.setdefault((kind, spec.key, engine, op.name), []).append(t)
        pool.shutdown()
        measure_s = time.perf_counter() - t0 - write_s
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    return assemble(shape, repeat, latency_ms, specs, ops, stores, floors, calibration, advised, stored, n_chunks,
                    need, counted, times, write_s, measure_s, data.nbytes)


def assemble(shape: tuple[int, ...], repeat: int, latency_ms: int, specs: list[Spec], ops: list[Op],
             stores: Mapping[str, Store], floors: Mapping[str, Any], calibration: Mapping[str, Any],
             advised: Mapping[str, Mapping[str, str]], stored: Mapping[str, int], n_chunks: Mapping[str, int],
             need: Mapping[tuple[str, str], dict[str, int]], counted: Mapping[tuple[str, str, str, str], Any],
             times: Mapping[tuple[str, str, str, str], list[float]], write_s: float, measure_s: float,
             nbytes: int) -> dict[str, Any]:
    """Every number of the run as plain rows (for the tables, the JSON and the plots)."""
    from dataclasses import asdict

    from xarray_zarrmax.advise import rank

    rows = []
    for kind in stores:
        costs, reader = calibration[kind]["costs"], calibration[kind]["reader"]
        fl = floors[kind]
        predicted = {}
        for c in rank(shape, DIMS, 4, patterns_for(ops, {o.name: 1.0 for o in ops}), costs=costs, reader=reader,
                      layouts=[s.model() for s in specs]):
            for name, p in c.predictions.items():
                predicted[(str(c.layout), name)] = p
        for spec in specs:
            chunk_enc = max(1, stored[spec.key] // n_chunks[spec.key])
            for op in ops:
                nd = need[(spec.key, op.name)]["local" if kind == "local" else "remote"]
                needed = nd.touched_nbytes + nd.index_nbytes
                rt = floor_round_trips(spec, op, shape, chunk_enc, kind == "local")
                floor = rt * fl["latency_s"] + needed / fl["ceiling_bps"]
                p = predicted[(str(spec.model()), op.name)]
                row = {"store": kind, "layout": spec.key, "label": spec.label, "kind": spec.kind, "op": op.name,
                       "sharded": spec.shards is not None,
                       "needed_bytes": needed, "touched_bytes": nd.touched_nbytes, "touched_chunks": len(nd.chunks),
                       "index_bytes": nd.index_nbytes, "reader_bytes": nd.nbytes, "reader_requests": nd.requests,
                       "objects": len(nd.objects), "whole_shards": nd.whole if spec.shards else 0,
                       "floor_round_trips": rt, "floor_s": floor,
                       "predicted_s": p.seconds, "predicted_requests": p.counts.requests,
                       "predicted_bytes": p.counts.bytes, "predicted_round_trips": p.counts.round_trips}
                for engine in (*ENGINES, *LIMITS, "zarrmax_exact"):
                    key = (kind, spec.key, engine, op.name)
                    if key not in times:
                        continue
                    row[f"{engine}_s"] = statistics.median(times[key])
                    row[f"{engine}_all_s"] = times[key]
                    row |= {f"{engine}_{k}": v for k, v in counted.get(key, {}).items()}
                rows.append(row)
    return {
        "shape": list(shape), "repeat": repeat, "latency_ms": latency_ms, "nbytes": nbytes,
        "layouts": [{"key": s.key, "label": s.label, "name": s.name, "kind": s.kind, "chunks": s.chunks,
                     "shards": s.shards, "stored_bytes": stored[s.key], "chunks_count": n_chunks[s.key]}
                    for s in specs],
        "ops": [{"name": o.name, "box": {k: (v if isinstance(v, int) else [v.start, v.stop]) for k, v in o.box.items()}}
                for o in ops],
        "floors": dict(floors),
        "calibration": {k: {"costs": asdict(v["costs"]), "reader": asdict(v["reader"])}
                        for k, v in calibration.items()},
        "advised": {k: dict(v) for k, v in advised.items()},
        "rows": rows, "write_s": write_s, "measure_s": measure_s,
    }




TABLE = Table(__doc__ or "", run, flags, services="proxied")

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
