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

from xarray_zarrmax.advise.validate import is_real, is_whole, shown, whole_number, wrong_type
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

PatternSpec = float | tuple[float, Mapping[Hashable, slice | int]]


@dataclass(frozen=True, slots=True)
class Batch:
    """The ``random-batch`` pattern: ``windows`` windows at seeded random places, each ``window[dim]`` long
    along the dimensions it names (default: 8 time steps, 32 cells along each other dimension)."""

    windows: int = BATCH_WINDOWS
    window: Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        whole_number("Batch windows", self.windows, 1, MAX_BATCH_WINDOWS,
                     f"a whole number of windows from 1 to {MAX_BATCH_WINDOWS} (tuning.MAX_BATCH_WINDOWS)")
        object.__setattr__(self, "windows", int(self.windows))
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


def _time_dimension(dims: Sequence[str]) -> int:
    """The time dimension: named ``time``, ``t`` or ``*time*``, else the first. The others are the map's."""
    names = [d.lower() for d in dims]
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


def pattern_selections(name: str, spec: PatternSpec, dims: Sequence[str], shape: Sequence[int],
                       coords: Mapping[str, np.ndarray] | None = None, variable: str = "",
                       batch: Batch = Batch()) -> list[Selection]:
    """The box selections one access pattern reads, in order.

    Raises
    ------
    ValueError
        An unknown pattern name, or a user-defined selection of a dimension the variable does not have.
    """
    coords = coords or {}
    shape = [int(n) for n in shape]
    if isinstance(spec, tuple):
        return [check_selection(name, spec[1], dims, shape, variable)]
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
    return _batch(batch, dims, shape, time, variable)


def _batch(batch: Batch, dims: Sequence[str], shape: Sequence[int], time: int, variable: str) -> list[Selection]:
    sizes = [BATCH_TIME if i == time else BATCH_SPACE for i in range(len(shape))]
    for dim, size in (batch.window or {}).items():
        if dim not in dims:
            raise AdviceInputError(f"pattern 'random-batch' selects dimension {dim!r}, which variable {variable!r} "
                                   f"does not have: its dimensions are {tuple(dims)}")
        sizes[list(dims).index(dim)] = size
    rng = np.random.default_rng(0)  # the same windows for every candidate
    windows = []
    for _ in range(batch.windows):
        axes = []
        for n, want in zip(shape, sizes, strict=True):
            size = min(n, want)
            start = int(rng.integers(0, n - size + 1))
            axes.append(Axis(start, start + size))
        windows.append(tuple(axes))
    return windows


def check_selection(name: str, selection: Any, dims: Sequence[str], shape: Sequence[int],
                    variable: str = "") -> Selection:
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
        i = list(dims).index(str(dim))
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


def parse_patterns(patterns: Any) -> dict[str, PatternSpec]:
    """Check a mix as users write it: a mapping of pattern names (known ones, or names of your own given a
    selection) to positive weights, or to ``(weight, {dim: index or slice})``; at least one pattern."""
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
            if not isinstance(spec, tuple) or len(spec) != 2 or not isinstance(spec[1], Mapping):
                raise wrong_type(f"patterns[{name!r}]", "a weight, or (weight, {dim: index or slice}) for a "
                                 "pattern of your own", spec)
            weight = spec[0]
        elif name not in KNOWN_PATTERNS:
            raise _unknown(name)
        else:
            weight = spec
        if not is_real(weight):
            raise AdviceTypeError(f"expected a positive weight for pattern {name!r}. Got {shown(weight, typed=True)} "
                                  "instead.")
        if not math.isfinite(weight) or weight <= 0:
            raise AdviceInputError(f"expected a positive weight for pattern {name!r}. Got {weight!r} instead.")
    return dict(patterns)


def weight(spec: PatternSpec) -> float:
    return float(spec[0] if isinstance(spec, tuple) else spec)
