/* Metrics on hand-computed cases. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/metrics.h"

#define EPS 1e-12

/* Adds binary examples: truth[i], predicted[i], probability of class 1 p1[i], loss[i]. */
static void add_binary(ac_metrics *m, const int *truth, const int *pred, const float *p1,
                       const double *loss, int n)
{
    for (int i = 0; i < n; i++) {
        float probs[2] = {1.0f - p1[i], p1[i]};
        ac_err err = {{0}};
        ck_assert_int_eq(ac_metrics_add(m, truth[i], pred[i], probs, loss ? loss[i] : 0.0, &err), 0);
    }
}

START_TEST(test_perfect_binary)
{
    ac_metrics m;
    ck_assert_int_eq(ac_metrics_init(&m, 2, 4, NULL), 0);
    int truth[] = {0, 1, 0, 1}, pred[] = {0, 1, 0, 1};
    float p1[] = {0.1f, 0.9f, 0.2f, 0.8f};
    add_binary(&m, truth, pred, p1, NULL, 4);
    ck_assert_int_eq(m.count, 4);
    ck_assert_double_eq_tol(ac_metrics_accuracy(&m), 1.0, EPS);
    for (int c = 0; c < 2; c++) {
        ck_assert_double_eq_tol(ac_metrics_precision(&m, c), 1.0, EPS);
        ck_assert_double_eq_tol(ac_metrics_recall(&m, c), 1.0, EPS);
        ck_assert_double_eq_tol(ac_metrics_f1(&m, c), 1.0, EPS);
        ck_assert_int_eq(ac_metrics_support(&m, c), 2);
        ck_assert_int_eq(ac_metrics_confusion(&m, c, c), 2);
        ck_assert_int_eq(ac_metrics_confusion(&m, c, 1 - c), 0);
    }
    ck_assert_double_eq_tol(ac_metrics_macro_f1(&m), 1.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_roc_auc(&m), 1.0, EPS);
    ac_metrics_free(&m);
}
END_TEST

START_TEST(test_all_wrong_binary)
{
    ac_metrics m;
    ck_assert_int_eq(ac_metrics_init(&m, 2, 0, NULL), 0);
    int truth[] = {0, 1, 0, 1}, pred[] = {1, 0, 1, 0};
    float p1[] = {0.9f, 0.1f, 0.8f, 0.2f};
    double loss[] = {2.0, 1.0, 0.5, 0.5};
    add_binary(&m, truth, pred, p1, loss, 4);
    ck_assert_double_eq_tol(ac_metrics_accuracy(&m), 0.0, EPS);
    for (int c = 0; c < 2; c++) {
        ck_assert_double_eq_tol(ac_metrics_precision(&m, c), 0.0, EPS);
        ck_assert_double_eq_tol(ac_metrics_recall(&m, c), 0.0, EPS);
        ck_assert_double_eq_tol(ac_metrics_f1(&m, c), 0.0, EPS);
        ck_assert_int_eq(ac_metrics_confusion(&m, c, 1 - c), 2);
    }
    ck_assert_double_eq_tol(ac_metrics_macro_f1(&m), 0.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_roc_auc(&m), 0.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_mean_loss(&m), 1.0, EPS);
    ac_metrics_free(&m);
}
END_TEST

START_TEST(test_auc_ties)
{
    /* positives {0.5, 0.8}, negatives {0.5, 0.2}: pairs 0.5 (tie) + 1 + 1 + 1 over 4. */
    ac_scored a[] = {{0.5f, 1}, {0.5f, 0}, {0.8f, 1}, {0.2f, 0}};
    ck_assert_double_eq_tol(ac_roc_auc(a, 4), 0.875, EPS);
    /* scikit-learn's documented example: 0.75 */
    ac_scored b[] = {{0.1f, 0}, {0.4f, 0}, {0.35f, 1}, {0.8f, 1}};
    ck_assert_double_eq_tol(ac_roc_auc(b, 4), 0.75, EPS);
    /* every score tied: 0.5 whatever the order */
    ac_scored c[] = {{0.3f, 1}, {0.3f, 0}, {0.3f, 0}, {0.3f, 1}, {0.3f, 1}};
    ck_assert_double_eq_tol(ac_roc_auc(c, 5), 0.5, EPS);
    /* one class only: undefined */
    ac_scored d[] = {{0.3f, 1}, {0.7f, 1}};
    ck_assert(isnan(ac_roc_auc(d, 2)));
    ck_assert(isnan(ac_roc_auc(d, 0)));
}
END_TEST

/* Brute force over all (positive, negative) pairs, ties count 1/2. */
static double auc_pairwise(const ac_scored *p, int n)
{
    double wins = 0;
    long pairs = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (p[i].positive && !p[j].positive) {
                pairs++;
                wins += p[i].score > p[j].score ? 1.0 : p[i].score == p[j].score ? 0.5 : 0.0;
            }
    return wins / (double)pairs;
}

START_TEST(test_auc_matches_pairwise_with_growth)
{
    /* 3000 examples with coarse scores (many ties), added without a capacity hint. */
    enum { N = 3000 };
    static ac_scored copy[N];
    ac_metrics m;
    ck_assert_int_eq(ac_metrics_init(&m, 2, 0, NULL), 0);
    unsigned s = 12345;
    for (int i = 0; i < N; i++) {
        s = s * 1103515245u + 12345u;
        int truth = (s >> 16) & 1;
        s = s * 1103515245u + 12345u;
        int level = (int)((s >> 16) % 11);
        float p1 = (float)(level + 3 * truth) / 13.0f; /* informative but overlapping */
        float probs[2] = {1 - p1, p1};
        ck_assert_int_eq(ac_metrics_add(&m, truth, p1 >= 0.5f, probs, 0, NULL), 0);
        copy[i] = (ac_scored){p1, truth};
    }
    double expected = auc_pairwise(copy, N);
    ck_assert(expected > 0.6 && expected < 0.99);
    ck_assert_double_eq_tol(ac_metrics_roc_auc(&m), expected, 1e-9);
    ac_metrics_free(&m);
}
END_TEST

START_TEST(test_multiclass_f1)
{
    /* true 0 0 0 1 1 2 2 2 2, predicted 0 1 0 1 2 2 2 0 1 */
    int truth[] = {0, 0, 0, 1, 1, 2, 2, 2, 2}, pred[] = {0, 1, 0, 1, 2, 2, 2, 0, 1};
    ac_metrics m;
    ck_assert_int_eq(ac_metrics_init(&m, 3, 9, NULL), 0);
    for (int i = 0; i < 9; i++)
        ck_assert_int_eq(ac_metrics_add(&m, truth[i], pred[i], NULL, 0.25 * i, NULL), 0);
    int64_t expected_confusion[3][3] = {{2, 1, 0}, {0, 1, 1}, {1, 1, 2}};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            ck_assert_int_eq(ac_metrics_confusion(&m, i, j), expected_confusion[i][j]);
    ck_assert_double_eq_tol(ac_metrics_accuracy(&m), 5.0 / 9.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_precision(&m, 0), 2.0 / 3.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_recall(&m, 0), 2.0 / 3.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_f1(&m, 0), 2.0 / 3.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_precision(&m, 1), 1.0 / 3.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_recall(&m, 1), 0.5, EPS);
    ck_assert_double_eq_tol(ac_metrics_f1(&m, 1), 0.4, EPS);
    ck_assert_double_eq_tol(ac_metrics_precision(&m, 2), 2.0 / 3.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_recall(&m, 2), 0.5, EPS);
    ck_assert_double_eq_tol(ac_metrics_f1(&m, 2), 4.0 / 7.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_macro_f1(&m), (2.0 / 3.0 + 0.4 + 4.0 / 7.0) / 3.0, EPS);
    ck_assert_int_eq(ac_metrics_support(&m, 2), 4);
    ck_assert_int_eq(ac_metrics_predicted(&m, 1), 3);
    ck_assert_double_eq_tol(ac_metrics_mean_loss(&m), 0.25 * 36 / 9.0, EPS);
    ck_assert(isnan(ac_metrics_roc_auc(&m))); /* not binary */
    ac_metrics_free(&m);
}
END_TEST

START_TEST(test_zero_division)
{
    /* Class 2 never occurs and is never predicted; class 1 occurs but is never predicted. */
    ac_metrics m;
    ck_assert_int_eq(ac_metrics_init(&m, 3, 0, NULL), 0);
    ck_assert_int_eq(ac_metrics_add(&m, 0, 0, NULL, 0, NULL), 0);
    ck_assert_int_eq(ac_metrics_add(&m, 1, 0, NULL, 0, NULL), 0);
    ck_assert_double_eq_tol(ac_metrics_precision(&m, 0), 0.5, EPS);
    ck_assert_double_eq_tol(ac_metrics_recall(&m, 0), 1.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_f1(&m, 0), 2.0 / 3.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_precision(&m, 1), 0.0, EPS); /* 0/0 */
    ck_assert_double_eq_tol(ac_metrics_recall(&m, 1), 0.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_f1(&m, 1), 0.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_precision(&m, 2), 0.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_recall(&m, 2), 0.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_f1(&m, 2), 0.0, EPS);
    ck_assert(!isnan(ac_metrics_macro_f1(&m)));
    ck_assert_double_eq_tol(ac_metrics_macro_f1(&m), (2.0 / 3.0) / 3.0, EPS);
    /* Nothing added: everything 0, AUC undefined. */
    ac_metrics_reset(&m);
    ck_assert_int_eq(m.count, 0);
    ck_assert_double_eq_tol(ac_metrics_accuracy(&m), 0.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_mean_loss(&m), 0.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_macro_f1(&m), 0.0, EPS);
    ck_assert_int_eq(ac_metrics_confusion(&m, 1, 0), 0);
    ac_metrics_free(&m);

    ac_metrics b;
    ck_assert_int_eq(ac_metrics_init(&b, 2, 0, NULL), 0);
    ck_assert(isnan(ac_metrics_roc_auc(&b)));
    float probs[2] = {0.4f, 0.6f};
    ck_assert_int_eq(ac_metrics_add(&b, 1, 1, probs, 0, NULL), 0);
    ck_assert(isnan(ac_metrics_roc_auc(&b))); /* positives only */
    ac_metrics_free(&b);
}
END_TEST

START_TEST(test_bad_input)
{
    ac_metrics m;
    ac_err err = {{0}};
    ck_assert_int_eq(ac_metrics_init(&m, 1, 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "n_classes"));
    ck_assert_int_eq(ac_metrics_init(&m, 2, 0, &err), 0);
    float probs[2] = {0.5f, 0.5f};
    ck_assert_int_eq(ac_metrics_add(&m, 2, 0, probs, 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "true class 2"));
    ck_assert_int_eq(ac_metrics_add(&m, 0, -1, probs, 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "predicted class -1"));
    ck_assert_int_eq(ac_metrics_add(&m, 0, 0, NULL, 0, &err), -1); /* binary needs probs */
    ck_assert_int_eq(m.count, 0);
    ac_metrics_free(&m);
}
END_TEST

START_TEST(test_argmax)
{
    float a[] = {0.2f, 0.5f, 0.3f};
    ck_assert_int_eq(ac_argmax(a, 3), 1);
    float tie[] = {0.5f, 0.5f};
    ck_assert_int_eq(ac_argmax(tie, 2), 0);
    float last[] = {0.1f, 0.2f, 0.2f, 0.5f};
    ck_assert_int_eq(ac_argmax(last, 4), 3);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_perfect_binary);
    tcase_add_test(tc, test_all_wrong_binary);
    tcase_add_test(tc, test_auc_ties);
    tcase_add_test(tc, test_auc_matches_pairwise_with_growth);
    tcase_add_test(tc, test_multiclass_f1);
    tcase_add_test(tc, test_zero_division);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_argmax);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failures = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failures != 0;
}
