/* The training loop: exact resume, thread-count determinism, early stopping,
 * NaN handling, metrics.jsonl and training.svg, and the CLI end to end.
 * Tiny models on tests/data/train_tiny.csv (42 rows, 2 classes). */
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <ftw.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attnctl/io.h"
#include "attnctl/model.h"
#include "attnctl/text.h"
#include "attnctl/train.h"
#include "../src/train/ema.h"
#include "../src/train/pick_model.h"

#include "test_util.h"

#define TINY_CSV "tests/data/train_tiny.csv"

/* ------------------------------------------------------------ helpers */

static void tiny_config(ac_config *c)
{
    ac_config_defaults(c);
    c->model.max_len = 24;
    c->model.d_model = 16;
    c->model.n_heads = 2;
    c->model.d_ff = 32;
    c->model.n_layers = 1;
    c->model.dropout = 0.1f;
    c->model.pooling = AC_POOL_MEAN;
    c->model.ngram_order = 2; /* bigrams on, in a table sized for the tiny data */
    c->model.ngram_buckets = 97;
    c->training.epochs = 3;
    c->training.batch_size = 4;
    c->training.optim.lr = 3e-3f;
    c->training.val_split = 0.25;
    c->training.patience = 0;
    c->training.eval_every = 0;
    c->training.vocab_max = 200;
    c->training.min_count = 1;
    c->training.seed = 7;
    c->training.members = 1; /* one model: test_members covers several */
    /* The value these tests were written with, not left to the (short)
     * data: test_adapt.c covers that. */
    c->training.ema = 0.999f;
    c->training.wide_nb = 0.0f;
    c->model.wide_order = 3;
}

static void read_tiny(ac_rawdata *raw)
{
    ac_read_options ro = {.need_label = 1};
    ac_err err = {{0}};
    int rc = ac_rawdata_read(raw, TINY_CSV, &ro, &err);
    ck_assert_msg(rc == 0, "reading %s: %s", TINY_CSV, err.msg);
    ck_assert_int_eq(raw->n_classes, 2);
}

typedef struct {
    volatile sig_atomic_t stop;
    long stop_at_step; /* set stop after this step (0: never) */
    int n_steps, n_evals, n_begin;
    long last_step;
} watcher;

static void watch(const ac_train_progress *p, void *user)
{
    watcher *w = user;
    switch (p->kind) {
    case AC_TRAIN_EVENT_BEGIN: w->n_begin++; break;
    case AC_TRAIN_EVENT_STEP:
        w->n_steps++;
        ck_assert_int_gt(p->step, w->last_step);
        w->last_step = p->step;
        if (w->stop_at_step > 0 && p->step == w->stop_at_step)
            w->stop = SIGINT;
        break;
    case AC_TRAIN_EVENT_EVAL: w->n_evals++; break;
    }
}

/* What a run is besides its data and directory: the objective, the text
 * files of a pretraining run, the pretrained model a classifier starts from. */
typedef struct {
    ac_objective objective;
    const char *const *text_paths;
    int n_text_paths;
    const char *init_dir;
} run_kind;

/* One call of ac_train; returns its rc and fills *res and *w. kind may be
 * NULL: a classifier. */
static int train_once_as(const run_kind *kind, const ac_config *cfg, const ac_rawdata *train,
                         const ac_rawdata *val, const char *dir, int resume, long max_steps,
                         long stop_at, watcher *w, ac_train_result *res, ac_err *err)
{
    static const run_kind classifier = {0};
    if (!kind)
        kind = &classifier;
    memset(w, 0, sizeof *w);
    w->stop_at_step = stop_at;
    ac_train_options o = {
        .config = resume ? NULL : cfg,
        .train = train,
        .val = val,
        .out_dir = dir,
        .resume = resume,
        .max_steps = max_steps,
        .stop = &w->stop,
        .progress = watch,
        .progress_user = w,
        .objective = kind->objective,
        .text_paths = kind->text_paths,
        .n_text_paths = kind->n_text_paths,
        .init_dir = kind->init_dir,
    };
    return ac_train(&o, res, err);
}

static int train_once(const ac_config *cfg, const ac_rawdata *train, const ac_rawdata *val,
                      const char *dir, int resume, long max_steps, long stop_at, watcher *w,
                      ac_train_result *res, ac_err *err)
{
    return train_once_as(NULL, cfg, train, val, dir, resume, max_steps, stop_at, w, res, err);
}

static void train_ok(const ac_config *cfg, const ac_rawdata *train, const char *dir, int resume,
                     long max_steps, long stop_at, ac_train_result *res)
{
    watcher w;
    ac_err err = {{0}};
    int rc = train_once(cfg, train, NULL, dir, resume, max_steps, stop_at, &w, res, &err);
    ck_assert_msg(rc == 0, "ac_train(%s, resume=%d): %s", dir, resume, err.msg);
    ck_assert_int_eq(w.n_evals, res->n_evals);
}

static void load_dir(ac_model_dir *md, const char *dir)
{
    ac_err err = {{0}};
    int rc = ac_model_dir_load(md, dir, &err);
    ck_assert_msg(rc == 0, "loading %s: %s", dir, err.msg);
}

/* Parameters (and, for checkpoints, AdamW moments and state) are bitwise equal. */
static void assert_same_weights(const char *dir_a, const char *dir_b, int with_moments)
{
    ac_model_dir a, b;
    load_dir(&a, dir_a);
    load_dir(&b, dir_b);
    ck_assert_uint_eq(a.model.n_params, b.model.n_params);
    size_t bytes = a.model.n_params * sizeof(float);
    ck_assert_msg(memcmp(a.model.params, b.model.params, bytes) == 0,
                  "weights in %s and %s differ", dir_a, dir_b);
    if (with_moments) {
        float *m1a = malloc(bytes), *m2a = malloc(bytes), *m1b = malloc(bytes), *m2b = malloc(bytes);
        ac_trainer_state sa, sb;
        ac_err err = {{0}};
        ck_assert_msg(ac_model_dir_load_resume(dir_a, &a.model, m1a, m2a, &sa, &err) == 0, "%s",
                      err.msg);
        ck_assert_msg(ac_model_dir_load_resume(dir_b, &b.model, m1b, m2b, &sb, &err) == 0, "%s",
                      err.msg);
        ck_assert_msg(memcmp(m1a, m1b, bytes) == 0 && memcmp(m2a, m2b, bytes) == 0,
                      "AdamW moments in %s and %s differ", dir_a, dir_b);
        ck_assert_int_eq(sa.step, sb.step);
        ck_assert_int_eq(sa.epoch, sb.epoch);
        ck_assert_int_eq(sa.batch_in_epoch, sb.batch_in_epoch);
        ck_assert_int_eq(sa.best_step, sb.best_step);
        ck_assert(sa.best_metric == sb.best_metric);
        free(m1a);
        free(m2a);
        free(m1b);
        free(m2b);
    }
    ac_model_dir_free(&a);
    ac_model_dir_free(&b);
}

typedef struct {
    int n;
    long step[256];
    double val_accuracy[256], val_loss[256];
} metrics_log;

/* Parses DIR/metrics.jsonl, asserting that every line is a complete record. */
static void read_metrics(const char *dir, metrics_log *log)
{
    char *path = test_path(dir, AC_METRICS_FILE);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s missing", path);
    static const char *const keys[] = {"step", "epoch", "train_loss", "val_loss", "val_accuracy",
                                       "lr", "tokens_per_s", "elapsed_s"};
    char line[4096];
    memset(log, 0, sizeof *log);
    while (fgets(line, sizeof line, f)) {
        ck_assert_msg(strchr(line, '\n') != NULL, "%s: line %d not terminated", path, log->n + 1);
        cJSON *obj = cJSON_Parse(line);
        ck_assert_msg(cJSON_IsObject(obj), "%s: line %d is not a JSON object: %s", path,
                      log->n + 1, line);
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            ck_assert_msg(cJSON_GetObjectItemCaseSensitive(obj, keys[k]) != NULL,
                          "%s: line %d lacks %s", path, log->n + 1, keys[k]);
        cJSON *step = cJSON_GetObjectItemCaseSensitive(obj, "step");
        cJSON *acc = cJSON_GetObjectItemCaseSensitive(obj, "val_accuracy");
        cJSON *loss = cJSON_GetObjectItemCaseSensitive(obj, "train_loss");
        ck_assert(cJSON_IsNumber(step) && cJSON_IsNumber(loss));
        ck_assert(isfinite(loss->valuedouble) && loss->valuedouble > 0);
        ck_assert_int_lt(log->n, 256);
        log->step[log->n] = (long)step->valuedouble;
        log->val_accuracy[log->n] = cJSON_IsNumber(acc) ? acc->valuedouble : NAN;
        cJSON *vloss = cJSON_GetObjectItemCaseSensitive(obj, "val_loss");
        log->val_loss[log->n] = cJSON_IsNumber(vloss) ? vloss->valuedouble : NAN;
        if (log->n > 0)
            ck_assert_int_gt(log->step[log->n], log->step[log->n - 1]);
        log->n++;
        cJSON_Delete(obj);
    }
    fclose(f);
    free(path);
}

/* Two runs' metrics.jsonl: the same evaluations (n of them, or any number
 * when n < 0) with the same figures, to the bit. */
static void assert_same_metrics(const char *a, const char *b, int n)
{
    metrics_log la, lb;
    read_metrics(a, &la);
    read_metrics(b, &lb);
    if (n >= 0)
        ck_assert_int_eq(la.n, n);
    ck_assert_int_eq(lb.n, la.n);
    for (int i = 0; i < la.n; i++) {
        ck_assert_int_eq(la.step[i], lb.step[i]);
        ck_assert(la.val_accuracy[i] == lb.val_accuracy[i] ||
                  (isnan(la.val_accuracy[i]) && isnan(lb.val_accuracy[i])));
        ck_assert(la.val_loss[i] == lb.val_loss[i] ||
                  (isnan(la.val_loss[i]) && isnan(lb.val_loss[i])));
    }
}

static char *read_bytes(const char *path, size_t *len_out)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s missing", path);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    fclose(f);
    buf[len] = '\0';
    *len_out = len;
    return buf;
}

static char *read_text(const char *path)
{
    size_t len;
    return read_bytes(path, &len);
}

static int count_substr(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* ------------------------------------------------------------- tests */

/* N steps, SIGINT-style stop, resume to N+M == N+M in one go, bitwise
 * (weights, AdamW moments, state), including the best model and the log. */
START_TEST(test_resume_after_interrupt_is_bitwise)
{
    ac_rawdata raw;
    read_tiny(&raw);
    ac_config cfg;
    tiny_config(&cfg);
    cfg.training.eval_every = 5;
    char *a = test_temp_dir("train"), *b = test_temp_dir("train");
    ac_train_result ra, rb;

    train_ok(&cfg, &raw, a, 0, 13, 0, &ra);
    ck_assert_int_eq(ra.status, AC_TRAIN_MAX_STEPS);
    ck_assert_int_eq(ra.step, 13);
    ck_assert_int_eq(ra.total_steps, 24); /* 32 training rows / 4 x 3 epochs */

    train_ok(&cfg, &raw, b, 0, 13, 6, &rb);
    ck_assert_int_eq(rb.status, AC_TRAIN_INTERRUPTED);
    ck_assert_int_eq(rb.step, 6);
    train_ok(&cfg, &raw, b, 1, 13, 0, &rb);
    ck_assert_int_eq(rb.status, AC_TRAIN_MAX_STEPS);
    ck_assert_int_eq(rb.step, 13);

    char *ca = test_path(a, AC_CHECKPOINT_SUBDIR), *cb = test_path(b, AC_CHECKPOINT_SUBDIR);
    assert_same_weights(ca, cb, 1);
    assert_same_weights(a, b, 0);
    assert_same_metrics(a, b, 3); /* steps 5, 10, 13 */
    ck_assert(ra.best_val_accuracy == rb.best_val_accuracy);
    free(ca);
    free(cb);
    rm_rf(a);
    rm_rf(b);
    free(a);
    free(b);
    ac_config_free(&cfg);
    ac_rawdata_free(&raw);
}
END_TEST

static void copy_file(const char *from, const char *to)
{
    size_t len;
    char *bytes = read_bytes(from, &len);
    FILE *f = fopen(to, "wb");
    ck_assert_msg(f != NULL, "%s: %s", to, strerror(errno));
    ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
    free(bytes);
}

/* A checkpoint save killed between its renames (mpirun's SIGKILL one second
 * after Ctrl-C can land there) left trainer_state.json of step 9 next to the
 * weights and moments of step 6, whose step-9 versions are still temp files
 * of the dead writer. The resume finishes that save and goes on bitwise as
 * the uninterrupted run (it used to resume step 9's state with step 6's
 * weights, silently). Without those temp files it refuses, naming the steps. */
START_TEST(test_resume_finishes_a_save_cut_short)
{
    ac_rawdata raw;
    read_tiny(&raw);
    ac_config cfg;
    tiny_config(&cfg);
    cfg.training.eval_every = 5;
    char *a = test_temp_dir("train"), *b = test_temp_dir("train"), *c = test_temp_dir("train");
    ac_train_result ra, rb, rc;
    train_ok(&cfg, &raw, a, 0, 13, 0, &ra);
    train_ok(&cfg, &raw, b, 0, 13, 6, &rb);
    train_ok(&cfg, &raw, c, 0, 13, 9, &rc);
    ck_assert_int_eq(rb.step, 6);
    ck_assert_int_eq(rc.step, 9);
    char *cb = test_path(b, AC_CHECKPOINT_SUBDIR), *cc = test_path(c, AC_CHECKPOINT_SUBDIR);
    char *state_b = test_path(cb, "trainer_state.json"), *state_c = test_path(cc, "trainer_state.json");
    char *optim_c = test_path(cc, "optimizer.safetensors"), *model_c = test_path(cc, "model.safetensors");
    char *optim_tmp = test_path(cb, "optimizer.safetensors.tmp.2147483646.0");
    char *model_tmp = test_path(cb, "model.safetensors.tmp.2147483646.0");
    char *ema_c = test_path(cc, "ema-9.safetensors"), *ema_b = test_path(cb, "ema-9.safetensors");
    ck_assert(cfg.training.ema > 0);
    copy_file(ema_c, ema_b); /* the save writes the average first */
    copy_file(state_c, state_b); /* renamed */
    copy_file(optim_c, optim_tmp); /* not yet */
    copy_file(model_c, model_tmp);

    /* without the temp files: a clear refusal */
    char *hidden = test_path(b, "hidden");
    ck_assert_int_eq(rename(model_tmp, hidden), 0);
    watcher w;
    ac_err err = {{0}};
    ck_assert_int_eq(train_once(&cfg, &raw, NULL, b, 1, 13, 0, &w, &rb, &err), -1);
    ck_assert_msg(strstr(err.msg, "a save was cut short (trainer_state.json of step 9, "
                                  "optimizer.safetensors of step 6, model.safetensors of step 6)"),
                  "%s", err.msg);
    ck_assert_int_eq(access(optim_tmp, F_OK), 0); /* nothing half done */
    ck_assert_int_eq(rename(hidden, model_tmp), 0);

    train_ok(&cfg, &raw, b, 1, 13, 0, &rb);
    ck_assert_int_eq(rb.status, AC_TRAIN_MAX_STEPS);
    ck_assert_int_eq(rb.step, 13);
    ck_assert_int_ne(access(optim_tmp, F_OK), 0);
    ck_assert_int_ne(access(model_tmp, F_OK), 0);
    char *ca = test_path(a, AC_CHECKPOINT_SUBDIR);
    assert_same_weights(ca, cb, 1);
    assert_same_weights(a, b, 0);

    /* the other way round: killed before any rename, the old checkpoint stands */
    train_ok(&cfg, &raw, c, 1, 13, 0, &rc);
    assert_same_weights(ca, cc, 1);
    free(ca);
    free(hidden);
    free(optim_tmp);
    free(ema_c);
    free(ema_b);
    free(model_tmp);
    free(optim_c);
    free(model_c);
    free(state_b);
    free(state_c);
    free(cb);
    free(cc);
    rm_rf(a);
    rm_rf(b);
    rm_rf(c);
    free(a);
    free(b);
    free(c);
    ac_config_free(&cfg);
    ac_rawdata_free(&raw);
}
END_TEST

/* Stopping at --max-steps (which evaluates) and resuming to the end equals one full run. */
START_TEST(test_resume_after_max_steps_is_bitwise)
{
    ac_rawdata raw;
    read_tiny(&raw);
    ac_config cfg;
    tiny_config(&cfg);
    /* Every step evaluated: a run stopped by max_steps evaluates where it
     * stops, so only with the same evaluations can the best-model records
     * (best step, best accuracy) agree too. */
    cfg.training.eval_every = 1;
    char *a = test_temp_dir("train"), *b = test_temp_dir("train");
    ac_train_result ra, rb;
    train_ok(&cfg, &raw, a, 0, 0, 0, &ra);
    ck_assert_int_eq(ra.status, AC_TRAIN_FINISHED);
    ck_assert_int_eq(ra.step, 24);
    ck_assert_int_eq(ra.n_evals, 24);

    train_ok(&cfg, &raw, b, 0, 11, 0, &rb);
    ck_assert_int_eq(rb.status, AC_TRAIN_MAX_STEPS);
    ck_assert_int_eq(rb.step, 11);
    train_ok(&cfg, &raw, b, 1, 0, 0, &rb);
    ck_assert_int_eq(rb.status, AC_TRAIN_FINISHED);
    ck_assert_int_eq(rb.step, 24);
    ck_assert_int_eq(rb.epoch, 3);

    char *ca = test_path(a, AC_CHECKPOINT_SUBDIR), *cb = test_path(b, AC_CHECKPOINT_SUBDIR);
    assert_same_weights(ca, cb, 1);
    /* A finished run resumed does nothing more. */
    train_ok(&cfg, &raw, b, 1, 0, 0, &rb);
    ck_assert_int_eq(rb.status, AC_TRAIN_FINISHED);
    ck_assert_int_eq(rb.step, 24);
    ck_assert_int_eq(rb.n_evals, 0);
    free(ca);
    free(cb);
    rm_rf(a);
    rm_rf(b);
    free(a);
    free(b);
    ac_config_free(&cfg);
    ac_rawdata_free(&raw);
}
END_TEST

/* A tiny model with both row-sparse tables (n-grams, wide path). */
static void create_tables_model(ac_model *m)
{
    ac_model_config mc = {.vocab_size = 9, .max_len = 4, .d_model = 4, .n_heads = 2, .d_ff = 6,
                          .n_layers = 1, .n_classes = 2, .pooling = AC_POOL_MEAN,
                          .ln_eps = 1e-6f, .positions = AC_POS_LEARNED, .ngram_order = 2,
                          .ngram_buckets = 7, .wide_order = 2, .wide_buckets = 5,
                          .temperature = 1.0f};
    ac_err err;
    ck_assert_msg(ac_model_create(m, &mc, &err) == 0, "%s", err.msg);
    ac_model_init_weights(m, 3);
}

/* The lazy average of the row-sparse tables (n-grams, wide path) equals the
 * plain per-step average computed densely: rows untouched for k steps catch up
 * by decay^k exactly (to float rounding). Weights move by hand: dense ones
 * every step, a table's row only in the steps that "touch" it. */
START_TEST(test_ema_lazy_rows_match_dense_average)
{
    ac_model m;
    ac_err err;
    create_tables_model(&m);
    for (size_t i = 0; i < m.n_params; i++)
        m.params[i] = 0.01f * (float)(i % 17);
    const double decay = 0.9;
    ac_ema e;
    ck_assert_msg(ac_ema_init(&e, &m, decay, 0, &err) == 0, "%s", err.msg);
    double *ref = calloc(m.n_params, sizeof *ref); /* the average starts at zero */
    double left = 1.0;                             /* decay^k: the bias correction */
    for (long step = 0; step < 40; step++) {
        /* rows touched this step: n-gram row step % 3 and, every 5th step, row 6;
         * wide row step % 4 */
        ac_sparse_rows *ng = &m.sparse[AC_SPARSE_NGRAM], *wide = &m.sparse[AC_SPARSE_WIDE];
        ng->n_rows = 0;
        ng->rows[ng->n_rows++] = (int32_t)(step % 3);
        if (step % 5 == 4)
            ng->rows[ng->n_rows++] = 6;
        wide->n_rows = 0;
        wide->rows[wide->n_rows++] = (int32_t)(step % 4);
        ac_ema_before_step(&e, &m, step);
        for (size_t i = 0; i < m.dense_params; i++)
            m.params[i] += 0.001f * (float)((i + (size_t)step) % 7) - 0.003f;
        for (int t = 0; t < AC_SPARSE_TABLES; t++) {
            const ac_sparse_rows *r = &m.sparse[t];
            for (int k = 0; k < r->n_rows; k++)
                for (size_t i = 0; i < (size_t)r->width; i++)
                    m.params[r->offset + (size_t)r->rows[k] * r->width + i] +=
                        0.01f * (float)(step % 4);
        }
        ac_ema_after_step(&e, &m, step + 1);
        for (size_t i = 0; i < m.n_params; i++)
            ref[i] = decay * ref[i] + (1 - decay) * m.params[i];
        left *= decay;
    }
    float *before = malloc(m.n_params * sizeof *before);
    float *avg_before = malloc(m.n_params * sizeof *avg_before);
    memcpy(before, m.params, m.n_params * sizeof *before);
    memcpy(avg_before, e.avg, m.n_params * sizeof *avg_before);
    ac_ema_swap_in(&e, &m);
    /* the model holds the bias-corrected average, every row up to date */
    const double correction = 1.0 - left;
    double worst = 0;
    for (size_t i = 0; i < m.n_params; i++)
        worst = fmax(worst, fabs(m.params[i] - ref[i] / correction));
    ck_assert_msg(worst < 1e-5, "swapped-in average off by %g", worst);
    /* swap in and out restores the trained weights bit for bit, and reading
     * the average changed nothing of it (an evaluation must not change the
     * bits of what follows: a run stopped at --max-steps evaluates where the
     * run it resumes into did not) */
    ac_ema_swap_out(&e, &m);
    ck_assert_int_eq(memcmp(before, m.params, m.n_params * sizeof *before), 0);
    ck_assert_int_eq(memcmp(avg_before, e.avg, m.n_params * sizeof *avg_before), 0);
    free(avg_before);
    free(before);
    free(ref);
    ac_ema_free(&e);
    ac_model_free(&m);
}
END_TEST

/* The average holds no part of the initial weights: after one step it is the
 * trained weights themselves, however close to 1 the decay (bug: it started
 * from the initialisation, so a short run at decay 0.999 evaluated and saved
 * mostly its random initial weights). Before any step it is the weights. */
START_TEST(test_ema_is_an_average_of_trained_weights_only)
{
    ac_model m;
    ac_err err;
    create_tables_model(&m);
    ac_ema e;
    ck_assert_msg(ac_ema_init(&e, &m, 0.999, 0, &err) == 0, "%s", err.msg);
    float *start = malloc(m.n_params * sizeof *start);
    memcpy(start, m.params, m.n_params * sizeof *start);
    ac_ema_swap_in(&e, &m);
    ck_assert_int_eq(memcmp(start, m.params, m.n_params * sizeof *start), 0);
    ac_ema_swap_out(&e, &m);
    for (int t = 0; t < AC_SPARSE_TABLES; t++)
        m.sparse[t].n_rows = 0; /* one step that touched no table row */
    ac_ema_before_step(&e, &m, 0);
    for (size_t i = 0; i < m.n_params; i++)
        m.params[i] += 0.5f;
    ac_ema_after_step(&e, &m, 1);
    float *trained = malloc(m.n_params * sizeof *trained);
    memcpy(trained, m.params, m.n_params * sizeof *trained);
    ac_ema_swap_in(&e, &m);
    double worst = 0;
    for (size_t i = 0; i < m.n_params; i++)
        worst = fmax(worst, fabs(m.params[i] - trained[i]));
    ck_assert_msg(worst < 1e-4, "the one-step average is off the trained weights by %g", worst);
    ac_ema_swap_out(&e, &m);
    free(trained);
    free(start);
    ac_ema_free(&e);
    ac_model_free(&m);
}
END_TEST

/* With averaging on, an interrupted run resumes bitwise (weights, moments,
 * the averaged best model), and the checkpoint keeps one averaged file. The
 * stop (step 11) is between evaluations (every 5): bug, the save and the
 * stopped run's last evaluation brought every table row's average up to date,
 * which the run never stopped did not, and bringing a row up to date in two
 * goes rounds differently from one. */
START_TEST(test_ema_resume_is_bitwise)
{
    ac_rawdata raw;
    read_tiny(&raw);
    ac_config cfg;
    tiny_config(&cfg);
    cfg.training.ema = 0.9f;
    cfg.training.eval_every = 5;
    ck_assert(ac_model_has_ngrams(&cfg.model)); /* lazily averaged rows */
    char *a = test_temp_dir("train"), *b = test_temp_dir("train");
    ac_train_result ra, rb;
    train_ok(&cfg, &raw, a, 0, 0, 0, &ra);
    train_ok(&cfg, &raw, b, 0, 11, 0, &rb);
    train_ok(&cfg, &raw, b, 1, 0, 0, &rb);
    ck_assert_int_eq(rb.step, 24);
    char *ca = test_path(a, AC_CHECKPOINT_SUBDIR), *cb = test_path(b, AC_CHECKPOINT_SUBDIR);
    assert_same_weights(ca, cb, 1);
    assert_same_weights(a, b, 0); /* the kept (averaged) models */
    char *ema_a = test_path(ca, "ema-24.safetensors"), *ema_b = test_path(cb, "ema-24.safetensors");
    ck_assert_int_eq(access(ema_a, F_OK), 0);
    size_t len_a, len_b; /* the averages themselves, bit for bit */
    char *bytes_a = read_bytes(ema_a, &len_a), *bytes_b = read_bytes(ema_b, &len_b);
    ck_assert_msg(len_a == len_b && memcmp(bytes_a, bytes_b, len_a) == 0,
                  "the averaged weights differ after the resume");
    free(bytes_a);
    free(bytes_b);
    char *old = test_path(cb, "ema-11.safetensors");
    ck_assert_int_ne(access(old, F_OK), 0); /* older averages are removed */
    /* the kept model is the average, not the trained weights */
    ac_model_dir kept, last;
    load_dir(&kept, a);
    load_dir(&last, ca);
    ck_assert(memcmp(kept.model.params, last.model.params, kept.model.n_params * sizeof(float)) != 0);
    ac_model_dir_free(&kept);
    ac_model_dir_free(&last);
    /* a missing average is a clear error on resume */
    ck_assert_int_eq(unlink(ema_b), 0);
    watcher w;
    ac_err err = {{0}};
    ck_assert_int_eq(train_once(&cfg, &raw, NULL, b, 1, 30, 0, &w, &rb, &err), -1);
    ck_assert_msg(strstr(err.msg, "ema-24.safetensors") != NULL, "%s", err.msg);
    free(old);
    free(ema_a);
    free(ema_b);
    free(ca);
    free(cb);
    rm_rf(a);
    rm_rf(b);
    free(a);
    free(b);
    ac_config_free(&cfg);
    ac_rawdata_free(&raw);
}
END_TEST

START_TEST(test_thread_count_does_not_change_weights)
{
    ac_rawdata raw;
    read_tiny(&raw);
    ac_config cfg;
    tiny_config(&cfg);
    cfg.training.epochs = 2;
    cfg.model.n_layers = 2;
    char *a = test_temp_dir("train"), *b = test_temp_dir("train");
    ac_train_result ra, rb;
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    train_ok(&cfg, &raw, a, 0, 0, 0, &ra);
    omp_set_num_threads(2);
    train_ok(&cfg, &raw, b, 0, 0, 0, &rb);
    omp_set_num_threads(saved);
    char *ca = test_path(a, AC_CHECKPOINT_SUBDIR), *cb = test_path(b, AC_CHECKPOINT_SUBDIR);
    assert_same_weights(ca, cb, 1);
    ck_assert(ra.last_val_loss == rb.last_val_loss);
    free(ca);
    free(cb);
    rm_rf(a);
    rm_rf(b);
    free(a);
    free(b);
    ac_config_free(&cfg);
    ac_rawdata_free(&raw);
}
END_TEST

/* A learning rate of 1e-9 moves no prediction, so validation accuracy never
 * improves after the first evaluation and patience 2 stops at the third. */
START_TEST(test_early_stop_by_patience)
{
    ac_rawdata raw;
    read_tiny(&raw);
    ac_config cfg;
    tiny_config(&cfg);
    cfg.training.optim.lr = 1e-9f;
    cfg.training.eval_every = 1;
    cfg.training.patience = 2;
    char *dir = test_temp_dir("train");
    ac_train_result r;
    train_ok(&cfg, &raw, dir, 0, 0, 0, &r);
    ck_assert_int_eq(r.status, AC_TRAIN_EARLY_STOPPED);
    ck_assert_int_eq(r.step, 3);
    ck_assert_int_eq(r.n_evals, 3);
    ck_assert_int_eq(r.best_step, 1);
    ck_assert(r.model_saved);
    metrics_log log;
    read_metrics(dir, &log);
    ck_assert_int_eq(log.n, 3);
    /* Resuming an early-stopped run stops again at once. */
    train_ok(&cfg, &raw, dir, 1, 0, 0, &r);
    ck_assert_int_eq(r.status, AC_TRAIN_EARLY_STOPPED);
    ck_assert_int_eq(r.step, 3);
    ck_assert_int_eq(r.n_evals, 0);
    rm_rf(dir);
    free(dir);
    ac_config_free(&cfg);
    ac_rawdata_free(&raw);
}
END_TEST

/* Fault injection: after step `at`, one weight becomes NaN. */
typedef struct {
    long at;
} poison;

static void poison_weights(ac_model *m, long step, void *user)
{
    const poison *p = user;
    if (step == p->at)
        /* the last head bias: every logit row uses it */
        m->p.head_b[m->cfg.n_classes - 1] = NAN;
}

typedef struct {
    char *data;
    size_t len;
} file_copy;

static file_copy snapshot(const char *path)
{
    file_copy c;
    c.data = read_bytes(path, &c.len);
    return c;
}

static void assert_file_equal(const char *path, file_copy *before)
{
    size_t len;
    char *now = read_bytes(path, &len);
    ck_assert_msg(len == before->len && memcmp(now, before->data, len) == 0, "%s changed", path);
    free(now);
    free(before->data);
}

/* Weights that turn NaN stop the run with an error naming the step; the
 * checkpoint saved before is untouched and loads, with finite weights. Every
 * detection point: the training loss (NaN after step 5, seen in step 6's
 * forward), the validation loss (NaN after step 4, seen by step 4's
 * evaluation, before anything is saved) and, with weight averaging, where the
 * evaluation sees the average: the trained weights checked before step 4's
 * evaluation (bug: the average was evaluated, found finite, and the NaN
 * weights were saved as the checkpoint). */
START_TEST(test_nan_keeps_last_good_checkpoint)
{
    ac_rawdata raw;
    read_tiny(&raw);
    ac_config cfg;
    tiny_config(&cfg);
    cfg.training.eval_every = 2;
    const long poison_after[] = {5, 4, 4};
    const char *expect[] = {"step 6: the training loss is NaN",
                            "step 4: the validation loss is NaN",
                            "step 4: a trained weight is NaN"};
    const long ckpt_step[] = {4, 2, 2};
    const float ema[] = {0, 0, 0.999f};
    for (int k = 0; k < 3; k++) {
        cfg.training.ema = ema[k];
        char *dir = test_temp_dir("train");
        char *ckpt = test_path(dir, AC_CHECKPOINT_SUBDIR);
        char *weights = test_path(ckpt, "model.safetensors");
        char *moments = test_path(ckpt, "optimizer.safetensors");
        char *state_path = test_path(ckpt, "trainer_state.json");
        char *best_path = test_path(dir, "model.safetensors");
        ac_train_result r;
        /* Reference: the same run stopped (with an evaluation) where the checkpoint will be. */
        train_ok(&cfg, &raw, dir, 0, ckpt_step[k], 0, &r);
        file_copy weights_before = snapshot(weights), state_before = snapshot(state_path);
        file_copy moments_before = snapshot(moments), best_before = snapshot(best_path);
        rm_rf(dir);
        ck_assert_int_eq(mkdir(dir, 0700), 0);

        poison p = {poison_after[k]};
        watcher w;
        ac_err err = {{0}};
        memset(&w, 0, sizeof w);
        ac_train_options o = {.config = &cfg, .train = &raw, .out_dir = dir, .stop = &w.stop,
                              .progress = watch, .progress_user = &w,
                              .after_step = poison_weights, .after_step_user = &p};
        int rc = ac_train(&o, &r, &err);
        ck_assert_int_eq(rc, -1);
        ck_assert_msg(strstr(err.msg, expect[k]) != NULL, "message: %s", err.msg);
        char intact[64];
        snprintf(intact, sizeof intact, "the checkpoint of step %ld is intact", ckpt_step[k]);
        ck_assert_msg(strstr(err.msg, intact) != NULL, "message: %s", err.msg);

        /* Checkpoint and best model are exactly those of step ckpt_step. */
        assert_file_equal(weights, &weights_before);
        assert_file_equal(moments, &moments_before);
        assert_file_equal(state_path, &state_before);
        assert_file_equal(best_path, &best_before);
        ac_model_dir after;
        load_dir(&after, ckpt);
        for (size_t i = 0; i < after.model.n_params; i++)
            ck_assert(isfinite(after.model.params[i]));
        ac_model_dir_free(&after);
        ac_trainer_state st;
        ck_assert_msg(ac_trainer_state_load(&st, state_path, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(st.step, ckpt_step[k]);
        /* ... and training resumes from it. */
        train_ok(&cfg, &raw, dir, 1, ckpt_step[k] + 2, 0, &r);
        ck_assert_int_eq(r.step, ckpt_step[k] + 2);

        free(weights);
        free(moments);
        free(state_path);
        free(best_path);
        free(ckpt);
        rm_rf(dir);
        free(dir);
    }
    ac_config_free(&cfg);
    ac_rawdata_free(&raw);
}
END_TEST

START_TEST(test_metrics_and_curves)
{
    ac_rawdata raw;
    read_tiny(&raw);
    ac_config cfg;
    tiny_config(&cfg);
    cfg.training.epochs = 2;
    cfg.training.eval_every = 3;
    char *dir = test_temp_dir("train");
    ac_train_result r;
    train_ok(&cfg, &raw, dir, 0, 0, 0, &r);
    ck_assert_int_eq(r.status, AC_TRAIN_FINISHED);
    ck_assert_int_eq(r.n_evals, 6); /* 3, 6, 9, 12, 15 and the last step, 16 */
    metrics_log log;
    read_metrics(dir, &log);
    ck_assert_int_eq(log.n, 6);
    ck_assert_int_eq(log.step[0], 3);
    ck_assert_int_eq(log.step[5], 16);
    for (int i = 0; i < log.n; i++)
        ck_assert(log.val_accuracy[i] >= 0 && log.val_accuracy[i] <= 1);

    char *svg_path = test_path(dir, AC_CURVES_FILE);
    char *svg = read_text(svg_path);
    ck_assert_msg(strncmp(svg, "<svg", 4) == 0, "training.svg starts with %.20s", svg);
    size_t n = strlen(svg);
    while (n > 0 && (svg[n - 1] == '\n' || svg[n - 1] == ' '))
        n--;
    ck_assert(n >= 6 && memcmp(svg + n - 6, "</svg>", 6) == 0);
    ck_assert_int_eq(count_substr(svg, "<svg"), 1);
    ck_assert_int_eq(count_substr(svg, "<g "), count_substr(svg, "</g>"));
    ck_assert_int_ge(count_substr(svg, "<path"), 3); /* train loss, val loss, val accuracy */
    ck_assert_ptr_nonnull(strstr(svg, "validation accuracy"));

    ac_model_dir best;
    load_dir(&best, dir);
    ck_assert(best.config.provenance.best_val_accuracy == r.best_val_accuracy);
    ck_assert_int_eq(best.config.n_labels, 2);
    ck_assert_int_eq(best.config.model.n_classes, 2);
    ck_assert_int_eq(best.config.model.vocab_size, best.vocab.size);
    ac_model_dir_free(&best);
    free(svg);
    free(svg_path);
    rm_rf(dir);
    free(dir);
    ac_config_free(&cfg);
    ac_rawdata_free(&raw);
}
END_TEST

/* metrics.jsonl lines from after the checkpoint (as a crash would leave
 * them) are dropped on resume, so no step appears twice. */
START_TEST(test_resume_truncates_metrics)
{
    ac_rawdata raw;
    read_tiny(&raw);
    ac_config cfg;
    tiny_config(&cfg);
    cfg.training.eval_every = 3;
    char *dir = test_temp_dir("train");
    ac_train_result r;
    train_ok(&cfg, &raw, dir, 0, 0, 7, &r);
    ck_assert_int_eq(r.status, AC_TRAIN_INTERRUPTED);
    ck_assert_int_eq(r.step, 7);
    char *path = test_path(dir, AC_METRICS_FILE);
    FILE *f = fopen(path, "a");
    ck_assert_ptr_nonnull(f);
    fputs("{\"step\": 9, \"epoch\": 1.125, \"train_loss\": 0.5, \"val_loss\": 0.5, "
          "\"val_accuracy\": 0.123456, \"lr\": 0.001, \"tokens_per_s\": 1, \"elapsed_s\": 1}\n",
          f);
    fclose(f);
    train_ok(&cfg, &raw, dir, 1, 12, 0, &r);
    ck_assert_int_eq(r.step, 12);
    metrics_log log;
    read_metrics(dir, &log); /* also asserts strictly increasing steps */
    ck_assert_int_eq(log.n, 4);
    long want[] = {3, 6, 9, 12};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(log.step[i], want[i]);
    ck_assert(log.val_accuracy[2] != 0.123456);
    free(path);
    rm_rf(dir);
    free(dir);
    ac_config_free(&cfg);
    ac_rawdata_free(&raw);
}
END_TEST

START_TEST(test_without_validation_and_with_val_file)
{
    ac_rawdata raw;
    read_tiny(&raw);
    ac_config cfg;
    tiny_config(&cfg);
    cfg.training.epochs = 1;
    cfg.training.val_split = 0;
    cfg.training.patience = 1;
    char *dir = test_temp_dir("train");
    ac_train_result r;
    train_ok(&cfg, &raw, dir, 0, 0, 0, &r);
    ck_assert_int_eq(r.status, AC_TRAIN_FINISHED);
    ck_assert_int_eq(r.step, 11); /* 42 rows / 4, rounded up */
    ck_assert(r.model_saved);
    ck_assert(r.best_val_accuracy < 0);
    metrics_log log;
    read_metrics(dir, &log);
    ck_assert_int_eq(log.n, 1);
    ck_assert(isnan(log.val_accuracy[0]));
    rm_rf(dir);

    /* A separate validation file (here the same rows). */
    char *dir2 = test_temp_dir("train");
    watcher w;
    ac_err err = {{0}};
    int rc = train_once(&cfg, &raw, &raw, dir2, 0, 0, 0, &w, &r, &err);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert(r.best_val_accuracy >= 0 && r.best_val_accuracy <= 1);
    ck_assert_int_eq(r.step, 11);
    rm_rf(dir2);
    free(dir);
    free(dir2);
    ac_config_free(&cfg);
    ac_rawdata_free(&raw);
}
END_TEST

/* ------------------------------------------------------------- CLI */

static const char *attnctl_binary(void)
{
    const char *env = getenv("ATTNCTL");
    const char *bin = env && *env ? env : "build/attnctl";
    return access(bin, X_OK) == 0 ? bin : NULL;
}

static int run_status(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_cli_end_to_end)
{
    const char *bin = attnctl_binary();
    if (!bin) {
        printf("SKIP test_cli_end_to_end: no attnctl binary (set ATTNCTL or build it)\n");
        return;
    }
    char *dir = test_temp_dir("train");
    char *out = test_path(dir, "model");
    char *cmd = NULL;
    ck_assert_int_ge(asprintf(&cmd,
                              "%s train " TINY_CSV " --out %s --epochs 2 --d-model 16 --heads 2 "
                              "--ff 32 --max-len 24 --batch-size 4 --threads 1 --quiet",
                              bin, out),
                     0);
    ck_assert_int_eq(run_status(cmd), 0);
    const char *files[] = {"config.json", "vocab.txt", "model.safetensors", "metrics.jsonl",
                           "training.svg", "checkpoint/trainer_state.json", "checkpoint/run.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *p = test_path(out, files[i]);
        ck_assert_msg(access(p, F_OK) == 0, "%s missing", p);
        free(p);
    }
    /* Training into a directory that holds a model is refused (runtime error). */
    char *again = NULL;
    ck_assert_int_ge(asprintf(&again, "%s 2>/dev/null", cmd), 0);
    ck_assert_int_eq(run_status(again), 1);
    free(again);
    free(cmd);
    /* Resuming a finished run is fine and does nothing. */
    ck_assert_int_ge(asprintf(&cmd, "%s train --resume %s --quiet", bin, out), 0);
    ck_assert_int_eq(run_status(cmd), 0);
    free(cmd);
    /* Usage errors exit 2. */
    ck_assert_int_ge(asprintf(&cmd, "%s train --bogus 2>/dev/null", bin), 0);
    ck_assert_int_eq(run_status(cmd), 2);
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "%s train " TINY_CSV " --out %s/x --lr -1 2>/dev/null", bin,
                              dir),
                     0);
    ck_assert_int_eq(run_status(cmd), 2);
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "%s train " TINY_CSV " --out %s/x --heads 3 2>/dev/null", bin,
                              dir),
                     0);
    ck_assert_int_eq(run_status(cmd), 2);
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "%s train --resume %s --lr 0.1 2>/dev/null", bin, out), 0);
    ck_assert_int_eq(run_status(cmd), 2);
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "%s nosuchcommand 2>/dev/null", bin), 0);
    ck_assert_int_eq(run_status(cmd), 2);
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "%s help train >/dev/null", bin), 0);
    ck_assert_int_eq(run_status(cmd), 0);
    free(cmd);
    /* A missing file is a runtime error. */
    ck_assert_int_ge(asprintf(&cmd, "%s train %s/none.csv --out %s/y 2>/dev/null", bin, dir, dir),
                     0);
    ck_assert_int_eq(run_status(cmd), 1);
    free(cmd);
    rm_rf(dir);
    free(out);
    free(dir);
}
END_TEST

/* ------------------------------------------------------------- pretraining */

#define SAMPLE_CSV "data/sample_train.csv"

/* A small pretraining setup: the sample reviews (CSV) and a plain-text file
 * of a few documents, one of them holding the word "zyzzyva" once. */
typedef struct {
    char *dir;       /* scratch directory */
    char *lines;     /* its plain-text file */
    const char *paths[2];
    ac_rawdata raw;
    run_kind kind;
    ac_config cfg;
} pretrain_setup;

static void pretrain_setup_make(pretrain_setup *p)
{
    p->dir = test_temp_dir("train");
    p->lines = test_path(p->dir, "extra.txt");
    FILE *f = fopen(p->lines, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 30; i++)
        fprintf(f, "line %d of the plain text file , the film was %s .\n", i,
                i == 17 ? "zyzzyva" : i % 2 ? "good" : "bad");
    ck_assert_int_eq(fclose(f), 0);
    p->paths[0] = SAMPLE_CSV;
    p->paths[1] = p->lines;
    ac_err err = {{0}};
    ck_assert_msg(ac_rawdata_read_texts(&p->raw, p->paths, 2, AC_TEXT_FORMAT_AUTO, NULL, &err) ==
                      0,
                  "%s", err.msg);
    ck_assert_int_eq(p->raw.n_rows, 630);
    p->kind = (run_kind){.objective = AC_OBJECTIVE_MASKED_LM, .text_paths = p->paths,
                         .n_text_paths = 2};
    tiny_config(&p->cfg);
    p->cfg.model.max_len = 32;
    p->cfg.training.batch_size = 16;
    p->cfg.training.epochs = 2;
    p->cfg.training.eval_every = 10;
    p->cfg.training.val_split = 0.1;
    p->cfg.training.crop_frac = 0.0;
    p->cfg.training.token_dropout = 0.0f;
    p->cfg.training.vocab_max = 300;
}

static void pretrain_setup_free(pretrain_setup *p)
{
    ac_rawdata_free(&p->raw);
    ac_config_free(&p->cfg);
    rm_rf(p->dir);
    free(p->lines);
    free(p->dir);
}

static void pretrain_ok(pretrain_setup *p, const char *dir, int resume, long max_steps,
                        long stop_at, ac_train_result *res)
{
    watcher w;
    ac_err err = {{0}};
    int rc = train_once_as(&p->kind, &p->cfg, &p->raw, NULL, dir, resume, max_steps, stop_at, &w,
                           res, &err);
    ck_assert_msg(rc == 0, "pretraining into %s (resume %d): %s", dir, resume, err.msg);
}

/* A pretraining run writes a masked-LM model: <mask> in a vocabulary built
 * from all the text (held-out rows and the plain-text file included), the
 * tied head's bias, masked-token figures that improve, its curves, and the
 * text files with their SHA-256 for --resume. */
START_TEST(test_pretrain_end_to_end)
{
    pretrain_setup p;
    pretrain_setup_make(&p);
    char *out = test_path(p.dir, "mlm");
    ac_train_result r;
    pretrain_ok(&p, out, 0, 0, 0, &r);
    ck_assert_int_eq(r.status, AC_TRAIN_FINISHED);
    ck_assert(r.best_val_accuracy > 0.0 && r.best_val_accuracy <= 1.0);

    ac_model_dir md;
    load_dir(&md, out);
    ck_assert_int_eq(md.config.model.objective, AC_OBJECTIVE_MASKED_LM);
    ck_assert_int_eq(md.config.model.n_classes, 0);
    ck_assert_int_eq(md.config.n_labels, 0);
    ck_assert_int_eq(md.vocab.mask_id, 2);
    ck_assert_int_gt(ac_vocab_lookup(&md.vocab, "zyzzyva", 7), 2);
    ck_assert_int_ge(ac_model_find_tensor(&md.model, "mlm.bias"), 0);
    ck_assert_int_lt(ac_model_find_tensor(&md.model, "head.weight"), 0);
    ck_assert(md.config.training.crop_frac == 0.0);
    ck_assert_ptr_nonnull(strstr(md.config.provenance.train_file, SAMPLE_CSV " + "));
    ck_assert_str_eq(md.config.provenance.train_sha256, ""); /* two files: see run.json */
    ac_model_dir_free(&md);

    metrics_log log;
    read_metrics(out, &log);
    ck_assert_int_eq(log.n, 8); /* 567 texts / 16 x 2 epochs = 72 steps: every 10 and the last */
    printf("pretraining the sample: held-out masked-token loss %.3f -> %.3f, accuracy %.3f -> "
           "%.3f\n",
           log.val_loss[0], log.val_loss[log.n - 1], log.val_accuracy[0],
           log.val_accuracy[log.n - 1]);
    /* 72 steps of a d-16 model: the loss falls clearly; the accuracy is still
     * about that of the most frequent words, so it is only checked for range. */
    ck_assert(log.val_loss[log.n - 1] < 0.95 * log.val_loss[0]);
    for (int i = 0; i < log.n; i++)
        ck_assert(log.val_accuracy[i] > 0.0 && log.val_accuracy[i] < 1.0);

    char *svg_path = test_path(out, AC_CURVES_FILE), *cal = test_path(out, AC_CALIBRATION_FILE);
    char *svg = read_text(svg_path);
    ck_assert_ptr_nonnull(strstr(svg, "Pretraining (masked LM)"));
    ck_assert_ptr_nonnull(strstr(svg, "masked-token accuracy"));
    ck_assert_msg(access(cal, F_OK) != 0, "a pretraining run has no calibration diagram");
    char *run_path = test_path(out, AC_CHECKPOINT_SUBDIR "/" AC_RUN_FILE);
    char *run = read_text(run_path);
    for (int i = 0; i < 2; i++) {
        char sha[65];
        ac_err err = {{0}};
        ck_assert_int_eq(ac_sha256_file(p.paths[i], sha, &err), 0);
        ck_assert_msg(strstr(run, sha) != NULL, "run.json lacks the SHA-256 of %s", p.paths[i]);
    }
    ac_train_sources src;
    ac_err err = {{0}};
    ck_assert_msg(ac_train_sources_load(out, &src, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(src.objective, AC_OBJECTIVE_MASKED_LM);
    ck_assert_int_eq(src.n_text_files, 2);
    ck_assert_ptr_nonnull(strstr(src.text_files[1], "extra.txt"));
    ac_train_sources_free(&src);
    free(svg);
    free(run);
    free(svg_path);
    free(cal);
    free(run_path);
    free(out);
    pretrain_setup_free(&p);
}
END_TEST

/* Interrupted and resumed = one run, bit for bit (weights, moments, state,
 * metrics); and 1 thread = 2 threads. */
/* A stop asked for while an evaluation is due or running does not wait for
 * it (under mpirun the processes have one second between SIGTERM and SIGKILL,
 * and an evaluation of IMDB's validation rows takes 2.4 s): the evaluation is
 * left, the checkpoint says it is pending, and the resumed run does it first,
 * so that it goes on bitwise as if never stopped. The stop comes with step 10,
 * where an evaluation is due: a classifier, one with weight averaging (its
 * average is swapped in for the evaluation), and a pretraining run. */
START_TEST(test_stop_during_evaluation_resumes_bitwise)
{
    ac_rawdata raw;
    ac_config cfg;
    pretrain_setup p;
    const run_kind *kind = NULL;
    if (_i == 2) {
        pretrain_setup_make(&p);
        kind = &p.kind;
        raw = p.raw;
        cfg = p.cfg;
    } else {
        read_tiny(&raw);
        tiny_config(&cfg);
        if (_i == 1)
            cfg.training.ema = 0.9f;
    }
    cfg.training.eval_every = 5;
    char *a = test_temp_dir("train"), *b = test_temp_dir("train");
    ac_train_result ra, rb;
    watcher w;
    ac_err err = {{0}};
    ck_assert_msg(train_once_as(kind, &cfg, &raw, NULL, a, 0, 13, 0, &w, &ra, &err) == 0, "%s",
                  err.msg);
    ck_assert_msg(train_once_as(kind, &cfg, &raw, NULL, b, 0, 13, 10, &w, &rb, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(rb.status, AC_TRAIN_INTERRUPTED);
    ck_assert_int_eq(rb.step, 10);
    ck_assert_int_eq(w.n_evals, 1); /* step 5 only: step 10's was left */
    char *ca = test_path(a, AC_CHECKPOINT_SUBDIR), *cb = test_path(b, AC_CHECKPOINT_SUBDIR);
    char *state_path = test_path(cb, "trainer_state.json");
    ac_trainer_state st;
    ck_assert_msg(ac_trainer_state_load(&st, state_path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st.step, 10);
    ck_assert_int_eq(st.eval_pending, 1);
    metrics_log lb;
    read_metrics(b, &lb);
    ck_assert_int_eq(lb.n, 1);
    ck_assert_int_eq(lb.step[0], 5);

    ck_assert_msg(train_once_as(kind, NULL, &raw, NULL, b, 1, 13, 0, &w, &rb, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(rb.status, AC_TRAIN_MAX_STEPS);
    ck_assert_int_eq(rb.step, 13);
    ck_assert_int_eq(w.n_evals, 2); /* step 10's first, then step 13's */
    ck_assert_msg(ac_trainer_state_load(&st, state_path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st.eval_pending, 0);
    assert_same_weights(ca, cb, 1);
    assert_same_weights(a, b, 0);
    assert_same_metrics(a, b, 3); /* steps 5, 10, 13 */
    ck_assert(ra.best_val_accuracy == rb.best_val_accuracy);
    free(state_path);
    free(ca);
    free(cb);
    rm_rf(a);
    rm_rf(b);
    free(a);
    free(b);
    if (_i == 2) {
        pretrain_setup_free(&p);
    } else {
        ac_config_free(&cfg);
        ac_rawdata_free(&raw);
    }
}
END_TEST

START_TEST(test_pretrain_resume_and_threads_bitwise)
{
    pretrain_setup p;
    pretrain_setup_make(&p);
    char *a = test_path(p.dir, "a"), *b = test_path(p.dir, "b"), *c = test_path(p.dir, "c");
    ac_train_result ra, rb, rc;
    omp_set_num_threads(2);
    pretrain_ok(&p, a, 0, 25, 0, &ra);
    ck_assert_int_eq(ra.status, AC_TRAIN_MAX_STEPS);
    pretrain_ok(&p, b, 0, 25, 13, &rb);
    ck_assert_int_eq(rb.status, AC_TRAIN_INTERRUPTED);
    ck_assert_int_eq(rb.step, 13);
    pretrain_ok(&p, b, 1, 25, 0, &rb);
    ck_assert_int_eq(rb.step, 25);
    omp_set_num_threads(1);
    pretrain_ok(&p, c, 0, 25, 0, &rc);
    omp_set_num_threads(2);
    char *ca = test_path(a, AC_CHECKPOINT_SUBDIR), *cb = test_path(b, AC_CHECKPOINT_SUBDIR),
         *cc = test_path(c, AC_CHECKPOINT_SUBDIR);
    assert_same_weights(ca, cb, 1);
    assert_same_weights(ca, cc, 1);
    assert_same_weights(a, b, 0);
    assert_same_metrics(a, b, -1);

    /* A resume checks its text files, and its kind of run. */
    watcher w;
    ac_err err = {{0}};
    FILE *f = fopen(p.lines, "a");
    ck_assert_ptr_nonnull(f);
    fputs("one more line\n", f);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(train_once_as(&p.kind, NULL, &p.raw, NULL, b, 1, 0, 0, &w, &rb, &err), -1);
    ck_assert_msg(strstr(err.msg, "extra.txt is not the file the run was started with"), "%s",
                  err.msg);
    run_kind one_file = p.kind;
    one_file.n_text_paths = 1;
    ck_assert_int_eq(train_once_as(&one_file, NULL, &p.raw, NULL, b, 1, 0, 0, &w, &rb, &err), -1);
    ck_assert_msg(strstr(err.msg, "started with 2 text file(s), not 1"), "%s", err.msg);
    ac_rawdata tiny;
    read_tiny(&tiny);
    ck_assert_int_eq(train_once(NULL, &tiny, NULL, b, 1, 0, 0, &w, &rb, &err), -1);
    ck_assert_msg(strstr(err.msg, "holds a pretraining run"), "%s", err.msg);
    ac_rawdata_free(&tiny);
    free(ca);
    free(cb);
    free(cc);
    free(a);
    free(b);
    free(c);
    pretrain_setup_free(&p);
}
END_TEST

static float tensor_value(const ac_model *m, const char *name, size_t i)
{
    int t = ac_model_find_tensor(m, name);
    ck_assert_msg(t >= 0, "no tensor %s", name);
    return m->params[m->table[t].offset + i];
}

/* A classifier started from a pretrained model has its vocabulary,
 * tokenizer and encoder (bit for bit, before any step moves it) and a new
 * head; options that contradict it are refused; a cls pooling needs a
 * <cls> pretrained in. */
START_TEST(test_finetune_from_pretrained)
{
    pretrain_setup p;
    pretrain_setup_make(&p);
    p.cfg.model.positions = AC_POS_LEARNED;
    char *mlm = test_path(p.dir, "mlm"), *ft = test_path(p.dir, "ft"), *ft2 = test_path(p.dir, "ft2");
    ac_train_result r;
    pretrain_ok(&p, mlm, 0, 12, 0, &r);

    ac_rawdata tiny;
    read_tiny(&tiny);
    ac_config cfg;
    tiny_config(&cfg);
    cfg.model.max_len = 32;
    cfg.model.d_model = 32; /* the pretrained model's is 16 */
    run_kind from = {.objective = AC_OBJECTIVE_CLASSIFICATION, .init_dir = mlm};
    watcher w;
    ac_err err = {{0}};
    ck_assert_int_eq(train_once_as(&from, &cfg, &tiny, NULL, ft, 0, 1, 0, &w, &r, &err), -1);
    ck_assert_msg(strstr(err.msg, "model.d_model: 32, but the model in"), "%s", err.msg);
    ck_assert_int_eq(ac_train_init_config(&cfg, mlm, &err), 0);
    ck_assert_int_eq(cfg.model.d_model, 16);
    ck_assert_int_eq(cfg.model.positions, AC_POS_LEARNED);
    ck_assert_int_eq(cfg.model.objective, AC_OBJECTIVE_CLASSIFICATION);
    cfg.training.optim.lr = 1e-30f; /* one step that moves nothing: the start is visible */
    cfg.training.ema = 0;           /* bitwise: not through the average's rounding */
    ck_assert_msg(train_once_as(&from, &cfg, &tiny, NULL, ft, 0, 1, 0, &w, &r, &err) == 0, "%s",
                  err.msg);

    ac_model_dir pre, fine;
    load_dir(&pre, mlm);
    load_dir(&fine, ft);
    ck_assert_int_eq(fine.config.model.objective, AC_OBJECTIVE_CLASSIFICATION);
    ck_assert_int_eq(fine.config.model.n_classes, 2);
    ck_assert_str_eq(fine.config.provenance.init_model, mlm);
    ck_assert(memcmp(&fine.config.tokenizer, &pre.config.tokenizer,
                     sizeof fine.config.tokenizer) == 0);
    ck_assert_int_eq(fine.vocab.size, pre.vocab.size);
    for (int i = 0; i < pre.vocab.size; i++)
        ck_assert_str_eq(fine.vocab.tokens[i], pre.vocab.tokens[i]);
    int head = 0;
    for (int i = 0; i < fine.model.n_tensors; i++) {
        const ac_param_info *t = &fine.model.table[i];
        if (strncmp(t->name, "head.", 5) == 0) {
            head++;
            continue;
        }
        int j = ac_model_find_tensor(&pre.model, t->name);
        ck_assert_int_ge(j, 0);
        ck_assert_msg(memcmp(fine.model.params + t->offset,
                             pre.model.params + pre.model.table[j].offset,
                             t->numel * sizeof(float)) == 0,
                      "%s is not the pretrained one", t->name);
    }
    ck_assert_int_eq(head, 3); /* head.weight, head.bias and the wide path's head.wide.weight */
    ck_assert(tensor_value(&fine.model, "head.weight", 3) != 0.0f); /* initialised, new */
    ac_model_dir_free(&fine);

    /* A real fine-tune moves the encoder away from it. */
    cfg.training.optim.lr = 3e-3f;
    ck_assert_msg(train_once_as(&from, &cfg, &tiny, NULL, ft2, 0, 0, 0, &w, &r, &err) == 0, "%s",
                  err.msg);
    load_dir(&fine, ft2);
    ck_assert(tensor_value(&fine.model, "layers.0.ffn.fc1.weight", 5) !=
              tensor_value(&pre.model, "layers.0.ffn.fc1.weight", 5));
    ac_model_dir_free(&fine);
    ac_model_dir_free(&pre);

    /* Resuming is not starting from a model. */
    ck_assert_int_eq(train_once_as(&from, NULL, &tiny, NULL, ft2, 1, 0, 0, &w, &r, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "fresh classifier run"));

    /* cls pooling: refused without <cls>; pretrained with --pooling cls it works. */
    cfg.model.pooling = AC_POOL_CLS;
    ck_assert_int_eq(ac_train_init_config(&cfg, mlm, &err), -1);
    ck_assert_msg(strstr(err.msg, "vocab.txt has none"), "%s", err.msg);
    char *mlm_cls = test_path(p.dir, "mlm_cls"), *ft_cls = test_path(p.dir, "ft_cls");
    p.cfg.model.pooling = AC_POOL_CLS;
    pretrain_ok(&p, mlm_cls, 0, 5, 0, &r);
    load_dir(&pre, mlm_cls);
    ck_assert(pre.vocab.with_cls);
    ck_assert_int_eq(pre.vocab.mask_id, 3);
    ac_model_dir_free(&pre);
    from.init_dir = mlm_cls;
    ck_assert_int_eq(ac_train_init_config(&cfg, mlm_cls, &err), 0);
    ck_assert_msg(train_once_as(&from, &cfg, &tiny, NULL, ft_cls, 0, 3, 0, &w, &r, &err) == 0,
                  "%s", err.msg);
    free(mlm_cls);
    free(ft_cls);
    ac_config_free(&cfg);
    ac_rawdata_free(&tiny);
    free(mlm);
    free(ft);
    free(ft2);
    pretrain_setup_free(&p);
}
END_TEST

/* Runs cmd with stderr into a file; returns the exit status and the stderr text. */
static int run_capture(const char *cmd, char **err_text)
{
    char *dir = test_temp_dir("train");
    char *path = test_path(dir, "stderr");
    char *full = NULL;
    ck_assert_int_ge(asprintf(&full, "%s 2>%s >/dev/null", cmd, path), 0);
    int st = run_status(full);
    *err_text = read_text(path);
    free(full);
    rm_rf(dir);
    free(path);
    free(dir);
    return st;
}

/* Expects exit status `want` and `needle` in stderr. */
static void expect_cli(const char *cmd, int want, const char *needle)
{
    char *err = NULL;
    int st = run_capture(cmd, &err);
    ck_assert_msg(st == want, "%s: exit %d, want %d; stderr: %s", cmd, st, want, err);
    ck_assert_msg(!needle || strstr(err, needle), "%s: \"%s\" not in stderr: %s", cmd, needle, err);
    free(err);
}

/* expect_cli of a printf-formatted command that must exit 0. */
static void expect_cli_ok(const char *needle, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void expect_cli_ok(const char *needle, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *cmd = NULL;
    ck_assert_int_ge(vasprintf(&cmd, fmt, ap), 0);
    va_end(ap);
    expect_cli(cmd, 0, needle);
    free(cmd);
}

static int exists_in(const char *dir, const char *name)
{
    char *p = test_path(dir, name);
    int yes = access(p, F_OK) == 0;
    free(p);
    return yes;
}

/* The checkpoint's weights, AdamW moments and average ("ema-*"), and with
 * several members their start and kept weights ("member-*"): all there or
 * all gone; its record of the run stays either way, and the model once there
 * is one (a run of members has it when the last member ends). */
static void assert_checkpoint_state(const char *out, int want_kept, int members, int finished)
{
    const char *state[] = {"checkpoint/model.safetensors", "checkpoint/optimizer.safetensors"};
    for (int i = 0; i < 2; i++)
        ck_assert_msg(exists_in(out, state[i]) == want_kept, "%s/%s: want %s", out, state[i],
                      want_kept ? "kept" : "removed");
    char *ckpt = test_path(out, AC_CHECKPOINT_SUBDIR);
    DIR *d = opendir(ckpt);
    ck_assert_ptr_nonnull(d);
    int n_ema = 0, n_member = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        n_ema += strncmp(e->d_name, "ema-", 4) == 0;
        n_member += strncmp(e->d_name, "member-", 7) == 0;
    }
    closedir(d);
    free(ckpt);
    ck_assert_int_eq(n_ema, want_kept);
    if (!want_kept || members == 1)
        ck_assert_int_eq(n_member, 0);
    else if (finished)
        ck_assert_int_eq(n_member, members + 1); /* the start and every member */
    else
        ck_assert_int_ge(n_member, 1);
    const char *record[] = {"checkpoint/run.json", "checkpoint/trainer_state.json",
                            "checkpoint/config.json", "checkpoint/vocab.txt"};
    for (int i = 0; i < 4; i++)
        ck_assert_msg(exists_in(out, record[i]), "%s/%s missing", out, record[i]);
    ck_assert_int_eq(exists_in(out, "model.safetensors"), finished || members == 1);
}

/* A run that ends (all epochs, or stopped early) drops the checkpoint's
 * weights, moments and average, which nothing can continue from (about 200
 * MB beside the default's 42 MB model); --keep-checkpoint keeps them; a run
 * stopped by --max-steps keeps them to be resumed; resuming a finished run
 * does nothing either way, and drops nothing it kept. The same for one model
 * and for the mean of members (_i: --members 1, 2). */
START_TEST(test_cli_finished_run_drops_its_state)
{
    const char *bin = attnctl_binary();
    if (!bin) {
        printf("SKIP test_cli_finished_run_drops_its_state: no attnctl binary\n");
        return;
    }
    const int members = _i;
    char *dir = test_temp_dir("train");
    char shape[256];
    snprintf(shape, sizeof shape,
             "--d-model 16 --heads 2 --ff 32 --max-len 24 --batch-size 4 --threads 1 "
             "--ema 0.9 --refit 0 --quiet --members %d",
             members);
    char *out = test_path(dir, "dropped"), *kept = test_path(dir, "kept"), *part = test_path(dir, "part"),
         *early = test_path(dir, "early");
    expect_cli_ok(NULL, "%s train " TINY_CSV " --out %s --epochs 2 %s", bin, out, shape);
    assert_checkpoint_state(out, 0, members, 1);
    expect_cli_ok("nothing to resume", "%s train --resume %s", bin, out);

    expect_cli_ok(NULL, "%s train " TINY_CSV " --out %s --epochs 2 %s --keep-checkpoint", bin, kept,
                  shape);
    assert_checkpoint_state(kept, 1, members, 1);
    expect_cli_ok(NULL, "%s train --resume %s --quiet", bin, kept);
    assert_checkpoint_state(kept, 1, members, 1);

    expect_cli_ok(NULL, "%s train " TINY_CSV " --out %s --epochs 2 %s --max-steps 3", bin, part,
                  shape);
    assert_checkpoint_state(part, 1, members, 0);
    expect_cli_ok(NULL, "%s train --resume %s --quiet", bin, part);
    assert_checkpoint_state(part, 0, members, 1);
    assert_same_weights(out, part, 0); /* the same run, dropped state or not */

    expect_cli_ok(NULL, "%s train " TINY_CSV " --out %s --epochs 40 --patience 1 --eval-every 2 %s",
                  bin, early, shape);
    ac_trainer_state st;
    ac_err err = {{0}};
    char *state_path = test_path(early, "checkpoint/trainer_state.json");
    ck_assert_msg(ac_trainer_state_load(&st, state_path, &err) == 0, "%s", err.msg);
    ck_assert_msg(st.epoch < 40 && st.bad_evals >= 1, "not stopped early: epoch %d", st.epoch);
    ck_assert_int_eq(st.member, members > 1 ? members : 0); /* with members: the average made */
    free(state_path);
    assert_checkpoint_state(early, 0, members, 1);
    expect_cli_ok("nothing to resume", "%s train --resume %s", bin, early);
    free(out);
    free(kept);
    free(part);
    free(early);
    rm_rf(dir);
    free(dir);
}
END_TEST

/* The begin line counts one epoch as "1 epoch" (it said "1 epochs"). */
START_TEST(test_cli_one_epoch_is_singular)
{
    const char *bin = attnctl_binary();
    if (!bin) {
        printf("SKIP test_cli_one_epoch_is_singular: no attnctl binary\n");
        return;
    }
    char *dir = test_temp_dir("train");
    char *out = test_path(dir, "one"), *two = test_path(dir, "two");
    const char *shape = "--d-model 16 --heads 2 --ff 32 --max-len 24 --batch-size 4 --threads 1";
    expect_cli_ok("per epoch x 1 epoch)", "%s train " TINY_CSV " --out %s --epochs 1 %s", bin, out,
                  shape);
    expect_cli_ok("per epoch x 2 epochs)", "%s train " TINY_CSV " --out %s --epochs 2 %s", bin, two,
                  shape);
    free(out);
    free(two);
    rm_rf(dir);
    free(dir);
}
END_TEST

/* config.json without its date: what two runs of the same settings share. */
static char *config_without_date(const char *dir)
{
    char *path = test_path(dir, "config.json");
    char *text = read_text(path);
    char *date = strstr(text, "\"date\"");
    ck_assert_msg(date != NULL, "%s has no date", path);
    char *line_end = strchr(date, '\n');
    ck_assert_ptr_nonnull(line_end);
    memmove(date, line_end + 1, strlen(line_end + 1) + 1);
    free(path);
    return text;
}

/* Two runs wrote the same model: the same weights and config.json. */
static void expect_same_model(const char *a, const char *b)
{
    char *pa = test_path(a, "model.safetensors"), *pb = test_path(b, "model.safetensors");
    size_t la, lb;
    char *da = read_bytes(pa, &la), *db = read_bytes(pb, &lb);
    ck_assert_msg(la == lb && memcmp(da, db, la) == 0, "%s and %s differ", pa, pb);
    char *ca = config_without_date(a), *cb = config_without_date(b);
    ck_assert_msg(strcmp(ca, cb) == 0, "config.json of %s and %s differ:\n%s\n%s", a, b, ca, cb);
    free(ca);
    free(cb);
    free(da);
    free(db);
    free(pa);
    free(pb);
}

/* An option given as "auto" is its key's "auto" in config.json: the same
 * run, model and config.json as leaving the option out, for train and
 * pretrain. Only the keys that take "auto" take it on the command line,
 * and a bad value's message says so. */
START_TEST(test_cli_auto_is_leaving_the_option_out)
{
    const char *bin = attnctl_binary();
    if (!bin) {
        printf("SKIP test_cli_auto_is_leaving_the_option_out: no attnctl binary\n");
        return;
    }
    char *dir = test_temp_dir("train");
    char *left = test_path(dir, "left"), *given = test_path(dir, "given");
    const char *shape = "--d-model 16 --heads 2 --ff 32 --max-len 24 --batch-size 4 --threads 1 "
                        "--wide-buckets 4096 --quiet";
    const char *autos = "--epochs auto --ema auto --members auto --wide-nb auto --min-count auto "
                        "--wide auto";
    expect_cli_ok(NULL, "%s train " TINY_CSV " --out %s %s", bin, left, shape);
    expect_cli_ok(NULL, "%s train " TINY_CSV " --out %s %s %s", bin, given, shape, autos);
    expect_same_model(left, given);
    char *p_left = test_path(dir, "p_left"), *p_given = test_path(dir, "p_given");
    const char *p_shape = "--d-model 16 --heads 2 --ff 32 --max-len 24 --batch-size 8 --threads 1 "
                          "--vocab-size 200 --eval-every 5 --quiet";
    expect_cli_ok(NULL, "%s pretrain " TINY_CSV " --out %s %s", bin, p_left, p_shape);
    expect_cli_ok(NULL, "%s pretrain " TINY_CSV " --out %s %s --epochs auto --ema auto "
                        "--min-count auto",
                  bin, p_given, p_shape);
    expect_same_model(p_left, p_given);
    static const struct {
        const char *args, *needle;
    } usage[] = {
        {"--epochs many", "--epochs: invalid value 'many' (expected an integer from 1 to "
                          "1000000, or auto)"},
        {"--ema 1", "--ema: invalid value '1' (expected a number with 0 <= X < 1, or auto)"},
        {"--lr auto", "--lr: invalid value 'auto' (expected a number with 0 < X <= 10)"},
        {"--pooling auto", "--pooling: invalid value 'auto' (expected max, mean or cls)"},
    };
    for (size_t i = 0; i < sizeof usage / sizeof usage[0]; i++) {
        char *cmd = NULL;
        ck_assert_int_ge(asprintf(&cmd, "%s train " TINY_CSV " --out %s/never %s", bin, dir,
                                  usage[i].args),
                         0);
        expect_cli(cmd, 2, usage[i].needle);
        free(cmd);
    }
    free(p_left);
    free(p_given);
    free(left);
    free(given);
    rm_rf(dir);
    free(dir);
}
END_TEST

/* The float tensors of a weights file, in the model's layout. */
static float *load_member_weights(const char *dir, const char *name, const ac_model *m)
{
    char *ckpt = test_path(dir, AC_CHECKPOINT_SUBDIR);
    char *path = test_path(ckpt, name);
    ac_safetensors st;
    ac_err err = {{0}};
    ck_assert_msg(ac_st_load(&st, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st.n, m->n_tensors);
    float *w = malloc(m->n_params * sizeof *w);
    for (int i = 0; i < m->n_tensors; i++) {
        const ac_st_tensor *t = ac_st_find(&st, m->table[i].name);
        ck_assert_msg(t != NULL, "%s: no %s", path, m->table[i].name);
        memcpy(w + m->table[i].offset, ac_st_f32(&st, t), m->table[i].numel * sizeof *w);
    }
    ac_st_free(&st);
    free(path);
    free(ckpt);
    return w;
}

/* training.members 3: the model is the mean of three members trained from
 * the same start (the first member is the run of one model, the others
 * differ from it), summed in double in member order; the log says whose
 * each evaluation is and ends with the average's; a run stopped inside a
 * member or at a member's last step resumes to the same bits. */
/* A run of members whose mean reads below every member keeps the best member
 * instead (the course's max-pooled model at a high learning rate: its
 * members leave their shared start, and on these seeds the mean falls
 * below both). Every run: the model reads at least its lowest member. */
START_TEST(test_cli_mean_below_every_member_keeps_the_best)
{
    const char *bin = attnctl_binary();
    if (!bin) {
        printf("SKIP test_cli_mean_below_every_member_keeps_the_best: no attnctl binary\n");
        return;
    }
    char *dir = test_temp_dir("train");
    const int seeds[] = {12, 13, 16};
    int kept_any = 0;
    for (int k = 0; k < 3; k++) {
        char name[32];
        snprintf(name, sizeof name, "s%d", seeds[k]);
        char *out = test_path(dir, name);
        expect_cli_ok(NULL,
                      "%s train " SAMPLE_CSV " --out %s --config models/seed.json --max-len 64 "
                      "--batch-size 16 --members 2 --epochs 3 --lr 0.01 --threads 1 --seed %d "
                      "--keep-checkpoint --quiet",
                      bin, out, seeds[k]);
        char *log_path = test_path(out, AC_METRICS_FILE);
        char *log = read_text(log_path);
        /* each member's best, and the model's figure (the last line) */
        double best[2] = {-1, -1};
        for (const char *line = log; *line; line = strchr(line, '\n') + 1) {
            cJSON *obj = cJSON_Parse(line);
            const cJSON *member = cJSON_GetObjectItem(obj, "member");
            double acc = cJSON_GetNumberValue(cJSON_GetObjectItem(obj, "val_accuracy"));
            if (cJSON_IsNumber(member) && acc > best[member->valueint - 1])
                best[member->valueint - 1] = acc;
            cJSON_Delete(obj);
        }
        cJSON *last = cJSON_Parse(strrchr(log, '{'));
        ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(last, "soup")));
        double model_acc = cJSON_GetNumberValue(cJSON_GetObjectItem(last, "val_accuracy"));
        double lowest = best[0] < best[1] ? best[0] : best[1];
        ck_assert_msg(model_acc >= lowest, "seed %d: the model %.4f, the members %.4f and %.4f",
                      seeds[k], model_acc, best[0], best[1]);
        const cJSON *kept = cJSON_GetObjectItem(last, "kept_member");
        if (kept) {
            kept_any = 1;
            int j = kept->valueint;
            double mean = cJSON_GetNumberValue(cJSON_GetObjectItem(last, "mean_val_accuracy"));
            ck_assert_msg(mean < lowest && best[j - 1] >= best[2 - j] && model_acc == best[j - 1],
                          "seed %d: kept member %d (%.4f), mean %.4f, members %.4f %.4f", seeds[k],
                          j, model_acc, mean, best[0], best[1]);
            ac_model_dir md;
            load_dir(&md, out);
            char member_file[32];
            snprintf(member_file, sizeof member_file, "member-%d.safetensors", j);
            float *w = load_member_weights(out, member_file, &md.model);
            ck_assert_msg(memcmp(w, md.model.params, md.model.n_params * sizeof *w) == 0,
                          "seed %d: the model is not member %d's weights", seeds[k], j);
            free(w);
            ac_model_dir_free(&md);
        }
        cJSON_Delete(last);
        free(log);
        free(log_path);
        free(out);
    }
    ck_assert_msg(kept_any, "no seed gave a mean below both members: pick other seeds");
    rm_rf(dir);
    free(dir);
}
END_TEST

/* The average stays unless it reads below every member on validation; then
 * the best member (the first of equals) is the model. */
START_TEST(test_pick_model_keeps_the_mean_unless_below_every_member)
{
    const double three[] = {0.84, 0.83, 0.82};
    ck_assert_int_eq(trainer_pick_model(0.90, three, 3), -1);
    ck_assert_int_eq(trainer_pick_model(0.82, three, 3), -1); /* level with the lowest */
    ck_assert_int_eq(trainer_pick_model(0.8299, three, 3), -1);
    ck_assert_int_eq(trainer_pick_model(0.79, three, 3), 0);
    const double later_best[] = {0.80, 0.85, 0.85};
    ck_assert_int_eq(trainer_pick_model(0.70, later_best, 3), 1);
    ck_assert_int_eq(trainer_pick_model(NAN, later_best, 3), -1); /* nothing to compare */
}
END_TEST

START_TEST(test_members)
{
    ac_rawdata raw;
    read_tiny(&raw);
    ac_config cfg;
    tiny_config(&cfg);
    cfg.training.ema = 0.9f; /* a member keeps its average: that is what is averaged */
    /* the saved model is then the members' mean itself (NBSVM would be added to it) */
    cfg.training.nbsvm = 0.0f;
    char *one = test_temp_dir("train"), *a = test_temp_dir("train"), *b = test_temp_dir("train"), *c = test_temp_dir("train");
    ac_train_result r1, ra, rb, rc;
    ac_err err = {{0}};
    watcher w;
    ac_train_options o = {.config = &cfg, .train = &raw, .out_dir = one};
    ck_assert_msg(ac_train(&o, &r1, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r1.members, 1);

    cfg.training.members = 3;
    ck_assert_msg(train_once(&cfg, &raw, NULL, a, 0, 0, 0, &w, &ra, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(ra.status, AC_TRAIN_FINISHED);
    ck_assert_int_eq(ra.members, 3);
    ck_assert_int_eq(ra.total_steps, 3 * 24);
    ck_assert_int_eq(ra.step, 3 * 24);
    ck_assert_int_eq(w.n_evals, 3 * 3 + 1); /* an evaluation an epoch, then the average's */
    ck_assert_int_eq(w.n_begin, 1);

    ac_model_dir avg, single;
    load_dir(&avg, a);
    load_dir(&single, one);
    const ac_model *m = &avg.model;
    ck_assert_int_eq(avg.config.training.members, 3);
    ck_assert(avg.config.provenance.best_val_accuracy == ra.best_val_accuracy);
    float *member[3];
    const char *names[] = {"member-1.safetensors", "member-2.safetensors", "member-3.safetensors"};
    for (int j = 0; j < 3; j++)
        member[j] = load_member_weights(a, names[j], m);
    ck_assert_msg(memcmp(member[0], single.model.params, m->n_params * sizeof(float)) == 0,
                  "member 1 is not the run of one model");
    ck_assert(memcmp(member[1], member[0], m->n_params * sizeof(float)) != 0);
    ck_assert(memcmp(member[2], member[1], m->n_params * sizeof(float)) != 0);
    for (size_t i = 0; i < m->n_params; i++) {
        float want = (float)(((double)member[0][i] + member[1][i] + member[2][i]) / 3);
        ck_assert_msg(m->params[i] == want, "weight %zu: %g, the members' mean %g", i,
                      (double)m->params[i], (double)want);
    }
    /* the state says the average is made; the log, whose each line is */
    ac_trainer_state st;
    char *state_path = test_path(a, AC_CHECKPOINT_SUBDIR "/trainer_state.json");
    ck_assert_msg(ac_trainer_state_load(&st, state_path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st.member, 3);
    ck_assert_int_eq(st.steps_before, 2 * 24);
    ck_assert_int_eq(ac_train_state_ended(&cfg.training, &st), AC_TRAIN_FINISHED);
    char *log_path = test_path(a, AC_METRICS_FILE);
    char *log = read_text(log_path);
    ck_assert_int_eq(count_substr(log, "\"member\": 1}"), 3);
    ck_assert_int_eq(count_substr(log, "\"member\": 3}"), 3);
    ck_assert_int_eq(count_substr(log, "\"soup\": true}"), 1);
    ck_assert_ptr_nonnull(strstr(log, "\"step\": 72,"));
    ck_assert_int_eq(log[strlen(log) - 2], '}');
    ck_assert_ptr_nonnull(strstr(strrchr(log, '{'), "\"soup\": true"));

    /* stopped inside member 2, and at member 1's last step: the same bits */
    const char *stopped[] = {b, c};
    const long stop_at[] = {24 + 7, 24};
    ac_train_result *rs[] = {&rb, &rc};
    for (int k = 0; k < 2; k++) {
        ck_assert(train_once(&cfg, &raw, NULL, stopped[k], 0, 0, stop_at[k], &w, rs[k], &err) == 0);
        ck_assert_int_eq(rs[k]->status, AC_TRAIN_INTERRUPTED);
        ck_assert_int_eq(rs[k]->step, stop_at[k]);
        ck_assert(!exists_in(stopped[k], "model.safetensors")); /* none before the average */
        ck_assert_msg(train_once(&cfg, &raw, NULL, stopped[k], 1, 0, 0, &w, rs[k], &err) == 0,
                      "%s", err.msg);
        ck_assert_int_eq(rs[k]->status, AC_TRAIN_FINISHED);
        assert_same_weights(a, stopped[k], 0);
        char *other_path = test_path(stopped[k], AC_METRICS_FILE);
        char *other = read_text(other_path);
        /* the average's evaluation, up to its timings */
        char *mine = strrchr(log, '{'), *theirs = strrchr(other, '{');
        size_t figures = (size_t)(strstr(mine, ", \"lr\"") - mine);
        ck_assert_msg(strncmp(mine, theirs, figures) == 0, "%s\n%s", mine, theirs);
        free(other);
        free(other_path);
    }
    /* a finished run resumed does nothing */
    ck_assert(train_once(&cfg, &raw, NULL, a, 1, 0, 0, &w, &ra, &err) == 0);
    ck_assert_int_eq(ra.status, AC_TRAIN_FINISHED);
    ck_assert_int_eq(w.n_steps, 0);
    ck_assert_int_eq(w.n_evals, 0);
    for (int j = 0; j < 3; j++)
        free(member[j]);
    free(log);
    free(log_path);
    free(state_path);
    ac_model_dir_free(&avg);
    ac_model_dir_free(&single);
    ac_config_free(&cfg);
    ac_rawdata_free(&raw);
    rm_rf(one);
    rm_rf(a);
    rm_rf(b);
    rm_rf(c);
    free(one);
    free(a);
    free(b);
    free(c);
}
END_TEST

/* Too few rows a class (here for a validation split too): the error names
 * the training file (it once named only the split). */
START_TEST(test_cli_too_few_rows_names_the_file)
{
    const char *bin = attnctl_binary();
    if (!bin) {
        printf("SKIP test_cli_too_few_rows_names_the_file: no attnctl binary\n");
        return;
    }
    char *dir = test_temp_dir("train");
    char *csv = test_path(dir, "two_rows.csv"), *out = test_path(dir, "m"), *cmd = NULL;
    FILE *f = fopen(csv, "w");
    ck_assert_ptr_nonnull(f);
    fputs("review,sentiment\na fine film,positive\na dull film,negative\n", f);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_ge(asprintf(&cmd, "%s train %s --out %s --quiet", bin, csv, out), 0);
    char *want = NULL;
    ck_assert_int_ge(asprintf(&want, "%s: 2 different labels in 2 rows; a class needs many rows",
                              csv), 0);
    expect_cli(cmd, 1, want);
    ck_assert_int_ne(access(out, F_OK), 0); /* nothing written */
    free(want);
    free(cmd);
    free(csv);
    free(out);
    rm_rf(dir);
    free(dir);
}
END_TEST

/* The validation rows choose the kept model, so --resume checks them as it
 * checks the training file (a different --val-file was taken in silence). */
START_TEST(test_cli_resume_checks_val_file)
{
    const char *bin = attnctl_binary();
    if (!bin) {
        printf("SKIP test_cli_resume_checks_val_file: no attnctl binary\n");
        return;
    }
    char *dir = test_temp_dir("train"), *split = test_path(dir, "split"),
         *given = test_path(dir, "given"), *val = test_path(dir, "val.csv");
    size_t len;
    char *rows = test_slurp(TINY_CSV, &len);
    test_write_file(val, rows);
#define TINY_RUN "--epochs 2 --d-model 16 --heads 2 --ff 32 --max-len 24 --batch-size 4 " \
                 "--threads 1 --max-steps 2 --quiet"
    expect_cli_ok(NULL, "%s train " TINY_CSV " --out %s " TINY_RUN, bin, split);
    char *cmd = NULL;
    ck_assert_int_ge(asprintf(&cmd, "%s train --resume %s --val-file %s", bin, split, val), 0);
    expect_cli(cmd, 2, "holds out a share of its training file");
    free(cmd);
    expect_cli_ok(NULL, "%s train " TINY_CSV " --val-file %s --out %s " TINY_RUN, bin, val, given);
    /* a row less: not the same file */
    char *cut = strdup(rows);
    *strrchr(cut, '\n') = '\0';
    *(strrchr(cut, '\n') + 1) = '\0';
    test_write_file(val, cut);
    ck_assert_int_ge(asprintf(&cmd, "%s train --resume %s --quiet", bin, given), 0);
    expect_cli(cmd, 1, "is not the validation file the run was started with");
    test_write_file(val, rows);
    expect_cli(cmd, 0, NULL);
    free(cmd);
    /* a hand-edited member number past the run's members was taken (and
     * gave another model) */
    char *state = test_path(split, "checkpoint/trainer_state.json");
    char *state_text = test_slurp(state, &len);
    char *member = strstr(state_text, "\"member\": 0");
    ck_assert_ptr_nonnull(member);
    member[10] = '7';
    test_write_file(state, state_text);
    free(state_text);
    ck_assert_int_ge(asprintf(&cmd, "%s train --resume %s", bin, split), 0);
    expect_cli(cmd, 1, "member 7, best step");
    free(cmd);
    /* a run that ended before its first checkpoint was complete (run.json
     * alone) says so, not "checkpoint/config.json: cannot open" */
    ck_assert_int_eq(unlink(state), 0);
    free(state);
    ck_assert_int_ge(asprintf(&cmd, "%s train --resume %s", bin, split), 0);
    expect_cli(cmd, 1, "holds no resumable checkpoint");
    free(cmd);
#undef TINY_RUN
    free(cut);
    free(rows);
    rm_rf(dir);
    free(val);
    free(given);
    free(split);
    free(dir);
}
END_TEST

/* The commands: pretrain, fine-tune with --init, eval/predict/inspect on
 * both, usage errors, corrupt input, and pretrain --resume through the CLI. */
START_TEST(test_cli_pretrain_and_init)
{
    const char *bin = attnctl_binary();
    if (!bin) {
        printf("SKIP test_cli_pretrain_and_init: no attnctl binary (set ATTNCTL or build it)\n");
        return;
    }
    char *dir = test_temp_dir("train");
    char *lines = test_path(dir, "docs.txt"), *mlm = test_path(dir, "mlm"), *ft = test_path(dir, "ft");
    FILE *f = fopen(lines, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 40; i++)
        fprintf(f, "document %d says the movie was %s and the plot %s .\n", i,
                i % 3 ? "great" : "dull", i % 2 ? "worked" : "failed");
    ck_assert_int_eq(fclose(f), 0);
    const char *shape = "--d-model 16 --heads 2 --ff 32 --max-len 24 --batch-size 8 --threads 1 "
                        "--min-count 1 --vocab-size 200 --ngrams 2 --ngram-buckets 97";
    char *cmd = NULL;
    ck_assert_int_ge(asprintf(&cmd, "%s pretrain %s " TINY_CSV " --out %s %s --epochs 2 --quiet",
                              bin, lines, mlm, shape),
                     0);
    expect_cli(cmd, 0, NULL);
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "%s eval --model %s " TINY_CSV, bin, mlm), 0);
    expect_cli(cmd, 1, "is a pretrained encoder (masked_lm) without a classifier");
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "echo 'a good movie' | %s predict --model %s", bin, mlm), 0);
    expect_cli(cmd, 1, "fine-tune it first: attnctl train --init");
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "%s inspect --model %s 'the movie was great' --format text "
                                    "2>&1 | grep -q 'pretrained encoder (masked LM)'",
                              bin, mlm),
                     0);
    ck_assert_int_eq(run_status(cmd), 0);
    free(cmd);

    /* options that contradict the pretrained model: usage errors */
    static const char *const contradicting[] = {
        "--d-model 32", "--layers 2", "--heads 4", "--ff 64", "--vocab-size 150",
        "--max-len 30", "--positions sinusoidal", "--ngrams 3", "--ngram-buckets 50",
        "--truncation tail",
    };
    for (size_t i = 0; i < sizeof contradicting / sizeof contradicting[0]; i++) {
        ck_assert_int_ge(asprintf(&cmd, "%s train --init %s " TINY_CSV " --out %s/bad %s", bin,
                                  mlm, dir, contradicting[i]),
                         0);
        expect_cli(cmd, 2, "contradicts the model in");
        free(cmd);
    }
    ck_assert_int_ge(asprintf(&cmd, "%s train --init %s " TINY_CSV " --out %s/bad --min-count 2",
                              bin, mlm, dir),
                     0);
    expect_cli(cmd, 2, "--min-count cannot be combined with --init");
    free(cmd);
    /* a --config file's values for them are replaced, and the warning names
     * each (they were dropped in silence) */
    char *config = test_path(dir, "recipe.json");
    test_write_file(config, "{\"training\": {\"epochs\": 2}, \"model\": {\"max_len\": 30}}\n");
    /* the same values are no contradiction, nor is a minimum count left to
     * the data; the model's own are used */
    ck_assert_int_ge(asprintf(&cmd, "%s train --init %s " TINY_CSV " --out %s --d-model 16 "
                                    "--config %s --batch-size 8 --threads 1 --min-count auto "
                                    "--quiet",
                              bin, mlm, ft, config),
                     0);
    expect_cli(cmd, 0, "recipe.json sets: model.max_len 30 -> ");
    free(cmd);
    free(config);
    ck_assert_int_ge(asprintf(&cmd, "%s eval --model %s " TINY_CSV " >/dev/null", bin, ft), 0);
    ck_assert_int_eq(run_status(cmd), 0);
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "echo 'a good movie' | %s predict --model %s | grep -q "
                                    "'positive\\|negative'",
                              bin, ft),
                     0);
    ck_assert_int_eq(run_status(cmd), 0);
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "%s inspect --model %s 'a good movie' --format json | grep -q "
                                    "'\"label\": \"'",
                              bin, ft),
                     0);
    ck_assert_int_eq(run_status(cmd), 0);
    free(cmd);

    /* A run from the encoder, stopped and resumed, refits from the encoder
     * too: the same bytes as the run left alone (the resumed refit used to
     * start from random weights and a vocabulary of its own). */
    const char *refit_run = "--epochs 3 --patience 0 --refit 1 --batch-size 8 --threads 1 --quiet";
    char *whole = test_path(dir, "whole"), *parts = test_path(dir, "parts");
    ck_assert_int_ge(asprintf(&cmd, "%s train --init %s " TINY_CSV " --out %s %s", bin, mlm,
                              whole, refit_run),
                     0);
    expect_cli(cmd, 0, NULL);
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "%s train --init %s " TINY_CSV " --out %s %s --max-steps 3",
                              bin, mlm, parts, refit_run),
                     0);
    expect_cli(cmd, 0, NULL);
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "%s train --resume %s --threads 1 --quiet", bin, parts), 0);
    expect_cli(cmd, 0, NULL);
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "cmp -s %s/model.safetensors %s/model.safetensors && cmp -s "
                                    "%s/vocab.txt %s/vocab.txt",
                              whole, parts, whole, parts),
                     0);
    ck_assert_msg(run_status(cmd) == 0, "resumed run from --init differs: %s", cmd);
    free(cmd);
    free(whole);
    free(parts);

    /* option gating and values */
    static const struct {
        const char *args, *needle;
    } usage[] = {
        {"train --init X --resume Y", "--init cannot be combined with --resume"},
        {"train --mask-frac 0.2 a.csv --out z", "--mask-frac is an option of attnctl pretrain only"},
        {"pretrain --crop 0.3 a.txt --out z", "--crop is an option of attnctl train only"},
        {"pretrain --init x a.txt --out z", "--init is an option of attnctl train only"},
        {"pretrain --mask-frac 1 a.txt --out z", "--mask-frac: invalid value '1'"},
        {"pretrain --format tsv a.txt --out z", "--format: invalid value 'tsv'"},
        {"pretrain --format lines --text-column t a.txt --out z", "--format lines reads plain"},
        {"pretrain --out z", "missing text file(s)"},
    };
    for (size_t i = 0; i < sizeof usage / sizeof usage[0]; i++) {
        ck_assert_int_ge(asprintf(&cmd, "%s %s", bin, usage[i].args), 0);
        expect_cli(cmd, 2, usage[i].needle);
        free(cmd);
    }

    /* corrupt input: one line, naming the file and the line */
    char *nul = test_path(dir, "nul.txt"), *cut = test_path(dir, "cut.txt.gz"), *nocol = test_path(dir, "x.csv");
    f = fopen(nul, "wb");
    ck_assert_ptr_nonnull(f);
    fwrite("one\ntwo\nthr\0ee\n", 1, 15, f);
    ck_assert_int_eq(fclose(f), 0);
    f = fopen(cut, "wb");
    ck_assert_ptr_nonnull(f);
    fwrite("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\x4b\x4c", 1, 12, f); /* gzip cut short */
    ck_assert_int_eq(fclose(f), 0);
    f = fopen(nocol, "w");
    ck_assert_ptr_nonnull(f);
    fputs("id,body\n1,some text\n", f);
    ck_assert_int_eq(fclose(f), 0);
    const char *bad_files[] = {nul, cut, nocol};
    const char *bad_needles[] = {":3: NUL byte", ":1: gzip data cut short",
                                 ":1: no column named 'review'"};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_ge(asprintf(&cmd, "%s pretrain %s --out %s/never", bin, bad_files[i], dir),
                         0);
        char want[700];
        snprintf(want, sizeof want, "attnctl: error: %s%s", bad_files[i], bad_needles[i]);
        char *err = NULL;
        int st = run_capture(cmd, &err);
        ck_assert_msg(st == 1 && strstr(err, want) && count_substr(err, "\n") == 1,
                      "%s: exit %d, stderr %s (want %s)", cmd, st, err, want);
        free(err);
        free(cmd);
    }
    char *never = test_path(dir, "never");
    ck_assert_msg(access(never, F_OK) != 0, "a failed pretrain left %s behind", never);

    /* through the CLI: stopped at --max-steps, resumed: the state of one run */
    char *r1 = test_path(dir, "r1"), *r2 = test_path(dir, "r2");
    ck_assert_int_ge(asprintf(&cmd, "%s pretrain %s --out %s %s --epochs 2 --eval-every 3 --quiet "
                                    "--keep-checkpoint",
                              bin, lines, r1, shape),
                     0);
    expect_cli(cmd, 0, NULL);
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "%s pretrain %s --out %s %s --epochs 2 --eval-every 3 "
                                    "--max-steps 4 --quiet",
                              bin, lines, r2, shape),
                     0);
    expect_cli(cmd, 0, NULL);
    free(cmd);
    ck_assert_int_ge(asprintf(&cmd, "%s pretrain --resume %s --quiet --keep-checkpoint", bin, r2), 0);
    expect_cli(cmd, 0, NULL);
    free(cmd);
    const char *same[] = {"checkpoint/model.safetensors", "checkpoint/optimizer.safetensors",
                          "vocab.txt"};
    for (int i = 0; i < 3; i++) {
        char *pa = test_path(r1, same[i]), *pb = test_path(r2, same[i]);
        size_t la, lb;
        char *da = read_bytes(pa, &la), *db = read_bytes(pb, &lb);
        ck_assert_msg(la == lb && memcmp(da, db, la) == 0, "%s differs after --resume", same[i]);
        free(da);
        free(db);
        free(pa);
        free(pb);
    }
    ck_assert_int_ge(asprintf(&cmd, "%s train --resume %s", bin, r2), 0);
    expect_cli(cmd, 1, "continue it with attnctl pretrain --resume");
    free(cmd);

    rm_rf(dir);
    free(r1);
    free(r2);
    free(never);
    free(nul);
    free(cut);
    free(nocol);
    free(lines);
    free(mlm);
    free(ft);
    free(dir);
}
END_TEST

/* The man page documents every option --help names, for every command. */
START_TEST(test_help_options_in_man_page)
{
    const char *bin = attnctl_binary();
    if (!bin) {
        printf("SKIP test_help_options_in_man_page: no attnctl binary\n");
        return;
    }
    char *man = read_text("attnctl.1");
    static const struct {
        const char *name;
        int min_options; /* --help names at least this many (the check read something) */
    } commands[] = {{"train", 30}, {"pretrain", 30}, {"eval", 8},
                    {"predict", 7}, {"inspect", 8}, {"bench", 7},
                    {"quantize", 5}};
    for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++) {
        char *dir = test_temp_dir("train"), *out = test_path(dir, "help"), *cmd = NULL;
        ck_assert_int_ge(asprintf(&cmd, "%s %s --help > %s", bin, commands[c].name, out), 0);
        ck_assert_int_eq(run_status(cmd), 0);
        char *help = read_text(out);
        int checked = 0;
        for (const char *p = strstr(help, "--"); p; p = strstr(p + 2, "--")) {
            char name[64], escaped[160];
            size_t n = 0;
            for (const char *q = p + 2; n + 1 < sizeof name && ((*q >= 'a' && *q <= 'z') ||
                                                               (*q == '-' && q[1] != '-'));
                 q++)
                name[n++] = *q;
            name[n] = '\0';
            if (n < 2)
                continue;
            size_t e = (size_t)snprintf(escaped, sizeof escaped, "\\-\\-");
            for (size_t k = 0; k < n && e + 3 < sizeof escaped; k++) {
                if (name[k] == '-')
                    escaped[e++] = '\\';
                escaped[e++] = name[k];
            }
            escaped[e] = '\0';
            ck_assert_msg(strstr(man, escaped) != NULL, "attnctl %s --help names --%s; attnctl.1 "
                          "does not (%s)", commands[c].name, name, escaped);
            checked++;
        }
        ck_assert_int_ge(checked, commands[c].min_options);
        free(help);
        free(cmd);
        rm_rf(dir);
        free(out);
        free(dir);
    }
    free(man);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("train");
    TCase *tc = tcase_create("train");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_resume_after_interrupt_is_bitwise);
    tcase_add_test(tc, test_resume_after_max_steps_is_bitwise);
    tcase_add_test(tc, test_resume_finishes_a_save_cut_short);
    tcase_add_loop_test(tc, test_stop_during_evaluation_resumes_bitwise, 0, 3);
    tcase_add_test(tc, test_thread_count_does_not_change_weights);
    tcase_add_test(tc, test_early_stop_by_patience);
    tcase_add_test(tc, test_nan_keeps_last_good_checkpoint);
    tcase_add_loop_test(tc, test_cli_finished_run_drops_its_state, 1, 3);
    tcase_add_test(tc, test_cli_one_epoch_is_singular);
    tcase_add_test(tc, test_cli_auto_is_leaving_the_option_out);
    tcase_add_test(tc, test_cli_too_few_rows_names_the_file);
    tcase_add_test(tc, test_pick_model_keeps_the_mean_unless_below_every_member);
    tcase_add_test(tc, test_cli_mean_below_every_member_keeps_the_best);
    tcase_add_test(tc, test_members);
    tcase_add_test(tc, test_ema_lazy_rows_match_dense_average);
    tcase_add_test(tc, test_ema_is_an_average_of_trained_weights_only);
    tcase_add_test(tc, test_ema_resume_is_bitwise);
    tcase_add_test(tc, test_metrics_and_curves);
    tcase_add_test(tc, test_resume_truncates_metrics);
    tcase_add_test(tc, test_without_validation_and_with_val_file);
    tcase_add_test(tc, test_cli_end_to_end);
    tcase_add_test(tc, test_cli_resume_checks_val_file);
    suite_add_tcase(s, tc);
    TCase *tp = tcase_create("pretrain");
    tcase_set_timeout(tp, 300);
    tcase_add_test(tp, test_pretrain_end_to_end);
    tcase_add_test(tp, test_pretrain_resume_and_threads_bitwise);
    tcase_add_test(tp, test_finetune_from_pretrained);
    tcase_add_test(tp, test_cli_pretrain_and_init);
    tcase_add_test(tp, test_help_options_in_man_page);
    suite_add_tcase(s, tp);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failures = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failures != 0;
}
