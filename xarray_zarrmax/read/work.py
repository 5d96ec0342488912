"""One chunk's part in a read: the bytes fetched for it (None: missing, the fill value) or its decoded chunk from
the cache, where it goes in the output, and how errors name it; and putting it there (`place`), decoding it on
the way and keeping the decoded chunk when the decoded-chunk cache may (`chunk_cache`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xarray_zarrmax.core.geometry import (
    PointPiece,
)
from xarray_zarrmax.errors import CorruptDataError, StoreAccessError
from xarray_zarrmax.read import chunk_cache
from xarray_zarrmax.read.plan import ArrayPlan
from xarray_zarrmax.storage.abc import ByteSource
from xarray_zarrmax.tuning import CHANGED_OBJECT_ATTEMPTS


@dataclass(slots=True)
class Work:
    """One inner chunk to place: its bytes (None = missing, use the fill value) and where it goes; or its
    decoded chunk from the cache (``cached``). ``keep``: the cache entry to make of it once decoded (the
    object and the version its bytes came from), None where it may not be kept."""

    raw: Any
    piece: Any  # a `Piece`; a `PointPiece` in pointwise reads (which the device path never makes)
    where: str
    cached: np.ndarray | None = None
    keep: tuple[chunk_cache.ObjectId, Hashable] | None = None


def location(plan: ArrayPlan, key: str, coords: tuple[int, ...] | None = None) -> str:
    chunk = f", chunk {coords}" if coords is not None else ""
    return f"array {plan.name!r}, key {key!r}{chunk}"


def changed_too_often(plan: ArrayPlan, source: ByteSource, key: str) -> StoreAccessError:
    return StoreAccessError(f"{location(plan, key)} on {source.label} changed {CHANGED_OBJECT_ATTEMPTS} times "
                            "while it was being read: a writer is rewriting it; read again once it is done")


def short_range(plan: ArrayPlan, key: str, start: int, stop: int, got: int) -> CorruptDataError:
    return CorruptDataError(f"{location(plan, key)}: asked for bytes [{start}, {stop}) of the shard, got {got} bytes: "
                            "the object is truncated or its index points outside it")


def place(plan: ArrayPlan, out: np.ndarray, work: Work) -> None:
    piece = work.piece
    if isinstance(piece, PointPiece):  # ``out`` is the flat result of a pointwise read
        if work.raw is None and work.cached is None:
            out[piece.positions] = plan.fill_value
        else:
            out[piece.positions] = decoded_chunk(plan, work)[tuple(piece.local.T)]
        return
    target = out[(*piece.out_region, Ellipsis)]  # type: ignore[arg-type]  # Ellipsis: a view even when 0-d
    if work.raw is None and work.cached is None:
        target[...] = plan.fill_value
        return
    codec = plan.codec
    if (work.cached is None and piece.covers_chunk and codec.direct and target.flags.c_contiguous
            and target.shape == codec.chunk_shape):
        codec.decode_into(work.raw, target, work.where)
        if work.keep is not None:
            chunk_cache.chunks.keep(*work.keep, piece.coords, target, whole=True)
        return
    target[...] = decoded_chunk(plan, work)[piece.chunk_index()]


def decoded_chunk(plan: ArrayPlan, work: Work) -> np.ndarray:
    """The whole decoded chunk of ``work``: from the cache, or decoded now (and kept: the cache copies it)."""
    if work.cached is not None:
        return work.cached
    chunk = plan.codec.decode(work.raw, work.where)
    if work.keep is not None:
        whole = not isinstance(work.piece, PointPiece) and work.piece.covers_chunk
        chunk_cache.chunks.keep(*work.keep, work.piece.coords, chunk, whole=whole)
    return chunk


def place_all(plan: ArrayPlan, out: np.ndarray, work: Sequence[Work]) -> None:
    for w in work:
        place(plan, out, w)


def split_batches[T](work: list[T], parts: int) -> list[list[T]]:
    """``work`` in at most ``parts`` batches of (nearly) equal length, in order."""
    parts = max(1, min(parts, len(work)))
    size, extra = divmod(len(work), parts)
    batches, start = [], 0
    for i in range(parts):
        stop = start + size + (1 if i < extra else 0)
        batches.append(work[start:stop])
        start = stop
    return batches


def cache_id(plan: ArrayPlan, source: ByteSource, key: str) -> chunk_cache.ObjectId | None:
    """What keys the object's chunks in the decoded-chunk cache; None where they may not be kept (the cache is
    off, or the source cannot name its store: `ByteSource.cache_scope`)."""
    if not chunk_cache.enabled():
        return None
    scope = source.cache_scope
    # The shard format too: a new shard layout over unchanged shard files puts other bytes at a chunk's place.
    return None if scope is None else chunk_cache.object_id(scope, key, plan.codec, plan.shard)

