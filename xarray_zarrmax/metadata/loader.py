"""The one loader of group metadata: a group alone (`load_group`, for ``open_dataset``) or a group with every
group below it (`load_tree`, for ``open_datatree`` and ``open_groups``), v2 and v3, consolidated or live, in
the fewest round trips.

Requests, as engine="zarr" reads the same store:

- Consolidated metadata at the store's root, unless ``consolidated=False``: a v3 root's ``zarr.json`` with
  ``consolidated_metadata`` (1 GET), else a v2 root's ``.zmetadata`` with its ``.zgroup`` and ``.zattrs`` (1
  round trip). It serves a ``group=`` below the root too (the root's record of the group is used, as
  zarr-python does, even where the group has changed since). A group alone sends its own ``zarr.json`` with
  the root's, so that a root without consolidated metadata costs no extra round trip. A store that cannot hold
  consolidated metadata (Icechunk) is read live whatever ``consolidated`` says; with ``consolidated=None`` a
  root without it is noted on the `GroupNode`, for the caller's warning.
- Otherwise the group is read live: its document, one LIST, then every listed member's metadata concurrently
  (v3 ``zarr.json``; v2 ``.zarray`` and ``.zattrs``). A tree LISTs each group as soon as its document says it
  is one, so round trips follow the tree's depth, never its size; its LIST goes out with the group's own GET.
  A v3 group's own consolidated metadata is used where zarr-python uses it.
- Never a probe for v2 keys in a tree once its v3 root is found.

Arrays are handed to ``on_array`` as soon as they are parsed (all together from consolidated metadata), so
callers read index coordinates while other metadata is still arriving. Members come in zarr-python's order:
for a group alone the consolidated document's, else the listing's; a tree's groups list theirs by name.
Every request goes through the fetch engine's one budget: nothing here limits concurrency.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable
from typing import Any

from xarray_zarrmax.core.loop import gather_or_cancel
from xarray_zarrmax.errors import GroupNotFoundError, MetadataError, NodeNotFoundError
from xarray_zarrmax.metadata.consolidated import (
    check_inside_groups,
    consolidated_members,
    directly_in,
    group_arrays_v2,
    group_arrays_v3,
    group_in_root_v2,
    group_in_root_v3,
    live_nczarr_dimrefs,
    split_v3_members,
    tree_in_root_v2,
    tree_in_root_v3,
    v2_metadata,
    v2_root_attributes,
)
from xarray_zarrmax.metadata.nodes import (
    METADATA_KEYS,
    V2_ARRAY,
    V2_ATTRS,
    V2_CONSOLIDATED,
    V2_GROUP,
    V3_KEY,
    ArrayNode,
    GroupNode,
    MetadataParser,
    array_node_v2,
    array_node_v3,
    check_format,
    check_group_node_type,
    check_member_name,
    coordinate_names,
    join_key,
    member_array_v3,
    member_node_type,
    parse_document,
    parse_group_path,
    parse_zarr_format,
)
from xarray_zarrmax.storage.abc import ByteSource

#: Awaited with each array of the group, as soon as it is parsed.
OnArray = Callable[[ArrayNode], Awaitable[None]]
#: Awaited with the path of the array's group ("" for the root) and the array, as soon as it is parsed.
OnTreeArray = Callable[[str, ArrayNode], Coroutine[Any, Any, None]]
_NOT_READ = object()  # an object not fetched yet (None means fetched and missing)


async def load_group(
    source: ByteSource,
    group: str | None = None,
    *,
    consolidated: bool | None = None,
    zarr_format: int | None = None,
    variables: Collection[str] | None = None,
    on_array: OnArray | None = None,
) -> GroupNode:
    """Read the metadata of ``group`` and its member arrays (only ``variables`` and their coordinates).

    ``on_array`` is awaited for each array as soon as its metadata is parsed, so callers can start reading
    data (coordinates) while other metadata is still arriving. With ``consolidated=False`` the LIST is sent
    together with the root GET: one round trip fewer.
    """
    gpath = parse_group_path(group)

    async def announce(_: str, node: ArrayNode) -> None:
        assert on_array is not None
        await on_array(node)

    loader = HierarchyLoader(source, gpath, consolidated, subtree=False, variables=variables,
                             on_array=None if on_array is None else announce)
    return (await loader.load(parse_zarr_format(zarr_format)))[gpath]


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
    loader = HierarchyLoader(source, parse_group_path(group), consolidated, subtree=True, on_array=on_array)
    return await loader.load(parse_zarr_format(zarr_format))


class HierarchyLoader:
    """The metadata reads of one open: group ``gpath`` alone, or with every group below it (``subtree``).

    Both start differently (`_open_group`, `_open_tree`: where consolidated metadata is looked for, and which
    requests go out together) and then share everything else: a group from its own consolidated metadata
    (`_consolidated_group`), a group read live (`_live`), descending into subgroups or not.
    """

    def __init__(self, source: ByteSource, gpath: str, consolidated: bool | None, *, subtree: bool,
                 variables: Collection[str] | None = None, on_array: OnTreeArray | None = None) -> None:
        self.source, self.gpath, self.consolidated, self.subtree = source, gpath, consolidated, subtree
        self.variables, self.on_array = variables, on_array
        self.parser = MetadataParser()
        self.groups: dict[str, GroupNode] = {}
        self.unconsolidated = False
        # Objects fetched before they were needed (None: found missing), each handed out once: never asked twice.
        self._read_ahead: dict[str, Any] = {}
        self._left_out: dict[str, list[str]] = {}  # by group: why arrays were left out (`member_array_v3`)

    async def load(self, zarr_format: int | None) -> dict[str, GroupNode]:
        if not self.source.supports_consolidated_metadata:
            self.consolidated = False  # Icechunk: the hierarchy itself, whatever ``consolidated`` says
        await (self._open_tree(zarr_format) if self.subtree else self._open_group(zarr_format))
        result = {p: self.groups[p] for p in sorted(self.groups, key=_tree_order)}
        if self.unconsolidated:
            top = next(iter(result))
            result[top] = dataclasses.replace(result[top], unconsolidated=True)
        return result

    # -- requests -------------------------------------------------------------------------------------------

    async def _read_first(self, *keys: str) -> list[Any]:
        """GET ``keys`` together, before it is known which will be needed; kept for `_get`."""
        raws = await asyncio.gather(*(self.source.get(key) for key in keys))
        self._read_ahead.update(zip(keys, raws, strict=True))
        return list(raws)

    async def _get(self, key: str) -> Any:
        raw = self._read_ahead.pop(key, _NOT_READ)
        return await self.source.get(key) if raw is _NOT_READ else raw

    async def _get_document(self, key: str) -> dict[str, Any] | None:
        raw = await self._get(key)
        return None if raw is None else parse_document(raw, key, self.source)

    def _document(self, raw: Any, key: str) -> dict[str, Any] | None:
        return None if raw is None else parse_document(raw, key, self.source)

    async def _announce(self, nodes: Iterable[tuple[str, ArrayNode]]) -> None:
        pairs = list(nodes)
        if self.on_array is not None and pairs:
            on_array = self.on_array
            await gather_or_cancel(*(on_array(path, node) for path, node in pairs))

    # -- a group alone: open_dataset ------------------------------------------------------------------------

    async def _open_group(self, zarr_format: int | None) -> None:
        source, gpath = self.source, self.gpath
        # consolidated=False: nothing to look for first, so the LIST goes out with the group's GET
        listing = asyncio.ensure_future(source.list_dir(gpath)) if self.consolidated is False else None
        try:
            if gpath and self.consolidated is not False and await self._group_from_root(zarr_format):
                return
            if zarr_format in (None, 3):
                key = join_key(gpath, V3_KEY)
                doc = await self._get_document(key)
                if doc is not None:
                    check_format(doc, 3, key, source)
                    check_group_node_type(doc, key, source)
                    attributes = dict(doc.get("attributes") or {})  # checked before anything else is read
                    members = consolidated_members(doc) if self.consolidated is not False else None
                    if members is not None:
                        await self._consolidated_group(gpath, 3, attributes, group_arrays_v3(members, key, source))
                        return
                    if self.consolidated is not False:
                        self._no_consolidated_metadata(key)
                    await self._live(gpath, 3, attributes, listing, descend=False)
                    return
            if zarr_format in (None, 2) and await self._group_v2(listing):
                return
            await _raise_missing(source, gpath, zarr_format)
        finally:
            _drop(listing)

    async def _group_from_root(self, zarr_format: int | None) -> bool:
        """``group=`` from the consolidated metadata at the store's root, as engine="zarr" reads it; False if
        the root holds none (``consolidated=True`` then raises). The group's own ``zarr.json`` is fetched with
        the root's, so that reading the group instead costs no extra round trip."""
        source, gpath = self.source, self.gpath
        if zarr_format in (None, 3):
            root_raw, _ = await self._read_first(V3_KEY, join_key(gpath, V3_KEY))
            if root_raw is not None:
                doc = parse_document(root_raw, V3_KEY, source)
                check_format(doc, 3, V3_KEY, source)
                members = consolidated_members(doc)
                if members is not None:
                    await self._consolidated_group(gpath, 3, *group_in_root_v3(members, gpath, source))
                    return True
                self._no_consolidated_metadata(V3_KEY)
                return False
        if zarr_format in (None, 2):
            zmetadata_raw, zgroup_raw, zattrs_raw = await self._read_first(V2_CONSOLIDATED, V2_GROUP, V2_ATTRS)
            if zmetadata_raw is not None:
                # zarr-python opens the root (its .zgroup and .zattrs, checked) before going down to group=
                if zgroup_raw is None:
                    raise GroupNotFoundError(f"the root of {source.label} holds {V2_CONSOLIDATED!r} but no "
                                             f"{V2_GROUP!r}: no group there, so no group {gpath!r} below it")
                v2_root_attributes(parse_document(zgroup_raw, V2_GROUP, source), zattrs_raw, source)
                meta = v2_metadata(parse_document(zmetadata_raw, V2_CONSOLIDATED, source), V2_CONSOLIDATED, source)
                attributes, pairs = group_in_root_v2(meta, gpath, V2_CONSOLIDATED, source)
                await self._consolidated_group(gpath, 2, attributes, await live_nczarr_dimrefs(source, gpath, pairs))
                return True
        self._no_consolidated_metadata(V3_KEY if zarr_format == 3 else V2_CONSOLIDATED)
        return False

    async def _group_v2(self, listing: asyncio.Future[list[str]] | None) -> bool:
        """The group from its v2 documents; False if it has none. zarr-python reads .zmetadata at the root only,
        and with it the root's own .zgroup and .zattrs: the group must exist and its attributes are the live
        ones, not the consolidated copy."""
        source, gpath = self.source, self.gpath
        consolidated = self.consolidated is not False and not gpath
        zgroup_raw, zattrs_raw, zmetadata_raw = await asyncio.gather(
            source.get(join_key(gpath, V2_GROUP)), source.get(join_key(gpath, V2_ATTRS)),
            source.get(V2_CONSOLIDATED) if consolidated else _nothing(),
        )
        if zgroup_raw is None:
            return False  # no group here at all: the caller says so
        if zmetadata_raw is not None:
            attributes = v2_root_attributes(parse_document(zgroup_raw, V2_GROUP, source), zattrs_raw, source)
            key = join_key(gpath, V2_CONSOLIDATED)
            meta = v2_metadata(parse_document(zmetadata_raw, V2_CONSOLIDATED, source), key, source)
            pairs = await live_nczarr_dimrefs(source, gpath, group_arrays_v2(meta, key, source))
            await self._consolidated_group(gpath, 2, attributes, pairs)
            return True
        attributes = self._document(zattrs_raw, join_key(gpath, V2_ATTRS)) or {}
        if self.consolidated is not False:
            self._no_consolidated_metadata(join_key(gpath, V2_CONSOLIDATED))
        key = join_key(gpath, V2_GROUP)
        check_format(parse_document(zgroup_raw, key, source), 2, key, source)
        await self._live(gpath, 2, attributes, listing, descend=False)
        return True

    def _no_consolidated_metadata(self, key: str) -> None:
        """No consolidated metadata where it was looked for: an error with ``consolidated=True``, else noted;
        the group is then read as zarr-python reads it (a v3 group's own consolidated metadata still counts)."""
        if self.consolidated is True:
            where = f"{key!r} of {self.source.label}" if self.gpath else f"the root of {self.source.label} ({key!r})"
            raise MetadataError(f"consolidated=True, but {where} holds no consolidated metadata")
        self.unconsolidated = True

    # -- a subtree: open_datatree, open_groups --------------------------------------------------------------

    async def _open_tree(self, zarr_format: int | None) -> None:
        source = self.source
        root_doc = None
        if self.consolidated is not False:
            if zarr_format in (None, 3):
                (root_raw,) = await self._read_first(V3_KEY)
                root_doc = self._document(root_raw, V3_KEY)
                if root_doc is not None:
                    check_format(root_doc, 3, V3_KEY, source)
                    check_group_node_type(root_doc, V3_KEY, source)
                    members = consolidated_members(root_doc)
                    if members is not None:
                        await self._tree_from_root_v3(root_doc, members)
                        return
                    if self.consolidated:
                        raise MetadataError(
                            f"consolidated=True, but {V3_KEY!r} of {source.label} holds no consolidated metadata"
                        )
                    zarr_format = 3  # a v3 root: its groups are v3, and no v2 key is probed
            if zarr_format in (None, 2):
                # with .zmetadata zarr-python reads the root's .zgroup and .zattrs: the root must exist, and its
                # attributes are the live ones, not the consolidated copy. Read ahead: the walk takes them
                # from here rather than asking again.
                raws = await self._read_first(V2_CONSOLIDATED, V2_GROUP, V2_ATTRS)
                zmetadata, zgroup, zattrs = (self._document(raw, key) for raw, key in
                                             zip(raws, (V2_CONSOLIDATED, V2_GROUP, V2_ATTRS), strict=True))
                if (zmetadata is not None or self.consolidated) and zgroup is None:
                    await _raise_missing(source, "", zarr_format)
                if zmetadata is not None and zgroup is not None:
                    check_group_node_type(zgroup, V2_GROUP, source)
                    await self._tree_from_root_v2(zmetadata, dict(zattrs or {}))
                    return
                if self.consolidated:
                    raise MetadataError(f"consolidated=True, but {source.label} has no {V2_CONSOLIDATED!r}")
        self.unconsolidated = self.consolidated is None  # looked for and not found: noted for engine="zarr"
        await self._walk(zarr_format, root_doc)

    async def _walk(self, zarr_format: int | None, root_doc: dict[str, Any] | None) -> None:
        source, gpath = self.source, self.gpath
        listing = asyncio.ensure_future(source.list_dir(gpath))  # sent with the group's own GET
        try:
            doc = root_doc if not gpath and root_doc is not None else None
            key = join_key(gpath, V3_KEY)
            if doc is None and zarr_format in (None, 3):
                doc = await self._get_document(key)
            if doc is not None:
                check_format(doc, 3, key, source)
                check_group_node_type(doc, key, source)
                # zarr-python opens group= below a root without consolidated metadata as a member of the
                # root, keeping the group's own consolidated metadata; consolidated=False drops it
                if gpath and self.consolidated is None and consolidated_members(doc) is not None:
                    await self._subtree_from_group(gpath, doc)
                else:
                    await self._live(gpath, 3, doc.get("attributes"), listing, descend=True)
                return
            if zarr_format in (None, 2):
                raws = await asyncio.gather(self._get(join_key(gpath, V2_GROUP)), self._get(join_key(gpath, V2_ATTRS)))
                zgroup, zattrs = (self._document(raw, join_key(gpath, name)) for raw, name in
                                  zip(raws, (V2_GROUP, V2_ATTRS), strict=True))
                if zgroup is not None:
                    check_format(zgroup, 2, join_key(gpath, V2_GROUP), source)
                    await self._live(gpath, 2, zattrs or {}, listing, descend=True)
                    return
        finally:
            _drop(listing)
        await _raise_missing(source, gpath, zarr_format)

    async def _tree_from_root_v3(self, root: dict[str, Any], members: dict[str, Any]) -> None:
        source = self.source
        groups, arrays = tree_in_root_v3(root, members, self.gpath, source)
        nodes = [array_node_v3(p.rpartition("/")[2], p, doc, source, self.parser) for p, doc in arrays.items()]
        await self._finish_consolidated({p: dict(g.get("attributes") or {}) for p, g in groups.items()}, 3, nodes)

    async def _tree_from_root_v2(self, doc: dict[str, Any], root_attributes: dict[str, Any]) -> None:
        """The tree from ``.zmetadata``; the root's attributes are its live ``.zattrs`` (``root_attributes``)."""
        source = self.source
        meta = v2_metadata(doc, V2_CONSOLIDATED, source)
        group_paths, arrays = tree_in_root_v2(meta, self.gpath, source)

        def attrs(path: str) -> dict[str, Any]:
            return root_attributes if not path else dict(meta.get(join_key(path, V2_ATTRS)) or {})

        pairs = await live_nczarr_dimrefs(source, "", {p: (zarray, attrs(p)) for p, zarray in arrays.items()})
        nodes = [array_node_v2(p.rpartition("/")[2], p, *pairs[p], source, self.parser) for p in arrays]
        await self._finish_consolidated({p: attrs(p) for p in group_paths}, 2, nodes)

    async def _subtree_from_group(self, path: str, doc: dict[str, Any], *, met_in_walk: bool = False) -> None:
        """A group below the root and everything under it, from the group's own consolidated metadata (member
        names relative to it), as zarr-python reads such a group when it is the group opened.

        ``met_in_walk``: the group was met walking down from the group opened, which has no consolidated
        metadata. zarr-python then takes the groups below it from its consolidated metadata (the group's
        members), but reads each of them as the opened group's member ``group[path]``: its own document, live,
        and its arrays from its own consolidated metadata if it has some, else from a live listing. Only the
        group's own arrays come from its consolidated metadata then."""
        source = self.source
        where = f"the consolidated metadata in {join_key(path, V3_KEY)!r}"
        groups, arrays = split_v3_members(path, doc, consolidated_members(doc) or {}, where, source)
        check_inside_groups(path, groups, arrays, where, source)
        if met_in_walk:
            below = [g for g in groups if g != path]
            arrays = directly_in(arrays, path)
            groups = {path: doc}
            await gather_or_cancel(*(self._group_listed_in(g, path) for g in below))
        nodes = [array_node_v3(p.rpartition("/")[2], p, arrays[p], source, self.parser) for p in arrays]
        await self._finish_consolidated({p: dict(g.get("attributes") or {}) for p, g in groups.items()}, 3, nodes)

    async def _group_listed_in(self, path: str, listed_by: str) -> None:
        """Group ``path``, listed in the consolidated metadata of group ``listed_by``, read as zarr-python reads
        the opened group's member ``group[path]``: its document live; its arrays from its own consolidated
        metadata if it has some, else from its listing (its subgroups come from ``listed_by``'s metadata)."""
        source = self.source
        key = join_key(path, V3_KEY)
        doc = await self._get_document(key)
        if doc is None:
            raise GroupNotFoundError(f"group {path!r}, a member in the consolidated metadata of group "
                                     f"{listed_by!r}, not found in {source.label}: that metadata is out of date; "
                                     "consolidate it again")
        check_format(doc, 3, key, source)
        check_group_node_type(doc, key, source)
        members = consolidated_members(doc)
        if members is None:
            await self._live(path, 3, doc.get("attributes"), None, descend=False)
            return
        await self._consolidated_group(path, 3, doc.get("attributes"), group_arrays_v3(members, key, source))

    async def _finish_consolidated(self, attributes: dict[str, dict[str, Any]], zarr_format: int,
                                   arrays: list[ArrayNode]) -> None:
        """Groups (their attributes by path) and their arrays, all from consolidated metadata: every array
        announced together."""
        members: dict[str, dict[str, ArrayNode]] = {p: {} for p in attributes}
        announced = []
        for node in sorted(arrays, key=lambda n: n.path):
            parent = node.path.rpartition("/")[0]
            members[parent][node.name] = node
            announced.append((parent, node))
        await self._announce(announced)
        for path, attrs in attributes.items():
            self.groups[path] = GroupNode(path, zarr_format, attrs, members[path])

    # -- one group's arrays: shared ---------------------------------------------------------------------------

    def _wanted(self, name: str) -> bool:
        return self.variables is None or name in self.variables

    def _ordered(self, arrays: dict[str, ArrayNode], order: Iterable[str]) -> dict[str, ArrayNode]:
        """A tree's groups list their arrays by name; a group alone in the store's ``order`` (the consolidated
        document's, or the listing's), as zarr-python lists them."""
        if self.subtree:
            return dict(sorted(arrays.items()))
        return {n: arrays[n] for n in order if n in arrays}

    async def _consolidated_group(self, path: str, zarr_format: int, attributes: Any,
                                  available: dict[str, Any]) -> None:
        """Group ``path`` from its arrays' records in consolidated metadata (by name: a ``zarr.json`` document,
        or a (``.zarray``, ``.zattrs``) pair): the wanted ones and, with ``variables``, their coordinates.
        ``attributes`` as recorded (a JSON object or None), taken once the arrays are announced."""
        source, parser = self.source, self.parser

        def build(name: str) -> ArrayNode:
            record = available[name]
            if zarr_format == 3:
                return array_node_v3(name, join_key(path, name), record, source, parser)
            return array_node_v2(name, join_key(path, name), record[0], record[1], source, parser)

        names = sorted(available) if self.subtree else list(available)
        selected = {n: build(n) for n in names if self._wanted(n)}
        if self.variables is not None:
            for n in coordinate_names(selected) & set(available) - set(selected):
                selected[n] = build(n)
        await self._announce((path, node) for node in selected.values())
        self.groups[path] = GroupNode(path, zarr_format, dict(attributes or {}), self._ordered(selected, available))

    async def _members(self, path: str, listing: Awaitable[list[str]] | None) -> list[str]:
        """The group's listed children but its own metadata objects; every name is checked."""
        names = [n for n in await (listing if listing is not None else self.source.list_dir(path))
                 if n not in METADATA_KEYS]
        where = f"the listing of {path or '/'!r}"
        for name in names:
            check_member_name(name, where, self.source)
        return names

    async def _live(self, path: str, zarr_format: int, attributes: Any, listing: Awaitable[list[str]] | None, *,
                    descend: bool) -> None:
        """Group ``path`` from its listing (sent now unless ``listing``): every listed member's metadata at once,
        then, with ``variables``, their coordinates'; the groups below it too if ``descend``. ``attributes`` as
        recorded (a JSON object or None), taken once the members are read."""
        children = self._children_v3 if zarr_format == 3 else self._children_v2
        names = await self._members(path, listing)
        arrays = await children(path, [n for n in names if self._wanted(n)], descend)
        if self.variables is not None:
            arrays.update(await children(path, sorted((coordinate_names(arrays) & set(names)) - set(arrays)), descend))
        self.groups[path] = GroupNode(path, zarr_format, dict(attributes or {}), self._ordered(arrays, names),
                                      left_out=tuple(self._left_out.pop(path, ())))

    async def _children_v3(self, path: str, names: list[str], descend: bool) -> dict[str, ArrayNode]:
        source = self.source
        arrays: dict[str, ArrayNode] = {}

        async def child(name: str) -> None:
            cpath = join_key(path, name)
            key = join_key(cpath, V3_KEY)
            cdoc = self._document(await source.get(key), key)
            if cdoc is None:
                return  # a stray object or a folder without metadata: not a member
            kind = member_node_type(cdoc, repr(key), source)
            if kind == "group" and not descend:
                return  # a subgroup: not a variable of this group
            if kind == "group":
                check_format(cdoc, 3, key, source)
                if consolidated_members(cdoc) is not None:  # as zarr-python's walk: used, whatever `consolidated`
                    await self._subtree_from_group(cpath, cdoc, met_in_walk=True)
                else:
                    await self._live(cpath, 3, cdoc.get("attributes"), None, descend=True)
                return
            node = member_array_v3(name, cpath, cdoc, source, self.parser,
                                   asked_for=self.variables is not None and name in self.variables)
            if isinstance(node, str):
                self._left_out.setdefault(path, []).append(node)  # as engine="zarr": warned about, left out
                return
            arrays[name] = node
            await self._announce([(path, node)])

        await gather_or_cancel(*(child(n) for n in names))
        return arrays

    async def _children_v2(self, path: str, names: list[str], descend: bool) -> dict[str, ArrayNode]:
        source = self.source
        arrays: dict[str, ArrayNode] = {}

        async def child(name: str) -> None:
            cpath = join_key(path, name)
            zarray_key, zattrs_key = join_key(cpath, V2_ARRAY), join_key(cpath, V2_ATTRS)
            zarray_raw, zattrs_raw = await asyncio.gather(source.get(zarray_key), source.get(zattrs_key))
            if zarray_raw is None and not descend:
                return  # not an array: a subgroup or not a member at all
            # both documents parsed before either is checked, as zarr-python reads them; in a tree the .zattrs of
            # a member without .zarray are a subgroup's attributes
            zarray = self._document(zarray_raw, zarray_key)
            zattrs = self._document(zattrs_raw, zattrs_key) or {}
            if zarray is not None:
                check_format(zarray, 2, zarray_key, source)
                node = arrays[name] = array_node_v2(name, cpath, zarray, zattrs, source, self.parser)
                await self._announce([(path, node)])
                return
            # Not an array: a subgroup (its LIST goes out with the .zgroup GET), or not a member at all.
            sublisting = asyncio.ensure_future(source.list_dir(cpath))
            try:
                zgroup = self._document(await source.get(join_key(cpath, V2_GROUP)), join_key(cpath, V2_GROUP))
                if zgroup is None:
                    return
                check_format(zgroup, 2, join_key(cpath, V2_GROUP), source)
                await self._live(cpath, 2, zattrs, sublisting, descend=True)
            finally:
                _drop(sublisting)

        await gather_or_cancel(*(child(n) for n in names))
        return arrays


def _tree_order(path: str) -> list[str]:
    return path.split("/") if path else []


def _drop(task: asyncio.Future[Any] | None) -> None:
    """A LIST sent ahead that is not needed (or was read already): cancelled, or its outcome consumed."""
    if task is None:
        return
    if not task.done():
        task.cancel()
    elif not task.cancelled():
        task.exception()  # read: no "exception was never retrieved" for a listing nobody needed


async def _nothing() -> None:
    return None


async def _raise_missing(source: ByteSource, gpath: str, zarr_format: int | None) -> None:
    """No group metadata at ``gpath``: FileNotFoundError, and KeyError too for a ``group=`` inside the store,
    as zarr-python raises there."""
    missing = GroupNotFoundError if gpath else NodeNotFoundError
    where = f"{source.label} (group {gpath or '/'!r})"
    try:
        listing = await source.list_dir(gpath)
    except FileNotFoundError as err:
        raise missing(f"no Zarr store at {err}") from None
    wanted = {3: "zarr.json", 2: ".zgroup or .zmetadata"}.get(zarr_format or 0, "zarr.json, .zgroup or .zmetadata")
    if not listing:
        raise missing(f"no Zarr group at {where}: the location is empty or does not exist")
    shown = ", ".join(listing[:5]) + (", ..." if len(listing) > 5 else "")
    raise missing(f"not a Zarr group: {where} has no {wanted}; it contains: {shown}")
