"""The CUDA device: CuPy arrays, pinned host buffers, per-thread streams, batched nvCOMP zstd decode.

The only module that imports cupy and nvidia-nvcomp, and only when ``device="cuda"`` is asked for, so the
package installs, imports and passes its tests without a GPU.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from xarray_zarrmax.gpu.device import Device, Event

_INSTALL_HINT = "pip install 'xarray_zarrmax[gpu]' (CUDA 12 drivers) or 'xarray_zarrmax[gpu-cu13]' (CUDA 13)"


def _import_cupy() -> Any:
    try:
        import cupy
    except ImportError as err:
        raise ImportError(f'device="cuda" requires cupy; {_INSTALL_HINT}') from err
    return cupy


def _import_nvcomp() -> Any:
    try:
        from nvidia import nvcomp
    except ImportError as err:
        raise ImportError(f'device="cuda" requires nvidia-nvcomp; {_INSTALL_HINT}') from err
    return nvcomp


class _CudaEvent(Event):
    def __init__(self, event: Any) -> None:
        self.event = event

    def synchronize(self) -> None:
        self.event.synchronize()


class CudaDevice(Device):
    """CuPy + nvCOMP. One blocking (legacy-default-stream-ordered) stream and one nvCOMP codec per thread."""

    name = "cuda"

    def __init__(self) -> None:
        self.cp = _import_cupy()
        self.nvcomp = _import_nvcomp()
        self.device_id = self.cp.cuda.Device().id
        self._local = threading.local()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        return self.cp.empty(shape, dtype=dtype)

    def pinned(self, nbytes: int) -> np.ndarray:
        import cupyx

        return cupyx.empty_pinned((nbytes,), dtype=np.uint8)

    def stream(self) -> Any:
        s = getattr(self._local, "stream", None)
        if s is None:
            # Blocking stream: work on the legacy default stream (what consumers use unless told otherwise)
            # is ordered after it, on top of the explicit wait in `publish`.
            s = self._local.stream = self.cp.cuda.Stream(non_blocking=False)
        return s

    def _codec(self, stream: Any) -> Any:
        codec = getattr(self._local, "codec", None)
        if codec is None:
            codec = self._local.codec = self.nvcomp.Codec(
                algorithm="Zstd", bitstream_kind=self.nvcomp.BitstreamKind.RAW, device_id=self.device_id,
                cuda_stream=stream.ptr,
            )
        return codec

    def to_device(self, host: np.ndarray, stream: Any) -> Any:
        dst = self.cp.empty(host.shape, dtype=host.dtype)
        dst.set(host, stream=stream)  # asynchronous: host is pinned
        return dst

    def decode_zstd(self, packed: Any, offsets: Sequence[int], sizes: Sequence[int], stream: Any,
                    out: Sequence[Any] | None = None, names: Sequence[str] | None = None) -> list[Any]:
        # ``names`` unused: nvCOMP's zstd trusts its input (its release notes: it "can only operate on valid
        # input data"), so a frame reaches it only after `codecs.zstd_frames.frames` walked it on the host.
        if not sizes:
            return []
        nvcomp = self.nvcomp
        # One device buffer carved by an offset table: no per-chunk Python objects for the inputs.
        srcs = nvcomp.as_arrays(packed, list(offsets), list(sizes), cuda_stream=stream.ptr)
        codec = self._codec(stream)
        if out is not None:
            codec.decode(srcs, out=nvcomp.as_arrays(list(out), cuda_stream=stream.ptr))
            return list(out)
        decoded = codec.decode(srcs)
        return [self.cp.asarray(a).view(self.cp.uint8).reshape(-1) for a in decoded]

    def assign(self, target: Any, source: Callable[[], Any], stream: Any) -> None:
        with stream:
            target[...] = source()

    def fill(self, target: Any, value: Any, stream: Any) -> None:
        with stream:
            target.fill(value)

    def record(self, stream: Any) -> _CudaEvent:
        event = self.cp.cuda.Event(block=False, disable_timing=True)
        event.record(stream)
        return _CudaEvent(event)

    def publish(self, stream: Any) -> None:
        self.cp.cuda.get_current_stream().wait_event(self.record(stream).event)

    def range(self, name: str) -> Any:
        return nvtx_range(name)


_device: CudaDevice | None = None
_lock = threading.Lock()


def cuda_device() -> CudaDevice:
    """The process's CUDA device (the current CuPy device), created on first use."""
    global _device
    with _lock:
        if _device is None:
            _device = CudaDevice()
        return _device


def nvtx_range(name: str) -> Any:
    """An NVTX range for profiles (read / transfer / decode / compute), or a no-op without nvtx."""
    annotate = _nvtx_annotate()
    return annotate(name) if annotate is not None else contextlib.nullcontext()


@functools.cache
def _nvtx_annotate() -> Any:
    # Looked up once: a failed import is not cached by Python, and this runs several times per shard task.
    try:
        import nvtx
    except ImportError:
        return None
    return nvtx.annotate
