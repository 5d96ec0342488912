"""Access patterns (a time series, a map, a region's mean, a random batch...) as the box selections they read.

`parse_patterns` checks a ``{pattern: weight}`` mix as users write it; `pattern_selections` turns one pattern into
the selections it makes of an array of given dimensions and shape. No I/O and no costs here: `model` costs them.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from xarray_zarrmax.core.geometry import Axis, Selection
from xarray_zarrmax.tuning import BATCH_SPACE, BATCH_TIME, BATCH_WINDOWS, MAP_MEAN_STEPS, REGION_DEGREES

KNOWN_PATTERNS = ("timeseries", "map", "region-mean", "map-mean", "full-scan", "random-batch")

PatternSpec = float | tuple[float, Mapping[Hashable, slice | int]]


@dataclass(frozen=True, slots=True)
class Batch:
    """The ``random-batch`` pattern: ``windows`` windows at seeded random places, each ``window[dim]`` long
    along the dimensions it names (default: 8 time steps, 32 cells along each other dimension)."""

    windows: int = BATCH_WINDOWS
    window: Mapping[str, int] | None = None


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
        return [_user_selection(name, spec[1], dims, shape, variable)]
    if name not in KNOWN_PATTERNS:
        raise ValueError(f"unknown access pattern {name!r}: expected one of {', '.join(KNOWN_PATTERNS)}, or a "
                         f"selection {{dim: slice}} of your own")
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
            raise ValueError(f"pattern 'random-batch' selects dimension {dim!r}, which variable {variable!r} does "
                             f"not have: its dimensions are {tuple(dims)}")
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"expected a window of at least 1 element along {dim!r}. Got {size!r} instead.")
        sizes[list(dims).index(dim)] = size
    if not isinstance(batch.windows, int) or batch.windows < 1:
        raise ValueError(f"expected at least 1 window in a random batch. Got {batch.windows!r} instead.")
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


def _user_selection(name: str, selection: Mapping[Hashable, slice | int], dims: Sequence[str],
                    shape: Sequence[int], variable: str) -> Selection:
    axes = [Axis(0, int(n)) for n in shape]
    for dim, key in selection.items():
        if dim not in dims:
            raise ValueError(f"pattern {name!r} selects dimension {dim!r}, which variable {variable!r} does not "
                             f"have: its dimensions are {tuple(dims)}")
        i = list(dims).index(str(dim))
        if isinstance(key, slice):
            start, stop, step = key.indices(shape[i])
            if step != 1:
                raise ValueError(f"pattern {name!r}: expected slices with step 1. Got {key!r} for {dim!r}.")
            axes[i] = Axis(start, max(start, stop))
        else:
            j = int(key) % shape[i]
            axes[i] = Axis(j, j + 1)
    return tuple(axes)


def parse_patterns(patterns: Mapping[str, PatternSpec]) -> dict[str, PatternSpec]:
    """Check the weights: positive numbers (and at least one pattern)."""
    if not patterns:
        raise ValueError(f"expected at least one access pattern, e.g. {{'timeseries': 0.5, 'map': 0.5}}; known "
                         f"patterns are {', '.join(KNOWN_PATTERNS)}")
    for name, spec in patterns.items():
        weight = spec[0] if isinstance(spec, tuple) else spec
        if (isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight)
                or weight <= 0):
            raise ValueError(f"expected a positive weight for pattern {name!r}. Got {weight!r} instead.")
    return dict(patterns)


def weight(spec: PatternSpec) -> float:
    return float(spec[0] if isinstance(spec, tuple) else spec)
