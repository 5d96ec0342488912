"""Hypothesis strategies: random Zarr arrays (shape, chunks, shards, codecs, dtype, endianness, fill value,
missing chunks) and random xarray selections (ints, stepped slices, index arrays)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]
DIMS = ("t", "y", "x", "z")


@dataclass
class ArraySpec:
    zarr_format: int
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    dtype: str
    endian: str  # "little" / "big"
    compressor: str | None
    crc32c: bool
    transpose: bool
    order: str  # v2 only
    fill_value: Any
    missing: list[tuple[int, ...]]  # chunk coordinates left as the fill value (so not stored)
    seed: int

    def data(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        dt = np.dtype(self.dtype)
        n = math.prod(self.shape)
        if dt.kind == "b":
            arr = rng.integers(0, 2, n).astype(bool)
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            arr = rng.integers(max(info.min, -1000), min(info.max, 1000), n, endpoint=True).astype(dt)
        elif dt.kind == "f":
            arr = rng.normal(size=n).astype(dt)
        else:
            arr = (rng.normal(size=n) + 1j * rng.normal(size=n)).astype(dt)
        arr = arr.reshape(self.shape)
        for coords in self.missing:
            region = tuple(slice(c * k, (c + 1) * k) for c, k in zip(coords, self.chunks, strict=True))
            arr[region] = self.fill_value if self.fill_value is not None else 0
        return arr


@st.composite
def array_specs(draw: st.DrawFn, zarr_format: int | None = None) -> ArraySpec:
    fmt = zarr_format or draw(st.sampled_from([3, 3, 2]))
    ndim = draw(st.integers(0, 4))
    max_side = {0: 1, 1: 60, 2: 20, 3: 9, 4: 6}[ndim]
    shape = tuple(draw(st.integers(1, max_side)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, s)) for s in shape)
    shards = None
    if fmt == 3 and draw(st.booleans()):
        shards = tuple(c * draw(st.integers(1, 3)) for c in chunks)
    dtype = draw(st.sampled_from(DTYPES))
    endian = draw(st.sampled_from(["little", "big"]))
    compressors = [None, "zstd", "blosc", "gzip"] + (["zlib"] if fmt == 2 else [])
    compressor = draw(st.sampled_from(compressors))
    crc = fmt == 3 and draw(st.booleans())
    transpose = fmt == 3 and ndim > 1 and draw(st.booleans())
    order = draw(st.sampled_from(["C", "F"])) if fmt == 2 else "C"
    kind = np.dtype(dtype).kind
    if kind == "b":
        fill = draw(st.booleans())
    elif kind in "iu":
        fill = draw(st.integers(0, 100))
    elif fmt == 2 and draw(st.booleans()):
        fill = None
    else:
        fill = draw(st.sampled_from([0.0, 1.5, -7.0, float("nan")]))
    grid = tuple(math.ceil(s / c) for s, c in zip(shape, chunks, strict=True))
    all_chunks = list(np.ndindex(*grid))
    missing = draw(st.lists(st.sampled_from(all_chunks), max_size=min(len(all_chunks), 6), unique=True))
    return ArraySpec(fmt, shape, chunks, shards, dtype, endian, compressor, crc, transpose, order, fill,
                     missing, draw(st.integers(0, 2**31)))


def _v3_codecs(spec: ArraySpec) -> dict[str, Any]:
    from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, TransposeCodec, ZstdCodec

    compressors: list[Any] = []
    if spec.compressor == "zstd":
        compressors.append(ZstdCodec(level=1))
    elif spec.compressor == "blosc":
        compressors.append(BloscCodec(cname="lz4", clevel=3))
    elif spec.compressor == "gzip":
        compressors.append(GzipCodec(level=1))
    if spec.crc32c:
        compressors.append(Crc32cCodec())
    filters = [TransposeCodec(order=tuple(reversed(range(len(spec.shape)))))] if spec.transpose else []
    endian = spec.endian if np.dtype(spec.dtype).itemsize > 1 else None
    return {"compressors": compressors or None, "filters": filters or None,
            "serializer": BytesCodec(endian=endian)}


def _v2_codecs(spec: ArraySpec) -> dict[str, Any]:
    import numcodecs

    comp = {None: None, "zstd": numcodecs.Zstd(level=1), "blosc": numcodecs.Blosc(cname="lz4"),
            "gzip": numcodecs.GZip(level=1), "zlib": numcodecs.Zlib(level=1)}[spec.compressor]
    return {"compressors": comp, "filters": None, "order": spec.order}


def write_array(store: Any, spec: ArraySpec, name: str = "v") -> np.ndarray:
    """Write ``spec`` as variable ``name`` of a group at the store root; return the data written."""
    import zarr

    data = spec.data()
    dims = list(DIMS[: len(spec.shape)])
    group = zarr.open_group(store, mode="a", zarr_format=spec.zarr_format)
    dtype = np.dtype(spec.dtype)
    if spec.zarr_format == 2 and dtype.itemsize > 1:
        dtype = dtype.newbyteorder(">" if spec.endian == "big" else "<")
    kwargs = _v3_codecs(spec) if spec.zarr_format == 3 else _v2_codecs(spec)
    extra: dict[str, Any] = {"dimension_names": dims} if spec.zarr_format == 3 else {
        "attributes": {"_ARRAY_DIMENSIONS": dims}}
    arr = group.create_array(name, shape=spec.shape, chunks=spec.chunks, shards=spec.shards, dtype=dtype,
                             fill_value=spec.fill_value, **kwargs, **extra)
    arr[...] = data.astype(dtype)
    return data


@st.composite
def selections(draw: st.DrawFn, shape: tuple[int, ...]) -> dict[str, Any]:
    """An ``isel`` argument: per dimension nothing, an int, a stepped slice or an index array."""
    sel: dict[str, Any] = {}
    for dim, n in zip(DIMS, shape, strict=False):
        kind = draw(st.sampled_from(["all", "int", "slice", "slice", "array"]))
        if kind == "int":
            sel[dim] = draw(st.integers(-n, n - 1))
        elif kind == "slice":
            start = draw(st.one_of(st.none(), st.integers(-n, n)))
            stop = draw(st.one_of(st.none(), st.integers(-n, n)))
            step = draw(st.one_of(st.none(), st.integers(1, 4), st.integers(-3, -1)))
            if step is not None and step < 0 and len(range(*slice(start, stop, step).indices(n))) == 0:
                step = None  # xarray itself fails on empty reversed slices, whatever the engine
            sel[dim] = slice(start, stop, step)
        elif kind == "array":
            sel[dim] = np.array(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=min(n, 5))))
    return sel
