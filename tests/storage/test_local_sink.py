"""The local sink's writes: every object appears whole under its key or not at all, with files of no name
(O_TMPFILE) where the system has them and a temporary name renamed over the key where it does not."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from xarray_zarrmax.core.bytes import Pieces
from xarray_zarrmax.storage import sinks

HAS_UNNAMED_FILES = sinks.LocalSink(".")._unnamed


@pytest.fixture(params=["unnamed", "named"])
def sink(request: pytest.FixtureRequest, tmp_path: Path) -> sinks.LocalSink:
    if request.param == "unnamed" and not HAS_UNNAMED_FILES:
        pytest.skip("this system has no O_TMPFILE or no /proc/self/fd")  # Linux CI has both: never skipped there
    local = sinks.LocalSink(tmp_path)
    local._unnamed = request.param == "unnamed"
    return local


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_put_and_replace_leave_only_the_objects(sink: sinks.LocalSink, tmp_path: Path) -> None:
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
    sink = sinks.LocalSink(tmp_path)
    named: list[str] = []
    real = sinks._temporary_name
    monkeypatch.setattr(sinks, "_temporary_name", lambda: named.append("v/c/0") or real())
    sink.put("v/c/0", b"new")
    assert named == []
    sink.put("v/c/0", b"again")  # the key exists: linked in under a temporary name, renamed over it
    assert named == ["v/c/0"]
    assert (tmp_path / "v/c/0").read_bytes() == b"again" and _files(tmp_path) == ["v/c/0"]


@pytest.mark.parametrize("existing", [False, True])
def test_nothing_appears_before_every_byte_is_written(sink: sinks.LocalSink, tmp_path: Path, existing: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "v/c/0"
    if existing:
        sink.put("v/c/0", b"old")
    seen: list[Any] = []
    real = sinks._write_parts

    def write_and_look(fd: int, data: Any) -> None:
        os.write(fd, b"half")
        seen.append(path.read_bytes() if path.exists() else None)
        real(fd, data)
        seen.append(path.read_bytes() if path.exists() else None)

    monkeypatch.setattr(sinks, "_write_parts", write_and_look)
    sink.put("v/c/0", b"the new object")
    before = b"old" if existing else None
    assert seen == [before, before]
    assert path.read_bytes() == b"half" + b"the new object"  # what the patched writer wrote, whole


@pytest.mark.parametrize("existing", [False, True])
def test_a_write_failing_midway_leaves_the_old_object_or_none(sink: sinks.LocalSink, tmp_path: Path, existing: bool,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    if existing:
        sink.put("v/c/0", b"old")

    def fail_midway(fd: int, data: Any) -> None:
        os.write(fd, b"half an object")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sinks, "_write_parts", fail_midway)
    with pytest.raises(OSError, match="No space left") as info:
        sink.put("v/c/0", b"new")
    assert any("'v/c/0'" in note and str(tmp_path) in note for note in info.value.__notes__)
    assert _files(tmp_path) == (["v/c/0"] if existing else [])
    if existing:
        assert (tmp_path / "v/c/0").read_bytes() == b"old"


def test_file_modes_match_a_plain_create(sink: sinks.LocalSink, tmp_path: Path) -> None:
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
    sink = sinks.LocalSink(tmp_path)
    monkeypatch.setattr(sinks.os, "open", _refusing_unnamed_files(errno.EOPNOTSUPP))
    sink.put("v/c/0", b"written")
    assert not sink._unnamed  # asked once, then never again
    sink.put("v/c/1", b"also")
    assert (tmp_path / "v/c/0").read_bytes() == b"written" and _files(tmp_path) == ["v/c/0", "v/c/1"]


def test_other_errors_making_an_unnamed_file_are_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not HAS_UNNAMED_FILES:
        pytest.skip("this system has no O_TMPFILE or no /proc/self/fd")
    sink = sinks.LocalSink(tmp_path)
    monkeypatch.setattr(sinks.os, "open", _refusing_unnamed_files(errno.EACCES))
    with pytest.raises(PermissionError) as info:
        sink.put("v/c/0", b"x")
    assert any("'v/c/0'" in note for note in info.value.__notes__)
    # the error names the object's path, not the directory ('.') the unnamed file was asked of
    assert info.value.filename == str(tmp_path / "v/c/0") and "'.'" not in str(info.value)
    assert sink._unnamed and _files(tmp_path) == []


def test_a_key_of_255_bytes_is_written_and_replaced(sink: sinks.LocalSink, tmp_path: Path) -> None:
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
    sink = sinks.LocalSink(tmp_path)
    sink.put("v/c/1", b"before")
    monkeypatch.setattr(sinks.os, "link", _refusing_links(code))
    sink.put("v/c/0", b"new")
    sink.put("v/c/1", b"replaced")
    assert sink._unnamed is stays_unnamed
    assert (tmp_path / "v/c/0").read_bytes() == b"new" and (tmp_path / "v/c/1").read_bytes() == b"replaced"
    assert _files(tmp_path) == ["v/c/0", "v/c/1"]


def test_other_link_errors_are_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not HAS_UNNAMED_FILES:
        pytest.skip("this system has no O_TMPFILE or no /proc/self/fd")
    sink = sinks.LocalSink(tmp_path)
    monkeypatch.setattr(sinks.os, "link", _refusing_links(errno.EMLINK))
    with pytest.raises(OSError, match="Too many links") as info:
        sink.put("v/c/0", b"x")
    assert info.value.filename == str(tmp_path / "v/c/0") and info.value.filename2 is None
    assert sink._unnamed and _files(tmp_path) == []
