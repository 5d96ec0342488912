"""Process-wide settings and the request budget stay right when threads and tasks overlap: overlapping
`set_config` blocks never leave a change behind, and one budget bounds every request whatever the settings
were when each was sent. The interleavings are forced with events, never with sleeps."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr

from xarray_zarrmax import get_config, set_config
from xarray_zarrmax.core.budget import request_slot

# -- set_config -------------------------------------------------------------------------------------------------


def run_threads(*steps: Callable[[], None]) -> None:
    threads = [threading.Thread(target=step) for step in steps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a thread is stuck: an event was never set"


def overlap(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Thread A enters a block with ``first``, thread B one with ``second``; A exits, then B: the order that a
    save-and-restore set_config gets wrong. Returns the settings each thread saw at each step."""
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def thread_a() -> None:
        with set_config(**first):
            a_in.set()
            assert b_in.wait(10)
        seen["after A exits"] = get_config()
        a_out.set()

    def thread_b() -> None:
        assert a_in.wait(10)
        with set_config(**second):
            b_in.set()
            assert a_out.wait(10)
            seen["B still in"] = get_config()

    run_threads(thread_a, thread_b)
    seen["after both"] = get_config()
    return seen


def test_overlapping_blocks_in_two_threads_leave_nothing_behind():
    before = get_config()
    seen = overlap({"concurrency": 7}, {"concurrency": 9})
    assert seen["after A exits"].concurrency == 9  # B's block is still open: its setting stays in force
    assert seen["B still in"].concurrency == 9
    assert seen["after both"] == before


def test_an_exit_withdraws_only_its_own_changes():
    before = get_config()
    seen = overlap({"retries": 5}, {"split_size": 2**10})
    assert seen["after A exits"].retries == before.retries  # A's change is gone...
    assert seen["after A exits"].split_size == 2**10  # ...and B's, made after A's, is kept
    assert seen["after both"] == before


def test_a_later_block_wins_a_setting_both_change_until_it_exits():
    before = get_config()
    outer = set_config(concurrency=7, retries=1)
    inner = set_config(concurrency=9)
    outer.__enter__()
    inner.__enter__()
    assert (get_config().concurrency, get_config().retries) == (9, 1)
    inner.__exit__(None, None, None)
    assert (get_config().concurrency, get_config().retries) == (7, 1)
    outer.__exit__(None, None, None)
    assert get_config() == before


def test_a_block_in_the_main_thread_is_seen_by_other_threads():
    seen = []
    with set_config(threads=3):
        run_threads(lambda: seen.append(get_config().threads))
    assert seen == [3]


def test_a_call_outside_a_with_block_changes_the_settings_from_then_on(tmp_path, monkeypatch):
    """As the README and the reading guide turn the chunk cache on: a bare call, kept in force (as
    ``xarray.set_options`` and ``dask.config.set``), where a generator-based context manager did nothing."""
    import xarray_zarrmax
    from xarray_zarrmax.storage import local

    monkeypatch.setattr(local, "RACY_WINDOW_NS", 0)  # a file just written is kept (its own test: test_chunk_cache)
    before = get_config()
    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=3)
    group.create_array("s", shape=(8, 8), chunks=(4, 4), dtype="f4", fill_value=0.0,
                       dimension_names=["y", "x"])[:] = np.arange(64, dtype="f4").reshape(8, 8)
    xarray_zarrmax.clear_cache()
    change = set_config(cache_bytes=2 << 20)
    try:
        assert get_config().cache_bytes == 2 << 20
        ds = xr.open_dataset(tmp_path / "s.zarr", engine="zarrmax", chunks=None, cache=False)
        for _ in range(2):  # chunks read whole are kept when decoded a second time (the cache's admission rule)
            ds["s"].values  # noqa: B018
        with xarray_zarrmax.request_counts() as counts:
            ds["s"].values  # noqa: B018
        assert counts.cache.hits > 0, counts.cache
    finally:
        change.__exit__(None, None, None)
        xarray_zarrmax.clear_cache()
    assert get_config() == before


def test_a_with_block_of_a_call_withdraws_its_change_at_the_exit():
    before = get_config()
    with set_config(retries=4) as entered:
        assert entered.retries == 4 and get_config().retries == 4
    assert get_config() == before


def test_an_invalid_change_changes_nothing():
    before = get_config()
    with pytest.raises(ValueError, match=r"config concurrency must be an integer >= 1. Got 0 instead"):
        with set_config(concurrency=0):
            pass
    with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_setting'"):
        with set_config(no_such_setting=1):
            pass
    assert get_config() == before


# -- the request budget -----------------------------------------------------------------------------------------


async def settle() -> None:
    """Let every runnable task run until it waits: the loop runs nothing else, so a few turns are enough."""
    for _ in range(20):
        await asyncio.sleep(0)


class FakeRequests:
    """Requests that hold their slot until their gate opens, counting how many are in flight at once."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.entered: list[str] = []
        self.finished = 0

    async def send(self, name: str, gate: asyncio.Event) -> None:
        async with request_slot():
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self.entered.append(name)
            try:
                await gate.wait()
            finally:
                self.in_flight -= 1
        self.finished += 1


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())  # a loop of its own: a fresh budget, nothing shared with other tests


def test_requests_sent_under_different_concurrency_share_one_budget():
    fake = FakeRequests()

    async def scenario() -> None:
        gate = asyncio.Event()
        with set_config(concurrency=4):
            tasks = [asyncio.create_task(fake.send(f"a{i}", gate)) for i in range(10)]
            await settle()
            assert fake.in_flight == 4
        with set_config(concurrency=6):
            tasks += [asyncio.create_task(fake.send(f"b{i}", gate)) for i in range(10)]
            await settle()
            assert fake.in_flight == 6  # the raised capacity, not 4 + 6
            assert fake.entered[4:] == ["a4", "a5"]  # first come, first served, whatever the setting
            gate.set()
            await asyncio.gather(*tasks)

    run(scenario)
    assert fake.peak == 6 and fake.finished == 20


def test_a_lowered_capacity_takes_effect_as_slots_are_released():
    fake = FakeRequests()

    async def scenario() -> None:
        gates = [asyncio.Event() for _ in range(8)]
        with set_config(concurrency=4):
            tasks = [asyncio.create_task(fake.send(f"r{i}", g)) for i, g in enumerate(gates)]
            await settle()
            assert fake.entered == ["r0", "r1", "r2", "r3"]
            with set_config(concurrency=2):
                in_flight_after_each_release = []
                for gate in gates[:4]:
                    gate.set()
                    await settle()
                    in_flight_after_each_release.append(fake.in_flight)
                assert in_flight_after_each_release == [3, 2, 2, 2]
                assert fake.entered == ["r0", "r1", "r2", "r3", "r4", "r5"]
            for gate in gates:
                gate.set()
            await asyncio.gather(*tasks)

    run(scenario)
    assert fake.peak == 4 and fake.finished == 8


def test_cancelled_waiters_neither_leak_nor_lose_a_slot():
    fake = FakeRequests()

    async def scenario() -> None:
        gates = {name: asyncio.Event() for name in ("w1", "w2", "w3", "w4", "x", "y")}
        with set_config(concurrency=1):
            slot = request_slot()
            await slot.acquire()  # the test holds the only slot
            tasks = {n: asyncio.create_task(fake.send(n, gates[n])) for n in ("w1", "w2")}
            await settle()
            tasks["w1"].cancel()  # cancelled while queued
            await settle()
            slot.release()
            await settle()
            assert fake.entered == ["w2"]  # the slot passed over w1

            tasks.update({n: asyncio.create_task(fake.send(n, gates[n])) for n in ("w3", "w4")})
            await settle()
            gates["w2"].set()
            await asyncio.sleep(0)  # w2 wakes, releases and hands the slot to w3, whose task has not run yet
            tasks["w3"].cancel()  # cancelled as the slot arrives: it must pass the slot on to w4
            await settle()
            assert fake.entered == ["w2", "w4"]
            assert tasks["w3"].cancelled() and tasks["w1"].cancelled()

            gates["w4"].set()
            await settle()
            # exactly one slot is left: of two new requests, one gets in and one waits
            tasks.update({n: asyncio.create_task(fake.send(n, gates[n])) for n in ("x", "y")})
            await settle()
            assert fake.entered == ["w2", "w4", "x"] and fake.in_flight == 1
            gates["x"].set()
            gates["y"].set()
            await asyncio.gather(*tasks.values(), return_exceptions=True)

    run(scenario)
    assert fake.in_flight == 0 and fake.finished == 4


def test_inflight_budget_counts_the_chunks_a_read_fetches_not_whole_shards():
    """A map through shards of time series reads one chunk of each shard. The in-flight budget must count
    that chunk (and the shard's index), not the whole shard: with room for two whole shards, all eight
    shards' requests go together (it was two at a time). A full read still fetches two whole shards at a time."""
    from zarr.storage import MemoryStore

    from tests.support.inflight import InFlight

    memory = MemoryStore()
    values = np.arange(8 * 512, dtype="i8").reshape(8, 512)
    group = zarr.open_group(memory, mode="w", zarr_format=3)
    group.create_array("v", shape=values.shape, dtype="i8", chunks=(1, 64), shards=(8, 64),
                       dimension_names=["time", "x"])[...] = values
    store = InFlight(memory)
    shard_nbytes = 8 * 64 * 8
    with set_config(inflight_bytes=2 * shard_nbytes):
        ds = xr.open_dataset(store, engine="zarrmax", chunks=None)
        store.hold_until(8)
        got = ds["v"][3].values
        assert store.most == 8, f"{store.most} of the 8 shards' requests were in flight together"
        np.testing.assert_array_equal(got, values[3])
        store.most, store.until = 0, None
        np.testing.assert_array_equal(ds["v"].values, values)
        assert store.most == 2, f"{store.most} whole shards in flight with room for two"


def test_inflight_budget_counts_ranges_once_the_index_tells_them():
    """Each shard holds 8 rows of 8 chunks; a row is 8 adjacent chunks, one range of 512 bytes. Before its
    index arrives, a read could only assume the worst for those 8 chunks (the gaps coalescing may fetch
    between them: the whole 4 KB shard, plus the index), which let 2 of the 8 shards start at a time with
    room for three whole shards. Counted as fetched (each index, then each range, exactly), all 8 go
    together."""
    from zarr.storage import MemoryStore

    from tests.support.inflight import InFlight

    memory = MemoryStore()
    values = np.arange(8 * 512, dtype="i8").reshape(8, 512)
    group = zarr.open_group(memory, mode="w", zarr_format=3)
    group.create_array("v", shape=values.shape, dtype="i8", chunks=(1, 8), shards=(8, 64), compressors=None,
                       dimension_names=["time", "x"])[...] = values
    store = InFlight(memory)
    with set_config(inflight_bytes=3 * 8 * 64 * 8):
        ds = xr.open_dataset(store, engine="zarrmax", chunks=None)
        store.hold_until(8)
        got = ds["v"][3].values
    assert store.most == 8, f"{store.most} of the 8 shards' index requests were in flight together"
    np.testing.assert_array_equal(got, values[3])


class BytesInFlight(zarr.storage.WrapperStore):  # type: ignore[type-arg]
    """Counts the bytes of the GETs in flight at once (ranges and suffixes by their length); each holds a
    moment, as a remote store's would."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.now = self.most = 0

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        from zarr.abc.store import RangeByteRequest, SuffixByteRequest

        if isinstance(byte_range, RangeByteRequest):
            n = byte_range.end - byte_range.start
        elif isinstance(byte_range, SuffixByteRequest):
            n = byte_range.suffix
        else:
            n = 0 if byte_range is not None else len(await self._store.get(key, prototype) or b"")
        self.now += n
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(0.02)
            return await super().get(key, prototype, byte_range)
        finally:
            self.now -= n


@pytest.mark.parametrize(("chunk", "per_shard", "offsets", "itemsize"), [
    (128, 1024, (0, 900), 8),  # two chunks far apart in each shard: coalescing fetches the gap between them
    (1, 1024, (0,), 1),  # one byte of each shard: the index is almost all a fetch holds
])
def test_inflight_budget_holds_for_merged_ranges_and_indexes(chunk, per_shard, offsets, itemsize):
    """What a sparse read holds in flight stays within inflight_bytes (or one fetch, when one alone is more):
    counting only the chunks read let the ranges merged across gaps, and the shard indexes, of every shard
    be fetched together (14x and 16x the budget with 16 shards, found in review)."""
    from zarr.storage import MemoryStore

    shards = 8
    memory = MemoryStore()
    values = np.arange(shards * per_shard * chunk).astype(f"i{itemsize}")
    group = zarr.open_group(memory, mode="w", zarr_format=3)
    group.create_array("v", shape=values.shape, dtype=values.dtype, chunks=(chunk,), shards=(chunk * per_shard,),
                       compressors=None, dimension_names=["x"])[...] = values
    index = np.array([i * per_shard * chunk + o * chunk for i in range(shards) for o in offsets])
    budget = per_shard * chunk * itemsize  # room for one whole shard
    one_fetch = max((offsets[-1] - offsets[0] + 1) * chunk * itemsize, 16 * per_shard + 4)
    store = BytesInFlight(memory)
    with set_config(inflight_bytes=budget):
        ds = xr.open_dataset(store, engine="zarrmax", chunks=None)
        store.most = 0
        np.testing.assert_array_equal(ds["v"].isel(x=index).values, values[index])
    assert store.most <= max(budget, one_fetch), f"{store.most} bytes in flight, budget {budget}"


def test_byte_budget_order_oversize_and_cancellation():
    """ByteBudget: within capacity, or one fetch alone; finishing fetches first; no overtaking within a queue;
    a cancelled waiter neither leaks nor loses bytes."""
    from xarray_zarrmax.core.budget import ByteBudget

    async def scenario() -> list[str]:
        budget = ByteBudget(100)
        order: list[str] = []

        async def take(name: str, nbytes: int, finishing: bool = False) -> None:
            await budget.acquire(nbytes, finishing=finishing)
            order.append(name)

        await take("a", 60)
        big = asyncio.create_task(take("big", 500))  # waits: more than the room left
        small = asyncio.create_task(take("small", 10))  # fits, but must not overtake "big"
        fin = asyncio.create_task(take("finishing", 30, finishing=True))  # fits, and goes first
        doomed = asyncio.create_task(take("doomed", 40, finishing=True))  # does not fit; cancelled below
        await asyncio.sleep(0)
        assert order == ["a", "finishing"] and budget.used == 90
        doomed.cancel()
        await asyncio.sleep(0)
        assert budget.used == 90 and order == ["a", "finishing"]
        budget.release(60)
        budget.release(30)  # empty: "big" goes alone, over the capacity
        await asyncio.sleep(0)
        assert order == ["a", "finishing", "big"] and budget.used == 500
        budget.release(500)
        await asyncio.gather(big, small, fin, return_exceptions=True)
        assert order[-1] == "small" and budget.used == 10
        budget.release(10)
        assert budget.used == 0 and doomed.cancelled()
        return order

    assert asyncio.run(scenario()) == ["a", "finishing", "big", "small"]
