"""Write targets: put, delete and read-merge-write of whole objects, safe under concurrent writers.

Two kinds, both picklable (a dask task on any worker rebuilds its sink):

- `LocalSink`, a directory: each object is written to a temporary file beside it and renamed over it
  (``os.replace`` is atomic), so a reader or a crash never sees half an object. Every replacement happens
  under an exclusive ``flock`` of the object's directory, so a read-merge-write cannot lose an update made
  between its read and its rename, by a thread or by another process.
- `ObstoreSink`, an obstore store (S3, MinIO...): a PUT is atomic. A read-merge-write PUTs with ``If-Match``
  on the ETag it read (``If-None-Match: *`` when there was no object); when another writer got there first
  (412), it reads again, merges again and retries. Failed requests are retried by obstore (the store's
  retry config); retrying is idempotent, since a merge only ever writes the same values over the same
  elements.

Sinks never import xarray.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from . import accounting
from ._loop import gather_or_cancel, run_sync
from .config import get_config
from .errors import StoreAccessError
from .stores import (
    Buffer,
    ByteSource,
    LocalSource,
    ObjectChanged,
    ObstoreSource,
    RequestFailed,
    _checked_key,
    _is_transient,
)

#: A merge: the stored bytes (None: no object) -> the bytes to store (None: store nothing; only allowed
#: when there was no object, since a missing object cannot be deleted conditionally).
Merge = Callable[[Buffer | None], bytes | None]

#: Most attempts of one read-merge-write that keeps losing to other writers, and the longest pause between
#: two; with N writers contending for one object, at least one wins each round, so N rounds suffice.
MAX_ATTEMPTS = 64
MAX_BACKOFF_S = 0.5


def _backoff(attempt: int) -> float:
    # jittered, so writers that collided once do not collide again in lockstep
    return min(0.005 * 2**attempt, MAX_BACKOFF_S) * (0.5 + random.random())


class Sink:
    """Interface. ``label`` names the store without secrets; sync methods are called from dask tasks, async
    ones from the I/O loop (metadata batches)."""

    label: str
    source: ByteSource  # reads the same objects

    def put(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def update(self, key: str, merge: Merge) -> None:
        """Replace the object at ``key`` by ``merge(stored bytes)``, without losing a concurrent update."""
        raise NotImplementedError

    def put_many(self, objects: dict[str, bytes]) -> None:
        """Write every object at once (one concurrent batch where the store allows)."""
        raise NotImplementedError

    def delete_prefix(self, prefix: str) -> None:
        """Delete every object under ``prefix`` ("": the whole store)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label!r})"


class LocalSink(Sink):
    """A directory on a local file system; see the module docstring."""

    source: LocalSource

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.source = LocalSource(root)
        self.label = self.source.label

    def __reduce__(self) -> tuple[Any, ...]:
        return (LocalSink, (str(self.source.root),))

    def _path(self, key: str) -> str:
        return self.source._path(key)

    @contextmanager
    def _locked(self, path: str) -> Iterator[None]:
        """An exclusive lock on the directory that holds ``path``: a lock file inside the store would show in
        listings and copies. ``flock`` locks belong to the open file, so threads of one process exclude each
        other as processes do."""
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _replace(self, path: str, data: bytes) -> None:
        """Write beside ``path`` and rename over it: readers see the old object or the new one, never part."""
        directory, name = os.path.split(path)
        tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.zarrmax-tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise

    @contextmanager
    def _naming(self, what: str, key: str) -> Iterator[None]:
        """OSError from the file system names the temporary file at most: say which object and store."""
        try:
            yield
        except OSError as err:
            err.add_note(f"while {what} {key!r} in {self.label}")
            raise

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        with self._naming("writing", key), self._locked(path):
            self._replace(path, data)
        accounting.record(self.label, "put", key, len(data))

    def delete(self, key: str) -> None:
        path = self._path(key)
        with self._naming("deleting", key), self._locked(path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        accounting.record(self.label, "delete", key)

    def update(self, key: str, merge: Merge) -> None:
        path = self._path(key)
        with self._naming("updating", key), self._locked(path):
            got = self.source.read(key)
            new = merge(None if got is None else got.data)
            if new is None:
                if got is not None:
                    raise AssertionError(f"a merge of {key!r} asked to delete a stored object")
                return
            self._replace(path, new)
        accounting.record(self.label, "put", key, len(new))

    def put_many(self, objects: dict[str, bytes]) -> None:
        for key, data in objects.items():  # local writes are fast and ordered; no loop needed
            self.put(key, data)

    def delete_prefix(self, prefix: str) -> None:
        top = self._path(prefix) if prefix else str(self.source.root)
        for dirpath, _, files in os.walk(top, topdown=False):
            for name in files:
                os.unlink(os.path.join(dirpath, name))
            if dirpath != str(self.source.root):
                try:
                    os.rmdir(dirpath)
                except OSError:  # not empty: another writer is already filling it
                    pass
        accounting.record(self.label, "delete", prefix)


class ObstoreSink(Sink):
    """An obstore store; see the module docstring."""

    source: ObstoreSource

    def __init__(self, source: ObstoreSource) -> None:
        self.source = source
        self.label = source.label

    def __reduce__(self) -> tuple[Any, ...]:
        return (ObstoreSink, (self.source,))

    async def put_async(self, key: str, data: bytes, mode: Any = None) -> None:
        """One PUT, never multipart: atomic, and conditional modes need a single request anyway.

        obstore retries what it deems safe to; an unconditional PUT that still fails on a transient error
        (the connection broke after the request was sent) is sent again here, up to ``config.retries`` times:
        the same bytes twice are the same object. A conditional one is not: `update` reads and merges again.
        """
        import obstore

        _checked_key(self.source, key)
        kwargs: dict[str, Any] = {"use_multipart": False}
        if mode is not None:
            kwargs["mode"] = mode
        retries = get_config().retries if mode is None else 0
        for attempt in range(retries + 1):
            accounting.record(self.label, "put", key, len(data))
            try:
                await self.source._call("PUT", key, obstore.put_async, key, data, **kwargs)
                return
            except RequestFailed as err:
                if attempt == retries or not _is_transient(err):
                    raise
            await asyncio.sleep(_backoff(attempt))

    async def delete_async(self, key: str) -> None:
        import obstore

        _checked_key(self.source, key)
        try:
            await self.source._call("DELETE", key, obstore.delete_async, key)
        except FileNotFoundError:
            pass
        accounting.record(self.label, "delete", key)

    def put(self, key: str, data: bytes) -> None:
        run_sync(self.put_async(key, data))

    def delete(self, key: str) -> None:
        run_sync(self.delete_async(key))

    def update(self, key: str, merge: Merge) -> None:
        for attempt in range(MAX_ATTEMPTS):
            got = run_sync(self.source._get_versioned("GET", key, {}))
            if got is not None and got.version is None:
                raise StoreAccessError(f"{key!r} on {self.label}: the store returned no ETag, so a partial write "
                                       "cannot be made safe against concurrent writers")
            new = merge(None if got is None else got.data)  # CPU work: here, never on the I/O loop
            if new is None:
                if got is not None:
                    raise AssertionError(f"a merge of {key!r} asked to delete a stored object")
                return
            mode: Any = "create" if got is None else {"e_tag": got.version}
            try:
                run_sync(self.put_async(key, new, mode))
                return
            except ObjectChanged:
                pass  # another writer won (or our own earlier attempt did): read that object and merge again
            except RequestFailed as err:
                if not _is_transient(err):
                    raise
                # the PUT may or may not have been applied: reading tells, and merging again is harmless
            time.sleep(_backoff(attempt))
        raise StoreAccessError(f"gave up writing {key!r} on {self.label}: {MAX_ATTEMPTS} attempts in a row lost "
                               "to concurrent writers of the same object")

    def put_many(self, objects: dict[str, bytes]) -> None:
        run_sync(gather_or_cancel(*(self.put_async(k, v) for k, v in objects.items())))

    def delete_prefix(self, prefix: str) -> None:
        run_sync(self._delete_prefix(prefix))

    async def _delete_prefix(self, prefix: str) -> None:
        import obstore

        path = prefix.strip("/")
        stream = obstore.list(self.source.store, path + "/" if path else None, chunk_size=1000)
        batches = []
        async for batch in stream:
            accounting.record(self.label, "list", prefix)
            batches.append([meta["path"] for meta in batch])
        # one bulk DELETE per listed batch (S3 takes up to 1000 keys a request)
        await gather_or_cancel(*(self.source._call("DELETE", prefix, obstore.delete_async, keys)
                                 for keys in batches if keys))
        for keys in batches:
            for key in keys:
                accounting.record(self.label, "delete", key)


def resolve_sink(target: Any, storage_options: dict[str, Any] | None = None) -> Sink:
    """Where `to_zarr` writes: a local path or ``file://`` URL (created if missing), an ``s3://`` URL (options as
    for reading, see `xarray_zarrmax.stores.obstore_s3_options`), an obstore store, zarr's ``ObjectStore`` or
    ``LocalStore``. Anything else raises TypeError: it would be written by zarr-python, without our
    guarantees, so say so rather than do it silently."""
    from .stores import _no_storage_options, _scheme, s3_store_from_url

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
            os.makedirs(path, exist_ok=True)
            return LocalSink(path)
        raise TypeError(f"to_zarr writes to local paths and s3:// URLs (or obstore stores). Got a {scheme!r} URL.")
    _no_storage_options(storage_options, f"a {type(target).__name__}")
    if isinstance(target, ObstoreSource):
        return ObstoreSink(target)
    if (type(target).__module__ or "").startswith("obstore"):
        return ObstoreSink(ObstoreSource(target))
    from zarr.storage import LocalStore, ObjectStore

    if isinstance(target, ObjectStore):
        return ObstoreSink(ObstoreSource(target.store))
    if isinstance(target, LocalStore):
        os.makedirs(target.root, exist_ok=True)
        return LocalSink(target.root)
    raise TypeError("to_zarr writes to a local path, an s3:// URL, an obstore store, or zarr's ObjectStore or "
                    f"LocalStore. Got {type(target).__module__}.{type(target).__qualname__} instead.")
