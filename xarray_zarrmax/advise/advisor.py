"""Layout advice: which (chunks, shards) make a mix of access patterns fastest on a given store.

>>> report = xarray_zarrmax.advise(ds, patterns={"timeseries": 0.5, "map": 0.5}, store="s3://bucket/probe/")
>>> xarray_zarrmax.to_zarr(ds, url, encoding=report.best.encoding)

The access patterns become box selections (`pattern_selections`), candidate layouts are generated per
dimension (`candidate_layouts`), each is costed by `advise_model` under numbers probed from the store and the
decoder (`advise_probe`), and the ones meeting the constraints are ranked by the weighted predicted time.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xarray_zarrmax.advise.candidates import candidate_layouts, check_layouts, neighbours
from xarray_zarrmax.advise.model import (
    Costs,
    Layout,
    Prediction,
    Reader,
    count_read,
    decode_rate,
    object_count,
    object_nbytes,
    predict,
    task_memory,
)
from xarray_zarrmax.advise.patterns import (
    Batch,
    PatternSpec,
    parse_patterns,
    pattern_selections,
    weight,
)
from xarray_zarrmax.advise.probe import Progress, deferred, probe_decoder, probe_reader, probe_store, text_progress
from xarray_zarrmax.advise.validate import (
    check_dataset,
    check_progress,
    check_store,
    check_variable,
    optional,
    positive_number,
    whole_number,
    wrong_type,
)
from xarray_zarrmax.config import get_config
from xarray_zarrmax.errors import AdviceInputError
from xarray_zarrmax.tuning import (
    MAX_ADVISED_DIMS,
    PROGRESS_AFTER_S,
    REFINE_STARTS,
    REFINE_STEPS,
    SAMPLE_BYTES,
)

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


@dataclass(frozen=True, slots=True)
class Candidate:
    """One layout and what it is predicted to cost, per pattern and weighted."""

    layout: Layout
    variables: tuple[str, ...]
    predictions: Mapping[str, Prediction]
    score: float  # sum of weight x predicted seconds
    object_bytes: int
    objects: int
    task_memory: int

    @property
    def encoding(self) -> dict[str, dict[str, tuple[int, ...]]]:
        """Per data variable, ``{"chunks": ..., "shards": ...}`` for ``to_zarr(..., encoding=...)``."""
        return {name: self.layout.encoding() for name in self.variables}


@dataclass(frozen=True, slots=True)
class AdviceReport:
    """Candidate layouts ranked best first, with the calibration they were costed under."""

    variable: str
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    patterns: Mapping[str, float]
    costs: Costs
    reader: Reader
    calibrated: bool
    candidates: tuple[Candidate, ...] = field(repr=False)

    @property
    def best(self) -> Candidate:
        return self.candidates[0]

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
            row["score"] = c.score
            rows.append(row)
        return pd.DataFrame(rows)

    def __str__(self) -> str:
        where = "probed" if self.calibrated else "assumed (no store probed)"
        c = self.costs
        # with a curve, the rates it gives: large chunks at its largest size, and 16 kB chunks where it spans
        # that size (a sample under 4 KiB is one point, below it)
        large = decode_rate(c.decode_curve, float("inf"), c.decode_bps)
        small = (f" ({decode_rate(c.decode_curve, 16e3, c.decode_bps) / 1e6:.0f} in 16 kB chunks)"
                 if c.decode_curve and c.decode_curve[0][0] <= 16e3 <= c.decode_curve[-1][0] else "")
        lines = [
            f"layout advice for {self.variable!r} {dict(zip(self.dims, self.shape, strict=True))}, "
            f"mix {dict(self.patterns)}",
            f"store {where}: latency {c.latency_s * 1e3:.3g} ms, {c.request_bps / 1e6:.0f} MB/s per request, "
            f"{c.aggregate_bps / 1e6:.0f} MB/s in all; zstd {large / 1e6:.0f} MB/s per thread{small}, "
            f"ratio {c.ratio:.2f}; {self.reader.concurrency} requests in flight; {c.request_s * 1e6:.0f} us of "
            f"work per request, {c.index_s * 1e6:.0f} us per shard index (+{c.index_entry_s * 1e9:.0f} ns per "
            f"entry), {c.chunk_s * 1e6:.0f} us per chunk",
            f"{len(self.candidates)} layouts meet the constraints; best first (predicted seconds per pattern):",
        ]
        names = list(self.patterns)
        lines.append(f"  {'layout':<32} {'score':>9} " + " ".join(f"{n:>12}" for n in names))
        for cand in self.candidates[:10]:
            lines.append(f"  {str(cand.layout):<32} {cand.score:>9.3f} "
                         + " ".join(f"{cand.predictions[n].seconds:>12.3f}" for n in names))
        lines.append(f"best: {self.best.encoding}")
        return "\n".join(lines)


def rank(shape: Sequence[int], dims: Sequence[str], itemsize: int, patterns: Mapping[str, PatternSpec], *,
         costs: Costs, reader: Reader, constraints: Constraints = Constraints(),
         layouts: Sequence[Layout] | None = None, coords: Mapping[str, np.ndarray] | None = None,
         variable: str = "", variables: Sequence[str] = (), batch: Batch = Batch(),
         progress: Progress | None = None) -> list[Candidate]:
    """Cost every layout under every pattern and rank those meeting ``constraints`` by weighted time.

    Without ``layouts``: the generated candidates (`candidate_layouts`), then a local search from the best
    `REFINE_STARTS` of them (`neighbours`, each step to the best neighbour while it is better): the grid of
    powers of two misses shapes such as 23x50x25 that beat every layout on it.

    ``progress`` is called ``(done, total, what)`` as layouts are costed (see `deferred` for a bar that only
    shows when costing runs long).

    Raises
    ------
    AdviceInputError
        When no layout meets the constraints (a ValueError): the message gives the smallest value any layout
        achieves.
    """
    patterns = parse_patterns(patterns)
    selections = {name: pattern_selections(name, spec, dims, shape, coords, variable, batch)
                  for name, spec in patterns.items()}
    searched = layouts is None
    layouts = list(layouts) if layouts is not None else candidate_layouts(shape, itemsize)
    costed: dict[Layout, Candidate | None] = {}

    def cost(layout: Layout) -> Candidate | None:
        """The layout's candidate, None when it breaks a constraint (memoized: a search meets layouts again)."""
        if layout in costed:
            return costed[layout]
        obj_bytes = object_nbytes(layout, itemsize, costs.ratio)
        objects = object_count(shape, layout)
        memory = task_memory(shape, layout, itemsize, costs.ratio, reader.task_bytes)
        candidate = None
        if not ((constraints.max_object_bytes is not None and obj_bytes > constraints.max_object_bytes)
                or (constraints.max_objects is not None and objects > constraints.max_objects)
                or (constraints.task_memory_bytes is not None and memory > constraints.task_memory_bytes)):
            chunk_enc = max(1, round(itemsize * math.prod(layout.chunks) * costs.ratio))
            predictions = {}
            for name, sels in selections.items():
                # compressed: advised layouts are written with zstd (zarr's default), which shrinks the
                # fill-value part of edge chunks whatever the data's own ratio
                counts = count_read(sels, shape, itemsize, layout, chunk_enc, reader, compressed=True)
                predictions[name] = Prediction(counts, predict(counts, costs, reader))
            score = sum(weight(patterns[n]) * p.seconds for n, p in predictions.items())
            candidate = Candidate(layout, tuple(variables) or (variable,), predictions, score, obj_bytes,
                                  objects, memory)
        costed[layout] = candidate
        return candidate

    def order(c: Candidate) -> tuple[float, int]:
        return c.score, c.objects  # ties: fewer objects (cheaper to list, write and delete)

    # progress: one step a layout of the grid, then REFINE_STEPS a refined start (the rest at once when it stops)
    total = len(layouts) + (REFINE_STARTS * REFINE_STEPS if searched else 0)
    kept = []
    for i, layout in enumerate(layouts):
        candidate = cost(layout)
        if candidate is not None:
            kept.append(candidate)
        if progress is not None:
            progress(i + 1, total, f"costing {len(layouts)} layouts")
    if not kept:
        if progress is not None:
            progress(total, total, "no layout meets the constraints")
        raise AdviceInputError(_nothing_meets(shape, itemsize, costs.ratio, reader.task_bytes, constraints, layouts))
    if searched:
        for s, start in enumerate(sorted(kept, key=order)[:REFINE_STARTS]):
            current = start
            for step_no in range(REFINE_STEPS):
                near = [c for c in map(cost, neighbours(current.layout, shape, itemsize)) if c is not None]
                step = min(near, key=order, default=None)
                if progress is not None:
                    progress(len(layouts) + s * REFINE_STEPS + step_no + 1, total, "refining the best")
                if step is None or order(step) >= order(current):
                    break
                current = step
        if progress is not None:
            progress(total, total, "refining the best")
        kept = [c for c in costed.values() if c is not None]
    kept.sort(key=order)
    return kept


def _nothing_meets(shape: Sequence[int], itemsize: int, ratio: float, task_bytes: int, constraints: Constraints,
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
        best = min(others, key=measure)
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


def _sample(var: Any, nbytes: int = SAMPLE_BYTES) -> np.ndarray:
    """A leading block of the variable of at most about ``nbytes``, loaded: whole along its last dimensions
    as far as they fit, then as many rows of the next as fit, one element along the rest (the first time
    steps of a small variable; a part of the first map of a large one). Never more, whatever its size."""
    elements = max(1, nbytes // max(var.dtype.itemsize, 1))
    block = {}
    for dim, n in reversed(list(zip(var.dims, var.shape, strict=True))):
        take = max(1, min(int(n), elements))
        block[dim] = slice(0, take)
        elements //= take
    return np.asarray(var.isel(block).values)


def _advisable(var: Any) -> str | None:
    """Why the advisor cannot lay out ``var`` (None: it can)."""
    if var.ndim == 0:
        return "it has no dimension"
    if var.size == 0:
        return f"it is empty (shape {tuple(var.shape)})"
    if var.dtype.kind not in "biufcmM":
        return f"its values are of dtype {var.dtype} (numbers, booleans, times)"
    long = [f"{d}: {n}" for d, n in zip(var.dims, var.shape, strict=True) if n > 1]
    if len(long) > MAX_ADVISED_DIMS:
        return (f"it has {len(long)} dimensions longer than 1 ({', '.join(long)}); the advisor lays out at most "
                f"{MAX_ADVISED_DIMS} (tuning.MAX_ADVISED_DIMS)")
    return None


def advised_variables(ds: Any, variable: Hashable | None = None) -> tuple[str, tuple[str, ...]]:
    """The data variable to advise on (``variable``, else the largest that can be laid out) and every data
    variable of its dimensions and shape, which get the same layout."""
    names = list(ds.data_vars)
    check_variable(variable)
    if variable is None:
        fit = [n for n in names if _advisable(ds[n]) is None]
        if not fit:
            why = "; ".join(f"{n!r}: {_advisable(ds[n])}" for n in names) or "it has none"
            raise AdviceInputError("expected a data variable with dimensions, none of them empty, and values that "
                                   f"are numbers, booleans or times, to advise on. Got none such: {why}.")
        chosen = max(fit, key=lambda n: ds[n].size * ds[n].dtype.itemsize)
    elif variable not in ds.data_vars:
        raise AdviceInputError(f"no data variable {variable!r}: the dataset has {[str(n) for n in names]}")
    else:
        chosen = variable
        reason = _advisable(ds[chosen])
        if reason is not None:
            raise AdviceInputError(f"cannot advise a layout for data variable {chosen!r}: {reason}")
    var = ds[chosen]
    same = tuple(str(n) for n in names if ds[n].dims == var.dims and ds[n].shape == var.shape)
    return str(chosen), same


def check_costs(costs: Any) -> None:
    if costs is not None and not isinstance(costs, Costs):
        raise wrong_type("costs", "xarray_zarrmax.advise.Costs(...) (or None: probe)", costs)


def check_request(ds: Any, patterns: Any, *, variable: Any = None, store: Any = None, storage_options: Any = None,
                  budget_mb: Any = None, max_object_mb: Any = None, max_objects: Any = None, costs: Any = None,
                  layouts: Any = None, batch: Any = Batch(), progress: Any = True) -> Request:
    """Everything `advise` checks before it probes (no I/O but two values of each dimension's coordinate):
    every argument's type and value (`AdviceTypeError`, `AdviceInputError`, each naming the argument), the
    variable, the patterns against its dimensions, the constraints and layouts."""
    check_dataset(ds)
    parsed = parse_patterns(patterns)
    chosen, same = advised_variables(ds, variable)
    var = ds[chosen]
    check_store(store, storage_options)
    check_costs(costs)
    check_progress(progress)
    optional(positive_number, "budget_mb", budget_mb, "a positive number of MB")
    optional(positive_number, "max_object_mb", max_object_mb, "a positive number of MB")
    optional(whole_number, "max_objects", max_objects, 1)
    if not isinstance(batch, Batch):
        raise wrong_type("batch", "xarray_zarrmax.advise.Batch(windows, {dim: size})", batch)
    dims = tuple(str(d) for d in var.dims)
    checked = check_layouts(layouts, dims)
    shape = tuple(int(n) for n in var.shape)
    # two values tell a regular coordinate's step (`patterns._span`): the rest is never loaded
    coords = {d: np.asarray(ds[d][:2].values) for d in dims if d in ds.coords and ds[d].ndim == 1}
    for name, spec in parsed.items():
        pattern_selections(name, spec, dims, shape, coords, chosen, batch)
    return Request(chosen, same, parsed, coords, checked)


@dataclass(frozen=True, slots=True)
class Request:
    """What `check_request` found: the variable, those laid out with it, the patterns, two values of each of
    its dimensions' coordinates, and the layouts given (None: search)."""

    variable: str
    same: tuple[str, ...]
    patterns: dict[str, PatternSpec]
    coords: dict[str, np.ndarray]
    layouts: list[Layout] | None


def advise(ds: Any, patterns: Mapping[str, PatternSpec], *, variable: str | None = None, store: str | None = None,
           storage_options: Mapping[str, Any] | None = None, budget_mb: float | None = None,
           max_object_mb: float | None = None, max_objects: int | None = None, costs: Costs | None = None,
           layouts: Sequence[Layout] | None = None, batch: Batch = Batch(),
           progress: Progress | bool = True) -> AdviceReport:
    """Rank candidate layouts of a dataset's variable for a weighted mix of access patterns.

    Parameters
    ----------
    ds
        An xarray Dataset (opened lazily: only a sample of ``variable`` is read, for the decoder probe).
    patterns
        Pattern name -> weight (``"timeseries"``, ``"map"``, ``"region-mean"``, ``"map-mean"``,
        ``"full-scan"``, ``"random-batch"``), or a name of your own -> ``(weight, {dim: slice or int})``.
    variable
        The data variable to advise on (default: the largest); the layout is given for every data variable
        with the same dimensions and shape.
    store
        A local directory or ``s3://bucket/prefix/`` to probe (a few objects written, timed, deleted); None
        keeps the assumed `Costs` of a remote object store, still calibrated for the decoder.
    budget_mb, max_object_mb, max_objects
        Constraints: memory per dask task reading one stored object, bytes per stored object, objects.
    costs
        Calibration to use instead of probing (then nothing is probed: neither the store nor the decoder).
    layouts
        Layouts to compare instead of the generated candidates.
    batch
        The windows of the ``random-batch`` pattern.
    progress
        True: a progress bar on stderr while the store is probed, and while layouts are costed once that has
        taken `tuning.PROGRESS_AFTER_S` (a large batch, many dimensions); False: none; or a callable
        ``(done, total, what)``, called for both.

    Raises
    ------
    AdviceTypeError, AdviceInputError
        An argument of the wrong type (also a TypeError) or value (a ValueError), named in the message, before
        anything is probed.
    StoreAccessError
        The probe of ``store`` was refused or could not reach it (an OSError).
    """
    request = check_request(ds, patterns, variable=variable, store=store, storage_options=storage_options,
                            budget_mb=budget_mb, max_object_mb=max_object_mb, max_objects=max_objects, costs=costs,
                            layouts=layouts, batch=batch, progress=progress)
    variable, patterns = request.variable, request.patterns
    var = ds[variable]
    dims = tuple(str(d) for d in var.dims)
    shape = tuple(int(n) for n in var.shape)
    config = get_config()
    calibrated = costs is None and store is not None
    local = False
    if costs is None:
        base = Costs()
        if store is not None:
            show = text_progress(sys.stderr) if progress is True else (progress or None)
            probed = probe_store(os.fspath(store), storage_options, progress=show)
            base = Costs(probed.latency_s, probed.request_bps, probed.aggregate_bps, request_s=probed.request_s,
                         connect_s=probed.connect_s)
            local = probed.local
        sample = _sample(var)
        decoder = probe_decoder(sample)
        work = probe_reader(sample)
        # A request costs the store's work (remote: the server's and the client library's, overlapped) and our
        # reader's (on a local store, where nothing overlaps, nearly all of it).
        costs = Costs(base.latency_s, base.request_bps, base.aggregate_bps, decoder.decode_bps, decoder.ratio,
                      request_s=base.request_s + work.request_s, chunk_s=work.chunk_s, index_s=work.index_s,
                      index_entry_s=work.index_entry_s, connect_s=base.connect_s, decode_curve=decoder.curve)
    reader = Reader(concurrency=config.concurrency, full_shard_fraction=config.full_shard_fraction,
                    coalesce_gap=config.coalesce_gap, split_size=config.split_size,
                    inflight_bytes=config.inflight_bytes, task_bytes=config.task_bytes, threads=config.threads,
                    local=local)
    constraints = Constraints(
        max_object_bytes=None if max_object_mb is None else max(1, round(max_object_mb * MB)),
        max_objects=max_objects,
        task_memory_bytes=None if budget_mb is None else max(1, round(budget_mb * MB)),
    )
    # a bar once costing has run PROGRESS_AFTER_S (most searches end before), or the caller's own callback
    costing = (deferred(text_progress(sys.stderr, label="costing"), PROGRESS_AFTER_S) if progress is True
               else progress or None)
    ranked = rank(shape, dims, var.dtype.itemsize, patterns, costs=costs, reader=reader, constraints=constraints,
                  layouts=request.layouts, coords=request.coords, variable=variable, variables=request.same,
                  batch=batch, progress=costing)
    return AdviceReport(variable, dims, shape, {n: weight(s) for n, s in patterns.items()}, costs, reader,
                        calibrated, tuple(ranked))
