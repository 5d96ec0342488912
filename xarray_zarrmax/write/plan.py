"""Pure geometry of a write: which stored objects (shards, or chunks when unsharded) a block of data covers,
whether it covers each one whole, and whether dask's chunks line up with the objects. No I/O, no xarray.

Coordinates are in array elements. An *object* is what one key stores: a shard of a sharded array, a chunk
otherwise; its extent is clipped to the array's shape (an edge object covers less than its full shape).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ObjectWrite:
    """The part of one stored object a block writes.

    Attributes
    ----------
    coords
        The object's position in the object grid (what its key encodes).
    in_object
        The written part, as slices into the object's full shape.
    in_block
        The same part, as slices into the block.
    whole
        Whether the block covers every element of the object that lies inside the array: then the object is
        replaced outright; otherwise its other elements must be read and kept.
    """

    coords: tuple[int, ...]
    in_object: tuple[slice, ...]
    in_block: tuple[slice, ...]
    whole: bool


def objects_for_block(array_shape: Sequence[int], object_shape: Sequence[int], start: Sequence[int],
                      block_shape: Sequence[int]) -> Iterator[ObjectWrite]:
    """Every object that the block ``[start, start + block_shape)`` touches, in C order of the grid."""
    ndim = len(array_shape)
    if not (len(object_shape) == len(start) == len(block_shape) == ndim):
        raise ValueError(f"expected {ndim} dimensions for shape, object shape, start and block shape. Got "
                         f"{tuple(object_shape)}, {tuple(start)}, {tuple(block_shape)}.")
    if any(n == 0 for n in block_shape):
        return
    ranges = [range(a // s, (a + n - 1) // s + 1) for a, n, s in zip(start, block_shape, object_shape, strict=True)]
    for coords in itertools.product(*ranges):
        in_object, in_block, whole = [], [], True
        for c, a, n, s, size in zip(coords, start, block_shape, object_shape, array_shape, strict=True):
            lo, hi = c * s, min((c + 1) * s, size)  # the object's elements inside the array
            w_lo, w_hi = max(lo, a), min(hi, a + n)
            whole = whole and (w_lo, w_hi) == (lo, hi)
            in_object.append(slice(w_lo - c * s, w_hi - c * s))
            in_block.append(slice(w_lo - a, w_hi - a))
        yield ObjectWrite(tuple(coords), tuple(in_object), tuple(in_block), whole)


def misaligned_boundary(start: int, chunks: Sequence[int], object_size: int) -> int | None:
    """The first boundary between two of ``chunks`` (dask's chunk sizes along one dimension, written from
    ``start``) that is not on an object boundary, or None. Boundaries at the written range's two ends may fall
    inside an object: those objects are merged with what is stored (read-modify-write)."""
    position = start
    for size in chunks[:-1]:
        position += size
        if position % object_size:
            return position
    return None


def check_aligned(name: str, dims: Sequence[str], start: Sequence[int], chunks: Sequence[Sequence[int]],
                  object_shape: Sequence[int], what: str) -> None:
    """Raise ValueError unless no two dask chunks of variable ``name`` write to one object (``what``: "shard"
    or "chunk"), which would make two tasks read-modify-write the same object."""
    for dim, a, sizes, s in zip(dims, start, chunks, object_shape, strict=True):
        bad = misaligned_boundary(a, sizes, s)
        if bad is not None:
            raise ValueError(
                f"variable {name!r}: dask chunks along dimension {dim!r} (sizes {tuple(sizes)[:8]}"
                f"{'...' if len(sizes) > 8 else ''}, starting at element {a}) split the stored {what}s of "
                f"{s} elements: a chunk boundary at element {bad} is inside a {what}. Each {what} must be written "
                f"by one task: rechunk to multiples of {s} (from element {a}), or pass align_chunks=True (or "
                "safe_chunks=False) to rechunk automatically."
            )


def aligned_chunks(start: int, length: int, object_size: int) -> tuple[int, ...]:
    """Dask chunk sizes for ``length`` elements written from ``start``: one chunk per object, the first and
    last cut where the written range starts and ends."""
    if length == 0:
        return (0,)
    out = []
    position, stop = start, start + length
    while position < stop:
        step = min(object_size - position % object_size, stop - position)
        out.append(step)
        position += step
    return tuple(out)


def group_factors(counts: Sequence[int], per_group: int) -> tuple[int, ...]:
    """How many consecutive units (objects, or dask blocks) of each dimension to put in one group of at most
    ``per_group`` units, taken along the last dimensions first (where objects are contiguous)."""
    factors = []
    for n in reversed(counts):
        factor = max(1, min(n, per_group))
        factors.append(factor)
        per_group //= factor
    return tuple(reversed(factors))


def per_group(units: int, unit_bytes: int, *, target_bytes: int, min_groups: int) -> int:
    """Units per group: as many as fit in ``target_bytes`` while there are still ``min_groups`` groups; one
    at least."""
    return max(1, min(target_bytes // max(1, unit_bytes), -(-units // max(1, min_groups))))


def grouped_chunks(start: Sequence[int], shape: Sequence[int], object_shape: Sequence[int], itemsize: int, *,
                   target_bytes: int, min_blocks: int) -> tuple[tuple[int, ...], ...]:
    """Dask chunks for data already in memory written from ``start``: blocks of whole objects (cut only where
    the written range starts and ends), as many per block as `per_group` allows. One object per block made
    the writes of small objects wait on dask's threads, one round trip after another."""
    pieces = [aligned_chunks(a, n, s) for a, n, s in zip(start, shape, object_shape, strict=True)]
    most = per_group(math.prod(len(p) for p in pieces), math.prod(object_shape) * itemsize,
                     target_bytes=target_bytes, min_groups=min_blocks)
    factors = group_factors([len(p) for p in pieces], most)
    return tuple(tuple(sum(p[i:i + g]) for i in range(0, len(p), g)) for p, g in zip(pieces, factors, strict=True))


def block_groups(numblocks: Sequence[int],
                 factors: Sequence[int]) -> Iterator[tuple[tuple[int, ...], list[tuple[int, ...]]]]:
    """The groups of dask block indices that `group_factors` makes: (the group's index, its blocks in C order)."""
    ranges = [range(0, n, g) for n, g in zip(numblocks, factors, strict=True)]
    for first in itertools.product(*ranges):
        spans = [range(a, min(a + g, n)) for a, g, n in zip(first, factors, numblocks, strict=True)]
        yield (tuple(a // g for a, g in zip(first, factors, strict=True)), list(itertools.product(*spans)))
