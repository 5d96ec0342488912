"""Bytes in flight, both directions: an object fetched as consecutive parts (`Segments`) or encoded as parts
(`Pieces`), and the views that read them without joining them first.

Storage and codecs both speak these types; neither imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xarray_zarrmax.core.buffers import Reused

Buffer = Any  # anything exposing the buffer protocol: bytes, memoryview, numpy uint8, obstore Bytes


class Segments:
    """An object fetched as consecutive byte ranges, kept as the parts that arrived (no reassembly copy).

    `view` is zero-copy when the range lies in one part (almost every chunk of a shard fetched in 16 MiB
    ranges) and copies only a range that straddles parts.
    """

    __slots__ = ("parts", "starts", "size")

    def __init__(self, parts: Sequence[Buffer]) -> None:
        self.parts = [memoryview(p).cast("B") for p in parts]
        self.starts = np.cumsum([0] + [len(p) for p in self.parts]).tolist()
        self.size = int(self.starts[-1])

    def __len__(self) -> int:
        return self.size

    def view(self, start: int, stop: int) -> Buffer:
        start, stop = max(start, 0), min(stop, self.size)
        if stop <= start:
            return memoryview(b"")
        i = int(np.searchsorted(self.starts, start, side="right")) - 1
        a = start - self.starts[i]
        if stop <= self.starts[i + 1]:
            return self.parts[i][a:a + stop - start]
        out = np.empty(stop - start, dtype=np.uint8)
        done = 0
        while done < stop - start:
            take = min(len(self.parts[i]) - a, stop - start - done)
            out[done:done + take] = np.frombuffer(self.parts[i][a:a + take], dtype=np.uint8)
            done += take
            i, a = i + 1, 0
        return out


def view(buf: Buffer | Segments, start: int, stop: int) -> Buffer:
    """Bytes [start, stop) of a fetched object, whether it arrived whole or as `Segments`."""
    if isinstance(buf, Segments):
        return buf.view(start, stop)
    return memoryview(buf).cast("B")[start:stop]


def nbytes(buf: Buffer | Segments) -> int:
    return len(buf) if isinstance(buf, Segments) else len(memoryview(buf).cast("B"))



class Pieces:
    """The bytes of one stored object as consecutive parts (a shard's chunks and its index), kept apart so a
    sink writes them as they are: a file write per part, or one PUT whose body is the list. Joining them would
    copy the shard into a new buffer of its size, and faulting in those fresh pages cost more CPU than the
    zstd that made them (docs/dev/performance-analysis.md, "Shards written without joining their chunks").
    ``bytes(pieces)`` joins, for a consumer that needs one buffer."""

    __slots__ = ("nbytes", "parts")

    def __init__(self, parts: Sequence[bytes | Reused]) -> None:
        self.parts = tuple(parts)
        self.nbytes = sum(len(p) for p in self.parts)

    def __len__(self) -> int:
        return self.nbytes

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)

    def __repr__(self) -> str:
        return f"Pieces({len(self.parts)} parts, {self.nbytes} bytes)"


#: What an encoder returns for one stored object: its bytes, whole (in a pooled buffer from a large chunk, see
#: `_buffers`) or in parts.
Encoded = bytes | Reused | Pieces

def joined(data: Encoded) -> bytes:
    """``data`` as one bytes object (a copy unless it is one already)."""
    return data if isinstance(data, bytes) else bytes(data)


def parts_of(data: Encoded) -> tuple[bytes | Reused, ...]:
    """``data``'s parts, in order: itself when it is whole."""
    return data.parts if isinstance(data, Pieces) else (data,)


