"""The layout advisor's cost model: pure arithmetic on geometry, no I/O.

For a candidate layout (inner chunk shape, shard shape or none) and a read (one or more box selections) it
counts what our reader sends, decision for decision as `xarray_zarrmax.read.fetch` makes them: one GET per
unsharded chunk; for a shard, one whole-object GET (in ``split_size`` parts on remote stores) when the read
needs at least ``full_shard_fraction`` of its chunks and its index is not cached, otherwise one suffix GET
of the index (``16 * n + 4`` bytes, then cached for the rest of the open) and one GET per run of chunks
coalesced within ``coalesce_gap``. Per dimension, the objects a range touches and the chunks it touches in
each come in closed form (what `geometry.plan_reads` lists, in at most three groups); objects whose
per-dimension footprints are the same fetch the same way, so a full scan of millions of chunks costs as many
simulated objects as there are distinct footprints (a handful), not millions. Nothing is materialised in
proportion to the array: only a shard's own chunks (at most `tuning.MAX_SHARD_CHUNKS`) are laid out.

Time is then ``round_trips * latency + requests * request_s + indexes * index_s + chunks * chunk_s +
bytes / bandwidth + decoded_bytes / decode_rate`` (the rate at the chunk's size): see `predict`.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from xarray_zarrmax.advise.validate import (
    is_real,
    is_whole,
    nonnegative_number,
    positive_number,
    shown,
    whole_number,
)
from xarray_zarrmax.core.geometry import Selection, task_chunks
from xarray_zarrmax.errors import AdviceInputError, AdviceTypeError


@dataclass(frozen=True, slots=True)
class Layout:
    """A candidate storage layout for one variable: inner chunks, and the shard holding them (None: unsharded)."""

    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None = None

    @property
    def outer(self) -> tuple[int, ...]:
        """The stored object's shape: the shard, or the chunk when unsharded."""
        return self.shards if self.shards is not None else self.chunks

    def chunks_per_object(self) -> int:
        return math.prod(o // c for o, c in zip(self.outer, self.chunks, strict=True))

    def encoding(self) -> dict[str, tuple[int, ...]]:
        """The ``to_zarr`` encoding entry for this layout (``chunks`` is the shard shape when sharded, as
        xarray's ``encoding["shards"]`` convention wants the inner chunk in ``chunks``)."""
        enc: dict[str, tuple[int, ...]] = {"chunks": self.chunks}
        if self.shards is not None:
            enc["shards"] = self.shards
        return enc

    def __str__(self) -> str:
        chunks = "x".join(map(str, self.chunks))
        return chunks if self.shards is None else f"{chunks} in {'x'.join(map(str, self.shards))}"


@dataclass(frozen=True, slots=True)
class Reader:
    """How our reader fetches: the `Config` fields the counts depend on, and whether the store is local
    (local files are read whole in one request; remote objects above ``split_size`` in parts)."""

    concurrency: int = 128
    full_shard_fraction: float = 0.5
    coalesce_gap: int = 2**20
    split_size: int = 16 * 2**20
    inflight_bytes: int = 512 * 2**20
    task_bytes: int = 0  # config.task_bytes (chunks={} groups small objects; advise passes the config in); 0: none
    threads: int = 1
    local: bool = False
    index_crc32c: bool = True  # zarr-python writes a crc32c after every shard index

    def __post_init__(self) -> None:
        # the ranges `Config` allows, checked here too: `rank` and `search` take a Reader built by hand (a
        # concurrency of 0 divided by zero deep in the counting)
        for name, least in (("concurrency", 1), ("threads", 1), ("split_size", 1), ("inflight_bytes", 1),
                            ("coalesce_gap", 0), ("task_bytes", 0)):
            value = whole_number(f"Reader {name}", getattr(self, name), least)
            object.__setattr__(self, name, value)
        fraction = self.full_shard_fraction
        if not is_real(fraction):
            raise AdviceTypeError(f"expected Reader full_shard_fraction as a number from 0 to 1. Got "
                                  f"{shown(fraction, typed=True)} instead.")
        if not 0 <= fraction <= 1:
            raise AdviceInputError(f"expected Reader full_shard_fraction as a number from 0 to 1. Got {fraction!r} "
                                   "instead.")
        for name in ("local", "index_crc32c"):
            if not isinstance(getattr(self, name), bool):
                raise AdviceTypeError(f"expected Reader {name} as True or False. Got "
                                      f"{shown(getattr(self, name), typed=True)} instead.")


#: The cost fields measured in seconds (a time term grows with them) and in bytes per second (shrinks).
SECONDS_COSTS = ("latency_s", "request_s", "connect_s", "index_s", "index_entry_s", "chunk_s")
RATE_COSTS = ("request_bps", "aggregate_bps", "decode_bps")
#: The dict form's name and version (`Costs.to_dict`): a saved probe result of another version is refused.
COSTS_FORMAT = "xarray_zarrmax.advise.Costs"
COSTS_VERSION = 1


@dataclass(frozen=True, slots=True)
class Costs:
    """Calibration: what a store, our reader and the decoder deliver (a probe's result, `calibrate`, or given).

    A value to keep: `to_dict` / `from_dict` (and `save` / `load`, JSON) give it back exactly, and every entry
    point takes it (``advise(costs=...)``, ``to_zarr(..., advise_options={"costs": ...})``, ``zarrmax advise
    --costs FILE``), predicting as the advice it came from did: ``local`` keeps the local reader's rules.
    """

    latency_s: float = 0.02  # first byte of a GET
    request_bps: float = 80e6  # one request's stream
    aggregate_bps: float = 2e9  # every stream together (the NIC, or the server)
    decode_bps: float = 1e9  # decoded bytes per second per thread, of large chunks
    ratio: float = 1.0  # encoded / decoded bytes of a chunk
    request_s: float = 0.0  # work per request that does not overlap (client, and server and proxy where they
    #                         share the cores): the wall time of many tiny requests at once, per request
    chunk_s: float = 0.0  # our reader's fixed work per inner chunk (hand-off, decode call, placement), wall
    index_s: float = 0.0  # our reader's work per shard index it parses (parse, check, coalesce), wall: a shard
    #                       read whole has its index parsed as much as one read through its index
    index_entry_s: float = 0.0  # and per entry of that index (its checks sort every entry): a map's shard of
    #                             7,200 chunks costs 20 times an 8-chunk shard's
    connect_s: float = 0.0  # opening a connection to a remote store, per request in flight at once: a first
    #                         read after an open opens one for each (the client's pool starts empty)
    decode_curve: tuple[tuple[int, float], ...] = ()  # (decoded bytes of a chunk, decoded bytes per second per
    #                         thread) at a few chunk sizes, ascending: zstd decodes a 16 kB chunk at half the rate
    #                         of a 1 MB one (each block's tables are built afresh). Empty: decode_bps at any size
    local: bool = False  # the store probed was local files: the local reader's rules apply (whole objects in
    #                      one request, small reads decoded in the calling thread); False: an object store's
    decode_speedup: tuple[tuple[int, float], ...] = ()  # (threads, decode time on one thread / on these), as
    #                         the decoder probe measured our decode pool: 1.1-1.35 at 2 threads, not 2. Empty:
    #                         not measured, taken as ideal (``threads``)
    speedup_curve: tuple[tuple[int, float], ...] = ()  # (decoded bytes of a chunk, speedup) at a few chunk
    #                         sizes, ascending, on ``decode_speedup``'s last point's threads (its largest size's
    #                         speedup is that point's): a pool decoding 16 kB chunks gained 1.1x where 1 MB ones
    #                         gained 1.5x (per-chunk work holds the GIL); fewer threads gain no more. Empty:
    #                         ``decode_speedup`` at any size
    spread: tuple[tuple[str, float, float], ...] = ()  # (cost, low, high): the quartiles of a probe's repeated
    #                         measurements of that cost; predictions carry them as intervals. Empty: exact.
    #                         "decode_speedup": the quartiles of the speedup at ``decode_speedup``'s last point

    def __post_init__(self) -> None:
        for name in SECONDS_COSTS:
            nonnegative_number(f"Costs {name}", getattr(self, name), "a number of seconds >= 0")
        for name in RATE_COSTS:
            positive_number(f"Costs {name}", getattr(self, name), "a positive number of bytes per second")
        positive_number("Costs ratio", self.ratio, "a positive ratio of encoded to decoded bytes")
        if not isinstance(self.local, bool):
            raise AdviceTypeError(f"expected Costs local as True (a local store) or False (an object store). Got "
                                  f"{shown(self.local, typed=True)} instead.")
        # sorted tuples whatever came in (a list of lists from JSON; sizes in any order): interpolation needs
        # ascending sizes, and a frozen Costs stays hashable
        object.__setattr__(self, "decode_curve", _points("decode_curve", self.decode_curve,
                                                         "(chunk bytes > 0, bytes/s > 0)", math.inf))
        speedup = _points("decode_speedup", self.decode_speedup, "(threads >= 1, speedup > 0)", math.inf)
        if any(n < 1 for n, _ in speedup):
            raise AdviceInputError(f"expected decode_speedup points (threads >= 1, speedup > 0). Got "
                                   f"{speedup!r} instead.")
        object.__setattr__(self, "decode_speedup", speedup)
        curve = _points("speedup_curve", self.speedup_curve, "(chunk bytes > 0, speedup > 0)", math.inf)
        if curve and not any(n > 1 for n, _ in speedup):
            raise AdviceInputError("expected Costs decode_speedup points for a speedup_curve (measured on the last "
                                   f"point's threads, above 1). Got {shown(speedup)} instead.")
        if curve and not math.isclose(curve[-1][1], speedup[-1][1], rel_tol=1e-9):
            raise AdviceInputError(f"expected Costs speedup_curve's largest size at decode_speedup's last point "
                                   f"(x{speedup[-1][1]:.6g}: the point is the speedup of large chunks). Got "
                                   f"x{curve[-1][1]:.6g} at {curve[-1][0]} bytes instead.")
        object.__setattr__(self, "speedup_curve", curve)
        object.__setattr__(self, "spread", _spread(self.spread))
        if any(name == "decode_speedup" for name, _, _ in self.spread) and not any(n > 1 for n, _ in speedup):
            raise AdviceInputError("expected Costs decode_speedup points for the spread of decode_speedup (the "
                                   "quartiles of the speedup at its last point). Got no points instead.")

    def decode_s(self, chunks: int, decoded_bytes: int) -> float:
        """Seconds on one thread to decode ``chunks`` chunks of ``decoded_bytes`` in all: at the rate of
        ``decode_curve`` for their mean size (linear in the logarithm of the size between two probed sizes,
        the end's rate beyond either end), or ``decode_bps``."""
        if decoded_bytes <= 0:
            return 0.0
        return decoded_bytes / decode_rate(self.decode_curve, decoded_bytes / max(chunks, 1), self.decode_bps)

    def speedup(self, threads: int, chunk_bytes: float = math.inf) -> float:
        """How many times faster ``threads`` threads decode chunks of ``chunk_bytes`` than one (`speedups`)."""
        return float(self.speedups(threads, np.asarray([chunk_bytes], dtype=np.float64))[0])

    def speedups(self, threads: int, chunk_bytes: np.ndarray) -> np.ndarray:
        """How many times faster ``threads`` threads decode chunks of each of ``chunk_bytes`` than one:
        ``decode_speedup`` (linear between its points, its last point's beyond them: no more than was measured),
        at most ``speedup_curve``'s at that size (linear in the logarithm of the size between two probed sizes,
        the end's beyond either end; measured on the last point's threads, so fewer threads gain no more);
        ``threads`` when not measured."""
        sizes = np.asarray(chunk_bytes, dtype=np.float64)
        if threads <= 1:
            return np.ones(sizes.shape)
        if not self.decode_speedup:
            return np.full(sizes.shape, float(threads))
        points = ((1, 1.0), *((n, s) for n, s in self.decode_speedup if n > 1))
        at = np.full(sizes.shape, float(np.interp(threads, [n for n, _ in points], [s for _, s in points])))
        if not self.speedup_curve:
            return at
        curve = np.interp(np.log(np.maximum(sizes, 1.0)), [math.log(n) for n, _ in self.speedup_curve],
                          [s for _, s in self.speedup_curve])
        return np.minimum(at, curve)  # type: ignore[no-any-return]

    def speedup_factors(self) -> tuple[float, float]:
        """The factors (low, high) the pool's decode time takes at the two ends of the speedup's spread
        (``spread``'s "decode_speedup", quartiles at ``decode_speedup``'s last point): (1, 1) without one."""
        for name, low, high in self.spread:
            if name == "decode_speedup":
                at = self.decode_speedup[-1][1]  # the time scales as 1 / speedup
                return at / high, min(at / low, sys.float_info.max)
        return 1.0, 1.0

    def factors(self) -> dict[str, tuple[float, float]]:
        """Per term with a spread: the factors (low, high) it takes at the two ends of its costs' (a rate's high
        end gives the low time). "decode_pool", the decode on the decode pool, takes the decode rate's and the
        speedup's (`speedup_factors`) together; both decode terms share the rate's (`could_beat`)."""
        out = {}
        for name, low, high in self.spread:
            if name == "decode_speedup":
                continue
            value = float(getattr(self, name))
            if value <= 0:
                continue  # a term of a zero cost is zero at any factor
            out[name] = (value / high, value / low if low > 0 else math.inf) if name in RATE_COSTS else (
                low / value, high / value)
        rate, speed = out.get("decode_bps", (1.0, 1.0)), self.speedup_factors()
        if (rate, speed) != ((1.0, 1.0), (1.0, 1.0)):
            # finite: two wide spreads multiplied could make an infinite factor, and 0 x inf a NaN time
            out["decode_pool"] = (rate[0] * speed[0], min(rate[1] * speed[1], sys.float_info.max))
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field, with its format and version (`from_dict` reads it back)."""
        out: dict[str, Any] = {"format": COSTS_FORMAT, "version": COSTS_VERSION,
                               "store": "local" if self.local else "remote"}
        for name in (*SECONDS_COSTS, *RATE_COSTS, "ratio"):
            out[name] = float(getattr(self, name))
        out["decode_curve"] = [[n, r] for n, r in self.decode_curve]
        out["decode_speedup"] = [[n, s] for n, s in self.decode_speedup]
        out["speedup_curve"] = [[n, s] for n, s in self.speedup_curve]
        out["spread"] = {name: [low, high] for name, low, high in self.spread}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Costs:
        """The `Costs` of a dict made by `to_dict` (parsed from JSON): every value checked, an unknown or
        missing field, another format or version refused, naming the field (`AdviceInputError`)."""
        if not isinstance(data, Mapping):
            raise AdviceTypeError(f"expected costs as a mapping made by Costs.to_dict(). Got "
                                  f"{shown(data, typed=True)} instead.")
        version = data.get("version")
        if data.get("format") != COSTS_FORMAT or not is_whole(version) or version != COSTS_VERSION:
            raise AdviceInputError(f"expected costs of format {COSTS_FORMAT!r} version {COSTS_VERSION} (a whole "
                                   f"number). Got format {shown(data.get('format'))}, version "
                                   f"{shown(version, typed=True)} instead.")
        fields = {*SECONDS_COSTS, *RATE_COSTS, "ratio", "decode_curve", "decode_speedup", "spread", "store"}
        optional = {"speedup_curve"}  # absent from costs saved before it was measured: none
        unknown = sorted(str(k) for k in data if k not in fields | optional | {"format", "version"})
        missing = sorted(fields - set(data))
        if unknown or missing:
            raise AdviceInputError(f"expected costs with the fields {sorted(fields)}. Got "
                                   + ", ".join(p for p in (f"unknown {unknown}" if unknown else "",
                                                           f"missing {missing}" if missing else "") if p)
                                   + " instead.")
        if data["store"] not in ("local", "remote"):
            raise AdviceInputError(f"expected costs store as 'local' or 'remote'. Got {shown(data['store'])} "
                                   "instead.")
        spread = data["spread"]
        if not isinstance(spread, Mapping):
            raise AdviceTypeError(f"expected costs spread as a mapping of cost -> [low, high]. Got "
                                  f"{shown(spread, typed=True)} instead.")
        try:
            spread_items = tuple((str(k), *v) for k, v in spread.items())
        except TypeError:
            raise AdviceTypeError(f"expected costs spread as a mapping of cost -> [low, high]. Got "
                                  f"{shown(spread)} instead.") from None
        numbers = {name: data[name] for name in (*SECONDS_COSTS, *RATE_COSTS, "ratio")}
        costs = cls(**numbers, decode_curve=data["decode_curve"], decode_speedup=data["decode_speedup"],
                    speedup_curve=data.get("speedup_curve", ()), local=data["store"] == "local", spread=spread_items)
        _check_spread_holds(costs)
        return costs

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write `to_dict` as JSON to ``path``."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Costs:
        """The `Costs` saved at ``path`` (`save`): a file that is not UTF-8 JSON (or nests too deep to parse) is
        an `AdviceInputError` naming it."""
        expected = f"expected {os.fspath(path)!r} to hold costs saved as JSON (Costs.save)"
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except UnicodeDecodeError as err:
            raise AdviceInputError(f"{expected}. Got bytes that are not UTF-8 text (at byte {err.start}) "
                                   "instead.") from None
        except RecursionError:
            raise AdviceInputError(f"{expected}. Got JSON nested too deep to parse instead.") from None
        except ValueError as err:  # JSONDecodeError, and an integer of more digits than Python converts
            raise AdviceInputError(f"{expected}. Got invalid JSON ({err}) instead.") from None
        return cls.from_dict(data)


def _points(name: str, points: Any, what: str, top: float) -> tuple[tuple[int, float], ...]:
    """``(n, value)`` pairs as sorted tuples of (int, float): n a whole number above 0, value a real number above
    0 and below ``top``, each n once (no bools or strings: ``True`` is no size anyone means)."""
    expected = f"expected {name} points {what}"
    try:
        pairs = [(n, r) for n, r in points]
    except (TypeError, ValueError):
        raise AdviceTypeError(f"{expected}. Got {shown(points, typed=True)} instead.") from None
    for n, r in pairs:
        if not (is_real(n) and is_real(r)):
            raise AdviceTypeError(f"{expected}. Got {shown((n, r), typed=True)} in {shown(points)} instead.")
        if not (math.isfinite(n) and n == int(n) and n > 0 and 0 < r < top):
            raise AdviceInputError(f"{expected}. Got {shown((n, r))} in {shown(points)} instead.")
    out = tuple(sorted((int(n), float(r)) for n, r in pairs))
    if len({n for n, _ in out}) < len(out):
        raise AdviceInputError(f"{expected}, each once. Got {shown(points)} instead.")
    return out


def _spread(spread: Any) -> tuple[tuple[str, float, float], ...]:
    """``(cost, low, high)`` triples, sorted by cost: a cost field each, 0 <= low <= high, finite."""
    expected = (f"expected Costs spread as (cost, low, high) triples, cost one of "
                f"{sorted((*SECONDS_COSTS, *RATE_COSTS, 'decode_speedup'))} and 0 <= low <= high")
    try:
        triples = [(name, low, high) for name, low, high in spread]
    except (TypeError, ValueError):
        raise AdviceTypeError(f"{expected}. Got {shown(spread, typed=True)} instead.") from None
    for name, low, high in triples:
        if not (isinstance(name, str) and is_real(low) and is_real(high)):
            raise AdviceTypeError(f"{expected}. Got {shown((name, low, high), typed=True)} instead.")
    out = tuple(sorted((name, float(low), float(high)) for name, low, high in triples))
    for name, low, high in out:
        if name not in (*SECONDS_COSTS, *RATE_COSTS, "decode_speedup") or not 0 <= low <= high < math.inf:
            raise AdviceInputError(f"{expected}. Got {(name, low, high)!r} instead.")
        if name in (*RATE_COSTS, "decode_speedup") and low <= 0:
            raise AdviceInputError(f"{expected} (a rate's low above 0). Got {(name, low, high)!r} instead.")
    if len({name for name, _, _ in out}) < len(out):
        raise AdviceInputError(f"{expected}, each cost once. Got {out!r} instead.")
    return out


def _check_spread_holds(costs: Costs) -> None:
    """Each spread of loaded ``costs`` holds its cost, ``low <= cost <= high``: the probe's always do (the median
    within its quartiles; a rate's ends from the timing's; the speedup's widened to hold its fitted point), so
    one that does not is a hand edit or another cost's numbers, and would give a range beside its prediction.
    A spread on a cost of 0 must start at 0: the probe clamps a cost measured below 0 to 0 and keeps the
    repeats' high end, which is inert (a zero cost's term is zero at any factor). Costs built in code are not
    held to this: tests draw spreads freely (`bounds` takes no spread to hold its cost)."""
    for name, low, high in costs.spread:
        value = costs.decode_speedup[-1][1] if name == "decode_speedup" else float(getattr(costs, name))
        if not low <= value <= high:
            raise AdviceInputError(f"expected costs spread of {name} holding its cost, low <= {value!r} <= high (a "
                                   f"probe's quartiles hold the cost they measured). Got [{low!r}, {high!r}] instead.")


def decode_rate(curve: Sequence[tuple[int, float]], chunk_bytes: float, default: float) -> float:
    """The decode rate at ``chunk_bytes`` from ``(size, rate)`` points in ascending size (see
    `Costs.decode_curve`)."""
    if not curve:
        return default
    sizes = [math.log(max(float(n), 1.0)) for n, _ in curve]
    return float(np.interp(math.log(max(chunk_bytes, 1.0)), sizes, [float(r) for _, r in curve]))


@dataclass(frozen=True, slots=True)
class ReadCounts:
    """What one read (a pattern) costs under one layout."""

    objects: int = 0  # stored objects touched
    requests: int = 0  # GETs, index reads included
    index_requests: int = 0
    bytes: int = 0  # bytes fetched
    decoded_bytes: int = 0  # bytes of chunks decoded
    round_trips: int = 0  # sequential latencies on the critical path
    peak_bytes: int = 0  # result + fetched-not-decoded bytes + one decoded chunk per thread
    chunks: int = 0  # inner chunks decoded
    indexes: int = 0  # shard indexes parsed: one per shard whose index is not cached, read whole or by ranges
    index_entries: int = 0  # the entries of those indexes (chunks per shard, each)
    # of the chunks decoded, those of local reads decoding under `tuning.JOB_BYTES` each, and their bytes: our
    # reader decodes them in the calling thread, read by read (`count_read`)
    calling_chunks: int = 0
    calling_bytes: int = 0

    def __add__(self, other: ReadCounts) -> ReadCounts:
        return ReadCounts(
            self.objects + other.objects, self.requests + other.requests,
            self.index_requests + other.index_requests, self.bytes + other.bytes,
            self.decoded_bytes + other.decoded_bytes, self.round_trips + other.round_trips,
            max(self.peak_bytes, other.peak_bytes), self.chunks + other.chunks, self.indexes + other.indexes,
            self.index_entries + other.index_entries, self.calling_chunks + other.calling_chunks,
            self.calling_bytes + other.calling_bytes,
        )


@dataclass(frozen=True, slots=True)
class Prediction:
    """A read's counts and its predicted seconds, with their range under the costs' spread (``low``, ``high``:
    ``seconds`` when the costs have none) and its terms (`predict_terms`)."""

    counts: ReadCounts
    seconds: float
    low: float | None = None
    high: float | None = None
    terms: Mapping[str, float] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "low", self.seconds if self.low is None else self.low)
        object.__setattr__(self, "high", self.seconds if self.high is None else self.high)


@dataclass(slots=True)
class IndexCache:
    """The shard indexes a read has seen (our reader caches them per open): each shard's position in the C-order
    grid of shards, sorted and distinct."""

    seen: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


@dataclass(frozen=True, slots=True, eq=False)
class PointRead:
    """A pointwise (vectorised) read, as `core.geometry.plan_points` plans it: every point of ``points``
    (``(n, len(dims))`` indices along the dimensions ``dims``) with every element of ``box`` along the other
    dimensions (the box's axes along ``dims`` are not used). Each chunk holding a selected element is read once."""

    dims: tuple[int, ...]
    points: np.ndarray
    box: Selection

    @property
    def size(self) -> int:
        """Elements read: the points times the box along the other dimensions."""
        return int(self.points.shape[0]) * math.prod(a.size for i, a in enumerate(self.box) if i not in self.dims)


def predict_terms(counts: ReadCounts, costs: Costs, reader: Reader) -> dict[str, float]:
    """`predict`'s seconds term by term, each keyed by the cost it grows with (``latency_s``, ``request_s``,
    ``connect_s``, ``index_s``, ``index_entry_s``, ``chunk_s``; the transfer by ``request_bps`` or
    ``aggregate_bps``, whichever bounds it; the decode by ``decode_bps``): what `Costs.spread` scales."""
    if counts.requests == 0:
        return {}
    in_flight = min(counts.requests, reader.concurrency)
    streams = costs.request_bps * in_flight
    bandwidth, bound = (streams, "request_bps") if streams < costs.aggregate_bps else (costs.aggregate_bps,
                                                                                          "aggregate_bps")
    threads = max(reader.threads, 1)
    # decoded on one thread ("decode_bps"): every chunk with one thread, else those of local reads under
    # JOB_BYTES each (`ReadCounts.calling_chunks`); the rest on the pool ("decode_pool": the speedup's spread too)
    one_chunks, one_bytes = ((counts.chunks, counts.decoded_bytes) if threads == 1 else
                             (counts.calling_chunks, counts.calling_bytes) if reader.local else (0, 0))
    pool_chunks, pool_bytes = counts.chunks - one_chunks, counts.decoded_bytes - one_bytes
    terms = {"latency_s": counts.round_trips * costs.latency_s, "request_s": counts.requests * costs.request_s,
             "connect_s": in_flight * costs.connect_s, "index_s": counts.indexes * costs.index_s,
             "index_entry_s": counts.index_entries * costs.index_entry_s, "chunk_s": counts.chunks * costs.chunk_s,
             bound: counts.bytes / bandwidth}
    if one_bytes or not pool_bytes:
        terms["decode_bps"] = costs.decode_s(one_chunks, one_bytes)
    if pool_bytes:
        terms["decode_pool"] = (costs.decode_s(pool_chunks, pool_bytes)
                                / costs.speedup(threads, pool_bytes / max(pool_chunks, 1)))
    return terms


def predict(counts: ReadCounts, costs: Costs, reader: Reader) -> float:
    """Seconds for a read: every round trip pays the latency; every request its own work (``request_s``),
    every request in flight at once a connection (``connect_s``: the read is the first after an open), every
    shard index parsed the reader's work on it (``index_s``, shards read whole included; ``index_entry_s`` per
    entry) and every inner chunk the reader's work (``chunk_s``), all probed as wall time with many at once;
    the bytes stream at the smaller of what the requests in flight and the store as a whole deliver; decoding
    runs on ``threads`` threads alongside, as many times faster than one as the decoder probe measured
    (`Costs.speedup`; one thread for each local read decoding less than `tuning.JOB_BYTES`, which our reader
    keeps in the calling thread: a batch's windows each on its own)."""
    return float(sum(predict_terms(counts, costs, reader).values()))


def predict_range(terms: Mapping[str, float], costs: Costs) -> tuple[float, float]:
    """(low, high) seconds of `predict_terms`' ``terms`` with every cost at the low, then the high end of its
    `Costs.spread` (costs without a spread as they are)."""
    factors = costs.factors()
    low = sum(t * factors.get(name, (1.0, 1.0))[0] for name, t in terms.items())
    high = sum(t * factors.get(name, (1.0, 1.0))[1] for name, t in terms.items())
    return low, high


def could_beat(terms: Mapping[str, float], best: Mapping[str, float], costs: Costs) -> bool:
    """Whether the read (or mix) of ``terms`` takes no longer than ``best``'s for some costs within their
    spread: both pay the same costs, so the difference of each term is scaled by one factor, chosen as low
    where this one pays more of it and as high where it pays less (the difference is linear in the factors,
    so its least value lies at such a corner). Stricter than overlapping intervals, which let each layout
    draw its own latency. The two decode terms share one decode rate (and the pool's, the speedup too): their
    difference is taken at the four corners of the two, as one."""
    factors = costs.factors()

    def scaled(diff: float, factor: float) -> float:  # an equal term adds nothing, even at an infinite factor
        return 0.0 if diff == 0 else diff * factor

    least = 0.0
    for name in (set(terms) | set(best)) - set(DECODE_TERMS):
        diff = terms.get(name, 0.0) - best.get(name, 0.0)
        low, high = factors.get(name, (1.0, 1.0))
        least += scaled(diff, low if diff > 0 else high)
    one, pool = (terms.get(name, 0.0) - best.get(name, 0.0) for name in DECODE_TERMS)
    least += min(scaled(one, r) + scaled(scaled(pool, r), p) for r in factors.get("decode_bps", (1.0, 1.0))
                 for p in costs.speedup_factors())
    return least <= 1e-12 * abs(sum(best.values()))  # rounding, relative: ties do not depend on the scale


#: The terms of the decode, on one thread and on the pool: they share the decode rate (`could_beat`)
DECODE_TERMS = ("decode_bps", "decode_pool")


def task_memory(shape: Sequence[int], layout: Layout, itemsize: int, ratio: float, task_bytes: int) -> int:
    """Peak bytes of one dask task of a ``chunks={}`` read: its block's decoded values plus their encoded bytes.

    A task reads whole stored objects: one, or (objects under ``task_bytes / 2``) a group of about
    ``task_bytes`` of them, as `layout.task_chunks` groups them.
    """
    block = task_chunks(shape, layout.outer, itemsize, task_bytes)  # regular grids: ints only
    decoded = itemsize * math.prod(min(b, int(n)) for b, n in zip(block, shape, strict=True) if isinstance(b, int))
    return decoded + int(decoded * ratio)


def object_nbytes(layout: Layout, itemsize: int, ratio: float) -> int:
    return int(itemsize * math.prod(layout.outer) * ratio)


def object_count(shape: Sequence[int], layout: Layout) -> int:
    return math.prod(-(-int(n) // o) for n, o in zip(shape, layout.outer, strict=True))


def objects_meet(shape: Sequence[int], itemsize: int, ratio: float, outer: np.ndarray,
                 max_object_bytes: int | None, max_objects: int | None) -> np.ndarray:
    """Per row of ``outer`` (``(k, ndim)``: each layout's objects), whether its `object_nbytes` and
    `object_count` are within the limits given (None: no limit), as those compute them."""
    outer = np.asarray(outer, dtype=np.int64).reshape(-1, len(shape))
    ok = np.ones(outer.shape[0], dtype=bool)
    if max_object_bytes is not None:  # exact below 2^53 (above, a layout may pass that the costing refuses)
        ok &= np.floor(itemsize * np.prod(outer.astype(np.float64), axis=1) * ratio) <= max_object_bytes
    if max_objects is not None:
        ok &= np.prod(-(-np.asarray(shape, dtype=np.float64)[None] // outer), axis=1) <= max_objects
    return ok


__all__ = ["Costs", "IndexCache", "Layout", "PointRead", "Prediction", "ReadCounts", "Reader",
           "could_beat",
           "decode_rate", "object_count",
           "object_nbytes", "objects_meet", "predict", "predict_range", "predict_terms", "task_memory"]
