"""Shared pieces of the asv suite: skips, loopback services, deterministic data, the engines' read calls.

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
import importlib.util
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore")
os.environ.setdefault("ICECHUNK_LOG", "error")

ENGINES = ["zarr", "zarrmax"]
# Size of each array read by the read benchmarks. Results recorded at different sizes are not comparable:
# change it for a whole machine's history, not between runs.
MIB = int(os.environ.get("ZARRMAX_ASV_MIB", "64"))
WORKERS = 16  # dask threads for both engines, as in asv_bench/throughput.py
BUCKET = "bench"
N_VARS = 273  # data variables of the open benchmarks' group (plus 4 coordinates)
CUBE = "float32 cube, 4 MB chunks in 64 MB shards"
SHARDED = "int64, 1 MB chunks in 64 MB shards"


# -- skips -----------------------------------------------------------------------------------------------


def strict() -> bool:
    """``ZARRMAX_ASV_STRICT=1``: a missing MinIO, toxiproxy or distributed fails instead of skipping."""
    return os.environ.get("ZARRMAX_ASV_STRICT", "") not in ("", "0")


def skip(reason: str, *, service: bool = True) -> None:
    """Skip the current benchmark the asv way (``NotImplementedError`` from setup)."""
    if service and strict():
        raise RuntimeError(f"{reason} (and ZARRMAX_ASV_STRICT is set)")
    raise NotImplementedError(reason)


def require_minio() -> str:
    from xarray_zarrmax.testing import minio_binary

    binary = minio_binary()
    if binary is None:
        skip("MinIO binary not found: run `bash ci/install_services.sh`")
    assert binary is not None
    return binary


def require_toxiproxy() -> str:
    from xarray_zarrmax.testing import toxiproxy_binaries

    binaries = toxiproxy_binaries()
    if binaries is None:
        skip("toxiproxy binaries not found: run `bash ci/install_services.sh`")
    assert binaries is not None
    return binaries[0]


def require_distributed() -> None:
    try:
        import distributed  # noqa: F401
    except ImportError:
        skip("distributed is not installed (pip install .[distributed])")


def require_gpu(*, nvcomp: bool = False) -> Any:
    """cupy, when it imports and sees a CUDA device (and ``nvcomp``: nvidia-nvcomp imports); skips otherwise
    (never fails, even when strict)."""
    try:
        import cupy
    except Exception as e:  # ImportError, or a cupy built for another CUDA failing at import
        skip(f"cupy is not importable ({type(e).__name__}: {e})", service=False)
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no device
        skip(f"no CUDA device ({type(e).__name__}: {e})", service=False)
    if count < 1:
        skip("no CUDA device", service=False)
    if nvcomp:
        try:
            from nvidia import nvcomp as _  # noqa: F401
        except Exception as e:
            skip(f"nvidia-nvcomp is not importable ({type(e).__name__}: {e})", service=False)
    return cupy


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

    server = MinioServer(require_minio(), root=root).start()
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
            proxy = Toxiproxy(require_toxiproxy()).start()
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


# -- the read layouts of asv_bench/throughput.py ---------------------------------------------------------

_THROUGHPUT = Path(__file__).resolve().parent.parent / "throughput.py"


def peers() -> Any:
    """``asv_bench/peers.py`` (every stack's full read, the raw and decode ceilings), as throughput.py loads it."""
    throughput()
    return sys.modules["peers"]


def load_script(name: str, path: Path) -> Any:
    """A script of asv_bench/ as a module, loaded once per process under ``name``."""
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


def throughput() -> Any:
    """``asv_bench/throughput.py`` as a module (its ``Layout``, ``layouts``, ``write``, ``ceiling_*``)."""
    return load_script("zarrmax_asv_throughput", _THROUGHPUT)


def layouts() -> dict[str, Any]:
    return {layout.name: layout for layout in throughput().layouts(MIB)}


LAYOUTS = list(layouts())


def layout_key(name: str) -> str:
    return f"l{LAYOUTS.index(name)}.zarr"


def write_read_data(_self: Any = None) -> dict[str, Any]:
    """``setup_cache`` of the read benchmarks (shared across classes and modules: asv keys a cache by the
    function's module and line, so one function means one copy of the data). Writes every layout to a local
    directory and, when MinIO is available, to a bucket; returns where."""
    import zarr

    tp = throughput()
    root = Path.cwd().resolve() / "read-data"
    local = root / "local"
    local.mkdir(parents=True, exist_ok=True)
    for name, layout in layouts().items():
        tp.write(str(local / layout_key(name)), layout)
    minio_root = None
    from xarray_zarrmax.testing import minio_binary

    if minio_binary() is not None:
        minio_root = root / "minio"
        with writing_minio(minio_root) as server:
            for name, layout in layouts().items():
                tp.write(zarr.storage.ObjectStore(server.obstore(BUCKET, layout_key(name))), layout)
    os.sync()  # no writeback of what was just written competes with the timed reads
    return {"local": str(local), "minio": None if minio_root is None else str(minio_root), "mib": MIB}


write_read_data.timeout = 900  # type: ignore[attr-defined]  # asv reads a setup_cache's own timeout


def write_open_data(_self: Any = None) -> dict[str, Any]:
    """``setup_cache`` of the open benchmarks: the many-variable group, unconsolidated and consolidated, in a
    MinIO bucket (``None`` when MinIO is missing: the benchmarks skip)."""
    import zarr

    from xarray_zarrmax.testing import minio_binary, write_many_variable_group

    if minio_binary() is None:
        return {"minio": None}
    root = Path.cwd().resolve() / "open-data" / "minio"
    prefixes = {}
    with writing_minio(root) as server:
        for consolidated in (False, True):
            prefix = prefixes[consolidated] = "era5-consolidated.zarr" if consolidated else "era5.zarr"
            write_many_variable_group(zarr.storage.ObjectStore(server.obstore(BUCKET, prefix)), N_VARS,
                                      consolidated=consolidated)
    return {"minio": str(root), "prefixes": prefixes}


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
            self.where = peers().Where(path=str(path))
        elif store == "minio":
            if cache["minio"] is None:
                skip("MinIO binary not found when setup_cache ran: run `bash ci/install_services.sh`")
            server = minio_on(cache["minio"])
            if engine == "zarr":
                self.target = lambda: zarr.storage.ObjectStore(server.obstore(BUCKET, key), read_only=True)
            else:
                self.target = lambda: f"s3://{BUCKET}/{key}"
                self.kwargs = {"storage_options": server.storage_options()}
            self.where = peers().Where(bucket=BUCKET, prefix=key, endpoint=server.endpoint, key_id=ACCESS_KEY,
                                       secret=SECRET_KEY)
        else:
            raise ValueError(f"store must be 'local' or 'minio'. Got {store!r} instead.")
        keys = peers().stored_keys(self.where)
        self.ceiling: Callable[[], int] = lambda: peers().raw_read(self.where, keys, get_config().concurrency)

    @property
    def nbytes(self) -> int:
        return int(self.layout.nbytes)

    def open(self, **kwargs: Any) -> Any:
        import xarray as xr

        extra: dict[str, Any] = {"consolidated": False} if self.engine == "zarr" else {}
        return xr.open_dataset(self.target(), engine=self.engine, chunks={}, **extra, **self.kwargs, **kwargs)

    def read(self) -> int:
        """Open and read the whole array (``.values``) on the threaded scheduler: throughput.py's read."""
        return int(throughput().read_engine(self.target(), self.engine, WORKERS, **self.kwargs))


def median_time(fn: Callable[[], Any], repeat: int = 3) -> float:
    """Median wall time of ``repeat`` calls after one warm-up call (asv_bench/benchutil.py's, shared with
    the benchmark scripts)."""
    return float(throughput().median_time(fn, repeat))
