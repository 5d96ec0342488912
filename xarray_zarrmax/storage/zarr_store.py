"""Any zarr-python Store, both directions where it can: `ZarrStoreSource` reads any zarr Store (zarr's MemoryStore,
FsspecStore, a dict wrapped as one, Icechunk's store); `IcechunkSink` writes a writable Icechunk session.

Reads go through the store's async API. Only a read-only Icechunk session reads one immutable snapshot: there the
snapshot id is the version of every object, so shard indexes are cached. Any other zarr Store may change under us
without a way to tell, so nothing read from it is reused across reads.

Writes (Icechunk only; other zarr Stores are written by zarr-python): objects go through the session's zarr store,
one ``set`` per shard; Icechunk writes the bytes and records the change, which becomes visible to others only at
``commit``. Tasks in this process write into the session itself; a task pickled to another process gets a fork of
it (``Session.fork()``) and returns that fork, which is merged back once all are done (`merge_forks`). A
read-merge-write reads the session's own view (its uncommitted changes included) under an in-process lock per
object: Icechunk has no conditional ``set``, and two writers in one session are two threads of one process. Forks
are a different matter: two forks that both write one shard are merged last-writer-wins, silently (see
docs/dev/writing.md).
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from xarray_zarrmax.core import accounting
from xarray_zarrmax.core.budget import request_slot
from xarray_zarrmax.core.bytes import Buffer, Encoded, joined
from xarray_zarrmax.core.loop import gather_or_cancel, run_sync
from xarray_zarrmax.core.redact import scrubbed, secrets_in
from xarray_zarrmax.errors import ObjectChanged, StoreAccessError, store_error_like
from xarray_zarrmax.storage.abc import ByteSource, Fetched, Merge, Sink, check_size, checked_key, first_line
from xarray_zarrmax.storage.registry import restore

# -- reads -----------------------------------------------------------------------------------------------------


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
        return (restore, (ZarrStoreSource, payload, self.label))

    async def _get(self, key: str, byte_range: Any = None) -> Buffer | None:
        from zarr.core.buffer import default_buffer_prototype

        checked_key(self, key)  # a zarr LocalStore reads "../x" outside its root
        failure: BaseException | None = None
        cause: BaseException | None = None
        try:
            async with request_slot():
                buf = await self.store.get(key, prototype=default_buffer_prototype(), byte_range=byte_range)
        except FileNotFoundError:
            buf = None
        except Exception as err:
            failure, cause = self.failure("GET", key, err)
        if failure is not None:
            raise failure from cause  # outside the except clause: __context__ never keeps the store's own text
        data = None if buf is None else buf.as_numpy_array().view(np.uint8).reshape(-1)
        accounting.record(self.label, "get", key, 0 if data is None else len(data))
        return data

    def _fetched(self, data: Buffer | None, size: int | None) -> Fetched | None:
        if data is None:
            return None
        return Fetched(data, size, self.snapshot, self.snapshot is not None)

    async def get(self, key: str) -> Buffer | None:
        return await self._get(key)

    async def revalidate(self, key: str, version: Hashable) -> bool:
        return self.snapshot is not None and version == self.snapshot  # an immutable snapshot: no request

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
        path = checked_key(self, prefix.strip("/"))
        accounting.record(self.label, "list", prefix)
        try:
            return list(dict.fromkeys([name.rstrip("/") async for name in self.store.list_dir(path)]))
        except FileNotFoundError:
            return []
        except Exception as err:
            failure, cause = self.failure("LIST", prefix, err)
        raise failure from cause  # outside the except clause: __context__ never keeps the store's own text

    def failure(self, what: str, key: str, err: BaseException) -> tuple[StoreAccessError, BaseException | None]:
        """What to raise for the store's ``err`` and its cause. The error is also of ``err``'s built-in type
        (`store_error_like`): Icechunk's refusal of a virtual chunk container not authorised is a ValueError, as
        there. Its cause is Icechunk's error itself (credentials masked), for its ``kind``; no other store's
        error is kept: fsspec's and others' quote the URLs they went to, credentials and all."""
        failure = store_error_like(err, f"{what} {key!r} on {self.label} failed: {type(err).__name__}: "
                                        f"{first_line(err, self._secrets)}")
        return failure, (scrubbed(err, self._secrets) if type(err).__module__.startswith("icechunk") else None)

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



# -- writes: Icechunk -------------------------------------------------------------------------------------------

#: Read-merge-writes of one object within one process (one Icechunk session shared by threads) take the
#: same lock: striped by (session, key), so memory stays bounded however many objects are written.
_OBJECT_LOCKS = tuple(threading.Lock() for _ in range(64))


class IcechunkSink(Sink):
    """A writable Icechunk ``Session`` or ``ForkSession``; see the module docstring."""

    may_hold_v2 = False  # Icechunk stores Zarr format 3 only (and errors on a v2 key)

    source: ZarrStoreSource

    def __init__(self, session: Any) -> None:
        if session.read_only:
            raise ValueError("to_zarr needs a writable Icechunk session (Repository.writable_session(branch), or "
                             f"a fork of one). Got a read-only session at snapshot {session.snapshot_id}.")
        self.session = session
        self._worker_copy = False
        branch = getattr(session, "branch", None)
        where = f"branch {branch!r}" if branch else "a fork"
        self.label = f"Icechunk session ({where}, base snapshot {session.snapshot_id})"
        self.source = ZarrStoreSource(session.store, self.label)

    collects = True

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (to a worker process): a fresh fork, made now, so after the metadata batch. In this process
        # the tasks write straight into the session, where the per-object lock covers every writer.
        return (_worker_sink, (self.session.fork(),))

    def _failure(self, what: str, key: str, err: BaseException) -> StoreAccessError:
        failure, cause = self.source.failure(what, key, err)
        failure.__cause__ = cause
        return failure

    async def put_async(self, key: str, data: Encoded) -> None:
        from zarr.core.buffer import default_buffer_prototype

        checked_key(self.source, key)
        accounting.record(self.label, "put", key, len(data))
        failure = None
        try:
            await self.session.store.set(key, default_buffer_prototype().buffer.from_bytes(joined(data)))
        except Exception as err:
            failure = self._failure("SET", key, err)
        if failure is not None:
            raise failure  # outside the except clause: not even __context__ keeps the store's own text

    async def _delete_async(self, key: str, prefix: bool = False) -> None:
        checked_key(self.source, key)
        failure = None
        try:
            if prefix:
                await self.session.store.delete_dir(key.strip("/"))
            else:
                await self.session.store.delete(key)
        except FileNotFoundError:
            pass
        except Exception as err:
            failure = self._failure("DELETE", key, err)
        if failure is not None:
            raise failure
        accounting.record(self.label, "delete", key)

    def put(self, key: str, data: Encoded) -> None:
        run_sync(self.put_async(key, data))

    def delete(self, key: str) -> None:
        run_sync(self._delete_async(key))

    def delete_prefix(self, prefix: str) -> None:
        run_sync(self._delete_async(prefix, prefix=True))

    def put_many(self, objects: Mapping[str, Encoded]) -> None:
        run_sync(gather_or_cancel(*(self.put_async(k, v) for k, v in objects.items())))

    def update(self, key: str, merge: Merge, *, likely_new: bool = False) -> None:
        # likely_new changes nothing here: reads come from the session, no round trip to save
        with _OBJECT_LOCKS[hash((id(self.session), key)) % len(_OBJECT_LOCKS)]:
            got = run_sync(self.source.get(key))
            new = merge(got)
            if new is None:
                if got is not None:
                    raise AssertionError(f"a merge of {key!r} asked to delete a stored object")
                return
            self.put(key, new)

    def task_result(self) -> Any:
        return self.session if self._worker_copy else None

    def collect(self, results: list[Any]) -> None:
        fork = merge_forks(results)
        if fork is not None:
            self.session.merge(fork)


def _worker_sink(fork: Any) -> IcechunkSink:
    sink = IcechunkSink(fork)
    sink._worker_copy = True  # its writes go back to the caller in the task's result
    return sink


def merge_forks(forks: list[Any]) -> Any:
    """One fork holding the writes of all ``forks`` (distinct objects; the same one given twice counts once)."""
    unique = list({id(f): f for f in forks if f is not None}.values())
    if not unique:
        return None
    first, rest = unique[0], unique[1:]
    if rest:
        first.merge(*rest)
    return first

