/* Reading review CSVs: zlib's gzread (plain or gzip, recognised by content)
 * feeds libcsv in strict mode, a physical line at a time, so every row and
 * every error knows its line without the file ever being held whole.
 *
 * Policies (the contract is in include/attnctl/text.h):
 *  - The separator is chosen from the header line: a comma if it holds one,
 *    else a tab, else a semicolon. Comma- and semicolon-separated files
 *    follow RFC 4180's quoting; a tab-separated file is IANA's TSV: a line
 *    is a row, a tab ends a field, quotes are ordinary characters (as the
 *    TSV files of public data sets have them, unbalanced quotes included)
 *    except around a whole field, which its writer quoted (tsv_unquote).
 *  - The header is the first non-blank row; columns are matched by name,
 *    trimmed and case-insensitive; extra columns are ignored. A UTF-8 BOM at
 *    the start of the file is dropped.
 *  - Every row must have exactly as many fields as the header.
 *  - A text that is empty or only white space (Unicode White_Space, also
 *    zero-width space and BOM) is skipped and counted in n_empty_skipped.
 *  - Invalid UTF-8 in a text becomes U+FFFD (as does a NUL byte, since texts
 *    are C strings); the row is kept and counted in n_invalid_utf8.
 *  - Labels are trimmed strings. With need_label, an empty label, a label
 *    holding a NUL or invalid UTF-8, or too many distinct labels is an error;
 *    without need_label the same problems make the label column unusable, and
 *    labels come back NULL (a prediction does not need them). A label outside
 *    opt->classes is an error either way.
 *  - Discovered classes are in numeric order when every label is an integer,
 *    else in byte order. */
#include <csv.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <utf8proc.h>
#include <zlib.h>

#include "attnctl/text.h"
#include "text_internal.h"

enum {
    READ_CHUNK = 64 * 1024,       /* bytes handed to libcsv at a time (at most) */
    GZ_BUFFER = 256 * 1024,       /* zlib's own input buffer: fewer read() calls */
    MAX_CLASSES = 1000,           /* more distinct labels than this: not a label column */
};

typedef struct {
    const char *path;
    const ac_read_options *opt;
    ac_err *err;
    ac_rawdata *d;
    int failed;

    /* Position. Segments end at a line break, so all bytes libcsv is
     * given at once lie on one line: seg_line. */
    int64_t line;       /* line of the next byte to read */
    int prev_cr;        /* the last byte read was '\r' (a following '\n' is the same break) */
    int64_t seg_line;
    int row_open;       /* libcsv is inside a row */
    int64_t row_line;   /* where the current row began */
    int64_t field_line; /* where the current field began */
    int64_t rows_seen;  /* rows completed, header included */
    unsigned char delim; /* the field separator, chosen from the header line (header_delimiter) */
    size_t field_idx;   /* fields completed in the current row */

    /* Header */
    char **cols;
    size_t n_cols, cols_cap;
    size_t text_col, label_col; /* label_col == SIZE_MAX: none */

    /* Output under construction */
    size_t text_cap, off_cap, row_cap, label_cap;
    size_t text_used; /* committed bytes of text_buf */
    size_t row_end;   /* end of the current row's text (tentative) */
    int row_invalid;

    /* Label of the current row (trimmed copy) */
    char *label;
    size_t label_len, label_buf_cap;

    /* Classes: names, lengths and a hash table name -> index */
    char **cls;
    size_t *cls_len;
    int n_cls;
    size_t cls_cap, cls_len_cap;
    int32_t *slots;
    size_t n_slots;
    int labels_off; /* label column unusable without need_label: labels come back NULL */

    /* opt->lines: the current line, gathered across read chunks */
    char *line_buf;
    size_t line_len, line_cap;
} reader;

/* ------------------------------------------------------------ messages */

void ac_text_shown(char *dst, size_t cap, const char *s, size_t len)
{
    size_t n = len;
    int cut = 0;
    if (n > AC_SHOWN_MAX) {
        n = AC_SHOWN_MAX;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--; /* do not split a UTF-8 sequence */
        cut = 1;
    }
    int utf8_ok = ac_utf8_valid_prefix(s, n) == n;
    size_t o = 0;
    for (size_t i = 0; i < n && o + 4 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        dst[o++] = (c < 0x20 || c == 0x7f || (c >= 0x80 && !utf8_ok)) ? '?' : (char)c;
    }
    if (cut && o + 4 < cap) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o] = '\0';
}

/* "FILE:LINE: message"; the first failure wins. */
__attribute__((format(printf, 3, 4))) static int fail(reader *r, int64_t line, const char *fmt, ...)
{
    if (r->failed)
        return -1;
    r->failed = 1;
    char msg[AC_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ac_err_set(r->err, "%s:%lld: %s", r->path, (long long)line, msg);
}

static int out_of_memory(reader *r)
{
    return fail(r, r->seg_line, "out of memory");
}

/* "a, b, c" from the header, bounded. */
static void list_columns(const reader *r, char *dst, size_t cap)
{
    size_t o = 0;
    dst[0] = '\0';
    for (size_t i = 0; i < r->n_cols && o + 8 < cap; i++) {
        char name[AC_SHOWN_MAX * 2];
        ac_text_shown(name, sizeof name, r->cols[i], strlen(r->cols[i]));
        int w = snprintf(dst + o, cap - o, "%s%s", i ? ", " : "", name);
        if (w < 0 || (size_t)w >= cap - o) {
            dst[o] = '\0';
            break;
        }
        o += (size_t)w;
    }
}

/* "negative, positive" from the known classes, bounded. */
static void list_classes(const reader *r, char *dst, size_t cap)
{
    size_t o = 0;
    dst[0] = '\0';
    for (int i = 0; i < r->n_cls && o + 8 < cap; i++) {
        char name[AC_SHOWN_MAX * 2];
        ac_text_shown(name, sizeof name, r->cls[i], r->cls_len[i]);
        int w = snprintf(dst + o, cap - o, "%s%s", i ? ", " : "", name);
        if (w < 0 || (size_t)w >= cap - o) {
            dst[o] = '\0';
            break;
        }
        o += (size_t)w;
    }
}

/* ------------------------------------------------------------ small helpers */

static int is_ascii_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static void trim(const char **s, size_t *len)
{
    const char *p = *s;
    size_t n = *len;
    while (n > 0 && is_ascii_space((unsigned char)p[0])) {
        p++;
        n--;
    }
    while (n > 0 && is_ascii_space((unsigned char)p[n - 1]))
        n--;
    *s = p;
    *len = n;
}

/* Only white space (Unicode White_Space, zero-width space, BOM)? s is valid UTF-8. */
static int is_blank(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            if (!is_ascii_space(c))
                return 0;
            i++;
            continue;
        }
        utf8proc_int32_t cp;
        utf8proc_ssize_t k =
            utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0)
            return 0;
        utf8proc_category_t cat = utf8proc_category(cp);
        if (cat != UTF8PROC_CATEGORY_ZS && cat != UTF8PROC_CATEGORY_ZL &&
            cat != UTF8PROC_CATEGORY_ZP && cp != 0x85 && cp != 0x200B && cp != 0xFEFF)
            return 0;
        i += (size_t)k;
    }
    return 1;
}

static char *dup_bytes(const char *s, size_t len)
{
    char *p = malloc(len + 1);
    if (p) {
        memcpy(p, s, len);
        p[len] = '\0';
    }
    return p;
}

/* ------------------------------------------------------------ classes */

static size_t class_slot(const reader *r, const char *s, size_t len)
{
    size_t mask = r->n_slots - 1;
    size_t h = (size_t)ac_token_hash(s, len) & mask;
    for (;;) {
        int32_t id = r->slots[h];
        if (id < 0 || (r->cls_len[id] == len && memcmp(r->cls[id], s, len) == 0))
            return h;
        h = (h + 1) & mask;
    }
}

/* Adds a class (not present yet); returns its index or -1 without memory. */
static int class_add(reader *r, const char *s, size_t len)
{
    if ((size_t)(r->n_cls + 1) * 2 > r->n_slots) {
        size_t n = r->n_slots ? r->n_slots * 2 : 64;
        while ((size_t)(r->n_cls + 1) * 2 > n)
            n *= 2;
        int32_t *slots = malloc(n * sizeof *slots);
        if (!slots)
            return -1;
        for (size_t i = 0; i < n; i++)
            slots[i] = -1;
        free(r->slots);
        r->slots = slots;
        r->n_slots = n;
        for (int i = 0; i < r->n_cls; i++)
            r->slots[class_slot(r, r->cls[i], r->cls_len[i])] = i;
    }
    if (ac_grow((void **)&r->cls, &r->cls_cap, (size_t)r->n_cls + 1, sizeof *r->cls) ||
        ac_grow((void **)&r->cls_len, &r->cls_len_cap, (size_t)r->n_cls + 1, sizeof *r->cls_len))
        return -1;
    char *name = dup_bytes(s, len);
    if (!name)
        return -1;
    int id = r->n_cls++;
    r->cls[id] = name;
    r->cls_len[id] = len;
    r->slots[class_slot(r, s, len)] = id;
    return id;
}

/* A label problem: an error with need_label, else the labels are dropped. */
__attribute__((format(printf, 2, 3))) static void label_problem(reader *r, const char *fmt, ...)
{
    if (r->opt->need_label) {
        char msg[AC_ERR_LEN];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        fail(r, r->row_line, "%s", msg);
    } else {
        r->labels_off = 1;
    }
}

/* Class index of the current row's label, or -1 (failed or labels dropped). */
static int32_t label_id(reader *r)
{
    const char *s = r->label;
    size_t len = r->label_len;
    char shown[AC_SHOWN_MAX * 2];
    if (len == 0) {
        char col[AC_SHOWN_MAX * 2];
        ac_text_shown(col, sizeof col, r->cols[r->label_col], strlen(r->cols[r->label_col]));
        label_problem(r, "empty label in column '%s'", col);
        return -1;
    }
    if (memchr(s, '\0', len)) {
        label_problem(r, "the label contains a NUL byte");
        return -1;
    }
    if (ac_utf8_valid_prefix(s, len) != len) {
        ac_text_shown(shown, sizeof shown, s, len);
        label_problem(r, "the label '%s' is not valid UTF-8", shown);
        return -1;
    }
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) {
            /* predict writes one line a text, LABEL TAB PROBABILITY */
            ac_text_shown(shown, sizeof shown, s, len);
            label_problem(r, "the label '%s' holds a line break, tab or other control character; "
                             "a label must be one line of text",
                          shown);
            return -1;
        }
    if (r->n_slots) {
        int32_t id = r->slots[class_slot(r, s, len)];
        if (id >= 0)
            return id;
    }
    ac_text_shown(shown, sizeof shown, s, len);
    if (r->opt->classes) {
        char known[AC_ERR_LEN / 2];
        list_classes(r, known, sizeof known);
        fail(r, r->row_line, "unknown label '%s' (the model knows: %s)", shown, known);
        return -1;
    }
    if (r->n_cls >= MAX_CLASSES) {
        char col[AC_SHOWN_MAX * 2];
        ac_text_shown(col, sizeof col, r->cols[r->label_col], strlen(r->cols[r->label_col]));
        label_problem(r, "more than %d different labels in column '%s' (is it the label column?)",
                      MAX_CLASSES, col);
        return -1;
    }
    int id = class_add(r, s, len);
    if (id < 0)
        out_of_memory(r);
    return id;
}

/* Integer labels sort numerically ("-1" < "1" < "10"), others by bytes. */
typedef struct {
    const char *name;
    long long value;
    int old;
} class_key;

static int parse_integer(const char *s, long long *out)
{
    const char *p = s;
    if (*p == '-' || *p == '+')
        p++;
    if (*p < '0' || *p > '9')
        return 0;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return 0;
    *out = v;
    return 1;
}

static int cmp_bytes(const void *a, const void *b)
{
    return strcmp(((const class_key *)a)->name, ((const class_key *)b)->name);
}

static int cmp_numeric(const void *a, const void *b)
{
    const class_key *x = a, *y = b;
    if (x->value != y->value)
        return x->value < y->value ? -1 : 1;
    return strcmp(x->name, y->name); /* "01" and "1": still a stable order */
}

/* Puts discovered classes in their order and renumbers the labels. */
static int order_classes(reader *r)
{
    int n = r->n_cls;
    class_key *keys = malloc((size_t)n * sizeof *keys);
    int32_t *new_id = malloc((size_t)n * sizeof *new_id);
    char **names = malloc((size_t)n * sizeof *names);
    if (!keys || !new_id || !names) {
        free(keys);
        free(new_id);
        free(names);
        return -1;
    }
    int numeric = 1;
    for (int i = 0; i < n; i++) {
        keys[i].name = r->cls[i];
        keys[i].old = i;
        keys[i].value = 0;
        if (numeric && !parse_integer(r->cls[i], &keys[i].value))
            numeric = 0;
    }
    qsort(keys, (size_t)n, sizeof *keys, numeric ? cmp_numeric : cmp_bytes);
    for (int i = 0; i < n; i++) {
        new_id[keys[i].old] = i;
        names[i] = r->cls[keys[i].old];
    }
    ac_rawdata *d = r->d;
    for (int64_t i = 0; i < d->n_rows; i++)
        d->labels[i] = new_id[d->labels[i]];
    free(r->cls);
    r->cls = names;
    r->cls_cap = (size_t)n;
    for (int i = 0; i < n; i++)
        r->cls_len[i] = strlen(names[i]);
    free(keys);
    free(new_id);
    return 0;
}

/* ------------------------------------------------------------ header */

static size_t find_column(const reader *r, const char *name)
{
    size_t len = strlen(name);
    trim(&name, &len);
    for (size_t i = 0; i < r->n_cols; i++)
        if (strlen(r->cols[i]) == len && strncasecmp(r->cols[i], name, len) == 0)
            return i;
    return SIZE_MAX;
}

static size_t find_default(const reader *r, const char *const *names)
{
    for (int i = 0; names[i]; i++) {
        size_t c = find_column(r, names[i]);
        if (c != SIZE_MAX)
            return c;
    }
    return SIZE_MAX;
}

static void header_field(reader *r, const char *s, size_t len)
{
    trim(&s, &len);
    char *name = dup_bytes(s, len);
    if (!name || ac_grow((void **)&r->cols, &r->cols_cap, r->n_cols + 1, sizeof *r->cols)) {
        free(name);
        out_of_memory(r);
        return;
    }
    r->cols[r->n_cols++] = name;
}

static int header_done(reader *r)
{
    static const char *const text_names[] = {"review", "text", "sentence", NULL};
    static const char *const label_names[] = {"sentiment", "label", "polarity", NULL};
    const ac_read_options *o = r->opt;
    char cols[AC_ERR_LEN / 2], want[AC_SHOWN_MAX * 2];
    list_columns(r, cols, sizeof cols);

    if (o->text_column) {
        r->text_col = find_column(r, o->text_column);
        ac_text_shown(want, sizeof want, o->text_column, strlen(o->text_column));
        if (r->text_col == SIZE_MAX)
            return fail(r, r->row_line, "no column named '%s' in the header (columns: %s)", want,
                        cols);
    } else {
        r->text_col = find_default(r, text_names);
        if (r->text_col == SIZE_MAX)
            return fail(r, r->row_line,
                        "no column named 'review', 'text' or 'sentence' in the header (columns: "
                        "%s); name the text column with --text-column",
                        cols);
    }
    if (o->label_column) {
        r->label_col = find_column(r, o->label_column);
        ac_text_shown(want, sizeof want, o->label_column, strlen(o->label_column));
        if (r->label_col == SIZE_MAX)
            return fail(r, r->row_line, "no column named '%s' in the header (columns: %s)", want,
                        cols);
    } else {
        r->label_col = find_default(r, label_names);
        if (r->label_col == SIZE_MAX && o->need_label)
            return fail(
                r, r->row_line,
                "no column named 'sentiment', 'label' or 'polarity' in the header (columns: %s); "
                "name the label column with --label-column",
                cols);
    }
    if (r->label_col == r->text_col) {
        ac_text_shown(want, sizeof want, r->cols[r->text_col], strlen(r->cols[r->text_col]));
        return fail(r, r->row_line, "column '%s' cannot be both the text and the label", want);
    }
    /* A name the header has twice would silently read its first column. */
    const size_t chosen[2] = {r->text_col, r->label_col};
    for (int k = 0; k < 2; k++) {
        if (chosen[k] == SIZE_MAX)
            continue;
        const char *name = r->cols[chosen[k]];
        for (size_t i = chosen[k] + 1; i < r->n_cols; i++)
            if (strcasecmp(r->cols[i], name) == 0) {
                ac_text_shown(want, sizeof want, name, strlen(name));
                return fail(r, r->row_line,
                            "the header names column '%s' twice (columns %zu and %zu); rename "
                            "one",
                            want, chosen[k] + 1, i + 1);
            }
    }
    return 0;
}

/* ------------------------------------------------------------ rows */

/* Appends the text field to text_buf (not yet committed). */
static int text_field(reader *r, const char *s, size_t len)
{
    ac_rawdata *d = r->d;
    size_t at = r->text_used;
    int clean = ac_utf8_valid_prefix(s, len) == len && !memchr(s, '\0', len);
    size_t need = clean ? len + 1 : 3 * len + 1;
    if (ac_grow((void **)&d->text_buf, &r->text_cap, at + need, 1))
        return out_of_memory(r);
    if (clean) {
        memcpy(d->text_buf + at, s, len);
        r->row_end = at + len;
        return 0;
    }
    /* NUL bytes end C strings: they become U+FFFD like invalid bytes. */
    size_t o = at, i = 0;
    while (i <= len) {
        const char *nul = memchr(s + i, '\0', len - i);
        size_t piece = nul ? (size_t)(nul - (s + i)) : len - i;
        o += ac_utf8_sanitize(d->text_buf + o, s + i, piece, NULL);
        i += piece;
        if (!nul)
            break;
        memcpy(d->text_buf + o, "\xEF\xBF\xBD", 3);
        o += 3;
        i++;
    }
    r->row_end = o;
    r->row_invalid = 1;
    return 0;
}

static int label_field(reader *r, const char *s, size_t len)
{
    trim(&s, &len);
    if (ac_grow((void **)&r->label, &r->label_buf_cap, len + 1, 1))
        return out_of_memory(r);
    memcpy(r->label, s, len);
    r->label[len] = '\0';
    r->label_len = len;
    return 0;
}

static int row_done(reader *r)
{
    ac_rawdata *d = r->d;
    if (r->field_idx != r->n_cols) {
        const char *hint = r->field_idx <= r->n_cols ? ""
                           : r->delim == ',' ? " (a field holding a comma must be quoted)"
                           : r->delim == ';' ? " (a field holding a semicolon must be quoted)"
                                             : " (a tab-separated file's fields cannot hold tabs)";
        return fail(r, r->row_line, "row has %zu field(s), the header has %zu%s", r->field_idx,
                    r->n_cols, hint);
    }
    size_t start = r->text_used;
    if (is_blank(d->text_buf + start, r->row_end - start)) {
        d->n_empty_skipped++;
        return 0;
    }
    size_t n = (size_t)d->n_rows;
    if (ac_grow((void **)&d->text_off, &r->off_cap, n + 2, sizeof *d->text_off) ||
        ac_grow((void **)&d->line, &r->row_cap, n + 1, sizeof *d->line))
        return out_of_memory(r);
    if (r->label_col != SIZE_MAX && !r->labels_off) {
        int32_t id = label_id(r);
        if (r->failed)
            return -1;
        if (id >= 0) {
            if (ac_grow((void **)&d->labels, &r->label_cap, n + 1, sizeof *d->labels))
                return out_of_memory(r);
            d->labels[n] = id;
        }
    }
    d->text_buf[r->row_end] = '\0';
    r->text_used = r->row_end + 1;
    d->text_off[n + 1] = (int64_t)r->text_used;
    d->line[n] = r->row_line;
    d->n_invalid_utf8 += r->row_invalid;
    d->n_rows++;
    return 0;
}

/* ------------------------------------------------------------ libcsv callbacks */

static void on_field(void *data, size_t len, void *user)
{
    reader *r = user;
    if (r->failed)
        return;
    const char *s = data ? data : "";
    if (r->rows_seen == 0)
        header_field(r, s, len);
    else if (r->field_idx == r->text_col)
        text_field(r, s, len);
    else if (r->field_idx == r->label_col && !r->labels_off)
        label_field(r, s, len);
    r->field_idx++;
    r->field_line = r->seg_line; /* the next field starts after this comma */
}

static void on_row(int c, void *user)
{
    (void)c;
    reader *r = user;
    r->row_open = 0;
    if (r->failed)
        return;
    if (r->rows_seen == 0)
        header_done(r);
    else
        row_done(r);
    r->rows_seen++;
    r->field_idx = 0;
    r->row_end = r->text_used;
    r->row_invalid = 0;
    r->label_len = 0;
}

/* ------------------------------------------------------------ feeding libcsv */

static int parse_error(reader *r, struct csv_parser *p, const char *seg, size_t at)
{
    if (csv_error(p) != CSV_EPARSE)
        return out_of_memory(r);
    char opened[64] = "";
    if (r->field_line < r->seg_line)
        snprintf(opened, sizeof opened, " opened on line %lld",
                 (long long)r->field_line);
    if (seg[at] == '"' && !p->quoted)
        fail(r, r->seg_line,
             "a quote inside an unquoted field (quote the whole field and double the quotes "
             "inside it)");
    else
        fail(r, r->seg_line,
             "text after the closing quote of a quoted field%s (a quote inside a quoted field "
             "must be doubled: \"\")",
             opened);
    return -1;
}

/* Hands s[0..n) to libcsv one line at a time, counting lines (LF, CRLF, CR). */
static int feed(reader *r, struct csv_parser *p, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && !r->failed) {
        size_t j = i;
        while (j < n && s[j] != '\n' && s[j] != '\r')
            j++;
        size_t end = j < n ? j + 1 : n;
        if (j > i)
            r->prev_cr = 0;
        if (!r->row_open) {
            /* libcsv starts a row at the first byte that is not a space, tab or
             * line break, or at a separator (a tab, in a tab-separated file). */
            for (size_t k = i; k < j; k++)
                if ((s[k] != ' ' && s[k] != '\t') || (unsigned char)s[k] == r->delim) {
                    r->row_open = 1;
                    r->row_line = r->field_line = r->line;
                    break;
                }
        }
        r->seg_line = r->line;
        /* libcsv grows its field buffer by blk_size: keep that proportional
         * to the buffer so a giant field costs O(n), not O(n^2). */
        size_t have = csv_get_buffer_size(p);
        csv_set_blk_size(p, have > READ_CHUNK ? have : READ_CHUNK);
        size_t used = csv_parse(p, s + i, end - i, on_field, on_row, r);
        if (r->failed)
            return -1;
        if (used != end - i)
            return parse_error(r, p, s + i, used);
        if (j < n) {
            if (s[j] == '\r') {
                r->line++;
                r->prev_cr = 1;
            } else {
                if (!r->prev_cr)
                    r->line++;
                r->prev_cr = 0;
            }
        }
        i = end;
    }
    return r->failed ? -1 : 0;
}

/* Plain text: one text a line. The line ends at LF (a CR before it is
 * dropped); bytes gather in line_buf until then. */
static int end_line(reader *r)
{
    size_t len = r->line_len;
    if (len > 0 && r->line_buf[len - 1] == '\r')
        len--;
    if (len > 0 && memchr(r->line_buf, '\0', len))
        return fail(r, r->line, "NUL byte: this is not a text file (one document a line)");
    r->row_line = r->seg_line = r->line;
    r->field_idx = 0;
    r->row_end = r->text_used;
    r->row_invalid = 0;
    if (text_field(r, r->line_buf ? r->line_buf : "", len) != 0)
        return -1;
    r->field_idx = r->n_cols;
    if (row_done(r) != 0)
        return -1;
    r->line++;
    r->line_len = 0;
    return 0;
}

/* A tab-separated field that starts and ends with a double quote was
 * quoted by its writer (R's write.table, a spreadsheet): the quotes go and
 * "" reads as ". Any other quote is an ordinary character. Rewrites
 * s[0..len) in place; returns the new length. */
static size_t tsv_unquote(char *s, size_t len)
{
    if (len < 2 || s[0] != '"' || s[len - 1] != '"')
        return len;
    size_t o = 0;
    for (size_t i = 1; i + 1 < len; i++) {
        s[o++] = s[i];
        if (s[i] == '"' && s[i + 1] == '"' && i + 2 < len)
            i++;
    }
    return o;
}

/* Tab-separated: the current line is a row, its tabs end the fields; a
 * line of spaces or nothing is skipped, as libcsv skips blank lines. */
static int end_tsv_line(reader *r)
{
    size_t len = r->line_len;
    if (len > 0 && r->line_buf[len - 1] == '\r')
        len--;
    int blank = 1;
    for (size_t i = 0; i < len && blank; i++)
        blank = r->line_buf[i] == ' ';
    r->row_line = r->seg_line = r->field_line = r->line;
    if (!blank) {
        size_t start = 0;
        for (size_t i = 0; i <= len && !r->failed; i++)
            if (i == len || r->line_buf[i] == '\t') {
                on_field(r->line_buf + start, tsv_unquote(r->line_buf + start, i - start), r);
                start = i + 1;
            }
        on_row('\n', r);
    }
    r->line++;
    r->line_len = 0;
    return r->failed ? -1 : 0;
}

/* Plain text or a tab-separated file: gathers each line (across read
 * chunks) and hands it over whole. */
static int feed_lines(reader *r, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && !r->failed) {
        const char *nl = memchr(s + i, '\n', n - i);
        size_t piece = nl ? (size_t)(nl - (s + i)) : n - i;
        if (ac_grow((void **)&r->line_buf, &r->line_cap, r->line_len + piece + 1, 1))
            return out_of_memory(r);
        memcpy(r->line_buf + r->line_len, s + i, piece);
        r->line_len += piece;
        i += piece;
        if (nl) {
            if ((r->opt->lines ? end_line(r) : end_tsv_line(r)) != 0)
                return -1;
            i++;
        }
    }
    return r->failed ? -1 : 0;
}

/* The field separator: a comma if the header line (s[0..n), up to its
 * first line break) has one outside quotes, else a tab, else a semicolon;
 * a header of one column is tab-separated when the file is named *.tsv or
 * *.tsv.gz, else comma-separated. Column names seldom hold any of the
 * three, so the header tells a TSV or a semicolon-separated export (a
 * spreadsheet's, in locales with a decimal comma) from a CSV. */
static unsigned char header_delimiter(const char *s, size_t n, const char *path)
{
    int quoted = 0, tab = 0, semicolon = 0, in_line = 0; /* blank lines before the header skipped */
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c != '\n' && c != '\r' && c != ' ')
            in_line = 1;
        if (c == '"')
            quoted = !quoted;
        else if (quoted)
            continue;
        else if ((c == '\n' || c == '\r') && in_line)
            break;
        else if (c == ',')
            return ',';
        else if (c == '\t')
            tab = 1;
        else if (c == ';')
            semicolon = 1;
    }
    if (tab || semicolon)
        return tab ? '\t' : ';';
    return ac_is_tsv_name(path) ? '\t' : ',';
}

/* What a NUL byte in the first line says: UTF-16 (a byte-order mark, or
 * NULs in every other byte, the high halves of ASCII characters), or data
 * that is not text at all (binary, or a file compressed twice). */
enum { TEXT_OK, TEXT_UTF16, TEXT_BINARY };
static int first_line_kind(const char *buf, size_t n)
{
    if (n >= 2 && ((buf[0] == '\xFF' && buf[1] == '\xFE') || (buf[0] == '\xFE' && buf[1] == '\xFF')))
        return TEXT_UTF16;
    const char *eol = memchr(buf, '\n', n);
    size_t len = eol ? (size_t)(eol - buf) : n;
    if (!memchr(buf, '\0', len))
        return TEXT_OK;
    /* UTF-16LE puts the NUL after each ASCII byte, UTF-16BE before it. */
    size_t look = len < 64 ? len : 64;
    int le = look >= 2, be = look >= 2;
    for (size_t i = 0; i + 1 < look; i += 2) {
        le &= buf[i] != '\0' && buf[i + 1] == '\0';
        be &= buf[i] == '\0' && buf[i + 1] != '\0';
    }
    return le || be ? TEXT_UTF16 : TEXT_BINARY;
}

/* Reads the whole stream through the parser; 0 or -1 (r->failed). */
static int parse_stream(reader *r, gzFile gz)
{
    struct csv_parser p;
    if (csv_init(&p, CSV_STRICT | CSV_APPEND_NULL | CSV_STRICT_FINI) != 0) {
        out_of_memory(r);
        return -1;
    }
    char *buf = malloc(READ_CHUNK);
    if (!buf) {
        out_of_memory(r);
        csv_free(&p);
        return -1;
    }
    int first = 1;
    while (!r->failed) {
        int n = gzread(gz, buf, READ_CHUNK);
        if (n < 0) {
            int errnum;
            const char *msg = gzerror(gz, &errnum);
            if (errnum == Z_ERRNO)
                fail(r, r->seg_line, "cannot read: %s", strerror(errno));
            else
                fail(r, r->seg_line, "gzip data is corrupt (zlib: %s)", msg);
            break;
        }
        if (n == 0)
            break;
        size_t skip = 0;
        if (first && n >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0)
            skip = 3; /* the BOM is not part of the first column's name */
        const int kind = first ? first_line_kind(buf, (size_t)n) : TEXT_OK;
        if (kind == TEXT_UTF16) {
            fail(r, 1, "the file is UTF-16 (as Excel's \"Unicode Text\" saves it); save it as "
                       "UTF-8 (\"CSV UTF-8\")");
            break;
        }
        if (kind == TEXT_BINARY) {
            fail(r, 1, "NUL bytes: this is not a text file (binary data, or compressed twice?)");
            break;
        }
        if (first && !r->opt->lines) {
            r->delim = header_delimiter(buf + skip, (size_t)n - skip, r->path);
            csv_set_delim(&p, r->delim);
        }
        first = 0;
        if (r->opt->lines || r->delim == '\t')
            feed_lines(r, buf + skip, (size_t)n - skip);
        else
            feed(r, &p, buf + skip, (size_t)n - skip);
    }
    if (!r->failed) {
        int errnum;
        gzerror(gz, &errnum);
        if (errnum == Z_BUF_ERROR)
            fail(r, r->seg_line, "gzip data cut short (the file is truncated)");
    }
    /* From here on seg_line is the line of the last byte: where the end of the file is. */
    if (!r->failed && r->opt->lines) {
        if (r->line_len > 0) /* the last line has no line break */
            end_line(r);
    } else if (!r->failed && r->delim == '\t') {
        if (r->line_len > 0)
            end_tsv_line(r);
    } else if (!r->failed) {
        if (csv_fini(&p, on_field, on_row, r) != 0 && !r->failed) {
            if (csv_error(&p) == CSV_EPARSE)
                fail(r, r->seg_line,
                     "unterminated quoted field (opened on line %lld, still open at the end "
                     "of the file)",
                     (long long)r->field_line);
            else
                out_of_memory(r);
        }
    }
    csv_free(&p);
    free(buf);
    return r->failed ? -1 : 0;
}

/* ------------------------------------------------------------ the whole file */

/* Checks what only the whole file can tell and hands over the classes. */
static int finish(reader *r)
{
    ac_rawdata *d = r->d;
    const ac_read_options *o = r->opt;
    if (r->rows_seen == 0)
        return fail(r, 1, "empty file (no header)");
    if (d->n_rows == 0 && o->lines) {
        if (d->n_empty_skipped)
            return fail(r, 1, "no text (%lld blank line(s) skipped)",
                        (long long)d->n_empty_skipped);
        return fail(r, 1, "empty file (no text)");
    }
    if (d->n_rows == 0) {
        if (d->n_empty_skipped)
            return fail(r, 1, "no data rows (%lld row(s) with an empty text skipped)",
                        (long long)d->n_empty_skipped);
        return fail(r, 1, "no data rows");
    }
    if (r->label_col == SIZE_MAX || r->labels_off) {
        free(d->labels);
        d->labels = NULL;
        return 0;
    }
    if (!o->classes && order_classes(r) != 0)
        return out_of_memory(r);
    if (!o->classes && o->need_label && r->n_cls < 2) {
        char shown[AC_SHOWN_MAX * 2];
        ac_text_shown(shown, sizeof shown, r->cls[0], r->cls_len[0]);
        return fail(r, 1, "only one class ('%s') in the labels; a classifier needs at least two",
                    shown);
    }
    d->classes = r->cls;
    d->n_classes = r->n_cls;
    r->cls = NULL;
    r->n_cls = 0;
    return 0;
}

static void reader_free(reader *r)
{
    for (size_t i = 0; i < r->n_cols; i++)
        free(r->cols[i]);
    free(r->cols);
    for (int i = 0; i < r->n_cls; i++)
        free(r->cls[i]);
    free(r->cls);
    free(r->cls_len);
    free(r->slots);
    free(r->label);
    free(r->line_buf);
}

int ac_rawdata_read(ac_rawdata *out, const char *path, const ac_read_options *opt, ac_err *err)
{
    const ac_read_options no_options = {0};
    memset(out, 0, sizeof *out);
    reader r;
    memset(&r, 0, sizeof r);
    r.delim = ',';
    r.path = path;
    r.opt = opt ? opt : &no_options;
    r.err = err;
    r.d = out;
    r.line = r.seg_line = r.row_line = r.field_line = 1;
    r.text_col = r.label_col = SIZE_MAX;
    if (r.opt->lines) {
        if (r.opt->text_column || r.opt->label_column || r.opt->need_label || r.opt->classes)
            return ac_err_set(err, "%s: internal error: a plain-text file has no columns or labels",
                              path);
        /* No header and no columns: every line is a row, all of it the text. */
        r.rows_seen = 1;
    }

    for (int i = 0; r.opt->classes && i < r.opt->n_classes && !r.failed; i++) {
        const char *c = r.opt->classes[i];
        size_t len = strlen(c);
        if (r.n_slots && r.slots[class_slot(&r, c, len)] >= 0) {
            /* indices must stay the model's: a repeated name is a broken class list */
            ac_err_set(err, "%s: the known classes name '%s' twice", path, c);
            r.failed = 1;
        } else if (class_add(&r, c, len) < 0)
            out_of_memory(&r);
    }
    if (!r.failed) {
        out->text_off = malloc(sizeof *out->text_off);
        if (!out->text_off)
            out_of_memory(&r);
        else {
            out->text_off[0] = 0;
            r.off_cap = 1;
        }
    }
    gzFile gz = NULL;
    if (!r.failed) {
        errno = 0;
        gz = gzopen(path, "rb");
        if (!gz)
            ac_err_set(err, "%s: cannot open: %s", path, errno ? strerror(errno) : "out of memory");
        else
            gzbuffer(gz, GZ_BUFFER);
    }
    if (gz) {
        if (parse_stream(&r, gz) == 0)
            finish(&r);
        gzclose(gz);
    }
    int failed = r.failed || !gz;
    reader_free(&r);
    if (failed) {
        ac_rawdata_free(out);
        return -1;
    }
    /* Give back the growth slack of the (large) text buffer. */
    char *shrunk = realloc(out->text_buf, r.text_used);
    if (shrunk)
        out->text_buf = shrunk;
    return 0;
}

void ac_rawdata_free(ac_rawdata *d)
{
    if (!d)
        return;
    free(d->text_buf);
    free(d->text_off);
    free(d->labels);
    free(d->line);
    for (int i = 0; i < d->n_classes; i++)
        free(d->classes[i]);
    free(d->classes);
    memset(d, 0, sizeof *d);
}

/* ------------------------------------------------------------ truncation names */

static const ac_name TRUNCATION_NAMES[] = {
    {AC_TRUNC_HEAD, "head", 0},
    {AC_TRUNC_TAIL, "tail", 0},
    {AC_TRUNC_HEAD_TAIL, "head+tail", 0},
    {AC_TRUNC_HEAD_TAIL, "head_tail", 1},
};
const ac_names ac_truncation_names = AC_NAMES(TRUNCATION_NAMES);

const char *ac_truncation_name(ac_truncation v)
{
    return ac_names_name(&ac_truncation_names, (int)v);
}

int ac_truncation_parse(const char *s, ac_truncation *out)
{
    int v;
    if (ac_names_parse(&ac_truncation_names, s, &v))
        return -1;
    *out = (ac_truncation)v;
    return 0;
}
