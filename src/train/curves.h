/* Internal to src/train: one evaluation of a run, as logged in metrics.jsonl,
 * and the learning-curve SVG drawn from them; the reliability diagram; and
 * the SVG helpers both drawings share. */
#ifndef ATTNCTL_TRAIN_CURVES_H
#define ATTNCTL_TRAIN_CURVES_H

#include <stddef.h>

#include "attnctl/metrics.h"
#include "attnctl/strbuf.h"

typedef struct {
    long step;
    double epoch;        /* step / batches per epoch */
    double train_loss;   /* mean since the previous evaluation; NAN when unknown */
    double val_loss;     /* NAN without validation rows */
    double val_accuracy; /* NAN without validation rows */
    double span_accuracy; /* short-span validation accuracy; NAN without validation rows */
    double span_majority; /* share of the spans given the most frequent predicted class */
    double temperature;   /* fitted on the validation rows at this evaluation; NAN without */
    double val_ece;       /* validation ECE at that temperature */
    double lr;
    double tokens_per_s;
    double elapsed_s;
    int member;           /* with training.members > 1: the member (from 1), or 0 for the
                             members' average (soup = 1); 0 in a run of one model */
    int soup;             /* 1: the evaluation of the members' average */
    int kept_member;      /* soup: 0 when the average is the model; k when it read below
                             every member on validation and member k (from 1) is kept */
    double mean_val_accuracy; /* kept_member > 0: what the average read; NAN otherwise */
    double worst_member_accuracy; /* kept_member > 0: the lowest member's (not logged) */
} ac_metric_point;

/* What the curves are called (NULL: a classifier's: "Training",
 * "validation loss", "validation accuracy"). */
typedef struct {
    const char *title, *val_loss, *accuracy;
} ac_curves_labels;

/* A self-contained SVG document (starts with "<svg", ends with "</svg>\n"):
 * training and validation loss, and validation accuracy, against step.
 * Returns a malloc'd string, or NULL when out of memory. n may be 0. */
char *ac_curves_svg(const ac_metric_point *pts, int n, const ac_curves_labels *labels);

/* A self-contained SVG reliability diagram (starts with "<svg", ends with
 * "</svg>\n"): for each confidence bin of r a bar at the bin's accuracy,
 * shaded by its number of examples (log scale, with a legend), a mark at its
 * mean confidence, the diagonal of perfect calibration, and a title
 * "TITLE (ECE 0.0123, N = 456)" (title NULL: "Reliability"; valid UTF-8; an
 * ECE that is not finite reads "n/a"). With n == 0, r NULL or every bin
 * empty, the plot says "no data". Returns a malloc'd string, or NULL when
 * out of memory. */
char *ac_calibration_svg(const ac_reliability *r, double ece, long n, const char *title);

/* ---- SVG helpers shared by svg_curves.c and svg_calibration.c (text in an
 * ac_strbuf) ---- */

typedef struct {
    double lo, hi, tick; /* axis range and tick spacing */
} svg_axis;

typedef struct {
    double x0, y0, w, h; /* plot area in SVG coordinates */
    svg_axis xr, yr;
} svg_plot;

/* Data coordinates to SVG coordinates. */
double svg_x(const svg_plot *p, double x);
double svg_y(const svg_plot *p, double y);
/* Grid, ticks with labels, frame and the two axis titles. */
void svg_draw_axes(ac_strbuf *sb, const svg_plot *p, const char *x_title, const char *y_title);
/* A grey note in the middle of the plot area ("no data"). */
void svg_draw_message(ac_strbuf *sb, const svg_plot *p, const char *msg);

#endif
