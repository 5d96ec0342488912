"""Everything xarray_zarrmax uses of xarray that is not public API, one function per dependency.

The rest of the package uses xarray's public API and the hooks xarray documents for backends ("How to add a
new backend": `xarray.backends.BackendEntrypoint` and `BackendArray`, `xarray.core.indexing`'s
``explicit_indexing_adapter``, ``IndexingSupport``, ``LazilyIndexedArray`` and its indexer classes) plus what
`xarray.backends` exports for backends built on xarray's own data stores (``AbstractDataStore``,
``StoreBackendEntrypoint``, as engine="zarr" is built). What neither offers is here, and each function fails
loudly (`XarrayChanged`, a RuntimeError, naming the xarray version and what changed) rather than change our
behaviour when xarray changes what it reaches into. `DEPENDENCIES` lists them; ``python -m
xarray_zarrmax.xarray_compat`` prints them with the installed xarray and whether each is still as expected
(the CI log shows it), and tests/backend/test_xarray_compat.py holds one test per dependency.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

import xarray

from xarray_zarrmax.errors import XarrayChanged


def _changed(dependency: str, what: str) -> XarrayChanged:
    """The error of a dependency xarray changed: the xarray version, what changed, what we use it for."""
    found = next((d for d in DEPENDENCIES if d.name == dependency), None)
    why = f" xarray_zarrmax uses it to {found.why}." if found is not None else ""
    return XarrayChanged(
        f"xarray {xarray.__version__} changed what xarray_zarrmax.xarray_compat.{dependency} reaches into: "
        f"{what}.{why} Install an xarray release this xarray_zarrmax supports, or report it."
    )


@functools.cache
def _verified(dependency: str) -> None:
    """The dependency's check, run on its first use in a process (a failed check runs, and raises, each time):
    a changed signature raises the error of `_changed` rather than a TypeError from inside xarray."""
    next(d for d in DEPENDENCIES if d.name == dependency).check()


def _parameters(func: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(func).parameters)


def _require_parameters(dependency: str, label: str, func: Callable[..., Any], names: Iterable[str]) -> None:
    missing = [n for n in names if n not in _parameters(func)]
    if missing:
        raise _changed(dependency, f"{label} no longer takes {', '.join(missing)} (its parameters: "
                                   f"{', '.join(_parameters(func))})")


def _import(dependency: str, module: str, name: str) -> Any:
    try:
        return getattr(__import__(module, fromlist=[name]), name)
    except (ImportError, AttributeError):
        raise _changed(dependency, f"{module}.{name} is gone") from None


# -- which call of xarray's opener an entrypoint method serves -------------------------------------------------

#: xarray's functions that open through a backend and keep ``chunks`` and ``create_default_indexes`` to
#: themselves, and the module they live in
OPENERS = ("open_dataset", "open_datatree", "open_groups")
OPENER_MODULE = "xarray.backends.api"

#: the xarray release whose openers first took ``create_default_indexes`` (before it, indexes were always built)
_DEFAULT_INDEXES_SINCE = "2025.7.1"

#: the code of functions between xarray's opener and an entrypoint method that hand the method's result back
#: unchanged (`opener_call` looks through them)
_PASS_THROUGH: set[CodeType] = set()


@dataclass(frozen=True)
class OpenerCall:
    """What xarray's opener does with the calling entrypoint method's result, where we can know it: options
    xarray keeps to itself rather than pass to backends."""

    builds_indexes: bool  # default indexes built from the result: index coordinates are read during the open
    dask_default: bool  # ``chunks={}``: each variable's dask chunks are its ``preferred_chunks``, nothing else


NOT_XARRAYS = OpenerCall(builds_indexes=False, dask_default=False)


def passes_through[F: Callable[..., Any]](func: F) -> F:
    """Mark a function that calls an entrypoint method on behalf of xarray's opener and returns its result
    unchanged (no renaming, selecting or dropping), so the open behaves as a direct one: index coordinates read
    during it, ``chunks={}`` grouping. Used by `ZarrmaxBackendEntrypoint`'s own methods and the conformance
    harness's routing of engine="zarr"."""
    _PASS_THROUGH.add(func.__code__)
    return func


def opener_call() -> OpenerCall:
    """How the entrypoint method calling this was called: by xarray's opener itself (``open_dataset``,
    ``open_datatree``, ``open_groups``), directly or through functions marked with `passes_through`, with that
    opener's ``create_default_indexes`` (True by default) and ``chunks``. Call it from the entrypoint method
    itself: it reads the frames above that method.

    No public way: xarray passes neither option to backends. So this reads them from the local variables of
    the opener's frame (``sys._getframe``): the opener's parameters of those names, checked to be parameters of
    the function running there. An opener that no longer has them, or a function of ``xarray.backends`` other
    than the openers calling the entrypoint (xarray moved the call), raises `XarrayChanged`.

    Called any other way (by a wrapper or a subclass's override, which may rename, select or drop before
    xarray sees the result, or not through xarray at all): neither. A coordinate read at the open that xarray
    then builds no index from would keep the values of that moment after the store changed (found by a
    review); read when used, as engine="zarr" reads it, it is never stale, only read later. And
    ``preferred_chunks`` then stay the stored objects, as engine="zarr"'s."""
    caller: FrameType | None = sys._getframe(2)  # the caller of the entrypoint method that asks
    while caller is not None and caller.f_code in _PASS_THROUGH:
        caller = caller.f_back
    if caller is None:
        return NOT_XARRAYS
    module = caller.f_globals.get("__name__", "")
    if module == OPENER_MODULE and caller.f_code.co_name in OPENERS:
        return _options_of(caller)
    if module.startswith("xarray.backends."):  # xarray's backend layer, but none of the openers we know
        raise _changed("opener_call", f"{module}.{caller.f_code.co_name} calls the backend, which is not one of "
                                      f"{OPENER_MODULE}'s {', '.join(OPENERS)}")
    return NOT_XARRAYS


def _options_of(frame: FrameType) -> OpenerCall:
    """``chunks`` and ``create_default_indexes`` of an opener's running call."""
    code = frame.f_code
    parameters = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    opener = f"{OPENER_MODULE}.{code.co_name}"
    if "chunks" not in parameters:
        raise _changed("opener_call", f"{opener} has no parameter 'chunks'")
    local = frame.f_locals
    chunks = local["chunks"]
    if "create_default_indexes" in parameters:
        builds_indexes = bool(local["create_default_indexes"])
    elif _older_than(_DEFAULT_INDEXES_SINCE):
        builds_indexes = True  # an xarray older than the option builds indexes always
    else:
        raise _changed("opener_call", f"{opener} has no parameter 'create_default_indexes'")
    return OpenerCall(builds_indexes=builds_indexes, dask_default=isinstance(chunks, dict) and not chunks)


def _older_than(version: str) -> bool:
    from packaging.version import Version

    return Version(xarray.__version__) < Version(version)


def _check_openers() -> None:
    for name in OPENERS:
        func = inspect.unwrap(getattr(xarray, name))
        if func.__module__ != OPENER_MODULE or func.__name__ != name:
            raise _changed("opener_call", f"xarray.{name} is {func.__module__}.{func.__name__}, not "
                                          f"{OPENER_MODULE}.{name}")
        wanted = ["chunks"] if _older_than(_DEFAULT_INDEXES_SINCE) else ["chunks", "create_default_indexes"]
        _require_parameters("opener_call", f"xarray.{name}", func, wanted)


# -- reading ---------------------------------------------------------------------------------------------------


def async_explicit_indexing_adapter(key: Any, shape: tuple[int, ...], indexing_support: Any,
                                    raw_indexing_method: Callable[..., Any]) -> Any:
    """xarray's ``indexing.async_explicit_indexing_adapter``: ``explicit_indexing_adapter`` (documented) for an
    async raw indexing method, what a ``BackendArray.async_getitem`` (documented) needs and what engine="zarr"'s
    own uses. Not documented, and no public equivalent: the decomposition of an indexer it does
    (``decompose_indexer``) is private too. Returns the awaitable."""
    _verified("async_explicit_indexing_adapter")
    adapter = _import("async_explicit_indexing_adapter", "xarray.core.indexing", "async_explicit_indexing_adapter")
    return adapter(key, shape, indexing_support, raw_indexing_method)


def _check_async_adapter() -> None:
    adapter = _import("async_explicit_indexing_adapter", "xarray.core.indexing", "async_explicit_indexing_adapter")
    if not inspect.iscoroutinefunction(adapter):
        raise _changed("async_explicit_indexing_adapter", "xarray.core.indexing.async_explicit_indexing_adapter "
                                                          "is no longer a coroutine function")
    wanted = ["key", "shape", "indexing_support", "raw_indexing_method"]
    if _parameters(adapter) != wanted:
        raise _changed("async_explicit_indexing_adapter", f"its parameters are {_parameters(adapter)}, not {wanted}")


def decode_fill_value(value: Any, dtype: Any) -> Any:
    """A ``_FillValue`` attribute as engine="zarr" decodes it where the fill value does not mask
    (``xarray.backends.zarr.FillValueCoder.decode``: base64 floats, bytes, ...), so both engines give the same
    attribute. Private to xarray's zarr backend."""
    _verified("decode_fill_value")
    coder = _import("decode_fill_value", "xarray.backends.zarr", "FillValueCoder")
    return coder.decode(value, dtype)


def _check_fill_value() -> None:
    coder = _import("decode_fill_value", "xarray.backends.zarr", "FillValueCoder")
    _require_parameters("decode_fill_value", "xarray.backends.zarr.FillValueCoder.decode", coder.decode,
                        ["value", "dtype"])


def backend_array(variable: Any, kinds: tuple[type, ...]) -> Any:
    """The lazy array a backend gave ``variable`` (the first of ``kinds`` found under xarray's wrappers), or
    what is there instead (an array loaded at the open): for ``zarrmax info``, which says which variables
    take the fast path. xarray offers no public way to the backend array: this reads ``Variable._data`` and
    the ``array`` attribute of each of xarray's lazy wrappers around it."""
    _verified("backend_array")
    return _unwrap(variable, kinds)


def _unwrap(variable: Any, kinds: tuple[type, ...]) -> Any:
    try:
        wrapper = variable._data
    except AttributeError:
        raise _changed("backend_array", "an xarray.Variable has no attribute '_data'") from None
    while hasattr(wrapper, "array") and not isinstance(wrapper, kinds):
        wrapper = wrapper.array
    return wrapper


def _check_backend_array() -> None:
    import numpy as np
    from xarray.core import indexing

    wrapped = indexing.LazilyIndexedArray(indexing.LazilyIndexedArray(np.zeros(1)))
    found = _unwrap(xarray.Variable(("x",), wrapped), (np.ndarray,))
    if not isinstance(found, np.ndarray):
        raise _changed("backend_array", "xarray's lazy wrappers no longer keep what they wrap as 'array'")


# -- writing: xarray's own Zarr writer, run against a staging store -----------------------------------------------


def validate_dataset_names(dataset: Any) -> None:
    """What ``Dataset.to_zarr`` checks of variable names first (``xarray.backends.writers.
    _validate_dataset_names``), so that ``xarray_zarrmax.to_zarr`` refuses the same names with the same
    errors. Private."""
    _verified("validate_dataset_names")
    _import("validate_dataset_names", "xarray.backends.writers", "_validate_dataset_names")(dataset)


def _check_validate_names() -> None:
    func = _import("validate_dataset_names", "xarray.backends.writers", "_validate_dataset_names")
    _require_parameters("validate_dataset_names", "xarray.backends.writers._validate_dataset_names", func,
                        ["dataset"])


#: what `writable_zarr_store` passes to ``get_writable_zarr_store``
_WRITABLE_STORE_KEYWORDS = ("mode", "group", "consolidated", "append_dim", "region", "safe_chunks", "zarr_format",
                            "write_empty_chunks")


def writable_zarr_store(store: Any, *, mode: str | None, group: str | None, consolidated: bool | None,
                        append_dim: Hashable | None, region: Any, safe_chunks: bool, zarr_format: int,
                        write_empty_chunks: bool | None) -> Any:
    """The ``ZarrStore`` ``Dataset.to_zarr`` writes through, opened over ``store`` with to_zarr's own choice
    of mode and consolidation (``xarray.backends.writers.get_writable_zarr_store``). Not public: the public
    way, ``Dataset.to_zarr``, also writes the data, where `xarray_zarrmax.write` only wants the metadata."""
    _verified("writable_zarr_store")
    func = _import("writable_zarr_store", "xarray.backends.writers", "get_writable_zarr_store")
    return func(store, mode=mode, group=group, consolidated=consolidated, append_dim=append_dim, region=region,
                safe_chunks=safe_chunks, zarr_format=zarr_format, write_empty_chunks=write_empty_chunks)


def _check_writable_store() -> None:
    func = _import("writable_zarr_store", "xarray.backends.writers", "get_writable_zarr_store")
    _require_parameters("writable_zarr_store", "xarray.backends.writers.get_writable_zarr_store", func,
                        ["store", *_WRITABLE_STORE_KEYWORDS])


def validate_and_autodetect_region(zarr_store: Any, dataset: Any) -> Any:
    """``dataset`` as ``Dataset.to_zarr`` writes it to a region (``ZarrStore._validate_and_autodetect_region``:
    ``region="auto"`` resolved, index coordinates checked and dropped), with its errors. Private."""
    _verified("validate_and_autodetect_region")
    return _method("validate_and_autodetect_region", zarr_store, "_validate_and_autodetect_region")(dataset)


def validate_encoding(zarr_store: Any, encoding: Mapping[str, Any]) -> None:
    """``Dataset.to_zarr``'s check of ``encoding=`` against the store (``ZarrStore._validate_encoding``: no
    encoding for variables that exist when appending), with its errors. Private."""
    _verified("validate_encoding")
    _method("validate_encoding", zarr_store, "_validate_encoding")(encoding)


def _method(dependency: str, zarr_store: Any, name: str) -> Callable[..., Any]:
    try:
        return getattr(zarr_store, name)  # type: ignore[no-any-return]
    except AttributeError:
        raise _changed(dependency, f"xarray.backends.zarr.ZarrStore.{name} is gone") from None


def _check_store_method(dependency: str, name: str, parameter: str) -> Callable[[], None]:
    def check() -> None:
        from xarray.backends.zarr import ZarrStore

        method = getattr(ZarrStore, name, None)
        if method is None:
            raise _changed(dependency, f"xarray.backends.zarr.ZarrStore.{name} is gone")
        _require_parameters(dependency, f"ZarrStore.{name}", method, ["self", parameter])

    return check


def dump_to_store(dataset: Any, zarr_store: Any, writer: Any, encoding: dict[str, Any]) -> None:
    """xarray's writer (``xarray.backends.writers.dump_to_store``: CF encoding, then ``ZarrStore.store``):
    metadata lands in ``zarr_store``, and ``writer.add(source, target, region)`` is called for each variable's
    data instead of xarray's ``ArrayWriter`` writing it. Private, as the ``writer`` protocol is."""
    _verified("dump_to_store")
    func = _import("dump_to_store", "xarray.backends.writers", "dump_to_store")
    func(dataset, zarr_store, writer, encoding=encoding)


def _check_dump_to_store() -> None:
    func = _import("dump_to_store", "xarray.backends.writers", "dump_to_store")
    if _parameters(func)[:3] != ["dataset", "store", "writer"] or "encoding" not in _parameters(func):
        raise _changed("dump_to_store", f"xarray.backends.writers.dump_to_store's parameters are {_parameters(func)}")
    from xarray.backends.zarr import ZarrStore

    if "add" not in ZarrStore.set_variables.__code__.co_names:
        raise _changed("dump_to_store", "ZarrStore.set_variables no longer hands data to writer.add")


def dataarray_names() -> tuple[str, str]:
    """(attribute, variable): the names ``DataArray.to_zarr`` stores an unnamed or coordinate-named DataArray
    under, which ``xr.open_dataarray`` reads back (``xarray.backends.api.DATAARRAY_NAME``,
    ``DATAARRAY_VARIABLE``). Private constants of a file convention."""
    return (_import("dataarray_names", "xarray.backends.api", "DATAARRAY_NAME"),
            _import("dataarray_names", "xarray.backends.api", "DATAARRAY_VARIABLE"))


# -- the list and the report ---------------------------------------------------------------------------------------



def user_stacklevel() -> int:
    """The ``stacklevel`` naming the first caller outside this package and xarray, so a warning points at user
    code (xarray's own tests count as callers, as its private ``find_stack_level`` counts them). It reads only
    the stack and where the installed xarray's files are (``xarray.__file__``), nothing private, so it is no
    `DEPENDENCIES` entry; it lives here because it walks frames, as `opener_call` does."""
    ours = (os.path.dirname(__file__) + os.sep, os.path.dirname(xarray.__file__) + os.sep)
    tests = os.path.join(os.path.dirname(xarray.__file__), "tests") + os.sep
    frame, level = inspect.currentframe(), 1
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(ours) or name.startswith(tests):
            break
        frame, level = frame.f_back, level + 1
    return max(level - 1, 1)

@dataclass(frozen=True)
class Dependency:
    """One function of this module: what it reaches into, why, and a check that raises `XarrayChanged`."""

    name: str
    reaches: str
    why: str
    check: Callable[[], Any]
    used_by: str


DEPENDENCIES: tuple[Dependency, ...] = (
    Dependency("opener_call", f"sys._getframe: locals 'chunks', 'create_default_indexes' of {OPENER_MODULE}."
               f"{{{','.join(OPENERS)}}}", "read index coordinates during the open exactly when xarray builds "
               "indexes, and group small stored objects into dask tasks only for chunks={}", _check_openers,
               "backend.entrypoint"),
    Dependency("async_explicit_indexing_adapter", "xarray.core.indexing.async_explicit_indexing_adapter",
               "answer load_async's explicit indexers with our async reads", _check_async_adapter, "backend.arrays"),
    Dependency("decode_fill_value", "xarray.backends.zarr.FillValueCoder.decode",
               "decode a _FillValue attribute as engine='zarr' does", _check_fill_value, "backend.store"),
    Dependency("backend_array", "xarray.Variable._data and the .array of xarray's lazy wrappers",
               "tell which variables take the fast path in `zarrmax info`", _check_backend_array, "cli"),
    Dependency("validate_dataset_names", "xarray.backends.writers._validate_dataset_names",
               "refuse the variable names Dataset.to_zarr refuses", _check_validate_names, "write.dataset"),
    Dependency("writable_zarr_store", "xarray.backends.writers.get_writable_zarr_store",
               "open the ZarrStore Dataset.to_zarr writes metadata through", _check_writable_store, "write.dataset"),
    Dependency("validate_and_autodetect_region", "xarray.backends.zarr.ZarrStore._validate_and_autodetect_region",
               "resolve and check region= as Dataset.to_zarr does",
               _check_store_method("validate_and_autodetect_region", "_validate_and_autodetect_region", "ds"),
               "write.dataset"),
    Dependency("validate_encoding", "xarray.backends.zarr.ZarrStore._validate_encoding",
               "check encoding= as Dataset.to_zarr does",
               _check_store_method("validate_encoding", "_validate_encoding", "encoding"), "write.dataset"),
    Dependency("dump_to_store", "xarray.backends.writers.dump_to_store and its writer.add(source, target, region)",
               "run xarray's own Zarr writer for the metadata, recording where each variable's data goes",
               _check_dump_to_store, "write.dataset"),
    Dependency("dataarray_names", "xarray.backends.api.DATAARRAY_NAME, DATAARRAY_VARIABLE",
               "store a DataArray under the names xr.open_dataarray reads back", dataarray_names, "write.dataset"),
)


@functools.cache
def problems() -> dict[str, str]:
    """Each dependency's check, run once: its name and what changed, for those no longer as expected."""
    found = {}
    for dependency in DEPENDENCIES:
        try:
            dependency.check()
        except Exception as err:  # noqa: BLE001 - any failure of a check is a change to report
            found[dependency.name] = str(err)
    return found


def main() -> int:
    """The report in the CI log: the xarray in use and each private dependency; 1 if any has changed."""
    print(f"xarray {xarray.__version__}: {len(DEPENDENCIES)} private dependencies (xarray_zarrmax/xarray_compat.py)")
    changed = problems()
    for d in DEPENDENCIES:
        status = "CHANGED" if d.name in changed else "ok"
        print(f"  {status:7} {d.name} [{d.used_by}]: reaches {d.reaches}; to {d.why}")
    for message in changed.values():
        print(f"  {message}")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
