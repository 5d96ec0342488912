"""Measurements repeated until they settle (`settle`): a busy machine moved one store cost 7x between single
runs, so each probe measurement is repeated until its middle half is narrow, and reported as its median,
quartiles and best (`Measured`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xarray_zarrmax.tuning import PROBE_CAP_S, PROBE_LEAST, PROBE_MOST, PROBE_SPREAD


@dataclass(frozen=True, slots=True)
class Measured:
    """A measurement repeated until it settled (`settle`): the median, the quartiles, the repeats and the
    least value (``best``: what the store does undisturbed, for costs other work on the machine inflates)."""

    median: float
    low: float
    high: float
    count: int
    best: float = math.nan

    @property
    def spread(self) -> float:
        """The middle half's width relative to the median (0 when the median is 0)."""
        return (self.high - self.low) / self.median if self.median > 0 else 0.0


def measured(values: Sequence[float]) -> Measured:
    """The median and quartiles of ``values`` (one value: itself for all three)."""
    if len(values) < 2:
        return Measured(values[0], values[0], values[0], len(values), values[0])
    low, median, high = statistics.quantiles(values, n=4, method="inclusive")
    return Measured(median, low, high, len(values), min(values))


def settle(measure: Callable[[], float], *, least: int = PROBE_LEAST, most: int = PROBE_MOST,
           spread: float = PROBE_SPREAD, cap_s: float = PROBE_CAP_S,
           clock: Callable[[], float] = time.perf_counter) -> Measured:
    """Repeat ``measure`` (a timing, or any number) until it settles: at least ``least`` times, then until the
    middle half of the values spans at most ``spread`` of their median, or ``most`` repeats, or ``cap_s``
    seconds of ``clock`` have passed. A busy machine moved one store cost 7x between single runs: a noisy
    measurement is repeated more, and its quartiles say how far to trust it."""
    values: list[float] = []
    start = clock()
    while True:
        values.append(float(measure()))
        if len(values) < least:
            continue
        if len(values) >= most or measured(values).spread <= spread or clock() - start >= cap_s:
            return measured(values)


def paired_ratio(slow: Callable[[], float], fast: Callable[[], float], *, least: int = PROBE_LEAST) -> Measured:
    """How many times ``fast`` beats ``slow`` (two timings), each ratio of one run of each back to back, settled
    (`settle`): the load of a shared machine drifts between runs, so a ratio of two medians taken one after the
    other moved a decode speedup between 0.95x and 1.97x from one run to the next; a pair sees the same load."""
    return settle(lambda: slow() / max(fast(), 1e-9), least=least)


def timed(call: Callable[[], object]) -> float:
    """Seconds ``call`` took."""
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0
