/* attnctl quantize's library half: a quantized model directory written from
 * a trained FP32 one (layout in attnctl/quant_io.h; the reader is
 * quantized.c). */
#include "quantized_layout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

int ac_quantize_out_free(const char *dst, ac_err *err)
{
    for (int i = 0; i < N_FILES; i++) {
        char *path = join(dst, FILE_NAMES[i]);
        if (!path)
            return ac_err_set(err, "%s: out of memory", dst);
        const int taken = file_exists(path);
        free(path);
        if (taken)
            return ac_err_set(err, "%s: holds a model already (%s); choose another directory or "
                                   "remove it",
                              dst, FILE_NAMES[i]);
    }
    return 0;
}

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
    if (ac_quantize_out_free(dst, err) != 0)
        goto done;
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
