"""The metadata of a whole hierarchy of groups (``open_datatree``, ``open_groups``) in the fewest round trips.

- Consolidated metadata at the store's root (v3 ``zarr.json`` with ``consolidated_metadata``, v2
  ``.zmetadata``) holds every group and array: 1 GET, as engine="zarr" reads it (``zarr.open_consolidated``
  at the root, then the subtree at ``group``).
- Otherwise a walk: a group is LISTed as soon as its metadata says it is one, and the metadata of every
  listed child is fetched concurrently. Round trips follow the tree's depth (a LIST and a GET per level;
  v2 adds a ``.zgroup`` GET per level, sent with the LIST), never its size. With ``consolidated=False`` the
  first LIST goes out with the first GET.
- Every request goes through the one request budget (see `_budget`); nothing here limits concurrency.

Arrays are handed to ``on_array`` with their group's path as soon as they are parsed (all of them together
from consolidated metadata), so callers read index coordinates of every group in one concurrent batch.
Checks are `hierarchy`'s: bad names, node types and formats raise, naming the key.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from xarray_zarrmax.core.loop import gather_or_cancel
from xarray_zarrmax.errors import GroupNotFoundError, MetadataError, MetadataTypeError
from xarray_zarrmax.metadata.hierarchy import (
    METADATA_KEYS,
    V2_ARRAY,
    V2_ATTRS,
    V2_CONSOLIDATED,
    V2_GROUP,
    V3_KEY,
    ArrayNode,
    GroupNode,
    MetadataParser,
    _array_v2,
    _array_v3,
    _check_format,
    _check_group_node_type,
    _check_member_name,
    _join,
    _member_node_type,
    _parse_json,
    _raise_missing,
    live_nczarr_dimrefs,
    parse_group_path,
    parse_zarr_format,
)
from xarray_zarrmax.storage import ByteSource

#: Awaited with the path of the array's group ("" for the root) and the array, as soon as it is parsed.
OnTreeArray = Callable[[str, ArrayNode], Coroutine[Any, Any, None]]


async def load_tree(
    source: ByteSource,
    group: str | None = None,
    *,
    consolidated: bool | None = None,
    zarr_format: int | None = None,
    on_array: OnTreeArray | None = None,
) -> dict[str, GroupNode]:
    """The metadata of ``group`` and of every group below it, keyed by path in the store ("" for the root),
    parents before children, siblings sorted by name.

    ``consolidated``: None uses the root's consolidated metadata when there is some, True requires it,
    False never reads it.
    """
    loader = _TreeLoader(source, parse_group_path(group), consolidated, on_array)
    return await loader.load(parse_zarr_format(zarr_format))


def _tree_order(path: str) -> list[str]:
    return path.split("/") if path else []


def _in_subtree(path: str, top: str) -> bool:
    return not top or path == top or path.startswith(top + "/")


def _check_member_format(doc: Any, expected: int, where: str, source: ByteSource) -> None:
    found = doc.get("zarr_format") if isinstance(doc, dict) else None
    if found != expected:
        raise MetadataError(f"unsupported zarr_format in {where} of {source.label}: expected {expected}, got {found!r}")


def _own_consolidated(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The members in a v3 group document's own consolidated metadata, or None."""
    cm = doc.get("consolidated_metadata")
    return cm["metadata"] if isinstance(cm, dict) and isinstance(cm.get("metadata"), dict) else None


def _directly_in(members: dict[str, Any], group: str) -> dict[str, Any]:
    """The ``members`` (keyed by path in the store) whose parent is ``group``."""
    return {p: m for p, m in members.items() if p.rpartition("/")[0] == group}


def _drop(task: asyncio.Future[Any]) -> None:
    """A LIST sent ahead that is not needed (or was read already): cancelled, or its outcome consumed."""
    if not task.done():
        task.cancel()
    elif not task.cancelled():
        task.exception()  # read: no "exception was never retrieved" for a listing nobody needed


class _TreeLoader:
    def __init__(self, source: ByteSource, gpath: str, consolidated: bool | None,
                 on_array: OnTreeArray | None) -> None:
        self.source, self.gpath, self.consolidated, self.on_array = source, gpath, consolidated, on_array
        self.parser = MetadataParser()
        self.groups: dict[str, GroupNode] = {}
        self._absent: set[str] = set()  # keys already found missing: never asked for twice
        self._fetched: dict[str, dict[str, Any]] = {}  # documents read ahead, each handed out once

    async def _get_json(self, key: str) -> dict[str, Any] | None:
        if key in self._absent:
            return None
        if key in self._fetched:
            return self._fetched.pop(key)
        raw = await self.source.get(key)
        if raw is None:
            self._absent.add(key)
            return None
        return _parse_json(raw, key, self.source)

    async def _announce(self, nodes: list[tuple[str, ArrayNode]]) -> None:
        if self.on_array is not None and nodes:
            on_array = self.on_array
            await gather_or_cancel(*(on_array(path, node) for path, node in nodes))

    def _result(self) -> dict[str, GroupNode]:
        return {p: self.groups[p] for p in sorted(self.groups, key=_tree_order)}

    async def load(self, zarr_format: int | None) -> dict[str, GroupNode]:
        source = self.source
        if not source.supports_consolidated_metadata:
            self.consolidated = False  # Icechunk: the hierarchy itself, whatever ``consolidated`` says
        root_doc = None
        if self.consolidated is not False:
            if zarr_format in (None, 3):
                root_doc = await self._get_json(V3_KEY)
                if root_doc is not None:
                    _check_format(root_doc, 3, V3_KEY, source)
                    _check_group_node_type(root_doc, V3_KEY, source)
                    cm = root_doc.get("consolidated_metadata")
                    if isinstance(cm, dict) and isinstance(cm.get("metadata"), dict):
                        return await self._consolidated_v3(root_doc, cm["metadata"])
                    if self.consolidated:
                        raise MetadataError(
                            f"consolidated=True, but {V3_KEY!r} of {source.label} holds no consolidated metadata"
                        )
                    zarr_format = 3  # a v3 root: its groups are v3, and no v2 key is probed
            if zarr_format in (None, 2):
                # with .zmetadata zarr-python reads the root's .zgroup and .zattrs: the root must exist, and its
                # attributes are the live ones, not the consolidated copy
                zmetadata, zgroup, zattrs = await asyncio.gather(
                    self._get_json(V2_CONSOLIDATED), self._get_json(V2_GROUP), self._get_json(V2_ATTRS))
                if (zmetadata is not None or self.consolidated) and zgroup is None:
                    await _raise_missing(source, "", zarr_format)
                if zmetadata is not None and zgroup is not None:
                    _check_group_node_type(zgroup, V2_GROUP, source)
                    return await self._consolidated_v2(zmetadata, dict(zattrs or {}))
                # read already: the walk takes them from here rather than asking again
                self._fetched.update({k: doc for k, doc in ((V2_GROUP, zgroup), (V2_ATTRS, zattrs)) if doc is not None})
                if self.consolidated:
                    raise MetadataError(f"consolidated=True, but {source.label} has no {V2_CONSOLIDATED!r}")
        await self._walk(zarr_format, root_doc)
        result = self._result()
        if self.consolidated is None:  # looked for and not found: noted for engine="zarr"'s warning
            top = next(iter(result))
            result[top] = dataclasses.replace(result[top], unconsolidated=True)
        return result

    # -- consolidated metadata ----------------------------------------------------------------------------

    def _subtree(self, groups: dict[str, Any], arrays: dict[str, Any], key: str) -> tuple[list[str], list[str]]:
        """The paths of the groups and arrays at and below ``group=``, each array's group checked."""
        source, gpath = self.source, self.gpath
        where = f"the consolidated metadata in {key!r} of {source.label}"
        if gpath and gpath not in groups:
            if gpath in arrays:
                raise MetadataError(f"expected a group at {gpath!r} in {where}. Got an array.")
            raise GroupNotFoundError(f"group {gpath!r} not found in {where}")
        for path in (*groups, *arrays):
            parent = path.rpartition("/")[0]
            if path and parent not in groups:
                raise MetadataError(f"member {path!r} of {where} is not inside a group: no group {parent!r} there")
        return ([p for p in groups if _in_subtree(p, gpath)], [p for p in arrays if _in_subtree(p, gpath)])

    async def _finish_consolidated(self, attributes: dict[str, dict[str, Any]], zarr_format: int,
                                   arrays: list[ArrayNode]) -> dict[str, GroupNode]:
        members: dict[str, dict[str, ArrayNode]] = {p: {} for p in attributes}
        announced = []
        for node in sorted(arrays, key=lambda n: n.path):
            parent = node.path.rpartition("/")[0]
            members[parent][node.name] = node
            announced.append((parent, node))
        await self._announce(announced)
        for path, attrs in attributes.items():
            self.groups[path] = GroupNode(path, zarr_format, attrs, members[path])
        return self._result()

    def _split_v3_members(self, path: str, doc: dict[str, Any], members: dict[str, Any],
                          where: str) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """The groups (``path``'s own ``doc`` first) and arrays of v3 consolidated ``members``, keyed by path in
        the store; each member checked as zarr-python checks it (a name inside the group, a JSON object, a
        known node_type)."""
        source = self.source
        groups: dict[str, dict[str, Any]] = {path: doc}
        arrays: dict[str, dict[str, Any]] = {}
        for name, member in members.items():
            _check_member_name(name, where, source)
            if not isinstance(member, dict):
                raise MetadataTypeError(f"expected a JSON object for member {name!r} of {where} of {source.label}. "
                                        f"Got {type(member).__name__}.")
            kind = _member_node_type(member, f"member {name!r} of {where}", source)
            (groups if kind == "group" else arrays)[_join(path, name)] = member
        return groups, arrays

    async def _consolidated_v3(self, root: dict[str, Any], members: dict[str, Any]) -> dict[str, GroupNode]:
        source = self.source
        where = f"the consolidated metadata in {V3_KEY!r}"
        groups, arrays = self._split_v3_members("", root, members, where)
        group_paths, array_paths = self._subtree(groups, arrays, V3_KEY)
        for path in group_paths:
            if path:
                _check_member_format(groups[path], 3, f"member {path!r} of {where}", source)
        nodes = [_array_v3(p.rpartition("/")[2], p, arrays[p], source, self.parser) for p in array_paths]
        attributes = {p: dict(groups[p].get("attributes") or {}) for p in group_paths}
        return await self._finish_consolidated(attributes, 3, nodes)

    async def _consolidated_v2(self, doc: dict[str, Any], root_attributes: dict[str, Any]) -> dict[str, GroupNode]:
        """The tree from ``.zmetadata``; the root's attributes are its live ``.zattrs`` (``root_attributes``)."""
        source = self.source
        meta = doc.get("metadata")
        if not isinstance(meta, dict):
            raise MetadataError(f"expected a 'metadata' object in {V2_CONSOLIDATED!r} of {source.label}")
        where = f"the consolidated metadata in {V2_CONSOLIDATED!r}"
        groups: dict[str, Any] = {"": meta.get(V2_GROUP)}
        arrays: dict[str, Any] = {}
        for entry, value in meta.items():
            name, _, last = entry.rpartition("/")
            if not name or last not in (V2_GROUP, V2_ARRAY):
                continue  # the root's own documents, attributes (read with their node), or no member
            _check_member_name(name, where, source)
            (groups if last == V2_GROUP else arrays)[name] = value
        group_paths, array_paths = self._subtree(groups, arrays, V2_CONSOLIDATED)
        for path in group_paths:
            if path:
                _check_member_format(groups[path], 2, f"member {_join(path, V2_GROUP)!r} of {where}", source)

        def attrs(path: str) -> dict[str, Any]:
            return root_attributes if not path else dict(meta.get(_join(path, V2_ATTRS)) or {})

        pairs = await live_nczarr_dimrefs(source, "", {p: (arrays[p], attrs(p)) for p in array_paths})
        nodes = [_array_v2(p.rpartition("/")[2], p, *pairs[p], source, self.parser) for p in array_paths]
        return await self._finish_consolidated({p: attrs(p) for p in group_paths}, 2, nodes)

    # -- the walk -------------------------------------------------------------------------------------------

    async def _walk(self, zarr_format: int | None, root_doc: dict[str, Any] | None) -> None:
        source, gpath = self.source, self.gpath
        listing = asyncio.ensure_future(source.list_dir(gpath))  # sent with the group's own GET
        try:
            doc = root_doc if not gpath and root_doc is not None else None
            if doc is None and zarr_format in (None, 3):
                doc = await self._get_json(_join(gpath, V3_KEY))
            if doc is not None:
                key = _join(gpath, V3_KEY)
                _check_format(doc, 3, key, source)
                _check_group_node_type(doc, key, source)
                # zarr-python opens group= below a root without consolidated metadata as a member of the
                # root, keeping the group's own consolidated metadata; consolidated=False drops it
                if gpath and self.consolidated is None and _own_consolidated(doc) is not None:
                    await self._consolidated_group_v3(gpath, doc)
                    return
                await self._walk_v3(gpath, doc, listing)
                return
            if zarr_format in (None, 2):
                zgroup, zattrs = await asyncio.gather(self._get_json(_join(gpath, V2_GROUP)),
                                                      self._get_json(_join(gpath, V2_ATTRS)))
                if zgroup is not None:
                    _check_format(zgroup, 2, _join(gpath, V2_GROUP), source)
                    await self._walk_v2(gpath, zattrs or {}, listing)
                    return
        finally:
            _drop(listing)
        await _raise_missing(source, gpath, zarr_format)

    async def _members(self, path: str, listing: Awaitable[list[str]]) -> list[str]:
        names = [n for n in await listing if n not in METADATA_KEYS]
        where = f"the listing of {path or '/'!r}"
        for name in names:
            _check_member_name(name, where, self.source)
        return names

    async def _walk_v3(self, path: str, doc: dict[str, Any], listing: Awaitable[list[str]], *,
                       descend: bool = True) -> None:
        """Group ``path`` from its ``listing``, and the groups below it unless not ``descend`` (its arrays only)."""
        source = self.source
        arrays: dict[str, ArrayNode] = {}

        async def child(name: str) -> None:
            cpath = _join(path, name)
            key = _join(cpath, V3_KEY)
            cdoc = await self._get_json(key)
            if cdoc is None:
                return  # a stray object or a folder without metadata: not a member
            kind = _member_node_type(cdoc, repr(key), source)
            if kind == "group" and not descend:
                return
            _check_format(cdoc, 3, key, source)
            if kind == "group":
                if _own_consolidated(cdoc) is not None:  # as zarr-python's walk: used, whatever `consolidated`
                    await self._consolidated_group_v3(cpath, cdoc, met_in_walk=True)
                else:
                    await self._walk_v3(cpath, cdoc, source.list_dir(cpath))
                return
            node = arrays[name] = _array_v3(name, cpath, cdoc, source, self.parser)
            await self._announce([(path, node)])

        await gather_or_cancel(*(child(n) for n in await self._members(path, listing)))
        self.groups[path] = GroupNode(path, 3, dict(doc.get("attributes") or {}), dict(sorted(arrays.items())))

    async def _consolidated_group_v3(self, path: str, doc: dict[str, Any], *, met_in_walk: bool = False) -> None:
        """A group below the root and everything under it, from the group's own consolidated metadata (member
        names relative to it), as zarr-python reads such a group when it is the group opened.

        ``met_in_walk``: the group was met walking down from the group opened, which has no consolidated
        metadata. zarr-python then takes the groups below it from its consolidated metadata (the group's
        members), but reads each of them as the opened group's member ``group[path]``: its own document, live,
        and its arrays from its own consolidated metadata if it has some, else from a live listing. Only the
        group's own arrays come from its consolidated metadata then."""
        source = self.source
        key = _join(path, V3_KEY)
        where = f"the consolidated metadata in {key!r}"
        groups, arrays = self._split_v3_members(path, doc, _own_consolidated(doc) or {}, where)
        for member_path in (*groups, *arrays):
            parent = member_path.rpartition("/")[0]
            if member_path != path and parent not in groups:
                raise MetadataError(f"member {member_path!r} of {where} of {source.label} is not inside a group: "
                                    f"no group {parent!r} there")
        if met_in_walk:
            below = [g for g in groups if g != path]
            arrays = _directly_in(arrays, path)
            groups = {path: doc}
            await gather_or_cancel(*(self._live_group_v3(g, path) for g in below))
        nodes = [_array_v3(p.rpartition("/")[2], p, arrays[p], source, self.parser) for p in arrays]
        await self._finish_consolidated({p: dict(g.get("attributes") or {}) for p, g in groups.items()}, 3, nodes)

    async def _live_group_v3(self, path: str, listed_by: str) -> None:
        """Group ``path``, listed in the consolidated metadata of group ``listed_by``, read as zarr-python reads
        the opened group's member ``group[path]``: its document live; its arrays from its own consolidated
        metadata if it has some, else from its listing (its subgroups come from ``listed_by``'s metadata)."""
        source = self.source
        key = _join(path, V3_KEY)
        doc = await self._get_json(key)
        if doc is None:
            raise GroupNotFoundError(f"group {path!r}, a member in the consolidated metadata of group "
                                     f"{listed_by!r}, not found in {source.label}: that metadata is out of date; "
                                     "consolidate it again")
        _check_format(doc, 3, key, source)
        _check_group_node_type(doc, key, source)
        own = _own_consolidated(doc)
        if own is None:
            await self._walk_v3(path, doc, source.list_dir(path), descend=False)
            return
        _, members = self._split_v3_members(path, doc, own, f"the consolidated metadata in {key!r}")
        nodes = [_array_v3(p.rpartition("/")[2], p, m, source, self.parser)
                 for p, m in sorted(_directly_in(members, path).items())]
        await self._announce([(path, node) for node in nodes])
        self.groups[path] = GroupNode(path, 3, dict(doc.get("attributes") or {}), {n.name: n for n in nodes})

    async def _walk_v2(self, path: str, attributes: dict[str, Any], listing: Awaitable[list[str]]) -> None:
        source = self.source
        arrays: dict[str, ArrayNode] = {}

        async def child(name: str) -> None:
            cpath = _join(path, name)
            zarray, zattrs = await asyncio.gather(self._get_json(_join(cpath, V2_ARRAY)),
                                                  self._get_json(_join(cpath, V2_ATTRS)))
            if zarray is not None:
                _check_format(zarray, 2, _join(cpath, V2_ARRAY), source)
                node = arrays[name] = _array_v2(name, cpath, zarray, zattrs or {}, source, self.parser)
                await self._announce([(path, node)])
                return
            # Not an array: a subgroup (its LIST goes out with the .zgroup GET), or not a member at all.
            sublisting = asyncio.ensure_future(source.list_dir(cpath))
            try:
                zgroup = await self._get_json(_join(cpath, V2_GROUP))
                if zgroup is None:
                    return
                _check_format(zgroup, 2, _join(cpath, V2_GROUP), source)
                await self._walk_v2(cpath, zattrs or {}, sublisting)
            finally:
                _drop(sublisting)

        await gather_or_cancel(*(child(n) for n in await self._members(path, listing)))
        self.groups[path] = GroupNode(path, 2, dict(attributes), dict(sorted(arrays.items())))
