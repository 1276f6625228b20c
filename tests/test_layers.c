/* Proof that every hand-written layer backward in src/nn is right: central
 * finite differences (tests/gradcheck.h) over every element of every input and
 * parameter of small random cases, plus the layers' contracts (padding never
 * matters, dropout masks, backward accumulates, NULL gradients), the course
 * documents' worked attention example, the sinusoidal position table, and
 * bitwise-identical results for 1, 2 and 4 threads.
 *
 * Step and tolerances (layer_opts(): gc_defaults() with h 1e-2 instead of
 * 1e-3; atol 1e-4, rtol 2e-3, kink_tol 5e-2). The forward runs in float, the
 * loss L = sum(out * R) and the difference quotient in double. Two error
 * sources in the numeric slope:
 *  - truncation, h^2/6 * |f'''|: ~2e-5 at h 1e-2 for the O(1) inputs here;
 *  - float rounding of the outputs x_i touches (outputs it does not touch
 *    round identically in L+ and L- and cancel): ~1e-7 per output, up to d
 *    outputs of size O(1) (a layernorm row), divided by 2h.
 * At h 1e-3 the rounding term alone reached 1.4e-4 for layernorm din (more
 * than atol); at h 1e-2 every error measured dropped ~10x, i.e. it was
 * rounding, not truncation, and h 1e-2 is near the optimum (3 eps / f''')^(1/3).
 * With it the worst element of any tensor uses ~0.12x of atol 1e-4 + rtol
 * 2e-3 |g|, while a wrong term in a backward is off by O(gradient), hundreds
 * of times the tolerance. Each check prints its worst element and how much of
 * the tolerance it used, and asserts the numeric gradient is not ~0 everywhere
 * (a check with no signal proves nothing). Inputs are built at least 10 h away
 * from kinks (ReLU at 0, ties in max pooling) and n_kinks must be 0; the
 * printed slope gap shows how far smooth curvature stays below kink_tol.
 *
 * Padding: losses sum only over valid positions, but the backward passes get
 * dout with nonzero values at pad positions too, so a backward that lets pad
 * rows leak gradient disagrees with the finite differences. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/nn.h"
#include "attnctl/rng.h"
#include "gradcheck.h"

/* Small case used by the finite-difference tests. */
enum { SB = 2, ST = 5, SD = 8, SH = 2 };
static const int32_t small_lengths[SB] = {5, 3};

/* ------------------------------------------------------------ helpers */

static float *vec(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    ck_assert_ptr_nonnull(p);
    return p;
}

static float *copy_of(const float *x, size_t n)
{
    float *p = vec(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

/* x[i] uniform in [lo, hi), a pure function of (seed, i). */
static void fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * ac_rng_uniform(seed, i);
}

/* Zeroes rows t >= lengths[b] of a [B, T, d] tensor. */
static void zero_pad_rows(float *x, const int32_t *lengths, int B, int T, int d)
{
    for (int b = 0; b < B; b++)
        for (int t = lengths[b]; t < T; t++)
            memset(x + ((size_t)b * T + t) * d, 0, sizeof(float) * (size_t)d);
}

static gc_options layer_opts(void)
{
    gc_options o = gc_defaults();
    o.h = 1e-2;
    return o;
}

/* Runs the finite-difference check of one tensor, prints the worst element and
 * fails the test when any element is off, a kink was hit, or there is no signal. */
static void check_grad(const char *layer, const char *tensor, float *x, const float *analytic,
                       size_t n, gc_loss_fn loss, void *ctx)
{
    gc_result r = gc_check(x, analytic, n, loss, ctx, layer_opts());
    printf("gradcheck %-14s %-7s n=%-4zu max|err| %.2e  max|grad| %.2e  rel %.2e  %.3fx tol"
           "  slope gap %.1e\n",
           layer, tensor, r.n_checked, r.max_abs_err, r.max_abs_numeric,
           r.max_abs_numeric > 0 ? r.max_abs_err / r.max_abs_numeric : 0.0, r.max_excess,
           r.max_slope_gap);
    ck_assert_msg(r.n_failed == 0 && r.n_kinks == 0 && r.n_checked == n, "%s %s: %s", layer,
                  tensor, r.msg);
    ck_assert_msg(r.max_abs_numeric > 1e-2, "%s %s: numeric gradient ~0 everywhere (%g)", layer,
                  tensor, r.max_abs_numeric);
}

/* Backward adds: a second backward into buffers holding g must give 2g. */
static void check_doubled(const char *what, const float *twice, const float *once, size_t n)
{
    double scale = 0.0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(once[i]));
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs((double)twice[i] - 2.0 * once[i]) <= 1e-6 * scale,
                      "%s[%zu]: second backward gave %g, want 2 * %g (backward must add)", what,
                      i, twice[i], once[i]);
}

static void assert_all_zero(const char *what, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(x[i] == 0.0f, "%s[%zu] = %g, want exactly 0", what, i, x[i]);
}

/* ------------------------------------------------------------ positions */

START_TEST(test_positions_table_matches_formula)
{
    const int dims[] = {16, 8, 7};
    const int max_len = 64;
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        int d = dims[k];
        float *table = vec((size_t)max_len * d);
        positions_table_fill(table, max_len, d);
        for (int p = 0; p < max_len; p++) {
            for (int col = 0; col < d; col++) {
                int i2 = col - col % 2; /* 2i */
                double angle = p / pow(10000.0, (double)i2 / d);
                double want = col % 2 == 0 ? sin(angle) : cos(angle);
                ck_assert_msg(fabs(table[(size_t)p * d + col] - want) <= 1e-6,
                              "d %d pos %d col %d: %.9g, want %.9g", d, p, col,
                              table[(size_t)p * d + col], want);
            }
        }
        free(table);
    }
}
END_TEST

/* ------------------------------------------------------------ embedding */

enum { EMB_V = 7 };

typedef struct {
    const int32_t *ids;
    const float *wte;
    float *pos;
    float *table;
    int32_t *buckets;
    int order, n_buckets;
    float *out;
    const float *r_valid;
} input_ctx;

/* Token + learned positions + hashed n-grams, the model's input sum. */
static double input_loss(void *p)
{
    input_ctx *c = p;
    embedding_forward(c->out, c->ids, c->wte, c->pos, SB, ST, SD);
    ngram_buckets_compute(c->buckets, c->ids, small_lengths, SB, ST, c->order, c->n_buckets);
    ngram_forward(c->out, c->buckets, c->table, small_lengths, SB, ST, SD, c->order - 1);
    return gc_dot(c->out, c->r_valid, (size_t)SB * ST * SD);
}

/* The hash is the documented one (config.json records it): checked against
 * values computed by hand from the formula. */
START_TEST(test_ngram_hash_by_hand)
{
    const int32_t ids[SB * ST] = {3, 1, 3, 4, 2, 5, 1, 2, 6, 0};
    int32_t buckets[SB * ST * 2];
    ngram_buckets_compute(buckets, ids, small_lengths, SB, ST, 3, 1000003);
    const uint64_t M = 116049371ULL, B = 1000003ULL;
    /* item 0, t = 0: bigram (0, 3), trigram (0, 0, 3) */
    ck_assert_int_eq(buckets[0], (int32_t)((0 * M + 3) % B));
    ck_assert_int_eq(buckets[1], (int32_t)(((0 * M + 0) * M + 3) % B));
    /* item 0, t = 2: bigram (1, 3), trigram (3, 1, 3) */
    ck_assert_int_eq(buckets[4], (int32_t)((1 * M + 3) % B));
    ck_assert_int_eq(buckets[5], (int32_t)(((3 * M + 1) * M + 3) % B));
    /* item 0, t = 4: trigram (3, 4, 2): (3 M + 4) M + 2 wraps past 2^64 */
    uint64_t h = 3;
    h = h * M + 4;
    h = h * M + 2;
    ck_assert_int_eq(buckets[9], (int32_t)(h % B));
    /* item 1 starts afresh: t = 0 is (0, 5) */
    ck_assert_int_eq(buckets[10], (int32_t)((0 * M + 5) % B));
    /* pad positions (item 1, t = 3, 4) get bucket 0 */
    for (int k = 16; k < 20; k++)
        ck_assert_int_eq(buckets[k], 0);
    for (int k = 0; k < 16; k++)
        ck_assert(buckets[k] >= 0 && buckets[k] < (int32_t)B);
}
END_TEST

START_TEST(test_positions_and_ngram_gradient)
{
    /* Few buckets, so that n-grams collide and rows sum several uses. */
    enum { NB = 5, ORDER = 3 };
    const int32_t ids[SB * ST] = {3, 1, 3, 1, 3, 5, 1, 3, 6, 0};
    size_t n_out = (size_t)SB * ST * SD, n_wte = (size_t)EMB_V * SD, n_pos = (size_t)ST * SD;
    size_t n_tab = (size_t)NB * SD;
    float *wte = vec(n_wte), *pos = vec(n_pos), *table = vec(n_tab), *out = vec(n_out);
    float *r = vec(n_out), *dpos = vec(n_pos), *dtab = vec(n_tab);
    int32_t buckets[SB * ST * (ORDER - 1)];
    fill_uniform(wte, n_wte, 201, -1, 1);
    fill_uniform(pos, n_pos, 202, -1, 1);
    fill_uniform(table, n_tab, 203, -1, 1);
    fill_uniform(r, n_out, 204, -1, 1);
    float *r_valid = copy_of(r, n_out);
    zero_pad_rows(r_valid, small_lengths, SB, ST, SD);
    input_ctx c = {ids, wte, pos, table, buckets, ORDER, NB, out, r_valid};
    input_loss(&c);
    /* the forward adds exactly the rows of its buckets */
    for (int i = 0; i < SD; i++) {
        float want = wte[3 * SD + i] + pos[2 * SD + i] + table[(size_t)buckets[4] * SD + i] +
                     table[(size_t)buckets[5] * SD + i];
        ck_assert(fabsf(out[2 * SD + i] - want) < 1e-6f);
    }
    positions_backward(dpos, r, small_lengths, SB, ST, SD);
    ngram_backward(dtab, r, buckets, small_lengths, SB, ST, SD, ORDER - 1);
    check_grad("learned positions", "dpos", pos, dpos, n_pos, input_loss, &c);
    check_grad("n-gram table", "dtable", table, dtab, n_tab, input_loss, &c);
    /* positions past every length get nothing */
    float *once = copy_of(dpos, n_pos);
    positions_backward(dpos, r, small_lengths, SB, ST, SD);
    check_doubled("dpos", dpos, once, n_pos);
    positions_backward(NULL, r, small_lengths, SB, ST, SD);
    ngram_backward(NULL, r, buckets, small_lengths, SB, ST, SD, ORDER - 1);
    free(wte); free(pos); free(table); free(out); free(r); free(dpos); free(dtab); free(r_valid);
    free(once);
}
END_TEST


/* The wide path's hash is the documented one, each text's set is sorted and
 * distinct (a repeated phrase counts once), and nothing past a length is read. */
START_TEST(test_wide_hash_and_sets)
{
    const int32_t gram[2] = {7, 3};
    uint64_t h = 2;
    h = h * 116049371ULL + 8;
    h = h * 116049371ULL + 4;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    ck_assert_uint_eq(wide_bucket(gram, 2, 1000003), (uint32_t)(h % 1000003ULL));
    /* "3 1 3 1 3": unigrams {3, 1}, bigrams {(3,1), (1,3)}: 4 distinct n-grams
     * (with a large table and this hash they land in 4 buckets). */
    const int32_t ids[SB * ST] = {3, 1, 3, 1, 3, 5, 1, 3, 6, 0};
    int32_t buckets[SB * ST * 2], counts[SB];
    wide_buckets_compute(buckets, counts, ids, small_lengths, SB, ST, 2, 1 << 20);
    ck_assert_int_eq(counts[0], 4);
    ck_assert_int_eq(counts[1], 5); /* 5 1 3: three words, two bigrams */
    for (int b = 0; b < SB; b++)
        for (int i = 1; i < counts[b]; i++)
            ck_assert(buckets[b * ST * 2 + i - 1] < buckets[b * ST * 2 + i]);
    /* the pads of item 1 (6, 0) are not read: changing them changes nothing */
    int32_t ids2[SB * ST];
    memcpy(ids2, ids, sizeof ids);
    ids2[8] = 9;
    ids2[9] = 4;
    int32_t buckets2[SB * ST * 2], counts2[SB];
    wide_buckets_compute(buckets2, counts2, ids2, small_lengths, SB, ST, 2, 1 << 20);
    ck_assert_int_eq(counts2[1], counts[1]);
    ck_assert_mem_eq(buckets2 + ST * 2, buckets + ST * 2, (size_t)counts[1] * sizeof(int32_t));
}
END_TEST

typedef struct {
    const int32_t *buckets, *counts;
    float *table, *logits;
    const float *base, *r;
    int order, C;
    float norm;
} wide_ctx;

static double wide_loss(void *p)
{
    wide_ctx *c = p;
    memcpy(c->logits, c->base, (size_t)SB * c->C * sizeof(float));
    wide_forward(c->logits, c->buckets, c->counts, c->table, SB, ST, c->order, c->C, c->norm);
    return gc_dot(c->logits, c->r, (size_t)SB * c->C);
}

/* The wide path at one length normalisation: its forward by hand, its
 * backward against finite differences and accumulating. */
static void check_wide(float norm)
{
    /* 7 buckets: several n-grams share a row, and both items touch some rows. */
    enum { NB = 7, ORDER = 3, C = 3 };
    const int32_t ids[SB * ST] = {3, 1, 3, 4, 2, 5, 1, 3, 6, 0};
    int32_t buckets[SB * ST * ORDER], counts[SB];
    wide_buckets_compute(buckets, counts, ids, small_lengths, SB, ST, ORDER, NB);
    size_t n_tab = (size_t)NB * C;
    float *table = vec(n_tab), *dtab = vec(n_tab), *logits = vec(SB * C), *base = vec(SB * C);
    float *r = vec(SB * C);
    fill_uniform(table, n_tab, 301, -1, 1);
    fill_uniform(base, SB * C, 302, -1, 1);
    fill_uniform(r, SB * C, 303, -1, 1);
    wide_ctx c = {buckets, counts, table, logits, base, r, ORDER, C, norm};
    wide_loss(&c);
    /* the forward adds each distinct bucket's row once, times (500 / max(n, 30))^norm */
    double want = 0.0;
    for (int i = 0; i < counts[1]; i++)
        want += table[(size_t)buckets[ST * ORDER + i] * C + 1];
    want = base[C + 1] + pow(500.0 / fmax(counts[1], 30.0), norm) * want;
    ck_assert(fabs(logits[C + 1] - want) < 1e-4 * fmax(1.0, fabs(want)));
    wide_backward(dtab, r, buckets, counts, SB, ST, ORDER, C, norm);
    check_grad("wide path", "dtable", table, dtab, n_tab, wide_loss, &c);
    float *once = copy_of(dtab, n_tab);
    wide_backward(dtab, r, buckets, counts, SB, ST, ORDER, C, norm);
    check_doubled("wide dtable", dtab, once, n_tab);
    wide_backward(NULL, r, buckets, counts, SB, ST, ORDER, C, norm);
    free(table); free(dtab); free(logits); free(base); free(r); free(once);
}

START_TEST(test_wide_gradient)
{
    check_wide(0.0f); /* the plain sum */
    check_wide(0.5f); /* the default: short texts scaled up */
    check_wide(1.0f);
}
END_TEST

START_TEST(test_wide_scale)
{
    ck_assert(wide_scale(37, 0.0f) == 1.0);
    ck_assert(wide_scale(0, 0.5f) == 1.0); /* an empty text has nothing to scale */
    ck_assert(fabs(wide_scale(500, 0.5f) - 1.0) < 1e-12);
    ck_assert(fabs(wide_scale(125, 0.5f) - 2.0) < 1e-12);
    ck_assert(fabs(wide_scale(2000, 1.0f) - 0.25) < 1e-12);
    /* below the floor (30) no further scaling: one word weighs as a sentence */
    ck_assert(fabs(wide_scale(30, 0.5f) - sqrt(500.0 / 30.0)) < 1e-12);
    ck_assert(wide_scale(1, 0.5f) == wide_scale(30, 0.5f));
    ck_assert(wide_scale(29, 1.0f) == wide_scale(30, 1.0f));
    ck_assert(wide_scale(31, 1.0f) < wide_scale(30, 1.0f));
}
END_TEST

/* The wide table's naive Bayes start: Wang & Manning's log-count ratio of
 * each bucket by hand on four rows (and a fifth row left out of the count). */
START_TEST(test_wide_nb_init)
{
    enum { NB = 1 << 20, C = 2 };
    /* class 0: "1 2", "1 3"; class 1: "4 2", "4 5"; row 4 ("1 1", class 1) not given */
    const int32_t ids[] = {1, 2, 1, 3, 4, 2, 4, 5, 1, 1};
    const int64_t off[] = {0, 2, 4, 6, 8, 10};
    const int32_t labels[] = {0, 0, 1, 1, 1};
    const int64_t rows[] = {3, 0, 2, 1};
    float *table = vec((size_t)NB * C);
    fill_uniform(table, (size_t)NB * C, 311, -1, 1); /* overwritten whole */
    int32_t grams[2];
    double work[4 * C];
    wide_nb_init(table, ids, off, labels, rows, 4, 1, NB, C, 0.5f, grams, work);
    const int32_t w1 = 1, w2 = 2, w3 = 3, w9 = 9;
    const uint32_t b1 = wide_bucket(&w1, 1, NB), b2 = wide_bucket(&w2, 1, NB),
                   b3 = wide_bucket(&w3, 1, NB), b9 = wide_bucket(&w9, 1, NB);
    /* 5 buckets seen, 4 n-grams per class: |p|_1 = |q|_1 = 4 + 5. Word 1: in 2
     * class-0 rows, no class-1 row: r_0 = log((3/9) / (1/9)) = log 3. */
    ck_assert(fabs(table[(size_t)b1 * C + 0] - 0.25 * log(3.0)) < 1e-6);
    ck_assert(fabs(table[(size_t)b1 * C + 1] + 0.25 * log(3.0)) < 1e-6);
    /* word 3: one class-0 row: log((2/9) / (1/9)) */
    ck_assert(fabs(table[(size_t)b3 * C + 0] - 0.25 * log(2.0)) < 1e-6);
    /* word 2: one row of each class: no evidence */
    ck_assert(fabs(table[(size_t)b2 * C + 0]) < 1e-7 && fabs(table[(size_t)b2 * C + 1]) < 1e-7);
    /* a bucket no row has starts at zero */
    ck_assert(table[(size_t)b9 * C + 0] == 0.0f && table[(size_t)b9 * C + 1] == 0.0f);
    int nonzero = 0;
    for (size_t i = 0; i < (size_t)NB * C; i++)
        nonzero += table[i] != 0.0f;
    ck_assert_int_eq(nonzero, 2 * 4); /* words 1, 3, 4, 5 (rows 3, 0, 2, 1 only) */
    free(table);
}
END_TEST

typedef struct {
    const int32_t *ids;
    float *wte;
    const float *pos;
    float *out;
    const float *r_valid;
} emb_ctx;

static double emb_loss(void *p)
{
    emb_ctx *c = p;
    embedding_forward(c->out, c->ids, c->wte, c->pos, SB, ST, SD);
    return gc_dot(c->out, c->r_valid, (size_t)SB * ST * SD);
}

START_TEST(test_embedding_gradient)
{
    /* Id 3 twice and id 1 in both items (gradients sum); ids 6 and 0 only at
     * the pad positions of item 1 (no gradient at all). */
    const int32_t ids[SB * ST] = {3, 1, 3, 4, 2, 5, 1, 2, 6, 0};
    size_t n_out = (size_t)SB * ST * SD, n_wte = (size_t)EMB_V * SD;
    float *wte = vec(n_wte), *pos = vec((size_t)ST * SD), *out = vec(n_out);
    float *r = vec(n_out), *dwte = vec(n_wte);
    fill_uniform(wte, n_wte, 101, -1, 1);
    fill_uniform(r, n_out, 102, -1, 1);
    positions_table_fill(pos, ST, SD);
    float *r_valid = copy_of(r, n_out);
    zero_pad_rows(r_valid, small_lengths, SB, ST, SD);

    embedding_forward(out, ids, wte, pos, SB, ST, SD);
    for (int row = 0; row < SB * ST; row++)
        for (int i = 0; i < SD; i++)
            ck_assert(out[(size_t)row * SD + i] ==
                      wte[(size_t)ids[row] * SD + i] + pos[(size_t)(row % ST) * SD + i]);

    embedding_backward(dwte, r, ids, small_lengths, SB, ST, SD);
    assert_all_zero("dwte[pad-only id 0]", dwte, SD);
    assert_all_zero("dwte[pad-only id 6]", dwte + 6 * SD, SD);
    for (int i = 0; i < SD; i++) /* id 3 at (0,0) and (0,2): summed */
        ck_assert(dwte[3 * SD + i] == r[0 * SD + i] + r[2 * SD + i]);

    emb_ctx c = {ids, wte, pos, out, r_valid};
    check_grad("embedding", "dwte", wte, dwte, n_wte, emb_loss, &c);

    float *once = copy_of(dwte, n_wte);
    embedding_backward(dwte, r, ids, small_lengths, SB, ST, SD);
    check_doubled("dwte", dwte, once, n_wte);
    embedding_backward(NULL, r, ids, small_lengths, SB, ST, SD);

    free(wte); free(pos); free(out); free(r); free(dwte); free(r_valid); free(once);
}
END_TEST

/* ------------------------------------------------------------ linear */

typedef struct {
    float *out, *in, *w, *bias;
    const float *r;
    int N, in_dim, out_dim;
} lin_ctx;

static double lin_loss(void *p)
{
    lin_ctx *c = p;
    linear_forward(c->out, c->in, c->w, c->bias, c->N, c->in_dim, c->out_dim);
    return gc_dot(c->out, c->r, (size_t)c->N * c->out_dim);
}

START_TEST(test_linear_gradient)
{
    const int N = SB * ST, in_dim = SD, out_dim = 6;
    size_t n_in = (size_t)N * in_dim, n_w = (size_t)out_dim * in_dim, n_out = (size_t)N * out_dim;
    float *in = vec(n_in), *w = vec(n_w), *bias = vec(out_dim), *out = vec(n_out), *r = vec(n_out);
    float *din = vec(n_in), *dw = vec(n_w), *dbias = vec(out_dim);
    fill_uniform(in, n_in, 201, -1, 1);
    fill_uniform(w, n_w, 202, -1, 1);
    fill_uniform(bias, out_dim, 203, -1, 1);
    fill_uniform(r, n_out, 204, -1, 1);

    /* Forward against a double reference. */
    linear_forward(out, in, w, bias, N, in_dim, out_dim);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < out_dim; o++) {
            double want = bias[o];
            for (int i = 0; i < in_dim; i++)
                want += (double)in[n * in_dim + i] * w[o * in_dim + i];
            ck_assert_double_eq_tol(out[n * out_dim + o], want, 1e-5);
        }

    linear_backward(din, dw, dbias, r, in, w, N, in_dim, out_dim);
    lin_ctx c = {out, in, w, bias, r, N, in_dim, out_dim};
    check_grad("linear", "din", in, din, n_in, lin_loss, &c);
    check_grad("linear", "dw", w, dw, n_w, lin_loss, &c);
    check_grad("linear", "dbias", bias, dbias, out_dim, lin_loss, &c);
    lin_loss(&c); /* gc_check's last forward saw a perturbed input */

    float *din1 = copy_of(din, n_in), *dw1 = copy_of(dw, n_w), *db1 = copy_of(dbias, out_dim);
    linear_backward(din, dw, dbias, r, in, w, N, in_dim, out_dim);
    check_doubled("din", din, din1, n_in);
    check_doubled("dw", dw, dw1, n_w);
    check_doubled("dbias", dbias, db1, out_dim);

    /* Without a bias the output is in @ w^T only. */
    float *out_nb = vec(n_out);
    linear_forward(out_nb, in, w, NULL, N, in_dim, out_dim);
    for (size_t i = 0; i < n_out; i++)
        ck_assert_double_eq_tol(out_nb[i], out[i] - bias[i % out_dim], 1e-5);

    /* NULL gradients: the others are still computed, identically. */
    memset(dw, 0, n_w * sizeof(float));
    linear_backward(NULL, dw, NULL, r, in, w, N, in_dim, out_dim);
    ck_assert(memcmp(dw, dw1, n_w * sizeof(float)) == 0);
    memset(din, 0, n_in * sizeof(float));
    linear_backward(din, NULL, NULL, r, in, w, N, in_dim, out_dim);
    ck_assert(memcmp(din, din1, n_in * sizeof(float)) == 0);
    memset(dbias, 0, out_dim * sizeof(float));
    linear_backward(NULL, NULL, dbias, r, in, w, N, in_dim, out_dim);
    ck_assert(memcmp(dbias, db1, out_dim * sizeof(float)) == 0);

    free(in); free(w); free(bias); free(out); free(r); free(din); free(dw); free(dbias);
    free(din1); free(dw1); free(db1); free(out_nb);
}
END_TEST

/* ------------------------------------------------------------ layernorm */

typedef struct {
    float *out, *mean, *rstd, *in, *w, *b;
    const float *r;
    int N, d;
} ln_ctx;

#define LN_EPS 1e-6f

static double ln_loss(void *p)
{
    ln_ctx *c = p;
    layernorm_forward(c->out, c->mean, c->rstd, c->in, c->w, c->b, c->N, c->d, LN_EPS);
    return gc_dot(c->out, c->r, (size_t)c->N * c->d);
}

START_TEST(test_layernorm_gradient)
{
    const int N = SB * ST, d = SD;
    size_t n = (size_t)N * d;
    float *in = vec(n), *w = vec(d), *b = vec(d), *out = vec(n), *mean = vec(N), *rstd = vec(N);
    float *r = vec(n), *din = vec(n), *dw = vec(d), *db = vec(d);
    fill_uniform(in, n, 301, -2, 2);
    /* Rows with means away from 0 (up to +-2.5). Much larger offsets make the
     * float rounding of x - mean, not the backward, dominate the difference
     * quotient (x ~ 5 has ulp 5e-7 -> ~5e-4 noise at h = 1e-3). */
    for (int row = 0; row < N; row++)
        for (int i = 0; i < d; i++)
            in[row * d + i] += 0.5f * (float)(row - 4);
    fill_uniform(w, d, 302, 0.5f, 1.5f);
    fill_uniform(b, d, 303, -0.5f, 0.5f);
    fill_uniform(r, n, 304, -1, 1);

    /* Forward against a double reference. */
    layernorm_forward(out, mean, rstd, in, w, b, N, d, LN_EPS);
    for (int row = 0; row < N; row++) {
        const float *x = in + row * d;
        double m = 0, v = 0;
        for (int i = 0; i < d; i++)
            m += x[i];
        m /= d;
        for (int i = 0; i < d; i++)
            v += (x[i] - m) * (x[i] - m);
        v /= d;
        double s = 1.0 / sqrt(v + LN_EPS);
        ck_assert_double_eq_tol(mean[row], m, 1e-5);
        ck_assert_double_eq_tol(rstd[row], s, 1e-5 * s);
        for (int i = 0; i < d; i++)
            ck_assert_double_eq_tol(out[row * d + i], (x[i] - m) * s * w[i] + b[i], 1e-5);
    }

    layernorm_backward(din, dw, db, r, in, w, mean, rstd, N, d);
    ln_ctx c = {out, mean, rstd, in, w, b, r, N, d};
    check_grad("layernorm", "din", in, din, n, ln_loss, &c);
    check_grad("layernorm", "dw", w, dw, d, ln_loss, &c);
    check_grad("layernorm", "db", b, db, d, ln_loss, &c);

    ln_loss(&c); /* gc_check's last forward saw a perturbed input: redo mean/rstd */
    float *din1 = copy_of(din, n), *dw1 = copy_of(dw, d), *db1 = copy_of(db, d);
    layernorm_backward(din, dw, db, r, in, w, mean, rstd, N, d);
    check_doubled("din", din, din1, n);
    check_doubled("dw", dw, dw1, d);
    check_doubled("db", db, db1, d);

    memset(dw, 0, d * sizeof(float));
    layernorm_backward(NULL, dw, NULL, r, in, w, mean, rstd, N, d);
    ck_assert(memcmp(dw, dw1, d * sizeof(float)) == 0);
    memset(db, 0, d * sizeof(float));
    layernorm_backward(NULL, NULL, db, r, in, w, mean, rstd, N, d);
    ck_assert(memcmp(db, db1, d * sizeof(float)) == 0);
    memset(din, 0, n * sizeof(float));
    layernorm_backward(din, NULL, NULL, r, in, w, mean, rstd, N, d);
    ck_assert(memcmp(din, din1, n * sizeof(float)) == 0);

    free(in); free(w); free(b); free(out); free(mean); free(rstd); free(r); free(din); free(dw);
    free(db); free(din1); free(dw1); free(db1);
}
END_TEST

/* ------------------------------------------------------------ residual, relu, dropout */

enum { EW_N = SB * ST * SD };

typedef struct {
    float *out, *a, *b, *mask;
    const float *r;
    float p;
    uint64_t key;
} ew_ctx;

static double residual_loss(void *p)
{
    ew_ctx *c = p;
    residual_forward(c->out, c->a, c->b, EW_N);
    return gc_dot(c->out, c->r, EW_N);
}

static double relu_loss(void *p)
{
    ew_ctx *c = p;
    relu_forward(c->out, c->a, EW_N);
    return gc_dot(c->out, c->r, EW_N);
}

static double dropout_loss(void *p)
{
    ew_ctx *c = p;
    dropout_forward(c->out, c->mask, c->a, c->p, EW_N, c->key);
    return gc_dot(c->out, c->r, EW_N);
}

START_TEST(test_residual_gradient)
{
    float *a = vec(EW_N), *b = vec(EW_N), *out = vec(EW_N), *r = vec(EW_N);
    float *da = vec(EW_N), *db = vec(EW_N);
    fill_uniform(a, EW_N, 401, -1, 1);
    fill_uniform(b, EW_N, 402, -1, 1);
    fill_uniform(r, EW_N, 403, -1, 1);
    residual_forward(out, a, b, EW_N);
    for (int i = 0; i < EW_N; i++)
        ck_assert(out[i] == a[i] + b[i]);
    residual_backward(da, db, r, EW_N);
    ew_ctx c = {.out = out, .a = a, .b = b, .r = r};
    check_grad("residual", "da", a, da, EW_N, residual_loss, &c);
    check_grad("residual", "db", b, db, EW_N, residual_loss, &c);
    float *da1 = copy_of(da, EW_N);
    residual_backward(da, NULL, r, EW_N);
    check_doubled("da", da, da1, EW_N);
    residual_backward(NULL, NULL, r, EW_N);
    free(a); free(b); free(out); free(r); free(da); free(db); free(da1);
}
END_TEST

START_TEST(test_relu_gradient)
{
    float *in = vec(EW_N), *out = vec(EW_N), *r = vec(EW_N), *din = vec(EW_N);
    /* |x| in [0.1, 1), random sign: 10 h from the kink at 0. */
    fill_uniform(in, EW_N, 501, 0.1f, 1.0f);
    int negatives = 0;
    for (int i = 0; i < EW_N; i++)
        if (ac_rng_uniform(502, i) < 0.5f) {
            in[i] = -in[i];
            negatives++;
        }
    ck_assert(negatives > 10 && negatives < EW_N - 10);
    fill_uniform(r, EW_N, 503, -1, 1);
    relu_forward(out, in, EW_N);
    for (int i = 0; i < EW_N; i++)
        ck_assert(out[i] == (in[i] > 0 ? in[i] : 0.0f));
    relu_backward(din, r, out, EW_N);
    ew_ctx c = {.out = out, .a = in, .r = r};
    check_grad("relu", "din", in, din, EW_N, relu_loss, &c);
    float *din1 = copy_of(din, EW_N);
    relu_backward(din, r, out, EW_N);
    check_doubled("din", din, din1, EW_N);
    relu_backward(NULL, r, out, EW_N);
    free(in); free(out); free(r); free(din); free(din1);
}
END_TEST

START_TEST(test_dropout_gradient_and_mask)
{
    const float p = 0.3f;
    const float keep_scale = 1.0f / (1.0f - p);
    const uint64_t key = 0x5eed;
    float *in = vec(EW_N), *out = vec(EW_N), *mask = vec(EW_N), *r = vec(EW_N), *din = vec(EW_N);
    fill_uniform(in, EW_N, 601, -1, 1);
    fill_uniform(r, EW_N, 602, -1, 1);
    dropout_forward(out, mask, in, p, EW_N, key);
    int kept = 0;
    for (int i = 0; i < EW_N; i++) {
        ck_assert_msg(mask[i] == 0.0f || mask[i] == keep_scale, "mask[%d] = %g", i, mask[i]);
        ck_assert(out[i] == in[i] * mask[i]);
        kept += mask[i] != 0.0f;
    }
    ck_assert(kept > 0 && kept < EW_N);
    dropout_backward(din, r, mask, EW_N);
    for (int i = 0; i < EW_N; i++)
        ck_assert(din[i] == r[i] * mask[i]);
    ew_ctx c = {.out = out, .a = in, .mask = mask, .r = r, .p = p, .key = key};
    check_grad("dropout", "din", in, din, EW_N, dropout_loss, &c);
    float *din1 = copy_of(din, EW_N);
    dropout_backward(din, r, mask, EW_N);
    check_doubled("din", din, din1, EW_N);
    dropout_backward(NULL, r, mask, EW_N);

    /* Same key, same mask; another key, another mask. */
    float *mask2 = vec(EW_N);
    dropout_forward(out, mask2, in, p, EW_N, key);
    ck_assert(memcmp(mask, mask2, EW_N * sizeof(float)) == 0);
    dropout_forward(out, mask2, in, p, EW_N, key + 1);
    ck_assert(memcmp(mask, mask2, EW_N * sizeof(float)) != 0);

    /* p = 0: identity. */
    dropout_forward(out, mask2, in, 0.0f, EW_N, key);
    for (int i = 0; i < EW_N; i++)
        ck_assert(mask2[i] == 1.0f && out[i] == in[i]);

    /* Over a large n the kept fraction is 1 - p (binomial sd ~ 4.6e-4 here). */
    const size_t big = (size_t)1 << 20;
    float *bin = vec(big), *bout = vec(big), *bmask = vec(big);
    for (size_t i = 0; i < big; i++)
        bin[i] = 1.0f;
    dropout_forward(bout, bmask, bin, p, big, 77);
    size_t bkept = 0;
    double mean_out = 0.0;
    for (size_t i = 0; i < big; i++) {
        bkept += bmask[i] != 0.0f;
        mean_out += bout[i];
    }
    double frac = (double)bkept / big;
    ck_assert_msg(fabs(frac - (1.0 - p)) < 3e-3, "kept fraction %.5f, want %.2f", frac, 1.0 - p);
    /* Inverted dropout keeps the expectation. */
    ck_assert_msg(fabs(mean_out / big - 1.0) < 5e-3, "mean output %.5f, want 1", mean_out / big);

    free(in); free(out); free(mask); free(r); free(din); free(din1); free(mask2);
    free(bin); free(bout); free(bmask);
}
END_TEST

/* ------------------------------------------------------------ attention */

typedef struct {
    float *out, *probs, *scratch, *q, *k, *v;
    const float *r_valid;
    const int32_t *lengths;
    int B, T, d, H;
    float scale;
} attn_ctx;

static double attn_loss(void *p)
{
    attn_ctx *c = p;
    attention_forward(c->out, c->probs, c->scratch, 4, c->q, c->k, c->v, c->d, c->lengths, c->B,
                      c->T, c->d, c->H, c->scale);
    return gc_dot(c->out, c->r_valid, (size_t)c->B * c->T * c->d);
}

START_TEST(test_attention_gradient_with_padding)
{
    const int B = SB, T = ST, d = SD, H = SH, hd = SD / SH;
    const float scale = 1.0f / sqrtf((float)hd);
    size_t n = (size_t)B * T * d, n_probs = (size_t)B * H * T * T;
    float *q = vec(n), *k = vec(n), *v = vec(n), *out = vec(n), *probs = vec(n_probs);
    float *r = vec(n), *dq = vec(n), *dk = vec(n), *dv = vec(n);
    float *scratch = vec(attention_scratch_floats(T, d, H, 4));
    /* Scores of a few units: softmax rows neither flat nor one-hot. */
    fill_uniform(q, n, 701, -2, 2);
    fill_uniform(k, n, 702, -2, 2);
    fill_uniform(v, n, 703, -1, 1);
    fill_uniform(r, n, 704, -1, 1);
    float *r_valid = copy_of(r, n);
    zero_pad_rows(r_valid, small_lengths, B, T, d);

    /* Garbage in the outputs: the forward must write pad rows too. */
    for (size_t i = 0; i < n; i++)
        out[i] = NAN;
    for (size_t i = 0; i < n_probs; i++)
        probs[i] = NAN;
    attention_forward(out, probs, scratch, 4, q, k, v, d, small_lengths, B, T, d, H, scale);

    /* Forward against a double reference; pad keys exactly 0, pad query rows zero. */
    for (int b = 0; b < B; b++) {
        int len = small_lengths[b];
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const float *prow = probs + (((size_t)b * H + h) * T + t) * T;
                const float *orow = out + ((size_t)b * T + t) * d + h * hd;
                if (t >= len) {
                    assert_all_zero("probs[pad query]", prow, T);
                    assert_all_zero("out[pad query]", orow, hd);
                    continue;
                }
                double sc[ST], mx = -INFINITY, sum = 0.0, psum = 0.0;
                for (int s = 0; s < len; s++) {
                    double dot = 0.0;
                    for (int i = 0; i < hd; i++)
                        dot += (double)q[((size_t)b * T + t) * d + h * hd + i] *
                               k[((size_t)b * T + s) * d + h * hd + i];
                    sc[s] = dot * scale;
                    mx = fmax(mx, sc[s]);
                }
                for (int s = 0; s < len; s++)
                    sum += exp(sc[s] - mx);
                for (int s = 0; s < T; s++) {
                    if (s >= len) {
                        ck_assert_msg(prow[s] == 0.0f, "pad key prob %g", prow[s]);
                        continue;
                    }
                    ck_assert_double_eq_tol(prow[s], exp(sc[s] - mx) / sum, 1e-6);
                    psum += prow[s];
                }
                ck_assert_double_eq_tol(psum, 1.0, 1e-6);
                for (int i = 0; i < hd; i++) {
                    double want = 0.0;
                    for (int s = 0; s < len; s++)
                        want += exp(sc[s] - mx) / sum * v[((size_t)b * T + s) * d + h * hd + i];
                    ck_assert_double_eq_tol(orow[i], want, 1e-5);
                }
            }
    }

    /* Values at pad positions (huge ones) change nothing in valid rows. */
    float *q2 = copy_of(q, n), *k2 = copy_of(k, n), *v2 = copy_of(v, n);
    float *out2 = vec(n), *probs2 = vec(n_probs);
    for (int t = small_lengths[1]; t < T; t++)
        for (int i = 0; i < d; i++) {
            size_t at = ((size_t)1 * T + t) * d + i;
            q2[at] = 1e3f;
            k2[at] = 1e3f;
            v2[at] = -1e3f;
        }
    attention_forward(out2, probs2, scratch, 4, q2, k2, v2, d, small_lengths, B, T, d, H, scale);
    ck_assert(memcmp(out, out2, n * sizeof(float)) == 0);
    ck_assert(memcmp(probs, probs2, n_probs * sizeof(float)) == 0);

    /* dout is nonzero on pad rows too: none of it may reach q, k or v. */
    attention_backward(dq, dk, dv, scratch, 4, r, q, k, v, d, probs, small_lengths, B, T, d, H, scale);
    for (int t = small_lengths[1]; t < T; t++) {
        size_t at = ((size_t)1 * T + t) * d;
        assert_all_zero("dq[pad]", dq + at, d);
        assert_all_zero("dk[pad]", dk + at, d);
        assert_all_zero("dv[pad]", dv + at, d);
    }
    attn_ctx c = {out, probs, scratch, q, k, v, r_valid, small_lengths, B, T, d, H, scale};
    check_grad("attention", "dq", q, dq, n, attn_loss, &c);
    check_grad("attention", "dk", k, dk, n, attn_loss, &c);
    check_grad("attention", "dv", v, dv, n, attn_loss, &c);
    attn_loss(&c); /* probs of the unperturbed inputs again */

    float *dq1 = copy_of(dq, n), *dk1 = copy_of(dk, n), *dv1 = copy_of(dv, n);
    attention_backward(dq, dk, dv, scratch, 4, r, q, k, v, d, probs, small_lengths, B, T, d, H, scale);
    check_doubled("dq", dq, dq1, n);
    check_doubled("dk", dk, dk1, n);
    check_doubled("dv", dv, dv1, n);

    /* NULL gradients: the others are unchanged bit for bit. */
    memset(dk, 0, n * sizeof(float));
    attention_backward(NULL, dk, NULL, scratch, 4, r, q, k, v, d, probs, small_lengths, B, T, d, H,
                       scale);
    ck_assert(memcmp(dk, dk1, n * sizeof(float)) == 0);
    memset(dv, 0, n * sizeof(float));
    attention_backward(NULL, NULL, dv, scratch, 4, r, q, k, v, d, probs, small_lengths, B, T, d, H,
                       scale);
    ck_assert(memcmp(dv, dv1, n * sizeof(float)) == 0);
    memset(dq, 0, n * sizeof(float));
    attention_backward(dq, NULL, NULL, scratch, 4, r, q, k, v, d, probs, small_lengths, B, T, d, H,
                       scale);
    ck_assert(memcmp(dq, dq1, n * sizeof(float)) == 0);

    free(q); free(k); free(v); free(out); free(probs); free(r); free(dq); free(dk); free(dv);
    free(scratch); free(r_valid); free(q2); free(k2); free(v2); free(out2); free(probs2);
    free(dq1); free(dk1); free(dv1);
}
END_TEST

/* The worked example of the course documents ("Attention and the Transformer",
 * Canziani, NYU Deep Learning): three inputs of size 4, keys/queries/values
 * x @ W, unscaled dot-product attention. */
START_TEST(test_attention_golden_example)
{
    const float x[3 * 4] = {1, 0, 1, 0, 0, 2, 0, 2, 1, 1, 1, 1};
    /* [in = 4][out = 3] as in the documents (x @ W). */
    const float w_key[4][3] = {{0, 0, 1}, {1, 1, 0}, {0, 1, 0}, {1, 1, 0}};
    const float w_query[4][3] = {{1, 0, 1}, {1, 0, 0}, {0, 0, 1}, {0, 1, 1}};
    const float w_value[4][3] = {{0, 2, 0}, {0, 3, 0}, {1, 0, 3}, {1, 1, 0}};
    const double want[3][3] = {
        {1.9366, 6.6831, 1.5951}, {2.0000, 7.9640, 0.0540}, {1.9997, 7.7599, 0.3584}};
    /* linear weights are [out, in]: transpose. */
    float wk[3 * 4], wq[3 * 4], wv[3 * 4];
    for (int o = 0; o < 3; o++)
        for (int i = 0; i < 4; i++) {
            wk[o * 4 + i] = w_key[i][o];
            wq[o * 4 + i] = w_query[i][o];
            wv[o * 4 + i] = w_value[i][o];
        }
    float keys[9], queries[9], values[9], out[9], probs[9];
    float *scratch = vec(attention_scratch_floats(3, 3, 1, 1));
    linear_forward(keys, x, wk, NULL, 3, 4, 3);
    linear_forward(queries, x, wq, NULL, 3, 4, 3);
    linear_forward(values, x, wv, NULL, 3, 4, 3);
    const float want_keys[9] = {0, 1, 1, 4, 4, 0, 2, 3, 1};
    const float want_queries[9] = {1, 0, 2, 2, 2, 2, 2, 1, 3};
    const float want_values[9] = {1, 2, 3, 2, 8, 0, 2, 6, 3};
    for (int i = 0; i < 9; i++) {
        ck_assert(keys[i] == want_keys[i]);
        ck_assert(queries[i] == want_queries[i]);
        ck_assert(values[i] == want_values[i]);
    }
    const int32_t len[1] = {3};
    attention_forward(out, probs, scratch, 1, queries, keys, values, 3, len, 1, 3, 3, 1, 1.0f);
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 3; i++)
            ck_assert_msg(fabs(out[t * 3 + i] - want[t][i]) <= 1e-3,
                          "out[%d][%d] = %.5f, want %.4f",
                          t, i, out[t * 3 + i], want[t][i]);
    free(scratch);
}
END_TEST

/* The blocked kernels at a size with full vectors and partial ones (T = 37,
 * head size 24), q/k/v packed side by side as the model stores them, against
 * a double-precision reference of the forward and of all three gradients. */
START_TEST(test_attention_packed_against_reference)
{
    enum { B = 2, T = 37, D = 48, H = 2, HD = D / H };
    const int32_t lengths[B] = {37, 20};
    const float scale = 1.0f / sqrtf((float)HD);
    size_t n = (size_t)B * T * D, n3 = 3 * n, n_probs = (size_t)B * H * T * T;
    float *qkv = vec(n3), *out = vec(n), *probs = vec(n_probs), *dout = vec(n), *dqkv = vec(n3);
    float *scratch = vec(attention_scratch_floats(T, D, H, 4));
    fill_uniform(qkv, n3, 1501, -1.5f, 1.5f);
    fill_uniform(dout, n, 1502, -1, 1);
    attention_forward(out, probs, scratch, 4, qkv, qkv + D, qkv + 2 * D, 3 * D, lengths, B, T, D, H,
                      scale);
    attention_backward(dqkv, dqkv + D, dqkv + 2 * D, scratch, 4, dout, qkv, qkv + D, qkv + 2 * D,
                       3 * D, probs, lengths, B, T, D, H, scale);
    /* Inference without keeping the maps: the same output, bit for bit. */
    float *out_nomaps = vec(n);
    attention_forward(out_nomaps, NULL, scratch, 4, qkv, qkv + D, qkv + 2 * D, 3 * D, lengths, B, T,
                      D, H, scale);
    ck_assert(memcmp(out, out_nomaps, n * sizeof(float)) == 0);
    free(out_nomaps);
    double worst_out = 0, worst_grad = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int len = lengths[b];
            double p[T][T], dp[T][T];
            const float *base = qkv + (size_t)b * T * 3 * D + h * HD;
#define QKV(t, which, i) ((double)base[(size_t)(t) * 3 * D + (which) * D + (i)])
            for (int t = 0; t < len; t++) {
                double mx = -1e300, sum = 0;
                for (int s = 0; s < len; s++) {
                    double dot = 0;
                    for (int i = 0; i < HD; i++)
                        dot += QKV(t, 0, i) * QKV(s, 1, i);
                    p[t][s] = dot * scale;
                    mx = p[t][s] > mx ? p[t][s] : mx;
                }
                for (int s = 0; s < len; s++)
                    sum += p[t][s] = exp(p[t][s] - mx);
                for (int s = 0; s < len; s++) {
                    p[t][s] /= sum;
                    float got = probs[(((size_t)b * H + h) * T + t) * T + s];
                    worst_out = fmax(worst_out, fabs(got - p[t][s]));
                }
                for (int s = len; s < T; s++)
                    ck_assert(probs[(((size_t)b * H + h) * T + t) * T + s] == 0.0f);
                for (int i = 0; i < HD; i++) {
                    double o = 0;
                    for (int s = 0; s < len; s++)
                        o += p[t][s] * QKV(s, 2, i);
                    worst_out = fmax(worst_out, fabs(out[((size_t)b * T + t) * D + h * HD + i] - o));
                }
            }
            /* gradients */
            const float *go = dout + (size_t)b * T * D + h * HD;
            for (int t = 0; t < len; t++) {
                double pdp = 0;
                for (int s = 0; s < len; s++) {
                    double dot = 0;
                    for (int i = 0; i < HD; i++)
                        dot += (double)go[(size_t)t * D + i] * QKV(s, 2, i);
                    dp[t][s] = dot;
                    pdp += p[t][s] * dot;
                }
                for (int s = 0; s < len; s++)
                    dp[t][s] = p[t][s] * (dp[t][s] - pdp) * scale; /* dscore */
            }
            const float *g = dqkv + (size_t)b * T * 3 * D + h * HD;
            for (int r = 0; r < len; r++)
                for (int i = 0; i < HD; i++) {
                    double dq = 0, dk = 0, dv = 0;
                    for (int s = 0; s < len; s++) {
                        dq += dp[r][s] * QKV(s, 1, i);
                        dk += dp[s][r] * QKV(s, 0, i);
                        dv += p[s][r] * (double)go[(size_t)s * D + i];
                    }
                    const float *gr = g + (size_t)r * 3 * D;
                    worst_grad = fmax(worst_grad, fabs(gr[i] - dq));
                    worst_grad = fmax(worst_grad, fabs(gr[D + i] - dk));
                    worst_grad = fmax(worst_grad, fabs(gr[2 * D + i] - dv));
                }
            for (int r = len; r < T; r++) /* pad rows get no gradient */
                for (int i = 0; i < 3 * D; i++)
                    ck_assert(g[(size_t)r * 3 * D + i - h * HD] == 0.0f);
#undef QKV
        }
    printf("attention packed T=%d hd=%d: forward max|err| %.2e, gradients max|err| %.2e\n", T, HD,
           worst_out, worst_grad);
    ck_assert_msg(worst_out < 1e-5, "forward error %g", worst_out);
    ck_assert_msg(worst_grad < 1e-5, "gradient error %g", worst_grad);
    free(qkv); free(out); free(probs); free(dout); free(dqkv); free(scratch);
}
END_TEST

/* ------------------------------------------------------------ FFN */

enum { FF = 12 };

typedef struct {
    float *in, *w1, *b1, *pre, *hidden, *w2, *b2, *out;
    const float *r;
    int N;
} ffn_ctx;

static double ffn_loss(void *p)
{
    ffn_ctx *c = p;
    linear_forward(c->pre, c->in, c->w1, c->b1, c->N, SD, FF);
    relu_forward(c->hidden, c->pre, (size_t)c->N * FF);
    linear_forward(c->out, c->hidden, c->w2, c->b2, c->N, FF, SD);
    return gc_dot(c->out, c->r, (size_t)c->N * SD);
}

START_TEST(test_ffn_gradient)
{
    const int N = SB * ST;
    size_t n_in = (size_t)N * SD, n_h = (size_t)N * FF;
    float *in = vec(n_in), *w1 = vec(FF * SD), *b1 = vec(FF), *pre = vec(n_h), *hidden = vec(n_h);
    float *w2 = vec(SD * FF), *b2 = vec(SD), *out = vec(n_in), *r = vec(n_in);
    float *din = vec(n_in), *dw1 = vec(FF * SD), *db1 = vec(FF), *dpre = vec(n_h);
    float *dhidden = vec(n_h), *dw2 = vec(SD * FF), *db2 = vec(SD);
    ffn_ctx c = {in, w1, b1, pre, hidden, w2, b2, out, r, N};
    fill_uniform(w1, FF * SD, 801, -0.6f, 0.6f);
    fill_uniform(b1, FF, 802, -0.3f, 0.3f);
    fill_uniform(w2, SD * FF, 803, -0.6f, 0.6f);
    fill_uniform(b2, SD, 804, -0.3f, 0.3f);
    fill_uniform(r, n_in, 805, -1, 1);
    /* Redraw each input row until none of its hidden pre-activations is near
     * the ReLU kink: perturbing one input, weight or bias by h = 1e-2 moves z
     * by at most 1e-2 here (|x| <= 1, |w1| <= 0.6), so |z| > 0.1 keeps a 10x
     * margin while rows still differ in which units are active.
     * Deterministic: draw k of row n uses key (806, n, k). */
    int active = 0;
    for (int row = 0; row < N; row++) {
        float *x = in + (size_t)row * SD, *z = pre + (size_t)row * FF;
        for (uint64_t draw = 0;; draw++) {
            ck_assert_msg(draw < 1000, "no kink-free draw for FFN row %d", row);
            fill_uniform(x, SD, ac_rng_key(806, (uint64_t)row * 1000 + draw), -1, 1);
            linear_forward(z, x, w1, b1, 1, SD, FF);
            double closest = INFINITY;
            for (int j = 0; j < FF; j++)
                closest = fmin(closest, fabs(z[j]));
            if (closest > 0.1)
                break;
        }
        for (int j = 0; j < FF; j++)
            active += z[j] > 0;
    }
    ck_assert(active > (int)n_h / 4 && active < 3 * (int)n_h / 4);

    ffn_loss(&c);
    linear_backward(dhidden, dw2, db2, r, hidden, w2, N, FF, SD);
    relu_backward(dpre, dhidden, hidden, n_h);
    linear_backward(din, dw1, db1, dpre, in, w1, N, SD, FF);
    check_grad("ffn", "din", in, din, n_in, ffn_loss, &c);
    check_grad("ffn", "dw1", w1, dw1, FF * SD, ffn_loss, &c);
    check_grad("ffn", "db1", b1, db1, FF, ffn_loss, &c);
    check_grad("ffn", "dw2", w2, dw2, SD * FF, ffn_loss, &c);
    check_grad("ffn", "db2", b2, db2, SD, ffn_loss, &c);

    free(in); free(w1); free(b1); free(pre); free(hidden); free(w2); free(b2); free(out); free(r);
    free(din); free(dw1); free(db1); free(dpre); free(dhidden); free(dw2); free(db2);
}
END_TEST

/* ------------------------------------------------------------ pooling */

typedef struct {
    float *out, *in;
    int32_t *argmax;
    const float *r;
    ac_pooling mode;
} pool_ctx;

static double pool_loss(void *p)
{
    pool_ctx *c = p;
    pool_forward(c->out, c->argmax, c->in, small_lengths, SB, ST, SD, c->mode);
    return gc_dot(c->out, c->r, (size_t)SB * SD);
}

static void check_pool_mode(ac_pooling mode, const char *name)
{
    size_t n = (size_t)SB * ST * SD, n_out = (size_t)SB * SD;
    float *in = vec(n), *out = vec(n_out), *r = vec(n_out), *din = vec(n);
    int32_t *argmax = calloc(n_out, sizeof(int32_t));
    ck_assert_ptr_nonnull(argmax);
    fill_uniform(r, n_out, 901, -1, 1);
    if (mode == AC_POOL_MAX) {
        /* For each (b, i) the valid positions hold distinct values 0.1 apart
         * ((3t + i) mod 5 is a permutation of t): 10 h from any tie. */
        for (int b = 0; b < SB; b++)
            for (int t = 0; t < ST; t++)
                for (int i = 0; i < SD; i++)
                    in[((size_t)b * ST + t) * SD + i] = 0.1f * (float)((3 * t + i) % ST) +
                                                        ac_rng_uniform(902, (uint64_t)(b * SD + i));
    } else {
        fill_uniform(in, n, 903, -1, 1);
    }
    /* Pads larger than anything valid: they must never win or count. */
    for (int t = small_lengths[1]; t < ST; t++)
        for (int i = 0; i < SD; i++)
            in[((size_t)1 * ST + t) * SD + i] = 10.0f + (float)t;

    pool_forward(out, argmax, in, small_lengths, SB, ST, SD, mode);
    for (int b = 0; b < SB; b++)
        for (int i = 0; i < SD; i++) {
            double want = mode == AC_POOL_MAX ? -INFINITY : 0.0;
            for (int t = 0; t < (mode == AC_POOL_CLS ? 1 : small_lengths[b]); t++) {
                double x = in[((size_t)b * ST + t) * SD + i];
                want = mode == AC_POOL_MAX ? fmax(want, x) : want + x;
            }
            if (mode == AC_POOL_MEAN)
                want /= small_lengths[b];
            ck_assert_msg(fabs(out[b * SD + i] - want) <= 1e-6, "%s out[%d][%d] = %g, want %g",
                          name, b, i, out[b * SD + i], want);
            if (mode == AC_POOL_MAX)
                ck_assert(argmax[b * SD + i] >= 0 && argmax[b * SD + i] < small_lengths[b]);
        }

    pool_backward(din, r, argmax, small_lengths, SB, ST, SD, mode);
    for (int t = small_lengths[1]; t < ST; t++)
        assert_all_zero("din[pad]", din + ((size_t)1 * ST + t) * SD, SD);
    pool_ctx c = {out, in, argmax, r, mode};
    check_grad(name, "din", in, din, n, pool_loss, &c);
    pool_loss(&c); /* argmax of the unperturbed input again */
    float *din1 = copy_of(din, n);
    pool_backward(din, r, argmax, small_lengths, SB, ST, SD, mode);
    check_doubled("din", din, din1, n);
    pool_backward(NULL, r, argmax, small_lengths, SB, ST, SD, mode);
    free(in); free(out); free(r); free(din); free(argmax); free(din1);
}

START_TEST(test_pool_max_gradient)
{
    check_pool_mode(AC_POOL_MAX, "pool max");
}
END_TEST

START_TEST(test_pool_mean_gradient)
{
    check_pool_mode(AC_POOL_MEAN, "pool mean");
}
END_TEST

START_TEST(test_pool_cls_gradient)
{
    check_pool_mode(AC_POOL_CLS, "pool cls");
}
END_TEST

/* ------------------------------------------------------------ cross-entropy */

enum { CE_B = 4 };

typedef struct {
    float *logits, *probs, *losses;
    const int32_t *labels;
    int C;
    float smoothing;
} ce_ctx;

/* Mean of the per-item losses summed in double (the returned float mean adds
 * one more rounding that finite differences would amplify). */
static double ce_loss(void *p)
{
    ce_ctx *c = p;
    crossentropy_forward(c->losses, c->probs, c->logits, c->labels, CE_B, c->C, c->smoothing);
    double s = 0.0;
    for (int b = 0; b < CE_B; b++)
        s += c->losses[b];
    return s / CE_B;
}

/* -log softmax(logits)[label] and the softmax, in double. */
static double ref_nll(double *probs, const float *logits, int label, int C)
{
    double mx = -INFINITY, sum = 0.0;
    for (int c = 0; c < C; c++)
        mx = fmax(mx, logits[c]);
    for (int c = 0; c < C; c++)
        sum += exp((double)logits[c] - mx);
    for (int c = 0; c < C; c++)
        probs[c] = exp((double)logits[c] - mx) / sum;
    return -((double)logits[label] - mx - log(sum));
}

/* Loss, probabilities and softmax_rows against double. */
static void check_ce_values(const float *logits, const int32_t *labels, int C, const char *what)
{
    float probs[CE_B * 5], losses[CE_B], sm[CE_B * 5];
    ck_assert_int_le(C, 5);
    float mean = crossentropy_forward(losses, probs, logits, labels, CE_B, C, 0.0f);
    softmax_rows(sm, logits, CE_B, C);
    double total = 0.0;
    for (int b = 0; b < CE_B; b++) {
        double ref_p[5];
        double want = ref_nll(ref_p, logits + b * C, labels[b], C);
        total += want;
        ck_assert_msg(fabs(losses[b] - want) <= 1e-6 + 2e-6 * want,
                      "%s: loss[%d] = %.9g, want %.9g (-log softmax in double)", what, b,
                      losses[b], want);
        double psum = 0.0;
        for (int c = 0; c < C; c++) {
            float pc = probs[b * C + c];
            ck_assert_msg(isfinite(pc) && fabs(pc - ref_p[c]) <= 1e-6,
                          "%s: probs[%d][%d] = %g, want %g",
                          what, b, c, pc, ref_p[c]);
            ck_assert(sm[b * C + c] == pc); /* inference softmax = training softmax */
            psum += sm[b * C + c];
        }
        ck_assert_msg(fabs(psum - 1.0) <= 1e-6, "%s: softmax row %d sums to %.9g", what, b, psum);
    }
    ck_assert_double_eq_tol(mean, total / CE_B, 1e-6 * fmax(1.0, total / CE_B));
}

static void check_ce_gradient(int C, const int32_t *labels)
{
    char name[32];
    snprintf(name, sizeof name, "xent C=%d", C);
    size_t n = (size_t)CE_B * C;
    float *logits = vec(n), *probs = vec(n), *losses = vec(CE_B), *dlogits = vec(n);
    fill_uniform(logits, n, 1000 + (uint64_t)C, -3, 3);
    check_ce_values(logits, labels, C, name);
    crossentropy_forward(losses, probs, logits, labels, CE_B, C, 0.0f);
    crossentropy_backward(dlogits, probs, labels, CE_B, C, 0.0f);
    ce_ctx c = {logits, probs, losses, labels, C, 0.0f};
    check_grad(name, "dlogits", logits, dlogits, n, ce_loss, &c);
    ce_loss(&c); /* probs of the unperturbed logits again */
    float *once = copy_of(dlogits, n);
    crossentropy_backward(dlogits, probs, labels, CE_B, C, 0.0f);
    check_doubled("dlogits", dlogits, once, n);
    crossentropy_backward(NULL, probs, labels, CE_B, C, 0.0f);
    free(logits); free(probs); free(losses); free(dlogits); free(once);
}

/* Label smoothing s: loss = (1 - s) nll(label) + s mean_c nll(c), checked
 * against double and by finite differences. */
START_TEST(test_crossentropy_label_smoothing)
{
    enum { C = 3 };
    const int32_t labels[CE_B] = {0, 2, 1, 1};
    const float s = 0.1f;
    size_t n = (size_t)CE_B * C;
    float *logits = vec(n), *probs = vec(n), *losses = vec(CE_B), *dlogits = vec(n);
    fill_uniform(logits, n, 1313, -3, 3);
    crossentropy_forward(losses, probs, logits, labels, CE_B, C, s);
    for (int b = 0; b < CE_B; b++) {
        double ref_p[C], mean_nll = 0.0;
        double nll = ref_nll(ref_p, logits + b * C, labels[b], C);
        for (int c = 0; c < C; c++)
            mean_nll += -log(ref_p[c]) / C;
        double want = (1.0 - s) * nll + s * mean_nll;
        ck_assert_msg(fabs(losses[b] - want) <= 1e-5 * (1.0 + want), "loss[%d] = %g, want %g", b,
                      (double)losses[b], want);
        ck_assert_msg(losses[b] > (1.0 - s) * nll, "smoothing adds a positive term");
    }
    crossentropy_backward(dlogits, probs, labels, CE_B, C, s);
    ce_ctx c = {logits, probs, losses, labels, C, s};
    check_grad("xent smoothed", "dlogits", logits, dlogits, n, ce_loss, &c);
    /* each row of the gradient still sums to 0 (both targets sum to 1) */
    for (int b = 0; b < CE_B; b++)
        ck_assert(fabs(dlogits[b * C] + dlogits[b * C + 1] + dlogits[b * C + 2]) < 1e-6);
    free(logits); free(probs); free(losses); free(dlogits);
}
END_TEST

START_TEST(test_crossentropy_gradient_c2)
{
    const int32_t labels[CE_B] = {0, 1, 1, 0};
    check_ce_gradient(2, labels);
}
END_TEST

START_TEST(test_crossentropy_gradient_c5)
{
    const int32_t labels[CE_B] = {0, 4, 2, 1};
    check_ce_gradient(5, labels);
}
END_TEST

START_TEST(test_crossentropy_stable_for_huge_logits)
{
    /* exp(1000) overflows float and double: only a max-shifted softmax and a
     * loss taken from the shifted logits stay finite and accurate. */
    const float logits[CE_B * 5] = {
        1000, 999.5f, -1000, 0, -999,      /* label 0: loss log(1 + e^-0.5) */
        -1000, 1000, 1000, 998, -1000,     /* label 2: a tie at the top */
        -1000, -999, -1000, -998.25f, -1000, /* all very negative */
        1000, -1000, 500, 999.75f, 0,      /* label 1: loss ~ 2000 */
    };
    const int32_t labels[CE_B] = {0, 2, 3, 1};
    check_ce_values(logits, labels, 5, "logits +-1000");
}
END_TEST

/* A confident, right row: the loss is about e^-margin, far below float's
 * epsilon next to 1. It must stay that small positive number (log1p of the
 * other terms), not round to 0, or every confident model's validation
 * loss reads 0 and no longer ranks them. */
START_TEST(test_crossentropy_confident_loss_positive)
{
    const float logits[CE_B * 2] = {0, 30, 25, 0, -3, 17, 40, 20};
    const int32_t labels[CE_B] = {1, 0, 1, 0};
    float probs[CE_B * 2], losses[CE_B];
    crossentropy_forward(losses, probs, logits, labels, CE_B, 2, 0.0f);
    for (int b = 0; b < CE_B; b++) {
        /* the label holds the larger logit: -log p = log1p(e^-(margin)) */
        const float *x = logits + b * 2;
        double want = log1p(exp(-fabs((double)x[0] - x[1])));
        ck_assert_msg(losses[b] > 0 && fabs(losses[b] - want) <= 1e-5 * want,
                      "row %d: loss %.9g, want %.9g", b, (double)losses[b], want);
    }
}
END_TEST

/* ------------------------------------------- masked-LM head: gather, big softmax */

typedef struct {
    float *in, *out, *r;
    const int32_t *rows;
    int M, d;
} gather_ctx;

static double gather_loss(void *p)
{
    gather_ctx *c = p;
    gather_rows_forward(c->out, c->in, c->rows, c->M, c->d);
    return gc_dot(c->out, c->r, (size_t)c->M * c->d);
}

/* Rows may repeat (their gradients add) and rows never gathered get exactly 0. */
START_TEST(test_gather_rows_gradient)
{
    enum { N = 7, D = 5, M = 4 };
    const int32_t rows[M] = {3, 0, 6, 3};
    float *in = vec(N * D), *out = vec(M * D), *r = vec(M * D), *din = vec(N * D);
    fill_uniform(in, N * D, 71, -1, 1);
    fill_uniform(r, M * D, 72, -1, 1);
    gather_ctx c = {in, out, r, rows, M, D};
    gather_loss(&c);
    for (int i = 0; i < M; i++)
        ck_assert(memcmp(out + i * D, in + rows[i] * D, D * sizeof(float)) == 0);
    gather_rows_backward(din, r, rows, M, D);
    check_grad("gather rows", "din", in, din, N * D, gather_loss, &c);
    for (int k = 0; k < D; k++) {
        ck_assert(din[1 * D + k] == 0.0f && din[2 * D + k] == 0.0f);
        ck_assert_float_eq(din[3 * D + k], r[0 * D + k] + r[3 * D + k]);
    }
    float *once = copy_of(din, N * D);
    gather_rows_backward(din, r, rows, M, D);
    check_doubled("gather din", din, once, N * D);
    gather_rows_backward(NULL, r, rows, M, D);
    free(in); free(out); free(r); free(din); free(once);
}
END_TEST

typedef struct {
    const float *logits;
    float *work, *losses;
    const int32_t *targets;
    int M, V;
} xent_ctx;

/* The in-place forward works on a copy, so the perturbed logits survive. */
static double xent_inplace_loss(void *p)
{
    xent_ctx *c = p;
    memcpy(c->work, c->logits, (size_t)c->M * c->V * sizeof(float));
    softmax_xent_inplace_forward(c->work, c->losses, NULL, c->targets, c->M, c->V);
    double s = 0.0;
    for (int i = 0; i < c->M; i++)
        s += c->losses[i];
    return s / c->M;
}

/* The vocabulary-sized softmax cross-entropy: values and argmax against
 * double (a V that fills whole vectors, one that does not, a tiny one, and
 * logits of +-1000), the in-place gradient by finite differences and against
 * crossentropy_backward. */
START_TEST(test_softmax_xent_inplace)
{
    enum { M = 4 };
    const int sizes[] = {37, 48, 3};
    const int32_t targets[M] = {0, 2, 1, 2};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int V = sizes[k];
        size_t n = (size_t)M * V;
        float *logits = vec(n), *work = vec(n), *losses = vec(M), *ref = vec(n), *probs = vec(n);
        float *ref_losses = vec(M);
        int32_t predicted[M];
        fill_uniform(logits, n, 900 + (uint64_t)V, -4, 4);
        logits[1 * V + 1] = 1000.0f; /* row 1: huge, the argmax */
        logits[1 * V + 0] = -1000.0f;
        logits[2 * V + V - 1] = 9.0f; /* row 2: a tie at the top, the first wins */
        logits[2 * V + 1] = 9.0f;
        memcpy(work, logits, n * sizeof(float));
        float mean = softmax_xent_inplace_forward(work, losses, predicted, targets, M, V);
        double total = 0.0;
        for (int i = 0; i < M; i++) {
            double ref_p[64];
            double want = ref_nll(ref_p, logits + (size_t)i * V, targets[i], V);
            total += want;
            ck_assert_msg(fabs(losses[i] - want) <= 1e-6 + 2e-6 * want,
                          "V %d: loss[%d] = %.9g, want %.9g", V, i, (double)losses[i], want);
            int best = 0;
            for (int c = 1; c < V; c++)
                best = logits[(size_t)i * V + c] > logits[(size_t)i * V + best] ? c : best;
            ck_assert_int_eq(predicted[i], best);
            for (int c = 0; c < V; c++)
                ck_assert_msg(fabs(work[(size_t)i * V + c] - ref_p[c]) <= 1e-6,
                              "V %d: p[%d][%d] = %g, want %g", V, i, c,
                              (double)work[(size_t)i * V + c], ref_p[c]);
        }
        ck_assert_int_eq(predicted[1], 1);
        ck_assert_int_eq(predicted[2], 1);
        ck_assert_double_eq_tol(mean, total / M, 1e-6 * total / M);

        /* gradient: finite differences (away from the +-1000 rows' saturation) */
        fill_uniform(logits, n, 950 + (uint64_t)V, -3, 3);
        memcpy(work, logits, n * sizeof(float));
        softmax_xent_inplace_forward(work, losses, NULL, targets, M, V);
        crossentropy_forward(ref_losses, probs, logits, targets, M, V, 0.0f);
        crossentropy_backward(ref, probs, targets, M, V, 0.0f);
        softmax_xent_inplace_backward(work, targets, M, V);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(fabs(work[i] - ref[i]) <= 1e-7, "V %d: dlogits[%zu] %g vs %g", V, i,
                          (double)work[i], (double)ref[i]);
        float *analytic = copy_of(work, n);
        xent_ctx c = {logits, work, losses, targets, M, V};
        char name[32];
        snprintf(name, sizeof name, "xent V=%d", V);
        check_grad(name, "dlogits", logits, analytic, n, xent_inplace_loss, &c);
        free(logits); free(work); free(losses); free(ref); free(probs); free(ref_losses);
        free(analytic);
    }
}
END_TEST

/* ------------------------------------------------------------ thread determinism */

enum { DB = 4, DT = 64, DD = 32, DH = 4, DOUT = 48, DV = 50, DET_BUFS = 32 };
static const int32_t det_lengths[DB] = {64, 50, 17, 1};

typedef struct {
    const char *name;
    float *data;
    size_t n;
} det_buf;

typedef struct {
    det_buf bufs[DET_BUFS];
    int count;
} det_run;

static float *det_add(det_run *run, const char *name, size_t n)
{
    ck_assert_int_lt(run->count, DET_BUFS);
    det_buf *b = &run->bufs[run->count++];
    b->name = name;
    b->data = vec(n);
    b->n = n;
    return b->data;
}

/* Every layer forward + backward at a size where the OpenMP loops split work,
 * with `threads` threads; all outputs and gradients land in run. */
static void det_run_layers(det_run *run, int threads)
{
    omp_set_num_threads(threads);
    const int N = DB * DT;
    size_t n = (size_t)N * DD, n_lin = (size_t)N * DOUT, n_probs = (size_t)DB * DH * DT * DT;
    float *x = vec(n), *q = vec(n), *k = vec(n), *v = vec(n), *g = vec(n), *g_lin = vec(n_lin);
    float *wte = vec((size_t)DV * DD), *pos = vec((size_t)DT * DD), *w = vec((size_t)DOUT * DD);
    float *bias = vec(DOUT), *lnw = vec(DD), *lnb = vec(DD);
    float *scratch = vec(attention_scratch_floats(DT, DD, DH, 4));
    int32_t *ids = malloc((size_t)N * sizeof(int32_t));
    int32_t *argmax = malloc((size_t)DB * DD * sizeof(int32_t));
    ck_assert(ids && argmax);
    fill_uniform(x, n, 1101, -1, 1);
    fill_uniform(q, n, 1102, -1, 1);
    fill_uniform(k, n, 1103, -1, 1);
    fill_uniform(v, n, 1104, -1, 1);
    fill_uniform(g, n, 1105, -1, 1);
    fill_uniform(g_lin, n_lin, 1106, -1, 1);
    fill_uniform(wte, (size_t)DV * DD, 1107, -1, 1);
    fill_uniform(w, (size_t)DOUT * DD, 1108, -1, 1);
    fill_uniform(bias, DOUT, 1109, -1, 1);
    fill_uniform(lnw, DD, 1110, 0.5f, 1.5f);
    fill_uniform(lnb, DD, 1111, -0.5f, 0.5f);
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)ac_rng_below(1112, (uint64_t)i, DV);

    positions_table_fill(pos, DT, DD);
    embedding_forward(det_add(run, "embedding out", n), ids, wte, pos, DB, DT, DD);
    embedding_backward(det_add(run, "dwte", (size_t)DV * DD), g, ids, det_lengths, DB, DT, DD);

    linear_forward(det_add(run, "linear out", n_lin), x, w, bias, N, DD, DOUT);
    linear_backward(det_add(run, "linear din", n), det_add(run, "linear dw", (size_t)DOUT * DD),
                    det_add(run, "linear dbias", DOUT), g_lin, x, w, N, DD, DOUT);

    float *ln_mean = det_add(run, "ln mean", N), *ln_rstd = det_add(run, "ln rstd", N);
    layernorm_forward(det_add(run, "ln out", n), ln_mean, ln_rstd, x, lnw, lnb, N, DD, LN_EPS);
    layernorm_backward(det_add(run, "ln din", n), det_add(run, "ln dw", DD),
                       det_add(run, "ln db", DD), g, x, lnw, ln_mean, ln_rstd, N, DD);

    float *probs = det_add(run, "attn probs", n_probs);
    float scale = 1.0f / sqrtf((float)(DD / DH));
    attention_forward(det_add(run, "attn out", n), probs, scratch, 4, q, k, v, DD, det_lengths, DB,
                      DT, DD, DH, scale);
    attention_backward(det_add(run, "attn dq", n), det_add(run, "attn dk", n),
                       det_add(run, "attn dv", n), scratch, 4, g, q, k, v, DD, probs, det_lengths, DB, DT,
                       DD, DH, scale);

    float *mask = det_add(run, "dropout mask", n);
    dropout_forward(det_add(run, "dropout out", n), mask, x, 0.3f, n, 4242);
    float *pooled = det_add(run, "pool max", (size_t)DB * DD);
    pool_forward(pooled, argmax, x, det_lengths, DB, DT, DD, AC_POOL_MAX);
    pool_forward(det_add(run, "pool mean", (size_t)DB * DD), NULL, x, det_lengths, DB, DT, DD,
                 AC_POOL_MEAN);
    pool_backward(det_add(run, "pool max din", n), g, argmax, det_lengths, DB, DT, DD, AC_POOL_MAX);

    int32_t *rows = malloc((size_t)N * sizeof(int32_t)), *predicted = malloc((size_t)N * 4);
    ck_assert(rows && predicted);
    for (int i = 0; i < N; i++)
        rows[i] = (int32_t)ac_rng_below(1113, (uint64_t)i, (uint64_t)N);
    gather_rows_forward(det_add(run, "gather out", n), x, rows, N, DD);
    gather_rows_backward(det_add(run, "gather din", n), g, rows, N, DD);
    float *xent = det_add(run, "xent probs", n_lin);
    memcpy(xent, g_lin, n_lin * sizeof(float));
    for (int i = 0; i < N; i++)
        rows[i] %= DOUT; /* targets */
    float *xent_loss = det_add(run, "xent loss", 1);
    xent_loss[0] = softmax_xent_inplace_forward(xent, det_add(run, "xent losses", N), predicted,
                                                rows, N, DOUT);
    softmax_xent_inplace_backward(xent, rows, N, DOUT);
    free(rows);
    free(predicted);

    free(x); free(q); free(k); free(v); free(g); free(g_lin); free(wte); free(pos); free(w);
    free(bias); free(lnw); free(lnb); free(scratch); free(ids); free(argmax);
}

static void det_free(det_run *run)
{
    for (int i = 0; i < run->count; i++)
        free(run->bufs[i].data);
}

/* A text's wide buckets are the set of its n-grams' buckets, ascending and
 * distinct, for texts that are short or long, all alike, ascending,
 * descending or random (the sort's easy and hard inputs). Reference: a
 * presence table over the buckets. */
START_TEST(test_wide_buckets_are_the_sorted_set)
{
    enum { MAX_LEN = 3000, ORDER = 3 };
    int32_t *ids = malloc(sizeof(int32_t) * MAX_LEN), *out = malloc(sizeof(int32_t) * MAX_LEN * ORDER);
    const int lengths[] = {0, 1, 2, 5, 24, 25, 100, 1000, MAX_LEN};
    for (int shape = 0; shape < 4; shape++)
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
            for (int n_buckets = 7; n_buckets <= 1 << 20; n_buckets *= 149) {
                const int len = lengths[li];
                for (int t = 0; t < len; t++)
                    ids[t] = shape == 0   ? 5
                             : shape == 1 ? t
                             : shape == 2 ? len - t
                                          : (int32_t)ac_rng_below(3, (uint64_t)t, 50);
                unsigned char *present = calloc((size_t)n_buckets, 1);
                int want = 0;
                for (int n = 1; n <= ORDER; n++)
                    for (int t = 0; t + n <= len; t++) {
                        uint32_t b = wide_bucket(ids + t, n, n_buckets);
                        want += !present[b];
                        present[b] = 1;
                    }
                const int got = wide_buckets_of_text(out, ids, len, ORDER, n_buckets);
                ck_assert_int_eq(got, want);
                for (int i = 0; i < got; i++) {
                    ck_assert(out[i] >= 0 && out[i] < n_buckets && present[out[i]]);
                    if (i > 0)
                        ck_assert_int_lt(out[i - 1], out[i]);
                }
                free(present);
            }
    free(ids);
    free(out);
}
END_TEST

START_TEST(test_thread_count_does_not_change_results)
{
    int saved = omp_get_max_threads();
    det_run ref = {0};
    det_run_layers(&ref, 1);
    const int counts[] = {2, 4};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        det_run other = {0};
        det_run_layers(&other, counts[c]);
        ck_assert_int_eq(other.count, ref.count);
        for (int i = 0; i < ref.count; i++)
            ck_assert_msg(memcmp(ref.bufs[i].data, other.bufs[i].data,
                                 ref.bufs[i].n * sizeof(float)) == 0,
                          "%s differs between 1 and %d threads", ref.bufs[i].name, counts[c]);
        det_free(&other);
    }
    det_free(&ref);
    omp_set_num_threads(saved);
}
END_TEST

/* ------------------------------------------------------------ suite */

int main(void)
{
    Suite *s = suite_create("layers");
    TCase *tc = tcase_create("layers");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_positions_table_matches_formula);
    tcase_add_test(tc, test_embedding_gradient);
    tcase_add_test(tc, test_linear_gradient);
    tcase_add_test(tc, test_layernorm_gradient);
    tcase_add_test(tc, test_residual_gradient);
    tcase_add_test(tc, test_relu_gradient);
    tcase_add_test(tc, test_dropout_gradient_and_mask);
    tcase_add_test(tc, test_attention_gradient_with_padding);
    tcase_add_test(tc, test_attention_golden_example);
    tcase_add_test(tc, test_attention_packed_against_reference);
    tcase_add_test(tc, test_ffn_gradient);
    tcase_add_test(tc, test_pool_max_gradient);
    tcase_add_test(tc, test_pool_mean_gradient);
    tcase_add_test(tc, test_pool_cls_gradient);
    tcase_add_test(tc, test_crossentropy_gradient_c2);
    tcase_add_test(tc, test_crossentropy_label_smoothing);
    tcase_add_test(tc, test_ngram_hash_by_hand);
    tcase_add_test(tc, test_positions_and_ngram_gradient);
    tcase_add_test(tc, test_wide_hash_and_sets);
    tcase_add_test(tc, test_wide_gradient);
    tcase_add_test(tc, test_wide_scale);
    tcase_add_test(tc, test_wide_nb_init);
    tcase_add_test(tc, test_crossentropy_gradient_c5);
    tcase_add_test(tc, test_gather_rows_gradient);
    tcase_add_test(tc, test_softmax_xent_inplace);
    tcase_add_test(tc, test_crossentropy_stable_for_huge_logits);
    tcase_add_test(tc, test_crossentropy_confident_loss_positive);
    tcase_add_test(tc, test_thread_count_does_not_change_results);
    tcase_add_test(tc, test_wide_buckets_are_the_sorted_set);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failures = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
