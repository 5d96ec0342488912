"""Which failed requests are sent again, when, and how often; and what an overloaded store's answers do to the
process's request budget.

`send` sends one request under the process's limiter (`core.budget`) and sends it again while that may help:

- **Who retries.** obstore retries 5xx and 429 answers and broken connections itself, out of sight: a 503
  SlowDown or a 429 retried there is neither counted nor seen by the limiter, and every request backs off on
  its own, up to its retry config's count (obstore 0.12 against MinIO's 429: 512 GETs at once against a limit
  of 8 all succeeded, none seen). So the S3 stores built here from a URL send our requests through a twin of
  the store with obstore's retries off (``store_retries=False``), and every retry is ours: counted
  (``request_counts()``: ``retries``, ``throttled``), paced, and bounded. A store whose own retry config is in
  force (one the user built, or ``retry_config`` in ``storage_options``) keeps its retries; we then retry only
  what it does not: a body that broke off, a PUT cut off after it was sent. An overload answer that comes
  through it (obstore gave up) still lowers the limit and is counted.
- **What.** An overload answer (429, 503) is sent again whatever the request: the store refused it unapplied.
  Other transient failures (5xx, 408, a broken connection, a timeout) are sent again for reads and
  unconditional writes (idempotent), never for a conditional PUT: its caller reads and merges again instead.
  Refusals (403), missing and changed objects are never sent again.
- **How often.** At most ``config.retries`` times a request, none started `RETRY_TIMEOUT_S` after its first
  attempt (time queued for a slot not counted), and each one paid from the process's `RetryBudget`; then a
  `RequestFailed` naming the store, the key, the status and the attempts.
- **Overload.** Each overload answer goes to the limiter's `Aimd` (fewer requests in flight, once per window);
  each other answer lets it grow back. The retry waits a jittered, doubling backoff without holding a slot.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from xarray_zarrmax.config import get_config
from xarray_zarrmax.core import accounting
from xarray_zarrmax.core.budget import request_slot
from xarray_zarrmax.errors import RequestFailed
from xarray_zarrmax.tuning import OVERLOAD_BACKOFF_S, RETRY_BACKOFF_S, RETRY_MAX_BACKOFF_S, RETRY_TIMEOUT_S

#: "read": GET, LIST, HEAD; "write": an unconditional PUT or a DELETE (the same request twice is the same
#: result); "conditional": a PUT with If-Match / If-None-Match, sent again only when refused as overloaded.
Resend = Literal["read", "write", "conditional"]

#: obstore errors that say the request may succeed if sent again.
_TRANSIENT_WORDS = ("timed out", "timeout", "connection", "reset", "broken pipe", "error sending request",
                    "incomplete", "eof", "slow down", "unexpected end", "body error")
#: Overload in an error's text where it carries no status (S3's codes, MinIO's, other S3-compatible stores').
_OVERLOAD_WORDS = ("slowdown", "slow down", "toomanyrequests", "too many requests", "requestlimitexceeded",
                   "throttl", "reduce your request rate")
OVERLOAD_STATUSES = (429, 503)

_STATUS = re.compile(r"status code: (\d{3})")


def status_of(err: BaseException) -> int | None:
    """The HTTP status a store's error reports (not any number that happens to be in a key)."""
    match = _STATUS.search(str(err))
    return int(match.group(1)) if match else None


def is_transient(err: BaseException) -> bool:
    """Whether a failed request may succeed if sent again (a 5xx, 408 or 429 answer, or a broken connection)."""
    status = status_of(err)
    if status is not None:
        return status >= 500 or status in (408, 429)  # the server answered: only these may change on retry
    text = str(err).lower()
    return any(w in text for w in _TRANSIENT_WORDS)


def is_overload(err: BaseException) -> bool:
    """Whether the store refused the request as overloaded: S3's 503 SlowDown, a 429 (MinIO's request limit)."""
    status = status_of(err)
    if status is not None:
        return status in OVERLOAD_STATUSES
    text = str(err).lower().replace("_", "")
    return any(w in text for w in _OVERLOAD_WORDS)


def may_resend(err: BaseException, failure: BaseException, resend: Resend, *, body_started: bool,
               store_retries: bool) -> bool:
    """Whether a request that failed with ``err`` (``failure`` as we raise it) is worth sending again."""
    if not isinstance(failure, RequestFailed):
        return False  # a refusal, a missing or a changed object: the same again
    if is_overload(err):
        return not store_retries  # obstore already retried it as often as its config allows
    if not is_transient(err) or resend == "conditional":
        return False
    if body_started or not store_retries:
        return True
    return resend == "write"  # obstore resends reads itself, but not a PUT cut off after it was sent


def backoff(attempt: int, overload: bool) -> float:
    """Seconds before attempt ``attempt + 1``: doubling from `RETRY_BACKOFF_S` (`OVERLOAD_BACKOFF_S` after an
    overload answer, which the lowered limit paces already) up to `RETRY_MAX_BACKOFF_S`, each drawn from its
    upper half, so requests refused together do not come back together."""
    first = OVERLOAD_BACKOFF_S if overload else RETRY_BACKOFF_S
    ceiling = min(first * 2 ** (attempt - 1), RETRY_MAX_BACKOFF_S)
    return ceiling * (0.5 + 0.5 * random.random())


@dataclass
class Progress:
    """What one attempt got to: set ``body_started`` once the response began (a read may then be resent)."""

    body_started: bool = False


async def send[T](label: str, what: str, key: str, attempt: Callable[[Progress], Awaitable[T]],
                  failure: Callable[[BaseException], BaseException], *, resend: Resend = "read",
                  store_retries: bool = False) -> T:
    """``attempt`` under one request slot, again while `may_resend` says so and the bounds allow; its error as
    ``failure`` makes it (our types, credentials masked) otherwise, raised outside any ``except`` clause so that
    not even ``__context__`` keeps the store's own text."""
    limiter = request_slot()
    attempts = 0
    busy = 0.0  # seconds spent sending and backing off, not queued for a slot
    while True:
        progress = Progress()
        ticket = await limiter.acquire()
        started = time.monotonic()
        concurrency = get_config().concurrency
        if attempts == 0:
            limiter.retry_budget.deposit(concurrency)
        attempts += 1
        error: BaseException | None = None
        try:
            try:
                result = await attempt(progress)
            finally:
                limiter.release()
        except FileNotFoundError:
            limiter.succeeded()
            raise
        except Exception as err:
            error = err
        else:
            limiter.succeeded()
            return result
        busy += time.monotonic() - started
        failed = failure(error)
        overload = is_overload(error)
        if overload:
            limiter.overloaded(ticket)
            accounting.record_event(label, "throttled")
        elif not is_transient(error):
            limiter.succeeded()  # the store answered (a refusal, a missing object): it is coping
        if not may_resend(error, failed, resend, body_started=progress.body_started, store_retries=store_retries):
            raise failed
        assert isinstance(failed, RequestFailed)  # may_resend said so
        retries = get_config().retries
        why = None
        if attempts > retries:
            why = f"no retry left (config.retries={retries})"
        elif busy >= RETRY_TIMEOUT_S:
            why = f"no retry starts {RETRY_TIMEOUT_S:g} s after the first attempt"
        elif not limiter.retry_budget.withdraw(concurrency):
            why = ("the process's retry budget is spent (retries are limited to a share of the requests sent: "
                   "too many of them failed; lower config.concurrency, or read less at once)")
        if why is not None:
            raise _gave_up(failed, error, attempts, busy, why)
        accounting.record_event(label, "retries")
        pause = backoff(attempts, overload)
        busy += pause
        await asyncio.sleep(pause)


def _gave_up(failed: RequestFailed, error: BaseException, attempts: int, busy: float, why: str) -> RequestFailed:
    status = failed.status if failed.status is not None else status_of(error)
    answer = f"HTTP {status}" if status is not None else "no answer"
    if is_overload(error):
        answer += ": the store is overloaded (throttling)"
    return RequestFailed(f"{failed} [gave up after {attempts} attempts in {busy:.1f} s, the last one {answer}; "
                         f"{why}]", status)
