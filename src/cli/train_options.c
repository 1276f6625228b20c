/* The options of attnctl train and pretrain: one table (OPTIONS) gives
 * each option's name, short form, the range of its value, the field of the
 * preset it overrides, the commands that take it and its help; from it come
 * getopt's lists, the parsing, the usage errors, --help and how the options
 * change the preset configuration. An option that sets a config.json key
 * is a SET row naming the key: its type, range, field and "auto" are the
 * key's (src/io/config.c), so a new setting is its key's row there and one
 * row here. Apart from running the command (train.c), since this part only
 * turns words into a configuration and reads no training data. */
#include <getopt.h>
#include <stddef.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "attnctl/io.h"
#include "attnctl/model.h"
#include "attnctl/optim.h"
#include "attnctl/strbuf.h"
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
    V_SETTING, /* a key of config.json: its kind, values and field are the key's */
} value_kind;

/* Where the value goes in the preset (train_apply_overrides); TO_NONE: the
 * command reads it itself, or train_apply_overrides sets it by hand. */
typedef enum { TO_NONE, TO_INT, TO_I32, TO_LONG, TO_I64, TO_FLOAT, TO_DOUBLE, TO_U64 } target;

enum { LO_OPEN = 1, HI_OPEN = 2 };
/* Which command takes the option, and whether --resume does: anything
 * else would break the promise that a resumed run continues exactly as
 * the original run would have. */
enum { BOTH = 0, TRAIN_ONLY = 1, PRETRAIN_ONLY = 2, RESUME_OK = 4 };

/* The help of an option, printed from its row (print_options): in its
 * section, "-S, --NAME ARG" then its text, in which "{}" stands for the
 * default: the preset's value of the field the option sets, unless the row
 * says it in words. */
typedef struct {
    char short_name;  /* the one-letter form, or 0 */
    int section;      /* S_* */
    const char *arg;  /* the value's name ("N", "X", "DIR"); NULL: none (a SET
                         row: from its key's type) */
    const char *text; /* NULL: not in the help */
    const char *pretrain_text;          /* pretrain's text when it differs */
    const char *deflt, *pretrain_deflt; /* the default in words (NULL: the field's,
                                           "auto" for AC_AUTO) */
    size_t shown;    /* with TO_NONE: the field whose preset value is the default */
    int shown_as;    /* its type (a target) */
    int join;        /* 1: "--NAME ARG, --NEXT ARG" on one line, then the next row's text */
    void (*note)(char *out, size_t n); /* text after the default (an "auto" rule) */
} option_help;

enum { S_FILES, S_SEARCH, S_MASKING, S_TRAINING, S_MODEL, S_OUTPUT, N_SECTIONS };
static const char *const SECTION_TITLE[N_SECTIONS] = {
    "Files:", "Search:", "Masking:", "Training (defaults in brackets):", "Model and tokenizer:",
    "Output:"};

/* One option: its name, its value's kind and range (and the words naming
 * the range in a usage error), the field of the configuration it sets,
 * where it may be given, and its help. */
typedef struct {
    const char *name;
    int id;         /* OPT_*, or 0 for a SET row */
    value_kind kind;
    long ilo, ihi;  /* V_INT */
    double lo, hi;  /* V_REAL, V_WARMUP */
    unsigned open;  /* V_REAL: LO_OPEN, HI_OPEN */
    const char *expected;  /* the range in words (V_NAME: from names) */
    const ac_names *names; /* V_NAME */
    target to;
    size_t field;   /* offset in ac_config */
    unsigned flags; /* TRAIN_ONLY, PRETRAIN_ONLY, RESUME_OK */
    const char *key; /* V_SETTING: the config.json key ("training.epochs") */
    option_help help;
} option_spec;

#define XSTR(x) #x
#define STR(x) XSTR(x)
#define AT(path) offsetof(ac_config, path)
/* The rows by kind; the help's fields (option_help) come last, by name. */
#define FLAG(name, id, flags, ...) \
    {name, id, V_FLAG, 0, 0, 0, 0, 0, NULL, NULL, TO_NONE, 0, flags, NULL, {__VA_ARGS__}}
#define TEXT(name, id, flags, ...) \
    {name, id, V_TEXT, 0, 0, 0, 0, 0, NULL, NULL, TO_NONE, 0, flags, NULL, {__VA_ARGS__}}
#define INT(name, id, lo, hi, words, to, field, flags, ...) \
    {name, id, V_INT, lo, hi, 0, 0, 0, words, NULL, to, field, flags, NULL, {__VA_ARGS__}}
#define REAL(name, id, lo, hi, open, words, to, field, flags, ...) \
    {name, id, V_REAL, 0, 0, lo, hi, open, words, NULL, to, field, flags, NULL, {__VA_ARGS__}}
/* A setting of config.json: the option takes the key's values (its range,
 * or its names; "auto" where the key takes it), sets its field, and shows
 * its type (N, X, NAME) and its preset value in the help. No id: code asks
 * for it by key (train_setting). */
#define SET(name, key, flags, ...) \
    {name, 0, V_SETTING, 0, 0, 0, 0, 0, NULL, NULL, TO_NONE, 0, flags, key, {__VA_ARGS__}}
#define NAME(name, id, names, to, field, flags, ...) \
    {name, id, V_NAME, 0, 0, 0, 0, 0, NULL, &names, to, field, flags, NULL, {__VA_ARGS__}}

/* Continuation lines of a help text start under the texts' column. */
#define MORE "\n                         "

/* Pretraining without the option: a small held-out share, evaluations
 * every so many steps (an epoch of 75,000 reviews is thousands of steps),
 * no early stop (a preset's values are meant for a classifier). */
#define PRETRAIN_VAL_SPLIT 0.02
#define PRETRAIN_EVAL_EVERY 500

/* The rule of an "auto" default (src/train/adapt.c), after the default. */
static void auto_rule(char *out, size_t n, double long_texts, double short_texts)
{
    snprintf(out, n, "auto: %g, or %g when the median training text is" MORE
                     "shorter than --crop-max tokens",
             long_texts, short_texts);
}
#define AUTO_RULE(fn, long_texts, short_texts) \
    static void fn(char *out, size_t n) { auto_rule(out, n, long_texts, short_texts); }
AUTO_RULE(epochs_auto, AC_ADAPT_LONG_EPOCHS, AC_ADAPT_SHORT_EPOCHS)
AUTO_RULE(ema_auto, (double)AC_ADAPT_LONG_EMA, (double)AC_ADAPT_SHORT_EMA)
AUTO_RULE(members_auto, AC_ADAPT_LONG_MEMBERS, AC_ADAPT_SHORT_MEMBERS)
AUTO_RULE(wide_nb_auto, (double)AC_ADAPT_LONG_WIDE_NB, (double)AC_ADAPT_SHORT_WIDE_NB)
AUTO_RULE(wide_auto, AC_ADAPT_LONG_WIDE_ORDER, AC_ADAPT_SHORT_WIDE_ORDER)
AUTO_RULE(min_count_auto, AC_ADAPT_LONG_MIN_COUNT, AC_ADAPT_SHORT_MIN_COUNT)
AUTO_RULE(refit_auto, AC_ADAPT_LONG_REFIT, AC_ADAPT_SHORT_REFIT)
static void nbsvm_auto(char *out, size_t n)
{
    snprintf(out, n, "auto: %g, or when the median training text is" MORE
                     "shorter than --crop-max tokens the best of 0, 1, 2," MORE
                     "4, 8 on the validation rows (%g without them)",
             (double)AC_ADAPT_LONG_NBSVM, (double)AC_ADAPT_SHORT_NBSVM);
}
static void wide_buckets_auto(char *out, size_t n)
{
    snprintf(out, n, "auto: %d, or fewer past %d classes, so that the" MORE
                     "table holds at most %d weights",
             AC_ADAPT_WIDE_BUCKETS, AC_ADAPT_WIDE_WEIGHTS / AC_ADAPT_WIDE_BUCKETS,
             AC_ADAPT_WIDE_WEIGHTS);
}

/* In the order of the help, section by section. */
static const option_spec OPTIONS[] = {
    /* Files */
    TEXT("out", OPT_OUT, RESUME_OK, .short_name = 'o', .section = S_FILES, .arg = "DIR",
         .text = "output directory (must not hold a model already)"),
    TEXT("config", OPT_CONFIG, BOTH, .short_name = 'c', .section = S_FILES, .arg = "FILE",
         .text = "preset to start from (e.g. models/seed.json); the options" MORE
                 "below override single fields",
         .pretrain_text = "preset to start from (e.g. models/default.json: its model" MORE
                          "and tokenizer settings; crops, label smoothing and token" MORE
                          "dropout are off in pretraining); options override fields"),
    TEXT("init", OPT_INIT, TRAIN_ONLY, .section = S_FILES, .arg = "DIR",
         .text = "start from the pretrained encoder in DIR (attnctl pretrain):" MORE
                 "its tokenizer, vocabulary and weights (embeddings," MORE
                 "positions, n-gram table, layers); the classifier head is" MORE
                 "new. Options that would change them are an error; a" MORE
                 "--config file's values for them are replaced (a warning" MORE
                 "names each)"),
    TEXT("teacher", OPT_TEACHER, TRAIN_ONLY | RESUME_OK, .section = S_FILES,
         .arg = "DIR[,DIR...]",
         .text = "self-training: these trained models label the texts" MORE
                 "of --unlabelled (their probabilities averaged), and the" MORE
                 "texts they are sure of join the training rows with that" MORE
                 "label (never the validation rows). A student trained so" MORE
                 "reads more text than the labelled file holds"),
    TEXT("unlabelled", OPT_UNLABELLED, TRAIN_ONLY | RESUME_OK, .section = S_FILES, .arg = "FILE",
         .text = "the texts to label: *.csv/*.tsv[.gz] a CSV with a text column," MORE
                 "any other name plain text, one a line (gzip too)"),
    REAL("pseudo-threshold", OPT_PSEUDO_THRESHOLD, 0, 1, 0, "a probability from 0 to 1", TO_NONE,
         0, TRAIN_ONLY, .section = S_FILES, .arg = "P",
         .text = "probability a text's label needs to join [{}]",
         .deflt = STR(DEFAULT_PSEUDO_THRESHOLD)),
    NAME("format", OPT_FORMAT, ac_text_format_names, TO_NONE, 0, PRETRAIN_ONLY,
         .section = S_FILES, .arg = "NAME", .text = "auto (by file name), csv or lines [{}]",
         .deflt = "auto"),
    TEXT("val-file", OPT_VAL_FILE, TRAIN_ONLY | RESUME_OK, .section = S_FILES, .arg = "FILE",
         .text = "validation CSV (default: a stratified --val-split share" MORE
                 "of the training file)"),
    TEXT("text-column", OPT_TEXT_COLUMN, BOTH, .section = S_FILES, .arg = "NAME", .join = 1,
         .text = "columns to read", .pretrain_text = "the text column of the CSV files"),
    TEXT("label-column", OPT_LABEL_COLUMN, TRAIN_ONLY, .section = S_FILES, .arg = "NAME",
         .text = "columns to read"),
    TEXT("resume", OPT_RESUME, RESUME_OK, .section = S_FILES, .arg = "DIR",
         .text = "continue an interrupted run from DIR/checkpoint with its" MORE
                 "settings and data files (TRAIN and --val-file may be given" MORE
                 "if they moved; they must be the same data, and so must" MORE
                 "the texts --teacher chooses again from --unlabelled; a" MORE
                 "run that split its training file takes no --val-file)",
         .pretrain_text = "continue an interrupted run from DIR/checkpoint (the text" MORE
                          "files may be given if they moved; same bytes)"),
    /* Search (checked by cli_autotune_check) */
    TEXT("autotune", OPT_AUTOTUNE, TRAIN_ONLY, .section = S_SEARCH, .arg = "BUDGET",
         .text = "search the training recipe on the validation rows within" MORE
                 "BUDGET, a time (90s, 5m, 1.5h) or optimizer steps" MORE
                 "(20000steps: the same seed gives the same model). Trial 1" MORE
                 "trains the options as given and always ends; then, at" MORE
                 "one member, one setting at a time changes (the NB start" MORE
                 "of the wide path, --epochs, --ema, --lr, --wide, --crop," MORE
                 "--dropout; one given as an option stays, unless as" MORE
                 "auto), last the best with 3 --members. The best on" MORE
                 "validation goes to DIR, which must be new or empty, with" MORE
                 "the trials in DIR/autotune.json; with --refit (auto:" MORE
                 "short texts) it is then trained again on every row, after" MORE
                 "the budget. Ctrl-C keeps the best trial so far; a search" MORE
                 "cannot be resumed"),
    /* Masking */
    SET("mask-frac", "training.mask_frac", PRETRAIN_ONLY, .section = S_MASKING,
        .text = "share of the tokens predicted, 0 < X < 1 [{}]"),
    /* Training */
    SET("epochs", "training.epochs", BOTH, .section = S_TRAINING,
        .text = "passes over the training rows [{}]", .note = epochs_auto,
        .pretrain_text = "passes over the texts [{}]", .pretrain_deflt = "4"),
    SET("batch-size", "training.batch_size", BOTH, .section = S_TRAINING,
        .text = "reviews per step [{}]", .pretrain_text = "texts per step [{}]"),
    SET("micro-batch", "training.micro_batch", BOTH, .section = S_TRAINING,
        .text = "rows of a micro-batch: a step's batch is cut into" MORE
                "micro-batches by row index, their gradients summed" MORE
                "exactly (the same model for any number of processes" MORE
                "under mpirun, at most one per micro-batch) [{}]"),
    SET("lr", "training.lr", BOTH, .section = S_TRAINING,
        .text = "peak learning rate of AdamW [{}]"),
    SET("schedule", "training.schedule", BOTH, .section = S_TRAINING,
        .text = "{names} decay after warmup [{}]"),
    /* a fraction sets training.warmup_frac, a step count optim.warmup_steps */
    {"warmup", OPT_WARMUP, V_WARMUP, 0, 0, 0, 1e15, 0,
     "a fraction 0 <= X < 1, or a whole number of steps", NULL, TO_NONE, 0, BOTH, NULL,
     {.section = S_TRAINING, .arg = "X",
      .text = "warmup: a fraction of all steps when X < 1, else a step" MORE "count [{}]",
      .shown = AT(training.warmup_frac), .shown_as = TO_DOUBLE}},
    SET("weight-decay", "training.weight_decay", BOTH, .section = S_TRAINING,
        .text = "decoupled weight decay of matrices [{}]"),
    SET("clip", "training.clip_norm", BOTH, .section = S_TRAINING,
        .text = "global gradient-norm clip, 0 = off [{}]"),
    SET("val-split", "training.val_split", BOTH, .section = S_TRAINING,
        .text = "share of the training file held out, 0 <= X < 1 [{}]",
        .pretrain_text = "share of the texts held out for the masked-token loss" MORE
                         "and accuracy, 0 <= X < 1 [{}]",
        .pretrain_deflt = STR(PRETRAIN_VAL_SPLIT)),
    SET("eval-every", "training.eval_every", BOTH, .section = S_TRAINING,
        .text = "steps between evaluations, 0 = once an epoch [{}]",
        .pretrain_deflt = STR(PRETRAIN_EVAL_EVERY)),
    SET("patience", "training.patience", BOTH, .section = S_TRAINING,
        .text = "evaluations without a better validation accuracy before" MORE
                "stopping, 0 = never [{}]",
        .pretrain_text = "evaluations without a better masked-token accuracy" MORE
                         "before stopping, 0 = never [{}]",
        .pretrain_deflt = "0"),
    SET("crop", "training.crop_frac", TRAIN_ONLY, .section = S_TRAINING,
        .text = "share of the reviews cut each epoch to a random span of" MORE
                "--crop-min..--crop-max tokens, so short texts are learnt" MORE "too [{}]"),
    SET("crop-min", "training.crop_min", TRAIN_ONLY, .section = S_TRAINING, .join = 1,
        .text = "span lengths of the crops [{}]"),
    SET("crop-max", "training.crop_max", TRAIN_ONLY, .section = S_TRAINING,
        .text = "span lengths of the crops [{}]"),
    SET("label-smoothing", "training.label_smoothing", TRAIN_ONLY, .section = S_TRAINING,
        .text = "target (1-X) on the label and X spread over all classes [{}]"),
    SET("token-dropout", "training.token_dropout", TRAIN_ONLY, .section = S_TRAINING,
        .text = "share of training tokens replaced by <unk> [{}]"),
    SET("members", "training.members", TRAIN_ONLY, .section = S_TRAINING,
        .text = "train N models from the same initial weights, each" MORE
                "with its own shuffle, crops and dropout, and keep the" MORE
                "mean of their weights (the best member instead if" MORE
                "the mean reads below every member on validation):" MORE
                "a model of the usual size, N times the training;" MORE "1 = one model [{}]",
        .note = members_auto),
    SET("refit", "training.refit", TRAIN_ONLY, .section = S_TRAINING,
        .text = "1: once the run has chosen its epochs on the validation" MORE
                "rows, train again from the start on every row for that" MORE
                "many epochs and keep that model (the validation figures" MORE
                "stay the first run's); only with rows split by" MORE
                "--val-split. 0: keep the model chosen on validation [{}]",
        .note = refit_auto),
    SET("wide-nb", "training.wide_nb", TRAIN_ONLY, .section = S_TRAINING,
        .text = "start the wide path at X/2 times each class's naive" MORE
                "Bayes log-count ratio from the training rows" MORE
                "(Wang & Manning 2012) instead of zeros; 0 = zeros" MORE "[{}]",
        .note = wide_nb_auto),
    SET("nbsvm", "training.nbsvm", TRAIN_ONLY, .section = S_TRAINING,
        .text = "fit NBSVM (a linear SVM on the wide path's n-grams" MORE
                "scaled by their naive Bayes ratios; Wang & Manning" MORE
                "2012) on the training rows and add X times its scores" MORE
                "to the network's log-probabilities; 0 = none [{}]",
        .note = nbsvm_auto),
    SET("ema", "training.ema", BOTH, .section = S_TRAINING,
        .text = "evaluate and save a moving average of the weights with" MORE
                "decay X per step; 0 = the weights themselves [{}]",
        .note = ema_auto, .pretrain_deflt = "0"),
    INT("max-steps", OPT_MAX_STEPS, 0, LONG_MAX, "an integer >= 0", TO_NONE, 0, RESUME_OK,
        .section = S_TRAINING, .arg = "N",
        .text = "stop after N steps in all, 0 = no limit; the schedule still" MORE
                "spans all epochs, so the run can be resumed and continued"),
    FLAG("keep-checkpoint", OPT_KEEP_CHECKPOINT, RESUME_OK, .section = S_TRAINING,
         .text = "keep checkpoint/'s weights, AdamW moments and average when" MORE
                 "the run finishes (by default they go: nothing can resume" MORE
                 "a finished run, and they are 4-5 times the model)"),
    {"seed", OPT_SEED, V_SEED, 0, 0, 0, 0, 0, "an integer from 0 to 18446744073709551615", NULL,
     TO_U64, AT(training.seed), BOTH, NULL,
     {.section = S_TRAINING, .arg = "N",
      .text = "seed of every random choice; the same seed gives the same" MORE
              "model bitwise, whatever --threads [{}]"}},
    INT("threads", OPT_THREADS, 1, 4096, "an integer from 1 to 4096", TO_NONE, 0, RESUME_OK,
        .section = S_TRAINING, .arg = "N", .text = "threads to use [{}]", .deflt = "all cores"),
    /* Model and tokenizer */
    SET("layers", "model.n_layers", BOTH, .section = S_MODEL, .text = "encoder layers [{}]"),
    SET("d-model", "model.d_model", BOTH, .section = S_MODEL, .text = "model width [{}]"),
    SET("heads", "model.n_heads", BOTH, .section = S_MODEL,
        .text = "attention heads, dividing --d-model [{}]"),
    SET("ff", "model.d_ff", BOTH, .section = S_MODEL, .text = "feed-forward width [{}]"),
    SET("dropout", "model.dropout", BOTH, .section = S_MODEL,
        .text = "dropout probability, 0 <= X < 1 [{}]"),
    SET("pooling", "model.pooling", BOTH, .section = S_MODEL, .text = "{names} [{}]",
        .pretrain_text = "cls: the vocabulary gets <cls> and every text starts with it" MORE
                         "(for a classifier that pools from it); max" MORE
                         "or mean: it does not [{}]"),
    SET("positions", "model.positions", BOTH, .section = S_MODEL,
        .text = "{names};" MORE "sinusoidal: the course's fixed table [{}]"),
    SET("ngrams", "model.ngram_order", BOTH, .section = S_MODEL,
        .text = "1: words only; 2: + hashed word bigrams; 3: + trigrams [{}]"),
    SET("ngram-buckets", "model.ngram_buckets", BOTH, .section = S_MODEL,
        .text = "rows of the hashed n-gram table, with --ngrams 2 or 3 [{}]"),
    SET("wide", "model.wide_order", TRAIN_ONLY, .section = S_MODEL,
        .text = "the wide path: a weight per class for each distinct" MORE
                "hashed word n-gram up to length N, added to the" MORE "logits; 0: none [{}]",
        .note = wide_auto),
    SET("wide-buckets", "model.wide_buckets", TRAIN_ONLY, .section = S_MODEL,
        .text = "rows of the wide path's hashed table [{}]", .note = wide_buckets_auto),
    SET("wide-norm", "model.wide_norm", TRAIN_ONLY, .section = S_MODEL,
        .text = "the wide path's sum times (" STR(AC_WIDE_NORM_REF) " / max(n, " STR(
                    AC_WIDE_NORM_FLOOR) "))^X for a" MORE
                "text of n distinct n-grams, so that short texts count;" MORE
                "0: the plain sum [{}]"),
    SET("max-len", "model.max_len", BOTH, .section = S_MODEL,
        .text = "tokens per review, longer ones are truncated [{}]",
        .pretrain_text = "tokens per text, longer ones are truncated [{}]"),
    SET("truncation", "tokenizer.truncation", BOTH, .section = S_MODEL,
        .text = "{names}: which tokens a long review keeps [{}]",
        .pretrain_text = "{names}: which tokens a long text keeps [{}]"),
    /* sets training.vocab_max, and model.vocab_size with it (train_apply_overrides) */
    SET("vocab-size", "training.vocab_max", BOTH, .section = S_MODEL,
        .text = "vocabulary size including <pad>, <unk> (and <cls>) [{}]",
        .pretrain_text = "vocabulary size including <pad>, <unk> (and <cls>, <mask>) [{}]"),
    SET("min-count", "training.min_count", BOTH, .section = S_MODEL,
        .text = "minimum count of a vocabulary token [{}]",
        .note = min_count_auto, .pretrain_deflt = STR(AC_ADAPT_LONG_MIN_COUNT)),
    /* Output */
    FLAG("quiet", OPT_QUIET, RESUME_OK, .short_name = 'q', .section = S_OUTPUT,
         .text = "print nothing but errors"),
    FLAG("help", OPT_HELP, RESUME_OK, .short_name = 'h', .section = S_OUTPUT,
         .text = "this text"),
};

#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))
_Static_assert(sizeof OPTIONS / sizeof OPTIONS[0] <= TRAIN_MAX_OPTIONS,
               "train_args has a value for every row of OPTIONS");

/* getopt's code of row k: its id, or for a row without one (a setting)
 * OPT_END + k. */
static int getopt_code(int k)
{
    return OPTIONS[k].id ? OPTIONS[k].id : OPT_END + k;
}

/* The row getopt's code (or short name) c stands for, or -1. */
static int row_of_code(int c)
{
    if (c >= OPT_END && c < OPT_END + N_OPTIONS)
        return c - OPT_END;
    for (int k = 0; k < N_OPTIONS; k++)
        if (OPTIONS[k].id ? OPTIONS[k].id == c : 0)
            return k;
    for (int k = 0; k < N_OPTIONS; k++)
        if (c < 256 && OPTIONS[k].help.short_name == c)
            return k;
    return -1;
}

/* Where row k's value is: by id, or by row for a setting. */
static opt_value *value_of(train_args *a, int k)
{
    return OPTIONS[k].id ? &a->v[OPTIONS[k].id] : &a->setting[k];
}

static const opt_value *given_value(const train_args *a, int k)
{
    return OPTIONS[k].id ? &a->v[OPTIONS[k].id] : &a->setting[k];
}

const opt_value *train_setting(const train_args *a, const char *key)
{
    for (int k = 0; k < N_OPTIONS; k++)
        if (OPTIONS[k].key && strcmp(OPTIONS[k].key, key) == 0)
            return &a->setting[k];
    return NULL;
}

/* Whether the option that sets key was given. */
static int given(const train_args *a, const char *key)
{
    const opt_value *x = train_setting(a, key);
    return x && x->set;
}

/* A bound in a usage error: 10^k for large powers of ten. */
static void bound_words(char *out, size_t n, double x, int integer)
{
    double k = x >= 1e6 ? round(log10(x)) : 0;
    if (k > 0 && x == pow(10, k) && (!integer || k >= 9))
        snprintf(out, n, "10^%d", (int)k);
    else
        snprintf(out, n, integer ? "%.0f" : "%g", x);
}

/* A row as the parser and the help use it: for a setting (V_SETTING), the
 * kind, values (a range or names), words, field and type of its
 * config.json key, and whether it takes "auto", so that an option and its
 * key take the same values. */
typedef struct {
    option_spec o;
    int auto_ok;
    char words[112];
} resolved_option;

static int resolve(const option_spec *row, resolved_option *r)
{
    r->o = *row;
    r->auto_ok = 0;
    if (row->kind != V_SETTING)
        return 0;
    ac_setting st;
    if (ac_config_setting(row->key, &st))
        return -1;
    option_spec *o = &r->o;
    o->field = st.offset;
    r->auto_ok = st.auto_ok;
    if (st.type == AC_SETTING_NAME) {
        o->kind = V_NAME;
        o->names = st.names;
        o->to = TO_INT; /* an enum is stored as an int */
        if (!o->help.arg)
            o->help.arg = "NAME";
        return 0;
    }
    static const target to[] = {[AC_SETTING_INT] = TO_INT,     [AC_SETTING_I32] = TO_I32,
                                [AC_SETTING_LONG] = TO_LONG,   [AC_SETTING_I64] = TO_I64,
                                [AC_SETTING_FLOAT] = TO_FLOAT, [AC_SETTING_DOUBLE] = TO_DOUBLE};
    const int integer = st.type != AC_SETTING_FLOAT && st.type != AC_SETTING_DOUBLE;
    o->to = to[st.type];
    o->open = (st.lo_open ? LO_OPEN : 0) | (st.hi_open ? HI_OPEN : 0);
    if (!o->help.arg)
        o->help.arg = integer ? (st.auto_ok ? "N|auto" : "N") : (st.auto_ok ? "X|auto" : "X");
    char lo[32], hi[32];
    bound_words(lo, sizeof lo, st.lo, integer);
    bound_words(hi, sizeof hi, st.hi, integer);
    const char *or_auto = st.auto_ok ? ", or auto" : "";
    if (integer) {
        o->kind = V_INT;
        o->ilo = (long)st.lo;
        o->ihi = (long)st.hi;
        snprintf(r->words, sizeof r->words, "an integer from %s to %s%s", lo, hi, or_auto);
    } else {
        o->kind = V_REAL;
        o->lo = st.lo;
        o->hi = st.hi;
        if (o->open)
            snprintf(r->words, sizeof r->words, "a number with %s %s X %s %s%s", lo,
                     st.lo_open ? "<" : "<=", st.hi_open ? "<" : "<=", hi, or_auto);
        else
            snprintf(r->words, sizeof r->words, "a number from %s to %s%s", lo, hi, or_auto);
    }
    o->expected = r->words;
    return 0;
}

static int shown_in(const option_spec *o, cli_training_kind kind)
{
    return o->help.text && !(o->flags & (kind == CLI_PRETRAIN ? TRAIN_ONLY : PRETRAIN_ONLY));
}

/* The value of the field r sets (or, for a row that sets none, the field
 * its help shows) in c, in words: "auto" for AC_AUTO where the key takes it. */
static void value_words(const resolved_option *r, const ac_config *c, char *out, size_t n)
{
    const option_spec *o = &r->o;
    const size_t at = o->to == TO_NONE ? o->help.shown : o->field;
    const int as = o->to == TO_NONE ? o->help.shown_as : (int)o->to;
    const void *field = (const char *)c + at;
    if (o->kind == V_NAME) {
        snprintf(out, n, "%s", ac_names_name(o->names, *(const int *)field));
        return;
    }
    int is_auto = 0;
    switch (as) {
    case TO_INT: is_auto = *(const int *)field == AC_AUTO; break;
    case TO_I64: is_auto = *(const int64_t *)field == AC_AUTO; break;
    case TO_FLOAT: is_auto = *(const float *)field == AC_AUTO; break;
    case TO_DOUBLE: is_auto = *(const double *)field == AC_AUTO; break;
    default: break;
    }
    if (r->auto_ok && is_auto) {
        snprintf(out, n, "auto");
        return;
    }
    switch (as) {
    case TO_INT: snprintf(out, n, "%d", *(const int *)field); break;
    case TO_I32: snprintf(out, n, "%d", (int)*(const int32_t *)field); break;
    case TO_LONG: snprintf(out, n, "%ld", *(const long *)field); break;
    case TO_I64: snprintf(out, n, "%lld", (long long)*(const int64_t *)field); break;
    case TO_FLOAT: snprintf(out, n, "%g", (double)*(const float *)field); break;
    case TO_DOUBLE: snprintf(out, n, "%g", *(const double *)field); break;
    case TO_U64: snprintf(out, n, "%llu", (unsigned long long)*(const uint64_t *)field); break;
    default: snprintf(out, n, "?"); break;
    }
}

/* Bytes of a field of the given type. */
static size_t field_size(target to)
{
    switch (to) {
    case TO_INT: return sizeof(int);
    case TO_I32: return sizeof(int32_t);
    case TO_LONG: return sizeof(long);
    case TO_I64: return sizeof(int64_t);
    case TO_FLOAT: return sizeof(float);
    case TO_DOUBLE: return sizeof(double);
    case TO_U64: return sizeof(uint64_t);
    default: return 0;
    }
}

/* The default of r in words, from the preset d (pretrain's own where it has them). */
static void default_words(const resolved_option *r, cli_training_kind kind, const ac_config *d,
                          char *out, size_t n)
{
    const option_help *h = &r->o.help;
    const char *words = kind == CLI_PRETRAIN && h->pretrain_deflt ? h->pretrain_deflt : h->deflt;
    if (words)
        snprintf(out, n, "%s", words);
    else
        value_words(r, d, out, n);
}

/* The text with "{}" as the default and "{names}" as the list of names. */
static void print_text(const char *text, const char *deflt, const ac_names *names)
{
    for (const char *p = text; *p; p++) {
        if (strncmp(p, "{}", 2) == 0) {
            fputs(deflt, stdout);
            p++;
        } else if (names && strncmp(p, "{names}", 7) == 0) {
            char list[160];
            fputs(ac_names_list(names, 0, list, sizeof list), stdout);
            p += 6;
        } else {
            putchar(*p);
        }
    }
}

/* "  -o, --out DIR" or "      --epochs N|auto" */
static int option_label(const option_spec *o, char *out, size_t n)
{
    const option_help *h = &o->help;
    char shortform[8] = "    ";
    if (h->short_name)
        snprintf(shortform, sizeof shortform, "-%c, ", h->short_name);
    return snprintf(out, n, "  %s--%s%s%s", shortform, o->name, h->arg ? " " : "",
                    h->arg ? h->arg : "");
}

/* Every section of the options of train or pretrain, from OPTIONS (each
 * checked by train_parse_args to resolve). */
static void print_options(cli_training_kind kind)
{
    ac_config d;
    ac_config_defaults(&d);
    for (int s = 0; s < N_SECTIONS; s++) {
        int printed = 0;
        for (int k = 0; k < N_OPTIONS; k++) {
            resolved_option r;
            if (OPTIONS[k].help.section != s || !shown_in(&OPTIONS[k], kind) ||
                resolve(&OPTIONS[k], &r))
                continue;
            const option_spec *o = &r.o;
            const option_help *h = &o->help;
            if (!printed++)
                printf("%s\n", SECTION_TITLE[s]);
            char label[160], deflt[64];
            int len = option_label(o, label, sizeof label);
            default_words(&r, kind, &d, deflt, sizeof deflt);
            resolved_option next;
            if (h->join && k + 1 < N_OPTIONS && shown_in(&OPTIONS[k + 1], kind) &&
                resolve(&OPTIONS[k + 1], &next) == 0) {
                /* "--crop-min N, --crop-max N" above their one text */
                char next_label[160], next_deflt[64], both[140];
                option_label(&next.o, next_label, sizeof next_label);
                default_words(&next, kind, &d, next_deflt, sizeof next_deflt);
                snprintf(both, sizeof both, "%s, %s", deflt, next_deflt);
                printf("%s, %s" MORE, label, next_label + 6);
                print_text(next.o.help.text, both, next.o.names);
                putchar('\n');
                k++;
                continue;
            }
            printf("%s%*s", label, len < 24 ? 25 - len : 2, "");
            print_text(kind == CLI_PRETRAIN && h->pretrain_text ? h->pretrain_text : h->text,
                       deflt, o->names);
            if (h->note && !(kind == CLI_PRETRAIN && h->pretrain_deflt)) {
                char note[300];
                h->note(note, sizeof note);
                printf(MORE "%s", note);
            }
            putchar('\n');
        }
        if (printed && s != S_OUTPUT)
            putchar('\n');
    }
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
           "sentiment/label/polarity) unless given. A header without a comma but with tabs or\n"
           "semicolons makes it tab-separated (TSV) or semicolon-separated.\n"
           "\n");
    cli_print_options(CLI_TRAIN);
}

void cli_print_options(cli_training_kind kind)
{
    print_options(kind);
    printf("\n"
           "Progress goes to stderr: a bar on a terminal, one line per evaluation otherwise.\n"
           "Ctrl-C (SIGINT) or SIGTERM finishes the current step, saves a checkpoint and exits\n"
           "with 130 or 143; `attnctl %s --resume DIR` then continues exactly where it was.\n"
           "A repeated SIGTERM waits for that checkpoint; a second Ctrl-C kills at once.\n"
           "SIGUSR1 stops the same way (exit 130). Under mpirun use it: `kill -USR1 PID` of\n"
           "mpirun reaches every process, while mpirun answers SIGINT/SIGTERM by killing them.\n"
           "Exit status: 0 done, 1 error, 2 usage error, 130/143 interrupted.\n",
           kind == CLI_PRETRAIN ? "pretrain" : "train");
}

static int bad_value(const char *cmd, const char *name, const char *arg, const char *expected)
{
    return cli_usage_error(cmd, "--%s: invalid value '%s' (expected %s)", name, arg, expected);
}

/* Validates row k's value into its place in a. Returns 0 or a usage exit status. */
static int parse_value(train_args *a, int k, const char *arg)
{
    resolved_option r;
    if (resolve(&OPTIONS[k], &r))
        return cli_error("internal: --%s names no config.json key", OPTIONS[k].name);
    const option_spec *o = &r.o;
    opt_value *v = value_of(a, k);
    long i;
    double d;
    int n;
    v->set = 1;
    v->s = arg;
    if (r.auto_ok && strcmp(arg, "auto") == 0) {
        /* stored as config.json's "auto" is: the trainer chooses */
        v->is_auto = 1;
        v->i = AC_AUTO;
        v->d = AC_AUTO;
        return 0;
    }
    switch (o->kind) {
    case V_FLAG:
        break;
    case V_TEXT:
        if (arg[0] == '\0')
            return cli_usage_error(a->cmd, "--%s: empty value", o->name);
        break;
    case V_INT:
        if (cli_parse_int(arg, o->ilo, o->ihi, &i))
            return bad_value(a->cmd, o->name, arg, o->expected);
        v->i = i;
        break;
    case V_REAL:
        if (cli_parse_double(arg, o->lo, o->hi, &d) || ((o->open & LO_OPEN) && !(d > o->lo)) ||
            ((o->open & HI_OPEN) && !(d < o->hi)))
            return bad_value(a->cmd, o->name, arg, o->expected);
        v->d = d;
        break;
    case V_NAME: {
        char names[160];
        if (ac_names_parse(o->names, arg, &n))
            return bad_value(a->cmd, o->name, arg,
                             ac_names_list(o->names, 0, names, sizeof names));
        v->i = n;
        break;
    }
    case V_SEED:
        if (cli_parse_u64(arg, &v->u))
            return bad_value(a->cmd, o->name, arg, o->expected);
        break;
    case V_WARMUP:
        if (cli_parse_double(arg, o->lo, o->hi, &d) || (d >= 1 && d != floor(d)))
            return bad_value(a->cmd, o->name, arg, o->expected);
        v->d = d;
        break;
    case V_SETTING: /* resolved to V_INT, V_REAL or V_NAME */
        break;
    }
    return 0;
}

int train_parse_args(train_args *a, cli_training_kind kind, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->cmd = kind == CLI_PRETRAIN ? "pretrain" : "train";
    for (int k = 0; k < N_OPTIONS; k++) {
        resolved_option r;
        if (resolve(&OPTIONS[k], &r))
            return cli_error("internal: --%s names no numeric or enum config.json key (%s)",
                             OPTIONS[k].name, OPTIONS[k].key);
    }
    optind = 0; /* GNU: full reinitialisation */
    opterr = 0;
    struct option long_options[N_OPTIONS + 1];
    for (int k = 0; k < N_OPTIONS; k++)
        long_options[k] = (struct option){OPTIONS[k].name,
                                          OPTIONS[k].kind == V_FLAG ? no_argument
                                                                    : required_argument,
                                          NULL, getopt_code(k)};
    long_options[N_OPTIONS] = (struct option){NULL, 0, NULL, 0};
    char short_options[2 * N_OPTIONS + 2] = ":"; /* ":o:c:qh" */
    for (int k = 0, n = 1; k < N_OPTIONS; k++) {
        if (!OPTIONS[k].help.short_name)
            continue;
        short_options[n++] = OPTIONS[k].help.short_name;
        if (OPTIONS[k].kind != V_FLAG)
            short_options[n++] = ':';
        short_options[n] = '\0';
    }
    const unsigned other_only = kind == CLI_PRETRAIN ? TRAIN_ONLY : PRETRAIN_ONLY;
    int c;
    while ((c = getopt_long(argc, argv, short_options, long_options, NULL)) != -1) {
        int rc;
        switch (c) {
        case ':':
            return cli_usage_error(a->cmd, "option '%s' needs a value", argv[optind - 1]);
        case '?':
            if (optopt)
                return cli_usage_error(a->cmd, "unknown option '-%c'", optopt);
            return cli_usage_error(a->cmd, "unknown option '%s'", argv[optind - 1]);
        default: break;
        }
        const int k = row_of_code(c);
        if (k < 0)
            return cli_error("internal: getopt returned %d", c);
        if (OPTIONS[k].flags & other_only)
            return cli_usage_error(a->cmd, "--%s is an option of attnctl %s only",
                                   OPTIONS[k].name, kind == CLI_PRETRAIN ? "train" : "pretrain");
        if ((rc = parse_value(a, k, optarg)) != 0)
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
        for (int k = 0; k < N_OPTIONS; k++)
            if (given_value(a, k)->set && !(OPTIONS[k].flags & RESUME_OK))
                return cli_usage_error(a->cmd,
                                       "--%s cannot be combined with --resume (a resumed run "
                                       "keeps the settings of its checkpoint)",
                                       OPTIONS[k].name);
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
        resolved_option r;
        const opt_value *x = given_value(a, k);
        if (!x->set || resolve(&OPTIONS[k], &r)) /* parse_value resolved it */
            continue;
        const option_spec *o = &r.o;
        void *field = (char *)c + o->field;
        switch (o->to) {
        case TO_NONE: break;
        case TO_INT: *(int *)field = (int)x->i; break;
        case TO_I32: *(int32_t *)field = (int32_t)x->i; break;
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
    if (given(a, "training.vocab_max"))
        c->model.vocab_size = (int)t->vocab_max; /* --vocab-size sets both */
    if (a->kind == CLI_PRETRAIN) {
        /* What pretraining does not use is 0 in its config.json; its
         * evaluation defaults are its own (see PRETRAIN_*). */
        t->crop_frac = 0.0;
        t->label_smoothing = 0.0f;
        t->token_dropout = 0.0f;
        t->members = 1; /* one encoder: a weight average is a classifier's */
        if (!given(a, "training.ema"))
            t->ema = 0.0f; /* the weight average is measured for classifiers only */
        c->model.wide_order = 0; /* a classifier's head: the fine-tuning run's choice */
        c->model.wide_buckets = 0;
        c->model.wide_norm = 0.0f;
        if (!given(a, "training.val_split")) t->val_split = PRETRAIN_VAL_SPLIT;
        if (!given(a, "training.eval_every")) t->eval_every = PRETRAIN_EVAL_EVERY;
        if (!given(a, "training.patience")) t->patience = 0;
    }
}

/* train --init DIR: the encoder's shape, vocabulary and tokenizer are DIR's
 * (ac_train_init_config). An option whose value that replaces is a usage
 * error; the preset's values are simply replaced. */
/* The keys of the --config file that the model of --init replaces with
 * other values (both configurations compared as config.json writes them)
 * are named in one warning: the file's recipe is kept, its model shape and
 * tokenizer are not. 0, or an exit status. */
static int warn_config_keys_replaced(const ac_config *wanted, const ac_config *c,
                                     const train_args *a)
{
    const char *path = a->v[OPT_CONFIG].s;
    char *text = NULL, *want_text = ac_config_to_json(wanted), *have_text = ac_config_to_json(c);
    size_t len;
    ac_err err;
    cJSON *file = NULL, *want = NULL, *have = NULL;
    ac_strbuf list;
    ac_strbuf_init(&list);
    int rc = 0;
    if (!want_text || !have_text) {
        rc = cli_error("out of memory");
        goto done;
    }
    if (ac_read_file(path, (size_t)1 << 24, &text, &len, &err)) {
        rc = cli_error("%s", err.msg);
        goto done;
    }
    file = cJSON_Parse(text);
    want = cJSON_Parse(want_text);
    have = cJSON_Parse(have_text);
    if (!file || !want || !have) { /* the file was loaded before: only memory can fail */
        rc = cli_error("%s: cannot read it again as JSON", path);
        goto done;
    }
    const cJSON *section;
    cJSON_ArrayForEach(section, file) {
        const cJSON *key;
        if (!cJSON_IsObject(section))
            continue;
        cJSON_ArrayForEach(key, section) {
            const cJSON *w = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(want, section->string), key->string);
            const cJSON *h = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(have, section->string), key->string);
            if (!w || !h || cJSON_Compare(w, h, 1))
                continue;
            char *from = cJSON_PrintUnformatted(w), *to = cJSON_PrintUnformatted(h);
            ac_strbuf_printf(&list, "%s%s.%s %s -> %s", list.len ? ", " : "", section->string,
                              key->string, from ? from : "?", to ? to : "?");
            free(from);
            free(to);
        }
    }
    if (list.len && !list.failed)
        fprintf(stderr, "attnctl: warning: the encoder, its vocabulary and tokenizer come from "
                        "%s, which replaces what %s sets: %s\n",
                a->v[OPT_INIT].s, path, list.data);
done:
    ac_strbuf_free(&list);
    cJSON_Delete(file);
    cJSON_Delete(want);
    cJSON_Delete(have);
    free(text);
    free(want_text);
    free(have_text);
    return rc;
}

int train_apply_init(ac_config *c, const train_args *a)
{
    ac_config wanted = *c; /* shallow: labels are not touched */
    ac_err err;
    if (ac_train_init_config(c, a->v[OPT_INIT].s, &err))
        return cli_error("%s", err.msg);
    for (int k = 0; k < N_OPTIONS; k++) {
        resolved_option r;
        const opt_value *x = given_value(a, k);
        if (!x->set || !OPTIONS[k].key || resolve(&OPTIONS[k], &r))
            continue;
        if (memcmp((const char *)&wanted + r.o.field, (const char *)c + r.o.field,
                   field_size(r.o.to)) == 0)
            continue;
        char have[64];
        value_words(&r, c, have, sizeof have);
        return cli_usage_error("train",
                               "--%s %s contradicts the model in %s (%s %s): the encoder, its "
                               "vocabulary and tokenizer come from there",
                               OPTIONS[k].name, x->s, a->v[OPT_INIT].s, OPTIONS[k].key, have);
    }
    int rc = a->v[OPT_CONFIG].set ? warn_config_keys_replaced(&wanted, c, a) : 0;
    if (rc)
        return rc;
    const opt_value *min_count = train_setting(a, "training.min_count");
    if (min_count && min_count->set && !min_count->is_auto)
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
    /* The refit trains on the training file's rows, the validation rows split
     * from it included; a --val-file's rows are not training rows. */
    if (a->v[OPT_VAL_FILE].set && c->training.refit == 1)
        return cli_usage_error(a->cmd, "--refit 1 trains again on the rows --val-split takes "
                                       "from the training file; with --val-file use --refit 0");
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
