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
    e->rows = 0;
    for (int k = 0; k < AC_SPARSE_TABLES; k++) {
        e->row_base[k] = e->rows;
        if (m->sparse[k].tensor >= 0)
            e->rows += m->sparse[k].n_table_rows;
    }
    e->avg = malloc(e->n * sizeof *e->avg);
    e->raw = malloc(e->n * sizeof *e->raw);
    e->row_step = malloc((size_t)(e->rows ? e->rows : 1) * sizeof *e->row_step);
    if (!e->avg || !e->raw || !e->row_step) {
        ac_ema_free(e);
        return ac_err_set(err, "out of memory for the averaged weights (%.0f MiB)",
                          (double)(e->n * sizeof(float) * 2) / 1048576.0);
    }
    /* From zero, corrected at use (see ema.h): the weights before training
     * are no part of the average. */
    ac_ema_restart(e, step);
    return 0;
}

void ac_ema_restart(ac_ema *e, long step)
{
    memset(e->avg, 0, e->n * sizeof *e->avg);
    e->steps = step;
    for (int64_t r = 0; r < e->rows; r++)
        e->row_step[r] = step;
    e->swapped = 0;
}

void ac_ema_free(ac_ema *e)
{
    free(e->avg);
    free(e->raw);
    free(e->row_step);
    memset(e, 0, sizeof *e);
}

/* Row r of sparse table k: its average current as of `step`, given its
 * weights did not change since its row_step. */
static void catch_up_row(ac_ema *e, const ac_model *m, int k, int64_t r, long step)
{
    long *row_step = &e->row_step[e->row_base[k] + r];
    long behind = step - *row_step;
    if (behind <= 0)
        return;
    const size_t w = (size_t)m->sparse[k].width;
    const size_t at = m->sparse[k].offset + (size_t)r * w;
    const float keep = (float)pow(e->decay, (double)behind);
    for (size_t i = 0; i < w; i++) {
        float p = m->params[at + i];
        e->avg[at + i] = p + (e->avg[at + i] - p) * keep;
    }
    *row_step = step;
}

void ac_ema_before_step(ac_ema *e, const ac_model *m, long step)
{
    for (int k = 0; k < AC_SPARSE_TABLES; k++)
        for (int i = 0; i < m->sparse[k].n_rows; i++)
            catch_up_row(e, m, k, m->sparse[k].rows[i], step);
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
    for (int k = 0; k < AC_SPARSE_TABLES; k++) {
        const ac_sparse_rows *r = &m->sparse[k];
        const size_t w = (size_t)r->width;
        for (int j = 0; j < r->n_rows; j++) {
            size_t at = r->offset + (size_t)r->rows[j] * w;
            for (size_t i = 0; i < w; i++)
                avg[at + i] = decay * avg[at + i] + mix * p[at + i];
            e->row_step[e->row_base[k] + r->rows[j]] = steps_done;
        }
    }
    e->steps = steps_done;
}

/* The model gets the corrected average: dense weights at once, each table
 * row brought up to date as of the last step on the way, without writing it
 * back, so that evaluating (or not) never changes the average's later bits. */
void ac_ema_swap_in(ac_ema *e, ac_model *m)
{
    if (e->swapped)
        return;
    memcpy(e->raw, m->params, e->n * sizeof *e->raw);
    e->swapped = 1;
    if (e->steps == 0) /* before the first step there is nothing to average */
        return;
    const float scale = (float)(1.0 / (1.0 - pow(e->decay, (double)e->steps)));
    float *p = m->params;
    const float *avg = e->avg;
    const long n = (long)m->dense_params;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++)
        p[i] = avg[i] * scale;
    for (int k = 0; k < AC_SPARSE_TABLES; k++) {
        const ac_sparse_rows *t = &m->sparse[k];
        if (t->tensor < 0)
            continue;
        const size_t w = (size_t)t->width;
        const long *row_step = e->row_step + e->row_base[k];
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < t->n_table_rows; r++) {
            const size_t at = t->offset + (size_t)r * w;
            const float keep = (float)pow(e->decay, (double)(e->steps - row_step[r]));
            for (size_t i = 0; i < w; i++) {
                const float trained = e->raw[at + i];
                p[at + i] = (trained + (avg[at + i] - trained) * keep) * scale;
            }
        }
    }
}

void ac_ema_swap_out(ac_ema *e, ac_model *m)
{
    if (!e->swapped)
        return;
    memcpy(m->params, e->raw, e->n * sizeof *e->raw);
    e->swapped = 0;
}
