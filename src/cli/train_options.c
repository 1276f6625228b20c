/* The options of attnctl train and pretrain: one table (OPTIONS) gives
 * each option's name, the range of its value, the field of the preset it
 * overrides and the commands that take it; then their --help, the parsing
 * and how they change the preset configuration. Apart from running the command (train.c), since this part
 * only turns words into a configuration and reads no training data. */
#include <getopt.h>
#include <stddef.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/io.h"
#include "attnctl/model.h"
#include "attnctl/optim.h"
#include "attnctl/text.h"
#include "attnctl/train.h"
#include "cli.h"
#include "train_options.h"

/* How an option's value is read and checked (parse_value). */
typedef enum {
    V_FLAG,   /* no value */
    V_TEXT,   /* a file, directory or column: anything but empty */
    V_INT,    /* an integer from ilo to ihi */
    V_REAL,   /* a number from lo to hi, the ends excluded as `open` says */
    V_NAME,   /* one of the names parse_name knows */
    V_SEED,   /* a 64-bit seed */
    V_WARMUP, /* a fraction, or a whole number of steps */
} value_kind;

/* Where the value goes in the preset (train_apply_overrides); TO_NONE: the
 * command reads it itself, or train_apply_overrides sets it by hand. */
typedef enum { TO_NONE, TO_INT, TO_LONG, TO_I64, TO_FLOAT, TO_DOUBLE, TO_U64 } target;

enum { LO_OPEN = 1, HI_OPEN = 2 };
/* Which command takes the option, and whether --resume does: anything
 * else would break the promise that a resumed run continues exactly as
 * the original run would have. */
enum { BOTH = 0, TRAIN_ONLY = 1, PRETRAIN_ONLY = 2, RESUME_OK = 4 };

/* One option: its name, its value's kind and range (and the words naming
 * the range in a usage error), the field of the configuration it sets and
 * where it may be given. Its help line is in the help text below. */
typedef struct {
    const char *name;
    int id;
    value_kind kind;
    long ilo, ihi;  /* V_INT */
    double lo, hi;  /* V_REAL, V_WARMUP */
    unsigned open;  /* V_REAL: LO_OPEN, HI_OPEN */
    const char *expected;  /* the range in words (V_NAME: from names) */
    const ac_names *names; /* V_NAME */
    target to;
    size_t field;   /* offset in ac_config */
    unsigned flags; /* TRAIN_ONLY, PRETRAIN_ONLY, RESUME_OK */
} option_spec;

#define XSTR(x) #x
#define STR(x) XSTR(x)
#define AT(path) offsetof(ac_config, path)
/* The rows by kind. */
#define FLAG(name, id, flags) {name, id, V_FLAG, 0, 0, 0, 0, 0, NULL, NULL, TO_NONE, 0, flags}
#define TEXT(name, id, flags) {name, id, V_TEXT, 0, 0, 0, 0, 0, NULL, NULL, TO_NONE, 0, flags}
#define INT(name, id, lo, hi, words, to, field, flags) \
    {name, id, V_INT, lo, hi, 0, 0, 0, words, NULL, to, field, flags}
#define REAL(name, id, lo, hi, open, words, to, field, flags) \
    {name, id, V_REAL, 0, 0, lo, hi, open, words, NULL, to, field, flags}
#define NAME(name, id, names, to, field, flags) \
    {name, id, V_NAME, 0, 0, 0, 0, 0, NULL, &names, to, field, flags}

_Static_assert(AC_MAX_MEMBERS == 64, "the --members row names the limit");

/* In getopt's order. */
static const option_spec OPTIONS[] = {
    TEXT("config", OPT_CONFIG, BOTH),
    TEXT("out", OPT_OUT, RESUME_OK),
    INT("epochs", OPT_EPOCHS, 1, 1000000, "an integer from 1 to 1000000", TO_INT,
        AT(training.epochs), BOTH),
    INT("batch-size", OPT_BATCH_SIZE, 1, 65536, "an integer from 1 to 65536", TO_INT,
        AT(training.batch_size), BOTH),
    INT("micro-batch", OPT_MICRO_BATCH, 1, 65536, "an integer from 1 to 65536", TO_INT,
        AT(training.micro_batch), BOTH),
    REAL("lr", OPT_LR, 0, 10, LO_OPEN, "a number with 0 < X <= 10", TO_FLOAT,
         AT(training.optim.lr), BOTH),
    NAME("schedule", OPT_SCHEDULE, ac_schedule_names, TO_INT, AT(training.optim.schedule), BOTH),
    /* a fraction sets training.warmup_frac, a step count optim.warmup_steps */
    {"warmup", OPT_WARMUP, V_WARMUP, 0, 0, 0, 1e15, 0,
     "a fraction 0 <= X < 1, or a whole number of steps", NULL, TO_NONE, 0, BOTH},
    REAL("weight-decay", OPT_WEIGHT_DECAY, 0, 10, 0, "a number from 0 to 10", TO_FLOAT,
         AT(training.optim.weight_decay), BOTH),
    REAL("clip", OPT_CLIP, 0, 1e6, 0, "a number from 0 (off) to 10^6", TO_FLOAT,
         AT(training.optim.clip_norm), BOTH),
    REAL("dropout", OPT_DROPOUT, 0, 1, HI_OPEN, "a number with 0 <= X < 1", TO_FLOAT,
         AT(model.dropout), BOTH),
    INT("max-len", OPT_MAX_LEN, 1, 65536, "an integer from 1 to 65536", TO_INT,
        AT(model.max_len), BOTH),
    NAME("truncation", OPT_TRUNCATION, ac_truncation_names, TO_INT, AT(tokenizer.truncation),
         BOTH),
    /* sets model.vocab_size and training.vocab_max */
    INT("vocab-size", OPT_VOCAB_SIZE, 3, 10000000, "an integer from 3 to 10000000", TO_NONE, 0,
        BOTH),
    INT("min-count", OPT_MIN_COUNT, 1, 1000000000000L, "an integer from 1 to 10^12", TO_I64,
        AT(training.min_count), BOTH),
    NAME("pooling", OPT_POOLING, ac_pooling_names, TO_INT, AT(model.pooling), BOTH),
    INT("layers", OPT_LAYERS, 1, AC_MAX_LAYERS, "1 to " STR(AC_MAX_LAYERS), TO_INT,
        AT(model.n_layers), BOTH),
    INT("d-model", OPT_D_MODEL, 1, 65536, "an integer from 1 to 65536", TO_INT,
        AT(model.d_model), BOTH),
    INT("heads", OPT_HEADS, 1, 65536, "an integer from 1 to 65536", TO_INT, AT(model.n_heads),
        BOTH),
    INT("ff", OPT_FF, 1, 65536, "an integer from 1 to 65536", TO_INT, AT(model.d_ff), BOTH),
    REAL("val-split", OPT_VAL_SPLIT, 0, 1, HI_OPEN, "a number with 0 <= X < 1", TO_DOUBLE,
         AT(training.val_split), BOTH),
    TEXT("val-file", OPT_VAL_FILE, TRAIN_ONLY | RESUME_OK),
    INT("patience", OPT_PATIENCE, 0, 1000000, "an integer from 0 to 1000000", TO_INT,
        AT(training.patience), BOTH),
    INT("eval-every", OPT_EVAL_EVERY, 0, 1000000000000L, "an integer from 0 to 10^12", TO_LONG,
        AT(training.eval_every), BOTH),
    {"seed", OPT_SEED, V_SEED, 0, 0, 0, 0, 0, "an integer from 0 to 18446744073709551615", NULL,
     TO_U64, AT(training.seed), BOTH},
    INT("threads", OPT_THREADS, 1, 4096, "an integer from 1 to 4096", TO_NONE, 0, RESUME_OK),
    TEXT("text-column", OPT_TEXT_COLUMN, BOTH),
    TEXT("label-column", OPT_LABEL_COLUMN, TRAIN_ONLY),
    INT("max-steps", OPT_MAX_STEPS, 0, LONG_MAX, "an integer >= 0", TO_NONE, 0, RESUME_OK),
    TEXT("resume", OPT_RESUME, RESUME_OK),
    NAME("positions", OPT_POSITIONS, ac_positions_names, TO_INT, AT(model.positions), BOTH),
    INT("ngrams", OPT_NGRAMS, 1, 3, "1, 2 or 3", TO_INT, AT(model.ngram_order), BOTH),
    INT("ngram-buckets", OPT_NGRAM_BUCKETS, 1, 16777216, "an integer from 1 to 16777216",
        TO_INT, AT(model.ngram_buckets), BOTH),
    INT("wide", OPT_WIDE, 0, 3, "0, 1, 2 or 3", TO_INT, AT(model.wide_order), TRAIN_ONLY),
    INT("wide-buckets", OPT_WIDE_BUCKETS, 1, 16777216, "an integer from 1 to 16777216", TO_INT,
        AT(model.wide_buckets), TRAIN_ONLY),
    REAL("wide-norm", OPT_WIDE_NORM, 0, 1, 0, "a number from 0 to 1", TO_FLOAT,
         AT(model.wide_norm), TRAIN_ONLY),
    /* training.wide_nb, the naive Bayes start of the wide path: off by default
     * and not in --help or attnctl.1 while it is being measured */
    REAL("wide-nb", OPT_WIDE_NB, 0, 100, 0, "a number from 0 to 100", TO_FLOAT,
         AT(training.wide_nb), TRAIN_ONLY),
    REAL("crop", OPT_CROP, 0, 1, 0, "a number from 0 to 1", TO_DOUBLE, AT(training.crop_frac),
         TRAIN_ONLY),
    INT("crop-min", OPT_CROP_MIN, 1, 65536, "an integer from 1 to 65536", TO_INT,
        AT(training.crop_min), TRAIN_ONLY),
    INT("crop-max", OPT_CROP_MAX, 1, 65536, "an integer from 1 to 65536", TO_INT,
        AT(training.crop_max), TRAIN_ONLY),
    REAL("label-smoothing", OPT_LABEL_SMOOTHING, 0, 1, HI_OPEN, "a number with 0 <= X < 1",
         TO_FLOAT, AT(training.label_smoothing), TRAIN_ONLY),
    REAL("token-dropout", OPT_TOKEN_DROPOUT, 0, 1, HI_OPEN, "a number with 0 <= X < 1", TO_FLOAT,
         AT(training.token_dropout), TRAIN_ONLY),
    REAL("ema", OPT_EMA, 0, 1, HI_OPEN, "a number with 0 <= X < 1", TO_FLOAT, AT(training.ema),
         BOTH),
    INT("members", OPT_MEMBERS, 1, AC_MAX_MEMBERS, "an integer from 1 to 64", TO_INT,
        AT(training.members), TRAIN_ONLY),
    TEXT("init", OPT_INIT, TRAIN_ONLY),
    TEXT("teacher", OPT_TEACHER, TRAIN_ONLY | RESUME_OK),
    TEXT("unlabelled", OPT_UNLABELLED, TRAIN_ONLY | RESUME_OK),
    REAL("pseudo-threshold", OPT_PSEUDO_THRESHOLD, 0, 1, 0, "a probability from 0 to 1", TO_NONE,
         0, TRAIN_ONLY),
    REAL("mask-frac", OPT_MASK_FRAC, 0, 1, LO_OPEN | HI_OPEN, "a number with 0 < X < 1",
         TO_DOUBLE, AT(training.mask_frac), PRETRAIN_ONLY),
    NAME("format", OPT_FORMAT, ac_text_format_names, TO_NONE, 0, PRETRAIN_ONLY),
    FLAG("keep-checkpoint", OPT_KEEP_CHECKPOINT, RESUME_OK),
    FLAG("quiet", OPT_QUIET, RESUME_OK),
    FLAG("help", OPT_HELP, RESUME_OK),
};

#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

static const option_spec *option_spec_of(int id)
{
    for (int k = 0; k < N_OPTIONS; k++)
        if (OPTIONS[k].id == id)
            return &OPTIONS[k];
    return NULL;
}

/* Pretraining without the option: a small held-out share, evaluations
 * every so many steps (an epoch of 75,000 reviews is thousands of steps),
 * no early stop (a preset's values are meant for a classifier). */
#define PRETRAIN_VAL_SPLIT 0.02
#define PRETRAIN_EVAL_EVERY 500

/* The options train and pretrain share, with their defaults. */
void cli_print_training_options(cli_training_kind kind)
{
    ac_config d;
    ac_config_defaults(&d);
    const ac_train_config *t = &d.training;
    const int pretrain = kind == CLI_PRETRAIN;
    char epochs_auto[160], ema_auto[160];
    snprintf(epochs_auto, sizeof epochs_auto,
             "                         auto: %d, or %d when the median training text is\n"
             "                         shorter than --crop-max tokens\n",
             AC_ADAPT_LONG_EPOCHS, AC_ADAPT_SHORT_EPOCHS);
    snprintf(ema_auto, sizeof ema_auto,
             "                         auto: %g, or %g when the median training text is\n"
             "                         shorter than --crop-max tokens\n",
             (double)AC_ADAPT_LONG_EMA, (double)AC_ADAPT_SHORT_EMA);
    printf("Training (defaults in brackets):\n"
           "      --epochs N         passes over the %s [%s]\n"
           "%s"
           "      --batch-size N     %s per step [%d]\n"
           "      --micro-batch N    rows of a micro-batch: a step's batch is cut into\n"
           "                         micro-batches by row index, their gradients summed\n"
           "                         exactly (the same model for any number of processes\n"
           "                         under mpirun, at most one per micro-batch) [%d]\n"
           "      --lr X             peak learning rate of AdamW [%g]\n"
           "      --schedule NAME    cosine, linear or constant decay after warmup [%s]\n"
           "      --warmup X         warmup: a fraction of all steps when X < 1, else a step\n"
           "                         count [%g]\n"
           "      --weight-decay X   decoupled weight decay of matrices [%g]\n"
           "      --clip X           global gradient-norm clip, 0 = off [%g]\n",
           pretrain ? "texts" : "training rows",
           pretrain ? "4" : "auto",
           pretrain ? "" : epochs_auto,
           pretrain ? "texts" : "reviews",
           t->batch_size, t->micro_batch, (double)t->optim.lr,
           ac_schedule_name(t->optim.schedule),
           t->warmup_frac, (double)t->optim.weight_decay, (double)t->optim.clip_norm);
    if (pretrain)
        printf("      --val-split X      share of the texts held out for the masked-token loss\n"
               "                         and accuracy, 0 <= X < 1 [%g]\n"
               "      --eval-every N     steps between evaluations, 0 = once an epoch [%d]\n"
               "      --patience N       evaluations without a better masked-token accuracy\n"
               "                         before stopping, 0 = never [0]\n",
               PRETRAIN_VAL_SPLIT, PRETRAIN_EVAL_EVERY);
    else
        printf("      --val-split X      share of the training file held out, 0 <= X < 1 [%g]\n"
               "      --eval-every N     steps between evaluations, 0 = once an epoch [%ld]\n"
               "      --patience N       evaluations without a better validation accuracy before\n"
               "                         stopping, 0 = never [%d]\n"
               "      --crop X           share of the reviews cut each epoch to a random span of\n"
               "                         --crop-min..--crop-max tokens, so short texts are learnt\n"
               "                         too [%g]\n"
               "      --crop-min N, --crop-max N\n"
               "                         span lengths of the crops [%d, %d]\n"
               "      --label-smoothing X  target (1-X) on the label and X spread over all "
               "classes [%g]\n"
               "      --token-dropout X  share of training tokens replaced by <unk> [%g]\n"
               "      --members N        train N models from the same initial weights, each\n"
               "                         with its own shuffle, crops and dropout, and keep the\n"
               "                         mean of their weights (the best member instead if\n"
               "                         the mean reads below every member on validation):\n"
               "                         a model of the usual size, N times the training;\n"
               "                         1 = one model [%d]\n",
               t->val_split, t->eval_every, t->patience, t->crop_frac, t->crop_min, t->crop_max,
               (double)t->label_smoothing, (double)t->token_dropout, t->members);
    printf("      --ema X            evaluate and save a moving average of the weights with\n"
           "                         decay X per step; 0 = the weights themselves [%s]\n"
           "%s"
           "      --max-steps N      stop after N steps in all, 0 = no limit; the schedule still\n"
           "                         spans all epochs, so the run can be resumed and continued\n"
           "      --keep-checkpoint  keep checkpoint/'s weights, AdamW moments and average when\n"
           "                         the run finishes (by default they go: nothing can resume\n"
           "                         a finished run, and they are 4-5 times the model)\n"
           "      --seed N           seed of every random choice; the same seed gives the same\n"
           "                         model bitwise, whatever --threads [%llu]\n"
           "      --threads N        threads to use [all cores]\n"
           "\n",
           pretrain ? "0" : "auto", pretrain ? "" : ema_auto,
           (unsigned long long)t->seed);
    ac_config_free(&d);
}

/* The model and tokenizer options (a fine-tuned model takes the ones that
 * shape the encoder from --init DIR). */
void cli_print_model_options(cli_training_kind kind)
{
    ac_config d;
    ac_config_defaults(&d);
    char wide_help[700] = "";
    if (kind != CLI_PRETRAIN)
        snprintf(wide_help, sizeof wide_help,
                 "      --wide N           the wide path: a weight per class for each distinct\n"
                 "                         hashed word n-gram up to length N, added to the\n"
                 "                         logits; 0: none [%d]\n"
                 "      --wide-buckets N   rows of the wide path's hashed table [%d]\n"
                 "      --wide-norm X      the wide path's sum times (%d / max(n, %d))^X for a\n"
                 "                         text of n distinct n-grams, so that short texts count;\n"
                 "                         0: the plain sum [%g]\n",
                 d.model.wide_order, d.model.wide_buckets, AC_WIDE_NORM_REF, AC_WIDE_NORM_FLOOR,
                 (double)d.model.wide_norm);
    printf("Model and tokenizer:\n"
           "      --layers N         encoder layers [%d]\n"
           "      --d-model N        model width [%d]\n"
           "      --heads N          attention heads, dividing --d-model [%d]\n"
           "      --ff N             feed-forward width [%d]\n"
           "      --dropout X        dropout probability, 0 <= X < 1 [%g]\n"
           "      --pooling NAME     %s [%s]\n"
           "      --positions NAME   learned, sinusoidal (the course's fixed table) or none [%s]\n"
           "      --ngrams N         1: words only; 2: + hashed word bigrams; 3: + trigrams [%d]\n"
           "      --ngram-buckets N  rows of the hashed n-gram table, with --ngrams 2 or 3 [%d]\n"
           "%s"
           "      --max-len N        tokens per %s, longer ones are truncated [%d]\n"
           "      --truncation NAME  head, tail or head+tail: which tokens a long %s keeps [%s]\n"
           "      --vocab-size N     vocabulary size including <pad>, <unk> (and <cls>%s) [%d]\n"
           "      --min-count N      minimum count of a vocabulary token [%lld]\n"
           "\n",
           d.model.n_layers, d.model.d_model, d.model.n_heads, d.model.d_ff,
           (double)d.model.dropout,
           kind == CLI_PRETRAIN ? "cls: the vocabulary gets <cls> and every text starts with it\n"
                                  "                         (for a classifier that pools from it); "
                                  "max\n"
                                  "                         or mean: it does not"
                                : "max, mean or cls",
           ac_pooling_name(d.model.pooling), ac_positions_name(d.model.positions),
           d.model.ngram_order, d.model.ngram_buckets, wide_help,
           kind == CLI_PRETRAIN ? "text" : "review",
           d.model.max_len, kind == CLI_PRETRAIN ? "text" : "review",
           ac_truncation_name(d.tokenizer.truncation), kind == CLI_PRETRAIN ? ", <mask>" : "",
           d.training.vocab_max, (long long)d.training.min_count);
    ac_config_free(&d);
}

void train_print_help(void)
{
    printf("usage: attnctl train [OPTIONS] TRAIN.csv[.gz] --out DIR\n"
           "       attnctl train --init PRETRAINED [OPTIONS] TRAIN.csv[.gz] --out DIR\n"
           "       attnctl train --teacher MODEL --unlabelled TEXTS [OPTIONS] TRAIN.csv --out DIR\n"
           "       attnctl train --resume DIR [--max-steps N] [--threads N] [--keep-checkpoint] [--quiet]\n"
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
           "      --init DIR         start from the pretrained encoder in DIR (attnctl pretrain):\n"
           "                         its tokenizer, vocabulary and weights (embeddings,\n"
           "                         positions, n-gram table, layers); the classifier head is\n"
           "                         new. Options that would change them are an error\n"
           "      --teacher DIR[,DIR...]  self-training: these trained models label the texts\n"
           "                         of --unlabelled (their probabilities averaged), and the\n"
           "                         texts they are sure of join the training rows with that\n"
           "                         label (never the validation rows). A student trained so\n"
           "                         reads more text than the labelled file holds\n"
           "      --unlabelled FILE  the texts to label: *.csv[.gz] a CSV with a text column,\n"
           "                         any other name plain text, one a line (gzip too)\n"
           "      --pseudo-threshold P  probability a text's label needs to join [%g]\n"
           "      --val-file FILE    validation CSV (default: a stratified --val-split share\n"
           "                         of the training file)\n"
           "      --text-column NAME, --label-column NAME\n"
           "                         columns to read\n"
           "      --resume DIR       continue an interrupted run from DIR/checkpoint with its\n"
           "                         settings and data files (TRAIN and --val-file may be given\n"
           "                         if they moved; they must be the same data, and so must\n"
           "                         the texts --teacher chooses again from --unlabelled)\n"
           "\n",
           DEFAULT_PSEUDO_THRESHOLD);
    cli_print_training_options(CLI_TRAIN);
    cli_print_model_options(CLI_TRAIN);
    cli_print_output_help("train");
}

void cli_print_output_help(const char *cmd)
{
    printf("Output:\n"
           "  -q, --quiet            print nothing but errors\n"
           "  -h, --help             this text\n"
           "\n"
           "Progress goes to stderr: a bar on a terminal, one line per evaluation otherwise.\n"
           "Ctrl-C (SIGINT) or SIGTERM finishes the current step, saves a checkpoint and exits\n"
           "with 130 or 143; `attnctl %s --resume DIR` then continues exactly where it was.\n"
           "SIGUSR1 stops the same way (exit 130). Under mpirun use it: `kill -USR1 PID` of\n"
           "mpirun reaches every process, while mpirun answers SIGINT/SIGTERM by killing them.\n"
           "Exit status: 0 done, 1 error, 2 usage error, 130/143 interrupted.\n",
           cmd);
}

static const char *option_name(int id)
{
    const option_spec *o = option_spec_of(id);
    return o ? o->name : "?";
}

static int bad_value(const char *cmd, int id, const char *arg, const char *expected)
{
    return cli_usage_error(cmd, "--%s: invalid value '%s' (expected %s)", option_name(id), arg,
                           expected);
}

/* Validates one option's value into a->v[id]. Returns 0 or a usage exit status. */
static int parse_value(train_args *a, int id, const char *arg)
{
    const option_spec *o = option_spec_of(id);
    opt_value *v = &a->v[id];
    long i;
    double d;
    int n;
    v->set = 1;
    v->s = arg;
    switch (o->kind) {
    case V_FLAG:
        break;
    case V_TEXT:
        if (arg[0] == '\0')
            return cli_usage_error(a->cmd, "--%s: empty value", o->name);
        break;
    case V_INT:
        if (cli_parse_int(arg, o->ilo, o->ihi, &i))
            return bad_value(a->cmd, id, arg, o->expected);
        v->i = i;
        break;
    case V_REAL:
        if (cli_parse_double(arg, o->lo, o->hi, &d) || ((o->open & LO_OPEN) && !(d > o->lo)) ||
            ((o->open & HI_OPEN) && !(d < o->hi)))
            return bad_value(a->cmd, id, arg, o->expected);
        v->d = d;
        break;
    case V_NAME: {
        char names[160];
        if (ac_names_parse(o->names, arg, &n))
            return bad_value(a->cmd, id, arg, ac_names_list(o->names, 0, names, sizeof names));
        v->i = n;
        break;
    }
    case V_SEED:
        if (cli_parse_u64(arg, &v->u))
            return bad_value(a->cmd, id, arg, o->expected);
        break;
    case V_WARMUP:
        if (cli_parse_double(arg, o->lo, o->hi, &d) || (d >= 1 && d != floor(d)))
            return bad_value(a->cmd, id, arg, o->expected);
        v->d = d;
        break;
    }
    return 0;
}

static int has_flag(int id, unsigned flag)
{
    const option_spec *o = option_spec_of(id);
    return o && (o->flags & flag);
}

int train_parse_args(train_args *a, cli_training_kind kind, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->cmd = kind == CLI_PRETRAIN ? "pretrain" : "train";
    optind = 0; /* GNU: full reinitialisation */
    opterr = 0;
    struct option long_options[N_OPTIONS + 1];
    for (int k = 0; k < N_OPTIONS; k++)
        long_options[k] = (struct option){OPTIONS[k].name,
                                          OPTIONS[k].kind == V_FLAG ? no_argument
                                                                    : required_argument,
                                          NULL, OPTIONS[k].id};
    long_options[N_OPTIONS] = (struct option){NULL, 0, NULL, 0};
    int c;
    while ((c = getopt_long(argc, argv, ":o:c:qh", long_options, NULL)) != -1) {
        int rc;
        switch (c) {
        case 'o': c = OPT_OUT; break;
        case 'c': c = OPT_CONFIG; break;
        case 'q': c = OPT_QUIET; break;
        case 'h': c = OPT_HELP; break;
        case ':':
            return cli_usage_error(a->cmd, "option '%s' needs a value", argv[optind - 1]);
        case '?':
            if (optopt)
                return cli_usage_error(a->cmd, "unknown option '-%c'", optopt);
            return cli_usage_error(a->cmd, "unknown option '%s'", argv[optind - 1]);
        default: break;
        }
        if (has_flag(c, kind == CLI_PRETRAIN ? TRAIN_ONLY : PRETRAIN_ONLY))
            return cli_usage_error(a->cmd, "--%s is an option of attnctl %s only",
                                   option_name(c), kind == CLI_PRETRAIN ? "train" : "pretrain");
        if (c == OPT_QUIET || c == OPT_HELP || c == OPT_KEEP_CHECKPOINT) {
            a->v[c].set = 1;
            continue;
        }
        if ((rc = parse_value(a, c, optarg)) != 0)
            return rc;
    }
    if (a->v[OPT_HELP].set)
        return 0;
    int n_pos = argc - optind;
    if (n_pos > 1 && kind == CLI_TRAIN)
        return cli_usage_error("train", "one training file expected, got %d ('%s', '%s', ...)",
                               n_pos, argv[optind], argv[optind + 1]);
    a->paths = argv + optind;
    a->n_paths = n_pos;
    if (n_pos >= 1)
        a->train_path = argv[optind];
    if (a->v[OPT_RESUME].set) {
        for (int id = OPT_CONFIG; id < OPT_END; id++)
            if (a->v[id].set && !has_flag(id, RESUME_OK))
                return cli_usage_error(a->cmd,
                                       "--%s cannot be combined with --resume (a resumed run "
                                       "keeps the settings of its checkpoint)",
                                       option_name(id));
        if (a->v[OPT_OUT].set && strcmp(a->v[OPT_OUT].s, a->v[OPT_RESUME].s) != 0)
            return cli_usage_error(a->cmd, "--out and --resume name different directories");
        return 0;
    }
    if (a->v[OPT_TEACHER].set != a->v[OPT_UNLABELLED].set)
        return cli_usage_error(a->cmd, "--teacher and --unlabelled go together: the teacher "
                                       "models label the unlabelled texts");
    if (a->v[OPT_PSEUDO_THRESHOLD].set && !a->v[OPT_TEACHER].set)
        return cli_usage_error(a->cmd, "--pseudo-threshold needs --teacher and --unlabelled");
    if (!a->train_path)
        return cli_usage_error(a->cmd, kind == CLI_PRETRAIN
                                           ? "missing text file(s) (TEXT.csv[.gz] or TEXT.txt[.gz])"
                                           : "missing training file (TRAIN.csv[.gz])");
    if (!a->v[OPT_OUT].set)
        return cli_usage_error(a->cmd, "missing --out DIR");
    if (a->v[OPT_TEXT_COLUMN].set && a->v[OPT_FORMAT].set &&
        a->v[OPT_FORMAT].i == AC_TEXT_FORMAT_LINES)
        return cli_usage_error(a->cmd, "--text-column names a CSV column; --format lines reads "
                                       "plain text");
    return 0;
}

/* Applies the single-field overrides on top of the preset. */
void train_apply_overrides(ac_config *c, const train_args *a)
{
    const opt_value *v = a->v;
    ac_train_config *t = &c->training;
    for (int k = 0; k < N_OPTIONS; k++) {
        const option_spec *o = &OPTIONS[k];
        const opt_value *x = &v[o->id];
        void *field = (char *)c + o->field;
        if (!x->set)
            continue;
        switch (o->to) {
        case TO_NONE: break;
        case TO_INT: *(int *)field = (int)x->i; break;
        case TO_LONG: *(long *)field = x->i; break;
        case TO_I64: *(int64_t *)field = x->i; break;
        case TO_FLOAT: *(float *)field = (float)x->d; break;
        case TO_DOUBLE: *(double *)field = x->d; break;
        case TO_U64: *(uint64_t *)field = x->u; break;
        }
    }
    if (v[OPT_WARMUP].set) {
        if (v[OPT_WARMUP].d < 1) {
            t->warmup_frac = v[OPT_WARMUP].d;
            t->optim.warmup_steps = -1;
        } else {
            t->optim.warmup_steps = (long)v[OPT_WARMUP].d;
        }
    }
    if (v[OPT_VOCAB_SIZE].set) {
        t->vocab_max = (int32_t)v[OPT_VOCAB_SIZE].i;
        c->model.vocab_size = (int)v[OPT_VOCAB_SIZE].i;
    }
    if (a->kind == CLI_PRETRAIN) {
        /* What pretraining does not use is 0 in its config.json; its
         * evaluation defaults are its own (see PRETRAIN_*). */
        t->crop_frac = 0.0;
        t->label_smoothing = 0.0f;
        t->token_dropout = 0.0f;
        t->members = 1; /* one encoder: a weight average is a classifier's */
        if (!v[OPT_EMA].set)
            t->ema = 0.0f; /* the weight average is measured for classifiers only */
        c->model.wide_order = 0; /* a classifier's head: the fine-tuning run's choice */
        c->model.wide_buckets = 0;
        c->model.wide_norm = 0.0f;
        if (!v[OPT_VAL_SPLIT].set) t->val_split = PRETRAIN_VAL_SPLIT;
        if (!v[OPT_EVAL_EVERY].set) t->eval_every = PRETRAIN_EVAL_EVERY;
        if (!v[OPT_PATIENCE].set) t->patience = 0;
    }
}

/* train --init DIR: the encoder's shape, vocabulary and tokenizer are DIR's.
 * An option that sets one of them to something else is a usage error; the
 * preset's values are simply replaced. */
int train_apply_init(ac_config *c, const train_args *a)
{
    ac_config wanted = *c; /* shallow: labels are not touched */
    ac_err err;
    if (ac_train_init_config(c, a->v[OPT_INIT].s, &err))
        return cli_error("%s", err.msg);
    static const struct {
        int option;
        const char *field;
        size_t offset; /* of an int in ac_config */
    } shape[] = {
        {OPT_D_MODEL, "d_model", offsetof(ac_config, model.d_model)},
        {OPT_LAYERS, "n_layers", offsetof(ac_config, model.n_layers)},
        {OPT_HEADS, "n_heads", offsetof(ac_config, model.n_heads)},
        {OPT_FF, "d_ff", offsetof(ac_config, model.d_ff)},
        {OPT_VOCAB_SIZE, "vocab_size", offsetof(ac_config, model.vocab_size)},
        {OPT_MAX_LEN, "max_len", offsetof(ac_config, model.max_len)},
        {OPT_NGRAMS, "ngram_order", offsetof(ac_config, model.ngram_order)},
        {OPT_NGRAM_BUCKETS, "ngram_buckets", offsetof(ac_config, model.ngram_buckets)},
        {OPT_POSITIONS, "positions", offsetof(ac_config, model.positions)},
        {OPT_TRUNCATION, "truncation", offsetof(ac_config, tokenizer.truncation)},
    };
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
        int want = *(const int *)(const void *)((const char *)&wanted + shape[i].offset);
        int have = *(const int *)(const void *)((const char *)c + shape[i].offset);
        if (!a->v[shape[i].option].set || want == have)
            continue;
        char value[32];
        if (shape[i].option == OPT_POSITIONS)
            snprintf(value, sizeof value, "%s", ac_positions_name((ac_positions)have));
        else if (shape[i].option == OPT_TRUNCATION)
            snprintf(value, sizeof value, "%s", ac_truncation_name((ac_truncation)have));
        else
            snprintf(value, sizeof value, "%d", have);
        return cli_usage_error("train",
                               "--%s %s contradicts the model in %s (%s %s): the encoder, its "
                               "vocabulary and tokenizer come from there",
                               option_name(shape[i].option), a->v[shape[i].option].s,
                               a->v[OPT_INIT].s, shape[i].field, value);
    }
    if (a->v[OPT_MIN_COUNT].set)
        return cli_usage_error("train", "--min-count cannot be combined with --init (the "
                                        "vocabulary comes from %s)",
                               a->v[OPT_INIT].s);
    return 0;
}

/* Model settings are checked before any data is read; the vocabulary size
 * and the class count are only known later, so stand-ins are used. */
int train_validate_config(const ac_config *c, const train_args *a)
{
    ac_model_config m = c->model;
    m.vocab_size = c->training.vocab_max;
    if (m.n_classes < 2)
        m.n_classes = 2;
    ac_err err;
    if (ac_model_config_validate(&m, &err))
        return cli_usage_error(a->cmd, "%s", err.msg);
    if (c->training.vocab_max <
        3 + (c->model.pooling == AC_POOL_CLS) + (a->kind == CLI_PRETRAIN))
        return cli_usage_error(a->cmd, "--vocab-size must leave room for the special tokens");
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
        return cli_usage_error(a->cmd, "%s", err.msg);
    return 0;
}
