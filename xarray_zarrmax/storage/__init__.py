"""Storage: bytes in and out of every kind of store, one module per backend, both directions.

- `abc`: what every backend implements. A `ByteSource` answers reads: whole objects, byte ranges, a shard's
  index (`get_suffix`), listings, each data read with the object's version (`Fetched`) so that bytes of two
  versions never mix. A `Sink` takes writes: whole objects, and read-merge-writes (`Sink.update`) that never
  lose a concurrent writer's update.
- `local`: a directory (`LocalSource`, `LocalSink`): positional reads, atomic writes, directory locks.
- `obstore`: S3 and any obstore store (`ObstoreSource`, `ObstoreSink`): ETags, ``If-Match``, parallel ranges.
- `zarr_store`: any zarr Store (`ZarrStoreSource`: dicts, fsspec, Icechunk) and Icechunk sessions (`IcechunkSink`).
- `resolve`: what the user passed (a path, a URL with ``storage_options``, a store, a session) turned into one of
  them: `resolve_source`, `resolve_sink`; `glob` for ``open_mfdataset``.
- `registry`: the per-process registry of sources unpickled on a worker, and the fork guard of obstore.
- `retry`: which failed requests are sent again, how often (per request and per process), and what a store's
  overload answers (503 SlowDown, 429) do to the process's requests in flight.

A shard read: `xarray_zarrmax.read.fetch` asks the source `resolve_source` chose for the shard's index
(`ByteSource.get_suffix`) and then its chunks' byte ranges (`ByteSource.get_ranges`, conditional on the index's
version), or for the whole object (`ByteSource.get_large`); a local file is read straight into the output
(`LocalSource.open_file`). A shard write: `xarray_zarrmax.write.dataset` encodes shards and hands them to the
sink `resolve_sink` chose: `Sink.put_many` for whole shards, `Sink.update_many` (a read-merge-write each) for
shards a write covers in part. Nothing here knows xarray or
Zarr's metadata.
"""

from xarray_zarrmax.storage.abc import ByteSource, Fetched, Merge, Sink, Update, check_size
from xarray_zarrmax.storage.local import LocalSink, LocalSource, OpenedFile
from xarray_zarrmax.storage.obstore import ObstoreSink, ObstoreSource, obstore_s3_options, s3_store_from_url
from xarray_zarrmax.storage.resolve import glob, resolve_sink, resolve_source
from xarray_zarrmax.storage.zarr_store import IcechunkSink, ZarrStoreSource, merge_forks

__all__ = [
    "ByteSource",
    "Fetched",
    "IcechunkSink",
    "LocalSink",
    "LocalSource",
    "Merge",
    "ObstoreSink",
    "ObstoreSource",
    "OpenedFile",
    "Sink",
    "Update",
    "ZarrStoreSource",
    "check_size",
    "glob",
    "merge_forks",
    "obstore_s3_options",
    "resolve_sink",
    "resolve_source",
    "s3_store_from_url",
]
