/* Quantized models: int8 rows, the pruned sparse wide table, and the lazy
 * token embeddings (see attnctl/quant.h). */
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

void ac_wide_quantize(int8_t *q, float *scales, const float *table, const int32_t *ids, int n,
                      int C, int group)
{
    const int width = ac_wide_stored_width(C);
    float v[width];
    for (int g0 = 0; g0 < n; g0 += group) {
        int g1 = g0 + group < n ? g0 + group : n;
        float max = 0.0f;
        for (int i = g0; i < g1; i++) {
            stored_values(v, table + (size_t)ids[i] * C, C);
            for (int k = 0; k < width; k++)
                max = isfinite(v[k]) ? fmaxf(max, fabsf(v[k])) : NAN;
        }
        float s = max / 127.0f;
        scales[g0 / group] = s;
        for (int i = g0; i < g1; i++) {
            stored_values(v, table + (size_t)ids[i] * C, C);
            for (int k = 0; k < width; k++)
                q[(size_t)i * width + k] = s > 0.0f ? round_i8(v[k] / s) : 0;
        }
    }
}

int ac_wide_sparse_find(const ac_wide_sparse *w, int32_t id, int from)
{
    int lo = from, hi = w->n; /* the answer is in [lo, hi) */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (w->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < w->n && w->ids[lo] == id ? lo : -1;
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
        int from = 0;
        for (int i = 0; i < counts[b] && from < w->n; i++) {
            /* buckets ascend: each search starts where the last one ended */
            int lo = from, hi = w->n;
            while (lo < hi) {
                int mid = lo + (hi - lo) / 2;
                if (w->ids[mid] < bk[i])
                    lo = mid + 1;
                else
                    hi = mid;
            }
            from = lo;
            if (lo == w->n || w->ids[lo] != bk[i])
                continue;
            const double s = (double)w->scales[lo / w->group];
            for (int k = 0; k < width; k++)
                sum[k] += s * (double)w->q[(size_t)lo * width + k];
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
    for (int i = 0; i < w->n; i++) {
        const float s = w->scales[i / w->group];
        float *row = table + (size_t)w->ids[i] * C;
        if (C == 2) {
            float x = (float)w->q[i] * s;
            row[0] = 0.5f * x;
            row[1] = -0.5f * x;
        } else {
            for (int c = 0; c < C; c++)
                row[c] = (float)w->q[(size_t)i * C + c] * s;
        }
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
    if (q->mapping)
        munmap(q->mapping, q->mapping_len);
    free(q->owned);
    free(q->decoded_ids);
    free(q);
}

/* ------------------------------------------------------------ in the model */

void ac_model_quant_embed_rows(ac_model *m, const int32_t *ids, size_t n)
{
    const ac_quant *q = m->quant;
    if (!q || !q->embed_q)
        return;
    const size_t d = (size_t)q->embed_cols;
    for (size_t i = 0; i < n; i++) {
        const size_t r = (size_t)ids[i];
        ac_dequant_rows_i8(m->p.embed_w + r * d, q->embed_q + r * d, q->embed_scale + r, 1, d);
    }
}

void ac_model_quant_materialize(ac_model *m)
{
    ac_quant *q = m->quant;
    if (!q)
        return;
    if (q->embed_q) {
        ac_dequant_rows_i8(m->p.embed_w, q->embed_q, q->embed_scale, (size_t)q->embed_rows,
                           (size_t)q->embed_cols);
        q->embed_q = NULL;
        q->embed_scale = NULL;
    }
    if (q->wide.ids && m->p.wide_w)
        ac_wide_sparse_to_dense(m->p.wide_w, &q->wide);
}
