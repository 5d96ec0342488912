"""Write targets: ``write`` to what the ``where`` fixture (tests/conftest.py) gives, a local directory or an
s3:// URL on MinIO, and ``counter``, which numbers the objects' prefixes so that no two tests share one."""

from __future__ import annotations

import itertools
from typing import Any

import xarray as xr

import xarray_zarrmax

#: ``next(counter)`` in a prefix on the session's bucket: a fresh place for each test that writes there
counter = itertools.count()


def write(where: dict[str, Any], ds: xr.Dataset, **kwargs: Any) -> Any:
    """``xarray_zarrmax.to_zarr`` of ``ds`` to ``where``'s target, with its storage options."""
    return xarray_zarrmax.to_zarr(ds, where["target"], **where.get("write", {}), **kwargs)
