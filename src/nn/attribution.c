/* Token attributions (integrated gradients, gradient x input) through the
 * model's own forward and backward at its input: see attribution.h. */
#include "attnctl/attribution.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* <pad>'s id (text.h's AC_PAD_ID; the model does not include the text layer). */
#define AC_PAD_ID_MODEL 0
/* Largest starting step count (the batch is steps + 1 rows). */
#define MAX_START_STEPS 65536

static const ac_name ATTR_METHOD_NAMES[] = {
    {AC_ATTR_IG, "ig", 0},
    {AC_ATTR_GRADXINPUT, "gradxinput", 0},
    {AC_ATTR_NONE, "none", 0},
};
const ac_names ac_attr_method_names = AC_NAMES(ATTR_METHOD_NAMES);

const char *ac_attr_method_name(ac_attr_method v)
{
    return ac_names_name(&ac_attr_method_names, (int)v);
}

int ac_attr_method_parse(const char *s, ac_attr_method *out)
{
    int v;
    if (ac_names_parse(&ac_attr_method_names, s, &v))
        return -1;
    *out = (ac_attr_method)v;
    return 0;
}

void ac_attribution_free(ac_attribution *a)
{
    if (!a)
        return;
    free(a->scores);
    free(a->logits);
    free(a->baseline_logits);
    free(a->gap);
    free(a->x);
    free(a->x0);
    free(a->grad);
    free(a->dlogits);
    free(a->lengths);
    free(a->acc);
    free(a->pad_ids);
    free(a->alpha);
    free(a->weight);
    free(a->wide_set);
    free(a->wide_uses);
    free(a->wide_scores);
    free(a->wide_logits);
    memset(a, 0, sizeof *a);
}

int ac_attribution_setup(ac_attribution *a, ac_model *m, ac_attr_method method, int max_T,
                         int steps, int max_steps, ac_err *err)
{
    memset(a, 0, sizeof *a);
    if (method != AC_ATTR_IG && method != AC_ATTR_GRADXINPUT)
        return ac_err_set(err, "attribution: method must be ig or gradxinput");
    if (max_T < 1 || max_T > m->cfg.max_len)
        return ac_err_set(err, "attribution: text length %d outside 1..%d", max_T, m->cfg.max_len);
    /* Explanations read the weights directly: a quantized model loaded for
     * inference writes all of them first (its forwards do not change). */
    ac_model_quant_materialize(m);
    if (method == AC_ATTR_IG && (steps < 1 || steps > MAX_START_STEPS || max_steps < steps))
        return ac_err_set(err, "attribution: steps must be in 1..%d and at most max_steps (got %d, %d)",
                          MAX_START_STEPS, steps, max_steps);
    a->m = m;
    a->method = method;
    a->max_T = max_T;
    a->steps0 = method == AC_ATTR_IG ? steps : 0;
    a->max_steps = method == AC_ATTR_IG ? max_steps : 0;
    a->rows = method == AC_ATTR_IG ? steps + 1 : 2;
    a->n_classes = m->cfg.n_classes;
    if (ac_model_alloc_activations(m, a->rows, max_T, err) != 0)
        return -1;
    const size_t C = (size_t)m->cfg.n_classes, d = (size_t)m->cfg.d_model, T = (size_t)max_T;
    const size_t R = (size_t)a->rows;
    a->scores = calloc(C * T, sizeof *a->scores);
    a->logits = calloc(C, sizeof *a->logits);
    a->baseline_logits = calloc(C, sizeof *a->baseline_logits);
    a->gap = calloc(C, sizeof *a->gap);
    a->x = calloc(T * d, sizeof *a->x);
    a->x0 = calloc(T * d, sizeof *a->x0);
    a->grad = calloc(R * T * d, sizeof *a->grad);
    a->dlogits = calloc(R * C, sizeof *a->dlogits);
    a->lengths = calloc(R, sizeof *a->lengths);
    a->acc = calloc(C * T, sizeof *a->acc);
    a->pad_ids = calloc(T, sizeof *a->pad_ids); /* all AC_PAD_ID_MODEL (0) */
    a->alpha = calloc(R, sizeof *a->alpha);
    a->weight = calloc(R, sizeof *a->weight);
    const size_t grams = ac_model_has_wide(&m->cfg) ? T * (size_t)m->cfg.wide_order : 1;
    a->wide_set = calloc(grams, sizeof *a->wide_set);
    a->wide_uses = calloc(grams, sizeof *a->wide_uses);
    a->wide_scores = calloc(C * T, sizeof *a->wide_scores);
    a->wide_logits = calloc(C, sizeof *a->wide_logits);
    if (!a->wide_set || !a->wide_uses || !a->wide_scores || !a->wide_logits || !a->scores || !a->logits || !a->baseline_logits || !a->gap || !a->x || !a->x0 ||
        !a->grad || !a->dlogits || !a->lengths || !a->acc || !a->pad_ids || !a->alpha ||
        !a->weight) {
        ac_attribution_free(a);
        return ac_err_set(err, "attribution: out of memory for %zu rows of %zu tokens", R, T);
    }
    return 0;
}

/* One batch of `count` path points x0 + alpha_r (x - x0) (alpha and weight
 * in a->alpha, a->weight): forward, then per class a backward from that
 * class's logit, adding weight_r * (x - x0)[t] . dF_c/dx[r, t] into acc.
 * Rows at alpha 0 and 1 give the baseline's and the input's logits. */
static void path_batch(ac_attribution *a, int n, int count)
{
    ac_model *m = a->m;
    const int C = a->n_classes, d = m->cfg.d_model;
    const size_t nd = (size_t)n * (size_t)d;
    float *path = m->act.embed_sum; /* forward_embedded reads it in place */
    for (int r = 0; r < count; r++) {
        const float al = a->alpha[r], bl = 1.0f - al;
        float *row = path + (size_t)r * nd;
        /* alpha 0 and 1 give x0 and x exactly */
        for (size_t i = 0; i < nd; i++)
            row[i] = bl * a->x0[i] + al * a->x[i];
        a->lengths[r] = n;
    }
    ac_model_forward_embedded(m, path, a->lengths, NULL, count, n);
    for (int r = 0; r < count; r++) {
        const float *z = m->act.logits + (size_t)r * C;
        for (int c = 0; c < C; c++) {
            if (a->alpha[r] == 0.0f)
                a->baseline_logits[c] = z[c];
            if (a->alpha[r] == 1.0f)
                a->logits[c] = (double)(z[c] + (float)a->wide_logits[c]);
        }
    }
    for (int c = 0; c < C; c++) {
        memset(a->dlogits, 0, (size_t)count * C * sizeof *a->dlogits);
        for (int r = 0; r < count; r++)
            a->dlogits[(size_t)r * C + c] = a->weight[r] != 0.0 ? 1.0f : 0.0f;
        memset(a->grad, 0, (size_t)count * nd * sizeof *a->grad);
        ac_model_backward_embedded(m, a->dlogits, a->grad);
        double *acc = a->acc + (size_t)c * n;
        for (int r = 0; r < count; r++) {
            if (a->weight[r] == 0.0)
                continue;
            const float *g = a->grad + (size_t)r * nd;
            for (int t = 0; t < n; t++) {
                double dot = 0.0;
                for (int j = 0; j < d; j++) {
                    size_t i = (size_t)t * d + j;
                    dot += ((double)a->x[i] - (double)a->x0[i]) * (double)g[i];
                }
                acc[t] += a->weight[r] * dot;
            }
        }
    }
}

/* scores = acc / steps (1 for gradient x input), the gaps and delta. */
static void finish(ac_attribution *a, int n, int steps)
{
    const int C = a->n_classes;
    const double scale = steps > 0 ? 1.0 / steps : 1.0;
    int p = 0;
    for (int c = 1; c < C; c++)
        if (a->logits[c] > a->logits[p])
            p = c;
    a->predicted = p;
    a->steps = steps;
    for (int c = 0; c < C; c++) {
        double sum = 0.0;
        for (int t = 0; t < n; t++) {
            a->scores[(size_t)c * n + t] =
                a->acc[(size_t)c * n + t] * scale + a->wide_scores[(size_t)c * n + t];
            sum += a->scores[(size_t)c * n + t];
        }
        a->gap[c] = sum - (a->logits[c] - a->baseline_logits[c]);
    }
    a->delta = ac_attribution_delta(a, p);
}

double ac_attribution_delta(const ac_attribution *a, int c)
{
    double change = fabs(a->logits[c] - a->baseline_logits[c]);
    return fabs(a->gap[c]) / (change > AC_ATTR_GAP_FLOOR ? change : AC_ATTR_GAP_FLOOR);
}

/* Index of bucket in the sorted set (it is there). */
static int set_index(const int32_t *set, int count, int32_t bucket)
{
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (set[mid] < bucket)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The wide path adds scale * sum over the text's distinct n-gram buckets of
 * table[bucket, c] to logit c (scale fixed by the set's size): linear in the set, so its part of the
 * attribution is exact, not integrated. Each bucket's weight is shared by
 * its occurrences and, within one, evenly by the n-gram's words. The
 * baseline (no text) has no n-grams, so these parts sum to the wide path's
 * whole contribution and completeness is unchanged. */
static void wide_part(ac_attribution *a, const int32_t *ids, int n)
{
    const ac_model *m = a->m;
    const int C = a->n_classes;
    memset(a->wide_scores, 0, (size_t)C * n * sizeof *a->wide_scores);
    memset(a->wide_logits, 0, (size_t)C * sizeof *a->wide_logits);
    if (!m->p.wide_w)
        return;
    const int order = m->cfg.wide_order, n_buckets = m->cfg.wide_buckets;
    const int count = wide_buckets_of_text(a->wide_set, ids, n, order, n_buckets);
    memset(a->wide_uses, 0, (size_t)count * sizeof *a->wide_uses);
    const double scale = wide_scale(count, m->cfg.wide_norm);
    for (int k = 1; k <= order; k++)
        for (int t = 0; t + k <= n; t++)
            a->wide_uses[set_index(a->wide_set, count,
                                   (int32_t)wide_bucket(ids + t, k, n_buckets))]++;
    for (int k = 1; k <= order; k++)
        for (int t = 0; t + k <= n; t++) {
            int i = set_index(a->wide_set, count, (int32_t)wide_bucket(ids + t, k, n_buckets));
            for (int c = 0; c < C; c++) {
                double share = scale * (double)m->p.wide_w[(size_t)a->wide_set[i] * C + c] /
                               ((double)a->wide_uses[i] * k);
                for (int j = t; j < t + k; j++)
                    a->wide_scores[(size_t)c * n + j] += share;
            }
        }
    /* The forward's sum (ascending buckets, in double, rounded to float). */
    for (int c = 0; c < C; c++) {
        double sum = 0.0;
        for (int i = 0; i < count; i++)
            sum += (double)m->p.wide_w[(size_t)a->wide_set[i] * C + c];
        a->wide_logits[c] = (float)(scale * sum);
    }
}

int ac_attribution_run(ac_attribution *a, const int32_t *ids, int n, ac_err *err)
{
    ac_model *m = a->m;
    if (!m)
        return ac_err_set(err, "attribution: not set up");
    if (n < 1 || n > a->max_T)
        return ac_err_set(err, "attribution: text length %d outside 1..%d", n, a->max_T);
    const int C = a->n_classes, d = m->cfg.d_model;
    a->lengths[0] = n;
    if (ac_model_embed(m, a->x, ids, a->lengths, 1, n) != 0)
        return ac_err_set(err, "attribution: a token id is outside the vocabulary (%d ids)",
                          m->cfg.vocab_size);
    /* Baseline: <pad> rows + the same positions, no n-gram rows; with cls
     * pooling the [CLS] position stays as it is. */
    embedding_forward(a->x0, a->pad_ids, m->p.embed_w, m->p.pos_w ? m->p.pos_w : m->pos_table, 1,
                      n, d);
    if (m->cfg.pooling == AC_POOL_CLS)
        memcpy(a->x0, a->x, (size_t)d * sizeof *a->x0);
    a->n = n;
    memset(a->acc, 0, (size_t)C * n * sizeof *a->acc);
    wide_part(a, ids, n);

    if (a->method == AC_ATTR_GRADXINPUT) {
        a->alpha[0] = 0.0f; /* the baseline: logits only */
        a->weight[0] = 0.0;
        a->alpha[1] = 1.0f;
        a->weight[1] = 1.0;
        path_batch(a, n, 2);
        finish(a, n, 0);
        return 0;
    }

    /* Trapezoid rule over S intervals: points k / S, the two ends weighted 1/2. */
    int S = a->steps0;
    for (int k = 0; k <= S; k++) {
        a->alpha[k] = (float)((double)k / S);
        a->weight[k] = k == 0 || k == S ? 0.5 : 1.0;
    }
    path_batch(a, n, S + 1);
    finish(a, n, S);
    /* Not complete enough: halve the intervals; only the new midpoints
     * (2k + 1) / 2S are evaluated, in batches of at most `rows`. */
    long limit = AC_IG_STEP_BUDGET / n;
    if (limit < AC_IG_MIN_REFINE)
        limit = AC_IG_MIN_REFINE;
    if (limit > a->max_steps)
        limit = a->max_steps;
    while (a->delta > AC_ATTR_TOLERANCE && 2 * (long)S <= limit) {
        for (int k0 = 0; k0 < S; k0 += a->rows) {
            int count = S - k0 < a->rows ? S - k0 : a->rows;
            for (int r = 0; r < count; r++) {
                a->alpha[r] = (float)((2.0 * (k0 + r) + 1.0) / (2.0 * S));
                a->weight[r] = 1.0;
            }
            path_batch(a, n, count);
        }
        S *= 2;
        finish(a, n, S);
    }
    return 0;
}
