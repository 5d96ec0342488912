"""Fuzz the advisor's public entry points (issue #46): `xarray_zarrmax.advise`, ``ds.zarrmax.advise``, `Batch` and
`Constraints`, each argument valid or hostile (a wrong type, a value out of range). With every argument valid
the advice comes; with any hostile, the error is one of our documented input errors (`AdviceTypeError`, a
TypeError; `AdviceInputError`, a ValueError) and its message names one of the hostile arguments. Never an
AttributeError or KeyError from deep inside, never a message naming nothing."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import xarray_zarrmax
from xarray_zarrmax.advise import KNOWN_PATTERNS, AdviceReport, Batch, Constraints, Costs, Layout
from xarray_zarrmax.errors import AdviceInputError, AdviceTypeError

SHAPE = (12, 20, 30)
DATASET = xr.Dataset({"t2m": (("time", "lat", "lon"), np.random.default_rng(0).random(SHAPE).astype("f4"))})

junk = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True, allow_infinity=True),
                 st.text(max_size=4), st.binary(max_size=3), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.just(object()),
                 st.tuples(st.integers(), st.text(max_size=2)))
bad_number = st.one_of(st.sampled_from([0, -1, -0.5, math.nan, math.inf, -math.inf, True, False, "5", [5], None]),
                       st.floats(max_value=0), st.text(max_size=3))
weight = st.floats(1e-3, 1e3)
index = st.integers(-20, 19)
selection = st.one_of(index, st.builds(lambda a, n: slice(a, min(a + n, 20)), st.integers(0, 19), st.integers(1, 5)))
bad_selection = st.one_of(st.integers(20, 10**6), st.integers(-(10**6), -21), st.floats(), st.text(max_size=2),
                          st.builds(lambda a: slice(a, a), st.integers(0, 20)),
                          st.builds(lambda a: slice(0, 10, a), st.integers(2, 5)),
                          st.builds(lambda a: slice(0, a), st.integers(21, 99)), st.booleans(), st.lists(index))


def choose(valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[bool, Any]]:
    """(is it hostile, the value): valid three times in four, so that hostile arguments often come alone."""
    return st.one_of(valid.map(lambda v: (False, v)), valid.map(lambda v: (False, v)),
                     valid.map(lambda v: (False, v)), hostile.map(lambda v: (True, v)))


good_patterns = st.one_of(
    st.dictionaries(st.sampled_from(KNOWN_PATTERNS), weight, min_size=1, max_size=3),
    st.builds(lambda w, k: {"box": (w, {"lat": k})}, weight, selection),
)
bad_patterns = st.one_of(
    junk.filter(lambda v: not isinstance(v, dict) or not v),  # a dict of junk could be a valid mix
    st.dictionaries(st.sampled_from(KNOWN_PATTERNS), bad_number, min_size=1, max_size=2),
    st.builds(lambda name: {name: 1.0}, st.text(max_size=6).filter(lambda n: n not in KNOWN_PATTERNS)),
    st.builds(lambda k: {k: 1.0}, st.one_of(st.integers(), st.none(), st.tuples(st.integers()))),
    st.builds(lambda k: {"box": (1.0, {"lat": k})}, bad_selection),
    st.builds(lambda spec: {"box": spec}, st.one_of(st.lists(st.integers(), max_size=3),
                                                    st.tuples(weight, st.integers(), st.integers()),
                                                    st.tuples(weight, st.lists(st.integers())))),
)
good_layouts = st.sampled_from([[Layout((1, 20, 30))], [Layout((12, 5, 5), (12, 20, 30))],
                                [Layout((2, 10, 10)), Layout((12, 1, 1), (12, 4, 6))]])
bad_layouts = st.one_of(
    st.sampled_from([Layout((1, 20, 30)), [], [Layout((4,))], [Layout((0, 20, 30))], [Layout((4, 5, 5), (6, 5, 5))],
                     [{"chunks": (1, 20, 30)}], "1x20x30", 5, [(1, 20, 30)], [Layout((1.5, 20, 30))]]),  # type: ignore[arg-type]
    st.lists(junk, min_size=1, max_size=2),
)
ARGUMENTS: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any], str]] = {
    # name: (valid, hostile, what the message says when it is the culprit)
    "variable": (st.sampled_from([None, "t2m"]), st.one_of(st.sampled_from(["sst", ["t2m"], {}, ""]),
                                                            st.lists(st.text(max_size=2), max_size=2)), "variable"),
    "layouts": (good_layouts, bad_layouts, "layout"),
    "budget_mb": (st.one_of(st.none(), st.floats(1e3, 1e6)), bad_number.filter(lambda v: v is not None),
                  "budget_mb"),
    "max_object_mb": (st.one_of(st.none(), st.floats(1e3, 1e6)), bad_number.filter(lambda v: v is not None),
                      "max_object_mb"),
    "max_objects": (st.one_of(st.none(), st.integers(10**6, 10**9)),
                    st.sampled_from([0, -1, 2.5, "3", True, [1], math.nan]), "max_objects"),
    "costs": (st.just(Costs()), junk.filter(lambda v: v is not None), "costs"),
    "store": (st.sampled_from([None, "/nonexistent/probe-place", "s3://bucket/scratch"]),
              st.one_of(st.integers(), st.lists(st.text(max_size=2), max_size=2), st.binary(min_size=1, max_size=3),
                        st.sampled_from(["gs://bucket/x", "", "   ", "http://h/x"])), "store"),
    "storage_options": (st.sampled_from([None, {}]), st.one_of(st.text(max_size=3), st.integers(),
                                                               st.lists(st.integers(), max_size=2)),
                        "storage_options"),
    "progress": (st.sampled_from([False, lambda done, total, what: None]),
                 st.one_of(st.none(), st.integers(), st.text(max_size=3)), "progress"),
    "batch": (st.sampled_from([Batch(), Batch(3, {"lat": 4})]), st.one_of(junk, st.just({"windows": 4})), "batch"),
}


def _advise(entry: str, patterns: Any, kwargs: dict[str, Any], ds: Any = DATASET) -> Any:
    if entry == "accessor":
        return ds.zarrmax.advise(patterns, **kwargs)
    return xarray_zarrmax.advise(ds, patterns, **kwargs)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), entry=st.sampled_from(["advise", "accessor"]))
def test_every_argument_is_checked_and_named(data: st.DataObject, entry: str) -> None:
    hostile_patterns, patterns = data.draw(choose(good_patterns, bad_patterns), label="patterns")
    hostile = {"pattern"} if hostile_patterns else set()
    kwargs: dict[str, Any] = {}
    for name, (valid, bad, token) in ARGUMENTS.items():
        is_bad, value = data.draw(choose(valid, bad), label=name)
        kwargs[name] = value
        if is_bad:
            hostile.add(token)
    if not hostile:
        report = _advise(entry, patterns, kwargs)
        assert isinstance(report, AdviceReport) and report.candidates
        return
    with pytest.raises((AdviceTypeError, AdviceInputError)) as caught:
        _advise(entry, patterns, kwargs)
    message = str(caught.value).lower()
    assert any(token in message for token in hostile), (hostile, str(caught.value))
    assert isinstance(caught.value, TypeError | ValueError)
    assert "\n" not in str(caught.value)


@settings(max_examples=40, deadline=None)
@given(ds=st.one_of(junk, st.just(DATASET["t2m"]), st.just(DATASET.to_array())))
def test_the_top_level_refuses_anything_but_a_dataset(ds: Any) -> None:
    with pytest.raises(AdviceTypeError, match=r"^expected ds as an xarray\.Dataset\. Got "):
        xarray_zarrmax.advise(ds, {"map": 1.0}, costs=Costs(), progress=False)


@settings(max_examples=150, deadline=None)
@given(windows=st.one_of(st.integers(-5, 2000), junk), window=st.one_of(
    st.none(), junk, st.dictionaries(st.one_of(st.text(max_size=4), st.integers()),
                                     st.one_of(st.integers(-3, 50), junk), max_size=3)))
def test_batch_accepts_or_names_what_was_wrong(windows: Any, window: Any) -> None:
    valid_windows = windows is None or (isinstance(windows, int) and not isinstance(windows, bool)
                                        and 1 <= windows <= 1024)  # None: the default (issue 42)
    valid_window = window is None or (isinstance(window, dict) and all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 1 for k, v in window.items()))
    if valid_windows and valid_window:
        assert Batch(windows, window).windows == (16 if windows is None else windows)
        return
    with pytest.raises((AdviceTypeError, AdviceInputError), match=r"^expected Batch window"):
        Batch(windows, window)


@settings(max_examples=100, deadline=None)
@given(fields=st.dictionaries(st.sampled_from(["max_object_bytes", "max_objects", "task_memory_bytes"]),
                              st.one_of(st.integers(-3, 10**12), junk), max_size=3))
def test_constraints_accept_or_name_what_was_wrong(fields: dict[str, Any]) -> None:
    bad = [name for name, v in fields.items()
           if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1)]
    if not bad:
        assert Constraints(**fields) == Constraints(**fields)
        return
    with pytest.raises((AdviceTypeError, AdviceInputError)) as caught:
        Constraints(**fields)
    assert any(f"expected Constraints {name} as " in str(caught.value) for name in bad), str(caught.value)
