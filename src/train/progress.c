/* The progress events the trainer reports to its caller (the command
 * line draws them): where the run stands, as one struct. */
#include <math.h>
#include <string.h>

#include "trainer_internal.h"

void trainer_fill_progress(const trainer *t, const session_stats *s, ac_train_event_kind kind,
                           ac_train_progress *p)
{
    memset(p, 0, sizeof *p);
    double now = ac_now_s();
    p->kind = kind;
    p->objective = t->cfg.model.objective;
    p->epochs = t->cfg.training.epochs;
    p->step = trainer_global_step(t);
    p->epoch = t->state.step > 0 ? (int)((t->state.step - 1) / t->batches_per_epoch) : 0;
    p->total_steps = t->run_steps;
    p->stop_step = t->stop_step;
    p->members = t->cfg.training.members;
    p->member = t->state.member < p->members ? t->state.member : p->members - 1;
    p->epoch_progress = (double)t->state.step / (double)t->batches_per_epoch;
    p->examples_per_s = s->train_time > 0 ? s->examples / s->train_time : 0.0;
    p->tokens_per_s = s->train_time > 0 ? s->tokens / s->train_time : 0.0;
    p->loss = s->last_loss;
    p->loss_avg = t->state.train_loss_count > 0
                      ? t->state.train_loss_sum / (double)t->state.train_loss_count
                      : NAN;
    p->lr = s->last_lr;
    p->elapsed_s = t->elapsed_base + (now - s->t0);
    p->eta_s = s->steps > 0 ? (double)(t->stop_step - trainer_global_step(t)) * (now - s->t0) /
                                  (double)s->steps
                            : NAN;
    p->val_loss = p->val_accuracy = p->val_span_accuracy = p->temperature = p->val_ece = NAN;
    p->best_val_accuracy = t->n_val > 0 ? t->state.best_metric : -1.0;
    p->best_step = t->state.best_step >= 0 ? t->state.steps_before + t->state.best_step : -1;
    p->bad_evals = t->state.bad_evals;
    p->n_train = t->n_train;
    p->n_val = t->n_val;
    p->vocab_size = t->vocab.size;
    p->n_params = t->model.n_params;
    p->memory_bytes = t->memory_bytes;
    p->batches_per_epoch = t->batches_per_epoch;
    p->resumed = t->opt->resume;
    p->n_train_tokens = t->train_corpus.n_tokens;
    p->n_unk_tokens = t->train_corpus.n_unk;
    p->n_truncated = t->train_corpus.n_truncated;
    p->adapted = t->adapted;
    p->padding_fraction = t->plan.padded_tokens > 0
                              ? 1.0 - (double)t->plan.real_tokens / (double)t->plan.padded_tokens
                              : 0.0;
}

void trainer_report(const trainer *t, const ac_train_progress *p)
{
    if (t->opt->progress)
        t->opt->progress(p, t->opt->progress_user);
}
