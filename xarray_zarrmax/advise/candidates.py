"""The layouts the search considers: (chunks, shards) generated per dimension within the chunk-size range,
and the neighbours of a layout that refining it steps to.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from xarray_zarrmax.advise.model import Layout
from xarray_zarrmax.tuning import MAX_CHUNK_BYTES, MIN_CHUNK_BYTES, REFINE_FACTORS


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


def candidate_layouts(shape: Sequence[int], itemsize: int, *, per_dim: int = 6) -> list[Layout]:
    """Chunk shapes from powers of two and divisors per dimension, each unsharded and in shards of 2, 8 and
    all of its chunks per dimension (every combination)."""
    low, high = _chunk_bytes_range(shape, itemsize)
    layouts: list[Layout] = []
    per_dim_sizes = [_sizes(int(n), per_dim) for n in shape]
    for chunks in _product(per_dim_sizes):
        nbytes = itemsize * math.prod(chunks)
        if not low <= nbytes <= high:
            continue
        layouts.append(Layout(chunks))
        multiples = [sorted({k for k in (1, 2, 8, -(-int(n) // c)) if k <= -(-int(n) // c)})
                     for n, c in zip(shape, chunks, strict=True)]
        for ks in _product(multiples):
            if math.prod(ks) > 1:
                layouts.append(_sharded(chunks, ks))
    return layouts


def _product(options: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    return list(itertools.product(*options))


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
    return list(found)
