"""Bad input never yields wrong data: the error says what was expected, what was found, and where."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import xarray as xr
import zarr

from tests.support.corrupt import read_all, rewrite_index, shard_file, sharded_store
from xarray_zarrmax import CorruptDataError, MetadataError, StoreAccessError
from xarray_zarrmax.testing import SECRET_KEY


def test_missing_path_is_file_not_found(tmp_path):
    missing = tmp_path / "nope.zarr"
    with pytest.raises(FileNotFoundError, match="nope.zarr"):
        xr.open_dataset(missing, engine="zarrmax")


def test_directory_that_is_not_zarr(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(MetadataError, match=r"not a Zarr group.*no zarr.json, .zgroup or .zmetadata.*notes.txt"):
        xr.open_dataset(tmp_path, engine="zarrmax")


def test_empty_directory_says_empty(tmp_path):
    with pytest.raises(FileNotFoundError, match="empty or does not exist"):
        xr.open_dataset(tmp_path, engine="zarrmax")


def test_unsupported_zarr_format_in_metadata(tmp_path):
    (tmp_path / "zarr.json").write_text(json.dumps({"zarr_format": 4, "node_type": "group"}))
    with pytest.raises(MetadataError, match=r"unsupported zarr_format in 'zarr.json'.*expected 3, got 4"):
        xr.open_dataset(tmp_path, engine="zarrmax")


def test_unsupported_zarr_format_argument(tmp_path):
    path = sharded_store(tmp_path / "s.zarr")
    with pytest.raises(ValueError, match="unsupported zarr_format: expected 2, 3 or None. Got 5"):
        xr.open_dataset(path, engine="zarrmax", zarr_format=5)


def test_malformed_metadata_json(tmp_path):
    path = sharded_store(tmp_path / "s.zarr")
    with open(os.path.join(path, "v", "zarr.json"), "w") as f:
        f.write("{not json")
    with pytest.raises(MetadataError, match=r"malformed JSON in 'v/zarr.json'"):
        xr.open_dataset(path, engine="zarrmax")


def test_truncated_shard_object(tmp_path):
    path = sharded_store(tmp_path / "s.zarr")
    blob = open(shard_file(path), "rb").read()
    open(shard_file(path), "wb").write(blob[: len(blob) // 2])
    with pytest.raises(CorruptDataError, match=r"array 'v', key 'v/c/0'.*truncated or corrupt"):
        read_all(path)


def test_shard_smaller_than_its_index(tmp_path):
    path = sharded_store(tmp_path / "s.zarr")
    open(shard_file(path), "wb").write(b"\x00" * 10)
    with pytest.raises(CorruptDataError, match=r"key 'v/c/0'.*10 bytes, smaller than its 68-byte index"):
        read_all(path)


def test_shard_index_points_outside_the_object(tmp_path):
    path = sharded_store(tmp_path / "s.zarr")

    def past_the_end(entries):
        entries[2, 0] = 10_000  # offset far beyond the object

    rewrite_index(path, past_the_end)
    with pytest.raises(CorruptDataError, match=r"key 'v/c/0'.*chunk \(2,\) points to bytes \[10000, .*outside"):
        read_all(path)
    # the partial-read path (index fetched alone, then ranges) says the same
    with pytest.raises(CorruptDataError, match=r"key 'v/c/0'.*chunk \(2,\) points to bytes \[10000"):
        xr.open_dataset(path, engine="zarrmax")["v"][25:26].values


def test_crc32c_mismatch_names_array_shard_and_chunk(tmp_path):
    path = sharded_store(tmp_path / "s.zarr")
    blob = bytearray(open(shard_file(path), "rb").read())
    n = 4 * 16 + 4
    entries = np.frombuffer(bytes(blob[-n:-4]), dtype="<u8").reshape(4, 2)
    offset = int(entries[1, 0])
    blob[offset + 2] ^= 0xFF  # flip bits inside chunk 1's compressed bytes
    open(shard_file(path), "wb").write(bytes(blob))
    with pytest.raises(CorruptDataError, match=r"array 'v', key 'v/c/0', chunk \(1,\): crc32c checksum mismatch"):
        read_all(path)
    # and zarr-python agrees the data is bad (we never return what it would refuse)
    with pytest.raises(ValueError, match="checksum"):
        zarr.open_array(path, path="v")[:]


def test_missing_bucket_is_file_not_found(minio):
    with pytest.raises(FileNotFoundError, match="no-such-bucket"):
        xr.open_dataset("s3://no-such-bucket/data.zarr", engine="zarrmax",
                        storage_options=minio.storage_options())


def test_missing_prefix_in_bucket_is_file_not_found(minio, bucket):
    with pytest.raises(FileNotFoundError, match="nothing-here.zarr"):
        xr.open_dataset(f"s3://{bucket}/nothing-here.zarr", engine="zarrmax",
                        storage_options=minio.storage_options())


def test_wrong_credentials_name_endpoint_never_secret(minio, bucket):
    store = minio.obstore(bucket, "creds.zarr")
    sharded_store_on = zarr.open_group(zarr.storage.ObjectStore(store), mode="w", zarr_format=3)
    sharded_store_on.create_array("v", shape=(4,), dtype="i4", dimension_names=["x"])[:] = 1
    options = {**minio.storage_options(), "secret_access_key": "definitely-wrong-" + SECRET_KEY}
    with pytest.raises(StoreAccessError) as info:
        xr.open_dataset(f"s3://{bucket}/creds.zarr", engine="zarrmax", storage_options=options)
    text = str(info.value) + repr(info.value)
    assert minio.endpoint in text
    assert "credentials" in text
    assert SECRET_KEY not in text and "definitely-wrong" not in text


def test_source_repr_hides_secrets(minio, bucket):
    from xarray_zarrmax.storage import resolve_source

    source = resolve_source(f"s3://{bucket}/x.zarr", minio.storage_options())
    assert SECRET_KEY not in repr(source) and SECRET_KEY not in source.label
    assert bucket in source.label and minio.endpoint in source.label


def test_unknown_input_type():
    with pytest.raises(TypeError, match="expected a local path or URL .*Got builtins.int"):
        xr.open_dataset(42, engine="zarrmax")


def test_unknown_url_protocol():
    """Any URL but s3:// and file:// goes to fsspec, as with engine="zarr": an unknown protocol is its ValueError."""
    with pytest.raises(ValueError, match="Protocol not known: nosuchprotocol"):
        xr.open_dataset("nosuchprotocol://bucket/data.zarr", engine="zarrmax")
