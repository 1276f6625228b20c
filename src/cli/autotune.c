/* attnctl train --autotune BUDGET: the search of src/train/autotune.c, its
 * trials as a table on stderr (a line a trial; on a terminal also a
 * progress line of the trial being trained) and the winner on stdout. */
#include "autotune.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "attnctl/autotune.h"
#include "attnctl/util.h"
#include "cli.h"
#include "progress.h"

#define REDRAW_S 0.2

int cli_autotune_check(const train_args *a, const ac_config *cfg, int n_ranks)
{
    ac_autotune_budget b;
    ac_err err;
    const char *text = a->v[OPT_AUTOTUNE].s;
    if (ac_autotune_budget_parse(text, &b, &err))
        return cli_usage_error(a->cmd, "--autotune: invalid value '%s' (expected %s)", text,
                               err.msg);
    if (a->v[OPT_MAX_STEPS].set)
        return cli_usage_error(a->cmd, "--max-steps cannot be combined with --autotune (give "
                                       "the budget in steps: --autotune 20000steps)");
    if (cfg->training.val_split <= 0 && !a->v[OPT_VAL_FILE].set)
        return cli_usage_error(a->cmd, "--autotune needs validation rows: a --val-split above "
                                       "0 or a --val-file");
    if (n_ranks > 1)
        return cli_usage_error(a->cmd, "--autotune runs in one process, not under mpirun");
    return 0;
}

typedef struct {
    cli_progress lines;  /* trial 1's start lines (sizes, adapted settings) */
    int bar;             /* stderr is a terminal: a progress line while a trial trains */
    int quiet;
    int trial;           /* being trained */
    int best_trial;
    double best_val_accuracy, t0, last_draw;
    int bar_shown;
} autotune_view;

static void clear_bar(autotune_view *v)
{
    if (v->bar_shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        v->bar_shown = 0;
    }
}

/* Each trial's training events: trial 1's start lines as plain training
 * prints them, then (on a terminal) one line redrawn in place. */
static void on_progress(const ac_train_progress *ev, void *user)
{
    autotune_view *v = user;
    if (v->quiet)
        return;
    if (ev->kind == AC_TRAIN_EVENT_BEGIN && v->trial == 1) {
        cli_progress_callback(ev, &v->lines);
        return;
    }
    if (!v->bar || ev->kind != AC_TRAIN_EVENT_STEP)
        return;
    double now = ac_now_s();
    if (now - v->last_draw < REDRAW_S && ev->step < ev->total_steps)
        return;
    v->last_draw = now;
    char elapsed[32], best[64] = "";
    cli_format_duration(elapsed, sizeof elapsed, now - v->t0);
    if (v->best_trial > 0)
        snprintf(best, sizeof best, " | best %.4f (trial %d)", v->best_val_accuracy,
                 v->best_trial);
    fprintf(stderr, "\r\033[Kautotune %s | trial %d: step %ld/%ld%s", elapsed, v->trial,
            ev->step, ev->total_steps, best);
    fflush(stderr);
    v->bar_shown = 1;
}

/* A setting left to the data is "auto" until trial 1 has resolved it (a
 * trial 1 stopped early shows it so). */
static void print_settings(FILE *f, const ac_tune_settings *s)
{
    for (int d = 0; d < AC_TUNE_N; d++) {
        fprintf(f, "%s--%s ", d ? " " : "", ac_tune_option((ac_tune_dim)d));
        if (s->v[d] == AC_AUTO)
            fputs("auto", f);
        else
            fprintf(f, "%g", s->v[d]);
    }
}

static void on_trial(const ac_autotune_trial *t, void *user)
{
    autotune_view *v = user;
    if (t->outcome == AC_TRIAL_START) {
        v->trial = t->trial;
        return;
    }
    v->best_trial = t->best_trial;
    v->best_val_accuracy = t->best_val_accuracy;
    if (v->quiet)
        return;
    clear_bar(v);
    if (t->trial == 1)
        fprintf(stderr, "attnctl: autotune: trial 1 trains the options as given, then one "
                        "setting at a time changes\n"
                        " trial  val. acc.         steps    time  settings\n");
    char acc[32], time[32];
    switch (t->outcome) {
    case AC_TRIAL_BEST: snprintf(acc, sizeof acc, "%.4f best", t->val_accuracy); break;
    case AC_TRIAL_WORSE: snprintf(acc, sizeof acc, "%.4f", t->val_accuracy); break;
    case AC_TRIAL_CUT: snprintf(acc, sizeof acc, "stopped"); break;
    default: snprintf(acc, sizeof acc, "failed"); break;
    }
    cli_format_duration(time, sizeof time, t->seconds);
    fprintf(stderr, "%6d  %-14s %8ld %7s  ", t->trial, acc, t->steps, time);
    print_settings(stderr, &t->settings);
    fputc('\n', stderr);
    if (t->outcome == AC_TRIAL_FAILED && t->message)
        fprintf(stderr, "        (%s)\n", t->message);
    fflush(stderr);
}

int cli_autotune_run(const train_args *a, const ac_train_options *to,
                     volatile sig_atomic_t *stop_signal, int quiet, ac_train_result *best_run)
{
    ac_autotune_options o;
    memset(&o, 0, sizeof o);
    ac_err err;
    if (ac_autotune_budget_parse(a->v[OPT_AUTOTUNE].s, &o.budget, &err))
        return cli_usage_error(a->cmd, "--autotune: %s", err.msg); /* checked before */
    autotune_view view;
    memset(&view, 0, sizeof view);
    cli_progress_init(&view.lines, quiet);
    view.quiet = quiet;
    view.bar = !quiet && isatty(STDERR_FILENO);
    view.t0 = ac_now_s();
    view.last_draw = -1.0;
    o.train = *to;
    o.train.progress = on_progress;
    o.train.progress_user = &view;
    o.budget_text = a->v[OPT_AUTOTUNE].s;
    /* A setting given as an option is not searched; given as "auto", it
     * is left to the search as when it is not given. */
    for (int d = 0; d < AC_TUNE_N; d++) {
        const opt_value *x = train_setting(a, ac_tune_key((ac_tune_dim)d));
        if (!x)
            return cli_error("internal: no option sets %s", ac_tune_key((ac_tune_dim)d));
        if (x->set && !x->is_auto)
            o.fixed |= 1u << d;
    }
    o.on_trial = on_trial;
    o.on_trial_user = &view;

    ac_autotune_result r;
    int rc = ac_autotune(&o, &r, &err);
    clear_bar(&view);
    if (rc)
        return cli_error("%s", err.msg);
    char took[32];
    cli_format_duration(took, sizeof took, r.seconds);
    int sig_status = *stop_signal == SIGTERM ? CLI_EXIT_SIGTERM : CLI_EXIT_SIGINT;
    if (!r.model_saved) {
        fprintf(stderr, "attnctl: interrupted during trial 1 (the options as given); nothing "
                        "was saved\n");
        return sig_status;
    }
    if (r.end == AC_AUTOTUNE_INTERRUPTED) {
        fprintf(stderr, "attnctl: interrupted: the search stopped after %d trials; the best so "
                        "far (trial %d, validation accuracy %.4f) is saved in %s\n",
                r.n_trials, r.best_trial, r.best_val_accuracy, to->out_dir);
        return sig_status;
    }
    if (!quiet) {
        printf("autotune: trial %d of %d is the best, validation accuracy %.4f (%s; %ld steps "
               "in %s); model saved in %s, the trials in %s/%s\n",
               r.best_trial, r.n_trials, r.best_val_accuracy,
               r.end == AC_AUTOTUNE_BUDGET ? "the budget is spent" : "the search converged",
               r.steps, took, to->out_dir, to->out_dir, AC_AUTOTUNE_FILE);
        printf("settings: ");
        print_settings(stdout, &r.best);
        printf("\n");
    }
    *best_run = r.best_run;
    return CLI_EXIT_OK;
}
