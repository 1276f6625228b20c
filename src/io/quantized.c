/* Quantized model directories: the "storage" object of config.json, and
 * model.safetensors with int8 matrices, 4-bit embeddings and the pruned
 * wide table (layout in attnctl/quant_io.h): reading. The writer is
 * quantize.c. */
#include "quantized_layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

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
    q->kernel = ac_qkernel_best(); /* probed once, not in every layer */
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
