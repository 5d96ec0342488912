"""Local files, read in the calling thread with no event loop: an unsharded chunk straight into its place in the
output (`read_local_whole`), a shard read in pieces of about `tuning.PIECE_BYTES`, each decoded as soon as it is
read (`read_local_shard`). Every read of an object comes from one descriptor, whose fstat is its version: kept
decoded chunks of that version are used without reading them, and a file changed while read is read again.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

import numpy as np

from xarray_zarrmax.codecs.sharding import EMPTY, max_object_size, parse_index, split_index
from xarray_zarrmax.config import get_config
from xarray_zarrmax.core.geometry import (
    ObjectRead,
    Piece,
)
from xarray_zarrmax.core.loop import run_batches
from xarray_zarrmax.errors import CorruptDataError, ObjectChanged
from xarray_zarrmax.read import chunk_cache, index_cache
from xarray_zarrmax.read import raw_zstd as zstd_raw
from xarray_zarrmax.read.plan import ArrayPlan
from xarray_zarrmax.read.work import (
    Work,
    cache_id,
    changed_too_often,
    location,
    place,
    place_all,
    short_range,
    split_batches,
)
from xarray_zarrmax.storage.abc import ByteSource, check_size
from xarray_zarrmax.storage.local import LocalSource, OpenedFile
from xarray_zarrmax.tuning import CHANGED_OBJECT_ATTEMPTS, JOB_BYTES, PIECE_BYTES, STREAM_BYTES


def read_local_whole(plan: ArrayPlan, source: ByteSource, out: np.ndarray, read: ObjectRead) -> bool:
    """An unsharded chunk that lands whole in one contiguous block of the output, read with no layer between:
    uncompressed or zstd of raw blocks, the file straight into the output (one memory pass); otherwise the file
    into a buffer, decoded into the output. False: the read does not qualify (a shard, a partial chunk, a
    strided target, a codec that cannot decode in place), and nothing was done.

    The general path (`_fetch_local`, then `place`) makes the same system calls and decode with a coroutine,
    a budget and work items around them: with the leaner store calls that came with this path, 22 ms less user
    CPU in a one-thread read of 672 chunks of 0.8 MB (78 -> 56 ms), Python that holds the GIL
    (docs/dev/performance-analysis.md)."""
    codec = plan.codec
    if plan.shard is not None or not codec.direct or not isinstance(source, LocalSource):
        return False
    coords, pieces = read
    piece = pieces[0] if len(pieces) == 1 else None
    if not isinstance(piece, Piece) or not piece.covers_chunk:
        return False
    target = out[(*piece.out_region, Ellipsis)]  # type: ignore[arg-type]  # Ellipsis: a view even when 0-d
    if target.shape != codec.chunk_shape or not target.flags.c_contiguous:
        return False
    key = plan.keys.key(coords)
    if not codec.bytes_codecs:
        try:
            found = source.read_into(key, target.reshape(-1).view(np.uint8))
        except CorruptDataError as err:
            raise CorruptDataError(f"array {plan.name!r}, {err}") from None
        if not found:
            target[...] = plan.fill_value
        return True
    _read_local_compressed(plan, source, key, target)
    return True


def _read_local_compressed(plan: ArrayPlan, source: LocalSource, key: str, target: np.ndarray) -> None:
    """A whole compressed chunk into ``target``: a zstd frame of raw blocks (incompressible data) straight from
    the file (`zstd_raw`: one memory pass), anything else read into a buffer and decoded from it. One open
    serves both; a file modified in place while read is read again (3 times at most)."""
    codec, flat = plan.codec, target.reshape(-1).view(np.uint8)
    max_size = max_object_size(None, codec.nbytes)
    for _ in range(CHANGED_OBJECT_ATTEMPTS):
        file = source.open_file(key)
        if file is None:
            target[...] = plan.fill_value
            return
        obj = cache_id(plan, source, key)
        try:
            if obj is not None:  # the chunk kept for this very file version: no read, no decode
                version, hits = chunk_cache.chunks.lookup(obj, [(0,) * len(target.shape)])
                if hits and version == file.version:
                    chunk_cache.chunks.count("hits")
                    target[...] = next(iter(hits.values()))
                    return
                if hits:
                    chunk_cache.chunks.invalidate(obj)
                chunk_cache.chunks.count("misses")
            check_size(source, key, file.size, max_size)
            if codec.bytes_codecs == ("zstd",) and zstd_raw.read_into(file, flat):
                file.check_unchanged()
                _keep_whole(obj, file, target)
                return
            data = file.read(0, file.size)
            file.check_unchanged()
        except ObjectChanged:
            continue
        finally:
            file.close()
        codec.decode_into(data, target, location(plan, key))
        _keep_whole(obj, file, target)
        return
    raise changed_too_often(plan, source, key)


def _keep_whole(obj: chunk_cache.ObjectId | None, file: OpenedFile, target: np.ndarray) -> None:
    """Keep an unsharded chunk read whole into ``target`` (the cache copies it: the output is the caller's)."""
    if obj is not None and file.cacheable:
        chunk_cache.chunks.keep(obj, file.version, (0,) * target.ndim, target, whole=True)


def local_pieces(present: list[tuple[Any, int, int]], gap: int) -> list[tuple[int, int, list[tuple[Any, int, int]]]]:
    """``(piece, start, stop)`` chunk ranges grouped into reads: ranges at most ``gap`` apart, up to
    PIECE_BYTES a read (`layout.coalesce` with a size limit)."""
    reads: list[tuple[int, int, list[tuple[Any, int, int]]]] = []
    for item in sorted(present, key=lambda item: item[1]):
        _, start, stop = item
        if reads and start - reads[-1][1] <= gap and max(stop, reads[-1][1]) - reads[-1][0] <= PIECE_BYTES:
            first, last, members = reads[-1]
            reads[-1] = (first, max(last, stop), [*members, item])
        else:
            reads.append((start, stop, [item]))
    return reads


def read_local_shard(plan: ArrayPlan, source: LocalSource, out: np.ndarray, read: ObjectRead, token: str,
                      parallel: bool) -> bool:
    """A local shard read in pieces of about PIECE_BYTES, each decoded into ``out`` as soon as it is read (on
    the decode pool when ``parallel``: one object, a dask task's). Again from scratch when the file changes
    while it is read, as `_fetch_object` does. False for a read of less than a few pieces' worth of chunks
    (nothing done): the general path reads those (an index, then the chunks' ranges), as it does remotely."""
    if plan.shard is None or len(read[1]) * plan.codec.nbytes < STREAM_BYTES:
        return False
    key = plan.keys.key(read[0])
    for attempt in range(CHANGED_OBJECT_ATTEMPTS):
        try:
            _read_local_shard_once(plan, source, out, key, read[1], token, parallel)
            return True
        except ObjectChanged:
            index_cache.forget(token, key)
            if attempt == CHANGED_OBJECT_ATTEMPTS - 1:
                raise changed_too_often(plan, source, key) from None
    raise AssertionError("unreachable")


def _read_local_shard_once(plan: ArrayPlan, source: LocalSource, out: np.ndarray, key: str, pieces: list[Any],
                           token: str, parallel: bool) -> None:
    file = source.open_file(key)
    if file is None:
        place_all(plan, out, [Work(None, p, location(plan, key, p.coords)) for p in pieces])
        return
    try:
        # No job may still read from the descriptor once it is closed (its number, reused by another open,
        # would read another file): `run_batches` returns only when its jobs are done, also when interrupted.
        _read_opened_shard(plan, file, out, key, pieces, token, parallel)
        file.check_unchanged()
    except CorruptDataError:
        file.check_unchanged()  # bytes of a file rewritten while read: read it again, not an error
        raise
    finally:
        file.close()


def _read_opened_shard(plan: ArrayPlan, file: OpenedFile, out: np.ndarray, key: str, pieces: list[Any],
                       token: str, parallel: bool) -> None:
    fmt = plan.shard
    assert fmt is not None
    check_size(file.source, key, file.size, max_object_size(fmt, plan.codec.nbytes))
    cached = index_cache.lookup(token, key)
    whole = None
    if cached is not None and cached.version == file.version:
        index = cached.index
    elif file.size <= PIECE_BYTES and len(pieces) >= get_config().full_shard_fraction * math.prod(fmt.chunks_per_shard):
        # a small shard, most of it wanted: one read, index and chunks together
        whole = file.read(0, file.size)
        index, _ = split_index(fmt, whole, location(plan, key))
        index_cache.remember(token, key, index, file.fetched(whole))
    else:  # from this descriptor: the index of the very file the chunks are read from
        start = max(file.size - fmt.index_nbytes, 0) if fmt.index_at_end else 0
        raw = file.read(start, start + fmt.index_nbytes)
        index = parse_index(fmt, raw, file.size, location(plan, key))
        index_cache.remember(token, key, index, file.fetched(raw))
    keep = None
    obj = cache_id(plan, file.source, key)
    if obj is not None:  # this descriptor's fstat is the version: kept chunks of it need no request
        pieces = _place_kept(plan, out, key, pieces, obj, file.version)
        keep = (obj, file.version) if file.cacheable else None
    present = []
    for p in pieces:
        offset, length = index[p.coords]
        if offset == EMPTY:
            place(plan, out, Work(None, p, location(plan, key, p.coords)))
        else:
            present.append((p, int(offset), int(offset + length)))
    if obj is not None:
        chunk_cache.chunks.count("misses", len(present))
    reads = local_pieces(present, get_config().coalesce_gap)

    def read_and_decode(batch: list[tuple[int, int, list[tuple[Any, int, int]]]]) -> None:
        for start, stop, members in batch:
            data = file.read(start, stop) if whole is None else whole[start:stop]
            if len(data) != stop - start:
                raise short_range(plan, key, start, stop, len(data))
            for p, a, b in members:
                place(plan, out, Work(data[a - start:b - start], p, location(plan, key, p.coords), keep=keep))

    parts = local_jobs(plan.codec.nbytes * len(present)) if parallel else 1
    if parts > 1 and len(reads) > 1:
        run_batches(read_and_decode, split_batches(reads, parts))  # returns once no batch reads the descriptor
    else:
        read_and_decode(reads)


def _place_kept(plan: ArrayPlan, out: np.ndarray, key: str, pieces: list[Any], obj: chunk_cache.ObjectId,
                version: Hashable) -> list[Any]:
    """Place the chunks of ``pieces`` kept for ``version`` of the object (a local file's, from its open
    descriptor), and return the pieces still to read; kept chunks of another version are dropped."""
    cache = chunk_cache.chunks
    kept_version, hits = cache.lookup(obj, (p.coords for p in pieces))
    if hits and kept_version != version:
        cache.invalidate(obj)
        hits = {}
    if hits:
        cache.count("hits", len(hits))
        for p in pieces:
            if p.coords in hits:
                place(plan, out, Work(None, p, location(plan, key, p.coords), cached=hits[p.coords]))
    return [p for p in pieces if p.coords not in hits]


def local_jobs(decoded: int) -> int:
    """Pool jobs for a local read that decodes ``decoded`` bytes: one (this thread, no pool) below JOB_BYTES,
    else about JOB_BYTES each and at least one per thread. A local read of small chunks is mostly Python per
    object and per chunk, which threads only fight over (the GIL): a map through 63 shards of 15 kB chunks
    (1.9 MB decoded) took 45 ms on two threads, one job per shard, and 33 ms in one thread."""
    threads = get_config().threads
    if threads <= 1 or decoded < JOB_BYTES:
        return 1
    return max(threads, -(-decoded // JOB_BYTES))

