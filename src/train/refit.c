/* training.refit: a driver around two unchanged runs. The first run holds
 * out validation rows and chooses, by its best evaluation, how many epochs
 * the recipe wants; the second trains from the start on every row for that
 * many epochs and becomes the model. On a few thousand short rows the tenth
 * held out is worth more than the early stop's fine choice of step
 * (benchmarks/EXPERIMENTS.md, "Refit on every row"). The second run's
 * config.json says exactly how it was trained (val_split 0, those epochs),
 * so training with it gives the same model; the first run's figures stay in
 * metrics.jsonl and training.svg. */
#include "attnctl/train.h"

#include <errno.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/io.h"
#include "attnctl/util.h"
#include "trainer_internal.h"

/* The files of the second run that make the model, moved over the first's. */
static const char *const MODEL_FILES[] = {"config.json", "vocab.txt", "model.safetensors"};

int ac_train_refit_plan(const char *out_dir, const ac_train_result *selection, ac_comm *comm,
                        ac_refit_plan *plan, ac_err *err)
{
    memset(plan, 0, sizeof *plan);
    if (selection->status != AC_TRAIN_FINISHED && selection->status != AC_TRAIN_EARLY_STOPPED)
        return 0;
    /* The other ranks read config.json once rank 0, which writes it, is here. */
    uint64_t here = 0;
    if (comm && comm->or_words(comm, &here, 1, err))
        return -1;
    ac_config cfg;
    ac_config_defaults(&cfg);
    if (ac_model_dir_load_config(&cfg, out_dir, err)) {
        ac_config_free(&cfg);
        return ac_err_prefix(err, "reading the run's settings for the refit");
    }
    const ac_train_config *tc = &cfg.training;
    int want = tc->refit == 1 && tc->val_split > 0 && selection->best_step > 0 &&
               selection->best_val_accuracy >= 0 && cfg.model.objective ==
               AC_OBJECTIVE_CLASSIFICATION;
    if (want) {
        plan->epochs = tc->epochs;
        /* One run: the epoch of its best evaluation (rounded up when
         * evaluations fall inside epochs). Several members each ran every
         * epoch of their own, so all of them. */
        const long per_epoch =
            tc->members <= 1 && tc->epochs > 0 ? selection->total_steps / tc->epochs : 0;
        if (per_epoch > 0) {
            long e = (selection->best_step + per_epoch - 1) / per_epoch;
            plan->epochs = (int)(e < 1 ? 1 : e > tc->epochs ? tc->epochs : e);
        }
        plan->val_accuracy = selection->best_val_accuracy;
    }
    ac_config_free(&cfg);
    return want;
}

/* The second run had no rows to fit a temperature on: its config.json
 * takes the first run's, fitted on the validation rows. */
static int keep_temperature(const char *dir, float temperature, ac_err *err)
{
    ac_config cfg;
    ac_config_defaults(&cfg);
    char *path = ac_path_join(dir, "config.json", err);
    int rc = path ? ac_model_dir_load_config(&cfg, dir, err) : -1;
    char *json = NULL;
    if (rc == 0) {
        cfg.model.temperature = temperature;
        json = ac_config_to_json(&cfg);
        rc = json ? ac_write_file_atomic(path, json, strlen(json), err)
                  : ac_err_set(err, "out of memory");
    }
    free(json);
    free(path);
    ac_config_free(&cfg);
    return rc;
}

/* Moves the second run's model files into out_dir; config.json first and
 * the weights last, each an atomic rename. */
static int publish(const char *from, const char *out_dir, ac_err *err)
{
    for (size_t i = 0; i < sizeof MODEL_FILES / sizeof MODEL_FILES[0]; i++) {
        char *src = ac_path_join(from, MODEL_FILES[i], err);
        char *dst = src ? ac_path_join(out_dir, MODEL_FILES[i], err) : NULL;
        int rc = dst && rename(src, dst) != 0 ? errno : 0;
        free(src);
        free(dst);
        if (!dst)
            return -1;
        if (rc)
            return ac_err_set(err, "%s: moving the refit model's %s: %s", out_dir,
                              MODEL_FILES[i], strerror(rc));
    }
    return ac_fsync_dir(out_dir, err);
}

int ac_train_refit(const ac_train_options *selection, const ac_refit_plan *plan,
                   ac_train_result *res, ac_err *err)
{
    memset(res, 0, sizeof *res);
    ac_config cfg;
    ac_config_defaults(&cfg);
    if (ac_model_dir_load_config(&cfg, selection->out_dir, err)) {
        ac_config_free(&cfg);
        return ac_err_prefix(err, "reading the run's settings for the refit");
    }
    /* Every row, the chosen epochs; the rest as the first run resolved it
     * (its temperature too: no rows are left to fit one on). */
    cfg.training.val_split = 0.0;
    cfg.training.epochs = plan->epochs;
    char *dir = ac_path_join(selection->out_dir, AC_REFIT_SUBDIR, err);
    if (!dir) {
        ac_config_free(&cfg);
        return -1;
    }
    /* Only rank 0 touches files (shared file system: docs/parallel.md). */
    const int writer = !selection->comm || selection->comm->rank == 0;
    if (writer)
        ac_remove_tree(dir); /* what an interrupted refit left */
    ac_train_options o = *selection;
    o.config = &cfg;
    o.val = NULL;
    o.val_path = NULL;
    o.out_dir = dir;
    o.resume = 0;
    o.max_steps = 0;
    o.drop_finished_state = 1;
    /* A run started from a pretrained encoder starts its refit there too,
     * also when it was resumed (the directory is in its provenance). */
    if (!o.init_dir && cfg.provenance.init_model[0])
        o.init_dir = cfg.provenance.init_model;
    int rc = ac_train(&o, res, err);
    if (rc == 0 && (res->status == AC_TRAIN_FINISHED || res->status == AC_TRAIN_EARLY_STOPPED)) {
        int failed = writer && (keep_temperature(dir, cfg.model.temperature, err) ||
                                publish(dir, selection->out_dir, err));
        /* Every rank learns whether rank 0's move failed, so all return the same. */
        trainer_agreement a;
        rc = processes_agree(selection->comm, failed, 0, NULL, 0, "rank 0 failed", &a, err);
        res->peer_failed = a.peer_failed;
        res->failure_shared = a.failure_shared;
    }
    /* Finished and moved, interrupted or failed: the first run's model
     * stays whole in out_dir unless the move completed. */
    if (writer)
        ac_remove_tree(dir);
    free(dir);
    ac_config_free(&cfg);
    return rc;
}
