/* The exact sum of micro-batch gradients in fixed point. See
 * include/attnctl/gradsum.h. */
#include "attnctl/gradsum.h"

#include <stdlib.h>
#include <string.h>

int ac_fixed_from_float(float x, int limit_log2, ac_fixed *out)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    const int exponent = (int)((bits >> 23) & 0xff);
    const int negative = (int)(bits >> 31);
    if (exponent == 0xff || exponent - 127 >= limit_log2)
        return -1;
    *out = 0;
    if (exponent == 0)
        return 0; /* zero or subnormal: far below half an LSB */
    const uint64_t mantissa = (bits & 0x7fffffu) | 0x800000u;
    /* x = mantissa * 2^(exponent - 150), so x * 2^100 = mantissa * 2^(exponent - 50). */
    const int shift = exponent - 150 + AC_FIXED_FRAC_BITS;
    unsigned __int128 magnitude;
    if (shift >= 0)
        magnitude = (unsigned __int128)mantissa << shift;
    else if (shift >= -25)
        magnitude = (mantissa + ((uint64_t)1 << (-shift - 1))) >> -shift;
    else
        magnitude = 0;
    *out = negative ? -(ac_fixed)magnitude : (ac_fixed)magnitude;
    return 0;
}

float ac_fixed_to_float(ac_fixed v)
{
    return (float)v * 0x1p-100f;
}

/* ------------------------------------------------------------ row tables */

static int rows_init(ac_gradsum_rows *r, int n_table_rows, long cap, int d)
{
    memset(r, 0, sizeof *r);
    r->n_table_rows = n_table_rows;
    r->cap = (int)(cap < n_table_rows ? cap : n_table_rows);
    r->words = ((size_t)n_table_rows + 63) / 64;
    r->slot = malloc((size_t)n_table_rows * sizeof *r->slot);
    r->rows = malloc((size_t)(r->cap > 0 ? r->cap : 1) * sizeof *r->rows);
    r->acc = calloc((size_t)(r->cap > 0 ? r->cap : 1) * (size_t)d, sizeof *r->acc);
    r->touched = calloc(r->words ? r->words : 1, sizeof *r->touched);
    r->merged = malloc((size_t)(n_table_rows > 0 ? n_table_rows : 1) * sizeof *r->merged);
    if (!r->slot || !r->rows || !r->acc || !r->touched || !r->merged)
        return -1;
    for (int i = 0; i < n_table_rows; i++)
        r->slot[i] = -1;
    return 0;
}

static void rows_free(ac_gradsum_rows *r)
{
    free(r->slot);
    free(r->rows);
    free(r->acc);
    free(r->touched);
    free(r->merged);
    memset(r, 0, sizeof *r);
}

static void rows_clear(ac_gradsum_rows *r, int d)
{
    for (int i = 0; i < r->n_rows; i++)
        r->slot[r->rows[i]] = -1;
    memset(r->acc, 0, (size_t)r->n_rows * (size_t)d * sizeof *r->acc);
    r->n_rows = 0;
    memset(r->touched, 0, r->words * sizeof *r->touched);
    r->n_merged = 0;
}

/* The slot of a table row, taken when new (the capacity covers every row a
 * step can touch). */
static int32_t rows_slot(ac_gradsum_rows *r, int32_t row)
{
    if (r->slot[row] < 0) {
        r->slot[row] = r->n_rows;
        r->rows[r->n_rows++] = row;
        r->touched[row / 64] |= (uint64_t)1 << (row % 64);
    }
    return r->slot[row];
}

/* Adds n floats of g into acc and zeroes them: -1 at the first element out
 * of range (the others of the call may be added or not). */
static int add_floats(ac_fixed *acc, float *g, size_t n, int limit_log2)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        ac_fixed v = 0;
        bad |= ac_fixed_from_float(g[i], limit_log2, &v);
        acc[i] += v;
        g[i] = 0.0f;
    }
    return bad ? -1 : 0;
}

/* --------------------------------------------------------------- the sum */

static long table_rows_cap(const ac_model *m, long max_positions, int is_ngram)
{
    const ac_model_config *c = &m->cfg;
    long per_pos = is_ngram ? (long)(c->ngram_order - 1) : 1;
    long table = is_ngram ? (long)c->ngram_buckets : (long)c->vocab_size;
    long want = max_positions * per_pos;
    return want < table ? want : table;
}

/* Rows of the wide table a step can touch: its n-grams, at most order per position. */
static long wide_rows_cap(const ac_model *m, long max_positions)
{
    long want = max_positions * (long)m->cfg.wide_order;
    return want < (long)m->cfg.wide_buckets ? want : (long)m->cfg.wide_buckets;
}

size_t ac_gradsum_bytes(const ac_model *m, long max_positions)
{
    const size_t d = (size_t)m->cfg.d_model, f = sizeof(ac_fixed);
    size_t tok = (size_t)table_rows_cap(m, max_positions, 0);
    size_t ng = ac_model_has_ngrams(&m->cfg) ? (size_t)table_rows_cap(m, max_positions, 1) : 0;
    size_t wide = m->p.wide_w ? (size_t)wide_rows_cap(m, max_positions) : 0;
    size_t dense = m->dense_params;
    /* accumulators + the packed copy of everything */
    return 2 * (dense + (tok + ng) * d + wide * (size_t)m->cfg.n_classes) * f +
           (size_t)m->cfg.vocab_size * 12 +
           (size_t)(ac_model_has_ngrams(&m->cfg) ? m->cfg.ngram_buckets : 0) * 12 +
           (m->p.wide_w ? (size_t)m->cfg.wide_buckets * 12 : 0);
}

int ac_gradsum_init(ac_gradsum *s, const ac_model *m, long max_positions, int max_parts,
                    ac_err *err)
{
    memset(s, 0, sizeof *s);
    const ac_model_config *c = &m->cfg;
    s->d = c->d_model;
    s->wide_width = c->n_classes;
    int parts_log2 = 0;
    while (parts_log2 < 30 && (1L << parts_log2) < (long)max_parts)
        parts_log2++;
    /* n_parts elements below 2^limit (in units of 2^-100) sum below 2^126. */
    s->limit_log2 = 126 - AC_FIXED_FRAC_BITS - parts_log2;
    s->token_rows = c->objective == AC_OBJECTIVE_CLASSIFICATION;
    const size_t token_floats = (size_t)c->vocab_size * (size_t)c->d_model;
    s->dense_begin = s->token_rows ? token_floats : 0;
    /* The row-sparse tables (n-grams, wide path) are summed by rows: a step
     * touches a few thousand of their rows. */
    s->n_dense = m->dense_params - s->dense_begin;
    s->dense = calloc(s->n_dense ? s->n_dense : 1, sizeof *s->dense);
    int failed = !s->dense;
    if (!failed && s->token_rows) {
        s->token_stamp = calloc((size_t)c->vocab_size, sizeof *s->token_stamp);
        failed = !s->token_stamp;
    }
    if (!failed && s->token_rows)
        failed = rows_init(&s->tokens, c->vocab_size, table_rows_cap(m, max_positions, 0), s->d);
    if (!failed && ac_model_has_ngrams(c))
        failed = rows_init(&s->ngrams, c->ngram_buckets, table_rows_cap(m, max_positions, 1),
                           s->d);
    if (!failed && m->p.wide_w)
        failed = rows_init(&s->wide, c->wide_buckets, wide_rows_cap(m, max_positions),
                           c->n_classes);
    s->cap_packed = s->n_dense + ((size_t)s->tokens.cap + (size_t)s->ngrams.cap) * (size_t)s->d +
                    (size_t)s->wide.cap * (size_t)c->n_classes;
    if (!failed) {
        s->packed = malloc(s->cap_packed * sizeof *s->packed);
        failed = !s->packed;
    }
    if (failed) {
        ac_gradsum_free(s);
        return ac_err_set(err, "out of memory for the exact gradient sum (%.0f MiB)",
                          (double)ac_gradsum_bytes(m, max_positions) / 1048576.0);
    }
    return 0;
}

void ac_gradsum_free(ac_gradsum *s)
{
    free(s->dense);
    free(s->packed);
    free(s->token_stamp);
    rows_free(&s->tokens);
    rows_free(&s->ngrams);
    rows_free(&s->wide);
    memset(s, 0, sizeof *s);
}

void ac_gradsum_clear(ac_gradsum *s)
{
    memset(s->dense, 0, s->n_dense * sizeof *s->dense);
    if (s->token_rows)
        rows_clear(&s->tokens, s->d);
    if (s->ngrams.slot)
        rows_clear(&s->ngrams, s->d);
    if (s->wide.slot)
        rows_clear(&s->wide, s->wide_width);
    s->n_packed = 0;
    s->n_parts = 0;
}

/* Adds the listed table rows of g (a [rows, d] gradient) into r's slots and
 * zeroes them. Slots are taken serially, the additions run in parallel. */
static int add_rows(ac_gradsum_rows *r, float *g, const int32_t *rows, int n, int d, int limit)
{
    for (int i = 0; i < n; i++)
        rows_slot(r, rows[i]);
    int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
    for (int i = 0; i < n; i++)
        bad |= add_floats(r->acc + (size_t)r->slot[rows[i]] * d, g + (size_t)rows[i] * d,
                          (size_t)d, limit);
    return bad;
}

/* A row-sparse table's listed rows into r, then what ac_model_zero_grad
 * does for them (add_rows zeroed their gradients). */
static int add_sparse_rows(ac_gradsum_rows *r, ac_model *m, int kind, int limit)
{
    ac_sparse_rows *t = &m->sparse[kind];
    if (!r->slot || t->n_rows == 0)
        return 0;
    if (add_rows(r, m->grads + t->offset, t->rows, t->n_rows, t->width, limit))
        return -1;
    for (int i = 0; i < t->n_rows; i++)
        t->mark[t->rows[i]] = 0;
    t->n_rows = 0;
    return 0;
}

static int out_of_range(ac_err *err, const char *tensor, int limit_log2)
{
    return ac_err_set(err, "%s: a gradient element is not finite or beyond +-2^%d, the range of "
                           "the exact sum", tensor, limit_log2);
}

/* Pieces of the dense part converted by one task. */
#define DENSE_PIECE 8192

int ac_gradsum_add(ac_gradsum *s, ac_model *m, ac_err *err)
{
    const int d = s->d;
    int bad = 0;
    const long pieces = (long)((s->n_dense + DENSE_PIECE - 1) / DENSE_PIECE);
#pragma omp parallel for schedule(static) reduction(| : bad)
    for (long p = 0; p < pieces; p++) {
        size_t begin = (size_t)p * DENSE_PIECE;
        size_t n = s->n_dense - begin < DENSE_PIECE ? s->n_dense - begin : DENSE_PIECE;
        bad |= add_floats(s->dense + begin, m->grads + s->dense_begin + begin, n, s->limit_log2);
    }
    if (bad)
        return out_of_range(err, "a weight outside the embedding tables", s->limit_log2);
    if (s->token_rows && m->last_ids) {
        /* The rows the embedding backward wrote: the ids at valid positions,
         * each listed once (a stamp per call). */
        ac_gradsum_rows *r = &s->tokens;
        const int B = m->last_B, T = m->last_T;
        int32_t *list = r->merged; /* scratch until ac_gradsum_pack */
        int n = 0;
        if (++s->stamp_now == 0) { /* wrapped: forget every old stamp */
            memset(s->token_stamp, 0, (size_t)r->n_table_rows * sizeof *s->token_stamp);
            s->stamp_now = 1;
        }
        for (int b = 0; b < B; b++)
            for (int t = 0; t < m->last_lengths[b]; t++) {
                int32_t id = m->last_ids[(size_t)b * T + t];
                if (s->token_stamp[id] != s->stamp_now) {
                    s->token_stamp[id] = s->stamp_now;
                    list[n++] = id;
                }
            }
        if (add_rows(r, m->g.embed_w, list, n, d, s->limit_log2))
            return out_of_range(err, "embed.weight", s->limit_log2);
    }
    if (add_sparse_rows(&s->wide, m, AC_SPARSE_WIDE, s->limit_log2))
        return out_of_range(err, "head.wide.weight", s->limit_log2);
    if (add_sparse_rows(&s->ngrams, m, AC_SPARSE_NGRAM, s->limit_log2))
        return out_of_range(err, "embed.ngram.weight", s->limit_log2);
    s->n_parts++;
    return 0;
}

/* The rows whose bit is set, ascending. */
static void rows_merge(ac_gradsum_rows *r)
{
    int n = 0;
    for (size_t w = 0; w < r->words; w++)
        for (uint64_t bits = r->touched[w]; bits; bits &= bits - 1)
            r->merged[n++] = (int32_t)(w * 64 + (size_t)__builtin_ctzll(bits));
    r->n_merged = n;
}

/* Appends the merged rows' sums (zeros for rows not summed here). */
static size_t rows_pack(const ac_gradsum_rows *r, ac_fixed *out, int d)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < r->n_merged; i++) {
        int32_t slot = r->slot[r->merged[i]];
        ac_fixed *dst = out + (size_t)i * d;
        if (slot >= 0)
            memcpy(dst, r->acc + (size_t)slot * d, (size_t)d * sizeof *dst);
        else
            memset(dst, 0, (size_t)d * sizeof *dst);
    }
    return (size_t)r->n_merged * (size_t)d;
}

size_t ac_gradsum_pack(ac_gradsum *s)
{
    size_t n = s->n_dense;
    memcpy(s->packed, s->dense, n * sizeof *s->packed);
    if (s->token_rows) {
        rows_merge(&s->tokens);
        n += rows_pack(&s->tokens, s->packed + n, s->d);
    }
    if (s->ngrams.slot) {
        rows_merge(&s->ngrams);
        n += rows_pack(&s->ngrams, s->packed + n, s->d);
    }
    if (s->wide.slot) {
        rows_merge(&s->wide);
        n += rows_pack(&s->wide, s->packed + n, s->wide_width);
    }
    s->n_packed = n;
    return n;
}

static void to_floats(float *dst, const ac_fixed *src, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        dst[i] = ac_fixed_to_float(src[i]);
}

/* The rows of a [rows, d] table from consecutive packed rows. */
static void rows_to_floats(float *table, const int32_t *rows, int n, const ac_fixed *src, size_t d)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < d; k++)
            table[(size_t)rows[i] * d + k] = ac_fixed_to_float(src[(size_t)i * d + k]);
}

/* The merged rows of a row-sparse table from the packed sum; they become
 * the model's list of touched rows (the others' gradients are 0 already). */
static const ac_fixed *sparse_rows_to_floats(const ac_gradsum_rows *r, ac_model *m, int kind,
                                             const ac_fixed *at)
{
    if (!r->slot)
        return at;
    ac_sparse_rows *t = &m->sparse[kind];
    rows_to_floats(m->grads + t->offset, r->merged, r->n_merged, at, (size_t)t->width);
    for (int i = 0; i < r->n_merged; i++) {
        t->mark[r->merged[i]] = 1;
        t->rows[i] = r->merged[i];
    }
    t->n_rows = r->n_merged;
    return at + (size_t)r->n_merged * (size_t)t->width;
}

void ac_gradsum_unpack(const ac_gradsum *s, ac_model *m)
{
    const size_t d = (size_t)s->d;
    to_floats(m->grads + s->dense_begin, s->packed, s->n_dense);
    const ac_fixed *at = s->packed + s->n_dense;
    if (s->token_rows) {
        const ac_gradsum_rows *r = &s->tokens;
        rows_to_floats(m->g.embed_w, r->merged, r->n_merged, at, d);
        at += (size_t)r->n_merged * d;
    }
    at = sparse_rows_to_floats(&s->ngrams, m, AC_SPARSE_NGRAM, at);
    sparse_rows_to_floats(&s->wide, m, AC_SPARSE_WIDE, at);
}
