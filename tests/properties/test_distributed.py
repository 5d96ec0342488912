"""dask.distributed with worker processes: same answers as engine="zarr", one task per shard, small pickles,
no credentials in task keys."""

from __future__ import annotations

import pickle

import dask
import numpy as np
import pytest
import xarray as xr
import zarr

import xarray_zarrmax

distributed = pytest.importorskip("distributed")

SHAPE, CHUNKS, SHARDS = (48, 32, 40), (4, 16, 20), (12, 32, 40)  # 4 shards of 4x2x2 chunks


def write(store) -> np.ndarray:
    data = np.random.default_rng(7).normal(size=SHAPE).astype("f4")
    group = zarr.open_group(store, mode="w", zarr_format=3)
    arr = group.create_array("v", shape=SHAPE, chunks=CHUNKS, shards=SHARDS, dtype="f4",
                             dimension_names=["time", "lat", "lon"])
    arr[:] = data
    return data


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def s3_dataset(minio, bucket):
    data = write(zarr.storage.ObjectStore(minio.obstore(bucket, "dist.zarr")))
    return f"s3://{bucket}/dist.zarr", {"storage_options": minio.storage_options()}, data


@pytest.fixture(scope="module")
def icechunk_dataset(tmp_path_factory):
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path_factory.mktemp("ic"))))
    session = repo.writable_session("main")
    data = write(session.store)
    session.commit("data")
    return repo.readonly_session("main"), {}, data


@pytest.mark.s3
def test_s3_on_local_cluster_matches_engine_zarr(client, s3_dataset, minio, bucket):
    target, kw, data = s3_dataset
    with xarray_zarrmax.set_config(task_bytes=0):  # one task per shard, not groups of these small shards
        ds = xr.open_dataset(target, engine="zarrmax", chunks={}, **kw)
    oracle = xr.open_dataset(zarr.storage.ObjectStore(minio.obstore(bucket, "dist.zarr")), engine="zarr",
                             consolidated=False)
    assert ds["v"].chunks == ((12, 12, 12, 12), (32,), (40,))  # every task is exactly one shard
    result = ds["v"].compute()  # runs on the cluster's worker processes
    np.testing.assert_array_equal(result.values, oracle["v"].values)
    np.testing.assert_array_equal(result.values, data)
    # partial reads on workers too
    np.testing.assert_array_equal(ds["v"].isel(time=slice(5, 30, 3), lat=7).compute().values, data[5:30:3, 7])


@pytest.mark.icechunk
def test_icechunk_on_local_cluster_matches_engine_zarr(client, icechunk_dataset):
    session, _, data = icechunk_dataset
    ds = xr.open_dataset(session, engine="zarrmax", chunks={})
    oracle = xr.open_dataset(session.store, engine="zarr", consolidated=False)
    np.testing.assert_array_equal(ds["v"].compute().values, oracle["v"].values)
    np.testing.assert_allclose(ds["v"].mean("time").compute().values, data.mean(axis=0), atol=1e-6)


@pytest.mark.s3
def test_graph_is_one_small_task_per_shard_without_secrets(s3_dataset):
    from xarray_zarrmax.testing import SECRET_KEY

    target, kw, _ = s3_dataset
    with xarray_zarrmax.set_config(task_bytes=0):  # one task per shard, not groups of these small shards
        ds = xr.open_dataset(target, engine="zarrmax", chunks={}, **kw)
    sel = ds["v"].isel(time=slice(0, 24))  # the first two shards
    graph = dict(sel.data.__dask_graph__())
    getters = [k for k in graph if isinstance(k, tuple) and "open_dataset" in k[0]]
    assert len(getters) == 4  # the graph holds one getter per shard of the array...
    (optimized,) = dask.optimize(sel.data)
    assert optimized.npartitions == 2  # ...and culls to the two shards read
    payload = pickle.dumps(graph)
    assert len(payload) < 50_000, len(payload)
    assert SECRET_KEY.encode() not in b"".join(str(k).encode() for k in graph)
    assert SECRET_KEY not in repr(graph)


def _sum_in_child(args):
    target, kw = args
    ds = xr.open_dataset(target, engine="zarrmax", chunks={}, **kw)
    with dask.config.set(scheduler="threads"):
        return float(ds["v"].sum().compute())


@pytest.mark.s3
def test_spawned_workers_after_the_parent_read(s3_dataset):
    """Reads in the parent, then in fresh worker processes (the start method dask.distributed uses)."""
    import multiprocessing

    target, kw, data = s3_dataset
    expected = _sum_in_child((target, kw))
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.map(_sum_in_child, [(target, kw)] * 2)
    assert results == pytest.approx([expected] * 2)
    assert expected == pytest.approx(float(data.astype("f8").sum()), rel=1e-4)


FORK_WARNING = "ignore:This process .* is multi-threaded, use of fork:DeprecationWarning"


@pytest.mark.s3
@pytest.mark.filterwarnings(FORK_WARNING)
def test_forked_child_of_an_obstore_user_fails_fast_instead_of_hanging(s3_dataset):
    """obstore's runtime does not survive fork(): the child gets a clear error at once, never a hang."""
    import multiprocessing

    target, kw, _ = s3_dataset
    _sum_in_child((target, kw))  # the parent has used obstore
    with multiprocessing.get_context("fork").Pool(1) as pool:
        result = pool.apply_async(_sum_in_child, ((target, kw),))
        with pytest.raises(xarray_zarrmax.StoreAccessError, match="forked from one that had already used obstore"):
            result.get(timeout=60)


def _sum_without_dask(path):
    # dask's threaded scheduler itself does not survive fork once used: read through our own pools only
    return float(xr.open_dataset(path, engine="zarrmax")["v"].values.astype("f8").sum())


@pytest.mark.filterwarnings(FORK_WARNING)
def test_forked_child_reads_local_files(tmp_path):
    """Our own loop, budget and decode pool are rebuilt after fork: local reads work in a forked child."""
    import multiprocessing

    data = write(str(tmp_path / "local.zarr"))
    path = str(tmp_path / "local.zarr")
    expected = float(data.astype("f8").sum())
    assert _sum_without_dask(path) == pytest.approx(expected)  # the parent's pools now exist
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply_async(_sum_without_dask, (path,)).get(timeout=60) == pytest.approx(expected)


@pytest.mark.s3
def test_workers_see_a_rewrite_made_after_they_cached_indexes(client, minio, bucket):
    """Worker processes keep shard indexes across tasks of one open Dataset: a shard rewritten between two
    computations must not be read through the index a worker cached before."""
    store = zarr.storage.ObjectStore(minio.obstore(bucket, "dist-rewrite.zarr"))
    write(store)
    ds = xr.open_dataset(f"s3://{bucket}/dist-rewrite.zarr", engine="zarrmax", chunks={},
                         storage_options=minio.storage_options())
    oracle = xr.open_dataset(store, engine="zarr", consolidated=False)
    # 4 of the shard's 12 chunks, under the whole-shard threshold: index + ranges, and the index is cached
    part = {"time": slice(0, 8), "lat": slice(0, 16)}
    before = ds["v"].isel(part).compute()
    np.testing.assert_array_equal(before.values, oracle["v"].isel(part).values)
    arr = zarr.open_array(store, path="v", mode="r+")
    new = np.full((12, 32, 40), -5.0, dtype="f4")
    new[4:8] = 3.0  # other values, other compressed sizes: other offsets in the shard
    arr[:12] = new
    after = ds["v"].isel(part).compute()
    np.testing.assert_array_equal(after.values, oracle["v"].isel(part).values)
    assert not np.array_equal(after.values, before.values)
