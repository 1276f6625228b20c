/* An enum's names in one list, from which its name is written, a word is
 * parsed, and the list of choices is spelt in errors and help, so that a new
 * value is one line of its list. */
#ifndef ATTNCTL_NAMES_H
#define ATTNCTL_NAMES_H

#include <stddef.h>

typedef struct {
    int value;
    const char *name;
    int alias; /* 1: also read, never written or listed (an older spelling) */
} ac_name;

typedef struct {
    const ac_name *names; /* in the order the choices are listed */
    int n;
} ac_names;

#define AC_NAMES(array) {array, (int)(sizeof array / sizeof array[0])}

/* 1 when value is one of the list's. */
int ac_names_has(const ac_names *t, int value);
/* The value's name, or "unknown". */
const char *ac_names_name(const ac_names *t, int value);
/* 0 and *out set when s is one of the names (aliases too), else -1. */
int ac_names_parse(const ac_names *t, const char *s, int *out);
/* The choices as words, "max, mean or cls", or for JSON (json = 1) as
 * quoted strings, "\"max\", \"mean\", \"cls\"", into out[cap]; returns out. */
const char *ac_names_list(const ac_names *t, int json, char *out, size_t cap);

#endif
