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
from collections.abc import Coroutine, Hashable
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
from xarray_zarrmax.errors import ObjectChanged
from xarray_zarrmax.read import chunk_cache, index_cache
from xarray_zarrmax.read.local_reads import local_jobs, read_local_shard, read_local_whole
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
from xarray_zarrmax.storage.abc import ByteSource
from xarray_zarrmax.storage.local import LocalSource
from xarray_zarrmax.tuning import CHANGED_OBJECT_ATTEMPTS, JOB_BYTES


async def _fetch_object(plan: ArrayPlan, source: ByteSource, read: ObjectRead, token: str,
                        hold: Holding | None = None, *, use_cache: bool = True) -> list[Work]:
    """Fetch what a read needs of one stored object (a shard, or an unsharded chunk), again from scratch if
    the object changes while it is read. Each fetch first takes its bytes from ``hold``'s budget; the caller
    gives them back once the returned work is decoded. With the decoded-chunk cache on (and ``use_cache``),
    chunks kept from an earlier read of this object version come back decoded (`_fetch_cached`)."""
    hold = Holding(None) if hold is None else hold
    key = plan.keys.key(read[0])
    obj = cache_id(plan, source, key) if use_cache else None
    for attempt in range(CHANGED_OBJECT_ATTEMPTS):
        try:
            if obj is not None:
                return await _fetch_cached(plan, source, key, read[1], token, hold, obj)
            return (await _fetch_object_once(plan, source, key, read[1], token, hold))[0]
        except ObjectChanged:
            hold.release_all()
            index_cache.forget(token, key)
            if attempt == CHANGED_OBJECT_ATTEMPTS - 1:
                raise changed_too_often(plan, source, key) from None
    raise AssertionError("unreachable")


async def _fetch_cached(plan: ArrayPlan, source: ByteSource, key: str, pieces: list[Any], token: str,
                        hold: Holding, obj: chunk_cache.ObjectId) -> list[Work]:
    """`_fetch_object_once` with the kept chunks of ``obj`` used where their version is proven to hold: by the
    version the fetch of the other chunks came from, or, when none is missing, by one `revalidate`. A kept
    version that no longer holds drops the object's entries, and every chunk is fetched afresh."""
    cache = chunk_cache.chunks
    version, hits = cache.lookup(obj, (p.coords for p in pieces))
    missing = [p for p in pieces if p.coords not in hits]
    if hits and not missing:
        cache.count("revalidations")
        if await source.revalidate(key, version):
            cache.count("hits", len(pieces))
            return [Work(None, p, location(plan, key, p.coords), cached=hits[p.coords]) for p in pieces]
        cache.invalidate(obj)
        missing, hits = pieces, {}
    work, proof = await _fetch_object_once(plan, source, key, missing, token, hold)
    if hits and (proof is None or proof != version):  # the object changed since its chunks were kept
        cache.invalidate(obj)
        work, proof = await _fetch_object_once(plan, source, key, pieces, token, hold)
        hits = {}
    cache.count("misses", sum(w.raw is not None for w in work))  # chunks to decode (missing ones: fill values)
    if proof is not None:
        for w in work:
            if w.raw is not None:
                w.keep = (obj, proof)
    if hits:
        cache.count("hits", len(hits))
        work += [Work(None, p, location(plan, key, p.coords), cached=hits[p.coords])
                 for p in pieces if p.coords in hits]
    return work


def _proof(fetched: Any) -> Hashable | None:
    """The version a `Fetched` proves its bytes came from, where it may key a cache; else None."""
    return fetched.version if fetched is not None and fetched.cacheable else None


async def _fetch_object_once(
    plan: ArrayPlan, source: ByteSource, key: str, pieces: list[Any], token: str, hold: Holding
) -> tuple[list[Work], Hashable | None]:
    """The work for ``pieces`` of one object, and the version its bytes are proven to come from (None where the
    source cannot say, or nothing was fetched)."""
    limit = max_object_size(plan.shard, plan.codec.nbytes)
    if plan.shard is None:
        await hold.take(plan.codec.nbytes)  # whole objects count at their decoded size: the compressed is unknown
        got = await source.get_large(key, limit)
        raw = None if got is None else got.data
        if isinstance(raw, Segments):
            raw = raw.view(0, len(raw))  # a chunk decodes from one contiguous buffer
        return [Work(raw, p, location(plan, key)) for p in pieces], _proof(got)

    fmt = plan.shard
    total = math.prod(fmt.chunks_per_shard)
    cached = index_cache.lookup(token, key)
    if cached is None and len(pieces) >= get_config().full_shard_fraction * total:
        await hold.take(plan.codec.nbytes * total)  # its chunks at decoded size, as an unsharded chunk
        shard = await source.get_large(key, limit)
        if shard is None:
            return [Work(None, p, location(plan, key, p.coords)) for p in pieces], None
        index, _ = split_index(fmt, shard.data, location(plan, key))  # always the index inside these bytes
        index_cache.remember(token, key, index, shard)
        return [_slice_chunk(plan, key, index, p, shard.data) for p in pieces], _proof(shard)

    if cached is not None and all(cached.index[p.coords][0] == EMPTY for p in pieces):
        cached = None  # no range would be fetched, so nothing would prove the index current: read it again
    if cached is not None:
        index, version, proof = cached.index, cached.version, cached.version  # only cacheable ones are kept
    else:
        await hold.take(fmt.index_nbytes)
        got = await (source.get_suffix if fmt.index_at_end else source.get_prefix)(key, fmt.index_nbytes)
        hold.give_back(fmt.index_nbytes)  # parsed, the index is no longer a fetch in flight
        if got is None:
            return [Work(None, p, location(plan, key, p.coords)) for p in pieces], None
        index = parse_index(fmt, got.data, got.size, location(plan, key))
        index_cache.remember(token, key, index, got)
        version, proof = got.version, _proof(got)  # the chunk ranges must come from the object this index describes

    wanted = [(p, index[p.coords]) for p in pieces]
    present = [(p, int(e[0]), int(e[0] + e[1])) for p, e in wanted if e[0] != EMPTY]
    work = [Work(None, p, location(plan, key, p.coords)) for p, e in wanted if e[0] == EMPTY]
    if not present:
        # a cached index proves nothing without a range fetched against it (see above: never all-empty)
        return work, proof if cached is None else None
    merged = coalesce([(a, b) for _, a, b in present], get_config().coalesce_gap)
    # The exact bytes, known now from the index; ahead of objects not yet started, which hold nothing.
    await hold.take(sum(b - a for a, b, _ in merged), finishing=cached is None)
    blobs = await source.get_ranges(key, [(a, b) for a, b, _ in merged], version)
    if blobs is None:
        raise ObjectChanged(key)  # deleted after its index was read: read it afresh (fill values)
    for (start, stop, members), blob in zip(merged, blobs, strict=True):
        data = memoryview(blob).cast("B")
        if len(data) != stop - start:
            raise short_range(plan, key, start, stop, len(data))
        for i in members:
            p, a, b = present[i]
            work.append(Work(data[a - start:b - start], p, location(plan, key, p.coords)))
    return work, proof


def _slice_chunk(plan: ArrayPlan, key: str, index: np.ndarray, piece: Piece | PointPiece, shard: Any) -> Work:
    offset, length = index[piece.coords]
    if offset == EMPTY:
        return Work(None, piece, location(plan, key, piece.coords))
    return Work(view(shard, int(offset), int(offset + length)), piece, location(plan, key, piece.coords))


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
                    place_all(plan, out, work)
                    return
                # Small chunks go to the pool in batches, not one job each: every job costs a hand-off and a
                # wake-up of this loop (profiled: as much CPU as the zstd decode itself for 8 chunks of 24 KiB
                # a shard). Jobs of about JOB_BYTES decoded keep large chunks one per job, and at least
                # `threads` jobs an object keep one object's decode parallel.
                jobs = max(config.threads, -(-len(work) * plan.codec.nbytes // JOB_BYTES))
                batches = split_batches(work, jobs)
                if len(batches) == 1:  # an unsharded chunk: no gather, one future less per object
                    await loop.run_in_executor(pool, place_all, plan, out, batches[0])
                else:
                    await asyncio.gather(*(loop.run_in_executor(pool, place_all, plan, out, b) for b in batches))
            finally:
                hold.release_all()  # decoded (or failed): its bytes are free

    await gather_or_cancel(*(one(r) for r in reads))


def _fetch_local(plan: ArrayPlan, source: ByteSource, reads: list[ObjectRead], token: str, *,
                 use_cache: bool = True) -> list[Work]:
    """Fetch local objects in this thread (their reads never suspend, so no event loop is involved)."""
    return [w for r in reads for w in _drive(_fetch_object(plan, source, r, token, use_cache=use_cache))]


def _read_into(plan: ArrayPlan, source: ByteSource, out: np.ndarray, reads: list[ObjectRead], token: str) -> None:
    parallel = get_config().threads > 1
    if not source.is_local:
        run_sync(_read_remote(plan, source, out, reads, token, decode_on_pool=parallel))
    elif len(reads) > 1:
        # Many objects (a read without dask, or across shards): read and decode them in jobs of about
        # JOB_BYTES (`local_jobs`): one job per 0.8 MB chunk spent more on hand-offs and wake-ups than on
        # reading. Each object is decoded right after it is read, also on one thread: reading them all first
        # held every compressed object at once (512 MiB of fresh buffers: 3x slower with threads=1).
        def read_some(batch: list[ObjectRead]) -> None:
            for read in batch:
                if isinstance(source, LocalSource) and read_local_shard(plan, source, out, read, token, False):
                    continue
                if not read_local_whole(plan, source, out, read):
                    place_all(plan, out, _fetch_local(plan, source, [read], token))

        # Sized by the chunks the read decodes, not whole objects: a map through 72 shards is 144 chunks.
        jobs = local_jobs(plan.codec.nbytes * sum(len(pieces) for _, pieces in reads))
        if jobs == 1:
            read_some(reads)
        else:
            run_batches(read_some, split_batches(reads, jobs))
    elif len(reads) == 1 and isinstance(source, LocalSource) and read_local_shard(plan, source, out, reads[0],
                                                                                   token, True):
        pass
    elif len(reads) == 1 and read_local_whole(plan, source, out, reads[0]):
        pass
    else:
        # One object (the dask task's shard): read it here, decode its chunks in parallel, in jobs of about
        # JOB_BYTES as _read_remote does (one job per chunk: about 67 us of hand-off each for 1024 chunks).
        work = _fetch_local(plan, source, reads, token)
        jobs = local_jobs(len(work) * plan.codec.nbytes)
        if len(work) > 1 and jobs > 1:
            run_batches(lambda batch: place_all(plan, out, batch), split_batches(work, jobs))
        else:
            for w in work:
                place(plan, out, w)


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
    """Fetch the compressed bytes of every chunk the selection needs, undecoded (for device pipelines, which
    decode on the device: the decoded-chunk cache, host memory, is neither used nor filled)."""
    reads = plan_reads(axes, plan.shape, plan.outer_chunks, plan.inner_chunks)
    if source.is_local:
        return _fetch_local(plan, source, reads, token, use_cache=False)

    async def gather() -> list[Work]:
        groups = await gather_or_cancel(*(_fetch_object(plan, source, r, token, use_cache=False) for r in reads))
        return [w for g in groups for w in g]

    return run_sync(gather())

