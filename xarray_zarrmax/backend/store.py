"""`ZarrmaxStore`: one Zarr group as an xarray data store, its variables lazy.

xarray's ``StoreBackendEntrypoint`` decodes it (CF conventions, coordinates) exactly as it decodes engine="zarr"'s
``ZarrStore``; what a store gives it is engine="zarr"'s too: dimension names (v3 ``dimension_names``, v2
``_ARRAY_DIMENSIONS`` or NCZarr), attributes, fill values, ``encoding`` (``chunks``, ``shards``, codecs) and the
unconsolidated-metadata warning. What differs is ``preferred_chunks``: one stored object each, or with
``chunks={}`` groups of small ones (`xarray_zarrmax.backend.chunks`). Each variable is built as its metadata
arrives, index coordinates read first, while the rest of the metadata is still in flight.
"""

from __future__ import annotations

import math
import posixpath
import types
import uuid
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from xarray import Variable
from xarray.backends import AbstractDataStore
from xarray.core import indexing

from xarray_zarrmax.backend.arrays import DeviceSpec, FallbackArray, ZarrmaxArray
from xarray_zarrmax.backend.chunks import (
    ChunkSizes,
    Structure,
    align_task_chunks,
    dask_name,
    device_dask_array,
    grouped_task_chunks,
)
from xarray_zarrmax.config import get_config
from xarray_zarrmax.core.geometry import full_selection
from xarray_zarrmax.core.loop import run_sync
from xarray_zarrmax.errors import MetadataError, MetadataTypeError, MissingDimensionsError
from xarray_zarrmax.metadata.loader import load_group, load_tree
from xarray_zarrmax.metadata.nodes import ArrayNode, GroupNode
from xarray_zarrmax.read import index_cache
from xarray_zarrmax.read.fetch import read_selection_async
from xarray_zarrmax.storage.abc import ByteSource
from xarray_zarrmax.xarray_compat import decode_fill_value, user_stacklevel

DIMENSION_KEY = "_ARRAY_DIMENSIONS"


class ZarrmaxStore(AbstractDataStore):
    """An xarray data store over a loaded `GroupNode`; variables are lazy."""

    def __init__(self, source: ByteSource, *, use_zarr_fill_value_as_mask: bool | None = None,
                 dropped: Iterable[str] = (), device: DeviceSpec = None, preload_indexes: bool = True,
                 group_tasks: bool = False) -> None:
        self.source = source
        # Read index coordinates during the open: right only where xarray builds indexes from them then (see
        # `xarray_compat.opener_call`); a coordinate left lazy is read when used, as engine="zarr" reads it.
        self.preload_indexes = preload_indexes
        # Group small stored objects into dask tasks (config task_bytes): only where xarray's dask chunks are
        # the preferred chunks and nothing else (chunks={}); user chunks are checked against preferred_chunks,
        # which then stay the stored objects, so xarray's alignment warnings keep their meaning.
        self.group_tasks = group_tasks
        self.device = device
        self.token = uuid.uuid4().hex
        self.dropped = set(dropped)
        self.use_zarr_fill_value_as_mask = use_zarr_fill_value_as_mask
        self.group = GroupNode("", 3, {}, {})
        self._preloaded: dict[str, np.ndarray] = {}
        self._structures: dict[int, Structure] = {}
        self._variables: dict[str, Variable] = {}  # built while the rest of the metadata is in flight
        self._errors: dict[str, Exception] = {}  # raised by building a variable on arrival, for get_variables

    @classmethod
    def open(cls, source: ByteSource, *, group: str | None = None, consolidated: bool | None = None,
             zarr_format: int | None = None, variables: Iterable[str] | None = None,
             use_zarr_fill_value_as_mask: bool | None = None, dropped: Iterable[str] = (),
             device: DeviceSpec = None, preload_indexes: bool = True, group_tasks: bool = False) -> ZarrmaxStore:
        """Load the group's metadata, reading index coordinates as their metadata arrives (``preload_indexes``)."""
        store = cls(source, use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask, dropped=dropped, device=device,
                    preload_indexes=preload_indexes, group_tasks=group_tasks)
        wanted = None if variables is None else set(variables)
        store.group = run_sync(load_group(source, group, consolidated=consolidated, zarr_format=zarr_format,
                                          variables=wanted, on_array=store.on_array))
        if store.group.unconsolidated:
            _warn_unconsolidated()
        _warn_left_out([store.group])
        if wanted is not None:
            missing = wanted - set(store.group.arrays)
            if missing:
                raise KeyError(f"variables {sorted(missing, key=repr)} not found in {source.label} "
                               f"(group {group or '/'!r})")
        return store

    @classmethod
    def open_tree(cls, source: ByteSource, *, group: str | None = None, consolidated: bool | None = None,
                  zarr_format: int | None = None, use_zarr_fill_value_as_mask: bool | None = None,
                  dropped: Iterable[str] = (), device: DeviceSpec = None,
                  preload_indexes: bool = True, group_tasks: bool = False) -> dict[str, ZarrmaxStore]:
        """One store per group at and below ``group``, keyed by path in the store ("" for the root): the whole
        hierarchy's metadata in the fewest round trips (`metadata.load_tree`), the index coordinates of every group
        read in one concurrent batch as their metadata arrives."""
        stores: dict[str, ZarrmaxStore] = {}
        dropped = set(dropped)

        def store_for(path: str) -> ZarrmaxStore:
            store = stores.get(path)
            if store is None:
                store = stores[path] = cls(source, use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
                                           dropped=dropped, device=device, preload_indexes=preload_indexes,
                                           group_tasks=group_tasks)
            return store

        async def on_array(path: str, node: ArrayNode) -> None:
            await store_for(path).on_array(node)

        groups = run_sync(load_tree(source, group, consolidated=consolidated, zarr_format=zarr_format,
                                    on_array=on_array))
        out = {}
        for path, node in groups.items():
            store = out[path] = store_for(path)
            store.group = node
        if any(node.unconsolidated for node in groups.values()):
            _warn_unconsolidated()
        _warn_left_out(groups.values())
        return out

    def mask_with_fill_value(self, node: ArrayNode) -> bool:
        """As xarray's zarr backend: by default the fill value masks in Zarr v2 only. The array's format is
        the group's (a v2 group holds v2 arrays) and, unlike the group's, is known while metadata arrives."""
        if self.use_zarr_fill_value_as_mask is None:
            return node.zarr_format == 2
        return self.use_zarr_fill_value_as_mask

    def _dims_and_attrs(self, node: ArrayNode) -> tuple[tuple[str, ...], dict[str, Any]]:
        meta = node.metadata
        attrs = dict(meta.attributes)
        if node.zarr_format == 3:
            # A None among the names is a dimension named None, as engine="zarr" reads it.
            dims = tuple(meta.dimension_names or ())
            if len(dims) != len(meta.shape):
                raise MissingDimensionsError(
                    f"array {node.name!r} of {self.source.label} needs a name for each of its {len(meta.shape)} "
                    "dimensions in its `dimension_names` metadata, which is required for xarray to determine "
                    f"variable dimensions. Got {meta.dimension_names!r}."
                )
            return dims, attrs
        names: Any = attrs.pop(DIMENSION_KEY) if DIMENSION_KEY in attrs else self._nczarr_dimensions(node)
        if isinstance(names, str):
            names = [names]  # xarray takes a string as one name (so "yx" on a 2-d array is an error, not y and x)
        elif isinstance(names, dict):
            names = list(names)  # engine="zarr" iterates it: the keys are the names
        if not isinstance(names, list | tuple):  # engine="zarr": TypeError, from iterating it
            raise MetadataTypeError(
                f"array {node.name!r} of {self.source.label}: attribute {DIMENSION_KEY!r} must be a list of "
                f"dimension names. Got {names!r}."
            )
        if len(names) != len(meta.shape):
            raise MetadataError(
                f"array {node.name!r} of {self.source.label} has {len(meta.shape)} dimensions, but its attribute "
                f"{DIMENSION_KEY!r} names {len(names)}: {names!r}"
            )
        attrs = {k: v for k, v in attrs.items() if not k.lower().startswith("_nc")}
        return tuple(names), attrs

    def _nczarr_dimensions(self, node: ArrayNode) -> list[Any]:
        """An NCZarr array's dimensions: the last part of each fully qualified name in the ``dimrefs`` of its
        ``.zarray`` (``"/group/x"`` is ``x``), as engine="zarr" reads them."""
        nczarr = node.document.get("_NCZARR_ARRAY")
        dimrefs = nczarr.get("dimrefs") if isinstance(nczarr, dict) else None
        if dimrefs is None:
            raise MissingDimensionsError(
                f"array {node.name!r} of {self.source.label} is missing the attribute {DIMENSION_KEY!r} and the "
                "NCZarr metadata ('_NCZARR_ARRAY' dimrefs in .zarray), which are required for xarray to determine "
                "variable dimensions"
            )
        if not isinstance(dimrefs, list) or not all(isinstance(d, str) for d in dimrefs):
            raise MetadataTypeError(
                f"array {node.name!r} of {self.source.label}: '_NCZARR_ARRAY' dimrefs in .zarray must be a list of "
                f"dimension paths. Got {dimrefs!r}."
            )
        return [posixpath.basename(d) for d in dimrefs]

    def _task_chunks(self, wrapper: ZarrmaxArray | FallbackArray, outer: ChunkSizes) -> ChunkSizes:
        """The dask chunks of chunks={}: groups of small stored objects (`grouped_task_chunks`) where this
        store groups them, else one stored object each."""
        if not self.group_tasks or self.device is not None:
            # on a device, a dask array of one block per object is built here; grouped preferred chunks would
            # have xarray rechunk it, concatenating blocks on the device
            return outer
        return grouped_task_chunks(wrapper.shape, wrapper.dtype, outer)

    def open_store_variable(self, node: ArrayNode) -> Variable:
        dims, attrs = self._dims_and_attrs(node)
        meta = node.metadata
        structure = self._structure(node)
        wrapper = self.wrapper(node)
        outer = structure.outer
        too_many = structure.objects > get_config().max_objects
        if too_many and self.device == "cuda":  # always a dask array of one block per object
            raise MetadataError(
                f"array {node.name!r} of {self.source.label} declares {structure.objects} stored objects (shape "
                f"{wrapper.shape}, chunks {outer}), more than config max_objects={get_config().max_objects}: too "
                "many dask tasks to plan one per object. Open it on the host (device=None)."
            )
        # Past max_objects, dask could not plan one task per object (their sizes alone would fill memory):
        # chunks={} makes one block of the array, whose selections still read only what they select.
        task_chunks = tuple(wrapper.shape) if too_many else self._task_chunks(wrapper, outer)
        encoding: dict[str, Any] = {
            "chunks": structure.chunks,
            "preferred_chunks": dict(zip(dims, task_chunks, strict=True)),
        }
        if wrapper.dtype.kind == "T":  # as xarray's zarr backend: keeps NumPy's StringDType through decoding
            encoding["dtype"] = wrapper.dtype
        encoding.update(structure.codecs)
        encoding["shards"] = structure.shards
        if self.mask_with_fill_value(node):
            if meta.fill_value is not None:
                attrs["_FillValue"] = meta.fill_value
        else:
            if node.zarr_format == 3:
                encoding["fill_value"] = meta.fill_value
            if "_FillValue" in attrs:
                attrs["_FillValue"] = decode_fill_value(attrs["_FillValue"], wrapper.dtype)
        preloaded = self._preloaded.get(node.name)
        if preloaded is not None:
            # Index coordinates stay on the host: pandas builds the index from them. Lazily wrapped, as
            # engine="zarr" hands them over: a bare array would have xarray make a big-endian datetime native.
            data: Any = indexing.LazilyIndexedArray(preloaded)
        elif self.device is not None and self.is_index_coordinate(node):
            # not read at the open (xarray builds no index here), it stays on the host as a read one does: its
            # values are labels, on the host whether or not xarray indexes them
            data = indexing.LazilyIndexedArray(self.wrapper(node, on_host=True))
        elif self.device == "cuda":
            data = device_dask_array(wrapper, outer, dask_name(self.token, node.name))
        else:
            data = indexing.LazilyIndexedArray(wrapper)
        return Variable(dims, data, attrs, encoding)

    def wrapper(self, node: ArrayNode, *, on_host: bool = False) -> ZarrmaxArray | FallbackArray:
        """The lazy array for a node: the fast path where its metadata allows, else zarr-python."""
        device = None if on_host else self.device
        structure = self._structure(node)
        if structure.plan is not None:
            return ZarrmaxArray(structure.plan.for_array(node.name, node.path), self.source, self.token, device)
        return FallbackArray(node, self.source, structure.fallback_reason, device)

    def _structure(self, node: ArrayNode) -> Structure:
        key = node.structure_key
        found = self._structures.get(id(key))  # the entry keeps `key` alive, so its id is not reused
        if found is None:
            found = self._structures[id(key)] = Structure.of(node)
        return found

    def is_index_coordinate(self, node: ArrayNode) -> bool:
        """A 1-D array named after its own dimension: xarray builds an index from it at open."""
        if len(node.metadata.shape) != 1:
            return False
        try:
            dims, _ = self._dims_and_attrs(node)
        except MetadataError:
            return False
        return dims == (node.name,)

    async def on_array(self, node: ArrayNode) -> None:
        """Called by `load_group` as each array's metadata arrives: the variable is built (index coordinates
        read first) while later metadata is still in flight, so little is left to do after the last response."""
        if self.preload_indexes and node.name not in self.dropped and self.is_index_coordinate(node):
            await self.preload_index(node)
        try:
            self._variables[node.name] = self.open_store_variable(node)
        except Exception as err:
            self._errors[node.name] = err  # raised from get_variables, where errors have always surfaced

    async def preload_index(self, node: ArrayNode) -> None:
        """Read an index coordinate's values."""
        wrapper = self.wrapper(node, on_host=True)
        try:
            if isinstance(wrapper, ZarrmaxArray):
                values = await read_selection_async(wrapper.plan, self.source, full_selection(wrapper.shape),
                                                    self.token)
            else:
                assert isinstance(wrapper, FallbackArray)
                values = await wrapper.read_async(tuple(slice(None) for _ in wrapper.shape))
        except MemoryError as err:  # a declared shape too large for memory: say which coordinate, and why read
            n = math.prod(wrapper.shape)
            err.add_note(f"while reading index coordinate {node.name!r} of {self.source.label} at open: {n} values "
                         f"of {wrapper.dtype}, {n * wrapper.dtype.itemsize / 1e12:.2f} TB; xarray builds its index "
                         "from them")
            raise
        self._preloaded[node.name] = values

    def get_variables(self) -> Mapping[str, Variable]:
        variables = {}
        for name, node in self.group.arrays.items():
            if name in self._errors:
                raise self._errors[name]  # the error building it on arrival: the same object, not a second try
            variables[name] = self._variables[name] if name in self._variables else self.open_store_variable(node)
        if self.group_tasks:
            align_task_chunks(variables, self.dropped)
        return types.MappingProxyType(variables)  # read-only, as xarray's stores give theirs

    def get_attrs(self) -> Mapping[str, Any]:
        return {k: v for k, v in self.group.attributes.items() if not k.lower().startswith("_nc")}

    def get_dimensions(self) -> Mapping[str, int]:
        dims: dict[str, int] = {}
        for node in self.group.arrays.values():
            names, _ = self._dims_and_attrs(node)
            for d, s in zip(names, node.metadata.shape, strict=True):
                if d in dims and dims[d] != s:
                    raise ValueError(f"found conflicting lengths for dimension {d} ({s} != {dims[d]})")
                dims[d] = s
        return dims

    def close(self) -> None:
        # The shard indexes this open cached: no other open uses them (the token is this store's), so they go
        # now rather than sit in the cache until it is full. Reads after close still work, reading them again.
        index_cache.forget_store(self.token)


def _warn_left_out(groups: Iterable[GroupNode]) -> None:
    """A warning for each array left out of its group (`metadata.nodes.member_array_v3`), of the type of
    engine="zarr"'s for the same array (zarr's ZarrUserWarning, a UserWarning): its filters apply to ours."""
    from zarr.errors import ZarrUserWarning

    for group in groups:
        for why in group.left_out:
            warnings.warn(why, ZarrUserWarning, stacklevel=user_stacklevel())


def _warn_unconsolidated() -> None:
    """engine="zarr"'s warning (same text and type) for ``consolidated=None`` on a store without
    consolidated metadata at its root."""
    warnings.warn(
        "Failed to open Zarr store with consolidated metadata, but successfully read with non-consolidated "
        "metadata. This is typically much slower for opening a dataset. To silence this warning, consider:\n"
        "1. Consolidating metadata in this existing store with zarr.consolidate_metadata().\n"
        "2. Explicitly setting consolidated=False, to avoid trying to read consolidate metadata, or\n"
        "3. Explicitly setting consolidated=True, to raise an error in this case instead of falling back to "
        "try reading non-consolidated metadata.",
        RuntimeWarning,
        stacklevel=user_stacklevel(),
    )
