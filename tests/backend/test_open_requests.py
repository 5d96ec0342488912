"""Open latency is a request budget: tests assert the exact counts on a 277-array group."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr

from xarray_zarrmax import request_counts
from xarray_zarrmax.testing import write_many_variable_group

N_VARS = 273  # + 4 coordinates = 277 arrays, as ERA5


@pytest.fixture(scope="module", params=["local", "minio"])
def era5_stores(request, tmp_path_factory):
    """(unconsolidated, consolidated) targets and open kwargs."""
    if request.param == "local":
        root = tmp_path_factory.mktemp("era5")
        plain, cons = str(root / "plain.zarr"), str(root / "cons.zarr")
        write_many_variable_group(plain, N_VARS)
        write_many_variable_group(cons, N_VARS, consolidated=True)
        return plain, cons, {}
    minio, bucket = request.getfixturevalue("minio"), request.getfixturevalue("bucket")
    for prefix, consolidated in (("era5-plain.zarr", False), ("era5-cons.zarr", True)):
        write_many_variable_group(zarr.storage.ObjectStore(minio.obstore(bucket, prefix)), N_VARS,
                                  consolidated=consolidated)
    kw = {"storage_options": minio.storage_options()}
    return f"s3://{bucket}/era5-plain.zarr", f"s3://{bucket}/era5-cons.zarr", kw


def test_consolidated_open_is_one_metadata_get_plus_coordinates(era5_stores):
    _, cons, kw = era5_stores
    with request_counts() as counts:
        ds = xr.open_dataset(cons, engine="zarrmax", chunks={}, **kw)
    assert len(ds.data_vars) == N_VARS
    # 1 GET of zarr.json (consolidated) + 4 coordinate arrays of one chunk each; nothing listed
    assert counts.total("get") == 1 + 4, counts.keys
    assert counts.total("list") == 0
    metadata_keys = [k for _, kind, k in counts.keys if k.endswith("zarr.json")]
    assert metadata_keys == ["zarr.json"]


def test_unconsolidated_open_is_root_list_and_member_gets(era5_stores):
    plain, _, kw = era5_stores
    with request_counts() as counts:
        ds = xr.open_dataset(plain, engine="zarrmax", chunks={}, **kw)
    assert len(ds.data_vars) == N_VARS
    assert counts.total("list") == 1
    # root + 277 members + 4 coordinate chunks; no v2 probing once the v3 root is found
    assert counts.total("get") == 1 + 277 + 4
    assert not [k for _, _, k in counts.keys if ".z" in k]


def test_variables_fetch_no_metadata_of_the_others(era5_stores):
    plain, _, kw = era5_stores
    with request_counts() as counts:
        ds = xr.open_dataset(plain, engine="zarrmax", chunks={}, variables=["var007"], **kw)
    assert list(ds.data_vars) == ["var007"]
    assert set(ds.coords) == {"time", "latitude", "longitude"}
    metadata = sorted(k for _, _, k in counts.keys if k.endswith("zarr.json"))
    assert metadata == ["latitude/zarr.json", "longitude/zarr.json", "time/zarr.json", "var007/zarr.json",
                        "zarr.json"]
    assert counts.total("get") == 5 + 3  # metadata + 3 coordinate chunks


def test_coordinates_are_decoded_like_engine_zarr(era5_stores):
    plain, cons, kw = era5_stores
    ours = xr.open_dataset(cons, engine="zarrmax", chunks={}, **kw)
    oracle_store = cons if not kw else zarr.storage.ObjectStore(_obstore_for(cons, kw))
    oracle = xr.open_dataset(oracle_store, engine="zarr", chunks={}, consolidated=True)
    xr.testing.assert_identical(ours.coords.to_dataset(), oracle.coords.to_dataset())
    assert ours.time.dtype == np.dtype("datetime64[ns]")


def _obstore_for(url, kw):
    from xarray_zarrmax.storage import resolve_source

    return resolve_source(url, kw["storage_options"]).store
