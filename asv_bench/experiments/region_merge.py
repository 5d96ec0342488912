"""A region write of one time step into a 64 MiB shard (a merge: read the shard, re-encode what changed,
write it back) against writing the whole shard and against reading it, on local disk, medians. Then one
element written into a shard of 16,384 inner chunks of 2 x 2, by zarrmax and by ``Dataset.to_zarr``
(zarr-python's partial shard write), alternating.

    .venv/bin/python -m asv_bench.experiments.region_merge [--repeat 7] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from asv_bench.shared.runner import Session, Table, add_flags, execute


def flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, repeat=7)
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")


def run(session: Session) -> int:
    import xarray as xr

    import xarray_zarrmax as zm

    args = session.args
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
        many_chunks(Path(tmp), args.repeat)
    return 0


def many_chunks(tmp: Path, repeat: int) -> None:
    """One element into a shard of 16,384 inner chunks: the cost of every chunk the write does not touch."""
    import xarray as xr

    import xarray_zarrmax as zm

    ds = xr.Dataset({"v": (("y", "x"), np.random.default_rng(1).random((256, 256)).astype("f4"))})
    encoding = {"v": {"chunks": (2, 2), "shards": (256, 256)}}
    writers = {"zarrmax": lambda d, p, **kw: zm.to_zarr(d, p, consolidated=False, **kw),
               "Dataset.to_zarr": lambda d, p, **kw: d.to_zarr(p, consolidated=False, **kw)}
    times: dict[str, list[float]] = {name: [] for name in writers}
    for name, write in writers.items():
        write(ds, tmp / f"{name}.zarr", encoding=encoding, mode="w")
    for i in range(repeat):
        for name, write in writers.items():
            step = xr.Dataset({"v": (("y", "x"), np.full((1, 1), -1.0, "f4"))})
            start = time.perf_counter()
            write(step, tmp / f"{name}.zarr", region={"y": slice(i, i + 1), "x": slice(5, 6)})
            times[name].append(time.perf_counter() - start)
    ours, theirs = statistics.median(times["zarrmax"]), statistics.median(times["Dataset.to_zarr"])
    got = xr.open_dataset(tmp / "zarrmax.zarr", engine="zarr")["v"].values
    if not np.array_equal(got, xr.open_dataset(tmp / "Dataset.to_zarr.zarr", engine="zarr")["v"].values):
        raise AssertionError("the two stores differ after the same writes")
    print(f"one element into a shard of 16,384 inner chunks: zarrmax {ours * 1e3:.1f} ms, Dataset.to_zarr "
          f"{theirs * 1e3:.1f} ms ({theirs / ours:.2f}x)")


TABLE = Table(__doc__ or "", run, flags)

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
