/* Model files: safetensors reader/writer (every rejection on a corrupted copy
 * of a saved file), atomic writes under a file-size limit, SHA-256,
 * config.json, trainer state and the model directory. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <dirent.h>

#include <cjson/cJSON.h>

#include "attnctl/io.h"

#include "test_util.h"

/* ------------------------------------------------------------------ helpers */

typedef struct {
    char path[256];
} tmpdir;

static void tmpdir_make(tmpdir *d)
{
    snprintf(d->path, sizeof d->path, "/tmp/attnctl-test-io-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d->path));
}

static void tmpdir_remove(tmpdir *d)
{
    rm_rf(d->path);
}

static void join(char *out, size_t n, const char *dir, const char *name)
{
    snprintf(out, n, "%s/%s", dir, name);
}

static unsigned char *slurp(const char *path, size_t *len)
{
    char *data;
    ac_err err;
    ck_assert_msg(ac_read_file(path, (size_t)1 << 30, &data, len, &err) == 0, "%s", err.msg);
    return (unsigned char *)data;
}

static void spit(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

/* Number of leftover temporary files (".tmp.") in a directory. */
static int count_temp_files(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp."))
            n++;
    closedir(d);
    return n;
}

static int have_python3(void)
{
    return system("command -v python3 >/dev/null 2>&1") == 0;
}

/* ------------------------------------------------------ safetensors fixture */

static float embed_values[20], ln_values[4] = {1, 1, 1, 1}, bias_values[2] = {0.5f, -0.5f},
                               scalar_value[1] = {3.0f};

static void fixture_entries(ac_st_entry e[5])
{
    for (int i = 0; i < 20; i++)
        embed_values[i] = (float)i * 0.25f - 1.0f;
    memset(e, 0, 5 * sizeof *e);
    e[0] = (ac_st_entry){.name = "embed.weight", .ndim = 2, .shape = {5, 4}, .data = embed_values};
    e[1] = (ac_st_entry){.name = "layers.0.ln1.weight", .ndim = 1, .shape = {4}, .data = ln_values};
    e[2] = (ac_st_entry){.name = "head.bias", .ndim = 1, .shape = {2}, .data = bias_values};
    e[3] = (ac_st_entry){.name = "scalar", .ndim = 0, .data = scalar_value};
    e[4] = (ac_st_entry){.name = "empty", .ndim = 2, .shape = {0, 4}, .data = NULL};
}

static const char *const FIXTURE_META[] = {"format", "pt"};

static void save_fixture(const char *path)
{
    ac_st_entry e[5];
    fixture_entries(e);
    ac_err err;
    ck_assert_msg(ac_st_save(path, e, 5, FIXTURE_META, 1, &err) == 0, "%s", err.msg);
}

/* Header text and data section of a safetensors file. */
typedef struct {
    unsigned char *file;
    size_t len;
    char *header; /* NUL-terminated, padding stripped */
    const unsigned char *data;
    size_t data_len;
} st_parts;

static void split_file(st_parts *p, const char *path)
{
    p->file = slurp(path, &p->len);
    ck_assert_uint_ge(p->len, 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | p->file[i];
    ck_assert_uint_le(8 + n, p->len);
    p->header = strndup((const char *)p->file + 8, n);
    size_t hl = strlen(p->header);
    while (hl > 0 && p->header[hl - 1] == ' ')
        p->header[--hl] = '\0';
    p->data = p->file + 8 + n;
    p->data_len = p->len - 8 - n;
}

static void free_parts(st_parts *p)
{
    free(p->file);
    free(p->header);
}

/* Writes header (padded to 8) + data into path. */
static void assemble(const char *path, const char *header, const unsigned char *data, size_t data_len)
{
    size_t hl = strlen(header), padded = (hl + 7) / 8 * 8;
    size_t total = 8 + padded + data_len;
    unsigned char *buf = malloc(total);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, header, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    memcpy(buf + 8 + padded, data, data_len);
    spit(path, buf, total);
    free(buf);
}

/* Replaces the first occurrence of old in s (which must occur). Caller frees. */
static char *replace_first(const char *s, const char *old, const char *new_text)
{
    const char *at = strstr(s, old);
    ck_assert_msg(at != NULL, "\"%s\" not in \"%s\"", old, s);
    size_t n = strlen(s) - strlen(old) + strlen(new_text) + 1;
    char *out = malloc(n);
    size_t pre = (size_t)(at - s);
    memcpy(out, s, pre);
    strcpy(out + pre, new_text);
    strcat(out, at + strlen(old));
    return out;
}

/* Loads path expecting failure with a message that names the file and holds want. */
static void expect_load_error(const char *path, const char *want)
{
    ac_safetensors st;
    ac_err err = {{0}};
    ck_assert_msg(ac_st_load(&st, path, &err) == -1, "loaded a corrupt file (%s)", want);
    ck_assert_msg(strstr(err.msg, path) != NULL, "message does not name the file: %s", err.msg);
    ck_assert_msg(strstr(err.msg, want) != NULL, "expected \"%s\" in: %s", want, err.msg);
    ck_assert_ptr_null(st.tensors);
    ck_assert_ptr_null(st.data);
    /* The in-memory parser gives the same verdict. */
    size_t len;
    unsigned char *buf = slurp(path, &len);
    ac_err err2 = {{0}};
    ck_assert_int_eq(ac_st_parse(&st, buf, len, "memory.safetensors", &err2), -1);
    ck_assert_msg(strstr(err2.msg, want) != NULL, "parse: expected \"%s\" in: %s", want, err2.msg);
    free(buf);
}

/* ------------------------------------------------------ config settings */

/* A key as the command line sets it (ac_config_setting): its field, type
 * and the range config.json itself accepts; "auto" where the key takes it;
 * an enum's names; no setting for unknown keys, or keys neither numeric nor
 * an enum. */
START_TEST(test_config_setting)
{
    ac_setting st;
    ck_assert_int_eq(ac_config_setting("training.epochs", &st), 0);
    ck_assert_uint_eq(st.offset, offsetof(ac_config, training.epochs));
    ck_assert_int_eq(st.type, AC_SETTING_INT);
    ck_assert(st.lo == 1 && st.hi == 1000000 && !st.lo_open && !st.hi_open && st.auto_ok);
    ck_assert_int_eq(ac_config_setting("training.lr", &st), 0);
    ck_assert_uint_eq(st.offset, offsetof(ac_config, training.optim.lr));
    ck_assert_int_eq(st.type, AC_SETTING_FLOAT);
    ck_assert(st.lo == 0 && st.hi == 10 && st.lo_open && !st.hi_open && !st.auto_ok);
    ck_assert_ptr_null(st.names);
    ck_assert_int_eq(ac_config_setting("training.vocab_max", &st), 0);
    ck_assert_int_eq(st.type, AC_SETTING_I32);
    ck_assert_int_eq(ac_config_setting("model.ngram_order", &st), 0);
    ck_assert(st.lo == 0 && st.hi == 3);
    /* the range is the parser's: its ends load, a step beyond does not */
    ac_config c;
    ac_config_defaults(&c);
    ac_err err;
    const char *ok = "{\"model\": {\"ngram_order\": 0}, \"training\": {\"lr\": 10}}";
    ck_assert_msg(ac_config_parse(&c, ok, strlen(ok), "x.json", 0, &err) == 0, "%s", err.msg);
    const char *bad = "{\"training\": {\"lr\": 0}}";
    ck_assert_int_eq(ac_config_parse(&c, bad, strlen(bad), "x.json", 0, &err), -1);
    ac_config_free(&c);
    ck_assert_int_eq(ac_config_setting("model.pooling", &st), 0);
    ck_assert_int_eq(st.type, AC_SETTING_NAME);
    ck_assert_uint_eq(st.offset, offsetof(ac_config, model.pooling));
    ck_assert_ptr_eq(st.names, &ac_pooling_names);
    ck_assert_int_eq(ac_config_setting("tokenizer.truncation", &st), 0);
    ck_assert_ptr_eq(st.names, &ac_truncation_names);
    ck_assert_int_eq(ac_config_setting("model.ngram_hash", &st), -1);
    ck_assert_int_eq(ac_config_setting("provenance.train_file", &st), -1);
    ck_assert_int_eq(ac_config_setting("training.nothing", &st), -1);
    ck_assert_int_eq(ac_config_setting("epochs", &st), -1);
    ck_assert_int_eq(ac_config_setting("train.epochs", &st), -1);
}
END_TEST

/* ------------------------------------------------------ safetensors: basics */

START_TEST(test_st_round_trip)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[300];
    join(path, sizeof path, d.path, "t.safetensors");
    save_fixture(path);

    ac_safetensors st;
    ac_err err;
    ck_assert_msg(ac_st_load(&st, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st.n, 5);
    /* header order is kept */
    ck_assert_str_eq(st.tensors[0].name, "embed.weight");
    ck_assert_str_eq(st.tensors[4].name, "empty");
    const ac_st_tensor *t = ac_st_find(&st, "embed.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->ndim, 2);
    ck_assert_int_eq(t->shape[0], 5);
    ck_assert_int_eq(t->shape[1], 4);
    ck_assert_uint_eq(t->begin, 0);
    ck_assert_uint_eq(t->end, 80);
    const float *v = ac_st_f32(&st, t);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(memcmp(v, embed_values, sizeof embed_values), 0);
    ck_assert_float_eq(ac_st_f32(&st, ac_st_find(&st, "head.bias"))[1], -0.5f);
    t = ac_st_find(&st, "scalar");
    ck_assert_int_eq(t->ndim, 0);
    ck_assert_float_eq(ac_st_f32(&st, t)[0], 3.0f);
    t = ac_st_find(&st, "empty");
    ck_assert_uint_eq(t->end - t->begin, 0);
    ck_assert_ptr_null(ac_st_find(&st, "missing"));
    ck_assert_int_eq(st.n_meta, 1);
    ck_assert_str_eq(st.meta_keys[0], "format");
    ck_assert_str_eq(st.meta_values[0], "pt");
    ck_assert_uint_eq(st.data_len, 108);
    ac_st_free(&st);

    /* Layout: header length a multiple of 8, padded with spaces, metadata first. */
    st_parts p;
    split_file(&p, path);
    ck_assert_uint_eq((p.len - 8 - p.data_len) % 8, 0);
    ck_assert_msg(strncmp(p.header, "{\"__metadata__\":{\"format\":\"pt\"},\"embed.weight\":", 47) == 0,
                  "%s", p.header);
    ck_assert_ptr_nonnull(strstr(p.header, "\"data_offsets\":[96,104]"));
    free_parts(&p);
    ck_assert_int_eq(count_temp_files(d.path), 0);
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_st_any_header_order)
{
    /* The reference writer sorts tensors its own way: any order must load. */
    tmpdir d;
    tmpdir_make(&d);
    char path[300], moved[300];
    join(path, sizeof path, d.path, "t.safetensors");
    join(moved, sizeof moved, d.path, "moved.safetensors");
    save_fixture(path);
    st_parts p;
    split_file(&p, path);
    const char *scalar = "\"scalar\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[104,108]},";
    char *without = replace_first(p.header, scalar, "");
    char *front = replace_first(without, "{\"__metadata__\"", "{\"scalar\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[104,108]},\"__metadata__\"");
    assemble(moved, front, p.data, p.data_len);
    ac_safetensors st;
    ac_err err;
    ck_assert_msg(ac_st_load(&st, moved, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(st.tensors[0].name, "scalar");
    ck_assert_float_eq(ac_st_f32(&st, ac_st_find(&st, "scalar"))[0], 3.0f);
    ck_assert_float_eq(ac_st_f32(&st, ac_st_find(&st, "embed.weight"))[19], 3.75f);
    ac_st_free(&st);
    free(without);
    free(front);
    free_parts(&p);
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_st_other_dtypes)
{
    /* Standard non-F32 dtypes parse (sizes checked) but are not readable as F32. */
    tmpdir d;
    tmpdir_make(&d);
    char path[300];
    join(path, sizeof path, d.path, "h.safetensors");
    const unsigned char data[12] = {0};
    assemble(path,
             "{\"half\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
             "\"bytes\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[4,7]},"
             "\"nibbles\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[7,8]},"
             "\"f\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
             data, 12);
    ac_safetensors st;
    ac_err err;
    ck_assert_msg(ac_st_load(&st, path, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(ac_st_find(&st, "half")->dtype, "F16");
    ck_assert_ptr_null(ac_st_f32(&st, ac_st_find(&st, "half")));
    ck_assert_ptr_nonnull(ac_st_f32(&st, ac_st_find(&st, "f")));
    ac_st_free(&st);
    /* An F32 tensor at an offset that is not a multiple of 4 is refused by ac_st_f32. */
    assemble(path,
             "{\"bytes\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
             "\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[3,11]}}",
             data, 11);
    ck_assert_msg(ac_st_load(&st, path, &err) == 0, "%s", err.msg);
    ck_assert_ptr_null(ac_st_f32(&st, ac_st_find(&st, "f")));
    ac_st_free(&st);
    /* A sub-byte dtype must fill whole bytes. */
    assemble(path, "{\"n\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}}", data, 1);
    expect_load_error(path, "whole bytes");
    tmpdir_remove(&d);
}
END_TEST

/* ----------------------------------------- safetensors: corrupted headers */

typedef struct {
    const char *old_text; /* replaced in the fixture header (NULL: whole header) */
    const char *new_text;
    const char *want;     /* expected in the error message */
} header_case;

static const header_case HEADER_CASES[] = {
    {"\"head.bias\"", "\"head.\xff\xfe" "bias\"", "not valid UTF-8"},
    {"\"scalar\":{", "\"scalar\":{{", "not valid JSON"},
    {NULL, "[1,2,3]", "does not start with '{'"},
    {"}}", "}}x", "extra text after the JSON object"},
    {"{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[96,104]}", "[96,104]",
     "tensor \"head.bias\": entry must be an object"},
    {"\"shape\":[2],", "", "tensor \"head.bias\": missing \"shape\""},
    {"\"dtype\":\"F32\",\"shape\":[2]", "\"shape\":[2]", "tensor \"head.bias\": missing \"dtype\""},
    {",\"data_offsets\":[96,104]", "", "tensor \"head.bias\": missing \"data_offsets\""},
    {"\"shape\":[2],", "\"shape\":[2],\"extra\":1,", "tensor \"head.bias\": unknown key \"extra\""},
    {"\"shape\":[2],", "\"shape\":[2],\"shape\":[2],", "tensor \"head.bias\": duplicate key \"shape\""},
    {"\"F32\"", "\"F33\"", "tensor \"embed.weight\": unknown dtype \"F33\""},
    {"\"F32\"", "32", "tensor \"embed.weight\": dtype must be a string"},
    {"\"shape\":[2]", "\"shape\":[-2]", "tensor \"head.bias\": shape[0] must be a non-negative integer"},
    {"\"shape\":[2]", "\"shape\":[2.5]", "tensor \"head.bias\": shape[0] must be a non-negative integer"},
    {"\"shape\":[2]", "\"shape\":[\"2\"]", "tensor \"head.bias\": shape[0] must be a non-negative integer"},
    {"\"shape\":[2]", "\"shape\":2", "tensor \"head.bias\": shape must be an array"},
    {"\"shape\":[2]", "\"shape\":[1,1,1,1,1,1,1,1,2]", "tensor \"head.bias\": shape has 9 dimensions"},
    {"\"shape\":[2]", "\"shape\":[3]", "tensor \"head.bias\": shape x F32 = 12 bytes but data_offsets span 8"},
    {"\"shape\":[5,4]", "\"shape\":[4294967296,4294967296,4294967296]",
     "tensor \"embed.weight\": shape size overflows"},
    {"\"shape\":[5,4]", "\"shape\":[1e300]", "tensor \"embed.weight\": shape[0] must be a non-negative integer"},
    {"[0,80]", "[4,84]", "tensor \"embed.weight\": data_offsets begin 4, expected 0"},
    {"[96,104]", "[92,100]", "tensor \"head.bias\": data_offsets begin 92, expected 96 (overlaps"},
    {"[96,104]", "[104,96]", "tensor \"head.bias\": data_offsets end 96 < begin 104"},
    {"[96,104]", "[96]", "tensor \"head.bias\": data_offsets must be [begin, end]"},
    {"[96,104]", "[96,104,112]", "tensor \"head.bias\": data_offsets must be [begin, end]"},
    {"[96,104]", "[96,-104]", "tensor \"head.bias\": data_offsets must be [begin, end]"},
    {"\"data_offsets\":[104,108]", "\"data_offsets\":[200,204]", "tensor \"scalar\": data_offsets [200, 204] out of bounds"},
    {"\"scalar\":", "\"head.bias\":", "duplicate tensor \"head.bias\""},
    {"{\"format\":\"pt\"}", "{\"format\":1}", "__metadata__.format: must be a string"},
    {"{\"format\":\"pt\"}", "[\"pt\"]", "__metadata__: must be an object"},
    {"\"__metadata__\":{\"format\":\"pt\"},", "\"__metadata__\":{},\"__metadata__\":{},", "duplicate \"__metadata__\""},
};

START_TEST(test_st_corrupt_header)
{
    const header_case *c = &HEADER_CASES[_i];
    tmpdir d;
    tmpdir_make(&d);
    char path[300], bad[300];
    join(path, sizeof path, d.path, "model.safetensors");
    join(bad, sizeof bad, d.path, "bad.safetensors");
    save_fixture(path);
    st_parts p;
    split_file(&p, path);
    char *header = c->old_text ? replace_first(p.header, c->old_text, c->new_text) : strdup(c->new_text);
    assemble(bad, header, p.data, p.data_len);
    expect_load_error(bad, c->want);
    free(header);
    free_parts(&p);
    tmpdir_remove(&d);
}
END_TEST

/* Damage to the length prefix or the data section. */
START_TEST(test_st_corrupt_framing)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[300], bad[300];
    join(path, sizeof path, d.path, "model.safetensors");
    join(bad, sizeof bad, d.path, "bad.safetensors");
    save_fixture(path);
    size_t len;
    unsigned char *file = slurp(path, &len);
    unsigned char *copy = malloc(len + 16);

    /* shorter than 8 bytes */
    spit(bad, file, 7);
    expect_load_error(bad, "7 bytes: too short");
    spit(bad, file, 0);
    expect_load_error(bad, "0 bytes: too short");

    /* header length over the limit */
    memcpy(copy, file, len);
    uint64_t huge = AC_ST_MAX_HEADER + 1;
    for (int i = 0; i < 8; i++)
        copy[i] = (unsigned char)(huge >> (8 * i));
    spit(bad, copy, len);
    expect_load_error(bad, "header length 100000001 exceeds");

    /* header length past the end of the file */
    uint64_t past = len - 7;
    for (int i = 0; i < 8; i++)
        copy[i] = (unsigned char)(past >> (8 * i));
    spit(bad, copy, len);
    expect_load_error(bad, "runs past the end of the file");
    memset(copy, 0xff, 8); /* 2^64 - 1: no wrap-around in the bounds check */
    spit(bad, copy, len);
    expect_load_error(bad, "exceeds");

    /* header length shorter than the header: JSON cut off */
    memcpy(copy, file, len);
    uint64_t short_len = 0;
    for (int i = 7; i >= 0; i--)
        short_len = (short_len << 8) | copy[i];
    short_len -= 8;
    for (int i = 0; i < 8; i++)
        copy[i] = (unsigned char)(short_len >> (8 * i));
    spit(bad, copy, len);
    expect_load_error(bad, "not valid JSON");

    /* trailing bytes after the last tensor */
    memcpy(copy, file, len);
    memset(copy + len, 0, 4);
    spit(bad, copy, len + 4);
    expect_load_error(bad, "4 trailing bytes after the last tensor");

    /* data section cut short */
    spit(bad, file, len - 4);
    expect_load_error(bad, "tensor \"scalar\": data_offsets [104, 108] out of bounds");

    free(copy);
    free(file);
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_st_missing_file)
{
    ac_safetensors st;
    ac_err err;
    ck_assert_int_eq(ac_st_load(&st, "/nonexistent/x.safetensors", &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/x.safetensors: cannot open: No such file"));
    ck_assert_int_eq(ac_st_load(&st, "/tmp", &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a regular file"));
}
END_TEST

/* --------------------------------------------------- safetensors: writing */

START_TEST(test_st_save_rejects_bad_entries)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[300];
    join(path, sizeof path, d.path, "model.safetensors");
    save_fixture(path);
    size_t len0;
    unsigned char *before = slurp(path, &len0);
    ac_st_entry e[5];
    fixture_entries(e);
    ac_err err;

    e[2].name = "embed.weight";
    ck_assert_int_eq(ac_st_save(path, e, 5, NULL, 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "duplicate tensor name \"embed.weight\""));
    fixture_entries(e);
    e[1].name = "__metadata__";
    ck_assert_int_eq(ac_st_save(path, e, 5, NULL, 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "reserved"));
    fixture_entries(e);
    e[0].ndim = 9;
    ck_assert_int_eq(ac_st_save(path, e, 5, NULL, 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "9 dimensions"));
    fixture_entries(e);
    e[0].shape[1] = -4;
    ck_assert_int_eq(ac_st_save(path, e, 5, NULL, 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "bad shape[1]"));
    fixture_entries(e);
    e[2].data = NULL;
    ck_assert_int_eq(ac_st_save(path, e, 5, NULL, 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "no data"));
    fixture_entries(e);
    const char *dup_meta[] = {"a", "1", "a", "2"};
    ck_assert_int_eq(ac_st_save(path, e, 5, dup_meta, 2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "duplicate metadata key \"a\""));

    /* The existing file is untouched, no temporary files remain. */
    size_t len1;
    unsigned char *after = slurp(path, &len1);
    ck_assert_uint_eq(len0, len1);
    ck_assert_int_eq(memcmp(before, after, len0), 0);
    ck_assert_int_eq(count_temp_files(d.path), 0);
    free(before);
    free(after);

    /* No tensors at all is a valid (empty) file. */
    ck_assert_msg(ac_st_save(path, NULL, 0, NULL, 0, &err) == 0, "%s", err.msg);
    ac_safetensors st;
    ck_assert_msg(ac_st_load(&st, path, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st.n, 0);
    ac_st_free(&st);
    /* Into a directory that does not exist: errno text. */
    char nodir[300];
    join(nodir, sizeof nodir, d.path, "no/such/x.safetensors");
    ck_assert_int_eq(ac_st_save(nodir, e, 5, NULL, 0, &err), -1);
    ck_assert_msg(strstr(err.msg, "No such file or directory") != NULL, "%s", err.msg);
    tmpdir_remove(&d);
}
END_TEST

/* Saving a big file under RLIMIT_FSIZE in a child: the write fails halfway
 * (EFBIG), the old file stays as it was and no temporary file is left. */
START_TEST(test_st_save_fails_halfway)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[300];
    join(path, sizeof path, d.path, "model.safetensors");
    save_fixture(path);
    size_t len0;
    unsigned char *before = slurp(path, &len0);

    enum { BIG = 100000 };
    float *big = calloc(BIG, sizeof *big);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim = {65536, 65536};
        setrlimit(RLIMIT_FSIZE, &lim);
        ac_st_entry e = {.name = "big", .ndim = 1, .shape = {BIG}, .data = big};
        ac_err err = {{0}};
        int rc = ac_st_save(path, &e, 1, NULL, 0, &err);
        ssize_t w = write(fds[1], err.msg, strlen(err.msg) + 1);
        (void)w;
        _exit(rc == -1 ? 0 : 1);
    }
    close(fds[1]);
    char msg[AC_ERR_LEN] = {0};
    ssize_t got = read(fds[0], msg, sizeof msg - 1);
    close(fds[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "save did not fail: %s", msg);
    ck_assert_int_gt(got, 0);
    ck_assert_msg(strstr(msg, "File too large") && strstr(msg, path), "%s", msg);

    size_t len1;
    unsigned char *after = slurp(path, &len1);
    ck_assert_uint_eq(len0, len1);
    ck_assert_int_eq(memcmp(before, after, len0), 0);
    ck_assert_int_eq(count_temp_files(d.path), 0);
    ac_safetensors st;
    ac_err err;
    ck_assert_msg(ac_st_load(&st, path, &err) == 0, "%s", err.msg);
    ac_st_free(&st);
    free(before);
    free(after);
    free(big);
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_st_python_interop)
{
    if (!have_python3()) {
        printf("SKIP test_st_python_interop: python3 not found\n");
        return;
    }
    tmpdir d;
    tmpdir_make(&d);
    char path[300], cmd[1200];
    join(path, sizeof path, d.path, "model.safetensors");
    save_fixture(path);
    snprintf(cmd, sizeof cmd,
             "python3 tests/check_safetensors.py %s shape:embed.weight=5x4 embed.weight:0=-1 "
             "embed.weight:19=3.75 head.bias:1=-0.5 scalar:0=3 shape:empty=0x4 >/dev/null",
             path);
    ck_assert_int_eq(system(cmd), 0);
    /* and the script does notice a wrong value */
    snprintf(cmd, sizeof cmd, "python3 tests/check_safetensors.py %s head.bias:1=0.5 >/dev/null", path);
    ck_assert_int_ne(system(cmd), 0);
    tmpdir_remove(&d);
}
END_TEST

/* ------------------------------------------------------------- file utils */

/* A writer killed mid-save (SIGKILL from mpirun) leaves NAME.tmp.PID.N: the
 * next resume removes those of dead writers only. */
START_TEST(test_remove_stale_temps)
{
    tmpdir d;
    tmpdir_make(&d);
    char dead[300], alive[400], other[300], plain[300];
    join(dead, sizeof dead, d.path, "model.safetensors.tmp.2147483646.0");
    snprintf(alive, sizeof alive, "%s/model.safetensors.tmp.%ld.0", d.path, (long)getpid());
    join(other, sizeof other, d.path, "notes.tmp.txt");
    join(plain, sizeof plain, d.path, "model.safetensors");
    const char *paths[] = {dead, alive, other, plain};
    for (int i = 0; i < 4; i++) {
        FILE *f = fopen(paths[i], "w");
        ck_assert_ptr_nonnull(f);
        fputs("x", f);
        fclose(f);
    }
    ck_assert_int_eq(ac_remove_stale_temps(d.path), 1);
    ck_assert_int_ne(access(dead, F_OK), 0);
    ck_assert_int_eq(access(alive, F_OK), 0);
    ck_assert_int_eq(access(other, F_OK), 0);
    ck_assert_int_eq(access(plain, F_OK), 0);
    ck_assert_int_eq(ac_remove_stale_temps("/nonexistent/dir"), 0);
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_write_file_atomic)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[300];
    join(path, sizeof path, d.path, "f.txt");
    ac_err err;
    ck_assert_msg(ac_write_file_atomic(path, "hello", 5, &err) == 0, "%s", err.msg);
    ck_assert_msg(ac_write_file_atomic(path, "bye", 3, &err) == 0, "%s", err.msg);
    size_t len;
    unsigned char *got = slurp(path, &len);
    ck_assert_uint_eq(len, 3);
    ck_assert_int_eq(memcmp(got, "bye", 3), 0);
    free(got);
    /* mode follows the umask like an ordinary file (not mkstemp's 0600) */
    mode_t mask = umask(022);
    umask(mask);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_int_eq(sb.st_mode & 0777, 0666 & ~mask);
    ck_assert_int_eq(count_temp_files(d.path), 0);

    char sub[300];
    join(sub, sizeof sub, d.path, "a/b/c");
    ck_assert_msg(ac_mkdir_p(sub, &err) == 0, "%s", err.msg);
    ck_assert_msg(ac_mkdir_p(sub, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(stat(sub, &sb), 0);
    ck_assert(S_ISDIR(sb.st_mode));
    ck_assert_int_eq(ac_mkdir_p(path, &err), -1); /* a file in the way */
    ck_assert_ptr_nonnull(strstr(err.msg, "not a directory"));

    char *data;
    ck_assert_int_eq(ac_read_file(path, 2, &data, &len, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "too large"));
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_sha256)
{
    tmpdir d;
    tmpdir_make(&d);
    char path[300], hex[65];
    join(path, sizeof path, d.path, "abc");
    spit(path, "abc", 3);
    ac_err err;
    ck_assert_msg(ac_sha256_file(path, hex, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    spit(path, "", 0);
    ck_assert_msg(ac_sha256_file(path, hex, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    ck_assert_int_eq(ac_sha256_file("/nonexistent", hex, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent"));
    tmpdir_remove(&d);
}
END_TEST

/* ----------------------------------------------------------------- config */

static const char *const TWO_LABELS[] = {"negative", "positive"};

static void set_labels(ac_config *c, const char *const *labels, int n)
{
    ac_config_free(c);
    c->labels = calloc((size_t)n, sizeof *c->labels);
    for (int i = 0; i < n; i++)
        c->labels[i] = strdup(labels[i]);
    c->n_labels = n;
}

/* objective masked_lm: n_classes 0 and labels [] (and only then); old
 * files without the key are classifiers; the key takes only known names. */
START_TEST(test_config_masked_lm)
{
    ac_config c;
    ac_config_defaults(&c);
    c.model.objective = AC_OBJECTIVE_MASKED_LM;
    c.model.n_classes = 0;
    c.training.mask_frac = 0.2;
    snprintf(c.provenance.init_model, sizeof c.provenance.init_model, "%s", "models/x");
    char *text = ac_config_to_json(&c);
    ac_config d;
    ac_config_defaults(&d);
    ac_err err;
    ck_assert_msg(ac_config_parse(&d, text, strlen(text), "m.json", 1, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(d.model.objective, AC_OBJECTIVE_MASKED_LM);
    ck_assert_int_eq(d.model.n_classes, 0);
    ck_assert_int_eq(d.n_labels, 0);
    ck_assert(d.training.mask_frac == 0.2);
    ck_assert_str_eq(d.provenance.init_model, "models/x");
    char *again = ac_config_to_json(&d);
    ck_assert_str_eq(text, again);
    free(again);
    ac_config_free(&d);
    const struct {
        const char *from, *to, *want;
    } bad[] = {
        {"\"n_classes\": 0", "\"n_classes\": 2",
         "m.json: model.n_classes: must be 0 for a masked-LM model (got 2)"},
        {"\"labels\": []", "\"labels\": [\"a\", \"b\"]",
         "m.json: labels: a masked-LM model has none (got 2)"},
        {"\"masked_lm\"", "\"classification\"",
         "m.json: labels: must hold 2..1000 names (got 0)"},
        {"\"masked_lm\"", "\"mlm\"",
         "m.json: model.objective: must be one of \"classification\", \"masked_lm\" (got \"mlm\")"},
        {"\"n_classes\": 0", "\"n_classes\": 1",
         "m.json: model.n_classes: must be an integer in 2..1000 (0 for a masked-LM model) (got 1)"},
        {"\"mask_frac\": 0.2", "\"mask_frac\": 1", "m.json: training.mask_frac: must be a number in (0, 1)"},
        {"\"mask_frac\": 0.2", "\"mask_frac\": 0", "m.json: training.mask_frac: must be a number in (0, 1)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *broken = replace_first(text, bad[i].from, bad[i].to);
        ac_config e;
        ac_config_defaults(&e);
        ck_assert_int_eq(ac_config_parse(&e, broken, strlen(broken), "m.json", 1, &err), -1);
        ck_assert_msg(strstr(err.msg, bad[i].want) != NULL, "expected \"%s\" in: %s", bad[i].want,
                      err.msg);
        ac_config_free(&e);
        free(broken);
    }
    free(text);
    /* a classifier without classes (a preset) */
    const char *no_classes = "{\"model\": {\"n_classes\": 0}}";
    ac_config_defaults(&d);
    ck_assert_int_eq(ac_config_parse(&d, no_classes, strlen(no_classes), "p.json", 0, &err), -1);
    ck_assert_msg(strstr(err.msg, "p.json: model.n_classes: must be an integer in 2..1000 for a "
                                  "classifier (got 0)"),
                  "%s", err.msg);
    /* a classifier with an empty label list */
    ac_config_defaults(&c);
    set_labels(&c, TWO_LABELS, 2);
    text = ac_config_to_json(&c);
    char *empty = replace_first(text, "[\"negative\", \"positive\"]", "[]");
    ac_config_defaults(&d);
    ck_assert_int_eq(ac_config_parse(&d, empty, strlen(empty), "c.json", 1, &err), -1);
    ck_assert_msg(strstr(err.msg, "c.json: labels: must hold 2..1000 names (got 0)"), "%s", err.msg);
    free(empty);
    free(text);
    ac_config_free(&c);
}
END_TEST

START_TEST(test_config_round_trip)
{
    ac_config c;
    ac_config_defaults(&c);
    set_labels(&c, TWO_LABELS, 2);
    c.training.seed = UINT64_MAX; /* above 2^53: written as a string */
    c.training.optim.lr = 3e-4f;
    c.training.warmup_frac = 0.1 + 0.2; /* needs 17 digits */
    c.provenance.best_val_accuracy = 0.875;
    snprintf(c.provenance.train_file, sizeof c.provenance.train_file, "data/\"quoted\"\tname.csv");
    snprintf(c.provenance.train_sha256, sizeof c.provenance.train_sha256, "%064d", 7);
    c.provenance.rows_used = 25000;
    char *text = ac_config_to_json(&c);
    ck_assert_ptr_nonnull(text);
    ck_assert_ptr_nonnull(strstr(text, "\"seed\": \"18446744073709551615\""));
    ck_assert_ptr_nonnull(strstr(text, "\"lr\": 0.0003,"));
    ck_assert_ptr_nonnull(strstr(text, "\"labels\": [\"negative\", \"positive\"]"));
    ck_assert_ptr_nonnull(strstr(text, "\n  \"model\": {\n    \"vocab_size\": 30002,"));
    ck_assert_ptr_null(strchr(text, '\t')); /* spaces only; the tab in the name is escaped */
    /* stable key order: sections in the documented order */
    const char *order[] = {"\"model\"", "\"tokenizer\"", "\"labels\"", "\"training\"", "\"provenance\""};
    for (int i = 1; i < 5; i++)
        ck_assert(strstr(text, order[i - 1]) < strstr(text, order[i]));

    ac_config back;
    ac_config_defaults(&back);
    back.model.d_model = 999; /* overwritten by the file */
    ac_err err;
    ck_assert_msg(ac_config_parse(&back, text, strlen(text), "config.json", 1, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(back.model.d_model, 64);
    ck_assert(back.training.seed == UINT64_MAX);
    ck_assert(back.training.optim.lr == 3e-4f);
    ck_assert(back.training.warmup_frac == 0.1 + 0.2);
    ck_assert(back.provenance.best_val_accuracy == 0.875);
    ck_assert_str_eq(back.provenance.train_file, c.provenance.train_file);
    ck_assert_int_eq(back.n_labels, 2);
    ck_assert_str_eq(back.labels[1], "positive");
    char *again = ac_config_to_json(&back);
    ck_assert_str_eq(text, again); /* text -> config -> text is the identity */
    free(again);
    free(text);
    ac_config_free(&back);
    ac_config_free(&c);
}
END_TEST

START_TEST(test_config_presets)
{
    ac_err err;
    ac_config c;
    ac_config_defaults(&c);
    ck_assert_msg(ac_config_load(&c, "models/seed.json", 0, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.model.n_layers, 1);
    ck_assert_int_eq(c.model.d_model, 32);
    ck_assert_int_eq(c.model.n_heads, 2);
    ck_assert_int_eq(c.model.d_ff, 128);
    ck_assert_int_eq(c.model.vocab_size, 50002);
    ck_assert_int_eq(c.training.vocab_max, 50002); /* follows vocab_size */
    ck_assert_int_eq(c.model.max_len, 200);
    ck_assert_int_eq(c.model.pooling, AC_POOL_MAX);
    ck_assert_int_eq(c.tokenizer.truncation, AC_TRUNC_HEAD);
    ck_assert_int_eq(c.tokenizer.mark_negation, 0); /* the course's words, as they are */
    ck_assert(c.model.dropout == 0.1f);
    /* the preset's training section, tuned on IMDB validation (docs/recipe.md) */
    ck_assert_int_eq(c.training.epochs, 10);
    ck_assert(c.training.optim.lr == 0.003f);
    ck_assert_int_eq(c.training.batch_size, 32); /* absent: kept */
    ac_config_free(&c);

    ac_config_defaults(&c);
    ck_assert_msg(ac_config_load(&c, "models/default.json", 0, &err) == 0, "%s", err.msg);
    /* The recipe a user gets with no options is models/default.json: loading
     * it over the built-in defaults changes nothing, and it names every
     * model, tokenizer and training setting (so it cannot drift silently). */
    ac_config builtin;
    ac_config_defaults(&builtin);
    char *a = ac_config_to_json(&builtin), *b = ac_config_to_json(&c);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    ac_config_free(&builtin);
    ac_config_free(&c);
    char *text = NULL;
    size_t text_len = 0;
    ck_assert_msg(ac_read_file("models/default.json", 1 << 20, &text, &text_len, &err) == 0, "%s",
                  err.msg);
    cJSON *root = cJSON_Parse(text);
    ck_assert_ptr_nonnull(root);
    ac_config_defaults(&c);
    char *full = ac_config_to_json(&c);
    cJSON *all = cJSON_Parse(full);
    static const char *const sections[] = {"model", "tokenizer", "training"};
    for (int k = 0; k < 3; k++) {
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(all, sections[k]);
        const cJSON *have = cJSON_GetObjectItemCaseSensitive(root, sections[k]);
        for (const cJSON *key = want->child; key; key = key->next) {
            /* known only after reading the data, or the hashing constant; the
             * objective is the command's (train or pretrain), not the recipe's */
            if (!strcmp(key->string, "n_classes") || !strcmp(key->string, "ngram_hash") ||
                !strcmp(key->string, "wide_hash") ||
                !strcmp(key->string, "objective") ||
                !strcmp(key->string, "temperature") || !strcmp(key->string, "seed") ||
                !strcmp(key->string, "nbsvm_temperature") /* recorded, not a setting */)
                continue;
            ck_assert_msg(cJSON_GetObjectItemCaseSensitive(have, key->string) != NULL,
                          "models/default.json: %s.%s is not set", sections[k], key->string);
        }
    }
    cJSON_Delete(root);
    cJSON_Delete(all);
    free(full);
    free(text);
    ac_config_free(&c);

    const struct { const char *path; int layers, d, heads, ff, len; } bench[] = {
        {"models/bench-a.json", 1, 32, 2, 128, 256},
        {"models/bench-b.json", 2, 64, 4, 256, 256},
        {"models/bench-c.json", 4, 128, 4, 512, 512},
    };
    for (int i = 0; i < 3; i++) {
        ac_config_defaults(&c);
        ck_assert_msg(ac_config_load(&c, bench[i].path, 0, &err) == 0, "%s", err.msg);
        ck_assert_int_eq(c.model.n_layers, bench[i].layers);
        ck_assert_int_eq(c.model.d_model, bench[i].d);
        ck_assert_int_eq(c.model.n_heads, bench[i].heads);
        ck_assert_int_eq(c.model.d_ff, bench[i].ff);
        ck_assert_int_eq(c.model.max_len, bench[i].len);
        ck_assert_int_eq(c.model.vocab_size, 50002);
        ck_assert(c.model.dropout == 0.0f);
        ck_assert_int_eq(c.model.pooling, AC_POOL_MAX);
        ac_config_free(&c);
    }
    /* A preset is not a full config. */
    ac_config_defaults(&c);
    ck_assert_int_eq(ac_config_load(&c, "models/seed.json", 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "models/seed.json: model.n_classes: missing required key"));
    ac_config_free(&c);
}
END_TEST

typedef struct {
    const char *json;
    int full;
    const char *want;
} config_case;

static const config_case CONFIG_CASES[] = {
    {"{\"model\": {\"d_modle\": 3}}", 0, "x.json: model.d_modle: unknown key (known: vocab_size,"},
    {"{\"modle\": {}}", 0, "x.json: modle: unknown key"},
    {"{\"training\": {\"lr\": 1e-3, \"momentum\": 0.9}}", 0, "x.json: training.momentum: unknown key"},
    {"{\"model\": {\"d_model\": \"64\"}}", 0, "x.json: model.d_model: must be an integer in 1..65536 (got \"64\")"},
    {"{\"model\": {\"n_heads\": 2.5}}", 0, "x.json: model.n_heads: must be an integer in 1..65536 (got 2.5)"},
    {"{\"model\": {\"n_heads\": 0}}", 0, "x.json: model.n_heads: must be an integer in 1..65536 (got 0)"},
    {"{\"model\": {\"n_layers\": 65}}", 0, "x.json: model.n_layers: must be an integer in 1..64 (got 65)"},
    {"{\"model\": {\"vocab_size\": 2}}", 0, "model.vocab_size: must be an integer in 3..10000000"},
    {"{\"model\": {\"n_classes\": 1001}}", 0, "model.n_classes: must be an integer in 2..1000"},
    {"{\"model\": {\"dropout\": 1}}", 0, "x.json: model.dropout: must be a number in [0, 1) (got 1)"},
    {"{\"model\": {\"ln_eps\": 0}}", 0, "x.json: model.ln_eps: must be a number in (0, 1) (got 0)"},
    {"{\"model\": {\"pooling\": \"avg\"}}", 0, "x.json: model.pooling: must be one of \"max\", \"mean\", \"cls\" (got \"avg\")"},
    {"{\"model\": {\"d_model\": 30, \"n_heads\": 4}}", 0, "x.json: model.n_heads: 4 does not divide model.d_model (30)"},
    {"{\"model\": []}", 0, "x.json: model: must be an object"},
    {"{\"model\": {\"d_model\": 32, \"d_model\": 64}}", 0, "x.json: model.d_model: duplicate key"},
    {"{\"model\": {}, \"model\": {}}", 0, "x.json: model: duplicate key"},
    {"{\"tokenizer\": {\"nfkc\": 1}}", 0, "x.json: tokenizer.nfkc: must be true or false (got 1)"},
    {"{\"tokenizer\": {\"truncation\": \"middle\"}}", 0, "x.json: tokenizer.truncation: must be one of"},
    {"{\"tokenizer\": {\"head_tokens\": 3000}}", 0, "x.json: tokenizer.head_tokens: 3000 exceeds model.max_len (1024)"},
    {"{\"training\": {\"lr\": 0}}", 0, "x.json: training.lr: must be a number in (0, 10] (got 0)"},
    {"{\"training\": {\"lr\": null}}", 0, "x.json: training.lr: must be a number in (0, 10] (got null)"},
    {"{\"training\": {\"epochs\": 0}}", 0, "x.json: training.epochs: must be an integer in 1..1000000"},
    {"{\"training\": {\"batch_size\": 65537}}", 0, "training.batch_size: must be an integer in 1..65536"},
    {"{\"training\": {\"schedule\": \"step\"}}", 0, "x.json: training.schedule: must be one of \"cosine\""},
    {"{\"training\": {\"val_split\": 1}}", 0, "x.json: training.val_split: must be a number in [0, 1)"},
    {"{\"training\": {\"seed\": -1}}", 0, "x.json: training.seed: must be an integer in 0..18446744073709551615"},
    {"{\"training\": {\"seed\": \"18446744073709551616\"}}", 0, "x.json: training.seed: must be"},
    {"{\"training\": {\"seed\": \"12a\"}}", 0, "x.json: training.seed: must be"},
    {"{\"training\": {\"seed\": 1e17}}", 0, "x.json: training.seed: must be"},
    {"{\"training\": {\"min_count\": 0}}", 0, "x.json: training.min_count: must be an integer >= 1"},
    {"{\"provenance\": {\"train_sha256\": \"abc\"}}", 0, "x.json: provenance.train_sha256: must be \"\" or 64 hexadecimal digits"},
    {"{\"provenance\": {\"best_val_accuracy\": 1.5}}", 0, "x.json: provenance.best_val_accuracy: must be null or a number in [0, 1]"},
    {"{\"labels\": [\"a\", \"b\"], \"model\": {\"n_classes\": 3}}", 0, "x.json: labels: 2 names but model.n_classes is 3"},
    {"{\"labels\": [\"a\", \"a\"]}", 0, "x.json: labels[1]: duplicate label \"a\""},
    {"{\"labels\": [\"a\", \"\"]}", 0, "x.json: labels[1]: must not be empty"},
    {"{\"labels\": [\"a\", 2]}", 0, "x.json: labels[1]: must be a string"},
    {"{\"labels\": [\"a\"]}", 0, "x.json: labels: must hold 2..1000 names (got 1)"},
    {"{\"labels\": \"a,b\"}", 0, "x.json: labels: must be an array of strings"},
    {"{\n  \"model\": {\n    \"d_model\": 64,\n  }\n}", 0, "x.json:4:"},
    {"{\"model\": {}} x", 0, "x.json:1:15: unexpected text after the JSON value"},
    {"[1, 2]", 0, "x.json: must be a JSON object"},
    {"", 0, "x.json:1:1: not valid JSON"},
    {"{\"labels\": [\"\xc3\x28\"]}", 0, "x.json:1:14: invalid UTF-8"},
    {"{\"model\": {}}", 1, "x.json: model.vocab_size: missing required key"},
};

START_TEST(test_config_errors)
{
    const config_case *cc = &CONFIG_CASES[_i];
    ac_config c;
    ac_config_defaults(&c);
    char *before = ac_config_to_json(&c);
    ac_err err = {{0}};
    ck_assert_msg(ac_config_parse(&c, cc->json, strlen(cc->json), "x.json", cc->full, &err) == -1,
                  "accepted: %s", cc->json);
    ck_assert_msg(strstr(err.msg, cc->want) != NULL, "expected \"%s\" in: %s", cc->want, err.msg);
    /* a rejected file leaves the configuration as it was */
    char *after = ac_config_to_json(&c);
    ck_assert_str_eq(before, after);
    free(before);
    free(after);
    ac_config_free(&c);
}
END_TEST

/* Regression (found by tests/fuzz/fuzz_config): a number inside a float
 * key's range could round onto an open bound when stored as a float
 * (dropout 0.99999999 -> 1.0f), giving a config that the model rejects and
 * that does not load back once written. */
START_TEST(test_config_float_rounding)
{
    const struct {
        const char *json, *want;
    } rejected[] = {
        {"{\"model\": {\"dropout\": 0.99999999}}", "x.json: model.dropout: must be a number in [0, 1)"},
        {"{\"model\": {\"ln_eps\": 1e-50}}", "x.json: model.ln_eps: must be a number in (0, 1)"},
        {"{\"model\": {\"ln_eps\": 0.999999999}}", "x.json: model.ln_eps: must be a number in (0, 1)"},
        {"{\"training\": {\"lr\": 1e-50}}", "x.json: training.lr: must be a number in (0, 10]"},
        {"{\"training\": {\"beta2\": 0.9999999999}}", "x.json: training.beta2: must be a number in [0, 1)"},
        {"{\"training\": {\"eps\": 1e-46}}", "x.json: training.eps: must be a number in (0, 1)"},
        /* the input the fuzzer found */
        {"{\"model\": {\"dropout\": 0.99999999, \"ln_eps\": 1e-12}, \"training\": {\"lr\": 1e-30,"
         " \"warmup_frac\": 1, \"val_split\": 0.5, \"min_lr_ratio\": 0.3}}",
         "x.json: model.dropout: must be a number in [0, 1)"},
    };
    ac_err err = {{0}};
    for (size_t i = 0; i < sizeof rejected / sizeof rejected[0]; i++) {
        ac_config c;
        ac_config_defaults(&c);
        ck_assert_msg(ac_config_parse(&c, rejected[i].json, strlen(rejected[i].json), "x.json", 0,
                                      &err) == -1,
                      "accepted: %s", rejected[i].json);
        ck_assert_msg(strstr(err.msg, rejected[i].want) != NULL, "expected \"%s\" in: %s",
                      rejected[i].want, err.msg);
        ck_assert(c.model.dropout == 0.3f); /* unchanged: the default */
    }
    /* close to the bounds but representable: accepted, valid, and written back the same */
    const char *fine = "{\"labels\": [\"a\", \"b\"], \"model\": {\"dropout\": 0.9999999, "
                       "\"ln_eps\": 1e-30}, \"training\": {\"lr\": 1e-30, \"beta2\": 0.9999999}}";
    ac_config c;
    ac_config_defaults(&c);
    ck_assert_msg(ac_config_parse(&c, fine, strlen(fine), "x.json", 0, &err) == 0, "%s", err.msg);
    ck_assert(c.model.dropout < 1.0f && c.model.ln_eps > 0.0f && c.training.optim.lr > 0.0f);
    ck_assert_msg(ac_model_config_validate(&c.model, &err) == 0, "%s", err.msg);
    char *text = ac_config_to_json(&c);
    ac_config back;
    ac_config_defaults(&back);
    ck_assert_msg(ac_config_parse(&back, text, strlen(text), "back.json", 1, &err) == 0, "%s", err.msg);
    char *again = ac_config_to_json(&back);
    ck_assert_str_eq(text, again);
    free(text);
    free(again);
    ac_config_free(&back);
    ac_config_free(&c);
}
END_TEST

/* Regression (found by tests/fuzz/fuzz_config): seed 2^53 + 1 was written as
 * the JSON number 9007199254740993 ((double)(2^53 + 1) == 2^53 passed the
 * "exact" test), which reads back as 2^53: a saved model's seed changed
 * silently. Seeds from 2^53 up are strings; a number that reads as 2^53 is
 * refused, since it may have been written as 2^53 + 1. */
START_TEST(test_config_seed_near_2_53)
{
    const uint64_t two53 = 1ULL << 53;
    const struct {
        uint64_t seed;
        const char *written;
    } cases[] = {
        {two53 - 1, "\"seed\": 9007199254740991,"},
        {two53, "\"seed\": \"9007199254740992\","},
        {two53 + 1, "\"seed\": \"9007199254740993\","},
    };
    ac_err err = {{0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ac_config c;
        ac_config_defaults(&c);
        set_labels(&c, TWO_LABELS, 2);
        c.training.seed = cases[i].seed;
        char *text = ac_config_to_json(&c);
        ck_assert_msg(strstr(text, cases[i].written) != NULL, "no %s in:\n%s", cases[i].written, text);
        ac_config back;
        ac_config_defaults(&back);
        ck_assert_msg(ac_config_parse(&back, text, strlen(text), "x.json", 1, &err) == 0, "%s", err.msg);
        ck_assert(back.training.seed == cases[i].seed);
        free(text);
        ac_config_free(&back);
        ac_config_free(&c);
    }
    /* the input the fuzzer found, as a preset: kept exactly */
    const char *found = "{\"training\": {\"seed\": \"9007199254740993\"}}";
    ac_config c;
    ac_config_defaults(&c);
    ck_assert_msg(ac_config_parse(&c, found, strlen(found), "x.json", 0, &err) == 0, "%s", err.msg);
    ck_assert(c.training.seed == two53 + 1);
    /* numbers: exact below 2^53; 2^53 and 2^53 + 1 both read as 2^53, so refused */
    const char *numbers[] = {"{\"training\": {\"seed\": 9007199254740992}}",
                             "{\"training\": {\"seed\": 9007199254740993}}"};
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(ac_config_parse(&c, numbers[i], strlen(numbers[i]), "x.json", 0, &err), -1);
        ck_assert_msg(strstr(err.msg, "x.json: training.seed: must be an integer in "
                                      "0..18446744073709551615 (as a decimal string from 2^53 up)"),
                      "%s", err.msg);
        ck_assert(c.training.seed == two53 + 1); /* unchanged */
    }
    const char *below = "{\"training\": {\"seed\": 9007199254740991}}";
    ck_assert_msg(ac_config_parse(&c, below, strlen(below), "x.json", 0, &err) == 0, "%s", err.msg);
    ck_assert(c.training.seed == two53 - 1);
    ac_config_free(&c);
}
END_TEST

/* full = 1: every key and section of a written config is required. */
/* A config.json of attnctl 0.1 has none of the keys added since: it loads,
 * and they take the values that mean 0.1's behaviour (fixed positions, no
 * n-grams, temperature 1, no crops, plain cross-entropy, emoji as tokens,
 * one model rather than an average of members). */
START_TEST(test_config_of_version_0_1_loads)
{
    ac_config c;
    ac_config_defaults(&c);
    /* a trained model's config.json: the settings left to the data are numbers */
    c.training.epochs = 4;
    c.training.ema = 0.999f;
    c.training.members = 3;
    c.training.refit = 1;
    c.training.nbsvm = 0.0f;
    c.training.wide_nb = 0.0f;
    c.training.min_count = 2;
    c.model.wide_order = 3;
    c.model.wide_buckets = 4194304;
    set_labels(&c, TWO_LABELS, 2);
    char *text = ac_config_to_json(&c);
    static const char *const added[] = {
        "    \"positions\": \"learned\",\n", "    \"ngram_order\": 1,\n",
        "    \"ngram_buckets\": 262144,\n", "    \"temperature\": 1\n",
        "    \"wide_order\": 3,\n", "    \"wide_buckets\": 4194304,\n", "    \"wide_norm\": 0.5,\n",
        "    \"crop_frac\": 0.5,\n", "    \"crop_min\": 1,\n", "    \"crop_max\": 64,\n",
        "    \"label_smoothing\": 0,\n", "    \"token_dropout\": 0,\n", "    \"wide_nb\": 0,\n",
        "    \"ema\": 0.999,\n",
        "    \"members\": 3,\n", "    \"refit\": 1,\n", "    \"nbsvm\": 0,\n",
        "    \"nbsvm_temperature\": 0\n",
        "    \"objective\": \"classification\",\n", "    \"mask_frac\": 0.15,\n",
        "    \"init_model\": \"\",\n", "    \"emoji_names\": true,\n",
        "    \"squeeze_elongations\": true,\n", "    \"mark_negation\": true,\n",
    };
    for (size_t i = 0; i < sizeof added / sizeof added[0]; i++) {
        char *cut = replace_first(text, added[i], "");
        free(text);
        text = cut;
    }
    static const char *const hashes[] = {"    \"ngram_hash\"", "    \"wide_hash\""};
    for (int k = 0; k < 2; k++) {
        char *hash = strstr(text, hashes[k]);
        ck_assert_ptr_nonnull(hash);
        char *line_end = strchr(hash, '\n');
        memmove(hash, line_end + 1, strlen(line_end + 1) + 1);
    }
    /* the lines before the removed last keys keep their commas: drop them */
    char *fixed = replace_first(text, "\"ln_eps\": 1e-06,", "\"ln_eps\": 1e-06");
    free(text);
    text = replace_first(fixed, "\"min_count\": 2,", "\"min_count\": 2");
    free(fixed);
    ac_config d;
    ac_config_defaults(&d);
    ac_err err;
    ck_assert_msg(ac_config_parse(&d, text, strlen(text), "old.json", 1, &err) == 0, "%s\n%s",
                  err.msg, text);
    ck_assert_int_eq(d.model.positions, AC_POS_SINUSOIDAL);
    ck_assert_int_eq(d.model.ngram_order, 1);
    ck_assert_int_eq(d.model.ngram_buckets, 0);
    ck_assert_int_eq(d.model.wide_order, 0);
    ck_assert_int_eq(d.model.wide_buckets, 0);
    ck_assert(d.model.wide_norm == 0.0f); /* a model without the key: the plain sum */
    ck_assert(d.model.temperature == 1.0f);
    ck_assert(d.training.crop_frac == 0.0);
    ck_assert(d.training.label_smoothing == 0.0f);
    ck_assert(d.training.token_dropout == 0.0f);
    ck_assert(d.training.ema == 0.0f);
    ck_assert_int_eq(d.training.members, 1); /* one model, no average */
    ck_assert_int_eq(d.training.refit, 0);   /* the model of the validated run */
    ck_assert(d.training.wide_nb == 0.0f);   /* the wide path from zeros */
    ck_assert_int_eq(d.model.objective, AC_OBJECTIVE_CLASSIFICATION);
    ck_assert(d.training.mask_frac == 0.15);
    ck_assert_str_eq(d.provenance.init_model, "");
    ck_assert_int_eq(d.tokenizer.emoji_names, 0); /* each emoji its own token, as before */
    ck_assert_ptr_null(strstr(text, "emoji_names"));
    ck_assert_int_eq(d.tokenizer.squeeze_elongations, 0); /* a stretched word stays <unk> */
    ck_assert_ptr_null(strstr(text, "squeeze_elongations"));
    ck_assert_int_eq(d.tokenizer.mark_negation, 0); /* "not good" reads "not", "good" */
    ck_assert_ptr_null(strstr(text, "mark_negation"));
    ck_assert_ptr_null(strstr(text, "objective"));
    ck_assert_ptr_null(strstr(text, "mask_frac"));
    ck_assert_ptr_null(strstr(text, "init_model"));
    /* a key of 0.1 is still required */
    char *no_dff = replace_first(text, "    \"d_ff\": 256,\n", "");
    ck_assert_int_eq(ac_config_parse(&d, no_dff, strlen(no_dff), "old.json", 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.d_ff: missing required key"));
    /* the hash, when given, must be the one this version computes */
    char *other = ac_config_to_json(&c);
    char *bad = replace_first(other, "h=h*116049371", "h=h*31");
    ck_assert_int_eq(ac_config_parse(&d, bad, strlen(bad), "x.json", 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.ngram_hash"));
    free(no_dff);
    free(other);
    free(bad);
    free(text);
    ac_config_free(&d);
    ac_config_free(&c);
}
END_TEST

START_TEST(test_config_missing_keys)
{
    ac_config c;
    ac_config_defaults(&c);
    set_labels(&c, TWO_LABELS, 2);
    char *text = ac_config_to_json(&c);
    ac_err err;
    const struct { const char *cut; const char *want; } cases[] = {
        {"    \"d_ff\": 256,\n", "x.json: model.d_ff: missing required key"},
        {"    \"casefold\": true,\n", "x.json: tokenizer.casefold: missing required key"},
        {"    \"nbsvm_temperature\": 0\n", NULL /* leaves a trailing comma: not JSON */},
        {"    \"seed\": 1,\n", "x.json: training.seed: missing required key"},
        {"    \"date\": \"\",\n", "x.json: provenance.date: missing required key"},
        {"  \"labels\": [\"negative\", \"positive\"],\n", "x.json: labels: missing required key"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *cut = replace_first(text, cases[i].cut, "");
        ac_config d;
        ac_config_defaults(&d);
        ck_assert_int_eq(ac_config_parse(&d, cut, strlen(cut), "x.json", 1, &err), -1);
        const char *want = cases[i].want ? cases[i].want : "not valid JSON";
        ck_assert_msg(strstr(err.msg, want) != NULL, "expected \"%s\" in: %s", want, err.msg);
        /* the same text is a fine preset */
        if (cases[i].want) {
            ck_assert_msg(ac_config_parse(&d, cut, strlen(cut), "x.json", 0, &err) == 0, "%s", err.msg);
        }
        ac_config_free(&d);
        free(cut);
    }
    /* a whole section missing */
    cJSON *root = cJSON_Parse(text);
    cJSON_DeleteItemFromObject(root, "provenance");
    char *no_prov = cJSON_Print(root);
    ac_config d;
    ac_config_defaults(&d);
    ck_assert_int_eq(ac_config_parse(&d, no_prov, strlen(no_prov), "x.json", 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "x.json: provenance: missing required key"));
    ac_config_free(&d);
    cJSON_free(no_prov);
    cJSON_Delete(root);
    free(text);
    ac_config_free(&c);

    /* labels alone set the class count in a preset; the file names its path on load errors */
    ac_config_defaults(&c);
    const char *three = "{\"labels\": [\"neg\", \"neu\", \"pos\"]}";
    ck_assert_msg(ac_config_parse(&c, three, strlen(three), "x.json", 0, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(c.model.n_classes, 3);
    ck_assert_int_eq(c.n_labels, 3);
    ac_config_free(&c);
    ck_assert_int_eq(ac_config_load(&c, "/nonexistent/config.json", 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/config.json: cannot open"));
}
END_TEST

/* ---------------------------------------------------------- trainer state */

START_TEST(test_trainer_state_round_trip)
{
    const uint64_t seeds[] = {0, 1, (1ULL << 53) + 1, 0xFFFFFFFFFFFFFFFFULL, 12345678901234567891ULL};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        ac_trainer_state s = {
            .step = 123456,
            .epoch = 3,
            .batch_in_epoch = 77,
            .seed = seeds[i],
            .best_metric = 0.1 + 0.7,
            .best_step = 120000,
            .bad_evals = 1,
            .train_loss_sum = 1.0 / 3.0,
            .train_loss_count = 42,
            .member = 2,
            .steps_before = 5632,
        };
        char *text = ac_trainer_state_to_json(&s);
        ck_assert_ptr_nonnull(text);
        char want_seed[64];
        snprintf(want_seed, sizeof want_seed, "\"seed\": \"%llu\"", (unsigned long long)seeds[i]);
        ck_assert_msg(strstr(text, want_seed) != NULL, "%s", text);
        ac_trainer_state back;
        memset(&back, 0xab, sizeof back);
        ac_err err;
        ck_assert_msg(ac_trainer_state_parse(&back, text, strlen(text), "trainer_state.json", &err) == 0,
                      "%s", err.msg);
        ck_assert(back.seed == seeds[i]);
        ck_assert_int_eq(back.step, s.step);
        ck_assert_int_eq(back.epoch, s.epoch);
        ck_assert_int_eq(back.batch_in_epoch, s.batch_in_epoch);
        ck_assert(back.best_metric == s.best_metric);
        ck_assert_int_eq(back.best_step, s.best_step);
        ck_assert_int_eq(back.bad_evals, s.bad_evals);
        ck_assert(back.train_loss_sum == s.train_loss_sum);
        ck_assert_int_eq(back.train_loss_count, s.train_loss_count);
        ck_assert_int_eq(back.member, s.member);
        ck_assert_int_eq(back.steps_before, s.steps_before);
        free(text);
    }
    /* errors: every field required, no unknown ones, types checked */
    ac_trainer_state s = {.step = 1, .seed = 5, .best_metric = -1, .best_step = -1};
    char *text = ac_trainer_state_to_json(&s);
    ac_err err;
    const struct { const char *old_text, *new_text, *want; } cases[] = {
        {"  \"epoch\": 0,\n", "", "t.json: epoch: missing required key"},
        {"\"epoch\": 0,", "\"epoch\": 0, \"lr\": 1,", "t.json: lr: unknown key"},
        {"\"step\": 1", "\"step\": -1", "t.json: step: must be an integer >= 0"},
        {"\"seed\": \"5\"", "\"seed\": \"-5\"", "t.json: seed: must be an integer in 0..18446744073709551615"},
        {"\"bad_evals\": 0", "\"bad_evals\": true", "t.json: bad_evals: must be an integer"},
        {"\"best_metric\": -1", "\"best_metric\": \"x\"", "t.json: best_metric: must be a number or null"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *bad = replace_first(text, cases[i].old_text, cases[i].new_text);
        ac_trainer_state t = s;
        ck_assert_int_eq(ac_trainer_state_parse(&t, bad, strlen(bad), "t.json", &err), -1);
        ck_assert_msg(strstr(err.msg, cases[i].want) != NULL, "expected \"%s\" in: %s", cases[i].want,
                      err.msg);
        free(bad);
    }
    /* a seed written as a number (hand-edited, small) is accepted */
    char *num = replace_first(text, "\"seed\": \"5\"", "\"seed\": 5");
    ac_trainer_state t;
    ck_assert_msg(ac_trainer_state_parse(&t, num, strlen(num), "t.json", &err) == 0, "%s", err.msg);
    ck_assert(t.seed == 5);
    free(num);
    /* a state of before weight averages (no member keys) is the first member's */
    char *old = replace_first(text, ",\n  \"member\": 0,\n  \"steps_before\": 0", "");
    memset(&t, 0xab, sizeof t);
    ck_assert_msg(ac_trainer_state_parse(&t, old, strlen(old), "t.json", &err) == 0, "%s\n%s",
                  err.msg, old);
    ck_assert_int_eq(t.member, 0);
    ck_assert_int_eq(t.steps_before, 0);
    free(old);
    free(text);
}
END_TEST

/* ----------------------------------------------------------- model folder */

enum { SMALL_V = 12, SMALL_D = 16, SMALL_FF = 32, SMALL_LAYERS = 2 };

static void write_vocab_file(const char *path, int n, int with_cls)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(with_cls ? "<pad>\n<unk>\n<cls>\n" : "<pad>\n<unk>\n", f);
    for (int i = with_cls ? 3 : 2; i < n; i++)
        fprintf(f, "word%d\n", i);
    ck_assert_int_eq(fclose(f), 0);
}

typedef struct {
    ac_config cfg;
    ac_vocab vocab;
    ac_model model;
} small_model;

/* A small model with every parameter distinct (not just the init pattern). */
static void small_model_make(small_model *s, const char *scratch_dir, int vocab_size, uint64_t seed)
{
    ac_err err;
    ac_config_defaults(&s->cfg);
    s->cfg.model.vocab_size = vocab_size;
    s->cfg.model.max_len = 8;
    s->cfg.model.d_model = SMALL_D;
    s->cfg.model.n_heads = 2;
    s->cfg.model.d_ff = SMALL_FF;
    s->cfg.model.n_layers = SMALL_LAYERS;
    s->cfg.model.n_classes = 2;
    s->cfg.model.pooling = AC_POOL_MEAN;
    s->cfg.model.dropout = 0.0f;
    /* the course's fixed positions (no tensor) and a tiny n-gram table,
     * which comes last in the file */
    s->cfg.model.positions = AC_POS_SINUSOIDAL;
    s->cfg.model.ngram_order = 2;
    s->cfg.model.ngram_buckets = 16;
    s->cfg.model.wide_order = 3;
    s->cfg.model.wide_buckets = 16; /* and a tiny wide table */
    set_labels(&s->cfg, TWO_LABELS, 2);
    char vpath[300];
    join(vpath, sizeof vpath, scratch_dir, "source-vocab.txt");
    write_vocab_file(vpath, vocab_size, 0);
    ck_assert_msg(ac_vocab_load(&s->vocab, vpath, &err) == 0, "%s", err.msg);
    ck_assert_msg(ac_model_create(&s->model, &s->cfg.model, &err) == 0, "%s", err.msg);
    ac_model_init_weights(&s->model, seed);
    for (size_t i = 0; i < s->model.n_params; i++)
        s->model.params[i] += 0.001f * (float)(i % 101) - 0.05f;
}

static void small_model_free(small_model *s)
{
    ac_config_free(&s->cfg);
    ac_vocab_free(&s->vocab);
    ac_model_free(&s->model);
}

static void save_small(const small_model *s, const char *dir)
{
    ac_err err;
    ck_assert_msg(ac_model_dir_save(dir, &s->cfg, &s->vocab, &s->model, NULL, NULL, NULL, &err) == 0,
                  "%s", err.msg);
}

static int file_exists(const char *dir, const char *name)
{
    char p[400];
    join(p, sizeof p, dir, name);
    return access(p, F_OK) == 0;
}

/* Logits of a fixed batch (B = 2, T = 5). */
static void small_logits(ac_model *m, float out[4])
{
    static const int32_t ids[10] = {2, 5, 7, 3, 11, 4, 9, 1, 0, 0};
    static const int32_t lengths[2] = {5, 3};
    ac_err err;
    ck_assert_msg(ac_model_alloc_activations(m, 2, 5, &err) == 0, "%s", err.msg);
    ac_model_forward(m, ids, lengths, NULL, 2, 5, 0, 0);
    memcpy(out, m->act.logits, 4 * sizeof(float));
    for (int i = 0; i < 4; i++)
        ck_assert(isfinite(out[i]));
}

START_TEST(test_modeldir_round_trip)
{
    tmpdir d;
    tmpdir_make(&d);
    small_model s;
    small_model_make(&s, d.path, SMALL_V, 7);
    char dir[300];
    join(dir, sizeof dir, d.path, "out/models/imdb"); /* created with mkdir -p */
    save_small(&s, dir);
    ck_assert(file_exists(dir, "config.json"));
    ck_assert(file_exists(dir, "vocab.txt"));
    ck_assert(file_exists(dir, "model.safetensors"));
    ck_assert(!file_exists(dir, "optimizer.safetensors"));
    ck_assert(!file_exists(dir, "trainer_state.json"));
    ck_assert_int_eq(count_temp_files(dir), 0);

    ac_model_dir md;
    ac_err err;
    ck_assert_msg(ac_model_dir_load(&md, dir, &err) == 0, "%s", err.msg);
    char *a = ac_config_to_json(&s.cfg), *b = ac_config_to_json(&md.config);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    ck_assert_int_eq(md.vocab.size, SMALL_V);
    for (int i = 0; i < SMALL_V; i++)
        ck_assert_str_eq(md.vocab.tokens[i], s.vocab.tokens[i]);
    ck_assert_uint_eq(md.model.n_params, s.model.n_params);
    ck_assert_int_eq(memcmp(md.model.params, s.model.params, s.model.n_params * sizeof(float)), 0);
    float want[4], got[4];
    small_logits(&s.model, want);
    small_logits(&md.model, got);
    ck_assert_int_eq(memcmp(want, got, sizeof want), 0);
    ac_model_dir_free(&md);

    /* Saving again over the folder replaces it. */
    s.model.params[0] = 42.0f;
    save_small(&s, dir);
    ck_assert_msg(ac_model_dir_load(&md, dir, &err) == 0, "%s", err.msg);
    ck_assert(md.model.params[0] == 42.0f);
    /* the file's data is the parameter buffer: mapped in place, not copied */
    ck_assert_ptr_nonnull(md.model.params_mapping);
    /* and the pages are private: writing the weights leaves the file as it was */
    md.model.params[0] = -1.0f;
    ac_model_dir again;
    ck_assert_msg(ac_model_dir_load(&again, dir, &err) == 0, "%s", err.msg);
    ck_assert(again.model.params[0] == 42.0f);
    ac_model_dir_free(&again);
    ac_model_dir_free(&md);

    /* Python reads the weights with json + struct only. */
    if (have_python3()) {
        char cmd[1000];
        snprintf(cmd, sizeof cmd,
                 "python3 tests/check_safetensors.py %s/model.safetensors shape:embed.weight=12x16 "
                 "shape:head.weight=2x16 shape:layers.1.ffn.fc1.weight=32x16 embed.weight:0=42 "
                 "layers.1.ln2.weight:3=%.9g >/dev/null",
                 dir, (double)s.model.params[s.model.table[ac_model_find_tensor(&s.model, "layers.1.ln2.weight")].offset + 3]);
        ck_assert_int_eq(system(cmd), 0);
    } else {
        printf("SKIP test_modeldir_round_trip python check: python3 not found\n");
    }
    small_model_free(&s);
    tmpdir_remove(&d);
}
END_TEST

/* A pretrained (masked-LM) model: objective masked_lm, no classes, no
 * labels, mlm.bias in place of head.*, a vocabulary with <mask>; it saves
 * and loads like a classifier, and the files say what it is. */
START_TEST(test_modeldir_masked_lm)
{
    tmpdir d;
    tmpdir_make(&d);
    char vpath[400], dir[300];
    join(vpath, sizeof vpath, d.path, "vocab-src.txt");
    FILE *f = fopen(vpath, "w");
    ck_assert_ptr_nonnull(f);
    fputs("<pad>\n<unk>\n<mask>\n", f);
    for (int i = 3; i < SMALL_V; i++)
        fprintf(f, "w%d\n", i);
    ck_assert_int_eq(fclose(f), 0);
    small_model s;
    ac_err err;
    ac_config_defaults(&s.cfg);
    s.cfg.model.vocab_size = SMALL_V;
    s.cfg.model.max_len = 8;
    s.cfg.model.d_model = SMALL_D;
    s.cfg.model.n_heads = 2;
    s.cfg.model.d_ff = SMALL_FF;
    s.cfg.model.n_layers = SMALL_LAYERS;
    s.cfg.model.objective = AC_OBJECTIVE_MASKED_LM;
    s.cfg.model.n_classes = 0;
    s.cfg.model.wide_order = 0;
    s.cfg.model.wide_buckets = 0;
    s.cfg.model.ngram_order = 2;
    s.cfg.model.ngram_buckets = 16;
    ck_assert_msg(ac_vocab_load(&s.vocab, vpath, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(s.vocab.mask_id, 2);
    ck_assert_msg(ac_model_create(&s.model, &s.cfg.model, &err) == 0, "%s", err.msg);
    ck_assert_int_lt(ac_model_find_tensor(&s.model, "head.weight"), 0);
    int bias = ac_model_find_tensor(&s.model, "mlm.bias");
    ck_assert_int_ge(bias, 0);
    ck_assert_int_eq(s.model.table[bias].shape[0], SMALL_V);
    ac_model_init_weights(&s.model, 3);
    for (size_t i = 0; i < s.model.n_params; i++)
        s.model.params[i] += 0.001f * (float)(i % 97);
    join(dir, sizeof dir, d.path, "mlm");
    save_small(&s, dir);
    ac_model_dir md;
    ck_assert_msg(ac_model_dir_load(&md, dir, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(md.config.model.objective, AC_OBJECTIVE_MASKED_LM);
    ck_assert_int_eq(md.config.n_labels, 0);
    ck_assert_int_eq(md.vocab.mask_id, 2);
    ck_assert_uint_eq(md.model.n_params, s.model.n_params);
    ck_assert(memcmp(md.model.params, s.model.params, s.model.n_params * sizeof(float)) == 0);
    ac_model_dir_free(&md);
    char cpath[400];
    join(cpath, sizeof cpath, dir, "config.json");
    size_t len;
    char *text = (char *)slurp(cpath, &len);
    ck_assert_ptr_nonnull(strstr(text, "\"objective\": \"masked_lm\""));
    ck_assert_ptr_nonnull(strstr(text, "\"n_classes\": 0"));
    ck_assert_ptr_nonnull(strstr(text, "\"labels\": []"));
    free(text);
    if (have_python3()) {
        char cmd[700];
        snprintf(cmd, sizeof cmd,
                 "python3 tests/check_safetensors.py %s/model.safetensors shape:mlm.bias=%d "
                 "shape:embed.weight=%dx%d >/dev/null",
                 dir, SMALL_V, SMALL_V, SMALL_D);
        ck_assert_int_eq(system(cmd), 0);
    }
    /* a classifier config over the same files: the tensors do not fit */
    ac_config cls;
    ac_config_defaults(&cls);
    cls.model = s.cfg.model;
    cls.model.objective = AC_OBJECTIVE_CLASSIFICATION;
    cls.model.n_classes = 2;
    set_labels(&cls, TWO_LABELS, 2);
    ck_assert_int_eq(ac_model_dir_save(dir, &cls, &s.vocab, &s.model, NULL, NULL, NULL, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "config model section differs"));
    ac_config_free(&cls);
    small_model_free(&s);
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_modeldir_resume)
{
    tmpdir d;
    tmpdir_make(&d);
    small_model s;
    small_model_make(&s, d.path, SMALL_V, 3);
    size_t n = s.model.n_params;
    float *m1 = malloc(n * sizeof *m1), *m2 = malloc(n * sizeof *m2);
    for (size_t i = 0; i < n; i++) {
        m1[i] = (float)i * 1e-3f - 0.5f;
        m2[i] = (float)(i % 7) * 1e-5f;
    }
    ac_trainer_state st = {.step = 640, .epoch = 2, .batch_in_epoch = 15,
                           .seed = 0xFFFFFFFFFFFFFFFDULL, .best_metric = 0.8125, .best_step = 600,
                           .bad_evals = 1, .train_loss_sum = 12.345678901234567, .train_loss_count = 40};
    char dir[300];
    join(dir, sizeof dir, d.path, "m");
    ac_err err;
    ck_assert_msg(ac_model_dir_save(dir, &s.cfg, &s.vocab, &s.model, m1, m2, &st, &err) == 0, "%s", err.msg);
    ck_assert(file_exists(dir, "optimizer.safetensors"));
    ck_assert(file_exists(dir, "trainer_state.json"));
    /* The save of a stop (synced after its renames) writes the same bytes;
     * the weights and moments of a checkpoint record its step. */
    char quick[300];
    join(quick, sizeof quick, d.path, "quick");
    ck_assert_msg(ac_model_dir_save_sync_last(quick, &s.cfg, &s.vocab, &s.model, m1, m2, &st,
                                              &err) == 0,
                  "%s", err.msg);
    static const char *const NAMES[] = {"config.json", "vocab.txt", "trainer_state.json",
                                        "optimizer.safetensors", "model.safetensors"};
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) {
        char pa[400], pb[400];
        join(pa, sizeof pa, dir, NAMES[i]);
        join(pb, sizeof pb, quick, NAMES[i]);
        size_t la, lb;
        unsigned char *a = slurp(pa, &la), *b = slurp(pb, &lb);
        ck_assert_msg(la == lb && memcmp(a, b, la) == 0, "%s differs", NAMES[i]);
        free(a);
        free(b);
        if (i >= 3) {
            ac_safetensors sf;
            ck_assert_msg(ac_st_map(&sf, pa, &err) == 0, "%s", err.msg);
            int has_step = 0;
            for (int k = 0; k < sf.n_meta; k++)
                has_step |= strcmp(sf.meta_keys[k], "step") == 0 && strcmp(sf.meta_values[k], "640") == 0;
            ck_assert_msg(has_step, "%s: no __metadata__ step 640", NAMES[i]);
            ac_st_free(&sf);
        }
    }
    int completed = -1;
    ck_assert_msg(ac_checkpoint_recover(quick, &completed, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(completed, 0);

    float *r1 = calloc(n, sizeof *r1), *r2 = calloc(n, sizeof *r2);
    ac_trainer_state back;
    memset(&back, 0, sizeof back);
    ck_assert_msg(ac_model_dir_load_resume(dir, &s.model, r1, r2, &back, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(memcmp(m1, r1, n * sizeof *m1), 0);
    ck_assert_int_eq(memcmp(m2, r2, n * sizeof *m2), 0);
    ck_assert(back.seed == st.seed);
    ck_assert_int_eq(back.step, st.step);
    ck_assert_int_eq(back.epoch, st.epoch);
    ck_assert_int_eq(back.batch_in_epoch, st.batch_in_epoch);
    ck_assert(back.best_metric == st.best_metric);
    ck_assert_int_eq(back.best_step, st.best_step);
    ck_assert_int_eq(back.bad_evals, st.bad_evals);
    ck_assert(back.train_loss_sum == st.train_loss_sum);
    ck_assert_int_eq(back.train_loss_count, st.train_loss_count);

    /* optimizer.safetensors checked like the weights */
    char opath[400];
    join(opath, sizeof opath, dir, "optimizer.safetensors");
    ac_safetensors osf;
    ck_assert_msg(ac_st_load(&osf, opath, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(osf.n, 2 * s.model.n_tensors);
    ck_assert_ptr_nonnull(ac_st_find(&osf, "m1.embed.weight"));
    ck_assert_ptr_nonnull(ac_st_find(&osf, "m2.head.bias"));
    ac_st_entry *e = calloc((size_t)osf.n + 1, sizeof *e);
    for (int i = 0; i < osf.n; i++) {
        e[i].name = osf.tensors[i].name;
        e[i].ndim = osf.tensors[i].ndim;
        memcpy(e[i].shape, osf.tensors[i].shape, sizeof e[i].shape);
        e[i].data = ac_st_f32(&osf, &osf.tensors[i]);
    }
    /* missing m2.embed.ngram.weight (the last tensor) */
    ck_assert_msg(ac_st_save(opath, e, osf.n - 1, NULL, 0, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(ac_model_dir_load_resume(dir, &s.model, r1, r2, &back, &err), -1);
    ck_assert_msg(strstr(err.msg, "optimizer.safetensors: tensor \"m2.embed.ngram.weight\" is missing"), "%s", err.msg);
    /* an extra tensor */
    e[osf.n].name = "m3.head.bias";
    e[osf.n].ndim = 1;
    e[osf.n].shape[0] = 2;
    e[osf.n].data = m1;
    ck_assert_msg(ac_st_save(opath, e, osf.n + 1, NULL, 0, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(ac_model_dir_load_resume(dir, &s.model, r1, r2, &back, &err), -1);
    ck_assert_msg(strstr(err.msg, "optimizer.safetensors: unexpected tensor \"m3.head.bias\""), "%s", err.msg);
    free(e);
    ac_st_free(&osf);

    /* A save without resume state removes the stale resume files. */
    save_small(&s, dir);
    ck_assert(!file_exists(dir, "optimizer.safetensors"));
    ck_assert(!file_exists(dir, "trainer_state.json"));
    ck_assert_int_eq(ac_model_dir_load_resume(dir, &s.model, r1, r2, &back, &err), -1);
    ck_assert_msg(strstr(err.msg, "optimizer.safetensors: cannot open"), "%s", err.msg);
    /* Half of the resume state is refused. */
    ck_assert_int_eq(ac_model_dir_save(dir, &s.cfg, &s.vocab, &s.model, m1, NULL, &st, &err), -1);

    free(m1);
    free(m2);
    free(r1);
    free(r2);
    small_model_free(&s);
    tmpdir_remove(&d);
}
END_TEST

/* Damage one file of a saved folder; the load must fail naming that file. */
typedef struct {
    const char *file;     /* file to change */
    const char *old_text; /* replaced (NULL: special action below) */
    const char *new_text;
    const char *want;
} dir_case;

static const dir_case DIR_CASES[] = {
    {"vocab.txt", NULL, "extra-line", "vocab.txt: 13 tokens, but config.json says model.vocab_size 12"},
    {"config.json", "\"labels\": [\"negative\", \"positive\"]", "\"labels\": [\"a\", \"b\", \"c\"]",
     "config.json: labels: 3 names but model.n_classes is 2"},
    {"config.json", "    \"d_ff\": 32,\n", "", "config.json: model.d_ff: missing required key"},
    {"config.json", "\"d_ff\": 32", "\"d_ff\": 64",
     "model.safetensors: tensor \"layers.0.ffn.fc1.weight\": shape [32, 16], expected [64, 16] (from config.json)"},
    {"config.json", "\"pooling\": \"mean\"", "\"pooling\": \"cls\"", "vocab.txt: no <cls> token"},
    {"config.json", "\"n_layers\": 2", "\"n_layers\": 1",
     "model.safetensors: unexpected tensor \"layers.1.attn.q.weight\""},
    {"model.safetensors", "\"shape\":[2,16]", "\"shape\":[16,2]",
     "model.safetensors: tensor \"head.weight\": shape [16, 2], expected [2, 16]"},
    {"model.safetensors", "\"head.bias\":{\"dtype\":\"F32\"", "\"head.bias\":{\"dtype\":\"I32\"",
     "model.safetensors: tensor \"head.bias\": dtype I32, expected F32"},
    {"model.safetensors", NULL, "drop:layers.1.ln2.bias", "model.safetensors: tensor \"layers.1.ln2.bias\" is missing"},
    {"model.safetensors", NULL, "add:extra.weight", "model.safetensors: unexpected tensor \"extra.weight\""},
    {"model.safetensors", NULL, "remove", "model.safetensors: cannot open: No such file"},
    {"vocab.txt", NULL, "remove", "vocab.txt"},
    {"config.json", NULL, "remove", "config.json: cannot open: No such file"},
};

/* Rewrites a safetensors file without tensor `drop` or with an extra tensor `add`. */
static void rewrite_tensors(const char *path, const char *drop, const char *add)
{
    ac_safetensors st;
    ac_err err;
    ck_assert_msg(ac_st_load(&st, path, &err) == 0, "%s", err.msg);
    ac_st_entry *e = calloc((size_t)st.n + 1, sizeof *e);
    int n = 0;
    static const float extra[3] = {1, 2, 3};
    for (int i = 0; i < st.n; i++) {
        if (drop && strcmp(st.tensors[i].name, drop) == 0)
            continue;
        e[n].name = st.tensors[i].name;
        e[n].ndim = st.tensors[i].ndim;
        memcpy(e[n].shape, st.tensors[i].shape, sizeof e[n].shape);
        e[n].data = ac_st_f32(&st, &st.tensors[i]);
        n++;
    }
    ck_assert_int_eq(n, drop ? st.n - 1 : st.n);
    if (add) {
        e[n] = (ac_st_entry){.name = add, .ndim = 1, .shape = {3}, .data = extra};
        n++;
    }
    ck_assert_msg(ac_st_save(path, e, n, NULL, 0, &err) == 0, "%s", err.msg);
    free(e);
    ac_st_free(&st);
}

START_TEST(test_modeldir_load_errors)
{
    const dir_case *c = &DIR_CASES[_i];
    tmpdir d;
    tmpdir_make(&d);
    small_model s;
    small_model_make(&s, d.path, SMALL_V, 5);
    char dir[300], path[400];
    join(dir, sizeof dir, d.path, "m");
    save_small(&s, dir);
    join(path, sizeof path, dir, c->file);
    if (c->old_text) {
        size_t len;
        char *text = (char *)slurp(path, &len);
        if (strcmp(c->file, "model.safetensors") == 0) {
            st_parts p;
            split_file(&p, path);
            char *h = replace_first(p.header, c->old_text, c->new_text);
            assemble(path, h, p.data, p.data_len);
            free(h);
            free_parts(&p);
        } else {
            char *changed = replace_first(text, c->old_text, c->new_text);
            spit(path, changed, strlen(changed));
            free(changed);
        }
        free(text);
    } else if (strcmp(c->new_text, "remove") == 0) {
        ck_assert_int_eq(unlink(path), 0);
    } else if (strncmp(c->new_text, "drop:", 5) == 0) {
        rewrite_tensors(path, c->new_text + 5, NULL);
    } else if (strncmp(c->new_text, "add:", 4) == 0) {
        rewrite_tensors(path, NULL, c->new_text + 4);
    } else {
        FILE *f = fopen(path, "a");
        fprintf(f, "%s\n", c->new_text);
        fclose(f);
    }
    ac_model_dir md;
    ac_err err = {{0}};
    ck_assert_int_eq(ac_model_dir_load(&md, dir, &err), -1);
    ck_assert_msg(strstr(err.msg, c->want) != NULL, "expected \"%s\" in: %s", c->want, err.msg);
    ck_assert_msg(strstr(err.msg, dir) != NULL, "message does not name the folder: %s", err.msg);
    ac_model_dir_free(&md); /* harmless after a failed load */
    small_model_free(&s);
    tmpdir_remove(&d);
}
END_TEST

/* Every safetensors rejection again, now on a copy of a real model file and
 * through the model loader. */
static const header_case REAL_CASES[] = {
    {"\"F32\"", "\"F3X\"", "tensor \"embed.weight\": unknown dtype \"F3X\""},
    {"\"format\":\"pt\"", "\"format\":\"\xff\"", "not valid UTF-8"},
    {"\"embed.weight\":{", "\"embed.weight\":[{", "not valid JSON"},
    {"{\"__metadata__\"", "[\"__metadata__\"", "does not start with '{'"},
    {"\"dtype\":\"F32\",", "", "tensor \"embed.weight\": missing \"dtype\""},
    {"\"dtype\":\"F32\",", "\"dtype\":\"F32\",\"x\":0,", "tensor \"embed.weight\": unknown key \"x\""},
    {"\"embed.weight\":{\"dtype\":\"F32\",\"shape\":[12,16],\"data_offsets\":[0,768]}", "\"embed.weight\":7",
     "tensor \"embed.weight\": entry must be an object"},
    {"\"shape\":[12,16]", "\"shape\":[-12,16]", "tensor \"embed.weight\": shape[0] must be a non-negative integer"},
    {"\"shape\":[12,16]", "\"shape\":[12,17]", "tensor \"embed.weight\": shape x F32 = 816 bytes but data_offsets span 768"},
    {"\"shape\":[12,16]", "\"shape\":[1,1,1,1,1,1,1,12,16]", "tensor \"embed.weight\": shape has 9 dimensions"},
    {"\"shape\":[12,16]", "\"shape\":[4294967296,4294967296,4294967296]", "tensor \"embed.weight\": shape size overflows"},
    {"[0,768]", "[4,772]", "tensor \"embed.weight\": data_offsets begin 4, expected 0"},
    {"[768,832]", "[764,828]", "tensor \"embed.norm.weight\": data_offsets begin 764, expected 768 (overlaps"},
    {"[768,832]", "[99768,99832]", "tensor \"embed.norm.weight\": data_offsets [99768, 99832] out of bounds"},
    {"\"embed.norm.weight\"", "\"embed.weight\"", "duplicate tensor \"embed.weight\""},
};

START_TEST(test_modeldir_corrupt_weights)
{
    const header_case *c = &REAL_CASES[_i];
    tmpdir d;
    tmpdir_make(&d);
    small_model s;
    small_model_make(&s, d.path, SMALL_V, 5);
    char dir[300], path[400];
    join(dir, sizeof dir, d.path, "m");
    save_small(&s, dir);
    join(path, sizeof path, dir, "model.safetensors");
    st_parts p;
    split_file(&p, path);
    char *h = replace_first(p.header, c->old_text, c->new_text);
    assemble(path, h, p.data, p.data_len);
    expect_load_error(path, c->want);
    ac_model_dir md;
    ac_err err = {{0}};
    ck_assert_int_eq(ac_model_dir_load(&md, dir, &err), -1);
    ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, c->want), "%s", err.msg);
    free(h);
    free_parts(&p);
    small_model_free(&s);
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_modeldir_corrupt_framing)
{
    tmpdir d;
    tmpdir_make(&d);
    small_model s;
    small_model_make(&s, d.path, SMALL_V, 5);
    char dir[300], path[400];
    join(dir, sizeof dir, d.path, "m");
    save_small(&s, dir);
    join(path, sizeof path, dir, "model.safetensors");
    size_t len;
    unsigned char *file = slurp(path, &len);
    unsigned char *copy = malloc(len + 8);
    const struct { int kind; const char *want; } cases[] = {
        {0, "7 bytes: too short"},
        {1, "exceeds the 100000000-byte limit"},
        {2, "runs past the end of the file"},
        {3, "4 trailing bytes after the last tensor"},
        {4, "out of bounds"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(copy, file, len);
        size_t n = len;
        uint64_t hl = 0;
        switch (cases[i].kind) {
        case 0: n = 7; break;
        case 1: hl = AC_ST_MAX_HEADER + 8; break;
        case 2: hl = len; break;
        case 3: memset(copy + len, 0, 4); n = len + 4; break;
        default: n = len - 4; break;
        }
        if (hl)
            for (int k = 0; k < 8; k++)
                copy[k] = (unsigned char)(hl >> (8 * k));
        spit(path, copy, n);
        expect_load_error(path, cases[i].want);
        ac_model_dir md;
        ac_err err = {{0}};
        ck_assert_int_eq(ac_model_dir_load(&md, dir, &err), -1);
        ck_assert_msg(strstr(err.msg, path) && strstr(err.msg, cases[i].want), "%s", err.msg);
    }
    free(copy);
    free(file);
    small_model_free(&s);
    tmpdir_remove(&d);
}
END_TEST

/* A save that runs out of room halfway (RLIMIT_FSIZE in a child) leaves the
 * previous model loadable and unchanged, and no temporary file behind. */
START_TEST(test_modeldir_save_fails_halfway)
{
    tmpdir d;
    tmpdir_make(&d);
    small_model old_model;
    small_model_make(&old_model, d.path, SMALL_V, 11);
    char dir[300], cfg_path[400];
    join(dir, sizeof dir, d.path, "m");
    save_small(&old_model, dir);
    join(cfg_path, sizeof cfg_path, dir, "config.json");
    size_t cfg_len0;
    unsigned char *cfg0 = slurp(cfg_path, &cfg_len0);

    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        small_model big; /* 4000 x 16 embedding: 256 kB of weights */
        small_model_make(&big, d.path, 4000, 12);
        big.cfg.model.d_ff = SMALL_FF; /* a different config too */
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim = {65536, 65536};
        setrlimit(RLIMIT_FSIZE, &lim);
        ac_err err = {{0}};
        int rc = ac_model_dir_save(dir, &big.cfg, &big.vocab, &big.model, NULL, NULL, NULL, &err);
        ssize_t w = write(fds[1], err.msg, strlen(err.msg) + 1);
        (void)w;
        _exit(rc == -1 ? 0 : 1);
    }
    close(fds[1]);
    char msg[AC_ERR_LEN] = {0};
    ssize_t got = read(fds[0], msg, sizeof msg - 1);
    close(fds[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "save did not fail: %s", msg);
    ck_assert_int_gt(got, 0);
    ck_assert_msg(strstr(msg, "model.safetensors: write failed: File too large"), "%s", msg);

    ac_model_dir md;
    ac_err err;
    ck_assert_msg(ac_model_dir_load(&md, dir, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(md.vocab.size, SMALL_V);
    ck_assert_int_eq(memcmp(md.model.params, old_model.model.params, old_model.model.n_params * sizeof(float)), 0);
    ac_model_dir_free(&md);
    size_t cfg_len1;
    unsigned char *cfg1 = slurp(cfg_path, &cfg_len1);
    ck_assert_uint_eq(cfg_len0, cfg_len1);
    ck_assert_int_eq(memcmp(cfg0, cfg1, cfg_len0), 0);
    ck_assert_int_eq(count_temp_files(dir), 0);
    free(cfg0);
    free(cfg1);
    small_model_free(&old_model);
    tmpdir_remove(&d);
}
END_TEST

START_TEST(test_modeldir_save_rejects_mismatch)
{
    tmpdir d;
    tmpdir_make(&d);
    small_model s;
    small_model_make(&s, d.path, SMALL_V, 5);
    char dir[300];
    join(dir, sizeof dir, d.path, "m");
    ac_err err;
    s.cfg.model.vocab_size = SMALL_V + 1;
    ck_assert_int_eq(ac_model_dir_save(dir, &s.cfg, &s.vocab, &s.model, NULL, NULL, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "config model section differs"), "%s", err.msg);
    s.cfg.model.vocab_size = SMALL_V;
    set_labels(&s.cfg, TWO_LABELS, 1);
    ck_assert_int_eq(ac_model_dir_save(dir, &s.cfg, &s.vocab, &s.model, NULL, NULL, NULL, &err), -1);
    ck_assert_msg(strstr(err.msg, "1 labels but model.n_classes is 2"), "%s", err.msg);
    ck_assert_int_ne(access(dir, F_OK), 0); /* nothing created */
    small_model_free(&s);
    tmpdir_remove(&d);
}
END_TEST

/* ------------------------------------------------------------------ runner */


/* A prefixed message ends where the old one ended, whatever the buffer held
 * before. Regression: the end was not written, so the bytes after it in an
 * uninitialised ac_err (a teacher's load error) came out as garbage. */
START_TEST(test_err_prefix_ends_the_message)
{
    ac_err err;
    memset(err.msg, 'x', sizeof err.msg);
    ac_err_set(&err, "short");
    ck_assert_int_eq(ac_err_prefix(&err, "teacher %d", 2), -1);
    ck_assert_str_eq(err.msg, "teacher 2: short");
    char longer[AC_ERR_LEN + 50];
    memset(longer, 'y', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    ac_err_set(&err, "%s", longer);
    ac_err_prefix(&err, "p");
    ck_assert_uint_eq(strlen(err.msg), AC_ERR_LEN - 1);
    ck_assert(strncmp(err.msg, "p: yyy", 6) == 0);
}
END_TEST

/* A message quoting a name from a file stays one line. Regression: a
 * safetensors dtype or a config.json key holding a newline was quoted as it
 * was, and the error spanned two lines (found by fuzz_quantized). */
START_TEST(test_err_is_one_line)
{
    ac_err err;
    ac_err_set(&err, "tensor \"%s\": unknown dtype \"%s\"", "a\nb", "\001\n2\r\t");
    ck_assert_str_eq(err.msg, "tensor \"a?b\": unknown dtype \"??2??\"");
    ac_err_prefix(&err, "file\n%s", "x");
    ck_assert_ptr_null(strchr(err.msg, '\n'));
    ck_assert(strncmp(err.msg, "file?x: tensor", 14) == 0);
}
END_TEST

static Suite *io_suite(void)
{
    Suite *s = suite_create("io");
    TCase *tc = tcase_create("safetensors");
    tcase_add_test(tc, test_config_setting);
    tcase_add_test(tc, test_st_round_trip);
    tcase_add_test(tc, test_st_any_header_order);
    tcase_add_test(tc, test_st_other_dtypes);
    tcase_add_loop_test(tc, test_st_corrupt_header, 0,
                        (int)(sizeof HEADER_CASES / sizeof HEADER_CASES[0]));
    tcase_add_test(tc, test_st_corrupt_framing);
    tcase_add_test(tc, test_st_missing_file);
    tcase_add_test(tc, test_st_save_rejects_bad_entries);
    tcase_add_test(tc, test_st_save_fails_halfway);
    tcase_add_test(tc, test_st_python_interop);
    suite_add_tcase(s, tc);

    TCase *tcfg = tcase_create("config");
    tcase_add_test(tcfg, test_config_round_trip);
    tcase_add_test(tcfg, test_config_presets);
    tcase_add_loop_test(tcfg, test_config_errors, 0,
                        (int)(sizeof CONFIG_CASES / sizeof CONFIG_CASES[0]));
    tcase_add_test(tcfg, test_config_missing_keys);
    tcase_add_test(tcfg, test_config_masked_lm);
    tcase_add_test(tcfg, test_config_of_version_0_1_loads);
    tcase_add_test(tcfg, test_config_float_rounding);
    tcase_add_test(tcfg, test_config_seed_near_2_53);
    tcase_add_test(tcfg, test_trainer_state_round_trip);
    suite_add_tcase(s, tcfg);

    TCase *tm = tcase_create("modeldir");
    tcase_add_test(tm, test_modeldir_round_trip);
    tcase_add_test(tm, test_modeldir_resume);
    tcase_add_test(tm, test_modeldir_masked_lm);
    tcase_add_loop_test(tm, test_modeldir_load_errors, 0, (int)(sizeof DIR_CASES / sizeof DIR_CASES[0]));
    tcase_add_loop_test(tm, test_modeldir_corrupt_weights, 0,
                        (int)(sizeof REAL_CASES / sizeof REAL_CASES[0]));
    tcase_add_test(tm, test_modeldir_corrupt_framing);
    tcase_add_test(tm, test_modeldir_save_fails_halfway);
    tcase_add_test(tm, test_modeldir_save_rejects_mismatch);
    suite_add_tcase(s, tm);

    TCase *tf = tcase_create("files");
    tcase_add_test(tf, test_err_prefix_ends_the_message);
    tcase_add_test(tf, test_err_is_one_line);
    tcase_add_test(tf, test_write_file_atomic);
    tcase_add_test(tf, test_remove_stale_temps);
    tcase_add_test(tf, test_sha256);
    suite_add_tcase(s, tf);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(io_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
}
