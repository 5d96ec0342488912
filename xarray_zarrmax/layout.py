"""Pure geometry, no I/O: selections to boxes, boxes to shards, shards to chunks and output slices."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Box = tuple[tuple[int, int], ...]  # per dimension, [start, stop)


@dataclass(frozen=True, slots=True)
class Piece:
    """One chunk's part of a read: which chunk, which region inside it, where it goes in the output box."""

    coords: tuple[int, ...]  # chunk coordinates in the grid being iterated
    chunk_region: tuple[slice, ...]
    out_region: tuple[slice, ...]
    covers_chunk: bool  # the region is the whole (unpadded) chunk


Touched = tuple["np.ndarray | None", ...]  # per dimension: the element indices needed, None = the whole box


def normalize_selection(key: tuple[Any, ...], shape: Sequence[int]) -> tuple[Box, tuple[Any, ...], Touched]:
    """Split an outer selection (ints, slices, 1-D int arrays) into the box to read, the indexer to apply
    to that box (with `apply_outer`), and per dimension the elements actually needed (None: all of them).

    >>> normalize_selection((slice(1, 9, 3), 2), (10, 5))[:2]
    (((1, 8), (2, 3)), (slice(0, 7, 3), 0))
    """
    if len(key) != len(shape):
        raise IndexError(f"expected {len(shape)} indexers for an array of shape {tuple(shape)}. Got {len(key)}.")
    box: list[tuple[int, int]] = []
    post: list[Any] = []
    touched: list[np.ndarray | None] = []
    for k, n in zip(key, shape, strict=True):
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            r = range(start, stop, step)
            if len(r) == 0:
                box.append((0, 0))
                post.append(slice(0, 0))
                touched.append(None)
                continue
            lo, hi = min(r[0], r[-1]), max(r[0], r[-1]) + 1
            box.append((lo, hi))
            post.append(slice(r[0] - lo, hi - lo, step) if step > 0 else slice(r[0] - lo, None, step))
            touched.append(None if abs(step) == 1 else np.arange(lo, hi, abs(step)))
        elif isinstance(k, np.ndarray) and k.ndim == 1:
            idx = k.astype(np.int64, copy=False)
            if idx.size and (idx.min() < -n or idx.max() >= n):
                raise IndexError(f"index array has values outside [-{n}, {n}) for a dimension of length {n}")
            idx = np.where(idx < 0, idx + n, idx)
            if idx.size == 0:
                box.append((0, 0))
                post.append(idx)
                touched.append(None)
                continue
            lo, hi = int(idx.min()), int(idx.max()) + 1
            box.append((lo, hi))
            post.append(idx - lo)
            touched.append(np.unique(idx))
        else:
            i = int(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for a dimension of length {n}")
            i %= n
            box.append((i, i + 1))
            post.append(0)
            touched.append(None)
    return tuple(box), tuple(post), tuple(touched)


def apply_outer(region: np.ndarray, post: tuple[Any, ...]) -> np.ndarray:
    """Index ``region`` with one indexer per dimension, arrays applied independently (outer semantics)."""
    if not any(isinstance(p, np.ndarray) for p in post):
        return region[post]
    result = region
    for axis, p in enumerate(post):
        if isinstance(p, np.ndarray):
            result = np.take(result, p, axis=axis)
        elif isinstance(p, slice):
            result = result[(slice(None),) * axis + (p,)]
        else:
            result = result[(slice(None),) * axis + (slice(p, p + 1),)]
    kept = tuple(n for n, p in zip(result.shape, post, strict=True) if not isinstance(p, int | np.integer))
    return result.reshape(kept)


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


def iter_pieces(
    box: Box,
    chunks: Sequence[int],
    shape: Sequence[int],
    origin: Sequence[int] | None = None,
    touched: Touched | None = None,
) -> Iterator[Piece]:
    """Every chunk of a regular grid (cell size ``chunks``, starting at ``origin``) that meets ``box``.

    ``shape`` is the array's shape, to know where edge chunks end. Coordinates are relative to ``origin``.
    With ``touched`` (absolute element indices per dimension), chunks holding none of them are skipped.
    """
    origin = tuple(origin) if origin is not None else (0,) * len(box)
    local = tuple((lo - o, hi - o) for (lo, hi), o in zip(box, origin, strict=True))
    spans: list[Iterable[int]] = list(chunk_span(local, chunks))
    if touched is not None:
        for d, (t, c, o) in enumerate(zip(touched, chunks, origin, strict=True)):
            if t is not None:
                wanted = set(np.unique((t - o) // c).tolist())
                spans[d] = [i for i in spans[d] if i in wanted]
    for coords in itertools.product(*spans):
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
