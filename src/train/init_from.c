/* Fine-tuning from a pretrained encoder (attnctl train --init DIR): the
 * settings DIR fixes, and a fresh classification run that takes DIR's
 * vocabulary and encoder weights. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer_internal.h"

/* Model settings that shape the encoder's tensors or its input: DIR's. */
static const struct {
    const char *name;
    size_t offset;
} ENCODER_FIELDS[] = {
    {"vocab_size", offsetof(ac_model_config, vocab_size)},
    {"max_len", offsetof(ac_model_config, max_len)},
    {"d_model", offsetof(ac_model_config, d_model)},
    {"n_heads", offsetof(ac_model_config, n_heads)},
    {"d_ff", offsetof(ac_model_config, d_ff)},
    {"n_layers", offsetof(ac_model_config, n_layers)},
    {"ngram_order", offsetof(ac_model_config, ngram_order)},
    {"ngram_buckets", offsetof(ac_model_config, ngram_buckets)},
};
#define N_ENCODER_FIELDS (sizeof ENCODER_FIELDS / sizeof ENCODER_FIELDS[0])

static int *field_of(ac_model_config *c, size_t i)
{
    return (int *)(void *)((char *)c + ENCODER_FIELDS[i].offset);
}

static int field_value(const ac_model_config *c, size_t i)
{
    return *(const int *)(const void *)((const char *)c + ENCODER_FIELDS[i].offset);
}

static int vocab_in(const char *dir, ac_vocab *v, ac_err *err)
{
    char *path = ac_path_join(dir, "vocab.txt", err);
    if (!path)
        return -1;
    int rc = ac_vocab_load(v, path, err);
    free(path);
    return rc;
}

static int needs_cls_error(const char *dir, ac_err *err)
{
    return ac_err_set(err, "cls pooling needs <cls> in the vocabulary, and %s/vocab.txt has none "
                           "(pretrain with --pooling cls, or fine-tune with --pooling mean or max)",
                      dir);
}

int ac_train_init_config(ac_config *cfg, const char *init_dir, ac_err *err)
{
    ac_config init;
    if (ac_model_dir_load_config(&init, init_dir, err) != 0)
        return -1;
    for (size_t i = 0; i < N_ENCODER_FIELDS; i++)
        *field_of(&cfg->model, i) = field_value(&init.model, i);
    cfg->model.positions = init.model.positions;
    cfg->model.ln_eps = init.model.ln_eps;
    cfg->model.objective = AC_OBJECTIVE_CLASSIFICATION;
    if (cfg->model.n_classes < 2)
        cfg->model.n_classes = 2; /* a stand-in: the data decides */
    cfg->tokenizer = init.tokenizer;
    cfg->training.vocab_max = init.model.vocab_size;
    ac_config_free(&init);
    if (cfg->model.pooling != AC_POOL_CLS)
        return 0;
    ac_vocab v;
    if (vocab_in(init_dir, &v, err) != 0)
        return -1;
    int with_cls = v.with_cls;
    ac_vocab_free(&v);
    return with_cls ? 0 : needs_cls_error(init_dir, err);
}

int trainer_take_init(trainer *t, ac_err *err)
{
    const char *dir = t->opt->init_dir;
    if (ac_model_dir_load(&t->init, dir, err) != 0)
        return -1;
    t->have_init = 1;
    const ac_model_config *want = &t->cfg.model, *have = &t->init.config.model;
    /* (vocab_size is the trainer's to fill in: from DIR's vocabulary, below) */
    for (size_t i = 0; i < N_ENCODER_FIELDS; i++)
        if (ENCODER_FIELDS[i].offset != offsetof(ac_model_config, vocab_size) &&
            field_value(want, i) != field_value(have, i))
            return ac_err_set(err, "model.%s: %d, but the model in %s has %d",
                              ENCODER_FIELDS[i].name, field_value(want, i), dir,
                              field_value(have, i));
    if (want->positions != have->positions || want->ln_eps != have->ln_eps)
        return ac_err_set(err, "model.positions and model.ln_eps must be those of %s (%s, %g)",
                          dir, ac_positions_name(have->positions), (double)have->ln_eps);
    if (memcmp(&t->cfg.tokenizer, &t->init.config.tokenizer, sizeof t->cfg.tokenizer) != 0)
        return ac_err_set(err, "the tokenizer settings must be those of %s", dir);
    if (want->pooling == AC_POOL_CLS && !t->init.vocab.with_cls)
        return needs_cls_error(dir, err);
    /* The vocabulary is DIR's, <mask> and all: the ids the encoder learnt. */
    t->vocab = t->init.vocab;
    memset(&t->init.vocab, 0, sizeof t->init.vocab);
    t->have_vocab = 1;
    size_t n = strlen(dir);
    if (n >= sizeof t->cfg.provenance.init_model)
        return ac_err_set(err, "%s: the directory name is too long to record", dir);
    return 0;
}

int trainer_copy_init_weights(trainer *t, ac_err *err)
{
    int rc = ac_model_copy_encoder(&t->model, &t->init.model, err);
    if (rc != 0)
        ac_err_prefix(err, "starting from %s", t->opt->init_dir);
    ac_model_dir_free(&t->init);
    t->have_init = 0;
    return rc;
}
