#include "attnctl/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ac_strbuf_init(ac_strbuf *b)
{
    memset(b, 0, sizeof *b);
}

void ac_strbuf_free(ac_strbuf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

static int reserve(ac_strbuf *b, size_t extra)
{
    if (b->failed)
        return -1;
    if (b->len + extra + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1) {
        if (cap > ((size_t)-1) / 2) {
            b->failed = 1;
            return -1;
        }
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void ac_strbuf_put(ac_strbuf *b, const char *s, size_t n)
{
    if (reserve(b, n) != 0)
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void ac_strbuf_puts(ac_strbuf *b, const char *s)
{
    ac_strbuf_put(b, s, strlen(s));
}

void ac_strbuf_printf(ac_strbuf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if ((size_t)n < sizeof small) {
        ac_strbuf_put(b, small, (size_t)n);
        return;
    }
    if (reserve(b, (size_t)n) != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void ac_strbuf_xml_text(ac_strbuf *b, const char *s)
{
    const char *run = s; /* bytes copied as they are */
    for (const char *p = s; *p; p++) {
        const unsigned char c = (unsigned char)*p;
        const char *esc = NULL;
        switch (c) {
        case '&': esc = "&amp;"; break;
        case '<': esc = "&lt;"; break;
        case '>': esc = "&gt;"; break;
        case '"': esc = "&quot;"; break;
        case '\'': esc = "&#39;"; break; /* HTML 4 knows no &apos; */
        default:
            if (c < 0x20 && c != '\t' && c != '\n')
                esc = " ";
            break;
        }
        if (esc) {
            ac_strbuf_put(b, run, (size_t)(p - run));
            ac_strbuf_puts(b, esc);
            run = p + 1;
        }
    }
    ac_strbuf_puts(b, run);
}

char *ac_strbuf_take(ac_strbuf *b)
{
    if (b->failed || !b->data) {
        /* an empty text is still a text */
        char *out = b->failed ? NULL : calloc(1, 1);
        ac_strbuf_free(b);
        return out;
    }
    char *out = b->data;
    memset(b, 0, sizeof *b);
    return out;
}
