"""Exceptions. Built-in types where they fit (FileNotFoundError, ValueError); these where none does.

Where engine="zarr" raises a built-in type (or zarr-python's own class built on one), ours is an instance
of the same built-in types, so ``except`` clauses written for engine="zarr" keep working.
"""

from __future__ import annotations

import gzip
import zlib


class ZarrmaxError(Exception):
    """Root of the errors this package raises itself."""


class StoreAccessError(ZarrmaxError, OSError):
    """A store refused or failed a request (credentials, network) after the retries allowed."""


class CorruptDataError(ZarrmaxError, ValueError):
    """Stored bytes are inconsistent: truncated objects, bad shard indexes, checksum mismatches."""


class DecodeError(CorruptDataError, RuntimeError):
    """A decompressor failed on a chunk's bytes (zarr-python: numcodecs' RuntimeError for zstd and blosc)."""


# gzip and zlib fail with other types in zarr-python (numcodecs calls Python's gzip and zlib): ours are those
# types too. Module-level classes, so they pickle (a dask.distributed worker sends them back by name).


class TruncatedStreamError(DecodeError, EOFError):
    """A gzip stream that ends early (zarr-python: EOFError)."""


class BadGzipError(gzip.BadGzipFile, DecodeError):  # OSError first: its constructor, as for any OSError
    """Bytes that are not a gzip stream (zarr-python: gzip.BadGzipFile, an OSError)."""


class ZlibDecodeError(DecodeError, zlib.error):
    """A zlib (or gzip's deflate) stream zlib rejects (zarr-python: zlib.error)."""


def decode_error_like(err: BaseException, message: str) -> DecodeError:
    """The `DecodeError` for a decompressor's ``err``: also an instance of its type where zarr-python lets that
    type through (gzip, zlib), so ``except`` clauses written for engine="zarr" keep working."""
    for kind, ours in ((gzip.BadGzipFile, BadGzipError), (EOFError, TruncatedStreamError),
                       (zlib.error, ZlibDecodeError)):
        if isinstance(err, kind):
            return ours(message)
    return DecodeError(message)


class MetadataError(ZarrmaxError, ValueError):
    """Zarr metadata that is missing, malformed or of an unsupported format."""


class MetadataRangeError(MetadataError, OverflowError):
    """A value in a metadata document outside its data type's range, a fill value of 256 for uint8
    (zarr-python: OverflowError)."""


class MetadataTypeError(MetadataError, TypeError):
    """A metadata document, or a part of it, is not the JSON type it must be (zarr-python: TypeError)."""


class NodeNotFoundError(MetadataError, FileNotFoundError):
    """No Zarr group where one was expected (zarr-python: GroupNotFoundError, a ValueError and a
    FileNotFoundError)."""


class GroupNotFoundError(NodeNotFoundError, KeyError):
    """``group=`` names a path that holds no group (zarr-python: KeyError or GroupNotFoundError, depending
    on ``consolidated``)."""

    __str__ = Exception.__str__  # not KeyError's quoted repr


class XarrayChanged(ZarrmaxError, RuntimeError):
    """An xarray release changed something xarray_zarrmax reaches into that is not xarray's public API (see
    `xarray_zarrmax.xarray_compat`): refused rather than read or written differently."""


class MissingDimensionsError(MetadataError, KeyError):
    """An array lacks the dimension names xarray needs (xarray's zarr backend: KeyError)."""

    __str__ = Exception.__str__  # not KeyError's quoted repr


# -- signals between our own layers: raised and caught inside the package, never reaching a user ----------


class Unsupported(Exception):
    """The array is outside the fast path (the message says why): it is read by zarr-python instead."""


class ObjectChanged(Exception):
    """The object is no longer the version a read started from (rewritten or deleted): read it afresh."""


class RequestFailed(StoreAccessError):
    """A request the store answered with an error (``status``: its HTTP status, where it said)."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status
