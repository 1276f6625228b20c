/* attnctl inspect: runs one review through the model and dumps or draws its
 * attention maps (JSON, SVG, HTML, or shaded text in the terminal). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnctl/attribution.h"
#include "attnctl/infer.h"
#include "attnctl/io.h"
#include "attnctl/model.h"
#include "attnctl/text.h"
#include "cli.h"
#include "render.h"
#include "review.h"

#define STDIN_MAX_BYTES (64u << 20)
/* --steps at most (the batch is steps + 1 rows of the review). */
#define INSPECT_MAX_STEPS 4096

typedef enum { FORMAT_TEXT, FORMAT_JSON, FORMAT_SVG, FORMAT_HTML } inspect_format;

static const char usage_text[] =
    "usage: attnctl inspect --model DIR [TEXT | -] [OPTIONS]\n"
    "\n"
    "Runs one review through the model and shows its attention maps over the\n"
    "review's tokens. TEXT is the review (several arguments are joined with\n"
    "spaces); with - or without TEXT the review is read from standard input.\n"
    "\n"
    "Options:\n"
    "  --model DIR      the model directory (config.json, vocab.txt, model.safetensors)\n"
    "  --format FORMAT  text: the review shaded by what the classifier draws from\n"
    "                         each token, with the predicted label (the default)\n"
    "                   json: tokens, ids, label, probabilities and\n"
    "                         attention[layer][head][query][key] (bertviz layout)\n"
    "                   svg:  a heatmap per head (the first 64 tokens)\n"
    "                   html: one self-contained page with the prediction, the\n"
    "                         shaded review and every map (the first 128 tokens)\n"
    "                   Without --format, --out FILE picks it from the file name's\n"
    "                   ending (.json, .svg, .html/.htm, .txt); a name without an\n"
    "                   ending gets text, another ending is an error.\n"
    "  --attribution M  which words pushed the prediction, and which way:\n"
    "                   ig: integrated gradients of each class's logit with respect\n"
    "                       to the input embeddings, from a baseline of <pad> tokens\n"
    "                       at the same positions (the default)\n"
    "                   gradxinput: gradient x (input - baseline), one backward pass\n"
    "                   none: attention only\n"
    "  --steps S        integrated gradients: trapezoid intervals to start with\n"
    "                   (default 32); doubled while the completeness gap is over\n"
    "                   1 %, up to 16384 steps or 2^20 steps x tokens (at least 1024)\n"
    "  --layer L        only layer L (counted from 0)\n"
    "  --head H         only head H (counted from 0)\n"
    "  --out FILE       write to FILE instead of standard output (a file is replaced\n"
    "                   atomically; a device, FIFO or /dev/stdout is written to)\n"
    "  --threads N      threads to use (default: all cores)\n"
    "  -h, --help       show this help\n"
    "\n"
    "The text format uses colour when standard output is a terminal and NO_COLOR is\n"
    "not set; otherwise each token is followed by its weight, e.g. great(0.210), and\n"
    "by its attribution in the attribution block, e.g. great[+1.234].\n";

/* In the order the usage error lists them. */
static const ac_name FORMAT_NAMES[] = {
    {FORMAT_JSON, "json", 0},
    {FORMAT_SVG, "svg", 0},
    {FORMAT_HTML, "html", 0},
    {FORMAT_TEXT, "text", 0},
};
static const ac_names FORMATS = AC_NAMES(FORMAT_NAMES);

static int parse_format(const char *s, inspect_format *out)
{
    int v;
    if (ac_names_parse(&FORMATS, s, &v))
        return -1;
    *out = (inspect_format)v;
    return 0;
}

static int format_from_file_name(const char *path, inspect_format *out)
{
    const char *dot = strrchr(path, '.');
    if (!dot || strchr(dot, '/'))
        return -1;
    if (strcasecmp(dot, ".htm") == 0) {
        *out = FORMAT_HTML;
        return 0;
    }
    if (strcasecmp(dot, ".txt") == 0) {
        *out = FORMAT_TEXT;
        return 0;
    }
    char lower[8];
    size_t n = strlen(dot + 1);
    if (n >= sizeof lower)
        return -1;
    for (size_t i = 0; i <= n; i++)
        lower[i] = (char)(dot[1 + i] >= 'A' && dot[1 + i] <= 'Z' ? dot[1 + i] + 32 : dot[1 + i]);
    return parse_format(lower, out);
}

/* Whole standard input, NUL-terminated. */
static int read_stdin(char **text, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return cli_error("inspect: out of memory");
    for (;;) {
        if (n + 1 == cap) {
            if (cap >= STDIN_MAX_BYTES) {
                free(buf);
                return cli_error("inspect: standard input is longer than %u MB", STDIN_MAX_BYTES >> 20);
            }
            char *p = realloc(buf, cap * 2);
            if (!p) {
                free(buf);
                return cli_error("inspect: out of memory");
            }
            buf = p;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, stdin);
        n += got;
        if (got == 0) {
            if (ferror(stdin)) {
                free(buf);
                return cli_error("inspect: cannot read standard input");
            }
            break;
        }
    }
    if (n >= 2 && (unsigned char)buf[0] == 0x1f && (unsigned char)buf[1] == 0x8b) {
        free(buf); /* gzip's magic: never the start of a text (0x8b is no UTF-8 lead byte) */
        return cli_error("inspect: standard input is gzip-compressed data; decompress it first "
                         "(zcat FILE | attnctl inspect ...)");
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return 0;
}

static int is_blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!strchr(" \t\n\r\f\v", s[i]))
            return 0;
    return 1;
}

typedef struct {
    cli_review r;
    float *attention;
    float *token_weight;
    float *probs;  /* [C] of the inspect forward */
    double *logits; /* [C] raw */
    ac_attribution attr;
} inspect_data;

static void inspect_data_free(inspect_data *d)
{
    cli_review_free(&d->r);
    free(d->attention);
    free(d->token_weight);
    free(d->probs);
    free(d->logits);
    ac_attribution_free(&d->attr);
    memset(d, 0, sizeof *d);
}

/* Tokenizes and encodes the text, and finds each id's token string. */
static int encode_review(inspect_data *d, ac_model_dir *md, const char *text, size_t len, int display)
{
    ac_tokenizer *tok = NULL;
    ac_err err = {{0}};
    if (ac_tokenizer_create(&tok, &md->config.tokenizer, &err) != 0)
        return cli_error("inspect: %s", err.msg);
    int rc = cli_review_encode(&d->r, tok, &md->config.tokenizer, &md->vocab, md->model.cfg.max_len,
                               text, len, display, &err);
    ac_tokenizer_free(tok);
    return rc == 0 ? 0 : cli_error("inspect: %s", err.msg);
}

/* What the pooled representation draws from each token (see render.h). */
static void pooled_weights(inspect_data *d, const ac_model *m, char *measure, size_t measure_len)
{
    int n = d->r.n, H = m->cfg.n_heads, dm = m->cfg.d_model, last = m->cfg.n_layers - 1;
    const float *last_maps = d->attention + (size_t)last * H * n * n;
    for (int i = 0; i < n; i++)
        d->token_weight[i] = 0.0f;
    /* A pretrained encoder pools nothing: the attention each token receives. */
    const int encoder_only = m->cfg.objective != AC_OBJECTIVE_CLASSIFICATION;
    switch (encoder_only ? AC_POOL_MEAN : m->cfg.pooling) {
    case AC_POOL_MAX:
        for (int j = 0; j < dm; j++) {
            int32_t t = m->act.pool_argmax[j];
            if (t >= 0 && t < n)
                d->token_weight[t] += 1.0f / (float)dm;
        }
        snprintf(measure, measure_len,
                 "the share of the %d max-pooled features whose maximum lies at the token "
                 "(the model uses max pooling)",
                 dm);
        break;
    case AC_POOL_MEAN:
        for (int h = 0; h < H; h++)
            for (int q = 0; q < n; q++)
                for (int k = 0; k < n; k++)
                    d->token_weight[k] += last_maps[((size_t)h * n + q) * n + k] / (float)(H * n);
        snprintf(measure, measure_len,
                 "the attention the token receives in the last layer, averaged over its %d heads and "
                 "over all query tokens (%s)",
                 H, encoder_only ? "a pretrained encoder has no pooling" : "the model uses mean pooling");
        break;
    case AC_POOL_CLS:
    default:
        for (int h = 0; h < H; h++)
            for (int k = 0; k < n; k++)
                d->token_weight[k] += last_maps[(size_t)h * n * n + k] / (float)H;
        snprintf(measure, measure_len,
                 "the attention the [CLS] token pays to the token in the last layer, averaged over "
                 "its %d heads (the model classifies from [CLS])",
                 H);
        break;
    }
}

/* --out FILE: a regular file (or a new one) is replaced atomically, through
 * a symbolic link the file it names; anything else (a device, a FIFO,
 * /dev/stdout) is written as it is, never replaced by a file. */
static int write_out_file(const ac_strbuf *buf, const char *path)
{
    ac_err err = {{0}};
    struct stat link, target;
    const int exists = lstat(path, &link) == 0, resolves = stat(path, &target) == 0;
    if (resolves && S_ISDIR(target.st_mode))
        return cli_error("inspect: --out %s is a directory", path);
    if (!exists || S_ISREG(link.st_mode)) {
        if (ac_write_file_atomic(path, buf->data, buf->len, &err) != 0)
            return cli_error("inspect: %s", err.msg);
        return CLI_EXIT_OK;
    }
    if (S_ISLNK(link.st_mode) && resolves && S_ISREG(target.st_mode)) {
        char *real = realpath(path, NULL);
        if (!real)
            return cli_error("inspect: %s: %s", path, strerror(errno));
        int rc = ac_write_file_atomic(real, buf->data, buf->len, &err);
        free(real);
        return rc == 0 ? CLI_EXIT_OK : cli_error("inspect: %s", err.msg);
    }
    FILE *f = fopen(path, "w");
    if (!f)
        return cli_error("inspect: %s: cannot open: %s", path, strerror(errno));
    int ok = fwrite(buf->data, 1, buf->len, f) == buf->len;
    ok = (fclose(f) == 0) && ok;
    return ok ? CLI_EXIT_OK : cli_error("inspect: %s: cannot write: %s", path, strerror(errno));
}

static int write_output(const ac_strbuf *buf, const char *out_path)
{
    if (buf->failed)
        return cli_error("inspect: out of memory while rendering");
    if (out_path)
        return write_out_file(buf, out_path);
    if (fwrite(buf->data, 1, buf->len, stdout) != buf->len || fflush(stdout) != 0)
        return cli_error("inspect: cannot write to standard output: %s", strerror(errno));
    return CLI_EXIT_OK;
}

static render_colour_mode terminal_colour(void)
{
    const char *no_color = getenv("NO_COLOR");
    if (no_color && *no_color)
        return RENDER_COLOUR_NONE;
    if (!isatty(STDOUT_FILENO))
        return RENDER_COLOUR_NONE;
    const char *term = getenv("TERM");
    if (term && strcmp(term, "dumb") == 0)
        return RENDER_COLOUR_NONE;
    const char *colorterm = getenv("COLORTERM");
    if (colorterm && (strstr(colorterm, "truecolor") || strstr(colorterm, "24bit")))
        return RENDER_COLOUR_TRUE;
    return RENDER_COLOUR_256;
}

static int terminal_width(void)
{
    struct winsize ws;
    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 80;
}

typedef struct {
    const char *model_dir, *out_path;
    inspect_format format;
    int format_given;
    long layer, head; /* -1: all */
    const char *layer_arg, *head_arg;
    ac_attr_method attribution;
    long steps;
    char *text;       /* owned */
    size_t text_len;
} inspect_options;

/* Returns -1 to go on, else the exit status. */
static int parse_options(inspect_options *o, int argc, char **argv)
{
    enum { OPT_MODEL = 256, OPT_FORMAT, OPT_LAYER, OPT_HEAD, OPT_OUT, OPT_THREADS, OPT_ATTRIBUTION,
           OPT_STEPS };
    static const struct option longopts[] = {
        {"model", required_argument, NULL, OPT_MODEL},   {"format", required_argument, NULL, OPT_FORMAT},
        {"layer", required_argument, NULL, OPT_LAYER},   {"head", required_argument, NULL, OPT_HEAD},
        {"out", required_argument, NULL, OPT_OUT},       {"threads", required_argument, NULL, OPT_THREADS},
        {"attribution", required_argument, NULL, OPT_ATTRIBUTION},
        {"steps", required_argument, NULL, OPT_STEPS},
        {"help", no_argument, NULL, 'h'},                {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    o->layer = o->head = -1;
    o->attribution = AC_ATTR_IG;
    o->steps = AC_IG_DEFAULT_STEPS;
    long threads = 0;
    optind = 0; /* full reset: the parser may have run before in this process */
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: o->model_dir = optarg; break;
        case OPT_OUT: o->out_path = optarg; break;
        case OPT_FORMAT:
            if (parse_format(optarg, &o->format) != 0) {
                char names[64];
                return cli_usage_error("inspect", "--format: unknown format '%s' (%s)", optarg,
                                       ac_names_list(&FORMATS, 0, names, sizeof names));
            }
            o->format_given = 1;
            break;
        case OPT_LAYER:
            if (cli_parse_int(optarg, LONG_MIN, LONG_MAX, &o->layer) != 0)
                return cli_usage_error("inspect", "--layer: '%s' is not an integer", optarg);
            o->layer_arg = optarg;
            break;
        case OPT_HEAD:
            if (cli_parse_int(optarg, LONG_MIN, LONG_MAX, &o->head) != 0)
                return cli_usage_error("inspect", "--head: '%s' is not an integer", optarg);
            o->head_arg = optarg;
            break;
        case OPT_THREADS:
            if (cli_parse_int(optarg, 1, 4096, &threads) != 0)
                return cli_usage_error("inspect", "--threads: '%s' is not a number from 1 to 4096", optarg);
            break;
        case OPT_ATTRIBUTION:
            if (ac_attr_method_parse(optarg, &o->attribution) != 0) {
                char names[64];
                return cli_usage_error("inspect", "--attribution: unknown method '%s' (%s)", optarg,
                                       ac_names_list(&ac_attr_method_names, 0, names, sizeof names));
            }
            break;
        case OPT_STEPS:
            if (cli_parse_int(optarg, 1, INSPECT_MAX_STEPS, &o->steps) != 0)
                return cli_usage_error("inspect", "--steps: '%s' is not a number from 1 to %d", optarg,
                                       INSPECT_MAX_STEPS);
            break;
        case 'h':
            fputs(usage_text, stdout);
            return CLI_EXIT_OK;
        case ':':
            return cli_usage_error("inspect", "option '%s' needs a value", argv[optind - 1]);
        default:
            return cli_usage_error("inspect", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (!o->model_dir)
        return cli_usage_error("inspect", "--model DIR is required");
    if (!o->format_given && o->out_path && format_from_file_name(o->out_path, &o->format) != 0) {
        const char *slash = strrchr(o->out_path, '/'), *dot = strrchr(o->out_path, '.');
        if (dot && (!slash || dot > slash)) /* a name without an ending stays text */
            return cli_usage_error("inspect",
                                   "--out %s: no format ends in '%s' (.json, .svg, .html, "
                                   ".txt); name one with --format",
                                   o->out_path, dot);
    }
    if (threads > 0)
        cli_set_threads((int)threads);

    int n_words = argc - optind;
    if (n_words == 0 || (n_words == 1 && strcmp(argv[optind], "-") == 0)) {
        if (isatty(STDIN_FILENO))
            fputs("attnctl inspect: reading the review from standard input (end with Ctrl-D)\n", stderr);
        int rc = read_stdin(&o->text, &o->text_len);
        return rc == 0 ? -1 : rc;
    }
    size_t total = 1;
    for (int i = optind; i < argc; i++) {
        if (strcmp(argv[i], "-") == 0)
            return cli_usage_error("inspect", "'-' (read standard input) cannot be combined with TEXT");
        total += strlen(argv[i]) + 1;
    }
    o->text = malloc(total);
    if (!o->text)
        return cli_error("inspect: out of memory");
    size_t pos = 0;
    for (int i = optind; i < argc; i++) {
        if (i > optind)
            o->text[pos++] = ' ';
        size_t len = strlen(argv[i]);
        memcpy(o->text + pos, argv[i], len);
        pos += len;
    }
    o->text[pos] = '\0';
    o->text_len = pos;
    return -1;
}

static int check_range(const char *what, const char *arg, long value, int count, const char *noun)
{
    if (value >= 0 && value < count)
        return 0;
    return cli_usage_error("inspect", "%s %s is out of range: the model has %d %s (valid: 0..%d)", what, arg,
                           count, noun, count - 1);
}

static int run_inspect(inspect_options *o)
{
    if (is_blank(o->text, o->text_len))
        return cli_error("inspect: the text is empty");

    ac_model_dir md;
    ac_err err = {{0}};
    memset(&md, 0, sizeof md);
    if (ac_model_dir_load(&md, o->model_dir, &err) != 0)
        return cli_error("inspect: %s", err.msg);
    ac_model *m = &md.model;
    int L = m->cfg.n_layers, H = m->cfg.n_heads;
    int rc = CLI_EXIT_OK;
    inspect_data d;
    memset(&d, 0, sizeof d);
    ac_strbuf buf;
    ac_strbuf_init(&buf);

    if (o->layer_arg && (rc = check_range("--layer", o->layer_arg, o->layer, L, L == 1 ? "layer" : "layers")))
        goto done;
    if (o->head_arg && (rc = check_range("--head", o->head_arg, o->head, H, H == 1 ? "head" : "heads")))
        goto done;
    const int classifier = m->cfg.objective == AC_OBJECTIVE_CLASSIFICATION;
    if (classifier && (md.config.n_labels != m->cfg.n_classes || !md.config.labels)) {
        rc = cli_error("inspect: %s: the labels do not match the number of classes", o->model_dir);
        goto done;
    }
    if ((rc = encode_review(&d, &md, o->text, o->text_len, o->format != FORMAT_JSON)) != 0)
        goto done;

    int n = d.r.n;
    if (ac_model_alloc_activations(m, 1, n, &err) != 0) {
        rc = cli_error("inspect: %s", err.msg);
        goto done;
    }
    int32_t length = n;
    m->keep_attention = 1;
    if (classifier)
        ac_model_forward(m, d.r.ids, &length, NULL, 1, n, 0, 0);
    else /* a pretrained encoder (masked LM): its attention, no prediction */
        ac_model_encoder_forward(m, d.r.ids, &length, 1, n, 0, 0);

    d.attention = malloc((size_t)L * H * n * n * sizeof *d.attention);
    d.token_weight = calloc((size_t)n, sizeof *d.token_weight);
    if (!d.attention || !d.token_weight) {
        rc = cli_error("inspect: out of memory");
        goto done;
    }
    /* With B = 1 and T = n, probs[l] is already [H][n][n] over the real tokens. */
    for (int l = 0; l < L; l++)
        memcpy(d.attention + (size_t)l * H * n * n, m->act.probs[l], (size_t)H * n * n * sizeof *d.attention);
    char measure[256];
    pooled_weights(&d, m, measure, sizeof measure);

    const int C = classifier ? m->cfg.n_classes : 0; /* a pretrained encoder: no classes */
    for (int c = 0; c < C; c++)
        if (!isfinite(m->act.probs_out[c])) {
            rc = cli_error("%s: " AC_OUTPUT_NOT_FINITE, o->model_dir);
            goto done;
        }
    int predicted = 0;
    for (int c = 1; c < C; c++)
        if (m->act.probs_out[c] > m->act.probs_out[predicted])
            predicted = c;
    /* The attributions run the model again: keep this forward's numbers. */
    d.probs = malloc((size_t)(C ? C : 1) * sizeof *d.probs);
    d.logits = malloc((size_t)(C ? C : 1) * sizeof *d.logits);
    if (!d.probs || !d.logits) {
        rc = cli_error("inspect: out of memory");
        goto done;
    }
    memcpy(d.probs, m->act.probs_out, (size_t)C * sizeof *d.probs);
    for (int c = 0; c < C; c++)
        d.logits[c] = m->act.logits[c];
    double delta = 0.0;
    /* Attributions explain a class's logit: a pretrained encoder has none. */
    const ac_attr_method attribution = classifier ? o->attribution : AC_ATTR_NONE;
    if (attribution != AC_ATTR_NONE) {
        int max_steps = o->steps > AC_IG_MAX_STEPS ? (int)o->steps : AC_IG_MAX_STEPS;
        if (ac_attribution_setup(&d.attr, m, attribution, n, (int)o->steps, max_steps, &err) != 0 ||
            ac_attribution_run(&d.attr, d.r.ids, n, &err) != 0) {
            rc = cli_error("inspect: %s", err.msg);
            goto done;
        }
        delta = ac_attribution_delta(&d.attr, predicted);
    }

    inspect_view v = {
        .n = n,
        .tokens = d.r.tokens,
        .ids = d.r.ids,
        .unknown = d.r.unknown,
        .full_len = d.r.full_len,
        .n_layers = L,
        .n_heads = H,
        .layer_first = o->layer >= 0 ? (int)o->layer : 0,
        .layer_count = o->layer >= 0 ? 1 : L,
        .head_first = o->head >= 0 ? (int)o->head : 0,
        .head_count = o->head >= 0 ? 1 : H,
        .attention = d.attention,
        .n_classes = C,
        .labels = classifier ? md.config.labels : NULL,
        .probs = classifier ? d.probs : NULL,
        .predicted = predicted,
        .pooling = m->cfg.pooling,
        .token_weight = d.token_weight,
        .weight_measure = measure,
        .attribution = attribution,
        /* with attributions, the logits of the same batch as the baseline's,
         * so that the scores add up to their difference */
        .logits = attribution != AC_ATTR_NONE ? d.attr.logits : d.logits,
        .baseline_logits = d.attr.baseline_logits,
        .attr_scores = d.attr.scores,
        .attr_steps = d.attr.steps,
        .attr_delta = delta,
        .attr_baseline = m->cfg.pooling == AC_POOL_CLS ? INSPECT_BASELINE_CLS : INSPECT_BASELINE,
    };
    switch (o->format) {
    case FORMAT_JSON: render_json(&buf, &v); break;
    case FORMAT_SVG: render_svg(&buf, &v); break;
    case FORMAT_HTML: render_html(&buf, &v); break;
    case FORMAT_TEXT:
    default:
        if (o->out_path)
            render_text(&buf, &v, RENDER_COLOUR_NONE, 80);
        else
            render_text(&buf, &v, terminal_colour(), terminal_width());
        break;
    }
    rc = write_output(&buf, o->out_path);

done:
    ac_strbuf_free(&buf);
    inspect_data_free(&d);
    ac_model_dir_free(&md);
    return rc;
}

int cmd_inspect(int argc, char **argv)
{
    inspect_options o;
    int rc = parse_options(&o, argc, argv);
    if (rc < 0) {
        rc = run_inspect(&o);
    }
    free(o.text);
    return rc;
}
