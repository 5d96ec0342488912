"""Read a selection of an array: fetch its stored objects (whole, or index plus coalesced ranges) and decode
every chunk it needs into the output.

A task reading a whole shard makes one GET and parses the index inside the bytes it fetched; a partial read
fetches the index (cached per process, keyed by the object's version) and coalesces the chunk ranges it
needs, conditional on that version. Remote sources run on the process's one I/O loop under one request
budget; local files are read in the calling thread with no event loop.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xarray_zarrmax.codecs.sharding import EMPTY, max_object_size, parse_index, split_index
from xarray_zarrmax.config import get_config
from xarray_zarrmax.core import memory as _memory
from xarray_zarrmax.core.budget import ByteBudget, Holding
from xarray_zarrmax.core.bytes import Segments, view
from xarray_zarrmax.core.geometry import (
    ObjectRead,
    Piece,
    PointPiece,
    Selection,
    coalesce,
    plan_points,
    plan_reads,
    selection_shape,
)
from xarray_zarrmax.core.loop import decode_pool, gather_or_cancel, run_batches, run_sync
from xarray_zarrmax.errors import CorruptDataError, ObjectChanged, StoreAccessError
from xarray_zarrmax.read import index_cache
from xarray_zarrmax.read import raw_zstd as zstd_raw
from xarray_zarrmax.read.plan import ArrayPlan
from xarray_zarrmax.storage.abc import ByteSource, check_size
from xarray_zarrmax.storage.local import LocalSource, OpenedFile
from xarray_zarrmax.tuning import CHANGED_OBJECT_ATTEMPTS, JOB_BYTES, PIECE_BYTES, STREAM_BYTES


@dataclass(slots=True)
class Work:
    """One inner chunk to place: its bytes (None = missing, use the fill value) and where it goes."""

    raw: Any
    piece: Any  # a `Piece`; a `PointPiece` in pointwise reads (which the device path never makes)
    where: str


def _where(plan: ArrayPlan, key: str, coords: tuple[int, ...] | None = None) -> str:
    chunk = f", chunk {coords}" if coords is not None else ""
    return f"array {plan.name!r}, key {key!r}{chunk}"


def _changed_too_often(plan: ArrayPlan, source: ByteSource, key: str) -> StoreAccessError:
    return StoreAccessError(f"{_where(plan, key)} on {source.label} changed {CHANGED_OBJECT_ATTEMPTS} times "
                            "while it was being read: a writer is rewriting it; read again once it is done")


async def _fetch_object(plan: ArrayPlan, source: ByteSource, read: ObjectRead, token: str,
                        hold: Holding | None = None) -> list[Work]:
    """Fetch what a read needs of one stored object (a shard, or an unsharded chunk), again from scratch if
    the object changes while it is read. Each fetch first takes its bytes from ``hold``'s budget; the caller
    gives them back once the returned work is decoded."""
    hold = Holding(None) if hold is None else hold
    key = plan.keys.key(read[0])
    for attempt in range(CHANGED_OBJECT_ATTEMPTS):
        try:
            return await _fetch_object_once(plan, source, key, read[1], token, hold)
        except ObjectChanged:
            hold.release_all()
            index_cache.forget(token, key)
            if attempt == CHANGED_OBJECT_ATTEMPTS - 1:
                raise _changed_too_often(plan, source, key) from None
    raise AssertionError("unreachable")


async def _fetch_object_once(
    plan: ArrayPlan, source: ByteSource, key: str, pieces: list[Any], token: str, hold: Holding
) -> list[Work]:
    limit = max_object_size(plan.shard, plan.codec.nbytes)
    if plan.shard is None:
        await hold.take(plan.codec.nbytes)  # whole objects count at their decoded size: the compressed is unknown
        got = await source.get_large(key, limit)
        raw = None if got is None else got.data
        if isinstance(raw, Segments):
            raw = raw.view(0, len(raw))  # a chunk decodes from one contiguous buffer
        return [Work(raw, p, _where(plan, key)) for p in pieces]

    fmt = plan.shard
    total = math.prod(fmt.chunks_per_shard)
    cached = index_cache.lookup(token, key)
    if cached is None and len(pieces) >= get_config().full_shard_fraction * total:
        await hold.take(plan.codec.nbytes * total)  # its chunks at decoded size, as an unsharded chunk
        shard = await source.get_large(key, limit)
        if shard is None:
            return [Work(None, p, _where(plan, key, p.coords)) for p in pieces]
        index, _ = split_index(fmt, shard.data, _where(plan, key))  # always the index inside these bytes
        index_cache.remember(token, key, index, shard)
        return [_slice_chunk(plan, key, index, p, shard.data) for p in pieces]

    if cached is not None and all(cached.index[p.coords][0] == EMPTY for p in pieces):
        cached = None  # no range would be fetched, so nothing would prove the index current: read it again
    if cached is not None:
        index, version = cached.index, cached.version
    else:
        await hold.take(fmt.index_nbytes)
        got = await (source.get_suffix if fmt.index_at_end else source.get_prefix)(key, fmt.index_nbytes)
        hold.give_back(fmt.index_nbytes)  # parsed, the index is no longer a fetch in flight
        if got is None:
            return [Work(None, p, _where(plan, key, p.coords)) for p in pieces]
        index = parse_index(fmt, got.data, got.size, _where(plan, key))
        index_cache.remember(token, key, index, got)
        version = got.version  # the chunk ranges must come from the object this index describes

    wanted = [(p, index[p.coords]) for p in pieces]
    present = [(p, int(e[0]), int(e[0] + e[1])) for p, e in wanted if e[0] != EMPTY]
    work = [Work(None, p, _where(plan, key, p.coords)) for p, e in wanted if e[0] == EMPTY]
    if not present:
        return work
    merged = coalesce([(a, b) for _, a, b in present], get_config().coalesce_gap)
    # The exact bytes, known now from the index; ahead of objects not yet started, which hold nothing.
    await hold.take(sum(b - a for a, b, _ in merged), finishing=cached is None)
    blobs = await source.get_ranges(key, [(a, b) for a, b, _ in merged], version)
    if blobs is None:
        raise ObjectChanged(key)  # deleted after its index was read: read it afresh (fill values)
    for (start, stop, members), blob in zip(merged, blobs, strict=True):
        data = memoryview(blob).cast("B")
        if len(data) != stop - start:
            raise _short_range(plan, key, start, stop, len(data))
        for i in members:
            p, a, b = present[i]
            work.append(Work(data[a - start:b - start], p, _where(plan, key, p.coords)))
    return work


def _short_range(plan: ArrayPlan, key: str, start: int, stop: int, got: int) -> CorruptDataError:
    return CorruptDataError(f"{_where(plan, key)}: asked for bytes [{start}, {stop}) of the shard, got {got} bytes: "
                            "the object is truncated or its index points outside it")


def _slice_chunk(plan: ArrayPlan, key: str, index: np.ndarray, piece: Piece | PointPiece, shard: Any) -> Work:
    offset, length = index[piece.coords]
    if offset == EMPTY:
        return Work(None, piece, _where(plan, key, piece.coords))
    return Work(view(shard, int(offset), int(offset + length)), piece, _where(plan, key, piece.coords))


def _place(plan: ArrayPlan, out: np.ndarray, work: Work) -> None:
    piece = work.piece
    if isinstance(piece, PointPiece):  # ``out`` is the flat result of a pointwise read
        if work.raw is None:
            out[piece.positions] = plan.fill_value
        else:
            out[piece.positions] = plan.codec.decode(work.raw, work.where)[tuple(piece.local.T)]
        return
    target = out[(*piece.out_region, Ellipsis)]  # type: ignore[arg-type]  # Ellipsis: a view even when 0-d
    if work.raw is None:
        target[...] = plan.fill_value
        return
    codec = plan.codec
    if (piece.covers_chunk and codec.direct and target.flags.c_contiguous
            and target.shape == codec.chunk_shape):
        codec.decode_into(work.raw, target, work.where)
        return
    chunk = codec.decode(work.raw, work.where)
    target[...] = chunk[piece.chunk_index()]


def _place_all(plan: ArrayPlan, out: np.ndarray, work: Sequence[Work]) -> None:
    for w in work:
        _place(plan, out, w)


def _batches[T](work: list[T], parts: int) -> list[list[T]]:
    """``work`` in at most ``parts`` batches of (nearly) equal length, in order."""
    parts = max(1, min(parts, len(work)))
    size, extra = divmod(len(work), parts)
    batches, start = [], 0
    for i in range(parts):
        stop = start + size + (1 if i < extra else 0)
        batches.append(work[start:stop])
        start = stop
    return batches


def _drive(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (local files) without an event loop."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("a local read suspended; it must not need an event loop")


async def _read_remote(
    plan: ArrayPlan, source: ByteSource, out: np.ndarray, reads: list[ObjectRead], token: str, *,
    decode_on_pool: bool,
) -> None:
    """Fetch every stored object of the read and decode each as soon as it arrives.

    Objects between "requested" and "decoded" are at most ``config.concurrency``, and the bytes they fetch
    at most ``config.inflight_bytes`` (or one fetch alone, when it is more), so a read holds little beyond its
    output. Each fetch is counted as it is sent: a whole object at its decoded size, a shard index at its
    size, a shard's chunk ranges at their exact size once the index is known. (Counting a ranged read's worst
    case before its index arrived held a map through 104 MB time-series shards to 8 shards at a time: 6 round
    trips where 2 do.)
    """
    loop = asyncio.get_running_loop()
    config = get_config()
    slots = asyncio.Semaphore(max(1, config.concurrency))
    budget = ByteBudget(config.inflight_bytes)
    pool = decode_pool() if decode_on_pool else None

    async def one(read: ObjectRead) -> None:
        async with slots:
            hold = Holding(budget)
            try:
                work = await _fetch_object(plan, source, read, token, hold)
                if pool is None:
                    _place_all(plan, out, work)
                    return
                # Small chunks go to the pool in batches, not one job each: every job costs a hand-off and a
                # wake-up of this loop (profiled: as much CPU as the zstd decode itself for 8 chunks of 24 KiB
                # a shard). Jobs of about JOB_BYTES decoded keep large chunks one per job, and at least
                # `threads` jobs an object keep one object's decode parallel.
                jobs = max(config.threads, -(-len(work) * plan.codec.nbytes // JOB_BYTES))
                batches = _batches(work, jobs)
                if len(batches) == 1:  # an unsharded chunk: no gather, one future less per object
                    await loop.run_in_executor(pool, _place_all, plan, out, batches[0])
                else:
                    await asyncio.gather(*(loop.run_in_executor(pool, _place_all, plan, out, b) for b in batches))
            finally:
                hold.release_all()  # decoded (or failed): its bytes are free

    await gather_or_cancel(*(one(r) for r in reads))


def _fetch_local(plan: ArrayPlan, source: ByteSource, reads: list[ObjectRead], token: str) -> list[Work]:
    """Fetch local objects in this thread (their reads never suspend, so no event loop is involved)."""
    return [w for r in reads for w in _drive(_fetch_object(plan, source, r, token))]


def _read_local_whole(plan: ArrayPlan, source: ByteSource, out: np.ndarray, read: ObjectRead) -> bool:
    """An unsharded chunk that lands whole in one contiguous block of the output, read with no layer between:
    uncompressed or zstd of raw blocks, the file straight into the output (one memory pass); otherwise the file
    into a buffer, decoded into the output. False: the read does not qualify (a shard, a partial chunk, a
    strided target, a codec that cannot decode in place), and nothing was done.

    The general path (`_fetch_local`, then `_place`) makes the same system calls and decode with a coroutine,
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
        try:
            check_size(source, key, file.size, max_size)
            if codec.bytes_codecs == ("zstd",) and zstd_raw.read_into(file, flat):
                file.check_unchanged()
                return
            data = file.read(0, file.size)
            file.check_unchanged()
        except ObjectChanged:
            continue
        finally:
            file.close()
        codec.decode_into(data, target, _where(plan, key))
        return
    raise _changed_too_often(plan, source, key)


def _pieces(present: list[tuple[Any, int, int]], gap: int) -> list[tuple[int, int, list[tuple[Any, int, int]]]]:
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


def _read_local_shard(plan: ArrayPlan, source: LocalSource, out: np.ndarray, read: ObjectRead, token: str,
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
                raise _changed_too_often(plan, source, key) from None
    raise AssertionError("unreachable")


def _read_local_shard_once(plan: ArrayPlan, source: LocalSource, out: np.ndarray, key: str, pieces: list[Any],
                           token: str, parallel: bool) -> None:
    file = source.open_file(key)
    if file is None:
        _place_all(plan, out, [Work(None, p, _where(plan, key, p.coords)) for p in pieces])
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
        index, _ = split_index(fmt, whole, _where(plan, key))
        index_cache.remember(token, key, index, file.fetched(whole))
    else:  # from this descriptor: the index of the very file the chunks are read from
        start = max(file.size - fmt.index_nbytes, 0) if fmt.index_at_end else 0
        raw = file.read(start, start + fmt.index_nbytes)
        index = parse_index(fmt, raw, file.size, _where(plan, key))
        index_cache.remember(token, key, index, file.fetched(raw))
    present = []
    for p in pieces:
        offset, length = index[p.coords]
        if offset == EMPTY:
            _place(plan, out, Work(None, p, _where(plan, key, p.coords)))
        else:
            present.append((p, int(offset), int(offset + length)))
    reads = _pieces(present, get_config().coalesce_gap)

    def read_and_decode(batch: list[tuple[int, int, list[tuple[Any, int, int]]]]) -> None:
        for start, stop, members in batch:
            data = file.read(start, stop) if whole is None else whole[start:stop]
            if len(data) != stop - start:
                raise _short_range(plan, key, start, stop, len(data))
            for p, a, b in members:
                _place(plan, out, Work(data[a - start:b - start], p, _where(plan, key, p.coords)))

    parts = _local_jobs(plan.codec.nbytes * len(present)) if parallel else 1
    if parts > 1 and len(reads) > 1:
        run_batches(read_and_decode, _batches(reads, parts))  # returns once no batch reads the descriptor
    else:
        read_and_decode(reads)


def _local_jobs(decoded: int) -> int:
    """Pool jobs for a local read that decodes ``decoded`` bytes: one (this thread, no pool) below JOB_BYTES,
    else about JOB_BYTES each and at least one per thread. A local read of small chunks is mostly Python per
    object and per chunk, which threads only fight over (the GIL): a map through 63 shards of 15 kB chunks
    (1.9 MB decoded) took 45 ms on two threads, one job per shard, and 33 ms in one thread."""
    threads = get_config().threads
    if threads <= 1 or decoded < JOB_BYTES:
        return 1
    return max(threads, -(-decoded // JOB_BYTES))


def _read_into(plan: ArrayPlan, source: ByteSource, out: np.ndarray, reads: list[ObjectRead], token: str) -> None:
    parallel = get_config().threads > 1
    if not source.is_local:
        run_sync(_read_remote(plan, source, out, reads, token, decode_on_pool=parallel))
    elif len(reads) > 1:
        # Many objects (a read without dask, or across shards): read and decode them in jobs of about
        # JOB_BYTES (`_local_jobs`): one job per 0.8 MB chunk spent more on hand-offs and wake-ups than on
        # reading. Each object is decoded right after it is read, also on one thread: reading them all first
        # held every compressed object at once (512 MiB of fresh buffers: 3x slower with threads=1).
        def read_some(batch: list[ObjectRead]) -> None:
            for read in batch:
                if isinstance(source, LocalSource) and _read_local_shard(plan, source, out, read, token, False):
                    continue
                if not _read_local_whole(plan, source, out, read):
                    _place_all(plan, out, _fetch_local(plan, source, [read], token))

        # Sized by the chunks the read decodes, not whole objects: a map through 72 shards is 144 chunks.
        jobs = _local_jobs(plan.codec.nbytes * sum(len(pieces) for _, pieces in reads))
        if jobs == 1:
            read_some(reads)
        else:
            run_batches(read_some, _batches(reads, jobs))
    elif len(reads) == 1 and isinstance(source, LocalSource) and _read_local_shard(plan, source, out, reads[0],
                                                                                   token, True):
        pass
    elif len(reads) == 1 and _read_local_whole(plan, source, out, reads[0]):
        pass
    else:
        # One object (the dask task's shard): read it here, decode its chunks in parallel, in jobs of about
        # JOB_BYTES as _read_remote does (one job per chunk: about 67 us of hand-off each for 1024 chunks).
        work = _fetch_local(plan, source, reads, token)
        jobs = _local_jobs(len(work) * plan.codec.nbytes)
        if len(work) > 1 and jobs > 1:
            run_batches(lambda batch: _place_all(plan, out, batch), _batches(work, jobs))
        else:
            for w in work:
                _place(plan, out, w)


def read_selection(plan: ArrayPlan, source: ByteSource, axes: Selection, token: str) -> np.ndarray:
    """Read the selected elements (the outer product of ``axes``) into a new array of ``selection_shape``:
    only the chunks holding selected elements are fetched, and nothing beyond the result is allocated."""
    out = _memory.empty(selection_shape(axes), plan.dtype)
    if out.size:
        _read_into(plan, source, out, plan_reads(axes, plan.shape, plan.outer_chunks, plan.inner_chunks), token)
    return out


async def read_selection_async(plan: ArrayPlan, source: ByteSource, axes: Selection, token: str, *,
                               decode_on_pool: bool = False) -> np.ndarray:
    """`read_selection` for callers on the I/O loop: small reads decoded on the loop (coordinates at open), or
    large ones decoded on the decode pool (``load_async``), every object's requests in flight together."""
    out = _memory.empty(selection_shape(axes), plan.dtype)
    if out.size:
        reads = plan_reads(axes, plan.shape, plan.outer_chunks, plan.inner_chunks)
        await _read_remote(plan, source, out, reads, token, decode_on_pool=decode_on_pool)
    return out


def read_points(plan: ArrayPlan, source: ByteSource, points: np.ndarray, token: str) -> np.ndarray:
    """The elements at ``points`` (``(n, ndim)``, in bounds) as a flat array: each chunk holding any of them
    is read once; memory is the result plus the chunks being decoded."""
    out = _memory.empty((points.shape[0],), plan.dtype)
    if out.size:
        _read_into(plan, source, out, plan_points(points, plan.outer_chunks, plan.inner_chunks), token)
    return out


def fetch_work(plan: ArrayPlan, source: ByteSource, axes: Selection, token: str) -> list[Work]:
    """Fetch the compressed bytes of every chunk the selection needs, undecoded (for device pipelines)."""
    reads = plan_reads(axes, plan.shape, plan.outer_chunks, plan.inner_chunks)
    if source.is_local:
        return _fetch_local(plan, source, reads, token)

    async def gather() -> list[Work]:
        groups = await gather_or_cancel(*(_fetch_object(plan, source, r, token) for r in reads))
        return [w for g in groups for w in g]

    return run_sync(gather())
