"""How many ranges, and how many bytes between the chunks, a sequence of box selections reads from shards it reads
by ranges, for many layouts at once, in numpy: what lets `bounds.SearchBounds` bound a batch's requests and bytes
as `counting.count_read` counts them, rather than as one request and the chunks' own bytes per shard. And of a
read that finds no index cached (a pointwise read), the index request of each shard it reads by ranges and the
bytes and parts of each it reads whole.

Our reader reads the chunks a selection touches in a shard as byte ranges in the shard's (Morton) order, merged
when the stored bytes between two are at most ``coalesce_gap`` (`counting.coalesced_runs`): each unmerged gap is
one more request; each merged one, more bytes. A shard's chunks are all ``chunk_enc`` bytes but those partly
outside the array (compressed: their fraction of it), so a gap of ``g`` chunks holds between ``g`` times the
shard's smallest chunk and ``g * chunk_enc`` bytes: a gap is counted only where both ends of that range agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xarray_zarrmax.advise import kernels
from xarray_zarrmax.advise.morton import block_offsets, whole_blocks
from xarray_zarrmax.tuning import MAX_WINDOW_OBJECTS, STREAM_BYTES


@dataclass(frozen=True, slots=True)
class Ranged:
    """For ``rows`` (indices into the layouts given), at least the requests beyond one per shard a selection
    reads, and the bytes between its chunks, of the shards read by ranges (those a selection touches in fewer
    than ``full_shard_fraction`` of their chunks: by ranges whether or not their index is cached; and, of a read
    of several selections, a shard an earlier one touched: its index cached). The reads by ranges and those of a
    whole shard, as a read that finds no index cached makes them (a pointwise read, `counting._count_points`)."""

    rows: np.ndarray  # (r,) the layouts counted (`CHUNKS_PER_WINDOW`)
    requests: np.ndarray  # (r,) gaps too wide to merge
    gap_bytes: np.ndarray  # (r,) bytes of the gaps merged
    # of a pointwise read (`ranged_points`; 0 from `ranged_runs`, whose reads may find an index cached:
    # `revisits` counts those), which finds no index cached: a read (of one shard) by ranges costs its index's
    # request, and one of at least ``full_shard_fraction`` of the shard's chunks reads the whole shard
    by_ranges: np.ndarray  # (r,) reads by ranges, one chunk or more
    whole_extra: np.ndarray  # (r,) bytes at least of whole shards' chunks not touched (0 on a local store)
    whole_parts: np.ndarray  # (r,) requests beyond one a whole shard, read in ``split_size`` parts (0 locally)


#: Chunks a selection touches on average, at most, for a layout's gaps to be counted (others keep one request a
#: shard): counting costs about as much a chunk as the model's costing of a whole window (`counting.count_read`
#: groups a window's objects by footprint), so past this the search does better to cost the layout
CHUNKS_PER_WINDOW = 256


#: A pointwise read's gaps are counted for layouts where it touches at most this many windows' chunks
#: (`CHUNKS_PER_WINDOW` each), however many points it has: counting is per chunk, and a read of 10^4 points
#: touching 256 chunks each would cost far more than costing the layout (`counting._count_points`)
POINT_WINDOWS = 16


def ranged_runs(shape: np.ndarray, chunks: np.ndarray, outer: np.ndarray, per_object: np.ndarray,
                starts: np.ndarray, stops: np.ndarray, chunk_enc: np.ndarray, compressed: bool,
                full_shard_fraction: float, coalesce_gap: int, local: bool, itemsize: int,
                several: bool = False) -> Ranged:
    """`Ranged` of the sharded layouts ``chunks`` in ``outer`` (``(k, ndim)``; ``per_object`` their chunks per
    shard, ``chunk_enc`` their encoded chunk bytes) for the box selections ``starts``/``stops``
    (``(windows, ndim)``). ``local``: a local read of `tuning.STREAM_BYTES` or more from a shard reads its ranges
    in capped pieces (`counting.capped_runs`: no fewer requests, but no gap's bytes are known to be read).
    ``several``: the selections are some of a read of more than one (`counting.count_read` then caches each
    shard's index from its first touch on, so a shard touched again is read by ranges however many of its
    chunks)."""
    k, ndim = chunks.shape
    windows = starts.shape[0]
    first = starts[None] // chunks[:, None]  # (k, windows, ndim): the chunks each selection touches
    span = (stops[None] - 1) // chunks[:, None] - first + 1
    totals = np.prod(span, axis=2).sum(axis=1)
    countable = np.flatnonzero(totals <= CHUNKS_PER_WINDOW * windows)
    box_row = np.repeat(np.arange(k), windows)  # one box of chunks a (layout, selection)
    boxes = countable[:, None] * windows + np.arange(windows)[None]
    layouts = _Layouts(shape, chunks, outer, per_object, chunk_enc, compressed, full_shard_fraction,
                       coalesce_gap, local, itemsize)
    return _counted(layouts, countable, totals, box_row[boxes.ravel()], boxes.ravel(),
                    first.reshape(-1, ndim)[boxes.ravel()], span.reshape(-1, ndim)[boxes.ravel()], several=several)


def ranged_points(shape: np.ndarray, chunks: np.ndarray, outer: np.ndarray, per_object: np.ndarray,
                  starts: np.ndarray, stops: np.ndarray, dims: list[int], points: np.ndarray,
                  chunk_enc: np.ndarray, compressed: bool, full_shard_fraction: float, coalesce_gap: int,
                  local: bool, itemsize: int, index_bytes: np.ndarray, split_size: int,
                  gaps: bool = True) -> Ranged:
    """`ranged_runs` of a pointwise read (as `counting._count_points` reads it): along ``dims`` the distinct
    chunks holding its ``points`` (``(count, len(dims))``), along the others the box ``starts``/``stops``
    (``(ndim,)``); each object read as one fetch of the chunks it holds, its index never cached (``index_bytes``
    per layout; an object store reads a whole shard in ``split_size`` parts). ``gaps``: whether to count the
    gaps (the costly part) or only the reads by ranges and whole."""
    k, ndim = chunks.shape
    if points.shape[0] == 0:
        empty = np.zeros(0)
        return Ranged(np.zeros(0, dtype=np.int64), empty, empty, empty, empty, empty)
    # per layout, the distinct chunks holding a point (along dims): one box of chunks each
    row, flat = _point_chunks(chunks[:, dims], points)
    first = (starts[None] // chunks)[row]  # (boxes, ndim)
    span = ((stops[None] - 1) // chunks - starts[None] // chunks + 1)[row]
    first[:, dims] = flat
    span[:, dims] = 1
    totals = np.bincount(row, weights=np.prod(span, axis=1), minlength=k)
    countable = np.flatnonzero(totals <= CHUNKS_PER_WINDOW * min(points.shape[0], POINT_WINDOWS))
    keep = np.isin(row, countable)
    layouts = _Layouts(shape, chunks, outer, per_object, chunk_enc, compressed, full_shard_fraction,
                       coalesce_gap, local, itemsize, np.asarray(index_bytes, dtype=np.float64), split_size)
    return _counted(layouts, countable, totals, row[keep], row[keep], first[keep], span[keep],
                    None if gaps else np.zeros(k, dtype=bool))


def _point_chunks(lengths: np.ndarray, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of chunk ``lengths`` (``(k, m)``), the distinct chunks holding ``points`` (``(count, m)``): each
    chunk's row (ascending) and its chunk along each of the m dimensions. Worked out once per distinct row of
    lengths (a search's layouts share a few), in blocks of at most 2^22 (lengths, point) pairs."""
    m = lengths.shape[1]
    distinct, inverse = np.unique(lengths, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    firsts, found = [], []
    step = max(1, (1 << 22) // max(1, points.shape[0]))
    for a in range(0, distinct.shape[0], step):
        part = distinct[a:a + step]
        row = np.repeat(np.arange(part.shape[0]), points.shape[0])
        flat = (points[None] // part[:, None, :]).reshape(-1, m)
        order = np.lexsort((*flat.T[::-1], row))
        row, flat = row[order], flat[order]
        new = np.ones(row.size, dtype=bool)
        new[1:] = (row[1:] != row[:-1]) | np.any(flat[1:] != flat[:-1], axis=1)
        firsts.append(a + row[new])
        found.append(flat[new])
    owner, ids = np.concatenate(firsts), np.concatenate(found)
    # each layout's: those of its row of lengths, in order
    per = np.bincount(owner, minlength=distinct.shape[0])
    start = np.cumsum(per) - per
    counts = per[inverse]
    row = np.repeat(np.arange(lengths.shape[0]), counts)
    at = np.repeat(start[inverse], counts) + np.arange(row.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return row, ids[at]


@dataclass(frozen=True, slots=True)
class _Layouts:
    """The layouts of a count and how they are read (`ranged_runs`' arguments)."""

    shape: np.ndarray
    chunks: np.ndarray
    outer: np.ndarray
    per_object: np.ndarray
    chunk_enc: np.ndarray
    compressed: bool
    fraction: float
    gap: int
    local: bool
    itemsize: int
    index_bytes: np.ndarray | None = None  # a pointwise read's (its index never cached); None: a batch's
    split_size: int = 1


def _counted(layouts: _Layouts, countable: np.ndarray, totals: np.ndarray, box_row: np.ndarray, group: np.ndarray,
             first: np.ndarray, span: np.ndarray, gapped: np.ndarray | None = None, several: bool = False) -> Ranged:
    """`Ranged` of the layouts ``countable`` from boxes of chunks (``first``, ``span``: ``(boxes, ndim)``), each of a
    layout (``box_row``, ascending) and of a fetch ``group`` (the boxes of a group in a shard are one read), in
    blocks of up to 2^20 chunks (``totals``: each layout's chunks); ``gapped``: per layout, whether its gaps are
    counted (None: all)."""
    requests, gap_bytes, by_ranges, whole_extra, whole_parts = np.zeros((5, countable.size))
    bounds = np.searchsorted(box_row, countable)  # each counted layout's first box
    a = 0
    while a < countable.size:
        room = np.cumsum(totals[countable[a:]])
        step = max(1, int(np.searchsorted(room, 1 << 20, side="right")))
        b = min(a + step, countable.size)
        lo, hi = int(bounds[a]), int(bounds[b]) if b < countable.size else box_row.size
        found = _runs(layouts, box_row[lo:hi], group[lo:hi], first[lo:hi], span[lo:hi], gapped, several)
        requests[a:b], gap_bytes[a:b], by_ranges[a:b], whole_extra[a:b], whole_parts[a:b] = (
            part[countable[a:b]] for part in found)
        a = b
    return Ranged(countable, requests, gap_bytes, by_ranges, whole_extra, whole_parts)


def _runs(layouts: _Layouts, box_row: np.ndarray, group: np.ndarray, first: np.ndarray,
          span: np.ndarray, gapped: np.ndarray | None = None, several: bool = False) -> tuple[np.ndarray, ...]:
    """Per layout (indexed as given), the gaps too wide to merge, the bytes of those merged, the reads by
    ranges, and of the reads of a whole shard its bytes beyond the chunks touched and its parts beyond one, of
    the boxes of chunks given: each split by shard, and of each (group, shard) read by ranges, its chunks in the
    shard's order (`morton.block_offsets`, in blocks of chunks in a row)."""
    shape, chunks, outer = layouts.shape, layouts.chunks, layouts.outer
    k, ndim = chunks.shape
    per = outer // chunks  # (k, ndim): a shard's chunks along each dimension
    low = first // per[box_row]  # (boxes, ndim): the first and last shard touched along each dimension
    shards = (first + span - 1) // per[box_row] - low + 1
    # The shards a box crosses strictly inside its range along a dimension are read alike (every chunk along it,
    # none at the array's edge): one stands for them all, counted as many times. Only where it still tells reads
    # apart: along a dimension where every box of the layout crosses the same shards (a pointwise read's boxes
    # along the dimensions not pointed; a batch's maps along a whole dimension), so that the reads of one
    # group, and a later group finding an earlier one's shard (``several``: its index cached), are alike in each
    # of them; or anywhere when each group is a box of its own and none finds another's shards
    alike = np.ones(shards.shape, dtype=bool)
    if (several or layouts.index_bytes is not None) and box_row.size:
        new_layout = np.r_[True, box_row[1:] != box_row[:-1]]  # (box_row ascends)
        begins, owner = np.flatnonzero(new_layout), np.cumsum(new_layout) - 1
        for ends in (low, low + shards):
            alike &= (np.minimum.reduceat(ends, begins, axis=0) == np.maximum.reduceat(ends, begins, axis=0))[owner]
    kinds = np.where(alike & (shards > 2), 3, shards)
    count = np.prod(kinds, axis=1)  # shards (or kinds of shard) each box touches
    entries = int(count.sum())
    box: np.ndarray | slice
    if (count == 1).all():  # each box in one shard (a pointwise read's chunks, most windows): no repeats
        box, row, digits = slice(None), box_row, np.zeros(entries, dtype=np.int64)
    else:
        box = np.repeat(np.arange(box_row.size), count)
        row = box_row[box]
        digits = np.arange(entries) - np.repeat(np.cumsum(count) - count, count)
    lo, length, stored, grid = (np.empty((entries, ndim), dtype=np.int64) for _ in range(4))
    last = np.ones((entries, ndim))  # the fraction inside the array of the shard's last chunk along each
    shard = np.zeros(entries, dtype=np.int64)  # the shard's place in the grid of shards
    weight = np.ones(entries)  # the shards each stands for
    for d in range(ndim - 1, -1, -1):
        along, crossed = kinds[box, d], shards[box, d]
        kind = digits % along
        digits //= along
        squeezed = along < crossed  # first, inside (standing for crossed - 2), last
        o = low[box, d] + np.where(squeezed & (kind == 2), crossed - 1, kind)  # the shard along d
        weight *= np.where(squeezed & (kind == 1), crossed - 2, 1)
        k_d, c, n = per[row, d], chunks[row, d], int(shape[d])
        begin = o * k_d
        start = np.maximum(first[box, d], begin)
        stop = np.minimum(first[box, d] + span[box, d], begin + k_d)
        lo[:, d], length[:, d], grid[:, d] = start - begin, stop - start, k_d
        extent = np.minimum(outer[row, d], n - o * outer[row, d])  # the shard's elements inside the array
        stored[:, d] = -(-extent // c)
        if layouts.compressed:  # a compressed chunk partly outside is stored at its fraction inside
            last[:, d] = (extent - (stored[:, d] - 1) * c) / c
        shard = shard * -(-n // outer[row, d]) + o
    # one read per (group, shard): its boxes together
    order = np.lexsort((shard, group[box]))
    lo, length, stored, grid, last, row = lo[order], length[order], stored[order], grid[order], last[order], row[order]
    weight = weight[order]
    key_group, key_shard = group[box][order], shard[order]
    starts_read = np.ones(order.size, dtype=bool)
    starts_read[1:] = (key_group[1:] != key_group[:-1]) | (key_shard[1:] != key_shard[:-1])
    read = np.cumsum(starts_read) - 1  # each box's read
    cells = np.prod(length, axis=1)
    pieces = np.bincount(read, weights=cells)  # chunks touched in each read
    # by ranges, whether or not its index is cached; one chunk has no gap
    read_layout, read_weight = row[starts_read], weight[starts_read]  # a read's boxes stand for as many shards
    ranged = pieces < layouts.fraction * layouts.per_object[read_layout]
    by_ranges, whole_extra, whole_parts = np.zeros((3, k))
    if layouts.index_bytes is not None:  # no index cached (a pointwise read): each read by ranges or whole
        by_ranges = np.bincount(read_layout[ranged], weights=read_weight[ranged], minlength=k)
        whole_extra, whole_parts = _whole(layouts, ~ranged, read_layout, read_weight, read, stored[starts_read],
                                          last[starts_read], pieces, lo, length, stored, last, k)
    if several:  # and a shard touched again (its index cached) by ranges, however many of its chunks
        ranged = ranged | _touched_again(read_layout, key_group[starts_read], key_shard[starts_read], read_weight)
    keep = (ranged & (pieces > 1))[read] & (True if gapped is None else gapped[row])
    if not keep.any():  # no read by ranges of more than one chunk: no gap to count
        return np.zeros(k), np.zeros(k), by_ranges, whole_extra, whole_parts
    decoded = layouts.itemsize * np.prod(chunks.astype(np.float64), axis=1)  # a chunk's bytes, per layout
    requests, gap_bytes = gap_counts(read[keep], row[keep], lo[keep], length[keep], stored[keep], grid[keep],
                                     last[keep], pieces, read_weight, layouts.chunk_enc.astype(np.float64), decoded,
                                     layouts.compressed, layouts.local, layouts.gap, float(STREAM_BYTES), k)
    return requests, gap_bytes, by_ranges, whole_extra, whole_parts


def gap_counts(read: np.ndarray, row: np.ndarray, lo: np.ndarray, length: np.ndarray, stored: np.ndarray,
               grid: np.ndarray, last: np.ndarray, pieces: np.ndarray, read_weight: np.ndarray, chunk_enc: np.ndarray,
               decoded: np.ndarray, compressed: bool, local: bool, gap: int, stream_bytes: float,
               k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per layout (``k``), the gaps too wide to merge and the bytes of those merged, of boxes of chunks (``lo``,
    ``length``, ``stored``, ``grid``, ``last``: ``(boxes, ndim)``, each inside its shard's stored chunks) each of a
    ``read`` (ascending) of a layout ``row``: each read's chunks in the shard's order, as blocks of chunks in a row
    (``pieces``: each read's chunks; ``read_weight``: the shards it stands for; ``chunk_enc`` and ``decoded``: a
    chunk's stored and decoded bytes per layout; ``local``: a read of ``stream_bytes`` or more is read in capped
    pieces, no gap's bytes known to be read). Compiled where the package was built so (`kernels`), else
    `_gaps_numpy`: the same counts."""
    if kernels.compiled is None:
        return _gaps_numpy(read, row, lo, length, stored, grid, last, pieces, read_weight, chunk_enc, decoded,
                           compressed, local, gap, stream_bytes, k)
    requests, gap_bytes = np.zeros(k), np.zeros(k)
    ints, floats = kernels.ints, kernels.floats
    kernels.compiled.gap_counts(int(np.shape(read)[0]), ints(read), ints(row), ints(lo), ints(length),
                                ints(stored), ints(grid), floats(last), floats(pieces), floats(read_weight),
                                floats(chunk_enc), floats(decoded), bool(compressed), bool(local),
                                min(int(gap), _HUGE), float(stream_bytes), requests, gap_bytes)
    return requests, gap_bytes


#: Past any byte count: a larger ``coalesce_gap`` or ``split_size`` (a `Reader` takes any) passes to the compiled
#: kernels as this, with the same counts (nothing is that large), not as an int64 that would overflow
_HUGE = 1 << 62


def _gaps_numpy(read: np.ndarray, row: np.ndarray, lo: np.ndarray, length: np.ndarray, stored: np.ndarray,
                grid: np.ndarray, last: np.ndarray, pieces: np.ndarray, read_weight: np.ndarray,
                chunk_enc: np.ndarray, decoded: np.ndarray, compressed: bool, local: bool, gap: int,
                stream_bytes: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`gap_counts` in numpy: the reference its compiled form is held to, and the count where it was not built."""
    # each box's chunks as blocks of chunks in a row in the shard's order (`morton.whole_blocks`: a column through
    # a shard along its first dimensions reads blocks of 2^k chunks): gaps lie only between blocks
    width = whole_blocks(lo, length, stored, grid)
    count = -(-length // width)
    cells = np.prod(count, axis=1)  # blocks a box
    rank, before, own, held = block_offsets(lo, count, stored, grid, last, width)
    cell_read = np.repeat(read, cells)
    order = np.argsort(cell_read * int(rank.max(initial=0) + 1) + rank, kind="stable")  # by read, then rank
    cell_read, rank, before, own, held = cell_read[order], rank[order], before[order], own[order], held[order]
    new = np.ones(cell_read.size, dtype=bool)  # the first block of its read: no gap before it
    new[1:] = cell_read[1:] != cell_read[:-1]
    cell_row = np.repeat(row, cells)[order]
    partial = np.repeat((last < 1).any(axis=1), cells)[order]  # a shard holding chunks of other sizes
    enc = chunk_enc[cell_row]
    # the chunks between a block and the one before it in its read, and their sizes summed (in whole chunks):
    # stored at max(1, round(size x chunk_enc)) bytes each, so between size x chunk_enc - half a byte and a
    # byte more each, and at least a byte (in a shard of whole chunks only, each chunk_enc)
    between, sizes = np.zeros(cell_read.size), np.zeros(cell_read.size)
    between[1:] = rank[1:] - rank[:-1] - held[:-1]
    sizes[1:] = before[1:] - before[:-1] - own[:-1]
    if compressed:  # (sums of fractions: a hair of rounding off, either way)
        slack = np.where(partial, 1e-9 * between * enc, 0.0)
        rounding = np.where(partial, between, 0.0)
        least = np.where(between > 0, np.maximum(between, sizes * enc - 0.5 * rounding - slack), 0.0)
        most = np.where(between > 0, sizes * enc + rounding + slack, 0.0)
    else:
        least = most = between * enc
    unmerged = ~new & (least > gap)  # too wide to merge, whatever the rounding
    merged = ~new & (most <= gap)  # merged whatever it is
    if local:  # read in capped pieces: no more bytes known to be read
        merged &= (pieces[cell_read] * decoded[cell_row] < stream_bytes)
    cell_weight = read_weight[cell_read]
    requests = np.bincount(cell_row[unmerged], weights=cell_weight[unmerged], minlength=k)
    gap_bytes = np.bincount(cell_row[merged], weights=least[merged] * cell_weight[merged], minlength=k)
    return requests, gap_bytes


def _touched_again(layout: np.ndarray, group: np.ndarray, shard: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Per read (of a ``group`` from a ``shard``, sorted by group then shard; a layout's groups in the order they
    are read), whether its shard's index is cached (`counting._count_selection`): an earlier group of its layout
    touched the shard, and both touch at most `tuning.MAX_WINDOW_OBJECTS` shards (a larger one is costed as a
    whole, neither using nor filling the cache); ``weight``: the shards each read stands for (`_runs`)."""
    new_group = np.ones(group.size, dtype=bool)
    new_group[1:] = group[1:] != group[:-1]
    number = np.cumsum(new_group) - 1
    small = (np.bincount(number, weights=weight) <= MAX_WINDOW_OBJECTS)[number]
    order = np.lexsort((group, shard, layout))  # per (layout, shard), its reads in order
    fills = small[order].astype(np.int64)
    new_run = np.ones(order.size, dtype=bool)
    new_run[1:] = (layout[order][1:] != layout[order][:-1]) | (shard[order][1:] != shard[order][:-1])
    earlier = np.cumsum(fills) - fills  # reads that fill the cache before each, over all runs
    run_start = np.maximum.accumulate(np.where(new_run, np.arange(order.size), 0))
    cached = np.zeros(group.size, dtype=bool)
    cached[order] = (earlier - earlier[run_start] > 0) & small[order]
    return cached


def _whole(layouts: _Layouts, whole: np.ndarray, read_layout: np.ndarray, read_weight: np.ndarray, read: np.ndarray,
           held: np.ndarray, held_last: np.ndarray, pieces: np.ndarray, lo: np.ndarray, length: np.ndarray,
           stored: np.ndarray, last: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per layout, of the reads ``whole`` (of a whole shard: ``held``/``held_last`` its stored chunks and their
    last one's fraction along each dimension; ``pieces`` its chunks touched; ``read_weight`` the shards each read
    stands for; each box's ``read``, ``lo``,
    ``length``, ``stored`` and ``last``): the bytes at least of its chunks not touched, and its parts beyond one
    (`revisits` counts the same of a box's first touch). Each stored chunk is at least a byte, and (compressed) at
    least its fraction inside the array of ``chunk_enc`` less half a byte (`counting._stored_bytes` rounds); none
    on a local store (`counting._object_fetch` may read a large shard there by ranges)."""
    if layouts.local or layouts.index_bytes is None or not whole.any():
        return np.zeros(k), np.zeros(k)
    # a box's chunks' fractions summed: per dimension its length, less what its last lacks if it holds the last
    along = length - np.where(lo + length == stored, 1.0 - last, 0.0)
    touched_fraction = np.bincount(read, weights=np.prod(along, axis=1), minlength=whole.size)[whole]
    chunks = np.prod(held[whole], axis=1).astype(np.float64)
    fraction = np.prod(held[whole] - 1 + held_last[whole], axis=1)
    enc = layouts.chunk_enc[read_layout[whole]].astype(np.float64)
    untouched = chunks - pieces[whole]
    extra, nbytes = untouched * enc, chunks * enc  # every chunk whole (or not compressed): chunk_enc each
    if layouts.compressed:
        partial = (held_last[whole] < 1).any(axis=1)
        extra = np.where(partial, np.maximum(untouched, enc * (fraction - touched_fraction) - 0.5 * untouched),
                         extra)
        nbytes = np.where(partial, np.maximum(chunks, enc * fraction - 0.5 * chunks), nbytes)
    parts = np.ceil((nbytes + layouts.index_bytes[read_layout[whole]]) / max(1, layouts.split_size)) - 1
    times = read_weight[whole]
    return (np.bincount(read_layout[whole], weights=np.maximum(extra, 0.0) * times, minlength=k),
            np.bincount(read_layout[whole], weights=parts * times, minlength=k))
