"""Codecs: stored bytes to arrays and back, for the codecs on the fast path, without zarr-python's buffers.

- `spec`: the whitelist. A stored metadata document becomes a `ChunkCodec` only where every name, key and value
  is one decoded here exactly as zarr-python decodes it; anything else raises `Unsupported` and the array is
  read by zarr-python instead.
- `decode`: one chunk's bytes into its place in the output (zstd, blosc, gzip, zlib, crc32c, bytes, transpose),
  with the size checks that refuse corrupt frames; `zstd_frames`: zstd frame headers.
- `sharding`: shard indexes, parsed and checked (`parse_index`, `split_index`).
- `encode`: chunks and shards encoded for writes, laid out as zarr-python lays them out.
"""

from xarray_zarrmax.codecs.decode import ChunkCodec
from xarray_zarrmax.codecs.sharding import ShardFormat, parse_index, split_index
from xarray_zarrmax.codecs.spec import plan_v2_chunk, plan_v3_chunk

__all__ = ["ChunkCodec", "ShardFormat", "parse_index", "plan_v2_chunk", "plan_v3_chunk", "split_index"]
