"""Byte sources: one small, picklable interface over local files, obstore stores and any zarr Store.

A source answers ``get`` (whole object, for metadata), ``get_large`` (a whole data object), ``get_suffix`` /
``get_prefix`` (a shard index), ``get_ranges`` (several byte ranges of one object) and ``list_dir``
(immediate children of a prefix). Missing objects are ``None``, never an exception, so callers can apply fill
values. Every request is counted in `xarray_zarrmax.core.accounting`. Sources never import xarray.

Coherence: data reads return a `Fetched` with the object's *version* (S3 ETag, a local file's fstat, an
Icechunk snapshot). ``get_ranges(..., version=v)`` proves at no extra request that the object is still ``v``
(``If-Match``, or fstat on the descriptor the bytes are read from) and raises `ObjectChanged` otherwise, so a
shard index cached from one version is never applied to the bytes of another.
"""

from __future__ import annotations

import asyncio
import collections
import fnmatch
import hashlib
import os
import pickle
import random
import re
import stat
import threading
import time
import weakref
from collections.abc import Hashable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from glob import glob as _local_glob
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlparse

import numpy as np

from xarray_zarrmax.config import get_config
from xarray_zarrmax.core import accounting
from xarray_zarrmax.core.budget import request_slot
from xarray_zarrmax.core.bytes import Buffer, Segments
from xarray_zarrmax.core.loop import gather_or_cancel, run_sync
from xarray_zarrmax.core.redact import redact, scrubbed, secrets_in, url_secrets
from xarray_zarrmax.errors import CorruptDataError, NodeNotFoundError, ObjectChanged, RequestFailed, StoreAccessError
from xarray_zarrmax.tuning import LOCAL_ATTEMPTS, RACY_WINDOW_NS, RECENT_STORE_BYTES, RECENT_STORES


@dataclass(frozen=True, slots=True)
class Fetched:
    """Bytes of one object and what identifies the object version they came from.

    ``version`` is compared by ``get_ranges`` so later ranges come from the same object version (None: the
    source cannot tell, no check). ``cacheable`` says whether the version may key a cache across reads: it
    must change whenever the object does.
    """

    data: Buffer | Segments
    size: int | None  # the whole object's size, where the store said
    version: Hashable | None
    cacheable: bool


def _join(prefix: str, key: str) -> str:
    return f"{prefix}/{key}" if prefix else key


class ByteSource:
    """Interface; see the module docstring. ``label`` names the store without secrets."""

    label: str
    #: True when reads are plain file reads that need no event loop.
    is_local: bool = False
    #: Values to mask in messages about this store (its credentials); never in a label, repr or pickle.
    _secrets: tuple[str, ...] = ()

    def scrubbed(self, err: BaseException) -> BaseException:
        """``err`` safe to pass on: see `xarray_zarrmax.core.redact.scrubbed`, with this store's credentials."""
        return scrubbed(err, self._secrets)

    async def get(self, key: str) -> Buffer | None:
        raise NotImplementedError

    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]],
                         version: Hashable | None = None) -> list[Buffer] | None:
        """The bytes of each ``(start, stop)`` range, or None if the object is missing.

        With ``version`` (from a `Fetched` of this key), raise `ObjectChanged` unless every range comes from
        that version of the object (a missing object counts as changed).
        """
        raise NotImplementedError

    async def get_large(self, key: str, max_size: int | None = None) -> Fetched | None:
        """A whole data object, possibly large (a shard): sources that gain from it fetch parallel ranges
        (and return `Segments`; read it with `view`).

        Objects larger than ``max_size`` (what the array's metadata allows) raise `CorruptDataError`.
        """
        raise NotImplementedError

    async def get_suffix(self, key: str, nbytes: int) -> Fetched | None:
        """The last ``nbytes`` bytes (fewer if the object is smaller)."""
        raise NotImplementedError

    async def get_prefix(self, key: str, nbytes: int) -> Fetched | None:
        """The first ``nbytes`` bytes (fewer if the object is smaller)."""
        raise NotImplementedError

    async def list_dir(self, prefix: str) -> list[str]:
        """The names directly under ``prefix``, in the order the store lists them (zarr-python reports a
        group's members in that order)."""
        raise NotImplementedError

    @property
    def supports_consolidated_metadata(self) -> bool:
        """False where the store cannot hold consolidated metadata (Icechunk): ``consolidated=True`` then
        reads the hierarchy itself, as zarr-python and engine="zarr" do."""
        return True

    def zarr_store(self) -> Any:
        """A zarr Store over the same bytes, for arrays that fall back to zarr-python."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label!r})"


def check_size(source: ByteSource, key: str, size: int, max_size: int) -> None:
    if size > max_size:
        raise CorruptDataError(
            f"{key!r} on {source.label} is {size} bytes, more than the {max_size} its array's chunk layout "
            "can encode to: refusing to read it"
        )


def _checked_key(source: ByteSource, key: str) -> str:
    """``key`` if it names an object inside the store, else ValueError (as zarr-python's normalize_path): no
    key, whatever the metadata or the caller says, may read outside the store's root."""
    bounded = f"/{key}/"  # a "." or ".." segment, first, last or between slashes
    if key.startswith("/") or "/./" in bounded or "/../" in bounded:
        raise ValueError(
            f"expected a key inside the store: relative, without '.' or '..' segments. Got {key!r} on "
            f"{source.label} instead."
        )
    return key


def _pread_into(fd: int, buf: np.ndarray, offset: int) -> int:
    """Fill ``buf`` from ``offset`` (reads may come back short); returns the bytes read, fewer only at EOF."""
    done = os.preadv(fd, [buf], offset)  # the common case: all of it at once
    if done == buf.nbytes or done == 0:
        return done
    view = memoryview(buf).cast("B")
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n == 0:
            break
        done += n
    return done


# -- local files ---------------------------------------------------------------------------------------


def _file_version(st: os.stat_result) -> tuple[int, ...]:
    # zarr's LocalStore replaces files (a new inode per write); in-place writers change size, mtime or ctime.
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _file_fetched(data: np.ndarray, st: os.stat_result) -> Fetched:
    settled = time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) >= RACY_WINDOW_NS
    return Fetched(data, st.st_size, _file_version(st), settled)


def _check_unchanged(fd: int, before: os.stat_result, key: str) -> None:
    """Raise `ObjectChanged` if the file's size or timestamps changed while it was read: a writer that truncates
    and rewrites a file in place can leave a reader with bytes from two versions (or zeros) and no short read.

    This catches a write that starts during the read. One already under way when the read began (its
    timestamps set before our first fstat) is not visible: no reader without a lock can tell; engine="zarr"
    returns such bytes too. Writers that replace files atomically (zarr-python's, ours) are always safe."""
    after = os.fstat(fd)  # the descriptor's file: device and inode cannot change
    if after.st_size != before.st_size or after.st_mtime_ns != before.st_mtime_ns:
        raise ObjectChanged(key)
    # ctime also catches a writer that sets mtime back; but unlinking the file (an atomic writer renaming a new
    # file over it, as zarr-python does) changes its ctime too, and the bytes of this descriptor's file did not
    # change: that read is whole and consistent (the old version), not a change.
    if after.st_ctime_ns != before.st_ctime_ns and not (after.st_nlink == 0 < before.st_nlink):
        raise ObjectChanged(key)


class OpenedFile:
    """One local object held open while it is read in pieces: every piece comes from this descriptor and its
    fstat is the version, so pieces and version belong together (also when the file is replaced meanwhile).
    `check_unchanged` at the end catches an in-place rewrite that started during the reads."""

    def __init__(self, source: LocalSource, key: str, fd: int, st: os.stat_result) -> None:
        self.source, self.key, self._fd, self._st = source, key, fd, st
        self.size = st.st_size
        self.version = _file_version(st)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Bytes [start, stop), fewer only where the file ends first; counted as a request."""
        buf = np.empty(max(stop - start, 0), dtype=np.uint8)
        n = _pread_into(self._fd, buf, start)
        accounting.record(self.source.label, "get", self.key, n)
        return buf[:n]

    def read_scattered(self, buffers: Sequence[memoryview | np.ndarray], start: int) -> int:
        """Fill ``buffers`` in turn from ``start`` with one `preadv` (one request): the bytes read, fewer where
        the file ends first or the read came back short (callers needing all of them read again another way)."""
        n = os.preadv(self._fd, buffers, start)
        accounting.record(self.source.label, "get", self.key, n)
        return n

    def fetched(self, data: np.ndarray) -> Fetched:
        return _file_fetched(data, self._st)

    def check_unchanged(self) -> None:
        _check_unchanged(self._fd, self._st, self.key)

    def close(self) -> None:
        os.close(self._fd)


class LocalSource(ByteSource):
    """A directory on a local file system: positional reads into preallocated buffers, no event loop.

    Every read of an object is made from one descriptor whose fstat gives the version, so bytes and version
    always belong together even when the file is replaced meanwhile.
    """

    is_local = True

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._root = str(self.root)
        self.label = f"file://{self.root}"
        self._zarr_store: Any = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (LocalSource, (str(self.root),))

    def _path(self, key: str) -> str:
        return f"{self._root}{os.sep}{_checked_key(self, key)}" if os.sep == "/" else \
            os.path.join(self._root, *_checked_key(self, key).split("/"))

    def _open(self, key: str) -> tuple[int, os.stat_result] | None:
        """The object's descriptor and its fstat (every read needs both), or None when there is no object."""
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            return None
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            # A key that is now a directory (the array was rewritten with more dimensions under an open
            # Dataset) holds no object: zarr's LocalStore reads it as a missing chunk, and so do we.
            os.close(fd)
            return None
        return fd, st

    def open_file(self, key: str) -> OpenedFile | None:
        """The object held open for reads in pieces (close it), or None when there is no object."""
        opened = self._open(key)
        return None if opened is None else OpenedFile(self, key, *opened)

    def read(self, key: str, max_size: int | None = None) -> Fetched | None:
        opened = self._open(key)
        if opened is None:
            return None
        fd, st = opened
        try:
            if max_size is not None:
                check_size(self, key, st.st_size, max_size)
            out = np.empty(st.st_size, dtype=np.uint8)
            done = _pread_into(fd, out, 0)
            accounting.record(self.label, "get", key, done)
            _check_unchanged(fd, st, key)
        finally:
            os.close(fd)
        return _file_fetched(out[:done], st)

    def read_into(self, key: str, out: np.ndarray) -> bool:
        """Fill ``out`` (bytes) with the whole object, read straight into it: False if there is no object.

        The object must be exactly ``out.nbytes`` long. A file truncated while it is read gives an error; one
        replaced atomically gives the complete bytes of the file that was opened; one rewritten in place is read
        again when the rewrite starts during the read (`_check_unchanged` says what it cannot see).
        """
        for _ in range(LOCAL_ATTEMPTS):
            opened = self._open(key)
            if opened is None:
                return False
            fd, st = opened
            try:
                if st.st_size != out.nbytes:
                    raise CorruptDataError(f"key {key!r} on {self.label}: the object holds {st.st_size} bytes, "
                                           f"expected {out.nbytes} (an uncompressed chunk)")
                done = _pread_into(fd, out, 0)
                accounting.record(self.label, "get", key, done)
                if done != out.nbytes:
                    raise CorruptDataError(f"key {key!r} on {self.label}: read {done} of {out.nbytes} bytes; the "
                                           "file was truncated while it was read")
                _check_unchanged(fd, st, key)
                return True
            except ObjectChanged:
                continue  # modified in place while read: read it again
            finally:
                os.close(fd)
        raise StoreAccessError(f"key {key!r} on {self.label} changed {LOCAL_ATTEMPTS} times while it was being "
                               "read: a writer is rewriting it in place; read again once it is done")

    def read_ranges(self, key: str, ranges: Sequence[tuple[int, int]],
                    version: Hashable | None = None) -> list[np.ndarray] | None:
        file = self.open_file(key)
        if file is None:
            if version is not None:
                raise ObjectChanged(key)
            return None
        try:
            if version is not None and file.version != version:
                raise ObjectChanged(key)
            out = [file.read(start, stop) for start, stop in ranges]
            file.check_unchanged()
        finally:
            file.close()
        return out

    def read_end(self, key: str, nbytes: int, *, suffix: bool) -> Fetched | None:
        """The last (``suffix``) or first ``nbytes`` bytes, with the version of the file they came from."""
        file = self.open_file(key)
        if file is None:
            return None
        try:
            start = max(file.size - nbytes, 0) if suffix else 0
            data = file.read(start, start + min(nbytes, file.size))
            file.check_unchanged()
        finally:
            file.close()
        return file.fetched(data)

    def read_settled(self, key: str, max_size: int | None = None) -> Fetched | None:
        """`read`, again when the file was modified in place while it was read (for callers with no retry of
        their own: metadata, the read of a merge, a whole local chunk), up to 3 times, then `StoreAccessError`."""
        for _ in range(LOCAL_ATTEMPTS):
            try:
                return self.read(key, max_size)
            except ObjectChanged:
                continue
        raise StoreAccessError(f"key {key!r} on {self.label} changed {LOCAL_ATTEMPTS} times while it was being "
                               "read: a writer is rewriting it in place; read again once it is done")

    async def get(self, key: str) -> Buffer | None:
        got = self.read_settled(key)
        return None if got is None else got.data

    async def get_large(self, key: str, max_size: int | None = None) -> Fetched | None:
        return self.read(key, max_size)

    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]],
                         version: Hashable | None = None) -> list[Buffer] | None:
        return self.read_ranges(key, ranges, version)

    async def get_suffix(self, key: str, nbytes: int) -> Fetched | None:
        return self.read_end(key, nbytes, suffix=True)

    async def get_prefix(self, key: str, nbytes: int) -> Fetched | None:
        return self.read_end(key, nbytes, suffix=False)

    async def list_dir(self, prefix: str) -> list[str]:
        accounting.record(self.label, "list", prefix)
        try:
            return os.listdir(self._path(prefix) if prefix else self.root)  # unsorted, as zarr's LocalStore
        except (FileNotFoundError, NotADirectoryError):
            return []

    def zarr_store(self) -> Any:
        from zarr.storage import LocalStore

        if self._zarr_store is None:
            self._zarr_store = LocalStore(self.root, read_only=True)
        return self._zarr_store


# -- obstore (S3, and any other obstore store) ------------------------------------------------------------

#: obstore errors that say the request may succeed if sent again.
_TRANSIENT_WORDS = ("timed out", "timeout", "connection", "reset", "broken pipe", "error sending request",
                    "incomplete", "eof", "slow down", "unexpected end", "body error")


_STATUS = re.compile(r"status code: (\d{3})")


def _status(err: BaseException) -> int | None:
    """The HTTP status a store's error reports (not any number that happens to be in a key)."""
    match = _STATUS.search(str(err))
    return int(match.group(1)) if match else None


def _is_transient(err: BaseException) -> bool:
    status = _status(err)
    if status is not None:
        return status >= 500 or status in (408, 429)  # the server answered: only these may change on retry
    text = str(err).lower()
    return any(w in text for w in _TRANSIENT_WORDS)


_registry_lock = threading.Lock()
#: Sources unpickled in this process, by digest of their payload: tasks on a worker share one store and its
#: connection pool. Held weakly, since a source no task uses any more is worth nothing, and an in-memory store
#: pickles its contents (one copy per version read would pile up on every worker, without end); the most
#: recently used are also held in `_recent`, up to RECENT_STORE_BYTES of payload, so that tasks running one after
#: another do not unpickle their store (and open its connections) again each time.
_registry: weakref.WeakValueDictionary[bytes, ByteSource] = weakref.WeakValueDictionary()
_recent: collections.OrderedDict[bytes, tuple[ByteSource, int]] = collections.OrderedDict()


def _after_fork() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()  # a lock held by a thread that did not survive fork would never open


os.register_at_fork(after_in_child=_after_fork)


def _restore(kind: type[ByteSource], payload: bytes, label: str) -> ByteSource:
    """Unpickle a source once per process: every task on a worker shares its store and connection pool.

    ``payload`` pickles the keyword arguments ``kind`` is built from, but its label.
    """
    digest = hashlib.sha256(payload).digest()  # a digest, never the payload: it holds credentials
    with _registry_lock:
        found = _registry.get(digest)
        if found is None:
            found = _registry[digest] = kind(**pickle.loads(payload), label=label)  # type: ignore[call-arg]
        _recent.pop(digest, None)
        _recent[digest] = (found, len(payload))
        while len(_recent) > 1 and (len(_recent) > RECENT_STORES
                                    or sum(size for _, size in _recent.values()) > RECENT_STORE_BYTES):
            _recent.popitem(last=False)
        return found


# obstore runs its requests on a tokio runtime, whose threads a forked child does not inherit: a request from
# such a child would wait forever. Remember which process first used obstore, and refuse in any other.
_obstore_pid: int | None = None


def _check_not_forked(label: str) -> None:
    global _obstore_pid
    pid = os.getpid()
    if _obstore_pid is None:
        _obstore_pid = pid
    elif _obstore_pid != pid:
        raise StoreAccessError(
            f"{label}: this process was forked from one that had already used obstore, whose runtime does not "
            "survive fork(); a request would hang. Start workers with the 'spawn' or 'forkserver' method "
            "(dask.distributed's default is 'spawn'), or read before the parent first touches the store."
        )


class ObstoreSource(ByteSource):
    """An obstore store (S3Store, LocalStore, HTTPStore, ...); requests are async and share the loop."""

    def __init__(self, store: Any, label: str | None = None) -> None:
        self.store = store
        self.label = label or _obstore_label(store)
        self._secrets = _obstore_secrets(store)  # rebuilt on unpickle, never pickled
        self._zarr_store: Any = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (ObstoreSource, pickle.dumps({"store": self.store}), self.label))

    def failure(self, err: BaseException, what: str, key: str) -> BaseException:
        """What a failed request ``what key`` raises: built-in or our types (obstore's own are no OSError), the
        store's text credentials-masked and cut to its first line (it may quote the endpoint with its
        password)."""
        import obstore.exceptions as oe

        if isinstance(err, oe.NotFoundError):
            return FileNotFoundError(key)
        if isinstance(err, oe.PreconditionError):
            return ObjectChanged(key)  # If-Match failed: the object was rewritten
        if isinstance(err, oe.AlreadyExistsError):
            return ObjectChanged(key)  # a PUT with If-None-Match: someone created the object meanwhile
        if isinstance(err, (oe.PermissionDeniedError, oe.UnauthenticatedError)):
            return StoreAccessError(f"{what} {key!r} on {self.label} was refused: check the credentials "
                                    f"({type(err).__name__}: {_first_line(err, self._secrets)})")
        if "NoSuchBucket" in str(err):
            return FileNotFoundError(f"{self.label}: the bucket does not exist")
        return RequestFailed(f"{what} {key!r} on {self.label} failed: {type(err).__name__}: "
                             f"{_first_line(err, self._secrets)}", _status(err))

    async def _call(self, what: str, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Send one request under the process's budget; errors become built-in or our exceptions.

        obstore already retries failed requests (5xx, connection errors, timeouts) with backoff, as its
        retry_config says. A body that breaks off after the response began is not retried there, so it is
        here, ``config.retries`` times.
        """
        _check_not_forked(self.label)
        retries = get_config().retries
        for attempt in range(retries + 1):
            body_started = False
            failure: BaseException
            try:
                async with request_slot():
                    result = await fn(self.store, *args, **kwargs)
                    if hasattr(result, "bytes_async"):
                        body_started = True
                        return result, await result.bytes_async()
                    return result
            except FileNotFoundError:
                raise
            except Exception as err:
                failure = self.failure(err, what, key)
                # only a failed request may be sent again, never a refusal or a missing or changed object
                if body_started and attempt < retries and isinstance(failure, RequestFailed) and _is_transient(err):
                    await asyncio.sleep(min(0.05 * 2**attempt, 2.0) * (0.5 + random.random()))
                    continue
            # Raised outside the except clause: not even __context__ keeps the store's own text, which may
            # hold what was masked above.
            raise failure
        raise AssertionError("unreachable")

    async def get(self, key: str) -> Buffer | None:
        import obstore

        try:
            _, data = await self._call("GET", key, obstore.get_async, key)
        except FileNotFoundError:
            accounting.record(self.label, "get", key, 0)
            return None
        accounting.record(self.label, "get", key, len(data))
        return data

    async def _get_versioned(self, what: str, key: str, options: dict[str, Any]) -> Fetched | None:
        import obstore

        try:
            result, data = await self._call(what, key, obstore.get_async, key, options=options)
        except FileNotFoundError:
            accounting.record(self.label, "get", key, 0)
            return None
        accounting.record(self.label, "get", key, len(data))
        etag = result.meta.get("e_tag")
        return Fetched(data, int(result.meta["size"]), etag, etag is not None)

    async def get_large(self, key: str, max_size: int | None = None) -> Fetched | None:
        """The first ``split_size`` bytes tell the object's size and ETag; the rest comes as parallel ranges,
        each conditional on that ETag, so the parts of one object never mix two versions of it.

        One request for objects up to ``split_size``; a 64 MB shard with the default 16 MiB is 4 requests
        in flight at once, which matters on S3 where one stream tops out far below the NIC.
        """
        split = get_config().split_size
        try:
            head = await self._get_versioned("GET", key, {"range": (0, split)})
        except RequestFailed as err:
            if err.status != 416:
                raise
            # an empty object has no first byte to ask for
            head = await self._get_versioned("GET", key, {})
        if head is None:
            return None
        first, size = cast(Buffer, head.data), head.size  # a single response: never Segments
        assert size is not None
        if max_size is not None:
            check_size(self, key, size, max_size)  # before fetching the rest
        got = len(memoryview(first).cast("B"))
        if got != min(split, size):
            raise CorruptDataError(f"{key!r} on {self.label}: asked for bytes [0, {min(split, size)}) of a "
                                   f"{size}-byte object, got {got}")
        if size <= got:
            return head
        starts = range(got, size, split)
        rest = await self.get_ranges(key, [(a, min(a + split, size)) for a in starts], head.version)
        assert rest is not None  # with a version, a vanished object raises ObjectChanged
        for a, part in zip(starts, rest, strict=True):
            n = len(memoryview(part).cast("B"))
            if n != min(split, size - a):
                raise CorruptDataError(f"{key!r} on {self.label}: asked for bytes [{a}, {min(a + split, size)}), "
                                       f"got {n}: the object is shorter than its size said")
        return Fetched(Segments([first, *rest]), size, head.version, head.cacheable)

    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]],
                         version: Hashable | None = None) -> list[Buffer] | None:
        import obstore

        async def one(start: int, stop: int) -> Buffer:
            if stop <= start:
                return b""
            options: dict[str, Any] = {"range": (start, stop)}
            if version is not None:
                options["if_match"] = version
            try:
                _, data = await self._call("GET range", key, obstore.get_async, key, options=options)
            except ObjectChanged:
                accounting.record(self.label, "get", key, 0)  # a request was sent: it counts
                raise
            accounting.record(self.label, "get", key, len(data))
            return data

        try:
            return await gather_or_cancel(*(one(a, b) for a, b in ranges))
        except FileNotFoundError:
            accounting.record(self.label, "get", key, 0)
            if version is not None:
                raise ObjectChanged(key) from None
            return None

    async def get_suffix(self, key: str, nbytes: int) -> Fetched | None:
        return await self._get_versioned("GET suffix", key, {"range": {"suffix": nbytes}})

    async def get_prefix(self, key: str, nbytes: int) -> Fetched | None:
        return await self._get_versioned("GET range", key, {"range": (0, nbytes)})

    async def list_dir(self, prefix: str) -> list[str]:
        import obstore

        path = prefix.strip("/")
        listing = await self._call("LIST", path + "/", obstore.list_with_delimiter_async, path + "/" if path else None)
        accounting.record(self.label, "list", prefix)
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in listing["common_prefixes"]]
        names += [o["path"].rsplit("/", 1)[-1] for o in listing["objects"]]
        return sorted(set(names))

    def zarr_store(self) -> Any:
        from zarr.storage import ObjectStore

        if self._zarr_store is None:
            self._zarr_store = ObjectStore(self.store, read_only=True)
        return self._zarr_store


def _first_line(err: BaseException, secrets: Sequence[str] = ()) -> str:
    """The first line of a third party's error, credentials masked (see `redact`)."""
    text = redact(str(err), secrets).strip().splitlines()
    return text[0][:300] if text else ""


def _obstore_label(store: Any) -> str:
    # Never the config: it holds credentials.
    name = type(store).__name__
    prefix = str(getattr(store, "prefix", "") or "")
    if name == "S3Store":
        endpoint = (store.config or {}).get("endpoint", "aws")
        return f"{_join('s3://' + str(store.config.get('bucket', '?')), prefix)} ({_redact_url(str(endpoint))})"
    if name == "LocalStore":
        return f"file://{prefix}"
    return f"{name}({prefix})"


def _obstore_secrets(store: Any) -> tuple[str, ...]:
    """Credentials in the store's config, and the password and query values of its URL (an HTTPStore made
    from a presigned URL keeps the query, and obstore's errors quote it)."""
    options = dict(getattr(store, "config", None) or {})
    options["url"] = getattr(store, "url", None)
    return secrets_in(options)


def _redact_url(url: str) -> str:
    """``url`` without its userinfo, and with any credential in its query masked."""
    parsed = urlparse(url)
    if parsed.password or parsed.username:
        host = parsed.hostname or ""
        url = parsed._replace(netloc=host + (f":{parsed.port}" if parsed.port else "")).geturl()
    return redact(url)


# -- any zarr Store (MemoryStore, Icechunk, FsspecStore, ...) -------------------------------------------


class ZarrStoreSource(ByteSource):
    """Any zarr-python Store, through its async API (Icechunk stores read from their session).

    Only a read-only Icechunk session reads one immutable snapshot: there the snapshot id is the version of
    every object, so shard indexes are cached. Any other zarr Store may change under us without a way to
    tell, so nothing read from it is reused across reads.
    """

    def __init__(self, store: Any, label: str | None = None, secrets: Sequence[str] = ()) -> None:
        self.store = store
        self.label = label or f"{type(store).__name__}@{id(store):x}"
        self.snapshot = _immutable_snapshot(store)
        # Masked in our messages: ``secrets`` (the password of the URL the store was made from, which fsspec
        # may keep in its path) and the credentials in an FsspecStore's options (the file system zarr wraps
        # to make it async keeps them).
        self._given_secrets = tuple(secrets)
        fs = getattr(store, "fs", None)
        self._secrets = self._given_secrets + tuple(
            s for f in (fs, getattr(fs, "sync_fs", None)) for s in secrets_in(getattr(f, "storage_options", None))
        )

    def __reduce__(self) -> tuple[Any, ...]:
        payload = pickle.dumps({"store": self.store, "secrets": self._given_secrets})
        return (_restore, (ZarrStoreSource, payload, self.label))

    async def _get(self, key: str, byte_range: Any = None) -> Buffer | None:
        from zarr.core.buffer import default_buffer_prototype

        _checked_key(self, key)  # a zarr LocalStore reads "../x" outside its root
        failure: BaseException | None = None
        try:
            async with request_slot():
                buf = await self.store.get(key, prototype=default_buffer_prototype(), byte_range=byte_range)
        except FileNotFoundError:
            buf = None
        except Exception as err:
            failure = StoreAccessError(
                f"GET {key!r} on {self.label} failed: {type(err).__name__}: {_first_line(err, self._secrets)}"
            )
        if failure is not None:
            raise failure  # outside the except clause: not even __context__ keeps the store's own text
        data = None if buf is None else buf.as_numpy_array().view(np.uint8).reshape(-1)
        accounting.record(self.label, "get", key, 0 if data is None else len(data))
        return data

    def _fetched(self, data: Buffer | None, size: int | None) -> Fetched | None:
        if data is None:
            return None
        return Fetched(data, size, self.snapshot, self.snapshot is not None)

    async def get(self, key: str) -> Buffer | None:
        return await self._get(key)

    async def get_large(self, key: str, max_size: int | None = None) -> Fetched | None:
        data = await self._get(key)
        if data is not None and max_size is not None:
            check_size(self, key, len(data), max_size)
        return self._fetched(data, None if data is None else len(data))

    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]],
                         version: Hashable | None = None) -> list[Buffer] | None:
        from zarr.abc.store import RangeByteRequest

        parts = await gather_or_cancel(*(self._get(key, RangeByteRequest(a, b)) for a, b in ranges if b > a))
        if any(p is None for p in parts):
            if version is not None:
                raise ObjectChanged(key)
            return None
        it = iter(parts)
        return [next(it) if b > a else b"" for a, b in ranges]

    async def get_suffix(self, key: str, nbytes: int) -> Fetched | None:
        from zarr.abc.store import SuffixByteRequest

        return self._fetched(await self._get(key, SuffixByteRequest(nbytes)), None)

    async def get_prefix(self, key: str, nbytes: int) -> Fetched | None:
        from zarr.abc.store import RangeByteRequest

        return self._fetched(await self._get(key, RangeByteRequest(0, nbytes)), None)

    async def list_dir(self, prefix: str) -> list[str]:
        path = _checked_key(self, prefix.strip("/"))
        accounting.record(self.label, "list", prefix)
        try:
            return list(dict.fromkeys([name.rstrip("/") async for name in self.store.list_dir(path)]))
        except FileNotFoundError:
            return []
        except Exception as err:
            failure = StoreAccessError(
                f"LIST {prefix!r} on {self.label} failed: {type(err).__name__}: {_first_line(err, self._secrets)}"
            )
        raise failure  # outside the except clause: not even __context__ keeps the store's own text

    @property
    def supports_consolidated_metadata(self) -> bool:
        return bool(getattr(self.store, "supports_consolidated_metadata", True))

    def zarr_store(self) -> Any:
        return self.store


def _immutable_snapshot(store: Any) -> tuple[str, str] | None:
    """("icechunk", snapshot id) for the store of a read-only Icechunk session, else None."""
    if not (type(store).__module__ or "").startswith("icechunk"):
        return None
    session = getattr(store, "session", None)
    if session is None or not session.read_only:
        return None
    return ("icechunk", str(session.snapshot_id))


# -- resolving what the user passed ------------------------------------------------------------------------

_CLIENT_OPTION_KEYS = {"allow_http", "allow_invalid_certificates", "timeout", "connect_timeout",
                       "pool_idle_timeout", "http1_only", "http2_only", "user_agent"}

#: s3fs's names for storage_options (what engine="zarr" reads s3:// URLs with), and obstore's for the same.
_S3FS_OPTIONS = {"key": "access_key_id", "secret": "secret_access_key", "token": "session_token",
                 "endpoint_url": "endpoint", "anon": "skip_signature"}
_S3FS_CLIENT_KWARGS = {"endpoint_url": "endpoint", "region_name": "region"}


def default_retry_config() -> dict[str, Any]:
    """obstore's retries for the S3 stores we build: up to 10 with backoff from 0.1 s to 2 s, and never past
    30 s, so an outage of a few seconds is survived and a dead endpoint fails in bounded time."""
    return {"max_retries": 10, "retry_timeout": timedelta(seconds=30),
            "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2), "base": 2}}


def obstore_s3_options(storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``storage_options`` for an s3:// URL with s3fs's names renamed to obstore's, so the options written for
    engine="zarr" open the same bucket here: ``key``, ``secret``, ``token``, ``anon``, ``endpoint_url`` and
    ``client_kwargs={"endpoint_url": ..., "region_name": ...}``. Other names pass as they are (obstore refuses
    the ones it does not know)."""
    options = dict(storage_options or {})
    client_kwargs = dict(options.pop("client_kwargs", None) or {})
    unknown = sorted(set(client_kwargs) - set(_S3FS_CLIENT_KWARGS))
    if unknown:
        raise ValueError(f"expected only {sorted(_S3FS_CLIENT_KWARGS)} in storage_options['client_kwargs'] for an "
                         f"s3:// URL. Got also {unknown}.")
    renames = [(name, options.pop(name), new) for name, new in _S3FS_OPTIONS.items() if name in options]
    renames += [(f"client_kwargs[{name!r}]", value, _S3FS_CLIENT_KWARGS[name]) for name, value in client_kwargs.items()]
    for name, value, new in renames:
        if new in options and options[new] != value:  # no values in the message: they may be credentials
            raise ValueError(f"storage_options give {name} (s3fs's name) and {new!r} (obstore's) different values")
        options[new] = bool(value) if name == "anon" else value
    return options


def s3_store_from_url(url: str, storage_options: Mapping[str, Any] | None) -> ObstoreSource:
    """An obstore S3Store for ``s3://bucket/prefix``; credentials from options (obstore's names or s3fs's, see
    `obstore_s3_options`) or the AWS environment."""
    from obstore.store import S3Store

    parsed = urlparse(url)
    if not parsed.netloc:
        raise ValueError(f"expected an S3 URL of the form s3://bucket/path. Got {redact(url)!r} instead.")
    if "@" in parsed.netloc:  # else "key:secret@bucket" would become the bucket name, shown in every label
        raise ValueError(f"expected an S3 URL of the form s3://bucket/path, with credentials in storage_options. "
                         f"Got credentials in the URL: {redact(url)!r}")
    options = obstore_s3_options(storage_options)
    client_options = dict(options.pop("client_options", {}) or {})
    retry_config = options.pop("retry_config", None) or default_retry_config()
    for key in list(options):
        if key in _CLIENT_OPTION_KEYS:
            client_options[key] = options.pop(key)
    endpoint = options.get("endpoint") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and str(endpoint).startswith("http://"):
        client_options.setdefault("allow_http", True)
    options.setdefault("region", os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1")
    try:
        client_options.setdefault("connect_timeout", "5s")
        client_options.setdefault("timeout", "60s")
        store = S3Store(parsed.netloc, prefix=parsed.path.strip("/") or None,
                        client_options=cast(Any, client_options), retry_config=cast(Any, retry_config), **options)
    except Exception as err:
        failure = ValueError(
            f"could not configure S3 store for {redact(url)!r}: {type(err).__name__}: "
            f"{_first_line(err, secrets_in(options) + secrets_in(client_options))}"
        )
    else:
        return ObstoreSource(store)
    raise failure  # outside the except clause: not even __context__ keeps obstore's own text


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
        found = [_join(prefix, name) for prefix, names in zip(found, listed, strict=True)
                 for name in names if fnmatch.fnmatchcase(name, part)]
    return sorted(f"s3://{bucket}/{_join(root, key)}" for key in found)


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
