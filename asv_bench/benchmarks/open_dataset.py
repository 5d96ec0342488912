"""Opening a many-variable group: what one ``xr.open_dataset`` costs in time and in requests.

The group is ERA5-like: 273 data variables plus 4 coordinates (``write_many_variable_group``), in a MinIO
bucket on loopback, written once per run in ``setup_cache``. Latency 20 ms puts toxiproxy in front of MinIO,
adding 20 ms to every response; 0 ms talks to MinIO directly. Both engines get a new S3 store for every open.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from . import helpers
from .helpers import ENGINES


def opener(cache: dict[str, Any], engine: str, consolidated: bool, latency_ms: int = 0,
           counts: Counter[str] | None = None) -> Callable[[], Any]:
    return helpers.minio_opener(cache, engine, consolidated, "open_dataset", latency_ms, counts)


def _check(ds: Any) -> None:
    if len(ds.data_vars) != helpers.N_VARS:
        raise AssertionError(f"expected {helpers.N_VARS} data variables. Got {len(ds.data_vars)} instead.")


class OpenManyVariables:
    """``xr.open_dataset(..., chunks={})`` of the 277-array group: wall time."""

    params = [ENGINES, [False, True], [0, 20]]
    param_names = ["engine", "consolidated", "latency_ms"]
    timeout = 300
    repeat = (3, 10, 10.0)
    number = 1
    setup_cache = helpers.write_open_data
    _warm: set[tuple[Any, ...]] = set()

    def setup(self, cache: dict[str, Any], engine: str, consolidated: bool, latency_ms: int) -> None:
        self.open = opener(cache, engine, consolidated, latency_ms)
        key = (engine, consolidated, latency_ms)
        if key not in self._warm:  # once per process (asv reruns setup before every sample): imports, entrypoints
            _check(self.open())
            self._warm.add(key)

    def time_open_dataset(self, cache: dict[str, Any], engine: str, consolidated: bool, latency_ms: int) -> None:
        self.open()


class OpenRequests:
    """Requests (GET + LIST + HEAD) that one open of the 277-array group sends. engine="zarrmax" counts with
    ``xarray_zarrmax.request_counts()``, engine="zarr" through a counting wrapper around its store."""

    params = [ENGINES, [False, True]]
    param_names = ["engine", "consolidated"]
    timeout = 120
    unit = "requests"
    setup_cache = helpers.write_open_data

    def setup(self, cache: dict[str, Any], engine: str, consolidated: bool) -> None:
        self.counts: Counter[str] = Counter()
        self.open = opener(cache, engine, consolidated, 0, counts=self.counts if engine == "zarr" else None)

    def track_open_requests(self, cache: dict[str, Any], engine: str, consolidated: bool) -> int:
        import xarray_zarrmax

        self.counts.clear()
        if engine == "zarrmax":
            with xarray_zarrmax.request_counts() as c:
                _check(self.open())
            return c.total("get") + c.total("list") + c.total("head")
        _check(self.open())
        return self.counts["get"] + self.counts["list"] + self.counts["head"]
