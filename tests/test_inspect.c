/* End-to-end tests of `attnctl inspect`: they build small random models with
 * the library (ac_model_create + ac_model_dir_save) into $BUILD/test_inspect/,
 * run the built binary (path from $ATTNCTL, default build/attnctl) and check
 * the JSON (parsed back with cJSON), the SVG and HTML (rendered in headless
 * Chromium when /usr/bin/chromium exists, the screenshot decoded and checked
 * for content), the terminal text with and without colour, and the errors. */
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <pty.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "attnctl/io.h"
#include "attnctl/model.h"
#include "attnctl/text.h"

#include "test_util.h"

#define CHROMIUM "/usr/bin/chromium"
#define D_MODEL 16

/* ------------------------------------------------------------------ helpers */

/* $BUILD/test_inspect/NAME (created fresh). */
static void scratch_dir(char *buf, size_t n, const char *name)
{
    const char *build = getenv("BUILD");
    snprintf(buf, n, "%s/test_inspect/%s", build && *build ? build : "build", name);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", buf, buf);
    ck_assert_int_eq(system(cmd), 0);
}

static void join(char *buf, size_t n, const char *dir, const char *name)
{
    int w = snprintf(buf, n, "%s/%s", dir, name);
    ck_assert(w > 0 && (size_t)w < n);
}

static char *read_whole(const char *path, size_t *len_out)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            ck_assert_ptr_nonnull(buf);
        }
    }
    fclose(f);
    buf[len] = '\0';
    if (len_out)
        *len_out = len;
    return buf;
}

static void write_whole(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

/* ------------------------------------------------------------ test models */

/* Words the test reviews use; "superb" and "cinematography" are left out on
 * purpose so that they become <unk>. */
static const char *const VOCAB_WORDS[] = {
    "this", "movie", "was", "great", ",", "and", "the", "acting", "!",   "plot", "boring", ".",
    "i",    "loved", "it",  "a",     "film", "fun", "terrible", "story", "\"", "\\",    "<",  "&",
    "café", "but",   "not", "bad",   "he",   "said", "?",
};
#define N_VOCAB_WORDS ((int)(sizeof VOCAB_WORDS / sizeof VOCAB_WORDS[0]))

typedef struct {
    ac_pooling pooling;
    int max_len;
    int n_layers, n_heads;
    ac_truncation truncation;
    int n_classes; /* 0: two, "negative" and "positive"; else c0, c1, ... */
} model_spec;

static const model_spec MAX2x2 = {AC_POOL_MAX, 32, 2, 2, AC_TRUNC_HEAD, 0};

/* Writes a random model into DIR (and a source vocab file next to it). The
 * query and key projections are scaled up so that attention is far from
 * uniform, as in a trained model. */
static void make_model(const char *dir, const model_spec *spec)
{
    ac_err err = {{0}};
    int with_cls = spec->pooling == AC_POOL_CLS;
    char vpath[400];
    snprintf(vpath, sizeof vpath, "%s.vocab.txt", dir);
    FILE *f = fopen(vpath, "w");
    ck_assert_ptr_nonnull(f);
    fputs(with_cls ? "<pad>\n<unk>\n<cls>\n" : "<pad>\n<unk>\n", f);
    for (int i = 0; i < N_VOCAB_WORDS; i++)
        fprintf(f, "%s\n", VOCAB_WORDS[i]);
    ck_assert_int_eq(fclose(f), 0);

    ac_config cfg;
    ac_vocab vocab;
    ac_model model;
    ac_config_defaults(&cfg);
    ck_assert_msg(ac_vocab_load(&vocab, vpath, &err) == 0, "%s", err.msg);
    cfg.model.vocab_size = vocab.size;
    cfg.model.max_len = spec->max_len;
    cfg.model.d_model = D_MODEL;
    cfg.model.n_heads = spec->n_heads;
    cfg.model.d_ff = 32;
    cfg.model.n_layers = spec->n_layers;
    cfg.model.wide_order = 3; /* what a training run on long texts chooses */
    cfg.model.wide_buckets = 4194304; /* and for two classes */
    const int C = spec->n_classes ? spec->n_classes : 2;
    cfg.model.n_classes = C;
    cfg.model.pooling = spec->pooling;
    cfg.model.dropout = 0.1f;
    cfg.tokenizer.truncation = spec->truncation;
    cfg.training.vocab_max = vocab.size;
    cfg.n_labels = C;
    cfg.labels = calloc((size_t)C, sizeof *cfg.labels);
    ck_assert_ptr_nonnull(cfg.labels);
    for (int c = 0; c < C; c++) {
        char name[16];
        snprintf(name, sizeof name, "c%d", c);
        cfg.labels[c] = strdup(spec->n_classes ? name : c ? "positive" : "negative");
    }
    ck_assert_msg(ac_model_create(&model, &cfg.model, &err) == 0, "%s", err.msg);
    ac_model_init_weights(&model, 20240501);
    for (int l = 0; l < spec->n_layers; l++)
        for (int i = 0; i < D_MODEL * D_MODEL; i++) {
            model.p.layers[l].q_w[i] *= 15.0f;
            model.p.layers[l].k_w[i] *= 15.0f;
        }
    for (int i = 0; i < C * D_MODEL; i++) /* a head that does not always say 50/50 */
        model.p.head_w[i] *= 40.0f;
    ck_assert_msg(ac_model_dir_save(dir, &cfg, &vocab, &model, NULL, NULL, NULL, &err) == 0, "%s",
                  err.msg);
    ac_model_free(&model);
    ac_vocab_free(&vocab);
    ac_config_free(&cfg);
}

/* ----------------------------------------------------------- running attnctl */

typedef struct {
    int status; /* exit status, or 128 + signal */
    char *out, *err;
    size_t out_len;
} run_result;

static void run_result_free(run_result *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}

/* Applies "NAME=value" (set) or "NAME" (unset) in the child. */
static void apply_env(const char *const *env)
{
    for (; env && *env; env++) {
        const char *eq = strchr(*env, '=');
        if (eq) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(eq - *env), *env);
            setenv(name, eq + 1, 1);
        } else {
            unsetenv(*env);
        }
    }
}

/* Runs `attnctl inspect ARGS...` with stdin_text (NULL: /dev/null) in dir's
 * files; stdout and stderr captured. */
static void run_inspect(run_result *r, const char *dir, const char *const *args, const char *stdin_text,
                        const char *const *env)
{
    memset(r, 0, sizeof *r);
    char in_path[400], out_path[400], err_path[400];
    join(in_path, sizeof in_path, dir, "run.stdin");
    join(out_path, sizeof out_path, dir, "run.stdout");
    join(err_path, sizeof err_path, dir, "run.stderr");
    write_whole(in_path, stdin_text ? stdin_text : "");
    const char *argv[64];
    int argc = 0;
    argv[argc++] = attnctl_path();
    argv[argc++] = "inspect";
    for (; *args; args++) {
        ck_assert(argc < 62);
        argv[argc++] = *args;
    }
    argv[argc] = NULL;
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        int in = open(stdin_text ? in_path : "/dev/null", O_RDONLY);
        int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in < 0 || out < 0 || err < 0)
            _exit(126);
        dup2(in, 0);
        dup2(out, 1);
        dup2(err, 2);
        apply_env(env);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    ck_assert_msg(r->status != 127, "cannot run %s (build it with make)", argv[0]);
    r->out = read_whole(out_path, &r->out_len);
    r->err = read_whole(err_path, NULL);
}

/* The same with stdout on a pseudo-terminal (120 columns); returns what the
 * terminal received. */
static char *run_inspect_tty(const char *const *args, const char *const *env, int *status)
{
    const char *argv[64];
    int argc = 0;
    argv[argc++] = attnctl_path();
    argv[argc++] = "inspect";
    for (; *args; args++)
        argv[argc++] = *args;
    argv[argc] = NULL;
    int master, slave;
    struct winsize ws = {.ws_row = 40, .ws_col = 120};
    ck_assert_int_eq(openpty(&master, &slave, NULL, NULL, &ws), 0);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        close(master);
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(slave, 1);
        dup2(null, 2);
        apply_env(env);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(slave);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    for (;;) {
        if (len + 1 == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            ck_assert_ptr_nonnull(buf);
        }
        ssize_t got = read(master, buf + len, cap - len - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) /* EIO once the child closed the terminal */
            break;
        len += (size_t)got;
    }
    buf[len] = '\0';
    close(master);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return buf;
}

static cJSON *parse_json_output(const run_result *r)
{
    ck_assert_msg(r->status == 0, "exit %d: %s", r->status, r->err);
    cJSON *j = cJSON_ParseWithLength(r->out, r->out_len);
    ck_assert_msg(j != NULL, "not valid JSON near: %.80s", cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "?");
    return j;
}

static cJSON *get(const cJSON *obj, const char *key)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    ck_assert_msg(v != NULL, "JSON has no \"%s\"", key);
    return v;
}

/* The ids ac_encode_text gives for text with the model in dir. */
static int encode_like_the_model(const char *dir, const char *text, int32_t *ids, int *full_len)
{
    ac_model_dir md;
    ac_err err = {{0}};
    ck_assert_msg(ac_model_dir_load(&md, dir, &err) == 0, "%s", err.msg);
    ac_tokenizer *tok;
    ck_assert_msg(ac_tokenizer_create(&tok, &md.config.tokenizer, &err) == 0, "%s", err.msg);
    int n = ac_encode_text(tok, &md.config.tokenizer, &md.vocab, text, strlen(text), md.model.cfg.max_len,
                           ids, full_len);
    ac_tokenizer_free(tok);
    ac_model_dir_free(&md);
    return n;
}

/* The raw logits and, when there are attributions, their completeness: the
 * scores of the predicted class add up to its logit minus its baseline logit
 * within 1 % (integrated gradients), "delta" is that relative gap, and a
 * [CLS] token gets nothing. The test models have temperature 1, so the
 * probabilities are the softmax of the logits. Returns the method. */
static const char *check_json_attributions(const cJSON *j, int n)
{
    cJSON *logits = get(j, "logits"), *probs = get(j, "probabilities");
    const char *label = get(j, "label")->valuestring;
    double z0 = get(logits, "negative")->valuedouble, z1 = get(logits, "positive")->valuedouble;
    double p1 = 1.0 / (1.0 + exp(z0 - z1));
    ck_assert_msg(fabs(p1 - get(probs, "positive")->valuedouble) < 1e-4, "softmax(logits) %g vs %g", p1,
                  get(probs, "positive")->valuedouble);
    const char *method = get(j, "attribution")->valuestring;
    ck_assert_ptr_nonnull(method);
    if (strcmp(method, "none") == 0) {
        ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(j, "attributions"));
        ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(j, "delta"));
        return "none";
    }
    ck_assert_msg(strcmp(method, "ig") == 0 || strcmp(method, "gradxinput") == 0, "method %s", method);
    ck_assert_ptr_nonnull(strstr(get(j, "attribution_baseline")->valuestring, "<pad>"));
    cJSON *attr = get(j, "attributions"), *base = get(j, "baseline_logits");
    ck_assert_int_eq(cJSON_GetArraySize(attr), 2);
    int cls = strcmp(cJSON_GetArrayItem(get(j, "tokens"), 0)->valuestring, "[CLS]") == 0;
    double sum[2] = {0.0, 0.0}, total_abs = 0.0;
    const char *names[2] = {"negative", "positive"};
    for (int c = 0; c < 2; c++) {
        cJSON *scores = get(attr, names[c]);
        ck_assert_int_eq(cJSON_GetArraySize(scores), n);
        for (int i = 0; i < n; i++) {
            cJSON *x = cJSON_GetArrayItem(scores, i);
            ck_assert(cJSON_IsNumber(x));
            sum[c] += x->valuedouble;
            total_abs += fabs(x->valuedouble);
        }
        if (cls)
            ck_assert(cJSON_GetArrayItem(scores, 0)->valuedouble == 0.0);
    }
    ck_assert_msg(total_abs > 1e-3, "all attributions are 0");
    int p = strcmp(label, "positive") == 0;
    double change = get(logits, names[p])->valuedouble - get(base, names[p])->valuedouble;
    double gap = fabs(sum[p] - change) / fmax(fabs(change), 1e-3);
    double delta = get(j, "delta")->valuedouble;
    /* the JSON numbers carry 6 significant digits */
    ck_assert_msg(fabs(gap - delta) <= 1e-4 + 1e-4 * delta, "delta %g, from the numbers %g", delta, gap);
    if (strcmp(method, "ig") == 0) {
        ck_assert_msg(gap <= 0.01, "scores sum to %g, logit change %g (gap %.4f)", sum[p], change, gap);
        ck_assert_int_ge((int)get(j, "attribution_steps")->valuedouble, 1);
    } else {
        ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(j, "attribution_steps"));
    }
    return method;
}

/* Checks the JSON dump: sizes, ids, rows summing to 1, probabilities, weights,
 * logits and attributions. Returns the number of tokens. */
static int check_json_dump(const cJSON *j, const char *model_dir, const char *text, int n_layers, int n_heads)
{
    cJSON *tokens = get(j, "tokens"), *ids = get(j, "ids"), *att = get(j, "attention");
    ck_assert(cJSON_IsArray(tokens) && cJSON_IsArray(ids) && cJSON_IsArray(att));
    int n = cJSON_GetArraySize(tokens);
    ck_assert_int_gt(n, 0);
    ck_assert_int_eq(cJSON_GetArraySize(ids), n);
    ck_assert_int_eq((int)get(j, "length")->valuedouble, n);

    int32_t want_ids[512];
    int full_len = 0;
    int want_n = encode_like_the_model(model_dir, text, want_ids, &full_len);
    ck_assert_int_eq(want_n, n);
    ck_assert_int_eq((int)get(j, "full_length")->valuedouble, full_len);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq((int)cJSON_GetArrayItem(ids, i)->valuedouble, want_ids[i]);

    ck_assert_int_eq(cJSON_GetArraySize(att), n_layers);
    for (int l = 0; l < n_layers; l++) {
        cJSON *layer = cJSON_GetArrayItem(att, l);
        ck_assert_int_eq(cJSON_GetArraySize(layer), n_heads);
        for (int h = 0; h < n_heads; h++) {
            cJSON *map = cJSON_GetArrayItem(layer, h);
            ck_assert_int_eq(cJSON_GetArraySize(map), n);
            for (int q = 0; q < n; q++) {
                cJSON *row = cJSON_GetArrayItem(map, q);
                ck_assert_int_eq(cJSON_GetArraySize(row), n);
                double sum = 0.0;
                for (int k = 0; k < n; k++) {
                    double a = cJSON_GetArrayItem(row, k)->valuedouble;
                    ck_assert(cJSON_IsNumber(cJSON_GetArrayItem(row, k)));
                    ck_assert(a >= 0.0 && a <= 1.0);
                    sum += a;
                }
                ck_assert_msg(fabs(sum - 1.0) < 1e-4, "layer %d head %d row %d sums to %g", l, h, q, sum);
            }
        }
    }

    cJSON *probs = get(j, "probabilities");
    double p_neg = get(probs, "negative")->valuedouble, p_pos = get(probs, "positive")->valuedouble;
    ck_assert(fabs(p_neg + p_pos - 1.0) < 1e-5);
    ck_assert_str_eq(get(j, "label")->valuestring, p_pos > p_neg ? "positive" : "negative");

    cJSON *weights = get(j, "token_weights");
    ck_assert_int_eq(cJSON_GetArraySize(weights), n);
    double wsum = 0.0;
    for (int i = 0; i < n; i++)
        wsum += cJSON_GetArrayItem(weights, i)->valuedouble;
    ck_assert_msg(fabs(wsum - 1.0) < 1e-4, "token weights sum to %g", wsum);
    check_json_attributions(j, n);
    return n;
}

static const char *const NO_ENV[] = {NULL};

/* ------------------------------------------------------------------- tests */

START_TEST(test_json_dump)
{
    char dir[300], model[400];
    scratch_dir(dir, sizeof dir, "json");
    join(model, sizeof model, dir, "model");
    make_model(model, &MAX2x2);
    const char *text = "This movie was great, and the acting was SUPERB!";
    run_result r;
    run_inspect(&r, dir, (const char *const[]){"--model", model, "--format", "json", text, NULL}, NULL, NO_ENV);
    cJSON *j = parse_json_output(&r);
    int n = check_json_dump(j, model, text, 2, 2);
    ck_assert_int_eq(n, 11);
    cJSON *tokens = get(j, "tokens"), *unknown = get(j, "unknown");
    /* Known tokens are their vocabulary entries; the <unk> shows the word the
     * tokenizer saw (case-folded) and is marked. */
    ck_assert_str_eq(cJSON_GetArrayItem(tokens, 0)->valuestring, "this");
    ck_assert_str_eq(cJSON_GetArrayItem(tokens, 4)->valuestring, ",");
    ck_assert_str_eq(cJSON_GetArrayItem(tokens, 9)->valuestring, "superb");
    ck_assert_int_eq((int)cJSON_GetArrayItem(get(j, "ids"), 9)->valuedouble, AC_UNK_ID);
    ck_assert(cJSON_IsTrue(cJSON_GetArrayItem(unknown, 9)));
    ck_assert(cJSON_IsFalse(cJSON_GetArrayItem(unknown, 8)));
    ck_assert(cJSON_IsFalse(get(j, "truncated")));
    ck_assert_str_eq(get(j, "pooling")->valuestring, "max");
    /* Max pooling: each weight is a share of the d pooled features. */
    cJSON *weights = get(j, "token_weights");
    for (int i = 0; i < n; i++) {
        double count = cJSON_GetArrayItem(weights, i)->valuedouble * D_MODEL;
        ck_assert_msg(fabs(count - round(count)) < 1e-4, "weight %d is not a multiple of 1/d", i);
    }
    /* The attention is not uniform (the maps would show nothing). */
    double a0 = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetArrayItem(get(j, "attention"), 0), 0), 0), 0)->valuedouble;
    double a1 = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetArrayItem(get(j, "attention"), 0), 0), 0), 1)->valuedouble;
    ck_assert(fabs(a0 - a1) > 1e-3);
    /* Numbers carry 6 significant digits, not 2. */
    ck_assert_ptr_nonnull(strstr(r.out, "\"attention\": [\n    [\n      [\n        [0."));
    cJSON_Delete(j);
    run_result_free(&r);
}
END_TEST

START_TEST(test_json_escaping)
{
    char dir[300], model[400];
    scratch_dir(dir, sizeof dir, "escaping");
    join(model, sizeof model, dir, "model");
    make_model(model, &MAX2x2);
    /* Quotes, a backslash, <, &, a control character, non-ASCII (known and not). */
    const char *text = "he said \"great\" \\ a < b & café \x01 naïve ☺ 映画";
    run_result r;
    run_inspect(&r, dir, (const char *const[]){"--model", model, "--format", "json", text, NULL}, NULL, NO_ENV);
    cJSON *j = parse_json_output(&r);
    int n = check_json_dump(j, model, text, 2, 2);
    cJSON *tokens = get(j, "tokens");
    int seen_quote = 0, seen_backslash = 0, seen_lt = 0, seen_cafe = 0, seen_naive = 0, seen_film = 0;
    for (int i = 0; i < n; i++) {
        const char *t = cJSON_GetArrayItem(tokens, i)->valuestring;
        ck_assert_ptr_nonnull(t);
        seen_quote |= strcmp(t, "\"") == 0;
        seen_backslash |= strcmp(t, "\\") == 0;
        seen_lt |= strcmp(t, "<") == 0;
        seen_cafe |= strcmp(t, "café") == 0;
        seen_naive |= strcmp(t, "naïve") == 0;
        seen_film |= strstr(t, "映画") != NULL;
    }
    ck_assert(seen_quote && seen_backslash && seen_lt && seen_cafe && seen_naive && seen_film);
    /* Non-ASCII stays UTF-8 (not \u escapes). */
    ck_assert_ptr_nonnull(strstr(r.out, "\"café\""));
    cJSON_Delete(j);
    run_result_free(&r);

    /* The same text as SVG: the special characters are escaped for XML. */
    run_inspect(&r, dir, (const char *const[]){"--model", model, "--format", "svg", text, NULL}, NULL, NO_ENV);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, ">&lt;</text>"));
    ck_assert_ptr_nonnull(strstr(r.out, ">&amp;</text>"));
    ck_assert_ptr_nonnull(strstr(r.out, ">&quot;</text>"));
    ck_assert_ptr_nonnull(strstr(r.out, ">café</text>"));
    ck_assert_ptr_null(strchr(r.out, '\x01'));
    /* Every & starts an entity. */
    for (const char *p = strchr(r.out, '&'); p; p = strchr(p + 1, '&'))
        ck_assert_msg(strncmp(p, "&amp;", 5) == 0 || strncmp(p, "&lt;", 4) == 0 || strncmp(p, "&gt;", 4) == 0 ||
                          strncmp(p, "&quot;", 6) == 0 || strncmp(p, "&#39;", 5) == 0,
                      "raw & in the SVG: %.20s", p);
    /* Well-formed XML, checked by Python's parser when there is one. */
    if (system("command -v python3 >/dev/null 2>&1") == 0) {
        char svg[400], cmd[1000];
        join(svg, sizeof svg, dir, "escaping.svg");
        write_whole(svg, r.out);
        snprintf(cmd, sizeof cmd, "python3 -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' '%s'", svg);
        ck_assert_msg(system(cmd) == 0, "the SVG is not well-formed XML");
    }
    run_result_free(&r);
}
END_TEST

START_TEST(test_layer_head_selection)
{
    char dir[300], model[400];
    scratch_dir(dir, sizeof dir, "select");
    join(model, sizeof model, dir, "model");
    make_model(model, &MAX2x2);
    const char *text = "i loved this film , but the plot was boring .";
    run_result all, one, layer;
    run_inspect(&all, dir, (const char *const[]){"--model", model, "--format", "json", text, NULL}, NULL, NO_ENV);
    run_inspect(&one, dir, (const char *const[]){"--model", model, "--format=json", "--layer", "1", "--head", "0", text, NULL},
                NULL, NO_ENV);
    run_inspect(&layer, dir, (const char *const[]){"--model", model, "--layer=0", "--format", "json", text, NULL}, NULL,
                NO_ENV);
    cJSON *ja = parse_json_output(&all), *j1 = parse_json_output(&one), *jl = parse_json_output(&layer);
    int n = check_json_dump(ja, model, text, 2, 2);
    check_json_dump(j1, model, text, 1, 1);
    check_json_dump(jl, model, text, 1, 2);
    ck_assert_int_eq((int)cJSON_GetArrayItem(get(j1, "layers"), 0)->valuedouble, 1);
    ck_assert_int_eq(cJSON_GetArraySize(get(j1, "layers")), 1);
    ck_assert_int_eq((int)cJSON_GetArrayItem(get(j1, "heads"), 0)->valuedouble, 0);
    ck_assert_int_eq(cJSON_GetArraySize(get(jl, "heads")), 2);
    /* The selected map is the same numbers as in the full dump. */
    cJSON *full = cJSON_GetArrayItem(cJSON_GetArrayItem(get(ja, "attention"), 1), 0);
    cJSON *sel = cJSON_GetArrayItem(cJSON_GetArrayItem(get(j1, "attention"), 0), 0);
    cJSON *full_l0h1 = cJSON_GetArrayItem(cJSON_GetArrayItem(get(ja, "attention"), 0), 1);
    cJSON *sel_l0h1 = cJSON_GetArrayItem(cJSON_GetArrayItem(get(jl, "attention"), 0), 1);
    int differs_from_other_head = 0;
    for (int q = 0; q < n; q++)
        for (int k = 0; k < n; k++) {
            double a = cJSON_GetArrayItem(cJSON_GetArrayItem(full, q), k)->valuedouble;
            ck_assert(a == cJSON_GetArrayItem(cJSON_GetArrayItem(sel, q), k)->valuedouble);
            double b = cJSON_GetArrayItem(cJSON_GetArrayItem(full_l0h1, q), k)->valuedouble;
            ck_assert(b == cJSON_GetArrayItem(cJSON_GetArrayItem(sel_l0h1, q), k)->valuedouble);
            differs_from_other_head |= fabs(a - b) > 1e-3;
        }
    ck_assert(differs_from_other_head);
    cJSON_Delete(ja);
    cJSON_Delete(j1);
    cJSON_Delete(jl);
    run_result_free(&all);
    run_result_free(&one);
    run_result_free(&layer);
}
END_TEST

START_TEST(test_pooled_weights_mean_and_cls)
{
    char dir[300], mean_model[400], cls_model[400];
    scratch_dir(dir, sizeof dir, "pooling");
    join(mean_model, sizeof mean_model, dir, "mean");
    join(cls_model, sizeof cls_model, dir, "cls");
    model_spec mean_spec = {AC_POOL_MEAN, 32, 2, 4, AC_TRUNC_HEAD, 0};
    model_spec cls_spec = {AC_POOL_CLS, 32, 1, 2, AC_TRUNC_HEAD, 0};
    make_model(mean_model, &mean_spec);
    make_model(cls_model, &cls_spec);
    const char *text = "a terrible story , but fun acting !";
    for (int which = 0; which < 2; which++) {
        const char *model = which == 0 ? mean_model : cls_model;
        const model_spec *spec = which == 0 ? &mean_spec : &cls_spec;
        run_result r;
        run_inspect(&r, dir, (const char *const[]){"--model", model, "--format", "json", text, NULL}, NULL, NO_ENV);
        cJSON *j = parse_json_output(&r);
        int n = check_json_dump(j, model, text, spec->n_layers, spec->n_heads);
        cJSON *last = cJSON_GetArrayItem(get(j, "attention"), spec->n_layers - 1);
        cJSON *weights = get(j, "token_weights");
        for (int k = 0; k < n; k++) {
            double want = 0.0;
            for (int h = 0; h < spec->n_heads; h++) {
                cJSON *map = cJSON_GetArrayItem(last, h);
                if (spec->pooling == AC_POOL_MEAN)
                    for (int q = 0; q < n; q++)
                        want += cJSON_GetArrayItem(cJSON_GetArrayItem(map, q), k)->valuedouble / (n * spec->n_heads);
                else
                    want += cJSON_GetArrayItem(cJSON_GetArrayItem(map, 0), k)->valuedouble / spec->n_heads;
            }
            ck_assert_msg(fabs(cJSON_GetArrayItem(weights, k)->valuedouble - want) < 1e-5, "weight %d", k);
        }
        if (spec->pooling == AC_POOL_CLS) {
            ck_assert_str_eq(cJSON_GetArrayItem(get(j, "tokens"), 0)->valuestring, "[CLS]");
            ck_assert_int_eq((int)cJSON_GetArrayItem(get(j, "ids"), 0)->valuedouble, AC_CLS_ID);
            ck_assert_str_eq(cJSON_GetArrayItem(get(j, "tokens"), 1)->valuestring, "a");
            ck_assert_ptr_nonnull(strstr(get(j, "token_weight_measure")->valuestring, "[CLS]"));
        } else {
            ck_assert_ptr_nonnull(strstr(get(j, "token_weight_measure")->valuestring, "mean pooling"));
        }
        cJSON_Delete(j);
        run_result_free(&r);
    }
}
END_TEST

/* Long texts are truncated like the model's encoder does it; every shown
 * token must still be the word behind its id. */
START_TEST(test_truncation_alignment)
{
    char dir[300];
    scratch_dir(dir, sizeof dir, "truncation");
    const ac_truncation modes[] = {AC_TRUNC_HEAD, AC_TRUNC_TAIL, AC_TRUNC_HEAD_TAIL};
    char text[2000] = "";
    for (int i = 0; i < 12; i++) {
        char part[128];
        snprintf(part, sizeof part, "the movie%d was great , i loved it ! ", i);
        strcat(text, part);
    }
    for (int m = 0; m < 3; m++) {
        char model[400], name[32];
        snprintf(name, sizeof name, "model-%s", ac_truncation_name(modes[m]));
        join(model, sizeof model, dir, name);
        model_spec spec = {AC_POOL_MAX, 20, 1, 2, modes[m], 0};
        make_model(model, &spec);
        run_result r;
        run_inspect(&r, dir, (const char *const[]){"--model", model, "--format", "json", "--", text, NULL}, NULL, NO_ENV);
        cJSON *j = parse_json_output(&r);
        int n = check_json_dump(j, model, text, 1, 2);
        ck_assert_int_eq(n, 20);
        ck_assert(cJSON_IsTrue(get(j, "truncated")));
        ck_assert_int_gt((int)get(j, "full_length")->valuedouble, 20);
        ac_vocab vocab;
        ac_err err = {{0}};
        char vpath[450];
        join(vpath, sizeof vpath, model, "vocab.txt");
        ck_assert_msg(ac_vocab_load(&vocab, vpath, &err) == 0, "%s", err.msg);
        int saw_tail_number = 0;
        for (int i = 0; i < n; i++) {
            const char *t = cJSON_GetArrayItem(get(j, "tokens"), i)->valuestring;
            int id = (int)cJSON_GetArrayItem(get(j, "ids"), i)->valuedouble;
            ck_assert_int_eq(ac_vocab_lookup(&vocab, t, strlen(t)), id);
            if (id == AC_UNK_ID) /* the numbered words: the original word is shown */
                ck_assert_msg(strncmp(t, "movie", 5) == 0, "unknown token %d is '%s'", i, t);
            saw_tail_number |= strcmp(t, "movie11") == 0;
        }
        ck_assert_int_eq(saw_tail_number, modes[m] != AC_TRUNC_HEAD);
        ac_vocab_free(&vocab);
        cJSON_Delete(j);
        run_result_free(&r);
    }
}
END_TEST

START_TEST(test_text_format_without_colour)
{
    char dir[300], model[400];
    scratch_dir(dir, sizeof dir, "text");
    join(model, sizeof model, dir, "model");
    make_model(model, &MAX2x2);
    const char *text = "This movie was great, and the acting was superb!";
    const char *const no_color[] = {"NO_COLOR=1", "TERM=xterm-256color", NULL};
    run_result r;
    run_inspect(&r, dir, (const char *const[]){"--model", model, "--format", "text", text, NULL}, NULL, no_color);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_null(strchr(r.out, '\x1b'));
    ck_assert_msg(strncmp(r.out, "label: ", 7) == 0, "%s", r.out);
    ck_assert_ptr_nonnull(strstr(r.out, "negative 0."));
    ck_assert_ptr_nonnull(strstr(r.out, "great("));
    ck_assert_ptr_nonnull(strstr(r.out, "<unk:superb>("));
    ck_assert_ptr_nonnull(strstr(r.out, "weights: the share of the 16 max-pooled features"));
    /* The weights printed add up to about 1. */
    double sum = 0.0;
    int count = 0;
    for (const char *p = strstr(r.out, "\n"); p && (p = strchr(p, '(')); p++) {
        double w;
        if (sscanf(p, "(%lf)", &w) == 1) {
            sum += w;
            count++;
        }
    }
    ck_assert_int_eq(count, 11);
    ck_assert_msg(fabs(sum - 1.0) < 0.01, "weights sum to %g", sum);
    /* The label line names the class the JSON names. */
    run_result rj;
    run_inspect(&rj, dir, (const char *const[]){"--model", model, "--format", "json", text, NULL}, NULL, NO_ENV);
    cJSON *j = parse_json_output(&rj);
    char want[64];
    snprintf(want, sizeof want, "label: %s (", get(j, "label")->valuestring);
    ck_assert_msg(strncmp(r.out, want, strlen(want)) == 0, "%s", r.out);
    cJSON_Delete(j);
    run_result_free(&rj);
    run_result_free(&r);

    /* Default format is text; stdout is a file, so still no colour even without NO_COLOR. */
    const char *const colour_allowed[] = {"NO_COLOR", "TERM=xterm-256color", NULL};
    run_inspect(&r, dir, (const char *const[]){"--model", model, text, NULL}, NULL, colour_allowed);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_null(strchr(r.out, '\x1b'));
    ck_assert_ptr_nonnull(strstr(r.out, "great("));
    run_result_free(&r);
}
END_TEST

START_TEST(test_text_format_colour_on_terminal)
{
    char dir[300], model[400];
    scratch_dir(dir, sizeof dir, "tty");
    join(model, sizeof model, dir, "model");
    make_model(model, &MAX2x2);
    const char *const args[] = {"--model", model, "This movie was great, and the acting was superb!", NULL};
    int status;
    char *out = run_inspect_tty(args, (const char *const[]){"NO_COLOR", "COLORTERM", "TERM=xterm-256color", NULL},
                                &status);
    ck_assert_int_eq(status, 0);
    ck_assert_msg(strstr(out, "\x1b[48;5;") != NULL, "no 256-colour background in: %s", out);
    ck_assert_ptr_nonnull(strstr(out, "\x1b[0m"));
    ck_assert_ptr_nonnull(strstr(out, "label: "));
    ck_assert_ptr_null(strstr(out, "great(")); /* colour replaces the numbers */
    free(out);
    out = run_inspect_tty(args, (const char *const[]){"NO_COLOR", "COLORTERM=truecolor", "TERM=xterm-256color", NULL},
                          &status);
    ck_assert_int_eq(status, 0);
    ck_assert_ptr_nonnull(strstr(out, "\x1b[48;2;"));
    free(out);
    out = run_inspect_tty(args, (const char *const[]){"NO_COLOR=1", "TERM=xterm-256color", NULL}, &status);
    ck_assert_int_eq(status, 0);
    ck_assert_ptr_null(strchr(out, '\x1b'));
    ck_assert_ptr_nonnull(strstr(out, "great("));
    free(out);
}
END_TEST

/* inspect --format FORMAT of TEXT, which must succeed. */
static void inspect_as(run_result *r, const char *dir, const char *model, const char *format,
                       const char *text)
{
    run_inspect(r, dir, (const char *const[]){"--model", model, "--format", format, text, NULL},
                NULL, NO_ENV);
    ck_assert_msg(r->status == 0, "%s", r->err);
}

/* Past six classes the text, SVG and HTML views list the six most probable,
 * most probable first, and the rest as one figure; the JSON keeps all. */
START_TEST(test_many_classes_listed)
{
    enum { C = 9 };
    char dir[300], model[400];
    scratch_dir(dir, sizeof dir, "classes");
    join(model, sizeof model, dir, "model");
    model_spec spec = MAX2x2;
    spec.n_classes = C;
    make_model(model, &spec);
    const char *text = "This movie was great, and the acting was superb!";
    run_result rj;
    inspect_as(&rj, dir, model, "json", text);
    cJSON *j = parse_json_output(&rj);
    const cJSON *probs = get(j, "probabilities");
    ck_assert_int_eq(cJSON_GetArraySize(probs), C);
    double p[C];
    int order[C];
    for (int c = 0; c < C; c++) {
        p[c] = cJSON_GetArrayItem(probs, c)->valuedouble;
        order[c] = c;
    }
    for (int a = 0; a < C; a++) /* by probability, ties by index */
        for (int b = a + 1; b < C; b++)
            if (p[order[b]] > p[order[a]] ||
                (p[order[b]] == p[order[a]] && order[b] < order[a])) {
                int t = order[a];
                order[a] = order[b];
                order[b] = t;
            }
    char want[512];
    int used = snprintf(want, sizeof want, "label: c%d (", order[0]);
    for (int k = 0; k < 6; k++)
        used += snprintf(want + used, sizeof want - (size_t)used, "%sc%d %.3f", k ? ", " : "",
                         order[k], p[order[k]]);
    snprintf(want + used, sizeof want - (size_t)used, "; 3 more classes, %.3f in all)\n",
             p[order[6]] + p[order[7]] + p[order[8]]);
    run_result r;
    inspect_as(&r, dir, model, "text", text);
    ck_assert_msg(strncmp(r.out, want, strlen(want)) == 0, "want %s got %s", want, r.out);
    run_result_free(&r);
    inspect_as(&r, dir, model, "svg", text);
    ck_assert_ptr_nonnull(strstr(r.out, " more classes "));
    snprintf(want, sizeof want, "c%d ", order[8]);
    ck_assert_msg(!strstr(r.out, want), "the least probable class is listed: %s", r.out);
    run_result_free(&r);
    inspect_as(&r, dir, model, "html", text);
    ck_assert_ptr_nonnull(strstr(r.out, "<span>3 more classes</span>"));
    snprintf(want, sizeof want, "<span>c%d</span>", order[8]);
    ck_assert_msg(!strstr(r.out, want), "the least probable class has a bar");
    snprintf(want, sizeof want, "<span>c%d</span><div class=\"bar pred\">", order[0]);
    ck_assert_msg(strstr(r.out, want), "the predicted class has no bar");
    run_result_free(&r);
    cJSON_Delete(j);
    run_result_free(&rj);
}
END_TEST

START_TEST(test_stdin_and_out_file)
{
    char dir[300], model[400], out_json[400];
    scratch_dir(dir, sizeof dir, "stdin");
    join(model, sizeof model, dir, "model");
    join(out_json, sizeof out_json, dir, "maps.json");
    make_model(model, &MAX2x2);
    const char *text = "i loved it , not bad at all .\nthe story was fun !\n";
    run_result arg, dash, none, file;
    run_inspect(&arg, dir, (const char *const[]){"--model", model, "--format", "json", text, NULL}, NULL, NO_ENV);
    run_inspect(&dash, dir, (const char *const[]){"--model", model, "--format", "json", "-", NULL}, text, NO_ENV);
    run_inspect(&none, dir, (const char *const[]){"--model", model, "--format", "json", NULL}, text, NO_ENV);
    /* --out: format from the file name, nothing on stdout. */
    run_inspect(&file, dir, (const char *const[]){"--model", model, "--out", out_json, text, NULL}, NULL, NO_ENV);
    ck_assert_msg(arg.status == 0 && dash.status == 0 && none.status == 0 && file.status == 0, "%s%s%s%s", arg.err,
                  dash.err, none.err, file.err);
    ck_assert_str_eq(arg.out, dash.out);
    ck_assert_str_eq(arg.out, none.out);
    ck_assert_int_eq((int)file.out_len, 0);
    char *written = read_whole(out_json, NULL);
    ck_assert_str_eq(written, arg.out);
    free(written);
    /* Several TEXT arguments are one review joined with spaces. */
    run_result words;
    run_inspect(&words, dir, (const char *const[]){"--model", model, "--format", "json", "i", "loved", "it", NULL}, NULL,
                NO_ENV);
    cJSON *j = parse_json_output(&words);
    ck_assert_int_eq(cJSON_GetArraySize(get(j, "tokens")), 3);
    cJSON_Delete(j);
    run_result_free(&words);
    run_result_free(&arg);
    run_result_free(&dash);
    run_result_free(&none);
    run_result_free(&file);
}
END_TEST

START_TEST(test_errors)
{
    char dir[300], model[400], missing[400];
    scratch_dir(dir, sizeof dir, "errors");
    join(model, sizeof model, dir, "model");
    join(missing, sizeof missing, dir, "no-such-model");
    make_model(model, &MAX2x2);
    const char *text = "great movie";
    static const struct {
        const char *args[8];
        int status;
        const char *stderr_has;
    } cases[] = {
        {{"--layer", "2", NULL}, 2, "0..1"},
        {{"--layer", "-1", NULL}, 2, "0..1"},
        {{"--head", "7", NULL}, 2, "0..1"},
        {{"--layer", "one", NULL}, 2, "--layer"},
        {{"--format", "pdf", NULL}, 2, "pdf"},
        {{"--frobnicate", NULL}, 2, "--frobnicate"},
        {{"--threads", "0", NULL}, 2, "--threads"},
        {{"--layer", NULL}, 2, "--layer"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *args[16] = {"--model", model};
        int n = 2;
        for (int i = 0; cases[c].args[i]; i++)
            args[n++] = cases[c].args[i];
        if (strcmp(cases[c].args[0], "--layer") != 0 || cases[c].args[1]) /* keep "--layer" last when it lacks a value */
            args[n++] = text;
        args[n] = NULL;
        run_result r;
        run_inspect(&r, dir, args, NULL, NO_ENV);
        ck_assert_msg(r.status == cases[c].status, "case %zu: exit %d, want %d (%s)", c, r.status, cases[c].status,
                      r.err);
        ck_assert_msg(strstr(r.err, cases[c].stderr_has) != NULL, "case %zu: stderr lacks '%s': %s", c,
                      cases[c].stderr_has, r.err);
        ck_assert_int_eq((int)r.out_len, 0);
        run_result_free(&r);
    }

    run_result r;
    run_inspect(&r, dir, (const char *const[]){text, NULL}, NULL, NO_ENV); /* no --model */
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "--model"));
    run_result_free(&r);

    run_inspect(&r, dir, (const char *const[]){"--model", missing, text, NULL}, NULL, NO_ENV);
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "attnctl: error: "));
    ck_assert_ptr_nonnull(strstr(r.err, "no-such-model"));
    run_result_free(&r);

    run_inspect(&r, dir, (const char *const[]){"--model", model, "", NULL}, NULL, NO_ENV);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "inspect: the text is empty") != NULL, "%s", r.err);
    run_result_free(&r);

    run_inspect(&r, dir, (const char *const[]){"--model", model, "-", NULL}, " \n\t\n", NO_ENV);
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "inspect: the text is empty"));
    run_result_free(&r);

    run_inspect(&r, dir, (const char *const[]){"--model", model, "--help", NULL}, NULL, NO_ENV);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "usage: attnctl inspect"));
    ck_assert_ptr_nonnull(strstr(r.out, "--layer"));
    run_result_free(&r);

    /* --out into a directory that does not exist: a runtime error, no output. */
    char bad_out[450];
    join(bad_out, sizeof bad_out, dir, "no/such/dir/maps.svg");
    run_inspect(&r, dir, (const char *const[]){"--model", model, "--out", bad_out, text, NULL}, NULL, NO_ENV);
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "attnctl: error: "));
    run_result_free(&r);
}
END_TEST

/* ------------------------------------------------------------ PNG checking */

typedef struct {
    int w, h;
    unsigned char *rgb; /* w * h * 3 */
} image;

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int paeth(int a, int b, int c)
{
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* Decodes an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes). */
static void png_decode(const char *path, image *img)
{
    size_t len;
    unsigned char *buf = (unsigned char *)read_whole(path, &len);
    ck_assert_msg(len > 8 && memcmp(buf, "\x89PNG\r\n\x1a\n", 8) == 0, "%s is not a PNG", path);
    size_t pos = 8, idat_len = 0;
    unsigned char *idat = NULL;
    int w = 0, h = 0, channels = 0;
    while (pos + 12 <= len) {
        uint32_t n = be32(buf + pos);
        const unsigned char *type = buf + pos + 4, *data = buf + pos + 8;
        ck_assert(pos + 12 + n <= len);
        if (memcmp(type, "IHDR", 4) == 0) {
            w = (int)be32(data);
            h = (int)be32(data + 4);
            ck_assert_msg(data[8] == 8 && (data[9] == 2 || data[9] == 6) && data[12] == 0,
                          "PNG kind not handled: depth %d colour %d interlace %d", data[8], data[9], data[12]);
            channels = data[9] == 6 ? 4 : 3;
        } else if (memcmp(type, "IDAT", 4) == 0) {
            idat = realloc(idat, idat_len + n);
            ck_assert_ptr_nonnull(idat);
            memcpy(idat + idat_len, data, n);
            idat_len += n;
        } else if (memcmp(type, "IEND", 4) == 0) {
            break;
        }
        pos += 12 + n;
    }
    ck_assert(w > 0 && h > 0 && idat);
    size_t stride = (size_t)w * channels;
    uLongf raw_len = (uLongf)((stride + 1) * (size_t)h);
    unsigned char *raw = malloc(raw_len);
    ck_assert_ptr_nonnull(raw);
    ck_assert_int_eq(uncompress(raw, &raw_len, idat, idat_len), Z_OK);
    ck_assert_int_eq((int)raw_len, (int)((stride + 1) * (size_t)h));
    unsigned char *pix = malloc(stride * (size_t)h);
    ck_assert_ptr_nonnull(pix);
    for (int y = 0; y < h; y++) {
        int filter = raw[(size_t)y * (stride + 1)];
        const unsigned char *src = raw + (size_t)y * (stride + 1) + 1;
        unsigned char *row = pix + (size_t)y * stride;
        const unsigned char *up = y ? row - stride : NULL;
        for (size_t x = 0; x < stride; x++) {
            int a = x >= (size_t)channels ? row[x - channels] : 0;
            int b = up ? up[x] : 0;
            int c = up && x >= (size_t)channels ? up[x - channels] : 0;
            int pred;
            switch (filter) {
            case 0: pred = 0; break;
            case 1: pred = a; break;
            case 2: pred = b; break;
            case 3: pred = (a + b) / 2; break;
            case 4: pred = paeth(a, b, c); break;
            default: ck_abort_msg("bad PNG filter %d", filter); return;
            }
            row[x] = (unsigned char)(src[x] + pred);
        }
    }
    img->w = w;
    img->h = h;
    img->rgb = malloc((size_t)w * h * 3);
    ck_assert_ptr_nonnull(img->rgb);
    for (size_t i = 0; i < (size_t)w * h; i++)
        memcpy(img->rgb + i * 3, pix + i * channels, 3);
    free(pix);
    free(raw);
    free(idat);
    free(buf);
}

typedef struct {
    double non_background; /* share of pixels unlike the top-left one */
    int distinct;          /* distinct colours (counted up to 4096) */
    double bluish, reddish; /* shares of clearly blue / clearly red-orange pixels */
    double tinted;          /* share of pixels with any blue tint (heatmap cells, light ones too) */
} image_stats;

static image_stats png_stats(const image *img)
{
    image_stats s = {0};
    enum { SLOTS = 8192 };
    uint32_t *seen = calloc(SLOTS, sizeof *seen); /* colour + 1; 0 = empty */
    ck_assert_ptr_nonnull(seen);
    const unsigned char *bg = img->rgb;
    size_t n = (size_t)img->w * img->h, differ = 0, blue = 0, red = 0, tint = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *p = img->rgb + i * 3;
        if (memcmp(p, bg, 3) != 0)
            differ++;
        if (p[2] > p[0] + 60 && p[2] > 120)
            blue++;
        if (p[2] > p[0] + 10)
            tint++;
        if (p[0] > p[2] + 80 && p[0] > 150)
            red++;
        uint32_t key = ((uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2]) + 1;
        if (s.distinct < 4096) {
            uint32_t slot = (key * 2654435761u) % SLOTS;
            while (seen[slot] && seen[slot] != key)
                slot = (slot + 1) % SLOTS;
            if (!seen[slot]) {
                seen[slot] = key;
                s.distinct++;
            }
        }
    }
    free(seen);
    s.non_background = (double)differ / (double)n;
    s.bluish = (double)blue / (double)n;
    s.reddish = (double)red / (double)n;
    s.tinted = (double)tint / (double)n;
    return s;
}

/* Screenshots file://ABS_PATH with headless Chromium into png (1200 x height). */
static void chromium_screenshot_sized(const char *file, const char *png, int height)
{
    char profile[] = "/tmp/attnctl-chromium-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(profile));
    char abs[PATH_MAX], url[PATH_MAX + 16], profile_arg[64], shot_arg[PATH_MAX + 16];
    ck_assert_ptr_nonnull(realpath(file, abs));
    snprintf(url, sizeof url, "file://%s", abs);
    snprintf(profile_arg, sizeof profile_arg, "--user-data-dir=%s", profile);
    snprintf(shot_arg, sizeof shot_arg, "--screenshot=%s", png);
    char size_arg[64];
    snprintf(size_arg, sizeof size_arg, "--window-size=1200,%d", height);
    unlink(png);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        setenv("HOME", profile, 1);
        execl("/usr/bin/timeout", "timeout", "90", CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
              "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update",
              "--disable-sync", "--hide-scrollbars", profile_arg, shot_arg, size_arg, url,
              (char *)NULL);
        _exit(127);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    nftw(profile, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "chromium failed (status %d)", st);
    ck_assert_msg(access(png, R_OK) == 0, "chromium wrote no screenshot");
}

static void chromium_screenshot(const char *file, const char *png)
{
    chromium_screenshot_sized(file, png, 900);
}

START_TEST(test_pictures_in_a_browser)
{
    char dir[300], model[400], svg[400], html[400], svg_png[400], html_png[400];
    scratch_dir(dir, sizeof dir, "browser");
    join(model, sizeof model, dir, "model");
    join(svg, sizeof svg, dir, "maps.svg");
    join(html, sizeof html, dir, "maps.html");
    join(svg_png, sizeof svg_png, dir, "maps.svg.png");
    join(html_png, sizeof html_png, dir, "maps.html.png");
    model_spec spec = {AC_POOL_MAX, 96, 2, 2, AC_TRUNC_HEAD, 0};
    make_model(model, &spec);
    /* 84 tokens (4 x 11 + 4 x 10): the SVG draws the first 64 and says so. */
    char text[2000] = "";
    for (int i = 0; i < 8; i++)
        strcat(text, i % 2 ? "the plot was boring , but i loved it ! " : "this movie was great & superb , \"fun\" . ");
    run_result r;
    run_inspect(&r, dir, (const char *const[]){"--model", model, "--out", svg, text, NULL}, NULL, NO_ENV);
    ck_assert_msg(r.status == 0, "%s", r.err);
    run_result_free(&r);
    run_inspect(&r, dir, (const char *const[]){"--model", model, "--format", "html", "--out", html, text, NULL}, NULL,
                NO_ENV);
    ck_assert_msg(r.status == 0, "%s", r.err);
    run_result_free(&r);

    char *svg_text = read_whole(svg, NULL);
    ck_assert_ptr_nonnull(strstr(svg_text, "layer 0, head 0 (first 64 of 84 tokens)"));
    ck_assert_ptr_nonnull(strstr(svg_text, "layer 1, head 1"));
    ck_assert_ptr_nonnull(strstr(svg_text, "rotate(-90"));
    ck_assert_ptr_nonnull(strstr(svg_text, "linearGradient"));
    free(svg_text);
    char *html_text = read_whole(html, NULL);
    /* nothing fetched: the only URL allowed is the SVG namespace (a name, never loaded) */
    for (const char *u = strstr(html_text, "http"); u; u = strstr(u + 4, "http"))
        ck_assert_msg(strncmp(u, "http://www.w3.org/2000/svg\"", 27) == 0 || strncmp(u, "http", 4) != 0 ||
                          (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0),
                      "a URL in the page: %.40s", u);
    ck_assert_ptr_null(strstr(html_text, "<script src"));
    ck_assert_ptr_null(strstr(html_text, "<link"));
    ck_assert_ptr_nonnull(strstr(html_text, "max-pooled features"));
    ck_assert_ptr_nonnull(strstr(html_text, "Predicted <b>"));
    free(html_text);

    if (access(CHROMIUM, X_OK) != 0) {
        printf("SKIP test_pictures_in_a_browser: %s not installed\n", CHROMIUM);
        return;
    }
    /* The attribution panels (on by default) sit above the maps: a taller
     * window shows about as much of the maps as 900 pixels did without them. */
    chromium_screenshot_sized(svg, svg_png, 1150);
    chromium_screenshot_sized(html, html_png, 1250);
    image img;
    png_decode(svg_png, &img);
    image_stats s = png_stats(&img);
    ck_assert_int_eq(img.w, 1200);
    ck_assert_msg(s.non_background > 0.15, "SVG screenshot nearly blank (%.3f)", s.non_background);
    ck_assert_msg(s.distinct >= 30, "SVG screenshot has %d colours", s.distinct);
    /* A barely trained model attends diffusely: most cells are light blue, so
     * the heatmap is found by its tint; the colour scale's dark end by the
     * clearly blue pixels. Measured when this was written: 0.129 and 0.0017. */
    ck_assert_msg(s.tinted > 0.08, "SVG screenshot shows little heatmap (%.3f tinted)", s.tinted);
    ck_assert_msg(s.bluish > 0.001, "SVG screenshot lacks the colour scale (%.4f blue)", s.bluish);
    double svg_tinted = s.tinted;
    free(img.rgb);
    png_decode(html_png, &img);
    s = png_stats(&img);
    ck_assert_msg(s.non_background > 0.05, "HTML screenshot nearly blank (%.3f)", s.non_background);
    ck_assert_msg(s.distinct >= 30, "HTML screenshot has %d colours", s.distinct);
    ck_assert_msg(s.reddish > 0.001, "HTML screenshot lacks the shaded tokens (%.4f)", s.reddish);
    ck_assert_msg(s.tinted > 0.03, "HTML screenshot lacks the maps (%.4f tinted)", s.tinted);
    ck_assert_msg(s.bluish > 0.001, "HTML screenshot lacks the colour scale (%.4f)", s.bluish);
    printf("browser screenshots: SVG %.3f tinted, HTML %.3f tinted, %.4f red\n", svg_tinted,
           s.tinted, s.reddish);
    free(img.rgb);
}
END_TEST

/* ------------------------------------------------------- attributions */

/* --attribution and --steps: the methods and their JSON, the text format with
 * and without them, and the usage errors. */
START_TEST(test_attribution_options)
{
    char dir[300], model[400];
    scratch_dir(dir, sizeof dir, "attribution");
    join(model, sizeof model, dir, "model");
    make_model(model, &MAX2x2);
    const char *text = "i loved this film , but the plot was boring . a terrible story !";
    run_result ig, steps8, gxi, none;
    run_inspect(&ig, dir, (const char *const[]){"--model", model, "--format", "json", text, NULL}, NULL, NO_ENV);
    run_inspect(&steps8, dir,
                (const char *const[]){"--model", model, "--format", "json", "--attribution", "ig", "--steps", "8",
                                      text, NULL},
                NULL, NO_ENV);
    run_inspect(&gxi, dir,
                (const char *const[]){"--model", model, "--format", "json", "--attribution=gradxinput", text, NULL},
                NULL, NO_ENV);
    run_inspect(&none, dir,
                (const char *const[]){"--model", model, "--format", "json", "--attribution", "none", text, NULL},
                NULL, NO_ENV);
    cJSON *jig = parse_json_output(&ig), *j8 = parse_json_output(&steps8), *jg = parse_json_output(&gxi),
          *jn = parse_json_output(&none);
    int n = check_json_dump(jig, model, text, 2, 2);
    check_json_dump(j8, model, text, 2, 2);
    check_json_dump(jg, model, text, 2, 2);
    check_json_dump(jn, model, text, 2, 2);
    /* the default is integrated gradients with 32 steps (doubled if need be) */
    ck_assert_str_eq(get(jig, "attribution")->valuestring, "ig");
    int s_default = (int)get(jig, "attribution_steps")->valuedouble;
    int s8 = (int)get(j8, "attribution_steps")->valuedouble;
    ck_assert_msg(s_default >= 32 && (s_default & (s_default - 1)) == 0, "steps %d", s_default);
    ck_assert_msg(s8 >= 8 && s8 <= s_default && (s8 & (s8 - 1)) == 0, "steps %d", s8);
    ck_assert_str_eq(get(jg, "attribution")->valuestring, "gradxinput");
    ck_assert_str_eq(get(jn, "attribution")->valuestring, "none");
    /* The attention part does not depend on the attributions. */
    cJSON *a_ig = cJSON_GetArrayItem(cJSON_GetArrayItem(get(jig, "attention"), 1), 1);
    cJSON *a_none = cJSON_GetArrayItem(cJSON_GetArrayItem(get(jn, "attention"), 1), 1);
    for (int q = 0; q < n; q++)
        for (int k = 0; k < n; k++)
            ck_assert(cJSON_GetArrayItem(cJSON_GetArrayItem(a_ig, q), k)->valuedouble ==
                      cJSON_GetArrayItem(cJSON_GetArrayItem(a_none, q), k)->valuedouble);
    ck_assert(get(get(jig, "probabilities"), "positive")->valuedouble ==
              get(get(jn, "probabilities"), "positive")->valuedouble);
    /* Integrated gradients and gradient x input agree on the sign of the
     * strongest tokens of this text more often than not, but are different numbers. */
    cJSON *sig = get(get(jig, "attributions"), "positive"), *sgx = get(get(jg, "attributions"), "positive");
    int differ = 0;
    for (int i = 0; i < n; i++)
        differ += fabs(cJSON_GetArrayItem(sig, i)->valuedouble - cJSON_GetArrayItem(sgx, i)->valuedouble) > 1e-3;
    ck_assert_int_gt(differ, 0);
    cJSON_Delete(jig);
    cJSON_Delete(j8);
    cJSON_Delete(jg);
    cJSON_Delete(jn);
    run_result_free(&ig);
    run_result_free(&steps8);
    run_result_free(&gxi);
    run_result_free(&none);

    /* text: no attribution block with none */
    const char *const no_color[] = {"NO_COLOR=1", NULL};
    run_result r;
    run_inspect(&r, dir, (const char *const[]){"--model", model, "--attribution", "none", text, NULL}, NULL,
                no_color);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_null(strstr(r.out, "attribution to"));
    ck_assert_ptr_null(strchr(r.out, '['));
    run_result_free(&r);

    static const struct {
        const char *args[3];
        const char *stderr_has;
    } bad[] = {
        {{"--attribution", "shap", NULL}, "shap"},
        {{"--attribution", "IG", NULL}, "ig, gradxinput or none"},
        {{"--steps", "0", NULL}, "--steps"},
        {{"--steps", "4097", NULL}, "1 to 4096"},
        {{"--steps", "many", NULL}, "--steps"},
    };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        run_inspect(&r, dir, (const char *const[]){"--model", model, bad[c].args[0], bad[c].args[1], text, NULL},
                    NULL, NO_ENV);
        ck_assert_msg(r.status == 2, "case %zu: exit %d (%s)", c, r.status, r.err);
        ck_assert_msg(strstr(r.err, bad[c].stderr_has) != NULL, "case %zu: %s", c, r.err);
        ck_assert_int_eq((int)r.out_len, 0);
        run_result_free(&r);
    }
    run_inspect(&r, dir, (const char *const[]){"--model", model, "--help", NULL}, NULL, NO_ENV);
    ck_assert_ptr_nonnull(strstr(r.out, "--attribution"));
    ck_assert_ptr_nonnull(strstr(r.out, "(default 32)"));
    run_result_free(&r);
}
END_TEST

/* Attributions are of the raw logits: a model with a fitted temperature (2)
 * reports the same logits and scores as the same weights without one, and
 * its probabilities are softmax(logits / 2). */
START_TEST(test_attribution_ignores_temperature)
{
    char dir[300], model[400], warm[400];
    scratch_dir(dir, sizeof dir, "attribution-temperature");
    join(model, sizeof model, dir, "model");
    join(warm, sizeof warm, dir, "warm");
    make_model(model, &MAX2x2);
    ac_model_dir md;
    ac_err err = {{0}};
    ck_assert_msg(ac_model_dir_load(&md, model, &err) == 0, "%s", err.msg);
    md.config.model.temperature = 2.0f;
    md.model.cfg.temperature = 2.0f;
    ck_assert_msg(ac_model_dir_save(warm, &md.config, &md.vocab, &md.model, NULL, NULL, NULL, &err) == 0, "%s",
                  err.msg);
    ac_model_dir_free(&md);
    const char *text = "a terrible story , but fun acting !";
    run_result r1, r2;
    run_inspect(&r1, dir, (const char *const[]){"--model", model, "--format", "json", text, NULL}, NULL, NO_ENV);
    run_inspect(&r2, dir, (const char *const[]){"--model", warm, "--format", "json", text, NULL}, NULL, NO_ENV);
    cJSON *j1 = parse_json_output(&r1), *j2 = parse_json_output(&r2);
    check_json_dump(j1, model, text, 2, 2);
    const char *names[2] = {"negative", "positive"};
    double z[2];
    for (int c = 0; c < 2; c++) {
        z[c] = get(get(j2, "logits"), names[c])->valuedouble;
        ck_assert(z[c] == get(get(j1, "logits"), names[c])->valuedouble);
        ck_assert(get(get(j2, "baseline_logits"), names[c])->valuedouble ==
                  get(get(j1, "baseline_logits"), names[c])->valuedouble);
        cJSON *a1 = get(get(j1, "attributions"), names[c]), *a2 = get(get(j2, "attributions"), names[c]);
        for (int i = 0; i < cJSON_GetArraySize(a1); i++)
            ck_assert(cJSON_GetArrayItem(a1, i)->valuedouble == cJSON_GetArrayItem(a2, i)->valuedouble);
    }
    double p1 = 1.0 / (1.0 + exp((z[0] - z[1]) / 2.0));
    ck_assert_msg(fabs(p1 - get(get(j2, "probabilities"), "positive")->valuedouble) < 1e-5, "%g vs %g", p1,
                  get(get(j2, "probabilities"), "positive")->valuedouble);
    ck_assert_msg(fabs(z[0] - z[1]) > 0.5, "the logits are too close for the temperature to show");
    cJSON_Delete(j1);
    cJSON_Delete(j2);
    run_result_free(&r1);
    run_result_free(&r2);
}
END_TEST

/* The text format's attribution block: the numbers are the JSON's scores of
 * the predicted class (3 decimals), the sum line adds them up; on a terminal
 * the block is shaded red and blue while the attention block stays on its
 * white-to-red scale. */
START_TEST(test_attribution_text)
{
    char dir[300], model[400];
    scratch_dir(dir, sizeof dir, "attribution-text");
    join(model, sizeof model, dir, "model");
    make_model(model, &MAX2x2);
    const char *text = "i loved this film , but the plot was boring . a terrible story !";
    run_result rj, rt;
    run_inspect(&rj, dir, (const char *const[]){"--model", model, "--format", "json", text, NULL}, NULL, NO_ENV);
    run_inspect(&rt, dir, (const char *const[]){"--model", model, text, NULL}, NULL,
                (const char *const[]){"NO_COLOR=1", NULL});
    cJSON *j = parse_json_output(&rj);
    ck_assert_msg(rt.status == 0, "%s", rt.err);
    const char *label = get(j, "label")->valuestring;
    char want[128];
    snprintf(want, sizeof want, "\nattribution to %s (integrated gradients, %d steps; completeness gap ", label,
             (int)get(j, "attribution_steps")->valuedouble);
    const char *block = strstr(rt.out, want);
    ck_assert_msg(block != NULL, "no '%s' in:\n%s", want + 1, rt.out);
    cJSON *scores = get(get(j, "attributions"), label);
    int n = cJSON_GetArraySize(scores), seen = 0;
    double sum = 0.0;
    const char *p = strchr(block + 1, '\n');
    for (; seen < n && (p = strchr(p, '[')); p++) {
        double x;
        if (sscanf(p, "[%lf]", &x) != 1)
            continue;
        double want_x = cJSON_GetArrayItem(scores, seen)->valuedouble;
        ck_assert_msg(fabs(x - want_x) <= 5.1e-4, "token %d: %g, JSON %g", seen, x, want_x);
        ck_assert(p[1] == '+' || p[1] == '-');
        sum += want_x;
        seen++;
    }
    ck_assert_int_eq(seen, n);
    double printed_sum;
    const char *sum_line = strstr(block, "\nsum ");
    ck_assert_ptr_nonnull(sum_line);
    ck_assert_int_eq(sscanf(sum_line, "\nsum %lf", &printed_sum), 1);
    ck_assert_msg(fabs(printed_sum - sum) < 1e-3, "sum %g vs %g", printed_sum, sum);
    ck_assert_ptr_nonnull(strstr(sum_line, "baseline: every token replaced by <pad>"));
    cJSON_Delete(j);
    run_result_free(&rj);
    run_result_free(&rt);

    /* On a 24-bit terminal: red and blue backgrounds in the attribution
     * block, none blue in the attention block above it. */
    int status;
    char *out = run_inspect_tty((const char *const[]){"--model", model, text, NULL},
                                (const char *const[]){"NO_COLOR", "COLORTERM=truecolor", "TERM=xterm-256color", NULL},
                                &status);
    ck_assert_int_eq(status, 0);
    char *attr = strstr(out, "attribution to ");
    ck_assert_msg(attr != NULL, "%s", out);
    int red = 0, blue = 0, blue_above = 0;
    for (const char *q = out; (q = strstr(q, "\x1b[48;2;")); q++) {
        int r, g, b;
        ck_assert_int_eq(sscanf(q, "\x1b[48;2;%d;%d;%dm", &r, &g, &b), 3);
        if (q < attr) {
            blue_above += b > r + 30;
        } else {
            red += r > b + 30;
            blue += b > r + 30;
        }
    }
    ck_assert_msg(red >= 2 && blue >= 2, "attribution block: %d red, %d blue backgrounds", red, blue);
    ck_assert_int_eq(blue_above, 0);
    ck_assert_ptr_nonnull(strstr(attr, "shading: red = pushed toward "));
    ck_assert_ptr_null(strstr(attr, "[+")); /* colour replaces the numbers */
    free(out);
    out = run_inspect_tty((const char *const[]){"--model", model, text, NULL},
                          (const char *const[]){"NO_COLOR=1", "TERM=xterm-256color", NULL}, &status);
    ck_assert_int_eq(status, 0);
    ck_assert_ptr_null(strchr(out, '\x1b'));
    ck_assert_ptr_nonnull(strstr(out, "["));
    free(out);
}
END_TEST

/* Pixels of exactly this colour. */
static size_t count_colour(const image *img, int r, int g, int b)
{
    size_t n = 0;
    for (size_t i = 0; i < (size_t)img->w * img->h; i++) {
        const unsigned char *p = img->rgb + i * 3;
        n += p[0] == r && p[1] == g && p[2] == b;
    }
    return n;
}

/* Red-tinted and blue-tinted pixels in the rectangle [x0, x1) x [y0, y1). */
static void count_tints(const image *img, int x0, int x1, int y0, int y1, size_t *red, size_t *blue)
{
    *red = *blue = 0;
    for (int y = y0; y < y1 && y < img->h; y++)
        for (int x = x0; x < x1 && x < img->w; x++) {
            const unsigned char *p = img->rgb + ((size_t)y * img->w + x) * 3;
            *red += p[0] > p[2] + 30;
            *blue += p[2] > p[0] + 30;
        }
}

/* The attribution pictures in a browser: the SVG's bars (red up, blue down,
 * in exactly the bar colours, absent with --attribution none) and the HTML's
 * attribution panel (left, beside the attention shading on the right): red
 * and blue token backgrounds there, while the attention panel and the page
 * without attributions have no blue in that band. */
START_TEST(test_attribution_pictures_in_a_browser)
{
    char dir[300], model[400];
    scratch_dir(dir, sizeof dir, "attribution-browser");
    join(model, sizeof model, dir, "model");
    make_model(model, &MAX2x2);
    const char *text = "i loved this film , but the plot was boring . a terrible story !";
    char svg[2][400], html[2][400], svg_png[2][400], html_png[2][400];
    const char *methods[2] = {"ig", "none"};
    for (int k = 0; k < 2; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s.svg", methods[k]);
        join(svg[k], sizeof svg[k], dir, name);
        snprintf(name, sizeof name, "%s.html", methods[k]);
        join(html[k], sizeof html[k], dir, name);
        snprintf(name, sizeof name, "%s.svg.png", methods[k]);
        join(svg_png[k], sizeof svg_png[k], dir, name);
        snprintf(name, sizeof name, "%s.html.png", methods[k]);
        join(html_png[k], sizeof html_png[k], dir, name);
        run_result r;
        run_inspect(&r, dir, (const char *const[]){"--model", model, "--attribution", methods[k], "--out", svg[k], text, NULL},
                    NULL, NO_ENV);
        ck_assert_msg(r.status == 0, "%s", r.err);
        run_result_free(&r);
        run_inspect(&r, dir, (const char *const[]){"--model", model, "--attribution", methods[k], "--out", html[k], text, NULL},
                    NULL, NO_ENV);
        ck_assert_msg(r.status == 0, "%s", r.err);
        run_result_free(&r);
    }
    char *svg_text = read_whole(svg[0], NULL), *html_text = read_whole(html[0], NULL);
    ck_assert_ptr_nonnull(strstr(svg_text, "Attribution to "));
    ck_assert_ptr_nonnull(strstr(svg_text, "(integrated gradients, "));
    ck_assert_ptr_nonnull(strstr(svg_text, "fill=\"#b2182b\""));
    ck_assert_ptr_nonnull(strstr(svg_text, "fill=\"#2166ac\""));
    ck_assert_ptr_nonnull(strstr(html_text, "<h2>Which words pushed it</h2>"));
    ck_assert_ptr_nonnull(strstr(html_text, "class=\"scale div\""));
    ck_assert_ptr_nonnull(strstr(html_text, "the completeness gap"));
    free(svg_text);
    free(html_text);
    html_text = read_whole(html[1], NULL);
    ck_assert_ptr_null(strstr(html_text, "Which words pushed it"));
    free(html_text);

    if (access(CHROMIUM, X_OK) != 0) {
        printf("SKIP test_attribution_pictures_in_a_browser: %s not installed\n", CHROMIUM);
        return;
    }
    image img[2];
    size_t bars_red[2], bars_blue[2];
    for (int k = 0; k < 2; k++) {
        chromium_screenshot(svg[k], svg_png[k]);
        png_decode(svg_png[k], &img[k]);
        bars_red[k] = count_colour(&img[k], 0xb2, 0x18, 0x2b);
        bars_blue[k] = count_colour(&img[k], 0x21, 0x66, 0xac);
        free(img[k].rgb);
    }
    printf("SVG bars: %zu red and %zu blue pixels (none: %zu, %zu)\n", bars_red[0], bars_blue[0], bars_red[1],
           bars_blue[1]);
    ck_assert_msg(bars_red[0] > 500 && bars_blue[0] > 300, "SVG bars: %zu red, %zu blue pixels", bars_red[0],
                  bars_blue[0]);
    ck_assert_int_eq(bars_red[1] + bars_blue[1], 0);

    /* The band of the page between the probabilities and the attention maps
     * (y 140..400 at this width): the attribution panel on the left, the
     * attention shading on the right. The legend of the red-blue scale alone
     * is about 1,000 blue-tinted pixels; measured when this was written:
     * left 5,767 red and 2,589 blue, right 11,458 red and 0 blue. */
    size_t red[2], blue[2];
    chromium_screenshot(html[0], html_png[0]);
    png_decode(html_png[0], &img[0]);
    count_tints(&img[0], 0, 600, 140, 400, &red[0], &blue[0]);
    count_tints(&img[0], 600, 1200, 140, 400, &red[1], &blue[1]);
    free(img[0].rgb);
    printf("HTML panels: attribution %zu red %zu blue, attention %zu red %zu blue pixels\n", red[0], blue[0],
           red[1], blue[1]);
    ck_assert_msg(red[0] > 3000 && blue[0] > 2000, "attribution panel: %zu red, %zu blue pixels", red[0],
                  blue[0]);
    ck_assert_msg(red[1] > 3000 && blue[1] < 50, "attention panel: %zu red, %zu blue pixels", red[1], blue[1]);
}
END_TEST

static Suite *inspect_suite(void)
{
    Suite *s = suite_create("inspect");
    TCase *tc = tcase_create("inspect");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_json_dump);
    tcase_add_test(tc, test_json_escaping);
    tcase_add_test(tc, test_layer_head_selection);
    tcase_add_test(tc, test_pooled_weights_mean_and_cls);
    tcase_add_test(tc, test_truncation_alignment);
    tcase_add_test(tc, test_text_format_without_colour);
    tcase_add_test(tc, test_text_format_colour_on_terminal);
    tcase_add_test(tc, test_many_classes_listed);
    tcase_add_test(tc, test_stdin_and_out_file);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_pictures_in_a_browser);
    tcase_add_test(tc, test_attribution_options);
    tcase_add_test(tc, test_attribution_text);
    tcase_add_test(tc, test_attribution_ignores_temperature);
    tcase_add_test(tc, test_attribution_pictures_in_a_browser);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(inspect_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failures = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failures != 0;
}
