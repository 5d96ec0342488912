"""Everything a task needs to read one array, from its zarr metadata: small, frozen, picklable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .decode import ChunkCodec, Unsupported, output_dtype, plan_v2_chunk, plan_v3_chunk
from .shard import ShardFormat, plan_shard_format


@dataclass(frozen=True, slots=True)
class KeyEncoding:
    """Chunk keys: v3 default (``c/0/1``) or v2 style (``0.1``), relative to the array's path."""

    path: str
    separator: str
    v2_style: bool

    def key(self, coords: tuple[int, ...]) -> str:
        if self.v2_style:
            name = self.separator.join(map(str, coords)) if coords else "0"
        else:
            name = "c" + "".join(self.separator + str(i) for i in coords)
        return f"{self.path}/{name}" if self.path else name


@dataclass(frozen=True, slots=True)
class ArrayPlan:
    """The fast path for one array.

    ``outer_chunks`` is the stored object's shape (the shard shape, or the chunk shape when unsharded);
    ``codec`` decodes one inner chunk; ``shard`` is None when the array is not sharded.
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fill_value: Any
    outer_chunks: tuple[int, ...]
    codec: ChunkCodec
    shard: ShardFormat | None
    keys: KeyEncoding

    @property
    def inner_chunks(self) -> tuple[int, ...]:
        return self.codec.chunk_shape

    def for_array(self, name: str, path: str) -> ArrayPlan:
        """This plan for another array of the same structure (everything but the name and key prefix)."""
        keys = KeyEncoding(path, self.keys.separator, self.keys.v2_style)
        return ArrayPlan(name, self.shape, self.dtype, self.fill_value, self.outer_chunks, self.codec, self.shard, keys)


def _fill(metadata: Any, dtype: np.dtype) -> Any:
    value = metadata.fill_value
    if value is None:  # v2 "null": zarr-python fills with zeros
        return np.zeros((), dtype=dtype)[()]
    return np.asarray(value, dtype=dtype)[()] if dtype.kind != "b" else np.bool_(value)


def plan_array(name: str, path: str, metadata: Any) -> ArrayPlan:
    """Build the plan, or raise `Unsupported` saying why the array must go through zarr-python."""
    dtype = output_dtype(metadata)
    shape = tuple(int(s) for s in metadata.shape)
    if metadata.zarr_format == 2:
        codec = plan_v2_chunk(metadata)
        keys = KeyEncoding(path, metadata.dimension_separator or ".", True)
        return ArrayPlan(name, shape, dtype, _fill(metadata, dtype), codec.chunk_shape, codec, None, keys)

    if getattr(metadata, "storage_transformers", ()):
        raise Unsupported("storage transformers are not on the fast path")
    grid = metadata.chunk_grid
    if type(grid).__name__ not in ("RegularChunkGrid", "RegularChunkGridMetadata"):
        raise Unsupported(f"chunk grid {type(grid).__name__} is not on the fast path")
    outer = tuple(int(c) for c in grid.chunk_shape)
    enc = metadata.chunk_key_encoding
    kind = type(enc).__name__
    if kind not in ("DefaultChunkKeyEncoding", "V2ChunkKeyEncoding"):
        raise Unsupported(f"chunk key encoding {kind} is not on the fast path")
    keys = KeyEncoding(path, str(enc.separator), kind == "V2ChunkKeyEncoding")
    codecs = tuple(metadata.codecs)
    shard: ShardFormat | None = None
    if len(codecs) == 1 and type(codecs[0]).__name__ == "ShardingCodec":
        sharding = codecs[0]
        shard = plan_shard_format(sharding, outer)
        inner = tuple(int(c) for c in sharding.chunk_shape)
        codec = plan_v3_chunk(tuple(sharding.codecs), inner, dtype)
    elif any(type(c).__name__ == "ShardingCodec" for c in codecs):
        raise Unsupported("sharding combined with other codecs is not on the fast path")
    else:
        codec = plan_v3_chunk(codecs, outer, dtype)
    return ArrayPlan(name, shape, dtype, _fill(metadata, dtype), outer, codec, shard, keys)
