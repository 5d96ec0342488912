"""Write targets: put, delete and read-merge-write of whole objects, safe under concurrent writers.

Three kinds, all picklable (a dask task on any worker rebuilds its sink):

- `LocalSink`, a directory: each object is written whole before it gets its name, so a reader or a crash never
  sees half an object. On Linux it is written to a file with no name (``O_TMPFILE``) and linked in under its
  key; where the key exists, or the file system has no such files, to a temporary name renamed over it
  (``os.replace`` is atomic). A read-merge-write holds an exclusive ``flock`` of the object's directory from
  its read to its rename, puts and deletes a shared one, so no update made between a merge's read and its
  rename is lost, by a thread or by another process.
- `ObstoreSink`, an obstore store (S3, MinIO...): a PUT is atomic (so is a multipart upload, used for objects
  above ``config.multipart_threshold``: the object appears when it completes). A read-merge-write PUTs with
  ``If-Match`` on the ETag it read (``If-None-Match: *`` when there was no object), always in one request;
  when another writer got there first (412), it reads again, merges again and retries. Failed requests are
  retried by obstore (the store's retry config); retrying is idempotent, since a merge only ever writes the
  same values over the same elements.
- `IcechunkSink`, a writable Icechunk session (or a fork of one): objects go through the session's zarr store,
  one ``set`` per shard; Icechunk writes the bytes and records the change, which becomes visible to others
  only at ``commit``. Tasks in this process write into the session itself; a task pickled to another process
  gets a fork of it (``Session.fork()``) and returns that fork, which is merged back once all are done.
  A read-merge-write reads the session's own view (its uncommitted changes included) under an in-process
  lock per object: Icechunk has no conditional ``set``, and two writers in one session are two threads of
  one process. Forks are a different matter: two forks that
  both write one shard are merged last-writer-wins, silently (see docs/writing.md).

Sinks never import xarray.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, NamedTuple

from xarray_zarrmax.config import get_config
from xarray_zarrmax.core import accounting
from xarray_zarrmax.core.buffers import release
from xarray_zarrmax.core.bytes import Buffer, Encoded, Pieces, joined, parts_of
from xarray_zarrmax.core.loop import gather_or_cancel, run_sync
from xarray_zarrmax.errors import ObjectChanged, RequestFailed, StoreAccessError
from xarray_zarrmax.storage.sources import (
    ByteSource,
    LocalSource,
    ObstoreSource,
    ZarrStoreSource,
    _checked_key,
    _first_line,
    _is_transient,
)
from xarray_zarrmax.tuning import MAX_BACKOFF_S, MERGE_ATTEMPTS, PART_CONCURRENCY

#: A merge: the stored bytes (None: no object) -> the bytes to store (None: store nothing; only allowed
#: when there was no object, since a missing object cannot be deleted conditionally).
Merge = Callable[[Buffer | None], Encoded | None]


#: S3's smallest part of a multipart upload (but the last), and how many parts of one upload are in flight.
MIN_PART_SIZE = 5 * 2**20


class Update(NamedTuple):
    """One read-merge-write for `Sink.update_many`: the arguments of `Sink.update`."""

    key: str
    merge: Merge
    likely_new: bool = False


def _backoff(attempt: int) -> float:
    # jittered, so writers that collided once do not collide again in lockstep
    return min(0.005 * 2**attempt, MAX_BACKOFF_S) * (0.5 + random.random())


class Sink:
    """Interface. ``label`` names the store without secrets; sync methods are called from dask tasks, async
    ones from the I/O loop (metadata batches)."""

    label: str
    source: ByteSource  # reads the same objects

    def put(self, key: str, data: Encoded) -> None:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def update(self, key: str, merge: Merge, *, likely_new: bool = False) -> None:
        """Replace the object at ``key`` by ``merge(stored bytes)``, without losing a concurrent update.
        ``likely_new``: the caller expects no object there, so a sink whose reads are round trips may try to
        create it first (``merge(None)``, stored only if the key is still free) and read only if that fails."""
        raise NotImplementedError

    def put_many(self, objects: Mapping[str, Encoded]) -> None:
        """Write every object at once (one concurrent batch where the store allows)."""
        raise NotImplementedError

    def delete_many(self, keys: Sequence[str]) -> None:
        """Delete every key (one concurrent batch where the store allows); a missing one is no error."""
        for key in keys:
            self.delete(key)

    def update_many(self, updates: Sequence[Update], in_flight: int) -> None:
        """`update` each, up to ``in_flight`` at once where the store's round trips make that worth it (here:
        one after another). Every update runs, also after one fails; then the first failure is raised, its
        key in a note."""
        failures = []
        for update in updates:
            try:
                self.update(update.key, update.merge, likely_new=update.likely_new)
            except Exception as err:
                failures.append(_noted(err, update.key))
        if failures:
            raise failures[0]

    def delete_prefix(self, prefix: str) -> None:
        """Delete every object under ``prefix`` ("": the whole store)."""
        raise NotImplementedError

    #: Whether the target can hold Zarr format 2 groups (`to_zarr` refuses to write into one).
    may_hold_v2 = True

    #: Whether `put` gives an object's pooled buffers back once written (`_buffers`): only then are chunks
    #: encoded into them.
    gives_back_buffers = False

    #: Whether data tasks return something the caller must `collect` (see `task_result`).
    collects = False

    def collect(self, results: list[Any]) -> None:
        """Take back what the data tasks return (`task_result` of each task's sink); nothing by default."""

    def task_result(self) -> Any:
        """What a data task returns besides its count, for `collect` (an Icechunk fork with its writes, where
        the task ran on a copy of the sink pickled to another process)."""
        return None

    def existing_store(self) -> Any:
        """A read-only zarr Store over what the target holds now, or None where it holds nothing yet."""
        return self.source.zarr_store()

    def read_failure(self, err: BaseException, what: str, key: str) -> BaseException:
        """What a failed read ``what key`` of `existing_store` raises: ``err``, credentials masked."""
        return self.source.scrubbed(err)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label!r})"


class LocalSink(Sink):
    """A directory on a local file system; see the module docstring."""

    source: LocalSource
    gives_back_buffers = True  # write(2) has copied the bytes when it returns

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.source = LocalSource(root)
        self.label = self.source.label
        # Files with no name (Linux): written whole, then linked in. 1.7x faster than a temporary name renamed
        # over the key for new 0.8 MB objects on ext4: no rename queues on the directory's lock
        # (docs/performance-analysis.md).
        self._unnamed = hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")

    def __reduce__(self) -> tuple[Any, ...]:
        return (LocalSink, (str(self.source.root),))

    def _path(self, key: str) -> str:
        return self.source._path(key)

    def existing_store(self) -> Any:
        # a directory not made yet holds nothing (zarr's read-only LocalStore refuses a missing root)
        return self.source.zarr_store() if os.path.isdir(self.source.root) else None

    @contextmanager
    def _locked(self, path: str, *, exclusive: bool) -> Iterator[int]:
        """A lock on the directory that holds ``path``, yielding that directory's descriptor (a lock file inside
        the store would show in listings and copies). A merge (`update`) holds it exclusively from its read to
        its rename; whole-object puts and deletes hold it shared, so they run side by side and none lands between
        a merge's read and its rename (where the merge would write the older data back over it). An exclusive
        lock for puts too would put every write of a directory in one line (all chunk files of a 1-D array).
        ``flock`` locks belong to the open file, so threads of one process exclude each other as processes do."""
        directory = os.path.dirname(path)
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            # The first object of its directory: makedirs only then (it stats every level). A file where a
            # directory should be makes it raise FileExistsError naming that path, as zarr-python does.
            os.makedirs(directory, exist_ok=True)
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield fd
        finally:
            os.close(fd)  # releases the lock

    def _replace(self, directory: int, name: str, data: Encoded, *, exists: bool = False) -> None:
        """Write ``data`` as ``name`` in the open ``directory``: readers see the old object or the new one,
        never part. ``exists``: the object is known to be there (a merge read it), so skip linking the new
        file in under its own name, which would fail."""
        fd = self._unnamed_file(directory) if self._unnamed else None
        if fd is None:
            self._replace_named(directory, name, data)
            return
        try:
            _write_parts(fd, data)
            # linkat(AT_SYMLINK_FOLLOW) of the descriptor's /proc link: the one way to name an O_TMPFILE file
            # without privileges (os.link takes that path only when given a dir_fd: plain link(2) would not
            # follow the /proc link). The name appears with every byte written; it fails where the name exists.
            try:
                if not exists:
                    try:
                        os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=directory)
                        return
                    except FileExistsError:
                        pass
                tmp = _temporary_name()
                os.link(f"/proc/self/fd/{fd}", tmp, dst_dir_fd=directory)
            except OSError as err:
                if err.errno not in _LINK_REFUSED:
                    raise
                if err.errno != errno.ENOENT:  # no hard links on this file system: named files from now on
                    self._unnamed = False
            else:
                _rename_or_remove(directory, tmp, name)
                return
        finally:
            os.close(fd)  # a file never linked in is freed with it: a failure leaves nothing behind
        # The link was refused, or the directory is gone (ENOENT): the named way writes the bytes again, and
        # raises what is wrong if anything still is.
        self._replace_named(directory, name, data)

    def _unnamed_file(self, directory: int) -> int | None:
        """A writable file with no name in ``directory``, or None where its file system makes none (then this
        sink stops asking)."""
        try:
            return os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o666, dir_fd=directory)
        except OSError as err:
            # EISDIR: a kernel older than O_TMPFILE; EOPNOTSUPP: a file system without it (NFS, some FUSE)
            if err.errno not in (errno.EOPNOTSUPP, errno.EISDIR):
                raise
            self._unnamed = False
            return None

    def _replace_named(self, directory: int, name: str, data: Encoded) -> None:
        """Write beside ``name`` under a temporary name and rename it over ``name``."""
        tmp = _temporary_name()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666, dir_fd=directory)
        try:
            _write_parts(fd, data)
        except BaseException:
            _remove_quietly(directory, tmp)
            raise
        finally:
            os.close(fd)
        _rename_or_remove(directory, tmp, name)

    @contextmanager
    def _naming(self, what: str, key: str) -> Iterator[None]:
        """OSError from the file system names the directory ('.'), the file's /proc link or a temporary name at
        most: name the object's path instead, and say which object and store."""
        try:
            yield
        except OSError as err:
            if _is_internal_name(err.filename):
                err.filename, err.filename2 = self._path(key), None
            err.add_note(f"while {what} {key!r} in {self.label}")
            raise

    def put(self, key: str, data: Encoded) -> None:
        path = self._path(key)
        try:
            with self._naming("writing", key), self._locked(path, exclusive=False) as directory:
                self._replace(directory, os.path.basename(path), data)
        finally:
            release(parts_of(data))  # write(2) has copied the bytes, or failed: nothing reads them again
        accounting.record(self.label, "put", key, len(data))

    def delete(self, key: str) -> None:
        path = self._path(key)
        with self._naming("deleting", key), self._locked(path, exclusive=False):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        accounting.record(self.label, "delete", key)

    def update(self, key: str, merge: Merge, *, likely_new: bool = False) -> None:
        # likely_new changes nothing here: reading a missing file costs a failed open, not a round trip
        path = self._path(key)
        with self._naming("updating", key), self._locked(path, exclusive=True) as directory:
            got = self.source.read_settled(key)
            new = merge(None if got is None else got.data)
            if new is None:
                if got is not None:
                    raise AssertionError(f"a merge of {key!r} asked to delete a stored object")
                return
            try:
                self._replace(directory, os.path.basename(path), new, exists=got is not None)
            finally:
                release(parts_of(new))
        accounting.record(self.label, "put", key, len(new))

    def put_many(self, objects: Mapping[str, Encoded]) -> None:
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


def _conflicted(err: RequestFailed) -> bool:
    """A conditional PUT answered 409: AWS S3's ConditionalRequestConflict, another conditional write of the key
    in flight. obstore retries it for If-Match, not for If-None-Match; the outcome is read and merged again."""
    return err.status == 409


def _noted(err: BaseException, key: str) -> BaseException:
    err.add_note(f"while merging into {key!r}")
    return err


def _write_parts(fd: int, data: Encoded) -> None:
    """Every byte of ``data`` to ``fd``: small parts (a shard's chunks) gathered in a buffer, a part larger than
    the buffer straight to write(2)."""
    with open(fd, "wb", closefd=False) as f:
        for part in parts_of(data):
            f.write(part)


def _temporary_name() -> str:
    # Not derived from the key: a key of up to 255 bytes must be replaceable too.
    return f".{uuid.uuid4().hex}.zarrmax-tmp"


#: linkat errors that mean "not here" rather than a failed write: a file system without hard links (EPERM,
#: EOPNOTSUPP), a /proc that cannot reach the file (EXDEV), a directory removed meanwhile (ENOENT)
_LINK_REFUSED = (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.ENOENT)


def _is_internal_name(filename: object) -> bool:
    """Whether an OSError's file name is one of ours rather than the object's path."""
    return isinstance(filename, str) and (filename == "." or filename.startswith("/proc/self/fd/")
                                          or filename.endswith(".zarrmax-tmp"))


def _rename_or_remove(directory: int, tmp: str, name: str) -> None:
    try:
        os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        _remove_quietly(directory, tmp)
        raise


def _remove_quietly(directory: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=directory)
    except FileNotFoundError:
        pass


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

        obstore retries what it deems safe to; an unconditional PUT that still fails on a transient error
        (the connection broke after the request was sent) is sent again here, up to ``config.retries`` times:
        the same bytes twice are the same object. A conditional one is not: `update` reads and merges again.
        An object in `Pieces` goes as the list of its parts, which obstore sends without joining them.
        """
        import obstore

        _checked_key(self.source, key)
        config = get_config()
        kwargs: dict[str, Any] = {"use_multipart": False}
        if mode is not None:
            kwargs["mode"] = mode
        elif len(data) > config.multipart_threshold:
            kwargs = {"use_multipart": True, "chunk_size": max(config.split_size, MIN_PART_SIZE),
                      "max_concurrency": PART_CONCURRENCY}
        retries = config.retries if mode is None else 0
        for attempt in range(retries + 1):
            accounting.record(self.label, "put", key, len(data))
            try:
                body = list(data.parts) if isinstance(data, Pieces) else data
                await self.source._call("PUT", key, obstore.put_async, key, body, **kwargs)
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
                if not (_is_transient(err) or _conflicted(err)):
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
        failures = [_noted(err, u.key) for u, f in zip(updates, futures, strict=True)
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
            if not (_is_transient(err) or _conflicted(err)):
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
        await gather_or_cancel(*(self.source._call("DELETE", prefix, obstore.delete_async, keys)
                                 for keys in batches if keys))
        for keys in batches:
            for key in keys:
                accounting.record(self.label, "delete", key)


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
        return StoreAccessError(f"{what} {key!r} on {self.label} failed: {type(err).__name__}: "
                                f"{_first_line(err, self.source._secrets)}")

    async def put_async(self, key: str, data: Encoded) -> None:
        from zarr.core.buffer import default_buffer_prototype

        _checked_key(self.source, key)
        accounting.record(self.label, "put", key, len(data))
        failure = None
        try:
            await self.session.store.set(key, default_buffer_prototype().buffer.from_bytes(joined(data)))
        except Exception as err:
            failure = self._failure("SET", key, err)
        if failure is not None:
            raise failure  # outside the except clause: not even __context__ keeps the store's own text

    async def _delete_async(self, key: str, prefix: bool = False) -> None:
        _checked_key(self.source, key)
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


def resolve_sink(target: Any, storage_options: dict[str, Any] | None = None) -> Sink:
    """Where `to_zarr` writes: a local path or ``file://`` URL (created by the first write), an ``s3://`` URL
    (options as for reading, see `xarray_zarrmax.storage.sources.obstore_s3_options`), an obstore store, zarr's
    ``ObjectStore`` or ``LocalStore`` (not opened read-only), a writable Icechunk ``Session`` or ``ForkSession``
    (or its ``IcechunkStore``). Anything else raises TypeError: it would be written by zarr-python, without our
    guarantees, so say so rather than do it silently."""
    from xarray_zarrmax.storage.sources import _no_storage_options, _scheme, s3_store_from_url

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
