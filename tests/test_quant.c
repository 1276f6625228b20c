/* Quantized models: int8 rows, the pruned sparse wide table against the
 * dense one, a model trained here and quantized (round trip, agreement with
 * FP32, the same bits at 1 and 2 threads and lazy or not), and the
 * rejection of corrupt or truncated quantized files and configs. */
#include <check.h>
#include <ftw.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnctl/attribution.h"
#include "attnctl/infer.h"
#include "attnctl/io.h"
#include "attnctl/metrics.h"
#include "attnctl/nn.h"
#include "attnctl/quant.h"
#include "attnctl/quant_io.h"
#include "attnctl/rng.h"
#include "attnctl/train.h"
#include "../src/nn/simd.h"

#include "test_util.h"

#define SAMPLE_TRAIN "data/sample_train.csv"
#define SAMPLE_TEST "data/sample_test.csv"

/* ------------------------------------------------------------------ helpers */

static void remove_dir(char *d)
{
    rm_rf(d);
    free(d);
}

static void read_csv(ac_rawdata *raw, const char *path)
{
    ac_read_options ro = {.need_label = 1};
    ac_err err = {{0}};
    ck_assert_msg(ac_rawdata_read(raw, path, &ro, &err) == 0, "%s: %s", path, err.msg);
}

/* One trained model (the sample reviews, a wide path, learned positions)
 * in a scratch directory, shared by the tests of this file. */
static char *trained_dir(void)
{
    static char *dir = NULL;
    if (dir)
        return dir;
    char *root = test_temp_dir("quant");
    dir = test_path(root, "fp32");
    free(root);
    ac_config cfg;
    ac_config_defaults(&cfg);
    cfg.model.max_len = 64;
    cfg.model.d_model = 16;
    cfg.model.n_heads = 2;
    cfg.model.d_ff = 32;
    cfg.model.n_layers = 1;
    cfg.model.positions = AC_POS_LEARNED;
    cfg.model.ngram_order = 2;
    cfg.model.ngram_buckets = 101;
    cfg.model.wide_order = 2;
    cfg.model.wide_buckets = 4096;
    cfg.model.wide_norm = 0.5f;
    cfg.training.epochs = 2;
    cfg.training.batch_size = 8;
    cfg.training.micro_batch = 8;
    cfg.training.vocab_max = 300;
    cfg.training.min_count = 1;
    cfg.training.members = 1;
    cfg.training.ema = 0.0f;
    cfg.training.seed = 3;
    ac_rawdata raw;
    read_csv(&raw, SAMPLE_TRAIN);
    ac_train_options o = {.config = &cfg, .train = &raw, .out_dir = dir};
    ac_train_result res;
    ac_err err = {{0}};
    ck_assert_msg(ac_train(&o, &res, &err) == 0, "%s", err.msg);
    ac_rawdata_free(&raw);
    ac_config_free(&cfg);
    return dir;
}

static void quantize_ok(const char *src, const char *dst, int rows)
{
    ac_err err = {{0}};
    int kept = -1;
    ck_assert_msg(ac_quantize_model_dir(src, dst, rows, AC_QUANT_DEFAULT_WIDE_GROUP,
                                        AC_QUANT_DEFAULT_WIDE_BITS, NULL, &kept, &err) == 0,
                  "%s", err.msg);
    ck_assert_int_ge(kept, 0);
    ck_assert_int_le(kept, rows);
}

/* Class probabilities [n, C] of the rows of raw under the model in dir. */
static float *probs_of(const char *dir, int lazy, const ac_rawdata *raw, int threads, int *C)
{
    ac_model_dir md;
    ac_err err = {{0}};
    int rc = lazy ? ac_model_dir_load_inference(&md, dir, &err) : ac_model_dir_load(&md, dir, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ac_corpus corpus;
    ac_batch_plan plan;
    enum { BATCH = 16 };
    const int T = md.model.cfg.max_len;
    ck_assert_int_eq(ac_corpus_encode(&corpus, raw, &md.config.tokenizer, &md.vocab, T, &err), 0);
    ck_assert_int_eq(ac_batch_plan_make(&plan, &corpus, NULL, corpus.n, BATCH, 0, 0, &err), 0);
    ck_assert_int_eq(ac_model_alloc_activations(&md.model, BATCH, T, &err), 0);
    *C = md.model.cfg.n_classes;
    float *out = calloc((size_t)corpus.n * (size_t)*C, sizeof *out);
    int32_t *ids = calloc((size_t)BATCH * T, sizeof *ids), lengths[BATCH], labels[BATCH];
    int64_t rows[BATCH];
    int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    for (int64_t b = 0; b < plan.n_batches; b++) {
        ac_batch batch = {.ids = ids, .lengths = lengths, .labels = labels, .rows = rows};
        ac_batch_fill(&batch, &corpus, &plan, b);
        ac_model_forward(&md.model, batch.ids, batch.lengths, NULL, batch.B, batch.T, 0, 0);
        for (int i = 0; i < batch.B; i++)
            memcpy(out + rows[i] * *C, md.model.act.probs_out + (size_t)i * *C,
                   (size_t)*C * sizeof *out);
    }
    omp_set_num_threads(before);
    free(ids);
    ac_batch_plan_free(&plan);
    ac_corpus_free(&corpus);
    ac_model_dir_free(&md);
    return out;
}

/* ------------------------------------------------------------- int8 rows */

START_TEST(test_rows_round_trip)
{
    enum { R = 5, D = 33 };
    float w[R * D], back[R * D], scale[R];
    int8_t q[R * D];
    for (int i = 0; i < R * D; i++)
        w[i] = ac_rng_normal(11, (uint64_t)i) * (float)(1 + i / D);
    for (int i = 0; i < D; i++)
        w[2 * D + i] = 0.0f; /* an all-zero row */
    ac_quant_rows_i8(q, scale, w, R, D);
    ac_dequant_rows_i8(back, q, scale, R, D);
    ck_assert_float_eq(scale[2], 0.0f);
    for (int r = 0; r < R; r++) {
        float max = 0.0f;
        for (int i = 0; i < D; i++)
            max = fmaxf(max, fabsf(w[r * D + i]));
        ck_assert_float_eq_tol(scale[r], max / 127.0f, 1e-7f);
        for (int i = 0; i < D; i++) {
            ck_assert_int_le(abs(q[r * D + i]), 127);
            ck_assert_msg(fabsf(back[r * D + i] - w[r * D + i]) <= 0.5f * scale[r] + 1e-7f,
                          "row %d col %d: %g back as %g", r, i, (double)w[r * D + i],
                          (double)back[r * D + i]);
        }
    }
}
END_TEST

/* ------------------------------------------------ b-bit values, scale codes */

START_TEST(test_scale_codes)
{
    ck_assert_float_eq(ac_scale_of_code(0), 0.0f);
    ck_assert_float_eq(ac_scale_of_code(192), 1.0f);
    ck_assert_float_eq(ac_scale_of_code(200), 2.0f);
    ck_assert_float_eq(ac_scale_of_code(184), 0.5f);
    ck_assert_float_eq(ac_scale_of_code(191), 0.5f * 1.8340080864f);
    for (int e = 2; e < 256; e++) /* ascending: 2^(1/8) apart */
        ck_assert_float_eq_tol(ac_scale_of_code((uint8_t)e) / ac_scale_of_code((uint8_t)(e - 1)),
                               1.0905077f, 1e-6f);
    ck_assert_int_eq(ac_scale_code(0.0f, 4), 0);
    for (int bits = 2; bits <= 8; bits++)
        for (int i = 0; i < 200; i++) {
            const float m = expf(ac_rng_normal(31, (uint64_t)i) * 6.0f);
            const uint8_t e = ac_scale_code(m, bits);
            if (m / (float)ac_qb_max(bits) > ac_scale_of_code(255)) { /* past the codes */
                ck_assert_int_eq(e, 255);
                continue;
            }
            /* the smallest code whose scale keeps m within the largest magnitude */
            ck_assert_msg(ac_scale_of_code(e) * (float)ac_qb_max(bits) >= m * (1.0f - 1e-6f),
                          "bits %d, %g: code %d too small", bits, (double)m, e);
            ck_assert_msg(e == 1 || ac_scale_of_code((uint8_t)(e - 1)) < m / (float)ac_qb_max(bits),
                          "bits %d, %g: code %d not the smallest", bits, (double)m, e);
        }
    ck_assert_int_eq(ac_scale_code(1e30f, 4), 255);
    ck_assert_int_eq(ac_scale_code(1e-30f, 4), 1);
}
END_TEST

START_TEST(test_qb_rows_round_trip)
{
    enum { R = 4, D = 13 };
    float w[R * D], back[R * D];
    uint8_t packed[R * D], code[R];
    for (int bits = 2; bits <= 8; bits++) {
        for (int i = 0; i < R * D; i++)
            w[i] = ac_rng_normal(12, (uint64_t)i) * (float)(1 + i / D);
        for (int i = 0; i < D; i++)
            w[D + i] = 0.0f; /* an all-zero row */
        w[3 * D + 5] = -4.0f * fabsf(w[3 * D]) - 1.0f; /* the row's extreme, negative */
        ac_quant_rows_qb(packed, code, w, R, D, bits);
        ac_dequant_rows_qb(back, packed, code, R, D, bits);
        ck_assert_int_eq(code[1], 0);
        for (int r = 0; r < R; r++) {
            const float s = ac_scale_of_code(code[r]);
            for (int i = 0; i < D; i++) {
                const int v = ac_qb_get(packed + r * ac_qb_bytes(D, bits), (size_t)i, bits);
                ck_assert_int_le(abs(v), ac_qb_max(bits));
                ck_assert_msg(fabsf(back[r * D + i] - w[r * D + i]) <= 0.5f * s * 1.0001f,
                              "bits %d row %d col %d: %g back as %g", bits, r, i,
                              (double)w[r * D + i], (double)back[r * D + i]);
            }
        }
    }
    /* the packing itself: 5-bit values -15..15 in order, little-endian bits */
    uint8_t p[8] = {0};
    const float vals[] = {1, -1, 15, -15, 0, 7, -8, 3};
    uint8_t c;
    ac_quant_rows_qb(p, &c, vals, 1, 8, 5);
    ck_assert_float_eq(ac_scale_of_code(c), 1.0f);
    const int want[] = {1, -1, 15, -15, 0, 7, -8, 3};
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(ac_qb_get(p, (size_t)i, 5), want[i]);
    ck_assert_int_eq(p[0], 0x01 | (0x1f << 5 & 0xff)); /* 1, then -1's low three bits */
}
END_TEST

/* ------------------------------------------------------------- the wide table */

START_TEST(test_select_rows)
{
    /* two classes: ranked by |w0 - w1|, not by the size of the weights */
    const float table[] = {5, 5,  0, 0,  1, -1,  -3, 0,  2, 2.5f,  0, 3};
    int32_t ids[6];
    ac_err err = {{0}};
    ck_assert_int_eq(ac_wide_select_rows(ids, table, 6, 2, 2, NULL, NULL, &err), 2);
    ck_assert_int_eq(ids[0], 3); /* |-3| */
    ck_assert_int_eq(ids[1], 5); /* |-3|: tie, both kept; ascending ids */
    ck_assert_int_eq(ac_wide_select_rows(ids, table, 6, 2, 100, NULL, NULL, &err), 4); /* zero rows never */
    const int32_t want[] = {2, 3, 4, 5};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(ids[i], want[i]);
    /* rows flagged first come first; uses multiply the weights */
    const uint8_t first[6] = {0, 0, 0, 0, 1, 0};
    ck_assert_int_eq(ac_wide_select_rows(ids, table, 6, 2, 2, first, NULL, &err), 2);
    ck_assert_int_eq(ids[0], 3);
    ck_assert_int_eq(ids[1], 4);
    const uint32_t uses[6] = {0, 0, 9, 0, 0, 0}; /* row 2: 2 x 10 = 20 */
    ck_assert_int_eq(ac_wide_select_rows(ids, table, 6, 2, 1, NULL, uses, &err), 1);
    ck_assert_int_eq(ids[0], 2);
    /* three classes: a row that adds the same to every class weighs nothing */
    const float t3[] = {4, 4, 4,  1, 0, 0,  0, 0, 0};
    ck_assert_int_eq(ac_wide_select_rows(ids, t3, 3, 3, 3, NULL, NULL, &err), 1);
    ck_assert_int_eq(ids[0], 1);
}
END_TEST

/* The sparse forward over the kept rows equals the dense forward over the
 * table they stand for, in the logit differences (what the softmax sees). */
static void check_sparse_matches_dense(int C, int group, int bits, int rows)
{
    enum { B = 3, T = 20, ORDER = 2 };
    const int keep = rows * 2 / 5;
    float *table = calloc((size_t)rows * C, sizeof *table);
    for (int i = 0; i < rows * C; i++)
        table[i] = ac_rng_normal(5, (uint64_t)i);
    int32_t *ids = malloc((size_t)keep * sizeof *ids);
    ac_err err = {{0}};
    int n = ac_wide_select_rows(ids, table, rows, C, keep, NULL, NULL, &err);
    ck_assert_int_eq(n, keep);
    const int W = ac_wide_stored_width(C);
    uint8_t *values = calloc(ac_qb_bytes((size_t)keep * W, bits), 1), *codes = malloc((size_t)keep);
    uint8_t *present = malloc((size_t)rows / 8 + 1);
    int32_t *rank = malloc(((size_t)rows / AC_WIDE_RANK_BLOCK + 2) * sizeof *rank);
    ac_wide_quantize(values, codes, table, ids, n, C, group, bits);
    ac_wide_presence(present, rank, rows, ids, n);
    ck_assert_int_eq(rank[0], 0);
    ck_assert_int_eq(rank[(rows + AC_WIDE_RANK_BLOCK - 1) / AC_WIDE_RANK_BLOCK], n);
    ac_wide_sparse w = {.n = n, .n_buckets = rows, .n_classes = C, .width = W, .group = group,
                        .bits = bits, .present = present, .rank = rank, .values = values,
                        .codes = codes};
    float *dense = calloc((size_t)rows * C, sizeof *dense);
    ac_wide_sparse_to_dense(dense, &w);
    /* every kept row stands for its original up to a constant, within the rounding */
    for (int i = 0; i < n; i++)
        for (int c = 1; c < C; c++) {
            float orig = table[ids[i] * C + c] - table[ids[i] * C];
            float got = dense[ids[i] * C + c] - dense[ids[i] * C];
            ck_assert_float_eq_tol(got, orig,
                                   ac_scale_of_code(codes[i / group]) * (C == 2 ? 0.51f : 1.01f));
        }
    int32_t tok[B * T], lengths[B] = {T, 7, 1}, buckets[B * T * ORDER], counts[B];
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)(ac_rng_uniform(9, (uint64_t)i) * 50);
    wide_buckets_compute(buckets, counts, tok, lengths, B, T, ORDER, rows);
    float a[B * 3] = {0}, b[B * 3] = {0};
    wide_forward(a, buckets, counts, dense, B, T, ORDER, C, 0.5f);
    ac_wide_sparse_forward(b, &w, buckets, counts, B, T, ORDER, 0.5f);
    for (int i = 0; i < B; i++)
        for (int c = 1; c < C; c++)
            ck_assert_float_eq_tol(b[i * C + c] - b[i * C], a[i * C + c] - a[i * C], 1e-5f);
    /* lookups: every kept id found at its index, others not */
    for (int i = 0, k = 0; i < rows; i++) {
        const int want = k < n && ids[k] == i ? k++ : -1;
        ck_assert_int_eq(ac_wide_sparse_find(&w, i), want);
    }
    ck_assert_int_eq(ac_wide_sparse_find(&w, rows), -1);
    ck_assert_int_eq(ac_wide_sparse_find(&w, -1), -1);
    free(table);
    free(dense);
    free(ids);
    free(values);
    free(codes);
    free(present);
    free(rank);
}

/* Tables of several rank blocks, the last one partial (and not a whole byte). */
START_TEST(test_sparse_two_classes) { check_sparse_matches_dense(2, 16, 5, 1803); }
END_TEST

START_TEST(test_sparse_three_classes) { check_sparse_matches_dense(3, 1, 4, 300); }
END_TEST

START_TEST(test_sparse_eight_bits) { check_sparse_matches_dense(2, 3, 8, 1030); }
END_TEST

/* ------------------------------------------------------- int8 linear layers */

/* The layer on N rows with the given kernel and threads. */
static void qlinear_run(float *out, const float *in, const ac_qlinear *l, const float *bias, int N,
                        ac_qkernel k, int threads)
{
    int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    ac_qlinear_forward(out, in, l, bias, N, k);
    omp_set_num_threads(before);
}

/* Shapes that fill whole blocks and shapes that do not (outputs not a
 * multiple of 16 nor of 64, inputs not a multiple of 4, rows not of 4 or 16). */
static void check_qlinear(int N, int in, int outd)
{
    float *w = malloc(sizeof(float) * (size_t)outd * in), *x = malloc(sizeof(float) * (size_t)N * in);
    float *bias = malloc(sizeof(float) * (size_t)outd), *scale = malloc(sizeof(float) * (size_t)outd);
    float *wd = malloc(sizeof(float) * (size_t)outd * in);
    int8_t *q = malloc((size_t)outd * in);
    for (int i = 0; i < outd * in; i++)
        w[i] = 0.1f * ac_rng_normal(21, (uint64_t)i);
    for (int i = 0; i < N * in; i++)
        x[i] = ac_rng_normal(22, (uint64_t)i);
    for (int i = 0; i < in; i++)
        x[i] = 0.0f; /* a zero row gives the bias */
    for (int o = 0; o < outd; o++)
        bias[o] = 0.5f * ac_rng_normal(23, (uint64_t)o);
    ac_quant_rows_i8(q, scale, w, (size_t)outd, (size_t)in);
    ac_dequant_rows_i8(wd, q, scale, (size_t)outd, (size_t)in);
    ac_qlinear l;
    ck_assert_int_eq(ac_qlinear_init(&l, q, scale, outd, in), 0);
    size_t n_out = (size_t)N * outd;
    float *c1 = malloc(sizeof(float) * n_out), *c2 = malloc(sizeof(float) * n_out),
          *v2 = malloc(sizeof(float) * n_out);
    qlinear_run(c1, x, &l, bias, N, AC_QKERNEL_C, 1);
    qlinear_run(c2, x, &l, bias, N, AC_QKERNEL_C, 2);
    ck_assert_int_eq(memcmp(c1, c2, sizeof(float) * n_out), 0);
    if (ac_qkernel_available(AC_QKERNEL_VNNI)) {
        qlinear_run(v2, x, &l, bias, N, AC_QKERNEL_VNNI, 2);
        ck_assert_int_eq(memcmp(c1, v2, sizeof(float) * n_out), 0); /* the same integer sums */
    } else {
        printf("SKIP: no AVX512-VNNI here: the VNNI kernel is not compared\n");
    }
    /* against the F32 layer on the dequantized weights: within the input's rounding */
    for (int r = 0; r < N; r++) {
        float xmax = 0.0f;
        for (int k = 0; k < in; k++)
            xmax = fmaxf(xmax, fabsf(x[r * in + k]));
        for (int o = 0; o < outd; o++) {
            double ref = bias[o], bound = 0.0;
            for (int k = 0; k < in; k++) {
                ref += (double)x[r * in + k] * wd[o * in + k];
                bound += fabs(wd[o * in + k]);
            }
            bound = bound * 0.5 * xmax / 127.0 + 1e-5;
            ck_assert_msg(fabs(c1[r * outd + o] - ref) <= bound, "row %d out %d: %g, F32 %g", r,
                          o, (double)c1[r * outd + o], ref);
            if (r == 0)
                ck_assert_float_eq(c1[o], bias[o]);
        }
    }
    /* fused with a ReLU: relu_forward of the plain layer's output, bit for
     * bit, with either kernel (the bias makes both signs) */
    float *relu = malloc(sizeof(float) * n_out);
    relu_forward(v2, c1, n_out);
    const ac_qkernel kernels[] = {AC_QKERNEL_C, AC_QKERNEL_VNNI};
    for (int k = 0; k < 2; k++) {
        if (!ac_qkernel_available(kernels[k]))
            continue;
        ac_qlinear_relu_forward(relu, x, &l, bias, N, kernels[k]);
        ck_assert_int_eq(memcmp(relu, v2, sizeof(float) * n_out), 0);
    }
    /* a row whose largest value is so small that 127 / max overflows is a
     * zero row (0 x infinity would be NaN, and NaN to int undefined) */
    for (int k = 0; k < in; k++)
        x[in + k] = k == 0 ? 1e-38f : 0.0f;
    for (int k = 0; k < 2; k++) {
        if (!ac_qkernel_available(kernels[k]))
            continue;
        qlinear_run(c1, x, &l, bias, 2, kernels[k], 1);
        for (int o = 0; o < outd; o++)
            ck_assert_float_eq(c1[outd + o], bias[o]);
    }
    /* a row that is not finite gives NaN (a broken model stays visible),
     * and the ReLU's 0 as relu_forward does */
    x[in] = NAN;
    qlinear_run(c1, x, &l, NULL, 2, AC_QKERNEL_AUTO, 1);
    ck_assert(isnan(c1[outd]));
    ac_qlinear_relu_forward(relu, x, &l, NULL, 2, AC_QKERNEL_AUTO);
    for (int o = 0; o < outd; o++)
        ck_assert_float_eq(relu[outd + o], 0.0f);
    free(relu);
    ac_qlinear_free(&l);
    free(w);
    free(x);
    free(bias);
    free(scale);
    free(wd);
    free(q);
    free(c1);
    free(c2);
    free(v2);
}

START_TEST(test_qlinear)
{
    check_qlinear(37, 64, 192);
    check_qlinear(5, 30, 21);
    check_qlinear(20, 256, 64);
    ck_assert_str_eq(ac_qkernel_name(AC_QKERNEL_C), "c");
    ac_qlinear l;
    int8_t q[4] = {0};
    float sc[1] = {1};
    ck_assert_int_ne(ac_qlinear_init(&l, q, sc, 1, AC_QLINEAR_MAX_IN + 1), 0);
}
END_TEST

/* The softmax exponential of quantized models: within 3e-6 (relative) of
 * exp2 over the whole range it serves, and of expf within 5e-6 where the
 * argument is x log2 e; below -125 it is 2^-125 (within 3e-6), never zero. */
START_TEST(test_exp2_approx)
{
    double worst = 0.0, worst_e = 0.0;
    for (int i = 0; i + VF_LANES <= 125 * 4096 + 1; i += VF_LANES) { /* y from 0 to -125 */
        vf16 y;
        for (int k = 0; k < VF_LANES; k++)
            y[k] = -(float)(i + k) / 4096.0f;
        vf16 e = vf_exp2_nonpositive_approx(y);
        for (int k = 0; k < VF_LANES; k++) {
            double rel = fabs((double)e[k] / exp2((double)y[k]) - 1.0);
            worst = rel > worst ? rel : worst;
        }
    }
    ck_assert_msg(worst < 3e-6, "relative error %g", worst);
    for (int i = 0; i <= 20 * 4096; i += VF_LANES) {
        vf16 x;
        for (int k = 0; k < VF_LANES; k++)
            x[k] = -(float)(i + k) / 4096.0f;
        vf16 e = vf_exp2_nonpositive_approx(x * 1.44269504088896341f);
        for (int k = 0; k < VF_LANES; k++) {
            double rel = fabs((double)e[k] / (double)expf(x[k]) - 1.0);
            worst_e = rel > worst_e ? rel : worst_e;
        }
    }
    ck_assert_msg(worst_e < 5e-6, "relative error against expf %g", worst_e);
    vf16 e = vf_exp2_nonpositive_approx(vf_splat(-1000.0f));
    for (int k = 0; k < VF_LANES; k++)
        ck_assert_float_eq_tol(e[k], 0x1p-125f, 3e-6f * 0x1p-125f);
}
END_TEST

/* LayerNorm with sums in lanes (quantized models): within 1e-5 of
 * layernorm_forward, its mean and 1 / std as well; the same bits at 1 and 2
 * threads; a d that is not a multiple of 16 gives layernorm_forward's bits. */
START_TEST(test_layernorm_lanes)
{
    enum { N = 300 };
    const int dims[2] = {64, 24};
    for (int di = 0; di < 2; di++) {
        const int d = dims[di];
        float *x = malloc(sizeof(float) * N * d), *w = malloc(sizeof(float) * d),
              *b = malloc(sizeof(float) * d), *ref = malloc(sizeof(float) * N * d),
              *a1 = malloc(sizeof(float) * N * d), *a2 = malloc(sizeof(float) * N * d);
        float mr[N], sr[N], m1[N], s1[N], m2[N], s2[N];
        for (int i = 0; i < N * d; i++) /* rows with a large mean, as residual sums have */
            x[i] = 3.0f + 2.0f * ac_rng_normal(5, (uint64_t)i);
        for (int i = 0; i < d; i++) {
            w[i] = 1.0f + 0.1f * ac_rng_normal(6, (uint64_t)i);
            b[i] = 0.1f * ac_rng_normal(7, (uint64_t)i);
        }
        layernorm_forward(ref, mr, sr, x, w, b, N, d, 1e-6f);
        int before = omp_get_max_threads();
        omp_set_num_threads(1);
        layernorm_forward_lanes(a1, m1, s1, x, w, b, N, d, 1e-6f);
        omp_set_num_threads(2);
        layernorm_forward_lanes(a2, m2, s2, x, w, b, N, d, 1e-6f);
        omp_set_num_threads(before);
        ck_assert_int_eq(memcmp(a1, a2, sizeof(float) * N * d), 0);
        for (int i = 0; i < N * d; i++)
            ck_assert_float_eq_tol(a1[i], ref[i], 1e-5f);
        for (int n = 0; n < N; n++) {
            ck_assert_float_eq_tol(m1[n], mr[n], 1e-5f);
            ck_assert_float_eq_tol(s1[n], sr[n], 1e-5f * sr[n]);
        }
        if (d % 16 != 0)
            ck_assert_int_eq(memcmp(a1, ref, sizeof(float) * N * d), 0);
        free(x);
        free(w);
        free(b);
        free(ref);
        free(a1);
        free(a2);
    }
}
END_TEST

/* Attention with int8 scores: the C and VNNI kernels give the same bits,
 * with or without the maps kept, at 1 and 2 threads; close to the F32
 * attention; the maps are probabilities. */
static void attention_int8_run(float *out, float *probs, const float *qkv, const int32_t *lengths,
                               int B, int T, int d, int H, int vnni, int threads)
{
    const int slots = 2;
    size_t n = attention_scratch_floats(T, d, H, slots);
    float *scratch = malloc(n * sizeof *scratch);
    int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    attention_forward_int8(out, probs, scratch, slots, qkv, qkv + d, qkv + 2 * d, 3 * d, lengths,
                           B, T, d, H, 0.25f, vnni);
    omp_set_num_threads(before);
    free(scratch);
}

START_TEST(test_attention_int8)
{
    enum { B = 2, T = 37, D = 32, H = 2 };
    const int32_t lengths[B] = {T, 20};
    float *qkv = malloc(sizeof(float) * B * T * 3 * D);
    for (int i = 0; i < B * T * 3 * D; i++)
        qkv[i] = ac_rng_normal(31, (uint64_t)i);
    const size_t n_out = (size_t)B * T * D, n_probs = (size_t)B * H * T * T;
    float *a = malloc(sizeof(float) * n_out), *b = malloc(sizeof(float) * n_out),
          *ref = malloc(sizeof(float) * n_out), *pa = malloc(sizeof(float) * n_probs),
          *pb = malloc(sizeof(float) * n_probs);
    attention_int8_run(a, NULL, qkv, lengths, B, T, D, H, 0, 1);
    attention_int8_run(b, NULL, qkv, lengths, B, T, D, H, 0, 2);
    ck_assert_int_eq(memcmp(a, b, sizeof(float) * n_out), 0);
    if (ac_qkernel_available(AC_QKERNEL_VNNI)) {
        attention_int8_run(b, NULL, qkv, lengths, B, T, D, H, 1, 2);
        ck_assert_int_eq(memcmp(a, b, sizeof(float) * n_out), 0);
        attention_int8_run(b, pb, qkv, lengths, B, T, D, H, 1, 1);
    } else {
        attention_int8_run(b, pb, qkv, lengths, B, T, D, H, 0, 1);
    }
    attention_int8_run(ref, pa, qkv, lengths, B, T, D, H, 0, 1);
    ck_assert_int_eq(memcmp(pa, pb, sizeof(float) * n_probs), 0);
    if (ac_qkernel_available(AC_QKERNEL_AMX)) {
        /* the values' sum in bf16 on AMX tiles: the same bits at 1 and 2
         * threads, within bf16 rounding of the integer kernels */
        float *x1 = malloc(sizeof(float) * n_out), *x2 = malloc(sizeof(float) * n_out);
        attention_int8_run(x1, NULL, qkv, lengths, B, T, D, H, 2, 1);
        attention_int8_run(x2, NULL, qkv, lengths, B, T, D, H, 2, 2);
        ck_assert_int_eq(memcmp(x1, x2, sizeof(float) * n_out), 0);
        for (size_t i = 0; i < n_out; i++)
            ck_assert_msg(fabsf(x1[i] - a[i]) < 0.01f, "%zu: AMX %g, VNNI %g", i, (double)x1[i],
                          (double)a[i]);
        free(x1);
        free(x2);
    }
    for (size_t i = 0; i < n_out; i++) /* normalised before or after the sum */
        ck_assert_float_eq_tol(a[i], ref[i], 1e-5f);
    for (int bh = 0; bh < B * H; bh++)
        for (int t = 0; t < lengths[bh / H]; t++) {
            double sum = 0;
            for (int s2 = 0; s2 < T; s2++)
                sum += pa[((size_t)bh * T + t) * T + s2];
            ck_assert_double_eq_tol(sum, 1.0, 1e-5);
        }
    /* against the F32 attention */
    size_t n = attention_scratch_floats(T, D, H, 1);
    float *scratch = malloc(n * sizeof *scratch);
    attention_forward(ref, NULL, scratch, 1, qkv, qkv + D, qkv + 2 * D, 3 * D, lengths, B, T, D, H,
                      0.25f);
    for (size_t i = 0; i < n_out; i++)
        ck_assert_msg(fabsf(a[i] - ref[i]) < 0.05f, "%zu: %g, F32 %g", i, (double)a[i],
                      (double)ref[i]);
    free(scratch);
    free(qkv);
    free(a);
    free(b);
    free(ref);
    free(pa);
    free(pb);
}
END_TEST

/* The AMX kernel for heads of 32 values (two tiles of sums), of 8 (padded
 * to 16) and of 64, with lengths across 32-key chunks and 16-row blocks:
 * within bf16 rounding of the VNNI kernel, the same bits at 1 and 2 threads. */
START_TEST(test_attention_int8_amx_shapes)
{
    if (!ac_qkernel_available(AC_QKERNEL_AMX))
        return;
    enum { B = 3, T = 70, D = 64 };
    const int32_t lengths[B] = {T, 33, 1};
    const int heads[] = {1, 2, 8};
    float *qkv = malloc(sizeof(float) * B * T * 3 * D);
    for (int i = 0; i < B * T * 3 * D; i++)
        qkv[i] = ac_rng_normal(11, (uint64_t)i);
    const size_t n_out = (size_t)B * T * D;
    float *a = malloc(sizeof(float) * n_out), *x1 = malloc(sizeof(float) * n_out),
          *x2 = malloc(sizeof(float) * n_out);
    for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++) {
        const int H = heads[h];
        attention_int8_run(a, NULL, qkv, lengths, B, T, D, H, 1, 1);
        attention_int8_run(x1, NULL, qkv, lengths, B, T, D, H, 2, 1);
        attention_int8_run(x2, NULL, qkv, lengths, B, T, D, H, 2, 2);
        ck_assert_int_eq(memcmp(x1, x2, sizeof(float) * n_out), 0);
        for (size_t i = 0; i < n_out; i++)
            ck_assert_msg(fabsf(x1[i] - a[i]) < 0.01f, "H %d, %zu: AMX %g, VNNI %g", H, i,
                          (double)x1[i], (double)a[i]);
    }
    free(qkv);
    free(a);
    free(x1);
    free(x2);
}
END_TEST

/* A query or key row that is not finite (a diverged or corrupt model) makes
 * its item's outputs NaN and leaves the other items as they were; no NaN
 * reaches an integer conversion (UBSan in `make asan` and the fuzz target
 * catch one). Heads of 16 (the vector path) and of 8 (the plain path). */
START_TEST(test_attention_int8_not_finite)
{
    enum { B = 2, T = 9 };
    const int32_t lengths[B] = {T, 6};
    for (int hd = 8; hd <= 16; hd += 8) {
        const int H = 2, D = H * hd;
        float *qkv = malloc(sizeof(float) * B * T * 3 * D);
        for (int i = 0; i < B * T * 3 * D; i++)
            qkv[i] = ac_rng_normal(7, (uint64_t)i);
        const size_t n_out = (size_t)B * T * D;
        float *clean = malloc(sizeof(float) * n_out), *out = malloc(sizeof(float) * n_out);
        attention_int8_run(clean, NULL, qkv, lengths, B, T, D, H, 0, 1);
        /* a key row so small that 127 / max overflows counts as zeros */
        float *tiny = malloc(sizeof(float) * n_out);
        float *key = qkv + (size_t)3 * 3 * D + D; /* item 0, key of position 3, head 0 */
        for (int i = 0; i < hd; i++)
            key[i] = 0.0f;
        for (int vnni = 0; vnni <= ac_qkernel_available(AC_QKERNEL_VNNI); vnni++) {
            attention_int8_run(clean, NULL, qkv, lengths, B, T, D, H, vnni, 1);
            key[1] = 1e-38f;
            attention_int8_run(tiny, NULL, qkv, lengths, B, T, D, H, vnni, 1);
            key[1] = 0.0f;
            ck_assert_int_eq(memcmp(tiny, clean, sizeof(float) * n_out), 0);
        }
        free(tiny);
        qkv[(size_t)2 * 3 * D + 1] = NAN;          /* item 0, query of position 2, head 0 */
        qkv[(size_t)4 * 3 * D + D + 3] = INFINITY; /* item 0, key of position 4, head 0 */
        for (int vnni = 0; vnni <= ac_qkernel_available(AC_QKERNEL_VNNI); vnni++) {
            attention_int8_run(out, NULL, qkv, lengths, B, T, D, H, vnni, 1);
            ck_assert(isnan(out[(size_t)2 * D]));
            ck_assert_int_eq(memcmp(out + (size_t)T * D, clean + (size_t)T * D,
                                    sizeof(float) * (size_t)T * D), 0);
        }
        if (ac_qkernel_available(AC_QKERNEL_AMX)) { /* its own clean run: other bits */
            qkv[(size_t)2 * 3 * D + 1] = 0.5f;
            qkv[(size_t)4 * 3 * D + D + 3] = 0.5f;
            attention_int8_run(clean, NULL, qkv, lengths, B, T, D, H, 2, 1);
            qkv[(size_t)2 * 3 * D + 1] = NAN;
            qkv[(size_t)4 * 3 * D + D + 3] = INFINITY;
            attention_int8_run(out, NULL, qkv, lengths, B, T, D, H, 2, 1);
            ck_assert(isnan(out[(size_t)2 * D]));
            ck_assert_int_eq(memcmp(out + (size_t)T * D, clean + (size_t)T * D,
                                    sizeof(float) * (size_t)T * D), 0);
        }
        free(qkv);
        free(clean);
        free(out);
    }
}
END_TEST

/* --------------------------------------------------- a trained model, quantized */

START_TEST(test_agrees_with_fp32)
{
    char *fp32 = trained_dir(), *tmp = test_temp_dir("quant"), *q_all = test_path(tmp, "all"),
         *q_few = test_path(tmp, "few");
    quantize_ok(fp32, q_all, 1 << 20);
    quantize_ok(fp32, q_few, 50);
    ac_rawdata raw;
    read_csv(&raw, SAMPLE_TEST);
    int C;
    float *p0 = probs_of(fp32, 1, &raw, 1, &C), *p1 = probs_of(q_all, 1, &raw, 1, &C);
    int same = 0;
    float worst = 0.0f;
    for (int64_t i = 0; i < raw.n_rows; i++) {
        same += ac_argmax(p0 + i * C, C) == ac_argmax(p1 + i * C, C);
        for (int c = 0; c < C; c++)
            worst = fmaxf(worst, fabsf(p0[i * C + c] - p1[i * C + c]));
    }
    ck_assert_msg(worst < 0.02f, "probabilities differ by %g", (double)worst);
    ck_assert_msg(same >= raw.n_rows - raw.n_rows / 50, "%d of %lld labels agree", same,
                  (long long)raw.n_rows);
    /* fewer wide rows: still a model that loads and gives probabilities */
    float *p2 = probs_of(q_few, 1, &raw, 1, &C);
    for (int64_t i = 0; i < raw.n_rows; i++)
        ck_assert_float_eq_tol(p2[i * C] + p2[i * C + 1], 1.0f, 1e-5f);
    free(p0);
    free(p1);
    free(p2);
    ac_rawdata_free(&raw);
    free(q_all);
    free(q_few);
    remove_dir(tmp);
}
END_TEST

/* Loaded for inference (int8 embeddings dequantized as used) or in full,
 * at 1 or 2 threads: the same bits. */
START_TEST(test_same_bits_lazy_and_threads)
{
    char *fp32 = trained_dir(), *tmp = test_temp_dir("quant"), *q = test_path(tmp, "q");
    quantize_ok(fp32, q, 1000);
    ac_rawdata raw;
    read_csv(&raw, SAMPLE_TEST);
    int C;
    float *a = probs_of(q, 1, &raw, 1, &C), *b = probs_of(q, 1, &raw, 2, &C),
          *c = probs_of(q, 0, &raw, 2, &C);
    size_t bytes = (size_t)raw.n_rows * C * sizeof *a;
    ck_assert_int_eq(memcmp(a, b, bytes), 0);
    ck_assert_int_eq(memcmp(a, c, bytes), 0);
    free(a);
    free(b);
    free(c);
    ac_rawdata_free(&raw);
    free(q);
    remove_dir(tmp);
}
END_TEST

/* Probabilities and losses of every batch of raw (batches of 5 rows, by
 * length) run one after another on the model, or all at once on a pool of
 * `threads` views of it. */
static void infer_batches(const char *dir, const ac_rawdata *raw, int pool_threads, float **probs,
                          float **losses, size_t *n_probs)
{
    ac_model_dir md;
    ac_err err = {{0}};
    ck_assert_msg(ac_model_dir_load_inference(&md, dir, &err) == 0, "%s", err.msg);
    ac_corpus corpus;
    ac_batch_plan plan;
    enum { BATCH = 5 };
    const int T = md.model.cfg.max_len, C = md.model.cfg.n_classes;
    ck_assert_int_eq(ac_corpus_encode(&corpus, raw, &md.config.tokenizer, &md.vocab, T, &err), 0);
    ck_assert_int_eq(ac_batch_plan_make(&plan, &corpus, NULL, corpus.n, BATCH, 0, 0, &err), 0);
    const int nb = (int)plan.n_batches;
    int32_t *ids = calloc((size_t)nb * BATCH * T, sizeof *ids);
    int32_t *lengths = calloc((size_t)nb * BATCH, sizeof *lengths);
    int32_t *labels = calloc((size_t)nb * BATCH, sizeof *labels);
    int64_t *rows = calloc((size_t)nb * BATCH, sizeof *rows);
    ac_infer_job *jobs = calloc((size_t)nb, sizeof *jobs);
    *n_probs = (size_t)nb * BATCH * C;
    *probs = calloc(*n_probs, sizeof **probs);
    *losses = calloc((size_t)nb * BATCH, sizeof **losses);
    for (int b = 0; b < nb; b++) {
        ac_batch batch = {.ids = ids + (size_t)b * BATCH * T, .lengths = lengths + b * BATCH,
                          .labels = labels + b * BATCH, .rows = rows + b * BATCH};
        ac_batch_fill(&batch, &corpus, &plan, b);
        jobs[b] = (ac_infer_job){.ids = batch.ids, .lengths = batch.lengths,
                                 .labels = batch.labels, .B = batch.B, .T = batch.T,
                                 .probs = *probs + (size_t)b * BATCH * C,
                                 .losses = *losses + b * BATCH};
    }
    if (pool_threads > 0) {
        ac_infer_pool pool;
        ck_assert_msg(ac_infer_pool_init(&pool, &md.model, pool_threads, nb, BATCH, T, &err) == 0,
                      "%s", err.msg);
        ck_assert_msg(ac_infer_pool_run(&pool, jobs, nb, &err) == 0, "%s", err.msg);
        ac_infer_pool_free(&pool);
    } else {
        ac_infer run;
        ck_assert_int_eq(ac_infer_init(&run, BATCH, T, C, AC_INFER_BY_LENGTH, 1, &err), 0);
        for (int b = 0; b < nb; b++) {
            ck_assert_msg(ac_infer_run(&run, &md.model, jobs[b].ids, jobs[b].lengths,
                                       jobs[b].labels, jobs[b].B, jobs[b].T, &err) == 0,
                          "%s", err.msg);
            memcpy(jobs[b].probs, run.probs, (size_t)jobs[b].B * C * sizeof *run.probs);
            memcpy(jobs[b].losses, run.losses, (size_t)jobs[b].B * sizeof *run.losses);
        }
        ac_infer_free(&run);
    }
    free(ids);
    free(lengths);
    free(labels);
    free(rows);
    free(jobs);
    ac_batch_plan_free(&plan);
    ac_corpus_free(&corpus);
    ac_model_dir_free(&md);
}

/* Batches run at once on a pool of 1 or 2 threads (each a view of the
 * model, the quantized one dequantizing its embedding rows as they come)
 * give every batch's results, in job order, the same bits as one batch
 * after another on the model itself: FP32 and quantized. */
START_TEST(test_pool_same_bits)
{
    char *fp32 = trained_dir(), *tmp = test_temp_dir("quant"), *q = test_path(tmp, "q");
    quantize_ok(fp32, q, 1000);
    ac_rawdata raw;
    read_csv(&raw, SAMPLE_TEST);
    const char *dirs[] = {fp32, q};
    for (int k = 0; k < 2; k++) {
        float *p0, *l0;
        size_t n;
        infer_batches(dirs[k], &raw, 0, &p0, &l0, &n);
        for (int threads = 1; threads <= 2; threads++) {
            float *p, *l;
            infer_batches(dirs[k], &raw, threads, &p, &l, &n);
            ck_assert_int_eq(memcmp(p0, p, n * sizeof *p), 0);
            ck_assert_int_eq(memcmp(l0, l, (n / 2) * sizeof *l), 0); /* two classes */
            free(p);
            free(l);
        }
        free(p0);
        free(l0);
    }
    ac_rawdata_free(&raw);
    free(q);
    remove_dir(tmp);
}
END_TEST

/* The parameters of a loaded quantized model are the stored int8 values
 * times their scales; the file layout is as documented; quantizing again
 * is refused, and so is an output directory holding a model. */
START_TEST(test_round_trip)
{
    char *fp32 = trained_dir(), *tmp = test_temp_dir("quant"), *q = test_path(tmp, "q");
    quantize_ok(fp32, q, 1000);
    ac_model_dir a, b;
    ac_err err = {{0}};
    ck_assert_msg(ac_model_dir_load(&a, fp32, &err) == 0, "%s", err.msg);
    ck_assert_msg(ac_model_dir_load(&b, q, &err) == 0, "%s", err.msg);
    ck_assert_ptr_null(a.model.quant);
    ck_assert_ptr_nonnull(b.model.quant);
    ck_assert_int_eq((int)a.model.n_params, (int)b.model.n_params);
    char *path = test_path(q, "model.safetensors");
    ac_safetensors st;
    ck_assert_msg(ac_st_load(&st, path, &err) == 0, "%s", err.msg);
    for (int i = 0; i < a.model.n_tensors; i++) {
        const ac_param_info *p = &a.model.table[i];
        const ac_st_tensor *t = ac_st_find(&st, p->name);
        const float *wa = a.model.params + p->offset, *wb = b.model.params + p->offset;
        if (strcmp(p->name, "head.wide.weight") == 0) {
            ck_assert_ptr_null(t);
            continue;
        }
        ck_assert_msg(t != NULL, "%s missing", p->name);
        if (p->ndim == 1 || strcmp(p->name, "head.weight") == 0) {
            ck_assert_str_eq(t->dtype, "F32");
            ck_assert_int_eq(memcmp(wa, wb, p->numel * sizeof *wa), 0);
            continue;
        }
        char sname[80];
        snprintf(sname, sizeof sname, "%s.scale", p->name);
        if (strcmp(p->name, "embed.weight") == 0) { /* 4-bit, a scale code a row */
            ck_assert_str_eq(t->dtype, "U8");
            const ac_st_tensor *ct = ac_st_find(&st, sname);
            ck_assert_str_eq(ct->dtype, "U8");
            const uint8_t *qv = st.data + t->begin, *code = st.data + ct->begin;
            const size_t rb = ac_qb_bytes((size_t)p->shape[1], AC_EMBED_BITS);
            ck_assert_int_eq((int)t->shape[1], (int)rb);
            for (size_t k = 0; k < p->numel; k++) {
                const size_t r = k / (size_t)p->shape[1], c = k % (size_t)p->shape[1];
                const float sc = ac_scale_of_code(code[r]);
                ck_assert_float_eq(wb[k], (float)ac_qb_get(qv + r * rb, c, AC_EMBED_BITS) * sc);
                ck_assert_float_eq_tol(wb[k], wa[k], 0.5001f * sc);
            }
            continue;
        }
        ck_assert_str_eq(t->dtype, "I8");
        const float *scale = ac_st_f32(&st, ac_st_find(&st, sname));
        ck_assert_ptr_nonnull(scale);
        const int8_t *qv = (const int8_t *)(st.data + t->begin);
        for (size_t k = 0; k < p->numel; k++) {
            ck_assert_float_eq(wb[k], (float)qv[k] * scale[k / (size_t)p->shape[1]]);
            ck_assert_float_eq_tol(wb[k], wa[k], 0.51f * scale[k / (size_t)p->shape[1]] + 1e-7f);
        }
    }
    /* the wide table: a bitmap over every bucket, its rank directory, 5-bit values */
    const int N = a.model.cfg.wide_buckets, K = b.model.quant->wide.n;
    ck_assert_str_eq(ac_st_find(&st, "head.wide.present")->dtype, "U8");
    ck_assert_int_eq((int)ac_st_find(&st, "head.wide.present")->shape[0], N / 8);
    ck_assert_str_eq(ac_st_find(&st, "head.wide.rank")->dtype, "I32");
    ck_assert_int_eq((int)ac_st_find(&st, "head.wide.rank")->shape[0], N / AC_WIDE_RANK_BLOCK + 1);
    ck_assert_int_eq((int)ac_st_find(&st, "head.wide.values")->shape[0],
                     (int)ac_qb_bytes((size_t)K, AC_QUANT_DEFAULT_WIDE_BITS));
    ck_assert_ptr_null(ac_st_find(&st, "head.wide.ids"));
    /* the loaded dense table is the kept rows' values (x/2, -x/2), zeros elsewhere */
    const float *wide = b.model.p.wide_w;
    const ac_wide_sparse *ws = &b.model.quant->wide;
    for (int id = 0; id < N; id++) {
        const int r = ac_wide_sparse_find(ws, id);
        const float x = r < 0 ? 0.0f
                              : (float)ac_qb_get(ws->values, (size_t)r, ws->bits) *
                                    ac_scale_of_code(ws->codes[r / ws->group]);
        ck_assert_float_eq(wide[2 * id], 0.5f * x);
        ck_assert_float_eq(wide[2 * id + 1], -0.5f * x);
    }
    ac_st_free(&st);
    ac_model_dir_free(&a);
    ac_model_dir_free(&b);
    int kept;
    char *again = test_path(tmp, "again");
    ck_assert_int_ne(ac_quantize_model_dir(q, again, 10, 16, 5, NULL, &kept, &err), 0);
    ck_assert_msg(strstr(err.msg, "quantized already") != NULL, "%s", err.msg);
    ck_assert_int_ne(ac_quantize_model_dir(fp32, q, 10, 16, 5, NULL, &kept, &err), 0);
    ck_assert_msg(strstr(err.msg, "holds a model already") != NULL, "%s", err.msg);
    free(again);
    free(path);
    free(q);
    remove_dir(tmp);
}
END_TEST

/* Explanations read the weights directly: after an attribution setup, a
 * model loaded for inference holds every weight the full load holds. */
START_TEST(test_attribution_sees_all_weights)
{
    char *fp32 = trained_dir(), *tmp = test_temp_dir("quant"), *q = test_path(tmp, "q");
    quantize_ok(fp32, q, 1000);
    ac_model_dir lazy, full;
    ac_err err = {{0}};
    ck_assert_msg(ac_model_dir_load_inference(&lazy, q, &err) == 0, "%s", err.msg);
    ck_assert_msg(ac_model_dir_load(&full, q, &err) == 0, "%s", err.msg);
    ck_assert(memcmp(lazy.model.params, full.model.params,
                     lazy.model.n_params * sizeof(float)) != 0); /* rows not yet written */
    ac_attribution a;
    ck_assert_msg(ac_attribution_setup(&a, &lazy.model, AC_ATTR_GRADXINPUT, 16, 1, 1, &err) == 0,
                  "%s", err.msg);
    ck_assert_int_eq(memcmp(lazy.model.params, full.model.params,
                            lazy.model.n_params * sizeof(float)),
                     0);
    ac_attribution_free(&a);
    ac_model_dir_free(&lazy);
    ac_model_dir_free(&full);
    free(q);
    remove_dir(tmp);
}
END_TEST

/* Explanations run the quantized model's backward, which reads only what
 * its forward wrote (its feed-forward layer keeps no pre-activations): the
 * same scores whether the activations held -1, +1 or NaN before the run
 * (a sign test such as a ReLU's on a stale buffer sees -1 and +1 apart). */
START_TEST(test_attribution_reads_only_written_activations)
{
    char *fp32 = trained_dir(), *tmp = test_temp_dir("quant"), *q = test_path(tmp, "q");
    quantize_ok(fp32, q, 1000);
    ac_model_dir md;
    ac_err err = {{0}};
    ck_assert_msg(ac_model_dir_load_inference(&md, q, &err) == 0, "%s", err.msg);
    int32_t ids[9];
    for (int t = 0; t < 9; t++)
        ids[t] = 2 + (7 * t) % (md.model.cfg.vocab_size - 2);
    const int methods[] = {AC_ATTR_GRADXINPUT, AC_ATTR_IG};
    for (int k = 0; k < 2; k++) {
        ac_attribution a;
        ck_assert_msg(ac_attribution_setup(&a, &md.model, methods[k], 16, 1, 1, &err) == 0, "%s",
                      err.msg);
        const size_t n_scores = (size_t)a.n_classes * 9;
        float *first = malloc(n_scores * sizeof *first);
        const float poison[] = {-1.0f, 1.0f, NAN};
        for (int p = 0; p < 3; p++) {
            float *mem = md.model.act.mem;
            for (size_t i = 0; i < md.model.act.n_floats; i++)
                mem[i] = poison[p];
            ck_assert_msg(ac_attribution_run(&a, ids, 9, &err) == 0, "%s", err.msg);
            ck_assert_ptr_eq(md.model.act.mem, mem); /* the poisoned block was the one used */
            if (p == 0)
                memcpy(first, a.scores, n_scores * sizeof *first);
            else
                ck_assert_int_eq(memcmp(first, a.scores, n_scores * sizeof *first), 0);
        }
        free(first);
        ac_attribution_free(&a);
    }
    ac_model_dir_free(&md);
    free(q);
    remove_dir(tmp);
}
END_TEST

/* ------------------------------------------------------------- rejection */

__attribute__((noinline)) static unsigned char *slurp(const char *path, size_t *len)
{
    char *data;
    ac_err err;
    ck_assert_msg(ac_read_file(path, (size_t)1 << 30, &data, len, &err) == 0, "%s", err.msg);
    return (unsigned char *)data;
}

static void spit(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

/* Both loaders fail with one line that names `prefix` and contains `want`. */
static void load_fails(const char *dir, const char *prefix, const char *want)
{
    for (int lazy = 0; lazy < 2; lazy++) {
        ac_model_dir md;
        ac_err err = {{0}};
        int rc = lazy ? ac_model_dir_load_inference(&md, dir, &err)
                      : ac_model_dir_load(&md, dir, &err);
        ck_assert_msg(rc != 0, "loaded though %s", want);
        ck_assert_msg(strncmp(err.msg, prefix, strlen(prefix)) == 0, "%s", err.msg);
        ck_assert_msg(strstr(err.msg, want) != NULL, "want \"%s\" in: %s", want, err.msg);
        ck_assert_ptr_null(strchr(err.msg, '\n'));
    }
}

/* Offset of the data of tensor `name` in the file. */
static size_t data_offset(const char *path, const char *name)
{
    ac_safetensors st;
    ac_err err;
    ck_assert_int_eq(ac_st_load(&st, path, &err), 0);
    size_t header = 0;
    size_t len;
    unsigned char *b = slurp(path, &len);
    for (int i = 7; i >= 0; i--)
        header = (header << 8) | b[i];
    free(b);
    size_t at = 8 + header + ac_st_find(&st, name)->begin;
    ac_st_free(&st);
    return at;
}

/* A model with a weight that is not finite is refused, naming the tensor,
 * and nothing is written; the quantized model's forward needs no OpenBLAS,
 * the FP32 one's does. */
START_TEST(test_non_finite_refused)
{
    char *fp32 = trained_dir(), *tmp = test_temp_dir("quant"), *bad = test_path(tmp, "bad"),
         *q = test_path(tmp, "q");
    ck_assert_int_eq(mkdir(bad, 0755), 0);
    const char *const files[] = {"config.json", "vocab.txt", "model.safetensors"};
    for (int i = 0; i < 3; i++) {
        char *from = test_path(fp32, files[i]), *to = test_path(bad, files[i]);
        size_t len;
        unsigned char *data = slurp(from, &len);
        if (i == 2) {
            const float inf = INFINITY;
            memcpy(data + data_offset(from, "head.bias") + 4, &inf, 4);
        }
        spit(to, data, len);
        free(data);
        free(from);
        free(to);
    }
    ac_err err = {{0}};
    int kept;
    ck_assert_int_ne(ac_quantize_model_dir(bad, q, 100, 16, 5, NULL, &kept, &err), 0);
    ck_assert_msg(strstr(err.msg, "\"head.bias\"") && strstr(err.msg, "not finite"), "%s",
                  err.msg);
    struct stat sb;
    ck_assert_int_ne(stat(q, &sb), 0); /* nothing written: q not even created */

    quantize_ok(fp32, q, 1000);
    ac_model_dir a, b;
    ck_assert_msg(ac_model_dir_load_inference(&a, fp32, &err) == 0, "%s", err.msg);
    ck_assert_msg(ac_model_dir_load_inference(&b, q, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(ac_model_inference_needs_blas(&a.model), 1);
    ck_assert_int_eq(ac_model_inference_needs_blas(&b.model), 0);
    ac_model_dir_free(&a);
    ac_model_dir_free(&b);
    free(bad);
    free(q);
    remove_dir(tmp);
}
END_TEST

START_TEST(test_corrupt_files)
{
    char *fp32 = trained_dir(), *tmp = test_temp_dir("quant"), *q = test_path(tmp, "q");
    quantize_ok(fp32, q, 1000);
    char *model = test_path(q, "model.safetensors"), *config = test_path(q, "config.json");
    size_t len, clen;
    unsigned char *orig = slurp(model, &len);
    char *corig = (char *)slurp(config, &clen);
    const size_t at_present = data_offset(model, "head.wide.present"),
                 at_rank = data_offset(model, "head.wide.rank"),
                 at_scale = data_offset(model, "layers.0.attn.q.weight.scale");

    /* truncated anywhere: an error naming the file */
    const size_t cuts[] = {0, 5, 8, 20, len / 2, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        spit(model, orig, cuts[i]);
        load_fails(q, model, "");
    }
    unsigned char *bad = malloc(len);
    /* a bucket added to the bitmap: its block's rank no longer agrees */
    memcpy(bad, orig, len);
    int flipped = 0;
    for (size_t i = 0; i < 64 && !flipped; i++)
        if (bad[at_present + i] != 0xff) {
            bad[at_present + i] |= (uint8_t)(bad[at_present + i] + 1); /* sets the lowest clear bit */
            flipped = 1;
        }
    ck_assert(flipped);
    spit(model, bad, len);
    load_fails(q, model, "head.wide.rank");
    /* a bucket taken out of the last block: the count no longer storage.wide_rows */
    memcpy(bad, orig, len);
    ac_model_dir probe;
    ac_err perr;
    ck_assert_int_eq(ac_model_dir_load(&probe, fp32, &perr), 0);
    const int nb = probe.model.cfg.wide_buckets;
    ac_model_dir_free(&probe);
    size_t last = at_present + (size_t)nb / 8 - 1;
    while (bad[last] == 0)
        last--;
    bad[last] &= (uint8_t)(bad[last] - 1); /* clears the lowest set bit */
    spit(model, bad, len);
    load_fails(q, model, "head.wide.");
    /* a rank directory that does not start at 0 */
    memcpy(bad, orig, len);
    const int32_t one = 1;
    memcpy(bad + at_rank, &one, 4);
    spit(model, bad, len);
    load_fails(q, model, "head.wide.rank");
    /* a scale that is not a number */
    memcpy(bad, orig, len);
    const float nan = NAN;
    memcpy(bad + at_scale + 8, &nan, 4);
    spit(model, bad, len);
    load_fails(q, model, "layers.0.attn.q.weight.scale");
    spit(model, orig, len);

    /* the FP32 file in a directory that says it is quantized */
    char *fp32_model = test_path(fp32, "model.safetensors");
    size_t flen;
    unsigned char *f32 = slurp(fp32_model, &flen);
    spit(model, f32, flen);
    load_fails(q, model, "unexpected tensor \"head.wide.weight\"");
    spit(model, orig, len);

    /* storage objects this reader does not know */
    const char *const edits[][2] = {
        {"\"version\": 2", "\"version\": 3"},
        {"\"version\": 2", "\"version\": 1"},
        {"\"wide_bits\": 5", "\"wide_bits\": 9"},
        {",\n    \"wide_bits\": 5", ""},
        {"\"format\": \"quantized\"", "\"format\": \"pq\""},
        {"\"wide_group\": 16", "\"wide_group\": 16, \"codebook\": 4"},
        {"\"wide_group\": 16", "\"wide_group\": 0"},
        {"\"wide_rows\"", "\"rows\""},
    };
    const char *const expect[] = {"newer attnctl", "older quantized layout", "storage.wide_bits",
                                  "storage.wide_bits: missing", "storage.format", "storage.codebook",
                                  "storage.wide_group", "storage.rows"};
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        char *s = strstr(corig, edits[i][0]);
        ck_assert_ptr_nonnull(s);
        char *text = NULL;
        ck_assert_int_ge(asprintf(&text, "%.*s%s%s", (int)(s - corig), corig, edits[i][1],
                                  s + strlen(edits[i][0])),
                         0);
        spit(config, text, strlen(text));
        load_fails(q, config, expect[i]);
        free(text);
    }
    spit(config, corig, clen);
    /* the wide row count of config.json and of the file differ */
    char *s = strstr(corig, "\"wide_rows\": ");
    ck_assert_ptr_nonnull(s);
    char *text = NULL;
    ck_assert_int_ge(asprintf(&text, "%.*s\"wide_rows\": 3,%s", (int)(s - corig), corig,
                              strchr(s, ',') + 1),
                     0);
    spit(config, text, strlen(text));
    load_fails(q, model, "head.wide.");
    free(text);
    spit(config, corig, clen);
    /* a bad vocab.txt and a truncated model.safetensors, which an inference
     * load reads at the same time: the vocabulary is named (file order) */
    char *vocab = test_path(q, "vocab.txt");
    size_t vlen;
    char *vorig = (char *)slurp(vocab, &vlen);
    spit(vocab, "<pad>\n<unk>\n<pad>\n", 18);
    spit(model, orig, len / 2);
    load_fails(q, vocab, "duplicate token");
    spit(model, orig, len);
    load_fails(q, vocab, "duplicate token");
    /* ... and config.json before both */
    spit(config, "{", 1);
    load_fails(q, config, "");
    spit(config, corig, clen);
    spit(vocab, vorig, vlen);
    spit(model, orig, len / 2);
    load_fails(q, model, "");
    spit(model, orig, len);
    free(vorig);
    free(vocab);
    ac_model_dir md;
    ac_err err;
    ck_assert_msg(ac_model_dir_load_inference(&md, q, &err) == 0, "%s", err.msg);
    ac_model_dir_free(&md);

    free(bad);
    free(f32);
    free(fp32_model);
    free(orig);
    free(corig);
    free(model);
    free(config);
    free(q);
    remove_dir(tmp);
}
END_TEST

static Suite *quant_suite(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("quant");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_rows_round_trip);
    tcase_add_test(tc, test_attention_int8_not_finite);
    tcase_add_test(tc, test_attention_int8_amx_shapes);
    tcase_add_test(tc, test_select_rows);
    tcase_add_test(tc, test_sparse_two_classes);
    tcase_add_test(tc, test_sparse_three_classes);
    tcase_add_test(tc, test_sparse_eight_bits);
    tcase_add_test(tc, test_scale_codes);
    tcase_add_test(tc, test_qb_rows_round_trip);
    tcase_add_test(tc, test_qlinear);
    tcase_add_test(tc, test_attention_int8);
    tcase_add_test(tc, test_exp2_approx);
    tcase_add_test(tc, test_layernorm_lanes);
    tcase_add_test(tc, test_agrees_with_fp32);
    tcase_add_test(tc, test_same_bits_lazy_and_threads);
    tcase_add_test(tc, test_pool_same_bits);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_attribution_sees_all_weights);
    tcase_add_test(tc, test_attribution_reads_only_written_activations);
    tcase_add_test(tc, test_corrupt_files);
    tcase_add_test(tc, test_non_finite_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(quant_suite());
    /* One process: the trained model is made once and shared. */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    char *dir = trained_dir();
    char *root = strdup(dir);
    *strrchr(root, '/') = '\0';
    remove_dir(root);
    return failed == 0 ? 0 : 1;
}
