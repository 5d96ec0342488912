"""A pointwise read's requests from shards, bounded from where its chunks lie rather than from their ranks in a
shard's Morton order (`ranged` ranks them, at a cost per layout and point): what lets `bounds.SearchBounds` prove most
sharded layouts slower than a read of scattered points at its quick bound.

A shard read by ranges fetches its touched chunks in Morton order, merging two consecutive ones when the stored bytes
between them are at most ``coalesce_gap`` (`counting.coalesced_runs`). Let chunk ``a`` come before chunk ``b`` in a
shard. Where their codes first differ (bit ``p``, of dimension ``e`` at level ``j``), the cells sharing the code
above ``p`` form two boxes, ``a``'s (bit ``p`` 0) wholly before ``b``'s: along ``e`` two adjacent intervals, along
each other dimension one interval holding both. A code grows with each coordinate, so the cells of ``a``'s box at or
past ``a`` in every dimension lie between them, as do those of ``b``'s box at or before ``b``.

- With the sharding known (`point_breaks`) the boxes are known: their stored chunks are counted, each whole one
  ``chunk_enc`` bytes, each partly outside the array (compressed) its fraction of that less half a byte and at least a
  byte (`counting._stored_bytes` rounds), and a pair with more than ``coalesce_gap`` bytes of them between is a break
  between runs. (Whole chunks alone left most breaks of a read of scattered points uncounted where a shard spans the
  array's edge, and the search took such layouts up to the ranges' level: docs/dev/advise.md, Search time.)
- For every sharding at once (`point_components`): along a dimension where ``delta = b - a >= 0`` both boxes reach
  across ``delta + 1`` cells (along ``e`` the two share ``delta + 1``), along the others at least one, so at least
  ``prod(delta + 1 where delta >= 0) - 2`` cells lie between; and ``e`` holds bit ``j``, at least the highest bit
  of any ``|delta|``, with ``delta`` along ``e`` above 0. A pair *could merge* when, in an order that allows such
  an ``e``, that count leaves at most ``coalesce_gap`` bytes (whole chunks where neither chunk is partly outside the
  array; a byte each otherwise). Runs chain consecutive chunks that could merge, so a read by ranges needs at least
  as many runs as the components of its chunks in that graph (a run's consecutive chunks join their vertices).
  Where the read also spans two chunks or more along a dimension it does not point along, the codes may first
  differ along that one: then both boxes hold both chunks' places along every pointed dimension, and at least
  ``2 * prod(delta + 1 where delta >= 0) - 2`` cells lie between, with no condition on the bits (a 4x4 shard of
  unit chunks, points at 0 and 3 along dimension 0 and chunks 1-2 along dimension 1: chunks (3, 1) and (0, 2) are
  codes 7 and 8, with none between). A shard read whole (at least
  ``full_shard_fraction`` of its chunks touched) is one fetch: two chunks share one only if a shard of at most
  ``touched / full_shard_fraction`` chunks holds both, a box of ``prod(|delta| + 1)`` chunks at least.
"""

from __future__ import annotations

import numpy as np

from xarray_zarrmax.advise import kernels

#: Points of a read at most for which `point_breaks` is worked out, and `point_components` (every pair of them, per
#: chunk shape): past them the bounds are not raised, and the search ranks the chunks instead (`ranged`). Measured
#: (docs/dev/logs/advise_search.md): with 100 random points on a 4-D array the components of every chunk shape
#: took 1 s and saved none of it (3.4 s against 2.0 s on local disk, 82 s against 84 s on MinIO). Chosen for time on
#: the search-time table's reads of points, not fitted on either validation set
MOST_POINTS, MOST_PAIRED = 256, 64

#: Products past this are all "too many cells" (a gap past it is taken as this): saturated, never wrapped
_SATURATED = 1 << 62


def point_components(lengths: np.ndarray, points: np.ndarray, extent: np.ndarray, full_cells: np.ndarray,
                     any_cells: int, partial_all: np.ndarray, whole_cells: np.ndarray, across: np.ndarray,
                     compressed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per row of chunk ``lengths`` along a pointwise read's dimensions (``(rows, m)``), the components of the
    chunks holding its ``points`` (``(count, m)``, inside an array ``extent`` long along each): joined where they
    could merge in one range (first), and also where one shard read whole could hold both (second).

    ``full_cells``: per row, the most whole chunks whose bytes fit in the reader's gap (``coalesce_gap //
    chunk_enc``); ``any_cells``: the most chunks of a byte or more that do (``coalesce_gap``), taken for a pair
    where either chunk, or (``partial_all``, per row) any chunk the read touches along its other dimensions, may be
    partly outside the array and stored smaller (compressed only); ``whole_cells``: per row, the most chunks a shard
    read whole may hold (the read's chunks over ``full_shard_fraction``); ``across``: per row, whether the read
    touches two chunks or more along a dimension it does not point along (two chunks' codes may first differ
    there). Compiled where the package was built so (`kernels`), else `_components_numpy`: the same counts."""
    rows = lengths.shape[0]
    if rows == 0 or points.shape[0] == 0:
        return np.zeros(rows), np.zeros(rows)
    full_cells = np.minimum(np.asarray(full_cells, dtype=np.int64), _SATURATED)
    any_cells = min(int(any_cells), _SATURATED)
    if kernels.compiled is None:
        return _components_numpy(lengths, points, extent, full_cells, any_cells, partial_all, whole_cells, across,
                                 compressed)
    merged, joined = np.zeros(rows), np.zeros(rows)
    ints, floats = kernels.ints, kernels.floats
    kernels.compiled.point_components(rows, lengths.shape[1], points.shape[0], ints(lengths), ints(points),
                                      ints(extent), ints(full_cells), any_cells, ints(partial_all),
                                      floats(whole_cells), ints(across), bool(compressed), merged, joined)
    return merged, joined


def _components_numpy(lengths: np.ndarray, points: np.ndarray, extent: np.ndarray, full_cells: np.ndarray,
                      any_cells: int, partial_all: np.ndarray, whole_cells: np.ndarray, across: np.ndarray,
                      compressed: bool) -> tuple[np.ndarray, np.ndarray]:
    """`point_components` in numpy: the reference its compiled form is held to, and the count where it was not
    built. Points in one chunk are one vertex, joined."""
    rows, m = lengths.shape
    count = points.shape[0]
    first, second = np.triu_indices(count, k=1)
    merged, joined = np.zeros(rows), np.zeros(rows)
    step = max(1, (1 << 20) // max(1, first.size * m))
    for a in range(0, rows, step):
        part = lengths[a:a + step]
        cells = points[None] // part[:, None, :]  # (r, count, m)
        # a chunk partly outside the array (compressed: stored smaller), along any of its dimensions
        last = (-(-extent // part) - 1)[:, None, :]
        partial = compressed & ((cells == last) & (extent % part != 0)[:, None, :]).any(axis=2)
        delta = cells[:, second] - cells[:, first]  # (r, pairs, m)
        # the level their codes first differ at is at least the highest bit of any |delta|; the dimension that
        # differs there first must hold that bit, and is later in the one that comes later
        bits = _bit_length(-(-extent // part) - 1)[:, None, :]  # (r, 1, m): a shard's bits along each, at most
        level = _bit_length(np.abs(delta)).max(axis=2, keepdims=True) - 1
        can = bits > level
        ahead_any = _product(np.where(delta >= 0, delta + 1, 1))
        behind_any = _product(np.where(delta <= 0, 1 - delta, 1))
        ahead = np.where(((delta > 0) & can).any(axis=2), ahead_any, _SATURATED)
        behind = np.where(((delta < 0) & can).any(axis=2), behind_any, _SATURATED)
        between = np.minimum(ahead, behind) - 2
        # first apart along a dimension the read does not point along: both boxes reach across every delta
        other = _product(np.stack([np.minimum(ahead_any, behind_any), np.full(ahead_any.shape, 2)], axis=-1)) - 2
        between = np.where(np.asarray(across[a:a + step], dtype=bool)[:, None], np.minimum(between, other), between)
        loose = partial[:, first] | partial[:, second] | np.asarray(partial_all[a:a + step], dtype=bool)[:, None]
        merges = (between <= np.where(loose, any_cells, full_cells[a:a + step, None])) | (delta == 0).all(axis=2)
        box = _product(np.abs(delta) + 1).astype(np.float64)
        shares = merges | (box <= np.asarray(whole_cells[a:a + step], dtype=np.float64)[:, None])
        merged[a:a + step] = _components(merges, first, second, count)
        joined[a:a + step] = _components(shares, first, second, count)
    return merged, joined


def _ranks(local: np.ndarray, code: np.ndarray, place: np.ndarray, bits: np.ndarray, region: np.ndarray,
           lack: np.ndarray | None = None, upto: np.ndarray | None = None) -> np.ndarray:
    """Per cell (its ``local`` coordinates and ``code`` in its shard, its layout's ``place`` of each (bit,
    dimension) in a code and ``bits`` along each), the cells of the box ``[0, region)`` whose codes are less: per bit
    of its code that is 1, those sharing the code above it with 0 there (`morton.box_offsets`), a product over
    dimensions of an aligned interval cut at the region. ``lack``: per cell and dimension, what the region's last
    cell along it lacks of a whole one; then their sizes summed (in whole cells, floats), not their count.
    ``upto``: per cell, the last code position counted (None: all). A bit's term depends only on the code above it, so
    two cells of a shard whose codes first differ at position p have the same terms above p: the difference of their
    ranks is that of their terms up to p (`_breaks` counts no more)."""
    n, ndim = local.shape
    out = np.zeros(n, dtype=np.int64 if lack is None else np.float64)
    for b in range(place.shape[1]):
        for e in range(ndim):
            at = place[:, b, e]
            on = (at >= 0) & (((code >> np.maximum(at, 0)) & 1) == 1)
            if upto is not None:
                on &= at <= upto
            if not on.any():
                continue
            count = np.ones(n, dtype=out.dtype)
            for d in range(ndim):
                free = np.full(n, b + 1) if d == e else np.minimum(b + (d < e), bits[:, d])
                low = (local[:, d] >> free) << free  # (along e: with its bit b 0, the lower half)
                width = np.int64(1) << (b if d == e else free)
                inside = np.maximum(0, np.minimum(low + width, region[:, d]) - low)
                if lack is not None:  # the region's last cell, where the interval holds it, at its size
                    inside = np.where((inside > 0) & (low + width >= region[:, d]), inside - lack[:, d], inside)
                count *= inside
            out += np.where(on, count, 0)
    return out


def _bit_length(n: np.ndarray) -> np.ndarray:
    """The bits of each non-negative int64 in ``n`` (0 of 0)."""
    out = np.zeros(n.shape, dtype=np.int64)
    n = n.copy()
    while (n > 0).any():
        out += n > 0
        n >>= 1
    return out


def _product(factors: np.ndarray) -> np.ndarray:
    """The product over the last axis of positive int64 ``factors``, saturated at `_SATURATED`."""
    out = np.ones(factors.shape[:-1], dtype=np.int64)
    for d in range(factors.shape[-1]):
        f = np.minimum(factors[..., d], _SATURATED)
        out = np.where(out > _SATURATED // f, _SATURATED, out * f)
    return out


def _components(edges: np.ndarray, first: np.ndarray, second: np.ndarray, count: int) -> np.ndarray:
    """Per row of ``edges`` (``(r, pairs)``: whether pair ``(first, second)`` is joined), the components of
    ``count`` vertices: each vertex labelled by the least it reaches, spread along the edges until none changes."""
    r = edges.shape[0]
    labels = np.tile(np.arange(count), (r, 1)).reshape(-1)
    row, pair = np.nonzero(edges)
    left, right = row * count + first[pair], row * count + second[pair]
    base = np.repeat(np.arange(r) * count, count)
    while left.size:
        before = labels.copy()
        least = np.minimum(labels[left], labels[right])
        np.minimum.at(labels, left, least)
        np.minimum.at(labels, right, least)
        labels = labels[base + labels]  # each to its label's label: a vertex of its component, no greater
        if (labels == before).all():
            break
    return (labels.reshape(r, count) == np.arange(count)[None]).sum(axis=1).astype(np.float64)


def point_breaks(chunks: np.ndarray, per: np.ndarray, shape: np.ndarray, points: np.ndarray, chunk_enc: np.ndarray,
                 gap: int, fraction: float, compressed: bool, ranked: bool = False,
                 split: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per sharded layout (``chunks`` and chunks per shard ``per``, ``(k, ndim)``) of an array of ``shape``, a
    pointwise read of one chunk per point (``points``: ``(count, ndim)``, every dimension): the shards it touches,
    those it reads by ranges (fewer than ``fraction`` of their chunks touched), and the breaks at least between
    their runs: consecutive chunks of a shard read by ranges (in Morton order) with more than ``gap`` bytes of stored
    chunks (`_least_between`) between them, counted as the module says with the shard's own alignment; or
    (``ranked``) also every stored chunk between them, from their ranks among the shard's chunks (`_ranks`: the
    model's break but for half a byte a chunk partly outside the array, a few times the cost, spent only on the pairs
    the boxes leave unbroken); and then also the bytes at least between the pairs merged whatever their chunks'
    rounding (`_most_between` at most ``gap``), which the read fetches with them (0 unranked). ``split``: a large
    call split over threads (`kernels.across_threads`). A point outside the array: a ValueError naming it."""
    k, ndim = chunks.shape
    shards, ranged, breaks, merged = np.zeros((4, k))
    if k == 0 or points.shape[0] == 0:
        return shards, ranged, breaks, merged
    gap = min(int(gap), _SATURATED)
    if kernels.compiled is not None:  # (the kernel leaves the layouts past int64's room at 0 and refuses a point
        # outside the array, as below: its tables of a layout's chunks end at the array's)
        compiled, ints = kernels.compiled, kernels.ints
        chunks, per, shape, points, enc = ints(chunks), ints(per), ints(shape), ints(points), kernels.floats(chunk_enc)

        def part(lo: int, hi: int) -> None:  # (the kernel runs without the GIL: parts at once on a machine's cores)
            compiled.point_breaks(hi - lo, ndim, points.shape[0], chunks[lo:hi], per[lo:hi], shape, points, enc[lo:hi],
                                  gap, float(fraction), bool(compressed), bool(ranked), shards[lo:hi], ranged[lo:hi],
                                  breaks[lo:hi], merged[lo:hi])

        if split:
            kernels.across_threads(k, part)
        else:
            part(0, k)
        return shards, ranged, breaks, merged
    outside = np.argwhere((points < 0) | (points >= shape[None]))
    if outside.size:
        i, d = (int(v) for v in outside[0])
        raise ValueError(f"point_breaks: point {i} is {int(points[i, d])} along dimension {d}, expected 0 to "
                         f"{int(shape[d]) - 1}")
    # a shard's codes and the grid of shards' keys in int64, or no bound (0): far past any layout the search lists
    grid = -(-shape[None] // chunks)
    # (the shards across as an exact saturated product, as the kernel's: a float product rounds up to 2^62 from below)
    room = np.flatnonzero((_bit_length(per - 1).sum(axis=1) <= 62) & (_product(-(-grid // per)) < _SATURATED))
    step = max(1, (1 << 20) // (points.shape[0] * ndim))
    for a in range(0, room.size, step):
        at = room[a:a + step]
        shards[at], ranged[at], breaks[at], merged[at] = _breaks(chunks[at], per[at], shape, points, chunk_enc[at],
                                                                 gap, fraction, compressed, ranked)
    return shards, ranged, breaks, merged


def _breaks(chunks: np.ndarray, per: np.ndarray, shape: np.ndarray, points: np.ndarray, chunk_enc: np.ndarray,
            gap: int, fraction: float, compressed: bool,
            ranked: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`point_breaks` of a block of layouts."""
    k, ndim = chunks.shape
    grid = -(-shape[None] // chunks)  # (k, ndim) chunks along each dimension
    cell = points[None] // chunks[:, None]  # (k, count, ndim)
    shard = cell // per[:, None]
    local = cell - shard * per[:, None]
    # each point's shard as one key, its place in the shard as its Morton code (`morton.morton_codes`: bits lowest
    # first, dimension 0 first at each, a dimension dropping out once its bits are used up)
    across = -(-grid // per)
    key = np.zeros(cell.shape[:2], dtype=np.int64)
    for d in range(ndim):
        key = key * across[:, None, d] + shard[:, :, d]
    bits = _bit_length(per - 1)  # (k, ndim)
    code = np.zeros(cell.shape[:2], dtype=np.int64)
    place = np.zeros((k, int(bits.max(initial=0)), ndim), dtype=np.int64)  # each (bit, dimension)'s position
    at = np.zeros(k, dtype=np.int64)
    for bit in range(place.shape[1]):
        for d in range(ndim):
            uses = bits[:, d] > bit
            place[:, bit, d] = np.where(uses, at, -1)
            code |= np.where(uses[:, None], ((local[:, :, d] >> bit) & 1) << at[:, None], 0)
            at += uses
    row = np.repeat(np.arange(k), points.shape[0])
    order = np.lexsort((code.ravel(), key.ravel(), row))
    row, key, code = row[order], key.ravel()[order], code.ravel()[order]
    local, shard = local.reshape(-1, ndim)[order], shard.reshape(-1, ndim)[order]
    distinct = np.ones(row.size, dtype=bool)  # points in one chunk: one
    distinct[1:] = (row[1:] != row[:-1]) | (key[1:] != key[:-1]) | (code[1:] != code[:-1])
    row, key, code, local, shard = row[distinct], key[distinct], code[distinct], local[distinct], shard[distinct]
    new = np.ones(row.size, dtype=bool)  # the first chunk of its shard
    new[1:] = (row[1:] != row[:-1]) | (key[1:] != key[:-1])
    begins = np.flatnonzero(new)
    pieces = np.diff(np.append(begins, row.size))
    per_object = np.prod(per.astype(np.float64), axis=1)
    by_ranges = pieces < fraction * per_object[row[begins]]
    shards = np.bincount(row[begins], minlength=k).astype(np.float64)
    ranged = np.bincount(row[begins], weights=by_ranges, minlength=k)
    # consecutive chunks of a shard read by ranges: the boxes of whole chunks between them
    pair = np.flatnonzero(~new & np.repeat(by_ranges, pieces))
    if pair.size == 0:
        return shards, ranged, np.zeros(k), np.zeros(k)
    r, x, y = row[pair], local[pair - 1], local[pair]
    split = _bit_length(code[pair - 1] ^ code[pair]) - 1  # the highest bit their codes differ at
    hit = place[r] == split[:, None, None]  # (pairs, bits, ndim): that bit's level and dimension
    level, dim = hit.any(axis=2).argmax(axis=1), hit.any(axis=1).argmax(axis=1)
    before_split = np.arange(ndim)[None] < dim[:, None]  # dimensions whose bit at the split's level is below it
    free = np.where(before_split, level[:, None] + 1, level[:, None])  # each dimension's bits below the split
    free = np.minimum(free, bits[r])
    mask = (np.int64(1) << free) - 1
    top, bottom = x | mask, y & ~mask
    # the shard's whole chunks along each dimension (a compressed chunk partly outside the array is smaller)
    stored = np.minimum(per[r], grid[r] - shard[pair] * per[r])
    partial = compressed & (shape[None] % chunks[r] != 0) & (shard[pair] * per[r] + stored == grid[r])
    full_end = stored - 1 - partial
    # and what its last stored chunk along each lacks of a whole one (stored at its fraction inside the array)
    lack = np.where(partial, 1.0 - (shape[None] % chunks[r]) / chunks[r], 0.0)
    end = stored - 1
    after_to, before_from = np.minimum(top, end), bottom
    after = np.prod(np.maximum(0, np.minimum(top, full_end) - x + 1), axis=1)
    before = np.prod(np.maximum(0, np.minimum(y, full_end) - bottom + 1), axis=1)
    x_full, y_full = (x <= full_end).all(axis=1), (y <= full_end).all(axis=1)
    # every stored chunk of the two boxes, and their sizes (x and y are stored: they hold points)
    after_all = np.prod(after_to - x + 1, axis=1)
    before_all = np.prod(y - before_from + 1, axis=1)
    after_size = np.prod(after_to - x + 1 - np.where(after_to == end, lack, 0.0), axis=1)
    before_size = np.prod(y - before_from + 1 - np.where(y == end, lack, 0.0), axis=1)
    x_size = np.prod(1.0 - np.where(x == end, lack, 0.0), axis=1)
    y_size = np.prod(1.0 - np.where(y == end, lack, 0.0), axis=1)
    enc = chunk_enc[r]
    cut = _least_between(after - x_full + before - y_full, after_all - 1 + before_all - 1,
                         after_size - x_size + before_size - y_size, after_size + before_size, enc) > gap
    if ranked:  # every stored chunk between them, from their ranks (where the boxes alone do not already break)
        rest = np.flatnonzero(~cut)
        p, rr = pair[rest], r[rest]
        ranks = [[_ranks(v[rest], c, place[rr], bits[rr], region, lack[rest] if sized else None, split[rest])
                  for v, c in ((y, code[p]), (x, code[p - 1]))]
                 for region, sized in ((full_end[rest] + 1, False), (stored[rest], False), (stored[rest], True))]
        (whole_y, whole_x), (all_y, all_x), (size_y, size_x) = ranks
        between = (whole_y - whole_x - x_full[rest], all_y - all_x - 1, size_y - size_x - x_size[rest], size_y,
                   enc[rest])
        least = _least_between(*between)
        cut[rest] = least > gap
        joined = _most_between(*between) <= gap  # merged in one range whatever the rounding: their bytes read too
        merged = np.bincount(rr[joined], weights=least[joined], minlength=k)
    else:
        merged = np.zeros(k)
    return shards, ranged, np.bincount(r, weights=cut, minlength=k), merged


def _least_between(whole: np.ndarray, cells: np.ndarray, sizes: np.ndarray, scale: np.ndarray,
                   chunk_enc: np.ndarray) -> np.ndarray:
    """The bytes at least of ``cells`` stored chunks between two, ``whole`` of them whole (``chunk_enc`` bytes each)
    and the rest partly outside the array, their sizes summed with the whole ones' in ``sizes`` (in whole chunks):
    such a chunk is stored at its fraction of ``chunk_enc`` rounded, and at least a byte (`counting._stored_bytes`),
    so at least its fraction's bytes less half a byte. ``scale``: the largest of the sums ``sizes`` was worked out
    from, for the float error allowed."""
    part = cells - whole
    fractions = (sizes - whole) * chunk_enc - 0.5 * part - 1e-9 * (scale + 1) * chunk_enc
    return whole * chunk_enc + np.maximum(part, fractions)


def _most_between(whole: np.ndarray, cells: np.ndarray, sizes: np.ndarray, scale: np.ndarray,
                  chunk_enc: np.ndarray) -> np.ndarray:
    """`_least_between`'s bytes at most: a chunk partly outside the array at its fraction's bytes and a byte more."""
    part = cells - whole
    return whole * chunk_enc + (sizes - whole) * chunk_enc + part + 1e-9 * (scale + 1) * chunk_enc
