/* Unlabelled text for pretraining: several files, each a CSV with a text
 * column or plain text with one document a line, read into one ac_rawdata. */
#include <stdlib.h>
#include <string.h>

#include "attnctl/text.h"
#include "text_internal.h"

static const ac_name TEXT_FORMAT_NAMES[] = {
    {AC_TEXT_FORMAT_AUTO, "auto", 0},
    {AC_TEXT_FORMAT_CSV, "csv", 0},
    {AC_TEXT_FORMAT_LINES, "lines", 0},
};
const ac_names ac_text_format_names = AC_NAMES(TEXT_FORMAT_NAMES);

const char *ac_text_format_name(ac_text_format v)
{
    return ac_names_name(&ac_text_format_names, (int)v);
}

int ac_text_format_parse(const char *s, ac_text_format *out)
{
    int v;
    if (ac_names_parse(&ac_text_format_names, s, &v))
        return -1;
    *out = (ac_text_format)v;
    return 0;
}

ac_text_format ac_text_format_of(const char *path, ac_text_format format)
{
    if (format != AC_TEXT_FORMAT_AUTO)
        return format;
    return ac_ends_with_nocase(path, ".csv") || ac_ends_with_nocase(path, ".csv.gz") ||
                   ac_is_tsv_name(path)
               ? AC_TEXT_FORMAT_CSV
               : AC_TEXT_FORMAT_LINES;
}

int ac_rawdata_append(ac_rawdata *dst, const ac_rawdata *src, const int64_t *rows,
                      const int32_t *labels, int64_t n, ac_err *err)
{
    if ((labels != NULL) != (dst->labels != NULL) && dst->n_rows > 0)
        return ac_err_set(err, "appending %slabelled rows to %slabelled data",
                          labels ? "" : "un", dst->labels ? "" : "un");
    size_t old_bytes = dst->n_rows ? (size_t)dst->text_off[dst->n_rows] : 0, add_bytes = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = rows ? rows[i] : i;
        add_bytes += (size_t)(src->text_off[r + 1] - src->text_off[r]);
    }
    int64_t total = dst->n_rows + n;
    size_t slots = (size_t)(total > 0 ? total : 1);
    char *text = realloc(dst->text_buf, old_bytes + add_bytes + 1);
    if (!text)
        return ac_err_set(err, "out of memory for %lld texts", (long long)total);
    dst->text_buf = text;
    int64_t *off = realloc(dst->text_off, (slots + 1) * sizeof *off);
    if (!off)
        return ac_err_set(err, "out of memory for %lld texts", (long long)total);
    dst->text_off = off;
    int64_t *line = realloc(dst->line, slots * sizeof *line);
    if (!line)
        return ac_err_set(err, "out of memory for %lld texts", (long long)total);
    dst->line = line;
    if (labels) {
        int32_t *lab = realloc(dst->labels, slots * sizeof *lab);
        if (!lab)
            return ac_err_set(err, "out of memory for %lld texts", (long long)total);
        dst->labels = lab;
    }
    off[0] = 0;
    size_t at = old_bytes;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = rows ? rows[i] : i;
        size_t len = (size_t)(src->text_off[r + 1] - src->text_off[r]);
        memcpy(text + at, src->text_buf + src->text_off[r], len);
        at += len;
        off[dst->n_rows + i + 1] = (int64_t)at;
        line[dst->n_rows + i] = src->line[r];
        if (labels)
            dst->labels[dst->n_rows + i] = labels[i];
    }
    dst->n_rows = total;
    return 0;
}

int ac_rawdata_read_texts(ac_rawdata *out, const char *const *paths, int n_paths,
                          ac_text_format format, const char *text_column, ac_err *err)
{
    memset(out, 0, sizeof *out);
    if (n_paths < 1)
        return ac_err_set(err, "no text files given");
    for (int i = 0; i < n_paths; i++) {
        int lines = ac_text_format_of(paths[i], format) == AC_TEXT_FORMAT_LINES;
        ac_read_options ro = {.text_column = lines ? NULL : text_column, .lines = lines};
        ac_rawdata part;
        if (ac_rawdata_read(&part, paths[i], &ro, err) != 0) {
            ac_rawdata_free(out);
            return -1;
        }
        /* A CSV may have a label column: pretraining ignores it. */
        free(part.labels);
        part.labels = NULL;
        int rc = ac_rawdata_append(out, &part, NULL, NULL, part.n_rows, err);
        out->n_empty_skipped += part.n_empty_skipped;
        out->n_invalid_utf8 += part.n_invalid_utf8;
        ac_rawdata_free(&part);
        if (rc != 0) {
            ac_rawdata_free(out);
            return -1;
        }
    }
    return 0;
}
