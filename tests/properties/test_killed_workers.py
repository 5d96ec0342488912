"""Workers that die (issue 46): a dask worker process SIGKILLed while it reads has its tasks rerun elsewhere and the
result is right, on local disk and MinIO. (Writers killed partway: test_killed_writers.py.)"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr

import xarray_zarrmax
from tests.support.compare import s3_oracle
from tests.support.targets import counter
from xarray_zarrmax.testing import MinioServer, Toxiproxy

distributed = pytest.importorskip("distributed")

from tests.support.read_markers import ReadMarkers, reads_done, reads_in_flight  # noqa: E402  (needs distributed)

_proxies = itertools.count()

READ_SHAPE, READ_CHUNKS, READ_SHARDS = (384, 32, 64), (4, 32, 64), (16, 32, 64)  # 24 shards of 4 chunks


@pytest.fixture(scope="module")
def markers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("markers")


@pytest.fixture(scope="module")
def client(markers: Path) -> Iterator[Any]:
    with distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=50) as cluster, distributed.Client(cluster) as c:
        c.register_plugin(ReadMarkers(str(markers), local_delay=0.25))
        yield c


def _write_read_store(store: Any) -> np.ndarray:
    data = np.random.default_rng(5).normal(size=READ_SHAPE).astype("f4")
    group = zarr.open_group(store, mode="w", zarr_format=3)
    arr = group.create_array("v", shape=READ_SHAPE, chunks=READ_CHUNKS, shards=READ_SHARDS, dtype="f4",
                             dimension_names=["t", "y", "x"])
    arr[:] = data
    return data


def _kill_mid_read(client: Any, markers: Path, ds: xr.Dataset, data: np.ndarray, oracle: xr.Dataset) -> None:
    """Compute ``ds.v`` on the cluster, SIGKILL a worker process while one of its reads is in flight, and check
    the result; the kill is proven to have landed mid-read, and that read to have been done again elsewhere."""
    client.wait_for_workers(3, timeout=120)  # a worker killed by an earlier test is back
    pids = client.run(os.getpid)
    assert ds["v"].data.npartitions == READ_SHAPE[0] // READ_SHARDS[0]  # one task per shard
    future = client.compute(ds["v"].data)
    deadline = time.monotonic() + 60
    victim = None
    while victim is None and time.monotonic() < deadline:
        victim = next(((address, pid) for address, pid in pids.items() if reads_in_flight(markers, pid)), None)
        time.sleep(0.005)
    assert victim is not None, "no worker started a read within 60 s"
    address, pid = victim
    processing = client.processing()[address]
    os.kill(pid, signal.SIGKILL)
    assert processing, "the scheduler saw no task processing on the killed worker"
    result = future.result(timeout=180)
    # Dead, the worker can finish nothing: what it had in flight when it died is what it never finished.
    killed_in = reads_in_flight(markers, pid)
    assert killed_in, "the kill did not land while the worker was reading"
    for selection in killed_in:
        assert reads_done(markers, selection, not_by=pid) >= 1, f"{selection} was never read again elsewhere"
    client.wait_for_workers(3, timeout=120)  # the nanny started a new process in its place
    assert pid not in client.run(os.getpid).values()
    np.testing.assert_array_equal(result, data)
    np.testing.assert_array_equal(result, oracle["v"].values)


def test_worker_killed_mid_read_local(client: Any, markers: Path, tmp_path: Path) -> None:
    path = str(tmp_path / "read.zarr")
    data = _write_read_store(path)
    with xarray_zarrmax.set_config(task_bytes=0):  # a task per shard, not groups of these small shards
        ds = xr.open_dataset(path, engine="zarrmax", chunks={}, consolidated=False)
    _kill_mid_read(client, markers, ds, data, xr.open_dataset(path, engine="zarr", consolidated=False))


@pytest.mark.s3
def test_worker_killed_mid_read_minio(client: Any, markers: Path, minio: MinioServer, bucket: str,
                                      toxiproxy: Toxiproxy) -> None:
    prefix = f"killed-read{next(counter)}.zarr"
    data = _write_read_store(zarr.storage.ObjectStore(minio.obstore(bucket, prefix)))
    name = f"killed_read_{next(_proxies)}"
    endpoint = toxiproxy.proxy(name, minio.port)
    toxiproxy.add_toxic(name, "latency", latency=250)  # every response: a read lasts long enough to be killed in
    with xarray_zarrmax.set_config(task_bytes=0):
        ds = xr.open_dataset(f"s3://{bucket}/{prefix}", engine="zarrmax", chunks={}, consolidated=False,
                             storage_options=minio.storage_options(endpoint))
    oracle = xr.open_dataset(s3_oracle(minio, f"s3://{bucket}/{prefix}"), engine="zarr", consolidated=False)
    _kill_mid_read(client, markers, ds, data, oracle)
