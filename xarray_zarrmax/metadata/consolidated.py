"""Consolidated metadata taken apart: which groups and arrays a consolidated document records, each member
checked as zarr-python checks it (a name inside its group, a JSON object, a known ``node_type``).

- v3: a group's ``zarr.json`` may hold ``consolidated_metadata``: every node below the group, keyed by path
  relative to it, flat ("a", "a/b", "a/b/x").
- v2: the root's ``.zmetadata``: every document of the hierarchy, keyed by store key ("a/.zgroup",
  "a/b/.zarray", "a/b/.zattrs").

A single group (``open_dataset``) takes its own arrays from these documents (`group_arrays_v3`,
`group_arrays_v2`, or `group_in_root_v3` / `group_in_root_v2` for a ``group=`` below the root); a tree
(``open_datatree``) takes every group and array at and below ``group=`` (`tree_in_root_v3`,
`tree_in_root_v2`; `split_v3_members` for a group's own consolidated metadata). The only request made here
is `live_nczarr_dimrefs`'s.
"""

from __future__ import annotations

import asyncio
from typing import Any

from xarray_zarrmax.errors import GroupNotFoundError, MetadataError, MetadataTypeError
from xarray_zarrmax.metadata.nodes import (
    METADATA_KEYS,
    NCZARR_ARRAY,
    V2_ARRAY,
    V2_ATTRS,
    V2_CONSOLIDATED,
    V2_GROUP,
    V3_KEY,
    check_group_node_type,
    check_member_format,
    check_member_name,
    join_key,
    member_node_type,
    parse_document,
)
from xarray_zarrmax.storage.abc import ByteSource

# -- v3 -----------------------------------------------------------------------------------------------------


def consolidated_members(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The members in a v3 group document's own consolidated metadata, or None."""
    cm = doc.get("consolidated_metadata")
    return cm["metadata"] if isinstance(cm, dict) and isinstance(cm.get("metadata"), dict) else None


def split_v3_members(path: str, doc: dict[str, Any], members: dict[str, Any],
                     where: str, source: ByteSource) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The groups (``path``'s own ``doc`` first) and arrays of the v3 consolidated ``members`` of group ``path``,
    keyed by path in the store, in the document's order; every member is checked. ``where`` names the
    document."""
    groups: dict[str, dict[str, Any]] = {path: doc}
    arrays: dict[str, dict[str, Any]] = {}
    for name, member in members.items():
        check_member_name(name, where, source)
        if not isinstance(member, dict):
            raise MetadataTypeError(f"expected a JSON object for member {name!r} of {where} of {source.label}. "
                                    f"Got {type(member).__name__}.")
        kind = member_node_type(member, f"member {name!r} of {where}", source)
        (groups if kind == "group" else arrays)[join_key(path, name)] = member
    return groups, arrays


def group_arrays_v3(members: dict[str, Any], key: str, source: ByteSource) -> dict[str, dict[str, Any]]:
    """The group's own arrays, by name, in the v3 consolidated ``members`` of its document ``key``. Every
    member is checked; names with a "/" are members of subgroups."""
    _, arrays = split_v3_members("", {}, members, f"the consolidated metadata in {key!r}", source)
    return {name: doc for name, doc in arrays.items() if "/" not in name}


def group_in_root_v3(members: dict[str, Any], gpath: str, source: ByteSource) -> tuple[Any, dict[str, dict[str, Any]]]:
    """``group=`` as the root's v3 consolidated metadata records it: its attributes (as recorded) and its own
    arrays. Only members inside the group are checked."""
    where = f"the consolidated metadata in {V3_KEY!r}"
    entry = members.get(gpath)
    if not isinstance(entry, dict):
        raise _missing_from_root(gpath, source)
    if member_node_type(entry, f"member {gpath!r} of {where}", source) != "group":
        raise MetadataError(f"expected a group at {gpath!r} in {where} of {source.label}. Got an array.")
    prefix = gpath + "/"
    inside = {k[len(prefix):]: v for k, v in members.items() if k.startswith(prefix)}
    return entry.get("attributes"), group_arrays_v3(inside, V3_KEY, source)


def directly_in(members: dict[str, Any], group: str) -> dict[str, Any]:
    """The ``members`` (keyed by path in the store) whose parent is ``group``."""
    return {p: m for p, m in members.items() if p.rpartition("/")[0] == group}


# -- v2 -----------------------------------------------------------------------------------------------------


def v2_metadata(doc: dict[str, Any], key: str, source: ByteSource) -> dict[str, Any]:
    """The ``metadata`` object of a ``.zmetadata`` document stored at ``key``."""
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        raise MetadataError(f"expected a 'metadata' object in {key!r} of {source.label}")
    return meta


def v2_root_attributes(zgroup: dict[str, Any], zattrs_raw: Any, source: ByteSource) -> dict[str, Any]:
    """The live attributes of a v2 root opened through its consolidated metadata, its ``.zgroup`` checked as
    zarr-python checks it then (a group, not an array)."""
    check_group_node_type(zgroup, V2_GROUP, source)
    return parse_document(zattrs_raw, V2_ATTRS, source) if zattrs_raw is not None else {}


def group_arrays_v2(meta: dict[str, Any], key: str, source: ByteSource) -> dict[str, tuple[Any, Any]]:
    """The group's own arrays in its ``.zmetadata`` (``key``), as (``.zarray``, ``.zattrs``) pairs by name; the
    name of every member with a metadata document is checked."""
    arrays = {}
    where = f"the consolidated metadata in {key!r}"
    for entry, value in meta.items():
        name, _, last = entry.rpartition("/")
        if last not in METADATA_KEYS or not name:
            continue  # the group's own documents, or an entry that names no member
        check_member_name(name, where, source)
        if last == V2_ARRAY and "/" not in name:
            arrays[name] = (value, meta.get(join_key(name, V2_ATTRS), {}) or {})
    return arrays


def group_in_root_v2(meta: dict[str, Any], gpath: str, key: str,
                     source: ByteSource) -> tuple[dict[str, Any], dict[str, tuple[Any, Any]]]:
    """``group=`` as the root's ``.zmetadata`` (``key``) records it: its attributes and its own arrays."""
    if join_key(gpath, V2_GROUP) not in meta:
        raise _missing_from_root(gpath, source)
    prefix = gpath + "/"
    inside = {k[len(prefix):]: v for k, v in meta.items() if k.startswith(prefix)}
    return dict(inside.get(V2_ATTRS, {}) or {}), group_arrays_v2(inside, key, source)


def tree_members_v2(meta: dict[str, Any], where: str, source: ByteSource) -> tuple[dict[str, Any], dict[str, Any]]:
    """The groups (the root's ``.zgroup`` first, at "") and arrays (their ``.zarray``) of a ``.zmetadata``, keyed
    by path in the store; the name of every group and array is checked."""
    groups: dict[str, Any] = {"": meta.get(V2_GROUP)}
    arrays: dict[str, Any] = {}
    for entry, value in meta.items():
        name, _, last = entry.rpartition("/")
        if not name or last not in (V2_GROUP, V2_ARRAY):
            continue  # the root's own documents, attributes (read with their node), or no member
        check_member_name(name, where, source)
        (groups if last == V2_GROUP else arrays)[name] = value
    return groups, arrays


async def live_nczarr_dimrefs(source: ByteSource, gpath: str,
                              arrays: dict[str, tuple[Any, Any]]) -> dict[str, tuple[Any, Any]]:
    """v2 arrays from consolidated metadata, (``.zarray``, ``.zattrs``) by name in group ``gpath``, with the
    NCZarr dimension references of their stored ``.zarray`` where ``.zattrs`` names no dimensions.

    engine="zarr" reads those from the array's own ``.zarray``, never from the consolidated copy (which
    zarr-python's consolidation leaves without them): one GET per such array, all together. Arrays with
    ``_ARRAY_DIMENSIONS`` (all of xarray's) cost nothing.
    """
    missing = [n for n, (zarray, zattrs) in arrays.items()
               if isinstance(zarray, dict) and "_ARRAY_DIMENSIONS" not in (zattrs or {})]
    if not missing:
        return arrays
    raws = await asyncio.gather(*(source.get(join_key(gpath, n, V2_ARRAY)) for n in missing))
    out = dict(arrays)
    for name, raw in zip(missing, raws, strict=True):
        zarray = {k: v for k, v in arrays[name][0].items() if k != NCZARR_ARRAY}
        if raw is not None:
            live = parse_document(raw, join_key(gpath, name, V2_ARRAY), source)
            if NCZARR_ARRAY in live:
                zarray[NCZARR_ARRAY] = live[NCZARR_ARRAY]
        out[name] = (zarray, arrays[name][1])
    return out


# -- a subtree ----------------------------------------------------------------------------------------------


def check_inside_groups(top: str, groups: dict[str, Any], arrays: dict[str, Any], where: str,
                        source: ByteSource) -> None:
    """Every member below group ``top`` (all keyed by path in the store) has its parent among ``groups``."""
    for path in (*groups, *arrays):
        parent = path.rpartition("/")[0]
        if path != top and parent not in groups:
            raise MetadataError(f"member {path!r} of {where} of {source.label} is not inside a group: "
                                f"no group {parent!r} there")


def subtree(gpath: str, groups: dict[str, Any], arrays: dict[str, Any], key: str,
            source: ByteSource) -> tuple[list[str], list[str]]:
    """The paths of the groups and arrays at and below ``gpath`` in the root's consolidated metadata (stored at
    ``key``), each member's group checked."""
    where = f"the consolidated metadata in {key!r}"
    if gpath and gpath not in groups:
        if gpath in arrays:
            raise MetadataError(f"expected a group at {gpath!r} in {where} of {source.label}. Got an array.")
        raise GroupNotFoundError(f"group {gpath!r} not found in {where} of {source.label}")
    check_inside_groups("", groups, arrays, where, source)
    return [p for p in groups if _in_subtree(p, gpath)], [p for p in arrays if _in_subtree(p, gpath)]


def tree_in_root_v3(root: dict[str, Any], members: dict[str, Any], gpath: str,
                    source: ByteSource) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The groups and arrays at and below ``gpath`` in the root's v3 consolidated metadata (``root`` its
    document, ``members`` its consolidated members), their records by path in the store; every member is
    checked, and the groups' ``zarr_format``."""
    where = f"the consolidated metadata in {V3_KEY!r}"
    groups, arrays = split_v3_members("", root, members, where, source)
    group_paths, array_paths = subtree(gpath, groups, arrays, V3_KEY, source)
    for path in group_paths:
        if path:
            check_member_format(groups[path], 3, f"member {path!r} of {where}", source)
    return {p: groups[p] for p in group_paths}, {p: arrays[p] for p in array_paths}


def tree_in_root_v2(meta: dict[str, Any], gpath: str, source: ByteSource) -> tuple[list[str], dict[str, Any]]:
    """The paths of the groups, and the arrays' ``.zarray`` records by path, at and below ``gpath`` in the
    root's ``.zmetadata`` (its ``metadata`` object); every group and array name is checked, and the groups'
    ``zarr_format``."""
    where = f"the consolidated metadata in {V2_CONSOLIDATED!r}"
    groups, arrays = tree_members_v2(meta, where, source)
    group_paths, array_paths = subtree(gpath, groups, arrays, V2_CONSOLIDATED, source)
    for path in group_paths:
        if path:
            check_member_format(groups[path], 2, f"member {join_key(path, V2_GROUP)!r} of {where}", source)
    return group_paths, {p: arrays[p] for p in array_paths}


def _in_subtree(path: str, top: str) -> bool:
    return not top or path == top or path.startswith(top + "/")


def _missing_from_root(gpath: str, source: ByteSource) -> GroupNotFoundError:
    return GroupNotFoundError(f"group {gpath!r} not found in the consolidated metadata at the root of {source.label}")
