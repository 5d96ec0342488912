"""A store that throttles (issue 46): overload answers (503 SlowDown, 429) are retried by us, counted, and lower
the process's requests in flight; retries are bounded per request and per process, and a request that runs out
of them fails with an error naming the store, the key, the status and the attempts.

The real test: a MinIO that serves at most `LIMIT` requests at once (the rest answered 429) read by a dask
LocalCluster of 4 worker processes with the default concurrency (128 each).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import obstore.exceptions as oe
import pytest
import xarray as xr
import zarr
from obstore.store import MemoryStore

from xarray_zarrmax import get_config, request_counts, set_config
from xarray_zarrmax.core.budget import limiter_stats
from xarray_zarrmax.errors import RequestFailed, StoreAccessError
from xarray_zarrmax.storage import ObstoreSource
from xarray_zarrmax.testing import MinioServer, minio_binary
from xarray_zarrmax.testing.throttling import start_watching, stop_watching

LIMIT = 8  # requests MinIO serves at once


# -- the retry loop, without a server ---------------------------------------------------------------------------


def overloaded(status: int = 503) -> oe.GenericError:
    reason = "Service Unavailable: <Code>SlowDown</Code>" if status == 503 else "Too Many Requests"
    return oe.GenericError(f"Generic S3 error: Error performing GET http://127.0.0.1:9/b/k - Server returned "
                           f"non-2xx status code: {status} {reason}")


class Flaky:
    """A store call that fails ``failures`` times with ``error``, then answers; counts its calls."""

    def __init__(self, error: BaseException, failures: int = 10**9) -> None:
        self.error, self.failures, self.calls = error, failures, 0

    async def __call__(self, store: Any, key: str) -> bytes:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return b"ok"


def ours() -> ObstoreSource:
    """A source whose requests we retry ourselves (as the S3 stores built from a URL)."""
    return ObstoreSource(MemoryStore(), label="s3://bucket/data.zarr (http://127.0.0.1:9)", direct=MemoryStore())


def call(source: ObstoreSource, fn: Any) -> Any:
    """``fn`` sent through the source on a loop of its own: a fresh limiter and retry budget."""
    return asyncio.run(source._call("GET", "v/c/0/1", fn, "v/c/0/1"))


def test_overload_answers_are_retried_counted_and_lower_the_limit():
    source = ours()
    flaky = Flaky(overloaded(503), failures=3)

    async def scenario() -> Any:
        from xarray_zarrmax.core.budget import request_slot

        got = await source._call("GET", "v/c/0/1", flaky, "v/c/0/1")
        return got, request_slot().stats()

    with request_counts() as counts:
        got, stats = asyncio.run(scenario())
    assert got == b"ok" and flaky.calls == 4
    assert (counts.total("throttled"), counts.total("retries")) == (3, 3)
    assert counts.by_store[source.label].as_dict()["throttled"] == 3
    # each retry was sent after the refusal before it had lowered the limit: a window of its own each
    assert stats["decreases"] == 3 and stats["lowest"] == get_config().concurrency // 8


@pytest.mark.parametrize("status", [503, 429])
def test_a_store_refusing_every_attempt_fails_naming_store_key_status_and_attempts(status):
    flaky = Flaky(overloaded(status))
    start = time.monotonic()
    with set_config(retries=3), pytest.raises(RequestFailed) as info:
        call(ours(), flaky)
    assert time.monotonic() - start < 2
    text = str(info.value)
    assert flaky.calls == 4 and info.value.status == status
    assert "'v/c/0/1'" in text and "s3://bucket/data.zarr (http://127.0.0.1:9)" in text
    assert "gave up after 4 attempts" in text and f"HTTP {status}" in text and "overloaded" in text
    assert "config.retries=3" in text
    assert info.value.__context__ is None  # obstore's own text stays out


def test_no_retry_starts_after_the_time_bound(monkeypatch):
    monkeypatch.setattr("xarray_zarrmax.storage.retry.RETRY_TIMEOUT_S", 0.2)
    flaky = Flaky(overloaded())
    start = time.monotonic()
    with pytest.raises(RequestFailed, match=r"no retry starts 0.2 s after the first attempt"):
        call(ours(), flaky)
    assert time.monotonic() - start < 2 and 2 <= flaky.calls < get_config().retries + 1


def test_the_process_retry_budget_ends_a_storm():
    """With concurrency 1, the burst is RETRY_BUDGET_BURST retries: a store refusing everything gets that many,
    then the error says the budget is spent."""
    from xarray_zarrmax.tuning import RETRY_BUDGET_BURST

    flaky = Flaky(overloaded(429))
    with set_config(concurrency=1, retries=100), pytest.raises(RequestFailed, match="retry budget is spent"):
        call(ours(), flaky)
    assert flaky.calls == RETRY_BUDGET_BURST + 1


def test_what_obstore_retries_itself_is_not_retried_again():
    """A store with its own retry config (no twin): obstore already retried its 503s, 429s and broken connections
    as often as that config allows (an overload answer still counts); a body that broke off after the response
    began it does not retry, so we do."""
    mine = ObstoreSource(MemoryStore(), label="memory")
    for error, throttled in ((overloaded(503), 1), (overloaded(429), 1),
                             (oe.GenericError("error sending request: connection reset"), 0)):
        flaky = Flaky(error, failures=1)
        with request_counts() as counts, pytest.raises(StoreAccessError):
            call(mine, flaky)
        assert flaky.calls == 1 and counts.total("retries") == 0
        assert counts.total("throttled") == throttled

    class Broken:
        calls = 0

        async def bytes_async(self) -> bytes:
            Broken.calls += 1
            if Broken.calls == 1:
                raise oe.GenericError("HTTP error: request or response body error")
            return b"body"

    async def response(store: Any, key: str) -> Broken:
        return Broken()

    with request_counts() as counts:
        assert call(mine, response)[1] == b"body"
    assert Broken.calls == 2 and counts.total("retries") == 1


def test_refusals_and_missing_objects_are_never_retried():
    for error in (oe.PermissionDeniedError("403 Forbidden"), oe.GenericError("status code: 400 Bad Request")):
        flaky = Flaky(error)
        with request_counts() as counts, pytest.raises(StoreAccessError):
            call(ours(), flaky)
        assert flaky.calls == 1 and counts.total("retries") == 0


# -- a real throttled MinIO, read by a cluster ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def throttled() -> Iterator[MinioServer]:
    binary = minio_binary()
    if binary is None:
        message = "the MinIO binary not found: run `bash ci/install_services.sh`"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    server = MinioServer.throttled(binary, LIMIT).start()
    try:
        yield server
    finally:
        server.close()


@pytest.mark.s3
@pytest.mark.slow
def test_a_cluster_reads_a_throttled_store_right(throttled):
    """4 worker processes of 128 requests each against a store serving 8 at once: every value right, the
    refusals seen (the test is real) and retried, each refused worker's limit lowered, and raised again as the
    answers come (over this read and a second one)."""
    import distributed

    bucket = throttled.make_bucket("throttled")
    shape, shards = (1024, 2048), (32, 128)  # 512 shards of 16 KiB, each one GET
    data = np.random.default_rng(46).random(shape, dtype="f4")
    group = zarr.open_group(zarr.storage.ObjectStore(throttled.obstore(bucket, "a.zarr")), mode="w", zarr_format=3)
    array = group.create_array("v", shape=shape, dtype="f4", chunks=(32, 32), shards=shards, compressors=None,
                               dimension_names=["y", "x"])
    with zarr.config.set({"async.concurrency": 2}):  # fewer than the limit: zarr-python does not retry a 429
        array[:] = data
    ds = xr.open_dataset(f"s3://{bucket}/a.zarr", engine="zarrmax", chunks={"y": 4 * 32, "x": 2048},
                         consolidated=False, storage_options=throttled.storage_options())  # 8 tasks of 64 GETs
    with distributed.LocalCluster(n_workers=4, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as client:
        client.run(start_watching, 0.02)
        values = ds["v"].values
        seen = list(client.run(stop_watching).values())
        np.testing.assert_array_equal(ds["v"][::7].values, data[::7])  # a second read, from the lowered limits
        history = [limiter["history"] for limiter in client.run(limiter_stats).values()]
    np.testing.assert_array_equal(values, data)
    throttled_answers = sum(w["counts"]["throttled"] for w in seen)
    assert throttled_answers > 0, "no 429 came back: the store did not throttle, the test proves nothing"
    assert sum(w["counts"]["retries"] for w in seen) >= throttled_answers
    assert sum(w["counts"]["get"] for w in seen) >= shape[0] // shards[0] * shape[1] // shards[1]
    refused = [w for w in seen if w["counts"]["throttled"]]
    assert all(w["limiter"]["lowest"] < 128 for w in refused), [w["limiter"] for w in seen]
    assert any(_rose_after_lowest(each) for each in history), "no worker's limit grew back after its lowest point"


def _rose_after_lowest(history: list[tuple[float, int | None]]) -> bool:
    limits = [128 if limit is None else limit for _, limit in history]
    low = limits.index(min(limits))
    return any(limit > limits[low] for limit in limits[low:])
