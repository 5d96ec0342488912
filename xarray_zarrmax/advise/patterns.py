"""Access patterns (a time series, a map, a region's mean, a random batch...) as the box selections they read.

`parse_patterns` checks a ``{pattern: weight}`` mix as users write it; `pattern_selections` turns one pattern into
the selections it makes of an array of given dimensions and shape. No I/O and no costs here: `model` costs them.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xarray_zarrmax.advise.model import PointRead
from xarray_zarrmax.advise.validate import check_array, is_real, is_whole, shown, whole_number, wrong_type
from xarray_zarrmax.core.geometry import Axis, Selection
from xarray_zarrmax.errors import AdviceInputError, AdviceTypeError
from xarray_zarrmax.tuning import (
    BATCH_SPACE,
    BATCH_TIME,
    BATCH_WINDOWS,
    MAP_MEAN_STEPS,
    MAX_BATCH_WINDOWS,
    REGION_DEGREES,
)

KNOWN_PATTERNS = ("timeseries", "map", "region-mean", "map-mean", "full-scan", "random-batch")

@dataclass(frozen=True, slots=True)
class Batch:
    """A batch of windows read one after another: the ``random-batch`` pattern (or, under a name of your own,
    ``(weight, Batch(...))``).

    Parameters
    ----------
    windows
        How many windows (1 to `tuning.MAX_BATCH_WINDOWS`); default 16 (`tuning.BATCH_WINDOWS`), or
        ``len(positions)`` when positions are given.
    window
        ``{dim: length}`` of each window; default 8 along the time dimension, 32 along each other.
    seed
        Seed of the random generator placing the windows (a whole number >= 0): the same seed, the same
        windows, for every candidate layout and every call.
    positions
        Explicit window starts, ``[{dim: start}, ...]``, instead of random ones: a dimension a position does not
        name starts at 0. Each window must fit inside the array.

    `selections` gives the windows as ``isel`` dictionaries, to time exactly what was costed.
    """

    windows: int | None = None
    window: Mapping[str, int] | None = None
    seed: int = 0
    positions: Sequence[Mapping[str, int]] | None = None

    def __post_init__(self) -> None:
        what = f"a whole number of windows from 1 to {MAX_BATCH_WINDOWS} (tuning.MAX_BATCH_WINDOWS)"
        whole_number("Batch seed", self.seed, 0, what="a seed, a whole number >= 0")
        object.__setattr__(self, "seed", int(self.seed))
        positions = _parse_positions(self.positions)
        object.__setattr__(self, "positions", positions)
        if positions is not None and self.windows is not None and self.windows != len(positions):
            raise AdviceInputError(f"expected Batch windows equal to the number of positions ({len(positions)}), or "
                                   f"left out. Got windows={self.windows!r} instead.")
        if self.windows is None:
            object.__setattr__(self, "windows", BATCH_WINDOWS if positions is None else len(positions))
        whole_number("Batch windows" if positions is None else "Batch positions' count", self.windows, 1,
                     MAX_BATCH_WINDOWS, what)
        object.__setattr__(self, "windows", int(self.windows))  # type: ignore[arg-type]
        if self.window is None:
            return
        if not isinstance(self.window, Mapping):
            raise wrong_type("Batch window", "a mapping {dim: window length}, e.g. {'time': 8, 'lat': 32}",
                             self.window)
        window = {}
        for dim, size in self.window.items():
            if not isinstance(dim, str):
                raise wrong_type("Batch window's dimensions", "names (strings)", dim)
            window[dim] = whole_number(f"Batch window[{dim!r}]", size, 1, what="a window length >= 1")
        object.__setattr__(self, "window", window)

    def selections(self, dims: Sequence[Hashable], shape: Sequence[int]) -> list[dict[Hashable, slice]]:
        """The windows over an array of ``dims`` and ``shape``, in the order they are read, as ``isel``
        dictionaries: ``[var.isel(s).values for s in batch.selections(var.dims, var.shape)]`` reads what
        the advisor costs.

        Raises
        ------
        AdviceInputError
            A window or position names a dimension the array does not have, or a position puts a window
            outside the array.
        """
        dims, shape = check_array(shape, dims)
        boxes = _batch(self, dims, shape, _time_dimension(dims), "")
        return [{d: slice(a.start, a.stop) for d, a in zip(dims, box, strict=True)} for box in boxes]


def _parse_positions(positions: Any) -> tuple[dict[str, int], ...] | None:
    """``positions=``: None, or a sequence of ``{dim: start}`` with whole starts >= 0."""
    if positions is None:
        return None
    expected = "a list of window starts [{dim: start}, ...], e.g. [{'time': 0, 'lat': 64}]"
    if isinstance(positions, str | bytes | Mapping) or not isinstance(positions, Sequence):
        raise wrong_type("Batch positions", expected, positions)
    if not positions:
        raise AdviceInputError(f"expected Batch positions as {expected}. Got none.")
    parsed = []
    for i, position in enumerate(positions):
        if not isinstance(position, Mapping):
            raise wrong_type(f"Batch positions[{i}]", "a mapping {dim: start}", position)
        starts = {}
        for dim, start in position.items():
            if not isinstance(dim, str):
                raise wrong_type(f"Batch positions[{i}]'s dimensions", "names (strings)", dim)
            starts[dim] = whole_number(f"Batch positions[{i}][{dim!r}]", start, 0, what="a window start >= 0")
        parsed.append(starts)
    return tuple(parsed)


@dataclass(frozen=True, slots=True, eq=False)
class Points:
    """A pointwise (vectorised) read: ``N`` points along the dimensions ``indices`` names, each given the same
    number of integer indices (negative ones from the end), and along every other dimension all its elements,
    or what ``box`` gives (``{dim: slice or int}``). Read as xarray's vectorised indexing reads it, each chunk
    holding any selected element read once:
    ``var.isel({d: xr.DataArray(ix, dims="points") for d, ix in indices.items()} | box)``
    (`isel` gives those indexers, checked).
    """

    indices: Mapping[str, Sequence[int] | np.ndarray]
    box: Mapping[str, slice | int] | None = None

    def __post_init__(self) -> None:
        expected = "a mapping {dim: indices}, e.g. {'lat': [10, 20], 'lon': [5, 7]}"
        if not isinstance(self.indices, Mapping) or not self.indices:
            raise wrong_type("Points indices", expected, self.indices)
        parsed = {}
        for dim, ix in self.indices.items():
            if not isinstance(dim, str):
                raise wrong_type("Points indices' dimensions", "names (strings)", dim)
            parsed[dim] = _point_indices(dim, ix)
        counts = {d: a.size for d, a in parsed.items()}
        if len(set(counts.values())) > 1:
            raise AdviceInputError(f"expected Points indices of one length per dimension (one index each, per "
                                   f"point). Got lengths {counts} instead.")
        if self.box is not None and not isinstance(self.box, Mapping):
            raise wrong_type("Points box", "a mapping {dim: slice or int} (or None)", self.box)
        clash = sorted(set(parsed) & set(self.box or {}))
        if clash:
            raise AdviceInputError(f"expected Points box over dimensions other than the points'. Got {clash} in "
                                   "both.")
        object.__setattr__(self, "indices", parsed)

    @property
    def count(self) -> int:
        """How many points."""
        return len(next(iter(self.indices.values())))

    def isel(self, dims: Sequence[Hashable], shape: Sequence[int], name: str = "points",
             variable: Hashable = "") -> dict[Hashable, np.ndarray | slice | int]:
        """The indexers, checked against an array of ``dims`` and ``shape``: per pointed dimension its
        indices (from 0 to n - 1), per dimension of ``box`` its slice or index. Wrap the arrays as
        ``xr.DataArray(a, dims="points")`` for vectorised indexing.

        Raises
        ------
        AdviceInputError
            A dimension the array does not have, an index outside its dimension, a box outside the array.
        """
        dims, shape = check_array(shape, dims)
        check_selection(name, dict(self.box or {}), dims, shape, variable)
        out: dict[Hashable, np.ndarray | slice | int] = {}
        for dim, given in self.indices.items():
            ix = np.asarray(given, dtype=np.int64)
            if dim not in dims:
                raise AdviceInputError(f"pattern {name!r} points along dimension {dim!r}, which variable "
                                       f"{variable!r} does not have: its dimensions are {dims}")
            n = shape[dims.index(dim)]
            bad = ix[(ix < -n) | (ix >= n)]
            if bad.size:
                raise AdviceInputError(f"pattern {name!r}: expected point indices of dimension {dim!r} from {-n} to "
                                       f"{n - 1} (variable {variable!r} has {n} elements along it). Got "
                                       f"{int(bad[0])} instead.")
            out[dim] = np.where(ix < 0, ix + n, ix)
        return out | dict(self.box or {})


#: The range of a point index: an int64 (one beyond it would wrap, and a negative index reads from the end)
INT64 = np.iinfo(np.int64)


def _point_indices(dim: str, ix: Any) -> np.ndarray:
    """One dimension's point indices as int64: a non-empty list of whole numbers, each within int64 as given (a
    uint64 of 2**64 - 1 cast as it is becomes -1, the last element)."""
    where, expected = f"Points indices[{dim!r}]", "a non-empty list of whole numbers"
    try:
        arr = np.asarray(None if isinstance(ix, str | bytes | Mapping) else ix)
    except (TypeError, ValueError, OverflowError):
        arr = np.asarray(None)
    if arr.ndim != 1 or arr.size == 0:
        raise wrong_type(where, expected, ix)
    if arr.dtype.kind == "i":
        return arr.astype(np.int64)
    if arr.dtype.kind == "u":
        given: list[Any] = arr[arr > INT64.max][:1].tolist()
    else:
        # floats or objects (ints beyond 64 bits; [2**63 + 5, -1] becomes float64): each value as it was given
        given = arr.tolist() if isinstance(ix, np.ndarray) else list(ix)
        if not all(is_whole(v) for v in given):
            raise wrong_type(where, expected, ix)
    bad = next((v for v in given if not INT64.min <= v <= INT64.max), None)
    if bad is not None:
        raise AdviceInputError(f"expected {where} as whole numbers from {INT64.min} to {INT64.max} (int64). Got "
                               f"{int(bad)} instead.")
    return arr.astype(np.int64) if arr.dtype.kind == "u" else np.asarray([int(v) for v in given], dtype=np.int64)


Boxes = Sequence[Mapping[Hashable, slice | int]]
PatternSpec = float | tuple[float, Mapping[Hashable, slice | int] | Boxes | Points | Batch]


def _time_dimension(dims: Sequence[Hashable]) -> int:
    """The time dimension: named ``time``, ``t`` or ``*time*``, else the first. The others are the map's."""
    names = [str(d).lower() for d in dims]
    return next((i for i, n in enumerate(names) if n in ("time", "t") or "time" in n), 0)


def _span(coord: np.ndarray | None, n: int, units: float) -> int:
    """Cells covering ``units`` of a regular numeric coordinate, else the same fraction of 180 units."""
    if coord is not None and coord.size > 1 and np.issubdtype(coord.dtype, np.number):
        step = abs(float(coord[1]) - float(coord[0]))
        if step > 0:
            return max(1, min(n, round(units / step)))
    return max(1, min(n, round(n * units / 180.0)))


def _centered(n: int, size: int) -> Axis:
    start = (n - size) // 2
    return Axis(start, start + size)


def pattern_selections(name: str, spec: PatternSpec, dims: Sequence[Hashable], shape: Sequence[int],
                       coords: Mapping[Hashable, np.ndarray] | None = None, variable: Hashable = "",
                       batch: Batch = Batch()) -> list[Selection | PointRead]:
    """The selections one access pattern reads, in order: boxes, or for `Points` one `PointRead`.

    Raises
    ------
    ValueError
        An unknown pattern name, a user-defined selection of a dimension the variable does not have, or
        ``dims`` and ``shape`` that do not describe an array the advisor lays out (`validate.check_array`).
    """
    coords = coords or {}
    dims, shape = check_array(shape, dims)
    if isinstance(spec, tuple):
        return _own(name, spec[1], dims, shape, variable)
    if name not in KNOWN_PATTERNS:
        raise _unknown(name)
    time = _time_dimension(dims)

    def at_times(axis: Axis | None = None) -> Selection:
        """Every element, but only ``axis`` along the time dimension."""
        return tuple(axis if i == time and axis is not None else Axis(0, n) for i, n in enumerate(shape))

    if name == "full-scan":
        return [at_times()]
    if name == "timeseries":
        return [tuple(Axis(0, n) if i == time else _centered(n, 1) for i, n in enumerate(shape))]
    if name == "map":
        return [at_times(_centered(shape[time], 1))]
    if name == "map-mean":
        return [at_times(_centered(shape[time], min(MAP_MEAN_STEPS, shape[time])))]
    if name == "region-mean":
        return [tuple(Axis(0, n) if i == time else _centered(n, _span(coords.get(dims[i]), n, REGION_DEGREES))
                      for i, n in enumerate(shape))]
    return list(_batch(batch, dims, shape, time, variable))


def _own(name: str, what: Any, dims: tuple[Hashable, ...], shape: tuple[int, ...],
         variable: Hashable) -> list[Selection | PointRead]:
    """A pattern of the user's own: one box, a list of boxes, `Points` or a `Batch`."""
    if isinstance(what, Batch):
        return list(_batch(what, dims, shape, _time_dimension(dims), variable, name))
    if isinstance(what, Points):
        indexers = what.isel(dims, shape, name, variable)
        pointed = tuple(dims.index(d) for d in what.indices)
        points = np.stack([np.asarray(indexers[dims[i]]) for i in pointed], axis=-1)
        box = check_selection(name, dict(what.box or {}), dims, shape, variable)
        return [PointRead(pointed, points, box)]
    if isinstance(what, Mapping):
        return [check_selection(name, what, dims, shape, variable)]
    return [check_selection(f"{name}[{i}]", box, dims, shape, variable) for i, box in enumerate(what)]


def _batch(batch: Batch, dims: Sequence[Hashable], shape: Sequence[int], time: int, variable: Hashable,
           name: str = "random-batch") -> list[Selection]:
    """The batch's windows: at its positions, else drawn from its seed (seed 0: the windows before seeds)."""
    sizes = [BATCH_TIME if i == time else BATCH_SPACE for i in range(len(shape))]
    for dim, size in (batch.window or {}).items():
        if dim not in dims:
            raise AdviceInputError(f"pattern {name!r} selects dimension {dim!r}, which variable {variable!r} "
                                   f"does not have: its dimensions are {tuple(dims)}")
        sizes[list(dims).index(dim)] = size
    lengths = [min(n, want) for n, want in zip(shape, sizes, strict=True)]
    if batch.positions is not None:
        return [_placed(name, i, position, dims, shape, lengths, variable)
                for i, position in enumerate(batch.positions)]
    rng = np.random.default_rng(batch.seed)  # the same windows for every candidate
    windows = []
    for _ in range(int(batch.windows or 0)):
        axes = []
        for n, size in zip(shape, lengths, strict=True):
            start = int(rng.integers(0, n - size + 1))
            axes.append(Axis(start, start + size))
        windows.append(tuple(axes))
    return windows


def _placed(name: str, i: int, position: Mapping[str, int], dims: Sequence[Hashable], shape: Sequence[int],
            lengths: Sequence[int], variable: Hashable) -> Selection:
    """The window starting at ``position`` (0 along the dimensions it does not name), checked to fit."""
    starts = [0] * len(shape)
    for dim, start in position.items():
        if dim not in dims:
            raise AdviceInputError(f"pattern {name!r}: Batch positions[{i}] names dimension {dim!r}, which variable "
                                   f"{variable!r} does not have: its dimensions are {tuple(dims)}")
        d = list(dims).index(dim)
        if start > shape[d] - lengths[d]:
            raise AdviceInputError(f"pattern {name!r}: expected Batch positions[{i}][{dim!r}] from 0 to "
                                   f"{shape[d] - lengths[d]}, so that a window of {lengths[d]} fits in the "
                                   f"{shape[d]} elements along it. Got {start} instead.")
        starts[d] = start
    return tuple(Axis(s, s + n) for s, n in zip(starts, lengths, strict=True))


def check_selection(name: str, selection: Any, dims: Sequence[Hashable], shape: Sequence[int],
                    variable: Hashable = "") -> Selection:
    """The box a pattern of the user's own reads, ``{dim: index or slice}`` (other dimensions whole), with
    each value checked against the variable: an index from -n to n - 1 (negative from the end, as NumPy), a
    slice of step 1 (or none) whose start and stop lie in -n to n and which selects at least one element.

    Raises
    ------
    AdviceTypeError
        The selection is not a mapping, or a value is neither a whole number nor a slice of whole numbers.
    AdviceInputError
        A dimension the variable does not have, an index or a slice bound outside the dimension, a slice that
        selects nothing or has a step. The message names the pattern, the dimension, the value and the range.
    """
    if not isinstance(selection, Mapping):
        raise AdviceTypeError(f"pattern {name!r}: expected its selection as a mapping {{dim: index or slice}}, e.g. "
                              f"{{'time': slice(0, 744)}}. Got {shown(selection, typed=True)} instead.")
    axes = [Axis(0, int(n)) for n in shape]
    for dim, key in selection.items():
        if dim not in dims:
            raise AdviceInputError(f"pattern {name!r} selects dimension {dim!r}, which variable {variable!r} does "
                                   f"not have: its dimensions are {tuple(dims)}")
        i = list(dims).index(dim)
        n = int(shape[i])
        where = f"pattern {name!r}: expected"
        length = f"(variable {variable!r} has {n} elements along it)"
        if isinstance(key, slice):
            if any(v is not None and not is_whole(v) for v in (key.start, key.stop, key.step)):
                raise AdviceTypeError(f"{where} a slice of whole numbers for dimension {dim!r}. Got "
                                      f"{shown(key)} instead.")
            if key.step not in (None, 1):
                raise AdviceInputError(f"{where} a slice with step 1 (or none) for dimension {dim!r}: the advisor "
                                       f"costs boxes. Got {shown(key)} instead.")
            if any(v is not None and not -n <= v <= n for v in (key.start, key.stop)):
                raise AdviceInputError(f"{where} a slice of dimension {dim!r} with start and stop from {-n} to {n} "
                                       f"{length}. Got {shown(key)} instead.")
            start, stop, _ = key.indices(n)
            if stop <= start:
                raise AdviceInputError(f"{where} a slice of dimension {dim!r} selecting at least one of its {n} "
                                       f"elements. Got {shown(key)} instead, which selects none.")
            axes[i] = Axis(start, stop)
        elif is_whole(key):
            if not -n <= key < n:
                raise AdviceInputError(f"{where} an index of dimension {dim!r} from {-n} to {n - 1} {length}. Got "
                                       f"{key!r} instead.")
            j = int(key) % n
            axes[i] = Axis(j, j + 1)
        else:
            raise AdviceTypeError(f"{where} an index (a whole number) or a slice of whole numbers for dimension "
                                  f"{dim!r}. Got {shown(key, typed=True)} instead.")
    return tuple(axes)


def _unknown(name: str) -> AdviceInputError:
    return AdviceInputError(f"unknown access pattern {name!r}: expected one of {', '.join(KNOWN_PATTERNS)}, or a "
                            f"selection {{dim: slice}} of your own")


_OWN = ("a weight, or (weight, {dim: index or slice}) for a pattern of your own (or (weight, [boxes]), "
        "(weight, Points(...)), (weight, Batch(...)))")


def parse_patterns(patterns: Any) -> dict[str, PatternSpec]:
    """Check a mix as users write it: a mapping of pattern names (known ones, or names of your own given a
    selection) to positive weights, or to ``(weight, what)`` where ``what`` is a box ``{dim: index or slice}``,
    a non-empty list of boxes, `Points` or a `Batch`; at least one pattern."""
    example = "{'timeseries': 0.5, 'map': 0.5}"
    if not isinstance(patterns, Mapping):
        raise wrong_type("patterns", f"a mapping of pattern name -> weight, e.g. {example}", patterns)
    if not patterns:
        raise AdviceInputError(f"expected at least one access pattern, e.g. {example}; known patterns are "
                               f"{', '.join(KNOWN_PATTERNS)}")
    for name, spec in patterns.items():
        if not isinstance(name, str):
            raise wrong_type("pattern names", f"strings ({', '.join(KNOWN_PATTERNS)} or names of your own)", name)
        if isinstance(spec, tuple | list) or isinstance(spec, Mapping):
            if not isinstance(spec, tuple) or len(spec) != 2 or not _is_own(spec[1]):
                raise wrong_type(f"patterns[{name!r}]", _OWN, spec)
            weight = spec[0]
        elif name not in KNOWN_PATTERNS:
            raise _unknown(name)
        else:
            weight = spec
        if not is_real(weight):
            raise AdviceTypeError(f"expected a positive weight for pattern {name!r}. Got {shown(weight, typed=True)} "
                                  "instead.")
        try:
            value = float(weight)
        except OverflowError:  # an int past a float's range
            value = math.inf
        if not math.isfinite(value) or value <= 0:
            raise AdviceInputError(f"expected a positive weight for pattern {name!r}. Got {shown(weight)} instead.")
    return dict(patterns)


def _is_own(what: Any) -> bool:
    """A box, a non-empty list of boxes, `Points` or a `Batch`."""
    if isinstance(what, Mapping | Points | Batch):
        return True
    return isinstance(what, list | tuple) and bool(what) and all(isinstance(b, Mapping) for b in what)


def weight(spec: PatternSpec) -> float:
    return float(spec[0] if isinstance(spec, tuple) else spec)


def normalized(patterns: Mapping[str, PatternSpec]) -> tuple[dict[str, PatternSpec], int]:
    """The mix with every weight times one power of two, the largest from 1 to 2, and that power's exponent
    negated (what scales the weighted numbers back). Only the weights' ratios then decide: weights of 1e-320
    each made every weighted time underflow (every layout scored 0, and another won); a power of two scales
    every product and sum exactly, so for any weights whose times do not underflow nothing changes."""
    exponent = math.frexp(max(weight(s) for s in patterns.values()))[1] - 1
    out = {name: (math.ldexp(weight(s), -exponent), s[1]) if isinstance(s, tuple) else math.ldexp(weight(s), -exponent)
           for name, s in patterns.items()}
    return out, exponent
