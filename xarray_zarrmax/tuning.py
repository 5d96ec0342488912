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
#: What a kept index costs beyond its own bytes, counted against `INDEX_CACHE_BYTES`: its key (store token and
#: object key), version, array header and dict node took 570 bytes (tracemalloc, a 4-chunk index and an ETag).
#: Counting the index's bytes alone let 64 MiB of 64-byte indexes hold a million entries, over 0.5 GiB.
INDEX_ENTRY_BYTES = 512
#: What a kept decoded chunk costs beyond its own bytes, counted against `config.cache_bytes`: its entry, keys,
#: version and LRU node took 350 bytes (tracemalloc, 2000 entries), its array header and key strings about 150
#: more. Counting the chunk's bytes alone would let a cap of small chunks hold far more than the cap.
CHUNK_ENTRY_BYTES = 512
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

# -- a store that says it is overloaded (core/overload.py, storage/retry.py) ----------------------------------

#: On an overload answer (503 SlowDown, 429) the process's requests in flight are multiplied by this, once per
#: window, never below `THROTTLE_FLOOR`; they grow back by one per window's worth of answers. TCP's factor;
#: against 0.7 on a MinIO serving 8 requests at once (MINIO_API_REQUESTS_MAX=8) read by 4 worker processes of
#: 128 requests each on two busy cores (asv_bench/tables/throttling.py --compare THROTTLE_DECREASE=0.5,0.7):
#: 0.025 against 0.029 GB/s, within the machine's noise, with 133 against 178 refusals per 1024 GETs.
THROTTLE_DECREASE = 0.5
#: One request in flight at least: with N processes sharing a limit of L requests, any floor above L / N keeps
#: the store overloaded for good, and every refusal then costs a retry from the budget.
THROTTLE_FLOOR = 1
#: While the store refuses requests, the limit grows by one per window's worth of answers, at most once per this
#: many seconds: a window is a round trip, a millisecond on MinIO on loopback, and growing that often put each
#: process back over its share dozens of times a second. Same table, --compare THROTTLE_INCREASE_S=0,0.1:
#: 4 processes 165 -> 25 refusals per 1024 GETs at 0.047 / 0.046 GB/s, 8 processes 285 -> 83 (throughput
#: within noise). Against S3's 20-50 ms round trips it is about one window.
THROTTLE_INCREASE_S = 0.1
#: Seconds without an overload answer after which the limit grows by one per answer (doubling per window).
THROTTLE_QUIET_S = 5.0
#: Changes of the limit each process remembers (`core.budget.limiter_stats`).
THROTTLE_HISTORY = 4096

#: Retries a process may send: a bucket of this many per request slot (``config.concurrency``), refilled by
#: `RETRY_BUDGET_RATIO` for every first attempt (the share Finagle's RetryBudget and the AWS SDKs' retry quota
#: allow). The burst covers a cluster's first wave, when every process's requests meet the store's limit at
#: once: 55-125 retries a process in the throttling table (docs/dev/throttling.md); the ratio covers AIMD's
#: steady probing there, 0.3-8% of the GETs refused.
RETRY_BUDGET_BURST = 4
RETRY_BUDGET_RATIO = 0.2
#: Backoff before a retry: this, doubled each attempt, at most `RETRY_MAX_BACKOFF_S`, each drawn from its upper
#: half. After a broken connection or a 5xx, obstore's own first backoff (0.1 s): ten retries then span about
#: 7-13 s, long enough to ride out a restarting server. After an overload answer much less: the lowered limit
#: already paces the process, and a retry waiting longer only holds up the dask task it belongs to (a 64-GET
#: task took about 0.1 s in the throttling table, so a 25-50 ms first backoff is a third of it).
RETRY_BACKOFF_S = 0.1
OVERLOAD_BACKOFF_S = 0.01
RETRY_MAX_BACKOFF_S = 2.0
#: No retry starts more than this after the request's first attempt was sent (time waiting for a request slot
#: not counted), as obstore's own retry_timeout bounded it before.
RETRY_TIMEOUT_S = 30.0

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
#: The most layouts of the grid the branch-and-bound search costs before it stops and reports how far it got
#: (`advise.search.SearchOutcome`): a safety net, at about 2-3 ms a layout on this project's 2-core machine. The
#: proven searches of both validation sets and of every built-in pattern on a 4-D array cost at most 3,300
#: (docs/dev/logs/advise_search_time.md). Chosen for time, not fitted on either validation set.
SEARCH_LAYOUTS = 5000
#: The seconds the branch-and-bound search spends at most before it stops and reports how far it got, as at
#: `SEARCH_LAYOUTS`: a safety net for reads whose proof costs bounds, not layouts (30 scattered points on a 4-D
#: array under an object store's probe cost 8 layouts and take about 6 s to prove, 100 points over a minute:
#: mostly bounding millions of candidate shards). The proven searches of both validation sets and of every
#: built-in pattern on a 4-D array took at most 1.9 s on this project's 2-core machine
#: (docs/dev/advise.md#search-time). Chosen for time, not fitted on either validation set.
SEARCH_SECONDS = 30.0
#: Chunk sizes at which the probe times the decoder (those up to the sample's size).
DECODE_SIZES = (4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20)
#: Decoded bytes of the variable the decoder and reader probes read (a block at its start, whatever its size:
#: the first time step of an 8 TiB variable alone is 415 MB).
SAMPLE_BYTES = 4 * MiB

# What bounds the advisor's time and memory on any array (metadata only: nothing of the array is materialised).

#: The most inner chunks in one shard the search generates and `layouts=` may give: the shard's index is 16
#: bytes a chunk (16 MiB here), and costing a shard lays out each of its chunks in Morton order (0.27 s and
#: 50 MB for 2^20 chunks in 4-D). GEOS-FP's largest candidate shard holds 556,416 chunks.
MAX_SHARD_CHUNKS = 1 << 20
#: The most layouts the search generates before refining the best (GEOS-FP: 1,808). With more dimensions,
#: fewer chunk lengths and shard multiples per dimension are tried until they fit (a 4-D variable had 70,480
#: layouts otherwise: minutes of costing).
MAX_CANDIDATES = 4096
#: Dimensions longer than 1 the advisor lays out, at most: the candidates multiply per dimension.
MAX_ADVISED_DIMS = 8
#: The most windows a random batch may have: each is costed under every layout (a batch of 1024 windows
#: costs about as long as the rest of a search). Windows that repeat are costed once.
MAX_BATCH_WINDOWS = 1024
#: A batch window touching more stored objects than this is costed as a whole (its objects grouped by what
#: they fetch) rather than object by object, and its shard indexes are not taken as cached by later windows.
MAX_WINDOW_OBJECTS = 4096
#: Bytes the cost model keeps of shards' chunk layouts (write order, sizes) between layouts that share them.
MODEL_CACHE_BYTES = 256 * MiB
#: Costing that runs longer than this shows a progress bar (with ``progress=True``).
PROGRESS_AFTER_S = 2.0
#: The probe repeats each measurement (`probe.settle`) at least `PROBE_LEAST` times, then until the spread of its
#: middle half (interquartile range / median) is at most `PROBE_SPREAD`, at most `PROBE_MOST` times or
#: `PROBE_CAP_S` seconds. Unit measurements, not the validation sets: on this 2-core machine, idle, 5 local GETs
#: or decodes of the sample settle within 10%; loaded, one store cost moved 7x between single runs (issue 42),
#: and 20-40 repeats bring the median within 10-20%. The cap keeps a probe of a slow store to seconds.
PROBE_LEAST = 5
PROBE_MOST = 40
PROBE_SPREAD = 0.1
PROBE_CAP_S = 0.5
#: Decoded bytes the decoder probe decodes on the decode pool to measure its speedup over one thread (as a
#: local read of this many bytes is decoded: `local_reads.local_jobs` jobs on `loop.run_batches`).
SPEEDUP_BYTES = 4 * JOB_BYTES
#: Chunk sizes at which the decoder probe measures the pool's speedup (those below the sample's size, and the
#: largest at most the sample's): on a (64, 512, 512) float32 noise array (neither validation set) a whole local
#: read on 2 threads gained 0.75-0.88x in 16 kB chunks, 1.0-1.37x in 64 kB and 1.41-1.54x from 512 kB up, the
#: pool decoding 1 MiB frames 1.53x: one speedup for every size over-rated the pool on small chunks.
SPEEDUP_SIZES = (16 << 10, 64 << 10, 256 << 10, 1 << 20)
