"""Open cost against chunk count: nothing per chunk happens at open.

    .venv/bin/python -m asv_bench.tables.open_chunks [--repeat 5]

Opens a one-array group whose array has 100 or 1,000,000 chunks (local disk), with both engines, with and
without dask; prints median milliseconds. With ``chunks={}`` dask itself builds a tuple of one entry per
block, which is the only part that grows with the count.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from asv_bench.shared.runner import Session, Table, add_flags, execute
from asv_bench.shared.timing import median_time


def flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, repeat=5)


def run(session: Session) -> int:
    import xarray as xr
    import zarr

    args = session.args
    root = Path(tempfile.mkdtemp(prefix="zarrmax-chunks-"))
    print("| chunks | engine | chunks=None (ms) | chunks={} (ms) |\n|---|---|---|---|")
    for n in (100, 1_000_000):
        path = str(root / f"a{n}.zarr")
        group = zarr.open_group(path, mode="w", zarr_format=3)
        group.create_array("v", shape=(n * 10,), chunks=(10,), dtype="f4", dimension_names=["x"])
        for engine in ("zarr", "zarrmax"):
            extra = {"consolidated": False} if engine == "zarr" else {}
            cells = [median_time(lambda c=c: xr.open_dataset(path, engine=engine, chunks=c, **extra), args.repeat)
                     for c in (None, {})]
            print(f"| {n:,} | {engine} | {cells[0] * 1000:.1f} | {cells[1] * 1000:.1f} |")
    return 0


TABLE = Table(__doc__ or "", run, flags)

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
