"""open_dataset's keywords of the wrong type: an error of the type engine="zarr" raises for the same input (or a
subclass of it), with a message naming the keyword."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr

from xarray_zarrmax.errors import ArgumentTypeError


@pytest.fixture
def path(tmp_path: Path) -> Path:
    group = zarr.open_group(tmp_path / "d.zarr", mode="w", zarr_format=3)
    group.create_array("v", shape=(4,), chunks=(2,), dtype="f4", dimension_names=["x"])[:] = np.arange(4)
    zarr.consolidate_metadata(tmp_path / "d.zarr")
    return tmp_path / "d.zarr"


def engine_zarr_error(target: Any, **kwargs: Any) -> type[BaseException] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            xr.open_dataset(target, engine="zarr", **kwargs)
    except Exception as err:
        return type(err)
    return None


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"group": 5}, "expected group as a str or None. Got int: 5"),
    ({"drop_variables": 5}, "expected drop_variables as a name or an iterable of names. Got int."),
    ({"drop_variables": [["v"]]}, "expected drop_variables as a name or an iterable of names. Got list."),
], ids=repr)
def test_keywords_of_the_wrong_type(path: Path, kwargs: dict[str, Any], message: str) -> None:
    kind = engine_zarr_error(path, **kwargs)
    assert kind in (AttributeError, TypeError)  # group=5: AttributeError ('int' object has no attribute ...)
    with pytest.raises(kind, match=re.escape(message)) as info:
        xr.open_dataset(path, engine="zarrmax", **kwargs)
    assert type(info.value) is ArgumentTypeError


def test_variables_of_the_wrong_type(path: Path) -> None:
    with pytest.raises(TypeError, match=re.escape("expected variables as a name or an iterable of names. Got int.")):
        xr.open_dataset(path, engine="zarrmax", variables=5)
    assert list(xr.open_dataset(path, engine="zarrmax", variables="v").data_vars) == ["v"]  # a str is one name


@pytest.mark.parametrize("options", [5, "anon=true", [("anon", True)], {1: "S3CRET"}], ids=repr)
def test_storage_options_that_are_not_a_mapping_of_names(options: Any) -> None:
    url = "s3://bucket/x.zarr"
    assert engine_zarr_error(url, storage_options=options) is TypeError
    expected = ("expected storage_options names as strings. Got 1 (int)." if isinstance(options, dict) else
                f"expected storage_options as a mapping of option names to values. Got {type(options).__name__}.")
    with pytest.raises(TypeError, match=f"^{re.escape(expected)}$"):
        xr.open_dataset(url, engine="zarrmax", storage_options=options)
