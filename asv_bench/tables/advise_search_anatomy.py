"""Where one proven search of the advisor spends its time, and what cheaper bounds could spare it.

    .venv/bin/python -m asv_bench.tables.advise_search_anatomy [--points 30] [--case "random points"]
        [--costs minio] [--no-spread]

A diagnostic for the search-time work of issue 42 (docs/dev/advise.md, Search time), not a benchmark: one search
of one case of `advise_search_time` (by default 30 random points on the 4-D array under the validation run's MinIO
probe), with no budget, its internals wrapped to record as it goes:

- the two phases of `search.branch_and_bound` (proving the fastest; then every layout that could tie with it);
- per phase, the sharded layouts listed with their `LISTED` bound (`SearchBounds.sharded_floor`), and the layouts
  taken to each higher level (`SearchBounds.aligned`, then `SearchBounds.terms`), with their seconds;
- the tie tests (`search.tied_with`): rows tested, rows within the slow end by their key, rows that could tie.

Then, from every `LISTED` row kept, what a bound of a chunk shape's shardings could spare at most: the chunk shapes
whose least `LISTED` key is past the best score; those with a sharding whose own `LISTED` row could tie with the
fastest (no bound of the chunk shape could spare them); those whose term-by-term least over each class of
sharding (a shard read whole possible, or every shard read by ranges) could tie; and the rows that could tie whose
request bound is at most the pick's requests (the rows a tie rule on requests could not leave out).

The wrappers reach into the search's private functions by design: what they record is the search's own work. The
numbers are counts and seconds of one run; compare seconds only within one run (the machine's state is printed).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from dataclasses import replace
from typing import Any

import numpy as np

from asv_bench.shared.timing import cpu_reference, machine_state
from asv_bench.tables.advise_search_time import point_cases, probed_costs, reader_for


def run(points: int, case_text: str, kind: str, spread: bool = True) -> dict[str, Any]:
    from xarray_zarrmax.advise import advisor, search
    from xarray_zarrmax.advise.bounds import ALIGNED, RANGES, SearchBounds
    from xarray_zarrmax.advise.candidates import multiples

    case = next(c for c in point_cases([points]) if case_text in c["case"])
    costs = probed_costs()[kind]
    if not spread:  # the probe's medians alone: ties only at equal scores
        costs = replace(costs, spread=())
    advisor.SEARCH_LAYOUTS = advisor.SEARCH_SECONDS = None  # the proof, whatever it costs
    phase_two: list[float] = []  # when the first tie test ran: the second phase's start
    listed: dict[int, list[float]] = defaultdict(lambda: [0, 0, 0.0])  # phase -> shapes, shardings, seconds
    levels: dict[tuple[int, int], list[float]] = defaultdict(lambda: [0, 0.0])  # (phase, level) -> rows, seconds
    ties = [0, 0, 0, 0.0]  # rows, within the slow end by key, could tie, seconds
    kept: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # LISTED rows, owners, ranged, shapes
    fastest: list[Any] = []
    recording = [0.0]  # seconds the recording itself took inside the search (in its total)

    def phase() -> int:
        return 2 if phase_two else 1

    floor, terms, tied_with = SearchBounds.sharded_floor, SearchBounds.terms, search.tied_with
    aligned = SearchBounds.aligned

    def record_aligned(self: SearchBounds, rows: np.ndarray, chunks: np.ndarray, outer: np.ndarray,
                       per_object: np.ndarray) -> np.ndarray:
        start = time.perf_counter()
        out = aligned(self, rows, chunks, outer, per_object)
        got = levels[(phase(), ALIGNED)]  # `LISTED` rows raised by their shards' alignment
        got[0] += len(rows)
        got[1] += time.perf_counter() - start
        return out

    def record_floor(self: SearchBounds, base: np.ndarray, chunks: np.ndarray, owner: np.ndarray,
                     which: np.ndarray) -> np.ndarray:
        start = time.perf_counter()
        rows = floor(self, base, chunks, owner, which)
        got = listed[phase()]
        got[0] += chunks.shape[0]
        got[1] += owner.size
        got[2] += time.perf_counter() - start
        own = time.perf_counter()
        # the class of each sharding: every shard read by ranges (the read's chunks under full_shard_fraction of
        # one shard), or a shard that may be read whole
        per_object = np.prod(np.take_along_axis(multiples(chunks, self.shape.tolist())[owner],
                                                which[:, :, None], axis=2)[:, :, 0].astype(np.float64), axis=1)
        touched = np.full(owner.size, np.inf)  # (no pointwise read: every sharding in the class "may read whole")
        for pattern in self.patterns:
            for j, dims, pts in pattern.points:
                if j == 0:  # the read's chunks, as `sharded_floor` counts them
                    others = [d for d in range(self.shape.size) if d not in dims]
                    first = pattern.starts[j, others] // chunks[:, others]
                    last = (pattern.stops[j, others] - 1) // chunks[:, others]
                    touched = (self.pointwise.cells_of(chunks[:, dims], dims, pts)[0]
                               * np.prod(last - first + 1, axis=1))[owner]
        kept.append((rows, owner, self.reader.full_shard_fraction * per_object > touched, chunks))
        recording[0] += time.perf_counter() - own
        return rows

    def record_terms(self: SearchBounds, chunks: np.ndarray, outer: np.ndarray, sharded: np.ndarray,
                     per_object: np.ndarray, level: int = RANGES) -> np.ndarray:
        start = time.perf_counter()
        rows = terms(self, chunks, outer, sharded, per_object, level)
        got = levels[(phase(), level)]
        got[0] += len(rows)
        got[1] += time.perf_counter() - start
        return rows

    def record_ties(b: SearchBounds, rows: np.ndarray, best: Any) -> np.ndarray:
        if not phase_two:
            phase_two.append(time.perf_counter())
            fastest.append((b, best))
        start = time.perf_counter()
        out = tied_with(b, rows, best)
        ties[0] += len(rows)
        ties[1] += int((rows @ b.key_factors <= search.high(best)).sum())
        ties[2] += int(out.sum())
        ties[3] += time.perf_counter() - start
        return out

    SearchBounds.sharded_floor, SearchBounds.terms, search.tied_with = record_floor, record_terms, record_ties
    SearchBounds.aligned = record_aligned
    state, reference = machine_state(), cpu_reference()
    try:
        start = time.perf_counter()
        ranked, outcome = advisor.search(case["shape"], case["dims"], case["itemsize"], case["patterns"],
                                         costs=costs, reader=reader_for(costs), variable="v")
        end = time.perf_counter()
    finally:
        SearchBounds.sharded_floor, SearchBounds.terms, search.tied_with = floor, terms, tied_with
        SearchBounds.aligned = aligned
    pick = ranked[0]
    out: dict[str, Any] = {
        "command": " ".join(sys.argv), "case": f"{case['case']} / {kind}" + ("" if spread else " (no spread)"),
        "machine": state,
        "cpu_reference_s": reference, "seconds": end - start, "recording_s": recording[0],
        "phase_seconds": [(phase_two[0] if phase_two else end) - start, end - phase_two[0] if phase_two else 0.0],
        "costed": outcome.costed if outcome else 0, "complete": bool(outcome and outcome.complete),
        "pick": str(pick.layout), "score": pick.score, "slow_end": search.high(pick),
        "pick_requests": sum(p.counts.requests for p in pick.predictions.values()),
        "tied": sum(c.tied for c in ranked),
        "listed": {p: v for p, v in sorted(listed.items())},
        "levels": {f"phase {p}, {_LEVEL_NAMES[level]}": v
                   for (p, level), v in sorted(levels.items(), key=lambda e: (e[0][0], search.LEVELS.index(e[0][1])))},
        "ties": ties,
    }
    if kept and fastest:
        b, best = fastest[0]
        out["spared"] = _spared(kept, b, best, pick.score, out["pick_requests"], costs.request_s)
    return out


def _spared(kept: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], b: Any, best: Any, score: float,
            requests: float, request_s: float) -> dict[str, int]:
    """What bounds of a chunk shape's shardings could spare at most, from the `LISTED` rows kept."""
    from xarray_zarrmax.advise import search

    counts: defaultdict[str, int] = defaultdict(int)
    for rows, owner, ranged, chunks in kept:
        m = chunks.shape[0]
        key = rows @ b.key_factors
        least = np.full(m, np.inf)
        np.minimum.at(least, owner, key)
        could = search.tied_with(b, rows, best)
        counts["chunk shapes listed"] += m
        counts["shardings listed"] += owner.size
        counts["chunk shapes whose least LISTED key is past the best score"] += int((least > score).sum())
        counts["LISTED rows that could tie"] += int(could.sum())
        counts["chunk shapes with a sharding whose LISTED row could tie"] += int(
            (np.bincount(owner, weights=could, minlength=m) > 0).sum())
        either = np.zeros(m, dtype=bool)
        for part in (ranged, ~ranged):
            if not part.any():
                continue
            low = np.full((m, rows.shape[1]), np.inf)
            np.minimum.at(low, owner[part], rows[part])
            has = np.bincount(owner[part], minlength=m) > 0
            either[has] |= search.tied_with(b, low[has], best)
        counts["chunk shapes whose least per class could tie"] += int(either.sum())
        counts["LISTED rows that could tie with requests at most the pick's"] += int(
            (could & (rows[:, 1] / request_s <= requests * (1 + 1e-9))).sum())
    return dict(counts)


_LEVEL_NAMES = {1: "QUICK", 2: "PAIRWISE", 3: "SAMPLED", 4: "RANGES", 5: "ALIGNED"}  # (`bounds`' numbers)


def markdown(r: dict[str, Any]) -> str:
    lines = [f"Command: `{r['command']}`; case {r['case']}; load average {r['machine'].get('load_average')}; "
             f"CPU reference {r['cpu_reference_s']:.3f} s (`asv_bench.shared.timing.cpu_reference`).", "",
             f"- Search {r['seconds']:.2f} s: first phase {r['phase_seconds'][0]:.2f} s, "
             f"second {r['phase_seconds'][1]:.2f} s;"
             f" {r['costed']} layouts costed, {'proven' if r['complete'] else 'NOT proven'} (the recording's own work"
             f" {r['recording_s']:.2f} s of it, in the first phase).",
             f"- Pick {r['pick']}: {r['score'] * 1e3:.1f} ms (slow end {r['slow_end'] * 1e3:.1f} ms), "
             f"{r['pick_requests']:.0f} requests; {r['tied']} tied.", ""]
    lines += ["| what | phase | layouts | seconds |", "| --- | --- | ---: | ---: |"]
    for p, (shapes, n, s) in r["listed"].items():
        lines.append(f"| `LISTED` ({int(shapes):,} chunk shapes) | {p} | {int(n):,} | {s:.2f} |")
    for name, (n, s) in r["levels"].items():
        p, level = name.split(", ")
        lines.append(f"| `{level}` | {p.split()[1]} | {int(n):,} | {s:.2f} |")
    rows, near, could, s = r["ties"]
    lines += [f"| tie tests ({near:,} within the slow end by key, {could:,} could tie) | 2 | {rows:,} | {s:.2f} |", ""]
    if "spared" in r:
        lines += ["| at most spared by a bound of a chunk shape's shardings | count |", "| --- | ---: |"]
        lines += [f"| {what} | {n:,} |" for what, n in r["spared"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=30, help="random points of the case (default 30)")
    parser.add_argument("--case", default="random points",
                        help="'random points' (along every dimension) or 'profiles' (along lat and lon)")
    parser.add_argument("--costs", default="minio", choices=("minio", "local", "assumed"))
    parser.add_argument("--no-spread", action="store_true", help="the probe's medians without their spread")
    args = parser.parse_args(argv)
    print(markdown(run(args.points, args.case, args.costs, not args.no_spread)))


if __name__ == "__main__":
    main()
