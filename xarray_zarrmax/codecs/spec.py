"""The fast path's whitelist: which stored metadata documents we decode exactly as zarr-python does.

`plan_v3_chunk` and `plan_v2_chunk` turn an array's stored metadata document into a small picklable
`ChunkCodec`, or raise `Unsupported` saying why the array must fall back to zarr-python. Supported: bytes (either
endianness), transpose, v2 order "F", zstd, blosc, gzip, zlib, crc32c, no compression; every
bool/int/uint/float/complex dtype.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from xarray_zarrmax.codecs.decode import ChunkCodec
from xarray_zarrmax.errors import Unsupported

#: NumPy kinds the fast path decodes: bool, int, uint, float, complex.
FAST_KINDS = "biufc"

# The fast path reads what the document says, checked against a whitelist of exactly the names, configuration
# keys and values decoded here. Anything else, an unknown configuration key included, raises `Unsupported`:
# zarr-python reads that array, so no zarr-python release can change what a document means to us unnoticed.

#: bytes-to-bytes codecs and the configuration keys each may carry (their values do not change decoding:
#: blosc and zstd frames describe themselves).
V3_BYTES_CODECS: Mapping[str, tuple[str, ...]] = {
    "zstd": ("level", "checksum"),
    "blosc": ("cname", "clevel", "shuffle", "typesize", "blocksize"),
    "gzip": ("level",),
    "crc32c": (),
}
V2_COMPRESSORS: Mapping[str, tuple[str, ...]] = {
    "zstd": ("id", "level", "checksum"),
    "blosc": ("id", "cname", "clevel", "shuffle", "blocksize", "typesize"),
    "gzip": ("id", "level"),
    "zlib": ("id", "level"),
}
V3_DATA_TYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64", "complex64", "complex128")


def output_dtype(metadata: Any) -> np.dtype:
    """The NumPy dtype zarr-python returns for the array."""
    return np.dtype(metadata.dtype.to_native_dtype())


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def named_config(entry: Any, allowed: Mapping[str, Sequence[str]], what: str) -> tuple[str, dict[str, Any]]:
    """(name, configuration) of a ``{"name": ..., "configuration": {...}}`` entry whose name is one of
    ``allowed`` and whose configuration keys are among those ``allowed[name]`` lists; else `Unsupported`."""
    if not isinstance(entry, dict) or set(entry) - {"name", "configuration"}:
        raise Unsupported(f"{what} {_short(entry)} is not on the fast path")
    name = entry.get("name")
    if not isinstance(name, str) or name not in allowed:
        raise Unsupported(f"{what} {_short(name)} is not on the fast path")
    config = entry.get("configuration", {})
    if not isinstance(config, dict):
        raise Unsupported(f"{what} {name!r} has a configuration {_short(config)}, not an object")
    unknown = set(config) - set(allowed[name])
    if unknown:
        raise Unsupported(f"{what} {name!r} configuration keys {sorted(unknown)} are not on the fast path")
    return name, config


def codec_name(entry: Any) -> Any:
    return entry.get("name") if isinstance(entry, dict) else None


def chunk_shape_of(value: Any, ndim: int, what: str) -> tuple[int, ...]:
    """A stored chunk shape: ``ndim`` JSON integers >= 1. zarr-python repairs other values (0, true, lists of
    edges), so those arrays are left to it."""
    if not (isinstance(value, list) and len(value) == ndim and all(type(c) is int and c >= 1 for c in value)):
        raise Unsupported(f"{what} {_short(value)} is not on the fast path (expected {ndim} integers >= 1)")
    return tuple(value)


def _check_dtype(dtype: np.dtype) -> None:
    if dtype.kind not in FAST_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise Unsupported(f"data type {dtype} is not on the fast path")


def _permutation(value: Any, ndim: int) -> tuple[int, ...]:
    if not (isinstance(value, list) and all(type(i) is int for i in value) and sorted(value) == list(range(ndim))):
        raise Unsupported(f"transpose order {_short(value)} is not a permutation of {ndim} axes")
    return tuple(value)


def _stored_dtype(dtype: np.dtype, config: dict[str, Any]) -> np.dtype:
    """The element type of the stored bytes, from the ``bytes`` codec's ``endian``."""
    endian = config.get("endian")
    if dtype.itemsize == 1 and endian in (None, "little", "big"):
        return dtype
    if endian not in ("little", "big"):
        raise Unsupported(f"bytes codec endian {_short(endian)} is not on the fast path for {dtype}")
    return dtype.newbyteorder(">" if endian == "big" else "<")


def plan_v3_chunk(codecs: Any, chunk_shape: tuple[int, ...], dtype: np.dtype) -> ChunkCodec:
    """A `ChunkCodec` for a stored v3 codec chain: transposes, ``bytes``, then bytes-to-bytes codecs."""
    _check_dtype(dtype)
    if not isinstance(codecs, list):
        raise Unsupported(f"codecs {_short(codecs)} are not a list")
    order: tuple[int, ...] | None = None
    i = 0
    while i < len(codecs) and codec_name(codecs[i]) == "transpose":
        _, config = named_config(codecs[i], {"transpose": ("order",)}, "codec")
        o = _permutation(config.get("order"), len(chunk_shape))
        order = o if order is None else tuple(order[j] for j in o)
        i += 1
    if i >= len(codecs):
        raise Unsupported("the codecs hold no array-to-bytes codec")
    _, config = named_config(codecs[i], {"bytes": ("endian",)}, "array-to-bytes codec")
    stored = _stored_dtype(dtype, config)
    rest = tuple(named_config(c, V3_BYTES_CODECS, "bytes-to-bytes codec")[0] for c in codecs[i + 1:])
    compressors = [k for k, n in enumerate(rest) if n != "crc32c"]
    if len(compressors) > 1:
        raise Unsupported("more than one compressor in the chain")
    if compressors and "crc32c" in rest[: compressors[0]]:
        raise Unsupported("a crc32c applied before the compressor is not on the fast path")
    if order is not None and order == tuple(range(len(order))):
        order = None
    return ChunkCodec(tuple(chunk_shape), dtype, stored, order, rest)


def _v2_stored_dtype(value: Any, dtype: np.dtype) -> np.dtype:
    """The element type a v2 ``dtype`` string declares; zarr-python must read it as the same type."""
    if not isinstance(value, str):
        raise Unsupported(f"v2 data type {_short(value)} is not on the fast path")
    try:
        stored = np.dtype(value)
    except TypeError:
        raise Unsupported(f"v2 data type {value!r} is not a NumPy type") from None
    _check_dtype(stored)
    if (stored.kind, stored.itemsize) != (dtype.kind, dtype.itemsize):
        raise Unsupported(f"zarr-python reads v2 data type {value!r} as {dtype}")
    return stored


def _v2_compressor(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    cid = value.get("id") if isinstance(value, dict) else None
    if not isinstance(cid, str) or cid not in V2_COMPRESSORS:
        raise Unsupported(f"v2 compressor {_short(cid if cid is not None else value)} is not on the fast path")
    unknown = set(value) - set(V2_COMPRESSORS[cid])
    if unknown:
        raise Unsupported(f"v2 compressor {cid!r} keys {sorted(unknown)} are not on the fast path")
    return (cid,)


def plan_v2_chunk(document: Mapping[str, Any], chunk_shape: tuple[int, ...], dtype: np.dtype) -> ChunkCodec:
    """A `ChunkCodec` for a stored ``.zarray`` document (no filters, one known compressor or none)."""
    stored = _v2_stored_dtype(document.get("dtype"), dtype)
    if document.get("filters") is not None:
        raise Unsupported("v2 filters are not on the fast path")
    chain = _v2_compressor(document.get("compressor"))
    layout = document.get("order")
    if layout not in ("C", "F"):
        raise Unsupported(f"v2 order {_short(layout)} is not on the fast path")
    ndim = len(chunk_shape)
    order = tuple(reversed(range(ndim))) if layout == "F" and ndim > 1 else None
    return ChunkCodec(tuple(chunk_shape), dtype, stored, order, chain)
