"""to_zarr round trips: what it writes to a local directory, an s3:// URL or an obstore store reads back
identically with both engines, metadata first and one PUT per shard; modes "w", "w-" and "a", stores that also
hold a Zarr v2 group, DataArrays, compute=False."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import xarray_zarrmax
from tests.support.compare import check_reads
from tests.support.datasets import NT, SHARDED, sample
from tests.support.targets import write
from xarray_zarrmax import request_counts


@pytest.mark.parametrize("chunked", [False, True], ids=["numpy", "dask"])
def test_roundtrip_both_engines(where: dict[str, Any], chunked: bool) -> None:
    ds = sample()
    if chunked:
        ds = ds.chunk({"time": 8})
    write(where, ds, encoding={"temp": SHARDED})
    check_reads(where["read"], sample(), **where["kwargs"])


def test_metadata_in_one_batch_then_one_put_per_shard(where: dict[str, Any]) -> None:
    ds = sample().chunk({"time": 8})
    with request_counts() as counts:
        write(where, ds, encoding={"temp": SHARDED}, consolidated=False)
    puts = [key for _, kind, key in counts.keys if kind == "put"]
    shards = [k for k in puts if k.startswith("temp/c/")]
    assert sorted(shards) == [f"temp/c/{t}/0/0" for t in range(3)]  # 3 shards, one PUT each
    documents = ["zarr.json"] + [f"{a}/zarr.json" for a in ("temp", "count", "flag", "time", "y", "x", "station")]
    assert sorted(k for k in puts if k.endswith("zarr.json")) == sorted(documents)
    assert all(k.endswith("zarr.json") for k in puts[:len(documents)])  # all metadata first, then data
    check_reads(where["read"], sample(), **where["kwargs"])


@pytest.mark.parametrize("name", [None, "temp", "time"])
def test_a_dataarray_is_written_as_dataarray_to_zarr_writes_it(tmp_path: Path, name: str | None) -> None:
    """Unnamed, named, and named like one of its coordinates: xr.open_dataarray reads back what it reads from
    DataArray.to_zarr's store, with both engines."""
    array = sample()["temp"].rename(name)
    xarray_zarrmax.to_zarr(array, tmp_path / "a.zarr")
    array.to_zarr(tmp_path / "b.zarr", zarr_format=3, consolidated=True)
    expected = xr.open_dataarray(tmp_path / "b.zarr", engine="zarr").load()
    assert expected.name == name
    for engine in ("zarr", "zarrmax"):
        with xr.open_dataarray(tmp_path / "a.zarr", engine=engine) as got:
            xr.testing.assert_identical(got.load(), expected)
    with pytest.raises(TypeError, match="writes an xarray Dataset or DataArray. Got ndarray"):
        xarray_zarrmax.to_zarr(np.zeros(3), tmp_path / "c.zarr")


def test_zarr_format_none_is_format_3_and_2_is_refused(tmp_path: Path) -> None:
    xarray_zarrmax.to_zarr(sample(), tmp_path / "a.zarr", zarr_format=None)
    assert json.loads((tmp_path / "a.zarr/zarr.json").read_text())["zarr_format"] == 3
    with pytest.raises(ValueError, match="Zarr format 3 only. Got zarr_format=2"):
        xarray_zarrmax.to_zarr(sample(), tmp_path / "b.zarr", zarr_format=2)


@pytest.mark.parametrize("how", ["append", "group below"])
def test_a_store_in_both_formats_is_written_as_v3(tmp_path: Path, how: str) -> None:
    """A v3 store that also carries a v2 .zgroup (written for old readers) is v3 to every reader: writing into
    it hides nothing, and xarray writes there (found by a review: refused as a v2 store)."""
    target = tmp_path / "both.zarr"
    old = xr.Dataset({"a": (("x",), np.arange(4.0))})
    xarray_zarrmax.to_zarr(old, target, consolidated=False)
    (target / ".zgroup").write_text('{"zarr_format": 2}')
    if how == "append":
        xarray_zarrmax.to_zarr(old, target, append_dim="x", consolidated=False)
        check_reads(target, xr.concat([old, old], dim="x"), consolidated=False)
    else:
        xarray_zarrmax.to_zarr(old * 2, target, group="sub", mode="w", consolidated=False)
        check_reads(target, old * 2, group="sub", consolidated=False)


def test_mode_w_replaces_a_zarr_v2_store(tmp_path: Path) -> None:
    target = tmp_path / "v2.zarr"
    xr.Dataset({"a": (("x",), np.arange(8.0))}).to_zarr(target, zarr_format=2)
    new = xr.Dataset({"c": (("y",), np.ones(3))})
    xarray_zarrmax.to_zarr(new, target, mode="w")
    assert not (target / ".zgroup").exists() and not (target / "a").exists()
    check_reads(target, new)


def test_mode_w_replaces_everything(where: dict[str, Any]) -> None:
    write(where, sample(), encoding={"temp": SHARDED})
    other = xr.Dataset({"other": (("z",), np.arange(3.0))})
    write(where, other, mode="w")
    check_reads(where["read"], other, **where["kwargs"])


def test_mode_w_minus_refuses_an_existing_store(tmp_path: Path) -> None:
    xarray_zarrmax.to_zarr(sample(), tmp_path / "a.zarr")
    with pytest.raises(FileExistsError) as info:
        xarray_zarrmax.to_zarr(sample(), tmp_path / "a.zarr")
    assert any(str(tmp_path / "a.zarr") in note for note in info.value.__notes__)


def test_compute_false_writes_metadata_now_data_later(tmp_path: Path) -> None:
    """As Dataset.to_zarr: metadata and numpy-backed variables now, dask arrays when computed."""
    ds = sample().chunk({"time": 8})
    ds["y"] = ds["y"].compute()
    delayed = xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED}, compute=False)
    assert (tmp_path / "a.zarr/temp/zarr.json").exists()
    assert not (tmp_path / "a.zarr/temp/c").exists()
    assert (tmp_path / "a.zarr/y/c/0").exists()  # numpy-backed: written now
    assert delayed.compute() > 0
    check_reads(tmp_path / "a.zarr", sample())


@pytest.mark.parametrize("wrapped", [False, True], ids=["obstore LocalStore", "zarr ObjectStore over it"])
def test_obstore_local_store_takes_partial_shard_writes(tmp_path: Path, wrapped: bool) -> None:
    """object_store's local file system has no conditional PUT, which a merge of a partly written shard needs
    ("PutMode::Update not yet implemented"): an obstore LocalStore target is written as the directory it is,
    region and append merges included, and matches what Dataset.to_zarr writes there."""
    from obstore.store import LocalStore
    from zarr.storage import ObjectStore

    ds = sample().chunk({"time": 8})
    region = sample(4, t0=5).drop_vars(["y", "x", "station", "flag"])
    stores = []
    for name in ("zarr", "zarrmax"):
        store: Any = LocalStore(str(tmp_path / f"{name}.zarr"), mkdir=True)
        stores.append(store)
        target = ObjectStore(store) if wrapped or name == "zarr" else store
        if name == "zarr":
            ds.to_zarr(target, encoding={"temp": SHARDED}, consolidated=False, zarr_format=3)
            region.to_zarr(target, region={"time": slice(5, 9)}, consolidated=False)
            sample(6, t0=NT).to_zarr(target, append_dim="time", consolidated=False)
        else:
            xarray_zarrmax.to_zarr(ds, target, encoding={"temp": SHARDED}, consolidated=False)
            xarray_zarrmax.to_zarr(region, target, region={"time": slice(5, 9)}, consolidated=False)
            xarray_zarrmax.to_zarr(sample(6, t0=NT), target, append_dim="time", consolidated=False)
    expected = xr.concat([sample(), sample(6, t0=NT)], dim="time", data_vars="minimal", coords="minimal",
                         compat="override")
    expected["temp"][5:9] = region["temp"].values
    expected["count"][5:9] = region["count"].values
    for root in ("zarr.zarr", "zarrmax.zarr"):
        check_reads(str(tmp_path / root), expected)
    theirs, ours = ((tmp_path / f"{n}.zarr/temp/c") for n in ("zarr", "zarrmax"))
    shards = sorted(str(p.relative_to(ours)) for p in ours.rglob("*") if p.is_file())
    assert shards == sorted(str(p.relative_to(theirs)) for p in theirs.rglob("*") if p.is_file())
    assert all((ours / k).read_bytes() == (theirs / k).read_bytes() for k in shards)
