/* The options of attnctl train and pretrain (train_options.c): parsed into
 * train_args, then applied to the configuration of the run (train.c). */
#ifndef ATTNCTL_CLI_TRAIN_OPTIONS_H
#define ATTNCTL_CLI_TRAIN_OPTIONS_H

#include <stdint.h>

#include "attnctl/io.h"
#include "cli.h"

/* The options the command reads itself, by id. An option that sets a
 * config.json key has no id: its row in the table names the key, and the
 * code that asks for it asks by key (train_setting). */
enum {
    OPT_CONFIG = 256, OPT_OUT, OPT_WARMUP, OPT_VAL_FILE, OPT_SEED, OPT_THREADS, OPT_TEXT_COLUMN,
    OPT_LABEL_COLUMN, OPT_MAX_STEPS, OPT_RESUME, OPT_QUIET, OPT_HELP, OPT_INIT, OPT_FORMAT,
    OPT_TEACHER, OPT_UNLABELLED, OPT_PSEUDO_THRESHOLD, OPT_KEEP_CHECKPOINT, OPT_AUTOTUNE, OPT_END
};

/* One parsed option value; `set` says it was given, `is_auto` that it was
 * given as "auto" (then i or d is AC_AUTO, as config.json stores it). */
typedef struct {
    int set;
    int is_auto;
    long i;
    double d;
    uint64_t u;
    const char *s;
} opt_value;

/* Room for the rows of the option table (train_options.c checks it). */
#define TRAIN_MAX_OPTIONS 80

/* A text a teacher gives at least this probability joins the training rows. */
#define DEFAULT_PSEUDO_THRESHOLD 0.9

/* The parsed command line of train or pretrain. */
typedef struct {
    opt_value v[OPT_END];                 /* by id */
    opt_value setting[TRAIN_MAX_OPTIONS]; /* by row: the options that set a key */
    cli_training_kind kind;
    const char *cmd;          /* "train" or "pretrain" */
    char **paths;             /* positional: the data files */
    int n_paths;
    const char *train_path;   /* train: paths[0] */
} train_args;

/* Parses argv (argv[0]: the command) into a: 0, or a usage exit status. */
int train_parse_args(train_args *a, cli_training_kind kind, int argc, char **argv);
/* The value of the option that sets the config.json key ("training.ema"),
 * or NULL when no option sets it. */
const opt_value *train_setting(const train_args *a, const char *key);
/* attnctl train --help. */
void train_print_help(void);
/* Applies the single-field overrides on top of the preset. */
void train_apply_overrides(ac_config *c, const train_args *a);
/* train --init DIR: the encoder's settings become DIR's; 0 or an exit status. */
int train_apply_init(ac_config *c, const train_args *a);
/* Checks the configuration before any data is read; 0 or an exit status. */
int train_validate_config(const ac_config *c, const train_args *a);

#endif
