"""Encoding (and, for merges, decoding) of one stored object with zarr-python's own codecs, synchronously.

zarr-python >= 3.4 runs its codec chains without an event loop (``ChunkTransform``). Using them means every
object we write is byte-for-byte what zarr-python writes for the same array: the sharding codec lays out
the inner chunks and the shard index (with its crc32c), elides empty inner chunks, and any codec zarr knows
works. The compressors (zstd, blosc, gzip) release the GIL, so shards encode in parallel on dask's threads.
The common codecs (bytes, zstd, sharding with zarr's default index) are encoded by `shard_encode` instead,
to the same bytes, without zarr's per-chunk buffer copies and with the chunks of a shard in parallel.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from xarray_zarrmax.codecs.encode import PlainEncoder, ShardEncoder, plain_encoder, shard_encoder
from xarray_zarrmax.core.bytes import Encoded
from xarray_zarrmax.errors import MetadataError


@dataclass(frozen=True)
class ObjectCodec:
    """How to turn the full-shape array of one stored object (a shard, or a chunk when unsharded) into bytes
    and back. Picklable: it carries the array's metadata and rebuilds zarr's transform where it runs."""

    metadata: Any  # zarr.core.metadata.v3.ArrayV3Metadata
    write_empty_chunks: bool

    def __reduce__(self) -> tuple[Any, ...]:
        return (ObjectCodec, (self.metadata, self.write_empty_chunks))  # not the cached transform

    @property
    def object_shape(self) -> tuple[int, ...]:
        """The shape of the array each stored object holds (a shard's, or a chunk's)."""
        return object_shape(self.metadata)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.metadata.dtype.to_native_dtype())

    @cached_property
    def fill_value(self) -> Any:
        return self.metadata.fill_value

    def spec(self, write_empty_chunks: bool | None = None) -> Any:
        from zarr.core.array_spec import ArrayConfig, ArraySpec
        from zarr.core.buffer import default_buffer_prototype

        empty = self.write_empty_chunks if write_empty_chunks is None else write_empty_chunks
        return ArraySpec(shape=self.object_shape, dtype=self.metadata.dtype, fill_value=self.metadata.fill_value,
                         config=ArrayConfig("C", empty), prototype=default_buffer_prototype())

    @cached_property
    def _transform(self) -> Any:
        from zarr.core.chunk_utils import ChunkTransform, evolve_codecs

        return ChunkTransform(codecs=evolve_codecs(self.metadata.codecs, self.spec()))

    def empty(self) -> np.ndarray:
        """A full-shape array of the fill value: what an object holds where nothing was written."""
        return np.full(self.object_shape, self.fill_value, dtype=self.dtype)

    @cached_property
    def _fast(self) -> PlainEncoder | ShardEncoder | None:
        """Our own encoder where the codecs are the common ones (`xarray_zarrmax.codecs.encode`): the same
        bytes as zarr's chain, without its buffer copies, the chunks of a shard in parallel."""
        return (plain_encoder(self.metadata.codecs, self.dtype)
                or shard_encoder(self.metadata.codecs, self.dtype, self.object_shape))

    def encode(self, values: np.ndarray, *, keep_empty: bool = False,
               inside: tuple[int, ...] | None = None, pooled: bool = False) -> Encoded | None:
        """The stored bytes of an object holding ``values`` (full object shape; a shard's in parts), or None when, with
        ``write_empty_chunks=False``, it is all fill value and must not be stored. ``keep_empty`` stores it
        even then (a merge that cleared an object replaces it conditionally rather than deleting it).
        ``inside``: the object's elements inside the array per dimension (an edge shard's inner chunks wholly
        outside it are never stored, as zarr leaves them out). ``pooled``: large chunks in pooled buffers, for a
        sink that gives them back once written (`shard_encode.PlainEncoder.encode`)."""
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.chunk_utils import chunk_is_empty

        spec = self.spec(True if keep_empty else None)
        array = np.ascontiguousarray(values, dtype=self.dtype)
        nd = default_buffer_prototype().nd_buffer.from_numpy_array(array)
        if chunk_is_empty(nd, spec):  # zarr's own rule for what is not stored
            return None
        fast = self._fast
        if isinstance(fast, PlainEncoder):
            return fast.encode(array, pooled=pooled)
        if isinstance(fast, ShardEncoder):
            rule = None if inside is None else np.where(fast.outside(inside), 0, -1).astype(np.int8)
            return fast.encode(array, self._inner_spec(spec), _pool(), rule=rule, keep_index=keep_empty,
                               pooled=pooled)
        encoded = self._transform.encode_chunk(nd, spec)
        return None if encoded is None else encoded.to_bytes()

    def merge(self, stored: Any, part: np.ndarray, written: tuple[slice, ...], where: str) -> Encoded | None:
        """The bytes replacing ``stored`` (None: nothing was stored) once ``written`` (slices into the object)
        holds ``part``. A shard is merged as zarr's partial shard writes merge (`ShardEncoder.merge`: inner
        chunks not written keep their stored bytes, only partly written ones are decoded). Anything else is
        decoded whole, overlaid and encoded again. An object that existed is never deleted (that could not
        be made conditional and a concurrent writer's data would be lost): with nothing left to store it
        becomes a shard of only its index, or a chunk of fill values, where zarr would delete it."""
        fast = self._fast
        part = np.asarray(part, dtype=self.dtype)
        if isinstance(fast, ShardEncoder):
            return fast.merge(stored, part, written, self._inner_spec(self.spec()), _pool(), where)
        values = self.empty() if stored is None else self.decode(stored)
        values[written] = part
        return self.encode(values, keep_empty=stored is not None)

    def _inner_spec(self, spec: Any) -> Any:
        """The inner chunks' spec, as zarr's ShardingCodec derives it from the shard's."""
        from zarr.core.array_spec import ArraySpec

        fast = self._fast
        assert isinstance(fast, ShardEncoder)
        return ArraySpec(shape=fast.chunk_shape, dtype=spec.dtype, fill_value=spec.fill_value, config=spec.config,
                         prototype=spec.prototype)

    def decode(self, data: Any) -> np.ndarray:
        """The full-shape array a stored object holds (a writable copy)."""
        from zarr.core.buffer import default_buffer_prototype

        buf = default_buffer_prototype().buffer.from_bytes(bytes(memoryview(data).cast("B")))
        out = self._transform.decode_chunk(buf, self.spec()).as_numpy_array()
        return np.array(out, dtype=self.dtype, copy=True)


def _pool() -> Any:
    from xarray_zarrmax.core.loop import decode_pool

    return decode_pool()


def object_shape(metadata: Any) -> tuple[int, ...]:
    """The shape of one stored object of a Zarr v3 array on a regular grid (a shard, or a chunk)."""
    from zarr.core.metadata.v3 import RegularChunkGridMetadata

    if not isinstance(metadata.chunk_grid, RegularChunkGridMetadata):
        raise MetadataError(f"writing is supported for regular chunk grids only. Got {metadata.chunk_grid!r}.")
    return tuple(metadata.chunk_grid.chunk_shape)
