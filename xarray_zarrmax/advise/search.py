"""The layout search: the grid of `candidates` visited best first by the lower bounds of `bounds`, costing only
the layouts that could beat (or tie with) the best (`advisor.rank` costs and ranks them).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xarray_zarrmax.advise.bounds import SearchBounds
from xarray_zarrmax.advise.candidates import _sharded, shard_multiples
from xarray_zarrmax.advise.model import Layout
from xarray_zarrmax.advise.probe import Progress


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    """How far the search went: the layouts it costed, and whether it covered the grid (every layout it left
    uncosted is proven slower than one it costed); if it stopped at its budget, ``floor`` is the least lower
    bound of what it left: no layout it did not cost is predicted faster."""

    costed: int
    complete: bool
    floor: float = math.inf


def high(candidate: Any) -> float:
    """The slow end of a candidate's score (its score when the costs have no spread)."""
    return max(candidate.high, candidate.score)


def layout_bounds(bounds: SearchBounds, layouts: Sequence[Layout]) -> np.ndarray:
    """`SearchBounds.seconds` of each layout (its own chunks, objects and shard indexes)."""
    if not layouts:
        return np.zeros(0)
    chunks = np.asarray([lay.chunks for lay in layouts], dtype=np.int64)
    outer = np.asarray([lay.outer for lay in layouts], dtype=np.int64)
    sharded = np.asarray([lay.shards is not None for lay in layouts])
    per_object = np.asarray([lay.chunks_per_object() for lay in layouts], dtype=np.float64)
    return bounds.seconds(chunks, outer, sharded, per_object)


def branch_and_bound(shape: Sequence[int], grid: np.ndarray, bounds: SearchBounds,
                     cost: Callable[[Layout], Any], progress: Progress | None, total: int,
                     budget: int | None = None) -> SearchOutcome:
    """Cost the grid's layouts (``grid``: its chunk shapes; `candidates.shard_options` of each) that could win,
    best first by their lower bound (`SearchBounds`).

    A queue holds, keyed by a lower bound of its time: each chunk shape unsharded (its own bound) and sharded
    (a bound for every sharding at once: one object per window, one index), and the sharded layouts of the
    chunk shapes taken from it (each its own bound). The least is taken: a layout is costed, a chunk shape's
    shardings put in the queue; it stops when the least bound exceeds ``limit``, the least slow end
    (`Candidate.high`) of the layouts costed so far. What is never costed is slower than a costed layout for
    every cost within the spread (with no spread: slower than the best), so the grid's best, and every layout
    tied with it, are costed (`tests/advise/test_advise_geometry.py` checks this against the whole grid).

    It stops after costing ``budget`` layouts that meet the constraints (None: never): its lower bounds are weak
    where reads coalesce and on large batches (a 4-D mix took 85-205 s to prove, costing 45,000-165,000
    layouts), so the search is anytime, and says how far it got (`SearchOutcome`).
    """
    k = len(grid)
    whole = np.broadcast_to(np.asarray(shape, dtype=np.int64), grid.shape)
    plain = bounds.seconds(grid, grid, np.zeros(k, dtype=bool), np.ones(k), pairwise=False)
    any_shard = bounds.seconds(grid, whole, np.ones(k, dtype=bool), np.ones(k), pairwise=False)
    # Entries (bound, tie-breaker, what, index): what -1, chunk shape ``index`` unsharded; -2, its shardings,
    # not yet listed; b >= 0, the index-th layout of block b: sharded layouts listed together, sorted by their
    # bound (quick, or refined), only the next of each block in the queue
    queue: list[tuple[float, int, int, int]] = []
    ticket = itertools.count()  # unique: the rest is never compared
    for c in range(k):
        queue.append((float(plain[c]), next(ticket), -1, c))
        queue.append((float(any_shard[c]), next(ticket), -2, c))
    heapq.heapify(queue)
    blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray, bool]] = []  # bounds, chunk shapes, multiples, refined

    def add_block(low: np.ndarray, owner: np.ndarray, ks: np.ndarray, refined: bool) -> None:
        order = np.argsort(low, kind="stable")
        blocks.append((low[order], owner[order], ks[order], refined))
        if len(order):
            heapq.heappush(queue, (float(blocks[-1][0][0]), next(ticket), len(blocks) - 1, 0))

    def listed(owner: np.ndarray, ks: np.ndarray, pairwise: bool) -> np.ndarray:
        inner = grid[owner]
        return bounds.seconds(inner, ks * inner, np.ones(len(ks), dtype=bool),
                              np.prod(ks.astype(np.float64), axis=1), pairwise=pairwise)

    limit = math.inf
    done = costed = 0
    while queue and queue[0][0] <= limit:
        if budget is not None and costed >= budget:
            return SearchOutcome(costed, False, queue[0][0])
        _, _, what, index = heapq.heappop(queue)
        if what == -1:
            candidate = cost(Layout(tuple(int(c) for c in grid[index])))
            if candidate is not None:  # only these count to the budget: a layout out of bounds costs nothing
                costed += 1
                limit = min(limit, high(candidate))
            continue
        if what == -2:
            # list the shardings of this chunk shape and of those next in the queue together (one numpy call)
            shapes = [index]
            while queue and queue[0][2] == -2 and queue[0][0] <= limit and len(shapes) < 64:
                shapes.append(heapq.heappop(queue)[3])
            multiples = [shard_multiples(grid[c], shape)[1:] for c in shapes]  # the unsharded ones are queued
            owner = np.repeat(np.asarray(shapes), [len(m) for m in multiples])
            ks = np.concatenate(multiples)
            add_block(listed(owner, ks, False), owner, ks, False)
            done += len(shapes)
            if progress is not None and done % 64 < len(shapes):
                progress(min(done, k), total, f"costing a grid of {k} chunk shapes")
            continue
        low, owner, ks, refined = blocks[what]
        if refined:
            candidate = cost(_sharded(tuple(int(c) for c in grid[owner[index]]), tuple(ks[index].tolist())))
            if candidate is not None:
                costed += 1
                limit = min(limit, high(candidate))
            step = index + 1
        else:
            # listed with the quick bound: now the whole one (selections apart from the earlier ones wait for
            # their own indexes), for this layout and the next 255 of its block
            step = min(index + 256, len(low))
            add_block(listed(owner[index:step], ks[index:step], True), owner[index:step], ks[index:step], True)
        if step < len(low):
            heapq.heappush(queue, (float(low[step]), next(ticket), what, step))
    if progress is not None:
        progress(k, total, f"costing a grid of {k} chunk shapes")
    return SearchOutcome(costed, True)
