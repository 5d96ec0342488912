"""The fallback is total and faithful: whatever zarr-python reads, engine="zarrmax" reads, with the same values,
dtypes and encoding; what the fast path reads is decided from the stored metadata document alone."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.storage import MemoryStore, WrapperStore

from tests.support.compare import assert_same_dataset
from xarray_zarrmax.backend import ZarrmaxStore
from xarray_zarrmax.storage import resolve_source


def open_both(target: Any, **kw: Any) -> tuple[xr.Dataset, xr.Dataset]:
    ours = xr.open_dataset(target, engine="zarrmax", **kw)
    oracle = xr.open_dataset(target, engine="zarr", consolidated=False, **kw)
    return ours, oracle


def wrapper_kinds(target: Any) -> dict[str, str]:
    store = ZarrmaxStore.open(resolve_source(target))
    return {name: type(var._data.array).__name__ for name, var in store.get_variables().items()}


def edit_json(path: Path, edit: Any) -> None:
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


# -- structures the fast path does not know ----------------------------------------------------------------


@pytest.fixture
def rectilinear_chunks():
    with zarr.config.set({"array.rectilinear_chunks": True}):
        yield


@pytest.mark.parametrize("chunks", [{}, None])
def test_rectilinear_grids_read_as_zarr_reads_them(tmp_path, rectilinear_chunks, chunks):
    group = zarr.open_group(tmp_path / "r.zarr", mode="w", zarr_format=3)
    plain = group.create_array("plain", shape=(10, 6), chunks=[[3, 3, 4], 4], dtype="i4", dimension_names=["x", "y"])
    plain[:] = np.arange(60, dtype="i4").reshape(10, 6)
    sharded = group.create_array("sharded", shape=(30, 7), chunks=(5, 7), shards=[[10, 20], 7], dtype="f8",
                                 dimension_names=["t", "z"])
    sharded[:] = np.arange(210.0).reshape(30, 7)
    ours, oracle = open_both(tmp_path / "r.zarr", chunks=chunks)
    assert_same_dataset(ours.compute(), oracle.compute())
    assert ours["plain"].encoding["preferred_chunks"] == {"x": (3, 3, 4), "y": 4}
    assert ours["sharded"].encoding["shards"] == ((10, 20), 7)
    if chunks == {}:
        assert ours["sharded"].chunks == ((10, 20), (7,))  # one dask chunk per shard, as on the fast path
    assert wrapper_kinds(tmp_path / "r.zarr") == {"plain": "FallbackArray", "sharded": "FallbackArray"}


def test_rectilinear_grid_too_large_is_one_dask_block_without_listing_its_chunks(tmp_path, rectilinear_chunks):
    """2**50 x 3 stored objects, past max_objects: counted from the grid, not listed chunk by chunk (engine="zarr"
    lists every chunk's size at open: it never opens this), and one dask block; a selection reads what
    zarr-python reads."""
    group = zarr.open_group(tmp_path / "h.zarr", mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(2**50, 10), chunks=[1, [3, 3, 4]], dtype="u1", dimension_names=["x", "y"])
    arr[1:3] = np.arange(20, dtype="u1").reshape(2, 10)
    ours = xr.open_dataset(tmp_path / "h.zarr", engine="zarrmax", chunks={})
    assert ours["v"].chunks == ((2**50,), (10,))
    np.testing.assert_array_equal(ours["v"][:4].values, arr[:4])


def repaired_store(path: Path, repair: str) -> None:
    """Arrays whose stored chunk shapes zarr-python repairs when it reads them (zarr.core.metadata.repair);
    "v" and "u" share a structure, so a parse shared between them would lose one of zarr's warnings."""
    written_chunks, stored_chunk_shape = REPAIRS[repair]
    group = zarr.open_group(path, mode="w", zarr_format=3)
    for name, dims in (("v", ["x", "y"]), ("u", ["y2", "x2"])):
        arr = group.create_array(name, shape=(10, 6), chunks=written_chunks, dtype="i2", dimension_names=dims)
        if repair != "chunk size 0":  # no chunk can be stored under a chunk size of 0: such arrays hold no data
            arr[:] = np.arange(60, dtype="i2").reshape(10, 6)
        store_chunk_shape(path / name, stored_chunk_shape)
    group.create_array("empty", shape=(0,), chunks=(4,), dtype="f4", dimension_names=["e"])
    store_chunk_shape(path / "empty", [0])


def store_chunk_shape(array_path: Path, chunk_shape: list[Any]) -> None:
    edit_json(array_path / "zarr.json", lambda d: d["chunk_grid"]["configuration"].update(chunk_shape=chunk_shape))


#: (chunks the data is written with, the chunk shape then stored), each read by zarr-python as the first
REPAIRS = {
    # a regular grid listing chunk edges is read as the rectilinear grid it means, with a warning
    "edges in a regular grid": ((5, 3), [[5, 5], 3]),
    "true as a chunk size": ((5, 1), [5, True]),
    "chunk size 0": ((1, 3), [0, 3]),
}


@pytest.mark.parametrize("repair", sorted(REPAIRS))
def test_documents_zarr_repairs_read_as_zarr_reads_them(tmp_path, repair):
    path = tmp_path / "rep.zarr"
    repaired_store(path, repair)
    with warnings.catch_warnings(record=True) as ours_warned:
        warnings.simplefilter("always")
        ours = xr.open_dataset(path, engine="zarrmax").load()
    with warnings.catch_warnings(record=True) as zarr_warned:
        warnings.simplefilter("always")
        oracle = xr.open_dataset(path, engine="zarr", consolidated=False).load()
    assert_same_dataset(ours, oracle)
    # zarr-python's warnings about how it read a document come once per array, for both engines
    assert sorted(str(w.message) for w in ours_warned if issubclass(w.category, zarr.errors.ZarrUserWarning)) == \
        sorted(str(w.message) for w in zarr_warned if issubclass(w.category, zarr.errors.ZarrUserWarning))
    assert wrapper_kinds(path) == {"v": "FallbackArray", "u": "FallbackArray", "empty": "FallbackArray"}


class ZstdCodec(zarr.codecs.ZstdCodec):
    """Not zarr's zstd: zstd of the bytes XOR 0x5A, registered under its own name; only its class is named
    like one the fast path decodes."""

    NAME = "test.xor_zstd"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ZstdCodec:
        return cls(**data.get("configuration", {}))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.NAME, "configuration": {"level": self.level, "checksum": self.checksum}}

    def _decode_sync(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        plain = super()._decode_sync(chunk_bytes, chunk_spec).as_numpy_array()
        return chunk_spec.prototype.buffer.from_array_like(plain ^ np.uint8(0x5A))

    def _encode_sync(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        xored = chunk_spec.prototype.buffer.from_array_like(chunk_bytes.as_numpy_array() ^ np.uint8(0x5A))
        return super()._encode_sync(xored, chunk_spec)


def test_support_follows_the_document_not_class_names(tmp_path):
    zarr.registry.register_codec(ZstdCodec.NAME, ZstdCodec)
    group = zarr.open_group(tmp_path / "x.zarr", mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(12,), chunks=(4,), dtype="i4", compressors=[ZstdCodec()],
                             dimension_names=["x"])
    arr[:] = np.arange(12, dtype="i4")
    assert json.loads((tmp_path / "x.zarr" / "v" / "zarr.json").read_text())["codecs"][1]["name"] == ZstdCodec.NAME
    ours, oracle = open_both(tmp_path / "x.zarr")
    np.testing.assert_array_equal(oracle["v"].values, np.arange(12))
    xr.testing.assert_identical(ours.load(), oracle.load())
    assert wrapper_kinds(tmp_path / "x.zarr") == {"v": "FallbackArray"}


# -- what the fallback returns -----------------------------------------------------------------------------


def string_dataset() -> xr.Dataset:
    words = ["alpha", "b", "gam"]
    return xr.Dataset({
        "vlen": (("x",), np.array(words, dtype=object)),
        "fixed": (("x",), np.array(words, dtype="<U5")),
        "raw": (("x",), np.array([w.encode() for w in words], dtype="S5")),
        "scalar": ((), np.array("hello", dtype=object)),
        "fixed_scalar": ((), np.array("hey", dtype="<U3")),
    })


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("chunks", [None, {}])
def test_fallback_keeps_the_dtype_of_scalar_and_0d_selections(tmp_path, zarr_format, chunks):
    path = tmp_path / "s.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr's warnings about v3 string and bytes data types
        string_dataset().to_zarr(path, zarr_format=zarr_format, mode="w", consolidated=False)
        ours, oracle = open_both(path, chunks=chunks)
        for name in ("vlen", "fixed", "raw", "scalar", "fixed_scalar"):
            for selection in ({}, {"x": 1}, {"x": -1}, {"x": [0, 2]}):
                if selection and "x" not in oracle[name].dims:
                    continue
                a, b = ours[name].isel(selection).values, oracle[name].isel(selection).values
                assert (a.dtype, a.tolist()) == (b.dtype, b.tolist()), (name, selection)


class KeyRecordingStore(WrapperStore[MemoryStore]):
    """Records the key of every GET zarr-python or zarrmax sends."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.keys: list[str] = []

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        self.keys.append(key)
        return await super().get(key, prototype, byte_range)


def delta_filtered_array(n: int = 100) -> tuple[KeyRecordingStore, np.ndarray]:
    """A (n, 3) v2 array with a Delta filter (outside the fast path), one chunk per row."""
    import numcodecs

    values = np.arange(n * 3, dtype="i4").reshape(n, 3) % 7
    store = KeyRecordingStore(MemoryStore())
    xr.Dataset({"v": (("x", "y"), values)}).to_zarr(
        store, zarr_format=2, consolidated=False,
        encoding={"v": {"chunks": (1, 3), "filters": [numcodecs.Delta(dtype="i4")]}},
    )
    return store, values


def test_fallback_outer_selection_reads_only_its_chunks():
    store, values = delta_filtered_array()
    assert wrapper_kinds(store) == {"v": "FallbackArray"}
    ds = xr.open_dataset(store, engine="zarrmax")
    store.keys.clear()
    np.testing.assert_array_equal(ds["v"].isel(x=[0, 99], y=[2, 0]).values, values[[0, 99]][:, [2, 0]])
    assert sorted(store.keys) == ["v/0.0", "v/99.0"]  # not the 98 chunks between them


def test_fallback_vectorized_selection_matches_zarr_and_reads_only_its_chunks():
    store, values = delta_filtered_array()
    points = {"x": xr.DataArray([3, 97, 3], dims="p"), "y": xr.DataArray([0, 2, 1], dims="p")}
    oracle = xr.open_dataset(store, engine="zarr", consolidated=False)["v"].isel(points).values
    ds = xr.open_dataset(store, engine="zarrmax")
    store.keys.clear()
    np.testing.assert_array_equal(ds["v"].isel(points).values, oracle)
    np.testing.assert_array_equal(oracle, values[[3, 97, 3], [0, 2, 1]])
    assert sorted(set(store.keys)) == ["v/3.0", "v/97.0"]


def test_fast_path_arrays_stay_on_the_fast_path(tmp_path):
    """The document whitelist admits what zarr-python writes by default, sharded or not, v2 or v3."""
    group = zarr.open_group(tmp_path / "f.zarr", mode="w", zarr_format=3)
    group.create_array("a", shape=(8,), chunks=(2,), shards=(4,), dtype="f4", dimension_names=["x"])[:] = 1
    group.create_array("b", shape=(8,), chunks=(4,), dtype="u1", compressors=None, dimension_names=["x"])[:] = 2
    v2 = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=2)
    v2.create_array("c", shape=(8,), chunks=(4,), dtype=">i8", attributes={"_ARRAY_DIMENSIONS": ["x"]})[:] = 3
    assert wrapper_kinds(tmp_path / "f.zarr") == {"a": "ZarrmaxArray", "b": "ZarrmaxArray"}
    assert wrapper_kinds(tmp_path / "g.zarr") == {"c": "ZarrmaxArray"}
    for path in ("f.zarr", "g.zarr"):
        ours, oracle = open_both(tmp_path / path)
        assert_same_dataset(ours.load(), oracle.load())


# -- errors while variables are built ---------------------------------------------------------------------


def test_error_building_a_variable_on_arrival_is_raised_not_rebuilt(tmp_path, monkeypatch):
    group = zarr.open_group(tmp_path / "e.zarr", mode="w", zarr_format=3)
    group.create_array("v", shape=(4,), chunks=(2,), dtype="f8", dimension_names=["x"])[:] = 1.0
    first = RuntimeError("building 'v' failed on arrival")
    calls = []
    real = ZarrmaxStore.open_store_variable

    def fails_once(self: ZarrmaxStore, node: Any) -> Any:
        calls.append(node.name)
        if len(calls) == 1:
            raise first
        return real(self, node)  # a second try would succeed: the error must not vanish behind it

    monkeypatch.setattr(ZarrmaxStore, "open_store_variable", fails_once)
    with pytest.raises(RuntimeError, match="building 'v' failed on arrival") as info:
        xr.open_dataset(tmp_path / "e.zarr", engine="zarrmax")
    assert info.value is first
    assert calls == ["v"]
