"""One place for the knobs, with ``XARRAY_ZARRMAX_*`` environment overrides.

>>> import xarray_zarrmax
>>> xarray_zarrmax.get_config().concurrency
128
>>> with xarray_zarrmax.set_config(concurrency=256):
...     ...
"""

from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass

_ENV_PREFIX = "XARRAY_ZARRMAX_"


@dataclass(frozen=True, slots=True)
class Config:
    """Process-wide settings.

    Attributes
    ----------
    concurrency
        Most requests in flight per process, across every task and store (one budget, never nested).
    threads
        Decode threads per process.
    split_size
        Whole objects larger than this are fetched as parallel ranges of about this size (bytes).
    coalesce_gap
        Byte ranges of one object closer than this are merged into one request (bytes).
    full_shard_fraction
        A read covering at least this fraction of a shard's chunks fetches the whole shard in one GET (locally,
        a file of at most 2 MiB in one read) instead of the index plus ranges. With ``full_shard_fraction=1``
        and ``coalesce_gap=0`` a sharded read fetches only the chunks it touches and each shard's index.
    retries
        Attempts after the first for a failed request that may succeed when repeated: an overload answer (503
        SlowDown, 429), a 5xx, a broken connection. 10, what obstore's own retries allowed before we took them
        over; each retry also needs the process's retry budget, and none starts 30 s after the first attempt.
    inflight_bytes
        Most decoded bytes one read keeps fetched but not yet decoded (sizes estimated from the layout): what
        a read holds beyond its output is bounded by this, not by the number of objects it reads.
    task_bytes
        With ``chunks={}``, stored objects (shards, or chunks when unsharded) smaller than half this are read
        in groups of about this many decoded bytes, one dask task a group, stated in
        ``encoding["preferred_chunks"]``; larger objects are a task each. The default, 128 MiB, is dask's own
        ``array.chunk-size``, what ``chunks="auto"`` groups to. 0: one task per stored object, as engine="zarr".
        Any other ``chunks`` (a dict naming a dimension, "auto", an int) and opens that do not come straight
        from xarray's ``open_dataset``/``open_datatree``/``open_groups`` keep one stored object per preferred
        chunk, so xarray's alignment warnings about user chunks mean what they say.
    max_objects
        Most stored objects (shards, or chunks when unsharded) of one array for which ``chunks={}`` plans a dask
        task each. An array of more is one dask block (a selection of it still reads only what it selects),
        since no scheduler can plan that many tasks; with ``device="cuda"`` it is refused at open.
    multipart_threshold
        `to_zarr` sends an object larger than this (bytes) to S3 as a multipart upload, in parts of
        ``split_size`` (at least 5 MiB, S3's smallest part), up to 12 at once; smaller ones, and every
        conditional PUT (a merge of a partly written shard), in one request.
    cache_bytes
        Most bytes of decoded chunks the process keeps for later reads (`xarray_zarrmax.cache_info`): a read
        needing a chunk decoded before, of an object version proven unchanged, copies it instead of fetching and
        decoding it again. 0 (the default) turns the cache off. Per process: each dask worker has its own.
        Off by default (docs/dev/cache.md): the cap is memory held for the process's life, which only the user
        can budget; a read that does not come back costs nothing measurable with it on (a chunk read whole is
        kept only when decoded a second time), and re-reads gained 2.1-13x locally.
    write_buffer_bytes
        Most bytes of free buffers `to_zarr` keeps for reuse: chunks of 256 KiB and more are encoded into
        buffers given back once written to a local directory, so the next chunk does not fault in fresh pages.
        What is kept stays allocated between writes (up to this); 0 keeps none.
    """

    concurrency: int = 128
    threads: int = max(os.cpu_count() or 1, 1)
    split_size: int = 16 * 2**20
    coalesce_gap: int = 2**20
    full_shard_fraction: float = 0.5
    retries: int = 10
    inflight_bytes: int = 512 * 2**20
    max_objects: int = 10**9
    task_bytes: int = 128 * 2**20
    multipart_threshold: int = 100 * 2**20
    write_buffer_bytes: int = 256 * 2**20
    cache_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("concurrency", "threads", "split_size", "max_objects", "inflight_bytes", "multipart_threshold"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"config {name} must be an integer >= 1. Got {value!r} instead.")
        if not isinstance(self.coalesce_gap, int) or self.coalesce_gap < 0:
            raise ValueError(f"config coalesce_gap must be an integer >= 0. Got {self.coalesce_gap!r} instead.")
        if not isinstance(self.task_bytes, int) or self.task_bytes < 0:
            raise ValueError(f"config task_bytes must be an integer >= 0. Got {self.task_bytes!r} instead.")
        if not isinstance(self.cache_bytes, int) or self.cache_bytes < 0:
            raise ValueError(f"config cache_bytes must be an integer >= 0. Got {self.cache_bytes!r} instead.")
        if not isinstance(self.write_buffer_bytes, int) or self.write_buffer_bytes < 0:
            raise ValueError(
                f"config write_buffer_bytes must be an integer >= 0. Got {self.write_buffer_bytes!r} instead."
            )
        if not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"config retries must be an integer >= 0. Got {self.retries!r} instead.")
        if not 0.0 <= float(self.full_shard_fraction) <= 1.0:
            raise ValueError(
                f"config full_shard_fraction must be in [0, 1]. Got {self.full_shard_fraction!r} instead."
            )


def _parse_env(name: str, raw: str, kind: type) -> object:
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(
            f"environment variable {_ENV_PREFIX}{name.upper()} must be a {kind.__name__}. Got {raw!r} instead."
        ) from None


def config_from_env(environ: dict[str, str] | None = None) -> Config:
    """Build a `Config` from defaults overridden by ``XARRAY_ZARRMAX_<NAME>`` variables."""
    environ = dict(os.environ) if environ is None else environ
    overrides = {}
    for field in dataclasses.fields(Config):
        raw = environ.get(_ENV_PREFIX + field.name.upper())
        if raw is not None:
            overrides[field.name] = _parse_env(field.name, raw, float if field.type == "float" else int)
    return Config(**overrides)  # type: ignore[arg-type]


_base: Config = config_from_env()
_current: Config = _base
# The open set_config blocks' changes, in the order the blocks were entered. A block's exit removes its own
# entry wherever it is: "restore what was there on entry" is wrong as soon as blocks in two threads overlap.
_overrides: list[tuple[object, dict[str, object]]] = []
_lock = threading.Lock()


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()  # a lock held by a thread that did not survive fork would never open


os.register_at_fork(after_in_child=_after_fork)


def get_config() -> Config:
    """The settings in force now."""
    return _current


def _recompute() -> Config:
    config = _base
    for _, changes in _overrides:
        config = dataclasses.replace(config, **changes)  # type: ignore[arg-type]
    return config


def set_config(**changes: object) -> ConfigChange:
    """Change settings for the whole process: from this call on, or, used as a ``with`` block, until the block
    exits (as ``xarray.set_options`` and ``dask.config.set`` do).

    Process-wide, not per thread: dask's worker threads and the I/O loop's thread see the settings changed in the
    main thread. Blocks may overlap, in one thread or several, and exit in any order: the settings in force are
    always the defaults (with ``XARRAY_ZARRMAX_*`` overrides) changed by each call not yet withdrawn, in the order
    of the calls (so a later call wins a setting two change). A block's exit withdraws exactly its own changes,
    whatever blocks opened or closed meanwhile.

    Returns a `ConfigChange`, whose ``with`` block yields the settings in force after the change. Invalid values
    raise ValueError, and unknown names TypeError, before anything changes.
    """
    return ConfigChange(changes)


class ConfigChange:
    """A `set_config` call's changes, in force from the call on; as a context manager, withdrawn at the block's
    exit (a call not used as one keeps them for the life of the process)."""

    __slots__ = ("_token", "_entered")

    def __init__(self, changes: dict[str, object]) -> None:
        global _current
        self._token = object()
        with _lock:
            entered = dataclasses.replace(_current, **changes)  # type: ignore[arg-type]  # validates first
            _overrides.append((self._token, dict(changes)))
            _current = entered
        self._entered = entered

    def __enter__(self) -> Config:
        return self._entered

    def __exit__(self, *exc_info: object) -> None:
        global _current
        with _lock:
            _overrides[:] = [entry for entry in _overrides if entry[0] is not self._token]
            _current = _recompute()
