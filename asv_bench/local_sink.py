"""Local writes: files with no name linked in (O_TMPFILE) against a temporary name renamed over the key.

    .venv/bin/python asv_bench/local_sink.py [--objects 336] [--mb 0.8] [--parts 1] [--rounds 15] [--dir /tmp]

`xarray_zarrmax.storage.sinks.LocalSink` puts ``--objects`` new objects of ``--mb`` MB each (random bytes, in
``--parts`` pieces as a shard's chunks are) into one directory from 16 threads, as a write of a 1-D array
does, once per way of writing, the two alternating in one process (the first of each pair swapped every round).
Each timed write goes to a fresh directory, which is removed after it; memory is touched first (`warm_memory`).
Prints the median time of each way and the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchutil import warm_memory  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=336)
    parser.add_argument("--mb", type=float, default=0.8)
    parser.add_argument("--parts", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the directories are written")
    args = parser.parse_args()

    from xarray_zarrmax.core.bytes import Pieces
    from xarray_zarrmax.storage import sinks

    if not sinks.LocalSink(args.dir)._unnamed:
        raise SystemExit(f"no files with no name here (O_TMPFILE, /proc/self/fd): nothing to compare in {args.dir}")
    size = int(args.mb * 1e6)
    rng = np.random.default_rng(0)
    objects = []
    for _ in range(args.objects):
        data = rng.bytes(size)
        cuts = np.linspace(0, size, args.parts + 1).astype(int)
        pieces = tuple(data[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True))
        objects.append(data if args.parts == 1 else Pieces(pieces))
    pool = ThreadPoolExecutor(16)

    def write(unnamed: bool) -> float:
        where = tempfile.mkdtemp(dir=args.dir)
        sink = sinks.LocalSink(where)
        sink._unnamed = unnamed
        warm_memory(2 * args.objects * size + (100 << 20))
        start = time.perf_counter()
        list(pool.map(lambda i: sink.put(f"v/c/{i}", objects[i]), range(args.objects)))
        seconds = time.perf_counter() - start
        shutil.rmtree(where)
        return seconds

    write(True), write(False)  # untimed: imports, first directories
    times: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.rounds):
        for unnamed in (True, False) if r % 2 else (False, True):
            times[unnamed].append(write(unnamed) * 1000)
    print(f"{args.objects} new objects of {args.mb} MB in {args.parts} part(s), 16 threads, in {args.dir}, "
          f"{args.rounds} rounds")
    for unnamed, label in ((False, "temporary name, renamed"), (True, "no name, linked in")):
        print(f"  {label:24s} median {np.median(times[unnamed]):7.1f} ms  "
              f"(min {min(times[unnamed]):.1f}, max {max(times[unnamed]):.1f})")
    ratios = np.array(times[False]) / np.array(times[True])
    print(f"  renamed / linked in, per round: median {np.median(ratios):.2f}x "
          f"(range {ratios.min():.2f}-{ratios.max():.2f})")


if __name__ == "__main__":
    main()
