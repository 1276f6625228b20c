/* CSV reading (src/text/csv.c): RFC 4180 quoting, line numbers, gzip by
 * content, column and class rules, every error message with its FILE:LINE,
 * and hostile input (NUL bytes, invalid UTF-8, a 50 MB field, garbage). */
#include <check.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "attnctl/text.h"

#include "test_util.h"

#define DATA "tests/data/csv/"
#define IMDB_DIR "../shared/data/imdb/"

/* ------------------------------------------------------------------ helpers */

typedef struct {
    char path[256];
} tmpdir;

static void tmpdir_make(tmpdir *d)
{
    snprintf(d->path, sizeof d->path, "/tmp/attnctl-test-csv-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d->path));
}

static void tmpdir_remove(tmpdir *d)
{
    rm_rf(d->path);
}

static char *join(const tmpdir *d, const char *name)
{
    static char buf[4][512]; /* a few paths alive at once in one test */
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", d->path, name);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

static void write_gz(const char *path, const void *data, size_t len)
{
    gzFile gz = gzopen(path, "wb");
    ck_assert_ptr_nonnull(gz);
    ck_assert_int_eq(gzwrite(gz, data, (unsigned)len), (int)len);
    ck_assert_int_eq(gzclose(gz), Z_OK);
}


/* Every structural promise of a successful read. */
static void check_invariants(const ac_rawdata *d)
{
    ck_assert_int_gt(d->n_rows, 0);
    ck_assert_int_eq(d->text_off[0], 0);
    for (int64_t i = 0; i < d->n_rows; i++) {
        ck_assert_int_gt(d->text_off[i + 1], d->text_off[i]);
        ck_assert_int_eq(d->text_buf[d->text_off[i + 1] - 1], '\0');
        ck_assert_uint_eq(strlen(ac_rawdata_text(d, i)), ac_rawdata_text_len(d, i));
        ck_assert_int_ge(d->line[i], 2);
        if (i)
            ck_assert_int_gt(d->line[i], d->line[i - 1]);
        if (d->labels) {
            ck_assert_int_ge(d->labels[i], 0);
            ck_assert_int_lt(d->labels[i], d->n_classes);
        }
    }
    if (!d->labels)
        ck_assert_int_eq(d->n_classes, 0);
}

static void read_ok(ac_rawdata *d, const char *path, const ac_read_options *o)
{
    ac_err err = {{0}};
    int rc = ac_rawdata_read(d, path, o, &err);
    ck_assert_msg(rc == 0, "reading %s: %s", path, err.msg);
    check_invariants(d);
}

static int is_zeroed(const ac_rawdata *d)
{
    static const ac_rawdata zero;
    return memcmp(d, &zero, sizeof zero) == 0;
}

/* Reads a file that must fail with "PATH:LINE: " and every word in words
 * (NULL-terminated); the struct must come back zeroed. */
static void read_fails(const char *path, const ac_read_options *o, long long line,
                       const char *const *words)
{
    ac_rawdata d;
    memset(&d, 0xAB, sizeof d); /* garbage in: must be zeroed on the way out */
    ac_err err = {{0}};
    ck_assert_int_eq(ac_rawdata_read(&d, path, o, &err), -1);
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s:%lld: ", path, line);
    ck_assert_msg(strncmp(err.msg, prefix, strlen(prefix)) == 0, "expected prefix '%s' in '%s'",
                  prefix, err.msg);
    for (int i = 0; words[i]; i++)
        ck_assert_msg(strstr(err.msg, words[i]), "expected '%s' in '%s'", words[i], err.msg);
    ck_assert(is_zeroed(&d));
    ac_rawdata_free(&d); /* safe on a zeroed struct */
}

#define WORDS(...) ((const char *const[]){__VA_ARGS__, NULL})

static const ac_read_options LABELLED = {.need_label = 1};
static const ac_read_options UNLABELLED = {.need_label = 0};

/* Writes len bytes as t/name and expects reading it to fail: read_fails. */
static void bytes_fail(const tmpdir *t, const char *name, const void *bytes, size_t len,
                       const ac_read_options *o, long long line, const char *const *words)
{
    write_bytes(join(t, name), bytes, len);
    read_fails(join(t, name), o, line, words);
}

/* ------------------------------------------------------------ RFC 4180 & lines */

static const char *const QUOTED_TEXTS[] = {"first line\nsecond line", "one, two",
                                           "a \"quoted\" word\n\nand a blank line inside", "last"};
static const int64_t QUOTED_LINES[] = {2, 4, 5, 8};

START_TEST(test_quoting_and_line_numbers)
{
    ac_rawdata d;
    read_ok(&d, DATA "quoted_newlines.csv", &LABELLED);
    ck_assert_int_eq(d.n_rows, 4);
    for (int i = 0; i < 4; i++) {
        ck_assert_str_eq(ac_rawdata_text(&d, i), QUOTED_TEXTS[i]);
        ck_assert_int_eq(d.line[i], QUOTED_LINES[i]);
    }
    ck_assert_int_eq(d.n_classes, 2);
    ck_assert_str_eq(d.classes[0], "negative");
    ck_assert_str_eq(d.classes[1], "positive");
    const int32_t want[] = {1, 0, 1, 0};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(d.labels[i], want[i]);
    ck_assert_int_eq(d.n_empty_skipped, 0);
    ck_assert_int_eq(d.n_invalid_utf8, 0);
    ac_rawdata_free(&d);
    ck_assert(is_zeroed(&d));
    ac_rawdata_free(&d); /* twice is fine */
}
END_TEST

START_TEST(test_crlf_and_lone_cr)
{
    tmpdir t;
    tmpdir_make(&t);
    size_t len;
    char *lf = test_slurp(DATA "quoted_newlines.csv", &len);
    char *crlf = malloc(2 * len), *cr = malloc(len);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (lf[i] == '\n')
            crlf[n++] = '\r';
        crlf[n++] = lf[i];
        cr[i] = lf[i] == '\n' ? '\r' : lf[i];
    }
    write_bytes(join(&t, "crlf.csv"), crlf, n);
    write_bytes(join(&t, "cr.csv"), cr, len);

    ac_rawdata d;
    read_ok(&d, join(&t, "crlf.csv"), &LABELLED);
    ck_assert_int_eq(d.n_rows, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(d.line[i], QUOTED_LINES[i]);
    /* inside quotes the line break is data, kept as written */
    ck_assert_str_eq(ac_rawdata_text(&d, 0), "first line\r\nsecond line");
    ck_assert_str_eq(ac_rawdata_text(&d, 1), "one, two");
    ck_assert_str_eq(ac_rawdata_text(&d, 3), "last");
    ck_assert_str_eq(d.classes[d.labels[3]], "negative"); /* no '\r' left on the label */
    ac_rawdata_free(&d);

    read_ok(&d, join(&t, "cr.csv"), &LABELLED);
    ck_assert_int_eq(d.n_rows, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(d.line[i], QUOTED_LINES[i]);
    ck_assert_str_eq(ac_rawdata_text(&d, 0), "first line\rsecond line");
    ac_rawdata_free(&d);

    free(lf);
    free(crlf);
    free(cr);
    tmpdir_remove(&t);
}
END_TEST

/* The reader hands libcsv 64 KiB at a time: a CRLF split across two reads
 * is still one line break. */
START_TEST(test_crlf_across_reads)
{
    tmpdir t;
    tmpdir_make(&t);
    const size_t chunk = 64 * 1024;
    const char *head = "review,sentiment\r\n";
    size_t n = 0, cap = 3 * chunk;
    char *buf = malloc(cap);
    n += (size_t)sprintf(buf, "%s", head);
    size_t text_len = chunk - 1 - strlen(",pos") - n; /* puts that row's '\r' at chunk - 1 */
    memset(buf + n, 'a', text_len);
    n += text_len;
    n += (size_t)sprintf(buf + n, ",pos\r\nb,neg\r\n");
    ck_assert_int_eq(buf[chunk - 1], '\r');
    ck_assert_int_eq(buf[chunk], '\n');
    write_bytes(join(&t, "split.csv"), buf, n);
    write_gz(join(&t, "split.csv.gz"), buf, n);
    const char *names[] = {"split.csv", "split.csv.gz"};
    for (int k = 0; k < 2; k++) {
        ac_rawdata d;
        read_ok(&d, join(&t, names[k]), &LABELLED);
        ck_assert_int_eq(d.n_rows, 2);
        ck_assert_uint_eq(ac_rawdata_text_len(&d, 0), text_len);
        ck_assert_str_eq(ac_rawdata_text(&d, 1), "b");
        ck_assert_int_eq(d.line[1], 3);
        ac_rawdata_free(&d);
    }
    free(buf);
    tmpdir_remove(&t);
}
END_TEST

START_TEST(test_blank_lines_between_rows)
{
    ac_rawdata d;
    read_ok(&d, DATA "blank_lines.csv", &LABELLED);
    ck_assert_int_eq(d.n_rows, 2);
    ck_assert_str_eq(ac_rawdata_text(&d, 0), "hello");
    ck_assert_int_eq(d.line[0], 3);
    ck_assert_str_eq(ac_rawdata_text(&d, 1), "world");
    ck_assert_int_eq(d.line[1], 5);
    ac_rawdata_free(&d);
}
END_TEST

START_TEST(test_bom_stripped)
{
    ac_rawdata d;
    read_ok(&d, DATA "bom.csv", &LABELLED); /* BOM then a quoted "review" */
    ck_assert_int_eq(d.n_rows, 2);
    ck_assert_str_eq(ac_rawdata_text(&d, 0), "great");
    ck_assert_int_eq(d.line[0], 2);
    ac_rawdata_free(&d);
}
END_TEST

START_TEST(test_no_final_newline)
{
    ac_rawdata d;
    read_ok(&d, DATA "no_final_newline.csv", &LABELLED);
    ck_assert_int_eq(d.n_rows, 2);
    ck_assert_str_eq(ac_rawdata_text(&d, 1), "bad, \"really\"");
    ck_assert_int_eq(d.line[1], 3);
    ck_assert_str_eq(d.classes[d.labels[1]], "negative");
    ac_rawdata_free(&d);
}
END_TEST

/* ------------------------------------------------------------ gzip */

START_TEST(test_gzip_round_trip_by_content)
{
    tmpdir t;
    tmpdir_make(&t);
    size_t len;
    char *csv = test_slurp(DATA "quoted_newlines.csv", &len);
    /* gzip under a plain name and plain under a .gz name: content decides */
    write_gz(join(&t, "a.csv.gz"), csv, len);
    write_gz(join(&t, "gzip-inside.csv"), csv, len);
    write_bytes(join(&t, "plain.csv.gz"), csv, len);
    const char *names[] = {"a.csv.gz", "gzip-inside.csv", "plain.csv.gz"};
    for (int k = 0; k < 3; k++) {
        ac_rawdata d;
        read_ok(&d, join(&t, names[k]), &LABELLED);
        ck_assert_int_eq(d.n_rows, 4);
        for (int i = 0; i < 4; i++) {
            ck_assert_str_eq(ac_rawdata_text(&d, i), QUOTED_TEXTS[i]);
            ck_assert_int_eq(d.line[i], QUOTED_LINES[i]);
        }
        ac_rawdata_free(&d);
    }
    free(csv);
    tmpdir_remove(&t);
}
END_TEST

/* A CSV big enough that its gzip form spans several zlib buffers. */
static char *many_rows(size_t *len, int n_rows)
{
    size_t cap = (size_t)n_rows * 80 + 64, n = 0;
    char *s = malloc(cap);
    ck_assert_ptr_nonnull(s);
    n += (size_t)sprintf(s, "review,sentiment\n");
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < n_rows; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        n += (size_t)sprintf(s + n, "\"row %d, value %llu\",%s\n", i,
                             (unsigned long long)(x % 1000000007ULL), i % 2 ? "pos" : "neg");
    }
    *len = n;
    return s;
}

START_TEST(test_gzip_cut_short)
{
    tmpdir t;
    tmpdir_make(&t);
    size_t len;
    char *csv = many_rows(&len, 20000);
    write_gz(join(&t, "full.csv.gz"), csv, len);
    ac_rawdata d;
    read_ok(&d, join(&t, "full.csv.gz"), &LABELLED);
    ck_assert_int_eq(d.n_rows, 20000);
    ck_assert_int_eq(d.line[19999], 20001);
    ac_rawdata_free(&d);

    size_t glen;
    char *gz = test_slurp(join(&t, "full.csv.gz"), &glen);
    ck_assert_uint_gt(glen, 1000);
    /* cut in the middle of the deflate data, and just before the trailer's end */
    const size_t cuts[] = {glen / 2, glen - 3};
    for (int k = 0; k < 2; k++) {
        const char *cut = join(&t, "cut.csv.gz");
        write_bytes(cut, gz, cuts[k]);
        ac_rawdata e;
        memset(&e, 0xAB, sizeof e);
        ac_err err = {{0}};
        ck_assert_int_eq(ac_rawdata_read(&e, cut, &LABELLED, &err), -1);
        char prefix[600];
        snprintf(prefix, sizeof prefix, "%s:", cut);
        ck_assert_msg(strncmp(err.msg, prefix, strlen(prefix)) == 0, "%s", err.msg);
        ck_assert_msg(strstr(err.msg, "gzip data cut short"), "%s", err.msg);
        /* the line is where the data stops: a real line of the file, not 0 or 1 */
        long long line = strtoll(err.msg + strlen(prefix), NULL, 10);
        ck_assert_int_gt(line, 1);
        ck_assert_int_le(line, 20001);
        ck_assert(is_zeroed(&e));
    }

    /* a damaged byte in the middle: an error, never a crash */
    gz[glen / 2] ^= 0x55;
    gz[glen / 2 + 1] ^= 0xAA;
    const char *bad = join(&t, "bad.csv.gz");
    write_bytes(bad, gz, glen);
    ac_err err = {{0}};
    ck_assert_int_eq(ac_rawdata_read(&d, bad, &LABELLED, &err), -1);
    ck_assert_msg(strncmp(err.msg, bad, strlen(bad)) == 0, "%s", err.msg);
    ck_assert(is_zeroed(&d));
    free(gz);
    free(csv);
    tmpdir_remove(&t);
}
END_TEST

/* ------------------------------------------------------------ columns */

START_TEST(test_columns_by_name)
{
    ac_rawdata d;
    /* " LABEL " and "  Text  " match label and text; id and notes are ignored */
    read_ok(&d, DATA "column_order.csv", &LABELLED);
    ck_assert_int_eq(d.n_rows, 2);
    ck_assert_str_eq(ac_rawdata_text(&d, 0), "good film");
    ck_assert_str_eq(ac_rawdata_text(&d, 1), "bad film");
    ck_assert_int_eq(d.n_classes, 2);
    ck_assert_str_eq(d.classes[d.labels[0]], "pos");
    ck_assert_str_eq(d.classes[d.labels[1]], "neg");
    ac_rawdata_free(&d);

    /* explicit names, trimmed and case-insensitive (one class left: labels not needed) */
    ac_read_options o = {.text_column = " NOTES ", .label_column = "Id", .need_label = 0};
    read_ok(&d, DATA "column_order.csv", &o);
    ck_assert_int_eq(d.n_rows, 1);
    ck_assert_str_eq(ac_rawdata_text(&d, 0), "x, y");
    ck_assert_int_eq(d.n_empty_skipped, 1);
    ck_assert_str_eq(d.classes[d.labels[0]], "1");
    ac_rawdata_free(&d);
}
END_TEST

START_TEST(test_missing_columns)
{
    read_fails(DATA "no_text_column.csv", &LABELLED, 1,
               WORDS("no column named 'review', 'text' or 'sentence' in the header",
                     "(columns: a, b); name the text column with --text-column"));
    read_fails(DATA "no_label_column.csv", &LABELLED, 1,
               WORDS("no column named 'sentiment', 'label' or 'polarity'",
                     "(columns: text, b); name the label column with --label-column"));
    ac_read_options o = {.text_column = "body"};
    read_fails(DATA "column_order.csv", &o, 1,
               WORDS("no column named 'body'", "(columns: id, LABEL, notes, Text)"));
    /* an explicit label column must exist even when labels are optional */
    ac_read_options ol = {.label_column = "stars", .need_label = 0};
    read_fails(DATA "column_order.csv", &ol, 1, WORDS("no column named 'stars'"));
    ac_read_options same = {.text_column = "notes", .label_column = "NOTES"};
    read_fails(DATA "column_order.csv", &same, 1, WORDS("'notes'", "both the text and the label"));
    /* a name the header has twice would read its first column in silence;
     * a twice-named column nobody reads is fine */
    tmpdir t;
    tmpdir_make(&t);
    const char twice[] = "review,Review,sentiment\nx,good film,pos\nx,bad film,neg\n";
    bytes_fail(&t, "twice.csv", twice, sizeof twice - 1, &LABELLED, 1,
               WORDS("names column 'review' twice (columns 1 and 2)", "rename one"));
    const char labels_twice[] = "text,label,label\ngood film,pos,x\nbad film,neg,y\n";
    bytes_fail(&t, "labels_twice.csv", labels_twice, sizeof labels_twice - 1, &LABELLED, 1,
               WORDS("'label' twice (columns 2 and 3)"));
    const char unused[] = "id,id,text,label\n1,2,good film,pos\n3,4,bad film,neg\n";
    write_bytes(join(&t, "unused_twice.csv"), unused, sizeof unused - 1);
    ac_rawdata d;
    read_ok(&d, join(&t, "unused_twice.csv"), &LABELLED);
    ck_assert_int_eq(d.n_rows, 2);
    ac_rawdata_free(&d);
    tmpdir_remove(&t);
}
END_TEST

START_TEST(test_labels_optional)
{
    ac_rawdata d;
    /* no label column and none needed: labels NULL */
    read_ok(&d, DATA "no_label_column.csv", &UNLABELLED);
    ck_assert_int_eq(d.n_rows, 2);
    ck_assert_ptr_null(d.labels);
    ck_assert_int_eq(d.n_classes, 0);
    ac_rawdata_free(&d);
    read_ok(&d, DATA "no_label_column.csv", NULL); /* no options at all */
    ck_assert_ptr_null(d.labels);
    ac_rawdata_free(&d);

    /* a label column present but not needed: still read, classes discovered */
    read_ok(&d, DATA "quoted_newlines.csv", &UNLABELLED);
    ck_assert_ptr_nonnull(d.labels);
    ck_assert_int_eq(d.n_classes, 2);
    ck_assert_int_eq(d.labels[0], 1);
    ac_rawdata_free(&d);

    /* ... one class is fine then */
    read_ok(&d, DATA "one_class.csv", &UNLABELLED);
    ck_assert_int_eq(d.n_classes, 1);
    ck_assert_str_eq(d.classes[0], "pos");
    ac_rawdata_free(&d);

    /* ... and an empty label makes the column unusable: labels NULL, no error */
    read_ok(&d, DATA "empty_label.csv", &UNLABELLED);
    ck_assert_int_eq(d.n_rows, 3);
    ck_assert_ptr_null(d.labels);
    ck_assert_ptr_null(d.classes);
    ac_rawdata_free(&d);
}
END_TEST

/* ------------------------------------------------------------ classes */

static void assert_classes(const ac_rawdata *d, const char *const *names, const int32_t *labels)
{
    int n = 0;
    while (names[n])
        n++;
    ck_assert_int_eq(d->n_classes, n);
    for (int i = 0; i < n; i++)
        ck_assert_str_eq(d->classes[i], names[i]);
    for (int64_t i = 0; i < d->n_rows; i++)
        ck_assert_int_eq(d->labels[i], labels[i]);
}

START_TEST(test_class_order)
{
    ac_rawdata d;
    read_ok(&d, DATA "numeric_labels.csv", &LABELLED); /* 10, 2, -1, 2 */
    assert_classes(&d, WORDS("-1", "2", "10"), (const int32_t[]){2, 1, 0, 1});
    ac_rawdata_free(&d);

    read_ok(&d, DATA "byte_order_labels.csv", &LABELLED); /* b, B, a, b */
    assert_classes(&d, WORDS("B", "a", "b"), (const int32_t[]){2, 0, 1, 2});
    ac_rawdata_free(&d);

    read_ok(&d, DATA "mixed_labels.csv", &LABELLED); /* 10, 9, x: not all integers */
    assert_classes(&d, WORDS("10", "9", "x"), (const int32_t[]){0, 1, 2});
    ac_rawdata_free(&d);

    read_ok(&d, DATA "trimmed_labels.csv", &LABELLED);
    assert_classes(&d, WORDS("negative", "positive"), (const int32_t[]){1, 0});
    ac_rawdata_free(&d);
}
END_TEST

START_TEST(test_explicit_classes)
{
    char *known[] = {"positive", "negative"}; /* not sorted: the given order is kept */
    ac_read_options o = {.need_label = 1, .classes = known, .n_classes = 2};
    ac_rawdata d;
    read_ok(&d, DATA "quoted_newlines.csv", &o);
    assert_classes(&d, WORDS("positive", "negative"), (const int32_t[]){0, 1, 0, 1});
    ck_assert_ptr_ne(d.classes[0], known[0]); /* the reader owns its copy */
    ac_rawdata_free(&d);

    char *sorted[] = {"negative", "positive"};
    o.classes = sorted;
    read_fails(DATA "unknown_label.csv", &o, 3,
               WORDS("unknown label 'maybe' (the model knows: negative, positive)"));
    o.need_label = 0; /* a label a model does not know is an error either way */
    read_fails(DATA "unknown_label.csv", &o, 3, WORDS("unknown label 'maybe'"));

    /* one known class is enough when the classes are given */
    char *only[] = {"pos"};
    ac_read_options o1 = {.need_label = 1, .classes = only, .n_classes = 1};
    read_ok(&d, DATA "one_class.csv", &o1);
    ck_assert_int_eq(d.n_classes, 1);
    ac_rawdata_free(&d);

    char *twice[] = {"pos", "neg", "pos"};
    ac_read_options o2 = {.need_label = 1, .classes = twice, .n_classes = 3};
    ac_err err = {{0}};
    ck_assert_int_eq(ac_rawdata_read(&d, DATA "one_class.csv", &o2, &err), -1);
    ck_assert_msg(strstr(err.msg, "'pos' twice"), "%s", err.msg);
    ck_assert(is_zeroed(&d));
}
END_TEST

START_TEST(test_label_errors)
{
    read_fails(DATA "one_class.csv", &LABELLED, 1, WORDS("only one class ('pos') in the labels"));
    read_fails(DATA "empty_label.csv", &LABELLED, 3, WORDS("empty label", "'sentiment'"));

    tmpdir t;
    tmpdir_make(&t);
    const char nul[] = "review,sentiment\ngood,pos\nbad,ne\0g\n";
    bytes_fail(&t, "nul_label.csv", nul, sizeof nul - 1, &LABELLED, 3, WORDS("label", "NUL"));
    const char bad[] = "review,sentiment\ngood,pos\nbad,n\xff\n";
    bytes_fail(&t, "utf8_label.csv", bad, sizeof bad - 1, &LABELLED, 3,
               WORDS("label", "not valid UTF-8"));
    /* predict writes LABEL TAB PROBABILITY, one line a text: a label with a
     * line break or a tab would break every line it is on */
    const char nl[] = "review,sentiment\ngood,pos\nbad,\"very\nbad\"\n";
    bytes_fail(&t, "nl_label.csv", nl, sizeof nl - 1, &LABELLED, 3,
               WORDS("label 'very?bad'", "a label must be one line of text"));
    const char tab[] = "review,sentiment\ngood,\"po\ts\"\n";
    bytes_fail(&t, "tab_label.csv", tab, sizeof tab - 1, &LABELLED, 2, WORDS("line break, tab"));

    /* a column with a thousand different values is not a label column */
    FILE *f = fopen(join(&t, "many.csv"), "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "review,label\n");
    for (int i = 0; i < 1001; i++)
        fprintf(f, "text %d,c%d\n", i, i);
    fclose(f);
    read_fails(join(&t, "many.csv"), &LABELLED, 1002, WORDS("more than 1000 different labels"));
    ac_rawdata d;
    read_ok(&d, join(&t, "many.csv"), &UNLABELLED);
    ck_assert_int_eq(d.n_rows, 1001);
    ck_assert_ptr_null(d.labels);
    ac_rawdata_free(&d);
    tmpdir_remove(&t);
}
END_TEST

/* ------------------------------------------------------------ texts */

START_TEST(test_empty_texts_skipped)
{
    ac_rawdata d;
    read_ok(&d, DATA "empty_text.csv", &LABELLED);
    /* "", "   ", " \t ", and no-break + ideographic spaces are skipped */
    ck_assert_int_eq(d.n_rows, 2);
    ck_assert_int_eq(d.n_empty_skipped, 4);
    ck_assert_str_eq(ac_rawdata_text(&d, 0), "good");
    ck_assert_int_eq(d.line[0], 2);
    ck_assert_str_eq(ac_rawdata_text(&d, 1), "bad");
    ck_assert_int_eq(d.line[1], 6);
    ac_rawdata_free(&d);

    read_fails(DATA "all_empty.csv", &LABELLED, 1,
               WORDS("no data rows", "2 row(s) with an empty text skipped"));
    read_fails(DATA "header_only.csv", &LABELLED, 1, WORDS("no data rows"));
}
END_TEST

START_TEST(test_invalid_utf8_and_nul)
{
    tmpdir t;
    tmpdir_make(&t);
    const char csv[] = "review,sentiment\n"
                       "\xff bad,pos\n"
                       "good \xc3\x28,neg\n"
                       "ab\0cd,pos\n"
                       "fine caf\xc3\xa9,neg\n";
    write_bytes(join(&t, "bad.csv"), csv, sizeof csv - 1);
    ac_rawdata d;
    read_ok(&d, join(&t, "bad.csv"), &LABELLED);
    ck_assert_int_eq(d.n_rows, 4);
    ck_assert_str_eq(ac_rawdata_text(&d, 0), "\xEF\xBF\xBD bad");
    ck_assert_str_eq(ac_rawdata_text(&d, 1), "good \xEF\xBF\xBD(");
    ck_assert_str_eq(ac_rawdata_text(&d, 2), "ab\xEF\xBF\xBD" "cd");
    ck_assert_str_eq(ac_rawdata_text(&d, 3), "fine caf\xc3\xa9");
    ck_assert_int_eq(d.n_invalid_utf8, 3);
    ck_assert_int_eq(d.line[2], 4);
    ac_rawdata_free(&d);
    /* UTF-16 (a spreadsheet's "Unicode Text"), with or without its mark, is
     * named as such, not read as a header of odd column names */
    const char le_bom[] = "\xFF\xFEr\0e\0v\0i\0e\0w\0,\0l\0a\0b\0e\0l\0\r\0\n\0";
    const char be[] = "\0r\0e\0v\0i\0e\0w\0,\0l\0a\0b\0e\0l\0\n";
    bytes_fail(&t, "le.csv", le_bom, sizeof le_bom - 1, &LABELLED, 1,
               WORDS("the file is UTF-16", "save it as UTF-8"));
    bytes_fail(&t, "be.csv", be, sizeof be - 1, &LABELLED, 1, WORDS("the file is UTF-16"));
    /* other NUL bytes (binary data, a gzip inside a gzip) are not called UTF-16 */
    const char binary[] = "\x7f" "ELF\x02\x01\x01\0\0\0\0review,label\n";
    bytes_fail(&t, "twice.csv", binary, sizeof binary - 1, &LABELLED, 1,
               WORDS("NUL bytes: this is not a text file"));
    tmpdir_remove(&t);
}
END_TEST

START_TEST(test_giant_field)
{
    tmpdir t;
    tmpdir_make(&t);
    /* a 50 MB quoted text with a line break every MiB, then a normal row */
    const size_t big = 50u << 20;
    FILE *f = fopen(join(&t, "big.csv"), "wb");
    ck_assert_ptr_nonnull(f);
    char *block = malloc(1 << 20);
    memset(block, 'a', 1 << 20);
    block[(1 << 20) - 1] = '\n';
    block[1000] = ',';
    fputs("review,sentiment\n\"", f);
    for (size_t i = 0; i < big >> 20; i++)
        ck_assert_uint_eq(fwrite(block, 1, 1 << 20, f), 1u << 20);
    fputs("\",pos\nsmall,neg\n", f);
    ck_assert_int_eq(fclose(f), 0);

    ac_rawdata d;
    read_ok(&d, join(&t, "big.csv"), &LABELLED);
    ck_assert_int_eq(d.n_rows, 2);
    ck_assert_uint_eq(ac_rawdata_text_len(&d, 0), big);
    const char *s = ac_rawdata_text(&d, 0);
    ck_assert(memcmp(s, block, 1 << 20) == 0);
    ck_assert(memcmp(s + big - (1 << 20), block, 1 << 20) == 0);
    ck_assert_str_eq(ac_rawdata_text(&d, 1), "small");
    /* opened on line 2, 50 line breaks inside, closed on line 52; the next row on 53 */
    ck_assert_int_eq(d.line[1], 53);
    ac_rawdata_free(&d);
    free(block);
    tmpdir_remove(&t);
}
END_TEST

/* ------------------------------------------------------------ malformed rows */

START_TEST(test_row_errors)
{
    /* the row starts on line 4, after a quoted line break on lines 2-3 */
    read_fails(DATA "short_row.csv", &LABELLED, 4,
               WORDS("row has 1 field(s), the header has 2"));
    read_fails(DATA "long_row.csv", &LABELLED, 2,
               WORDS("row has 3 field(s), the header has 2", "quoted"));
    read_fails(DATA "stray_quote.csv", &LABELLED, 3, WORDS("quote inside an unquoted field"));
    read_fails(DATA "text_after_quote.csv", &LABELLED, 3,
               WORDS("after the closing quote", "opened on line 2"));
    read_fails(DATA "unterminated.csv", &LABELLED, 5,
               WORDS("unterminated quoted field (opened on line 3"));
}
END_TEST

START_TEST(test_empty_files)
{
    read_fails(DATA "empty.csv", &LABELLED, 1, WORDS("empty file"));
    read_fails(DATA "blank_only.csv", &UNLABELLED, 1, WORDS("empty file"));
    tmpdir t;
    tmpdir_make(&t);
    write_bytes(join(&t, "bom_only.csv"), "\xEF\xBB\xBF", 3);
    read_fails(join(&t, "bom_only.csv"), &LABELLED, 1, WORDS("empty file"));
    write_gz(join(&t, "empty.csv.gz"), "", 0);
    read_fails(join(&t, "empty.csv.gz"), &LABELLED, 1, WORDS("empty file"));
    tmpdir_remove(&t);
}
END_TEST

START_TEST(test_open_errors)
{
    ac_rawdata d;
    memset(&d, 0xAB, sizeof d);
    ac_err err = {{0}};
    ck_assert_int_eq(ac_rawdata_read(&d, DATA "does-not-exist.csv", &LABELLED, &err), -1);
    ck_assert_msg(strstr(err.msg, DATA "does-not-exist.csv: cannot open"), "%s", err.msg);
    ck_assert(is_zeroed(&d));

    memset(&d, 0xAB, sizeof d);
    ck_assert_int_eq(ac_rawdata_read(&d, DATA, &LABELLED, &err), -1); /* a directory */
    ck_assert_msg(strncmp(err.msg, DATA, strlen(DATA)) == 0, "%s", err.msg);
    ck_assert(is_zeroed(&d));

    ac_rawdata zero;
    memset(&zero, 0, sizeof zero);
    ac_rawdata_free(&zero);
    ac_rawdata_free(NULL);
}
END_TEST

/* Random bytes and random CSV-ish soup: success with sound structure or a
 * FILE:LINE error with a zeroed struct, never a crash (ASan watches). */
START_TEST(test_garbage_never_crashes)
{
    tmpdir t;
    tmpdir_make(&t);
    static const char soup[] = {'a', 'b', ',', ',', '"', '"', '\n', '\r', ' ', '\0', '\xff', '\xc3'};
    uint64_t x = 0x9E3779B97F4A7C15ULL;
    char *buf = malloc(1 << 16);
    int n_ok = 0;
    for (int round = 0; round < 300; round++) {
        size_t n = 1 + (size_t)(round * 211) % (1 << 16);
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            buf[i] = round % 3 == 0 ? (char)(x >> 24) : soup[(x >> 24) % sizeof soup];
        }
        size_t at = 0;
        if (round % 2) { /* a header that exists, so rows get parsed */
            const char *h = "review,sentiment\n";
            at = strlen(h) < n ? strlen(h) : n;
            memcpy(buf, h, at);
        }
        const char *path = join(&t, round % 5 == 4 ? "g.csv.gz" : "g.csv");
        if (round % 5 == 4)
            write_gz(path, buf, n);
        else
            write_bytes(path, buf, n);
        ac_rawdata d;
        ac_err err = {{0}};
        ac_read_options o = {.need_label = round % 4 == 1};
        if (ac_rawdata_read(&d, path, &o, &err) == 0) {
            check_invariants(&d);
            n_ok++;
        } else {
            ck_assert_msg(strncmp(err.msg, path, strlen(path)) == 0 &&
                              err.msg[strlen(path)] == ':',
                          "%s", err.msg);
            ck_assert(is_zeroed(&d));
        }
        ac_rawdata_free(&d);
    }
    (void)n_ok;
    free(buf);
    tmpdir_remove(&t);
}
END_TEST

/* ------------------------------------------------------------ IMDB */

START_TEST(test_imdb)
{
    const char *files[] = {IMDB_DIR "train.csv.gz", IMDB_DIR "test.csv.gz"};
    for (int k = 0; k < 2; k++) {
        if (access(files[k], R_OK) != 0) {
            printf("SKIP test_imdb: %s not found\n", files[k]);
            continue;
        }
        ac_rawdata d;
        read_ok(&d, files[k], &LABELLED);
        ck_assert_int_eq(d.n_rows, 25000);
        ck_assert_int_eq(d.n_classes, 2);
        ck_assert_str_eq(d.classes[0], "negative");
        ck_assert_str_eq(d.classes[1], "positive");
        int64_t pos = 0;
        for (int64_t i = 0; i < d.n_rows; i++)
            pos += d.labels[i];
        ck_assert_int_eq(pos, 12500);
        ck_assert_int_eq(d.n_empty_skipped, 0);
        ac_rawdata_free(&d);
    }
}
END_TEST

/* ------------------------------------------------------------ truncation names */

START_TEST(test_truncation_names)
{
    const ac_truncation all[] = {AC_TRUNC_HEAD, AC_TRUNC_TAIL, AC_TRUNC_HEAD_TAIL};
    const char *names[] = {"head", "tail", "head+tail"};
    for (int i = 0; i < 3; i++) {
        ck_assert_str_eq(ac_truncation_name(all[i]), names[i]);
        ac_truncation t = (ac_truncation)-1;
        ck_assert_int_eq(ac_truncation_parse(names[i], &t), 0);
        ck_assert_int_eq(t, all[i]);
    }
    ac_truncation t = AC_TRUNC_HEAD;
    ck_assert_int_eq(ac_truncation_parse("head_tail", &t), 0);
    ck_assert_int_eq(t, AC_TRUNC_HEAD_TAIL);
    ck_assert_int_ne(ac_truncation_parse("middle", &t), 0);
    ck_assert_int_ne(ac_truncation_parse("", &t), 0);
    ck_assert_int_ne(ac_truncation_parse("head+", &t), 0);
    ck_assert_int_eq(t, AC_TRUNC_HEAD_TAIL); /* untouched on failure */
}
END_TEST

/* ------------------------------------------------------- plain text (pretrain) */

static const ac_read_options LINES = {.lines = 1};

/* One document a line: LF or CRLF, quotes and commas are plain text, blank
 * lines skipped and counted, a last line without a break kept, line numbers
 * of the file; gzip by content as for CSV. */
START_TEST(test_lines_basic)
{
    tmpdir t;
    tmpdir_make(&t);
    const char text[] = "first doc\r\nsecond, with \"quotes\"\n\n  \t \nthird\ncaf\xC3 x\nlast";
    write_bytes(join(&t, "docs.txt"), text, sizeof text - 1);
    write_gz(join(&t, "docs.txt.gz"), text, sizeof text - 1);
    const char *names[] = {"docs.txt", "docs.txt.gz"};
    for (int k = 0; k < 2; k++) {
        ac_rawdata d;
        ac_err err = {{0}};
        ck_assert_msg(ac_rawdata_read(&d, join(&t, names[k]), &LINES, &err) == 0, "%s", err.msg);
        static const char *const want[] = {"first doc", "second, with \"quotes\"", "third",
                                           "caf\xEF\xBF\xBD x", "last"};
        static const int64_t want_line[] = {1, 2, 5, 6, 7};
        ck_assert_int_eq(d.n_rows, 5);
        for (int i = 0; i < 5; i++) {
            ck_assert_str_eq(ac_rawdata_text(&d, i), want[i]);
            ck_assert_uint_eq(ac_rawdata_text_len(&d, i), strlen(want[i]));
            ck_assert_int_eq(d.line[i], want_line[i]);
        }
        ck_assert_ptr_null(d.labels);
        ck_assert_int_eq(d.n_classes, 0);
        ck_assert_int_eq(d.n_empty_skipped, 2);
        ck_assert_int_eq(d.n_invalid_utf8, 1);
        ac_rawdata_free(&d);
    }
    /* the same bytes as a CSV are something else: a header and one column */
    ac_rawdata d;
    ac_err err = {{0}};
    ck_assert_int_eq(ac_rawdata_read(&d, join(&t, "docs.txt"), &UNLABELLED, &err), -1);
    tmpdir_remove(&t);
}
END_TEST

/* A line longer than the reads it arrives in, and many lines. */
START_TEST(test_lines_long_and_many)
{
    tmpdir t;
    tmpdir_make(&t);
    size_t long_len = 300000, n_short = 5000;
    size_t cap = long_len + 16 * n_short + 16;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    size_t n = 0;
    for (size_t i = 0; i < long_len; i++)
        buf[n++] = (char)('a' + i % 26);
    buf[n++] = '\n';
    for (size_t i = 0; i < n_short; i++)
        n += (size_t)snprintf(buf + n, cap - n, "doc %zu\r\n", i);
    write_gz(join(&t, "many.gz"), buf, n);
    ac_rawdata d;
    ac_err err = {{0}};
    ck_assert_msg(ac_rawdata_read(&d, join(&t, "many.gz"), &LINES, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(d.n_rows, 1 + (int64_t)n_short);
    ck_assert_uint_eq(ac_rawdata_text_len(&d, 0), long_len);
    ck_assert(memcmp(ac_rawdata_text(&d, 0), buf, long_len) == 0);
    ck_assert_str_eq(ac_rawdata_text(&d, 1 + 4321), "doc 4321");
    ck_assert_int_eq(d.line[1 + 4321], 2 + 4321);
    ac_rawdata_free(&d);
    free(buf);
    tmpdir_remove(&t);
}
END_TEST

/* Corrupt plain text: a NUL byte (binary data) names its line; empty and
 * blank-only files; a gzip file cut short; options a text file cannot have. */
START_TEST(test_lines_errors)
{
    tmpdir t;
    tmpdir_make(&t);
    write_bytes(join(&t, "nul.txt"), "one\ntwo\nthr\0ee\nfour\n", 20);
    read_fails(join(&t, "nul.txt"), &LINES, 3, WORDS("NUL byte", "not a text file"));
    write_bytes(join(&t, "empty.txt"), "", 0);
    read_fails(join(&t, "empty.txt"), &LINES, 1, WORDS("empty file"));
    write_bytes(join(&t, "blank.txt"), "\n  \r\n\n", 6);
    read_fails(join(&t, "blank.txt"), &LINES, 1, WORDS("no text", "3 blank line(s) skipped"));
    size_t len;
    char *csv = many_rows(&len, 20000);
    write_gz(join(&t, "full.gz"), csv, len);
    size_t glen;
    char *gz = test_slurp(join(&t, "full.gz"), &glen);
    write_bytes(join(&t, "cut.gz"), gz, glen / 2);
    ac_rawdata d;
    memset(&d, 0xAB, sizeof d);
    ac_err err = {{0}};
    ck_assert_int_eq(ac_rawdata_read(&d, join(&t, "cut.gz"), &LINES, &err), -1);
    ck_assert_msg(strstr(err.msg, "gzip data cut short"), "%s", err.msg);
    ck_assert(is_zeroed(&d));
    const ac_read_options with_column = {.lines = 1, .text_column = "text"};
    ck_assert_int_eq(ac_rawdata_read(&d, join(&t, "full.gz"), &with_column, &err), -1);
    ck_assert(is_zeroed(&d));
    free(gz);
    free(csv);
    tmpdir_remove(&t);
}
END_TEST

START_TEST(test_text_format_names)
{
    ac_text_format f = AC_TEXT_FORMAT_CSV;
    ck_assert_int_eq(ac_text_format_parse("lines", &f), 0);
    ck_assert_int_eq(f, AC_TEXT_FORMAT_LINES);
    ck_assert_int_eq(ac_text_format_parse("auto", &f), 0);
    ck_assert_int_eq(f, AC_TEXT_FORMAT_AUTO);
    ck_assert_int_eq(ac_text_format_parse("tsv", &f), -1);
    ck_assert_int_eq(f, AC_TEXT_FORMAT_AUTO);
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(ac_text_format_parse(ac_text_format_name((ac_text_format)k), &f), 0);
        ck_assert_int_eq(f, k);
    }
    ck_assert_int_eq(ac_text_format_of("a/unsup.csv.gz", AC_TEXT_FORMAT_AUTO), AC_TEXT_FORMAT_CSV);
    ck_assert_int_eq(ac_text_format_of("B.CSV", AC_TEXT_FORMAT_AUTO), AC_TEXT_FORMAT_CSV);
    ck_assert_int_eq(ac_text_format_of("c.tsv", AC_TEXT_FORMAT_AUTO), AC_TEXT_FORMAT_CSV);
    ck_assert_int_eq(ac_text_format_of("d.TSV.gz", AC_TEXT_FORMAT_AUTO), AC_TEXT_FORMAT_CSV);
    ck_assert_int_eq(ac_text_format_of("notes.txt", AC_TEXT_FORMAT_AUTO), AC_TEXT_FORMAT_LINES);
    ck_assert_int_eq(ac_text_format_of("csv.d/x.gz", AC_TEXT_FORMAT_AUTO), AC_TEXT_FORMAT_LINES);
    ck_assert_int_eq(ac_text_format_of("notes.txt", AC_TEXT_FORMAT_CSV), AC_TEXT_FORMAT_CSV);
    ck_assert_int_eq(ac_text_format_of("x.csv", AC_TEXT_FORMAT_LINES), AC_TEXT_FORMAT_LINES);
}
END_TEST

/* Several files in order, each in its own format; labels dropped; the first
 * failing file is named. */
START_TEST(test_read_texts_concatenates)
{
    tmpdir t;
    tmpdir_make(&t);
    const char csv[] = "id,Text,label\n1,\"csv one, quoted\",pos\n2,csv two,neg\n";
    write_gz(join(&t, "a.csv.gz"), csv, sizeof csv - 1);
    write_bytes(join(&t, "b.txt"), "line one\n\nline two\n", 19);
    const char other[] = "body,review\nx,from review\n";
    write_bytes(join(&t, "c.csv"), other, sizeof other - 1);
    char pa[512], pb[512], pc[512];
    snprintf(pa, sizeof pa, "%s", join(&t, "a.csv.gz"));
    snprintf(pb, sizeof pb, "%s", join(&t, "b.txt"));
    snprintf(pc, sizeof pc, "%s", join(&t, "c.csv"));
    const char *paths[] = {pa, pb, pc};
    ac_rawdata d;
    ac_err err = {{0}};
    ck_assert_msg(ac_rawdata_read_texts(&d, paths, 3, AC_TEXT_FORMAT_AUTO, NULL, &err) == 0, "%s",
                  err.msg);
    static const char *const want[] = {"csv one, quoted", "csv two", "line one", "line two",
                                       "from review"};
    static const int64_t want_line[] = {2, 3, 1, 3, 2};
    ck_assert_int_eq(d.n_rows, 5);
    for (int i = 0; i < 5; i++) {
        ck_assert_str_eq(ac_rawdata_text(&d, i), want[i]);
        ck_assert_int_eq(d.line[i], want_line[i]);
    }
    ck_assert_ptr_null(d.labels);
    ck_assert_int_eq(d.n_classes, 0);
    ck_assert_int_eq(d.n_empty_skipped, 1);
    ac_rawdata_free(&d);

    /* a named column for the CSV files; the plain-text file is unaffected */
    ck_assert_msg(ac_rawdata_read_texts(&d, paths, 2, AC_TEXT_FORMAT_AUTO, "ID", &err) == 0,
                  "%s", err.msg);
    ck_assert_str_eq(ac_rawdata_text(&d, 1), "2");
    ck_assert_str_eq(ac_rawdata_text(&d, 2), "line one");
    ac_rawdata_free(&d);
    /* every file as lines: the CSV header is a document too */
    ck_assert_int_eq(ac_rawdata_read_texts(&d, paths + 2, 1, AC_TEXT_FORMAT_LINES, NULL, &err), 0);
    ck_assert_int_eq(d.n_rows, 2);
    ck_assert_str_eq(ac_rawdata_text(&d, 0), "body,review");
    ac_rawdata_free(&d);

    /* the second file is broken: its name and line, nothing returned */
    write_bytes(pb, "fine\nbad\0line\n", 14);
    memset(&d, 0xAB, sizeof d);
    ck_assert_int_eq(ac_rawdata_read_texts(&d, paths, 3, AC_TEXT_FORMAT_AUTO, NULL, &err), -1);
    char want_prefix[600];
    snprintf(want_prefix, sizeof want_prefix, "%s:2: NUL byte", pb);
    ck_assert_msg(strncmp(err.msg, want_prefix, strlen(want_prefix)) == 0, "%s", err.msg);
    ck_assert(is_zeroed(&d));
    ck_assert_int_eq(ac_rawdata_read_texts(&d, paths, 0, AC_TEXT_FORMAT_AUTO, NULL, &err), -1);
    tmpdir_remove(&t);
}
END_TEST

/* ------------------------------------------------------------------ runner */

/* ------------------------------------------------------------ separators */

/* Writes text to the temporary file name and reads it back into d. */
static void write_and_read(ac_rawdata *d, const tmpdir *t, const char *name, const char *text,
                           const ac_read_options *o)
{
    write_bytes(join(t, name), text, strlen(text));
    read_ok(d, join(t, name), o);
}

/* The header line picks the separator. A tab-separated file is IANA's TSV:
 * a line a row, quotes ordinary characters (stray and leading ones too, as
 * public data sets' TSV files have them) but around a whole field (R's
 * write.table quotes every field); CRLF, a blank line, no final
 * line break and a gzip body as in a CSV; rows across the 64 KiB reads. */
START_TEST(test_tab_separated)
{
    tmpdir t;
    tmpdir_make(&t);
    const char tsv[] = "id\ttext\tlabel\r\n"
                       "1\ta \"stray quote\tpos\r\n"
                       "  \r\n"
                       "2\t\"Great\" film, really; yes\tneg\r\n"
                       "3\t\tneg\r\n"
                       "4\tlast\tpos";
    write_bytes(join(&t, "a.tsv"), tsv, sizeof tsv - 1);
    write_gz(join(&t, "b.txt.gz"), tsv, sizeof tsv - 1); /* the header decides, not the name */
    const char *const names[] = {"a.tsv", "b.txt.gz"};
    for (int k = 0; k < 2; k++) {
        ac_rawdata d;
        read_ok(&d, join(&t, names[k]), &LABELLED);
        ck_assert_int_eq(d.n_rows, 3);
        ck_assert_int_eq(d.n_empty_skipped, 1);
        ck_assert_str_eq(ac_rawdata_text(&d, 0), "a \"stray quote");
        ck_assert_str_eq(ac_rawdata_text(&d, 1), "\"Great\" film, really; yes");
        ck_assert_str_eq(ac_rawdata_text(&d, 2), "last");
        const int64_t lines[] = {2, 4, 6};
        const int32_t labels[] = {1, 0, 1};
        for (int i = 0; i < 3; i++) {
            ck_assert_int_eq(d.line[i], lines[i]);
            ck_assert_int_eq(d.labels[i], labels[i]);
        }
        ac_rawdata_free(&d);
    }

    /* One column: tab-separated by the name, so quotes stay as they are. */
    const char one[] = "text\nI \"love\" it\n";
    ac_rawdata d;
    write_and_read(&d, &t, "one.tsv", one, &UNLABELLED);
    ck_assert_int_eq(d.n_rows, 1);
    ck_assert_str_eq(ac_rawdata_text(&d, 0), "I \"love\" it");
    ac_rawdata_free(&d);
    bytes_fail(&t, "one.csv", one, sizeof one - 1, &UNLABELLED, 2,
               WORDS("quote inside an unquoted field"));

    /* Rows of 100 bytes across many reads of 64 KiB. */
    size_t cap = 3000 * 110 + 32, n = 0;
    char *big = malloc(cap);
    ck_assert_ptr_nonnull(big);
    n += (size_t)sprintf(big, "text\tlabel\n");
    for (int i = 0; i < 3000; i++)
        n += (size_t)sprintf(big + n, "row %05d %s\t%s\n", i, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                                                       "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
                             i % 3 ? "b" : "a");
    write_gz(join(&t, "big.tsv.gz"), big, n);
    read_ok(&d, join(&t, "big.tsv.gz"), &LABELLED);
    ck_assert_int_eq(d.n_rows, 3000);
    for (int i = 0; i < 3000; i += 499) {
        char want[32];
        snprintf(want, sizeof want, "row %05d ", i);
        ck_assert(strncmp(ac_rawdata_text(&d, i), want, strlen(want)) == 0);
        ck_assert_int_eq(d.line[i], i + 2);
        ck_assert_int_eq(d.labels[i], i % 3 ? 1 : 0);
    }
    ac_rawdata_free(&d);
    free(big);

    /* R's write.table quotes every field: whole-field quotes go, "" is ". */
    write_and_read(&d, &t, "r.tsv",
                   "\"text\"\t\"label\"\n\"He said \"\"hi\"\"\"\t\"pos\"\n\"\"\t\"neg\"\n"
                   "\"a \"b\" c\"\t\"neg\"\n",
                   &LABELLED);
    ck_assert_int_eq(d.n_rows, 2);
    ck_assert_int_eq(d.n_empty_skipped, 1);
    ck_assert_str_eq(ac_rawdata_text(&d, 0), "He said \"hi\"");
    ck_assert_str_eq(ac_rawdata_text(&d, 1), "a \"b\" c");
    ck_assert_str_eq(d.classes[0], "neg");
    ck_assert_str_eq(d.classes[1], "pos");
    ac_rawdata_free(&d);

    /* A tab in a text cannot be told from a separator: the line is named. */
    const char extra[] = "text\tlabel\nfine\tpos\nsplit\ttext\tneg\n";
    bytes_fail(&t, "extra.tsv", extra, sizeof extra - 1, &LABELLED, 3,
               WORDS("row has 3 field(s), the header has 2", "cannot hold tabs"));
    const char missing[] = "text\tlabel\nfine\tpos\n\nno label\n";
    bytes_fail(&t, "missing.tsv", missing, sizeof missing - 1, &LABELLED, 4,
               WORDS("row has 1 field(s), the header has 2"));
    tmpdir_remove(&t);
}
END_TEST

/* A semicolon-separated export keeps RFC 4180's quoting; a header with a
 * comma keeps the comma, whatever the texts hold. */
START_TEST(test_semicolon_and_comma)
{
    tmpdir t;
    tmpdir_make(&t);
    ac_rawdata d;
    write_and_read(&d, &t, "s.csv", "\n\"text\";label\n\"one; two, three\";pos\nplain, text;neg\n",
                   &LABELLED);
    ck_assert_int_eq(d.n_rows, 2);
    ck_assert_str_eq(ac_rawdata_text(&d, 0), "one; two, three");
    ck_assert_str_eq(ac_rawdata_text(&d, 1), "plain, text");
    ck_assert_int_eq(d.line[0], 3);
    ac_rawdata_free(&d);
    const char semi_bad[] = "text;label\na;b;pos\n";
    bytes_fail(&t, "sb.csv", semi_bad, sizeof semi_bad - 1, &LABELLED, 2,
               WORDS("semicolon must be quoted"));

    write_and_read(&d, &t, "c.tsv", "\"a;b\",text,label\n1,tabs\there; and there,pos\n2,x,neg\n",
                   &LABELLED);
    ck_assert_int_eq(d.n_rows, 2);
    ck_assert_str_eq(ac_rawdata_text(&d, 0), "tabs\there; and there");
    ac_rawdata_free(&d);
    tmpdir_remove(&t);
}
END_TEST

static Suite *csv_suite(void)
{
    Suite *s = suite_create("csv");
    TCase *tr = tcase_create("rfc4180");
    tcase_add_test(tr, test_quoting_and_line_numbers);
    tcase_add_test(tr, test_crlf_and_lone_cr);
    tcase_add_test(tr, test_crlf_across_reads);
    tcase_add_test(tr, test_blank_lines_between_rows);
    tcase_add_test(tr, test_bom_stripped);
    tcase_add_test(tr, test_no_final_newline);
    tcase_add_test(tr, test_gzip_round_trip_by_content);
    tcase_add_test(tr, test_gzip_cut_short);
    suite_add_tcase(s, tr);

    TCase *tc = tcase_create("columns_and_labels");
    tcase_add_test(tc, test_columns_by_name);
    tcase_add_test(tc, test_missing_columns);
    tcase_add_test(tc, test_labels_optional);
    tcase_add_test(tc, test_class_order);
    tcase_add_test(tc, test_explicit_classes);
    tcase_add_test(tc, test_label_errors);
    tcase_add_test(tc, test_tab_separated);
    tcase_add_test(tc, test_semicolon_and_comma);
    suite_add_tcase(s, tc);

    TCase *tt = tcase_create("texts_and_errors");
    tcase_set_timeout(tt, 60); /* the 50 MB field under ASan */
    tcase_add_test(tt, test_empty_texts_skipped);
    tcase_add_test(tt, test_invalid_utf8_and_nul);
    tcase_add_test(tt, test_giant_field);
    tcase_add_test(tt, test_row_errors);
    tcase_add_test(tt, test_empty_files);
    tcase_add_test(tt, test_open_errors);
    tcase_add_test(tt, test_garbage_never_crashes);
    suite_add_tcase(s, tt);

    TCase *tp = tcase_create("plain_text");
    tcase_add_test(tp, test_lines_basic);
    tcase_add_test(tp, test_lines_long_and_many);
    tcase_add_test(tp, test_lines_errors);
    tcase_add_test(tp, test_text_format_names);
    tcase_add_test(tp, test_read_texts_concatenates);
    suite_add_tcase(s, tp);

    TCase *ti = tcase_create("imdb");
    tcase_set_timeout(ti, 60);
    tcase_add_test(ti, test_imdb);
    tcase_add_test(ti, test_truncation_names);
    suite_add_tcase(s, ti);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(csv_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
}
