/* Quantized models: int8 and 4-bit rows, the pruned wide table, and the
 * lazy token embeddings (see attnctl/quant.h). */
#include "attnctl/quant.h"
#include "attnctl/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static int8_t round_i8(float x)
{
    long r = lrintf(x);
    return (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
}

void ac_quant_rows_i8(int8_t *q, float *scale, const float *w, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++) {
        const float *row = w + r * cols;
        float max = 0.0f;
        for (size_t i = 0; i < cols; i++)
            max = isfinite(row[i]) ? fmaxf(max, fabsf(row[i])) : NAN;
        float s = max / 127.0f;
        scale[r] = s;
        for (size_t i = 0; i < cols; i++)
            q[r * cols + i] = s > 0.0f ? round_i8(row[i] / s) : 0;
    }
}

void ac_dequant_rows_i8(float *w, const int8_t *q, const float *scale, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < cols; i++)
            w[r * cols + i] = (float)q[r * cols + i] * scale[r];
}

/* ------------------------------------------------- 4-bit values, scale codes */

#define SCALE_CODE_ZERO 192 /* the code of scale 1 */

float ac_scale_of_code(uint8_t e)
{
    /* 2^(j/8), j = 0..7: exact constants, so every machine decodes the same scale */
    static const float FRAC[8] = {1.0f,           1.0905077327f, 1.1892071150f, 1.2968395547f,
                                  1.4142135624f,  1.5422108254f, 1.6817928305f, 1.8340080864f};
    if (e == 0)
        return 0.0f;
    const int k = (int)e - SCALE_CODE_ZERO; /* -191 .. 63 */
    const int whole = k >= 0 ? k / 8 : -((-k + 7) / 8);
    return ldexpf(FRAC[k - 8 * whole], whole);
}

uint8_t ac_scale_code(float max_abs, int bits)
{
    if (!(max_abs > 0.0f))
        return 0;
    const float need = max_abs / (float)ac_qb_max(bits);
    /* a guess from the logarithm, then exact steps against the decoded scales */
    double g = ceil(8.0 * log2((double)need)) + SCALE_CODE_ZERO;
    int e = g < 1.0 ? 1 : g > 255.0 ? 255 : (int)g;
    while (e > 1 && ac_scale_of_code((uint8_t)(e - 1)) >= need)
        e--;
    while (e < 255 && ac_scale_of_code((uint8_t)e) < need)
        e++;
    return (uint8_t)e;
}

static int round_qb(float x, int bits)
{
    const long r = lrintf(x), max = ac_qb_max(bits);
    return (int)(r > max ? max : r < -max ? -max : r);
}

/* Stores v as value i of a packed b-bit array whose bytes start zeroed. */
static void qb_put(uint8_t *packed, size_t i, int v, int bits)
{
    const size_t at = i * (size_t)bits;
    const unsigned shift = (unsigned)(at & 7);
    const unsigned x = (unsigned)v & ((1u << bits) - 1u);
    packed[at >> 3] |= (uint8_t)(x << shift);
    if (shift + (unsigned)bits > 8)
        packed[(at >> 3) + 1] |= (uint8_t)(x >> (8 - shift));
}

void ac_quant_rows_qb(uint8_t *packed, uint8_t *code, const float *w, size_t rows, size_t cols,
                      int bits)
{
    const size_t rb = ac_qb_bytes(cols, bits);
    for (size_t r = 0; r < rows; r++) {
        const float *row = w + r * cols;
        uint8_t *out = packed + r * rb;
        float max = 0.0f;
        for (size_t i = 0; i < cols; i++)
            max = fmaxf(max, fabsf(row[i]));
        code[r] = ac_scale_code(max, bits);
        const float s = ac_scale_of_code(code[r]);
        memset(out, 0, rb);
        for (size_t i = 0; i < cols; i++)
            qb_put(out, i, s > 0.0f ? round_qb(row[i] / s, bits) : 0, bits);
    }
}

void ac_dequant_rows_qb(float *w, const uint8_t *packed, const uint8_t *code, size_t rows,
                        size_t cols, int bits)
{
    const size_t rb = ac_qb_bytes(cols, bits);
    for (size_t r = 0; r < rows; r++) {
        const float s = ac_scale_of_code(code[r]);
        for (size_t i = 0; i < cols; i++)
            w[r * cols + i] = (float)ac_qb_get(packed + r * rb, i, bits) * s;
    }
}

/* ------------------------------------------------------------ the wide table */

static double row_mean(const float *row, int C)
{
    double s = 0.0;
    for (int c = 0; c < C; c++)
        s += row[c];
    return s / C;
}

double ac_wide_row_weight(const float *row, int C)
{
    if (C == 2)
        return fabs((double)row[0] - (double)row[1]);
    double mean = row_mean(row, C), ss = 0.0;
    for (int c = 0; c < C; c++)
        ss += ((double)row[c] - mean) * ((double)row[c] - mean);
    return sqrt(ss);
}

typedef struct {
    double weight;
    int32_t id;
    int first; /* one of the rows kept before any other */
} weighted_row;

static int heavier_first(const void *a, const void *b)
{
    const weighted_row *x = a, *y = b;
    if (x->first != y->first)
        return y->first - x->first;
    if (x->weight != y->weight)
        return x->weight > y->weight ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int ascending_id(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int ac_wide_select_rows(int32_t *ids, const float *table, int n_rows, int C, int keep,
                        const uint8_t *first, const uint32_t *uses, ac_err *err)
{
    weighted_row *all = malloc(((size_t)n_rows + 1) * sizeof *all);
    if (!all)
        return ac_err_set(err, "out of memory ranking %d wide rows", n_rows);
    int n = 0;
    for (int r = 0; r < n_rows; r++) {
        double w = ac_wide_row_weight(table + (size_t)r * C, C);
        if (uses)
            w *= 1.0 + (double)uses[r];
        if (w > 0.0 || isnan(w)) /* NaN sorts first: a broken table stays visible */
            all[n++] = (weighted_row){isnan(w) ? INFINITY : w, r, first ? first[r] != 0 : 0};
    }
    qsort(all, (size_t)n, sizeof *all, heavier_first);
    if (n > keep)
        n = keep;
    for (int i = 0; i < n; i++)
        ids[i] = all[i].id;
    free(all);
    qsort(ids, (size_t)n, sizeof *ids, ascending_id);
    return n;
}

/* The values kept row `id` stores (width of them). */
static void stored_values(float *out, const float *row, int C)
{
    if (C == 2) {
        out[0] = row[0] - row[1];
        return;
    }
    double mean = row_mean(row, C);
    for (int c = 0; c < C; c++)
        out[c] = (float)((double)row[c] - mean);
}

void ac_wide_quantize(uint8_t *packed, uint8_t *codes, const float *table, const int32_t *ids,
                      int n, int C, int group, int bits)
{
    const int width = ac_wide_stored_width(C);
    float v[width];
    memset(packed, 0, ac_qb_bytes((size_t)n * (size_t)width, bits));
    for (int g0 = 0; g0 < n; g0 += group) {
        int g1 = g0 + group < n ? g0 + group : n;
        float max = 0.0f;
        for (int i = g0; i < g1; i++) {
            stored_values(v, table + (size_t)ids[i] * C, C);
            for (int k = 0; k < width; k++)
                max = fmaxf(max, fabsf(v[k]));
        }
        const uint8_t e = ac_scale_code(max, bits);
        const float s = ac_scale_of_code(e);
        codes[g0 / group] = e;
        for (int i = g0; i < g1; i++) {
            stored_values(v, table + (size_t)ids[i] * C, C);
            for (int k = 0; k < width; k++)
                qb_put(packed, (size_t)i * width + k, s > 0.0f ? round_qb(v[k] / s, bits) : 0,
                       bits);
        }
    }
}

void ac_wide_presence(uint8_t *present, int32_t *rank, int n_buckets, const int32_t *ids, int n)
{
    const int n_blocks = (n_buckets + AC_WIDE_RANK_BLOCK - 1) / AC_WIDE_RANK_BLOCK;
    memset(present, 0, ((size_t)n_buckets + 7) / 8);
    for (int i = 0; i < n; i++)
        present[ids[i] >> 3] |= (uint8_t)(1u << (ids[i] & 7));
    for (int k = 0, i = 0; k <= n_blocks; k++) {
        while (i < n && ids[i] < k * AC_WIDE_RANK_BLOCK)
            i++;
        rank[k] = i;
    }
}

/* Set bits among the first `bits` bits of p. */
static int count_bits(const uint8_t *p, int bits)
{
    int n = 0, i = 0;
    for (; i + 64 <= bits; i += 64) {
        uint64_t w;
        memcpy(&w, p + i / 8, sizeof w);
        n += __builtin_popcountll(w);
    }
    for (; i + 8 <= bits; i += 8)
        n += __builtin_popcount(p[i / 8]);
    if (i < bits)
        n += __builtin_popcount(p[i / 8] & ((1u << (bits - i)) - 1u));
    return n;
}

int ac_wide_sparse_find(const ac_wide_sparse *w, int32_t id)
{
    if (id < 0 || id >= w->n_buckets || !((w->present[id >> 3] >> (id & 7)) & 1))
        return -1;
    const int block = id / AC_WIDE_RANK_BLOCK;
    return w->rank[block] +
           count_bits(w->present + (size_t)block * (AC_WIDE_RANK_BLOCK / 8),
                      id - block * AC_WIDE_RANK_BLOCK);
}

void ac_wide_sparse_forward(float *logits, const ac_wide_sparse *w, const int32_t *buckets,
                            const int32_t *counts, int B, int T, int order, float norm)
{
    const size_t stride = (size_t)T * (size_t)order;
    const int C = w->n_classes, width = w->width;
    for (int b = 0; b < B; b++) {
        const int32_t *bk = buckets + (size_t)b * stride;
        double sum[width];
        for (int k = 0; k < width; k++)
            sum[k] = 0.0;
        for (int i = 0; i < counts[b]; i++) {
            const int r = ac_wide_sparse_find(w, bk[i]);
            if (r < 0)
                continue;
            const double s = (double)ac_scale_of_code(w->codes[r / w->group]);
            for (int k = 0; k < width; k++)
                sum[k] += s * (double)ac_qb_get(w->values, (size_t)r * width + k, w->bits);
        }
        const double scale = wide_scale(counts[b], norm);
        float *out = logits + (size_t)b * C;
        if (C == 2) {
            out[0] += (float)(0.5 * scale * sum[0]);
            out[1] -= (float)(0.5 * scale * sum[0]);
        } else {
            for (int c = 0; c < C; c++)
                out[c] += (float)(scale * sum[c]);
        }
    }
}

void ac_wide_sparse_to_dense(float *table, const ac_wide_sparse *w)
{
    const int C = w->n_classes;
    for (int id = 0, i = 0; id < w->n_buckets && i < w->n; id++) {
        if (!((w->present[id >> 3] >> (id & 7)) & 1))
            continue;
        const float s = ac_scale_of_code(w->codes[i / w->group]);
        float *row = table + (size_t)id * C;
        if (C == 2) {
            float x = (float)ac_qb_get(w->values, (size_t)i, w->bits) * s;
            row[0] = 0.5f * x;
            row[1] = -0.5f * x;
        } else {
            for (int c = 0; c < C; c++)
                row[c] = (float)ac_qb_get(w->values, (size_t)i * C + c, w->bits) * s;
        }
        i++;
    }
}

void ac_quant_free(ac_quant *q)
{
    if (!q)
        return;
    for (int l = 0; l < q->n_layers; l++)
        for (int k = 0; k < AC_QL_PER_LAYER; k++)
            ac_qlinear_free(&q->linear[l][k]);
    free(q->linear);
    free(q->embed_done);
    if (q->mapping)
        munmap(q->mapping, q->mapping_len);
    free(q->owned);
    free(q);
}

/* ------------------------------------------------------------ in the model */

void ac_model_quant_embed_rows(ac_model *m, const int32_t *ids, size_t n)
{
    ac_quant *q = m->quant;
    if (!q || !q->embed_q)
        return;
    const size_t d = (size_t)q->embed_cols;
    for (size_t i = 0; i < n; i++) {
        const size_t r = (size_t)ids[i];
        /* each row once: a batch repeats many ids. Views of the model
         * (ac_model_view) share embed.weight and run at once: a row is
         * written under the lock and flagged done after it is written, so a
         * thread that sees the flag reads the whole row. */
        if (__atomic_load_n(&q->embed_done[r], __ATOMIC_ACQUIRE))
            continue;
#pragma omp critical(ac_quant_embed_rows)
        if (!__atomic_load_n(&q->embed_done[r], __ATOMIC_ACQUIRE)) {
            ac_dequant_rows_qb(m->p.embed_w + r * d,
                               q->embed_q + r * ac_qb_bytes(d, AC_EMBED_BITS), q->embed_code + r,
                               1, d, AC_EMBED_BITS);
            __atomic_store_n(&q->embed_done[r], 1, __ATOMIC_RELEASE);
        }
    }
}

void ac_model_quant_materialize(ac_model *m)
{
    ac_quant *q = m->quant;
    if (!q)
        return;
    if (q->embed_q) {
        ac_dequant_rows_qb(m->p.embed_w, q->embed_q, q->embed_code, (size_t)q->embed_rows,
                           (size_t)q->embed_cols, AC_EMBED_BITS);
        q->embed_q = NULL;
        q->embed_code = NULL;
        free(q->embed_done);
        q->embed_done = NULL;
    }
    if (q->wide.present && m->p.wide_w)
        ac_wide_sparse_to_dense(m->p.wide_w, &q->wide);
}
