"""Data that changes under an open Dataset: every read answers as engine="zarr" does, on every store kind.

A cached shard index may only be used for the object version it was read from. Each case opens both engines,
reads (so indexes are cached), changes the store (a shard rewritten at the same size or another size, deleted,
or added where there was none), then reads again from the same open Datasets and from pickled copies.
"""

from __future__ import annotations

import asyncio
import pickle

import numpy as np
import pytest
import xarray as xr
import zarr

from tests.support.changes import CASES, SAME_SIZE_SHARD0, change_case, create_case, read_selections
from xarray_zarrmax import StoreAccessError, request_counts, set_config
from xarray_zarrmax.errors import ObjectChanged
from xarray_zarrmax.storage import LocalSource, ObstoreSource, local


@pytest.fixture(autouse=True)
def settled_files(monkeypatch):
    """Files here are milliseconds old; caching them must be allowed to exercise the version checks (the
    racy-file rule has its own test below)."""
    monkeypatch.setattr(local, "RACY_WINDOW_NS", 0)


def _rewrite(written, case: str) -> None:
    if written._repo is None:
        change_case(written.store, case)
        return
    session = written._repo.writable_session("main")
    change_case(session.store, case)
    session.commit(f"rewrite: {case}")


@pytest.mark.parametrize("case", CASES)
def test_reads_after_a_change_match_engine_zarr(store_factory, case):
    written = store_factory.new()
    create_case(written.store, case)
    written.finish()
    lazy = xr.open_dataset(written.target, engine="zarrmax", **written.open_kwargs)
    dask = xr.open_dataset(written.target, engine="zarrmax", chunks={}, **written.open_kwargs)
    oracle = xr.open_dataset(written.oracle_store, engine="zarr", consolidated=False)
    with set_config(full_shard_fraction=1.0):  # partial reads: the index is fetched and cached
        before = [read_selections(lazy), read_selections(dask)]
    for got in before:
        for a, b in zip(got, read_selections(oracle), strict=True):
            np.testing.assert_array_equal(a, b)

    _rewrite(written, case)

    expected = read_selections(oracle)  # zarr-python re-reads every shard index: always current
    copies = [pickle.loads(pickle.dumps(lazy)), pickle.loads(pickle.dumps(dask))]
    for ds in (lazy, dask, *copies):
        for config in ({"full_shard_fraction": 1.0}, {}):  # cached index + ranges, and whole-shard reads
            with set_config(**config):
                for a, b in zip(read_selections(ds), expected, strict=True):
                    np.testing.assert_array_equal(a, b)
    if written._repo is None:  # an Icechunk session reads its snapshot: the change is not in it
        assert not all(np.array_equal(a, b) for a, b in zip(before[0], expected, strict=True))


def _sharded(path) -> str:
    create_case(zarr.storage.LocalStore(path), "same-size")
    return str(path)


def test_an_unchanged_object_costs_no_extra_request_and_a_changed_one_one_retry(tmp_path):
    ds = xr.open_dataset(_sharded(tmp_path / "a.zarr"), engine="zarrmax")
    ds["v"][0:4].values  # caches the index of shard 0
    with request_counts() as same:
        ds["v"][12:16].values
    assert same.total("get") == 1  # the chunk only: fstat proves the index current
    change_case(zarr.storage.LocalStore(tmp_path / "a.zarr"), "same-size")
    with request_counts() as changed:
        got = ds["v"][12:16].values
    assert changed.total("get") == 2  # fstat shows the change before any byte is read: index + chunk
    np.testing.assert_array_equal(got, SAME_SIZE_SHARD0[12:16])


def test_chunks_a_cached_index_calls_empty_are_checked_too(tmp_path):
    """A read whose chunks are all empty by the cached index fetches no range, so nothing would prove the index
    current: it reads the index again (as engine="zarr" does) instead of answering fill values from memory."""
    ds = xr.open_dataset(_sharded(tmp_path / "a.zarr"), engine="zarrmax")
    np.testing.assert_array_equal(ds["v"][4:8].values, -1.0)  # chunk 1 is not stored
    change_case(zarr.storage.LocalStore(tmp_path / "a.zarr"), "same-size")  # now it is
    with request_counts() as counts:
        got = ds["v"][4:8].values
    np.testing.assert_array_equal(got, SAME_SIZE_SHARD0[4:8])
    assert counts.total("get") == 2  # the index, then the chunk


def test_a_recently_modified_file_is_not_trusted_across_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "RACY_WINDOW_NS", 3600 * 10**9)  # everything was modified "just now"
    ds = xr.open_dataset(_sharded(tmp_path / "a.zarr"), engine="zarrmax")
    ds["v"][0:4].values
    with request_counts() as again:
        ds["v"][8:12].values
    assert again.total("get") == 2  # the index is read again, not taken from the cache


class _RewritingSource(LocalSource):
    """Rewrites its array the first time chunk ranges are asked for: the worst moment for a cached index."""

    def __init__(self, root, case: str) -> None:
        super().__init__(root)
        self.case, self.rewrites = case, 0

    def read_ranges(self, key, ranges, version=None):
        if self.rewrites == 0 and version is not None:
            self.rewrites += 1
            change_case(zarr.storage.LocalStore(self.root), self.case)
        return super().read_ranges(key, ranges, version)


@pytest.mark.parametrize("case", ["same-size", "other-size", "deleted"])
def test_a_change_between_index_and_chunks_is_retried_not_mixed(tmp_path, case):
    path = tmp_path / "a.zarr"
    create_case(zarr.storage.LocalStore(path), case)
    source = _RewritingSource(path, case)
    ds = xr.open_dataset(source, engine="zarrmax")
    got = ds["v"][8:12].values
    assert source.rewrites == 1
    expected = xr.open_dataset(str(path), engine="zarr", consolidated=False)["v"][8:12].values
    np.testing.assert_array_equal(got, expected)


def test_an_object_that_keeps_changing_is_an_error_not_a_mix(tmp_path):
    class AlwaysChanging(LocalSource):
        def read_ranges(self, key, ranges, version=None):
            raise ObjectChanged(key)

    ds = xr.open_dataset(AlwaysChanging(_sharded(tmp_path / "a.zarr")), engine="zarrmax")
    with pytest.raises(StoreAccessError, match=r"array 'v', key 'v/c/0/0'.* changed 3 times while it was being read"):
        ds["v"][8:12].values


def test_s3_parts_of_one_object_come_from_one_version(minio, bucket):
    """A whole shard fetched as several ranges: a rewrite after the first range must not mix two versions."""
    prefix = "coherence-parts.zarr"
    store = zarr.storage.ObjectStore(minio.obstore(bucket, prefix))
    create_case(store, "same-size")

    class RewriteAfterFirstPart(ObstoreSource):
        rewritten = 0

        async def get_ranges(self, key, ranges, version=None):
            if not self.rewritten and version is not None:
                type(self).rewritten += 1
                await asyncio.to_thread(change_case, store, "same-size")
            return await super().get_ranges(key, ranges, version)

    source = RewriteAfterFirstPart(minio.obstore(bucket, prefix))
    ds = xr.open_dataset(source, engine="zarrmax", chunks={})
    with set_config(split_size=300):
        got = ds["v"][:32].values
    assert RewriteAfterFirstPart.rewritten == 1
    np.testing.assert_array_equal(got, SAME_SIZE_SHARD0)


def test_s3_a_changed_object_costs_one_failed_range_then_index_and_ranges(minio, bucket):
    prefix = "coherence-counts.zarr"
    store = zarr.storage.ObjectStore(minio.obstore(bucket, prefix))
    create_case(store, "same-size")
    ds = xr.open_dataset(f"s3://{bucket}/{prefix}", engine="zarrmax", storage_options=minio.storage_options())
    ds["v"][0:4].values
    with request_counts() as same:
        ds["v"][12:16].values
    assert same.total("get") == 1
    change_case(store, "same-size")
    with request_counts() as changed:
        got = ds["v"][12:16].values
    np.testing.assert_array_equal(got, SAME_SIZE_SHARD0[12:16])
    assert changed.total("get") == 3  # the conditional range (412), the index again, the range
