"""Large chunks encoded into reused buffers (xarray_zarrmax.core.buffers): what is written reads back identically
with engine="zarr", a buffer is reused only once its bytes were written, and a released buffer cannot be read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.codecs import BytesCodec, ZstdCodec

import xarray_zarrmax
from tests.support.targets import write
from xarray_zarrmax import set_config
from xarray_zarrmax.codecs import encode as shard_encode
from xarray_zarrmax.core import buffers as _buffers
from xarray_zarrmax.core.buffers import BufferPool, Reused

#: 512 KiB chunks of float64, above shard_encode.POOLED_FROM_BYTES
CHUNK = 65_536


def _values(n_chunks: int, compressible: bool) -> np.ndarray:
    """Values that differ in every chunk: a buffer reused too early would show as another chunk's values."""
    rng = np.random.default_rng(n_chunks)
    if compressible:
        x = np.arange(n_chunks * CHUNK, dtype="f8")
        return np.round(np.sin(x / 3000.0) * 100 + x // CHUNK, 2)
    return rng.normal(size=n_chunks * CHUNK)


def _check_both_engines(target: Any, expected: xr.Dataset, **kwargs: Any) -> None:
    oracle = kwargs.pop("oracle", None)
    for engine, what, options in (("zarr", oracle or target, {} if oracle is not None else kwargs),
                                  ("zarrmax", target, kwargs)):
        with xr.open_dataset(what, engine=engine, **options) as got:
            np.testing.assert_array_equal(got["v"].values, expected["v"].values, err_msg=engine)
            assert got["v"].dtype == expected["v"].dtype


@pytest.mark.parametrize("compressors", [
    [ZstdCodec(level=1)], [ZstdCodec(level=-3)], [ZstdCodec(level=9)], [ZstdCodec(level=3, checksum=True)], [],
], ids=["zstd1", "zstd-3", "zstd9", "zstd-checksum", "none"])
@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
@pytest.mark.parametrize("compressible", [False, True], ids=["noise", "smooth"])
def test_large_chunks_read_back_by_zarr(where: dict[str, Any], compressors: list[Any], sharded: bool,
                                        compressible: bool) -> None:
    ds = xr.Dataset({"v": ("x", _values(12, compressible))}).chunk({"x": 4 * CHUNK})
    encoding: dict[str, Any] = {"chunks": (CHUNK,), "compressors": compressors}
    if sharded:
        encoding["shards"] = (4 * CHUNK,)
    write(where, ds, encoding={"v": encoding})
    _check_both_engines(where["read"], ds, **where["kwargs"])


def test_large_chunks_are_encoded_into_pooled_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The path under test is the pooled one (else the test above proves nothing about it), and a chunk below
    the threshold is encoded as zarr encodes it, to the same bytes."""
    encoder = shard_encode.plain_encoder((BytesCodec(), ZstdCodec(level=1)), np.dtype("f8"))
    assert encoder is not None
    large = encoder.encode(_values(1, True), pooled=True)
    assert isinstance(large, Reused) and len(large) < CHUNK * 8
    assert isinstance(encoder.encode(_values(1, True)), bytes)  # for a sink that gives nothing back
    small_values = _values(1, True)[:1000]
    small = encoder.encode(small_values, pooled=True)
    assert isinstance(small, bytes)
    spec_codecs = zarr.create_array(zarr.storage.MemoryStore(), shape=(1000,), chunks=(1000,), dtype="f8",
                                    compressors=[ZstdCodec(level=1)])
    spec_codecs[:] = small_values
    assert small == spec_codecs.store_path.store._store_dict["c/0"].to_bytes()
    decoded = np.frombuffer(zarr.codecs.ZstdCodec(level=1)._zstd_codec.decode(bytes(large)), "<f8")
    np.testing.assert_array_equal(decoded, _values(1, True))
    large.release()


def test_local_writes_reuse_buffers_only_after_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two writes in a row: the second takes the buffers the first gave back (the pool is used), and every chunk
    of both holds its own values (a buffer given back before its bytes were written would hold another's)."""
    pool = BufferPool()
    monkeypatch.setattr(_buffers, "POOL", pool)
    monkeypatch.setattr(shard_encode, "POOL", pool)
    taken: list[int] = []
    take = pool.take
    monkeypatch.setattr(pool, "take", lambda n: taken.append(pool.kept_bytes()) or take(n))
    encoding = {"v": {"chunks": (CHUNK,), "shards": (4 * CHUNK,), "compressors": [ZstdCodec(level=1)]}}
    for i, compressible in enumerate([False, True]):
        ds = xr.Dataset({"v": ("x", _values(16, compressible))}).chunk({"x": 4 * CHUNK})
        xarray_zarrmax.to_zarr(ds, tmp_path / f"{i}.zarr", encoding=encoding)
        _check_both_engines(tmp_path / f"{i}.zarr", ds)
    assert len(taken) == 32 and any(kept > 0 for kept in taken[16:]), taken
    assert pool.kept_bytes() > 0


def test_a_released_buffer_cannot_be_read() -> None:
    pool = BufferPool()
    buffer = pool.take(10)
    buffer[:3] = (1, 2, 3)
    data = Reused(buffer, 3, pool)
    assert bytes(data) == b"\x01\x02\x03" and len(data) == 3
    with pytest.raises(TypeError):
        memoryview(data)[0] = 9  # read-only: nothing writes into an object's bytes
    data.release()
    data.release()  # once given back, again is nothing
    assert pool.kept_bytes() == _buffers.GRANULE
    with pytest.raises(ValueError, match="released after they were written"):
        bytes(data)
    assert len(data) == 3 and "released" in repr(data)
    assert pool.take(5) is buffer  # reused


def test_pool_keeps_at_most_its_limit() -> None:
    pool = BufferPool(keep_bytes=3 * _buffers.GRANULE)
    buffers = [pool.take(_buffers.GRANULE) for _ in range(5)]
    for b in buffers:
        pool.give(b)
    assert pool.kept_bytes() == 3 * _buffers.GRANULE
    pool.clear()
    assert pool.kept_bytes() == 0
    with pytest.raises(ValueError, match="cannot hold"):
        Reused(np.empty(4, np.uint8), 5, pool)


def test_the_config_limits_what_is_kept() -> None:
    pool = BufferPool()  # the config's write_buffer_bytes, read when a buffer is given back
    with set_config(write_buffer_bytes=2 * _buffers.GRANULE):
        for b in [pool.take(_buffers.GRANULE) for _ in range(3)]:
            pool.give(b)
        assert pool.kept_bytes() == 2 * _buffers.GRANULE
    pool.clear()
    with set_config(write_buffer_bytes=0):
        pool.give(pool.take(1))
        assert pool.kept_bytes() == 0
    with pytest.raises(ValueError, match=r"config write_buffer_bytes must be an integer >= 0. Got -1 instead"):
        with set_config(write_buffer_bytes=-1):
            pass


def test_a_lowered_limit_frees_what_the_pool_kept_beyond_it() -> None:
    """Lowering write_buffer_bytes frees kept buffers at the next give-back, largest first (a review found
    them kept until the process ended)."""
    pool = BufferPool()
    with set_config(write_buffer_bytes=8 * _buffers.GRANULE):
        for b in [pool.take(_buffers.GRANULE), pool.take(3 * _buffers.GRANULE), pool.take(_buffers.GRANULE)]:
            pool.give(b)
        assert pool.kept_bytes() == 5 * _buffers.GRANULE
    with set_config(write_buffer_bytes=2 * _buffers.GRANULE):
        pool.give(pool.take(_buffers.GRANULE))  # the same small buffer back; the large one is freed
        assert pool.kept_bytes() == 2 * _buffers.GRANULE
        assert pool.take(3 * _buffers.GRANULE).nbytes == 3 * _buffers.GRANULE  # a fresh one: none kept
        assert pool.kept_bytes() == 2 * _buffers.GRANULE


def test_buffers_of_an_earlier_chunk_size_make_room_for_the_current_one() -> None:
    """A pool filled by one write's size class (12.5 MB chunks) kept none of the next write's (1 MB): every
    chunk then got a fresh allocation, at a third of the speed (found in the write benchmark). The class given
    back least recently gives way."""
    pool = BufferPool(keep_bytes=4 * _buffers.GRANULE)
    for b in [pool.take(_buffers.GRANULE) for _ in range(4)]:
        pool.give(b)
    assert pool.kept_bytes() == 4 * _buffers.GRANULE
    bigger = pool.take(2 * _buffers.GRANULE)
    pool.give(bigger)
    assert pool.take(2 * _buffers.GRANULE) is bigger  # kept: two of the older class were freed for it
    assert pool.kept_bytes() == 2 * _buffers.GRANULE
    pool.give(np.empty(8 * _buffers.GRANULE, np.uint8))  # larger than the limit: not kept, nothing freed
    assert pool.kept_bytes() == 2 * _buffers.GRANULE


def test_a_forked_child_takes_buffers_even_if_forked_while_the_pool_was_locked() -> None:
    """A child forked while another thread held the pool's lock inherited it held, and its first pooled write
    hung (found by a review): the child gets a new lock and an empty pool."""
    import os
    import signal

    _buffers.POOL.give(_buffers.POOL.take(1))
    with _buffers.POOL._lock:  # as a parent's encoder thread holds it at the moment of fork
        pid = os.fork()
        if pid == 0:  # the child: a hang is killed by the alarm, a wrong pool exits 1
            signal.alarm(10)
            try:
                kept = _buffers.POOL.kept_bytes()
                _buffers.POOL.give(_buffers.POOL.take(1))
                os._exit(0 if kept == 0 else 1)
            finally:
                os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_only_a_sink_that_gives_buffers_back_gets_pooled_ones(where: dict[str, Any],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A buffer nobody gives back costs more than bytes: S3 writes encode into bytes, local ones into the pool."""
    taken: list[int] = []
    take = shard_encode.POOL.take
    monkeypatch.setattr(shard_encode.POOL, "take", lambda n: taken.append(n) or take(n))
    ds = xr.Dataset({"v": ("x", _values(8, False))}).chunk({"x": 4 * CHUNK})
    write(where, ds, encoding={"v": {"chunks": (CHUNK,), "shards": (4 * CHUNK,)}})
    assert len(taken) == (0 if where["target"].startswith("s3://") else 8), taken
    _check_both_engines(where["read"], ds, **where["kwargs"])
