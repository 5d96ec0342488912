"""Encoding stored objects of the common codecs in one call per chunk, without zarr-python's buffer wrappers.

zarr-python's codec chain copies every chunk through its own buffers (4.1 ms against 0.9 ms of zstd for a
3 MB chunk) and encodes the chunks of a shard one after the other. For the layouts nearly everyone writes --
``bytes`` then at most one ``zstd``, optionally inside a ``sharding_indexed`` codec with zarr's default index
(``bytes`` little-endian + ``crc32c``) and Morton write order -- the bytes are produced here instead: zstd
at the level and settings zarr's ``ZstdCodec`` asks for, on the same bytes its ``BytesCodec`` makes, the
chunks of a shard encoded in parallel on the decode pool (zstd releases the GIL), laid out and indexed as
zarr's ``ShardingCodec`` lays them out. Chunks below `POOLED_FROM_BYTES` go through the numcodecs compressor
zarr calls (the same bytes zarr writes); larger ones, for a sink that gives buffers back (local), through
cramjam's zstd into a reused buffer (`_buffers`), a frame any zstd reads, which may differ from numcodecs'
where the two bundle different zstd releases. Which chunks are left out as empty is decided by zarr's own
``chunk_is_empty``. A shard whose inner chunks use other codecs (blosc, gzip, crc32c, transpose, a nested
shard) is laid out here too, each inner chunk encoded by zarr's own chain (`ChainEncoder`): which inner chunks
a shard stores then follows the same rules whatever the codecs (none wholly outside the array; a merge keeps
the chunks it does not write as they were). Anything else returns None from the planners, and the caller uses
zarr's chain for the whole object.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from xarray_zarrmax.codecs.sharding import ShardFormat, split_index
from xarray_zarrmax.config import get_config
from xarray_zarrmax.core.buffers import POOL, Reused
from xarray_zarrmax.core.bytes import Pieces, view
from xarray_zarrmax.errors import CorruptDataError
from xarray_zarrmax.tuning import POOLED_FROM_BYTES

#: the index entry of a chunk not stored (offset and length)
_MISSING = 2**64 - 1


def zstd_bound(nbytes: int) -> int:
    """The most bytes zstd's one-shot compression of ``nbytes`` can produce (``ZSTD_COMPRESSBOUND``)."""
    small = ((128 << 10) - nbytes) >> 11 if nbytes < (128 << 10) else 0
    return nbytes + (nbytes >> 8) + small


@dataclass(frozen=True)
class PlainEncoder:
    """``bytes`` (in ``endian``) then ``compressor`` (zarr's numcodecs Zstd, or None): see the module docstring
    for which library compresses."""

    endian: str | None
    compressor: Any

    def chunk_encoder(self, chunk_spec: Any, pooled: bool = False) -> Any:
        """``encode``, as `ShardEncoder` asks every inner encoder for one (this one needs no spec)."""
        return functools.partial(self.encode, pooled=pooled)

    def chunk_decoder(self, chunk_spec: Any, dtype: np.dtype) -> Any:
        """Stored bytes to a writable array of ``chunk_spec``'s shape and ``dtype`` (native)."""
        shape = tuple(chunk_spec.shape)
        stored = dtype if dtype.itemsize == 1 or self.endian is None else dtype.newbyteorder(
            ">" if self.endian == "big" else "<")

        def decode(data: bytes) -> np.ndarray:
            raw = memoryview(data if self.compressor is None else self.compressor.decode(data)).cast("B")
            expected = math.prod(shape) * stored.itemsize
            if raw.nbytes != expected:
                raise CorruptDataError(f"it decodes to {raw.nbytes} bytes, expected {expected}")
            return np.frombuffer(raw, dtype=stored).reshape(shape).astype(dtype, copy=True)

        return decode

    def encode(self, values: np.ndarray, *, pooled: bool = False) -> bytes | Reused:
        """The chunk's stored bytes. ``pooled``: a chunk of `POOLED_FROM_BYTES` or more goes into a pooled buffer
        (`Reused`), for a sink that gives it back once written; a buffer nobody gives back costs more than bytes
        (15% more CPU for the S3 writes of 1 MB chunks in 64 MB shards)."""
        array = np.ascontiguousarray(values)
        if array.dtype.itemsize > 1 and self.endian is not None:
            stored = array.dtype.newbyteorder(">" if self.endian == "big" else "<")
            if stored != array.dtype:
                array = array.astype(stored)
        raw = array.reshape(-1).view(np.uint8)
        compressor = self.compressor
        if not pooled or raw.nbytes < POOLED_FROM_BYTES or (compressor is not None and compressor.checksum):
            # small chunks, and zstd's checksum flag (which cramjam does not set): numcodecs, as zarr encodes
            return raw.tobytes() if compressor is None else bytes(compressor.encode(raw))
        if compressor is None:
            out = POOL.take(raw.nbytes)
            out[:raw.nbytes] = raw
            return Reused(out, raw.nbytes, POOL)
        import cramjam  # zstd into our buffer, the GIL released; the same frame format as numcodecs writes

        out = POOL.take(zstd_bound(raw.nbytes))
        return Reused(out, cramjam.zstd.compress_into(raw, out, level=compressor.level), POOL)


@dataclass(frozen=True)
class ChainEncoder:
    """Inner chunks of any codecs zarr runs synchronously, each through zarr's own chain: the bytes zarr's
    ``ShardingCodec`` stores for the chunk."""

    codecs: tuple[Any, ...]

    def chunk_encoder(self, chunk_spec: Any, pooled: bool = False) -> Any:
        """One chunk (an array of ``chunk_spec``'s shape) to its bytes, with the chain evolved for the spec as
        zarr's ``ShardingCodec`` evolves its inner codecs (always bytes: ``pooled`` changes nothing)."""
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.chunk_utils import ChunkTransform, evolve_codecs

        transform = ChunkTransform(codecs=evolve_codecs(self.codecs, chunk_spec))
        nd_buffer = default_buffer_prototype().nd_buffer

        def encode(chunk: np.ndarray) -> bytes:
            encoded = transform.encode_chunk(nd_buffer.from_numpy_array(np.ascontiguousarray(chunk)), chunk_spec)
            if encoded is None:  # only a nested shard of nothing but empty chunks: the caller chose to store it
                raise ValueError(f"zarr's codecs {self.codecs!r} encoded an inner chunk to nothing")
            return encoded.to_bytes()

        return encode

    def chunk_decoder(self, chunk_spec: Any, dtype: np.dtype) -> Any:
        """Stored bytes to a writable array, through zarr's chain as its ``ShardingCodec`` decodes them."""
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.chunk_utils import ChunkTransform, evolve_codecs

        transform = ChunkTransform(codecs=evolve_codecs(self.codecs, chunk_spec))
        buffer = default_buffer_prototype().buffer

        def decode(data: bytes) -> np.ndarray:
            out = transform.decode_chunk(buffer.from_bytes(data), chunk_spec).as_numpy_array()
            return np.array(out, dtype=dtype, copy=True)

        return decode


@dataclass(frozen=True)
class ShardEncoder:
    """A ``sharding_indexed`` object laid out here, its inner chunks encoded by a `PlainEncoder` (bytes then
    zstd, without zarr's buffers) or a `ChainEncoder` (anything else zarr runs synchronously)."""

    inner: PlainEncoder | ChainEncoder
    chunk_shape: tuple[int, ...]
    grid: tuple[int, ...]  # chunks per shard, per dimension
    index_at_start: bool
    index_big_endian: bool = False
    index_crc32c: bool = True

    @property
    def index_nbytes(self) -> int:
        return 16 * math.prod(self.grid) + (4 if self.index_crc32c else 0)

    def encode(self, values: np.ndarray, chunk_spec: Any, pool: Executor | None, *,
               rule: np.ndarray | None = None, keep_index: bool = False, pooled: bool = False) -> Pieces | None:
        """The shard's bytes (in parts: its chunks and its index), or None when no inner chunk is stored (zarr
        then stores no shard; with ``keep_index``, a shard of only its index, which reads as the fill value, is
        returned instead).
        ``rule`` (one int8 per inner chunk): 1 store, 0 leave out, -1 (or no rule) store unless empty under
        ``chunk_spec``. ``pool`` encodes the inner chunks in parallel. ``pooled``: as `PlainEncoder.encode`."""
        order = _write_order(self.grid)
        encode = self.inner.chunk_encoder(chunk_spec, pooled)

        def one(coords: tuple[int, ...]) -> bytes | Reused | None:
            decide = -1 if rule is None else int(rule[coords])
            if decide == 0:
                return None
            chunk = values[tuple(slice(c * s, (c + 1) * s) for c, s in zip(coords, self.chunk_shape, strict=True))]
            return None if decide < 0 and _is_empty(chunk, chunk_spec) else encode(chunk)

        return self._assemble(order, _map(pool, one, order), keep_index=keep_index)

    def _assemble(self, order: list[tuple[int, ...]], parts: list[bytes | Reused | None], *,
                  keep_index: bool) -> Pieces | None:
        """The shard of ``parts`` (one per inner chunk in ``order``, None where left out) and its index."""
        present = [p for p in parts if p is not None]
        if not present and not keep_index:
            return None
        index = np.full((*self.grid, 2), _MISSING, dtype=">u8" if self.index_big_endian else "<u8")
        position = self.index_nbytes if self.index_at_start else 0
        for coords, part in zip(order, parts, strict=True):
            if part is not None:
                index[coords] = (position, len(part))
                position += len(part)
        index_bytes = index.tobytes()
        if self.index_crc32c:
            index_bytes += _crc32c(index_bytes).to_bytes(4, "little")
        return Pieces([index_bytes, *present] if self.index_at_start else [*present, index_bytes])

    def merge(self, stored: Any, part: np.ndarray, written: tuple[slice, ...], chunk_spec: Any,
              pool: Executor | None, where: str) -> Pieces | None:
        """The shard replacing ``stored`` (None: nothing stored) once ``written`` (slices into the shard) holds
        ``part``, as zarr-python's partial shard write makes it: inner chunks not written keep their stored
        bytes as they are (or stay left out), written ones are stored unless empty (decoded first where only
        partly written). Stored chunks past the array's edge as the writer saw it are kept too (``written``
        lies within that edge): the array may have grown since, and they hold what was appended. With
        nothing left to store, a stored shard becomes one of only its index (reads as the fill value: deleting
        it could not be made conditional) and a new one is not stored (None)."""

        dtype = part.dtype
        fmt = ShardFormat(self.grid, not self.index_at_start, self.index_big_endian, self.index_crc32c)
        index = split_index(fmt, stored, where)[0] if stored is not None else None  # checked, its crc32c too
        touched = self.touched(written)
        encode = self.inner.chunk_encoder(chunk_spec)
        decode = self.inner.chunk_decoder(chunk_spec, dtype)

        def stored_bytes(coords: tuple[int, ...]) -> bytes | None:
            if index is None or index[coords][0] == _MISSING:
                return None
            offset, length = (int(v) for v in index[coords])
            return bytes(memoryview(view(stored, offset, offset + length)).cast("B"))

        def one(coords: tuple[int, ...]) -> bytes | Reused | None:
            box = [slice(c * s, (c + 1) * s) for c, s in zip(coords, self.chunk_shape, strict=True)]
            overlap = [slice(max(b.start, w.start), min(b.stop, w.stop)) for b, w in zip(box, written, strict=True)]
            source = tuple(slice(o.start - w.start, o.stop - w.start) for o, w in zip(overlap, written, strict=True))
            if all(o.start == b.start and o.stop == b.stop for o, b in zip(overlap, box, strict=True)):
                values = part[source]  # written whole: nothing stored is kept
            else:
                old = stored_bytes(coords)
                try:
                    values = (decode(old) if old is not None
                              else np.full(self.chunk_shape, chunk_spec.fill_value, dtype))
                except Exception as err:
                    raise CorruptDataError(f"{where}: its stored inner chunk {coords} cannot be read back: "
                                           f"{type(err).__name__}: {err}") from None
                values[tuple(slice(o.start - b.start, o.stop - b.start) for o, b in zip(overlap, box, strict=True))] = \
                    part[source]
            return None if _is_empty(values, chunk_spec) else encode(np.ascontiguousarray(values))

        # Only the chunks written go to the pool: copying a stored chunk's bytes is less work than a hand-off
        # (16,384 hand-offs for a one-element write into a shard of 2 x 2 chunks took 4x zarr's time).
        order = _write_order(self.grid)
        written_chunks = [c for c in order if touched[c]]
        encoded = dict(zip(written_chunks, _map(pool, one, written_chunks), strict=True))
        parts = [encoded[c] if touched[c] else stored_bytes(c) for c in order]
        return self._assemble(order, parts, keep_index=stored is not None)

    def outside(self, inside: tuple[int, ...]) -> np.ndarray:
        """Per inner chunk, whether it lies wholly outside the array, given the shard's ``inside`` extents
        (elements inside the array per dimension): zarr never stores those, even with write_empty_chunks."""
        starts = np.ix_(*(np.arange(g) * c for g, c in zip(self.grid, self.chunk_shape, strict=True)))
        out = np.zeros(self.grid, dtype=bool)
        for d, first in enumerate(starts):
            out |= first >= inside[d]
        return out

    def touched(self, region: tuple[slice, ...]) -> np.ndarray:
        """Per inner chunk, whether ``region`` (slices into the shard) writes any of its elements."""
        hit = [np.zeros(g, dtype=bool) for g in self.grid]
        for h, r, c in zip(hit, region, self.chunk_shape, strict=True):
            if r.stop > r.start:
                h[r.start // c:(r.stop - 1) // c + 1] = True
        out = np.ones(self.grid, dtype=bool)
        for d, h in enumerate(hit):
            out &= h.reshape([-1 if i == d else 1 for i in range(len(self.grid))])
        return out


def plain_encoder(codecs: Any, dtype: np.dtype) -> PlainEncoder | None:
    """The encoder for ``codecs`` (a zarr codec tuple), or None unless they are ``bytes`` then at most one
    ``zstd`` on a numeric dtype."""
    from zarr.codecs import BytesCodec, ZstdCodec

    codecs = tuple(codecs)
    if not 1 <= len(codecs) <= 2 or type(codecs[0]) is not BytesCodec or dtype.kind not in "biufc":
        return None
    if len(codecs) == 2 and type(codecs[1]) is not ZstdCodec:
        return None
    return PlainEncoder(codecs[0].endian, codecs[1]._zstd_codec if len(codecs) == 2 else None)


def shard_encoder(codecs: Any, dtype: np.dtype, shard_shape: tuple[int, ...]) -> ShardEncoder | None:
    """The encoder for a lone ``sharding_indexed`` codec with zarr's default index codecs and Morton write
    order, whose inner codecs are plain (`PlainEncoder`) or run synchronously in zarr (`ChainEncoder`); else
    None."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec
    from zarr.core.chunk_utils import ChunkTransform

    codecs = tuple(codecs)
    if len(codecs) != 1 or type(codecs[0]) is not ShardingCodec:
        return None
    sharding = codecs[0]
    index_codecs = tuple(sharding.index_codecs)
    # the index as bytes (either order), with or without a crc32c: what shard.ShardFormat reads
    if (not 1 <= len(index_codecs) <= 2 or type(index_codecs[0]) is not BytesCodec
            or index_codecs[0].endian not in ("little", "big")
            or (len(index_codecs) == 2 and type(index_codecs[1]) is not Crc32cCodec)):
        return None
    if getattr(sharding, "subchunk_write_order", "morton") != "morton":
        return None
    inner: PlainEncoder | ChainEncoder | None = plain_encoder(sharding.codecs, dtype)
    if inner is None:
        try:
            ChunkTransform(codecs=tuple(sharding.codecs))  # raises TypeError where a codec has no sync path
        except TypeError:
            return None
        inner = ChainEncoder(tuple(sharding.codecs))
    chunk_shape = tuple(sharding.chunk_shape)
    if len(chunk_shape) != len(shard_shape) or any(s % c for s, c in zip(shard_shape, chunk_shape, strict=True)):
        return None
    location = getattr(sharding.index_location, "value", sharding.index_location)
    return ShardEncoder(inner, chunk_shape, tuple(s // c for s, c in zip(shard_shape, chunk_shape, strict=True)),
                        location == "start", index_codecs[0].endian == "big", len(index_codecs) == 2)


def _map[T, R](pool: Executor | None, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[fn(i) for i in items]``, on ``pool`` in a few batches per thread: one hand-off per item cost more
    than encoding a small chunk."""
    if pool is None or len(items) < 2:
        return [fn(i) for i in items]
    batches = min(len(items), 4 * get_config().threads)  # the decode pool's size
    size = -(-len(items) // batches)
    groups = [items[k:k + size] for k in range(0, len(items), size)]
    return [r for group in pool.map(lambda g: [fn(i) for i in g], groups) for r in group]


@lru_cache(maxsize=64)
def _write_order(grid: tuple[int, ...]) -> list[tuple[int, ...]]:
    from zarr.core.indexing import morton_order_coords  # the order zarr's ShardingCodec writes in

    return [tuple(int(i) for i in c) for c in morton_order_coords(grid)]


def _is_empty(chunk: np.ndarray, chunk_spec: Any) -> bool:
    """zarr's rule (``chunk_is_empty``): left out when write_empty_chunks is off and every element equals the
    fill value. A chunk whose first element already differs is not empty: answered from that one element,
    where zarr's check runs several NumPy passes over a slice of the chunk, each one releasing and taking the
    GIL back (a wait behind the other encoding threads). Equal first elements get zarr's own check."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.chunk_utils import chunk_is_empty

    if chunk_spec.config.write_empty_chunks:
        return False
    if chunk.size and chunk.dtype.kind in "biuf" and _first_differs(chunk, chunk_spec.fill_value):
        return False
    return bool(chunk_is_empty(default_buffer_prototype().nd_buffer.from_numpy_array(chunk), chunk_spec))


def _first_differs(chunk: np.ndarray, fill: Any) -> bool:
    """Whether the chunk's first element differs from ``fill`` however zarr compares them: by value, NaN equal
    to NaN. (zarr compares bit patterns where the fill is 0.0, so -0.0 differs there; this says "not
    different" for it and leaves the answer to zarr's check.)"""
    if fill is None:
        return False
    first = chunk[(0,) * chunk.ndim]
    try:
        if first == fill:
            return False
        return not (np.isnan(first) and np.isnan(fill)) if chunk.dtype.kind == "f" else True
    except (TypeError, ValueError):  # a fill value NumPy cannot compare with the element: zarr decides
        return False


def _crc32c(data: bytes) -> int:
    import google_crc32c

    return int(google_crc32c.value(data))
