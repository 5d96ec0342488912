"""Opening a hierarchy: what one ``xr.open_datatree`` costs in time and in requests.

The tree is `write_group_tree`'s: 10 groups over 3 levels, 100 arrays (an index coordinate and 9 variables per
group), Zarr v3, in a MinIO bucket on loopback, written once per run in ``setup_cache``, consolidated and not.
Latency 20 ms puts toxiproxy in front of MinIO, adding 20 ms to every response. Both engines get a new S3
store for every open.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import helpers
from .helpers import BUCKET, ENGINES

N_GROUPS = 10


def write_tree_data(_self: Any = None) -> dict[str, Any]:
    """``setup_cache``: the tree, unconsolidated and consolidated, in a MinIO bucket (``None`` without MinIO)."""
    import zarr

    from xarray_zarrmax.testing import minio_binary, write_group_tree

    if minio_binary() is None:
        return {"minio": None}
    root = Path.cwd().resolve() / "tree-data" / "minio"
    prefixes = {}
    with helpers.writing_minio(root) as server:
        for consolidated in (False, True):
            prefix = prefixes[consolidated] = "tree-consolidated.zarr" if consolidated else "tree.zarr"
            write_group_tree(zarr.storage.ObjectStore(server.obstore(BUCKET, prefix)), 3, consolidated=consolidated)
    return {"minio": str(root), "prefixes": prefixes}


write_tree_data.timeout = 300  # type: ignore[attr-defined]


def opener(cache: dict[str, Any], engine: str, consolidated: bool, latency_ms: int = 0,
           counts: Counter[str] | None = None) -> Callable[[], Any]:
    return helpers.minio_opener(cache, engine, consolidated, "open_datatree", latency_ms, counts)


def _check(tree: Any) -> None:
    groups = len(list(tree.subtree))
    if groups != N_GROUPS:
        raise AssertionError(f"expected {N_GROUPS} groups. Got {groups} instead.")


class OpenTree:
    """``xr.open_datatree(..., chunks={})`` of the 10-group, 100-array tree: wall time."""

    params = [ENGINES, [False, True], [0, 20]]
    param_names = ["engine", "consolidated", "latency_ms"]
    timeout = 300
    repeat = (3, 10, 10.0)
    number = 1
    setup_cache = write_tree_data
    _warm: set[tuple[Any, ...]] = set()

    def setup(self, cache: dict[str, Any], engine: str, consolidated: bool, latency_ms: int) -> None:
        self.open = opener(cache, engine, consolidated, latency_ms)
        key = (engine, consolidated, latency_ms)
        if key not in self._warm:  # once per process: imports, entrypoints, connections
            _check(self.open())
            self._warm.add(key)

    def time_open_datatree(self, cache: dict[str, Any], engine: str, consolidated: bool, latency_ms: int) -> None:
        self.open()


class OpenTreeRequests:
    """Requests (GET + LIST + HEAD) that one open of the tree sends. engine="zarrmax" counts with
    ``xarray_zarrmax.request_counts()``, engine="zarr" through a counting wrapper around its store."""

    params = [ENGINES, [False, True]]
    param_names = ["engine", "consolidated"]
    timeout = 120
    unit = "requests"
    setup_cache = write_tree_data

    def setup(self, cache: dict[str, Any], engine: str, consolidated: bool) -> None:
        self.counts: Counter[str] = Counter()
        self.open = opener(cache, engine, consolidated, 0, counts=self.counts if engine == "zarr" else None)

    def track_open_tree_requests(self, cache: dict[str, Any], engine: str, consolidated: bool) -> int:
        import xarray_zarrmax

        self.counts.clear()
        if engine == "zarrmax":
            with xarray_zarrmax.request_counts() as c:
                _check(self.open())
            return c.total("get") + c.total("list") + c.total("head")
        _check(self.open())
        return self.counts["get"] + self.counts["list"] + self.counts["head"]
