/* Evaluations during training: the objective's figures (t->obj->evaluate),
 * then everything written after an evaluation, in the order a crash needs;
 * and the evaluation of the members' average. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pick_model.h"
#include "trainer_internal.h"

/* The log record of an evaluation at this step, every figure still unknown. */
static ac_metric_point unmeasured_point(const trainer *t)
{
    return (ac_metric_point){
        .step = trainer_global_step(t),
        .epoch = (double)t->state.step / (double)t->batches_per_epoch,
        .train_loss = NAN,
        .val_loss = NAN,
        .val_accuracy = NAN,
        .span_accuracy = NAN,
        .span_majority = NAN,
        .temperature = NAN,
        .val_ece = NAN,
        .lr = NAN,
        .tokens_per_s = NAN,
        .elapsed_s = NAN,
        .mean_val_accuracy = NAN,
        .worst_member_accuracy = NAN,
    };
}

/* An evaluation is done and saved: the result's figures and the caller's
 * progress event. */
static void report_evaluation(trainer *t, const session_stats *s, const ac_metric_point *p,
                              int improved, ac_train_result *res)
{
    res->n_evals++;
    res->kept_member = p->kept_member;
    res->last_val_loss = p->val_loss;
    res->last_val_accuracy = p->val_accuracy;
    ac_train_progress ev;
    trainer_fill_progress(t, s, AC_TRAIN_EVENT_EVAL, &ev);
    ev.loss = p->train_loss;
    ev.val_loss = p->val_loss;
    ev.val_accuracy = p->val_accuracy;
    ev.val_span_accuracy = p->span_accuracy;
    ev.temperature = p->temperature;
    ev.val_ece = p->val_ece;
    ev.improved = improved;
    ev.soup = p->soup;
    ev.kept_member = p->kept_member;
    ev.mean_val_accuracy = p->mean_val_accuracy;
    ev.worst_member_accuracy = p->worst_member_accuracy;
    ev.tokens_per_s = p->tokens_per_s;
    trainer_report(t, &ev);
}

/* Evaluation and everything that follows it: metrics line, curves, best
 * model, resumable checkpoint. The order matters for crashes: the metrics
 * line first (dropped on resume if the checkpoint did not follow), then the
 * best model, then the checkpoint that records it as best. */
int trainer_evaluate_and_save(trainer *t, session_stats *s, int at_stop, ac_train_result *res,
                              ac_err *err)
{
    /* With averaging, the average is what is evaluated and kept as the model.
     * The checkpoint keeps the trained weights, which the evaluation then
     * does not see: they are checked here, before anything is written. */
    if (t->have_ema) {
        const float *w = t->model.params;
        for (size_t i = 0; i < t->model.n_params; i++)
            if (!isfinite(w[i]))
                return trainer_non_finite_error(t, trainer_global_step(t), "a trained weight",
                                                w[i], err);
        ac_ema_swap_in(&t->ema, &t->model);
    }
    ac_trainer_state *st = &t->state;
    ac_metric_point p = unmeasured_point(t);
    p.member = trainer_has_members(t) ? st->member + 1 : 0;
    if (st->train_loss_count > 0)
        p.train_loss = st->train_loss_sum / (double)st->train_loss_count;
    p.lr = s->last_lr;
    if (s->time_since_eval > 0)
        p.tokens_per_s = s->tokens_since_eval / s->time_since_eval;
    int rc = t->obj->evaluate(t, &p, err);
    if (rc < 0)
        return -1;
    if (rc == TRAINER_EVAL_ABANDONED) {
        /* Asked to stop: the checkpoint the run loop saves next says that this
         * step's evaluation is still to do, and a resumed run does it first,
         * on the same weights, so it goes on as if never stopped. */
        if (t->have_ema)
            ac_ema_swap_out(&t->ema, &t->model);
        st->eval_pending = !at_stop; /* a stop's own evaluation is not owed */
        return TRAINER_EVAL_ABANDONED;
    }
    st->eval_pending = 0;
    p.elapsed_s = t->elapsed_base + (ac_now_s() - s->t0);
    int improved;
    if (t->n_val > 0 && at_stop) {
        /* A run stopped by --max-steps and resumed must keep the model and
         * stop early where the unbroken run does, which has no evaluation
         * at this step: this one is logged, and saves the model only when
         * none is saved yet (so that the stopped session leaves one),
         * without becoming the figure to beat or counting for patience. */
        improved = st->best_step < 0;
    } else if (t->n_val > 0) {
        improved = p.val_accuracy > st->best_metric;
        if (improved) {
            st->best_metric = p.val_accuracy;
            st->best_step = st->step;
            st->bad_evals = 0;
        } else {
            st->bad_evals++;
        }
    } else {
        improved = 1; /* nothing to compare: the latest model is the model */
        st->best_step = st->step;
    }
    if (trainer_push_point(t, &p, err) || trainer_write_metrics_and_curves(t, err))
        return -1;
    if (improved && trainer_save_best(t, err))
        return -1;
    if (improved && t->obj->after_best && t->obj->after_best(t, &p, err))
        return -1;
    if (t->have_ema)
        ac_ema_swap_out(&t->ema, &t->model); /* the checkpoint keeps the trained weights */
    st->train_loss_sum = 0;
    st->train_loss_count = 0;
    if (trainer_save_checkpoint(t, err))
        return -1;
    s->tokens_since_eval = 0;
    s->time_since_eval = 0;
    report_evaluation(t, s, &p, improved, res);
    return 0;
}

/* The average was evaluated into p and reads below the last member's best:
 * every member is evaluated, and if the average is below all of them the
 * best member becomes the model (trainer_pick_model); otherwise the average
 * stays. Either way the model is evaluated last, so the temperature and the
 * reliability bins are its own. 0, TRAINER_EVAL_ABANDONED or -1. */
static int keep_best_member_if_mean_fails(trainer *t, ac_metric_point *p, ac_err *err)
{
    const int members = t->cfg.training.members;
    const size_t bytes = t->model.n_params * sizeof *t->model.params;
    float *mean = malloc(bytes);
    if (!mean)
        return ac_err_set(err, "out of memory for the members' average");
    memcpy(mean, t->model.params, bytes);
    double accuracy[AC_MAX_MEMBERS];
    int rc = 0;
    for (int j = 0; rc == 0 && j < members; j++) {
        ac_metric_point q = unmeasured_point(t);
        rc = trainer_load_member(t, j, err);
        if (rc == 0)
            rc = t->obj->evaluate(t, &q, err);
        accuracy[j] = q.val_accuracy;
    }
    int keep = rc == 0 ? trainer_pick_model(p->val_accuracy, accuracy, members) : -1;
    if (rc == 0 && keep >= 0) {
        const double mean_accuracy = p->val_accuracy;
        double worst = accuracy[0];
        for (int j = 1; j < members; j++)
            worst = accuracy[j] < worst ? accuracy[j] : worst;
        rc = trainer_load_member(t, keep, err);
        if (rc == 0)
            rc = t->obj->evaluate(t, p, err);
        p->kept_member = keep + 1;
        p->mean_val_accuracy = mean_accuracy;
        p->worst_member_accuracy = worst;
    } else if (rc == 0) {
        memcpy(t->model.params, mean, bytes);
        rc = t->obj->evaluate(t, p, err);
    }
    free(mean);
    return rc;
}

int trainer_evaluate_soup(trainer *t, session_stats *s, ac_train_result *res, ac_err *err)
{
    ac_trainer_state *st = &t->state;
    ac_metric_point p = unmeasured_point(t);
    p.soup = 1;
    int rc = t->obj->evaluate(t, &p, err);
    /* Checking the members costs an evaluation each: only when the average
     * reads below the last member, which it must beat or tie to stay. */
    if (rc == 0 && t->n_val > 0 && p.val_accuracy < st->best_metric)
        rc = keep_best_member_if_mean_fails(t, &p, err);
    if (rc != 0) /* an error, or abandoned: a resumed run averages again */
        return rc;
    p.elapsed_s = t->elapsed_base + (ac_now_s() - s->t0);
    /* The run is over; its figures are the average's. */
    st->member = t->cfg.training.members;
    st->best_metric = t->n_val > 0 ? p.val_accuracy : -1.0;
    st->best_step = st->step;
    st->train_loss_sum = 0;
    st->train_loss_count = 0;
    if (trainer_push_point(t, &p, err) || trainer_write_metrics_and_curves(t, err) ||
        trainer_save_best(t, err))
        return -1;
    if (t->n_val > 0 && trainer_write_calibration_svg(t, p.temperature, err))
        return -1;
    if (trainer_save_checkpoint(t, err))
        return -1;
    t->soup_made = 1;
    report_evaluation(t, s, &p, 1, res);
    return 0;
}
