/* Internal to src/train: an exponential moving average of the weights, used
 * for evaluation and for the saved model (Polyak averaging).
 *
 * After every step k: avg = decay * avg + (1 - decay) * params, from avg = 0,
 * and what is used is avg / (1 - decay^k) (Adam's bias correction): an average
 * of the trained weights only, their weights summing to one. (Started from the
 * initial weights, a run of a few hundred steps at decay 0.999 evaluated and
 * saved mostly its initialisation.) A run much shorter than 1 / (1 - decay)
 * steps averages nearly evenly over all its steps. The n-gram
 * table is updated lazily like its AdamW: a row the batch did not touch kept
 * the same value p since its last update at step s, so its average at step k
 * is exactly p + (avg_s - p) * decay^(k - s); it is brought up to date only
 * when the row is touched again, and computed so (not stored) when the average
 * is read, so that reading it never changes later bits. Same bits for any
 * thread count (element-wise only). */
#ifndef ATTNCTL_TRAIN_EMA_H
#define ATTNCTL_TRAIN_EMA_H

#include <stddef.h>
#include <stdint.h>

#include "attnctl/error.h"
#include "attnctl/model.h"

typedef struct {
    double decay;
    size_t n;          /* parameters */
    float *avg;        /* [n] the average, in the model's layout */
    float *raw;        /* [n] the trained weights while the average sits in the model */
    int64_t rows;      /* rows of the model's row-sparse tables (0 without one) */
    long *row_step;    /* [rows]: step up to which each row's average is current */
    int64_t row_base[AC_SPARSE_TABLES]; /* each table's first entry in row_step */
    int swapped;       /* the model holds the average */
    long steps;        /* steps averaged (the bias correction's k) */
} ac_ema;

/* avg = 0 as of step (a resumed run then loads its saved avg). */
int ac_ema_init(ac_ema *e, const ac_model *m, double decay, long step, ac_err *err);
void ac_ema_free(ac_ema *e);
/* avg = 0 as of step again (a new member of a weight average starts). */
void ac_ema_restart(ac_ema *e, long step);
/* Between backward and the optimizer step of step `step` (0-based): brings
 * the rows this batch touched up to date (their values are about to change). */
void ac_ema_before_step(ac_ema *e, const ac_model *m, long step);
/* After the optimizer step: the average of step `steps_done`. */
void ac_ema_after_step(ac_ema *e, const ac_model *m, long steps_done);
/* Puts the corrected average into the model (keeping the trained weights; the
 * weights themselves before the first step), and back. */
void ac_ema_swap_in(ac_ema *e, ac_model *m);
void ac_ema_swap_out(ac_ema *e, ac_model *m);

#endif
