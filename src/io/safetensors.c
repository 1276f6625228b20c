/* safetensors reader and writer.
 * Layout: u64 little-endian header length N, N bytes of UTF-8 JSON mapping
 * tensor name -> {"dtype", "shape", "data_offsets": [begin, end]} plus an
 * optional "__metadata__" (string -> string), then the data section. The
 * checks follow the reference library (huggingface/safetensors). */
#include "attnctl/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <utf8proc.h>

#define MAX_EXACT_INT 9007199254740992.0 /* 2^53: larger JSON numbers are not exact in a double */
#define IO_CHUNK ((size_t)1 << 30)

typedef struct {
    const char *name;
    unsigned bits; /* element size in bits */
} dtype_info;

/* The reference library's dtypes (sub-byte floats included). */
static const dtype_info DTYPES[] = {
    {"BOOL", 8},     {"U8", 8},       {"I8", 8},       {"F8_E5M2", 8}, {"F8_E4M3", 8},
    {"F8_E8M0", 8},  {"I16", 16},     {"U16", 16},     {"F16", 16},    {"BF16", 16},
    {"I32", 32},     {"U32", 32},     {"F32", 32},     {"F64", 64},    {"I64", 64},
    {"U64", 64},     {"C64", 64},     {"F4", 4},       {"F6_E2M3", 6}, {"F6_E3M2", 6},
};

static const dtype_info *dtype_find(const char *s)
{
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (strcmp(DTYPES[i].name, s) == 0)
            return &DTYPES[i];
    return NULL;
}

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    return first == 1;
}

static void swap_bytes4(unsigned char *p, size_t n_values)
{
    for (size_t i = 0; i < n_values; i++, p += 4) {
        unsigned char a = p[0], b = p[1];
        p[0] = p[3];
        p[1] = p[2];
        p[2] = b;
        p[3] = a;
    }
}

static char *dup_string(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

void ac_st_free(ac_safetensors *st)
{
    if (!st)
        return;
    for (int i = 0; i < st->n; i++)
        free(st->tensors[i].name);
    free(st->tensors);
    if (st->mapping)
        munmap(st->mapping, st->mapping_len);
    else
        free(st->data);
    for (int i = 0; i < st->n_meta; i++) {
        free(st->meta_keys[i]);
        free(st->meta_values[i]);
    }
    free(st->meta_keys);
    free(st->meta_values);
    memset(st, 0, sizeof *st);
}

const ac_st_tensor *ac_st_find(const ac_safetensors *st, const char *name)
{
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->tensors[i].name, name) == 0)
            return &st->tensors[i];
    return NULL;
}

const float *ac_st_f32(const ac_safetensors *st, const ac_st_tensor *t)
{
    if (!t || strcmp(t->dtype, "F32") != 0 || t->begin % 4 != 0 || !st->data)
        return NULL;
    const unsigned char *p = st->data + t->begin;
    if ((uintptr_t)p % _Alignof(float) != 0)
        return NULL;
    return (const float *)(const void *)p;
}

/* A JSON number that is a non-negative integer exactly representable. */
static int json_u64(const cJSON *it, uint64_t *out)
{
    if (!cJSON_IsNumber(it))
        return -1;
    double d = it->valuedouble;
    if (!(d >= 0.0) || d > MAX_EXACT_INT || (double)(uint64_t)d != d)
        return -1;
    *out = (uint64_t)d;
    return 0;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    const ac_st_tensor *x = *(const ac_st_tensor *const *)a, *y = *(const ac_st_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static int cmp_tensor_offsets(const void *a, const void *b)
{
    const ac_st_tensor *x = *(const ac_st_tensor *const *)a, *y = *(const ac_st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

static int parse_metadata(ac_safetensors *st, const cJSON *meta, const char *name, ac_err *err)
{
    if (cJSON_IsNull(meta))
        return 0;
    if (!cJSON_IsObject(meta))
        return ac_err_set(err, "%s: __metadata__: must be an object of strings", name);
    int n = cJSON_GetArraySize(meta);
    st->meta_keys = calloc((size_t)n + 1, sizeof *st->meta_keys);
    st->meta_values = calloc((size_t)n + 1, sizeof *st->meta_values);
    if (!st->meta_keys || !st->meta_values)
        return ac_err_set(err, "%s: out of memory", name);
    for (const cJSON *it = meta->child; it; it = it->next) {
        if (!cJSON_IsString(it))
            return ac_err_set(err, "%s: __metadata__.%.100s: must be a string", name, it->string);
        for (int j = 0; j < st->n_meta; j++)
            if (strcmp(st->meta_keys[j], it->string) == 0)
                return ac_err_set(err, "%s: __metadata__: duplicate key \"%.100s\"", name,
                                  it->string);
        st->meta_keys[st->n_meta] = dup_string(it->string);
        st->meta_values[st->n_meta] = dup_string(it->valuestring);
        st->n_meta++;
        if (!st->meta_keys[st->n_meta - 1] || !st->meta_values[st->n_meta - 1])
            return ac_err_set(err, "%s: out of memory", name);
    }
    return 0;
}

static int parse_tensor(ac_st_tensor *t, const cJSON *entry, uint64_t data_len, const char *name,
                        ac_err *err)
{
    const char *tn = entry->string;
    if (!cJSON_IsObject(entry))
        return ac_err_set(err, "%s: tensor \"%.100s\": entry must be an object", name, tn);
    const cJSON *dtype = NULL, *shape = NULL, *offsets = NULL;
    for (const cJSON *it = entry->child; it; it = it->next) {
        const cJSON **slot = strcmp(it->string, "dtype") == 0          ? &dtype
                             : strcmp(it->string, "shape") == 0        ? &shape
                             : strcmp(it->string, "data_offsets") == 0 ? &offsets
                                                                       : NULL;
        if (!slot)
            return ac_err_set(err, "%s: tensor \"%.100s\": unknown key \"%.60s\"", name, tn,
                              it->string);
        if (*slot)
            return ac_err_set(err, "%s: tensor \"%.100s\": duplicate key \"%s\"", name, tn,
                              it->string);
        *slot = it;
    }
    if (!dtype)
        return ac_err_set(err, "%s: tensor \"%.100s\": missing \"dtype\"", name, tn);
    if (!shape)
        return ac_err_set(err, "%s: tensor \"%.100s\": missing \"shape\"", name, tn);
    if (!offsets)
        return ac_err_set(err, "%s: tensor \"%.100s\": missing \"data_offsets\"", name, tn);

    if (!cJSON_IsString(dtype))
        return ac_err_set(err, "%s: tensor \"%.100s\": dtype must be a string", name, tn);
    const dtype_info *dt = dtype_find(dtype->valuestring);
    if (!dt)
        return ac_err_set(err, "%s: tensor \"%.100s\": unknown dtype \"%.20s\"", name, tn,
                          dtype->valuestring);
    snprintf(t->dtype, sizeof t->dtype, "%s", dt->name);

    if (!cJSON_IsArray(shape))
        return ac_err_set(err, "%s: tensor \"%.100s\": shape must be an array", name, tn);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > AC_ST_MAX_DIMS)
        return ac_err_set(err, "%s: tensor \"%.100s\": shape has %d dimensions (at most %d)", name,
                          tn, ndim, AC_ST_MAX_DIMS);
    t->ndim = ndim;
    uint64_t numel = 1;
    int overflow = 0;
    int k = 0;
    for (const cJSON *it = shape->child; it; it = it->next, k++) {
        uint64_t dim;
        if (json_u64(it, &dim) != 0)
            return ac_err_set(err, "%s: tensor \"%.100s\": shape[%d] must be a non-negative integer",
                              name, tn, k);
        t->shape[k] = (int64_t)dim;
        if (__builtin_mul_overflow(numel, dim, &numel))
            overflow = 1;
    }
    uint64_t bits = 0;
    if (overflow || __builtin_mul_overflow(numel, (uint64_t)dt->bits, &bits))
        return ac_err_set(err, "%s: tensor \"%.100s\": shape size overflows", name, tn);
    if (bits % 8 != 0)
        return ac_err_set(err, "%s: tensor \"%.100s\": %s data does not fill whole bytes", name, tn,
                          dt->name);

    uint64_t begin, end;
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        json_u64(offsets->child, &begin) != 0 || json_u64(offsets->child->next, &end) != 0)
        return ac_err_set(err,
                          "%s: tensor \"%.100s\": data_offsets must be [begin, end], two "
                          "non-negative integers",
                          name, tn);
    if (end < begin)
        return ac_err_set(err, "%s: tensor \"%.100s\": data_offsets end %llu < begin %llu", name,
                          tn, (unsigned long long)end, (unsigned long long)begin);
    if (end > data_len)
        return ac_err_set(err,
                          "%s: tensor \"%.100s\": data_offsets [%llu, %llu] out of bounds (data "
                          "section is %llu bytes)",
                          name, tn, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)data_len);
    if (bits / 8 != end - begin)
        return ac_err_set(err,
                          "%s: tensor \"%.100s\": shape x %s = %llu bytes but data_offsets span "
                          "%llu bytes",
                          name, tn, dt->name, (unsigned long long)(bits / 8),
                          (unsigned long long)(end - begin));
    t->begin = (size_t)begin;
    t->end = (size_t)end;
    return 0;
}

/* Header checks shared by the file and buffer readers; fills everything but data. */
static int parse_header(ac_safetensors *st, const unsigned char *hdr, size_t hlen,
                        uint64_t data_len, const char *name, ac_err *err)
{
    /* UTF-8 (the JSON text must be UTF-8; NUL would cut names short). */
    for (size_t pos = 0; pos < hlen;) {
        utf8proc_int32_t cp;
        size_t left = hlen - pos;
        utf8proc_ssize_t step = utf8proc_iterate(hdr + pos, left > 4 ? 4 : (utf8proc_ssize_t)left, &cp);
        if (step <= 0)
            return ac_err_set(err, "%s: header is not valid UTF-8 (byte %zu)", name, pos);
        if (cp == 0)
            return ac_err_set(err, "%s: header contains a NUL byte (byte %zu)", name, pos);
        pos += (size_t)step;
    }
    if (hlen == 0 || hdr[0] != '{')
        return ac_err_set(err, "%s: header does not start with '{'", name);

    const char *parse_end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)hdr, hlen, &parse_end, 0);
    if (!root) {
        size_t at = parse_end ? (size_t)(parse_end - (const char *)hdr) : 0;
        return ac_err_set(err, "%s: header is not valid JSON (near byte %zu of the header)", name,
                          at);
    }
    int rc = -1;
    for (const char *p = parse_end; p < (const char *)hdr + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            ac_err_set(err, "%s: header has extra text after the JSON object", name);
            goto done;
        }
    if (!cJSON_IsObject(root)) {
        ac_err_set(err, "%s: header is not a JSON object", name);
        goto done;
    }

    int n_entries = cJSON_GetArraySize(root);
    st->tensors = calloc((size_t)n_entries + 1, sizeof *st->tensors);
    if (!st->tensors) {
        ac_err_set(err, "%s: out of memory", name);
        goto done;
    }
    int seen_meta = 0;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (seen_meta++) {
                ac_err_set(err, "%s: duplicate \"__metadata__\"", name);
                goto done;
            }
            if (parse_metadata(st, it, name, err) != 0)
                goto done;
            continue;
        }
        ac_st_tensor *t = &st->tensors[st->n];
        t->name = dup_string(it->string);
        if (!t->name) {
            ac_err_set(err, "%s: out of memory", name);
            goto done;
        }
        st->n++;
        if (parse_tensor(t, it, data_len, name, err) != 0)
            goto done;
    }

    if (st->n > 0) {
        const ac_st_tensor **order = malloc((size_t)st->n * sizeof *order);
        if (!order) {
            ac_err_set(err, "%s: out of memory", name);
            goto done;
        }
        for (int i = 0; i < st->n; i++)
            order[i] = &st->tensors[i];
        /* cJSON keeps duplicate keys: sort by name to find them. */
        qsort(order, (size_t)st->n, sizeof *order, cmp_tensor_name);
        for (int i = 1; i < st->n; i++)
            if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
                ac_err_set(err, "%s: duplicate tensor \"%.100s\"", name, order[i]->name);
                free(order);
                goto done;
            }
        /* Offsets may come in any header order; sorted they must tile [0, data_len). */
        qsort(order, (size_t)st->n, sizeof *order, cmp_tensor_offsets);
        size_t expect = 0;
        for (int i = 0; i < st->n; i++) {
            if (order[i]->begin != expect) {
                ac_err_set(err,
                           "%s: tensor \"%.100s\": data_offsets begin %zu, expected %zu (%s)",
                           name, order[i]->name, order[i]->begin, expect,
                           order[i]->begin < expect ? "overlaps the previous tensor"
                                                    : "gap after the previous tensor");
                free(order);
                goto done;
            }
            expect = order[i]->end;
        }
        free(order);
        if (expect != data_len) {
            ac_err_set(err, "%s: %llu trailing bytes after the last tensor", name,
                       (unsigned long long)(data_len - expect));
            goto done;
        }
    } else if (data_len != 0) {
        ac_err_set(err, "%s: %llu trailing bytes after the header (no tensors)", name,
                   (unsigned long long)data_len);
        goto done;
    }
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

static uint64_t read_le64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

/* Checks the 8-byte prefix against the file size; returns the header length. */
static int check_prefix(uint64_t header_len, uint64_t file_len, const char *name, ac_err *err)
{
    if (header_len > AC_ST_MAX_HEADER)
        return ac_err_set(err, "%s: header length %llu exceeds the %llu-byte limit", name,
                          (unsigned long long)header_len, (unsigned long long)AC_ST_MAX_HEADER);
    if (header_len > file_len - 8)
        return ac_err_set(err, "%s: header length %llu runs past the end of the file (%llu bytes)",
                          name, (unsigned long long)header_len, (unsigned long long)file_len);
    return 0;
}

static void to_host_order(ac_safetensors *st)
{
    if (host_is_little_endian())
        return;
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->tensors[i].dtype, "U16") == 0)
            for (size_t k = st->tensors[i].begin; k + 1 < st->tensors[i].end; k += 2) {
                unsigned char t = st->data[k];
                st->data[k] = st->data[k + 1];
                st->data[k + 1] = t;
            }
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->tensors[i].dtype, "F32") == 0 || strcmp(st->tensors[i].dtype, "I32") == 0)
            swap_bytes4(st->data + st->tensors[i].begin, (st->tensors[i].end - st->tensors[i].begin) / 4);
}

int ac_st_parse(ac_safetensors *st, const unsigned char *buf, size_t len, const char *name,
                ac_err *err)
{
    memset(st, 0, sizeof *st);
    if (len < 8)
        return ac_err_set(err, "%s: %zu bytes: too short for a safetensors file (8-byte header length)",
                          name, len);
    uint64_t header_len = read_le64(buf);
    if (check_prefix(header_len, len, name, err) != 0)
        return -1;
    size_t data_len = len - 8 - (size_t)header_len;
    if (parse_header(st, buf + 8, (size_t)header_len, data_len, name, err) != 0) {
        ac_st_free(st);
        return -1;
    }
    /* A private, malloc-aligned copy: F32 access never depends on the caller's buffer. */
    st->data = malloc(data_len ? data_len : 1);
    if (!st->data) {
        ac_st_free(st);
        return ac_err_set(err, "%s: out of memory (%zu bytes)", name, data_len);
    }
    memcpy(st->data, buf + 8 + header_len, data_len);
    st->data_len = data_len;
    to_host_order(st);
    return 0;
}

static int read_exact(int fd, void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t r = read(fd, p, len > IO_CHUNK ? IO_CHUNK : len);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0) {
            errno = 0; /* end of file before the expected size */
            return -1;
        }
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

static int read_fail(const char *name, ac_err *err)
{
    if (errno == 0)
        return ac_err_set(err, "%s: file changed size while reading", name);
    return ac_err_set(err, "%s: read failed: %s", name, strerror(errno));
}

/* Opens a regular file of at least 8 bytes that fits in memory; returns the
 * descriptor (its length in *file_len) or -1 with err set. */
static int open_model_file(const char *path, uint64_t *file_len, ac_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ac_err_set(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    const char *problem = NULL;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return ac_err_set(err, "%s: cannot stat: %s", path, strerror(e));
    }
    *file_len = (uint64_t)sb.st_size;
    if (!S_ISREG(sb.st_mode))
        problem = "not a regular file";
    else if (*file_len < 8)
        problem = "too short for a safetensors file (8-byte header length)";
    else if (*file_len > SIZE_MAX)
        problem = "file too large for this machine";
    if (problem) {
        close(fd);
        if (S_ISREG(sb.st_mode) && *file_len < 8)
            return ac_err_set(err, "%s: %llu bytes: %s", path, (unsigned long long)*file_len,
                              problem);
        return ac_err_set(err, "%s: %s", path, problem);
    }
    return fd;
}

int ac_st_load(ac_safetensors *st, const char *path, ac_err *err)
{
    memset(st, 0, sizeof *st);
    uint64_t file_len;
    int fd = open_model_file(path, &file_len, err);
    if (fd < 0)
        return -1;
    unsigned char prefix[8];
    unsigned char *header = NULL;
    if (read_exact(fd, prefix, 8) != 0) {
        read_fail(path, err);
        goto fail;
    }
    uint64_t header_len = read_le64(prefix);
    if (check_prefix(header_len, file_len, path, err) != 0)
        goto fail;
    header = malloc(header_len ? (size_t)header_len : 1);
    if (!header) {
        ac_err_set(err, "%s: out of memory (header of %llu bytes)", path,
                   (unsigned long long)header_len);
        goto fail;
    }
    if (read_exact(fd, header, (size_t)header_len) != 0) {
        read_fail(path, err);
        goto fail;
    }
    size_t data_len = (size_t)(file_len - 8 - header_len);
    if (parse_header(st, header, (size_t)header_len, data_len, path, err) != 0)
        goto fail;
    free(header);
    header = NULL;
    st->data = malloc(data_len ? data_len : 1);
    if (!st->data) {
        ac_err_set(err, "%s: out of memory (%zu bytes of tensor data)", path, data_len);
        goto fail;
    }
    st->data_len = data_len;
    if (read_exact(fd, st->data, data_len) != 0) {
        read_fail(path, err);
        goto fail;
    }
    close(fd);
    to_host_order(st);
    return 0;
fail:
    free(header);
    close(fd);
    ac_st_free(st);
    return -1;
}

int ac_st_map(ac_safetensors *st, const char *path, ac_err *err)
{
    if (!host_is_little_endian())
        return ac_st_load(st, path, err);
    memset(st, 0, sizeof *st);
    uint64_t file_len;
    int fd = open_model_file(path, &file_len, err);
    if (fd < 0)
        return -1;
    /* Writable private pages: a model may train from the mapping (its
     * changes are its own; the file never changes). */
    unsigned char *base = mmap(NULL, (size_t)file_len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (base == MAP_FAILED)
        return ac_err_set(err, "%s: cannot map: %s", path, strerror(e));
    uint64_t header_len = read_le64(base);
    if (check_prefix(header_len, file_len, path, err) != 0) {
        munmap(base, (size_t)file_len);
        return -1;
    }
    if (header_len % sizeof(float) != 0) { /* unaligned data: read a copy instead */
        munmap(base, (size_t)file_len);
        return ac_st_load(st, path, err);
    }
    size_t data_len = (size_t)(file_len - 8 - header_len);
    if (parse_header(st, base + 8, (size_t)header_len, data_len, path, err) != 0) {
        munmap(base, (size_t)file_len);
        ac_st_free(st);
        return -1;
    }
    st->mapping = base;
    st->mapping_len = (size_t)file_len;
    st->data = base + 8 + header_len;
    st->data_len = data_len;
    return 0;
}

/* ------------------------------------------------------------------ writing */

static int cmp_cstr_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Bytes an element of the entry takes; 0 for a dtype the writer does not take. */
static unsigned entry_width(const ac_st_entry *e)
{
    if (!e->dtype || strcmp(e->dtype, "F32") == 0 || strcmp(e->dtype, "I32") == 0)
        return 4;
    if (strcmp(e->dtype, "U16") == 0)
        return 2;
    if (strcmp(e->dtype, "I8") == 0 || strcmp(e->dtype, "U8") == 0)
        return 1;
    return 0;
}

/* Names unique and not reserved; shapes sane; sizes without overflow. */
static int check_entries(const ac_st_entry *entries, int n, const char *const *meta_kv, int n_meta,
                         uint64_t *bytes, const char *path, ac_err *err)
{
    if (n < 0 || n_meta < 0 || (n > 0 && !entries) || (n_meta > 0 && !meta_kv))
        return ac_err_set(err, "%s: invalid tensor list", path);
    for (int i = 0; i < n; i++) {
        const ac_st_entry *e = &entries[i];
        if (!e->name)
            return ac_err_set(err, "%s: tensor %d has no name", path, i);
        if (strcmp(e->name, "__metadata__") == 0)
            return ac_err_set(err, "%s: \"__metadata__\" is reserved, not a tensor name", path);
        if (e->ndim < 0 || e->ndim > AC_ST_MAX_DIMS)
            return ac_err_set(err, "%s: tensor \"%.100s\": %d dimensions (0..%d allowed)", path,
                              e->name, e->ndim, AC_ST_MAX_DIMS);
        uint64_t numel = 1;
        for (int k = 0; k < e->ndim; k++) {
            if (e->shape[k] < 0 || (double)e->shape[k] > MAX_EXACT_INT ||
                __builtin_mul_overflow(numel, (uint64_t)e->shape[k], &numel))
                return ac_err_set(err, "%s: tensor \"%.100s\": bad shape[%d]", path, e->name, k);
        }
        const unsigned width = entry_width(e);
        if (!width)
            return ac_err_set(err, "%s: tensor \"%.100s\": cannot write dtype %.20s", path,
                              e->name, e->dtype);
        if (numel > SIZE_MAX / 4 || (numel > 0 && !(e->dtype ? e->bytes : (const void *)e->data)))
            return ac_err_set(err, "%s: tensor \"%.100s\": %s", path, e->name,
                              numel > SIZE_MAX / 4 ? "too large" : "no data");
        bytes[i] = numel * width;
    }
    for (int i = 0; i < 2 * n_meta; i++)
        if (!meta_kv[i])
            return ac_err_set(err, "%s: metadata entry %d is NULL", path, i / 2);
    int rc = 0;
    int n_sort = n > n_meta ? n : n_meta;
    const char **names = malloc(((size_t)n_sort + 1) * sizeof *names);
    if (!names)
        return ac_err_set(err, "%s: out of memory", path);
    for (int i = 0; i < n; i++)
        names[i] = entries[i].name;
    qsort(names, (size_t)n, sizeof *names, cmp_cstr_ptr);
    for (int i = 1; i < n && rc == 0; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            rc = ac_err_set(err, "%s: duplicate tensor name \"%.100s\"", path, names[i]);
    for (int i = 0; i < n_meta; i++)
        names[i] = meta_kv[2 * i];
    qsort(names, (size_t)n_meta, sizeof *names, cmp_cstr_ptr);
    for (int i = 1; i < n_meta && rc == 0; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            rc = ac_err_set(err, "%s: duplicate metadata key \"%.100s\"", path, names[i]);
    free(names);
    return rc;
}

static cJSON *raw_u64(uint64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
    return cJSON_CreateRaw(buf);
}

/* Header JSON: "__metadata__" first (as the reference writer does), then the
 * tensors in the given order. Integers are written as raw text so that they
 * never turn into exponent notation. */
static char *build_header(const ac_st_entry *entries, int n, const char *const *meta_kv,
                          int n_meta, const uint64_t *bytes)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    int ok = 1;
    if (n_meta > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        ok = meta != NULL;
        for (int i = 0; ok && i < n_meta; i++)
            ok = cJSON_AddStringToObject(meta, meta_kv[2 * i], meta_kv[2 * i + 1]) != NULL;
    }
    uint64_t offset = 0;
    for (int i = 0; ok && i < n; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON *shape = cJSON_CreateArray();
        cJSON *offs = cJSON_CreateArray();
        ok = t && shape && offs;
        if (ok) {
            cJSON_AddItemToObject(root, entries[i].name, t);
            ok = cJSON_AddStringToObject(t, "dtype", entries[i].dtype ? entries[i].dtype : "F32") !=
                 NULL;
            cJSON_AddItemToObject(t, "shape", shape);
            cJSON_AddItemToObject(t, "data_offsets", offs);
            for (int k = 0; ok && k < entries[i].ndim; k++) {
                cJSON *d = raw_u64((uint64_t)entries[i].shape[k]);
                ok = d != NULL;
                if (ok)
                    cJSON_AddItemToArray(shape, d);
            }
            cJSON *b = raw_u64(offset), *e = raw_u64(offset + bytes[i]);
            ok = ok && b && e;
            if (b)
                cJSON_AddItemToArray(offs, b);
            if (e)
                cJSON_AddItemToArray(offs, e);
        } else {
            cJSON_Delete(t);
            cJSON_Delete(shape);
            cJSON_Delete(offs);
        }
        offset += bytes[i];
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

int ac_st_write(ac_atomic_file *f, const ac_st_entry *entries, int n, const char *const *meta_kv,
                int n_meta, ac_err *err)
{
    uint64_t *bytes = malloc(((size_t)(n > 0 ? n : 0) + 1) * sizeof *bytes);
    if (!bytes)
        return ac_err_set(err, "%s: out of memory", f->path);
    if (check_entries(entries, n, meta_kv, n_meta, bytes, f->path, err) != 0) {
        free(bytes);
        return -1;
    }
    char *header = build_header(entries, n, meta_kv, n_meta, bytes);
    free(bytes);
    if (!header)
        return ac_err_set(err, "%s: out of memory building the header", f->path);
    size_t hlen = strlen(header);
    size_t padded = (hlen + 7) / 8 * 8; /* spaces up to a multiple of 8, as the reference does */
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++)
        prefix[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    static const char spaces[8] = "        ";
    int rc = ac_atomic_write(f, prefix, 8, err);
    if (rc == 0)
        rc = ac_atomic_write(f, header, hlen, err);
    if (rc == 0)
        rc = ac_atomic_write(f, spaces, padded - hlen, err);
    free(header);
    if (rc != 0)
        return -1;

    const int little = host_is_little_endian();
    enum { CHUNK = 4096 };
    unsigned char buf[CHUNK * 4];
    for (int i = 0; i < n; i++) {
        const unsigned width = entry_width(&entries[i]);
        const unsigned char *src = entries[i].dtype ? (const unsigned char *)entries[i].bytes
                                                    : (const unsigned char *)entries[i].data;
        size_t numel = 1;
        for (int k = 0; k < entries[i].ndim; k++)
            numel *= (size_t)entries[i].shape[k];
        if (little || width == 1) {
            if (numel && ac_atomic_write(f, src, numel * width, err) != 0)
                return -1;
            continue;
        }
        /* Big-endian host: swap through a small buffer. */
        for (size_t at = 0; at < numel; at += CHUNK) {
            size_t m = numel - at < CHUNK ? numel - at : CHUNK;
            memcpy(buf, src + at * width, m * width);
            if (width == 4)
                swap_bytes4(buf, m);
            else
                for (size_t k = 0; k < m; k++) {
                    unsigned char t = buf[2 * k];
                    buf[2 * k] = buf[2 * k + 1];
                    buf[2 * k + 1] = t;
                }
            if (ac_atomic_write(f, buf, m * width, err) != 0)
                return -1;
        }
    }
    return 0;
}

int ac_st_save(const char *path, const ac_st_entry *entries, int n, const char *const *meta_kv,
               int n_meta, ac_err *err)
{
    ac_atomic_file f;
    if (ac_atomic_begin(&f, path, err) != 0)
        return -1;
    if (ac_st_write(&f, entries, n, meta_kv, n_meta, err) != 0) {
        ac_atomic_abort(&f);
        return -1;
    }
    return ac_atomic_commit(&f, err);
}
