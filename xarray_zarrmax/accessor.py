"""``ds.zarrmax`` and ``da.zarrmax``: this package's Dataset and DataArray methods, registered with xarray when
the package is imported.

>>> import xarray_zarrmax
>>> ds.zarrmax.to_zarr("s3://bucket/out.zarr", storage_options={...})
>>> report = ds.zarrmax.advise({"timeseries": 0.5, "map": 0.5})
>>> ds["t2m"].zarrmax.to_zarr("t2m.zarr")      # stored as DataArray.to_zarr stores it
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import xarray as xr

from xarray_zarrmax.advise.advisor import advise
from xarray_zarrmax.advise.report import AdviceReport
from xarray_zarrmax.errors import AdviceTypeError
from xarray_zarrmax.write.dataset import _as_dataset, to_zarr


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


@xr.register_dataarray_accessor("zarrmax")
class ZarrmaxDataArrayAccessor:
    """``da.zarrmax.to_zarr(store, ...)`` is ``xarray_zarrmax.to_zarr(da, store, ...)`` (the store
    ``DataArray.to_zarr`` writes, which ``xr.open_dataarray`` reads); ``da.zarrmax.advise(patterns, ...)``
    advises on the DataArray's values, in the Dataset that store holds (the variable named as the DataArray,
    or xarray's placeholder name where it has none or is named like a coordinate or dimension)."""

    def __init__(self, da: xr.DataArray) -> None:
        self._da = da

    def to_zarr(self, store: Any, **kwargs: Any) -> Any:
        return to_zarr(self._da, store, **kwargs)

    def advise(self, patterns: Mapping[str, Any], **kwargs: Any) -> AdviceReport:
        if "variable" in kwargs:
            raise AdviceTypeError("da.zarrmax.advise() advises on the DataArray itself: it takes no variable=. Got "
                                  f"variable={kwargs['variable']!r}.")
        # the Dataset to_zarr stores for it (its name, else xarray's placeholder): what encoding="advise" sees
        dataset = _as_dataset(self._da)
        (name,) = dataset.data_vars
        if not isinstance(name, str):
            dataset = dataset.rename({name: str(name)})
        return advise(dataset, patterns, variable=str(name), **kwargs)


for _accessor in (ZarrmaxAccessor, ZarrmaxDataArrayAccessor):
    _accessor.to_zarr.__doc__ = to_zarr.__doc__
    _accessor.advise.__doc__ = advise.__doc__
