/* NBSVM on the wide path's features (src/train/nbsvm.c): its scores against
 * the SVM's optimum found here another way (gradient descent on the primal),
 * its fold into a wide table against its own scores, and its determinism. */
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/nn.h"
#include "attnctl/train.h"

#include "test_util.h"

enum { NB = 1 << 16 };

/* Ten short texts of two classes over words 1..9, not separable by any one
 * word (words 5 and 6 occur in both classes; row 9 reads like class 0). */
static const int32_t IDS[] = {1, 2, 5,  1, 3,  2, 5, 6,  1, 6,  3, 5,    /* class 0 */
                              4, 7, 5,  4, 8,  7, 6,  8, 5, 4,  1, 2, 7}; /* class 1 */
static const int64_t OFF[] = {0, 3, 5, 8, 10, 12, 15, 17, 19, 22, 25};
static const int32_t LABELS[] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
static const int64_t ROWS[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};

static ac_nbsvm_data data_of(int order, int n_classes, const int32_t *labels, float norm)
{
    return (ac_nbsvm_data){.ids = IDS,
                           .off = OFF,
                           .labels = labels,
                           .rows = ROWS,
                           .n_rows = 10,
                           .order = order,
                           .n_buckets = NB,
                           .n_classes = n_classes,
                           .norm = norm};
}

/* Unigrams, two classes, norm 0: NBSVM by its definition. The features are
 * the distinct words, x = r (the log-count ratio) where a row has the word;
 * the SVM minimises |w|^2/2 + b^2/2 + sum of max(0, 1 - y (w.x + b))^2,
 * solved here by plain gradient descent on that smooth convex function;
 * the score is sum of ((1 - 0.25) mean|w| + 0.25 w_f) x_f + b. */
START_TEST(test_nbsvm_scores_are_the_svm_optimum)
{
    enum { V = 9 };
    int seen[V + 1] = {0};
    double pos[V + 1] = {0}, neg[V + 1] = {0}, pos_total = 0, neg_total = 0;
    for (int k = 0; k < 10; k++) {
        int in_row[V + 1] = {0};
        for (int64_t i = OFF[k]; i < OFF[k + 1]; i++)
            in_row[IDS[i]] = 1;
        for (int v = 1; v <= V; v++)
            if (in_row[v]) {
                seen[v] = 1;
                (LABELS[k] ? pos : neg)[v] += 1;
                *(LABELS[k] ? &pos_total : &neg_total) += 1;
            }
    }
    int n_seen = 0;
    for (int v = 1; v <= V; v++)
        n_seen += seen[v];
    double r[V + 1] = {0};
    for (int v = 1; v <= V; v++)
        if (seen[v])
            r[v] = log(((pos[v] + 1) / (pos_total + n_seen)) / ((neg[v] + 1) / (neg_total + n_seen)));
    double w[V + 1] = {0}, b = 0;
    for (int it = 0; it < 200000; it++) {
        double gw[V + 1], gb = b;
        for (int v = 0; v <= V; v++)
            gw[v] = w[v];
        for (int k = 0; k < 10; k++) {
            int in_row[V + 1] = {0};
            for (int64_t i = OFF[k]; i < OFF[k + 1]; i++)
                in_row[IDS[i]] = 1;
            double y = LABELS[k] ? 1 : -1, margin = b;
            for (int v = 1; v <= V; v++)
                margin += in_row[v] * w[v] * r[v];
            double slack = 1 - y * margin;
            if (slack <= 0)
                continue;
            for (int v = 1; v <= V; v++)
                gw[v] -= 2 * slack * y * in_row[v] * r[v];
            gb -= 2 * slack * y;
        }
        for (int v = 1; v <= V; v++)
            w[v] -= 0.01 * gw[v];
        b -= 0.01 * gb;
    }
    double mean_abs = 0;
    for (int v = 1; v <= V; v++)
        mean_abs += seen[v] ? fabs(w[v]) : 0;
    mean_abs /= n_seen;

    ac_nbsvm s;
    ac_err err;
    ac_nbsvm_data d = data_of(1, 2, LABELS, 0.0f);
    ck_assert_msg(ac_nbsvm_fit(&s, &d, 7, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(s.n_classes, 2);
    ck_assert_int_eq(s.n_rows, n_seen);
    /* each training row, and a text with a word no row has (10) */
    const int32_t unseen_text[] = {4, 10, 2};
    for (int k = 0; k <= 10; k++) {
        const int32_t *text = k < 10 ? IDS + OFF[k] : unseen_text;
        const int len = k < 10 ? (int)(OFF[k + 1] - OFF[k]) : 3;
        double want = b;
        int counted[V + 2] = {0};
        for (int i = 0; i < len; i++)
            if (text[i] <= V && !counted[text[i]]) {
                counted[text[i]] = 1;
                want += (0.75 * mean_abs + 0.25 * w[text[i]]) * r[text[i]];
            }
        int32_t buckets[8];
        const int count = wide_buckets_of_text(buckets, text, len, 1, NB);
        float logits[2] = {0.5f, 0.5f};
        double sums[2];
        ac_nbsvm_add_scores(&s, logits, buckets, count, 0.0f, sums);
        /* +S/2 on class 1, -S/2 on class 0 */
        ck_assert_msg(fabs((logits[1] - logits[0]) - want) < 2e-3, "text %d: %g, want %g", k,
                      (double)(logits[1] - logits[0]), want);
        ck_assert(fabs((logits[1] - 0.5) + (logits[0] - 0.5)) < 1e-6);
    }
    ac_nbsvm_free(&s);
}
END_TEST

/* Folded into a wide table and head bias, the scores are what
 * ac_nbsvm_add_scores gives, through the wide path's own forward: three
 * classes, bigrams, the length scale, and a text past the scale's floor. */
START_TEST(test_nbsvm_fold_is_the_wide_path)
{
    static const int32_t three[] = {0, 0, 1, 1, 1, 2, 2, 2, 0, 2};
    ac_nbsvm s;
    ac_err err;
    ac_nbsvm_data d = data_of(2, 3, three, 0.5f);
    ck_assert_msg(ac_nbsvm_fit(&s, &d, 3, &err) == 0, "%s", err.msg);
    float *table = calloc((size_t)NB * 3, sizeof *table);
    float bias[3] = {0, 0, 0};
    ck_assert_ptr_nonnull(table);
    ac_nbsvm_fold(&s, 1.0f, table, bias);
    int32_t long_text[40];
    for (int i = 0; i < 40; i++)
        long_text[i] = 1 + (i * 7) % 23; /* words 1-9 and unseen ones */
    for (int k = 0; k <= 10; k++) {
        const int32_t *text = k < 10 ? IDS + OFF[k] : long_text;
        const int len = k < 10 ? (int)(OFF[k + 1] - OFF[k]) : 40;
        int32_t buckets[80], counts[1], lengths[1] = {len};
        float by_scores[3] = {0, 0, 0}, by_fold[3];
        const int count = wide_buckets_of_text(buckets, text, len, 2, NB);
        if (k == 10)
            ck_assert_int_gt(count, AC_WIDE_NORM_FLOOR); /* scaled down */
        double sums[3];
        ac_nbsvm_add_scores(&s, by_scores, buckets, count, 0.5f, sums);
        wide_buckets_compute(buckets, counts, text, lengths, 1, len, 2, NB);
        memcpy(by_fold, bias, sizeof by_fold);
        wide_forward(by_fold, buckets, counts, table, 1, len, 2, 3, 0.5f);
        for (int c = 0; c < 3; c++)
            ck_assert_msg(fabs(by_fold[c] - by_scores[c]) < 1e-5 * (1 + fabs(by_scores[c])),
                          "text %d class %d: %g vs %g", k, c, (double)by_fold[c],
                          (double)by_scores[c]);
    }
    /* one problem per class: the classes' scores are not tied to each other */
    ck_assert(fabs(bias[0] + bias[1] + bias[2]) > 1e-6);
    free(table);
    ac_nbsvm_free(&s);
}
END_TEST

/* The same rows and seed give the same bits, with one thread or several
 * (three classes: a problem a thread); the fold's scale multiplies every
 * value it adds. */
START_TEST(test_nbsvm_is_deterministic_and_scaled)
{
    static const int32_t three[] = {0, 0, 1, 1, 1, 2, 2, 2, 0, 2};
    ac_nbsvm a, b;
    ac_err err;
    ac_nbsvm_data d = data_of(2, 3, three, 0.5f);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    ck_assert(ac_nbsvm_fit(&a, &d, 11, &err) == 0);
    omp_set_num_threads(3);
    ck_assert(ac_nbsvm_fit(&b, &d, 11, &err) == 0);
    omp_set_num_threads(threads);
    ck_assert_int_eq(a.n_rows, b.n_rows);
    ck_assert_int_gt(a.n_rows, 9); /* unigrams and bigrams */
    ck_assert(memcmp(a.bucket, b.bucket, (size_t)a.n_rows * sizeof *a.bucket) == 0);
    ck_assert(memcmp(a.weight, b.weight, (size_t)a.n_rows * 3 * sizeof *a.weight) == 0);
    ck_assert(memcmp(a.bias, b.bias, 3 * sizeof *a.bias) == 0);
    for (int64_t k = 1; k < a.n_rows; k++)
        ck_assert_int_lt(a.bucket[k - 1], a.bucket[k]);
    float *one = calloc((size_t)NB * 3, sizeof *one), *four = calloc((size_t)NB * 3, sizeof *four);
    float bias_one[3] = {0, 0, 0}, bias_four[3] = {0, 0, 0};
    ck_assert(one && four);
    ac_nbsvm_fold(&a, 1.0f, one, bias_one);
    ac_nbsvm_fold(&a, 4.0f, four, bias_four);
    int nonzero = 0;
    for (size_t i = 0; i < (size_t)NB * 3; i++) {
        ck_assert(four[i] == 4.0f * one[i]);
        nonzero += one[i] != 0.0f;
    }
    ck_assert_int_gt(nonzero, 0);
    for (int c = 0; c < 3; c++)
        ck_assert(bias_four[c] == 4.0f * bias_one[c]);
    free(one);
    free(four);
    ac_nbsvm_free(&a);
    ac_nbsvm_free(&b);
}
END_TEST

static Suite *nbsvm_suite(void)
{
    Suite *s = suite_create("nbsvm");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_nbsvm_scores_are_the_svm_optimum);
    tcase_add_test(tc, test_nbsvm_fold_is_the_wide_path);
    tcase_add_test(tc, test_nbsvm_is_deterministic_and_scaled);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(nbsvm_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
