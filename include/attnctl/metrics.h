/* Classification metrics shared by `attnctl eval`, `attnctl train`
 * (validation) and the tests: accuracy, per-class precision / recall / F1,
 * macro-F1, the confusion matrix, binary ROC-AUC and the mean loss.
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
 *  - accuracy and mean loss of zero examples are 0. */
#ifndef ATTNCTL_METRICS_H
#define ATTNCTL_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "attnctl/error.h"

typedef struct {
    float score;      /* probability of class 1 */
    int32_t positive; /* 1 when the true class is 1 */
} ac_scored;

typedef struct {
    int n_classes;
    int64_t count;       /* examples added */
    int64_t *confusion;  /* [C * C]: row = true class, column = predicted class */
    double loss_sum;
    /* binary models only: one (score, truth) pair per example, for ROC-AUC */
    ac_scored *scored;
    int64_t n_scored, cap_scored;
} ac_metrics;

/* expected_count is a capacity hint for the ROC-AUC scores (0 if unknown). */
int ac_metrics_init(ac_metrics *m, int n_classes, int64_t expected_count, ac_err *err);
void ac_metrics_reset(ac_metrics *m);
void ac_metrics_free(ac_metrics *m);

/* Adds one example: its true class, the predicted class, the class
 * probabilities probs[n_classes] (only probs[1] is used, for ROC-AUC, and only
 * when n_classes == 2; may be NULL otherwise) and its loss. Fails (naming the
 * bad value) on a class out of range or when growing the score array fails. */
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

/* ROC-AUC of arbitrary (score, truth) pairs; sorts `pairs` in place.
 * NaN when all pairs are positive or all negative. */
double ac_roc_auc(ac_scored *pairs, int64_t n);

#endif
