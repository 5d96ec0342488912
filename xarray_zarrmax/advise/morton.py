"""zarr's Morton (Z) order of a shard's chunks, in numpy: the order of a whole grid (`morton_order`,
`morton_permutation`), and the rank of the cells of given boxes in it without listing the grid (`box_offsets`). Pure
arithmetic; the model (`counting`) and the search's bounds (`ranged`) lay shards out with it.
"""

from __future__ import annotations

import numpy as np


def morton_permutation(shape: tuple[int, ...]) -> np.ndarray:
    """The flat (C-order) indices of a grid's cells in Morton order (see `morton_order`): their codes
    (`morton_codes`) sorted, by a running count over the codes' space when it is at most 4 times the cells
    (each dimension rounds up to a power of two: up to 2^ndim times), which a sort would cost n log n for; else
    by a sort (a 7-D grid of 5 a side spans 26x its cells)."""
    codes = morton_codes(shape)
    if int(codes.max(initial=0)) + 1 > 4 * codes.size:
        return np.argsort(codes)  # distinct codes: any sort gives the one order
    present = np.zeros(int(codes.max(initial=0)) + 1, dtype=np.int64)
    present[codes] = 1
    return inverse((np.cumsum(present) - 1)[codes])


def morton_codes(shape: tuple[int, ...]) -> np.ndarray:
    """Each cell's Morton code, flat in C order: its coordinates' bits interleaved, lowest first and dimension
    0 first at each bit, a dimension dropping out once its bits (those of its largest coordinate) are used up.
    The code of a cell is the OR of its coordinates' parts, each built on one dimension's coordinates alone and
    broadcast."""
    bits = [(int(n) - 1).bit_length() for n in shape]
    parts = [np.zeros(int(n), dtype=np.int64) for n in shape]
    out_bit = 0
    for bit in range(max(bits, default=0)):
        for d, used in enumerate(bits):
            if bit < used:
                parts[d] |= ((np.arange(int(shape[d]), dtype=np.int64) >> bit) & 1) << out_bit
                out_bit += 1
    code = np.zeros(shape, dtype=np.int64)
    for d, part in enumerate(parts):
        code |= part.reshape([-1 if i == d else 1 for i in range(len(shape))])
    return code.reshape(-1)


def morton_order(shape: tuple[int, ...]) -> np.ndarray:
    """Every coordinate of a grid of ``shape`` in zarr-python's Morton (Z) order, ``(n, ndim)``: sorted by a
    code interleaving their bits, lowest first and dimension 0 first at each bit, a dimension dropping out
    once its bits (those of its largest coordinate) are used up. zarr builds tuples of Python ints for it;
    costing a search's layouts spent 70% of its time there."""
    if not shape:
        return np.zeros((1, 0), dtype=np.int64)  # a 0-d grid: its one coordinate
    return np.stack(np.unravel_index(morton_permutation(shape), shape), axis=-1).astype(np.int64)


def inverse(order: np.ndarray) -> np.ndarray:
    """The position of each index in the permutation ``order``."""
    ranks = np.empty(order.size, dtype=np.int64)
    ranks[order] = np.arange(order.size)
    return ranks


def box_offsets(lo: np.ndarray, length: np.ndarray, stored: np.ndarray, grid: np.ndarray,
                last: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every cell of each box ``[lo[i], lo[i] + length[i])`` (inside ``[0, stored[i])``, all ``(boxes, ndim)``),
    box by box and each in C order: its rank in the Morton order of a grid of ``grid[i]`` among the cells of
    ``[0, stored[i])``, the sizes of those before it summed, and its own size (a cell's size: the product over
    dimensions of ``last[i, d]`` where it is the last stored along ``d``, 1 elsewhere).

    A rank counts the stored cells whose code is less than the cell's: per bit of the cell's code that is 1,
    those that share the code above it and have a 0 there, whatever they hold below. Along the bit's own
    dimension those are ``2^b`` values below the cell's (all stored); along each other, a run of ``2^free``
    values from the cell's prefix, cut at ``stored``. So each count (and each sum of sizes) is a product of
    per-dimension ones, and those depend on one coordinate each: they are worked out per box and dimension for
    the box's few coordinates along it, then multiplied per cell. O(bits x ndim) vector operations, whatever the
    grid's size."""
    lo, length = np.asarray(lo, dtype=np.int64), np.asarray(length, dtype=np.int64)
    stored, grid = np.asarray(stored, dtype=np.int64), np.asarray(grid, dtype=np.int64)
    short = 1.0 - np.asarray(last, dtype=np.float64)  # what a dimension's last cell lacks of a whole one
    boxes, ndim = lo.shape
    per_box = np.prod(length, axis=1)
    cells = int(per_box.sum())
    bits = _bit_length(grid - 1)
    # per dimension, a table of each box's coordinates along it; each cell's row in each table
    tables, rows = [], []
    offset = np.arange(cells) - np.repeat(np.cumsum(per_box) - per_box, per_box)
    box = np.repeat(np.arange(boxes), per_box)
    for d in range(ndim - 1, -1, -1):
        base = np.cumsum(length[:, d]) - length[:, d]
        owner = np.repeat(np.arange(boxes), length[:, d])
        value = lo[owner, d] + np.arange(int(length[:, d].sum())) - base[owner]
        tables.append((value, stored[owner, d], bits[owner, d], short[owner, d]))
        along = length[box, d]
        rows.append(base[box] + offset % along)
        offset //= along
    tables.reverse()
    rows.reverse()
    # a dimension of one cell in every grid holds no bit: its size (the cell's) scales every sum, its count is 1
    scale = np.ones(cells)
    active = []
    for d in range(ndim):
        if bits[:, d].any():
            active.append(d)
        else:
            scale *= (1.0 - tables[d][3])[rows[d]]

    def fixed(d: int, free: int) -> tuple[np.ndarray, np.ndarray]:
        """Per cell, the stored values along d that share its bits >= ``free``: how many, their sizes summed."""
        value, top, used, lack = tables[d]
        f = np.minimum(free, used)
        prefix = (value >> f) << f
        count = np.minimum(top - prefix, np.left_shift(1, f))  # >= 1: the cell's own value is stored
        size = count - np.where(prefix + count == top, lack, 0.0)
        return count[rows[d]].astype(np.float64), size[rows[d]]

    top_level = int(bits.max(initial=0))
    # F(b + 1) per active dimension: at the top, every value (the dimension's whole run)
    above = {d: fixed(d, top_level) for d in active}
    rank, before = np.zeros(cells), np.zeros(cells)
    for b in range(top_level - 1, -1, -1):
        # the bit (b, d) of the code lies above (b, d') for d' < d and below it for d' > d: at a cell's bit
        # (b, d), dimensions after d are fixed down to bit b, those before it down to bit b + 1
        at = {d: fixed(d, b) for d in active}
        after_count, after_size = np.ones(cells), np.ones(cells)
        suffix = {}
        for d in reversed(active):
            suffix[d] = (after_count, after_size)
            after_count, after_size = after_count * at[d][0], after_size * at[d][1]
        before_count, before_size = np.ones(cells), np.ones(cells)
        for d in active:
            value, _, used, _ = tables[d]
            one = ((b < used) & (((value >> b) & 1) == 1))[rows[d]] * float(1 << b)  # 2^b values below, stored
            rank += one * before_count * suffix[d][0]
            before += one * before_size * suffix[d][1]
            before_count, before_size = before_count * above[d][0], before_size * above[d][1]
        above = at
    size = scale.copy()
    for d in active:
        value, top, _, lack = tables[d]
        size *= np.where(value == top - 1, 1.0 - lack, 1.0)[rows[d]]
    return rank.astype(np.int64), before * scale, size


def _bit_length(values: np.ndarray) -> np.ndarray:
    """``int.bit_length`` of each value (>= 0)."""
    out = np.zeros(values.shape, dtype=np.int64)
    v = values.copy()
    while np.any(v > 0):
        out += v > 0
        v >>= 1
    return out
