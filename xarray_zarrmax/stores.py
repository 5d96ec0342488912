"""Byte sources: one small, picklable interface over local files, obstore stores and any zarr Store.

A source answers ``get`` (whole object), ``get_ranges`` (several byte ranges of one object), ``get_suffix``
(the last n bytes, for shard indexes) and ``list_dir`` (immediate children of a prefix). Missing objects
are ``None``, never an exception, so callers can apply fill values. Every request is counted in
`xarray_zarrmax.accounting`. Sources never import xarray.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import pickle
import random
import re
import threading
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlparse

import numpy as np

from . import accounting
from ._budget import request_slot
from ._loop import gather_or_cancel
from ._redact import redact, scrubbed, secrets_in
from .config import get_config
from .errors import CorruptDataError, StoreAccessError

Buffer = Any  # anything exposing the buffer protocol: bytes, memoryview, numpy uint8, obstore Bytes


class Segments:
    """An object fetched as consecutive byte ranges, kept as the parts that arrived (no reassembly copy).

    `view` is zero-copy when the range lies in one part (almost every chunk of a shard fetched in 16 MiB
    ranges) and copies only a range that straddles parts.
    """

    __slots__ = ("parts", "starts", "size")

    def __init__(self, parts: Sequence[Buffer]) -> None:
        self.parts = [memoryview(p).cast("B") for p in parts]
        self.starts = np.cumsum([0] + [len(p) for p in self.parts]).tolist()
        self.size = int(self.starts[-1])

    def __len__(self) -> int:
        return self.size

    def view(self, start: int, stop: int) -> Buffer:
        start, stop = max(start, 0), min(stop, self.size)
        if stop <= start:
            return memoryview(b"")
        i = int(np.searchsorted(self.starts, start, side="right")) - 1
        a = start - self.starts[i]
        if stop <= self.starts[i + 1]:
            return self.parts[i][a:a + stop - start]
        out = np.empty(stop - start, dtype=np.uint8)
        done = 0
        while done < stop - start:
            take = min(len(self.parts[i]) - a, stop - start - done)
            out[done:done + take] = np.frombuffer(self.parts[i][a:a + take], dtype=np.uint8)
            done += take
            i, a = i + 1, 0
        return out


def view(buf: Buffer | Segments, start: int, stop: int) -> Buffer:
    """Bytes [start, stop) of a fetched object, whether it arrived whole or as `Segments`."""
    if isinstance(buf, Segments):
        return buf.view(start, stop)
    return memoryview(buf).cast("B")[start:stop]


def nbytes(buf: Buffer | Segments) -> int:
    return len(buf) if isinstance(buf, Segments) else len(memoryview(buf).cast("B"))


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
        """``err`` safe to pass on: see `xarray_zarrmax._redact.scrubbed`, with this store's credentials."""
        return scrubbed(err, self._secrets)

    async def get(self, key: str) -> Buffer | None:
        raise NotImplementedError

    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[Buffer] | None:
        """Return the bytes of each ``(start, stop)`` range, or None if the object is missing."""
        raise NotImplementedError

    async def get_large(self, key: str, max_size: int | None = None) -> Buffer | Segments | None:
        """A whole data object, possibly large (a shard): sources that gain from it fetch parallel ranges
        (and return `Segments`; read it with `view`).

        Objects larger than ``max_size`` (what the array's metadata allows) raise `CorruptDataError`.
        """
        data = await self.get(key)
        if data is not None and max_size is not None:
            check_size(self, key, len(memoryview(data).cast("B")), max_size)
        return data

    async def get_suffix(self, key: str, nbytes: int) -> tuple[Buffer, int | None] | None:
        """The last ``nbytes`` bytes and, where the store says, the object's size."""
        raise NotImplementedError

    async def list_dir(self, prefix: str) -> list[str]:
        raise NotImplementedError

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
    if key.startswith("/") or any(segment in (".", "..") for segment in key.split("/")):
        raise ValueError(
            f"expected a key inside the store: relative, without '.' or '..' segments. Got {key!r} on "
            f"{source.label} instead."
        )
    return key


def _pread_into(fd: int, buf: np.ndarray, offset: int) -> int:
    """Fill ``buf`` from ``offset`` (reads may come back short); returns the bytes read, fewer only at EOF."""
    view = memoryview(buf).cast("B")
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n == 0:
            break
        done += n
    return done


# -- local files ---------------------------------------------------------------------------------------


class LocalSource(ByteSource):
    """A directory on a local file system: positional reads into preallocated buffers, no event loop."""

    is_local = True

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.label = f"file://{self.root}"
        self._zarr_store: Any = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (LocalSource, (str(self.root),))

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *_checked_key(self, key).split("/"))

    def _open(self, key: str) -> int | None:
        try:
            return os.open(self._path(key), os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read(self, key: str, max_size: int | None = None) -> np.ndarray | None:
        fd = self._open(key)
        if fd is None:
            return None
        try:
            size = os.fstat(fd).st_size
            if max_size is not None:
                check_size(self, key, size, max_size)
            out = np.empty(size, dtype=np.uint8)
            done = _pread_into(fd, out, 0)
        finally:
            os.close(fd)
        accounting.record(self.label, "get", key, done)
        return out[:done]

    def read_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[np.ndarray] | None:
        fd = self._open(key)
        if fd is None:
            return None
        out = []
        try:
            for start, stop in ranges:
                buf = np.empty(max(stop - start, 0), dtype=np.uint8)
                n = _pread_into(fd, buf, start)
                accounting.record(self.label, "get", key, n)
                out.append(buf[:n])
        finally:
            os.close(fd)
        return out

    def read_suffix(self, key: str, nbytes: int) -> tuple[np.ndarray, int] | None:
        fd = self._open(key)
        if fd is None:
            return None
        try:
            size = os.fstat(fd).st_size
            start = max(size - nbytes, 0)
            buf = np.empty(size - start, dtype=np.uint8)
            n = _pread_into(fd, buf, start)
        finally:
            os.close(fd)
        accounting.record(self.label, "get", key, n)
        return buf[:n], size

    async def get(self, key: str) -> Buffer | None:
        return self.read(key)

    async def get_large(self, key: str, max_size: int | None = None) -> Buffer | None:
        return self.read(key, max_size)

    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[Buffer] | None:
        return self.read_ranges(key, ranges)

    async def get_suffix(self, key: str, nbytes: int) -> tuple[Buffer, int | None] | None:
        return self.read_suffix(key, nbytes)

    async def list_dir(self, prefix: str) -> list[str]:
        accounting.record(self.label, "list", prefix)
        try:
            return sorted(os.listdir(self._path(prefix) if prefix else self.root))
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
_registry: dict[bytes, ByteSource] = {}


def _after_fork() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()  # a lock held by a thread that did not survive fork would never open


os.register_at_fork(after_in_child=_after_fork)


def _restore(kind: type[ByteSource], payload: bytes, label: str) -> ByteSource:
    """Unpickle a source once per process: every task on a worker shares its store and connection pool."""
    digest = hashlib.sha256(payload).digest()  # a digest, never the payload: it holds credentials
    with _registry_lock:
        found = _registry.get(digest)
        if found is None:
            found = _registry[digest] = kind(pickle.loads(payload), label)  # type: ignore[call-arg]
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
        return (_restore, (ObstoreSource, pickle.dumps(self.store), self.label))

    async def _call(self, what: str, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Send one request under the process's budget; errors become built-in or our exceptions.

        obstore already retries failed requests (5xx, connection errors, timeouts) with backoff, as its
        retry_config says. A body that breaks off after the response began is not retried there, so it is
        here, ``config.retries`` times.
        """
        import obstore.exceptions as oe

        _check_not_forked(self.label)
        retries = get_config().retries
        for attempt in range(retries + 1):
            body_started = False
            try:
                async with request_slot():
                    result = await fn(self.store, *args, **kwargs)
                    if hasattr(result, "bytes_async"):
                        body_started = True
                        return result, await result.bytes_async()
                    return result
            except FileNotFoundError:
                raise
            except oe.NotFoundError:
                raise FileNotFoundError(key) from None
            except (oe.PermissionDeniedError, oe.UnauthenticatedError) as err:
                raise StoreAccessError(
                    f"{what} {key!r} on {self.label} was refused: check the credentials "
                    f"({type(err).__name__}: {_first_line(err, self._secrets)})"
                ) from None
            except Exception as err:
                if "NoSuchBucket" in str(err):
                    raise FileNotFoundError(f"{self.label}: the bucket does not exist") from None
                if body_started and attempt < retries and _is_transient(err):
                    await asyncio.sleep(min(0.05 * 2**attempt, 2.0) * (0.5 + random.random()))
                    continue
                raise StoreAccessError(
                    f"{what} {key!r} on {self.label} failed: {type(err).__name__}: {_first_line(err, self._secrets)}"
                ) from None
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

    async def get_large(self, key: str, max_size: int | None = None) -> Buffer | Segments | None:
        """The first ``split_size`` bytes tell the object's size; the rest comes as parallel ranges.

        One request for objects up to ``split_size``; a 64 MB shard with the default 16 MiB is 4 requests
        in flight at once, which matters on S3 where one stream tops out far below the NIC.
        """
        import obstore

        split = get_config().split_size
        try:
            result, first = await self._call("GET", key, obstore.get_async, key, options={"range": (0, split)})
        except FileNotFoundError:
            accounting.record(self.label, "get", key, 0)
            return None
        except StoreAccessError as err:
            if _status(err.__cause__ or err) == 416:  # an empty object has no first byte to ask for
                return await self.get(key)
            raise
        accounting.record(self.label, "get", key, len(first))
        size = int(result.meta["size"])
        if max_size is not None:
            check_size(self, key, size, max_size)  # before fetching the rest
        if len(first) != min(split, size):
            raise CorruptDataError(f"{key!r} on {self.label}: asked for bytes [0, {min(split, size)}) of a "
                                   f"{size}-byte object, got {len(first)}")
        if size <= len(first):
            return first
        starts = range(len(first), size, split)
        rest = await self.get_ranges(key, [(a, min(a + split, size)) for a in starts])
        if rest is None:
            raise FileNotFoundError(f"{key!r} on {self.label} disappeared while it was being read")
        for a, part in zip(starts, rest, strict=True):
            got = len(memoryview(part).cast("B"))
            if got != min(split, size - a):
                raise CorruptDataError(f"{key!r} on {self.label}: asked for bytes [{a}, {min(a + split, size)}), "
                                       f"got {got}: the object changed or was cut short while being read")
        return Segments([first, *rest])

    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[Buffer] | None:
        import obstore

        async def one(start: int, stop: int) -> Buffer:
            if stop <= start:
                return b""
            data = await self._call("GET range", key, obstore.get_range_async, key, start=start, end=stop)
            accounting.record(self.label, "get", key, len(data))
            return data

        try:
            return await gather_or_cancel(*(one(a, b) for a, b in ranges))
        except FileNotFoundError:
            accounting.record(self.label, "get", key, 0)
            return None

    async def get_suffix(self, key: str, nbytes: int) -> tuple[Buffer, int | None] | None:
        import obstore

        try:
            result, data = await self._call(
                "GET suffix", key, obstore.get_async, key, options={"range": {"suffix": nbytes}}
            )
        except FileNotFoundError:
            accounting.record(self.label, "get", key, 0)
            return None
        accounting.record(self.label, "get", key, len(data))
        return data, int(result.meta["size"])

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
    """Any zarr-python Store, through its async API (Icechunk stores read from their session)."""

    def __init__(self, store: Any, label: str | None = None) -> None:
        self.store = store
        self.label = label or f"{type(store).__name__}@{id(store):x}"
        # an FsspecStore's options hold its credentials: masked in our messages
        self._secrets = secrets_in(getattr(getattr(store, "fs", None), "storage_options", None))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (ZarrStoreSource, pickle.dumps(self.store), self.label))

    async def _get(self, key: str, byte_range: Any = None) -> Buffer | None:
        from zarr.core.buffer import default_buffer_prototype

        _checked_key(self, key)  # a zarr LocalStore reads "../x" outside its root
        try:
            async with request_slot():
                buf = await self.store.get(key, prototype=default_buffer_prototype(), byte_range=byte_range)
        except FileNotFoundError:
            buf = None
        except Exception as err:
            # not chained: the original's text, in every traceback, may hold what we masked here
            raise StoreAccessError(
                f"GET {key!r} on {self.label} failed: {type(err).__name__}: {_first_line(err, self._secrets)}"
            ) from None
        data = None if buf is None else buf.as_numpy_array().view(np.uint8).reshape(-1)
        accounting.record(self.label, "get", key, 0 if data is None else len(data))
        return data

    async def get(self, key: str) -> Buffer | None:
        return await self._get(key)

    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[Buffer] | None:
        from zarr.abc.store import RangeByteRequest

        parts = await gather_or_cancel(*(self._get(key, RangeByteRequest(a, b)) for a, b in ranges if b > a))
        if any(p is None for p in parts):
            return None
        it = iter(parts)
        return [next(it) if b > a else b"" for a, b in ranges]

    async def get_suffix(self, key: str, nbytes: int) -> tuple[Buffer, int | None] | None:
        from zarr.abc.store import SuffixByteRequest

        data = await self._get(key, SuffixByteRequest(nbytes))
        return None if data is None else (data, None)

    async def list_dir(self, prefix: str) -> list[str]:
        path = _checked_key(self, prefix.strip("/"))
        accounting.record(self.label, "list", prefix)
        try:
            return sorted({name.rstrip("/") async for name in self.store.list_dir(path)})
        except FileNotFoundError:
            return []
        except Exception as err:
            raise StoreAccessError(
                f"LIST {prefix!r} on {self.label} failed: {type(err).__name__}: {_first_line(err, self._secrets)}"
            ) from None

    def zarr_store(self) -> Any:
        return self.store


# -- resolving what the user passed ------------------------------------------------------------------------

_CLIENT_OPTION_KEYS = {"allow_http", "allow_invalid_certificates", "timeout", "connect_timeout",
                       "pool_idle_timeout", "http1_only", "http2_only", "user_agent"}


def default_retry_config() -> dict[str, Any]:
    """obstore's retries for the S3 stores we build: up to 10 with backoff from 0.1 s to 2 s, and never past
    30 s, so an outage of a few seconds is survived and a dead endpoint fails in bounded time."""
    return {"max_retries": 10, "retry_timeout": timedelta(seconds=30),
            "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2), "base": 2}}


def s3_store_from_url(url: str, storage_options: Mapping[str, Any] | None) -> ObstoreSource:
    """An obstore S3Store for ``s3://bucket/prefix``; credentials from options or the AWS environment."""
    from obstore.store import S3Store

    parsed = urlparse(url)
    if not parsed.netloc:
        raise ValueError(f"expected an S3 URL of the form s3://bucket/path. Got {redact(url)!r} instead.")
    if "@" in parsed.netloc:  # else "key:secret@bucket" would become the bucket name, shown in every label
        raise ValueError(f"expected an S3 URL of the form s3://bucket/path, with credentials in storage_options. "
                         f"Got credentials in the URL: {redact(url)!r}")
    options = dict(storage_options or {})
    client_options = dict(options.pop("client_options", {}) or {})
    retry_config = options.pop("retry_config", None) or default_retry_config()
    for key in list(options):
        if key in _CLIENT_OPTION_KEYS:
            client_options[key] = options.pop(key)
    endpoint = options.get("endpoint") or options.get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL")
    if "endpoint_url" in options:
        options["endpoint"] = options.pop("endpoint_url")
    if endpoint and str(endpoint).startswith("http://"):
        client_options.setdefault("allow_http", True)
    options.setdefault("region", os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1")
    try:
        client_options.setdefault("connect_timeout", "5s")
        client_options.setdefault("timeout", "60s")
        store = S3Store(parsed.netloc, prefix=parsed.path.strip("/") or None,
                        client_options=cast(Any, client_options), retry_config=cast(Any, retry_config), **options)
    except Exception as err:
        raise ValueError(
            f"could not configure S3 store for {redact(url)!r}: {type(err).__name__}: "
            f"{_first_line(err, secrets_in(options) + secrets_in(client_options))}"
        ) from None
    return ObstoreSource(store)


def resolve_source(target: Any, storage_options: Mapping[str, Any] | None = None) -> ByteSource:
    """Turn what the user passed into a `ByteSource`.

    Accepts a local path or ``file://`` URL, an ``s3://`` URL, an obstore store, a zarr Store
    (Icechunk's included), an Icechunk Session, or a `ByteSource`.
    """
    if isinstance(target, ByteSource):
        return target
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if isinstance(target, str):
        if target.startswith("s3://"):
            return s3_store_from_url(target, storage_options)
        if target.startswith("file://"):
            target = urlparse(target).path
        elif "://" in target:
            raise ValueError(
                f"expected a local path, file:// or s3:// URL. Got a URL with scheme {target.split('://')[0]!r}: "
                f"{redact(target)!r}; pass an obstore or zarr Store for other protocols"
            )
        path = Path(target).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"no such Zarr store: {str(path)!r} does not exist")
        if not path.is_dir():
            raise ValueError(f"expected a Zarr store directory. Got a file: {str(path)!r}")
        return LocalSource(path.resolve())
    module = type(target).__module__ or ""
    if module.startswith("icechunk") and hasattr(target, "store") and hasattr(target, "snapshot_id"):
        return ZarrStoreSource(target.store)
    if module.startswith("obstore"):
        return ObstoreSource(target)
    try:
        from zarr.abc.store import Store
    except ImportError:  # pragma: no cover - zarr is a hard dependency
        Store = ()  # type: ignore[assignment,misc]
    if isinstance(target, Store):
        return ZarrStoreSource(target)
    raise TypeError(
        "expected a local path, file:// or s3:// URL, an obstore store, a zarr Store or an Icechunk Session. "
        f"Got {type(target).__module__}.{type(target).__qualname__} instead."
    )
