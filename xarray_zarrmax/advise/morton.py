"""zarr's Morton (Z) order of a shard's chunks, in numpy: the order of a whole grid (`morton_order`,
`morton_permutation`), and the rank of the cells of given boxes in it without listing the grid (`box_offsets`; of
blocks of cells in a row in it: `whole_blocks`, `block_offsets`). Pure arithmetic; the model (`counting`) and the
search's bounds (`ranged`) lay shards out with it.
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
    per-dimension ones, each depending on one coordinate: worked out per box for the box's few coordinates
    along each dimension, then combined (`_Levels`) from the last dimension to the first, as a box's cells are
    an outer product of its coordinates. O(bits x ndim) vector operations, whatever the grid's size."""
    rank, before, own, _ = block_offsets(lo, length, stored, grid, last, np.ones_like(np.asarray(lo)))
    return rank, before, own


def whole_blocks(lo: np.ndarray, length: np.ndarray, stored: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Per box (as `box_offsets`) and dimension, the width of the blocks its cells fall into that each lie whole
    in the box and together in the grid's Morton order: the longest run of the code's lowest bits (bit 0 of each
    dimension in turn, then bit 1, ...) along whose dimension the box is whole blocks of the bit's span (from a
    multiple of it, to a multiple of it or the last stored). A block's stored cells are then ranks in a row: a
    read's gaps lie only between its blocks (a column through a shard's chunks along its first dimensions is
    read as blocks of 2^k of them)."""
    length = np.asarray(length, dtype=np.int64)
    width = np.ones(length.shape, dtype=np.int64)
    # a box of one cell is a block of one stored cell, whatever its width: only longer boxes are looked at
    rows = np.flatnonzero((length > 1).any(axis=1))
    lo, length, stored = (np.asarray(a, dtype=np.int64)[rows] for a in (lo, length, stored))
    bits = _bit_length(np.asarray(grid, dtype=np.int64)[rows] - 1)
    found = np.ones(lo.shape, dtype=np.int64)
    going = np.ones(rows.size, dtype=bool)
    for b in range(int(bits.max(initial=0))):
        span = 1 << (b + 1)
        for d in range(lo.shape[1]):
            has = bits[:, d] > b  # the dimension holds a bit b: the next bit of the code
            whole = (lo[:, d] % span == 0) & ((length[:, d] % span == 0) | (lo[:, d] + length[:, d] == stored[:, d]))
            going &= ~has | whole
            found[:, d] = np.where(going & has, span, found[:, d])
        if not going.any():
            break
    width[rows] = found
    return width


def block_offsets(lo: np.ndarray, length: np.ndarray, stored: np.ndarray, grid: np.ndarray, last: np.ndarray,
                  width: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`box_offsets` of boxes of blocks (`whole_blocks`): ``length[i, d]`` blocks of ``width[i, d]`` cells along
    each dimension from ``lo[i]`` (a multiple of the width), each block cut at ``stored``. Per block, box by box
    and each in C order: the rank of its first cell, the sizes of the cells before it summed, its cells' sizes
    summed, and its stored cells (ranks in a row from the first's)."""
    lo, length = np.asarray(lo, dtype=np.int64), np.asarray(length, dtype=np.int64)
    stored, grid = np.asarray(stored, dtype=np.int64), np.asarray(grid, dtype=np.int64)
    last, width = np.asarray(last, dtype=np.float64), np.asarray(width, dtype=np.int64)
    if (length == 1).all():  # boxes of one block each (a read of points along every dimension): no box repeats
        return _offsets(lo, length, stored, grid, 1.0 - last, width)  # often enough to pay for finding them
    # boxes alike in every way have alike cells (a pointwise read crosses many shards at the same place in
    # each): each worked out once, then copied
    firsts, which = _distinct_rows(np.concatenate([lo, length, stored, grid, width, last.view(np.int64)], axis=1))
    found = _offsets(lo[firsts], length[firsts], stored[firsts], grid[firsts], 1.0 - last[firsts], width[firsts])
    if firsts.size == lo.shape[0]:
        return found
    per_box = np.prod(length, axis=1)
    start = (np.cumsum(per_box[firsts]) - per_box[firsts])[which]  # each box's first block in ``found``
    at = np.repeat(start - (np.cumsum(per_box) - per_box), per_box) + np.arange(int(per_box.sum()))
    return found[0][at], found[1][at], found[2][at], found[3][at]


def _offsets(lo: np.ndarray, length: np.ndarray, stored: np.ndarray, grid: np.ndarray, short: np.ndarray,
             width: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`block_offsets` of distinct boxes (``short``: what a dimension's last cell lacks of a whole one)."""
    boxes, ndim = lo.shape
    bits = _bit_length(grid - 1)
    # a dimension of one cell in every grid holds no bit (its boxes are one cell long): its size (the cell's)
    # scales every sum, its count is 1
    active = [d for d in range(ndim) if bits[:, d].any()]
    scale = np.prod(1.0 - short[:, [d for d in range(ndim) if d not in active]], axis=1)
    per_cell = np.repeat(scale, np.prod(length, axis=1))
    if not active:
        return (np.zeros(per_cell.size, dtype=np.int64), np.zeros(per_cell.size), per_cell,
                np.ones(per_cell.size, dtype=np.int64))
    levels = _Levels(lo[:, active], length[:, active], stored[:, active], bits[:, active], short[:, active],
                     width[:, active])
    sized = bool((short[:, active] > 0).any())  # some cell smaller than a whole one: sizes summed apart
    top_level = int(bits.max(initial=0))
    # F(b + 1) per dimension: at the top, every value (the dimension's whole run)
    above = [levels.fixed(j, top_level, sized) for j in range(len(active))]
    rank, before = np.zeros(per_cell.size), np.zeros(per_cell.size)
    for b in range(top_level - 1, -1, -1):
        # the bit (b, d) of the code lies above (b, d') for d' < d and below it for d' > d: at a cell's bit
        # (b, d), dimensions after d are fixed down to bit b, those before it down to bit b + 1
        at = [levels.fixed(j, b, sized) for j in range(len(active))]
        one = [levels.below(j, b) for j in range(len(active))]
        counts = levels.combine(one, [f[0] for f in above], [f[0] for f in at])
        rank += counts
        before += levels.combine(one, [f[1] for f in above], [f[1] for f in at]) if sized else counts
        above = at
    blocks = bool((width[:, active] > 1).any())
    held = levels.product([levels.held(j) for j in range(len(active))]) if blocks else 1.0
    own = levels.product([levels.own(j) for j in range(len(active))]) if sized or blocks else held
    return (rank.astype(np.int64), before * per_cell, own * per_cell,
            np.broadcast_to(np.asarray(held), per_cell.shape).astype(np.int64))


class _Levels:
    """The cells of boxes (``(boxes, m)`` arrays), as outer products of per-dimension tables of each box's
    coordinates along it: level ``j`` holds, per box, the cells of its dimensions ``j`` and after, in C order.
    Each entry of level ``j`` is one coordinate along ``j`` (``table[j]``: its place in that dimension's table)
    times one entry of level ``j + 1`` (``child[j]``): so a per-cell sum over dimensions of per-dimension
    products is built from the last dimension to the first in one pass, not once per dimension."""

    def __init__(self, lo: np.ndarray, length: np.ndarray, stored: np.ndarray, bits: np.ndarray,
                 short: np.ndarray, width: np.ndarray) -> None:
        boxes, m = lo.shape
        self.values: list[np.ndarray] = []  # per dimension, each box's coordinates along it (its blocks' first)
        self.tops: list[np.ndarray] = []  # and for each, its box's stored length, bits, last cell's lack and
        self.used: list[np.ndarray] = []  # block width
        self.lacks: list[np.ndarray] = []
        self.widths: list[np.ndarray] = []
        self.table: list[np.ndarray | None] = []
        self.child: list[np.ndarray | None] = []
        if (length == 1).all():  # one block a box: each table is the boxes' own, in order (no gather needed)
            for mine, given in zip((self.values, self.tops, self.used, self.lacks, self.widths),
                                   (lo, stored, bits, short, width), strict=True):
                mine.extend(np.ascontiguousarray(column) for column in given.T)
            self.table, self.child = [None] * m, [None] * m
            return
        for j in range(m):
            start = np.cumsum(length[:, j]) - length[:, j]
            owner = np.repeat(np.arange(boxes), length[:, j])
            self.values.append(lo[owner, j] + (np.arange(owner.size) - start[owner]) * width[owner, j])
            self.tops.append(stored[owner, j])
            self.used.append(bits[owner, j])
            self.lacks.append(short[owner, j])
            self.widths.append(width[owner, j])
        below = np.ones(boxes, dtype=np.int64)  # the cells of a box's dimensions after j
        below_start = np.zeros(boxes, dtype=np.int64)
        for j in range(m - 1, -1, -1):
            size = below * length[:, j]
            start = np.cumsum(size) - size
            box = np.repeat(np.arange(boxes), size)
            offset = np.arange(box.size) - start[box]
            along = offset // below[box]
            self.table.insert(0, (np.cumsum(length[:, j]) - length[:, j])[box] + along)
            self.child.insert(0, below_start[box] + offset - along * below[box])
            below, below_start = size, start

    def fixed(self, j: int, free: int, sized: bool) -> tuple[np.ndarray, np.ndarray]:
        """Per coordinate along j, the stored values that share its bits >= ``free``: how many, and (if
        ``sized``) their sizes summed."""
        value, top, used, lack = self.values[j], self.tops[j], self.used[j], self.lacks[j]
        f = np.minimum(free, used)
        prefix = (value >> f) << f
        count = np.minimum(top - prefix, np.left_shift(1, f)).astype(np.float64)  # >= 1: its own value is stored
        return count, (count - np.where(prefix + count == top, lack, 0.0) if sized else count)

    def below(self, j: int, b: int) -> np.ndarray:
        """Per coordinate along j, the values below it at bit b (2^b, all stored and whole) where that bit is
        1, else 0."""
        return ((b < self.used[j]) & (((self.values[j] >> b) & 1) == 1)) * float(1 << b)

    def held(self, j: int) -> np.ndarray:
        """Per coordinate along j, the stored values of its block (its width, cut at the last stored)."""
        return np.minimum(self.widths[j], self.tops[j] - self.values[j])

    def own(self, j: int) -> np.ndarray:
        """Per coordinate along j, its block's sizes summed: less where it holds the last stored."""
        held = self.held(j)
        return np.where(self.values[j] + held == self.tops[j], held - self.lacks[j], held.astype(np.float64))

    def product(self, factors: list[np.ndarray]) -> np.ndarray:
        """Per cell, the product over dimensions of ``factors`` (one per coordinate, per dimension)."""
        out = _at(factors[-1], self.table[-1])
        for j in range(len(factors) - 2, -1, -1):
            out = _at(factors[j], self.table[j]) * _at(out, self.child[j])
        return out

    def combine(self, one: list[np.ndarray], before: list[np.ndarray], after: list[np.ndarray]) -> np.ndarray:
        """Per cell, the sum over dimensions d of ``one[d]`` times the product of ``before`` over the dimensions
        before d and of ``after`` over those after it (each a per-coordinate table per dimension)."""
        m = len(one)
        total = _at(one[-1], self.table[-1])  # over dimensions j and after
        suffix = _at(after[-1], self.table[-1])  # product of `after` over dimensions j and after
        for j in range(m - 2, -1, -1):
            at, kid_total, kid_suffix = self.table[j], _at(total, self.child[j]), _at(suffix, self.child[j])
            total = _at(one[j], at) * kid_suffix + _at(before[j], at) * kid_total
            if j:
                suffix = _at(after[j], at) * kid_suffix
        return total


def _at(values: np.ndarray, index: np.ndarray | None) -> np.ndarray:
    """``values[index]``, or ``values`` itself where the index is every place in order (None)."""
    return values if index is None else values[index]


def _distinct_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each set of equal rows of an integer ``table`` (ascending), and the set of each row (an
    index into those): rows keyed by a hash of their columns (`_row_keys`), each checked against its key's first
    row (if two sets share a key, by their bytes)."""
    if table.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    _, firsts, which = np.unique(_row_keys(table), return_index=True, return_inverse=True)
    if not np.array_equal(table, table[firsts[which]]):
        rows = np.ascontiguousarray(table).view(np.dtype((np.void, table.dtype.itemsize * table.shape[1])))
        _, firsts, which = np.unique(rows.ravel(), return_index=True, return_inverse=True)
    order = np.argsort(firsts)  # sets in order of their first row
    return firsts[order], inverse(order)[which.ravel()]


def _row_keys(table: np.ndarray) -> np.ndarray:
    """A 64-bit key of each row of an integer ``table``: its columns folded in one by one (`_mix`)."""
    key = np.zeros(table.shape[0], dtype=np.uint64)
    for column in table.T:
        key = _mix(key ^ column.astype(np.uint64))
    return key


def _mix(x: np.ndarray) -> np.ndarray:
    """A bijection of 64-bit words that spreads every bit (a multiply by an odd constant, wrapping, then an
    xor-shift)."""
    with np.errstate(over="ignore"):
        x = x * np.uint64(0x9E3779B97F4A7C15)
    return x ^ (x >> np.uint64(31))  # type: ignore[no-any-return]


def _bit_length(values: np.ndarray) -> np.ndarray:
    """``int.bit_length`` of each value (>= 0)."""
    out = np.zeros(values.shape, dtype=np.int64)
    v = values.copy()
    while np.any(v > 0):
        out += v > 0
        v >>= 1
    return out
