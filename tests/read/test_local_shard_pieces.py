"""Local shards read in pieces, each decoded as soon as it is read (`local_reads.read_local_shard`): the same
answers as engine="zarr" on any array, counted reads, and files that change while their pieces are read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.codecs import ZstdCodec

import xarray_zarrmax
import xarray_zarrmax.read.local_reads as local_reads
from tests.support.compare import assert_same_dataset, assert_same_values
from tests.support.strategies import any_selection, array_specs, write_array
from xarray_zarrmax import CorruptDataError, StoreAccessError, request_counts
from xarray_zarrmax.storage import OpenedFile


@pytest.fixture
def tiny_pieces(monkeypatch):
    """Every sharded local read streams, in pieces of at most 100 bytes (at least one chunk each)."""
    monkeypatch.setattr(local_reads, "STREAM_BYTES", 1)
    monkeypatch.setattr(local_reads, "PIECE_BYTES", 100)


@pytest.fixture
def counted(monkeypatch):
    """Which code read the shards: the streaming path's reads are counted here."""
    calls: list[tuple[int, int]] = []
    read = OpenedFile.read

    def counting(self, start, stop):
        calls.append((start, stop))
        return read(self, start, stop)

    monkeypatch.setattr(OpenedFile, "read", counting)
    return calls


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), spec=array_specs())
def test_any_array_reads_as_engine_zarr_reads_it(tmp_path_factory, tiny_pieces, counted, data, spec):
    path = tmp_path_factory.mktemp("pieces") / "a.zarr"
    write_array(str(path), spec)
    pairs = [(xr.open_dataset(path, engine="zarrmax", chunks=chunks),
              xr.open_dataset(path, engine="zarr", chunks=chunks, consolidated=False)) for chunks in ({}, None)]
    for mine, theirs in pairs:
        assert_same_dataset(mine.compute(), theirs.compute())
    for _ in range(3):
        sel = data.draw(any_selection(spec.shape, spec.dims))
        for mine, theirs in pairs:
            assert_same_values(mine["v"].isel(sel), theirs["v"].isel(sel))


def test_the_examples_above_stream(tmp_path, tiny_pieces, counted):
    """Control for the property test: with the fixtures, a sharded read goes through the streaming path."""
    path = _sharded(tmp_path / "s.zarr")
    np.testing.assert_array_equal(xr.open_dataset(path, engine="zarrmax")["v"].values, _values())
    assert counted


N, CHUNK, SHARD = 64_000, 1000, 16_000  # 4 shards of 16 chunks of 8 kB (int64, stored as is: incompressible)


def _values(version: int = 0) -> np.ndarray:
    return np.random.default_rng(version).integers(0, 2**62, N)


def _sharded(path: Path, version: int = 0) -> Path:
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("v", shape=(N,), chunks=(CHUNK,), shards=(SHARD,), dtype="i8", dimension_names=["x"],
                       compressors=[ZstdCodec(level=1)])[:] = _values(version)
    return path


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.usefixtures("no_chunk_cache")  # the second read's requests: the index cache's work, not the chunks'
def test_a_shard_is_its_index_then_pieces_and_the_index_is_cached(tmp_path, monkeypatch, threads):
    import xarray_zarrmax.storage.local as local

    monkeypatch.setattr(local, "RACY_WINDOW_NS", 0)  # files just written may be trusted across reads here
    _pieces_of_four(monkeypatch)
    path = _sharded(tmp_path / "s.zarr")
    with xarray_zarrmax.set_config(threads=threads):
        ds = xr.open_dataset(path, engine="zarrmax", chunks={})
        with request_counts() as counts:
            np.testing.assert_array_equal(ds["v"].values, _values())
        assert counts.total("get") == 4 * (1 + 4)  # per shard: its index, then 4 pieces
        with request_counts() as again:
            np.testing.assert_array_equal(ds["v"].values, _values())
    assert again.total("get") == 4 * 4  # the indexes, proved current by each file's fstat, not read again
    assert counts.total("bytes") - again.total("bytes") == 4 * (16 * 16 + 4)  # 16 entries and a crc32c


def test_a_shard_smaller_than_a_piece_is_one_read(tmp_path, monkeypatch, counted):
    monkeypatch.setattr(local_reads, "STREAM_BYTES", 1)
    path = _sharded(tmp_path / "s.zarr")
    ds = xr.open_dataset(path, engine="zarrmax")
    with request_counts() as counts:
        np.testing.assert_array_equal(ds["v"].values, _values())
    assert counts.total("get") == 4 and len(counted) == 4


def _pieces_of_four(monkeypatch) -> None:  # noqa: ANN001
    """Every sharded read streams, 4 chunks a piece (8000 bytes and zstd's header each)."""
    monkeypatch.setattr(local_reads, "STREAM_BYTES", 1)
    monkeypatch.setattr(local_reads, "PIECE_BYTES", 4 * 8100)


def _rewrite_in_place(path: Path, version: int) -> None:
    """The shard files of ``version``'s values written over the current ones in place (same inode)."""
    fresh = _sharded(path.parent / f"v{version}.zarr", version)
    for shard in sorted((fresh / "v" / "c").iterdir()):
        target = path / "v" / "c" / shard.name
        with open(target, "r+b") as f:
            f.truncate(0)
            f.write(shard.read_bytes())


@pytest.mark.parametrize("how", ["in place", "replaced"])
def test_a_shard_rewritten_between_its_pieces_is_never_mixed(tmp_path, monkeypatch, how):
    """In place: the fstat after the pieces differs, and the shard is read again (the new values). Replaced
    (a new file, as zarr writes): the open descriptor reads the old file whole (the old values); the next read
    opens the new one. A mix never."""
    _pieces_of_four(monkeypatch)
    path = _sharded(tmp_path / "s.zarr")
    ds = xr.open_dataset(path, engine="zarrmax")
    read, rewrites = OpenedFile.read, []

    def rewriting(self, start, stop):
        got = read(self, start, stop)
        if not rewrites and self.key == "v/c/0" and start < self.size - 2000:  # a piece, not the index
            rewrites.append(start)
            if how == "in place":
                _rewrite_in_place(path, 1)
            else:
                _sharded(path, 1)
        return got

    monkeypatch.setattr(OpenedFile, "read", rewriting)
    got = ds["v"][:SHARD].values
    assert rewrites
    np.testing.assert_array_equal(got, _values(1 if how == "in place" else 0)[:SHARD])
    np.testing.assert_array_equal(ds["v"][:SHARD].values, _values(1)[:SHARD])


def test_a_shard_rewritten_under_every_read_is_an_error_not_a_mix(tmp_path, monkeypatch):
    _pieces_of_four(monkeypatch)
    path = _sharded(tmp_path / "s.zarr")
    ds = xr.open_dataset(path, engine="zarrmax")
    read, version = OpenedFile.read, [0]

    def rewriting(self, start, stop):
        got = read(self, start, stop)
        version[0] += 1
        _rewrite_in_place(path, version[0])
        return got

    monkeypatch.setattr(OpenedFile, "read", rewriting)
    with pytest.raises(StoreAccessError, match=r"array 'v', key 'v/c/0' on file://.* changed 3 times"):
        ds["v"][:SHARD].values  # noqa: B018


def test_a_shard_cut_short_is_an_error_naming_it(tmp_path, monkeypatch):
    _pieces_of_four(monkeypatch)
    path = _sharded(tmp_path / "s.zarr")
    shard = path / "v" / "c" / "1"
    whole = shard.read_bytes()
    index = whole[-(16 * 16 + 4):]
    shard.write_bytes(whole[:40_000] + b"\0" * (len(whole) - 40_000 - len(index)) + index)  # chunks 5-15 zeroed
    with pytest.raises(CorruptDataError, match=r"array 'v', key 'v/c/1', chunk \(5,\): zstd"):
        xr.open_dataset(path, engine="zarrmax")["v"].values  # noqa: B018
    shard.write_bytes(whole[:40_000])  # the index gone with the end of the file
    with pytest.raises(CorruptDataError, match=r"array 'v', key 'v/c/1'"):
        xr.open_dataset(path, engine="zarrmax")["v"].values  # noqa: B018


def test_an_index_torn_by_an_in_place_rewrite_is_read_again_not_an_error(tmp_path, monkeypatch):
    """The index read while a writer rewrites the file in place: what came back is no valid index, and the
    fstat says the file changed, so the shard is read again (the new values), not reported corrupt."""
    _pieces_of_four(monkeypatch)
    path = _sharded(tmp_path / "s.zarr")
    ds = xr.open_dataset(path, engine="zarrmax")
    read, torn = OpenedFile.read, []

    def tearing(self, start, stop):
        got = read(self, start, stop)
        if not torn and self.key == "v/c/0":  # the first read of the shard: its index
            torn.append(start)
            _rewrite_in_place(path, 1)
            return np.zeros_like(got)  # half-written: no crc32c matches
        return got

    monkeypatch.setattr(OpenedFile, "read", tearing)
    np.testing.assert_array_equal(ds["v"][:SHARD].values, _values(1)[:SHARD])
    assert torn


def test_a_shard_replaced_during_every_read_is_read_whole_from_the_old_file(tmp_path, monkeypatch):
    """zarr-python renames a new file over the shard while we read it: the descriptor's file is unlinked, which
    changes its ctime, but none of its bytes. Counting that as a change retried every read and gave up after 3
    (StoreAccessError where engine="zarr" reads). Found by an adversarial review."""
    _pieces_of_four(monkeypatch)
    path = _sharded(tmp_path / "s.zarr")
    ds = xr.open_dataset(path, engine="zarrmax")
    read, replaced = OpenedFile.read, []

    def replacing(self, start, stop):
        got = read(self, start, stop)
        if self.key == "v/c/0":
            replaced.append(start)
            zarr.open_array(path / "v", mode="r+")[:SHARD] = _values()[:SHARD]  # same values, new files
        return got

    monkeypatch.setattr(OpenedFile, "read", replacing)
    np.testing.assert_array_equal(ds["v"][:SHARD].values, _values()[:SHARD])
    assert len(replaced) == 1 + 4  # the index and 4 pieces, once: no read again
