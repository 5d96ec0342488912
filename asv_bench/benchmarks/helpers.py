"""What only the asv suite needs: loopback services kept per benchmark process, data written once per run in
``setup_cache``, and the engines' open and read calls on that data.

asv runs ``setup_cache`` once per run in a process of its own, then every benchmark (and every parameter
combination) in a fresh process whose working directory is the cache directory. So data is written once, in
``setup_cache``, to directories under that cache directory -- local Zarr stores, and a MinIO data directory
filled through a MinIO server that is stopped again before ``setup_cache`` returns. Each benchmark process then
starts its own MinIO on that data directory (and toxiproxy, for added latency) the first time it needs one;
these are stopped at exit, and a watchdog stops them too if the process dies without running ``atexit``.
Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from asv_bench.shared import peers, read_layouts, timing

from . import requires_minio, requires_toxiproxy, skip

ENGINES = ["zarr", "zarrmax"]
# Size of each array read by the read benchmarks. Results recorded at different sizes are not comparable:
# change it for a whole machine's history, not between runs.
MIB = int(os.environ.get("ZARRMAX_ASV_MIB", "64"))
WORKERS = 16  # dask threads for both engines, as in the read table
BUCKET = "bench"
N_VARS = 273  # data variables of the open benchmarks' group (plus 4 coordinates)
CUBE = "float32 cube, 4 MB chunks in 64 MB shards"
SHARDED = "int64, 1 MB chunks in 64 MB shards"


# -- loopback services, one set per benchmark process ----------------------------------------------------

_minio: dict[str, Any] = {}
_toxiproxy: list[Any] = []
_latency_endpoints: dict[tuple[int, int], str] = {}


def _stop_with_parent(pid: int) -> None:
    """Stop ``pid`` once this process is gone, even when it dies without running ``atexit`` (asv's
    forkserver leaves through ``os._exit``; a timeout kills the whole process group, service included)."""
    subprocess.Popen(
        ["sh", "-c", f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; kill {pid} 2>/dev/null"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def _start_minio(root: Path) -> Any:
    from xarray_zarrmax.testing import MinioServer

    server = MinioServer(requires_minio(), root=root).start()
    assert server.proc is not None
    _stop_with_parent(server.proc.pid)
    return server


@atexit.register
def stop_services() -> None:
    for server in _minio.values():
        server.stop()  # stop only: the data directory belongs to setup_cache
    _minio.clear()
    for proxy in _toxiproxy:
        proxy.stop()
    _toxiproxy.clear()
    _latency_endpoints.clear()


def minio_on(root: str) -> Any:
    """This process's MinIO server on the data directory under ``root`` (written by ``setup_cache``)."""
    server = _minio.get(root)
    if server is None or server.proc is None or server.proc.poll() is not None:
        server = _minio[root] = _start_minio(Path(root))
    return server


def endpoint_with_latency(server: Any, latency_ms: int) -> str:
    """``server``'s endpoint, or a toxiproxy endpoint in front of it adding ``latency_ms`` to every response."""
    if not latency_ms:
        return str(server.endpoint)
    key = (int(server.port), int(latency_ms))
    if key not in _latency_endpoints:
        from xarray_zarrmax.testing import Toxiproxy

        if not _toxiproxy:
            proxy = Toxiproxy(requires_toxiproxy()).start()
            assert proxy.proc is not None
            _stop_with_parent(proxy.proc.pid)
            _toxiproxy.append(proxy)
        name = f"s3-{server.port}-{latency_ms}ms"
        _latency_endpoints[key] = _toxiproxy[0].proxy(name, server.port)
        _toxiproxy[0].add_toxic(name, "latency", latency=latency_ms)
    return _latency_endpoints[key]


def minio_opener(cache: dict[str, Any], engine: str, consolidated: bool, open_with: str, latency_ms: int = 0,
                 counts: Any = None) -> Callable[[], Any]:
    """A function opening ``cache``'s MinIO data with ``xr.<open_with>`` ("open_dataset", "open_datatree") and
    ``engine``; ``counts``: a Counter to count engine="zarr"'s requests into. Each call gets a new S3 store."""
    import xarray as xr
    import zarr

    if cache["minio"] is None:
        skip("MinIO binary not found when setup_cache ran: run `bash ci/install_services.sh`")
    server = minio_on(cache["minio"])
    endpoint = endpoint_with_latency(server, latency_ms)
    prefix = cache["prefixes"][consolidated]
    open_fn = getattr(xr, open_with)
    if engine == "zarr":
        def open_zarr() -> Any:
            store: Any = zarr.storage.ObjectStore(server.obstore(BUCKET, prefix, endpoint), read_only=True)
            if counts is not None:
                from xarray_zarrmax.testing import counting_store

                store = counting_store(store, counts)
            return open_fn(store, engine="zarr", chunks={}, consolidated=consolidated)

        return open_zarr
    if engine == "zarrmax":
        url, options = f"s3://{BUCKET}/{prefix}", server.storage_options(endpoint)

        def open_zarrmax() -> Any:
            return open_fn(url, engine="zarrmax", chunks={}, storage_options=options, consolidated=consolidated)

        return open_zarrmax
    raise ValueError(f"engine must be one of {ENGINES}. Got {engine!r} instead.")


@contextlib.contextmanager
def writing_minio(root: Path) -> Iterator[Any]:
    """A MinIO server on a new data directory under ``root`` for ``setup_cache`` to fill; stopped on exit,
    leaving the data for the benchmark processes' own servers."""
    server = _start_minio(root)
    try:
        server.make_bucket(BUCKET)
        yield server
    finally:
        server.stop()


# -- the read layouts of the read table ---------------------------------------------------------------------


def layouts() -> dict[str, read_layouts.Layout]:
    return {layout.name: layout for layout in read_layouts.layouts(MIB)}


LAYOUTS = list(layouts())


def layout_key(name: str) -> str:
    return f"l{LAYOUTS.index(name)}.zarr"


def write_read_data(_self: Any = None) -> dict[str, Any]:
    """``setup_cache`` of the read benchmarks (shared across classes and modules: asv keys a cache by the
    function's module and line, so one function means one copy of the data). Writes every layout to a local
    directory and, when MinIO is available, to a bucket; returns where."""
    import zarr

    from xarray_zarrmax.testing import minio_binary

    root = Path.cwd().resolve() / "read-data"
    local = root / "local"
    local.mkdir(parents=True, exist_ok=True)
    for name, layout in layouts().items():
        read_layouts.write(str(local / layout_key(name)), layout)
    minio_root = None
    if minio_binary() is not None:
        minio_root = root / "minio"
        with writing_minio(minio_root) as server:
            for name, layout in layouts().items():
                read_layouts.write(zarr.storage.ObjectStore(server.obstore(BUCKET, layout_key(name))), layout)
    os.sync()  # no writeback of what was just written competes with the timed reads
    return {"local": str(local), "minio": None if minio_root is None else str(minio_root), "mib": MIB}


write_read_data.timeout = 900  # type: ignore[attr-defined]  # asv reads a setup_cache's own timeout


def write_minio_pair(folder: str, names: tuple[str, str], write: Callable[[Any, bool], object]) -> dict[str, Any]:
    """A group written by ``write(store, consolidated)`` unconsolidated and consolidated, under ``names``, in a
    MinIO bucket under ``folder`` of the cache directory: where, for the open benchmarks' ``setup_cache``
    (``{"minio": None}`` without MinIO: the benchmarks skip)."""
    import zarr

    from xarray_zarrmax.testing import minio_binary

    if minio_binary() is None:
        return {"minio": None}
    root = Path.cwd().resolve() / folder / "minio"
    prefixes = {}
    with writing_minio(root) as server:
        for consolidated in (False, True):
            prefix = prefixes[consolidated] = names[consolidated]
            write(zarr.storage.ObjectStore(server.obstore(BUCKET, prefix)), consolidated)
    return {"minio": str(root), "prefixes": prefixes}


def write_open_data(_self: Any = None) -> dict[str, Any]:
    """``setup_cache`` of the open benchmarks: the many-variable group, unconsolidated and consolidated."""
    from xarray_zarrmax.testing import write_many_variable_group

    return write_minio_pair("open-data", ("era5.zarr", "era5-consolidated.zarr"),
                            lambda store, consolidated: write_many_variable_group(store, N_VARS,
                                                                                  consolidated=consolidated))


write_open_data.timeout = 300  # type: ignore[attr-defined]


class ReadTarget:
    """One stored layout as each engine opens it, and the raw read of its stored objects (the ceiling)."""

    def __init__(self, cache: dict[str, Any], engine: str, layout: str, store: str) -> None:
        import zarr

        from xarray_zarrmax import get_config
        from xarray_zarrmax.testing import ACCESS_KEY, SECRET_KEY

        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}. Got {engine!r} instead.")
        if cache.get("mib") != MIB:
            raise RuntimeError(f"setup_cache wrote {cache.get('mib')} MiB arrays, this process expects {MIB}")
        self.engine = engine
        self.layout = layouts()[layout]
        key = layout_key(layout)
        self.kwargs: dict[str, Any] = {}
        # A new store object for every open, for both engines: zarrmax builds its S3 store from the URL.
        if store == "local":
            path = Path(cache["local"]) / key
            self.target: Callable[[], Any] = lambda: str(path)
            self.where = peers.Where(path=str(path))
        elif store == "minio":
            if cache["minio"] is None:
                skip("MinIO binary not found when setup_cache ran: run `bash ci/install_services.sh`")
            server = minio_on(cache["minio"])
            if engine == "zarr":
                self.target = lambda: zarr.storage.ObjectStore(server.obstore(BUCKET, key), read_only=True)
            else:
                self.target = lambda: f"s3://{BUCKET}/{key}"
                self.kwargs = {"storage_options": server.storage_options()}
            self.where = peers.Where(bucket=BUCKET, prefix=key, endpoint=server.endpoint, key_id=ACCESS_KEY,
                                     secret=SECRET_KEY)
        else:
            raise ValueError(f"store must be 'local' or 'minio'. Got {store!r} instead.")
        keys = peers.stored_keys(self.where)
        self.ceiling: Callable[[], int] = lambda: peers.raw_read(self.where, keys, get_config().concurrency)

    @property
    def nbytes(self) -> int:
        return int(self.layout.nbytes)

    def open(self, **kwargs: Any) -> Any:
        import xarray as xr

        extra: dict[str, Any] = {"consolidated": False} if self.engine == "zarr" else {}
        return xr.open_dataset(self.target(), engine=self.engine, chunks={}, **extra, **self.kwargs, **kwargs)

    def read(self) -> int:
        """Open and read the whole array (``.values``) on the threaded scheduler: the read table's read."""
        return int(peers.read_engine(self.target(), self.engine, WORKERS, **self.kwargs))


def median_time(fn: Callable[[], Any], repeat: int = 3) -> float:
    """Median wall time of ``repeat`` calls after one warm-up call (the table scripts' `timing.median_time`)."""
    return float(timing.median_time(fn, repeat))


# -- what several benchmark classes share (a leading underscore: asv does not take them for benchmarks) --------


class _Read:
    """A full read of each layout written by `write_read_data`: a few samples, one read each."""

    timeout = 300
    repeat = (2, 5, 10.0)
    number = 1
    setup_cache = write_read_data


class _Open:
    """Wall time of one open of ``setup_cache``'s group with ``xr.<open_with>(..., chunks={})``; ``check`` is
    called on the first open of each process (asv reruns setup before every sample)."""

    open_with = "open_dataset"
    params = [ENGINES, [False, True], [0, 20]]
    param_names = ["engine", "consolidated", "latency_ms"]
    timeout = 300
    repeat = (3, 10, 10.0)
    number = 1
    _warm: set[tuple[Any, ...]] = set()

    def check(self, opened: Any) -> None:
        raise NotImplementedError

    def setup(self, cache: dict[str, Any], engine: str, consolidated: bool, latency_ms: int) -> None:
        self.open = minio_opener(cache, engine, consolidated, self.open_with, latency_ms)
        key = (self.open_with, engine, consolidated, latency_ms)
        if key not in self._warm:  # once per process: imports, entrypoints, connections
            self.check(self.open())
            self._warm.add(key)


class _OpenRequests:
    """Requests (GET + LIST + HEAD) one open of ``setup_cache``'s group sends. engine="zarrmax" counts with
    ``xarray_zarrmax.request_counts()``, engine="zarr" through a counting wrapper around its store."""

    open_with = "open_dataset"
    params = [ENGINES, [False, True]]
    param_names = ["engine", "consolidated"]
    timeout = 120
    unit = "requests"

    def check(self, opened: Any) -> None:
        raise NotImplementedError

    def setup(self, cache: dict[str, Any], engine: str, consolidated: bool) -> None:
        self.counts: Counter[str] = Counter()
        self.open = minio_opener(cache, engine, consolidated, self.open_with, 0,
                                 counts=self.counts if engine == "zarr" else None)

    def requests(self, engine: str) -> int:
        import xarray_zarrmax

        self.counts.clear()
        if engine == "zarrmax":
            with xarray_zarrmax.request_counts() as c:
                self.check(self.open())
            return c.total("get") + c.total("list") + c.total("head")
        self.check(self.open())
        return self.counts["get"] + self.counts["list"] + self.counts["head"]
