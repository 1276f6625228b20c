/* Shared pieces of the command line. Only src/cli prints or exits. */
#ifndef ATTNCTL_CLI_H
#define ATTNCTL_CLI_H

#include <stdint.h>
#include <stdio.h>

#define CLI_EXIT_OK 0
#define CLI_EXIT_RUNTIME 1
#define CLI_EXIT_USAGE 2
#define CLI_EXIT_SIGINT 130  /* 128 + SIGINT, as shells report it */
#define CLI_EXIT_SIGTERM 143 /* 128 + SIGTERM */

/* Subcommands: argv[0] is the subcommand name. Return the exit status. */
int cmd_train(int argc, char **argv);
int cmd_pretrain(int argc, char **argv);

/* train and pretrain share one option parser (src/cli/train_options.c) and one
 * run (src/cli/train.c). */
typedef enum { CLI_TRAIN = 0, CLI_PRETRAIN = 1 } cli_training_kind;
void cli_pretrain_help(void); /* src/cli/pretrain.c */
/* Their options' --help, from the option table (src/cli/train_options.c). */
void cli_print_options(cli_training_kind kind);
int cmd_eval(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
/* The machine's FP32 peak (src/cli/machine.c): cores x 2 FMA units x lanes x 2 flops x
 * the highest clock found. */
typedef struct {
    int cores;
    double ghz;
    int lanes;         /* FP32 lanes of the widest FMA */
    const char *isa;
    double gflops;     /* 0 when the clock is unknown */
    char how[256];
} machine_peak;
void cli_machine_peak(machine_peak *mp);
int cli_cpu_has_flag(const char *flag); /* of the first CPU in /proc/cpuinfo */

/* bench --model: the inference speed of up to CLI_BENCH_MAX_MODELS model
 * directories on the reviews of data_path (src/cli/bench_models.c). */
#define CLI_BENCH_MAX_MODELS 8
int cli_bench_models(const char *const *dirs, int n, const char *data_path,
                     const char *text_column, int json);

/* "attnctl: error: ..." on stderr; returns CLI_EXIT_RUNTIME. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "attnctl CMD: ..." plus "Try 'attnctl CMD --help'." on stderr; returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Columns a UTF-8 string takes on a terminal (a wide character counts 2, a
 * combining mark 0; a byte that is not UTF-8 counts 1). */
int cli_display_width(const char *s);
/* s padded with spaces to width columns (right-aligned with align_right). */
void cli_print_padded(FILE *f, const char *s, int width, int align_right);
/* Parse helpers: 0 ok, -1 not a valid number in range. */
int cli_parse_int(const char *s, long lo, long hi, long *out);
int cli_parse_double(const char *s, double lo, double hi, double *out);
/* Unsigned 64-bit decimal (e.g. --seed): 0 ok, -1 invalid. */
int cli_parse_u64(const char *s, uint64_t *out);
/* Number of threads to use (--threads N; n <= 0: all cores); sets OpenMP. */
/* Threads when --threads is not given: the cores of the machine. */
int cli_default_threads(void);
void cli_set_threads(int n);
/* Blocks (1) or unblocks (0) SIGINT and SIGTERM for this process. */
void cli_block_stop_signals(int block);

#endif
