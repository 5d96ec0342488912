"""Scrub secrets from text we pass on: error messages, labels, anything a user may paste into an issue.

Text from obstore, zarr-python or a server can hold the URL a request went to (with ``user:password@``),
presigned query strings and signature headers. `redact` masks those by pattern and masks the secret values
we know (those the user gave us) literally; `scrubbed` applies it to an exception and its chain.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit

from xarray_zarrmax.errors import StoreAccessError

MASK = "***"

#: Known values shorter than this are not masked literally: masking every "ab" in a message would garble it
#: and spell out the value by its holes. Patterns still mask them where they stand as credentials.
MIN_SECRET_LENGTH = 4

# Names of query parameters, headers and config fields whose value is a credential (case-insensitive).
_SECRET_NAMES = (
    "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature", "x-goog-credential",
    "awsaccesskeyid", "signature", "sig", "credential", "token", "access_token", "refresh_token", "id_token",
    "session_token", "security_token", "sas_token", "secret", "secret_key", "secret_access_key",
    "client_secret", "password", "passwd", "api_key", "apikey", "accountkey", "account_key",
    "aws_secret_access_key", "aws_session_token",
)
_NAME = "|".join(re.escape(n) for n in sorted(_SECRET_NAMES, key=len, reverse=True))

# name=value (query strings, headers' parameters), name: value (headers), "name": "value" (JSON).
_NAMED_VALUE = re.compile(
    rf"(?<![\w-])(?P<name>{_NAME})(?P<sep>[\"']?\s*[=:]\s*[\"']?)(?P<value>[^\s&#\"'<>,;)]+)", re.IGNORECASE
)
# user:password@ (or a bare token@) in any URL; greedy up to the authority's last "@", as URL parsers read it.
_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^/\s?#]+@", re.IGNORECASE)
_AUTHORIZATION = re.compile(r"(?<![\w-])(?P<name>(?:proxy-)?authorization\s*[:=]\s*)[^\r\n]+", re.IGNORECASE)
_BEARER = re.compile(r"\b(?P<name>bearer)\s+[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
# S3 error bodies echo what was signed: <StringToSign>, <SignatureProvided>, <CanonicalRequest>, ...
_XML_ELEMENT = re.compile(
    r"<(?P<tag>StringToSign|StringToSignBytes|SignatureProvided|CanonicalRequest|CanonicalRequestBytes"
    r"|AWSAccessKeyId|SecurityToken)>.*?</(?P=tag)>",
    re.IGNORECASE | re.DOTALL,
)

# Option names whose values are secrets (storage_options, obstore configs, fsspec options): "secret_access_key",
# "aws_session_token", "password", "azure_storage_account_key"; not "access_key_id" nor "skip_signature".
_SECRET_KEY = re.compile(
    r"(?:^|[_-])(?:secret|token|password|passwd|account_key|sas_key)(?:[_-]|$)", re.IGNORECASE
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with credentials masked as ``***``.

    Masks, by pattern: the userinfo of any URL (``http://user:pw@host`` -> ``http://***@host``); the values of
    query parameters, headers and fields named like credentials (``X-Amz-Signature``, ``X-Amz-Credential``,
    ``X-Amz-Security-Token``, ``Signature``, ``sig``, ``token``, ``access_token``, ``AWSAccessKeyId``,
    ``password``, ... in any case); ``Authorization:`` header values; signed strings in S3 error bodies.
    Then masks, literally, each of ``secrets`` (and its percent-encoded forms) that is at least
    `MIN_SECRET_LENGTH` characters long, wherever it appears.
    """
    text = _USERINFO.sub(rf"\g<scheme>{MASK}@", text)
    text = _AUTHORIZATION.sub(rf"\g<name>{MASK}", text)
    text = _BEARER.sub(rf"\g<name> {MASK}", text)
    text = _XML_ELEMENT.sub(rf"<\g<tag>>{MASK}</\g<tag>>", text)
    text = _NAMED_VALUE.sub(rf"\g<name>\g<sep>{MASK}", text)
    for value in _literal_forms(secrets):
        text = text.replace(value, MASK)
    return text


def _literal_forms(secrets: Iterable[str]) -> list[str]:
    forms: set[str] = set()
    for secret in secrets:
        if isinstance(secret, str) and len(secret) >= MIN_SECRET_LENGTH:
            forms.update((secret, quote(secret, safe=""), quote_plus(secret, safe="")))
    return sorted(forms, key=len, reverse=True)  # longest first: a form that contains another goes whole


def secrets_in(options: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The secret values in a mapping of store options: values of keys named like credentials, and in any URL
    among the values its password (an endpoint with ``user:password@``) and its query's values (a presigned
    URL's, whatever their names). Nested mappings are searched too: fsspec takes the options of a chained
    URL per protocol (``{"s3": {"secret": ...}}``), s3fs takes ``client_kwargs``."""
    found: list[str] = []
    for key, value in (options or {}).items():
        if isinstance(value, Mapping):
            found.extend(secrets_in(value))
            continue
        if not isinstance(value, str) or not value:
            continue
        if _SECRET_KEY.search(str(key)):
            found.append(value)
        elif "://" in value:
            found.extend(url_secrets(value))
    return tuple(found)


def url_secrets(url: str) -> tuple[str, ...]:
    """The password and the query's values of a URL, and of each URL in an fsspec chain (``a::b://...``)."""
    found: list[str] = []
    for part in url.split("::"):
        try:
            parsed = urlsplit(part)
            found.extend(v for v in (parsed.password, *(v for _, v in parse_qsl(parsed.query))) if v)
        except ValueError:
            continue
    return tuple(found)


def _chain(err: BaseException) -> Iterable[BaseException]:
    """The exception and every exception it links to by ``__cause__`` or ``__context__``, once each."""
    seen: set[int] = set()
    todo = [err]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)


def _texts(err: BaseException) -> list[str]:
    return [str(err), *(str(n) for n in getattr(err, "__notes__", ()))]


def scrubbed(err: BaseException, secrets: Iterable[str] = ()) -> BaseException:
    """An exception safe to show: ``err`` itself when neither its text nor that of any exception chained to
    it holds a credential, else a new exception whose message (and notes) went through `redact`.

    The new exception has ``err``'s type where that type can be built from one message and shows it back
    (``ValueError``, ``OSError``, obstore's errors...), else it is a `StoreAccessError` whose message starts
    with the original type's name. It has ``err``'s traceback (code locations, no text) and nothing chained,
    with ``__suppress_context__`` set: the original and its chain hold the secret. Raise it from outside the
    ``except`` block: raised inside, Python would set its ``__context__`` to the original again (not printed,
    since the context is suppressed, but reachable by any code that walks the chain)::

        try:
            ...
        except Exception as err:
            failure = scrubbed(err, secrets)
        else:
            return result
        raise failure

    ``secrets`` are values to mask literally (the credentials the user passed), see `redact`.
    """
    secrets = tuple(secrets)
    if all(redact(t, secrets) == t for e in _chain(err) for t in _texts(e)):
        return err
    message = redact(str(err), secrets)
    clean: BaseException
    try:
        clean = type(err)(message)
        if str(clean) != message:  # e.g. KeyError quotes its message; OSError(a, b) is not one message
            raise TypeError
    except Exception:
        clean = StoreAccessError(f"{type(err).__name__}: {message}")
    for note in getattr(err, "__notes__", ()):
        clean.add_note(redact(str(note), secrets))
    clean.__cause__ = None
    clean.__context__ = None
    clean.__suppress_context__ = True
    return clean.with_traceback(err.__traceback__)
