"""Checks of what the advisor's public entry points are given, before anything is probed or costed.

`xarray_zarrmax.advise`, ``ds.zarrmax.advise``, ``to_zarr(..., encoding="advise")``, `Batch` and `Constraints`
run these. Every failure says ``expected <argument> as <what>. Got <value> instead.``: an `AdviceTypeError` (a
TypeError) for a value of the wrong type, an `AdviceInputError` (a ValueError) for one out of range. Both are
`ZarrmaxError`s, so the command line reports them in one line.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from xarray_zarrmax.errors import AdviceInputError, AdviceTypeError

#: Longest value shown in a message as its repr; longer ones (a Dataset, a large list) by their type alone
SHOWN = 80


def shown(value: Any, *, typed: bool = False) -> str:
    """``value`` as a message shows it: its repr (and its type, with ``typed``), or only its type when the repr
    is long or spans lines."""
    try:
        text = repr(value)
    except Exception:  # a repr that fails is no reason to fail differently
        text = ""
    if not text or len(text) > SHOWN or "\n" in text:
        return f"a value of type {type(value).__name__}"
    return f"{text} ({type(value).__name__})" if typed else text


def wrong_type(argument: str, expected: str, value: Any) -> AdviceTypeError:
    return AdviceTypeError(f"expected {argument} as {expected}. Got {shown(value, typed=True)} instead.")


def wrong_value(argument: str, expected: str, value: Any) -> AdviceInputError:
    return AdviceInputError(f"expected {argument} as {expected}. Got {shown(value)} instead.")


def is_real(value: Any) -> bool:
    """A real number, not a boolean (``True`` is an int, but no weight or size anyone means)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def positive_number(argument: str, value: Any, what: str = "a positive number") -> float:
    """``value`` as a float: a real number, finite and above 0."""
    if not is_real(value):
        raise wrong_type(argument, what, value)
    if not math.isfinite(value) or value <= 0:
        raise wrong_value(argument, what, value)
    return float(value)


def nonnegative_number(argument: str, value: Any, what: str = "a number >= 0") -> float:
    """``value`` as a float: a real number, finite and at least 0."""
    if not is_real(value):
        raise wrong_type(argument, what, value)
    if not math.isfinite(value) or value < 0:
        raise wrong_value(argument, what, value)
    return float(value)


def whole_number(argument: str, value: Any, minimum: int = 1, maximum: int | None = None,
                 what: str | None = None) -> int:
    """``value`` as an int from ``minimum`` to ``maximum``."""
    what = what or (f"a whole number >= {minimum}" if maximum is None else
                    f"a whole number from {minimum} to {maximum}")
    if not is_whole(value):
        raise wrong_type(argument, what, value)
    if value < minimum or (maximum is not None and value > maximum):
        raise wrong_value(argument, what, value)
    return int(value)


SHAPE = "a sequence of whole lengths >= 1, one per dimension, e.g. (744, 181, 360)"
ITEMSIZE = "a whole number of bytes >= 1 (the stored dtype's itemsize)"


def check_shape(shape: Any, dims: tuple[Hashable, ...] | None = None) -> tuple[int, ...]:
    """An array's ``shape`` as the advisor's lower-level entry points take it (`rank`, `search`,
    `pattern_selections`, `candidate_layouts`): whole lengths >= 1, at least one (an empty dimension has no layout
    to advise: ``advise`` refuses such a variable too). ``dims``, already checked, name the empty one."""
    if isinstance(shape, str | bytes | Mapping) or not isinstance(shape, Iterable):
        raise wrong_type("shape", SHAPE, shape)
    lengths = tuple(shape)
    if not all(is_whole(n) for n in lengths):
        raise wrong_type("shape", SHAPE, shape)
    if not lengths:
        raise AdviceInputError(f"expected shape as {SHAPE}: the advisor lays out arrays of one dimension or more. "
                               "Got () instead.")
    empty = next((i for i, n in enumerate(lengths) if n < 1), None)
    if empty is not None:
        which = repr(dims[empty]) if dims is not None else str(empty)
        raise AdviceInputError(f"expected shape as {SHAPE}: an empty dimension has no layout to advise. Got "
                               f"{shown(lengths)} instead (dimension {which} has {lengths[empty]} elements).")
    return tuple(int(n) for n in lengths)


def check_array(shape: Any, dims: Any) -> tuple[tuple[Hashable, ...], tuple[int, ...]]:
    """``dims`` and ``shape`` of one array: as many distinct names as `check_shape`'s lengths."""
    expected = "a sequence of dimension names, one per length of shape, e.g. ('time', 'lat', 'lon')"
    if isinstance(dims, str | bytes | Mapping) or not isinstance(dims, Iterable):
        raise wrong_type("dims", expected, dims)
    names = tuple(dims)
    if not all(isinstance(d, Hashable) for d in names):
        raise wrong_type("dims", expected, dims)
    if isinstance(shape, Iterable) and not isinstance(shape, str | bytes | Mapping):
        shape = tuple(shape)  # an iterator is read once, here
        if len(shape) != len(names):
            raise AdviceInputError(f"expected dims and shape of one length (a name per dimension). Got dims "
                                   f"{shown(names)} and shape {shown(shape)} instead.")
    if len(set(names)) < len(names):
        raise AdviceInputError(f"expected dims as distinct names. Got {shown(names)} instead.")
    return names, check_shape(shape, names)


def optional(check: Callable[..., Any], argument: str, value: Any, *args: Any) -> Any:
    return None if value is None else check(argument, value, *args)


def check_dataset(ds: Any) -> None:
    """The advisor's ``ds``: an xarray Dataset (a DataArray has its own ``da.zarrmax.advise``)."""
    import xarray as xr

    if isinstance(ds, xr.DataArray):
        raise AdviceTypeError("expected ds as an xarray.Dataset. Got a DataArray: advise on it with "
                              "da.zarrmax.advise(patterns, ...), or pass da.to_dataset(name=...).")
    if not isinstance(ds, xr.Dataset):
        raise wrong_type("ds", "an xarray.Dataset", ds)


def check_variable(variable: Any) -> None:
    if variable is not None and not isinstance(variable, Hashable):
        raise wrong_type("variable", "the name of a data variable", variable)


def check_store(store: Any, storage_options: Any) -> None:
    """``store``: None, a local directory, or an ``s3://`` URL to probe; ``storage_options``: None or a mapping."""
    if store is not None:
        if not isinstance(store, str | os.PathLike):
            raise wrong_type("store", "a local directory or an s3:// URL to probe (or None)", store)
        text = os.fspath(store)
        scheme = text.split("://", 1)[0].lower() if "://" in text else ""
        if not isinstance(text, str) or scheme not in ("", "file", "s3") or not text.strip():
            raise wrong_value("store", "a local directory or an s3:// URL to probe (or None)", store)
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise wrong_type("storage_options", "a mapping of store options (or None)", storage_options)


def check_progress(progress: Any) -> None:
    if not isinstance(progress, bool) and not callable(progress):
        raise wrong_type("progress", "True, False or a callable (done, total, what)", progress)
