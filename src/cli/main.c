/* attnctl: the subcommand table, help and version. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "attnctl/io.h"
#include "cli.h"

/* Exported by OpenBLAS (declared here to avoid depending on which cblas.h is installed). */
extern char *openblas_get_corename(void);
extern void openblas_set_num_threads(int num_threads);

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
};
#define N_COMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

/* Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) does not recognise recent AVX-512
 * CPUs and falls back to older, much slower kernels (Haswell or even
 * Prescott). The core is chosen when the library loads, before main, and only
 * OPENBLAS_CORETYPE overrides it. OpenBLAS also starts a pool of worker
 * threads at load time that spin (sched_yield) for a while: with our OpenMP
 * threads on a 2-core machine they steal the CPU, and a cold `predict` took
 * 80 ms instead of 20. Only OPENBLAS_NUM_THREADS=1 at load time prevents the
 * pool. So when either variable needs setting, set them and re-execute
 * ourselves once (about 3 ms). If exec fails we just carry on (slower). */
static void openblas_setup(char **argv)
{
    int exec_again = 0;
    if (!getenv("OPENBLAS_CORETYPE")) {
        __builtin_cpu_init();
        int skylakex_capable = __builtin_cpu_supports("avx512f") &&
                               __builtin_cpu_supports("avx512bw") &&
                               __builtin_cpu_supports("avx512vl") &&
                               __builtin_cpu_supports("avx512dq") &&
                               __builtin_cpu_supports("avx512cd");
        const char *core = openblas_get_corename();
        int already_avx512 = core && (strcasecmp(core, "SkylakeX") == 0 ||
                                      strcasecmp(core, "Cooperlake") == 0 ||
                                      strcasecmp(core, "SapphireRapids") == 0);
        if (skylakex_capable && !already_avx512 &&
            setenv("OPENBLAS_CORETYPE", "SkylakeX", 1) == 0)
            exec_again = 1;
    }
    if (!getenv("OPENBLAS_NUM_THREADS") && setenv("OPENBLAS_NUM_THREADS", "1", 1) == 0)
        exec_again = 1;
    /* libgomp's idle threads spin for about 300,000 rounds before sleeping:
     * on 2 cores that spinning starves the serial parts (model loading, a
     * busy neighbour process). A shorter spin keeps the training speed. */
    if (exec_again && !getenv("GOMP_SPINCOUNT") && !getenv("OMP_WAIT_POLICY"))
        setenv("GOMP_SPINCOUNT", "10000", 1);
    /* Transparent huge pages for malloc's big blocks (weights, activations):
     * a cold predict faulted in 4,400 small pages; this saves about 2.5 ms. */
    if (exec_again && !getenv("GLIBC_TUNABLES"))
        setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1", 1);
    if (exec_again)
        execv("/proc/self/exe", argv);
    openblas_set_num_threads(1);
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

int main(int argc, char **argv)
{
    /* `train` and `pretrain` turn SIGINT/SIGTERM into a clean stop, but only
     * once their handlers are in place; a signal in the first milliseconds
     * (start-up, the re-exec below) would kill them instead. Blocked signals
     * stay blocked and pending across exec, so block them now and let the
     * command unblock them after installing its handlers. */
    if (argc >= 2 && (strcmp(argv[1], "train") == 0 || strcmp(argv[1], "pretrain") == 0))
        cli_block_stop_signals(1);
    openblas_setup(argv);
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
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("attnctl %s\n", AC_VERSION);
        return CLI_EXIT_OK;
    }
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)
        return print_help();
    if (strcmp(name, "help") == 0) {
        if (argc == 2)
            return print_help();
        if (argc > 3) {
            fputs("attnctl help: too many arguments\nusage: attnctl help [COMMAND]\n", stderr);
            return CLI_EXIT_USAGE;
        }
        const command *c = find_command(argv[2]);
        if (!c)
            return unknown_command(argv[2]);
        char *help_argv[] = {(char *)c->name, (char *)"--help", NULL};
        return c->run(2, help_argv);
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
    int status = c->run(argc - 1, argv + 1);
    if (fflush(stdout) != 0 && status == CLI_EXIT_OK)
        return cli_error("writing to standard output: %s", strerror(errno));
    return status;
}
