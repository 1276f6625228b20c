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
#include "attnctl/io.h"
#include "attnctl/metrics.h"
#include "attnctl/quant.h"
#include "attnctl/quant_io.h"
#include "attnctl/rng.h"
#include "attnctl/train.h"

#define SAMPLE_TRAIN "data/sample_train.csv"
#define SAMPLE_TEST "data/sample_test.csv"

/* ------------------------------------------------------------------ helpers */

static int remove_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static char *make_temp_dir(void)
{
    char *d = strdup("/tmp/attnctl-test-quant-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d));
    return d;
}

static void remove_dir(char *d)
{
    nftw(d, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(d);
}

static char *join(const char *a, const char *b)
{
    char *p = NULL;
    ck_assert_int_ge(asprintf(&p, "%s/%s", a, b), 0);
    return p;
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
    char *root = make_temp_dir();
    dir = join(root, "fp32");
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
    ck_assert_msg(ac_quantize_model_dir(src, dst, rows, AC_QUANT_DEFAULT_WIDE_GROUP, NULL, &kept, &err) ==
                      0,
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
static void check_sparse_matches_dense(int C, int group)
{
    enum { ROWS = 300, B = 3, T = 20, ORDER = 2, KEEP = 120 };
    float *table = calloc((size_t)ROWS * C, sizeof *table);
    for (int i = 0; i < ROWS * C; i++)
        table[i] = ac_rng_normal(5, (uint64_t)i);
    int32_t ids[KEEP];
    ac_err err = {{0}};
    int n = ac_wide_select_rows(ids, table, ROWS, C, KEEP, NULL, NULL, &err);
    ck_assert_int_eq(n, KEEP);
    const int W = ac_wide_stored_width(C);
    int8_t q[KEEP * 3];
    float scales[KEEP];
    ac_wide_quantize(q, scales, table, ids, n, C, group);
    ac_wide_sparse w = {.n = n, .n_classes = C, .width = W, .group = group, .ids = ids, .q = q,
                        .scales = scales};
    float *dense = calloc((size_t)ROWS * C, sizeof *dense);
    ac_wide_sparse_to_dense(dense, &w);
    /* every kept row stands for its original up to a constant, within the rounding */
    for (int i = 0; i < n; i++)
        for (int c = 1; c < C; c++) {
            float orig = table[ids[i] * C + c] - table[ids[i] * C];
            float got = dense[ids[i] * C + c] - dense[ids[i] * C];
            ck_assert_float_eq_tol(got, orig, scales[i / group] * (C == 2 ? 0.51f : 1.01f));
        }
    int32_t tok[B * T], lengths[B] = {T, 7, 1}, buckets[B * T * ORDER], counts[B];
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)(ac_rng_uniform(9, (uint64_t)i) * 50);
    wide_buckets_compute(buckets, counts, tok, lengths, B, T, ORDER, ROWS);
    float a[B * 3] = {0}, b[B * 3] = {0};
    wide_forward(a, buckets, counts, dense, B, T, ORDER, C, 0.5f);
    ac_wide_sparse_forward(b, &w, buckets, counts, B, T, ORDER, 0.5f);
    for (int i = 0; i < B; i++)
        for (int c = 1; c < C; c++)
            ck_assert_float_eq_tol(b[i * C + c] - b[i * C], a[i * C + c] - a[i * C], 1e-5f);
    /* lookups: every kept id found at its index, others not */
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(ac_wide_sparse_find(&w, ids[i], 0), i);
    ck_assert_int_eq(ac_wide_sparse_find(&w, ROWS + 5, 0), -1);
    free(table);
    free(dense);
}

START_TEST(test_sparse_two_classes) { check_sparse_matches_dense(2, 16); }
END_TEST

START_TEST(test_sparse_three_classes) { check_sparse_matches_dense(3, 1); }
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
    /* a row that is not finite gives NaN (a broken model stays visible) */
    x[in] = NAN;
    qlinear_run(c1, x, &l, NULL, 2, AC_QKERNEL_AUTO, 1);
    ck_assert(isnan(c1[outd]));
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
        qkv[(size_t)2 * 3 * D + 1] = NAN;          /* item 0, query of position 2, head 0 */
        qkv[(size_t)4 * 3 * D + D + 3] = INFINITY; /* item 0, key of position 4, head 0 */
        for (int vnni = 0; vnni <= ac_qkernel_available(AC_QKERNEL_VNNI); vnni++) {
            attention_int8_run(out, NULL, qkv, lengths, B, T, D, H, vnni, 1);
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
    char *fp32 = trained_dir(), *tmp = make_temp_dir(), *q_all = join(tmp, "all"),
         *q_few = join(tmp, "few");
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
    char *fp32 = trained_dir(), *tmp = make_temp_dir(), *q = join(tmp, "q");
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

/* The parameters of a loaded quantized model are the stored int8 values
 * times their scales; the file layout is as documented; quantizing again
 * is refused, and so is an output directory holding a model. */
START_TEST(test_round_trip)
{
    char *fp32 = trained_dir(), *tmp = make_temp_dir(), *q = join(tmp, "q");
    quantize_ok(fp32, q, 1000);
    ac_model_dir a, b;
    ac_err err = {{0}};
    ck_assert_msg(ac_model_dir_load(&a, fp32, &err) == 0, "%s", err.msg);
    ck_assert_msg(ac_model_dir_load(&b, q, &err) == 0, "%s", err.msg);
    ck_assert_ptr_null(a.model.quant);
    ck_assert_ptr_nonnull(b.model.quant);
    ck_assert_int_eq((int)a.model.n_params, (int)b.model.n_params);
    char *path = join(q, "model.safetensors");
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
        ck_assert_str_eq(t->dtype, "I8");
        char sname[80];
        snprintf(sname, sizeof sname, "%s.scale", p->name);
        const float *scale = ac_st_f32(&st, ac_st_find(&st, sname));
        ck_assert_ptr_nonnull(scale);
        const int8_t *qv = (const int8_t *)(st.data + t->begin);
        for (size_t k = 0; k < p->numel; k++) {
            ck_assert_float_eq(wb[k], (float)qv[k] * scale[k / (size_t)p->shape[1]]);
            ck_assert_float_eq_tol(wb[k], wa[k], 0.51f * scale[k / (size_t)p->shape[1]] + 1e-7f);
        }
    }
    ck_assert_str_eq(ac_st_find(&st, "head.wide.ids")->dtype, "U16");
    ck_assert_str_eq(ac_st_find(&st, "head.wide.starts")->dtype, "I32");
    ck_assert_int_eq((int)ac_st_find(&st, "head.wide.values")->shape[1], 1);
    ac_st_free(&st);
    ac_model_dir_free(&a);
    ac_model_dir_free(&b);
    int kept;
    char *again = join(tmp, "again");
    ck_assert_int_ne(ac_quantize_model_dir(q, again, 10, 16, NULL, &kept, &err), 0);
    ck_assert_msg(strstr(err.msg, "quantized already") != NULL, "%s", err.msg);
    ck_assert_int_ne(ac_quantize_model_dir(fp32, q, 10, 16, NULL, &kept, &err), 0);
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
    char *fp32 = trained_dir(), *tmp = make_temp_dir(), *q = join(tmp, "q");
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

START_TEST(test_corrupt_files)
{
    char *fp32 = trained_dir(), *tmp = make_temp_dir(), *q = join(tmp, "q");
    quantize_ok(fp32, q, 1000);
    char *model = join(q, "model.safetensors"), *config = join(q, "config.json");
    size_t len, clen;
    unsigned char *orig = slurp(model, &len);
    char *corig = (char *)slurp(config, &clen);
    const size_t at = data_offset(model, "head.wide.ids"),
                 at_scale = data_offset(model, "embed.weight.scale"),
                 at_starts = data_offset(model, "head.wide.starts");

    /* truncated anywhere: an error naming the file */
    const size_t cuts[] = {0, 5, 8, 20, len / 2, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        spit(model, orig, cuts[i]);
        load_fails(q, model, "");
    }
    unsigned char *bad = malloc(len);
    /* ids no longer ascending */
    memcpy(bad, orig, len);
    memcpy(bad + at, bad + at + 4, 4);
    spit(model, bad, len);
    load_fails(q, model, "head.wide.ids");
    /* an id outside the table */
    memcpy(bad, orig, len);
    const int32_t huge = 1 << 30;
    memcpy(bad + at, &huge, 4);
    spit(model, bad, len);
    load_fails(q, model, "outside");
    /* block starts that do not begin at 0 */
    memcpy(bad, orig, len);
    const int32_t one = 1;
    memcpy(bad + at_starts, &one, 4);
    spit(model, bad, len);
    load_fails(q, model, "head.wide.starts");
    /* a scale that is not a number */
    memcpy(bad, orig, len);
    const float nan = NAN;
    memcpy(bad + at_scale + 8, &nan, 4);
    spit(model, bad, len);
    load_fails(q, model, "embed.weight.scale");
    spit(model, orig, len);

    /* the FP32 file in a directory that says it is quantized */
    char *fp32_model = join(fp32, "model.safetensors");
    size_t flen;
    unsigned char *f32 = slurp(fp32_model, &flen);
    spit(model, f32, flen);
    load_fails(q, model, "unexpected tensor \"head.wide.weight\"");
    spit(model, orig, len);

    /* storage objects this reader does not know */
    const char *const edits[][2] = {
        {"\"version\": 1", "\"version\": 2"},
        {"\"format\": \"quantized\"", "\"format\": \"pq\""},
        {"\"wide_group\": 16", "\"wide_group\": 16, \"codebook\": 4"},
        {"\"wide_group\": 16", "\"wide_group\": 0"},
        {"\"wide_rows\"", "\"rows\""},
    };
    const char *const expect[] = {"newer attnctl", "storage.format", "storage.codebook",
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
    load_fails(q, model, "head.wide.ids");
    free(text);
    spit(config, corig, clen);
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
    tcase_add_test(tc, test_select_rows);
    tcase_add_test(tc, test_sparse_two_classes);
    tcase_add_test(tc, test_sparse_three_classes);
    tcase_add_test(tc, test_qlinear);
    tcase_add_test(tc, test_attention_int8);
    tcase_add_test(tc, test_agrees_with_fp32);
    tcase_add_test(tc, test_same_bits_lazy_and_threads);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_attribution_sees_all_weights);
    tcase_add_test(tc, test_corrupt_files);
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
