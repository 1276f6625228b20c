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
    memset(m->bin_count, 0, sizeof m->bin_count);
    memset(m->bin_correct, 0, sizeof m->bin_correct);
    memset(m->bin_confidence_sum, 0, sizeof m->bin_confidence_sum);
    m->brier_sum = 0;
    m->n_without_probs = 0;
}

void ac_metrics_free(ac_metrics *m)
{
    free(m->confusion);
    free(m->scored);
    memset(m, 0, sizeof *m);
}

/* The bin of a confidence: i with i/15 < p <= (i+1)/15, 0 for p = 0. A float
 * times 15 is exact in double, so the bin edges are exact too. */
static int calibration_bin(float confidence)
{
    double scaled = ceil((double)confidence * AC_CALIBRATION_BINS);
    if (scaled < 1)
        return 0;
    if (scaled > AC_CALIBRATION_BINS) /* a probability rounded above 1 */
        return AC_CALIBRATION_BINS - 1;
    return (int)scaled - 1;
}

static void add_calibration(ac_metrics *m, int true_class, int predicted_class, const float *probs)
{
    int C = m->n_classes;
    int usable = probs != NULL;
    for (int c = 0; usable && c < C; c++)
        usable = isfinite(probs[c]);
    if (!usable) {
        m->n_without_probs++;
        return;
    }
    float confidence = probs[ac_argmax(probs, C)];
    int bin = calibration_bin(confidence);
    m->bin_count[bin]++;
    m->bin_correct[bin] += predicted_class == true_class;
    m->bin_confidence_sum[bin] += confidence;
    if (C == 2) {
        double miss = (double)probs[1] - (true_class == 1);
        m->brier_sum += miss * miss;
    } else {
        double sum = 0;
        for (int c = 0; c < C; c++) {
            double miss = (double)probs[c] - (c == true_class);
            sum += miss * miss;
        }
        m->brier_sum += sum;
    }
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
    add_calibration(m, true_class, predicted_class, probs);
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

double ac_metrics_ece(const ac_metrics *m)
{
    if (m->n_without_probs > 0)
        return NAN;
    if (m->count == 0)
        return 0.0;
    double ece = 0;
    for (int b = 0; b < AC_CALIBRATION_BINS; b++) {
        if (m->bin_count[b] == 0)
            continue;
        double n_bin = (double)m->bin_count[b];
        double gap = (double)m->bin_correct[b] / n_bin - m->bin_confidence_sum[b] / n_bin;
        ece += n_bin / (double)m->count * fabs(gap);
    }
    return ece;
}

double ac_metrics_brier(const ac_metrics *m)
{
    if (m->n_without_probs > 0)
        return NAN;
    return ratio(m->brier_sum, (double)m->count);
}

int ac_metrics_reliability(const ac_metrics *m, ac_reliability *r, ac_err *err)
{
    int ok = m->n_without_probs == 0;
    for (int b = 0; b < AC_CALIBRATION_BINS; b++) {
        int64_t n_bin = ok ? m->bin_count[b] : 0;
        r->count[b] = n_bin;
        r->confidence[b] = n_bin ? m->bin_confidence_sum[b] / (double)n_bin : NAN;
        r->accuracy[b] = n_bin ? (double)m->bin_correct[b] / (double)n_bin : NAN;
    }
    if (!ok)
        return ac_err_set(err,
                          "metrics: no reliability diagram: %lld of %lld examples came "
                          "without probabilities",
                          (long long)m->n_without_probs, (long long)m->count);
    return 0;
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

/* Mean NLL of softmax(logits / T) with inv_t = 1 / T, in double, in index order. */
static double softmax_nll(const float *logits, const int32_t *labels, int64_t n, int C,
                          double inv_t)
{
    if (n <= 0)
        return 0.0;
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *z = logits + i * C;
        double top = z[0];
        for (int c = 1; c < C; c++)
            if (z[c] > top)
                top = z[c];
        /* log sum_c exp((z_c - top) / T): every term <= 1, one term is 1 */
        double sum = 0;
        for (int c = 0; c < C; c++)
            sum += exp(((double)z[c] - top) * inv_t);
        total += log(sum) - ((double)z[labels[i]] - top) * inv_t;
    }
    return total / (double)n;
}

double ac_temperature_nll(const float *logits, const int32_t *labels, int64_t n, int C,
                          double temperature)
{
    return softmax_nll(logits, labels, n, C, 1.0 / temperature);
}

/* The NLL at T = exp(log_t). */
static double nll_at_log_t(const float *logits, const int32_t *labels, int64_t n, int C,
                           double log_t)
{
    return softmax_nll(logits, labels, n, C, exp(-log_t));
}

int ac_temperature_fit(const float *logits, const int32_t *labels, int64_t n, int C,
                       double *temperature, ac_err *err)
{
    if (C < 2)
        return ac_err_set(err, "temperature fit: need at least 2 classes (got %d)", C);
    if (n < 0)
        return ac_err_set(err, "temperature fit: negative example count %lld", (long long)n);
    /* The NLL depends on T only through examples whose logits are not all equal. */
    int any_spread = 0;
    for (int64_t i = 0; i < n; i++) {
        if (labels[i] < 0 || labels[i] >= C)
            return ac_err_set(err, "temperature fit: example %lld: label %d is not in [0, %d)",
                              (long long)i, (int)labels[i], C);
        for (int c = 0; c < C; c++) {
            float z = logits[i * C + c];
            if (!isfinite(z))
                return ac_err_set(err, "temperature fit: example %lld: logit %d is %g",
                                  (long long)i, c, (double)z);
            any_spread |= z != logits[i * C];
        }
    }
    if (!any_spread) {
        *temperature = 1.0;
        return 0;
    }
    /* Golden-section search for the minimum of a unimodal function on [lo, hi]. */
    const double inv_phi = 0.6180339887498949; /* (sqrt(5) - 1) / 2 */
    const double tolerance = 1e-7;             /* in log T: relative in T */
    double lo = log(AC_TEMPERATURE_MIN), hi = log(AC_TEMPERATURE_MAX);
    double a = hi - inv_phi * (hi - lo), b = lo + inv_phi * (hi - lo);
    double f_a = nll_at_log_t(logits, labels, n, C, a);
    double f_b = nll_at_log_t(logits, labels, n, C, b);
    while (hi - lo > tolerance) {
        if (f_a <= f_b) { /* the minimum is in [lo, b] */
            hi = b;
            b = a;
            f_b = f_a;
            a = hi - inv_phi * (hi - lo);
            f_a = nll_at_log_t(logits, labels, n, C, a);
        } else { /* in [a, hi] */
            lo = a;
            a = b;
            f_a = f_b;
            b = lo + inv_phi * (hi - lo);
            f_b = nll_at_log_t(logits, labels, n, C, b);
        }
    }
    double best = 0.5 * (lo + hi);
    /* When the search ran into a bound, say the bound itself, not a hair inside it. */
    if (best - log(AC_TEMPERATURE_MIN) < tolerance)
        *temperature = AC_TEMPERATURE_MIN;
    else if (log(AC_TEMPERATURE_MAX) - best < tolerance)
        *temperature = AC_TEMPERATURE_MAX;
    else
        *temperature = exp(best);
    return 0;
}
