"""The numbers the reader, the writer and the advisor are tuned by, named in one place.

What a user may want to change is a setting in `config` (``concurrency``, ``split_size``, ``coalesce_gap``,
``task_bytes``, ...). These are the rest: sizes and counts measured on this project's benchmarks, each with
the measurement that chose it. The advisor's cost model reads the reader's numbers from here, so a retuned
reader is predicted as it now reads. Facts of a format (zstd's block size, S3's smallest part, nvCOMP's
alignment) are not tuning and stay beside the code that obeys them.
"""

from __future__ import annotations

MiB = 2**20

# -- reading --------------------------------------------------------------------------------------------------

#: Decoded bytes per decode-pool job: large enough that a job's hand-off is noise next to its decode, small
#: enough that a 64 MB shard still spreads over the pool.
JOB_BYTES = 4 * MiB

#: Compressed bytes a local shard is read in, each piece decoded right after it is read, while its bytes are
#: still in the core's cache (L2 1 MiB, L3 32 MiB here): 8 shards of 64 MB on two threads took 89-109 ms read
#: whole then decoded, 51-68 ms in pieces of 1-2 MB, 64-81 ms in 4 MB (asv_bench/experiments/
#: local_shard_pieces.py). A piece holds whole chunks: at least one, whatever its size.
PIECE_BYTES = 2 * MiB
#: Decoded bytes of a shard's chunks from which a local read streams the shard in pieces.
STREAM_BYTES = 2 * PIECE_BYTES

#: zstd chunks below this many decoded bytes decode with a reused per-thread context (python-zstandard) and
#: are copied into place; larger ones decode straight into the output with numcodecs. numcodecs creates and
#: frees a context on every call and checks its arguments in Python: 15-17 us a chunk, as long as decoding a
#: 16 KiB chunk; from about 128 KiB the copy costs more than that (asv_bench/tables/decoders.py, "float32
#: field, 15 KB chunks").
SMALL_ZSTD_BYTES = 128 << 10

#: Shard indexes kept across reads, in bytes: about 10,000 indexes of 400-chunk shards.
INDEX_CACHE_BYTES = 64 * MiB
#: Reads of one object after it changed under them: the first retry follows a stale cached index; more mean
#: a writer is rewriting the object while we read it.
CHANGED_OBJECT_ATTEMPTS = 3
#: Whole reads of a local file modified in place while being read, before giving up.
LOCAL_ATTEMPTS = 3
#: A file changed less than this long before it was read may change again without a visible change of its
#: timestamps (they tick at the file system's granularity: a few ms on Linux, up to 2 s on FAT), so its
#: version is not trusted across reads (the same rule as git's "racy" index entries).
RACY_WINDOW_NS = 2_000_000_000

#: Stores unpickled in a worker are kept while referenced; the most recently used are also held, up to this
#: many and this much pickled payload, so that tasks running one after another do not unpickle their store
#: (and open its connections) again each time.
RECENT_STORES = 16
RECENT_STORE_BYTES = 64 * MiB

#: Output arrays of at least this many bytes are aligned to huge pages: numpy's own threshold for huge-page
#: advice, below which an allocation gets none and aligning it gains nothing.
ALIGN_FROM_BYTES = 4 * MiB

# -- writing --------------------------------------------------------------------------------------------------

#: What the write tasks running at once hold of their data, about (each a share by dask's thread count, at
#: least one object): small objects go several to a task, so that a task sends its PUTs at once. One task per
#: small object left its writes waiting on dask's few threads, a round trip after another (docs/dev/writing.md).
#: Data in memory is cut into such blocks; small dask blocks are grouped.
WRITE_BYTES_IN_FLIGHT = 32 * MiB
#: Merges of one task run concurrently while their objects (decoded) fit in this, at most `MAX_MERGES` at once.
MERGE_BYTES_IN_FLIGHT = 64 * MiB
MAX_MERGES = 16

#: Most attempts of one read-merge-write that keeps losing to other writers, and the longest pause between
#: two; with N writers contending for one object, at least one wins each round, so N rounds suffice.
MERGE_ATTEMPTS = 64
MAX_BACKOFF_S = 0.5
#: Parts of one multipart upload in flight at once.
PART_CONCURRENCY = 12

#: Chunks of at least this many bytes (before compression) are encoded into pooled buffers: below it the
#: allocator serves them from memory it keeps, and a buffer's `GRANULE` would waste more than it saves.
POOLED_FROM_BYTES = 256 << 10
#: Pooled buffers are handed out in multiples of this, so objects of nearly the same size share a size class.
GRANULE = 64 << 10

# -- the advisor ----------------------------------------------------------------------------------------------

#: random-batch by default: windows per batch, each of `BATCH_TIME` time steps x `BATCH_SPACE` cells along
#: every other dimension.
BATCH_WINDOWS = 16
BATCH_TIME = 8
BATCH_SPACE = 32
#: region-mean: the box's side in coordinate units (degrees) when the coordinate is regular, else this fraction
#: of the dimension (10 of 180 degrees).
REGION_DEGREES = 10.0
#: map-mean: time steps averaged into one map.
MAP_MEAN_STEPS = 6

#: The candidate layouts' smallest and largest chunk, in bytes.
MIN_CHUNK_BYTES = 64 << 10
MAX_CHUNK_BYTES = 64 * MiB
#: A chunk length's neighbours when the search refines a layout: this factor of it, up or down.
REFINE_FACTORS = (0.5, 2 / 3, 0.75, 4 / 3, 1.5, 2.0)
#: The search refines this many of the best generated layouts, step by step, while a step helps, at most
#: `REFINE_STEPS` steps each.
REFINE_STARTS = 4
REFINE_STEPS = 64
#: Chunk sizes at which the probe times the decoder (those up to the sample's size).
DECODE_SIZES = (4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20)
