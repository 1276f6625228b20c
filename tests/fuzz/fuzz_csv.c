/* libFuzzer target: the CSV reader (ac_rawdata_read), plain and gzip, and
 * its plain-text mode (one document a line, for pretraining).
 *
 * Input: one control byte, then the file's bytes.
 *   bits 0-1  how the bytes reach the reader:
 *             0     as they are (a fuzzed gzip stream is recognised by content)
 *             1     gzip-compressed in memory first (a valid .csv.gz)
 *             2     gzip-compressed, then cut short by 1 + (bits 5-7) bytes
 *             3     as they are, read as plain text (opt.lines; bits 2-4 unused)
 *   bit 2     need_label
 *   bits 3-4  columns and classes: default names / known classes
 *             {negative, positive} / text_column "text" + label_column "label" /
 *             known classes {0, 1, 2}
 * The reader sees a memfd through /proc/self/fd, as it would a file.
 * On success the result is checked against the contract in attnctl/text.h;
 * on failure the message must be set and the output zeroed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "attnctl/text.h"
#include "fuzz_common.h"

/* A gzip member of data[0..len) in a malloc buffer (*out_len bytes). */
static unsigned char *gzip_bytes(const uint8_t *data, size_t len, size_t *out_len)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    FUZZ_SETUP(deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK,
               "deflateInit2");
    size_t cap = deflateBound(&z, (uLong)len) + 32;
    unsigned char *out = malloc(cap);
    FUZZ_SETUP(out != NULL, "out of memory");
    z.next_in = (Bytef *)(uintptr_t)data;
    z.avail_in = (uInt)len;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    FUZZ_SETUP(deflate(&z, Z_FINISH) == Z_STREAM_END, "deflate");
    *out_len = cap - z.avail_out;
    deflateEnd(&z);
    return out;
}

static void check_result(const ac_rawdata *d, const ac_read_options *opt)
{
    FUZZ_CHECK(d->n_rows > 0); /* "no data rows" is an error */
    FUZZ_CHECK(d->text_off[0] == 0);
    for (int64_t i = 0; i < d->n_rows; i++) {
        FUZZ_CHECK(d->text_off[i + 1] > d->text_off[i]);
        const char *text = ac_rawdata_text(d, i);
        size_t len = ac_rawdata_text_len(d, i);
        FUZZ_CHECK(text[len] == '\0');
        FUZZ_CHECK(strlen(text) == len); /* NUL bytes were replaced */
        FUZZ_CHECK(len > 0);
        FUZZ_CHECK(fuzz_utf8_valid(text, len));
        /* the header is line 1 at the earliest; plain text has none */
        FUZZ_CHECK(d->line[i] >= (opt->lines ? 1 : 2));
        if (i > 0)
            FUZZ_CHECK(d->line[i] > d->line[i - 1]);
    }
    FUZZ_CHECK(d->n_invalid_utf8 >= 0 && d->n_invalid_utf8 <= d->n_rows);
    FUZZ_CHECK(d->n_empty_skipped >= 0);
    if (d->labels) {
        FUZZ_CHECK(d->n_classes >= 1);
        if (opt->need_label && !opt->classes)
            FUZZ_CHECK(d->n_classes >= 2);
        if (opt->classes) {
            FUZZ_CHECK(d->n_classes == opt->n_classes);
            for (int c = 0; c < d->n_classes; c++)
                FUZZ_CHECK(strcmp(d->classes[c], opt->classes[c]) == 0);
        }
        for (int64_t i = 0; i < d->n_rows; i++)
            FUZZ_CHECK(d->labels[i] >= 0 && d->labels[i] < d->n_classes);
        for (int c = 0; c < d->n_classes; c++) {
            size_t n = strlen(d->classes[c]);
            FUZZ_CHECK(n > 0 && fuzz_utf8_valid(d->classes[c], n));
            for (int k = 0; k < c; k++)
                FUZZ_CHECK(strcmp(d->classes[k], d->classes[c]) != 0);
        }
    } else {
        FUZZ_CHECK(!opt->need_label);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fuzz_file file;
    if (!file.path[0])
        fuzz_file_open(&file, "fuzz_csv");
    if (size < 1)
        return 0;
    const unsigned ctl = data[0];
    data++;
    size--;

    static char *const sentiment_classes[] = {"negative", "positive"};
    static char *const numeric_classes[] = {"0", "1", "2"};
    ac_read_options opt = {.need_label = (ctl >> 2) & 1};
    if ((ctl & 3) == 3)
        opt = (ac_read_options){.lines = 1};
    switch ((ctl & 3) == 3 ? 0 : (ctl >> 3) & 3) {
    case 1:
        opt.classes = sentiment_classes;
        opt.n_classes = 2;
        break;
    case 2:
        opt.text_column = "text";
        opt.label_column = "label";
        break;
    case 3:
        opt.classes = numeric_classes;
        opt.n_classes = 3;
        break;
    default:
        break;
    }

    switch (ctl & 3) {
    case 1:
    case 2: {
        size_t gz_len;
        unsigned char *gz = gzip_bytes(data, size, &gz_len);
        if ((ctl & 3) == 2) {
            size_t cut = 1 + (ctl >> 5);
            gz_len = gz_len > cut ? gz_len - cut : 0;
        }
        fuzz_file_set(&file, gz, gz_len);
        free(gz);
        break;
    }
    default:
        fuzz_file_set(&file, data, size);
        break;
    }

    ac_rawdata d;
    ac_err err = {{0}};
    if (ac_rawdata_read(&d, file.path, &opt, &err) == 0) {
        check_result(&d, &opt);
        ac_rawdata_free(&d);
    } else {
        FUZZ_CHECK(err.msg[0] != '\0');
        FUZZ_CHECK(strncmp(err.msg, file.path, strlen(file.path)) == 0); /* names the file */
        FUZZ_CHECK(d.n_rows == 0 && d.text_buf == NULL && d.text_off == NULL &&
                   d.labels == NULL && d.classes == NULL);
    }
    return 0;
}
