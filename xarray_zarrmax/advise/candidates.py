"""The layouts the search considers: a grid of chunk shapes (a ladder of lengths per dimension) and the shards
of each, and the neighbours of a layout that refining it steps to.

The grid, stated: along a dimension of length ``n``, the chunk lengths are the powers of two below ``n``, ``n``
itself, the divisor of ``n`` in ``[p, 2p)`` nearest ``p`` for each power ``p`` (no sliver at the end), and the
exact fits ``ceil(n / 2^j)`` (``n`` in ``2^j`` chunks of equal length but the last); every combination whose
chunk holds from one element to `tuning.MAX_CHUNK_BYTES` at the STORED itemsize; each unsharded and in shards
of 2, 8 or all of its chunks per dimension (every combination of at most `tuning.MAX_SHARD_CHUNKS` chunks).
Nothing is thinned: the search (`advisor.rank`) bounds each layout's predicted time from below
(`bounds.SearchBounds`, `search.branch_and_bound`) and costs only those the bound does not rule out.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from xarray_zarrmax.advise import kernels
from xarray_zarrmax.advise.model import Layout
from xarray_zarrmax.advise.validate import ITEMSIZE, check_shape, is_whole, whole_number, wrong_type
from xarray_zarrmax.errors import AdviceInputError
from xarray_zarrmax.tuning import (
    MAX_CHUNK_BYTES,
    MAX_SHARD_CHUNKS,
    REFINE_FACTORS,
)


def _sizes(n: int) -> list[int]:
    """The ladder of chunk lengths along a dimension of length ``n`` (see the module's docstring): about three
    per doubling, ``O(log n)`` of them however long the dimension."""
    options = {n}
    p = 1
    while p < n:
        options.add(p)
        options.add(-(-n // p))  # an exact fit: n in p chunks
        # a few hundred tries at most: linear in n, a dimension of 10^9 took 26 s
        div = next((d for d in range(p, min(2 * p, n, p + 512)) if n % d == 0), None)
        if div is not None:
            options.add(div)
        p *= 2
    return sorted(options)


def _chunk_bytes_range(shape: Sequence[int], itemsize: int) -> tuple[int, int]:
    """Stored bytes of a candidate's chunk: one element to `MAX_CHUNK_BYTES` (64 MiB: a chunk per decode
    thread is held in memory). No floor beyond one element: the model rates chunks of any size, and the
    search's bound prunes the tiny ones (their per-chunk work and requests bound their time from below)."""
    return itemsize, MAX_CHUNK_BYTES


def _sharded(chunks: tuple[int, ...], multiples: Sequence[int]) -> Layout:
    """``chunks`` in shards of ``multiples`` chunks per dimension (unsharded when that is one chunk)."""
    if math.prod(multiples) == 1:
        return Layout(chunks)
    return Layout(chunks, tuple(k * c for k, c in zip(multiples, chunks, strict=True)))


#: Shard multiples per dimension ("all": the dimension's whole length in chunks)
_MULTIPLES: tuple[int | str, ...] = (1, 2, 8, "all")


def chunk_grid(shape: Sequence[int], itemsize: int) -> np.ndarray:
    """Every chunk shape of the grid, ``(k, ndim)``: the product of the per-dimension ladders (`_sizes`),
    those of one element to `MAX_CHUNK_BYTES` stored. Built with numpy (millions in 8 dimensions)."""
    low, high = _chunk_bytes_range(shape, itemsize)
    ladders = [np.asarray(_sizes(int(n)), dtype=np.int64) for n in shape]
    if not ladders:
        return np.zeros((1, 0), dtype=np.int64)
    grids = np.meshgrid(*ladders, indexing="ij")
    chunks = np.stack([g.reshape(-1) for g in grids], axis=-1)
    nbytes = itemsize * np.prod(chunks.astype(np.float64), axis=1)
    return chunks[(nbytes >= low) & (nbytes <= high)]


def shard_multiples(chunks: Sequence[int], shape: Sequence[int]) -> np.ndarray:
    """Chunks per shard along each dimension of the layouts of one chunk shape, ``(m, ndim)``: unsharded (all
    ones) first, then shards of 2, 8 or all of its chunks per dimension, every combination of at most
    `MAX_SHARD_CHUNKS` chunks."""
    ks = shardings(np.asarray([chunks], dtype=np.int64).reshape(1, len(shape)), shape)[1]
    return np.concatenate([np.ones((1, len(shape)), dtype=np.int64), ks])


def multiples(chunks: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """``(k, ndim, 4)``: per row of ``chunks`` and dimension, the chunks per shard of each of `_MULTIPLES` (1, 2,
    8 and all)."""
    fulls = -(-np.asarray(shape, dtype=np.int64)[None] // chunks)  # (k, ndim) chunks along each dimension
    return np.stack([np.ones_like(fulls), np.full_like(fulls, 2), np.full_like(fulls, 8), fulls], axis=2)


def shardings(chunks: np.ndarray, shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sharded layouts of many chunk shapes (rows of ``chunks``) at once: (the row each belongs to, its
    chunks per shard, and which of `multiples` each dimension's is), each row's together in `shard_multiples`'
    order (without its unsharded first). Compiled where the package was built so (`kernels`; a search of scattered
    points lists 3.4 million, 0.6 s of it in numpy), else `_shardings_numpy`: the same layouts."""
    ndim = chunks.shape[1]
    if kernels.compiled is None or ndim > _COMPILED_DIMS:
        return _shardings_numpy(chunks, shape)
    fulls = kernels.ints(-(-np.asarray(shape, dtype=np.int64)[None] // chunks))
    owners, found, which = [np.zeros(0, dtype=np.int64)], [np.zeros((0, ndim), dtype=np.int64)], [
        np.zeros((0, ndim), dtype=np.int64)]
    step = max(1, (1 << 16) // 4**ndim)  # rows of chunk shapes at once: 4^ndim combinations each at most
    for a in range(0, chunks.shape[0], step):
        rows = fulls[a:a + step]
        room = rows.shape[0] * 4**ndim
        owner, ks, options = (np.empty(room, dtype=np.int64), np.empty((room, ndim), dtype=np.int64),
                              np.empty((room, ndim), dtype=np.int64))
        count = kernels.compiled.list_shardings(rows.shape[0], ndim, rows, float(MAX_SHARD_CHUNKS), owner, ks, options)
        owners.append(a + owner[:count])
        found.append(ks[:count])
        which.append(options[:count])
    return np.concatenate(owners), np.concatenate(found), np.concatenate(which)


def _shardings_numpy(chunks: np.ndarray, shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`shardings` in numpy (the reference `_kernels.c`'s list_shardings is held to, and the listing where it was not
    built)."""
    ndim = chunks.shape[1]
    # per dimension the options 1, 2, 8 and all, in that order: those past the dimension's length, and "all"
    # when it is one of the others, left out
    options = multiples(chunks, shape)
    fulls = options[:, :, 3]
    valid = options <= fulls[:, :, None]
    valid[:, :, 3] &= (fulls != 1) & (fulls != 2) & (fulls != 8)
    combos = np.indices((len(_MULTIPLES),) * ndim).reshape(ndim, -1).T  # (4^ndim, ndim), lexicographic
    dims = np.arange(ndim)[None, :]
    owners, found = [np.zeros(0, dtype=np.int64)], [np.zeros((0, ndim), dtype=np.int64)]
    which = [np.zeros((0, ndim), dtype=np.int64)]
    step = max(1, (1 << 16) // len(combos))  # rows of chunk shapes at once: 4^ndim combinations each
    for a in range(0, chunks.shape[0], step):
        ks = options[a:a + step][:, dims, combos]  # (rows, combinations, ndim)
        per_object = np.prod(ks.astype(np.float64), axis=2)
        keep = valid[a:a + step][:, dims, combos].all(axis=2) & (per_object > 1) & (per_object <= MAX_SHARD_CHUNKS)
        row, combo = np.nonzero(keep)  # row-major: each row's layouts together, in the combinations' order
        owners.append(a + row)
        found.append(ks[row, combo])
        which.append(combos[combo])
    return np.concatenate(owners), np.concatenate(found), np.concatenate(which)


#: Dimensions at most of the chunk shapes whose shardings the compiled kernel lists (4^10 combinations a shape)
_COMPILED_DIMS = 10


def shard_options(chunks: Sequence[int], shape: Sequence[int]) -> list[Layout]:
    """The layouts of one chunk shape in the grid (`shard_multiples`): unsharded first."""
    chunks = tuple(int(c) for c in chunks)
    return [_sharded(chunks, ks) for ks in shard_multiples(chunks, shape).tolist()]


def candidate_layouts(shape: Sequence[int], itemsize: int) -> Iterator[Layout]:
    """Every layout of the grid (see the module's docstring), chunk shape by chunk shape: lazily, as in many
    dimensions there are millions (the search costs the few its bound leaves). ``shape`` and ``itemsize`` are
    checked at the call, not at the first layout (`validate.check_shape`; an itemsize of whole bytes >= 1)."""
    lengths = check_shape(shape)
    return _layouts(lengths, whole_number("itemsize", itemsize, 1, what=ITEMSIZE))


def _layouts(shape: tuple[int, ...], itemsize: int) -> Iterator[Layout]:
    for chunks in chunk_grid(shape, itemsize):
        yield from shard_options(chunks.tolist(), shape)


def neighbours(layout: Layout, shape: Sequence[int], itemsize: int) -> list[Layout]:
    """Layouts one step from ``layout``: one dimension's chunk length scaled by a factor in `REFINE_FACTORS` (as many
    chunks per shard along it, at most the dimension's), or one dimension's chunks per shard halved, doubled,
    one or all. Chunks stay within the candidates' size range."""
    low, high = _chunk_bytes_range(shape, itemsize)
    chunks = layout.chunks
    ks = [o // c for o, c in zip(layout.outer, chunks, strict=True)]
    found: dict[Layout, None] = {}
    for d, n in enumerate(int(x) for x in shape):
        for factor in REFINE_FACTORS:
            c = min(max(1, round(chunks[d] * factor)), n)
            moved = (*chunks[:d], c, *chunks[d + 1:])
            if c != chunks[d] and low <= itemsize * math.prod(moved) <= high:
                found[_sharded(moved, [*ks[:d], min(ks[d], -(-n // c)), *ks[d + 1:]])] = None
        full = -(-n // chunks[d])
        for k in (1, ks[d] // 2, 2 * ks[d], full):
            if 1 <= k <= full and k != ks[d]:
                found[_sharded(chunks, [*ks[:d], k, *ks[d + 1:]])] = None
    found.pop(layout, None)
    return [lay for lay in found if lay.chunks_per_object() <= MAX_SHARD_CHUNKS]


def check_layouts(layouts: Any, dims: tuple[Hashable, ...]) -> list[Layout] | None:
    """``layouts=``: None, or a list of `Layout` whose chunks and shards have one whole length >= 1 per
    dimension, the shards whole multiples of the chunks and of at most `MAX_SHARD_CHUNKS` chunks. Sequences of
    lengths become tuples (``Layout([4, 5, 6])`` is ``Layout((4, 5, 6))``)."""
    if layouts is None:
        return None
    expected = "a list of Layout(chunks, shards or None) (from xarray_zarrmax.advise)"
    if isinstance(layouts, Layout | str | bytes | Mapping) or not isinstance(layouts, Iterable):
        raise wrong_type("layouts", expected, layouts)
    found = list(layouts)
    if not found:
        raise AdviceInputError("expected at least one layout in layouts=. Got none.")
    lengths = f"{len(dims)} positive chunk lengths (dimensions {dims})"
    checked = []
    for i, layout in enumerate(found):
        name = f"layouts[{i}]"
        if not isinstance(layout, Layout):
            hint = " (an encoding's {'chunks': c, 'shards': s} is Layout(c, s))" if isinstance(layout, Mapping) else ""
            raise wrong_type(name, f"a Layout(chunks, shards or None){hint}", layout)
        shapes: list[tuple[int, ...] | None] = []
        for field, value in (("chunks", layout.chunks), ("shards", layout.shards)):
            if value is None and field == "shards":
                shapes.append(None)
                continue
            if isinstance(value, str | bytes) or not isinstance(value, Iterable):
                raise wrong_type(f"{name}.{field}", f"a tuple of {lengths}", value)
            value = tuple(value)
            if any(not is_whole(n) for n in value):
                raise wrong_type(f"{name}.{field}", f"a tuple of {lengths}", value)
            if len(value) != len(dims) or any(n < 1 for n in value):
                raise AdviceInputError(f"expected layouts of {lengths}, as Layout(chunks, shards or None). Got "
                                       f"{name} = {layout!r} instead.")
            shapes.append(tuple(int(n) for n in value))
        chunks, shards = shapes
        assert chunks is not None
        layout = Layout(chunks, shards)
        if shards is not None and any(s % c for s, c in zip(shards, chunks, strict=True)):
            raise AdviceInputError(f"expected shards that are whole multiples of the chunks. Got {name} = {layout!r}.")
        if layout.chunks_per_object() > MAX_SHARD_CHUNKS:
            raise AdviceInputError(
                f"expected shards of at most {MAX_SHARD_CHUNKS:,} chunks (tuning.MAX_SHARD_CHUNKS: the advisor lays "
                f"out every chunk of a shard to cost it). Got {name} = {layout!r}, of "
                f"{layout.chunks_per_object():,} chunks a shard."
            )
        checked.append(layout)
    return checked
