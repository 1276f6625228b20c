/* A weight average of members ("model soup", Wortsman et al. 2022): the
 * classifier is trained training.members times from the same initial
 * weights, each member with its own shuffle, crops and dropout, and the
 * model is the mean of the members' kept weights. One member's verdict on a
 * short text moves by points with the seed (the data order decides what a
 * rare n-gram weighs); the mean keeps what the members agree on, at the
 * price of training each one. Members run one after another in the same
 * trainer: the state says which one (state.member), the checkpoint resumes
 * it, and each member's kept weights wait in checkpoint/member-N.safetensors
 * for the average. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnctl/rng.h"
#include "pick_model.h"
#include "trainer_internal.h"

#define MEMBER_START_FILE "member-start.safetensors"

uint64_t trainer_member_seed(const trainer *t)
{
    const uint64_t seed = t->cfg.training.seed;
    if (t->state.member == 0)
        return seed;
    return ac_rng_key(ac_rng_key(seed, STREAM_MEMBER), (uint64_t)t->state.member);
}

long trainer_global_step(const trainer *t)
{
    return t->state.steps_before + t->state.step;
}

int trainer_has_members(const trainer *t)
{
    return t->cfg.training.members > 1;
}

/* checkpoint/member-N.safetensors, N counted from 1 as users count them. */
static char *member_path(const trainer *t, int member, ac_err *err)
{
    char name[64];
    snprintf(name, sizeof name, "member-%d.safetensors", member + 1);
    return ac_path_join(t->ckpt_dir, name, err);
}

/* The model's tensors of params (in the model's layout) into path. */
static int save_weights(const trainer *t, const char *path, const float *params, ac_err *err)
{
    const ac_model *m = &t->model;
    ac_st_entry *entries = calloc((size_t)m->n_tensors, sizeof *entries);
    if (!entries)
        return ac_err_set(err, "out of memory");
    for (int i = 0; i < m->n_tensors; i++) {
        const ac_param_info *p = &m->table[i];
        entries[i] = (ac_st_entry){.name = p->name, .ndim = p->ndim,
                                   .shape = {p->shape[0], p->shape[1]},
                                   .data = params + p->offset};
    }
    int rc = ac_st_save(path, entries, m->n_tensors, NULL, 0, err);
    free(entries);
    return rc;
}

/* Reads path's tensors, which must be exactly the model's, and either copies
 * them into copy_to or adds them into add_to (both in the model's layout). */
static int load_weights(const trainer *t, const char *path, float *copy_to, double *add_to,
                        ac_err *err)
{
    const ac_model *m = &t->model;
    ac_safetensors st;
    if (ac_st_load(&st, path, err))
        return -1;
    int rc = 0;
    if (st.n != m->n_tensors)
        rc = ac_err_set(err, "%s: %d tensors, expected %d", path, st.n, m->n_tensors);
    for (int i = 0; rc == 0 && i < m->n_tensors; i++) {
        const ac_param_info *p = &m->table[i];
        const ac_st_tensor *tt = ac_st_find(&st, p->name);
        const float *src = tt ? ac_st_f32(&st, tt) : NULL;
        if (!src || tt->end - tt->begin != p->numel * sizeof(float)) {
            rc = ac_err_set(err, "%s: tensor \"%s\" is missing or has the wrong size", path,
                            p->name);
        } else if (copy_to) {
            memcpy(copy_to + p->offset, src, p->numel * sizeof(float));
        } else {
            double *dst = add_to + p->offset;
            for (size_t k = 0; k < p->numel; k++)
                dst[k] += (double)src[k];
        }
    }
    ac_st_free(&st);
    return rc;
}

int trainer_save_member_start(trainer *t, ac_err *err)
{
    if (!t->writer)
        return 0;
    char *path = ac_path_join(t->ckpt_dir, MEMBER_START_FILE, err);
    if (!path)
        return -1;
    int rc = save_weights(t, path, t->model.params, err);
    free(path);
    return rc ? ac_err_prefix(err, "saving the members' initial weights") : 0;
}

int trainer_save_member(trainer *t, ac_err *err)
{
    if (!t->writer)
        return 0;
    char *path = member_path(t, t->state.member, err);
    if (!path)
        return -1;
    int rc = save_weights(t, path, t->model.params, err);
    free(path);
    return rc ? ac_err_prefix(err, "saving member %d of %d", t->state.member + 1,
                              t->cfg.training.members)
              : 0;
}

int trainer_next_member(trainer *t, ac_err *err)
{
    char *path = ac_path_join(t->ckpt_dir, MEMBER_START_FILE, err);
    if (!path)
        return -1;
    int rc = load_weights(t, path, t->model.params, NULL, err);
    free(path);
    if (rc)
        return ac_err_prefix(err, "starting member %d of %d", t->state.member + 2,
                             t->cfg.training.members);
    ac_trainer_state *st = &t->state;
    *st = (ac_trainer_state){.seed = st->seed,
                             .best_metric = -1.0,
                             .best_step = -1,
                             .member = st->member + 1,
                             .steps_before = st->steps_before + st->step};
    t->run_seed = trainer_member_seed(t);
    memset(t->m1, 0, t->model.n_params * sizeof *t->m1);
    memset(t->m2, 0, t->model.n_params * sizeof *t->m2);
    if (t->have_ema)
        ac_ema_restart(&t->ema, 0);
    /* The next batches are the new member's (its seed), whatever epoch the
     * last one stopped in. */
    if (t->plan_epoch >= 0) {
        ac_batch_plan_free(&t->plan);
        t->plan_epoch = -1;
    }
    return 0;
}

int trainer_average_members(trainer *t, ac_err *err)
{
    const int members = t->cfg.training.members;
    const size_t n = t->model.n_params;
    double *sum = calloc(n, sizeof *sum);
    if (!sum)
        return ac_err_set(err, "out of memory for the members' average (%.0f MiB)",
                          (double)(n * sizeof *sum) / 1048576.0);
    int rc = 0;
    for (int j = 0; rc == 0 && j < members; j++) {
        char *path = member_path(t, j, err);
        rc = path ? load_weights(t, path, NULL, sum, err) : -1;
        free(path);
    }
    if (rc == 0)
        for (size_t i = 0; i < n; i++)
            t->model.params[i] = (float)(sum[i] / members);
    free(sum);
    return rc ? ac_err_prefix(err, "averaging the %d members", members) : 0;
}

int trainer_load_member(trainer *t, int member, ac_err *err)
{
    char *path = member_path(t, member, err);
    int rc = path ? load_weights(t, path, t->model.params, NULL, err) : -1;
    free(path);
    return rc ? ac_err_prefix(err, "reading member %d of %d", member + 1,
                              t->cfg.training.members)
              : 0;
}

int trainer_pick_model(double mean_accuracy, const double *member_accuracy, int members)
{
    int best = 0;
    for (int j = 0; j < members; j++) {
        if (!(mean_accuracy < member_accuracy[j]))
            return -1; /* the mean is at least level with one member: it stays */
        if (member_accuracy[j] > member_accuracy[best])
            best = j;
    }
    return best;
}

void trainer_remove_member_files(const trainer *t)
{
    if (!t->writer)
        return;
    char *start = ac_path_join(t->ckpt_dir, MEMBER_START_FILE, NULL);
    if (start)
        unlink(start);
    free(start);
    for (int j = 0; j < t->cfg.training.members; j++) {
        char *path = member_path(t, j, NULL);
        if (path)
            unlink(path);
        free(path);
    }
}
