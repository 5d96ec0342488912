"""Hostile input to the advisor (issue #46): every public entry point refuses arguments of the wrong type or value
before anything is probed or written, with a message naming the argument (and the pattern and dimension), what
was expected and what was given. Wrong types are `AdviceTypeError` (a TypeError), wrong values `AdviceInputError`
(a ValueError); both are `ZarrmaxError`s."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import xarray_zarrmax
from xarray_zarrmax.advise import Batch, Constraints, Costs, Layout
from xarray_zarrmax.errors import AdviceInputError, AdviceTypeError, ZarrmaxError

KNOWN = "timeseries, map, region-mean, map-mean, full-scan, random-batch"
MAPPING = "a mapping of pattern name -> weight, e.g. {'timeseries': 0.5, 'map': 0.5}"
SPEC = ("a weight, or (weight, {dim: index or slice}) for a pattern of your own (or (weight, [boxes]), "
        "(weight, Points(...)), (weight, Batch(...)))")
DIMS = "3 positive chunk lengths (dimensions ('time', 'lat', 'lon'))"


def dataset() -> xr.Dataset:
    values = np.random.default_rng(0).random((37, 20, 30)).astype("f4")
    return xr.Dataset({"t2m": (("time", "lat", "lon"), values)},
                      coords={"lat": np.linspace(-90, 90, 20), "lon": np.linspace(-180, 174, 30)})


def box(key: Any, dim: str = "lat") -> dict[str, Any]:
    return {"patterns": {"box": (1.0, {dim: key})}}


def index(value: int) -> str:
    return (f"pattern 'box': expected an index of dimension 'lat' from -20 to 19 (variable 't2m' has 20 elements "
            f"along it). Got {value} instead.")


def bounds(key: slice) -> str:
    return (f"pattern 'box': expected a slice of dimension 'lat' with start and stop from -20 to 20 (variable 't2m' "
            f"has 20 elements along it). Got {key!r} instead.")


# (what, keywords of advise() beside ds, the type raised, the exact message)
HOSTILE: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("patterns as a list", {"patterns": ["map"]}, AdviceTypeError,
     f"expected patterns as {MAPPING}. Got ['map'] (list) instead."),
    ("patterns as a string", {"patterns": "map"}, AdviceTypeError,
     f"expected patterns as {MAPPING}. Got 'map' (str) instead."),
    ("a pattern name not a string", {"patterns": {1: 1.0}}, AdviceTypeError,
     f"expected pattern names as strings ({KNOWN} or names of your own). Got 1 (int) instead."),
    ("an unknown pattern", {"patterns": {"heatmap": 1.0}}, AdviceInputError,
     f"unknown access pattern 'heatmap': expected one of {KNOWN}, or a selection {{dim: slice}} of your own"),
    ("a weight as a string", {"patterns": {"map": "0.5"}}, AdviceTypeError,
     "expected a positive weight for pattern 'map'. Got '0.5' (str) instead."),
    ("a weight of None", {"patterns": {"map": None}}, AdviceTypeError,
     "expected a positive weight for pattern 'map'. Got None (NoneType) instead."),
    ("a weight of True", {"patterns": {"map": True}}, AdviceTypeError,
     "expected a positive weight for pattern 'map'. Got True (bool) instead."),
    ("a negative weight", {"patterns": {"map": -1}}, AdviceInputError,
     "expected a positive weight for pattern 'map'. Got -1 instead."),
    ("a weight of 0", {"patterns": {"map": 0}}, AdviceInputError,
     "expected a positive weight for pattern 'map'. Got 0 instead."),
    ("a NaN weight", {"patterns": {"map": math.nan}}, AdviceInputError,
     "expected a positive weight for pattern 'map'. Got nan instead."),
    ("an infinite weight", {"patterns": {"map": math.inf}}, AdviceInputError,
     "expected a positive weight for pattern 'map'. Got inf instead."),
    ("a spec of three", {"patterns": {"box": (1.0, {"lat": 1}, 3)}}, AdviceTypeError,
     f"expected patterns['box'] as {SPEC}. Got (1.0, {{'lat': 1}}, 3) (tuple) instead."),
    ("a spec as a list", {"patterns": {"box": [1.0, {"lat": 1}]}}, AdviceTypeError,
     f"expected patterns['box'] as {SPEC}. Got [1.0, {{'lat': 1}}] (list) instead."),
    ("a spec as a selection alone", {"patterns": {"box": {"lat": 1}}}, AdviceTypeError,
     f"expected patterns['box'] as {SPEC}. Got {{'lat': 1}} (dict) instead."),
    ("a selection as a list", {"patterns": {"box": (1.0, [slice(0, 3)])}}, AdviceTypeError,
     f"expected patterns['box'] as {SPEC}. Got (1.0, [slice(0, 3, None)]) (tuple) instead."),
    ("a selection's weight as a string", {"patterns": {"box": ("1", {"lat": 1})}}, AdviceTypeError,
     "expected a positive weight for pattern 'box'. Got '1' (str) instead."),
    # selections outside the variable: were taken as something else (99 as 99 % 20, slice(5, 5) as nothing)
    ("index 99 of 20", box(99), AdviceInputError, index(99)),
    ("index -99 of 20", box(-99), AdviceInputError, index(-99)),
    ("index 20 of 20", box(20), AdviceInputError, index(20)),
    ("an empty slice", box(slice(5, 5)), AdviceInputError,
     "pattern 'box': expected a slice of dimension 'lat' selecting at least one of its 20 elements. Got "
     "slice(5, 5, None) instead, which selects none."),
    ("a reversed slice", box(slice(10, 2)), AdviceInputError,
     "pattern 'box': expected a slice of dimension 'lat' selecting at least one of its 20 elements. Got "
     "slice(10, 2, None) instead, which selects none."),
    ("a slice past the end", box(slice(0, 99)), AdviceInputError, bounds(slice(0, 99))),
    ("a slice before the start", box(slice(-99, None)), AdviceInputError, bounds(slice(-99, None))),
    ("a slice with a step", box(slice(0, 10, 2)), AdviceInputError,
     "pattern 'box': expected a slice with step 1 (or none) for dimension 'lat': the advisor costs boxes. Got "
     "slice(0, 10, 2) instead."),
    ("a float index", box(2.5), AdviceTypeError,
     "pattern 'box': expected an index (a whole number) or a slice of whole numbers for dimension 'lat'. Got 2.5 "
     "(float) instead."),
    ("a string index", box("3"), AdviceTypeError,
     "pattern 'box': expected an index (a whole number) or a slice of whole numbers for dimension 'lat'. Got '3' "
     "(str) instead."),
    ("a boolean index", box(True), AdviceTypeError,
     "pattern 'box': expected an index (a whole number) or a slice of whole numbers for dimension 'lat'. Got True "
     "(bool) instead."),
    ("a slice of floats", box(slice(0.5, 3)), AdviceTypeError,
     "pattern 'box': expected a slice of whole numbers for dimension 'lat'. Got slice(0.5, 3, None) instead."),
    ("a dimension the variable lacks", box(slice(0, 3), "level"), AdviceInputError,
     "pattern 'box' selects dimension 'level', which variable 't2m' does not have: its dimensions are ('time', "
     "'lat', 'lon')"),
    # the other keywords
    ("a variable not in the dataset", {"variable": "sst"}, AdviceInputError,
     "no data variable 'sst': the dataset has ['t2m']"),
    ("a variable as a list", {"variable": ["t2m"]}, AdviceTypeError,
     "expected variable as the name of a data variable. Got ['t2m'] (list) instead."),
    ("layouts of dicts", {"layouts": [{"chunks": (1, 20, 30)}]}, AdviceTypeError,
     "expected layouts[0] as a Layout(chunks, shards or None) (an encoding's {'chunks': c, 'shards': s} is "
     "Layout(c, s)). Got {'chunks': (1, 20, 30)} (dict) instead."),
    ("one layout not in a list", {"layouts": Layout((1, 20, 30))}, AdviceTypeError,
     "expected layouts as a list of Layout(chunks, shards or None) (from xarray_zarrmax.advise). Got "
     "Layout(chunks=(1, 20, 30), shards=None) (Layout) instead."),
    ("a layout of float lengths", {"layouts": [Layout((1.5, 20, 30))]}, AdviceTypeError,  # type: ignore[arg-type]
     f"expected layouts[0].chunks as a tuple of {DIMS}. Got (1.5, 20, 30) (tuple) instead."),
    ("a layout of too few lengths", {"layouts": [Layout((4,))]}, AdviceInputError,
     f"expected layouts of {DIMS}, as Layout(chunks, shards or None). Got layouts[0] = "
     "Layout(chunks=(4,), shards=None) instead."),
    ("a layout's shards not multiples", {"layouts": [Layout((4, 5, 5), (6, 5, 5))]}, AdviceInputError,
     "expected shards that are whole multiples of the chunks. Got layouts[0] = Layout(chunks=(4, 5, 5), "
     "shards=(6, 5, 5))."),
    ("a shard of two million chunks", {"layouts": [Layout((1, 1, 1), (1024, 1024, 2))]}, AdviceInputError,
     "expected shards of at most 1,048,576 chunks (tuning.MAX_SHARD_CHUNKS: the advisor lays out every chunk of a "
     "shard to cost it). Got layouts[0] = Layout(chunks=(1, 1, 1), shards=(1024, 1024, 2)), of 2,097,152 chunks "
     "a shard."),
    ("no layouts", {"layouts": []}, AdviceInputError, "expected at least one layout in layouts=. Got none."),
    ("costs as a dict", {"costs": {"latency_s": 0.02}}, AdviceTypeError,
     "expected costs as xarray_zarrmax.advise.Costs(...) (or None: probe). Got {'latency_s': 0.02} (dict) instead."),
    ("a store as a number", {"store": 5}, AdviceTypeError,
     "expected store as a local directory or an s3:// URL to probe (or None). Got 5 (int) instead."),
    ("a store of another protocol", {"store": "gs://bucket/x"}, AdviceInputError,
     "expected store as a local directory or an s3:// URL to probe (or None). Got 'gs://bucket/x' instead."),
    ("storage options as a list", {"storage_options": [("key", "x")]}, AdviceTypeError,
     "expected storage_options as a mapping of store options (or None). Got [('key', 'x')] (list) instead."),
    ("progress as a string", {"progress": "yes"}, AdviceTypeError,
     "expected progress as True, False or a callable (done, total, what). Got 'yes' (str) instead."),
    ("budget_mb as a string", {"budget_mb": "5"}, AdviceTypeError,
     "expected budget_mb as a positive number of MB. Got '5' (str) instead."),
    ("a negative budget_mb", {"budget_mb": -1}, AdviceInputError,
     "expected budget_mb as a positive number of MB. Got -1 instead."),
    ("a NaN max_object_mb", {"max_object_mb": math.nan}, AdviceInputError,
     "expected max_object_mb as a positive number of MB. Got nan instead."),
    ("max_objects as a float", {"max_objects": 2.5}, AdviceTypeError,
     "expected max_objects as a whole number >= 1. Got 2.5 (float) instead."),
    ("max_objects of 0", {"max_objects": 0}, AdviceInputError,
     "expected max_objects as a whole number >= 1. Got 0 instead."),
    ("batch as a number", {"batch": 5}, AdviceTypeError,
     "expected batch as xarray_zarrmax.advise.Batch(windows, {dim: size}). Got 5 (int) instead."),
    ("a batch window along a missing dimension", {"patterns": {"random-batch": 1.0}, "batch": Batch(4, {"level": 2})},
     AdviceInputError, "pattern 'random-batch' selects dimension 'level', which variable 't2m' does not have: its "
     "dimensions are ('time', 'lat', 'lon')"),
]
IDS = [case[0] for case in HOSTILE]


def _split(kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    kwargs = dict(kwargs)
    patterns = kwargs.pop("patterns", {"map": 1.0})
    return patterns, kwargs


def _check(caught: pytest.ExceptionInfo[Exception], error: type[Exception], message: str) -> None:
    assert type(caught.value) is error
    assert str(caught.value) == message
    assert isinstance(caught.value, ZarrmaxError)
    assert isinstance(caught.value, TypeError if error is AdviceTypeError else ValueError)


@pytest.mark.parametrize(("what", "kwargs", "error", "message"), HOSTILE, ids=IDS)
def test_advise_names_what_was_wrong(what: str, kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    patterns, rest = _split(kwargs)
    with pytest.raises(error) as caught:
        xarray_zarrmax.advise(dataset(), patterns, **{"costs": Costs(), "progress": False, **rest})
    _check(caught, error, message)


@pytest.mark.parametrize(("what", "kwargs", "error", "message"), HOSTILE, ids=IDS)
def test_the_accessor_names_what_was_wrong(what: str, kwargs: dict[str, Any], error: type[Exception],
                                           message: str) -> None:
    patterns, rest = _split(kwargs)
    with pytest.raises(error) as caught:
        dataset().zarrmax.advise(patterns, **{"costs": Costs(), "progress": False, **rest})
    _check(caught, error, message)


ON_ARRAYS = [c for c in HOSTILE if "variable" not in c[1]]  # da.zarrmax.advise takes no variable=


@pytest.mark.parametrize(("what", "kwargs", "error", "message"), ON_ARRAYS, ids=[c[0] for c in ON_ARRAYS])
def test_the_dataarray_accessor_names_what_was_wrong(what: str, kwargs: dict[str, Any], error: type[Exception],
                                                     message: str) -> None:
    patterns, rest = _split(kwargs)
    with pytest.raises(error) as caught:
        dataset()["t2m"].zarrmax.advise(patterns, **{"costs": Costs(), "progress": False, **rest})
    _check(caught, error, message)


@pytest.mark.parametrize(("what", "kwargs", "error", "message"), HOSTILE, ids=IDS)
def test_to_zarr_with_advice_names_what_was_wrong_and_writes_nothing(tmp_path: Path, what: str,
                                                                     kwargs: dict[str, Any], error: type[Exception],
                                                                     message: str) -> None:
    patterns, rest = _split(kwargs)
    with pytest.raises(error) as caught:
        xarray_zarrmax.to_zarr(dataset(), tmp_path / "out.zarr", encoding="advise", patterns=patterns,
                               advise_options={"costs": Costs(), "progress": False, **rest})
    _check(caught, error, message)
    assert list(tmp_path.iterdir()) == []  # nothing probed, nothing written


@pytest.mark.parametrize(("ds", "message"), [
    (dataset()["t2m"], "expected ds as an xarray.Dataset. Got a DataArray: advise on it with "
                       "da.zarrmax.advise(patterns, ...), or pass da.to_dataset(name=...)."),
    ({"t2m": np.zeros(100)}, "expected ds as an xarray.Dataset. Got a value of type dict instead."),
    ("era5.zarr", "expected ds as an xarray.Dataset. Got 'era5.zarr' (str) instead."),
], ids=["DataArray", "dict", "path"])
def test_the_top_level_takes_a_dataset(ds: Any, message: str) -> None:
    """The top-level `advise` takes a Dataset (its documentation); a DataArray is pointed to its own method."""
    with pytest.raises(AdviceTypeError) as caught:
        xarray_zarrmax.advise(ds, {"map": 1.0}, costs=Costs())
    _check(caught, AdviceTypeError, message)


def test_the_dataarray_accessor_advises_on_the_array_itself() -> None:
    report = dataset()["t2m"].zarrmax.advise({"map": 1.0}, costs=Costs(), layouts=[Layout((1, 20, 30))])
    assert report.variable == "t2m"


def test_a_layout_given_as_lists_is_taken_as_tuples() -> None:
    report = xarray_zarrmax.advise(dataset(), {"map": 1.0}, costs=Costs(), progress=False,
                                   layouts=[Layout([1, 20, 30], [2, 20, 30])])  # type: ignore[arg-type]
    assert report.best.layout == Layout((1, 20, 30), (2, 20, 30))
    assert report.best.encoding == {"t2m": {"chunks": (1, 20, 30), "shards": (2, 20, 30)}}


WINDOWS = "a whole number of windows from 1 to 1024 (tuning.MAX_BATCH_WINDOWS)"


@pytest.mark.parametrize(("args", "error", "message"), [
    (("5",), AdviceTypeError, f"expected Batch windows as {WINDOWS}. Got '5' (str) instead."),
    ((2.0,), AdviceTypeError, f"expected Batch windows as {WINDOWS}. Got 2.0 (float) instead."),
    ((True,), AdviceTypeError, f"expected Batch windows as {WINDOWS}. Got True (bool) instead."),
    ((0,), AdviceInputError, f"expected Batch windows as {WINDOWS}. Got 0 instead."),
    ((-1,), AdviceInputError, f"expected Batch windows as {WINDOWS}. Got -1 instead."),
    ((5000,), AdviceInputError, f"expected Batch windows as {WINDOWS}. Got 5000 instead."),
    ((4, [8]), AdviceTypeError, "expected Batch window as a mapping {dim: window length}, e.g. {'time': 8, 'lat': "
                                "32}. Got [8] (list) instead."),
    ((4, {"time": 2.5}), AdviceTypeError, "expected Batch window['time'] as a window length >= 1. Got 2.5 (float) "
                                          "instead."),
    ((4, {"time": 0}), AdviceInputError, "expected Batch window['time'] as a window length >= 1. Got 0 instead."),
    ((4, {1: 3}), AdviceTypeError, "expected Batch window's dimensions as names (strings). Got 1 (int) instead."),
])
def test_batch_names_what_was_wrong(args: tuple[Any, ...], error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        Batch(*args)
    _check(caught, error, message)


def test_batch_takes_numpy_integers() -> None:
    batch = Batch(np.int64(4), {"time": np.int32(3)})
    assert batch == Batch(4, {"time": 3}) and type(batch.windows) is int


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"max_object_bytes": "5"}, AdviceTypeError,
     "expected Constraints max_object_bytes as a whole number of bytes >= 1 (or None). Got '5' (str) instead."),
    ({"max_objects": -1}, AdviceInputError,
     "expected Constraints max_objects as a whole number of objects >= 1 (or None). Got -1 instead."),
    ({"task_memory_bytes": 1.5}, AdviceTypeError,
     "expected Constraints task_memory_bytes as a whole number of bytes >= 1 (or None). Got 1.5 (float) instead."),
    ({"max_object_bytes": True}, AdviceTypeError,
     "expected Constraints max_object_bytes as a whole number of bytes >= 1 (or None). Got True (bool) instead."),
])
def test_constraints_name_what_was_wrong(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        Constraints(**kwargs)
    _check(caught, error, message)


def test_a_tiny_budget_is_a_constraint_of_one_byte_not_a_crash() -> None:
    with pytest.raises(AdviceInputError, match=r"^no candidate layout of 1 meets every constraint: memory per task "):
        xarray_zarrmax.advise(dataset(), {"map": 1.0}, costs=Costs(), budget_mb=1e-12, layouts=[Layout((1, 20, 30))])


@pytest.mark.parametrize(("key", "axis"), [(0, (0, 1)), (-1, (19, 20)), (19, (19, 20)), (np.int64(-20), (0, 1)),
                                           (slice(None), (0, 20)), (slice(-5, None), (15, 20)),
                                           (slice(2, 20, 1), (2, 20)), (slice(0, -1), (0, 19))])
def test_selections_inside_the_variable_are_read_as_numpy_reads_them(key: Any, axis: tuple[int, int]) -> None:
    from xarray_zarrmax.advise.patterns import check_selection

    (time, lat, lon) = check_selection("box", {"lat": key}, ("time", "lat", "lon"), (37, 20, 30), "t2m")
    assert (lat.start, lat.stop) == axis and (time.start, time.stop, lon.start, lon.stop) == (0, 37, 0, 30)


def test_a_selection_that_is_not_a_mapping_names_the_pattern() -> None:
    from xarray_zarrmax.advise.patterns import check_selection

    with pytest.raises(AdviceTypeError) as caught:
        check_selection("box", [slice(0, 3)], ("time", "lat", "lon"), (37, 20, 30), "t2m")
    _check(caught, AdviceTypeError, "pattern 'box': expected its selection as a mapping {dim: index or slice}, e.g. "
                                    "{'time': slice(0, 744)}. Got [slice(0, 3, None)] (list) instead.")


def test_too_many_long_dimensions_are_refused_naming_the_limit() -> None:
    ds = xr.Dataset({"v": (tuple(f"d{i}" for i in range(9)), np.zeros((2,) * 9, dtype="f4"))})
    with pytest.raises(AdviceInputError) as caught:
        xarray_zarrmax.advise(ds, {"full-scan": 1.0}, costs=Costs())
    assert str(caught.value).startswith(
        "expected a data variable with dimensions, none of them empty, and values that are numbers, booleans or "
        "times, to advise on. Got none such: 'v': it has 9 dimensions longer than 1 (d0: 2, d1: 2, d2: 2, d3: 2, "
        "d4: 2, d5: 2, d6: 2, d7: 2, d8: 2); the advisor lays out at most 8 (tuning.MAX_ADVISED_DIMS).")


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"latency_s": -1}, AdviceInputError, "expected Costs latency_s as a number of seconds >= 0. Got -1 instead."),
    ({"request_bps": 0}, AdviceInputError,
     "expected Costs request_bps as a positive number of bytes per second. Got 0 instead."),
    ({"decode_bps": "1e9"}, AdviceTypeError,
     "expected Costs decode_bps as a positive number of bytes per second. Got '1e9' (str) instead."),
    ({"ratio": math.nan}, AdviceInputError,
     "expected Costs ratio as a positive ratio of encoded to decoded bytes. Got nan instead."),
    ({"decode_curve": 5}, AdviceTypeError,
     "expected decode_curve points (chunk bytes > 0, bytes/s > 0). Got 5 (int) instead."),
    ({"decode_curve": [(4096, "fast")]}, AdviceTypeError,  # a str, as for decode_bps: the wrong type
     "expected decode_curve points (chunk bytes > 0, bytes/s > 0). Got (4096, 'fast') (tuple) in [(4096, 'fast')] "
     "instead."),
])
def test_costs_name_what_was_wrong(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    """Was: a ZeroDivisionError deep in the model (request_bps=0), or negative predicted seconds."""
    with pytest.raises(error) as caught:
        Costs(**kwargs)
    _check(caught, error, message)


def test_the_dataarray_accessor_takes_no_variable() -> None:
    with pytest.raises(AdviceTypeError) as caught:
        dataset()["t2m"].zarrmax.advise({"map": 1.0}, variable="t2m", costs=Costs())
    _check(caught, AdviceTypeError, "da.zarrmax.advise() advises on the DataArray itself: it takes no variable=. Got "
                                    "variable='t2m'.")
