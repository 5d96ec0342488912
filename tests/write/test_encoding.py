"""What lands in the store is zarr's, byte for byte: our encoders' objects and shards, merges that keep the
stored bytes of the chunks they do not write, shards sent in parts never joined, and which chunks are stored,
left out or deleted as empty (write_empty_chunks)."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import xarray_zarrmax
from tests.support.compare import check_reads
from tests.support.datasets import SHARDED, sample
from tests.support.targets import write
from xarray_zarrmax import request_counts


@pytest.mark.parametrize("consolidated", [True, False])
def test_same_store_as_dataset_to_zarr(tmp_path: Path, consolidated: bool) -> None:
    """Every metadata document and every stored object is byte for byte what Dataset.to_zarr writes."""
    ds = sample().chunk({"time": 8})
    encoding = {"temp": SHARDED, "count": {"chunks": (4,)}}
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "theirs.zarr"
    xarray_zarrmax.to_zarr(ds, ours, encoding=encoding, consolidated=consolidated)
    ds.to_zarr(theirs, encoding=encoding, consolidated=consolidated, zarr_format=3)
    files = sorted(str(p.relative_to(theirs)) for p in theirs.rglob("*") if p.is_file())
    assert sorted(str(p.relative_to(ours)) for p in ours.rglob("*") if p.is_file()) == files
    for name in files:
        if name.endswith("zarr.json"):
            assert json.loads((ours / name).read_text()) == json.loads((theirs / name).read_text()), name
        else:
            assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name
    check_reads(ours, sample())


@settings(max_examples=150, deadline=None)
@given(dtype=st.sampled_from(["bool", "i1", "u2", "i4", "u8", "f2", "f4", "f8", "c8", "c16"]),
       endian=st.sampled_from(["little", "big"]), compress=st.sampled_from([None, 0, 1, 5]),
       checksum=st.booleans(), write_empty=st.booleans(), fill=st.sampled_from([0, 1, -0.0, "nan"]),
       content=st.sampled_from(["random", "fill", "zeros", "negative zeros"]))
def test_direct_encoder_writes_zarrs_bytes(dtype: str, endian: str, compress: int | None, checksum: bool,
                                           write_empty: bool, fill: Any, content: str) -> None:
    """ObjectCodec encodes bytes(+zstd) objects in one call, bypassing zarr's buffers: its bytes, and which
    objects it elides as empty, must be exactly those of zarr's own codec chain."""
    import zarr
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.chunk_utils import encode_or_elide_chunk

    from xarray_zarrmax.codecs.encode import PlainEncoder
    from xarray_zarrmax.write.codec import ObjectCodec

    np_dtype = np.dtype(dtype)
    if fill == "nan" and np_dtype.kind not in "fc":
        fill = 1
    compressors = [] if compress is None else [zarr.codecs.ZstdCodec(level=compress, checksum=checksum)]
    array = zarr.create_array(zarr.storage.MemoryStore(), shape=(6, 7), chunks=(6, 7), dtype=np_dtype,
                              fill_value=float(fill) if fill == "nan" else fill, compressors=compressors,
                              serializer=zarr.codecs.BytesCodec(endian=endian))
    codec = ObjectCodec(array.metadata, write_empty)
    assert isinstance(codec._fast, PlainEncoder)
    rng = np.random.default_rng(0)
    values = {"random": (rng.normal(size=(6, 7)) * 50), "fill": np.full((6, 7), float(fill)),
              "zeros": np.zeros((6, 7)), "negative zeros": np.full((6, 7), -0.0)}[content]
    values = values.astype(np_dtype) if np_dtype.kind != "b" else values > 0
    spec = codec.spec()
    nd = default_buffer_prototype().nd_buffer.from_numpy_array(values)
    expected = encode_or_elide_chunk(nd, spec, codec._transform.encode_chunk)
    assert codec.encode(values) == (None if expected is None else expected.to_bytes())


@settings(max_examples=150, deadline=None)
@given(dtype=st.sampled_from(["bool", "i1", "u2", "i4", "f2", "f4", "f8", "c8"]),
       endian=st.sampled_from(["little", "big"]), compress=st.sampled_from([None, 0, 3]),
       start=st.booleans(), write_empty=st.booleans(), fill=st.sampled_from([0, 1, "nan"]),
       chunks=st.sampled_from([(3, 4), (2, 8), (6, 8), (1, 1)]), empty_mask=st.integers(0, 2**16 - 1),
       keep_empty=st.booleans())
def test_shard_encoder_writes_zarrs_bytes(dtype: str, endian: str, compress: int | None, start: bool,
                                          write_empty: bool, fill: Any, chunks: tuple[int, int], empty_mask: int,
                                          keep_empty: bool) -> None:
    """Shards of bytes(+zstd) chunks are laid out and indexed by our own encoder, the inner chunks in parallel:
    the bytes (index position and crc32c, Morton order, which inner chunks are left out as empty, and when
    the whole shard is) must be exactly those of zarr's ShardingCodec."""
    import zarr
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.chunk_utils import encode_or_elide_chunk

    from xarray_zarrmax.codecs.encode import ShardEncoder
    from xarray_zarrmax.core.bytes import Pieces
    from xarray_zarrmax.write.codec import ObjectCodec

    np_dtype = np.dtype(dtype)
    if fill == "nan" and np_dtype.kind not in "fc":
        fill = 1
    inner = [zarr.codecs.BytesCodec(endian=endian)]
    if compress is not None:
        inner.append(zarr.codecs.ZstdCodec(level=compress))
    sharding = zarr.codecs.ShardingCodec(chunk_shape=chunks, codecs=inner, index_location="start" if start else "end")
    array = zarr.create_array(zarr.storage.MemoryStore(), shape=(12, 16), chunks=(6, 8), dtype=np_dtype,
                              fill_value=float(fill) if fill == "nan" else fill, serializer=sharding,
                              compressors=None, filters=None)
    codec = ObjectCodec(array.metadata, write_empty)
    assert isinstance(codec._fast, ShardEncoder)
    values = np.random.default_rng(0).normal(size=(6, 8)) * 50
    # inner chunks chosen by the mask hold only the fill value
    for i, (y, x) in enumerate(itertools.product(range(6 // chunks[0]), range(8 // chunks[1]))):
        if empty_mask >> (i % 16) & 1:
            values[y * chunks[0]:(y + 1) * chunks[0], x * chunks[1]:(x + 1) * chunks[1]] = float(fill)
    values = values.astype(np_dtype) if np_dtype.kind != "b" else values > 0
    spec = codec.spec(True if keep_empty else None)
    nd = default_buffer_prototype().nd_buffer.from_numpy_array(values)
    expected = encode_or_elide_chunk(nd, spec, codec._transform.encode_chunk)
    got = codec.encode(values, keep_empty=keep_empty)
    if expected is None:
        assert got is None
    else:
        assert isinstance(got, Pieces)  # written as its parts, never joined on the way to the sink
        assert bytes(got) == expected.to_bytes()


@pytest.mark.parametrize("compressors", [None, "zstd", "blosc", "crc32c"])  # not gzip: it stores the time
@pytest.mark.parametrize("case", ["edge shard, write_empty_chunks", "region merge", "appends"])
def test_partial_and_edge_shards_store_zarrs_bytes(tmp_path: Path, case: str, compressors: str | None) -> None:
    """Which inner chunks a shard stores follows zarr: none wholly outside the array (even with
    write_empty_chunks=True), and a merge keeps the inner chunks it does not write as they were (stored, or
    left out) -- so the files are zarr's, byte for byte, with our own encoder (zstd) or zarr's chain per inner
    chunk (blosc, crc32c)."""
    import zarr

    comp = {None: None, "zstd": [zarr.codecs.ZstdCodec(level=1)], "blosc": [zarr.codecs.BloscCodec()],
            "gzip": [zarr.codecs.GzipCodec()], "crc32c": [zarr.codecs.Crc32cCodec()]}[compressors]
    files: dict[str, dict[str, bytes]] = {}
    for name in ("ours", "zarr"):
        path = tmp_path / f"{name}.zarr"

        def write(ds: xr.Dataset, name: str = name, path: Path = path, **kwargs: Any) -> None:
            if name == "ours":
                xarray_zarrmax.to_zarr(ds, path, consolidated=False, **kwargs)
            else:
                ds.to_zarr(path, consolidated=False, zarr_format=3, **kwargs)

        if case == "edge shard, write_empty_chunks":
            ds = xr.Dataset({"v": ("x", np.arange(5, dtype="i2"))})
            write(ds, encoding={"v": {"chunks": (2,), "shards": (4,), "compressors": comp}}, write_empty_chunks=True)
        elif case == "region merge":
            v = np.full((4, 6), np.nan, "f4")
            v[0:2, 0:3] = 1.0  # one inner chunk of four holds data
            enc = {"v": {"chunks": (2, 3), "shards": (4, 6), "compressors": comp, "fill_value": np.nan}}
            write(xr.Dataset({"v": (("t", "x"), v)}), encoding=enc)
            write(xr.Dataset({"v": (("t", "x"), np.full((1, 6), 2.0, "f4"))}), region={"t": slice(1, 2)})
        else:
            def step(t: int) -> xr.Dataset:
                return xr.Dataset({"v": (("t", "x"), np.full((1, 3), t + 1.0, "f4"))}, coords={"t": [t]})

            write(step(0), encoding={"v": {"chunks": (1, 3), "shards": (8, 3), "compressors": comp}})
            for t in (1, 2):
                write(step(t), append_dim="t")
        files[name] = {str(f.relative_to(path)): f.read_bytes() for f in sorted((path / "v" / "c").rglob("*"))
                       if f.is_file()}
    assert files["ours"] == files["zarr"]


@pytest.mark.parametrize("compressor", ["zstd", "gzip"])
def test_a_merge_keeps_the_stored_bytes_of_chunks_it_does_not_write(compressor: str) -> None:
    """As zarr's partial shard writes: an inner chunk the write does not touch keeps its stored bytes (a gzip
    chunk its timestamp, a chunk compressed at another level its bytes), never re-encoded; a partly written
    one is decoded, overlaid and stored."""
    import numcodecs
    import zarr

    from xarray_zarrmax.codecs.encode import ShardEncoder
    from xarray_zarrmax.core.bytes import joined
    from xarray_zarrmax.write.codec import ObjectCodec

    codecs = {"zstd": [zarr.codecs.ZstdCodec(level=1)], "gzip": [zarr.codecs.GzipCodec(level=1)]}[compressor]
    array = zarr.create_array(zarr.storage.MemoryStore(), shape=(8,), chunks=(2,), shards=(8,), dtype="<f8",
                              compressors=codecs, fill_value=0.0)
    codec = ObjectCodec(array.metadata, False)
    fast = codec._fast
    assert isinstance(fast, ShardEncoder)
    values = np.arange(1.0, 9.0)
    # chunk 3 stored as another writer may have stored it: other settings (a checksum), the same values
    other = (numcodecs.Zstd(level=1, checksum=True) if compressor == "zstd"
             else numcodecs.GZip(level=9)).encode(values[6:8])
    plain = [fast.inner.chunk_encoder(codec._inner_spec(codec.spec()))(values[2 * i:2 * i + 2]) for i in range(3)]
    assert bytes(other) != fast.inner.chunk_encoder(codec._inner_spec(codec.spec()))(values[6:8])
    stored = joined(fast._assemble([(0,), (1,), (2,), (3,)], [*plain, bytes(other)], keep_index=False))
    merged = joined(codec.merge(stored, np.array([-1.0, -2.0, -3.0]), (slice(1, 4),), "a test"))
    assert bytes(other) in merged and plain[2] in merged  # untouched: their stored bytes, verbatim
    assert plain[0] not in merged and plain[1] not in merged  # chunk 0 partly written, chunk 1 wholly
    np.testing.assert_array_equal(codec.decode(merged), [1.0, -1.0, -2.0, -3.0, 5.0, 6.0, 7.0, 8.0])


def test_shards_of_other_inner_codecs_and_indexes_are_laid_out_here() -> None:
    """Shards are laid out here whatever their inner codecs (zarr's chain encodes each inner chunk that is not
    bytes+zstd) and index (either byte order, with or without crc32c); what is not a shard and not bytes+zstd
    is left to zarr's chain."""
    import zarr

    from xarray_zarrmax.codecs.encode import ChainEncoder, PlainEncoder
    from xarray_zarrmax.write.codec import ObjectCodec

    def fast(**kwargs: Any) -> Any:
        array = zarr.create_array(zarr.storage.MemoryStore(), shape=(8,), chunks=(4,), dtype="f4", **kwargs)
        return ObjectCodec(array.metadata, False)._fast

    assert isinstance(fast(shards=(8,), compressors=[zarr.codecs.ZstdCodec()]).inner, PlainEncoder)
    assert isinstance(fast(shards=(8,), compressors=[zarr.codecs.GzipCodec()]).inner, ChainEncoder)
    transposed = [zarr.codecs.TransposeCodec(order=(0,))]
    assert isinstance(fast(shards=(8,), compressors=[zarr.codecs.ZstdCodec()], filters=transposed).inner,
                      ChainEncoder)
    index_without_crc = zarr.codecs.ShardingCodec(chunk_shape=(4,), index_codecs=[zarr.codecs.BytesCodec()])
    assert not fast(serializer=index_without_crc, compressors=None, filters=None).index_crc32c
    big_index = zarr.codecs.ShardingCodec(chunk_shape=(4,), index_codecs=[zarr.codecs.BytesCodec(endian="big"),
                                                                          zarr.codecs.Crc32cCodec()])
    assert fast(serializer=big_index, compressors=None, filters=None).index_big_endian
    assert fast(compressors=[zarr.codecs.GzipCodec()]) is None  # unsharded gzip: zarr's chain


@pytest.mark.parametrize("index", ["no crc32c", "big-endian", "at the start"])
def test_merges_into_shards_of_other_indexes_store_zarrs_bytes(tmp_path: Path, index: str) -> None:
    """A merge stores what zarr's partial shard write stores (the chunks it does not write left as they were,
    none outside the array) whatever the index's layout."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

    index_codecs = {"no crc32c": [BytesCodec()], "big-endian": [BytesCodec(endian="big"), Crc32cCodec()],
                    "at the start": [BytesCodec(), Crc32cCodec()]}[index]
    sharding = ShardingCodec(chunk_shape=(2,), codecs=[BytesCodec(), ZstdCodec(level=1)], index_codecs=index_codecs,
                             index_location="start" if index == "at the start" else "end")
    encoding = {"v": {"chunks": (8,), "serializer": sharding, "compressors": None, "fill_value": np.nan}}
    values = np.full(10, np.nan, "f4")
    values[0:2] = 1.0
    files = {}
    for name in ("ours", "zarr"):
        path = tmp_path / f"{name}.zarr"
        first, step = xr.Dataset({"v": ("x", values)}), xr.Dataset({"v": ("x", np.array([5.0], "f4"))})
        if name == "ours":
            xarray_zarrmax.to_zarr(first, path, encoding=encoding, consolidated=False)
            xarray_zarrmax.to_zarr(step, path, region={"x": slice(3, 4)}, consolidated=False)
        else:
            first.to_zarr(path, encoding=encoding, zarr_format=3, consolidated=False)
            step.to_zarr(path, region={"x": slice(3, 4)}, consolidated=False)
        files[name] = {str(f.relative_to(path)): f.read_bytes() for f in sorted((path / "v" / "c").rglob("*"))}
    assert files["ours"] == files["zarr"]
    expected = values.copy()
    expected[3] = 5.0
    check_reads(tmp_path / "ours.zarr", xr.Dataset({"v": ("x", expected)}))


def test_a_merge_into_a_shard_with_a_bad_inner_chunk_names_it_and_changes_nothing(tmp_path: Path) -> None:
    import google_crc32c

    from xarray_zarrmax import CorruptDataError

    path = tmp_path / "s.zarr"
    xr.Dataset({"v": ("x", np.arange(8.0))}).to_zarr(
        path, zarr_format=3, consolidated=False, encoding={"v": {"chunks": (2,), "shards": (8,), "compressors": None}})
    shard = path / "v" / "c" / "0"
    data = shard.read_bytes()
    index = np.frombuffer(data[-68:-4], "<u8").reshape(4, 2).copy()
    index[2, 1] -= 3  # inner chunk 2: 13 bytes where 16 are stored, its index's crc32c valid
    body = index.tobytes()
    spoiled = data[:-68] + body + google_crc32c.value(body).to_bytes(4, "little")
    shard.write_bytes(spoiled)
    with pytest.raises(CorruptDataError, match=r"'v/c/0'.*inner chunk \(2,\).*13 bytes, expected 16"):
        xarray_zarrmax.to_zarr(xr.Dataset({"v": ("x", [-1.0])}), path, region={"x": slice(5, 6)}, consolidated=False)
    assert shard.read_bytes() == spoiled


def test_unsharded_and_compressors(tmp_path: Path) -> None:
    import zarr

    ds = sample()
    encoding = {"temp": {"chunks": (5, 6, 8), "compressors": [zarr.codecs.GzipCodec(level=1)]}}
    xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding=encoding)
    ds.to_zarr(tmp_path / "b.zarr", encoding=encoding, zarr_format=3)
    assert sorted(os.listdir(tmp_path / "a.zarr/temp/c")) == sorted(os.listdir(tmp_path / "b.zarr/temp/c"))
    ours, theirs = ((tmp_path / f"{name}.zarr/temp/c/1/0/0").read_bytes() for name in "ab")
    # A gzip member's bytes 4-7 are its write time in seconds: two writes a second apart differ there alone.
    assert ours[:4] + ours[8:] == theirs[:4] + theirs[8:]
    check_reads(tmp_path / "a.zarr", ds)


def test_shards_reach_the_store_in_parts_never_joined(where: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard goes to the store as its encoded chunks and index, never joined into one new buffer (a copy of
    the whole shard into fresh memory: docs/dev/performance-analysis.md). Region writes included: their merged
    shards go by conditional PUT, also in parts."""
    from xarray_zarrmax.core.bytes import Pieces

    def refuse(self: Pieces) -> bytes:
        raise AssertionError("a shard was joined on its way to the store")

    monkeypatch.setattr(Pieces, "__bytes__", refuse)
    ds = sample().chunk({"time": 8})
    write(where, ds, encoding={"temp": SHARDED}, consolidated=False)
    write(where, sample(4, t0=5).drop_vars(["y", "x", "station", "flag"]).chunk({"time": 4}),
          region={"time": slice(5, 9)}, consolidated=False)
    expected = sample()
    expected["temp"][5:9] = sample(4, t0=5)["temp"].values
    expected["count"][5:9] = sample(4, t0=5)["count"].values
    check_reads(where["read"], expected, **where["kwargs"])


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
def test_a_new_array_over_leftover_objects_reads_what_was_written(where: dict[str, Any], sharded: bool) -> None:
    """A new array whose path still holds an older array's objects (its zarr.json gone, as an interrupted delete
    leaves it): the objects it writes empty are deleted, as zarr-python deletes them, not read back as data.
    Found by a review: they were kept, and both engines read the old values where NaN was written."""
    encoding = {"v": {"chunks": (2,), "shards": (4,)} if sharded else {"chunks": (4,)}}
    write(where, xr.Dataset({"v": ("x", np.arange(8.0))}), encoding=encoding, consolidated=False)
    if where["target"].startswith("s3://"):
        import obstore

        obstore.delete(where["kwargs"]["oracle"].store, "v/zarr.json")  # the oracle's store: same bucket and prefix
    else:
        os.remove(Path(where["target"]) / "v/zarr.json")
    new = xr.Dataset({"v": ("x", np.array([np.nan] * 4 + [1.0, 2.0, 3.0, 4.0]))})
    with request_counts() as counts:
        write(where, new, mode="a", encoding=encoding, consolidated=False)
    assert counts.total("delete") == 1  # the one object now empty
    check_reads(where["read"], new, consolidated=False, **where["kwargs"])


def test_a_replaced_store_deletes_no_empty_object_key_by_key(tmp_path: Path) -> None:
    """mode="w" deleted the whole store first: its empty objects cost no request each."""
    ds = xr.Dataset({"v": ("x", np.array([np.nan] * 40 + [1.0] * 4))})
    xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"v": {"chunks": (4,)}})
    with request_counts() as counts:
        xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", mode="w", encoding={"v": {"chunks": (4,)}})
    assert counts.total("delete") == 2  # the store's prefix and the array's, as xarray's mode "w" asks
    assert _chunk_files(tmp_path, "a.zarr/v") == 1


@pytest.mark.parametrize("write_empty", [False, True])
def test_write_empty_chunks(tmp_path: Path, write_empty: bool) -> None:
    ds = sample()
    ds["temp"][8:16] = np.nan  # the whole second shard holds the fill value
    ds["temp"][0:2, :, :] = np.nan  # and the first shard's first inner chunks
    xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED}, write_empty_chunks=write_empty)
    assert (tmp_path / "a.zarr/temp/c/1/0/0").exists() == write_empty
    ds.to_zarr(tmp_path / "b.zarr", encoding={"temp": SHARDED}, write_empty_chunks=write_empty, zarr_format=3)
    assert (tmp_path / "a.zarr/temp/c/0/0/0").read_bytes() == (tmp_path / "b.zarr/temp/c/0/0/0").read_bytes()
    check_reads(tmp_path / "a.zarr", ds)


def _chunk_files(root: Path, name: str) -> int:
    return sum(len(files) for _, _, files in os.walk(root / name / "c"))


def test_write_empty_chunks_none_follows_encoding_and_zarr_config(tmp_path: Path) -> None:
    """As xarray: None (the default) takes each variable's encoding, else zarr's config; never a failure after
    the metadata was written (None once failed in the data tasks, leaving a store of metadata only)."""
    values = np.full((8, 6), np.nan)
    values[0, 0] = 1.0
    ds = xr.Dataset({"v": (("x", "y"), values)})
    old = xr.Dataset({"v": (("x", "y"), np.arange(48.0).reshape(8, 6))})
    xarray_zarrmax.to_zarr(old, tmp_path / "a.zarr")
    xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", mode="w", write_empty_chunks=None)
    check_reads(tmp_path / "a.zarr", ds)
    layout = {"chunks": (2, 3)}
    for name, kwargs, context in (
        ("encoding", {"encoding": {"v": {**layout, "write_empty_chunks": True}}}, {}),
        ("config", {"encoding": {"v": layout}}, {"array.write_empty_chunks": True}),
        ("default", {"encoding": {"v": layout}}, {}),
    ):
        import zarr

        with zarr.config.set(context):
            xarray_zarrmax.to_zarr(ds, tmp_path / f"{name}-zm.zarr", **kwargs)
            ds.to_zarr(tmp_path / f"{name}-xr.zarr", zarr_format=3, **kwargs)
        expected = _chunk_files(tmp_path / f"{name}-xr.zarr", "v")
        assert _chunk_files(tmp_path / f"{name}-zm.zarr", "v") == expected == (1 if name == "default" else 8)
        check_reads(tmp_path / f"{name}-zm.zarr", ds)


def test_whole_shard_of_fill_values_deletes_it(where: dict[str, Any]) -> None:
    ds = sample()
    write(where, ds, encoding={"temp": SHARDED})
    cleared = ds.isel(time=slice(8, 16))[["temp"]].copy(deep=True)
    cleared["temp"][:] = np.nan
    write(where, cleared.drop_vars(["time", "y", "x", "station"]), region={"time": slice(8, 16)})
    expected = ds.copy(deep=True)
    expected["temp"][8:16] = np.nan
    check_reads(where["read"], expected, **where["kwargs"])
    if where["target"].startswith("/"):
        assert not os.path.exists(os.path.join(where["target"], "temp/c/1/0/0"))


_EMPTY_CASES = [  # (dtype, fill value, first element, rest)
    *[(dt, fill, first, rest) for dt in ("f4", "f8", "f2")
      for fill in (0.0, -0.0, np.nan, 1.5, np.inf)
      for first in (0.0, -0.0, np.nan, 1.5, np.inf, 2.0)
      for rest in ("fill", "other")],
    *[(dt, fill, first, rest) for dt in ("i1", "u8", "i8", "?")
      for fill in (0, 1) for first in (0, 1) for rest in ("fill", "other")],
    ("u8", 2**63 + 1, 2**63, "fill"),  # equal as float64, different as integers
    ("f8", np.nan, np.frombuffer(np.uint64(0x7FF8000000000001).tobytes(), "f8")[0], "fill"),  # another NaN
    ("f8", np.nan, -np.nan, "fill"),
]


@pytest.mark.parametrize("dtype, fill, first, rest", _EMPTY_CASES)
def test_empty_chunks_are_decided_as_zarr_decides(dtype: str, fill: Any, first: Any, rest: str) -> None:
    """The shortcut that answers "not empty" from a chunk's first element agrees with zarr's chunk_is_empty on
    every fill value and element, NaN, -0.0 (zarr compares bit patterns for a 0.0 fill) and uint64 included."""
    from zarr.core.array_spec import ArrayConfig, ArraySpec
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.chunk_utils import chunk_is_empty
    from zarr.core.dtype import parse_dtype

    from xarray_zarrmax.codecs.encode import _is_empty

    zdtype = parse_dtype(np.dtype(dtype), zarr_format=3)
    fill_value = zdtype.cast_scalar(fill)
    chunk = np.full((3, 4), fill_value if rest == "fill" else zdtype.cast_scalar(1), dtype=dtype)
    chunk[0, 0] = first
    for write_empty in (False, True):
        spec = ArraySpec(shape=chunk.shape, dtype=zdtype, fill_value=fill_value,
                         config=ArrayConfig(order="C", write_empty_chunks=write_empty),
                         prototype=default_buffer_prototype())
        expected = bool(chunk_is_empty(default_buffer_prototype().nd_buffer.from_numpy_array(chunk), spec))
        assert _is_empty(chunk, spec) is expected, (dtype, fill, first, rest, write_empty)
        assert _is_empty(chunk[:, ::-2], spec) is bool(chunk_is_empty(
            default_buffer_prototype().nd_buffer.from_numpy_array(chunk[:, ::-2]), spec))
