"""The xarray backend: what ``engine="zarrmax"`` is, the only wing that builds xarray objects when reading.

- `entrypoint`: `ZarrmaxBackendEntrypoint`, registered with xarray (setup.cfg): ``open_dataset``,
  ``open_datatree``, ``open_groups``.
- `options`: their keywords, written once (`OpenOptions`), and the signature xarray sees.
- `store`: `ZarrmaxStore`, one Zarr group as an xarray data store (dimensions, attributes, encoding, fill values,
  ``preferred_chunks``), decoded by xarray's own ``StoreBackendEntrypoint`` as engine="zarr"'s store is.
- `arrays`: the lazy arrays xarray indexes: `ZarrmaxArray` reads a selection through `xarray_zarrmax.read` (the
  fast path, on the CPU or a device), `FallbackArray` through zarr-python.
- `chunks`: chunk sizes as xarray reports them, dask tasks grouped for ``chunks={}``, device dask arrays.

A shard read starts here: xarray indexes a `ZarrmaxArray`, which asks `xarray_zarrmax.read.fetch` for the
selection. What this wing uses of xarray beyond its public API goes through `xarray_zarrmax.xarray_compat`.
"""

from xarray_zarrmax.backend.arrays import FallbackArray, ZarrmaxArray
from xarray_zarrmax.backend.entrypoint import ZarrmaxBackendEntrypoint
from xarray_zarrmax.backend.options import OpenOptions
from xarray_zarrmax.backend.store import ZarrmaxStore

__all__ = ["FallbackArray", "OpenOptions", "ZarrmaxArray", "ZarrmaxBackendEntrypoint", "ZarrmaxStore"]
