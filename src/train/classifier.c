/* The classifier objective (attnctl train): labelled rows, a step's
 * cross-entropy on the model's logits, and evaluations on the validation
 * rows and their short spans with the temperature fitted on them and its
 * calibration. The loop calls it through trainer_classifier. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/rng.h"
#include "trainer_internal.h"

/* Fewer validation rows than this give no temperature (it stays 1). */
#define MIN_CALIBRATION_ROWS 200
/* Short-span validation: one span of this many tokens per validation row. */
#define SPAN_MIN_TOKENS 5
#define SPAN_MAX_TOKENS 40

/* Replaces cfg->labels by a copy of the data's class names. */
static int set_labels(ac_config *cfg, const ac_rawdata *d, ac_err *err)
{
    char **labels = calloc((size_t)d->n_classes, sizeof *labels);
    if (!labels)
        return ac_err_set(err, "out of memory");
    for (int i = 0; i < d->n_classes; i++) {
        labels[i] = strdup(d->classes[i]);
        if (!labels[i]) {
            for (int j = 0; j < i; j++)
                free(labels[j]);
            free(labels);
            return ac_err_set(err, "out of memory");
        }
    }
    cfg->labels = labels;
    cfg->n_labels = d->n_classes;
    return 0;
}

int trainer_classes_match(const ac_rawdata *d, char *const *labels, int n)
{
    if (d->n_classes != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (strcmp(d->classes[i], labels[i]) != 0)
            return 0;
    return 1;
}

int trainer_check_labelled(const ac_rawdata *d, const char *what, ac_err *err)
{
    if (!d->labels)
        return ac_err_set(err, "%s has no label column", what);
    if (d->n_rows <= 0)
        return ac_err_set(err, "%s has no rows", what);
    if (d->n_classes < 2)
        return ac_err_set(err, "%s has %d class%s; training needs at least 2", what, d->n_classes,
                          d->n_classes == 1 ? "" : "es");
    return 0;
}

/* The classifier's own state (t->objective_state): what its evaluations
 * need, made only with validation rows. */
typedef struct {
    ac_batch_plan span_plan; /* the validation rows cut to short spans */
    int have_span_plan;
    ac_infer infer;          /* the validation batches' forward, as the plan gives them */
    int have_infer;
    float *val_logits;       /* [n_val, C] raw logits of the last validation pass */
    float *span_logits;      /* [n_val, C] logits of the short-span pass */
    int32_t *labels;         /* [n_val] the validation labels in plan order */
    ac_metrics metrics;      /* calibration of the validation rows at the fitted temperature */
    int have_metrics;
    float *probs, *scaled;   /* [C] scratch: probabilities, logits / temperature */
    int64_t *predicted;      /* [C] predictions per class in one evaluation */
} classifier_state;

static classifier_state *state_of(const trainer *t)
{
    return t->objective_state;
}

/* The short spans of the validation rows and the buffers of an
 * evaluation: logits, labels, calibration. */
static int classifier_setup_validation(trainer *t, ac_err *err)
{
    classifier_state *cs = calloc(1, sizeof *cs);
    if (!cs)
        return ac_err_set(err, "out of memory");
    t->objective_state = cs; /* freed by classifier_free, also after a failure below */
    const ac_train_config *tc = &t->cfg.training;
    ac_crop_spec spans = {.frac = 1.0,
                          .min_len = SPAN_MIN_TOKENS,
                          .max_len = SPAN_MAX_TOKENS,
                          .keep_first = t->cfg.model.pooling == AC_POOL_CLS,
                          .key = ac_rng_key(tc->seed, STREAM_SPANS)};
    if (ac_batch_plan_make_cropped(&cs->span_plan, t->val_src, t->val_idx, t->n_val,
                                   tc->batch_size, 0, 0, &spans, err))
        return ac_err_prefix(err, "cutting the validation rows to short spans");
    cs->have_span_plan = 1;
    /* the same rows in batches of the same size: t->eval_slots fits */
    if (cs->span_plan.n_batches > t->val_plan.n_batches)
        return ac_err_set(err, "internal: %lld span batches for %lld validation batches",
                          (long long)cs->span_plan.n_batches, (long long)t->val_plan.n_batches);
    int C = t->cfg.model.n_classes;
    if (ac_infer_init(&cs->infer, tc->batch_size, t->cfg.model.max_len, C, AC_INFER_AS_GIVEN,
                      omp_get_max_threads(), err))
        return -1;
    cs->have_infer = 1;
    cs->val_logits = malloc((size_t)t->n_val * (size_t)C * sizeof *cs->val_logits);
    cs->span_logits = malloc((size_t)t->n_val * (size_t)C * sizeof *cs->span_logits);
    cs->labels = malloc((size_t)t->n_val * sizeof *cs->labels);
    cs->probs = malloc((size_t)C * sizeof *cs->probs);
    cs->scaled = malloc((size_t)C * sizeof *cs->scaled);
    cs->predicted = malloc((size_t)C * sizeof *cs->predicted);
    if (!cs->val_logits || !cs->span_logits || !cs->labels || !cs->probs || !cs->scaled ||
        !cs->predicted)
        return ac_err_set(err, "out of memory for the validation logits");
    if (ac_metrics_init(&cs->metrics, C, t->n_val, err))
        return -1;
    cs->have_metrics = 1;
    return 0;
}
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
 * logits land in logits [rows, C] in plan order (and the labels in the
 * state's labels). Ranks share the batches and then their logits, and every
 * figure is computed from them in plan order, so it is the same bits for
 * any number of ranks. */
static int evaluate_plan(trainer *t, const ac_batch_plan *plan, float *logits, double *val_loss,
                         double *val_accuracy, double *majority_share, ac_err *err)
{
    classifier_state *cs = state_of(t);
    ac_model *m = &t->model;
    ac_batch *b = &t->batch;
    ac_infer *run = &cs->infer;
    int C = t->cfg.model.n_classes;
    double *loss_of = t->eval_slots; /* [n_batches] */
    memset(loss_of, 0, (size_t)plan->n_batches * sizeof *loss_of);
    m->cfg.temperature = 1.0f;
    int64_t first, end;
    trainer_rank_share(t, plan->n_batches, &first, &end);
    int abandoned = 0, failed = 0;
    for (int64_t i = first; i < end; i++) {
        /* A stop must not wait for a whole evaluation (2.4 s on IMDB):
         * mpirun kills one second after passing Ctrl-C on as SIGTERM. */
        if (trainer_stop_requested(t)) {
            abandoned = 1;
            break;
        }
        ac_batch_fill(b, t->val_src, plan, i);
        if (ac_infer_run(run, m, b->ids, b->lengths, b->labels, b->B, b->T, err)) {
            failed = 1; /* the other processes learn it below */
            break;
        }
        memcpy(logits + (size_t)plan->batch_start[i] * (size_t)C, run->logits,
               (size_t)b->B * (size_t)C * sizeof(float));
        loss_of[i] = run->mean_loss;
        if (!isfinite(run->mean_loss) && !t->comm)
            break;
    }
    m->cfg.temperature = t->cfg.model.temperature;
    trainer_agreement agreed;
    if (trainer_agree(t, failed, abandoned, NULL, 0, NULL, &agreed, err))
        return -1;
    if (agreed.stopped)
        return TRAINER_EVAL_ABANDONED;
    if (share_logits(t, plan, logits, err) || trainer_share_eval_slots(t, (size_t)plan->n_batches,
                                                                       err))
        return -1;
    /* The labels in plan order (the same rows for the validation and span plans). */
    for (int64_t i = 0; i < plan->batch_start[plan->n_batches]; i++)
        cs->labels[i] = t->val_src->labels[plan->order[i]];
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    int64_t *predicted = cs->predicted; /* [C] counts */
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
            correct += best == cs->labels[seen];
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
 * reliability bins in the state's metrics. The model and its config take the
 * temperature, so the saves that follow carry it. */
static int calibrate(trainer *t, double *temperature, double *ece, ac_err *err)
{
    classifier_state *cs = state_of(t);
    int C = t->cfg.model.n_classes;
    if (ac_temperature_fit(cs->val_logits, cs->labels, t->n_val, C, temperature, err))
        return ac_err_prefix(err, "fitting the temperature on the validation rows");
    /* Too few rows, or rows the model separates perfectly (the fit then runs
     * to its lower bound and would only sharpen): keep the raw model. */
    if (t->n_val < MIN_CALIBRATION_ROWS || *temperature <= AC_TEMPERATURE_MIN * 1.001)
        *temperature = 1.0;
    float temp = (float)*temperature;
    t->cfg.model.temperature = temp;
    t->model.cfg.temperature = temp;
    ac_metrics_reset(&cs->metrics);
    for (int64_t i = 0; i < t->n_val; i++) {
        const float *z = cs->val_logits + (size_t)i * (size_t)C;
        for (int c = 0; c < C; c++)
            cs->scaled[c] = z[c] / temp;
        softmax_rows(cs->probs, cs->scaled, 1, C);
        int pred = ac_argmax(cs->probs, C);
        if (ac_metrics_add(&cs->metrics, cs->labels[i], pred, cs->probs, 0.0, err))
            return -1;
    }
    *ece = ac_metrics_ece(&cs->metrics);
    return 0;
}

int trainer_write_calibration_svg(const trainer *t, double temperature, ac_err *err)
{
    const classifier_state *cs = state_of(t);
    if (!t->writer)
        return 0;
    if (!cs || !cs->have_metrics)
        return ac_err_set(err, "internal: a reliability diagram without validation rows");
    ac_reliability r;
    if (ac_metrics_reliability(&cs->metrics, &r, err))
        return -1;
    char title[128];
    snprintf(title, sizeof title, "Validation, temperature %.3g", temperature);
    char *svg = ac_calibration_svg(&r, ac_metrics_ece(&cs->metrics), (long)t->n_val, title);
    if (!svg)
        return ac_err_set(err, "out of memory");
    int rc = ac_write_file_atomic(t->calibration_path, svg, strlen(svg), err);
    free(svg);
    return rc;
}

/* The validation rows, their spans and the temperature fitted on them, as
 * p's figures (left NAN without validation rows): 0,
 * TRAINER_EVAL_ABANDONED or -1. */
static int classifier_evaluate(trainer *t, ac_metric_point *p, ac_err *err)
{
    double span_loss, val_majority;
    if (t->n_val == 0)
        return 0;
    classifier_state *cs = state_of(t);
    int rc = evaluate_plan(t, &t->val_plan, cs->val_logits, &p->val_loss, &p->val_accuracy,
                           &val_majority, err);
    if (rc == 0)
        rc = evaluate_plan(t, &cs->span_plan, cs->span_logits, &span_loss, &p->span_accuracy,
                           &p->span_majority, err);
    if (rc == 0 && calibrate(t, &p->temperature, &p->val_ece, err))
        rc = -1;
    return rc;
}

static int classifier_check_options(const ac_train_options *o, ac_err *err)
{
    if (trainer_check_labelled(o->train, "the training data", err))
        return -1;
    /* An id or a text read as the label: nearly every row a class of its own. */
    const ac_rawdata *d = o->train;
    if ((int64_t)d->n_classes * 2 > d->n_rows)
        return ac_err_set(err, "%s: %d different labels in %lld rows; a class needs many rows "
                               "(is the label column the right one?)",
                          o->train_path ? o->train_path : "the training data", d->n_classes,
                          (long long)d->n_rows);
    return 0;
}

static int classifier_prepare_config(trainer *t, ac_err *err)
{
    return set_labels(&t->cfg, t->opt->train, err);
}

static int classifier_provenance(trainer *t, ac_err *err)
{
    const ac_train_options *o = t->opt;
    ac_provenance *pv = &t->cfg.provenance;
    if (!o->train_path)
        return 0;
    if (ac_copy_string(pv->train_file, sizeof pv->train_file, o->train_path,
                       "training file path", err))
        return -1;
    if (o->val_path && (ac_copy_string(pv->val_file, sizeof pv->val_file, o->val_path,
                                       "validation file path", err) ||
                        ac_sha256_file(o->val_path, pv->val_sha256, err)))
        return -1;
    return ac_sha256_file(o->train_path, pv->train_sha256, err);
}

/* Resume: path holds the bytes whose SHA-256 the run recorded (what names
 * the file's role in the messages: "the file", "the validation file"). */
static int check_same_file(const trainer *t, const char *path, const char *recorded,
                           const char *what, ac_err *err)
{
    char sha[65];
    if (ac_sha256_file(path, sha, err))
        return -1;
    if (!sha[0])
        return ac_err_set(err, "resume: %s is not a regular file, so it cannot be checked "
                               "against %s the run was started with (%s/config.json)",
                          path, what, t->ckpt_dir);
    if (strcmp(sha, recorded) != 0)
        return ac_err_set(err, "resume: %s is not %s the run was started with (SHA-256 "
                               "differs from %s/config.json)",
                          path, what, t->ckpt_dir);
    return 0;
}

/* Resume: the training file has the checkpoint's classes and, when their
 * SHA-256 was recorded, the training and validation files are the same
 * (the validation rows choose the kept model). */
static int classifier_check_resume_data(trainer *t, ac_err *err)
{
    const ac_train_options *o = t->opt;
    if (!trainer_classes_match(o->train, t->cfg.labels, t->cfg.n_labels))
        return ac_err_set(err, "resume: the training file's classes differ from the checkpoint's "
                               "(%d in the file, %d in %s/config.json)",
                          o->train->n_classes, t->cfg.n_labels, t->ckpt_dir);
    const ac_provenance *pv = &t->cfg.provenance;
    if (o->train_path && pv->train_sha256[0] &&
        check_same_file(t, o->train_path, pv->train_sha256, "the file", err))
        return -1;
    if (o->val_path && pv->val_sha256[0] &&
        check_same_file(t, o->val_path, pv->val_sha256, "the validation file", err))
        return -1;
    return 0;
}

/* A micro-batch's share of the step's mean loss: its rows. */
static int classifier_micro_weight(trainer *t, int64_t batch, int first_row, int n_rows,
                                   ac_err *err)
{
    return n_rows;
}

static int classifier_forward(trainer *t, const ac_batch *b, uint64_t dropout_key,
                              int64_t first_row, float *loss, ac_err *err)
{
    *loss = ac_model_forward(&t->model, b->ids, b->lengths, b->labels, b->B, b->T, 1,
                             dropout_key);
    return 0;
}

static void classifier_backward(trainer *t, int mean_rows)
{
    t->model.mean_rows = mean_rows;
    ac_model_backward(&t->model);
    t->model.mean_rows = 0;
}

static void classifier_free(trainer *t)
{
    classifier_state *cs = state_of(t);
    if (!cs)
        return;
    if (cs->have_span_plan)
        ac_batch_plan_free(&cs->span_plan);
    if (cs->have_infer)
        ac_infer_free(&cs->infer);
    free(cs->val_logits);
    free(cs->span_logits);
    free(cs->labels);
    free(cs->probs);
    free(cs->scaled);
    free(cs->predicted);
    if (cs->have_metrics)
        ac_metrics_free(&cs->metrics);
    free(cs);
    t->objective_state = NULL;
}

/* The best model was saved: its reliability diagram. With members, the
 * diagram is the average's (trainer_evaluate_soup). */
static int classifier_after_best(trainer *t, const ac_metric_point *p, ac_err *err)
{
    if (t->n_val > 0 && !trainer_has_members(t))
        return trainer_write_calibration_svg(t, p->temperature, err);
    return 0;
}

const trainer_objective trainer_classifier = {
    .id = AC_OBJECTIVE_CLASSIFICATION,
    .run_name = "classifier training",
    .command = "train",
    .labelled = 1,
    .vocab_specials = 0,
    .curves = NULL,
    .check_options = classifier_check_options,
    .prepare_config = classifier_prepare_config,
    .provenance = classifier_provenance,
    .check_resume_data = classifier_check_resume_data,
    .sources_to_json = NULL,
    .memory_bytes = NULL,
    .setup = NULL,
    .setup_validation = classifier_setup_validation,
    .free = classifier_free,
    .micro_weight = classifier_micro_weight,
    .forward = classifier_forward,
    .backward = classifier_backward,
    .evaluate = classifier_evaluate,
    .after_best = classifier_after_best,
};
