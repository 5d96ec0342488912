"""Did a change make reads slower? Read throughput of two source trees of xarray_zarrmax, interleaved on the
same data in the same run.

    .venv/bin/python asv_bench/compare_read.py --base ../main-checkout [--head .] [--mib 512] [--rounds 3]
                                               [--stores local,minio] [--markdown out.md]

Writes throughput.py's layouts once (a local directory and MinIO), then alternates base and head (in turn
first: base-head, head-base, ...): each
measurement is a fresh process with that tree first on ``sys.path`` that reads the array fully once untimed,
then ``--reads`` times (median), with ``chunks={}`` (dask, threaded, 16 threads) and ``chunks=None``. Prints
per layout, store and mode the median over rounds for each tree and head/base (above 1: head is slower).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import throughput  # noqa: E402

warnings.filterwarnings("ignore")

_MEASURE = """
import json, statistics, sys, time, warnings
warnings.filterwarnings("ignore")
sys.path.insert(0, {tree!r})
sys.path.insert(1, {bench!r})
import xarray_zarrmax
assert xarray_zarrmax.__file__.startswith({tree!r}), xarray_zarrmax.__file__
from throughput import read_engine
target, kw, use_dask, reads = json.loads(sys.argv[1])
read_engine(target, "zarrmax", 16, use_dask=use_dask, **kw)
times = []
for _ in range(reads):
    start = time.perf_counter()
    read_engine(target, "zarrmax", 16, use_dask=use_dask, **kw)
    times.append(time.perf_counter() - start)
print(json.dumps(statistics.median(times)))
"""


def measure(tree: Path, target: str, kw: dict, use_dask: bool, reads: int) -> float:
    script = _MEASURE.format(tree=str(tree.resolve()), bench=str(Path(__file__).parent.resolve()))
    out = subprocess.run([sys.executable, "-c", script, json.dumps([target, kw, use_dask, reads])],
                         capture_output=True, text=True, check=True, cwd=tempfile.gettempdir()).stdout
    return float(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    import zarr

    from xarray_zarrmax.testing import MinioServer, minio_binary

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, type=Path, help="the tree to compare against (e.g. a main checkout)")
    parser.add_argument("--head", default=Path(__file__).resolve().parent.parent, type=Path)
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reads", type=int, default=3)
    parser.add_argument("--stores", default="local,minio")
    parser.add_argument("--layouts", default="", help="comma-separated indexes into throughput.py's layouts")
    parser.add_argument("--markdown")
    args = parser.parse_args(argv)
    trees = {"base": args.base, "head": args.head}
    for name, tree in trees.items():
        if not (tree / "xarray_zarrmax" / "__init__.py").exists():
            parser.error(f"--{name} must be a source tree holding xarray_zarrmax/. Got {str(tree)!r}.")

    stores = args.stores.split(",")
    server = None
    rows = []
    with tempfile.TemporaryDirectory(prefix="zarrmax-compare-") as tmp:
        if "minio" in stores:
            binary = minio_binary()
            if binary is None:
                parser.error("MinIO binary not found: run `bash ci/install_services.sh`")
            server = MinioServer(binary).start()
            server.make_bucket("compare")
        try:
            chosen = {int(i) for i in args.layouts.split(",") if i}
            for i, layout in enumerate(throughput.layouts(args.mib)):
                if chosen and i not in chosen:
                    continue
                targets: list[tuple[str, str, dict]] = []
                if "local" in stores:
                    path = Path(tmp) / f"l{i}.zarr"
                    throughput.write(str(path), layout)
                    targets.append(("local", str(path), {}))
                if server is not None:
                    throughput.write(zarr.storage.ObjectStore(server.obstore("compare", f"l{i}.zarr")), layout)
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
        finally:
            if server is not None:
                server.close()
    if args.markdown:
        lines = ["| layout | store | mode | base (s) | head (s) | head / base | base min-max over rounds (s) |",
                 "|---|---|---|---|---|---|---|"]
        lines += [f"| {n} | {s} | {m} | {b:.3f} | {h:.3f} | {h / b:.2f} | {lo:.3f}-{hi:.3f} |"
                  for n, s, m, b, h, lo, hi in rows]
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
