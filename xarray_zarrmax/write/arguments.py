"""`to_zarr`'s arguments, checked before anything is opened or written.

What xarray's own writer checks (``mode``, ``region``, ``append_dim`` against the dimensions, encoding
parameters) it still checks, with its own errors. What it would fail on with an error that names nothing (an
``encoding`` that is not a mapping: AttributeError; an unhashable ``append_dim``: TypeError), or take silently
(``compute="no"``, which is true), is refused here, with the type ``Dataset.to_zarr`` raises for the same input
(or a subclass of it) and a message naming the argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xarray_zarrmax.errors import ArgumentTypeError
from xarray_zarrmax.metadata.nodes import parse_group_path
from xarray_zarrmax.storage.resolve import check_storage_options


def check_flag(name: str, value: Any, *, none: bool = False) -> None:
    """``value`` is a bool (or None where ``none``): as zarr-python refuses ``write_empty_chunks=1``."""
    if isinstance(value, bool) or (none and value is None):
        return
    raise ValueError(f"expected {name} as a bool{' or None' if none else ''}. Got {value!r}.")


def check_encoding(ds: Any, encoding: Any) -> None:
    """A mapping of the dataset's variable names to mappings of encoding parameters, or "advise" (or None)."""
    if encoding is None or (isinstance(encoding, str) and encoding == "advise"):
        return
    if isinstance(encoding, str):
        raise ValueError(f"expected encoding as a mapping of variable names, or 'advise'. Got {encoding!r}.")
    if not isinstance(encoding, Mapping):
        raise ArgumentTypeError("expected encoding as a mapping of variable names to mappings of encoding "
                                f"parameters, or 'advise'. Got {type(encoding).__name__}.")
    for name, parameters in encoding.items():
        if name not in ds.variables:
            raise KeyError(f"encoding names {name!r}, which is not a variable of the dataset: expected some of "
                           f"{sorted(map(str, ds.variables))}")
        if not isinstance(parameters, Mapping):
            raise ArgumentTypeError(f"expected encoding[{name!r}] as a mapping of encoding parameters, e.g. "
                                    f"{{'chunks': (100,)}}. Got {type(parameters).__name__}.")


def check_arguments(ds: Any, *, encoding: Any, group: Any, append_dim: Any, storage_options: Any, zarr_format: Any,
                    consolidated: Any, compute: Any, align_chunks: Any, safe_chunks: Any,
                    write_empty_chunks: Any) -> None:
    """Every check above, and those of ``group``, ``append_dim`` and ``zarr_format``."""
    if zarr_format not in (None, 3):
        raise ValueError(f"xarray_zarrmax.to_zarr writes Zarr format 3 only. Got zarr_format={zarr_format!r}.")
    parse_group_path(group)
    try:
        hash(append_dim)
    except TypeError:
        raise ArgumentTypeError(f"expected append_dim as a dimension name (hashable). Got "
                                f"{type(append_dim).__name__}.") from None
    for name, value in (("compute", compute), ("align_chunks", align_chunks), ("safe_chunks", safe_chunks)):
        check_flag(name, value)
    check_flag("consolidated", consolidated, none=True)
    check_flag("write_empty_chunks", write_empty_chunks, none=True)
    check_encoding(ds, encoding)
    check_storage_options(storage_options)  # before anything is resolved: also for encoding="advise"
