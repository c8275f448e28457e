// Attention of new tokens over a paged KV cache, float32.
//
// q (B, H, T, D): T query tokens per sequence; k_pool (blocks, KV, D, block_size): a block's
// keys transposed, so that one query's scores against a block are block_size-wide vector
// FMAs; v_pool (blocks, KV, block_size, D);
// tables (B, width) block ids; positions (B, T): each query's position, so it reads the keys
// at positions 0..positions[b, t] where they lie (no gather); out (B, H, T, D). Query head h
// reads KV head h / (H / KV), as grouped-query attention does. Per (sequence, KV head) and
// chunk of queries: the scores of its query heads over every key they see, their softmax
// (max subtracted), then the weighted sum of the values. A key is read once per chunk, for
// all the chunk's queries (T = 1 is a decode step; T > 1 a prefill after cached context).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define QUERY_CHUNK 32
#define MAX_BLOCK 64

// Queries t0..t0+count-1 of one (sequence, KV head): group heads each.
static void one_chunk(const float *q, const float *k_pool, const float *v_pool,
                      const int64_t *table, const int64_t *positions, int t0, int count,
                      int tokens, int group, int kv_heads, int kv_head, int dim, int block_size,
                      float scale, float *scores, float *out) {
    const int64_t head_stride = (int64_t)block_size * dim;  // a block's keys of one head
    const int64_t block_stride = head_stride * kv_heads;
    int64_t length = 0;  // keys the chunk reads: up to its furthest query
    for (int t = t0; t < t0 + count; t++)
        length = positions[t] + 1 > length ? positions[t] + 1 : length;
    const int rows = group * count;  // score row r = j * count + (t - t0): head j, query t
    for (int64_t start = 0, n = 0; start < length; start += block_size, n++) {
        int64_t keys_here = length - start < block_size ? length - start : block_size;
        const float *keys = k_pool + table[n] * block_stride + kv_head * head_stride;
        for (int j = 0, r = 0; j < group; j++) {
            for (int t = t0; t < t0 + count; t++, r++) {
                const float *query = q + ((int64_t)j * tokens + t) * dim;
                float block_scores[MAX_BLOCK] = {0.0f};  // the whole block (unwritten tail too)
                for (int d = 0; d < dim; d++) {
                    const float weight = query[d];
                    const float *column = keys + (int64_t)d * block_size;
                    for (int k = 0; k < block_size; k++) block_scores[k] += weight * column[k];
                }
                float *s = scores + (int64_t)r * length + start;
                for (int64_t k = 0; k < keys_here; k++) s[k] = block_scores[k] * scale;
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        int j = r / count, t = t0 + r % count;  // once per row: the division is cheap here
        int64_t seen = positions[t] + 1;
        float *s = scores + (int64_t)r * length;
        float top = s[0];
        for (int64_t k = 1; k < seen; k++) top = s[k] > top ? s[k] : top;
        float total = 0.0f;
#pragma omp simd reduction(+ : total)
        for (int64_t k = 0; k < seen; k++) {
            s[k] = expf(s[k] - top);
            total += s[k];
        }
        float inverse = 1.0f / total;
        for (int64_t k = 0; k < seen; k++) s[k] *= inverse;
        for (int64_t k = seen; k < length; k++) s[k] = 0.0f;  // later keys: not seen
        float *acc = out + ((int64_t)j * tokens + t) * dim;
        for (int d = 0; d < dim; d++) acc[d] = 0.0f;
    }
    for (int64_t start = 0, n = 0; start < length; start += block_size, n++) {
        int64_t keys_here = length - start < block_size ? length - start : block_size;
        const float *values = v_pool + table[n] * block_stride + kv_head * head_stride;
        for (int j = 0, r = 0; j < group; j++) {
            for (int t = t0; t < t0 + count; t++, r++) {
                const float *weights = scores + (int64_t)r * length + start;
                float *acc = out + ((int64_t)j * tokens + t) * dim;
                for (int64_t k = 0; k < keys_here; k++) {
                    const float *value = values + k * dim;
                    float weight = weights[k];
                    for (int d = 0; d < dim; d++) acc[d] += weight * value[d];
                }
            }
        }
    }
}

// Returns 0, -1 when scratch memory could not be had, -2 for blocks over MAX_BLOCK.
int paged_attention_f32(const float *q, const float *k_pool, const float *v_pool,
                        const int64_t *tables, const int64_t *positions, float *out, int batch,
                        int tokens, int heads, int kv_heads, int dim, int block_size, int width,
                        float scale, int threads) {
    if (block_size > MAX_BLOCK) return -2;
    const int group = heads / kv_heads;
    const int chunks = (tokens + QUERY_CHUNK - 1) / QUERY_CHUNK;
    int failed = 0;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) collapse(3)
    for (int b = 0; b < batch; b++) {
        for (int h = 0; h < kv_heads; h++) {
            for (int c = 0; c < chunks; c++) {
                const int64_t *row_positions = positions + (int64_t)b * tokens;
                int t0 = c * QUERY_CHUNK;
                int count = tokens - t0 < QUERY_CHUNK ? tokens - t0 : QUERY_CHUNK;
                int64_t length = 0;
                for (int t = t0; t < t0 + count; t++)
                    length = row_positions[t] + 1 > length ? row_positions[t] + 1 : length;
                float *scores = malloc(sizeof(float) * group * count * length);
                if (scores == NULL) {
                    failed = 1;
                    continue;
                }
                int64_t offset = ((int64_t)b * heads + (int64_t)h * group) * tokens * dim;
                one_chunk(q + offset, k_pool, v_pool, tables + (int64_t)b * width, row_positions,
                          t0, count, tokens, group, kv_heads, h, dim, block_size, scale, scores,
                          out + offset);
                free(scores);
            }
        }
    }
    return failed ? -1 : 0;
}
