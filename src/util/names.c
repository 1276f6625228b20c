#include "attnctl/names.h"

#include <stdio.h>
#include <string.h>

int ac_names_has(const ac_names *t, int value)
{
    for (int i = 0; i < t->n; i++)
        if (t->names[i].value == value)
            return 1;
    return 0;
}

const char *ac_names_name(const ac_names *t, int value)
{
    for (int i = 0; i < t->n; i++)
        if (t->names[i].value == value && !t->names[i].alias)
            return t->names[i].name;
    return "unknown";
}

int ac_names_parse(const ac_names *t, const char *s, int *out)
{
    if (!s)
        return -1;
    for (int i = 0; i < t->n; i++)
        if (strcmp(s, t->names[i].name) == 0) {
            *out = t->names[i].value;
            return 0;
        }
    return -1;
}

const char *ac_names_list(const ac_names *t, int json, char *out, size_t cap)
{
    int listed = 0;
    for (int i = 0; i < t->n; i++)
        listed += !t->names[i].alias;
    size_t len = 0;
    if (cap > 0)
        out[0] = '\0';
    for (int i = 0, k = 0; i < t->n; i++) {
        if (t->names[i].alias)
            continue;
        const char *sep = k == 0 ? "" : json || k < listed - 1 ? ", " : " or ";
        const char *quote = json ? "\"" : "";
        int n = snprintf(out + len, len < cap ? cap - len : 0, "%s%s%s%s", sep, quote,
                         t->names[i].name, quote);
        if (n > 0)
            len += (size_t)n;
        if (len >= cap)
            break; /* cut: snprintf kept it terminated */
        k++;
    }
    return out;
}
