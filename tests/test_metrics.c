/* Metrics on hand-computed cases; calibration figures, the temperature fit
 * and the reliability diagram. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../src/train/curves.h"
#include "attnctl/metrics.h"
#include "attnctl/rng.h"
#include "attnctl/strbuf.h"

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

/* ------------------------------------------------------------ calibration */

START_TEST(test_ece_confident_and_right)
{
    /* Ten examples, all predicted right with probability 0.95: one bin (the
     * last), accuracy 1, confidence 0.95, so ECE = 0.05; Brier = 0.05^2. */
    ac_metrics m;
    ck_assert_int_eq(ac_metrics_init(&m, 2, 0, NULL), 0);
    for (int i = 0; i < 10; i++) {
        int truth = i % 2;
        float probs[2] = {truth ? 0.05f : 0.95f, truth ? 0.95f : 0.05f};
        ck_assert_int_eq(ac_metrics_add(&m, truth, truth, probs, 0, NULL), 0);
    }
    ck_assert_double_eq_tol(ac_metrics_ece(&m), 0.05, 1e-7);
    ck_assert_double_eq_tol(ac_metrics_brier(&m), 0.0025, 1e-8);
    ac_reliability r;
    ck_assert_int_eq(ac_metrics_reliability(&m, &r, NULL), 0);
    ck_assert_int_eq(r.count[AC_CALIBRATION_BINS - 1], 10);
    ck_assert_double_eq_tol(r.accuracy[AC_CALIBRATION_BINS - 1], 1.0, EPS);
    ck_assert_double_eq_tol(r.confidence[AC_CALIBRATION_BINS - 1], 0.95, 1e-7);
    for (int b = 0; b < AC_CALIBRATION_BINS - 1; b++) {
        ck_assert_int_eq(r.count[b], 0);
        ck_assert(isnan(r.accuracy[b]) && isnan(r.confidence[b]));
    }
    ac_metrics_free(&m);
}
END_TEST

/* The two-bin case of the SVG test too: 6 examples at confidence 0.75
 * (bin 11 of 15), 3 of them right; 2 at confidence 0.5 (bin 7), both right.
 * ECE = 6/8 * |0.5 - 0.75| + 2/8 * |1 - 0.5| = 0.1875 + 0.125 = 0.3125. */
static void add_two_bins(ac_metrics *m)
{
    for (int i = 0; i < 6; i++) {
        float probs[2] = {0.25f, 0.75f};
        int truth = i < 3 ? 1 : 0;
        ck_assert_int_eq(ac_metrics_add(m, truth, 1, probs, 0, NULL), 0);
    }
    for (int i = 0; i < 2; i++) {
        float probs[2] = {0.5f, 0.5f};
        ck_assert_int_eq(ac_metrics_add(m, 0, 0, probs, 0, NULL), 0);
    }
}

START_TEST(test_ece_two_bins)
{
    ac_metrics m;
    ck_assert_int_eq(ac_metrics_init(&m, 2, 0, NULL), 0);
    add_two_bins(&m);
    ck_assert_double_eq_tol(ac_metrics_ece(&m), 0.3125, EPS);
    /* Brier: 3 x 0.25^2 + 3 x 0.75^2 + 2 x 0.5^2, over 8 */
    ck_assert_double_eq_tol(ac_metrics_brier(&m), (3 * 0.0625 + 3 * 0.5625 + 2 * 0.25) / 8, EPS);
    ac_reliability r;
    ck_assert_int_eq(ac_metrics_reliability(&m, &r, NULL), 0);
    int64_t total = 0;
    for (int b = 0; b < AC_CALIBRATION_BINS; b++)
        total += r.count[b];
    ck_assert_int_eq(total, 8);
    ck_assert_int_eq(r.count[11], 6);
    ck_assert_double_eq_tol(r.accuracy[11], 0.5, EPS);
    ck_assert_double_eq_tol(r.confidence[11], 0.75, EPS);
    ck_assert_int_eq(r.count[7], 2);
    ck_assert_double_eq_tol(r.accuracy[7], 1.0, EPS);
    ck_assert_double_eq_tol(r.confidence[7], 0.5, EPS);
    /* reset forgets the calibration sums too */
    ac_metrics_reset(&m);
    ck_assert_double_eq_tol(ac_metrics_ece(&m), 0.0, EPS);
    ck_assert_double_eq_tol(ac_metrics_brier(&m), 0.0, EPS);
    ck_assert_int_eq(ac_metrics_reliability(&m, &r, NULL), 0);
    for (int b = 0; b < AC_CALIBRATION_BINS; b++)
        ck_assert_int_eq(r.count[b], 0);
    ac_metrics_free(&m);
}
END_TEST

START_TEST(test_calibration_bin_edges)
{
    /* Bin i holds (i/15, (i+1)/15]. 0.6f is a little above 9/15, the float
     * below it a little below: bins 9 and 8 (float arithmetic would round
     * 0.6f * 15 to 9 and put both in bin 8). 1 goes to the last bin. */
    ac_metrics m;
    ck_assert_int_eq(ac_metrics_init(&m, 3, 0, NULL), 0);
    float above[3] = {0.6f, 0.2f, 0.2f};
    float below[3] = {nextafterf(0.6f, 0.0f), 0.2f, 0.2f};
    float one[3] = {0.0f, 1.0f, 0.0f};
    float third[3] = {0.34f, 0.33f, 0.33f}; /* 0.34 * 15 = 5.1: bin 5 */
    ck_assert_int_eq(ac_metrics_add(&m, 0, 0, above, 0, NULL), 0);
    ck_assert_int_eq(ac_metrics_add(&m, 0, 0, below, 0, NULL), 0);
    ck_assert_int_eq(ac_metrics_add(&m, 1, 1, one, 0, NULL), 0);
    ck_assert_int_eq(ac_metrics_add(&m, 2, 0, third, 0, NULL), 0);
    ac_reliability r;
    ck_assert_int_eq(ac_metrics_reliability(&m, &r, NULL), 0);
    ck_assert_int_eq(r.count[9], 1);
    ck_assert_int_eq(r.count[8], 1);
    ck_assert_int_eq(r.count[14], 1);
    ck_assert_int_eq(r.count[5], 1);
    ck_assert_double_eq_tol(r.accuracy[5], 0.0, EPS);
    ac_metrics_free(&m);
}
END_TEST

START_TEST(test_correct_means_predicted_class)
{
    /* A thresholded prediction: class 0 predicted (and right) although
     * p_1 = 0.7. Confidence is still the largest probability, 0.7, and the
     * example counts as right: ECE = |1 - 0.7|. */
    ac_metrics m;
    ck_assert_int_eq(ac_metrics_init(&m, 2, 0, NULL), 0);
    float probs[2] = {0.3f, 0.7f};
    ck_assert_int_eq(ac_metrics_add(&m, 0, 0, probs, 0, NULL), 0);
    ck_assert_double_eq_tol(ac_metrics_ece(&m), 1.0 - 0.7f, EPS);
    ck_assert_double_eq_tol(ac_metrics_brier(&m), 0.7f * 0.7f, 1e-7);
    ac_metrics_free(&m);
}
END_TEST

START_TEST(test_brier_binary_and_multiclass)
{
    /* Binary form: mean (p_1 - y)^2 = (0.0625 + 0.5625 + 0.25) / 3, not twice that. */
    ac_metrics b;
    ck_assert_int_eq(ac_metrics_init(&b, 2, 0, NULL), 0);
    int truth[] = {1, 0, 0}, pred[] = {1, 1, 0};
    float p1[] = {0.75f, 0.75f, 0.5f};
    add_binary(&b, truth, pred, p1, NULL, 3);
    ck_assert_double_eq_tol(ac_metrics_brier(&b), 0.875 / 3, EPS);
    ac_metrics_free(&b);

    /* Multi-class form: sum over classes, then mean over examples.
     * {0.5, 0.25, 0.25} true 0: 0.25 + 0.0625 + 0.0625 = 0.375;
     * {0.25, 0.5, 0.25} true 2: 0.0625 + 0.25 + 0.5625 = 0.875. */
    ac_metrics m;
    ck_assert_int_eq(ac_metrics_init(&m, 3, 0, NULL), 0);
    float a[3] = {0.5f, 0.25f, 0.25f}, c[3] = {0.25f, 0.5f, 0.25f};
    ck_assert_int_eq(ac_metrics_add(&m, 0, 0, a, 0, NULL), 0);
    ck_assert_int_eq(ac_metrics_add(&m, 2, 1, c, 0, NULL), 0);
    ck_assert_double_eq_tol(ac_metrics_brier(&m), (0.375 + 0.875) / 2, EPS);
    /* both confidences 0.5 (bin 7), one right: ECE = |0.5 - 0.5| = 0 */
    ck_assert_double_eq_tol(ac_metrics_ece(&m), 0.0, EPS);
    ac_metrics_free(&m);
}
END_TEST

START_TEST(test_calibration_nan_without_probs)
{
    ac_metrics m;
    ac_err err = {{0}};
    ck_assert_int_eq(ac_metrics_init(&m, 3, 0, NULL), 0);
    float probs[3] = {0.5f, 0.25f, 0.25f};
    ck_assert_int_eq(ac_metrics_add(&m, 0, 0, probs, 0, NULL), 0);
    ck_assert(isfinite(ac_metrics_ece(&m)) && isfinite(ac_metrics_brier(&m)));
    ck_assert_int_eq(ac_metrics_add(&m, 1, 0, NULL, 0, NULL), 0);
    ck_assert(isnan(ac_metrics_ece(&m)));
    ck_assert(isnan(ac_metrics_brier(&m)));
    ac_reliability r;
    ck_assert_int_eq(ac_metrics_reliability(&m, &r, &err), -1);
    ck_assert_msg(strstr(err.msg, "1 of 2 examples") != NULL, "%s", err.msg);
    for (int b = 0; b < AC_CALIBRATION_BINS; b++)
        ck_assert_int_eq(r.count[b], 0);
    /* the other figures do not suffer */
    ck_assert_double_eq_tol(ac_metrics_accuracy(&m), 0.5, EPS);

    /* a probability that is not finite is as good as none */
    ac_metrics_reset(&m);
    float broken[3] = {NAN, 0.5f, 0.5f};
    ck_assert_int_eq(ac_metrics_add(&m, 1, 1, broken, 0, NULL), 0);
    ck_assert(isnan(ac_metrics_ece(&m)));
    ck_assert(isnan(ac_metrics_brier(&m)));
    /* after a reset, a clean start */
    ac_metrics_reset(&m);
    ck_assert_int_eq(ac_metrics_add(&m, 0, 0, probs, 0, NULL), 0);
    ck_assert_double_eq_tol(ac_metrics_ece(&m), 0.5, EPS);
    ac_metrics_free(&m);
}
END_TEST

/* ------------------------------------------------------ temperature scaling */

enum { TEMP_C = 3, TEMP_N = 20000 };

/* Logits T0 * z with z ~ N(0, 2^2) per class, and labels drawn from
 * softmax(z): the calibrated temperature of these logits is T0. */
static void make_scaled_logits(float *logits, int32_t *labels, double t0, uint64_t seed)
{
    uint64_t key_z = ac_rng_key(seed, 1), key_label = ac_rng_key(seed, 2);
    for (int64_t i = 0; i < TEMP_N; i++) {
        double z[TEMP_C], p[TEMP_C], top = -INFINITY, sum = 0;
        for (int c = 0; c < TEMP_C; c++) {
            z[c] = 2.0 * ac_rng_normal(key_z, (uint64_t)(i * TEMP_C + c));
            top = z[c] > top ? z[c] : top;
        }
        for (int c = 0; c < TEMP_C; c++)
            sum += p[c] = exp(z[c] - top);
        double u = ac_rng_uniform(key_label, (uint64_t)i) * sum, cumulative = 0;
        int label = TEMP_C - 1;
        for (int c = 0; c < TEMP_C; c++) {
            cumulative += p[c];
            if (u < cumulative) {
                label = c;
                break;
            }
        }
        labels[i] = label;
        for (int c = 0; c < TEMP_C; c++)
            logits[i * TEMP_C + c] = (float)(t0 * z[c]);
    }
}

START_TEST(test_temperature_recovers_known_value)
{
    static float logits[TEMP_N * TEMP_C];
    static int32_t labels[TEMP_N];
    const double t0s[] = {2.5, 0.5};
    for (int k = 0; k < 2; k++) {
        double t0 = t0s[k];
        make_scaled_logits(logits, labels, t0, 42 + (uint64_t)k);
        double t = 0;
        ac_err err = {{0}};
        ck_assert_msg(ac_temperature_fit(logits, labels, TEMP_N, TEMP_C, &t, &err) == 0, "%s",
                      err.msg);
        ck_assert_msg(fabs(t / t0 - 1) < 0.03, "fitted T %.4f, true %.4f", t, t0);
        double nll = ac_temperature_nll(logits, labels, TEMP_N, TEMP_C, t);
        ck_assert(nll < ac_temperature_nll(logits, labels, TEMP_N, TEMP_C, 1.0));
        ck_assert(nll < ac_temperature_nll(logits, labels, TEMP_N, TEMP_C, t0 * 1.5));
        ck_assert(nll < ac_temperature_nll(logits, labels, TEMP_N, TEMP_C, t0 / 1.5));
        /* a minimum: a step of 1e-3 either way does not do better */
        ck_assert(nll <= ac_temperature_nll(logits, labels, TEMP_N, TEMP_C, t * 1.001));
        ck_assert(nll <= ac_temperature_nll(logits, labels, TEMP_N, TEMP_C, t / 1.001));
        /* deterministic to the bit */
        double again = 0;
        ck_assert_int_eq(ac_temperature_fit(logits, labels, TEMP_N, TEMP_C, &again, NULL), 0);
        ck_assert(memcmp(&t, &again, sizeof t) == 0);
    }
}
END_TEST

START_TEST(test_temperature_nll_by_hand)
{
    /* Two classes, logits {0, log 3}: p = {1/4, 3/4}. Label 1: NLL = log(4/3);
     * at T = 2 the logits halve: p_1 = sqrt(3) / (1 + sqrt(3)). */
    float logits[2] = {0.0f, (float)log(3.0)};
    int32_t label[1] = {1};
    ck_assert_double_eq_tol(ac_temperature_nll(logits, label, 1, 2, 1.0), log(4.0 / 3.0), 1e-6);
    ck_assert_double_eq_tol(ac_temperature_nll(logits, label, 1, 2, 2.0),
                            -log(sqrt(3.0) / (1 + sqrt(3.0))), 1e-6);
    ck_assert_double_eq_tol(ac_temperature_nll(logits, label, 0, 2, 2.0), 0.0, EPS);
}
END_TEST

START_TEST(test_temperature_edge_cases)
{
    double t = -1;
    /* no examples, or logits that do not depend on T: T = 1 */
    ck_assert_int_eq(ac_temperature_fit(NULL, NULL, 0, 2, &t, NULL), 0);
    ck_assert_double_eq(t, 1.0);
    float flat[6] = {0.5f, 0.5f, -2.0f, -2.0f, 3.0f, 3.0f};
    int32_t flat_labels[3] = {0, 1, 1};
    t = -1;
    ck_assert_int_eq(ac_temperature_fit(flat, flat_labels, 3, 2, &t, NULL), 0);
    ck_assert_double_eq(t, 1.0);
    /* every example right by a wide margin: sharper is always better, T at the lower bound */
    float right[4] = {4.0f, -4.0f, -3.0f, 3.0f};
    int32_t right_labels[2] = {0, 1};
    ck_assert_int_eq(ac_temperature_fit(right, right_labels, 2, 2, &t, NULL), 0);
    ck_assert_double_eq(t, AC_TEMPERATURE_MIN);
    /* every example wrong: flatter is always better, T at the upper bound */
    int32_t wrong_labels[2] = {1, 0};
    ck_assert_int_eq(ac_temperature_fit(right, wrong_labels, 2, 2, &t, NULL), 0);
    ck_assert_double_eq(t, AC_TEMPERATURE_MAX);
}
END_TEST

START_TEST(test_temperature_errors)
{
    float logits[6] = {1.0f, 2.0f, 0.5f, -1.0f, 0.0f, 3.0f};
    int32_t labels[2] = {2, 0};
    double t = 7;
    ac_err err = {{0}};
    ck_assert_int_eq(ac_temperature_fit(logits, labels, 2, 3, &t, &err), 0);
    ck_assert(t > 0);

    t = 7;
    int32_t high[2] = {0, 3};
    ck_assert_int_eq(ac_temperature_fit(logits, high, 2, 3, &t, &err), -1);
    ck_assert_msg(strstr(err.msg, "example 1") && strstr(err.msg, "label 3"), "%s", err.msg);
    int32_t negative[2] = {-1, 0};
    ck_assert_int_eq(ac_temperature_fit(logits, negative, 2, 3, &t, &err), -1);
    ck_assert_msg(strstr(err.msg, "example 0") && strstr(err.msg, "label -1"), "%s", err.msg);
    ck_assert_double_eq(t, 7); /* untouched on failure */

    logits[4] = NAN;
    ck_assert_int_eq(ac_temperature_fit(logits, labels, 2, 3, &t, &err), -1);
    ck_assert_msg(strstr(err.msg, "example 1") && strstr(err.msg, "logit 1"), "%s", err.msg);
    logits[4] = INFINITY;
    ck_assert_int_eq(ac_temperature_fit(logits, labels, 2, 3, &t, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "inf"));
    logits[4] = 0.0f;

    ck_assert_int_eq(ac_temperature_fit(logits, labels, 2, 1, &t, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "2 classes"));
    ck_assert_int_eq(ac_temperature_fit(logits, labels, -1, 3, &t, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "negative"));
    ck_assert_double_eq(t, 7);
}
END_TEST

/* -------------------------------------------------------- reliability SVG */

static int count_substr(const char *s, const char *sub)
{
    int n = 0;
    for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub))
        n++;
    return n;
}

static void assert_svg_document(const char *svg)
{
    ck_assert_ptr_nonnull(svg);
    ck_assert_msg(strncmp(svg, "<svg", 4) == 0, "starts with %.20s", svg);
    size_t n = strlen(svg);
    ck_assert(n >= 7 && strcmp(svg + n - 7, "</svg>\n") == 0);
    ck_assert_int_eq(count_substr(svg, "<svg"), 1);
    ck_assert_int_eq(count_substr(svg, "<g"), count_substr(svg, "</g>"));
    ck_assert_int_eq(count_substr(svg, "<text"), count_substr(svg, "</text>"));
}

/* The text buffer every drawing is built in (attnctl/strbuf.h): growth past
 * its first block, escaping, and the text taken out whole. */
START_TEST(test_strbuf)
{
    ac_strbuf b;
    ac_strbuf_init(&b);
    char *empty = ac_strbuf_take(&b);
    ck_assert_ptr_nonnull(empty);
    ck_assert_str_eq(empty, "");
    free(empty);
    for (int i = 0; i < 1000; i++)
        ac_strbuf_printf(&b, "%04d,", i);
    ck_assert_uint_eq(b.len, 5000);
    ck_assert(strncmp(b.data + 4995, "0999,", 5) == 0 && b.data[5000] == '\0');
    ac_strbuf_free(&b);
    ac_strbuf_xml_text(&b, "a<b>&\"c\" don't\x01\tx\n");
    ac_strbuf_puts(&b, "|");
    ac_strbuf_put(&b, "xyz", 2);
    char *text = ac_strbuf_take(&b);
    ck_assert_str_eq(text, "a&lt;b&gt;&amp;&quot;c&quot; don&#39;t \tx\n|xy");
    ck_assert_ptr_null(b.data);
    free(text);
    /* A failed allocation: writes ignored, no text. */
    b.failed = 1;
    ac_strbuf_puts(&b, "lost");
    ck_assert_ptr_null(ac_strbuf_take(&b));
}
END_TEST

START_TEST(test_calibration_svg)
{
    ac_metrics m;
    ck_assert_int_eq(ac_metrics_init(&m, 2, 0, NULL), 0);
    add_two_bins(&m);
    ac_reliability r;
    ck_assert_int_eq(ac_metrics_reliability(&m, &r, NULL), 0);
    char *svg = ac_calibration_svg(&r, ac_metrics_ece(&m), (long)m.count, "Validation <ep 3> & co");
    assert_svg_document(svg);
    ck_assert_ptr_nonnull(strstr(svg, "ECE 0.3125"));
    ck_assert_ptr_nonnull(strstr(svg, "N = 8"));
    ck_assert_ptr_nonnull(strstr(svg, "Validation &lt;ep 3&gt; &amp; co"));
    ck_assert_ptr_null(strstr(svg, "<ep 3>"));
    /* one bar per non-empty bin, each with its figures */
    ck_assert_int_eq(count_substr(svg, "<title>confidence ("), 2);
    ck_assert_ptr_nonnull(strstr(svg, "6 examples, accuracy 0.5000, mean confidence 0.7500"));
    ck_assert_ptr_nonnull(strstr(svg, "2 examples, accuracy 1.0000, mean confidence 0.5000"));
    ck_assert_ptr_nonnull(strstr(svg, "perfect calibration"));
    ck_assert_ptr_null(strstr(svg, "no data"));
    /* the fuller bin is darker: its blue channel is lower in the shading */
    const char *six = strstr(svg, "6 examples"), *two = strstr(svg, "2 examples");
    const char *fill6 = six, *fill2 = two;
    while (fill6 > svg && strncmp(fill6, "fill=\"#", 7) != 0)
        fill6--;
    while (fill2 > svg && strncmp(fill2, "fill=\"#", 7) != 0)
        fill2--;
    ck_assert(strtol(fill6 + 7, NULL, 16) < strtol(fill2 + 7, NULL, 16));
    free(svg);

    /* no data: still a document, saying so */
    char *empty = ac_calibration_svg(NULL, NAN, 0, NULL);
    assert_svg_document(empty);
    ck_assert_ptr_nonnull(strstr(empty, "no data"));
    ck_assert_ptr_nonnull(strstr(empty, "ECE n/a"));
    ck_assert_ptr_nonnull(strstr(empty, "N = 0"));
    free(empty);
    ac_metrics_reset(&m);
    ck_assert_int_eq(ac_metrics_reliability(&m, &r, NULL), 0);
    empty = ac_calibration_svg(&r, ac_metrics_ece(&m), 0, "Empty");
    assert_svg_document(empty);
    ck_assert_ptr_nonnull(strstr(empty, "no data"));
    ck_assert_ptr_nonnull(strstr(empty, "ECE 0.0000"));
    free(empty);
    ac_metrics_free(&m);
}
END_TEST

/* A point of a run with members: member 0 and soup 0 for a run of one model. */
static ac_metric_point curve_point(long step, int member, int soup, double loss, double acc)
{
    return (ac_metric_point){.step = step, .epoch = NAN, .train_loss = soup ? NAN : loss + 0.1,
                             .val_loss = loss, .val_accuracy = acc, .span_accuracy = NAN,
                             .span_majority = NAN, .temperature = NAN, .val_ece = NAN,
                             .lr = NAN, .tokens_per_s = NAN, .elapsed_s = NAN,
                             .member = member, .soup = soup, .mean_val_accuracy = NAN,
                             .worst_member_accuracy = NAN};
}

START_TEST(test_curves_svg_members)
{
    /* One model: no member labels, no diamond, a circle per figure. */
    ac_metric_point one[] = {curve_point(10, 0, 0, 0.5, 0.80), curve_point(20, 0, 0, 0.4, 0.85)};
    char *svg = ac_curves_svg(one, 2, NULL);
    assert_svg_document(svg);
    ck_assert_ptr_null(strstr(svg, "member"));
    ck_assert_int_eq(count_substr(svg, "<polygon"), 0);
    ck_assert_int_eq(count_substr(svg, "<circle"), 6);
    free(svg);

    /* Two members and their mean: each member named (once, in the loss
     * panel), the mean a diamond in both panels and in the legend (not a
     * circle on the last member's curve), named with its figure; the
     * members' curves are not joined. */
    ac_metric_point two[] = {curve_point(10, 1, 0, 0.5, 0.80), curve_point(20, 1, 0, 0.4, 0.85),
                             curve_point(30, 2, 0, 0.5, 0.81), curve_point(40, 2, 0, 0.4, 0.86),
                             curve_point(40, 0, 1, 0.35, 0.875)};
    svg = ac_curves_svg(two, 5, NULL);
    assert_svg_document(svg);
    ck_assert_int_eq(count_substr(svg, ">member 1</text>"), 1);
    ck_assert_int_eq(count_substr(svg, ">member 2</text>"), 1);
    ck_assert_int_eq(count_substr(svg, "<polygon"), 3);
    ck_assert_int_eq(count_substr(svg, "<circle"), 12);
    ck_assert_ptr_nonnull(strstr(svg, "mean of 2 members 0.8750</text>"));
    ck_assert_ptr_null(strstr(svg, "kept"));
    ck_assert_int_eq(count_substr(svg, " M"), 3 * 2); /* 3 series, 2 members each */
    free(svg);

    /* The mean read below every member: member 2 was kept, the mean is a
     * hollow diamond at its own figure, inside the panel's range; the legend
     * names both. */
    two[4].val_accuracy = 0.86;
    two[4].kept_member = 2;
    two[4].mean_val_accuracy = 0.70;
    svg = ac_curves_svg(two, 5, NULL);
    assert_svg_document(svg);
    ck_assert_ptr_nonnull(strstr(svg, "member 2 kept 0.8600</text>"));
    ck_assert_ptr_nonnull(strstr(svg, "mean 0.7000 (below every member)</text>"));
    ck_assert_int_eq(count_substr(svg, "<polygon"), 5);
    ck_assert_ptr_nonnull(strstr(svg, ">0.70</text>")); /* the accuracy axis reaches the mean */
    free(svg);
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
    TCase *calibration = tcase_create("calibration");
    tcase_add_test(calibration, test_ece_confident_and_right);
    tcase_add_test(calibration, test_ece_two_bins);
    tcase_add_test(calibration, test_calibration_bin_edges);
    tcase_add_test(calibration, test_correct_means_predicted_class);
    tcase_add_test(calibration, test_brier_binary_and_multiclass);
    tcase_add_test(calibration, test_calibration_nan_without_probs);
    tcase_add_test(calibration, test_temperature_recovers_known_value);
    tcase_add_test(calibration, test_temperature_nll_by_hand);
    tcase_add_test(calibration, test_temperature_edge_cases);
    tcase_add_test(calibration, test_temperature_errors);
    tcase_add_test(calibration, test_strbuf);
    tcase_add_test(calibration, test_calibration_svg);
    tcase_add_test(calibration, test_curves_svg_members);
    suite_add_tcase(s, calibration);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failures = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failures != 0;
}
