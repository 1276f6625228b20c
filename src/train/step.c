/* One optimizer step: forward and backward of the batch, whole or in
 * micro-batches summed exactly, shared among ranks in a fixed order, then
 * the clip, the AdamW update and the weight average. Apart from the loop
 * because it is the hot path and the one place gradients are combined. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attnctl/rng.h"
#include "trainer_internal.h"

static uint64_t step_dropout_key(const trainer *t)
{
    return ac_rng_key(ac_rng_key(t->run_seed, STREAM_DROPOUT), (uint64_t)t->state.step);
}

/* Forward and backward of one batch: the whole step's (first_row 0,
 * mean_rows 0) or a micro-batch's, whose loss is part of a mean over
 * mean_rows rows (masked positions for the masked LM). Gradients are added
 * into m->grads. */
static int forward_backward(trainer *t, const ac_batch *b, uint64_t dropout_key,
                            int64_t first_row, int mean_rows, float *loss, ac_err *err)
{
    if (t->obj->forward(t, b, dropout_key, first_row, loss, err))
        return -1;
    if (!isfinite(*loss))
        return trainer_non_finite_error(t, trainer_global_step(t) + 1, "the training loss", *loss, err);
    t->obj->backward(t, mean_rows);
    return 0;
}

/* The step's gradient from its micro-batches: this rank's block of them
 * summed exactly, then the sums of all ranks (the same bits for any split).
 * step_slots[j] receives micro-batch j's loss (0 for other ranks' ones).
 * Returns -1 with err set on a failure here; *failed_here says whose. */
static int micro_batch_gradient(trainer *t, int64_t batch, int rows, int n_micro,
                                int *failed_here, int *abandoned_here, ac_err *err)
{
    ac_model *m = &t->model;
    ac_batch *b = &t->batch;
    const int mb = t->micro_batch;
    /* The step's loss is a mean over all its rows (the classifier) or all
     * its masked positions (the masked LM): each micro-batch's weight. */
    int mean_rows = 0;
    for (int j = 0; j < n_micro; j++) {
        int first = j * mb, n = rows - first < mb ? rows - first : mb;
        int w = t->obj->micro_weight(t, batch, first, n, err);
        if (w < 0) {
            *failed_here = 1;
            return -1;
        }
        t->micro_weights[j] = w;
        mean_rows += w;
    }
    ac_gradsum_clear(&t->gradsum);
    const uint64_t step_key = step_dropout_key(t);
    int64_t mine_first, mine_end;
    trainer_rank_share(t, n_micro, &mine_first, &mine_end);
    for (int64_t j = mine_first; j < mine_end; j++) {
        if (trainer_stop_requested(t)) { /* the step is dropped (trainer_step) */
            *abandoned_here = 1;
            return 0;
        }
        int first = (int)j * mb, n = rows - first < mb ? rows - first : mb;
        ac_batch_fill_rows(b, &t->train_corpus, &t->plan, batch, first, n);
        /* Micro-batch 0 keeps the step's key: a step of one micro-batch is
         * the step of before micro-batches. */
        uint64_t key = j == 0 ? step_key : ac_rng_key(step_key, (uint64_t)j);
        float loss;
        if (forward_backward(t, b, key, first, mean_rows, &loss, err) ||
            ac_gradsum_add(&t->gradsum, m, err)) {
            *failed_here = 1;
            return -1;
        }
        t->step_slots[j] = loss;
    }
    return 0;
}

/* Every rank's touched rows become each rank's (an OR of the bit sets). */
static int merge_touched_rows(ac_gradsum *g, ac_comm *c, ac_err *err)
{
    if (g->token_rows && c->or_words(c, g->tokens.touched, g->tokens.words, err))
        return -1;
    if (g->ngrams.touched && c->or_words(c, g->ngrams.touched, g->ngrams.words, err))
        return -1;
    if (g->wide.touched && c->or_words(c, g->wide.touched, g->wide.words, err))
        return -1;
    return 0;
}

/* Micro-batch j's share of the step's mean loss. */
static double micro_weight(const trainer *t, int j, int rows, int n_micro)
{
    if (n_micro == 1)
        return 1.0;
    long total = 0;
    for (int i = 0; i < n_micro; i++)
        total += t->micro_weights[i];
    return (double)t->micro_weights[j] / (double)total;
}

/* One optimizer step on batch state.batch_in_epoch of the current plan. Allocates nothing.
 * A batch of one micro-batch is computed whole (by every rank: nothing to
 * share); a larger one in micro-batches summed exactly. */
int trainer_step(trainer *t, session_stats *s, ac_err *err)
{
    ac_model *m = &t->model;
    ac_batch *b = &t->batch;
    double t_start = ac_now_s();
    const int64_t batch = t->state.batch_in_epoch;
    const int rows = ac_batch_plan_rows(&t->plan, batch);
    const int n_micro = (rows + t->micro_batch - 1) / t->micro_batch;
    memset(t->step_slots, 0, ((size_t)n_micro + 3) * sizeof *t->step_slots);
    ac_model_zero_grad(m);
    int failed_here = 0, abandoned_here = 0, rc = 0;
    if (n_micro <= 1 && trainer_stop_requested(t)) {
        abandoned_here = 1;
    } else if (n_micro <= 1) {
        ac_batch_fill(b, &t->train_corpus, &t->plan, batch);
        float loss;
        rc = forward_backward(t, b, step_dropout_key(t), 0, 0, &loss, err);
        failed_here = rc != 0;
        if (!t->comm || t->comm->rank == 0)
            t->step_slots[0] = loss;
    } else {
        rc = micro_batch_gradient(t, batch, rows, n_micro, &failed_here, &abandoned_here, err);
    }
    /* Every rank learns the losses, whether one failed and whether one was
     * asked to stop, so that all take the same path. */
    if (t->comm) {
        char peer_msg[96];
        snprintf(peer_msg, sizeof peer_msg, "step %ld: another process failed (its message is above)",
                 trainer_global_step(t) + 1);
        trainer_agreement agreed;
        if (trainer_agree(t, failed_here, trainer_stop_requested(t), t->step_slots,
                          (size_t)n_micro, peer_msg, &agreed, err))
            return -1;
    }
    if (rc)
        return -1;
    /* Asked to stop before the step's update: the step is dropped, nothing
     * of the run's state has changed yet (parameters, moments, averages and
     * counters change below), so the run stops at the step before, at once.
     * Under mpirun every process drops it (a stop is agreed above): after
     * passing on Ctrl-C as SIGTERM, mpirun kills one second later. */
    if (t->comm ? t->stop_agreed : abandoned_here)
        return TRAINER_STEP_DROPPED;
    if (n_micro > 1) {
        ac_gradsum *g = &t->gradsum;
        if (t->comm && merge_touched_rows(g, t->comm, err))
            return -1;
        size_t n = ac_gradsum_pack(g);
        if (t->comm && t->comm->sum_int128(t->comm, g->packed, n, err))
            return -1;
        ac_gradsum_unpack(g, m);
    }
    double step_loss = 0.0;
    for (int j = 0; j < n_micro; j++)
        step_loss += micro_weight(t, j, rows, n_micro) * t->step_slots[j];
    float loss = (float)step_loss;
    float norm = ac_model_clip_grad_norm(m, t->optim.clip_norm);
    if (!isfinite(norm))
        return trainer_non_finite_error(t, trainer_global_step(t) + 1, "the gradient norm", norm, err);
    float lr = ac_lr_at(&t->optim, t->state.step);
    if (t->have_ema)
        ac_ema_before_step(&t->ema, m, t->state.step);
    ac_adamw_step(m, m->params, m->grads, t->m1, t->m2, &t->optim, lr, t->state.step + 1);
    if (t->have_ema)
        ac_ema_after_step(&t->ema, m, t->state.step + 1);

    t->state.step++;
    t->state.batch_in_epoch++;
    if (t->state.batch_in_epoch >= t->batches_per_epoch) {
        t->state.epoch++;
        t->state.batch_in_epoch = 0;
    }
    t->state.train_loss_sum += loss;
    t->state.train_loss_count++;

    long tokens = (long)ac_batch_plan_tokens(&t->plan, &t->train_corpus, batch);
    double dt = ac_now_s() - t_start;
    s->train_time += dt;
    s->time_since_eval += dt;
    s->steps++;
    s->examples += rows;
    s->tokens += (double)tokens;
    s->tokens_since_eval += (double)tokens;
    s->last_loss = loss;
    s->last_lr = lr;
    return 0;
}
