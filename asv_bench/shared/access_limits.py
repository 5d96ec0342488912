"""The physical limits of one access-pattern operation (issue 13): the reader's own requests replayed raw, and the
decoder alone on the chunks the operation touches.

`reader_requests` derives, from the stored files, every request zarrmax's reader sends for an operation with a
cold index cache, in the order it sends them (`fetch._fetch_object_once` remotely, `local_reads.read_local_shard`
and the whole-object paths locally). The access-pattern table checks the derivation against the reader's counted
requests and bytes on every cell, then times `replay_remote` / `replay_local` (those requests and nothing else:
no plan, no decode, no placement) and `decode_alone` (our decoder on the touched chunks' compressed bytes,
already in memory), interleaved with the reads. ``replay + decode`` is "read then decode", the bound for a reader
that runs the two stages one after the other on the same cores; one that overlaps them (waiting on the network
while it decodes) can beat it, down to ``max(replay, decode)``. The issue's floor (round trips x latency +
bytes / ceiling) leaves out both the store's work per request and the decode. The replay is of the reader's own
requests, with the bytes its settings add (whole-shard GETs, merged gaps), not of a minimal set.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ObjectRequests:
    """The requests for one stored object: ``steps`` go one after another, the ranges of a step at once."""

    key: str  # relative to the array's root, e.g. "v/c/0/1/2"
    steps: tuple[tuple[tuple[int, int], ...], ...]
    whole: bool  # the object read whole (no index first)

    @property
    def requests(self) -> int:
        return sum(len(step) for step in self.steps)

    @property
    def nbytes(self) -> int:
        return sum(b - a for step in self.steps for a, b in step)


@dataclass(frozen=True)
class Needed:
    """What one operation needs of one stored layout: the touched chunks' byte ranges (key, start, stop) and
    each touched shard's index size, and the reader's requests for it."""

    chunks: tuple[tuple[str, int, int], ...]
    index_nbytes: int
    objects: tuple[ObjectRequests, ...]
    chunk_nbytes: int  # one chunk decoded

    @property
    def touched_nbytes(self) -> int:
        return sum(b - a for _, a, b in self.chunks)

    @property
    def requests(self) -> int:
        return sum(o.requests for o in self.objects)

    @property
    def nbytes(self) -> int:
        return sum(o.nbytes for o in self.objects)

    @property
    def whole(self) -> int:
        return sum(o.whole for o in self.objects)


def _whole(size: int, local: bool, split: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """`ObstoreSource.get_large`: a first range that tells the size, then the rest in parallel; one read locally."""
    if local or size <= split:
        return (((0, size),),)
    return (((0, split),), tuple((a, min(a + split, size)) for a in range(split, size, split)))


def reader_requests(root: Path, chunks: Sequence[int], shards: Sequence[int] | None, reads: Sequence[Any], *,
                    local: bool, itemsize: int = 4) -> Needed:
    """The reader's requests, under the settings in force (`get_config`), for ``reads`` (`core.geometry.plan_reads`'s
    objects and pieces) of the array "v" stored under ``root`` (zarr v3, default chunk keys; shard indexes read
    with the reader's own `codecs.parse_index`, wherever they are stored and however encoded). Locally a touched
    shard whose chunks decode to `tuning.STREAM_BYTES` or more is read in pieces
    (`local_reads.local_pieces`); otherwise as remotely, each range one read. Chunks a shard's index marks absent are
    neither touched nor fetched; every touched object must be stored."""
    from xarray_zarrmax import get_config
    from xarray_zarrmax.codecs import parse_index
    from xarray_zarrmax.codecs.sharding import EMPTY
    from xarray_zarrmax.core.geometry import coalesce
    from xarray_zarrmax.read.local_reads import local_pieces as _pieces
    from xarray_zarrmax.tuning import PIECE_BYTES, STREAM_BYTES

    fmt = _shard_format(root, shards) if shards is not None else None
    config = get_config()
    chunk_nbytes = itemsize * math.prod(chunks)
    touched: list[tuple[str, int, int]] = []
    objects: list[ObjectRequests] = []
    index_total = 0
    for coords, pieces in reads:
        key = "v/c/" + "/".join(map(str, coords))
        path = root / key
        if not path.is_file():
            raise ValueError(f"expected every object an operation touches to be stored. {path} is missing.")
        size = path.stat().st_size
        if shards is None:
            touched.append((key, 0, size))
            objects.append(ObjectRequests(key, _whole(size, local, config.split_size), True))
            continue
        assert fmt is not None
        n, index_nbytes = math.prod(fmt.chunks_per_shard), fmt.index_nbytes
        lo, hi = fmt.index_range(size)
        with open(path, "rb") as fh:
            fh.seek(lo)
            entries = parse_index(fmt, fh.read(hi - lo), size, str(path))
        stored = [entries[p.coords] for p in pieces if entries[p.coords][0] != EMPTY]
        ranges = [(int(offset), int(offset + length)) for offset, length in stored]
        touched += [(key, a, b) for a, b in ranges]
        index_total += index_nbytes
        most = len(pieces) >= config.full_shard_fraction * n
        index = ((lo, hi),)
        if local and len(pieces) * chunk_nbytes >= STREAM_BYTES:  # `local_reads.read_local_shard`
            if size <= PIECE_BYTES and most:
                objects.append(ObjectRequests(key, (((0, size),),), True))
            else:
                rest = tuple((a, b) for a, b, _ in _pieces([(None, a, b) for a, b in ranges], config.coalesce_gap))
                objects.append(ObjectRequests(key, (index, rest) if rest else (index,), False))
        elif most:
            objects.append(ObjectRequests(key, _whole(size, local, config.split_size), True))
        else:
            rest = tuple((a, b) for a, b, _ in coalesce(ranges, config.coalesce_gap))
            objects.append(ObjectRequests(key, (index, rest) if rest else (index,), False))
    return Needed(tuple(touched), index_total, tuple(objects), chunk_nbytes)


def _shard_format(root: Path, shards: Sequence[int]) -> Any:
    """The stored array's `codecs.ShardFormat`, parsed by the reader's own `codecs.sharding.plan_shard_format`."""
    import json

    from xarray_zarrmax.codecs.sharding import plan_shard_format

    codec = json.loads((root / "v" / "zarr.json").read_text())["codecs"][0]
    if codec["name"] != "sharding_indexed":
        raise ValueError(f"expected a sharded array in {root}. Got first codec {codec['name']!r} instead.")
    return plan_shard_format(codec["configuration"], tuple(shards))


def replay_remote(store: Any, needed: Needed, concurrency: int) -> float:
    """Seconds to send ``needed``'s requests through ``store`` (a fresh obstore store, as each open makes its
    client) with at most ``concurrency`` in flight, each object's steps one after another, and read the bodies."""
    import obstore

    async def run() -> None:
        slots = asyncio.Semaphore(concurrency)

        async def one(key: str, start: int, stop: int) -> None:
            async with slots:
                got = await obstore.get_async(store, key, options={"range": (start, stop)})
                await got.bytes_async()

        async def obj(o: ObjectRequests) -> None:
            for step in o.steps:
                await asyncio.gather(*(one(o.key, a, b) for a, b in step))

        await asyncio.gather(*(obj(o) for o in needed.objects))

    t0 = time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - t0


def _batches(items: Sequence[Any], parts: int) -> list[Sequence[Any]]:
    step = -(-len(items) // parts)
    return [items[i:i + step] for i in range(0, len(items), step)]


def _jobs(needed: Needed, threads: int) -> int:
    """The reader's split of local work (`local_reads.local_jobs`): one job below `tuning.JOB_BYTES` decoded."""
    from xarray_zarrmax.tuning import JOB_BYTES

    decoded = needed.chunk_nbytes * len(needed.chunks)
    return 1 if threads <= 1 or decoded < JOB_BYTES else threads


def replay_local(root: Path, needed: Needed, pool: ThreadPoolExecutor, threads: int) -> float:
    """Seconds to make ``needed``'s reads of local files (open, ``pread`` each range, close), spread over the
    pool's threads as the reader spreads them."""

    def read(objects: Sequence[ObjectRequests]) -> None:
        for o in objects:
            fd = os.open(root / o.key, os.O_RDONLY)
            try:
                for step in o.steps:
                    for a, b in step:
                        os.pread(fd, b - a, a)
            finally:
                os.close(fd)

    def read_ranges(fd: int, ranges: Sequence[tuple[int, int]]) -> None:
        for a, b in ranges:
            os.pread(fd, b - a, a)

    jobs = _jobs(needed, threads)
    t0 = time.perf_counter()
    if jobs > 1 and len(needed.objects) == 1 and len(needed.objects[0].steps) == 2:
        # one shard: its index, then its ranges in parallel jobs, as `local_reads._read_opened_shard` reads them
        only = needed.objects[0]
        fd = os.open(root / only.key, os.O_RDONLY)
        try:
            read_ranges(fd, only.steps[0])
            list(pool.map(lambda batch: read_ranges(fd, batch), _batches(only.steps[1], jobs)))
        finally:
            os.close(fd)
    elif jobs <= 1 or len(needed.objects) == 1:
        read(needed.objects)
    else:
        list(pool.map(read, _batches(needed.objects, min(jobs, len(needed.objects)))))
    return time.perf_counter() - t0


def load_frames(root: Path, needed: Needed) -> list[bytes]:
    """The touched chunks' compressed bytes, read (not timed) for `decode_alone`."""
    frames = []
    fd, open_key = -1, None
    try:
        for key, a, b in needed.chunks:
            if key != open_key:
                if fd >= 0:
                    os.close(fd)
                fd, open_key = os.open(root / key, os.O_RDONLY), key
            frames.append(os.pread(fd, b - a, a))
    finally:
        if fd >= 0:
            os.close(fd)
    return frames


def decode_alone(frames: Sequence[bytes], needed: Needed, pool: ThreadPoolExecutor, threads: int) -> float:
    """Seconds for our decoder (`codecs.ChunkCodec`, zstd) to decode ``frames`` into a chunk-sized buffer per
    thread, on as many threads as the reader would use for them."""
    from xarray_zarrmax.codecs import ChunkCodec

    codec = ChunkCodec((needed.chunk_nbytes,), np.dtype("u1"), np.dtype("u1"), None, ("zstd",))

    def decode(batch: Sequence[bytes]) -> None:
        out = np.empty(needed.chunk_nbytes, dtype=np.uint8)
        for frame in batch:
            codec.decode_into(frame, out, "decode_alone")

    jobs = min(_jobs(needed, threads), len(frames))
    t0 = time.perf_counter()
    if jobs <= 1:
        decode(frames)
    else:
        list(pool.map(decode, _batches(frames, jobs)))
    return time.perf_counter() - t0
