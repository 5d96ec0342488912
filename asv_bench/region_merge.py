"""A region write of one time step into a 64 MiB shard (a merge: read the shard, re-encode what changed,
write it back) against writing the whole shard and against reading it, on local disk, medians.

    .venv/bin/python asv_bench/region_merge.py [--repeat 7] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    import xarray as xr

    import xarray_zarrmax as zm

    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    values = (rng.normal(size=(64, 512, 512)).astype("f4") * 100).round() / 100  # compressible, as data is
    ds = xr.Dataset({"v": (("t", "y", "x"), values)})
    encoding = {"v": {"chunks": (1, 128, 128), "shards": (64, 512, 512)}}  # 1024 inner chunks of 64 kB
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "merge.zarr"
        whole, merge, read = [], [], []
        for i in range(args.repeat):
            start = time.perf_counter()
            zm.to_zarr(ds, path, encoding=encoding, mode="w")
            whole.append(time.perf_counter() - start)
            start = time.perf_counter()
            (path / "v" / "c" / "0" / "0" / "0").read_bytes()
            read.append(time.perf_counter() - start)
            step = ds.isel(t=slice(i, i + 1)) * 2
            start = time.perf_counter()
            zm.to_zarr(step, path, region={"t": slice(i, i + 1)})
            merge.append(time.perf_counter() - start)
            got = xr.open_dataset(path, engine="zarr")["v"].values
            expected = values.copy()
            expected[i] *= 2
            if not np.array_equal(got, expected):
                raise AssertionError(f"round {i}: the merged store does not hold the expected values")
        m, w, r = (statistics.median(x) for x in (merge, whole, read))
        print(f"one step into a 64 MiB shard: {m * 1e3:.1f} ms; the whole shard written: {w * 1e3:.1f} ms "
              f"(merge / whole {m / w:.2f}x); the shard file read: {r * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
