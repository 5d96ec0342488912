"""Group and array metadata in the fewest round trips.

- v3 root with consolidated metadata: 1 GET.
- v3 otherwise: root GET, one LIST, then every member's ``zarr.json`` concurrently.
- no v3 root: v2 ``.zmetadata`` (1 GET), else ``.zgroup``/``.zattrs``, LIST, member ``.zarray``/``.zattrs``.
- never a probe for v2 keys once a v3 root is found.
Concurrency is bounded by the fetch engine's one budget, not here.

Consolidated metadata as engine="zarr" reads it: unless ``consolidated=False``, it is looked for at the
store's root, also for a ``group=`` below it (the root's record of the group is used, as zarr-python does,
even where the group has changed since); a store that cannot hold it (Icechunk) reads the hierarchy itself
whatever ``consolidated`` says; with ``consolidated=None`` a root without it is noted on the `GroupNode`, for
the caller's warning. Members come in zarr-python's order: the consolidated document's, else the listing's.

Bad metadata is an error, never a silently different Dataset: a member whose ``node_type`` is missing or
unknown, a member name with ``.`` or ``..`` segments (it would name a key outside the group) and ``group=``
paths zarr-python refuses all raise, naming the key.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from xarray_zarrmax.errors import (
    GroupNotFoundError,
    MetadataError,
    MetadataRangeError,
    MetadataTypeError,
    NodeNotFoundError,
)
from xarray_zarrmax.storage import ByteSource

V3_KEY = "zarr.json"
V2_ARRAY, V2_GROUP, V2_ATTRS, V2_CONSOLIDATED = ".zarray", ".zgroup", ".zattrs", ".zmetadata"
NCZARR_ARRAY = "_NCZARR_ARRAY"  # netCDF-C's record of an array's dimensions, in its .zarray
#: the store's own metadata objects: listed next to members, never members themselves.
METADATA_KEYS = frozenset({V3_KEY, V2_ARRAY, V2_GROUP, V2_ATTRS, V2_CONSOLIDATED})


@dataclass(frozen=True, slots=True)
class ArrayNode:
    """One array: its name in the group, its key prefix in the store, its metadata document as stored and
    zarr-python's parse of it."""

    name: str
    path: str
    metadata: Any  # zarr ArrayV3Metadata | ArrayV2Metadata
    # The stored JSON (``zarr.json``, or ``.zarray`` without the attributes): what the fast path reads is decided
    # from it, not from zarr-python's classes (see plan.plan_array).
    document: dict[str, Any] = field(compare=False, repr=False)
    # Shared by arrays whose metadata differ only in attributes and dimension names (see MetadataParser), so
    # what follows from structure alone (read plan, codecs) is worked out once per structure, not per array.
    structure: Any = field(default=None, compare=False, repr=False)

    @property
    def structure_key(self) -> Any:
        return self.metadata if self.structure is None else self.structure

    @property
    def zarr_format(self) -> int:
        return int(self.metadata.zarr_format)


@dataclass(frozen=True, slots=True)
class GroupNode:
    path: str
    zarr_format: int
    attributes: dict[str, Any]
    arrays: dict[str, ArrayNode]
    #: ``consolidated=None`` found no consolidated metadata at the root: engine="zarr" warns then.
    unconsolidated: bool = False


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def _parse_json(raw: Any, key: str, source: ByteSource) -> dict[str, Any]:
    try:
        doc = json.loads(bytes(raw))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise MetadataError(f"malformed JSON in {key!r} of {source.label}: {err}") from None
    if not isinstance(doc, dict):
        raise MetadataTypeError(f"expected a JSON object in {key!r} of {source.label}. Got {type(doc).__name__}.")
    return doc


def parse_group_path(group: str | None) -> str:
    """``group=`` as a key prefix, normalized as zarr-python normalizes paths (backslashes as slashes, no
    leading, trailing or repeated slashes), refusing what zarr-python refuses: ``.`` and ``..`` segments,
    which would name keys outside the store."""
    if group is None:
        return ""
    if not isinstance(group, str):
        raise TypeError(f"group must be a str or None. Got {type(group).__name__}: {group!r}")
    path = re.sub("/+", "/", group.replace("\\", "/")).strip("/")
    segments = path.split("/")
    if "." in segments or ".." in segments:
        raise ValueError(f"group must be a path inside the store, without '.' or '..' segments. Got {group!r}.")
    return path


def _check_member_name(name: str, where: str, source: ByteSource) -> None:
    """A member's name from a listing or consolidated metadata becomes part of every key read for it: one with
    an empty, ``.`` or ``..`` segment would name keys outside its group."""
    segments = name.split("/")
    if "" in segments or "." in segments or ".." in segments:
        raise MetadataError(
            f"invalid member name {name!r} in {where} of {source.label}: expected a name without empty, "
            "'.' or '..' path segments"
        )


def _member_node_type(doc: dict[str, Any], where: str, source: ByteSource) -> str:
    """A v3 member's ``node_type``: "array" or "group" (a subgroup, not a variable); anything else raises, as
    zarr-python raises. ``where`` names the document."""
    node_type = doc.get("node_type")
    if node_type == "array" or node_type == "group":
        return node_type
    got = "no node_type" if "node_type" not in doc else f"node_type={node_type!r}"
    raise MetadataError(f"expected node_type 'array' or 'group' in {where} of {source.label}. Got {got}.")


class MetadataParser:
    """zarr-python's metadata parsing, once per distinct array structure.

    Parsing costs about 0.3 ms an array, most of an open's CPU time for hundreds of variables. Arrays that
    differ only in ``attributes`` and ``dimension_names`` (an ERA5 group's 273 variables) parse to the same
    object but for those two fields, so one parse per structure serves all of them. One parser per open:
    nothing is cached across opens.
    """

    _PER_ARRAY = ("attributes", "dimension_names")

    def __init__(self) -> None:
        self._templates: dict[tuple[int, str], Any] = {}

    def parse(self, doc: dict[str, Any], zarr_format: int, path: str | None = None) -> Any:
        return self.parse_with_structure(doc, zarr_format, path)[0]

    def parse_with_structure(self, doc: dict[str, Any], zarr_format: int, path: str | None = None) -> tuple[Any, Any]:
        """The parsed metadata, and the structure object it shares with same-structure arrays (else itself).
        ``path`` names the array in zarr-python's warnings about how it read the document."""
        from zarr.core.metadata.v2 import ArrayV2Metadata
        from zarr.core.metadata.v3 import ArrayV3Metadata

        cls: Any = ArrayV3Metadata if zarr_format == 3 else ArrayV2Metadata
        attrs, dims = doc.get("attributes", {}), doc.get("dimension_names")
        try:
            key = (zarr_format, json.dumps({k: v for k, v in doc.items() if k not in self._PER_ARRAY}, sort_keys=True))
        except (TypeError, ValueError):
            meta = _from_dict(cls, doc, path)
            return meta, meta
        template = self._templates.get(key)
        simple = isinstance(attrs, dict) and (dims is None or (
            isinstance(dims, list) and all(isinstance(d, str | None) for d in dims)))
        if template is None or not simple:
            meta = _from_dict(cls, doc, path)
            if simple and _read_as_stored(doc, zarr_format):
                self._templates[key] = meta
            return meta, meta
        if dims is not None and len(dims) != len(template.shape):
            meta = _from_dict(cls, doc, path)
            return meta, meta
        meta = copy.copy(template)
        object.__setattr__(meta, "attributes", dict(attrs))
        if zarr_format == 3:
            object.__setattr__(meta, "dimension_names", tuple(dims) if dims is not None else None)
        return meta, template


@functools.cache
def _names_the_array(cls: Any) -> bool:
    return "path" in inspect.signature(cls.from_dict).parameters  # zarr-python >= 3.4.2


def _from_dict(cls: Any, doc: dict[str, Any], path: str | None) -> Any:
    if path is not None and _names_the_array(cls):
        return cls.from_dict(dict(doc), path=path)
    return cls.from_dict(dict(doc))


def _plain_chunk_shape(value: Any) -> bool:
    return isinstance(value, list) and all(type(c) is int and c >= 1 for c in value)


def _plain_inner_chunk_shapes(codecs: Any) -> bool:
    for codec in codecs if isinstance(codecs, list) else ():
        if isinstance(codec, dict) and codec.get("name") == "sharding_indexed":
            config = codec.get("configuration")
            if not isinstance(config, dict):
                return False
            if not (_plain_chunk_shape(config.get("chunk_shape")) and _plain_inner_chunk_shapes(config.get("codecs"))):
                return False
    return True


def _read_as_stored(doc: dict[str, Any], zarr_format: int) -> bool:
    """Whether zarr-python reads this document as stored, without a repair or a warning, so its parse may serve
    other arrays. zarr-python repairs chunk sizes that are not JSON integers >= 1 on a regular grid (see
    zarr.core.metadata.repair) and warns about an empty v2 filter list, once per array it reads: such
    documents are parsed each on their own, as engine="zarr" parses them."""
    if zarr_format == 2:
        return _plain_chunk_shape(doc.get("chunks")) and doc.get("filters") != []
    grid = doc.get("chunk_grid")
    config = grid.get("configuration") if isinstance(grid, dict) and grid.get("name") == "regular" else None
    return (isinstance(config, dict) and _plain_chunk_shape(config.get("chunk_shape"))
            and _plain_inner_chunk_shapes(doc.get("codecs")))


def _invalid_array(err: Exception, key: str, source: ByteSource) -> MetadataError:
    """zarr-python's refusal of an array document, naming the key; a TypeError or OverflowError stays one."""
    kind = (MetadataTypeError if isinstance(err, TypeError) else MetadataRangeError if isinstance(err, OverflowError)
            else MetadataError)
    return kind(f"invalid array metadata in {key!r} of {source.label}: {type(err).__name__}: {err}")


def _array_v3(name: str, path: str, doc: dict[str, Any], source: ByteSource, parser: MetadataParser) -> ArrayNode:
    try:
        meta, structure = parser.parse_with_structure(doc, 3, _join(source.label, path))
    except Exception as err:
        raise _invalid_array(err, _join(path, V3_KEY), source) from None
    return ArrayNode(name, path, meta, doc, structure)


def _array_v2(
    name: str, path: str, zarray: dict[str, Any], zattrs: dict[str, Any], source: ByteSource, parser: MetadataParser
) -> ArrayNode:
    try:
        meta, structure = parser.parse_with_structure({**zarray, "attributes": zattrs}, 2, _join(source.label, path))
    except Exception as err:
        raise _invalid_array(err, _join(path, V2_ARRAY), source) from None
    return ArrayNode(name, path, meta, zarray, structure)


def _check_format(doc: dict[str, Any], expected: int, key: str, source: ByteSource) -> None:
    found = doc.get("zarr_format")
    if found != expected:
        raise MetadataError(
            f"unsupported zarr_format in {key!r} of {source.label}: expected {expected}, got {found!r}"
        )


def parse_zarr_format(zarr_format: Any) -> int | None:
    if zarr_format is None or zarr_format in (2, 3):
        return zarr_format
    raise ValueError(f"unsupported zarr_format: expected 2, 3 or None. Got {zarr_format!r} instead.")


OnArray = Callable[[ArrayNode], Awaitable[None]]
_NOT_READ = object()  # a metadata object not fetched yet (None means fetched and missing)


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
    return await _Loader(source, parse_group_path(group), consolidated, variables, on_array).load(
        parse_zarr_format(zarr_format)
    )


class _Loader:
    def __init__(self, source: ByteSource, gpath: str, consolidated: bool | None,
                 variables: Collection[str] | None, on_array: OnArray | None) -> None:
        self.source, self.gpath, self.consolidated = source, gpath, consolidated
        self.variables, self.on_array = variables, on_array
        self.parser = MetadataParser()
        self.unconsolidated = False
        self._listing: asyncio.Task[list[str]] | None = None

    async def load(self, zarr_format: int | None) -> GroupNode:
        node = await self._load(zarr_format)
        return dataclasses.replace(node, unconsolidated=True) if self.unconsolidated else node

    async def _load(self, zarr_format: int | None) -> GroupNode:
        source, gpath = self.source, self.gpath
        if not source.supports_consolidated_metadata:
            self.consolidated = False
        if self.consolidated is False:
            self._listing = asyncio.ensure_future(source.list_dir(gpath))
        try:
            own_v3: Any = _NOT_READ
            if gpath and self.consolidated is not False:
                node, own_v3 = await self._from_root(zarr_format)
                if node is not None:
                    return node
            if zarr_format in (None, 3):
                raw = await source.get(_join(gpath, V3_KEY)) if own_v3 is _NOT_READ else own_v3
                if raw is not None:
                    doc = _parse_json(raw, _join(gpath, V3_KEY), source)
                    _check_format(doc, 3, _join(gpath, V3_KEY), source)
                    return await self._load_v3(doc)
            if zarr_format in (None, 2):
                node = await self._load_v2()
                if node is not None:
                    return node
            await _raise_missing(source, gpath, zarr_format)
            raise AssertionError("unreachable")
        finally:
            if self._listing is not None and not self._listing.done():
                self._listing.cancel()

    async def _from_root(self, zarr_format: int | None) -> tuple[GroupNode | None, Any]:
        """``group=`` from the consolidated metadata at the store's root, as engine="zarr" reads it; None if
        the root holds none (``consolidated=True`` then raises). Also returns the group's own ``zarr.json``
        (fetched together with the root's, so the fallback costs no extra round trip) or `_NOT_READ`."""
        source, gpath = self.source, self.gpath
        own_v3: Any = _NOT_READ
        if zarr_format in (None, 3):
            root_raw, own_v3 = await asyncio.gather(source.get(V3_KEY), source.get(_join(gpath, V3_KEY)))
            if root_raw is not None:
                doc = _parse_json(root_raw, V3_KEY, source)
                _check_format(doc, 3, V3_KEY, source)
                cm = doc.get("consolidated_metadata")
                if isinstance(cm, dict) and isinstance(cm.get("metadata"), dict):
                    return await self._subgroup_v3(cm["metadata"]), own_v3
                self._no_consolidated_metadata(V3_KEY)
                return None, own_v3
        if zarr_format in (None, 2):
            raw, zgroup_raw, zattrs_raw = await asyncio.gather(
                source.get(V2_CONSOLIDATED), source.get(V2_GROUP), source.get(V2_ATTRS))
            if raw is not None:
                # zarr-python opens the root (its .zgroup and .zattrs, checked) before going down to group=
                if zgroup_raw is None:
                    raise GroupNotFoundError(f"the root of {source.label} holds {V2_CONSOLIDATED!r} but no "
                                             f"{V2_GROUP!r}: no group there, so no group {gpath!r} below it")
                v2_root_attributes(_parse_json(zgroup_raw, V2_GROUP, source), zattrs_raw, source)
                return await self._subgroup_v2(_parse_json(raw, V2_CONSOLIDATED, source)), own_v3
        self._no_consolidated_metadata(V3_KEY if zarr_format == 3 else V2_CONSOLIDATED)
        return None, own_v3

    def _no_consolidated_metadata(self, key: str) -> None:
        """No consolidated metadata where it was looked for: an error with ``consolidated=True``, else noted;
        the group is then read as zarr-python reads it (a v3 group's own consolidated metadata still counts)."""
        if self.consolidated is True:
            where = f"{key!r} of {self.source.label}" if self.gpath else f"the root of {self.source.label} ({key!r})"
            raise MetadataError(f"consolidated=True, but {where} holds no consolidated metadata")
        self.unconsolidated = True

    def _missing_from_root(self) -> GroupNotFoundError:
        return GroupNotFoundError(
            f"group {self.gpath!r} not found in the consolidated metadata at the root of {self.source.label}"
        )

    async def _subgroup_v3(self, members: dict[str, Any]) -> GroupNode:
        """``group=`` as recorded in the root's v3 consolidated metadata (flat keys: "a", "a/b", "a/b/x")."""
        source, gpath = self.source, self.gpath
        where = f"the consolidated metadata in {V3_KEY!r}"
        entry = members.get(gpath)
        if not isinstance(entry, dict):
            raise self._missing_from_root()
        if _member_node_type(entry, f"member {gpath!r} of {where}", source) != "group":
            raise MetadataError(f"expected a group at {gpath!r} in {where} of {source.label}. Got an array.")
        prefix = gpath + "/"
        inside = {k[len(prefix):]: v for k, v in members.items() if k.startswith(prefix)}
        available = _consolidated_v3_arrays(inside, V3_KEY, source)
        arrays = await self._select(available, lambda n, d: _array_v3(n, _join(gpath, n), d, source, self.parser))
        return GroupNode(gpath, 3, dict(entry.get("attributes") or {}), arrays)

    async def _subgroup_v2(self, doc: dict[str, Any]) -> GroupNode:
        """``group=`` as recorded in the root's ``.zmetadata``."""
        source, gpath = self.source, self.gpath
        meta = doc.get("metadata")
        if not isinstance(meta, dict):
            raise MetadataError(f"expected a 'metadata' object in {V2_CONSOLIDATED!r} of {source.label}")
        if _join(gpath, V2_GROUP) not in meta:
            raise self._missing_from_root()
        prefix = gpath + "/"
        inside = {k[len(prefix):]: v for k, v in meta.items() if k.startswith(prefix)}
        attributes = dict(inside.get(V2_ATTRS, {}) or {})
        available = await live_nczarr_dimrefs(source, gpath, _consolidated_v2_arrays(inside, V2_CONSOLIDATED, source))
        arrays = await self._select(
            available, lambda n, pair: _array_v2(n, _join(gpath, n), pair[0], pair[1], source, self.parser)
        )
        return GroupNode(gpath, 2, attributes, arrays)

    async def _list(self) -> list[str]:
        if self._listing is not None:
            listing, self._listing = self._listing, None
            return await listing
        return await self.source.list_dir(self.gpath)

    async def _member_names(self) -> list[str]:
        """The group's listed children but its own metadata objects; every name is checked."""
        names = [n for n in await self._list() if n not in METADATA_KEYS]
        where = f"the listing of {self.gpath or '/'!r}"
        for name in names:
            _check_member_name(name, where, self.source)
        return names

    def _wanted(self, name: str) -> bool:
        return self.variables is None or name in self.variables

    async def _announce(self, nodes: Iterable[ArrayNode]) -> None:
        if self.on_array is not None:
            await asyncio.gather(*(self.on_array(n) for n in nodes))

    async def _select(self, available: dict[str, Any], build: Callable[[str, Any], ArrayNode]) -> dict[str, ArrayNode]:
        """Arrays of consolidated metadata: the wanted ones and, with ``variables``, their coordinates."""
        selected = {n: build(n, d) for n, d in available.items() if self._wanted(n)}
        if self.variables is not None:
            for n in _coordinate_names(selected) & set(available) - set(selected):
                selected[n] = build(n, available[n])
        await self._announce(selected.values())
        return {n: selected[n] for n in available if n in selected}  # the document's order, as zarr-python

    async def _load_v3(self, doc: dict[str, Any]) -> GroupNode:
        source, gpath = self.source, self.gpath
        key = _join(gpath, V3_KEY)
        _check_group_node_type(doc, key, source)
        attributes = dict(doc.get("attributes") or {})
        cm = doc.get("consolidated_metadata")
        if self.consolidated is not False and isinstance(cm, dict) and isinstance(cm.get("metadata"), dict):
            available = _consolidated_v3_arrays(cm["metadata"], key, source)
            arrays = await self._select(
                available, lambda n, d: _array_v3(n, _join(gpath, n), d, source, self.parser)
            )
            return GroupNode(gpath, 3, attributes, arrays)
        if self.consolidated is not False:
            self._no_consolidated_metadata(key)

        names = await self._member_names()
        arrays = await self._fetch_v3([n for n in names if self._wanted(n)])
        if self.variables is not None:
            arrays.update(await self._fetch_v3(sorted((_coordinate_names(arrays) & set(names)) - set(arrays))))
        return GroupNode(gpath, 3, attributes, _in_order(arrays, names))

    async def _fetch_v3(self, names: list[str]) -> dict[str, ArrayNode]:
        source, gpath = self.source, self.gpath

        async def one(name: str) -> ArrayNode | None:
            raw = await source.get(_join(gpath, name, V3_KEY))
            if raw is None:
                return None  # a stray object or a folder without metadata: not a member
            key = _join(gpath, name, V3_KEY)
            doc = _parse_json(raw, key, source)
            if _member_node_type(doc, repr(key), source) == "group":
                return None  # a subgroup: not a variable of this group
            _check_format(doc, 3, key, source)
            node = _array_v3(name, _join(gpath, name), doc, source, self.parser)
            await self._announce([node])
            return node

        found = await asyncio.gather(*(one(n) for n in names))
        return {n.name: n for n in found if n is not None}

    async def _load_v2(self) -> GroupNode | None:
        source, gpath = self.source, self.gpath
        # zarr-python reads .zmetadata at the root only, and with it the root's own .zgroup and .zattrs: the
        # group must exist and its attributes are the live ones, not the consolidated copy
        consolidated = self.consolidated is not False and not gpath
        zgroup_raw, zattrs_raw, zmetadata_raw = await asyncio.gather(
            source.get(_join(gpath, V2_GROUP)), source.get(_join(gpath, V2_ATTRS)),
            source.get(V2_CONSOLIDATED) if consolidated else _nothing(),
        )
        if zgroup_raw is None:
            return None  # no group here at all: the caller says so
        if zmetadata_raw is not None:
            attributes = v2_root_attributes(_parse_json(zgroup_raw, V2_GROUP, source), zattrs_raw, source)
            return await self._from_zmetadata(_parse_json(zmetadata_raw, V2_CONSOLIDATED, source), attributes)
        attributes = _parse_json(zattrs_raw, _join(gpath, V2_ATTRS), source) if zattrs_raw is not None else {}
        if self.consolidated is not False:
            self._no_consolidated_metadata(_join(gpath, V2_CONSOLIDATED))
        _check_format(_parse_json(zgroup_raw, _join(gpath, V2_GROUP), source), 2, _join(gpath, V2_GROUP), source)
        names = await self._member_names()
        arrays = await self._fetch_v2([n for n in names if self._wanted(n)])
        if self.variables is not None:
            arrays.update(await self._fetch_v2(sorted((_coordinate_names(arrays) & set(names)) - set(arrays))))
        return GroupNode(gpath, 2, attributes, _in_order(arrays, names))

    async def _fetch_v2(self, names: list[str]) -> dict[str, ArrayNode]:
        source, gpath = self.source, self.gpath

        async def one(name: str) -> ArrayNode | None:
            zarray_raw, zattrs_raw = await asyncio.gather(
                source.get(_join(gpath, name, V2_ARRAY)), source.get(_join(gpath, name, V2_ATTRS))
            )
            if zarray_raw is None:
                return None
            zarray = _parse_json(zarray_raw, _join(gpath, name, V2_ARRAY), source)
            _check_format(zarray, 2, _join(gpath, name, V2_ARRAY), source)
            zattrs = _parse_json(zattrs_raw, _join(gpath, name, V2_ATTRS), source) if zattrs_raw is not None else {}
            node = _array_v2(name, _join(gpath, name), zarray, zattrs, source, self.parser)
            await self._announce([node])
            return node

        found = await asyncio.gather(*(one(n) for n in names))
        return {n.name: n for n in found if n is not None}

    async def _from_zmetadata(self, doc: dict[str, Any], attributes: dict[str, Any]) -> GroupNode:
        """The group's arrays from its consolidated metadata; ``attributes`` are its live ``.zattrs``."""
        source, gpath = self.source, self.gpath
        meta = doc.get("metadata")
        if not isinstance(meta, dict):
            raise MetadataError(f"expected a 'metadata' object in {_join(gpath, V2_CONSOLIDATED)!r} of {source.label}")
        available = await live_nczarr_dimrefs(
            source, gpath, _consolidated_v2_arrays(meta, _join(gpath, V2_CONSOLIDATED), source))
        arrays = await self._select(
            available, lambda n, pair: _array_v2(n, _join(gpath, n), pair[0], pair[1], source, self.parser)
        )
        return GroupNode(gpath, 2, attributes, arrays)


def v2_root_attributes(zgroup: dict[str, Any], zattrs_raw: Any, source: ByteSource) -> dict[str, Any]:
    """The live attributes of a v2 root opened through its consolidated metadata, its ``.zgroup`` checked as
    zarr-python checks it then (a group, not an array)."""
    _check_group_node_type(zgroup, V2_GROUP, source)
    return _parse_json(zattrs_raw, V2_ATTRS, source) if zattrs_raw is not None else {}


async def _nothing() -> None:
    return None


def _in_order(arrays: dict[str, ArrayNode], listing: list[str]) -> dict[str, ArrayNode]:
    """Arrays in the store's listing order: the order zarr-python lists a group's members in."""
    return {n: arrays[n] for n in listing if n in arrays}


def _check_group_node_type(doc: dict[str, Any], key: str, source: ByteSource) -> None:
    """The opened group's own document: zarr-python reads one without ``node_type`` as a group."""
    node_type = doc.get("node_type", "group")
    if node_type == "array":
        raise MetadataError(f"expected a group in {key!r} of {source.label}. Got an array (node_type='array').")
    if node_type != "group":
        raise NodeNotFoundError(
            f"expected a group in {key!r} of {source.label}: node_type 'group'. Got node_type={node_type!r}."
        )


def _consolidated_v3_arrays(members: dict[str, Any], key: str, source: ByteSource) -> dict[str, dict[str, Any]]:
    """The group's own arrays in its v3 consolidated metadata. Every member is checked as zarr-python checks
    it (a name inside the group, a JSON object, node_type "array" or "group"); names with a "/" are members
    of subgroups."""
    arrays = {}
    where = f"the consolidated metadata in {key!r}"
    for name, member in members.items():
        _check_member_name(name, where, source)
        if not isinstance(member, dict):
            raise MetadataTypeError(f"expected a JSON object for member {name!r} of {where} of {source.label}. "
                                    f"Got {type(member).__name__}.")
        if _member_node_type(member, f"member {name!r} of {where}", source) == "array" and "/" not in name:
            arrays[name] = member
    return arrays


def _consolidated_v2_arrays(meta: dict[str, Any], key: str, source: ByteSource) -> dict[str, tuple[Any, Any]]:
    """The group's own arrays in its ``.zmetadata``, as (``.zarray``, ``.zattrs``) pairs; every member's name
    is checked."""
    arrays = {}
    where = f"the consolidated metadata in {key!r}"
    for entry, value in meta.items():
        name, _, last = entry.rpartition("/")
        if last not in METADATA_KEYS or not name:
            continue  # the group's own documents, or an entry that names no member
        _check_member_name(name, where, source)
        if last == V2_ARRAY and "/" not in name:
            arrays[name] = (value, meta.get(_join(name, V2_ATTRS), {}) or {})
    return arrays


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
    raws = await asyncio.gather(*(source.get(_join(gpath, n, V2_ARRAY)) for n in missing))
    out = dict(arrays)
    for name, raw in zip(missing, raws, strict=True):
        zarray = {k: v for k, v in arrays[name][0].items() if k != NCZARR_ARRAY}
        if raw is not None:
            live = _parse_json(raw, _join(gpath, name, V2_ARRAY), source)
            if NCZARR_ARRAY in live:
                zarray[NCZARR_ARRAY] = live[NCZARR_ARRAY]
        out[name] = (zarray, arrays[name][1])
    return out


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


def _coordinate_names(arrays: dict[str, ArrayNode]) -> set[str]:
    """Names the given arrays refer to as coordinates: their dimensions and their ``coordinates`` attribute."""
    names: set[str] = set()
    for node in arrays.values():
        meta = node.metadata
        dims = getattr(meta, "dimension_names", None) or meta.attributes.get("_ARRAY_DIMENSIONS") or ()
        names.update(d for d in dims if d)
        coords = meta.attributes.get("coordinates")
        if isinstance(coords, str):
            names.update(coords.split())
    return names
