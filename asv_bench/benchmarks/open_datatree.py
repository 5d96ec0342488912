"""Opening a hierarchy: what one ``xr.open_datatree`` costs in time and in requests.

The tree is `write_group_tree`'s: 10 groups over 3 levels, 100 arrays (an index coordinate and 9 variables per
group), Zarr v3, in a MinIO bucket on loopback, written once per run in ``setup_cache``, consolidated and not.
Latency 20 ms puts toxiproxy in front of MinIO, adding 20 ms to every response. Both engines get a new S3
store for every open.
"""

from __future__ import annotations

from typing import Any

from .helpers import _Open, _OpenRequests, write_minio_pair

N_GROUPS = 10


def write_tree_data(_self: Any = None) -> dict[str, Any]:
    """``setup_cache``: the tree, unconsolidated and consolidated, in a MinIO bucket (``None`` without MinIO)."""
    from xarray_zarrmax.testing import write_group_tree

    return write_minio_pair("tree-data", ("tree.zarr", "tree-consolidated.zarr"),
                            lambda store, consolidated: write_group_tree(store, 3, consolidated=consolidated))


write_tree_data.timeout = 300  # type: ignore[attr-defined]


class _Tree:
    """The 10-group tree, in ``setup_cache``, opened with ``xr.open_datatree``."""

    open_with = "open_datatree"
    setup_cache = write_tree_data

    def check(self, tree: Any) -> None:
        groups = len(list(tree.subtree))
        if groups != N_GROUPS:
            raise AssertionError(f"expected {N_GROUPS} groups. Got {groups} instead.")


class OpenTree(_Tree, _Open):
    """``xr.open_datatree(..., chunks={})`` of the 10-group, 100-array tree: wall time."""

    def time_open_datatree(self, cache: dict[str, Any], engine: str, consolidated: bool, latency_ms: int) -> None:
        self.open()


class OpenTreeRequests(_Tree, _OpenRequests):
    """Requests (GET + LIST + HEAD) that one open of the tree sends. engine="zarrmax" counts with
    ``xarray_zarrmax.request_counts()``, engine="zarr" through a counting wrapper around its store."""

    def track_open_tree_requests(self, cache: dict[str, Any], engine: str, consolidated: bool) -> int:
        return self.requests(engine)
