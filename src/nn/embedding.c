/* Token embedding plus positions (fixed sinusoidal or learned), and the
 * hashed n-gram embeddings added at the input. */
#include "attnctl/nn.h"

#include <math.h>

void positions_table_fill(float *pos_table, int max_len, int d)
{
    for (int p = 0; p < max_len; p++) {
        float *row = pos_table + (size_t)p * d;
        for (int col = 0; col < d; col += 2) {
            /* col = 2i, so the exponent 2i/d is col/d; computed in double so the
             * table is the same whatever the float rounding mode of callers. */
            double angle = (double)p / pow(10000.0, (double)col / (double)d);
            row[col] = (float)sin(angle);
            if (col + 1 < d)
                row[col + 1] = (float)cos(angle);
        }
    }
}

void embedding_forward(float *out, const int32_t *ids, const float *wte, const float *pos_table,
                       int B, int T, int d)
{
    int rows = B * T;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *tok = wte + (size_t)ids[r] * d;
        const float *pos = pos_table + (size_t)(r % T) * d;
        float *o = out + (size_t)r * d;
        for (int i = 0; i < d; i++)
            o[i] = tok[i] + pos[i];
    }
}

void embedding_backward(float *dwte, const float *dout, const int32_t *ids, const int32_t *lengths,
                        int B, int T, int d)
{
    if (!dwte)
        return;
    /* Serial on purpose: several positions may share a token id, and a fixed
     * (b, t) order keeps the sums bitwise reproducible. */
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < lengths[b]; t++) {
            size_t r = (size_t)b * T + t;
            float *g = dwte + (size_t)ids[r] * d;
            const float *go = dout + r * d;
            for (int i = 0; i < d; i++)
                g[i] += go[i];
        }
    }
}

void positions_backward(float *dpos, const float *dout, const int32_t *lengths, int B, int T, int d)
{
    if (!dpos)
        return;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        float *g = dpos + (size_t)t * d;
        for (int b = 0; b < B; b++) {
            if (t >= lengths[b])
                continue;
            const float *go = dout + ((size_t)b * T + t) * d;
            for (int i = 0; i < d; i++)
                g[i] += go[i];
        }
    }
}

#define NGRAM_MULTIPLIER 116049371ULL

void ngram_buckets_compute(int32_t *buckets, const int32_t *ids, const int32_t *lengths, int B,
                           int T, int order, int n_buckets)
{
    const int per_pos = order - 1;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
        const int32_t *row = ids + (size_t)b * T;
        for (int t = 0; t < T; t++) {
            int32_t *out = buckets + ((size_t)b * T + t) * per_pos;
            for (int n = 2; n <= order; n++) {
                if (t >= lengths[b]) {
                    out[n - 2] = 0;
                    continue;
                }
                uint64_t h = 0;
                for (int k = t - n + 1; k <= t; k++)
                    h = h * NGRAM_MULTIPLIER + (uint64_t)(k >= 0 ? row[k] : 0);
                out[n - 2] = (int32_t)(h % (uint64_t)n_buckets);
            }
        }
    }
}

void ngram_forward(float *out, const int32_t *buckets, const float *table, const int32_t *lengths,
                   int B, int T, int d, int per_pos)
{
    int rows = B * T;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        if (r % T >= lengths[r / T])
            continue;
        float *o = out + (size_t)r * d;
        for (int n = 0; n < per_pos; n++) {
            const float *e = table + (size_t)buckets[(size_t)r * per_pos + n] * d;
            for (int i = 0; i < d; i++)
                o[i] += e[i];
        }
    }
}

void ngram_backward(float *dtable, const float *dout, const int32_t *buckets,
                    const int32_t *lengths, int B, int T, int d, int per_pos)
{
    if (!dtable)
        return;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < lengths[b]; t++) {
            size_t r = (size_t)b * T + t;
            const float *go = dout + r * d;
            for (int n = 0; n < per_pos; n++) {
                float *g = dtable + (size_t)buckets[r * per_pos + n] * d;
                for (int i = 0; i < d; i++)
                    g[i] += go[i];
            }
        }
    }
}
