"""Output arrays placed on huge-page boundaries.

numpy advises every allocation of 4 MiB or more into transparent huge pages, but a large `malloc` starts just
past a 4 KiB page boundary, so the first and last 2 MiB of the array fall outside any whole huge page and
fault in 4 KiB at a time: about a thousand faults for a 64 MB dask block where its huge pages take 32. An
array that starts on a 2 MiB boundary inside a slightly larger allocation touches whole huge pages only; the
spare bytes at the edges are never written, so they cost address space, not memory.
"""

from __future__ import annotations

import numpy as np

from xarray_zarrmax.tuning import ALIGN_FROM_BYTES

HUGE_PAGE = 2 << 20
# Plain values only: a view of raw bytes as a dtype holding references or variable-width strings is refused.
_PLAIN_KINDS = frozenset("biufcmMSUV")


def empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``, starting on a huge-page boundary when it is large enough to use them."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < ALIGN_FROM_BYTES or dtype.kind not in _PLAIN_KINDS or dtype.hasobject:
        return np.empty(shape, dtype=dtype)
    raw = np.empty(nbytes + HUGE_PAGE, dtype=np.uint8)
    start = -raw.ctypes.data % HUGE_PAGE
    return raw[start:start + nbytes].view(dtype).reshape(shape)
