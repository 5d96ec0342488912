"""Whole datasets: engine="zarrmax" gives the Dataset engine="zarr" gives, except one dask chunk per shard."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from tests.support.compare import assert_same_dataset
from tests.support.datasets import era5_like, write_with_zarr
from xarray_zarrmax import set_config
from xarray_zarrmax.backend import ZarrmaxBackendEntrypoint, ZarrmaxStore
from xarray_zarrmax.errors import MetadataError
from xarray_zarrmax.storage import resolve_source


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("consolidated", [False, True])
def test_dataset_identical_to_engine_zarr(tmp_path, zarr_format, consolidated):
    path = write_with_zarr(era5_like(), tmp_path / "era5.zarr", zarr_format, consolidated)
    ours = xr.open_dataset(path, engine="zarrmax", chunks={})
    oracle = xr.open_dataset(path, engine="zarr", chunks={}, consolidated=consolidated)
    assert_same_dataset(ours.compute(), oracle.compute())
    assert ours.time.dtype == np.dtype("datetime64[ns]")
    assert np.isnan(ours.t2m.values[0, 0, 0])


def same_structure_group(n: int = 6) -> xr.Dataset:
    """Arrays with one structure (shape, dtype, chunks, codecs) but their own data, dimension names and
    attributes: the plan worked out once for the structure must still read each array's own keys."""
    rng = np.random.default_rng(1)
    data = {f"v{i}": ((("t", "y") if i % 2 else ("t", "x")), rng.normal(size=(6, 5)).astype("f4"),
                      {"long_name": f"variable {i}", "units": "K" if i % 3 else "m"}) for i in range(n)}
    return xr.Dataset(data, coords={"t": np.arange(6), "x": np.arange(5) * 2.0, "y": np.arange(5) * 3.0})


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("consolidated", [False, True])
def test_arrays_sharing_a_structure_read_their_own_data(tmp_path, zarr_format, consolidated):
    ds = same_structure_group()
    encoding = {name: {"chunks": (2, 5)} for name in ds.data_vars}
    if zarr_format == 3:
        encoding = {name: {"chunks": (1, 5), "shards": (2, 5)} for name in ds.data_vars}
    path = tmp_path / "same.zarr"
    ds.to_zarr(path, zarr_format=zarr_format, consolidated=consolidated, encoding=encoding, mode="w")
    for chunks in ({}, None):
        ours = xr.open_dataset(path, engine="zarrmax", chunks=chunks)
        oracle = xr.open_dataset(path, engine="zarr", chunks=chunks, consolidated=consolidated)
        assert_same_dataset(ours.compute(), oracle.compute())
        for name in ds.data_vars:  # and not merely equal to each other: each is its own written data
            np.testing.assert_array_equal(ours[name].values, ds[name].values)


def test_missing_dimension_names_still_fail_the_open(tmp_path):
    path = tmp_path / "nodims.zarr"
    group = zarr.open_group(path, mode="w", zarr_format=3)
    for name in ("a", "b", "c"):  # "b" shares the others' structure but has no dimension names
        arr = group.create_array(name, shape=(4,), chunks=(2,), dtype="f8",
                                 dimension_names=None if name == "b" else ["x"])
        arr[:] = np.arange(4.0)
    with pytest.raises(MetadataError, match="array 'b' .* needs a name for each of its 1 dimensions"):
        xr.open_dataset(path, engine="zarrmax", consolidated=False)


def test_dask_chunk_is_one_shard(tmp_path):
    """One task per shard: a deliberate, documented difference from engine="zarr" (xarray 2026.9), which
    prefers the inner chunks (README, "Dask chunks"); this pins both sides so the docs follow any change."""
    path = write_with_zarr(era5_like(), tmp_path / "era5.zarr")
    with set_config(task_bytes=0):  # one task per stored object
        ds = xr.open_dataset(path, engine="zarrmax", chunks={})
    with xr.open_dataset(path, engine="zarr", chunks={}) as theirs:
        assert theirs.t2m.encoding["preferred_chunks"] == {"time": 4, "latitude": 10, "longitude": 9}
    assert ds.t2m.chunks == ((8, 8, 8), (19,), (18,))  # the shard (8, 20, 18) clipped to the array
    assert ds.t2m.encoding["preferred_chunks"] == {"time": 8, "latitude": 20, "longitude": 18}
    assert ds.t2m.encoding["chunks"] == (4, 10, 9)
    assert ds.t2m.encoding["shards"] == (8, 20, 18)
    assert ds.tp.chunks == ((6, 6, 6, 6), (19,), (18,))
    # one task per shard: the dask graph of a variable holds exactly one getter per shard
    graph = dict(ds.t2m.data.__dask_graph__())
    assert sum(1 for k in graph if isinstance(k, tuple) and k[0] == ds.t2m.data.name) == 3


def _unsharded_small_chunks(path):
    group = zarr.open_group(path, mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(100, 40), chunks=(10, 8), dtype="f8", dimension_names=["t", "x"])
    arr[...] = np.arange(4000.0).reshape(100, 40)
    return str(path)


def test_small_stored_objects_are_grouped_into_dask_tasks(tmp_path):
    path = _unsharded_small_chunks(tmp_path / "small.zarr")
    # 640-byte chunks, about 6400 bytes a task: x spans the array first (5 chunks, 3200 bytes), then t doubles
    # (6400 // 3200): 5 tasks of whole chunks where engine="zarr" makes 50
    with set_config(task_bytes=6400):
        ds = xr.open_dataset(path, engine="zarrmax", chunks={}, consolidated=False)
    theirs = xr.open_dataset(path, engine="zarr", chunks={}, consolidated=False)
    assert ds.v.encoding["preferred_chunks"] == {"t": 20, "x": 40}
    assert ds.v.encoding["chunks"] == (10, 8)  # the stored chunks, as engine="zarr" reports them
    assert ds.v.chunks == ((20,) * 5, (40,)) and theirs.v.data.npartitions == 50
    xr.testing.assert_identical(ds.compute(), theirs.compute())
    with set_config(task_bytes=0):  # one task per stored object, as engine="zarr"
        assert xr.open_dataset(path, engine="zarrmax", chunks={}, consolidated=False).v.data.npartitions == 50


def test_the_default_groups_only_chunks_given_as_an_empty_dict(tmp_path):
    """The grouping is the default for ``chunks={}`` alone, where xarray's dask chunks are the preferred chunks
    and nothing else. With user chunks, xarray checks them against ``preferred_chunks``, which then stay the
    stored chunks: chunks that align with stored chunks get no warning, chunks that split one get engine
    "zarr"'s warning, and the chunks are engine="zarr"'s."""
    import warnings

    path = _unsharded_small_chunks(tmp_path / "small.zarr")
    ds = xr.open_dataset(path, engine="zarrmax", chunks={}, consolidated=False)
    assert ds.v.chunks == ((100,), (40,))  # 32 kB of 640-byte chunks: one task under the default 128 MiB
    assert ds.v.encoding["preferred_chunks"] == {"t": 100, "x": 40}
    for chunks in ({"t": 10}, {"t": 30}, {"x": 16}, "auto", -1, 40):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # aligned with the stored chunks: no warning, as engine="zarr"
            ours = xr.open_dataset(path, engine="zarrmax", chunks=chunks, consolidated=False)
            theirs = xr.open_dataset(path, engine="zarr", chunks=chunks, consolidated=False)
        assert ours.v.chunks == theirs.v.chunks, chunks
        assert ours.v.encoding["preferred_chunks"] == theirs.v.encoding["preferred_chunks"] == {"t": 10, "x": 8}
    for chunks in ({"t": 5}, {"x": 12}):
        for engine in ("zarrmax", "zarr"):  # a stored chunk split: the warning, with either engine
            with pytest.warns(UserWarning, match="separate the stored chunks"):
                xr.open_dataset(path, engine=engine, chunks=chunks, consolidated=False)
    # through open_mfdataset (chunks={} by default) and open_datatree, grouped alike
    assert xr.open_mfdataset([path], engine="zarrmax", consolidated=False).v.chunks == ((100,), (40,))
    tree = xr.open_datatree(path, engine="zarrmax", chunks={}, consolidated=False)
    assert tree["v"].chunks == ((100,), (40,))
    # called by anything but xarray's opener (a wrapping backend, say), the stored chunks
    from xarray_zarrmax.backend import ZarrmaxBackendEntrypoint

    plain = ZarrmaxBackendEntrypoint().open_dataset(path, consolidated=False)
    assert plain.v.encoding["preferred_chunks"] == {"t": 10, "x": 8}


def test_grouped_tasks_agree_across_ranks_so_dataset_chunks_work(tmp_path):
    """A (t, x) and a (t,) variable stored 100 time steps an object: grouped alone, the first fills 800 kB
    tasks with 1000 steps, the second with the whole 4000, and xarray's Dataset.chunks would refuse the
    Dataset where engine="zarr"'s (the stored chunks, 100 each) agree. Both get the smaller grouping."""
    group = zarr.open_group(tmp_path / "ranks.zarr", mode="w", zarr_format=3)
    group.create_array("field", shape=(4000, 100), chunks=(100, 100), dtype="f8",
                       dimension_names=["t", "x"])[...] = np.arange(400000.0).reshape(4000, 100)
    group.create_array("count", shape=(4000,), chunks=(100,), dtype="i4", dimension_names=["t"])[...] = 7
    group.create_array("other", shape=(4000,), chunks=(400,), dtype="f8", dimension_names=["t"])[...] = 1
    with set_config(task_bytes=800_000):
        ds = xr.open_dataset(tmp_path / "ranks.zarr", engine="zarrmax", chunks={}, consolidated=False)
    assert ds.field.chunks == ((1000,) * 4, (100,))
    assert ds["count"].chunks == ((1000,) * 4,)  # alone it would be one task of 4000
    assert ds["count"].encoding["preferred_chunks"] == {"t": 1000}
    assert ds.other.chunks == ((4000,),)  # stored otherwise: grouped on its own, as engine="zarr" differs too
    assert dict(ds[["field", "count"]].chunks) == {"t": (1000,) * 4, "x": (100,)}
    theirs = xr.open_dataset(tmp_path / "ranks.zarr", engine="zarr", chunks={}, consolidated=False)
    xr.testing.assert_identical(ds.compute(), theirs.compute())


def test_a_task_holds_about_task_bytes_whatever_the_element_size(tmp_path):
    """Fixed-width strings of 200 bytes an element: grouped by 8 bytes an element (as before a review), a task
    held 25x task_bytes; variable-length strings have no element size and stay one task per object."""
    group = zarr.open_group(tmp_path / "wide.zarr", mode="w", zarr_format=3)
    words = np.array([f"w{i}" for i in range(2000)], dtype="<U50")
    group.create_array("fixed", shape=(2000,), chunks=(10,), dtype="<U50", dimension_names=["x"])[...] = words
    group.create_array("vlen", shape=(2000,), chunks=(10,), dtype=str, dimension_names=["y"])[...] = words
    with set_config(task_bytes=20_000):  # 2 kB objects: 10 a task
        ds = xr.open_dataset(tmp_path / "wide.zarr", engine="zarrmax", chunks={}, consolidated=False)
    assert ds.fixed.chunks == ((100,) * 20,)
    assert ds.vlen.chunks == ((10,) * 200,)
    theirs = xr.open_dataset(tmp_path / "wide.zarr", engine="zarr", chunks={}, consolidated=False)
    xr.testing.assert_identical(ds.compute(), theirs.compute())


def test_grouped_tasks_agree_across_dtypes_so_dataset_chunks_work(tmp_path):
    group = zarr.open_group(tmp_path / "mixed.zarr", mode="w", zarr_format=3)
    for name, dtype in (("a", "f8"), ("b", "f4"), ("c", "i2")):
        group.create_array(name, shape=(100,), chunks=(5,), dtype=dtype, dimension_names=["x"])[...] = 1
    with set_config(task_bytes=400):
        ds = xr.open_dataset(tmp_path / "mixed.zarr", engine="zarrmax", chunks={}, consolidated=False)
    assert dict(ds.chunks) == {"x": (50, 50)}  # the same grouping for every dtype: no unify_chunks needed


def test_group_drop_variables_and_without_dask(tmp_path):
    path = tmp_path / "nested.zarr"
    era5_like().to_zarr(path, group="a/b", zarr_format=3, consolidated=False)
    ours = xr.open_dataset(path, engine="zarrmax", group="a/b", drop_variables=["tp"])
    oracle = xr.open_dataset(path, engine="zarr", group="a/b", drop_variables=["tp"], consolidated=False)
    assert "tp" not in ours
    xr.testing.assert_identical(ours.load(), oracle.load())


def test_variables_argument_opens_only_those(tmp_path):
    path = write_with_zarr(era5_like(), tmp_path / "era5.zarr")
    ds = xr.open_dataset(path, engine="zarrmax", variables=["t2m"], chunks={})
    assert set(ds.data_vars) == {"t2m"}
    # its dimensions, and "level", which its CF "coordinates" attribute names
    assert set(ds.coords) == {"time", "latitude", "longitude", "level"}
    with pytest.raises(KeyError, match="nope"):
        xr.open_dataset(path, engine="zarrmax", variables=["nope"])


def test_fallback_arrays_give_zarr_answers(tmp_path):
    """Strings, v2 filters and other codecs are read by zarr-python: slower, never different."""
    import numcodecs

    path = tmp_path / "fallback.zarr"
    ds = xr.Dataset(
        {
            "names": (("x",), np.array(["alpha", "b", "gamma", ""], dtype=object)),
            "delta": (("x",), np.array([1, 5, 2, 9], dtype="i4")),
            "plain": (("x",), np.arange(4.0)),
        }
    )
    ds.to_zarr(path, zarr_format=2, consolidated=False,
               encoding={"delta": {"filters": [numcodecs.Delta(dtype="i4")]}})
    ours = xr.open_dataset(path, engine="zarrmax")
    oracle = xr.open_dataset(path, engine="zarr", consolidated=False)
    xr.testing.assert_identical(ours.load(), oracle.load())
    source = resolve_source(path)
    store = ZarrmaxStore.open(source)
    kinds = {name: type(var._data.array).__name__ for name, var in store.get_variables().items()}
    assert kinds == {"names": "FallbackArray", "delta": "FallbackArray", "plain": "ZarrmaxArray"}


def test_v3_strings_fall_back_with_zarr_dtype(tmp_path):
    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=3)
    names = group.create_array("names", shape=(3,), chunks=(2,), dtype=str, dimension_names=["y"])
    names[:] = ["alpha", "", "gamma"]
    ours = xr.open_dataset(tmp_path / "s.zarr", engine="zarrmax", chunks={})
    oracle = xr.open_dataset(tmp_path / "s.zarr", engine="zarr", chunks={}, consolidated=False)
    assert ours["names"].dtype == oracle["names"].dtype
    xr.testing.assert_identical(ours.load(), oracle.load())


def test_lazy_arrays_pickle_small(tmp_path):
    path = write_with_zarr(era5_like(), tmp_path / "era5.zarr")
    ds = xr.open_dataset(path, engine="zarrmax", chunks={})
    payload = pickle.dumps(ds.t2m.data)
    assert len(payload) < 20_000, len(payload)  # references to the store, not the data (32 KB here)
    back = pickle.loads(payload)
    oracle = xr.open_dataset(path, engine="zarr", consolidated=False)
    np.testing.assert_array_equal(np.asarray(back), oracle.t2m.values)


def test_unpickled_stores_are_shared_while_used_and_not_kept_for_ever(monkeypatch):
    """A process unpickles each store once while tasks use it (one store, one connection pool), but does not
    keep every version of an in-memory store it was ever sent (each pickles its contents): a worker reading a
    MemoryStore that changes between computes kept one whole copy per version, without end."""
    import gc
    import weakref

    from zarr.core.buffer import cpu
    from zarr.storage import MemoryStore

    from xarray_zarrmax.storage import ZarrStoreSource, registry

    monkeypatch.setattr(registry, "RECENT_STORE_BYTES", 64 << 10)
    memory = MemoryStore()
    source = ZarrStoreSource(memory, label="memory")
    first = pickle.loads(pickle.dumps(source))
    assert pickle.loads(pickle.dumps(source)) is first  # shared, not unpickled per task
    versions = [weakref.ref(first)]
    del first
    for version in range(8):  # new contents: a new payload each time, 32 KiB more each
        memory._store_dict[f"v{version}"] = cpu.Buffer.from_bytes(bytes(32 << 10))
        versions.append(weakref.ref(pickle.loads(pickle.dumps(source))))
    gc.collect()
    alive = [i for i, ref in enumerate(versions) if ref() is not None]
    assert alive == [8], alive  # the latest payload alone is over 64 KiB: only it is kept

def test_rectilinear_chunk_grid_falls_back_and_matches_zarr(tmp_path):
    """A chunk grid the fast path does not know (zarr's experimental rectilinear grid) is zarr-python's to read:
    the open must not fail on it."""
    with zarr.config.set({"array.rectilinear_chunks": True}):
        group = zarr.open_group(str(tmp_path / "r.zarr"), mode="w", zarr_format=3)
        arr = group.create_array("v", shape=(10, 4), chunks=[[2, 3, 5], [4]], dtype="f4", dimension_names=["y", "x"])
        arr[:] = np.arange(40, dtype="f4").reshape(10, 4)
        oracle = xr.open_dataset(tmp_path / "r.zarr", engine="zarr", consolidated=False)
        for chunks in ({}, None):
            ours = xr.open_dataset(tmp_path / "r.zarr", engine="zarrmax", chunks=chunks)
            xr.testing.assert_identical(ours.load(), oracle.load())


@pytest.mark.parametrize("indexers", ["pointwise", "outer"])
def test_sparse_selection_allocates_what_it_reads_not_the_bounding_box(tmp_path, indexers):
    """Two far-apart elements of a 4000 x 4000 float64 array (128 MB): the read holds about the two chunks it
    decodes, never an array the size of the box around them."""
    import tracemalloc

    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(4000, 4000), chunks=(100, 100), dtype="f8", fill_value=-1.0,
                             dimension_names=["y", "x"])
    arr[:100, :100] = 1.0
    arr[-100:, -100:] = 2.0
    corners = [0, 3999]
    if indexers == "pointwise":
        sel = {"y": xr.DataArray(corners, dims="p"), "x": xr.DataArray(corners, dims="p")}
    else:
        sel = {"y": corners, "x": corners}
    ds = xr.open_dataset(tmp_path / "s.zarr", engine="zarrmax")
    tracemalloc.start()
    try:
        values = ds["v"].isel(sel).values
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    oracle = xr.open_dataset(tmp_path / "s.zarr", engine="zarr", consolidated=False)
    np.testing.assert_array_equal(values, oracle["v"].isel(sel).values)
    assert peak < 16 * 2**20, f"peak {peak / 2**20:.0f} MiB traced for 2 chunks of 80 KB"


def test_guess_can_open_is_cheap_and_never_raises(tmp_path):
    entry = ZarrmaxBackendEntrypoint()
    assert entry.guess_can_open("data.zarr")
    assert entry.guess_can_open("data.zarr/")
    assert not entry.guess_can_open("data.nc")
    assert not entry.guess_can_open(object())
    assert not entry.guess_can_open(None)
    assert not entry.guess_can_open(12)


def test_open_dataset_signature_follows_xarray_conventions():
    import inspect

    params = inspect.signature(ZarrmaxBackendEntrypoint.open_dataset).parameters
    assert "chunks" not in params and "cache" not in params
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values())
    assert all(p.kind is p.KEYWORD_ONLY for n, p in params.items() if n not in ("self", "filename_or_obj"))
    assert set(ZarrmaxBackendEntrypoint.open_dataset_parameters) == set(params) - {"self"}


def test_the_open_methods_share_one_signature_and_refuse_unknown_keywords_as_python_does(tmp_path):
    """The keywords are written once (`OpenOptions`): each method shows them as its own keyword-only
    parameters (xarray's detect_parameters, help()), open_datatree and open_groups without ``variables``, and a
    wrong keyword or argument count gets the TypeError Python gives a plain method."""
    import inspect
    import pydoc
    import typing

    from xarray.backends.plugins import detect_parameters

    from xarray_zarrmax.backend import OpenOptions

    entry = ZarrmaxBackendEntrypoint()
    names = [f for f in OpenOptions.__dataclass_fields__]
    assert detect_parameters(entry.open_dataset) == ("filename_or_obj", *names)
    for method in (entry.open_datatree, entry.open_groups_as_dict):
        params = inspect.signature(method).parameters
        assert list(params) == ["filename_or_obj", *(n for n in names if n != "variables")]
        assert all(p.kind is p.KEYWORD_ONLY for n, p in params.items() if n != "filename_or_obj")
    assert "device: 'DeviceSpec' = 'cpu'" in pydoc.render_doc(ZarrmaxBackendEntrypoint.open_dataset)
    # what introspection of a plain method finds: its keyword defaults and type hints, as xarray's own engines
    assert ZarrmaxBackendEntrypoint.open_dataset.__kwdefaults__ == {
        name: field.default for name, field in OpenOptions.__dataclass_fields__.items()}
    assert list(typing.get_type_hints(ZarrmaxBackendEntrypoint.open_dataset)) == ["filename_or_obj", *names, "return"]
    path = write_with_zarr(era5_like(), tmp_path / "e.zarr")
    for call, message in [
        (lambda: entry.open_dataset(path, consolidate=False),
         "ZarrmaxBackendEntrypoint.open_dataset() got an unexpected keyword argument 'consolidate'"),
        (lambda: entry.open_datatree(path, variables=["t2m"]),
         "ZarrmaxBackendEntrypoint.open_datatree() got an unexpected keyword argument 'variables'"),
        (lambda: entry.open_dataset(path, True),
         "ZarrmaxBackendEntrypoint.open_dataset() takes 2 positional arguments but 3 were given"),
        (lambda: entry.open_dataset(path, True, bogus=1),  # Python names the keyword first
         "ZarrmaxBackendEntrypoint.open_dataset() got an unexpected keyword argument 'bogus'"),
        (lambda: entry.open_groups_as_dict(),
         "ZarrmaxBackendEntrypoint.open_groups_as_dict() missing 1 required positional argument: 'filename_or_obj'"),
    ]:
        with pytest.raises(TypeError) as raised:
            call()
        assert str(raised.value) == message
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'consolidate'"):
        xr.open_dataset(path, engine="zarrmax", consolidate=False)


def test_zarr_store_and_obstore_inputs(tmp_path):
    from obstore.store import LocalStore as ObLocal

    path = write_with_zarr(era5_like(), tmp_path / "era5.zarr")
    oracle = xr.open_dataset(path, engine="zarr", consolidated=False).load()
    via_url = xr.open_dataset(f"file://{path}", engine="zarrmax").load()
    via_zarr = xr.open_dataset(zarr.storage.LocalStore(path), engine="zarrmax").load()
    via_obstore = xr.open_dataset(ObLocal(path), engine="zarrmax").load()
    for ds in (via_url, via_zarr, via_obstore):
        xr.testing.assert_identical(ds, oracle)


def test_crc32c_before_the_compressor_falls_back_and_matches_zarr(tmp_path):
    """A valid but unusual chain (checksum of the uncompressed bytes) is read by zarr-python, not misread."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec

    group = zarr.open_group(str(tmp_path / "c.zarr"), mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(5, 6), chunks=(2, 3), dtype="f4", serializer=BytesCodec(),
                             compressors=[Crc32cCodec(), ZstdCodec()], dimension_names=["y", "x"])
    arr[:] = np.arange(30, dtype="f4").reshape(5, 6)
    ours = xr.open_dataset(tmp_path / "c.zarr", engine="zarrmax", chunks={})
    oracle = xr.open_dataset(tmp_path / "c.zarr", engine="zarr", consolidated=False)
    xr.testing.assert_identical(ours.load(), oracle.load())


@pytest.mark.parametrize("chunks", [None, {}])
def test_big_endian_datetime_index_keeps_its_dtype_as_engine_zarr(tmp_path, chunks):
    """An index coordinate is read at open; handed to xarray as a bare array, xarray made a big-endian
    datetime native, where engine="zarr" (lazily wrapped data) keeps '>M8[ns]'. Found by hypothesis."""
    group = zarr.open_group(tmp_path / "be", mode="w", zarr_format=2)
    t = group.create_array("t", shape=(2,), chunks=(1,), dtype=">M8[ns]", compressors=None,
                           attributes={"_ARRAY_DIMENSIONS": ["t"]})
    t[:] = np.array(["2020-01-01", "2021-06-01"], dtype=">M8[ns]")
    ours = xr.open_dataset(tmp_path / "be", engine="zarrmax", chunks=chunks, consolidated=False)
    oracle = xr.open_dataset(tmp_path / "be", engine="zarr", chunks=chunks, consolidated=False)
    assert ours["t"].dtype == oracle["t"].dtype == np.dtype(">M8[ns]")
    xr.testing.assert_identical(ours.load(), oracle.load())


def _coordinate_store(path) -> zarr.Group:
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("x", shape=(4,), dtype="i8", chunks=(2,), dimension_names=["x"])[:] = [0, 1, 2, 3]
    group.create_array("v", shape=(4,), dtype="f8", chunks=(2,), dimension_names=["x"])[:] = 1.0
    return group


@pytest.mark.parametrize("chunks", [None, {}])
@pytest.mark.parametrize("how", ["open_dataset", "open_datatree", "open_groups"])
def test_a_coordinate_without_an_index_is_read_when_used(tmp_path, chunks, how):
    """With create_default_indexes=False xarray builds no index at open, so engine="zarr" reads the coordinate
    when it is used: after the store changed, its new values. Read at the open, it kept the old ones (found by
    a review); with indexes (the default) both engines read it at the open."""
    path = tmp_path / "c.zarr"
    group = _coordinate_store(path)
    opened = {}
    for engine in ("zarr", "zarrmax"):
        kwargs = {"engine": engine, "chunks": chunks, "create_default_indexes": False, "consolidated": False}
        if how == "open_dataset":
            opened[engine] = xr.open_dataset(path, **kwargs)
        elif how == "open_datatree":
            opened[engine] = xr.open_datatree(path, **kwargs).to_dataset()
        else:
            opened[engine] = xr.open_groups(path, **kwargs)["/"]
    with_index = xr.open_dataset(path, engine="zarrmax", chunks=chunks, consolidated=False)
    group["x"][:] = [10, 11, 12, 13]
    for engine, ds in opened.items():
        assert not ds.xindexes and ds["x"].values.tolist() == [10, 11, 12, 13], engine
    assert with_index["x"].values.tolist() == [0, 1, 2, 3]  # the index of the open, as engine="zarr" has it


def test_a_corrupt_coordinate_without_an_index_fails_only_when_read(tmp_path):
    """Without default indexes the coordinate is not read at open: a corrupt chunk of it fails its own read, as
    with engine="zarr", not the open of every other variable."""
    path = tmp_path / "c.zarr"
    _coordinate_store(path)
    (path / "x" / "c" / "1").write_bytes(b"\x28\xb5\x2f\xfd not zstd")
    for engine in ("zarr", "zarrmax"):
        ds = xr.open_dataset(path, engine=engine, create_default_indexes=False, consolidated=False)
        assert ds["v"].values.tolist() == [1.0] * 4, engine
        with pytest.raises(Exception) as raised:
            ds["x"].values
        assert isinstance(raised.value, (RuntimeError, ValueError)), (engine, raised.value)


@pytest.mark.parametrize("how", ["open_dataset", "open_datatree", "open_groups"])
def test_drop_variables_may_be_any_iterable(tmp_path, how):
    """drop_variables given as an iterator was spent before xarray's decoding saw it, which then dropped
    nothing (found by a review)."""
    path = tmp_path / "c.zarr"
    _coordinate_store(path)
    got = {}
    for engine in ("zarr", "zarrmax"):
        drop = (name for name in ["v"])
        if how == "open_dataset":
            ds = xr.open_dataset(path, engine=engine, drop_variables=drop, consolidated=False)
        elif how == "open_datatree":
            ds = xr.open_datatree(path, engine=engine, drop_variables=drop, consolidated=False).to_dataset()
        else:
            ds = xr.open_groups(path, engine=engine, drop_variables=drop, consolidated=False)["/"]
        got[engine] = sorted(ds.variables)
    assert got["zarrmax"] == got["zarr"] == ["x"]


def _opened(how, path, **kwargs):
    if how == "open_dataset":
        return xr.open_dataset(path, consolidated=False, **kwargs)
    if how == "open_datatree":
        return xr.open_datatree(path, consolidated=False, **kwargs).to_dataset()
    return xr.open_groups(path, consolidated=False, **kwargs)["/"]


def _outcome(call):
    try:
        return sorted(call().variables)
    except Exception as err:  # noqa: BLE001 - the type is what is compared
        return type(err)


@pytest.mark.parametrize("how", ["open_dataset", "open_datatree", "open_groups"])
@pytest.mark.parametrize("drop", [0, False, np.array(["v", "x"]), pd.Index(["x"]), ("v",), {"x", "v"}],
                         ids=["zero", "false", "ndarray", "pd-index", "tuple", "set"])
def test_drop_variables_is_read_as_xarray_reads_it(tmp_path, how, drop):
    """drop_variables is whatever xarray's decoding takes: set() of it. A falsy non-iterable was taken for
    "none" (engine="zarr": TypeError), a NumPy array or pandas Index failed on its truth value (engine="zarr"
    drops its names); found by a review."""
    path = tmp_path / "c.zarr"
    _coordinate_store(path)
    got = {engine: _outcome(lambda engine=engine: _opened(how, path, engine=engine, drop_variables=drop))
           for engine in ("zarr", "zarrmax")}
    if isinstance(got["zarr"], type):  # an error: ours is of its type (ArgumentTypeError for a TypeError)
        assert isinstance(got["zarrmax"], type) and issubclass(got["zarrmax"], got["zarr"]), got
    else:
        assert got["zarrmax"] == got["zarr"]


def test_drop_variables_as_a_generator_drops_in_every_group(tmp_path):
    """Declared (docs/dev/design.md): a generator drops its names in every group, as a list does; engine="zarr"
    spends it on the first group decoded."""
    group = _coordinate_store(tmp_path / "c.zarr")
    child = group.create_group("child")
    child.create_array("v", shape=(2,), dtype="f8", dimension_names=["y"])[:] = 2.0
    child.create_array("w", shape=(2,), dtype="f8", dimension_names=["y"])[:] = 3.0
    groups = xr.open_groups(tmp_path / "c.zarr", engine="zarrmax", consolidated=False,
                            drop_variables=(name for name in ["v"]))
    assert {key: sorted(ds.variables) for key, ds in groups.items()} == {"/": ["x"], "/child": ["w"]}


class _RenamingBackend(ZarrmaxBackendEntrypoint):
    """A user's backend that post-processes ours: xarray then indexes nothing of what we read."""

    def open_dataset(self, filename_or_obj, **kwargs):  # type: ignore[override]
        return super().open_dataset(filename_or_obj, **kwargs).rename_vars({"x": "x_raw"})


@pytest.mark.parametrize("chunks", [None, {}])
def test_a_coordinate_renamed_by_a_wrapping_backend_is_read_when_used(tmp_path, chunks):
    """xarray builds default indexes from what the outermost backend returns; a wrapper that renames our index
    coordinate leaves it without one, so it must be read when used, as engine="zarr" reads it. Read at the open
    (the frame of xarray's open_dataset was found two calls up), it kept the values of that moment after the
    store changed: found by a review."""
    path = tmp_path / "c.zarr"
    group = _coordinate_store(path)
    ds = xr.open_dataset(path, engine=_RenamingBackend, chunks=chunks, consolidated=False)
    group["x"][:] = [10, 11, 12, 13]
    assert not ds.xindexes
    assert ds["x_raw"].values.tolist() == [10, 11, 12, 13]


@pytest.mark.parametrize("indexes", [True, False])
def test_an_index_coordinate_stays_on_the_host_with_a_device(tmp_path, monkeypatch, indexes):
    """With device=, an index coordinate is host data whether or not xarray indexes it (read at the open or
    when used); data variables go through the device."""
    import xarray_zarrmax.gpu.read as device_read
    from xarray_zarrmax.gpu.device import HostDevice

    path = tmp_path / "c.zarr"
    _coordinate_store(path)
    on_device = []
    real = device_read.read_selection_on
    monkeypatch.setattr(device_read, "read_selection_on",
                        lambda device, plan, *a, **kw: on_device.append(plan.name) or real(device, plan, *a, **kw))
    ds = xr.open_dataset(path, engine="zarrmax", consolidated=False, device=HostDevice(),
                         create_default_indexes=indexes)
    assert ds["x"].values.tolist() == [0, 1, 2, 3] and ds["v"].values.tolist() == [1.0] * 4
    assert on_device == ["v"]


def test_array_dimensions_given_as_a_mapping_name_its_keys(tmp_path):
    """engine="zarr" iterates a v2 array's _ARRAY_DIMENSIONS: a JSON object gives its keys (found by a
    review: zarrmax refused it)."""
    group = zarr.open_group(tmp_path / "d.zarr", mode="w", zarr_format=2)
    group.create_array("v", shape=(3,), dtype="i4", attributes={"_ARRAY_DIMENSIONS": {"a": 1}})[:] = [1, 2, 3]
    ours = xr.open_dataset(tmp_path / "d.zarr", engine="zarrmax", consolidated=False)
    oracle = xr.open_dataset(tmp_path / "d.zarr", engine="zarr", consolidated=False)
    assert ours["v"].dims == oracle["v"].dims == ("a",)
    xr.testing.assert_identical(ours.load(), oracle.load())


@pytest.mark.parametrize("how", ["open_dataset", "open_datatree", "open_groups"])
@pytest.mark.parametrize("indexes", [True, False, None])
def test_index_coordinates_are_read_during_the_open_when_xarray_builds_indexes(tmp_path, monkeypatch, how, indexes):
    """xarray keeps create_default_indexes to itself: the backend reads it from xarray's frame, and reads index
    coordinates during the open (one concurrent batch with the metadata) exactly when xarray builds indexes."""
    path = tmp_path / "c.zarr"
    _coordinate_store(path)
    seen = []
    for name in ("open", "open_tree"):
        real = getattr(ZarrmaxStore, name).__func__
        monkeypatch.setattr(ZarrmaxStore, name, classmethod(
            lambda cls, *a, _real=real, **kw: seen.append(kw["preload_indexes"]) or _real(cls, *a, **kw)))
    kwargs = {} if indexes is None else {"create_default_indexes": indexes}
    getattr(xr, how)(path, engine="zarrmax", consolidated=False, **kwargs)
    assert seen == [indexes is not False]
    ZarrmaxBackendEntrypoint().open_dataset(path, consolidated=False)  # not through xarray: nothing read early
    assert seen[-1] is False
