"""What the advisor answers: the layouts it ranked (`Candidate`, best first in an `AdviceReport`, with the
calibration they were costed under and how far the search went) and the constraints they had to meet.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from xarray_zarrmax.advise.model import (
    Costs,
    Layout,
    Prediction,
    Reader,
    decode_rate,
    object_count,
    object_nbytes,
    task_memory,
)
from xarray_zarrmax.advise.search import SearchOutcome
from xarray_zarrmax.advise.validate import optional, whole_number

MB = 2**20


@dataclass(frozen=True, slots=True)
class Constraints:
    """Limits a layout must meet: bytes of one stored object, stored objects per variable, and the memory one
    ``chunks={}`` dask task needs (its block's values plus their bytes: see `advise_model.task_memory`). None:
    no limit."""

    max_object_bytes: int | None = None
    max_objects: int | None = None
    task_memory_bytes: int | None = None

    def __post_init__(self) -> None:
        for name, what in (("max_object_bytes", "a whole number of bytes >= 1 (or None)"),
                           ("max_objects", "a whole number of objects >= 1 (or None)"),
                           ("task_memory_bytes", "a whole number of bytes >= 1 (or None)")):
            value = optional(whole_number, f"Constraints {name}", getattr(self, name), 1, None, what)
            object.__setattr__(self, name, value)


def nothing_meets(shape: Sequence[int], itemsize: int, ratio: float, task_bytes: int, constraints: Constraints,
                  layouts: Sequence[Layout]) -> str:
    """Why no layout is left: per constraint, the smallest value achievable by layouts meeting the others."""
    measures = {
        "task_memory_bytes": (lambda lay: task_memory(shape, lay, itemsize, ratio, task_bytes),
                              "memory per task <= {:.3g} MB", "the smallest achievable is {:.3g} MB"),
        "max_object_bytes": (lambda lay: object_nbytes(lay, itemsize, ratio), "objects of <= {:.3g} MB",
                             "the smallest achievable is {:.3g} MB"),
        "max_objects": (lambda lay: object_count(shape, lay), "<= {:g} objects", "the fewest achievable is {:g}"),
    }
    limits = {name: getattr(constraints, name) for name in measures if getattr(constraints, name) is not None}
    problems = []
    for name, limit in limits.items():
        measure, wanted, achievable = measures[name]
        scale = 1 if name == "max_objects" else MB
        others = [lay for lay in layouts
                  if all(measures[o][0](lay) <= v for o, v in limits.items() if o != name)]
        if not others:
            continue  # the others already rule out every layout: they are reported
        best = min(others, key=lambda lay: (measure(lay), lay.shards is not None))  # ties: unsharded first
        if measure(best) > limit:
            given = " with the other constraints" if len(limits) > 1 else ""
            problems.append(f"{wanted.format(limit / scale)} ({achievable.format(measure(best) / scale)}{given}, "
                            f"chunks {best})")
    why = ""
    if "task_memory_bytes" in limits and task_bytes:
        # small objects are grouped into tasks of about task_bytes with chunks={}: the floor of any layout's task
        why = (f". With chunks={{}} a task groups objects smaller than half of task_bytes ({task_bytes / MB:.3g} MB) "
               "into about that many bytes; set_config(task_bytes=...) or XARRAY_ZARRMAX_TASK_BYTES lowers it (0: "
               "one task per object)")
    return f"no candidate layout of {len(layouts)} meets every constraint: " + (
        "; ".join(problems) or "the constraints together rule out every layout") + why


@dataclass(frozen=True, slots=True)
class Candidate:
    """One layout and what it is predicted to cost, per pattern and weighted."""

    layout: Layout
    variables: tuple[Hashable, ...]
    predictions: Mapping[str, Prediction]
    score: float  # sum of weight x predicted seconds
    object_bytes: int
    objects: int
    task_memory: int
    low: float = 0.0  # the score with every cost at the fast end of its probed spread
    high: float = 0.0  # and at the slow end
    terms: Mapping[str, float] = field(default_factory=dict, repr=False)  # the score per cost (`predict_terms`)
    tied: bool = False  # as fast as the best for some costs within their spread (`AdviceReport.tied`)

    @property
    def encoding(self) -> dict[Hashable, dict[str, tuple[int, ...]]]:
        """Per data variable, ``{"chunks": ..., "shards": ...}`` for ``to_zarr(..., encoding=...)``."""
        return {name: self.layout.encoding() for name in self.variables}

    def scaled(self, exponent: int) -> Candidate:
        """The candidate with its weighted numbers (score, range, terms) times ``2**exponent``: exact, as a power of
        two scales every product and sum of them exactly (where none underflows)."""
        if exponent == 0:
            return self
        return replace(self, score=math.ldexp(self.score, exponent), low=math.ldexp(self.low, exponent),
                       high=math.ldexp(self.high, exponent),
                       terms={name: math.ldexp(t, exponent) for name, t in self.terms.items()})


@dataclass(frozen=True, slots=True)
class AdviceReport:
    """Candidate layouts ranked best first, with the calibration they were costed under."""

    variable: Hashable
    dims: tuple[Hashable, ...]
    shape: tuple[int, ...]
    patterns: Mapping[str, float]
    costs: Costs
    reader: Reader
    calibrated: bool
    candidates: tuple[Candidate, ...] = field(repr=False)
    dtype: str = ""  # the stored dtype costed (the variable's encoding: int16 for packed data read as float64)
    search: SearchOutcome | None = None  # how far the search of the grid went (None: layouts were given)

    @property
    def best(self) -> Candidate:
        """The winner: the first of the layouts tied with the fastest predicted, by the tie rule."""
        return self.candidates[0]

    @property
    def tied(self) -> tuple[Candidate, ...]:
        """The layouts tied with the fastest predicted (``best`` among them), in the tie rule's order: fewer
        requests, then fewer bytes fetched, then less memory. Just ``best`` when none is tied with it."""
        return tuple(c for c in self.candidates if c.tied) or self.candidates[:1]

    @property
    def table(self) -> Any:
        """A pandas DataFrame, one row per candidate (best first): the layout, then per pattern its objects,
        requests, bytes, round trips, predicted seconds and peak memory (MB), and the weighted score."""
        import pandas as pd

        rows = []
        for c in self.candidates:
            row: dict[str, Any] = {"layout": str(c.layout), "chunks": c.layout.chunks, "shards": c.layout.shards,
                                   "object_mb": c.object_bytes / MB, "objects": c.objects,
                                   "task_mb": c.task_memory / MB}
            for name, p in c.predictions.items():
                row |= {f"{name}:objects": p.counts.objects, f"{name}:requests": p.counts.requests,
                        f"{name}:bytes": p.counts.bytes, f"{name}:round_trips": p.counts.round_trips,
                        f"{name}:seconds": p.seconds, f"{name}:peak_mb": p.counts.peak_bytes / MB}
            row |= {"score": c.score, "score_low": c.low, "score_high": c.high, "tied": c.tied}
            rows.append(row)
        return pd.DataFrame(rows)

    def __str__(self) -> str:
        store_probed = any(name == "latency_s" for name, _, _ in self.costs.spread)
        where = ("probed" if self.calibrated else "from the costs given (a probe's result)" if store_probed
                 else "assumed (no store probed)")
        c = self.costs
        # with a curve, the rates it gives: large chunks at its largest size, and 16 kB chunks where it spans
        # that size (a sample under 4 KiB is one point, below it)
        large = decode_rate(c.decode_curve, float("inf"), c.decode_bps)
        small = (f" ({decode_rate(c.decode_curve, 16e3, c.decode_bps) / 1e6:.0f} in 16 kB chunks)"
                 if c.decode_curve and c.decode_curve[0][0] <= 16e3 <= c.decode_curve[-1][0] else "")
        stored = f", stored as {self.dtype}" if self.dtype else ""
        quartiles = next((f" (quartiles x{lo:.2f}-{hi:.2f} on {c.decode_speedup[-1][0]})"
                          for name, lo, hi in c.spread if name == "decode_speedup"), "")
        # the smallest size probed, when the curve has more than the large chunks' point
        first = c.speedup_curve[0][0] if len(c.speedup_curve) > 1 else None
        curve = (f", x{c.speedup(self.reader.threads, first):.2f} in {_size(first)} chunks" if first else "")
        speedup = (f"; decode x{c.speedup(self.reader.threads):.2f} on {self.reader.threads} threads{curve}"
                   f"{quartiles}" if self.reader.threads > 1 else "")
        lines = [
            f"layout advice for {self.variable!r} {dict(zip(self.dims, self.shape, strict=True))}{stored}, "
            f"mix {dict(self.patterns)}",
            f"store {where}: latency {c.latency_s * 1e3:.3g} ms, {c.request_bps / 1e6:.0f} MB/s per request, "
            f"{c.aggregate_bps / 1e6:.0f} MB/s in all; zstd {large / 1e6:.0f} MB/s per thread{small}, "
            f"ratio {c.ratio:.2f}; {self.reader.concurrency} requests in flight; {c.request_s * 1e6:.0f} us of "
            f"work per request, {c.index_s * 1e6:.0f} us per shard index (+{c.index_entry_s * 1e9:.0f} ns per "
            f"entry), {c.chunk_s * 1e6:.0f} us per chunk{speedup}; {'local' if self.reader.local else 'object store'}"
            " reader rules",
            f"{len(self.candidates)} layouts meet the constraints; best first (predicted seconds per pattern):",
        ]
        names = list(self.patterns)
        lines.append(f"  {'layout':<32} {'score':>9} {'range':>17} " + " ".join(f"{n:>12}" for n in names))
        for cand in self.candidates[:10]:
            lines.append(f"  {str(cand.layout):<32} {cand.score:>9.3f} {cand.low:>8.3f}-{cand.high:<8.3f} "
                         + " ".join(f"{cand.predictions[n].seconds:>12.3f}" for n in names)
                         + ("  tied" if cand.tied else ""))
        if len(self.tied) > 1:
            # a wide spread ties hundreds (1,264 on a busy machine's local probe): the first few, in the rule's order
            named = ", ".join(str(t.layout) for t in self.tied[:TIES_NAMED])
            more = f", and {len(self.tied) - TIES_NAMED} more" if len(self.tied) > TIES_NAMED else ""
            lines.append(f"tied: {len(self.tied)} layouts are as fast as the best within the probe's spread "
                         f"({named}{more}); chosen by fewer requests, then fewer bytes, then less memory")
        if self.search is not None and self.search.complete:
            lines.append(f"search: {self.search.costed} layouts of the grid costed; every other one is proven "
                         "slower than the fastest and not tied with it")
        elif self.search is not None:
            lines.append(f"search: stopped {_stopped(self.search)}"
                         + ("with the fastest proven; layouts that could tie with it were left uncosted"
                            if self.search.fastest_proven else
                            f"none of the grid left uncosted is predicted faster than {self.search.floor:.3g} s "
                            f"(the best: {self.best.score:.3g} s)"))
        if self.search is not None and self.search.kernels == "numpy":
            lines.append("search: ran its bounds' numpy kernels (xarray_zarrmax was installed without a C compiler, "
                         "so without its compiled ones: the same advice, found up to 1.6x more slowly)")
        lines.append(f"best: {self.best.encoding}")
        return "\n".join(lines)


def _stopped(search: SearchOutcome) -> str:
    """Where an incomplete search stopped, and at which budget of `tuning`."""
    if search.stopped_by == "seconds":
        return f"at its time budget (tuning.SEARCH_SECONDS) after costing {search.costed} layouts of the grid, "
    return f"after {search.costed} layouts of the grid (tuning.SEARCH_LAYOUTS), "


def _size(nbytes: int) -> str:
    """``nbytes`` as people say it: 400 B, 16 kB, 1 MB."""
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} B"


#: Tied layouts the report names (`AdviceReport.tied` holds them all)
TIES_NAMED = 8
