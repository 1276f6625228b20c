/* The inference loop (attnctl/infer.h): one batch through the model, the
 * rows' results copied out in batch order. */
#include "attnctl/infer.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Batches of fewer token positions (B x T) run on one thread. */
#define SERIAL_BELOW_TOKENS 4096
/* What one more forward costs beyond its tokens, in token positions: a
 * batch is cut into groups of similar length only where that saves more
 * padding than this. */
#define GROUP_COST_TOKENS 128

int ac_infer_init(ac_infer *s, int max_B, int max_T, int n_classes, ac_infer_grouping grouping,
                  int threads, ac_err *err)
{
    memset(s, 0, sizeof *s);
    s->max_B = max_B;
    s->max_T = max_T;
    s->n_classes = n_classes;
    s->grouping = grouping;
    s->threads = threads;
    const size_t rows = (size_t)max_B, outputs = rows * (size_t)n_classes;
    if (grouping == AC_INFER_BY_LENGTH) {
        s->group_ids = calloc(rows * (size_t)max_T, sizeof *s->group_ids);
        s->group_lengths = calloc(rows, sizeof *s->group_lengths);
        s->group_labels = calloc(rows, sizeof *s->group_labels);
        s->order = calloc(rows, sizeof *s->order);
    }
    s->logits = calloc(outputs, sizeof *s->logits);
    s->probs = calloc(outputs, sizeof *s->probs);
    s->losses = calloc(rows, sizeof *s->losses);
    if ((grouping == AC_INFER_BY_LENGTH &&
         (!s->group_ids || !s->group_lengths || !s->group_labels || !s->order)) ||
        !s->logits || !s->probs || !s->losses) {
        ac_infer_free(s);
        return ac_err_set(err, "out of memory for inference on batches of %d x %d tokens", max_B,
                          max_T);
    }
    return 0;
}

void ac_infer_free(ac_infer *s)
{
    free(s->group_ids);
    free(s->group_lengths);
    free(s->group_labels);
    free(s->order);
    free(s->logits);
    free(s->probs);
    free(s->losses);
    memset(s, 0, sizeof *s);
}

/* The first allocation fits the first batch exactly (fast cold start for one
 * line); any later growth jumps straight to max_B x max_T so that it
 * happens at most once more. */
static int ensure_activations(const ac_infer *s, ac_model *m, int B, int T, ac_err *err)
{
    const ac_activations *a = &m->act;
    if (a->mem && B <= a->max_B && T <= a->max_T)
        return 0;
    int want_B = B, want_T = T;
    if (a->mem) {
        want_B = s->max_B;
        want_T = s->max_T;
    }
    return ac_model_alloc_activations(m, want_B, want_T, err);
}

/* One forward over B rows of stride T; returns the model's mean loss. */
static int forward_rows(const ac_infer *s, ac_model *m, const int32_t *ids,
                        const int32_t *lengths, const int32_t *labels, int B, int T,
                        float *mean_loss, ac_err *err)
{
    if (ensure_activations(s, m, B, T, err) != 0)
        return -1;
    /* A small batch (a one-line `predict`) runs on one thread: starting
     * OpenMP's threads and its fork/join cost more than they save there
     * (measured: 1 review 11.5 ms against 21-25 ms with 2 threads; 4 IMDB
     * reviews 27 against 30 ms; 32 reviews 105 against 98 ms). Any thread
     * count gives the same bits. The caller's count is restored: training
     * after a teacher's labelling (train --teacher) must not run on one. */
    int threads = (size_t)B * (size_t)T < SERIAL_BELOW_TOKENS ? 1 : s->threads;
    int before = omp_get_max_threads();
    if (threads != before)
        omp_set_num_threads(threads);
    *mean_loss = ac_model_forward(m, ids, lengths, labels, B, T, 0, 0);
    if (threads != before)
        omp_set_num_threads(before);
    return 0;
}

/* The results of rows [0, n) of the model's last forward, as rows
 * row_of[k] (or k) of the batch. */
static void copy_out(ac_infer *s, const ac_model *m, const int *row_of, int n, int with_labels)
{
    const ac_activations *a = &m->act;
    const size_t C = (size_t)s->n_classes;
    for (int k = 0; k < n; k++) {
        const size_t row = (size_t)(row_of ? row_of[k] : k);
        memcpy(s->logits + row * C, a->logits + (size_t)k * C, C * sizeof *s->logits);
        memcpy(s->probs + row * C, a->probs_out + (size_t)k * C, C * sizeof *s->probs);
        s->losses[row] = with_labels ? a->losses[k] : 0.0f;
    }
}

/* s->order[0..B): the rows by length, longest first (ties in batch order). */
static void order_by_length(ac_infer *s, const int32_t *lengths, int B)
{
    for (int i = 0; i < B; i++) {
        int j = i;
        while (j > 0 && lengths[s->order[j - 1]] < lengths[i]) {
            s->order[j] = s->order[j - 1];
            j--;
        }
        s->order[j] = i;
    }
}

static int run_by_length(ac_infer *s, ac_model *m, const int32_t *ids, const int32_t *lengths,
                         const int32_t *labels, int B, int T, ac_err *err)
{
    order_by_length(s, lengths, B);
    /* Groups of consecutive rows in that order, each padded to its first
     * (longest) row, chosen to cost the fewest token positions (dynamic
     * programming over where the groups end; B is a batch, tens of rows). */
    long best[B + 1];
    int start[B + 1];
    best[0] = 0;
    for (int j = 1; j <= B; j++) {
        best[j] = -1;
        for (int i = 0; i < j; i++) {
            long cost = best[i] + (long)(j - i) * lengths[s->order[i]] + GROUP_COST_TOKENS;
            if (best[j] < 0 || cost < best[j]) {
                best[j] = cost;
                start[j] = i;
            }
        }
    }
    int ends[B], n_groups = 0;
    for (int j = B; j > 0; j = start[j])
        ends[n_groups++] = j;
    for (int g = n_groups - 1; g >= 0; g--) {
        const int end = ends[g], begin = g + 1 < n_groups ? ends[g + 1] : 0;
        const int n = end - begin, Tg = lengths[s->order[begin]];
        for (int k = 0; k < n; k++) {
            const int row = s->order[begin + k];
            memcpy(s->group_ids + (size_t)k * Tg, ids + (size_t)row * T,
                   (size_t)Tg * sizeof *s->group_ids);
            s->group_lengths[k] = lengths[row];
            s->group_labels[k] = labels ? labels[row] : 0;
        }
        float group_loss;
        if (forward_rows(s, m, s->group_ids, s->group_lengths, labels ? s->group_labels : NULL, n,
                         Tg, &group_loss, err) != 0)
            return -1;
        copy_out(s, m, s->order + begin, n, labels != NULL);
    }
    /* The batch's mean as one forward sums it: in row order. */
    double total = 0.0;
    for (int b = 0; b < B; b++)
        total += s->losses[b];
    s->mean_loss = labels ? (float)(total / B) : 0.0f;
    return 0;
}

int ac_infer_run(ac_infer *s, ac_model *m, const int32_t *ids, const int32_t *lengths,
                 const int32_t *labels, int B, int T, ac_err *err)
{
    if (B < 1 || B > s->max_B || T < 1 || T > s->max_T)
        return ac_err_set(err, "internal: batch %d x %d outside %d x %d", B, T, s->max_B,
                          s->max_T);
    if (m->cfg.n_classes != s->n_classes)
        return ac_err_set(err, "internal: a model of %d classes run with buffers for %d",
                          m->cfg.n_classes, s->n_classes);
    if (s->grouping == AC_INFER_BY_LENGTH)
        return run_by_length(s, m, ids, lengths, labels, B, T, err);
    float loss;
    if (forward_rows(s, m, ids, lengths, labels, B, T, &loss, err) != 0)
        return -1;
    copy_out(s, m, NULL, B, labels != NULL);
    s->mean_loss = labels ? loss : 0.0f;
    return 0;
}

/* ------------------------------------------------------------ the pool */

int ac_infer_pool_init(ac_infer_pool *p, const ac_model *m, int threads, int max_jobs, int max_B,
                       int max_T, ac_err *err)
{
    memset(p, 0, sizeof *p);
    if (threads < 1)
        threads = 1;
    if (max_jobs < 1)
        max_jobs = 1;
    p->threads = threads;
    p->max_jobs = max_jobs;
    p->views = calloc((size_t)threads, sizeof *p->views);
    p->runs = calloc((size_t)threads, sizeof *p->runs);
    p->order = calloc((size_t)max_jobs, sizeof *p->order);
    p->errs = calloc((size_t)max_jobs, sizeof *p->errs);
    p->failed = calloc((size_t)max_jobs, sizeof *p->failed);
    if (!p->views || !p->runs || !p->order || !p->errs || !p->failed) {
        ac_infer_pool_free(p);
        return ac_err_set(err, "out of memory for %d inference threads", threads);
    }
    for (int w = 0; w < threads; w++) {
        if (ac_infer_init(&p->runs[w], max_B, max_T, m->cfg.n_classes, AC_INFER_BY_LENGTH, 1,
                          err) != 0) {
            ac_infer_pool_free(p);
            return -1;
        }
        ac_model_view(&p->views[w], m);
        p->n_workers = w + 1;
    }
    return 0;
}

void ac_infer_pool_free(ac_infer_pool *p)
{
    for (int w = 0; w < p->n_workers; w++) {
        ac_infer_free(&p->runs[w]);
        ac_model_view_free(&p->views[w]);
    }
    free(p->views);
    free(p->runs);
    free(p->order);
    free(p->errs);
    free(p->failed);
    memset(p, 0, sizeof *p);
}

/* Job j on worker w; its results copied into the job. */
static int run_job(ac_infer_pool *p, int w, ac_infer_job *j, ac_err *err)
{
    ac_infer *s = &p->runs[w];
    if (ac_infer_run(s, &p->views[w], j->ids, j->lengths, j->labels, j->B, j->T, err) != 0)
        return -1;
    const size_t n = (size_t)j->B * (size_t)s->n_classes;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(s->probs[i]))
            return ac_err_set(err, AC_OUTPUT_NOT_FINITE);
    memcpy(j->probs, s->probs, n * sizeof *j->probs);
    if (j->logits)
        memcpy(j->logits, s->logits, n * sizeof *j->logits);
    if (j->losses)
        memcpy(j->losses, s->losses, (size_t)j->B * sizeof *j->losses);
    j->mean_loss = s->mean_loss;
    return 0;
}

int ac_infer_pool_run(ac_infer_pool *p, ac_infer_job *jobs, int n, ac_err *err)
{
    if (n < 0 || n > p->max_jobs)
        return ac_err_set(err, "internal: %d batches for a pool of %d", n, p->max_jobs);
    const int team = n < p->n_workers ? n : p->n_workers;
    if (team <= 1) {
        /* one batch (an interactive line) or one thread: the batch's
         * layers get every thread, as ac_infer_run shares them */
        p->runs[0].threads = p->threads;
        for (int k = 0; k < n; k++)
            if (run_job(p, 0, &jobs[k], err) != 0)
                return -1;
        return 0;
    }
    /* The biggest batches first (ties in job order), so the last ones to
     * finish are small and no thread waits long for the others. */
    for (int i = 0; i < n; i++) {
        const long cost = (long)jobs[i].B * jobs[i].T;
        int j = i;
        while (j > 0 && (long)jobs[p->order[j - 1]].B * jobs[p->order[j - 1]].T < cost) {
            p->order[j] = p->order[j - 1];
            j--;
        }
        p->order[j] = i;
        p->failed[i] = 0;
    }
#pragma omp parallel num_threads(team)
    {
        const int w = omp_get_thread_num();
        /* the batch's layers on this thread alone (and no nested teams) */
        p->runs[w].threads = 1;
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < n; i++) {
            const int k = p->order[i];
            p->failed[k] = run_job(p, w, &jobs[k], &p->errs[k]) != 0;
        }
    }
    for (int k = 0; k < n; k++)
        if (p->failed[k]) {
            *err = p->errs[k];
            return -1;
        }
    return 0;
}
