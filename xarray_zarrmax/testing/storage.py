"""Contract tests every storage backend passes: `SourceTests` for a `ByteSource`, `SinkTests` for a `Sink`
(zarr-python's ``zarr.testing.store.StoreTests`` is the model).

A backend's test module subclasses them, fills in the fixture that makes a source (or sink) over an empty location
and the hooks that change objects behind its back, and says where the backend differs from the common case in a few
class attributes; every test here then runs for that backend::

    class TestLocalSource(SourceTests):
        @pytest.fixture
        def source(self, tmp_path):
            return LocalSource(tmp_path)

        def write(self, source, key, data): ...  # a file written as another writer would
        def remove(self, source, key): ...

The keys used are Zarr chunk keys of two 1-D arrays, ``v`` and ``w`` (``v/c/0``, ...), so that stores that take
Zarr keys only (Icechunk) run the same tests. This module imports pytest: `xarray_zarrmax.testing` does not import
it; import it as ``xarray_zarrmax.testing.storage``.
"""

from __future__ import annotations

import pickle
import threading
import traceback
from collections.abc import Hashable
from typing import Any

import pytest

from xarray_zarrmax.config import set_config
from xarray_zarrmax.core.accounting import request_counts
from xarray_zarrmax.core.bytes import Buffer, Pieces, Segments, nbytes, view
from xarray_zarrmax.core.loop import run_sync
from xarray_zarrmax.errors import CorruptDataError, ObjectChanged, StoreAccessError
from xarray_zarrmax.storage.abc import ByteSource, Fetched, Sink, Update

__all__ = ["SinkTests", "SourceTests", "as_bytes", "shown"]

KEY, OTHER, THIRD = "v/c/0", "v/c/1", "v/c/2"
DATA = b"0123456789"  # 10 bytes
SAME_SIZE = b"abcdefghij"  # another version of the same size: a size check alone would not see the change


def as_bytes(data: Buffer | Segments | None) -> bytes | None:
    """What a read returned, as bytes (None stays None)."""
    return None if data is None else bytes(view(data, 0, nbytes(data)))


def shown(err: BaseException) -> str:
    """All an error shows: message, repr, the traceback as Python prints it, notes, and every error reachable
    through ``__cause__`` and ``__context__``."""
    text = "".join(traceback.format_exception(err))
    seen: set[int] = set()
    stack: list[BaseException | None] = [err]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        text += str(e) + repr(e) + "".join(getattr(e, "__notes__", ()))
        stack += [e.__cause__, e.__context__]
    return text


class SourceTests:
    """Reads: whole objects, ranges, suffixes, listings, versions, missing objects, keys, pickling, secrets.

    Fill in `source` (a fixture: a source over an empty location), `write` and `remove`; override `current` for a
    source that reads one snapshot, and `secrets` / `refused_source` for a backend with credentials.
    """

    #: Whether `Fetched.version` identifies the object's version (None from every read where not).
    versioned: bool = True
    #: Whether a settled object's version may key a cache across reads (`Fetched.cacheable`).
    cacheable: bool = True
    #: What a read asking for bytes past the end raises (a range running over it, a suffix or prefix longer than
    #: the object); None: it returns the bytes there are.
    over_the_end: type[BaseException] | None = None
    #: What a range starting at or after the end raises; None: it reads as no bytes.
    after_the_end: type[BaseException] | None = None
    #: Whether an empty object can be written and read whole.
    empty_objects: bool = True
    #: What a key with ".." segments raises (it never reads outside the store).
    outside_key: type[BaseException] = ValueError
    #: Names a listing of the store's root shows beside the arrays written (an Icechunk store's group metadata).
    root_extras: frozenset[str] = frozenset()
    #: Whether the source survives pickling (a store held in another process's memory does not).
    picklable: bool = True

    # -- what a backend fills in ---------------------------------------------------------------------------------

    @pytest.fixture
    def source(self) -> ByteSource:
        """A source over an empty location."""
        raise NotImplementedError

    def write(self, source: ByteSource, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` as another writer would (zarr-python, a user), not through ``source``."""
        raise NotImplementedError

    def remove(self, source: ByteSource, key: str) -> None:
        """Delete the object at ``key`` as another writer would."""
        raise NotImplementedError

    def current(self, source: ByteSource) -> ByteSource:
        """A source that sees what was written since ``source`` was made: ``source`` itself, unless it reads one
        snapshot (then one at the latest)."""
        return source

    @pytest.fixture
    def secrets(self) -> tuple[str, ...]:
        """Credentials ``source`` holds, which no label, repr or error may show."""
        return ()

    @pytest.fixture
    def refused_source(self) -> ByteSource | None:
        """A source over the same location whose requests are refused (wrong credentials); None: no such thing."""
        return None

    # -- the contract --------------------------------------------------------------------------------------------

    def test_is_a_byte_source_named_by_its_label(self, source: ByteSource) -> None:
        assert isinstance(source, ByteSource)
        assert isinstance(source.label, str) and source.label
        assert repr(source) == f"{type(source).__name__}({source.label!r})"

    def test_get_reads_whole_objects(self, source: ByteSource) -> None:
        self.write(source, KEY, DATA)
        self.write(source, "w/c/3", b"x")
        source = self.current(source)
        assert as_bytes(run_sync(source.get(KEY))) == DATA
        assert as_bytes(run_sync(source.get("w/c/3"))) == b"x"

    def test_get_large_reads_whole_objects_in_any_number_of_parts(self, source: ByteSource) -> None:
        self.write(source, KEY, DATA)
        source = self.current(source)
        for split in (None, 4, 5, 64):  # 4: parts of 4, 4 and 2 bytes where the source splits
            with set_config(**({} if split is None else {"split_size": split})):
                got = run_sync(source.get_large(KEY))
            assert isinstance(got, Fetched)
            assert as_bytes(got.data) == DATA and got.size == len(DATA)

    def test_get_large_refuses_an_object_larger_than_its_array_allows(self, source: ByteSource) -> None:
        self.write(source, KEY, DATA)
        source = self.current(source)
        assert as_bytes(run_sync(source.get_large(KEY, max_size=len(DATA))).data) == DATA  # type: ignore[union-attr]
        with pytest.raises(CorruptDataError, match=rf"'{KEY}' on .* is 10 bytes, more than the 9 "):
            run_sync(source.get_large(KEY, max_size=9))

    def test_an_empty_object(self, source: ByteSource) -> None:
        if not self.empty_objects:
            pytest.skip("this store holds no empty objects")
        self.write(source, KEY, b"")
        source = self.current(source)
        assert as_bytes(run_sync(source.get(KEY))) == b""
        got = run_sync(source.get_large(KEY))
        assert got is not None and as_bytes(got.data) == b"" and got.size == 0

    def test_ranges_read_the_bytes_asked_for(self, source: ByteSource) -> None:
        self.write(source, KEY, DATA)
        source = self.current(source)
        ranges = [(0, 3), (5, 10), (2, 2), (0, 10), (9, 10), (4, 4)]
        got = run_sync(source.get_ranges(KEY, ranges))
        assert got is not None
        assert [as_bytes(part) for part in got] == [DATA[a:b] for a, b in ranges]

    def test_a_range_over_the_end_gives_the_bytes_there_are_or_the_store_refuses(self, source: ByteSource) -> None:
        self.write(source, KEY, DATA)
        source = self.current(source)
        cases = [((5, 100), self.over_the_end), ((10, 12), self.after_the_end), ((20, 30), self.after_the_end)]
        for (a, b), error in cases:
            if error is None:
                got = run_sync(source.get_ranges(KEY, [(a, b)]))
                assert got is not None and as_bytes(got[0]) == DATA[a:b], (a, b)
            else:
                with pytest.raises(error):
                    run_sync(source.get_ranges(KEY, [(a, b)]))

    def test_suffix_and_prefix(self, source: ByteSource) -> None:
        self.write(source, KEY, DATA)
        source = self.current(source)
        whole = run_sync(source.get_large(KEY))
        assert whole is not None
        for nbytes_, expected in [(3, DATA[-3:]), (10, DATA)]:
            got = run_sync(source.get_suffix(KEY, nbytes_))
            assert got is not None and as_bytes(got.data) == expected
            assert got.size in (None, len(DATA))
            assert got.version == whole.version and got.cacheable == whole.cacheable  # one object, one version
        for nbytes_, expected in [(3, DATA[:3]), (10, DATA)]:
            got = run_sync(source.get_prefix(KEY, nbytes_))
            assert got is not None and as_bytes(got.data) == expected
            assert got.size in (None, len(DATA)) and got.version == whole.version
        for read in (source.get_suffix, source.get_prefix):
            if self.over_the_end is None:
                longer = run_sync(read(KEY, 30))
                assert longer is not None and as_bytes(longer.data) == DATA  # fewer bytes: the object is smaller
            else:
                with pytest.raises(self.over_the_end):
                    run_sync(read(KEY, 30))

    def test_missing_objects_read_as_none(self, source: ByteSource) -> None:
        self.write(source, OTHER, DATA)  # the array exists; this object does not
        source = self.current(source)
        assert run_sync(source.get(KEY)) is None
        assert run_sync(source.get_large(KEY)) is None
        assert run_sync(source.get_suffix(KEY, 3)) is None
        assert run_sync(source.get_prefix(KEY, 3)) is None
        assert run_sync(source.get_ranges(KEY, [(0, 3)])) is None
        other = run_sync(source.get_large(OTHER))
        assert other is not None
        version = other.version if other.version is not None else ("any", "version")  # a version of this store
        with pytest.raises(ObjectChanged):  # a version was read: the object vanished since
            run_sync(source.get_ranges(KEY, [(0, 3)], version=version))

    def test_listings_name_the_children_of_a_prefix(self, source: ByteSource) -> None:
        for key in (KEY, OTHER, "w/c/0"):
            self.write(source, key, DATA)
        source = self.current(source)
        root = run_sync(source.list_dir(""))
        assert len(root) == len(set(root)) and set(root) - self.root_extras == {"v", "w"}
        for prefix in ("v/c", "v/c/"):
            listed = run_sync(source.list_dir(prefix))
            assert sorted(listed) == ["0", "1"]
        assert run_sync(source.list_dir("nothing/here")) == []

    def test_a_key_outside_the_store_is_refused(self, source: ByteSource) -> None:
        for key in ("../x", "v/../../x"):
            with pytest.raises(self.outside_key):
                run_sync(source.get(key))
            with pytest.raises(self.outside_key):
                run_sync(source.get_ranges(key, [(0, 1)]))
        with pytest.raises(self.outside_key):
            run_sync(source.list_dir(".."))

    def test_the_version_changes_with_the_object(self, source: ByteSource) -> None:
        self.write(source, KEY, DATA)
        first = run_sync(self.current(source).get_large(KEY))
        assert first is not None
        if not self.versioned:
            assert first.version is None and not first.cacheable
            return
        assert first.version is not None
        assert isinstance(first.version, Hashable)  # it keys caches
        old = self.current(source)
        self.write(source, KEY, SAME_SIZE)
        now = self.current(source)
        second = run_sync(now.get_large(KEY))
        assert second is not None and as_bytes(second.data) == SAME_SIZE
        assert second.version != first.version
        got = run_sync(now.get_ranges(KEY, [(0, 3), (7, 10)], version=second.version))
        assert got is not None and [as_bytes(p) for p in got] == [b"abc", b"hij"]
        if now is old:  # the source sees changes: it proves the version of what it reads, at no extra request
            with request_counts() as counts:
                with pytest.raises(ObjectChanged):
                    run_sync(now.get_ranges(KEY, [(0, 3), (7, 10)], version=first.version))
            assert counts.total("get") <= 2
        else:  # a snapshot: what it read once it reads again, whatever was written since
            again = run_sync(old.get_ranges(KEY, [(0, 3)], version=first.version))
            assert again is not None and as_bytes(again[0]) == DATA[:3]
        self.remove(source, KEY)
        with pytest.raises(ObjectChanged):
            run_sync(self.current(source).get_ranges(KEY, [(0, 3)], version=second.version))

    def test_only_a_version_that_changes_with_the_object_is_cacheable(self, source: ByteSource) -> None:
        self.write(source, KEY, DATA)
        source = self.current(source)
        got = run_sync(source.get_large(KEY))
        assert got is not None
        assert got.cacheable == self.cacheable
        assert not got.cacheable or got.version is not None

    def test_every_request_is_counted_under_the_label(self, source: ByteSource) -> None:
        self.write(source, KEY, DATA)
        source = self.current(source)
        with request_counts() as counts:
            run_sync(source.get(KEY))
            run_sync(source.get_large(KEY))
            run_sync(source.get_suffix(KEY, 3))
            run_sync(source.get_ranges(KEY, [(0, 3), (5, 7)]))
            run_sync(source.list_dir("v/c"))
        assert list(counts.by_store) == [source.label]
        mine = counts.by_store[source.label]
        assert (mine.get, mine.list, mine.bytes) == (5, 1, 10 + 10 + 3 + 3 + 2)

    def test_a_pickled_source_reads_the_same_objects(self, source: ByteSource) -> None:
        if not self.picklable:
            pytest.skip("this store is not picklable")
        self.write(source, KEY, DATA)
        source = self.current(source)
        copy = pickle.loads(pickle.dumps(source))
        assert type(copy) is type(source) and copy.label == source.label
        assert as_bytes(run_sync(copy.get(KEY))) == DATA

    def test_no_secret_in_a_label_repr_or_error(self, source: ByteSource, secrets: tuple[str, ...],
                                                refused_source: ByteSource | None) -> None:
        if not secrets:
            pytest.skip("this store holds no credentials")
        for secret in secrets:
            assert secret not in source.label and secret not in repr(source)
        if refused_source is None:
            return
        for read in (lambda: refused_source.get(KEY), lambda: refused_source.get_large(KEY),
                     lambda: refused_source.get_ranges(KEY, [(0, 3)]), lambda: refused_source.list_dir("v")):
            with pytest.raises(StoreAccessError) as caught:
                run_sync(read())
            text = shown(caught.value)
            assert refused_source.label in text
            for secret in secrets:
                assert secret not in text


def _counter_merge(mark: bytes) -> Any:
    return lambda stored: (b"" if stored is None else bytes(stored)) + mark


class SinkTests:
    """Writes: whole objects, deletes, read-merge-writes (also concurrent ones), conditional writes, keys,
    pickling, secrets.

    Fill in `sink` (a fixture: a sink over an empty location where arrays ``v`` and ``w`` may be written); override
    `read` to read behind the sink's back, `put_if` for a backend with conditional writes, and `secrets` /
    `refused_sink` for a backend with credentials.
    """

    #: Whether the sink survives pickling (a store held in this process's memory does not).
    picklable: bool = True
    #: What an update of a key with ".." segments raises (its read comes first; nothing is written).
    outside_key: type[BaseException] = ValueError

    @pytest.fixture
    def sink(self) -> Sink:
        """A sink over an empty location."""
        raise NotImplementedError

    def read(self, sink: Sink, key: str) -> bytes | None:
        """The object at ``key`` (None: there is none), by default read through ``sink.source``."""
        return as_bytes(run_sync(sink.source.get(key)))

    def put_if(self, sink: Sink, key: str, data: bytes, version: Hashable | None) -> None:
        """A conditional write: only where the object is still ``version`` (None: only where there is no object),
        else `ObjectChanged`. Backends without conditional writes skip."""
        pytest.skip("this sink makes no conditional writes: its merges are safe by other means")

    @pytest.fixture
    def secrets(self) -> tuple[str, ...]:
        """Credentials ``sink`` holds, which no label, repr or error may show."""
        return ()

    @pytest.fixture
    def refused_sink(self) -> Sink | None:
        """A sink over the same location whose requests are refused (wrong credentials); None: no such thing."""
        return None

    # -- the contract --------------------------------------------------------------------------------------------

    def test_is_a_sink_reading_through_its_source(self, sink: Sink) -> None:
        assert isinstance(sink, Sink) and isinstance(sink.source, ByteSource)
        assert sink.label == sink.source.label
        assert repr(sink) == f"{type(sink).__name__}({sink.label!r})"

    def test_put_writes_whole_objects_and_replaces_them(self, sink: Sink) -> None:
        sink.put(KEY, DATA)
        sink.put(OTHER, Pieces((b"a" * 10, b"b" * 200_000, b"c")))  # a shard in parts
        assert self.read(sink, KEY) == DATA
        assert self.read(sink, OTHER) == b"a" * 10 + b"b" * 200_000 + b"c"
        sink.put(KEY, b"replaced")
        assert self.read(sink, KEY) == b"replaced"
        sink.put_many({KEY: b"one", THIRD: b"three", "w/c/0": b"w"})
        assert [self.read(sink, k) for k in (KEY, THIRD, "w/c/0")] == [b"one", b"three", b"w"]

    def test_delete_removes_objects_and_a_missing_one_is_no_error(self, sink: Sink) -> None:
        sink.put_many({KEY: DATA, OTHER: DATA, THIRD: DATA})
        sink.delete(KEY)
        sink.delete(KEY)
        sink.delete("w/c/9")
        assert self.read(sink, KEY) is None and self.read(sink, OTHER) == DATA
        sink.delete_many([OTHER, THIRD, "w/c/8"])
        assert self.read(sink, OTHER) is None and self.read(sink, THIRD) is None

    def test_delete_prefix_removes_what_is_under_it_only(self, sink: Sink) -> None:
        sink.put_many({KEY: DATA, OTHER: DATA, "w/c/0": DATA})
        sink.delete_prefix("v/c")
        assert self.read(sink, KEY) is None and self.read(sink, OTHER) is None
        assert self.read(sink, "w/c/0") == DATA
        sink.delete_prefix("")
        assert self.read(sink, "w/c/0") is None

    @pytest.mark.parametrize("likely_new", [False, True])
    def test_update_merges_what_is_stored(self, sink: Sink, likely_new: bool) -> None:
        seen: list[bytes | None] = []

        def merge(stored: Any) -> bytes:
            seen.append(None if stored is None else bytes(stored))
            return (b"new" if stored is None else bytes(stored)) + b"+merged"

        sink.update(KEY, merge, likely_new=likely_new)
        assert self.read(sink, KEY) == b"new+merged" and seen[-1] is None
        sink.put(OTHER, DATA)
        sink.update(OTHER, merge, likely_new=likely_new)
        assert self.read(sink, OTHER) == DATA + b"+merged" and seen[-1] == DATA

    @pytest.mark.parametrize("likely_new", [False, True])
    def test_a_merge_of_nothing_may_store_nothing_but_never_deletes(self, sink: Sink, likely_new: bool) -> None:
        sink.update(KEY, lambda stored: None, likely_new=likely_new)
        assert self.read(sink, KEY) is None
        sink.put(OTHER, DATA)
        with pytest.raises(AssertionError, match=f"a merge of '{OTHER}' asked to delete a stored object"):
            sink.update(OTHER, lambda stored: None, likely_new=likely_new)
        assert self.read(sink, OTHER) == DATA

    @pytest.mark.parametrize("in_flight", [1, 4])
    def test_update_many_runs_every_update_and_raises_the_first_failure(self, sink: Sink, in_flight: int) -> None:
        def failing(stored: Any) -> bytes:
            raise RuntimeError("merge failed")

        sink.put(OTHER, DATA)
        updates = [Update(KEY, _counter_merge(b"a"), likely_new=True), Update(OTHER, failing),
                   Update(THIRD, _counter_merge(b"c"))]
        with pytest.raises(RuntimeError, match="merge failed") as caught:
            sink.update_many(updates, in_flight)
        assert f"while merging into '{OTHER}'" in getattr(caught.value, "__notes__", [])
        assert (self.read(sink, KEY), self.read(sink, OTHER), self.read(sink, THIRD)) == (b"a", DATA, b"c")

    def test_concurrent_updates_of_one_object_lose_nothing(self, sink: Sink) -> None:
        marks = [bytes([ord("a") + i]) for i in range(6)]
        start = threading.Barrier(len(marks))
        errors: list[BaseException] = []

        def writer(mark: bytes) -> None:
            try:
                start.wait()
                sink.update(KEY, _counter_merge(mark))
            except BaseException as err:
                errors.append(err)

        threads = [threading.Thread(target=writer, args=(m,)) for m in marks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        stored = self.read(sink, KEY)
        assert stored is not None and sorted(stored) == sorted(b"".join(marks))  # each merge applied, once

    def test_conditional_writes_refuse_a_changed_object(self, sink: Sink) -> None:
        self.put_if(sink, KEY, DATA, None)  # create-only: the key is free
        with pytest.raises(ObjectChanged):
            self.put_if(sink, KEY, b"second create", None)
        assert self.read(sink, KEY) == DATA
        first = run_sync(sink.source.get_large(KEY))
        assert first is not None and first.version is not None
        self.put_if(sink, KEY, SAME_SIZE, first.version)  # the version read: accepted
        assert self.read(sink, KEY) == SAME_SIZE
        with pytest.raises(ObjectChanged):  # stale: the object changed since that version was read
            self.put_if(sink, KEY, b"stale merge", first.version)
        assert self.read(sink, KEY) == SAME_SIZE
        second = run_sync(sink.source.get_large(KEY))
        assert second is not None
        sink.delete(KEY)
        with pytest.raises(ObjectChanged):  # deleted since
            self.put_if(sink, KEY, b"into nothing", second.version)
        assert self.read(sink, KEY) is None

    def test_a_key_outside_the_store_is_refused(self, sink: Sink) -> None:
        for key in ("../x", "/x", "v/../../x"):
            with pytest.raises(ValueError, match="expected a key inside the store"):
                sink.put(key, DATA)
            with pytest.raises(ValueError, match="expected a key inside the store"):
                sink.delete(key)
        for key in ("../x", "v/../../x"):
            with pytest.raises(self.outside_key):
                sink.update(key, _counter_merge(b"x"))

    def test_every_write_is_counted_under_the_label(self, sink: Sink) -> None:
        with request_counts() as counts:
            sink.put(KEY, DATA)
            sink.delete(KEY)
        assert list(counts.by_store) == [sink.label]
        mine = counts.by_store[sink.label]
        assert (mine.put, mine.delete, mine.bytes) == (1, 1, len(DATA))

    def test_a_pickled_sink_writes_where_the_original_does(self, sink: Sink) -> None:
        if not self.picklable:
            pytest.skip("this sink is not picklable")
        copy = pickle.loads(pickle.dumps(sink))  # as a dask task on another worker gets it
        assert type(copy) is type(sink)
        copy.put(KEY, DATA)
        copy.update(OTHER, _counter_merge(b"merged"))
        sink.collect([copy.task_result()])
        assert self.read(sink, KEY) == DATA and self.read(sink, OTHER) == b"merged"

    def test_existing_store_is_a_zarr_store_over_what_was_written(self, sink: Sink) -> None:
        from zarr.abc.store import Store
        from zarr.core.buffer import default_buffer_prototype

        sink.put(KEY, DATA)
        store = sink.existing_store()
        assert isinstance(store, Store)
        got = run_sync(store.get(KEY, prototype=default_buffer_prototype()))
        assert got is not None and got.to_bytes() == DATA

    def test_no_secret_in_a_label_repr_or_error(self, sink: Sink, secrets: tuple[str, ...],
                                                refused_sink: Sink | None) -> None:
        if not secrets:
            pytest.skip("this store holds no credentials")
        for secret in secrets:
            assert secret not in sink.label and secret not in repr(sink)
        if refused_sink is None:
            return
        for write in (lambda: refused_sink.put(KEY, DATA), lambda: refused_sink.delete(KEY),
                      lambda: refused_sink.update(KEY, _counter_merge(b"x"))):
            with pytest.raises(StoreAccessError) as caught:
                write()
            text = shown(caught.value)
            assert refused_sink.label in text
            for secret in secrets:
                assert secret not in text
