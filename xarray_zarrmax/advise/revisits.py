"""Which shards a sequence of box selections touches for the first time, for many layouts at once, in numpy: what
lets `bounds.SearchBounds` count a batch's round trips and shard indexes as `counting.count_read` does, rather
than bound them by its first window alone.

Our reader caches a shard's index once it has read it (per open): a selection that touches a shard no earlier one
touched, and reads it by ranges (fewer of its chunks than ``full_shard_fraction``), waits for that index before
its ranges; a shard touched before is read by ranges at once. Each shard's index is parsed once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xarray_zarrmax.advise import kernels


@dataclass(frozen=True, slots=True)
class Revisits:
    """For ``rows`` (indices into the layouts given), per selection and in all: the counts `count_read` makes of
    the shards each touches first (its index not cached)."""

    rows: np.ndarray  # (r,) the layouts counted: those whose every selection touches at most `MAX_ENUMERATED`
    waits: np.ndarray  # (r, windows) bool: the selection touches a shard first and reads it by ranges
    first: np.ndarray  # (r,) shards touched at all: each index parsed once
    ranged_first: np.ndarray  # (r,) of those, read by ranges at their first touch: each an index request
    whole_extra: np.ndarray  # (r,) bytes at least that shards read whole at their first touch hold beyond the
    #                          chunks the selection touches in them
    parts: np.ndarray  # (r,) requests at least beyond one per shard read whole (in split_size parts)
    splits: np.ndarray  # (r, windows) bool: the selection reads a shard whole in more than one part


#: Objects a selection touches at most for its layout to be counted shard by shard (others keep the weaker bound)
MAX_ENUMERATED = 64


def revisits(shape: np.ndarray, chunks: np.ndarray, outer: np.ndarray, per_object: np.ndarray,
             starts: np.ndarray, stops: np.ndarray, full_shard_fraction: float, chunk_enc: np.ndarray,
             compressed: bool, index_bytes: np.ndarray, split_size: int | None, local: bool = False) -> Revisits:
    """`Revisits` of the sharded layouts ``chunks`` in ``outer`` (``(k, ndim)``; ``per_object`` their chunks per
    shard) for the box selections ``starts``/``stops`` (``(windows, ndim)``) read in order, as one open reads them.

    Each selection's shards are listed (layouts whose selections touch more than `MAX_ENUMERATED` are left out:
    ``rows`` says which were counted), each keyed by its position in the shard grid; sorted by (layout, key,
    selection), the first of each key is its first touch.
    """
    k, ndim = chunks.shape
    windows = starts.shape[0]
    lo = starts[None] // outer[:, None]  # (k, windows, ndim) first and last shard along each dimension
    hi = (stops[None] - 1) // outer[:, None]
    span = np.max(hi - lo + 1, axis=1)  # (k, ndim) the most shards any selection touches along each dimension
    countable = np.flatnonzero(np.prod(span.astype(np.float64), axis=1) <= MAX_ENUMERATED)
    waits = np.zeros((countable.size, windows), dtype=bool)
    first = np.zeros(countable.size, dtype=np.int64)
    ranged_first = np.zeros(countable.size, dtype=np.int64)
    whole_extra, parts = np.zeros(countable.size), np.zeros(countable.size)
    splits = np.zeros((countable.size, windows), dtype=bool)
    if countable.size == 0 or windows == 0:
        return Revisits(countable, waits, first, ranged_first, whole_extra, parts, splits)
    # in blocks of layouts, each selection's shards as one flat index into its layout's box of spans (digits
    # of mixed radix ``span``), padded to the largest box of the block
    # of a block (layouts sorted by it, so that blocks pad little)
    boxes = np.prod(span[countable], axis=1)
    by_box = np.argsort(boxes, kind="stable")
    a = 0
    while a < countable.size:
        step = max(1, (1 << 20) // max(1, windows * int(boxes[by_box[min(a + 255, countable.size - 1)]])))
        at = by_box[a:a + min(step, 256)]
        a += at.size
        rows = countable[at]
        block = _block if kernels.compiled is not None else _block_numpy
        waits[at], first[at], ranged_first[at], whole_extra[at], parts[at], splits[at] = block(
            shape, chunks[rows], outer[rows], per_object[rows], lo[rows], hi[rows], starts, stops, span[rows],
            int(boxes[at].max()), full_shard_fraction, chunk_enc[rows], compressed, index_bytes[rows], split_size)
    if local:
        whole_extra[:] = 0.0
    return Revisits(countable, waits, first, ranged_first, whole_extra, parts, splits)


def _block(shape: np.ndarray, chunks: np.ndarray, outer: np.ndarray, per_object: np.ndarray, lo: np.ndarray,
           hi: np.ndarray, starts: np.ndarray, stops: np.ndarray, span: np.ndarray, entries: int, fraction: float,
           chunk_enc: np.ndarray, compressed: bool, index_bytes: np.ndarray,
           split_size: int | None) -> tuple[np.ndarray, ...]:
    """`_block_numpy`, compiled (`kernels`): the same counts."""
    assert kernels.compiled is not None
    r, windows, ndim = lo.shape
    waits, splits = np.zeros((r, windows), dtype=bool), np.zeros((r, windows), dtype=bool)
    first, ranged_first = np.zeros(r, dtype=np.int64), np.zeros(r, dtype=np.int64)
    whole_extra, parts = np.zeros(r), np.zeros(r)
    ints, floats = kernels.ints, kernels.floats
    # split_size as the numpy form takes it (at least 1), and past any shard's bytes no larger than int64 holds
    split = -1 if split_size is None else min(max(1, int(split_size)), 1 << 62)
    kernels.compiled.first_touches(r, windows, ndim, ints(shape), ints(chunks), ints(outer), floats(per_object),
                                   ints(lo), ints(hi), ints(starts), ints(stops), ints(span), floats(chunk_enc),
                                   floats(index_bytes), float(fraction), bool(compressed), split, waits, first,
                                   ranged_first, whole_extra, parts, splits)
    return waits, first, ranged_first, whole_extra, parts, splits


def _block_numpy(shape: np.ndarray, chunks: np.ndarray, outer: np.ndarray, per_object: np.ndarray, lo: np.ndarray,
                 hi: np.ndarray, starts: np.ndarray, stops: np.ndarray, span: np.ndarray, entries: int,
                 fraction: float, chunk_enc: np.ndarray, compressed: bool, index_bytes: np.ndarray,
                 split_size: int | None) -> tuple[np.ndarray, ...]:
    """`revisits` of a block of layouts, each selection's shards at most ``entries`` (``span``'s product): the
    reference the compiled form (`_block`) is held to, and the count where it was not built."""
    r, windows, ndim = lo.shape
    grid = -(-shape[None] // outer)  # (r, ndim) shards along each dimension
    e = np.arange(entries)[None, None, :]
    below = np.ones((r, 1, 1), dtype=np.int64)  # the product of the spans after dimension d
    key = np.zeros((r, windows, entries), dtype=np.int64)
    inside = np.broadcast_to(e < np.prod(span, axis=1)[:, None, None], (r, windows, entries)).copy()
    # per entry: chunks touched; of the shard, its stored chunks and their fractions inside the array summed;
    # of the touched chunks, their fractions summed (products over dimensions of each dimension's)
    touched = np.ones((r, windows, entries), dtype=np.int64)
    held, held_fraction, touched_fraction = (np.ones((r, windows, entries)) for _ in range(3))
    for d in range(ndim - 1, -1, -1):
        digit = (e // below) % span[:, d, None, None]
        below = below * span[:, d, None, None]
        index = lo[:, :, d, None] + digit  # (r, windows, entries)
        o, c, n = outer[:, d, None, None], chunks[:, d, None, None], int(shape[d])
        begin = np.maximum(starts[None, :, d, None], index * o)
        end = np.minimum(np.minimum(stops[None, :, d, None], (index + 1) * o), n)
        along = (end - 1) // c - begin // c + 1
        extent = np.clip(n - index * o, 0, o)  # the shard's elements inside the array along d
        first_chunk = begin // c
        covered = np.minimum((first_chunk + along) * c, n) - first_chunk * c  # elements of the touched chunks
        key += index * np.prod(grid[:, d + 1:], axis=1)[:, None, None]
        inside &= index <= hi[:, :, d, None]
        touched *= along
        held *= -(-extent // c)
        held_fraction *= extent / c
        touched_fraction *= covered / c
    row = np.broadcast_to(np.arange(r)[:, None, None], key.shape)[inside]
    window = np.broadcast_to(np.arange(windows)[None, :, None], key.shape)[inside]
    keys = key[inside]
    ranged = (touched < fraction * per_object[:, None, None])[inside]
    # a shard read whole holds its untouched stored chunks too: each at least a byte, and at least its fraction
    # inside the array of chunk_enc less half a byte (`counting._stored_bytes` rounds), or chunk_enc uncompressed
    enc = chunk_enc[:, None, None]
    untouched = held - touched
    extra = (np.maximum(untouched, enc * (held_fraction - touched_fraction) - 0.5 * untouched) if compressed
             else untouched * enc)[inside]
    # and is read in split_size parts: the shard's stored chunks and its index
    stored = ((np.maximum(held, enc * held_fraction - 0.5 * held) if compressed else held * enc)
              + index_bytes[:, None, None])[inside]
    order = np.lexsort((window, keys, row))
    row, window, keys, ranged, extra, stored = (row[order], window[order], keys[order], ranged[order], extra[order],
                                                stored[order])
    is_first = np.ones(row.size, dtype=bool)
    is_first[1:] = (row[1:] != row[:-1]) | (keys[1:] != keys[:-1])
    waits = np.zeros(r * windows, dtype=bool)
    waits[(row * windows + window)[is_first & ranged]] = True
    first = np.bincount(row[is_first], minlength=r)
    ranged_first = np.bincount(row[is_first & ranged], minlength=r)
    whole = is_first & ~ranged
    whole_extra = np.bincount(row[whole], weights=np.maximum(extra[whole], 0.0), minlength=r)
    parts = np.zeros(r)
    splits = np.zeros(r * windows, dtype=bool)
    if split_size is not None:
        pieces = np.ceil(stored[whole] / max(1, split_size))
        parts = np.bincount(row[whole], weights=pieces - 1, minlength=r)
        splits[(row * windows + window)[whole][pieces > 1]] = True
    return waits.reshape(r, windows), first, ranged_first, whole_extra, parts, splits.reshape(r, windows)
