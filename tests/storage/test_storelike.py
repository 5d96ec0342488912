"""Everything engine="zarr" takes as a store (zarr-python's StoreLike), engine="zarrmax" takes too, and reads to the
same Dataset: dicts, fsspec URLs and mappers, zarr's FsspecStore and ObjectStore; globs for open_mfdataset."""

from __future__ import annotations

import uuid
from collections.abc import MutableMapping
from pathlib import Path

import fsspec
import numpy as np
import pytest
import xarray as xr
from obstore.store import LocalStore as ObstoreLocalStore
from zarr.storage import FsspecStore, MemoryStore, ObjectStore

import xarray_zarrmax
from tests.support.changes import CASES, change_case, create_case, read_selections
from tests.support.compare import assert_same_dataset
from tests.support.datasets import era5_like, write_with_zarr
from xarray_zarrmax import request_counts, set_config
from xarray_zarrmax.storage import (
    LocalSource,
    ObstoreSource,
    ZarrStoreSource,
    glob,
    obstore_s3_options,
    resolve_source,
)


@pytest.fixture
def memory_url():
    """A fresh memory:// location, removed afterwards (fsspec's memory file system is one per process)."""
    url = f"memory://storelike/{uuid.uuid4().hex}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


class OtherMapping(MutableMapping):
    """A MutableMapping that is not a dict (zarr v2's stores, a user's own cache, ...)."""

    def __init__(self, data):
        self.data = data

    def __getitem__(self, key):
        return self.data[key]

    def __setitem__(self, key, value):
        self.data[key] = value

    def __delitem__(self, key):
        del self.data[key]

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


def storelike(kind: str, tmp_path: Path, memory_url: str, zarr_format: int = 3, consolidated: bool = False):
    """(what to open, the ByteSource type engine="zarrmax" reads it through, what engine="zarr" opens) for one
    kind of StoreLike, holding `era5_like` data."""
    if kind == "dict":
        store: dict = {}
        write_with_zarr(era5_like(), store, zarr_format, consolidated)
        return store, ZarrStoreSource, store
    local = str(tmp_path / "era5.zarr")
    if kind in ("local-mapper", "ObjectStore"):
        write_with_zarr(era5_like(), local, zarr_format, consolidated)
        if kind == "local-mapper":
            return fsspec.get_mapper(local), LocalSource, fsspec.get_mapper(local)
        return ObjectStore(ObstoreLocalStore(local)), ObstoreSource, ObjectStore(ObstoreLocalStore(local))
    url = f"{memory_url}/era5.zarr"
    write_with_zarr(era5_like(), url, zarr_format, consolidated)
    return {
        "memory-url": (url, ZarrStoreSource, url),
        # engine="zarr" fails on sharded arrays through simplecache:: with fsspec <= 2026.9 (suffix reads: "no
        # attribute 'size'", fsspec#2168); it reads the same bytes without the cache
        "simplecache-url": (f"simplecache::{url}", ZarrStoreSource, url),
        "memory-mapper": (fsspec.get_mapper(url), ZarrStoreSource, fsspec.get_mapper(url)),
        "FsspecStore": (FsspecStore.from_url(url, read_only=True), ZarrStoreSource, FsspecStore.from_url(url)),
    }[kind]


KINDS = ["dict", "memory-url", "simplecache-url", "memory-mapper", "local-mapper", "FsspecStore", "ObjectStore"]


@pytest.mark.parametrize("zarr_format, consolidated", [(3, False), (3, True), (2, True)])
@pytest.mark.parametrize("kind", KINDS)
def test_each_storelike_reads_as_engine_zarr(tmp_path, memory_url, kind, zarr_format, consolidated):
    target, source_type, oracle_target = storelike(kind, tmp_path, memory_url, zarr_format, consolidated)
    assert type(resolve_source(target)) is source_type
    for chunks in (None, {}):
        ours = xr.open_dataset(target, engine="zarrmax", chunks=chunks)
        oracle = xr.open_dataset(oracle_target, engine="zarr", chunks=chunks, consolidated=consolidated)
        assert_same_dataset(ours.compute(), oracle.compute())


def test_a_dict_of_bytes_or_another_mapping_reads_as_a_dict_of_buffers():
    """zarr-python writes Buffers into a dict; a dict of plain bytes (or a MutableMapping that is not a dict),
    which engine="zarr" refuses, reads here as the same store."""
    buffers: dict = {}
    write_with_zarr(era5_like(), buffers)
    oracle = xr.open_dataset(buffers, engine="zarr", consolidated=False).load()
    as_bytes = {key: value.to_bytes() for key, value in buffers.items()}
    as_bytearrays = {key: bytearray(value) for key, value in as_bytes.items()}
    for target in (as_bytes, as_bytearrays, OtherMapping(as_bytes), OtherMapping(buffers)):
        assert_same_dataset(xr.open_dataset(target, engine="zarrmax").load(), oracle)


def _writable(kind: str, memory_url: str):
    """(a writable zarr store, what each engine opens: the same bytes) for the StoreLikes zarr-python writes
    through while we read."""
    if kind == "dict":
        store: dict = {}
        return MemoryStore(store_dict=store), store
    url = f"{memory_url}/v.zarr"
    writer = FsspecStore.from_url(url)
    return writer, {"memory-url": url, "memory-mapper": fsspec.get_mapper(url)}[kind]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", ["dict", "memory-url", "memory-mapper"])
def test_changes_under_an_open_dataset_read_as_engine_zarr(memory_url, kind, case):
    """These stores give no version with their bytes, so nothing read from them is reused: a change between
    reads shows, as it does with engine="zarr"."""
    writer, target = _writable(kind, memory_url)
    create_case(writer, case)
    ours = [xr.open_dataset(target, engine="zarrmax", chunks=chunks) for chunks in (None, {})]
    oracle = xr.open_dataset(target, engine="zarr", consolidated=False)
    with set_config(full_shard_fraction=1.0):  # partial reads: an index, then chunk ranges
        before = [read_selections(ds) for ds in ours]
    change_case(writer, case)
    expected = read_selections(oracle)
    assert not all(np.array_equal(a, b) for a, b in zip(before[0], expected, strict=True))
    for ds in ours:
        for config in ({"full_shard_fraction": 1.0}, {}):
            with set_config(**config):
                for a, b in zip(read_selections(ds), expected, strict=True):
                    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kind", ["dict", "memory-url", "memory-mapper"])
def test_unversioned_stores_read_the_shard_index_every_time(memory_url, kind):
    writer, target = _writable(kind, memory_url)
    create_case(writer, "same-size")
    ds = xr.open_dataset(target, engine="zarrmax")
    with set_config(full_shard_fraction=1.0):
        ds["v"][0:4].values
        with request_counts() as again:
            ds["v"][12:16].values  # the same shard
    assert again.total("get") == 2  # its index again, then the chunk


def _sharded_object_store(obstore) -> ObjectStore:
    store = ObjectStore(obstore)
    create_case(store, "same-size")
    return store


def _second_read_gets(target) -> int:
    """GET requests of a read from a shard whose index an earlier read fetched."""
    ds = xr.open_dataset(target, engine="zarrmax")
    with set_config(full_shard_fraction=1.0):
        ds["v"][0:4].values
        with request_counts() as counts:
            ds["v"][12:16].values  # the same shard as the read before
    return counts.total("get")


@pytest.mark.usefixtures("no_chunk_cache")  # counts what the read path sends for a chunk not read before
def test_zarr_object_store_is_read_through_obstore_with_etags(tmp_path):
    store = _sharded_object_store(ObstoreLocalStore(str(tmp_path / "a.zarr"), mkdir=True))
    source = resolve_source(store)
    assert type(source) is ObstoreSource and source.store is store.store
    oracle = xr.open_dataset(store, engine="zarr", consolidated=False).load()
    assert_same_dataset(xr.open_dataset(store, engine="zarrmax").load(), oracle)
    # the cached index is proven current by its ETag: one request for the chunk; through zarr's store, two
    assert _second_read_gets(store) == 1
    assert _second_read_gets(ZarrStoreSource(store)) == 2


@pytest.mark.s3
@pytest.mark.usefixtures("no_chunk_cache")
def test_zarr_object_store_on_s3_is_read_through_obstore_with_etags(minio, bucket):
    store = _sharded_object_store(minio.obstore(bucket, f"objectstore-{uuid.uuid4().hex}.zarr"))
    assert type(resolve_source(store)) is ObstoreSource
    oracle = xr.open_dataset(store, engine="zarr", consolidated=False).load()
    assert_same_dataset(xr.open_dataset(store, engine="zarrmax").load(), oracle)
    assert _second_read_gets(store) == 1
    assert _second_read_gets(ZarrStoreSource(store)) == 2


# -- errors --------------------------------------------------------------------------------------------------


def _bad_inputs(tmp_path):
    """(what to open, keyword arguments, the exception type both engines raise)."""
    local = write_with_zarr(era5_like(), str(tmp_path / "era5.zarr"))
    return [
        ("nosuchprotocol://bucket/x.zarr", {}, ValueError),
        ("memory://storelike-missing/x.zarr", {}, FileNotFoundError),
        ("simplecache::memory://storelike-missing/x.zarr", {}, FileNotFoundError),
        (fsspec.get_mapper("memory://storelike-missing/x.zarr"), {}, FileNotFoundError),
        (fsspec.get_mapper(str(tmp_path / "missing.zarr")), {}, FileNotFoundError),
        ({}, {}, FileNotFoundError),
        ("memory://storelike-missing/x.zarr", {"storage_options": {}}, TypeError),
        (local, {"storage_options": {"anon": True}}, TypeError),
        (f"file://{local}", {"storage_options": {}}, TypeError),
        ({}, {"storage_options": {}}, TypeError),
        (fsspec.get_mapper("memory://storelike-missing/x.zarr"), {"storage_options": {}}, TypeError),
        (42, {}, TypeError),
    ]


def test_bad_inputs_raise_what_engine_zarr_raises(tmp_path):
    for target, kwargs, expected in _bad_inputs(tmp_path):
        for engine in ("zarrmax", "zarr"):
            extra = {"consolidated": False} if engine == "zarr" else {}
            with pytest.raises(expected):
                xr.open_dataset(target, engine=engine, **kwargs, **extra)


def test_fsspec_errors_say_what_was_opened():
    with pytest.raises(ValueError, match="Protocol not known: nosuchprotocol") as info:
        xr.open_dataset("nosuchprotocol://bucket/x.zarr", engine="zarrmax")
    assert info.value.__notes__ == ["while opening nosuchprotocol://bucket/x.zarr with fsspec"]


# -- storage_options for s3:// by s3fs's names -----------------------------------------------------------------


def test_s3fs_option_names_become_obstore_names():
    options = {"key": "AKIA", "secret": "S3CRET", "token": "TOKEN", "anon": 1, "region": "eu-west-1",
               "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}
    assert obstore_s3_options(options) == {
        "access_key_id": "AKIA", "secret_access_key": "S3CRET", "session_token": "TOKEN", "skip_signature": True,
        "region": "eu-west-1", "endpoint": "http://127.0.0.1:9000"}
    assert obstore_s3_options({"client_kwargs": {"region_name": "eu-west-1"}}) == {"region": "eu-west-1"}
    assert obstore_s3_options({"endpoint_url": "http://h", "endpoint": "http://h"}) == {"endpoint": "http://h"}


def test_s3fs_option_names_that_disagree_or_are_unknown_are_refused():
    with pytest.raises(ValueError, match=r"give secret \(s3fs's name\) and 'secret_access_key' \(obstore's\) "
                                         r"different values$"):
        obstore_s3_options({"secret": "S3CRET-ONE", "secret_access_key": "S3CRET-TWO"})
    with pytest.raises(ValueError, match=r"Got also \['verify'\]"):
        obstore_s3_options({"client_kwargs": {"verify": False}})


@pytest.mark.s3
def test_s3_url_with_s3fs_option_names(minio, bucket):
    prefix = f"s3fs-names-{uuid.uuid4().hex}.zarr"
    store = ObjectStore(minio.obstore(bucket, prefix))
    write_with_zarr(era5_like(), store)
    so = minio.storage_options()
    s3fs_names = {"key": so["access_key_id"], "secret": so["secret_access_key"],
                  "client_kwargs": {"endpoint_url": minio.endpoint, "region_name": "us-east-1"}}
    ours = xr.open_dataset(f"s3://{bucket}/{prefix}", engine="zarrmax", storage_options=s3fs_names, chunks={})
    oracle = xr.open_dataset(store, engine="zarr", consolidated=False, chunks={})
    assert_same_dataset(ours.compute(), oracle.compute())


# -- open_mfdataset ------------------------------------------------------------------------------------------


def _runs(n: int = 3) -> list[xr.Dataset]:
    """Consecutive pieces of one dataset along time, one store each."""
    full = era5_like(8 * n)
    return [full.isel(time=slice(8 * i, 8 * (i + 1))) for i in range(n)]


def _write_runs(root: str) -> list[str]:
    return [write_with_zarr(ds, f"{root}/run-{i}.zarr") for i, ds in enumerate(_runs())]


MF = {"combine": "nested", "concat_dim": "time", "data_vars": "all", "coords": "different", "compat": "equals",
      "join": "outer"}


def _mf(paths, engine, **kwargs):
    extra = {"consolidated": False} if engine == "zarr" else {}
    return xr.open_mfdataset(paths, engine=engine, **MF, **kwargs, **extra).compute()


def test_open_mfdataset_local_glob_and_lists(tmp_path):
    paths = _write_runs(str(tmp_path))
    (tmp_path / "run-notes.txt").write_text("not a store, and not matched")
    oracle = _mf(str(tmp_path / "run-*.zarr"), "zarr")
    assert oracle.sizes["time"] == 24
    for given in (str(tmp_path / "run-*.zarr"), paths, [Path(p) for p in paths]):
        assert_same_dataset(_mf(given, "zarrmax"), oracle)
    assert_same_dataset(_mf(paths, "zarrmax", parallel=True), oracle)
    assert glob(str(tmp_path / "run-*.zarr")) == glob(f"file://{tmp_path}/run-?.zarr") == sorted(paths)


def test_open_mfdataset_fsspec_glob(memory_url):
    """xarray expands a URL pattern for engine="zarr" only (into fsspec mappers); `glob` expands it for us."""
    _write_runs(memory_url)
    pattern = f"{memory_url}/run-*.zarr"
    oracle = _mf(pattern, "zarr")
    urls = glob(pattern)
    assert urls == [f"memory:///{memory_url.removeprefix('memory://')}/run-{i}.zarr" for i in range(3)]
    assert_same_dataset(_mf(urls, "zarrmax"), oracle)
    assert glob(f"{memory_url}/run-?.zarr") == urls
    cached = glob(f"simplecache::{pattern}")
    assert cached == [f"simplecache::{url}" for url in urls]
    assert_same_dataset(_mf(cached, "zarrmax"), oracle)
    # what engine="zarr" makes of the pattern (mappers) reads the same here too
    mappers = [fsspec.get_mapper(url) for url in urls]
    assert_same_dataset(_mf(mappers, "zarrmax"), oracle)


@pytest.mark.s3
def test_open_mfdataset_s3_glob(minio, bucket):
    root = f"mf-{uuid.uuid4().hex}"
    stores = [write_with_zarr(ds, ObjectStore(minio.obstore(bucket, f"{root}/a/run-{i}.zarr")))
              for i, ds in enumerate(_runs())]
    write_with_zarr(era5_like(8), ObjectStore(minio.obstore(bucket, f"{root}/b/other.zarr")))
    so = minio.storage_options()
    with request_counts() as counts:
        urls = xarray_zarrmax.glob(f"s3://{bucket}/{root}/*/run-?.zarr", storage_options=so)
    assert urls == [f"s3://{bucket}/{root}/a/run-{i}.zarr" for i in range(3)]
    assert counts.total("list") == 3  # the root, then each of its two children
    assert xarray_zarrmax.glob(f"s3://{bucket}/{root}/a/run-9.zarr", storage_options=so) == []
    oracle = _mf(stores, "zarr")
    assert_same_dataset(_mf(urls, "zarrmax", storage_options=so), oracle)
