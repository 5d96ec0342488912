"""What a process does when a store says it is overloaded (S3's 503 SlowDown, a 429): fewer requests in flight
(`Aimd`), and a bound on the retries the whole process sends (`RetryBudget`). Pure arithmetic on counts and a
clock, no I/O: `core.budget`'s limiter holds one of each, and `storage` feeds them what the store answered.

**Why AIMD.** Each worker process of a cluster sees only its own requests; the store's limit (S3: about 5,500
GET/s per prefix) is shared by all of them. Additive increase, multiplicative decrease is the one simple rule
under which independent senders sharing a limit converge to equal shares of it without talking to each other
(Chiu and Jain, 1989; TCP's congestion avoidance), and it needs only the signal the store gives: "too many".
Rules that need more (a target latency, as Vegas or gradient limiters use) cannot tell a throttled S3 from a
large object or a slow network. One window ("round trip") is the requests sent before the last decrease: an
overload answer to one of them says nothing new, so a burst of 128 refusals lowers the limit once, not 128
times (TCP NewReno's recovery point). The limit grows by one per window's worth of answers, but at most once
per `THROTTLE_INCREASE_S`, and only while it holds requests back (`core.budget`): against a store answering
in a millisecond, a window is a millisecond, and growing every window sent each process back over its share
dozens of times a second (8 processes sharing a limit of 8: 28% of the GETs refused, 0.56x the server's
capacity; growing at most every 0.1 s: see docs/dev/throttling.md). After `THROTTLE_QUIET_S` seconds without
a refusal it grows by one per answer (doubling per window, TCP's slow start), so a process that was
throttled once does not crawl back one request at a time for minutes.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from xarray_zarrmax.tuning import (
    RETRY_BUDGET_BURST,
    RETRY_BUDGET_RATIO,
    THROTTLE_DECREASE,
    THROTTLE_FLOOR,
    THROTTLE_HISTORY,
    THROTTLE_INCREASE_S,
    THROTTLE_QUIET_S,
)


class Aimd:
    """The requests in flight a process allows itself now: ``ceiling`` (``config.concurrency``) until the store
    first signals overload, then lowered by `THROTTLE_DECREASE` at most once per window (never below
    `THROTTLE_FLOOR`) and raised by one per window's worth of answers, at most once per `THROTTLE_INCREASE_S`
    (one per answer after `THROTTLE_QUIET_S` without a refusal), back to the ceiling. The clock is injectable
    for tests.

    Requests are numbered as they are sent (``ticket``); ``sent`` is the number the next one will get.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        #: The lowered limit (fractional after a decrease); None: not lowered, the ceiling rules.
        self.limit: float | None = None
        self._credit = 0  # answers since the limit last changed
        self._changed = -math.inf  # when it last changed
        #: Overload answers to requests numbered below this were sent before the last decrease: same window.
        self.window_start = 0
        self.last_overload = -math.inf
        self.decreases = 0
        self.overloads = 0
        self.lowest: int | None = None
        #: (clock, limit) at every change of the whole-number limit; None: back at the ceiling.
        self.history: deque[tuple[float, int | None]] = deque(maxlen=THROTTLE_HISTORY)

    def capacity(self, ceiling: int) -> int:
        """Requests that may be in flight now."""
        if self.limit is None:
            return ceiling
        return max(THROTTLE_FLOOR, min(ceiling, int(self.limit)))

    def overloaded(self, ticket: int, sent: int, ceiling: int) -> bool:
        """The store refused request ``ticket`` as overloaded; True if that lowered the limit (the first refusal
        of a request sent since the last decrease)."""
        self.overloads += 1
        self.last_overload = self.clock()
        if ticket < self.window_start:
            return False  # sent before the last decrease: that decrease already answered its window
        current = min(float(ceiling), self.limit if self.limit is not None else float(ceiling))
        self._set(max(float(THROTTLE_FLOOR), current * THROTTLE_DECREASE), ceiling)
        self.window_start = sent
        self.decreases += 1
        low = self.capacity(ceiling)
        self.lowest = low if self.lowest is None else min(self.lowest, low)
        return True

    def succeeded(self, ceiling: int) -> None:
        """A request was answered: one more request in flight once a window's worth of answers (as many as the
        limit) came since the last change and `THROTTLE_INCREASE_S` passed; one more per answer once no refusal
        came for `THROTTLE_QUIET_S`."""
        if self.limit is None:
            return
        now = self.clock()
        if now - self.last_overload < THROTTLE_QUIET_S:
            self._credit += 1
            if self._credit < self.capacity(ceiling) or now - self._changed < THROTTLE_INCREASE_S:
                return
        self._set(min(self.limit, float(ceiling)) + 1.0, ceiling)

    def _set(self, limit: float, ceiling: int) -> None:
        self._credit = 0
        self._changed = self.clock()
        before = self.capacity(ceiling)
        self.limit = None if limit >= ceiling else limit
        after = self.capacity(ceiling)
        if after != before or not self.history:
            self.history.append((self.clock(), None if self.limit is None else after))

    def stats(self, ceiling: int) -> dict[str, Any]:
        return {"limit": self.capacity(ceiling), "lowered": self.limit is not None, "lowest": self.lowest,
                "decreases": self.decreases, "overloads": self.overloads, "history": list(self.history)}


class RetryBudget:
    """Retries a process may send: a token bucket holding at most ``RETRY_BUDGET_BURST`` x the concurrency,
    full at the start, given `RETRY_BUDGET_RATIO` of a token for every first attempt sent; a retry takes one.

    So over any stretch, retries are at most that ratio of the requests plus the burst: a store refusing
    everything gets a bounded storm, not one that feeds itself (as in Finagle's RetryBudget and the AWS SDKs'
    retry quota). The burst covers the start of a cluster's read, when every request of every process meets
    the store's limit at once.
    """

    def __init__(self) -> None:
        self._tokens: float | None = None  # None: full, whatever the concurrency
        self.spent = 0
        self.refused = 0

    @staticmethod
    def capacity(concurrency: int) -> float:
        return float(RETRY_BUDGET_BURST * concurrency)

    def tokens(self, concurrency: int) -> float:
        full = self.capacity(concurrency)
        return full if self._tokens is None else min(self._tokens, full)

    def deposit(self, concurrency: int) -> None:
        """A first attempt was sent."""
        if self._tokens is not None:
            self._tokens = self.tokens(concurrency) + RETRY_BUDGET_RATIO
            if self._tokens >= self.capacity(concurrency):
                self._tokens = None

    def withdraw(self, concurrency: int) -> bool:
        """A retry is wanted: True (and a token taken) if the budget allows it."""
        tokens = self.tokens(concurrency)
        if tokens < 1.0:
            self.refused += 1
            return False
        self._tokens = tokens - 1.0
        self.spent += 1
        return True
