/* gradcheck.h — a header-only, double-precision central finite-difference
 * harness for checking hand-written backward passes against their forward.
 *
 * How to use it
 *   1. Gather what the forward needs in a context struct and write
 *          static double my_loss(void *ctx);
 *      It runs the (float) forward on the CURRENT inputs/parameters and
 *      returns a scalar in double: for a layer usually L = sum(out * R) with
 *      a fixed random R (gc_dot does that sum in double); for a whole model
 *      the mean cross-entropy it returns. It must be deterministic and must
 *      not change anything the next call depends on (dropout: a fixed key).
 *   2. Run the backward once with dout = dL/dout (R for sum(out * R)) into
 *      zeroed gradient buffers: that is the analytic gradient.
 *   3. For every float tensor x with analytic gradient g:
 *          gc_result r = gc_check(x, g, n, my_loss, &ctx, gc_defaults());
 *          ck_assert_msg(r.n_failed == 0 && r.n_kinks == 0, "w1: %s", r.msg);
 *      gc_check perturbs x[i] in place by +-h, evaluates the loss, and puts
 *      x[i] back bit-exactly. Loop over several tensors in any order.
 *
 * What is compared
 *   numeric_i = (L(x_i+) - L(x_i-)) / (x_i+ - x_i-), where x_i+- are the float
 *   values actually stored after adding/subtracting h (so rounding x_i +- h to
 *   float is not an error source); everything after the forward is double.
 *   Element i passes when |analytic_i - numeric_i| <= atol + rtol * |numeric_i|.
 *
 * Kinks (ReLU at 0, max pooling near a tie) make central differences
 * meaningless. With opts.kink_tol > 0 the harness also uses L(x) (one extra
 * forward per tensor) to get both one-sided slopes; when they differ by more
 * than kink_tol the element is counted in n_kinks and not compared. Layer tests
 * build inputs away from kinks and assert n_kinks == 0; a whole-model check can
 * tolerate a few kinks. Set kink_tol = 0 to disable the detection.
 *
 * opts.stride > 1 checks only every stride-th element (large tensors).
 */
#ifndef ATTNCTL_TESTS_GRADCHECK_H
#define ATTNCTL_TESTS_GRADCHECK_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

typedef double (*gc_loss_fn)(void *ctx);

typedef struct {
    double h;        /* perturbation step */
    double atol;     /* absolute tolerance */
    double rtol;     /* tolerance relative to |numeric| */
    double kink_tol; /* one-sided slopes differing by more than this = kink (0: off) */
    size_t stride;   /* check elements 0, stride, 2*stride, ... (0 or 1: all) */
} gc_options;

typedef struct {
    size_t n_checked;     /* elements compared */
    size_t n_failed;      /* elements outside the tolerance */
    size_t n_kinks;       /* elements skipped as kinks */
    double max_abs_err;   /* largest |analytic - numeric| over compared elements */
    double max_abs_numeric; /* largest |numeric|: near 0 means the check saw no signal */
    double max_excess;    /* largest |a - n| / (atol + rtol |n|); < 1 means all passed */
    double max_slope_gap; /* largest one-sided slope difference among compared elements
                             (kink_tol > 0): how close smooth curvature came to kink_tol */
    size_t worst_index;   /* element with the largest excess */
    double worst_analytic, worst_numeric;
    char msg[256];        /* one line describing the worst element */
} gc_result;

/* Defaults for a float forward evaluated in double: see test_layers.c for the
 * reasoning behind h and the tolerances. */
static inline gc_options gc_defaults(void)
{
    gc_options o = {.h = 1e-3, .atol = 1e-4, .rtol = 2e-3, .kink_tol = 5e-2, .stride = 1};
    return o;
}

/* sum(a * b) accumulated in double: the usual L = sum(out * R). */
static inline double gc_dot(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

static inline gc_result gc_check(float *x, const float *analytic, size_t n, gc_loss_fn loss,
                                 void *ctx, gc_options opts)
{
    gc_result r = {0};
    size_t stride = opts.stride > 1 ? opts.stride : 1;
    double loss_here = opts.kink_tol > 0 ? loss(ctx) : 0.0;
    for (size_t i = 0; i < n; i += stride) {
        float saved = x[i];
        float up = (float)((double)saved + opts.h);
        float down = (float)((double)saved - opts.h);
        x[i] = up;
        double loss_up = loss(ctx);
        x[i] = down;
        double loss_down = loss(ctx);
        x[i] = saved;
        double numeric = (loss_up - loss_down) / ((double)up - (double)down);
        if (opts.kink_tol > 0) {
            double slope_up = (loss_up - loss_here) / ((double)up - (double)saved);
            double slope_down = (loss_here - loss_down) / ((double)saved - (double)down);
            double gap = fabs(slope_up - slope_down);
            if (gap > opts.kink_tol) {
                r.n_kinks++;
                continue;
            }
            if (gap > r.max_slope_gap)
                r.max_slope_gap = gap;
        }
        double a = (double)analytic[i];
        double err = fabs(a - numeric);
        double excess = err / (opts.atol + opts.rtol * fabs(numeric));
        r.n_checked++;
        if (!(excess <= 1.0)) /* also catches NaN */
            r.n_failed++;
        if (err > r.max_abs_err)
            r.max_abs_err = err;
        if (fabs(numeric) > r.max_abs_numeric)
            r.max_abs_numeric = fabs(numeric);
        if (!(excess <= r.max_excess) || r.n_checked == 1) {
            r.max_excess = excess;
            r.worst_index = i;
            r.worst_analytic = a;
            r.worst_numeric = numeric;
        }
    }
    snprintf(r.msg, sizeof r.msg,
             "%zu/%zu failed, %zu kinks; worst [%zu] analytic %.8g numeric %.8g "
             "(|err| %.3g, %.2fx tolerance)",
             r.n_failed, r.n_checked, r.n_kinks, r.worst_index, r.worst_analytic, r.worst_numeric,
             fabs(r.worst_analytic - r.worst_numeric), r.max_excess);
    return r;
}

#endif
