"""xarray_zarrmax: read Zarr into xarray and dask at the speed of the storage.

``xr.open_dataset(url_or_store, engine="zarrmax", chunks={})``: one dask task per shard.
``xarray_zarrmax.to_zarr(ds, url_or_store)`` or ``ds.zarrmax.to_zarr(url_or_store)``: one dask task and one PUT
per shard.
"""

from __future__ import annotations

from . import accessor as accessor  # registers ds.zarrmax with xarray
from .accounting import RequestCounts, request_counts
from .advise import AdviceReport, advise
from .config import Config, get_config, set_config
from .errors import CorruptDataError, DecodeError, MetadataError, StoreAccessError, ZarrmaxError
from .stores import glob
from .write import to_zarr

__version__ = "0.1.0"

__all__ = [
    "AdviceReport",
    "Config",
    "CorruptDataError",
    "DecodeError",
    "MetadataError",
    "RequestCounts",
    "StoreAccessError",
    "ZarrmaxError",
    "__version__",
    "advise",
    "get_config",
    "glob",
    "request_counts",
    "set_config",
    "to_zarr",
]
