"""Incompressible zstd chunks (frames of raw blocks) read from local files straight into the output
(`xarray_zarrmax.read.raw_zstd`), and every frame that only looks like one decoded as zarr-python decodes it."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.codecs import ZstdCodec

from xarray_zarrmax import CorruptDataError, request_counts
from xarray_zarrmax.read import raw_zstd as zstd_raw
from xarray_zarrmax.read.raw_zstd import BLOCK


def _write(path, n: int, chunk: int, *, checksum: bool = False, seed: int = 0) -> np.ndarray:
    values = np.random.default_rng(seed).integers(0, 256, size=n, dtype="u1")
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("v", shape=(n,), chunks=(chunk,), dtype="u1", dimension_names=["x"],
                       compressors=[ZstdCodec(level=1, checksum=checksum)])[:] = values
    return values


def _read(path, engine: str) -> np.ndarray:
    return xr.open_dataset(path, engine=engine, chunks=None, consolidated=False)["v"].values


@pytest.fixture
def outcomes(monkeypatch):
    """What each `zstd_raw.read_into` call returned, in order."""
    seen: list[bool] = []
    real = zstd_raw.read_into
    monkeypatch.setattr(zstd_raw, "read_into", lambda file, out: seen.append(real(file, out)) or seen[-1])
    return seen


# one byte (single segment, 1-byte size), 2-byte and 4-byte sizes, exactly one block, one more byte, several
# blocks with a partial last one, and a frame with a window (not single segment)
@pytest.mark.parametrize("chunk", [2, 300, 65_792, BLOCK, BLOCK + 1, 3 * BLOCK + 17, 1_000_000])
def test_incompressible_chunks_are_read_straight_into_the_output(tmp_path, outcomes, chunk):
    values = _write(tmp_path / "a.zarr", 2 * chunk + (chunk + 1) // 2, chunk)  # two whole chunks, half of one
    ds = xr.open_dataset(tmp_path / "a.zarr", engine="zarrmax", chunks=None, consolidated=False)
    with request_counts() as counts:
        got = ds["v"].values
    np.testing.assert_array_equal(got, values)
    np.testing.assert_array_equal(got, _read(tmp_path / "a.zarr", "zarr"))
    assert outcomes == [True, True]  # the whole chunks; the array's edge is decoded aside and copied
    assert counts.total("get") == 3 and counts.total("bytes") == sum(
        f.stat().st_size for f in (tmp_path / "a.zarr" / "v" / "c").iterdir())


def test_compressible_chunks_are_not_read_twice(tmp_path, outcomes):
    path = tmp_path / "a.zarr"
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("v", shape=(4 * BLOCK,), chunks=(2 * BLOCK,), dtype="u1", dimension_names=["x"],
                       compressors=[ZstdCodec(level=1)])[:] = np.arange(4 * BLOCK) % 7
    ds = xr.open_dataset(path, engine="zarrmax", chunks=None, consolidated=False)
    with request_counts() as counts:
        np.testing.assert_array_equal(ds["v"].values, _read(path, "zarr"))
    assert outcomes == [False, False]  # told by the file's size, before any read
    assert counts.total("get") == 2


def test_checksummed_frames_are_decoded_and_their_checksum_checked(tmp_path, outcomes):
    values = _write(tmp_path / "a.zarr", 2 * BLOCK, BLOCK, checksum=True)
    ds = xr.open_dataset(tmp_path / "a.zarr", engine="zarrmax", chunks=None, consolidated=False)
    with request_counts() as counts:
        np.testing.assert_array_equal(ds["v"].values, values)
    # told by the size (the checksum's 4 bytes do not fit the header zstd writes), not read twice: found by
    # an adversarial review, where a checksummed frame of 800 kB read as a raw frame's 14-byte header
    assert outcomes == [False, False] and counts.total("get") == 2
    chunk = tmp_path / "a.zarr" / "v" / "c" / "1"
    data = bytearray(chunk.read_bytes())
    data[1000] ^= 1  # a data byte: only the checksum can tell
    chunk.write_bytes(bytes(data))
    with pytest.raises(RuntimeError):
        _read(tmp_path / "a.zarr", "zarr")
    with pytest.raises(CorruptDataError, match=r"array 'v', key 'v/c/1'.*zstd could not decode the chunk"):
        _read(tmp_path / "a.zarr", "zarrmax")


@st.composite
def _frames(draw):
    """A chunk's bytes: a real zstd frame of incompressible data, then perhaps one change to it."""
    n = draw(st.sampled_from([1, 200, 256, 5000, BLOCK - 1, BLOCK, BLOCK + 3, 2 * BLOCK + 11]))
    payload = np.random.default_rng(draw(st.integers(0, 2**16))).integers(0, 256, n, dtype="u1").tobytes()
    frame = bytearray(zstandard.ZstdCompressor(
        level=1, write_checksum=draw(st.booleans()),
        write_content_size=True,
    ).compress(payload))
    header = len(frame) - n - 3 * max(1, -(-n // BLOCK)) - (4 if frame[4] & 4 else 0)
    change = draw(st.sampled_from(["none", "header bit", "block header bit", "cut", "junk", "data byte"]))
    if change == "header bit":
        position = draw(st.integers(0, header - 1))
        frame[position] ^= 1 << draw(st.integers(0, 7))
    elif change == "block header bit":
        block = draw(st.integers(0, max(1, -(-n // BLOCK)) - 1))
        position = header + block * (BLOCK + 3) + draw(st.integers(0, 2))
        frame[position] ^= 1 << draw(st.integers(0, 7))
    elif change == "cut":
        del frame[len(frame) - draw(st.integers(1, 5)):]
    elif change == "junk":
        frame += bytes(draw(st.binary(min_size=1, max_size=4)))
    elif change == "data byte":
        frame[header + 3 + draw(st.integers(0, min(n, BLOCK) - 1))] ^= 0xFF
    return n, payload, bytes(frame)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_frames())
def test_fuzz_frames_that_look_raw_read_as_zarr_reads_them(tmp_path, case):
    """Whatever a frame of raw blocks turned into: engine="zarr"'s values, or an error where it has one."""
    n, payload, frame = case
    path = tmp_path / "f.zarr"
    _write(path, n, n)
    (path / "v" / "c" / "0").write_bytes(frame)
    try:
        expected = _read(path, "zarr")
    except Exception:  # noqa: BLE001  # any error: ours must be one too
        with pytest.raises(CorruptDataError):
            _read(path, "zarrmax")
        return
    np.testing.assert_array_equal(_read(path, "zarrmax"), expected)
