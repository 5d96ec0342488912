"""The ground every other wing stands on: no I/O of its own, no xarray, no Zarr metadata.

- `loop`: the one asyncio I/O loop per process (started lazily, rebuilt after fork), `run_sync`, the decode pool.
- `budget`: the one request budget per process (lowered while a store says it is overloaded), and the bound on
  decoded bytes a read holds in flight; `overload`: the rules that lower and raise it, and the retry budget.
- `geometry`: pure selection arithmetic (selection -> stored objects -> chunks -> output slices).
- `bytes`: bytes in flight both ways (`Segments` fetched, `Pieces` encoded) and zero-copy views of them.
- `buffers`: pooled write buffers; `memory`: outputs aligned to huge pages.
- `accounting`: `request_counts()`; `redact`: secrets kept out of every message.
"""

from xarray_zarrmax.core.accounting import RequestCounts, StoreCounts, request_counts
from xarray_zarrmax.core.budget import limiter_stats
from xarray_zarrmax.core.bytes import Pieces, Segments, nbytes, view
from xarray_zarrmax.core.loop import decode_pool, run_sync
from xarray_zarrmax.core.redact import redact

__all__ = [
    "Pieces",
    "RequestCounts",
    "Segments",
    "StoreCounts",
    "decode_pool",
    "limiter_stats",
    "nbytes",
    "redact",
    "request_counts",
    "run_sync",
    "view",
]
