"""The frames of a zstd chunk, found by walking their headers (RFC 8878), for chunks that are not one frame.

A zstd chunk may be several frames, skippable ones among them; numcodecs (zarr-python's decoder) reads them
all and fails on bytes that are not a whole frame. python-zstandard's readers stop quietly at an incomplete
frame, so the extent of every frame is found here first: an incomplete one is an error before anything is
decoded, and each frame is then decoded alone, bounded by what the chunk has room for.
"""

from __future__ import annotations

from typing import Any

from xarray_zarrmax.errors import DecodeError

ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MASK, _SKIPPABLE_MAGIC = 0xFFFFFFF0, 0x184D2A50


def frames(data: Any, where: str) -> list[memoryview]:
    """Each zstd frame of ``data`` (skippable frames left out), as views; DecodeError naming the offset for a
    frame cut short, an unknown magic number, a reserved header bit or a reserved block type."""
    view = memoryview(data).cast("B")
    found, start = [], 0
    while start < len(view):
        end = _frame_end(view, start, where)
        if end is not None:
            found.append(view[start:end])
            start = end
        else:  # skippable: its 4-byte size says how much to skip
            start = _need(view, start + 8, where, "a skippable frame's header")
            start = _need(view, start + int.from_bytes(view[start - 4:start], "little"), where, "a skippable frame")
    return found


def _need(view: memoryview, end: int, where: str, what: str) -> int:
    if end > len(view):
        raise DecodeError(f"{where}: zstd could not decode the chunk: {what} runs past its end "
                          f"({len(view)} bytes, {end} needed)")
    return end


def _frame_end(view: memoryview, start: int, where: str) -> int | None:
    """Where the zstd frame at ``start`` ends, or None for a skippable frame there."""
    magic = int.from_bytes(view[start:_need(view, start + 4, where, "a frame's magic number")], "little")
    if magic & _SKIPPABLE_MASK == _SKIPPABLE_MAGIC:
        return None
    if magic != ZSTD_MAGIC:
        raise DecodeError(f"{where}: zstd could not decode the chunk: bytes {start}-{start + 4} are no frame "
                          f"(magic number {magic:#010x})")
    pos = _need(view, start + 5, where, "a frame header")
    descriptor = view[start + 4]
    if descriptor & 0x08:  # RFC 8878 3.1.1.1.1.4: a decoder must refuse it; nvCOMP, which trusts its input, may not
        raise DecodeError(f"{where}: zstd could not decode the chunk: the frame header at byte {start} sets the "
                          "reserved bit")
    fcs_flag, single_segment = descriptor >> 6, (descriptor >> 5) & 1
    checksum, dict_id_flag = (descriptor >> 2) & 1, descriptor & 3
    pos += (0 if single_segment else 1) + (0, 1, 2, 4)[dict_id_flag]
    pos += (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    while True:
        header = int.from_bytes(view[pos:_need(view, pos + 3, where, "a block header")], "little")
        last, block_type, size = header & 1, (header >> 1) & 3, header >> 3
        if block_type == 3:
            raise DecodeError(f"{where}: zstd could not decode the chunk: reserved block type at byte {pos}")
        pos = _need(view, pos + 3 + (1 if block_type == 1 else size), where, "a block")
        if last:
            return _need(view, pos + 4 * checksum, where, "a frame's checksum")


def decode_frames(dctx: Any, data: Any, nbytes: int, where: str) -> bytes:
    """Every frame of a chunk decoded with ``dctx``, each bounded by the room left in ``nbytes``: the bytes
    they hold, or DecodeError once they hold more than ``nbytes``."""
    import zstandard

    parts, left = [], nbytes
    for frame in frames(data, where):
        # Bounded by the room left, before anything is allocated: a declared size is checked (python-zstandard
        # allocates what a frame declares), an undeclared one bounded (at least 1: 0 means no bound).
        try:
            declared = zstandard.frame_content_size(frame)
        except zstandard.ZstdError as err:  # a header zstd refuses (a reserved bit set, say)
            raise DecodeError(f"{where}: zstd could not decode the chunk (ZstdError: {err})") from None
        if declared > left:
            raise DecodeError(f"{where}: zstd could not decode the chunk: its frames hold more than {nbytes} bytes")
        try:
            part = dctx.decompress(frame, max_output_size=max(left, 1), allow_extra_data=False)
        except zstandard.ZstdError as err:
            raise DecodeError(f"{where}: zstd could not decode the chunk (ZstdError: {err})") from None
        if len(part) > left:
            raise DecodeError(f"{where}: zstd could not decode the chunk: its frames hold more than {nbytes} bytes")
        parts.append(part)
        left -= len(part)
    if left == nbytes and nbytes:  # numcodecs: RuntimeError, as for corrupt input
        raise DecodeError(f"{where}: zstd could not decode the chunk: it holds no data (no frame, or frames of "
                          f"0 bytes), expected {nbytes} bytes")
    return b"".join(parts) if len(parts) != 1 else parts[0]
