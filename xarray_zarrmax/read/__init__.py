"""The read path: a selection of an array, fetched and decoded into its output.

Where a shard read goes: `plan` turns an array's stored metadata into a small picklable `ArrayPlan` (its codec,
shard format, key encoding), once at open. A dask task then calls `fetch.read_selection`: whole shards in one GET
(or one ``pread`` locally), partial shards as the index (kept by `index_cache`, only for the object version it
came from) plus coalesced ranges conditional on that version, every chunk decoded straight into the output on the
decode pool. Remote reads run on the process's one I/O loop under one request budget; local files are read in
the calling thread. `raw_zstd` reads incompressible zstd chunks from a file straight into the output.
`chunk_cache` keeps decoded chunks across reads, each used only while its object version is proven to hold.
"""

from xarray_zarrmax.read.chunk_cache import CacheInfo, cache_info, clear_cache
from xarray_zarrmax.read.fetch import Work, fetch_work, read_points, read_selection, read_selection_async
from xarray_zarrmax.read.plan import ArrayPlan, plan_array

__all__ = [
    "ArrayPlan",
    "CacheInfo",
    "Work",
    "cache_info",
    "clear_cache",
    "fetch_work",
    "plan_array",
    "read_points",
    "read_selection",
    "read_selection_async",
]
