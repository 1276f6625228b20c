/* Inference on a classifier: a batch of encoded rows in, every row's logits,
 * probabilities and (with labels) loss out, in batch order. The one forward
 * loop that `attnctl eval`, `predict`, self-training's teacher and the
 * trainer's validation all run, so a text gets the same figures whichever of
 * them scores it. */
#ifndef ATTNCTL_INFER_H
#define ATTNCTL_INFER_H

#include <stdint.h>

#include "attnctl/error.h"
#include "attnctl/model.h"

/* How a batch's rows run through the model. */
typedef enum {
    /* As one forward of the whole batch (the trainer's validation: its
     * batches are the plan's, and its figures choose the best model). */
    AC_INFER_AS_GIVEN,
    /* As groups of rows of similar length, each padded only to its longest
     * row (eval, predict: a batch mixing short and long reviews does not
     * pay for padding every short one to the longest). A row's result does
     * not depend on the rows it runs with. */
    AC_INFER_BY_LENGTH,
} ac_infer_grouping;

typedef struct {
    int max_B, max_T, n_classes;
    ac_infer_grouping grouping;
    int threads; /* OpenMP threads for big batches (small ones run on one) */
    /* AC_INFER_BY_LENGTH: the rows of one group and the rows by length. */
    int32_t *group_ids, *group_lengths, *group_labels, *order; /* [max_B * max_T], [max_B] x3 */
    /* The last batch's results, row b at b * n_classes (losses at b). */
    float *logits, *probs, *losses; /* [max_B * n_classes] x2, [max_B] */
    /* With labels: the batch's mean loss, summed in row order (as the
     * model's forward returns it for one batch). */
    float mean_loss;
} ac_infer;

/* Buffers for batches of up to max_B rows of up to max_T tokens; threads is
 * the OpenMP thread count for batches big enough to share. */
int ac_infer_init(ac_infer *s, int max_B, int max_T, int n_classes, ac_infer_grouping grouping,
                  int threads, ac_err *err);
/* The forward of B rows of stride T (ids [B * T], lengths [B], labels [B]
 * or NULL), at the model's temperature, without dropout. The model's
 * activations grow to fit when they are smaller: the first allocation fits
 * the first batch exactly (one `predict` line allocates for that line only),
 * any later growth goes to max_B x max_T at once. */
int ac_infer_run(ac_infer *s, ac_model *m, const int32_t *ids, const int32_t *lengths,
                 const int32_t *labels, int B, int T, ac_err *err);
static inline const float *ac_infer_probs(const ac_infer *s, int b)
{
    return s->probs + (size_t)b * (size_t)s->n_classes;
}
static inline const float *ac_infer_logits(const ac_infer *s, int b)
{
    return s->logits + (size_t)b * (size_t)s->n_classes;
}
void ac_infer_free(ac_infer *s);

/* ---- whole batches on parallel threads ----
 * Where there are many batches (eval, predict), running each on one thread,
 * several at once, beats sharing every layer of one batch among the threads:
 * the layers of a batch are small (a quantized model's most of all), and
 * their fork and join cost more than they save. A pool holds one worker per
 * thread: a view of the model (ac_model_view: the weights shared, its own
 * activations) and its own ac_infer buffers. A batch's results do not depend
 * on the worker or the thread count: each runs as ac_infer_run runs it. */

/* One batch of a pool run: its rows and where their results go. */
typedef struct {
    const int32_t *ids, *lengths, *labels; /* [B * T], [B], [B] or NULL */
    int B, T;
    float *probs;  /* out: [B * n_classes] */
    float *logits; /* out: [B * n_classes], or NULL */
    float *losses; /* out: [B] (with labels), or NULL */
    float mean_loss; /* out: with labels, as ac_infer's */
} ac_infer_job;

typedef struct {
    int n_workers;
    int threads;        /* for a run of one batch: shared inside it, as ac_infer_run does */
    ac_model *views;    /* [n_workers] */
    ac_infer *runs;     /* [n_workers] */
    int *order;         /* [max_jobs] the jobs, biggest first */
    ac_err *errs;       /* [max_jobs] */
    int *failed;        /* [max_jobs] */
    int max_jobs;
} ac_infer_pool;

/* Workers for up to `threads` batches at once (each of up to max_B x max_T,
 * grouped by length) and runs of up to max_jobs batches. m must outlive the
 * pool and not be freed or reallocated while it runs. */
int ac_infer_pool_init(ac_infer_pool *p, const ac_model *m, int threads, int max_jobs, int max_B,
                       int max_T, ac_err *err);
/* Runs jobs [0, n) (n <= max_jobs), each on one thread; one job alone
 * shares its layers among the threads instead. Every job's results are
 * written; on failure, the error of the first failing job (in job order).
 * A probability that is not a number fails the job (AC_OUTPUT_NOT_FINITE):
 * no verdict is drawn from a broken model. */
#define AC_OUTPUT_NOT_FINITE                                                                      \
    "the model's output is not a number: a weight in model.safetensors is NaN or infinite"
int ac_infer_pool_run(ac_infer_pool *p, ac_infer_job *jobs, int n, ac_err *err);
void ac_infer_pool_free(ac_infer_pool *p);

#endif
