"""Full reads that end in GPU memory (``device="cuda"``); skipped without ``cupy`` and a CUDA device.

engine="zarr": zarr-python under ``zarr.config.enable_gpu()`` (GPU buffers; its codecs decide where decoding
runs). engine="zarrmax": ``open_dataset(..., device="cuda")`` (CuPy + nvCOMP; also needs ``nvidia-nvcomp``),
skipped at commits whose backend has no ``device`` argument yet. Result: a CuPy array, synchronized.
Data: the local-directory copies written by the read benchmarks' ``setup_cache`` (shared).
"""

from __future__ import annotations

from typing import Any

from . import requires_gpu, skip
from .helpers import CUBE, ENGINES, SHARDED, WORKERS, ReadTarget, _Read, median_time


def zarrmax_takes_device() -> bool:
    from xarray_zarrmax.backend import ZarrmaxBackendEntrypoint

    return "device" in ZarrmaxBackendEntrypoint.open_dataset_parameters


def read_to_device(target: ReadTarget, device: str) -> Any:
    """Open and read the whole array into device memory; returns the device array (synchronized)."""
    import cupy
    import dask
    import zarr

    with dask.config.set(scheduler="threads", num_workers=WORKERS):
        if target.engine == "zarr":
            with zarr.config.enable_gpu():
                out = target.open()["v"].data.compute()
        else:
            out = target.open(device=device)["v"].data.compute()
    if not isinstance(out, cupy.ndarray):
        raise AssertionError(f"expected a cupy array on {device!r}. Got {type(out).__module__}.{type(out).__name__}")
    cupy.cuda.Device().synchronize()
    return out


class ReadGPU(_Read):
    """Full read of a sharded array into GPU memory, local directory."""

    params = [ENGINES, ["cuda"], [SHARDED, CUBE]]
    param_names = ["engine", "device", "layout"]

    def setup(self, cache: dict[str, Any], engine: str, device: str, layout: str) -> None:
        requires_gpu(nvcomp=engine == "zarrmax")
        if engine == "zarr":
            import zarr

            if not hasattr(zarr.config, "enable_gpu"):
                skip("this zarr has no zarr.config.enable_gpu()", service=False)
        elif not zarrmax_takes_device():
            skip("xarray_zarrmax at this commit has no device argument", service=False)
        self.target = ReadTarget(cache, engine, layout, "local")

    def time_read_to_device(self, cache: dict[str, Any], engine: str, device: str, layout: str) -> None:
        read_to_device(self.target, device)

    def track_read_throughput_to_device(self, cache: dict[str, Any], engine: str, device: str, layout: str) -> float:
        """GB/s into device memory, median of 3 reads after a warm-up read."""
        return self.target.nbytes / median_time(lambda: read_to_device(self.target, device)) / 1e9

    track_read_throughput_to_device.unit = "GB/s"  # type: ignore[attr-defined]
