"""obstore stores (S3, MinIO, and any other obstore store), both directions: `ObstoreSource` reads, `ObstoreSink`
writes, and `s3_store_from_url` builds an S3 store from a URL and ``storage_options`` (obstore's names or s3fs's).

Reads are async requests on the one I/O loop, under the process's request budget. A data object comes with its
ETag; later ranges of it are asked for with ``If-Match``, so the parts of one object never mix two versions, and a
large object is fetched as parallel ranges.

Writes: a PUT is atomic (so is a multipart upload, used for objects above ``config.multipart_threshold``: the object
appears when it completes). A read-merge-write PUTs with ``If-Match`` on the ETag it read (``If-None-Match: *``
when there was no object), always in one request; when another writer got there first (412), it reads again,
merges again and retries. Retrying is idempotent, since a merge only ever writes the same values over the same
elements.

Failed requests are retried as `storage.retry` says: by us for the S3 stores built here from a URL (each retry and
each overload answer counted, overload lowering the process's requests in flight), by obstore where the store's
own retry config is in force.

Errors become built-in or our types (obstore's own are no OSError), credentials masked: a store's label never
holds them, and `ObstoreSource` knows which values of its config to mask.
"""

from __future__ import annotations

import os
import pickle
import random
import time
from collections.abc import Hashable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, cast
from urllib.parse import urlparse

from xarray_zarrmax.config import get_config
from xarray_zarrmax.core import accounting
from xarray_zarrmax.core.bytes import Buffer, Encoded, Pieces, Segments
from xarray_zarrmax.core.loop import gather_or_cancel, run_sync
from xarray_zarrmax.core.redact import redact, secrets_in
from xarray_zarrmax.errors import CorruptDataError, ObjectChanged, RequestFailed, StoreAccessError
from xarray_zarrmax.storage.abc import (
    ByteSource,
    Fetched,
    Merge,
    Sink,
    Update,
    check_size,
    checked_key,
    first_line,
    join_key,
    noted,
)
from xarray_zarrmax.storage.registry import check_not_forked, restore
from xarray_zarrmax.storage.retry import Progress, Resend, is_transient, send, status_of
from xarray_zarrmax.tuning import MAX_BACKOFF_S, MERGE_ATTEMPTS, PART_CONCURRENCY

# -- reads -----------------------------------------------------------------------------------------------------


class _NotModified(Exception):
    """A conditional request's 304: the object is still the version its ETag named (`revalidate`)."""


class ObstoreSource(ByteSource):
    """An obstore store (S3Store, LocalStore, HTTPStore, ...); requests are async and share the loop.

    ``direct``: the same store with obstore's retries off, which our own requests go through so that we retry
    them ourselves (`storage.retry`); ``store`` keeps its retries for what reads it through zarr-python.
    """

    def __init__(self, store: Any, label: str | None = None, direct: Any = None) -> None:
        self.store = store
        self.direct = direct
        self.label = label or _obstore_label(store)
        self._secrets = _obstore_secrets(store)  # rebuilt on unpickle, never pickled
        self._zarr_store: Any = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (restore, (ObstoreSource, pickle.dumps({"store": self.store, "direct": self.direct}), self.label))

    @property
    def cache_scope(self) -> str | None:
        # Only labels that name one store: an S3 bucket and prefix at an endpoint, a local folder. Every other
        # store's label is its type and prefix: two MemoryStores, numbering their ETags "0", "1", ... alike,
        # served each other's chunks (found by an adversarial review); GCS and Azure labels lack the bucket.
        return self.label if type(self.store).__name__ in _SCOPED_STORES else None

    @property
    def _versions_hold(self) -> bool:
        """Whether this store's ETags change whenever an object does, so they may key the shard index cache.
        Not an HTTP server's: nginx's and Apache's are the file's mtime in seconds and size, the same for a
        rewrite of the same size within a second (an adversarial review read old values for good)."""
        return type(self.store).__name__ != "HTTPStore"

    def failure(self, err: BaseException, what: str, key: str) -> BaseException:
        """What a failed request ``what key`` raises: built-in or our types (obstore's own are no OSError), the
        store's text credentials-masked and cut to its first line (it may quote the endpoint with its
        password)."""
        import obstore.exceptions as oe

        if isinstance(err, oe.NotFoundError):
            return FileNotFoundError(key)
        if isinstance(err, oe.NotModifiedError):
            return _NotModified(key)  # If-None-Match held: the object is the version asked about
        if isinstance(err, oe.PreconditionError):
            return ObjectChanged(key)  # If-Match failed: the object was rewritten
        if isinstance(err, oe.AlreadyExistsError):
            return ObjectChanged(key)  # a PUT with If-None-Match: someone created the object meanwhile
        if isinstance(err, (oe.PermissionDeniedError, oe.UnauthenticatedError)):
            return StoreAccessError(f"{what} {key!r} on {self.label} was refused: check the credentials "
                                    f"({type(err).__name__}: {first_line(err, self._secrets)})")
        if "NoSuchBucket" in str(err):
            return FileNotFoundError(f"{self.label}: the bucket does not exist")
        return RequestFailed(f"{what} {key!r} on {self.label} failed: {type(err).__name__}: "
                             f"{first_line(err, self._secrets)}", status_of(err))

    async def _call(self, what: str, key: str, fn: Any, *args: Any, resend: Resend = "read",
                    obstore_retries: bool = False, **kwargs: Any) -> Any:
        """Send one request under the process's budget, again as `storage.retry.send` allows (``resend``: what
        kind of request it is); errors become built-in or our exceptions. A response's body is read here, so
        that one breaking off is sent again too. ``obstore_retries``: through the store with obstore's retries
        even where we retry the rest ourselves (a multipart upload: obstore resends a failed part, not the
        whole upload)."""
        check_not_forked(self.label)
        direct = None if obstore_retries else self.direct
        store = self.store if direct is None else direct

        async def attempt(progress: Progress) -> Any:
            result = await fn(store, *args, **kwargs)
            if hasattr(result, "bytes_async"):
                progress.body_started = True
                return result, await result.bytes_async()
            return result

        return await send(self.label, what, key, attempt, lambda err: self.failure(err, what, key), resend=resend,
                          store_retries=direct is None)

    async def get(self, key: str) -> Buffer | None:
        import obstore

        try:
            _, data = await self._call("GET", key, obstore.get_async, key)
        except FileNotFoundError:
            accounting.record(self.label, "get", key, 0)
            return None
        accounting.record(self.label, "get", key, len(data))
        return data

    async def revalidate(self, key: str, version: Hashable) -> bool:
        """One HEAD conditional on the ETag (``If-None-Match``): 304, no body, while the object is unchanged."""
        import obstore

        if not isinstance(version, str):
            return False
        try:
            await self._call("HEAD", key, obstore.get_async, key, options={"head": True, "if_none_match": version})
        except _NotModified:
            return True
        except FileNotFoundError:
            return False
        finally:
            accounting.record(self.label, "head", key, 0)
        return False  # 200: another version

    async def _get_versioned(self, what: str, key: str, options: dict[str, Any]) -> Fetched | None:
        import obstore

        try:
            result, data = await self._call(what, key, obstore.get_async, key, options=options)
        except FileNotFoundError:
            accounting.record(self.label, "get", key, 0)
            return None
        accounting.record(self.label, "get", key, len(data))
        etag = result.meta.get("e_tag")
        return Fetched(data, int(result.meta["size"]), etag, etag is not None and self._versions_hold)

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


# -- labels and credentials ------------------------------------------------------------------------------------

#: obstore stores whose label names one store (`ObstoreSource.cache_scope`).
_SCOPED_STORES = frozenset({"S3Store", "LocalStore"})


def _obstore_label(store: Any) -> str:
    # Never the config: it holds credentials.
    name = type(store).__name__
    prefix = str(getattr(store, "prefix", "") or "")
    if name == "S3Store":
        endpoint = (store.config or {}).get("endpoint", "aws")
        return f"{join_key('s3://' + str(store.config.get('bucket', '?')), prefix)} ({_redact_url(str(endpoint))})"
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


# -- S3 stores from URLs ---------------------------------------------------------------------------------------

_CLIENT_OPTION_KEYS = {"allow_http", "allow_invalid_certificates", "timeout", "connect_timeout",
                       "pool_idle_timeout", "http1_only", "http2_only", "user_agent"}

#: s3fs's names for storage_options (what engine="zarr" reads s3:// URLs with), and obstore's for the same.
_S3FS_OPTIONS = {"key": "access_key_id", "secret": "secret_access_key", "token": "session_token",
                 "endpoint_url": "endpoint", "anon": "skip_signature"}
_S3FS_CLIENT_KWARGS = {"endpoint_url": "endpoint", "region_name": "region"}


def default_retry_config() -> dict[str, Any]:
    """obstore's retries for the S3 stores we build, where zarr-python reads through them (our own requests
    go through a twin without retries, retried by `storage.retry`): up to 10 with backoff from 0.1 s to 2 s,
    and never past 30 s, so an outage of a few seconds is survived and a dead endpoint fails in bounded time."""
    return {"max_retries": 10, "retry_timeout": timedelta(seconds=30),
            "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2), "base": 2}}


#: The twin our own requests go through: obstore sends each once, `storage.retry` decides what is sent again.
NO_RETRIES: dict[str, Any] = {"max_retries": 0}


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
    given_retry_config = options.pop("retry_config", None)
    retry_config = given_retry_config or default_retry_config()
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
        prefix = parsed.path.strip("/") or None
        store = S3Store(parsed.netloc, prefix=prefix, client_options=cast(Any, client_options),
                        retry_config=cast(Any, retry_config), **options)
        # With a retry_config of the user's own, obstore's retries are what they asked for: no twin.
        direct = None if given_retry_config else S3Store(
            parsed.netloc, prefix=prefix, client_options=cast(Any, client_options),
            retry_config=cast(Any, NO_RETRIES), **options)
    except Exception as err:
        failure = ValueError(
            f"could not configure S3 store for {redact(url)!r}: {type(err).__name__}: "
            f"{first_line(err, secrets_in(options) + secrets_in(client_options))}"
        )
    else:
        return ObstoreSource(store, direct=direct)
    raise failure  # outside the except clause: not even __context__ keeps obstore's own text


# -- writes ----------------------------------------------------------------------------------------------------

#: S3's smallest part of a multipart upload (but the last).
MIN_PART_SIZE = 5 * 2**20


def _backoff(attempt: int) -> float:
    # jittered, so writers that collided once do not collide again in lockstep
    return min(0.005 * 2**attempt, MAX_BACKOFF_S) * (0.5 + random.random())


def _conflicted(err: RequestFailed) -> bool:
    """A conditional PUT answered 409: AWS S3's ConditionalRequestConflict, another conditional write of the key
    in flight. obstore retries it for If-Match, not for If-None-Match; the outcome is read and merged again."""
    return err.status == 409


class ObstoreSink(Sink):
    """An obstore store; see the module docstring."""

    source: ObstoreSource

    def __init__(self, source: ObstoreSource) -> None:
        self.source = source
        self.label = source.label

    def __reduce__(self) -> tuple[Any, ...]:
        return (ObstoreSink, (self.source,))

    def read_failure(self, err: BaseException, what: str, key: str) -> BaseException:
        """obstore's errors (from zarr's ObjectStore over the target) as this package's reads raise them: a
        refused request a StoreAccessError, also an OSError (obstore's own types are neither)."""
        import obstore.exceptions as oe

        return self.source.failure(err, what, key) if isinstance(err, oe.BaseError) else self.source.scrubbed(err)

    async def put_async(self, key: str, data: Encoded, mode: Any = None) -> None:
        """One PUT, or a multipart upload for an unconditional one larger than ``config.multipart_threshold``
        (parts of ``config.split_size``, at least `MIN_PART_SIZE`, `PART_CONCURRENCY` at once, all under the
        one request slot of this call). Both are atomic: a multipart object appears only when completed.
        A conditional PUT is always one request: S3 takes If-Match / If-None-Match only on a single PUT (and
        on the completion of a multipart upload, which obstore does not offer: its ``put`` with a ``mode``
        other than "overwrite" falls back to a single PUT), so a merged shard is at most 5 GiB.

        An unconditional PUT that fails on a transient error (also the connection breaking after the request
        was sent) is sent again (`storage.retry`): the same bytes twice are the same object. A conditional one
        only when the store refused it as overloaded; otherwise `update` reads and merges again. An object in
        `Pieces` goes as the list of its parts, which obstore sends without joining them.
        """
        import obstore

        checked_key(self.source, key)
        config = get_config()
        kwargs: dict[str, Any] = {"use_multipart": False}
        if mode is not None:
            kwargs["mode"] = mode
        elif len(data) > config.multipart_threshold:
            kwargs = {"use_multipart": True, "chunk_size": max(config.split_size, MIN_PART_SIZE),
                      "max_concurrency": PART_CONCURRENCY}
        accounting.record(self.label, "put", key, len(data))
        body = list(data.parts) if isinstance(data, Pieces) else data
        await self.source._call("PUT", key, obstore.put_async, key, body, resend="write" if mode is None else
                                "conditional", obstore_retries=kwargs["use_multipart"], **kwargs)

    async def delete_async(self, key: str) -> None:
        import obstore

        checked_key(self.source, key)
        try:
            await self.source._call("DELETE", key, obstore.delete_async, key, resend="write")
        except FileNotFoundError:
            pass
        accounting.record(self.label, "delete", key)

    def put(self, key: str, data: Encoded) -> None:
        run_sync(self.put_async(key, data))

    def delete(self, key: str) -> None:
        run_sync(self.delete_async(key))

    def update(self, key: str, merge: Merge, *, likely_new: bool = False) -> None:
        if likely_new and self._create(key, merge):
            return
        for attempt in range(MERGE_ATTEMPTS):
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
                if not (is_transient(err) or _conflicted(err)):
                    raise
                # the PUT may or may not have been applied: reading tells, and merging again is harmless
            time.sleep(_backoff(attempt))
        raise StoreAccessError(f"gave up writing {key!r} on {self.label}: {MERGE_ATTEMPTS} attempts in a row lost "
                               "to concurrent writers of the same object")

    def update_many(self, updates: Sequence[Update], in_flight: int) -> None:
        # Threads, not the I/O loop: each merge decodes and encodes (CPU work), and `update` blocks on its
        # round trips. Small objects' merges were one round trip after another: latency-bound.
        if len(updates) <= 1 or in_flight <= 1:
            super().update_many(updates, in_flight)
            return
        with ThreadPoolExecutor(min(in_flight, len(updates)), thread_name_prefix="xarray_zarrmax-merge") as pool:
            futures = [pool.submit(self.update, u.key, u.merge, likely_new=u.likely_new) for u in updates]
        failures = [noted(err, u.key) for u, f in zip(updates, futures, strict=True)
                    if (err := f.exception()) is not None]
        if failures:
            raise failures[0]

    def _create(self, key: str, merge: Merge) -> bool:
        """``merge(None)`` stored by a PUT with If-None-Match, one request where no object is there (an append's
        new edge shard); False where that did not settle it: the object exists after all (another writer made
        it), the PUT failed on the way (it may have landed: reading tells), or the merge stores nothing (an
        object there would have to be merged)."""
        new = merge(None)
        if new is None:
            return False
        try:
            run_sync(self.put_async(key, new, "create"))
        except ObjectChanged:
            return False
        except RequestFailed as err:
            if not (is_transient(err) or _conflicted(err)):
                raise
            return False
        return True

    def put_many(self, objects: Mapping[str, Encoded]) -> None:
        run_sync(gather_or_cancel(*(self.put_async(k, v) for k, v in objects.items())))

    def delete_many(self, keys: Sequence[str]) -> None:
        run_sync(gather_or_cancel(*(self.delete_async(k) for k in keys)))

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
        await gather_or_cancel(*(self.source._call("DELETE", prefix, obstore.delete_async, keys, resend="write")
                                 for keys in batches if keys))
        for keys in batches:
            for key in keys:
                accounting.record(self.label, "delete", key)

