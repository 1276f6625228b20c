/* End-to-end tests of `attnctl eval`, `predict` and `bench`: they run the
 * built binary (path from $ATTNCTL, default build/attnctl) with pipes. A tiny
 * model is trained once with `attnctl train` into $BUILD/test_cli/ before the
 * tests start. */
#include <check.h>
#include <cjson/cJSON.h>
#include <csv.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "test_util.h"

#define SAMPLE_TRAIN "data/sample_train.csv"
#define SAMPLE_TEST "data/sample_test.csv"
#define SAMPLE_TEST_ROWS 200
#define RUN_TIMEOUT 25.0

/* ------------------------------------------------------------------ helpers */

/* $BUILD/test_cli/NAME */
static void work_path(char *buf, size_t n, const char *name)
{
    const char *build = getenv("BUILD");
    snprintf(buf, n, "%s/test_cli/%s", build && *build ? build : "build", name);
}

typedef struct {
    pid_t pid;
    int in, out, err; /* our ends: write to in, read from out and err */
} child;

/* Starts attnctl with args (NULL-terminated, without the program name). */
static void spawn(child *c, const char *const *args)
{
    int pin[2], pout[2], perr[2];
    ck_assert_int_eq(pipe(pin), 0);
    ck_assert_int_eq(pipe(pout), 0);
    ck_assert_int_eq(pipe(perr), 0);
    const char *argv[64];
    int n = 0;
    argv[n++] = attnctl_path();
    while (args[n - 1] && n < 63) {
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(pin[0], 0);
        dup2(pout[1], 1);
        dup2(perr[1], 2);
        for (int fd = 3; fd < 64; fd++)
            close(fd);
        signal(SIGPIPE, SIG_DFL);
        execv(argv[0], (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    c->pid = pid;
    c->in = pin[1];
    c->out = pout[0];
    c->err = perr[0];
}

/* Waits for the child (killing it after timeout seconds); returns the raw wait status. */
static int wait_child(child *c, double timeout)
{
    double end = now_s() + timeout;
    int status = 0;
    for (;;) {
        pid_t r = waitpid(c->pid, &status, WNOHANG);
        if (r == c->pid)
            return status;
        if (now_s() > end) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &status, 0);
            ck_abort_msg("attnctl did not finish within %.0f s", timeout);
        }
        usleep(2000);
    }
}

typedef struct {
    int status; /* exit status, or 128 + signal */
    char *out, *err;
    size_t out_len, err_len;
} result;

static void append(char **buf, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        *buf = realloc(*buf, *cap);
        ck_assert_ptr_nonnull(*buf);
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = '\0';
}

/* Runs attnctl with args, feeding `input` (may be NULL) on stdin, collecting
 * stdout and stderr; aborts the test after RUN_TIMEOUT seconds. */
static result run_with_input(const char *const *args, const char *input, size_t input_len)
{
    child c;
    spawn(&c, args);
    result r = {0, NULL, NULL, 0, 0};
    size_t out_cap = 0, err_cap = 0, written = 0;
    append(&r.out, &r.out_len, &out_cap, "", 0);
    append(&r.err, &r.err_len, &err_cap, "", 0);
    fcntl(c.in, F_SETFL, O_NONBLOCK);
    if (!input || input_len == 0) {
        close(c.in);
        c.in = -1;
    }
    double end = now_s() + RUN_TIMEOUT;
    int out_open = 1, err_open = 1;
    while (out_open || err_open) {
        struct pollfd p[3] = {{c.out, POLLIN, 0}, {c.err, POLLIN, 0}, {c.in, POLLOUT, 0}};
        int np = c.in >= 0 ? 3 : 2;
        if (!out_open)
            p[0].fd = -1;
        if (!err_open)
            p[1].fd = -1;
        int n = poll(p, (nfds_t)np, 100);
        if (now_s() > end) {
            kill(c.pid, SIGKILL);
            waitpid(c.pid, NULL, 0);
            ck_abort_msg("attnctl %s did not finish within %.0f s", args[0], RUN_TIMEOUT);
        }
        if (n <= 0)
            continue;
        char buf[65536];
        if (p[0].revents) {
            ssize_t k = read(c.out, buf, sizeof buf);
            if (k > 0)
                append(&r.out, &r.out_len, &out_cap, buf, (size_t)k);
            else
                out_open = 0;
        }
        if (p[1].revents) {
            ssize_t k = read(c.err, buf, sizeof buf);
            if (k > 0)
                append(&r.err, &r.err_len, &err_cap, buf, (size_t)k);
            else
                err_open = 0;
        }
        if (np == 3 && p[2].revents) {
            ssize_t k = write(c.in, input + written, input_len - written);
            if (k > 0)
                written += (size_t)k;
            if (k < 0 && errno != EAGAIN) /* EPIPE: the child stopped reading */
                written = input_len;
            if (written == input_len) {
                close(c.in);
                c.in = -1;
            }
        }
    }
    if (c.in >= 0)
        close(c.in);
    close(c.out);
    close(c.err);
    int status = wait_child(&c, RUN_TIMEOUT);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

static result run(const char *const *args)
{
    return run_with_input(args, NULL, 0);
}

static void result_free(result *r)
{
    free(r->out);
    free(r->err);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Splits s into lines in place (s must end with '\n'); returns the count. */
static int split_lines(char *s, char **lines, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *nl = strchr(s, '\n');
        ck_assert_ptr_nonnull(nl);
        *nl = '\0';
        lines[n++] = s;
        s = nl + 1;
    }
    return n;
}

static void model_dir(char *buf, size_t n)
{
    work_path(buf, n, "model");
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* Reads the sample test CSV (libcsv) into texts[] and labels[]. */
typedef struct {
    char *texts[SAMPLE_TEST_ROWS + 1];
    char *labels[SAMPLE_TEST_ROWS + 1];
    int field, row; /* row 0 is the header */
} sample_rows;

static void on_field(void *data, size_t len, void *user)
{
    sample_rows *s = user;
    if (s->row >= 1 && s->row <= SAMPLE_TEST_ROWS) {
        char *copy = strndup(data, len);
        if (s->field == 0)
            s->texts[s->row - 1] = copy;
        else
            s->labels[s->row - 1] = copy;
    }
    s->field++;
}

static void on_row(int c, void *user)
{
    (void)c;
    sample_rows *s = user;
    s->field = 0;
    s->row++;
}

static void read_sample(sample_rows *s)
{
    memset(s, 0, sizeof *s);
    FILE *f = fopen(SAMPLE_TEST, "rb");
    ck_assert_ptr_nonnull(f);
    struct csv_parser p;
    csv_init(&p, CSV_APPEND_NULL);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        ck_assert_uint_eq(csv_parse(&p, buf, n, on_field, on_row, s), n);
    csv_fini(&p, on_field, on_row, s);
    csv_free(&p);
    fclose(f);
    ck_assert_int_eq(s->row, SAMPLE_TEST_ROWS + 1);
}

static void free_sample(sample_rows *s)
{
    for (int i = 0; i < SAMPLE_TEST_ROWS; i++) {
        free(s->texts[i]);
        free(s->labels[i]);
    }
}

/* ------------------------------------------------------------------- eval */

/* The number on the line of the table that starts with `name` and a space. */
static double table_figure(const char *out, const char *name)
{
    size_t n = strlen(name);
    for (const char *line = out; line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, name, n) == 0 && line[n] == ' ') {
            double x = NAN;
            ck_assert_msg(sscanf(line + n, "%lf", &x) == 1, "no number on the '%s' line", name);
            return x;
        }
    }
    ck_abort_msg("no '%s' line in:\n%s", name, out);
    return NAN;
}

START_TEST(test_eval_table)
{
    char model[512];
    model_dir(model, sizeof model);
    const char *args[] = {"eval", "--model", model, SAMPLE_TEST, "--errors", "2", NULL};
    result r = run(args);
    ck_assert_msg(r.status == 0, "status %d, stderr: %s", r.status, r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "accuracy"));
    ck_assert_ptr_nonnull(strstr(r.out, "macro-F1"));
    ck_assert_ptr_nonnull(strstr(r.out, "ROC-AUC"));
    ck_assert_ptr_nonnull(strstr(r.out, "confusion matrix (rows = true, columns = predicted)"));
    ck_assert_ptr_nonnull(strstr(r.out, "negative"));
    ck_assert_ptr_nonnull(strstr(r.out, "200 rows"));
    /* calibration lines right after the mean loss, 4 decimals */
    const char *loss_line = strstr(r.out, "\nmean loss  ");
    ck_assert_ptr_nonnull(loss_line);
    const char *ece_line = strchr(loss_line + 1, '\n') + 1;
    ck_assert_msg(strncmp(ece_line, "ECE        0.", 13) == 0 ||
                      strncmp(ece_line, "ECE        1.", 13) == 0,
                  "after the mean loss: %.40s", ece_line);
    ck_assert_msg(strncmp(strchr(ece_line, '\n') + 1, "Brier      ", 11) == 0, "%.40s",
                  strchr(ece_line, '\n') + 1);
    double ece = table_figure(r.out, "ECE"), brier = table_figure(r.out, "Brier");
    ck_assert_msg(ece >= 0 && ece <= 1, "ECE %g", ece);
    ck_assert_msg(brier >= 0 && brier <= 1, "Brier %g", brier);
    ck_assert_msg(table_figure(r.out, "accuracy") > 0, "the other figures are still there");
    ck_assert_str_eq(r.err, "");
    result_free(&r);
}
END_TEST

static double json_num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(cJSON_IsNumber(v), "JSON key '%s' missing or not a number", key);
    return v->valuedouble;
}

START_TEST(test_eval_json)
{
    char model[512];
    model_dir(model, sizeof model);
    const char *args[] = {"eval", "--model", model, SAMPLE_TEST, "--json", "--errors", "3",
                          "--batch-size", "7", NULL};
    result r = run(args);
    ck_assert_msg(r.status == 0, "status %d, stderr: %s", r.status, r.err);
    cJSON *o = cJSON_Parse(r.out);
    ck_assert_msg(o != NULL, "not JSON: %s", r.out);
    ck_assert_int_eq((int)json_num(o, "count"), SAMPLE_TEST_ROWS);
    ck_assert_int_eq((int)json_num(o, "skipped_empty"), 0);
    double acc = json_num(o, "accuracy");
    double auc = json_num(o, "roc_auc");
    double loss = json_num(o, "mean_loss");
    double f1 = json_num(o, "macro_f1");
    ck_assert(acc >= 0 && acc <= 1 && auc >= 0 && auc <= 1 && f1 >= 0 && f1 <= 1);
    ck_assert(loss > 0 && isfinite(loss));
    double ece = json_num(o, "ece"), brier = json_num(o, "brier");
    ck_assert_msg(ece >= 0 && ece <= 1, "ece %g", ece);
    ck_assert_msg(brier >= 0 && brier <= 1, "brier %g", brier);
    /* with accuracy above 0.7 the binary Brier score is well below that of a coin (0.25) */
    ck_assert_msg(brier < 0.25, "brier %g", brier);
    ck_assert(json_num(o, "seconds") >= 0);
    /* The sample is easy: even a tiny model should beat chance clearly. */
    ck_assert_msg(acc > 0.7, "accuracy %.3f", acc);

    const cJSON *conf = cJSON_GetObjectItemCaseSensitive(o, "confusion");
    const cJSON *classes = cJSON_GetObjectItemCaseSensitive(o, "classes");
    ck_assert_int_eq(cJSON_GetArraySize(conf), 2);
    ck_assert_int_eq(cJSON_GetArraySize(classes), 2);
    double total = 0, diag = 0, macro = 0;
    for (int i = 0; i < 2; i++) {
        const cJSON *row = cJSON_GetArrayItem(conf, i);
        const cJSON *cls = cJSON_GetArrayItem(classes, i);
        double support = 0;
        for (int j = 0; j < 2; j++) {
            double v = cJSON_GetArrayItem(row, j)->valuedouble;
            total += v;
            support += v;
            if (i == j)
                diag += v;
        }
        ck_assert_double_eq_tol(json_num(cls, "support"), support, 1e-9);
        macro += json_num(cls, "f1");
    }
    ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(classes, 0), "label")->valuestring,
                     "negative");
    ck_assert_double_eq_tol(total, SAMPLE_TEST_ROWS, 1e-9);
    ck_assert_double_eq_tol(acc, diag / total, 1e-12);
    ck_assert_double_eq_tol(f1, macro / 2, 1e-12);

    const cJSON *errs = cJSON_GetObjectItemCaseSensitive(o, "errors");
    ck_assert(cJSON_IsArray(errs));
    int n_wrong = (int)(total - diag);
    ck_assert_int_eq(cJSON_GetArraySize(errs), n_wrong < 3 ? n_wrong : 3);
    double last_p = 2;
    for (int i = 0; i < cJSON_GetArraySize(errs); i++) {
        const cJSON *e = cJSON_GetArrayItem(errs, i);
        double p = json_num(e, "probability");
        ck_assert(p <= last_p && p >= 0.5); /* most confident first; argmax of 2 is >= 0.5 */
        last_p = p;
        ck_assert_str_ne(cJSON_GetObjectItem(e, "true")->valuestring,
                         cJSON_GetObjectItem(e, "predicted")->valuestring);
        ck_assert(json_num(e, "line") >= 2);
    }
    cJSON_Delete(o);
    result_free(&r);
}
END_TEST

/* The top (up to 5) positive scores of a JSON array, largest first (ties:
 * earlier position), as eval --errors picks them. */
static int top_pushers(const cJSON *scores, int *pos, double *val)
{
    int k = 0, n = cJSON_GetArraySize(scores);
    for (int t = 0; t < n; t++) {
        double x = cJSON_GetArrayItem(scores, t)->valuedouble;
        if (!(x > 0.0))
            continue;
        int j = k < 5 ? k++ : 5;
        if (j == 5 && x <= val[4])
            continue;
        if (j == 5)
            j = 4;
        while (j > 0 && val[j - 1] < x) {
            val[j] = val[j - 1];
            pos[j] = pos[j - 1];
            j--;
        }
        val[j] = x;
        pos[j] = t;
    }
    return k;
}

/* eval --errors names the tokens that pushed each mistake toward the wrong
 * class: by default gradient x input, with --attribution ig integrated
 * gradients; they are the largest positive attributions that inspect gives
 * the same review with the same method. The short reviews are out of the
 * sample's domain, so the fixture model gets plenty of them wrong. */
START_TEST(test_eval_errors_explained)
{
    char model[512];
    model_dir(model, sizeof model);
    const char *methods[2] = {"gradxinput", "ig"};
    for (int m = 0; m < 2; m++) {
        const char *args[] = {"eval", "--model", model, "data/short_reviews.csv", "--json", "--errors", "4",
                              m ? "--attribution" : NULL, methods[m], NULL};
        result r = run(args);
        ck_assert_msg(r.status == 0, "status %d, stderr: %s", r.status, r.err);
        cJSON *o = cJSON_Parse(r.out);
        ck_assert_msg(o != NULL, "not JSON: %s", r.out);
        ck_assert_str_eq(cJSON_GetObjectItem(o, "errors_attribution")->valuestring, methods[m]);
        const cJSON *errs = cJSON_GetObjectItemCaseSensitive(o, "errors");
        ck_assert_int_eq(cJSON_GetArraySize(errs), 4);
        int compared = 0;
        for (int i = 0; i < 4; i++) {
            const cJSON *e = cJSON_GetArrayItem(errs, i);
            const cJSON *pushed = cJSON_GetObjectItemCaseSensitive(e, "pushed_by");
            int n = cJSON_GetArraySize(pushed);
            ck_assert_msg(cJSON_IsArray(pushed) && n >= 1 && n <= 5, "error %d: %d tokens", i, n);
            double last = INFINITY;
            for (int k = 0; k < n; k++) {
                const cJSON *t = cJSON_GetArrayItem(pushed, k);
                double score = json_num(t, "score");
                ck_assert(score > 0.0 && score <= last);
                last = score;
                ck_assert(strlen(cJSON_GetObjectItem(t, "token")->valuestring) > 0);
            }
            /* The same review through inspect, when the excerpt is the whole text. */
            const char *text = cJSON_GetObjectItem(e, "text")->valuestring;
            size_t len = strlen(text);
            if (len >= 3 && strcmp(text + len - 3, "...") == 0)
                continue;
            const char *iargs[] = {"inspect", "--model", model, "--format", "json", "--attribution", methods[m],
                                   "--", text, NULL};
            result ri = run(iargs);
            ck_assert_msg(ri.status == 0, "inspect: %s", ri.err);
            cJSON *j = cJSON_Parse(ri.out);
            ck_assert_ptr_nonnull(j);
            const char *predicted = cJSON_GetObjectItem(e, "predicted")->valuestring;
            ck_assert_str_eq(cJSON_GetObjectItem(j, "label")->valuestring, predicted);
            const cJSON *scores = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "attributions"), predicted);
            int pos[5];
            double val[5];
            ck_assert_int_eq(top_pushers(scores, pos, val), n);
            for (int k = 0; k < n; k++) {
                const cJSON *t = cJSON_GetArrayItem(pushed, k);
                ck_assert_int_eq((int)json_num(t, "position"), pos[k]);
                ck_assert_str_eq(cJSON_GetObjectItem(t, "token")->valuestring,
                                 cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tokens"), pos[k])->valuestring);
                ck_assert_msg(fabs(json_num(t, "score") - val[k]) <= 1e-5 * fabs(val[k]) + 1e-7,
                              "%s: eval %.8g, inspect %.8g", methods[m], json_num(t, "score"), val[k]);
            }
            compared++;
            cJSON_Delete(j);
            result_free(&ri);
        }
        ck_assert_int_ge(compared, 2);
        cJSON_Delete(o);
        result_free(&r);
    }

    /* The table: a line of pushers under each mistake; none with --attribution none. */
    const char *table[] = {"eval", "--model", model, "data/short_reviews.csv", "--errors", "2", NULL};
    result r = run(table);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "tokens scored by gradient x input toward the predicted class"));
    int lines = 0;
    for (const char *p = r.out; (p = strstr(p, "\n               pushed toward ")); p++) {
        ck_assert_msg(strstr(p, " by: ") && strstr(p, "[+"), "%.120s", p);
        lines++;
    }
    ck_assert_int_eq(lines, 2);
    result_free(&r);
    const char *plain[] = {"eval", "--model", model, "data/short_reviews.csv", "--errors", "2",
                           "--attribution", "none", NULL};
    r = run(plain);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "most confidently wrong (2 of "));
    ck_assert_ptr_null(strstr(r.out, "pushed toward"));
    result_free(&r);
    const char *bad[] = {"eval", "--model", model, "data/short_reviews.csv", "--attribution", "lime", NULL};
    r = run(bad);
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "lime"));
    result_free(&r);
}
END_TEST

START_TEST(test_eval_unknown_label)
{
    char model[512], csv_path[512];
    model_dir(model, sizeof model);
    work_path(csv_path, sizeof csv_path, "unknown_label.csv");
    write_file(csv_path, "review,sentiment\nA fine film.,positive\nSo-so.,neutral\n");
    const char *args[] = {"eval", "--model", model, csv_path, NULL};
    result r = run(args);
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.out, "");
    ck_assert_int_eq(count_lines(r.err), 1);
    ck_assert_msg(strstr(r.err, ":3:") && strstr(r.err, "neutral"), "stderr: %s", r.err);
    result_free(&r);
}
END_TEST

START_TEST(test_missing_model)
{
    const char *cmds[][6] = {
        {"eval", "--model", "build/no/such/model", SAMPLE_TEST, NULL},
        {"predict", "--model", "build/no/such/model", NULL},
    };
    for (int i = 0; i < 2; i++) {
        result r = run_with_input(cmds[i], "good\n", 5);
        ck_assert_int_eq(r.status, 1);
        ck_assert_int_eq(count_lines(r.err), 1);
        ck_assert_msg(strncmp(r.err, "attnctl: error: ", 16) == 0 &&
                          strstr(r.err, "build/no/such/model"),
                      "stderr: %s", r.err);
        ck_assert_str_eq(r.out, "");
        result_free(&r);
    }
}
END_TEST

START_TEST(test_usage_errors)
{
    char model[512];
    model_dir(model, sizeof model);
    const char *cmds[][8] = {
        {"eval", "--model", model, SAMPLE_TEST, "--frobnicate", NULL},
        /* an ending no format has (it used to write text into report.pdf) */
        {"inspect", "--model", model, "--out", "build/report.pdf", "good", NULL},
        {"predict", "--model", model, "--frobnicate", NULL},
        {"bench", "--frobnicate", NULL},
        {"predict", "--model", model, "--batch-size", "0", NULL},
        {"predict", "--model", model, "--threshold", "1.5", NULL},
        {"eval", "--model", model, NULL},
        {"eval", SAMPLE_TEST, NULL},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        result r = run(cmds[i]);
        ck_assert_msg(r.status == 2, "%s case %zu: status %d", cmds[i][0], i, r.status);
        ck_assert_str_eq(r.out, "");
        ck_assert_ptr_nonnull(strstr(r.err, "--help"));
        result_free(&r);
    }
    /* the refit trains on the training file's rows: a --val-file's are not
     * among them (it used to refit without them, saying they were in) */
    char out[512];
    work_path(out, sizeof out, "refit-val-file");
    const char *refit[] = {"train", SAMPLE_TEST, "--out", out, "--val-file", SAMPLE_TEST,
                           "--refit", "1", NULL};
    result r = run(refit);
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "with --val-file use --refit 0"), "%s", r.err);
    ck_assert_int_eq(access(out, F_OK), -1);
    result_free(&r);
}
END_TEST

/* With a --val-file no training row is held out, and config.json says so
 * and names the file (it said val_split 0.1). */
START_TEST(test_train_val_file_recorded)
{
    char out[512], config[600];
    work_path(out, sizeof out, "val-file-recorded");
    const char *args[] = {"train",   SAMPLE_TRAIN, "--out",  out,  "--val-file", SAMPLE_TEST,
                          "--layers", "1",        "--d-model", "16", "--heads",   "2",
                          "--ff",     "32",       "--max-len", "64", "--epochs",  "1",
                          "--wide",   "0",        "--quiet",   NULL};
    result r = run(args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    result_free(&r);
    snprintf(config, sizeof config, "%s/config.json", out);
    size_t len;
    char *text = test_slurp(config, &len);
    ck_assert_msg(strstr(text, "\"val_split\": 0,") &&
                      strstr(text, "\"val_file\": \"" SAMPLE_TEST "\"") &&
                      strstr(text, "\"rows_used\": 600"),
                  "%s", text);
    free(text);
    rm_rf(out);
}
END_TEST

START_TEST(test_help)
{
    const char *names[] = {"eval", "predict", "bench"};
    for (int i = 0; i < 3; i++) {
        const char *args[] = {names[i], "--help", NULL};
        result r = run(args);
        ck_assert_int_eq(r.status, 0);
        char expect[64];
        snprintf(expect, sizeof expect, "usage: attnctl %s", names[i]);
        ck_assert_msg(strncmp(r.out, expect, strlen(expect)) == 0, "%s", r.out);
        ck_assert_str_eq(r.err, "");
        result_free(&r);
    }
    /* the top level's help and version: an argument too many is a usage
     * error, and output that cannot be written fails as a command's does */
    const char *extra[] = {"-V", "extra", NULL};
    result r = run(extra);
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "-V takes no arguments"), "%s", r.err);
    result_free(&r);
    const char *forms[] = {"--help", "--version", "help train"};
    for (int i = 0; i < 3; i++) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "%s %s > /dev/full 2>/dev/null", attnctl_path(), forms[i]);
        int st = system(cmd);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "%s: status %d", forms[i], st);
    }
}
END_TEST

/* ----------------------------------------------------------------- predict */

/* Awkward input: empty line, blank line, CRLF, invalid UTF-8, NUL byte, a
 * 1 MB line, no final newline. */
static char *awkward_input(size_t *len, int *n_lines)
{
    static const char head[] = "A wonderful, moving film. Loved every minute.\n"
                               "\n"
                               "   \t \n"
                               "This movie was terrible. Avoid it!\r\n"
                               "Broken bytes \xff\xfe\xc3 here \xe2\x82 and \xed\xa0\x80 there\n"
                               "a NUL \0 inside\n";
    size_t head_len = sizeof head - 1; /* sizeof counts past the embedded NUL */
    size_t big = 1 << 20;
    const char *tail = "\nThe last line has no newline, and it is great";
    size_t tail_len = strlen(tail);
    char *s = malloc(head_len + big + tail_len);
    memcpy(s, head, head_len);
    for (size_t i = 0; i < big; i++)
        s[head_len + i] = "great film "[i % 11];
    memcpy(s + head_len + big, tail, tail_len);
    *len = head_len + big + tail_len;
    *n_lines = 8;
    return s;
}

/* A gzip-compressed input FILE is read decompressed, as train and eval read
 * theirs (it was classified as its compressed bytes, one verdict for the
 * file), and one cut short is an error, not fewer verdicts; so is standard
 * input redirected from it, and through a pipe it is refused. */
START_TEST(test_predict_gzip_file)
{
    char model[512], plain[512], packed[512], cut[512];
    model_dir(model, sizeof model);
    work_path(plain, sizeof plain, "lines.txt");
    work_path(packed, sizeof packed, "lines.txt.gz");
    work_path(cut, sizeof cut, "cut.txt.gz");
    const char text[] = "A wonderful film.\nDreadful and dull.\nThe lead actress is charming.\n";
    test_write_file(plain, text);
    gzFile gz = gzopen(packed, "wb");
    ck_assert_ptr_nonnull(gz);
    ck_assert_int_eq(gzwrite(gz, text, sizeof text - 1), (int)(sizeof text - 1));
    ck_assert_int_eq(gzclose(gz), Z_OK);
    const char *from_plain[] = {"predict", "--model", model, plain, NULL};
    const char *from_packed[] = {"predict", "--model", model, packed, NULL};
    result a = run(from_plain), b = run(from_packed);
    ck_assert_msg(a.status == 0 && b.status == 0, "%s %s", a.err, b.err);
    ck_assert_int_eq(count_lines(b.out), 3);
    ck_assert_str_eq(a.out, b.out);
    /* standard input redirected from the file is the file; the same bytes
     * through a pipe are refused with one line (they were one verdict) */
    char cmd[2048], *err_text = NULL;
    snprintf(cmd, sizeof cmd, "{ '%s' predict --model '%s' < '%s' > '%s.out'; }", attnctl_path(),
             model, packed, packed);
    ck_assert_int_eq(run_stderr(cmd, &err_text), 0);
    free(err_text);
    snprintf(cmd, sizeof cmd, "%s.out", packed);
    size_t redirected_len;
    char *redirected = test_slurp(cmd, &redirected_len);
    ck_assert_str_eq(redirected, a.out);
    free(redirected);
    unlink(cmd);
    size_t len;
    char *bytes = test_slurp(packed, &len);
    const char *from_stdin[] = {"predict", "--model", model, NULL};
    result piped = run_with_input(from_stdin, bytes, len);
    ck_assert_int_eq(piped.status, 1);
    ck_assert_int_eq(count_lines(piped.err), 1);
    ck_assert_str_eq(piped.out, "");
    ck_assert_msg(strstr(piped.err, "standard input") && strstr(piped.err, "gzip"), "%s", piped.err);
    result_free(&piped);
    const char *inspect[] = {"inspect", "--model", model, NULL};
    piped = run_with_input(inspect, bytes, len);
    ck_assert_int_eq(piped.status, 1);
    ck_assert_msg(strstr(piped.err, "gzip"), "%s", piped.err);
    result_free(&piped);
    result_free(&a);
    result_free(&b);
    FILE *f = fopen(cut, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, len - 12, f), len - 12);
    ck_assert_int_eq(fclose(f), 0);
    free(bytes);
    const char *from_cut[] = {"predict", "--model", model, cut, NULL};
    result c = run(from_cut);
    ck_assert_int_eq(c.status, 1);
    ck_assert_int_eq(count_lines(c.err), 1);
    ck_assert_msg(strstr(c.err, cut) && strstr(c.err, "corrupt or cut short"), "%s", c.err);
    result_free(&c);
    unlink(plain);
    unlink(packed);
    unlink(cut);
}
END_TEST

START_TEST(test_predict_awkward_lines)
{
    char model[512];
    model_dir(model, sizeof model);
    size_t len;
    int n_lines;
    char *input = awkward_input(&len, &n_lines);
    const char *args[] = {"predict", "--model", model, NULL};
    result r = run_with_input(args, input, len);
    ck_assert_msg(r.status == 0, "status %d, stderr: %s", r.status, r.err);
    ck_assert_str_eq(r.err, "");
    ck_assert_int_eq(count_lines(r.out), n_lines);
    char *lines[16];
    ck_assert_int_eq(split_lines(r.out, lines, 16), n_lines);
    for (int i = 0; i < n_lines; i++) {
        if (i == 1 || i == 2) {
            ck_assert_str_eq(lines[i], "<empty>");
            continue;
        }
        char label[64];
        double p;
        ck_assert_msg(sscanf(lines[i], "%63[^\t]\t%lf", label, &p) == 2, "line %d: %s", i,
                      lines[i]);
        ck_assert_msg(strcmp(label, "positive") == 0 || strcmp(label, "negative") == 0, "%s",
                      label);
        ck_assert(p >= 0.5 && p <= 1.0);
    }
    /* The sample's vocabulary makes these two easy. */
    ck_assert_msg(strncmp(lines[0], "positive\t", 9) == 0, "%s", lines[0]);
    ck_assert_msg(strncmp(lines[3], "negative\t", 9) == 0, "%s", lines[3]);
    free(input);
    result_free(&r);
}
END_TEST

/* A line with no token (no-break spaces, an ideographic space, a lone tag)
 * is a blank line to the model: <empty>, as inspect calls it empty; an
 * unknown word still gets a verdict. */
START_TEST(test_predict_wordless_lines)
{
    char model[512];
    model_dir(model, sizeof model);
    const char input[] = "\xc2\xa0\xc2\xa0\n\xe3\x80\x80\n<br />\nzqxjvw\nA wonderful film.\n";
    const char *args[] = {"predict", "--model", model, NULL};
    result r = run_with_input(args, input, sizeof input - 1);
    ck_assert_msg(r.status == 0, "status %d, stderr: %s", r.status, r.err);
    char *lines[8];
    ck_assert_int_eq(split_lines(r.out, lines, 8), 5);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(strcmp(lines[i], "<empty>") == 0, "line %d: %s", i, lines[i]);
    for (int i = 3; i < 5; i++)
        ck_assert_msg(strchr(lines[i], '\t') != NULL, "line %d: %s", i, lines[i]);
    result_free(&r);
}
END_TEST

START_TEST(test_predict_json)
{
    char model[512];
    model_dir(model, sizeof model);
    size_t len;
    int n_lines;
    char *input = awkward_input(&len, &n_lines);
    const char *args[] = {"predict", "--model", model, "--json", "--batch-size", "3", NULL};
    result r = run_with_input(args, input, len);
    ck_assert_msg(r.status == 0, "status %d, stderr: %s", r.status, r.err);
    char *lines[16];
    ck_assert_int_eq(split_lines(r.out, lines, 16), n_lines);
    for (int i = 0; i < n_lines; i++) {
        cJSON *o = cJSON_Parse(lines[i]);
        ck_assert_msg(o != NULL, "line %d not JSON: %s", i, lines[i]);
        const cJSON *label = cJSON_GetObjectItemCaseSensitive(o, "label");
        if (i == 1 || i == 2) {
            ck_assert(cJSON_IsNull(label));
            ck_assert_str_eq(cJSON_GetObjectItem(o, "error")->valuestring, "empty");
            cJSON_Delete(o);
            continue;
        }
        ck_assert(cJSON_IsString(label));
        const cJSON *probs = cJSON_GetObjectItemCaseSensitive(o, "probabilities");
        double pn = json_num(probs, "negative"), pp = json_num(probs, "positive");
        ck_assert_double_eq_tol(pn + pp, 1.0, 2e-6);
        double p = json_num(o, "probability");
        ck_assert_double_eq_tol(p, strcmp(label->valuestring, "positive") == 0 ? pp : pn, 1e-9);
        ck_assert(json_num(o, "tokens") >= 1);
        const cJSON *trunc = cJSON_GetObjectItemCaseSensitive(o, "truncated");
        ck_assert(cJSON_IsBool(trunc));
        if (i == 6) /* the 1 MB line */
            ck_assert(cJSON_IsTrue(trunc) && json_num(o, "tokens") > 1000);
        if (i == 0)
            ck_assert(cJSON_IsFalse(trunc));
        cJSON_Delete(o);
    }
    free(input);
    result_free(&r);
}
END_TEST

/* `predict --json` of the shared model on input, which must give n lines
 * (lines holds n + 1, to see one too many). */
static result predict_json(const char *input, char **lines, int n)
{
    char model[512];
    model_dir(model, sizeof model);
    const char *args[] = {"predict", "--model", model, "--json", NULL};
    result r = run_with_input(args, input, strlen(input));
    ck_assert_msg(r.status == 0, "status %d, stderr: %s", r.status, r.err);
    ck_assert_int_eq(split_lines(r.out, lines, n + 1), n);
    return r;
}

/* A model trained with today's defaults reads an emoji as its name: "👍" is
 * the two tokens of "thumbs up", with the same verdict; the skin tone and
 * the variation selector add nothing. */
START_TEST(test_predict_emoji_names)
{
    char *lines[4];
    result r = predict_json(
        "\xF0\x9F\x91\x8D\nthumbs up\n\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD\xEF\xB8\x8F\n", lines, 3);
    ck_assert_str_eq(lines[0], lines[1]);
    ck_assert_str_eq(lines[0], lines[2]);
    cJSON *o = cJSON_Parse(lines[0]);
    ck_assert_ptr_nonnull(o);
    ck_assert_double_eq(json_num(o, "tokens"), 2);
    cJSON_Delete(o);
    result_free(&r);
}
END_TEST

/* A word stretched for emphasis reads as the word: "Loooved this wonnnderful
 * fiiiilm" gets the verdict of "Loved this wonderful film", to the bit. */
START_TEST(test_predict_elongations)
{
    char model[512];
    model_dir(model, sizeof model);
    char vocab_path[600];
    snprintf(vocab_path, sizeof vocab_path, "%s/vocab.txt", model);
    FILE *f = fopen(vocab_path, "r");
    ck_assert_ptr_nonnull(f);
    int known = 0;
    char line[256];
    while (fgets(line, sizeof line, f))
        known += strcmp(line, "loved\n") == 0 || strcmp(line, "wonderful\n") == 0 ||
                 strcmp(line, "film\n") == 0;
    fclose(f);
    ck_assert_int_eq(known, 3); /* else the two lines would agree as <unk>s */
    char *lines[3];
    result r = predict_json("Loved this wonderful film\nLOOOOVED this wonnnderful fiiiilm\n", lines, 2);
    ck_assert_str_eq(lines[0], lines[1]);
    result_free(&r);
}
END_TEST

START_TEST(test_predict_threshold)
{
    char model[512];
    model_dir(model, sizeof model);
    const char *input = "A wonderful film.\nTerrible, avoid it.\nSo-so.\n";
    const char *low[] = {"predict", "--model", model, "--threshold", "0", NULL};
    result r = run_with_input(low, input, strlen(input));
    ck_assert_int_eq(r.status, 0);
    char *lines[8];
    ck_assert_int_eq(split_lines(r.out, lines, 8), 3);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(strncmp(lines[i], "positive\t", 9) == 0, "%s", lines[i]);
    result_free(&r);
    const char *high[] = {"predict", "--model", model, "--threshold", "1", NULL};
    r = run_with_input(high, input, strlen(input));
    ck_assert_int_eq(r.status, 0);
    ck_assert_int_eq(split_lines(r.out, lines, 8), 3);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(strncmp(lines[i], "negative\t", 9) == 0, "%s", lines[i]);
    result_free(&r);
}
END_TEST

/* Per-line predictions do not depend on how lines are batched, and equal the
 * CSV path (the one eval uses); eval's accuracy equals the lines' accuracy. */
START_TEST(test_predict_matches_eval)
{
    char model[512];
    model_dir(model, sizeof model);
    sample_rows s;
    read_sample(&s);
    char *input = NULL;
    size_t len = 0, cap = 0;
    append(&input, &len, &cap, "", 0);
    for (int i = 0; i < SAMPLE_TEST_ROWS; i++) {
        append(&input, &len, &cap, s.texts[i], strlen(s.texts[i]));
        append(&input, &len, &cap, "\n", 1);
    }
    const char *b1[] = {"predict", "--model", model, "--json", "--batch-size", "1", NULL};
    const char *b7[] = {"predict", "--model", model, "--json", "--batch-size", "7", NULL};
    const char *csv[] = {"predict", "--model", model, "--json", "--csv", SAMPLE_TEST,
                         "--batch-size", "7", NULL};
    result r1 = run_with_input(b1, input, len);
    result r7 = run_with_input(b7, input, len);
    result rc = run(csv);
    ck_assert_int_eq(r1.status, 0);
    ck_assert_int_eq(r7.status, 0);
    ck_assert_msg(rc.status == 0, "stderr %s", rc.err);
    ck_assert_int_eq(count_lines(r1.out), SAMPLE_TEST_ROWS);
    ck_assert_int_eq(count_lines(r7.out), SAMPLE_TEST_ROWS);
    ck_assert_str_eq(r7.out, rc.out); /* same batches: the same bits */

    /* Another batch size puts a row at another place in OpenBLAS's blocks:
     * the same labels, probabilities equal up to float rounding (measured:
     * 1 ulp of the 6th decimal on a few rows). */
    char *lines[SAMPLE_TEST_ROWS + 1], *lines7[SAMPLE_TEST_ROWS + 1];
    ck_assert_int_eq(split_lines(r1.out, lines, SAMPLE_TEST_ROWS + 1), SAMPLE_TEST_ROWS);
    ck_assert_int_eq(split_lines(r7.out, lines7, SAMPLE_TEST_ROWS + 1), SAMPLE_TEST_ROWS);
    int correct = 0;
    /* ECE and Brier recomputed from the printed probabilities (6 decimals) */
    int64_t bin_count[15] = {0}, bin_correct[15] = {0};
    double bin_confidence[15] = {0}, brier_sum = 0;
    for (int i = 0; i < SAMPLE_TEST_ROWS; i++) {
        cJSON *o = cJSON_Parse(lines[i]), *o7 = cJSON_Parse(lines7[i]);
        ck_assert_ptr_nonnull(o);
        ck_assert_ptr_nonnull(o7);
        const char *label = cJSON_GetObjectItem(o, "label")->valuestring;
        ck_assert_str_eq(label, cJSON_GetObjectItem(o7, "label")->valuestring);
        ck_assert_double_eq_tol(json_num(o, "probability"), json_num(o7, "probability"), 2e-6);
        correct += strcmp(label, s.labels[i]) == 0;
        double confidence = json_num(o, "probability");
        int bin = (int)ceil(confidence * 15) - 1;
        bin = bin < 0 ? 0 : bin > 14 ? 14 : bin;
        bin_count[bin]++;
        bin_correct[bin] += strcmp(label, s.labels[i]) == 0;
        bin_confidence[bin] += confidence;
        double p_positive = json_num(cJSON_GetObjectItem(o, "probabilities"), "positive");
        double miss = p_positive - (strcmp(s.labels[i], "positive") == 0);
        brier_sum += miss * miss;
        cJSON_Delete(o);
        cJSON_Delete(o7);
    }
    double expected_ece = 0;
    for (int b = 0; b < 15; b++)
        if (bin_count[b])
            expected_ece += fabs((double)bin_correct[b] - bin_confidence[b]) / SAMPLE_TEST_ROWS;
    const char *ev[] = {"eval", "--model", model, SAMPLE_TEST, "--json", NULL};
    result re = run(ev);
    ck_assert_int_eq(re.status, 0);
    cJSON *o = cJSON_Parse(re.out);
    ck_assert_ptr_nonnull(o);
    ck_assert_double_eq_tol(json_num(o, "accuracy"), correct / (double)SAMPLE_TEST_ROWS, 1e-12);
    ck_assert_double_eq_tol(json_num(o, "brier"), brier_sum / SAMPLE_TEST_ROWS, 1e-5);
    ck_assert_double_eq_tol(json_num(o, "ece"), expected_ece, 1e-5);
    cJSON_Delete(o);
    result_free(&re);
    result_free(&r1);
    result_free(&r7);
    result_free(&rc);
    free(input);
    free_sample(&s);
}
END_TEST

/* s without its lines that hold `key` (eval's timings). */
static void drop_lines_with(char *s, const char *key)
{
    char *out = s;
    while (*s) {
        char *nl = strchr(s, '\n');
        size_t n = nl ? (size_t)(nl - s) + 1 : strlen(s);
        char save = s[n - (nl ? 1 : 0)];
        s[n - (nl ? 1 : 0)] = '\0';
        int drop = strstr(s, key) != NULL;
        s[n - (nl ? 1 : 0)] = save;
        if (!drop) {
            memmove(out, s, n);
            out += n;
        }
        s += n;
    }
    *out = '\0';
}

/* predict (lines from a file, blank ones among them, and --csv) and eval
 * print the same bytes at --threads 1 and 2, for the FP32 fixture and its
 * quantized copy: batches run on the threads at once (small batches, so
 * there are many, in several windows) and their results must come out in
 * input order, each row's "tokens" telling the rows apart. */
START_TEST(test_threads_same_bytes)
{
    char model[512], qdir[512], lines_path[512];
    model_dir(model, sizeof model);
    work_path(qdir, sizeof qdir, "threads-q");
    work_path(lines_path, sizeof lines_path, "threads-lines.txt");
    nftw(qdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    const char *quantize[] = {"quantize", "--model", model, "--out", qdir, NULL};
    result q = run(quantize);
    ck_assert_msg(q.status == 0, "status %d, stderr: %s", q.status, q.err);
    result_free(&q);
    sample_rows s;
    read_sample(&s);
    char *input = NULL;
    size_t len = 0, cap = 0;
    append(&input, &len, &cap, "", 0);
    int n_lines = 0;
    for (int i = 0; i < SAMPLE_TEST_ROWS; i++, n_lines++) {
        if (i % 17 == 5) {
            append(&input, &len, &cap, "  \n", 3);
            n_lines++;
        }
        append(&input, &len, &cap, s.texts[i], strlen(s.texts[i]));
        append(&input, &len, &cap, "\n", 1);
    }
    write_file(lines_path, input);
    const char *models[] = {model, qdir};
    for (int k = 0; k < 2; k++) {
        result out[2][3];
        const char *threads[] = {"1", "2"};
        for (int t = 0; t < 2; t++) {
            const char *lines[] = {"predict", "--model", models[k], "--json", "--batch-size", "3",
                                   "--threads", threads[t], lines_path, NULL};
            const char *csv[] = {"predict", "--model", models[k], "--json", "--csv", SAMPLE_TEST,
                                 "--batch-size", "3", "--threads", threads[t], NULL};
            const char *ev[] = {"eval", "--model", models[k], SAMPLE_TEST, "--json", "--errors",
                                "5", "--batch-size", "3", "--threads", threads[t], NULL};
            out[t][0] = run(lines);
            out[t][1] = run(csv);
            out[t][2] = run(ev);
            for (int c = 0; c < 3; c++)
                ck_assert_msg(out[t][c].status == 0, "%s: status %d, stderr: %s", models[k],
                              out[t][c].status, out[t][c].err);
            ck_assert_int_eq(count_lines(out[t][0].out), n_lines);
            ck_assert_int_eq(count_lines(out[t][1].out), SAMPLE_TEST_ROWS);
            drop_lines_with(out[t][2].out, "seconds\"");
        }
        for (int c = 0; c < 3; c++)
            ck_assert_msg(strcmp(out[0][c].out, out[1][c].out) == 0,
                          "%s: output %d differs at 1 and 2 threads", models[k], c);
        /* in input order: the lines' token counts, blank lines left out,
         * are the CSV rows' */
        char *counts[2] = {NULL, NULL};
        for (int c = 0; c < 2; c++) {
            size_t counts_len = 0, counts_cap = 0;
            append(&counts[c], &counts_len, &counts_cap, "", 0);
            for (const char *p = out[1][c].out; (p = strstr(p, "\"tokens\":")) != NULL; p++) {
                const char *end = strchr(p, ',');
                append(&counts[c], &counts_len, &counts_cap, p, (size_t)(end - p) + 1);
            }
        }
        ck_assert_int_eq(count_lines(out[1][1].out), SAMPLE_TEST_ROWS);
        ck_assert_str_eq(counts[0], counts[1]);
        free(counts[0]);
        free(counts[1]);
        for (int t = 0; t < 2; t++)
            for (int c = 0; c < 3; c++)
                result_free(&out[t][c]);
    }
    free(input);
    free_sample(&s);
    nftw(qdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
END_TEST

/* Reads one line from fd within timeout seconds. */
static int read_line_timeout(int fd, char *buf, size_t cap, double timeout)
{
    size_t n = 0;
    double end = now_s() + timeout;
    while (n + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)((end - now_s()) * 1000);
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return -1;
        char c;
        if (read(fd, &c, 1) != 1)
            return -1;
        if (c == '\n')
            break;
        buf[n++] = c;
    }
    buf[n] = '\0';
    return (int)n;
}

START_TEST(test_predict_interactive)
{
    char model[512];
    model_dir(model, sizeof model);
    const char *args[] = {"predict", "--model", model, NULL};
    child c;
    spawn(&c, args);
    const char *reviews[] = {"A wonderful film, loved every minute.\n",
                             "This movie was terrible. Avoid it!\n",
                             "\n",
                             "Beautifully shot, a real gem.\n"};
    const char *expect[] = {"positive\t", "negative\t", "<empty>", "positive\t"};
    char line[256];
    for (int i = 0; i < 4; i++) {
        /* Only the next line is written after the answer to the previous one. */
        ck_assert_int_eq(write(c.in, reviews[i], strlen(reviews[i])), (ssize_t)strlen(reviews[i]));
        ck_assert_msg(read_line_timeout(c.out, line, sizeof line, 10.0) >= 0,
                      "no answer to line %d within 10 s", i + 1);
        ck_assert_msg(strncmp(line, expect[i], strlen(expect[i])) == 0, "line %d: %s", i + 1,
                      line);
    }
    close(c.in);
    ck_assert_int_eq(read_line_timeout(c.out, line, sizeof line, 10.0), -1); /* EOF, no more */
    int status = wait_child(&c, 10.0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(c.out);
    close(c.err);
}
END_TEST

START_TEST(test_predict_closed_stdout)
{
    char model[512];
    model_dir(model, sizeof model);
    const char *args[] = {"predict", "--model", model, NULL};
    child c;
    spawn(&c, args);
    char line[256];
    const char *review = "A wonderful film, loved every minute.\n";
    ck_assert_int_eq(write(c.in, review, strlen(review)), (ssize_t)strlen(review));
    ck_assert_int_ge(read_line_timeout(c.out, line, sizeof line, 10.0), 0);
    close(c.out); /* like `| head -1` */
    /* Keep feeding until predict notices and stops (EPIPE on our side then). */
    for (int i = 0; i < 20000; i++)
        if (write(c.in, review, strlen(review)) < 0)
            break;
    close(c.in);
    int status = wait_child(&c, 20.0);
    ck_assert_msg(WIFEXITED(status), "killed by signal %d", WTERMSIG(status));
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    char err[512];
    ssize_t n = read(c.err, err, sizeof err - 1);
    ck_assert_msg(n == 0, "stderr: %.*s", (int)(n > 0 ? n : 0), err);
    close(c.err);
    /* inspect says why it could not write (it gave no reason) */
    char inspect_model[512], cmd[1200];
    model_dir(inspect_model, sizeof inspect_model);
    snprintf(cmd, sizeof cmd, "{ %s inspect --model %s 'A wonderful film.' > /dev/full; }",
             attnctl_path(), inspect_model);
    char *inspect_err = NULL;
    ck_assert_int_eq(run_stderr(cmd, &inspect_err), 1);
    ck_assert_msg(strstr(inspect_err, "No space left on device"), "%s", inspect_err);
    free(inspect_err);
}
END_TEST

/* Reads /proc/PID/environ (the environment the process image started with;
 * setenv does not change it) into buf, NULs turned into newlines. */
static void read_start_environment(pid_t pid, char *buf, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    int fd = open(path, O_RDONLY);
    ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
    size_t n = 0;
    ssize_t k;
    while (n + 1 < cap && (k = read(fd, buf + n, cap - 1 - n)) > 0)
        n += (size_t)k;
    close(fd);
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\0')
            buf[i] = '\n';
    buf[n] = '\0';
}

/* A cold `predict` does not re-execute itself to put its
 * libraries' variables in place (10 ms of 30); OpenBLAS is loaded with
 * dlopen once OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS are set. Checked
 * from outside: predict answers with the environment it was started with
 * (an exec would have replaced /proc/PID/environ with one holding the added
 * variables), and `bench` (which does re-execute) reports the OpenBLAS core
 * attnctl chose, so OpenBLAS read the variable set inside the process. */
START_TEST(test_predict_starts_once)
{
    static const char *const VARS[] = {"OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS",
                                       "GOMP_SPINCOUNT", "GLIBC_TUNABLES"};
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++)
        unsetenv(VARS[i]); /* this test runs in its own process (Check forks) */
    char model[512];
    model_dir(model, sizeof model);
    const char *args[] = {"predict", "--model", model, NULL};
    child c;
    spawn(&c, args);
    const char *review = "A wonderful film, loved every minute.\n";
    ck_assert_int_eq(write(c.in, review, strlen(review)), (ssize_t)strlen(review));
    char line[256];
    ck_assert_msg(read_line_timeout(c.out, line, sizeof line, 10.0) >= 0, "no answer within 10 s");
    ck_assert_msg(strncmp(line, "positive\t", 9) == 0, "answer: %s", line);
    static char env[1 << 16];
    read_start_environment(c.pid, env, sizeof env);
    ck_assert_msg(!strstr(env, "OPENBLAS_NUM_THREADS=") && !strstr(env, "GLIBC_TUNABLES="),
                  "predict re-executed itself; its environment:\n%s", env);
    close(c.in);
    int status = wait_child(&c, 10.0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(c.out);
    close(c.err);

    const char *bench[] = {"bench", "--steps", "1", "--json", "--batch-size", "2",
                           "--max-len", "16", "--threads", "1", NULL};
    result r = run(bench);
    ck_assert_msg(r.status == 0, "status %d, stderr: %s", r.status, r.err);
    cJSON *o = cJSON_Parse(r.out);
    ck_assert_msg(o != NULL, "not JSON: %s", r.out);
    const cJSON *core = cJSON_GetObjectItem(o, "openblas_core");
    ck_assert(cJSON_IsString(core));
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512cd"))
        ck_assert_str_eq(core->valuestring, "SkylakeX");
    else
        ck_assert_str_ne(core->valuestring, "unknown");
    cJSON_Delete(o);
    result_free(&r);
}
END_TEST

/* ------------------------------------------------------------------- bench */

START_TEST(test_bench_json)
{
    const char *args[] = {"bench", "--steps", "1", "--json", "--batch-size", "4",
                          "--max-len", "32", "--threads", "1", NULL};
    result r = run(args);
    ck_assert_msg(r.status == 0, "status %d, stderr: %s", r.status, r.err);
    cJSON *o = cJSON_Parse(r.out);
    ck_assert_msg(o != NULL, "not JSON: %s", r.out);
    ck_assert(json_num(o, "train_tokens_per_s") > 0);
    ck_assert(json_num(o, "infer_tokens_per_s") > 0);
    ck_assert(json_num(o, "train_gflops") > 0);
    ck_assert(json_num(o, "infer_gflops") > 0);
    ck_assert(json_num(o, "peak_rss_mb") > 0);
    ck_assert_int_eq((int)json_num(o, "seq_len"), 32);
    ck_assert_int_eq((int)json_num(o, "batch_size"), 4);
    ck_assert_int_eq((int)json_num(o, "threads"), 1);
    /* FLOPs per token as torch_ref.py counts them. */
    double L = json_num(o, "layers"), d = json_num(o, "d_model"), ff = json_num(o, "d_ff");
    double C = json_num(o, "n_classes");
    ck_assert_double_eq_tol(json_num(o, "flops_per_token_fwd"),
                            L * (8 * d * d + 4 * d * ff) + L * 4 * 32 * d + 2 * d * C, 1e-6);
    ck_assert_double_eq_tol(json_num(o, "train_gflops"),
                            json_num(o, "train_tokens_per_s") * 3 *
                                json_num(o, "flops_per_token_fwd") / 1e9,
                            1e-6);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "text_seconds"))); /* no --data */
    ck_assert_ptr_nonnull(cJSON_GetObjectItem(o, "peak_share"));
    cJSON_Delete(o);
    result_free(&r);
}
END_TEST

START_TEST(test_bench_text_only)
{
    const char *args[] = {"bench", "--steps", "0", "--json", "--data", SAMPLE_TRAIN, NULL};
    result r = run(args);
    ck_assert_msg(r.status == 0, "status %d, stderr: %s", r.status, r.err);
    cJSON *o = cJSON_Parse(r.out);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq((int)json_num(o, "rows"), 600);
    ck_assert(json_num(o, "tokens") > 600 * 5);
    ck_assert(json_num(o, "text_seconds") > 0);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "train_tokens_per_s")));
    cJSON_Delete(o);
    result_free(&r);
}
END_TEST

/* bench --model of the fixture model and its quantized copy: both on the same
 * reviews; GOP/s of the products as bench counts them a review; the FP32
 * model against the FP32 peak, the quantized one against the int8 peak (4x). */
START_TEST(test_bench_models)
{
    char model[512], qdir[512];
    model_dir(model, sizeof model);
    work_path(qdir, sizeof qdir, "bench-q");
    nftw(qdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    const char *quantize[] = {"quantize", "--model", model, "--out", qdir, NULL};
    result q = run(quantize);
    ck_assert_msg(q.status == 0, "status %d, stderr: %s", q.status, q.err);
    result_free(&q);
    const char *args[] = {"bench", "--model", model, "--model", qdir, "--data", SAMPLE_TEST,
                          "--threads", "1", "--json", NULL};
    result r = run(args);
    ck_assert_msg(r.status == 0, "status %d, stderr: %s", r.status, r.err);
    cJSON *o = cJSON_Parse(r.out);
    ck_assert_msg(cJSON_IsArray(o) && cJSON_GetArraySize(o) == 2, "not 2 results: %s", r.out);
    const cJSON *f = cJSON_GetArrayItem(o, 0), *qm = cJSON_GetArrayItem(o, 1);
    ck_assert_double_eq(json_num(f, "rows"), json_num(qm, "rows"));
    ck_assert_double_eq(json_num(f, "rows"), SAMPLE_TEST_ROWS); /* each row once, warm-up aside */
    ck_assert_double_eq(json_num(f, "tokens"), json_num(qm, "tokens"));
    ck_assert_str_eq(cJSON_GetObjectItem(f, "peak_kind")->valuestring, "FP32");
    ck_assert_str_eq(cJSON_GetObjectItem(qm, "peak_kind")->valuestring, "int8");
    for (int i = 0; i < 2; i++) {
        const cJSON *m = cJSON_GetArrayItem(o, i);
        ck_assert(json_num(m, "reviews_per_s") > 0);
        /* at least the per-token products of every token */
        ck_assert(json_num(m, "gops") * 1e9 * json_num(m, "seconds") >=
                  json_num(m, "tokens") * 8.0 * 16 * 16);
        const cJSON *peak = cJSON_GetObjectItem(m, "peak_gops");
        if (cJSON_IsNumber(peak))
            ck_assert_double_eq_tol(json_num(m, "peak_share"),
                                    json_num(m, "gops") / peak->valuedouble, 1e-9);
    }
    if (cJSON_IsNumber(cJSON_GetObjectItem(f, "peak_gops")))
        ck_assert_double_eq_tol(json_num(qm, "peak_gops"), 4 * json_num(f, "peak_gops"), 1e-6);
    cJSON_Delete(o);
    result_free(&r);
    nftw(qdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
END_TEST

/* inspect --out replaces a regular file atomically, but writes through
 * anything else: a symbolic link keeps pointing at its (rewritten) file, and
 * /dev/stdout is the output, not a file put in its place. */
START_TEST(test_inspect_out_special_files)
{
    char model[512], real[512], link[512];
    model_dir(model, sizeof model);
    work_path(real, sizeof real, "inspect-real.json");
    work_path(link, sizeof link, "inspect-link.json");
    write_file(real, "old\n");
    unlink(link);
    ck_assert_int_eq(symlink("inspect-real.json", link), 0); /* beside it */
    const char *via_link[] = {"inspect", "--model", model, "--out", link, "good film", NULL};
    result r = run(via_link);
    ck_assert_msg(r.status == 0, "%s", r.err);
    result_free(&r);
    struct stat sb;
    ck_assert_int_eq(lstat(link, &sb), 0);
    ck_assert_msg(S_ISLNK(sb.st_mode), "the link was replaced by a file");
    size_t len;
    char *text = test_slurp(real, &len);
    ck_assert_msg(strstr(text, "\"tokens\""), "%s", text);
    free(text);
    const char *to_stdout[] = {"inspect", "--model", model, "--format", "json", "--out",
                               "/dev/stdout", "good film", NULL};
    r = run(to_stdout);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.out, "\"tokens\""), "%s", r.out);
    result_free(&r);
    unlink(link);
    unlink(real);
}
END_TEST

/* A copy of the model in src whose tensor `name` holds +Inf everywhere. */
static void poisoned_copy(const char *src, const char *dst, const char *name)
{
    rm_rf(dst);
    ck_assert_int_eq(mkdir(dst, 0755), 0);
    static const char *const files[] = {"config.json", "vocab.txt", "model.safetensors"};
    for (int i = 0; i < 3; i++) {
        char from[600], to[600];
        snprintf(from, sizeof from, "%s/%s", src, files[i]);
        snprintf(to, sizeof to, "%s/%s", dst, files[i]);
        size_t len;
        char *bytes = test_slurp(from, &len);
        if (i == 2) {
            uint64_t header_len;
            memcpy(&header_len, bytes, 8);
            char *header = strndup(bytes + 8, (size_t)header_len);
            cJSON *h = cJSON_Parse(header);
            const cJSON *offsets = cJSON_GetObjectItem(cJSON_GetObjectItem(h, name), "data_offsets");
            ck_assert_msg(cJSON_GetArraySize(offsets) == 2, "no tensor %s in %s", name, from);
            const size_t begin = 8 + (size_t)header_len +
                                 (size_t)cJSON_GetArrayItem(offsets, 0)->valuedouble;
            const size_t end = 8 + (size_t)header_len +
                               (size_t)cJSON_GetArrayItem(offsets, 1)->valuedouble;
            const float inf = INFINITY;
            for (size_t at = begin; at + 4 <= end; at += 4)
                memcpy(bytes + at, &inf, 4);
            cJSON_Delete(h);
            free(header);
        }
        FILE *f = fopen(to, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
        ck_assert_int_eq(fclose(f), 0);
        free(bytes);
    }
}

/* A model whose weights are not finite gives no verdict: predict, eval and
 * inspect fail with one line naming the model (predict printed "nan"). */
START_TEST(test_broken_weights)
{
    char model[512], broken[512];
    model_dir(model, sizeof model);
    work_path(broken, sizeof broken, "broken-weights");
    poisoned_copy(model, broken, "head.bias");
    const char *cmds[][6] = {
        {"predict", "--model", broken, NULL},
        {"eval", "--model", broken, SAMPLE_TEST, NULL},
        {"inspect", "--model", broken, "A wonderful film.", NULL},
    };
    for (int i = 0; i < 3; i++) {
        result r = run_with_input(cmds[i], "A wonderful film.\n", 18);
        ck_assert_msg(r.status == 1, "%s: status %d", cmds[i][0], r.status);
        ck_assert_int_eq(count_lines(r.err), 1);
        ck_assert_msg(strstr(r.err, broken) && strstr(r.err, "NaN or infinite"), "%s: %s",
                      cmds[i][0], r.err);
        ck_assert_msg(!strstr(r.out, "nan"), "%s: %s", cmds[i][0], r.out);
        result_free(&r);
    }
    /* Nor does it start a training run, alone or as an autotune's trial 1:
     * the error names the tensor, not a learning rate too high. */
    char poisoned_encoder[512], out[512];
    work_path(poisoned_encoder, sizeof poisoned_encoder, "broken-encoder");
    work_path(out, sizeof out, "from-broken-encoder");
    poisoned_copy(model, poisoned_encoder, "layers.0.ln1.weight");
    const char *train_plain[] = {"train", SAMPLE_TRAIN, "--out", out, "--init", poisoned_encoder,
                                 "--threads", "1", NULL};
    const char *train_tuned[] = {"train", SAMPLE_TRAIN, "--out", out, "--init", poisoned_encoder,
                                 "--threads", "1", "--autotune", "1000steps", NULL};
    const char *const *trains[] = {train_plain, train_tuned};
    for (int i = 0; i < 2; i++) {
        result t = run(trains[i]);
        ck_assert_int_eq(t.status, 1);
        ck_assert_int_eq(count_lines(t.err), 1);
        ck_assert_msg(strstr(t.err, "layers.0.ln1.weight") && strstr(t.err, "NaN or infinite") &&
                          !strstr(t.err, "learning rate"),
                      "%s", t.err);
        ck_assert_int_ne(access(out, F_OK), 0);
        result_free(&t);
    }
    rm_rf(poisoned_encoder);
    /* an empty --model is not the root directory */
    const char *empty[] = {"predict", "--model", "", NULL};
    result r = run_with_input(empty, "good\n", 5);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "path is empty"), "%s", r.err);
    result_free(&r);
    rm_rf(broken);
}
END_TEST

/* quantize --check reads its file once, before anything is written: a pipe
 * works (it used to be read a second time for the quantized model and to
 * hang or fail after the output was written), and a file the model cannot
 * score leaves no output directory. */
START_TEST(test_quantize_check_reads_once)
{
    char model[512], qdir[512], bad[512];
    model_dir(model, sizeof model);
    work_path(qdir, sizeof qdir, "check-once-q");
    work_path(bad, sizeof bad, "check-unknown-label.csv");
    nftw(qdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    write_file(bad, "review,sentiment\ngreat film,positive\nso so,neutral\n");
    const char *unknown[] = {"quantize", "--model", model, "--out", qdir, "--check", bad, NULL};
    result u = run(unknown);
    ck_assert_int_ne(u.status, 0);
    ck_assert_msg(strstr(u.err, ":3: unknown label 'neutral'"), "%s", u.err);
    ck_assert_msg(access(qdir, F_OK) != 0, "a failed --check left %s", qdir);
    result_free(&u);
    const char *csv = "review,sentiment\na wonderful film,positive\ndull and far too long,negative\n"
                      "the cast is superb,positive\n";
    const char *piped[] = {"quantize", "--model", model, "--out", qdir, "--check", "/dev/stdin",
                           NULL};
    result p = run_with_input(piped, csv, strlen(csv));
    ck_assert_msg(p.status == 0, "status %d, stderr: %s", p.status, p.err);
    ck_assert_msg(strstr(p.out, "/dev/stdin: 3 rows") && strstr(p.out, "agreement  "), "%s", p.out);
    result_free(&p);
    nftw(qdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    /* other column names, as eval and predict --csv take them */
    const char *other = "body,stars\na wonderful film,positive\ndull and far too long,negative\n";
    char data[512];
    work_path(data, sizeof data, "check-other-columns.csv");
    write_file(data, other);
    const char *named[] = {"quantize", "--model", model, "--out", qdir, "--check", "/dev/stdin",
                           "--data", data, "--text-column", "body", "--label-column", "stars",
                           NULL};
    p = run_with_input(named, other, strlen(other));
    ck_assert_msg(p.status == 0, "status %d, stderr: %s", p.status, p.err);
    ck_assert_msg(strstr(p.out, "/dev/stdin: 2 rows"), "%s", p.out);
    result_free(&p);
    nftw(qdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
END_TEST

/* quantize --check: the accuracy of both models is eval's, at 2 threads and
 * with small batches (many of them, in several windows), and the labels that
 * agree are counted from predict's labels of the same rows. */
START_TEST(test_quantize_check_matches_eval)
{
    char model[512], qdir[512];
    model_dir(model, sizeof model);
    work_path(qdir, sizeof qdir, "check-q");
    nftw(qdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    const char *quantize[] = {"quantize", "--model", model, "--out", qdir, "--check", SAMPLE_TEST,
                              "--threads", "2", NULL};
    result q = run(quantize);
    ck_assert_msg(q.status == 0, "status %d, stderr: %s", q.status, q.err);
    const char *acc_line = strstr(q.out, "accuracy   "), *agree_line = strstr(q.out, "agreement  ");
    ck_assert_msg(acc_line && agree_line && strstr(q.out, ": 200 rows"), "%s", q.out);
    double acc[2], agree_pct;
    long differ;
    ck_assert_int_eq(sscanf(acc_line, "accuracy %lf model, %lf quantized", &acc[0], &acc[1]), 2);
    ck_assert_int_eq(sscanf(agree_line, "agreement %lf%% of the labels the same (%ld differ)",
                            &agree_pct, &differ), 2);
    const char *dirs[2] = {model, qdir};
    char *labels[2];
    for (int k = 0; k < 2; k++) {
        const char *ev[] = {"eval", "--model", dirs[k], SAMPLE_TEST, "--json", NULL};
        result e = run(ev);
        ck_assert_msg(e.status == 0, "status %d, stderr: %s", e.status, e.err);
        cJSON *o = cJSON_Parse(e.out);
        ck_assert_ptr_nonnull(o);
        ck_assert_double_eq_tol(acc[k], json_num(o, "accuracy"), 0.5e-4);
        cJSON_Delete(o);
        result_free(&e);
        const char *pr[] = {"predict", "--model", dirs[k], "--csv", SAMPLE_TEST, NULL};
        result p = run(pr);
        ck_assert_msg(p.status == 0, "status %d, stderr: %s", p.status, p.err);
        labels[k] = strdup(p.out);
        result_free(&p);
    }
    /* predict's lines: LABEL TAB PROBABILITY; count the rows whose labels differ */
    long counted = 0;
    int rows = 0;
    for (const char *a = labels[0], *b = labels[1]; *a && *b; rows++) {
        size_t la = strcspn(a, "\t"), lb = strcspn(b, "\t");
        counted += la != lb || strncmp(a, b, la) != 0;
        a = strchr(a, '\n');
        b = strchr(b, '\n');
        if (!a || !b)
            break;
        a++;
        b++;
    }
    ck_assert_int_eq(rows, SAMPLE_TEST_ROWS);
    ck_assert_int_eq(differ, counted);
    free(labels[0]);
    free(labels[1]);
    result_free(&q);
    nftw(qdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
END_TEST

/* ------------------------------------------------------------------ fixture */

/* Trains the tiny model the tests use (once per run of this suite), into a
 * fresh directory: `attnctl train` refuses to overwrite a model. */
static int train_fixture(void)
{
    char dir[512], model[512];
    work_path(dir, sizeof dir, "");
    mkdir(dir, 0777);
    model_dir(model, sizeof model);
    nftw(model, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    const char *args[] = {"train", SAMPLE_TRAIN, "--out", model, "--layers", "1", "--d-model", "16",
                          "--heads", "2", "--ff", "32", "--max-len", "64", "--epochs", "12", "--lr", "0.005",
                          "--batch-size", "16", "--seed", "7", "--quiet", NULL};
    child c;
    spawn(&c, args);
    close(c.in);
    char buf[4096];
    ssize_t n;
    while ((n = read(c.err, buf, sizeof buf)) > 0)
        fwrite(buf, 1, (size_t)n, stderr);
    int status = wait_child(&c, 120.0);
    close(c.out);
    close(c.err);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* tests/format_reader.py, a reader written from docs/formats.md alone (Python +
 * numpy), computes from config.json and model.safetensors the probabilities
 * attnctl prints (inspect --format json, predict --json), given the ids inspect
 * prints, for a tiny model of every preset in models/; it also shows that a
 * wrong wide-path hash or no wide path would be caught. */
START_TEST(test_format_reader_matches_every_preset)
{
    static const char *const candidates[] = {"/usr/bin/python3", "python3"};
    const char *py = NULL;
    for (size_t i = 0; !py && i < sizeof candidates / sizeof candidates[0]; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import numpy' >/dev/null 2>&1", candidates[i]);
        if (system(cmd) == 0)
            py = candidates[i];
    }
    if (!py) {
        printf("SKIP test_format_reader_matches_every_preset: no python3 with numpy\n");
        return;
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s tests/format_reader.py --check '%s'", py, attnctl_path());
    int status = system(cmd);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "docs/formats.md's reader disagrees with attnctl (exit %d): %s",
                  WIFEXITED(status) ? WEXITSTATUS(status) : -1, cmd);
}
END_TEST

/* Runs first (tests of a TCase run in order); later tests use its model. */
START_TEST(test_train_fixture)
{
    ck_assert_msg(train_fixture() == 0, "training the fixture model with `attnctl train` failed");
}
END_TEST

/* Topic-like rows of C classes: a word of the class among shared noise
 * words; a third of the rows carry another class's word instead, so that
 * some are confused. */
static void write_classes_csv(const char *path, int C, int rows)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "text,label\n");
    uint64_t x = 12345;
    for (int i = 0; i < rows; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        int c = (int)((x >> 33) % (uint64_t)C), noisy = (int)((x >> 20) % 3) == 0;
        int word = noisy ? (int)((x >> 40) % (uint64_t)C) : c;
        fprintf(f, "w%d_a n%d n%d,class %03d\n", word, (int)((x >> 8) % 40), (int)((x >> 14) % 40),
                c);
    }
    ck_assert_int_eq(fclose(f), 0);
}

/* eval's confusion matrix stays readable in a terminal with many classes:
 * numbered columns for 30, the most frequent confusions for 100; never a
 * line wider than about 120 characters. */
/* eval's tables pad labels by the columns they take on a terminal, not by
 * their bytes: accented and CJK labels keep the columns straight. */
START_TEST(test_eval_wide_labels)
{
    char csv[512], out[512];
    work_path(csv, sizeof csv, "wide-labels.csv");
    work_path(out, sizeof out, "wide-labels");
    FILE *f = fopen(csv, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "text,label\n");
    const char *labels[] = {"n\xc3\xa9gatif", "tr\xc3\xa8s positif", "\xe7\xa9\x8d\xe6\xa5\xb5"};
    const char *words[] = {"awful", "superb", "fine"};
    for (int i = 0; i < 60; i++)
        fprintf(f, "a %s film number %d,%s\n", words[i % 3], i, labels[i % 3]);
    ck_assert_int_eq(fclose(f), 0);
    rm_rf(out);
    const char *train[] = {"train", csv, "--out", out, "--d-model", "16", "--heads", "2", "--ff",
                           "32", "--epochs", "1", "--wide-buckets", "1024", "--threads", "1",
                           "--quiet", NULL};
    result t = run(train);
    ck_assert_msg(t.status == 0, "status %d: %s", t.status, t.err);
    result_free(&t);
    const char *eval[] = {"eval", "--model", out, csv, NULL};
    result r = run(eval);
    ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
    /* the widest label, "tr\xc3\xa8s positif", takes 12 columns, then 2
     * spaces and a figure right-aligned in 9 ("   1.0000"): the CJK label
     * (two wide characters: 4 columns, 6 bytes) is followed by 13 spaces,
     * "n\xc3\xa9gatif" (7 columns, 8 bytes) by 10 */
    static const struct {
        const char *label;
        int spaces;
    } rows[] = {{"\xe7\xa9\x8d\xe6\xa5\xb5", 13}, {"n\xc3\xa9gatif", 10}, {"tr\xc3\xa8s positif", 5}};
    for (int i = 0; i < 3; i++) {
        char want[64];
        snprintf(want, sizeof want, "\n%s%*s", rows[i].label, rows[i].spaces, "");
        const char *at = strstr(r.out, want);
        ck_assert_msg(at && (at[strlen(want)] == '0' || at[strlen(want)] == '1'), "%s: %s",
                      rows[i].label, r.out);
    }
    result_free(&r);
    rm_rf(out);
}
END_TEST

START_TEST(test_eval_many_classes)
{
    static const int counts[] = {30, 100};
    for (int k = 0; k < 2; k++) {
        char csv[512], out[512], nc[16];
        snprintf(nc, sizeof nc, "c%d", counts[k]);
        work_path(csv, sizeof csv, nc);
        strcat(csv, ".csv");
        work_path(out, sizeof out, nc);
        write_classes_csv(csv, counts[k], 2000);
        rm_rf(out);
        const char *train[] = {"train", csv, "--out", out, "--d-model", "16", "--heads", "2",
                               "--ff", "32", "--epochs", "2", "--wide-buckets", "4096",
                               "--threads", "1", "--quiet", NULL};
        result t = run(train);
        ck_assert_msg(t.status == 0, "status %d: %s", t.status, t.err);
        result_free(&t);
        const char *eval[] = {"eval", "--model", out, csv, NULL};
        result r = run(eval);
        ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
        char *lines[4096];
        int n = split_lines(r.out, lines, 4096);
        int grid = 0, listed = 0, heading = 0;
        for (int i = 0; i < n; i++) {
            ck_assert_msg(strlen(lines[i]) <= 125, "%d classes: a line of %zu characters: %s",
                          counts[k], strlen(lines[i]), lines[i]);
            if (strstr(lines[i], "classes numbered"))
                heading = 1;
            if (strstr(lines[i], "most frequent confusions (100 classes"))
                heading = 2;
            if (heading == 1 && strstr(lines[i], "  class 0"))
                grid++;
            if (heading == 2 && strstr(lines[i], " true class ") &&
                strstr(lines[i], ", predicted class "))
                listed++;
        }
        if (counts[k] == 30)
            ck_assert_msg(heading == 1 && grid == 30, "30 classes: %d grid rows\n%s", grid,
                          r.out);
        else
            ck_assert_msg(heading == 2 && listed >= 1 && listed <= 20,
                          "100 classes: %d confusions listed\n%s", listed, r.out);
        result_free(&r);
    }
}
END_TEST

/* Labels that look like slips in the data are named before training: two
 * that differ only in case, a label on one row (with its line). A clean
 * file gets neither warning; a tab-separated copy trains and evaluates. */
START_TEST(test_train_label_slips)
{
    char csv[512], tsv[512], out[512];
    work_path(csv, sizeof csv, "slips.csv");
    work_path(tsv, sizeof tsv, "clean.tsv");
    work_path(out, sizeof out, "slips");
    FILE *f = fopen(csv, "w"), *g = fopen(tsv, "w");
    ck_assert(f && g);
    fprintf(f, "text,label\n");
    fprintf(g, "text\tlabel\n");
    for (int i = 0; i < 40; i++) {
        const char *label = i % 2 ? "positive" : "negative";
        fprintf(f, "row %d %s,%s\n", i, i % 2 ? "good" : "bad", i == 7 || i == 9 ? "Positive" : label);
        fprintf(g, "row \"%d\" %s\t%s\n", i, i % 2 ? "good" : "bad", label);
    }
    fprintf(f, "one more,postive\n"); /* line 42 */
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(fclose(g), 0);
    const char *shape[] = {"--d-model", "16", "--heads", "2", "--ff", "32", "--epochs", "1",
                           "--wide-buckets", "1024", "--threads", "1"};
    const char *args[24] = {"train", csv, "--out", out};
    for (int i = 0; i < 12; i++)
        args[4 + i] = shape[i];
    rm_rf(out);
    result r = run(args);
    ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "labels 'Positive' and 'positive' differ only in letter case"),
                  "%s", r.err);
    char want[600];
    snprintf(want, sizeof want, "%s:42: label 'postive' is on this row only;", csv);
    ck_assert_msg(strstr(r.err, want), "%s", r.err);
    result_free(&r);

    rm_rf(out);
    args[1] = tsv;
    r = run(args);
    ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
    ck_assert_msg(!strstr(r.err, "warning"), "%s", r.err);
    result_free(&r);
    const char *eval[] = {"eval", "--model", out, tsv, NULL};
    r = run(eval);
    ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "40 rows"), "%s", r.out);
    result_free(&r);
    rm_rf(out);
}
END_TEST

/* Training data from a pipe is read once: the run used to open it a second
 * time for its SHA-256 (a named pipe then hung, /dev/stdin recorded the
 * checksum of nothing); now no checksum is recorded for it. A second run
 * into a directory another run is writing stops at once. */
START_TEST(test_train_from_pipe_and_busy_out)
{
    char out[512];
    work_path(out, sizeof out, "from-pipe");
    rm_rf(out);
    char csv[4096] = "review,sentiment\n";
    for (int i = 0; i < 40; i++) {
        char row[64];
        snprintf(row, sizeof row, "row %d %s,%s\n", i, i % 2 ? "good" : "bad",
                 i % 2 ? "positive" : "negative");
        strcat(csv, row);
    }
    const char *args[] = {"train", "/dev/stdin", "--out", out, "--d-model", "16", "--heads", "2",
                          "--ff", "32", "--epochs", "1", "--wide-buckets", "1024", "--threads",
                          "1", "--quiet", NULL};
    result r = run_with_input(args, csv, strlen(csv));
    ck_assert_msg(r.status == 0, "status %d: %s", r.status, r.err);
    result_free(&r);
    char config_path[600];
    snprintf(config_path, sizeof config_path, "%s/config.json", out);
    size_t len;
    char *config = test_slurp(config_path, &len);
    ck_assert_msg(strstr(config, "\"train_sha256\": \"\"") || strstr(config, "\"train_sha256\":\"\""),
                  "%s", config);
    ck_assert_msg(strstr(config, "\"rows_used\": 40") || strstr(config, "\"rows_used\":40"), "%s",
                  config);
    free(config);
    rm_rf(out);

    /* the directory held by another run (its lock taken here) */
    ck_assert_int_eq(mkdir(out, 0755), 0);
    int held = open(out, O_RDONLY | O_DIRECTORY);
    ck_assert_int_ge(held, 0);
    ck_assert_int_eq(flock(held, LOCK_EX | LOCK_NB), 0);
    args[1] = SAMPLE_TEST;
    r = run(args);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "another attnctl run is writing there"), "%s", r.err);
    ck_assert_int_eq(count_lines(r.err), 1);
    result_free(&r);
    close(held);
    rm_rf(out);
}
END_TEST

/* Two slips in a run's setup, each named: the label column holding an id
 * (every row its own class: it used to fail as an empty validation split),
 * and a --min-count no word reaches (it used to fail on "vocab_size"). */
START_TEST(test_train_data_mistakes)
{
    char csv[512], out[512];
    work_path(csv, sizeof csv, "ids.csv");
    work_path(out, sizeof out, "mistakes");
    FILE *f = fopen(csv, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "id,text,label\n");
    for (int i = 0; i < 30; i++)
        fprintf(f, "%d,row %d %s,%s\n", i, i, i % 2 ? "good" : "bad", i % 2 ? "pos" : "neg");
    ck_assert_int_eq(fclose(f), 0);
    rm_rf(out);
    const char *ids[] = {"train", csv, "--out", out, "--label-column", "id", NULL};
    result r = run(ids);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "ids.csv: 30 different labels in 30 rows") &&
                      strstr(r.err, "is the label column the right one?"),
                  "%s", r.err);
    result_free(&r);
    const char *rare[] = {"train", csv, "--out", out, "--min-count", "1000", NULL};
    r = run(rare);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "no word occurs 1000 or more times") &&
                      strstr(r.err, "the vocabulary would be empty"),
                  "%s", r.err);
    result_free(&r);
    ck_assert_int_eq(access(out, F_OK), -1);
}
END_TEST

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (access(attnctl_path(), X_OK) != 0) {
        fprintf(stderr, "test_cli: %s is not built\n", attnctl_path());
        return 1;
    }
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("e2e");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_usage_errors);
    tcase_add_test(tc, test_train_val_file_recorded);
    tcase_add_test(tc, test_missing_model);
    tcase_add_test(tc, test_bench_json);
    tcase_add_test(tc, test_bench_text_only);
    tcase_add_test(tc, test_format_reader_matches_every_preset);
    tcase_add_test(tc, test_train_fixture);
    tcase_add_test(tc, test_eval_many_classes);
    tcase_add_test(tc, test_eval_wide_labels);
    tcase_add_test(tc, test_train_label_slips);
    tcase_add_test(tc, test_train_from_pipe_and_busy_out);
    tcase_add_test(tc, test_train_data_mistakes);
    {
        tcase_add_test(tc, test_eval_table);
        tcase_add_test(tc, test_eval_json);
        tcase_add_test(tc, test_eval_unknown_label);
        tcase_add_test(tc, test_eval_errors_explained);
        tcase_add_test(tc, test_predict_awkward_lines);
        tcase_add_test(tc, test_predict_gzip_file);
        tcase_add_test(tc, test_predict_json);
        tcase_add_test(tc, test_predict_emoji_names);
        tcase_add_test(tc, test_predict_elongations);
        tcase_add_test(tc, test_predict_threshold);
        tcase_add_test(tc, test_predict_matches_eval);
        tcase_add_test(tc, test_predict_interactive);
        tcase_add_test(tc, test_predict_closed_stdout);
        tcase_add_test(tc, test_predict_starts_once);
        tcase_add_test(tc, test_bench_models);
        tcase_add_test(tc, test_quantize_check_matches_eval);
        tcase_add_test(tc, test_quantize_check_reads_once);
        tcase_add_test(tc, test_broken_weights);
        tcase_add_test(tc, test_inspect_out_special_files);
        tcase_add_test(tc, test_predict_wordless_lines);
        tcase_add_test(tc, test_threads_same_bytes);
    }
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failures = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failures != 0;
}
