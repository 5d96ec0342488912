"""Read a box of an array onto a device: fetch on the host, one copy to the device per task, batched decode.

Per task (one shard): the compressed chunks it needs are fetched as on the CPU path (one GET, or the cached
index plus coalesced ranges), packed into a pinned buffer from a reusable pool, copied to the device in one
transfer on the thread's stream, decoded there in one batched zstd call and placed into the preallocated
device output. Nothing waits on the host: the caller's stream is made to wait for the task's stream. Arrays
whose codecs the device cannot decode are decoded on the CPU and copied over once.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from xarray_zarrmax.codecs.decode import ChunkCodec
from xarray_zarrmax.core.geometry import Selection, selection_shape
from xarray_zarrmax.errors import CorruptDataError
from xarray_zarrmax.gpu.device import Device, PinnedPool
from xarray_zarrmax.read.fetch import Work, fetch_work, read_selection
from xarray_zarrmax.read.plan import ArrayPlan
from xarray_zarrmax.storage.abc import ByteSource

_pools: dict[int, PinnedPool] = {}
_pools_lock = threading.Lock()


def _after_fork() -> None:
    global _pools_lock
    _pools_lock = threading.Lock()  # a lock held by a thread that did not survive fork would never open
    _pools.clear()  # pinned buffers and CUDA state do not carry over to a child


os.register_at_fork(after_in_child=_after_fork)


def pinned_pool(device: Device) -> PinnedPool:
    with _pools_lock:
        pool = _pools.get(id(device))
        if pool is None:
            pool = _pools[id(device)] = PinnedPool(device)
        return pool


def device_decodable(codec: ChunkCodec) -> bool:
    """zstd (with or without crc32c) into the output's own layout: what the batched device decoder does."""
    return codec.direct and codec.bytes_codecs in (("zstd",), ("zstd", "crc32c"))


def read_selection_on(device: Device, plan: ArrayPlan, source: ByteSource, axes: Selection, token: str,
                      pool: PinnedPool | None = None) -> Any:
    """Read the selection into a new device array (see the module docstring and `fetch.read_selection`)."""
    pool = pool or pinned_pool(device)
    stream = device.stream()
    if not device_decodable(plan.codec):
        host = read_selection(plan, source, axes, token)
        staging = pool.acquire(host.nbytes)
        view = staging[: host.nbytes].view(host.dtype).reshape(host.shape)
        np.copyto(view, host)
        out = device.to_device(view, stream)
        pool.release(staging, device.record(stream))
        device.publish(stream)
        return out

    out = device.empty(selection_shape(axes), plan.dtype)
    if out.size == 0:
        return out
    with device.range("zarrmax::read"):
        work = fetch_work(plan, source, axes, token)
    _decode_on(device, plan, out, work, stream, pool)
    device.publish(stream)
    return out


_ALIGN = 16  # nvCOMP wants each compressed frame 16-byte aligned in the batch buffer


def _decode_on(device: Device, plan: ArrayPlan, out: Any, work: list[Work], stream: Any, pool: PinnedPool) -> None:
    present = [w for w in work if w.raw is not None]
    for w in work:
        if w.raw is None:
            device.fill(out[(*w.piece.out_region, Ellipsis)], plan.fill_value, stream)
    if not present:
        return
    framed = [plan.codec.frame(w.raw, w.where, single_frame=True) for w in present]
    frames = [data for data, _, _ in framed]
    names = [w.where for w in present]
    sizes = [len(f) for f in frames]
    offsets = [0]
    for n in sizes[:-1]:
        offsets.append(offsets[-1] + -(-n // _ALIGN) * _ALIGN)
    total = offsets[-1] + sizes[-1]
    with device.range("zarrmax::transfer"):
        staging = pool.acquire(total)
        for frame, start in zip(frames, offsets, strict=True):
            staging[start:start + len(frame)] = np.frombuffer(frame, dtype=np.uint8)
        packed = device.to_device(staging[:total], stream)  # one transfer for the whole task
        pool.release(staging, device.record(stream))  # reusable once that transfer has run
    targets = [out[(*w.piece.out_region, Ellipsis)] for w in present]
    shape, nbytes = plan.codec.chunk_shape, plan.codec.nbytes
    # Chunks that are whole and contiguous in the output decode straight into it; any other batch decodes
    # into temporaries that are then copied into place on the device.
    # A frame that does not declare its size decodes into a temporary whose size is checked: straight into
    # the output, one that decodes short would leave the rest of its chunk unwritten, unseen.
    direct = all(w.piece.covers_chunk and t.shape == shape and t.flags.c_contiguous
                 for w, t in zip(present, targets, strict=True)) and all(d is not None for _, _, d in framed)
    with device.range("zarrmax::decode"):
        if direct:
            device.decode_zstd(packed, offsets, sizes, stream,
                               out=[t.reshape(-1).view(np.uint8) for t in targets], names=names)
            return
        decoded = device.decode_zstd(packed, offsets, sizes, stream, names=names)
    for i, (w, target) in enumerate(zip(present, targets, strict=True)):

        def chunk(i: int = i, region: tuple[Any, ...] = w.piece.chunk_index(), where: str = w.where) -> Any:
            raw = decoded[i]
            if raw.size != nbytes:
                raise CorruptDataError(f"{where}: decoded {raw.size} bytes, expected {nbytes}")
            return raw.view(plan.dtype).reshape(shape)[region]

        device.assign(target, chunk, stream)
