"""Local reads of whole objects: uncompressed chunks read straight into the output (one memory pass), and
what every local read does when a file is truncated or replaced while it is being read: an error or the
right answer, never a crash (no memory mapping: a truncated mapping would kill the process with SIGBUS)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.codecs import ZstdCodec

import xarray_zarrmax
from xarray_zarrmax import CorruptDataError, StoreAccessError, request_counts

N, CHUNK = 4_000_000, 1_000_000  # 8 MB chunks of int64: a read takes long enough to race with a writer


def _write(path: Path, compressed: bool | str) -> np.ndarray:
    """``compressed="incompressible"``: random values, which zstd stores as raw blocks (`zstd_raw`)."""
    if compressed == "incompressible":
        values = np.random.default_rng(1).integers(-(2**63), 2**63 - 1, size=N, dtype="i8")
    else:
        values = np.arange(N, dtype="i8")
    group = zarr.open_group(path, mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(N,), chunks=(CHUNK,), dtype="i8", dimension_names=["x"],
                             compressors=[ZstdCodec(level=1)] if compressed else None)
    arr[:] = values
    return values


def _open(path: Path) -> xr.Dataset:
    return xr.open_dataset(path, engine="zarrmax", consolidated=False)


@pytest.mark.parametrize("dask", [False, True])
def test_uncompressed_chunks_are_read_straight_into_the_output(tmp_path, monkeypatch, dask):
    values = _write(tmp_path / "u.zarr", compressed=False)
    os.remove(tmp_path / "u.zarr" / "v" / "c" / "2")  # a missing chunk reads as the fill value
    values[2 * CHUNK:3 * CHUNK] = 0
    calls = []
    real = xarray_zarrmax.storage.local.LocalSource.read_into
    monkeypatch.setattr(xarray_zarrmax.storage.local.LocalSource, "read_into",
                        lambda self, key, out: calls.append(key) or real(self, key, out))
    ds = xr.open_dataset(tmp_path / "u.zarr", engine="zarrmax", consolidated=False, chunks={} if dask else None)
    with request_counts() as counts:
        got = ds.v.values
    np.testing.assert_array_equal(got, values)
    np.testing.assert_array_equal(got, xr.open_dataset(tmp_path / "u.zarr", engine="zarr").v.values)
    assert sorted(calls) == [f"v/c/{i}" for i in range(4)]  # every chunk through the one-pass read
    assert counts.total("get") == 3 and counts.total("bytes") == 3 * CHUNK * 8  # each present chunk, once


def test_partial_chunk_reads_keep_the_buffered_path(tmp_path, monkeypatch):
    values = _write(tmp_path / "u.zarr", compressed=False)
    monkeypatch.setattr(xarray_zarrmax.storage.local.LocalSource, "read_into",
                        lambda *a: pytest.fail("a partial chunk must not be read into the output whole"))
    np.testing.assert_array_equal(_open(tmp_path / "u.zarr").v[10:CHUNK + 20].values, values[10:CHUNK + 20])


def test_uncompressed_chunk_of_the_wrong_size_is_an_error(tmp_path):
    _write(tmp_path / "u.zarr", compressed=False)
    with open(tmp_path / "u.zarr" / "v" / "c" / "1", "r+b") as f:
        f.truncate(CHUNK * 8 - 3)
    with pytest.raises(CorruptDataError, match=r"array 'v', key 'v/c/1' on file://.*holds 7999997 bytes, "
                                               r"expected 8000000"):
        _open(tmp_path / "u.zarr").v.values


def test_truncated_while_read_into_the_output_is_an_error(tmp_path, monkeypatch):
    _write(tmp_path / "u.zarr", compressed=False)
    chunk_file = tmp_path / "u.zarr" / "v" / "c" / "0"
    real = xarray_zarrmax.storage.local._pread_into

    def truncate_then_read(fd: int, buf: np.ndarray, offset: int) -> int:
        if os.fstat(fd).st_ino == chunk_file.stat().st_ino:  # the chunk, after its size was checked
            os.truncate(chunk_file, CHUNK)
        return real(fd, buf, offset)

    monkeypatch.setattr(xarray_zarrmax.storage.local, "_pread_into", truncate_then_read)
    with pytest.raises(CorruptDataError, match=r"key 'v/c/0' .* read 1000000 of 8000000 bytes; the file was "
                                               r"truncated while it was read"):
        _open(tmp_path / "u.zarr").v[:CHUNK].values


@pytest.mark.parametrize("compressed", [False, True, "incompressible"])
def test_files_truncated_and_replaced_during_reads_give_errors_or_right_answers(tmp_path, compressed):
    values = _write(tmp_path / "r.zarr", compressed)
    chunk_file = tmp_path / "r.zarr" / "v" / "c" / "1"
    original = chunk_file.read_bytes()
    replacement = tmp_path / "replacement"
    stop = threading.Event()

    def writer() -> None:  # in place: truncate, then restore; and atomically: replace with the same bytes
        while not stop.is_set():
            with open(chunk_file, "r+b") as f:
                f.truncate(len(original) // 3)
                time.sleep(0.001)
                f.seek(0)
                f.write(original)
            replacement.write_bytes(original)
            os.replace(replacement, chunk_file)

    thread = threading.Thread(target=writer)
    thread.start()
    outcomes = {"right": 0, "error": 0}
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                got = _open(tmp_path / "r.zarr").v[CHUNK:2 * CHUNK].values
            except (CorruptDataError, StoreAccessError):  # truncated, or rewritten 3 times while read
                outcomes["error"] += 1
                continue
            np.testing.assert_array_equal(got, values[CHUNK:2 * CHUNK])  # never part of a truncated file
            outcomes["right"] += 1
    finally:
        stop.set()
        thread.join()
    assert outcomes["right"] + outcomes["error"] > 5, outcomes


@pytest.mark.parametrize("compressed", [False, True])
def test_a_chunk_key_that_became_a_directory_reads_as_missing_like_engine_zarr(tmp_path, compressed):
    path = tmp_path / "d.zarr"
    codecs = [ZstdCodec(level=1)] if compressed else None
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("v", shape=(6, 4), chunks=(6, 4), dtype="f8", fill_value=-1.0, dimension_names=["t", "x"],
                       compressors=codecs)[...] = 1.0
    ours = xr.open_dataset(path, engine="zarrmax", consolidated=False)
    theirs = xr.open_dataset(path, engine="zarr", consolidated=False)
    # rewritten under the open Datasets with one more dimension: the key v/c/0/0 is now a directory
    group.create_array("v", shape=(6, 4, 2), chunks=(6, 4, 1), dtype="f8", fill_value=-1.0, overwrite=True,
                       dimension_names=["t", "x", "y"], compressors=codecs)[...] = 2.0
    assert (path / "v" / "c" / "0" / "0").is_dir()
    for sel in (slice(None), slice(1, 3)):  # whole chunk (read into the output when uncompressed), and part
        np.testing.assert_array_equal(ours.v[sel].values, theirs.v[sel].values)
        np.testing.assert_array_equal(ours.v[sel].values, -1.0)  # a missing chunk: the fill value


class _CountingBatches:
    """Stands in for `run_batches`: runs each batch here and counts them."""

    def __init__(self) -> None:
        self.jobs = 0

    def __call__(self, fn, batches):  # noqa: ANN001, ANN204
        self.jobs += len(batches)
        for b in batches:
            fn(b)


def test_local_reads_size_their_jobs_by_the_chunks_they_decode(tmp_path, monkeypatch):
    # A map through many shards decodes two small chunks per shard: a job per shard (sized as if each shard
    # were read whole) cost more in hand-offs and GIL contention than the decode. Jobs are about JOB_BYTES of
    # the chunks decoded; a read decoding less runs in the calling thread.
    import xarray_zarrmax.read.fetch as fetch
    import xarray_zarrmax.read.local_reads as local_reads

    values = np.arange(64 * 1000 * 64, dtype="f4").reshape(64, 1000, 64)
    group = zarr.open_group(tmp_path / "s.zarr", mode="w", zarr_format=3)
    arr = group.create_array("v", shape=values.shape, chunks=(8, 1000, 2), shards=(64, 1000, 4), dtype="f4",
                             dimension_names=["t", "y", "x"], compressors=[ZstdCodec(level=1)])
    arr[...] = values  # 16 shards of 16 chunks of 64 kB
    pool = _CountingBatches()
    for module in (fetch, local_reads):  # many objects (fetch) and one shard in pieces (local_reads)
        monkeypatch.setattr(module, "run_batches", pool)
        monkeypatch.setattr(module, "JOB_BYTES", 200_000)
    with xarray_zarrmax.set_config(threads=2):
        ds = _open(tmp_path / "s.zarr")
        np.testing.assert_array_equal(ds.v[3].values, values[3])  # 16 shards x 2 chunks: 2 MB decoded
        assert pool.jobs == 11  # not one per shard (16)
        np.testing.assert_array_equal(ds.v[3, :, :6].values, values[3, :, :6])  # 2 shards, 3 chunks: 192 kB
        assert pool.jobs == 11  # in this thread
        np.testing.assert_array_equal(ds.v.values, values)  # every chunk: 82 jobs' worth, one per shard at most
        assert pool.jobs == 11 + 16
    with xarray_zarrmax.set_config(threads=1):
        np.testing.assert_array_equal(_open(tmp_path / "s.zarr").v.values, values)
        assert pool.jobs == 11 + 16  # one thread: never the pool


@pytest.mark.parametrize("threads", [1, 2])
def test_each_local_object_is_decoded_before_the_next_is_read(tmp_path, monkeypatch, threads):
    # With one thread, a read of many objects fetched them all before decoding any: every compressed object
    # in memory at once (512 MiB of fresh buffers for a 512 MiB array, 3x slower than reading and decoding
    # each in turn). Per thread, reads and decodes must alternate.
    from xarray_zarrmax.codecs.decode import ChunkCodec
    from xarray_zarrmax.storage import OpenedFile

    values = _write(tmp_path / "c.zarr", compressed=True)
    events: list[tuple[int, str]] = []
    read, decode, decode_into = OpenedFile.read, ChunkCodec.decode, ChunkCodec.decode_into

    def reading(self, start, stop):
        if self.key.startswith("v/c/"):  # data, not metadata
            events.append((threading.get_ident(), "read"))
        return read(self, start, stop)

    def decoding(self, raw, where):
        events.append((threading.get_ident(), "decode"))
        return decode(self, raw, where)

    def decoding_into(self, raw, out, where):
        events.append((threading.get_ident(), "decode"))
        return decode_into(self, raw, out, where)

    monkeypatch.setattr(OpenedFile, "read", reading)
    monkeypatch.setattr(ChunkCodec, "decode", decoding)
    monkeypatch.setattr(ChunkCodec, "decode_into", decoding_into)
    with xarray_zarrmax.set_config(threads=threads):
        np.testing.assert_array_equal(_open(tmp_path / "c.zarr").v.values, values)
    assert sum(what == "read" for _, what in events) == N // CHUNK
    for thread in {t for t, _ in events}:
        mine = [what for t, what in events if t == thread]
        assert mine == ["read", "decode"] * (len(mine) // 2), mine


def test_compressed_whole_chunks_skip_the_general_fetch(tmp_path, monkeypatch):
    # Whole unsharded chunks read locally go file -> buffer -> decode into the output, with no coroutine,
    # budget or work item between (about a quarter of the CPU of a 0.8 MB-chunk read, docs/dev/performance-analysis.md).
    import xarray_zarrmax.read.fetch as fetch

    values = _write(tmp_path / "c.zarr", compressed=True)
    os.remove(tmp_path / "c.zarr" / "v" / "c" / "1")  # a missing chunk reads as the fill value
    values[CHUNK:2 * CHUNK] = 0
    monkeypatch.setattr(fetch, "_fetch_object", lambda *a, **k: pytest.fail("whole chunks took the general path"))
    ds = _open(tmp_path / "c.zarr")
    with request_counts() as counts:
        got = ds.v.values
    np.testing.assert_array_equal(got, values)
    np.testing.assert_array_equal(got, xr.open_dataset(tmp_path / "c.zarr", engine="zarr").v.values)
    assert counts.total("get") == 3  # each present chunk, once


@pytest.mark.parametrize("compressed", [True, "incompressible"])
@pytest.mark.parametrize("changes", [1, 3])
def test_a_chunk_rewritten_while_read_is_read_again_then_refused(tmp_path, monkeypatch, changes, compressed):
    from xarray_zarrmax.errors import ObjectChanged
    from xarray_zarrmax.storage import OpenedFile

    values = _write(tmp_path / "c.zarr", compressed=compressed)
    check, seen = OpenedFile.check_unchanged, []

    def changing(self):
        if self.key == "v/c/2" and len(seen) < changes:
            seen.append(self.key)
            raise ObjectChanged(self.key)  # what the check raises when the file's size or times moved
        return check(self)

    monkeypatch.setattr(OpenedFile, "check_unchanged", changing)
    if changes < 3:
        np.testing.assert_array_equal(_open(tmp_path / "c.zarr").v.values, values)
        assert seen == ["v/c/2"] * changes
    else:
        with pytest.raises(StoreAccessError, match=r"array 'v', key 'v/c/2' on file://.* changed 3 times while it "
                                                   r"was being read: a writer is rewriting it"):
            _open(tmp_path / "c.zarr").v.values


@pytest.mark.parametrize("compressed", [False, True, "incompressible"])
def test_short_reads_are_continued(tmp_path, monkeypatch, compressed):
    # preadv may return fewer bytes than asked before the end of a file (signals, some file systems).
    values = _write(tmp_path / "c.zarr", compressed=compressed)
    real, calls = os.preadv, []

    def short(fd, buffers, offset):  # at most 100 kB a call, whatever the buffers
        calls.append(offset)
        views, room = [], 100_000
        for buf in buffers:
            view = memoryview(buf).cast("B")
            views.append(view[:room])
            room -= len(views[-1])
            if not room:
                break
        return real(fd, views, offset)

    monkeypatch.setattr(xarray_zarrmax.storage.local.os, "preadv", short)
    np.testing.assert_array_equal(_open(tmp_path / "c.zarr").v.values, values)
    assert len(calls) > 4 * 8  # more than one call per chunk: each chunk came in pieces


def _one_shard(path: Path) -> np.ndarray:
    """One 64-chunk shard of 8 kB zstd chunks (int64): a read of it is one object, decoded in batches."""
    values = np.arange(64 * 1000, dtype="i8")
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("v", shape=values.shape, chunks=(1000,), shards=(64_000,), dtype="i8", dimension_names=["x"],
                       compressors=[ZstdCodec(level=1)])[:] = values
    return values


@pytest.mark.parametrize("bad", [0, 63])  # the first batch, or the last
def test_a_corrupt_chunk_in_a_shard_decoded_on_the_pool_is_an_error(tmp_path, monkeypatch, bad):
    import xarray_zarrmax.read.fetch as fetch
    import xarray_zarrmax.read.local_reads as local_reads
    from xarray_zarrmax.codecs.decode import ChunkCodec

    _one_shard(tmp_path / "s.zarr")
    monkeypatch.setattr(fetch, "JOB_BYTES", 64_000)
    monkeypatch.setattr(local_reads, "JOB_BYTES", 64_000)
    decode_into = ChunkCodec.decode_into

    def failing(self, raw, out, where):
        if where.endswith(f"chunk ({bad},)"):
            raise CorruptDataError(f"{where}: spoiled on purpose")
        return decode_into(self, raw, out, where)

    monkeypatch.setattr(ChunkCodec, "decode_into", failing)
    with xarray_zarrmax.set_config(threads=2), pytest.raises(CorruptDataError, match="spoiled on purpose"):
        _open(tmp_path / "s.zarr").v.values  # noqa: B018
    monkeypatch.setattr(ChunkCodec, "decode_into", decode_into)
    with xarray_zarrmax.set_config(threads=2):  # the pool is not left stuck
        np.testing.assert_array_equal(_open(tmp_path / "s.zarr").v.values, np.arange(64 * 1000))
