/* attnctl train --autotune: a search of the training recipe on the
 * validation rows within a budget of time or of optimizer steps (fastText's
 * -autotune-validation / -autotune-duration). Never prints: each trial is
 * reported through a callback, errors through ac_err.
 *
 * The search. Trial 1 trains the configuration as given (the plain defaults
 * when no option was given), so the result is never worse on validation
 * than no search. Members multiply a trial's time, so the recipe is searched
 * at one member. Coordinate by coordinate, a candidate is the best settings
 * so far, at one member, with one setting changed to another value of a
 * small space (AC_TUNE_*: the NB start of the wide path, epochs, the weight
 * average's decay, the learning rate, the wide path's n-gram order, crops,
 * dropout); it replaces the best when its validation accuracy is strictly
 * higher. The first round goes through the values in a fixed order, those
 * that moved accuracy most on short texts first (so a small budget tries
 * them); later rounds in an order drawn from training.seed. Rounds repeat
 * until one brings no improvement (at most 4) or the budget runs out. Last,
 * a best at one member is tried with 3 members when that fits. A setting the
 * caller fixes (an explicit option) is not searched; fixed members are kept
 * in every trial. Every trial trains with the same seed, so with the same
 * validation rows, and is deterministic: with a budget in steps the same
 * seed gives the same trials and the same model bitwise.
 *
 * The budget. Trial 1 always runs to its end, whatever the budget (a
 * budget smaller than it trains the defaults). A later candidate starts
 * only when its expected steps fit in what is left of a step budget, or its
 * expected time in what is left of a time budget: its planned steps
 * (members x epochs x batches per epoch) times the share of their plan the
 * trials so far took (early stopping), times their seconds per step for a
 * time. A candidate that does not fit is passed over for the next. A trial
 * that still overruns the budget is stopped and does not count.
 *
 * Files. Trials train into a temporary directory beside out_dir (in its
 * parent, named .NAME.autotune-XXXXXX); the best trial's model directory
 * (without checkpoint/: a search is not resumable) gets autotune.json (the
 * budget and every trial, docs/formats.md) and is renamed to out_dir at the
 * end, so out_dir is either absent (or as empty as it was) or a complete
 * model. Its config.json holds training.refit as the data resolves it: when
 * that is 1, the caller trains the best trial's recipe again on every row
 * (ac_train_refit_plan with r->best_run), as after a plain run; the trials'
 * figures are from their validation rows either way. out_dir must not
 * exist or be an empty directory. A stop (*stop set, Ctrl-C) ends the
 * current trial, which does not count, and keeps the best of the trials
 * before it (none when it comes during trial 1). */
#ifndef ATTNCTL_AUTOTUNE_H
#define ATTNCTL_AUTOTUNE_H

#include "attnctl/train.h"

#define AC_AUTOTUNE_FILE "autotune.json"

/* The settings searched; each is a field of config.json and an option of
 * attnctl train (ac_tune_option). */
typedef enum {
    AC_TUNE_WIDE_NB = 0, /* training.wide_nb */
    AC_TUNE_EPOCHS,      /* training.epochs */
    AC_TUNE_EMA,         /* training.ema */
    AC_TUNE_LR,          /* training.optim.lr ("lr") */
    AC_TUNE_WIDE_ORDER,  /* model.wide_order */
    AC_TUNE_CROP,        /* training.crop_frac */
    AC_TUNE_DROPOUT,     /* model.dropout */
    AC_TUNE_MEMBERS,     /* training.members: 1 while searching, more at the end (below) */
    AC_TUNE_N
} ac_tune_dim;

/* One value per setting, as trained (never AC_AUTO). */
typedef struct {
    double v[AC_TUNE_N];
} ac_tune_settings;

/* The option of attnctl train that sets d ("wide-nb", "epochs", ...) and its
 * key in config.json ("training.wide_nb", ...). */
const char *ac_tune_option(ac_tune_dim d);
const char *ac_tune_key(ac_tune_dim d);

/* A budget: seconds of wall time, or optimizer steps (every trial's, trial 1
 * included); exactly one of them is > 0. */
typedef struct {
    double seconds;
    long steps;
} ac_autotune_budget;

/* "300s", "5m", "1.5h" (a positive number and a unit s, m or h) or
 * "20000steps" (a positive integer). 0, or -1 with err saying what is
 * expected. */
int ac_autotune_budget_parse(const char *text, ac_autotune_budget *b, ac_err *err);

typedef enum {
    AC_TRIAL_START = 0, /* about to train (settings and trial filled) */
    AC_TRIAL_BEST = 1,  /* the best so far (trial 1 always is) */
    AC_TRIAL_WORSE = 2, /* trained; not above the best */
    AC_TRIAL_CUT = 3,   /* stopped by the time budget or a stop: does not count */
    AC_TRIAL_FAILED = 4 /* training failed (message): does not count */
} ac_trial_outcome;

typedef struct {
    int trial;                 /* from 1 */
    ac_trial_outcome outcome;
    ac_tune_settings settings;
    int changed;               /* the setting this trial changed from the best (-1: trial 1) */
    double val_accuracy;       /* BEST, WORSE: its best validation accuracy */
    long steps;                /* optimizer steps it took */
    double seconds;            /* its wall time */
    int best_trial;            /* after this trial (0: none yet) */
    double best_val_accuracy;
    long budget_steps_used;    /* every trial's steps so far */
    double budget_seconds_used;
    const char *message;       /* FAILED: the error */
} ac_autotune_trial;

typedef void (*ac_autotune_trial_fn)(const ac_autotune_trial *t, void *user);

typedef enum {
    AC_AUTOTUNE_CONVERGED = 0,   /* a round without improvement, or no candidates left */
    AC_AUTOTUNE_BUDGET = 1,      /* the budget left no room for more candidates */
    AC_AUTOTUNE_INTERRUPTED = 2, /* *stop was set */
} ac_autotune_end;

typedef struct {
    /* As for ac_train, with out_dir the model directory the search ends in.
     * Each trial uses config, data, stop, progress (its training's events),
     * init_dir, pseudo-labelled rows and the provenance fields; resume and
     * max_steps must be 0, comm one process, and after_step is the search's
     * own. */
    ac_train_options train;
    ac_autotune_budget budget;
    const char *budget_text;   /* as the user gave it: recorded in autotune.json */
    unsigned fixed;            /* bit d set: setting d keeps config's value (an explicit option) */
    ac_autotune_trial_fn on_trial; /* may be NULL */
    void *on_trial_user;
} ac_autotune_options;

typedef struct {
    ac_autotune_end end;
    int n_trials;              /* trials started (cut and failed ones included) */
    int best_trial;            /* 0: none finished (a stop during trial 1) */
    double best_val_accuracy;
    ac_tune_settings best;
    ac_train_result best_run;  /* the best trial's training: what ac_train_refit_plan needs */
    long steps;                /* every trial's optimizer steps */
    double seconds;
    int model_saved;           /* out_dir holds the best trial's model */
} ac_autotune_result;

/* Runs the search. 0 with *r filled (also after a stop: r->end; then
 * r->model_saved says whether a trial had finished), or -1 with err filled
 * (trial 1 failed, out_dir is not empty, a file could not be moved). */
int ac_autotune(const ac_autotune_options *o, ac_autotune_result *r, ac_err *err);

#endif
