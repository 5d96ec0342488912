/* The layout search's costliest bounds, compiled: each the same count as its numpy form (the reference the tests
 * hold it to), in one pass and nothing built per item but its own numbers. Optional: where no C compiler is at hand
 * the package installs without it (setup.py) and the search uses the numpy forms (advise/kernels.py says which).
 *
 * gap_counts (ranged._gaps_numpy): the gaps a read leaves between the chunks it takes from a shard, over the blocks of
 * chunks in a row (morton.whole_blocks). A block's rank in the shard's Morton order, and the sizes of the stored
 * chunks before it, are sums over the code's bits of per-dimension products (morton.box_offsets says why). A box's
 * blocks are visited in C order, so those products are carried dimension by dimension, one row of state per
 * dimension fixed (fix): a block costs O(bits) for its last dimension.
 *
 * first_touches (revisits._block_numpy): per layout, the shards a sequence of box selections touches for the first
 * time, each selection's shards listed and sorted by their place in the shard grid.
 *
 * point_components (merges._components_numpy): per chunk shape, the components of a pointwise read's chunks joined
 * where two could merge in one range under any sharding (and where one shard read whole could hold both).
 *
 * point_breaks (merges._breaks): per sharded layout, a pointwise read's shards, those read by ranges, and the breaks
 * between runs its chunks' own places in their shards prove (merges says why).
 *
 * count_cells (point_bounds._cells_numpy): per row of cell lengths, the distinct cells holding a pointwise read's
 * points, their fractions inside the array, and the fewest points one holds.
 *
 * listed_floor (listed.listed_numpy): per sharded layout listed, its chunk shape's bound of every
 * sharding raised by what its own shards add at least, from tables per chunk shape and option of chunks per shard.
 *
 * list_shardings (candidates._shardings_numpy): the sharded layouts of many chunk shapes, each shape's in the order of
 * its options' combinations.
 *
 * tie_least (search._tie_least_numpy): per row of term bounds, the least difference from the fastest's terms over the
 * spread's corners (search.could_tie).
 *
 * hash_find, hash_insert (memo.KeyedValues' sorted tiers): where the counts above are remembered, an open-addressed
 * table of int64 keys: a search looks up millions of rows of lengths, a few thousand at a time.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Most chunks a shard's grid holds along a dimension, blocks a read, shards a selection spans, shards along an
 * array's grid: far past any layout the search lists (its chunks are at least an element, its arrays at most 2^63
 * elements in all), and small enough that no count below overflows int64 or loses its last bit in a double's
 * product of two. A larger input is refused (ValueError), never wrapped. */
#define MOST_GRID ((int64_t)1 << 40)
#define MOST_BLOCKS ((size_t)1 << 32)

static int bit_length(int64_t n) { /* of n > 0; 0 of n <= 0 */
#if defined(__GNUC__) || defined(__clang__)
    return n > 0 ? 64 - __builtin_clzll((unsigned long long)n) : 0;
#else
    int bits = 0;
    while (n > 0) {
        bits++;
        n >>= 1;
    }
    return bits;
#endif
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* *buffer holding at least `needed` items of `item` bytes (grown, never shrunk: one buffer for every read or layout
 * of a call); 0 with MemoryError set if it cannot be */
static int grow(void **buffer, size_t *capacity, size_t needed, size_t item) {
    if (needed <= *capacity) return 1;
    void *grown = needed > SIZE_MAX / item ? NULL : realloc(*buffer, item * needed);
    if (!grown) {
        PyErr_NoMemory();
        return 0;
    }
    *buffer = grown;
    *capacity = needed;
    return 1;
}

typedef struct {
    int64_t rank;  /* of the block's first chunk */
    double before; /* the sizes (in whole chunks) of the chunks before it */
    double own;    /* its chunks' sizes */
    int64_t held;  /* its stored chunks */
    int partial;   /* its shard holds chunks of other sizes */
    int64_t at;    /* its place in the read, for a stable sort */
} Block;

static int by_rank(const void *a, const void *b) {
    const Block *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->at < y->at ? -1 : (x->at > y->at);
}

/* Row j + 1 of the state from row j, with coordinate v along dimension j (n stored values, the last lacking `lack`
 * of a whole one; `used` bits; blocks `width` wide). Per bit b below `top`: count_sum/size_sum the rank and
 * sizes-before terms of dimensions <= j; count_prod/size_prod the product over them of the values sharing bits
 * >= b + 1; held/own the block's stored cells and their sizes over them. */
static void fix(int j, int64_t v, int64_t n, double lack, int used, int64_t width, int top, double *count_sum,
                double *size_sum, double *count_prod, double *size_prod, int64_t *held, double *own) {
    double *cs = count_sum + (size_t)j * top, *ss = size_sum + (size_t)j * top;
    double *cp = count_prod + (size_t)j * top, *sp = size_prod + (size_t)j * top;
    int f = top < used ? top : used;
    int64_t prefix = (v >> f) << f;
    double above = (double)min64(n - prefix, (int64_t)1 << f); /* values sharing the bits >= b + 1 */
    double above_size = prefix + (int64_t)above == n ? above - lack : above;
    for (int b = top - 1; b >= 0; b--) {
        f = b < used ? b : used;
        prefix = (v >> f) << f;
        double at = (double)min64(n - prefix, (int64_t)1 << f); /* values sharing the bits >= b */
        double at_size = prefix + (int64_t)at == n ? at - lack : at;
        double one = (b < used && ((v >> b) & 1)) ? (double)((int64_t)1 << b) : 0.0; /* below at bit b */
        cs[top + b] = cs[b] * at + cp[b] * one;
        ss[top + b] = ss[b] * at_size + sp[b] * one;
        cp[top + b] = cp[b] * above;
        sp[top + b] = sp[b] * above_size;
        above = at;
        above_size = at_size;
    }
    int64_t h = min64(width, n - v);
    held[j + 1] = held[j] * h;
    own[j + 1] = own[j] * (v + h == n ? (double)h - lack : (double)h);
}

/* morton.whole_blocks of one box: per dimension, the width of the blocks its cells fall into. */
static void block_widths(const int64_t *lo, const int64_t *length, const int64_t *stored, const int64_t *grid,
                         int ndim, int64_t *width) {
    int longer = 0, top = 0;
    for (int d = 0; d < ndim; d++) {
        width[d] = 1;
        longer |= length[d] > 1;
        int used = bit_length(grid[d] - 1);
        top = used > top ? used : top;
    }
    if (!longer) return; /* a box of one cell is a block of one stored cell */
    for (int b = 0; b < top; b++) {
        int64_t span = (int64_t)1 << (b + 1);
        for (int d = 0; d < ndim; d++) {
            if (bit_length(grid[d] - 1) <= b) continue;
            if (lo[d] % span != 0 || (length[d] % span != 0 && lo[d] + length[d] != stored[d])) return;
            width[d] = span;
        }
    }
}

typedef struct {
    Py_buffer read, row, lo, length, stored, grid, last, pieces, weight, enc, decoded, requests, gap_bytes;
} Buffers;

/* whether buffer b holds `items` 8-byte numbers; if not, a ValueError naming it */
static int sized(Py_buffer *b, Py_ssize_t items, const char *name) {
    if (items < 0 || items > PY_SSIZE_T_MAX / 8 || b->len != items * 8) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, expected %zd", name, b->len, items * 8);
        return 0;
    }
    return 1;
}

static PyObject *gap_counts(PyObject *self, PyObject *args) {
    (void)self;
    Buffers B;
    int compressed, local, ndim;
    long long gap;
    double stream_bytes;
    Py_ssize_t boxes;
    if (!PyArg_ParseTuple(args, "ny*y*y*y*y*y*y*y*y*y*y*ppLdw*w*", &boxes, &B.read, &B.row, &B.lo, &B.length,
                          &B.stored, &B.grid, &B.last, &B.pieces, &B.weight, &B.enc, &B.decoded, &compressed, &local,
                          &gap, &stream_bytes, &B.requests, &B.gap_bytes))
        return NULL;
    PyObject *result = NULL;
    Block *blocks = NULL;
    double *state = NULL;
    Py_ssize_t k = B.enc.len / 8, reads = B.pieces.len / 8;
    if (boxes < 0 || boxes > B.read.len / 8) {
        PyErr_SetString(PyExc_ValueError, "gap_counts: more boxes than `read` holds");
        goto done;
    }
    if (boxes && B.lo.len / 8 / boxes > 64) {
        PyErr_SetString(PyExc_ValueError, "gap_counts: boxes of more than 64 dimensions");
        goto done;
    }
    ndim = boxes ? (int)(B.lo.len / 8 / boxes) : 0;
    if (!(sized(&B.read, boxes, "gap_counts: read") &&
          sized(&B.row, boxes, "gap_counts: row") &&
          sized(&B.lo, boxes * ndim, "gap_counts: lo") &&
          sized(&B.length, boxes * ndim, "gap_counts: length") &&
          sized(&B.stored, boxes * ndim, "gap_counts: stored") &&
          sized(&B.grid, boxes * ndim, "gap_counts: grid") &&
          sized(&B.last, boxes * ndim, "gap_counts: last") &&
          sized(&B.weight, reads, "gap_counts: read_weight") &&
          sized(&B.decoded, k, "gap_counts: decoded") &&
          sized(&B.requests, k, "gap_counts: requests") &&
          sized(&B.gap_bytes, k, "gap_counts: gap_bytes")))
        goto done;
    const int64_t *read = B.read.buf, *row = B.row.buf, *lo = B.lo.buf, *length = B.length.buf;
    const int64_t *stored = B.stored.buf, *grid = B.grid.buf;
    const double *last = B.last.buf, *pieces = B.pieces.buf, *weights = B.weight.buf, *enc_of = B.enc.buf;
    const double *decoded = B.decoded.buf;
    double *requests = B.requests.buf, *gap_bytes = B.gap_bytes.buf;
    int top_all = 1;
    double cells = 1.0; /* a box's shard's chunks, dimension by dimension */
    for (Py_ssize_t i = 0; i < boxes; i++) {
        if (read[i] < 0 || read[i] >= reads || row[i] < 0 || row[i] >= k || (i && read[i] < read[i - 1])) {
            PyErr_SetString(PyExc_ValueError, "gap_counts: a read or row out of range, or reads not ascending");
            goto done;
        }
        for (int d = 0; d < ndim; d++) {
            const Py_ssize_t at = i * ndim + d;
            if (grid[at] < 1 || stored[at] < 1 || stored[at] > grid[at] || lo[at] < 0 || length[at] < 1 ||
                length[at] > stored[at] - lo[at]) {
                PyErr_SetString(PyExc_ValueError, "gap_counts: a box outside its shard's stored chunks");
                goto done;
            }
            if (grid[at] > MOST_GRID) {
                PyErr_SetString(PyExc_ValueError, "gap_counts: a shard of more than 2^40 chunks along a dimension");
                goto done;
            }
            cells = d ? cells : 1.0;
            cells *= (double)grid[at];
            if (cells > (double)((int64_t)1 << 52)) { /* ranks exact in a double, and in an int64 */
                PyErr_SetString(PyExc_ValueError, "gap_counts: a shard of more than 2^52 chunks");
                goto done;
            }
            int used = bit_length(grid[at] - 1);
            top_all = used > top_all ? used : top_all;
        }
    }
    /* state: count_sum, size_sum, count_prod, size_prod ((ndim + 1) x top_all each), then per dimension its bits,
     * step, width, blocks and lack, and held and own ((ndim + 1) each) */
    size_t rows = (size_t)(ndim + 1) * top_all;
    state = malloc(sizeof(double) * (4 * rows + 2 * (size_t)(ndim + 1)) + sizeof(int64_t) * 5 * (size_t)(ndim + 1));
    if (!state) {
        PyErr_NoMemory();
        goto done;
    }
    double *count_sum = state, *size_sum = state + rows, *count_prod = state + 2 * rows, *size_prod = state + 3 * rows;
    double *own = state + 4 * rows, *lack = own + ndim + 1;
    int64_t *held = (int64_t *)(lack + ndim + 1), *step = held + ndim + 1, *width = step + ndim + 1;
    int64_t *count = width + ndim + 1, *used = count + ndim + 1;
    size_t capacity = 0;
    Py_ssize_t begin = 0;
    while (begin < boxes) {
        Py_ssize_t end = begin;
        size_t total = 0; /* the read's blocks */
        while (end < boxes && read[end] == read[begin]) {
            if (row[end] != row[begin]) {
                PyErr_SetString(PyExc_ValueError, "gap_counts: a read's boxes of more than one layout");
                goto done;
            }
            block_widths(lo + end * ndim, length + end * ndim, stored + end * ndim, grid + end * ndim, ndim, width);
            size_t n = 1;
            for (int d = 0; d < ndim; d++) {
                const size_t along = (size_t)((length[end * ndim + d] + width[d] - 1) / width[d]);
                if (along > MOST_BLOCKS / n) {
                    n = MOST_BLOCKS + 1;
                    break;
                }
                n *= along;
            }
            total += n;
            if (total > MOST_BLOCKS) {
                PyErr_SetString(PyExc_ValueError, "gap_counts: a read of more than 2^32 blocks of chunks");
                goto done;
            }
            end++;
        }
        if (!grow((void **)&blocks, &capacity, total, sizeof(Block))) goto done;
        size_t at = 0;
        for (Py_ssize_t i = begin; i < end; i++) {
            const int64_t *lo_i = lo + i * ndim, *stored_i = stored + i * ndim, *grid_i = grid + i * ndim;
            const double *last_i = last + i * ndim;
            block_widths(lo_i, length + i * ndim, stored_i, grid_i, ndim, width);
            int top = 0, partial = 0;
            for (int d = 0; d < ndim; d++) {
                used[d] = bit_length(grid_i[d] - 1);
                top = used[d] > top ? (int)used[d] : top;
                count[d] = (length[i * ndim + d] + width[d] - 1) / width[d];
                step[d] = 0;
                lack[d] = 1.0 - last_i[d];
                partial |= last_i[d] < 1;
            }
            for (int b = 0; b < top; b++) {
                count_sum[b] = size_sum[b] = 0.0;
                count_prod[b] = size_prod[b] = 1.0;
            }
            held[0] = 1;
            own[0] = 1.0;
            for (int j = 0; j < ndim; j++)
                fix(j, lo_i[j], stored_i[j], lack[j], (int)used[j], width[j], top, count_sum, size_sum, count_prod,
                    size_prod, held, own);
            for (;;) {
                double rank = 0.0, before = 0.0;
                for (int b = 0; b < top; b++) {
                    rank += count_sum[(size_t)ndim * top + b];
                    before += size_sum[(size_t)ndim * top + b];
                }
                blocks[at] = (Block){(int64_t)rank, before, own[ndim], held[ndim], partial, (int64_t)at};
                at++;
                int j = ndim - 1; /* the next block in C order: the last dimension that does not wrap, and after */
                while (j >= 0) {
                    if (++step[j] < count[j]) break;
                    step[j] = 0;
                    j--;
                }
                if (j < 0) break;
                for (int jj = j; jj < ndim; jj++)
                    fix(jj, lo_i[jj] + step[jj] * width[jj], stored_i[jj], lack[jj], (int)used[jj], width[jj], top,
                        count_sum, size_sum, count_prod, size_prod, held, own);
            }
        }
        qsort(blocks, total, sizeof(Block), by_rank);
        const int64_t r = row[begin];
        const double enc = enc_of[r], weight = weights[read[begin]];
        const int capped = local && pieces[read[begin]] * decoded[r] >= stream_bytes; /* read in capped pieces */
        for (size_t q = 1; q < total; q++) {
            const Block *this = &blocks[q], *prev = &blocks[q - 1];
            double between = (double)(this->rank - prev->rank - prev->held);
            double sizes = this->before - prev->before - prev->own;
            double least, most;
            if (compressed) { /* stored at max(1, round(size x enc)) bytes each: a byte more or half less each */
                double slack = this->partial ? 1e-9 * between * enc : 0.0;
                double rounding = this->partial ? between : 0.0;
                double low = sizes * enc - 0.5 * rounding - slack;
                least = between > 0 ? (between > low ? between : low) : 0.0;
                most = between > 0 ? sizes * enc + rounding + slack : 0.0;
            } else {
                least = most = between * enc;
            }
            if (least > (double)gap) requests[r] += weight;              /* too wide to merge, whatever the rounding */
            if (most <= (double)gap && !capped) gap_bytes[r] += least * weight; /* merged whatever it is */
        }
        begin = end;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(blocks);
    free(state);
    Py_buffer *all[] = {&B.read, &B.row, &B.lo, &B.length, &B.stored, &B.grid, &B.last, &B.pieces, &B.weight, &B.enc,
                        &B.decoded, &B.requests, &B.gap_bytes};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) PyBuffer_Release(all[i]);
    return result;
}

typedef struct {
    int64_t key;    /* the shard's place in the grid of shards */
    int64_t window; /* the selection touching it */
    int ranged;     /* read by ranges: fewer of its chunks touched than full_shard_fraction */
    double extra;   /* read whole: bytes at least of its chunks the selection does not touch */
    double stored;  /* read whole: its bytes at least, and its index's */
} Touch;

static int by_key(const void *a, const void *b) {
    const Touch *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->window < y->window ? -1 : (x->window > y->window);
}

typedef struct {
    Py_buffer shape, chunks, outer, per_object, lo, hi, starts, stops, span, enc, index_bytes;
    Py_buffer waits, first, ranged_first, whole_extra, parts, splits;
} TouchBuffers;

static PyObject *first_touches(PyObject *self, PyObject *args) {
    (void)self;
    TouchBuffers B;
    Py_ssize_t layouts, windows, ndim;
    double fraction;
    int compressed;
    long long split_size;
    if (!PyArg_ParseTuple(args, "nnny*y*y*y*y*y*y*y*y*y*y*dpLw*w*w*w*w*w*", &layouts, &windows, &ndim, &B.shape,
                          &B.chunks, &B.outer, &B.per_object, &B.lo, &B.hi, &B.starts, &B.stops, &B.span, &B.enc,
                          &B.index_bytes, &fraction, &compressed, &split_size, &B.waits, &B.first, &B.ranged_first,
                          &B.whole_extra, &B.parts, &B.splits))
        return NULL;
    PyObject *result = NULL;
    Touch *touches = NULL;
    int64_t *grid_after = NULL;
    if (layouts < 0 || windows < 0 || ndim < 0 || ndim > 64 || layouts > ((Py_ssize_t)1 << 40) ||
        windows > ((Py_ssize_t)1 << 20) || (windows && layouts > ((Py_ssize_t)1 << 40) / windows)) {
        PyErr_SetString(PyExc_ValueError, "first_touches: layouts, windows or dimensions out of range");
        goto done;
    }
    const Py_ssize_t cells = layouts * windows * ndim;
    if (!(sized(&B.shape, ndim, "first_touches: shape") &&
          sized(&B.chunks, layouts * ndim, "first_touches: chunks") &&
          sized(&B.outer, layouts * ndim, "first_touches: outer") &&
          sized(&B.per_object, layouts, "first_touches: per_object") &&
          sized(&B.lo, cells, "first_touches: lo") &&
          sized(&B.hi, cells, "first_touches: hi") &&
          sized(&B.starts, windows * ndim, "first_touches: starts") &&
          sized(&B.stops, windows * ndim, "first_touches: stops") &&
          sized(&B.span, layouts * ndim, "first_touches: span") &&
          sized(&B.enc, layouts, "first_touches: chunk_enc") &&
          sized(&B.index_bytes, layouts, "first_touches: index_bytes") &&
          sized(&B.first, layouts, "first_touches: first") &&
          sized(&B.ranged_first, layouts, "first_touches: ranged_first") &&
          sized(&B.whole_extra, layouts, "first_touches: whole_extra") &&
          sized(&B.parts, layouts, "first_touches: parts")))
        goto done;
    if (B.waits.len != layouts * windows || B.splits.len != layouts * windows) {
        PyErr_SetString(PyExc_ValueError, "first_touches: waits and splits must hold a byte per layout and window");
        goto done;
    }
    const int64_t *shape = B.shape.buf, *chunks = B.chunks.buf, *outer = B.outer.buf, *lo = B.lo.buf, *hi = B.hi.buf;
    const int64_t *starts = B.starts.buf, *stops = B.stops.buf, *span = B.span.buf;
    const double *per_object = B.per_object.buf, *enc_of = B.enc.buf, *index_bytes = B.index_bytes.buf;
    char *waits = B.waits.buf, *splits = B.splits.buf;
    int64_t *first = B.first.buf, *ranged_first = B.ranged_first.buf;
    double *whole_extra = B.whole_extra.buf, *parts = B.parts.buf;
    grid_after = malloc(sizeof(int64_t) * (size_t)(ndim + 1) * 2);
    if (!grid_after) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *digit = grid_after + ndim + 1;
    size_t capacity = 0;
    for (Py_ssize_t r = 0; r < layouts && windows > 0; r++) {
        const int64_t *c_r = chunks + r * ndim, *o_r = outer + r * ndim, *span_r = span + r * ndim;
        int64_t entries = 1;
        grid_after[ndim] = 1; /* the shards of the grid along the dimensions after d */
        for (Py_ssize_t d = ndim - 1; d >= 0; d--) {
            if (c_r[d] < 1 || o_r[d] < c_r[d] || span_r[d] < 1) {
                PyErr_SetString(PyExc_ValueError, "first_touches: a chunk, shard or span shorter than 1");
                goto done;
            }
            const int64_t shards = (shape[d] + o_r[d] - 1) / o_r[d];
            if (shape[d] < 1 || shape[d] > ((int64_t)1 << 62) || shards > MOST_GRID / grid_after[d + 1] ||
                span_r[d] > shards ||
                span_r[d] > (int64_t)MOST_BLOCKS / windows / entries) {
                PyErr_SetString(PyExc_ValueError, "first_touches: a grid of shards past 2^40, or a span past it");
                goto done;
            }
            grid_after[d] = grid_after[d + 1] * shards;
            entries *= span_r[d];
        }
        size_t most = (size_t)(entries * windows);
        if (!grow((void **)&touches, &capacity, most, sizeof(Touch))) goto done;
        const double enc = enc_of[r];
        size_t n = 0;
        for (Py_ssize_t w = 0; w < windows; w++) {
            const int64_t *lo_w = lo + (r * windows + w) * ndim, *hi_w = hi + (r * windows + w) * ndim;
            for (Py_ssize_t d = 0; d < ndim; d++) {
                if (lo_w[d] < 0 || hi_w[d] < lo_w[d] || hi_w[d] - lo_w[d] >= span_r[d] ||
                    hi_w[d] >= grid_after[d] / grid_after[d + 1]) {
                    PyErr_SetString(PyExc_ValueError,
                                    "first_touches: a selection's shards outside the grid or its span");
                    goto done;
                }
            }
            for (Py_ssize_t d = 0; d < ndim; d++) digit[d] = 0;
            for (;;) {
                /* the shard lo + digit, if inside the window's shards: its products over dimensions (last first, as
                 * the numpy form multiplies them) */
                int inside = 1;
                int64_t key = 0, touched = 1;
                double held = 1.0, held_fraction = 1.0, touched_fraction = 1.0;
                for (Py_ssize_t d = ndim - 1; d >= 0; d--) {
                    const int64_t index = lo_w[d] + digit[d], o = o_r[d], c = c_r[d], size = shape[d];
                    int64_t begin = starts[w * ndim + d] > index * o ? starts[w * ndim + d] : index * o;
                    int64_t end = stops[w * ndim + d] < (index + 1) * o ? stops[w * ndim + d] : (index + 1) * o;
                    end = end < size ? end : size;
                    const int64_t along = (end - 1) / c - begin / c + 1;
                    int64_t extent = size - index * o;
                    extent = extent < 0 ? 0 : (extent > o ? o : extent);
                    const int64_t first_chunk = begin / c;
                    int64_t covered_end = (first_chunk + along) * c;
                    covered_end = covered_end < size ? covered_end : size;
                    key += index * grid_after[d + 1];
                    inside &= index <= hi_w[d];
                    touched *= along;
                    held *= (double)((extent + c - 1) / c);
                    held_fraction *= (double)extent / (double)c;
                    touched_fraction *= (double)(covered_end - first_chunk * c) / (double)c;
                }
                if (inside) {
                    const double untouched = held - (double)touched;
                    double extra, bytes;
                    if (compressed) {
                        const double low = enc * (held_fraction - touched_fraction) - 0.5 * untouched;
                        extra = untouched > low ? untouched : low;
                        const double held_low = enc * held_fraction - 0.5 * held;
                        bytes = held > held_low ? held : held_low;
                    } else {
                        extra = untouched * enc;
                        bytes = held * enc;
                    }
                    touches[n++] = (Touch){key, w, (double)touched < fraction * per_object[r], extra,
                                           bytes + index_bytes[r]};
                }
                Py_ssize_t d = ndim - 1; /* the next shard of the window's span (mixed radix, last fastest) */
                while (d >= 0 && ++digit[d] >= span_r[d]) digit[d--] = 0;
                if (d < 0) break;
            }
        }
        qsort(touches, n, sizeof(Touch), by_key);
        for (size_t q = 0; q < n; q++) {
            const Touch *t = &touches[q];
            if (q && t->key == touches[q - 1].key) continue; /* touched before: its index cached */
            first[r]++;
            if (t->ranged) {
                ranged_first[r]++;
                waits[r * windows + t->window] = 1;
                continue;
            }
            whole_extra[r] += t->extra > 0.0 ? t->extra : 0.0;
            if (split_size >= 0) { /* an object store reads a whole shard in split_size parts */
                const double pieces = ceil(t->stored / (double)(split_size > 1 ? split_size : 1));
                parts[r] += pieces - 1;
                if (pieces > 1) splits[r * windows + t->window] = 1;
            }
        }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(touches);
    free(grid_after);
    Py_buffer *all[] = {&B.shape, &B.chunks,  &B.outer, &B.per_object,   &B.lo,          &B.hi,
                        &B.starts, &B.stops,  &B.span,  &B.enc,          &B.index_bytes, &B.waits,
                        &B.first,  &B.ranged_first, &B.whole_extra, &B.parts, &B.splits};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) PyBuffer_Release(all[i]);
    return result;
}

/* Products past this are "too many cells" (merges._SATURATED): saturated, never wrapped */
#define SATURATED ((int64_t)1 << 62)

static int64_t saturated_product(int64_t a, int64_t b) {
    if (a >= SATURATED || b >= SATURATED) return SATURATED;
    if (b != 0 && a > SATURATED / b) return SATURATED;
    return a * b;
}

static int64_t root(int64_t *parent, int64_t v) {
    while (parent[v] != v) {
        parent[v] = parent[parent[v]];
        v = parent[v];
    }
    return v;
}

static int join(int64_t *parent, int64_t a, int64_t b) { /* 1 if a and b were apart */
    a = root(parent, a);
    b = root(parent, b);
    if (a == b) return 0;
    if (a < b) parent[b] = a;
    else parent[a] = b;
    return 1;
}

static Py_ssize_t sort_m; /* the dimensions the comparators below read (set before each qsort; the GIL is held) */

static int by_cell(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    for (Py_ssize_t d = 0; d < sort_m; d++)
        if (x[d] != y[d]) return x[d] < y[d] ? -1 : 1;
    return 0;
}

typedef struct {
    Py_buffer lengths, points, extent, full_cells, partial_all, whole_cells, across, merged, joined;
} ComponentBuffers;

static PyObject *point_components(PyObject *self, PyObject *args) {
    (void)self;
    ComponentBuffers B;
    Py_ssize_t rows, m, count;
    long long any_cells;
    int compressed;
    if (!PyArg_ParseTuple(args, "nnny*y*y*y*Ly*y*y*pw*w*", &rows, &m, &count, &B.lengths, &B.points, &B.extent,
                          &B.full_cells, &any_cells, &B.partial_all, &B.whole_cells, &B.across, &compressed,
                          &B.merged, &B.joined))
        return NULL;
    PyObject *result = NULL;
    int64_t *cells = NULL, *grid = NULL, *bits = NULL, *parent = NULL;
    int *part = NULL;
    /* (the products of counts below sized from these: refused before they could wrap) */
    if (m < 1 || m > 64 || count < 1 || rows < 0 || count > PY_SSIZE_T_MAX / (2 * m) || rows > PY_SSIZE_T_MAX / m) {
        PyErr_Format(PyExc_ValueError, "point_components: %zd dimensions and %zd points, expected 1-64 and 1 or more",
                     m, count);
        goto done;
    }
    if (!sized(&B.lengths, rows * m, "point_components: lengths") ||
        !sized(&B.points, count * m, "point_components: points") || !sized(&B.extent, m, "point_components: extent") ||
        !sized(&B.full_cells, rows, "point_components: full_cells") ||
        !sized(&B.partial_all, rows, "point_components: partial_all") ||
        !sized(&B.whole_cells, rows, "point_components: whole_cells") ||
        !sized(&B.across, rows, "point_components: across") ||
        !sized(&B.merged, rows, "point_components: merged") || !sized(&B.joined, rows, "point_components: joined"))
        goto done;
    const int64_t *lengths = B.lengths.buf, *points = B.points.buf, *extent = B.extent.buf;
    const int64_t *full_cells = B.full_cells.buf, *partial_all = B.partial_all.buf, *across = B.across.buf;
    const double *whole_cells = B.whole_cells.buf;
    double *merged = B.merged.buf, *joined = B.joined.buf;
    cells = malloc(sizeof(int64_t) * (size_t)(count * m));
    grid = malloc(sizeof(int64_t) * (size_t)m);
    bits = malloc(sizeof(int64_t) * (size_t)m);
    parent = malloc(sizeof(int64_t) * (size_t)(2 * count));
    part = malloc(sizeof(int) * (size_t)count);
    if (!cells || !grid || !bits || !parent || !part) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t r = 0; r < rows; r++) {
        const int64_t *len = lengths + r * m;
        for (Py_ssize_t d = 0; d < m; d++) {
            if (len[d] < 1 || extent[d] < 1) {
                PyErr_Format(PyExc_ValueError, "point_components: row %zd: lengths and extents must be positive", r);
                goto done;
            }
            grid[d] = (extent[d] + len[d] - 1) / len[d];
            bits[d] = bit_length(grid[d] - 1);
        }
        for (Py_ssize_t i = 0; i < count; i++)
            for (Py_ssize_t d = 0; d < m; d++) cells[i * m + d] = points[i * m + d] / len[d];
        sort_m = m;
        qsort(cells, (size_t)count, sizeof(int64_t) * (size_t)m, by_cell);
        Py_ssize_t t = 0; /* the distinct chunks, in place */
        for (Py_ssize_t i = 0; i < count; i++) {
            if (t > 0 && by_cell(cells + (t - 1) * m, cells + i * m) == 0) continue;
            if (t != i) memcpy(cells + t * m, cells + i * m, sizeof(int64_t) * (size_t)m);
            t++;
        }
        for (Py_ssize_t i = 0; i < t; i++) {
            part[i] = 0;
            for (Py_ssize_t d = 0; d < m && compressed; d++)
                if (cells[i * m + d] == grid[d] - 1 && extent[d] % len[d] != 0) part[i] = 1;
        }
        int64_t *by_merge = parent, *by_share = parent + count;
        for (Py_ssize_t i = 0; i < t; i++) by_merge[i] = by_share[i] = i;
        Py_ssize_t apart_merge = t, apart_share = t;
        /* every pair, until both graphs are one component (then no pair can part them) */
        for (Py_ssize_t i = 0; i < t && apart_merge > 1; i++) {
            for (Py_ssize_t j = i + 1; j < t && apart_merge > 1; j++) {
                const int64_t *x = cells + i * m, *y = cells + j * m;
                uint64_t spread = 0; /* the |delta|s OR'ed: the highest bit of any */
                for (Py_ssize_t d = 0; d < m; d++) {
                    const int64_t delta = y[d] - x[d];
                    spread |= (uint64_t)(delta < 0 ? -delta : delta);
                }
                const int64_t level = bit_length((int64_t)(spread >> 1)); /* the highest set bit's place */
                int can_ahead = 0, can_behind = 0;
                int64_t ahead = 1, behind = 1, box = 1;
                for (Py_ssize_t d = 0; d < m; d++) {
                    const int64_t delta = y[d] - x[d];
                    if (delta > 0) {
                        can_ahead |= bits[d] > level;
                        ahead = saturated_product(ahead, delta + 1);
                        box = saturated_product(box, delta + 1);
                    } else if (delta < 0) {
                        can_behind |= bits[d] > level;
                        behind = saturated_product(behind, 1 - delta);
                        box = saturated_product(box, 1 - delta);
                    }
                }
                /* first apart along a dimension the read does not point along: no condition on the bits, and
                   both boxes reach across every delta (merges says why) */
                const int64_t least = ahead < behind ? ahead : behind;
                if (!can_ahead) ahead = SATURATED;
                if (!can_behind) behind = SATURATED;
                int64_t between = spread == 0 ? -1 : (ahead < behind ? ahead : behind) - 2;
                if (spread != 0 && across[r]) {
                    const int64_t other = saturated_product(least, 2) - 2;
                    if (other < between) between = other;
                }
                const int loose = partial_all[r] || part[i] || part[j];
                const int merges = between <= (loose ? (int64_t)any_cells : full_cells[r]);
                if (merges) apart_merge -= join(by_merge, i, j);
                if (merges || (double)box <= whole_cells[r]) apart_share -= join(by_share, i, j);
            }
        }
        if (apart_merge == 1) apart_share = 1;
        merged[r] = (double)apart_merge;
        joined[r] = (double)apart_share;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(cells);
    free(grid);
    free(bits);
    free(parent);
    free(part);
    Py_buffer *all[] = {&B.lengths, &B.points, &B.extent, &B.full_cells, &B.partial_all, &B.whole_cells, &B.across,
                        &B.merged, &B.joined};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) PyBuffer_Release(all[i]);
    return result;
}

typedef struct {
    Py_buffer lengths, points, extent, cells, fraction, least;
} CellBuffers;

typedef struct {
    int64_t code; /* the cell's place in C order */
    Py_ssize_t at; /* a point it holds */
} Coded;

static int by_code(const void *a, const void *b) {
    const int64_t x = ((const Coded *)a)->code, y = ((const Coded *)b)->code;
    return x < y ? -1 : x > y;
}

/* x added to the sum (*sum, *carry) with its rounding kept (Neumaier): a sum of 10^6 equal fractions stays within
 * an ulp of the exact one, as close as numpy's pairwise sum or closer, where a plain running sum drifts 1e-11 */
static void add_kept(double *sum, double *carry, double x) {
    const double t = *sum + x;
    *carry += fabs(*sum) >= fabs(x) ? (*sum - t) + x : (x - t) + *sum;
    *sum = t;
}

/* per row of cell lengths, the distinct cells holding the points, their fractions inside the array summed, and the
 * fewest points a cell holds (point_bounds._cells_numpy): each point's cell as one C-order code, sorted; as tuples
 * where the codes could pass 2^62 */
static PyObject *count_cells(PyObject *self, PyObject *args) {
    (void)self;
    CellBuffers B;
    Py_ssize_t rows, m, count;
    if (!PyArg_ParseTuple(args, "nnny*y*y*w*w*w*", &rows, &m, &count, &B.lengths, &B.points, &B.extent, &B.cells,
                          &B.fraction, &B.least))
        return NULL;
    PyObject *result = NULL;
    int64_t *cells = NULL, *grid = NULL;
    Coded *coded = NULL;
    if (m < 1 || m > 64 || count < 1 || rows < 0 || count > PY_SSIZE_T_MAX / m || rows > PY_SSIZE_T_MAX / m) {
        PyErr_Format(PyExc_ValueError,
                     "count_cells: %zd rows, %zd dimensions and %zd points, expected 0 or more, 1-64 and 1 or more "
                     "(at most PY_SSIZE_T_MAX values each)", rows, m, count);
        goto done;
    }
    if (!sized(&B.lengths, rows * m, "count_cells: lengths") || !sized(&B.points, count * m, "count_cells: points") ||
        !sized(&B.extent, m, "count_cells: extent") || !sized(&B.cells, rows, "count_cells: cells") ||
        !sized(&B.fraction, rows, "count_cells: fraction") || !sized(&B.least, rows, "count_cells: least"))
        goto done;
    const int64_t *lengths = B.lengths.buf, *points = B.points.buf, *extent = B.extent.buf;
    double *cells_out = B.cells.buf, *fraction_out = B.fraction.buf, *least_out = B.least.buf;
    for (Py_ssize_t i = 0; i < count * m; i++) {
        const Py_ssize_t d = i % m;
        if (extent[d] < 1 || points[i] < 0 || points[i] >= extent[d]) {
            PyErr_Format(PyExc_ValueError, "count_cells: point %zd lies outside the array along dimension %zd",
                         i / m, d);
            goto done;
        }
    }
    cells = malloc(sizeof(int64_t) * (size_t)(count * m));
    coded = malloc(sizeof(Coded) * (size_t)count);
    grid = malloc(sizeof(int64_t) * (size_t)m);
    if (!cells || !coded || !grid) {
        PyErr_NoMemory();
        goto done;
    }
    const size_t width = sizeof(int64_t) * (size_t)m;
    for (Py_ssize_t r = 0; r < rows; r++) {
        const int64_t *len = lengths + r * m;
        int64_t room = 1; /* the cells of the grid: their codes fit where fewer than 2^62 */
        for (Py_ssize_t d = 0; d < m; d++) {
            if (len[d] < 1) {
                PyErr_Format(PyExc_ValueError, "count_cells: row %zd: lengths must be positive", r);
                goto done;
            }
            grid[d] = extent[d] / len[d] + (extent[d] % len[d] != 0);
            room = saturated_product(room, grid[d]);
        }
        for (Py_ssize_t i = 0; i < count; i++)
            for (Py_ssize_t d = 0; d < m; d++) cells[i * m + d] = points[i * m + d] / len[d];
        const int by_codes = room < SATURATED;
        if (by_codes) {
            for (Py_ssize_t i = 0; i < count; i++) {
                int64_t code = 0;
                for (Py_ssize_t d = 0; d < m; d++) code = code * grid[d] + cells[i * m + d];
                coded[i].code = code;
                coded[i].at = i;
            }
            if (count <= 32) { /* a few points: in place, no calls */
                for (Py_ssize_t i = 1; i < count; i++) {
                    const Coded one = coded[i];
                    Py_ssize_t j = i;
                    for (; j > 0 && coded[j - 1].code > one.code; j--) coded[j] = coded[j - 1];
                    coded[j] = one;
                }
            } else {
                qsort(coded, (size_t)count, sizeof(Coded), by_code);
            }
        } else {
            sort_m = m;
            qsort(cells, (size_t)count, width, by_cell);
        }
        double distinct = 0.0, fraction = 0.0, carry = 0.0, least = (double)count;
        Py_ssize_t begin = 0;
        while (begin < count) {
            Py_ssize_t end = begin + 1;
            if (by_codes)
                while (end < count && coded[end].code == coded[begin].code) end++;
            else
                while (end < count && by_cell(cells + begin * m, cells + end * m) == 0) end++;
            distinct += 1.0;
            if ((double)(end - begin) < least) least = (double)(end - begin);
            const int64_t *cell = cells + (by_codes ? coded[begin].at : begin) * m;
            double inside = 1.0; /* a cell is short only along a dimension where it is the array's last */
            for (Py_ssize_t d = m - 1; d >= 0; d--) {
                const int64_t c = len[d], left = extent[d] - cell[d] * c;
                inside *= (double)(left < c ? left : c) / (double)c;
            }
            add_kept(&fraction, &carry, inside);
            begin = end;
        }
        cells_out[r] = distinct;
        fraction_out[r] = fraction + carry;
        least_out[r] = least;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(cells);
    free(coded);
    free(grid);
    Py_buffer *all[] = {&B.lengths, &B.points, &B.extent, &B.cells, &B.fraction, &B.least};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) PyBuffer_Release(all[i]);
    return result;
}

/* merges._ranks of the cell at `local` (its Morton code `code`, each position's bit and dimension in `code_bit` and
 * `code_dim`), three ways: the shard's whole cells whose codes are
 * less (in the box [0, whole)), its stored cells whose codes are less (in [0, stored)), and their sizes summed, the last
 * stored cell along d at 1 - lack[d] of a whole one. Per bit of the code that is 1, those sharing the code above it
 * with 0 there, a product over dimensions; of the first `positions` bits only (a bit's term depends on the code above
 * it alone, so two cells whose codes first differ at position p have the same terms above p: point_breaks counts the
 * difference of their ranks to p) */
static void rank_in(const int64_t *local, int64_t code, const unsigned char *code_bit, const unsigned char *code_dim,
                    int64_t positions, const int64_t *bits, const int64_t *whole, const int64_t *stored,
                    const double *lack, Py_ssize_t ndim, int64_t *whole_out, int64_t *stored_out, double *size_out) {
    int64_t total_whole = 0, total_stored = 0;
    double total_size = 0.0;
    for (int64_t position = 0; position < positions; position++) {
        if (!((code >> position) & 1)) continue;
        const int64_t b = code_bit[position], e = code_dim[position];
        int64_t count_whole = 1, count_stored = 1;
        double size = 1.0;
        for (Py_ssize_t d = 0; d < ndim && count_stored > 0; d++) {
            int64_t free = d == e ? b + 1 : b + (d < e);
            if (d != e && free > bits[d]) free = bits[d];
            const int64_t low = (local[d] >> free) << free;
            const int64_t width = (int64_t)1 << (d == e ? b : free);
            const int64_t in_whole = min64(low + width, whole[d]) - low;
            const int64_t in_stored = min64(low + width, stored[d]) - low;
            count_whole = in_whole > 0 ? count_whole * in_whole : 0;
            count_stored = in_stored > 0 ? count_stored * in_stored : 0;
            size *= in_stored > 0 ? (double)in_stored - (low + width >= stored[d] ? lack[d] : 0.0) : 0.0;
        }
        total_whole += count_whole;
        total_stored += count_stored;
        total_size += count_stored > 0 ? size : 0.0;
    }
    *whole_out = total_whole;
    *stored_out = total_stored;
    *size_out = total_size;
}

/* merges._least_between: the bytes at least of `cells` stored chunks, `whole` of them whole, their sizes `sizes` */
static double least_between(int64_t whole, int64_t cells, double sizes, double scale, double enc) {
    const double part = (double)(cells - whole);
    const double fractions = (sizes - (double)whole) * enc - 0.5 * part - 1e-9 * (scale + 1.0) * enc;
    return (double)whole * enc + (part > fractions ? part : fractions);
}

/* merges._most_between: their bytes at most */
static double most_between(int64_t whole, int64_t cells, double sizes, double scale, double enc) {
    const double part = (double)(cells - whole);
    return (double)whole * enc + (sizes - (double)whole) * enc + part + 1e-9 * (scale + 1.0) * enc;
}

typedef struct {
    int64_t key;  /* the shard's place in the grid of shards */
    int64_t code; /* the chunk's Morton code in the shard */
    int64_t at;   /* its point, for its coordinates */
} Placed;

static int by_place(const void *a, const void *b) {
    const Placed *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    if (x->code != y->code) return x->code < y->code ? -1 : 1;
    return 0;
}

/* Sorts n words ascending, in place: insertion below 24, else quicksort on the median of three (no calls through a
 * comparator: a search sorts the points of millions of layouts, a hundred each) */
static void sort_words(uint64_t *w, Py_ssize_t n) {
    while (n > 24) {
        uint64_t a = w[0], b = w[n / 2], c = w[n - 1];
        const uint64_t pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        Py_ssize_t i = 0, j = n - 1;
        for (;;) {
            while (w[i] < pivot) i++;
            while (w[j] > pivot) j--;
            if (i >= j) break;
            const uint64_t t = w[i];
            w[i++] = w[j];
            w[j--] = t;
        }
        /* [0, j] <= pivot <= [j + 1, n): the smaller side by recursion, the larger in the loop */
        if (j + 1 < n - j - 1) {
            sort_words(w, j + 1);
            w += j + 1;
            n -= j + 1;
        } else {
            sort_words(w + j + 1, n - j - 1);
            n = j + 1;
        }
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        const uint64_t item = w[i];
        Py_ssize_t j = i;
        for (; j > 0 && w[j - 1] > item; j--) w[j] = w[j - 1];
        w[j] = item;
    }
}

/* Sorts n words ascending by their bits from `low` up to `high` (those above are 0), stably: a byte a pass, through
 * `spare` (n words), for many words of few such bits (a profile's chunks, thousands a layout), where a quicksort's
 * comparisons cost more than the passes */
static void radix_words(uint64_t *w, uint64_t *spare, Py_ssize_t n, int low, int high) {
    uint64_t *from = w, *to = spare;
    for (int shift = low; shift < high; shift += 8) {
        Py_ssize_t start[257] = {0};
        for (Py_ssize_t i = 0; i < n; i++) start[((from[i] >> shift) & 255) + 1]++;
        for (int b = 0; b < 256; b++) start[b + 1] += start[b];
        for (Py_ssize_t i = 0; i < n; i++) to[start[(from[i] >> shift) & 255]++] = from[i];
        uint64_t *t = from;
        from = to;
        to = t;
    }
    if (from != w) memcpy(w, from, sizeof(uint64_t) * (size_t)n);
}

/* Chunks along the dimensions (summed) at most for point_breaks to place them through tables of their parts */
#define PLACE_PARTS 4096

/* Words at least a pass of `radix_words` for it to sort them, not `sort_words` (measured on profiles' chunks and
 * scattered points: about where a pass's 256 counts and two sweeps cost what the quicksort's comparisons do) */
#define RADIX_WORDS_A_PASS 96

typedef struct {
    Py_buffer chunks, per, shape, points, enc, shards, ranged, breaks, merged;
} BreakBuffers;

static PyObject *point_breaks(PyObject *self, PyObject *args) {
    (void)self;
    BreakBuffers B;
    Py_ssize_t k, ndim, count;
    long long gap;
    double fraction;
    int compressed, ranked;
    if (!PyArg_ParseTuple(args, "nnny*y*y*y*y*Ldppw*w*w*w*", &k, &ndim, &count, &B.chunks, &B.per, &B.shape,
                          &B.points, &B.enc, &gap, &fraction, &compressed, &ranked, &B.shards, &B.ranged, &B.breaks,
                          &B.merged))
        return NULL;
    PyObject *result = NULL;
    Placed *placed = NULL;
    int64_t *cell = NULL, *shard = NULL, *grid = NULL, *bits = NULL, *scratch = NULL, *parts = NULL;
    int64_t *across = NULL, *shift = NULL;
    double *lacks = NULL;
    uint64_t *words = NULL;
    if (ndim < 1 || ndim > 64 || count < 1 || k < 0 || count > PY_SSIZE_T_MAX / ndim || k > PY_SSIZE_T_MAX / ndim) {
        PyErr_Format(PyExc_ValueError, "point_breaks: %zd dimensions and %zd points, expected 1-64 and 1 or more",
                     ndim, count);
        goto done;
    }
    if (!sized(&B.chunks, k * ndim, "point_breaks: chunks") || !sized(&B.per, k * ndim, "point_breaks: per") ||
        !sized(&B.shape, ndim, "point_breaks: shape") || !sized(&B.points, count * ndim, "point_breaks: points") ||
        !sized(&B.enc, k, "point_breaks: chunk_enc") || !sized(&B.shards, k, "point_breaks: shards") ||
        !sized(&B.ranged, k, "point_breaks: ranged") || !sized(&B.breaks, k, "point_breaks: breaks") ||
        !sized(&B.merged, k, "point_breaks: merged"))
        goto done;
    const int64_t *chunks_all = B.chunks.buf, *per_all = B.per.buf, *shape = B.shape.buf, *points = B.points.buf;
    const double *enc = B.enc.buf;
    double *shards_out = B.shards.buf, *ranged_out = B.ranged.buf, *breaks_out = B.breaks.buf,
           *merged_out = B.merged.buf;
    placed = malloc(sizeof(Placed) * (size_t)count);
    cell = malloc(sizeof(int64_t) * (size_t)(count * ndim));
    shard = malloc(sizeof(int64_t) * (size_t)ndim); /* a shard's place along each dimension */
    parts = malloc(sizeof(int64_t) * 2 * PLACE_PARTS); /* per dimension and chunk along it: its part of a key, of a code */
    grid = malloc(sizeof(int64_t) * (size_t)ndim);
    bits = malloc(sizeof(int64_t) * (size_t)ndim);
    scratch = malloc(sizeof(int64_t) * (size_t)(4 * ndim)); /* a pair's local coordinates, the shard's whole and
                                                              * stored boxes */
    lacks = malloc(sizeof(double) * (size_t)ndim); /* what the shard's last stored chunk along each lacks */
    words = malloc(sizeof(uint64_t) * (size_t)count * 2); /* and as many spare, for radix_words */
    across = malloc(sizeof(int64_t) * (size_t)ndim); /* shards along each dimension */
    shift = malloc(sizeof(int64_t) * (size_t)ndim);  /* log2 of the chunks a shard along it (-1: not a power of 2) */
    if (!placed || !cell || !shard || !parts || !grid || !bits || !scratch || !across || !shift || !lacks || !words) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t r = 0; r < k; r++)
        for (Py_ssize_t d = 0; d < ndim; d++)
            if (chunks_all[r * ndim + d] < 1 || per_all[r * ndim + d] < 1 || shape[d] < 1) {
                PyErr_Format(PyExc_ValueError, "point_breaks: layout %zd: chunks, shards and shape must be positive",
                             r);
                goto done;
            }
    for (Py_ssize_t i = 0; i < count; i++) /* (a point outside would index past the tables of a layout's chunks) */
        for (Py_ssize_t d = 0; d < ndim; d++)
            if (points[i * ndim + d] < 0 || points[i * ndim + d] >= shape[d]) {
                PyErr_Format(PyExc_ValueError, "point_breaks: point %zd is %lld along dimension %zd, expected 0 to %lld",
                             i, (long long)points[i * ndim + d], d, (long long)(shape[d] - 1));
                goto done;
            }
    /* no Python below, to the end of the layouts: other threads run (merges.point_breaks splits a large call) */
    Py_BEGIN_ALLOW_THREADS
    const int64_t *celled = NULL; /* the chunk shape `cell` holds the points' chunks of */
    for (Py_ssize_t r = 0; r < k; r++) {
        const int64_t *c = chunks_all + r * ndim, *per = per_all + r * ndim;
        int64_t key_room = 1, total_bits = 0, most_bits = 0;
        for (Py_ssize_t d = 0; d < ndim; d++) {
            grid[d] = shape[d] / c[d] + (shape[d] % c[d] != 0); /* (no sum: a shape near 2^63 would wrap) */
            bits[d] = bit_length(per[d] - 1);
            total_bits += bits[d];
            if (bits[d] > most_bits) most_bits = bits[d];
            across[d] = grid[d] / per[d] + (grid[d] % per[d] != 0);
            shift[d] = (per[d] & (per[d] - 1)) == 0 ? bits[d] : -1;
            key_room = saturated_product(key_room, across[d]);
        }
        if (total_bits > 62 || key_room >= SATURATED) { /* codes or keys past int64: no bound (merges refuses too) */
            shards_out[r] = ranged_out[r] = breaks_out[r] = merged_out[r] = 0.0;
            continue;
        }
        int64_t at = 0;
        unsigned char code_dim[64], code_bit[64]; /* each code position's dimension and bit, for the codes below */
        unsigned char position_of[64 * 64]; /* and each (dimension, bit)'s position, as d * 64 + bit */
        unsigned char short_last[64]; /* compressed, and the array's last chunk along d partly outside: smaller */
        double last_lacks[64]; /* what the array's last chunk along d lacks of a whole one, where it is short */
        for (Py_ssize_t d = 0; d < ndim; d++) {
            short_last[d] = compressed && shape[d] % c[d] != 0;
            last_lacks[d] = short_last[d] ? 1.0 - (double)(shape[d] % c[d]) / (double)c[d] : 0.0;
        }
        for (int64_t bit = 0; bit < most_bits; bit++)
            for (Py_ssize_t d = 0; d < ndim; d++)
                if (bits[d] > bit) {
                    position_of[d * 64 + bit] = (unsigned char)at;
                    code_dim[at] = (unsigned char)d;
                    code_bit[at++] = (unsigned char)bit;
                }
        int64_t *local = scratch; /* a point's place in its shard (scratch is free until the breaks below) */
        /* the points' chunks as those last worked out where the chunk shape is theirs (callers list a shape's
         * layouts together): no divisions */
        const int same = celled && memcmp(c, celled, sizeof(int64_t) * (size_t)ndim) == 0;
        celled = c;
        /* each point's place as one word (shard, code, point) where they fit in 63 bits, sorted as integers */
        const int at_bits = bit_length((int64_t)count - 1), key_bits = bit_length(key_room - 1);
        const int packed = key_bits + total_bits + at_bits <= 63;
        /* Where the chunks along the dimensions are fewer than the points (a profile's thousands of chunks), each
         * chunk's part of its shard's key and of its code, worked out once a layout: a key and a code are sums of
         * their dimensions' parts (the code's are bits apart) */
        int64_t chunks_along = 0;
        for (Py_ssize_t d = 0; d < ndim; d++) chunks_along += grid[d] < PLACE_PARTS ? grid[d] : PLACE_PARTS;
        const int tabled = chunks_along < PLACE_PARTS && chunks_along < (int64_t)count;
        int64_t offset[64];
        if (tabled) {
            int64_t stride = 1, next = 0;
            for (Py_ssize_t d = ndim - 1; d >= 0; d--) {
                offset[d] = next;
                for (int64_t v = 0; v < grid[d]; v++) {
                    const int64_t at_shard = shift[d] >= 0 ? v >> shift[d] : v / per[d], in = v - at_shard * per[d];
                    int64_t part = 0;
                    for (int64_t bit = 0; bit < bits[d]; bit++) part |= ((in >> bit) & 1) << position_of[d * 64 + bit];
                    parts[2 * (next + v)] = at_shard * stride;
                    parts[2 * (next + v) + 1] = part;
                }
                next += grid[d];
                stride *= across[d]; /* (at most key_room: no overflow) */
            }
        }
        for (Py_ssize_t i = 0; i < count; i++) {
            int64_t key = 0, code = 0, position = 0;
            if (tabled) {
                for (Py_ssize_t d = 0; d < ndim; d++) {
                    const int64_t at_cell = same ? cell[i * ndim + d] : points[i * ndim + d] / c[d];
                    cell[i * ndim + d] = at_cell;
                    key += parts[2 * (offset[d] + at_cell)];
                    code += parts[2 * (offset[d] + at_cell) + 1];
                }
            } else {
                for (Py_ssize_t d = 0; d < ndim; d++) { /* (a shift where a shard holds 2^j chunks: most do) */
                    const int64_t at_cell = same ? cell[i * ndim + d] : points[i * ndim + d] / c[d];
                    const int64_t at_shard = shift[d] >= 0 ? at_cell >> shift[d] : at_cell / per[d];
                    cell[i * ndim + d] = at_cell;
                    local[d] = at_cell - at_shard * per[d];
                    key = key * across[d] + at_shard;
                }
                for (; position < at; position++) /* Morton: each position's (bit, dimension), in order */
                    code |= ((local[code_dim[position]] >> code_bit[position]) & 1) << position;
            }
            if (packed) { /* (placed below, once sorted) */
                words[i] = ((uint64_t)key << (total_bits + at_bits)) | ((uint64_t)code << at_bits) | (uint64_t)i;
                continue;
            }
            placed[i].key = key;
            placed[i].code = code;
            placed[i].at = i;
        }
        if (packed) {
            const int sorted_bits = key_bits + (int)total_bits, passes = (sorted_bits + 7) / 8;
            if (count >= (Py_ssize_t)passes * RADIX_WORDS_A_PASS) /* (the point's own bits need no order) */
                radix_words(words, words + count, count, at_bits, at_bits + sorted_bits);
            else
                sort_words(words, count);
            const uint64_t code_mask = ((uint64_t)1 << total_bits) - 1, at_mask = ((uint64_t)1 << at_bits) - 1;
            for (Py_ssize_t i = 0; i < count; i++) {
                placed[i].key = (int64_t)(words[i] >> (total_bits + at_bits));
                placed[i].code = (int64_t)((words[i] >> at_bits) & code_mask);
                placed[i].at = (int64_t)(words[i] & at_mask);
            }
        } else if (count <= 32) { /* a few points: in place, no calls */
            for (Py_ssize_t i = 1; i < count; i++) {
                const Placed item = placed[i];
                Py_ssize_t j = i;
                for (; j > 0 && (placed[j - 1].key > item.key ||
                                 (placed[j - 1].key == item.key && placed[j - 1].code > item.code));
                     j--)
                    placed[j] = placed[j - 1];
                placed[j] = item;
            }
        } else {
            qsort(placed, (size_t)count, sizeof(Placed), by_place);
        }
        double per_object = 1.0;
        for (Py_ssize_t d = 0; d < ndim; d++) per_object *= (double)per[d];
        double shards = 0.0, ranged = 0.0, breaks = 0.0, merged = 0.0;
        Py_ssize_t begin = 0;
        while (begin < count) {
            Py_ssize_t end = begin + 1, pieces = 1;
            for (; end < count && placed[end].key == placed[begin].key; end++)
                if (placed[end].code != placed[end - 1].code) pieces++;
            shards += 1.0;
            if ((double)pieces < fraction * per_object) {
                ranged += 1.0;
                int64_t *s = shard; /* the shard's place along each dimension */
                for (Py_ssize_t d = 0; d < ndim; d++) {
                    const int64_t at_cell = cell[placed[begin].at * ndim + d];
                    s[d] = shift[d] >= 0 ? at_cell >> shift[d] : at_cell / per[d];
                }
                for (Py_ssize_t e = begin + 1; e < end; e++) {
                    /* the same chunk; or the next in the shard's order, no chunk between (nearly every other pair of
                     * a profile's chunks): no break, no byte merged */
                    if (placed[e].code - placed[e - 1].code <= 1) continue;
                    const int64_t *x = cell + placed[e - 1].at * ndim, *y = cell + placed[e].at * ndim;
                    const int64_t split_at = bit_length(placed[e - 1].code ^ placed[e].code) - 1;
                    const int64_t level = code_bit[split_at], dim = code_dim[split_at];
                    int64_t after = 1, before = 1, after_all = 1, before_all = 1;
                    double after_size = 1.0, before_size = 1.0, x_size = 1.0, y_size = 1.0;
                    int x_full = 1, y_full = 1;
                    int64_t *lxs = scratch, *lys = scratch + ndim, *region = scratch + 2 * ndim;
                    int64_t *ends = scratch + 3 * ndim;
                    double *lack = lacks; /* (this shard's: 0 along d unless it holds the array's short last chunk) */
                    for (Py_ssize_t d = 0; d < ndim; d++) {
                        int64_t free = d < dim ? level + 1 : level;
                        if (free > bits[d]) free = bits[d];
                        const int64_t mask = ((int64_t)1 << free) - 1;
                        const int64_t lx = x[d] - s[d] * per[d], ly = y[d] - s[d] * per[d];
                        const int64_t stored = min64(per[d], grid[d] - s[d] * per[d]);
                        const int partial = short_last[d] && s[d] * per[d] + stored == grid[d];
                        const int64_t full_end = stored - 1 - partial, last_at = stored - 1;
                        lack[d] = partial ? last_lacks[d] : 0.0;
                        const int64_t a = min64(lx | mask, full_end) - lx + 1;
                        const int64_t b = min64(ly, full_end) - (ly & ~mask) + 1;
                        after *= a > 0 ? a : 0;
                        before *= b > 0 ? b : 0;
                        /* every stored chunk of the two boxes, and their sizes (x and y are stored) */
                        const int64_t after_to = min64(lx | mask, last_at), before_from = ly & ~mask;
                        after_all *= after_to - lx + 1;
                        before_all *= ly - before_from + 1;
                        after_size *= (double)(after_to - lx + 1) - (after_to == last_at ? lack[d] : 0.0);
                        before_size *= (double)(ly - before_from + 1) - (ly == last_at ? lack[d] : 0.0);
                        x_size *= lx == last_at ? 1.0 - lack[d] : 1.0;
                        y_size *= ly == last_at ? 1.0 - lack[d] : 1.0;
                        if (lx > full_end) x_full = 0;
                        if (ly > full_end) y_full = 0;
                        lxs[d] = lx;
                        lys[d] = ly;
                        region[d] = full_end + 1;
                        ends[d] = stored;
                    }
                    int cut = least_between(after - x_full + before - y_full, after_all - 1 + before_all - 1,
                                            after_size - x_size + before_size - y_size, after_size + before_size,
                                            enc[r]) > (double)gap;
                    if (ranked && !cut) { /* every stored chunk between them, from their ranks (to the split) */
                        int64_t whole_y, whole_x, all_y, all_x;
                        double size_y, size_x;
                        rank_in(lys, placed[e].code, code_bit, code_dim, split_at + 1, bits, region, ends, lack, ndim,
                                &whole_y, &all_y, &size_y);
                        rank_in(lxs, placed[e - 1].code, code_bit, code_dim, split_at + 1, bits, region, ends, lack, ndim,
                                &whole_x, &all_x, &size_x);
                        const int64_t whole = whole_y - whole_x - x_full, cells = all_y - all_x - 1;
                        const double sizes = size_y - size_x - x_size;
                        const double least = least_between(whole, cells, sizes, size_y, enc[r]);
                        cut = least > (double)gap;
                        /* merged in one range whatever the rounding: the bytes between are read too */
                        if (most_between(whole, cells, sizes, size_y, enc[r]) <= (double)gap) merged += least;
                    }
                    if (cut) breaks += 1.0;
                }
            }
            begin = end;
        }
        shards_out[r] = shards;
        ranged_out[r] = ranged;
        breaks_out[r] = breaks;
        merged_out[r] = merged;
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    free(placed);
    free(cell);
    free(shard);
    free(parts);
    free(grid);
    free(bits);
    free(scratch);
    free(across);
    free(shift);
    free(lacks);
    free(words);
    Py_buffer *all[] = {&B.chunks, &B.per, &B.shape, &B.points, &B.enc, &B.shards, &B.ranged, &B.breaks, &B.merged};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) PyBuffer_Release(all[i]);
    return result;
}

/* listed_floor: listed.listed_numpy, the same arithmetic in the same order, a layout at a time. Per layout
 * i (chunk shape owner[i], option which[i][d] of each dimension's chunks per shard, of the 4 in `table`), per pattern
 * p: logs and corner from per-(shape, dimension, option) tables, per pointwise read r of p its shards (`held`, per
 * layout) and the objects of its other dimensions; then the requests, indexes, waits and waves of each pattern, summed
 * by the patterns' weights into `floor`'s row of the chunk shape. */
typedef struct {
    Py_buffer owner, which, table, floor, weights, windows, first_pointed, logmean, corner, read_pattern, read_first,
        held, objects, touched, merged, joined, scalars, rows;
} FloorBuffers;

static PyObject *listed_floor(PyObject *self, PyObject *args) {
    (void)self;
    FloorBuffers B;
    Py_ssize_t n, m, ndim, P, R;
    if (!PyArg_ParseTuple(args, "nnnnny*y*y*y*y*y*y*y*y*y*y*y*y*y*y*y*y*w*", &n, &m, &ndim, &P, &R, &B.owner,
                          &B.which, &B.table, &B.floor, &B.weights, &B.windows, &B.first_pointed, &B.logmean,
                          &B.corner, &B.read_pattern, &B.read_first, &B.held, &B.objects, &B.touched, &B.merged,
                          &B.joined, &B.scalars, &B.rows))
        return NULL;
    PyObject *result = NULL;
    if (n < 0 || m < 1 || ndim < 1 || ndim > 64 || P < 0 || R < 0 || P > 1024 || R > 1 << 20 ||
        n > PY_SSIZE_T_MAX / 64 / (R + 1) || m > PY_SSIZE_T_MAX / 256 / (P + R + 1)) {
        PyErr_Format(PyExc_ValueError, "listed_floor: %zd layouts, %zd chunk shapes, %zd dimensions, %zd patterns and "
                     "%zd pointwise reads, expected 0 or more, 1 or more, 1-64, 0-1024 and 0-2^20", n, m, ndim, P, R);
        goto done;
    }
    const Py_ssize_t cells = m * ndim * 4;
    if (!sized(&B.owner, n, "listed_floor: owner") || !sized(&B.which, n * ndim, "listed_floor: which") ||
        !sized(&B.table, cells, "listed_floor: table") || !sized(&B.floor, m * 11, "listed_floor: floor") ||
        !sized(&B.weights, P, "listed_floor: weights") || !sized(&B.windows, P, "listed_floor: windows") ||
        !sized(&B.first_pointed, P, "listed_floor: first_pointed") ||
        !sized(&B.logmean, P * cells, "listed_floor: logmean") || !sized(&B.corner, P * cells, "listed_floor: corner") ||
        !sized(&B.read_pattern, R, "listed_floor: read_pattern") ||
        !sized(&B.read_first, R, "listed_floor: read_first") || !sized(&B.held, R * n, "listed_floor: held") ||
        !sized(&B.objects, R * cells, "listed_floor: objects") || !sized(&B.touched, R * m, "listed_floor: touched") ||
        !sized(&B.merged, R * m, "listed_floor: merged") || !sized(&B.joined, R * m, "listed_floor: joined") ||
        !sized(&B.scalars, 8, "listed_floor: scalars") || !sized(&B.rows, n * 11, "listed_floor: rows"))
        goto done;
    const int64_t *owner = B.owner.buf, *which = B.which.buf, *table = B.table.buf, *windows = B.windows.buf,
                  *first_pointed = B.first_pointed.buf, *read_pattern = B.read_pattern.buf,
                  *read_first = B.read_first.buf;
    const double *floor_rows = B.floor.buf, *weights = B.weights.buf, *logmean = B.logmean.buf,
                 *corner_of = B.corner.buf, *held = B.held.buf, *objects_of = B.objects.buf,
                 *touched_of = B.touched.buf, *merged_of = B.merged.buf, *joined_of = B.joined.buf,
                 *scalars = B.scalars.buf;
    double *rows = B.rows.buf;
    for (Py_ssize_t r = 0; r < R; r++)
        if (read_pattern[r] < 0 || read_pattern[r] >= P) {
            PyErr_Format(PyExc_ValueError, "listed_floor: pointwise read %zd is of pattern %lld, expected 0-%zd", r,
                         (long long)read_pattern[r], P - 1);
            goto done;
        }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (owner[i] < 0 || owner[i] >= m) {
            PyErr_Format(PyExc_ValueError, "listed_floor: layout %zd is of chunk shape %lld, expected 0-%zd", i,
                         (long long)owner[i], m - 1);
            goto done;
        }
        for (Py_ssize_t d = 0; d < ndim; d++)
            if (which[i * ndim + d] < 0 || which[i * ndim + d] > 3) {
                PyErr_Format(PyExc_ValueError, "listed_floor: layout %zd's option along dimension %zd is %lld, "
                             "expected 0-3", i, d, (long long)which[i * ndim + d]);
                goto done;
            }
    }
    const double concurrency = scalars[0], fraction = scalars[1], latency_s = scalars[2], request_s = scalars[3],
                 connect_s = scalars[4], index_s = scalars[5], index_entry_s = scalars[6], most = scalars[7];
    const double slots = concurrency > 1.0 ? concurrency : 1.0;
    Py_BEGIN_ALLOW_THREADS /* no Python below: other threads run (listed.listed_rows splits a large call) */
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t o = owner[i];
        const int64_t *w = which + i * ndim;
        double per_object = 1.0;
        for (Py_ssize_t d = 0; d < ndim; d++) per_object *= (double)table[(o * ndim + d) * 4 + w[d]];
        double lat = 0.0, req = 0.0, conn = 0.0, idx = 0.0;
        for (Py_ssize_t p = 0; p < P; p++) {
            const double win = (double)windows[p];
            double logs = 0.0, corner = 1.0, extra = 0.0, point_wait = 0.0;
            if (windows[p] > 0) {
                const double *lm = logmean + p * cells, *cn = corner_of + p * cells;
                for (Py_ssize_t d = 0; d < ndim; d++) {
                    logs += lm[(o * ndim + d) * 4 + w[d]];
                    corner *= cn[(o * ndim + d) * 4 + w[d]];
                }
                for (Py_ssize_t r = 0; r < R; r++) {
                    if (read_pattern[r] != p) continue;
                    const double h = held[r * n + i];
                    logs += log(h) / win;
                    const double *ob = objects_of + r * cells;
                    double others = 1.0;
                    for (Py_ssize_t d = 0; d < ndim; d++) others *= ob[(o * ndim + d) * 4 + w[d]];
                    const double objects = h * others, touched = touched_of[r * m + o];
                    const double merged = merged_of[r * m + o], joined = joined_of[r * m + o];
                    double requests; /* point_bounds.PointBounds.requests */
                    if (per_object <= 1.0)
                        requests = 1.0 + merged < joined ? 1.0 + merged : joined;
                    else if (fraction * per_object > touched)
                        requests = objects + (objects > merged ? objects : merged);
                    else
                        requests = joined;
                    extra += requests - objects > 0.0 ? requests - objects : 0.0;
                    if (read_first[r]) point_wait = fraction * per_object > touched ? 1.0 : 0.0;
                }
            }
            double requests_p = 0.0, indexes_p = 0.0, waits_p = 0.0, waves_p = 0.0;
            if (windows[p] > 0) {
                const double mean = exp(logs) * (1 - 1e-12);
                requests_p = (win > win * mean ? win : win * mean) + extra;
                indexes_p = mean > 1.0 ? mean : 1.0;
                waves_p = ceil(requests_p / slots - 1e-9) - win;
                if (waves_p < 0.0) waves_p = 0.0;
                if (!first_pointed[p])
                    waits_p = corner < fraction * per_object ? 1.0 : 0.0;
                else if (point_wait > waves_p)
                    waves_p = point_wait;
            }
            lat += (waits_p + waves_p) * weights[p];
            req += requests_p * weights[p];
            conn += (requests_p < concurrency ? requests_p : concurrency) * weights[p];
            idx += indexes_p * weights[p];
        }
        const double *f = floor_rows + o * 11;
        double *out = rows + i * 11;
        for (int t = 0; t < 11; t++) out[t] = f[t];
        out[0] += lat * latency_s;
        if (req * request_s > out[1]) out[1] = req * request_s;
        if (conn * connect_s > out[2]) out[2] = conn * connect_s;
        if (idx * index_s > out[3]) out[3] = idx * index_s;
        if (idx * per_object * index_entry_s > out[4]) out[4] = idx * per_object * index_entry_s;
        out[8] += idx * 16 * (per_object - 1) / most;
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:;
    Py_buffer *all[] = {&B.owner,   &B.which,       &B.table,      &B.floor,   &B.weights, &B.windows,
                        &B.first_pointed, &B.logmean, &B.corner, &B.read_pattern, &B.read_first, &B.held,
                        &B.objects, &B.touched,     &B.merged,     &B.joined,  &B.scalars, &B.rows};
    for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) PyBuffer_Release(all[k]);
    return result;
}

/* list_shardings: candidates._shardings_numpy. Per chunk shape (its chunks along each dimension, `fulls`), every
 * combination of the options 1, 2, 8 and all along each dimension (lexicographic, the last dimension fastest) whose
 * options fit the dimension ("all" only where it is none of the others), holding more than one chunk and at most
 * `most` in all: its row, chunks per shard and options, written from the start of the outputs; returns how many. */
typedef struct {
    Py_buffer fulls, owner, ks, which;
} ShardingBuffers;

static PyObject *list_shardings(PyObject *self, PyObject *args) {
    (void)self;
    ShardingBuffers B;
    Py_ssize_t m, ndim;
    double most;
    if (!PyArg_ParseTuple(args, "nny*dw*w*w*", &m, &ndim, &B.fulls, &most, &B.owner, &B.ks, &B.which)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t found = 0;
    if (m < 0 || ndim < 1 || ndim > 31 || m > PY_SSIZE_T_MAX / ndim) {
        PyErr_Format(PyExc_ValueError, "list_shardings: %zd chunk shapes of %zd dimensions, expected 0 or more and 1-31",
                     m, ndim);
        goto done;
    }
    const Py_ssize_t room = B.owner.len / 8;
    if (!sized(&B.fulls, m * ndim, "list_shardings: fulls") || !sized(&B.owner, room, "list_shardings: owner") ||
        room > PY_SSIZE_T_MAX / ndim || !sized(&B.ks, room * ndim, "list_shardings: ks") ||
        !sized(&B.which, room * ndim, "list_shardings: which"))
        goto done;
    const int64_t *fulls = B.fulls.buf;
    int64_t *owner = B.owner.buf, *ks = B.ks.buf, *which = B.which.buf;
    int64_t option[64][4];
    int valid[64][4], w[64];
    for (Py_ssize_t r = 0; r < m; r++) {
        const int64_t *full = fulls + r * ndim;
        for (Py_ssize_t d = 0; d < ndim; d++) {
            const int64_t f = full[d];
            if (f < 1) {
                PyErr_Format(PyExc_ValueError, "list_shardings: chunk shape %zd holds %lld chunks along dimension %zd, "
                             "expected 1 or more", r, (long long)f, d);
                goto done;
            }
            option[d][0] = 1, option[d][1] = 2, option[d][2] = 8, option[d][3] = f;
            for (int o = 0; o < 4; o++) valid[d][o] = option[d][o] <= f;
            valid[d][3] = valid[d][3] && f != 1 && f != 2 && f != 8;
            w[d] = 0;
        }
        for (;;) { /* the combinations in order: an odometer, the last dimension fastest */
            int fits = 1;
            double per_object = 1.0;
            for (Py_ssize_t d = 0; d < ndim && fits; d++) {
                fits = valid[d][w[d]];
                per_object *= (double)option[d][w[d]];
            }
            if (fits && per_object > 1 && per_object <= most) {
                if (found == room) {
                    PyErr_Format(PyExc_ValueError, "list_shardings: more layouts than the %zd the outputs hold", room);
                    goto done;
                }
                owner[found] = r;
                for (Py_ssize_t d = 0; d < ndim; d++) {
                    ks[found * ndim + d] = option[d][w[d]];
                    which[found * ndim + d] = w[d];
                }
                found++;
            }
            Py_ssize_t d = ndim - 1;
            while (d >= 0 && w[d] == 3) w[d--] = 0;
            if (d < 0) break;
            w[d]++;
        }
    }
    result = PyLong_FromSsize_t(found);
done:
    PyBuffer_Release(&B.fulls);
    PyBuffer_Release(&B.owner);
    PyBuffer_Release(&B.ks);
    PyBuffer_Release(&B.which);
    return result;
}

/* tie_least: search._tie_least_numpy, the same arithmetic a row at a time, in the same order (to the bit). Rows not
 * `near` are left +inf. */
typedef struct {
    Py_buffer rows, near, own, low, high, corners, least;
} TieBuffers;

static double least_of(double a, double b) { return (a != a || b != b) ? NAN : (b < a ? b : a); }

/* d times f, 0 where d is 0 whatever f (search._scaled: an infinite factor makes no NaN of an equal term) */
static double scaled(double d, double f) { return d == 0 ? 0.0 : d * f; }

static double charged(double d, double low, double high) { return d > 0 ? scaled(d, low) : scaled(d, high); }

static PyObject *tie_least(PyObject *self, PyObject *args) {
    (void)self;
    TieBuffers B;
    Py_ssize_t n, k, r, a, either, one, pool;
    if (!PyArg_ParseTuple(args, "nnnnnnny*y*y*y*y*y*w*", &n, &k, &r, &a, &either, &one, &pool, &B.rows, &B.near,
                          &B.own, &B.low, &B.high, &B.corners, &B.least))
        return NULL;
    PyObject *result = NULL;
    if (n < 0 || n > PY_SSIZE_T_MAX / 88 || k < 1 || k > 64) {
        PyErr_Format(PyExc_ValueError, "tie_least: %zd rows and %zd corners, expected 0 or more and 1-64", n, k);
        goto done;
    }
    const Py_ssize_t columns[] = {r, a, either, one, pool};
    for (int c = 0; c < 5; c++)
        if (columns[c] < 0 || columns[c] > 10) {
            PyErr_Format(PyExc_ValueError, "tie_least: column %zd, expected 0-10", columns[c]);
            goto done;
        }
    if (!sized(&B.rows, n * 11, "tie_least: rows") || B.near.len != n || !sized(&B.own, 11, "tie_least: own") ||
        !sized(&B.low, 11, "tie_least: low") || !sized(&B.high, 11, "tie_least: high") ||
        !sized(&B.corners, 2 * k, "tie_least: corners") || !sized(&B.least, n, "tie_least: least")) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "tie_least: near holds %zd bytes, expected %zd", B.near.len, n);
        goto done;
    }
    const double *rows = B.rows.buf, *own = B.own.buf, *low = B.low.buf, *high = B.high.buf, *corners = B.corners.buf;
    const unsigned char *near = B.near.buf;
    double *least = B.least.buf;
    int skip[11] = {0};
    for (int c = 0; c < 5; c++) skip[columns[c]] = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!near[i]) {
            least[i] = INFINITY;
            continue;
        }
        const double *row = rows + i * 11;
        double diff[11];
        for (int t = 0; t < 11; t++) diff[t] = row[t] - own[t];
        double part[11];
        for (int t = 0; t < 11; t++) part[t] = skip[t] ? 0.0 : charged(diff[t], low[t], high[t]);
        /* summed in numpy's order for a row of 11 (its pairwise sum: eight partial sums, then the rest in turn) */
        double sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
        sum += part[8];
        sum += part[9];
        sum += part[10];
        /* the two decode terms share one rate (the pool's, the speedup too): the least of the corners */
        double corner = scaled(diff[one], corners[0]) + scaled(scaled(diff[pool], corners[0]), corners[1]);
        for (Py_ssize_t c = 1; c < k; c++)
            corner = least_of(corner, scaled(diff[one], corners[2 * c]) +
                                          scaled(scaled(diff[pool], corners[2 * c]), corners[2 * c + 1]));
        sum = sum + corner;
        /* the transfer of unknown rate split between the two as gives the least: at an end or where a difference
         * changes sign (convex) */
        const double extra = row[either];
        double lo = -diff[r], hi = diff[a] + extra;
        lo = lo < 0 ? 0 : (lo > extra ? extra : lo);
        hi = hi < 0 ? 0 : (hi > extra ? extra : hi);
        const double splits[4] = {0.0, extra, lo, hi};
        double best = 0.0;
        for (int c = 0; c < 4; c++) {
            const double x = splits[c];
            const double value = charged(diff[r] + x, low[r], high[r]) + charged(diff[a] + extra - x, low[a], high[a]);
            best = c == 0 ? value : least_of(best, value);
        }
        least[i] = sum + best;
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:;
    Py_buffer *all[] = {&B.rows, &B.near, &B.own, &B.low, &B.high, &B.corners, &B.least};
    for (size_t j = 0; j < sizeof(all) / sizeof(all[0]); j++) PyBuffer_Release(all[j]);
    return result;
}

/* hash_find, hash_insert: a table of `slots` (a power of two) pairs of int64, a key and the place of its values (-1:
 * the slot is empty), side by side (a probe reads one cache line); Fibonacci hashing, linear probing. Its owner
 * (memo.KeyedValues) keeps it at most half full, so a probe meets an empty slot soon; a full one is refused, never
 * looped on. */
typedef struct {
    Py_buffer table, asked, out;
} HashBuffers;

static int hash_table(Py_buffer *table, Py_ssize_t *slots, int *bits, const char *name) {
    *slots = table->len / 16;
    *bits = bit_length((int64_t)*slots) - 1;
    if (*slots < 2 || ((size_t)*slots & ((size_t)*slots - 1)) != 0 || table->len % 16 != 0) {
        PyErr_Format(PyExc_ValueError, "%s: the table holds %zd bytes, expected 16 times a power of two (2 slots or "
                     "more)", name, table->len);
        return 0;
    }
    return 1;
}

#define HASH_AHEAD 8

static size_t hash_slot(int64_t key, int bits) {
    return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> (64 - bits));
}

/* per key asked, the place of its values, or -1 where the table does not hold it */
static PyObject *hash_find(PyObject *self, PyObject *args) {
    (void)self;
    HashBuffers B;
    if (!PyArg_ParseTuple(args, "y*y*w*", &B.table, &B.asked, &B.out)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t slots;
    int bits;
    if (!hash_table(&B.table, &slots, &bits, "hash_find") || !sized(&B.asked, B.asked.len / 8, "hash_find: keys") ||
        !sized(&B.out, B.asked.len / 8, "hash_find: out"))
        goto done;
    const int64_t *table = B.table.buf, *asked = B.asked.buf;
    int64_t *out = B.out.buf;
    const size_t mask = (size_t)slots - 1;
    const Py_ssize_t count = B.asked.len / 8;
    for (Py_ssize_t i = 0; i < count; i++) {
#if defined(__GNUC__) || defined(__clang__)
        /* a table of millions of slots is read at random: the slot a few keys on is asked for ahead of its turn */
        if (i + HASH_AHEAD < count) __builtin_prefetch(table + 2 * hash_slot(asked[i + HASH_AHEAD], bits));
#endif
        size_t s = hash_slot(asked[i], bits);
        out[i] = -1;
        for (Py_ssize_t probes = 0; probes < slots && table[2 * s + 1] >= 0; probes++, s = (s + 1) & mask)
            if (table[2 * s] == asked[i]) {
                out[i] = table[2 * s + 1];
                break;
            }
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&B.table);
    PyBuffer_Release(&B.asked);
    PyBuffer_Release(&B.out);
    return result;
}

/* the keys given into the table, the i-th with its values at first + i; a key the table holds already (or given
 * twice), or no empty slot left, is refused (ValueError) with the table as it was */
static PyObject *hash_insert(PyObject *self, PyObject *args) {
    (void)self;
    HashBuffers B;
    Py_ssize_t first;
    if (!PyArg_ParseTuple(args, "w*y*n", &B.table, &B.asked, &first)) return NULL;
    B.out.buf = NULL;
    PyObject *result = NULL;
    Py_ssize_t slots, done_keys = 0;
    int bits;
    size_t *placed = NULL;
    if (!hash_table(&B.table, &slots, &bits, "hash_insert") || !sized(&B.asked, B.asked.len / 8, "hash_insert: keys"))
        goto done;
    const Py_ssize_t count = B.asked.len / 8;
    if (first < 0 || first > PY_SSIZE_T_MAX - count) {
        PyErr_Format(PyExc_ValueError, "hash_insert: the first place is %zd, expected 0 or more", first);
        goto done;
    }
    placed = malloc(sizeof(size_t) * (size_t)(count > 0 ? count : 1));
    if (!placed) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *table = B.table.buf;
    const int64_t *asked = B.asked.buf;
    const size_t mask = (size_t)slots - 1;
    for (; done_keys < count; done_keys++) {
        size_t s = hash_slot(asked[done_keys], bits);
        Py_ssize_t probes = 0;
        for (; probes < slots && table[2 * s + 1] >= 0; probes++, s = (s + 1) & mask)
            if (table[2 * s] == asked[done_keys]) {
                PyErr_Format(PyExc_ValueError, "hash_insert: key %lld is held already (key %zd of %zd given)",
                             (long long)asked[done_keys], done_keys, count);
                goto undo;
            }
        if (probes == slots) {
            PyErr_Format(PyExc_ValueError, "hash_insert: no empty slot left of %zd for key %zd of %zd", slots,
                         done_keys, count);
            goto undo;
        }
        table[2 * s] = asked[done_keys];
        table[2 * s + 1] = first + done_keys;
        placed[done_keys] = s;
    }
    Py_INCREF(Py_None);
    result = Py_None;
    goto done;
undo: /* every slot filled here was empty before */
    while (done_keys > 0) {
        const size_t s = placed[--done_keys];
        table[2 * s] = 0;
        table[2 * s + 1] = -1;
    }
done:
    free(placed);
    PyBuffer_Release(&B.table);
    PyBuffer_Release(&B.asked);
    return result;
}

static PyMethodDef methods[] = {
    {"gap_counts", gap_counts, METH_VARARGS,
     "gap_counts(boxes, read, row, lo, length, stored, grid, last, pieces, read_weight, chunk_enc, decoded, "
     "compressed, local, gap, stream_bytes, requests, gap_bytes): ranged._gaps_numpy, added into requests and "
     "gap_bytes (C-contiguous int64 and float64 buffers)."},
    {"first_touches", first_touches, METH_VARARGS,
     "first_touches(layouts, windows, ndim, shape, chunks, outer, per_object, lo, hi, starts, stops, span, chunk_enc, "
     "index_bytes, fraction, compressed, split_size, waits, first, ranged_first, whole_extra, parts, splits): "
     "revisits._block_numpy, added into the last six (split_size -1: none)."},
    {"point_components", point_components, METH_VARARGS,
     "point_components(rows, m, count, lengths, points, extent, full_cells, any_cells, partial_all, whole_cells, "
     "across, compressed, merged, joined): merges._components_numpy, written into merged and joined."},
    {"point_breaks", point_breaks, METH_VARARGS,
     "point_breaks(layouts, ndim, count, chunks, per, shape, points, chunk_enc, gap, fraction, compressed, ranked, "
     "shards, ranged, breaks): merges._breaks, written into the last three."},
    {"count_cells", count_cells, METH_VARARGS,
     "count_cells(rows, m, count, lengths, points, extent, cells, fraction, least): point_bounds._cells_numpy, "
     "written into the last three."},
    {"listed_floor", listed_floor, METH_VARARGS,
     "listed_floor(n, m, ndim, patterns, reads, owner, which, table, floor, weights, windows, first_pointed, logmean, "
     "corner, read_pattern, read_first, held, objects, touched, merged, joined, scalars, rows): "
     "listed.listed_numpy, written into rows."},
    {"list_shardings", list_shardings, METH_VARARGS,
     "list_shardings(m, ndim, fulls, most, owner, ks, which): candidates._shardings_numpy, written from the start of "
     "the last three; returns how many."},
    {"tie_least", tie_least, METH_VARARGS,
     "tie_least(n, corners, r, a, either, one, pool, rows, near, own, low, high, corners, least): "
     "search._tie_least_numpy, written into least (+inf where not near)."},
    {"hash_find", hash_find, METH_VARARGS,
     "hash_find(table, asked, out): memo.KeyedValues' lookup, the place of each asked key's values (-1: not held) "
     "written into out (table: pairs of int64, a key and its place)."},
    {"hash_insert", hash_insert, METH_VARARGS,
     "hash_insert(table, given, first): memo.KeyedValues' addition, the i-th given key with its values at first + i "
     "(ValueError, the table unchanged, for a key held already or no slot left)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels", "The layout search's costliest bounds, compiled (see advise/kernels.py).", -1,
    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
