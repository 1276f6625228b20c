#include "attnctl/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ac_err_set(ac_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int ac_err_prefix(ac_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prefix[AC_ERR_LEN], old[AC_ERR_LEN];
    memcpy(old, err->msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* the prefix gets at most half the message; the rest keeps the old text */
    int n = snprintf(err->msg, sizeof err->msg, "%.*s: ", (int)(sizeof prefix / 2), prefix);
    if (n > 0 && (size_t)n < sizeof err->msg) {
        size_t kept = strnlen(old, sizeof err->msg - (size_t)n - 1);
        memcpy(err->msg + n, old, kept);
        err->msg[(size_t)n + kept] = 0;
    }
    err->msg[sizeof err->msg - 1] = 0;
    return -1;
}
