"""Faults a real S3 throws, injected with toxiproxy and by stopping MinIO: transient ones are survived with the
right answer; persistent ones raise an error naming the store and key within a bounded time; never a hang."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import timedelta

import dask
import numpy as np
import pytest
import xarray as xr
import zarr

from xarray_zarrmax import StoreAccessError, request_counts, set_config

pytestmark = pytest.mark.s3

_names = itertools.count()
SHAPE, CHUNKS, SHARDS = (64, 256), (8, 256), (16, 256)  # 4 shards of 16 KiB, 2 chunks each


@pytest.fixture(scope="module")
def dataset(minio, bucket):
    prefix = "faults.zarr"
    group = zarr.open_group(zarr.storage.ObjectStore(minio.obstore(bucket, prefix)), mode="w", zarr_format=3)
    arr = group.create_array("v", shape=SHAPE, chunks=CHUNKS, shards=SHARDS, dtype="f4",
                             dimension_names=["t", "x"])
    data = np.random.default_rng(3).normal(size=SHAPE).astype("f4")
    arr[:] = data
    return prefix, data


@pytest.fixture
def proxied(minio, toxiproxy):
    """A fresh toxiproxy proxy in front of MinIO: (proxy name, endpoint)."""
    name = f"s3_{next(_names)}"
    return name, toxiproxy.proxy(name, minio.port)


def open_via(minio, bucket, prefix, endpoint, **retry):
    options = minio.storage_options(endpoint)
    options.update({"timeout": "2s", "connect_timeout": "1s"})
    if retry:
        options["retry_config"] = {"max_retries": retry["max_retries"], "retry_timeout": timedelta(seconds=10),
                                   "backoff": {"init_backoff": timedelta(milliseconds=50),
                                               "max_backoff": timedelta(milliseconds=500), "base": 2}}
    return xr.open_dataset(f"s3://{bucket}/{prefix}", engine="zarrmax", chunks={}, storage_options=options)


def compute(ds):
    with dask.config.set(scheduler="threads", num_workers=4):
        return ds["v"].values


def test_reset_peer_is_retried(minio, bucket, toxiproxy, dataset, proxied):
    prefix, data = dataset
    name, endpoint = proxied
    ds = open_via(minio, bucket, prefix, endpoint)
    toxiproxy.add_toxic(name, "reset_peer", toxicity=0.5, timeout=0)
    np.testing.assert_array_equal(compute(ds), data)


def test_reset_mid_body_is_retried(minio, bucket, toxiproxy, dataset, proxied):
    """limit_data closes the connection after a few bytes of a response: the body breaks off."""
    prefix, data = dataset
    name, endpoint = proxied
    ds = open_via(minio, bucket, prefix, endpoint)
    toxiproxy.add_toxic(name, "limit_data", toxicity=0.3, bytes=2000)
    np.testing.assert_array_equal(compute(ds), data)


@pytest.mark.parametrize("toxic, attributes", [("reset_peer", {"timeout": 0}), ("limit_data", {"bytes": 2000})])
def test_the_faults_are_real_without_retries(minio, bucket, toxiproxy, dataset, proxied, toxic, attributes):
    """Control for the two tests above: with every retry turned off, the same faults fail the read."""
    prefix, _ = dataset
    name, endpoint = proxied
    ds = open_via(minio, bucket, prefix, endpoint, max_retries=0)
    toxiproxy.add_toxic(name, toxic, **attributes)
    with set_config(retries=0), pytest.raises(StoreAccessError, match=r"'v/c/"):
        compute(ds)


def test_slow_close_is_harmless(minio, bucket, toxiproxy, dataset, proxied):
    prefix, data = dataset
    name, endpoint = proxied
    ds = open_via(minio, bucket, prefix, endpoint)
    toxiproxy.add_toxic(name, "slow_close", delay=300)
    np.testing.assert_array_equal(compute(ds), data)


def test_low_bandwidth_is_slow_but_right(minio, bucket, toxiproxy, dataset, proxied):
    prefix, data = dataset
    name, endpoint = proxied
    ds = open_via(minio, bucket, prefix, endpoint)
    toxiproxy.add_toxic(name, "bandwidth", rate=512)  # KB/s: 64 KiB of data takes a fraction of a second
    np.testing.assert_array_equal(compute(ds), data)


def test_persistent_timeout_fails_in_bounded_time_naming_store_and_key(minio, bucket, toxiproxy, dataset,
                                                                        proxied):
    prefix, _ = dataset
    name, endpoint = proxied
    ds = open_via(minio, bucket, prefix, endpoint, max_retries=2)
    toxiproxy.add_toxic(name, "timeout", timeout=0)  # data stops flowing, the connection stays open
    start = time.monotonic()
    with pytest.raises(StoreAccessError) as info:
        compute(ds)
    elapsed = time.monotonic() - start
    assert elapsed < 30, elapsed
    text = str(info.value)
    assert f"s3://{bucket}/{prefix}" in text and "v/c/" in text and endpoint in text


def test_minio_restart_mid_read(minio, bucket, toxiproxy, dataset, proxied):
    """Stop MinIO while a slow read is under way, start it again a second later: the read completes, right."""
    prefix, data = dataset
    name, endpoint = proxied
    ds = open_via(minio, bucket, prefix, endpoint)
    toxiproxy.add_toxic(name, "bandwidth", rate=48)  # about 1.5 s for the whole array
    outage = threading.Event()

    def restart() -> None:
        time.sleep(0.4)
        minio.stop()
        outage.set()
        time.sleep(1.0)
        minio.start()

    thread = threading.Thread(target=restart)
    thread.start()
    try:
        with request_counts() as counts:
            values = compute(ds)
    finally:
        thread.join()
    assert outage.is_set()
    np.testing.assert_array_equal(values, data)
    assert counts.total("get") >= 4


def test_minio_down_fails_in_bounded_time(minio, bucket, dataset, toxiproxy, proxied):
    prefix, _ = dataset
    name, endpoint = proxied
    ds = open_via(minio, bucket, prefix, endpoint, max_retries=2)
    toxiproxy._api("POST", f"/proxies/{name}", {"enabled": False})  # connection refused from now on
    start = time.monotonic()
    with pytest.raises(StoreAccessError, match=r"GET .*'v/c/.*' on s3://"):
        compute(ds)
    assert time.monotonic() - start < 30


def test_only_server_status_codes_decide_retries():
    """A number inside a key is not a status code: a 400 on key v/c/500/0 is not retried as a 500."""
    from xarray_zarrmax.storage.obstore import is_transient

    assert not is_transient(Exception("GET v/c/500/0: Server returned non-2xx status code: 400 Bad Request"))
    assert is_transient(Exception("GET v/c/400/0: Server returned non-2xx status code: 503 Slow Down"))
    assert is_transient(Exception("HTTP error: request or response body error"))
    assert not is_transient(Exception("Server returned non-2xx status code: 416 Range Not Satisfiable"))


def test_a_failed_read_cancels_its_other_requests():
    """gather_or_cancel: the first error reaches the caller at once and the rest stop, not run on."""
    import asyncio

    from xarray_zarrmax.core.loop import gather_or_cancel, run_sync

    cancelled = []

    async def slow():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def fail():
        await asyncio.sleep(0.01)
        raise ValueError("bad shard")

    start = time.monotonic()
    with pytest.raises(ValueError, match="bad shard"):
        run_sync(gather_or_cancel(slow(), fail(), slow()))
    assert time.monotonic() - start < 2
    assert cancelled == [True, True]
