"""The scripts that produce the tables in docs/dev/, each run from the repository root as
``.venv/bin/python -m asv_bench.tables.<name> [flags]`` (``--help`` for the flags); every table carries its own
baselines (engine="zarr", the peers, the physical ceilings), measured in the same run.

- ``throughput``: full reads per layout, local and MinIO, against every peer and the raw and decode ceilings;
- ``write_throughput``: whole-array writes per layout against the PUT and encode ceilings and ``to_zarr``;
- ``open_latency``, ``open_chunks``: opening a 277-array group behind latency; open cost against chunk count;
- ``access_patterns`` (with ``access_report``, its text and plots): seed 001's four operations per layout
  against their floor, and the advisor's predictions;
- ``decoders``: the decode ceiling per zstd and blosc decoder;
- ``writes_under_latency``, ``load_async``, ``distributed_read``, ``gpu_pipeline``: small writes behind
  latency, ``load_async``, a distributed cluster, seed 004's GPU workload;
- ``soak``: 2,000 open/read/write/close cycles per store, what the process holds along the way against each
  cache's cap (docs/dev/soak.md; tests/properties/test_soak.py asserts the same);
- ``throttling``: a MinIO with a request limit read by one process and by clusters of 4 and 8 (issue 46);
- ``chunk_cache``: the decoded-chunk cache against no cache and zarr's CacheStore (docs/dev/cache.md);
- ``compare_read``: the read table's layouts read by two source trees, interleaved (did a change slow reads?);
- ``perf_report``: the asv suite's results over releases as tables, regressions first
  (docs/dev/performance-asv.md); ``performance_doc``: reruns the tables above into
  docs/dev/performance.md.
"""
