/* The training loop: setup, steps and evaluations in turn until the run
 * finishes, stops early or is asked to stop. See include/attnctl/train.h
 * for the files it writes and the guarantees (determinism, exact resume).
 * The parts it calls live in setup.c, step.c, evaluate.c, checkpoint.c,
 * members.c, processes.c and progress.c (docs/architecture.md). */
#include "attnctl/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer_internal.h"

/* Stops at this step: a checkpoint unless the one on disk is of it. */
static int interrupted(trainer *t, ac_train_result *res, ac_err *err)
{
    if (t->ckpt_step != trainer_global_step(t) && trainer_save_checkpoint_as(t, 1, err))
        return -1;
    res->status = AC_TRAIN_INTERRUPTED;
    return 0;
}

/* Where the current member (the run, without members) stands. */
static int member_ended(const ac_train_config *tc, const ac_trainer_state *st)
{
    if (st->epoch >= tc->epochs)
        return AC_TRAIN_FINISHED;
    if (tc->patience > 0 && st->bad_evals >= tc->patience)
        return AC_TRAIN_EARLY_STOPPED;
    return -1;
}

int ac_train_state_ended(const ac_train_config *tc, const ac_trainer_state *st)
{
    if (tc->members > 1)
        return st->member >= tc->members ? AC_TRAIN_FINISHED : -1;
    return member_ended(tc, st);
}

/* The last member ended: the model becomes the members' average, which is
 * evaluated and saved. Every process averages the files the writer saved:
 * the sum below waits until it has, and tells all whether any failed. */
static int average_members(trainer *t, session_stats *s, ac_train_result *res, ac_err *err)
{
    trainer_agreement agreed;
    if (trainer_agree(t, 0, 0, NULL, 0, NULL, &agreed, err))
        return -1;
    int failed = trainer_average_members(t, err) != 0;
    if (trainer_agree(t, failed, 0, NULL, 0,
                      "another process failed to average the members (its message is above)",
                      &agreed, err))
        return -1;
    return trainer_evaluate_soup(t, s, res, err);
}

/* One run, or one member of several, from where it stands: steps and
 * evaluations until it ends (*ended: AC_TRAIN_FINISHED or
 * AC_TRAIN_EARLY_STOPPED) or this session stops (*ended -1, res->status
 * AC_TRAIN_MAX_STEPS or AC_TRAIN_INTERRUPTED). Members are not its concern:
 * the driver (run) starts the next one or averages them. 0, or -1 on an
 * error. */
static int run_single(trainer *t, session_stats *s, ac_train_result *res, int *ended,
                      ac_err *err)
{
    const ac_train_options *o = t->opt;
    const ac_train_config *tc = &t->cfg.training;
    ac_train_progress ev;
    *ended = -1;
    for (;;) {
        *ended = member_ended(tc, &t->state);
        if (*ended >= 0)
            return 0;
        if (o->max_steps > 0 && trainer_global_step(t) >= o->max_steps) {
            res->status = AC_TRAIN_MAX_STEPS;
            return 0;
        }
        /* Ranks stop at the same step: at the one where any of them was asked. */
        if (t->comm ? t->stop_agreed : o->stop && *o->stop)
            return interrupted(t, res, err);
        if (t->plan_epoch != t->state.epoch) {
            ac_batch_plan_free(&t->plan);
            t->plan_epoch = -1;
            if (trainer_make_epoch_plan(t, t->state.epoch, err))
                return ac_err_prefix(err, "batching epoch %d", t->state.epoch + 1);
            if ((long)t->plan.n_batches != t->batches_per_epoch)
                return ac_err_set(err, "internal error: epoch %d has %lld batches, not %ld",
                                  t->state.epoch + 1, (long long)t->plan.n_batches,
                                  t->batches_per_epoch);
        }

        int epoch_before = t->state.epoch;
        res->step = trainer_global_step(t);
        int step_rc = trainer_step(t, s, err);
        if (step_rc < 0)
            return -1;
        if (step_rc == TRAINER_STEP_DROPPED)
            return interrupted(t, res, err);
        res->step = trainer_global_step(t);
        if (o->after_step)
            o->after_step(&t->model, trainer_global_step(t), o->after_step_user);
        trainer_fill_progress(t, s, AC_TRAIN_EVENT_STEP, &ev);
        trainer_report(t, &ev);

        int epoch_ended = t->state.epoch != epoch_before;
        int due = tc->eval_every > 0 ? t->state.step % tc->eval_every == 0 : epoch_ended;
        /* The run's last step is always evaluated, so its model is kept. */
        if (t->state.epoch >= tc->epochs)
            due = 1;
        /* So is the last step of a session that --max-steps ends, but only
         * provisionally (trainer_evaluate_and_save): the run that goes on
         * has no evaluation here. */
        const int at_stop = !due && o->max_steps > 0 && trainer_global_step(t) >= o->max_steps;
        if (due || at_stop) {
            int rc = trainer_evaluate_and_save(t, s, at_stop, res, err);
            if (rc < 0)
                return -1;
            /* Cut short by a stop: before the checks above, which could
             * otherwise end the run as finished without it. */
            if (rc == TRAINER_EVAL_ABANDONED)
                return interrupted(t, res, err);
        }
    }
}

/* The driver: the run, or each member in turn and then their average. */
static int run(trainer *t, ac_train_result *res, ac_err *err)
{
    const ac_train_config *tc = &t->cfg.training;
    session_stats s = {.t0 = ac_now_s(), .last_loss = NAN, .last_lr = NAN};
    ac_train_progress ev;
    trainer_fill_progress(t, &s, AC_TRAIN_EVENT_BEGIN, &ev);
    trainer_report(t, &ev);
    /* A stop cut the evaluation of this step short: it comes first. */
    if (t->state.eval_pending) {
        int rc = trainer_evaluate_and_save(t, &s, 0, res, err);
        if (rc < 0)
            return -1;
        if (rc == TRAINER_EVAL_ABANDONED) /* cut short again */
            return interrupted(t, res, err);
    }

    for (;;) {
        if (trainer_has_members(t) && t->state.member >= tc->members) {
            res->status = AC_TRAIN_FINISHED; /* the average is made */
            return 0;
        }
        int ended;
        if (run_single(t, &s, res, &ended, err))
            return -1;
        if (ended < 0) /* this session stops here */
            return 0;
        if (!trainer_has_members(t)) {
            res->status = (ac_train_status)ended;
            return 0;
        }
        if (t->state.member + 1 < tc->members) {
            if (trainer_next_member(t, err))
                return -1;
            continue;
        }
        int rc = average_members(t, &s, res, err);
        if (rc < 0)
            return -1;
        if (rc == TRAINER_EVAL_ABANDONED)
            return interrupted(t, res, err);
        res->status = AC_TRAIN_FINISHED;
        return 0;
    }
}

int ac_train(const ac_train_options *opt, ac_train_result *result, ac_err *err)
{
    ac_train_result local;
    ac_train_result *res = result ? result : &local;
    memset(res, 0, sizeof *res);
    res->best_val_accuracy = -1.0;
    res->best_step = -1;
    res->last_val_loss = res->last_val_accuracy = NAN;

    trainer t;
    memset(&t, 0, sizeof t);
    t.opt = opt;
    t.plan_epoch = -1;
    t.ckpt_step = -1;
    t.comm = opt->comm && opt->comm->size > 1 ? opt->comm : NULL;
    t.writer = !opt->comm || opt->comm->rank == 0;
    int rc = opt->resume && opt->out_dir ? trainer_recover_checkpoint(&t, err) : 0;
    if (rc == 0)
        rc = trainer_setup(&t, err);
    /* Whether every rank's setup worked (a missing file or too little
     * memory may hit one machine only). */
    trainer_agreement agreed;
    if (trainer_agree(&t, rc != 0, 0, NULL, 0,
                      "another process failed to start training (its message is above)",
                      &agreed, err))
        rc = -1;
    if (rc == 0) {
        long start_step = res->step = trainer_global_step(&t);
        rc = run(&t, res, err);
        if (rc == 0 && opt->drop_finished_state &&
            (trainer_global_step(&t) > start_step || t.soup_made) &&
            (res->status == AC_TRAIN_FINISHED || res->status == AC_TRAIN_EARLY_STOPPED))
            trainer_drop_finished_state(&t);
    }
    res->step = trainer_global_step(&t);
    res->total_steps = t.run_steps;
    res->members = t.cfg.training.members > 1 ? t.cfg.training.members : 1;
    res->epoch = t.state.epoch;
    long best_step = t.state.best_step >= 0 ? t.state.steps_before + t.state.best_step : -1;
    if (t.n_val > 0 && t.state.best_step >= 0) {
        res->best_val_accuracy = t.state.best_metric;
        res->best_step = best_step;
    } else if (t.n_val == 0) {
        res->best_step = best_step;
    }
    res->model_saved = t.model_saved;
    res->peer_failed = t.peer_failed;
    res->failure_shared = t.failure_shared;
    trainer_free(&t);
    return rc;
}
