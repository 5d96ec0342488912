"""Region writes and appends: partial shards merged, each document of the target read once, new edge objects
created without a read, and writes computed after the array changed under them."""

from __future__ import annotations

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
from xarray_zarrmax.storage import LocalSink


def test_region_write_merges_partial_shards(where: dict[str, Any]) -> None:
    ds = sample()
    write(where, ds, encoding={"temp": SHARDED})
    new = sample(nt=7, t0=100).isel(time=slice(0, 7))
    part = new[["temp"]].drop_vars(["time", "y", "x", "station"])
    write(where, part, region={"time": slice(5, 12)})  # ends of shard 0 and start of shard 1
    expected = ds.copy(deep=True)
    expected["temp"][5:12] = new["temp"].values
    check_reads(where["read"], expected, **where["kwargs"])


def test_region_auto(tmp_path: Path) -> None:
    ds = sample()
    xarray_zarrmax.to_zarr(ds, tmp_path / "a.zarr", encoding={"temp": SHARDED})
    part = ds.isel(time=slice(3, 9))[["temp"]].drop_vars(["station"]) * 2
    part["temp"].attrs = ds["temp"].attrs
    xarray_zarrmax.to_zarr(part, tmp_path / "a.zarr", region="auto", mode="r+")
    expected = ds.copy(deep=True)
    expected["temp"][3:9] = ds["temp"][3:9].values * 2
    check_reads(tmp_path / "a.zarr", expected)


def test_append_merges_the_last_partial_shard(where: dict[str, Any]) -> None:
    first = sample(nt=12)
    write(where, first.chunk({"time": 8}), encoding={"temp": SHARDED})
    second = sample(nt=9, t0=12)
    write(where, second.drop_vars(["flag", "y", "x", "station"]).chunk({"time": (4, 5)}), append_dim="time")
    expected = xr.concat([first, second], dim="time", data_vars="minimal", coords="minimal", compat="override")
    expected["flag"] = first["flag"]
    check_reads(where["read"], expected, **where["kwargs"])


def test_an_append_reads_each_document_of_the_target_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the target holds is read once per key while a write is prepared (xarray's writer reads an array's
    document twice, the write reads it again for the stored shape: each a round trip on S3), and the check for
    Zarr v2 documents goes with the first read of the group's."""
    from zarr.storage import WrapperStore

    path = tmp_path / "a.zarr"
    xarray_zarrmax.to_zarr(sample(), path, encoding={"temp": SHARDED}, consolidated=False)
    requests: list[tuple[str, str]] = []

    class Recording(WrapperStore):  # type: ignore[type-arg]
        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            requests.append(("get", key))
            return await self._store.get(key, prototype, byte_range)

        async def exists(self, key: str) -> bool:
            requests.append(("exists", key))
            return await self._store.exists(key)

    original = LocalSink.existing_store
    monkeypatch.setattr(LocalSink, "existing_store", lambda self: Recording(original(self)))
    more = sample(nt=4, t0=NT).drop_vars(["flag", "y", "x", "station"])
    xarray_zarrmax.to_zarr(more, path, append_dim="time", consolidated=False)
    gets = [key for kind, key in requests if kind == "get"]
    assert sorted(gets) == sorted(set(gets)) and "temp/zarr.json" in gets, requests
    assert requests[:3] == [("exists", ".zgroup"), ("exists", ".zarray"), ("get", "zarr.json")]
    expected = xr.concat([sample(), sample(nt=4, t0=NT)], dim="time", data_vars="minimal", coords="minimal",
                         compat="override")
    expected["flag"] = sample()["flag"]
    check_reads(path, expected)


GROWN = {"v": {"chunks": (4,), "shards": (8,)}}


def _grown_scenario(root: Path, tool: str, layout: dict[str, Any], first: str, region: slice) -> np.ndarray:
    """An array of 10 values; a write prepared with compute=False (a region write, or an append); the array
    then grows by 4 (a plain Dataset.to_zarr append); then the prepared write is computed."""
    import dask.array as da

    path = str(root / f"{tool}.zarr")
    xr.Dataset({"v": ("t", np.arange(10.0))}).to_zarr(path, encoding=layout, zarr_format=3)
    if first == "region":
        values = np.arange(100.0, 100.0 + region.stop - region.start)
        kwargs: dict[str, Any] = {"region": {"t": region}}
    else:
        values, kwargs = np.array([10.0, 11.0]), {"append_dim": "t"}
    update = xr.Dataset({"v": ("t", da.from_array(values, chunks=len(values)))})
    if tool == "zarr":
        delayed = update.to_zarr(path, compute=False, safe_chunks=False, zarr_format=3, **kwargs)
    else:
        delayed = xarray_zarrmax.to_zarr(update, path, compute=False, **kwargs)
    start = 10 if first == "region" else 12
    xr.Dataset({"v": ("t", np.arange(500.0, 504.0))}).to_zarr(path, append_dim="t")
    delayed.compute()
    got = xr.open_dataset(path, engine="zarr")["v"].values
    assert np.array_equal(got[start:start + 4], np.arange(500.0, 504.0)), got
    return got


@pytest.mark.parametrize("layout", [GROWN, {"v": {"chunks": (4,)}}], ids=["sharded", "unsharded"])
@pytest.mark.parametrize("first, region", [("region", slice(8, 10)), ("region", slice(9, 10)),
                                           ("region", slice(7, 10)), ("append", slice(0, 0))])
def test_a_write_computed_after_the_array_grew_keeps_what_was_appended(tmp_path: Path, layout: dict[str, Any],
                                                                      first: str, region: slice) -> None:
    """The objects at the edge of the array a write was prepared for may hold data past that edge by the time
    it is computed: they are merged, never replaced (nor their inner chunks past the old edge left out)."""
    got = _grown_scenario(tmp_path, "zarrmax", layout, first, region)
    if layout is GROWN:  # zarr-python's partial shard writes keep them too: the same store, value for value
        np.testing.assert_array_equal(got, _grown_scenario(tmp_path, "zarr", layout, first, region))


def test_a_new_array_written_with_compute_false_replaces_what_was_written_meanwhile(tmp_path: Path) -> None:
    """compute=False then a region write into the new array, then the first write computed: as with
    Dataset.to_zarr, the store holds what the first write wrote (its all-NaN shards delete the region's)."""
    import dask.array as da

    stores = {}
    for tool in ("zarr", "zarrmax"):
        path = stores[tool] = str(tmp_path / f"{tool}.zarr")
        template = xr.Dataset({"v": ("t", da.full(16, np.nan, chunks=8))})
        if tool == "zarr":
            delayed = template.to_zarr(path, compute=False, encoding=GROWN, zarr_format=3)
        else:
            delayed = xarray_zarrmax.to_zarr(template, path, compute=False, encoding=GROWN)
        xr.Dataset({"v": ("t", np.arange(3.0, 13.0))}).to_zarr(path, region={"t": slice(3, 13)})
        delayed.compute()
    for engine in ("zarr", "zarrmax"):
        got = xr.open_dataset(stores["zarrmax"], engine=engine)["v"].values
        np.testing.assert_array_equal(got, xr.open_dataset(stores["zarr"], engine="zarr")["v"].values)
        assert np.isnan(got).all()


def test_an_append_creates_its_new_edge_objects_without_reading_them(where: dict[str, Any]) -> None:
    """Objects wholly past the stored extent (an append's, and those cut by the edge of a dimension that does
    not grow) are created with one conditional PUT each on S3, not read first; an object the append shares
    with what is stored is read and merged."""
    on_s3 = where["target"].startswith("s3://")  # local reads of missing files are no round trips: not saved
    grid = xr.Dataset({"v": (("t", "y"), np.arange(4 * 37.0).reshape(4, 37)), "w": (("x",), np.arange(16.0))})
    write(where, grid, encoding={"v": {"chunks": (1, 64)}, "w": {"chunks": (4,), "shards": (8,)}})
    more = xr.Dataset({"v": (("t", "y"), -np.arange(3 * 37.0).reshape(3, 37))})
    with request_counts() as counts:
        write(where, more, append_dim="t")
    if on_s3:
        assert sorted((kind, key) for _, kind, key in counts.keys if "/c/" in key) == [
            ("put", f"v/c/{t}/0") for t in range(4, 7)]
    for appended, shared in ((np.array([16.0, 17.0, 18.0]), False), (np.array([19.0, 20.0]), True)):
        with request_counts() as counts:
            write(where, xr.Dataset({"w": (("x",), appended)}), append_dim="x")
        if on_s3:
            assert sorted((kind, key) for _, kind, key in counts.keys if "/c/" in key) == (
                [("get", "w/c/2")] * shared + [("put", "w/c/2")])
    expected = xr.Dataset({"v": xr.concat([grid["v"], more["v"]], dim="t"), "w": (("x",), np.arange(21.0))})
    check_reads(where["read"], expected, **where["kwargs"])


def test_a_prepared_append_whose_new_shard_was_created_meanwhile_merges_into_it(where: dict[str, Any]) -> None:
    """An append prepared with compute=False guesses its edge shard absent (it lay past the stored array);
    another append creates it before the first is computed: the first's create fails, it reads and merges,
    and both appends' values are kept."""
    import dask.array as da

    write(where, xr.Dataset({"w": (("x",), np.arange(8.0))}), encoding={"w": {"chunks": (4,), "shards": (8,)}})
    prepared = write(where, xr.Dataset({"w": (("x",), da.from_array(np.array([8.0, 9.0]), chunks=2))}),
                     append_dim="x", compute=False)
    write(where, xr.Dataset({"w": (("x",), np.arange(10.0, 14.0))}), append_dim="x")
    with request_counts() as counts:
        prepared.compute()
    data = sorted((kind, key) for _, kind, key in counts.keys if "/c/" in key)
    if where["target"].startswith("s3://"):
        assert data == [("get", "w/c/1"), ("put", "w/c/1"), ("put", "w/c/1")]  # a failed create, a merge
    check_reads(where["read"], xr.Dataset({"w": (("x",), np.arange(14.0))}), **where["kwargs"])
