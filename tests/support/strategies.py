"""Hypothesis strategies for equivalence tests against zarr-python.

- `array_specs`: one Zarr array (shape, chunks, shards and their index layout, codecs, dtype, endianness, fill
  value, missing chunks); dtypes cover the fast path (bool, ints, floats, complex) and what falls back to
  zarr-python (strings, bytes, raw datetime64/timedelta64), plus datetimes CF-encoded as xarray encodes them.
- `group_specs`: several variables and index coordinates in one group, optionally nested and consolidated.
- `selections`, `pointwise`: ``isel`` arguments (ints, stepped slices, index, negative and boolean arrays;
  vectorized DataArray indexers).
- `edits`: rewrites of an array between two reads (values over a region, an object deleted or added).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

NUMERIC_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                  "float16", "float32", "float64", "complex64", "complex128"]
TEXT_DTYPES = ["str", "S6", "U5"]  # variable-length UTF-8, null-terminated bytes, fixed-length UTF-32
TIME_DTYPES = ["datetime64[ns]", "datetime64[s]", "timedelta64[ms]"]  # raw NumPy types, stored by zarr
CF_DATETIME = "cf-datetime"  # datetime64[ns] values that xarray's CF coder turns into numbers plus units
DIMS = ("t", "y", "x", "z")

# Units xarray writes for datetimes (it picks finer ones when values need them, or encodes as floats).
CF_UNITS = ["seconds since 1970-01-01", "days since 2000-01-01", "hours since 1999-12-31 12:00:00",
            "milliseconds since 2020-02-29T06:00:00", "minutes since 1900-01-01"]
CF_CALENDARS = ["proleptic_gregorian", "standard", "gregorian"]
# Index coordinates: dtypes pandas builds an index from (not float16), strings and times included.
INDEX_DTYPES = ["int32", "int64", "uint16", "float32", "float64", "str", "datetime64[ns]", CF_DATETIME]


@dataclass(frozen=True)
class ShardIndex:
    """How a shard stores its index: at the start or end, which byte order, with or without crc32c."""

    location: str = "end"
    endian: str = "little"
    checksums: int = 1  # crc32c codecs after the bytes codec: zarr's default is 1; 2 is legal, off the fast path

    def codecs(self) -> list[Any]:
        from zarr.codecs import BytesCodec, Crc32cCodec

        return [BytesCodec(endian=self.endian)] + [Crc32cCodec() for _ in range(self.checksums)]


@dataclass(frozen=True)
class CFTime:
    """The encoding of a CF datetime variable: what a user sets in ``encoding`` before ``to_zarr``."""

    units: str
    calendar: str
    dtype: str  # "int64" or "float64"
    resolution: str  # of the values: "D", "h", "s" or "ms"


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
    dims: tuple[str, ...] = ()
    shard_index: ShardIndex = field(default_factory=ShardIndex)
    cf: CFTime | None = None  # set when dtype is CF_DATETIME

    def __post_init__(self) -> None:
        if not self.dims:
            self.dims = DIMS[: len(self.shape)]

    @property
    def outer(self) -> tuple[int, ...]:
        """The shape of one stored object: the shard, or the chunk when unsharded."""
        return self.shards or self.chunks

    def outer_grid(self) -> list[tuple[int, ...]]:
        return list(np.ndindex(*grid(self.shape, self.outer)))

    def stored(self) -> Stored:
        """The values, zarr dtype, fill value and attributes written to the store."""
        rng = np.random.default_rng(self.seed)
        if self.cf is not None:
            stored = _cf_encode(self, random_values(CF_DATETIME, self.shape, rng, self.cf.resolution))
        else:
            stored = Stored(random_values(self.dtype, self.shape, rng), storage_dtype(self), self.fill_value, {})
        for coords in self.missing:
            stored.values[chunk_region(coords, self.chunks)] = stored.fill_for_values()
        return stored


@dataclass
class Stored:
    values: np.ndarray
    dtype: Any  # what zarr's create_array is given
    fill_value: Any
    attributes: dict[str, Any]

    def fill_for_values(self) -> Any:
        """What to put where a chunk is to be left unwritten (zarr-python skips chunks equal to the fill)."""
        if self.fill_value is not None:
            return self.fill_value
        return "" if self.values.dtype == object else np.zeros((), self.values.dtype)[()]


def grid(shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.ceil(s / c) for s, c in zip(shape, chunks, strict=True))


def chunk_region(coords: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(c * k, (c + 1) * k) for c, k in zip(coords, chunks, strict=True))


def storage_dtype(spec: ArraySpec) -> Any:
    if spec.dtype == "str":
        return "str"
    dtype = np.dtype(spec.dtype)
    if spec.zarr_format == 2 and dtype.itemsize > 1 and dtype.kind != "S":
        dtype = dtype.newbyteorder(">" if spec.endian == "big" else "<")
    return dtype


# -- values --------------------------------------------------------------------------------------------------

_TEXT = "ab Z09_.é漢"


def random_values(dtype: str, shape: tuple[int, ...], rng: np.random.Generator, resolution: str = "s") -> np.ndarray:
    """Random values of ``dtype`` with its awkward ones mixed in: integer extremes, NaN and infinities, empty
    strings, NaT."""
    n = math.prod(shape)
    special = rng.random(n) < 0.15  # where to put the dtype's awkward values
    if dtype in ("str", "U5"):
        width = 5 if dtype == "U5" else 8
        arr = np.array(["".join(rng.choice(list(_TEXT), rng.integers(0, width + 1))) for _ in range(n)],
                       dtype=object if dtype == "str" else dtype)
    elif dtype == "S6":
        arr = np.array([bytes(rng.choice(list(b"abz019"), rng.integers(0, 7)).tolist()) for _ in range(n)],
                       dtype="S6")
    elif dtype == CF_DATETIME:
        steps = rng.integers(-10**4, 10**4, n)  # days: within the years datetime64[ns] holds
        arr = np.datetime64("2000-01-01", "ns") + steps * np.timedelta64(1, resolution)
        special[:1] = False  # xarray's CF encoder fails on all-NaT values given units
        arr[special] = not_a_time(arr.dtype)
    elif dtype.startswith(("datetime64", "timedelta64")):
        dt = np.dtype(dtype)
        arr = rng.integers(-10**9, 10**9, n).astype(dt)
        arr[special] = not_a_time(dt)
    else:
        dt = np.dtype(dtype)
        if dt.kind == "b":
            arr = rng.integers(0, 2, n).astype(bool)
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            arr = rng.integers(max(info.min, -1000), min(info.max, 1000), n, endpoint=True).astype(dt)
            arr[special] = rng.choice(np.array([info.min, info.max, 0], dtype=dt), int(special.sum()))
        elif dt.kind == "f":
            arr = rng.normal(size=n).astype(dt)
            arr[special] = rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0], dtype=dt), int(special.sum()))
        else:
            arr = (rng.normal(size=n) + 1j * rng.normal(size=n)).astype(dt)
            arr[special] = complex(np.nan, 1.0)
    return arr.reshape(shape)


def not_a_time(dtype: np.dtype) -> Any:
    return np.array("NaT", dtype=dtype)[()]


def _cf_encode(spec: ArraySpec, values: np.ndarray) -> Stored:
    """Encode datetimes with xarray's own CF coder, then place ``_FillValue`` as xarray's zarr writer does: the
    zarr fill value in Zarr v2, an encoded attribute in v3."""
    import xarray as xr
    from xarray.backends.zarr import FillValueCoder

    assert spec.cf is not None
    cf = spec.cf
    variable = xr.Variable(spec.dims, values, encoding={"units": cf.units, "calendar": cf.calendar,
                                                        "dtype": cf.dtype})
    with warnings.catch_warnings():  # xarray says when it picks finer units than asked for: expected here
        warnings.filterwarnings("ignore", "Times can't be serialized faithfully", UserWarning)
        encoded = xr.conventions.encode_cf_variable(variable, name="v")
    attrs = dict(encoded.attrs)
    fill_attr = attrs.pop("_FillValue", None)
    dtype = np.dtype(encoded.dtype)
    if spec.zarr_format == 2:
        fill = fill_attr
        dtype = dtype.newbyteorder(">" if spec.endian == "big" else "<")
    else:  # xarray leaves the zarr fill value at zarr's default, NaN for floats
        fill = np.nan if dtype.kind == "f" else 0
        if fill_attr is not None:
            attrs["_FillValue"] = FillValueCoder.encode(fill_attr, dtype)
    return Stored(np.array(encoded.values), dtype, fill, attrs)


# -- arrays --------------------------------------------------------------------------------------------------


def _integer_fills(dtype: np.dtype) -> st.SearchStrategy[int]:
    info = np.iinfo(dtype)
    edges = sorted({int(info.min), int(info.max), 0, int(info.min) + 1, int(info.max) - 1})
    return st.one_of(st.sampled_from(edges), st.integers(int(info.min), int(info.max)))


@st.composite
def fill_values(draw: st.DrawFn, dtype: str, zarr_format: int) -> Any:
    """A fill value for ``dtype``: anywhere in an integer type's range, special floats, strings, NaT."""
    if dtype in ("str", "U5"):
        return draw(st.sampled_from(["", "fill"] + ([None] if zarr_format == 2 else [])))
    if dtype == "S6":
        return draw(st.sampled_from([b"", b"ab"] + ([None] if zarr_format == 2 else [])))
    if dtype.startswith(("datetime64", "timedelta64")):
        dt = np.dtype(dtype)
        return draw(st.sampled_from([not_a_time(dt), np.array(0).astype(dt)[()], None]))
    if dtype == CF_DATETIME:
        return None  # xarray's writer decides it (see _cf_encode)
    kind = np.dtype(dtype).kind
    if kind == "b":
        return draw(st.booleans())
    if kind in "iu":
        return draw(_integer_fills(np.dtype(dtype)))
    if zarr_format == 2 and draw(st.booleans()):
        return None
    return draw(st.sampled_from([0.0, 1.5, -7.0, float("nan"), float("inf"), float("-inf")]))


def dtypes() -> st.SearchStrategy[str]:
    """Mostly the fast path's dtypes; a quarter of the time one that zarr-python reads (or a CF datetime)."""
    return st.one_of(st.sampled_from(NUMERIC_DTYPES), st.sampled_from(NUMERIC_DTYPES),
                     st.sampled_from(NUMERIC_DTYPES), st.sampled_from([*TEXT_DTYPES, *TIME_DTYPES, CF_DATETIME]))


def shard_indexes() -> st.SearchStrategy[ShardIndex]:
    return st.builds(ShardIndex, location=st.sampled_from(["end", "start"]), endian=st.sampled_from(["little", "big"]),
                     checksums=st.sampled_from([0, 1, 1, 2]))


def cf_times() -> st.SearchStrategy[CFTime]:
    return st.builds(CFTime, units=st.sampled_from(CF_UNITS), calendar=st.sampled_from(CF_CALENDARS),
                     dtype=st.sampled_from(["int64", "float64"]), resolution=st.sampled_from(["D", "h", "s", "ms"]))


@st.composite
def array_specs(draw: st.DrawFn, zarr_format: int | None = None, shape: tuple[int, ...] | None = None,
                dims: tuple[str, ...] | None = None, dtype: st.SearchStrategy[str] | None = None,
                sharded: bool | None = None) -> ArraySpec:
    """An array; ``sharded=True`` makes it a sharded Zarr v3 array, None lets it be either."""
    fmt = 3 if sharded else zarr_format or draw(st.sampled_from([3, 3, 2]))
    if shape is None:
        ndim = draw(st.integers(0, 4))
        max_side = {0: 1, 1: 60, 2: 20, 3: 9, 4: 6}[ndim]
        shape = tuple(draw(st.integers(1, max_side)) for _ in range(ndim))
    ndim = len(shape)
    chunks = tuple(draw(st.integers(1, s)) for s in shape)
    shards = None
    if sharded or fmt == 3 and sharded is None and draw(st.booleans()):
        shards = tuple(c * draw(st.integers(1, 3)) for c in chunks)
    dt = draw(dtype if dtype is not None else dtypes())
    endian = draw(st.sampled_from(["little", "big"]))
    compressors = [None, "zstd", "blosc", "gzip"] + (["zlib"] if fmt == 2 else [])
    compressor = draw(st.sampled_from(compressors))
    crc = fmt == 3 and draw(st.booleans())
    transpose = fmt == 3 and ndim > 1 and draw(st.booleans())
    order = draw(st.sampled_from(["C", "F"])) if fmt == 2 else "C"
    fill = draw(fill_values(dt, fmt))
    all_chunks = list(np.ndindex(*grid(shape, chunks)))
    missing = draw(st.lists(st.sampled_from(all_chunks), max_size=min(len(all_chunks), 6), unique=True))
    index = draw(shard_indexes()) if shards else ShardIndex()
    cf = draw(cf_times()) if dt == CF_DATETIME else None
    return ArraySpec(fmt, shape, chunks, shards, dt, endian, compressor, crc, transpose, order, fill, missing,
                     draw(st.integers(0, 2**31)), dims or DIMS[:ndim], index, cf)


def _serializer(spec: ArraySpec, dtype: Any) -> Any:
    from zarr.codecs import BytesCodec, VLenUTF8Codec

    if spec.dtype == "str":
        return VLenUTF8Codec()
    return BytesCodec(endian=spec.endian if np.dtype(dtype).itemsize > 1 else None)


def _v3_codecs(spec: ArraySpec, dtype: Any) -> dict[str, Any]:
    from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ShardingCodec, TransposeCodec, ZstdCodec

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
    serializer = _serializer(spec, dtype)
    if spec.shards is None:
        return {"chunks": spec.chunks, "compressors": compressors or None, "filters": filters or None,
                "serializer": serializer}
    # Sharded: the shard is the array's chunk; inner codecs and the index layout live in the sharding codec.
    sharding = ShardingCodec(chunk_shape=spec.chunks, codecs=[*filters, serializer, *compressors],
                             index_codecs=spec.shard_index.codecs(), index_location=spec.shard_index.location)
    return {"chunks": spec.shards, "compressors": None, "filters": None, "serializer": sharding}


def _v2_codecs(spec: ArraySpec) -> dict[str, Any]:
    import numcodecs

    comp = {None: None, "zstd": numcodecs.Zstd(level=1), "blosc": numcodecs.Blosc(cname="lz4"),
            "gzip": numcodecs.GZip(level=1), "zlib": numcodecs.Zlib(level=1)}[spec.compressor]
    return {"chunks": spec.chunks, "compressors": comp, "filters": "auto" if spec.dtype == "str" else None,
            "order": spec.order}


def create_array(group: Any, name: str, spec: ArraySpec, stored: Stored, attributes: dict[str, Any] | None = None
                 ) -> Any:
    """An empty array for ``spec`` in a zarr ``group`` (dimension names as xarray stores them)."""
    attrs = {**stored.attributes, **(attributes or {})}
    if spec.zarr_format == 3:
        kwargs = _v3_codecs(spec, stored.dtype)
        extra: dict[str, Any] = {"dimension_names": list(spec.dims), "attributes": attrs}
    else:
        kwargs = _v2_codecs(spec)
        extra = {"attributes": {**attrs, "_ARRAY_DIMENSIONS": list(spec.dims)}}
    with _unstable_dtypes_allowed():
        return group.create_array(name, shape=spec.shape, dtype=stored.dtype, fill_value=stored.fill_value,
                                  **kwargs, **extra)


@contextlib.contextmanager
def _unstable_dtypes_allowed() -> Iterator[None]:
    """Fixed-length bytes have no Zarr v3 specification yet: zarr warns whenever it writes their metadata."""
    from zarr.errors import UnstableSpecificationWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnstableSpecificationWarning)
        yield


def write_array(store: Any, spec: ArraySpec, name: str = "v", path: str = "",
                attributes: dict[str, Any] | None = None) -> np.ndarray:
    """Write ``spec`` as variable ``name`` of the group at ``path`` (the root by default); return the values
    stored (CF-encoded for CF datetimes)."""
    import zarr

    stored = spec.stored()
    group = zarr.open_group(store, path=path or None, mode="a", zarr_format=spec.zarr_format)
    arr = create_array(group, name, spec, stored, attributes)
    arr[...] = stored.values
    return stored.values


# -- groups --------------------------------------------------------------------------------------------------


@dataclass
class GroupSpec:
    """Data variables and index coordinates sharing dimensions, in one group."""

    zarr_format: int
    path: str  # "" for the root
    consolidated: str | None  # None, "root" (as xarray's to_zarr does) or "group" (the group itself)
    arrays: dict[str, ArraySpec]
    attributes: dict[str, Any]
    coordinates: dict[str, str]  # variable -> its CF "coordinates" attribute (non-index coordinates)

    def sizes(self) -> dict[str, int]:
        """The Dataset's dimensions, in a fixed order."""
        found = {d: n for a in self.arrays.values() for d, n in zip(a.dims, a.shape, strict=True)}
        return dict(sorted(found.items()))


@st.composite
def group_specs(draw: st.DrawFn, zarr_format: int | None = None, consolidate: bool = True) -> GroupSpec:
    fmt = zarr_format or draw(st.sampled_from([3, 3, 2]))
    sizes = {d: draw(st.integers(1, 12)) for d in draw(st.lists(st.sampled_from(DIMS), min_size=1, max_size=3,
                                                                unique=True))}
    arrays: dict[str, ArraySpec] = {}
    for dim in draw(st.lists(st.sampled_from(sorted(sizes)), unique=True)):  # index coordinates
        arrays[dim] = draw(array_specs(fmt, (sizes[dim],), (dim,), st.sampled_from(INDEX_DTYPES)))
    for i in range(draw(st.integers(1, 4))):
        dims = tuple(d for d in sizes if draw(st.booleans()))
        arrays[f"var{i}"] = draw(array_specs(fmt, tuple(sizes[d] for d in dims), dims))
    coordinates: dict[str, str] = {}
    if len(arrays) > 1 and draw(st.booleans()):  # one variable names another as its auxiliary coordinate
        names = [n for n in arrays if n.startswith("var")]
        if len(names) > 1:
            coordinates[names[0]] = names[-1]
    path = draw(st.sampled_from(["", "", "sub", "a/b"]))
    attributes = draw(st.sampled_from([{}, {"title": "test group", "Conventions": "CF-1.8"}, {"n": [1, 2]}]))
    consolidated = draw(st.sampled_from([None, "root", "group"])) if consolidate else None
    return GroupSpec(fmt, path, consolidated, arrays, attributes, coordinates)


def write_group(store: Any, spec: GroupSpec) -> None:
    import zarr

    group = zarr.open_group(store, path=spec.path or None, mode="a", zarr_format=spec.zarr_format)
    group.attrs.update(spec.attributes)
    for name, array in spec.arrays.items():
        attrs = {"coordinates": spec.coordinates[name]} if name in spec.coordinates else None
        write_array(store, array, name, spec.path, attrs)
    if spec.consolidated:
        path = spec.path if spec.consolidated == "group" else ""
        with _unstable_dtypes_allowed():
            zarr.consolidate_metadata(store, path=path or None, zarr_format=spec.zarr_format)


# -- selections ----------------------------------------------------------------------------------------------


@st.composite
def selections(draw: st.DrawFn, shape: tuple[int, ...], dims: tuple[str, ...] = DIMS) -> dict[str, Any]:
    """An ``isel`` argument: per dimension nothing, an int, a stepped slice, an index array (negative entries,
    repeats, any order, possibly empty) or a boolean mask."""
    sel: dict[str, Any] = {}
    for dim, n in zip(dims, shape, strict=False):
        kind = draw(st.sampled_from(["all", "int", "slice", "slice", "array", "bool"]))
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
            sel[dim] = np.array(draw(st.lists(st.integers(-n, n - 1), max_size=min(n, 5))), dtype=np.int64)
        elif kind == "bool":
            sel[dim] = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    return sel


@st.composite
def pointwise(draw: st.DrawFn, shape: tuple[int, ...], dims: tuple[str, ...] = DIMS) -> dict[str, Any]:
    """A vectorized ``isel``: DataArray indexers sharing the dimension "p" (or "p", "q") on some dimensions,
    ints or slices on the others."""
    import xarray as xr

    if not shape:
        return {}
    dims = dims[: len(shape)]
    points = draw(st.lists(st.sampled_from(dims), min_size=1, unique=True))
    out_shape = draw(st.one_of(st.integers(1, 6).map(lambda k: (k,)), st.sampled_from([(2, 3), (1, 1)])))
    out_dims = ("p",) if len(out_shape) == 1 else ("p", "q")
    sel: dict[str, Any] = {}
    for dim, n in zip(dims, shape, strict=True):
        if dim in points:
            flat = draw(st.lists(st.integers(-n, n - 1), min_size=math.prod(out_shape),
                                 max_size=math.prod(out_shape)))
            sel[dim] = xr.DataArray(np.array(flat, dtype=np.int64).reshape(out_shape), dims=out_dims)
        elif draw(st.booleans()):
            sel[dim] = draw(st.one_of(st.integers(-n, n - 1), st.just(slice(None, None, 2))))
    return sel


def any_selection(shape: tuple[int, ...], dims: tuple[str, ...] = DIMS) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(selections(shape, dims), selections(shape, dims), pointwise(shape, dims))


# -- rewrites between reads ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """One change to an array's stored objects between two reads.

    - "values": new values over ``region`` (objects keep their size when uncompressed, change it otherwise)
    - "compressible": a constant over ``region`` (compressed objects shrink; chunks equal to the fill vanish)
    - "fill": the fill value over ``region`` (its whole chunks vanish from their shard, or are deleted)
    - "delete": the stored object (shard, or chunk when unsharded) at ``coords`` is deleted
    - "add": an object at ``coords`` that was never written (the spec leaves it missing) is written
    """

    kind: str
    coords: tuple[int, ...]
    region: tuple[slice, ...]
    seed: int


@st.composite
def edits(draw: st.DrawFn, spec: ArraySpec) -> tuple[ArraySpec, list[Edit]]:
    """One to three edits of ``spec``'s array, and the spec to write first (objects to add left missing)."""
    objects = spec.outer_grid()
    changes: list[Edit] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["values", "compressible", "fill", "delete", "add"]))
        coords = draw(st.sampled_from(objects))
        whole = tuple(slice(c * k, min((c + 1) * k, s)) for c, k, s in zip(coords, spec.outer, spec.shape,
                                                                           strict=True))
        region = whole
        if kind != "delete" and kind != "add" and draw(st.booleans()):  # part of the array, maybe across objects
            region = tuple(slice(a, draw(st.integers(a + 1, s)))
                           for a, s in ((draw(st.integers(0, s - 1)), s) for s in spec.shape))
        changes.append(Edit(kind, coords, region, draw(st.integers(0, 2**31))))
    return before_edits(spec, changes), changes


def before_edits(spec: ArraySpec, changes: list[Edit]) -> ArraySpec:
    """``spec`` with every chunk of the objects that ``changes`` add left missing, so they are added."""
    missing = set(spec.missing)
    for edit in changes:
        if edit.kind != "add":
            continue
        per_object = tuple(o // k for o, k in zip(spec.outer, spec.chunks, strict=True))
        first = tuple(c * n for c, n in zip(edit.coords, per_object, strict=True))
        missing.update(tuple(f + i for f, i in zip(first, idx, strict=True)) for idx in np.ndindex(*per_object))
    in_grid = set(np.ndindex(*grid(spec.shape, spec.chunks)))
    return dataclasses.replace(spec, missing=sorted(missing & in_grid))


def object_key(spec: ArraySpec, coords: tuple[int, ...], name: str = "v") -> str:
    if spec.zarr_format == 2:
        return f"{name}/{'.'.join(map(str, coords)) or '0'}"
    return f"{name}/c" + "".join(f"/{i}" for i in coords)


def apply_edit(store: Any, spec: ArraySpec, edit: Edit, name: str = "v") -> None:
    """Apply ``edit`` to the array ``name`` at the root of ``store`` (written from ``spec``)."""
    import zarr
    from zarr.core.sync import sync

    if edit.kind == "delete":
        sync(store.delete(object_key(spec, edit.coords, name)))
        return
    arr = zarr.open_array(store, path=name, mode="r+", zarr_format=spec.zarr_format)
    shape = tuple(len(range(*r.indices(s))) for r, s in zip(edit.region, spec.shape, strict=True))
    stored = dataclasses.replace(spec, shape=shape, missing=[], seed=edit.seed).stored()
    fresh = stored.values
    if edit.kind == "compressible" and fresh.size:
        fresh = np.full_like(fresh, fresh.flat[0])
    elif edit.kind == "fill":
        fresh = np.full_like(fresh, stored.fill_for_values())
    arr[edit.region] = fresh
