/* Token attributions: which words pushed a prediction which way.
 *
 * Both methods explain a class's raw logit F_c (before the temperature) as a
 * function of the model's input, the per-position sum that enters the
 * embedding LayerNorm (see ac_model_embed):
 *   x[t] = embed.weight[id_t] + position row t + the hashed n-gram rows of t.
 * The baseline x0 is the same length with every word replaced by <pad> and
 * the real positions kept, and without n-gram rows (a pad has none):
 *   x0[t] = embed.weight[<pad>] + position row t.
 * With cls pooling the leading [CLS] position is not a word of the review: it
 * is kept as it is in the input (x0[0] = x[0]), so its score is exactly 0.
 *
 * Integrated gradients (Sundararajan et al. 2017), per token t and class c:
 *   IG_c[t] = sum_j (x - x0)[t,j] * integral_0^1 dF_c/dx[t,j] (x0 + a (x - x0)) da,
 * the integral by the trapezoid rule over S equal intervals (S + 1 points,
 * both ends included, so the same batch also gives F(x) and F(x0)). The
 * points go through the model's own forward and backward as one batch of
 * identical-length rows. Completeness: sum_t IG_c[t] = F_c(x) - F_c(x0) up to
 * the quadrature error; when the gap of the predicted class is over
 * AC_ATTR_TOLERANCE (relative), S is doubled (only the new midpoints are
 * evaluated) until it is within, or S reaches its limit (AC_IG_MAX_STEPS).
 *
 * Gradient x input: GxI_c[t] = sum_j (x - x0)[t,j] * dF_c/dx[t,j] (x), the
 * gradient at the input times the input measured from the same baseline (so
 * the position rows cancel); IG with a single point at the input. One forward
 * of two rows (input, baseline) and one backward per class: cheap, but
 * completeness does not hold (delta says by how much).
 *
 * The library does not print or exit; everything is allocated at setup. */
#ifndef ATTNCTL_ATTRIBUTION_H
#define ATTNCTL_ATTRIBUTION_H

#include <stdint.h>

#include "attnctl/error.h"
#include "attnctl/model.h"
#include "attnctl/names.h"

typedef enum {
    AC_ATTR_NONE = 0,
    AC_ATTR_IG = 1,         /* integrated gradients */
    AC_ATTR_GRADXINPUT = 2, /* gradient x (input - baseline) */
} ac_attr_method;

const char *ac_attr_method_name(ac_attr_method m); /* "none", "ig", "gradxinput" */
int ac_attr_method_parse(const char *s, ac_attr_method *out); /* 0 ok, -1 unknown */
extern const ac_names ac_attr_method_names; /* the names, in the order listed */

/* Default number of trapezoid intervals for IG: 32 (33 points, one batch).
 * On a model trained on data/sample_train.csv with the default settings
 * (mean pooling), 32 intervals met the 1 % gap on 438 of the 440 reviews of
 * data/sample_test.csv and data/short_reviews.csv (mean gap 0.03 %; 16
 * intervals: 435, 64: all), so one batch does nearly every text and the
 * doubling below does the rest. Max pooling (models/seed.json) and random
 * untrained models are rougher and need the doubling more often. */
#define AC_IG_DEFAULT_STEPS 32
/* IG doubles its intervals while the gap is over the tolerance, up to
 * max_steps (setup) and up to AC_IG_STEP_BUDGET / n for a text of n tokens
 * (the path's cost is steps x tokens), but always up to AC_IG_MIN_REFINE if
 * max_steps allows: short texts may refine further than long ones. A model
 * with max pooling has a gradient that jumps along the path, so the
 * trapezoid rule converges only like 1/steps there; on such a model a few
 * short reviews whose predicted logit hardly moves from the baseline needed
 * up to 16384 steps for 1 %. */
#define AC_IG_MAX_STEPS 16384
#define AC_IG_STEP_BUDGET (1L << 20)
#define AC_IG_MIN_REFINE 1024
/* Relative completeness gap IG aims for (1 %). */
#define AC_ATTR_TOLERANCE 0.01
/* |F(x) - F(x0)| below this counts as this in the relative gap. */
#define AC_ATTR_GAP_FLOOR 1e-3

typedef struct {
    /* setup */
    ac_model *m;
    ac_attr_method method;
    int max_T;      /* longest text */
    int steps0;     /* IG intervals to start with */
    int max_steps;  /* IG intervals at most */
    int rows;       /* rows of one batch: steps0 + 1 (IG) or 2 */
    /* results of the last ac_attribution_run */
    int n;          /* tokens */
    int n_classes;
    int predicted;  /* argmax of the text's logits */
    int steps;      /* IG intervals used (0 for gradient x input) */
    double *scores; /* [C][n]: scores[c * n + t], the attribution of class c's logit to token t */
    double *logits, *baseline_logits; /* [C], raw: F_c(x), F_c(x0) */
    double *gap;    /* [C]: sum_t scores - (logit - baseline_logit) */
    double delta;   /* |gap[predicted]| / max(|logit - baseline_logit|, AC_ATTR_GAP_FLOOR) */
    /* workspace */
    float *x, *x0;    /* [max_T, d] input and baseline */
    float *grad;      /* [rows, max_T, d] d logit / d input of each row */
    float *dlogits;   /* [rows, C] */
    int32_t *lengths; /* [rows] */
    double *acc;      /* [C][max_T] weighted sums of (x - x0) . gradient */
    int32_t *pad_ids; /* [max_T] <pad> ids for the baseline */
    float *alpha;     /* [rows] path points of a batch */
    double *weight;   /* [rows] their quadrature weights */
    /* the wide path (models with one): exact, see ac_attribution_run */
    int32_t *wide_set;      /* [max_T * wide_order] the text's distinct buckets */
    int32_t *wide_uses;     /* [max_T * wide_order] occurrences of each */
    double *wide_scores;    /* [C][max_T] its part of scores */
    double *wide_logits;    /* [C] its part of logits */
} ac_attribution;

/* Prepares attributions of texts up to max_T tokens with the model m (which
 * must outlive it): allocates the workspace and grows m's activations to
 * `rows` x max_T. steps: IG intervals to start with (>= 1; ignored by
 * gradxinput); max_steps: IG intervals at most (>= steps). method must be IG
 * or gradxinput. */
int ac_attribution_setup(ac_attribution *a, ac_model *m, ac_attr_method method, int max_T,
                         int steps, int max_steps, ac_err *err);
/* Explains one text of n ids (1 <= n <= max_T, no padding). Fills the results
 * above. Runs the model's forward and backward (so a previous forward of m can
 * no longer be back-propagated); m's parameters and gradients are untouched.
 * Allocates nothing. Returns 0, or -1 with err when an id is out of range or
 * n is outside 1..max_T. */
int ac_attribution_run(ac_attribution *a, const int32_t *ids, int n, ac_err *err);
/* The relative completeness gap of class c in the last run:
 * |gap[c]| / max(|logit[c] - baseline_logit[c]|, AC_ATTR_GAP_FLOOR)
 * (delta is this for the predicted class). */
double ac_attribution_delta(const ac_attribution *a, int c);
void ac_attribution_free(ac_attribution *a);

#endif
