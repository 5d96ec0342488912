"""The layout search: the grid of `candidates` visited best first by the lower bounds of `bounds`, costing only
the layouts that could beat (or tie with) the best (`advisor.rank` costs and ranks them).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xarray_zarrmax.advise import kernels
from xarray_zarrmax.advise.bounds import ALIGNED, LISTED, PAIRWISE, QUICK, RANGES, SAMPLED, TERMS, SearchBounds
from xarray_zarrmax.advise.candidates import _sharded
from xarray_zarrmax.advise.candidates import shardings as shardings_of
from xarray_zarrmax.advise.model import DECODE_TERMS, Costs, Layout
from xarray_zarrmax.advise.probe import Progress


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    """How far the search went: the layouts it costed, and whether it covered the grid (every layout it left
    uncosted is proven slower than the fastest and not tied with it); if it stopped at a budget (``stopped_by``:
    "layouts" costed, or "seconds" spent), ``floor`` is the least lower bound of what it left (no layout of the
    grid it did not cost is predicted faster; a stopped search has not searched off the grid near its fastest),
    and ``fastest_proven`` whether it had already proven the fastest (then only ties are left unchecked);
    ``kernels``, which forms of the costliest bounds it ran (`kernels.in_use`)."""

    costed: int
    complete: bool
    floor: float = math.inf
    fastest_proven: bool = True  # stopped while costing what could tie: the fastest was already proven
    stopped_by: str = ""  # "layouts" or "seconds": the budget it stopped at ("" when complete)
    kernels: str = "C"  # the bounds' kernels it ran with (`kernels.in_use`): "C", or "numpy" where not built


def high(candidate: Any) -> float:
    """The slow end of a candidate's score (its score when the costs have no spread)."""
    return max(candidate.high, candidate.score)


def layout_terms(bounds: SearchBounds, layouts: Sequence[Layout]) -> np.ndarray:
    """`SearchBounds.terms` of each layout (its own chunks, objects and shard indexes), ``(len(layouts), 11)``."""
    if not layouts:
        return np.zeros((0, len(TERMS)))
    chunks = np.asarray([lay.chunks for lay in layouts], dtype=np.int64)
    outer = np.asarray([lay.outer for lay in layouts], dtype=np.int64)
    sharded = np.asarray([lay.shards is not None for lay in layouts])
    per_object = np.asarray([lay.chunks_per_object() for lay in layouts], dtype=np.float64)
    return bounds.terms(chunks, outer, sharded, per_object)


def tied_with(bounds: SearchBounds, rows: np.ndarray, fastest: Any) -> np.ndarray:
    """Per row of term bounds, whether its layout could tie with ``fastest`` (a costed candidate): its bound
    within the slow end of the fastest's score, and `could_tie` with its terms (tested only where the first holds:
    about half the rows of a search of scattered points)."""
    near = rows @ bounds.key_factors <= high(fastest)
    if not near.any():
        return near
    return could_tie(rows, fastest.terms, bounds.costs, near)


def could_tie(rows: np.ndarray, best: Mapping[str, float], costs: Costs, near: np.ndarray | None = None) -> np.ndarray:
    """Per row of ``rows`` (`SearchBounds.terms`: lower bounds of a layout's terms), whether a layout with
    those bounds could be tied with ``best`` (its `predict_terms`, weighted): `model.could_beat`'s least
    difference over the spread's corners (`_tie_least_numpy`, compiled where the package was built so), which only
    grows with each term, at most a hair above none. ``near``: the rows to test (the others are not tied)."""
    near = np.ones(len(rows), dtype=bool) if near is None else near
    factors = costs.factors()
    low = np.asarray([factors.get(name, (1.0, 1.0))[0] for name in TERMS])
    high = np.asarray([factors.get(name, (1.0, 1.0))[1] for name in TERMS])
    own = np.asarray([best.get(name, 0.0) for name in TERMS])
    corners = np.asarray([(f, s) for f in factors.get("decode_bps", (1.0, 1.0)) for s in costs.speedup_factors()])
    columns = [TERMS.index(name) for name in ("request_bps", "aggregate_bps", "transfer", *DECODE_TERMS)]
    if kernels.compiled is None:
        least = np.full(len(rows), np.inf)
        least[near] = _tie_least_numpy(rows[near], own, low, high, corners, *columns)
    else:
        least = np.empty(len(rows))
        kernels.compiled.tie_least(len(rows), len(corners), *columns, kernels.floats(rows),
                                   np.ascontiguousarray(near, dtype=np.bool_), own, low, high, kernels.floats(corners),
                                   least)
    return least <= 1e-12 * abs(sum(best.values()))  # type: ignore[no-any-return]


def _tie_least_numpy(rows: np.ndarray, own: np.ndarray, low: np.ndarray, high: np.ndarray, corners: np.ndarray,
                     r: int, a: int, either: int, one: int, pool: int) -> np.ndarray:
    """Per row of term bounds, the least its weighted sum could exceed ``own``'s (the fastest's terms) by, each
    term's difference at the low (``low``) factor of its spread where it is above, at the high where below: the two
    decode terms (columns ``one``, ``pool``) at the least of the ``corners`` of their shared rate and the speedup,
    and a transfer whose rate is not known (``either``) split between the two rates (``r``, ``a``) as gives the
    least (in numpy: the reference `_kernels.c`'s tie_least is held to, and the test where it was not built)."""
    diff = rows - own[None]
    least = np.where(diff > 0, _scaled(diff, low), _scaled(diff, high))
    least[:, [r, a, either, one, pool]] = 0.0  # the transfer and the decode: below
    least = least.sum(axis=1)
    # the two decode terms share one rate (the pool's, the speedup too): the least of the four corners
    least = least + np.min([_scaled(diff[:, one], f) + _scaled(_scaled(diff[:, pool], f), s)
                            for f, s in corners.tolist()], axis=0)
    extra = rows[:, either]

    def charged(x: np.ndarray) -> np.ndarray:  # x of the unknown transfer at request_bps, the rest at aggregate
        d_r, d_a = diff[:, r] + x, diff[:, a] + extra - x
        return (np.where(d_r > 0, _scaled(d_r, low[r]), _scaled(d_r, high[r]))
                + np.where(d_a > 0, _scaled(d_a, low[a]), _scaled(d_a, high[a])))

    # convex in x: its least over [0, extra] lies at an end or where a difference changes sign
    splits = [np.zeros_like(extra), extra, np.clip(-diff[:, r], 0, extra), np.clip(diff[:, a] + extra, 0, extra)]
    return least + np.min([charged(x) for x in splits], axis=0)  # type: ignore[no-any-return]


def _scaled(diff: np.ndarray, factor: Any) -> np.ndarray:
    """``diff`` times ``factor``, 0 where ``diff`` is 0 whatever the factor: an equal term adds nothing to a tie's
    difference, even at a factor that overflowed to infinity (a spread's low end of a rate near 0), where 0 x inf
    would make a NaN and rule the tie out."""
    with np.errstate(invalid="ignore"):
        return np.where(diff == 0, 0.0, diff * factor)  # type: ignore[no-any-return]


def branch_and_bound(shape: Sequence[int], grid: np.ndarray, bounds: SearchBounds,
                     cost: Callable[[Layout], Any], progress: Progress | None, total: int,
                     budget: int | None = None, polish: Callable[[list[Any]], Any] | None = None,
                     starts: int = 1, feasible: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
                     seconds: float | None = None, clock: Callable[[], float] = time.monotonic) -> SearchOutcome:
    """Cost the grid's layouts (``grid``: its chunk shapes; `candidates.shard_options` of each) that could be
    the fastest or tie with it, best first by their lower bound (`SearchBounds`).

    Every layout is bounded term by term (`SearchBounds.terms`, each term no more than the layout's): each chunk
    shape unsharded (its own bound) and sharded (a bound for every sharding at once: one object per window, one
    index), and the sharded layouts of a chunk shape, listed together (first a quick bound, then level by level up
    to each its own, through `LEVELS`; each level higher and slower).

    1. A queue keyed by the sum of those terms (a bound of the predicted time) is taken from, least first, while
       its key is at most the ``starts``-th least score costed: so every layout that could be among the
       ``starts`` fastest is costed. A few layouts are costed first, for a first limit: the unsharded of least
       bound, and ``starts`` sharded ones of least bound among a few of the least bounded chunk shapes'
       shardings. Bounds of the cheap levels at the head of the queue are taken up together, up to the next
       layout to cost (the limit cannot fall before it).
    2. ``polish``, given those ``starts``, returns the fastest after a search near them, off the grid. Of what
       is left (in the queue, and after each block's queued layout), a layout is costed only if its bounds
       could tie with the fastest (`could_tie`) within the slow end of its range, level by level; in no order:
       the fastest is known.

    In both, a `LISTED` row goes up to `ALIGNED` first (its requests raised by its shards' alignment,
    `SearchBounds.aligned`), half the cost of `QUICK` and enough to leave most of a read of scattered points. A block's
    rows past the first phase's limit when listed are never sorted (`_Rest`): the limit only falls.

    ``feasible(chunks, outer)``, if given, says which layouts (rows) may be costed at all: the others are never
    bounded nor costed (a constraint on the layout alone, e.g. its object size).

    So what is never costed is slower than the fastest and cannot be tied with it
    (`tests/advise/test_advise_search_proof.py` checks it against the whole grid). It stops after costing
    ``budget`` layouts that meet the constraints, or once ``seconds`` have passed on ``clock`` (None: never),
    saying how far it got (`SearchOutcome`).
    """
    deadline = math.inf if seconds is None else clock() + seconds

    def stop() -> str:
        """The budget spent, if any: "layouts" (``budget`` costed) or "seconds" (past the deadline, once a layout
        that meets the constraints is costed: a search stopped with none would answer that none meets them); ""
        if none."""
        if budget is not None and costed >= budget:
            return "layouts"
        return "seconds" if costed and clock() > deadline else ""

    k = len(grid)
    whole = np.broadcast_to(np.asarray(shape, dtype=np.int64), grid.shape)
    plain = bounds.terms(grid, grid, np.zeros(k, dtype=bool), np.ones(k), QUICK)
    any_shard = bounds.terms(grid, whole, np.ones(k, dtype=bool), np.ones(k), QUICK)
    # The chunk shapes by their bound unsharded (those that meet ``feasible``: ``plain_order``), and by their bound
    # of every sharding (``shape_order``), each key ascending
    meets = np.ones(k, dtype=bool) if feasible is None else feasible(grid, grid)
    plain_key, shard_key = plain.sum(axis=1), any_shard.sum(axis=1)
    plain_order = np.flatnonzero(meets)[np.argsort(plain_key[meets], kind="stable")]
    shape_order = np.argsort(shard_key, kind="stable")
    plain_key, shard_key = plain_key[plain_order], shard_key[shape_order]
    # Entries (key, tie-breaker, what, index): what -1, the index-th unsharded layout of `plain_order` (and those
    # after it); -2, the index-th chunk shape of ``shape_order`` (and those after it), its shardings not yet
    # listed; b >= 0, the index-th layout of block b: sharded layouts listed together, sorted by their bound at
    # the block's level. Only the next of each order and block is in the queue (a sharded seed is costed
    # before, and skipped when its entry comes up: ``seeded``)
    queue: list[tuple[float, int, int, int]] = []
    ticket = itertools.count()  # unique: the rest is never compared
    blocks: list[_Block] = []

    def queue_next(what: int, index: int) -> None:  # of the unsharded layouts (-1) or the chunk shapes (-2)
        keys = plain_key if what == -1 else shard_key
        if index < len(keys):
            heapq.heappush(queue, (float(keys[index]), next(ticket), what, index))

    def add_block(rows: np.ndarray, owner: np.ndarray, ks: np.ndarray, level: int) -> int:
        key = rows.sum(axis=1)
        # Only the rows within the limit are sorted: the limit only falls, so the first phase never takes the others
        # (4,212 of 3.1 million rows listed for 30 random points on MinIO, where sorting them all was a tenth of the
        # search). Those are kept as they came, for the second phase's tie tests
        head = key <= limit()
        rest = None if head.all() else _Rest(key, rows, owner, ks, ~head)
        within = np.flatnonzero(head)
        order = within[np.argsort(key[within], kind="stable")]
        # (np.take: 3.5x fancy indexing on a block of rows of 11 terms, 9x on chunks per shard)
        blocks.append(_Block(key[order], np.take(rows, order, axis=0), owner[order], np.take(ks, order, axis=0),
                             level, rest))
        return len(blocks) - 1

    def queue_from(block: int, index: int) -> None:
        if index < len(blocks[block].key):
            heapq.heappush(queue, (float(blocks[block].key[index]), next(ticket), block, index))

    def listed(owner: np.ndarray, ks: np.ndarray, level: int) -> np.ndarray:
        inner = grid[owner]
        return bounds.terms(inner, ks * inner, np.ones(len(ks), dtype=bool),
                            np.prod(ks.astype(np.float64), axis=1), level)

    def raised(rows: np.ndarray, owner: np.ndarray, ks: np.ndarray) -> np.ndarray:
        """`LISTED` ``rows`` raised to `ALIGNED` (`SearchBounds.aligned`)."""
        inner = grid[owner]
        return bounds.aligned(rows, inner, ks * inner, np.prod(ks.astype(np.float64), axis=1))

    def listed_shardings(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The shardings of the chunk shapes ``rows`` that meet ``feasible`` (the unsharded ones are queued):
        their `LISTED` bounds, chunk shapes and chunks per shard."""
        at, ks, which = shardings_of(grid[rows], shape)
        if feasible is not None:
            keep = feasible(grid[rows][at], ks * grid[rows][at])
            at, ks, which = at[keep], ks[keep], which[keep]
        return bounds.sharded_floor(any_shard[rows], grid[rows], at, which), rows[at], ks

    def shardings(shapes: np.ndarray) -> int:
        """A block of the shardings of ``shapes`` (chunk shapes), with their `LISTED` bounds."""
        return add_block(*listed_shardings(shapes), LISTED)

    def sharded(block: int, index: int) -> Layout:
        return _sharded(tuple(int(c) for c in grid[blocks[block].owner[index]]),
                        tuple(blocks[block].ks[index].tolist()))

    def bounding(what: int) -> bool:  # an entry that is bounded a level up, not costed
        return what == -2 or (what >= 0 and blocks[what].level != RANGES)

    def gathered(what: int) -> bool:  # an entry taken up with others at once: shapes listed, cheap levels
        return what == -2 or (what >= 0 and blocks[what].level in _GATHERED)

    def end(what: int, index: int) -> int:
        """Where the layouts taken up from a block's entry end: up to `_STEP` within the limit (those past it may
        never be needed), at least one."""
        block = blocks[what]
        below = max(index + 1, int(np.searchsorted(block.key, limit(), side="right")))
        return min(index + _STEP[block.level], len(block.key), below)

    def take_up(taken: list[tuple[int, int]]) -> None:
        """List the shardings of the chunk shapes from the index taken (``-2``), up to `_GATHER` of them within
        the limit, and take each block's layouts from the index taken up to the next level (`LEVELS`): up to
        `_STEP` of them within the limit (those past it may never be needed). The rest queued from the first
        left; one block per level."""
        parts: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}  # level: owners, chunks per shard, rows
        for what, index in taken:
            if what == -2:
                below = max(index + 1, int(np.searchsorted(shard_key, limit(), side="right")))
                step = min(index + _GATHER, below)
                queue_next(-2, step)
                queue_from(shardings(shape_order[index:step]), 0)
                listing(step - index)
                continue
            block, step = blocks[what], end(what, index)
            queue_from(what, step)
            parts.setdefault(block.level, []).append((block.owner[index:step], block.ks[index:step],
                                                      block.rows[index:step]))
        for level, got in parts.items():
            owner, ks = np.concatenate([o for o, _, _ in got]), np.concatenate([k for _, k, _ in got])
            up = LEVELS[LEVELS.index(level) + 1]
            rows = raised(np.concatenate([r for _, _, r in got]), owner, ks) if up == ALIGNED else listed(owner, ks, up)
            queue_from(add_block(rows, owner, ks, up), 0)

    best: list[tuple[float, int, Any]] = []  # the starts fastest costed, as a heap of (-score, ticket, c)
    done = costed = 0

    def limit() -> float:  # the starts-th fastest score costed: what could be among them is costed
        return best[0][2].score if len(best) == starts else math.inf

    def listing(count: int) -> None:
        nonlocal done
        done += count
        if progress is not None and done % 64 < count:
            progress(min(done, k), total, f"costing a grid of {k} chunk shapes")

    # 1. best first, up to the starts-th fastest. Until `starts` are costed nothing bounds what is taken up: the
    # unsharded layouts of least bound (their quick bound is near their cost) are costed first, for a limit
    tried = 0  # of `plain_order`, from the first: costed, never again
    while tried < min(len(plain_order), _SEEDS * starts) and len(best) < starts:
        candidate = cost(Layout(tuple(int(c) for c in grid[plain_order[tried]])))
        tried += 1
        if candidate is not None:
            costed += 1
            heapq.heappush(best, (-candidate.score, next(ticket), candidate))
    queue_next(-1, tried)
    queue_next(-2, 0)
    # and sharded seeds: on an object store the fastest are sharded, and a limit from unsharded layouts alone
    # takes thousands of sharded ones a level up that the first sharded layout costed would have left. The
    # ``starts`` of least `RANGES` bound among the shardings of least `LISTED` bound of the chunk shapes of least
    # bound (`_SHARDED_SEED_SHAPES`)
    seeded: set[Layout] = set()
    listed_bound, owner, ks = listed_shardings(shape_order[:_SHARDED_SEED_SHAPES])
    candidates = np.argsort(listed_bound.sum(axis=1), kind="stable")[:_SHARDED_SEED_BOUNDED * starts]
    owner, ks = owner[candidates], ks[candidates]
    by_bound = (np.argsort(listed(owner, ks, RANGES).sum(axis=1), kind="stable") if owner.size
                else np.zeros(0, dtype=np.int64))
    for i in by_bound[:starts].tolist():
        layout = _sharded(tuple(int(c) for c in grid[owner[i]]), tuple(ks[i].tolist()))
        seeded.add(layout)
        candidate = cost(layout)
        if candidate is not None:
            costed += 1
            heapq.heappush(best, (-candidate.score, next(ticket), candidate))
            if len(best) > starts:
                heapq.heappop(best)
    while queue and queue[0][0] <= limit():
        if spent := stop():
            return SearchOutcome(costed, False, queue[0][0], False, spent)
        _, _, what, index = heapq.heappop(queue)
        if bounding(what):
            # a bound to take up a level, with every other of a cheap level (`_GATHERED`) at the head of the
            # queue within the limit, up to the next layout to cost: the limit holds until then, so each would be
            # taken up all the same, here in one numpy call per level, not one per entry. (A costlier level is
            # taken one entry at a time: a layout costed in between may lower the limit and spare the rest)
            taken = [(what, index)]
            while (gathered(what) and queue and queue[0][0] <= limit() and len(taken) < _GATHER
                   and gathered(queue[0][2])):
                taken.append(heapq.heappop(queue)[2:])
            take_up(taken)
            continue
        if what >= 0:
            queue_from(what, index + 1)
            layout = sharded(what, index)
        else:
            queue_next(-1, index + 1)
            layout = Layout(tuple(int(c) for c in grid[plain_order[index]]))
        if layout in seeded:
            continue
        candidate = cost(layout)
        if candidate is None:  # out of the constraints: costs nothing, counts nothing
            continue
        costed += 1
        heapq.heappush(best, (-candidate.score, next(ticket), candidate))
        if len(best) > starts:
            heapq.heappop(best)
    if not best:
        if progress is not None:
            progress(k, total, f"costing a grid of {k} chunk shapes")
        return SearchOutcome(costed, True)

    # 2. what could tie with the fastest, of all that is left
    def stopped(spent: str) -> SearchOutcome:  # with the fastest proven: what is left could only tie with it
        # the floor of what the first phase left: its queue, and the blocks' rows past its limit (never queued)
        rests = [float(b.rest.key[b.rest.past].min()) for b in blocks if b.rest is not None and b.rest.past.any()]
        return SearchOutcome(costed, False, min([e[0] for e in queue] + rests, default=math.inf), True, spent)

    ranked = [c for _, _, c in sorted(best, key=lambda e: (-e[0], e[1]))]
    fastest = polish(ranked) if polish is not None else ranked[0]
    slowest = high(fastest)

    def tied(rows: np.ndarray) -> np.ndarray:
        if not len(rows):
            return np.zeros(0, dtype=bool)
        # in blocks: their temporaries stay in memory already mapped (a large array is mapped afresh each time)
        parts = np.array_split(rows, max(1, len(rows) // _TIED))
        return np.concatenate([tied_with(bounds, part, fastest) for part in parts])

    left = [(what, index) for _, _, what, index in queue]
    # level by level, every layout left that could tie (in no order: the fastest is known), in large batches: the
    # chunk shapes and chunks per shard of those that could at a level, each tested as its bound is worked out (the
    # bounds themselves not kept: a search of millions of layouts spent seconds copying them)
    waiting: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {level: [] for level in LEVELS}
    listed_near: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # `LISTED` rows that could tie, and layouts
    # a block's keys ascend, and a row's weighted sum is at least its key times the least factor: the rows past
    # `slowest` over that factor cannot tie (not tested)
    least = float(bounds.key_factors.min())
    reach = slowest / least * (1 + 1e-9) if least > 0 else math.inf
    for what, index in left:
        if spent := stop():
            return stopped(spent)
        if what >= 0:
            block = blocks[what]
            cut = int(np.searchsorted(block.key, reach, side="right"))
            if cut > index:
                near = index + np.flatnonzero(tied(block.rows[index:cut]))  # (a view of the rows: not copied)
                if block.level == LISTED:  # raised by alignment below, all together
                    listed_near.append((block.rows[near], block.owner[near], block.ks[near]))
                else:
                    waiting[block.level].append((block.owner[near], block.ks[near]))
    for block in blocks:  # and each block's rows past the limit when it was listed
        if block.rest is None:
            continue
        if spent := stop():
            return stopped(spent)
        rest = block.rest
        near = np.flatnonzero(rest.past & (rest.key <= reach))
        near_rows = np.take(rest.rows, near, axis=0)
        keep = tied(near_rows)
        near = near[keep]
        if block.level == LISTED:
            listed_near.append((near_rows[keep], rest.owner[near], np.take(rest.ks, near, axis=0)))
        else:
            waiting[block.level].append((rest.owner[near], np.take(rest.ks, near, axis=0)))
    shapes_left = np.concatenate([shape_order[i:] for w, i in left if w == -2] + [np.zeros(0, dtype=np.int64)])
    shapes_left = shapes_left[tied(any_shard[shapes_left])]
    for a in range(0, len(shapes_left), _LISTING):
        if spent := stop():
            return stopped(spent)
        rows = shapes_left[a:a + _LISTING]
        listing(len(rows))
        bound, owner, ks = listed_shardings(rows)
        keep = tied(bound)
        listed_near.append((bound[keep], owner[keep], ks[keep]))
    # the `LISTED` rows that could tie, raised by their shards' alignment (`SearchBounds.aligned`), in batches: a read
    # of scattered points took 182,000 such layouts to `QUICK`, 1.2 s, to leave nearly all for their requests alone
    if listed_near:
        near_rows, near_owner, near_ks = (np.concatenate([part[i] for part in listed_near]) for i in range(3))
        for a in range(0, len(near_rows), _BATCH):
            if spent := stop():
                return stopped(spent)
            owner, per = near_owner[a:a + _BATCH], near_ks[a:a + _BATCH]
            keep = tied(raised(near_rows[a:a + _BATCH], owner, per))
            waiting[ALIGNED].append((owner[keep], per[keep]))
    plain_left = np.concatenate([plain_order[i:] for w, i in left if w == -1] + [np.zeros(0, dtype=np.int64)])
    todo = [Layout(tuple(int(c) for c in grid[i])) for i in plain_left[tied(plain[plain_left])].tolist()]
    for position, level in enumerate(LEVELS):
        if not waiting[level]:
            continue
        owner, ks = (np.concatenate([part[i] for part in waiting[level]]) for i in range(2))
        waiting[level] = []
        if level == RANGES:
            todo += [_sharded(tuple(int(c) for c in grid[o]), tuple(k)) for o, k in zip(owner.tolist(), ks.tolist(),
                                                                                        strict=True)]
            continue
        up = LEVELS[position + 1]
        for a in range(0, len(owner), _BATCH):
            if spent := stop():
                return stopped(spent)
            keep = tied(listed(owner[a:a + _BATCH], ks[a:a + _BATCH], up))
            waiting[up].append((owner[a:a + _BATCH][keep], ks[a:a + _BATCH][keep]))
            if up == QUICK and a == 0 and len(owner) > _BATCH and keep.mean() >= _LEAVES_ALL:
                up = PAIRWISE  # QUICK leaves them all: the rest straight to PAIRWISE, which bounds them all anyway
    for layout in (lay for lay in todo if lay not in seeded):
        if spent := stop():
            return stopped(spent)
        if cost(layout) is not None:
            costed += 1
    if progress is not None:
        progress(k, total, f"costing a grid of {k} chunk shapes")
    return SearchOutcome(costed, True)


#: The levels of bound (`bounds.LISTED` ...) a sharded layout is taken through, each while it could still win
LEVELS = (LISTED, ALIGNED, QUICK, PAIRWISE, SAMPLED, RANGES)

#: Rows tested for ties at once, at least (blocks of 8,192 to 16,383)
_TIED = 8192

#: Unsharded layouts costed at most (times ``starts``) before the first phase, for its first limit
_SEEDS = 4

#: And ``starts`` sharded ones: the least bounded at `RANGES` of the `_SHARDED_SEED_BOUNDED` (times ``starts``) of
#: least `LISTED` bound among the shardings of the `_SHARDED_SEED_SHAPES` chunk shapes of least bound. Measured
#: (docs/dev/logs/advise_search_seeds_ab.md): 1.07-1.32x on the four 4-D searches over 2 s under a half-bandwidth
#: probe, 0.95-1.00x on the five slowest under the validation run's (the seeds' own costing)
_SHARDED_SEED_SHAPES, _SHARDED_SEED_BOUNDED = 64, 32

#: Chunk shapes listed at once, and layouts taken up a level at once, in the second phase. With `_GATHER` at 256
#: (from 512, 4,096 and 64): 1.16x on 30 random points on MinIO (round robin, 5 fresh processes each), 1.18x on
#: forecast-desk on MinIO, 1.26x under `Costs()`, 1.12x on random-batch, 1.00-1.03x on the rest tried
#: (docs/dev/logs/advise_search.md)
_LISTING, _BATCH = 2048, 16384

#: The share of a first batch of the second phase's layouts at `ALIGNED` that `QUICK` leaves, at least, for the rest to
#: go straight to `PAIRWISE` (which bounds what `QUICK` leaves anyway): `QUICK` costs a read of scattered points
#: about 0.4 of `PAIRWISE` a layout and left 200,910 of 200,910 of 100 random points on MinIO; at 0.95 a bound of
#: at most ten times `QUICK`'s costs no more skipped
_LEAVES_ALL = 0.95

#: Entries of the queue the first phase takes up a level at once, at most (chunk shapes listed, blocks of the
#: levels `_GATHERED`: bounds of a few microseconds a layout, where a numpy call per entry was most of the time).
#: Measured on the seven 4-D searches that took over 2 s: 1.28-1.52x (docs/dev/advise.md, Search time). Gathering
#: `PAIRWISE` too took 3x as many layouts to `SAMPLED` on forecast-desk under `Costs()`, and 1.5x as long. 256, not
#: 64: fewer calls of the listing's numpy work per chunk shape (with `_LISTING` and `_BATCH`, above)
_GATHER = 256
_GATHERED = (LISTED, ALIGNED, QUICK)

#: Layouts of a block the first phase takes up from each level at once: more where the next level is cheap
_STEP = {LISTED: 1024, ALIGNED: 512, QUICK: 256, PAIRWISE: 128, SAMPLED: 64}


@dataclass(frozen=True, slots=True)
class _Rest:
    """A block's layouts as listed, unsorted (`_Block`'s arrays), and which were past the first phase's limit then
    (``past``): left to the second phase."""

    key: np.ndarray
    rows: np.ndarray
    owner: np.ndarray
    ks: np.ndarray
    past: np.ndarray


@dataclass(frozen=True, slots=True)
class _Block:
    """Sharded layouts listed together, those within the first phase's limit by ascending key: their keys, term
    bounds, chunk shapes (indices into the grid) and chunks per shard, and the level of the bounds (`LEVELS`); the
    others in ``rest`` (None if none)."""

    key: np.ndarray
    rows: np.ndarray
    owner: np.ndarray
    ks: np.ndarray
    level: int
    rest: _Rest | None = None
