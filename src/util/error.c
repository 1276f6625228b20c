#include "attnctl/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* A message is one line whatever it quotes (a JSON key or dtype from a file
 * may hold a newline): control characters read as '?'. */
static void one_line(char *msg)
{
    for (unsigned char *p = (unsigned char *)msg; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            *p = '?';
}

int ac_err_set(ac_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    one_line(err->msg);
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
    one_line(err->msg);
    return -1;
}
