"""Pure geometry, no I/O: selections to per-dimension axes, axes to stored objects, objects to chunk pieces."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True, eq=False)
class Axis:
    """The elements a read needs along one dimension, in increasing order: every element of [start, stop),
    or only the sorted unique ``indices`` (which lie in [start, stop)).

    A read allocates the product of its axes' sizes, never the bounding box of a sparse selection.
    """

    start: int
    stop: int
    indices: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.indices.size) if self.indices is not None else self.stop - self.start

    @classmethod
    def of_indices(cls, indices: np.ndarray) -> Axis:
        """An axis over sorted unique indices (a range when they are consecutive)."""
        if indices.size == 0:
            return cls(0, 0)
        lo, hi = int(indices[0]), int(indices[-1]) + 1
        return cls(lo, hi) if hi - lo == indices.size else cls(lo, hi, indices)


Selection = tuple[Axis, ...]


@dataclass(frozen=True, slots=True)
class Piece:
    """One chunk's part of a read: which chunk, which elements inside it, where they go in the output."""

    coords: tuple[int, ...]  # the chunk's coordinates inside its stored object (zeros when unsharded)
    chunk_region: tuple[slice | np.ndarray, ...]  # per dimension a slice, or sorted element indices
    out_region: tuple[slice, ...]
    covers_chunk: bool  # the region is the whole (unpadded) chunk

    def chunk_index(self) -> tuple[Any, ...]:
        """``chunk_region`` as an indexer with outer semantics for NumPy-like arrays."""
        return outer_indexer(self.chunk_region)


@dataclass(frozen=True, slots=True, eq=False)
class PointPiece:
    """The points of a pointwise read that fall in one chunk: where they go in the flat output and their
    coordinates inside the chunk."""

    coords: tuple[int, ...]
    positions: np.ndarray  # (n,) positions in the flat output
    local: np.ndarray  # (n, ndim) coordinates inside the chunk


ObjectRead = tuple[tuple[int, ...], list[Any]]  # a stored object's grid coordinates and its pieces


def outer_indexer(region: Sequence[slice | np.ndarray]) -> tuple[Any, ...]:
    """Per-dimension slices and index arrays as one indexer that selects their outer product."""
    arrays = sum(isinstance(r, np.ndarray) for r in region)
    if arrays <= 1:
        return tuple(region)  # one index array among slices already has outer semantics
    return np.ix_(*(r if isinstance(r, np.ndarray) else np.arange(r.start, r.stop, r.step or 1) for r in region))


def normalize_selection(key: tuple[Any, ...], shape: Sequence[int]) -> tuple[Selection, tuple[Any, ...]]:
    """Split an outer selection (ints, slices, 1-D int arrays) into what to read (one `Axis` per dimension)
    and the indexer that turns the compact result (shape ``selection_shape``) into the one asked for (with
    `apply_outer`).

    >>> axes, post = normalize_selection((slice(1, 9, 3), 2), (10, 5))
    >>> [(a.start, a.stop, a.indices.tolist() if a.indices is not None else None) for a in axes], post
    ([(1, 8, [1, 4, 7]), (2, 3, None)], (slice(None, None, None), 0))
    """
    if len(key) != len(shape):
        raise IndexError(f"expected {len(shape)} indexers for an array of shape {tuple(shape)}. Got {len(key)}.")
    axes: list[Axis] = []
    post: list[Any] = []
    for k, n in zip(key, shape, strict=True):
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            r = range(start, stop, step)
            if len(r) == 0:
                axes.append(Axis(0, 0))
                post.append(slice(None))
                continue
            lo, hi = min(r[0], r[-1]), max(r[0], r[-1]) + 1
            axes.append(Axis(lo, hi) if abs(step) == 1 else Axis(lo, hi, np.arange(lo, hi, abs(step))))
            post.append(slice(None) if step > 0 else slice(None, None, -1))
        elif isinstance(k, np.ndarray) and k.ndim == 1:
            idx = normalize_indices(k, n)
            unique = np.unique(idx)
            axes.append(Axis.of_indices(unique))
            post.append(slice(None) if idx.size == unique.size and np.array_equal(idx, unique)
                        else np.searchsorted(unique, idx))
        else:
            i = int(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for a dimension of length {n}")
            i %= n
            axes.append(Axis(i, i + 1))
            post.append(0)
    return tuple(axes), tuple(post)


def normalize_indices(k: np.ndarray, n: int) -> np.ndarray:
    """Integer indices into a dimension of length ``n``, negative ones counted from the end."""
    if k.dtype.kind not in "iu":
        raise IndexError(f"expected integer indices for a dimension of length {n}. Got dtype {k.dtype}.")
    idx = k.astype(np.int64, copy=False)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        bad = int(idx[(idx < -n) | (idx >= n)][0])
        raise IndexError(f"index {bad} is out of bounds for a dimension of length {n}")
    return np.where(idx < 0, idx + n, idx)


def full_selection(shape: Sequence[int]) -> Selection:
    return tuple(Axis(0, int(n)) for n in shape)


def selection_shape(axes: Selection) -> tuple[int, ...]:
    return tuple(a.size for a in axes)


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


def task_chunks(shape: Sequence[int], outer: Sequence[int | tuple[int, ...]], itemsize: int,
                target_bytes: int) -> tuple[int | tuple[int, ...], ...]:
    """The dask chunk shape for reading whole stored objects: objects of fewer than ``target_bytes / 2``
    decoded bytes grouped into blocks of about ``target_bytes``, innermost dimension first (a dimension
    grows only once every dimension inside it spans the array, so a task's objects are one run in C order).

    Every task then costs one scheduler hop for many objects: per-task overhead (about 1 ms of CPU in dask
    and xarray) is noise next to tens of MB of reading. Irregular (rectilinear) grids are left as stored.
    """
    regular = [c for c in outer if isinstance(c, int)]
    if target_bytes <= 0 or len(regular) != len(outer):
        return tuple(outer)
    edges = [min(c, int(n)) for c, n in zip(regular, shape, strict=True)]
    nbytes = itemsize * math.prod(edges)
    if nbytes == 0 or 2 * nbytes >= target_bytes:
        return tuple(outer)
    task: list[int | tuple[int, ...]] = list(outer)
    for d in reversed(range(len(edges))):
        objects = -(-int(shape[d]) // edges[d])
        factor = min(target_bytes // nbytes, objects)
        if factor <= 1:
            if objects > 1:
                break
            continue
        task[d] = min(edges[d] * factor, int(shape[d]))
        nbytes *= factor
        if factor < objects:
            break
    return tuple(task)


def grid_shape(shape: Sequence[int], chunks: Sequence[int]) -> tuple[int, ...]:
    return tuple(math.ceil(s / c) if c else 0 for s, c in zip(shape, chunks, strict=True))


_AxisPart = tuple[int, slice | np.ndarray, slice, bool]  # chunk index, region in it, region in output, whole


def _axis_parts(axis: Axis, chunk: int, length: int) -> list[_AxisPart]:
    """Per chunk along one dimension that holds selected elements: which, where they go, whether all of it."""
    if axis.size == 0:
        return []
    parts: list[_AxisPart] = []
    if axis.indices is None:
        for i in range(axis.start // chunk, (axis.stop - 1) // chunk + 1):
            c0, c1 = i * chunk, min((i + 1) * chunk, length)  # edge chunks are padded; the array ends at length
            a, b = max(axis.start, c0), min(axis.stop, c1)
            parts.append((i, slice(a - c0, b - c0), slice(a - axis.start, b - axis.start), a == c0 and b == c1))
        return parts
    idx = axis.indices
    ids = idx // chunk
    bounds = [0, *(np.flatnonzero(np.diff(ids)) + 1).tolist(), idx.size]
    for p0, p1 in itertools.pairwise(bounds):
        i = int(ids[p0])
        c0, c1 = i * chunk, min((i + 1) * chunk, length)
        parts.append((i, _as_slice(idx[p0:p1] - c0), slice(p0, p1), p1 - p0 == c1 - c0))
    return parts


def _as_slice(local: np.ndarray) -> slice | np.ndarray:
    """Evenly spaced increasing indices as a slice (a view when applied), anything else as they are."""
    if local.size == 1:
        return slice(int(local[0]), int(local[0]) + 1)
    steps = np.diff(local)
    if np.all(steps == steps[0]):
        return slice(int(local[0]), int(local[-1]) + 1, int(steps[0]))
    return local


def plan_reads(axes: Selection, shape: Sequence[int], outer: Sequence[int], inner: Sequence[int]) -> list[ObjectRead]:
    """Every stored object (shard, or chunk when unsharded) the selection touches, with the pieces of its
    inner chunks it needs; chunks holding no selected element are not listed.

    ``outer`` is the stored object's shape, a multiple of the inner chunk shape ``inner``.
    """
    per_dim: list[dict[int, list[tuple[int, slice | np.ndarray, slice, bool]]]] = []
    for axis, c, o, n in zip(axes, inner, outer, shape, strict=True):
        k = o // c
        groups: dict[int, list[tuple[int, slice | np.ndarray, slice, bool]]] = {}
        for i, region, out, whole in _axis_parts(axis, c, n):
            groups.setdefault(i // k, []).append((i - (i // k) * k, region, out, whole))
        per_dim.append(groups)
    reads: list[ObjectRead] = []
    for coords in itertools.product(*(sorted(g) for g in per_dim)):
        pieces = []
        for combo in itertools.product(*(g[s] for g, s in zip(per_dim, coords, strict=True))):
            # per dimension, as the four fields want (nothing for a 0-d array)
            fields: Any = zip(*combo, strict=True) if combo else ((), (), (), ())
            coords_in, regions, outs, wholes = fields
            pieces.append(Piece(coords_in, regions, outs, all(wholes)))
        reads.append((tuple(coords), pieces))
    return reads


def vectorized_points(key: tuple[Any, ...], shape: Sequence[int]) -> tuple[np.ndarray, tuple[int, ...]]:
    """A vectorized (pointwise) selection as points: an ``(n, ndim)`` array and the result's shape.

    Index arrays broadcast against each other and their dimensions come first; each slice adds a dimension
    after them, in order (xarray's vectorized indexing).
    """
    if len(key) != len(shape):
        raise IndexError(f"expected {len(shape)} indexers for an array of shape {tuple(shape)}. Got {len(key)}.")
    arrays = [normalize_indices(np.asarray(k), n) for k, n in zip(key, shape, strict=True)
              if not isinstance(k, slice)]
    n_slices = sum(isinstance(k, slice) for k in key)
    broadcast = np.broadcast_shapes(*(a.shape for a in arrays)) if arrays else ()
    grids: list[np.ndarray] = []
    i_slice = 0
    arrays_iter = iter(arrays)
    for k, n in zip(key, shape, strict=True):
        if isinstance(k, slice):
            values = np.arange(*k.indices(n), dtype=np.int64)
            grids.append(values.reshape((1,) * (len(broadcast) + i_slice) + (-1,) + (1,) * (n_slices - i_slice - 1)))
            i_slice += 1
        else:
            a = next(arrays_iter)
            grids.append(a.reshape(a.shape + (1,) * n_slices))
    full = np.broadcast_shapes(*(g.shape for g in grids)) if grids else ()
    points = np.stack([np.broadcast_to(g, full).reshape(-1) for g in grids], axis=-1) if grids else np.empty((1, 0))
    return points.astype(np.int64, copy=False), tuple(full)


def plan_points(points: np.ndarray, outer: Sequence[int], inner: Sequence[int]) -> list[ObjectRead]:
    """The stored objects holding ``points`` (``(n, ndim)``, in bounds), each with one `PointPiece` per inner
    chunk that holds any of them."""
    if points.shape[0] == 0:
        return []
    inner_arr = np.asarray(inner, dtype=np.int64)
    per_object = np.asarray(outer, dtype=np.int64) // inner_arr
    chunk_ids = points // inner_arr
    chunks, inverse = np.unique(chunk_ids, axis=0, return_inverse=True)
    order = np.argsort(inverse.reshape(-1), kind="stable")
    bounds = np.searchsorted(inverse.reshape(-1)[order], np.arange(len(chunks) + 1))
    reads: dict[tuple[int, ...], list[Any]] = {}
    for j, chunk in enumerate(chunks):
        positions = order[bounds[j]:bounds[j + 1]]
        obj = chunk // per_object
        piece = PointPiece(tuple((chunk - obj * per_object).tolist()), positions,
                           points[positions] - chunk * inner_arr)
        reads.setdefault(tuple(obj.tolist()), []).append(piece)
    return list(reads.items())


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
