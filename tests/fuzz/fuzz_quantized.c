/* libFuzzer target: a quantized model directory (attnctl quantize) on the
 * paths predict and inspect take: ac_model_dir_load_inference (4-bit
 * embeddings dequantized as a forward uses them, the wide table sparse) and
 * ac_model_dir_load (every parameter written), then one forward each.
 *
 * At start-up the library saves a tiny model with a wide path (45 buckets:
 * the presence bitmap's last byte is partial) into a
 * temporary directory (under $TMPDIR, removed at exit) and quantizes it
 * into another; the input replaces the quantized model.safetensors, or,
 * when it starts with '{', the quantized config.json (the storage object),
 * for one run.
 * Either load may only fail with a one-line message naming that file; both
 * must agree on whether the directory loads, and a directory that loads
 * gives the same probabilities through both. With ATTNCTL_FUZZ_SEED_DIR set
 * the quantized files are also copied there (seeds for the corpus). */
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnctl/io.h"
#include "attnctl/quant_io.h"
#include "fuzz_common.h"

static char root[512];
static char fp32_dir[600], q_dir[600];
static char model_path[700], config_path[700];
static char *config_text, *model_text; /* the files as quantize wrote them */
static size_t config_len, model_len;

static void remove_dirs(void)
{
    static const char *const files[] = {"model.safetensors", "config.json", "vocab.txt"};
    char path[800];
    for (int d = 0; d < 2; d++) {
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            snprintf(path, sizeof path, "%s/%s", d ? q_dir : fp32_dir, files[i]);
            unlink(path);
        }
        rmdir(d ? q_dir : fp32_dir);
    }
    rmdir(root);
}

static void write_file(const char *path, const uint8_t *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FUZZ_SETUP(fd >= 0, "open");
    while (size > 0) {
        ssize_t n = write(fd, data, size);
        FUZZ_SETUP(n > 0, "write");
        data += n;
        size -= (size_t)n;
    }
    close(fd);
}

static void make_dirs(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/attnctl-fuzz-q-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    FUZZ_SETUP(mkdtemp(root) != NULL, "mkdtemp");
    snprintf(fp32_dir, sizeof fp32_dir, "%s/fp32", root);
    snprintf(q_dir, sizeof q_dir, "%s/q", root);
    snprintf(model_path, sizeof model_path, "%s/model.safetensors", q_dir);
    snprintf(config_path, sizeof config_path, "%s/config.json", q_dir);
    atexit(remove_dirs);

    ac_config cfg;
    ac_config_defaults(&cfg);
    ac_vocab vocab;
    fuzz_tiny_vocab(&vocab, 0);
    cfg.model = (ac_model_config){.vocab_size = vocab.size, .max_len = 8, .d_model = 4,
                                  .n_heads = 2, .d_ff = 8, .n_layers = 1, .n_classes = 2,
                                  .pooling = AC_POOL_MEAN, .dropout = 0.0f, .ln_eps = 1e-6f,
                                  .positions = AC_POS_LEARNED, .ngram_order = 2,
                                  .ngram_buckets = 5, .wide_order = 2, .wide_buckets = 45,
                                  .wide_norm = 0.5f, .temperature = 1.0f};
    static char neg[] = "negative", pos[] = "positive";
    char *labels[] = {neg, pos};
    cfg.labels = labels;
    cfg.n_labels = 2;
    ac_model m;
    ac_err err = {{0}};
    if (ac_model_create(&m, &cfg.model, &err) != 0) {
        fprintf(stderr, "fuzz setup failed: %s\n", err.msg);
        exit(2);
    }
    ac_model_init_weights(&m, 7);
    for (int i = 0; i < 2 * cfg.model.wide_buckets; i += 3) /* some wide rows weigh */
        m.p.wide_w[i] = 0.01f * (float)(i % 17) - 0.05f;
    int kept = 0;
    if (ac_model_dir_save(fp32_dir, &cfg, &vocab, &m, NULL, NULL, NULL, &err) != 0 ||
        ac_quantize_model_dir(fp32_dir, q_dir, 12, 4, AC_QUANT_DEFAULT_WIDE_BITS, NULL, &kept,
                              &err) != 0) {
        fprintf(stderr, "fuzz setup failed: %s\n", err.msg);
        exit(2);
    }
    ac_model_free(&m);
    ac_vocab_free(&vocab);
    ac_model_dir md;
    if (ac_model_dir_load_inference(&md, q_dir, &err) != 0) {
        fprintf(stderr, "fuzz setup failed: the quantized model does not load: %s\n", err.msg);
        exit(2);
    }
    ac_model_dir_free(&md);
    FUZZ_SETUP(ac_read_file(config_path, 1 << 20, &config_text, &config_len, &err) == 0,
               "read config.json");
    FUZZ_SETUP(ac_read_file(model_path, 1 << 20, &model_text, &model_len, &err) == 0,
               "read model.safetensors");
    const char *seeds = getenv("ATTNCTL_FUZZ_SEED_DIR");
    if (seeds && *seeds) {
        char out[800];
        snprintf(out, sizeof out, "%s/saved_quantized.safetensors", seeds);
        write_file(out, (const uint8_t *)model_text, model_len);
        snprintf(out, sizeof out, "%s/saved_quantized_config.json", seeds);
        write_file(out, (const uint8_t *)config_text, config_len);
    }
}

/* Probabilities of one batch, as predict computes them (NULL when none). */
static float *forward(ac_model_dir *md)
{
    ac_model *m = &md->model;
    enum { B = 2, T = 8 };
    ac_err err = {{0}};
    FUZZ_CHECK(ac_model_alloc_activations(m, B, T, &err) == 0);
    int32_t ids[B * T], lengths[B] = {T, 3};
    for (int i = 0; i < B * T; i++)
        ids[i] = (int32_t)((unsigned)(i * 7 + 1) % (unsigned)m->cfg.vocab_size);
    FUZZ_CHECK(ac_model_forward(m, ids, lengths, NULL, B, T, 0, 0) == 0.0f);
    float *p = malloc(sizeof(float) * B * (size_t)m->cfg.n_classes);
    FUZZ_CHECK(p != NULL);
    memcpy(p, m->act.probs_out, sizeof(float) * B * (size_t)m->cfg.n_classes);
    return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!root[0])
        make_dirs();
    const int is_config = size > 0 && data[0] == '{';
    const char *target = is_config ? config_path : model_path;
    write_file(target, data, size);

    ac_model_dir lazy, full;
    ac_err e1 = {{0}}, e2 = {{0}};
    int r1 = ac_model_dir_load_inference(&lazy, q_dir, &e1);
    int r2 = ac_model_dir_load(&full, q_dir, &e2);
    FUZZ_CHECK((r1 == 0) == (r2 == 0));
    if (r1 == 0) {
        float *a = forward(&lazy), *b = forward(&full);
        const size_t n = 2 * (size_t)lazy.model.cfg.n_classes;
        for (size_t i = 0; i < n; i++)
            FUZZ_CHECK((isnan(a[i]) && isnan(b[i])) || a[i] == b[i]);
        free(a);
        free(b);
        ac_model_dir_free(&lazy);
        ac_model_dir_free(&full);
    } else {
        FUZZ_CHECK(strcmp(e1.msg, e2.msg) == 0);
        FUZZ_CHECK(e1.msg[0] != '\0');
        /* one line, whatever the file quotes */
        FUZZ_CHECK(strchr(e1.msg, '\n') == NULL);
        /* the message names a file of the directory */
        FUZZ_CHECK(strncmp(e1.msg, q_dir, strlen(q_dir)) == 0);
    }
    /* the file back as quantize wrote it */
    if (is_config)
        write_file(config_path, (const uint8_t *)config_text, config_len);
    else
        write_file(model_path, (const uint8_t *)model_text, model_len);
    return 0;
}
