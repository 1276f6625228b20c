/* attnctl eval: accuracy, per-class precision/recall/F1, macro-F1, confusion
 * matrix, ROC-AUC (binary), mean loss and calibration (ECE, Brier) of a model
 * on a labelled CSV. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/attribution.h"
#include "attnctl/metrics.h"
#include "cli.h"
#include "infer.h"
#include "review.h"

#define EVAL_DEFAULT_BATCH 32
#define EXCERPT_WORDS 12
#define EXCERPT_BYTES 160
/* --errors: tokens listed per mistake (those that pushed it most). */
#define PUSH_TOKENS 5

static const char EVAL_USAGE[] =
    "usage: attnctl eval --model DIR TEST.csv[.gz] [options]\n"
    "\n"
    "Evaluates a trained model on a labelled CSV (header row; the text column is the\n"
    "first of review/text/sentence, the label column the first of sentiment/label/polarity\n"
    "unless named; tab- and semicolon-separated files as train reads them). Every label\n"
    "must be one of the model's classes.\n"
    "\n"
    "Prints accuracy, per-class precision/recall/F1 and support, macro-F1, the confusion\n"
    "matrix (rows = true class, columns = predicted), ROC-AUC (binary models), the mean\n"
    "cross-entropy loss, the expected calibration error (ECE: 15 equal-width bins of the\n"
    "top probability) and the Brier score (binary: mean (p1 - y)^2; more classes: mean\n"
    "sum over classes), the number of rows, rows skipped because their text is empty, and\n"
    "the time taken. Precision, recall or F1 with a zero denominator count as 0.\n"
    "\n"
    "options:\n"
    "  --model DIR          model directory (config.json, vocab.txt, model.safetensors)\n"
    "  --json               print one JSON object instead of the table\n"
    "  --errors N           also list the N most confidently wrong examples (default 0),\n"
    "                       each with the tokens that pushed it most toward the wrong class\n"
    "  --attribution M      how --errors scores the tokens: gradxinput (gradient x\n"
    "                       (input - <pad> baseline), one backward pass; the default),\n"
    "                       ig (integrated gradients, 32+ steps: slower, complete) or none\n"
    "  --batch-size N       examples per forward pass (default 32); results do not depend on it\n"
    "  --text-column C      name of the text column\n"
    "  --label-column C     name of the label column\n"
    "  --threads N          threads to use (default: all cores)\n"
    "  --help               show this help\n";

typedef struct {
    int token;   /* position in the review */
    double score; /* attribution to the predicted class */
} pushed_token;

typedef struct {
    int64_t row;
    int predicted;
    float probability; /* of the predicted class */
    /* the tokens that pushed it most toward `predicted` (attribution > 0) */
    int n_pushed;
    pushed_token pushed[PUSH_TOKENS];
    cli_review review; /* tokens, for the listed examples */
} wrong_example;

/* Most confident first; ties by row so the list is deterministic. */
static int compare_wrong(const void *pa, const void *pb)
{
    const wrong_example *a = pa, *b = pb;
    if (a->probability != b->probability)
        return a->probability > b->probability ? -1 : 1;
    return (a->row > b->row) - (a->row < b->row);
}

typedef struct {
    const char *model_dir, *data_path, *text_column, *label_column;
    int json;
    long n_errors, batch_size, threads;
    ac_attr_method attribution;
} eval_options;

static int parse_eval_options(int argc, char **argv, eval_options *o)
{
    static const struct option longopts[] = {
        {"model", required_argument, NULL, 'm'},
        {"json", no_argument, NULL, 'j'},
        {"errors", required_argument, NULL, 'e'},
        {"batch-size", required_argument, NULL, 'b'},
        {"text-column", required_argument, NULL, 't'},
        {"label-column", required_argument, NULL, 'l'},
        {"threads", required_argument, NULL, 'T'},
        {"attribution", required_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    o->batch_size = EVAL_DEFAULT_BATCH;
    o->attribution = AC_ATTR_GRADXINPUT;
    optind = 0; /* GNU: full reinitialisation */
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model_dir = optarg; break;
        case 'j': o->json = 1; break;
        case 'e':
            if (cli_parse_int(optarg, 0, 1000000, &o->n_errors) != 0)
                return cli_usage_error("eval", "--errors: '%s' is not an integer in 0..1000000",
                                       optarg);
            break;
        case 'b':
            if (cli_parse_int(optarg, 1, 65536, &o->batch_size) != 0)
                return cli_usage_error("eval", "--batch-size: '%s' is not an integer in 1..65536",
                                       optarg);
            break;
        case 't': o->text_column = optarg; break;
        case 'a':
            if (ac_attr_method_parse(optarg, &o->attribution) != 0) {
                char names[64];
                return cli_usage_error("eval", "--attribution: unknown method '%s' (%s)", optarg,
                                       ac_names_list(&ac_attr_method_names, 0, names, sizeof names));
            }
            break;
        case 'l': o->label_column = optarg; break;
        case 'T':
            if (cli_parse_int(optarg, 1, 4096, &o->threads) != 0)
                return cli_usage_error("eval", "--threads: '%s' is not an integer in 1..4096",
                                       optarg);
            break;
        case 'h': fputs(EVAL_USAGE, stdout); return -1;
        case ':': return cli_usage_error("eval", "option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error("eval", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return cli_usage_error("eval", "missing the test file (TEST.csv[.gz])");
    if (argc - optind > 1)
        return cli_usage_error("eval", "one test file expected, got %d ('%s', '%s', ...)",
                               argc - optind, argv[optind], argv[optind + 1]);
    o->data_path = argv[optind];
    if (!o->model_dir)
        return cli_usage_error("eval", "--model DIR is required");
    return 0;
}

typedef struct {
    int64_t count, skipped_empty, truncated, invalid_utf8, tokens;
    double seconds, model_seconds;
    double auc, ece, brier;
    wrong_example *wrong;
    int64_t n_wrong;
} eval_result;

static void excerpt_of(char *out, const ac_rawdata *raw, int64_t row)
{
    cli_text_excerpt(out, EXCERPT_BYTES, ac_rawdata_text(raw, row), ac_rawdata_text_len(raw, row),
                     EXCERPT_WORDS);
}

static cJSON *json_number_or_null(double x)
{
    return isfinite(x) ? cJSON_CreateNumber(x) : cJSON_CreateNull();
}

static int print_json(const eval_options *o, const cli_infer *s, ac_metrics *m,
                      const ac_rawdata *raw, const eval_result *r, long n_errors)
{
    char *const *labels = s->md.config.labels;
    int C = s->n_classes;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "model", o->model_dir);
    cJSON_AddStringToObject(root, "data", o->data_path);
    cJSON_AddNumberToObject(root, "count", (double)r->count);
    cJSON_AddNumberToObject(root, "skipped_empty", (double)r->skipped_empty);
    cJSON_AddNumberToObject(root, "truncated", (double)r->truncated);
    cJSON_AddNumberToObject(root, "invalid_utf8_rows", (double)r->invalid_utf8);
    cJSON_AddNumberToObject(root, "accuracy", ac_metrics_accuracy(m));
    cJSON_AddNumberToObject(root, "macro_f1", ac_metrics_macro_f1(m));
    cJSON_AddItemToObject(root, "roc_auc", json_number_or_null(r->auc));
    cJSON_AddNumberToObject(root, "mean_loss", ac_metrics_mean_loss(m));
    cJSON_AddItemToObject(root, "ece", json_number_or_null(r->ece));
    cJSON_AddItemToObject(root, "brier", json_number_or_null(r->brier));
    cJSON_AddNumberToObject(root, "seconds", r->seconds);
    cJSON_AddNumberToObject(root, "model_seconds", r->model_seconds);
    cJSON *label_arr = cJSON_AddArrayToObject(root, "labels");
    cJSON *classes = cJSON_AddArrayToObject(root, "classes");
    cJSON *confusion = cJSON_AddArrayToObject(root, "confusion");
    for (int c = 0; c < C; c++) {
        cJSON_AddItemToArray(label_arr, cJSON_CreateString(labels[c]));
        cJSON *k = cJSON_CreateObject();
        cJSON_AddStringToObject(k, "label", labels[c]);
        cJSON_AddNumberToObject(k, "precision", ac_metrics_precision(m, c));
        cJSON_AddNumberToObject(k, "recall", ac_metrics_recall(m, c));
        cJSON_AddNumberToObject(k, "f1", ac_metrics_f1(m, c));
        cJSON_AddNumberToObject(k, "support", (double)ac_metrics_support(m, c));
        cJSON_AddItemToArray(classes, k);
        cJSON *row = cJSON_CreateArray();
        for (int j = 0; j < C; j++)
            cJSON_AddItemToArray(row, cJSON_CreateNumber((double)ac_metrics_confusion(m, c, j)));
        cJSON_AddItemToArray(confusion, row);
    }
    if (n_errors > 0) {
        cJSON_AddStringToObject(root, "errors_attribution", ac_attr_method_name(o->attribution));
        cJSON *errs = cJSON_AddArrayToObject(root, "errors");
        char excerpt[EXCERPT_BYTES + 4];
        for (int64_t i = 0; i < r->n_wrong && i < n_errors; i++) {
            const wrong_example *w = &r->wrong[i];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "line", (double)raw->line[w->row]);
            excerpt_of(excerpt, raw, w->row);
            cJSON_AddStringToObject(e, "text", excerpt);
            cJSON_AddStringToObject(e, "true", labels[raw->labels[w->row]]);
            cJSON_AddStringToObject(e, "predicted", labels[w->predicted]);
            cJSON_AddNumberToObject(e, "probability", w->probability);
            if (o->attribution != AC_ATTR_NONE) {
                cJSON *pushed = cJSON_AddArrayToObject(e, "pushed_by");
                for (int k = 0; k < w->n_pushed; k++) {
                    cJSON *t = cJSON_CreateObject();
                    cJSON_AddStringToObject(t, "token", w->review.tokens[w->pushed[k].token]);
                    cJSON_AddNumberToObject(t, "position", w->pushed[k].token);
                    cJSON_AddNumberToObject(t, "score", w->pushed[k].score);
                    cJSON_AddItemToArray(pushed, t);
                }
            }
            cJSON_AddItemToArray(errs, e);
        }
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return cli_error("out of memory while writing JSON");
    puts(text);
    free(text);
    return 0;
}

static int max_label_width(char *const *labels, int C, int at_least)
{
    int w = at_least;
    for (int c = 0; c < C; c++) {
        int len = cli_display_width(labels[c]);
        if (len > w)
            w = len;
    }
    return w;
}

static int digits(long long x)
{
    int d = 1;
    while (x >= 10) {
        x /= 10;
        d++;
    }
    return d;
}

/* Wider than this a table no longer reads in a terminal. */
#define TABLE_COLUMNS 100
/* At most this many confusions listed when no grid fits. */
#define LISTED_CONFUSIONS 20

/* The confusion matrix in a terminal's width: columns named by their
 * labels when they fit; else numbered, each row's number and label naming
 * the class (30 classes fit); else, with too many classes for any grid,
 * the most frequent confusions. --json always holds the whole matrix. */
static void print_confusion(ac_metrics *m, char *const *labels, int C, int w)
{
    const int cw = max_label_width(labels, C, 8);
    if (w + C * (cw + 2) <= TABLE_COLUMNS) {
        printf("\nconfusion matrix (rows = true, columns = predicted)\n%-*s", w, "");
        for (int j = 0; j < C; j++) {
            fputs("  ", stdout);
            cli_print_padded(stdout, labels[j], cw, 1);
        }
        putchar('\n');
        for (int c = 0; c < C; c++) {
            cli_print_padded(stdout, labels[c], w, 0);
            for (int j = 0; j < C; j++)
                printf("  %*lld", cw, (long long)ac_metrics_confusion(m, c, j));
            putchar('\n');
        }
        return;
    }
    long long most = 0;
    for (int c = 0; c < C; c++)
        for (int j = 0; j < C; j++)
            if ((long long)ac_metrics_confusion(m, c, j) > most)
                most = (long long)ac_metrics_confusion(m, c, j);
    const int iw = digits(C), cell = digits(most) > iw ? digits(most) : iw;
    if (iw + C * (cell + 1) <= TABLE_COLUMNS + 20) {
        printf("\nconfusion matrix (rows = true, columns = predicted; classes numbered)\n%*s", iw,
               "");
        for (int j = 0; j < C; j++)
            printf(" %*d", cell, j + 1);
        putchar('\n');
        for (int c = 0; c < C; c++) {
            printf("%*d", iw, c + 1);
            for (int j = 0; j < C; j++)
                printf(" %*lld", cell, (long long)ac_metrics_confusion(m, c, j));
            printf("  %s\n", labels[c]);
        }
        return;
    }
    /* The largest off-diagonal cells, largest first (ties: by true, then
     * predicted class), by repeated selection: at most 20 passes. */
    printf("\nmost frequent confusions (%d classes: the whole matrix is in --json)\n", C);
    long long below = -1; /* the count and cell listed last */
    int last_c = -1, last_j = -1, listed = 0;
    for (; listed < LISTED_CONFUSIONS; listed++) {
        long long best = 0;
        int bc = -1, bj = -1;
        for (int c = 0; c < C; c++)
            for (int j = 0; j < C; j++) {
                long long n = (long long)ac_metrics_confusion(m, c, j);
                if (c == j || n == 0)
                    continue;
                int after_last = below < 0 || n < below ||
                                 (n == below && (c > last_c || (c == last_c && j > last_j)));
                if (after_last && (n > best || (n == best && bc < 0)))
                    best = n, bc = c, bj = j;
            }
        if (bc < 0)
            break;
        printf("  %*lld  true %s, predicted %s\n", digits(most), best, labels[bc], labels[bj]);
        below = best, last_c = bc, last_j = bj;
    }
    if (listed == 0)
        printf("  none: every row was predicted as its class\n");
}

/* "NAME       0.1234", or n/a when the figure is undefined. */
static void print_figure_or_na(const char *name, double x)
{
    if (isfinite(x))
        printf("%-10s %.4f\n", name, x);
    else
        printf("%-10s n/a (no probabilities)\n", name);
}

static void print_table(const eval_options *o, const cli_infer *s, ac_metrics *m,
                        const ac_rawdata *raw, const eval_result *r, long n_errors)
{
    char *const *labels = s->md.config.labels;
    int C = s->n_classes;
    printf("model      %s\n", o->model_dir);
    printf("data       %s: %lld rows", o->data_path, (long long)r->count);
    if (r->skipped_empty)
        printf(" (%lld empty rows skipped)", (long long)r->skipped_empty);
    printf(", %lld truncated to %d tokens\n", (long long)r->truncated, s->max_len);
    printf("accuracy   %.4f\n", ac_metrics_accuracy(m));
    printf("macro-F1   %.4f\n", ac_metrics_macro_f1(m));
    if (C == 2) {
        if (isfinite(r->auc))
            printf("ROC-AUC    %.4f\n", r->auc);
        else
            printf("ROC-AUC    n/a (only one class in the data)\n");
    }
    printf("mean loss  %.4f\n", ac_metrics_mean_loss(m));
    print_figure_or_na("ECE", r->ece);
    print_figure_or_na("Brier", r->brier);
    printf("time       %.2f s (%.0f reviews/s; model %.2f s)\n", r->seconds,
           r->seconds > 0 ? (double)r->count / r->seconds : 0.0, r->model_seconds);

    int w = max_label_width(labels, C, 9);
    printf("\n%-*s  precision  recall      f1  support\n", w, "class");
    for (int c = 0; c < C; c++) {
        cli_print_padded(stdout, labels[c], w, 0);
        printf("  %9.4f  %6.4f  %6.4f  %7lld\n", ac_metrics_precision(m, c),
               ac_metrics_recall(m, c), ac_metrics_f1(m, c), (long long)ac_metrics_support(m, c));
    }
    printf("%-*s  %9s  %6s  %6.4f  %7lld\n", w, "macro avg", "", "", ac_metrics_macro_f1(m),
           (long long)r->count);

    print_confusion(m, labels, C, w);

    if (n_errors > 0) {
        printf("\nmost confidently wrong (%lld of %lld wrong)", (long long)(r->n_wrong < n_errors ? r->n_wrong : n_errors),
               (long long)r->n_wrong);
        if (o->attribution != AC_ATTR_NONE)
            printf("; tokens scored by %s toward the predicted class", o->attribution == AC_ATTR_IG
                                                                        ? "integrated gradients"
                                                                        : "gradient x input");
        printf("\n");
        char excerpt[EXCERPT_BYTES + 4];
        for (int64_t i = 0; i < r->n_wrong && i < n_errors; i++) {
            const wrong_example *e = &r->wrong[i];
            excerpt_of(excerpt, raw, e->row);
            printf("  line %-7lld true ", (long long)raw->line[e->row]);
            cli_print_padded(stdout, labels[raw->labels[e->row]], w, 0);
            fputs(" predicted ", stdout);
            cli_print_padded(stdout, labels[e->predicted], w, 0);
            printf(" p=%.4f  %s\n", e->probability, excerpt);
            if (o->attribution != AC_ATTR_NONE) {
                printf("               pushed toward %s by:", labels[e->predicted]);
                for (int k = 0; k < e->n_pushed; k++)
                    printf(" %s[%+.3f]", e->review.tokens[e->pushed[k].token], e->pushed[k].score);
                printf(e->n_pushed ? "\n" : " no token\n");
            }
        }
    }
}

/* For each of the first n mistakes: its tokens and the PUSH_TOKENS that
 * pushed it most toward the wrong class (largest positive attribution to the
 * predicted class's logit). Returns 0, or prints the error and returns -1. */
static int explain_errors(const eval_options *o, cli_infer *s, const ac_rawdata *raw,
                          wrong_example *wrong, int64_t n)
{
    if (n <= 0)
        return 0;
    ac_err err = {{0}};
    ac_attribution a;
    if (ac_attribution_setup(&a, &s->md.model, o->attribution, s->max_len, AC_IG_DEFAULT_STEPS,
                             AC_IG_MAX_STEPS, &err) != 0) {
        cli_error("%s", err.msg);
        return -1;
    }
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        wrong_example *w = &wrong[i];
        if (cli_review_encode(&w->review, s->tok, &s->md.config.tokenizer, &s->md.vocab, s->max_len,
                              ac_rawdata_text(raw, w->row), ac_rawdata_text_len(raw, w->row),
                              !o->json, &err) != 0 ||
            ac_attribution_run(&a, w->review.ids, w->review.n, &err) != 0) {
            rc = cli_error("%s:%lld: explaining the mistake: %s", o->data_path,
                           (long long)raw->line[w->row], err.msg);
            break;
        }
        const double *scores = a.scores + (size_t)w->predicted * (size_t)w->review.n;
        /* the PUSH_TOKENS largest positive scores, largest first (ties: earlier token) */
        w->n_pushed = 0;
        for (int t = 0; t < w->review.n; t++) {
            if (!(scores[t] > 0.0))
                continue;
            int k = w->n_pushed < PUSH_TOKENS ? w->n_pushed++ : PUSH_TOKENS;
            if (k == PUSH_TOKENS && scores[t] <= w->pushed[PUSH_TOKENS - 1].score)
                continue;
            if (k == PUSH_TOKENS)
                k = PUSH_TOKENS - 1;
            while (k > 0 && w->pushed[k - 1].score < scores[t]) {
                w->pushed[k] = w->pushed[k - 1];
                k--;
            }
            w->pushed[k] = (pushed_token){t, scores[t]};
        }
    }
    ac_attribution_free(&a);
    return rc == 0 ? 0 : -1;
}

typedef struct {
    const eval_options *o;
    const ac_rawdata *raw;
    ac_metrics *m;
    eval_result *r;
} eval_tally;

/* One batch's rows into the metrics, in row order (cli_infer_batch_fn);
 * 1 after an error it reported. */
static int tally_batch(void *user, const cli_infer *s, const cli_infer_batch *b)
{
    eval_tally *t = user;
    const ac_batch *batch = &b->batch;
    ac_err err = {{0}};
    for (int i = 0; i < batch->B; i++) {
        const float *probs = b->probs + (size_t)i * (size_t)s->n_classes;
        const float loss = b->losses[i];
        int pred = ac_argmax(probs, s->n_classes);
        int truth = batch->labels[i];
        if (!isfinite(loss)) {
            cli_error("%s:%lld: the model's loss is not finite (%g): the model is broken",
                      t->o->data_path, (long long)t->raw->line[batch->rows[i]], (double)loss);
            return 1;
        }
        if (ac_metrics_add(t->m, truth, pred, probs, loss, &err) != 0) {
            cli_error("%s", err.msg);
            return 1;
        }
        if (t->r->wrong && pred != truth)
            t->r->wrong[t->r->n_wrong++] = (wrong_example){
                .row = batch->rows[i], .predicted = pred, .probability = probs[pred]};
    }
    return 0;
}

int cmd_eval(int argc, char **argv)
{
    eval_options o;
    int rc = parse_eval_options(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? CLI_EXIT_OK : rc;
    cli_set_threads((int)o.threads);
    double t0 = ac_now_s();

    ac_err err = {{0}};
    cli_infer s;
    ac_rawdata raw;
    ac_corpus corpus;
    ac_batch_plan plan;
    ac_metrics m;
    eval_result r;
    memset(&raw, 0, sizeof raw);
    memset(&corpus, 0, sizeof corpus);
    memset(&plan, 0, sizeof plan);
    memset(&m, 0, sizeof m);
    memset(&r, 0, sizeof r);
    rc = CLI_EXIT_RUNTIME;

    if (cli_infer_open(&s, o.model_dir, (int)o.batch_size, &err) != 0) {
        cli_error("%s", err.msg);
        return CLI_EXIT_RUNTIME;
    }
    if (cli_infer_read_csv(&s, o.data_path, o.text_column, o.label_column, 1, &raw, &corpus,
                           &plan, &err) != 0) {
        cli_error("%s", err.msg);
        goto done;
    }
    if (raw.n_rows == 0) {
        cli_error("%s: no rows to evaluate (%lld empty rows skipped)", o.data_path,
                  (long long)raw.n_empty_skipped);
        goto done;
    }
    if (ac_metrics_init(&m, s.n_classes, corpus.n, &err) != 0) {
        cli_error("%s: %s", o.data_path, err.msg);
        goto done;
    }
    if (o.n_errors > 0) {
        r.wrong = malloc((size_t)corpus.n * sizeof *r.wrong);
        if (!r.wrong) {
            cli_error("out of memory for %lld examples", (long long)corpus.n);
            goto done;
        }
    }

    double t_model = ac_now_s();
    eval_tally tally = {&o, &raw, &m, &r};
    int run = cli_infer_run_plan(&s, &corpus, &plan, 1, tally_batch, &tally, &err);
    if (run != 0) {
        if (run < 0)
            cli_error("%s", err.msg);
        goto done;
    }
    r.model_seconds = ac_now_s() - t_model;
    if (r.wrong)
        qsort(r.wrong, (size_t)r.n_wrong, sizeof *r.wrong, compare_wrong);
    if (r.wrong && o.attribution != AC_ATTR_NONE &&
        explain_errors(&o, &s, &raw, r.wrong, r.n_wrong < o.n_errors ? r.n_wrong : o.n_errors) != 0)
        goto done;
    r.count = m.count;
    r.skipped_empty = raw.n_empty_skipped;
    r.truncated = corpus.n_truncated;
    r.invalid_utf8 = raw.n_invalid_utf8;
    r.tokens = corpus.n_tokens;
    r.auc = ac_metrics_roc_auc(&m);
    r.ece = ac_metrics_ece(&m);
    r.brier = ac_metrics_brier(&m);
    r.seconds = ac_now_s() - t0;

    if (o.json) {
        if (print_json(&o, &s, &m, &raw, &r, o.n_errors) != 0)
            goto done;
    } else {
        print_table(&o, &s, &m, &raw, &r, o.n_errors);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("writing the results: %s", strerror(errno));
        goto done;
    }
    rc = CLI_EXIT_OK;
done:
    for (int64_t i = 0; r.wrong && i < r.n_wrong && i < o.n_errors; i++)
        cli_review_free(&r.wrong[i].review);
    free(r.wrong);
    ac_metrics_free(&m);
    ac_batch_plan_free(&plan);
    ac_corpus_free(&corpus);
    ac_rawdata_free(&raw);
    cli_infer_close(&s);
    return rc;
}
