/* A growing text buffer for documents built in memory (SVG drawings, inspect's
 * JSON and HTML) and then written at once, so that a file is replaced whole.
 * After a failed allocation it ignores writes and says so (failed), so that
 * a drawing checks for memory once, at the end. */
#ifndef ATTNCTL_STRBUF_H
#define ATTNCTL_STRBUF_H

#include <stddef.h>

typedef struct {
    char *data; /* NUL-terminated while not failed (NULL while empty) */
    size_t len, cap;
    int failed; /* an allocation failed: later writes are ignored */
} ac_strbuf;

void ac_strbuf_init(ac_strbuf *b);
void ac_strbuf_free(ac_strbuf *b);
void ac_strbuf_put(ac_strbuf *b, const char *s, size_t n);
void ac_strbuf_puts(ac_strbuf *b, const char *s);
void ac_strbuf_printf(ac_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s (valid UTF-8) as XML/HTML text or attribute value: & < > " ' escaped;
 * control characters other than tab and newline, which XML 1.0 forbids even
 * escaped, as spaces. */
void ac_strbuf_xml_text(ac_strbuf *b, const char *s);
/* The text (the caller frees it), or NULL when an allocation failed (the
 * buffer is freed either way). */
char *ac_strbuf_take(ac_strbuf *b);

#endif
