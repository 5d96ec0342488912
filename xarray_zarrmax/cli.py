"""The ``zarrmax`` command: look at a store, and time a full read of it with a progress bar.

    zarrmax info URL [--group G] [-o key=value ...]
    zarrmax bench URL [--variable NAME ...] [--workers N] [--group G] [-o key=value ...]
    zarrmax advise URL --pattern NAME:WEIGHT ... [--select NAME:WEIGHT:DIM=START:STOP,...] [--variable NAME]
                   [--probe URL | --no-probe] [--budget-mb M] [--max-object-mb M] [--max-objects N] [--top N]
                   [--batch-window DIM=SIZE,...] [--batch-count N]

URL is a local path, or a file://, s3:// or other fsspec URL; ``-o endpoint=http://...`` and the like become
storage_options (credentials may also come from the usual AWS_* environment variables; they are never printed).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from xarray_zarrmax.config import get_config
from xarray_zarrmax.core.redact import redact, secrets_in


def _options(pairs: list[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"zarrmax: expected -o key=value. Got {pair!r} instead.")
        options[key] = value
    return options


def _open(args: argparse.Namespace, chunks: Any) -> Any:
    import xarray as xr

    kwargs: dict[str, Any] = {"engine": "zarrmax", "chunks": chunks, "group": args.group}
    if args.option:
        kwargs["storage_options"] = _options(args.option)
    return xr.open_dataset(args.url, **kwargs)


def info(args: argparse.Namespace) -> int:
    from xarray_zarrmax.backend.arrays import FallbackArray, ZarrmaxArray
    from xarray_zarrmax.core.accounting import request_counts
    from xarray_zarrmax.xarray_compat import backend_array

    start = time.perf_counter()
    with request_counts() as counts:
        ds = _open(args, None)
    elapsed = time.perf_counter() - start
    print(f"{redact(args.url)}: opened in {elapsed:.3f} s with {counts.total('get')} GET and "
          f"{counts.total('list')} LIST requests ({counts.total('bytes')} bytes)")
    print(f"dimensions: {dict(ds.sizes)}")
    for name, var in ds.variables.items():
        enc = var.encoding
        shards = enc.get("shards")
        layout = f"chunks {enc.get('chunks')}" + (f" in shards {shards}" if shards else "")
        wrapper = backend_array(var, (ZarrmaxArray, FallbackArray))
        path = "fast path" if isinstance(wrapper, ZarrmaxArray) else (
            f"zarr-python ({wrapper.reason})" if isinstance(wrapper, FallbackArray) else "loaded at open")
        print(f"  {name}: {var.dims} {var.dtype} {layout}; {path}")
    return 0


def bench(args: argparse.Namespace) -> int:
    import dask
    from dask.diagnostics import ProgressBar

    from xarray_zarrmax.core.accounting import request_counts

    ds = _open(args, {})
    names = args.variable or list(ds.data_vars)
    missing = [n for n in names if n not in ds]
    if missing:
        print(f"zarrmax: no variables {missing} in {redact(args.url)}; it has {list(ds.data_vars)}", file=sys.stderr)
        return 2
    arrays = [ds[n].data for n in names]
    nbytes = sum(a.nbytes for a in arrays)
    task_bytes = get_config().task_bytes
    tasks = f"grouped up to {task_bytes / 2**20:g} MiB a task" if task_bytes else "one per stored object"
    print(f"reading {len(names)} variable(s), {nbytes / 1e9:.3f} GB, "
          f"{sum(a.npartitions for a in arrays)} task(s) ({tasks}) on {args.workers} threads")
    start = time.perf_counter()
    with request_counts() as counts, dask.config.set(scheduler="threads", num_workers=args.workers), \
            ProgressBar(out=sys.stderr, dt=0.2):
        # sum each block where it was read: measures the read, not the concatenation of a result
        dask.compute(*(a.map_blocks(_block_nbytes, chunks=(1,) * a.ndim, dtype="i8").sum() for a in arrays))
    elapsed = time.perf_counter() - start
    print(f"read {nbytes / 1e9:.3f} GB in {elapsed:.3f} s: {nbytes / elapsed / 1e9:.2f} GB/s; "
          f"{counts.total('get')} GET requests, {counts.total('bytes') / 1e9:.3f} GB fetched")
    return 0


def _weighted(text: str, what: str) -> tuple[str, float, str]:
    name, sep, rest = text.partition(":")
    weight, _, selection = rest.partition(":")
    try:
        value = float(weight)
    except ValueError:
        value = float("nan")
    if not sep or not name or value != value:
        raise ValueError(f"expected {what} NAME:WEIGHT{':DIM=START:STOP,...' if what == '--select' else ''}, "
                         f"e.g. timeseries:0.5. Got {text!r} instead.")
    return name, value, selection


def _selection(text: str, spec: str, usage: str = "--select NAME:WEIGHT:DIM=START:STOP,...") -> dict[str, slice | int]:
    """``time=0:100,lat=3`` as {"time": slice(0, 100), "lat": 3}."""
    out: dict[str, slice | int] = {}
    for part in filter(None, spec.split(",")):
        dim, sep, bounds = part.partition("=")
        try:
            if ":" in bounds:
                a, _, b = bounds.partition(":")
                out[dim] = slice(int(a) if a else None, int(b) if b else None)
            else:
                out[dim] = int(bounds)
        except ValueError:
            sep = ""
        if not sep or not dim:
            raise ValueError(f"expected {usage}. Got {text!r} instead.")
    return out


def advise(args: argparse.Namespace) -> int:
    from xarray_zarrmax.advise.advisor import advise as run_advice
    from xarray_zarrmax.advise.patterns import Batch
    from xarray_zarrmax.advise.probe import probe_place

    patterns: dict[str, Any] = {}
    for text in args.pattern:
        name, weight, _ = _weighted(text, "--pattern")
        patterns[name] = weight
    for text in args.select:
        name, weight, spec = _weighted(text, "--select")
        patterns[name] = (weight, _selection(text, spec))
    window: dict[str, int] = {}
    usage = "--batch-window DIM=SIZE[,DIM=SIZE]"
    for dim, size in _selection(args.batch_window, args.batch_window or "", usage).items():
        if not isinstance(size, int):
            raise ValueError(f"expected {usage}. Got {args.batch_window!r} instead.")
        window[dim] = size
    ds = _open(args, None)
    # next to the store, not inside it: a probe cut short leaves nothing in the Zarr hierarchy
    probe = None if args.no_probe else (args.probe or probe_place(args.url))
    report = run_advice(ds, patterns, variable=args.variable, store=probe,
                        storage_options=_options(args.option) or None,
                        budget_mb=args.budget_mb, max_object_mb=args.max_object_mb, max_objects=args.max_objects,
                        batch=Batch(args.batch_count, window or None), progress=True)
    print(report)
    if args.top:
        import pandas as pd

        with pd.option_context("display.width", 200, "display.max_columns", None):
            print(report.table.head(args.top).to_string())
    return 0


def _block_nbytes(block: Any) -> Any:
    import numpy as np

    return np.full((1,) * block.ndim, block.nbytes, dtype="i8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="zarrmax", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("info", "variables, layouts and open cost of a store"),
                            ("bench", "time a full read with a progress bar"),
                            ("advise", "rank chunk and shard layouts for a mix of access patterns")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("url")
        p.add_argument("--group")
        p.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                       help="storage option, e.g. -o endpoint=http://127.0.0.1:9000 -o region=us-east-1")
        if name == "bench":
            p.add_argument("--variable", action="append", help="variable to read (default: all)")
            p.add_argument("--workers", type=int, default=16, help="dask threads (default: 16)")
        if name == "advise":
            p.add_argument("--pattern", action="append", default=[], metavar="NAME:WEIGHT",
                           help="timeseries, map, region-mean, map-mean, full-scan or random-batch, with a weight")
            p.add_argument("--select", action="append", default=[], metavar="NAME:WEIGHT:DIM=START:STOP,...",
                           help="a pattern of your own: a box of index ranges (or indexes) per dimension")
            p.add_argument("--variable", help="data variable to advise on (default: the largest)")
            p.add_argument("--probe", metavar="URL", help="where to probe the store (default: the folder holding URL; "
                           "a few objects under a fresh prefix, deleted after)")
            p.add_argument("--no-probe", action="store_true", help="assume a remote object store's costs")
            p.add_argument("--budget-mb", type=float, help="most memory a dask task may use to read one object")
            p.add_argument("--max-object-mb", type=float, help="largest stored object")
            p.add_argument("--max-objects", type=int, help="most stored objects for the variable")
            p.add_argument("--batch-window", metavar="DIM=SIZE,...",
                           help="random-batch window (default: 8 time steps, 32 cells along other dimensions)")
            p.add_argument("--batch-count", type=int, default=16, help="random-batch windows (default: 16)")
            p.add_argument("--top", type=int, default=0, help="also print the table's first N rows")
    args = parser.parse_args(argv)
    try:
        return {"info": info, "bench": bench, "advise": advise}[args.command](args)
    except (FileNotFoundError, ValueError, OSError) as err:
        # errors from zarr-python (arrays it reads for us) are not masked where they arise
        print(f"zarrmax: {type(err).__name__}: {redact(str(err), secrets_in(_options(args.option)))}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
