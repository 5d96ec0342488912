"""Hostile input to the advisor, second round (a review's findings): point indices past int64, saved costs whose
spread or version is off, costs files that are not UTF-8 JSON, variable and dimension names that are not strings,
the lower-level entry points (`rank`, `pattern_selections`, `candidate_layouts`, `Reader`) given what `advise`
never passes, and weights so small that their weighted times underflowed. Each is refused with a message naming
what was expected and what was got, or advised on exactly as the names and ratios given say."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import xarray_zarrmax
from xarray_zarrmax.advise import Costs, Points, Reader, candidate_layouts, pattern_selections, rank
from xarray_zarrmax.errors import AdviceInputError, AdviceTypeError

INT64 = "from -9223372036854775808 to 9223372036854775807 (int64)"
LOGS = Path(__file__).resolve().parents[2] / "docs" / "dev" / "logs"


def small(name: Any = "v", dims: tuple[Any, ...] = ("time", "lat"), shape: tuple[int, ...] = (10, 50),
          dtype: str = "f4") -> xr.Dataset:
    return xr.Dataset({name: (dims, np.zeros(shape, dtype))})


# -- A: point indices past int64 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("indices", "shown"), [
    (np.array([2**64 - 1], dtype=np.uint64), "18446744073709551615"),  # cast as it was: -1, the last element
    (np.array([2**63 + 5], dtype=np.uint64), "9223372036854775813"),  # cast: a negative number shown
    ([2**70], "1180591620717411303424"),  # a bare OverflowError
    ([2**63 + 5, -1], "9223372036854775813"),  # numpy makes these float64
    ([-2**63 - 1], "-9223372036854775809"),
])
def test_point_indices_past_int64_are_refused_as_given(indices: Any, shown: str) -> None:
    with pytest.raises(AdviceInputError) as caught:
        Points({"lat": indices})
    assert str(caught.value) == f"expected Points indices['lat'] as whole numbers {INT64}. Got {shown} instead."


def test_unsigned_point_indices_are_read_where_they_point_never_wrapped() -> None:
    """The last uint64 was read as -1, the last element; one within int64 is kept as it is, and one past the
    dimension is refused as the number given."""
    ds = small()
    with pytest.raises(AdviceInputError, match="Got 18446744073709551615 instead"):
        xarray_zarrmax.advise(ds, {"pts": (1, Points({"lat": np.array([2**64 - 1], dtype=np.uint64)}))},
                              costs=Costs(), progress=False)
    points = Points({"lat": np.array([3, 2**63 - 1], dtype=np.uint64)})
    assert points.indices["lat"].tolist() == [3, 2**63 - 1]
    with pytest.raises(AdviceInputError, match=r"from -50 to 49 .* Got 9223372036854775807 instead"):
        points.isel(("time", "lat"), (10, 50))
    assert Points({"lat": np.array([3], dtype=np.uint64)}).isel(("time", "lat"), (10, 50))["lat"].tolist() == [3]


# -- B: a saved spread that does not hold its cost, a version that is not the whole number 1 ----------------------


def test_a_saved_spread_must_hold_its_cost() -> None:
    """The probe's quartiles hold the cost they measured; a spread beside it gave a range beside the prediction
    (score 0.02 s, range 5-10 s), and one on a cost of 0 above 0 was silently ignored. What the probe writes
    still loads: a spread from 0 on a cost of 0 (it clamps a cost measured below 0, keeping the repeats' high
    end), and every probe of the validation run's log (docs/dev/logs)."""
    for spread, message in (
            ({"latency_s": [5.0, 10.0]}, "spread of latency_s holding its cost, low <= 0.02 <= high"),
            ({"request_s": [1.0, 2.0]}, "spread of request_s holding its cost, low <= 0.0 <= high"),
            ({"request_bps": [1e3, 2e3]}, "spread of request_bps holding its cost, low <= 80000000.0 <= high")):
        with pytest.raises(AdviceInputError) as caught:
            Costs.from_dict(Costs().to_dict() | {"spread": spread})
        low, high = next(iter(spread.values()))
        assert message in str(caught.value) and f"Got [{low!r}, {high!r}] instead." in str(caught.value)
    zero = Costs.from_dict(Costs().to_dict() | {"spread": {"request_s": [0.0, 2e-4], "latency_s": [0.01, 0.03]}})
    assert zero.spread == (("latency_s", 0.01, 0.03), ("request_s", 0.0, 2e-4))
    found = json.loads((LOGS / "advise_validation.json").read_text())
    probes = [p for d in found["datasets"] for p in d["probes"].values()]
    assert len(probes) >= 4
    for p in probes:
        fields = {k: v for k, v in p.items() if k not in ("local", "spread")}
        costs = Costs.from_dict({"format": "xarray_zarrmax.advise.Costs", "version": 1, **fields,
                                 "store": "local" if p["local"] else "remote",
                                 "spread": {n: [lo, hi] for n, lo, hi in p["spread"]}})
        assert Costs.from_dict(json.loads(json.dumps(costs.to_dict()))) == costs


@pytest.mark.parametrize(("version", "shown"), [(True, "True (bool)"), (1.0, "1.0 (float)")])
def test_a_saved_version_is_the_whole_number_1(version: Any, shown: str) -> None:
    with pytest.raises(AdviceInputError) as caught:
        Costs.from_dict(Costs().to_dict() | {"version": version})
    assert re.search(rf"version 1 \(a whole number\)\. Got .*version {re.escape(shown)} instead", str(caught.value))


# -- C: a costs file that is not UTF-8 JSON -----------------------------------------------------------------------


@pytest.mark.parametrize(("content", "got"), [
    (b"\xff\xfe garbage", "Got bytes that are not UTF-8 text (at byte 0) instead."),
    (b"[" * 100_000, "Got JSON nested too deep to parse instead."),
    (b'{"latency_s": 1' + b"0" * 5000 + b"}", "Got invalid JSON (Exceeds the limit"),
])
def test_loading_costs_that_are_not_utf8_json_names_the_file(tmp_path: Path, content: bytes, got: str) -> None:
    path = tmp_path / "costs.json"
    path.write_bytes(content)
    with pytest.raises(AdviceInputError) as caught:
        Costs.load(path)
    assert str(caught.value).startswith(f"expected {str(path)!r} to hold costs saved as JSON (Costs.save). {got}")


# -- E: names that are not strings --------------------------------------------------------------------------------


def test_a_variable_named_by_an_int_is_advised_under_that_name() -> None:
    for variable in ({}, {"variable": 1}):
        report = xarray_zarrmax.advise(small(1), {"timeseries": 1}, costs=Costs(), progress=False, **variable)
        assert report.variable == 1 and report.best.variables == (1,) and list(report.best.encoding) == [1]


def test_variables_named_1_and_1_as_a_string_are_two() -> None:
    ds = xr.Dataset({"1": (("time", "x"), np.zeros((10, 20), "f4")), 1: (("time", "y"), np.zeros((10, 5), "f8"))})
    one = xarray_zarrmax.advise(ds, {"timeseries": 1}, costs=Costs(), progress=False, variable=1)
    assert (one.variable, one.dtype, one.shape, one.best.variables) == (1, "float64", (10, 5), (1,))
    text = xarray_zarrmax.advise(ds, {"timeseries": 1}, costs=Costs(), progress=False, variable="1")
    assert (text.variable, text.dtype, text.shape, text.best.variables) == ("1", "float32", (10, 20), ("1",))
    with pytest.raises(AdviceInputError, match=r"no data variable 2: the dataset has \['1', 1\]"):
        xarray_zarrmax.advise(ds, {"timeseries": 1}, costs=Costs(), progress=False, variable=2)


def test_dimensions_named_by_ints_are_selected_by_those_names() -> None:
    ds = small(dims=(0, 1))
    report = xarray_zarrmax.advise(ds, {"box": (1, {0: slice(0, 3)})}, costs=Costs(), progress=False)
    assert report.dims == (0, 1) and report.best.predictions["box"].counts.decoded_bytes > 0
    with pytest.raises(AdviceInputError, match=r"selects dimension '0', which variable 'v' does not have: its "
                                               r"dimensions are \(0, 1\)"):
        xarray_zarrmax.advise(ds, {"box": (1, {"0": slice(0, 3)})}, costs=Costs(), progress=False)


# -- F: the lower-level entry points ------------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "error", "message"), [
    ({"concurrency": 0}, AdviceInputError, "expected Reader concurrency as a whole number >= 1. Got 0 instead."),
    ({"concurrency": 1.5}, AdviceTypeError, "expected Reader concurrency as a whole number >= 1. Got 1.5 (float)"),
    ({"concurrency": True}, AdviceTypeError, "expected Reader concurrency as a whole number >= 1. Got True (bool)"),
    ({"threads": 0}, AdviceInputError, "expected Reader threads as a whole number >= 1. Got 0 instead."),
    ({"split_size": 0}, AdviceInputError, "expected Reader split_size as a whole number >= 1. Got 0 instead."),
    ({"inflight_bytes": -1}, AdviceInputError, "expected Reader inflight_bytes as a whole number >= 1. Got -1"),
    ({"coalesce_gap": -1}, AdviceInputError, "expected Reader coalesce_gap as a whole number >= 0. Got -1"),
    ({"task_bytes": -1}, AdviceInputError, "expected Reader task_bytes as a whole number >= 0. Got -1"),
    ({"full_shard_fraction": 1.5}, AdviceInputError, "expected Reader full_shard_fraction as a number from 0 to 1"),
    ({"full_shard_fraction": "0.5"}, AdviceTypeError, "Got '0.5' (str) instead."),
    ({"local": "yes"}, AdviceTypeError, "expected Reader local as True or False. Got 'yes' (str) instead."),
])
def test_a_reader_is_checked(fields: dict[str, Any], error: type[Exception], message: str) -> None:
    """A concurrency of 0 divided by zero in the counting, reached through `rank`."""
    with pytest.raises(error) as caught:
        Reader(**fields)
    assert message in str(caught.value)


def test_rank_refuses_dims_and_shape_that_describe_no_array() -> None:
    def ranked(shape: Any, dims: Any, **more: Any) -> Any:
        return rank(shape, dims, 4, {"map": 1}, **({"costs": Costs(), "reader": Reader()} | more))

    with pytest.raises(AdviceInputError, match=r"expected dims and shape of one length \(a name per dimension\)\. "
                                               r"Got dims \('time',\) and shape \(10, 10\) instead\."):
        ranked((10, 10), ("time",))  # was: a layout of two dimensions, silently
    with pytest.raises(AdviceInputError, match=r"an empty dimension has no layout to advise\. Got \(0, 10\) instead "
                                               r"\(dimension 'time' has 0 elements\)"):
        ranked((0, 10), ("time", "x"))  # was: "the constraints together rule out every layout", none given
    with pytest.raises(AdviceInputError, match=r"expected dims as distinct names\. Got \('x', 'x'\)"):
        ranked((10, 10), ("x", "x"))
    with pytest.raises(AdviceTypeError, match=r"expected dims as a sequence of dimension names"):
        ranked((10,), "x")
    with pytest.raises(AdviceTypeError, match=r"expected reader as xarray_zarrmax\.advise\.Reader\(\.\.\.\)"):
        ranked((10, 10), ("time", "x"), reader=None)
    assert len(ranked([10, np.int64(10)], ["time", "x"])[0].layout.chunks) == 2  # any sequence of whole lengths


def test_pattern_selections_and_candidate_layouts_check_their_array() -> None:
    with pytest.raises(AdviceInputError, match=r"Got \(0, 10\) instead \(dimension 'time' has 0 elements\)"):
        pattern_selections("map", 1.0, ("time", "x"), (0, 10))  # was: Axis(start=-1, stop=0)
    with pytest.raises(AdviceInputError, match=r"Got dims \('a', 'b'\) and shape \(10,\) instead"):
        pattern_selections("map", 1.0, ("a", "b"), (10,))
    with pytest.raises(AdviceInputError, match=r"arrays of one dimension or more\. Got \(\) instead\."):
        candidate_layouts((), 4)  # at the call, not at the first layout (was: numpy's reshape error)
    with pytest.raises(AdviceInputError, match=r"Got \(10, 0\) instead \(dimension 1 has 0 elements\)"):
        candidate_layouts((10, 0), 4)
    with pytest.raises(AdviceInputError, match=r"expected itemsize as a whole number of bytes >= 1"):
        candidate_layouts((10,), 0)


# -- G: only the weights' ratios decide ---------------------------------------------------------------------------


def test_scaling_every_weight_leaves_the_advice_as_it_was() -> None:
    """Weights of 1e-320 each made every weighted time underflow: another layout won (at 5e-324 every score was
    0). The scores stay weight x seconds, as given (below the smallest float, 0)."""
    ds = small(shape=(40, 30))
    mix = {"timeseries": 1.0, "full-scan": 1.0}
    one = xarray_zarrmax.advise(ds, mix, costs=Costs(), progress=False)
    for scale in (1e-300, 1e-320, 5e-324, 1e300, 1e307):
        scaled = xarray_zarrmax.advise(ds, {name: w * scale for name, w in mix.items()}, costs=Costs(),
                                       progress=False)
        assert [c.layout for c in scaled.candidates[:5]] == [c.layout for c in one.candidates[:5]], scale
        if scale >= 1e-300:
            assert scaled.best.score == pytest.approx(one.best.score * scale, rel=1e-12)


def test_a_weight_past_a_floats_range_is_refused() -> None:
    with pytest.raises(AdviceInputError, match=r"expected a positive weight for pattern 'map'\. Got a value of type "
                                               r"int instead\."):
        xarray_zarrmax.advise(small(), {"map": 10**400}, costs=Costs(), progress=False)  # was: OverflowError
