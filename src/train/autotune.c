/* train --autotune: the search driver over ac_train (attnctl/autotune.h
 * says what it searches, how the budget is spent and which files it
 * writes). Beside the trainer's own driver (trainer.c), which it calls once
 * a trial. */
#include "attnctl/autotune.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnctl/io.h"
#include "attnctl/rng.h"
#include "attnctl/util.h"

/* The space: the values each setting may take. Around the defaults, from
 * what moved accuracy on short texts (benchmarks/EXPERIMENTS.md, issue 32). */
static const struct {
    const char *option, *key;
    int is_float;  /* stored as a float in ac_config (compared as such) */
    int n;
    double values[3];
} SPACE[AC_TUNE_N] = {
    [AC_TUNE_WIDE_NB] = {"wide-nb", "training.wide_nb", 1, 3, {0, 0.25, 1}},
    [AC_TUNE_EPOCHS] = {"epochs", "training.epochs", 0, 3, {4, 8, 16}},
    [AC_TUNE_EMA] = {"ema", "training.ema", 1, 3, {0, 0.99, 0.999}},
    [AC_TUNE_LR] = {"lr", "training.lr", 1, 3, {5e-4, 1e-3, 2e-3}},
    [AC_TUNE_WIDE_ORDER] = {"wide", "model.wide_order", 0, 2, {2, 3}},
    [AC_TUNE_CROP] = {"crop", "training.crop_frac", 0, 2, {0, 0.5}},
    [AC_TUNE_DROPOUT] = {"dropout", "model.dropout", 1, 2, {0.1, 0.3}},
    [AC_TUNE_MEMBERS] = {"members", "training.members", 0, 2, {1, 3}},
};

/* Bounds of the search: rounds of candidates, and trials in all. */
#define MAX_ROUNDS 4
#define MAX_TRIALS 64
#define MAX_PAIRS 32
/* Stream of the candidates' order under training.seed. */
#define ORDER_STREAM 0x4155544fULL

const char *ac_tune_option(ac_tune_dim d)
{
    return d < AC_TUNE_N ? SPACE[d].option : "?";
}

const char *ac_tune_key(ac_tune_dim d)
{
    return d < AC_TUNE_N ? SPACE[d].key : "?";
}

int ac_autotune_budget_parse(const char *text, ac_autotune_budget *b, ac_err *err)
{
    static const char expected[] =
        "a duration such as 90s, 5m or 1.5h, or a step count such as 20000steps";
    memset(b, 0, sizeof *b);
    if (!text || !((*text >= '0' && *text <= '9') || *text == '.'))
        return ac_err_set(err, "%s", expected);
    size_t n = strlen(text);
    if (n > 5 && strcmp(text + n - 5, "steps") == 0) {
        long steps = 0;
        for (size_t i = 0; i < n - 5; i++) {
            if (text[i] < '0' || text[i] > '9' || steps > (LONG_MAX - 9) / 10)
                return ac_err_set(err, "%s", expected);
            steps = steps * 10 + (text[i] - '0');
        }
        if (steps < 1)
            return ac_err_set(err, "%s", expected);
        b->steps = steps;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || !(v > 0) || !isfinite(v) || end[0] == '\0' || end[1] != '\0')
        return ac_err_set(err, "%s", expected);
    double unit = end[0] == 's' ? 1 : end[0] == 'm' ? 60 : end[0] == 'h' ? 3600 : 0;
    if (unit == 0 || v * unit > 1e9)
        return ac_err_set(err, "%s", expected);
    b->seconds = v * unit;
    return 0;
}

/* ----------------------------------------------------------- settings */

/* x as the configuration stores it, printed short and read back (0.99, not
 * 0.9900000095): the form settings are compared and recorded in. */
static double stored(ac_tune_dim d, double x)
{
    char text[32];
    if (SPACE[d].is_float)
        snprintf(text, sizeof text, "%g", (double)(float)x);
    else
        snprintf(text, sizeof text, "%g", x);
    return strtod(text, NULL);
}

static void settings_of(const ac_config *c, ac_tune_settings *s)
{
    s->v[AC_TUNE_WIDE_NB] = stored(AC_TUNE_WIDE_NB, c->training.wide_nb);
    s->v[AC_TUNE_EPOCHS] = c->training.epochs;
    s->v[AC_TUNE_EMA] = stored(AC_TUNE_EMA, c->training.ema);
    s->v[AC_TUNE_LR] = stored(AC_TUNE_LR, c->training.optim.lr);
    s->v[AC_TUNE_WIDE_ORDER] = c->model.wide_order;
    s->v[AC_TUNE_CROP] = stored(AC_TUNE_CROP, c->training.crop_frac);
    s->v[AC_TUNE_DROPOUT] = stored(AC_TUNE_DROPOUT, c->model.dropout);
    s->v[AC_TUNE_MEMBERS] = c->training.members == AC_AUTO ? AC_AUTO
                            : c->training.members > 1     ? c->training.members
                                                          : 1;
}

static void apply_settings(ac_config *c, const ac_tune_settings *s)
{
    c->training.wide_nb = (float)s->v[AC_TUNE_WIDE_NB];
    c->training.epochs = (int)s->v[AC_TUNE_EPOCHS];
    c->training.ema = (float)s->v[AC_TUNE_EMA];
    c->training.optim.lr = (float)s->v[AC_TUNE_LR];
    c->model.wide_order = (int)s->v[AC_TUNE_WIDE_ORDER];
    c->training.crop_frac = s->v[AC_TUNE_CROP];
    c->model.dropout = (float)s->v[AC_TUNE_DROPOUT];
    c->training.members = (int)s->v[AC_TUNE_MEMBERS];
}

static int same_settings(const ac_tune_settings *a, const ac_tune_settings *b)
{
    for (int d = 0; d < AC_TUNE_N; d++)
        if (a->v[d] != b->v[d])
            return 0;
    return 1;
}

static cJSON *settings_json(const ac_tune_settings *s)
{
    cJSON *o = cJSON_CreateObject();
    for (int d = 0; o && d < AC_TUNE_N; d++)
        cJSON_AddNumberToObject(o, SPACE[d].option, s->v[d]);
    return o;
}

/* --------------------------------------------------------------- files */

/* 1: dir does not exist or is an empty directory; 0: it holds something
 * (or is not a directory). */
static int absent_or_empty(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return errno == ENOENT;
    if (!S_ISDIR(st.st_mode))
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int empty = 1;
    for (struct dirent *e; empty && (e = readdir(d));)
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    return empty;
}

/* out_dir without trailing slashes, split into its parent and its name. */
static int split_dir(const char *out_dir, char **parent, char **name, ac_err *err)
{
    size_t n = strlen(out_dir);
    while (n > 1 && out_dir[n - 1] == '/')
        n--;
    size_t slash = n;
    while (slash > 0 && out_dir[slash - 1] != '/')
        slash--;
    if (slash == n)
        return ac_err_set(err, "%s: not a directory name for a model", out_dir);
    *name = strndup(out_dir + slash, n - slash);
    *parent = slash == 0 ? strdup(".") : strndup(out_dir, slash > 1 ? slash - 1 : 1);
    if (!*name || !*parent) {
        free(*name);
        free(*parent);
        return ac_err_set(err, "out of memory");
    }
    return 0;
}

/* -------------------------------------------------------------- search */

typedef struct {
    const ac_autotune_options *o;
    ac_autotune_result *r;
    char *tmp;                  /* the temporary directory of the trials */
    char *best_dir;             /* tmp/best: the best trial's model */
    volatile sig_atomic_t stop; /* the trial's stop: the user's, or the time budget's */
    double t0, deadline;        /* deadline 0: none (trial 1, or a step budget) */
    long batches_per_epoch;     /* from trial 1 */
    long counted_steps;         /* steps, planned steps and seconds of the trials */
    long counted_planned;       /* that ran to their end (early stops make steps < planned) */
    double counted_seconds;
    int budget_hit;             /* a candidate did not fit, or a trial overran */
    int user_stopped;
    ac_tune_settings tried[MAX_TRIALS];
    int n_tried;
    unsigned fixed;
    cJSON *trials;              /* autotune.json's list */
} tuner;

static void trial_after_step(ac_model *m, long step, void *user)
{
    tuner *tu = user;
    const ac_train_options *base = &tu->o->train;
    if (base->stop && *base->stop) {
        tu->stop = *base->stop;
        tu->user_stopped = 1;
    }
    if (tu->deadline > 0 && ac_now_s() > tu->deadline)
        tu->stop = 1;
    if (base->after_step)
        base->after_step(m, step, base->after_step_user);
}

static const char *outcome_name(ac_trial_outcome k)
{
    switch (k) {
    case AC_TRIAL_START: return "start";
    case AC_TRIAL_BEST: return "best";
    case AC_TRIAL_WORSE: return "worse";
    case AC_TRIAL_CUT: return "cut";
    case AC_TRIAL_FAILED: return "failed";
    }
    return "?";
}

static void record_trial(tuner *tu, const ac_autotune_trial *ev)
{
    cJSON *t = cJSON_CreateObject();
    if (!t)
        return;
    cJSON_AddNumberToObject(t, "trial", ev->trial);
    cJSON_AddStringToObject(t, "outcome", outcome_name(ev->outcome));
    if (ev->changed >= 0)
        cJSON_AddStringToObject(t, "changed", SPACE[ev->changed].option);
    else
        cJSON_AddNullToObject(t, "changed");
    cJSON_AddItemToObject(t, "settings", settings_json(&ev->settings));
    if (ev->outcome == AC_TRIAL_BEST || ev->outcome == AC_TRIAL_WORSE)
        cJSON_AddNumberToObject(t, "val_accuracy", ev->val_accuracy);
    else
        cJSON_AddNullToObject(t, "val_accuracy");
    cJSON_AddNumberToObject(t, "steps", (double)ev->steps);
    cJSON_AddNumberToObject(t, "seconds", round(ev->seconds * 10) / 10);
    if (ev->message)
        cJSON_AddStringToObject(t, "error", ev->message);
    cJSON_AddItemToArray(tu->trials, t);
}

static void report(tuner *tu, ac_autotune_trial *ev)
{
    ev->best_trial = tu->r->best_trial;
    ev->best_val_accuracy = tu->r->best_val_accuracy;
    ev->budget_steps_used = tu->r->steps;
    ev->budget_seconds_used = tu->r->seconds;
    if (ev->outcome != AC_TRIAL_START)
        record_trial(tu, ev);
    if (tu->o->on_trial)
        tu->o->on_trial(ev, tu->o->on_trial_user);
}

/* Trains one trial into tmp/trial-N; keeps it as tmp/best when it is the
 * best so far. s NULL: trial 1, the configuration as given. 0, or -1 when
 * the search cannot go on (err). */
static int run_trial(tuner *tu, const ac_tune_settings *s, int changed, ac_err *err)
{
    const ac_autotune_options *o = tu->o;
    ac_autotune_result *r = tu->r;
    int index = ++r->n_trials;
    char name[32];
    snprintf(name, sizeof name, "trial-%d", index);
    char *dir = ac_path_join(tu->tmp, name, err);
    if (!dir)
        return -1;
    ac_config cfg = *o->train.config; /* shallow: the trainer reads it only */
    if (s)
        apply_settings(&cfg, s);
    /* Trials are compared on their validation rows, each by the model
     * chosen on them; training.refit stays as resolved for the data, and
     * the caller refits the best trial alone (ac_train_refit_plan and
     * ac_train_refit with ac_autotune_result.best_run). */
    ac_train_options to = o->train;
    to.config = &cfg;
    to.out_dir = dir;
    to.resume = 0;
    to.stop = &tu->stop;
    to.after_step = trial_after_step;
    to.after_step_user = tu;
    to.drop_finished_state = 1;
    to.out_dir_discarded_on_failure = 1;
    /* Trial 1 runs to its end; a later one within what is left (a guard:
     * candidates start only when they fit). */
    to.max_steps = s && o->budget.steps > 0 ? o->budget.steps - r->steps : 0;
    tu->deadline = s && o->budget.seconds > 0 ? tu->t0 + o->budget.seconds : 0;
    tu->stop = 0;

    ac_autotune_trial ev;
    memset(&ev, 0, sizeof ev);
    ev.trial = index;
    ev.changed = changed;
    ev.val_accuracy = NAN;
    if (s)
        ev.settings = *s;
    else
        settings_of(&cfg, &ev.settings); /* AC_AUTO until trained */
    ev.outcome = AC_TRIAL_START;
    report(tu, &ev);

    double start = ac_now_s();
    ac_train_result res;
    ac_err terr = {{0}};
    int rc = ac_train(&to, &res, &terr);
    ev.seconds = ac_now_s() - start;
    ev.steps = res.step;
    r->steps += res.step;
    r->seconds = ac_now_s() - tu->t0;
    if (tu->user_stopped)
        tu->stop = 1;

    if (rc != 0) {
        ac_remove_tree(dir);
        free(dir);
        if (!s) {
            ac_err_set(err, "--autotune: trial 1 (the options as given) failed, so the search "
                            "has no start: %s", terr.msg);
            return -1;
        }
        ev.outcome = AC_TRIAL_FAILED;
        ev.message = terr.msg;
        report(tu, &ev);
        return 0;
    }
    if (res.status == AC_TRAIN_INTERRUPTED || res.status == AC_TRAIN_MAX_STEPS) {
        ac_remove_tree(dir);
        free(dir);
        if (!tu->user_stopped)
            tu->budget_hit = 1;
        ev.outcome = AC_TRIAL_CUT;
        report(tu, &ev);
        return 0;
    }
    if (res.best_val_accuracy < 0) {
        ac_remove_tree(dir);
        free(dir);
        return ac_err_set(err, "--autotune needs validation rows: a --val-split above 0 or a "
                               "--val-file");
    }
    tu->counted_steps += res.step;
    tu->counted_planned += res.total_steps;
    tu->counted_seconds += ev.seconds;
    if (!s) {
        /* The settings as trained (the data's choices included), and the
         * batches of an epoch, from which later trials' steps are planned. */
        ac_config trained;
        ac_config_defaults(&trained);
        if (ac_model_dir_load_config(&trained, dir, err)) {
            ac_config_free(&trained);
            ac_remove_tree(dir);
            free(dir);
            return -1;
        }
        settings_of(&trained, &ev.settings);
        ac_config_free(&trained);
        long runs = (long)ev.settings.v[AC_TUNE_MEMBERS] * (long)ev.settings.v[AC_TUNE_EPOCHS];
        tu->batches_per_epoch = runs > 0 ? res.total_steps / runs : 0;
    }
    ev.val_accuracy = res.best_val_accuracy;
    if (!s || res.best_val_accuracy > r->best_val_accuracy) {
        ac_remove_tree(tu->best_dir);
        if (rename(dir, tu->best_dir) != 0) {
            int e = errno;
            ac_remove_tree(dir);
            free(dir);
            return ac_err_set(err, "%s: cannot rename a trial's model: %s", tu->best_dir,
                              strerror(e));
        }
        r->best_trial = index;
        r->best_val_accuracy = res.best_val_accuracy;
        r->best = ev.settings;
        r->best_run = res;
        ev.outcome = AC_TRIAL_BEST;
    } else {
        ac_remove_tree(dir);
        ev.outcome = AC_TRIAL_WORSE;
    }
    free(dir);
    if (tu->n_tried < MAX_TRIALS)
        tu->tried[tu->n_tried++] = ev.settings;
    report(tu, &ev);
    return 0;
}

static int was_tried(const tuner *tu, const ac_tune_settings *s)
{
    for (int i = 0; i < tu->n_tried; i++)
        if (same_settings(&tu->tried[i], s))
            return 1;
    return 0;
}

/* Whether candidate s fits in what is left of the budget: its planned
 * steps (members x epochs x batches per epoch) times the share of the
 * planned steps the trials so far took (early stopping ends most before
 * their plan), and for a time budget times their seconds per step. Only
 * steps, so deterministic, under a budget in steps. */
static int fits(const tuner *tu, const ac_tune_settings *s)
{
    const ac_autotune_budget *b = &tu->o->budget;
    double planned = s->v[AC_TUNE_MEMBERS] * s->v[AC_TUNE_EPOCHS] *
                     (double)tu->batches_per_epoch;
    double share = tu->counted_planned > 0
                       ? (double)tu->counted_steps / (double)tu->counted_planned
                       : 1.0;
    double steps = planned * share;
    if (b->steps > 0)
        return steps <= (double)(b->steps - tu->r->steps);
    double per_step = tu->counted_steps > 0 ? tu->counted_seconds / (double)tu->counted_steps
                                            : 0.0;
    return steps * per_step <= b->seconds - (ac_now_s() - tu->t0);
}

/* The first round's order: the values that moved accuracy most on short
 * texts first (benchmarks/EXPERIMENTS.md: the NB start, then epochs, crops,
 * the learning rate, the average's decay), so that a small budget tries
 * them; a value equal to the best's is passed over. */
static const struct {
    ac_tune_dim d;
    int k; /* index in SPACE[d].values */
} FIRST_ROUND[] = {
    {AC_TUNE_WIDE_NB, 1},    {AC_TUNE_WIDE_NB, 2}, {AC_TUNE_EPOCHS, 2},  {AC_TUNE_CROP, 0},
    {AC_TUNE_LR, 2},         {AC_TUNE_EMA, 2},     {AC_TUNE_DROPOUT, 0}, {AC_TUNE_LR, 0},
    {AC_TUNE_EPOCHS, 0},     {AC_TUNE_WIDE_ORDER, 0}, {AC_TUNE_EMA, 0},  {AC_TUNE_EMA, 1},
    {AC_TUNE_EPOCHS, 1},     {AC_TUNE_WIDE_NB, 0}, {AC_TUNE_LR, 1},      {AC_TUNE_WIDE_ORDER, 1},
    {AC_TUNE_CROP, 1},       {AC_TUNE_DROPOUT, 1},
};

/* One round's candidates: (setting, value index) pairs of every searched
 * setting but members; in the first round in FIRST_ROUND's order, in later
 * ones in an order drawn from the seed and the round. */
static int round_pairs(const tuner *tu, int round, int pairs[MAX_PAIRS][2])
{
    int n = 0;
    for (size_t i = 0; i < sizeof FIRST_ROUND / sizeof FIRST_ROUND[0] && n < MAX_PAIRS; i++) {
        if (tu->fixed & (1u << FIRST_ROUND[i].d))
            continue;
        pairs[n][0] = FIRST_ROUND[i].d;
        pairs[n][1] = FIRST_ROUND[i].k;
        n++;
    }
    if (round == 0)
        return n;
    uint64_t key = ac_rng_key(ac_rng_key(tu->o->train.config->training.seed, ORDER_STREAM),
                              (uint64_t)round);
    for (int i = n - 1; i > 0; i--) {
        int j = (int)ac_rng_below(key, (uint64_t)i, (uint64_t)i + 1);
        int a = pairs[i][0], b = pairs[i][1];
        pairs[i][0] = pairs[j][0];
        pairs[i][1] = pairs[j][1];
        pairs[j][0] = a;
        pairs[j][1] = b;
    }
    return n;
}

static int user_stop(const tuner *tu)
{
    return tu->user_stopped || (tu->o->train.stop && *tu->o->train.stop);
}

/* Tries cand (changed: the setting it changes) unless it is the best, was
 * tried or does not fit. *ran: it was trained. 1: the search ends here (a
 * stop, the time is up, no trials left), 0: go on, -1: an error. */
static int try_candidate(tuner *tu, const ac_tune_settings *cand, int changed, int *ran,
                         ac_err *err)
{
    ac_autotune_result *r = tu->r;
    *ran = 0;
    if (user_stop(tu)) {
        r->end = AC_AUTOTUNE_INTERRUPTED;
        return 1;
    }
    if (r->n_trials >= MAX_TRIALS)
        return 1;
    if (same_settings(cand, &r->best) || was_tried(tu, cand))
        return 0;
    if (!fits(tu, cand)) {
        tu->budget_hit = 1;
        return 0;
    }
    if (run_trial(tu, cand, changed, err))
        return -1;
    *ran = 1;
    if (tu->user_stopped) {
        r->end = AC_AUTOTUNE_INTERRUPTED;
        return 1;
    }
    if (tu->budget_hit && tu->o->budget.seconds > 0 &&
        ac_now_s() - tu->t0 >= tu->o->budget.seconds)
        return 1; /* the time is up */
    return 0;
}

/* The candidates after trial 1. Members multiply a trial's time, so unless
 * --members was given the recipe is searched at one member, and a best at
 * one member is tried with more at the end, when that fits. */
static int search(tuner *tu, ac_err *err)
{
    ac_autotune_result *r = tu->r;
    const int members_searched = !(tu->fixed & (1u << AC_TUNE_MEMBERS));
    const double many = SPACE[AC_TUNE_MEMBERS].values[SPACE[AC_TUNE_MEMBERS].n - 1];
    int ran, rc;
    for (int round = 0; round < MAX_ROUNDS; round++) {
        int pairs[MAX_PAIRS][2];
        int n = round_pairs(tu, round, pairs);
        int improved = 0;
        for (int i = 0; i < n; i++) {
            ac_tune_settings cand = r->best;
            int d = pairs[i][0];
            cand.v[d] = stored((ac_tune_dim)d, SPACE[d].values[pairs[i][1]]);
            if (cand.v[d] == r->best.v[d])
                continue; /* the best's value: no change */
            if (members_searched)
                cand.v[AC_TUNE_MEMBERS] = 1;
            int best_before = r->best_trial;
            if ((rc = try_candidate(tu, &cand, d, &ran, err)) != 0)
                return rc < 0 ? -1 : 0;
            improved |= r->best_trial != best_before;
        }
        if (!improved)
            break;
    }
    if (members_searched && r->best.v[AC_TUNE_MEMBERS] == 1) {
        ac_tune_settings more = r->best;
        more.v[AC_TUNE_MEMBERS] = many;
        if ((rc = try_candidate(tu, &more, AC_TUNE_MEMBERS, &ran, err)) != 0)
            return rc < 0 ? -1 : 0;
    }
    return 0;
}

/* The best trial's model directory becomes out_dir: without checkpoint/,
 * with autotune.json, by one rename. */
static int promote(tuner *tu, const char *parent, ac_err *err)
{
    const ac_autotune_options *o = tu->o;
    ac_autotune_result *r = tu->r;
    char *ckpt = ac_path_join(tu->best_dir, AC_CHECKPOINT_SUBDIR, err);
    if (!ckpt)
        return -1;
    ac_remove_tree(ckpt);
    free(ckpt);

    cJSON *root = cJSON_CreateObject();
    if (!root)
        return ac_err_set(err, "out of memory");
    cJSON_AddStringToObject(root, "budget", o->budget_text ? o->budget_text : "");
    if (o->budget.steps > 0)
        cJSON_AddNumberToObject(root, "budget_steps", (double)o->budget.steps);
    else
        cJSON_AddNumberToObject(root, "budget_seconds", o->budget.seconds);
    static const char *const ends[] = {"converged", "budget", "interrupted"};
    cJSON_AddStringToObject(root, "end", ends[r->end]);
    cJSON_AddNumberToObject(root, "steps", (double)r->steps);
    cJSON_AddNumberToObject(root, "seconds", round(r->seconds * 10) / 10);
    cJSON_AddNumberToObject(root, "best_trial", r->best_trial);
    cJSON_AddNumberToObject(root, "best_val_accuracy", r->best_val_accuracy);
    cJSON_AddItemToObject(root, "settings", settings_json(&r->best));
    cJSON_AddItemReferenceToObject(root, "trials", tu->trials);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return ac_err_set(err, "out of memory");
    size_t len = strlen(text);
    char *with_newline = realloc(text, len + 2);
    if (!with_newline) {
        free(text);
        return ac_err_set(err, "out of memory");
    }
    with_newline[len] = '\n';
    with_newline[len + 1] = '\0';
    char *path = ac_path_join(tu->best_dir, AC_AUTOTUNE_FILE, err);
    int rc = path ? ac_write_file_atomic(path, with_newline, len + 1, err) : -1;
    free(path);
    free(with_newline);
    if (rc)
        return -1;
    if (rename(tu->best_dir, o->train.out_dir) != 0)
        return ac_err_set(err, "%s: cannot move the best model there (%s); it is in %s",
                          o->train.out_dir, strerror(errno), tu->best_dir);
    if (ac_fsync_dir(parent, err))
        return -1;
    r->model_saved = 1;
    return 0;
}

int ac_autotune(const ac_autotune_options *o, ac_autotune_result *r, ac_err *err)
{
    memset(r, 0, sizeof *r);
    r->best_val_accuracy = -1.0;
    const ac_train_options *t = &o->train;
    if (!t->config || !t->out_dir || t->resume || t->max_steps > 0 ||
        (t->comm && t->comm->size > 1))
        return ac_err_set(err, "internal error: --autotune takes a fresh run in one process");
    if ((o->budget.steps > 0) == (o->budget.seconds > 0))
        return ac_err_set(err, "internal error: an --autotune budget is steps or seconds");
    if (!absent_or_empty(t->out_dir))
        return ac_err_set(err, "%s is not empty: --autotune moves the best model there at the "
                               "end; choose another --out",
                          t->out_dir);
    char *parent = NULL, *name = NULL;
    if (split_dir(t->out_dir, &parent, &name, err))
        return -1;
    tuner tu;
    memset(&tu, 0, sizeof tu);
    tu.o = o;
    tu.r = r;
    tu.t0 = ac_now_s();
    tu.fixed = o->fixed;
    tu.trials = cJSON_CreateArray();
    size_t n = strlen(parent) + strlen(name) + 32;
    tu.tmp = malloc(n);
    int rc = -1;
    if (!tu.trials || !tu.tmp) {
        ac_err_set(err, "out of memory");
        goto done;
    }
    if (ac_mkdir_p(parent, err))
        goto done;
    snprintf(tu.tmp, n, "%s/.%s.autotune-XXXXXX", parent, name);
    if (!mkdtemp(tu.tmp)) {
        ac_err_set(err, "%s: cannot make a directory for the trials: %s", parent,
                   strerror(errno));
        free(tu.tmp);
        tu.tmp = NULL;
        goto done;
    }
    if (!(tu.best_dir = ac_path_join(tu.tmp, "best", err)))
        goto done;

    if (run_trial(&tu, NULL, -1, err))
        goto done;
    if (r->best_trial == 0) { /* trial 1 was stopped: nothing to keep */
        r->end = AC_AUTOTUNE_INTERRUPTED;
        rc = 0;
        goto done;
    }
    /* Without the wide path (--wide 0) its settings mean nothing. */
    if (r->best.v[AC_TUNE_WIDE_ORDER] == 0)
        tu.fixed |= (1u << AC_TUNE_WIDE_NB) | (1u << AC_TUNE_WIDE_ORDER);
    r->end = AC_AUTOTUNE_CONVERGED;
    if (search(&tu, err))
        goto done;
    if (r->end != AC_AUTOTUNE_INTERRUPTED && tu.budget_hit)
        r->end = AC_AUTOTUNE_BUDGET;
    r->seconds = ac_now_s() - tu.t0;
    if (promote(&tu, parent, err)) {
        if (access(tu.best_dir, F_OK) == 0) { /* keep the model where the message says */
            free(tu.tmp);
            tu.tmp = NULL;
        }
        goto done;
    }
    rc = 0;
done:
    if (tu.tmp) {
        ac_remove_tree(tu.tmp);
        free(tu.tmp);
    }
    free(tu.best_dir);
    cJSON_Delete(tu.trials);
    free(parent);
    free(name);
    return rc;
}
