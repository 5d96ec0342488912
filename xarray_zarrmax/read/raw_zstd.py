"""zstd chunks of raw blocks, read from a file straight into the output.

zstd stores a block it cannot shrink as is (a raw block, RFC 8878 section 3.1.1.2), so an incompressible
chunk (random values, noise-dominated mantissas, encrypted or already compressed bytes) is a frame header and
then the chunk's own bytes in 128 KiB blocks, each behind a 3-byte block header. Such a file is read with one
`preadv` that sends the headers to a scratch buffer and the blocks to their places in the output: one pass
over memory where reading into a buffer and decoding from it makes two (the decode is a copy).

Whether a file is such a frame is known from its size alone (the frame header, the chunk's bytes and a block
header per 128 KiB; a compressed block makes it smaller), and proven after the read by the headers: magic
number, no checksum or dictionary, the chunk's size declared, every block raw and of the size placed, the last
one marked last. Anything else returns False with the output's bytes undefined, and the caller decodes the
chunk as it would have, which overwrites them or fails as zarr-python does.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

import numpy as np

from xarray_zarrmax.codecs.zstd_frames import ZSTD_MAGIC

if TYPE_CHECKING:
    from xarray_zarrmax.storage.local import OpenedFile

#: Largest block zstd writes (128 KiB): an incompressible input becomes raw blocks of exactly this size.
BLOCK = 128 << 10
#: Windows above 2**27 bytes are refused by zstd's decoders unless asked for: such frames go to the decoder.
_WINDOW_LOG_MAX = 27
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def _blocks(nbytes: int) -> int:
    return max(1, -(-nbytes // BLOCK))


def _size_field(nbytes: int, single_segment: bool) -> int:
    """Bytes of the frame content size field zstd writes for ``nbytes`` (the smallest that holds it)."""
    if single_segment and nbytes < 256:
        return 1
    if 256 <= nbytes < 65_792:  # the 2-byte field stores the size less 256
        return 2
    return 4 if nbytes < 2**32 else 8


def header_length(file_size: int, nbytes: int) -> int | None:
    """The frame header's length if a file of ``file_size`` bytes can be a single frame of raw 128 KiB blocks
    holding ``nbytes``, with the header zstd writes for that size (single segment, or a window byte), else
    None. Other headers (a checksum's 4 bytes after the frame look like a longer one) go to the decoder: a
    speculative read of them would be a wasted read."""
    if nbytes <= 0:
        return None
    header = file_size - nbytes - 3 * _blocks(nbytes)
    if header in (5 + _size_field(nbytes, True), 6 + _size_field(nbytes, False)):
        return header
    return None


def read_into(file: OpenedFile, out: np.ndarray) -> bool:
    """Read ``file`` into ``out`` (the chunk's bytes, flat uint8) if it is one zstd frame of raw blocks holding
    exactly ``out.size`` bytes; False if it is not, or was cut short meanwhile (``out`` then holds anything).
    The caller checks the file did not change while it was read."""
    nbytes, size = out.size, file.size
    header = header_length(size, nbytes)
    if header is None:
        return False
    nblocks = _blocks(nbytes)
    scratch = bytearray(header + 3 * nblocks)
    heads, data = memoryview(scratch), memoryview(out)
    buffers: list[memoryview] = [heads[:header]]
    for i in range(nblocks):
        buffers.append(heads[header + 3 * i:header + 3 * i + 3])
        buffers.append(data[i * BLOCK:(i + 1) * BLOCK])
    offset = 0
    for first in range(0, len(buffers), _IOV_MAX):
        group = buffers[first:first + _IOV_MAX]
        want = sum(b.nbytes for b in group)
        if file.read_scattered(group, offset) != want:
            return False  # cut short (or a read interrupted): the caller's general path reads it again
        offset += want
    return offset == size and _valid_header(scratch, header, nbytes) and scratch[header:] == _block_headers(nbytes)


def _valid_header(scratch: bytearray, header: int, nbytes: int) -> bool:
    """Whether the frame header read is one that zstd decodes to ``nbytes`` in raw blocks of 128 KiB."""
    if int.from_bytes(scratch[:4], "little") != ZSTD_MAGIC:
        return False
    descriptor = scratch[4]
    fcs_flag, single_segment = descriptor >> 6, (descriptor >> 5) & 1
    if descriptor & 0b1111:  # reserved bit, checksum, dictionary id: the decoder's to judge
        return False
    fcs_bytes = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if fcs_bytes == 0 or 5 + (0 if single_segment else 1) + fcs_bytes != header:
        return False
    if int.from_bytes(scratch[header - fcs_bytes:header], "little") + (256 if fcs_bytes == 2 else 0) != nbytes:
        return False
    if single_segment:
        return True  # the window is the frame's size: every block fits
    window_log = 10 + (scratch[5] >> 3)
    window_size = (1 << window_log) + ((1 << window_log) >> 3) * (scratch[5] & 7)
    return window_log <= _WINDOW_LOG_MAX and window_size >= min(BLOCK, nbytes)


@functools.lru_cache(maxsize=64)
def _block_headers(nbytes: int) -> bytes:
    """The block headers of ``nbytes`` in raw blocks: 128 KiB each but the last (type 0, the last one marked)."""
    nblocks = _blocks(nbytes)
    sizes = [BLOCK] * (nblocks - 1) + [nbytes - BLOCK * (nblocks - 1)]
    return b"".join(((size << 3) | (i == nblocks - 1)).to_bytes(3, "little") for i, size in enumerate(sizes))
