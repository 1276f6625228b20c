/* The options of attnctl train and pretrain: the table, their --help, the
 * parsing and checking of each value, and how they change the preset
 * configuration. Apart from running the command (train.c), since this part
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

static const struct option LONG_OPTIONS[] = {
    {"config", required_argument, NULL, OPT_CONFIG},
    {"out", required_argument, NULL, OPT_OUT},
    {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"batch-size", required_argument, NULL, OPT_BATCH_SIZE},
    {"micro-batch", required_argument, NULL, OPT_MICRO_BATCH},
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
    {"wide", required_argument, NULL, OPT_WIDE},
    {"wide-buckets", required_argument, NULL, OPT_WIDE_BUCKETS},
    {"wide-norm", required_argument, NULL, OPT_WIDE_NORM},
    /* training.wide_nb, the naive Bayes start of the wide path: off by default
     * and not in --help or attnctl.1 while it is being measured */
    {"wide-nb", required_argument, NULL, OPT_WIDE_NB},
    {"crop", required_argument, NULL, OPT_CROP},
    {"crop-min", required_argument, NULL, OPT_CROP_MIN},
    {"crop-max", required_argument, NULL, OPT_CROP_MAX},
    {"label-smoothing", required_argument, NULL, OPT_LABEL_SMOOTHING},
    {"token-dropout", required_argument, NULL, OPT_TOKEN_DROPOUT},
    {"ema", required_argument, NULL, OPT_EMA},
    {"members", required_argument, NULL, OPT_MEMBERS},
    {"init", required_argument, NULL, OPT_INIT},
    {"teacher", required_argument, NULL, OPT_TEACHER},
    {"unlabelled", required_argument, NULL, OPT_UNLABELLED},
    {"pseudo-threshold", required_argument, NULL, OPT_PSEUDO_THRESHOLD},
    {"mask-frac", required_argument, NULL, OPT_MASK_FRAC},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"keep-checkpoint", no_argument, NULL, OPT_KEEP_CHECKPOINT},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* Options of one command only. */
static const int TRAIN_ONLY[] = {OPT_VAL_FILE, OPT_LABEL_COLUMN, OPT_CROP, OPT_CROP_MIN,
                                 OPT_CROP_MAX, OPT_LABEL_SMOOTHING, OPT_TOKEN_DROPOUT, OPT_INIT,
                                 OPT_WIDE, OPT_WIDE_BUCKETS, OPT_WIDE_NORM, OPT_WIDE_NB, OPT_TEACHER,
                                 OPT_UNLABELLED,
                                 OPT_PSEUDO_THRESHOLD, OPT_MEMBERS};
static const int PRETRAIN_ONLY[] = {OPT_MASK_FRAC, OPT_FORMAT};

/* What a resumed run may still be given: anything else would break the
 * promise that it continues exactly as the original run would have. */
static const int RESUME_ALLOWED[] = {OPT_RESUME, OPT_OUT, OPT_MAX_STEPS, OPT_THREADS, OPT_QUIET,
                                     OPT_KEEP_CHECKPOINT,
                                     OPT_VAL_FILE, OPT_TEACHER, OPT_UNLABELLED, OPT_HELP};

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
    printf("Training (defaults in brackets):\n"
           "      --epochs N         passes over the %s [%d]\n"
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
           pretrain ? "texts" : "training rows", t->epochs, pretrain ? "texts" : "reviews",
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
           "                         decay X per step; 0 = the weights themselves [%g]\n"
           "      --max-steps N      stop after N steps in all, 0 = no limit; the schedule still\n"
           "                         spans all epochs, so the run can be resumed and continued\n"
           "      --keep-checkpoint  keep checkpoint/'s weights, AdamW moments and average when\n"
           "                         the run finishes (by default they go: nothing can resume\n"
           "                         a finished run, and they are 4-5 times the model)\n"
           "      --seed N           seed of every random choice; the same seed gives the same\n"
           "                         model bitwise, whatever --threads [%llu]\n"
           "      --threads N        threads to use [all cores]\n"
           "\n",
           pretrain ? 0.0 : (double)t->ema, (unsigned long long)t->seed);
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
    for (const struct option *o = LONG_OPTIONS; o->name; o++)
        if (o->val == id)
            return o->name;
    return "?";
}

static int bad_value(const char *cmd, int id, const char *arg, const char *expected)
{
    return cli_usage_error(cmd, "--%s: invalid value '%s' (expected %s)", option_name(id), arg,
                           expected);
}

_Static_assert(AC_MAX_MEMBERS == 64, "parse_value's --members message names the limit");

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
    case OPT_MEMBERS:
        if (cli_parse_int(arg, 1, AC_MAX_MEMBERS, &i))
            return bad_value(a->cmd, id, arg, "an integer from 1 to 64");
        v->i = i;
        break;
    case OPT_EPOCHS:
        if (cli_parse_int(arg, 1, 1000000, &i))
            return bad_value(a->cmd, id, arg, "an integer from 1 to 1000000");
        v->i = i;
        break;
    case OPT_BATCH_SIZE:
    case OPT_MICRO_BATCH:
        if (cli_parse_int(arg, 1, 65536, &i))
            return bad_value(a->cmd, id, arg, "an integer from 1 to 65536");
        v->i = i;
        break;
    case OPT_MAX_LEN:
        if (cli_parse_int(arg, 1, 65536, &i))
            return bad_value(a->cmd, id, arg, "an integer from 1 to 65536");
        v->i = i;
        break;
    case OPT_VOCAB_SIZE:
        if (cli_parse_int(arg, 3, 10000000, &i))
            return bad_value(a->cmd, id, arg, "an integer from 3 to 10000000");
        v->i = i;
        break;
    case OPT_MIN_COUNT:
        if (cli_parse_int(arg, 1, 1000000000000L, &i))
            return bad_value(a->cmd, id, arg, "an integer from 1 to 10^12");
        v->i = i;
        break;
    case OPT_LAYERS:
        if (cli_parse_int(arg, 1, AC_MAX_LAYERS, &i))
            return cli_usage_error(a->cmd, "--layers: invalid value '%s' (expected 1 to %d)", arg,
                                   AC_MAX_LAYERS);
        v->i = i;
        break;
    case OPT_D_MODEL:
    case OPT_HEADS:
    case OPT_FF:
        if (cli_parse_int(arg, 1, 65536, &i))
            return bad_value(a->cmd, id, arg, "an integer from 1 to 65536");
        v->i = i;
        break;
    case OPT_PATIENCE:
        if (cli_parse_int(arg, 0, 1000000, &i))
            return bad_value(a->cmd, id, arg, "an integer from 0 to 1000000");
        v->i = i;
        break;
    case OPT_EVAL_EVERY:
        if (cli_parse_int(arg, 0, 1000000000000L, &i))
            return bad_value(a->cmd, id, arg, "an integer from 0 to 10^12");
        v->i = i;
        break;
    case OPT_MAX_STEPS:
        if (cli_parse_int(arg, 0, LONG_MAX, &i))
            return bad_value(a->cmd, id, arg, "an integer >= 0");
        v->i = i;
        break;
    case OPT_THREADS:
        if (cli_parse_int(arg, 1, 4096, &i))
            return bad_value(a->cmd, id, arg, "an integer from 1 to 4096");
        v->i = i;
        break;
    case OPT_SEED:
        if (cli_parse_u64(arg, &v->u))
            return bad_value(a->cmd, id, arg, "an integer from 0 to 18446744073709551615");
        break;
    case OPT_LR:
        if (cli_parse_double(arg, 0, 10, &d) || !(d > 0))
            return bad_value(a->cmd, id, arg, "a number with 0 < X <= 10");
        v->d = d;
        break;
    case OPT_WARMUP:
        if (cli_parse_double(arg, 0, 1e15, &d) || (d >= 1 && d != floor(d)))
            return bad_value(a->cmd, id, arg, "a fraction 0 <= X < 1, or a whole number of steps");
        v->d = d;
        break;
    case OPT_WEIGHT_DECAY:
        if (cli_parse_double(arg, 0, 10, &d))
            return bad_value(a->cmd, id, arg, "a number from 0 to 10");
        v->d = d;
        break;
    case OPT_CLIP:
        if (cli_parse_double(arg, 0, 1e6, &d))
            return bad_value(a->cmd, id, arg, "a number from 0 (off) to 10^6");
        v->d = d;
        break;
    case OPT_POSITIONS: {
        ac_positions p;
        if (ac_positions_parse(arg, &p))
            return bad_value(a->cmd, id, arg, "learned, sinusoidal or none");
        v->i = p;
        break;
    }
    case OPT_NGRAMS:
        if (cli_parse_int(arg, 1, 3, &i))
            return bad_value(a->cmd, id, arg, "1, 2 or 3");
        v->i = i;
        break;
    case OPT_WIDE:
        if (cli_parse_int(arg, 0, 3, &i))
            return bad_value(a->cmd, id, arg, "0, 1, 2 or 3");
        v->i = i;
        break;
    case OPT_NGRAM_BUCKETS:
    case OPT_WIDE_BUCKETS:
        if (cli_parse_int(arg, 1, 16777216, &i))
            return bad_value(a->cmd, id, arg, "an integer from 1 to 16777216");
        v->i = i;
        break;
    case OPT_WIDE_NB:
        if (cli_parse_double(arg, 0, 100, &d))
            return bad_value(a->cmd, id, arg, "a number from 0 to 100");
        v->d = d;
        break;
    case OPT_CROP_MIN:
    case OPT_CROP_MAX:
        if (cli_parse_int(arg, 1, 65536, &i))
            return bad_value(a->cmd, id, arg, "an integer from 1 to 65536");
        v->i = i;
        break;
    case OPT_CROP:
    case OPT_WIDE_NORM:
        if (cli_parse_double(arg, 0, 1, &d))
            return bad_value(a->cmd, id, arg, "a number from 0 to 1");
        v->d = d;
        break;
    case OPT_DROPOUT:
    case OPT_LABEL_SMOOTHING:
    case OPT_TOKEN_DROPOUT:
    case OPT_EMA:
    case OPT_VAL_SPLIT:
        if (cli_parse_double(arg, 0, 1, &d) || d >= 1)
            return bad_value(a->cmd, id, arg, "a number with 0 <= X < 1");
        v->d = d;
        break;
    case OPT_SCHEDULE: {
        ac_schedule_kind k;
        if (ac_schedule_parse(arg, &k))
            return bad_value(a->cmd, id, arg, "cosine, linear or constant");
        v->i = k;
        break;
    }
    case OPT_POOLING: {
        ac_pooling p;
        if (ac_pooling_parse(arg, &p))
            return bad_value(a->cmd, id, arg, "max, mean or cls");
        v->i = p;
        break;
    }
    case OPT_TRUNCATION: {
        ac_truncation t;
        if (ac_truncation_parse(arg, &t))
            return bad_value(a->cmd, id, arg, "head, tail or head+tail");
        v->i = t;
        break;
    }
    case OPT_PSEUDO_THRESHOLD:
        if (cli_parse_double(arg, 0, 1, &d))
            return bad_value(a->cmd, id, arg, "a probability from 0 to 1");
        v->d = d;
        break;
    case OPT_MASK_FRAC:
        if (cli_parse_double(arg, 0, 1, &d) || !(d > 0 && d < 1))
            return bad_value(a->cmd, id, arg, "a number with 0 < X < 1");
        v->d = d;
        break;
    case OPT_FORMAT: {
        ac_text_format f;
        if (ac_text_format_parse(arg, &f))
            return bad_value(a->cmd, id, arg, "auto, csv or lines");
        v->i = f;
        break;
    }
    case OPT_CONFIG:
    case OPT_OUT:
    case OPT_VAL_FILE:
    case OPT_TEXT_COLUMN:
    case OPT_LABEL_COLUMN:
    case OPT_RESUME:
    case OPT_INIT:
    case OPT_TEACHER:
    case OPT_UNLABELLED:
        e = arg[0] == '\0';
        if (e)
            return cli_usage_error(a->cmd, "--%s: empty value", option_name(id));
        break;
    default:
        break;
    }
    return 0;
}

static int listed(const int *ids, size_t n, int id)
{
    for (size_t k = 0; k < n; k++)
        if (ids[k] == id)
            return 1;
    return 0;
}
#define LISTED(ids, id) listed(ids, sizeof ids / sizeof ids[0], id)

int train_parse_args(train_args *a, cli_training_kind kind, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->cmd = kind == CLI_PRETRAIN ? "pretrain" : "train";
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
            return cli_usage_error(a->cmd, "option '%s' needs a value", argv[optind - 1]);
        case '?':
            if (optopt)
                return cli_usage_error(a->cmd, "unknown option '-%c'", optopt);
            return cli_usage_error(a->cmd, "unknown option '%s'", argv[optind - 1]);
        default: break;
        }
        if (kind == CLI_PRETRAIN ? LISTED(TRAIN_ONLY, c) : LISTED(PRETRAIN_ONLY, c))
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
            if (a->v[id].set && !LISTED(RESUME_ALLOWED, id))
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
    if (v[OPT_EPOCHS].set) t->epochs = (int)v[OPT_EPOCHS].i;
    if (v[OPT_BATCH_SIZE].set) t->batch_size = (int)v[OPT_BATCH_SIZE].i;
    if (v[OPT_MICRO_BATCH].set) t->micro_batch = (int)v[OPT_MICRO_BATCH].i;
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
    if (v[OPT_WIDE].set) c->model.wide_order = (int)v[OPT_WIDE].i;
    if (v[OPT_WIDE_BUCKETS].set) c->model.wide_buckets = (int)v[OPT_WIDE_BUCKETS].i;
    if (v[OPT_WIDE_NORM].set) c->model.wide_norm = (float)v[OPT_WIDE_NORM].d;
    if (v[OPT_WIDE_NB].set) c->training.wide_nb = (float)v[OPT_WIDE_NB].d;
    if (v[OPT_CROP].set) c->training.crop_frac = v[OPT_CROP].d;
    if (v[OPT_CROP_MIN].set) c->training.crop_min = (int)v[OPT_CROP_MIN].i;
    if (v[OPT_CROP_MAX].set) c->training.crop_max = (int)v[OPT_CROP_MAX].i;
    if (v[OPT_LABEL_SMOOTHING].set) c->training.label_smoothing = (float)v[OPT_LABEL_SMOOTHING].d;
    if (v[OPT_TOKEN_DROPOUT].set) c->training.token_dropout = (float)v[OPT_TOKEN_DROPOUT].d;
    if (v[OPT_EMA].set) c->training.ema = (float)v[OPT_EMA].d;
    if (v[OPT_MEMBERS].set) c->training.members = (int)v[OPT_MEMBERS].i;
    if (v[OPT_MAX_LEN].set) c->model.max_len = (int)v[OPT_MAX_LEN].i;
    if (v[OPT_POOLING].set) c->model.pooling = (ac_pooling)v[OPT_POOLING].i;
    if (v[OPT_LAYERS].set) c->model.n_layers = (int)v[OPT_LAYERS].i;
    if (v[OPT_D_MODEL].set) c->model.d_model = (int)v[OPT_D_MODEL].i;
    if (v[OPT_HEADS].set) c->model.n_heads = (int)v[OPT_HEADS].i;
    if (v[OPT_FF].set) c->model.d_ff = (int)v[OPT_FF].i;
    if (v[OPT_TRUNCATION].set) c->tokenizer.truncation = (ac_truncation)v[OPT_TRUNCATION].i;
    if (v[OPT_MASK_FRAC].set) c->training.mask_frac = v[OPT_MASK_FRAC].d;
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
