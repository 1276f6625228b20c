/* The start of a run, fresh or resumed: the options checked, the rows
 * split and encoded, the model made or loaded, the memory of a step
 * allocated once (a step allocates nothing), the batch plans and the
 * files a fresh run starts; and all of it freed at the end. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnctl/rng.h"
#include "trainer_internal.h"

const trainer_objective *trainer_objective_of(ac_objective id)
{
    return id == AC_OBJECTIVE_MASKED_LM ? &trainer_masked_lm : &trainer_classifier;
}

static int64_t *identity_index(int64_t n)
{
    int64_t *idx = malloc((size_t)(n > 0 ? n : 1) * sizeof *idx);
    if (idx)
        for (int64_t i = 0; i < n; i++)
            idx[i] = i;
    return idx;
}

static int split_rows(trainer *t, ac_err *err)
{
    const ac_train_options *o = t->opt;
    const ac_train_config *tc = &t->cfg.training;
    if (o->n_pseudo < 0 || o->n_pseudo >= o->train->n_rows)
        return ac_err_set(err, "%lld of the %lld training rows are teacher-labelled: at least one "
                               "must be labelled",
                          (long long)o->n_pseudo, (long long)o->train->n_rows);
    if (o->val) {
        /* config.json then says that no training row was held out. */
        t->cfg.training.val_split = 0.0;
        t->n_train = o->train->n_rows;
        t->n_val = o->val->n_rows;
        t->train_idx = identity_index(t->n_train);
        t->val_idx = identity_index(t->n_val);
        if (!t->train_idx || !t->val_idx)
            return ac_err_set(err, "out of memory");
        return 0;
    }
    if (tc->val_split > 0) {
        /* Unlabelled texts: a random split (one class, all zeros). */
        int32_t *one_class = NULL;
        const int32_t *labels = o->train->labels;
        if (!t->obj->labelled) {
            one_class = calloc((size_t)(o->train->n_rows > 0 ? o->train->n_rows : 1),
                               sizeof *one_class);
            if (!one_class)
                return ac_err_set(err, "out of memory");
            labels = one_class;
        }
        /* Teacher-labelled rows (at the end) are never held out. */
        int64_t n_labelled = o->train->n_rows - o->n_pseudo;
        int rc = ac_split_stratified(labels, n_labelled, tc->val_split,
                                     ac_rng_key(tc->seed, STREAM_SPLIT), &t->train_idx,
                                     &t->n_train, &t->val_idx, &t->n_val, err);
        free(one_class);
        if (rc)
            return o->train_path ? ac_err_prefix(err, "%s: validation split", o->train_path)
                                 : ac_err_prefix(err, "validation split");
        if (o->n_pseudo > 0) {
            int64_t *idx = realloc(t->train_idx, (size_t)(t->n_train + o->n_pseudo) * sizeof *idx);
            if (!idx)
                return ac_err_set(err, "out of memory");
            t->train_idx = idx;
            for (int64_t i = 0; i < o->n_pseudo; i++)
                idx[t->n_train++] = n_labelled + i;
        }
    } else {
        t->n_train = o->train->n_rows;
        t->n_val = 0;
        t->train_idx = identity_index(t->n_train);
        if (!t->train_idx)
            return ac_err_set(err, "out of memory");
    }
    if (t->n_train <= 0)
        return ac_err_set(err,
                          "no training rows left after the validation split (%.3g of %lld rows)",
                          tc->val_split, (long long)o->train->n_rows);
    return 0;
}

static int encode_corpora(trainer *t, ac_err *err)
{
    const ac_train_options *o = t->opt;
    int max_len = t->cfg.model.max_len;
    if (ac_corpus_encode(&t->train_corpus, o->train, &t->cfg.tokenizer, &t->vocab, max_len, err))
        return ac_err_prefix(err, "encoding the training data");
    t->have_train_corpus = 1;
    t->val_src = &t->train_corpus;
    if (o->val) {
        if (ac_corpus_encode(&t->val_corpus, o->val, &t->cfg.tokenizer, &t->vocab, max_len, err))
            return ac_err_prefix(err, "encoding the validation data");
        t->have_val_corpus = 1;
        t->val_src = &t->val_corpus;
    }
    return 0;
}

/* Checks the memory need against the machine before allocating: with
 * overcommit, malloc would succeed and the process be killed later. */
static int allocate_training_memory(trainer *t, ac_err *err)
{
    const ac_model_config *mc = &t->cfg.model;
    int B = t->cfg.training.batch_size, T = mc->max_len;
    size_t act = ac_model_activation_bytes(mc, B, T);
    size_t params = t->model.n_params * sizeof(float) * 4; /* weights, grads, 2 moments */
    size_t batch = (size_t)B * (size_t)T * sizeof(int32_t) + (size_t)B * 16;
    size_t head = t->obj->memory_bytes ? t->obj->memory_bytes(t) : 0;
    t->memory_bytes = act + params + batch + head;
    const double mib = 1024.0 * 1024.0;
    long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page_size > 0 &&
        (double)t->memory_bytes > (double)pages * (double)page_size)
        return ac_err_set(err,
                          "training needs about %.0f MiB (activations for batch %d x %d tokens: "
                          "%.0f MiB; weights, gradients and AdamW moments: %.0f MiB; masked-LM "
                          "output layer: %.0f MiB) but the machine has %.0f MiB; lower "
                          "--batch-size or --max-len",
                          (double)t->memory_bytes / mib, B, T, (double)act / mib,
                          (double)params / mib, (double)head / mib,
                          (double)pages * (double)page_size / mib);
    if (ac_model_alloc_activations(&t->model, B, T, err))
        return ac_err_prefix(err,
                             "allocating %.0f MiB of activations for batch %d x %d tokens "
                             "(lower --batch-size or --max-len)",
                             (double)act / mib, B, T);
    t->m1 = calloc(t->model.n_params, sizeof(float));
    t->m2 = calloc(t->model.n_params, sizeof(float));
    t->batch.ids = malloc((size_t)B * (size_t)T * sizeof(int32_t));
    t->batch.lengths = malloc((size_t)B * sizeof(int32_t));
    t->batch.labels = malloc((size_t)B * sizeof(int32_t));
    t->batch.rows = malloc((size_t)B * sizeof(int64_t));
    if (!t->m1 || !t->m2 || !t->batch.ids || !t->batch.lengths || !t->batch.labels ||
        !t->batch.rows)
        return ac_err_set(err, "out of memory allocating %.0f MiB for the optimizer state",
                          (double)params / mib / 2);
    return t->obj->setup ? t->obj->setup(t, err) : 0;
}

/* The configuration must survive its own file format, or the checkpoint
 * could not be resumed: write it as config.json text and read it back. */
static int check_config_roundtrip(const ac_config *cfg, ac_err *err)
{
    char *json = ac_config_to_json(cfg);
    if (!json)
        return ac_err_set(err, "out of memory");
    ac_config back;
    ac_config_defaults(&back);
    int rc = ac_config_parse(&back, json, strlen(json), "configuration", 1, err);
    ac_config_free(&back);
    free(json);
    return rc;
}

/* training.wide_nb: the wide table from the training rows' naive Bayes
 * log-count ratios (wide_nb_init); part of the initial weights, so every
 * member starts from it and a resumed run finds it in the checkpoint. */
static int wide_start_from_nb(trainer *t, ac_err *err)
{
    const ac_model_config *mc = &t->cfg.model;
    if (!t->model.p.wide_w || mc->objective == AC_OBJECTIVE_MASKED_LM)
        return 0;
    const ac_corpus *c = &t->train_corpus;
    int64_t longest = 1;
    for (int64_t k = 0; k < t->n_train; k++) {
        const int64_t r = t->train_idx[k];
        if (c->off[r + 1] - c->off[r] > longest)
            longest = c->off[r + 1] - c->off[r];
    }
    int32_t *grams = malloc((size_t)longest * (size_t)mc->wide_order * sizeof *grams);
    double *work = malloc((size_t)4 * (size_t)mc->n_classes * sizeof *work);
    if (!grams || !work) {
        free(grams);
        free(work);
        return ac_err_set(err, "out of memory for the wide path's naive Bayes start");
    }
    wide_nb_init(t->model.p.wide_w, c->ids, c->off, c->labels, t->train_idx, t->n_train,
                 mc->wide_order, mc->wide_buckets, mc->n_classes, t->cfg.training.wide_nb, grams,
                 work);
    free(grams);
    free(work);
    return 0;
}

static int compare_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The settings left to the data ("auto"), from the training rows'
 * lengths in tokens (at most max_len), before the vocabulary: the
 * vocabulary's minimum count is one of them. */
static int adapt_to_data(trainer *t, ac_err *err)
{
    ac_adapt_data d = {.median_tokens = 0,
                       .labelled = t->obj->labelled,
                       .n_classes = t->obj->labelled ? t->opt->train->n_classes : 0,
                       .can_refit = !t->opt->val && t->n_val > 0,
                       .has_validation = t->n_val > 0};
    if (d.labelled && t->n_train > 0) {
        const ac_rawdata *raw = t->opt->train;
        int64_t *lengths = malloc((size_t)t->n_train * sizeof *lengths);
        ac_tokenizer *tok = NULL;
        if (!lengths || ac_tokenizer_create(&tok, &t->cfg.tokenizer, err)) {
            free(lengths);
            return lengths ? ac_err_prefix(err, "measuring the training rows")
                           : ac_err_set(err, "out of memory");
        }
        for (int64_t k = 0; k < t->n_train; k++) {
            const int64_t r = t->train_idx[k];
            const ac_token *tokens;
            int64_t n = ac_tokenize(tok, ac_rawdata_text(raw, r), ac_rawdata_text_len(raw, r),
                                    &tokens);
            if (n < 0) {
                ac_tokenizer_free(tok);
                free(lengths);
                return ac_err_set(err, "out of memory measuring the training rows");
            }
            lengths[k] = n < t->cfg.model.max_len ? n : t->cfg.model.max_len;
        }
        ac_tokenizer_free(tok);
        qsort(lengths, (size_t)t->n_train, sizeof *lengths, compare_i64);
        d.median_tokens = lengths[t->n_train / 2];
        free(lengths);
    }
    ac_train_adapt(&t->cfg.training, &t->cfg.model, &d, t->adapted, sizeof t->adapted);
    return 0;
}

static int setup_fresh(trainer *t, ac_err *err)
{
    const ac_train_options *o = t->opt;
    if (!o->config)
        return ac_err_set(err, "no configuration given");
    t->cfg = *o->config;
    t->cfg.labels = NULL;
    t->cfg.n_labels = 0;
    t->have_cfg = 1;
    const int labelled = t->obj->labelled;
    t->cfg.model.objective = o->objective;
    if (t->obj->prepare_config(t, err))
        return -1;
    if (split_rows(t, err))
        return -1;

    if (adapt_to_data(t, err))
        return -1;
    const ac_train_config *tc = &t->cfg.training;
    if (o->init_dir) {
        if (trainer_take_init(t, err))
            return -1;
    } else {
        /* Pretraining learns from all its text; a classifier's vocabulary
         * comes from its training rows only. */
        int specials = (t->cfg.model.pooling == AC_POOL_CLS ? AC_VOCAB_WITH_CLS : 0) |
                       t->obj->vocab_specials;
        if (ac_vocab_build(&t->vocab, o->train, labelled ? t->train_idx : NULL,
                           labelled ? t->n_train : o->train->n_rows, &t->cfg.tokenizer,
                           tc->vocab_max, tc->min_count, specials, err))
            return ac_err_prefix(err, "building the vocabulary");
        t->have_vocab = 1;
        if (t->vocab.size <= ac_vocab_n_specials(&t->vocab))
            return ac_err_set(err, "no word occurs %lld or more times in the training rows "
                                   "(training.min_count): the vocabulary would be empty",
                              (long long)tc->min_count);
    }
    t->cfg.model.vocab_size = t->vocab.size;
    t->cfg.model.n_classes = labelled ? o->train->n_classes : 0;
    t->cfg.model.temperature = 1.0f; /* fitted on the validation rows as training goes */
    if (ac_model_config_validate(&t->cfg.model, err))
        return ac_err_prefix(err, "model configuration");
    if (encode_corpora(t, err))
        return -1;
    if (ac_model_create(&t->model, &t->cfg.model, err))
        return ac_err_prefix(err, "creating the model");
    t->have_model = 1;
    ac_model_init_weights(&t->model, ac_rng_key(tc->seed, STREAM_INIT));
    if (o->init_dir && trainer_copy_init_weights(t, err))
        return -1;
    if (t->cfg.training.wide_nb > 0.0f && wide_start_from_nb(t, err))
        return -1;
    if (allocate_training_memory(t, err))
        return -1;

    ac_provenance *pv = &t->cfg.provenance;
    memset(pv, 0, sizeof *pv);
    snprintf(pv->version, sizeof pv->version, "%s", AC_VERSION);
    if (o->init_dir)
        snprintf(pv->init_model, sizeof pv->init_model, "%s", o->init_dir);
    if (t->obj->provenance(t, err))
        return -1;
    pv->rows_used = t->n_train;
    pv->best_val_accuracy = -1.0;

    t->state = (ac_trainer_state){.seed = tc->seed, .best_metric = -1.0, .best_step = -1};
    return 0;
}

static int setup_resume(trainer *t, ac_err *err)
{
    const ac_train_options *o = t->opt;
    char *state_path = ac_path_join(t->ckpt_dir, "trainer_state.json", err);
    if (!state_path)
        return -1;
    int missing = access(state_path, F_OK) != 0;
    free(state_path);
    if (missing)
        return ac_err_set(err, "%s holds no resumable checkpoint (%s/trainer_state.json not found)",
                          o->out_dir, t->ckpt_dir);
    /* A run killed while saving (SIGKILL, e.g. from mpirun) left temp files
     * (a save it was cut short between its renames was finished first:
     * trainer_recover_checkpoint). */
    if (t->writer) {
        ac_remove_stale_temps(t->ckpt_dir);
        ac_remove_stale_temps(o->out_dir);
    }

    ac_model_dir md;
    memset(&md, 0, sizeof md);
    if (ac_model_dir_load(&md, t->ckpt_dir, err))
        return ac_err_prefix(err, "resume");
    /* Take ownership of the loaded parts; they are freed one by one. */
    t->cfg = md.config;
    t->have_cfg = 1;
    t->vocab = md.vocab;
    t->have_vocab = 1;
    t->model = md.model;
    t->have_model = 1;

    const trainer_objective *run = trainer_objective_of(t->cfg.model.objective);
    if (run != t->obj)
        return ac_err_set(err, "resume: %s holds a %s run (continue it with attnctl %s --resume)",
                          t->ckpt_dir, run->run_name, run->command);
    if (t->obj->check_resume_data(t, err))
        return -1;
    if (split_rows(t, err))
        return -1;
    if (encode_corpora(t, err))
        return -1;
    if (allocate_training_memory(t, err))
        return -1;
    if (ac_model_dir_load_resume(t->ckpt_dir, &t->model, t->m1, t->m2, &t->state, err))
        return ac_err_prefix(err, "resume");
    if (t->state.seed != t->cfg.training.seed)
        return ac_err_set(err, "resume: %s/trainer_state.json: seed differs from config.json",
                          t->ckpt_dir);
    const ac_train_config *tc = &t->cfg.training;
    /* Figures no run writes (a hand-edited file): a member past the last
     * (members' average included), a best step ahead of the run. */
    const ac_trainer_state *st = &t->state;
    const int members = tc->members > 1 ? tc->members : 1;
    const int last_member = members > 1 ? members : 0; /* the average is "member" members */
    if (st->member < 0 || st->member > last_member || st->best_step < -1 ||
        st->best_step > st->step || st->bad_evals < 0)
        return ac_err_set(err, "resume: %s/trainer_state.json: member %d, best step %ld, %d "
                               "evaluations since the best do not fit a run of %d member%s at "
                               "step %ld",
                          t->ckpt_dir, st->member, st->best_step, st->bad_evals, members,
                          members == 1 ? "" : "s", st->step);
    if (tc->epochs == AC_AUTO || tc->ema == AC_AUTO || tc->members == AC_AUTO ||
        tc->wide_nb == AC_AUTO || tc->min_count == AC_AUTO ||
        t->cfg.model.wide_order == AC_WIDE_ORDER_AUTO ||
        t->cfg.model.wide_buckets == AC_WIDE_BUCKETS_AUTO)
        return ac_err_set(err, "resume: %s/config.json: a training setting is \"auto\" (a run "
                               "records the values it chose)",
                          t->ckpt_dir);
    t->ckpt_step = trainer_global_step(t);
    return 0;
}

/* The training batches of one epoch: shuffled, and a share of the rows cut
 * to short spans (both drawn from the seed and the epoch). */
int trainer_make_epoch_plan(trainer *t, int epoch, ac_err *err)
{
    const ac_train_config *tc = &t->cfg.training;
    ac_crop_spec crop = {.frac = tc->crop_frac,
                         .min_len = tc->crop_min,
                         .max_len = tc->crop_max,
                         .log_uniform = 1,
                         .keep_first = t->cfg.model.pooling == AC_POOL_CLS,
                         .key = ac_rng_key(ac_rng_key(t->run_seed, STREAM_CROP),
                                           (uint64_t)epoch)};
    uint64_t shuffle = ac_rng_key(ac_rng_key(t->run_seed, STREAM_SHUFFLE),
                                  (uint64_t)epoch);
    if (ac_batch_plan_make_cropped(&t->plan, &t->train_corpus, t->train_idx, t->n_train,
                                   tc->batch_size, 1, shuffle, &crop, err))
        return -1;
    t->plan_epoch = epoch;
    return 0;
}

/* Micro-batches of a step, and what summing them and sharing them among
 * ranks needs. */
static int setup_micro_batches(trainer *t, ac_err *err)
{
    const ac_train_config *tc = &t->cfg.training;
    const int ranks = t->comm ? t->comm->size : 1;
    if (tc->micro_batch < 1)
        return ac_err_set(err, "training.micro_batch must be at least 1");
    t->micro_batch = tc->micro_batch < tc->batch_size ? tc->micro_batch : tc->batch_size;
    t->max_micro = (tc->batch_size + t->micro_batch - 1) / t->micro_batch;
    if (ranks > t->max_micro)
        return ac_err_set(err, "%d processes but a step has only %d micro-batch%s (batch %d, "
                               "micro-batch %d): use at most %d process%s, or a smaller "
                               "--micro-batch",
                          ranks, t->max_micro, t->max_micro == 1 ? "" : "es", tc->batch_size,
                          t->micro_batch, t->max_micro, t->max_micro == 1 ? "" : "es");
    t->step_slots = calloc((size_t)t->max_micro + 3, sizeof *t->step_slots);
    t->micro_weights = calloc((size_t)t->max_micro, sizeof *t->micro_weights);
    /* an evaluation pass has at most the validation plan's batches */
    int64_t most = t->have_val_plan ? t->val_plan.n_batches : 0;
    t->eval_slots = calloc(3 * (size_t)(most > 0 ? most : 1), sizeof *t->eval_slots);
    t->gather_offsets = calloc((size_t)ranks + 1, sizeof *t->gather_offsets);
    if (!t->step_slots || !t->micro_weights || !t->eval_slots || !t->gather_offsets)
        return ac_err_set(err, "out of memory");
    if (t->max_micro > 1) {
        long positions = (long)tc->batch_size * (long)t->cfg.model.max_len;
        if (ac_gradsum_init(&t->gradsum, &t->model, positions, t->max_micro, err))
            return -1;
        t->have_gradsum = 1;
    }
    return 0;
}

int trainer_setup(trainer *t, ac_err *err)
{
    const ac_train_options *o = t->opt;
    if (!o->train || !o->out_dir)
        return ac_err_set(err, "training data and output directory are required");
    t->obj = trainer_objective_of(o->objective);
    if (t->obj->check_options(o, err))
        return -1;
    if (o->init_dir && (o->resume || o->objective != AC_OBJECTIVE_CLASSIFICATION))
        return ac_err_set(err, "starting from a pretrained model is for a fresh classifier run");
    if (o->val) {
        if (trainer_check_labelled(o->val, "the validation data", err))
            return -1;
        if (!trainer_classes_match(o->val, o->train->classes, o->train->n_classes))
            return ac_err_set(err, "the validation data's classes differ from the training data's");
    }
    if (!(t->ckpt_dir = ac_path_join(o->out_dir, AC_CHECKPOINT_SUBDIR, err)) ||
        !(t->metrics_path = ac_path_join(o->out_dir, AC_METRICS_FILE, err)) ||
        !(t->svg_path = ac_path_join(o->out_dir, AC_CURVES_FILE, err)) ||
        !(t->calibration_path = ac_path_join(o->out_dir, AC_CALIBRATION_FILE, err)))
        return -1;
    if (t->writer && ac_mkdir_p(o->out_dir, err))
        return -1;
    if (o->resume ? setup_resume(t, err) : setup_fresh(t, err))
        return -1;

    /* Batches per epoch from this epoch's plan (the count is the same every epoch). */
    const ac_train_config *tc = &t->cfg.training;
    if (tc->epochs < 1 || tc->batch_size < 1)
        return ac_err_set(err, "training.epochs and training.batch_size must be at least 1");
    t->model.label_smoothing = tc->label_smoothing;
    t->model.token_dropout = tc->token_dropout;
    if (tc->ema > 0) {
        if (ac_ema_init(&t->ema, &t->model, tc->ema, t->state.step, err))
            return -1;
        t->have_ema = 1;
        if (o->resume && trainer_load_ema(t, err))
            return ac_err_prefix(err, "resume");
    }
    t->run_seed = trainer_member_seed(t);
    int first_epoch = t->state.epoch < tc->epochs ? t->state.epoch : 0;
    if (trainer_make_epoch_plan(t, first_epoch, err))
        return ac_err_prefix(err, "batching");
    t->batches_per_epoch = (long)t->plan.n_batches;
    if (t->batches_per_epoch <= 0)
        return ac_err_set(err, "no training batches");
    t->total_steps = (long)tc->epochs * t->batches_per_epoch;
    if (t->n_val > 0) {
        if (ac_batch_plan_make(&t->val_plan, t->val_src, t->val_idx, t->n_val, tc->batch_size, 0,
                               0, err))
            return ac_err_prefix(err, "batching the validation rows");
        t->have_val_plan = 1;
    }
    if (t->n_val > 0 && t->obj->setup_validation && t->obj->setup_validation(t, err))
        return -1;

    if (setup_micro_batches(t, err))
        return -1;

    /* config.json stores warmup as a fraction of all steps: a warmup given in
     * steps becomes the fraction that rounds back to it, so that a resumed
     * run computes the same schedule. */
    if (!o->resume && tc->optim.warmup_steps >= 0) {
        double frac = (double)tc->optim.warmup_steps / (double)t->total_steps;
        t->cfg.training.warmup_frac = frac < 1.0 ? frac : 1.0;
        t->cfg.training.optim.warmup_steps = -1;
    }
    t->optim = tc->optim;
    t->optim.total_steps = t->total_steps;
    t->optim.warmup_steps = (long)llround(tc->warmup_frac * (double)t->total_steps);
    if (!o->resume && check_config_roundtrip(&t->cfg, err))
        return -1;
    if (o->resume) {
        /* The checkpoint must continue the same schedule over the same batches. */
        long saved_total = tc->optim.total_steps;
        if (saved_total > 0 && saved_total != t->total_steps)
            return ac_err_set(err, "resume: the data gives %ld steps in all but the checkpoint "
                                   "was made for %ld (different data or batch size?)",
                              t->total_steps, saved_total);
        if (t->state.step != (long)t->state.epoch * t->batches_per_epoch +
                                 (long)t->state.batch_in_epoch ||
            t->state.batch_in_epoch < 0 || t->state.batch_in_epoch >= t->batches_per_epoch ||
            t->state.epoch < 0 || t->state.epoch > tc->epochs)
            return ac_err_set(err, "resume: %s/trainer_state.json (step %ld, epoch %d, batch %lld) "
                                   "does not fit %ld batches per epoch",
                              t->ckpt_dir, t->state.step, t->state.epoch,
                              (long long)t->state.batch_in_epoch, t->batches_per_epoch);
    }
    t->cfg.training.optim.total_steps = t->total_steps;

    t->run_steps = (long)t->cfg.training.members * t->total_steps;
    long max_steps = o->max_steps;
    t->stop_step = max_steps > 0 && max_steps < t->run_steps ? max_steps : t->run_steps;

    if (o->resume) {
        if (trainer_load_metrics_until(t, trainer_global_step(t), err))
            return -1;
        if (t->n_points > 0 && isfinite(t->points[t->n_points - 1].elapsed_s))
            t->elapsed_base = t->points[t->n_points - 1].elapsed_s;
        if (trainer_write_metrics_and_curves(t, err))
            return -1;
        char *model_path = ac_path_join(o->out_dir, "model.safetensors", err);
        if (!model_path)
            return -1;
        t->model_saved = access(model_path, F_OK) == 0;
        free(model_path);
        /* the data may have moved: record where it is now */
        if (o->train_path || (t->obj->sources_to_json && o->text_paths))
            return trainer_write_sources(t, err);
        return 0;
    }
    if (!t->writer)
        return 0;
    if (ac_mkdir_p(t->ckpt_dir, err) || trainer_write_sources(t, err))
        return -1;
    if (trainer_has_members(t) && trainer_save_member_start(t, err))
        return -1;
    /* A fresh run starts a fresh log. */
    unlink(t->svg_path);
    unlink(t->calibration_path);
    return ac_write_file_atomic(t->metrics_path, "", 0, err);
}

void trainer_free(trainer *t)
{
    if (t->have_val_plan)
        ac_batch_plan_free(&t->val_plan);
    if (t->have_ema)
        ac_ema_free(&t->ema);
    if (t->plan_epoch >= 0)
        ac_batch_plan_free(&t->plan);
    if (t->have_val_corpus)
        ac_corpus_free(&t->val_corpus);
    if (t->have_train_corpus)
        ac_corpus_free(&t->train_corpus);
    if (t->have_model)
        ac_model_free(&t->model);
    if (t->have_vocab)
        ac_vocab_free(&t->vocab);
    if (t->have_cfg)
        ac_config_free(&t->cfg);
    free(t->train_idx);
    free(t->val_idx);
    free(t->m1);
    free(t->m2);
    free(t->batch.ids);
    free(t->batch.lengths);
    free(t->batch.labels);
    free(t->batch.rows);
    free(t->points);
    free(t->ckpt_dir);
    free(t->metrics_path);
    free(t->svg_path);
    free(t->calibration_path);
    free(t->micro_weights);
    free(t->step_slots);
    free(t->eval_slots);
    free(t->gather_offsets);
    if (t->have_gradsum)
        ac_gradsum_free(&t->gradsum);
    if (t->have_init)
        ac_model_dir_free(&t->init);
    if (t->obj && t->obj->free)
        t->obj->free(t);
}
