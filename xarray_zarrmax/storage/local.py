"""Local files, both directions: `LocalSource` reads a directory, `LocalSink` writes one.

Reads are positional reads into preallocated buffers, no event loop. Every read of an object is made from one
descriptor whose fstat gives the version, so bytes and version always belong together even when the file is
replaced meanwhile; `OpenedFile` holds one object open while it is read in pieces (a shard's chunks).

Writes: each object is written whole before it gets its name, so a reader or a crash never sees half an object.
On Linux it is written to a file with no name (``O_TMPFILE``) and linked in under its key; where the key exists,
or the file system has no such files, to a temporary name renamed over it (``os.replace`` is atomic). A
read-merge-write holds an exclusive ``flock`` of the object's directory from its read to its rename, puts and
deletes a shared one, so no update made between a merge's read and its rename is lost, by a thread or by another
process.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
import uuid
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from xarray_zarrmax.core import accounting
from xarray_zarrmax.core.buffers import release
from xarray_zarrmax.core.bytes import Buffer, Encoded, parts_of
from xarray_zarrmax.errors import CorruptDataError, ObjectChanged, StoreAccessError
from xarray_zarrmax.storage.abc import ByteSource, Fetched, Merge, Sink, check_size, checked_key
from xarray_zarrmax.tuning import LOCAL_ATTEMPTS, RACY_WINDOW_NS

# -- reads -----------------------------------------------------------------------------------------------


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


_NOTHING = np.empty(0, dtype=np.uint8)


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

    @property
    def cacheable(self) -> bool:
        """Whether this file's version may key a cache across reads (`Fetched.cacheable`)."""
        return self.fetched(_NOTHING).cacheable

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
        return f"{self._root}{os.sep}{checked_key(self, key)}" if os.sep == "/" else \
            os.path.join(self._root, *checked_key(self, key).split("/"))

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

    async def revalidate(self, key: str, version: Hashable) -> bool:
        try:
            st = os.stat(self._path(key))
        except (FileNotFoundError, NotADirectoryError):
            return False
        return _file_version(st) == version

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


# -- writes ----------------------------------------------------------------------------------------------


class LocalSink(Sink):
    """A directory on a local file system; see the module docstring."""

    source: LocalSource
    gives_back_buffers = True  # write(2) has copied the bytes when it returns

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.source = LocalSource(root)
        self.label = self.source.label
        # Files with no name (Linux): written whole, then linked in. 1.7x faster than a temporary name renamed
        # over the key for new 0.8 MB objects on ext4: no rename queues on the directory's lock
        # (docs/dev/performance-analysis.md).
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

