"""Bad metadata is an error, never a silently different Dataset; errors are of the types engine="zarr" raises,
so ``except`` clauses written for it keep working; ``group=`` and member names stay inside the store."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.storage import MemoryStore

from tests.support.compare import builtin_types
from xarray_zarrmax import MetadataError


def write_group(path: Path, zarr_format: int = 3, consolidated: bool = False) -> Path:
    group = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    dims = {"dimension_names": ["x"]} if zarr_format == 3 else {"attributes": {"_ARRAY_DIMENSIONS": ["x"]}}
    group.create_array("v", shape=(4,), chunks=(2,), dtype="f4", **dims)[:] = np.arange(4, dtype="f4")
    if consolidated:
        zarr.consolidate_metadata(path)
    return path


def edit_json(path: Path, edit: Callable[[Any], Any]) -> None:
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def consolidated_member(path: Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    edit_json(path / "zarr.json", lambda d: edit(d["consolidated_metadata"]["metadata"]))


# -- the bad stores: how each is made, how it is opened, what our message must name ------------------------


@dataclass
class Bad:
    make: Callable[[Path], Any]  # returns what both engines open
    names: str  # a regex our message must match: the key, member or group at fault
    kwargs: dict[str, Any] = field(default_factory=dict)


def member_without_node_type(p: Path) -> Path:
    write_group(p)
    edit_json(p / "v" / "zarr.json", lambda d: d.pop("node_type"))
    return p


def member_with_misspelled_node_type(p: Path) -> Path:
    write_group(p)
    edit_json(p / "v" / "zarr.json", lambda d: d.update(node_type="arrray"))
    return p


def subgroup_without_node_type(p: Path) -> Path:
    write_group(p)
    (p / "sub").mkdir()
    (p / "sub" / "zarr.json").write_text(json.dumps({"zarr_format": 3, "attributes": {}}))
    return p


def consolidated_member_without_node_type(p: Path) -> Path:
    consolidated_member(write_group(p, consolidated=True), lambda m: m["v"].pop("node_type"))
    return p


def consolidated_member_with_misspelled_node_type(p: Path) -> Path:
    consolidated_member(write_group(p, consolidated=True), lambda m: m["v"].update(node_type="arrray"))
    return p


def consolidated_member_named(name: str, zarr_format: int) -> Callable[[Path], Path]:
    def make(p: Path) -> Path:
        write_group(p, zarr_format, consolidated=True)
        if zarr_format == 3:
            consolidated_member(p, lambda m: m.update({name: m["v"]}))
        else:
            edit_json(p / ".zmetadata", lambda d: d["metadata"].update(
                {f"{name}/.zarray": d["metadata"]["v/.zarray"], f"{name}/.zattrs": d["metadata"]["v/.zattrs"]}))
        return p
    return make


def listing_with_dot_dot(_: Path) -> MemoryStore:
    store = MemoryStore()
    write_group_in(store)
    store._store_dict["../zarr.json"] = store._store_dict["v/zarr.json"]  # a key a listing names ".."
    return store


def write_group_in(store: Any) -> None:
    group = zarr.open_group(store, mode="w", zarr_format=3)
    group.create_array("v", shape=(4,), chunks=(2,), dtype="f4", dimension_names=["x"])[:] = 1.0


def not_zarr(p: Path) -> Path:
    p.mkdir()
    (p / "notes.txt").write_text("hello")
    return p


def empty(p: Path) -> Path:
    p.mkdir()
    return p


def without_dimension_names(p: Path) -> Path:
    write_group(p)
    edit_json(p / "v" / "zarr.json", lambda d: d.pop("dimension_names"))
    return p


def without_array_dimensions(p: Path) -> Path:
    write_group(p, zarr_format=2)
    edit_json(p / "v" / ".zattrs", lambda d: d.pop("_ARRAY_DIMENSIONS"))
    return p


def zarray_not_an_object(p: Path) -> Path:
    write_group(p, zarr_format=2)
    (p / "v" / ".zarray").write_text("[1, 2]")
    return p


def malformed_member_json(p: Path) -> Path:
    write_group(p)
    (p / "v" / "zarr.json").write_text("{not json")
    return p


def fill_value_out_of_range(zarr_format: int) -> Any:
    def make(p: Path) -> Path:
        write_group(p, zarr_format=zarr_format)
        if zarr_format == 3:
            edit_json(p / "v" / "zarr.json", lambda d: d.update(data_type="uint8", fill_value=256))
        else:
            edit_json(p / "v" / ".zarray", lambda d: d.update(dtype="|u1", fill_value=-1))
        return p

    return make


def sibling_store(p: Path) -> Path:
    write_group(p.parent / "other.zarr")
    return write_group(p)


BAD = {
    "member zarr.json without node_type": Bad(member_without_node_type, "'v/zarr.json'"),
    "member zarr.json with misspelled node_type": Bad(member_with_misspelled_node_type, "'v/zarr.json'.*'arrray'"),
    "subgroup zarr.json without node_type": Bad(subgroup_without_node_type, "'sub/zarr.json'"),
    "consolidated member without node_type": Bad(consolidated_member_without_node_type, "member 'v' .*'zarr.json'"),
    "consolidated member with misspelled node_type": Bad(consolidated_member_with_misspelled_node_type,
                                                         "member 'v' .*'zarr.json'.*'arrray'"),
    "consolidated v3 member named ..": Bad(consolidated_member_named("..", 3), r"'\.\.' .*'zarr.json'"),
    "consolidated v3 member named .": Bad(consolidated_member_named(".", 3), r"'\.' .*'zarr.json'"),
    "consolidated v2 member named ..": Bad(consolidated_member_named("..", 2), r"'\.\.' .*'\.zmetadata'"),
    "listed member named ..": Bad(listing_with_dot_dot, r"'\.\.' in the listing of '/'"),
    "group= with a .. segment": Bad(sibling_store, r"'\.\./other\.zarr'", {"group": "../other.zarr"}),
    "group= with a . segment": Bad(write_group, r"'a/\./b'", {"group": "a/./b"}),
    "missing group": Bad(write_group, "group 'nope'", {"group": "nope"}),
    "missing group, consolidated": Bad(lambda p: write_group(p, consolidated=True), "group 'nope'",
                                       {"group": "nope", "consolidated": True}),
    "missing group, not consolidated": Bad(write_group, "group 'nope'", {"group": "nope", "consolidated": False}),
    "missing v2 group": Bad(lambda p: write_group(p, 2, consolidated=True), "group 'nope'", {"group": "nope"}),
    "no Zarr metadata": Bad(not_zarr, "no zarr.json, .zgroup or .zmetadata.*notes.txt"),
    "empty location": Bad(empty, "group '/'.*empty"),
    "zarr_format=2 on a v3 store": Bad(write_group, r"no \.zgroup or \.zmetadata", {"zarr_format": 2}),
    "consolidated=True without consolidated metadata": Bad(write_group, "'zarr.json'.*no consolidated",
                                                           {"consolidated": True}),
    "v3 array without dimension_names": Bad(without_dimension_names, "array 'v' .*dimension_names"),
    "v2 array without _ARRAY_DIMENSIONS": Bad(without_array_dimensions, "array 'v' .*_ARRAY_DIMENSIONS"),
    ".zarray not a JSON object": Bad(zarray_not_an_object, r"'v/\.zarray'"),
    "v3 fill value outside its data type (OverflowError)": Bad(fill_value_out_of_range(3), "'v/zarr.json'.*256"),
    "v2 fill value outside its data type (OverflowError)": Bad(fill_value_out_of_range(2), r"'v/\.zarray'.*-1"),
    "malformed member JSON": Bad(malformed_member_json, "'v/zarr.json'"),
}


def error_of(engine: str, target: Any, kwargs: dict[str, Any]) -> BaseException:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zarr's fallback from consolidated to unconsolidated metadata
            xr.open_dataset(target, engine=engine, **kwargs)
    except Exception as err:
        return err
    raise AssertionError(f"engine={engine!r} opened it without an error")


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_metadata_raises_what_engine_zarr_raises(tmp_path, case):
    bad = BAD[case]
    target = bad.make(tmp_path / "bad.zarr")
    kwargs = {"consolidated": None, **bad.kwargs}
    theirs = error_of("zarr", target, kwargs)
    ours = error_of("zarrmax", target, kwargs)
    missing = [t.__name__ for t in builtin_types(theirs) if not isinstance(ours, t)]
    assert not missing, f"{type(ours).__name__}: {ours} is not a {missing} as zarr's {type(theirs).__name__}: {theirs}"
    assert re.search(bad.names, str(ours)), str(ours)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_missing_dimension_names_message_says_what_engine_zarr_says(tmp_path, zarr_format):
    """xarray's own test (test_raises_key_error_on_invalid_zarr_store) matches engine="zarr"'s words, "required for
    xarray to determine variable dimensions": ours says them too, after naming the array."""
    group = zarr.open_group(tmp_path / "tmp.zarr", mode="w", zarr_format=zarr_format)
    group.create_array("bar", shape=(3, 5), dtype=np.float32)
    pattern = "xarray to determine variable dimensions"
    theirs = error_of("zarr", tmp_path / "tmp.zarr", {"consolidated": False})
    ours = error_of("zarrmax", tmp_path / "tmp.zarr", {})
    assert isinstance(theirs, KeyError) and re.search(pattern, str(theirs)), theirs
    assert isinstance(ours, KeyError) and re.search(pattern, str(ours)), ours
    assert "array 'bar'" in str(ours)


def test_error_classes_are_both_ours_and_built_in():
    from xarray_zarrmax.errors import GroupNotFoundError, MissingDimensionsError, NodeNotFoundError

    assert issubclass(NodeNotFoundError, MetadataError) and issubclass(NodeNotFoundError, FileNotFoundError)
    assert issubclass(GroupNotFoundError, NodeNotFoundError) and issubclass(GroupNotFoundError, KeyError)
    assert issubclass(MissingDimensionsError, MetadataError) and issubclass(MissingDimensionsError, KeyError)
    # the message reads as written, not as KeyError's quoted repr or OSError's errno form
    assert str(GroupNotFoundError("no group 'a'")) == "no group 'a'"
    assert str(MissingDimensionsError("array 'v' has none")) == "array 'v' has none"
    for kind in (NodeNotFoundError, GroupNotFoundError, MissingDimensionsError):
        assert issubclass(kind, ValueError)  # still caught where MetadataError (a ValueError) was


# -- what is and is not a member --------------------------------------------------------------------------


def test_v2_member_named_like_metadata_is_still_a_member(tmp_path):
    """Only the store's own metadata objects are left out of a listing: an array ".zeta" is a variable."""
    path = write_group(tmp_path / "z.zarr", zarr_format=2)
    group = zarr.open_group(path, mode="a")
    group.create_array(".zeta", shape=(4,), chunks=(2,), dtype="i2", attributes={"_ARRAY_DIMENSIONS": ["x"]})[:] = 7
    ours = xr.open_dataset(path, engine="zarrmax")
    oracle = xr.open_dataset(path, engine="zarr", consolidated=False)
    assert set(ours.variables) == set(oracle.variables) == {"v", ".zeta"}
    xr.testing.assert_identical(ours.load(), oracle.load())


def test_subgroups_are_not_variables(tmp_path):
    path = write_group(tmp_path / "s.zarr")
    write_group(path / "sub")
    for consolidated in (False, True):
        if consolidated:
            zarr.consolidate_metadata(path)
        ours = xr.open_dataset(path, engine="zarrmax", consolidated=consolidated)
        oracle = xr.open_dataset(path, engine="zarr", consolidated=consolidated)
        assert set(ours.variables) == set(oracle.variables) == {"v"}


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("name", ["../w", "a/../w", "./w"])
def test_consolidated_names_leaving_their_group_are_refused(tmp_path, zarr_format, name):
    """A nested name is a subgroup's member, but one with "." or ".." segments names no member at all."""
    path = consolidated_member_named(name, zarr_format)(tmp_path / "c.zarr")
    key = "zarr.json" if zarr_format == 3 else ".zmetadata"
    with pytest.raises(MetadataError, match=f"invalid member name {re.escape(repr(name))} .*'{re.escape(key)}'"):
        xr.open_dataset(path, engine="zarrmax")


def test_group_outside_the_store_reads_nothing(tmp_path):
    from xarray_zarrmax import request_counts

    path = sibling_store(tmp_path / "in.zarr")
    with request_counts() as counts, pytest.raises(ValueError, match=r"without '\.' or '\.\.' segments"):
        xr.open_dataset(path, engine="zarrmax", group="../other.zarr")
    assert counts.keys == []


def test_group_paths_normalized_as_zarr_does(tmp_path):
    path = tmp_path / "n.zarr"
    write_group(path)
    write_group(path / "a" / "b")
    for group in ("a\\b", "a//b", "/a/b/"):
        ours = xr.open_dataset(path, engine="zarrmax", group=group)
        oracle = xr.open_dataset(path, engine="zarr", group=group, consolidated=False)
        xr.testing.assert_identical(ours.load(), oracle.load())


@pytest.mark.parametrize("dims", ["yx", "y", None, 5, ["y", 1], ["y"], [], ["y", "x"]])
def test_v2_dimension_attribute_values_open_or_fail_as_engine_zarr(tmp_path, dims):
    """Whatever a v2 array's _ARRAY_DIMENSIONS holds: the same dims where engine="zarr" opens, an error of the
    built-in type it raises where it fails (never a silently different Dataset: "yx" is not ("y", "x"))."""
    path = tmp_path / "d.zarr"
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    group.create_array("v", shape=(2, 3), chunks=(2, 3), dtype="i4")[:] = 1
    (path / "v" / ".zattrs").write_text(json.dumps({"_ARRAY_DIMENSIONS": dims}))

    def outcome(engine):
        kwargs = {"consolidated": False} if engine == "zarr" else {}
        try:
            return xr.open_dataset(str(path), engine=engine, **kwargs)["v"].dims
        except Exception as err:  # noqa: BLE001 - the type itself is what is compared
            return err

    theirs, ours = outcome("zarr"), outcome("zarrmax")
    if not isinstance(theirs, Exception):
        assert ours == theirs
        return
    assert isinstance(ours, Exception), f"engine='zarr' raised {theirs!r}; zarrmax opened dims {ours}"
    builtin = [c for c in type(theirs).__mro__ if c.__module__ == "builtins" and c not in (Exception, BaseException,
                                                                                             object)]
    assert all(isinstance(ours, c) for c in builtin), (ours, theirs)
    assert "'v'" in str(ours)  # ours names the array


# -- a v3 array document without a key Zarr v3 requires (GDAL writes arrays without "codecs") -------------------

REQUIRED_V3_KEYS = ["codecs", "shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "zarr_format"]


def without(path: Path, key: str) -> Path:
    """`write_group` plus an array ``w`` whose ``zarr.json`` lacks ``key``."""
    write_group(path)
    zarr.open_group(path, mode="a").create_array("w", shape=(4,), chunks=(2,), dtype="f4", dimension_names=["x"])
    edit_json(path / "w" / "zarr.json", lambda doc: doc.pop(key))
    return path


@pytest.mark.parametrize("key", REQUIRED_V3_KEYS)
def test_an_array_without_a_required_key_is_left_out_with_a_warning_as_engine_zarr_does(tmp_path, key):
    path = without(tmp_path / "g.zarr", key)
    with pytest.warns(zarr.errors.ZarrUserWarning, match=f"Object at {key} is not recognized"):
        assert list(xr.open_dataset(path, engine="zarr", consolidated=False).variables) == ["v"]
    with pytest.warns(UserWarning) as caught:
        ds = xr.open_dataset(path, engine="zarrmax", consolidated=False)
    assert list(ds.variables) == ["v"]
    ours = [w for w in caught if issubclass(w.category, zarr.errors.ZarrUserWarning)]
    assert [str(w.message) for w in ours] == [
        f"left out array 'w' of file://{path}: its metadata 'w/zarr.json' has no {key!r}, which Zarr v3 requires "
        "(GDAL writes arrays without 'codecs'); engine=\"zarr\" leaves it out too"]
    assert ours[0].filename == __file__  # the caller's line


def test_a_tree_leaves_such_an_array_out_too(tmp_path):
    path = without(tmp_path / "g.zarr", "codecs")
    with pytest.warns(UserWarning, match="left out array 'w' of .*: its metadata 'w/zarr.json' has no 'codecs'"):
        tree = xr.open_datatree(path, engine="zarrmax", consolidated=False)
    assert list(tree.dataset.variables) == ["v"]


def test_asking_for_such_an_array_is_an_error_naming_the_key(tmp_path):
    path = without(tmp_path / "g.zarr", "codecs")
    with pytest.raises(MetadataError, match=re.escape(
            f"array 'w' of file://{path}: its metadata 'w/zarr.json' has no 'codecs', which Zarr v3 requires: it "
            "cannot be read")):
        xr.open_dataset(path, engine="zarrmax", consolidated=False, variables=["w"])
