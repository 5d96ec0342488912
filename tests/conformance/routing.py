"""Reads under engine="zarr" sent to engine="zarrmax", for the conformance run of xarray's own Zarr tests.

Two patch points, both installed by `install` and removed by its undo function:

- the registry: xarray looks ``engine="zarr"`` up in ``xarray.backends.common.BACKEND_ENTRYPOINTS`` (its fast
  path for built-in engines, and the source of ``list_engines()`` that guessing walks). `RoutedZarrEntrypoint`
  replaces zarr's class there, so ``open_dataset``, ``open_zarr`` (which hard-codes engine="zarr"),
  ``open_mfdataset``, ``open_datatree``, ``open_groups`` and ``load_*`` all reach `ZarrmaxBackendEntrypoint`.
- ``ZarrStore.load``: how xarray reads a ZarrStore object itself (``xr.decode_cf(store)``, and
  ``open_dataset(store)`` through the "store" engine); it reads the same group with `ZarrmaxStore`.

Writes are never touched: ``to_zarr``, appends and region writes go through ``ZarrStore``'s write methods,
which read what they need (existing variables, region coordinates) with ``open_store_variable``, not ``load``.

There is no fallback: an argument engine="zarr" takes that has a meaning zarrmax cannot honour raises
`NotRouted`, so the test fails and shows up in the comparison.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterable
from typing import Any

from xarray.backends import BackendEntrypoint, plugins
from xarray.backends import common as backends_common
from xarray.backends.zarr import ZarrBackendEntrypoint, ZarrStore

from xarray_zarrmax.backend import ZarrmaxBackendEntrypoint, ZarrmaxStore
from xarray_zarrmax.storage import resolve_source
from xarray_zarrmax.xarray_compat import passes_through

#: Reads that reached this module's entry points since the process started (the plugin counts them per test).
reads = 0


def _count() -> None:
    global reads
    reads += 1


class NotRouted(NotImplementedError):
    """A read the harness cannot send to engine="zarrmax" as engine="zarr" was asked to do it."""


def _read_mode(mode: Any) -> None:
    # "r" is engine="zarr"'s default and the only thing zarrmax does (it never writes), so it is dropped.
    # Other modes open the group for writing ("w" even clears it): not a read.
    if mode != "r":
        raise NotRouted(f"engine='zarrmax' only reads: mode={mode!r} opens the store for writing")


class RoutedZarrEntrypoint(BackendEntrypoint):
    """engine="zarr" with engine="zarr"'s signature and guess, reading through `ZarrmaxBackendEntrypoint`."""

    description = "engine='zarr' routed to engine='zarrmax' (xarray_zarrmax conformance harness)"
    url = ZarrmaxBackendEntrypoint.url
    supports_groups = True  # as engine="zarr": open_datatree/open_groups without an engine may pick it

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        # Guessing is the registry's choice of engine, not a read: engine="zarr"'s rule (a ".zarr" suffix).
        return ZarrBackendEntrypoint().guess_can_open(filename_or_obj)

    @passes_through  # engine="zarr" as xarray's opener called it: read as engine="zarrmax" would be
    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: Any = True,
        decode_times: Any = True,
        concat_characters: Any = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: Any = None,
        decode_timedelta: Any = None,
        group: Any = None,
        mode: Any = "r",
        consolidated: Any = None,
        storage_options: Any = None,
        zarr_format: Any = None,
        store: Any = None,
        engine: Any = None,
        use_zarr_fill_value_as_mask: Any = None,
        cache_members: bool = True,
    ) -> Any:
        _count()
        _read_mode(mode)
        if store is not None:
            # engine="zarr" then reads this already-open ZarrStore and ignores filename_or_obj.
            raise NotRouted("store= hands engine='zarr' an open ZarrStore; engine='zarrmax' takes no such argument")
        # engine: engine="zarr" accepts it and never reads it, so it means nothing for either engine.
        # cache_members: whether a ZarrStore caches its group's member list between calls; zarrmax lists the
        # members once at open and keeps no store object, so both values read the same Dataset.
        del engine, cache_members
        return _zarrmax().open_dataset(
            _normalize(filename_or_obj),
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            drop_variables=drop_variables,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
            group=group,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=zarr_format,
            use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
        )

    @passes_through  # engine="zarr" as xarray's opener called it: read as engine="zarrmax" would be
    def open_datatree(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: Any = True,
        decode_times: Any = True,
        concat_characters: Any = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: Any = None,
        decode_timedelta: Any = None,
        group: Any = None,
        mode: Any = "r",
        consolidated: Any = None,
        storage_options: Any = None,
        zarr_format: Any = None,
    ) -> Any:
        _count()
        _read_mode(mode)
        return _zarrmax().open_datatree(
            _normalize(filename_or_obj),
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            drop_variables=drop_variables,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
            group=group,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=zarr_format,
        )

    @passes_through  # engine="zarr" as xarray's opener called it: read as engine="zarrmax" would be
    def open_groups_as_dict(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        mask_and_scale: Any = True,
        decode_times: Any = True,
        concat_characters: Any = True,
        decode_coords: Any = True,
        drop_variables: str | Iterable[str] | None = None,
        use_cftime: Any = None,
        decode_timedelta: Any = None,
        group: Any = None,
        mode: Any = "r",
        consolidated: Any = None,
        storage_options: Any = None,
        zarr_format: Any = None,
    ) -> Any:
        _count()
        _read_mode(mode)
        return _zarrmax().open_groups_as_dict(
            _normalize(filename_or_obj),
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            drop_variables=drop_variables,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
            group=group,
            consolidated=consolidated,
            storage_options=storage_options,
            zarr_format=zarr_format,
        )


def _zarrmax() -> Any:
    """The entrypoint engine="zarrmax" names, typed Any: its DataTree methods are called with the arguments
    engine="zarr" takes, whatever it declares (the base class raises NotImplementedError)."""
    return ZarrmaxBackendEntrypoint()


def _normalize(filename_or_obj: Any) -> Any:
    """What engine="zarr" does to its target first (``_normalize_path``): a path-like becomes an absolute str."""
    return backends_common._normalize_path(filename_or_obj) if isinstance(filename_or_obj, str | os.PathLike) \
        else filename_or_obj


def _zarrmax_load(self: ZarrStore) -> Any:
    """``ZarrStore.load`` read by zarrmax: the same zarr store and group path, the ZarrStore's fill-value rule."""
    _count()
    group = self.zarr_group
    # The ZarrStore opened its group already, with or without consolidated metadata: read it the same way
    # (and so without the warning an open with consolidated=None gives, which ZarrStore.load never gives).
    consolidated = getattr(group.metadata, "consolidated_metadata", None) is not None
    store = ZarrmaxStore.open(resolve_source(group.store), group=group.path or None, consolidated=consolidated,
                              use_zarr_fill_value_as_mask=self._use_zarr_fill_value_as_mask)
    return store.load()


def _counting(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method``, counting the calls that reach its body (as the routed entry points count theirs: a call
    with an argument the signature refuses is no read in either run)."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def counted(*args: Any, **kwargs: Any) -> Any:
        signature.bind(*args, **kwargs)  # TypeError, as calling it would raise, before counting
        _count()
        return method(*args, **kwargs)

    return counted


def install_counters() -> Callable[[], None]:
    """The control: engine="zarr" reads as it is, only counted, so the runner can tell a test that read through
    engine="zarr" in the control but never reached zarrmax in the routed run (a read that escaped the routing)."""
    saved = {name: ZarrBackendEntrypoint.__dict__[name] for name in ("open_dataset", "open_datatree",
                                                                       "open_groups_as_dict")}
    own_load = ZarrStore.__dict__.get("load")
    for name, method in saved.items():
        setattr(ZarrBackendEntrypoint, name, _counting(method))
    ZarrStore.load = _counting(ZarrStore.load)  # type: ignore[method-assign,assignment]

    def undo() -> None:
        for name, method in saved.items():
            setattr(ZarrBackendEntrypoint, name, method)
        _restore_load(own_load)

    return undo


def _restore_load(own_load: Any) -> None:
    if own_load is None:
        del ZarrStore.load
    else:
        ZarrStore.load = own_load  # type: ignore[method-assign]


def install() -> Callable[[], None]:
    """Route reads to zarrmax; returns the function that puts engine="zarr" back."""
    saved_entry = backends_common.BACKEND_ENTRYPOINTS["zarr"]
    own_load = ZarrStore.__dict__.get("load")  # None: inherited from AbstractDataStore
    backends_common.BACKEND_ENTRYPOINTS["zarr"] = (saved_entry[0], RoutedZarrEntrypoint)
    ZarrStore.load = _zarrmax_load  # type: ignore[method-assign,assignment]
    plugins.refresh_engines()  # list_engines() is cached: rebuilt with the routed class

    def undo() -> None:
        backends_common.BACKEND_ENTRYPOINTS["zarr"] = saved_entry
        _restore_load(own_load)
        plugins.refresh_engines()

    return undo
