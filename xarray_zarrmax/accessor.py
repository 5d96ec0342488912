"""``ds.zarrmax``: this package's Dataset methods, registered with xarray when the package is imported.

>>> import xarray_zarrmax
>>> ds.zarrmax.to_zarr("s3://bucket/out.zarr", storage_options={...})
>>> report = ds.zarrmax.advise({"timeseries": 0.5, "map": 0.5})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import xarray as xr

from .advise import AdviceReport, advise
from .write import to_zarr


@xr.register_dataset_accessor("zarrmax")
class ZarrmaxAccessor:
    """``ds.zarrmax.to_zarr(store, ...)`` is ``xarray_zarrmax.to_zarr(ds, store, ...)``;
    ``ds.zarrmax.advise(patterns, ...)`` is ``xarray_zarrmax.advise(ds, patterns, ...)``."""

    def __init__(self, ds: xr.Dataset) -> None:
        self._ds = ds

    def to_zarr(self, store: Any, **kwargs: Any) -> Any:
        return to_zarr(self._ds, store, **kwargs)

    def advise(self, patterns: Mapping[str, Any], **kwargs: Any) -> AdviceReport:
        return advise(self._ds, patterns, **kwargs)


ZarrmaxAccessor.to_zarr.__doc__ = to_zarr.__doc__
ZarrmaxAccessor.advise.__doc__ = advise.__doc__
