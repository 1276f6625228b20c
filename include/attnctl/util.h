/* Small helpers every layer may use: a clock and file names. */
#ifndef ATTNCTL_UTIL_H
#define ATTNCTL_UTIL_H

#include <stddef.h>

#include "attnctl/error.h"

/* Seconds on the monotonic clock (for durations only: its zero is arbitrary). */
double ac_now_s(void);

/* "dir/name" in new memory (the caller frees it), or NULL when out of
 * memory (err set; err may be NULL). */
char *ac_path_join(const char *dir, const char *name, ac_err *err);

/* Copies src into dst[cap], or an error naming what when it does not fit. */
int ac_copy_string(char *dst, size_t cap, const char *src, const char *what, ac_err *err);

#endif
