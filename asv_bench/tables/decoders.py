"""Decode speed of every zstd (and blosc) decoder installed, per core and on all cores, on the chunks of the
throughput benchmark's layouts: the decode ceiling per codec.

    .venv/bin/python -m asv_bench.tables.decoders [--mib 64] [--repeat 5] [--json out.json]

Each chunk is compressed once as zarr writes it (zstd level 1; blosc: zstd level 1 with byte shuffle), then
every decoder decodes all chunks: on one thread (GB/s per core), and on a thread per core (each a contiguous
run of the chunks) into preallocated outputs (does it release the GIL?). "into": decodes straight into the
caller's buffer; otherwise the decoded bytes are a new object, copied into the output (counted in the time, as
a reader must).
Values are checked against the data. Medians of ``--repeat``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from asv_bench.shared.read_layouts import Layout, layouts
from asv_bench.shared.runner import Session, Table, add_flags, execute
from asv_bench.shared.timing import median_time

CORES = os.cpu_count() or 1
Decoder = Callable[[bytes, np.ndarray], None]


def _copy_into(decoded: Any, out: np.ndarray) -> None:
    out.reshape(-1).view(np.uint8)[:] = np.frombuffer(decoded, dtype=np.uint8)


def zstd_decoders() -> dict[str, tuple[Decoder, bool]]:
    """name -> (decode raw into out, decodes into the buffer itself)."""
    found: dict[str, tuple[Decoder, bool]] = {}
    import numcodecs

    codec = numcodecs.Zstd()
    found["numcodecs.Zstd"] = (lambda raw, out: codec.decode(raw, out=out), True)

    from xarray_zarrmax.codecs import ChunkCodec

    codecs: dict[tuple[Any, ...], ChunkCodec] = {}

    def zarrmax(raw: bytes, out: np.ndarray) -> None:  # what the reader runs: its choice of decoder by size
        key = (out.shape, out.dtype)
        if key not in codecs:
            codecs[key] = ChunkCodec(out.shape, out.dtype, out.dtype, None, ("zstd",))
        codecs[key].decode_into(raw, out, "bench")

    found["zarrmax (ChunkCodec.decode_into)"] = (zarrmax, True)
    try:
        import zstandard

        local = threading.local()  # a decompression context is not thread-safe: one per thread

        def dctx() -> Any:
            if not hasattr(local, "dctx"):
                local.dctx = zstandard.ZstdDecompressor()
            return local.dctx

        found["zstandard"] = (lambda raw, out: _copy_into(dctx().decompress(raw), out), False)

        def zstandard_into(raw: bytes, out: np.ndarray) -> None:
            with dctx().stream_reader(raw) as reader:
                view = memoryview(out.reshape(-1)).cast("B")
                done = 0
                while done < len(view):
                    n = reader.readinto(view[done:])
                    if not n:
                        raise ValueError("zstandard: frame shorter than the chunk")
                    done += n

        found["zstandard stream_reader.readinto"] = (zstandard_into, True)
    except ImportError:
        pass
    try:
        import pyzstd

        found["pyzstd"] = (lambda raw, out: _copy_into(pyzstd.decompress(raw), out), False)
    except ImportError:
        pass
    try:
        import cramjam

        found["cramjam.zstd"] = (lambda raw, out: _copy_into(cramjam.zstd.decompress(raw), out), False)
        found["cramjam.zstd.decompress_into"] = (
            lambda raw, out: cramjam.zstd.decompress_into(raw, memoryview(out.reshape(-1)).cast("B")), True)
    except ImportError:
        pass
    return found


def blosc_decoders() -> dict[str, tuple[Decoder, bool]]:
    found: dict[str, tuple[Decoder, bool]] = {}
    import numcodecs

    codec = numcodecs.Blosc(cname="zstd", clevel=1, shuffle=numcodecs.Blosc.SHUFFLE)
    found["numcodecs.Blosc"] = (lambda raw, out: codec.decode(raw, out=out), True)
    try:
        import blosc2

        found["blosc2"] = (lambda raw, out: blosc2.decompress(raw, dst=memoryview(out.reshape(-1)).cast("B")),
                           True)
    except ImportError:
        pass
    return found


def chunks_of(layout: Layout, mib: int) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """The layout's data cut to about ``mib`` MiB, and the regions of its (inner) chunks."""
    import itertools

    data = layout.data()
    chunk = layout.chunks
    keep = max(1, (mib * 2**20) // (int(np.prod(chunk)) * data.itemsize))
    grid = [n // c for n, c in zip(data.shape, chunk, strict=True)]
    starts = list(itertools.product(*(range(g) for g in grid)))[:keep]
    return data, starts


def run_layout(layout: Layout, mib: int, repeat: int) -> list[dict[str, Any]]:
    import numcodecs

    data, starts = chunks_of(layout, mib)
    c = layout.chunks
    pieces = [np.ascontiguousarray(data[tuple(slice(s * k, (s + 1) * k) for s, k in zip(st, c, strict=True))])
              for st in starts]
    nbytes = sum(p.nbytes for p in pieces)
    rows = []
    for family, decoders, encoder in (
        ("zstd", zstd_decoders(), numcodecs.Zstd(level=1)),
        ("blosc", blosc_decoders(), numcodecs.Blosc(cname="zstd", clevel=1, shuffle=numcodecs.Blosc.SHUFFLE)),
    ):
        encoded = [bytes(encoder.encode(p)) for p in pieces]
        ratio = nbytes / sum(len(e) for e in encoded)
        for name, (decode, into) in decoders.items():
            outs = [np.empty_like(p) for p in pieces]

            def serial() -> None:
                for raw, out in zip(encoded, outs, strict=True):
                    decode(raw, out)

            def decode_some(part: slice) -> None:
                for raw, out in zip(encoded[part], outs[part], strict=True):
                    decode(raw, out)

            def parallel() -> None:  # one contiguous run of chunks per thread: no hand-off per chunk
                step = -(-len(encoded) // CORES)
                with ThreadPoolExecutor(CORES) as ex:
                    list(ex.map(decode_some, [slice(i, i + step) for i in range(0, len(encoded), step)]))

            serial()
            if not all(np.array_equal(o, p) for o, p in zip(outs, pieces, strict=True)):
                raise AssertionError(f"{name} decoded wrong values on {layout.name}")
            t1 = median_time(serial, repeat)
            tn = median_time(parallel, repeat)
            rows.append({"layout": layout.name, "codec": family, "decoder": name, "into": into,
                         "ratio": ratio, "chunk_bytes": pieces[0].nbytes, "nbytes": nbytes,
                         "one_thread_gbps": nbytes / t1 / 1e9, "all_cores_gbps": nbytes / tn / 1e9,
                         "scaling": t1 / tn})
            print(_row(rows[-1]), file=sys.stderr, flush=True)
    return rows


def _row(r: dict[str, Any]) -> str:
    return (f"| {r['layout']} | {r['codec']} ({r['ratio']:.2f}x) | {r['decoder']} | {'yes' if r['into'] else 'no'} "
            f"| {r['one_thread_gbps']:.2f} | {r['all_cores_gbps']:.2f} | {r['scaling']:.2f}x |")


def flags(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, mib=64, mib_help="decoded bytes per layout (MiB)", repeat=5, json_file=True)


def run(session: Session) -> int:
    args = session.args
    chosen = [lay for lay in layouts(512) if lay.shards is not None or lay.chunks == (375_000,)]
    cube = chosen[-1]
    # Small chunks, as in the access-pattern layouts (docs/dev/logs/access_patterns.md): per-call costs show here.
    chosen.append(Layout("float32 cube, 15 KB chunks", cube.shape, "f4", (4, 32, 30), None, smooth=True))
    rows = [r for lay in chosen for r in run_layout(lay, args.mib, args.repeat)]
    print(f"\nDecode of {args.mib} MiB of each layout's chunks, median of {args.repeat}; GB/s of decoded output; "
          f"{CORES} cores. \"into\": decodes into the caller's buffer (else a new object, then copied: counted).\n")
    print("| layout (chunk) | codec (compression ratio) | decoder | into | 1 thread GB/s | all cores GB/s "
          "| all cores / 1 thread |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(_row(r))
    if args.json:
        session.save_json(args.json, {"cores": CORES, "rows": rows})
    return 0


TABLE = Table(__doc__ or "", run, flags)

if __name__ == "__main__":
    raise SystemExit(execute(TABLE))
