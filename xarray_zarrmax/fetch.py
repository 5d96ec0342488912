"""Read one box of an array: fetch its shards (whole, or index plus coalesced ranges), decode into the output.

A task reading a whole shard makes one GET and parses the index locally; a partial read fetches the index
once (cached per process) and coalesces the chunk ranges it needs. Remote sources run on the process's
one I/O loop under one request budget; local files are read in the calling thread with no event loop.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._loop import decode_pool, gather_or_cancel, run_sync
from .config import get_config
from .errors import CorruptDataError
from .layout import Box, Piece, Touched, box_shape, coalesce, intersect, iter_pieces, shard_box
from .plan import ArrayPlan
from .shard import EMPTY, max_object_size, parse_index, split_index
from .stores import ByteSource, Segments, view

_INDEX_CACHE_BYTES = 64 * 2**20  # about 10,000 indexes of 400-chunk shards
_index_cache: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
_index_cache_bytes = 0
_index_lock = threading.Lock()


def _after_fork() -> None:
    global _index_lock
    _index_lock = threading.Lock()  # a lock held by a thread that did not survive fork would never open


os.register_at_fork(after_in_child=_after_fork)


def _cached_index(token: str, key: str) -> np.ndarray | None:
    with _index_lock:
        index = _index_cache.get((token, key))
        if index is not None:
            _index_cache.move_to_end((token, key))
        return index


def _cache_index(token: str, key: str, index: np.ndarray) -> None:
    global _index_cache_bytes
    with _index_lock:
        previous = _index_cache.pop((token, key), None)
        if previous is not None:
            _index_cache_bytes -= previous.nbytes
        _index_cache[(token, key)] = index
        _index_cache_bytes += index.nbytes
        while _index_cache_bytes > _INDEX_CACHE_BYTES and len(_index_cache) > 1:
            _, evicted = _index_cache.popitem(last=False)
            _index_cache_bytes -= evicted.nbytes


@dataclass(slots=True)
class Work:
    """One inner chunk to place: its bytes (None = missing, use the fill value) and where it goes."""

    raw: Any
    piece: Piece
    where: str


def _where(plan: ArrayPlan, key: str, coords: tuple[int, ...] | None = None) -> str:
    chunk = f", chunk {coords}" if coords is not None else ""
    return f"array {plan.name!r}, key {key!r}{chunk}"


async def _fetch_outer(
    plan: ArrayPlan, source: ByteSource, outer: Piece, box: Box, touched: Touched, token: str
) -> list[Work]:
    """Fetch what ``box`` needs of one stored object (a shard, or an unsharded chunk)."""
    key = plan.keys.key(outer.coords)
    limit = max_object_size(plan.shard, plan.codec.nbytes)
    if plan.shard is None:
        raw = await source.get_large(key, limit)
        if isinstance(raw, Segments):
            raw = raw.view(0, len(raw))  # a chunk decodes from one contiguous buffer
        return [Work(raw, outer, _where(plan, key))]

    fmt = plan.shard
    sbox = shard_box(outer.coords, plan.outer_chunks, plan.shape)
    origin = tuple(lo for lo, _ in sbox)
    pieces = list(iter_pieces(intersect(box, sbox), plan.inner_chunks, plan.shape, origin, touched))
    # Output regions from iter_pieces are relative to the shard-clipped box; shift them into ``box``.
    shift = tuple(max(lo, slo) - blo for (lo, _), (slo, _), (blo, _) in zip(box, sbox, box, strict=True))
    pieces = [
        Piece(p.coords, p.chunk_region, tuple(slice(s.start + d, s.stop + d) for s, d in zip(p.out_region, shift,
              strict=True)), p.covers_chunk)
        for p in pieces
    ]
    total = int(np.prod(fmt.chunks_per_shard))
    index = _cached_index(token, key)
    if index is None and len(pieces) >= get_config().full_shard_fraction * total:
        shard = await source.get_large(key, limit)
        if shard is None:
            return [Work(None, p, _where(plan, key, p.coords)) for p in pieces]
        index, _ = split_index(fmt, shard, _where(plan, key))
        _cache_index(token, key, index)
        return [_slice_chunk(plan, key, index, p, shard) for p in pieces]

    if index is None:
        if fmt.index_at_end:
            got = await source.get_suffix(key, fmt.index_nbytes)
            if got is None:
                return [Work(None, p, _where(plan, key, p.coords)) for p in pieces]
            raw_index, size = got
        else:
            ranges = await source.get_ranges(key, [(0, fmt.index_nbytes)])
            if ranges is None:
                return [Work(None, p, _where(plan, key, p.coords)) for p in pieces]
            raw_index, size = ranges[0], None
        index = parse_index(fmt, raw_index, size, _where(plan, key))
        _cache_index(token, key, index)

    wanted = [(p, index[p.coords]) for p in pieces]
    present = [(p, int(e[0]), int(e[0] + e[1])) for p, e in wanted if e[0] != EMPTY]
    work = [Work(None, p, _where(plan, key, p.coords)) for p, e in wanted if e[0] == EMPTY]
    if not present:
        return work
    merged = coalesce([(a, b) for _, a, b in present], get_config().coalesce_gap)
    blobs = await source.get_ranges(key, [(a, b) for a, b, _ in merged])
    if blobs is None:
        raise CorruptDataError(f"{_where(plan, key)}: the shard object disappeared while it was being read")
    for (start, stop, members), blob in zip(merged, blobs, strict=True):
        data = memoryview(blob).cast("B")
        if len(data) != stop - start:
            raise CorruptDataError(
                f"{_where(plan, key)}: asked for bytes [{start}, {stop}) of the shard, got {len(data)} bytes: "
                "the object is truncated or its index points outside it"
            )
        for i in members:
            p, a, b = present[i]
            work.append(Work(data[a - start:b - start], p, _where(plan, key, p.coords)))
    return work


def _slice_chunk(plan: ArrayPlan, key: str, index: np.ndarray, piece: Piece, shard: Any) -> Work:
    offset, length = index[piece.coords]
    if offset == EMPTY:
        return Work(None, piece, _where(plan, key, piece.coords))
    return Work(view(shard, int(offset), int(offset + length)), piece, _where(plan, key, piece.coords))


def _place(plan: ArrayPlan, out: np.ndarray, work: Work) -> None:
    piece = work.piece
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
    target[...] = chunk[piece.chunk_region]


def _drive(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (local files) without an event loop."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("a local read suspended; it must not need an event loop")


async def _read_remote(
    plan: ArrayPlan, source: ByteSource, out: np.ndarray, outers: list[Piece], box: Box, touched: Touched,
    token: str, *, decode_on_pool: bool,
) -> None:
    """Fetch every stored object of the box and decode each as soon as it arrives.

    Objects between "requested" and "decoded" are bounded by ``config.concurrency`` and by
    ``config.inflight_bytes`` (at the object's decoded size), so a read holds little beyond its output.
    """
    loop = asyncio.get_running_loop()
    config = get_config()
    object_nbytes = plan.codec.nbytes * (math.prod(plan.shard.chunks_per_shard) if plan.shard else 1)
    slots = asyncio.Semaphore(max(1, min(config.concurrency, config.inflight_bytes // max(object_nbytes, 1))))
    pool = decode_pool() if decode_on_pool else None

    async def one(outer: Piece) -> None:
        async with slots:
            work = await _fetch_outer(plan, source, outer, box, touched, token)
            if pool is None:
                for w in work:
                    _place(plan, out, w)
            else:
                await asyncio.gather(*(loop.run_in_executor(pool, _place, plan, out, w) for w in work))

    await gather_or_cancel(*(one(o) for o in outers))


async def read_box_async(plan: ArrayPlan, source: ByteSource, box: Box, token: str) -> np.ndarray:
    """`read_box` for callers on the I/O loop (batches of small reads, e.g. coordinates at open)."""
    out = np.empty(box_shape(box), dtype=plan.dtype)
    if out.size:
        outers = list(iter_pieces(box, plan.outer_chunks, plan.shape))
        await _read_remote(plan, source, out, outers, box, (None,) * len(box), token, decode_on_pool=False)
    return out


def _fetch_local(plan: ArrayPlan, source: ByteSource, outers: list[Piece], box: Box, touched: Touched,
                 token: str) -> list[Work]:
    """Fetch local objects in this thread (their reads never suspend, so no event loop is involved)."""
    return [w for o in outers for w in _drive(_fetch_outer(plan, source, o, box, touched, token))]


def fetch_work(plan: ArrayPlan, source: ByteSource, box: Box, token: str, touched: Touched) -> list[Work]:
    """Fetch the compressed bytes of every chunk ``box`` needs, undecoded (for device pipelines)."""
    outers = list(iter_pieces(box, plan.outer_chunks, plan.shape, None, touched))
    if source.is_local:
        return _fetch_local(plan, source, outers, box, touched, token)

    async def gather() -> list[Work]:
        groups = await gather_or_cancel(*(_fetch_outer(plan, source, o, box, touched, token) for o in outers))
        return [w for g in groups for w in g]

    return run_sync(gather())


def _read_local_outer(plan: ArrayPlan, source: ByteSource, out: np.ndarray, outer: Piece, box: Box,
                      touched: Touched, token: str) -> None:
    for w in _fetch_local(plan, source, [outer], box, touched, token):
        _place(plan, out, w)


def read_box(plan: ArrayPlan, source: ByteSource, box: Box, token: str, touched: Touched | None = None) -> np.ndarray:
    """Read the array region ``box`` into a new array.

    With ``touched``, only chunks holding those elements are read; the rest of the output is left
    uninitialised, for a caller that indexes only the touched elements.
    """
    touched = touched if touched is not None else (None,) * len(box)
    out = np.empty(box_shape(box), dtype=plan.dtype)
    if out.size == 0:
        return out
    outers = list(iter_pieces(box, plan.outer_chunks, plan.shape, None, touched))
    parallel = get_config().threads > 1
    if not source.is_local:
        run_sync(_read_remote(plan, source, out, outers, box, touched, token, decode_on_pool=parallel))
    elif len(outers) > 1 and parallel:
        # Many objects (a read without dask, or across shards): read and decode each on the pool.
        list(decode_pool().map(lambda o: _read_local_outer(plan, source, out, o, box, touched, token), outers))
    else:
        # One object (the dask task's shard): read it here, decode its chunks in parallel.
        work = _fetch_local(plan, source, outers, box, touched, token)
        if len(work) > 1 and parallel:
            list(decode_pool().map(lambda w: _place(plan, out, w), work))  # list() re-raises the first error
        else:
            for w in work:
                _place(plan, out, w)
    return out
