/* The exact sum of micro-batch gradients (src/nn/gradsum.c): fixed-point
 * conversion, and the same summed gradient for any split of the
 * micro-batches among (simulated) ranks and any order. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/gradsum.h"
#include "attnctl/io.h"
#include "attnctl/mlm.h"
#include "attnctl/model.h"
#include "attnctl/rng.h"

START_TEST(test_fixed_round_trip)
{
    /* Every float from 2^-77 up (whose last bit is at least 2^-100) comes back exactly. */
    for (uint64_t i = 0; i < 200000; i++) {
        float mag = ldexpf(1.0f + ac_rng_uniform(11, i), (int)(i % 100) - 77);
        float x = i % 2 ? -mag : mag;
        ac_fixed v;
        ck_assert_int_eq(ac_fixed_from_float(x, 26, &v), 0);
        ck_assert_msg(ac_fixed_to_float(v) == x, "%a came back as %a", (double)x,
                      (double)ac_fixed_to_float(v));
    }
    ac_fixed v;
    ck_assert_int_eq(ac_fixed_from_float(0x1p-102f, 26, &v), 0);
    ck_assert(v == 0); /* below half an LSB */
    ck_assert_int_eq(ac_fixed_from_float(0x1p-101f, 26, &v), 0);
    ck_assert(v == 1); /* half an LSB rounds away from zero */
    ck_assert_int_eq(ac_fixed_from_float(-0x1p-101f, 26, &v), 0);
    ck_assert(v == -1);
    ck_assert_int_eq(ac_fixed_from_float(0x1p-130f, 26, &v), 0); /* subnormal */
    ck_assert(v == 0);
    ck_assert_int_eq(ac_fixed_from_float(NAN, 26, &v), -1);
    ck_assert_int_eq(ac_fixed_from_float(-INFINITY, 26, &v), -1);
    ck_assert_int_eq(ac_fixed_from_float(0x1p26f, 26, &v), -1); /* at the limit */
    ck_assert_int_eq(ac_fixed_from_float(0x1.fffffep25f, 26, &v), 0);
}
END_TEST

START_TEST(test_fixed_sum_is_order_free)
{
    enum { N = 4096 };
    static float x[N];
    for (int i = 0; i < N; i++)
        x[i] = (ac_rng_uniform(3, (uint64_t)i) - 0.5f) * ldexpf(1.0f, (int)(i % 40) - 20);
    ac_fixed forward = 0, backward = 0, strided = 0;
    for (int i = 0; i < N; i++) {
        ac_fixed v;
        ck_assert_int_eq(ac_fixed_from_float(x[i], 26, &v), 0);
        forward += v;
        ck_assert_int_eq(ac_fixed_from_float(x[N - 1 - i], 26, &v), 0);
        backward += v;
    }
    for (int s = 0; s < 7; s++)
        for (int i = s; i < N; i += 7) {
            ac_fixed v;
            ck_assert_int_eq(ac_fixed_from_float(x[i], 26, &v), 0);
            strided += v;
        }
    ck_assert(forward == backward && forward == strided);
    /* float sums of the same numbers differ by order: the reason for all this */
    float f = 0, b = 0;
    for (int i = 0; i < N; i++) {
        f += x[i];
        b += x[N - 1 - i];
    }
    ck_assert(f != b);
}
END_TEST

/* ---------------------------------------------- micro-batches of a model */

enum { B = 12, T = 10, MB = 3, PARTS = B / MB };

static void tiny_model(ac_model *m, ac_objective objective)
{
    ac_model_config c = {.vocab_size = 50, .max_len = T, .d_model = 16, .n_heads = 2, .d_ff = 32,
                         .n_layers = 1, .n_classes = objective ? 0 : 3, .pooling = AC_POOL_MEAN,
                         .dropout = 0.1f, .ln_eps = 1e-6f, .positions = AC_POS_LEARNED,
                         .ngram_order = 2, .ngram_buckets = 64, .objective = objective,
                         /* a classifier's wide table, summed by rows like the n-grams */
                         .wide_order = 2, .wide_buckets = 37};
    ac_err err;
    ck_assert_msg(ac_model_create(m, &c, &err) == 0, "%s", err.msg);
    ac_model_init_weights(m, 5);
    /* the n-gram table starts at 0; give it values so its gradient flows */
    for (size_t i = m->dense_params; i < m->n_params; i++)
        m->params[i] = 0.02f * ac_rng_normal(9, i);
    ck_assert_int_eq(ac_model_alloc_activations(m, MB, T, &err), 0);
}

typedef struct {
    int32_t ids[B * T], lengths[B], labels[B];
} batch;

static void make_batch(batch *b)
{
    for (int r = 0; r < B; r++) {
        b->lengths[r] = 2 + r % (T - 1);
        b->labels[r] = r % 3;
        for (int t = 0; t < T; t++)
            b->ids[r * T + t] = t < b->lengths[r]
                                    ? 2 + (int32_t)ac_rng_below(4, (uint64_t)(r * T + t), 48)
                                    : 0;
    }
}

/* Micro-batch j's gradient added into s (a classifier). */
static void add_part(ac_model *m, ac_gradsum *s, const batch *b, int j)
{
    ac_model_zero_grad(m);
    float loss = ac_model_forward(m, b->ids + j * MB * T, b->lengths + j * MB, b->labels + j * MB,
                                  MB, T, 1, ac_rng_key(77, (uint64_t)j));
    ck_assert(isfinite(loss));
    m->mean_rows = B;
    ac_model_backward(m);
    m->mean_rows = 0;
    ac_err err;
    ck_assert_msg(ac_gradsum_add(s, m, &err) == 0, "%s", err.msg);
}

/* The summed gradient when "ranks" hold the given parts (rank r: parts of
 * owner r), merged as the MPI path does: OR of the row bits, element-wise
 * sum of the packed sums. Result in m->grads (copied out). */
static void sum_split(ac_model *m, const batch *b, const int *owner, int ranks, const int *order,
                      float *out)
{
    ac_gradsum s[PARTS];
    ac_err err;
    for (int r = 0; r < ranks; r++) {
        ck_assert_int_eq(ac_gradsum_init(&s[r], m, (long)B * T, PARTS, &err), 0);
        ac_gradsum_clear(&s[r]);
    }
    ac_model_zero_grad(m);
    for (int k = 0; k < PARTS; k++)
        add_part(m, &s[owner[order[k]]], b, order[k]);
    for (int r = 1; r < ranks; r++) {
        for (size_t w = 0; w < s[0].tokens.words; w++)
            s[0].tokens.touched[w] |= s[r].tokens.touched[w];
        for (size_t w = 0; w < s[0].ngrams.words; w++)
            s[0].ngrams.touched[w] |= s[r].ngrams.touched[w];
        for (size_t w = 0; w < s[0].wide.words; w++)
            s[0].wide.touched[w] |= s[r].wide.touched[w];
    }
    for (int r = 1; r < ranks; r++) {
        memcpy(s[r].tokens.touched, s[0].tokens.touched, s[0].tokens.words * 8);
        memcpy(s[r].ngrams.touched, s[0].ngrams.touched, s[0].ngrams.words * 8);
        memcpy(s[r].wide.touched, s[0].wide.touched, s[0].wide.words * 8);
    }
    size_t n = ac_gradsum_pack(&s[0]);
    for (int r = 1; r < ranks; r++) {
        ck_assert_uint_eq(ac_gradsum_pack(&s[r]), n);
        for (size_t i = 0; i < n; i++)
            s[0].packed[i] += s[r].packed[i];
    }
    ac_model_zero_grad(m);
    ac_gradsum_unpack(&s[0], m);
    memcpy(out, m->grads, m->n_params * sizeof *out);
    for (int r = 0; r < ranks; r++)
        ac_gradsum_free(&s[r]);
}

START_TEST(test_partitions_give_the_same_gradient)
{
    ac_model m;
    tiny_model(&m, AC_OBJECTIVE_CLASSIFICATION);
    batch b;
    make_batch(&b);
    float *one = malloc(m.n_params * sizeof *one), *other = malloc(m.n_params * sizeof *other);
    static const int in_order[PARTS] = {0, 1, 2, 3}, reversed[PARTS] = {3, 1, 2, 0};
    static const int all_one[PARTS] = {0, 0, 0, 0}, two[PARTS] = {0, 0, 1, 1},
                     three[PARTS] = {0, 1, 1, 2}, four[PARTS] = {0, 1, 2, 3};
    omp_set_num_threads(1);
    sum_split(&m, &b, all_one, 1, in_order, one);
    int touched = 0;
    for (size_t i = m.dense_params; i < m.n_params; i++)
        touched += one[i] != 0.0f;
    ck_assert_msg(touched > 0, "no n-gram gradient");
    const int *owners[] = {all_one, two, three, four};
    for (int k = 0; k < 4; k++)
        for (int o = 0; o < 2; o++) {
            omp_set_num_threads(1 + (k + o) % 2);
            sum_split(&m, &b, owners[k], k + 1, o ? reversed : in_order, other);
            ck_assert_msg(memcmp(one, other, m.n_params * sizeof *one) == 0,
                          "%d ranks (order %d): a different gradient", k + 1, o);
        }
    /* each row-sparse table's list is its merged rows, ascending */
    for (int k = 0; k < AC_SPARSE_TABLES; k++) {
        const ac_sparse_rows *t = &m.sparse[k];
        ck_assert_int_gt(t->n_rows, 0);
        for (int i = 1; i < t->n_rows; i++)
            ck_assert_int_lt(t->rows[i - 1], t->rows[i]);
    }
    /* and it is the sum: close to the float sum of the parts */
    float *plain = calloc(m.n_params, sizeof *plain);
    for (int j = 0; j < PARTS; j++) {
        ac_model_zero_grad(&m);
        memset(m.grads, 0, m.n_params * sizeof *m.grads);
        ac_model_forward(&m, b.ids + j * MB * T, b.lengths + j * MB, b.labels + j * MB, MB, T, 1,
                         ac_rng_key(77, (uint64_t)j));
        m.mean_rows = B;
        ac_model_backward(&m);
        m.mean_rows = 0;
        for (size_t i = 0; i < m.n_params; i++)
            plain[i] += m.grads[i];
    }
    for (size_t i = 0; i < m.n_params; i++)
        ck_assert_msg(fabsf(plain[i] - one[i]) <= 1e-6f * (1.0f + fabsf(plain[i])),
                      "element %zu: %g vs %g", i, (double)plain[i], (double)one[i]);
    free(plain);
    free(one);
    free(other);
    ac_model_free(&m);
}
END_TEST

/* The point of it all: without dropout, the exact sum of the micro-batch
 * gradients is the gradient of the whole batch in one pass (up to float
 * rounding), for the classifier's every tensor: the loss weights (mean over
 * the whole batch), the row-wise token and n-gram sums, nothing lost. */
START_TEST(test_micro_batches_equal_the_whole_batch)
{
    ac_model m;
    tiny_model(&m, AC_OBJECTIVE_CLASSIFICATION);
    m.cfg.dropout = 0.0f;
    batch b;
    make_batch(&b);
    float *parts = malloc(m.n_params * sizeof *parts), *whole = malloc(m.n_params * sizeof *whole);
    static const int in_order[PARTS] = {0, 1, 2, 3}, owners[PARTS] = {0, 1, 1, 0};
    omp_set_num_threads(1);
    sum_split(&m, &b, owners, 2, in_order, parts);

    ac_err err;
    ck_assert_int_eq(ac_model_alloc_activations(&m, B, T, &err), 0);
    ac_model_zero_grad(&m);
    memset(m.grads, 0, m.n_params * sizeof *m.grads);
    float loss = ac_model_forward(&m, b.ids, b.lengths, b.labels, B, T, 1, 1);
    ck_assert(isfinite(loss));
    ac_model_backward(&m);
    memcpy(whole, m.grads, m.n_params * sizeof *whole);
    double norm = 0;
    for (size_t i = 0; i < m.n_params; i++)
        norm += (double)whole[i] * whole[i];
    ck_assert(norm > 0);
    for (size_t i = 0; i < m.n_params; i++)
        ck_assert_msg(fabsf(parts[i] - whole[i]) <= 1e-5f * (1.0f + sqrtf((float)norm)),
                      "element %zu: micro-batches %g, whole batch %g", i, (double)parts[i],
                      (double)whole[i]);
    free(parts);
    free(whole);
    ac_model_free(&m);
}
END_TEST

START_TEST(test_out_of_range_is_an_error)
{
    ac_model m;
    tiny_model(&m, AC_OBJECTIVE_CLASSIFICATION);
    ac_gradsum s;
    ac_err err;
    ck_assert_int_eq(ac_gradsum_init(&s, &m, (long)B * T, PARTS, &err), 0);
    ac_gradsum_clear(&s);
    ac_model_zero_grad(&m);
    m.grads[m.n_params / 2 < m.dense_params ? m.n_params / 2 : m.dense_params - 1] = NAN;
    ck_assert_int_eq(ac_gradsum_add(&s, &m, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "not finite"));
    ac_gradsum_free(&s);
    ac_model_free(&m);
}
END_TEST

/* Masking a batch at once or in micro-batches by row index chooses the same
 * positions, and the count function agrees with the masking. */
START_TEST(test_masking_by_global_row)
{
    batch b;
    make_batch(&b);
    ac_mlm_masking spec = {.mask_frac = 0.3, .mask_id = 1, .first_word_id = 2, .vocab_size = 50,
                           .skip_first_id = -1};
    int32_t masked[B * T], pos[B * T], tgt[B * T], scratch[T];
    int M = ac_mlm_mask_rows(&spec, b.ids, b.lengths, B, T, 99, 0, masked, pos, tgt, scratch);
    ck_assert_int_eq(M, ac_mlm_count_masked(&spec, b.ids, b.lengths, B, T, 99, 0));
    int total = 0;
    for (int j = 0; j < PARTS; j++) {
        int32_t mm[MB * T], pp[MB * T], tt[MB * T];
        int Mj = ac_mlm_mask_rows(&spec, b.ids + j * MB * T, b.lengths + j * MB, MB, T, 99, j * MB,
                                  mm, pp, tt, scratch);
        ck_assert_int_eq(Mj, ac_mlm_count_masked(&spec, b.ids + j * MB * T, b.lengths + j * MB,
                                                 MB, T, 99, j * MB));
        ck_assert_int_eq(memcmp(mm, masked + j * MB * T, sizeof mm), 0);
        for (int i = 0; i < Mj; i++)
            ck_assert_int_eq(pp[i] + j * MB * T, pos[total + i]);
        total += Mj;
    }
    ck_assert_int_eq(total, M);
}
END_TEST

/* A config.json written before micro-batches takes the whole batch at once. */
START_TEST(test_legacy_config_has_one_micro_batch)
{
    ac_config c;
    ac_config_defaults(&c);
    c.training.batch_size = 24;
    c.model.n_classes = 2;
    static char neg[] = "neg", pos[] = "pos";
    static char *names[] = {neg, pos};
    c.labels = names;
    c.n_labels = 2;
    char *json = ac_config_to_json(&c);
    ck_assert_ptr_nonnull(strstr(json, "\"micro_batch\": 8"));
    char *key = strstr(json, "\"micro_batch\"");
    char *line_end = strchr(key, '\n');
    memmove(key, line_end + 1, strlen(line_end + 1) + 1); /* drop the line */
    ac_config back;
    ac_config_defaults(&back);
    ac_err err;
    int rc = ac_config_parse(&back, json, strlen(json), "legacy", 1, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_int_eq(back.training.micro_batch, 24);
    ac_config_free(&back);
    free(json);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gradsum");
    TCase *tc = tcase_create("gradsum");
    tcase_add_test(tc, test_fixed_round_trip);
    tcase_add_test(tc, test_fixed_sum_is_order_free);
    tcase_add_test(tc, test_partitions_give_the_same_gradient);
    tcase_add_test(tc, test_micro_batches_equal_the_whole_batch);
    tcase_add_test(tc, test_out_of_range_is_an_error);
    tcase_add_test(tc, test_masking_by_global_row);
    tcase_add_test(tc, test_legacy_config_has_one_micro_batch);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
