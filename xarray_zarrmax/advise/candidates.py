"""The layouts the search considers: (chunks, shards) generated per dimension within the chunk-size range,
and the neighbours of a layout that refining it steps to.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from xarray_zarrmax.advise.model import Layout
from xarray_zarrmax.advise.validate import is_whole, wrong_type
from xarray_zarrmax.errors import AdviceInputError
from xarray_zarrmax.tuning import (
    MAX_CANDIDATES,
    MAX_CHUNK_BYTES,
    MAX_SHARD_CHUNKS,
    MIN_CHUNK_BYTES,
    REFINE_FACTORS,
)


def _sizes(n: int, limit: int = 6) -> list[int]:
    """Chunk lengths to try along a dimension of length ``n``: powers of two below it and ``n`` itself (and
    its divisors near them, so the last chunk is not a sliver), thinned to ``limit`` spread geometrically."""
    options = {n}
    p = 1
    while p < n:
        options.add(p)
        # a few hundred tries at most: linear in n, a dimension of 10^9 took 26 s
        div = next((d for d in range(p, min(2 * p, n, p + 512)) if n % d == 0), None)
        if div is not None:
            options.add(div)
        p *= 2
    ordered = sorted(options)
    if len(ordered) <= limit:
        return ordered
    picks = np.unique(np.round(np.geomspace(1, len(ordered), limit)).astype(int) - 1)
    return sorted({ordered[int(i)] for i in picks} | {n})


def _chunk_bytes_range(shape: Sequence[int], itemsize: int) -> tuple[int, int]:
    """Decoded bytes of a candidate's chunk: 64 KiB to 64 MiB (for small arrays, from a 64th of them)."""
    total = itemsize * math.prod(shape)
    return min(MIN_CHUNK_BYTES, max(itemsize, total // 64)), MAX_CHUNK_BYTES


def _sharded(chunks: tuple[int, ...], multiples: Sequence[int]) -> Layout:
    """``chunks`` in shards of ``multiples`` chunks per dimension (unsharded when that is one chunk)."""
    if math.prod(multiples) == 1:
        return Layout(chunks)
    return Layout(chunks, tuple(k * c for k, c in zip(multiples, chunks, strict=True)))


#: Shard multiples tried per dimension, richest first ("all" is the dimension's whole length in chunks)
_MULTIPLES = ((1, 2, 8, "all"), (1, 8, "all"), (1, "all"))


def candidate_layouts(shape: Sequence[int], itemsize: int, *, per_dim: int = 6,
                      limit: int = MAX_CANDIDATES) -> list[Layout]:
    """Chunk shapes from powers of two and divisors per dimension, each unsharded and in shards of 2, 8 and
    all of its chunks per dimension (every combination of at most `MAX_SHARD_CHUNKS` chunks).

    At most ``limit`` layouts: where there would be more (many dimensions), fewer shard multiples, then fewer
    chunk lengths per dimension are tried, and in the end every k-th layout is taken. Bounded time and
    memory whatever the array's size: only lengths are enumerated, never its elements or chunks."""
    low, high = _chunk_bytes_range(shape, itemsize)
    shape = [int(n) for n in shape]
    long = sum(n > 1 for n in shape)
    start = per_dim
    while start > 2 and start ** long > limit:  # the chunk shapes alone within the limit
        start -= 1
    last: list[Layout] = []
    for per in range(start, 1, -1):
        per_dim_sizes = [_sizes(n, per) for n in shape]
        for multiples in _MULTIPLES:
            found = list(itertools.islice(_layouts(shape, itemsize, per_dim_sizes, multiples, low, high),
                                          limit + 1))
            if len(found) <= limit:
                return found
            if per == 2 and multiples is _MULTIPLES[-1]:
                last = list(_layouts(shape, itemsize, per_dim_sizes, multiples, low, high))
    # still too many (many long dimensions): every k-th, spread over the whole list
    step = len(last) / limit
    return [last[int(i * step)] for i in range(limit)]


def _layouts(shape: Sequence[int], itemsize: int, per_dim_sizes: Sequence[Sequence[int]],
             multiples: Sequence[int | str], low: int, high: int) -> Iterator[Layout]:
    for chunks in itertools.product(*per_dim_sizes):
        nbytes = itemsize * math.prod(chunks)
        if not low <= nbytes <= high:
            continue
        yield Layout(chunks)
        options = []
        for n, c in zip(shape, chunks, strict=True):
            full = -(-n // c)
            options.append(sorted({k for k in (full if m == "all" else int(m) for m in multiples) if k <= full}))
        for ks in itertools.product(*options):
            if 1 < math.prod(ks) <= MAX_SHARD_CHUNKS:
                yield _sharded(chunks, ks)


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


def check_layouts(layouts: Any, dims: tuple[str, ...]) -> list[Layout] | None:
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
