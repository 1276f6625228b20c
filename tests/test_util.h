/* Helpers shared by the test suites: scratch directories, the binary under
 * test, a clock and checks of a model directory. Static inline, so that a
 * suite using only some of them builds without unused-function warnings. */
#ifndef ATTNCTL_TEST_UTIL_H
#define ATTNCTL_TEST_UTIL_H

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attnctl/io.h"
#include "attnctl/train.h"

/* nftw callback removing each entry (children first with FTW_DEPTH). */
static inline int remove_entry(const char *path, const struct stat *sb, int flag,
                               struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Removes dir and everything under it (no error when it is missing). */
static inline void rm_rf(const char *dir)
{
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The attnctl binary under test: $ATTNCTL, else build/attnctl. */
static inline const char *attnctl_path(void)
{
    const char *p = getenv("ATTNCTL");
    return p && *p ? p : "build/attnctl";
}

/* Seconds on the monotonic clock. */
static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A new scratch directory /tmp/attnctl_test_NAME_XXXXXX (caller frees the name). */
static inline char *test_temp_dir(const char *name)
{
    char *dir = NULL;
    ck_assert_int_ge(asprintf(&dir, "/tmp/attnctl_test_%s_XXXXXX", name), 0);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    return dir;
}

/* The whole file at path, NUL-terminated (caller frees); *len its bytes. */
static inline char *test_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_int_ge(n, 0);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

/* Writes text to path, replacing it. */
static inline void test_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(text, 1, strlen(text), f), strlen(text));
    ck_assert_int_eq(fclose(f), 0);
}

/* "a/b", allocated (caller frees). */
static inline char *test_path(const char *a, const char *b)
{
    char *p = NULL;
    ck_assert_int_ge(asprintf(&p, "%s/%s", a, b), 0);
    return p;
}

/* Runs the shell command cmd, its stdout discarded; *err_text (freed by
 * the caller) gets its stderr. Returns its exit status (-1: killed). */
static inline int run_stderr(const char *cmd, char **err_text)
{
    char path[] = "/tmp/attnctl_test_stderr_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char *full = NULL;
    ck_assert_int_ge(asprintf(&full, "%s 2>%s >/dev/null", cmd, path), 0);
    int st = system(full);
    free(full);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    char *text = calloc(1, 1 << 16);
    ck_assert_ptr_nonnull(text);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    text[n] = '\0';
    fclose(f);
    remove(path);
    *err_text = text;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* dir/name exists. */
static inline void assert_file_in(const char *dir, const char *name)
{
    char *path = test_path(dir, name);
    ck_assert_msg(access(path, F_OK) == 0, "%s is missing", path);
    free(path);
}

/* model_dir's config.json says how the model was trained: training.refit
 * `refit` (1: refitted on every row) and the validation share `val_split`
 * (0 after a refit); nothing is left of a refit's second run. Returns the
 * epochs it records. */
static inline int assert_trained_as(const char *model_dir, int refit, double val_split)
{
    ac_config cfg;
    ac_config_defaults(&cfg);
    ac_err e;
    ck_assert_msg(ac_model_dir_load_config(&cfg, model_dir, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(cfg.training.refit, refit);
    ck_assert_msg(cfg.training.val_split == val_split, "val_split %g, expected %g",
                  cfg.training.val_split, val_split);
    const int epochs = cfg.training.epochs;
    ck_assert_int_ge(epochs, 1);
    ac_config_free(&cfg);
    char *left = test_path(model_dir, AC_REFIT_SUBDIR);
    ck_assert_msg(access(left, F_OK) != 0, "%s is left", left);
    free(left);
    return epochs;
}

#endif
