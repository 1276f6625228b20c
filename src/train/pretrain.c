/* The masked-LM objective of the training loop (attnctl pretrain): what a
 * pretraining run checks, how a step masks its batch, what an evaluation
 * measures, and the text files it records for --resume. The loop calls it
 * through trainer_masked_lm, as it calls the classifier. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/rng.h"
#include "trainer_internal.h"

static int pretrain_check_options(const ac_train_options *o, ac_err *err)
{
    if (o->train->n_rows <= 0)
        return ac_err_set(err, "the text has no rows");
    if (o->val)
        return ac_err_set(err, "pretraining holds out a share of its own text "
                               "(training.val_split), not a separate file");
    if (o->resume || !o->config)
        return 0;
    const ac_train_config *tc = &o->config->training;
    if (tc->crop_frac != 0.0 || tc->label_smoothing != 0.0f || tc->token_dropout != 0.0f)
        return ac_err_set(err, "pretraining uses no crops, label smoothing or token dropout "
                               "(training.crop_frac, label_smoothing, token_dropout must be 0)");
    if (!(tc->mask_frac > 0.0 && tc->mask_frac < 1.0))
        return ac_err_set(err, "training.mask_frac must be in (0, 1) (got %g)", tc->mask_frac);
    return 0;
}

static size_t pretrain_memory_bytes(const trainer *t)
{
    return ac_mlm_bytes(&t->cfg.model, t->cfg.training.batch_size, t->cfg.model.max_len,
                        t->cfg.training.mask_frac);
}

static int pretrain_setup(trainer *t, ac_err *err)
{
    if (t->vocab.mask_id < 0)
        return ac_err_set(err, "the vocabulary has no <mask> token: not a pretraining run");
    t->masking = (ac_mlm_masking){
        .mask_frac = t->cfg.training.mask_frac,
        .mask_id = t->vocab.mask_id,
        .first_word_id = ac_vocab_n_specials(&t->vocab),
        .vocab_size = t->vocab.size,
        .skip_first_id = t->vocab.with_cls ? AC_CLS_ID : -1,
    };
    if (ac_mlm_alloc(&t->mlm, &t->cfg.model, t->cfg.training.batch_size, t->cfg.model.max_len,
                     t->cfg.training.mask_frac, err))
        return -1;
    t->have_mlm = 1;
    return 0;
}

static void pretrain_free(trainer *t)
{
    if (t->have_mlm)
        ac_mlm_free(&t->mlm);
    t->have_mlm = 0;
}

/* Masks batch b (rows first_row.. of a batch) with key; the number of
 * masked positions, or -1 (error set). */
static int mask_batch(trainer *t, const ac_batch *b, uint64_t key, int64_t first_row,
                      ac_err *err)
{
    ac_mlm *h = &t->mlm;
    int M = ac_mlm_mask_rows(&t->masking, b->ids, b->lengths, b->B, b->T, key, first_row,
                             h->masked_ids, h->positions, h->targets, h->scratch);
    if (M < 1)
        return ac_err_set(err, "internal error: a batch without a token to mask");
    return M;
}

static uint64_t step_mask_key(const trainer *t)
{
    return ac_rng_key(ac_rng_key(t->cfg.training.seed, STREAM_MASK), (uint64_t)t->state.step);
}

static int pretrain_count_masked(trainer *t, const ac_batch *b, int64_t first_row,
                                 ac_err *err)
{
    int M = ac_mlm_count_masked(&t->masking, b->ids, b->lengths, b->B, b->T, step_mask_key(t),
                                first_row);
    if (M < 1)
        return ac_err_set(err, "internal error: a batch without a token to mask");
    return M;
}

static int pretrain_forward(trainer *t, const ac_batch *b, uint64_t dropout_key,
                            int64_t first_row, float *loss, ac_err *err)
{
    int M = mask_batch(t, b, step_mask_key(t), first_row, err);
    if (M < 0)
        return -1;
    ac_mlm *h = &t->mlm;
    *loss = ac_mlm_forward(&t->model, h, h->masked_ids, b->lengths, b->B, b->T, h->positions,
                           h->targets, M, 1, dropout_key);
    return 0;
}

/* The held-out batches are masked the same way at every evaluation (keys
 * from the seed and the batch index), so the figures of a run compare. */
static int pretrain_evaluate(trainer *t, double *loss, double *accuracy, ac_err *err)
{
    ac_batch *b = &t->batch;
    ac_mlm *h = &t->mlm;
    const uint64_t eval_key = ac_rng_key(t->cfg.training.seed, STREAM_EVAL_MASK);
    const int64_t n_batches = t->val_plan.n_batches;
    double *loss_of = t->eval_slots, *masked_of = loss_of + n_batches,
           *correct_of = masked_of + n_batches;
    memset(t->eval_slots, 0, 3 * (size_t)n_batches * sizeof *t->eval_slots);
    int64_t first, last;
    trainer_rank_share(t, n_batches, &first, &last);
    int abandoned = 0;
    for (int64_t i = first; i < last; i++) {
        if (trainer_stop_requested(t)) { /* see evaluate_plan() in classifier.c */
            abandoned = 1;
            break;
        }
        ac_batch_fill(b, t->val_src, &t->val_plan, i);
        int M = mask_batch(t, b, ac_rng_key(eval_key, (uint64_t)i), 0, err);
        if (M < 0)
            return -1;
        float l = ac_mlm_forward(&t->model, h, h->masked_ids, b->lengths, b->B, b->T,
                                 h->positions, h->targets, M, 0, 0);
        loss_of[i] = l;
        masked_of[i] = M;
        correct_of[i] = h->n_correct;
        if (!isfinite(l) && !t->comm)
            break;
    }
    trainer_agreement agreed;
    if (trainer_agree(t, 0, abandoned, NULL, 0, NULL, &agreed, err))
        return -1;
    if (agreed.stopped)
        return TRAINER_EVAL_ABANDONED;
    if (trainer_share_eval_slots(t, 3 * (size_t)n_batches, err))
        return -1;
    /* In batch order, whichever rank computed a batch. */
    double loss_sum = 0.0;
    int64_t correct = 0, masked = 0;
    for (int64_t i = 0; i < n_batches; i++) {
        if (!isfinite(loss_of[i]))
            return trainer_non_finite_error(t, t->state.step, "the held-out masked-token loss",
                                            loss_of[i], err);
        loss_sum += loss_of[i] * masked_of[i];
        correct += (int64_t)correct_of[i];
        masked += (int64_t)masked_of[i];
    }
    *loss = masked ? loss_sum / (double)masked : NAN;
    *accuracy = masked ? (double)correct / (double)masked : NAN;
    return 0;
}

static int pretrain_provenance(trainer *t, ac_err *err)
{
    const ac_train_options *o = t->opt;
    ac_provenance *pv = &t->cfg.provenance;
    if (!o->text_paths || o->n_text_paths < 1)
        return 0;
    size_t cap = sizeof pv->train_file, used = 0;
    pv->train_file[0] = '\0';
    for (int i = 0; i < o->n_text_paths && used + 1 < cap; i++) {
        int w = snprintf(pv->train_file + used, cap - used, "%s%s", i ? " + " : "",
                         o->text_paths[i]);
        if (w < 0 || (size_t)w >= cap - used) {
            /* too long to record whole: cut, and say so */
            memcpy(pv->train_file + cap - 4, "...", 4);
            break;
        }
        used += (size_t)w;
    }
    /* One SHA-256 names one file; run.json has one for each. */
    if (o->n_text_paths == 1)
        return ac_sha256_file(o->text_paths[0], pv->train_sha256, err);
    pv->train_sha256[0] = '\0';
    return 0;
}

/* ----------------------------------------------------------- run.json */

static int pretrain_sources_to_json(const trainer *t, cJSON *root, ac_err *err)
{
    const ac_train_options *o = t->opt;
    if (!cJSON_AddStringToObject(root, "text_format", ac_text_format_name(o->text_format)))
        return ac_err_set(err, "out of memory");
    cJSON *files = cJSON_AddArrayToObject(root, "text_files");
    if (!files)
        return ac_err_set(err, "out of memory");
    for (int i = 0; o->text_paths && i < o->n_text_paths; i++) {
        char sha[65];
        if (ac_sha256_file(o->text_paths[i], sha, err))
            return -1;
        /* Absolute paths, so `--resume DIR` works from any working directory. */
        char *abs = realpath(o->text_paths[i], NULL);
        cJSON *file = cJSON_CreateObject();
        int ok = file && cJSON_AddStringToObject(file, "path", abs ? abs : o->text_paths[i]) &&
                 cJSON_AddStringToObject(file, "sha256", sha);
        free(abs);
        if (!ok) {
            cJSON_Delete(file);
            return ac_err_set(err, "out of memory");
        }
        cJSON_AddItemToArray(files, file);
    }
    return 0;
}

static int pretrain_check_sources(trainer *t, ac_err *err)
{
    const ac_train_options *o = t->opt;
    if (!o->text_paths)
        return 0; /* the caller did not say where the text came from */
    ac_train_sources run;
    if (ac_train_sources_load(o->out_dir, &run, err))
        return -1;
    int rc = 0;
    if (run.n_text_files != o->n_text_paths)
        rc = ac_err_set(err, "resume: the run was started with %d text file(s), not %d",
                        run.n_text_files, o->n_text_paths);
    for (int i = 0; rc == 0 && i < o->n_text_paths; i++) {
        char sha[65];
        if (!run.text_sha256[i][0])
            continue; /* the run read a pipe: nothing to check against */
        if (ac_sha256_file(o->text_paths[i], sha, err))
            rc = -1;
        else if (!sha[0])
            rc = ac_err_set(err, "resume: %s is not a regular file, so it cannot be checked "
                                 "against the file the run was started with (%s/%s)",
                            o->text_paths[i], t->ckpt_dir, AC_RUN_FILE);
        else if (strcmp(sha, run.text_sha256[i]) != 0)
            rc = ac_err_set(err, "resume: %s is not the file the run was started with "
                                 "(SHA-256 differs from %s/%s)",
                            o->text_paths[i], t->ckpt_dir, AC_RUN_FILE);
    }
    ac_train_sources_free(&run);
    return rc;
}

static int pretrain_prepare_config(trainer *t, ac_err *err)
{
    t->cfg.training.members = 1; /* one encoder: a weight average is a classifier's */
    return 0;
}

/* A micro-batch's share of the step's mean loss: its masked positions. */
static int pretrain_micro_weight(trainer *t, int64_t batch, int first_row, int n_rows,
                                 ac_err *err)
{
    ac_batch_fill_rows(&t->batch, &t->train_corpus, &t->plan, batch, first_row, n_rows);
    return pretrain_count_masked(t, &t->batch, first_row, err);
}

static void pretrain_backward(trainer *t, int mean_rows)
{
    t->mlm.mean_rows = mean_rows;
    ac_mlm_backward(&t->model, &t->mlm);
    t->mlm.mean_rows = 0;
}

static int pretrain_evaluate_point(trainer *t, ac_metric_point *p, ac_err *err)
{
    if (t->n_val == 0)
        return 0;
    return pretrain_evaluate(t, &p->val_loss, &p->val_accuracy, err);
}

static const ac_curves_labels PRETRAINING_CURVES = {
    "Pretraining (masked LM)", "held-out loss", "masked-token accuracy (held out)"};

const trainer_objective trainer_masked_lm = {
    .id = AC_OBJECTIVE_MASKED_LM,
    .run_name = "pretraining",
    .command = "pretrain",
    .labelled = 0,
    .vocab_specials = AC_VOCAB_WITH_MASK,
    .curves = &PRETRAINING_CURVES,
    .check_options = pretrain_check_options,
    .prepare_config = pretrain_prepare_config,
    .provenance = pretrain_provenance,
    .check_resume_data = pretrain_check_sources,
    .sources_to_json = pretrain_sources_to_json,
    .memory_bytes = pretrain_memory_bytes,
    .setup = pretrain_setup,
    .setup_validation = NULL,
    .free = pretrain_free,
    .micro_weight = pretrain_micro_weight,
    .forward = pretrain_forward,
    .backward = pretrain_backward,
    .evaluate = pretrain_evaluate_point,
    .after_best = NULL,
};
