"""What to_zarr refuses before writing anything, and how a failed write fails: the error types Dataset.to_zarr
and reads raise, naming the array, key and endpoint and never a secret; the old object left whole."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import xarray_zarrmax
import xarray_zarrmax.storage.local
from tests.support.compare import check_reads, s3_oracle
from tests.support.datasets import SHARDED, sample
from tests.support.targets import counter
from xarray_zarrmax import set_config
from xarray_zarrmax.storage import ObstoreSink
from xarray_zarrmax.testing import MinioServer


def test_write_empty_chunks_of_the_wrong_type_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="expected write_empty_chunks as a bool or None. Got 'yes'"):
        xarray_zarrmax.to_zarr(sample(), tmp_path / "a.zarr", write_empty_chunks="yes")  # type: ignore[arg-type]
    assert not (tmp_path / "a.zarr").exists()


@pytest.mark.parametrize("how", ["mode a", "append", "region", "group below"])
def test_an_existing_zarr_v2_store_is_refused_not_hidden(tmp_path: Path, how: str) -> None:
    """A v3 group written beside a v2 group's .zgroup hides every v2 variable from readers: refused, and the
    store is left as it was."""
    target = tmp_path / "v2.zarr"
    old = xr.Dataset({"a": (("x",), np.arange(8.0))}, attrs={"title": "v2"})
    old.to_zarr(target, zarr_format=2)
    before = sorted(str(p.relative_to(target)) for p in target.rglob("*"))
    kwargs: dict[str, Any] = {
        "mode a": {"mode": "a"},
        "append": {"append_dim": "x"},
        "region": {"region": {"x": slice(2, 4)}},
        "group below": {"group": "sub/inner", "mode": "w"},
    }[how]
    new = old.isel(x=slice(2, 4)) * 10 if how == "region" else xr.Dataset({"c": (("y",), np.ones(3))})
    if how == "append":
        new = old
    with pytest.raises(ValueError, match=r"holds a Zarr format 2 group \('(sub/)?\.zgroup'\).*format 3 only"):
        xarray_zarrmax.to_zarr(new, target, **kwargs)
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*")) == before
    with xr.open_dataset(target, engine="zarr") as got:
        xr.testing.assert_identical(got.load(), old)


def test_a_read_only_store_is_refused_and_left_alone(tmp_path: Path) -> None:
    import zarr

    old = xr.Dataset({"keep": (("y",), np.arange(3.0))})
    xarray_zarrmax.to_zarr(old, tmp_path / "a.zarr")
    for path, mode in ((tmp_path / "a.zarr", "w"), (tmp_path / "new.zarr", "w-")):
        with pytest.raises(ValueError, match="Store is read-only: to_zarr needs a writable store"):
            xarray_zarrmax.to_zarr(sample(), zarr.storage.LocalStore(path, read_only=True), mode=mode)
    assert not (tmp_path / "new.zarr").exists()
    check_reads(tmp_path / "a.zarr", old)


@pytest.mark.parametrize("kwargs", [{"mode": "r+"}, {"region": {"time": slice(0, 2)}}])
def test_writing_into_a_missing_store_creates_nothing(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    ds = sample().isel(time=slice(0, 2)) if "region" in kwargs else sample()
    with pytest.raises(FileNotFoundError) as info:
        xarray_zarrmax.to_zarr(ds.drop_vars(["flag"]), tmp_path / "missing.zarr", **kwargs)
    assert f"file://{tmp_path / 'missing.zarr'}" in str(info.value) and "Staging" not in str(info.value)
    assert not (tmp_path / "missing.zarr").exists()


def test_a_file_where_a_chunk_directory_belongs_is_refused_as_zarr_refuses_it(tmp_path: Path) -> None:
    """A plain file where a chunk directory should be: the same error type as Dataset.to_zarr's, naming the
    path, with the key and store in a note; nothing is written beside it."""
    import shutil

    ds = xr.Dataset({"v": (("t", "x"), np.arange(16, dtype="f4").reshape(4, 4))})
    encoding = {"v": {"chunks": (1, 2), "shards": (2, 4)}}
    part = ds.isel(t=slice(2, 4)) + 100
    errors = []
    for name in ("zarr", "zarrmax"):
        root = tmp_path / f"{name}.zarr"
        ds.to_zarr(root, encoding=encoding, consolidated=False, zarr_format=3)
        shutil.rmtree(root / "v/c/1")
        (root / "v/c/1").write_bytes(b"x")
        with pytest.raises(OSError) as info:
            if name == "zarr":
                part.to_zarr(root, region={"t": slice(2, 4)}, consolidated=False)
            else:
                xarray_zarrmax.to_zarr(part, root, region={"t": slice(2, 4)}, consolidated=False)
        errors.append(info.value)
        assert (root / "v/c/1").read_bytes() == b"x" and sorted(os.listdir(root / "v/c")) == ["0", "1"]
    theirs, ours = errors
    assert type(ours) is type(theirs) is FileExistsError
    assert str(tmp_path / "zarrmax.zarr/v/c/1") in str(ours)
    assert any("'v/c/1/0'" in note for note in getattr(ours, "__notes__", []))


def test_failed_local_write_leaves_the_old_object_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = sample()
    xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED})
    shard = tmp_path / "a.zarr/temp/c/0/0/0"
    before = shard.read_bytes()

    def broken(src: str, dst: str, **dir_fds: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(xarray_zarrmax.storage.local.os, "replace", broken)
    changed = ds[["temp"]].isel(time=slice(0, 8)).drop_vars(["time", "y", "x", "station"]) + 1
    with pytest.raises(OSError, match="No space left") as info:
        xarray_zarrmax.to_zarr(changed, tmp_path / "a.zarr", region={"time": slice(0, 8)})
    notes = "\n".join(info.value.__notes__)
    assert "temp/c/0/0/0" in notes and "array 'temp'" in notes and str(tmp_path) in notes
    monkeypatch.undo()
    assert shard.read_bytes() == before
    assert not [p for p in shard.parent.iterdir() if p.name.endswith("zarrmax-tmp")]
    check_reads(tmp_path / "a.zarr", ds)


def test_errors_name_array_key_and_endpoint_never_the_secret(minio: MinioServer, bucket: str) -> None:
    """A refused write says which array, object and endpoint, and no credential: not the secret key, not a
    password in the endpoint URL."""
    password = "endpoint-pa55word-xyz"
    secret = "wrong-secret-key-0123456789"
    endpoint = minio.endpoint.replace("http://", f"http://user:{password}@")
    so = {**minio.storage_options(endpoint), "secret_access_key": secret}
    with pytest.raises(Exception) as info:
        xarray_zarrmax.to_zarr(sample(), f"s3://{bucket}/refused.zarr", storage_options=so)
    texts = _all_text(info.value)
    assert password not in texts and secret not in texts
    assert f"s3://{bucket}/refused.zarr" in texts and f"127.0.0.1:{minio.port}" in texts


def test_refused_and_unreachable_writes_raise_what_refused_reads_raise(minio: MinioServer, bucket: str) -> None:
    """Refused credentials and an endpoint nobody answers: a write raises the StoreAccessError (an OSError) a
    read of the same store raises, whether the target is new or holds an array, never obstore's own types
    (which are no OSError, so ``except OSError`` around a write would miss them)."""
    import socket

    from xarray_zarrmax.errors import StoreAccessError

    good = minio.storage_options()
    url = f"s3://{bucket}/held{next(counter)}.zarr"
    xarray_zarrmax.to_zarr(sample(), url, storage_options=good)
    refused = {**good, "secret_access_key": "wrong-secret-key-0123456789"}
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    unreachable = {**good, "endpoint": f"http://127.0.0.1:{port}"}
    with set_config(retries=0):
        for options, word in ((refused, "refused: check the credentials"), (unreachable, "failed")):
            with pytest.raises(StoreAccessError, match=word):
                xr.open_dataset(url, engine="zarrmax", storage_options=options).load()
            for target, kwargs in ((f"s3://{bucket}/new{next(counter)}.zarr", {}), (url, {"append_dim": "time"})):
                with pytest.raises(StoreAccessError, match=word) as info:
                    xarray_zarrmax.to_zarr(sample(), target, storage_options=options, **kwargs)
                assert isinstance(info.value, OSError)
                assert "nothing was written" in _all_text(info.value)
    check_reads(url, sample(), s3_oracle(minio, url), storage_options=good)  # the refused appends changed nothing


def test_data_errors_name_the_array(minio: MinioServer, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from xarray_zarrmax.errors import RequestFailed

    original = ObstoreSink.put_async

    async def failing(self: Any, key: str, data: bytes, mode: Any = None) -> None:
        if key.startswith("temp/c/"):
            raise RequestFailed(f"PUT {key!r} on {self.label} failed: simulated", 500)
        await original(self, key, data, mode)

    monkeypatch.setattr(ObstoreSink, "put_async", failing)
    url = f"s3://{bucket}/fail{next(counter)}.zarr"
    with pytest.raises(RequestFailed) as info:
        xarray_zarrmax.to_zarr(sample(), url, encoding={"temp": SHARDED}, storage_options=minio.storage_options())
    texts = _all_text(info.value)
    assert "array 'temp'" in texts and "'temp/c/" in texts and f"127.0.0.1:{minio.port}" in texts
    assert minio.storage_options()["secret_access_key"] not in texts


def _all_text(err: BaseException) -> str:
    out, seen = [], set()
    todo: list[BaseException | None] = [err]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        out += [repr(e), str(e), *getattr(e, "__notes__", ())]
        todo += [e.__cause__, e.__context__]
    return "\n".join(out)


def test_refuses_stores_it_cannot_write_safely(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="local path, an s3:// URL"):
        xarray_zarrmax.to_zarr(sample(), {})
    with pytest.raises(ValueError, match="format 3 only"):
        xarray_zarrmax.to_zarr(sample(), tmp_path / "a.zarr", zarr_format=2)
