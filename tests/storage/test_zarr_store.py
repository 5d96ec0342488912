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


def _repo_with_a_virtual_chunk(tmp_path: Any) -> str:
    """An Icechunk repository (its path) whose array 'v' has its one chunk in a virtual chunk container."""
    icechunk = pytest.importorskip("icechunk")
    import numpy as np

    chunks = f"file://{tmp_path}/chunks/"
    (tmp_path / "chunks").mkdir()
    raw = np.arange(10, dtype="<i4").tobytes()
    (tmp_path / "chunks" / "c0").write_bytes(raw)
    config = icechunk.RepositoryConfig.default()
    config.set_virtual_chunk_container(icechunk.VirtualChunkContainer(chunks, icechunk.local_filesystem_store(
        str(tmp_path / "chunks"))))
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")), config=config,
                                      authorize_virtual_chunk_access={
                                          chunks: icechunk.credentials.LocalFileSystemAccess})
    session = repo.writable_session("main")
    group = zarr.group(store=session.store, zarr_format=3)
    group.create_array("v", shape=(10,), chunks=(10,), dtype="i4", dimension_names=["x"], compressors=None)
    session.store.set_virtual_ref("v/c/0", f"{chunks}c0", offset=0, length=len(raw))
    session.commit("a virtual chunk")
    return str(tmp_path / "repo")


def test_a_virtual_chunk_container_not_authorised_is_what_engine_zarr_raises_and_ours(tmp_path: Any) -> None:
    """engine="zarr" lets Icechunk's InvalidInputError (a ValueError) through; ours is a StoreAccessError and a
    ValueError, Icechunk's error its cause (its class has a layout of its own: no class can also be an OSError)."""
    import pickle

    import icechunk
    import xarray as xr

    path = _repo_with_a_virtual_chunk(tmp_path)
    store = icechunk.Repository.open(icechunk.local_filesystem_storage(path)).readonly_session("main").store
    with pytest.raises(icechunk.InvalidInputError, match="authorize the virtual chunk container"):
        xr.open_dataset(store, engine="zarr", consolidated=False)["v"].values
    ds = xr.open_dataset(store, engine="zarrmax")
    with pytest.raises(StoreAccessError, match=r"GET 'v/c/0' on IcechunkStore@\w+ failed: InvalidInputError: a "
                                               r"virtual chunk .* authorize the virtual chunk container") as info:
        ds["v"].values
    assert isinstance(info.value, ValueError) and isinstance(info.value, OSError)
    assert isinstance(info.value.__cause__, icechunk.InvalidInputError)
    again = pickle.loads(pickle.dumps(info.value))  # as a dask.distributed worker sends it back
    assert type(again) is type(info.value) and str(again) == str(info.value)
    with pytest.raises(ValueError, match="authorize the virtual chunk container"):  # as written for engine="zarr"
        ds["v"].values


class Refusing(MemoryStore):
    """A zarr Store whose reads fail with a PermissionError and whose listings with a KeyError."""

    async def get(self, key, prototype=None, byte_range=None):
        raise PermissionError(f"no access to {key}")

    async def list_dir(self, prefix):
        raise KeyError(prefix)
        yield  # an async generator, as the interface says


def test_a_stores_error_keeps_its_built_in_type_and_no_cause() -> None:
    source = ZarrStoreSource(Refusing())
    expected = r"GET 'k' on Refusing@\w+ failed: PermissionError: no access to k"
    with pytest.raises(StoreAccessError, match=expected) as got:
        run_sync(source.get("k"))
    assert isinstance(got.value, PermissionError) and got.value.__cause__ is None
    with pytest.raises(StoreAccessError, match="^LIST 'g' on Refusing@\\w+ failed: KeyError: 'g'$") as listed:
        run_sync(source.list_dir("g"))
    assert isinstance(listed.value, KeyError) and listed.value.__cause__ is None
