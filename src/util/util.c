#include "attnctl/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double ac_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

char *ac_path_join(const char *dir, const char *name, ac_err *err)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p) {
        ac_err_set(err, "out of memory");
        return NULL;
    }
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

int ac_copy_string(char *dst, size_t cap, const char *src, const char *what, ac_err *err)
{
    size_t n = strlen(src);
    if (n >= cap)
        return ac_err_set(err, "%s is too long (%zu bytes, at most %zu)", what, n, cap - 1);
    memcpy(dst, src, n + 1);
    return 0;
}
