/* The options of attnctl train and pretrain (train_options.c): parsed into
 * train_args, then applied to the configuration of the run (train.c). */
#ifndef ATTNCTL_CLI_TRAIN_OPTIONS_H
#define ATTNCTL_CLI_TRAIN_OPTIONS_H

#include <stdint.h>

#include "attnctl/io.h"
#include "cli.h"

enum {
    OPT_CONFIG = 256, OPT_OUT, OPT_EPOCHS, OPT_BATCH_SIZE, OPT_LR, OPT_SCHEDULE, OPT_WARMUP,
    OPT_WEIGHT_DECAY, OPT_CLIP, OPT_DROPOUT, OPT_MAX_LEN, OPT_TRUNCATION, OPT_VOCAB_SIZE,
    OPT_MIN_COUNT, OPT_POOLING, OPT_LAYERS, OPT_D_MODEL, OPT_HEADS, OPT_FF, OPT_VAL_SPLIT,
    OPT_VAL_FILE, OPT_PATIENCE, OPT_EVAL_EVERY, OPT_SEED, OPT_THREADS, OPT_TEXT_COLUMN,
    OPT_LABEL_COLUMN, OPT_MAX_STEPS, OPT_RESUME, OPT_QUIET, OPT_HELP, OPT_POSITIONS, OPT_NGRAMS,
    OPT_NGRAM_BUCKETS, OPT_CROP, OPT_CROP_MIN, OPT_CROP_MAX, OPT_LABEL_SMOOTHING, OPT_TOKEN_DROPOUT,
    OPT_EMA, OPT_INIT, OPT_MASK_FRAC, OPT_FORMAT, OPT_MICRO_BATCH, OPT_WIDE, OPT_WIDE_BUCKETS,
    OPT_WIDE_NORM, OPT_WIDE_NB, OPT_TEACHER, OPT_UNLABELLED, OPT_PSEUDO_THRESHOLD, OPT_KEEP_CHECKPOINT,
    OPT_MEMBERS, OPT_AUTOTUNE, OPT_REFIT, OPT_END
};

/* One parsed option value; `set` says it was given. */
typedef struct {
    int set;
    long i;
    double d;
    uint64_t u;
    const char *s;
} opt_value;

/* A text a teacher gives at least this probability joins the training rows. */
#define DEFAULT_PSEUDO_THRESHOLD 0.9

/* The parsed command line of train or pretrain. */
typedef struct {
    opt_value v[OPT_END];
    cli_training_kind kind;
    const char *cmd;          /* "train" or "pretrain" */
    char **paths;             /* positional: the data files */
    int n_paths;
    const char *train_path;   /* train: paths[0] */
} train_args;

/* Parses argv (argv[0]: the command) into a: 0, or a usage exit status. */
int train_parse_args(train_args *a, cli_training_kind kind, int argc, char **argv);
/* attnctl train --help. */
void train_print_help(void);
/* Applies the single-field overrides on top of the preset. */
void train_apply_overrides(ac_config *c, const train_args *a);
/* train --init DIR: the encoder's settings become DIR's; 0 or an exit status. */
int train_apply_init(ac_config *c, const train_args *a);
/* Checks the configuration before any data is read; 0 or an exit status. */
int train_validate_config(const ac_config *c, const train_args *a);

#endif
