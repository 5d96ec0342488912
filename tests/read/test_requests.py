"""Request counts: a whole-shard read is one GET; a partial read is the (cached) index plus coalesced ranges."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr

from xarray_zarrmax import request_counts, set_config
from xarray_zarrmax.storage import local


def write_sharded(store) -> None:
    group = zarr.open_group(store, mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(64, 8), chunks=(4, 8), shards=(32, 8), dtype="f8",
                             dimension_names=["t", "x"])
    arr[:] = np.arange(64 * 8, dtype="f8").reshape(64, 8)


@pytest.fixture(params=["local", "minio"])
def target(request, tmp_path, monkeypatch):
    if request.param == "local":
        # Counts for settled data: files written milliseconds ago are not trusted across reads (the racy-file
        # rule, tested in test_coherence.py), so declare these settled.
        monkeypatch.setattr(local, "RACY_WINDOW_NS", 0)
        write_sharded(str(tmp_path / "r.zarr"))
        return str(tmp_path / "r.zarr"), {}
    minio, bucket = request.getfixturevalue("minio"), request.getfixturevalue("bucket")
    prefix = f"requests-{request.node.name}.zarr".replace("[", "-").replace("]", "")
    write_sharded(zarr.storage.ObjectStore(minio.obstore(bucket, prefix)))
    return f"s3://{bucket}/{prefix}", {"storage_options": minio.storage_options()}


def test_whole_shard_is_one_get(target):
    url, kw = target
    ds = xr.open_dataset(url, engine="zarrmax", chunks={}, **kw)
    with request_counts() as counts:
        values = ds["v"].values
    assert counts.total("get") == 2  # two shards, one GET each, no index request
    assert counts.total("list") == 0
    np.testing.assert_array_equal(values, np.arange(512.0).reshape(64, 8))


def test_partial_read_is_index_plus_coalesced_ranges_and_index_is_cached(target):
    url, kw = target
    ds = xr.open_dataset(url, engine="zarrmax", **kw)
    with request_counts() as first:
        part = ds["v"][0:12].values  # 3 adjacent chunks of shard 0
    assert first.total("get") == 2  # index (suffix range) + one coalesced range
    with request_counts() as second:
        again = ds["v"][16:20].values  # another chunk of the same shard
    assert second.total("get") == 1  # the index is cached: just the chunk
    np.testing.assert_array_equal(part, np.arange(96.0).reshape(12, 8))
    np.testing.assert_array_equal(again, np.arange(128.0, 160.0).reshape(4, 8))


@pytest.mark.usefixtures("no_chunk_cache")  # chunk 0 is read twice: the cache would send nothing for it
def test_coalescing_gap_zero_sends_one_range_per_chunk(target):
    url, kw = target
    ds = xr.open_dataset(url, engine="zarrmax", **kw)
    with set_config(coalesce_gap=0, full_shard_fraction=1.0), request_counts() as counts:
        ds["v"][0:12:5].values  # chunks 0, 1 and 2 are needed, not adjacent in a strided read... but touched
    # rows 0, 5, 10 fall in chunks 0, 1, 2: contiguous in the shard, so even gap 0 merges them
    assert counts.total("get") == 2
    with set_config(coalesce_gap=0, full_shard_fraction=1.0), request_counts() as counts:
        ds["v"][[0, 20]].values  # chunks 0 and 5: not adjacent
    assert counts.total("get") == 2  # index cached from above + two separate ranges


def test_large_objects_come_as_parallel_ranges(minio, bucket):
    """Above split_size a whole-object read is a first range (which tells the size) plus parallel ranges."""
    write_sharded(zarr.storage.ObjectStore(minio.obstore(bucket, "split.zarr")))
    ds = xr.open_dataset(f"s3://{bucket}/split.zarr", engine="zarrmax", chunks={},
                         storage_options=minio.storage_options())
    shard_size = len(bytes(__import__("obstore").get(minio.obstore(bucket, "split.zarr"), "v/c/0/0").bytes()))
    split = 300
    with set_config(split_size=split), request_counts() as counts:
        values = ds["v"][:32].values  # exactly shard 0
    assert counts.total("get") == -(-shard_size // split)
    np.testing.assert_array_equal(values, np.arange(256.0).reshape(32, 8))
