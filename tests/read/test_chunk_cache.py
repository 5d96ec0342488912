"""The decoded-chunk cache (`read.chunk_cache`): bounded, least recently used first out, used only for the object
version its chunks were decoded from, on every store kind, with what it saves asserted in request counts."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.codecs import ZstdCodec

import xarray_zarrmax
from tests.support.changes import CASES, change_case, create_case, read_selections
from xarray_zarrmax import cache_info, clear_cache, request_counts, set_config
from xarray_zarrmax.gpu.device import HostDevice
from xarray_zarrmax.read import chunk_cache
from xarray_zarrmax.read.chunk_cache import DecodedChunks, object_id
from xarray_zarrmax.storage import LocalSource, local
from xarray_zarrmax.tuning import CHUNK_ENTRY_BYTES, RACY_WINDOW_NS

CAP = 64 * 2**20


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch):
    """An empty cache of 64 MiB for each test, and files old enough to be kept (the racy-file rule has its
    own test below)."""
    monkeypatch.setattr(local, "RACY_WINDOW_NS", 0)
    clear_cache()
    with set_config(cache_bytes=CAP):
        yield
    clear_cache()


def _cube(path, shape=(64, 32, 32), chunks=(8, 16, 16), shards=(32, 32, 32)) -> np.ndarray:
    group = zarr.open_group(str(path) if isinstance(path, os.PathLike | str) else path, mode="w", zarr_format=3)
    arr = group.create_array("v", shape=shape, chunks=chunks, shards=shards, dtype="f4",
                             compressors=[ZstdCodec(level=1)], dimension_names=["t", "y", "x"])
    data = np.random.default_rng(0).random(shape, dtype="f4")
    arr[:] = data
    return data


# -- the store itself --------------------------------------------------------------------------------------------


def test_never_above_its_cap_and_least_recently_used_first_out():
    cache = DecodedChunks()
    obj = ("file:///x", "v/c/0", None, None)
    cost = 800 + CHUNK_ENTRY_BYTES  # a chunk of 800 bytes and its entry
    with set_config(cache_bytes=3 * cost):
        for i in range(3):
            cache.keep(obj, "v1", (i,), np.zeros(100), whole=False)
        cache.lookup(obj, [(0,)])  # (0,) is now the most recently used
        cache.keep(obj, "v1", (3,), np.zeros(100), whole=False)
        info = cache.info()
        assert info.held_bytes == 3 * cost and info.entries == 3 and info.evictions == 1
        assert set(cache.lookup(obj, [(0,), (1,), (2,), (3,)])[1]) == {(0,), (2,), (3,)}  # (1,) went first
        cache.keep(obj, "v1", (9,), np.zeros(3 * cost // 8), whole=False)  # above the cap: not kept, none evicted
        assert cache.info().entries == 3


def test_one_object_never_holds_two_versions():
    cache = DecodedChunks()
    obj = ("file:///x", "v/c/0", None, None)
    with set_config(cache_bytes=CAP):
        cache.keep(obj, "old", (0,), np.zeros(4), whole=False)
        cache.keep(obj, "old", (1,), np.zeros(4), whole=False)
        cache.keep(obj, "new", (2,), np.ones(4), whole=False)
        version, found = cache.lookup(obj, [(0,), (1,), (2,)])
        assert version == "new" and list(found) == [(2,)]
        assert cache.info().invalidations == 2


def test_threads_keeping_and_looking_up_at_once_stay_under_the_cap():
    """8 threads keep (in part and whole, so evicted buffers are reused) and look up at once: never above the cap,
    and a chunk a reader got is never overwritten by a reuse while it holds it (each chunk is filled with its own
    coordinate, checked after the lookup)."""
    cache = DecodedChunks()
    cap = 50 * (8 * 64 + CHUNK_ENTRY_BYTES)
    errors = []

    def work(n: int) -> None:
        try:
            rng = np.random.default_rng(n)
            for i in range(2000):
                obj = ("s", f"k{rng.integers(20)}", None, None)
                if i % 2:
                    c = int(rng.integers(10))
                    cache.keep(obj, "v", (c,), np.full(int(rng.integers(60, 64)), float(c)), whole=bool(i % 3))
                else:
                    _, found = cache.lookup(obj, [(j,) for j in range(10)])
                    time.sleep(0)  # let the others keep (and reuse evicted buffers) meanwhile
                    for (c,), chunk in found.items():
                        assert (chunk == c).all(), f"chunk {c} overwritten while held"
                assert cache.info().held_bytes <= cap
        except Exception as err:  # surfaced in the main thread below
            errors.append(err)

    with set_config(cache_bytes=cap):
        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        info = cache.info()
    assert not errors, errors[:3]
    assert info.held_bytes == (sum(e.cost for e in cache._entries.values())
                               + info.remembered * CHUNK_ENTRY_BYTES) <= cap


def test_formats_met_at_once_by_threads_get_numbers_of_their_own():
    """An object's codec and shard format key its chunks as a number: two formats sharing one would serve one
    format's chunks to reads under the other. (A number taken from the table's length, which two threads can
    read alike, was not caught in three runs: the interleaving is too narrow to force; `itertools.count` is.)"""
    formats = [("codec", i) for i in range(5000)]
    got: list[dict] = [{} for _ in range(8)]

    def work(n: int) -> None:
        for f in np.random.default_rng(n).permutation(len(formats)):
            got[n][formats[f]] = object_id("s", "k", formats[f], None)[2]  # type: ignore[arg-type]

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can: the interleavings a race needs
    try:
        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert all(g == got[0] for g in got)  # equal formats, equal numbers
    assert len(set(got[0].values())) == len(formats)  # other formats, other numbers


def test_a_chunk_read_whole_is_kept_the_second_time_it_is_decoded():
    cache = DecodedChunks()
    obj = ("file:///x", "v/c/0", None, None)
    with set_config(cache_bytes=CAP):
        cache.keep(obj, "v1", (0,), np.zeros(100), whole=True)
        info = cache.info()
        assert (info.entries, info.remembered, info.held_bytes) == (0, 1, CHUNK_ENTRY_BYTES)
        cache.keep(obj, "v1", (0,), np.zeros(100), whole=True)
        info = cache.info()
        assert (info.entries, info.remembered, info.held_bytes) == (1, 0, 800 + CHUNK_ENTRY_BYTES)
        cache.keep(obj, "v1", (1,), np.zeros(100), whole=False)  # used in part: kept at once
        assert cache.info().entries == 2


def test_a_scan_of_whole_chunks_does_not_push_out_what_reads_come_back_to():
    cache = DecodedChunks()
    hot, scanned = ("s", "hot", None, None), ("s", "scan", None, None)
    cost = 800 + CHUNK_ENTRY_BYTES
    with set_config(cache_bytes=8 * cost):
        for i in range(4):
            cache.keep(hot, "v", (i,), np.zeros(100), whole=False)
        for i in range(1000):  # a scan 250 times the cap, each chunk once
            cache.keep(scanned, "v", (i,), np.zeros(100), whole=True)
        assert set(cache.lookup(hot, [(i,) for i in range(4)])[1]) == {(0,), (1,), (2,), (3,)}
        assert cache.info().held_bytes <= 8 * cost


def test_evicted_buffers_are_reused_unless_a_reader_holds_them():
    cache = DecodedChunks()
    obj = ("s", "k", None, None)
    with set_config(cache_bytes=2 * (800 + CHUNK_ENTRY_BYTES)):
        cache.keep(obj, "v", (0,), np.zeros(100), whole=False)
        cache.keep(obj, "v", (1,), np.zeros(100), whole=False)
        first = cache.lookup(obj, [(0,)])[1][(0,)]
        address = first.__array_interface__["data"][0]
        cache.lookup(obj, [(1,)])  # (0,) is now the least recently used
        cache.keep(obj, "v", (2,), np.ones(100), whole=False)  # evicts (0,), which ``first`` still holds
        assert (first == 0).all()
        reused = cache.lookup(obj, [(2,)])[1][(2,)]
        assert reused.__array_interface__["data"][0] != address
        del first, reused
        cache.lookup(obj, [(2,)])  # (1,) least recently used, and nobody holds it
        second_address = cache.lookup(obj, [(1,)])[1][(1,)].__array_interface__["data"][0]
        cache.lookup(obj, [(2,)])
        cache.keep(obj, "v", (3,), np.full(100, 3.0), whole=False)
        got = cache.lookup(obj, [(3,)])[1][(3,)]
        assert got.__array_interface__["data"][0] == second_address and (got == 3).all()
        assert not got.flags.writeable


# -- reads ---------------------------------------------------------------------------------------------------------


def test_thin_slabs_decode_each_chunk_once(tmp_path):
    """zarr-python #4306's workload: slabs thinner than a chunk decode each chunk once, not once a slab."""
    data = _cube(tmp_path / "c.zarr")
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="zarrmax", consolidated=False)
    oracle = xr.open_dataset(tmp_path / "c.zarr", engine="zarr", consolidated=False)
    with request_counts() as counts:
        for t in range(64):
            got = ds.v.isel(t=slice(t, t + 1)).values
            np.testing.assert_array_equal(got, oracle.v.isel(t=slice(t, t + 1)).values)
    chunks = (64 // 8) * 2 * 2
    assert counts.cache.misses == chunks  # each chunk decoded once
    assert counts.cache.hits == 64 * 4 - chunks
    np.testing.assert_array_equal(ds.v.values, data)
    info = cache_info()
    assert info.entries == chunks and info.held_bytes == 64 * 32 * 32 * 4 + chunks * CHUNK_ENTRY_BYTES <= info.cap_bytes


def test_a_repeated_read_sends_no_get_and_decodes_nothing(tmp_path):
    data = _cube(tmp_path / "c.zarr")
    for chunks in (None, {}):
        clear_cache()
        ds = xr.open_dataset(tmp_path / "c.zarr", engine="zarrmax", chunks=chunks, consolidated=False)
        first = ds.v.isel(t=slice(3, 20), x=slice(5, 30)).values
        with request_counts() as again:
            second = ds.v.isel(t=slice(3, 20), x=slice(5, 30)).values
        np.testing.assert_array_equal(first, data[3:20, :, 5:30])
        np.testing.assert_array_equal(second, first)
        assert again.total("get") == 0 and again.cache.misses == 0 and again.cache.hits == 3 * 2 * 2


def test_pointwise_reads_use_and_fill_the_cache(tmp_path):
    data = _cube(tmp_path / "c.zarr")
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="zarrmax", consolidated=False)
    points = {"t": xr.DataArray([0, 9, 63], dims="p"), "x": xr.DataArray([1, 20, 31], dims="p")}
    np.testing.assert_array_equal(ds.v.isel(points).values, data[[0, 9, 63], :, [1, 20, 31]])
    with request_counts() as again:
        np.testing.assert_array_equal(ds.v.isel(points).values, data[[0, 9, 63], :, [1, 20, 31]])
    assert again.total("get") == 0 and again.cache.hits > 0 and again.cache.misses == 0


def test_off_keeps_nothing_and_counts_nothing(tmp_path):
    _cube(tmp_path / "c.zarr")
    with set_config(cache_bytes=0):
        ds = xr.open_dataset(tmp_path / "c.zarr", engine="zarrmax", consolidated=False, cache=False)
        with request_counts() as counts:
            ds.v.values
            ds.v.values
    assert cache_info().entries == 0
    assert (counts.cache.hits, counts.cache.misses, counts.cache.revalidations) == (0, 0, 0)


def test_device_reads_neither_use_nor_fill_the_cache(tmp_path):
    """The device path decodes on the device: the cache (host memory) is not used; stated in docs/guide/gpu.md."""
    data = _cube(tmp_path / "c.zarr")
    on_device = xr.open_dataset(tmp_path / "c.zarr", engine="zarrmax", device=HostDevice(), consolidated=False,
                                cache=False)
    np.testing.assert_array_equal(on_device.v.values, data)
    assert cache_info().entries == 0
    for _ in range(2):  # chunks read whole are kept the second time they are decoded
        xr.open_dataset(tmp_path / "c.zarr", engine="zarrmax", consolidated=False).v.values
    with request_counts() as counts:
        np.testing.assert_array_equal(on_device.v.values, data)
    assert counts.total("get") > 0 and counts.cache.hits == 0


def test_a_recently_written_file_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "RACY_WINDOW_NS", 3600 * 10**9)  # everything was modified "just now"
    _cube(tmp_path / "c.zarr")
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="zarrmax", consolidated=False)
    ds.v.values
    assert cache_info().entries == 0


def test_a_lowered_cap_evicts_to_it(tmp_path):
    _cube(tmp_path / "c.zarr")
    for _ in range(2):  # chunks read whole are kept the second time they are decoded
        xr.open_dataset(tmp_path / "c.zarr", engine="zarrmax", consolidated=False).v.values
    assert cache_info().held_bytes == 64 * 32 * 32 * 4 + 32 * CHUNK_ENTRY_BYTES
    with set_config(cache_bytes=2**16):
        info = cache_info()
        assert info.held_bytes <= 2**16 and info.cap_bytes == 2**16


class _RewritingSource(LocalSource):
    """Rewrites the array the first time chunk ranges are asked for: after kept chunks were looked up."""

    def __init__(self, root) -> None:
        super().__init__(root)
        self.rewrites = 0

    def read_ranges(self, key, ranges, version=None):
        if self.rewrites == 0:
            self.rewrites += 1
            change_case(zarr.storage.LocalStore(self.root), "other-size")
        return super().read_ranges(key, ranges, version)


def test_a_partial_hit_on_an_object_that_changed_meanwhile_reads_every_chunk_afresh(tmp_path):
    path = tmp_path / "a.zarr"
    create_case(zarr.storage.LocalStore(path), "other-size")
    plain = xr.open_dataset(str(path), engine="zarrmax", consolidated=False)
    plain.v[0:8].values  # keeps chunks 0 and 1 of shard 0
    source = _RewritingSource(path)
    ds = xr.open_dataset(source, engine="zarrmax", consolidated=False)
    with set_config(full_shard_fraction=1.0):
        got = ds.v[0:16].values  # chunks 0-1 kept, 2-3 fetched: the object changes before they come
    assert source.rewrites == 1
    expected = xr.open_dataset(str(path), engine="zarr", consolidated=False).v[0:16].values
    np.testing.assert_array_equal(got, expected)  # all four from the new version, none kept from the old


# -- every store kind, the data changing between reads --------------------------------------------------------------


def _kept_requests(kind: str, counts) -> None:
    """What a read of chunks all kept costs on each store kind."""
    if kind == "memory":  # no versions: nothing is kept
        assert counts.cache.hits == 0
        return
    assert counts.cache.misses == 0 and counts.cache.hits > 0  # no chunk decoded
    # No chunk fetched: a GET is only a shard's index where every chunk read is a fill value (no chunk range
    # fetched against a kept index would prove it current: 8 entries and a crc32c), or an object that does not
    # exist (nothing). A chunk is 256 bytes.
    assert counts.total("bytes") <= counts.total("get") * (8 * 16 + 4)
    if kind == "minio":  # one conditional HEAD per object (304); local: a stat; Icechunk: its snapshot, nothing
        assert counts.total("head") == counts.cache.revalidations > 0
    else:
        assert counts.total("head") == 0


@pytest.mark.parametrize("case", [*CASES, "appended"])
def test_cached_reads_after_a_change_match_engine_zarr(store_factory, case):
    written = store_factory.new()
    create_case(written.store, "other-size" if case == "appended" else case)
    written.finish()
    lazy = xr.open_dataset(written.target, engine="zarrmax", **written.open_kwargs)
    oracle = xr.open_dataset(written.oracle_store, engine="zarr", consolidated=False)
    first = read_selections(lazy)
    read_selections(lazy)  # chunks read whole are kept the second time they are decoded
    with request_counts() as again:
        second = read_selections(lazy)
    for a, b, c in zip(first, second, read_selections(oracle), strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, c)
    _kept_requests(store_factory.kind, again)

    store = written.rewrite()
    if case == "appended":  # the array grows: its last shard is rewritten, a new one added
        arr = zarr.open_array(store, path="v", mode="r+")
        arr.resize((80, 8))
        arr[60:] = np.arange(20 * 8.0).reshape(20, 8)
    else:
        change_case(store, case)
    written.finish()

    # Both engines' Datasets opened before the change read it alike (an Icechunk session: its snapshot), and
    # new ones read the new data.
    for a, b in zip(read_selections(lazy), read_selections(oracle), strict=True):
        np.testing.assert_array_equal(a, b)
    fresh = xr.open_dataset(written.target, engine="zarrmax", **written.open_kwargs)
    oracle_now = xr.open_dataset(written.oracle_store, engine="zarr", consolidated=False)
    for a, b in zip(read_selections(fresh), read_selections(oracle_now), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(fresh.v.values, oracle_now.v.values)


def test_each_dask_worker_process_has_its_own_cache(tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    data = _cube(tmp_path / "c.zarr")
    monkeypatch.setenv("XARRAY_ZARRMAX_CACHE_BYTES", str(CAP))  # the workers' processes start with it
    time.sleep(RACY_WINDOW_NS / 1e9)  # the workers trust a file only once it is older than the racy window
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, distributed.Client(cluster) as client:
        ds = xr.open_dataset(tmp_path / "c.zarr", engine="zarrmax", chunks={}, consolidated=False)
        for _ in range(3):
            np.testing.assert_array_equal(ds.v.compute().values, data)
        infos = client.run(xarray_zarrmax.cache_info)
    assert sum(i.hits for i in infos.values()) > 0  # the second and third computes found their chunks
    assert all(0 < i.held_bytes <= i.cap_bytes == CAP for i in infos.values() if i.entries)


@pytest.mark.s3
def test_load_async_uses_and_fills_the_cache(minio, bucket):
    """`Dataset.load_async` reads on the I/O loop (`read_selection_async`): kept chunks serve it too, each
    object proven unchanged by one conditional HEAD."""
    import asyncio

    store = zarr.storage.ObjectStore(minio.obstore(bucket, "cache-async.zarr"))
    data = _cube(store)
    url = f"s3://{bucket}/cache-async.zarr"
    opened = {"engine": "zarrmax", "consolidated": False, "cache": False,
              "storage_options": minio.storage_options()}
    first = asyncio.run(xr.open_dataset(url, **opened).load_async())
    asyncio.run(xr.open_dataset(url, **opened).load_async())  # whole chunks: kept the second time decoded
    with request_counts() as again:
        second = asyncio.run(xr.open_dataset(url, **opened).load_async())
    np.testing.assert_array_equal(first.v.values, data)
    np.testing.assert_array_equal(second.v.values, data)
    assert again.cache.hits == 32 and again.cache.misses == 0
    assert again.total("head") == again.cache.revalidations == 2  # one per shard


def test_a_new_shard_layout_over_unchanged_shard_files_is_read_afresh(tmp_path):
    """Found by an adversarial review: only zarr.json changes (shards of 4 chunks become shards of 2), the shard
    files stay as they are, so their versions hold; a chunk kept at place (0,) of the old layout is other bytes
    under the new index. The shard format is part of what keys a kept chunk."""
    import json

    from zarr.codecs import BytesCodec, ShardingCodec

    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=3)
    sharding = ShardingCodec(chunk_shape=(2,), codecs=[BytesCodec()], index_codecs=[BytesCodec()])  # no crc32c
    group.create_array("v", shape=(8,), chunks=(4,), serializer=sharding, compressors=None, dtype="i4",
                       dimension_names=["x"],
                       fill_value=-1)[:] = np.arange(8, dtype="i4")
    for _ in range(2):  # keeps the 4 chunks (read whole: the second time they are decoded)
        np.testing.assert_array_equal(xr.open_dataset(tmp_path / "s.zarr", engine="zarrmax", consolidated=False)
                                      .v.values, np.arange(8))
    assert cache_info().entries == 4
    meta_path = tmp_path / "s.zarr" / "v" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["chunk_grid"]["configuration"]["chunk_shape"] = [2]  # the shard shape
    meta_path.write_text(json.dumps(meta))
    ours = xr.open_dataset(tmp_path / "s.zarr", engine="zarrmax", consolidated=False).v.values
    theirs = xr.open_dataset(tmp_path / "s.zarr", engine="zarr", consolidated=False).v.values
    np.testing.assert_array_equal(ours, theirs)


# -- found by an adversarial review of the admission rule and buffer reuse -------------------------------------------


def test_two_obstore_memory_stores_never_serve_each_others_chunks():
    """Every obstore MemoryStore is labelled alike and numbers its ETags from 0: keyed by label, the second
    store's reads got the first one's chunks. Only stores whose label names one store are cached."""
    from obstore.store import MemoryStore
    from zarr.storage import ObjectStore

    def make(value: float) -> MemoryStore:
        store = MemoryStore()
        xr.Dataset({"v": (("x", "y"), np.full((4, 4), value))}).to_zarr(ObjectStore(store), mode="w",
                                                                         consolidated=False, zarr_format=3)
        return store

    first, second = make(1.0), make(2.0)
    for store in (first, first, second, second):
        ours = xr.open_dataset(store, engine="zarrmax", consolidated=False).v.values
        theirs = xr.open_dataset(ObjectStore(store, read_only=True), engine="zarr", consolidated=False).v.values
        np.testing.assert_array_equal(ours, theirs)
    assert cache_info().entries == 0


@pytest.fixture
def http_root(tmp_path):
    """A folder served over HTTP with the weakest validator a server may send: the file's size as its ETag
    (nginx and Apache send mtime seconds and size, alike for a rewrite of the same size within a second)."""
    import re
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class SizeETags(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def log_message(self, *args) -> None:
            pass

        def _serve(self, body: bool) -> None:
            path = self.translate_path(self.path)
            if not os.path.isfile(path):
                self.send_error(404)
                return
            data = open(path, "rb").read()  # noqa: SIM115
            etag = f'"{len(data):x}"'
            if self.headers.get("If-None-Match") == etag:
                self.send_response(304)
                self.send_header("ETag", etag)
                self.end_headers()
                return
            if self.headers.get("If-Match") not in (None, etag):
                self.send_response(412)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            start, stop = 0, len(data)
            wanted = re.match(r"bytes=(\d*)-(\d*)", self.headers.get("Range") or "")
            if wanted:
                a, b = wanted.groups()
                start, stop = (max(len(data) - int(b), 0), len(data)) if a == "" else (
                    int(a), min(int(b) + 1 if b else len(data), len(data)))
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
            else:
                self.send_response(200)
            self.send_header("ETag", etag)
            self.send_header("Content-Length", str(stop - start))
            self.end_headers()
            if body:
                self.wfile.write(data[start:stop])

        def do_GET(self) -> None:
            self._serve(True)

        def do_HEAD(self) -> None:
            self._serve(False)

    server = ThreadingHTTPServer(("127.0.0.1", 0), SizeETags)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_an_http_servers_etags_key_no_cache(http_root):
    """An HTTP server's ETags are whatever it makes them: a rewrite of the same size kept its ETag, and the
    kept chunks (and the cached shard index) were served for good."""
    from obstore.store import HTTPStore
    from zarr.storage import ObjectStore

    root, url = http_root

    def write(value: float) -> None:
        xr.Dataset({"v": (("x",), np.full(8, value))}).to_zarr(root / "a.zarr", mode="w", consolidated=True,
                                                              zarr_format=3, encoding={"v": {"compressors": None}})

    write(1.0)
    store = HTTPStore.from_url(f"{url}/a.zarr", client_options={"allow_http": True})
    opened = xr.open_dataset(store, engine="zarrmax", consolidated=True)
    for _ in range(2):
        np.testing.assert_array_equal(xr.open_dataset(store, engine="zarrmax", consolidated=True).v.values, 1.0)
    write(2.0)  # the same size: the same ETag
    theirs = xr.open_dataset(ObjectStore(store, read_only=True), engine="zarr", consolidated=True).v.values
    np.testing.assert_array_equal(theirs, 2.0)
    np.testing.assert_array_equal(xr.open_dataset(store, engine="zarrmax", consolidated=True).v.values, theirs)
    np.testing.assert_array_equal(opened.v.values, theirs)  # opened before the rewrite
    assert cache_info().entries == 0
    # nor may its versions key the shard index cache (within one open): they need not change with the object
    from xarray_zarrmax.storage.obstore import ObstoreSource

    got = asyncio.run(ObstoreSource(store).get_prefix("zarr.json", 16))
    assert got is not None and got.version == f'"{(root / "a.zarr" / "zarr.json").stat().st_size:x}"'
    assert not got.cacheable


def test_a_lowered_cap_holds_while_threads_keep(tmp_path):
    """`cache_info` evicted to a lowered cap and reported under two acquisitions of the lock: a keep begun under
    the old cap inserted between them, and the report was above the cap."""
    _cube(tmp_path / "c.zarr", shape=(40, 48, 36), chunks=(8, 16, 12), shards=(16, 32, 36))
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="zarrmax", consolidated=False, cache=False)
    stop = threading.Event()
    errors: list[BaseException] = []

    def read(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                t = int(rng.integers(0, 39))
                ds.v.isel(t=slice(t, t + 1)).values  # chunks used in part: kept at once
        except BaseException as err:  # surfaced below
            errors.append(err)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    threads = [threading.Thread(target=read, args=(k,)) for k in range(6)]
    try:
        with set_config(cache_bytes=8 << 20):  # the readers' cap: small enough to evict all along
            for t in threads:
                t.start()
            deadline = time.monotonic() + 8  # the old code failed after 0.3 to 11 s
            while time.monotonic() < deadline:
                with set_config(cache_bytes=200_000):
                    for _ in range(20):
                        info = cache_info()
                        assert info.held_bytes <= info.cap_bytes, info
    finally:
        stop.set()
        for t in threads:
            t.join()
        sys.setswitchinterval(interval)
    assert not errors, errors[:1]


def test_a_cap_turned_off_lets_go_of_what_is_kept_at_the_next_read(tmp_path):
    _cube(tmp_path / "c.zarr")
    ds = xr.open_dataset(tmp_path / "c.zarr", engine="zarrmax", consolidated=False, cache=False)
    ds.v.isel(t=slice(0, 3)).values
    assert chunk_cache.chunks.held_bytes > 0
    with set_config(cache_bytes=0):
        ds.v.isel(t=slice(0, 3)).values
        assert chunk_cache.chunks.held_bytes == 0  # not held until someone asks cache_info


def test_a_child_forked_during_a_copy_gets_the_whole_cap():
    """A child forked while a thread copies into the cache inherited the room reserved for that copy, and never
    got it back (the PyTorch DataLoader pattern: threads reading, then workers forked)."""
    started, release = threading.Event(), threading.Event()

    class SlowCopy(np.ndarray):
        def __array_function__(self, func, types, args, kwargs):
            if func is np.copyto:
                started.set()
                release.wait()
            return super().__array_function__(func, types, args, kwargs)

    cache = chunk_cache.chunks
    with set_config(cache_bytes=1 << 20):
        slow = np.zeros(120_000).view(SlowCopy)
        copying = threading.Thread(target=cache.keep, args=(("s", "k", 0), "v1", (0,), slow), kwargs={"whole": False})
        copying.start()
        started.wait()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: only this thread survives
            try:
                for i in range(10):
                    cache.keep(("s", "o", 0), "v1", (i,), np.full(10_000, float(i)), whole=False)
                os.write(write, f"{cache._reserved} {cache_info().entries}".encode())
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        release.set()
        copying.join()
        reserved, entries = map(int, os.read(read, 100).split())
    assert (reserved, entries) == (0, 10)


def test_a_repeated_read_of_many_small_chunks_is_kept(tmp_path):
    """Remembered keys were held to a sixteenth of the cap: 2,000 chunks of 1 KiB read whole again and again
    under a 4 MiB cap (they all fit) were never kept."""
    arr = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=3).create_array(
        "v", shape=(2000, 256), chunks=(1, 256), dtype="f4", compressors=[ZstdCodec(level=1)],
        dimension_names=["t", "x"])
    arr[:] = np.random.default_rng(1).random((2000, 256), dtype="f4")
    with set_config(cache_bytes=4 << 20):
        for _ in range(2):  # the first read remembers, the second keeps
            xr.open_dataset(tmp_path / "s.zarr", engine="zarrmax", consolidated=False, cache=False).v.values
        with request_counts() as third:
            xr.open_dataset(tmp_path / "s.zarr", engine="zarrmax", consolidated=False, cache=False).v.values
    assert third.cache.hits == 2000 and third.cache.misses == 0
