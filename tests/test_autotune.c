/* train --autotune: the budget's syntax, a search in steps that gives the
 * same model twice, the chosen settings in config.json and autotune.json,
 * a budget smaller than trial 1, a stop (Ctrl-C) during trial 1 and later,
 * no trial left behind, and the command line's errors. Tiny models on
 * tests/data/train_tiny.csv (42 rows, 2 classes). */
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attnctl/autotune.h"
#include "attnctl/io.h"
#include "attnctl/train.h"

#include "test_util.h"

#define TINY_CSV "tests/data/train_tiny.csv"

static void tiny_config(ac_config *c)
{
    ac_config_defaults(c);
    c->model.max_len = 24;
    c->model.d_model = 16;
    c->model.n_heads = 2;
    c->model.d_ff = 32;
    c->model.dropout = 0.1f;
    c->model.wide_buckets = 1024;
    c->training.epochs = 2;
    c->training.batch_size = 4;
    c->training.optim.lr = 3e-3f;
    c->training.val_split = 0.25;
    c->training.patience = 0;
    c->training.vocab_max = 200;
    c->training.min_count = 1;
    c->training.seed = 7;
    c->training.members = 1;
    c->training.ema = 0.0f;
}

static void read_tiny(ac_rawdata *raw)
{
    ac_read_options ro = {.need_label = 1};
    ac_err err = {{0}};
    int rc = ac_rawdata_read(raw, TINY_CSV, &ro, &err);
    ck_assert_msg(rc == 0, "reading %s: %s", TINY_CSV, err.msg);
}

/* What a test watches: trials, and when to stop (a Ctrl-C). */
typedef struct {
    volatile sig_atomic_t stop;
    int stop_in_trial;  /* set stop at the second step of this trial (0: never) */
    int trial, n_done, n_best;
    long steps_in_trial;
} watcher;

static void on_trial(const ac_autotune_trial *t, void *user)
{
    watcher *w = user;
    if (t->outcome == AC_TRIAL_START) {
        w->trial = t->trial;
        w->steps_in_trial = 0;
        return;
    }
    w->n_done++;
    w->n_best += t->outcome == AC_TRIAL_BEST;
    ck_assert_int_le(t->best_trial, t->trial);
    if (t->outcome == AC_TRIAL_BEST || t->outcome == AC_TRIAL_WORSE)
        ck_assert(t->val_accuracy >= 0 && t->val_accuracy <= 1);
}

static void after_step(ac_model *m, long step, void *user)
{
    (void)m;
    (void)step;
    watcher *w = user;
    if (w->stop_in_trial == w->trial && ++w->steps_in_trial == 2)
        w->stop = SIGINT;
}

static int search(const ac_config *cfg, const ac_rawdata *raw, const char *out,
                  const char *budget, watcher *w, ac_autotune_result *r, ac_err *err)
{
    ac_autotune_options o;
    memset(&o, 0, sizeof o);
    o.train.config = cfg;
    o.train.train = raw;
    o.train.out_dir = out;
    o.train.stop = &w->stop;
    o.train.after_step = after_step;
    o.train.after_step_user = w;
    o.budget_text = budget;
    ck_assert_int_eq(ac_autotune_budget_parse(budget, &o.budget, err), 0);
    o.on_trial = on_trial;
    o.on_trial_user = w;
    return ac_autotune(&o, r, err);
}

static unsigned char *read_all(const char *path, size_t *n)
{
    char *data = NULL;
    ac_err err;
    ck_assert_msg(ac_read_file(path, (size_t)1 << 30, &data, n, &err) == 0, "%s", err.msg);
    return (unsigned char *)data;
}

/* Entries of dir other than . and .. */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

START_TEST(test_budget_syntax)
{
    ac_autotune_budget b;
    ac_err err;
    ck_assert_int_eq(ac_autotune_budget_parse("300s", &b, &err), 0);
    ck_assert(b.seconds == 300 && b.steps == 0);
    ck_assert_int_eq(ac_autotune_budget_parse("5m", &b, &err), 0);
    ck_assert(b.seconds == 300);
    ck_assert_int_eq(ac_autotune_budget_parse("1.5h", &b, &err), 0);
    ck_assert(b.seconds == 5400);
    ck_assert_int_eq(ac_autotune_budget_parse("20000steps", &b, &err), 0);
    ck_assert(b.steps == 20000 && b.seconds == 0);
    static const char *const bad[] = {"", "300", "5 m", "-5m", "0s", "5x", "5mm", "m",
                                      "steps", "0steps", "1.5steps", "-3steps", "nan s",
                                      "infs", "1e99h", "99999999999999999999steps", " 5m"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        ck_assert_msg(ac_autotune_budget_parse(bad[i], &b, &err) == -1, "'%s' read", bad[i]);
        ck_assert_msg(strstr(err.msg, "20000steps") && !strchr(err.msg, '\n'), "%s", err.msg);
    }
}
END_TEST

/* The same seed and budget in steps: the same trials and the same model
 * bits; the winner's settings in config.json and autotune.json; no trial
 * left beside --out. */
START_TEST(test_steps_budget_is_deterministic)
{
    ac_rawdata raw = {0};
    read_tiny(&raw);
    ac_config cfg;
    tiny_config(&cfg);
    char *dir = test_temp_dir("autotune"), *a = test_path(dir, "a"), *b = test_path(dir, "b");
    watcher w1 = {0}, w2 = {0};
    ac_autotune_result r1, r2;
    ac_err err = {{0}};
    ck_assert_msg(search(&cfg, &raw, a, "200steps", &w1, &r1, &err) == 0, "%s", err.msg);
    ck_assert_msg(search(&cfg, &raw, b, "200steps", &w2, &r2, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r1.model_saved, 1);
    ck_assert_int_ge(r1.n_trials, 3);
    ck_assert_int_le(r1.steps, 200);
    ck_assert_int_eq(r1.n_trials, r2.n_trials);
    ck_assert_int_eq(r1.best_trial, r2.best_trial);
    ck_assert_int_eq(r1.steps, r2.steps);
    ck_assert_int_eq(w1.n_done, r1.n_trials);
    ck_assert(r1.best_val_accuracy == r2.best_val_accuracy);

    char *ma = test_path(a, "model.safetensors"), *mb = test_path(b, "model.safetensors");
    size_t na, nb;
    unsigned char *ba = read_all(ma, &na), *bb = read_all(mb, &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert_msg(memcmp(ba, bb, na) == 0, "two searches with the same seed and steps differ");

    /* config.json holds the winner's settings; autotune.json the trials. */
    ac_config saved;
    ac_config_defaults(&saved);
    ck_assert_msg(ac_model_dir_load_config(&saved, a, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(saved.training.epochs, (int)r1.best.v[AC_TUNE_EPOCHS]);
    ck_assert_int_eq(saved.training.members, (int)r1.best.v[AC_TUNE_MEMBERS]);
    ck_assert_int_eq(saved.model.wide_order, (int)r1.best.v[AC_TUNE_WIDE_ORDER]);
    ck_assert(fabs(saved.training.optim.lr - r1.best.v[AC_TUNE_LR]) < 1e-9);
    ck_assert(fabs(saved.training.wide_nb - r1.best.v[AC_TUNE_WIDE_NB]) < 1e-7);
    ck_assert(fabs(saved.training.crop_frac - r1.best.v[AC_TUNE_CROP]) < 1e-12);
    ck_assert(fabs(saved.model.dropout - r1.best.v[AC_TUNE_DROPOUT]) < 1e-7);
    ck_assert(fabs(saved.provenance.best_val_accuracy - r1.best_val_accuracy) < 1e-9);
    ac_config_free(&saved);
    char *tj = test_path(a, AC_AUTOTUNE_FILE);
    size_t nj;
    char *json = (char *)read_all(tj, &nj);
    cJSON *root = cJSON_Parse(json);
    ck_assert_ptr_nonnull(root);
    ck_assert_int_eq(cJSON_GetObjectItem(root, "best_trial")->valueint, r1.best_trial);
    ck_assert_int_eq(cJSON_GetObjectItem(root, "budget_steps")->valueint, 200);
    ck_assert_str_eq(cJSON_GetObjectItem(root, "budget")->valuestring, "200steps");
    cJSON *trials = cJSON_GetObjectItem(root, "trials");
    ck_assert_int_eq(cJSON_GetArraySize(trials), r1.n_trials);
    cJSON *first = cJSON_GetArrayItem(trials, 0);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(first, "changed")));
    ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(first, "settings"), "epochs")
                         ->valueint,
                     2);
    cJSON_Delete(root);

    /* A search is not resumable: no checkpoint; nothing beside a and b. */
    char *ckpt = test_path(a, AC_CHECKPOINT_SUBDIR);
    ck_assert_int_ne(access(ckpt, F_OK), 0);
    ck_assert_int_eq(count_entries(dir), 2);

    free(json);
    free(tj);
    free(ckpt);
    free(ba);
    free(bb);
    free(ma);
    free(mb);
    rm_rf(dir);
    free(a);
    free(b);
    free(dir);
    ac_rawdata_free(&raw);
    ac_config_free(&cfg);
}
END_TEST

/* A budget smaller than trial 1: the options as given, trained to the end. */
START_TEST(test_small_budget_trains_trial_1)
{
    ac_rawdata raw = {0};
    read_tiny(&raw);
    ac_config cfg;
    tiny_config(&cfg);
    char *dir = test_temp_dir("autotune"), *a = test_path(dir, "a");
    watcher w = {0};
    ac_autotune_result r;
    ac_err err = {{0}};
    ck_assert_msg(search(&cfg, &raw, a, "1steps", &w, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.n_trials, 1);
    ck_assert_int_eq(r.best_trial, 1);
    ck_assert_int_eq(r.end, AC_AUTOTUNE_BUDGET);
    ck_assert_int_eq(r.model_saved, 1);
    ck_assert_int_gt(r.steps, 1);
    ck_assert(r.best.v[AC_TUNE_EPOCHS] == 2);
    char *model = test_path(a, "model.safetensors");
    ck_assert_int_eq(access(model, F_OK), 0);

    /* --out must be new or empty: it now holds a model. */
    watcher w2 = {0};
    ck_assert_int_eq(search(&cfg, &raw, a, "1steps", &w2, &r, &err), -1);
    ck_assert_msg(strstr(err.msg, "is not empty"), "%s", err.msg);
    ck_assert_int_eq(count_entries(dir), 1);
    free(model);
    rm_rf(dir);
    free(a);
    free(dir);
    ac_rawdata_free(&raw);
    ac_config_free(&cfg);
}
END_TEST

/* A stop during trial 1 keeps nothing; during trial 2 the best so far (trial
 * 1), and the stopped trial is not left behind. */
START_TEST(test_stop_keeps_the_best_so_far)
{
    ac_rawdata raw = {0};
    read_tiny(&raw);
    ac_config cfg;
    tiny_config(&cfg);
    char *dir = test_temp_dir("autotune"), *a = test_path(dir, "a"), *b = test_path(dir, "b");
    watcher w = {.stop_in_trial = 1};
    ac_autotune_result r;
    ac_err err = {{0}};
    ck_assert_msg(search(&cfg, &raw, a, "200steps", &w, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.model_saved, 0);
    ck_assert_int_eq(r.best_trial, 0);
    ck_assert_int_eq(r.end, AC_AUTOTUNE_INTERRUPTED);
    ck_assert_int_ne(access(a, F_OK), 0);
    ck_assert_int_eq(count_entries(dir), 0);

    watcher w2 = {.stop_in_trial = 2};
    ck_assert_msg(search(&cfg, &raw, b, "200steps", &w2, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.model_saved, 1);
    ck_assert_int_eq(r.best_trial, 1);
    ck_assert_int_eq(r.n_trials, 2);
    ck_assert_int_eq(r.end, AC_AUTOTUNE_INTERRUPTED);
    char *model = test_path(b, "model.safetensors"), *tj = test_path(b, AC_AUTOTUNE_FILE);
    ck_assert_int_eq(access(model, F_OK), 0);
    ck_assert_int_eq(access(tj, F_OK), 0);
    ck_assert_int_eq(count_entries(dir), 1);
    free(model);
    free(tj);
    rm_rf(dir);
    free(a);
    free(b);
    free(dir);
    ac_rawdata_free(&raw);
    ac_config_free(&cfg);
}
END_TEST

/* ------------------------------------------------------- command line */

#define TINY_OPTS                                                                                \
    "--d-model 16 --heads 2 --ff 32 --max-len 24 --wide-buckets 1024 --vocab-size 200 "          \
    "--min-count 1 --members 1 --epochs 2 --batch-size 4 --val-split 0.25 --threads 1"

START_TEST(test_cli)
{
    const char *bin = attnctl_path();
    if (access(bin, X_OK) != 0) {
        printf("SKIP test_cli: no attnctl binary\n");
        return;
    }
    char *dir = test_temp_dir("autotune"), *out = test_path(dir, "m"), *cmd = NULL, *err = NULL;
    /* Bad budgets and options that cannot go with it: a usage error, no files. */
    static const char *const bad[][2] = {
        {"--autotune 5", "--autotune: invalid value '5' (expected a duration such as 90s"},
        {"--autotune 5x", "invalid value '5x'"},
        {"--autotune 0steps", "invalid value '0steps'"},
        {"--autotune 100steps --max-steps 5", "--max-steps cannot be combined with --autotune"},
        {"--autotune 100steps --val-split 0", "--autotune needs validation rows"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_ge(asprintf(&cmd, "%s train %s --out %s %s %s", bin, TINY_CSV, out,
                                  TINY_OPTS, bad[i][0]),
                         0);
        ck_assert_int_eq(run_stderr(cmd, &err), 2);
        ck_assert_msg(strstr(err, bad[i][1]), "%s: %s", bad[i][0], err);
        ck_assert_msg(strchr(err, '\n') == strrchr(err, '\n') ||
                          strstr(strchr(err, '\n') + 1, "Try 'attnctl train --help'"),
                      "%s", err);
        free(cmd);
        free(err);
    }
    ck_assert_int_eq(count_entries(dir), 0);

    /* A search: trials on stderr, the model and autotune.json in --out. */
    ck_assert_int_ge(asprintf(&cmd, "%s train %s --out %s %s --lr 0.003 --autotune 60steps",
                              bin, TINY_CSV, out, TINY_OPTS),
                     0);
    ck_assert_int_eq(run_stderr(cmd, &err), 0);
    ck_assert_msg(strstr(err, " trial  val. acc.") && strstr(err, "     1  "), "%s", err);
    /* --epochs and --members were given: they stay. */
    ck_assert_msg(!strstr(err, "--epochs 4") && !strstr(err, "--members 3"), "%s", err);
    free(cmd);
    free(err);
    assert_file_in(out, AC_AUTOTUNE_FILE);

    /* --epochs auto is --epochs left out: searched (the options' last
     * --epochs is the one that counts). */
    char *out2 = test_path(dir, "m2");
    ck_assert_int_ge(asprintf(&cmd, "%s train %s --out %s %s --epochs auto --autotune 300steps",
                              bin, TINY_CSV, out2, TINY_OPTS),
                     0);
    ck_assert_int_eq(run_stderr(cmd, &err), 0);
    ck_assert_msg(strstr(err, "--epochs 16") && !strstr(err, "--members 3"), "%s", err);
    free(cmd);
    free(err);
    rm_rf(out2);
    free(out2);

    /* Neither resumable nor combinable with --resume. */
    ck_assert_int_ge(asprintf(&cmd, "%s train --resume %s", bin, out), 0);
    ck_assert_int_eq(run_stderr(cmd, &err), 1);
    ck_assert_msg(strstr(err, "--autotune search, which cannot be resumed"), "%s", err);
    free(cmd);
    free(err);
    ck_assert_int_ge(asprintf(&cmd, "%s train --resume %s --autotune 5m", bin, out), 0);
    ck_assert_int_eq(run_stderr(cmd, &err), 2);
    ck_assert_msg(strstr(err, "--autotune cannot be combined with --resume"), "%s", err);
    free(cmd);
    free(err);
    ck_assert_int_eq(count_entries(dir), 1);
    rm_rf(dir);
    free(out);
    free(dir);
}
END_TEST

/* On short texts (--refit auto is 1) the best trial's recipe is trained
 * again on every row: the model in --out is the one its config.json trains
 * (every row, the refit's epochs), autotune.json stays beside it; with
 * --refit 0 the model is the trial's, chosen on the validation rows. */
START_TEST(test_cli_refits_the_best)
{
    const char *bin = attnctl_path();
    if (access(bin, X_OK) != 0) {
        printf("SKIP test_cli_refits_the_best: no attnctl binary\n");
        return;
    }
    char *dir = test_temp_dir("autotune"), *out = test_path(dir, "m"), *kept = test_path(dir, "k"),
         *again = test_path(dir, "again"), *cmd = NULL, *err = NULL;
    ck_assert_int_ge(asprintf(&cmd, "%s train %s --out %s %s --autotune 60steps", bin, TINY_CSV,
                              out, TINY_OPTS),
                     0);
    ck_assert_int_eq(run_stderr(cmd, &err), 0);
    ck_assert_msg(strstr(err, "training again from the start on every row"), "%s", err);
    free(cmd);
    free(err);
    assert_trained_as(out, 1, 0.0);
    assert_file_in(out, AC_AUTOTUNE_FILE);

    /* Its config.json trains the same model bit for bit. */
    char *config = test_path(out, "config.json");
    ck_assert_int_ge(asprintf(&cmd, "%s train %s --out %s --config %s --threads 1", bin,
                              TINY_CSV, again, config),
                     0);
    ck_assert_int_eq(run_stderr(cmd, &err), 0);
    free(cmd);
    free(err);
    char *m1 = test_path(out, "model.safetensors"), *m2 = test_path(again, "model.safetensors");
    size_t n1, n2;
    unsigned char *b1 = read_all(m1, &n1), *b2 = read_all(m2, &n2);
    ck_assert_msg(n1 == n2 && memcmp(b1, b2, n1) == 0, "the refit model differs from its config's");
    free(b1);
    free(b2);
    free(m1);
    free(m2);
    free(config);

    /* --refit 0: the best trial's own model, its validation rows held out. */
    ck_assert_int_ge(asprintf(&cmd, "%s train %s --out %s %s --refit 0 --autotune 60steps", bin,
                              TINY_CSV, kept, TINY_OPTS),
                     0);
    ck_assert_int_eq(run_stderr(cmd, &err), 0);
    ck_assert_msg(!strstr(err, "training again"), "%s", err);
    free(cmd);
    free(err);
    assert_trained_as(kept, 0, 0.25);
    rm_rf(dir);
    free(out);
    free(kept);
    free(again);
    free(dir);
}
END_TEST

/* Starts `attnctl train` of a tiny model on TINY_CSV into out, one row a
 * step and no early stop, with extra (NULL-terminated) options; stdout is
 * discarded, stderr goes to err_path. */
static pid_t spawn_tiny_search(const char *bin, const char *out, const char *err_path,
                               const char *const *extra)
{
    const char *argv[64] = {bin,           "train",          TINY_CSV,   "--out", out,
                            "--d-model",   "16",             "--heads",  "2",     "--ff",
                            "32",          "--max-len",      "24",       "--wide-buckets",
                            "1024",        "--vocab-size",   "200",      "--batch-size",
                            "1",           "--val-split",    "0.25",     "--threads",
                            "1",           "--patience",     "0"};
    int n = 0;
    while (argv[n])
        n++;
    for (int i = 0; extra[i] && n < 63; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen(err_path, "w", stderr))
            _exit(99);
        execv(bin, (char *const *)argv);
        _exit(98);
    }
    return pid;
}

/* SIGINT to the command during the search: exit 130, the best trial so far
 * in --out (or nothing), never a trial's directory left behind. */
START_TEST(test_cli_sigint)
{
    const char *bin = attnctl_path();
    if (access(bin, X_OK) != 0) {
        printf("SKIP test_cli_sigint: no attnctl binary\n");
        return;
    }
    char *dir = test_temp_dir("autotune"), *out = test_path(dir, "m");
    static const char *const search_args[] = {"--min-count", "1", "--members", "3", "--epochs",
                                              "40", "--autotune", "100000steps", NULL};
    pid_t pid = spawn_tiny_search(bin, out, "/dev/null", search_args);
    /* Let trial 1 (3 members of 40 epochs of 31 steps, no early stop: about
     * a second) finish and others start; the search takes about ten. */
    double t0 = now_s();
    usleep(2500000);
    kill(pid, SIGINT);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(now_s() - t0 < 60);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 130);
    /* --out complete or absent; nothing else. */
    int n = count_entries(dir);
    ck_assert_int_le(n, 1);
    if (n == 1) {
        assert_file_in(out, "model.safetensors");
        assert_file_in(out, AC_AUTOTUNE_FILE);
    }
    rm_rf(dir);
    free(out);
    free(dir);
}
END_TEST

/* SIGINT during trial 1: nothing kept, and its line in the table shows the
 * settings left to the data as "auto" (they were printed as -1). */
START_TEST(test_cli_sigint_in_trial_1)
{
    const char *bin = attnctl_path();
    if (access(bin, X_OK) != 0) {
        printf("SKIP test_cli_sigint_in_trial_1: no attnctl binary\n");
        return;
    }
    char *dir = test_temp_dir("autotune"), *out = test_path(dir, "m");
    char *log = test_path(dir, "stderr");
    static const char *const search_args[] = {"--epochs", "4000", "--autotune", "10000000steps",
                                              NULL};
    pid_t pid = spawn_tiny_search(bin, out, log, search_args);
    /* Signal once trial 1 has printed its plan (it then trains for minutes). */
    double t0 = now_s();
    for (;;) {
        size_t n = 0;
        char *text = access(log, F_OK) == 0 ? test_slurp(log, &n) : NULL;
        int training = text && strstr(text, " steps (");
        free(text);
        if (training)
            break;
        ck_assert_msg(now_s() - t0 < 60, "trial 1 did not start");
        usleep(20000);
    }
    kill(pid, SIGINT);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 130);
    size_t n = 0;
    char *text = test_slurp(log, &n);
    ck_assert_msg(strstr(text, "stopped") && strstr(text, "--members auto") &&
                      strstr(text, "--epochs 4000") && !strstr(text, " -1") &&
                      strstr(text, "interrupted during trial 1"),
                  "%s", text);
    free(text);
    ck_assert_int_ne(access(out, F_OK), 0);
    rm_rf(dir);
    free(log);
    free(out);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("autotune");
    TCase *tc = tcase_create("autotune");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_budget_syntax);
    tcase_add_test(tc, test_steps_budget_is_deterministic);
    tcase_add_test(tc, test_small_budget_trains_trial_1);
    tcase_add_test(tc, test_stop_keeps_the_best_so_far);
    tcase_add_test(tc, test_cli);
    tcase_add_test(tc, test_cli_refits_the_best);
    tcase_add_test(tc, test_cli_sigint);
    tcase_add_test(tc, test_cli_sigint_in_trial_1);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failures = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failures != 0;
}
