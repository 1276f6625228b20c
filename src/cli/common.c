/* Helpers shared by the subcommands: error messages, number parsing, threads. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "cli.h"

int cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("attnctl: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_EXIT_RUNTIME;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (cmd)
        fprintf(stderr, "attnctl %s: ", cmd);
    else
        fputs("attnctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "Try 'attnctl %s --help'.\n", cmd);
    else
        fputs("Try 'attnctl help'.\n", stderr);
    return CLI_EXIT_USAGE;
}

/* strtol/strtod accept leading white space and empty digits; we do not. */
static int looks_numeric(const char *s)
{
    return s && *s && !(*s == ' ' || *s == '\t' || *s == '\n');
}

int cli_parse_int(const char *s, long lo, long hi, long *out)
{
    if (!looks_numeric(s))
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_u64(const char *s, uint64_t *out)
{
    if (!looks_numeric(s) || *s == '-' || *s == '+')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end != '\0')
        return -1;
    *out = (uint64_t)v;
    return 0;
}

int cli_parse_double(const char *s, double lo, double hi, double *out)
{
    if (!looks_numeric(s))
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end != '\0' || !isfinite(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int cli_default_threads(void)
{
    return omp_get_num_procs();
}

void cli_set_threads(int n)
{
    if (n <= 0)
        n = omp_get_num_procs();
    omp_set_num_threads(n);
}

void cli_block_stop_signals(int block)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1); /* mpirun forwards it to every process (not SIGINT) */
    sigprocmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
}

int cli_display_width(const char *s)
{
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
    int width = 0;
    while (*p) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t n = utf8proc_iterate(p, -1, &cp);
        if (n <= 0) {
            width++;
            p++;
            continue;
        }
        width += utf8proc_charwidth(cp);
        p += n;
    }
    return width;
}

void cli_print_padded(FILE *f, const char *s, int width, int align_right)
{
    int pad = width - cli_display_width(s);
    if (align_right)
        fprintf(f, "%*s", pad > 0 ? pad : 0, "");
    fputs(s, f);
    if (!align_right)
        fprintf(f, "%*s", pad > 0 ? pad : 0, "");
}
