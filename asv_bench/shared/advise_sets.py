"""The advisor's two validation sets (issue 42): datasets, the layouts each is written in, its access patterns and
the mixes of them, for `asv_bench.tables.advise_validation`.

Set 1, the tuning set: the first validation set (`asv_bench.shared.access`: a GEOS-FP-like float32 (time, lat, lon)
field, seed 001's four operations and three mixes, its eight layouts), at a smaller shape so that both sets fit in
one 15-minute run. The advisor's constants may be fitted on it.

Set 2, held out: datasets of other ranks, dtypes, compressibilities and sizes, with pattern mixes set 1 does not
use. NEVER used to tune the advisor: it exists to tell whether what was tuned on set 1 carries over.

- "packed-4d": a (time, level, lat, lon) field stored as int16 with CF ``scale_factor``/``add_offset`` (xarray
  decodes it to floats), smooth with noise of a few counts: zstd keeps about 0.7 of its int16 bytes (80 MB;
  160 MB decoded as float32).
  Patterns: vertical profiles at points (all times and levels at a few (lat, lon)), surface maps at a few times,
  a random batch of 4-D windows, a region's full column, a day of surface maps.
- "stations-2d": a (time, station) float64 field of hourly values at 600 stations, noisy: zstd keeps about
  0.95 of its bytes. 42 MB. Patterns: the series of a few stations, a few days of all stations, a random batch of (week,
  16 stations) windows, the last month.

A pattern is what a user's code reads in one open, in order: one box, several boxes one after the other, the
pointwise values at N points (one vectorised read), or a batch's windows one after the other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from asv_bench.shared.access import MIXES, Spec, layouts, operations

Box = Mapping[str, int | slice]


@dataclass(frozen=True)
class Pattern:
    """One access pattern of a dataset as its reads: ``kind`` "box" (``boxes[0]``), "boxes" (each box read one
    after the other in one open), "points" (``points``: per dimension the index of each point, read pointwise
    in one call; the other dimensions whole) or "batch" (``batch``'s windows, one after the other; the boxes
    are filled in from the advisor's own windows, see `advise_validation.batch_windows`)."""

    name: str
    kind: str
    boxes: tuple[Box, ...] = ()
    points: Mapping[str, tuple[int, ...]] | None = None
    batch: Mapping[str, Any] | None = None  # {"windows": n, "window": {dim: length}, "seed": s}

    def reads(self) -> int:
        return len(self.points[next(iter(self.points))]) if self.points else len(self.boxes)


@dataclass
class DataSet:
    """A dataset of one data variable "v": how to make it (``make()``: the Dataset to write, its encoding of
    "v" but chunks and shards, and the decoded values of "v" to check reads against), its layouts, patterns
    and mixes (pattern name -> weight)."""

    name: str
    validation_set: int  # 1: the tuning set; 2: held out
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    layouts: list[Spec]
    patterns: list[Pattern]
    mixes: dict[str, dict[str, float]]
    make: Callable[[], tuple[Any, dict[str, Any], np.ndarray]]
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def cover(n: int, c: int) -> int:
    """A shard length spanning a dimension of ``n``: a multiple of the chunk ``c``."""
    return -(-n // c) * c


# -- set 1: the first validation set, smaller ------------------------------------------------------------------

SET1_SHAPE = (240, 181, 288)
SET1_QUICK_SHAPE = (12, 73, 144)  # seed 001's compromise keeps about 190 chunks per time step: few steps


def set1(shape: tuple[int, int, int]) -> DataSet:
    """The first validation set at ``shape``: `access.field`, its eight layouts, seed 001's four operations as
    single boxes and the three mixes (`access.MIXES`)."""
    from asv_bench.shared.access import DIMS, coords
    from asv_bench.shared.access import field as access_field

    def make() -> tuple[Any, dict[str, Any], np.ndarray]:
        import xarray as xr

        data = access_field(shape)
        return xr.Dataset({"v": (DIMS, data)}, coords=coords(shape)), {}, data

    patterns = [Pattern(op.name, "box", (dict(op.box),)) for op in operations(shape)]
    return DataSet("geosfp-like", 1, DIMS, tuple(shape), layouts(shape), patterns, {k: dict(v) for k, v in
                   MIXES.items()}, make, f"float32 {shape}, smooth plus noise, quantized to 1/16 (zstd about 1/2)")


# -- set 2, dataset A: packed int16, 4-D, smooth -------------------------------------------------------------------

A_SHAPE = (48, 16, 181, 288)
A_QUICK_SHAPE = (12, 8, 46, 72)
A_DIMS = ("time", "level", "lat", "lon")
A_SCALE, A_OFFSET = 0.01, 250.0  # kelvin: int16 steps of 0.01 K around 250 K


def packed_field(shape: Sequence[int], seed: int = 42) -> np.ndarray:
    """Smooth int16 counts (a vertical profile, a travelling wave) plus noise of about two counts."""
    t, z, y, x = shape
    rng = np.random.default_rng(seed)
    lat = np.linspace(-np.pi / 2, np.pi / 2, y, dtype="f4")[None, :, None]
    lon = np.linspace(0, 2 * np.pi, x, endpoint=False, dtype="f4")[None, None, :]
    out = np.empty(shape, dtype="i2")
    for k in range(t):
        level = np.linspace(0, 1, z, dtype="f4")[:, None, None]
        kelvin = (30 * np.cos(lat) - 50 * level + 5 * np.sin(2 * lon + 2 * np.pi * k / 24) * np.cos(lat)
                  + rng.normal(scale=0.02, size=(z, y, x)).astype("f4"))
        out[k] = np.round(kelvin / A_SCALE).astype("i2")
    return out


def dataset_a(shape: tuple[int, int, int, int] = A_SHAPE, reads: float = 1.0) -> DataSet:
    """Dataset A at ``shape``; ``reads`` scales the reads of each pattern of several (``--quick``: fewer)."""
    t, z, y, x = shape

    def make() -> tuple[Any, dict[str, Any], np.ndarray]:
        import xarray as xr

        counts = packed_field(shape)
        # The decoded values xarray gives back: counts * scale + offset (float32, xarray's choice for int16
        # with float attributes); written as floats, packed by the encoding below.
        values = (counts.astype("f8") * A_SCALE + A_OFFSET).astype("f4")
        coords = {"time": np.datetime64("2021-01-01T00") + np.arange(t).astype("timedelta64[h]"),
                  "level": np.linspace(1000, 100, z), "lat": np.linspace(-90, 90, y),
                  "lon": np.linspace(-180, 180, x, endpoint=False)}
        ds = xr.Dataset({"v": (A_DIMS, values, {"units": "K"})}, coords=coords)
        enc = {"dtype": "int16", "scale_factor": A_SCALE, "add_offset": A_OFFSET, "_FillValue": np.int16(-32768)}
        return ds, enc, values

    ten = max(1, z // 2)
    region = (slice(y // 3, y // 3 + max(2, y // 9)), slice(x // 2, x // 2 + max(2, x // 10)))
    rng = np.random.default_rng(5)
    npts = max(2, round(8 * reads))
    profile_points = {"lat": tuple(int(i) for i in rng.integers(0, y, npts)),
                      "lon": tuple(int(i) for i in rng.integers(0, x, npts))}
    patterns = [
        Pattern("profiles", "points", points=profile_points),
        Pattern("surface-maps", "boxes", tuple({"time": int(k), "level": 0}
                                               for k in np.linspace(0, t - 1, max(2, round(4 * reads)))
                                               .round().astype(int))),
        Pattern("batch", "batch", batch={"windows": max(2, round(12 * reads)), "seed": 7,
                                         "window": {"time": min(t, 4), "level": min(z, ten), "lat": min(y, 32),
                                                    "lon": min(x, 32)}}),
        Pattern("region-column", "box", ({"lat": region[0], "lon": region[1]},)),
        Pattern("surface-day", "box", ({"level": 0, "time": slice(0, min(t, 24))},)),
    ]
    mixes = {
        "training": {"batch": 0.7, "surface-maps": 0.3},
        "point-analysis": {"profiles": 0.6, "region-column": 0.4},
        "forecast-desk": {"surface-maps": 0.4, "surface-day": 0.4, "profiles": 0.2},
    }
    specs = [
        Spec("one step, every level", (1, z, y, x), None, "hand"),
        Spec("one level map", (1, 1, y, x), None, "hand"),
        Spec("columns", (t, z, max(1, y // 12), max(1, x // 18)), None, "hand"),
        Spec("compromise", (max(1, t // 6), max(1, z // 4), -(-y // 4), x // 4), None, "hand"),
        Spec("large blocks", (max(1, t // 4), z, -(-y // 2), x // 2), None, "hand"),
        Spec("cubes in column shards", (4, 4, 32, 32), (cover(t, 4), cover(z, 4), 64, 64), "hand"),
        Spec("cubes in slab shards", (4, 4, 32, 32), (8, cover(z, 4), cover(y, 32) // 1, cover(x, 32)), "hand"),
        Spec("thin columns in shards", (t, z, 4, 4), (t, z, 64, 64), "hand"),
    ]
    return DataSet("packed-4d", 2, A_DIMS, tuple(shape), _fit(specs, shape), patterns, mixes, make,
                   f"int16 {shape} with scale_factor {A_SCALE}, add_offset {A_OFFSET} (decoded float32), smooth")


# -- set 2, dataset B: float64, 2-D, noisy -------------------------------------------------------------------------

B_SHAPE = (8760, 600)
B_QUICK_SHAPE = (1440, 96)
B_DIMS = ("time", "station")


def station_field(shape: Sequence[int], seed: int = 43) -> np.ndarray:
    """Hourly float64 values at stations: a daily cycle per station plus white noise at full precision, so
    zstd can save little (the mantissas are random)."""
    t, s = shape
    rng = np.random.default_rng(seed)
    hours = np.arange(t)[:, None]
    phase = rng.uniform(0, 2 * np.pi, s)[None, :]
    return 10 + 8 * np.sin(2 * np.pi * hours / 24 + phase) + rng.normal(scale=2.0, size=(t, s))


def dataset_b(shape: tuple[int, int] = B_SHAPE, reads: float = 1.0) -> DataSet:
    """Dataset B at ``shape``; ``reads`` scales the reads of each pattern of several (``--quick``: fewer)."""
    t, s = shape

    def make() -> tuple[Any, dict[str, Any], np.ndarray]:
        import xarray as xr

        values = station_field(shape)
        coords = {"time": np.datetime64("2022-01-01T00") + np.arange(t).astype("timedelta64[h]"),
                  "station": np.arange(s)}
        return xr.Dataset({"v": (B_DIMS, values)}, coords=coords), {}, values

    rng = np.random.default_rng(6)
    day = min(t, 24)
    patterns = [
        Pattern("stations", "boxes", tuple({"station": int(j)}
                                           for j in rng.choice(s, max(2, round(10 * reads)), replace=False))),
        Pattern("snapshots", "boxes", tuple({"time": slice(int(a), int(a) + day)}
                                            for a in np.linspace(0, t - day, max(2, round(4 * reads)))
                                            .round().astype(int))),
        Pattern("batch", "batch", batch={"windows": max(2, round(16 * reads)), "seed": 8,
                                         "window": {"time": min(t, 168), "station": min(s, 16)}}),
        Pattern("last-month", "box", ({"time": slice(max(0, t - 720), t)},)),
    ]
    mixes = {
        "training": {"batch": 0.8, "last-month": 0.2},
        "station-analyst": {"stations": 0.7, "snapshots": 0.3},
        "dashboard": {"last-month": 0.5, "snapshots": 0.3, "stations": 0.2},
    }
    specs = [
        Spec("one station", (t, 1), None, "hand"),
        Spec("one day", (min(t, 24), s), None, "hand"),
        Spec("month blocks", (min(t, 720), min(s, 50)), None, "hand"),
        Spec("station groups", (t, min(s, 8)), None, "hand"),
        Spec("quarter blocks", (-(-t // 4), -(-s // 4)), None, "hand"),
        Spec("weeks", (min(t, 168), s), None, "hand"),
        Spec("week tiles in block shards", (168, 16), (1344, 64), "hand"),
        Spec("day tiles in series shards", (24, 64), (cover(t, 24), 64), "hand"),
    ]
    return DataSet("stations-2d", 2, B_DIMS, tuple(shape), _fit(specs, shape), patterns, mixes, make,
                   f"float64 {shape}, daily cycle plus full-precision noise")


def _fit(specs: list[Spec], shape: Sequence[int]) -> list[Spec]:
    """Each layout clipped to the array (``--quick`` shapes are small): chunks at most the dimension, shards a
    multiple of the chunk covering at most the dimension rounded up; duplicates dropped."""
    out: list[Spec] = []
    for s in specs:
        chunks = tuple(max(1, min(c, n)) for c, n in zip(s.chunks, shape, strict=True))
        shards = None
        if s.shards is not None:
            shards = tuple(min(cover(n, c), max(c, o // c * c)) for o, c, n in zip(s.shards, chunks, shape,
                                                                                    strict=True))
            if shards == chunks:
                shards = None
        spec = Spec(s.name, chunks, shards, s.kind)
        if all(spec.key != o.key for o in out):
            out.append(spec)
    return out


def datasets(quick: bool) -> list[DataSet]:
    """Set 1 then set 2, at full or ``quick`` shapes (and a quarter of the reads per pattern)."""
    if quick:
        return [set1(SET1_QUICK_SHAPE), dataset_a(A_QUICK_SHAPE, 0.25), dataset_b(B_QUICK_SHAPE, 0.25)]
    return [set1(SET1_SHAPE), dataset_a(A_SHAPE), dataset_b(B_SHAPE)]


def write(path: Path, spec: Spec, ds: Any, encoding: Mapping[str, Any]) -> None:
    """The dataset written at ``path`` in ``spec``'s layout (zstd level 3, consolidated), by our writer."""
    from zarr.codecs import ZstdCodec

    import xarray_zarrmax

    enc: dict[str, Any] = {**encoding, "chunks": spec.chunks, "compressors": [ZstdCodec(level=3)]}
    if spec.shards is not None:
        enc["shards"] = spec.shards
    xarray_zarrmax.to_zarr(ds, str(path), encoding={"v": enc}, mode="w", consolidated=True)


# -- reading a pattern ---------------------------------------------------------------------------------------------


def run_pattern(ds: Any, pattern: Pattern) -> list[np.ndarray]:
    """What a user's code does for ``pattern`` on an opened dataset: each box read in turn, or the points in
    one pointwise read; the values loaded."""
    import xarray as xr

    v = ds["v"]
    if pattern.kind == "points":
        assert pattern.points is not None
        sel = {d: xr.DataArray(list(idx), dims="point") for d, idx in pattern.points.items()}
        return [np.asarray(v.isel(sel).values)]
    return [np.asarray(v.isel(dict(box)).values) for box in pattern.boxes]


def expected(values: np.ndarray, dims: Sequence[str], pattern: Pattern) -> list[np.ndarray]:
    """`run_pattern` on the decoded values in memory."""
    import xarray as xr

    return run_pattern(xr.Dataset({"v": (tuple(dims), values)}), pattern)


def check(label: str, got: Sequence[np.ndarray], want: Sequence[np.ndarray], atol: float) -> None:
    if len(got) != len(want) or any(g.shape != w.shape or not np.allclose(g, w, rtol=0, atol=atol)
                                    for g, w in zip(got, want, strict=True)):
        raise AssertionError(f"{label}: wrong values")
