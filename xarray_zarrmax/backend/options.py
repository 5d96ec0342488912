"""The keywords of ``open_dataset``, ``open_datatree`` and ``open_groups`` with engine="zarrmax", written once.

`OpenOptions` declares them (name, type, default); `open_method` gives each entrypoint method the real
keyword-only signature built from it, which is what xarray reads (``open_dataset_parameters``, guessing
``decode_*`` defaults), what ``help()`` shows, and what an unknown keyword is refused against, with Python's
own message. The method's body receives the filled-in `OpenOptions`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from xarray_zarrmax.backend.arrays import DeviceSpec
from xarray_zarrmax.errors import ArgumentTypeError
from xarray_zarrmax.xarray_compat import passes_through


@dataclass(frozen=True, kw_only=True)
class OpenOptions:
    """What ``xr.open_dataset(..., engine="zarrmax", **options)`` passes to the entrypoint: xarray's CF
    decoding options (handed to xarray's decoding as they are), then the store's. ``chunks``, ``cache`` and
    ``create_default_indexes`` are xarray's own and never reach a backend."""

    mask_and_scale: bool = True
    decode_times: bool = True
    concat_characters: bool = True
    decode_coords: bool | str = True
    drop_variables: str | Iterable[str] | None = None
    use_cftime: bool | None = None
    decode_timedelta: bool | None = None
    group: str | None = None
    consolidated: bool | None = None
    storage_options: Mapping[str, Any] | None = None
    zarr_format: int | None = None
    variables: Iterable[str] | None = None  # open_dataset only: the variables to open, by name
    use_zarr_fill_value_as_mask: bool | None = None
    device: DeviceSpec = "cpu"

    def decoders(self, dropped: set[Any]) -> dict[str, Any]:
        """The keywords of xarray's decoding (``StoreBackendEntrypoint.open_dataset``), with ``drop_variables``
        read once (`dropped_names`)."""
        return {
            "mask_and_scale": self.mask_and_scale,
            "decode_times": self.decode_times,
            "concat_characters": self.concat_characters,
            "decode_coords": self.decode_coords,
            "drop_variables": dropped,
            "use_cftime": self.use_cftime,
            "decode_timedelta": self.decode_timedelta,
        }

    def keywords(self, *, without: Iterable[str] = ()) -> dict[str, Any]:
        """The options as the keywords they were given as (``without`` some), to call another open method."""
        left_out = set(without)
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in left_out}  # not copied


def dropped_names(drop_variables: Any) -> set[Any]:
    """``drop_variables`` as xarray's decoding reads it (a string is one name, None none, anything else
    ``set()`` of it), read once: an iterator passed on would be spent here and drop nothing in xarray's
    decoding."""
    return set() if drop_variables is None else names_argument("drop_variables", drop_variables)


def names_argument(argument: str, value: Any) -> set[Any]:
    """A name or an iterable of names (``variables``, ``drop_variables``) as a set; anything else is an
    `ArgumentTypeError` (engine="zarr": the TypeError of iterating it, naming nothing)."""
    if isinstance(value, str):
        return {value}
    try:
        return set(value)
    except TypeError:
        raise ArgumentTypeError(f"expected {argument} as a name or an iterable of names. Got "
                                f"{type(value).__name__}.") from None


def open_method[R](*, without: Iterable[str] = ()) -> Callable[[Callable[[Any, Any, OpenOptions], R]],
                                                             Callable[..., R]]:
    """Decorate ``body(self, filename_or_obj, options)`` into the method xarray calls: ``(self,
    filename_or_obj, *, <every `OpenOptions` field but those ``without``>)``.

    The method is a real Python function with that signature, generated from the fields (as `dataclasses`
    generates ``__init__``): xarray's ``detect_parameters``, ``help()``, ``__kwdefaults__`` and type hints see
    the keywords, no ``**kwargs`` (as xarray's backend guide asks), and wrong arguments get exactly Python's
    errors, naming the method. It hands the body's result back unchanged: `xarray_compat.opener_call` looks
    through it to xarray's opener."""
    left_out = frozenset(without)
    options = [f for f in fields(OpenOptions) if f.name not in left_out]

    def decorate(body: Callable[[Any, Any, OpenOptions], R]) -> Callable[..., R]:
        name = body.__name__
        namespace: dict[str, Any] = {**globals(), "body": body}  # this module's names: type hints resolve
        namespace.update({f"default_{f.name}": f.default for f in options})
        keywords = ", ".join(f"{f.name}=default_{f.name}" for f in options)
        passed = ", ".join(f"{f.name}={f.name}" for f in options)
        exec(f"def {name}(self, filename_or_obj, *, {keywords}):\n"  # only names of our own fields
             f"    return body(self, filename_or_obj, OpenOptions({passed}))\n", namespace)
        method = namespace[name]
        # Python's errors name the method so; its frames are this module's (warnings skip them as ours)
        method.__code__ = method.__code__.replace(co_qualname=body.__qualname__, co_filename=__file__)
        method.__qualname__ = body.__qualname__
        method.__module__ = body.__module__
        method.__doc__ = body.__doc__
        method.__annotations__ = {"filename_or_obj": "Any", **{f.name: f.type for f in options},
                                  "return": body.__annotations__.get("return", "Any")}
        return passes_through(method)

    return decorate


def parameter_names(method: Callable[..., Any]) -> tuple[str, ...]:
    """A method's parameters but ``self``: its ``open_dataset_parameters``."""
    return tuple(name for name in inspect.signature(method).parameters if name != "self")
