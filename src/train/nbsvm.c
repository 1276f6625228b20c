/* training.nbsvm: NBSVM (Wang & Manning 2012) on the wide path's features,
 * fitted once on the training rows and summed into the classifier's logits.
 *
 * The wide path is naive Bayes with a small discriminative correction: the
 * joint model fits its training rows within an epoch, so its table barely
 * leaves its naive Bayes start (benchmarks/EXPERIMENTS.md, "What the wide
 * path learns"). A linear SVM on the same binarised, ratio-scaled n-grams is
 * the discriminative model NBSVM is, and on short texts its scores and the
 * network's make different mistakes: their sum is better than either.
 *
 * Its features are the wide path's own: a text's distinct hashed n-gram
 * buckets, each worth its naive Bayes log-count ratio, times wide_scale of
 * the text's bucket count (relative to a short text's, so that one-line
 * texts see NBSVM's plain binarised features). The model then adds, for
 * each class, wide_scale(n) x the sum of the text's buckets' weights plus a
 * bias, which is exactly the wide path's form: a trained classifier gets it
 * folded into its wide table and head bias (classifier.c), and predict,
 * quantize and inspect's exact attribution need nothing new.
 *
 * The solver is the dual coordinate descent of Hsieh et al. (2008) for the
 * L2-regularised squared hinge loss, as liblinear's L2R_L2LOSS_SVC_DUAL
 * (what scikit-learn's LinearSVC runs), with the bias as a regularised
 * feature of value 1. Written here rather than linked from Debian's
 * liblinear: liblinear shuffles with the process-wide rand(), which would
 * tie the model to whatever else called it, and wants every row copied into
 * its own node format; the solver is forty lines on the bucket lists the
 * wide path already makes. Each class's problem is serial and seeded: the
 * same bits for any thread or process count. */
#include "attnctl/train.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/nn.h"
#include "attnctl/rng.h"

/* liblinear's defaults for this solver (scikit-learn's tolerance). */
#define SVM_COST 1.0
#define SVM_TOLERANCE 1e-4
#define SVM_MAX_PASSES 1000
/* NBSVM's interpolation towards the mean weight (Wang & Manning's beta). */
#define NBSVM_BETA 0.25

static int compare_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The first index of sorted[0..n) holding bucket or more (n: none). */
static int64_t lower_bound(const int32_t *sorted, int64_t n, int32_t bucket)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < bucket)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The rows as lists of feature indices (into the sorted distinct buckets). */
typedef struct {
    int64_t n_rows, n_feats;
    int64_t *row_off;   /* [n_rows + 1] */
    int32_t *feat;      /* [row_off[n_rows]] */
    double *row_scale;  /* [n_rows] wide_scale relative to a short text's */
    int32_t *label;     /* [n_rows] */
} svm_rows;

static void svm_rows_free(svm_rows *r)
{
    free(r->row_off);
    free(r->feat);
    free(r->row_scale);
    free(r->label);
}

/* Scratch of one problem. */
typedef struct {
    double *w, *value;      /* [n_feats] */
    double *alpha, *q_diag; /* [n_rows] */
    int32_t *order;         /* [n_rows] */
} svm_scratch;

/* One binary problem: y = +1 for rows of class `positive`, -1 otherwise;
 * features value[f] * row_scale. w [n_feats] and *bias out. */
static void solve_svm(double *bias, const svm_rows *r, svm_scratch *sc, int positive,
                      uint64_t key)
{
    const double diag = 1.0 / (2.0 * SVM_COST);
    double *w = sc->w, *alpha = sc->alpha, *q_diag = sc->q_diag;
    const double *value = sc->value;
    int32_t *order = sc->order;
    memset(w, 0, (size_t)r->n_feats * sizeof *w);
    double b = 0.0;
    for (int64_t k = 0; k < r->n_rows; k++) {
        alpha[k] = 0.0;
        order[k] = (int32_t)k;
        double xx = 0.0;
        for (int64_t j = r->row_off[k]; j < r->row_off[k + 1]; j++) {
            const double x = value[r->feat[j]] * r->row_scale[k];
            xx += x * x;
        }
        q_diag[k] = xx + 1.0 + diag; /* the bias feature, and the squared hinge's term */
    }
    for (int pass = 0; pass < SVM_MAX_PASSES; pass++) {
        ac_shuffle_i32(order, r->n_rows, ac_rng_key(key, (uint64_t)pass));
        double pg_max = -INFINITY, pg_min = INFINITY;
        for (int64_t i = 0; i < r->n_rows; i++) {
            const int64_t k = order[i];
            const double y = r->label[k] == positive ? 1.0 : -1.0, s = r->row_scale[k];
            double wx = 0.0;
            for (int64_t j = r->row_off[k]; j < r->row_off[k + 1]; j++)
                wx += w[r->feat[j]] * (value[r->feat[j]] * s);
            wx += b;
            const double g = y * wx - 1.0 + diag * alpha[k];
            const double pg = alpha[k] == 0.0 ? (g < 0.0 ? g : 0.0) : g;
            pg_max = pg > pg_max ? pg : pg_max;
            pg_min = pg < pg_min ? pg : pg_min;
            if (fabs(pg) <= 1e-12)
                continue;
            const double before = alpha[k];
            alpha[k] = before - g / q_diag[k];
            if (alpha[k] < 0.0)
                alpha[k] = 0.0;
            const double step = (alpha[k] - before) * y;
            for (int64_t j = r->row_off[k]; j < r->row_off[k + 1]; j++)
                w[r->feat[j]] += step * value[r->feat[j]] * s;
            b += step;
        }
        if (pg_max - pg_min <= SVM_TOLERANCE)
            break;
    }
    *bias = b;
}

/* The distinct buckets of every row, as indices into the sorted set of all
 * of them (*buckets_out, *n_feats). */
static int collect_rows(svm_rows *r, int32_t **buckets_out, const ac_nbsvm_data *d, ac_err *err)
{
    memset(r, 0, sizeof *r);
    *buckets_out = NULL;
    int64_t longest = 1, total = 0;
    for (int64_t k = 0; k < d->n_rows; k++) {
        const int64_t len = d->off[d->rows[k] + 1] - d->off[d->rows[k]];
        longest = len > longest ? len : longest;
        total += len * d->order;
    }
    r->n_rows = d->n_rows;
    r->row_off = malloc((size_t)(d->n_rows + 1) * sizeof *r->row_off);
    r->feat = malloc((size_t)(total > 0 ? total : 1) * sizeof *r->feat);
    r->row_scale = malloc((size_t)(d->n_rows > 0 ? d->n_rows : 1) * sizeof *r->row_scale);
    r->label = malloc((size_t)(d->n_rows > 0 ? d->n_rows : 1) * sizeof *r->label);
    int32_t *grams = malloc((size_t)(longest * d->order) * sizeof *grams);
    int32_t *all = malloc((size_t)(total > 0 ? total : 1) * sizeof *all);
    if (!r->row_off || !r->feat || !r->row_scale || !r->label || !grams || !all) {
        free(grams);
        free(all);
        svm_rows_free(r);
        return ac_err_set(err, "out of memory for NBSVM's rows");
    }
    const double short_scale = wide_scale(AC_WIDE_NORM_FLOOR, d->norm);
    int64_t used = 0;
    r->row_off[0] = 0;
    for (int64_t k = 0; k < d->n_rows; k++) {
        const int64_t row = d->rows[k];
        const int count = wide_buckets_of_text(grams, d->ids + d->off[row],
                                               (int)(d->off[row + 1] - d->off[row]), d->order,
                                               d->n_buckets);
        memcpy(r->feat + used, grams, (size_t)count * sizeof *grams);
        used += count;
        r->row_off[k + 1] = used;
        r->row_scale[k] = wide_scale(count, d->norm) / short_scale;
        r->label[k] = d->labels[row];
    }
    free(grams);
    memcpy(all, r->feat, (size_t)used * sizeof *all);
    qsort(all, (size_t)used, sizeof *all, compare_i32);
    int64_t n = 0;
    for (int64_t i = 0; i < used; i++)
        if (n == 0 || all[i] != all[n - 1])
            all[n++] = all[i];
    for (int64_t j = 0; j < used; j++)
        r->feat[j] = (int32_t)lower_bound(all, n, r->feat[j]); /* present: all holds it */
    r->n_feats = n;
    *buckets_out = all;
    return 0;
}

int ac_nbsvm_fit(ac_nbsvm *s, const ac_nbsvm_data *d, uint64_t seed, ac_err *err)
{
    memset(s, 0, sizeof *s);
    const int C = d->n_classes;
    svm_rows r;
    int32_t *buckets;
    if (collect_rows(&r, &buckets, d, err))
        return -1;
    const int64_t F = r.n_feats;
    const size_t nF = (size_t)(F > 0 ? F : 1);
    const size_t nR = (size_t)(r.n_rows > 0 ? r.n_rows : 1);
    /* Two classes: one problem, class 1 against class 0, its score split
     * between the two logits (+S/2, -S/2) as the wide path's naive Bayes
     * start is. More: one problem per class against the rest, each on a
     * thread of its own (each is serial and seeded by its class: the same
     * bits for any thread count). */
    const int problems = C == 2 ? 1 : C;
    int threads = omp_get_max_threads();
    threads = threads < problems ? threads : problems;
    double *counts = calloc(nF * (size_t)C, sizeof *counts);
    double *class_total = calloc((size_t)C, sizeof *class_total);
    double *reals = malloc((size_t)threads * (2 * nF + 2 * nR) * sizeof *reals);
    int32_t *orders = malloc((size_t)threads * nR * sizeof *orders);
    s->weight = calloc(nF * (size_t)C, sizeof *s->weight);
    s->bias = calloc((size_t)C, sizeof *s->bias);
    int rc = -1;
    if (!counts || !class_total || !reals || !orders || !s->weight || !s->bias) {
        ac_err_set(err, "out of memory for NBSVM (%lld n-grams, %d classes)", (long long)F, C);
        goto done;
    }
    /* Naive Bayes' counts, binarised: the rows of each class having each feature. */
    double all = 0.0;
    for (int64_t k = 0; k < r.n_rows; k++) {
        for (int64_t j = r.row_off[k]; j < r.row_off[k + 1]; j++)
            counts[(size_t)r.feat[j] * (size_t)C + (size_t)r.label[k]] += 1.0;
        class_total[r.label[k]] += (double)(r.row_off[k + 1] - r.row_off[k]);
        all += (double)(r.row_off[k + 1] - r.row_off[k]);
    }
    const double short_scale = wide_scale(AC_WIDE_NORM_FLOOR, d->norm);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int p = 0; p < problems; p++) {
        const int positive = C == 2 ? 1 : p;
        double *mine = reals + (size_t)omp_get_thread_num() * (2 * nF + 2 * nR);
        svm_scratch sc = {.w = mine,
                          .value = mine + nF,
                          .alpha = mine + 2 * nF,
                          .q_diag = mine + 2 * nF + nR,
                          .order = orders + (size_t)omp_get_thread_num() * nR};
        double *w = sc.w, *value = sc.value;
        const double p_norm = class_total[positive] + AC_WIDE_NB_ALPHA * (double)F;
        const double q_norm = all - class_total[positive] + AC_WIDE_NB_ALPHA * (double)F;
        for (int64_t f = 0; f < F; f++) {
            const double *cell = counts + (size_t)f * (size_t)C;
            double in_f = 0.0;
            for (int c = 0; c < C; c++)
                in_f += cell[c];
            value[f] = log(((cell[positive] + AC_WIDE_NB_ALPHA) / p_norm) /
                           ((in_f - cell[positive] + AC_WIDE_NB_ALPHA) / q_norm));
        }
        double bias;
        solve_svm(&bias, &r, &sc, positive, ac_rng_key(seed, (uint64_t)p));
        double mean_abs = 0.0;
        for (int64_t f = 0; f < F; f++)
            mean_abs += fabs(w[f]);
        mean_abs = F > 0 ? mean_abs / (double)F : 0.0;
        const double share = C == 2 ? 0.5 : 1.0;
        for (int64_t f = 0; f < F; f++) {
            const double interpolated = (1.0 - NBSVM_BETA) * mean_abs + NBSVM_BETA * w[f];
            const float v = (float)(share * interpolated * value[f] / short_scale);
            s->weight[(size_t)f * (size_t)C + (size_t)positive] = v;
            if (C == 2)
                s->weight[(size_t)f * (size_t)C] = -v;
        }
        s->bias[positive] = (float)(share * bias);
        if (C == 2)
            s->bias[0] = -s->bias[1];
    }
    s->n_classes = C;
    s->n_rows = F;
    s->bucket = buckets;
    buckets = NULL;
    rc = 0;
done:
    free(buckets);
    free(counts);
    free(class_total);
    free(reals);
    free(orders);
    svm_rows_free(&r);
    if (rc)
        ac_nbsvm_free(s);
    return rc;
}

void ac_nbsvm_free(ac_nbsvm *s)
{
    free(s->bucket);
    free(s->weight);
    free(s->bias);
    memset(s, 0, sizeof *s);
}

void ac_nbsvm_add_scores(const ac_nbsvm *s, float *logits, const int32_t *buckets, int count,
                         float norm, double *sums)
{
    const size_t C = (size_t)s->n_classes;
    for (size_t c = 0; c < C; c++)
        sums[c] = 0.0;
    for (int i = 0; i < count; i++) { /* ascending buckets: the same bits every time */
        const int64_t k = lower_bound(s->bucket, s->n_rows, buckets[i]);
        if (k == s->n_rows || s->bucket[k] != buckets[i])
            continue; /* no training row has it */
        const float *w = s->weight + (size_t)k * C;
        for (size_t c = 0; c < C; c++)
            sums[c] += (double)w[c];
    }
    const double scale = wide_scale(count, norm);
    for (size_t c = 0; c < C; c++)
        logits[c] += (float)(scale * sums[c] + (double)s->bias[c]);
}

void ac_nbsvm_fold(const ac_nbsvm *s, float scale, float *wide_table, float *head_bias)
{
    const int C = s->n_classes;
    for (int64_t k = 0; k < s->n_rows; k++)
        for (int c = 0; c < C; c++)
            wide_table[(size_t)s->bucket[k] * (size_t)C + (size_t)c] +=
                scale * s->weight[(size_t)k * (size_t)C + (size_t)c];
    for (int c = 0; c < C; c++)
        head_bias[c] += scale * s->bias[c];
}
