"""xarray_zarrmax: read Zarr into xarray and dask at the speed of the storage.

``xr.open_dataset(url_or_store, engine="zarrmax", chunks={})``: one dask task per shard.
``xarray_zarrmax.to_zarr(ds, url_or_store)`` or ``ds.zarrmax.to_zarr(url_or_store)``: one dask task and one PUT
per shard.
"""

from __future__ import annotations

from xarray_zarrmax import accessor as accessor  # registers ds.zarrmax with xarray
from xarray_zarrmax.advise.advisor import advise, calibrate
from xarray_zarrmax.advise.report import AdviceReport
from xarray_zarrmax.config import Config, get_config, set_config
from xarray_zarrmax.core.accounting import RequestCounts, request_counts
from xarray_zarrmax.errors import CorruptDataError, DecodeError, MetadataError, StoreAccessError, ZarrmaxError
from xarray_zarrmax.read.chunk_cache import CacheInfo, cache_info, clear_cache
from xarray_zarrmax.storage import glob
from xarray_zarrmax.write.dataset import to_zarr

__version__ = "0.8.0"

__all__ = [
    "AdviceReport",
    "CacheInfo",
    "Config",
    "CorruptDataError",
    "DecodeError",
    "MetadataError",
    "RequestCounts",
    "StoreAccessError",
    "ZarrmaxError",
    "__version__",
    "advise",
    "cache_info",
    "calibrate",
    "clear_cache",
    "get_config",
    "glob",
    "request_counts",
    "set_config",
    "to_zarr",
]
