/* The training loop. See include/attnctl/train.h for the files it writes and
 * the guarantees (determinism, exact resume). */
#include "attnctl/train.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attnctl/rng.h"
#include "trainer_internal.h"

/* Short-span validation: one span of this many tokens per validation row. */
#define SPAN_MIN_TOKENS 5
#define SPAN_MAX_TOKENS 40

/* Fewer validation rows than this give no temperature (it stays 1). */
#define MIN_CALIBRATION_ROWS 200

#define METRICS_MAX_BYTES ((size_t)256 << 20)
#define RUN_FILE_MAX_BYTES ((size_t)1 << 20)

/* ------------------------------------------------------------------ helpers */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

char *trainer_path_join(const char *dir, const char *name, ac_err *err)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p) {
        ac_err_set(err, "out of memory");
        return NULL;
    }
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int copy_string(char *dst, size_t cap, const char *src, const char *what, ac_err *err)
{
    size_t n = strlen(src);
    if (n >= cap)
        return ac_err_set(err, "%s is too long (%zu bytes, at most %zu)", what, n, cap - 1);
    memcpy(dst, src, n + 1);
    return 0;
}

static void set_date(ac_provenance *p)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(p->date, sizeof p->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int64_t *identity_index(int64_t n)
{
    int64_t *idx = malloc((size_t)(n > 0 ? n : 1) * sizeof *idx);
    if (idx)
        for (int64_t i = 0; i < n; i++)
            idx[i] = i;
    return idx;
}

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

static int classes_match(const ac_rawdata *d, char *const *labels, int n)
{
    if (d->n_classes != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (strcmp(d->classes[i], labels[i]) != 0)
            return 0;
    return 1;
}

static int check_labelled(const ac_rawdata *d, const char *what, ac_err *err)
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

/* ------------------------------------------------------------- run.json */

static int write_sources(const trainer *t, ac_err *err)
{
    const ac_train_options *o = t->opt;
    if (!t->writer)
        return 0;
    cJSON *root = cJSON_CreateObject();
    char *abs_train = o->train_path ? realpath(o->train_path, NULL) : NULL;
    char *abs_val = o->val_path ? realpath(o->val_path, NULL) : NULL;
    char *abs_unlabelled = NULL;
    int rc = -1;
    if (!root)
        goto oom;
    /* Absolute paths, so `--resume DIR` works from any working directory. */
    if (!cJSON_AddStringToObject(root, "train_file",
                                 abs_train ? abs_train : o->train_path ? o->train_path : "") ||
        !cJSON_AddStringToObject(root, "val_file",
                                 abs_val ? abs_val : o->val_path ? o->val_path : "") ||
        !cJSON_AddStringToObject(root, "text_column", o->text_column ? o->text_column : "") ||
        !cJSON_AddStringToObject(root, "label_column", o->label_column ? o->label_column : "") ||
        !cJSON_AddStringToObject(root, "objective", ac_objective_name(t->cfg.model.objective)))
        goto oom;
    if (t->cfg.model.objective == AC_OBJECTIVE_MASKED_LM &&
        pretrain_sources_to_json(t, root, err) != 0)
        goto done;
    if (o->teachers && o->teachers[0]) {
        abs_unlabelled = o->unlabelled_path ? realpath(o->unlabelled_path, NULL) : NULL;
        cJSON *self = cJSON_AddObjectToObject(root, "self_training");
        if (!self ||
            !cJSON_AddStringToObject(self, "unlabelled_file",
                                     abs_unlabelled ? abs_unlabelled
                                     : o->unlabelled_path ? o->unlabelled_path : "") ||
            !cJSON_AddStringToObject(self, "teachers", o->teachers) ||
            !cJSON_AddNumberToObject(self, "threshold", o->pseudo_threshold) ||
            !cJSON_AddNumberToObject(self, "rows", (double)o->n_pseudo) ||
            !cJSON_AddStringToObject(self, "sha256", o->pseudo_sha256 ? o->pseudo_sha256 : ""))
            goto oom;
    }
    char *text = cJSON_Print(root);
    if (!text)
        goto oom;
    char *path = trainer_path_join(t->ckpt_dir, AC_RUN_FILE, err);
    if (path) {
        size_t len = strlen(text);
        text[len] = '\n'; /* replaces the NUL; written with its length */
        rc = ac_write_file_atomic(path, text, len + 1, err);
        free(path);
    }
    free(text);
    goto done;
oom:
    ac_err_set(err, "out of memory");
done:
    cJSON_Delete(root);
    free(abs_train);
    free(abs_val);
    free(abs_unlabelled);
    return rc;
}

static int json_string_field(const cJSON *root, const char *key, char *dst, size_t cap,
                             const char *path, ac_err *err)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsString(item))
        return ac_err_set(err, "%s: %s: must be a string", path, key);
    char what[256];
    snprintf(what, sizeof what, "%s: %s", path, key);
    return copy_string(dst, cap, item->valuestring, what, err);
}

/* run.json's "self_training" object, when the run had teachers. */
static int self_training_from_json(const cJSON *root, ac_train_sources *s, const char *path,
                                   ac_err *err)
{
    const cJSON *self = cJSON_GetObjectItemCaseSensitive(root, "self_training");
    if (!self)
        return 0;
    if (!cJSON_IsObject(self))
        return ac_err_set(err, "%s: self_training: must be an object", path);
    if (json_string_field(self, "unlabelled_file", s->unlabelled_file,
                          sizeof s->unlabelled_file, path, err) ||
        json_string_field(self, "teachers", s->teachers, sizeof s->teachers, path, err) ||
        json_string_field(self, "sha256", s->pseudo_sha256, sizeof s->pseudo_sha256, path, err))
        return -1;
    const cJSON *threshold = cJSON_GetObjectItemCaseSensitive(self, "threshold");
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(self, "rows");
    if (!cJSON_IsNumber(threshold) || !(threshold->valuedouble >= 0.0) ||
        threshold->valuedouble > 1.0)
        return ac_err_set(err, "%s: self_training.threshold: must be a number from 0 to 1", path);
    if (!cJSON_IsNumber(rows) || !(rows->valuedouble >= 0.0) || rows->valuedouble > 1e15 ||
        rows->valuedouble != floor(rows->valuedouble))
        return ac_err_set(err, "%s: self_training.rows: must be a whole number >= 0", path);
    if (!s->teachers[0])
        return ac_err_set(err, "%s: self_training.teachers: must not be empty", path);
    s->pseudo_threshold = threshold->valuedouble;
    s->n_pseudo = (int64_t)rows->valuedouble;
    return 0;
}

int ac_train_sources_load(const char *out_dir, ac_train_sources *s, ac_err *err)
{
    memset(s, 0, sizeof *s);
    size_t n = strlen(out_dir) + strlen(AC_CHECKPOINT_SUBDIR) + strlen(AC_RUN_FILE) + 3;
    char *path = malloc(n);
    if (!path)
        return ac_err_set(err, "out of memory");
    snprintf(path, n, "%s/%s/%s", out_dir, AC_CHECKPOINT_SUBDIR, AC_RUN_FILE);
    if (access(path, F_OK) != 0) {
        ac_err_set(err, "%s holds no resumable checkpoint (%s not found)", out_dir, path);
        free(path);
        return -1;
    }
    char *data = NULL;
    size_t len = 0;
    int rc = ac_read_file(path, RUN_FILE_MAX_BYTES, &data, &len, err);
    if (rc == 0) {
        cJSON *root = cJSON_ParseWithLength(data, len);
        if (!cJSON_IsObject(root))
            rc = ac_err_set(err, "%s: not a JSON object", path);
        else if (json_string_field(root, "train_file", s->train_file, sizeof s->train_file, path,
                                   err) ||
                 json_string_field(root, "val_file", s->val_file, sizeof s->val_file, path, err) ||
                 json_string_field(root, "text_column", s->text_column, sizeof s->text_column,
                                   path, err) ||
                 json_string_field(root, "label_column", s->label_column,
                                   sizeof s->label_column, path, err))
            rc = -1;
        const cJSON *objective = cJSON_GetObjectItemCaseSensitive(root, "objective");
        if (rc == 0 && objective &&
            (!cJSON_IsString(objective) ||
             ac_objective_parse(objective->valuestring, &s->objective) != 0))
            rc = ac_err_set(err, "%s: objective: must be \"classification\" or \"masked_lm\"",
                            path);
        if (rc == 0 && s->objective == AC_OBJECTIVE_MASKED_LM)
            rc = pretrain_sources_from_json(root, s, path, err);
        if (rc == 0)
            rc = self_training_from_json(root, s, path, err);
        cJSON_Delete(root);
    }
    free(data);
    free(path);
    if (rc != 0)
        ac_train_sources_free(s);
    return rc;
}

void ac_train_sources_free(ac_train_sources *s)
{
    for (int i = 0; i < s->n_text_files; i++) {
        free(s->text_files[i]);
        free(s->text_sha256[i]);
    }
    free(s->text_files);
    free(s->text_sha256);
    s->text_files = s->text_sha256 = NULL;
    s->n_text_files = 0;
}

/* -------------------------------------------------------- metrics.jsonl */

static void format_number(char *buf, size_t n, double v)
{
    if (isfinite(v))
        snprintf(buf, n, "%.8g", v);
    else
        snprintf(buf, n, "null"); /* JSON has no NaN */
}

static int write_metrics_and_curves(const trainer *t, ac_err *err)
{
    if (!t->writer)
        return 0;
    size_t cap = 640 * (size_t)(t->n_points + 1), len = 0; /* a line is at most ~450 bytes */
    char *text = malloc(cap);
    if (!text)
        return ac_err_set(err, "out of memory");
    for (int i = 0; i < t->n_points; i++) {
        const ac_metric_point *p = &t->points[i];
        char epoch[32], tl[32], vl[32], va[32], sa[32], sm[32], tp[32], ec[32], lr[32], tps[32],
            el[32];
        format_number(epoch, sizeof epoch, p->epoch);
        format_number(tl, sizeof tl, p->train_loss);
        format_number(vl, sizeof vl, p->val_loss);
        format_number(va, sizeof va, p->val_accuracy);
        format_number(sa, sizeof sa, p->span_accuracy);
        format_number(sm, sizeof sm, p->span_majority);
        format_number(tp, sizeof tp, p->temperature);
        format_number(ec, sizeof ec, p->val_ece);
        format_number(lr, sizeof lr, p->lr);
        format_number(tps, sizeof tps, p->tokens_per_s);
        format_number(el, sizeof el, p->elapsed_s);
        int w = snprintf(text + len, cap - len,
                         "{\"step\": %ld, \"epoch\": %s, \"train_loss\": %s, \"val_loss\": %s, "
                         "\"val_accuracy\": %s, \"short_span_accuracy\": %s, "
                         "\"short_span_majority\": %s, \"temperature\": %s, \"val_ece\": %s, "
                         "\"lr\": %s, \"tokens_per_s\": %s, \"elapsed_s\": %s}\n",
                         p->step, epoch, tl, vl, va, sa, sm, tp, ec, lr, tps, el);
        if (w < 0 || (size_t)w >= cap - len) {
            free(text);
            return ac_err_set(err, "internal error: metrics line too long");
        }
        len += (size_t)w;
    }
    int rc = ac_write_file_atomic(t->metrics_path, text, len, err);
    free(text);
    if (rc)
        return rc;
    static const ac_curves_labels PRETRAINING = {"Pretraining (masked LM)", "held-out loss",
                                                 "masked-token accuracy (held out)"};
    char *svg = ac_curves_svg(t->points, t->n_points,
                              t->cfg.model.objective == AC_OBJECTIVE_MASKED_LM ? &PRETRAINING
                                                                               : NULL);
    if (!svg)
        return ac_err_set(err, "out of memory");
    rc = ac_write_file_atomic(t->svg_path, svg, strlen(svg), err);
    free(svg);
    return rc;
}

static int push_point(trainer *t, const ac_metric_point *p, ac_err *err)
{
    if (t->n_points == t->cap_points) {
        int cap = t->cap_points ? 2 * t->cap_points : 64;
        ac_metric_point *grown = realloc(t->points, (size_t)cap * sizeof *grown);
        if (!grown)
            return ac_err_set(err, "out of memory");
        t->points = grown;
        t->cap_points = cap;
    }
    t->points[t->n_points++] = *p;
    return 0;
}

static double json_number(const cJSON *obj, const char *key)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNumber(item) ? item->valuedouble : NAN;
}

/* Reads the metrics of earlier sessions, keeping evaluations up to the
 * checkpoint's step: later lines (from after the checkpoint, e.g. a crash
 * between the metrics write and the checkpoint save) are dropped, since they
 * will be recomputed. */
static int load_metrics_until(trainer *t, long max_step, ac_err *err)
{
    if (access(t->metrics_path, F_OK) != 0)
        return 0;
    char *data = NULL;
    size_t len = 0;
    if (ac_read_file(t->metrics_path, METRICS_MAX_BYTES, &data, &len, err))
        return -1;
    int rc = 0;
    long line_no = 0;
    for (char *line = data; line < data + len && rc == 0;) {
        char *end = memchr(line, '\n', (size_t)(data + len - line));
        size_t line_len = end ? (size_t)(end - line) : (size_t)(data + len - line);
        line_no++;
        size_t k = 0;
        while (k < line_len && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r'))
            k++;
        if (k < line_len) {
            cJSON *obj = cJSON_ParseWithLength(line, line_len);
            double step = json_number(obj, "step");
            if (!cJSON_IsObject(obj) || !isfinite(step)) {
                rc = ac_err_set(err,
                                "%s:%ld: not a metrics record (fix or delete the file to resume)",
                                t->metrics_path, line_no);
            } else if ((long)step <= max_step) {
                ac_metric_point p = {
                    .step = (long)step,
                    .epoch = json_number(obj, "epoch"),
                    .train_loss = json_number(obj, "train_loss"),
                    .val_loss = json_number(obj, "val_loss"),
                    .val_accuracy = json_number(obj, "val_accuracy"),
                    .span_accuracy = json_number(obj, "short_span_accuracy"),
                    .span_majority = json_number(obj, "short_span_majority"),
                    .temperature = json_number(obj, "temperature"),
                    .val_ece = json_number(obj, "val_ece"),
                    .lr = json_number(obj, "lr"),
                    .tokens_per_s = json_number(obj, "tokens_per_s"),
                    .elapsed_s = json_number(obj, "elapsed_s"),
                };
                rc = push_point(t, &p, err);
            }
            cJSON_Delete(obj);
        }
        line = end ? end + 1 : data + len;
    }
    free(data);
    return rc;
}

/* ----------------------------------------------------------------- saving */

static int save_best(trainer *t, ac_err *err)
{
    if (!t->writer) {
        t->model_saved = 1;
        return 0;
    }
    t->cfg.provenance.best_val_accuracy = t->n_val > 0 ? t->state.best_metric : -1.0;
    set_date(&t->cfg.provenance);
    if (ac_model_dir_save(t->opt->out_dir, &t->cfg, &t->vocab, &t->model, NULL, NULL, NULL, err))
        return ac_err_prefix(err, "saving the model to %s", t->opt->out_dir);
    t->model_saved = 1;
    return 0;
}

/* checkpoint/ema-STEP.safetensors: named by step, so that the file of the
 * checkpoint on disk survives a crash while the next one is written. */
static char *ema_path(const trainer *t, long step, ac_err *err)
{
    char name[64];
    snprintf(name, sizeof name, "ema-%ld.safetensors", step);
    return trainer_path_join(t->ckpt_dir, name, err);
}

/* The step up to which each table row's average is current, stored as two
 * float tensors that hold it exactly (step = hi * 2^20 + lo, each < 2^24). */
#define EMA_ROW_STEP_HI "ema_row_step.hi"
#define EMA_ROW_STEP_LO "ema_row_step.lo"
#define EMA_ROW_STEP_SPLIT 1048576L

/* The average as it is, rows not brought up to date: a resumed run must hold
 * the same lazy state as one never stopped, since bringing a row up to date
 * twice rounds differently from once. */
static int save_ema(trainer *t, ac_err *err)
{
    const ac_model *m = &t->model;
    const ac_ema *e = &t->ema;
    const int n = m->n_tensors + (e->rows > 0 ? 2 : 0);
    ac_st_entry *entries = calloc((size_t)n, sizeof *entries);
    char (*names)[AC_PARAM_NAME_LEN + 8] = calloc((size_t)m->n_tensors, sizeof *names);
    float *hi = malloc((size_t)(e->rows ? e->rows : 1) * sizeof *hi);
    float *lo = malloc((size_t)(e->rows ? e->rows : 1) * sizeof *lo);
    char *path = ema_path(t, t->state.step, err);
    int rc = -1;
    if (!entries || !names || !hi || !lo || !path) {
        if (path)
            ac_err_set(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < m->n_tensors; i++) {
        const ac_param_info *p = &m->table[i];
        snprintf(names[i], sizeof names[i], "ema.%s", p->name);
        entries[i] = (ac_st_entry){.name = names[i], .ndim = p->ndim,
                                   .shape = {p->shape[0], p->shape[1]},
                                   .data = e->avg + p->offset};
    }
    if (e->rows > 0) {
        for (int64_t r = 0; r < e->rows; r++) {
            hi[r] = (float)(e->row_step[r] / EMA_ROW_STEP_SPLIT);
            lo[r] = (float)(e->row_step[r] % EMA_ROW_STEP_SPLIT);
        }
        entries[n - 2] = (ac_st_entry){.name = EMA_ROW_STEP_HI, .ndim = 1, .shape = {e->rows},
                                       .data = hi};
        entries[n - 1] = (ac_st_entry){.name = EMA_ROW_STEP_LO, .ndim = 1, .shape = {e->rows},
                                       .data = lo};
    }
    rc = ac_st_save(path, entries, n, NULL, 0, err);
done:
    free(entries);
    free(names);
    free(hi);
    free(lo);
    free(path);
    return rc;
}

/* The rows' steps of a saved average; a file without them (attnctl before
 * 0.3 brought every row up to date before saving) is current as of its step. */
static int load_ema_row_steps(trainer *t, const ac_safetensors *st, const char *path, int *found,
                              ac_err *err)
{
    ac_ema *e = &t->ema;
    const ac_st_tensor *th = ac_st_find(st, EMA_ROW_STEP_HI), *tl = ac_st_find(st, EMA_ROW_STEP_LO);
    *found = (th != NULL) + (tl != NULL);
    if (!th && !tl)
        return 0; /* row_step stays at the checkpoint's step (ac_ema_init) */
    const float *hi = th ? ac_st_f32(st, th) : NULL, *lo = tl ? ac_st_f32(st, tl) : NULL;
    const size_t bytes = (size_t)e->rows * sizeof(float);
    if (!hi || !lo || th->end - th->begin != bytes || tl->end - tl->begin != bytes)
        return ac_err_set(err, "%s: tensors \"%s\" and \"%s\" are missing or have the wrong size",
                          path, EMA_ROW_STEP_HI, EMA_ROW_STEP_LO);
    for (int64_t r = 0; r < e->rows; r++) {
        double step = (double)hi[r] * (double)EMA_ROW_STEP_SPLIT + (double)lo[r];
        if (!(lo[r] >= 0 && lo[r] < (float)EMA_ROW_STEP_SPLIT && hi[r] >= 0) ||
            floorf(hi[r]) != hi[r] || floorf(lo[r]) != lo[r] || step > (double)t->state.step)
            return ac_err_set(err, "%s: row %lld of the averaged tables has step %g, not one of "
                                   "0..%ld", path, (long long)r, step, t->state.step);
        e->row_step[r] = (long)step;
    }
    return 0;
}

/* Removes the averaged weights of every other step. */
static void remove_other_ema(const trainer *t)
{
    char *keep = ema_path(t, t->state.step, NULL);
    DIR *d = opendir(t->ckpt_dir);
    if (!d || !keep) {
        if (d)
            closedir(d);
        free(keep);
        return;
    }
    const char *keep_name = strrchr(keep, '/') + 1;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        const char *n = ent->d_name;
        size_t len = strlen(n);
        if (strncmp(n, "ema-", 4) == 0 && len > 16 &&
            strcmp(n + len - 12, ".safetensors") == 0 && strcmp(n, keep_name) != 0) {
            char *p = trainer_path_join(t->ckpt_dir, n, NULL);
            if (p)
                unlink(p);
            free(p);
        }
    }
    closedir(d);
    free(keep);
}

static int load_ema(trainer *t, ac_err *err)
{
    const ac_model *m = &t->model;
    char *path = ema_path(t, t->state.step, err);
    if (!path)
        return -1;
    ac_safetensors st;
    int rc = ac_st_load(&st, path, err), loaded = rc == 0;
    for (int i = 0; rc == 0 && i < m->n_tensors; i++) {
        const ac_param_info *p = &m->table[i];
        char name[AC_PARAM_NAME_LEN + 8];
        snprintf(name, sizeof name, "ema.%s", p->name);
        const ac_st_tensor *tt = ac_st_find(&st, name);
        const float *src = tt ? ac_st_f32(&st, tt) : NULL;
        if (!src || tt->end - tt->begin != p->numel * sizeof(float))
            rc = ac_err_set(err, "%s: tensor \"%s\" is missing or has the wrong size", path, name);
        else
            memcpy(t->ema.avg + p->offset, src, p->numel * sizeof(float));
    }
    int row_tensors = 0;
    if (rc == 0)
        rc = load_ema_row_steps(t, &st, path, &row_tensors, err);
    if (rc == 0 && st.n != m->n_tensors + row_tensors)
        rc = ac_err_set(err, "%s: %d tensors, expected %d", path, st.n, m->n_tensors + row_tensors);
    if (loaded)
        ac_st_free(&st);
    free(path);
    return rc;
}

/* stopping: the run stops after it, under a deadline (see
 * ac_model_dir_save_sync_last). */
static int save_checkpoint_as(trainer *t, int stopping, ac_err *err)
{
    if (!t->writer) {
        t->ckpt_step = t->state.step;
        return 0;
    }
    if (t->have_ema && save_ema(t, err))
        return ac_err_prefix(err, "saving the averaged weights");
    t->cfg.provenance.best_val_accuracy = t->n_val > 0 ? t->state.best_metric : -1.0;
    set_date(&t->cfg.provenance);
    int rc = stopping ? ac_model_dir_save_sync_last(t->ckpt_dir, &t->cfg, &t->vocab, &t->model,
                                                    t->m1, t->m2, &t->state, err)
                      : ac_model_dir_save(t->ckpt_dir, &t->cfg, &t->vocab, &t->model, t->m1,
                                          t->m2, &t->state, err);
    if (rc)
        return ac_err_prefix(err, "saving the checkpoint to %s", t->ckpt_dir);
    t->ckpt_step = t->state.step;
    if (t->have_ema)
        remove_other_ema(t);
    return 0;
}

static int save_checkpoint(trainer *t, ac_err *err)
{
    return save_checkpoint_as(t, 0, err);
}

/* ------------------------------------------------------------------ setup */

static int split_rows(trainer *t, ac_err *err)
{
    const ac_train_options *o = t->opt;
    const ac_train_config *tc = &t->cfg.training;
    if (o->n_pseudo < 0 || o->n_pseudo >= o->train->n_rows)
        return ac_err_set(err, "%lld of the %lld training rows are teacher-labelled: at least one "
                               "must be labelled",
                          (long long)o->n_pseudo, (long long)o->train->n_rows);
    if (o->val) {
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
        if (t->cfg.model.objective == AC_OBJECTIVE_MASKED_LM) {
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
            return ac_err_prefix(err, "validation split");
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
        return ac_err_set(err, "no training rows left after the validation split (%.3g of %lld rows)",
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
    size_t head = mc->objective == AC_OBJECTIVE_MASKED_LM ? pretrain_memory_bytes(t) : 0;
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
    if (mc->objective == AC_OBJECTIVE_MASKED_LM)
        return pretrain_setup(t, err);
    return 0;
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

static int setup_fresh(trainer *t, ac_err *err)
{
    const ac_train_options *o = t->opt;
    if (!o->config)
        return ac_err_set(err, "no configuration given");
    t->cfg = *o->config;
    t->cfg.labels = NULL;
    t->cfg.n_labels = 0;
    t->have_cfg = 1;
    const int masked_lm = o->objective == AC_OBJECTIVE_MASKED_LM;
    t->cfg.model.objective = o->objective;
    if (!masked_lm && set_labels(&t->cfg, o->train, err))
        return -1;
    if (split_rows(t, err))
        return -1;

    const ac_train_config *tc = &t->cfg.training;
    if (o->init_dir) {
        if (trainer_take_init(t, err))
            return -1;
    } else {
        /* Pretraining learns from all its text; a classifier's vocabulary
         * comes from its training rows only. */
        int specials = (t->cfg.model.pooling == AC_POOL_CLS ? AC_VOCAB_WITH_CLS : 0) |
                       (masked_lm ? AC_VOCAB_WITH_MASK : 0);
        if (ac_vocab_build(&t->vocab, o->train, masked_lm ? NULL : t->train_idx,
                           masked_lm ? o->train->n_rows : t->n_train, &t->cfg.tokenizer,
                           tc->vocab_max, tc->min_count, specials, err))
            return ac_err_prefix(err, "building the vocabulary");
        t->have_vocab = 1;
    }
    t->cfg.model.vocab_size = t->vocab.size;
    t->cfg.model.n_classes = masked_lm ? 0 : o->train->n_classes;
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
    if (allocate_training_memory(t, err))
        return -1;

    ac_provenance *pv = &t->cfg.provenance;
    memset(pv, 0, sizeof *pv);
    snprintf(pv->version, sizeof pv->version, "%s", AC_VERSION);
    if (o->init_dir)
        snprintf(pv->init_model, sizeof pv->init_model, "%s", o->init_dir);
    if (masked_lm) {
        if (pretrain_provenance(t, err))
            return -1;
    } else if (o->train_path) {
        if (copy_string(pv->train_file, sizeof pv->train_file, o->train_path, "training file path",
                        err))
            return -1;
        if (ac_sha256_file(o->train_path, pv->train_sha256, err))
            return -1;
    }
    pv->rows_used = t->n_train;
    pv->best_val_accuracy = -1.0;

    t->state = (ac_trainer_state){.seed = tc->seed, .best_metric = -1.0, .best_step = -1};
    return 0;
}

static int setup_resume(trainer *t, ac_err *err)
{
    const ac_train_options *o = t->opt;
    char *state_path = trainer_path_join(t->ckpt_dir, "trainer_state.json", err);
    if (!state_path)
        return -1;
    int missing = access(state_path, F_OK) != 0;
    free(state_path);
    if (missing)
        return ac_err_set(err, "%s holds no resumable checkpoint (%s/trainer_state.json not found)",
                          o->out_dir, t->ckpt_dir);
    /* A run killed while saving (SIGKILL, e.g. from mpirun) left temp files
     * (a save it was cut short between its renames was finished first:
     * recover_checkpoint). */
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

    const int masked_lm = t->cfg.model.objective == AC_OBJECTIVE_MASKED_LM;
    if (masked_lm != (o->objective == AC_OBJECTIVE_MASKED_LM))
        return ac_err_set(err, "resume: %s holds a %s run (continue it with attnctl %s --resume)",
                          t->ckpt_dir, masked_lm ? "pretraining" : "classifier training",
                          masked_lm ? "pretrain" : "train");
    if (!masked_lm && !classes_match(o->train, t->cfg.labels, t->cfg.n_labels))
        return ac_err_set(err, "resume: the training file's classes differ from the checkpoint's "
                               "(%d in the file, %d in %s/config.json)",
                          o->train->n_classes, t->cfg.n_labels, t->ckpt_dir);
    const ac_provenance *pv = &t->cfg.provenance;
    if (masked_lm && pretrain_check_sources(t, err))
        return -1;
    if (!masked_lm && o->train_path && pv->train_sha256[0]) {
        char sha[65];
        if (ac_sha256_file(o->train_path, sha, err))
            return -1;
        if (strcmp(sha, pv->train_sha256) != 0)
            return ac_err_set(err, "resume: %s is not the file the run was started with "
                                   "(SHA-256 differs from %s/config.json)",
                              o->train_path, t->ckpt_dir);
    }
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
    t->ckpt_step = t->state.step;
    return 0;
}

/* The training batches of one epoch: shuffled, and a share of the rows cut
 * to short spans (both drawn from the seed and the epoch). */
static int make_epoch_plan(trainer *t, int epoch, ac_err *err)
{
    const ac_train_config *tc = &t->cfg.training;
    ac_crop_spec crop = {.frac = tc->crop_frac,
                         .min_len = tc->crop_min,
                         .max_len = tc->crop_max,
                         .log_uniform = 1,
                         .keep_first = t->cfg.model.pooling == AC_POOL_CLS,
                         .key = ac_rng_key(ac_rng_key(tc->seed, STREAM_CROP), (uint64_t)epoch)};
    if (ac_batch_plan_make_cropped(&t->plan, &t->train_corpus, t->train_idx, t->n_train,
                                   tc->batch_size, 1,
                                   ac_rng_key(ac_rng_key(tc->seed, STREAM_SHUFFLE), (uint64_t)epoch),
                                   &crop, err))
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
    t->micro_masked = calloc((size_t)t->max_micro, sizeof *t->micro_masked);
    int64_t val_batches = t->have_val_plan ? t->val_plan.n_batches : 0;
    int64_t span_batches = t->have_span_plan ? t->span_plan.n_batches : 0;
    int64_t most = val_batches > span_batches ? val_batches : span_batches;
    t->eval_slots = calloc(3 * (size_t)(most > 0 ? most : 1), sizeof *t->eval_slots);
    t->gather_offsets = calloc((size_t)ranks + 1, sizeof *t->gather_offsets);
    if (!t->step_slots || !t->micro_masked || !t->eval_slots || !t->gather_offsets)
        return ac_err_set(err, "out of memory");
    if (t->max_micro > 1) {
        long positions = (long)tc->batch_size * (long)t->cfg.model.max_len;
        if (ac_gradsum_init(&t->gradsum, &t->model, positions, t->max_micro, err))
            return -1;
        t->have_gradsum = 1;
    }
    return 0;
}

void trainer_rank_share(const trainer *t, int64_t n, int64_t *begin, int64_t *end)
{
    const int64_t ranks = t->comm ? t->comm->size : 1, rank = t->comm ? t->comm->rank : 0;
    *begin = n * rank / ranks;
    *end = n * (rank + 1) / ranks;
}

int trainer_stop_requested(const trainer *t)
{
    return t->opt->stop && *t->opt->stop;
}

int trainer_agree_abandon(trainer *t, int abandoned_here, ac_err *err)
{
    if (!t->comm)
        return abandoned_here != 0;
    double flag = abandoned_here != 0;
    if (t->comm->sum_doubles(t->comm, &flag, 1, err))
        return -1;
    if (flag > 0)
        t->stop_agreed = 1;
    return flag > 0;
}

int trainer_share_eval_slots(trainer *t, size_t n, ac_err *err)
{
    if (!t->comm)
        return 0;
    return t->comm->sum_doubles(t->comm, t->eval_slots, n, err);
}

static int setup(trainer *t, ac_err *err)
{
    const ac_train_options *o = t->opt;
    if (!o->train || !o->out_dir)
        return ac_err_set(err, "training data and output directory are required");
    if (o->objective == AC_OBJECTIVE_MASKED_LM) {
        if (pretrain_check_options(o, err))
            return -1;
    } else if (check_labelled(o->train, "the training data", err)) {
        return -1;
    }
    if (o->init_dir && (o->resume || o->objective != AC_OBJECTIVE_CLASSIFICATION))
        return ac_err_set(err, "starting from a pretrained model is for a fresh classifier run");
    if (o->val) {
        if (check_labelled(o->val, "the validation data", err))
            return -1;
        if (!classes_match(o->val, o->train->classes, o->train->n_classes))
            return ac_err_set(err, "the validation data's classes differ from the training data's");
    }
    if (!(t->ckpt_dir = trainer_path_join(o->out_dir, AC_CHECKPOINT_SUBDIR, err)) ||
        !(t->metrics_path = trainer_path_join(o->out_dir, AC_METRICS_FILE, err)) ||
        !(t->svg_path = trainer_path_join(o->out_dir, AC_CURVES_FILE, err)) ||
        !(t->calibration_path = trainer_path_join(o->out_dir, AC_CALIBRATION_FILE, err)))
        return -1;
    if (t->writer && ac_mkdir_p(o->out_dir, err))
        return -1;
    if (o->resume ? setup_resume(t, err) : setup_fresh(t, err))
        return -1;

    /* Batches per epoch from this epoch's plan (the count is the same every epoch). */
    const ac_train_config *tc = &t->cfg.training;
    if (tc->epochs < 1 || tc->batch_size < 1)
        return ac_err_set(err, "training.epochs and training.batch_size must be at least 1");
    const int masked_lm = t->cfg.model.objective == AC_OBJECTIVE_MASKED_LM;
    t->model.label_smoothing = tc->label_smoothing;
    t->model.token_dropout = tc->token_dropout;
    if (tc->ema > 0) {
        if (ac_ema_init(&t->ema, &t->model, tc->ema, t->state.step, err))
            return -1;
        t->have_ema = 1;
        if (o->resume && load_ema(t, err))
            return ac_err_prefix(err, "resume");
    }
    int first_epoch = t->state.epoch < tc->epochs ? t->state.epoch : 0;
    if (make_epoch_plan(t, first_epoch, err))
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
    if (t->n_val > 0 && !masked_lm) {
        ac_crop_spec spans = {.frac = 1.0,
                              .min_len = SPAN_MIN_TOKENS,
                              .max_len = SPAN_MAX_TOKENS,
                              .keep_first = t->cfg.model.pooling == AC_POOL_CLS,
                              .key = ac_rng_key(tc->seed, STREAM_SPANS)};
        if (ac_batch_plan_make_cropped(&t->span_plan, t->val_src, t->val_idx, t->n_val,
                                       tc->batch_size, 0, 0, &spans, err))
            return ac_err_prefix(err, "cutting the validation rows to short spans");
        t->have_span_plan = 1;
        int C = t->cfg.model.n_classes;
        t->val_logits = malloc((size_t)t->n_val * (size_t)C * sizeof *t->val_logits);
        t->span_logits = malloc((size_t)t->n_val * (size_t)C * sizeof *t->span_logits);
        t->val_labels = malloc((size_t)t->n_val * sizeof *t->val_labels);
        t->val_probs = malloc((size_t)C * sizeof *t->val_probs);
        t->val_scaled = malloc((size_t)C * sizeof *t->val_scaled);
        t->val_predicted = malloc((size_t)C * sizeof *t->val_predicted);
        if (!t->val_logits || !t->span_logits || !t->val_labels || !t->val_probs ||
            !t->val_scaled || !t->val_predicted)
            return ac_err_set(err, "out of memory for the validation logits");
        if (ac_metrics_init(&t->val_metrics, C, t->n_val, err))
            return -1;
        t->have_val_metrics = 1;
    }

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

    long max_steps = o->max_steps;
    t->stop_step = max_steps > 0 && max_steps < t->total_steps ? max_steps : t->total_steps;

    if (o->resume) {
        if (load_metrics_until(t, t->state.step, err))
            return -1;
        if (t->n_points > 0 && isfinite(t->points[t->n_points - 1].elapsed_s))
            t->elapsed_base = t->points[t->n_points - 1].elapsed_s;
        if (write_metrics_and_curves(t, err))
            return -1;
        char *model_path = trainer_path_join(o->out_dir, "model.safetensors", err);
        if (!model_path)
            return -1;
        t->model_saved = access(model_path, F_OK) == 0;
        free(model_path);
        /* the data may have moved: record where it is now */
        if (o->train_path || (t->cfg.model.objective == AC_OBJECTIVE_MASKED_LM && o->text_paths))
            return write_sources(t, err);
        return 0;
    }
    if (!t->writer)
        return 0;
    if (ac_mkdir_p(t->ckpt_dir, err) || write_sources(t, err))
        return -1;
    /* A fresh run starts a fresh log. */
    unlink(t->svg_path);
    unlink(t->calibration_path);
    return ac_write_file_atomic(t->metrics_path, "", 0, err);
}

static void trainer_free(trainer *t)
{
    if (t->have_val_plan)
        ac_batch_plan_free(&t->val_plan);
    if (t->have_span_plan)
        ac_batch_plan_free(&t->span_plan);
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
    free(t->val_logits);
    free(t->span_logits);
    free(t->val_labels);
    free(t->micro_masked);
    free(t->step_slots);
    free(t->eval_slots);
    free(t->gather_offsets);
    if (t->have_gradsum)
        ac_gradsum_free(&t->gradsum);
    free(t->val_probs);
    free(t->val_scaled);
    free(t->val_predicted);
    if (t->have_val_metrics)
        ac_metrics_free(&t->val_metrics);
    if (t->have_init)
        ac_model_dir_free(&t->init);
    pretrain_free(t);
}

/* --------------------------------------------------------------- the loop */

typedef struct {
    double t0;                 /* session start */
    double train_time;         /* seconds inside training steps */
    long steps;                /* steps in this session */
    double examples, tokens;   /* in this session */
    double tokens_since_eval, time_since_eval;
    double last_loss, last_lr;
} session_stats;

static void fill_progress(const trainer *t, const session_stats *s, ac_train_event_kind kind,
                          ac_train_progress *p)
{
    memset(p, 0, sizeof *p);
    double now = now_s();
    p->kind = kind;
    p->objective = t->cfg.model.objective;
    p->epochs = t->cfg.training.epochs;
    p->step = t->state.step;
    p->epoch = t->state.step > 0 ? (int)((t->state.step - 1) / t->batches_per_epoch) : 0;
    p->total_steps = t->total_steps;
    p->stop_step = t->stop_step;
    p->epoch_progress = (double)t->state.step / (double)t->batches_per_epoch;
    p->examples_per_s = s->train_time > 0 ? s->examples / s->train_time : 0.0;
    p->tokens_per_s = s->train_time > 0 ? s->tokens / s->train_time : 0.0;
    p->loss = s->last_loss;
    p->loss_avg = t->state.train_loss_count > 0
                      ? t->state.train_loss_sum / (double)t->state.train_loss_count
                      : NAN;
    p->lr = s->last_lr;
    p->elapsed_s = t->elapsed_base + (now - s->t0);
    p->eta_s = s->steps > 0 ? (double)(t->stop_step - t->state.step) * (now - s->t0) /
                                  (double)s->steps
                            : NAN;
    p->val_loss = p->val_accuracy = p->val_span_accuracy = p->temperature = p->val_ece = NAN;
    p->best_val_accuracy = t->n_val > 0 ? t->state.best_metric : -1.0;
    p->best_step = t->state.best_step;
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
    p->padding_fraction = t->plan.padded_tokens > 0
                              ? 1.0 - (double)t->plan.real_tokens / (double)t->plan.padded_tokens
                              : 0.0;
}

static void report(const trainer *t, const ac_train_progress *p)
{
    if (t->opt->progress)
        t->opt->progress(p, t->opt->progress_user);
}

int trainer_non_finite_error(const trainer *t, long step, const char *what, double v, ac_err *err)
{
    char where[160];
    if (t->ckpt_step >= 0)
        snprintf(where, sizeof where, "the checkpoint of step %ld is intact", t->ckpt_step);
    else
        snprintf(where, sizeof where, "no checkpoint was saved yet");
    return ac_err_set(err, "step %ld: %s is %s (learning rate too high?); training stopped, %s",
                      step, what, isnan(v) ? "NaN" : "infinite", where);
}

static uint64_t step_dropout_key(const trainer *t)
{
    return ac_rng_key(ac_rng_key(t->cfg.training.seed, STREAM_DROPOUT), (uint64_t)t->state.step);
}

/* Forward and backward of one batch: the whole step's (first_row 0,
 * mean_rows 0) or a micro-batch's, whose loss is part of a mean over
 * mean_rows rows (masked positions for the masked LM). Gradients are added
 * into m->grads. */
static int forward_backward(trainer *t, const ac_batch *b, uint64_t dropout_key,
                            int64_t first_row, int mean_rows, float *loss, ac_err *err)
{
    ac_model *m = &t->model;
    if (t->cfg.model.objective == AC_OBJECTIVE_MASKED_LM) {
        if (pretrain_forward(t, b, dropout_key, first_row, loss, err))
            return -1;
    } else {
        *loss = ac_model_forward(m, b->ids, b->lengths, b->labels, b->B, b->T, 1, dropout_key);
    }
    if (!isfinite(*loss))
        return trainer_non_finite_error(t, t->state.step + 1, "the training loss", *loss, err);
    if (t->cfg.model.objective == AC_OBJECTIVE_MASKED_LM) {
        t->mlm.mean_rows = mean_rows;
        ac_mlm_backward(m, &t->mlm);
        t->mlm.mean_rows = 0;
    } else {
        m->mean_rows = mean_rows;
        ac_model_backward(m);
        m->mean_rows = 0;
    }
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
    const int masked_lm = t->cfg.model.objective == AC_OBJECTIVE_MASKED_LM;
    /* Masked LM: the step's loss is a mean over all its masked positions. */
    int mean_rows = rows;
    if (masked_lm) {
        mean_rows = 0;
        for (int j = 0; j < n_micro; j++) {
            int first = j * mb, n = rows - first < mb ? rows - first : mb;
            ac_batch_fill_rows(b, &t->train_corpus, &t->plan, batch, first, n);
            int M = pretrain_count_masked(t, b, first, err);
            if (M < 0) {
                *failed_here = 1;
                return -1;
            }
            t->micro_masked[j] = M;
            mean_rows += M;
        }
    }
    ac_gradsum_clear(&t->gradsum);
    const uint64_t step_key = step_dropout_key(t);
    int64_t mine_first, mine_end;
    trainer_rank_share(t, n_micro, &mine_first, &mine_end);
    for (int64_t j = mine_first; j < mine_end; j++) {
        if (trainer_stop_requested(t)) { /* the step is dropped (train_step) */
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

/* Some rank failed: all stop with an error, and one message is printed
 * (the CLI keeps quiet when peer_failed): rank 0's when it failed, else the
 * failing rank's, with rank 0 pointing at it. Returns -1. */
static int agree_on_failure(trainer *t, int failed_here, int rank0_failed, ac_err *err)
{
    t->failure_shared = 1;
    if (failed_here) {
        t->peer_failed = t->comm->rank != 0 && rank0_failed;
        return -1; /* err holds this rank's message */
    }
    t->peer_failed = t->comm->rank != 0;
    return ac_err_set(err, "step %ld: another process failed (its message is above)",
                      t->state.step + 1);
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
    if (t->cfg.model.objective == AC_OBJECTIVE_MASKED_LM) {
        long total = 0;
        for (int i = 0; i < n_micro; i++)
            total += t->micro_masked[i];
        return (double)t->micro_masked[j] / (double)total;
    }
    int first = j * t->micro_batch;
    int n = rows - first < t->micro_batch ? rows - first : t->micro_batch;
    return (double)n / (double)rows;
}

/* What train_step returns when a stop came before the step's update. */
#define TRAIN_STEP_DROPPED 1

/* One optimizer step on batch state.batch_in_epoch of the current plan. Allocates nothing.
 * A batch of one micro-batch is computed whole (by every rank: nothing to
 * share); a larger one in micro-batches summed exactly. */
static int train_step(trainer *t, session_stats *s, ac_err *err)
{
    ac_model *m = &t->model;
    ac_batch *b = &t->batch;
    double t_start = now_s();
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
    if (t->comm) {
        /* Every rank learns the losses, whether one failed and whether one
         * was asked to stop, so that all take the same path. */
        t->step_slots[n_micro] = failed_here;
        t->step_slots[n_micro + 1] = t->opt->stop && *t->opt->stop ? 1.0 : 0.0;
        t->step_slots[n_micro + 2] = failed_here && t->comm->rank == 0;
        if (t->comm->sum_doubles(t->comm, t->step_slots, (size_t)n_micro + 3, err))
            return -1;
        t->stop_agreed = t->step_slots[n_micro + 1] > 0;
        if (t->step_slots[n_micro] > 0 && agree_on_failure(t, failed_here,
                                                           t->step_slots[n_micro + 2] > 0, err))
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
        return TRAIN_STEP_DROPPED;
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
        return trainer_non_finite_error(t, t->state.step + 1, "the gradient norm", norm, err);
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
    double dt = now_s() - t_start;
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
    int agreed = trainer_agree_abandon(t, abandoned, err);
    if (agreed != 0)
        return agreed < 0 ? -1 : TRAINER_EVAL_ABANDONED;
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
            return trainer_non_finite_error(t, t->state.step, "the validation loss", loss_of[i],
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

/* Evaluation and everything that follows it: metrics line, curves, best
 * model, resumable checkpoint. The order matters for crashes: the metrics
 * line first (dropped on resume if the checkpoint did not follow), then the
 * best model, then the checkpoint that records it as best. */
static int evaluate_and_save(trainer *t, session_stats *s, ac_train_result *res, ac_err *err)
{
    double val_loss = NAN, val_accuracy = NAN, span_loss = NAN, span_accuracy = NAN;
    double temperature = NAN, ece = NAN, val_majority = NAN, span_majority = NAN;
    /* With averaging, the average is what is evaluated and kept as the model.
     * The checkpoint keeps the trained weights, which the evaluation then
     * does not see: they are checked here, before anything is written. */
    if (t->have_ema) {
        const float *p = t->model.params;
        for (size_t i = 0; i < t->model.n_params; i++)
            if (!isfinite(p[i]))
                return trainer_non_finite_error(t, t->state.step, "a trained weight", p[i], err);
        ac_ema_swap_in(&t->ema, &t->model);
    }
    const int masked_lm = t->cfg.model.objective == AC_OBJECTIVE_MASKED_LM;
    int rc = 0;
    if (t->n_val > 0 && masked_lm)
        rc = pretrain_evaluate(t, &val_loss, &val_accuracy, err);
    if (t->n_val > 0 && !masked_lm) {
        rc = evaluate(t, &t->val_plan, t->val_logits, &val_loss, &val_accuracy, &val_majority, err);
        if (rc == 0)
            rc = evaluate(t, &t->span_plan, t->span_logits, &span_loss, &span_accuracy,
                          &span_majority, err);
        if (rc == 0 && calibrate(t, &temperature, &ece, err))
            rc = -1;
    }
    if (rc < 0)
        return -1;
    ac_trainer_state *st = &t->state;
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
    ac_metric_point p = {
        .step = st->step,
        .epoch = (double)st->step / (double)t->batches_per_epoch,
        .train_loss = st->train_loss_count > 0 ? st->train_loss_sum / (double)st->train_loss_count
                                               : NAN,
        .val_loss = val_loss,
        .val_accuracy = val_accuracy,
        .span_accuracy = span_accuracy,
        .span_majority = span_majority,
        .temperature = temperature,
        .val_ece = ece,
        .lr = s->last_lr,
        .tokens_per_s = s->time_since_eval > 0 ? s->tokens_since_eval / s->time_since_eval : NAN,
        .elapsed_s = t->elapsed_base + (now_s() - s->t0),
    };
    int improved;
    if (t->n_val > 0) {
        improved = val_accuracy > st->best_metric;
        if (improved) {
            st->best_metric = val_accuracy;
            st->best_step = st->step;
            st->bad_evals = 0;
        } else {
            st->bad_evals++;
        }
    } else {
        improved = 1; /* nothing to compare: the latest model is the model */
        st->best_step = st->step;
    }
    if (push_point(t, &p, err) || write_metrics_and_curves(t, err))
        return -1;
    if (improved && save_best(t, err))
        return -1;
    if (improved && t->n_val > 0 && !masked_lm && write_calibration_svg(t, temperature, err))
        return -1;
    if (t->have_ema)
        ac_ema_swap_out(&t->ema, &t->model); /* the checkpoint keeps the trained weights */
    st->train_loss_sum = 0;
    st->train_loss_count = 0;
    if (save_checkpoint(t, err))
        return -1;
    s->tokens_since_eval = 0;
    s->time_since_eval = 0;
    res->n_evals++;
    res->last_val_loss = val_loss;
    res->last_val_accuracy = val_accuracy;

    ac_train_progress ev;
    fill_progress(t, s, AC_TRAIN_EVENT_EVAL, &ev);
    ev.loss = p.train_loss;
    ev.val_loss = val_loss;
    ev.val_accuracy = val_accuracy;
    ev.val_span_accuracy = span_accuracy;
    ev.temperature = temperature;
    ev.val_ece = ece;
    ev.improved = improved;
    ev.tokens_per_s = p.tokens_per_s;
    report(t, &ev);
    return 0;
}

/* Whether every rank's setup worked (a missing file or too little memory
 * may hit one machine only). */
static int agree_on_setup(trainer *t, int failed_here, ac_err *err)
{
    double flags[2] = {failed_here, failed_here && t->comm->rank == 0};
    ac_err local;
    if (t->comm->sum_doubles(t->comm, flags, 2, &local)) {
        if (!failed_here)
            *err = local;
        return -1;
    }
    if (flags[0] == 0)
        return 0;
    t->failure_shared = 1;
    if (failed_here) {
        t->peer_failed = t->comm->rank != 0 && flags[1] > 0;
        return -1;
    }
    t->peer_failed = t->comm->rank != 0;
    return ac_err_set(err, "another process failed to start training (its message is above)");
}

/* Stops at this step: a checkpoint unless the one on disk is of it. */
static int interrupted(trainer *t, ac_train_result *res, ac_err *err)
{
    if (t->ckpt_step != t->state.step && save_checkpoint_as(t, 1, err))
        return -1;
    res->status = AC_TRAIN_INTERRUPTED;
    return 0;
}

/* Before a resume: a checkpoint save cut short between its renames (killed,
 * e.g. by mpirun one second after Ctrl-C) is finished from its temp files by
 * the writer (ac_checkpoint_recover), before any process reads the
 * checkpoint. Every process calls it first thing, so that the agreement
 * below meets no other collective. */
static int recover_checkpoint(trainer *t, ac_err *err)
{
    int failed = 0;
    if (t->writer) {
        char *dir = trainer_path_join(t->opt->out_dir, AC_CHECKPOINT_SUBDIR, err);
        int completed;
        failed = !dir || ac_checkpoint_recover(dir, &completed, err) != 0;
        if (dir && failed)
            ac_err_prefix(err, "resume");
        free(dir);
    }
    if (!t->comm)
        return failed ? -1 : 0;
    double any = failed;
    ac_err local;
    if (t->comm->sum_doubles(t->comm, &any, 1, failed ? &local : err))
        return -1;
    if (any > 0 && !failed)
        return ac_err_set(err, "another process failed to start training (its message is above)");
    return failed ? -1 : 0;
}

static int run(trainer *t, ac_train_result *res, ac_err *err)
{
    const ac_train_options *o = t->opt;
    const ac_train_config *tc = &t->cfg.training;
    session_stats s = {.t0 = now_s(), .last_loss = NAN, .last_lr = NAN};
    ac_train_progress ev;
    fill_progress(t, &s, AC_TRAIN_EVENT_BEGIN, &ev);
    report(t, &ev);
    /* A stop cut the evaluation of this step short: it comes first. */
    if (t->state.eval_pending) {
        if (evaluate_and_save(t, &s, res, err))
            return -1;
        if (t->state.eval_pending) /* cut short again */
            return interrupted(t, res, err);
    }

    for (;;) {
        if (t->state.epoch >= tc->epochs) {
            res->status = AC_TRAIN_FINISHED;
            break;
        }
        if (t->n_val > 0 && tc->patience > 0 && t->state.bad_evals >= tc->patience) {
            res->status = AC_TRAIN_EARLY_STOPPED;
            break;
        }
        if (o->max_steps > 0 && t->state.step >= o->max_steps) {
            res->status = AC_TRAIN_MAX_STEPS;
            break;
        }
        /* Ranks stop at the same step: at the one where any of them was asked. */
        if (t->comm ? t->stop_agreed : o->stop && *o->stop)
            return interrupted(t, res, err);
        if (t->plan_epoch != t->state.epoch) {
            ac_batch_plan_free(&t->plan);
            t->plan_epoch = -1;
            if (make_epoch_plan(t, t->state.epoch, err))
                return ac_err_prefix(err, "batching epoch %d", t->state.epoch + 1);
            if ((long)t->plan.n_batches != t->batches_per_epoch)
                return ac_err_set(err, "internal error: epoch %d has %lld batches, not %ld",
                                  t->state.epoch + 1, (long long)t->plan.n_batches,
                                  t->batches_per_epoch);
        }

        int epoch_before = t->state.epoch;
        res->step = t->state.step;
        int step_rc = train_step(t, &s, err);
        if (step_rc < 0)
            return -1;
        if (step_rc == TRAIN_STEP_DROPPED)
            return interrupted(t, res, err);
        res->step = t->state.step;
        if (o->after_step)
            o->after_step(&t->model, t->state.step, o->after_step_user);
        fill_progress(t, &s, AC_TRAIN_EVENT_STEP, &ev);
        report(t, &ev);

        int epoch_ended = t->state.epoch != epoch_before;
        int due = tc->eval_every > 0 ? t->state.step % tc->eval_every == 0 : epoch_ended;
        /* The run's last step is always evaluated, so its model is kept. */
        if (t->state.epoch >= tc->epochs || (o->max_steps > 0 && t->state.step >= o->max_steps))
            due = 1;
        if (due && evaluate_and_save(t, &s, res, err))
            return -1;
        /* The evaluation was cut short by a stop: before the checks above,
         * which could otherwise end the run as finished without it. */
        if (t->state.eval_pending)
            return interrupted(t, res, err);
    }
    return 0;
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
    int rc = opt->resume && opt->out_dir ? recover_checkpoint(&t, err) : 0;
    if (rc == 0)
        rc = setup(&t, err);
    if (t.comm && agree_on_setup(&t, rc != 0, err))
        rc = -1;
    if (rc == 0) {
        res->step = t.state.step;
        rc = run(&t, res, err);
    }
    res->step = t.state.step;
    res->total_steps = t.total_steps;
    res->epoch = t.state.epoch;
    if (t.n_val > 0 && t.state.best_step >= 0) {
        res->best_val_accuracy = t.state.best_metric;
        res->best_step = t.state.best_step;
    } else if (t.n_val == 0) {
        res->best_step = t.state.best_step;
    }
    res->model_saved = t.model_saved;
    res->peer_failed = t.peer_failed;
    res->failure_shared = t.failure_shared;
    trainer_free(&t);
    return rc;
}
