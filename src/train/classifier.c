/* The classifier objective (attnctl train): labelled rows, a step's
 * cross-entropy on the model's logits, and evaluations on the validation
 * rows and their short spans with the temperature fitted on them and its
 * calibration. The loop calls it through trainer_classifier. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/nn.h"
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
    /* training.nbsvm > 0 or "auto": its fit on the training rows, added to
     * every evaluation's logits and to the saved model (classifier_save_model) */
    ac_nbsvm nbsvm;
    int have_nbsvm;
    int32_t *text_buckets;   /* [max_len * wide_order] one text's wide buckets */
    double *class_sums;      /* [C] scratch of ac_nbsvm_add_scores */
    float *val_nbsvm, *span_nbsvm; /* [n_val, C] NBSVM's scores of the last evaluation's rows */
    /* The network's own temperature, which NBSVM's weight is relative to
     * (training.nbsvm_temperature): fitted at each evaluation, the last
     * one's used by the save that follows it. */
    double net_temperature;
    /* The scores' weight: training.nbsvm, or with "auto" the one of
     * NBSVM_WEIGHTS the last evaluation chose (choose_weight). */
    double weight;
    int choose_weight;
    float *mixed;            /* [n_val, C] scratch: the logits at one weight */
    float *kept_wide;        /* [nbsvm rows, C] the model's own values under NBSVM's rows */
    float *kept_bias;        /* [C] the head's own bias */
} classifier_state;

static classifier_state *state_of(const trainer *t)
{
    return t->objective_state;
}

/* The state, and NBSVM fitted on the training rows when training.nbsvm
 * asks for it: a pure function of the rows and the seed, so a resumed run
 * fits the same one. */
static int classifier_setup(trainer *t, ac_err *err)
{
    classifier_state *cs = calloc(1, sizeof *cs);
    if (!cs)
        return ac_err_set(err, "out of memory");
    t->objective_state = cs; /* freed by classifier_free, also after a failure below */
    const ac_model_config *mc = &t->cfg.model;
    /* "auto" is left by ac_train_adapt only where validation rows choose
     * the weight; a run resumed from before the setting has no such rows
     * to spare, and no NBSVM. */
    const int choose = t->cfg.training.nbsvm == AC_AUTO;
    if (choose && t->n_val == 0)
        return 0;
    if (!choose && !(t->cfg.training.nbsvm > 0.0f))
        return 0;
    if (!t->model.p.wide_w || !t->model.p.head_b)
        return 0;
    const ac_corpus *c = &t->train_corpus;
    const ac_nbsvm_data d = {.ids = c->ids,
                             .off = c->off,
                             .labels = c->labels,
                             .rows = t->train_idx,
                             .n_rows = t->n_train,
                             .order = mc->wide_order,
                             .n_buckets = mc->wide_buckets,
                             .n_classes = mc->n_classes,
                             .norm = mc->wide_norm};
    if (ac_nbsvm_fit(&cs->nbsvm, &d, ac_rng_key(t->cfg.training.seed, STREAM_NBSVM), err))
        return ac_err_prefix(err, "fitting NBSVM on the training rows");
    cs->have_nbsvm = 1;
    cs->choose_weight = choose;
    cs->weight = choose ? 0.0 : (double)t->cfg.training.nbsvm;
    const size_t rows = (size_t)(cs->nbsvm.n_rows > 0 ? cs->nbsvm.n_rows : 1);
    cs->text_buckets = malloc((size_t)mc->max_len * (size_t)mc->wide_order *
                              sizeof *cs->text_buckets);
    cs->kept_wide = malloc(rows * (size_t)mc->n_classes * sizeof *cs->kept_wide);
    cs->kept_bias = malloc((size_t)mc->n_classes * sizeof *cs->kept_bias);
    cs->class_sums = malloc((size_t)mc->n_classes * sizeof *cs->class_sums);
    if (!cs->text_buckets || !cs->kept_wide || !cs->kept_bias || !cs->class_sums)
        return ac_err_set(err, "out of memory for NBSVM's scores");
    return 0;
}

/* NBSVM's scores of batch b's rows into scores [B, C]. */
static void nbsvm_scores_of(const trainer *t, const ac_batch *b, float *scores)
{
    const classifier_state *cs = state_of(t);
    const ac_model_config *mc = &t->cfg.model;
    const int C = mc->n_classes;
    memset(scores, 0, (size_t)b->B * (size_t)C * sizeof *scores);
    for (int r = 0; r < b->B; r++) {
        const int count = wide_buckets_of_text(cs->text_buckets, b->ids + (size_t)r * (size_t)b->T,
                                               b->lengths[r], mc->wide_order, mc->wide_buckets);
        ac_nbsvm_add_scores(&cs->nbsvm, scores + (size_t)r * (size_t)C, cs->text_buckets, count,
                            mc->wide_norm, cs->class_sums);
    }
}

/* The short spans of the validation rows and the buffers of an
 * evaluation: logits, labels, calibration. */
static int classifier_setup_validation(trainer *t, ac_err *err)
{
    classifier_state *cs = state_of(t);
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
    if (cs->have_nbsvm) {
        cs->val_nbsvm = malloc((size_t)t->n_val * (size_t)C * sizeof *cs->val_nbsvm);
        cs->span_nbsvm = malloc((size_t)t->n_val * (size_t)C * sizeof *cs->span_nbsvm);
        cs->mixed = malloc((size_t)t->n_val * (size_t)C * sizeof *cs->mixed);
        if (!cs->val_nbsvm || !cs->span_nbsvm || !cs->mixed)
            return ac_err_set(err, "out of memory for NBSVM's validation scores");
    }
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
static int evaluate_plan(trainer *t, const ac_batch_plan *plan, float *logits, float *nbsvm,
                         double *val_loss, double *val_accuracy, double *majority_share,
                         ac_err *err)
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
        if (nbsvm)
            nbsvm_scores_of(t, b, nbsvm + (size_t)plan->batch_start[i] * (size_t)C);
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
    if (share_logits(t, plan, logits, err) || (nbsvm && share_logits(t, plan, nbsvm, err)) ||
        trainer_share_eval_slots(t, (size_t)plan->n_batches, err))
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

/* The temperature of logits [n_val, C] on the validation rows: 1 with too
 * few rows, or rows the model separates perfectly (the fit then runs to its
 * lower bound and would only sharpen). */
static int fit_temperature(const trainer *t, const float *logits, double *temperature,
                           ac_err *err)
{
    const classifier_state *cs = state_of(t);
    if (ac_temperature_fit(logits, cs->labels, t->n_val, t->cfg.model.n_classes, temperature, err))
        return ac_err_prefix(err, "fitting the temperature on the validation rows");
    if (t->n_val < MIN_CALIBRATION_ROWS || *temperature <= AC_TEMPERATURE_MIN * 1.001)
        *temperature = 1.0;
    return 0;
}

/* logits [n, C] += scale * nbsvm, then the rows' mean cross-entropy,
 * accuracy and largest share of one predicted class. */
static void add_and_measure(const trainer *t, float *logits, const float *nbsvm, double scale,
                            double *loss, double *accuracy, double *majority_share)
{
    const classifier_state *cs = state_of(t);
    const int C = t->cfg.model.n_classes;
    const int64_t n = t->n_val;
    double loss_sum = 0.0;
    int64_t correct = 0, most = 0;
    int64_t *predicted = cs->predicted;
    memset(predicted, 0, (size_t)C * sizeof *predicted);
    for (int64_t i = 0; i < n; i++) {
        float *z = logits + (size_t)i * (size_t)C;
        const float *add = nbsvm + (size_t)i * (size_t)C;
        int best = 0;
        for (int c = 0; c < C; c++) {
            z[c] += (float)(scale * add[c]);
            best = z[c] > z[best] ? c : best;
        }
        double sum = 0.0;
        for (int c = 0; c < C; c++)
            sum += exp((double)z[c] - (double)z[best]);
        loss_sum += (double)z[best] + log(sum) - (double)z[cs->labels[i]];
        correct += best == cs->labels[i];
        predicted[best]++;
    }
    for (int c = 0; c < C; c++)
        most = predicted[c] > most ? predicted[c] : most;
    *loss = n ? loss_sum / (double)n : NAN;
    *accuracy = n ? (double)correct / (double)n : NAN;
    *majority_share = n ? (double)most / (double)n : NAN;
}

/* The weights "auto" chooses from: none, up to NBSVM's scores outweighing
 * the network's log-probabilities several times over. */
static const double NBSVM_WEIGHTS[] = {0, 1, 2, 4, 8};

/* "auto": the weight whose sum has the lowest validation log-loss, each at
 * its own fitted temperature (a proper score, where accuracy on a few
 * hundred rows ties often); ties keep the smaller weight. */
static int choose_nbsvm_weight(trainer *t, ac_err *err)
{
    classifier_state *cs = state_of(t);
    const int C = t->cfg.model.n_classes;
    const size_t n = (size_t)t->n_val * (size_t)C;
    double best_loss = INFINITY;
    for (size_t k = 0; k < sizeof NBSVM_WEIGHTS / sizeof NBSVM_WEIGHTS[0]; k++) {
        const double scale = cs->net_temperature * NBSVM_WEIGHTS[k];
        for (size_t i = 0; i < n; i++)
            cs->mixed[i] = cs->val_logits[i] + (float)(scale * cs->val_nbsvm[i]);
        double temperature;
        if (ac_temperature_fit(cs->mixed, cs->labels, t->n_val, C, &temperature, err))
            return ac_err_prefix(err, "weighing NBSVM's scores on the validation rows");
        const double loss = ac_temperature_nll(cs->mixed, cs->labels, t->n_val, C, temperature);
        if (loss < best_loss) {
            best_loss = loss;
            cs->weight = NBSVM_WEIGHTS[k];
        }
    }
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
    if (fit_temperature(t, cs->val_logits, temperature, err))
        return -1;
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
    int rc = evaluate_plan(t, &t->val_plan, cs->val_logits, cs->val_nbsvm, &p->val_loss,
                           &p->val_accuracy, &val_majority, err);
    if (rc == 0)
        rc = evaluate_plan(t, &cs->span_plan, cs->span_logits, cs->span_nbsvm, &span_loss,
                           &p->span_accuracy, &p->span_majority, err);
    /* NBSVM's scores join the network's log-probabilities at its own
     * temperature: the weight means the same whatever scale the network's
     * logits have (4.4 on one short set, 1.5 on another). */
    if (rc == 0 && cs->have_nbsvm) {
        rc = fit_temperature(t, cs->val_logits, &cs->net_temperature, err);
        if (rc == 0 && cs->choose_weight)
            rc = choose_nbsvm_weight(t, err);
        if (rc == 0) {
            const double scale = cs->net_temperature * cs->weight;
            add_and_measure(t, cs->val_logits, cs->val_nbsvm, scale, &p->val_loss,
                            &p->val_accuracy, &val_majority);
            add_and_measure(t, cs->span_logits, cs->span_nbsvm, scale, &span_loss,
                            &p->span_accuracy, &p->span_majority);
        }
    }
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
    if (cs->have_nbsvm)
        ac_nbsvm_free(&cs->nbsvm);
    free(cs->text_buckets);
    free(cs->class_sums);
    free(cs->val_nbsvm);
    free(cs->span_nbsvm);
    free(cs->mixed);
    free(cs->kept_wide);
    free(cs->kept_bias);
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

/* The model written with NBSVM's scores folded into its wide table and
 * head bias (ac_nbsvm_fold), so that predict, quantize and inspect see the
 * sum the evaluations measured; the values under NBSVM's rows are put back
 * afterwards, bit for bit, for the training that goes on. */
static int classifier_save_model(trainer *t, ac_err *err)
{
    classifier_state *cs = state_of(t);
    if (!cs || !cs->have_nbsvm)
        return trainer_write_model(t, err);
    const ac_nbsvm *s = &cs->nbsvm;
    const size_t C = (size_t)t->cfg.model.n_classes;
    float *wide = t->model.p.wide_w, *bias = t->model.p.head_b;
    for (int64_t k = 0; k < s->n_rows; k++)
        memcpy(cs->kept_wide + (size_t)k * C, wide + (size_t)s->bucket[k] * C, C * sizeof *wide);
    memcpy(cs->kept_bias, bias, C * sizeof *bias);
    /* With validation rows, the temperature of the evaluation that chose
     * this model, recorded for a run on the same rows without them (the
     * refit); without, the recorded one. */
    if (t->n_val > 0)
        t->cfg.training.nbsvm_temperature = (float)cs->net_temperature;
    const float temperature = t->cfg.training.nbsvm_temperature > 0.0f
                                  ? t->cfg.training.nbsvm_temperature
                                  : 1.0f;
    ac_nbsvm_fold(s, temperature * (float)cs->weight, wide, bias);
    /* The model's config.json records the weight chosen; the run's own
     * (its checkpoint's) keeps choosing. */
    const float setting = t->cfg.training.nbsvm;
    t->cfg.training.nbsvm = (float)cs->weight;
    int rc = trainer_write_model(t, err);
    t->cfg.training.nbsvm = setting;
    for (int64_t k = 0; k < s->n_rows; k++)
        memcpy(wide + (size_t)s->bucket[k] * C, cs->kept_wide + (size_t)k * C, C * sizeof *wide);
    memcpy(bias, cs->kept_bias, C * sizeof *bias);
    return rc;
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
    .setup = classifier_setup,
    .setup_validation = classifier_setup_validation,
    .free = classifier_free,
    .micro_weight = classifier_micro_weight,
    .forward = classifier_forward,
    .backward = classifier_backward,
    .evaluate = classifier_evaluate,
    .after_best = classifier_after_best,
    .save_model = classifier_save_model,
};
