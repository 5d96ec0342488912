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
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from xarray_zarrmax.advise import kernels
from xarray_zarrmax.advise.bounds import SearchBounds
from xarray_zarrmax.advise.candidates import candidate_layouts, check_layouts, chunk_grid, neighbours
from xarray_zarrmax.advise.counting import count_read
from xarray_zarrmax.advise.model import (
    Costs,
    Layout,
    Prediction,
    Reader,
    could_beat,
    object_count,
    object_nbytes,
    objects_meet,
    predict_range,
    predict_terms,
    task_memory,
)
from xarray_zarrmax.advise.patterns import (
    Batch,
    PatternSpec,
    normalized,
    parse_patterns,
    pattern_selections,
    weight,
)
from xarray_zarrmax.advise.probe import Progress, deferred, probe_decoder, probe_reader, probe_store, text_progress
from xarray_zarrmax.advise.report import MB, AdviceReport, Candidate, Constraints, nothing_meets
from xarray_zarrmax.advise.search import SearchOutcome, branch_and_bound, layout_terms, tied_with
from xarray_zarrmax.advise.validate import (
    ITEMSIZE,
    check_array,
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
    SEARCH_LAYOUTS,
    SEARCH_SECONDS,
)


def rank(shape: Sequence[int], dims: Sequence[Hashable], itemsize: int, patterns: Mapping[str, PatternSpec], *,
         costs: Costs, reader: Reader, constraints: Constraints = Constraints(),
         layouts: Sequence[Layout] | None = None, coords: Mapping[Hashable, np.ndarray] | None = None,
         variable: Hashable = "", variables: Sequence[Hashable] = (), batch: Batch = Batch(),
         progress: Progress | None = None) -> list[Candidate]:
    """`search` without how far the search went: the layouts costed, ranked."""
    return search(shape, dims, itemsize, patterns, costs=costs, reader=reader, constraints=constraints,
                  layouts=layouts, coords=coords, variable=variable, variables=variables, batch=batch,
                  progress=progress)[0]


def search(shape: Sequence[int], dims: Sequence[Hashable], itemsize: int, patterns: Mapping[str, PatternSpec], *,
           costs: Costs, reader: Reader, constraints: Constraints = Constraints(),
           layouts: Sequence[Layout] | None = None, coords: Mapping[Hashable, np.ndarray] | None = None,
           variable: Hashable = "", variables: Sequence[Hashable] = (), batch: Batch = Batch(),
           progress: Progress | None = None) -> tuple[list[Candidate], SearchOutcome | None]:
    """Cost every layout under every pattern and rank those meeting ``constraints`` by weighted time; and how
    far the search of the grid went (None: ``layouts`` were given).

    Without ``layouts``: the grid of `candidates` (every chunk shape of the per-dimension ladders, each unsharded
    and sharded), searched best first by a lower bound of each layout's time (`search.branch_and_bound`: only
    layouts that could beat, or tie with, the best are costed), then a local search from the best
    `REFINE_STARTS` (`neighbours`, each step to the best neighbour while it is better), for lengths off the
    ladders. The ranking holds the layouts costed. The grid's search stops after `tuning.SEARCH_LAYOUTS`
    layouts or `tuning.SEARCH_SECONDS` seconds, saying so (`SearchOutcome`).

    ``progress`` is called ``(done, total, what)`` as layouts are costed (see `deferred` for a bar that only
    shows when costing runs long).

    Only the weights' ratios decide (`patterns.normalized`); scores are weight x seconds, as given.

    Raises
    ------
    AdviceTypeError, AdviceInputError
        An argument of the wrong type or value (``dims`` and ``shape`` of one array, none empty: `check_array`).
    AdviceInputError
        When no layout meets the constraints (a ValueError): the message gives the smallest value any layout
        achieves.
    """
    dims, shape = check_array(shape, dims)
    itemsize = whole_number("itemsize", itemsize, 1, what=ITEMSIZE)
    for argument, value, kind in (("costs", costs, Costs), ("reader", reader, Reader)):
        if not isinstance(value, kind):
            raise wrong_type(argument, f"xarray_zarrmax.advise.{kind.__name__}(...)", value)
    patterns, exponent = normalized(parse_patterns(patterns))
    selections = {name: pattern_selections(name, spec, dims, shape, coords, variable, batch)
                  for name, spec in patterns.items()}
    searched = layouts is None
    weights = {n: weight(s) for n, s in patterns.items()}
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
                predictions[name] = _prediction(counts, costs, reader)
            candidate = _scored(Candidate(layout, tuple(variables) or (variable,), predictions, 0.0, obj_bytes,
                                          objects, memory), patterns, costs)
        costed[layout] = candidate
        return candidate

    def order(c: Candidate) -> tuple[float, int]:
        return c.score, c.objects  # ties: fewer objects (cheaper to list, write and delete)

    bounds = SearchBounds(selections, weights, shape, itemsize, costs, reader) if searched else None
    if progress is not None:
        progress = _forward_only(progress)
    # progress: one step a layout given or a chunk shape of the grid, then REFINE_STEPS a refined start (the rest
    # at once when it stops)
    grid = chunk_grid(shape, itemsize) if searched else None
    steps = len(grid) if grid is not None else len(layouts or ())
    total = steps + (REFINE_STARTS * REFINE_STEPS if searched else 0)
    outcome = None
    if bounds is not None and grid is not None:

        def polish(starts: list[Candidate]) -> Candidate:
            """From the grid's `REFINE_STARTS` fastest, a local search (`neighbours`, each step to the best
            neighbour while it is better) for lengths off the grid's ladders: the fastest costed after it, and
            every neighbour seen that could tie with it costed (as the search does for the grid's layouts)."""
            passed: list[tuple[list[Layout], np.ndarray]] = []  # neighbours left uncosted, with their bounds
            for s, start in enumerate(sorted(starts, key=order)):
                current = start
                for step_no in range(REFINE_STEPS):
                    # a neighbour whose bound exceeds the current score cannot be a step: left for the ties
                    near_layouts = neighbours(current.layout, shape, itemsize)
                    rows = layout_terms(bounds, near_layouts)
                    could_step = rows @ bounds.key_factors <= current.score
                    near = [c for c in (cost(lay) for lay, ok in zip(near_layouts, could_step, strict=True) if ok)
                            if c is not None]
                    passed.append(([lay for lay, ok in zip(near_layouts, could_step, strict=True) if not ok],
                                   rows[~could_step]))
                    step = min(near, key=order, default=None)
                    if progress is not None:
                        progress(steps + s * REFINE_STEPS + step_no + 1, total, "refining the best")
                    if step is None or order(step) >= order(current):
                        break
                    current = step
            if progress is not None:
                progress(steps + REFINE_STARTS * REFINE_STEPS - 1, total, "costing what could tie with the best")
            while True:  # a tie costed is no faster while the bounds hold; should one be, its ties are costed too
                fastest = min((c for c in costed.values() if c is not None), key=order)
                could = [lay for lays, rows in passed
                         for lay, ok in zip(lays, tied_with(bounds, rows, fastest), strict=True)
                         if ok and lay not in costed]
                if not could:
                    return fastest
                for lay in could:
                    cost(lay)

        def feasible(chunks: np.ndarray, outer: np.ndarray) -> np.ndarray:
            return objects_meet(shape, itemsize, costs.ratio, outer, constraints.max_object_bytes,
                                constraints.max_objects)

        # without a limit on objects every layout meets them: none to test (a search lists millions)
        limited = constraints.max_object_bytes is not None or constraints.max_objects is not None
        outcome = replace(branch_and_bound(shape, grid, bounds, cost, progress, total, SEARCH_LAYOUTS, polish,
                                           REFINE_STARTS, feasible if limited else None, seconds=SEARCH_SECONDS),
                          kernels=kernels.in_use())
        kept = [c for c in costed.values() if c is not None]
    else:
        kept = []
        for i, layout in enumerate(layouts or ()):
            candidate = cost(layout)
            if candidate is not None:
                kept.append(candidate)
            if progress is not None:
                progress(i + 1, total, f"costing {steps} layouts")
    if not kept:
        if progress is not None:
            progress(total, total, "no layout meets the constraints")
        raise AdviceInputError(nothing_meets(shape, itemsize, costs.ratio, reader.task_bytes, constraints,
                                             list(candidate_layouts(shape, itemsize)) if searched
                                             else list(layouts or ())))
    if progress is not None and searched:
        stopped = outcome is not None and not outcome.complete  # (the report says how far it got)
        progress(total, total, f"stopped: {outcome.stopped_by} budget" if stopped and outcome else "costed")
    kept.sort(key=order)
    ranked = [c.scaled(exponent) for c in _tie_break(kept, costs, weights)]
    return ranked, None if outcome is None else replace(outcome, floor=math.ldexp(outcome.floor, exponent))


def _forward_only(progress: Progress) -> Progress:
    """``progress`` that never moves back: the grid's chunk shapes are counted as listed, and the search lists
    the rest after refining the best."""
    shown = 0

    def forward(done: int, total: int, what: str) -> None:
        nonlocal shown
        shown = max(shown, done)
        progress(shown, total, what)

    return forward


def _prediction(counts: Any, costs: Costs, reader: Reader) -> Prediction:
    """A read's prediction, its terms and their range under the costs' spread."""
    terms = predict_terms(counts, costs, reader)
    low, high = predict_range(terms, costs)
    return Prediction(counts, float(sum(terms.values())), low, high, terms)


def _scored(candidate: Candidate, patterns: Mapping[str, PatternSpec], costs: Costs) -> Candidate:
    """The candidate with its score (weight x predicted seconds, summed), the score's range and terms."""
    terms: dict[str, float] = {}
    for name, p in candidate.predictions.items():
        for term, seconds in p.terms.items():
            terms[term] = terms.get(term, 0.0) + weight(patterns[name]) * seconds
    score = sum(weight(patterns[n]) * p.seconds for n, p in candidate.predictions.items())
    low, high = predict_range(terms, costs)
    return replace(candidate, score=score, low=low, high=high, terms=terms)


def _tie_break(ranked: list[Candidate], costs: Costs, weights: Mapping[str, float]) -> list[Candidate]:
    """``ranked`` (by score) with the layouts tied with the first put first, marked ``tied`` and ordered by
    the tie rule: fewer requests, then fewer bytes fetched, then less memory (weighted over the mix; peak
    memory of the read, then of a dask task), then the score, then the chunks longer along the last
    dimension, then the one before, and so on (then the shards likewise: the same pick whatever order the
    search costed them in). Tied: for some costs within the
    probe's spread the layout is as fast as the first (`model.could_beat`); with no spread, only an equal score
    ties."""
    if not ranked:
        return ranked
    first = ranked[0]
    # a paired tie implies overlapping intervals: the cheap test first (a search keeps thousands of layouts)
    reach = first.high * (1 + 1e-9)
    tied = [c for c in ranked if c is first or (c.low <= reach and could_beat(c.terms, first.terms, costs))]
    if len(tied) == 1:
        return ranked
    chosen = {id(c) for c in tied}
    rest = [c for c in ranked if id(c) not in chosen]

    def rule(c: Candidate) -> tuple[Any, ...]:
        requests = sum(w * c.predictions[n].counts.requests for n, w in weights.items())
        nbytes = sum(w * c.predictions[n].counts.bytes for n, w in weights.items())
        peak = max((p.counts.peak_bytes for p in c.predictions.values()), default=0)
        # last: the longer runs along the last dimensions (longer contiguous copies into a C-order result)
        return (requests, nbytes, peak, c.task_memory, c.score, tuple(-n for n in reversed(c.layout.chunks)),
                tuple(-n for n in reversed(c.layout.outer)))

    return [replace(c, tied=True) for c in sorted(tied, key=rule)] + rest


def _sample(var: Any, nbytes: int = SAMPLE_BYTES, dtype: np.dtype | None = None) -> np.ndarray:
    """A leading block of the variable of at most about ``nbytes`` stored, loaded and packed as the writer
    stores it (``dtype``, by default `stored_dtype`; `_packed`): whole along its last dimensions as far as they
    fit, then as many rows of the next as fit, one element along the rest (the first time steps of a small
    variable; a part of the first map of a large one). Never more, whatever its size."""
    dtype = stored_dtype(var) if dtype is None else dtype
    elements = max(1, nbytes // max(dtype.itemsize, 1))
    block = {}
    for dim, n in reversed(list(zip(var.dims, var.shape, strict=True))):
        take = max(1, min(int(n), elements))
        block[dim] = slice(0, take)
        elements //= take
    return _packed(var.isel(block), dtype)


#: The encoding keys of CF packing that decide the stored values (xarray's CF encoders apply them)
PACKING = ("dtype", "scale_factor", "add_offset", "_FillValue", "missing_value", "units", "calendar")


def stored_dtype(var: Any) -> np.dtype:
    """The dtype ``var`` is stored as: its encoding's ``dtype`` (int16 for data packed with ``scale_factor``
    and ``add_offset``, read as float64; what ``to_zarr`` writes), else its own. The advisor costs chunks,
    bytes and decode at this size, never the decoded one (packed int16 costed as float64 was 4x too large)."""
    given = (getattr(var, "encoding", None) or {}).get("dtype")
    if given is None:
        return np.dtype(var.dtype)
    try:
        dtype = np.dtype(given)
    except TypeError:
        raise AdviceInputError(f"expected the encoding dtype of variable {var.name!r} as a numpy dtype. Got "
                               f"{given!r} instead.") from None
    return dtype if dtype.kind in "biufcmM" and dtype.itemsize > 0 else np.dtype(var.dtype)


def _packed(block: Any, dtype: np.dtype) -> np.ndarray:
    """``block``'s values as the writer stores them, CF-packed as xarray's encoder packs them (``add_offset``
    subtracted, divided by ``scale_factor``, rounded to an integer ``dtype``, NaN as ``_FillValue``), so the
    decoder probe times and compresses the stored bytes (int16 compresses and decodes otherwise than float64).
    Written here, not called from xarray: its encoder is not public API."""
    values = np.asarray(block.values)
    if values.dtype == dtype:
        return values
    if values.dtype.kind not in "fc" or dtype.kind not in "iu":
        with np.errstate(invalid="ignore", over="ignore"):
            return values.astype(dtype)
    encoding = block.encoding
    offset = encoding.get("add_offset")
    scale = encoding.get("scale_factor")
    data = values.astype(np.float64)
    if offset is not None:
        data = data - float(offset)
    if scale is not None:
        data = data / float(scale)
    missing = np.isnan(data)
    info = np.iinfo(dtype)
    data = np.clip(np.round(np.nan_to_num(data)), info.min, info.max)  # a sample's values only: never out of range
    fill = encoding.get("_FillValue", encoding.get("missing_value"))
    if fill is not None:
        data[missing] = fill
    return data.astype(dtype)


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


def advised_variables(ds: Any, variable: Hashable | None = None) -> tuple[Hashable, tuple[Hashable, ...]]:
    """The data variable to advise on (``variable``, else the largest that can be laid out) and every data
    variable of its dimensions and shape, which get the same layout: names as the dataset has them (xarray takes
    any hashable; ``1`` and ``'1'`` are two variables)."""
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
        raise AdviceInputError(f"no data variable {variable!r}: the dataset has {names}")
    else:
        chosen = variable
        reason = _advisable(ds[chosen])
        if reason is not None:
            raise AdviceInputError(f"cannot advise a layout for data variable {chosen!r}: {reason}")
    var = ds[chosen]
    same = tuple(n for n in names if ds[n].dims == var.dims and ds[n].shape == var.shape)
    return chosen, same


def check_costs(costs: Any) -> None:
    """``costs``: None (probe) or a `Costs` (a probe's result, `calibrate`, `Costs.load`, or given)."""
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
    dims = tuple(var.dims)
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

    variable: Hashable
    same: tuple[Hashable, ...]
    patterns: dict[str, PatternSpec]
    coords: dict[Hashable, np.ndarray]
    layouts: list[Layout] | None


def advise(ds: Any, patterns: Mapping[str, PatternSpec], *, variable: Hashable | None = None,
           store: str | None = None, storage_options: Mapping[str, Any] | None = None, budget_mb: float | None = None,
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
        ``"full-scan"``, ``"random-batch"``), or a name of your own -> ``(weight, what)``, ``what`` one of:
        a box ``{dim: slice or int}`` (other dimensions whole); a list of boxes, read one after another;
        ``Points({dim: indices, ...}, box=None)``, a vectorised read of N points along the named dimensions
        (``var.isel({d: xr.DataArray(ix, dims="points") ...})``, `Points.isel` gives the indexers); or a
        ``Batch(windows, window, seed=0, positions=None)`` of its own (`Batch.selections` gives its windows as
        ``isel`` dictionaries, to time what was costed).
    variable
        The data variable to advise on (default: the largest); the layout is given for every data variable
        with the same dimensions and shape.
    store
        A local directory or ``s3://bucket/prefix/`` to probe (a few objects written, timed, deleted); None
        keeps the assumed `Costs` of a remote object store, still calibrated for the decoder.
    budget_mb, max_object_mb, max_objects
        Constraints: memory per dask task reading one stored object, bytes per stored object, objects.
    costs
        Calibration to use instead of probing (then nothing is probed: neither the store nor the decoder): a
        report's ``costs``, `calibrate`'s, or `Costs.load`'s. It predicts as the advice it came from (its store
        kind, local or remote, included).
    layouts
        Layouts to compare instead of the generated candidates.
    batch
        The windows of the ``random-batch`` pattern: how many, their lengths, the seed placing them, or their
        explicit ``positions``.
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
    dims = tuple(var.dims)
    shape = tuple(int(n) for n in var.shape)
    config = get_config()
    calibrated = costs is None and store is not None
    stored = stored_dtype(var)
    if costs is None:
        costs = _probe_costs(var, stored, store, storage_options, progress)
    # the store kind travels with the costs: a probe result passed back predicts as the advice it came from
    reader = Reader(concurrency=config.concurrency, full_shard_fraction=config.full_shard_fraction,
                    coalesce_gap=config.coalesce_gap, split_size=config.split_size,
                    inflight_bytes=config.inflight_bytes, task_bytes=config.task_bytes, threads=config.threads,
                    local=costs.local)
    constraints = Constraints(
        max_object_bytes=None if max_object_mb is None else max(1, round(max_object_mb * MB)),
        max_objects=max_objects,
        task_memory_bytes=None if budget_mb is None else max(1, round(budget_mb * MB)),
    )
    # a bar once costing has run PROGRESS_AFTER_S (most searches end before), or the caller's own callback
    costing = (deferred(text_progress(sys.stderr, label="costing"), PROGRESS_AFTER_S) if progress is True
               else progress or None)
    ranked, outcome = search(shape, dims, stored.itemsize, patterns, costs=costs, reader=reader,
                             constraints=constraints, layouts=request.layouts, coords=request.coords,
                             variable=variable, variables=request.same, batch=batch, progress=costing)
    return AdviceReport(variable, dims, shape, {n: weight(s) for n, s in patterns.items()}, costs, reader,
                        calibrated, tuple(ranked), str(stored), outcome)


def _probe_costs(var: Any, stored: np.dtype, store: Any, storage_options: Mapping[str, Any] | None,
                 progress: Progress | bool) -> Costs:
    """`Costs` probed: the store (None: a remote object store's assumed), and the decoder and our reader on a
    sample of ``var`` packed as stored."""
    base = Costs()
    local = False
    store_spread: tuple[tuple[str, float, float], ...] = ()
    if store is not None:
        show = text_progress(sys.stderr) if progress is True else (progress or None)
        probed = probe_store(os.fspath(store), storage_options, progress=show)
        base = Costs(probed.latency_s, probed.request_bps, probed.aggregate_bps, request_s=probed.request_s,
                     connect_s=probed.connect_s)
        local, store_spread = probed.local, probed.spread
    sample = _sample(var, dtype=stored)
    decoder = probe_decoder(sample)
    work = probe_reader(sample)
    # A request costs the store's work (remote: the server's and the client library's, overlapped) and our
    # reader's (on a local store, where nothing overlaps, nearly all of it).
    spread = tuple((name, low + work.request_s, high + work.request_s) if name == "request_s" else (name, low, high)
                   for name, low, high in store_spread) + decoder.spread
    return Costs(base.latency_s, base.request_bps, base.aggregate_bps, decoder.decode_bps, decoder.ratio,
                 request_s=base.request_s + work.request_s, chunk_s=work.chunk_s, index_s=work.index_s,
                 index_entry_s=work.index_entry_s, connect_s=base.connect_s, decode_curve=decoder.curve,
                 local=local, decode_speedup=decoder.speedup, speedup_curve=decoder.speedup_curve, spread=spread)


def calibrate(ds: Any, *, variable: Hashable | None = None, store: str | None = None,
              storage_options: Mapping[str, Any] | None = None, progress: Progress | bool = True) -> Costs:
    """Probe the store, the decoder and our reader, as `advise` does, and return the `Costs` without advising.

    The result is a value to keep: ``costs.save("costs.json")``, then ``Costs.load`` and ``advise(ds, patterns,
    costs=...)``, ``to_zarr(..., encoding="advise", advise_options={"costs": ...})`` or ``zarrmax advise ...
    --costs costs.json`` predict as an advice with this probe would (the store's kind, local or remote, included).

    Parameters
    ----------
    ds
        An xarray Dataset: a sample of ``variable`` (at most `tuning.SAMPLE_BYTES` stored), packed as its
        encoding stores it, calibrates the decoder and the reader.
    variable
        The data variable sampled (default: the largest the advisor can lay out).
    store
        A local directory or ``s3://bucket/prefix/`` to probe (a few objects written, timed, deleted); None:
        a remote object store's costs assumed, the decoder and reader still probed.
    storage_options
        Options of an ``s3://`` store (endpoint, credentials).
    progress
        As `advise`'s: a bar on stderr while the store is probed, none, or a callable ``(done, total, what)``.

    Returns
    -------
    Costs
        The probed costs, with their spread (`Costs.spread`) and the decoder's speedup on the decode pool.
    """
    check_dataset(ds)
    chosen, _ = advised_variables(ds, variable)
    check_store(store, storage_options)
    check_progress(progress)
    var = ds[chosen]
    return _probe_costs(var, stored_dtype(var), store, storage_options, progress)
