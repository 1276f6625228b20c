/* Regression checks on the real IMDB data (../shared/data/imdb; SKIP when it
 * is absent): a small model trained with the default recipe on the first
 * 4,000 training reviews must not collapse on short inputs.
 *
 * The collapse it guards against: with the course's fixed
 * sinusoidal positions and whole reviews only, a model calls almost every
 * short text positive. The same run as below with `--crop 0 --positions
 * sinusoidal` gave 95.8 % of the validation spans one class (span accuracy
 * 0.54); the default recipe gives about 54 % (span accuracy 0.67). */
#include <check.h>
#include <cjson/cJSON.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnctl/io.h"
#include "attnctl/model.h"
#include "attnctl/text.h"
#include "attnctl/train.h"

#include "test_util.h"

#define IMDB_TRAIN "../shared/data/imdb/train.csv.gz"
#define SUBSET_ROWS 4000

/* The last line of metrics.jsonl, parsed. */
static cJSON *last_metrics(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, AC_METRICS_FILE);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char line[4096], last[4096] = "";
    while (fgets(line, sizeof line, f))
        if (line[0] == '{')
            strcpy(last, line);
    fclose(f);
    cJSON *o = cJSON_Parse(last);
    ck_assert_msg(o != NULL, "metrics line not JSON: %s", last);
    return o;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(cJSON_IsNumber(v), "metrics: %s missing", key);
    return v->valuedouble;
}

/* Probability of the predicted class for one text, as `predict` gives it. */
static double confidence(ac_model_dir *md, ac_tokenizer *tok, const char *text)
{
    int T = md->config.model.max_len, full;
    int32_t *ids = calloc((size_t)T, sizeof *ids);
    int len = ac_encode_text(tok, &md->config.tokenizer, &md->vocab, text, strlen(text), T, ids,
                             &full);
    ac_model_forward(&md->model, ids, &len, NULL, 1, len, 0, 0);
    const float *p = md->model.act.probs_out;
    double best = 0;
    for (int c = 0; c < md->config.model.n_classes; c++)
        best = fmax(best, p[c]);
    free(ids);
    return best;
}

START_TEST(test_short_spans_stay_balanced)
{
    if (access(IMDB_TRAIN, R_OK) != 0) {
        printf("SKIP test_short_spans_stay_balanced: %s not found\n", IMDB_TRAIN);
        return;
    }
    ac_err err = {{0}};
    ac_rawdata raw;
    ac_read_options ro = {.need_label = 1};
    ck_assert_msg(ac_rawdata_read(&raw, IMDB_TRAIN, &ro, &err) == 0, "%s", err.msg);
    ck_assert_int_gt(raw.n_rows, SUBSET_ROWS);
    ac_rawdata subset = raw; /* the first rows: a view, freed with raw */
    subset.n_rows = SUBSET_ROWS;

    ac_config cfg;
    ac_config_defaults(&cfg);
    cfg.model.max_len = 256;
    cfg.model.d_model = 32;
    cfg.model.n_heads = 2;
    cfg.model.d_ff = 64;
    cfg.training.epochs = 3;
    char dir[] = "/tmp/attnctl_test_imdb_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ac_train_options o = {.config = &cfg, .train = &subset, .out_dir = dir};
    ac_train_result res;
    ck_assert_msg(ac_train(&o, &res, &err) == 0, "%s", err.msg);

    cJSON *m = last_metrics(dir);
    double val = num(m, "val_accuracy"), span = num(m, "short_span_accuracy");
    double majority = num(m, "short_span_majority"), temperature = num(m, "temperature");
    printf("imdb regression: val accuracy %.4f, short spans %.4f, one class for %.1f%% of the "
           "spans, temperature %.3f\n",
           val, span, 100 * majority, temperature);
    ck_assert_msg(val >= 0.80, "validation accuracy %.4f", val);
    ck_assert_msg(span >= 0.62, "short-span accuracy %.4f", span);
    ck_assert_msg(majority <= 0.65, "%.1f%% of the short spans get one class: the collapse",
                  100 * majority);
    cJSON_Delete(m);

    /* The probabilities do not saturate on one-word and one-line inputs (the
     * old recipe gave 0.9987 for all of them): the saved model with its
     * fitted temperature. How close to 0.5 a neutral word comes depends on
     * the data: this 4,000-review model gives 0.6-0.97, the full-data model
     * about 0.5 (benchmarks/EXPERIMENTS.md). */
    ac_model_dir md;
    ck_assert_msg(ac_model_dir_load(&md, dir, &err) == 0, "%s", err.msg);
    ck_assert_msg(ac_model_alloc_activations(&md.model, 1, md.config.model.max_len, &err) == 0,
                  "%s", err.msg);
    ac_tokenizer *tok;
    ck_assert_msg(ac_tokenizer_create(&tok, &md.config.tokenizer, &err) == 0, "%s", err.msg);
    static const char *const clear[] = {"the", ".", "good", "Not good.", "I loved it.",
                                        "terrible"};
    for (size_t i = 0; i < sizeof clear / sizeof clear[0]; i++) {
        double c = confidence(&md, tok, clear[i]);
        printf("imdb regression: \"%s\" -> %.4f\n", clear[i], c);
        ck_assert_msg(c < 0.995, "\"%s\" saturates at %.4f", clear[i], c);
    }
    ac_tokenizer_free(tok);
    ac_model_dir_free(&md);
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    ac_config_free(&cfg);
    ac_rawdata_free(&raw);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("imdb");
    TCase *tc = tcase_create("regression");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_short_spans_stay_balanced);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failures = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failures == 0 ? 0 : 1;
}
