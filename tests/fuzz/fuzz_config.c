/* libFuzzer target: config.json loading (ac_config_load / ac_config_parse),
 * and trainer_state.json (same file of the library, same JSON rules).
 *
 * The input is the JSON text. Each input goes through:
 *   - ac_config_load(full = 1) from a file (memfd), as a model directory is loaded;
 *   - ac_config_parse(full = 0) over the defaults, as a preset is;
 *   - ac_trainer_state_parse, as --resume reads trainer_state.json.
 * A failure must name the file and leave the config unchanged. A success must
 * give a config that the writer prints and the reader reads back to the
 * same text (what train writes, predict must load). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/io.h"
#include "fuzz_common.h"

/* Writes c, reads it back (full) and writes it again: both texts must agree.
 * Labels are required by a full load, so a config without them gets names
 * first (the count must match model.n_classes). */
static void check_round_trip(const ac_config *parsed)
{
    ac_config c = *parsed;
    char **names = NULL;
    if (c.n_labels == 0) {
        names = calloc((size_t)c.model.n_classes, sizeof *names);
        FUZZ_SETUP(names != NULL, "out of memory");
        for (int i = 0; i < c.model.n_classes; i++) {
            names[i] = malloc(16);
            FUZZ_SETUP(names[i] != NULL, "out of memory");
            snprintf(names[i], 16, "class%d", i);
        }
        c.labels = names;
        c.n_labels = c.model.n_classes;
    }
    char *first = ac_config_to_json(&c);
    FUZZ_CHECK(first != NULL);
    ac_config back;
    ac_config_defaults(&back);
    ac_err err = {{0}};
    if (ac_config_parse(&back, first, strlen(first), "written.json", 1, &err) != 0) {
        fprintf(stderr, "the written config does not load back: %s\n%s", err.msg, first);
        abort();
    }
    char *second = ac_config_to_json(&back);
    FUZZ_CHECK(second != NULL);
    if (strcmp(first, second) != 0) {
        fprintf(stderr, "config changed on a round trip:\n%s---\n%s", first, second);
        abort();
    }
    free(first);
    free(second);
    ac_config_free(&back);
    if (names) {
        for (int i = 0; i < c.model.n_classes; i++)
            free(names[i]);
        free(names);
    }
}

/* What every config that loads must satisfy (the model code relies on it). */
static void check_config(const ac_config *c)
{
    ac_err err = {{0}};
    FUZZ_CHECK(ac_model_config_validate(&c->model, &err) == 0);
    FUZZ_CHECK(c->model.d_model % c->model.n_heads == 0);
    FUZZ_CHECK(c->n_labels == 0 || c->n_labels == c->model.n_classes);
    FUZZ_CHECK(c->tokenizer.head_tokens >= 0 && c->tokenizer.head_tokens <= c->model.max_len);
    ac_tokenizer *t = NULL;
    FUZZ_CHECK(ac_tokenizer_create(&t, &c->tokenizer, &err) == 0);
    ac_tokenizer_free(t);
    for (int i = 0; i < c->n_labels; i++) {
        size_t n = strlen(c->labels[i]);
        FUZZ_CHECK(n > 0 && fuzz_utf8_valid(c->labels[i], n));
    }
    FUZZ_CHECK(fuzz_utf8_valid(c->provenance.version, strlen(c->provenance.version)));
    FUZZ_CHECK(fuzz_utf8_valid(c->provenance.train_file, strlen(c->provenance.train_file)));
    FUZZ_CHECK(fuzz_utf8_valid(c->provenance.date, strlen(c->provenance.date)));
}

static void check_unchanged_on_error(const ac_config *c, const char *before, const ac_err *err,
                                     const char *name)
{
    FUZZ_CHECK(strncmp(err->msg, name, strlen(name)) == 0);
    char *after = ac_config_to_json(c);
    FUZZ_CHECK(after != NULL && strcmp(before, after) == 0);
    free(after);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fuzz_file file;
    static char *defaults_json;
    if (!file.path[0]) {
        fuzz_file_open(&file, "fuzz_config");
        ac_config d;
        ac_config_defaults(&d);
        defaults_json = ac_config_to_json(&d);
        FUZZ_SETUP(defaults_json != NULL, "out of memory");
    }
    const char *text = (const char *)data;
    ac_err err = {{0}};

    /* 1. config.json of a model directory: every key required */
    fuzz_file_set(&file, data, size);
    ac_config full;
    ac_config_defaults(&full);
    if (ac_config_load(&full, file.path, 1, &err) == 0) {
        FUZZ_CHECK(full.n_labels >= 2);
        check_config(&full);
        check_round_trip(&full);
    } else {
        check_unchanged_on_error(&full, defaults_json, &err, file.path);
    }
    ac_config_free(&full);

    /* 2. a preset over the defaults */
    ac_config preset;
    ac_config_defaults(&preset);
    err.msg[0] = '\0';
    if (ac_config_parse(&preset, text, size, "preset.json", 0, &err) == 0) {
        check_config(&preset);
        check_round_trip(&preset);
    } else {
        check_unchanged_on_error(&preset, defaults_json, &err, "preset.json");
    }
    ac_config_free(&preset);

    /* 3. trainer_state.json */
    ac_trainer_state st;
    memset(&st, 0, sizeof st);
    err.msg[0] = '\0';
    if (ac_trainer_state_parse(&st, text, size, "trainer_state.json", &err) == 0) {
        char *first = ac_trainer_state_to_json(&st);
        FUZZ_CHECK(first != NULL);
        ac_trainer_state back;
        memset(&back, 0, sizeof back);
        if (ac_trainer_state_parse(&back, first, strlen(first), "written.json", &err) != 0) {
            fprintf(stderr, "the written trainer state does not load back: %s\n%s", err.msg, first);
            abort();
        }
        char *second = ac_trainer_state_to_json(&back);
        FUZZ_CHECK(second != NULL && strcmp(first, second) == 0);
        free(first);
        free(second);
    } else {
        FUZZ_CHECK(strncmp(err.msg, "trainer_state.json", 18) == 0);
    }
    return 0;
}
