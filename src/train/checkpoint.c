/* What the trainer keeps on disk besides the log: the best model in the
 * output directory, and the resumable checkpoint (model, optimizer state,
 * averaged weights) in checkpoint/, with its recovery after a save that was
 * cut short. Saves are atomic (ac_model_dir_save), so a crash leaves the
 * previous files whole. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trainer_internal.h"

static void set_date(ac_provenance *p)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(p->date, sizeof p->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int trainer_save_best(trainer *t, ac_err *err)
{
    /* A member's kept weights wait for the average; the average is the model. */
    if (trainer_has_members(t) && t->state.member < t->cfg.training.members)
        return trainer_save_member(t, err);
    if (!t->writer) {
        t->model_saved = 1;
        return 0;
    }
    t->cfg.provenance.best_val_accuracy = t->n_val > 0 ? t->state.best_metric : -1.0;
    set_date(&t->cfg.provenance);
    if (t->obj->save_model ? t->obj->save_model(t, err) : trainer_write_model(t, err))
        return -1;
    t->model_saved = 1;
    return 0;
}

int trainer_write_model(trainer *t, ac_err *err)
{
    if (ac_model_dir_save(t->opt->out_dir, &t->cfg, &t->vocab, &t->model, NULL, NULL, NULL, err))
        return ac_err_prefix(err, "saving the model to %s", t->opt->out_dir);
    return 0;
}

/* checkpoint/ema-STEP.safetensors: named by the run's step (members
 * counted one after another), so that the file of the checkpoint on disk
 * survives a crash while the next one is written. */
static char *ema_path(const trainer *t, long step, ac_err *err)
{
    char name[64];
    snprintf(name, sizeof name, "ema-%ld.safetensors", step);
    return ac_path_join(t->ckpt_dir, name, err);
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
    char *path = ema_path(t, trainer_global_step(t), err);
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

/* Removes checkpoint/ema-*.safetensors but the file named keep_name (NULL:
 * every one). */
static void remove_ema_files(const trainer *t, const char *keep_name)
{
    DIR *d = opendir(t->ckpt_dir);
    if (!d)
        return;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        const char *n = ent->d_name;
        size_t len = strlen(n);
        if (strncmp(n, "ema-", 4) == 0 && len > 16 &&
            strcmp(n + len - 12, ".safetensors") == 0 && (!keep_name || strcmp(n, keep_name) != 0)) {
            char *p = ac_path_join(t->ckpt_dir, n, NULL);
            if (p)
                unlink(p);
            free(p);
        }
    }
    closedir(d);
}

/* Removes the averaged weights of every other step. */
static void remove_other_ema(const trainer *t)
{
    char *keep = ema_path(t, trainer_global_step(t), NULL);
    if (keep)
        remove_ema_files(t, strrchr(keep, '/') + 1);
    free(keep);
}

static void remove_ema_of_step(const trainer *t, long step)
{
    char *path = ema_path(t, step, NULL);
    if (path)
        unlink(path);
    free(path);
}

/* The model file goes first: a removal cut short then still reads as a
 * finished run (no weights to resume from). Best effort: a file left behind
 * harms nothing, and the run itself succeeded. */
void trainer_drop_finished_state(const trainer *t)
{
    if (!t->writer)
        return;
    static const char *const names[] = {"model.safetensors", "optimizer.safetensors"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *p = ac_path_join(t->ckpt_dir, names[i], NULL);
        if (p)
            unlink(p);
        free(p);
    }
    remove_ema_files(t, NULL);
    trainer_remove_member_files(t);
}

int trainer_load_ema(trainer *t, ac_err *err)
{
    const ac_model *m = &t->model;
    char *path = ema_path(t, trainer_global_step(t), err);
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
int trainer_save_checkpoint_as(trainer *t, int stopping, ac_err *err)
{
    if (!t->writer) {
        t->ckpt_step = trainer_global_step(t);
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
    if (rc) {
        /* the last checkpoint stays; the average just written belongs to none */
        if (t->have_ema && t->ckpt_step != trainer_global_step(t))
            remove_ema_of_step(t, trainer_global_step(t));
        return ac_err_prefix(err, "saving the checkpoint to %s", t->ckpt_dir);
    }
    t->ckpt_step = trainer_global_step(t);
    if (t->have_ema)
        remove_other_ema(t);
    return 0;
}

int trainer_save_checkpoint(trainer *t, ac_err *err)
{
    return trainer_save_checkpoint_as(t, 0, err);
}

/* Before a resume: a checkpoint save cut short between its renames (killed,
 * e.g. by mpirun one second after Ctrl-C) is finished from its temp files by
 * the writer (ac_checkpoint_recover), before any process reads the
 * checkpoint. Every process calls it first thing, so that the agreement
 * below meets no other collective. */
int trainer_recover_checkpoint(trainer *t, ac_err *err)
{
    int failed = 0;
    if (t->writer) {
        char *dir = ac_path_join(t->opt->out_dir, AC_CHECKPOINT_SUBDIR, err);
        int completed;
        failed = !dir || ac_checkpoint_recover(dir, &completed, err) != 0;
        if (dir && failed)
            ac_err_prefix(err, "resume");
        free(dir);
    }
    trainer_agreement agreed;
    return trainer_agree(t, failed, 0, NULL, 0,
                         "another process failed to start training (its message is above)",
                         &agreed, err);
}

int trainer_non_finite_error(const trainer *t, long step, const char *what, double v, ac_err *err)
{
    char where[160];
    if (t->opt->out_dir_discarded_on_failure)
        snprintf(where, sizeof where, "nothing was kept");
    else if (t->ckpt_step >= 0)
        snprintf(where, sizeof where, "the checkpoint of step %ld is intact", t->ckpt_step);
    else
        snprintf(where, sizeof where, "no checkpoint was saved yet");
    return ac_err_set(err, "step %ld: %s is %s (learning rate too high?); training stopped, %s",
                      step, what, isnan(v) ? "NaN" : "infinite", where);
}
