"""``to_zarr(ds, store, encoding="advise", patterns=...)``: the advisor's best layout as the write's encoding.

The advisor (`xarray_zarrmax.advise`) ranks (chunks, shards) layouts for a mix of access patterns, costed
under numbers probed from the store. Here its best layout becomes the encoding of every data variable it
covers (the advised variable and those of the same dimensions and shape); other variables keep xarray's
defaults. The store is probed beside the target (the folder or prefix holding it), as ``zarrmax advise``
does, so a probe cut short leaves nothing inside the Zarr hierarchy.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Mapping
from typing import Any

from xarray_zarrmax.advise.validate import shown
from xarray_zarrmax.errors import AdviceInputError, AdviceTypeError

#: what ``advise_options`` may set: `xarray_zarrmax.advise`'s keywords that do not follow from the write
ADVISE_OPTIONS = frozenset({"variable", "store", "storage_options", "budget_mb", "max_object_mb", "max_objects",
                            "costs", "layouts", "batch", "progress"})


def check_advise_request(ds: Any, patterns: Any, advise_options: Mapping[str, Any] | None, *, region: Any,
                         append_dim: Hashable | None, mode: str | None) -> None:
    """ValueError/TypeError for a request the advisor cannot serve, before anything is probed or written (the
    target is not even opened)."""
    if patterns is None or (isinstance(patterns, Mapping) and not patterns):
        raise AdviceInputError(
            "encoding='advise' needs patterns=: the access patterns to make fast and their weights, e.g. "
            f"{{'timeseries': 0.5, 'map': 0.5}}. Got patterns={patterns!r}."
        )
    existing = [f"{name}={value!r}" for name, value in (("region", region), ("append_dim", append_dim))
                if value is not None]
    if mode == "r+":
        existing.append("mode='r+'")
    if existing:
        raise ValueError(
            "encoding='advise' chooses the layout of new arrays; with " + " and ".join(existing) + " the arrays "
            "exist already and keep their stored chunks and shards. Write without encoding, or choose the "
            "layout when the arrays are first written."
        )
    if advise_options is not None and not isinstance(advise_options, Mapping):
        raise AdviceTypeError(f"expected advise_options as a mapping of advise()'s keywords. Got "
                              f"{shown(advise_options, typed=True)} instead.")
    unknown = sorted(str(k) for k in advise_options or {} if k not in ADVISE_OPTIONS)
    if unknown:
        raise AdviceTypeError(f"advise_options: unknown option(s) {unknown}; expected some of "
                              f"{sorted(ADVISE_OPTIONS)}")
    from xarray_zarrmax.advise.advisor import check_request

    # every option checked as advise() checks it (the store's only once it is known: the target's, by default)
    check_request(ds, patterns, **dict(advise_options or {}))


def default_probe(store: Any) -> str | None:
    """The place to probe for a write to ``store``: beside it for a path or URL; None (assume a remote object
    store's costs) for a store object, whose location we cannot always name."""
    from os import PathLike, fspath

    from xarray_zarrmax.advise.probe import probe_place

    if isinstance(store, PathLike):
        store = fspath(store)
    return probe_place(store) if isinstance(store, str) else None


def advised_encoding(ds: Any, store: Any, patterns: Mapping[str, Any], advise_options: Mapping[str, Any] | None,
                     storage_options: Mapping[str, Any] | None) -> dict[Hashable, dict[str, tuple[int, ...]]]:
    """Run the advisor for ``ds`` written to ``store`` and return its best layout as a to_zarr encoding."""
    from xarray_zarrmax.advise.advisor import advise
    from xarray_zarrmax.core.redact import redact, secrets_in, url_secrets

    options = dict(advise_options or {})
    beside = "store" not in options and "costs" not in options
    if beside:
        options["store"] = default_probe(store)
        if "storage_options" not in options and options["store"] is not None:
            options["storage_options"] = storage_options
    try:
        report = advise(ds, patterns, **options)
    except Exception as err:
        if beside and options["store"] is not None:
            err.add_note("encoding='advise' probes the store beside the target unless told otherwise: "
                         "advise_options={'store': '<a writable folder or s3:// prefix>'} probes there, "
                         "{'store': None} assumes a remote object store's costs")
        raise
    best = report.best
    if options.get("progress", True) is not False:
        place = str(options.get("store"))
        place = redact(place, (*url_secrets(place), *secrets_in(options.get("storage_options"))))
        probed = ("the costs given" if "costs" in options else f"costs probed at {place}"
                  if report.calibrated else "store not probed: a remote object store's costs assumed")
        print(f"zarrmax: writing {', '.join(map(str, best.variables))} in chunks {best.layout} (advised for "
              f"{dict(report.patterns)}; {probed})", file=sys.stderr)
    return best.encoding
