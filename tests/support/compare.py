"""Comparing engine="zarrmax" with engine="zarr" (the oracle): whole Datasets, arrays, a store read back by both
engines, and the built-in types of their errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from xarray_zarrmax.testing import MinioServer


def assert_same_dataset(ours: xr.Dataset, oracle: xr.Dataset) -> None:
    """``ours`` is identical to ``oracle``, and more: every variable's values have the same dtype, and its encoding
    the same keys and values (``source`` and ``preferred_chunks`` aside)."""
    xr.testing.assert_identical(ours, oracle)
    for name in oracle.variables:  # identical() compares values, not their dtypes
        a, b = ours[name].values.dtype, oracle[name].values.dtype
        assert a == b, (name, a, b)
        a, b = ours[name].encoding, oracle[name].encoding
        assert set(a) - {"source"} == set(b) - {"source"}, name
        for key in b:
            if key in ("preferred_chunks", "source"):
                continue
            same = a[key] == b[key] or (np.ndim(b[key]) == 0 and pd.isna(b[key]) and pd.isna(a[key]))
            assert same, (name, key, a[key], b[key])


def assert_same_values(ours: xr.DataArray, oracle: xr.DataArray) -> None:
    """The two arrays read the same values, dtype, shape and dimensions (NaN equal to NaN, NaT to NaT)."""
    a, b = ours.values, oracle.values
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert ours.dims == oracle.dims, (ours.dims, oracle.dims)
    if a.dtype == object:  # CF masking of a bool or string array gives objects with NaN: compare null-aware
        assert xr.DataArray(a).identical(xr.DataArray(b)), (a, b)
    else:
        np.testing.assert_array_equal(a, b)  # NaN equals NaN, NaT equals NaT


def check_reads(target: Any, expected: xr.Dataset, oracle: Any = None, **kwargs: Any) -> None:
    """Both engines read back exactly ``expected``: values, dtypes, attributes, CF encoding. ``oracle``: what
    engine="zarr" opens when it cannot open ``target`` itself (s3:// needs s3fs; an ObjectStore does not)."""
    for engine, what, options in (("zarr", oracle or target, {} if oracle is not None else kwargs),
                                  ("zarrmax", target, kwargs)):
        with xr.open_dataset(what, engine=engine, **options) as got:
            xr.testing.assert_identical(got.load(), expected)


def s3_oracle(minio: MinioServer, url: str) -> Any:
    """zarr's ObjectStore over the same objects: what engine="zarr" reads an s3:// URL with here."""
    from zarr.storage import ObjectStore

    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    return ObjectStore(minio.obstore(bucket, prefix), read_only=True)


def builtin_types(err: BaseException) -> set[type]:
    """The built-in exception classes an error is an instance of (zarr's own classes are built on them)."""
    return {c for c in type(err).__mro__ if c.__module__ == "builtins" and c not in (BaseException, Exception, object)}
