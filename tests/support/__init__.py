"""Helpers shared by the test files; a test file imports helpers from here, never from another test file.
Shared pytest fixtures (``minio``, ``bucket``, ``toxiproxy``, ``store_factory``, ``where``) are in tests/conftest.py.

- `stores`: where test data lives, one interface over a local directory, zarr's MemoryStore, MinIO and Icechunk
  (`StoreFactory`, `Written`, `STORE_KINDS`).
- `strategies`: hypothesis strategies for the equivalence suites (arrays, groups, selections, edits).
- `datasets`: example datasets (`era5_like`, the write tests' `sample`) and `write_with_zarr`, which stores an
  ERA5-like Dataset with zarr-python.
- `compare`: engine="zarrmax" against engine="zarr": `assert_same_dataset`, `assert_same_values`, `check_reads`
  (a store read back by both engines), `s3_oracle`, `builtin_types` (of an error).
- `corrupt`: a small sharded store and the means to corrupt it (`sharded_store`, `shard_file`, `rewrite_index`,
  `read_all`).
- `changes`: data changed under an open Dataset (`CASES`, `create_case`, `change_case`, `read_selections`).
- `inflight`: `InFlight`, a store wrapper counting the GETs in flight at once.
- `targets`: `write` to the ``where`` fixture's target, `counter` for fresh prefixes on the session's bucket.
- `writers`: the concurrent-writers scenario (`NWRITERS` writers, two shards; `write_step`, `one_step`, ...).
- `killing`: a writer run as a child process and killed partway (`WriterSpec`; run as ``python -m
  tests.support.killing``), and what a process has under way in /proc (`writing_into`, `sending_to`).
- `read_markers`: `ReadMarkers`, a dask worker plugin marking each read's start and end (`reads_in_flight`,
  `reads_done`); imports distributed.
"""
