"""xarray_zarrmax.to_zarr: what it writes reads back identically with engine="zarr" and engine="zarrmax",
matches Dataset.to_zarr's metadata, sends one PUT per shard, and loses nothing under concurrent writers."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import xarray_zarrmax
from xarray_zarrmax import request_counts, set_config
from xarray_zarrmax.errors import ObjectChanged
from xarray_zarrmax.storage import sinks
from xarray_zarrmax.testing import MinioServer
from xarray_zarrmax.write.plan import aligned_chunks, check_aligned, misaligned_boundary, objects_for_block

_counter = itertools.count()

NT, NY, NX = 20, 6, 8
SHARDED = {"chunks": (2, 3, 4), "shards": (8, 6, 8)}  # 3 shards along time, the last one partial


def sample(nt: int = NT, t0: int = 0) -> xr.Dataset:
    """CF time, NaNs, attributes, ints, a string coordinate and a scalar: what encoding must get right."""
    rng = np.random.default_rng(t0)
    temp = rng.normal(size=(nt, NY, NX)).astype("f4")
    temp[0, 0, :3] = np.nan
    return xr.Dataset(
        {
            "temp": (("time", "y", "x"), temp, {"units": "K", "long_name": "temperature"}),
            "count": (("time",), np.arange(t0, t0 + nt, dtype="i4")),
            "flag": ((), np.int8(3)),
        },
        coords={
            "time": pd.date_range("2020-01-01", periods=nt, freq="6h") + pd.Timedelta(hours=6 * t0),
            "y": np.linspace(-1, 1, NY),
            "x": np.arange(NX),
            "station": (("x",), np.array([f"s{i}" for i in range(NX)])),
        },
        attrs={"title": "sample", "history": "made in a test"},
    )


def check_reads(target: Any, expected: xr.Dataset, oracle: Any = None, **kwargs: Any) -> None:
    """Both engines read back exactly ``expected``: values, dtypes, attributes, CF encoding. ``oracle``: what
    engine="zarr" opens when it cannot open ``target`` itself (s3:// needs s3fs; an ObjectStore does not)."""
    for engine, what, options in (("zarr", oracle or target, {} if oracle is not None else kwargs),
                                  ("zarrmax", target, kwargs)):
        with xr.open_dataset(what, engine=engine, **options) as got:
            xr.testing.assert_identical(got.load(), expected)


def s3_oracle(minio: MinioServer, url: str) -> Any:
    """zarr's ObjectStore over the same objects: what engine="zarr" reads an s3:// URL with here."""
    from zarr.storage import ObjectStore

    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    return ObjectStore(minio.obstore(bucket, prefix), read_only=True)


@pytest.fixture(params=["local", "minio"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """A fresh target: what to_zarr writes to and what the readers open."""
    if request.param == "local":
        path = str(tmp_path / "out.zarr")
        return {"target": path, "read": path, "kwargs": {}}
    minio: MinioServer = request.getfixturevalue("minio")
    bucket = request.getfixturevalue("bucket")
    url = f"s3://{bucket}/w{next(_counter)}.zarr"
    so = minio.storage_options()
    return {"target": url, "read": url, "kwargs": {"storage_options": so, "oracle": s3_oracle(minio, url)},
            "write": {"storage_options": so}}


def write(where: dict[str, Any], ds: xr.Dataset, **kwargs: Any) -> Any:
    return xarray_zarrmax.to_zarr(ds, where["target"], **where.get("write", {}), **kwargs)


# -- metadata and values --------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunked", [False, True], ids=["numpy", "dask"])
def test_roundtrip_both_engines(where: dict[str, Any], chunked: bool) -> None:
    ds = sample()
    if chunked:
        ds = ds.chunk({"time": 8})
    write(where, ds, encoding={"temp": SHARDED})
    check_reads(where["read"], sample(), **where["kwargs"])


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


def test_metadata_in_one_batch_then_one_put_per_shard(where: dict[str, Any]) -> None:
    ds = sample().chunk({"time": 8})
    with request_counts() as counts:
        write(where, ds, encoding={"temp": SHARDED}, consolidated=False)
    puts = [key for _, kind, key in counts.keys if kind == "put"]
    shards = [k for k in puts if k.startswith("temp/c/")]
    assert sorted(shards) == [f"temp/c/{t}/0/0" for t in range(3)]  # 3 shards, one PUT each
    documents = ["zarr.json"] + [f"{a}/zarr.json" for a in ("temp", "count", "flag", "time", "y", "x", "station")]
    assert sorted(k for k in puts if k.endswith("zarr.json")) == sorted(documents)
    assert all(k.endswith("zarr.json") for k in puts[:len(documents)])  # all metadata first, then data
    check_reads(where["read"], sample(), **where["kwargs"])


def test_shards_reach_the_store_in_parts_never_joined(where: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard goes to the store as its encoded chunks and index, never joined into one new buffer (a copy of
    the whole shard into fresh memory: docs/performance-analysis.md). Region writes included: their merged
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


def test_one_dask_task_per_shard(tmp_path: Path) -> None:
    """Writing runs exactly one write task per shard (dask chunk = shard here)."""
    calls = []
    seen = threading.Lock()
    original = xarray_zarrmax.write.dataset.write_blocks

    def counting(blocks: Any, write: Any, sink: Any, starts: list[tuple[int, ...]]) -> int:
        with seen:
            calls.append((write.path, starts))
        return original(blocks, write, sink, starts)

    ds = sample().drop_vars(["count", "flag"]).chunk({"time": 8})
    import unittest.mock

    with unittest.mock.patch.object(xarray_zarrmax.write.dataset, "write_blocks", counting):
        xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED})
    assert sorted(starts for path, starts in calls if path == "temp") == [[(0, 0, 0)], [(8, 0, 0)], [(16, 0, 0)]]
    check_reads(tmp_path / "a.zarr", sample().drop_vars(["count", "flag"]))


def test_each_write_task_depends_on_its_own_block_only(tmp_path: Path) -> None:
    """A task must receive one block, never the whole array (a dask array inside a task's arguments would make
    every task wait for, and hold, all of it)."""
    from dask.core import get_dependencies

    ds = sample().chunk({"time": 8})
    delayed = xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED}, compute=False)
    graph = dict(delayed.__dask_graph__())
    tasks = [key for key in graph if str(key[0] if isinstance(key, tuple) else key).startswith("write_block")]
    # temp and count (8, 8, 4) and station; flag and the index coordinates are numpy: written at once, as
    # Dataset.to_zarr does with compute=False
    assert len(tasks) == 3 + 3 + 1
    assert all(len(get_dependencies(graph, key)) == 1 for key in tasks)


def test_tasks_run_in_other_processes(minio: MinioServer, bucket: str) -> None:
    """Tasks pickle (sink with its credentials, codec with zarr's metadata) and write from spawned workers."""
    url, so = f"s3://{bucket}/procs{next(_counter)}.zarr", minio.storage_options()
    ds = sample().chunk({"time": 8})
    delayed = xarray_zarrmax.to_zarr(ds, url, encoding={"temp": SHARDED}, storage_options=so, compute=False)
    with dask.config.set(scheduler="processes", num_workers=2):
        delayed.compute()
    check_reads(url, sample(), oracle=s3_oracle(minio, url), storage_options=so)


# -- chunk alignment --------------------------------------------------------------------------------------------


def test_misaligned_dask_chunks_name_variable_dimension_and_sizes(tmp_path: Path) -> None:
    ds = sample().chunk({"time": 5})
    with pytest.raises(ValueError, match=r"variable 'temp'.*dimension 'time'.*\(5, 5, 5, 5\).*element 5.*8"):
        xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED})
    assert not (tmp_path / "a.zarr/zarr.json").exists()  # refused before anything was written


@pytest.mark.parametrize("option", [{"align_chunks": True}, {"safe_chunks": False}])
def test_align_chunks_rechunks_to_shards(tmp_path: Path, option: dict[str, bool]) -> None:
    """safe_chunks=False (xarray: "skip the check, I take the risk") rechunks as align_chunks=True does: no
    shard is ever written by two tasks, so there is no risk to take."""
    ds = sample().chunk({"time": 5})
    with pytest.raises(ValueError, match=r"align_chunks=True \(or safe_chunks=False\)"):
        xarray_zarrmax.to_zarr(ds, tmp_path / "refused.zarr", encoding={"temp": SHARDED})
    xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED}, **option)
    check_reads(tmp_path / "a.zarr", sample())
    with pytest.raises(ValueError, match="expected safe_chunks as a bool. Got 'no'"):
        xarray_zarrmax.to_zarr(ds, tmp_path / "b.zarr", safe_chunks="no")  # type: ignore[arg-type]


def test_chunkmanager_store_kwargs_reach_dask_compute(tmp_path: Path) -> None:
    """As Dataset.to_zarr: chunkmanager_store_kwargs are the keywords the data tasks are computed with (here a
    scheduler that counts the graphs it runs); store-only ones are refused by name; a lock is not needed."""
    graphs = []

    def counting_scheduler(graph: Any, keys: Any, **kwargs: Any) -> Any:
        graphs.append(keys)
        return dask.get(graph, keys, **kwargs)

    ds = sample().chunk({"time": 8})
    xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED},
                           chunkmanager_store_kwargs={"scheduler": counting_scheduler, "lock": False})
    assert len(graphs) == 1 and any("zarrmax-done" in str(k) for k in graphs[0])
    check_reads(tmp_path / "a.zarr", sample())
    with pytest.raises(ValueError, match=r"\['regions', 'return_stored'\] are arguments of dask.array.store"):
        xarray_zarrmax.to_zarr(ds, tmp_path / "b.zarr", chunkmanager_store_kwargs={"regions": None,
                                                                                  "return_stored": True})
    assert not (tmp_path / "b.zarr").exists()


@pytest.mark.parametrize("name", [None, "temp", "time"])
def test_a_dataarray_is_written_as_dataarray_to_zarr_writes_it(tmp_path: Path, name: str | None) -> None:
    """Unnamed, named, and named like one of its coordinates: xr.open_dataarray reads back what it reads from
    DataArray.to_zarr's store, with both engines."""
    array = sample()["temp"].rename(name)
    xarray_zarrmax.to_zarr(array, tmp_path / "a.zarr")
    array.to_zarr(tmp_path / "b.zarr", zarr_format=3, consolidated=True)
    expected = xr.open_dataarray(tmp_path / "b.zarr", engine="zarr").load()
    assert expected.name == name
    for engine in ("zarr", "zarrmax"):
        with xr.open_dataarray(tmp_path / "a.zarr", engine=engine) as got:
            xr.testing.assert_identical(got.load(), expected)
    with pytest.raises(TypeError, match="writes an xarray Dataset or DataArray. Got ndarray"):
        xarray_zarrmax.to_zarr(np.zeros(3), tmp_path / "c.zarr")


# -- empty chunks -------------------------------------------------------------------------------------------------


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


def test_write_empty_chunks_of_the_wrong_type_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="expected write_empty_chunks as a bool or None. Got 'yes'"):
        xarray_zarrmax.to_zarr(sample(), tmp_path / "a.zarr", write_empty_chunks="yes")  # type: ignore[arg-type]
    assert not (tmp_path / "a.zarr").exists()


def test_zarr_format_none_is_format_3_and_2_is_refused(tmp_path: Path) -> None:
    xarray_zarrmax.to_zarr(sample(), tmp_path / "a.zarr", zarr_format=None)
    assert json.loads((tmp_path / "a.zarr/zarr.json").read_text())["zarr_format"] == 3
    with pytest.raises(ValueError, match="Zarr format 3 only. Got zarr_format=2"):
        xarray_zarrmax.to_zarr(sample(), tmp_path / "b.zarr", zarr_format=2)


@pytest.mark.parametrize("how", ["mode a", "append", "region", "group below"])
def test_an_existing_zarr_v2_store_is_refused_not_hidden(tmp_path: Path, how: str) -> None:
    """A v3 group written beside a v2 group's .zgroup hides every v2 variable from readers: refused, and the
    store is left as it was."""
    target = tmp_path / "v2.zarr"
    old = xr.Dataset({"a": (("x",), np.arange(8.0))}, attrs={"title": "v2"})
    old.to_zarr(target, zarr_format=2)
    before = sorted(str(p.relative_to(target)) for p in target.rglob("*"))
    kwargs: dict[str, Any] = {
        "mode a": {"mode": "a"},
        "append": {"append_dim": "x"},
        "region": {"region": {"x": slice(2, 4)}},
        "group below": {"group": "sub/inner", "mode": "w"},
    }[how]
    new = old.isel(x=slice(2, 4)) * 10 if how == "region" else xr.Dataset({"c": (("y",), np.ones(3))})
    if how == "append":
        new = old
    with pytest.raises(ValueError, match=r"holds a Zarr format 2 group \('(sub/)?\.zgroup'\).*format 3 only"):
        xarray_zarrmax.to_zarr(new, target, **kwargs)
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == before
    with xr.open_dataset(target, engine="zarr") as got:
        xr.testing.assert_identical(got.load(), old)


@pytest.mark.parametrize("how", ["append", "group below"])
def test_a_store_in_both_formats_is_written_as_v3(tmp_path: Path, how: str) -> None:
    """A v3 store that also carries a v2 .zgroup (written for old readers) is v3 to every reader: writing into
    it hides nothing, and xarray writes there (found by a review: refused as a v2 store)."""
    target = tmp_path / "both.zarr"
    old = xr.Dataset({"a": (("x",), np.arange(4.0))})
    xarray_zarrmax.to_zarr(old, target, consolidated=False)
    (target / ".zgroup").write_text('{"zarr_format": 2}')
    if how == "append":
        xarray_zarrmax.to_zarr(old, target, append_dim="x", consolidated=False)
        check_reads(target, xr.concat([old, old], dim="x"), consolidated=False)
    else:
        xarray_zarrmax.to_zarr(old * 2, target, group="sub", mode="w", consolidated=False)
        check_reads(target, old * 2, group="sub", consolidated=False)


def test_mode_w_replaces_a_zarr_v2_store(tmp_path: Path) -> None:
    target = tmp_path / "v2.zarr"
    xr.Dataset({"a": (("x",), np.arange(8.0))}).to_zarr(target, zarr_format=2)
    new = xr.Dataset({"c": (("y",), np.ones(3))})
    xarray_zarrmax.to_zarr(new, target, mode="w")
    assert not (target / ".zgroup").exists() and not (target / "a").exists()
    check_reads(target, new)


def test_a_read_only_store_is_refused_and_left_alone(tmp_path: Path) -> None:
    import zarr

    old = xr.Dataset({"keep": (("y",), np.arange(3.0))})
    xarray_zarrmax.to_zarr(old, tmp_path / "a.zarr")
    for path, mode in ((tmp_path / "a.zarr", "w"), (tmp_path / "new.zarr", "w-")):
        with pytest.raises(ValueError, match="Store is read-only: to_zarr needs a writable store"):
            xarray_zarrmax.to_zarr(sample(), zarr.storage.LocalStore(path, read_only=True), mode=mode)
    assert not (tmp_path / "new.zarr").exists()
    check_reads(tmp_path / "a.zarr", old)


@pytest.mark.parametrize("kwargs", [{"mode": "r+"}, {"region": {"time": slice(0, 2)}}])
def test_writing_into_a_missing_store_creates_nothing(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    ds = sample().isel(time=slice(0, 2)) if "region" in kwargs else sample()
    with pytest.raises(FileNotFoundError) as info:
        xarray_zarrmax.to_zarr(ds.drop_vars(["flag"]), tmp_path / "missing.zarr", **kwargs)
    assert f"file://{tmp_path / 'missing.zarr'}" in str(info.value) and "Staging" not in str(info.value)
    assert not (tmp_path / "missing.zarr").exists()


def test_dask_chunks_of_unknown_size_are_refused_by_name(tmp_path: Path) -> None:
    import dask.array as da

    values = da.from_array(np.arange(6.0), chunks=3)
    ds = xr.Dataset({"a": (("x",), values[values > 1])})
    with pytest.raises(ValueError, match=r"variable 'a' has dask chunks of unknown size \(\(nan, nan\),\)"):
        xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr")
    assert not (tmp_path / "a.zarr").exists()


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


# -- regions, appends, overwrites -----------------------------------------------------------------------------


def test_region_write_merges_partial_shards(where: dict[str, Any]) -> None:
    ds = sample()
    write(where, ds, encoding={"temp": SHARDED})
    new = sample(nt=7, t0=100).isel(time=slice(0, 7))
    part = new[["temp"]].drop_vars(["time", "y", "x", "station"])
    write(where, part, region={"time": slice(5, 12)})  # ends of shard 0 and start of shard 1
    expected = ds.copy(deep=True)
    expected["temp"][5:12] = new["temp"].values
    check_reads(where["read"], expected, **where["kwargs"])


def test_region_auto(tmp_path: Path) -> None:
    ds = sample()
    xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED})
    part = ds.isel(time=slice(3, 9))[["temp"]].drop_vars(["station"]) * 2
    part["temp"].attrs = ds["temp"].attrs
    xarray_zarrmax.to_zarr(part, tmp_path / "a.zarr", region="auto", mode="r+")
    expected = ds.copy(deep=True)
    expected["temp"][3:9] = ds["temp"][3:9].values * 2
    check_reads(tmp_path / "a.zarr", expected)


def test_append_merges_the_last_partial_shard(where: dict[str, Any]) -> None:
    first = sample(nt=12)
    write(where, first.chunk({"time": 8}), encoding={"temp": SHARDED})
    second = sample(nt=9, t0=12)
    write(where, second.drop_vars(["flag", "y", "x", "station"]).chunk({"time": (4, 5)}), append_dim="time")
    expected = xr.concat([first, second], dim="time", data_vars="minimal", coords="minimal", compat="override")
    expected["flag"] = first["flag"]
    check_reads(where["read"], expected, **where["kwargs"])


def test_an_append_reads_each_document_of_the_target_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the target holds is read once per key while a write is prepared (xarray's writer reads an array's
    document twice, the write reads it again for the stored shape: each a round trip on S3), and the check for
    Zarr v2 documents goes with the first read of the group's."""
    from zarr.storage import WrapperStore

    path = tmp_path / "a.zarr"
    xarray_zarrmax.to_zarr(sample(), path, encoding={"temp": SHARDED}, consolidated=False)
    requests: list[tuple[str, str]] = []

    class Recording(WrapperStore):  # type: ignore[type-arg]
        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            requests.append(("get", key))
            return await self._store.get(key, prototype, byte_range)

        async def exists(self, key: str) -> bool:
            requests.append(("exists", key))
            return await self._store.exists(key)

    original = sinks.LocalSink.existing_store
    monkeypatch.setattr(sinks.LocalSink, "existing_store", lambda self: Recording(original(self)))
    more = sample(nt=4, t0=NT).drop_vars(["flag", "y", "x", "station"])
    xarray_zarrmax.to_zarr(more, path, append_dim="time", consolidated=False)
    gets = [key for kind, key in requests if kind == "get"]
    assert sorted(gets) == sorted(set(gets)) and "temp/zarr.json" in gets, requests
    assert requests[:3] == [("exists", ".zgroup"), ("exists", ".zarray"), ("get", "zarr.json")]
    expected = xr.concat([sample(), sample(nt=4, t0=NT)], dim="time", data_vars="minimal", coords="minimal",
                         compat="override")
    expected["flag"] = sample()["flag"]
    check_reads(path, expected)


def test_mode_w_replaces_everything(where: dict[str, Any]) -> None:
    write(where, sample(), encoding={"temp": SHARDED})
    other = xr.Dataset({"other": (("z",), np.arange(3.0))})
    write(where, other, mode="w")
    check_reads(where["read"], other, **where["kwargs"])


def test_mode_w_minus_refuses_an_existing_store(tmp_path: Path) -> None:
    xarray_zarrmax.to_zarr(sample(), tmp_path / "a.zarr")
    with pytest.raises(FileExistsError) as info:
        xarray_zarrmax.to_zarr(sample(), tmp_path / "a.zarr")
    assert any(str(tmp_path / "a.zarr") in note for note in info.value.__notes__)


def test_compute_false_writes_metadata_now_data_later(tmp_path: Path) -> None:
    """As Dataset.to_zarr: metadata and numpy-backed variables now, dask arrays when computed."""
    ds = sample().chunk({"time": 8})
    ds["y"] = ds["y"].compute()
    delayed = xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED}, compute=False)
    assert (tmp_path / "a.zarr/temp/zarr.json").exists()
    assert not (tmp_path / "a.zarr/temp/c").exists()
    assert (tmp_path / "a.zarr/y/c/0").exists()  # numpy-backed: written now
    assert delayed.compute() > 0
    check_reads(tmp_path / "a.zarr", sample())


# -- writes computed after the array changed under them ---------------------------------------------------------

GROWN = {"v": {"chunks": (4,), "shards": (8,)}}


def _grown_scenario(root: Path, tool: str, layout: dict[str, Any], first: str, region: slice) -> np.ndarray:
    """An array of 10 values; a write prepared with compute=False (a region write, or an append); the array
    then grows by 4 (a plain Dataset.to_zarr append); then the prepared write is computed."""
    import dask.array as da

    path = str(root / f"{tool}.zarr")
    xr.Dataset({"v": ("t", np.arange(10.0))}).to_zarr(path, encoding=layout, zarr_format=3)
    if first == "region":
        values = np.arange(100.0, 100.0 + region.stop - region.start)
        kwargs: dict[str, Any] = {"region": {"t": region}}
    else:
        values, kwargs = np.array([10.0, 11.0]), {"append_dim": "t"}
    update = xr.Dataset({"v": ("t", da.from_array(values, chunks=len(values)))})
    if tool == "zarr":
        delayed = update.to_zarr(path, compute=False, safe_chunks=False, zarr_format=3, **kwargs)
    else:
        delayed = xarray_zarrmax.to_zarr(update, path, compute=False, **kwargs)
    start = 10 if first == "region" else 12
    xr.Dataset({"v": ("t", np.arange(500.0, 504.0))}).to_zarr(path, append_dim="t")
    delayed.compute()
    got = xr.open_dataset(path, engine="zarr")["v"].values
    assert np.array_equal(got[start:start + 4], np.arange(500.0, 504.0)), got
    return got


@pytest.mark.parametrize("layout", [GROWN, {"v": {"chunks": (4,)}}], ids=["sharded", "unsharded"])
@pytest.mark.parametrize("first, region", [("region", slice(8, 10)), ("region", slice(9, 10)),
                                           ("region", slice(7, 10)), ("append", slice(0, 0))])
def test_a_write_computed_after_the_array_grew_keeps_what_was_appended(tmp_path: Path, layout: dict[str, Any],
                                                                      first: str, region: slice) -> None:
    """The objects at the edge of the array a write was prepared for may hold data past that edge by the time
    it is computed: they are merged, never replaced (nor their inner chunks past the old edge left out)."""
    got = _grown_scenario(tmp_path, "zarrmax", layout, first, region)
    if layout is GROWN:  # zarr-python's partial shard writes keep them too: the same store, value for value
        np.testing.assert_array_equal(got, _grown_scenario(tmp_path, "zarr", layout, first, region))


def test_a_new_array_written_with_compute_false_replaces_what_was_written_meanwhile(tmp_path: Path) -> None:
    """compute=False then a region write into the new array, then the first write computed: as with
    Dataset.to_zarr, the store holds what the first write wrote (its all-NaN shards delete the region's)."""
    import dask.array as da

    stores = {}
    for tool in ("zarr", "zarrmax"):
        path = stores[tool] = str(tmp_path / f"{tool}.zarr")
        template = xr.Dataset({"v": ("t", da.full(16, np.nan, chunks=8))})
        if tool == "zarr":
            delayed = template.to_zarr(path, compute=False, encoding=GROWN, zarr_format=3)
        else:
            delayed = xarray_zarrmax.to_zarr(template, path, compute=False, encoding=GROWN)
        xr.Dataset({"v": ("t", np.arange(3.0, 13.0))}).to_zarr(path, region={"t": slice(3, 13)})
        delayed.compute()
    for engine in ("zarr", "zarrmax"):
        got = xr.open_dataset(stores["zarrmax"], engine=engine)["v"].values
        np.testing.assert_array_equal(got, xr.open_dataset(stores["zarr"], engine="zarr")["v"].values)
        assert np.isnan(got).all()


# -- concurrent writers of the same shards -----------------------------------------------------------------------

NWRITERS = 16
CONC = {"chunks": (1, 6, 8), "shards": (8, 6, 8)}  # 16 time steps = 2 shards, 8 writers each


def _base_for_concurrency() -> xr.Dataset:
    return xr.Dataset({"v": (("time", "y", "x"), np.full((NWRITERS, NY, NX), -1.0))})


def _one_step(t: int) -> xr.Dataset:
    return xr.Dataset({"v": (("time", "y", "x"), np.full((1, NY, NX), float(t)))})


def _expected_after_concurrency() -> xr.Dataset:
    return xr.Dataset({"v": (("time", "y", "x"), np.repeat(np.arange(NWRITERS, dtype="f8"), NY * NX)
                             .reshape(NWRITERS, NY, NX))})


def _write_step(target: str, t: int, storage_options: dict[str, Any] | None) -> None:
    xarray_zarrmax.to_zarr(_one_step(t), target, region={"time": slice(t, t + 1)}, storage_options=storage_options)


def test_concurrent_partial_writers_lose_nothing_minio(minio: MinioServer, bucket: str) -> None:
    """16 threads each write one time step; 8 share each shard, so every write is a read-merge-write
    racing 7 others. Every value must be there."""
    url, so = f"s3://{bucket}/conc{next(_counter)}.zarr", minio.storage_options()
    xarray_zarrmax.to_zarr(_base_for_concurrency(), url, encoding={"v": CONC}, storage_options=so)
    start = threading.Barrier(NWRITERS)

    def run(t: int) -> None:
        start.wait()
        _write_step(url, t, so)

    with ThreadPoolExecutor(NWRITERS) as pool:
        list(pool.map(run, range(NWRITERS)))
    check_reads(url, _expected_after_concurrency(), oracle=s3_oracle(minio, url), storage_options=so)


def test_concurrent_partial_writers_lose_nothing_local_processes(tmp_path: Path) -> None:
    """The same from 4 processes of 4 threads each, into a local directory (locks across processes)."""
    target = str(tmp_path / "a.zarr")
    xarray_zarrmax.to_zarr(_base_for_concurrency(), target, encoding={"v": CONC})
    steps = [list(range(i, NWRITERS, 4)) for i in range(4)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        pool.starmap(_write_steps_threaded, [(target, s) for s in steps])
    check_reads(target, _expected_after_concurrency())


def _write_steps_threaded(target: str, steps: list[int]) -> None:
    with ThreadPoolExecutor(len(steps)) as pool:
        list(pool.map(lambda t: _write_step(target, t, None), steps))


def test_stale_etag_is_refused_so_merges_cannot_lose_data(minio: MinioServer, bucket: str) -> None:
    """The interleaving that loses data without conditions, made deterministic: A reads, B writes, A writes.
    With If-Match on the ETag A read, A's PUT is refused (and then merged again); an unconditional PUT
    would have replaced B's write with A's stale merge. Measured here with the 16 writers of
    test_concurrent_partial_writers_lose_nothing_minio and the PUTs made unconditional: 10 to 13 of the 16
    time steps lost (3 runs each, twice), none with the conditions (zarr-python's to_zarr: 40 of 64 with 8
    writers, see DESIGN.md)."""
    from xarray_zarrmax.storage.sources import s3_store_from_url

    sink = sinks.ObstoreSink(s3_store_from_url(f"s3://{bucket}/etag{next(_counter)}", minio.storage_options()))
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
    from xarray_zarrmax.storage.sources import s3_store_from_url

    sink = sinks.ObstoreSink(s3_store_from_url(f"s3://{bucket}/race{next(_counter)}", minio.storage_options()))
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
    from xarray_zarrmax.storage.sources import s3_store_from_url

    sink = sinks.ObstoreSink(s3_store_from_url(f"s3://{bucket}/lost{next(_counter)}", minio.storage_options()))
    run_sync(sink.put_async("k", b"ab"))
    original = sinks.ObstoreSink.put_async
    failed = []

    async def applied_then_broken(self: Any, key: str, data: bytes, mode: Any = None) -> None:
        await original(self, key, data, mode)
        if mode is not None and not failed:
            failed.append(key)
            raise RequestFailed(f"PUT {key!r} on {self.label} failed: HTTP error: error sending request", None)

    monkeypatch.setattr(sinks.ObstoreSink, "put_async", applied_then_broken)
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
    from xarray_zarrmax.storage.sources import s3_store_from_url

    sink = sinks.ObstoreSink(s3_store_from_url(f"s3://{bucket}/new{next(_counter)}", minio.storage_options()))
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
    from xarray_zarrmax.storage.sources import s3_store_from_url

    sink = sinks.ObstoreSink(s3_store_from_url(f"s3://{bucket}/c409{next(_counter)}", minio.storage_options()))
    original = sinks.ObstoreSink.put_async
    conflicts = []

    async def conflicting(self: Any, key: str, data: bytes, mode: Any = None) -> None:
        if mode is not None and not conflicts:
            conflicts.append(mode)
            await original(self, key, b"theirs + ")  # the write in flight beside ours
            raise RequestFailed(f"PUT {key!r} on {self.label} failed: Generic S3 error: "
                                "ConditionalRequestConflict", 409)
        await original(self, key, data, mode)

    monkeypatch.setattr(sinks.ObstoreSink, "put_async", conflicting)
    sink.update("k", lambda stored: (b"" if stored is None else bytes(stored)) + b"mine", likely_new=likely_new)
    assert conflicts == ["create"]
    assert bytes(run_sync(sink.source.get("k"))) == b"theirs + mine"


def test_an_append_creates_its_new_edge_objects_without_reading_them(where: dict[str, Any]) -> None:
    """Objects wholly past the stored extent (an append's, and those cut by the edge of a dimension that does
    not grow) are created with one conditional PUT each on S3, not read first; an object the append shares
    with what is stored is read and merged."""
    on_s3 = where["target"].startswith("s3://")  # local reads of missing files are no round trips: not saved
    grid = xr.Dataset({"v": (("t", "y"), np.arange(4 * 37.0).reshape(4, 37)), "w": (("x",), np.arange(16.0))})
    write(where, grid, encoding={"v": {"chunks": (1, 64)}, "w": {"chunks": (4,), "shards": (8,)}})
    more = xr.Dataset({"v": (("t", "y"), -np.arange(3 * 37.0).reshape(3, 37))})
    with request_counts() as counts:
        write(where, more, append_dim="t")
    if on_s3:
        assert sorted((kind, key) for _, kind, key in counts.keys if "/c/" in key) == [
            ("put", f"v/c/{t}/0") for t in range(4, 7)]
    for appended, shared in ((np.array([16.0, 17.0, 18.0]), False), (np.array([19.0, 20.0]), True)):
        with request_counts() as counts:
            write(where, xr.Dataset({"w": (("x",), appended)}), append_dim="x")
        if on_s3:
            assert sorted((kind, key) for _, kind, key in counts.keys if "/c/" in key) == (
                [("get", "w/c/2")] * shared + [("put", "w/c/2")])
    expected = xr.Dataset({"v": xr.concat([grid["v"], more["v"]], dim="t"), "w": (("x",), np.arange(21.0))})
    check_reads(where["read"], expected, **where["kwargs"])


def test_a_prepared_append_whose_new_shard_was_created_meanwhile_merges_into_it(where: dict[str, Any]) -> None:
    """An append prepared with compute=False guesses its edge shard absent (it lay past the stored array);
    another append creates it before the first is computed: the first's create fails, it reads and merges,
    and both appends' values are kept."""
    import dask.array as da

    write(where, xr.Dataset({"w": (("x",), np.arange(8.0))}), encoding={"w": {"chunks": (4,), "shards": (8,)}})
    prepared = write(where, xr.Dataset({"w": (("x",), da.from_array(np.array([8.0, 9.0]), chunks=2))}),
                     append_dim="x", compute=False)
    write(where, xr.Dataset({"w": (("x",), np.arange(10.0, 14.0))}), append_dim="x")
    with request_counts() as counts:
        prepared.compute()
    data = sorted((kind, key) for _, kind, key in counts.keys if "/c/" in key)
    if where["target"].startswith("s3://"):
        assert data == [("get", "w/c/1"), ("put", "w/c/1"), ("put", "w/c/1")]  # a failed create, a merge
    check_reads(where["read"], xr.Dataset({"w": (("x",), np.arange(14.0))}), **where["kwargs"])


# -- failures -----------------------------------------------------------------------------------------------------


def test_a_file_where_a_chunk_directory_belongs_is_refused_as_zarr_refuses_it(tmp_path: Path) -> None:
    """A plain file where a chunk directory should be: the same error type as Dataset.to_zarr's, naming the
    path, with the key and store in a note; nothing is written beside it."""
    import shutil

    ds = xr.Dataset({"v": (("t", "x"), np.arange(16, dtype="f4").reshape(4, 4))})
    encoding = {"v": {"chunks": (1, 2), "shards": (2, 4)}}
    part = ds.isel(t=slice(2, 4)) + 100
    errors = []
    for name in ("zarr", "zarrmax"):
        root = tmp_path / f"{name}.zarr"
        ds.to_zarr(root, encoding=encoding, consolidated=False, zarr_format=3)
        shutil.rmtree(root / "v/c/1")
        (root / "v/c/1").write_bytes(b"x")
        with pytest.raises(OSError) as info:
            if name == "zarr":
                part.to_zarr(root, region={"t": slice(2, 4)}, consolidated=False)
            else:
                xarray_zarrmax.to_zarr(part, root, region={"t": slice(2, 4)}, consolidated=False)
        errors.append(info.value)
        assert (root / "v/c/1").read_bytes() == b"x" and sorted(os.listdir(root / "v/c")) == ["0", "1"]
    theirs, ours = errors
    assert type(ours) is type(theirs) is FileExistsError
    assert str(tmp_path / "zarrmax.zarr/v/c/1") in str(ours)
    assert any("'v/c/1/0'" in note for note in getattr(ours, "__notes__", []))


def test_failed_local_write_leaves_the_old_object_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = sample()
    xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED})
    shard = tmp_path / "a.zarr/temp/c/0/0/0"
    before = shard.read_bytes()

    def broken(src: str, dst: str, **dir_fds: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sinks.os, "replace", broken)
    changed = ds[["temp"]].isel(time=slice(0, 8)).drop_vars(["time", "y", "x", "station"]) + 1
    with pytest.raises(OSError, match="No space left") as info:
        xarray_zarrmax.to_zarr(changed, tmp_path / "a.zarr", region={"time": slice(0, 8)})
    notes = "\n".join(info.value.__notes__)
    assert "temp/c/0/0/0" in notes and "array 'temp'" in notes and str(tmp_path) in notes
    monkeypatch.undo()
    assert shard.read_bytes() == before
    assert not [p for p in shard.parent.iterdir() if p.name.endswith("zarrmax-tmp")]
    check_reads(tmp_path / "a.zarr", ds)


def test_errors_name_array_key_and_endpoint_never_the_secret(minio: MinioServer, bucket: str) -> None:
    """A refused write says which array, object and endpoint, and no credential: not the secret key, not a
    password in the endpoint URL."""
    password = "endpoint-pa55word-xyz"
    secret = "wrong-secret-key-0123456789"
    endpoint = minio.endpoint.replace("http://", f"http://user:{password}@")
    so = {**minio.storage_options(endpoint), "secret_access_key": secret}
    with pytest.raises(Exception) as info:
        xarray_zarrmax.to_zarr(sample(), f"s3://{bucket}/refused.zarr", storage_options=so)
    texts = _all_text(info.value)
    assert password not in texts and secret not in texts
    assert f"s3://{bucket}/refused.zarr" in texts and f"127.0.0.1:{minio.port}" in texts


def test_refused_and_unreachable_writes_raise_what_refused_reads_raise(minio: MinioServer, bucket: str) -> None:
    """Refused credentials and an endpoint nobody answers: a write raises the StoreAccessError (an OSError) a
    read of the same store raises, whether the target is new or holds an array, never obstore's own types
    (which are no OSError, so ``except OSError`` around a write would miss them)."""
    import socket

    from xarray_zarrmax.errors import StoreAccessError

    good = minio.storage_options()
    url = f"s3://{bucket}/held{next(_counter)}.zarr"
    xarray_zarrmax.to_zarr(sample(), url, storage_options=good)
    refused = {**good, "secret_access_key": "wrong-secret-key-0123456789"}
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    unreachable = {**good, "endpoint": f"http://127.0.0.1:{port}"}
    with set_config(retries=0):
        for options, word in ((refused, "refused: check the credentials"), (unreachable, "failed")):
            with pytest.raises(StoreAccessError, match=word):
                xr.open_dataset(url, engine="zarrmax", storage_options=options).load()
            for target, kwargs in ((f"s3://{bucket}/new{next(_counter)}.zarr", {}), (url, {"append_dim": "time"})):
                with pytest.raises(StoreAccessError, match=word) as info:
                    xarray_zarrmax.to_zarr(sample(), target, storage_options=options, **kwargs)
                assert isinstance(info.value, OSError)
                assert "nothing was written" in _all_text(info.value)
    check_reads(url, sample(), s3_oracle(minio, url), storage_options=good)  # the refused appends changed nothing


def test_data_errors_name_the_array(minio: MinioServer, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from xarray_zarrmax.errors import RequestFailed

    original = sinks.ObstoreSink.put_async

    async def failing(self: Any, key: str, data: bytes, mode: Any = None) -> None:
        if key.startswith("temp/c/"):
            raise RequestFailed(f"PUT {key!r} on {self.label} failed: simulated", 500)
        await original(self, key, data, mode)

    monkeypatch.setattr(sinks.ObstoreSink, "put_async", failing)
    url = f"s3://{bucket}/fail{next(_counter)}.zarr"
    with pytest.raises(RequestFailed) as info:
        xarray_zarrmax.to_zarr(sample(), url, encoding={"temp": SHARDED}, storage_options=minio.storage_options())
    texts = _all_text(info.value)
    assert "array 'temp'" in texts and "'temp/c/" in texts and f"127.0.0.1:{minio.port}" in texts
    assert minio.storage_options()["secret_access_key"] not in texts


def _all_text(err: BaseException) -> str:
    out, seen = [], set()
    todo: list[BaseException | None] = [err]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        out += [repr(e), str(e), *getattr(e, "__notes__", ())]
        todo += [e.__cause__, e.__context__]
    return "\n".join(out)


@pytest.mark.parametrize("wrapped", [False, True], ids=["obstore LocalStore", "zarr ObjectStore over it"])
def test_obstore_local_store_takes_partial_shard_writes(tmp_path: Path, wrapped: bool) -> None:
    """object_store's local file system has no conditional PUT, which a merge of a partly written shard needs
    ("PutMode::Update not yet implemented"): an obstore LocalStore target is written as the directory it is,
    region and append merges included, and matches what Dataset.to_zarr writes there."""
    from obstore.store import LocalStore
    from zarr.storage import ObjectStore

    ds = sample().chunk({"time": 8})
    region = sample(4, t0=5).drop_vars(["y", "x", "station", "flag"])
    stores = []
    for name in ("zarr", "zarrmax"):
        store: Any = LocalStore(str(tmp_path / f"{name}.zarr"), mkdir=True)
        stores.append(store)
        target = ObjectStore(store) if wrapped or name == "zarr" else store
        if name == "zarr":
            ds.to_zarr(target, encoding={"temp": SHARDED}, consolidated=False, zarr_format=3)
            region.to_zarr(target, region={"time": slice(5, 9)}, consolidated=False)
            sample(6, t0=NT).to_zarr(target, append_dim="time", consolidated=False)
        else:
            xarray_zarrmax.to_zarr(ds, target, encoding={"temp": SHARDED}, consolidated=False)
            xarray_zarrmax.to_zarr(region, target, region={"time": slice(5, 9)}, consolidated=False)
            xarray_zarrmax.to_zarr(sample(6, t0=NT), target, append_dim="time", consolidated=False)
    expected = xr.concat([sample(), sample(6, t0=NT)], dim="time", data_vars="minimal", coords="minimal",
                         compat="override")
    expected["temp"][5:9] = region["temp"].values
    expected["count"][5:9] = region["count"].values
    for root in ("zarr.zarr", "zarrmax.zarr"):
        check_reads(str(tmp_path / root), expected)
    theirs, ours = ((tmp_path / f"{n}.zarr/temp/c") for n in ("zarr", "zarrmax"))
    shards = sorted(str(p.relative_to(ours)) for p in ours.rglob("*") if p.is_file())
    assert shards == sorted(str(p.relative_to(theirs)) for p in theirs.rglob("*") if p.is_file())
    assert all((ours / k).read_bytes() == (theirs / k).read_bytes() for k in shards)


def test_refuses_stores_it_cannot_write_safely(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="local path, an s3:// URL"):
        xarray_zarrmax.to_zarr(sample(), {})
    with pytest.raises(ValueError, match="format 3 only"):
        xarray_zarrmax.to_zarr(sample(), tmp_path / "a.zarr", zarr_format=2)


# -- pure geometry --------------------------------------------------------------------------------------------


def test_objects_for_block() -> None:
    parts = list(objects_for_block((20,), (8,), (5,), (7,)))
    assert [(p.coords, p.in_object, p.in_block, p.whole) for p in parts] == [
        ((0,), (slice(5, 8),), (slice(0, 3),), False),
        ((1,), (slice(0, 4),), (slice(3, 7),), False),
    ]
    edge = list(objects_for_block((20, 3), (8, 4), (16, 0), (4, 3)))
    assert [(p.coords, p.whole) for p in edge] == [((2, 0), True)]  # the array ends inside the object
    assert [p.coords for p in objects_for_block((), (), (), ())] == [()]
    assert list(objects_for_block((5,), (2,), (0,), (0,))) == []


def test_objects_for_block_cover_every_element_once() -> None:
    for start, n in itertools.product(range(0, 12), range(1, 9)):
        if start + n > 20:
            continue
        covered = np.zeros(20, int)
        for p in objects_for_block((20,), (3,), (start,), (n,)):
            lo = p.coords[0] * 3
            covered[lo + p.in_object[0].start:lo + p.in_object[0].stop] += 1
            assert p.in_block[0].stop - p.in_block[0].start == p.in_object[0].stop - p.in_object[0].start
        assert covered.tolist() == [1 if start <= i < start + n else 0 for i in range(20)]


def test_alignment_rules() -> None:
    assert misaligned_boundary(0, (8, 8, 4), 8) is None
    assert misaligned_boundary(5, (3, 8, 2), 8) is None  # edges inside shards are fine
    assert misaligned_boundary(0, (5, 5), 8) == 5
    assert aligned_chunks(5, 15, 8) == (3, 8, 4)
    assert aligned_chunks(0, 16, 8) == (8, 8)
    assert aligned_chunks(0, 0, 8) == (0,)
    with pytest.raises(ValueError, match="'v'.*'t'"):
        check_aligned("v", ("t",), (0,), ((5, 5),), (8,), "shard")


@given(start=st.integers(0, 40), length=st.integers(0, 120), size=st.integers(1, 16),
       rows=st.integers(1, 5), target=st.integers(1, 4096), min_blocks=st.integers(1, 8))
def test_in_memory_data_is_cut_into_blocks_of_whole_objects(start: int, length: int, size: int, rows: int,
                                                           target: int, min_blocks: int) -> None:
    """Blocks of whole objects: every boundary between two blocks is an object boundary, and each block holds
    at most as many objects as fit in ``target`` (one at least) and as leave ``min_blocks`` blocks."""
    from xarray_zarrmax.write.plan import grouped_chunks

    chunks = grouped_chunks((start, 0), (length, rows), (size, 2), 8, target_bytes=target, min_blocks=min_blocks)
    assert tuple(sum(c) for c in chunks) == (length, rows)
    assert misaligned_boundary(start, chunks[0], size) is None and misaligned_boundary(0, chunks[1], 2) is None
    objects = len(aligned_chunks(start, length, size)) * len(aligned_chunks(0, rows, 2))
    most = max(1, min(target // (size * 2 * 8), -(-objects // min_blocks)))
    starts = np.cumsum((start, *chunks[0][:-1]))
    rows_starts = np.cumsum((0, *chunks[1][:-1]))
    for a, n in zip(starts, chunks[0], strict=True):
        for r, m in zip(rows_starts, chunks[1], strict=True):
            assert len(aligned_chunks(int(a), n, size)) * len(aligned_chunks(int(r), m, 2)) <= most


def test_in_memory_data_of_small_objects_is_written_in_few_tasks(tmp_path: Path) -> None:
    """Not one task per object: with 2 dask threads, 4 tasks for 240 chunks (each task sends its PUTs at
    once), and the store reads back as Dataset.to_zarr's."""
    calls = []
    original = xarray_zarrmax.write.dataset.write_blocks
    seen = threading.Lock()

    def counting(blocks: Any, write: Any, sink: Any, starts: list[tuple[int, ...]]) -> int:
        with seen:
            calls.extend((write.path, start, block.shape) for block, start in zip(blocks, starts, strict=True))
        return original(blocks, write, sink, starts)

    import unittest.mock

    values = np.random.default_rng(0).normal(size=(2, 721, 1440)).astype("f4")
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), values)})
    encoding = {"t2m": {"chunks": (1, 100, 100)}}
    with unittest.mock.patch.object(xarray_zarrmax.write.dataset, "write_blocks", counting), \
            dask.config.set(num_workers=2):
        xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding=encoding)
    assert sorted(calls) == [("t2m", (t, lat, 0), (1, n, 1440)) for t in (0, 1) for lat, n in ((0, 400), (400, 321))]
    ds.to_zarr(tmp_path / "b.zarr", encoding=encoding, zarr_format=3)
    for name in sorted(os.listdir(tmp_path / "b.zarr/t2m/c/1/7")):
        ours, theirs = (tmp_path / f"{store}.zarr/t2m/c/1/7/{name}" for store in "ab")
        assert ours.read_bytes() == theirs.read_bytes(), name
    check_reads(tmp_path / "a.zarr", ds)


def test_small_dask_blocks_are_written_in_groups_each_task_holding_only_its_own(tmp_path: Path) -> None:
    """240 dask blocks of one 40 kB chunk each, 2 dask threads: 4 write tasks of 60 blocks, each depending on
    exactly its own blocks (never the whole array), and the store is Dataset.to_zarr's."""
    from dask.core import get_dependencies

    values = np.random.default_rng(0).normal(size=(2, 721, 1440)).astype("f4")
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), values)}).chunk({"time": 1, "lat": 100, "lon": 100})
    encoding = {"t2m": {"chunks": (1, 100, 100)}}
    with dask.config.set(num_workers=2):
        delayed = xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding=encoding, compute=False)
    graph = dict(delayed.__dask_graph__())
    tasks = [key for key in graph if str(key[0] if isinstance(key, tuple) else key).startswith("write_block")]
    groups = sorted(sorted(key[1:] for key in get_dependencies(graph, task)) for task in tasks)
    assert groups == [[(t, lat, lon) for lat in lats for lon in range(15)]
                      for t in (0, 1) for lats in (range(4), range(4, 8))]
    delayed.compute()
    ds.to_zarr(tmp_path / "b.zarr", encoding=encoding, zarr_format=3)
    for name in sorted(os.listdir(tmp_path / "b.zarr/t2m/c/0/7")):
        ours, theirs = (tmp_path / f"{store}.zarr/t2m/c/0/7/{name}" for store in "ab")
        assert ours.read_bytes() == theirs.read_bytes(), name
    check_reads(tmp_path / "a.zarr", ds.compute())


def test_merges_of_one_task_run_at_once_on_s3_and_each_failure_is_named(tmp_path: Path, minio: MinioServer,
                                                                        bucket: str) -> None:
    """A task's read-merge-writes are concurrent on S3 (two merges that each wait for the other would hang
    one after another), all of them run when one fails, and the error names the failed key."""
    from xarray_zarrmax.storage.sinks import Update
    from xarray_zarrmax.storage.sources import s3_store_from_url

    sink = sinks.ObstoreSink(s3_store_from_url(f"s3://{bucket}/many{next(_counter)}", minio.storage_options()))
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

    for each in (sink, sinks.LocalSink(tmp_path)):  # concurrent, and one after another
        done.clear()
        with pytest.raises(ValueError, match="this merge fails") as info:
            each.update_many([Update("c", fine), Update("d", broken), Update("e", fine)], in_flight=3)
        assert "while merging into 'd'" in info.value.__notes__
        assert len(done) == 2
        assert [run_sync(each.source.get(k)) is not None for k in "cde"] == [True, False, True]


def test_dask_scheduler_is_the_callers(tmp_path: Path) -> None:
    """The data tasks run on whatever scheduler is in force (here: synchronous, in this thread)."""
    threads = set()
    original = xarray_zarrmax.write.dataset.write_blocks

    def recording(*args: Any, **kwargs: Any) -> int:
        threads.add(threading.get_ident())
        return original(*args, **kwargs)

    import unittest.mock

    with unittest.mock.patch.object(xarray_zarrmax.write.dataset, "write_blocks", recording), \
            dask.config.set(scheduler="synchronous"):
        xarray_zarrmax.to_zarr(sample().chunk({"time": 8}), tmp_path / "a.zarr", encoding={"temp": SHARDED})
    assert threads == {threading.get_ident()}


def test_put_faults_are_retried_and_merges_stay_exact(minio: MinioServer, bucket: str, toxiproxy: Any) -> None:
    """Responses cut short after the server applied the request (toxiproxy's limit_data on 30% of the
    connections): the PUT is sent again, and a conditional one that now meets its own earlier write (412)
    is read and merged again. Nothing is lost or doubled."""
    from datetime import timedelta

    name = f"write_{next(_counter)}"
    endpoint = toxiproxy.proxy(name, minio.port)
    so = {**minio.storage_options(endpoint), "timeout": "2s", "connect_timeout": "1s",
          "retry_config": {"max_retries": 10, "retry_timeout": timedelta(seconds=20),
                           "backoff": {"init_backoff": timedelta(milliseconds=10),
                                       "max_backoff": timedelta(milliseconds=200), "base": 2}}}
    url = f"s3://{bucket}/faults{next(_counter)}.zarr"
    xarray_zarrmax.to_zarr(_base_for_concurrency(), url, encoding={"v": CONC}, storage_options=so)
    toxiproxy.add_toxic(name, "limit_data", toxicity=0.3, bytes=100)
    with request_counts() as counts:
        for t in range(NWRITERS):
            _write_step(url, t, so)
    assert counts.total("put") >= NWRITERS
    direct = minio.storage_options()
    check_reads(url, _expected_after_concurrency(), oracle=s3_oracle(minio, url), storage_options=direct)


# -- Icechunk sessions ---------------------------------------------------------------------------------------------


@pytest.fixture(params=["local", "minio"])
def repo(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A fresh Icechunk repository on a local directory or on MinIO."""
    icechunk = pytest.importorskip("icechunk")
    if request.param == "local":
        storage = icechunk.local_filesystem_storage(str(tmp_path / "repo"))
    else:
        minio: MinioServer = request.getfixturevalue("minio")
        so = minio.storage_options()
        storage = icechunk.s3_storage(
            bucket=request.getfixturevalue("bucket"), prefix=f"write-ic{next(_counter)}", region="us-east-1",
            endpoint_url=minio.endpoint, allow_http=True, force_path_style=True,
            access_key_id=so["access_key_id"], secret_access_key=so["secret_access_key"])
    return icechunk.Repository.create(storage)


def check_icechunk_reads(repo: Any, expected: xr.Dataset) -> None:
    """Both engines read the committed branch from a read-only session: engine="zarr" through its store,
    engine="zarrmax" given the session itself."""
    session = repo.readonly_session("main")
    check_reads(session, expected, oracle=session.store, consolidated=False)


@pytest.mark.parametrize("chunked", [False, True], ids=["numpy", "dask"])
def test_icechunk_session_roundtrip_both_engines(repo: Any, chunked: bool) -> None:
    ds = sample().chunk({"time": 8}) if chunked else sample()
    session = repo.writable_session("main")
    with request_counts() as counts:
        xarray_zarrmax.to_zarr(ds, session, encoding={"temp": SHARDED})
    shards = sorted(k for _, kind, k in counts.keys if kind == "put" and k.startswith("temp/c/"))
    assert shards == [f"temp/c/{t}/0/0" for t in range(3)]  # one set per shard
    assert session.has_uncommitted_changes  # written into the session, not committed: the caller commits
    session.commit("write sample")
    check_icechunk_reads(repo, sample())


def test_icechunk_group_as_dataset_to_zarr_writes_it(repo: Any) -> None:
    # zarr asks whether the group's prefix is empty; Icechunk lists only prefixes of nodes that exist, so the
    # staging store must ask it is_empty, as Dataset.to_zarr does, not list
    ds = sample().chunk({"time": 8})
    session = repo.writable_session("main")
    xarray_zarrmax.to_zarr(ds, session, group="run/1", encoding={"temp": SHARDED})
    session.commit("a group")
    for engine, target in (("zarr", repo.readonly_session("main").store), ("zarrmax", repo.readonly_session("main"))):
        with xr.open_dataset(target, engine=engine, group="run/1", consolidated=False) as got:
            xr.testing.assert_identical(got.load(), sample())
    again = repo.writable_session("main")
    with pytest.raises(FileExistsError, match="Cannot create 'run/1' with mode 'w-' because it already contains"):
        xarray_zarrmax.to_zarr(ds, again, group="run/1")  # as Dataset.to_zarr refuses it


def test_staging_knows_what_is_left_under_a_prefix_after_deletes(tmp_path: Path) -> None:
    # Icechunk refuses to list a prefix that is no group or array; with deletions staged under it, whether
    # anything is left must still be answered (zarr asks is_empty before creating a group with mode "w-")
    import asyncio

    icechunk = pytest.importorskip("icechunk")
    import zarr

    from xarray_zarrmax.write.staging import StagingStore

    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="w", zarr_format=3)
    root.create_group("x/y")
    root.create_array("x/z", shape=(2,), dtype="i4")
    session.commit("nodes")

    async def answers() -> list[bool]:
        staging = StagingStore(repo.readonly_session("main").store)
        await staging.delete("x/y/zarr.json")
        await staging.delete("x/q/zarr.json")  # a key under a prefix that is no node in the repository
        found = [await staging.is_empty("x/y"), await staging.is_empty("x"), await staging.is_empty("x/q")]
        await staging.delete_dir("x/z")
        return [*found, await staging.is_empty("x/z"), await staging.is_empty("x/")]

    # x/y is gone; x still holds its own zarr.json and x/z; x/q never held anything; then x/z is gone too,
    # and x's zarr.json is left
    assert asyncio.run(answers()) == [True, False, True, True, False]


def test_icechunk_region_and_append_in_one_session(tmp_path: Path) -> None:
    """A region that cuts shards and an append to a partial last shard, in the session that wrote the data and
    before any commit: the merges read the session's own uncommitted shards (through the forks)."""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    first = sample(nt=12)
    xarray_zarrmax.to_zarr(first.chunk({"time": 8}), session, encoding={"temp": SHARDED})
    new = sample(nt=7, t0=100)
    xarray_zarrmax.to_zarr(new[["temp"]].drop_vars(["time", "y", "x", "station"]).chunk({"time": (3, 4)}),
                           session, region={"time": slice(5, 12)})
    second = sample(nt=9, t0=12)
    xarray_zarrmax.to_zarr(second.drop_vars(["flag", "y", "x", "station"]).chunk({"time": (4, 5)}), session,
                           append_dim="time")
    session.commit("write, region, append")
    expected = xr.concat([first, second], dim="time", data_vars="minimal", coords="minimal", compat="override")
    expected["flag"] = first["flag"]
    expected["temp"][5:12] = new["temp"].values
    check_icechunk_reads(repo, expected)


def test_icechunk_tasks_in_other_processes(tmp_path: Path) -> None:
    """With the processes scheduler each task unpickles its own fork of the session, writes to it and sends it
    back; the forks are merged into the session. Nothing written by a worker is lost."""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    with dask.config.set(scheduler="processes", num_workers=2):
        xarray_zarrmax.to_zarr(sample().chunk({"time": 8}), session, encoding={"temp": SHARDED})
    session.commit("from workers")
    check_icechunk_reads(repo, sample())


def test_icechunk_compute_false_returns_the_fork_to_merge(tmp_path: Path) -> None:
    """compute=False, then computed in worker processes: the result is the fork holding their writes, and the
    session has none of the data until it is merged. Computed in this process: written into the session."""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    delayed = xarray_zarrmax.to_zarr(sample().chunk({"time": 8}), session, encoding={"temp": SHARDED},
                                     compute=False)
    with dask.config.set(scheduler="processes", num_workers=2):
        fork = delayed.compute()
    assert isinstance(fork, icechunk.ForkSession)
    assert not [k for k in _session_keys(session) if k.startswith("temp/c/")]  # the data is in the fork only
    session.merge(fork)
    session.commit("merged")
    check_icechunk_reads(repo, sample())
    session = repo.writable_session("main")
    ds = sample() * 2
    ds.attrs = sample().attrs
    delayed = xarray_zarrmax.to_zarr(ds[["temp"]].chunk({"time": 8}), session, mode="a", compute=False)
    assert delayed.compute() is None
    session.commit("in this process")
    expected = sample()
    expected["temp"] = ds["temp"]
    check_icechunk_reads(repo, expected)


def _session_keys(session: Any) -> list[str]:
    from xarray_zarrmax.core.loop import run_sync

    async def keys() -> list[str]:
        return [k async for k in session.store.list()]

    return run_sync(keys())


def _write_worker_part(fork: Any, t0: int, t1: int) -> Any:
    part = sample().isel(time=slice(t0, t1))[["temp"]].drop_vars(["time", "y", "x", "station"])
    xarray_zarrmax.to_zarr(part, fork, region={"time": slice(t0, t1)})
    return fork


def test_icechunk_distributed_forks_in_a_process_pool(tmp_path: Path) -> None:
    """Icechunk's pattern for distributed writes: metadata from the coordinator, then one fork per worker
    (pickled to a spawned process), each writing its own shards (a whole one, or the partial last one),
    merged back and committed once."""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    ds = sample()
    ds["temp"] = ds["temp"].chunk({"time": 8})
    xarray_zarrmax.to_zarr(ds, session, encoding={"temp": SHARDED}, compute=False)  # metadata, numpy variables
    parts = [(0, 8), (8, 16), (16, 20)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        forks = pool.starmap(_write_worker_part, [(session.fork(), a, b) for a, b in parts])
    session.merge(*forks)
    session.commit("distributed")
    check_icechunk_reads(repo, sample())


def test_icechunk_forks_writing_one_shard_keep_only_the_last_merged(tmp_path: Path) -> None:
    """What docs/writing.md says is not safe: two forks each writing part of the same shard. Each reads the
    shard as of the fork, merges its part and sets the whole shard; Icechunk merges forks last-writer-wins,
    so the first fork's part is lost, silently. (Pinned so that a change in Icechunk shows here.)"""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    xarray_zarrmax.to_zarr(_base_for_concurrency(), session, encoding={"v": CONC})
    a, b = session.fork(), session.fork()
    xarray_zarrmax.to_zarr(_one_step(0), a, region={"time": slice(0, 1)})
    xarray_zarrmax.to_zarr(_one_step(1), b, region={"time": slice(1, 2)})  # the same shard
    session.merge(a, b)
    session.commit("two forks, one shard")
    got = xr.open_dataset(repo.readonly_session("main"), engine="zarrmax")["v"].values
    assert (got[0] == -1).all() and (got[1] == 1).all()  # a's write is gone


def test_icechunk_concurrent_sessions_writing_one_shard_conflict(tmp_path: Path) -> None:
    """Two sessions (two processes' worth) that each write part of one shard: the second commit is refused
    (Icechunk's conflict detection), and so is a rebase with ConflictDetector."""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    xarray_zarrmax.to_zarr(_base_for_concurrency(), session, encoding={"v": CONC})
    session.commit("base")
    a, b = repo.writable_session("main"), repo.writable_session("main")
    xarray_zarrmax.to_zarr(_one_step(0), a, region={"time": slice(0, 1)})
    xarray_zarrmax.to_zarr(_one_step(1), b, region={"time": slice(1, 2)})
    a.commit("a")
    with pytest.raises(icechunk.ConflictError):
        b.commit("b")
    with pytest.raises(icechunk.RebaseFailedError):
        b.commit("b", rebase_with=icechunk.ConflictDetector())
    # What docs/writing.md warns of: a solver that picks one version of a conflicting shard keeps b's whole
    # shard, read before a's commit, so a's time step is lost.
    b.commit("b", rebase_with=icechunk.BasicConflictSolver())
    got = xr.open_dataset(repo.readonly_session("main"), engine="zarrmax")["v"].values
    assert (got[0] == -1).all() and (got[1] == 1).all()


def test_icechunk_threads_in_one_session_lose_nothing(tmp_path: Path) -> None:
    """16 threads writing one time step each into two shards of one session: the in-process lock per object
    serialises their read-merge-writes."""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    xarray_zarrmax.to_zarr(_base_for_concurrency(), session, encoding={"v": CONC})
    start = threading.Barrier(NWRITERS)

    def run(t: int) -> None:
        start.wait()
        xarray_zarrmax.to_zarr(_one_step(t), session, region={"time": slice(t, t + 1)})

    with ThreadPoolExecutor(NWRITERS) as pool:
        list(pool.map(run, range(NWRITERS)))
    session.commit("16 threads")
    check_icechunk_reads(repo, _expected_after_concurrency())


def test_icechunk_refuses_read_only_sessions_and_names_the_session(tmp_path: Path) -> None:
    icechunk = pytest.importorskip("icechunk")
    import pickle

    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    with pytest.raises(ValueError, match="writable Icechunk session.*Got a read-only session at snapshot"):
        xarray_zarrmax.to_zarr(sample(), repo.readonly_session("main"))
    sink = sinks.resolve_sink(repo.writable_session("main"))
    assert "branch 'main'" in sink.label
    copy = pickle.loads(pickle.dumps(sink))  # a fork of the session, whose writes the task returns
    assert isinstance(copy.session, icechunk.ForkSession) and copy.task_result() is copy.session
    assert sink.task_result() is None


# -- multipart uploads ---------------------------------------------------------------------------------------------


def test_large_shards_go_multipart_merges_stay_single_part(minio: MinioServer, bucket: str) -> None:
    """Above ``multipart_threshold`` (lowered to 6 MiB here) a shard is sent as a multipart upload of
    ``split_size`` parts (MinIO's ETag of such an object ends in "-<parts>"); a conditional PUT (the merge of a
    partly written shard) stays one request (a plain ETag), whatever its size. Both read back exactly."""
    import obstore

    n, shard = 2_000_000, 1_000_000  # two shards of about 7.6 MiB (random int64: zstd cannot shrink them)
    values = np.random.default_rng(5).integers(0, 2**62, n, dtype="i8")
    ds = xr.Dataset({"v": (("i",), values)})
    url, so = f"s3://{bucket}/multipart{next(_counter)}.zarr", minio.storage_options()
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


def test_icechunk_mode_w_replaces_everything(tmp_path: Path) -> None:
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    xarray_zarrmax.to_zarr(sample(), session, encoding={"temp": SHARDED})
    session.commit("first")
    session = repo.writable_session("main")
    other = xr.Dataset({"other": (("z",), np.arange(3.0))})
    xarray_zarrmax.to_zarr(other, session, mode="w")
    session.commit("replaced")
    check_icechunk_reads(repo, other)
    assert sorted(_session_keys(repo.readonly_session("main"))) == ["other/c/0", "other/zarr.json", "zarr.json"]


def test_local_put_never_lands_inside_a_merge(tmp_path: Path) -> None:
    """Whole-object puts run side by side (a shared lock on the directory), but a put of the object a merge is
    updating waits for the merge's rename: landing between the merge's read and its rename, it would be
    overwritten by the merge's older data and lost."""
    sink = sinks.LocalSink(tmp_path)
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
