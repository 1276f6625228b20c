/* libFuzzer target: safetensors loading on the path `attnctl predict --model`
 * takes (ac_model_dir_load: config.json + vocab.txt + model.safetensors,
 * checked against each other), then one forward pass as predict runs it.
 *
 * At start-up the library saves a tiny model (ac_model_dir_save) into a
 * temporary directory (under $TMPDIR, removed at exit); the input replaces
 * its model.safetensors. The same bytes also go through ac_st_parse in
 * memory: when that rejects them the directory load must fail with the same
 * message, and what parses must hold together (offsets inside the data,
 * shape x dtype = size, names unique). The seed corpus holds the saved file. */
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnctl/io.h"
#include "fuzz_common.h"

static char model_dir[512];
static char model_path[600], config_path[600], vocab_path[600];

static void remove_model_dir(void)
{
    unlink(model_path);
    unlink(config_path);
    unlink(vocab_path);
    rmdir(model_dir);
}

static void make_model_dir(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(model_dir, sizeof model_dir, "%s/attnctl-fuzz-st-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    FUZZ_SETUP(mkdtemp(model_dir) != NULL, "mkdtemp");
    snprintf(model_path, sizeof model_path, "%s/model.safetensors", model_dir);
    snprintf(config_path, sizeof config_path, "%s/config.json", model_dir);
    snprintf(vocab_path, sizeof vocab_path, "%s/vocab.txt", model_dir);
    atexit(remove_model_dir);

    ac_config cfg;
    ac_config_defaults(&cfg);
    ac_vocab vocab;
    fuzz_tiny_vocab(&vocab, 0);
    /* temperature 1: config.json takes (0, 1000]; a 0 here made every
     * load fail on config.json, so no input ever reached the tensor checks */
    cfg.model = (ac_model_config){.vocab_size = vocab.size, .max_len = 8, .d_model = 4,
                                  .n_heads = 2, .d_ff = 8, .n_layers = 2, .n_classes = 2,
                                  .pooling = AC_POOL_MAX, .dropout = 0.0f, .ln_eps = 1e-6f,
                                  .positions = AC_POS_LEARNED, .ngram_order = 2,
                                  .ngram_buckets = 5, .temperature = 1.0f};
    static char neg[] = "negative", pos[] = "positive";
    char *labels[] = {neg, pos};
    cfg.labels = labels;
    cfg.n_labels = 2;
    ac_model m;
    ac_err err = {{0}};
    if (ac_model_create(&m, &cfg.model, &err) != 0 ||
        (ac_model_init_weights(&m, 7),
         ac_model_dir_save(model_dir, &cfg, &vocab, &m, NULL, NULL, NULL, &err) != 0)) {
        fprintf(stderr, "fuzz setup failed: %s\n", err.msg);
        exit(2);
    }
    ac_model_free(&m);
    ac_vocab_free(&vocab);
    /* The directory as saved must load, or every input fails on config.json
     * or vocab.txt and the tensor checks are never reached. */
    ac_model_dir md;
    if (ac_model_dir_load(&md, model_dir, &err) != 0) {
        fprintf(stderr, "fuzz setup failed: the saved model does not load: %s\n", err.msg);
        exit(2);
    }
    ac_model_dir_free(&md);
}

static void write_model_file(const uint8_t *data, size_t size)
{
    int fd = open(model_path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    FUZZ_SETUP(fd >= 0, "open model.safetensors");
    while (size > 0) {
        ssize_t n = write(fd, data, size);
        FUZZ_SETUP(n > 0, "write model.safetensors");
        data += n;
        size -= (size_t)n;
    }
    close(fd);
}

static void check_parsed(const ac_safetensors *st)
{
    static const struct {
        const char *name;
        unsigned bits;
    } sizes[] = {{"BOOL", 8}, {"U8", 8},   {"I8", 8},     {"F8_E5M2", 8}, {"F8_E4M3", 8},
                 {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16}, {"F16", 16},   {"BF16", 16},
                 {"I32", 32},  {"U32", 32}, {"F32", 32},  {"F64", 64},   {"I64", 64},
                 {"U64", 64},  {"C64", 64}, {"F4", 4},    {"F6_E2M3", 6}, {"F6_E3M2", 6}};
    FUZZ_CHECK(st->n >= 0 && st->data != NULL);
    size_t covered = 0;
    for (int i = 0; i < st->n; i++) {
        const ac_st_tensor *t = &st->tensors[i];
        FUZZ_CHECK(t->name != NULL && fuzz_utf8_valid(t->name, strlen(t->name)));
        FUZZ_CHECK(strcmp(t->name, "__metadata__") != 0);
        FUZZ_CHECK(t->begin <= t->end && t->end <= st->data_len);
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= AC_ST_MAX_DIMS);
        unsigned bits = 0;
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
            if (strcmp(sizes[k].name, t->dtype) == 0)
                bits = sizes[k].bits;
        FUZZ_CHECK(bits != 0);
        unsigned __int128 elems = 1;
        for (int k = 0; k < t->ndim; k++) {
            FUZZ_CHECK(t->shape[k] >= 0);
            elems *= (uint64_t)t->shape[k];
        }
        FUZZ_CHECK(elems * bits == (unsigned __int128)(t->end - t->begin) * 8);
        FUZZ_CHECK(ac_st_find(st, t->name) == t); /* names are unique */
        if (strcmp(t->dtype, "F32") == 0 && t->begin % 4 == 0)
            FUZZ_CHECK(ac_st_f32(st, t) != NULL);
        covered += t->end - t->begin;
    }
    FUZZ_CHECK(covered == st->data_len); /* contiguous, no gap, nothing left over */
    for (int i = 0; i < st->n_meta; i++)
        FUZZ_CHECK(st->meta_keys[i] && st->meta_values[i]);
}

/* One forward as predict runs it. Weights of moderate size must give
 * probabilities; huge ones may overflow to Inf/NaN, which is no crash. */
static void run_forward(ac_model_dir *md)
{
    ac_model *m = &md->model;
    int moderate = 1;
    for (size_t i = 0; i < m->n_params && moderate; i++)
        moderate = fabsf(m->params[i]) <= 1e3f;
    enum { B = 2, T = 8 };
    ac_err err = {{0}};
    FUZZ_CHECK(ac_model_alloc_activations(m, B, T, &err) == 0);
    int32_t ids[B * T], lengths[B] = {T, 3};
    for (int i = 0; i < B * T; i++)
        ids[i] = (int32_t)((unsigned)(i * 7 + 1) % (unsigned)m->cfg.vocab_size);
    float loss = ac_model_forward(m, ids, lengths, NULL, B, T, 0, 0);
    FUZZ_CHECK(loss == 0.0f);
    for (int b = 0; moderate && b < B; b++) {
        float sum = 0;
        for (int c = 0; c < m->cfg.n_classes; c++) {
            float p = m->act.probs_out[b * m->cfg.n_classes + c];
            FUZZ_CHECK(p >= 0.0f && p <= 1.0f);
            sum += p;
        }
        FUZZ_CHECK(fabsf(sum - 1.0f) < 1e-3f);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!model_dir[0])
        make_model_dir();
    write_model_file(data, size);

    ac_safetensors st;
    ac_err parse_err = {{0}};
    int parsed = ac_st_parse(&st, data, size, model_path, &parse_err) == 0;
    if (parsed) {
        check_parsed(&st);
        ac_st_free(&st);
    } else {
        FUZZ_CHECK(parse_err.msg[0] != '\0');
        FUZZ_CHECK(st.n == 0 && st.tensors == NULL && st.data == NULL);
    }

    ac_model_dir md;
    ac_err err = {{0}};
    if (ac_model_dir_load(&md, model_dir, &err) == 0) {
        FUZZ_CHECK(parsed);
        run_forward(&md);
        ac_model_dir_free(&md);
    } else {
        FUZZ_CHECK(strncmp(err.msg, model_path, strlen(model_path)) == 0);
        if (!parsed && strcmp(err.msg, parse_err.msg) != 0) {
            fprintf(stderr, "file and memory parsers disagree:\n  load:  %s\n  parse: %s\n",
                    err.msg, parse_err.msg);
            abort();
        }
    }
    return 0;
}
