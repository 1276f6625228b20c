/* Error reporting for the library: functions return 0 on success and -1 on
 * failure, filling an ac_err with one line (no trailing newline). The library
 * never prints and never exits; only the CLI talks to the user. */
#ifndef ATTNCTL_ERROR_H
#define ATTNCTL_ERROR_H

#define AC_ERR_LEN 512

typedef struct {
    char msg[AC_ERR_LEN];
} ac_err;

/* Set err->msg (printf style). err may be NULL. Always returns -1 so that
 * `return ac_err_set(err, ...)` reads naturally. */
int ac_err_set(ac_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefix an existing message: "PREFIX: old message". Returns -1. */
int ac_err_prefix(ac_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
