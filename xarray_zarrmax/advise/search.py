"""The layout search: the grid of `candidates` visited best first by the lower bounds of `bounds`, costing only
the layouts that could beat (or tie with) the best (`advisor.rank` costs and ranks them).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xarray_zarrmax.advise.bounds import TERMS, SearchBounds
from xarray_zarrmax.advise.candidates import _sharded, shard_multiples
from xarray_zarrmax.advise.model import Costs, Layout
from xarray_zarrmax.advise.probe import Progress


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    """How far the search went: the layouts it costed, and whether it covered the grid (every layout it left
    uncosted is proven slower than the fastest and not tied with it); if it stopped at its budget, ``floor`` is
    the least lower bound of what it left (no layout it did not cost is predicted faster), and
    ``fastest_proven`` whether it had already proven the fastest (then only ties are left unchecked)."""

    costed: int
    complete: bool
    floor: float = math.inf
    fastest_proven: bool = True  # stopped while costing what could tie: the fastest was already proven


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


def could_tie(rows: np.ndarray, best: Mapping[str, float], costs: Costs) -> np.ndarray:
    """Per row of ``rows`` (`SearchBounds.terms`: lower bounds of a layout's terms), whether a layout with
    those bounds could be tied with ``best`` (its `predict_terms`, weighted): `model.could_beat`'s least
    difference over the spread's corners, which only grows with each term. A transfer whose rate is not known
    ("transfer") is split between the two rates as gives the least."""
    factors = costs.factors()
    low = np.asarray([factors.get(name, (1.0, 1.0))[0] for name in TERMS])
    high = np.asarray([factors.get(name, (1.0, 1.0))[1] for name in TERMS])
    either = TERMS.index("transfer")
    r, a = TERMS.index("request_bps"), TERMS.index("aggregate_bps")
    own = np.asarray([best.get(name, 0.0) for name in TERMS])
    diff = rows - own[None]
    least = np.where(diff > 0, diff * low, diff * high)
    least[:, [r, a, either]] = 0.0  # the transfer: below
    least = least.sum(axis=1)
    extra = rows[:, either]

    def charged(x: np.ndarray) -> np.ndarray:  # x of the unknown transfer at request_bps, the rest at aggregate
        d_r, d_a = diff[:, r] + x, diff[:, a] + extra - x
        return (np.where(d_r > 0, d_r * low[r], d_r * high[r])
                + np.where(d_a > 0, d_a * low[a], d_a * high[a]))

    # convex in x: its least over [0, extra] lies at an end or where a difference changes sign
    splits = [np.zeros_like(extra), extra, np.clip(-diff[:, r], 0, extra), np.clip(diff[:, a] + extra, 0, extra)]
    least = least + np.min([charged(x) for x in splits], axis=0)
    return least <= 1e-12 * max(1.0, sum(best.values()))  # type: ignore[no-any-return]


def branch_and_bound(shape: Sequence[int], grid: np.ndarray, bounds: SearchBounds,
                     cost: Callable[[Layout], Any], progress: Progress | None, total: int,
                     budget: int | None = None, polish: Callable[[list[Any]], Any] | None = None,
                     starts: int = 1) -> SearchOutcome:
    """Cost the grid's layouts (``grid``: its chunk shapes; `candidates.shard_options` of each) that could be
    the fastest or tie with it, best first by their lower bound (`SearchBounds`).

    A queue holds, keyed by a lower bound of its time (`SearchBounds.seconds`): each chunk shape unsharded (its
    own bound) and sharded (a bound for every sharding at once: one object per window, one index), and the
    sharded layouts of the chunk shapes taken from it (first a quick bound, then each its own). Every bound is
    one per term (`SearchBounds.terms`), each term no more than the layout's.

    1. The least is taken while its key is at most the ``starts``-th least score costed: a layout whose terms
       sum to at most that score is costed; one whose terms sum to more cannot be among the ``starts``
       fastest, and waits.
    2. The ``starts`` fastest of the grid are then known; ``polish``, given them, returns the fastest after a
       search near them, off the grid. What waits and what is left in the queue, up to the slow end of the
       fastest's range, is costed only if its bounds could tie with it (`could_tie`).

    So what is never costed is slower than the fastest and cannot be tied with it: the grid's best, and every
    layout tied with the fastest, are costed (`tests/advise/test_advise_geometry.py` checks this against the
    whole grid). It stops after costing ``budget`` layouts that meet the constraints (None: never), saying how
    far it got (`SearchOutcome`).
    """
    k = len(grid)
    whole = np.broadcast_to(np.asarray(shape, dtype=np.int64), grid.shape)
    plain = bounds.terms(grid, grid, np.zeros(k, dtype=bool), np.ones(k), pairwise=False)
    any_shard = bounds.terms(grid, whole, np.ones(k, dtype=bool), np.ones(k), pairwise=False)
    # Entries (key, tie-breaker, what, index): what -1, chunk shape ``index`` unsharded; -2, its shardings,
    # not yet listed; b >= 0, the index-th layout of block b: sharded layouts listed together, sorted by their
    # bound (quick, or refined), only the next of each block in the queue
    queue: list[tuple[float, int, int, int]] = []
    ticket = itertools.count()  # unique: the rest is never compared
    plain_key, any_key = plain @ bounds.key_factors, any_shard @ bounds.key_factors
    for c in range(k):
        queue.append((float(plain_key[c]), next(ticket), -1, c))
        queue.append((float(any_key[c]), next(ticket), -2, c))
    heapq.heapify(queue)
    blocks: list[_Block] = []

    def add_block(rows: np.ndarray, owner: np.ndarray, ks: np.ndarray, refined: bool) -> None:
        key = rows @ bounds.key_factors
        order = np.argsort(key, kind="stable")
        blocks.append(_Block(key[order], rows[order], owner[order], ks[order], refined))
        if len(order):
            heapq.heappush(queue, (float(blocks[-1].key[0]), next(ticket), len(blocks) - 1, 0))

    def listed(owner: np.ndarray, ks: np.ndarray, pairwise: bool) -> np.ndarray:
        inner = grid[owner]
        return bounds.terms(inner, ks * inner, np.ones(len(ks), dtype=bool),
                            np.prod(ks.astype(np.float64), axis=1), pairwise=pairwise)

    def terms_of(what: int, index: int) -> np.ndarray:
        return plain[index] if what == -1 else any_shard[index] if what == -2 else blocks[what].rows[index]

    fastest: Any = None  # phase 1: the starts-th fastest costed; phase 2: the fastest
    best: list[tuple[float, int, Any]] = []  # phase 1: the starts fastest costed, as a heap of (-score, ticket, c)
    waiting: list[tuple[float, int, int, int]] = []  # costable entries that cannot be the fastest
    waited: set[int] = set()  # their tickets
    tie_masks: dict[int, np.ndarray] = {}  # per block, in phase 2: which of its layouts could tie
    done = costed = 0

    def could(what: int, index: int) -> bool:
        """In phase 2: whether the entry's bound could tie with the fastest."""
        if what >= 0:
            if what not in tie_masks:
                tie_masks[what] = could_tie(blocks[what].rows, fastest.terms, bounds.costs)
            return bool(tie_masks[what][index])
        return bool(could_tie(terms_of(what, index)[None], fastest.terms, bounds.costs)[0])

    def limit() -> float:
        return math.inf if fastest is None else (fastest.score if not tying else high(fastest))

    tying = False
    while True:
        if not queue or queue[0][0] > limit():
            if tying or not best:
                break
            tying = True  # phase 2: the fastest of the grid is known, and of the layouts near it (``polish``)
            ranked = [c for _, _, c in sorted(best, key=lambda e: (-e[0], e[1]))]
            fastest = polish(ranked) if polish is not None else ranked[0]
            for entry in waiting:  # their blocks moved on when they were first taken
                waited.add(entry[1])
                heapq.heappush(queue, entry)
            continue
        if budget is not None and costed >= budget:
            return SearchOutcome(costed, False, queue[0][0], tying)
        entry = heapq.heappop(queue)
        _, turn, what, index = entry
        if what >= 0 and index + 1 < len(blocks[what].key) and turn not in waited:
            # the block's next layout takes its place; an unrefined block's, once this one is refined, the
            # first it left unrefined (below)
            block = blocks[what]
            nxt = index + 1 if block.refined or (tying and not could(what, index)) else min(index + 256,
                                                                                              len(block.key))
            if nxt < len(block.key):
                heapq.heappush(queue, (float(block.key[nxt]), next(ticket), what, nxt))
        if tying and not could(what, index):
            continue
        if what == -2:
            # list the shardings of this chunk shape and of those next in the queue together (one numpy call)
            shapes = [index]
            while (queue and queue[0][2] == -2 and queue[0][0] <= limit() and len(shapes) < 64
                   and (not tying or could(-2, queue[0][3]))):
                shapes.append(heapq.heappop(queue)[3])
            multiples = [shard_multiples(grid[c], shape)[1:] for c in shapes]  # the unsharded ones are queued
            owner = np.repeat(np.asarray(shapes), [len(m) for m in multiples])
            ks = np.concatenate(multiples)
            add_block(listed(owner, ks, False), owner, ks, False)
            done += len(shapes)
            if progress is not None and done % 64 < len(shapes):
                progress(min(done, k), total, f"costing a grid of {k} chunk shapes")
            continue
        if what >= 0 and not blocks[what].refined:
            # listed with the quick bound: now the whole one (selections apart from the earlier ones wait for
            # their own indexes), for this layout and the next 255 of its block
            block = blocks[what]
            step = min(index + 256, len(block.key))
            add_block(listed(block.owner[index:step], block.ks[index:step], True), block.owner[index:step],
                      block.ks[index:step], True)
            continue
        if not tying and float(terms_of(what, index).sum()) > (math.inf if fastest is None else fastest.score):
            waiting.append(entry)  # cannot be the fastest: it may tie with it (phase 2)
            continue
        layout = (Layout(tuple(int(c) for c in grid[index])) if what == -1 else
                  _sharded(tuple(int(c) for c in grid[blocks[what].owner[index]]),
                           tuple(blocks[what].ks[index].tolist())))
        candidate = cost(layout)
        if candidate is None:  # out of the constraints: costs nothing, counts nothing
            continue
        costed += 1
        if not tying:
            heapq.heappush(best, (-candidate.score, next(ticket), candidate))
            if len(best) > starts:
                heapq.heappop(best)
            if len(best) == starts:
                fastest = best[0][2]  # the starts-th fastest: what could be among them is costed
    if progress is not None:
        progress(k, total, f"costing a grid of {k} chunk shapes")
    return SearchOutcome(costed, True)


@dataclass(frozen=True, slots=True)
class _Block:
    """Sharded layouts listed together, by ascending key: their keys, term bounds, chunk shapes (indices into
    the grid) and chunks per shard, and whether the bounds are refined (pairwise) or quick."""

    key: np.ndarray
    rows: np.ndarray
    owner: np.ndarray
    ks: np.ndarray
    refined: bool
