"""One request budget per process: at most ``config.concurrency`` requests in flight, whoever sends them, and
fewer while the store says it is overloaded.

One limiter per event loop (the process has one I/O loop; tests may run others), whose capacity is read from
the config each time a slot is asked for or given back. A semaphore per concurrency value would let requests
sent under different settings each have a full budget (128 + 256 in flight). With one limiter, a raised capacity
admits queued requests as soon as another request arrives or a slot is released, and a lowered one takes
effect as slots are released (requests in flight are never interrupted).

The capacity is the lower of ``config.concurrency`` and what `core.overload.Aimd` allows after the store's
overload answers (the senders report them: `RequestLimiter.overloaded`, `RequestLimiter.succeeded`); the
limiter also holds the process's `RetryBudget`.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from types import TracebackType
from typing import Any

from xarray_zarrmax.config import get_config
from xarray_zarrmax.core.overload import Aimd, RetryBudget


class RequestLimiter:
    """An in-flight counter and a FIFO queue of waiters; ``async with limiter as ticket:`` holds one slot.

    Cancellation-safe: a waiter cancelled before it gets a slot leaves the queue, and one cancelled just after
    a slot was handed to it gives that slot on, so no slot is ever lost or leaked.

    Each slot handed out is numbered (the ticket `acquire` returns): an overload answer names the request it
    answers, so that `Aimd` lowers the capacity once per window.
    """

    def __init__(self) -> None:
        self.in_flight = 0
        self.sent = 0  # slots handed out so far: the next one's ticket
        self.aimd = Aimd()
        self.retry_budget = RetryBudget()
        self._waiters: deque[asyncio.Future[int]] = deque()

    def capacity(self) -> int:
        return self.aimd.capacity(get_config().concurrency)

    def _take(self) -> int:
        self.in_flight += 1
        self.sent += 1
        return self.sent - 1

    async def acquire(self) -> int:
        """Wait for a slot; returns its ticket."""
        if not self._waiters and self.in_flight < self.capacity():
            return self._take()
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._hand_out()  # the capacity may have been raised since the queue formed
        try:
            return await waiter
        except BaseException:  # cancelled
            if waiter.done() and not waiter.cancelled():  # a slot was handed over as the cancel came in
                self.release()
            elif waiter in self._waiters:  # else `_hand_out` already dropped it
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        self.in_flight -= 1
        self._hand_out()

    def overloaded(self, ticket: int) -> bool:
        """The store answered request ``ticket`` "overloaded" (503 SlowDown, 429): True if that lowered the
        capacity (the slot is given back as usual, by `release`)."""
        return self.aimd.overloaded(ticket, self.sent, get_config().concurrency)

    def succeeded(self) -> None:
        """A request was answered (its slot already given back): the capacity grows back towards
        ``config.concurrency``, but only while it is what holds requests back (some wait, or all slots but the
        one just given back are taken). A process sending fewer requests than it may would otherwise raise a
        limit it never tests, and meet the store's limit all at once when its next task sends more (TCP's
        window validation, RFC 7661)."""
        if self.aimd.limit is not None and (self._waiters or self.in_flight + 1 >= self.capacity()):
            self.aimd.succeeded(get_config().concurrency)
            self._hand_out()

    def _hand_out(self) -> None:
        """Give free slots to waiters, oldest first; the slot counts as taken from the moment it is given."""
        capacity = self.capacity()
        while self._waiters and self.in_flight < capacity:
            waiter = self._waiters.popleft()
            if waiter.done():  # cancelled, and its task has not run yet to leave the queue
                continue
            waiter.set_result(self._take())

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def stats(self) -> dict[str, Any]:
        """What the limiter did: the capacity now (``limit``), the lowest it came down to, its decreases, the
        overload answers seen, its history ((monotonic time, limit or None at the ceiling) at each change),
        requests in flight and waiting, retries sent and refused by the budget."""
        concurrency = get_config().concurrency
        return {**self.aimd.stats(concurrency), "in_flight": self.in_flight, "waiting": self.waiting,
                "sent": self.sent, "retries": self.retry_budget.spent, "retries_refused": self.retry_budget.refused,
                "retry_tokens": self.retry_budget.tokens(concurrency)}

    async def __aenter__(self) -> int:
        return await self.acquire()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.release()


# Keyed by the loop object itself (weakly): an id() could be reused by a later loop after fork or GC, and a
# limiter whose waiters belong to a dead loop would never wake them.
_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, RequestLimiter] = weakref.WeakKeyDictionary()


def request_slot() -> RequestLimiter:
    """The limiter every request of this process goes through: ``async with request_slot(): ...``."""
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = _limiters[loop] = RequestLimiter()
    return limiter


def busiest_limiter() -> RequestLimiter | None:
    """This process's limiter: the I/O loop's (where tests ran other loops too, the one that sent the most
    requests); None before any request. Safe to call from any thread."""
    try:
        limiters = list(_limiters.values())
    except RuntimeError:  # another thread added a limiter meanwhile
        limiters = list(_limiters.values())
    return max(limiters, key=lambda limiter: limiter.sent) if limiters else None


def limiter_stats() -> dict[str, Any]:
    """`RequestLimiter.stats` of `busiest_limiter` (those of a fresh one before any request). Run it on each
    worker of a cluster (``client.run(limiter_stats)``) to see how far throttling brought each one down."""
    return (busiest_limiter() or RequestLimiter()).stats()


class ByteBudget:
    """Bytes of one read's fetches in flight: at most ``capacity``, or one fetch alone when it is larger.

    Fetches that finish an object whose shard index is already in hand (its ranges, known only from that index)
    are served before fetches that start a new object: they free what the object holds sooner, and new objects
    do not take the room first. A holder never waits while it holds bytes (an object gives its index fetch's
    bytes back before it asks for its ranges'), so no set of waiters can block each other. Cancellation-safe
    as `RequestLimiter` is.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.used = 0
        self._finishing: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._starting: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _fits(self, nbytes: int) -> bool:
        return self.used == 0 or self.used + nbytes <= self.capacity

    async def acquire(self, nbytes: int, *, finishing: bool = False) -> None:
        ahead = self._finishing if finishing else (self._finishing or self._starting)
        if not ahead and self._fits(nbytes):
            self.used += nbytes
            return
        waiter = asyncio.get_running_loop().create_future()
        entry = (nbytes, waiter)
        (self._finishing if finishing else self._starting).append(entry)
        try:
            await waiter
        except BaseException:  # cancelled
            if waiter.done() and not waiter.cancelled():  # the bytes were handed over as the cancel came in
                self.release(nbytes)
            else:
                for queue in (self._finishing, self._starting):
                    if entry in queue:
                        queue.remove(entry)
                self._hand_out()  # a large waiter leaving may let smaller ones behind it through
            raise

    def release(self, nbytes: int) -> None:
        self.used -= nbytes
        self._hand_out()

    def _hand_out(self) -> None:
        """Grant waiters in order, finishing ones first; the first that does not fit stops its queue and any
        queue after it (no overtaking, so a large fetch is not starved by small ones)."""
        for queue in (self._finishing, self._starting):
            while queue:
                nbytes, waiter = queue[0]
                if waiter.done():  # cancelled, and its task has not run yet to leave the queue
                    queue.popleft()
                    continue
                if not self._fits(nbytes):
                    return
                queue.popleft()
                self.used += nbytes
                waiter.set_result(None)


class Holding:
    """What one object's fetch holds of a `ByteBudget` (None: unbounded); `release_all` when it is decoded."""

    def __init__(self, budget: ByteBudget | None) -> None:
        self._budget = budget
        self.held = 0

    async def take(self, nbytes: int, *, finishing: bool = False) -> None:
        if self._budget is not None:
            await self._budget.acquire(nbytes, finishing=finishing)
            self.held += nbytes

    def give_back(self, nbytes: int) -> None:
        if self._budget is not None and nbytes:
            self.held -= nbytes
            self._budget.release(nbytes)

    def release_all(self) -> None:
        self.give_back(self.held)
