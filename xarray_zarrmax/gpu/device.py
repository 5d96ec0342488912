"""Where decoded data lands: the small device interface the GPU pipeline is written against.

`HostDevice` implements it with NumPy so CI exercises the pipeline's batching, pinned-buffer pool and
stream ordering without a GPU; with ``deferred=True`` every stream operation is queued and runs only when
something waits for it, as on a GPU, so a buffer reused too early shows up as wrong data in tests.
`xarray_zarrmax.gpu.cuda.CudaDevice` implements it with CuPy and nvCOMP.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from xarray_zarrmax.errors import CorruptDataError


class Event:
    """Marks a point in a stream's work; `synchronize` blocks the host until the work before it is done."""

    def synchronize(self) -> None:
        raise NotImplementedError


class Device:
    """What the pipeline asks of a device. Arrays are device arrays (NumPy for the host, CuPy for CUDA)."""

    name: str

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        raise NotImplementedError

    def pinned(self, nbytes: int) -> np.ndarray:
        """A page-locked host buffer of ``nbytes`` (uint8), the source of asynchronous copies."""
        raise NotImplementedError

    def stream(self) -> Any:
        """A stream for this thread's work (reused across tasks on the thread)."""
        raise NotImplementedError

    def to_device(self, host: np.ndarray, stream: Any) -> Any:
        """Start copying ``host`` to a new device array on ``stream``; ``host`` must stay intact until then."""
        raise NotImplementedError

    def decode_zstd(self, packed: Any, offsets: Sequence[int], sizes: Sequence[int], stream: Any,
                    out: Sequence[Any] | None = None, names: Sequence[str] | None = None) -> list[Any]:
        """Start one batched decode of the zstd frames ``packed[offsets[i]:offsets[i] + sizes[i]]``.

        With ``out`` (flat uint8 device views, one per frame, exactly the decoded size) the frames decode
        straight into them; otherwise into new device arrays, which are returned. ``names`` (array and key of
        each frame) go into errors.
        """
        raise NotImplementedError

    def assign(self, target: Any, source: Callable[[], Any], stream: Any) -> None:
        """``target[...] = source()`` in stream order (``source`` builds the view when the work runs)."""
        raise NotImplementedError

    def fill(self, target: Any, value: Any, stream: Any) -> None:
        raise NotImplementedError

    def record(self, stream: Any) -> Event:
        raise NotImplementedError

    def publish(self, stream: Any) -> None:
        """Make the caller's stream wait for ``stream`` (device-side; no host sync)."""
        raise NotImplementedError

    def range(self, name: str) -> Any:
        """A named range for profilers (NVTX on CUDA); nothing elsewhere."""
        return contextlib.nullcontext()


class PinnedPool:
    """Reusable pinned host buffers. A buffer comes back with the event of the last copy that reads it;
    it is handed out again only after that event, so a copy never reads bytes of a later task."""

    def __init__(self, device: Device, keep: int = 8) -> None:
        self.device = device
        self.keep = keep
        self._free: list[tuple[np.ndarray, Event | None]] = []
        self._lock = threading.Lock()
        self.allocated = 0

    def acquire(self, nbytes: int) -> np.ndarray:
        with self._lock:
            for i, (buf, _) in enumerate(self._free):
                if buf.nbytes >= nbytes:
                    buf, event = self._free.pop(i)
                    break
            else:
                buf, event = None, None
        if buf is None:
            self.allocated += 1
            # Powers of two (64 KiB at least): shards of one array differ by a few bytes and still share buffers.
            return self.device.pinned(max(1 << max(nbytes - 1, 1).bit_length(), 2**16))
        if event is not None:
            event.synchronize()  # the previous copy out of this buffer must have finished
        return buf

    def release(self, buf: np.ndarray, event: Event | None) -> None:
        with self._lock:
            self._free.append((buf, event))
            if len(self._free) > self.keep:
                self._free.sort(key=lambda item: item[0].nbytes)
                self._free.pop(0)  # drop the smallest; the allocator reclaims it once unreferenced


# -- the NumPy stand-in -----------------------------------------------------------------------------------


class _HostStream:
    def __init__(self, deferred: bool) -> None:
        self.deferred = deferred
        self.queue: list[Callable[[], None]] = []
        self.done = 0  # how many queued operations have run
        self.lock = threading.Lock()

    def submit(self, op: Callable[[], None]) -> None:
        if not self.deferred:
            op()
            return
        with self.lock:
            self.queue.append(op)

    def run_until(self, position: int) -> None:
        with self.lock:
            while self.done < position:
                op = self.queue[self.done]
                self.done += 1
                op()


class _HostEvent(Event):
    def __init__(self, stream: _HostStream) -> None:
        self.stream = stream
        self.position = len(stream.queue)

    def synchronize(self) -> None:
        self.stream.run_until(self.position)


class HostDevice(Device):
    """The NumPy stand-in. ``deferred=True`` queues stream work until waited for (tests only)."""

    def __init__(self, deferred: bool = False) -> None:
        self.name = "host-deferred" if deferred else "host"
        self.deferred = deferred
        self._local = threading.local()
        self.streams: list[_HostStream] = []

    def __reduce__(self) -> tuple[type, tuple[bool]]:
        # A fresh stand-in in another process (a dask worker), as "cuda" names that process's own device:
        # streams and their queued work belong to the process that made them.
        return HostDevice, (self.deferred,)

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.empty(shape, dtype=dtype)

    def pinned(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, dtype=np.uint8)

    def stream(self) -> _HostStream:
        s = getattr(self._local, "stream", None)
        if s is None:
            s = self._local.stream = _HostStream(self.deferred)
            self.streams.append(s)
        return s

    def to_device(self, host: np.ndarray, stream: _HostStream) -> np.ndarray:
        dst = np.empty_like(host)
        stream.submit(lambda: np.copyto(dst, host))
        return dst

    def decode_zstd(self, packed: np.ndarray, offsets: Sequence[int], sizes: Sequence[int], stream: _HostStream,
                    out: Sequence[np.ndarray] | None = None, names: Sequence[str] | None = None) -> list[np.ndarray]:
        import numcodecs

        codec = numcodecs.Zstd()
        # Filled when the queued work runs: readers index it from inside later stream work.
        outputs: list[np.ndarray] = list(out) if out is not None else [np.empty(0, np.uint8)] * len(sizes)

        def run() -> None:
            for i, (a, n) in enumerate(zip(offsets, sizes, strict=True)):
                try:
                    if out is not None:
                        codec.decode(packed[a:a + n], out=out[i])
                    else:
                        outputs[i] = np.frombuffer(codec.decode(packed[a:a + n]), dtype=np.uint8)
                except Exception as err:
                    where = names[i] if names is not None else f"zstd frame {i} of a batch"
                    raise CorruptDataError(f"{where}: zstd could not decode the chunk: {err}") from None

        stream.submit(run)
        return outputs

    def assign(self, target: np.ndarray, source: Callable[[], Any], stream: _HostStream) -> None:
        stream.submit(lambda: target.__setitem__(Ellipsis, source()))

    def fill(self, target: np.ndarray, value: Any, stream: _HostStream) -> None:
        stream.submit(lambda: target.fill(value))

    def record(self, stream: _HostStream) -> _HostEvent:
        return _HostEvent(stream)

    def publish(self, stream: _HostStream) -> None:
        if not self.deferred:
            return
        # the host is the consumer; a deferred stand-in only runs work when something waits for it

    def flush(self) -> None:
        """Run every queued operation (the test harness's "the consumer needs the data now")."""
        for s in self.streams:
            s.run_until(len(s.queue))
