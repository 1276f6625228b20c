/* attnctl bench: training and inference throughput of a model built from a
 * config (random full-length batches), its GFLOP/s against the machine's FP32
 * peak, peak memory, and optionally the speed of the text pipeline on a CSV.
 * FLOPs are counted as ../shared/bench/torch_ref.py count_flops_per_token
 * does, so the figures compare directly with the PyTorch reference. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "attnctl/train.h"
#include "attnctl/blas.h"
#include "attnctl/io.h"
#include "attnctl/optim.h"
#include "attnctl/rng.h"
#include "attnctl/text.h"
#include "cli.h"
#include "infer.h"

#define BENCH_REPS 5           /* repetitions; the median is reported */
#define BENCH_REP_SECONDS 0.6  /* default length of one repetition: ~3 s per measurement */
#define BENCH_WARM_SECONDS 0.5
#define BENCH_N_BATCHES 4      /* distinct random batches, cycled */
#define BENCH_DEFAULT_VOCAB 50002
#define BENCH_SEED 1234

static const char BENCH_USAGE[] =
    "usage: attnctl bench [options]\n"
    "\n"
    "Measures, for a model made from a config (random weights, random full-length batches):\n"
    "  training tokens/s (forward + backward + gradient clipping + AdamW step) and\n"
    "  inference tokens/s (forward only), each the median of 5 timed repetitions after a\n"
    "  warm-up; GFLOP/s from the matmul FLOPs per token (as ../shared/bench/torch_ref.py\n"
    "  counts them: forward = layers*(8d^2 + 4d*ff) + layers*4Td + 2dC, training = 3 x\n"
    "  forward) and their share of the machine's FP32 peak (cores x 2 FMA units x SIMD\n"
    "  lanes x 2 flops x max clock, read from cpufreq or /proc/cpuinfo); peak resident\n"
    "  memory. With --data, also the text pipeline on that CSV: read + tokenize +\n"
    "  vocabulary + encode, single-threaded.\n"
    "\n"
    "options:\n"
    "  --config FILE        model/training preset, e.g. models/bench-a.json (default: built-in\n"
    "                       defaults)\n"
    "  --batch-size N       batch size (default: the config's training.batch_size)\n"
    "  --max-len T          sequence length of every batch (default: the config's max_len)\n"
    "  --threads N          threads (default: all cores)\n"
    "  --steps S            steps per timed repetition (default: enough for ~3 s per\n"
    "                       measurement); 0 skips the model measurements\n"
    "  --data FILE          also time the text pipeline on this CSV[.gz]\n"
    "  --text-column C      the text column of --data (default: review, text or sentence)\n"
    "  --model DIR          instead: the inference speed of this trained (or quantized)\n"
    "                       model on the reviews of --data, as eval and predict run them\n"
    "                       (reviews/s, tokens/s, GOP/s of the matrix products as\n"
    "                       counted above and their share of the FP32 peak, or of the\n"
    "                       int8 peak, 4x, for a quantized model's int8 layers); repeat\n"
    "                       it to compare models on the same reviews, e.g. a model and\n"
    "                       its quantized copy\n"
    "  --json               print one JSON object\n"
    "  --help               show this help\n";

typedef struct {
    const char *config_path, *data_path, *text_column;
    long batch_size, max_len, threads, steps;
    int json;
    const char *models[CLI_BENCH_MAX_MODELS];
    int n_models;
} bench_options;

static int parse_bench_options(int argc, char **argv, bench_options *o)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"batch-size", required_argument, NULL, 'b'},
        {"max-len", required_argument, NULL, 'L'},
        {"threads", required_argument, NULL, 'T'},
        {"steps", required_argument, NULL, 's'},
        {"data", required_argument, NULL, 'd'},
        {"text-column", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},
        {"model", required_argument, NULL, 'M'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    o->steps = -1;
    optind = 0;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': o->config_path = optarg; break;
        case 'b':
            if (cli_parse_int(optarg, 1, 65536, &o->batch_size) != 0)
                return cli_usage_error("bench", "--batch-size: '%s' is not an integer in 1..65536",
                                       optarg);
            break;
        case 'L':
            if (cli_parse_int(optarg, 1, 1 << 20, &o->max_len) != 0)
                return cli_usage_error("bench", "--max-len: '%s' is not an integer in 1..%d",
                                       optarg, 1 << 20);
            break;
        case 'T':
            if (cli_parse_int(optarg, 1, 4096, &o->threads) != 0)
                return cli_usage_error("bench", "--threads: '%s' is not an integer in 1..4096",
                                       optarg);
            break;
        case 's':
            if (cli_parse_int(optarg, 0, 100000000, &o->steps) != 0)
                return cli_usage_error("bench", "--steps: '%s' is not an integer in 0..100000000",
                                       optarg);
            break;
        case 'd': o->data_path = optarg; break;
        case 't': o->text_column = optarg; break;
        case 'j': o->json = 1; break;
        case 'M':
            if (o->n_models == CLI_BENCH_MAX_MODELS)
                return cli_usage_error("bench", "--model: at most %d models",
                                       CLI_BENCH_MAX_MODELS);
            o->models[o->n_models++] = optarg;
            break;
        case 'h': fputs(BENCH_USAGE, stdout); return -1;
        case ':': return cli_usage_error("bench", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error("bench", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error("bench", "unexpected argument '%s'", argv[optind]);
    return 0;
}

static double peak_rss_mb(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)ru.ru_maxrss / 1024.0; /* ru_maxrss is in KiB on Linux */
}

/* ------------------------------------------------------------ model timings */

typedef struct {
    ac_model model;
    ac_optim_config optim;
    float *m1, *m2;
    int32_t *ids, *lengths, *labels; /* BENCH_N_BATCHES batches */
    int B, T;
    long step; /* optimizer steps taken (AdamW bias correction) */
} bench_model;

typedef struct {
    double median, reps[BENCH_REPS];
    long steps_per_rep;
} rate;

typedef struct {
    double forward, backward, optimizer; /* ms per training step */
    double part_forward[AC_N_PARTS], part_backward[AC_N_PARTS]; /* ms per step, by layer */
} phase_ms;

static void train_step(bench_model *b, long i, phase_ms *ph)
{
    ac_model *m = &b->model;
    size_t k = (size_t)(i % BENCH_N_BATCHES);
    const int32_t *ids = b->ids + k * (size_t)b->B * (size_t)b->T;
    double t0 = ph ? ac_now_s() : 0;
    ac_model_zero_grad(m);
    ac_model_forward(m, ids, b->lengths, b->labels + k * (size_t)b->B, b->B, b->T, 1,
                     ac_rng_key(BENCH_SEED, (uint64_t)b->step));
    double t1 = ph ? ac_now_s() : 0;
    ac_model_backward(m);
    double t2 = ph ? ac_now_s() : 0;
    ac_model_clip_grad_norm(m, b->optim.clip_norm);
    b->step++;
    ac_adamw_step(m, m->params, m->grads, b->m1, b->m2, &b->optim, b->optim.lr, b->step);
    if (ph) {
        double t3 = ac_now_s();
        ph->forward += 1e3 * (t1 - t0);
        ph->backward += 1e3 * (t2 - t1);
        ph->optimizer += 1e3 * (t3 - t2);
    }
}

static void infer_step(bench_model *b, long i, phase_ms *ph)
{
    (void)ph;
    size_t k = (size_t)(i % BENCH_N_BATCHES);
    ac_model_forward(&b->model, b->ids + k * (size_t)b->B * (size_t)b->T, b->lengths, NULL, b->B,
                     b->T, 0, 0);
}

static int compare_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

/* Warm up, choose the steps per repetition (fixed_steps > 0: that many), then
 * time BENCH_REPS repetitions; tokens/s of each, median. */
static void measure(bench_model *b, void (*step)(bench_model *, long, phase_ms *),
                    long fixed_steps, rate *out)
{
    long i = 0;
    double t0 = ac_now_s(), dt;
    do {
        step(b, i++, NULL);
        dt = ac_now_s() - t0;
    } while (fixed_steps <= 0 && (i < 2 || dt < BENCH_WARM_SECONDS));
    double per_step = dt / (double)i;
    long steps = fixed_steps > 0 ? fixed_steps : (long)ceil(BENCH_REP_SECONDS / per_step);
    if (steps < 1)
        steps = 1;
    out->steps_per_rep = steps;
    double sorted[BENCH_REPS];
    for (int r = 0; r < BENCH_REPS; r++) {
        double start = ac_now_s();
        for (long s = 0; s < steps; s++)
            step(b, i++, NULL);
        double secs = ac_now_s() - start;
        out->reps[r] = (double)b->B * b->T * (double)steps / secs;
        sorted[r] = out->reps[r];
    }
    qsort(sorted, BENCH_REPS, sizeof sorted[0], compare_double);
    out->median = sorted[BENCH_REPS / 2];
}

static int bench_model_setup(bench_model *b, const ac_config *cfg, int B, int T, ac_err *err)
{
    memset(b, 0, sizeof *b);
    if (ac_model_create(&b->model, &cfg->model, err) != 0)
        return -1;
    ac_model_init_weights(&b->model, BENCH_SEED);
    if (ac_model_alloc_activations(&b->model, B, T, err) != 0)
        return -1;
    b->B = B;
    b->T = T;
    b->optim = cfg->training.optim;
    size_t n_ids = (size_t)BENCH_N_BATCHES * (size_t)B * (size_t)T;
    b->m1 = calloc(b->model.n_params, sizeof *b->m1);
    b->m2 = calloc(b->model.n_params, sizeof *b->m2);
    b->ids = malloc(n_ids * sizeof *b->ids);
    b->lengths = malloc((size_t)B * sizeof *b->lengths);
    b->labels = malloc((size_t)BENCH_N_BATCHES * (size_t)B * sizeof *b->labels);
    if (!b->m1 || !b->m2 || !b->ids || !b->lengths || !b->labels)
        return ac_err_set(err, "out of memory for the optimizer state and %d batches",
                          BENCH_N_BATCHES);
    uint64_t key = ac_rng_key(BENCH_SEED, 1);
    for (size_t i = 0; i < n_ids; i++)
        b->ids[i] = (int32_t)ac_rng_below(key, i, (uint64_t)cfg->model.vocab_size);
    for (int i = 0; i < B; i++)
        b->lengths[i] = T; /* full length: no padding */
    key = ac_rng_key(BENCH_SEED, 2);
    for (size_t i = 0; i < (size_t)BENCH_N_BATCHES * (size_t)B; i++)
        b->labels[i] = (int32_t)ac_rng_below(key, i, (uint64_t)cfg->model.n_classes);
    return 0;
}

static void bench_model_free(bench_model *b)
{
    ac_model_free(&b->model);
    free(b->m1);
    free(b->m2);
    free(b->ids);
    free(b->lengths);
    free(b->labels);
}

/* Matmul FLOPs per token of one forward pass, as torch_ref.py counts them:
 * Q, K, V, output projections and the FFN, QK^T and AV over all T keys, the head. */
static double flops_per_token_forward(const ac_model_config *c, int T)
{
    double L = c->n_layers, d = c->d_model, ff = c->d_ff;
    return L * (8 * d * d + 4 * d * ff) + L * 4 * (double)T * d + 2 * d * c->n_classes;
}

/* ------------------------------------------------------------ text pipeline */

typedef struct {
    int64_t rows, tokens, tokens_kept;
    int vocab_size;
    double read_s, vocab_s, encode_s, total_s;
} text_timing;

static int bench_text(const char *path, const char *text_column, const ac_config *cfg,
                      text_timing *tt, ac_err *err)
{
    memset(tt, 0, sizeof *tt);
    ac_rawdata raw;
    ac_vocab vocab;
    ac_corpus corpus;
    memset(&raw, 0, sizeof raw);
    memset(&vocab, 0, sizeof vocab);
    memset(&corpus, 0, sizeof corpus);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1); /* the pipeline's single-thread speed */
    int rc = -1;
    ac_read_options ro = {.text_column = text_column, .need_label = 0};
    double t0 = ac_now_s();
    if (ac_rawdata_read(&raw, path, &ro, err) != 0)
        goto done;
    double t1 = ac_now_s();
    int with_cls = cfg->model.pooling == AC_POOL_CLS;
    if (ac_vocab_build(&vocab, &raw, NULL, raw.n_rows, &cfg->tokenizer, cfg->training.vocab_max,
                       cfg->training.min_count, with_cls, err) != 0)
        goto done;
    double t2 = ac_now_s();
    if (ac_corpus_encode(&corpus, &raw, &cfg->tokenizer, &vocab, cfg->model.max_len, err) != 0)
        goto done;
    double t3 = ac_now_s();
    tt->rows = raw.n_rows;
    for (int64_t i = 0; i < corpus.n; i++)
        tt->tokens += corpus.full_len[i] - with_cls;
    tt->tokens_kept = corpus.n_tokens;
    tt->vocab_size = vocab.size;
    tt->read_s = t1 - t0;
    tt->vocab_s = t2 - t1;
    tt->encode_s = t3 - t2;
    tt->total_s = t3 - t0;
    rc = 0;
done:
    omp_set_num_threads(threads);
    ac_corpus_free(&corpus);
    ac_vocab_free(&vocab);
    ac_rawdata_free(&raw);
    return rc;
}

/* ------------------------------------------------------------------ output */

typedef struct {
    int B, T, threads;
    size_t n_params;
    double flops_fwd;
    int have_model, have_text;
    rate train, infer;
    phase_ms phases;
    text_timing text;
    machine_peak peak;
    double rss_mb;
} bench_result;

/* The time split between layers (embedding, attention, FFN, head, ...) will
 * be added here by the lead: measure it after the phase timings in
 * cmd_bench and report it in print_bench_json / print_bench_text below. */

static cJSON *number_or_null(int have, double x)
{
    return have && isfinite(x) ? cJSON_CreateNumber(x) : cJSON_CreateNull();
}

static int print_bench_json(const ac_config *cfg, const bench_result *r)
{
    const ac_model_config *mc = &cfg->model;
    int hm = r->have_model, ht = r->have_text;
    double train_gflops = r->train.median * 3 * r->flops_fwd / 1e9;
    double infer_gflops = r->infer.median * r->flops_fwd / 1e9;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "layers", mc->n_layers);
    cJSON_AddNumberToObject(o, "d_model", mc->d_model);
    cJSON_AddNumberToObject(o, "heads", mc->n_heads);
    cJSON_AddNumberToObject(o, "d_ff", mc->d_ff);
    cJSON_AddNumberToObject(o, "seq_len", r->T);
    cJSON_AddNumberToObject(o, "batch_size", r->B);
    cJSON_AddNumberToObject(o, "vocab_size", mc->vocab_size);
    cJSON_AddNumberToObject(o, "n_classes", mc->n_classes);
    cJSON_AddStringToObject(o, "pooling", ac_pooling_name(mc->pooling));
    cJSON_AddNumberToObject(o, "dropout", mc->dropout);
    cJSON_AddNumberToObject(o, "params", (double)r->n_params);
    cJSON_AddNumberToObject(o, "threads", r->threads);
    cJSON_AddStringToObject(o, "openblas_core", ac_blas_corename());
    cJSON_AddNumberToObject(o, "flops_per_token_fwd", r->flops_fwd);
    cJSON_AddNumberToObject(o, "flops_per_token_train", 3 * r->flops_fwd);
    cJSON_AddItemToObject(o, "train_tokens_per_s", number_or_null(hm, r->train.median));
    cJSON_AddItemToObject(o, "infer_tokens_per_s", number_or_null(hm, r->infer.median));
    cJSON_AddItemToObject(o, "train_gflops", number_or_null(hm, train_gflops));
    cJSON_AddItemToObject(o, "infer_gflops", number_or_null(hm, infer_gflops));
    cJSON_AddItemToObject(o, "peak_gflops", number_or_null(r->peak.gflops > 0, r->peak.gflops));
    cJSON_AddStringToObject(o, "peak_how", r->peak.how);
    int hp = hm && r->peak.gflops > 0;
    cJSON_AddItemToObject(o, "peak_share", number_or_null(hp, train_gflops / r->peak.gflops));
    cJSON_AddItemToObject(o, "infer_peak_share",
                          number_or_null(hp, infer_gflops / r->peak.gflops));
    if (hm) {
        cJSON *reps = cJSON_AddArrayToObject(o, "train_tokens_per_s_reps");
        cJSON *ireps = cJSON_AddArrayToObject(o, "infer_tokens_per_s_reps");
        for (int i = 0; i < BENCH_REPS; i++) {
            cJSON_AddItemToArray(reps, cJSON_CreateNumber(round(r->train.reps[i])));
            cJSON_AddItemToArray(ireps, cJSON_CreateNumber(round(r->infer.reps[i])));
        }
        cJSON_AddNumberToObject(o, "train_steps_per_rep", (double)r->train.steps_per_rep);
        cJSON_AddNumberToObject(o, "infer_steps_per_rep", (double)r->infer.steps_per_rep);
        cJSON *ph = cJSON_AddObjectToObject(o, "phase_ms");
        cJSON_AddNumberToObject(ph, "forward", r->phases.forward);
        cJSON_AddNumberToObject(ph, "backward", r->phases.backward);
        cJSON_AddNumberToObject(ph, "optimizer", r->phases.optimizer);
        cJSON *parts = cJSON_AddObjectToObject(o, "layer_ms");
        for (int p = 0; p < AC_N_PARTS; p++) {
            cJSON *part = cJSON_AddObjectToObject(parts, ac_model_part_name(p));
            cJSON_AddNumberToObject(part, "forward", r->phases.part_forward[p]);
            cJSON_AddNumberToObject(part, "backward", r->phases.part_backward[p]);
        }
    }
    cJSON_AddNumberToObject(o, "peak_rss_mb", r->rss_mb);
    cJSON_AddItemToObject(o, "rows", number_or_null(ht, (double)r->text.rows));
    cJSON_AddItemToObject(o, "tokens", number_or_null(ht, (double)r->text.tokens));
    cJSON_AddItemToObject(o, "text_seconds", number_or_null(ht, r->text.total_s));
    if (ht) {
        cJSON_AddNumberToObject(o, "text_tokens_per_s", (double)r->text.tokens / r->text.total_s);
        cJSON_AddNumberToObject(o, "text_read_seconds", r->text.read_s);
        cJSON_AddNumberToObject(o, "text_vocab_seconds", r->text.vocab_s);
        cJSON_AddNumberToObject(o, "text_encode_seconds", r->text.encode_s);
        cJSON_AddNumberToObject(o, "text_vocab_size", r->text.vocab_size);
        cJSON_AddNumberToObject(o, "text_tokens_kept", (double)r->text.tokens_kept);
    }
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    if (!s)
        return cli_error("out of memory while writing JSON");
    puts(s);
    free(s);
    return 0;
}

static void print_bench_text(const ac_config *cfg, const bench_result *r)
{
    const ac_model_config *mc = &cfg->model;
    printf("model      %d layer(s), d %d, %d heads, ff %d, %s pooling, vocab %d, %d classes, "
           "%.2fM parameters\n",
           mc->n_layers, mc->d_model, mc->n_heads, mc->d_ff, ac_pooling_name(mc->pooling),
           mc->vocab_size, mc->n_classes, (double)r->n_params / 1e6);
    printf("batches    %d x %d tokens (random ids, full length), %d thread(s), OpenBLAS core %s\n",
           r->B, r->T, r->threads, ac_blas_corename());
    if (r->have_model) {
        double tg = r->train.median * 3 * r->flops_fwd / 1e9;
        double ig = r->infer.median * r->flops_fwd / 1e9;
        printf("train      %10.0f tokens/s  %7.2f GFLOP/s", r->train.median, tg);
        if (r->peak.gflops > 0)
            printf("  %5.1f%% of peak", 100 * tg / r->peak.gflops);
        printf("   (median of %d x %ld steps; %.1f ms/step: forward %.1f, backward %.1f, "
               "clip+AdamW %.1f)\n",
               BENCH_REPS, r->train.steps_per_rep, 1e3 * r->B * r->T / r->train.median,
               r->phases.forward, r->phases.backward, r->phases.optimizer);
        printf("inference  %10.0f tokens/s  %7.2f GFLOP/s", r->infer.median, ig);
        if (r->peak.gflops > 0)
            printf("  %5.1f%% of peak", 100 * ig / r->peak.gflops);
        printf("   (median of %d x %ld steps)\n", BENCH_REPS, r->infer.steps_per_rep);
        printf("flops      %.0f per token forward, %.0f training\n", r->flops_fwd,
               3 * r->flops_fwd);
        printf("layers     ms per training step, forward + backward:\n");
        for (int p = 0; p < AC_N_PARTS; p++)
            printf("           %-18s %7.2f + %7.2f\n", ac_model_part_name(p),
                   r->phases.part_forward[p], r->phases.part_backward[p]);
        printf("           %-18s %7.2f\n", "clip + AdamW", r->phases.optimizer);
    }
    if (r->peak.gflops > 0)
        printf("peak       %.1f GFLOP/s = %s\n", r->peak.gflops, r->peak.how);
    else
        printf("peak       %s\n", r->peak.how);
    printf("memory     peak resident %.1f MB\n", r->rss_mb);
    if (r->have_text)
        printf("text       %lld rows, %lld tokens in %.2f s single-threaded (%.0f tokens/s; "
               "read %.2f s, vocabulary %.2f s, encode %.2f s; vocabulary %d)\n",
               (long long)r->text.rows, (long long)r->text.tokens, r->text.total_s,
               (double)r->text.tokens / r->text.total_s, r->text.read_s, r->text.vocab_s,
               r->text.encode_s, r->text.vocab_size);
}

int cmd_bench(int argc, char **argv)
{
    bench_options o;
    int rc = parse_bench_options(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? CLI_EXIT_OK : rc;
    cli_set_threads((int)o.threads);
    if (o.n_models > 0)
        return cli_bench_models(o.models, o.n_models, o.data_path, o.text_column, o.json);

    ac_err err = {{0}};
    ac_config cfg;
    ac_config_defaults(&cfg);
    if (o.config_path && ac_config_load(&cfg, o.config_path, 0, &err) != 0) {
        ac_config_free(&cfg);
        return cli_error("%s", err.msg);
    }
    /* The vocabulary size comes from data in a real run; here: the config's if
     * set, else the training vocabulary limit, else the reference's 50,002. */
    if (cfg.model.vocab_size < 3)
        cfg.model.vocab_size = cfg.training.vocab_max >= 3 ? cfg.training.vocab_max
                                                           : BENCH_DEFAULT_VOCAB;
    if (cfg.model.n_classes < 2)
        cfg.model.n_classes = 2;
    if (o.max_len > 0)
        cfg.model.max_len = (int)o.max_len;
    /* The settings a training run would choose from its data: the long
     * reviews' (bench's texts are max_len tokens). */
    ac_train_adapt_to_long_texts(&cfg.training, &cfg.model);
    /* Only the speed matters: a constant learning rate avoids schedule edge cases. */
    cfg.training.optim.schedule = AC_SCHED_CONSTANT;
    cfg.training.optim.warmup_steps = 0;

    bench_result r;
    memset(&r, 0, sizeof r);
    r.B = o.batch_size > 0 ? (int)o.batch_size : cfg.training.batch_size;
    r.T = cfg.model.max_len;
    r.threads = omp_get_max_threads();
    r.flops_fwd = flops_per_token_forward(&cfg.model, r.T);
    cli_machine_peak(&r.peak);
    rc = CLI_EXIT_RUNTIME;
    if (ac_model_config_validate(&cfg.model, &err) != 0) {
        cli_error("%s%s%s", o.config_path ? o.config_path : "", o.config_path ? ": " : "",
                  err.msg);
        goto done;
    }
    if (r.B < 1) {
        cli_error("batch size must be at least 1 (got %d)", r.B);
        goto done;
    }

    if (o.steps != 0) {
        bench_model b;
        if (bench_model_setup(&b, &cfg, r.B, r.T, &err) != 0) {
            bench_model_free(&b);
            cli_error("%s", err.msg);
            goto done;
        }
        r.n_params = b.model.n_params;
        measure(&b, train_step, o.steps, &r.train);
        /* Phase split over a few more steps. */
        int n_phase = 3;
        memset(&b.model.profile, 0, sizeof b.model.profile);
        b.model.profile.enabled = 1;
        for (int i = 0; i < n_phase; i++)
            train_step(&b, i, &r.phases);
        b.model.profile.enabled = 0;
        r.phases.forward /= n_phase;
        r.phases.backward /= n_phase;
        r.phases.optimizer /= n_phase;
        for (int p = 0; p < AC_N_PARTS; p++) {
            r.phases.part_forward[p] = 1e3 * b.model.profile.forward[p] / n_phase;
            r.phases.part_backward[p] = 1e3 * b.model.profile.backward[p] / n_phase;
        }
        measure(&b, infer_step, o.steps, &r.infer);
        r.have_model = 1;
        bench_model_free(&b);
    } else {
        ac_model m;
        memset(&m, 0, sizeof m);
        if (ac_model_create(&m, &cfg.model, &err) == 0)
            r.n_params = m.n_params;
        ac_model_free(&m);
    }
    if (o.data_path) {
        if (bench_text(o.data_path, o.text_column, &cfg, &r.text, &err) != 0) {
            cli_error("%s", err.msg);
            goto done;
        }
        r.have_text = 1;
    }
    r.rss_mb = peak_rss_mb();
    if (o.json) {
        if (print_bench_json(&cfg, &r) != 0)
            goto done;
    } else {
        print_bench_text(&cfg, &r);
    }
    if (fflush(stdout) != 0) {
        cli_error("writing the results: %s", strerror(errno));
        goto done;
    }
    rc = CLI_EXIT_OK;
done:
    ac_config_free(&cfg);
    return rc;
}
