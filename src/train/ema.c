/* Exponential moving average of the weights; see ema.h. */
#include "ema.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ac_ema_init(ac_ema *e, const ac_model *m, double decay, long step, ac_err *err)
{
    memset(e, 0, sizeof *e);
    e->decay = decay;
    e->n = m->n_params;
    e->rows = m->p.ngram_w ? m->cfg.ngram_buckets : 0;
    e->avg = malloc(e->n * sizeof *e->avg);
    e->raw = malloc(e->n * sizeof *e->raw);
    e->row_step = malloc((size_t)(e->rows ? e->rows : 1) * sizeof *e->row_step);
    if (!e->avg || !e->raw || !e->row_step) {
        ac_ema_free(e);
        return ac_err_set(err, "out of memory for the averaged weights (%.0f MiB)",
                          (double)(e->n * sizeof(float) * 2) / 1048576.0);
    }
    memcpy(e->avg, m->params, e->n * sizeof *e->avg);
    for (int64_t r = 0; r < e->rows; r++)
        e->row_step[r] = step;
    return 0;
}

void ac_ema_free(ac_ema *e)
{
    free(e->avg);
    free(e->raw);
    free(e->row_step);
    memset(e, 0, sizeof *e);
}

/* The row's average current as of `step`, given its weights did not change
 * since row_step. */
static void catch_up_row(ac_ema *e, const ac_model *m, int64_t r, long step)
{
    long behind = step - e->row_step[r];
    if (behind <= 0)
        return;
    const size_t d = (size_t)m->cfg.d_model;
    const size_t at = m->dense_params + (size_t)r * d;
    const float keep = (float)pow(e->decay, (double)behind);
    for (size_t i = 0; i < d; i++) {
        float p = m->params[at + i];
        e->avg[at + i] = p + (e->avg[at + i] - p) * keep;
    }
    e->row_step[r] = step;
}

void ac_ema_before_step(ac_ema *e, const ac_model *m, long step)
{
    for (int i = 0; i < m->n_ngram_rows && e->rows; i++)
        catch_up_row(e, m, m->ngram_rows[i], step);
}

void ac_ema_after_step(ac_ema *e, const ac_model *m, long steps_done)
{
    const float decay = (float)e->decay, mix = 1.0f - decay;
    float *avg = e->avg;
    const float *p = m->params;
    const long n = (long)m->dense_params;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++)
        avg[i] = decay * avg[i] + mix * p[i];
    if (!e->rows)
        return;
    const size_t d = (size_t)m->cfg.d_model;
    for (int k = 0; k < m->n_ngram_rows; k++) {
        int64_t r = m->ngram_rows[k];
        size_t at = m->dense_params + (size_t)r * d;
        for (size_t i = 0; i < d; i++)
            avg[at + i] = decay * avg[at + i] + mix * p[at + i];
        e->row_step[r] = steps_done;
    }
}

void ac_ema_catch_up(ac_ema *e, const ac_model *m, long steps_done)
{
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < e->rows; r++)
        catch_up_row(e, m, r, steps_done);
}

void ac_ema_swap_in(ac_ema *e, ac_model *m)
{
    if (e->swapped)
        return;
    memcpy(e->raw, m->params, e->n * sizeof *e->raw);
    memcpy(m->params, e->avg, e->n * sizeof *e->avg);
    e->swapped = 1;
}

void ac_ema_swap_out(ac_ema *e, ac_model *m)
{
    if (!e->swapped)
        return;
    memcpy(m->params, e->raw, e->n * sizeof *e->raw);
    e->swapped = 0;
}
