"""A/B of encoding into pooled buffers (``xarray_zarrmax.core.buffers``) against fresh bytes per chunk, in one
process, rounds interleaved: the same writes as ``write_throughput.py``, with ``shard_encode.POOLED_FROM_BYTES``
set out of reach for the "bytes" stacks.

    .venv/bin/python asv_bench/write_pooled_ab.py LAYOUT ROUNDS [STACKS] [local|minio]

LAYOUT indexes ``throughput.layouts(256)``; STACKS (comma-separated) from put, encode, encode_bytes, zarrmax,
zarrmax_bytes, to_zarr. Prints the median time and CPU (this process + MinIO's) of each.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import write_throughput as wt  # noqa: E402
from throughput import layouts  # noqa: E402

from xarray_zarrmax.codecs import encode as shard_encode  # noqa: E402


def main(argv: list[str]) -> None:
    index, rounds = int(argv[0]), int(argv[1])
    stacks = (argv[2] if len(argv) > 2 else "put,encode,encode_bytes,zarrmax_bytes,zarrmax,to_zarr").split(",")
    kind = argv[3] if len(argv) > 3 else "local"
    layout = layouts(256)[index]
    tmp = Path(tempfile.mkdtemp())
    server = None
    if kind == "minio":
        from benchutil import start_minio

        server, _ = start_minio(wt.BUCKET)
        target = wt.Target("minio", tmp, server.storage_options(), 16, server_pid=server.proc.pid)
    else:
        target = wt.Target("local", tmp, None, 16)
    pooled_from = shard_encode.POOLED_FROM_BYTES
    try:
        data = layout.data()
        ds, objects = wt.dataset(layout, data), wt.reference(layout, data, tmp)
        results: dict[str, list[tuple[float, float, float]]] = {s: [] for s in stacks}
        for round_ in range(rounds + 1):  # round 0: warm-up and the read-back check
            for stack in stacks:
                shard_encode.POOLED_FROM_BYTES = (1 << 62) if stack.endswith("_bytes") else pooled_from
                base = stack.removesuffix("_bytes")
                where = target.fresh(base)
                wt.warm_memory(2 * layout.nbytes)
                cpu0, start = target.cpu_seconds(), time.perf_counter()
                target.write(base, where, ds, data, layout, objects)
                elapsed, cpu1 = time.perf_counter() - start, target.cpu_seconds()
                if round_ == 0 and base != "encode":
                    target.check(where, data)
                if round_:
                    results[stack].append((elapsed, cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]))
                if base != "encode":
                    target.remove(where)
        print(f"{layout.name}, {kind}, {rounds} rounds")
        for stack, values in results.items():
            a = np.array(values)
            print(f"{stack:14s} median {np.median(a[:, 0]) * 1e3:7.1f} ms  CPU {np.median(a[:, 1]) * 1e3:7.1f}"
                  f" + {np.median(a[:, 2]) * 1e3:6.1f} ms  all {[round(x * 1e3) for x in a[:, 0]]}")
    finally:
        shard_encode.POOLED_FROM_BYTES = pooled_from
        shutil.rmtree(tmp, ignore_errors=True)
        if server is not None:
            server.close()


if __name__ == "__main__":
    main(sys.argv[1:])
