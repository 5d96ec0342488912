"""Calibrate the advisor's cost model: time a few requests against the target store and the decoder on a sample of
the data. Everything the store probe writes goes under one fresh prefix and is deleted after.

Five store numbers come out (see `StoreProbe`): the latency of a GET (median time of 16-byte range GETs), the
work of one request when many are in flight (``many`` such GETs at once on open connections, less one latency,
per GET), the extra a connection costs when a fresh client opens one per request in flight (as the first read
after an open does), the throughput of one request stream (a large GET, less its latency) and the aggregate
throughput (``parallel`` large GETs at once). The decoder probe compresses a sample with numcodecs' zstd (what
our writer uses by default) and times its decode: the compression ratio and decoded bytes per second per thread,
for the sample as one chunk and cut into chunks of 4 KiB to 1 MiB, and how many times faster our decode pool
decodes than one thread (measured: 1.1-1.9x at 2 threads, never taken as 2). The reader probe times our own
reader on local copies of a sample: its fixed work per inner chunk, per request and per shard read through its
index (see `ReaderProbe`). Each store and decoder measurement is repeated until it settles (`settle`): the
median is the cost, the quartiles its spread, which the advisor carries into its predictions and ties.
"""

from __future__ import annotations

import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TextIO, TypeVar

import numpy as np

from xarray_zarrmax.advise.repeats import Measured, nondecreasing, paired_ratios, settle, timed
from xarray_zarrmax.config import get_config, set_config
from xarray_zarrmax.core.redact import redact, scrubbed, secrets_in, url_secrets
from xarray_zarrmax.errors import StoreAccessError
from xarray_zarrmax.tuning import (
    DECODE_SIZES,
    JOB_BYTES,
    PROBE_LEAST,
    PROGRESS_AFTER_S,
    SPEEDUP_BYTES,
    SPEEDUP_SIZES,
)

#: A progress callback: (step done, steps in all, what is being done).
Progress = Callable[[int, int, str], None]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StoreProbe:
    """What one store delivers, measured."""

    latency_s: float
    request_bps: float
    aggregate_bps: float
    local: bool
    request_s: float = 0.0  # wall time per request of many small ones at once, beyond one latency
    connect_s: float = 0.0  # wall time per connection a fresh client opens for them (0 locally)
    spread: tuple[tuple[str, float, float], ...] = ()  # (cost, low, high): from the quartiles of the repeats


@dataclass(frozen=True, slots=True)
class ReaderProbe:
    """Our reader's fixed work, in seconds of wall time, measured on local files (no latency to hide it).

    ``chunk_s``: per inner chunk decoded (hand-off, decode call, placement). ``request_s``: per object read
    whole, beyond its chunk (open, read, version checks, planning): on a local store this is the cost of a
    request, paid one after the other. ``index_s``: per shard read through its index, beyond its two
    requests and its chunk (parse and check the index, coalesce, slice): paid on any store.
    ``index_entry_s``: per entry of a shard index parsed, beyond ``index_s`` (`probe_index_parse`).
    """

    chunk_s: float
    request_s: float
    index_s: float
    index_entry_s: float = 0.0


@dataclass(frozen=True, slots=True)
class DecoderProbe:
    """numcodecs zstd on a sample: decoded bytes per second on one thread (the sample as one chunk), encoded /
    decoded bytes, the rate at smaller chunk sizes (``(decoded bytes of a chunk, rate)``, ascending), how many
    times faster our decode pool decodes than one thread (``((threads, speedup),)``) and the spreads of the rate
    and the speedup (``(("decode_bps", low, high), ("decode_speedup", low, high))``)."""

    decode_bps: float
    ratio: float
    curve: tuple[tuple[int, float], ...] = ()
    speedup: tuple[tuple[int, float], ...] = ()
    spread: tuple[tuple[str, float, float], ...] = ()
    speedup_curve: tuple[tuple[int, float], ...] = ()  # (decoded bytes of a chunk, speedup) on the pool


def text_progress(stream: TextIO = sys.stderr, width: int = 30, label: str = "probing") -> Progress:
    """A one-line progress bar (``\\r``-redrawn) on ``stream``, ending with a newline at the last step."""

    def show(done: int, total: int, what: str) -> None:
        filled = width * done // max(total, 1)
        stream.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {what:<24}")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show


def deferred(progress: Progress, after_s: float = PROGRESS_AFTER_S, every_s: float = 0.1) -> Progress:
    """``progress`` for work that is usually quick: nothing until ``after_s`` seconds have passed since this
    was made, then at most one call every ``every_s`` seconds, and the last step (so a bar that was shown ends
    its line; one that never was stays unshown)."""
    start = time.monotonic()
    shown_at: list[float] = []

    def show(done: int, total: int, what: str) -> None:
        now = time.monotonic()
        if now - start < after_s and not shown_at:
            return
        if done >= total or not shown_at or now - shown_at[-1] >= every_s:
            shown_at.append(now)
            progress(done, total, what)

    return show


class _Objects:
    """PUT, GET (whole or a range) and DELETE of probe objects, on a local directory or an obstore store."""

    def __init__(self, target: str, storage_options: Mapping[str, Any] | None, secrets: Sequence[str] = ()) -> None:
        self.prefix = f"zarrmax-probe-{uuid.uuid4().hex[:12]}"
        self.target, self.storage_options, self.secrets = target, storage_options, tuple(secrets)
        scheme = target.split("://", 1)[0].lower() if "://" in target else ""
        self.local = scheme in ("", "file")
        self.label = redact(target, self.secrets)
        self.written: set[str] = set()  # remote objects PUT: the only ones to delete
        self.made: list[Path] = []  # folders above the probe's own that did not exist: removed after, too
        if self.local:
            self.root = Path(target.split("://", 1)[1] if scheme else target).expanduser() / self.prefix
            self.made = [p for p in reversed(self.root.parents) if not p.exists()]
            self.root.mkdir(parents=True)
        elif scheme == "s3":
            self.reconnect()
        else:
            raise ValueError(f"expected a local directory or an s3:// URL to probe. Got {target.split('://')[0]!r}"
                             " URLs instead.")

    def reconnect(self) -> None:
        """A fresh client, with no open connection (as ``open_dataset`` makes one); nothing to do locally."""
        if not self.local:
            from xarray_zarrmax.storage.obstore import s3_store_from_url

            source = s3_store_from_url(self.target, self.storage_options)
            self.store, self.label = source.store, source.label  # the endpoint too, never a credential
            endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT")
            if self.label.endswith(" (aws)") and endpoint:  # the store's label misses an endpoint from the environment
                self.label = f"{self.label.removesuffix(' (aws)')} ({redact(endpoint, self.secrets)})"

    def _remote(self, operation: str, name: str, request: Callable[[], T]) -> T:
        """One request (or a batch of them) to the remote store; obstore's errors become ours (`_failure`)."""
        try:
            return request()
        except Exception as err:
            failure = self._failure(operation, name, err)
        raise failure  # outside the except clause: __context__ is not the original, whose text may hold secrets

    def _failure(self, operation: str, name: str, err: Exception) -> BaseException:
        """A `StoreAccessError` (a FileNotFoundError for a bucket that does not exist) naming the place probed,
        the request and the store's reason in one line, with the original (its text credentials-masked) as
        ``__cause__``: obstore's own errors are no OSError and carry a two-kilobyte dump of the request."""
        import obstore.exceptions as oe

        request = f"{operation} of {self.prefix}/{name}"
        reason = one_line_reason(err, self.secrets)
        text = str(err)
        failure: BaseException
        if "NoSuchBucket" in text:
            failure = FileNotFoundError(f"probing the store at {self.label}: the bucket does not exist ({request}: "
                                        f"{reason})")
        elif isinstance(err, oe.PermissionDeniedError | oe.UnauthenticatedError) or _status(text) in (401, 403):
            failure = StoreAccessError(f"probing the store at {self.label}: the {request} was refused ({reason}); "
                                       "check the credentials (storage_options, or AWS_* in the environment) and "
                                       "that they may write there")
        else:
            failure = StoreAccessError(f"probing the store at {self.label}: the {request} failed ({reason})")
        failure.__cause__ = scrubbed(err, self.secrets)
        return failure

    def put(self, name: str, data: bytes) -> None:
        if self.local:
            (self.root / name).write_bytes(data)
        else:
            import obstore

            self._remote("PUT", name, lambda: obstore.put(self.store, f"{self.prefix}/{name}", data))
            self.written.add(name)

    def get(self, name: str, nbytes: int) -> int:
        """The first ``nbytes`` bytes of an object; returns how many came."""
        if self.local:
            fd = os.open(self.root / name, os.O_RDONLY)
            try:
                return len(os.pread(fd, nbytes, 0))
            finally:
                os.close(fd)
        import obstore

        return len(self._remote("GET", name, lambda: obstore.get_range(self.store, f"{self.prefix}/{name}", start=0,
                                                                     end=nbytes)))

    def get_many(self, name: str, nbytes: int, count: int) -> None:
        """``count`` GETs of the first ``nbytes`` bytes at once (async on the I/O loop); local: one after the
        other, as our reader reads local files in the calling thread."""
        if self.local:
            for _ in range(count):
                self.get(name, nbytes)
            return
        import asyncio

        import obstore

        from xarray_zarrmax.core.loop import run_sync

        async def gets() -> None:
            await asyncio.gather(*(obstore.get_range_async(self.store, f"{self.prefix}/{name}", start=0,
                                                           end=nbytes) for _ in range(count)))

        self._remote(f"{count} GETs at once", name, lambda: run_sync(gets()))

    def cleanup(self, names: list[str]) -> None:
        if self.local:
            for name in names:
                (self.root / name).unlink(missing_ok=True)
            self.root.rmdir()
            for folder in reversed(self.made):  # deepest first; one someone else filled meanwhile stays
                try:
                    folder.rmdir()
                except OSError:
                    break
        else:
            import obstore

            for name in names:
                if name in self.written:
                    self._remote("DELETE", name, partial(obstore.delete, self.store, f"{self.prefix}/{name}"))


_STATUS = re.compile(r"status code: (\d{3})(?: ([A-Za-z][A-Za-z ]*))?")


def _status(text: str) -> int | None:
    match = _STATUS.search(text)
    return int(match.group(1)) if match else None


def one_line_reason(err: BaseException, secrets: Sequence[str] = ()) -> str:
    """Why a store request failed, in one line and credentials masked, from an obstore error's text: the
    HTTP status and the S3 error's code and message (``403 Forbidden, SignatureDoesNotMatch: The request
    signature ...``), or the transport's failure and its cause (``HTTP error: error sending request
    (Connection refused), after 1 retries``), never its debug dump of the request."""
    text = redact(str(err), secrets)
    lines = text.strip().splitlines()
    head = lines[0] if lines else type(err).__name__
    status = _STATUS.search(text)
    if status:
        parts = [" ".join(p for p in status.groups() if p).strip()]
        for tag in ("Code", "Message"):
            found = re.search(rf"<{tag}>([^<]*)</{tag}>", text)
            if found:
                parts.append(found.group(1).strip())
        reason = ", ".join(parts[:2]) + (f": {parts[2]}" if len(parts) > 2 else "")
    else:
        reason = head.split(" - ", 1)[1].strip() if " - " in head else head
        cause = re.search(r'message: "([^"]+)"', text)
        if cause and cause.group(1) not in reason:
            reason += f" ({cause.group(1)})"
    retries = re.search(r"after (\d+) retries", head)
    if retries and retries.group(1) != "0":
        reason += f", after {retries.group(1)} retries"
    return reason[:300]


def probe_place(url: str) -> str:
    """Where to probe for a store at ``url``: the folder (or prefix) holding it, not the store itself, so a
    probe cut short leaves nothing inside the Zarr hierarchy. ``s3://b/x/y.zarr`` -> ``s3://b/x``,
    ``d/y.zarr`` -> ``d``."""
    scheme, sep, path = url.rpartition("://")
    trimmed = path.rstrip("/")
    head = trimmed.rpartition("/")[0]
    if sep and scheme.lower() != "file":
        return f"{scheme}{sep}{head or trimmed.split('/')[0]}"  # a bucket's top level: the bucket
    if not head:
        head = "/" if trimmed.startswith("/") else "."  # "/x.zarr" lies in "/", "x.zarr" in "."
    return f"{scheme}{sep}{head}" if sep else head


def probe_store(target: str, storage_options: Mapping[str, Any] | None = None, *, large: int = 8 * 2**20,
                repeats: int = 5, parallel: int = 8, many: int = 64,
                progress: Progress | None = None) -> StoreProbe:
    """Time GETs against ``target`` (a local directory or an ``s3://bucket/prefix/``), then delete what was
    written. Errors come with the credentials masked (those in ``target``, ``storage_options`` and the
    ``AWS_*`` environment) and a note naming the place probed. A remote store's refusal or failure (wrong
    credentials, an endpoint that does not answer) is a `StoreAccessError` (an OSError) naming the place, its
    endpoint, the request and the store's reason in one line, obstore's error as its ``__cause__``; a bucket
    that does not exist, a FileNotFoundError.

    Parameters
    ----------
    large
        Bytes of the object timed for throughput (8 MiB: long enough that latency is a small part of it).
    repeats
        The least repeats of each measurement (`settle`: more until it settles, up to `tuning.PROBE_MOST` or
        `tuning.PROBE_CAP_S` seconds each); the median is taken and the quartiles kept as ``spread``.
    parallel
        GETs of the large object in flight at once for the aggregate throughput.
    many
        Small GETs at once for the work per request and per new connection.
    """
    secrets = (*url_secrets(target), *secrets_in(storage_options), *url_secrets(os.environ.get("AWS_ENDPOINT_URL", "")),
               *secrets_in({k: v for k, v in os.environ.items() if k.startswith("AWS_")}))
    try:
        return _probe_store(target, storage_options, secrets, large=large, repeats=repeats, parallel=parallel,
                            many=many, progress=progress)
    except Exception as err:
        failure = scrubbed(err, secrets)
        failure.add_note(f"while probing the store at {redact(target, secrets)} (timing a few GETs of objects "
                         "written there for the purpose)")
    raise failure  # outside the except clause: not even __context__ keeps the store's own text


def _probe_store(target: str, storage_options: Mapping[str, Any] | None, secrets: Sequence[str], *, large: int,
                 repeats: int, parallel: int, many: int, progress: Progress | None) -> StoreProbe:
    steps = 6  # PUT, the latency GETs, many at once, one stream, parallel streams, DELETE
    done = 0

    def step(what: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, steps, what)

    objects = _Objects(target, storage_options, secrets)
    names = ["large"]  # remotely, only those written are deleted
    least = max(1, repeats)
    try:
        objects.put("large", os.urandom(large))  # incompressible: no transport compression flatters it
        step("PUT probe objects")
        # Latency and work per request are timed on 16-byte ranges of the large object, as the reader asks for
        # ranges of shards: a tiny object of its own can be cheaper to serve (MinIO keeps objects under 128 KiB
        # inside their metadata file). Each is repeated until it settles (`settle`): median and quartiles.
        latency = settle(lambda: timed(lambda: objects.get("large", 16)), least=least)
        step("GET latency")
        # ``many`` GETs at once from a fresh client (a connection each, as a first read after an open opens),
        # then on the connections it opened: the difference is the work of opening them.
        def cold_gets() -> float:
            objects.reconnect()
            return timed(lambda: objects.get_many("large", 16, many))

        cold = settle(cold_gets, least=least) if not objects.local else None
        busy = settle(lambda: timed(lambda: objects.get_many("large", 16, many)), least=least)
        # Remote: the GETs overlap, so one latency is paid and the rest is work per request. Local: one after
        # the other, each a latency (already counted per round trip), so the work beyond it.
        def per_request(t: float) -> float:
            return max(0.0, (t - latency.median) / many) if not objects.local else max(0.0, t / many - latency.median)

        # The work per request and per connection from the best of the repeats, as before issue 42 and as the
        # first validation set (the tuning set) confirmed: their medians on a busy machine (load 4 on 2 cores)
        # doubled both and predicted its many-request reads on MinIO 1.7-2x slow (rank correlation 0.77 where
        # the best gave 0.96). The quartiles above the best stay their spread.
        request = [per_request(t) for t in (busy.best, busy.best, busy.high)]
        connect = [0.0] * 3 if cold is None else [max(0.0, (c - busy.best) / many)
                                                  for c in (cold.best, cold.best, cold.high)]
        step("GET many at once")
        one = settle(lambda: timed(lambda: objects.get("large", large)), least=least)
        step("GET one stream")
        with ThreadPoolExecutor(parallel) as pool:
            together = settle(lambda: timed(lambda: list(pool.map(lambda _: objects.get("large", large),
                                                                  range(parallel)))), least=least)
        step("GET in parallel")
    except BaseException as err:
        try:
            objects.cleanup(names)
        except Exception as cleanup:  # the first failure is the one to report
            err.add_note(f"deleting the probe objects failed too ({type(cleanup).__name__}: {cleanup}): delete "
                         f"{objects.prefix} under the probed place yourself")
        raise
    objects.cleanup(names)
    step("DELETE probe objects")

    def stream(t: float) -> float:
        return large / max(t - latency.median, 1e-6)

    def streams(t: float) -> float:
        return max(stream(one.median), parallel * large / max(t - latency.median, 1e-6))

    # a rate's low end comes from the slow (high) end of its timing
    spread = (("latency_s", latency.low, latency.high), ("request_s", min(request), max(request)),
              ("connect_s", min(connect), max(connect)),
              ("request_bps", stream(one.high), max(stream(one.high), stream(one.low))),
              ("aggregate_bps", streams(together.high), max(streams(together.high), streams(together.low))))
    return StoreProbe(latency.median, stream(one.median), streams(together.median), objects.local, request[0],
                      connect[0], spread)


def probe_decoder(sample: np.ndarray, *, level: int = 3, repeats: int = PROBE_LEAST,
                  sizes: tuple[int, ...] = DECODE_SIZES, threads: int | None = None) -> DecoderProbe:
    """Compress ``sample`` with zstd at ``level`` (numcodecs, as our writer and zarr-python do) and time our
    reader's decode of it into an output array (`settle`: at least ``repeats`` times, the median): as one
    chunk, and cut into chunks of each of ``sizes`` below its size (every whole piece of the sample, so each
    size decodes the same values). Then the speedup of our decode pool on ``threads`` threads (default
    ``config.threads``) over one, per chunk size (`probe_decode_speedups`)."""
    from numcodecs import Zstd

    from xarray_zarrmax.codecs.decode import ChunkCodec

    codec = Zstd(level=level)
    raw = np.ascontiguousarray(sample).reshape(-1).view(np.uint8)
    if raw.nbytes == 0:
        raise ValueError("expected a non-empty sample of the variable to probe the decoder. Got 0 bytes.")
    if any(size <= 0 for size in sizes) or repeats < 1:
        raise ValueError(f"expected chunk sizes > 0 and repeats >= 1 for the decoder probe. Got sizes {sizes!r}, "
                         f"repeats {repeats!r} instead.")

    def rate(size: int) -> tuple[Measured, int]:
        frames = [codec.encode(raw[i:i + size]) for i in range(0, raw.nbytes - size + 1, size)]
        chunk = ChunkCodec((size,), np.dtype("u1"), np.dtype("u1"), None, ("zstd",))
        out = np.empty(size, dtype=np.uint8)

        def decode_all() -> None:
            for frame in frames:
                chunk.decode_into(frame, out, "the decoder probe")

        seconds = settle(lambda: timed(decode_all), least=repeats)
        nbytes = len(frames) * size
        return (Measured(nbytes / max(seconds.median, 1e-9), nbytes / max(seconds.high, 1e-9),
                         nbytes / max(seconds.low, 1e-9), seconds.count), sum(len(f) for f in frames))

    whole, encoded = rate(raw.nbytes)
    curve = tuple((size, rate(size)[0].median) for size in sorted(set(sizes)) if size < raw.nbytes) + (
        (raw.nbytes, whole.median),)
    pool = get_config().threads if threads is None else threads
    spread: tuple[tuple[str, float, float], ...] = (("decode_bps", whole.low, whole.high),)
    speedup: tuple[tuple[int, float], ...] = ((1, 1.0),)
    speedup_curve: tuple[tuple[int, float], ...] = ()
    if pool > 1:
        # per chunk size up to the sample's (at least one): the largest's is the point, its quartiles the spread
        pieces = sorted({*(size for size in SPEEDUP_SIZES if size < raw.nbytes), min(raw.nbytes, max(SPEEDUP_SIZES))})
        ratios = dict(zip(pieces, probe_decode_speedups(raw, codec, pool, pieces, repeats=repeats), strict=True))
        top = ratios[max(ratios)]
        # nondecreasing in the chunk size, as it must be (the largest's median may move down with smaller ones)
        fitted = nondecreasing([r.median for r in ratios.values()])
        speedup = ((pool, fitted[-1]),)
        speedup_curve = tuple(zip(ratios, fitted, strict=True))
        spread += (("decode_speedup", min(top.low, fitted[-1]), max(top.high, fitted[-1])),)  # holding the point
    return DecoderProbe(whole.median, encoded / raw.nbytes, curve, speedup, spread, speedup_curve)


def probe_decode_speedups(raw: np.ndarray, codec: Any, threads: int, pieces: Sequence[int], *,
                          nbytes: int = SPEEDUP_BYTES, repeats: int = PROBE_LEAST) -> list[Measured]:
    """How many times faster our decode pool on ``threads`` threads decodes ``nbytes`` than the calling thread
    alone, in chunks of each of ``pieces``, as a local read of that many bytes is decoded
    (`local_reads.local_jobs`: jobs of about `tuning.JOB_BYTES`, at least one per thread, on
    `loop.run_batches`): ``raw``'s bytes in frames of the piece (at most the sample's size), repeated to
    ``nbytes``. Measured, not assumed: 1.1-1.35x at 2 threads here, not 2x (issue 42), and less for small chunks
    (per-chunk work holds the GIL). Each ratio is of the two back to back, the sizes in rounds
    (`paired_ratios`: each size meets the same load); their medians and quartiles (at least 1e-3: a time's
    ratio). On a shared machine the speedup moved between 0.8x and 2x from one run to the next: the quartiles
    are its spread."""
    from xarray_zarrmax.codecs.decode import ChunkCodec
    from xarray_zarrmax.core.loop import decode_pool, run_batches
    from xarray_zarrmax.read.work import split_batches

    def pair(piece: int) -> tuple[Callable[[], float], Callable[[], float]]:
        piece = max(1, min(raw.nbytes, piece))
        frames = [codec.encode(raw[i:i + piece]) for i in range(0, raw.nbytes - piece + 1, piece)]
        count = max(1, nbytes // piece)
        work = [(i, frames[i % len(frames)]) for i in range(count)]
        out = np.empty(count * piece, dtype=np.uint8)
        chunk = ChunkCodec((piece,), np.dtype("u1"), np.dtype("u1"), None, ("zstd",))

        def decode(batch: Sequence[tuple[int, bytes]]) -> None:
            for i, frame in batch:
                chunk.decode_into(frame, out[i * piece:(i + 1) * piece], "the decoder probe")

        batches = split_batches(work, max(threads, -(-count * piece // JOB_BYTES)))
        return (lambda: timed(lambda: decode(work))), (lambda: timed(lambda: run_batches(decode, batches)))

    pairs = [pair(piece) for piece in pieces]
    with set_config(threads=threads):
        decode_pool()  # started before the timing, as a reader's pool is
        ratios = paired_ratios(pairs, least=repeats)
    return [Measured(max(r.median, 1e-3), max(r.low, 1e-3), max(r.high, 1e-3), r.count, max(r.best, 1e-3))
            for r in ratios]


def probe_reader(sample: np.ndarray, *, chunk_elements: int = 64, chunks: int = 512,
                 repeats: int = 3) -> ReaderProbe:
    """Our reader's fixed work (`ReaderProbe`): the sample's first ``chunks * chunk_elements`` values written
    with zstd to a temporary directory four times and read with ``engine="zarrmax"`` (best of ``repeats``
    fresh opens; the open is not timed): as one chunk; as one shard of ``chunks`` chunks read whole; as
    ``chunks`` unsharded objects read whole; as ``chunks`` shards of 8 chunks, one chunk read from each. The
    differences per chunk, per object and per shard beyond the first give the three costs. The decoded-chunk
    cache is off while it reads: the advisor costs reads as a cold cache does."""
    import tempfile
    import warnings

    import xarray as xr
    import zarr
    from zarr.codecs import ZstdCodec

    n = chunks * chunk_elements
    if np.size(sample) == 0:  # np.resize would repeat nothing into zeros and time those
        raise ValueError("expected a non-empty sample of the variable to probe the reader. Got 0 elements.")
    flat = np.resize(np.ascontiguousarray(sample).reshape(-1), n)
    per_shard = 8  # writing 512 shards of 64 chunks took zarr-python 16 s; of 8, 2 s
    # name: (array length, inner chunk, shard, what is read)
    cases = {
        "one": (n, n, None, slice(None)),
        "many": (n, chunk_elements, n, slice(None)),
        "objects": (n, chunk_elements, None, slice(None)),
        "sparse": (n * per_shard, chunk_elements, chunk_elements * per_shard,
                   slice(None, None, chunk_elements * per_shard)),
    }
    # The reader's own work, every repeat: with the decoded-chunk cache on (`set_config(cache_bytes=...)`) a
    # repeat would copy the chunks an earlier one decoded.
    with tempfile.TemporaryDirectory(prefix="zarrmax-probe-") as root, set_config(cache_bytes=0):
        best = {}
        for name, (length, inner, shard, selection) in cases.items():
            group = zarr.open_group(f"{root}/{name}", mode="w", zarr_format=3)
            arr = group.create_array("v", shape=(length,), dtype=flat.dtype, chunks=(inner,),
                                     shards=None if shard is None else (shard,), compressors=[ZstdCodec(level=3)],
                                     dimension_names=["i"])
            arr[...] = np.resize(flat, length)
            best[name] = float("inf")
            for _ in range(repeats):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # no consolidated metadata here: the warning says so
                    ds = xr.open_dataset(f"{root}/{name}", engine="zarrmax", chunks=None)
                t0 = time.perf_counter()
                ds["v"][selection].values  # noqa: B018  # the read is the point
                best[name] = min(best[name], time.perf_counter() - t0)
    chunk_s = max(0.0, (best["many"] - best["one"]) / (chunks - 1))
    request_s = max(0.0, (best["objects"] - best["one"]) / (chunks - 1) - chunk_s)
    index_s = max(0.0, (best["sparse"] - best["one"]) / (chunks - 1) - chunk_s - 2 * request_s)
    return ReaderProbe(chunk_s, request_s, index_s, probe_index_parse())


def probe_index_parse(entries: int = 8192, repeats: int = 5) -> float:
    """Seconds per entry of our reader's parse and check of a shard index (`shard.parse_index`): a valid index
    of ``entries`` chunks stored out of grid order, as zarr's Morton order stores them, timed against one of 8
    (best of ``repeats`` each). No files: the parse is all of the cost that grows with the index."""
    import google_crc32c

    from xarray_zarrmax.codecs.sharding import ShardFormat, parse_index

    def timed(n: int) -> float:
        rng = np.random.default_rng(n)
        offsets = rng.permutation(n).astype("<u8") * 64
        raw = np.stack([offsets, np.full(n, 64, dtype="<u8")], axis=-1).tobytes()
        raw += int(google_crc32c.value(raw)).to_bytes(4, "little")
        fmt = ShardFormat(chunks_per_shard=(n,), index_at_end=True, index_big_endian=False, index_crc32c=True)
        size = 64 * n + len(raw)
        calls = max(1, 2**16 // n)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                parse_index(fmt, raw, size, "probe")
            best = min(best, (time.perf_counter() - t0) / calls)
        return best

    return max(0.0, (timed(entries) - timed(8)) / (entries - 8))
