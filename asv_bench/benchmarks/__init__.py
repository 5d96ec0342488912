"""airspeed velocity (asv) benchmarks for xarray_zarrmax.

Every read benchmark takes ``engine`` as its first parameter, ``"zarr"`` (xarray's own Zarr backend on
zarr-python) or ``"zarrmax"``, and every write benchmark ``stack`` (the baselines among them), so each run
carries its own baseline. Modules, one per area:

- ``open_dataset``: opening a 277-array group on MinIO, with and without consolidated metadata and added latency;
- ``read``: full reads of the layouts of ``asv_bench/throughput.py`` from a local directory and from MinIO
  (time, GB/s, peak memory, fraction of the raw-GET ceiling), and with a ``distributed`` cluster;
- ``write``: whole-array writes of the same layouts (time, peak memory) by ``xarray_zarrmax.to_zarr``,
  ``Dataset.to_zarr``, the raw PUT ceiling and the encode ceiling (``asv_bench/write_throughput.py``'s stacks);
- ``gpu``: the same reads ending in GPU memory (``device="cuda"``).

Shared pieces (skips, services, data, the engines' read calls) are in ``helpers``. A benchmark whose
prerequisite is missing (the MinIO or toxiproxy binary, ``distributed``, ``cupy`` with a CUDA device) raises
``NotImplementedError`` in ``setup``, which asv reports as skipped. ``ZARRMAX_ASV_STRICT=1`` turns a missing
MinIO, toxiproxy or ``distributed`` into a failure instead (``ci/asv_smoke.sh`` sets it).
"""
