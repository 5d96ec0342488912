"""Any zarr Store, both directions where it can: the source contract (`xarray_zarrmax.testing.storage`) for zarr's
MemoryStore, a plain dict, an fsspec memory:// URL and Icechunk (a writable session, a read-only snapshot), and the
sink contract for a writable Icechunk session."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import fsspec
import pytest
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import MemoryStore

from xarray_zarrmax.core.loop import run_sync
from xarray_zarrmax.errors import StoreAccessError
from xarray_zarrmax.storage import ByteSource, IcechunkSink, ZarrStoreSource, resolve_sink, resolve_source
from xarray_zarrmax.testing.storage import SinkTests, SourceTests


class Unversioned:
    """A zarr Store may change under us without a way to tell: no version, nothing cached across reads."""

    versioned = False
    cacheable = False


class TestMemoryStoreSource(Unversioned, SourceTests):
    @pytest.fixture
    def source(self) -> ZarrStoreSource:
        return ZarrStoreSource(MemoryStore())

    def write(self, source: Any, key: str, data: bytes) -> None:
        source.store._store_dict[key] = default_buffer_prototype().buffer.from_bytes(data)

    def remove(self, source: Any, key: str) -> None:
        del source.store._store_dict[key]


class TestDictSource(Unversioned, SourceTests):
    """A dict of bytes, read as zarr-python reads a dict: a MemoryStore over it, so later changes show."""

    @pytest.fixture
    def source(self) -> ByteSource:
        self.mapping: dict[str, bytes] = {}
        return resolve_source(self.mapping)

    def write(self, source: Any, key: str, data: bytes) -> None:
        self.mapping[key] = data

    def remove(self, source: Any, key: str) -> None:
        del self.mapping[key]


class TestFsspecSource(Unversioned, SourceTests):
    """An fsspec URL, through zarr's FsspecStore (read-only)."""

    @pytest.fixture
    def source(self) -> Iterator[ByteSource]:
        self.url = f"memory://contract/{uuid.uuid4().hex}"
        self.fs = fsspec.filesystem("memory")
        self.fs.mkdir(self.url)
        yield resolve_source(self.url)
        self.fs.rm(self.url, recursive=True)

    def write(self, source: Any, key: str, data: bytes) -> None:
        self.fs.pipe(f"{self.url}/{key}", data)

    def remove(self, source: Any, key: str) -> None:
        self.fs.rm(f"{self.url}/{key}")


# -- Icechunk --------------------------------------------------------------------------------------------------


def _repository(root: Any) -> Any:
    """A repository holding a group with 1-D arrays ``v`` and ``w`` of one-byte chunks: Icechunk takes the chunk
    keys of existing arrays only."""
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(root)))
    session = repo.writable_session("main")
    group = zarr.open_group(session.store, mode="w", zarr_format=3)
    for name in ("v", "w"):
        group.create_array(name, shape=(64,), chunks=(1,), dtype="u1")
    session.commit("arrays v and w")
    return repo


async def _set(store: Any, key: str, data: bytes) -> None:
    await store.set(key, default_buffer_prototype().buffer.from_bytes(data))


class IcechunkBehaviour:
    """Where Icechunk stores differ from the common case."""

    #: Icechunk refuses any byte range past a chunk's end (a range over it, a longer suffix), and empty chunks.
    over_the_end = StoreAccessError
    after_the_end = StoreAccessError
    empty_objects = False
    root_extras = frozenset({"zarr.json"})


@pytest.mark.icechunk
class TestIcechunkSessionSource(IcechunkBehaviour, Unversioned, SourceTests):
    """A writable session's store: what a sink reads through; its objects change, so nothing is cached."""

    picklable = False  # Icechunk pickles a writable session only as a fork (what `IcechunkSink` pickles to)

    @pytest.fixture
    def source(self, tmp_path: Any) -> ZarrStoreSource:
        self.session = _repository(tmp_path / "repo").writable_session("main")
        return ZarrStoreSource(self.session.store)

    def write(self, source: Any, key: str, data: bytes) -> None:
        run_sync(_set(self.session.store, key, data))

    def remove(self, source: Any, key: str) -> None:
        run_sync(self.session.store.delete(key))


@pytest.mark.icechunk
class TestIcechunkSnapshotSource(IcechunkBehaviour, SourceTests):
    """A read-only session reads one snapshot: its id is every object's version, and its objects never change."""

    @pytest.fixture
    def source(self, tmp_path: Any) -> ByteSource:
        self.repo = _repository(tmp_path / "repo")
        return resolve_source(self.repo.readonly_session(branch="main"))

    def current(self, source: ByteSource) -> ByteSource:
        return resolve_source(self.repo.readonly_session(branch="main"))

    def write(self, source: Any, key: str, data: bytes) -> None:
        session = self.repo.writable_session("main")
        run_sync(_set(session.store, key, data))
        session.commit(f"write {key}")

    def remove(self, source: Any, key: str) -> None:
        session = self.repo.writable_session("main")
        run_sync(session.store.delete(key))
        session.commit(f"delete {key}")


@pytest.mark.icechunk
class TestIcechunkSink(SinkTests):
    @pytest.fixture
    def sink(self, tmp_path: Any) -> IcechunkSink:
        sink = resolve_sink(_repository(tmp_path / "repo").writable_session("main"))
        assert isinstance(sink, IcechunkSink)
        return sink
