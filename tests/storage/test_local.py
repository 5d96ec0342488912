"""Local files, both directions: the source and sink contracts (`xarray_zarrmax.testing.storage`) for a directory,
then the local sink's own guarantees: every object appears whole under its key or not at all, with files of no
name (O_TMPFILE) where the system has them and a temporary name renamed over the key where it does not."""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from xarray_zarrmax.core.bytes import Pieces
from xarray_zarrmax.core.loop import run_sync
from xarray_zarrmax.storage import LocalSink, LocalSource, local
from xarray_zarrmax.testing.storage import DATA, KEY, SinkTests, SourceTests

HAS_UNNAMED_FILES = LocalSink(".")._unnamed


# -- the contracts ---------------------------------------------------------------------------------------------


class TestLocalSource(SourceTests):
    @pytest.fixture(autouse=True)
    def settled(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Files here are milliseconds old: let them count as settled, so versions may key caches (the racy-file
        rule has its own test below)."""
        monkeypatch.setattr(local, "RACY_WINDOW_NS", 0)

    @pytest.fixture
    def source(self, tmp_path: Path) -> LocalSource:
        return LocalSource(tmp_path)

    def write(self, source: Any, key: str, data: bytes) -> None:
        # as zarr-python's LocalStore writes: a new file renamed over the key (a new inode, a new version)
        path = source.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def remove(self, source: Any, key: str) -> None:
        os.remove(source.root / key)


class TestLocalSink(SinkTests):
    @pytest.fixture(params=["unnamed", "named"])
    def sink(self, request: pytest.FixtureRequest, tmp_path: Path) -> LocalSink:
        return _sink(request.param, tmp_path)

    def read(self, sink: Any, key: str) -> bytes | None:
        path = sink.source.root / key
        return path.read_bytes() if path.is_file() else None


def test_a_file_written_just_now_is_not_cacheable(tmp_path: Path) -> None:
    """Timestamps tick at the file system's granularity: a file changed within `RACY_WINDOW_NS` may change again
    without a visible change of its version, so that version keys no cache (git's rule for "racy" entries)."""
    (tmp_path / KEY).parent.mkdir(parents=True)
    (tmp_path / KEY).write_bytes(DATA)
    got = run_sync(LocalSource(tmp_path).get_large(KEY))
    assert got is not None and got.version is not None and not got.cacheable
    settled = time.time_ns() - 2 * local.RACY_WINDOW_NS
    os.utime(tmp_path / KEY, ns=(settled, settled))  # ctime stays now: still racy
    got = run_sync(LocalSource(tmp_path).get_large(KEY))
    assert got is not None and not got.cacheable


def test_a_missing_directory_holds_nothing(tmp_path: Path) -> None:
    sink = LocalSink(tmp_path / "not-yet")
    assert sink.existing_store() is None
    assert run_sync(sink.source.get(KEY)) is None and run_sync(sink.source.list_dir("")) == []


# -- the local sink's writes -----------------------------------------------------------------------------------


def _sink(kind: str, root: Path) -> LocalSink:
    if kind == "unnamed" and not HAS_UNNAMED_FILES:
        pytest.skip("this system has no O_TMPFILE or no /proc/self/fd")  # Linux CI has both: never skipped there
    sink = LocalSink(root)
    sink._unnamed = kind == "unnamed"
    return sink


@pytest.fixture(params=["unnamed", "named"])
def sink(request: pytest.FixtureRequest, tmp_path: Path) -> LocalSink:
    return _sink(request.param, tmp_path)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_put_and_replace_leave_only_the_objects(sink: LocalSink, tmp_path: Path) -> None:
    parts = Pieces((b"a" * 10, b"b" * 200_000, b"c"))  # a shard in parts: small ones buffered, a large one direct
    sink.put("v/c/0", parts)
    sink.put("v/c/1", b"one")
    sink.put("v/c/1", b"replaced")
    sink.update("v/c/0", lambda stored: bytes(stored) + b"+merged")
    sink.update("v/c/2", lambda stored: b"new" if stored is None else b"not new")
    assert (tmp_path / "v/c/0").read_bytes() == b"a" * 10 + b"b" * 200_000 + b"c" + b"+merged"
    assert (tmp_path / "v/c/1").read_bytes() == b"replaced"
    assert (tmp_path / "v/c/2").read_bytes() == b"new"
    assert _files(tmp_path) == ["v/c/0", "v/c/1", "v/c/2"]


def test_new_objects_get_no_temporary_name_with_unnamed_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not HAS_UNNAMED_FILES:
        pytest.skip("this system has no O_TMPFILE or no /proc/self/fd")
    sink = LocalSink(tmp_path)
    named: list[str] = []
    real = local._temporary_name
    monkeypatch.setattr(local, "_temporary_name", lambda: named.append("v/c/0") or real())
    sink.put("v/c/0", b"new")
    assert named == []
    sink.put("v/c/0", b"again")  # the key exists: linked in under a temporary name, renamed over it
    assert named == ["v/c/0"]
    assert (tmp_path / "v/c/0").read_bytes() == b"again" and _files(tmp_path) == ["v/c/0"]


@pytest.mark.parametrize("existing", [False, True])
def test_nothing_appears_before_every_byte_is_written(sink: LocalSink, tmp_path: Path, existing: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "v/c/0"
    if existing:
        sink.put("v/c/0", b"old")
    seen: list[Any] = []
    real = local._write_parts

    def write_and_look(fd: int, data: Any) -> None:
        os.write(fd, b"half")
        seen.append(path.read_bytes() if path.exists() else None)
        real(fd, data)
        seen.append(path.read_bytes() if path.exists() else None)

    monkeypatch.setattr(local, "_write_parts", write_and_look)
    sink.put("v/c/0", b"the new object")
    before = b"old" if existing else None
    assert seen == [before, before]
    assert path.read_bytes() == b"half" + b"the new object"  # what the patched writer wrote, whole


@pytest.mark.parametrize("existing", [False, True])
def test_a_write_failing_midway_leaves_the_old_object_or_none(sink: LocalSink, tmp_path: Path, existing: bool,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    if existing:
        sink.put("v/c/0", b"old")

    def fail_midway(fd: int, data: Any) -> None:
        os.write(fd, b"half an object")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(local, "_write_parts", fail_midway)
    with pytest.raises(OSError, match="No space left") as info:
        sink.put("v/c/0", b"new")
    assert any("'v/c/0'" in note and str(tmp_path) in note for note in info.value.__notes__)
    assert _files(tmp_path) == (["v/c/0"] if existing else [])
    if existing:
        assert (tmp_path / "v/c/0").read_bytes() == b"old"


def test_file_modes_match_a_plain_create(sink: LocalSink, tmp_path: Path) -> None:
    sink.put("v/c/0", b"x")
    sink.put("v/c/0", b"y")
    with open(tmp_path / "plain", "wb"):
        pass
    assert stat.S_IMODE((tmp_path / "v/c/0").stat().st_mode) == stat.S_IMODE((tmp_path / "plain").stat().st_mode)


def _refusing_unnamed_files(code: int) -> Any:
    real = os.open

    def fake(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & getattr(os, "O_TMPFILE", 0) == getattr(os, "O_TMPFILE", -1):
            raise OSError(code, os.strerror(code), path)  # as os.open names it: '.' in the directory
        return real(path, flags, *args, **kwargs)

    return fake


def test_a_file_system_without_unnamed_files_gets_named_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not HAS_UNNAMED_FILES:
        pytest.skip("this system has no O_TMPFILE or no /proc/self/fd")
    sink = LocalSink(tmp_path)
    monkeypatch.setattr(local.os, "open", _refusing_unnamed_files(errno.EOPNOTSUPP))
    sink.put("v/c/0", b"written")
    assert not sink._unnamed  # asked once, then never again
    sink.put("v/c/1", b"also")
    assert (tmp_path / "v/c/0").read_bytes() == b"written" and _files(tmp_path) == ["v/c/0", "v/c/1"]


def test_other_errors_making_an_unnamed_file_are_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not HAS_UNNAMED_FILES:
        pytest.skip("this system has no O_TMPFILE or no /proc/self/fd")
    sink = LocalSink(tmp_path)
    monkeypatch.setattr(local.os, "open", _refusing_unnamed_files(errno.EACCES))
    with pytest.raises(PermissionError) as info:
        sink.put("v/c/0", b"x")
    assert any("'v/c/0'" in note for note in info.value.__notes__)
    # the error names the object's path, not the directory ('.') the unnamed file was asked of
    assert info.value.filename == str(tmp_path / "v/c/0") and "'.'" not in str(info.value)
    assert sink._unnamed and _files(tmp_path) == []


def test_a_key_of_255_bytes_is_written_and_replaced(sink: LocalSink, tmp_path: Path) -> None:
    key = "v/" + "n" * 255
    sink.put(key, b"first")
    sink.put(key, b"second")
    sink.update(key, lambda stored: bytes(stored) + b"+merged")
    assert (tmp_path / key).read_bytes() == b"second+merged" and _files(tmp_path) == [key]


def _refusing_links(code: int) -> Any:
    def fake(src: Any, dst: Any, **kwargs: Any) -> None:
        raise OSError(code, os.strerror(code), src, dst)

    return fake


@pytest.mark.parametrize(("code", "stays_unnamed"), [(errno.EPERM, False), (errno.EXDEV, False),
                                                      (errno.ENOENT, True)])
def test_a_refused_link_writes_the_named_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int,
                                             stays_unnamed: bool) -> None:
    """A file system without hard links (EPERM) or a /proc that cannot reach the file (EXDEV): named files from
    then on. ENOENT (the directory removed meanwhile) only for this object: the named way then says so."""
    if not HAS_UNNAMED_FILES:
        pytest.skip("this system has no O_TMPFILE or no /proc/self/fd")
    sink = LocalSink(tmp_path)
    sink.put("v/c/1", b"before")
    monkeypatch.setattr(local.os, "link", _refusing_links(code))
    sink.put("v/c/0", b"new")
    sink.put("v/c/1", b"replaced")
    assert sink._unnamed is stays_unnamed
    assert (tmp_path / "v/c/0").read_bytes() == b"new" and (tmp_path / "v/c/1").read_bytes() == b"replaced"
    assert _files(tmp_path) == ["v/c/0", "v/c/1"]


def test_other_link_errors_are_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not HAS_UNNAMED_FILES:
        pytest.skip("this system has no O_TMPFILE or no /proc/self/fd")
    sink = LocalSink(tmp_path)
    monkeypatch.setattr(local.os, "link", _refusing_links(errno.EMLINK))
    with pytest.raises(OSError, match="Too many links") as info:
        sink.put("v/c/0", b"x")
    assert info.value.filename == str(tmp_path / "v/c/0") and info.value.filename2 is None
    assert sink._unnamed and _files(tmp_path) == []
