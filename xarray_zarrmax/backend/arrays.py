"""The lazy arrays xarray indexes: `ZarrmaxArray` on the fast path, `FallbackArray` read by zarr-python.

Both are xarray ``BackendArray`` objects: xarray hands them explicit indexers (basic, outer, vectorized) through
``explicit_indexing_adapter`` and, for ``load_async``, ``async_getitem``. A read lands in NumPy on the CPU or,
with ``device=``, on a `Device` (CuPy for "cuda").
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
from xarray.backends import BackendArray
from xarray.core import indexing

from xarray_zarrmax.codecs.spec import output_dtype
from xarray_zarrmax.config import get_config
from xarray_zarrmax.core.geometry import apply_outer, normalize_selection, vectorized_points
from xarray_zarrmax.core.loop import on_io_loop, run_sync
from xarray_zarrmax.metadata.nodes import ArrayNode
from xarray_zarrmax.read.fetch import read_points, read_selection, read_selection_async
from xarray_zarrmax.read.plan import ArrayPlan
from xarray_zarrmax.storage.abc import ByteSource
from xarray_zarrmax.xarray_compat import async_explicit_indexing_adapter

DeviceSpec = Any  # None (CPU, NumPy), "cuda", or a Device instance (the NumPy stand-in in tests)


class ZarrmaxArray(BackendArray):
    """A lazy array on the fast path. Thread-safe (no mutable state) and small to pickle.

    ``device`` None reads into NumPy on the CPU; a `Device` reads onto it (CuPy for "cuda").
    """

    __slots__ = ("plan", "source", "token", "shape", "dtype", "device")

    def __init__(self, plan: ArrayPlan, source: ByteSource, token: str, device: DeviceSpec = None) -> None:
        self.plan = plan
        self.source = source
        self.token = token
        self.shape = plan.shape
        self.dtype = plan.dtype
        self.device = device

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        if isinstance(key, indexing.VectorizedIndexer):
            return self._vindex(key.tuple)
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.OUTER, self._getitem)

    def _getitem(self, key: tuple[Any, ...]) -> Any:
        axes, post = normalize_selection(key, self.shape)
        if self.device is None:
            return apply_outer(read_selection(self.plan, self.source, axes, self.token), post)
        from xarray_zarrmax.gpu.read import read_selection_on

        device = resolve_device(self.device)
        return apply_outer(read_selection_on(device, self.plan, self.source, axes, self.token), post)

    async def async_getitem(self, key: indexing.ExplicitIndexer) -> Any:
        """What ``load_async`` awaits: remote reads run as coroutines on the package's I/O loop, so a
        ``Dataset.load_async()`` sends every variable's requests together under the one budget; local, device
        and pointwise reads run the synchronous path on a worker thread."""
        if self.device is not None or self.source.is_local or isinstance(key, indexing.VectorizedIndexer):
            return await asyncio.to_thread(self.__getitem__, key)
        return await on_io_loop(async_explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.OUTER, self._async_outer))

    async def _async_outer(self, key: tuple[Any, ...]) -> np.ndarray:
        axes, post = normalize_selection(key, self.shape)
        values = await read_selection_async(self.plan, self.source, axes, self.token,
                                            decode_on_pool=get_config().threads > 1)
        return apply_outer(values, post)

    def _vindex(self, key: tuple[Any, ...]) -> Any:
        """Pointwise selection: only the chunks holding the points are read, only the result is allocated."""
        points, shape = vectorized_points(key, self.shape)
        values = read_points(self.plan, self.source, points, self.token).reshape(shape)
        if self.device is None:
            return values
        return _to_device(resolve_device(self.device), values)


def _to_device(device: Any, host: np.ndarray) -> Any:
    """One copy of a host result onto the device, on the thread's stream."""
    stream = device.stream()
    out = device.to_device(np.ascontiguousarray(host), stream)
    device.publish(stream)
    return out


def resolve_device(spec: DeviceSpec) -> Any:
    from xarray_zarrmax.gpu.device import Device
    from xarray_zarrmax.gpu.select import get_device

    return spec if isinstance(spec, Device) else get_device(spec)


def _is_device(obj: Any) -> bool:
    from xarray_zarrmax.gpu.device import Device

    return isinstance(obj, Device)


def parse_device(device: DeviceSpec) -> DeviceSpec:
    """``device=`` as the stores take it: None for the CPU."""
    if device == "cpu":
        return None
    if device == "cuda":
        resolve_device(device)  # fail now, with the extra to install, rather than in the first task
    elif not _is_device(device):
        raise ValueError(f"device must be 'cpu' or 'cuda'. Got {device!r} instead.")
    return device


class FallbackArray(BackendArray):
    """An array outside the fast path, read by zarr-python: slower, never a different answer.

    Indexing is zarr-python's own, as in xarray's zarr backend: basic, outer (``oindex``) and vectorized
    (``vindex``) selections go to zarr as they are, so a few points of a large array read only their chunks.
    """

    def __init__(self, node: ArrayNode, source: ByteSource, reason: str, device: DeviceSpec = None) -> None:
        self.node = node
        self.source = source
        self.reason = reason
        self.device = device
        self.shape = tuple(int(s) for s in node.metadata.shape)
        self.dtype = output_dtype(node.metadata)
        self._array: Any = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"node": self.node, "source": self.source, "reason": self.reason, "device": self.device}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["node"], state["source"], state["reason"], state["device"])  # type: ignore[misc]

    def zarr_array(self) -> Any:
        with self._lock:
            if self._array is None:
                self._array = zarr_async_array(self.node, self.source)
            return self._array

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        kind = _indexer_kind(key)
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.VECTORIZED, lambda k: self._getitem(k, kind)
        )

    async def async_getitem(self, key: indexing.ExplicitIndexer) -> Any:
        """What ``load_async`` awaits: zarr-python's async read, on the package's I/O loop."""
        if self.device is not None:
            return await asyncio.to_thread(self.__getitem__, key)
        kind = _indexer_kind(key)

        async def read(k: tuple[Any, ...]) -> np.ndarray:
            return await self.read_async(k, kind)

        return await on_io_loop(async_explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.VECTORIZED, read))

    async def read_async(self, key: tuple[Any, ...], kind: str = "basic") -> np.ndarray:
        """zarr-python's answer to a basic, ``oindex`` or ``vindex`` selection, as a NumPy array of `dtype`."""
        if kind == "basic":
            kind = _zarr_selection_kind(key, len(self.shape))
        failure: BaseException | None = None
        try:
            array = self.zarr_array()
            if kind == "oindex":
                value = await array.oindex.getitem(key)
            elif kind == "vindex":
                value = await array.vindex.getitem(key)
            else:
                value = await array.getitem(key)
        except Exception as err:
            # The one place zarr-python's exceptions leave FallbackArray: their text may carry store URLs with
            # credentials. Raised after the except clause, so no chain keeps the original.
            failure = self.source.scrubbed(err)
        if failure is not None:
            raise failure
        # What engine="zarr" does with zarr's answer: a Python str from a StringDType array keeps that dtype
        # (np.asarray alone would make it "<U3"); a NumPy scalar (np.str_, np.bytes_) becomes an array of its own
        # itemsize, so a 0-d "<U5" array holding "ab" reads as "<U2", as it does there.
        if self.dtype.kind == "T" and isinstance(value, str):
            return np.asarray(value, dtype=self.dtype)
        return np.asarray(value)

    def _getitem(self, key: tuple[Any, ...], kind: str = "basic") -> Any:
        host = run_sync(self.read_async(key, kind))
        if self.device is None:
            return host
        return _to_device(resolve_device(self.device), host)  # decoded on the CPU by zarr-python


def _indexer_kind(key: indexing.ExplicitIndexer) -> str:
    """How zarr selects for an xarray indexer: with VECTORIZED support xarray hands the key over undecomposed,
    so its type says it."""
    if isinstance(key, indexing.OuterIndexer):
        return "oindex"
    return "vindex" if isinstance(key, indexing.VectorizedIndexer) else "basic"


def _zarr_selection_kind(key: tuple[Any, ...], ndim: int) -> str:
    """How zarr's ``Array.__getitem__`` (what engine="zarr" calls) reads a basic selection: integers count as
    orthogonal there and come back as a 0-d array of the array's dtype, where the async ``getitem`` would give
    a scalar (which NumPy narrows: "<U1" for "b" of a "<U5" array)."""
    from zarr.core.indexing import is_pure_fancy_indexing, is_pure_orthogonal_indexing

    if is_pure_fancy_indexing(key, ndim):
        return "vindex"
    if is_pure_orthogonal_indexing(key, ndim):
        return "oindex"
    return "basic"


def zarr_async_array(node: ArrayNode, source: ByteSource) -> Any:
    """zarr-python's AsyncArray for a node, built from metadata we already hold (no request)."""
    from zarr.core.array import AsyncArray
    from zarr.storage import StorePath

    return AsyncArray(metadata=node.metadata, store_path=StorePath(source.zarr_store(), node.path))
