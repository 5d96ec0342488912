"""No secret in any error, repr, label or dask key; no key, whatever a caller or a store's metadata says, reads
outside the store."""

from __future__ import annotations

import json
import os
import pickle
import re
from datetime import timedelta

import fsspec
import numpy as np
import obstore.exceptions as oe
import pytest
import xarray as xr
import zarr
from fsspec.registry import _registry as _fsspec_registry
from obstore.store import HTTPStore, S3Store
from zarr.storage import LocalStore, MemoryStore

from xarray_zarrmax import StoreAccessError, request_counts
from xarray_zarrmax.core.loop import run_sync
from xarray_zarrmax.core.redact import redact, scrubbed, secrets_in
from xarray_zarrmax.storage import LocalSource, ObstoreSource, ZarrStoreSource, resolve_source
from xarray_zarrmax.testing import SECRET_KEY, free_port
from xarray_zarrmax.testing.storage import shown as everything_shown

PASSWORD = "hunter2-pw"




# -- redact ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("GET http://user:hunter2@127.0.0.1:9000/b/k failed", "GET http://***@127.0.0.1:9000/b/k failed"),
    ("https://u:p@ss@host/x", "https://***@host/x"),  # an unescaped "@" in the password: up to the last one
    ("https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F2024%2Fs3"
     "&X-Amz-Signature=0a1b2c&x-amz-security-token=FQoGZX#f",
     "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=***"
     "&X-Amz-Signature=***&x-amz-security-token=***#f"),
    ("https://acct.blob.core.windows.net/c/k?sv=2022&SIG=AbC%2Bd&se=2030 failed",
     "https://acct.blob.core.windows.net/c/k?sv=2022&SIG=***&se=2030 failed"),
    ("/k?AWSAccessKeyId=AKIA1&Signature=x%2By&Expires=1&token=t0k&access_token=ya29.a",
     "/k?AWSAccessKeyId=***&Signature=***&Expires=1&token=***&access_token=***"),
    ("Authorization: AWS4-HMAC-SHA256 Credential=AKIA/s3, Signature=beef\nnext line",
     "Authorization: ***\nnext line"),
    ('{"access_token": "ya29.abc", "token_type": "Bearer"}', '{"access_token": "***", "token_type": "Bearer"}'),
    ("<Code>SignatureDoesNotMatch</Code><StringToSign>AWS4\n2024</StringToSign>",
     "<Code>SignatureDoesNotMatch</Code><StringToSign>***</StringToSign>"),
])
def test_redact_masks_userinfo_signatures_and_tokens(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize("text", [
    "GET 'v/c/0' on s3://bucket/x.zarr (http://127.0.0.1:9000) failed: 403 Forbidden",
    "SignatureDoesNotMatch: the signature we calculated does not match; contact admin@example.com",
    "token expired",
])
def test_redact_leaves_text_without_credentials_alone(text):
    assert redact(text) == text


def test_redact_masks_known_values_literally_and_percent_encoded():
    secret = "s3cr3t/v@lue"
    text = f"bad key {secret} sent as {secret.replace('/', '%2F').replace('@', '%40')}; short 'ab' kept"
    assert redact(text, [secret, "ab"]) == "bad key *** sent as ***; short 'ab' kept"


def test_secrets_in_finds_credentials_and_endpoint_passwords():
    options = {"endpoint": "http://user:pw1234@host:9000", "secret_access_key": "S3CRET", "access_key_id": "AKIA",
               "aws_session_token": "TOK123", "skip_signature": "true", "region": "us-east-1"}
    assert set(secrets_in(options)) == {"pw1234", "S3CRET", "TOK123"}
    presigned = {"url": "https://host/data?key=KEY-VALUE&sig=ab%2Fcd"}  # any name: the query is the credential
    assert secrets_in(presigned) == ("KEY-VALUE", "ab/cd")


# -- scrubbed -------------------------------------------------------------------------------------------------


def test_scrubbed_returns_a_clean_exception_itself():
    err = ValueError("expected 3 dimensions. Got 2")
    assert scrubbed(err, ["S3CRET"]) is err


def test_scrubbed_rebuilds_the_type_with_a_redacted_message_and_no_chain():
    try:
        try:
            raise OSError(f"connect to http://u:{PASSWORD}@h failed")
        except OSError as inner:
            raise oe.GenericError(f"GET http://u:{PASSWORD}@h/k with S3CRET-KEY") from inner
    except oe.GenericError as err:
        clean = scrubbed(err, ["S3CRET-KEY"])
    assert type(clean) is oe.GenericError
    assert str(clean) == "GET http://***@h/k with ***"
    assert clean.__cause__ is None and clean.__context__ is None
    assert PASSWORD not in everything_shown(clean)


def test_scrubbed_cleans_an_error_whose_chain_alone_leaks():
    try:
        try:
            raise RuntimeError(f"http://u:{PASSWORD}@h")
        except RuntimeError:
            raise ValueError("could not read 'v/c/0'") from None  # suppressed, but still its __context__
    except ValueError as err:
        assert PASSWORD in str(err.__context__)
        clean = scrubbed(err)
    assert type(clean) is ValueError and str(clean) == "could not read 'v/c/0'"
    assert clean.__context__ is None


def test_scrubbed_falls_back_to_store_access_error():
    clean = scrubbed(KeyError(f"http://u:{PASSWORD}@h/k"))  # str(KeyError) quotes its message: not rebuilt
    assert type(clean) is StoreAccessError
    assert str(clean) == "KeyError: 'http://***@h/k'"


def test_scrubbed_redacts_notes():
    err = ValueError(f"token={PASSWORD}")
    err.add_note(f"while reading http://u:{PASSWORD}@h")
    clean = scrubbed(err)
    assert clean.__notes__ == ["while reading http://***@h"]
    assert PASSWORD not in everything_shown(clean)


# -- errors from the stores -------------------------------------------------------------------------------------


NO_RETRIES = {"max_retries": 0, "retry_timeout": timedelta(seconds=5),
              "backoff": {"init_backoff": timedelta(milliseconds=10), "max_backoff": timedelta(milliseconds=10),
                          "base": 2}}


def with_userinfo(endpoint: str) -> str:
    return endpoint.replace("http://", f"http://user:{PASSWORD}@")


def test_password_in_endpoint_never_in_the_error():
    """Nothing listens on the port: obstore's error names the URL it tried, userinfo included."""
    endpoint = f"http://user:{PASSWORD}@127.0.0.1:{free_port()}"
    options = {"endpoint": endpoint, "access_key_id": "AKIA", "secret_access_key": SECRET_KEY,
               "retry_config": NO_RETRIES, "connect_timeout": "1s"}
    with pytest.raises(StoreAccessError, match=r"GET 'zarr.json' on s3://b/x.zarr \(http://127.0.0.1:\d+\)") as info:
        xr.open_dataset("s3://b/x.zarr", engine="zarrmax", storage_options=options)
    text = everything_shown(info.value)
    assert PASSWORD not in text and SECRET_KEY not in text
    assert "http://***@127.0.0.1" in text  # obstore's text is still there, masked


def test_known_secret_in_an_obstore_error_is_masked_also_after_unpickling():
    store = S3Store("b", endpoint="http://127.0.0.1:1", access_key_id="AKIA", secret_access_key="S3CRET-VALUE",
                    session_token="SESSION-TOKEN-VALUE", region="us-east-1", client_options={"allow_http": True})

    async def echoes_credentials(store, key):
        raise oe.GenericError(f"signed with S3CRET-VALUE and SESSION-TOKEN-VALUE for {key}")

    for source in (ObstoreSource(store), pickle.loads(pickle.dumps(ObstoreSource(store)))):
        with pytest.raises(StoreAccessError, match=r"GET 'k' on s3://b/? \(http://127.0.0.1:1\) failed: "
                                                   r"GenericError: signed with \*\*\* and \*\*\* for k") as info:
            run_sync(source._call("GET", "k", echoes_credentials, "k"))
        text = everything_shown(info.value) + repr(source) + source.label
        assert "S3CRET-VALUE" not in text and "SESSION-TOKEN-VALUE" not in text


def test_presigned_http_store_query_never_in_the_error():
    """An HTTPStore keeps its URL's query and sends it with every request; obstore's errors quote it."""
    store = HTTPStore.from_url(f"http://127.0.0.1:{free_port()}/data.zarr?key=QUERY-SECRET-1&sig=QUERY-SIG-2",
                               retry_config=NO_RETRIES)
    with pytest.raises(StoreAccessError, match=r"GET 'zarr.json' on HTTPStore\(\) failed") as info:
        xr.open_dataset(store, engine="zarrmax")
    text = everything_shown(info.value)
    assert "QUERY-SECRET-1" not in text and "QUERY-SIG-2" not in text
    assert "key=***" in text  # obstore's text is still there, masked


def test_a_source_scrubs_errors_with_its_own_credentials(tmp_path):
    """What the zarr-python fallback uses for the errors of the arrays it reads."""
    store = S3Store("b", endpoint="http://127.0.0.1:1", secret_access_key="S3CRET-VALUE", access_key_id="AKIA",
                    region="us-east-1")
    err = RuntimeError("request signed with S3CRET-VALUE failed")
    for source in (ObstoreSource(store), pickle.loads(pickle.dumps(ObstoreSource(store)))):
        assert str(source.scrubbed(err)) == "request signed with *** failed"
        assert "S3CRET-VALUE" not in repr(source) + source.label
    assert LocalSource(tmp_path).scrubbed(err) is err  # nothing to mask for a local directory


class LeakyStore(MemoryStore):
    """A zarr Store whose failures quote the URL they went to, userinfo and all, as fsspec's and obstore's do."""

    async def get(self, key, prototype=None, byte_range=None):
        raise RuntimeError(f"GET http://user:{PASSWORD}@example.com/{key} failed")

    async def list_dir(self, prefix):
        raise RuntimeError(f"LIST http://user:{PASSWORD}@example.com/{prefix} failed")
        yield  # an async generator, as the interface says


@pytest.mark.parametrize("call, expected", [
    (lambda s: s.get("zarr.json"), r"GET 'zarr.json' on LeakyStore@\w+ failed: RuntimeError: "
                                   r"GET http://\*\*\*@example.com/zarr.json failed"),
    (lambda s: s.list_dir("g"), r"LIST 'g' on LeakyStore@\w+ failed: RuntimeError: "
                                r"LIST http://\*\*\*@example.com/g failed"),
])
def test_zarr_store_errors_are_masked_and_not_chained(call, expected):
    source = ZarrStoreSource(LeakyStore())
    with pytest.raises(StoreAccessError, match=expected) as info:
        run_sync(call(source))
    assert PASSWORD not in everything_shown(info.value)
    assert info.value.__cause__ is None


def test_s3_url_with_credentials_is_refused_without_showing_them():
    with pytest.raises(ValueError, match=r"credentials in storage_options. Got credentials in the URL: "
                                         r"'s3://\*\*\*@bucket/x.zarr'") as info:
        xr.open_dataset(f"s3://AKIA:{PASSWORD}@bucket/x.zarr", engine="zarrmax")
    assert PASSWORD not in everything_shown(info.value)


def test_unknown_protocol_error_masks_a_presigned_url():
    url = "nosuchprotocol://host/x.zarr?X-Amz-Credential=AKIA%2Fs3&X-Amz-Signature=feedface"
    with pytest.raises(ValueError, match="Protocol not known: nosuchprotocol") as info:
        xr.open_dataset(url, engine="zarrmax")
    assert info.value.__notes__ == [
        "while opening nosuchprotocol://host/x.zarr?X-Amz-Credential=***&X-Amz-Signature=*** with fsspec"]
    assert "feedface" not in everything_shown(info.value)


class LeakyFileSystem(fsspec.AbstractFileSystem):
    """An fsspec file system whose errors quote the paths and the option values it was given."""

    protocol = "leakyfs"
    cachable = False

    def __init__(self, fail_init=False, **options):
        if fail_init:
            raise ValueError(f"login refused for {self.values(options)}")
        super().__init__(**options)

    @classmethod
    def values(cls, options):
        return [v for value in options.values()
                for v in (cls.values(value) if isinstance(value, dict) else [value]) if isinstance(v, str)]

    def cat_file(self, path, start=None, end=None, **kwargs):
        raise OSError(f"reading {path} as {self.values(self.storage_options)} failed")

    def ls(self, path, detail=True, **kwargs):
        raise OSError(f"listing {path} as {self.values(self.storage_options)} failed")


@pytest.fixture
def leaky_fs():
    fsspec.register_implementation("leakyfs", LeakyFileSystem, clobber=True)
    yield
    _fsspec_registry.pop("leakyfs", None)


@pytest.mark.parametrize("target, options", [
    ("leakyfs://host/x.zarr", {"password": PASSWORD, "fail_init": True}),  # fsspec's own error, at open
    ("leakyfs://host/x.zarr", {"password": PASSWORD}),  # the store's error, at the first GET
    ("leakyfs://host/x.zarr", {"nested": {"secret": PASSWORD}}),  # chained URLs take options per protocol
    (f"leakyfs://user:{PASSWORD}@host/x.zarr", {}),  # the file system keeps it in its paths
    (f"simplecache::leakyfs://user:{PASSWORD}@host/x.zarr", {}),
])
def test_fsspec_credentials_never_in_errors(leaky_fs, target, options):
    for reloaded in (False, True):
        with pytest.raises((ValueError, StoreAccessError)) as info:
            if reloaded:  # a source unpickled on a worker masks the same secrets
                xr.open_dataset(pickle.loads(pickle.dumps(resolve_source(target, options))), engine="zarrmax")
            else:
                xr.open_dataset(target, engine="zarrmax", storage_options=options)
        text = everything_shown(info.value)
        assert PASSWORD not in text, text
        assert "leakyfs://" in text or "fail_init" in options
        if "fail_init" in options:
            break


@pytest.mark.parametrize("make", [
    lambda: fsspec.get_mapper("leakyfs://host/x.zarr", password=PASSWORD),
    lambda: zarr.storage.FsspecStore.from_url("leakyfs://host/x.zarr", storage_options={"password": PASSWORD}),
], ids=["mapper", "FsspecStore"])
def test_fsspec_mapper_and_store_credentials_never_in_errors(leaky_fs, make):
    for target in (make(), pickle.loads(pickle.dumps(resolve_source(make())))):
        with pytest.raises(StoreAccessError, match=r"GET 'zarr.json' on .* failed: OSError: reading .* failed") as info:
            xr.open_dataset(target, engine="zarrmax")
        assert PASSWORD not in everything_shown(info.value)


def test_url_password_not_in_labels_errors_or_dask_keys():
    url = f"memory://user:{PASSWORD}@storelike-secret/x.zarr"
    with pytest.raises(FileNotFoundError) as info:
        xr.open_dataset(url, engine="zarrmax")
    assert PASSWORD not in everything_shown(info.value)
    group = zarr.open_group(url, mode="w", zarr_format=3)
    group.create_array("v", shape=(8,), chunks=(4,), dtype="i4", dimension_names=["x"])[:] = np.arange(8)
    source = resolve_source(url)
    ds = xr.open_dataset(url, engine="zarrmax", chunks={})
    np.testing.assert_array_equal(ds["v"].values, np.arange(8))
    shown = [repr(source), source.label, ds["v"].data.name, repr(list(ds["v"].data.__dask_graph__()))]
    for text in shown:
        assert PASSWORD not in text, text
    fsspec.filesystem("memory").rm(url, recursive=True)


@pytest.mark.s3
def test_wrong_credentials_through_an_endpoint_with_userinfo(minio, bucket):
    store = zarr.storage.ObjectStore(minio.obstore(bucket, "userinfo.zarr"))
    zarr.open_group(store, mode="w", zarr_format=3).create_array("v", shape=(4,), dtype="i4",
                                                                 dimension_names=["x"])[:] = 1
    options = {**minio.storage_options(with_userinfo(minio.endpoint)), "secret_access_key": "wrong-" + SECRET_KEY}
    with pytest.raises(StoreAccessError, match=r"was refused: check the credentials") as info:
        xr.open_dataset(f"s3://{bucket}/userinfo.zarr", engine="zarrmax", storage_options=options)
    text = everything_shown(info.value)
    assert minio.endpoint in text and "http://***@127.0.0.1" in text
    assert PASSWORD not in text and SECRET_KEY not in text


@pytest.mark.s3
def test_unreachable_proxied_endpoint_with_userinfo(minio, bucket, toxiproxy):
    endpoint = toxiproxy.proxy("security_down", minio.port)
    toxiproxy._api("POST", "/proxies/security_down", {"enabled": False})  # connection refused from now on
    options = {**minio.storage_options(with_userinfo(endpoint)), "retry_config": NO_RETRIES}
    with pytest.raises(StoreAccessError, match=r"GET 'zarr.json' on s3://.* failed") as info:
        xr.open_dataset(f"s3://{bucket}/anything.zarr", engine="zarrmax", storage_options=options)
    text = everything_shown(info.value)
    assert endpoint in text and PASSWORD not in text and SECRET_KEY not in text


@pytest.mark.s3
def test_reprs_labels_counts_and_dask_keys_hold_no_secret(minio, bucket):
    store = zarr.storage.ObjectStore(minio.obstore(bucket, "keys.zarr"))
    group = zarr.open_group(store, mode="w", zarr_format=3)
    group.create_array("v", shape=(8,), chunks=(4,), dtype="i4", dimension_names=["x"])[:] = np.arange(8)
    options = minio.storage_options(with_userinfo(minio.endpoint))  # MinIO ignores the userinfo: it opens
    source = resolve_source(f"s3://{bucket}/keys.zarr", options)
    with request_counts() as counts:
        ds = xr.open_dataset(f"s3://{bucket}/keys.zarr", engine="zarrmax", chunks={}, storage_options=options)
        np.testing.assert_array_equal(ds["v"].values, np.arange(8))
    graph = ds["v"].data.__dask_graph__()
    shown = [repr(source), source.label, repr(counts), repr(counts.keys), ds["v"].data.name, repr(list(graph))]
    assert counts.total("get") >= 2
    for text in shown:
        assert PASSWORD not in text and SECRET_KEY not in text, text


def test_cli_masks_errors_it_did_not_raise_itself(monkeypatch, capsys):
    """zarr-python's errors (arrays it reads for us) reach the command unmasked: it masks what it prints."""
    from xarray_zarrmax import cli

    def fails(args, chunks):
        raise OSError(f"GET http://user:{PASSWORD}@host/k signed with S3CRET-FROM-OPTION")

    monkeypatch.setattr(cli, "_open", fails)
    assert cli.main(["info", "s3://b/x.zarr", "-o", "secret_access_key=S3CRET-FROM-OPTION"]) == 1
    err = capsys.readouterr().err
    assert err == "zarrmax: OSError: GET http://***@host/k signed with ***\n"


# -- keys stay inside the store ---------------------------------------------------------------------------------


ESCAPING_KEYS = ["../secret", "a/../../secret", "./secret", "a/./b", "/etc/passwd"]


@pytest.fixture
def store_beside_a_secret(tmp_path):
    (tmp_path / "secret").write_bytes(b"not yours")
    root = tmp_path / "store.zarr"
    (root / "a").mkdir(parents=True)
    return root


@pytest.mark.parametrize("key", ESCAPING_KEYS)
@pytest.mark.parametrize("read", ["read", "read_ranges", "read_suffix", "read_prefix", "list_dir"])
def test_local_source_refuses_keys_outside_its_root(store_beside_a_secret, key, read):
    source = LocalSource(store_beside_a_secret)
    calls = {"read": lambda: source.read(key), "read_ranges": lambda: source.read_ranges(key, [(0, 4)]),
             "read_suffix": lambda: source.read_end(key, 4, suffix=True),
             "read_prefix": lambda: source.read_end(key, 4, suffix=False),
             "list_dir": lambda: run_sync(source.list_dir(key))}
    with pytest.raises(ValueError, match=rf"without '.' or '..' segments. Got {re.escape(repr(key))} on "
                                         rf"file://{store_beside_a_secret} instead"):
        calls[read]()


@pytest.mark.parametrize("key", ["../secret", "a/../../secret"])
def test_zarr_local_store_source_refuses_keys_outside_its_root(store_beside_a_secret, key):
    source = ZarrStoreSource(LocalStore(store_beside_a_secret, read_only=True))
    with pytest.raises(ValueError, match=rf"Got {re.escape(repr(key))} on LocalStore@\w+ instead"):
        run_sync(source.get(key))


def sibling_stores(tmp_path):
    for name, value in (("inner.zarr", 1), ("other.zarr", 7)):
        group = zarr.open_group(str(tmp_path / name), mode="w", zarr_format=3)
        group.create_array("v", shape=(4,), dtype="i4", dimension_names=["x"])[:] = value
    return str(tmp_path / "inner.zarr")


@pytest.mark.parametrize("group", ["../other.zarr", "sub/../../other.zarr"])
def test_group_cannot_open_a_sibling_store(tmp_path, group):
    path = sibling_stores(tmp_path)
    # refused at open, before any key is built (stores refuse such keys too: tested above)
    with pytest.raises(ValueError, match=rf"group must be a path inside the store, without '.' or '..' segments. "
                                         rf"Got '{re.escape(group)}'"):
        xr.open_dataset(path, engine="zarrmax", group=group)
    with pytest.raises(ValueError, match="'.' or '..' segments"):  # as zarr-python refuses it
        xr.open_dataset(path, engine="zarr", group=group, consolidated=False)


def test_consolidated_member_named_dot_dot_cannot_read_the_parent(tmp_path):
    """A hostile store: its consolidated metadata lists an array called "..", whose chunks would be ../c/0."""
    parent = zarr.create_array(str(tmp_path), shape=(4,), chunks=(4,), dtype="i4", dimension_names=["x"])
    parent[:] = 42  # tmp_path/c/0: outside the store below
    member = json.loads((tmp_path / "zarr.json").read_text())
    os.makedirs(tmp_path / "inner.zarr")
    (tmp_path / "inner.zarr" / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "group", "attributes": {},
        "consolidated_metadata": {"kind": "inline", "must_understand": False, "metadata": {"..": member}},
    }))
    with pytest.raises(ValueError, match=r"invalid member name '..' in the consolidated metadata in 'zarr.json' of "
                                         r"file://.*inner.zarr: expected a name without empty, '.' or '..' path"):
        xr.open_dataset(tmp_path / "inner.zarr", engine="zarrmax", consolidated=True)[".."].values


@pytest.mark.s3
@pytest.mark.parametrize("chunks", [None, {}])
def test_errors_from_the_zarr_python_fallback_are_masked(minio, bucket, toxiproxy, chunks):
    """Strings go through zarr-python, whose store errors quote the endpoint URL, userinfo included."""
    store = zarr.storage.ObjectStore(minio.obstore(bucket, "fallback-secret.zarr"))
    group = zarr.open_group(store, mode="w", zarr_format=3)
    group.create_array("s", shape=(4,), chunks=(2,), dtype=str, dimension_names=["x"])[:] = ["a", "bb", "c", "d"]
    proxy = f"fallback_down_{chunks is None}"
    endpoint = toxiproxy.proxy(proxy, minio.port)
    options = {**minio.storage_options(with_userinfo(endpoint)), "retry_config": NO_RETRIES}
    ds = xr.open_dataset(f"s3://{bucket}/fallback-secret.zarr", engine="zarrmax", chunks=chunks,
                         storage_options=options)
    toxiproxy._api("POST", f"/proxies/{proxy}", {"enabled": False})  # the data reads now fail
    with pytest.raises(Exception) as info:  # noqa: B017 - whatever type zarr-python raises: its text is checked
        ds["s"].values
    text = everything_shown(info.value)
    assert "127.0.0.1" in text  # the error still says where it failed
    assert PASSWORD not in text and SECRET_KEY not in text, text
