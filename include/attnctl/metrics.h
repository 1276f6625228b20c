/* Classification metrics shared by `attnctl eval`, `attnctl train`
 * (validation) and the tests: accuracy, per-class precision / recall / F1,
 * macro-F1, the confusion matrix, binary ROC-AUC, the mean loss and the
 * calibration figures (expected calibration error, reliability bins, Brier
 * score); and the temperature-scaling fit.
 *
 * Use: ac_metrics_init, then ac_metrics_add once per example, then read the
 * figures with the getters; ac_metrics_free at the end. ac_metrics_reset
 * starts over without reallocating (e.g. one accumulator per validation run).
 *
 * Definitions (the same as scikit-learn with zero_division=0):
 *  - precision_c = TP / (TP + FP), recall_c = TP / (TP + FN),
 *    F1_c = 2 TP / (2 TP + FP + FN); a 0/0 is defined as 0.
 *  - macro-F1 = the unweighted mean of F1_c over all classes of the model
 *    (a class absent from the data and never predicted counts as F1 = 0).
 *  - ROC-AUC (binary only) of the score "probability of class 1" against
 *    "true class is 1", computed from ranks (Mann-Whitney U) with tied scores
 *    given their average rank; NaN when the data hold only one class.
 *  - accuracy and mean loss of zero examples are 0.
 *
 * Calibration (each example's confidence is its largest probability,
 * max_c p_c; it is "correct" when predicted_class == true_class):
 *  - the confidences fall into AC_CALIBRATION_BINS equal-width bins, bin i
 *    covering (i/15, (i+1)/15], the first bin also holding 0;
 *  - ECE = sum over bins of (n_bin / N) * |accuracy_bin - mean confidence_bin|;
 *  - Brier score: for 2 classes the binary form, mean (p_1 - y)^2 with y = 1
 *    when the true class is 1, else 0; for C > 2 classes the multi-class
 *    form, mean sum_c (p_c - [c == true class])^2 (it ranges over [0, 2];
 *    for C = 2 it would be twice the binary form, which is why the binary
 *    form is used there, as scikit-learn's brier_score_loss does).
 *  ECE and Brier of zero examples are 0. They are NaN as soon as one example
 *  came without usable probabilities (probs NULL, or a probability that is
 *  not finite), since they would then describe only part of the data. */
#ifndef ATTNCTL_METRICS_H
#define ATTNCTL_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "attnctl/error.h"

typedef struct {
    float score;      /* probability of class 1 */
    int32_t positive; /* 1 when the true class is 1 */
} ac_scored;

#define AC_CALIBRATION_BINS 15

/* A reliability diagram's data: the examples of each confidence bin. */
typedef struct {
    int64_t count[AC_CALIBRATION_BINS];     /* examples whose confidence falls in the bin */
    double confidence[AC_CALIBRATION_BINS]; /* their mean confidence; NAN when count is 0 */
    double accuracy[AC_CALIBRATION_BINS];   /* the share predicted right; NAN when count is 0 */
} ac_reliability;

typedef struct {
    int n_classes;
    int64_t count;       /* examples added */
    int64_t *confusion;  /* [C * C]: row = true class, column = predicted class */
    double loss_sum;
    /* binary models only: one (score, truth) pair per example, for ROC-AUC */
    ac_scored *scored;
    int64_t n_scored, cap_scored;
    /* calibration: sums per confidence bin, in the order examples were added */
    int64_t bin_count[AC_CALIBRATION_BINS];
    int64_t bin_correct[AC_CALIBRATION_BINS];
    double bin_confidence_sum[AC_CALIBRATION_BINS];
    double brier_sum;
    int64_t n_without_probs; /* examples added without usable probabilities */
} ac_metrics;

/* expected_count is a capacity hint for the ROC-AUC scores (0 if unknown). */
int ac_metrics_init(ac_metrics *m, int n_classes, int64_t expected_count, ac_err *err);
void ac_metrics_reset(ac_metrics *m);
void ac_metrics_free(ac_metrics *m);

/* Adds one example: its true class, the predicted class, the class
 * probabilities probs[n_classes] (for ROC-AUC when n_classes == 2, and for the
 * calibration figures; may be NULL when n_classes > 2, which makes the
 * calibration figures NaN) and its loss. Fails (naming the bad value) on a
 * class out of range or when growing the score array fails. */
int ac_metrics_add(ac_metrics *m, int true_class, int predicted_class, const float *probs,
                   double loss, ac_err *err);

/* Index of the largest probability; ties go to the lowest index. */
int ac_argmax(const float *probs, int n);

int64_t ac_metrics_confusion(const ac_metrics *m, int true_class, int predicted_class);
double ac_metrics_accuracy(const ac_metrics *m);
double ac_metrics_precision(const ac_metrics *m, int c);
double ac_metrics_recall(const ac_metrics *m, int c);
double ac_metrics_f1(const ac_metrics *m, int c);
int64_t ac_metrics_support(const ac_metrics *m, int c);  /* examples whose true class is c */
int64_t ac_metrics_predicted(const ac_metrics *m, int c); /* examples predicted as c */
double ac_metrics_macro_f1(const ac_metrics *m);
double ac_metrics_mean_loss(const ac_metrics *m);
/* Sorts the stored scores (hence not const). NaN unless binary with both classes present. */
double ac_metrics_roc_auc(ac_metrics *m);

/* Expected calibration error (see the top of this file); NaN when some
 * example came without probabilities, 0 for zero examples. */
double ac_metrics_ece(const ac_metrics *m);
/* Brier score (binary form for 2 classes, multi-class form above); NaN and 0
 * as for the ECE. */
double ac_metrics_brier(const ac_metrics *m);
/* Fills *r with the examples of each confidence bin. Fails when some example
 * came without probabilities (r is then all empty bins). */
int ac_metrics_reliability(const ac_metrics *m, ac_reliability *r, ac_err *err);

/* ROC-AUC of arbitrary (score, truth) pairs; sorts `pairs` in place.
 * NaN when all pairs are positive or all negative. */
double ac_roc_auc(ac_scored *pairs, int64_t n);

/* Temperature scaling (Guo et al. 2017): dividing the logits by one T > 0
 * keeps every prediction and changes only the confidences.
 *
 * ac_temperature_nll: the mean negative log-likelihood of labels[i] under
 * softmax(logits[i * C .. i * C + C) / temperature), summed in double in
 * index order; 0 for n == 0. The inputs must be valid (as checked by
 * ac_temperature_fit).
 *
 * ac_temperature_fit: the T in [AC_TEMPERATURE_MIN, AC_TEMPERATURE_MAX] that
 * minimises that NLL, found by golden-section search on log T to about 1e-7
 * (the NLL is convex in 1/T, hence unimodal in log T; the answer is a bound
 * when the optimum lies beyond it). Deterministic. T = 1 when n == 0 or when
 * no example's logits differ (the NLL does not depend on T then). Fails on
 * C < 2, n < 0, a non-finite logit or a label outside [0, C), naming the
 * example. */
#define AC_TEMPERATURE_MIN 0.05
#define AC_TEMPERATURE_MAX 20.0
double ac_temperature_nll(const float *logits, const int32_t *labels, int64_t n, int C,
                          double temperature);
int ac_temperature_fit(const float *logits, const int32_t *labels, int64_t n, int C,
                       double *temperature, ac_err *err);

#endif
