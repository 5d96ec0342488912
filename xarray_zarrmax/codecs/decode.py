"""CPU decoding of one chunk's bytes, for the codecs on the fast path.

A `ChunkCodec` (made from the stored metadata document by `spec`) turns one stored chunk into its array:
bytes (either endianness), transpose, v2 order "F", zstd, blosc, gzip, zlib, crc32c, no compression. The checks
here refuse truncated or oversized frames before decoding them. Decompressors release the GIL, so chunks of a
shard decode in parallel on the decode pool.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zstandard

from xarray_zarrmax.codecs.zstd_frames import decode_frames, frames
from xarray_zarrmax.errors import CorruptDataError, DecodeError, decode_error_like
from xarray_zarrmax.tuning import SMALL_ZSTD_BYTES


@dataclass(frozen=True, slots=True)
class ChunkCodec:
    """How to turn one stored chunk into an array of ``chunk_shape`` and ``dtype``."""

    chunk_shape: tuple[int, ...]
    dtype: np.dtype  # what zarr-python returns
    stored_dtype: np.dtype  # the element type of the stored bytes, byte order included
    order: tuple[int, ...] | None  # stored = chunk.transpose(order); None when stored in C order as is
    bytes_codecs: tuple[str, ...]  # bytes-to-bytes codecs in the order they were applied when writing
    nbytes: int = field(init=False, compare=False)  # of one decoded chunk; read several times per chunk
    #: a small zstd chunk stored as is (no checksum, transpose or cast): decoded by `_small_zstd` first
    lean: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nbytes", math.prod(self.chunk_shape) * self.stored_dtype.itemsize)
        object.__setattr__(self, "lean", self.bytes_codecs == ("zstd",) and self.nbytes < SMALL_ZSTD_BYTES
                           and self.order is None and self.stored_dtype == self.dtype)

    @property
    def direct(self) -> bool:
        """Whether decoded bytes are already the output's bytes (so they may land in the output directly)."""
        return self.order is None and self.stored_dtype == self.dtype

    def _unwrap(self, raw: Any, where: str) -> Any:
        """Apply the bytes-to-bytes decoders, last-applied first, down to the last decompressor."""
        data = raw
        for name in reversed(self.bytes_codecs):
            if name == "crc32c":
                data = check_crc32c(data, where)
            else:
                return data, name
        return data, None

    def frame(self, raw: Any, where: str, single_frame: bool = False) -> tuple[Any, str | None, int | None]:
        """(compressed bytes, compressor, declared size): checksums verified, and a declared size that cannot
        be the chunk's refused before anything is decompressed.

        A zstd chunk may be several frames (RFC 8878; numcodecs, zarr's decoder, reads across them): a first
        frame that declares fewer bytes than the chunk holds is then reported as not declaring a size, and
        decoded across frames with a bound. ``single_frame`` refuses it instead (nvCOMP decodes one frame)."""
        data, compressor = self._unwrap(raw, where)
        if compressor == "blosc":
            check_blosc_length(data, where)
        if single_frame and compressor == "zstd":
            found = frames(data, where)
            if len(found) != 1 or found[0].nbytes != memoryview(data).nbytes:
                raise CorruptDataError(f"{where}: the zstd chunk is {len(found)} frames, or has skippable ones: "
                                       "device='cuda' decodes zstd chunks of one frame only; read it with "
                                       "device='cpu'")
        declared = declared_size(compressor, data) if compressor is not None else None
        if declared is not None and declared != self.nbytes:
            if compressor == "zstd" and declared < self.nbytes and not single_frame:
                return data, compressor, None
            # a DecodeError (also a RuntimeError): zarr-python's decoder fails on such a frame with one
            raise DecodeError(f"{where}: {compressor} frame holds {declared} bytes, expected {self.nbytes} "
                              f"for chunk shape {self.chunk_shape} of {self.stored_dtype}")
        return data, compressor, declared

    def decode(self, raw: Any, where: str) -> np.ndarray:
        """Decode to a new array of ``chunk_shape``; ``where`` names array, key and chunk for errors."""
        if self.lean:
            data = _small_zstd(raw, self.nbytes)
            if data is not None:
                return np.frombuffer(data, dtype=self.dtype).reshape(self.chunk_shape)
        return self._decode_frame(*self.frame(raw, where), where)

    def _decode_frame(self, data: Any, compressor: str | None, declared: int | None, where: str) -> np.ndarray:
        if compressor == "zstd" and (declared is None or self.nbytes < SMALL_ZSTD_BYTES):
            # Small chunks, and frames that do not say their size (decoding those elsewhere could grow without
            # bound); read-only: callers copy out of it.
            data = _zstd_bounded(data, self.nbytes, where, declared)
        elif compressor is not None and declared is not None:
            # Into a buffer of ours: numcodecs holds the GIL while it allocates its own output.
            flat = np.empty(self.nbytes, dtype=np.uint8)
            _decompress(compressor, data, flat, where)
            data = flat
        elif compressor is not None:
            data = _decompress(compressor, data, None, where)
        flat = np.frombuffer(data, dtype=np.uint8)
        if flat.size != self.nbytes:
            raise CorruptDataError(f"{where}: decoded {flat.size} bytes, expected {self.nbytes} for chunk shape "
                                   f"{self.chunk_shape} of {self.stored_dtype}")
        arr = flat.view(self.stored_dtype)
        if self.order is None:
            arr = arr.reshape(self.chunk_shape)
        else:
            stored_shape = tuple(self.chunk_shape[i] for i in self.order)
            arr = arr.reshape(stored_shape).transpose(np.argsort(self.order))
        if arr.dtype != self.dtype:
            arr = arr.astype(self.dtype)
        return arr

    def decode_into(self, raw: Any, out: np.ndarray, where: str) -> None:
        """Decode straight into ``out``: a C-contiguous array of exactly ``chunk_shape`` (needs `direct`)."""
        target = out.reshape(-1).view(np.uint8)
        if self.lean:
            small = _small_zstd(raw, self.nbytes)
            if small is not None:
                target[...] = np.frombuffer(small, dtype=np.uint8)
                return
        data, compressor, declared = self.frame(raw, where)
        if compressor is None:
            src = np.frombuffer(data, dtype=np.uint8)
            if src.size != target.size:
                raise CorruptDataError(f"{where}: chunk holds {src.size} bytes, expected {target.size}")
            target[...] = src
        elif declared is None or (compressor == "zstd" and self.nbytes < SMALL_ZSTD_BYTES):
            # The frame does not say its size (decode aside, where the size is checked), or the chunk is small
            # enough that a reused context and a copy beat numcodecs decoding in place.
            out[...] = self._decode_frame(data, compressor, declared, where)
        else:
            _decompress(compressor, data, target, where)


def zstd_content_size(data: Any) -> int | None:
    """The decompressed size a zstd frame header declares, or None when it does not say or is not a zstd
    frame (then decoding it fails and says so)."""
    try:
        size = zstandard.frame_content_size(data)
    except zstandard.ZstdError:
        return None
    if size > 0:
        return size  # a skippable frame reports 0, never a size: no need to look for one
    head = bytes(memoryview(data).cast("B")[:4])
    if len(head) == 4 and int.from_bytes(head, "little") & 0xFFFFFFF0 == 0x184D2A50:
        return None  # a skippable frame first: its "size" is not the chunk's (zstandard reports 0)
    return size if size >= 0 else None


#: a blosc chunk's fixed header: version, flags, type size, then its decoded, block and stored sizes
BLOSC_HEADER_BYTES = 16


def declared_size(compressor: str, data: Any) -> int | None:
    """What a compressed chunk says it decodes to, where its format says so (zstd, blosc)."""
    if compressor == "zstd":
        return zstd_content_size(data)
    if compressor == "blosc":
        view = memoryview(data).cast("B")
        return int.from_bytes(view[4:8], "little") if len(view) >= BLOSC_HEADER_BYTES else None
    return None


def check_blosc_length(data: Any, where: str) -> None:
    """Refuse a blosc buffer shorter than its header says (bytes 12-16), or than the header itself: numcodecs
    reads such a buffer past its end (a chunk cut short decoded, with zarr-python too, into values never
    stored; an empty object from S3 crashed the process, zarr-python's too)."""
    view = memoryview(data).cast("B")
    # DecodeErrors, also RuntimeErrors: numcodecs fails with one on such a header (but for the cuts it decodes
    # into values never stored, or crashes on)
    if len(view) < BLOSC_HEADER_BYTES:
        raise DecodeError(f"{where}: blosc buffer holds {len(view)} bytes, fewer than blosc's "
                          f"{BLOSC_HEADER_BYTES}-byte header: the chunk is truncated or empty")
    stored = int.from_bytes(view[12:16], "little")
    if len(view) < stored:
        raise DecodeError(f"{where}: blosc buffer holds {len(view)} bytes, its header says {stored}: "
                          "the chunk is truncated")


def check_crc32c(data: Any, where: str) -> memoryview:
    import google_crc32c

    view = memoryview(data).cast("B")
    if len(view) < 4:
        raise CorruptDataError(f"{where}: {len(view)} bytes cannot hold a crc32c checksum")
    stored = int.from_bytes(view[-4:], "little")
    computed = google_crc32c.value(np.frombuffer(view[:-4], dtype=np.uint8))
    if stored != computed:
        raise CorruptDataError(f"{where}: crc32c checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")
    return view[:-4]


_zstd_contexts = threading.local()  # a decompression context serves one thread at a time


def _thread_dctx() -> Any:
    """This thread's zstd decompression context (one serves one thread at a time; making one per call cost
    as much as decoding a small chunk)."""
    dctx = getattr(_zstd_contexts, "dctx", None)
    if dctx is None:
        dctx = _zstd_contexts.dctx = zstandard.ZstdDecompressor()
    return dctx


def _small_zstd(raw: Any, nbytes: int) -> bytes | None:
    """The common case of a small zstd chunk, with no Python around the zstd call but what it needs (about
    6 us a chunk of the 20 the general path takes for 15 KB): one frame that declares exactly ``nbytes`` and
    is followed by nothing. None for anything else, corrupt input included: the general path then decodes it
    or says precisely what is wrong."""
    try:
        if zstandard.frame_content_size(raw) != nbytes:
            return None
        data = _thread_dctx().decompress(raw, max_output_size=nbytes, allow_extra_data=False)
    except zstandard.ZstdError:
        return None
    return data if len(data) == nbytes else None


def _zstd_bounded(data: Any, nbytes: int, where: str, declared: int | None) -> bytes:
    """A zstd chunk decoded with this thread's context, refused once it produces more than ``nbytes``.

    A chunk is all of its bytes, as numcodecs (zarr's decoder) reads it: one frame, or several (skippable ones
    included), and bytes that are no whole frame are an error, never ignored. The one-shot call serves a chunk
    of one frame that declares the chunk's size; anything else is split into its frames first
    (`zstd_frames.decode_frames`: python-zstandard's readers stop quietly at an incomplete frame)."""
    dctx = _thread_dctx()
    if declared is not None:
        try:
            return dctx.decompress(data, max_output_size=nbytes, allow_extra_data=False)
        except zstandard.ZstdError:
            pass  # corrupt, or frames after the first: the frames say which, and where
    return decode_frames(dctx, data, nbytes, where)


_decoders: dict[str, Any] = {}


def _decoder(name: str) -> Any:
    codec = _decoders.get(name)
    if codec is None:
        import numcodecs

        codec = _decoders[name] = {
            "zstd": numcodecs.Zstd, "blosc": numcodecs.Blosc, "gzip": numcodecs.GZip, "zlib": numcodecs.Zlib,
        }[name]()
    return codec


def _decompress(name: str, data: Any, out: np.ndarray | None, where: str) -> Any:
    try:
        result = _decoder(name).decode(data, out=out) if out is not None else _decoder(name).decode(data)
    except Exception as err:
        raise decode_error_like(err, f"{where}: {name} could not decode the chunk ({type(err).__name__}: {err})") \
            from None
    if out is not None and result is not out:
        produced = np.frombuffer(result, dtype=np.uint8).size
        if produced != out.size:
            raise CorruptDataError(f"{where}: {name} produced {produced} bytes, expected {out.size}")
    return result
