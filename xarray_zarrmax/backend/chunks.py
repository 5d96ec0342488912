"""Chunk sizes: an array's stored layout as xarray reports it, and the dask tasks it is read in.

- `Structure`: what follows from an array's metadata alone (the fast path's plan or the reason for zarr-python,
  ``encoding["chunks"]``/``["shards"]``, the codecs), worked out once for all arrays that share it;
  `zarr_chunk_sizes` gives the sizes engine="zarr" reports, rectilinear grids included.
- `grouped_task_chunks` and `align_task_chunks`: with ``chunks={}``, small stored objects grouped into dask
  tasks of about config ``task_bytes``, one size along a dimension for all variables stored alike.
- `device_dask_array`: with ``device="cuda"``, the dask array of one block per stored object, on the device.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from xarray import Variable
from xarray.core import indexing

from xarray_zarrmax.config import get_config
from xarray_zarrmax.core.geometry import task_chunks
from xarray_zarrmax.errors import Unsupported
from xarray_zarrmax.metadata.nodes import ArrayNode
from xarray_zarrmax.read.plan import ArrayPlan, plan_array

if TYPE_CHECKING:
    from xarray_zarrmax.backend.arrays import FallbackArray, ZarrmaxArray

#: Per dimension, a chunk size, or the sizes of each chunk along a rectilinear dimension.
ChunkSizes = tuple[int | tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class Structure:
    """What follows from an array's structure alone, worked out once for all arrays that share it."""

    key: Any  # the structure object (`ArrayNode.structure_key`), kept alive so its id stays unique
    plan: ArrayPlan | None  # the fast path's plan (for a stand-in name), or None: zarr-python reads it
    fallback_reason: str
    chunks: ChunkSizes  # encoding["chunks"]: the inner chunks, as xarray's zarr backend reports them
    shards: ChunkSizes | None  # encoding["shards"]
    outer: ChunkSizes  # a stored object's extent: one dask chunk each
    objects: int
    codecs: dict[str, Any]

    @classmethod
    def of(cls, node: ArrayNode) -> Structure:
        meta = node.metadata
        shape = tuple(int(s) for s in meta.shape)
        plan: ArrayPlan | None = None
        reason = ""
        chunks: ChunkSizes
        shards: ChunkSizes | None
        try:
            plan = plan_array(node.name, node.path, meta, node.document)
            chunks, shards = plan.inner_chunks, plan.outer_chunks if plan.shard is not None else None
        except Unsupported as why:
            reason = str(why)
            chunks, shards = zarr_chunk_sizes(meta)
        outer = shards if shards is not None else chunks
        return cls(node.structure_key, plan, reason, chunks, shards, outer, _object_count(shape, outer),
                   codec_encoding(meta))


def codec_encoding(meta: Any) -> dict[str, Any]:
    """The ``compressors``/``filters``/``serializer`` zarr-python's Array reports, from metadata alone."""
    if meta.zarr_format == 2:
        return {"compressors": (meta.compressor,) if meta.compressor is not None else (),
                "filters": meta.filters or ()}
    from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec

    inner = meta.inner_codecs
    return {
        "compressors": tuple(c for c in inner if isinstance(c, BytesBytesCodec)),
        "filters": tuple(c for c in inner if isinstance(c, ArrayArrayCodec)),
        "serializer": next(c for c in inner if isinstance(c, ArrayBytesCodec)),
    }


def zarr_chunk_sizes(meta: Any) -> tuple[ChunkSizes, ChunkSizes | None]:
    """(chunks, shards) as xarray's zarr backend reports them, from zarr-python's metadata: a rectilinear
    dimension as the sizes of its chunks, without listing the chunks of a regular one."""
    try:
        chunks: ChunkSizes = tuple(int(c) for c in meta.chunks)
    except NotImplementedError:  # an unsharded rectilinear grid: the chunks are the stored objects
        chunks = _storage_chunk_sizes(meta)
    try:
        shards = meta.shards
    except NotImplementedError:  # a sharded rectilinear grid
        return chunks, _storage_chunk_sizes(meta)
    return chunks, None if shards is None else tuple(int(s) for s in shards)


def _storage_chunk_sizes(meta: Any) -> ChunkSizes:
    """The stored objects' sizes of a rectilinear grid (``RectilinearChunkGridMetadata.chunk_shapes``)."""
    specs = meta.chunk_grid.chunk_shapes
    return tuple(_dimension_sizes(spec, int(n)) for spec, n in zip(specs, meta.shape, strict=True))


def _dimension_sizes(spec: int | tuple[int, ...], extent: int) -> int | tuple[int, ...]:
    """One dimension of a rectilinear grid (a chunk size, or each chunk's edge), clipped to the array."""
    if isinstance(spec, int):  # regular along this dimension: (c, c, ..., rest) compacts to c
        return min(spec, extent) if extent else (0,)
    sizes, start = [], 0
    for edge in spec:
        if start >= extent:
            break
        sizes.append(min(int(edge), extent - start))
        start += int(edge)
    return _compact(tuple(sizes))


def _compact(sizes: tuple[int, ...]) -> int | tuple[int, ...]:
    """One int where the sizes are those of a regular grid, as xarray's zarr backend reports them."""
    if not sizes:
        return (0,)
    if len(set(sizes[:-1])) <= 1 and sizes[-1] <= sizes[0]:
        return sizes[0]
    return sizes


def _object_count(shape: tuple[int, ...], outer: ChunkSizes) -> int:
    counts = (
        (len(c) if n else 0) if isinstance(c, tuple) else (-(-n // c) if c else 0)
        for n, c in zip(shape, outer, strict=True)
    )
    return math.prod(counts)


def grouped_task_chunks(shape: tuple[int, ...], dtype: np.dtype[Any], outer: ChunkSizes) -> ChunkSizes:
    """Groups of small stored objects (``outer`` each), one dask task each (config task_bytes): with one task
    per 0.8 MB chunk, dask's and xarray's per-task cost kept chunks={} at 0.24x of a direct read."""
    if not dtype.isnative:
        # dask's concatenate makes a big-endian result native, so the computed dtype depends on the number
        # of blocks: keep engine="zarr"'s blocks for the same answer
        return outer
    if dtype.kind in "OT" or dtype.itemsize == 0:
        return outer  # variable-length elements: no size to group by
    # the real element size, so a task holds about task_bytes whatever the dtype; variables that share
    # stored objects then share dask chunks through `align_task_chunks`
    return task_chunks(shape, outer, dtype.itemsize, get_config().task_bytes)


def align_task_chunks(variables: Mapping[str, Variable], dropped: set[str]) -> None:
    """One task size along a dimension for every variable stored in the same objects along it: the smallest
    of their groupings. Grouped alone, a (time, x) variable and a (time,) one whose objects both hold 10 time
    steps would get different time chunks (each fills its own 128 MiB), and xarray's ``Dataset.chunks`` would
    refuse the Dataset where engine="zarr"'s chunks (the stored ones) agree. Each size is a whole number of
    stored objects or the whole dimension, so the smallest is too."""
    smallest: dict[tuple[Any, int], int] = {}
    plans = []
    for name, var in variables.items():
        if name in dropped:
            continue  # xarray drops it: it decides nothing
        preferred = var.encoding.get("preferred_chunks")
        stored = var.encoding.get("shards") or var.encoding.get("chunks")
        if not preferred or stored is None or len(stored) != len(var.dims):
            continue
        keys = []
        for dim, size in zip(var.dims, stored, strict=True):
            task = preferred.get(dim)
            if isinstance(size, int) and isinstance(task, int):
                smallest[dim, size] = min(smallest.get((dim, size), task), task)
                keys.append((dim, size))
        plans.append((var, keys))
    for var, keys in plans:
        aligned = dict(var.encoding["preferred_chunks"])
        for dim, size in keys:
            aligned[dim] = smallest[dim, size]
        if aligned != var.encoding["preferred_chunks"]:
            var.encoding = {**var.encoding, "preferred_chunks": aligned}


def dask_name(token: str, name: str) -> str:
    """The dask name of a variable's device array: unique to the open (`ZarrmaxStore.token`)."""
    return f"zarrmax-{token}-{name}"


class _DaskSource:
    """NumPy-style slicing over a lazy array, for dask.array.from_array with a device meta."""

    def __init__(self, wrapper: ZarrmaxArray | FallbackArray) -> None:
        self.wrapper = wrapper
        self.shape = wrapper.shape
        self.dtype = wrapper.dtype
        self.ndim = len(wrapper.shape)

    def __getitem__(self, key: tuple[Any, ...]) -> Any:
        key = key if isinstance(key, tuple) else (key,)
        key = key + (slice(None),) * (self.ndim - len(key))
        return self.wrapper[indexing.BasicIndexer(key)]


def device_dask_array(wrapper: ZarrmaxArray | FallbackArray, chunks: ChunkSizes, name: str) -> Any:
    """A dask array whose blocks (one per shard) and meta live on the CUDA device.

    Built here because xarray gives lazily indexed backend arrays a NumPy meta when it chunks them.
    """
    import cupy
    import dask.array as da

    meta = cupy.empty((0,) * len(wrapper.shape), dtype=wrapper.dtype)
    return da.from_array(_DaskSource(wrapper), chunks=chunks, name=name, meta=meta, asarray=False, fancy=False)
