"""A small sharded store and the means to corrupt it: its first shard's file, and its shard index rewritten
with a valid checksum; ``read_all`` reads the whole array with engine="zarrmax"."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import google_crc32c
import numpy as np
import xarray as xr
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec


def sharded_store(path: Any, *, crc_inner: bool = True) -> str:
    """A 1-D sharded int32 array: 4 chunks of 10 per shard, 2 shards, index (with crc32c) at the end."""
    compressors = [ZstdCodec(level=1)] + ([Crc32cCodec()] if crc_inner else [])
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    arr = group.create_array("v", shape=(80,), chunks=(10,), shards=(40,), dtype="i4",
                             compressors=compressors, dimension_names=["x"])
    arr[:] = np.arange(80, dtype="i4")
    return str(path)


def read_all(path: Any, **kw: Any) -> np.ndarray:
    """Every value of array ``v``, read with engine="zarrmax" through dask (``chunks={}``)."""
    return xr.open_dataset(path, engine="zarrmax", chunks={}, **kw)["v"].values


def shard_file(path: Any) -> str:
    """The file of array ``v``'s first shard."""
    return os.path.join(path, "v", "c", "0")


def rewrite_index(path: Any, edit: Callable[[np.ndarray], None]) -> None:
    """Change the first shard's index entries with ``edit(entries)`` and re-sign the index checksum."""
    blob = bytearray(open(shard_file(path), "rb").read())
    n = 4 * 16 + 4
    entries = np.frombuffer(bytes(blob[-n:-4]), dtype="<u8").reshape(4, 2).copy()
    edit(entries)
    raw = entries.tobytes()
    blob[-n:] = raw + np.uint32(google_crc32c.value(raw)).tobytes()
    open(shard_file(path), "wb").write(bytes(blob))
