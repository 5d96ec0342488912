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


def store_error_like(err: BaseException, message: str) -> StoreAccessError:
    """The `StoreAccessError` for a store's own ``err``: also an instance of the built-in type ``err`` is (a
    ValueError for Icechunk's InvalidInputError, a PermissionError, ...), so ``except`` clauses written for
    engine="zarr", which lets the store's error through, keep working. Where the two cannot be combined
    (AttributeError, ImportError and the like: their instances are laid out differently from an OSError's), a
    plain `StoreAccessError`."""
    kind = next((k for k in type(err).__mro__ if k.__module__ == "builtins"), Exception)
    return _store_error_class(kind.__name__)(message)


_STORE_ERRORS: dict[str, type[StoreAccessError]] = {}


def _store_error_class(name: str) -> type[StoreAccessError]:
    """`StoreAccessError` and built-in type ``name`` in one class, made once (by name, so that it unpickles)."""
    import builtins

    found = _STORE_ERRORS.get(name)
    if found is None:
        kind = getattr(builtins, name, Exception)
        found = StoreAccessError
        if isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(StoreAccessError, kind):
            try:
                found = type(f"StoreAccessError[{name}]", (StoreAccessError, kind), {
                    "__module__": __name__, "__doc__": f"A `StoreAccessError` that is also a {name}.",
                    "__reduce__": lambda self: (_store_error, (name, str(self))),
                    "__str__": Exception.__str__})  # not KeyError's quoted repr
            except TypeError:
                pass
        _STORE_ERRORS[name] = found
    return found


def _store_error(name: str, message: str) -> StoreAccessError:
    return _store_error_class(name)(message)


class ArgumentTypeError(ZarrmaxError, TypeError, AttributeError):
    """An argument of the wrong type, refused before anything is read or written. A TypeError; also an
    AttributeError, which xarray and zarr-python raise for some such arguments as they use them (``group=5``
    opening a store, ``encoding=5`` in ``to_zarr``)."""


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


class AdviceInputError(ZarrmaxError, ValueError):
    """An argument of the layout advisor (`xarray_zarrmax.advise`, ``ds.zarrmax.advise``, ``encoding="advise"``,
    `Batch`, `Constraints`) with a value it cannot use: the message names the argument (and the pattern or
    dimension), what was expected and what was given."""


class AdviceTypeError(AdviceInputError, TypeError):
    """An argument of the layout advisor of the wrong type (a list where a mapping of patterns goes): also a
    TypeError."""


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
