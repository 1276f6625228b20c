/* Internal to src/train: one evaluation of a run, as logged in metrics.jsonl,
 * and the learning-curve SVG drawn from them. */
#ifndef ATTNCTL_TRAIN_CURVES_H
#define ATTNCTL_TRAIN_CURVES_H

typedef struct {
    long step;
    double epoch;        /* step / batches per epoch */
    double train_loss;   /* mean since the previous evaluation; NAN when unknown */
    double val_loss;     /* NAN without validation rows */
    double val_accuracy; /* NAN without validation rows */
    double span_accuracy; /* short-span validation accuracy; NAN without validation rows */
    double lr;
    double tokens_per_s;
    double elapsed_s;
} ac_metric_point;

/* A self-contained SVG document (starts with "<svg", ends with "</svg>\n"):
 * training and validation loss, and validation accuracy, against step.
 * Returns a malloc'd string, or NULL when out of memory. n may be 0. */
char *ac_curves_svg(const ac_metric_point *pts, int n);

#endif
