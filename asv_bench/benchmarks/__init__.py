"""airspeed velocity (asv) benchmarks for xarray_zarrmax.

Every read benchmark takes ``engine`` as its first parameter, ``"zarr"`` (xarray's own Zarr backend on
zarr-python) or ``"zarrmax"``, and every write benchmark ``stack`` (the baselines among them), so each run
carries its own baseline. Modules, one per area:

- ``open_dataset``, ``open_datatree``: opening a 277-array group and a 10-group tree on MinIO, with and
  without consolidated metadata and added latency;
- ``read``: full reads of seed 000's layouts (`asv_bench.shared.read_layouts`) from a local directory and
  from MinIO (time, GB/s, peak memory, fraction of the raw-GET ceiling), with a ``distributed`` cluster, and
  by every peer of the read table;
- ``write``: whole-array writes of the same layouts by the write table's stacks (`asv_bench.shared.writes`),
  and the requests of the latency table's writes;
- ``access``: seed 001's four operations on its quick field (`asv_bench.shared.access`);
- ``gpu``: the same reads ending in GPU memory (``device="cuda"``).

The data, stacks and readers are the table scripts' own, imported from `asv_bench.shared`; what only the suite
needs (per-process services, ``setup_cache`` data, the engines' read calls) is in ``helpers``. A benchmark
whose prerequisite is missing raises ``NotImplementedError`` in ``setup`` (the ``requires_*`` functions here),
which asv reports as skipped. ``ZARRMAX_ASV_STRICT=1`` turns a missing MinIO, toxiproxy or ``distributed``
into a failure instead (``ci/asv_smoke.sh`` sets it); a missing GPU always skips.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

# asv imports this package by itself (asv_runner's SpecificImporter finds ``benchmarks`` and nothing beside
# it), so the repository root goes on sys.path for `asv_bench.shared`. Appended: an xarray_zarrmax installed
# in asv's environment (the commit being measured) still comes before the working tree's.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

warnings.filterwarnings("ignore")
os.environ.setdefault("ICECHUNK_LOG", "error")
# Read benchmarks measure the read path, not the decoded-chunk cache (off by default, and forced off here):
# every sample after the first would be a copy from memory. `cache.ChunkCache` turns it on for itself.
os.environ.setdefault("XARRAY_ZARRMAX_CACHE_BYTES", "0")


def strict() -> bool:
    """``ZARRMAX_ASV_STRICT=1``: a missing MinIO, toxiproxy or distributed fails instead of skipping."""
    return os.environ.get("ZARRMAX_ASV_STRICT", "") not in ("", "0")


def skip(reason: str, *, service: bool = True) -> None:
    """Skip the current benchmark the asv way (``NotImplementedError`` from setup); ``service``: a missing
    service or package, which fails instead when strict."""
    if service and strict():
        raise RuntimeError(f"{reason} (and ZARRMAX_ASV_STRICT is set)")
    raise NotImplementedError(reason)


def requires_minio() -> str:
    """The MinIO binary; skips without it."""
    from xarray_zarrmax.testing import minio_binary

    binary = minio_binary()
    if binary is None:
        skip("MinIO binary not found: run `bash ci/install_services.sh`")
    assert binary is not None
    return binary


def requires_toxiproxy() -> str:
    """The toxiproxy server binary; skips without it."""
    from xarray_zarrmax.testing import toxiproxy_binaries

    binaries = toxiproxy_binaries()
    if binaries is None:
        skip("toxiproxy binaries not found: run `bash ci/install_services.sh`")
    assert binaries is not None
    return binaries[0]


def requires_distributed() -> None:
    try:
        import distributed  # noqa: F401
    except ImportError:
        skip("distributed is not installed (pip install .[distributed])")


def requires_gpu(*, nvcomp: bool = False) -> Any:
    """cupy, when it imports and sees a CUDA device (and ``nvcomp``: nvidia-nvcomp imports); skips otherwise
    (never fails, even when strict)."""
    try:
        import cupy
    except Exception as e:  # ImportError, or a cupy built for another CUDA failing at import
        skip(f"cupy is not importable ({type(e).__name__}: {e})", service=False)
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no device
        skip(f"no CUDA device ({type(e).__name__}: {e})", service=False)
    if count < 1:
        skip("no CUDA device", service=False)
    if nvcomp:
        try:
            from nvidia import nvcomp as _  # noqa: F401
        except Exception as e:
            skip(f"nvidia-nvcomp is not importable ({type(e).__name__}: {e})", service=False)
    return cupy
