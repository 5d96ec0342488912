"""What the user passed, turned into a backend: `resolve_source` for reads, `resolve_sink` for writes, and `glob` to
expand a wildcard pattern for ``open_mfdataset``.

Paths and ``file://`` URLs go to `xarray_zarrmax.storage.local`, ``s3://`` URLs and obstore stores to
`xarray_zarrmax.storage.obstore`, everything else (fsspec URLs and mappers, dicts, zarr Stores, Icechunk sessions)
to `xarray_zarrmax.storage.zarr_store`. ``storage_options`` go with URLs only, as in zarr-python.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator, Mapping, MutableMapping
from glob import glob as _local_glob
from pathlib import Path
from typing import Any, cast

from xarray_zarrmax.core.loop import gather_or_cancel, run_sync
from xarray_zarrmax.core.redact import redact, scrubbed, secrets_in, url_secrets
from xarray_zarrmax.errors import ArgumentTypeError, NodeNotFoundError
from xarray_zarrmax.storage.abc import ByteSource, Sink, join_key
from xarray_zarrmax.storage.local import LocalSink, LocalSource
from xarray_zarrmax.storage.obstore import ObstoreSink, ObstoreSource, s3_store_from_url
from xarray_zarrmax.storage.zarr_store import IcechunkSink, ZarrStoreSource

# -- reads -----------------------------------------------------------------------------------------------------


def fsspec_source(url: str, storage_options: Mapping[str, Any] | None = None) -> ZarrStoreSource:
    """zarr's FsspecStore for an fsspec URL (``memory://``, ``gs://``, ``simplecache::s3://``...), read-only:
    what engine="zarr" reads such a URL with, and its errors (ValueError for an unknown protocol, ImportError
    for one whose package is missing), credentials masked."""
    secrets = url_secrets(url) + secrets_in(storage_options)
    label = redact(url, secrets)
    try:
        from zarr.storage import FsspecStore

        store = FsspecStore.from_url(url, storage_options=dict(storage_options or {}), read_only=True)
    except Exception as err:
        failure = scrubbed(err, secrets)
        failure.add_note(f"while opening {label} with fsspec")
    else:
        return ZarrStoreSource(store, label, secrets)
    raise failure  # outside the except clause: not even __context__ keeps fsspec's own text


#: A URL rather than a path, as xarray tells them apart (``is_remote_uri``): a scheme and ``://``, or an fsspec
#: chain's ``::``.
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9]*)(://|::)")


def _scheme(target: str) -> str:
    """``"s3"`` for an s3:// URL, ``"simplecache::"`` for a chain that starts with it, ``""`` for a path."""
    match = _URL.match(target)
    if match is None:
        return ""
    return match.group(1).lower() + ("::" if match.group(2) == "::" else "")


def check_storage_options(storage_options: Any) -> None:
    """None, or a mapping with string names (never a value in the message: it may be a credential).
    engine="zarr" raises the TypeError of using it (``'int' object is not a mapping``), naming nothing."""
    if storage_options is None:
        return
    if not isinstance(storage_options, Mapping):
        raise ArgumentTypeError("expected storage_options as a mapping of option names to values. Got "
                                f"{type(storage_options).__name__}.")
    for key in storage_options:
        if not isinstance(key, str):
            raise ArgumentTypeError(f"expected storage_options names as strings. Got {key!r} ({type(key).__name__}).")


def _no_storage_options(storage_options: Mapping[str, Any] | None, what: str) -> None:
    if storage_options is not None:  # as zarr-python: options that would be silently ignored are an error
        raise TypeError(f"'storage_options' was provided but unused: they go with s3:// and fsspec URLs only. "
                        f"Got them with {what}.")


def _local_source(target: str) -> LocalSource:
    path = Path(target).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"no such Zarr store: {str(path)!r} does not exist")
    if not path.is_dir():
        # zarr-python: GroupNotFoundError, a ValueError and a FileNotFoundError; NodeNotFoundError is both
        raise NodeNotFoundError(f"expected a Zarr store directory. Got a file: {str(path)!r}")
    return LocalSource(path.resolve())


def _url_source(url: str, storage_options: Mapping[str, Any] | None) -> ByteSource:
    scheme = _scheme(url)
    if scheme == "s3":
        return s3_store_from_url(url, storage_options)  # obstore: ETags, parallel ranges, one connection pool
    if scheme in ("", "file"):
        _no_storage_options(storage_options, "a local path")
        return _local_source(url.split("://", 1)[1] if scheme else url)
    if scheme == "memory":
        _no_storage_options(storage_options, "a memory:// URL")
    return fsspec_source(url, storage_options)


class _Buffers(Mapping[str, Any]):
    """A read-only view of a mapping whose values are zarr Buffers or bytes-like objects, as zarr Buffers:
    what zarr's MemoryStore reads (engine="zarr" reads a dict of Buffers only)."""

    __slots__ = ("mapping",)

    def __init__(self, mapping: Mapping[str, Any]) -> None:
        self.mapping = mapping

    def __getitem__(self, key: str) -> Any:
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.buffer.core import Buffer

        value = self.mapping[key]
        return value if isinstance(value, cast(type, Buffer)) else default_buffer_prototype().buffer.from_bytes(value)

    def __contains__(self, key: object) -> bool:
        return key in self.mapping

    def __iter__(self) -> Iterator[str]:
        return iter(self.mapping)

    def __len__(self) -> int:
        return len(self.mapping)


def _mapping_source(mapping: MutableMapping[str, Any]) -> ZarrStoreSource:
    """A dict (or any MutableMapping) as zarr-python reads one: a MemoryStore over the same mapping, so changes
    to it show in later reads; read-only for us."""
    from zarr.storage import MemoryStore

    store = MemoryStore(store_dict=cast(Any, _Buffers(mapping)), read_only=True)
    return ZarrStoreSource(store, f"{type(mapping).__name__}@{id(mapping):x}")


def _fsspec_mapper(target: Any) -> Any:
    """``target`` if it is an fsspec mapper (``fsspec.get_mapper(url)``), else None."""
    if not isinstance(target, MutableMapping):
        return None
    try:
        from fsspec.mapping import FSMap
    except ImportError:
        return None
    return target if isinstance(target, FSMap) else None


def _mapper_source(mapper: Any) -> ByteSource:
    """An fsspec mapper: on the local file system, its directory (the fast path, with its version checks); else
    zarr's FsspecStore over it, read-only, as engine="zarr" reads it."""
    from fsspec.implementations.local import LocalFileSystem
    from zarr.storage import FsspecStore

    fs = mapper.fs
    if isinstance(fs, LocalFileSystem):
        return _local_source(mapper.root)
    secrets = secrets_in(getattr(fs, "storage_options", None))
    try:
        label = redact(fs.unstrip_protocol(mapper.root), secrets)
    except Exception:
        label = f"{type(fs).__name__}@{id(mapper):x}"
    return ZarrStoreSource(FsspecStore.from_mapper(mapper, read_only=True), label, secrets)


def resolve_source(target: Any, storage_options: Mapping[str, Any] | None = None) -> ByteSource:
    """Turn what the user passed into a `ByteSource`: what engine="zarr" accepts, and more.

    - a local path or ``file://`` URL: `LocalSource`;
    - an ``s3://`` URL: obstore's S3Store (`ObstoreSource`), options by obstore's or s3fs's names;
    - any other fsspec URL (``memory://``, ``gs://``, chained ``simplecache::s3://``): zarr's FsspecStore;
    - an fsspec mapper (``fsspec.get_mapper(url)``): the local directory, else zarr's FsspecStore over it;
    - a dict or other MutableMapping of keys to zarr Buffers or bytes: zarr's MemoryStore over it;
    - zarr's ObjectStore: the obstore store inside it (`ObstoreSource`); an obstore store;
    - any other zarr Store (Icechunk's included); an Icechunk Session; a `ByteSource`.

    What is read through zarr-python's stores is read-only and never cached across reads. ``storage_options``
    go with URLs other than local and ``memory://`` ones: anywhere else they raise TypeError, as in zarr-python.
    """
    check_storage_options(storage_options)
    if isinstance(target, ByteSource):
        return target
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if isinstance(target, str):
        return _url_source(target, storage_options)
    _no_storage_options(storage_options, f"a {type(target).__name__}")
    module = type(target).__module__ or ""
    if module.startswith("icechunk") and hasattr(target, "store") and hasattr(target, "snapshot_id"):
        return ZarrStoreSource(target.store)
    if module.startswith("obstore"):
        return ObstoreSource(target)
    from zarr.abc.store import Store
    from zarr.storage import ObjectStore

    if isinstance(target, ObjectStore):
        return ObstoreSource(target.store)  # obstore's own requests, with ETags: the fast path
    if isinstance(target, Store):
        return ZarrStoreSource(target)
    mapper = _fsspec_mapper(target)
    if mapper is not None:
        return _mapper_source(mapper)
    if isinstance(target, MutableMapping):
        return _mapping_source(target)
    raise TypeError(
        "expected a local path or URL (file://, s3://, any fsspec protocol), an fsspec mapper, a dict, an obstore "
        f"store, a zarr Store or an Icechunk Session. Got {type(target).__module__}.{type(target).__qualname__} "
        "instead."
    )


# -- writes ----------------------------------------------------------------------------------------------------


def resolve_sink(target: Any, storage_options: dict[str, Any] | None = None) -> Sink:
    """Where `to_zarr` writes: a local path or ``file://`` URL (created by the first write), an ``s3://`` URL
    (options as for reading, see `xarray_zarrmax.storage.obstore.obstore_s3_options`), an obstore store, zarr's
    ``ObjectStore`` or ``LocalStore`` (not opened read-only), a writable Icechunk ``Session`` or ``ForkSession``
    (or its ``IcechunkStore``). Anything else raises TypeError: it would be written by zarr-python, without our
    guarantees, so say so rather than do it silently."""
    check_storage_options(storage_options)
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if isinstance(target, str):
        scheme = _scheme(target)
        if scheme == "s3":
            return ObstoreSink(s3_store_from_url(target, storage_options))
        if scheme in ("", "file"):
            _no_storage_options(storage_options, "a local path")
            path = os.path.abspath(os.path.expanduser(target.split("://", 1)[1] if scheme else target))
            if os.path.exists(path) and not os.path.isdir(path):
                raise FileExistsError(f"expected a directory to write a Zarr store to. Got a file: {path!r}")
            return LocalSink(path)  # its directories are made with the first object written there
        raise TypeError(f"to_zarr writes to local paths and s3:// URLs (or obstore stores). Got a {scheme!r} URL.")
    _no_storage_options(storage_options, f"a {type(target).__name__}")
    if isinstance(target, ObstoreSource):
        return _obstore_sink(target.store) if _is_obstore_local(target.store) else ObstoreSink(target)
    module = type(target).__module__ or ""
    if module.startswith("obstore"):
        return _obstore_sink(target)
    if module.startswith("icechunk") and hasattr(target, "fork") and hasattr(target, "store"):
        return IcechunkSink(target)
    if module.startswith("icechunk") and hasattr(target, "session") and hasattr(target, "set"):
        return IcechunkSink(target.session)  # an IcechunkStore: the session it writes through
    from zarr.storage import LocalStore, ObjectStore

    if isinstance(target, (ObjectStore, LocalStore)) and target.read_only:
        # xarray refuses too ("Store is read-only"); the sink would write through its own handle regardless
        raise ValueError(f"Store is read-only: to_zarr needs a writable store. Got {type(target).__name__} opened "
                         "with read_only=True; open it with read_only=False to write.")
    if isinstance(target, ObjectStore):
        return _obstore_sink(target.store)
    if isinstance(target, LocalStore):
        return LocalSink(target.root)
    raise TypeError("to_zarr writes to a local path, an s3:// URL, an obstore store, zarr's ObjectStore or "
                    "LocalStore, or a writable Icechunk session. "
                    f"Got {type(target).__module__}.{type(target).__qualname__} instead.")


def _is_obstore_local(store: Any) -> bool:
    return (type(store).__module__ or "").startswith("obstore") and type(store).__name__ == "LocalStore"


def _obstore_sink(store: Any) -> Sink:
    """An obstore store's sink. Its ``LocalStore`` is written as the directory it is: object_store's local
    file system has no conditional PUT ("PutMode::Update not yet implemented"), which merging a partly
    written shard needs, and our `LocalSink` makes the same merge safe with a directory lock."""
    if _is_obstore_local(store):
        root = os.fspath(store.prefix) if store.prefix is not None else os.sep
        return LocalSink(root)
    return ObstoreSink(ObstoreSource(store))


# -- globs, for open_mfdataset -------------------------------------------------------------------------------

_GLOB_MAGIC = re.compile(r"[*?\[]")


def glob(pattern: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The paths or URLs a wildcard pattern matches, sorted: what to give ``xr.open_mfdataset``.

    xarray expands a pattern itself for local paths, and for URLs only with engine="zarr"; so for remote
    stores::

        urls = xarray_zarrmax.glob("s3://bucket/run-*.zarr", storage_options=so)
        ds = xr.open_mfdataset(urls, engine="zarrmax", storage_options=so, ...)

    Local patterns are expanded as xarray expands them (Python's glob). ``s3://`` patterns are listed through
    obstore, one LIST per wildcard level and candidate prefix; other fsspec URLs by the file system's ``glob``,
    as engine="zarr" expands them (``storage_options`` as for `resolve_source`). Wildcards (``*``, ``?``,
    ``[...]``) match within one path level; ``**`` is refused on s3://.
    """
    check_storage_options(storage_options)
    pattern = os.fspath(pattern)
    scheme = _scheme(pattern)
    if scheme in ("", "file"):
        _no_storage_options(storage_options, "a local path")
        path = pattern.split("://", 1)[1] if scheme else pattern  # not urlparse: "?" is a wildcard
        return sorted(_local_glob(os.path.abspath(os.path.expanduser(path))))
    if scheme == "s3":
        return cast(list[str], run_sync(_glob_s3(pattern, storage_options)))
    if scheme == "memory":
        _no_storage_options(storage_options, "a memory:// URL")
    return _glob_fsspec(pattern, storage_options)


async def _glob_s3(pattern: str, storage_options: Mapping[str, Any] | None) -> list[str]:
    # not urlparse: "?" is a wildcard here, not the start of a query
    bucket, _, key = pattern.split("://", 1)[1].partition("/")
    parts = [p for p in key.split("/") if p]
    if _GLOB_MAGIC.search(bucket) or "**" in parts:
        raise ValueError(f"expected wildcards within one level of the keys of one bucket. Got {redact(pattern)!r}.")
    if not parts:
        return [pattern]
    # the levels before the first wildcard are the store's prefix; each later level is listed and matched
    start = next((i for i, part in enumerate(parts) if _GLOB_MAGIC.search(part)), len(parts) - 1)
    root = "/".join(parts[:start])
    source = s3_store_from_url(f"s3://{bucket}/{root}", storage_options)
    found = [""]
    for part in parts[start:]:
        listed = await gather_or_cancel(*(source.list_dir(prefix) for prefix in found))
        found = [join_key(prefix, name) for prefix, names in zip(found, listed, strict=True)
                 for name in names if fnmatch.fnmatchcase(name, part)]
    return sorted(f"s3://{bucket}/{join_key(root, key)}" for key in found)


def _glob_fsspec(pattern: str, storage_options: Mapping[str, Any] | None) -> list[str]:
    secrets = url_secrets(pattern) + secrets_in(storage_options)
    try:
        from fsspec.core import url_to_fs

        fs, path = url_to_fs(pattern, **dict(storage_options or {}))
        matches = fs.glob(path)
    except Exception as err:
        failure = scrubbed(err, secrets)
        failure.add_note(f"while expanding {redact(pattern, secrets)} with fsspec")
    else:
        chain, _, inner = pattern.rpartition("::")  # the matches are paths of the innermost file system
        protocol = inner.split("://", 1)[0]
        urls = (m if "://" in m else f"{protocol}://{m}" for m in matches)
        return sorted(f"{chain}::{url}" if chain else url for url in urls)
    raise failure  # outside the except clause: not even __context__ keeps fsspec's own text
