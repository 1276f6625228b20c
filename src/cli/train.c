/* attnctl train: options -> configuration -> data -> ac_train, with progress
 * on stderr and a clean, resumable stop on SIGINT/SIGTERM. */
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnctl/io.h"
#include "attnctl/model.h"
#include "attnctl/optim.h"
#include "attnctl/text.h"
#include "attnctl/train.h"
#include "cli.h"
#include "progress.h"

/* The one piece of global state: a signal handler can only reach a global.
 * It holds the number of the signal that asked training to stop (0: none). */
static volatile sig_atomic_t stop_signal = 0;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
}

enum {
    OPT_CONFIG = 256, OPT_OUT, OPT_EPOCHS, OPT_BATCH_SIZE, OPT_LR, OPT_SCHEDULE, OPT_WARMUP,
    OPT_WEIGHT_DECAY, OPT_CLIP, OPT_DROPOUT, OPT_MAX_LEN, OPT_TRUNCATION, OPT_VOCAB_SIZE,
    OPT_MIN_COUNT, OPT_POOLING, OPT_LAYERS, OPT_D_MODEL, OPT_HEADS, OPT_FF, OPT_VAL_SPLIT,
    OPT_VAL_FILE, OPT_PATIENCE, OPT_EVAL_EVERY, OPT_SEED, OPT_THREADS, OPT_TEXT_COLUMN,
    OPT_LABEL_COLUMN, OPT_MAX_STEPS, OPT_RESUME, OPT_QUIET, OPT_HELP, OPT_POSITIONS, OPT_NGRAMS,
    OPT_NGRAM_BUCKETS, OPT_CROP, OPT_CROP_MIN, OPT_CROP_MAX, OPT_LABEL_SMOOTHING, OPT_TOKEN_DROPOUT, OPT_EMA, OPT_END
};

static const struct option LONG_OPTIONS[] = {
    {"config", required_argument, NULL, OPT_CONFIG},
    {"out", required_argument, NULL, OPT_OUT},
    {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"batch-size", required_argument, NULL, OPT_BATCH_SIZE},
    {"lr", required_argument, NULL, OPT_LR},
    {"schedule", required_argument, NULL, OPT_SCHEDULE},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"weight-decay", required_argument, NULL, OPT_WEIGHT_DECAY},
    {"clip", required_argument, NULL, OPT_CLIP},
    {"dropout", required_argument, NULL, OPT_DROPOUT},
    {"max-len", required_argument, NULL, OPT_MAX_LEN},
    {"truncation", required_argument, NULL, OPT_TRUNCATION},
    {"vocab-size", required_argument, NULL, OPT_VOCAB_SIZE},
    {"min-count", required_argument, NULL, OPT_MIN_COUNT},
    {"pooling", required_argument, NULL, OPT_POOLING},
    {"layers", required_argument, NULL, OPT_LAYERS},
    {"d-model", required_argument, NULL, OPT_D_MODEL},
    {"heads", required_argument, NULL, OPT_HEADS},
    {"ff", required_argument, NULL, OPT_FF},
    {"val-split", required_argument, NULL, OPT_VAL_SPLIT},
    {"val-file", required_argument, NULL, OPT_VAL_FILE},
    {"patience", required_argument, NULL, OPT_PATIENCE},
    {"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
    {"seed", required_argument, NULL, OPT_SEED},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"text-column", required_argument, NULL, OPT_TEXT_COLUMN},
    {"label-column", required_argument, NULL, OPT_LABEL_COLUMN},
    {"max-steps", required_argument, NULL, OPT_MAX_STEPS},
    {"resume", required_argument, NULL, OPT_RESUME},
    {"positions", required_argument, NULL, OPT_POSITIONS},
    {"ngrams", required_argument, NULL, OPT_NGRAMS},
    {"ngram-buckets", required_argument, NULL, OPT_NGRAM_BUCKETS},
    {"crop", required_argument, NULL, OPT_CROP},
    {"crop-min", required_argument, NULL, OPT_CROP_MIN},
    {"crop-max", required_argument, NULL, OPT_CROP_MAX},
    {"label-smoothing", required_argument, NULL, OPT_LABEL_SMOOTHING},
    {"token-dropout", required_argument, NULL, OPT_TOKEN_DROPOUT},
    {"ema", required_argument, NULL, OPT_EMA},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* One parsed option value; `set` says it was given. */
typedef struct {
    int set;
    long i;
    double d;
    uint64_t u;
    const char *s;
} opt_value;

typedef struct {
    opt_value v[OPT_END];
    const char *train_path; /* positional */
} train_args;

static void print_help(void)
{
    ac_config d;
    ac_config_defaults(&d);
    const ac_train_config *t = &d.training;
    printf("usage: attnctl train [OPTIONS] TRAIN.csv[.gz] --out DIR\n"
           "       attnctl train --resume DIR [--max-steps N] [--threads N] [--quiet]\n"
           "\n"
           "Builds a vocabulary from the training rows, trains the classifier and keeps the\n"
           "model with the best validation accuracy in DIR (config.json, vocab.txt,\n"
           "model.safetensors). DIR also gets metrics.jsonl (one line per evaluation),\n"
           "training.svg (learning curves) and checkpoint/ (to resume). The CSV needs a header;\n"
           "text and label columns are found by name (review/text/sentence,\n"
           "sentiment/label/polarity) unless given.\n"
           "\n"
           "Files:\n"
           "  -o, --out DIR          output directory (must not hold a model already)\n"
           "  -c, --config FILE      preset to start from (e.g. models/seed.json); the options\n"
           "                         below override single fields\n"
           "      --val-file FILE    validation CSV (default: a stratified --val-split share\n"
           "                         of the training file)\n"
           "      --text-column NAME, --label-column NAME\n"
           "                         columns to read\n"
           "      --resume DIR       continue an interrupted run from DIR/checkpoint with its\n"
           "                         settings and data files (TRAIN and --val-file may be given\n"
           "                         if they moved; they must be the same data)\n"
           "\n"
           "Training (defaults in brackets):\n"
           "      --epochs N         passes over the training rows [%d]\n"
           "      --batch-size N     reviews per step [%d]\n"
           "      --lr X             peak learning rate of AdamW [%g]\n"
           "      --schedule NAME    cosine, linear or constant decay after warmup [%s]\n"
           "      --warmup X         warmup: a fraction of all steps when X < 1, else a step\n"
           "                         count [%g]\n"
           "      --weight-decay X   decoupled weight decay of matrices [%g]\n"
           "      --clip X           global gradient-norm clip, 0 = off [%g]\n"
           "      --val-split X      share of the training file held out, 0 <= X < 1 [%g]\n"
           "      --eval-every N     steps between evaluations, 0 = once an epoch [%ld]\n"
           "      --patience N       evaluations without a better validation accuracy before\n"
           "                         stopping, 0 = never [%d]\n"
           "      --crop X           share of the reviews cut each epoch to a random span of\n"
           "                         --crop-min..--crop-max tokens, so short texts are learnt\n"
           "                         too [%g]\n"
           "      --crop-min N, --crop-max N\n"
           "                         span lengths of the crops [%d, %d]\n"
           "      --label-smoothing X  target (1-X) on the label and X spread over all classes [%g]\n"
           "      --token-dropout X  share of training tokens replaced by <unk> [%g]\n"
           "      --ema X            evaluate and save a moving average of the weights with\n"
           "                         decay X per step (e.g. 0.998); 0 = the weights themselves [%g]\n"
           "      --max-steps N      stop after N steps in all, 0 = no limit; the schedule still\n"
           "                         spans all epochs, so the run can be resumed and continued\n"
           "      --seed N           seed of every random choice; the same seed gives the same\n"
           "                         model bitwise, whatever --threads [%llu]\n"
           "      --threads N        threads to use [all cores]\n"
           "\n"
           "Model and tokenizer:\n"
           "      --layers N         encoder layers [%d]\n"
           "      --d-model N        model width [%d]\n"
           "      --heads N          attention heads, dividing --d-model [%d]\n"
           "      --ff N             feed-forward width [%d]\n"
           "      --dropout X        dropout probability, 0 <= X < 1 [%g]\n"
           "      --pooling NAME     max, mean or cls [%s]\n"
           "      --positions NAME   learned, sinusoidal (the course's fixed table) or none [%s]\n"
           "      --ngrams N         1: words only; 2: + hashed word bigrams; 3: + trigrams [%d]\n"
           "      --ngram-buckets N  rows of the hashed n-gram table [%d]\n"
           "      --max-len N        tokens per review, longer ones are truncated [%d]\n"
           "      --truncation NAME  head, tail or head+tail: which tokens a long review keeps [%s]\n"
           "      --vocab-size N     vocabulary size including <pad>, <unk> (and <cls>) [%d]\n"
           "      --min-count N      minimum count of a vocabulary token [%lld]\n"
           "\n"
           "Output:\n"
           "  -q, --quiet            print nothing but errors\n"
           "  -h, --help             this text\n"
           "\n"
           "Progress goes to stderr: a bar on a terminal, one line per evaluation otherwise.\n"
           "Ctrl-C (SIGINT) or SIGTERM finishes the current step, saves a checkpoint and exits\n"
           "with 130 or 143; `attnctl train --resume DIR` then continues exactly where it was.\n"
           "Exit status: 0 done, 1 error, 2 usage error, 130/143 interrupted.\n",
           t->epochs, t->batch_size, (double)t->optim.lr, ac_schedule_name(t->optim.schedule),
           t->warmup_frac, (double)t->optim.weight_decay, (double)t->optim.clip_norm,
           t->val_split, t->eval_every, t->patience, t->crop_frac, t->crop_min, t->crop_max,
           (double)t->label_smoothing, (double)t->token_dropout, (double)t->ema,
           (unsigned long long)t->seed,
           d.model.n_layers, d.model.d_model, d.model.n_heads, d.model.d_ff,
           (double)d.model.dropout, ac_pooling_name(d.model.pooling),
           ac_positions_name(d.model.positions), d.model.ngram_order, d.model.ngram_buckets,
           d.model.max_len,
           ac_truncation_name(d.tokenizer.truncation), t->vocab_max, (long long)t->min_count);
    ac_config_free(&d);
}

static const char *option_name(int id)
{
    for (const struct option *o = LONG_OPTIONS; o->name; o++)
        if (o->val == id)
            return o->name;
    return "?";
}

static int bad_value(int id, const char *arg, const char *expected)
{
    return cli_usage_error("train", "--%s: invalid value '%s' (expected %s)", option_name(id), arg,
                           expected);
}

/* Validates one option's value into a->v[id]. Returns 0 or a usage exit status. */
static int parse_value(train_args *a, int id, const char *arg)
{
    opt_value *v = &a->v[id];
    long i;
    double d;
    int e;
    v->set = 1;
    v->s = arg;
    switch (id) {
    case OPT_EPOCHS:
        if (cli_parse_int(arg, 1, 1000000, &i))
            return bad_value(id, arg, "an integer from 1 to 1000000");
        v->i = i;
        break;
    case OPT_BATCH_SIZE:
        if (cli_parse_int(arg, 1, 65536, &i))
            return bad_value(id, arg, "an integer from 1 to 65536");
        v->i = i;
        break;
    case OPT_MAX_LEN:
        if (cli_parse_int(arg, 1, 65536, &i))
            return bad_value(id, arg, "an integer from 1 to 65536");
        v->i = i;
        break;
    case OPT_VOCAB_SIZE:
        if (cli_parse_int(arg, 3, 10000000, &i))
            return bad_value(id, arg, "an integer from 3 to 10000000");
        v->i = i;
        break;
    case OPT_MIN_COUNT:
        if (cli_parse_int(arg, 1, 1000000000000L, &i))
            return bad_value(id, arg, "an integer from 1 to 10^12");
        v->i = i;
        break;
    case OPT_LAYERS:
        if (cli_parse_int(arg, 1, AC_MAX_LAYERS, &i))
            return cli_usage_error("train", "--layers: invalid value '%s' (expected 1 to %d)", arg,
                                   AC_MAX_LAYERS);
        v->i = i;
        break;
    case OPT_D_MODEL:
    case OPT_HEADS:
    case OPT_FF:
        if (cli_parse_int(arg, 1, 65536, &i))
            return bad_value(id, arg, "an integer from 1 to 65536");
        v->i = i;
        break;
    case OPT_PATIENCE:
        if (cli_parse_int(arg, 0, 1000000, &i))
            return bad_value(id, arg, "an integer from 0 to 1000000");
        v->i = i;
        break;
    case OPT_EVAL_EVERY:
        if (cli_parse_int(arg, 0, 1000000000000L, &i))
            return bad_value(id, arg, "an integer from 0 to 10^12");
        v->i = i;
        break;
    case OPT_MAX_STEPS:
        if (cli_parse_int(arg, 0, LONG_MAX, &i))
            return bad_value(id, arg, "an integer >= 0");
        v->i = i;
        break;
    case OPT_THREADS:
        if (cli_parse_int(arg, 1, 4096, &i))
            return bad_value(id, arg, "an integer from 1 to 4096");
        v->i = i;
        break;
    case OPT_SEED:
        if (cli_parse_u64(arg, &v->u))
            return bad_value(id, arg, "an integer from 0 to 18446744073709551615");
        break;
    case OPT_LR:
        if (cli_parse_double(arg, 0, 10, &d) || !(d > 0))
            return bad_value(id, arg, "a number with 0 < X <= 10");
        v->d = d;
        break;
    case OPT_WARMUP:
        if (cli_parse_double(arg, 0, 1e15, &d) || (d >= 1 && d != floor(d)))
            return bad_value(id, arg, "a fraction 0 <= X < 1, or a whole number of steps");
        v->d = d;
        break;
    case OPT_WEIGHT_DECAY:
        if (cli_parse_double(arg, 0, 10, &d))
            return bad_value(id, arg, "a number from 0 to 10");
        v->d = d;
        break;
    case OPT_CLIP:
        if (cli_parse_double(arg, 0, 1e6, &d))
            return bad_value(id, arg, "a number from 0 (off) to 10^6");
        v->d = d;
        break;
    case OPT_POSITIONS: {
        ac_positions p;
        if (ac_positions_parse(arg, &p))
            return bad_value(id, arg, "learned, sinusoidal or none");
        v->i = p;
        break;
    }
    case OPT_NGRAMS:
        if (cli_parse_int(arg, 1, 3, &i))
            return bad_value(id, arg, "1, 2 or 3");
        v->i = i;
        break;
    case OPT_NGRAM_BUCKETS:
        if (cli_parse_int(arg, 1, 16777216, &i))
            return bad_value(id, arg, "an integer from 1 to 16777216");
        v->i = i;
        break;
    case OPT_CROP_MIN:
    case OPT_CROP_MAX:
        if (cli_parse_int(arg, 1, 65536, &i))
            return bad_value(id, arg, "an integer from 1 to 65536");
        v->i = i;
        break;
    case OPT_CROP:
        if (cli_parse_double(arg, 0, 1, &d))
            return bad_value(id, arg, "a number from 0 to 1");
        v->d = d;
        break;
    case OPT_DROPOUT:
    case OPT_LABEL_SMOOTHING:
    case OPT_TOKEN_DROPOUT:
    case OPT_EMA:
    case OPT_VAL_SPLIT:
        if (cli_parse_double(arg, 0, 1, &d) || d >= 1)
            return bad_value(id, arg, "a number with 0 <= X < 1");
        v->d = d;
        break;
    case OPT_SCHEDULE: {
        ac_schedule_kind k;
        if (ac_schedule_parse(arg, &k))
            return bad_value(id, arg, "cosine, linear or constant");
        v->i = k;
        break;
    }
    case OPT_POOLING: {
        ac_pooling p;
        if (ac_pooling_parse(arg, &p))
            return bad_value(id, arg, "max, mean or cls");
        v->i = p;
        break;
    }
    case OPT_TRUNCATION: {
        ac_truncation t;
        if (ac_truncation_parse(arg, &t))
            return bad_value(id, arg, "head, tail or head+tail");
        v->i = t;
        break;
    }
    case OPT_CONFIG:
    case OPT_OUT:
    case OPT_VAL_FILE:
    case OPT_TEXT_COLUMN:
    case OPT_LABEL_COLUMN:
    case OPT_RESUME:
        e = arg[0] == '\0';
        if (e)
            return cli_usage_error("train", "--%s: empty value", option_name(id));
        break;
    default:
        break;
    }
    return 0;
}

static int parse_args(train_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    optind = 0; /* GNU: full reinitialisation */
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":o:c:qh", LONG_OPTIONS, NULL)) != -1) {
        int rc;
        switch (c) {
        case 'o': c = OPT_OUT; break;
        case 'c': c = OPT_CONFIG; break;
        case 'q': c = OPT_QUIET; break;
        case 'h': c = OPT_HELP; break;
        case ':':
            return cli_usage_error("train", "option '%s' needs a value", argv[optind - 1]);
        case '?':
            if (optopt)
                return cli_usage_error("train", "unknown option '-%c'", optopt);
            return cli_usage_error("train", "unknown option '%s'", argv[optind - 1]);
        default: break;
        }
        if (c == OPT_QUIET || c == OPT_HELP) {
            a->v[c].set = 1;
            continue;
        }
        if ((rc = parse_value(a, c, optarg)) != 0)
            return rc;
    }
    if (a->v[OPT_HELP].set)
        return 0;
    int n_pos = argc - optind;
    if (n_pos > 1)
        return cli_usage_error("train", "one training file expected, got %d ('%s', '%s', ...)",
                               n_pos, argv[optind], argv[optind + 1]);
    if (n_pos == 1)
        a->train_path = argv[optind];
    if (a->v[OPT_RESUME].set) {
        /* A resumed run keeps its settings: anything else would break the
         * promise that it continues exactly as the original run would have. */
        static const int allowed[] = {OPT_RESUME, OPT_OUT, OPT_MAX_STEPS, OPT_THREADS, OPT_QUIET,
                                      OPT_VAL_FILE, OPT_HELP};
        for (int id = OPT_CONFIG; id < OPT_END; id++) {
            int ok = 0;
            for (size_t k = 0; k < sizeof allowed / sizeof allowed[0]; k++)
                ok |= allowed[k] == id;
            if (a->v[id].set && !ok)
                return cli_usage_error("train",
                                       "--%s cannot be combined with --resume (a resumed run "
                                       "keeps the settings of its checkpoint)",
                                       option_name(id));
        }
        if (a->v[OPT_OUT].set && strcmp(a->v[OPT_OUT].s, a->v[OPT_RESUME].s) != 0)
            return cli_usage_error("train", "--out and --resume name different directories");
        return 0;
    }
    if (!a->train_path)
        return cli_usage_error("train", "missing training file (TRAIN.csv[.gz])");
    if (!a->v[OPT_OUT].set)
        return cli_usage_error("train", "missing --out DIR");
    return 0;
}

/* Applies the single-field overrides on top of the preset. */
static void apply_overrides(ac_config *c, const train_args *a)
{
    const opt_value *v = a->v;
    ac_train_config *t = &c->training;
    if (v[OPT_EPOCHS].set) t->epochs = (int)v[OPT_EPOCHS].i;
    if (v[OPT_BATCH_SIZE].set) t->batch_size = (int)v[OPT_BATCH_SIZE].i;
    if (v[OPT_LR].set) t->optim.lr = (float)v[OPT_LR].d;
    if (v[OPT_SCHEDULE].set) t->optim.schedule = (ac_schedule_kind)v[OPT_SCHEDULE].i;
    if (v[OPT_WARMUP].set) {
        if (v[OPT_WARMUP].d < 1) {
            t->warmup_frac = v[OPT_WARMUP].d;
            t->optim.warmup_steps = -1;
        } else {
            t->optim.warmup_steps = (long)v[OPT_WARMUP].d;
        }
    }
    if (v[OPT_WEIGHT_DECAY].set) t->optim.weight_decay = (float)v[OPT_WEIGHT_DECAY].d;
    if (v[OPT_CLIP].set) t->optim.clip_norm = (float)v[OPT_CLIP].d;
    if (v[OPT_VAL_SPLIT].set) t->val_split = v[OPT_VAL_SPLIT].d;
    if (v[OPT_PATIENCE].set) t->patience = (int)v[OPT_PATIENCE].i;
    if (v[OPT_EVAL_EVERY].set) t->eval_every = v[OPT_EVAL_EVERY].i;
    if (v[OPT_SEED].set) t->seed = v[OPT_SEED].u;
    if (v[OPT_VOCAB_SIZE].set) {
        t->vocab_max = (int32_t)v[OPT_VOCAB_SIZE].i;
        c->model.vocab_size = (int)v[OPT_VOCAB_SIZE].i;
    }
    if (v[OPT_MIN_COUNT].set) t->min_count = v[OPT_MIN_COUNT].i;
    if (v[OPT_DROPOUT].set) c->model.dropout = (float)v[OPT_DROPOUT].d;
    if (v[OPT_POSITIONS].set) c->model.positions = (ac_positions)v[OPT_POSITIONS].i;
    if (v[OPT_NGRAMS].set) c->model.ngram_order = (int)v[OPT_NGRAMS].i;
    if (v[OPT_NGRAM_BUCKETS].set) c->model.ngram_buckets = (int)v[OPT_NGRAM_BUCKETS].i;
    if (v[OPT_CROP].set) c->training.crop_frac = v[OPT_CROP].d;
    if (v[OPT_CROP_MIN].set) c->training.crop_min = (int)v[OPT_CROP_MIN].i;
    if (v[OPT_CROP_MAX].set) c->training.crop_max = (int)v[OPT_CROP_MAX].i;
    if (v[OPT_LABEL_SMOOTHING].set) c->training.label_smoothing = (float)v[OPT_LABEL_SMOOTHING].d;
    if (v[OPT_TOKEN_DROPOUT].set) c->training.token_dropout = (float)v[OPT_TOKEN_DROPOUT].d;
    if (v[OPT_EMA].set) c->training.ema = (float)v[OPT_EMA].d;
    if (v[OPT_MAX_LEN].set) c->model.max_len = (int)v[OPT_MAX_LEN].i;
    if (v[OPT_POOLING].set) c->model.pooling = (ac_pooling)v[OPT_POOLING].i;
    if (v[OPT_LAYERS].set) c->model.n_layers = (int)v[OPT_LAYERS].i;
    if (v[OPT_D_MODEL].set) c->model.d_model = (int)v[OPT_D_MODEL].i;
    if (v[OPT_HEADS].set) c->model.n_heads = (int)v[OPT_HEADS].i;
    if (v[OPT_FF].set) c->model.d_ff = (int)v[OPT_FF].i;
    if (v[OPT_TRUNCATION].set) c->tokenizer.truncation = (ac_truncation)v[OPT_TRUNCATION].i;
}

/* Model settings are checked before any data is read; the vocabulary size
 * and the class count are only known later, so stand-ins are used. */
static int validate_config(const ac_config *c)
{
    ac_model_config m = c->model;
    m.vocab_size = c->training.vocab_max;
    if (m.n_classes < 2)
        m.n_classes = 2;
    ac_err err;
    if (ac_model_config_validate(&m, &err))
        return cli_usage_error("train", "%s", err.msg);
    if (c->training.vocab_max < 3 + (c->model.pooling == AC_POOL_CLS))
        return cli_usage_error("train", "--vocab-size must leave room for the special tokens");
    /* Everything config.json would reject (the run must be resumable). */
    ac_config probe = *c; /* shallow: only the stand-ins below differ */
    char *stand_in_labels[] = {(char *)"class0", (char *)"class1"};
    probe.labels = stand_in_labels;
    probe.n_labels = 2;
    probe.model = m;
    char *json = ac_config_to_json(&probe);
    if (!json)
        return cli_error("out of memory");
    ac_config back;
    ac_config_defaults(&back);
    int rc = ac_config_parse(&back, json, strlen(json), "configuration", 0, &err);
    ac_config_free(&back);
    free(json);
    if (rc)
        return cli_usage_error("train", "%s", err.msg);
    return 0;
}

static int file_exists_in(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p)
        return 0;
    snprintf(p, n, "%s/%s", dir, name);
    int exists = access(p, F_OK) == 0;
    free(p);
    return exists;
}

/* Prints s quoted for a POSIX shell when it needs quoting. */
static void print_shell_word(FILE *f, const char *s)
{
    int plain = *s != '\0';
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+,:=@%", *p))
            plain = 0;
    if (plain) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (const char *p = s; *p; p++) {
        if (*p == '\'')
            fputs("'\\''", f);
        else
            fputc(*p, f);
    }
    fputc('\'', f);
}

static void warn_about_data(const ac_rawdata *d, const char *path, int quiet)
{
    if (quiet)
        return;
    if (d->n_empty_skipped > 0)
        fprintf(stderr, "attnctl: warning: %s: skipped %lld rows with empty text\n", path,
                (long long)d->n_empty_skipped);
    if (d->n_invalid_utf8 > 0)
        fprintf(stderr, "attnctl: warning: %s: %lld rows held invalid UTF-8 (read as U+FFFD)\n",
                path, (long long)d->n_invalid_utf8);
}

typedef struct {
    struct sigaction old_int, old_term;
} saved_signals;

static void install_stop_handlers(saved_signals *saved)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    /* A second Ctrl-C kills at once (saves are atomic, so nothing breaks). */
    sa.sa_flags = SA_RESETHAND;
    stop_signal = 0;
    sigaction(SIGINT, &sa, &saved->old_int);
    sigaction(SIGTERM, &sa, &saved->old_term);
}

static void restore_signals(const saved_signals *saved)
{
    sigaction(SIGINT, &saved->old_int, NULL);
    sigaction(SIGTERM, &saved->old_term, NULL);
}

static void print_result(const ac_train_result *r, const char *out_dir, const ac_config *cfg)
{
    const char *why = "";
    char reason[160] = "";
    switch (r->status) {
    case AC_TRAIN_EARLY_STOPPED:
        snprintf(reason, sizeof reason,
                 "stopped early: %d evaluations without a better validation accuracy; ",
                 cfg->training.patience);
        why = reason;
        break;
    case AC_TRAIN_MAX_STEPS:
        why = "stopped at --max-steps; ";
        break;
    default:
        break;
    }
    if (r->best_step >= 0 && r->best_val_accuracy >= 0)
        printf("%sbest validation accuracy %.4f (step %ld of %ld); model saved in %s\n", why,
               r->best_val_accuracy, r->best_step, r->step, out_dir);
    else if (r->model_saved)
        printf("%smodel (step %ld, no validation data) saved in %s\n", why, r->step, out_dir);
    else
        printf("%sno model saved\n", why);
}

int cmd_train(int argc, char **argv)
{
    train_args a;
    int rc = parse_args(&a, argc, argv);
    if (rc != 0)
        return rc;
    if (a.v[OPT_HELP].set) {
        print_help();
        return CLI_EXIT_OK;
    }
    int quiet = a.v[OPT_QUIET].set;
    int resume = a.v[OPT_RESUME].set;
    const char *out_dir = resume ? a.v[OPT_RESUME].s : a.v[OPT_OUT].s;
    /* A run that fails before writing anything leaves no empty directory. */
    int out_existed = out_dir && access(out_dir, F_OK) == 0;
    const char *train_path = a.train_path;
    const char *val_path = a.v[OPT_VAL_FILE].set ? a.v[OPT_VAL_FILE].s : NULL;
    const char *text_column = a.v[OPT_TEXT_COLUMN].set ? a.v[OPT_TEXT_COLUMN].s : NULL;
    const char *label_column = a.v[OPT_LABEL_COLUMN].set ? a.v[OPT_LABEL_COLUMN].s : NULL;

    ac_err err;
    ac_config cfg;
    ac_train_sources sources;
    ac_rawdata train, val;
    memset(&train, 0, sizeof train);
    memset(&val, 0, sizeof val);
    int have_train = 0, have_val = 0, have_handlers = 0;
    saved_signals saved;
    ac_config_defaults(&cfg);

    if (resume) {
        if (ac_train_sources_load(out_dir, &sources, &err)) {
            rc = cli_error("%s", err.msg);
            goto done;
        }
        char ckpt[4096];
        snprintf(ckpt, sizeof ckpt, "%s/%s", out_dir, AC_CHECKPOINT_SUBDIR);
        ac_config_free(&cfg);
        if (ac_model_dir_load_config(&cfg, ckpt, &err)) {
            ac_config_defaults(&cfg);
            rc = cli_error("%s", err.msg);
            goto done;
        }
        if (!train_path)
            train_path = sources.train_file;
        if (!val_path && sources.val_file[0])
            val_path = sources.val_file;
        text_column = sources.text_column[0] ? sources.text_column : NULL;
        label_column = sources.label_column[0] ? sources.label_column : NULL;
        if (!train_path[0]) {
            rc = cli_error("%s/%s/%s names no training file; give it: attnctl train --resume %s "
                           "TRAIN.csv",
                           out_dir, AC_CHECKPOINT_SUBDIR, AC_RUN_FILE, out_dir);
            goto done;
        }
    } else {
        if (a.v[OPT_CONFIG].set && ac_config_load(&cfg, a.v[OPT_CONFIG].s, 0, &err)) {
            rc = cli_error("%s", err.msg);
            goto done;
        }
        apply_overrides(&cfg, &a);
        if ((rc = validate_config(&cfg)) != 0)
            goto done;
        if (file_exists_in(out_dir, "model.safetensors") ||
            file_exists_in(out_dir, AC_CHECKPOINT_SUBDIR "/trainer_state.json")) {
            rc = cli_error("%s already holds a model or a training run; continue it with "
                           "--resume %s, or choose another --out",
                           out_dir, out_dir);
            goto done;
        }
    }
    cli_set_threads(a.v[OPT_THREADS].set ? (int)a.v[OPT_THREADS].i : 0);
    /* From here on SIGINT/SIGTERM ask for a clean stop (also while reading the
     * data, which takes seconds on a big file). */
    install_stop_handlers(&saved);
    have_handlers = 1;
    cli_block_stop_signals(0); /* one that came during start-up is handled now */

    ac_read_options ro = {.text_column = text_column, .label_column = label_column,
                          .need_label = 1};
    if (resume) {
        ro.classes = cfg.labels;
        ro.n_classes = cfg.n_labels;
    }
    if (ac_rawdata_read(&train, train_path, &ro, &err)) {
        rc = cli_error("%s", err.msg);
        goto done;
    }
    have_train = 1;
    warn_about_data(&train, train_path, quiet);
    if (val_path) {
        ac_read_options vo = ro;
        vo.classes = train.classes;
        vo.n_classes = train.n_classes;
        if (ac_rawdata_read(&val, val_path, &vo, &err)) {
            rc = cli_error("%s", err.msg);
            goto done;
        }
        have_val = 1;
        warn_about_data(&val, val_path, quiet);
    }

    if (stop_signal) { /* nothing was written yet: nothing to resume */
        fprintf(stderr, "attnctl: interrupted before training started; nothing was saved\n");
        rc = stop_signal == SIGTERM ? CLI_EXIT_SIGTERM : CLI_EXIT_SIGINT;
        goto done;
    }

    cli_progress progress;
    cli_progress_init(&progress, quiet);
    ac_train_options to = {
        .config = resume ? NULL : &cfg,
        .train = &train,
        .val = have_val ? &val : NULL,
        .out_dir = out_dir,
        .resume = resume,
        .max_steps = a.v[OPT_MAX_STEPS].set ? a.v[OPT_MAX_STEPS].i : 0,
        .train_path = train_path,
        .val_path = val_path,
        .text_column = text_column,
        .label_column = label_column,
        .stop = &stop_signal,
        .progress = cli_progress_callback,
        .progress_user = &progress,
    };
    ac_train_result result;
    int train_rc = ac_train(&to, &result, &err);
    cli_progress_clear(&progress);
    if (train_rc) {
        rc = cli_error("%s", err.msg);
        goto done;
    }
    if (result.status == AC_TRAIN_INTERRUPTED) {
        int sig = stop_signal;
        fprintf(stderr, "attnctl: interrupted at step %ld; resume with: attnctl train --resume ",
                result.step);
        print_shell_word(stderr, out_dir);
        fputc('\n', stderr);
        rc = sig == SIGTERM ? CLI_EXIT_SIGTERM : CLI_EXIT_SIGINT;
        goto done;
    }
    if (!quiet)
        print_result(&result, out_dir, &cfg);
    rc = CLI_EXIT_OK;
done:
    if (rc == CLI_EXIT_RUNTIME && out_dir && !out_existed)
        rmdir(out_dir); /* only succeeds when empty */
    if (have_handlers)
        restore_signals(&saved);
    if (have_train)
        ac_rawdata_free(&train);
    if (have_val)
        ac_rawdata_free(&val);
    ac_config_free(&cfg);
    return rc;
}
