/* attnctl bench --model DIR [--model DIR2 ...] --data FILE.csv: inference
 * speed of trained (or quantized) models on the reviews of a CSV, as
 * eval and predict run them: reviews/s and tokens/s of each model on the
 * same rows, so an F32 model and its quantized copy compare directly. */
#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attnctl/quant.h"
#include "attnctl/util.h"
#include "cli.h"
#include "infer.h"

#define BENCH_MODEL_BATCH 32

typedef struct {
    const char *dir;
    int quantized;
    double file_mb;
    int64_t rows, tokens;
    double load_s, seconds;
    const char *kernel;
    double ops;        /* the products' operations (2 per multiply-add) over all reviews */
    double peak_gops;  /* of the arithmetic the model's products run in; 0: clock unknown */
    const char *peak_kind;
} model_speed;

/* Operations of the matrix products of one review of n tokens, counted as
 * bench counts them for a batch (attnctl bench --help): per token L (8 d^2 +
 * 4 d ff), the attention 4 n d a layer, and the classifier. */
static double review_ops(const ac_model_config *c, int64_t n)
{
    const double d = c->d_model, ff = c->d_ff, L = c->n_layers;
    return (double)n * (L * (8 * d * d + 4 * d * ff) + L * 4 * (double)n * d) +
           2 * d * c->n_classes;
}

/* The peak of what the model computes in: FP32 (bench's peak), or for int8
 * layers 4 int8 multiply-adds a FP32 lane (vpdpbusd, 2 units a core assumed
 * as for FMA), so 4x the FP32 peak where AVX512-VNNI or AVX-VNNI is there.
 * The AMX kernel's bf16 tiles (attention's weighted values only) are
 * counted at that peak too: a lower bound on the share, not a new peak. */
static void model_peak(model_speed *r, const machine_peak *mp)
{
    /* the cores the threads can use */
    const int threads = omp_get_max_threads();
    const double used = (double)(threads < mp->cores ? threads : mp->cores) / mp->cores;
    const int int8 = r->quantized && strcmp(r->kernel, "f32") != 0;
    r->peak_gops = mp->gflops * used * (int8 ? 4.0 : 1.0);
    r->peak_kind = int8 ? "int8" : "FP32";
}

static double file_mb(const char *dir)
{
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return stat(path, &sb) == 0 ? (double)sb.st_size / 1e6 : 0.0;
}

/* What a pass counts, batch by batch (cli_infer_run_plan's callback). */
typedef struct {
    model_speed *r;
    const ac_model_config *cfg;
} pass_tally;

static int count_batch(void *user, const cli_infer *s, const cli_infer_batch *b)
{
    (void)s;
    pass_tally *t = user;
    t->r->rows += b->batch.B;
    for (int i = 0; i < b->batch.B; i++) {
        t->r->tokens += b->batch.lengths[i];
        t->r->ops += review_ops(t->cfg, b->batch.lengths[i]);
    }
    return 0;
}

/* One pass over the rows of data_path (file order, batches of 32, a window
 * of batches at a time as predict runs them) after one window of warm-up. */
static int measure_model(model_speed *r, const char *dir, const char *data_path,
                         const char *text_column, ac_err *err)
{
    cli_infer s;
    ac_rawdata raw;
    ac_corpus corpus;
    ac_batch_plan plan;
    memset(r, 0, sizeof *r);
    r->dir = dir;
    double t0 = ac_now_s();
    if (cli_infer_open(&s, dir, BENCH_MODEL_BATCH, err) != 0)
        return -1;
    r->load_s = ac_now_s() - t0;
    r->quantized = s.md.model.quant != NULL;
    r->kernel = r->quantized && s.md.model.quant->n_layers > 0
                    ? ac_qkernel_name(s.md.model.quant->kernel)
                    : "f32";
    r->file_mb = file_mb(dir);
    int rc = -1;
    if (cli_infer_read_csv(&s, data_path, text_column, NULL, 0, &raw, &corpus, &plan, err) != 0)
        goto done;
    if (corpus.n == 0) {
        ac_err_set(err, "%s: no rows", data_path);
        goto done;
    }
    /* warm-up: the first window (every thread's activations touched once) */
    ac_batch_plan first = plan;
    if (first.n_batches > s.window)
        first.n_batches = s.window;
    model_speed warm = {0};
    pass_tally tally = {.r = &warm, .cfg = &s.md.model.cfg};
    if (cli_infer_run_plan(&s, &corpus, &first, 0, count_batch, &tally, err) != 0)
        goto done;
    tally.r = r;
    double start = ac_now_s();
    if (cli_infer_run_plan(&s, &corpus, &plan, 0, count_batch, &tally, err) != 0)
        goto done;
    r->seconds = ac_now_s() - start;
    rc = 0;
done:
    ac_batch_plan_free(&plan);
    ac_corpus_free(&corpus);
    ac_rawdata_free(&raw);
    cli_infer_close(&s);
    return rc;
}

int cli_bench_models(const char *const *dirs, int n, const char *data_path,
                     const char *text_column, int json)
{
    if (!data_path)
        return cli_usage_error("bench", "--model needs --data FILE.csv (the reviews to run)");
    model_speed r[CLI_BENCH_MAX_MODELS] = {{0}};
    ac_err err = {{0}};
    machine_peak mp;
    cli_machine_peak(&mp);
    for (int i = 0; i < n; i++) {
        if (measure_model(&r[i], dirs[i], data_path, text_column, &err) != 0)
            return cli_error("%s", err.msg);
        model_peak(&r[i], &mp);
    }
    if (json) {
        cJSON *arr = cJSON_CreateArray();
        for (int i = 0; arr && i < n; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "model", r[i].dir);
            cJSON_AddBoolToObject(o, "quantized", r[i].quantized);
            cJSON_AddStringToObject(o, "kernel", r[i].kernel);
            cJSON_AddNumberToObject(o, "file_mb", r[i].file_mb);
            cJSON_AddNumberToObject(o, "rows", (double)r[i].rows);
            cJSON_AddNumberToObject(o, "tokens", (double)r[i].tokens);
            cJSON_AddNumberToObject(o, "load_seconds", r[i].load_s);
            cJSON_AddNumberToObject(o, "seconds", r[i].seconds);
            cJSON_AddNumberToObject(o, "reviews_per_s", (double)r[i].rows / r[i].seconds);
            cJSON_AddNumberToObject(o, "tokens_per_s", (double)r[i].tokens / r[i].seconds);
            const double gops = r[i].ops / r[i].seconds / 1e9;
            cJSON_AddNumberToObject(o, "gops", gops);
            cJSON_AddStringToObject(o, "peak_kind", r[i].peak_kind);
            if (r[i].peak_gops > 0) {
                cJSON_AddNumberToObject(o, "peak_gops", r[i].peak_gops);
                cJSON_AddNumberToObject(o, "peak_share", gops / r[i].peak_gops);
            } else {
                cJSON_AddNullToObject(o, "peak_gops");
                cJSON_AddNullToObject(o, "peak_share");
            }
            cJSON_AddItemToArray(arr, o);
        }
        char *text = arr ? cJSON_Print(arr) : NULL;
        cJSON_Delete(arr);
        if (!text)
            return cli_error("out of memory");
        puts(text);
        free(text);
        return CLI_EXIT_OK;
    }
    printf("data       %s: %lld reviews, %lld tokens; batches of %d, %d threads\n", data_path,
           (long long)r[0].rows, (long long)r[0].tokens, BENCH_MODEL_BATCH, omp_get_max_threads());
    for (int i = 0; i < n; i++)
        printf("model      %s (%s, %.2f MB, %s): %.0f reviews/s, %.0f tokens/s (%.2f s; load "
               "%.1f ms)\n",
               r[i].dir, r[i].quantized ? "quantized" : "F32", r[i].file_mb, r[i].kernel,
               (double)r[i].rows / r[i].seconds, (double)r[i].tokens / r[i].seconds, r[i].seconds,
               1e3 * r[i].load_s);
    for (int i = 0; i < n; i++) {
        const double gops = r[i].ops / r[i].seconds / 1e9;
        if (r[i].peak_gops > 0)
            printf("products   %s: %.1f GOP/s, %.2f%% of the %s peak (%.0f GOP/s on the threads' "
                   "cores)\n",
                   r[i].dir,
                   gops, 100 * gops / r[i].peak_gops, r[i].peak_kind, r[i].peak_gops);
        else
            printf("products   %s: %.1f GOP/s (%s peak unknown: no CPU clock)\n", r[i].dir, gops,
                   r[i].peak_kind);
    }
    if (mp.gflops > 0)
        printf("peak       FP32 %.1f GFLOP/s = %s; int8 4x that (4 multiply-adds a lane)\n",
               mp.gflops, mp.how);
    for (int i = 1; i < n; i++)
        printf("speed-up   %s against %s: %.2fx\n", r[i].dir, r[0].dir,
               r[0].seconds / r[i].seconds);
    return CLI_EXIT_OK;
}
