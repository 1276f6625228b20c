/* Helpers shared by the test suites: scratch directories, the binary under
 * test and a clock. Static inline, so that a suite using only some of them
 * builds without unused-function warnings. */
#ifndef ATTNCTL_TEST_UTIL_H
#define ATTNCTL_TEST_UTIL_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

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

#endif
