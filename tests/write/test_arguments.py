"""to_zarr's arguments of the wrong type or value: refused before anything is written, with an error of the type
``Dataset.to_zarr`` raises for the same input (or a subclass of it) and a message naming the argument."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import xarray_zarrmax
from xarray_zarrmax.errors import ArgumentTypeError, ZarrmaxError


def dataset() -> xr.Dataset:
    return xr.Dataset({"v": (("x",), np.arange(10.0))}, coords={"x": np.arange(10)})


def xarray_error(target: Any, **kwargs: Any) -> type[BaseException] | None:
    """What ``Dataset.to_zarr`` (engine zarr, Zarr v3) raises for ``kwargs``; None where it writes."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dataset().to_zarr(target, **{"zarr_format": 3, **kwargs})
    except Exception as err:
        return type(err)
    return None


# (arguments, whether the target exists first, the message ours gives: naming the argument)
CASES: list[tuple[dict[str, Any], bool, str]] = [
    ({"mode": 5}, False, "mode=5"),
    ({"mode": "q"}, False, "mode='q'"),
    ({"region": 5}, True, "``region`` must be a dict"),
    ({"region": {"x": 5}}, True, "all values in ``region`` must be slice objects"),
    ({"region": {"y": slice(0, 2)}}, True, "all keys in ``region`` are not in Dataset dimensions"),
    ({"region": {"x": slice(0, 2, 2)}}, True, "step on all slices in ``region`` must be 1"),
    ({"encoding": 5}, False, "expected encoding as a mapping of variable names to mappings of encoding parameters, "
                             "or 'advise'. Got int."),
    ({"encoding": [("v", {})]}, False, "expected encoding as a mapping of variable names to mappings of encoding "
                                       "parameters, or 'advise'. Got list."),
    ({"encoding": {"v": 5}}, False, "expected encoding['v'] as a mapping of encoding parameters, e.g. "
                                    "{'chunks': (100,)}. Got int."),
    ({"encoding": {"nope": {}}}, False, "encoding names 'nope', which is not a variable of the dataset: expected "
                                        "some of ['v', 'x']"),
    ({"encoding": {"v": {"bad": 1}}}, False, "unexpected encoding parameters for zarr backend"),
    ({"append_dim": "y"}, True, "append_dim='y' does not match any existing dataset dimensions"),
    ({"append_dim": ["x"]}, True, "expected append_dim as a dimension name (hashable). Got list."),
    ({"group": 5}, False, "expected group as a str or None. Got int: 5"),
    ({"group": ["a"]}, False, "expected group as a str or None. Got list: ['a']"),
    ({"zarr_format": "3"}, False, "zarr_format='3'"),
    ({"write_empty_chunks": 1}, False, "expected write_empty_chunks as a bool or None. Got 1."),
]


@pytest.mark.parametrize(("kwargs", "existing", "message"), CASES, ids=[repr(c[0]) for c in CASES])
def test_bad_arguments_raise_what_dataset_to_zarr_raises(tmp_path: Path, kwargs: dict[str, Any], existing: bool,
                                                         message: str) -> None:
    ours, theirs = tmp_path / "ours.zarr", tmp_path / "theirs.zarr"
    if existing:
        xarray_zarrmax.to_zarr(dataset(), ours)
        dataset().to_zarr(theirs, zarr_format=3)
    kind = xarray_error(theirs, **kwargs)
    assert kind is not None
    with pytest.raises(kind, match=re.escape(message)):
        xarray_zarrmax.to_zarr(dataset().isel(x=slice(0, 2)) if "region" in kwargs else dataset(), ours, **kwargs)
    assert existing or not ours.exists()


@pytest.mark.parametrize("options", [5, "anon=true", [("anon", True)]])
def test_storage_options_that_are_not_a_mapping(options: Any) -> None:
    url = "s3://bucket/out.zarr"
    kind = xarray_error(url, storage_options=options)
    assert kind is TypeError
    with pytest.raises(TypeError, match=re.escape(f"expected storage_options as a mapping of option names to "
                                                  f"values. Got {type(options).__name__}.")):
        xarray_zarrmax.to_zarr(dataset(), url, storage_options=options)


def test_storage_option_names_that_are_not_strings_never_show_a_value() -> None:
    assert xarray_error("s3://bucket/out.zarr", storage_options={1: "S3CRET"}) is TypeError
    with pytest.raises(TypeError, match=r"^expected storage_options names as strings. Got 1 \(int\).$") as info:
        xarray_zarrmax.to_zarr(dataset(), "s3://bucket/out.zarr", storage_options={1: "S3CRET"})
    assert "S3CRET" not in str(info.value)


@pytest.mark.parametrize("target", [5, 1.5, None, [1], b"out.zarr", object()])
def test_a_target_of_the_wrong_type(tmp_path: Path, target: Any) -> None:
    assert xarray_error(target) in (TypeError, None)  # None: xarray writes to a new MemoryStore
    with pytest.raises(TypeError, match=f"to_zarr writes to a local path, .* Got builtins.{type(target).__name__} "):
        xarray_zarrmax.to_zarr(dataset(), target)


@pytest.mark.parametrize("name", ["compute", "align_chunks", "safe_chunks", "consolidated"])
@pytest.mark.parametrize("value", ["no", 0, 1.0, [True]])
def test_flags_must_be_bools(tmp_path: Path, name: str, value: Any) -> None:
    """``compute="no"`` is truthy: xarray computes; refused here, as ``write_empty_chunks`` is by zarr-python."""
    none = " or None" if name == "consolidated" else ""
    with pytest.raises(ValueError, match=re.escape(f"expected {name} as a bool{none}. Got {value!r}.")):
        xarray_zarrmax.to_zarr(dataset(), tmp_path / "a.zarr", **{name: value})
    assert not (tmp_path / "a.zarr").exists()


def test_argument_type_errors_are_also_the_attribute_errors_xarray_raises(tmp_path: Path) -> None:
    """encoding=5: xarray's AttributeError ('int' object has no attribute 'items'); ours is both."""
    assert xarray_error(tmp_path / "theirs.zarr", encoding=5) is AttributeError
    with pytest.raises(AttributeError, match=re.escape("expected encoding as a mapping")) as info:
        xarray_zarrmax.to_zarr(dataset(), tmp_path / "ours.zarr", encoding=5)
    assert type(info.value) is ArgumentTypeError
    assert isinstance(info.value, TypeError) and isinstance(info.value, ZarrmaxError)


def test_the_accessor_checks_the_same(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape("expected compute as a bool. Got 'no'.")):
        dataset().zarrmax.to_zarr(tmp_path / "a.zarr", compute="no")
    with pytest.raises(AttributeError, match=re.escape("expected encoding as a mapping")):
        dataset().zarrmax.to_zarr(tmp_path / "a.zarr", encoding=5)
