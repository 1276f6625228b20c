/* The training settings left to the data ("auto"): the rules of
 * ac_train_adapt, how config.json spells "auto", and the command line on a
 * short synthetic CSV (the chosen values printed and recorded, an explicit
 * option or preset value winning). */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attnctl/io.h"
#include "attnctl/model.h"
#include "attnctl/train.h"

#include "test_util.h"

static void all_auto(ac_train_config *tc, ac_model_config *mc)
{
    ac_config c;
    ac_config_defaults(&c);
    *tc = c.training;
    *mc = c.model;
    ac_config_free(&c);
    ck_assert_int_eq(tc->epochs, AC_AUTO);
    ck_assert(tc->ema == AC_AUTO);
    ck_assert_int_eq(tc->members, AC_AUTO);
    ck_assert(tc->wide_nb == AC_AUTO);
    ck_assert(tc->min_count == AC_AUTO);
    ck_assert_int_eq(mc->wide_order, AC_WIDE_ORDER_AUTO);
    ck_assert_int_eq(mc->wide_buckets, AC_WIDE_BUCKETS_AUTO);
    ck_assert_int_eq(tc->refit, AC_AUTO);
    ck_assert(tc->nbsvm == AC_AUTO);
    ck_assert(tc->crop_frac == 0.5); /* not left to the data */
}

/* The long-text values, the IMDB recipe's. */
static void assert_long(const ac_train_config *tc, const ac_model_config *mc)
{
    ck_assert_int_eq(tc->epochs, 4);
    ck_assert(tc->ema == 0.999f);
    ck_assert_int_eq(tc->members, 3);
    ck_assert(tc->wide_nb == 0.0f);
    ck_assert(tc->nbsvm == 0.0f);
    ck_assert(tc->min_count == 2);
    ck_assert_int_eq(mc->wide_order, 3);
    ck_assert_int_eq(mc->wide_buckets, AC_ADAPT_WIDE_BUCKETS);
}

static void assert_short(const ac_train_config *tc, const ac_model_config *mc)
{
    ck_assert_int_eq(tc->epochs, 8);
    ck_assert(tc->ema == 0.99f);
    ck_assert_int_eq(tc->members, 1);
    ck_assert(tc->wide_nb == 0.25f);
    ck_assert(tc->nbsvm == AC_ADAPT_SHORT_NBSVM);
    ck_assert(tc->nbsvm > 0.0f);
    ck_assert(tc->min_count == 1);
    ck_assert_int_eq(mc->wide_order, 2);
    ck_assert_int_eq(mc->wide_buckets, AC_ADAPT_WIDE_BUCKETS);
}

START_TEST(test_short_texts)
{
    ac_train_config tc;
    ac_model_config mc;
    all_auto(&tc, &mc);
    ac_adapt_data d = {.median_tokens = 14, .labelled = 1};
    char said[256];
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    assert_short(&tc, &mc);
    ck_assert(tc.crop_frac == 0.5);
    ck_assert_str_eq(said, "8 epochs, weight average decay 0.99, 1 member, vocabulary min count "
                           "1, wide path of word n-grams up to 2, wide path from naive Bayes "
                           "x0.25, NBSVM's scores x4 added (median text 14 tokens, below "
                           "--crop-max 64)");

    /* With validation rows NBSVM's weight is left to them. */
    all_auto(&tc, &mc);
    d.has_validation = 1;
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    ck_assert(tc.nbsvm == AC_AUTO);
    ck_assert_msg(strstr(said, "x0.25, NBSVM's scores added at a weight the validation rows "
                               "choose (median"),
                  "%s", said);
    d.has_validation = 0;

    /* No wide path: nothing to start, nothing said of it. */
    all_auto(&tc, &mc);
    mc.wide_order = 0;
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    ck_assert(tc.wide_nb == 0.0f);
    ck_assert(tc.nbsvm == 0.0f); /* NBSVM's features are the wide path's */
    ck_assert_int_eq(mc.wide_order, 0);
    ck_assert_msg(!strstr(said, "wide path") && !strstr(said, "NBSVM"), "%s", said);
    all_auto(&tc, &mc);
    mc.wide_buckets = 0;
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    ck_assert(tc.wide_nb == 0.0f);
    ck_assert(tc.nbsvm == 0.0f); /* NBSVM's features are the wide path's */
    ck_assert_int_eq(mc.wide_order, 0);
    ck_assert_msg(!strstr(said, "wide path") && !strstr(said, "NBSVM"), "%s", said);
}
END_TEST

/* Texts as long as the crops (IMDB) keep the recipe's values exactly. */
START_TEST(test_long_texts_keep_the_recipe)
{
    static const int64_t medians[] = {64, 65, 230, 1024};
    for (size_t k = 0; k < sizeof medians / sizeof medians[0]; k++) {
        ac_train_config tc;
        ac_model_config mc;
        all_auto(&tc, &mc);
        ac_adapt_data d = {.median_tokens = medians[k], .labelled = 1};
        char said[256];
        ac_train_adapt(&tc, &mc, &d, said, sizeof said);
        assert_long(&tc, &mc);
        ck_assert_msg(strstr(said, "4 epochs, weight average decay 0.999, 3 members, vocabulary "
                                   "min count 2, wide path of word n-grams up to 3, wide path "
                                   "from zeros (median text") &&
                          strstr(said, "tokens, at least --crop-max 64)"),
                      "%s", said);
    }
    /* The threshold is --crop-max: crops of at most 16 tokens suit 20-token texts. */
    ac_train_config tc;
    ac_model_config mc;
    all_auto(&tc, &mc);
    tc.crop_max = 16;
    ac_adapt_data d = {.median_tokens = 20, .labelled = 1};
    char said[256];
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    assert_long(&tc, &mc);
    /* one token short of it: short */
    all_auto(&tc, &mc);
    d.median_tokens = 63;
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    assert_short(&tc, &mc);
    /* bench's: the long values whatever */
    all_auto(&tc, &mc);
    ac_train_adapt_to_long_texts(&tc, &mc);
    assert_long(&tc, &mc);
}
END_TEST

START_TEST(test_explicit_values_win)
{
    ac_train_config tc;
    ac_model_config mc;
    all_auto(&tc, &mc);
    tc.epochs = 3;
    tc.members = 2;
    tc.wide_nb = 0.0f; /* off, given */
    tc.min_count = 5;
    tc.nbsvm = 2.0f;
    mc.wide_order = 1;
    mc.wide_buckets = 4194304;
    ac_adapt_data d = {.median_tokens = 11, .labelled = 1, .n_classes = 50, .has_validation = 1};
    char said[256];
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    ck_assert_int_eq(tc.epochs, 3);
    ck_assert_int_eq(tc.members, 2);
    ck_assert(tc.wide_nb == 0.0f);
    ck_assert(tc.min_count == 5);
    ck_assert(tc.nbsvm == 2.0f); /* given: not left to the validation rows */
    ck_assert_int_eq(mc.wide_order, 1);
    ck_assert_int_eq(mc.wide_buckets, 4194304); /* given: not cut for 50 classes */
    ck_assert(tc.ema == 0.99f);
    /* only what was chosen */
    ck_assert_str_eq(said,
                     "weight average decay 0.99 (median text 11 tokens, below --crop-max 64)");

    tc.ema = 0.0f; /* off, given */
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    ck_assert(tc.ema == 0.0f);
    ck_assert_str_eq(said, "");
}
END_TEST

/* The refit: short texts whose validation rows come from the training
 * rows (one process); never long texts, a --val-file or pretraining. */
START_TEST(test_refit_rule)
{
    ac_train_config tc;
    ac_model_config mc;
    char said[320];
    all_auto(&tc, &mc);
    ac_adapt_data d = {.median_tokens = 14, .labelled = 1, .can_refit = 1};
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    assert_short(&tc, &mc);
    ck_assert_int_eq(tc.refit, 1);
    ck_assert_str_eq(said, "8 epochs, weight average decay 0.99, 1 member, vocabulary min count "
                           "1, wide path of word n-grams up to 2, wide path from naive Bayes "
                           "x0.25, NBSVM's scores x4 added, then all rows for the best epoch "
                           "count (median text 14 tokens, below --crop-max 64)");
    all_auto(&tc, &mc);
    d.can_refit = 0; /* a --val-file, no validation rows, or several processes */
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    ck_assert_int_eq(tc.refit, 0);
    ck_assert_msg(!strstr(said, "all rows"), "%s", said);
    all_auto(&tc, &mc);
    d.can_refit = 1;
    d.median_tokens = 230;
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    ck_assert_int_eq(tc.refit, 0);
    all_auto(&tc, &mc);
    tc.refit = 0; /* given */
    d.median_tokens = 14;
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    ck_assert_int_eq(tc.refit, 0);
    ck_assert_msg(!strstr(said, "all rows"), "%s", said);
    all_auto(&tc, &mc);
    d.labelled = 0;
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    ck_assert_int_eq(tc.refit, 0);
    all_auto(&tc, &mc);
    ac_train_adapt_to_long_texts(&tc, &mc);
    ck_assert_int_eq(tc.refit, 0);
}
END_TEST

START_TEST(test_pretraining_takes_the_fixed_values)
{
    ac_train_config tc;
    ac_model_config mc;
    all_auto(&tc, &mc);
    ac_adapt_data d = {.median_tokens = 11, .labelled = 0};
    char said[256];
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    ck_assert_int_eq(tc.epochs, 4);
    ck_assert(tc.ema == 0.0f);
    ck_assert_int_eq(tc.members, 1);
    ck_assert(tc.wide_nb == 0.0f);
    ck_assert(tc.min_count == 2);
    ck_assert_int_eq(mc.wide_order, 0);
    ck_assert_int_eq(mc.wide_buckets, AC_ADAPT_WIDE_BUCKETS);
    ck_assert_str_eq(said, "");
}
END_TEST

/* The wide table's rows: 4,194,304 up to 8 classes, then halved until the
 * table holds at most 2^25 weights, long texts or short; said when the
 * classes cut it. */
START_TEST(test_wide_rows_follow_the_classes)
{
    static const struct {
        int classes, rows;
    } cases[] = {{2, 4194304}, {6, 4194304}, {8, 4194304}, {9, 2097152},
                 {26, 1048576}, {50, 524288}, {100, 262144}, {1000, 32768}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int median = 14; median <= 140; median += 126) {
            ac_train_config tc;
            ac_model_config mc;
            all_auto(&tc, &mc);
            ac_adapt_data d = {.median_tokens = median, .labelled = 1,
                               .n_classes = cases[k].classes};
            char said[320], want[96];
            ac_train_adapt(&tc, &mc, &d, said, sizeof said);
            ck_assert_int_eq(mc.wide_buckets, cases[k].rows);
            ck_assert((long long)mc.wide_buckets * cases[k].classes <= AC_ADAPT_WIDE_WEIGHTS);
            snprintf(want, sizeof want, "wide path of word n-grams up to %d, wide table of %d "
                     "rows for %d classes, ", median < 64 ? 2 : 3, cases[k].rows,
                     cases[k].classes);
            if (cases[k].rows < AC_ADAPT_WIDE_BUCKETS)
                ck_assert_msg(strstr(said, want), "%s", said);
            else
                ck_assert_msg(!strstr(said, "rows"), "%s", said);
        }
    ac_train_config tc;
    ac_model_config mc;
    all_auto(&tc, &mc);
    mc.wide_order = 2; /* given */
    ac_adapt_data d = {.median_tokens = 14, .labelled = 1, .n_classes = 26};
    char said[320];
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    ck_assert_int_eq(mc.wide_buckets, 1048576);
    ck_assert_msg(strstr(said, "1 member, vocabulary min count 1, wide table of 1048576 rows for "
                                 "26 classes, wide path from naive Bayes"),
                  "%s", said);
    all_auto(&tc, &mc);
    mc.wide_order = 0; /* no wide path: the rows are set, not said */
    ac_train_adapt(&tc, &mc, &d, said, sizeof said);
    ck_assert_int_eq(mc.wide_buckets, 1048576);
    ck_assert_msg(!strstr(said, "rows"), "%s", said);
}
END_TEST

/* "auto" in config.json: read as AC_AUTO, written back as "auto", refused
 * where a key does not allow it (naming the key and what it takes). */
START_TEST(test_config_auto)
{
    ac_err err;
    ac_config c;
    ac_config_defaults(&c);
    const char *json = "{\"training\": {\"epochs\": 6, \"ema\": \"auto\"}}";
    ck_assert_msg(ac_config_parse(&c, json, strlen(json), "p.json", 0, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.training.epochs, 6);
    ck_assert(c.training.ema == AC_AUTO);
    char *out = ac_config_to_json(&c);
    ck_assert_ptr_nonnull(strstr(out, "\"ema\": \"auto\""));
    ck_assert_ptr_nonnull(strstr(out, "\"epochs\": 6"));
    ck_assert_ptr_nonnull(strstr(out, "\"min_count\": \"auto\""));
    ck_assert_ptr_nonnull(strstr(out, "\"wide_order\": \"auto\""));
    ck_assert_ptr_nonnull(strstr(out, "\"wide_buckets\": \"auto\""));
    free(out);
    ac_config_free(&c);

    ac_config_defaults(&c);
    const char *bad = "{\"training\": {\"crop_frac\": \"auto\"}}";
    ck_assert_int_ne(ac_config_parse(&c, bad, strlen(bad), "p.json", 0, &err), 0);
    ck_assert_msg(strstr(err.msg, "p.json") && strstr(err.msg, "training.crop_frac"), "%s",
                  err.msg);
    ck_assert_msg(!strstr(err.msg, "or \"auto\""), "%s", err.msg);
    ac_config_free(&c);
    ac_config_defaults(&c);
    const char *worse = "{\"training\": {\"epochs\": \"many\"}}";
    ck_assert_int_ne(ac_config_parse(&c, worse, strlen(worse), "p.json", 0, &err), 0);
    ck_assert_msg(strstr(err.msg, "training.epochs") && strstr(err.msg, "or \"auto\""), "%s",
                  err.msg);
    ac_config_free(&c);

    /* A model is never "auto": a hand-edited model config says so. */
    ac_config_defaults(&c);
    c.model.vocab_size = 50;
    c.model.n_classes = 2;
    ck_assert_int_eq(c.model.wide_order, AC_WIDE_ORDER_AUTO);
    ck_assert_msg(ac_model_config_validate(&c.model, &err) == 0, "%s", err.msg);
    ac_model m;
    ck_assert_int_ne(ac_model_create(&m, &c.model, &err), 0);
    ck_assert_msg(strstr(err.msg, "model.wide_order") && strstr(err.msg, "auto"), "%s", err.msg);
    c.model.wide_order = 2;
    ck_assert_msg(ac_model_config_validate(&c.model, &err) == 0, "%s", err.msg);
    ck_assert_int_ne(ac_model_create(&m, &c.model, &err), 0);
    ck_assert_msg(strstr(err.msg, "model.wide_buckets") && strstr(err.msg, "auto"), "%s",
                  err.msg);
    ac_config_free(&c);
}
END_TEST

/* ------------------------------------------------------- command line */

static cJSON *training_of(const char *dir)
{
    char *path = NULL;
    ck_assert_int_ge(asprintf(&path, "%s/config.json", dir), 0);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s", path);
    char *text = calloc(1, 1 << 16);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    text[n] = '\0';
    fclose(f);
    free(path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    ck_assert_ptr_nonnull(root);
    return root;
}

static double training_number(cJSON *root, const char *key)
{
    cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "training"),
                                                key);
    ck_assert_msg(cJSON_IsNumber(v), "training.%s is not a number", key);
    return v->valuedouble;
}

/* 80 rows of 3-6 words: the short texts the rules are for. */
static void write_short_csv(const char *path)
{
    static const char *const good[] = {"great fun", "loved it a lot", "really good stuff",
                                       "wonderful and warm", "best in years"};
    static const char *const bad[] = {"awful mess", "hated every minute", "really bad stuff",
                                      "dull and cold", "worst in years"};
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "text,label\n");
    for (int k = 0; k < 40; k++) {
        fprintf(f, "%s number %d,pos\n", good[k % 5], k);
        fprintf(f, "%s number %d,neg\n", bad[k % 5], k);
    }
    fclose(f);
}

START_TEST(test_cli_short_csv)
{
    const char *bin = attnctl_path();
    if (access(bin, X_OK) != 0) {
        printf("SKIP test_cli_short_csv: no attnctl binary\n");
        return;
    }
    char dir[] = "/tmp/attnctl_test_adapt_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char csv[512], preset[512], out[512], *cmd = NULL, *err = NULL;
    snprintf(csv, sizeof csv, "%s/short.csv", dir);
    write_short_csv(csv);
    const char *shape = "--d-model 16 --heads 2 --ff 32 --batch-size 8 --members 1 --threads 1 "
                        "--wide-buckets 1024";

    /* Nothing given: both from the data, printed and recorded. */
    snprintf(out, sizeof out, "%s/auto", dir);
    ck_assert_int_ge(asprintf(&cmd, "%s train %s --out %s %s", bin, csv, out, shape), 0);
    ck_assert_msg(run_stderr(cmd, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "attnctl: adapted to the data: 8 epochs, weight average decay 0.99, "
                              "vocabulary min count 1, wide path of word n-grams up to 2, "
                              "wide path from naive Bayes x0.25, NBSVM's scores added at a "
                              "weight the validation rows choose, then all rows for the best "
                              "epoch count (median text 5 tokens, below --crop-max 64)\n"),
                  "%s", err);
    cJSON *root = training_of(out);
    ck_assert(training_number(root, "crop_frac") == 0.5);
    ck_assert(training_number(root, "wide_nb") == 0.25);
    /* the weight the first run's validation rows chose, which the refit kept */
    const double weight = training_number(root, "nbsvm");
    ck_assert_msg(weight == 0 || weight == 1 || weight == 2 || weight == 4 || weight == 8, "%g",
                  weight);
    ck_assert(training_number(root, "min_count") == 1);
    cJSON *order = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "model"),
                                                    "wide_order");
    ck_assert(cJSON_IsNumber(order) && order->valuedouble == 2);
    /* the refit's: every row, the epochs of the best evaluation of 8 */
    ck_assert(training_number(root, "refit") == 1);
    ck_assert(training_number(root, "val_split") == 0);
    ck_assert(training_number(root, "epochs") >= 1 && training_number(root, "epochs") <= 8);
    ck_assert(training_number(root, "ema") == 0.99);
    cJSON_Delete(root);
    free(cmd);
    free(err);

    /* Options win; what is left still adapts. */
    snprintf(out, sizeof out, "%s/given", dir);
    ck_assert_int_ge(asprintf(&cmd, "%s train %s --out %s %s --epochs 2 --refit 0", bin, csv, out,
                              shape),
                     0);
    ck_assert_msg(run_stderr(cmd, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "attnctl: adapted to the data: weight average decay 0.99, vocabulary "
                              "min count 1, wide path of word n-grams up to 2, wide path from "
                              "naive Bayes x0.25, NBSVM's scores added at a weight the "
                              "validation rows choose (median text 5 tokens, below --crop-max "
                              "64)\n"),
                  "%s", err);
    root = training_of(out);
    ck_assert(training_number(root, "epochs") == 2.0);
    ck_assert(training_number(root, "ema") == 0.99);
    cJSON_Delete(root);
    free(cmd);
    free(err);

    /* A preset's values win too; "auto" in a preset is the default's. */
    snprintf(preset, sizeof preset, "%s/preset.json", dir);
    FILE *f = fopen(preset, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"training\": {\"epochs\": \"auto\", \"ema\": 0, \"refit\": 0}}\n");
    fclose(f);
    snprintf(out, sizeof out, "%s/preset", dir);
    ck_assert_int_ge(asprintf(&cmd, "%s train %s --out %s %s --config %s", bin, csv, out, shape,
                              preset),
                     0);
    ck_assert_msg(run_stderr(cmd, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "attnctl: adapted to the data: 8 epochs, vocabulary min count 1, "
                              "wide path of word n-grams up to 2, wide path from naive Bayes "
                              "x0.25, NBSVM's scores added at a weight the validation rows "
                              "choose (median text 5 tokens, below --crop-max 64)\n"),
                  "%s", err);
    root = training_of(out);
    ck_assert(training_number(root, "epochs") == 8.0);
    ck_assert(training_number(root, "ema") == 0.0);
    cJSON_Delete(root);
    free(cmd);
    free(err);

    /* Nothing left to the data: no line. */
    snprintf(out, sizeof out, "%s/none", dir);
    ck_assert_int_ge(asprintf(&cmd, "%s train %s --out %s %s --epochs 1 --ema 0 --wide-nb 0 --min-count 2 --wide 3 --refit 0 --nbsvm 0", bin,
                              csv, out, shape),
                     0);
    ck_assert_msg(run_stderr(cmd, &err) == 0, "%s", err);
    ck_assert_msg(!strstr(err, "adapted to the data"), "%s", err);
    free(cmd);
    free(err);
    rm_rf(dir);
}
END_TEST

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s", path);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t got; (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap)
            buf = realloc(buf, (cap *= 2) + 1);
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* The temperature of the first (best) evaluation with the highest
 * validation accuracy in metrics.jsonl. */
static double best_temperature(const char *dir)
{
    char *path = test_path(dir, "metrics.jsonl");
    size_t len;
    char *text = read_text(path, &len);
    double best = -1, temperature = -1;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *row = cJSON_Parse(line);
        ck_assert_ptr_nonnull(row);
        const cJSON *acc = cJSON_GetObjectItemCaseSensitive(row, "val_accuracy");
        const cJSON *temp = cJSON_GetObjectItemCaseSensitive(row, "temperature");
        if (cJSON_IsNumber(acc) && acc->valuedouble > best && cJSON_IsNumber(temp)) {
            best = acc->valuedouble;
            temperature = temp->valuedouble;
        }
        cJSON_Delete(row);
    }
    free(text);
    free(path);
    return temperature;
}

/* The refit (the short-text default): the model in --out is the one that
 * its own config.json trains, bit for bit, on every row; the temperature
 * is the first run's, fitted on its validation rows; nothing is left of
 * the second run's directory. */
/* NBSVM's scores are in the saved model as they were in the evaluation
 * that chose it: eval on the validation file gives the recorded accuracy,
 * and only the wide table and the head's bias differ from a run without
 * NBSVM (no validation rows: both keep their last step's network). */
START_TEST(test_cli_nbsvm_is_in_the_saved_model)
{
    const char *bin = attnctl_path();
    if (access(bin, X_OK) != 0) {
        printf("SKIP test_cli_nbsvm_is_in_the_saved_model: no attnctl binary\n");
        return;
    }
    char dir[] = "/tmp/attnctl_test_nbsvm_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char csv[512], val[512], out[512], *cmd = NULL, *err = NULL;
    snprintf(csv, sizeof csv, "%s/short.csv", dir);
    write_short_csv(csv);
    /* validation rows the network has not seen: other numbers, mixed words */
    snprintf(val, sizeof val, "%s/val.csv", dir);
    FILE *f = fopen(val, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "text,label\n");
    static const char *const mixed[] = {"great but dull", "really bad fun", "loved the mess",
                                        "warm and awful", "worst stuff in years"};
    for (int k = 0; k < 30; k++)
        fprintf(f, "%s number %d,%s\n", mixed[k % 5], 100 + k, k % 3 ? "pos" : "neg");
    fclose(f);
    const char *shape = "--d-model 16 --heads 2 --ff 32 --batch-size 8 --members 1 --threads 1 "
                        "--wide-buckets 1024 --epochs 2";
    snprintf(out, sizeof out, "%s/with", dir);
    ck_assert_int_ge(asprintf(&cmd, "%s train %s --out %s %s --val-file %s --nbsvm 8 -q", bin, csv,
                              out, shape, val),
                     0);
    ck_assert_msg(run_stderr(cmd, &err) == 0, "%s", err);
    free(cmd);
    free(err);
    cJSON *root = training_of(out);
    ck_assert(training_number(root, "nbsvm") == 8);
    ck_assert(training_number(root, "nbsvm_temperature") > 0);
    cJSON *best = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "provenance"), "best_val_accuracy");
    ck_assert(cJSON_IsNumber(best));
    const double recorded = best->valuedouble;
    cJSON_Delete(root);
    ck_assert_int_ge(asprintf(&cmd, "%s eval --json --model %s %s", bin, out, val), 0);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char *json = calloc(1, 1 << 16);
    size_t n = fread(json, 1, (1 << 16) - 1, p);
    json[n] = '\0';
    ck_assert_int_eq(pclose(p), 0);
    cJSON *ev = cJSON_Parse(json);
    ck_assert_ptr_nonnull(ev);
    cJSON *acc = cJSON_GetObjectItemCaseSensitive(ev, "accuracy");
    ck_assert(cJSON_IsNumber(acc));
    ck_assert_msg(fabs(acc->valuedouble - recorded) < 1e-9, "eval %g, recorded %g",
                  acc->valuedouble, recorded);
    cJSON_Delete(ev);
    free(json);
    free(cmd);

    /* no validation rows: the same network with and without NBSVM */
    char plain[512], folded[512];
    snprintf(plain, sizeof plain, "%s/plain", dir);
    snprintf(folded, sizeof folded, "%s/folded", dir);
    const char *outs[] = {plain, folded}, *weights[] = {"0", "4"};
    for (int k = 0; k < 2; k++) {
        ck_assert_int_ge(asprintf(&cmd, "%s train %s --out %s %s --val-split 0 --nbsvm %s -q",
                                  bin, csv, outs[k], shape, weights[k]),
                         0);
        ck_assert_msg(run_stderr(cmd, &err) == 0, "%s", err);
        free(cmd);
        free(err);
    }
    ac_model_dir a, b;
    ac_err e;
    ck_assert_msg(ac_model_dir_load(&a, plain, &e) == 0, "%s", e.msg);
    ck_assert_msg(ac_model_dir_load(&b, folded, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(a.model.n_tensors, b.model.n_tensors);
    int changed_wide = 0, changed_bias = 0;
    for (int i = 0; i < a.model.n_tensors; i++) {
        const ac_param_info *pi = &a.model.table[i];
        const float *x = a.model.params + pi->offset, *y = b.model.params + pi->offset;
        int same = memcmp(x, y, pi->numel * sizeof *x) == 0;
        if (x == a.model.p.wide_w)
            changed_wide = !same;
        else if (x == a.model.p.head_b)
            changed_bias = !same;
        else
            ck_assert_msg(same, "%s differs", pi->name);
    }
    ck_assert(changed_wide && changed_bias);
    ac_model_dir_free(&a);
    ac_model_dir_free(&b);
    rm_rf(dir);
}
END_TEST

START_TEST(test_cli_refit)
{
    const char *bin = attnctl_path();
    if (access(bin, X_OK) != 0) {
        printf("SKIP test_cli_refit: no attnctl binary\n");
        return;
    }
    char *dir = test_temp_dir("refit");
    char *csv = test_path(dir, "short.csv");
    write_short_csv(csv);
    const char *shape = "--d-model 16 --heads 2 --ff 32 --batch-size 8 --threads 1 "
                        "--wide-buckets 1024";
    char *refit = test_path(dir, "refit"), *again = test_path(dir, "again"), *cmd = NULL,
         *err = NULL;
    ck_assert_int_ge(asprintf(&cmd, "%s train %s --out %s %s", bin, csv, refit, shape), 0);
    ck_assert_msg(run_stderr(cmd, &err) == 0, "%s", err);
    ck_assert_msg(strstr(err, "attnctl: training again from the start on every row"), "%s", err);
    ck_assert_msg(strstr(err, "0 validation rows"), "%s", err);
    /* The refit has no validation rows by design: no warning for it. */
    ck_assert_msg(!strstr(err, "warning"), "%s", err);
    free(cmd);
    free(err);
    ck_assert_int_le(assert_trained_as(refit, 1, 0.0), 8);

    ac_config cfg;
    ac_config_defaults(&cfg);
    ac_err e;
    ck_assert_msg(ac_model_dir_load_config(&cfg, refit, &e) == 0, "%s", e.msg);
    const double first = best_temperature(refit);
    ck_assert(first > 0);
    ck_assert_msg(fabs((double)cfg.model.temperature - first) < 1e-6 * first, "%g against %g",
                  (double)cfg.model.temperature, first);
    ac_config_free(&cfg);

    char *config = test_path(refit, "config.json");
    ck_assert_int_ge(asprintf(&cmd, "%s train %s --out %s --config %s --threads 1", bin, csv,
                              again, config),
                     0);
    ck_assert_msg(run_stderr(cmd, &err) == 0, "%s", err);
    ck_assert_msg(!strstr(err, "training again"), "%s", err);
    char *m1 = test_path(refit, "model.safetensors"), *m2 = test_path(again, "model.safetensors");
    size_t n1, n2;
    char *b1 = read_text(m1, &n1), *b2 = read_text(m2, &n2);
    ck_assert_msg(n1 == n2 && memcmp(b1, b2, n1) == 0, "the refit model differs from its config's");
    free(b1);
    free(b2);
    free(m1);
    free(m2);
    free(cmd);
    free(err);
    free(config);
    free(refit);
    free(again);
    free(csv);
    rm_rf(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("adapt");
    TCase *tc = tcase_create("adapt");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_short_texts);
    tcase_add_test(tc, test_long_texts_keep_the_recipe);
    tcase_add_test(tc, test_explicit_values_win);
    tcase_add_test(tc, test_refit_rule);
    tcase_add_test(tc, test_pretraining_takes_the_fixed_values);
    tcase_add_test(tc, test_wide_rows_follow_the_classes);
    tcase_add_test(tc, test_config_auto);
    tcase_add_test(tc, test_cli_short_csv);
    tcase_add_test(tc, test_cli_refit);
    tcase_add_test(tc, test_cli_nbsvm_is_in_the_saved_model);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failures = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failures != 0;
}
