/* attnctl train and attnctl pretrain: options -> configuration -> data ->
 * ac_train (the same loop, objective as a parameter), with progress on
 * stderr and a clean, resumable stop on SIGINT/SIGTERM. This file runs the
 * command (data, teachers, signals, result); train_options.c holds the
 * options and their help, pretrain.c the pretrain command's help. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <unistd.h>

#include "attnctl/autotune.h"
#include "attnctl/io.h"
#include "attnctl/text.h"
#include "attnctl/train.h"
#include "autotune.h"
#include "cli.h"
#include "parallel.h"
#include "pseudo.h"
#include "progress.h"
#include "train_options.h"

/* The one piece of global state: a signal handler can only reach a global.
 * It holds the number of the signal that asked training to stop (0: none). */
static volatile sig_atomic_t stop_signal = 0;

static void on_stop_signal(int sig)
{
    if (!stop_signal)
        stop_signal = sig;
}

/* Takes the output directory (created if missing, unless resuming) for this run: an
 * exclusive lock on it, held until the process ends, so that a second run
 * into the same directory stops at once instead of mixing its files with
 * the first's. *fd: the locked directory, or -1 where the file system has
 * no locks (the run then goes on unguarded). */
static int lock_out_dir(const char *dir, int resume, int *fd)
{
    *fd = -1;
    ac_err err;
    if (!resume && ac_mkdir_p(dir, &err) != 0)
        return cli_error("%s", err.msg);
    int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0) /* resuming a directory that is not there: the resume says so */
        return resume ? 0 : cli_error("%s: cannot open: %s", dir, strerror(errno));
    if (flock(d, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(d);
        if (e == EWOULDBLOCK)
            return cli_error("%s: another attnctl run is writing there; wait for it to end, "
                             "or choose another --out",
                             dir);
        return 0;
    }
    *fd = d;
    return 0;
}

static int file_exists_in(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p)
        return 0;
    snprintf(p, n, "%s/%s", dir, name);
    int exists = access(p, F_OK) == 0;
    free(p);
    return exists;
}

/* Prints s quoted for a POSIX shell when it needs quoting. */
static void print_shell_word(FILE *f, const char *s)
{
    int plain = *s != '\0';
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+,:=@%", *p))
            plain = 0;
    if (plain) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (const char *p = s; *p; p++) {
        if (*p == '\'')
            fputs("'\\''", f);
        else
            fputc(*p, f);
    }
    fputc('\'', f);
}

/* Labels that look like slips in the data: two that differ only in letter
 * case ("Positive", "positive") and a class of a single row (a typo such as
 * "postive"). Both stay classes of their own; the warning says where. */
static void warn_about_labels(const ac_rawdata *d, const char *path)
{
    if (!d->labels || d->n_classes < 2)
        return;
    char a[AC_SHOWN_MAX * 2], b[AC_SHOWN_MAX * 2];
    for (int i = 0; i < d->n_classes; i++)
        for (int j = i + 1; j < d->n_classes; j++)
            if (strcasecmp(d->classes[i], d->classes[j]) == 0) {
                ac_text_shown(a, sizeof a, d->classes[i], strlen(d->classes[i]));
                ac_text_shown(b, sizeof b, d->classes[j], strlen(d->classes[j]));
                fprintf(stderr,
                        "attnctl: warning: %s: labels '%s' and '%s' differ only in letter case; "
                        "they are two classes\n",
                        path, a, b);
                i = j = d->n_classes; /* one is enough to send the user to the data */
            }
    int64_t *count = calloc((size_t)d->n_classes, sizeof *count), *where = NULL;
    where = calloc((size_t)d->n_classes, sizeof *where);
    if (count && where) {
        for (int64_t r = 0; r < d->n_rows; r++)
            if (count[d->labels[r]]++ == 0)
                where[d->labels[r]] = d->line[r];
        int singles = 0, first = -1;
        for (int c = 0; c < d->n_classes; c++)
            if (count[c] == 1 && singles++ == 0)
                first = c;
        if (singles > 0) {
            ac_text_shown(a, sizeof a, d->classes[first], strlen(d->classes[first]));
            fprintf(stderr,
                    "attnctl: warning: %s:%lld: label '%s' is on this row only%s; a class needs "
                    "many rows to be learnt\n",
                    path, (long long)where[first], a,
                    singles > 1 ? " (and other labels are on one row each)" : "");
        }
    }
    free(count);
    free(where);
}

static void warn_about_data(const ac_rawdata *d, const char *path, int quiet)
{
    if (quiet)
        return;
    if (d->n_empty_skipped > 0)
        fprintf(stderr, "attnctl: warning: %s: skipped %lld rows with empty text\n", path,
                (long long)d->n_empty_skipped);
    if (d->n_invalid_utf8 > 0)
        fprintf(stderr, "attnctl: warning: %s: %lld rows held invalid UTF-8 (read as U+FFFD)\n",
                path, (long long)d->n_invalid_utf8);
}

typedef struct {
    struct sigaction old_int, old_term, old_usr1;
} saved_signals;

static void install_stop_handlers(saved_signals *saved)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    stop_signal = 0;
    /* SIGTERM comes from programs, often twice (GNU timeout signals the
     * process and then its group): repeats wait for the checkpoint. */
    sigaction(SIGTERM, &sa, &saved->old_term);
    /* A second Ctrl-C is a person who will not wait: it kills at once
     * (saves are atomic; the last checkpoint stays). */
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &sa, &saved->old_int);
    sa.sa_flags = 0;
    /* Open MPI's mpirun kills the job on SIGINT/SIGTERM (SIGKILL a second
     * later) but forwards SIGUSR1 to every process: the clean stop of a
     * data-parallel run. */
    sigaction(SIGUSR1, &sa, &saved->old_usr1);
}

static void restore_signals(const saved_signals *saved)
{
    sigaction(SIGINT, &saved->old_int, NULL);
    sigaction(SIGTERM, &saved->old_term, NULL);
    sigaction(SIGUSR1, &saved->old_usr1, NULL);
}

static void print_result(const ac_train_result *r, const char *out_dir, const ac_config *cfg,
                         cli_training_kind kind)
{
    const char *why = "";
    char reason[160] = "";
    switch (r->status) {
    case AC_TRAIN_EARLY_STOPPED:
        snprintf(reason, sizeof reason,
                 "stopped early: %d evaluations without a better validation accuracy; ",
                 cfg->training.patience);
        why = reason;
        break;
    case AC_TRAIN_MAX_STEPS:
        why = "stopped at --max-steps; ";
        break;
    default:
        break;
    }
    if (r->members > 1 && r->status == AC_TRAIN_FINISHED && r->kept_member > 0)
        printf("member %d of %d (their mean read lower on validation): validation accuracy %.4f "
               "(%ld steps in all); model saved in %s\n",
               r->kept_member, r->members, r->best_val_accuracy, r->step, out_dir);
    else if (r->members > 1 && r->status == AC_TRAIN_FINISHED && r->best_val_accuracy >= 0)
        printf("the mean of %d members: validation accuracy %.4f (%ld steps in all); model saved "
               "in %s\n",
               r->members, r->best_val_accuracy, r->step, out_dir);
    else if (r->members > 1 && r->status == AC_TRAIN_FINISHED)
        printf("the mean of %d members (%ld steps in all, no validation data) saved in %s\n",
               r->members, r->step, out_dir);
    else if (r->members > 1)
        printf("%sno model saved yet: the model is the mean of the %d members, made when the "
               "last one ends\n",
               why, r->members);
    else if (r->best_step >= 0 && r->best_val_accuracy >= 0)
        printf("%sbest %s %.4f (step %ld of %ld); model saved in %s\n", why,
               kind == CLI_PRETRAIN ? "held-out masked-token accuracy" : "validation accuracy",
               r->best_val_accuracy, r->best_step, r->step, out_dir);
    else if (r->model_saved)
        printf("%smodel (step %ld, no validation data) saved in %s\n", why, r->step, out_dir);
    else
        printf("%sno model saved\n", why);
}

/* training.refit: the run chose its epochs on the validation rows; train
 * again on every row and keep that model (src/train/refit.c). */
static int refit(const ac_train_options *to, const ac_train_result *selection,
                 cli_progress *progress, int quiet, int *failure_shared)
{
    const int rank = to->comm ? to->comm->rank : 0;
    ac_err err;
    ac_refit_plan plan;
    int want = ac_train_refit_plan(to->out_dir, selection, to->comm, &plan, &err);
    if (want <= 0)
        return want < 0 ? cli_error("%s", err.msg) : CLI_EXIT_OK;
    if (!quiet)
        fprintf(stderr,
                "attnctl: training again from the start on every row, the validation rows "
                "included, for %d epoch%s (the best evaluation's); if this is interrupted, %s "
                "keeps the model above\n",
                plan.epochs, plan.epochs == 1 ? "" : "s", to->out_dir);
    ac_train_result result;
    progress->refitting = 1;
    int rc = ac_train_refit(to, &plan, &result, &err);
    progress->refitting = 0;
    cli_progress_clear(progress);
    if (rc) {
        *failure_shared = result.failure_shared;
        /* Another rank failed and reports it; this one ends quietly. */
        return result.peer_failed
                   ? CLI_EXIT_RUNTIME
                   : cli_error("%s (%s keeps the model chosen on the validation rows)", err.msg,
                               to->out_dir);
    }
    if (result.status == AC_TRAIN_INTERRUPTED) {
        if (rank != 0)
            return stop_signal == SIGTERM ? CLI_EXIT_SIGTERM : CLI_EXIT_SIGINT;
        fprintf(stderr,
                "attnctl: interrupted while training on every row; %s keeps the model chosen "
                "on the validation rows\n",
                to->out_dir);
        return stop_signal == SIGTERM ? CLI_EXIT_SIGTERM : CLI_EXIT_SIGINT;
    }
    if (!quiet)
        printf("trained on every row for %d epoch%s (%ld steps): model saved in %s (the "
               "validation accuracy above, %.4f, is the recipe's estimate)\n",
               plan.epochs, plan.epochs == 1 ? "" : "s", result.step, to->out_dir,
               plan.val_accuracy);
    return CLI_EXIT_OK;
}

/* The data of a run: the labelled training file (and --val-file), or the
 * unlabelled text files of a pretraining run. Warnings about the data are
 * rank 0's (quiet on the others). */
static int read_data(const train_args *a, int resume, int quiet,
                     const char *train_path, const char *val_path, const ac_config *cfg,
                     ac_rawdata *train, int *have_train, ac_rawdata *val, int *have_val,
                     const char **text_column, const char *label_column)
{
    ac_err err;
    if (a->kind == CLI_PRETRAIN) {
        if (ac_rawdata_read_texts(train, (const char *const *)a->paths, a->n_paths,
                                  (ac_text_format)a->v[OPT_FORMAT].i, *text_column, &err))
            return cli_error("%s", err.msg);
        *have_train = 1;
        warn_about_data(train, a->n_paths == 1 ? a->paths[0] : "the text files", quiet);
        return 0;
    }
    ac_read_options ro = {.text_column = *text_column, .label_column = label_column,
                          .need_label = 1};
    if (resume) {
        ro.classes = cfg->labels;
        ro.n_classes = cfg->n_labels;
    }
    if (ac_rawdata_read(train, train_path, &ro, &err))
        return cli_error("%s", err.msg);
    *have_train = 1;
    warn_about_data(train, train_path, quiet);
    if (!quiet)
        warn_about_labels(train, train_path);
    if (val_path) {
        ac_read_options vo = ro;
        vo.classes = train->classes;
        vo.n_classes = train->n_classes;
        if (ac_rawdata_read(val, val_path, &vo, &err))
            return cli_error("%s", err.msg);
        *have_val = 1;
        warn_about_data(val, val_path, quiet);
    }
    return 0;
}

/* The settings of a resumed run and where its data was: checkpoint/run.json
 * and checkpoint/config.json. Files given on the command line replace the
 * recorded ones (the data moved); they must hold the same bytes. */
static int resume_sources(train_args *a, const char *out_dir, ac_train_sources *sources,
                          ac_config *cfg, const char **train_path, const char **val_path,
                          const char **text_column, const char **label_column)
{
    ac_err err;
    if (file_exists_in(out_dir, AC_AUTOTUNE_FILE))
        return cli_error("%s holds the model of an --autotune search, which cannot be resumed; "
                         "run the search again with another --out",
                         out_dir);
    if (ac_train_sources_load(out_dir, sources, &err))
        return cli_error("%s", err.msg);
    if ((sources->objective == AC_OBJECTIVE_MASKED_LM) != (a->kind == CLI_PRETRAIN))
        return cli_error("%s holds a %s run: continue it with attnctl %s --resume %s", out_dir,
                         a->kind == CLI_PRETRAIN ? "classifier training" : "pretraining",
                         a->kind == CLI_PRETRAIN ? "train" : "pretrain", out_dir);
    char ckpt[4096];
    snprintf(ckpt, sizeof ckpt, "%s/%s", out_dir, AC_CHECKPOINT_SUBDIR);
    /* run.json is written first: a run stopped (or out of disk) before its
     * first checkpoint was complete has it alone. */
    if (!file_exists_in(ckpt, "trainer_state.json"))
        return cli_error("%s holds no resumable checkpoint (%s/trainer_state.json not found: "
                         "the run ended before its first checkpoint was complete); train again "
                         "into an empty --out",
                         out_dir, ckpt);
    ac_config_free(cfg);
    if (ac_model_dir_load_config(cfg, ckpt, &err)) {
        ac_config_defaults(cfg);
        return cli_error("%s", err.msg);
    }
    *text_column = sources->text_column[0] ? sources->text_column : NULL;
    *label_column = sources->label_column[0] ? sources->label_column : NULL;
    if (a->kind == CLI_PRETRAIN) {
        if (a->n_paths == 0) {
            a->paths = sources->text_files;
            a->n_paths = sources->n_text_files;
        }
        a->v[OPT_FORMAT].i = sources->text_format;
        return 0;
    }
    if (*val_path && !sources->val_file[0])
        return cli_usage_error(a->cmd, "--val-file: the run in %s holds out a share of its "
                                       "training file (--val-split), and resumes with those rows",
                               out_dir);
    if (!*train_path)
        *train_path = sources->train_file;
    if (!*val_path && sources->val_file[0])
        *val_path = sources->val_file;
    if (!(*train_path)[0])
        return cli_error("%s/%s/%s names no training file; give it: attnctl train --resume %s "
                         "TRAIN.csv",
                         out_dir, AC_CHECKPOINT_SUBDIR, AC_RUN_FILE, out_dir);
    return 0;
}

/* A run that finished drops its checkpoint's weights (unless
 * --keep-checkpoint): resuming it has nothing to do, as it had with them,
 * except a refit on every row that was interrupted (then *ended describes
 * the finished run for ac_train_refit_plan). Returns 1 (and says so unless
 * quiet) when out_dir is such a run, 2 when its refit is still to do, 0
 * when it is not such a run, -1 on an error already printed. */
static int resume_of_finished_run(const char *out_dir, const ac_config *cfg, int quiet,
                                  ac_train_result *ended)
{
    if (file_exists_in(out_dir, AC_CHECKPOINT_SUBDIR "/model.safetensors"))
        return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/trainer_state.json", out_dir, AC_CHECKPOINT_SUBDIR);
    ac_trainer_state st;
    memset(&st, 0, sizeof st);
    ac_err err;
    if (ac_trainer_state_load(&st, path, &err))
        return cli_error("%s", err.msg);
    int status = ac_train_state_ended(&cfg->training, &st);
    if (status < 0)
        return 0; /* not over: the library names the missing file */
    /* The steps an epoch had, from where the run stood when it ended. */
    const int epochs = cfg->training.epochs;
    const long per_epoch = st.epoch > 0 ? (st.step - st.batch_in_epoch) / st.epoch : st.step;
    memset(ended, 0, sizeof *ended);
    ended->status = (ac_train_status)status;
    ended->step = st.step;
    ended->total_steps = per_epoch * (epochs > 0 ? epochs : 1);
    ended->members = cfg->training.members;
    ended->best_val_accuracy = st.best_metric;
    ended->best_step = st.best_step;
    ac_refit_plan plan; /* out_dir's config.json says whether the refit is still to do */
    int refit_pending = ac_train_refit_plan(out_dir, ended, NULL, &plan, &err);
    if (refit_pending < 0)
        return cli_error("%s", err.msg);
    if (refit_pending)
        return 2; /* the refit was cut short: the caller does it again */
    if (!quiet) {
        if (cfg->training.members > 1 && st.best_metric >= 0)
            fprintf(stderr,
                    "attnctl: %s: the run finished (%d members, validation accuracy "
                    "%.4f); nothing to resume\n",
                    out_dir, cfg->training.members, st.best_metric);
        else if (cfg->training.members > 1)
            fprintf(stderr, "attnctl: %s: the run finished (%d members); nothing to "
                            "resume\n",
                    out_dir, cfg->training.members);
        else if (st.best_step >= 0 && st.best_metric >= 0)
            fprintf(stderr,
                    "attnctl: %s: the run finished at step %ld (best validation accuracy %.4f at "
                    "step %ld); nothing to resume\n",
                    out_dir, st.step, st.best_metric, st.best_step);
        else
            fprintf(stderr, "attnctl: %s: the run finished at step %ld; nothing to resume\n",
                    out_dir, st.step);
    }
    return 1;
}

/* Comma-separated directories made absolute, so that run.json can be
 * resumed from any working directory (a name that does not resolve is kept
 * as given: the teacher's loading then says what is wrong). */
static char *absolute_dirs(const char *list)
{
    char *copy = strdup(list), *out = calloc(1, 1);
    size_t len = 0;
    for (char *save = NULL, *dir = copy ? strtok_r(copy, ",", &save) : NULL; dir && out;
         dir = strtok_r(NULL, ",", &save)) {
        char *abs = realpath(dir, NULL);
        const char *name = abs ? abs : dir;
        size_t n = strlen(name);
        char *grown = realloc(out, len + n + 2);
        if (grown) {
            if (len)
                grown[len++] = ',';
            memcpy(grown + len, name, n + 1);
            len += n;
        } else {
            free(out);
        }
        out = grown;
        free(abs);
    }
    if (!copy) {
        free(out);
        out = NULL;
    }
    free(copy);
    return out;
}

/* Self-training: the teachers label the unlabelled texts and the ones they
 * are sure of join train. A resumed run labels them again and must choose
 * the same rows. Returns 0 (also when stop_signal cut it short) or a CLI exit status. */
static int add_pseudo_labelled(ac_rawdata *train, const char *unlabelled, const char *teachers,
                               double threshold, const char *text_column,
                               const ac_train_sources *resumed, int quiet,
                               cli_pseudo_result *pr)
{
    ac_err err;
    int64_t n_labelled = train->n_rows;
    if (!quiet)
        fprintf(stderr, "attnctl: labelling the texts of %s with %s\n", unlabelled, teachers);
    int rc = cli_pseudo_label(train, unlabelled, text_column, teachers, threshold, &stop_signal,
                              !quiet && isatty(STDERR_FILENO), pr, &err);
    if (rc == PSEUDO_STOPPED) /* train unchanged; the caller sees stop_signal */
        return 0;
    if (rc != 0)
        return cli_error("%s", err.msg);
    if (resumed && (pr->n_kept != resumed->n_pseudo ||
                    strcmp(pr->sha256, resumed->pseudo_sha256) != 0))
        return cli_error("resume: the teachers (%s) now choose other texts of %s than when the "
                         "run started (%lld against %lld, or other labels or texts): the "
                         "teachers or the file changed",
                         teachers, unlabelled, (long long)pr->n_kept,
                         (long long)resumed->n_pseudo);
    if (!quiet) {
        fprintf(stderr, "attnctl: %lld of %lld texts at p >= %g join the %lld training rows (",
                (long long)pr->n_kept, (long long)pr->n_texts, threshold, (long long)n_labelled);
        for (int k = 0; k < train->n_classes; k++) {
            int64_t count = 0;
            for (int64_t i = n_labelled; i < train->n_rows; i++)
                count += train->labels[i] == k;
            fprintf(stderr, "%s%s %lld", k ? ", " : "", train->classes[k], (long long)count);
        }
        fprintf(stderr, ")\n");
    }
    return 0;
}

static int run_training(cli_training_kind kind, int argc, char **argv, const cli_parallel *par,
                        int *failure_shared)
{
    train_args a;
    int rc = train_parse_args(&a, kind, argc, argv);
    if (rc != 0)
        return rc;
    if (a.v[OPT_HELP].set) {
        if (kind == CLI_PRETRAIN)
            cli_pretrain_help();
        else
            train_print_help();
        return CLI_EXIT_OK;
    }
    /* Under mpirun only rank 0 talks (and writes files). */
    const int rank = par->comm ? par->comm->rank : 0;
    int quiet = a.v[OPT_QUIET].set || rank != 0;
    int resume = a.v[OPT_RESUME].set;
    const char *out_dir = resume ? a.v[OPT_RESUME].s : a.v[OPT_OUT].s;
    /* A run that fails before writing anything leaves no empty directory. */
    int out_existed = out_dir && access(out_dir, F_OK) == 0;
    const char *train_path = a.train_path;
    const char *val_path = a.v[OPT_VAL_FILE].set ? a.v[OPT_VAL_FILE].s : NULL;
    const char *text_column = a.v[OPT_TEXT_COLUMN].set ? a.v[OPT_TEXT_COLUMN].s : NULL;
    const char *label_column = a.v[OPT_LABEL_COLUMN].set ? a.v[OPT_LABEL_COLUMN].s : NULL;

    ac_err err;
    ac_config cfg;
    ac_train_sources sources;
    ac_rawdata train, val;
    memset(&sources, 0, sizeof sources);
    memset(&train, 0, sizeof train);
    memset(&val, 0, sizeof val);
    int have_train = 0, have_val = 0, have_handlers = 0, out_lock = -1;
    char *init_dir = NULL;
    saved_signals saved;
    ac_config_defaults(&cfg);
    const char *unlabelled = NULL;
    char *teachers = NULL;
    cli_pseudo_result pseudo;
    memset(&pseudo, 0, sizeof pseudo);
    double pseudo_threshold = 0.0;

    /* Under mpirun rank 0 alone writes the directory, and holds it. */
    if (rank == 0 && out_dir && (rc = lock_out_dir(out_dir, resume, &out_lock)) != 0)
        goto done;
    if (resume) {
        if ((rc = resume_sources(&a, out_dir, &sources, &cfg, &train_path, &val_path,
                                 &text_column, &label_column)) != 0)
            goto done;
    } else {
        if (a.v[OPT_CONFIG].set && ac_config_load(&cfg, a.v[OPT_CONFIG].s, 0, &err)) {
            rc = cli_error("%s", err.msg);
            goto done;
        }
        train_apply_overrides(&cfg, &a);
        if (a.v[OPT_INIT].set && (rc = train_apply_init(&cfg, &a)) != 0)
            goto done;
        if ((rc = train_validate_config(&cfg, &a)) != 0)
            goto done;
        if (a.v[OPT_AUTOTUNE].set &&
            (rc = cli_autotune_check(&a, &cfg, par->comm ? par->comm->size : 1)) != 0)
            goto done;
        if (file_exists_in(out_dir, "model.safetensors") ||
            file_exists_in(out_dir, AC_CHECKPOINT_SUBDIR "/trainer_state.json")) {
            rc = cli_error("%s already holds a model or a training run; continue it with "
                           "--resume %s, or choose another --out",
                           out_dir, out_dir);
            goto done;
        }
    }
    /* Default: the cores shared among the ranks on this machine. */
    cli_set_threads(a.v[OPT_THREADS].set ? (int)a.v[OPT_THREADS].i
                                          : cli_default_threads() / par->local_ranks);
    /* From here on SIGINT/SIGTERM ask for a clean stop (also while reading the
     * data, which takes seconds on a big file). */
    install_stop_handlers(&saved);
    have_handlers = 1;
    cli_block_stop_signals(0); /* one that came during start-up is handled now */

    if ((rc = read_data(&a, resume, quiet, train_path, val_path, &cfg, &train, &have_train,
                        &val, &have_val, &text_column, label_column)) != 0)
        goto done;
    if (a.v[OPT_TEACHER].set || (resume && sources.teachers[0])) {
        unlabelled = a.v[OPT_UNLABELLED].set ? a.v[OPT_UNLABELLED].s : sources.unlabelled_file;
        teachers = absolute_dirs(a.v[OPT_TEACHER].set ? a.v[OPT_TEACHER].s : sources.teachers);
        if (!teachers) {
            rc = cli_error("out of memory");
            goto done;
        }
        double threshold = resume ? sources.pseudo_threshold
                           : a.v[OPT_PSEUDO_THRESHOLD].set ? a.v[OPT_PSEUDO_THRESHOLD].d
                                                           : DEFAULT_PSEUDO_THRESHOLD;
        rc = add_pseudo_labelled(&train, unlabelled, teachers, threshold, text_column,
                                 resume ? &sources : NULL, quiet, &pseudo);
        if (rc != 0)
            goto done;
        pseudo_threshold = threshold;
    }

    if (stop_signal) { /* nothing was written yet: nothing to resume */
        fprintf(stderr, "attnctl: interrupted before training started; nothing was saved\n");
        rc = stop_signal == SIGTERM ? CLI_EXIT_SIGTERM : CLI_EXIT_SIGINT;
        goto done;
    }

    /* After the checks a resume makes of its data and pseudo-labels, as
     * before finished runs dropped their weights. */
    ac_train_result finished_run;
    int finished = resume ? resume_of_finished_run(out_dir, &cfg, quiet, &finished_run) : 0;
    if (finished < 0) {
        rc = 1;
        goto done;
    }
    const int refit_pending = finished == 2 && kind == CLI_TRAIN;
    if (finished && !refit_pending) {
        rc = 0;
        goto done;
    }
    /* Absolute, as recorded in config.json: a resumed run's refit starts
     * from it again, from whatever working directory. */
    if (a.v[OPT_INIT].set && !(init_dir = realpath(a.v[OPT_INIT].s, NULL))) {
        rc = cli_error("%s: %s", a.v[OPT_INIT].s, strerror(errno));
        goto done;
    }
    cli_progress progress;
    cli_progress_init(&progress, quiet);
    ac_train_options to = {
        .config = resume ? NULL : &cfg,
        .train = &train,
        .val = have_val ? &val : NULL,
        .out_dir = out_dir,
        .resume = resume,
        .max_steps = a.v[OPT_MAX_STEPS].set ? a.v[OPT_MAX_STEPS].i : 0,
        .drop_finished_state = !a.v[OPT_KEEP_CHECKPOINT].set,
        .train_path = kind == CLI_PRETRAIN ? NULL : train_path,
        .val_path = val_path,
        .text_column = text_column,
        .label_column = label_column,
        .stop = &stop_signal,
        .progress = cli_progress_callback,
        .progress_user = &progress,
        .objective = kind == CLI_PRETRAIN ? AC_OBJECTIVE_MASKED_LM : AC_OBJECTIVE_CLASSIFICATION,
        .text_paths = kind == CLI_PRETRAIN ? (const char *const *)a.paths : NULL,
        .n_text_paths = kind == CLI_PRETRAIN ? a.n_paths : 0,
        .text_format = (ac_text_format)a.v[OPT_FORMAT].i,
        .init_dir = init_dir,
        .n_pseudo = teachers ? pseudo.n_kept : 0,
        .unlabelled_path = unlabelled,
        .teachers = teachers,
        .pseudo_sha256 = teachers ? pseudo.sha256 : NULL,
        .pseudo_threshold = pseudo_threshold,
        .comm = par->comm,
    };
    if (a.v[OPT_AUTOTUNE].set) {
        /* The search chose the recipe on the validation rows; its best
         * trial is then refitted on every row as a plain run would be. */
        ac_train_result best_run;
        rc = cli_autotune_run(&a, &to, &stop_signal, quiet, &best_run);
        if (rc == CLI_EXIT_OK) {
            fflush(stdout); /* before the refit's progress on stderr */
            rc = refit(&to, &best_run, &progress, quiet, failure_shared);
        }
        goto done;
    }
    if (refit_pending) { /* the run finished; its refit on every row was cut short */
        rc = refit(&to, &finished_run, &progress, quiet, failure_shared);
        goto done;
    }
    ac_train_result result;
    int train_rc = ac_train(&to, &result, &err);
    cli_progress_clear(&progress);
    if (train_rc) {
        /* Another rank failed and reports it; this one ends quietly. */
        rc = result.peer_failed ? CLI_EXIT_RUNTIME : cli_error("%s", err.msg);
        *failure_shared = result.failure_shared;
        goto done;
    }
    if (result.status == AC_TRAIN_INTERRUPTED) {
        /* Under mpirun the signal may have reached another rank only. */
        int sig = stop_signal ? stop_signal : SIGINT;
        if (rank != 0) {
            rc = sig == SIGTERM ? CLI_EXIT_SIGTERM : CLI_EXIT_SIGINT;
            goto done;
        }
        fprintf(stderr, "attnctl: interrupted at step %ld; resume with: attnctl %s --resume ",
                result.step, a.cmd);
        print_shell_word(stderr, out_dir);
        fputc('\n', stderr);
        rc = sig == SIGTERM ? CLI_EXIT_SIGTERM : CLI_EXIT_SIGINT;
        goto done;
    }
    if (!quiet)
        print_result(&result, out_dir, &cfg, kind);
    fflush(stdout); /* before the refit's progress on stderr */
    if (kind == CLI_TRAIN) {
        rc = refit(&to, &result, &progress, quiet, failure_shared);
        if (rc != CLI_EXIT_OK)
            goto done;
    }
    rc = CLI_EXIT_OK;
done:
    if (rc != CLI_EXIT_OK && out_dir && !out_existed)
        rmdir(out_dir); /* only succeeds when empty */
    if (out_lock >= 0)
        close(out_lock);
    free(init_dir);
    if (have_handlers)
        restore_signals(&saved);
    if (have_train)
        ac_rawdata_free(&train);
    if (have_val)
        ac_rawdata_free(&val);
    ac_train_sources_free(&sources);
    ac_config_free(&cfg);
    free(teachers);
    return rc;
}

static int cli_run_training(cli_training_kind kind, int argc, char **argv)
{
    /* MPI starts before the stop signals are unblocked, so that its threads
     * keep them blocked and they reach ours. */
    cli_parallel par;
    int rc = cli_parallel_start(&par);
    if (rc != 0) {
        cli_parallel_finish(&par, 1, 0);
        return rc;
    }
    int failure_shared = 0;
    rc = run_training(kind, argc, argv, &par, &failure_shared);
    /* An interruption, a usage error or a failure the trainer agreed on is
     * every rank's; any other failure may be this rank's alone, and the
     * others would wait for it: the job is ended. */
    int failed = rc != CLI_EXIT_OK && rc != CLI_EXIT_SIGINT && rc != CLI_EXIT_SIGTERM &&
                 rc != CLI_EXIT_USAGE && !failure_shared;
    /* SIGTERM under mpirun: the launcher is ending the job (see parallel.h). */
    cli_parallel_finish(&par, failed, stop_signal == SIGTERM);
    return rc;
}

int cmd_train(int argc, char **argv)
{
    return cli_run_training(CLI_TRAIN, argc, argv);
}

int cmd_pretrain(int argc, char **argv)
{
    return cli_run_training(CLI_PRETRAIN, argc, argv);
}
