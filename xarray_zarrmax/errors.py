"""Exceptions. Built-in types where they fit (FileNotFoundError, ValueError); these where none does."""

from __future__ import annotations


class ZarrmaxError(Exception):
    """Root of the errors this package raises itself."""


class StoreAccessError(ZarrmaxError, OSError):
    """A store refused or failed a request (credentials, network) after the retries allowed."""


class CorruptDataError(ZarrmaxError, ValueError):
    """Stored bytes are inconsistent: truncated objects, bad shard indexes, checksum mismatches."""


class MetadataError(ZarrmaxError, ValueError):
    """Zarr metadata that is missing, malformed or of an unsupported format."""
