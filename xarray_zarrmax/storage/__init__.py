"""Storage: bytes in and out of every kind of store, one module per backend, both directions.

A read asks a `ByteSource` for whole objects, byte ranges and listings; a write hands a `Sink` encoded objects
and conditional updates. `resolve_source` and `resolve_sink` turn what a user passes (a path, a URL with
``storage_options``, an obstore or zarr store, an Icechunk session) into one of them. Nothing here knows xarray
or Zarr's metadata.
"""

from xarray_zarrmax.storage.sinks import Sink, Update, merge_forks, resolve_sink
from xarray_zarrmax.storage.sources import (
    ByteSource,
    Fetched,
    LocalSource,
    OpenedFile,
    check_size,
    glob,
    resolve_source,
    s3_store_from_url,
)

__all__ = [
    "ByteSource",
    "Fetched",
    "LocalSource",
    "OpenedFile",
    "Sink",
    "Update",
    "check_size",
    "glob",
    "merge_forks",
    "resolve_sink",
    "resolve_source",
    "s3_store_from_url",
]
