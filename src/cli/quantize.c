/* attnctl quantize: a smaller copy of a trained model (int8 matrices, the
 * wide table pruned and sparse) that every command loads as any model, with
 * its size and, on a labelled CSV, its accuracy and agreement with the
 * original. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnctl/metrics.h"
#include "attnctl/quant_io.h"
#include "cli.h"
#include "infer.h"

#define CHECK_BATCH 32

static const char QUANTIZE_USAGE[] =
    "usage: attnctl quantize --model DIR --out DIR2 [--cutoff N] [--data FILE] [--check FILE.csv]\n"
    "                        [--text-column C] [--label-column C]\n"
    "\n"
    "Writes a smaller copy of the trained model in DIR into DIR2, which eval, predict,\n"
    "inspect and bench load as any model:\n"
    "  - the wide path's table keeps its N rows that weigh most in decisions (two\n"
    "    classes: |w0 - w1|; more: the norm of the row minus its mean), marked in a\n"
    "    bitmap, as 5-bit values with a scale for every 16 rows;\n"
    "  - the token embeddings are 4-bit, the encoder's matrices int8, a scale a row;\n"
    "  - biases, LayerNorm and the classifier stay F32.\n"
    "Prints both sizes; with --check, the accuracy of both models on a labelled CSV\n"
    "and the share of its rows where they predict the same label.\n"
    "\n"
    "options:\n"
    "  --model DIR      the trained model (a model directory of attnctl train)\n"
    "  --out DIR2       where the quantized model goes (must not hold a model)\n"
    "  --cutoff N       rows of the wide table kept [1500000]\n"
    "  --check FILE     labelled CSV[.gz] to compare the two models on\n"
    "  --data FILE      texts like those the model will see, e.g. its training CSV[.gz]:\n"
    "                   a wide row then weighs |w0 - w1| x (1 + the texts holding it),\n"
    "                   what it adds to decisions over them (default: by weight alone;\n"
    "                   the rows of the vocabulary's words are kept first either way)\n"
    "  --text-column C  the text column of --check and --data (default: review, text\n"
    "                   or sentence)\n"
    "  --label-column C the label column of --check (default: sentiment, label or\n"
    "                   polarity)\n"
    "  --threads N      threads for --check (default: all cores)\n"
    "  --help           show this help\n";

typedef struct {
    const char *model_dir, *out_dir, *check_path, *data_path, *text_column, *label_column;
    long cutoff, threads;
} quantize_options;

static int parse_options(int argc, char **argv, quantize_options *o)
{
    static const struct option longopts[] = {
        {"model", required_argument, NULL, 'm'}, {"out", required_argument, NULL, 'o'},
        {"cutoff", required_argument, NULL, 'k'}, {"check", required_argument, NULL, 'c'},
        {"data", required_argument, NULL, 'd'},
        {"text-column", required_argument, NULL, 't'}, {"label-column", required_argument, NULL, 'l'},
        {"threads", required_argument, NULL, 'T'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    o->cutoff = AC_QUANT_DEFAULT_WIDE_ROWS;
    optind = 0;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model_dir = optarg; break;
        case 'o': o->out_dir = optarg; break;
        case 'c': o->check_path = optarg; break;
        case 'd': o->data_path = optarg; break;
        case 't': o->text_column = optarg; break;
        case 'l': o->label_column = optarg; break;
        case 'k':
            if (cli_parse_int(optarg, 0, 1L << 30, &o->cutoff) != 0)
                return cli_usage_error("quantize", "--cutoff: '%s' is not an integer in 0..%ld",
                                       optarg, 1L << 30);
            break;
        case 'T':
            if (cli_parse_int(optarg, 1, 4096, &o->threads) != 0)
                return cli_usage_error("quantize", "--threads: '%s' is not an integer in 1..4096",
                                       optarg);
            break;
        case 'h': fputs(QUANTIZE_USAGE, stdout); return -1;
        case ':':
            return cli_usage_error("quantize", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error("quantize", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error("quantize", "unexpected argument '%s'", argv[optind]);
    if (!o->model_dir)
        return cli_usage_error("quantize", "--model DIR is required");
    if (!o->out_dir)
        return cli_usage_error("quantize", "--out DIR2 is required");
    return 0;
}

/* Bytes of the model files of dir (config.json, vocab.txt, model.safetensors). */
static double model_bytes(const char *dir)
{
    static const char *const files[] = {"config.json", "vocab.txt", "model.safetensors"};
    double total = 0.0;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (stat(path, &sb) == 0)
            total += (double)sb.st_size;
    }
    return total;
}

/* The --check file, read and encoded once (before anything is written, so
 * that a bad file leaves no output and a pipe can be read), and each
 * model's predicted label for its rows. */
typedef struct {
    ac_rawdata raw;
    ac_corpus corpus;
    ac_batch_plan plan;
    int32_t *truth;   /* [corpus.n] */
    int32_t *pred[2]; /* [corpus.n]: the model's, the quantized model's */
} check_rows;

static void check_rows_free(check_rows *c)
{
    ac_batch_plan_free(&c->plan);
    ac_corpus_free(&c->corpus);
    ac_rawdata_free(&c->raw);
    free(c->truth);
    free(c->pred[0]);
    free(c->pred[1]);
    memset(c, 0, sizeof *c);
}

/* Where predict_labels puts each row's predicted and true label. */
typedef struct {
    int32_t *pred, *truth;
} row_labels;

static int take_labels(void *user, const cli_infer *s, const cli_infer_batch *b)
{
    row_labels *out = user;
    for (int i = 0; i < b->batch.B; i++) {
        out->pred[b->batch.rows[i]] = ac_argmax(b->probs + (size_t)i * s->n_classes, s->n_classes);
        out->truth[b->batch.rows[i]] = b->batch.labels[i];
    }
    return 0;
}

/* The label the model in dir (which) predicts for every row of c. The first
 * call (which 0) reads and encodes --check's file into c; the second reuses it: a
 * quantized model keeps its original's vocabulary and tokenizer. */
static int predict_labels(const quantize_options *o, const char *dir, int which, check_rows *c,
                          ac_err *err)
{
    cli_infer s;
    if (cli_infer_open(&s, dir, CHECK_BATCH, err) != 0)
        return -1;
    int rc = -1;
    if (which == 0) {
        if (cli_infer_read_csv(&s, o->check_path, o->text_column, o->label_column, 1, &c->raw,
                               &c->corpus, &c->plan, err) != 0)
            goto done;
        c->truth = malloc(((size_t)c->corpus.n + 1) * sizeof *c->truth);
    }
    c->pred[which] = malloc(((size_t)c->corpus.n + 1) * sizeof *c->pred[which]);
    if (!c->truth || !c->pred[which]) {
        ac_err_set(err, "out of memory for %lld rows", (long long)c->corpus.n);
        goto done;
    }
    row_labels out = {.pred = c->pred[which], .truth = c->truth};
    if (cli_infer_run_plan(&s, &c->corpus, &c->plan, 0, take_labels, &out, err) != 0)
        goto done;
    rc = 0;
done:
    cli_infer_close(&s);
    return rc;
}

/* uses[b]: how many rows of the CSV at path hold wide bucket b (as the
 * model in dir reads them). NULL with err on failure. */
static uint32_t *wide_uses(const char *dir, const char *path, const char *text_column,
                           ac_err *err)
{
    cli_infer s;
    ac_rawdata raw;
    ac_corpus corpus;
    ac_batch_plan plan;
    memset(&raw, 0, sizeof raw);
    memset(&corpus, 0, sizeof corpus);
    memset(&plan, 0, sizeof plan);
    if (cli_infer_open(&s, dir, CHECK_BATCH, err) != 0)
        return NULL;
    const ac_model_config *c = &s.md.model.cfg;
    uint32_t *uses = NULL;
    int32_t *buckets = NULL;
    if (!ac_model_has_wide(c)) {
        ac_err_set(err, "--data: %s has no wide path to prune", dir);
        goto done;
    }
    if (cli_infer_read_csv(&s, path, text_column, NULL, 0, &raw, &corpus, &plan, err) != 0)
        goto done;
    uses = calloc((size_t)c->wide_buckets, sizeof *uses);
    buckets = malloc((size_t)s.max_len * (size_t)c->wide_order * sizeof *buckets);
    if (!uses || !buckets) {
        free(uses);
        uses = NULL;
        ac_err_set(err, "out of memory counting %d wide buckets", c->wide_buckets);
        goto done;
    }
    for (int64_t b = 0; b < plan.n_batches; b++) {
        ac_batch *batch = &s.batches[0].batch; /* the rows' ids only: no forward */
        ac_batch_fill(batch, &corpus, &plan, b);
        for (int i = 0; i < batch->B; i++) {
            int n = wide_buckets_of_text(buckets, batch->ids + (size_t)i * batch->T,
                                         batch->lengths[i], c->wide_order, c->wide_buckets);
            for (int k = 0; k < n; k++)
                uses[buckets[k]]++;
        }
    }
done:
    free(buckets);
    ac_batch_plan_free(&plan);
    ac_corpus_free(&corpus);
    ac_rawdata_free(&raw);
    cli_infer_close(&s);
    return uses;
}

static void print_agreement(const char *check_path, const check_rows *c)
{
    const int64_t n = c->corpus.n;
    int64_t right[2] = {0, 0}, same = 0;
    for (int64_t i = 0; i < n; i++) {
        for (int k = 0; k < 2; k++)
            right[k] += c->pred[k][i] == c->truth[i];
        same += c->pred[0][i] == c->pred[1][i];
    }
    const double acc0 = (double)right[0] / (double)n, acc1 = (double)right[1] / (double)n;
    printf("check      %s: %lld rows\n", check_path, (long long)n);
    printf("accuracy   %.4f model, %.4f quantized (%+.2f points)\n", acc0, acc1,
           100.0 * (acc1 - acc0));
    printf("agreement  %.2f%% of the labels the same (%lld differ)\n",
           100.0 * (double)same / (double)n, (long long)(n - same));
}

int cmd_quantize(int argc, char **argv)
{
    quantize_options o;
    int prc = parse_options(argc, argv, &o);
    if (prc != 0)
        return prc > 0 ? prc : CLI_EXIT_OK;
    cli_set_threads((int)o.threads);
    ac_err err = {{0}};
    if (ac_quantize_out_free(o.out_dir, &err) != 0)
        return cli_error("%s", err.msg);
    check_rows check;
    memset(&check, 0, sizeof check);
    /* the --check file is read, and the model run on it, before anything is
     * written: a file that fails leaves no output */
    if (o.check_path && predict_labels(&o, o.model_dir, 0, &check, &err) != 0) {
        check_rows_free(&check);
        return cli_error("%s", err.msg);
    }
    if (o.check_path && check.corpus.n == 0) {
        check_rows_free(&check);
        return cli_error("%s: no rows to check", o.check_path);
    }
    int kept = 0, rc = 0;
    uint32_t *uses = NULL;
    if (o.data_path && !(uses = wide_uses(o.model_dir, o.data_path, o.text_column, &err)))
        rc = -1;
    if (rc == 0)
        rc = ac_quantize_model_dir(o.model_dir, o.out_dir, (int)o.cutoff,
                                   AC_QUANT_DEFAULT_WIDE_GROUP, AC_QUANT_DEFAULT_WIDE_BITS, uses,
                                   &kept, &err);
    free(uses);
    if (rc != 0) {
        check_rows_free(&check);
        return cli_error("%s", err.msg);
    }
    const double before = model_bytes(o.model_dir), after = model_bytes(o.out_dir);
    printf("model      %s: %.2f MB\n", o.model_dir, before / 1e6);
    printf("quantized  %s: %.2f MB (%.1fx smaller), %d wide rows kept\n", o.out_dir, after / 1e6,
           after > 0 ? before / after : 0.0, kept);
    rc = CLI_EXIT_OK;
    if (o.check_path) {
        if (predict_labels(&o, o.out_dir, 1, &check, &err) != 0)
            rc = cli_error("%s", err.msg);
        else
            print_agreement(o.check_path, &check);
    }
    check_rows_free(&check);
    return rc;
}
