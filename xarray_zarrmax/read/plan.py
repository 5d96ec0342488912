"""Everything a task needs to read one array, from its stored metadata document: small, frozen, picklable."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from xarray_zarrmax.codecs.decode import ChunkCodec
from xarray_zarrmax.codecs.sharding import SHARDING_KEYS, ShardFormat, plan_shard_format
from xarray_zarrmax.codecs.spec import (
    V3_DATA_TYPES,
    chunk_shape_of,
    codec_name,
    named_config,
    output_dtype,
    plan_v2_chunk,
    plan_v3_chunk,
)
from xarray_zarrmax.errors import Unsupported


@dataclass(frozen=True, slots=True)
class KeyEncoding:
    """Chunk keys: v3 default (``c/0/1``) or v2 style (``0.1``), relative to the array's path."""

    path: str
    separator: str
    v2_style: bool

    def key(self, coords: tuple[int, ...]) -> str:
        sep = self.separator
        if self.v2_style:
            name = sep.join(map(str, coords)) if coords else "0"
        else:
            name = f"c{sep}{sep.join(map(str, coords))}" if coords else "c"
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


#: the fields of a stored document the fast path reads; any other field sends the array to zarr-python.
V3_FIELDS = frozenset({"zarr_format", "node_type", "data_type", "shape", "chunk_grid", "chunk_key_encoding",
                       "fill_value", "codecs", "attributes", "dimension_names", "storage_transformers"})
# "_NCZARR_ARRAY" is netCDF-C's record of dimensions and storage kind: zarr-python reads the data without it.
V2_FIELDS = frozenset({"zarr_format", "shape", "chunks", "dtype", "compressor", "fill_value", "order", "filters",
                       "dimension_separator", "_NCZARR_ARRAY"})


def plan_array(name: str, path: str, metadata: Any, document: Mapping[str, Any]) -> ArrayPlan:
    """Build the plan, or raise `Unsupported` saying why the array must go through zarr-python.

    What to read is decided from the stored ``document`` (see `spec.named_config`); zarr-python's parse of
    it, ``metadata``, gives the shape, the fill value and the dtype zarr-python returns.
    """
    dtype = output_dtype(metadata)
    shape = tuple(int(s) for s in metadata.shape)
    fields = V2_FIELDS if metadata.zarr_format == 2 else V3_FIELDS
    unknown = set(document) - fields
    if unknown:
        raise Unsupported(f"metadata fields {sorted(unknown)} are not on the fast path")
    if metadata.zarr_format == 2:
        return _plan_v2(name, path, metadata, document, shape, dtype)
    return _plan_v3(name, path, metadata, document, shape, dtype)


def _plan_v2(name: str, path: str, metadata: Any, document: Mapping[str, Any], shape: tuple[int, ...],
             dtype: np.dtype) -> ArrayPlan:
    chunks = chunk_shape_of(document.get("chunks"), len(shape), "chunk shape")
    separator = document.get("dimension_separator", ".")
    if separator not in (".", "/"):
        raise Unsupported(f"dimension separator {separator!r:.80} is not on the fast path")
    codec = plan_v2_chunk(document, chunks, dtype)
    keys = KeyEncoding(path, separator, True)
    return ArrayPlan(name, shape, dtype, _fill(metadata, dtype), chunks, codec, None, keys)


def _plan_v3(name: str, path: str, metadata: Any, document: Mapping[str, Any], shape: tuple[int, ...],
             dtype: np.dtype) -> ArrayPlan:
    if document.get("storage_transformers", []) != []:
        raise Unsupported("storage transformers are not on the fast path")
    data_type = document.get("data_type")
    if not isinstance(data_type, str) or data_type not in V3_DATA_TYPES:
        raise Unsupported(f"data type {data_type!r:.80} is not on the fast path")
    if dtype != np.dtype(data_type):
        raise Unsupported(f"zarr-python reads data type {data_type!r} as {dtype}")
    _, grid = named_config(document.get("chunk_grid"), {"regular": ("chunk_shape",)}, "chunk grid")
    outer = chunk_shape_of(grid.get("chunk_shape"), len(shape), "chunk shape")
    keys = _key_encoding(document.get("chunk_key_encoding"), path)
    codecs = document.get("codecs")
    if not isinstance(codecs, list):
        raise Unsupported(f"codecs {codecs!r:.80} are not a list")
    shard: ShardFormat | None = None
    if [codec_name(c) for c in codecs] == ["sharding_indexed"]:
        _, config = named_config(codecs[0], {"sharding_indexed": SHARDING_KEYS}, "codec")
        shard = plan_shard_format(config, outer)
        inner = tuple(s // n for s, n in zip(outer, shard.chunks_per_shard, strict=True))
        codec = plan_v3_chunk(config.get("codecs"), inner, dtype)
    else:
        codec = plan_v3_chunk(codecs, outer, dtype)  # refuses a sharding codec among others
    return ArrayPlan(name, shape, dtype, _fill(metadata, dtype), outer, codec, shard, keys)


def _key_encoding(entry: Any, path: str) -> KeyEncoding:
    name, config = named_config(entry, {"default": ("separator",), "v2": ("separator",)}, "chunk key encoding")
    separator = config.get("separator", "/" if name == "default" else ".")
    if separator not in ("/", "."):
        raise Unsupported(f"chunk key separator {separator!r:.80} is not on the fast path")
    return KeyEncoding(path, separator, name == "v2")
