"""The one harness every table script, experiment and the asv suite share.

- `runner`: how a table script runs (`Table`: its flags, services and run; `execute`: parse, start, record
  the machine's load, run) and the flags most tables share;
- `read_layouts`: seed 000's read layouts (`Layout`, `layouts`, `write`), read and written by most tables;
- `peers`: one full read by each stack the read table compares (zarr-python tuned, zarrs, TensorStore,
  both engines), the raw and decode ceilings, and `peak_memory` of a read in a fresh process;
- `writes`: the write stacks (`Target`: the PUT and encode ceilings, ``Dataset.to_zarr``, zarrmax) and the
  writes of many small objects (`CASES`);
- `access` and `access_limits`: seed 001's field, layouts, operations and stores, and the physical limits of
  one operation (issue 13);
- `timing`: warm-up and median, seeded interleaved orders, ``warm_memory``, the machine's load and steal;
- `services`: MinIO and toxiproxy on loopback for a run (from `xarray_zarrmax.testing`);
- `process`: a harness function run in a fresh interpreter (peak memory, another source tree);
- `cache_workloads`: the decoded-chunk cache's workloads (slabs, rolling windows, epochs, revisited maps);
- `release_runs`, `release_history`, `release_plot`: the asv history over releases (`asv_bench/releases.txt`),
  its noise and regressions, and its figure, for `tables.perf_report`.
"""

from asv_bench.shared.peers import Missing, Where, peak_memory, read_engine
from asv_bench.shared.read_layouts import Layout, layouts, local_copies, write
from asv_bench.shared.runner import Session, Table, add_flags, execute
from asv_bench.shared.services import Services, running
from asv_bench.shared.timing import machine_state, median_time, shuffled_rounds, steal_ticks, warm_memory

__all__ = [
    "Layout",
    "Missing",
    "Services",
    "Session",
    "Table",
    "Where",
    "add_flags",
    "execute",
    "layouts",
    "local_copies",
    "machine_state",
    "median_time",
    "peak_memory",
    "read_engine",
    "running",
    "shuffled_rounds",
    "steal_ticks",
    "warm_memory",
    "write",
]
