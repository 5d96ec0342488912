"""Concurrent writers of the same shards lose nothing: conditional PUTs refuse a stale merge, which is read
and merged again after a lost race, a lost answer, a 409 or a cut connection; a task's merges run at once;
large shards go multipart, merges stay single PUTs."""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import xarray_zarrmax
from tests.support.compare import check_reads, s3_oracle
from tests.support.targets import counter
from tests.support.writers import (
    CONC,
    NWRITERS,
    base_for_concurrency,
    expected_after_concurrency,
    write_step,
)
from xarray_zarrmax import request_counts
from xarray_zarrmax.errors import ObjectChanged
from xarray_zarrmax.storage import LocalSink, ObstoreSink
from xarray_zarrmax.testing import MinioServer


def test_concurrent_partial_writers_lose_nothing_minio(minio: MinioServer, bucket: str) -> None:
    """16 threads each write one time step; 8 share each shard, so every write is a read-merge-write
    racing 7 others. Every value must be there."""
    url, so = f"s3://{bucket}/conc{next(counter)}.zarr", minio.storage_options()
    xarray_zarrmax.to_zarr(base_for_concurrency(), url, encoding={"v": CONC}, storage_options=so)
    start = threading.Barrier(NWRITERS)

    def run(t: int) -> None:
        start.wait()
        write_step(url, t, so)

    with ThreadPoolExecutor(NWRITERS) as pool:
        list(pool.map(run, range(NWRITERS)))
    check_reads(url, expected_after_concurrency(), oracle=s3_oracle(minio, url), storage_options=so)


def test_concurrent_partial_writers_lose_nothing_local_processes(tmp_path: Path) -> None:
    """The same from 4 processes of 4 threads each, into a local directory (locks across processes)."""
    target = str(tmp_path / "a.zarr")
    xarray_zarrmax.to_zarr(base_for_concurrency(), target, encoding={"v": CONC})
    steps = [list(range(i, NWRITERS, 4)) for i in range(4)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        pool.starmap(_write_steps_threaded, [(target, s) for s in steps])
    check_reads(target, expected_after_concurrency())


def _write_steps_threaded(target: str, steps: list[int]) -> None:
    with ThreadPoolExecutor(len(steps)) as pool:
        list(pool.map(lambda t: write_step(target, t, None), steps))


def test_stale_etag_is_refused_so_merges_cannot_lose_data(minio: MinioServer, bucket: str) -> None:
    """The interleaving that loses data without conditions, made deterministic: A reads, B writes, A writes.
    With If-Match on the ETag A read, A's PUT is refused (and then merged again); an unconditional PUT
    would have replaced B's write with A's stale merge. Measured here with the 16 writers of
    test_concurrent_partial_writers_lose_nothing_minio and the PUTs made unconditional: 10 to 13 of the 16
    time steps lost (3 runs each, twice), none with the conditions (zarr-python's to_zarr: 40 of 64 with 8
    writers, see DESIGN.md)."""
    from xarray_zarrmax.storage import s3_store_from_url

    sink = ObstoreSink(s3_store_from_url(f"s3://{bucket}/etag{next(counter)}", minio.storage_options()))
    from xarray_zarrmax.core.loop import run_sync

    run_sync(sink.put_async("k", b"original"))
    a_read = run_sync(sink.source._get_versioned("GET", "k", {}))
    run_sync(sink.put_async("k", b"B's write"))
    with pytest.raises(ObjectChanged):
        run_sync(sink.put_async("k", b"A's stale merge", {"e_tag": a_read.version}))
    with pytest.raises(ObjectChanged):  # If-None-Match: someone created it since A saw no object
        run_sync(sink.put_async("k", b"A's first write", "create"))
    assert bytes(run_sync(sink.source.get("k"))) == b"B's write"
    sink.update("k", lambda stored: bytes(stored) + b" + A")
    assert bytes(run_sync(sink.source.get("k"))) == b"B's write + A"


def test_update_retries_after_losing_a_race(tmp_path: Path, minio: MinioServer, bucket: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that lands between our read and our conditional PUT makes us read and merge again."""
    from xarray_zarrmax.core.loop import run_sync
    from xarray_zarrmax.storage import s3_store_from_url

    sink = ObstoreSink(s3_store_from_url(f"s3://{bucket}/race{next(counter)}", minio.storage_options()))
    run_sync(sink.put_async("k", b"0"))
    merges = []

    def merge(stored: Any) -> bytes:
        merges.append(bytes(stored))
        if len(merges) == 1:
            run_sync(sink.put_async("k", b"0 + other"))  # the other writer wins the race
        return bytes(stored) + b" + mine"

    sink.update("k", merge)
    assert merges == [b"0", b"0 + other"]
    assert bytes(run_sync(sink.source.get("k"))) == b"0 + other + mine"


def test_conditional_put_applied_but_reported_failed_is_merged_again(minio: MinioServer, bucket: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The server applied our conditional PUT, the connection broke before we heard: we read again, find
    our own write, merge the same values again and PUT once more. Nothing is doubled or lost."""
    from xarray_zarrmax.core.loop import run_sync
    from xarray_zarrmax.errors import RequestFailed
    from xarray_zarrmax.storage import s3_store_from_url

    sink = ObstoreSink(s3_store_from_url(f"s3://{bucket}/lost{next(counter)}", minio.storage_options()))
    run_sync(sink.put_async("k", b"ab"))
    original = ObstoreSink.put_async
    failed = []

    async def applied_then_broken(self: Any, key: str, data: bytes, mode: Any = None) -> None:
        await original(self, key, data, mode)
        if mode is not None and not failed:
            failed.append(key)
            raise RequestFailed(f"PUT {key!r} on {self.label} failed: HTTP error: error sending request", None)

    monkeypatch.setattr(ObstoreSink, "put_async", applied_then_broken)
    seen = []

    def set_second_letter(stored: Any) -> bytes:  # a merge: the same element set to the same value
        seen.append(bytes(stored))
        return bytes(stored)[:1] + b"X"

    sink.update("k", set_second_letter)
    assert failed == ["k"] and seen == [b"ab", b"aX"]
    assert bytes(run_sync(sink.source.get("k"))) == b"aX"


def test_a_likely_new_object_is_created_in_one_request_and_merged_where_it_exists(minio: MinioServer,
                                                                                    bucket: str) -> None:
    """``likely_new``: one PUT with If-None-Match and no read where the key is free; where another writer
    created the object, that PUT fails and the object is read and merged as usual, nothing lost; where the
    merge of nothing stores nothing, the object is read (one there must be merged, not skipped)."""
    from xarray_zarrmax.core.loop import run_sync
    from xarray_zarrmax.storage import s3_store_from_url

    sink = ObstoreSink(s3_store_from_url(f"s3://{bucket}/new{next(counter)}", minio.storage_options()))
    seen: list[bytes | None] = []

    def mine(stored: Any) -> bytes:
        seen.append(None if stored is None else bytes(stored))
        return (b"" if stored is None else bytes(stored)) + b"mine"

    with request_counts() as counts:
        sink.update("free", mine, likely_new=True)
    assert seen == [None] and (counts.total("get"), counts.total("put")) == (0, 1)
    assert bytes(run_sync(sink.source.get("free"))) == b"mine"

    run_sync(sink.put_async("taken", b"theirs + "))
    seen.clear()
    with request_counts() as counts:
        sink.update("taken", mine, likely_new=True)
    assert seen == [None, b"theirs + "] and (counts.total("get"), counts.total("put")) == (1, 2)
    assert bytes(run_sync(sink.source.get("taken"))) == b"theirs + mine"

    run_sync(sink.put_async("filled", b"theirs"))
    sink.update("filled", lambda stored: None if stored is None else bytes(stored) + b" cleared", likely_new=True)
    assert bytes(run_sync(sink.source.get("filled"))) == b"theirs cleared"


@pytest.mark.parametrize("likely_new", [True, False])
def test_a_conditional_put_answered_409_is_read_and_merged_again(minio: MinioServer, bucket: str, likely_new: bool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """AWS S3 answers a create-only PUT with 409 ConditionalRequestConflict while another conditional write of
    the key is in flight (obstore retries it for If-Match only): the merge is read and made again, not given up.
    Here the other writer's object lands with the 409."""
    from xarray_zarrmax.core.loop import run_sync
    from xarray_zarrmax.errors import RequestFailed
    from xarray_zarrmax.storage import s3_store_from_url

    sink = ObstoreSink(s3_store_from_url(f"s3://{bucket}/c409{next(counter)}", minio.storage_options()))
    original = ObstoreSink.put_async
    conflicts = []

    async def conflicting(self: Any, key: str, data: bytes, mode: Any = None) -> None:
        if mode is not None and not conflicts:
            conflicts.append(mode)
            await original(self, key, b"theirs + ")  # the write in flight beside ours
            raise RequestFailed(f"PUT {key!r} on {self.label} failed: Generic S3 error: "
                                "ConditionalRequestConflict", 409)
        await original(self, key, data, mode)

    monkeypatch.setattr(ObstoreSink, "put_async", conflicting)
    sink.update("k", lambda stored: (b"" if stored is None else bytes(stored)) + b"mine", likely_new=likely_new)
    assert conflicts == ["create"]
    assert bytes(run_sync(sink.source.get("k"))) == b"theirs + mine"


def test_merges_of_one_task_run_at_once_on_s3_and_each_failure_is_named(tmp_path: Path, minio: MinioServer,
                                                                        bucket: str) -> None:
    """A task's read-merge-writes are concurrent on S3 (two merges that each wait for the other would hang
    one after another), all of them run when one fails, and the error names the failed key."""
    from xarray_zarrmax.storage import Update, s3_store_from_url

    sink = ObstoreSink(s3_store_from_url(f"s3://{bucket}/many{next(counter)}", minio.storage_options()))
    both = threading.Barrier(2, timeout=10)

    def meeting(stored: Any) -> bytes:
        both.wait()  # BrokenBarrierError after 10 s where the merges run one after another
        return b"met"

    sink.update_many([Update("a", meeting, True), Update("b", meeting, False)], in_flight=2)
    done = []

    def fine(stored: Any) -> bytes:
        done.append(1)
        return b"fine"

    def broken(stored: Any) -> bytes:
        raise ValueError("this merge fails")

    from xarray_zarrmax.core.loop import run_sync

    for each in (sink, LocalSink(tmp_path)):  # concurrent, and one after another
        done.clear()
        with pytest.raises(ValueError, match="this merge fails") as info:
            each.update_many([Update("c", fine), Update("d", broken), Update("e", fine)], in_flight=3)
        assert "while merging into 'd'" in info.value.__notes__
        assert len(done) == 2
        assert [run_sync(each.source.get(k)) is not None for k in "cde"] == [True, False, True]


def test_put_faults_are_retried_and_merges_stay_exact(minio: MinioServer, bucket: str, toxiproxy: Any) -> None:
    """Responses cut short after the server applied the request (toxiproxy's limit_data on 30% of the
    connections): the PUT is sent again, and a conditional one that now meets its own earlier write (412)
    is read and merged again. Nothing is lost or doubled."""
    from datetime import timedelta

    name = f"write_{next(counter)}"
    endpoint = toxiproxy.proxy(name, minio.port)
    so = {**minio.storage_options(endpoint), "timeout": "2s", "connect_timeout": "1s",
          "retry_config": {"max_retries": 10, "retry_timeout": timedelta(seconds=20),
                           "backoff": {"init_backoff": timedelta(milliseconds=10),
                                       "max_backoff": timedelta(milliseconds=200), "base": 2}}}
    url = f"s3://{bucket}/faults{next(counter)}.zarr"
    xarray_zarrmax.to_zarr(base_for_concurrency(), url, encoding={"v": CONC}, storage_options=so)
    toxiproxy.add_toxic(name, "limit_data", toxicity=0.3, bytes=100)
    with request_counts() as counts:
        for t in range(NWRITERS):
            write_step(url, t, so)
    assert counts.total("put") >= NWRITERS
    direct = minio.storage_options()
    check_reads(url, expected_after_concurrency(), oracle=s3_oracle(minio, url), storage_options=direct)


def test_large_shards_go_multipart_merges_stay_single_part(minio: MinioServer, bucket: str) -> None:
    """Above ``multipart_threshold`` (lowered to 6 MiB here) a shard is sent as a multipart upload of
    ``split_size`` parts (MinIO's ETag of such an object ends in "-<parts>"); a conditional PUT (the merge of a
    partly written shard) stays one request (a plain ETag), whatever its size. Both read back exactly."""
    import obstore

    n, shard = 2_000_000, 1_000_000  # two shards of about 7.6 MiB (random int64: zstd cannot shrink them)
    values = np.random.default_rng(5).integers(0, 2**62, n, dtype="i8")
    ds = xr.Dataset({"v": (("i",), values)})
    url, so = f"s3://{bucket}/multipart{next(counter)}.zarr", minio.storage_options()
    store = minio.obstore(bucket, url.split("/", 3)[3])
    encoding = {"v": {"chunks": (125_000,), "shards": (shard,)}}
    with xarray_zarrmax.set_config(multipart_threshold=6 * 2**20, split_size=5 * 2**20):
        xarray_zarrmax.to_zarr(ds.chunk({"i": shard}), url, encoding=encoding, storage_options=so)
        etags = [obstore.head(store, f"v/c/{i}")["e_tag"].strip('"') for i in range(2)]
        assert [e.rsplit("-", 1)[-1] for e in etags] == ["2", "2"], etags  # 5 MiB + the rest
        new = np.random.default_rng(6).integers(0, 2**62, 499_990, dtype="i8")
        part = xr.Dataset({"v": (("i",), new)})  # a region inside shard 0: read, merged, PUT conditionally
        xarray_zarrmax.to_zarr(part, url, region={"i": slice(10, 500_000)}, storage_options=so)
        etag = obstore.head(store, "v/c/0")["e_tag"].strip('"')
        assert "-" not in etag and obstore.head(store, "v/c/0")["size"] > 6 * 2**20
    expected = ds.copy(deep=True)
    expected["v"][10:500_000] = new
    check_reads(url, expected, oracle=s3_oracle(minio, url), storage_options=so)


def test_local_put_never_lands_inside_a_merge(tmp_path: Path) -> None:
    """Whole-object puts run side by side (a shared lock on the directory), but a put of the object a merge is
    updating waits for the merge's rename: landing between the merge's read and its rename, it would be
    overwritten by the merge's older data and lost."""
    sink = LocalSink(tmp_path)
    sink.put("v/c/0", b"old")
    sink.put("v/c/1", b"other")
    merging, put_done = threading.Event(), threading.Event()

    def put_now() -> None:
        merging.wait()
        sink.put("v/c/0", b"put during the merge")
        put_done.set()

    def merge(stored: Any) -> bytes:
        merging.set()
        assert not put_done.wait(0.3), "a put landed while a merge of the same object was under way"
        return bytes(stored) + b"+merged"

    with ThreadPoolExecutor(1) as ex:
        pending = ex.submit(put_now)
        sink.update("v/c/0", merge)
        pending.result()
    assert (tmp_path / "v/c/0").read_bytes() == b"put during the merge"
    assert (tmp_path / "v/c/1").read_bytes() == b"other"
