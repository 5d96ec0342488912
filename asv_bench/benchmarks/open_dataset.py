"""Opening a many-variable group: what one ``xr.open_dataset`` costs in time and in requests.

The group is ERA5-like: 273 data variables plus 4 coordinates (``write_many_variable_group``), in a MinIO
bucket on loopback, written once per run in ``setup_cache``. Latency 20 ms puts toxiproxy in front of MinIO,
adding 20 ms to every response; 0 ms talks to MinIO directly. Both engines get a new S3 store for every open.
"""

from __future__ import annotations

from typing import Any

from .helpers import N_VARS, _Open, _OpenRequests, write_open_data


class _ManyVariables:
    """The 277-array group (273 data variables, 4 coordinates), in ``setup_cache``."""

    setup_cache = write_open_data

    def check(self, ds: Any) -> None:
        if len(ds.data_vars) != N_VARS:
            raise AssertionError(f"expected {N_VARS} data variables. Got {len(ds.data_vars)} instead.")


class OpenManyVariables(_ManyVariables, _Open):
    """``xr.open_dataset(..., chunks={})`` of the 277-array group: wall time."""

    def time_open_dataset(self, cache: dict[str, Any], engine: str, consolidated: bool, latency_ms: int) -> None:
        self.open()


class OpenRequests(_ManyVariables, _OpenRequests):
    """Requests (GET + LIST + HEAD) that one open of the 277-array group sends. engine="zarrmax" counts with
    ``xarray_zarrmax.request_counts()``, engine="zarr" through a counting wrapper around its store."""

    def track_open_requests(self, cache: dict[str, Any], engine: str, consolidated: bool) -> int:
        return self.requests(engine)
