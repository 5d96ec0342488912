"""Benchmarks of xarray_zarrmax, run from the repository root (never installed with the package).

- ``benchmarks/``: the airspeed velocity (asv) suite, both engines in every benchmark (``cd asv_bench && asv run``;
  configuration in ``asv.conf.json``, results in the repository's ``.asv/``; ``bash ci/asv_smoke.sh`` runs a quick
  subset);
- ``tables/``: the scripts that produce the tables in ``docs/dev/`` (``.venv/bin/python -m asv_bench.tables.<name>
  --help``; ``performance_doc`` reruns them all);
- ``experiments/``: one-off A/B measurements behind decisions recorded in the performance analysis, one line
  each in ``experiments/README.md`` on what it showed;
- ``shared/``: the one harness all of them share (layouts, the peers' readers, timing, MinIO and toxiproxy, how
  a table script runs).
"""

import os as _os

# The benchmarks measure the read path: with the decoded-chunk cache on (XARRAY_ZARRMAX_CACHE_BYTES in the
# environment) every repeat after the first would be a copy from memory. Off unless a run asks for it; the
# cache's own benchmarks turn it on for themselves.
_os.environ.setdefault("XARRAY_ZARRMAX_CACHE_BYTES", "0")
