/* Quantized model directories: the "storage" object of config.json, and
 * model.safetensors with int8 matrices, 4-bit embeddings and the pruned
 * wide table (layout in attnctl/quant_io.h). */
#include "attnctl/quant_io.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#define STORAGE_KEY "storage"
#define STORAGE_FORMAT "quantized"
#define STORAGE_MATRICES "int8-row"
#define WIDE_PRESENT "head.wide.present"
#define WIDE_RANK "head.wide.rank"
#define WIDE_VALUES "head.wide.values"
#define WIDE_SCALES "head.wide.scales"
#define WIDE_TABLE "head.wide.weight"
#define EMBED_TABLE "embed.weight"
#define SCALE_SUFFIX ".scale"
#define MAX_CONFIG_BYTES ((size_t)16 << 20)

/* ------------------------------------------------------------ config.json */

static int storage_int(const cJSON *it, const char *name, const char *key, long lo, long hi,
                       long *out, ac_err *err)
{
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) ||
        it->valuedouble < (double)lo || it->valuedouble > (double)hi)
        return ac_err_set(err, "%s: storage.%s: must be an integer in %ld..%ld", name, key, lo,
                          hi);
    *out = (long)it->valuedouble;
    return 0;
}

static int parse_storage(ac_storage *s, const cJSON *obj, const char *name, ac_err *err)
{
    if (!cJSON_IsObject(obj))
        return ac_err_set(err, "%s: storage: must be an object", name);
    const cJSON *format = NULL, *version = NULL, *matrices = NULL, *rows = NULL, *group = NULL,
                *bits = NULL;
    for (const cJSON *it = obj->child; it; it = it->next) {
        const cJSON **slot = strcmp(it->string, "format") == 0       ? &format
                             : strcmp(it->string, "version") == 0    ? &version
                             : strcmp(it->string, "matrices") == 0   ? &matrices
                             : strcmp(it->string, "wide_rows") == 0  ? &rows
                             : strcmp(it->string, "wide_group") == 0 ? &group
                             : strcmp(it->string, "wide_bits") == 0  ? &bits
                                                                     : NULL;
        if (!slot)
            return ac_err_set(err,
                              "%s: storage.%.60s: unknown key (known: format, version, matrices, "
                              "wide_rows, wide_group, wide_bits)",
                              name, it->string);
        if (*slot)
            return ac_err_set(err, "%s: storage.%.60s: repeated key", name, it->string);
        *slot = it;
    }
    long v = 0;
    if (!version)
        return ac_err_set(err, "%s: storage.version: missing", name);
    if (storage_int(version, name, "version", 1, 1000000, &v, err) != 0)
        return -1;
    if (v < AC_STORAGE_VERSION)
        return ac_err_set(err,
                          "%s: storage.version %ld: an older quantized layout that this attnctl "
                          "no longer reads (it reads version %d); quantize the FP32 model again",
                          name, v, AC_STORAGE_VERSION);
    if (v > AC_STORAGE_VERSION)
        return ac_err_set(err,
                          "%s: storage.version %ld: written by a newer attnctl (this one reads "
                          "version %d); quantize the model again with this one",
                          name, v, AC_STORAGE_VERSION);
    if (!format || !cJSON_IsString(format) || strcmp(format->valuestring, STORAGE_FORMAT) != 0)
        return ac_err_set(err, "%s: storage.format: must be \"" STORAGE_FORMAT "\"", name);
    if (!matrices || !cJSON_IsString(matrices) ||
        strcmp(matrices->valuestring, STORAGE_MATRICES) != 0)
        return ac_err_set(err, "%s: storage.matrices: must be \"" STORAGE_MATRICES "\"", name);
    if (!rows)
        return ac_err_set(err, "%s: storage.wide_rows: missing", name);
    if (!group)
        return ac_err_set(err, "%s: storage.wide_group: missing", name);
    if (!bits)
        return ac_err_set(err, "%s: storage.wide_bits: missing", name);
    long k = 0, g = 0, b = 0;
    if (storage_int(rows, name, "wide_rows", 0, 1L << 30, &k, err) != 0 ||
        storage_int(group, name, "wide_group", 1, 1L << 30, &g, err) != 0 ||
        storage_int(bits, name, "wide_bits", 2, 8, &b, err) != 0)
        return -1;
    s->quantized = 1;
    s->wide_rows = (int)k;
    s->wide_group = (int)g;
    s->wide_bits = (int)b;
    return 0;
}

int ac_storage_split(ac_storage *s, char **rest, const char *json, size_t len, const char *name,
                     ac_err *err)
{
    memset(s, 0, sizeof *s);
    *rest = NULL;
    cJSON *root = cJSON_ParseWithLength(json, len);
    /* Not JSON, or no storage object: the configuration parser reports on the text as it is. */
    if (!cJSON_IsObject(root) || !cJSON_HasObjectItem(root, STORAGE_KEY)) {
        cJSON_Delete(root);
        return 0;
    }
    int rc = -1;
    cJSON *storage = cJSON_DetachItemFromObjectCaseSensitive(root, STORAGE_KEY);
    if (cJSON_HasObjectItem(root, STORAGE_KEY)) {
        ac_err_set(err, "%s: storage: repeated key", name);
        goto done;
    }
    if (parse_storage(s, storage, name, err) != 0)
        goto done;
    *rest = cJSON_PrintUnformatted(root);
    if (!*rest) {
        ac_err_set(err, "%s: out of memory", name);
        goto done;
    }
    rc = 0;
done:
    if (rc != 0)
        memset(s, 0, sizeof *s);
    cJSON_Delete(storage);
    cJSON_Delete(root);
    return rc;
}

/* ---------------------------------------------------------- the tensor list */

typedef enum { KIND_F32, KIND_I8_ROWS, KIND_Q4_ROWS, KIND_WIDE } tensor_kind;

static tensor_kind kind_of(const ac_param_info *p)
{
    if (strcmp(p->name, WIDE_TABLE) == 0)
        return KIND_WIDE;
    if (strcmp(p->name, EMBED_TABLE) == 0 && p->ndim == 2)
        return KIND_Q4_ROWS;
    if (p->ndim == 2 && strcmp(p->name, "head.weight") != 0)
        return KIND_I8_ROWS;
    return KIND_F32;
}

static int ceil_div(int a, int b) { return a / b + (a % b != 0); }

/* ---------------------------------------------------------------- reading */

static void shape_text(char *out, size_t n, int ndim, const int64_t *shape)
{
    size_t used = (size_t)snprintf(out, n, "[");
    for (int k = 0; k < ndim && used < n; k++)
        used += (size_t)snprintf(out + used, n - used, "%s%lld", k ? ", " : "", (long long)shape[k]);
    if (used < n)
        snprintf(out + used, n - used, "]");
}

/* The tensor `name`, present with this dtype and shape (ndim 1 or 2) and,
 * for 4-byte types, aligned; its data in *data. */
static int expect_tensor(const ac_safetensors *st, const char *name, const char *dtype, int ndim,
                         int64_t rows, int64_t cols, const void **data, const char *path,
                         ac_err *err)
{
    const ac_st_tensor *t = ac_st_find(st, name);
    if (!t)
        return ac_err_set(err, "%s: tensor \"%s\" is missing", path, name);
    if (strcmp(t->dtype, dtype) != 0)
        return ac_err_set(err, "%s: tensor \"%s\": dtype %s, expected %s", path, name, t->dtype,
                          dtype);
    const int64_t want[2] = {rows, cols};
    int same = t->ndim == ndim;
    for (int k = 0; same && k < ndim; k++)
        same = t->shape[k] == want[k];
    if (!same) {
        char got_s[96], want_s[64];
        shape_text(got_s, sizeof got_s, t->ndim, t->shape);
        shape_text(want_s, sizeof want_s, ndim, want);
        return ac_err_set(err, "%s: tensor \"%s\": shape %s, expected %s (from config.json)",
                          path, name, got_s, want_s);
    }
    const unsigned char *p = st->data + t->begin;
    const unsigned align = strcmp(dtype, "I8") == 0 || strcmp(dtype, "U8") == 0 ? 1 : 4;
    if ((uintptr_t)p % align != 0)
        return ac_err_set(err, "%s: tensor \"%s\": data not %u-byte aligned", path, name, align);
    *data = p;
    return 0;
}

static int check_scales(const float *scales, size_t n, const char *name, const char *path,
                        ac_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(scales[i]) || scales[i] < 0.0f)
            return ac_err_set(err, "%s: tensor \"%s\": element %zu is %g (scales are finite and >= 0)",
                              path, name, i, (double)scales[i]);
    return 0;
}

/* Every tensor of st is one the layout names (with the presence checks, this pins the set). */
static int check_no_extras(const ac_safetensors *st, const ac_model *m, const char *path,
                           ac_err *err)
{
    char base[AC_PARAM_NAME_LEN + 8];
    for (int i = 0; i < st->n; i++) {
        const char *tn = st->tensors[i].name;
        size_t len = strlen(tn), sl = strlen(SCALE_SUFFIX);
        int ok;
        if (strcmp(tn, WIDE_PRESENT) == 0 || strcmp(tn, WIDE_RANK) == 0 ||
            strcmp(tn, WIDE_VALUES) == 0 || strcmp(tn, WIDE_SCALES) == 0) {
            ok = ac_model_has_wide(&m->cfg);
        } else if (len > sl && strcmp(tn + len - sl, SCALE_SUFFIX) == 0 &&
                   len - sl < sizeof base) {
            snprintf(base, sizeof base, "%.*s", (int)(len - sl), tn);
            int k = ac_model_find_tensor(m, base);
            ok = k >= 0 && (kind_of(&m->table[k]) == KIND_I8_ROWS ||
                            kind_of(&m->table[k]) == KIND_Q4_ROWS);
        } else {
            int k = ac_model_find_tensor(m, tn);
            ok = k >= 0 && kind_of(&m->table[k]) != KIND_WIDE;
        }
        if (!ok)
            return ac_err_set(err,
                              "%s: unexpected tensor \"%.100s\" (not part of a quantized model "
                              "with this config.json)",
                              path, tn);
    }
    return 0;
}

static int64_t ceil_div64(int64_t a, int64_t b) { return a / b + (a % b != 0); }

/* The presence bitmap and rank directory agree (checked: no bucket past the
 * table, rank[0] 0, each entry the kept rows below its block, the last K):
 * then every index a lookup computes lies in 0..K-1. */
static int check_presence(const uint8_t *present, const int32_t *rank, int n_buckets, int K,
                          const char *path, ac_err *err)
{
    const int n_blocks = (int)ceil_div64(n_buckets, AC_WIDE_RANK_BLOCK);
    const int tail_bits = n_buckets % 8;
    if (tail_bits && (present[n_buckets / 8] >> tail_bits) != 0)
        return ac_err_set(err, "%s: tensor \"" WIDE_PRESENT "\": bits set past bucket %d", path,
                          n_buckets - 1);
    if (rank[0] != 0)
        return ac_err_set(err, "%s: tensor \"" WIDE_RANK "\": element 0 is %d, expected 0", path,
                          (int)rank[0]);
    const size_t bytes = ((size_t)n_buckets + 7) / 8, block_bytes = AC_WIDE_RANK_BLOCK / 8;
    int64_t count = 0;
    for (int k = 0; k < n_blocks; k++) {
        const size_t from = (size_t)k * block_bytes;
        const size_t to = from + block_bytes < bytes ? from + block_bytes : bytes;
        size_t i = from;
        for (; i + 8 <= to; i += 8) { /* a word at a time: a cold start reads the whole bitmap */
            uint64_t w;
            memcpy(&w, present + i, sizeof w);
            count += __builtin_popcountll(w);
        }
        for (; i < to; i++)
            count += __builtin_popcount(present[i]);
        if (rank[k + 1] != count)
            return ac_err_set(err,
                              "%s: tensor \"" WIDE_RANK "\": element %d is %d, but %lld buckets "
                              "below %lld are kept",
                              path, k + 1, (int)rank[k + 1], (long long)count,
                              (long long)(k + 1) * AC_WIDE_RANK_BLOCK);
    }
    if (count != K)
        return ac_err_set(err, "%s: tensor \"" WIDE_PRESENT "\": %lld buckets kept, "
                               "storage.wide_rows says %d",
                          path, (long long)count, K);
    return 0;
}

static int load_wide(ac_quant *q, const ac_safetensors *st, const ac_model *m, const ac_storage *s,
                     const char *path, ac_err *err)
{
    const int C = m->cfg.n_classes, W = ac_wide_stored_width(C), K = s->wide_rows;
    const int N = m->cfg.wide_buckets;
    const int64_t n_codes = ceil_div64(K, s->wide_group), n_blocks = ceil_div64(N, AC_WIDE_RANK_BLOCK);
    const void *present, *rank, *values, *codes;
    if (expect_tensor(st, WIDE_PRESENT, "U8", 1, ceil_div64(N, 8), 0, &present, path, err) != 0 ||
        expect_tensor(st, WIDE_RANK, "I32", 1, n_blocks + 1, 0, &rank, path, err) != 0 ||
        expect_tensor(st, WIDE_VALUES, "U8", 1, ceil_div64((int64_t)K * W * s->wide_bits, 8), 0,
                      &values, path, err) != 0 ||
        expect_tensor(st, WIDE_SCALES, "U8", 1, n_codes, 0, &codes, path, err) != 0 ||
        check_presence(present, rank, N, K, path, err) != 0)
        return -1;
    q->wide = (ac_wide_sparse){.n = K, .n_buckets = N, .n_classes = C, .width = W,
                               .group = s->wide_group, .bits = s->wide_bits, .present = present, .rank = rank,
                               .values = values, .codes = codes};
    return 0;
}

static int load_checked(ac_model *m, ac_quant *q, const ac_safetensors *st, const ac_storage *s,
                        int lazy, const char *path, ac_err *err)
{
    if (!ac_model_has_wide(&m->cfg) && s->wide_rows != 0)
        return ac_err_set(err, "%s: storage.wide_rows is %d, but the model has no wide path",
                          path, s->wide_rows);
    if (ac_model_has_wide(&m->cfg) && s->wide_rows > m->cfg.wide_buckets)
        return ac_err_set(err, "%s: storage.wide_rows is %d, more than model.wide_buckets (%d)",
                          path, s->wide_rows, m->cfg.wide_buckets);
    if (check_no_extras(st, m, path, err) != 0)
        return -1;
    char scale_name[AC_PARAM_NAME_LEN + 8];
    /* Checks first, then the copies: a bad file changes nothing. */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < m->n_tensors; i++) {
            const ac_param_info *p = &m->table[i];
            const void *data, *scale;
            switch (kind_of(p)) {
            case KIND_WIDE:
                if (pass == 0 && load_wide(q, st, m, s, path, err) != 0)
                    return -1;
                break;
            case KIND_F32:
                if (expect_tensor(st, p->name, "F32", p->ndim, p->shape[0], p->shape[1], &data,
                                  path, err) != 0)
                    return -1;
                if (pass == 1)
                    memcpy(m->params + p->offset, data, p->numel * sizeof(float));
                break;
            case KIND_Q4_ROWS:
                snprintf(scale_name, sizeof scale_name, "%s" SCALE_SUFFIX, p->name);
                if (expect_tensor(st, p->name, "U8", 2, p->shape[0],
                                  (int64_t)ac_qb_bytes((size_t)p->shape[1], AC_EMBED_BITS), &data, path,
                                  err) != 0 ||
                    expect_tensor(st, scale_name, "U8", 1, p->shape[0], 0, &scale, path,
                                  err) != 0)
                    return -1;
                if (pass == 1 && lazy) {
                    q->embed_q = data;
                    q->embed_code = scale;
                    q->embed_rows = p->shape[0];
                    q->embed_cols = p->shape[1];
                    q->embed_done = calloc((size_t)p->shape[0], 1);
                    if (!q->embed_done)
                        return ac_err_set(err, "%s: out of memory", path);
                } else if (pass == 1) {
                    ac_dequant_rows_qb(m->params + p->offset, data, scale, (size_t)p->shape[0],
                                       (size_t)p->shape[1], AC_EMBED_BITS);
                }
                break;
            case KIND_I8_ROWS:
                snprintf(scale_name, sizeof scale_name, "%s" SCALE_SUFFIX, p->name);
                if (expect_tensor(st, p->name, "I8", 2, p->shape[0], p->shape[1], &data, path,
                                  err) != 0 ||
                    expect_tensor(st, scale_name, "F32", 1, p->shape[0], 0, &scale, path,
                                  err) != 0)
                    return -1;
                if (pass == 0 && check_scales(scale, (size_t)p->shape[0], scale_name, path, err))
                    return -1;
                if (pass == 1) {
                    ac_dequant_rows_i8(m->params + p->offset, data, scale, (size_t)p->shape[0],
                                       (size_t)p->shape[1]);
                }
                break;
            }
        }
    }
    return 0;
}

/* The encoder's linear layers in int8 from the checked file (q, k and v
 * concatenated into one [3d, d] layer, as the model runs them). */
static int setup_linear(ac_quant *q, const ac_model *m, const ac_safetensors *st, const char *path,
                        ac_err *err)
{
    const ac_model_config *c = &m->cfg;
    const int d = c->d_model, ff = c->d_ff;
    if (c->n_layers == 0 || d > AC_QLINEAR_MAX_IN || ff > AC_QLINEAR_MAX_IN)
        return 0; /* the F32 layers run */
    q->linear = calloc((size_t)c->n_layers, sizeof *q->linear);
    int8_t *qkv = malloc((size_t)3 * d * d);
    float *qkv_scale = malloc((size_t)3 * d * sizeof *qkv_scale);
    if (!q->linear || !qkv || !qkv_scale) {
        free(qkv);
        free(qkv_scale);
        return ac_err_set(err, "%s: out of memory", path);
    }
    q->n_layers = c->n_layers;
    static const char *const parts[] = {"attn.q", "attn.k", "attn.v", "attn.out", "ffn.fc1",
                                        "ffn.fc2"};
    char name[AC_PARAM_NAME_LEN + 16];
    int rc = 0;
    for (int l = 0; l < c->n_layers && rc == 0; l++) {
        const int8_t *w[6];
        const float *sc[6];
        for (int k = 0; k < 6; k++) {
            snprintf(name, sizeof name, "layers.%d.%s.weight", l, parts[k]);
            const ac_st_tensor *t = ac_st_find(st, name);
            w[k] = (const int8_t *)(st->data + t->begin);
            snprintf(name, sizeof name, "layers.%d.%s.weight" SCALE_SUFFIX, l, parts[k]);
            sc[k] = (const float *)(const void *)(st->data + ac_st_find(st, name)->begin);
        }
        for (int k = 0; k < 3; k++) {
            memcpy(qkv + (size_t)k * d * d, w[k], (size_t)d * d);
            memcpy(qkv_scale + (size_t)k * d, sc[k], (size_t)d * sizeof *qkv_scale);
        }
        ac_qlinear *ql = q->linear[l];
        if (ac_qlinear_init(&ql[AC_QL_QKV], qkv, qkv_scale, 3 * d, d) != 0 ||
            ac_qlinear_init(&ql[AC_QL_OUT], w[3], sc[3], d, d) != 0 ||
            ac_qlinear_init(&ql[AC_QL_FC1], w[4], sc[4], ff, d) != 0 ||
            ac_qlinear_init(&ql[AC_QL_FC2], w[5], sc[5], d, ff) != 0)
            rc = ac_err_set(err, "%s: out of memory", path);
    }
    free(qkv);
    free(qkv_scale);
    return rc;
}

int ac_quant_load_tensors(ac_model *m, const ac_storage *s, const char *path, int lazy,
                          ac_err *err)
{
    ac_safetensors st;
    if (ac_st_map(&st, path, err) != 0)
        return -1;
    ac_quant *q = calloc(1, sizeof *q);
    if (!q) {
        ac_st_free(&st);
        return ac_err_set(err, "%s: out of memory", path);
    }
    if (load_checked(m, q, &st, s, lazy, path, err) != 0 ||
        setup_linear(q, m, &st, path, err) != 0) {
        ac_quant_free(q);
        ac_st_free(&st);
        return -1;
    }
    /* The model keeps the file's data (the int8 rows and the sparse table point into it). */
    if (st.mapping) {
        q->mapping = st.mapping;
        q->mapping_len = st.mapping_len;
        st.mapping = NULL;
    } else {
        q->owned = st.data;
    }
    st.data = NULL;
    ac_st_free(&st);
    m->quant = q;
    if (!lazy)
        ac_model_quant_materialize(m);
    return 0;
}

/* ---------------------------------------------------------------- writing */

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* config.json of the quantized model: the source's, in its layout, with
 * the storage object last. */
static char *quantized_config_json(const ac_config *cfg, int kept, int group, int bits)
{
    char *plain = ac_config_to_json(cfg);
    char *end = plain ? strrchr(plain, '}') : NULL;
    if (!end) {
        free(plain);
        return NULL;
    }
    while (end > plain && (end[-1] == '\n' || end[-1] == ' '))
        end--;
    *end = '\0';
    char *text = NULL;
    if (asprintf(&text,
                 "%s,\n  \"" STORAGE_KEY "\": {\n    \"format\": \"" STORAGE_FORMAT "\",\n"
                 "    \"version\": %d,\n    \"matrices\": \"" STORAGE_MATRICES "\",\n"
                 "    \"wide_rows\": %d,\n    \"wide_group\": %d,\n    \"wide_bits\": %d\n  }\n}\n",
                 plain, AC_STORAGE_VERSION, kept, group, bits) < 0)
        text = NULL;
    free(plain);
    return text;
}

/* The quantized tensors: their entries, names and buffers (owned). */
typedef struct {
    ac_st_entry *entries;
    char **names;
    void **buffers;
    int n;
} tensor_set;

static void tensor_set_free(tensor_set *t)
{
    for (int i = 0; i < t->n; i++) {
        free(t->names[i]);
        free(t->buffers[i]);
    }
    free(t->entries);
    free(t->names);
    free(t->buffers);
    memset(t, 0, sizeof *t);
}

/* Adds an entry named a + b over data (F32, from `data`) or over bytes of
 * dtype; buffer (NULL or the memory behind it) becomes the set's. NULL when
 * out of memory (buffer freed). */
static ac_st_entry *add_entry(tensor_set *t, const char *a, const char *b, const char *dtype,
                              const void *data, void *buffer, int ndim, int64_t rows, int64_t cols)
{
    size_t len = strlen(a) + strlen(b) + 1;
    char *name = malloc(len);
    if (!name) {
        free(buffer);
        return NULL;
    }
    snprintf(name, len, "%s%s", a, b);
    t->names[t->n] = name;
    t->buffers[t->n] = buffer;
    ac_st_entry *e = &t->entries[t->n++];
    *e = (ac_st_entry){.name = name, .ndim = ndim, .shape = {rows, cols}, .dtype = dtype};
    if (dtype)
        e->bytes = data;
    else
        e->data = data;
    return e;
}

/* The quantized tensors of m: the 4-byte ones into head, the bytes into
 * tail (written in that order: each aligned). */
static int build_tensors(tensor_set *head, tensor_set *tail, const ac_model *m, int wide_rows,
                         int group, int bits, const uint32_t *uses, int *kept, ac_err *err)
{
    const int cap = 2 * m->n_tensors + 4;
    for (int k = 0; k < 2; k++) {
        tensor_set *t = k == 0 ? head : tail;
        t->entries = calloc((size_t)cap, sizeof *t->entries);
        t->names = calloc((size_t)cap, sizeof *t->names);
        t->buffers = calloc((size_t)cap, sizeof *t->buffers);
        if (!t->entries || !t->names || !t->buffers)
            return ac_err_set(err, "out of memory");
    }
    *kept = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const ac_param_info *p = &m->table[i];
        const float *w = m->params + p->offset;
        const size_t rows = (size_t)p->shape[0], cols = (size_t)p->shape[1];
        switch (kind_of(p)) {
        case KIND_F32:
            if (!add_entry(head, p->name, "", NULL, w, NULL, p->ndim, p->shape[0], p->shape[1]))
                return ac_err_set(err, "out of memory");
            break;
        case KIND_Q4_ROWS: {
            const size_t rb = ac_qb_bytes(cols, AC_EMBED_BITS);
            uint8_t *q = malloc(rows * rb + 1), *code = malloc(rows + 1);
            if (!q || !code) {
                free(q);
                free(code);
                return ac_err_set(err, "out of memory");
            }
            ac_quant_rows_qb(q, code, w, rows, cols, AC_EMBED_BITS);
            if (!add_entry(tail, p->name, SCALE_SUFFIX, "U8", code, code, 1, (int64_t)rows, 0)) {
                free(q);
                return ac_err_set(err, "out of memory");
            }
            if (!add_entry(tail, p->name, "", "U8", q, q, 2, (int64_t)rows, (int64_t)rb))
                return ac_err_set(err, "out of memory");
            break;
        }
        case KIND_I8_ROWS: {
            int8_t *q = malloc(rows * cols + 1);
            float *scale = malloc(rows * sizeof *scale + 1);
            if (!q || !scale) {
                free(q);
                free(scale);
                return ac_err_set(err, "out of memory");
            }
            ac_quant_rows_i8(q, scale, w, rows, cols);
            if (!add_entry(head, p->name, SCALE_SUFFIX, NULL, scale, scale, 1, (int64_t)rows, 0)) {
                free(q);
                return ac_err_set(err, "out of memory");
            }
            if (!add_entry(tail, p->name, "", "I8", q, q, 2, (int64_t)rows, (int64_t)cols))
                return ac_err_set(err, "out of memory");
            break;
        }
        case KIND_WIDE: {
            const int C = m->cfg.n_classes, W = ac_wide_stored_width(C), N = p->shape[0];
            const int keep = wide_rows < N ? wide_rows : N;
            int32_t *ids = malloc((size_t)keep * sizeof *ids + 1);
            /* every word of the vocabulary keeps its own (unigram) row */
            uint8_t *words = calloc((size_t)N, 1);
            if (!ids || !words) {
                free(ids);
                free(words);
                return ac_err_set(err, "out of memory");
            }
            for (int32_t id = 0; id < m->cfg.vocab_size; id++)
                words[wide_bucket(&id, 1, N)] = 1;
            int n = ac_wide_select_rows(ids, w, N, C, keep, words, uses, err);
            free(words);
            if (n < 0) {
                free(ids);
                return -1;
            }
            *kept = n;
            const int n_codes = ceil_div(n, group), n_blocks = ceil_div(N, AC_WIDE_RANK_BLOCK);
            const size_t n_values = ac_qb_bytes((size_t)n * (size_t)W, bits);
            uint8_t *codes = malloc((size_t)n_codes + 1), *values = malloc(n_values + 1);
            uint8_t *present = malloc((size_t)N / 8 + 2);
            int32_t *rank = malloc(((size_t)n_blocks + 1) * sizeof *rank);
            if (!codes || !values || !present || !rank) {
                free(ids);
                free(codes);
                free(values);
                free(present);
                free(rank);
                return ac_err_set(err, "out of memory");
            }
            ac_wide_quantize(values, codes, w, ids, n, C, group, bits);
            ac_wide_presence(present, rank, N, ids, n);
            free(ids);
            if (!add_entry(head, WIDE_RANK, "", "I32", rank, rank, 1, n_blocks + 1, 0)) {
                free(codes);
                free(values);
                free(present);
                return ac_err_set(err, "out of memory");
            }
            if (!add_entry(tail, WIDE_PRESENT, "", "U8", present, present, 1, ceil_div(N, 8), 0)) {
                free(codes);
                free(values);
                return ac_err_set(err, "out of memory");
            }
            if (!add_entry(tail, WIDE_SCALES, "", "U8", codes, codes, 1, n_codes, 0)) {
                free(values);
                return ac_err_set(err, "out of memory");
            }
            if (!add_entry(tail, WIDE_VALUES, "", "U8", values, values, 1, (int64_t)n_values, 0))
                return ac_err_set(err, "out of memory");
            break;
        }
        }
    }
    return 0;
}

/* The first parameter of m that is not finite, or -1: a quantized model
 * holds finite values only. */
static int non_finite_tensor(const ac_model *m)
{
    for (int i = 0; i < m->n_tensors; i++) {
        const float *w = m->params + m->table[i].offset;
        for (size_t k = 0; k < m->table[i].numel; k++)
            if (!isfinite(w[k]))
                return i;
    }
    return -1;
}

static int file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

enum { F_CONFIG, F_VOCAB, F_MODEL, N_FILES };
static const char *const FILE_NAMES[N_FILES] = {"config.json", "vocab.txt", "model.safetensors"};

int ac_quantize_model_dir(const char *src, const char *dst, int wide_rows, int wide_group,
                          int wide_bits, const uint32_t *uses, int *kept, ac_err *err)
{
    if (wide_rows < 0 || wide_group < 1 || wide_bits < 2 || wide_bits > 8)
        return ac_err_set(err, "quantize: wide rows must be >= 0, the group >= 1 and the bits 2..8");
    ac_model_dir md;
    if (ac_model_dir_load(&md, src, err) != 0)
        return -1;
    char *paths[N_FILES] = {0}, *vocab_src = join(src, "vocab.txt");
    char *config_json = NULL, *vocab = NULL;
    size_t vocab_len = 0;
    ac_atomic_file files[N_FILES];
    int begun[N_FILES] = {0};
    tensor_set head = {0}, tail = {0};
    ac_st_entry *all = NULL;
    int rc = -1;
    for (int i = 0; i < N_FILES; i++)
        paths[i] = join(dst, FILE_NAMES[i]);
    if (!vocab_src || !paths[F_CONFIG] || !paths[F_VOCAB] || !paths[F_MODEL]) {
        ac_err_set(err, "%s: out of memory", dst);
        goto done;
    }
    if (md.model.quant) {
        ac_err_set(err, "%s: the model is quantized already", src);
        goto done;
    }
    if (md.model.cfg.objective != AC_OBJECTIVE_CLASSIFICATION) {
        ac_err_set(err, "%s: a pretrained encoder (%s); quantize a trained classifier", src,
                   ac_objective_name(md.model.cfg.objective));
        goto done;
    }
    for (int i = 0; i < N_FILES; i++)
        if (file_exists(paths[i])) {
            ac_err_set(err, "%s: holds a model already (%s); choose another directory or remove it",
                       dst, FILE_NAMES[i]);
            goto done;
        }
    if (ac_read_file(vocab_src, (size_t)1 << 30, &vocab, &vocab_len, err) != 0)
        goto done;
    const int bad = non_finite_tensor(&md.model);
    if (bad >= 0) {
        ac_err_set(err, "%s: tensor \"%s\" holds a value that is not finite; it cannot be quantized",
                   src, md.model.table[bad].name);
        goto done;
    }
    if (build_tensors(&head, &tail, &md.model, wide_rows, wide_group, wide_bits, uses, kept,
                      err) != 0)
        goto done;
    config_json = quantized_config_json(&md.config, *kept, wide_group, wide_bits);
    const int n_all = head.n + tail.n;
    all = calloc((size_t)n_all + 1, sizeof *all);
    if (!config_json || !all) {
        ac_err_set(err, "%s: out of memory", dst);
        goto done;
    }
    memcpy(all, head.entries, (size_t)head.n * sizeof *all);
    memcpy(all + head.n, tail.entries, (size_t)tail.n * sizeof *all);
    if (ac_mkdir_p(dst, err) != 0)
        goto done;
    const char *const META[] = {"format", "pt", "producer", ("attnctl " AC_VERSION)};
    for (int i = 0; i < N_FILES; i++) {
        if (ac_atomic_begin(&files[i], paths[i], err) != 0)
            goto done;
        begun[i] = 1;
        int wrc = i == F_CONFIG  ? ac_atomic_write(&files[i], config_json, strlen(config_json), err)
                  : i == F_VOCAB ? ac_atomic_write(&files[i], vocab, vocab_len, err)
                                 : ac_st_write(&files[i], all, n_all, META, 2, err);
        if (wrc != 0 || ac_atomic_finish(&files[i], err) != 0)
            goto done;
    }
    for (int i = 0; i < N_FILES; i++) /* model.safetensors last */
        if (ac_atomic_publish(&files[i], err) != 0)
            goto done;
    if (ac_fsync_dir(dst, err) != 0)
        goto done;
    rc = 0;
done:
    for (int i = 0; i < N_FILES; i++) {
        if (begun[i]) /* removes a temp file not yet published */
            ac_atomic_abort(&files[i]);
        free(paths[i]);
    }
    free(vocab_src);
    free(vocab);
    free(config_json);
    free(all);
    tensor_set_free(&head);
    tensor_set_free(&tail);
    ac_model_dir_free(&md);
    return rc;
}
