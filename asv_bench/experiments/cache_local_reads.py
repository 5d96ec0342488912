"""What a local read of kept chunks costs, against what any backend pays to be read through xarray (issue 43's
local T=1 target: one-step slabs within 2x of 64-step slabs).

One-step slabs of the cache table's cube (`asv_bench.shared.cache_workloads`) are 256 reads; 248 of them find
every chunk kept. Each such read is xarray's lazy indexing plus ours (a ``stat``, the lookups, four copies).
This times, in one process, medians of ``--repeat`` passes of 256 one-step slabs:

- ``null backend``: the same ``isel(...).values`` on a Dataset whose backend array returns a NumPy slice at
  once (a `BackendArray` through `explicit_indexing_adapter`, as every backend's, no I/O): xarray's own share;
- ``zarrmax, all kept``: the slabs with every chunk already kept;
- ``zarrmax, slabs-64``: the 4 reads of 64 steps, cache off (the target's denominator).

The floor of the T=1 workload through xarray is then slabs-64's decode plus 248 reads at the null backend's
cost: the ratio the target asks for cannot drop below floor / slabs-64, whatever the cache does.

    .venv/bin/python -m asv_bench.experiments.cache_local_reads [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import numpy as np

from asv_bench.shared import cache_workloads as w
from asv_bench.shared.timing import median_time


def _null_dataset(data: np.ndarray) -> Any:
    import xarray as xr
    from xarray.backends import BackendArray
    from xarray.core import indexing

    class NumpyBackendArray(BackendArray):
        def __init__(self, array: np.ndarray) -> None:
            self.array, self.shape, self.dtype = array, array.shape, array.dtype

        def __getitem__(self, key: Any) -> np.ndarray:
            return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.OUTER,
                                                      lambda k: self.array[k].copy())

    lazy = indexing.LazilyIndexedArray(NumpyBackendArray(data))
    return xr.Dataset({"v": xr.Variable(("t", "y", "x"), lazy)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    import xarray as xr

    import xarray_zarrmax

    data, training = w.cube(), w.train()
    path = os.path.join(tempfile.mkdtemp(prefix="zarrmax-cache-local-"), "cube.zarr")
    w.write(path, data, training)
    time.sleep(2.1)  # older than the racy window: the files may be kept
    null_v = _null_dataset(data)["v"]
    null = median_time(lambda: w.slabs(null_v, data, 1), args.repeat)
    with xarray_zarrmax.set_config(cache_bytes=0):
        v = xr.open_dataset(path, engine="zarrmax", consolidated=False, cache=False)["v"]
        slabs64 = median_time(lambda: w.slabs(v, data, 64), args.repeat)
    with xarray_zarrmax.set_config(cache_bytes=256 << 20):
        v = xr.open_dataset(path, engine="zarrmax", consolidated=False, cache=False)["v"]
        w.slabs(v, data, 1)  # keeps every chunk (each read uses part of it)
        with xarray_zarrmax.request_counts() as counts:
            kept = median_time(lambda: w.slabs(v, data, 1), args.repeat)
        assert counts.cache.misses == 0, counts.cache
    reads, load = w.SHAPE[0] - 8, os.getloadavg()
    print(f"Local, one process; medians of {args.repeat}; load average {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}\n")
    print("| what | 256 one-step slabs (ms) | per read (us) |")
    print("|---|---|---|")
    print(f"| null backend (xarray's own share) | {null * 1e3:.1f} | {null / 256 * 1e6:.0f} |")
    print(f"| zarrmax, every chunk kept | {kept * 1e3:.1f} | {kept / 256 * 1e6:.0f} |")
    print(f"| zarrmax slabs-64 (4 reads, cache off) | {slabs64 * 1e3:.1f} | |")
    floor = slabs64 + reads * null / 256
    print(f"\nFloor of the T=1 workload through xarray: {slabs64 * 1e3:.1f} ms + {reads} x {null / 256 * 1e6:.0f} us = "
          f"{floor * 1e3:.1f} ms, {floor / slabs64:.2f}x slabs-64. With zarrmax's reads of kept chunks: "
          f"{(slabs64 + reads * kept / 256) * 1e3:.1f} ms, {(slabs64 + reads * kept / 256) / slabs64:.2f}x.")


if __name__ == "__main__":
    main()
