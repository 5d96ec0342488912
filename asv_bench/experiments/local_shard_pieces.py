"""Local shards: read whole then decode, against read in pieces with each piece decoded right after its read.

A plain loop (os.preadv and numcodecs, no zarrmax) over the read table's "1 MB chunks in 64 MB shards" layout,
two threads, one shard per job; then zarrmax's own read of the same array. Decoding a piece while its bytes
are still in the core's cache is what `tuning.PIECE_BYTES` is chosen by (the performance analysis, "Local
shards read in pieces, each decoded while its bytes are in cache").

    .venv/bin/python -m asv_bench.experiments.local_shard_pieces --mib 512 --repeat 9
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from asv_bench.shared.read_layouts import local_copies
from asv_bench.shared.runner import Session, Table, add_flags, execute
from asv_bench.shared.timing import warm_memory


def shard_index(path: Path, chunks: int) -> np.ndarray:
    """(offset, nbytes) per chunk, from the index at the shard's end (16 bytes a chunk, then a crc32c)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(size - chunks * 16 - 4)
        return np.frombuffer(f.read(chunks * 16), dtype="<u8").reshape(chunks, 2)


def read_shard(path: Path, index: np.ndarray, out: np.ndarray, per: int | None) -> None:
    """Decode every chunk of one shard into ``out``: the whole file first (``per`` None), or ``per`` chunks
    a read, each read decoded before the next."""
    import numcodecs

    zstd, chunk = numcodecs.Zstd(), out.nbytes // len(index)
    fd = os.open(path, os.O_RDONLY)
    try:
        groups = [(0, len(index))] if per is None else [(i, min(i + per, len(index)))
                                                        for i in range(0, len(index), per)]
        for first, stop in groups:
            if per is None:
                base, buf = 0, np.empty(os.fstat(fd).st_size, np.uint8)
            else:
                base = int(index[first, 0])
                buf = np.empty(int(index[stop - 1, 0] + index[stop - 1, 1]) - base, np.uint8)
            os.preadv(fd, [buf], base)
            for i in range(first, stop):
                offset, length = int(index[i, 0]) - base, int(index[i, 1])
                zstd.decode(buf[offset:offset + length], out=out[i * chunk:(i + 1) * chunk])
    finally:
        os.close(fd)


def flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, mib=512, repeat=9)
    parser.add_argument("--threads", type=int, default=2)


def run(session: Session) -> int:
    import xarray as xr

    args = session.args
    for layout, path in local_copies(args.mib, [3], "shard-pieces-"):  # int64, 1 MB chunks in 64 MB shards
        assert layout.shards is not None
        per_shard = layout.shards[0] // layout.chunks[0]
        files = sorted((path / "v" / "c").iterdir(), key=lambda p: int(p.name))
        indexes = [shard_index(f, per_shard) for f in files]
        shard_bytes = layout.shards[0] * np.dtype(layout.dtype).itemsize

        def loop(per: int | None) -> None:
            out = np.empty(len(files) * shard_bytes, np.uint8)
            with ThreadPoolExecutor(args.threads) as ex:
                list(ex.map(lambda k: read_shard(files[k], indexes[k], out[k * shard_bytes:(k + 1) * shard_bytes],
                                                 per), range(len(files))))

        def zarrmax() -> None:
            xr.open_dataset(path, engine="zarrmax", chunks=None)["v"].values  # noqa: B018

        variants = {"whole shard, then decode": lambda: loop(None)}
        variants |= {f"pieces of {per} chunks ({per} MB)": (lambda per=per: loop(per)) for per in (1, 2, 4, 8, 16)}
        variants["zarrmax (chunks=None)"] = zarrmax
        times: dict[str, list[float]] = {name: [] for name in variants}
        for fn in variants.values():
            fn()  # warm-up: page cache, imports
        for _ in range(args.repeat):
            for name, fn in variants.items():
                warm_memory(2 * layout.nbytes)
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        print(f"{layout.name}, {args.mib} MiB, {args.threads} threads, median of {args.repeat}:")
        for name, ts in times.items():
            print(f"  {name:28s} {statistics.median(ts) * 1e3:7.1f} ms")
    return 0


TABLE = Table(__doc__ or "", run, flags)

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
