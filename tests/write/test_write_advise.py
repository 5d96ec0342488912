"""``to_zarr(..., encoding="advise", patterns=...)`` and the ``ds.zarrmax`` accessor: the advisor's best layout
is what lands in the store, every write reads back identically with both engines, and requests the advisor
cannot serve are refused before anything is probed or written."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import xarray_zarrmax
from xarray_zarrmax.advise.model import Costs, Layout

TIME_FIRST = Layout((24, 2, 2), (48, 10, 10))  # whole time series in one object
MAP_FIRST = Layout((1, 20, 25), (4, 20, 50))  # whole maps in one object
CANDIDATES = [TIME_FIRST, MAP_FIRST]
#: costly requests: the layout needing fewer requests wins each pattern (at no per-request cost, a whole-shard
#: GET of MAP_FIRST's tiny shards reads a time series in fewer round trips than TIME_FIRST's index and range)
COSTS = Costs(ratio=1.0, request_s=0.01)


def field(dask_chunks: dict[str, int] | None = None) -> xr.Dataset:
    """A (time, lat, lon) field, a variable of other dimensions, and coordinates."""
    rng = np.random.default_rng(1)
    ds = xr.Dataset(
        {"t2m": (("time", "lat", "lon"), rng.normal(280, 5, (48, 20, 50)).astype("f4"), {"units": "K"}),
         "u10": (("time", "lat", "lon"), rng.normal(0, 3, (48, 20, 50)).astype("f4")),
         "station": (("time",), np.arange(48, dtype="i4"))},
        coords={"time": pd.date_range("2021-01-01", periods=48, freq="h"), "lat": np.linspace(-90, 90, 20),
                "lon": np.linspace(0, 357.5, 50)},
    )
    return ds.chunk(dask_chunks) if dask_chunks else ds


def stored_layout(path: Path, name: str) -> tuple[list[int], list[int] | None]:
    """(inner chunks, shards or None) of an array as its zarr.json says."""
    meta = json.loads((path / name / "zarr.json").read_text())
    grid = meta["chunk_grid"]["configuration"]["chunk_shape"]
    for codec in meta["codecs"]:
        if codec["name"] == "sharding_indexed":
            return codec["configuration"]["chunk_shape"], grid
    return grid, None


def check_reads(path: Path, expected: xr.Dataset) -> None:
    for engine in ("zarr", "zarrmax"):
        with xr.open_dataset(path, engine=engine) as got:
            xr.testing.assert_identical(got.load(), expected.load())


@pytest.mark.parametrize(("patterns", "layout"), [({"timeseries": 1.0}, TIME_FIRST), ({"map": 1.0}, MAP_FIRST)])
def test_the_advised_layout_is_the_one_written(tmp_path: Path, patterns: dict[str, float], layout: Layout,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # dask chunks of 7 time steps split every candidate's shards: the write must align them itself
    ds = field({"time": 7, "lat": 20, "lon": 50})
    out = tmp_path / "out.zarr"
    xarray_zarrmax.to_zarr(ds, str(out), encoding="advise", patterns=patterns,
                           advise_options={"costs": COSTS, "layouts": CANDIDATES})
    for name in ("t2m", "u10"):  # the advised variable, and the one of its dimensions and shape
        assert stored_layout(out, name) == (list(layout.chunks), list(layout.shards or ()))
    assert stored_layout(out, "station")[1] is None  # other dimensions: zarr's default layout, unsharded
    check_reads(out, ds)
    err = capsys.readouterr().err
    assert f"zarrmax: writing t2m, u10 in chunks {layout} (advised for {patterns}; the costs given)" in err


def test_the_store_is_probed_beside_the_target_and_cleaned_up(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    ds = field()
    out = tmp_path / "out.zarr"
    xarray_zarrmax.to_zarr(ds, out, encoding="advise", patterns={"timeseries": 0.5, "map": 0.5},
                           advise_options={"layouts": CANDIDATES})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr"]  # the probe's objects are gone
    err = capsys.readouterr().err
    assert "probing [" in err  # the progress bar ran
    assert f"costs probed at {tmp_path}" in err
    assert stored_layout(out, "t2m") in [(list(c.chunks), list(c.shards or ())) for c in CANDIDATES]
    check_reads(out, ds)


def test_a_store_object_is_not_probed_unless_told_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds = field()
    store = zarr.storage.LocalStore(tmp_path / "out.zarr")
    xarray_zarrmax.to_zarr(ds, store, encoding="advise", patterns={"map": 1.0},
                           advise_options={"layouts": CANDIDATES})
    err = capsys.readouterr().err
    assert "probing [" not in err
    assert "store not probed: a remote object store's costs assumed" in err
    check_reads(tmp_path / "out.zarr", ds)


def test_the_accessor_writes_and_advises_as_the_functions_do(tmp_path: Path) -> None:
    ds = field({"time": 24})
    ds.zarrmax.to_zarr(tmp_path / "a.zarr", encoding={"t2m": {"chunks": (12, 10, 25), "shards": (24, 20, 50)}})
    xarray_zarrmax.to_zarr(ds, tmp_path / "b.zarr", encoding={"t2m": {"chunks": (12, 10, 25), "shards": (24, 20, 50)}})
    assert stored_layout(tmp_path / "a.zarr", "t2m") == ([12, 10, 25], [24, 20, 50])
    for name in ("t2m", "u10", "station", "time"):
        a = (tmp_path / "a.zarr" / name / "zarr.json").read_text()
        assert a == (tmp_path / "b.zarr" / name / "zarr.json").read_text()
    check_reads(tmp_path / "a.zarr", ds)
    report = ds.zarrmax.advise({"map": 1.0}, costs=COSTS, layouts=CANDIDATES)
    assert report.best.layout == MAP_FIRST
    assert "Parameters" in (ds.zarrmax.to_zarr.__doc__ or "")  # help() shows to_zarr's own documentation


@pytest.mark.parametrize("name", ["t2m", None])
def test_the_dataarray_accessor_writes_and_advises_as_the_functions_do(tmp_path: Path, name: str | None) -> None:
    array = field({"time": 24})["t2m"].rename(name)
    encoding = {"chunks": (12, 10, 25), "shards": (24, 20, 50)}
    array.zarrmax.to_zarr(tmp_path / "a.zarr", encoding={name or "__xarray_dataarray_variable__": encoding})
    xarray_zarrmax.to_zarr(array, tmp_path / "b.zarr",
                           encoding={name or "__xarray_dataarray_variable__": encoding})
    for path in sorted((tmp_path / "b.zarr").rglob("zarr.json")):
        assert (tmp_path / "a.zarr" / path.relative_to(tmp_path / "b.zarr")).read_text() == path.read_text()
    expected = xr.open_dataarray(tmp_path / "b.zarr", engine="zarr").load()
    with xr.open_dataarray(tmp_path / "a.zarr", engine="zarrmax") as got:
        xr.testing.assert_identical(got.load(), expected)
    report = array.zarrmax.advise({"map": 1.0}, costs=COSTS, layouts=CANDIDATES)
    assert report.best.layout == MAP_FIRST
    assert report.variable == (name or "__xarray_dataarray_variable__")
    with pytest.raises(TypeError, match="advises on the DataArray itself: it takes no variable="):
        array.zarrmax.advise({"map": 1.0}, variable="t2m")
    assert "Parameters" in (array.zarrmax.to_zarr.__doc__ or "")


@pytest.mark.parametrize(("name", "coords", "variable"), [
    ("lat", {"lat": ("lat", np.arange(20.0))}, "__xarray_dataarray_variable__"),  # named as its dimension
    ("elev", {"elev": ("lat", np.arange(20.0))}, "__xarray_dataarray_variable__"),  # named as a coordinate
    (None, {"values": ("lat", np.arange(20.0))}, "__xarray_dataarray_variable__"),  # a coordinate "values"
    (7, {}, "7"),  # not a string
])
def test_the_dataarray_accessor_advises_on_every_dataarray_it_writes(name: Any, coords: dict[str, Any],
                                                                     variable: str) -> None:
    """Found by a review: named like one of its coordinates, ``da.zarrmax.advise`` raised xarray's "same name as
    one of its coordinates" where ``da.zarrmax.to_zarr(..., encoding="advise")`` wrote it."""
    array = xr.DataArray(np.zeros((20, 50), dtype="f4"), dims=("lat", "lon"), name=name, coords=coords)
    report = array.zarrmax.advise({"map": 1.0}, costs=COSTS, layouts=[Layout((20, 50), (20, 50))])
    assert report.variable == variable and report.shape == (20, 50)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"encoding": "advise"}, ValueError, r"encoding='advise' needs patterns=.*Got patterns=None"),
    ({"encoding": "advise", "patterns": {}}, ValueError, r"needs patterns=.*Got patterns=\{\}"),
    ({"encoding": "advice", "patterns": {"map": 1.0}}, ValueError,
     r"expected encoding as a mapping of variable names, or 'advise'. Got 'advice'"),
    ({"patterns": {"map": 1.0}}, ValueError, r"patterns= and advise_options= apply to encoding='advise' only"),
    ({"encoding": "advise", "patterns": {"map": 1.0}, "advise_options": {"budget": 5}}, TypeError,
     r"advise_options: unknown option\(s\) \['budget'\]; expected some of \["),
    ({"encoding": "advise", "patterns": {"heatmap": 1.0}}, ValueError, r"heatmap"),
    ({"encoding": "advise", "patterns": {"map": 1.0}, "advise_options": {"variable": "sst"}}, ValueError,
     r"no data variable 'sst'"),
])
def test_requests_the_advisor_cannot_serve_write_nothing(tmp_path: Path, kwargs: dict[str, Any],
                                                         error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        xarray_zarrmax.to_zarr(field(), tmp_path / "out.zarr", **kwargs)
    assert list(tmp_path.iterdir()) == []  # nothing probed, nothing written


@pytest.mark.parametrize(("kwargs", "named"), [({"append_dim": "time"}, "append_dim='time'"),
                                               ({"region": "auto"}, "region='auto'"),
                                               ({"mode": "r+"}, "mode='r+'")])
def test_advice_is_refused_for_arrays_that_exist(tmp_path: Path, kwargs: dict[str, Any], named: str) -> None:
    out = tmp_path / "out.zarr"
    xarray_zarrmax.to_zarr(field(), out)
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    refused = f"encoding='advise' chooses the layout of new arrays; with {named} "
    with pytest.raises(ValueError, match=re.escape(refused)):
        xarray_zarrmax.to_zarr(field(), out, encoding="advise", patterns={"map": 1.0}, **kwargs)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before


def test_an_s3_target_is_probed_beside_it_with_the_write_credentials(minio: Any, bucket: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from zarr.storage import ObjectStore

    prefix = f"advise-{np.random.default_rng().integers(1 << 30)}"
    url = f"s3://{bucket}/{prefix}/out.zarr"
    ds = field({"time": 24})
    xarray_zarrmax.to_zarr(ds, url, encoding="advise", patterns={"timeseries": 1.0},
                           advise_options={"layouts": CANDIDATES}, storage_options=minio.storage_options())
    err = capsys.readouterr().err
    assert f"costs probed at s3://{bucket}/{prefix}" in err
    listed = ObjectStore(minio.obstore(bucket, prefix), read_only=True)
    keys = _list(listed)
    assert keys and all(k.startswith("out.zarr/") for k in keys)  # nothing of the probe is left
    oracle = ObjectStore(minio.obstore(bucket, f"{prefix}/out.zarr"), read_only=True)
    with xr.open_dataset(oracle, engine="zarr") as by_zarr, \
            xr.open_dataset(url, engine="zarrmax", storage_options=minio.storage_options()) as by_zarrmax:
        xr.testing.assert_identical(by_zarr.load(), ds.load())
        xr.testing.assert_identical(by_zarrmax.load(), ds.load())


def _list(store: Any) -> list[str]:
    import asyncio

    async def collect() -> list[str]:
        return [k async for k in store.list()]

    return asyncio.run(collect())


# -- from an adversarial review ------------------------------------------------------------------------------


def test_a_failed_probe_shows_no_secret_and_says_where_it_probed(minio: Any, bucket: str) -> None:
    # the write's own credentials are good; the probe's (elsewhere) are not, and its endpoint holds a password
    host = minio.endpoint.removeprefix("http://")
    bad = {"endpoint": f"http://userSECRETname:hunter2pass@{host}", "access_key_id": "AKIDEXAMPLE",
           "secret_access_key": "WRONGSECRETvalue123", "region": "us-east-1"}
    url = f"s3://{bucket}/leak/out.zarr"
    with pytest.raises(Exception) as caught:
        xarray_zarrmax.to_zarr(field(), url, encoding="advise", patterns={"map": 1.0},
                               storage_options=minio.storage_options(),
                               advise_options={"store": f"s3://{bucket}/scratch", "storage_options": bad})
    err = caught.value
    texts = []
    seen: BaseException | None = err
    while seen is not None:
        texts += [str(seen), *getattr(seen, "__notes__", ())]
        seen = seen.__cause__ or seen.__context__
    for secret in ("hunter2pass", "WRONGSECRETvalue123"):
        assert not any(secret in t for t in texts), texts
    assert f"while probing the store at s3://{bucket}/scratch" in "\n".join(getattr(err, "__notes__", ()))
    assert "DeleteObjects" not in str(err) and "delete" not in str(err).lower()  # the first failure, the PUT's


def test_a_probe_that_cannot_write_beside_the_target_says_how_to_probe_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from xarray_zarrmax.advise import probe as advise_probe

    def read_only(self: Any, name: str, data: bytes) -> None:
        raise OSError(30, "Read-only file system", str(self.root / name))

    monkeypatch.setattr(advise_probe._Objects, "put", read_only)  # a writable target in a read-only folder
    with pytest.raises(OSError) as caught:
        xarray_zarrmax.to_zarr(field(), tmp_path / "out.zarr", encoding="advise", patterns={"map": 1.0},
                               advise_options={"layouts": CANDIDATES})
    notes = "\n".join(getattr(caught.value, "__notes__", ()))
    assert f"while probing the store at {tmp_path}" in notes
    assert "{'store': None} assumes a remote object store's costs" in notes
    assert not any(p.name.startswith("zarrmax-probe-") for p in tmp_path.iterdir())


@pytest.mark.parametrize(("mode", "error", "match"), [
    ("a", ValueError, r"encoding='advise' chooses the layout of new arrays; \['t2m', 'u10'\] exist in .* already"),
    ("w-", FileExistsError, None),
])
def test_arrays_that_exist_are_refused_before_the_probe(tmp_path: Path, mode: str, error: type[Exception],
                                                        match: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.zarr"
    xarray_zarrmax.to_zarr(field(), out)
    capsys.readouterr()
    with pytest.raises(error, match=match):
        xarray_zarrmax.to_zarr(field(), out, mode=mode, encoding="advise", patterns={"map": 1.0})
    assert "probing [" not in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr"]


def test_mode_a_may_add_advised_variables_next_to_existing_ones(tmp_path: Path) -> None:
    out = tmp_path / "out.zarr"
    ds = field()
    xarray_zarrmax.to_zarr(ds[["station"]], out)
    xarray_zarrmax.to_zarr(ds[["t2m", "u10"]], out, mode="a", encoding="advise", patterns={"map": 1.0},
                           advise_options={"costs": COSTS, "layouts": CANDIDATES})
    assert stored_layout(out, "t2m") == (list(MAP_FIRST.chunks), list(MAP_FIRST.shards or ()))
    check_reads(out, ds)


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"budget_mb": "5"}, ValueError, r"expected budget_mb as a positive number of MB. Got '5'"),
    ({"budget_mb": -1}, ValueError, r"expected budget_mb as a positive number of MB. Got -1"),
    ({"max_objects": 0}, ValueError, r"expected max_objects as a whole number >= 1. Got 0"),
    ({"layouts": []}, ValueError, r"expected at least one layout in layouts="),
    ({"layouts": [Layout((4,))]}, ValueError, r"expected layouts of 3 positive chunk lengths"),
    ({"layouts": [Layout((4, 5, 5), (6, 5, 5))]}, ValueError, r"shards that are whole multiples of the chunks"),
    ({"batch": {"windows": 4}}, TypeError, r"expected batch as xarray_zarrmax.advise.Batch"),
])
def test_options_the_search_cannot_use_are_refused_before_the_probe(tmp_path: Path, options: dict[str, Any],
                                                                     error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        xarray_zarrmax.to_zarr(field(), tmp_path / "out.zarr", encoding="advise", patterns={"map": 1.0},
                               advise_options=options)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("patterns", "accepted"), [({"map": True}, False), ({"map": np.float32(0.5)}, True)])
def test_weights_are_real_numbers_not_booleans(patterns: dict[str, Any], accepted: bool) -> None:
    from xarray_zarrmax.advise import parse_patterns

    if accepted:
        assert parse_patterns(patterns) == patterns
    else:
        with pytest.raises(ValueError, match="expected a positive weight for pattern 'map'. Got True"):
            parse_patterns(patterns)


def test_advise_options_must_be_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"expected advise_options as a mapping of advise\(\)'s keywords. Got 'budg"):
        xarray_zarrmax.to_zarr(field(), tmp_path / "out.zarr", encoding="advise", patterns={"map": 1.0},
                               advise_options="budget_mb")  # type: ignore[arg-type]


def test_the_layout_is_all_the_advice_changes_of_an_existing_encoding(tmp_path: Path) -> None:
    # packed as int16 with a scale factor: a plain write keeps the packing, and so must an advised one
    ds = field()
    ds["t2m"].encoding = {"dtype": "int16", "scale_factor": 0.01, "add_offset": 280.0, "_FillValue": -32768}
    xarray_zarrmax.to_zarr(ds, tmp_path / "advised.zarr", encoding="advise", patterns={"map": 1.0},
                           advise_options={"costs": COSTS, "layouts": CANDIDATES})
    assert ds["t2m"].encoding == {"dtype": "int16", "scale_factor": 0.01, "add_offset": 280.0, "_FillValue": -32768}
    plain = ds.copy()
    plain["t2m"].encoding = {**ds["t2m"].encoding, **MAP_FIRST.encoding()}
    plain["u10"].encoding = MAP_FIRST.encoding()
    xarray_zarrmax.to_zarr(plain, tmp_path / "plain.zarr")
    for name in ("t2m", "u10"):
        advised = json.loads((tmp_path / "advised.zarr" / name / "zarr.json").read_text())
        assert advised == json.loads((tmp_path / "plain.zarr" / name / "zarr.json").read_text())
    assert json.loads((tmp_path / "advised.zarr" / "t2m" / "zarr.json").read_text())["data_type"] == "int16"
    with xr.open_dataset(tmp_path / "plain.zarr", engine="zarr") as expected:
        check_reads(tmp_path / "advised.zarr", expected.load())


def test_the_advisor_lays_out_the_largest_variable_it_can(tmp_path: Path) -> None:
    ds = field()
    ds["names"] = (("time", "lat", "lon"), np.full((48, 20, 50), "a long string value", dtype=object))
    xarray_zarrmax.to_zarr(ds, tmp_path / "out.zarr", encoding="advise", patterns={"map": 1.0},
                           advise_options={"costs": COSTS, "layouts": CANDIDATES})
    assert stored_layout(tmp_path / "out.zarr", "t2m")[1] == list(MAP_FIRST.shards or ())
    check_reads(tmp_path / "out.zarr", ds)


@pytest.mark.parametrize(("ds", "match"), [
    (xr.Dataset({"flag": ((), np.int8(3))}), r"expected a data variable with dimensions.*'flag': it has no dimension"),
    (xr.Dataset({"v": (("t", "x"), np.zeros((0, 4)))}), r"'v': it is empty \(shape \(0, 4\)\)"),
])
def test_nothing_to_lay_out_is_a_clear_error(tmp_path: Path, ds: xr.Dataset, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        xarray_zarrmax.to_zarr(ds, tmp_path / "out.zarr", encoding="advise", patterns={"map": 1.0})
    assert list(tmp_path.iterdir()) == []


def test_advised_arrays_in_a_group_are_aligned_to_their_shards(tmp_path: Path) -> None:
    ds = field({"time": 7})  # splits every candidate's shards
    xarray_zarrmax.to_zarr(ds, tmp_path / "out.zarr", group="era5/surface", encoding="advise",
                           patterns={"timeseries": 1.0}, advise_options={"costs": COSTS, "layouts": CANDIDATES})
    assert stored_layout(tmp_path / "out.zarr" / "era5" / "surface", "t2m")[1] == list(TIME_FIRST.shards or ())
    for engine in ("zarr", "zarrmax"):
        with xr.open_dataset(tmp_path / "out.zarr", engine=engine, group="era5/surface") as got:
            xr.testing.assert_identical(got.load(), ds.load())
