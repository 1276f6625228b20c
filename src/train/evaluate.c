/* Evaluations during training: the validation rows and their short spans
 * (loss, accuracy), the temperature fitted on them and its calibration,
 * then everything written after an evaluation, in the order a crash
 * needs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pick_model.h"
#include "trainer_internal.h"

/* Fewer validation rows than this give no temperature (it stays 1). */
#define MIN_CALIBRATION_ROWS 200

/* Every rank gets the logits [rows, C] of every rank's share of the plan's
 * batches (rank r computed batches trainer_rank_share gave it). */
static int share_logits(trainer *t, const ac_batch_plan *plan, float *logits, ac_err *err)
{
    if (!t->comm)
        return 0;
    const size_t row_bytes = (size_t)t->cfg.model.n_classes * sizeof *logits;
    const int ranks = t->comm->size;
    for (int r = 0; r <= ranks; r++) {
        int64_t batch = plan->n_batches * r / ranks;
        t->gather_offsets[r] = (size_t)plan->batch_start[batch] * row_bytes;
    }
    return t->comm->gather_bytes(t->comm, logits, t->gather_offsets, err);
}

/* Loss and accuracy over a plan of validation rows, no dropout, at
 * temperature 1 (the raw model; the temperature is fitted afterwards). The
 * logits land in logits [rows, C] in plan order (and the labels in
 * val_labels). Ranks share the batches and then their logits, and every
 * figure is computed from them in plan order, so it is the same bits for
 * any number of ranks. */
static int evaluate(trainer *t, const ac_batch_plan *plan, float *logits, double *val_loss,
                    double *val_accuracy, double *majority_share, ac_err *err)
{
    ac_model *m = &t->model;
    ac_batch *b = &t->batch;
    int C = t->cfg.model.n_classes;
    double *loss_of = t->eval_slots; /* [n_batches] */
    memset(loss_of, 0, (size_t)plan->n_batches * sizeof *loss_of);
    m->cfg.temperature = 1.0f;
    int64_t first, end;
    trainer_rank_share(t, plan->n_batches, &first, &end);
    int abandoned = 0;
    for (int64_t i = first; i < end; i++) {
        /* A stop must not wait for a whole evaluation (2.4 s on IMDB):
         * mpirun kills one second after passing Ctrl-C on as SIGTERM. */
        if (trainer_stop_requested(t)) {
            abandoned = 1;
            break;
        }
        ac_batch_fill(b, t->val_src, plan, i);
        float loss = ac_model_forward(m, b->ids, b->lengths, b->labels, b->B, b->T, 0, 0);
        memcpy(logits + (size_t)plan->batch_start[i] * (size_t)C, m->act.logits,
               (size_t)b->B * (size_t)C * sizeof(float));
        loss_of[i] = loss;
        if (!isfinite(loss) && !t->comm)
            break;
    }
    m->cfg.temperature = t->cfg.model.temperature;
    trainer_agreement agreed;
    if (trainer_agree(t, 0, abandoned, NULL, 0, NULL, &agreed, err))
        return -1;
    if (agreed.stopped)
        return TRAINER_EVAL_ABANDONED;
    if (share_logits(t, plan, logits, err) || trainer_share_eval_slots(t, (size_t)plan->n_batches,
                                                                       err))
        return -1;
    /* The labels in plan order (the same rows for the validation and span plans). */
    for (int64_t i = 0; i < plan->batch_start[plan->n_batches]; i++)
        t->val_labels[i] = t->val_src->labels[plan->order[i]];
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    int64_t *predicted = t->val_predicted; /* [C] counts */
    memset(predicted, 0, (size_t)C * sizeof *predicted);
    for (int64_t i = 0; i < plan->n_batches; i++) {
        if (!isfinite(loss_of[i]))
            return trainer_non_finite_error(t, trainer_global_step(t), "the validation loss", loss_of[i],
                                            err);
        int B = ac_batch_plan_rows(plan, i);
        loss_sum += loss_of[i] * B;
        for (int r = 0; r < B; r++, seen++) {
            const float *z = logits + (size_t)seen * (size_t)C;
            int best = 0;
            for (int c = 1; c < C; c++)
                if (z[c] > z[best])
                    best = c;
            correct += best == t->val_labels[seen];
            predicted[best]++;
        }
    }
    *val_loss = seen ? loss_sum / (double)seen : NAN;
    *val_accuracy = seen ? (double)correct / (double)seen : NAN;
    int64_t most = 0;
    for (int c = 0; c < C; c++)
        most = predicted[c] > most ? predicted[c] : most;
    *majority_share = seen ? (double)most / (double)seen : NAN;
    return 0;
}

/* Temperature scaling (one scalar, fitted on the validation logits just
 * computed) and the calibration it gives on those rows: ECE and the
 * reliability bins in t->val_metrics. The model and its config take the
 * temperature, so the saves that follow carry it. */
static int calibrate(trainer *t, double *temperature, double *ece, ac_err *err)
{
    int C = t->cfg.model.n_classes;
    if (ac_temperature_fit(t->val_logits, t->val_labels, t->n_val, C, temperature, err))
        return ac_err_prefix(err, "fitting the temperature on the validation rows");
    /* Too few rows, or rows the model separates perfectly (the fit then runs
     * to its lower bound and would only sharpen): keep the raw model. */
    if (t->n_val < MIN_CALIBRATION_ROWS || *temperature <= AC_TEMPERATURE_MIN * 1.001)
        *temperature = 1.0;
    float temp = (float)*temperature;
    t->cfg.model.temperature = temp;
    t->model.cfg.temperature = temp;
    ac_metrics_reset(&t->val_metrics);
    for (int64_t i = 0; i < t->n_val; i++) {
        const float *z = t->val_logits + (size_t)i * (size_t)C;
        for (int c = 0; c < C; c++)
            t->val_scaled[c] = z[c] / temp;
        softmax_rows(t->val_probs, t->val_scaled, 1, C);
        int pred = ac_argmax(t->val_probs, C);
        if (ac_metrics_add(&t->val_metrics, t->val_labels[i], pred, t->val_probs, 0.0, err))
            return -1;
    }
    *ece = ac_metrics_ece(&t->val_metrics);
    return 0;
}

static int write_calibration_svg(const trainer *t, double temperature, ac_err *err)
{
    if (!t->writer)
        return 0;
    ac_reliability r;
    if (ac_metrics_reliability(&t->val_metrics, &r, err))
        return -1;
    char title[128];
    snprintf(title, sizeof title, "Validation, temperature %.3g", temperature);
    char *svg = ac_calibration_svg(&r, ac_metrics_ece(&t->val_metrics), (long)t->n_val, title);
    if (!svg)
        return ac_err_set(err, "out of memory");
    int rc = ac_write_file_atomic(t->calibration_path, svg, strlen(svg), err);
    free(svg);
    return rc;
}

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

/* The validation rows, their spans and the temperature fitted on them, as
 * p's figures (left NAN without validation rows): 0,
 * TRAINER_EVAL_ABANDONED or -1. */
static int evaluate_classifier(trainer *t, ac_metric_point *p, ac_err *err)
{
    double span_loss, val_majority;
    if (t->n_val == 0)
        return 0;
    int rc = evaluate(t, &t->val_plan, t->val_logits, &p->val_loss, &p->val_accuracy,
                      &val_majority, err);
    if (rc == 0)
        rc = evaluate(t, &t->span_plan, t->span_logits, &span_loss, &p->span_accuracy,
                      &p->span_majority, err);
    if (rc == 0 && calibrate(t, &p->temperature, &p->val_ece, err))
        rc = -1;
    return rc;
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
int trainer_evaluate_and_save(trainer *t, session_stats *s, ac_train_result *res, ac_err *err)
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
    const int masked_lm = t->cfg.model.objective == AC_OBJECTIVE_MASKED_LM;
    int rc = 0;
    if (t->n_val > 0 && masked_lm)
        rc = pretrain_evaluate(t, &p.val_loss, &p.val_accuracy, err);
    else if (!masked_lm)
        rc = evaluate_classifier(t, &p, err);
    if (rc < 0)
        return -1;
    if (rc == TRAINER_EVAL_ABANDONED) {
        /* Asked to stop: the checkpoint the run loop saves next says that this
         * step's evaluation is still to do, and a resumed run does it first,
         * on the same weights, so it goes on as if never stopped. */
        if (t->have_ema)
            ac_ema_swap_out(&t->ema, &t->model);
        st->eval_pending = 1;
        return 0;
    }
    st->eval_pending = 0;
    p.elapsed_s = t->elapsed_base + (ac_now_s() - s->t0);
    int improved;
    if (t->n_val > 0) {
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
    /* With members, the reliability diagram is the average's (trainer_evaluate_soup). */
    if (improved && t->n_val > 0 && !masked_lm && !trainer_has_members(t) &&
        write_calibration_svg(t, p.temperature, err))
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
            rc = evaluate_classifier(t, &q, err);
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
            rc = evaluate_classifier(t, p, err);
        p->kept_member = keep + 1;
        p->mean_val_accuracy = mean_accuracy;
        p->worst_member_accuracy = worst;
    } else if (rc == 0) {
        memcpy(t->model.params, mean, bytes);
        rc = evaluate_classifier(t, p, err);
    }
    free(mean);
    return rc;
}

int trainer_evaluate_soup(trainer *t, session_stats *s, ac_train_result *res, ac_err *err)
{
    ac_trainer_state *st = &t->state;
    ac_metric_point p = unmeasured_point(t);
    p.soup = 1;
    int rc = evaluate_classifier(t, &p, err);
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
    if (t->n_val > 0 && write_calibration_svg(t, p.temperature, err))
        return -1;
    if (trainer_save_checkpoint(t, err))
        return -1;
    t->soup_made = 1;
    report_evaluation(t, s, &p, 1, res);
    return 0;
}
