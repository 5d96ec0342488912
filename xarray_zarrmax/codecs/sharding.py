"""Shard indexes: where each chunk lives inside a shard object, validated before any byte is trusted."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from xarray_zarrmax.codecs.decode import check_crc32c
from xarray_zarrmax.codecs.spec import chunk_shape_of, named_config
from xarray_zarrmax.core.bytes import nbytes, view
from xarray_zarrmax.errors import CorruptDataError, Unsupported

EMPTY = np.uint64(2**64 - 1)


@dataclass(frozen=True, slots=True)
class ShardFormat:
    """The ``sharding_indexed`` codec's layout: chunks per shard and how the index is stored."""

    chunks_per_shard: tuple[int, ...]
    index_at_end: bool
    index_big_endian: bool
    index_crc32c: bool

    @property
    def index_nbytes(self) -> int:
        return 16 * math.prod(self.chunks_per_shard) + (4 if self.index_crc32c else 0)

    def index_range(self, object_size: int) -> tuple[int, int]:
        n = self.index_nbytes
        return (object_size - n, object_size) if self.index_at_end else (0, n)


#: the ``sharding_indexed`` configuration keys the fast path reads (``index_location`` defaults to "end").
SHARDING_KEYS = ("chunk_shape", "codecs", "index_codecs", "index_location")


def plan_shard_format(config: dict[str, Any], shard_shape: tuple[int, ...]) -> ShardFormat:
    """The layout a stored ``sharding_indexed`` configuration declares, or `Unsupported` saying why not."""
    inner = chunk_shape_of(config.get("chunk_shape"), len(shard_shape), "inner chunk shape")
    if any(s % c for s, c in zip(shard_shape, inner, strict=True)):
        raise Unsupported(f"shard shape {shard_shape} is not a multiple of the chunk shape {inner}")
    index_codecs = config.get("index_codecs")
    if not isinstance(index_codecs, list) or len(index_codecs) not in (1, 2):
        raise Unsupported(f"shard index codecs {index_codecs!r:.80} are not on the fast path")
    _, bytes_config = named_config(index_codecs[0], {"bytes": ("endian",)}, "shard index codec")
    endian = bytes_config.get("endian")
    if endian not in ("little", "big"):
        raise Unsupported(f"shard index endian {endian!r:.80} is not on the fast path")
    if len(index_codecs) == 2:
        named_config(index_codecs[1], {"crc32c": ()}, "shard index checksum codec")
    location = config.get("index_location", "end")
    if location not in ("start", "end"):
        raise Unsupported(f"shard index location {location!r:.80} is not on the fast path")
    return ShardFormat(
        chunks_per_shard=tuple(s // c for s, c in zip(shard_shape, inner, strict=True)),
        index_at_end=location == "end",
        index_big_endian=endian == "big",
        index_crc32c=len(index_codecs) == 2,
    )


def parse_index(fmt: ShardFormat, raw: Any, object_size: int | None, where: str) -> np.ndarray:
    """Parse and check an index: an array ``(*chunks_per_shard, 2)`` of (offset, nbytes), EMPTY where absent.

    ``object_size`` (when known) bounds every entry; entries must not overlap the index itself.
    """
    view = memoryview(raw).cast("B")
    if len(view) != fmt.index_nbytes:
        raise CorruptDataError(
            f"{where}: shard index is {len(view)} bytes, expected {fmt.index_nbytes}"
            + (f" (the shard object is {object_size} bytes: truncated?)" if object_size is not None else "")
        )
    if fmt.index_crc32c:
        try:
            view = check_crc32c(view, f"{where} (shard index)")
        except CorruptDataError as err:
            size = f"the {object_size}-byte shard object" if object_size is not None else "the shard object"
            raise CorruptDataError(f"{err}: {size} is truncated or corrupt") from None
    # A copy: a view would keep the whole shard object alive for as long as the index is cached.
    index = np.frombuffer(view, dtype=">u8" if fmt.index_big_endian else "<u8").astype(np.uint64, copy=True)
    index = index.reshape(*fmt.chunks_per_shard, 2)
    offsets, lengths = index[..., 0], index[..., 1]
    empty_off, empty_len = offsets == EMPTY, lengths == EMPTY
    if np.any(empty_off != empty_len):
        bad = np.argwhere(empty_off != empty_len)[0]
        raise CorruptDataError(f"{where}: shard index entry for chunk {tuple(int(i) for i in bad)} is half empty")
    present = ~empty_off
    if not np.any(present):
        return index
    chunks = np.argwhere(present)
    starts, lengths = offsets[present], lengths[present]
    ends = starts + lengths
    lo_bound, hi_bound = 0, 2**63
    if object_size is not None:
        lo, hi = fmt.index_range(object_size)
        lo_bound, hi_bound = (0, lo) if fmt.index_at_end else (hi, object_size)
    bad_mask = (ends > hi_bound) | (starts < lo_bound) | (ends < starts)
    if np.any(bad_mask):
        k = int(np.argmax(bad_mask))
        chunk = tuple(int(i) for i in chunks[k])
        section = f"the data section [{lo_bound}, {hi_bound}) of the {object_size}-byte shard object" \
            if object_size is not None else "any object"
        raise CorruptDataError(
            f"{where}: shard index entry for chunk {chunk} points to bytes [{int(starts[k])}, "
            f"{int(starts[k]) + int(lengths[k])}) outside {section}"
        )
    _check_overlaps(starts, lengths, chunks, where)
    return index


def _check_overlaps(offsets: np.ndarray, lengths: np.ndarray, chunks: np.ndarray, where: str) -> None:
    """Entries may share identical bytes (a writer may deduplicate); partial overlaps mean a corrupt index."""
    # Sorted by offset, then length: with no two offsets equal (any index but a deduplicating writer's) the
    # plain sort gives that order, 5x faster than lexsort (54 against 272 us for the 7,200 entries of a map's
    # shard: every shard read pays it once per open).
    order = np.argsort(offsets)
    if np.any(offsets[order[1:]] == offsets[order[:-1]]):
        order = np.lexsort((lengths, offsets))
    starts, ends = offsets[order], offsets[order] + lengths[order]
    same_as_previous = (starts[1:] == starts[:-1]) & (ends[1:] == ends[:-1])
    bad = (starts[1:] < ends[:-1]) & ~same_as_previous
    if np.any(bad):
        k = int(np.argmax(bad))
        a, b = (tuple(int(i) for i in chunks[order[k + j]]) for j in (0, 1))
        raise CorruptDataError(
            f"{where}: shard index entries for chunks {a} and {b} overlap "
            f"([{int(starts[k])}, {int(ends[k])}) and [{int(starts[k + 1])}, {int(ends[k + 1])}))"
        )


def max_object_size(fmt: ShardFormat | None, chunk_nbytes: int) -> int:
    """The most bytes a stored object of this array can legitimately hold: beyond it, refuse to download."""
    # Compressors expand incompressible input by well under 1% plus headers; allow a wide margin anyway.
    per_chunk = 2 * chunk_nbytes + 2**16
    if fmt is None:
        return per_chunk
    return fmt.index_nbytes + per_chunk * math.prod(fmt.chunks_per_shard)


def split_index(fmt: ShardFormat, shard: Any, where: str) -> tuple[np.ndarray, int]:
    """Parse the index out of a whole shard object (a buffer or `Segments`); returns it and the size."""

    size = nbytes(shard)
    if size < fmt.index_nbytes:
        raise CorruptDataError(
            f"{where}: shard object is {size} bytes, smaller than its {fmt.index_nbytes}-byte index: truncated?"
        )
    lo, hi = fmt.index_range(size)
    return parse_index(fmt, view(shard, lo, hi), size, where), size
