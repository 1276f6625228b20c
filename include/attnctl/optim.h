/* AdamW over the flat parameter buffer, global gradient-norm clipping and the
 * learning-rate schedule. */
#ifndef ATTNCTL_OPTIM_H
#define ATTNCTL_OPTIM_H

#include <stddef.h>

#include "attnctl/model.h"
#include "attnctl/names.h"

typedef enum { AC_SCHED_COSINE = 0, AC_SCHED_LINEAR = 1, AC_SCHED_CONSTANT = 2 } ac_schedule_kind;

typedef struct {
    float lr;            /* peak learning rate */
    float beta1, beta2, eps;
    float weight_decay;  /* decoupled; applied only to tensors with weight_decay = 1 */
    float clip_norm;     /* global gradient-norm clip; <= 0 disables */
    ac_schedule_kind schedule;
    long warmup_steps;
    long total_steps;
    float min_lr_ratio;  /* final lr = lr * min_lr_ratio */
} ac_optim_config;

void ac_optim_config_defaults(ac_optim_config *c);
const char *ac_schedule_name(ac_schedule_kind k);
int ac_schedule_parse(const char *s, ac_schedule_kind *out);
extern const ac_names ac_schedule_names; /* the names, in the order listed */

/* Learning rate for 0-based step `step`: linear warmup over warmup_steps, then
 * cosine or linear decay to lr*min_lr_ratio at total_steps. */
float ac_lr_at(const ac_optim_config *c, long step);

/* Global L2 norm of grads (deterministic fixed-order reduction in double).
 * If clip_norm > 0 and the norm exceeds it, grads are scaled down. Returns the
 * norm before clipping. */
float ac_clip_grad_norm(float *grads, size_t n, float clip_norm);

/* The same over a model's gradients, visiting only the touched rows of a
 * row-sparse table (same bits for any thread count). */
float ac_model_clip_grad_norm(ac_model *m, float clip_norm);

/* One AdamW step (t is the 1-based step count for bias correction). A
 * row-sparse tensor (the n-gram and wide tables) is updated lazily: only the rows the
 * last backward touched, as PyTorch's SparseAdam does, plus decoupled decay.
 * m1, m2: first and second moments in the model's parameter layout. */
void ac_adamw_step(const ac_model *m, float *params, const float *grads, float *m1, float *m2,
                   const ac_optim_config *c, float lr, long t);

#endif
