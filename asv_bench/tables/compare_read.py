"""Did a change make reads slower? Read throughput of two source trees of xarray_zarrmax, interleaved on the
same data in the same run.

    .venv/bin/python -m asv_bench.tables.compare_read --base ../main-checkout [--head .] [--mib 512] [--rounds 3]
                                                      [--stores local,minio] [--layouts 1,4] [--markdown out.md]

Writes the read table's layouts (`asv_bench.shared.read_layouts`) once (a local directory and MinIO), then
alternates base and head (in turn first: base-head, head-base, ...): each measurement is a fresh process with
that tree first on ``sys.path`` (`process.in_fresh_process`) that reads the array fully once untimed, then
``--reads`` times (median), with ``chunks={}`` (dask, threaded, 16 threads) and ``chunks=None``
(`peers.read_engine`). Prints per layout, store and mode the median over rounds for each tree and head/base
(above 1: head is slower).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from asv_bench.shared import read_layouts
from asv_bench.shared.process import ROOT, in_fresh_process
from asv_bench.shared.runner import Session, Table, add_flags, execute


def median_read(tree: str, target: str, kw: dict[str, Any], use_dask: bool, reads: int) -> float:
    """In a fresh process whose xarray_zarrmax comes from ``tree`` (`measure`): one untimed read, then the
    median of ``reads`` timed ones."""
    import time

    import xarray_zarrmax
    from asv_bench.shared.peers import read_engine

    if not xarray_zarrmax.__file__ or not xarray_zarrmax.__file__.startswith(tree):
        raise AssertionError(f"expected xarray_zarrmax from {tree}. Got {xarray_zarrmax.__file__} instead.")
    read_engine(target, "zarrmax", 16, use_dask=use_dask, **kw)
    times = []
    for _ in range(reads):
        start = time.perf_counter()
        read_engine(target, "zarrmax", 16, use_dask=use_dask, **kw)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(tree: Path, target: str, kw: dict[str, Any], use_dask: bool, reads: int) -> float:
    tree_path = str(tree.resolve())
    return float(in_fresh_process("asv_bench.tables.compare_read:median_read", tree_path, target, kw, use_dask,
                                  reads, first_on_path=tree_path, cwd=tempfile.gettempdir()))


def flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base", required=True, type=Path, help="the tree to compare against (e.g. a main checkout)")
    parser.add_argument("--head", default=ROOT, type=Path)
    add_flags(parser, mib=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reads", type=int, default=3)
    add_flags(parser, stores=True)
    parser.add_argument("--layouts", default="", help="comma-separated indexes into the read table's layouts")
    parser.add_argument("--markdown")


def run(session: Session) -> int:
    args = session.args
    trees = {"base": args.base, "head": args.head}
    for name, tree in trees.items():
        if not (tree / "xarray_zarrmax" / "__init__.py").exists():
            raise SystemExit(f"--{name} must be a source tree holding xarray_zarrmax/. Got {str(tree)!r}.")

    stores = args.stores.split(",")
    server = session.services.minio if session.services is not None else None
    if server is not None:
        server.make_bucket("compare")
    rows = []
    with tempfile.TemporaryDirectory(prefix="zarrmax-compare-") as tmp:
        for i, layout in read_layouts.chosen(args.mib, args.layouts):
            targets: list[tuple[str, str, dict[str, Any]]] = []
            if "local" in stores:
                path = Path(tmp) / f"l{i}.zarr"
                read_layouts.write(str(path), layout)
                targets.append(("local", str(path), {}))
            if server is not None:
                read_layouts.write(zarr_store(server, f"l{i}.zarr"), layout)
                targets.append(("minio", f"s3://compare/l{i}.zarr", {"storage_options": server.storage_options()}))
            for store, target, kw in targets:
                for use_dask in (True, False):
                    times: dict[str, list[float]] = {"base": [], "head": []}
                    for r in range(args.rounds):
                        for name in ("base", "head") if r % 2 == 0 else ("head", "base"):  # ABBA: no order bias
                            times[name].append(measure(trees[name], target, kw, use_dask, args.reads))
                    base, head = (statistics.median(times[n]) for n in ("base", "head"))
                    rows.append((layout.name, store, "dask" if use_dask else "no dask", base, head,
                                 min(times["base"]), max(times["base"])))
                    print(f"{layout.name:45} {store:6} {rows[-1][2]:8} base {base:.3f} s  head {head:.3f} s  "
                          f"head/base {head / base:.2f}  (base range {rows[-1][5]:.3f}-{rows[-1][6]:.3f})",
                          flush=True)
    if args.markdown:
        lines = ["| layout | store | mode | base (s) | head (s) | head / base | base min-max over rounds (s) |",
                 "|---|---|---|---|---|---|---|"]
        lines += [f"| {n} | {s} | {m} | {b:.3f} | {h:.3f} | {h / b:.2f} | {lo:.3f}-{hi:.3f} |"
                  for n, s, m, b, h, lo, hi in rows]
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    return 0


def zarr_store(server: Any, prefix: str) -> Any:
    import zarr

    return zarr.storage.ObjectStore(server.obstore("compare", prefix))


TABLE = Table(__doc__ or "", run, flags, services="minio")

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
