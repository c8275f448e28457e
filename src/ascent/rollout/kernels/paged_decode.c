// Decode attention over a paged KV cache, float32, one query token per sequence.
//
// q (B, H, D); k_pool, v_pool (blocks, KV, block_size, D); tables (B, width) block ids;
// positions (B,): the query's position, so keys 0..positions[b] are read where they lie (no
// gather); out (B, H, D). Query head h reads KV head h / (H / KV), as grouped-query
// attention does. Per (sequence, KV head): the scores of its query heads over every key,
// their softmax (max subtracted), then the weighted sum of the values.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static void one_head_group(const float *q, const float *k_pool, const float *v_pool,
                           const int64_t *table, int64_t length, int group, int kv_heads,
                           int kv_head, int dim, int block_size, float scale, float *scores,
                           float *out) {
    // A block's keys for one KV head are contiguous: block_size rows of dim floats.
    const int64_t head_stride = (int64_t)block_size * dim;
    const int64_t block_stride = head_stride * kv_heads;
    for (int64_t start = 0, n = 0; start < length; start += block_size, n++) {
        int64_t count = length - start < block_size ? length - start : block_size;
        const float *keys = k_pool + table[n] * block_stride + kv_head * head_stride;
        for (int j = 0; j < group; j++) {
            const float *query = q + j * dim;
            float *s = scores + j * length + start;
            for (int64_t t = 0; t < count; t++) {
                const float *key = keys + t * dim;
                float score = 0.0f;
                for (int d = 0; d < dim; d++) score += query[d] * key[d];
                s[t] = score * scale;
            }
        }
    }
    for (int j = 0; j < group; j++) {
        float *s = scores + j * length;
        float top = s[0];
        for (int64_t t = 1; t < length; t++) top = s[t] > top ? s[t] : top;
        float total = 0.0f;
#pragma omp simd reduction(+ : total)
        for (int64_t t = 0; t < length; t++) {
            s[t] = expf(s[t] - top);
            total += s[t];
        }
        float inverse = 1.0f / total;
        for (int64_t t = 0; t < length; t++) s[t] *= inverse;
        float *acc = out + j * dim;
        for (int d = 0; d < dim; d++) acc[d] = 0.0f;
    }
    for (int64_t start = 0, n = 0; start < length; start += block_size, n++) {
        int64_t count = length - start < block_size ? length - start : block_size;
        const float *values = v_pool + table[n] * block_stride + kv_head * head_stride;
        for (int j = 0; j < group; j++) {
            const float *weights = scores + j * length + start;
            float *acc = out + j * dim;
            for (int64_t t = 0; t < count; t++) {
                const float *value = values + t * dim;
                float weight = weights[t];
                for (int d = 0; d < dim; d++) acc[d] += weight * value[d];
            }
        }
    }
}

// Returns 0, or -1 when scratch memory could not be had.
int paged_decode_f32(const float *q, const float *k_pool, const float *v_pool,
                     const int64_t *tables, const int64_t *positions, float *out, int batch,
                     int heads, int kv_heads, int dim, int block_size, int width, float scale,
                     int threads) {
    int group = heads / kv_heads;
    int failed = 0;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) collapse(2)
    for (int b = 0; b < batch; b++) {
        for (int h = 0; h < kv_heads; h++) {
            int64_t length = positions[b] + 1;
            float *scores = malloc(sizeof(float) * group * length);
            if (scores == NULL) {
                failed = 1;
                continue;
            }
            int64_t offset = ((int64_t)b * heads + (int64_t)h * group) * dim;
            one_head_group(q + offset, k_pool, v_pool, tables + (int64_t)b * width, length,
                           group, kv_heads, h, dim, block_size, scale, scores, out + offset);
            free(scores);
        }
    }
    return failed ? -1 : 0;
}
