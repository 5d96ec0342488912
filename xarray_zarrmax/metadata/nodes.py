"""What a Zarr group and its arrays are once read: `ArrayNode`, `GroupNode`, and the parsing and checks of the
metadata documents they come from (``zarr.json``; ``.zgroup``, ``.zarray``, ``.zattrs``).

Bad metadata is an error, never a silently different Dataset: a document that is not a JSON object, a member
whose ``node_type`` is missing or unknown, a member name with ``.`` or ``..`` segments (it would name a key
outside its group), a ``zarr_format`` other than the one expected, and ``group=`` paths zarr-python refuses all
raise, naming the key. Array documents are parsed by zarr-python (`MetadataParser`), once per distinct structure.

Nothing here makes a request: `loader` reads the documents, `consolidated` takes consolidated ones apart.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import re
from dataclasses import dataclass, field
from typing import Any

from xarray_zarrmax.errors import (
    ArgumentTypeError,
    MetadataError,
    MetadataRangeError,
    MetadataTypeError,
    NodeNotFoundError,
)
from xarray_zarrmax.storage.abc import ByteSource

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
    """One group: its key prefix in the store ("" for the root), its attributes and its own arrays by name
    (subgroups are `GroupNode` values of their own)."""

    path: str
    zarr_format: int
    attributes: dict[str, Any]
    arrays: dict[str, ArrayNode]
    #: ``consolidated=None`` found no consolidated metadata at the root: engine="zarr" warns then.
    unconsolidated: bool = False
    #: Why each member array left out was left out (`member_array_v3`): the caller warns, as engine="zarr" does.
    left_out: tuple[str, ...] = ()


def join_key(*parts: str) -> str:
    """The store key of ``parts`` joined by "/", empty parts (the root's path) left out."""
    return "/".join(p for p in parts if p)


def parse_group_path(group: str | None) -> str:
    """``group=`` as a key prefix, normalized as zarr-python normalizes paths (backslashes as slashes, no
    leading, trailing or repeated slashes), refusing what zarr-python refuses: ``.`` and ``..`` segments,
    which would name keys outside the store."""
    if group is None:
        return ""
    if not isinstance(group, str):
        raise ArgumentTypeError(f"expected group as a str or None. Got {type(group).__name__}: {group!r}")
    path = re.sub("/+", "/", group.replace("\\", "/")).strip("/")
    segments = path.split("/")
    if "." in segments or ".." in segments:
        raise ValueError(f"group must be a path inside the store, without '.' or '..' segments. Got {group!r}.")
    return path


def parse_zarr_format(zarr_format: Any) -> int | None:
    if zarr_format is None or zarr_format in (2, 3):
        return zarr_format
    raise ValueError(f"unsupported zarr_format: expected 2, 3 or None. Got {zarr_format!r} instead.")


# -- documents ----------------------------------------------------------------------------------------------


def parse_document(raw: Any, key: str, source: ByteSource) -> dict[str, Any]:
    """The JSON object stored at ``key``."""
    try:
        doc = json.loads(bytes(raw))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise MetadataError(f"malformed JSON in {key!r} of {source.label}: {err}") from None
    if not isinstance(doc, dict):
        raise MetadataTypeError(f"expected a JSON object in {key!r} of {source.label}. Got {type(doc).__name__}.")
    return doc


def check_format(doc: dict[str, Any], expected: int, key: str, source: ByteSource) -> None:
    found = doc.get("zarr_format")
    if found != expected:
        raise MetadataError(
            f"unsupported zarr_format in {key!r} of {source.label}: expected {expected}, got {found!r}"
        )


def check_member_format(doc: Any, expected: int, where: str, source: ByteSource) -> None:
    """A group's record in consolidated metadata (``where`` names it), which may not even be a JSON object."""
    found = doc.get("zarr_format") if isinstance(doc, dict) else None
    if found != expected:
        raise MetadataError(f"unsupported zarr_format in {where} of {source.label}: expected {expected}, got {found!r}")


def check_group_node_type(doc: dict[str, Any], key: str, source: ByteSource) -> None:
    """The opened group's own document: zarr-python reads one without ``node_type`` as a group."""
    node_type = doc.get("node_type", "group")
    if node_type == "array":
        raise MetadataError(f"expected a group in {key!r} of {source.label}. Got an array (node_type='array').")
    if node_type != "group":
        raise NodeNotFoundError(
            f"expected a group in {key!r} of {source.label}: node_type 'group'. Got node_type={node_type!r}."
        )


def member_node_type(doc: dict[str, Any], where: str, source: ByteSource) -> str:
    """A v3 member's ``node_type``: "array" or "group" (a subgroup, not a variable); anything else raises, as
    zarr-python raises. ``where`` names the document."""
    node_type = doc.get("node_type")
    if node_type == "array" or node_type == "group":
        return node_type
    got = "no node_type" if "node_type" not in doc else f"node_type={node_type!r}"
    raise MetadataError(f"expected node_type 'array' or 'group' in {where} of {source.label}. Got {got}.")


def check_member_name(name: str, where: str, source: ByteSource) -> None:
    """A member's name from a listing or consolidated metadata becomes part of every key read for it: one with
    an empty, ``.`` or ``..`` segment would name keys outside its group."""
    segments = name.split("/")
    if "" in segments or "." in segments or ".." in segments:
        raise MetadataError(
            f"invalid member name {name!r} in {where} of {source.label}: expected a name without empty, "
            "'.' or '..' path segments"
        )


# -- arrays -------------------------------------------------------------------------------------------------


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


def array_node_v3(name: str, path: str, doc: dict[str, Any], source: ByteSource,
                  parser: MetadataParser) -> ArrayNode:
    """Array ``name`` at ``path`` from its ``zarr.json`` (stored, or its record in consolidated metadata)."""
    try:
        meta, structure = parser.parse_with_structure(doc, 3, join_key(source.label, path))
    except Exception as err:
        raise _invalid_array(err, join_key(path, V3_KEY), source) from None
    return ArrayNode(name, path, meta, doc, structure)


def member_array_v3(name: str, path: str, doc: dict[str, Any], source: ByteSource, parser: MetadataParser, *,
                    asked_for: bool) -> ArrayNode | str:
    """Member array ``name`` of a group read live, as `array_node_v3`; or, where zarr-python cannot read its
    document for a key it lacks (its parse raises KeyError: ``codecs``, which GDAL leaves out, ``shape``...),
    why it is left out of its group: engine="zarr" leaves it out with a warning, the caller gives that warning.
    One asked for by name (``variables=``) raises `MetadataError` instead, as opening it alone raises there."""
    key = join_key(path, V3_KEY)
    if "zarr_format" in doc:  # without one, zarr-python's KeyError (first thing it reads): left out below
        check_format(doc, 3, key, source)
    try:
        meta, structure = parser.parse_with_structure(doc, 3, join_key(source.label, path))
    except KeyError as err:
        missing = err.args[0] if err.args else None
        what = (f"its metadata {key!r} has no {missing!r}, which Zarr v3 requires"
                if isinstance(missing, str) and missing not in doc else
                f"zarr-python cannot read its metadata {key!r}: KeyError: {err}")
        if asked_for:
            raise MetadataError(f"array {name!r} of {source.label}: {what}: it cannot be read") from None
        return (f"left out array {name!r} of {source.label}: {what} (GDAL writes arrays without 'codecs'); "
                'engine="zarr" leaves it out too')
    except Exception as err:
        raise _invalid_array(err, key, source) from None
    return ArrayNode(name, path, meta, doc, structure)


def array_node_v2(name: str, path: str, zarray: dict[str, Any], zattrs: dict[str, Any], source: ByteSource,
                  parser: MetadataParser) -> ArrayNode:
    """Array ``name`` at ``path`` from its ``.zarray`` and ``.zattrs``."""
    try:
        meta, structure = parser.parse_with_structure({**zarray, "attributes": zattrs}, 2, join_key(source.label, path))
    except Exception as err:
        raise _invalid_array(err, join_key(path, V2_ARRAY), source) from None
    return ArrayNode(name, path, meta, zarray, structure)


def coordinate_names(arrays: dict[str, ArrayNode]) -> set[str]:
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
