"""The device the ``gpu``-marked tests read onto, and moving its arrays back to NumPy.

``XARRAY_ZARRMAX_TEST_DEVICE=cuda`` (what ``ci/gpu_check.sh`` sets on a GPU machine): CUDA, and a test fails
rather than skips where CuPy, nvCOMP or a device is missing, so a GPU run cannot pass by skipping. Unset or
``host`` (CI, any machine): the NumPy stand-in, so the same tests run everywhere and cannot rot.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from xarray_zarrmax.gpu.device import HostDevice

TEST_DEVICE = os.environ.get("XARRAY_ZARRMAX_TEST_DEVICE", "host")
if TEST_DEVICE not in ("host", "cuda"):
    raise ValueError(f"XARRAY_ZARRMAX_TEST_DEVICE must be 'host' or 'cuda'. Got {TEST_DEVICE!r} instead.")


def cupy_or_fail() -> Any:
    """CuPy with a usable device, or a test failure naming what is missing."""
    try:
        import cupy
        from nvidia import nvcomp  # noqa: F401

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("cupy sees no CUDA device")
    except Exception as err:  # ImportError, or CUDARuntimeError without a driver
        pytest.fail(f"XARRAY_ZARRMAX_TEST_DEVICE=cuda, but CUDA is not usable here: {err!r}")
    return cupy


def chosen_device() -> Any:
    """``device=`` for `xr.open_dataset`: "cuda", or a `HostDevice` stand-in."""
    if TEST_DEVICE == "cuda":
        cupy_or_fail()
        return "cuda"
    return HostDevice()


def block_type() -> type:
    """The array type a device read gives: CuPy's ndarray on CUDA, NumPy's on the stand-in."""
    return cupy_or_fail().ndarray if TEST_DEVICE == "cuda" else np.ndarray


def to_host(values: Any) -> np.ndarray:
    """A device array's values as NumPy (CuPy refuses an implicit ``np.asarray``)."""
    if type(values).__module__.startswith("cupy"):
        return values.get()
    assert isinstance(values, np.ndarray), type(values)
    return values
