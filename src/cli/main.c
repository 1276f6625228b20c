/* attnctl: the subcommand table, help and version. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE3__)
#include <pmmintrin.h>
#endif

#include "attnctl/blas.h"
#include "attnctl/io.h"
#include "cli.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command COMMANDS[] = {
    {"train", cmd_train, "build the vocabulary, train, keep the best model"},
    {"pretrain", cmd_pretrain, "pretrain the encoder as a masked LM on unlabelled text"},
    {"eval", cmd_eval, "accuracy, per-class P/R/F1, confusion matrix, AUC on a labelled CSV"},
    {"predict", cmd_predict, "one review a line in, one verdict a line out"},
    {"inspect", cmd_inspect, "attention maps of a text: JSON, SVG/HTML heatmap, terminal"},
    {"bench", cmd_bench, "measure training and inference speed"},
    {"quantize", cmd_quantize, "a smaller model: int8 weights, the wide table pruned"},
};
#define N_COMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

/* Commands that run long enough for a re-execution (about 10 ms) not to
 * matter, and whose speed depends on the variables below (eval reads whole
 * test sets). */
static int long_running(const char *name)
{
    return strcmp(name, "train") == 0 || strcmp(name, "pretrain") == 0 ||
           strcmp(name, "eval") == 0 || strcmp(name, "bench") == 0;
}

/* The environment the libraries read when they load, set unless the user set
 * it. OpenBLAS is loaded with dlopen afterwards (ac_blas_load,
 * include/attnctl/blas.h), so its variables need no re-execution:
 * - Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) does not recognise recent
 *   AVX-512 CPUs and falls back to older, much slower kernels (Haswell or
 *   even Prescott); only OPENBLAS_CORETYPE overrides its choice. Its SkylakeX
 *   kernels are also what its Cooperlake and SapphireRapids targets use for
 *   sgemm, so naming it on any CPU with these AVX-512 subsets loses nothing.
 * - OpenBLAS starts a pool of worker threads at load time that spin
 *   (sched_yield) next to attnctl's own OpenMP threads; on 2 cores a cold
 *   `predict` took 80 ms instead of 20. Only OPENBLAS_NUM_THREADS=1 at load
 *   time prevents the pool.
 * libgomp and glibc's malloc read theirs before main, so for those the
 * process re-executes itself once, and only for the long-running commands:
 * - libgomp's idle threads spin for about 300,000 rounds before sleeping: on
 *   2 cores that spinning starves the serial parts (model loading, a busy
 *   neighbour process). A shorter spin keeps the training speed.
 * - Transparent huge pages for malloc's big blocks (weights, moments,
 *   activations) save thousands of page faults in training; a cold `predict`
 *   is faster without them (they zero 2 MB pages it barely touches).
 * If exec fails we just carry on (slower). */
static void environment_setup(const char *name, char **argv)
{
    if (!getenv("OPENBLAS_CORETYPE")) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512cd"))
            setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    }
    if (!getenv("OPENBLAS_NUM_THREADS"))
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
    if (!name || !long_running(name))
        return;
    int exec_again = 0;
    if (!getenv("GOMP_SPINCOUNT") && !getenv("OMP_WAIT_POLICY") &&
        setenv("GOMP_SPINCOUNT", "10000", 1) == 0)
        exec_again = 1;
    if (!getenv("GLIBC_TUNABLES") && setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1", 1) == 0)
        exec_again = 1;
    if (exec_again)
        execv("/proc/self/exe", argv);
}

static void print_usage(FILE *f)
{
    fprintf(f, "usage: attnctl COMMAND [OPTIONS] [ARGS]\n");
}

static int print_help(void)
{
    print_usage(stdout);
    printf("\nTrain, evaluate, run and inspect a small Transformer-encoder sentiment classifier.\n\n"
           "Commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        printf("  %-9s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    printf("  %-9s %s\n", "help", "this text, or `attnctl help COMMAND` for one command");
    printf("\nOptions:\n"
           "  -h, --help     this text\n"
           "  -V, --version  print the version and exit\n"
           "\nExamples:\n"
           "  attnctl train reviews.csv.gz --out models/imdb\n"
           "  attnctl eval --model models/imdb test.csv.gz\n"
           "  attnctl predict --model models/imdb < reviews.txt\n"
           "\nEach command has its own help: attnctl COMMAND --help\n");
    return CLI_EXIT_OK;
}

/* A command's status, unless what it printed could not be written (a full
 * disk, a closed pipe's EPIPE): then that is the error. */
static int flushed(int status)
{
    if (fflush(stdout) != 0 && status == CLI_EXIT_OK)
        return cli_error("writing to standard output: %s", strerror(errno));
    return status;
}

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(COMMANDS[i].name, name) == 0)
            return &COMMANDS[i];
    return NULL;
}

static int unknown_command(const char *name)
{
    fprintf(stderr, "attnctl: unknown command '%s'\n", name);
    print_usage(stderr);
    fputs("Try 'attnctl help'.\n", stderr);
    return CLI_EXIT_USAGE;
}

/* Denormal floats are read and computed as zero, on every thread: those
 * the threads and processes start from this one (OpenMP's team, the
 * loading thread, mpirun's ranks) inherit the setting, so results do not
 * depend on their count. A saturated classifier's gradients can fall below
 * 2^-126, and each operation on them took the x86 cores a slow assist: a
 * short set trained with the naive Bayes start at 1 ran 2-3 times slower.
 * Only values that small change. */
static void flush_denormals(void)
{
#if defined(__SSE3__)
    _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
    _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
#endif
}

int main(int argc, char **argv)
{
    /* `train` and `pretrain` turn SIGINT/SIGTERM into a clean stop, but only
     * once their handlers are in place; a signal in the first milliseconds
     * (start-up, the re-exec below) would kill them instead. Blocked signals
     * stay blocked and pending across exec, so block them now and let the
     * command unblock them after installing its handlers. */
    if (argc >= 2 && (strcmp(argv[1], "train") == 0 || strcmp(argv[1], "pretrain") == 0))
        cli_block_stop_signals(1);
    environment_setup(argc >= 2 ? argv[1] : NULL, argv);
    flush_denormals();
    /* Past a file-size limit (ulimit -f) a write must fail with EFBIG and go
     * through the error path, which removes temporary files and keeps the
     * previous model; the default action would kill us halfway instead. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        print_usage(stderr);
        fputs("Try 'attnctl help'.\n", stderr);
        return CLI_EXIT_USAGE;
    }
    const char *name = argv[1];
    const int is_version = strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0;
    if ((is_version || strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) && argc > 2) {
        fprintf(stderr, "attnctl: %s takes no arguments\n", name);
        fputs("Try 'attnctl help'.\n", stderr);
        return CLI_EXIT_USAGE;
    }
    if (is_version) {
        printf("attnctl %s\n", AC_VERSION);
        return flushed(CLI_EXIT_OK);
    }
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)
        return flushed(print_help());
    if (strcmp(name, "help") == 0) {
        if (argc == 2)
            return flushed(print_help());
        if (argc > 3) {
            fputs("attnctl help: too many arguments\nusage: attnctl help [COMMAND]\n", stderr);
            return CLI_EXIT_USAGE;
        }
        const command *c = find_command(argv[2]);
        if (!c)
            return unknown_command(argv[2]);
        char *help_argv[] = {(char *)c->name, (char *)"--help", NULL};
        return flushed(c->run(2, help_argv));
    }
    if (name[0] == '-') {
        fprintf(stderr, "attnctl: unknown option '%s'\n", name);
        print_usage(stderr);
        fputs("Try 'attnctl help'.\n", stderr);
        return CLI_EXIT_USAGE;
    }
    const command *c = find_command(name);
    if (!c)
        return unknown_command(name);
    /* predict loads OpenBLAS when its model needs it (cli_infer_open): a
     * quantized model's does not, and loading it is a fifth of a cold
     * one-review predict */
    ac_err err;
    if (strcmp(c->name, "predict") != 0 && ac_blas_load(&err) != 0)
        return cli_error("%s", err.msg);
    return flushed(c->run(argc - 1, argv + 1));
}
