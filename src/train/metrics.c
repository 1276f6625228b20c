#include "attnctl/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ac_metrics_init(ac_metrics *m, int n_classes, int64_t expected_count, ac_err *err)
{
    memset(m, 0, sizeof *m);
    if (n_classes < 2)
        return ac_err_set(err, "metrics: n_classes must be at least 2 (got %d)", n_classes);
    m->n_classes = n_classes;
    m->confusion = calloc((size_t)n_classes * (size_t)n_classes, sizeof *m->confusion);
    if (!m->confusion)
        return ac_err_set(err, "metrics: out of memory for a %dx%d confusion matrix", n_classes,
                          n_classes);
    if (n_classes == 2 && expected_count > 0) {
        m->scored = malloc((size_t)expected_count * sizeof *m->scored);
        if (!m->scored) {
            ac_metrics_free(m);
            return ac_err_set(err, "metrics: out of memory for %lld scores",
                              (long long)expected_count);
        }
        m->cap_scored = expected_count;
    }
    return 0;
}

void ac_metrics_reset(ac_metrics *m)
{
    memset(m->confusion, 0, (size_t)m->n_classes * (size_t)m->n_classes * sizeof *m->confusion);
    m->count = 0;
    m->loss_sum = 0;
    m->n_scored = 0;
}

void ac_metrics_free(ac_metrics *m)
{
    free(m->confusion);
    free(m->scored);
    memset(m, 0, sizeof *m);
}

int ac_metrics_add(ac_metrics *m, int true_class, int predicted_class, const float *probs,
                   double loss, ac_err *err)
{
    int C = m->n_classes;
    if (true_class < 0 || true_class >= C)
        return ac_err_set(err, "metrics: true class %d is not in [0, %d)", true_class, C);
    if (predicted_class < 0 || predicted_class >= C)
        return ac_err_set(err, "metrics: predicted class %d is not in [0, %d)", predicted_class, C);
    if (C == 2) {
        if (!probs)
            return ac_err_set(err, "metrics: a binary model needs probabilities for ROC-AUC");
        if (m->n_scored == m->cap_scored) {
            int64_t cap = m->cap_scored ? 2 * m->cap_scored : 1024;
            ac_scored *grown = realloc(m->scored, (size_t)cap * sizeof *grown);
            if (!grown)
                return ac_err_set(err, "metrics: out of memory for %lld scores", (long long)cap);
            m->scored = grown;
            m->cap_scored = cap;
        }
        m->scored[m->n_scored++] = (ac_scored){probs[1], true_class == 1};
    }
    m->confusion[(size_t)true_class * (size_t)C + (size_t)predicted_class]++;
    m->count++;
    m->loss_sum += loss;
    return 0;
}

int ac_argmax(const float *probs, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (probs[i] > probs[best])
            best = i;
    return best;
}

int64_t ac_metrics_confusion(const ac_metrics *m, int true_class, int predicted_class)
{
    return m->confusion[(size_t)true_class * (size_t)m->n_classes + (size_t)predicted_class];
}

int64_t ac_metrics_support(const ac_metrics *m, int c)
{
    int64_t s = 0;
    for (int j = 0; j < m->n_classes; j++)
        s += ac_metrics_confusion(m, c, j);
    return s;
}

int64_t ac_metrics_predicted(const ac_metrics *m, int c)
{
    int64_t s = 0;
    for (int i = 0; i < m->n_classes; i++)
        s += ac_metrics_confusion(m, i, c);
    return s;
}

/* a / b with 0/0 (or anything/0) defined as 0. */
static double ratio(double a, double b)
{
    return b > 0 ? a / b : 0.0;
}

double ac_metrics_accuracy(const ac_metrics *m)
{
    int64_t correct = 0;
    for (int c = 0; c < m->n_classes; c++)
        correct += ac_metrics_confusion(m, c, c);
    return ratio((double)correct, (double)m->count);
}

double ac_metrics_precision(const ac_metrics *m, int c)
{
    return ratio((double)ac_metrics_confusion(m, c, c), (double)ac_metrics_predicted(m, c));
}

double ac_metrics_recall(const ac_metrics *m, int c)
{
    return ratio((double)ac_metrics_confusion(m, c, c), (double)ac_metrics_support(m, c));
}

double ac_metrics_f1(const ac_metrics *m, int c)
{
    double tp = (double)ac_metrics_confusion(m, c, c);
    double fp = (double)ac_metrics_predicted(m, c) - tp;
    double fn = (double)ac_metrics_support(m, c) - tp;
    return ratio(2 * tp, 2 * tp + fp + fn);
}

double ac_metrics_macro_f1(const ac_metrics *m)
{
    double s = 0;
    for (int c = 0; c < m->n_classes; c++)
        s += ac_metrics_f1(m, c);
    return s / m->n_classes;
}

double ac_metrics_mean_loss(const ac_metrics *m)
{
    return ratio(m->loss_sum, (double)m->count);
}

double ac_metrics_roc_auc(ac_metrics *m)
{
    if (m->n_classes != 2)
        return NAN;
    return ac_roc_auc(m->scored, m->n_scored);
}

/* Ascending by score; NaN first so the order is total; then by truth so the
 * result does not depend on qsort's stability (ties are averaged anyway). */
static int compare_scored(const void *pa, const void *pb)
{
    const ac_scored *a = pa, *b = pb;
    int a_nan = isnan(a->score), b_nan = isnan(b->score);
    if (a_nan || b_nan)
        return b_nan - a_nan;
    if (a->score != b->score)
        return a->score < b->score ? -1 : 1;
    return (a->positive > b->positive) - (a->positive < b->positive);
}

static int same_score(float a, float b)
{
    return a == b || (isnan(a) && isnan(b));
}

double ac_roc_auc(ac_scored *pairs, int64_t n)
{
    int64_t n_pos = 0;
    for (int64_t i = 0; i < n; i++)
        n_pos += pairs[i].positive != 0;
    int64_t n_neg = n - n_pos;
    if (n_pos == 0 || n_neg == 0)
        return NAN;
    qsort(pairs, (size_t)n, sizeof *pairs, compare_scored);
    /* Sum of the (1-based, tie-averaged) ranks of the positives. */
    double pos_rank_sum = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        int64_t pos_in_group = 0;
        while (j < n && same_score(pairs[j].score, pairs[i].score)) {
            pos_in_group += pairs[j].positive != 0;
            j++;
        }
        double mean_rank = 0.5 * (double)(i + 1 + j); /* mean of ranks i+1 .. j */
        pos_rank_sum += mean_rank * (double)pos_in_group;
        i = j;
    }
    double u = pos_rank_sum - 0.5 * (double)n_pos * (double)(n_pos + 1);
    return u / ((double)n_pos * (double)n_neg);
}
