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

#endif
