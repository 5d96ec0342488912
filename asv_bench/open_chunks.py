"""Open cost against chunk count: nothing per chunk happens at open.

    .venv/bin/python asv_bench/open_chunks.py [--repeat 5]

Opens a one-array group whose array has 100 or 1,000,000 chunks (local disk), with both engines, with and
without dask; prints median milliseconds. With ``chunks={}`` dask itself builds a tuple of one entry per
block, which is the only part that grows with the count.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).parent))
from benchutil import median_time  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    import xarray as xr
    import zarr

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    raise SystemExit(main())
