"""The overload rules (`core.overload`) on a fake clock, and the request limiter that applies them: fewer requests
in flight once per window of overload answers, never below the floor, back up by one per window, faster after a
quiet spell, and a retry budget that lets a storm through only up to its burst and ratio."""

from __future__ import annotations

import asyncio

import pytest

from xarray_zarrmax import set_config
from xarray_zarrmax.core.budget import RequestLimiter, request_slot
from xarray_zarrmax.core.overload import Aimd, RetryBudget
from xarray_zarrmax.tuning import (
    RETRY_BUDGET_BURST,
    RETRY_BUDGET_RATIO,
    THROTTLE_DECREASE,
    THROTTLE_FLOOR,
    THROTTLE_INCREASE_S,
    THROTTLE_QUIET_S,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refused_window(aimd: Aimd, first: int, count: int, sent: int, ceiling: int = 128) -> int:
    """``count`` overload answers to requests ``first`` .. ``first + count - 1``; how many lowered the limit."""
    return sum(aimd.overloaded(ticket, sent, ceiling) for ticket in range(first, first + count))


def test_a_burst_of_refusals_lowers_the_limit_once_per_window():
    aimd = Aimd(Clock())
    assert aimd.capacity(128) == 128 and aimd.limit is None
    # 128 requests sent at full concurrency (tickets 0..127), all refused: one decrease, not 128
    assert refused_window(aimd, 0, 128, sent=128) == 1
    assert aimd.capacity(128) == int(128 * THROTTLE_DECREASE) == 64
    # their retries are sent under the new limit (tickets 128..191): refused again, one more decrease
    assert refused_window(aimd, 128, 64, sent=192) == 1
    assert aimd.capacity(128) == 32
    # a late answer to a request of the first window changes nothing
    assert not aimd.overloaded(5, 192, 128)
    assert aimd.capacity(128) == 32 and aimd.decreases == 2 and aimd.overloads == 128 + 64 + 1


def test_the_limit_never_goes_below_the_floor():
    aimd = Aimd(Clock())
    sent = 0
    for _ in range(20):
        aimd.overloaded(sent, sent + 1, 128)
        sent += 1
    assert aimd.capacity(128) == THROTTLE_FLOOR == aimd.lowest


def test_successes_raise_the_limit_by_one_per_window_then_faster_after_a_quiet_spell():
    clock = Clock()
    aimd = Aimd(clock)
    for ticket in range(4):  # 128 -> 64 -> 32 -> 16 -> 8
        aimd.overloaded(ticket, ticket + 1, 128)
    assert aimd.capacity(128) == 8
    for _ in range(8):  # one window of successes, answered at once: not yet
        aimd.succeeded(128)
    assert aimd.capacity(128) == 8
    clock.now += THROTTLE_INCREASE_S  # a window and the time: one more request
    aimd.succeeded(128)
    assert aimd.capacity(128) == 9
    for _ in range(20):  # many windows in no time: still one per THROTTLE_INCREASE_S
        aimd.succeeded(128)
    assert aimd.capacity(128) == 9
    clock.now += THROTTLE_INCREASE_S
    aimd.succeeded(128)
    assert aimd.capacity(128) == 10
    clock.now += THROTTLE_QUIET_S  # no refusal for a while: one more per success, doubling per window
    for _ in range(10):
        aimd.succeeded(128)
    assert aimd.capacity(128) == 20
    for _ in range(20 + 40 + 80):
        aimd.succeeded(128)
    assert aimd.limit is None and aimd.capacity(128) == 128  # back at the ceiling: the config rules again
    assert aimd.capacity(256) == 256
    history = [limit for _, limit in aimd.history]
    assert history[:4] == [64, 32, 16, 8] and history[-1] is None


def test_a_lowered_limit_is_never_above_a_lowered_ceiling():
    aimd = Aimd(Clock())
    aimd.overloaded(0, 1, 128)
    assert aimd.capacity(128) == 64
    assert aimd.capacity(16) == 16  # config.concurrency lowered meanwhile
    aimd.overloaded(1, 2, 16)  # the decrease starts from what was in force
    assert aimd.capacity(128) == 8


def test_the_retry_budget_allows_its_burst_then_its_ratio_of_requests():
    budget = RetryBudget()
    concurrency = 10
    burst = RETRY_BUDGET_BURST * concurrency
    assert sum(budget.withdraw(concurrency) for _ in range(burst + 5)) == burst
    assert budget.refused == 5
    for _ in range(round(10 / RETRY_BUDGET_RATIO) + 1):  # (+1: what the sum of floats falls short by)
        budget.deposit(concurrency)
    assert sum(budget.withdraw(concurrency) for _ in range(20)) == 10
    for _ in range(10**4):  # never more than the burst in store
        budget.deposit(concurrency)
    assert budget.tokens(concurrency) == burst


# -- the limiter ------------------------------------------------------------------------------------------------


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_the_limiter_admits_fewer_after_an_overload_and_more_as_requests_succeed():
    """Requests already sent are never interrupted; the queue stays first come, first served."""
    entered: list[int] = []

    async def scenario() -> None:
        limiter = request_slot()
        clock = Clock()
        limiter.aimd = Aimd(clock)
        gates = [asyncio.Event() for _ in range(12)]
        tickets: dict[int, int] = {}

        async def request(i: int) -> None:
            async with limiter as ticket:
                tickets[i] = ticket
                entered.append(i)
                await gates[i].wait()

        with set_config(concurrency=8):
            tasks = [asyncio.create_task(request(i)) for i in range(12)]
            await settle()
            assert entered == list(range(8)) and limiter.in_flight == 8
            assert limiter.overloaded(tickets[0])  # 8 -> 4
            assert not limiter.overloaded(tickets[1])  # same window
            assert limiter.capacity() == 4
            for i in range(4):  # 8 in flight, 4 allowed: the first four to finish free no slot for the queue
                gates[i].set()
                await settle()
            assert entered == list(range(8)) and limiter.in_flight == 4
            gates[4].set()
            await settle()
            assert entered == [*range(8), 8] and limiter.in_flight == 4  # the oldest waiter first
            clock.now += THROTTLE_INCREASE_S
            for _ in range(4):  # a window of answers: one more allowed, and the next waiter in
                limiter.succeeded()
            await settle()
            assert limiter.capacity() == 5 and entered == [*range(8), 8, 9]
            for gate in gates:
                gate.set()
            await asyncio.gather(*tasks)
            assert limiter.in_flight == 0 and limiter.stats()["lowest"] == 4

    asyncio.run(scenario())


def test_a_cancelled_waiter_of_a_lowered_limiter_loses_no_slot():
    async def scenario() -> None:
        limiter = RequestLimiter()
        with set_config(concurrency=2):
            first = await limiter.acquire()
            await limiter.acquire()
            limiter.overloaded(first)  # 2 -> 1
            waiter = asyncio.create_task(limiter.acquire())
            await settle()
            waiter.cancel()
            limiter.release()
            limiter.release()
            await settle()
            assert limiter.in_flight == 0 and limiter.waiting == 0
            await limiter.acquire()
            assert limiter.in_flight == 1
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(limiter.acquire(), 0.05)  # capacity 1: the second waits
            assert limiter.waiting == 0

    asyncio.run(scenario())


def test_the_limit_grows_only_while_it_holds_requests_back():
    """A process sending fewer requests than its limit allows does not raise a limit it never tests."""

    async def scenario() -> None:
        limiter = RequestLimiter()
        clock = Clock()
        limiter.aimd = Aimd(clock)
        with set_config(concurrency=16):
            first = await limiter.acquire()
            limiter.overloaded(first)  # 16 -> 8
            limiter.release()
            clock.now += THROTTLE_INCREASE_S
            for _ in range(100):  # one request at a time: never more than 1 of the 8 slots used
                await limiter.acquire()
                limiter.release()
                limiter.succeeded()
            assert limiter.capacity() == 8
            held = [await limiter.acquire() for _ in range(8)]  # all 8 taken: now the limit binds
            for _ in held:
                limiter.release()
                limiter.succeeded()
            assert limiter.capacity() == 8  # only the first answer found the limit binding (7 of 8 still out)
            for _ in range(8):
                await limiter.acquire()
            waiters = [asyncio.create_task(limiter.acquire()) for _ in range(10)]
            await settle()
            for _ in range(8):  # requests queued: every answer counts, a window of them is one more slot
                limiter.release()
                limiter.succeeded()
            await settle()
            assert limiter.capacity() == 9 and sum(w.done() for w in waiters) == 9
            for w in waiters:
                w.cancel()

    asyncio.run(scenario())
