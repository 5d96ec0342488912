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
    return settle_together([measure], least=least, most=most, spread=spread, cap_s=cap_s, clock=clock)[0]


def settle_together(measures: Sequence[Callable[[], float]], *, least: int = PROBE_LEAST, most: int = PROBE_MOST,
                    spread: float = PROBE_SPREAD, cap_s: float = PROBE_CAP_S,
                    clock: Callable[[], float] = time.perf_counter) -> list[Measured]:
    """`settle` for several measurements taken in rounds, one of each a round, so that each meets the same
    load (a curve over chunk sizes measured one size after the other drew its shape from the load's drift:
    1.8x at 64 kB, 1.0x at 256 kB, 1.7x at 1 MiB). Rounds until each has settled, or ``most`` rounds, or
    ``cap_s`` seconds a measurement have passed."""
    if not measures:
        return []
    values: list[list[float]] = [[] for _ in measures]
    start = clock()
    while True:
        for own, measure in zip(values, measures, strict=True):
            own.append(float(measure()))
        rounds = len(values[0])
        if rounds < least:
            continue
        if (rounds >= most or all(measured(v).spread <= spread for v in values)
                or clock() - start >= cap_s * len(measures)):
            return [measured(v) for v in values]


def paired_ratio(slow: Callable[[], float], fast: Callable[[], float], *, least: int = PROBE_LEAST) -> Measured:
    """How many times ``fast`` beats ``slow`` (two timings), each ratio of one run of each back to back, settled
    (`settle`): the load of a shared machine drifts between runs, so a ratio of two medians taken one after the
    other moved a decode speedup between 0.95x and 1.97x from one run to the next; a pair sees the same load."""
    return paired_ratios([(slow, fast)], least=least)[0]


def paired_ratios(pairs: Sequence[tuple[Callable[[], float], Callable[[], float]]], *,
                  least: int = PROBE_LEAST) -> list[Measured]:
    """`paired_ratio` of several pairs, in rounds (`settle_together`): ratios meant to be compared (a speedup at
    several chunk sizes) meet the same load."""
    def ratio(slow: Callable[[], float], fast: Callable[[], float]) -> Callable[[], float]:
        return lambda: slow() / max(fast(), 1e-9)

    return settle_together([ratio(slow, fast) for slow, fast in pairs], least=least)


def nondecreasing(values: Sequence[float]) -> list[float]:
    """The nondecreasing sequence nearest ``values`` in least squares (pool adjacent violators): a speedup
    over chunk sizes, which cannot fall as chunks grow (the per-chunk work is spread over more bytes), measured
    per size on a busy machine fell and rose again (1.11x at 16 kB, 1.63x at 64 kB, 0.99x at 256 kB, 1.57x at
    1 MiB); pooled, 1.11, 1.31, 1.31, 1.57."""
    blocks: list[list[float]] = []  # [sum, count] of each pooled run
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    return [total / count for total, count in blocks for _ in range(int(count))]


def timed(call: Callable[[], object]) -> float:
    """Seconds ``call`` took."""
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0
