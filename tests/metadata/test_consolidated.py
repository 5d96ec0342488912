"""Consolidated-metadata semantics and metadata flavours as engine="zarr" reads them: where consolidated
metadata is looked for (the root, also for ``group=``), the warning for ``consolidated=None`` without it,
stores that cannot hold it (Icechunk), NCZarr dimension references, v3 ``dimension_names`` holding None, and
the order of variables. Every case opens the same store with both engines and compares."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr

from xarray_zarrmax import request_counts

ENGINES = ("zarr", "zarrmax")
UNCONSOLIDATED = "Failed to open Zarr store with consolidated metadata"


@contextmanager
def recorded() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def runtime_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def opened(target: Any, engine: str, **kwargs: Any) -> tuple[xr.Dataset | BaseException, list[str]]:
    """The loaded Dataset (or the exception) and the RuntimeWarnings of one open."""
    with recorded() as caught:
        try:
            result: xr.Dataset | BaseException = xr.open_dataset(target, engine=engine, **kwargs).load()
        except Exception as err:
            result = err
    return result, runtime_warnings(caught)


def both(target: Any, **kwargs: Any) -> dict[str, tuple[xr.Dataset | BaseException, list[str]]]:
    return {engine: opened(target, engine, **kwargs) for engine in ENGINES}


def assert_same_datasets(results: dict[str, tuple[Any, list[str]]]) -> xr.Dataset:
    (zarr_ds, _), (ours, _) = results["zarr"], results["zarrmax"]
    assert isinstance(zarr_ds, xr.Dataset), f"engine='zarr' failed: {zarr_ds!r}"
    assert isinstance(ours, xr.Dataset), f"engine='zarrmax' failed: {ours!r}"
    xr.testing.assert_identical(ours, zarr_ds)
    return ours


def write_group(path: Path, names: tuple[str, ...] = ("v",), zarr_format: int = 3, group: str = "") -> zarr.Group:
    root = zarr.open_group(path, mode="a", zarr_format=zarr_format)
    target = root.require_group(group) if group else root
    target.attrs["title"] = f"group {group or '/'}"
    for i, name in enumerate(names):
        dims = {"dimension_names": ["t"]} if zarr_format == 3 else {"attributes": {"_ARRAY_DIMENSIONS": ["t"]}}
        target.create_array(name, shape=(3,), chunks=(2,), dtype="i4", **dims)[:] = np.arange(3) + 10 * i
    return target


def consolidate(path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr's "not part of the v3 spec" warning
        zarr.consolidate_metadata(path)


# -- consolidated=None without consolidated metadata warns, as engine="zarr" ---------------------------------


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_consolidated_none_without_it_warns_as_engine_zarr(tmp_path: Path, zarr_format: int) -> None:
    write_group(tmp_path / "s", zarr_format=zarr_format)
    results = both(tmp_path / "s")
    assert_same_datasets(results)
    for engine in ENGINES:
        warned = results[engine][1]
        assert len(warned) == 1 and warned[0].startswith(UNCONSOLIDATED), (engine, warned)
    assert results["zarrmax"][1] == results["zarr"][1]  # the same text


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize(("consolidated", "consolidate_first"), [(False, False), (None, True), (True, True)])
def test_no_warning_where_engine_zarr_gives_none(tmp_path: Path, zarr_format: int, consolidated: bool | None,
                                                 consolidate_first: bool) -> None:
    write_group(tmp_path / "s", zarr_format=zarr_format)
    if consolidate_first:
        consolidate(tmp_path / "s")
    results = both(tmp_path / "s", consolidated=consolidated)
    assert_same_datasets(results)
    assert results["zarr"][1] == [] and results["zarrmax"][1] == []


def test_the_warning_names_the_callers_line(tmp_path: Path) -> None:
    write_group(tmp_path / "s")
    with recorded() as caught:
        xr.open_dataset(tmp_path / "s", engine="zarrmax")
    (warning,) = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert warning.filename == __file__


def test_consolidated_true_without_it_raises_value_error_as_engine_zarr(tmp_path: Path) -> None:
    write_group(tmp_path / "s")
    results = both(tmp_path / "s", consolidated=True)
    for engine in ENGINES:
        assert isinstance(results[engine][0], ValueError), (engine, results[engine][0])
    assert "consolidated metadata" in str(results["zarrmax"][0])


# -- stores that cannot hold consolidated metadata ----------------------------------------------------------


@pytest.mark.parametrize("consolidated", [True, None, False])
def test_icechunk_reads_its_hierarchy_whatever_consolidated_says(tmp_path: Path, consolidated: bool | None) -> None:
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "ic")))
    session = repo.writable_session("main")
    group = zarr.open_group(session.store, mode="w")
    group.create_array("v", shape=(3,), chunks=(2,), dtype="i4", dimension_names=["t"])[:] = [1, 2, 3]
    session.commit("one array")
    store = repo.readonly_session("main").store
    assert store.supports_consolidated_metadata is False
    results = both(store, consolidated=consolidated)
    ours = assert_same_datasets(results)
    assert ours["v"].values.tolist() == [1, 2, 3]
    assert results["zarrmax"][1] == results["zarr"][1] == []  # nothing to warn about: the store decides


# -- group= reads the consolidated metadata at the root ----------------------------------------------------


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("consolidated", [True, None])
def test_group_from_consolidated_metadata_at_the_root(tmp_path: Path, zarr_format: int,
                                                       consolidated: bool | None) -> None:
    write_group(tmp_path / "s", ("root_var",), zarr_format=zarr_format)
    write_group(tmp_path / "s", ("v", "w"), zarr_format=zarr_format, group="forecast/day1")
    consolidate(tmp_path / "s")
    results = both(tmp_path / "s", group="forecast/day1", consolidated=consolidated)
    ours = assert_same_datasets(results)
    assert list(ours.data_vars) == ["v", "w"] and ours.attrs == {"title": "group forecast/day1"}
    assert results["zarrmax"][1] == results["zarr"][1] == []


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_group_sees_what_the_root_recorded_as_engine_zarr(tmp_path: Path, zarr_format: int) -> None:
    """An array added to the group after the root was consolidated: engine="zarr" reads the root's record
    (without it) unless consolidated=False, and so do we."""
    write_group(tmp_path / "s", ("v",), zarr_format=zarr_format, group="forecast")
    consolidate(tmp_path / "s")
    zarr.open_group(tmp_path / "s" / "forecast", mode="a").create_array(
        "late", shape=(3,), dtype="i4",
        **({"dimension_names": ["t"]} if zarr_format == 3 else {"attributes": {"_ARRAY_DIMENSIONS": ["t"]}}))
    recorded_view = assert_same_datasets(both(tmp_path / "s", group="forecast"))
    assert list(recorded_view.data_vars) == ["v"]
    listed_view = assert_same_datasets(both(tmp_path / "s", group="forecast", consolidated=False))
    assert sorted(listed_view.data_vars) == ["late", "v"]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_group_missing_from_the_roots_consolidated_metadata_is_a_key_error(tmp_path: Path, zarr_format: int) -> None:
    write_group(tmp_path / "s", ("v",), zarr_format=zarr_format, group="forecast")
    consolidate(tmp_path / "s")
    results = both(tmp_path / "s", group="hindcast", consolidated=True)
    for engine in ENGINES:
        assert isinstance(results[engine][0], KeyError), (engine, results[engine][0])
    assert "'hindcast' not found in the consolidated metadata" in str(results["zarrmax"][0])


def test_group_consolidated_at_the_root_costs_one_round_trip(tmp_path: Path) -> None:
    """The root's zarr.json (which records the group) and the group's own (read from in case the root holds no
    consolidated metadata) go out together: 2 GETs in one round trip, no LIST, no member GETs."""
    write_group(tmp_path / "s", ("v", "w"), group="forecast")
    consolidate(tmp_path / "s")
    with request_counts() as counts:
        xr.open_dataset(tmp_path / "s", engine="zarrmax", group="forecast", chunks={})
    metadata = [key for _, kind, key in counts.keys if kind == "get" and key.endswith("zarr.json")]
    assert sorted(metadata) == ["forecast/zarr.json", "zarr.json"], counts.keys
    assert counts.total("list") == 0, counts.keys


# -- metadata flavours --------------------------------------------------------------------------------------


def nczarr_store(path: Path, dimrefs: dict[str, list[str]] | None) -> Path:
    """An NCZarr v2 group as netCDF-C writes one: dimensions as fully qualified names in each ``.zarray``'s
    ``_NCZARR_ARRAY``, no ``_ARRAY_DIMENSIONS``, ``_NCZARR_*`` bookkeeping in ``.zgroup`` and ``.zattrs``."""
    group = zarr.open_group(path, mode="w", zarr_format=2)
    group.create_array("temp", shape=(3, 4), chunks=(2, 2), dtype="f4", fill_value=-1.0)[:] = (
        np.arange(12, dtype="f4").reshape(3, 4))
    group.create_array("x", shape=(3,), dtype="i4")[:] = [10, 20, 30]
    for name in ("temp", "x"):
        zarray = json.loads((path / name / ".zarray").read_text())
        if dimrefs is not None:
            zarray["_NCZARR_ARRAY"] = {"dimrefs": dimrefs[name], "storage": "chunked"}
        (path / name / ".zarray").write_text(json.dumps(zarray))
        (path / name / ".zattrs").write_text(json.dumps({"units": "K", "_NCZARR_ATTR": {"types": {"units": ">S1"}}}))
    zgroup = json.loads((path / ".zgroup").read_text())
    zgroup["_NCZARR_GROUP"] = {"dims": {"x": 3, "y": 4}, "vars": ["temp", "x"], "groups": []}
    (path / ".zgroup").write_text(json.dumps(zgroup))
    (path / ".zattrs").write_text(json.dumps({"title": "nczarr", "_NCZARR_ATTR": {"types": {}}}))
    return path


@pytest.mark.parametrize("consolidated", [None, False])
def test_nczarr_dimension_references(tmp_path: Path, consolidated: bool | None) -> None:
    path = nczarr_store(tmp_path / "nc", {"temp": ["/x", "/sub/y"], "x": ["/x"]})
    ours = assert_same_datasets(both(path, consolidated=consolidated))
    assert ours["temp"].dims == ("x", "y") and ours.attrs == {"title": "nczarr"}
    assert ours["temp"].attrs == {"units": "K"}  # the _NCZARR_ATTR bookkeeping is hidden, as engine="zarr"


def test_nczarr_array_reads_on_the_fast_path(tmp_path: Path) -> None:
    from xarray_zarrmax.backend import ZarrmaxArray

    path = nczarr_store(tmp_path / "nc", {"temp": ["/x", "/y"], "x": ["/x"]})
    lazy = xr.open_dataset(path, engine="zarrmax", consolidated=False)["temp"].variable._data
    while not isinstance(lazy, ZarrmaxArray) and hasattr(lazy, "array"):
        lazy = lazy.array
    assert isinstance(lazy, ZarrmaxArray), type(lazy)


def test_no_dimension_names_at_all_is_a_key_error_as_engine_zarr(tmp_path: Path) -> None:
    path = nczarr_store(tmp_path / "nc", None)
    results = both(path, consolidated=False)
    for engine in ENGINES:
        assert isinstance(results[engine][0], KeyError), (engine, results[engine][0])
    assert "_NCZARR_ARRAY" in str(results["zarrmax"][0]) and "_ARRAY_DIMENSIONS" in str(results["zarrmax"][0])


def test_v3_dimension_names_holding_none_name_a_dimension_none(tmp_path: Path) -> None:
    group = zarr.open_group(tmp_path / "s", mode="w")
    group.create_array("a", shape=(3,), dtype="f4", dimension_names=[None])[:] = 1
    group.create_array("b", shape=(3, 2), dtype="f4", dimension_names=[None, "x"])[:] = 2
    ours = assert_same_datasets(both(tmp_path / "s", consolidated=False))
    assert ours["b"].dims == (None, "x")


def test_v3_dimension_names_none_of_two_lengths_is_the_same_value_error(tmp_path: Path) -> None:
    group = zarr.open_group(tmp_path / "s", mode="w")
    group.create_array("a", shape=(3,), dtype="f4", dimension_names=[None])
    group.create_array("b", shape=(4,), dtype="f4", dimension_names=[None])
    results = both(tmp_path / "s", consolidated=False)
    for engine in ENGINES:
        assert isinstance(results[engine][0], ValueError), (engine, results[engine][0])
        assert "conflicting sizes for dimension None" in str(results[engine][0])


def test_v3_without_dimension_names_is_a_key_error_as_engine_zarr(tmp_path: Path) -> None:
    zarr.open_group(tmp_path / "s", mode="w").create_array("a", shape=(3,), dtype="f4")
    results = both(tmp_path / "s", consolidated=False)
    for engine in ENGINES:
        assert isinstance(results[engine][0], KeyError), (engine, results[engine][0])


# -- variable order ------------------------------------------------------------------------------------------

NAMES = ("zeta", "alpha", "Mid", "beta", "Alpha2")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_variable_order_is_the_consolidated_documents(tmp_path: Path, zarr_format: int) -> None:
    write_group(tmp_path / "s", NAMES, zarr_format=zarr_format)
    consolidate(tmp_path / "s")
    results = both(tmp_path / "s", consolidated=True)
    assert_same_datasets(results)
    zarr_order, our_order = (list(results[e][0].data_vars) for e in ENGINES)  # type: ignore[union-attr]
    assert our_order == zarr_order
    assert our_order != sorted(NAMES)  # zarr-python's order (case-folded), not a byte sort


def test_variable_order_without_consolidated_metadata_is_the_listings(tmp_path: Path) -> None:
    """zarr-python lists members in the order their metadata arrives (``asyncio.as_completed`` over its
    store's listing); the listing's order is the deterministic part of that, and the one we keep."""
    write_group(tmp_path / "s", NAMES)
    ours = xr.open_dataset(tmp_path / "s", engine="zarrmax", consolidated=False)
    listing = [n for n in os.listdir(tmp_path / "s") if n in NAMES]
    assert list(ours.data_vars) == listing
    assert sorted(xr.open_dataset(tmp_path / "s", engine="zarr", consolidated=False).data_vars) == sorted(listing)


# -- the same rules for whole hierarchies ---------------------------------------------------------------------


def opened_tree(target: Any, engine: str, **kwargs: Any) -> tuple[Any, list[str]]:
    with recorded() as caught:
        try:
            result: Any = xr.open_datatree(target, engine=engine, **kwargs).load()
        except Exception as err:
            result = err
    return result, runtime_warnings(caught)


@pytest.mark.parametrize(("consolidate_first", "consolidated", "warns"),
                         [(False, None, True), (False, False, False), (True, None, False)])
def test_open_datatree_warns_as_engine_zarr(tmp_path: Path, consolidate_first: bool, consolidated: bool | None,
                                            warns: bool) -> None:
    write_group(tmp_path / "s", ("v",))
    write_group(tmp_path / "s", ("w",), group="child")
    if consolidate_first:
        consolidate(tmp_path / "s")
    results = {engine: opened_tree(tmp_path / "s", engine, consolidated=consolidated) for engine in ENGINES}
    xr.testing.assert_identical(results["zarrmax"][0], results["zarr"][0])
    assert results["zarrmax"][1] == results["zarr"][1]
    assert bool(results["zarrmax"][1]) is warns


@pytest.mark.parametrize("consolidated", [True, None])
def test_open_datatree_on_icechunk_reads_its_hierarchy(tmp_path: Path, consolidated: bool | None) -> None:
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "ic")))
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="w")
    root.create_group("child").create_array("v", shape=(2,), dtype="i4", dimension_names=["t"])[:] = [4, 5]
    session.commit("a child group")
    store = repo.readonly_session("main").store
    results = {engine: opened_tree(store, engine, consolidated=consolidated) for engine in ENGINES}
    assert isinstance(results["zarrmax"][0], xr.DataTree), results["zarrmax"][0]
    xr.testing.assert_identical(results["zarrmax"][0], results["zarr"][0])
    assert results["zarrmax"][1] == results["zarr"][1] == []


# -- found by review: where zarr-python does and does not read a subgroup's own consolidated metadata ------


def _subgroup_consolidated_then_grown(path: Path, zarr_format: int) -> None:
    """Group "a" with consolidated metadata of its own (none at the root), then an array added to it."""
    dims = (lambda: {"dimension_names": ["t"]}) if zarr_format == 3 else (
        lambda: {"attributes": {"_ARRAY_DIMENSIONS": ["t"]}})
    group = zarr.open_group(path, mode="w", zarr_format=zarr_format).create_group("a")
    group.create_array("x", shape=(3,), dtype="i4", **dims())[:] = [1, 2, 3]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.consolidate_metadata(path, path="a", zarr_format=zarr_format)
    zarr.open_group(path, mode="a", path="a", use_consolidated=False).create_array(
        "y", shape=(3,), dtype="f8", **dims())[:] = [4.0, 5.0, 6.0]


@pytest.mark.parametrize("consolidated", [None, False])
def test_v2_group_never_reads_its_own_zmetadata(tmp_path: Path, consolidated: bool | None) -> None:
    """zarr-python reads ``.zmetadata`` at the root only: a v2 subgroup's own is ignored, so "y" (added after
    it was written) is there, as engine="zarr" shows it."""
    _subgroup_consolidated_then_grown(tmp_path / "s", 2)
    ours = assert_same_datasets(both(tmp_path / "s", group="a", consolidated=consolidated))
    assert sorted(ours.data_vars) == ["x", "y"]


@pytest.mark.parametrize(("consolidated", "group"), [(None, None), (False, None), (None, "a"), (False, "a")])
def test_tree_reads_a_v3_subgroups_own_consolidated_metadata_as_engine_zarr(
        tmp_path: Path, consolidated: bool | None, group: str | None) -> None:
    """zarr-python's walk keeps the consolidated metadata a v3 subgroup holds (so "y", added since, is not
    there); only ``group=`` itself with ``consolidated=False`` reads the group member by member."""
    _subgroup_consolidated_then_grown(tmp_path / "s", 3)
    kwargs: dict[str, Any] = {"consolidated": consolidated, "group": group}
    with recorded():
        theirs = xr.open_groups(tmp_path / "s", engine="zarr", **kwargs)
        ours = xr.open_groups(tmp_path / "s", engine="zarrmax", **kwargs)
    assert list(ours) == list(theirs)
    for key in theirs:
        xr.testing.assert_identical(ours[key].load(), theirs[key].load())
    top = ours["/a" if group is None else next(iter(ours))]
    assert sorted(top.data_vars) == (["x", "y"] if group and consolidated is False else ["x"])


def test_a_file_where_a_store_should_be_is_what_engine_zarr_raises(tmp_path: Path) -> None:
    (tmp_path / "f.zarr").write_bytes(b"not a store")
    results = both(tmp_path / "f.zarr")
    for engine in ENGINES:
        assert isinstance(results[engine][0], FileNotFoundError), (engine, results[engine][0])
        assert isinstance(results[engine][0], ValueError), (engine, results[engine][0])


def test_the_warning_names_a_caller_in_xarrays_own_tests(tmp_path: Path) -> None:
    """xarray's tests turn warnings raised at their own lines into errors: ours must name that line, as
    engine="zarr"'s does, or the conformance run would never see a warning of ours."""
    write_group(tmp_path / "s")
    fake_test = os.path.join(os.path.dirname(xr.__file__), "tests", "test_fake_caller.py")
    code = compile("xr.open_dataset(path, engine=engine)", fake_test, "exec")
    for engine in ENGINES:
        with recorded() as caught:
            exec(code, {"xr": xr, "path": tmp_path / "s", "engine": engine})
        (warning,) = [w for w in caught if issubclass(w.category, RuntimeWarning)]
        assert warning.filename == fake_test, (engine, warning.filename)


@pytest.mark.parametrize("live_dims", [["/t"], ["/s"], None])
@pytest.mark.parametrize("opener", ["dataset", "groups"])
def test_nczarr_dimrefs_come_from_the_stored_zarray_not_the_consolidated_copy(
        tmp_path: Path, live_dims: list[str] | None, opener: str) -> None:
    """zarr-python's consolidation drops ``_NCZARR_ARRAY``, and engine="zarr" reads the dimension references
    from the array's own ``.zarray`` anyway: so do we, also where the copy in ``.zmetadata`` disagrees."""
    path = tmp_path / "nc"
    group = zarr.open_group(path, mode="w", zarr_format=2)
    group.create_array("v", shape=(3,), dtype="f4")[:] = [1, 2, 3]
    zarray = json.loads((path / "v" / ".zarray").read_text())
    zarray["_NCZARR_ARRAY"] = {"dimrefs": ["/t"]}
    (path / "v" / ".zarray").write_text(json.dumps(zarray))
    consolidate(path)
    zmetadata = json.loads((path / ".zmetadata").read_text())
    zmetadata["metadata"]["v/.zarray"]["_NCZARR_ARRAY"] = {"dimrefs": ["/stale"]}  # a copy that disagrees
    (path / ".zmetadata").write_text(json.dumps(zmetadata))
    if live_dims is None:
        zarray.pop("_NCZARR_ARRAY")
    else:
        zarray["_NCZARR_ARRAY"] = {"dimrefs": live_dims}
    (path / "v" / ".zarray").write_text(json.dumps(zarray))
    if opener == "dataset":
        results = both(path)
        if live_dims is None:
            for engine in ENGINES:
                assert isinstance(results[engine][0], KeyError), (engine, results[engine][0])
            return
        ours = assert_same_datasets(results)
    else:
        trees = {engine: opened_tree(path, engine) for engine in ENGINES}
        if live_dims is None:
            for engine in ENGINES:
                assert isinstance(trees[engine][0], KeyError), (engine, trees[engine][0])
            return
        xr.testing.assert_identical(trees["zarrmax"][0], trees["zarr"][0])
        ours = trees["zarrmax"][0].to_dataset()
    assert ours["v"].dims == (live_dims[0].lstrip("/"),)


@pytest.mark.parametrize("change", ["attrs changed", "attrs deleted", "group deleted"])
def test_v2_consolidated_root_attributes_are_the_live_ones(tmp_path: Path, change: str) -> None:
    """zarr-python reads the root's .zgroup and .zattrs with its .zmetadata: the root's attributes are the live
    ones (not the consolidated copy, stale once they change), and without .zgroup there is no group."""
    path = tmp_path / "s.zarr"
    xr.Dataset({"v": ("x", np.arange(3.0))}, attrs={"ga": 1}).to_zarr(path, zarr_format=2, consolidated=True)
    if change == "attrs changed":
        zarr.open_group(path, mode="r+", zarr_format=2, use_consolidated=False).attrs["ga"] = 2
    else:
        (path / (".zattrs" if change == "attrs deleted" else ".zgroup")).unlink()
    for consolidated in (None, True):
        results = both(path, consolidated=consolidated)
        if change == "group deleted":
            assert all(isinstance(got, FileNotFoundError) for got, _ in results.values()), results
            with pytest.raises(FileNotFoundError):
                xr.open_datatree(path, engine="zarrmax", consolidated=consolidated)
            continue
        ours = assert_same_datasets(results)
        assert ours.attrs == ({"ga": 2} if change == "attrs changed" else {})
        trees = [xr.open_datatree(path, engine=engine, consolidated=consolidated) for engine in ENGINES]
        assert trees[0].attrs == trees[1].attrs == ours.attrs


@pytest.mark.parametrize("change", ["group deleted", "attrs not JSON", "attrs a list", "group is an array"])
def test_group_below_a_v2_consolidated_root_checks_the_root_as_engine_zarr(tmp_path: Path, change: str) -> None:
    """group= opens the root through its consolidated metadata first, as zarr-python does: a root with no
    .zgroup, with a malformed .zattrs or a .zgroup saying it is an array fails both engines."""
    path = tmp_path / "s.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=2)
    root.create_group("a").create_array("v", shape=(3,), dtype="f8")[:] = 1.0
    root["a/v"].attrs["_ARRAY_DIMENSIONS"] = ["x"]
    zarr.consolidate_metadata(path, zarr_format=2)
    if change == "group deleted":
        (path / ".zgroup").unlink()
    elif change == "group is an array":
        (path / ".zgroup").write_text(json.dumps({"zarr_format": 2, "node_type": "array"}))
    else:
        (path / ".zattrs").write_text("{not json" if change == "attrs not JSON" else "[1, 2]")
    for consolidated in (None, True):
        results = both(path, group="a", consolidated=consolidated)
        (theirs, _), (ours, _) = results["zarr"], results["zarrmax"]
        assert isinstance(theirs, Exception) and isinstance(ours, Exception), results
        builtin = {c for c in type(theirs).__mro__ if c.__module__ == "builtins"} - {Exception, BaseException, object}
        missing = [c.__name__ for c in builtin if not isinstance(ours, c)]
        assert not missing or change == "attrs not JSON", (ours, theirs, missing)  # JSONDecodeError: a ValueError
        assert isinstance(ours, ValueError | FileNotFoundError), ours
