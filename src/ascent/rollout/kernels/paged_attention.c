// Attention of new tokens over a paged KV cache, float32.
//
// q (B, H, T, Dk): T query tokens per sequence; k_pool (blocks, KV, Dk, block_size): a block's
// keys transposed, so that one query's scores against a block are block_size-wide vector
// FMAs; v_pool (blocks, KV, block_size, Dv) (Dv may differ from Dk: latent attention);
// tables (B, width) block ids; positions (B, T): each query's position, so it reads the keys
// at positions 0..positions[b, t] where they lie (no gather), or with a sliding window W > 0
// only positions[b, t] - W < k <= positions[b, t]; out (B, H, T, Dv). Query head h
// reads KV head h / (H / KV), as grouped-query attention does. Per sequence and chunk of
// queries: the scores of its query heads over every key they see, their softmax (max
// subtracted), then the weighted sum of the values. A key is read once per chunk, for all the
// chunk's queries (T = 1 is a decode step; T > 1 a prefill after cached context).
//
// Memory, not arithmetic, bounds a long decode step: a layer's keys and values are read from
// DRAM once per step, 4 KB per block and head, in blocks scattered over the pool. Measured on
// a 2-core AMD EPYC (bench/attention_kernel.py's notes), scattered 4 KB reads stream at about
// 13 GB/s and longer runs at about 30; so a chunk reads every KV head of a block before the
// next block (a block's heads lie side by side, one run of KV x 4 KB), and asks for the next
// block's keys and this block's values (read in the second pass) while it computes scores.
//
// Both products are register-tiled: ROW_TILE score rows (query head x query token) share
// each load of a key column or a value row, and their partial sums (LANE keys, or LANE
// dimensions) stay in registers across the reduction. block_size and D are multiples of
// LANE (the Python side checks; it gathers otherwise). Scores are scale * q . k (the caller's
// scale: 1/sqrt(Dk), or a family's own).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define QUERY_CHUNK 32
#define MAX_BLOCK 64
#define LANE 16
#define ROW_TILE 4

// Eight floats in a register (GCC/Clang vector extension: AVX on x86, two NEON registers on
// ARM); a tile's 4 rows x 16 lanes of partial sums are eight of them, named one by one so
// that the compiler keeps them in registers across the whole reduction.
typedef float vec8 __attribute__((vector_size(32)));

static inline vec8 load8(const float *p) {
    vec8 v;
    memcpy(&v, p, sizeof v);  // unaligned load
    return v;
}

static inline void store16(float *p, vec8 low, vec8 high) {
    memcpy(p, &low, sizeof low);
    memcpy(p + 8, &high, sizeof high);
}

// scores[i][0..keys_here) = scale * queries[i] . keys[:, k] for i < n (a constant once
// inlined, so that the n x 2 partial sums are registers) over one block of keys (D, bs).
static inline __attribute__((always_inline)) void scores_tile(
    const float *const *queries, const int n, const float *keys, int dim, int block_size,
    int64_t keys_here, float scale, float *const *scores) {
    for (int k0 = 0; k0 < keys_here; k0 += LANE) {
        vec8 low[ROW_TILE], high[ROW_TILE];
        for (int i = 0; i < n; i++) low[i] = high[i] = (vec8){0};
        for (int d = 0; d < dim; d++) {
            const float *column = keys + (int64_t)d * block_size + k0;
            vec8 column_low = load8(column), column_high = load8(column + 8);
            for (int i = 0; i < n; i++) {
                const float weight = queries[i][d];
                low[i] += weight * column_low, high[i] += weight * column_high;
            }
        }
        int64_t width = keys_here - k0 < LANE ? keys_here - k0 : LANE;
        for (int i = 0; i < n; i++) {
            float tile[LANE];
            store16(tile, low[i] * scale, high[i] * scale);
            memcpy(scores[i] + k0, tile, sizeof(float) * width);
        }
    }
}

// outs[i][0..D) += sum_k weights[i][k] * values[k, :] for i < n (a constant once inlined)
// over one block's keys_here value rows (bs, D).
static inline __attribute__((always_inline)) void values_tile(
    const float *const *weights, const int n, const float *values, int dim, int64_t keys_here,
    float *const *outs) {
    for (int d0 = 0; d0 < dim; d0 += LANE) {
        vec8 low[ROW_TILE], high[ROW_TILE];
        for (int i = 0; i < n; i++) low[i] = high[i] = (vec8){0};
        for (int64_t k = 0; k < keys_here; k++) {
            const float *value = values + k * dim + d0;
            vec8 value_low = load8(value), value_high = load8(value + 8);
            for (int i = 0; i < n; i++) {
                const float weight = weights[i][k];
                low[i] += weight * value_low, high[i] += weight * value_high;
            }
        }
        for (int i = 0; i < n; i++) {
            float *out = outs[i] + d0;
            store16(out, load8(out) + low[i], load8(out + 8) + high[i]);
        }
    }
}

// The tiles for 1..ROW_TILE rows, each compiled with its row count fixed: a head group of 3
// (SmolLM2's) computes 3 rows, not 4.
static void block_scores(const float *const *queries, int n, const float *keys, int dim,
                         int block_size, int64_t keys_here, float scale, float *const *scores) {
    switch (n) {
        case 1: scores_tile(queries, 1, keys, dim, block_size, keys_here, scale, scores); break;
        case 2: scores_tile(queries, 2, keys, dim, block_size, keys_here, scale, scores); break;
        case 3: scores_tile(queries, 3, keys, dim, block_size, keys_here, scale, scores); break;
        default: scores_tile(queries, 4, keys, dim, block_size, keys_here, scale, scores);
    }
}

static void block_values(const float *const *weights, int n, const float *values, int dim,
                         int64_t keys_here, float *const *outs) {
    switch (n) {
        case 1: values_tile(weights, 1, values, dim, keys_here, outs); break;
        case 2: values_tile(weights, 2, values, dim, keys_here, outs); break;
        case 3: values_tile(weights, 3, values, dim, keys_here, outs); break;
        default: values_tile(weights, 4, values, dim, keys_here, outs);
    }
}

// The first key query t may see: its window's start (window 0: none, every earlier key).
static inline int64_t first_key(int64_t position, int64_t window) {
    int64_t first = window > 0 ? position - window + 1 : 0;
    return first > 0 ? first : 0;
}

// Asks for ``floats`` floats from ``p`` on, a cache line at a time, without waiting for them.
static inline void prefetch(const float *p, int64_t floats) {
    for (int64_t at = 0; at < floats; at += 64 / sizeof(float)) __builtin_prefetch(p + at);
}

// Queries t0..t0+count-1 of one sequence, KV heads kv_head0..kv_head0+head_count-1 (group
// query heads each). The chunk reads the blocks from the one holding its earliest visible
// key (``base``) to its furthest query, every KV head of a block before the next block (a
// block's heads lie side by side: one stream); score row r = j * count + (t - t0) for the
// chunk's j-th query head holds keys base..length-1.
static void one_chunk(const float *q, const float *k_pool, const float *v_pool,
                      const int64_t *table, const int64_t *positions, int t0, int count,
                      int tokens, int group, int kv_heads, int kv_head0, int head_count,
                      int key_dim, int value_dim, int block_size, float scale, int64_t window,
                      float *scores, float *out) {
    const int64_t key_head_stride = (int64_t)block_size * key_dim;  // a block's keys, one head
    const int64_t value_head_stride = (int64_t)block_size * value_dim;
    int64_t length = 0, base = INT64_MAX;  // keys the chunk reads: [base, length)
    for (int t = t0; t < t0 + count; t++) {
        length = positions[t] + 1 > length ? positions[t] + 1 : length;
        int64_t first = first_key(positions[t], window);
        base = first < base ? first : base;
    }
    const int64_t first_block = base / block_size;
    base = first_block * block_size;
    const int64_t span = length - base;
    const int head_rows = group * count;  // score rows per KV head
    const int rows = head_rows * head_count;
    for (int r = 0; r < rows; r++) {
        int j = r / count, t = t0 + r % count;
        float *acc = out + ((int64_t)j * tokens + t) * value_dim;
        for (int d = 0; d < value_dim; d++) acc[d] = 0.0f;
    }
    for (int64_t start = base, n = first_block; start < length; start += block_size, n++) {
        int64_t keys_here = length - start < block_size ? length - start : block_size;
        for (int hk = 0; hk < head_count; hk++) {
            const int64_t head = table[n] * kv_heads + kv_head0 + hk;
            const float *keys = k_pool + head * key_head_stride;
            if (start + block_size < length)
                prefetch(k_pool + (table[n + 1] * kv_heads + kv_head0 + hk) * key_head_stride,
                         key_head_stride);
            prefetch(v_pool + head * value_head_stride, value_head_stride);
            const int last_row = (hk + 1) * head_rows;
            for (int r0 = hk * head_rows; r0 < last_row; r0 += ROW_TILE) {
                int tile = last_row - r0 < ROW_TILE ? last_row - r0 : ROW_TILE;
                const float *queries[ROW_TILE];
                float *row_scores[ROW_TILE];
                for (int i = 0; i < ROW_TILE; i++) {
                    int r = r0 + (i < tile ? i : tile - 1);  // a short tile repeats its last row
                    int j = r / count, t = t0 + r % count;
                    queries[i] = q + ((int64_t)j * tokens + t) * key_dim;
                    row_scores[i] = scores + (int64_t)r * span + (start - base);
                }
                block_scores(queries, tile, keys, key_dim, block_size, keys_here, scale,
                             row_scores);
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        int t = t0 + r % count;
        int64_t seen = positions[t] + 1 - base, first = first_key(positions[t], window) - base;
        float *s = scores + (int64_t)r * span;
        float top = s[first];
        for (int64_t k = first + 1; k < seen; k++) top = s[k] > top ? s[k] : top;
        float total = 0.0f;
#pragma omp simd reduction(+ : total)
        for (int64_t k = first; k < seen; k++) {
            s[k] = expf(s[k] - top);
            total += s[k];
        }
        float inverse = 1.0f / total;
        for (int64_t k = 0; k < first; k++) s[k] = 0.0f;  // before its window: not seen
        for (int64_t k = first; k < seen; k++) s[k] *= inverse;
        for (int64_t k = seen; k < span; k++) s[k] = 0.0f;  // later keys: not seen
    }
    for (int64_t start = base, n = first_block; start < length; start += block_size, n++) {
        int64_t keys_here = length - start < block_size ? length - start : block_size;
        for (int hk = 0; hk < head_count; hk++) {
            const int64_t head = table[n] * kv_heads + kv_head0 + hk;
            const float *values = v_pool + head * value_head_stride;
            const int last_row = (hk + 1) * head_rows;
            for (int r0 = hk * head_rows; r0 < last_row; r0 += ROW_TILE) {
                int tile = last_row - r0 < ROW_TILE ? last_row - r0 : ROW_TILE;
                const float *weights[ROW_TILE];
                float *outs[ROW_TILE];
                for (int i = 0; i < ROW_TILE; i++) {
                    int r = r0 + (i < tile ? i : tile - 1);
                    int j = r / count, t = t0 + r % count;
                    weights[i] = scores + (int64_t)r * span + (start - base);
                    outs[i] = out + ((int64_t)j * tokens + t) * value_dim;
                }
                block_values(weights, tile, values, value_dim, keys_here, outs);
            }
        }
    }
}

// Returns 0, -1 when scratch memory could not be had, -2 for a block size or head dimension
// the tiling does not take (not a multiple of LANE, or blocks over MAX_BLOCK).
int paged_attention_f32(const float *q, const float *k_pool, const float *v_pool,
                        const int64_t *tables, const int64_t *positions, float *out, int batch,
                        int tokens, int heads, int kv_heads, int key_dim, int value_dim,
                        int block_size, int width, float scale, int64_t window, int threads) {
    if (block_size > MAX_BLOCK || block_size % LANE || key_dim % LANE || value_dim % LANE)
        return -2;
    const int group = heads / kv_heads;
    const int chunks = (tokens + QUERY_CHUNK - 1) / QUERY_CHUNK;
    int failed = 0;
    // A work item is (sequence, query chunk) with every KV head, unless that leaves threads
    // idle (one sequence on several threads): then (sequence, KV head, query chunk).
    const int split = (int64_t)batch * chunks < 2 * threads ? kv_heads : 1;
    const int head_count = kv_heads / split;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) collapse(3)
    for (int b = 0; b < batch; b++) {
        for (int part = 0; part < split; part++) {
            for (int c = 0; c < chunks; c++) {
                const int64_t *row_positions = positions + (int64_t)b * tokens;
                int t0 = c * QUERY_CHUNK;
                int count = tokens - t0 < QUERY_CHUNK ? tokens - t0 : QUERY_CHUNK;
                int64_t length = 0, base = INT64_MAX;
                for (int t = t0; t < t0 + count; t++) {
                    length = row_positions[t] + 1 > length ? row_positions[t] + 1 : length;
                    int64_t first = first_key(row_positions[t], window);
                    base = first < base ? first : base;
                }
                int64_t span = length - base / block_size * block_size;
                float *scores = malloc(sizeof(float) * group * head_count * count * span);
                if (scores == NULL) {
                    failed = 1;
                    continue;
                }
                int kv_head0 = part * head_count;
                int64_t head = (int64_t)b * heads + (int64_t)kv_head0 * group;
                one_chunk(q + head * tokens * key_dim, k_pool, v_pool,
                          tables + (int64_t)b * width, row_positions, t0, count, tokens, group,
                          kv_heads, kv_head0, head_count, key_dim, value_dim, block_size, scale,
                          window, scores, out + head * tokens * value_dim);
                free(scores);
            }
        }
    }
    return failed ? -1 : 0;
}
