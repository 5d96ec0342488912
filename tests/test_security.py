"""No secret in any error, repr, label or dask key; no key, whatever a caller or a store's metadata says, reads
outside the store."""

from __future__ import annotations

import traceback

import obstore.exceptions as oe
import pytest

from xarray_zarrmax import StoreAccessError
from xarray_zarrmax._redact import redact, scrubbed, secrets_in

PASSWORD = "hunter2-pw"


def everything_shown(err: BaseException) -> str:
    """All an error shows: message, repr, and the traceback as Python prints it (with its chain)."""
    return str(err) + repr(err) + "".join(traceback.format_exception(err))


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
