/* Masked-language-model pretraining (BERT, Devlin et al. 2019) on the
 * encoder of src/nn/model.c: the masking of a batch, and the head of a model
 * whose config says objective masked_lm:
 *
 *   h       = encoder(masked ids)[masked positions]           [M, d]
 *   logits  = h embed.weight^T + mlm.bias                      [M, V]  (tied output layer)
 *   loss    = mean over the M positions of -log softmax(logits)[original id]
 *
 * Logits exist only for the M masked positions, never for the whole batch.
 * The tied weight gets the head's gradient and the input embedding's. */
#ifndef ATTNCTL_MLM_H
#define ATTNCTL_MLM_H

#include <stddef.h>
#include <stdint.h>

#include "attnctl/error.h"
#include "attnctl/model.h"

#define AC_MLM_MASK_FRAC 0.15      /* share of the eligible positions predicted */
#define AC_MLM_SHARE_MASKED 0.8f   /* of those: input replaced by <mask> */
#define AC_MLM_SHARE_RANDOM 0.1f   /* replaced by a random word; the rest keep their token */

typedef struct {
    double mask_frac;      /* in (0, 1) */
    int32_t mask_id;       /* <mask> */
    int32_t first_word_id; /* random replacements come from [first_word_id, vocab_size) */
    int32_t vocab_size;
    int32_t skip_first_id; /* a sequence starting with this id (<cls>) never has it masked; -1: none */
} ac_mlm_masking;

/* Upper bound of the masked positions of a batch: B * ceil(mask_frac * T). */
int ac_mlm_max_masked(int B, int T, double mask_frac);

/* BERT masking of a batch (ids [B*T], lengths [B]), a pure function of key:
 * in sequence b the eligible positions are its real tokens (t < lengths[b])
 * but a leading skip_first_id; floor(mask_frac * n_eligible + u) of them (u
 * uniform in [0, 1), so the expected share is exactly mask_frac) are chosen
 * uniformly; each chosen input becomes <mask> with probability 0.8, a
 * uniformly drawn word with 0.1, and stays with 0.1. If no position of the
 * whole batch was chosen, one is (so every batch has a loss). Writes the
 * encoder input masked_ids [B*T] (pads copied), the chosen flat positions
 * b*T+t in ascending order into positions and their original ids into
 * targets (both at most ac_mlm_max_masked(B, T, mask_frac) long); scratch:
 * T ints. Returns M, or -1 when the batch has no eligible position. */
int ac_mlm_mask_batch(const ac_mlm_masking *spec, const int32_t *ids, const int32_t *lengths,
                      int B, int T, uint64_t key, int32_t *masked_ids, int32_t *positions,
                      int32_t *targets, int32_t *scratch);
/* The same for rows first_row.. of a larger batch (a micro-batch): a row's
 * masking depends on key and its index in the whole batch only, so a batch
 * masked at once or in micro-batches masks the same positions (but for the
 * one position forced into a micro-batch that drew none). */
int ac_mlm_mask_rows(const ac_mlm_masking *spec, const int32_t *ids, const int32_t *lengths,
                     int B, int T, uint64_t key, int64_t first_row, int32_t *masked_ids,
                     int32_t *positions, int32_t *targets, int32_t *scratch);
/* M of ac_mlm_mask_rows with the same arguments, without masking. */
int ac_mlm_count_masked(const ac_mlm_masking *spec, const int32_t *ids, const int32_t *lengths,
                        int B, int T, uint64_t key, int64_t first_row);

/* Buffers of the head (and of the masking) for batches up to B x T. */
typedef struct {
    int max_rows, max_B, max_T;
    int32_t *masked_ids;  /* [max_B * max_T] encoder input from ac_mlm_mask_batch */
    int32_t *positions;   /* [max_rows] */
    int32_t *targets;     /* [max_rows] */
    int32_t *predicted;   /* [max_rows] argmax of the last forward */
    int32_t *scratch;     /* [max_T] */
    float *hidden;        /* [max_rows, d] encoder output at the masked positions */
    float *logits;        /* [max_rows, V] logits, probabilities after the forward, logit
                             gradients after the backward */
    float *losses;        /* [max_rows] */
    float *grad_hidden;   /* [max_rows, d] */
    /* the last forward */
    int n_rows;           /* M; 0: nothing to differentiate */
    int n_correct;        /* positions whose argmax is the target */
    int mean_rows;        /* backward: the loss is a mean over this many masked positions
                             (of the whole step); 0: over the last forward's M */
    const int32_t *last_positions, *last_targets;
} ac_mlm;

size_t ac_mlm_bytes(const ac_model_config *cfg, int B, int T, double mask_frac);
int ac_mlm_alloc(ac_mlm *h, const ac_model_config *cfg, int B, int T, double mask_frac,
                 ac_err *err);
void ac_mlm_free(ac_mlm *h);

/* Forward of a masked-LM model (m's activations allocated for B x T): the
 * encoder on input_ids, then the head at positions [M] (flat b*T+t, real
 * tokens) predicting targets [M]. Returns the mean loss over the M
 * positions and sets h->n_correct; NaN, with nothing to differentiate, when
 * m is not a masked-LM model, M is outside 1..h->max_rows, a position or
 * target is out of range, or the encoder refuses the batch. positions and
 * targets must stay valid until the backward. Allocates nothing. */
float ac_mlm_forward(ac_model *m, ac_mlm *h, const int32_t *input_ids, const int32_t *lengths,
                     int B, int T, const int32_t *positions, const int32_t *targets, int M,
                     int train, uint64_t dropout_key);
/* Backward of the last ac_mlm_forward (train, or m->keep_attention): adds
 * every parameter's gradient into m->grads. Allocates nothing. */
void ac_mlm_backward(ac_model *m, ac_mlm *h);

#endif
