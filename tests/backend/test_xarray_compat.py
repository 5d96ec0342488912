"""`xarray_zarrmax.xarray_compat`: one test per private xarray dependency, each failing if xarray changes what the
dependency reaches into (a renamed local, a removed function, other parameters, another protocol), and the
loud failures the functions raise themselves."""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from xarray.core import indexing
from zarr.storage import MemoryStore

import xarray_zarrmax
from xarray_zarrmax import xarray_compat
from xarray_zarrmax.backend import FallbackArray, ZarrmaxArray, ZarrmaxBackendEntrypoint, ZarrmaxStore


def _coordinates(path: Path) -> Path:
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("x", shape=(4,), dtype="i8", dimension_names=["x"])[:] = [0, 1, 2, 3]
    group.create_array("v", shape=(4,), chunks=(2,), dtype="f8", dimension_names=["x"])[:] = 1.0
    group.create_group("child").create_array("w", shape=(2,), dtype="f8", dimension_names=["y"])[:] = 2.0
    return path


# -- opener_call: xarray's openers' `chunks` and `create_default_indexes`, read from their frame -------------------


@pytest.mark.parametrize("how", ["open_dataset", "open_datatree", "open_groups"])
@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"chunks": {}, "create_default_indexes": False}, xarray_compat.OpenerCall(False, True)),
    ({"chunks": None}, xarray_compat.OpenerCall(True, False)),
    ({"chunks": {"x": 2}}, xarray_compat.OpenerCall(True, False)),
], ids=["chunks-empty-no-indexes", "defaults", "user-chunks"])
def test_opener_call_reads_the_options_of_each_opener(tmp_path, monkeypatch, how, kwargs, expected):
    """What `opener_call` saw, through xarray's three openers: the stores are opened with it."""
    path = _coordinates(tmp_path / "c.zarr")
    seen = []
    for name in ("open", "open_tree"):
        real = getattr(ZarrmaxStore, name).__func__
        monkeypatch.setattr(ZarrmaxStore, name, classmethod(
            lambda cls, *a, _real=real, **kw: seen.append((kw["preload_indexes"], kw["group_tasks"]))
            or _real(cls, *a, **kw)))
    getattr(xr, how)(path, engine="zarrmax", consolidated=False, **kwargs)
    assert seen == [(expected.builds_indexes, expected.dask_default)]
    ZarrmaxBackendEntrypoint().open_dataset(path, consolidated=False)  # not through xarray: neither
    assert seen[-1] == (False, False)


def _fake_xarray_function(module: str, source: str) -> Any:
    """A function defined as if in ``module``, calling our entrypoint as an opener of xarray would."""
    namespace: dict[str, Any] = {"__name__": module, "ZarrmaxBackendEntrypoint": ZarrmaxBackendEntrypoint}
    exec(compile(source, f"<{module}>", "exec"), namespace)  # noqa: S102 - the stand-in for a changed xarray
    return namespace["opener"]


@pytest.mark.parametrize(("module", "source", "message"), [
    ("xarray.backends.api", "def open_dataset(target, *, chunk_sizes=None, create_default_indexes=True):\n"
     "    return ZarrmaxBackendEntrypoint().open_dataset(target, consolidated=False)\nopener = open_dataset",
     "open_dataset has no parameter 'chunks'"),
    ("xarray.backends.api", "def open_dataset(target, *, chunks=None, default_indexes=True):\n"
     "    return ZarrmaxBackendEntrypoint().open_dataset(target, consolidated=False)\nopener = open_dataset",
     "open_dataset has no parameter 'create_default_indexes'"),
    ("xarray.backends.api", "def _open_dataset_impl(target, chunks=None, create_default_indexes=True):\n"
     "    return ZarrmaxBackendEntrypoint().open_dataset(target, consolidated=False)\nopener = _open_dataset_impl",
     "xarray.backends.api._open_dataset_impl calls the backend"),
    ("xarray.backends.opening", "def open_dataset(target, *, chunks=None, create_default_indexes=True):\n"
     "    return ZarrmaxBackendEntrypoint().open_dataset(target, consolidated=False)\nopener = open_dataset",
     "xarray.backends.opening.open_dataset calls the backend"),
], ids=["chunks-renamed", "create-default-indexes-renamed", "call-moved-to-a-helper", "openers-moved"])
def test_opener_call_fails_loudly_when_xarray_changes_its_openers(tmp_path, module, source, message):
    """An opener without the parameters read, or a call of the backend from a function of xarray's backends
    other than the openers known: an error naming the xarray version, not an open without index preloading
    or chunks={} grouping."""
    opener = _fake_xarray_function(module, source)
    with pytest.raises(RuntimeError, match=rf"xarray {xr.__version__} changed .*opener_call.*: .*{message}"):
        opener(_coordinates(tmp_path / "c.zarr"))


def test_opener_call_check_holds_for_the_installed_xarray():
    """The openers are where `opener_call` looks, with the parameters it reads."""
    xarray_compat._check_openers()
    for name in xarray_compat.OPENERS:
        code = getattr(xr, name).__code__
        assert getattr(xr, name).__module__ == xarray_compat.OPENER_MODULE
        assert {"chunks", "create_default_indexes"} <= set(code.co_varnames[:code.co_argcount
                                                                            + code.co_kwonlyargcount])


# -- reading ---------------------------------------------------------------------------------------------------


def test_async_explicit_indexing_adapter_decomposes_as_the_sync_adapter():
    """The async adapter xarray's zarr backend uses: an outer indexer with an array, decomposed for OUTER
    support, answers as the documented synchronous adapter does."""
    values = np.arange(12.0).reshape(3, 4)
    key = indexing.OuterIndexer((np.array([2, 0]), slice(1, 3)))
    raw_keys = []

    async def raw(k: tuple[Any, ...]) -> np.ndarray:
        raw_keys.append(k)
        return values[np.ix_(*(np.arange(4)[s] if isinstance(s, slice) else s for s in k))] \
            if any(isinstance(s, np.ndarray) for s in k) else values[k]

    got = asyncio.run(xarray_compat.async_explicit_indexing_adapter(key, values.shape,
                                                                    indexing.IndexingSupport.OUTER, raw))
    expected = indexing.explicit_indexing_adapter(key, values.shape, indexing.IndexingSupport.OUTER,
                                                  lambda k: asyncio.run(raw(k)))
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, values[[2, 0]][:, 1:3])
    assert len(raw_keys) == 2
    xarray_compat._check_async_adapter()


def test_decode_fill_value_decodes_as_engine_zarr(tmp_path):
    """A base64 ``_FillValue`` attribute of a v3 array (as xarray writes one where the fill value does not
    mask) decodes to the number, and both engines give the same attribute."""
    assert xarray_compat.decode_fill_value("AAAAAAAA+D8=", np.dtype("f8")) == 1.5
    group = zarr.open_group(tmp_path / "f.zarr", mode="w", zarr_format=3)
    group.create_array("v", shape=(2,), dtype="f8", dimension_names=["x"],
                       attributes={"_FillValue": "AAAAAAAA+D8="})[:] = [1.0, 2.0]
    ours = xr.open_dataset(tmp_path / "f.zarr", engine="zarrmax", consolidated=False, mask_and_scale=False)
    theirs = xr.open_dataset(tmp_path / "f.zarr", engine="zarr", consolidated=False, mask_and_scale=False)
    assert ours["v"].attrs["_FillValue"] == theirs["v"].attrs["_FillValue"] == 1.5
    xarray_compat._check_fill_value()


def test_backend_array_finds_our_lazy_arrays_under_xarray_wrappers(tmp_path):
    """What ``xarray-zarrmax info`` reports: the fast path's array under xarray's caching and decoding
    wrappers; an index coordinate built into an index is not ours."""
    path = _coordinates(tmp_path / "c.zarr")
    ds = xr.open_dataset(path, engine="zarrmax", consolidated=False)
    assert isinstance(xarray_compat.backend_array(ds["v"].variable, (ZarrmaxArray, FallbackArray)), ZarrmaxArray)
    assert not isinstance(xarray_compat.backend_array(ds["x"].variable, (ZarrmaxArray, FallbackArray)),
                          ZarrmaxArray | FallbackArray)
    xarray_compat._check_backend_array()


# -- writing -----------------------------------------------------------------------------------------------------


def _writable(store: Any, **kwargs: Any) -> Any:
    options = {"mode": "w", "group": None, "consolidated": None, "append_dim": None, "region": None,
               "safe_chunks": False, "zarr_format": 3, "write_empty_chunks": None, **kwargs}
    return xarray_compat.writable_zarr_store(store, **options)


def _stored(store: MemoryStore) -> xr.Dataset:
    ds = xr.Dataset({"v": ("x", np.arange(6.0))}, coords={"x": np.arange(6)})
    ds.to_zarr(store, mode="w", zarr_format=3, consolidated=False)
    return ds


def test_validate_dataset_names_refuses_as_to_zarr():
    bad = xr.Dataset({"": ("x", [1.0])})
    with pytest.raises(ValueError, match="Invalid name") as ours:
        xarray_compat.validate_dataset_names(bad)
    with pytest.raises(ValueError) as theirs:
        bad.to_zarr(MemoryStore(), zarr_format=3)
    assert str(ours.value) == str(theirs.value)
    xarray_compat.validate_dataset_names(xr.Dataset({"v": ("x", [1.0])}))
    xarray_compat._check_validate_names()


def test_writable_zarr_store_opens_xarrays_zarr_store():
    from xarray.backends import ZarrStore

    zstore = _writable(MemoryStore(), safe_chunks=True)
    assert isinstance(zstore, ZarrStore)
    xarray_compat._check_writable_store()


def test_validate_and_autodetect_region_resolves_auto_and_drops_indexes():
    store = MemoryStore()
    ds = _stored(store)
    zstore = _writable(store, mode="r+", region="auto")
    part = xarray_compat.validate_and_autodetect_region(zstore, ds.isel(x=slice(2, 4)))
    assert list(part.variables) == ["v"]  # index coordinates cannot be written to a region
    assert zstore._write_region == {"x": slice(2, 4)}
    with pytest.raises(ValueError, match="must have at least one dimension in common"):
        xarray_compat.validate_and_autodetect_region(_writable(store, mode="r+", region={"x": slice(0, 2)}),
                                                     ds.assign(s=((), 1.0)))
    xarray_compat._check_store_method("validate_and_autodetect_region", "_validate_and_autodetect_region", "ds")()


def test_validate_encoding_refuses_encoding_of_existing_variables():
    store = MemoryStore()
    _stored(store)
    with pytest.raises(ValueError, match="variable 'v' already exists, but encoding was provided"):
        xarray_compat.validate_encoding(_writable(store, mode="a"), {"v": {"chunks": (2,)}})
    xarray_compat.validate_encoding(_writable(store, mode="a"), {"new": {"chunks": (2,)}})
    xarray_compat._check_store_method("validate_encoding", "_validate_encoding", "encoding")()


def test_dump_to_store_hands_each_variables_data_to_the_writer():
    """xarray's writer writes the metadata and calls ``writer.add(source, target, region)`` for each variable's
    data, which `xarray_zarrmax.write` records instead of writing."""
    calls = []

    class Recorder:
        def add(self, source: Any, target: Any, region: Any = None) -> None:
            calls.append((source, target, region))

    store = MemoryStore()
    ds = xr.Dataset({"v": ("x", np.arange(4.0))}, coords={"x": np.arange(4)})
    xarray_compat.dump_to_store(ds, _writable(store), Recorder(), encoding={"v": {"chunks": (2,)}})
    by_name = {target.path.rsplit("/", 1)[-1]: (source, region) for source, target, region in calls}
    assert set(by_name) == {"v", "x"}
    np.testing.assert_array_equal(np.asarray(by_name["v"][0]), np.arange(4.0))
    assert by_name["v"][1] == (slice(None),)
    written = zarr.open_group(store, mode="r")
    assert written["v"].chunks == (2,) and written["v"].shape == (4,)  # the metadata, from xarray's writer

    async def keys() -> list[str]:
        return sorted([key async for key in store.list()])

    assert asyncio.run(keys()) == ["v/zarr.json", "x/zarr.json", "zarr.json"]  # and no data
    xarray_compat._check_dump_to_store()


def test_dataarray_names_are_what_open_dataarray_reads_back(tmp_path):
    name_attribute, placeholder = xarray_compat.dataarray_names()
    assert (name_attribute, placeholder) == ("__xarray_dataarray_name__", "__xarray_dataarray_variable__")
    da = xr.DataArray(np.arange(3.0), dims=["x"], coords={"x": [0, 1, 2]}, name="x_values")
    xr.Dataset({placeholder: da.variable}, attrs={name_attribute: "x"}).to_zarr(
        tmp_path / "a.zarr", zarr_format=3, consolidated=False)
    assert xr.open_dataarray(tmp_path / "a.zarr", engine="zarr", consolidated=False).name == "x"


# -- the list, the report, and nothing private outside it ----------------------------------------------------------


def test_every_dependency_is_as_expected_and_the_report_says_so():
    assert xarray_compat.problems() == {}
    names = [d.name for d in xarray_compat.DEPENDENCIES]
    assert len(set(names)) == len(names) and all(callable(getattr(xarray_compat, n)) for n in names)
    run = subprocess.run([sys.executable, "-m", "xarray_zarrmax.xarray_compat"], capture_output=True, text=True,
                         check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"xarray {xr.__version__}: {len(names)} private dependencies")
    assert [line.split()[1] for line in lines[1:]] == names
    assert all(line.split()[0] == "ok" for line in lines[1:])


#: What the package may import of xarray outside `xarray_compat`: xarray's public namespace, what
#: `xarray.backends` exports, and the indexing hooks xarray's backend guide documents.
_PUBLIC = {"xarray": None, "xarray.backends": None, "xarray.core": {"indexing"}}


def test_nothing_outside_xarray_compat_imports_xarray_internals():
    import xarray.backends

    package = Path(xarray_zarrmax.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "xarray_compat.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found += [(path, alias.name, None) for alias in node.names if alias.name.split(".")[0] == "xarray"]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "xarray":
                found += [(path, node.module, alias.name) for alias in node.names]
    wrong = []
    for path, module, name in found:
        allowed = module in _PUBLIC and (name is None or not name.startswith("_"))
        if module == "xarray.backends":
            allowed = name in xarray.backends.__all__
        elif module == "xarray.core":
            allowed = name in (_PUBLIC["xarray.core"] or ())
        if not allowed:
            wrong.append(f"{path.relative_to(package)}: {module} {name or ''}")
    assert not wrong, wrong
    assert found  # the walk saw the package's imports
