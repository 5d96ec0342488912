"""The advisor's store probe fails with our documented errors (issue #46): a `StoreAccessError` (an OSError) naming
the place probed and its endpoint, the request and the store's reason in one line, never a credential, with
obstore's own error (and its two-kilobyte dump of the request) only as ``__cause__``. It was obstore's
PermissionDeniedError or GenericError itself."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import xarray_zarrmax
from xarray_zarrmax.advise.probe import probe_store
from xarray_zarrmax.cli import main
from xarray_zarrmax.errors import StoreAccessError
from xarray_zarrmax.testing.services import free_port

WRONG = "WRONGsecretVALUE0123456789"
#: fail fast: one retry, a short backoff, a short connect timeout
FAST = {"retry_config": {"max_retries": 1, "retry_timeout": timedelta(seconds=2),
                         "backoff": {"init_backoff": timedelta(milliseconds=10),
                                     "max_backoff": timedelta(milliseconds=50), "base": 2}},
        "connect_timeout": "1s"}
REFUSED = ("was refused (403 Forbidden, SignatureDoesNotMatch: The request signature we calculated does not match "
           "the signature you provided. Check your key and signing method.); check the credentials (storage_options, "
           "or AWS_* in the environment) and that they may write there")


def dataset() -> xr.Dataset:
    return xr.Dataset({"t2m": (("time", "lat", "lon"), np.random.default_rng(0).random((37, 20, 30)).astype("f4"))})


def texts(err: BaseException) -> list[str]:
    """The text of an error and of everything chained to it, notes included."""
    found, seen = [], set()
    todo: list[BaseException] = [err]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        found += [str(e), *map(str, getattr(e, "__notes__", ()))]
        todo += [x for x in (e.__cause__, e.__context__) if x is not None]
    return found


def unreachable() -> dict[str, Any]:
    return {"endpoint": f"http://127.0.0.1:{free_port()}", "access_key_id": "AKIDEXAMPLE",
            "secret_access_key": WRONG, "region": "us-east-1", **FAST}


def check_unreachable(err: BaseException, options: dict[str, Any], place: str = "s3://probe-bucket/scratch") -> None:
    assert type(err) is StoreAccessError and isinstance(err, OSError)
    message = str(err)
    assert re.fullmatch(
        rf"probing the store at {re.escape(place)} \({re.escape(options['endpoint'])}\): the PUT of "
        r"zarrmax-probe-[0-9a-f]{12}/large failed \(HTTP error: error sending request \(Connection refused\), after 1 "
        r"retries\)", message), message
    assert type(err.__cause__).__name__ == "GenericError"  # obstore's, kept for whoever wants its dump
    assert not any(WRONG in t for t in texts(err))


def test_an_unreachable_endpoint_is_a_store_access_error_naming_it() -> None:
    options = unreachable()
    with pytest.raises(StoreAccessError) as caught:
        xarray_zarrmax.advise(dataset(), {"map": 1.0}, store="s3://probe-bucket/scratch", storage_options=options,
                              progress=False)
    check_unreachable(caught.value, options)
    assert "while probing the store at s3://probe-bucket/scratch" in "\n".join(caught.value.__notes__)


def test_an_unreachable_probe_of_an_advised_write_writes_nothing(tmp_path: Path) -> None:
    options = unreachable()
    with pytest.raises(StoreAccessError) as caught:
        xarray_zarrmax.to_zarr(dataset(), tmp_path / "out.zarr", encoding="advise", patterns={"map": 1.0},
                               advise_options={"store": "s3://probe-bucket/scratch", "storage_options": options,
                                               "progress": False})
    check_unreachable(caught.value, options)
    assert list(tmp_path.iterdir()) == []


def test_the_reason_is_one_line_of_the_stores_answer() -> None:
    from xarray_zarrmax.advise.probe import one_line_reason

    dump = ("Generic S3 error: Error performing PUT http://h:1/b/k in 3ms, after 2 retries, max_retries: 2, "
            "retry_timeout: 2s  - HTTP error: error sending request\n\nDebug source:\nGeneric {\n    message: "
            "\"Connection reset by peer\",\n}")
    assert one_line_reason(Exception(dump)) == ("HTTP error: error sending request (Connection reset by peer), "
                                               "after 2 retries")
    answered = ("The operation lacked the necessary privileges to complete for path k: Error performing GET "
                "http://h:1/b/k in 1ms - Server returned non-2xx status code: 403 Forbidden: <?xml version=\"1.0\"?>"
                "<Error><Code>AccessDenied</Code><Message>Access Denied.</Message></Error>\n\nDebug source: ...")
    assert one_line_reason(Exception(answered)) == "403 Forbidden, AccessDenied: Access Denied."
    assert one_line_reason(Exception("token=abcdef123456 refused"), ["abcdef123456"]) == "token=*** refused"


@pytest.mark.s3
def test_wrong_credentials_are_a_store_access_error_naming_the_place(minio: Any, bucket: str) -> None:
    import obstore

    options = {**minio.storage_options(), "secret_access_key": WRONG}
    place = f"s3://{bucket}/scratch"
    with pytest.raises(StoreAccessError) as caught:
        xarray_zarrmax.advise(dataset(), {"map": 1.0}, store=place, storage_options=options, progress=False)
    message = str(caught.value)
    assert re.fullmatch(rf"probing the store at {re.escape(place)} \({re.escape(minio.endpoint)}\): the PUT of "
                        rf"zarrmax-probe-[0-9a-f]{{12}}/large {re.escape(REFUSED)}", message), message
    assert type(caught.value.__cause__).__name__ == "PermissionDeniedError"
    assert "deleting" not in "\n".join(caught.value.__notes__)  # nothing was written, so nothing to delete
    assert not any(WRONG in t for t in texts(caught.value))
    assert list(obstore.list(minio.obstore(bucket, "scratch")).collect()) == []


@pytest.mark.s3
def test_a_bucket_that_does_not_exist_is_named(minio: Any) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        probe_store("s3://no-such-bucket-46/scratch", {**minio.storage_options(), **FAST}, large=2**16)
    assert re.fullmatch(rf"probing the store at s3://no-such-bucket-46/scratch \({re.escape(minio.endpoint)}\): the "
                        r"bucket does not exist \(PUT of zarrmax-probe-[0-9a-f]{12}/large: 404 Not Found, "
                        r"NoSuchBucket: The specified bucket does not exist\)", str(caught.value)), str(caught.value)


@pytest.mark.s3
def test_the_command_lines_probe_reports_the_refusal(minio: Any, bucket: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "d.zarr")
    dataset().to_zarr(path, zarr_format=3, mode="w", consolidated=True)
    # the probe's credentials from the environment (-o options would also apply to the local data)
    key_id = minio.storage_options()["access_key_id"]
    for key, value in {"AWS_ENDPOINT_URL": minio.endpoint, "AWS_ACCESS_KEY_ID": key_id,
                       "AWS_SECRET_ACCESS_KEY": WRONG, "AWS_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    assert main(["advise", path, "--probe", f"s3://{bucket}/scratch", "--pattern", "map:1"]) == 1
    err = capsys.readouterr().err
    assert f"probing the store at s3://{bucket}/scratch ({minio.endpoint}): the PUT of zarrmax-probe-" in err
    assert REFUSED in err
    assert WRONG not in err and "Debug source" not in err
