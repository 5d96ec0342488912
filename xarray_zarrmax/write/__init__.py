"""Writes: ``xarray_zarrmax.to_zarr``, one PUT per shard.

Where a shard write goes: `dataset.to_zarr` lets xarray decide the metadata (as ``Dataset.to_zarr`` does) and
commits it in one batch; `plan` maps dask blocks to the stored objects each covers; every object is then encoded
once by its owner task (`codec`, over `xarray_zarrmax.codecs.encode`) and handed to a storage `Sink` in one
request. An object a write covers only in part is merged with what is stored through a conditional PUT, retried
on conflict, so concurrent writers lose nothing. `advised` fills ``encoding="advise"`` from the advisor;
`staging` holds the metadata xarray writes before it is sent.
"""

from xarray_zarrmax.write.dataset import to_zarr

__all__ = ["to_zarr"]
