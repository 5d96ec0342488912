"""Concurrent writers of the same shards: ``NWRITERS`` time steps in two shards, each step written by its own
writer as a region (a read-merge-write of a shard shared with 7 others); nothing may be lost."""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

import xarray_zarrmax
from tests.support.datasets import NX, NY

NWRITERS = 16
CONC = {"chunks": (1, 6, 8), "shards": (8, 6, 8)}  # 16 time steps = 2 shards, 8 writers each


def base_for_concurrency() -> xr.Dataset:
    """What the writers write into: every value -1."""
    return xr.Dataset({"v": (("time", "y", "x"), np.full((NWRITERS, NY, NX), -1.0))})


def one_step(t: int) -> xr.Dataset:
    """Time step ``t``, every value ``t``."""
    return xr.Dataset({"v": (("time", "y", "x"), np.full((1, NY, NX), float(t)))})


def expected_after_concurrency() -> xr.Dataset:
    """What the store holds once every writer wrote its step."""
    return xr.Dataset({"v": (("time", "y", "x"), np.repeat(np.arange(NWRITERS, dtype="f8"), NY * NX)
                             .reshape(NWRITERS, NY, NX))})


def write_step(target: str, t: int, storage_options: dict[str, Any] | None) -> None:
    """One writer: step ``t`` written as a region of ``target``."""
    xarray_zarrmax.to_zarr(one_step(t), target, region={"time": slice(t, t + 1)}, storage_options=storage_options)
