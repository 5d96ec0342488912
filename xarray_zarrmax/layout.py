"""Pure geometry, no I/O: selections to boxes, boxes to shards, shards to chunks and output slices."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

Box = tuple[tuple[int, int], ...]  # per dimension, [start, stop)


@dataclass(frozen=True, slots=True)
class Piece:
    """One chunk's part of a read: which chunk, which region inside it, where it goes in the output box."""

    coords: tuple[int, ...]  # chunk coordinates in the grid being iterated
    chunk_region: tuple[slice, ...]
    out_region: tuple[slice, ...]
    covers_chunk: bool  # the region is the whole (unpadded) chunk


def normalize_selection(key: tuple[int | slice, ...], shape: Sequence[int]) -> tuple[Box, tuple[int | slice, ...]]:
    """Split a basic selection into the box of elements to read and the indexer to apply to that box.

    >>> normalize_selection((slice(1, 9, 3), 2), (10, 5))
    (((1, 8), (2, 3)), (slice(0, 7, 3), 0))
    """
    if len(key) != len(shape):
        raise IndexError(f"expected {len(shape)} indexers for an array of shape {tuple(shape)}. Got {len(key)}.")
    box: list[tuple[int, int]] = []
    post: list[int | slice] = []
    for k, n in zip(key, shape, strict=True):
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            r = range(start, stop, step)
            if len(r) == 0:
                box.append((0, 0))
                post.append(slice(0, 0))
                continue
            lo, hi = min(r[0], r[-1]), max(r[0], r[-1]) + 1
            box.append((lo, hi))
            if step > 0:
                post.append(slice(r[0] - lo, r[-1] - lo + 1, step))
            else:
                post.append(slice(r[0] - lo, (r[-1] - lo - 1) if r[-1] - lo - 1 >= 0 else None, step))
        else:
            i = int(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for a dimension of length {n}")
            i %= n
            box.append((i, i + 1))
            post.append(0)
    return tuple(box), tuple(post)


def box_shape(box: Box) -> tuple[int, ...]:
    return tuple(hi - lo for lo, hi in box)


def grid_shape(shape: Sequence[int], chunks: Sequence[int]) -> tuple[int, ...]:
    return tuple(math.ceil(s / c) if c else 0 for s, c in zip(shape, chunks, strict=True))


def chunk_span(box: Box, chunks: Sequence[int]) -> tuple[range, ...]:
    """Per dimension, the chunk indices that intersect the box."""
    return tuple(
        range(lo // c, (hi - 1) // c + 1) if hi > lo else range(0) for (lo, hi), c in zip(box, chunks, strict=True)
    )


def count_chunks(box: Box, chunks: Sequence[int]) -> int:
    return math.prod(len(r) for r in chunk_span(box, chunks))


def iter_pieces(box: Box, chunks: Sequence[int], shape: Sequence[int], origin: Sequence[int] | None = None) -> Iterator[Piece]:
    """Every chunk of a regular grid (cell size ``chunks``, starting at ``origin``) that meets ``box``.

    ``shape`` is the array's shape, to know where edge chunks end. Coordinates are relative to ``origin``.
    """
    origin = tuple(origin) if origin is not None else (0,) * len(box)
    local = tuple((lo - o, hi - o) for (lo, hi), o in zip(box, origin, strict=True))
    for coords in itertools.product(*chunk_span(local, chunks)):
        chunk_region = []
        out_region = []
        covers = True
        for c, i, (lo, hi), o, n, (blo, _) in zip(chunks, coords, local, origin, shape, box, strict=True):
            c0 = i * c
            c1 = min(c0 + c, n - o)  # edge chunks are padded in storage; the array ends at n
            a, b = max(lo, c0), min(hi, c1)
            chunk_region.append(slice(a - c0, b - c0))
            out_region.append(slice(a + o - blo, b + o - blo))
            covers = covers and a == c0 and b == c1
        yield Piece(tuple(coords), tuple(chunk_region), tuple(out_region), covers)


def shard_box(coords: Sequence[int], shard_shape: Sequence[int], shape: Sequence[int]) -> Box:
    """The array region of the shard (or unsharded chunk) at ``coords``, clipped to the array."""
    return tuple(
        (i * s, min((i + 1) * s, n)) for i, s, n in zip(coords, shard_shape, shape, strict=True)
    )


def intersect(a: Box, b: Box) -> Box:
    return tuple((max(alo, blo), min(ahi, bhi)) for (alo, ahi), (blo, bhi) in zip(a, b, strict=True))


def coalesce(ranges: Sequence[tuple[int, int]], gap: int) -> list[tuple[int, int, list[int]]]:
    """Merge byte ranges closer than ``gap`` bytes: ``(start, stop, [indices of the ranges inside])``.

    >>> coalesce([(0, 10), (12, 20), (100, 110)], gap=5)
    [(0, 20, [0, 1]), (100, 110, [2])]
    """
    order = sorted(range(len(ranges)), key=lambda i: ranges[i])
    merged: list[tuple[int, int, list[int]]] = []
    for i in order:
        start, stop = ranges[i]
        if merged and start - merged[-1][1] <= gap:
            s0, s1, members = merged[-1]
            merged[-1] = (s0, max(s1, stop), [*members, i])
        else:
            merged.append((start, stop, [i]))
    return merged
