/* The whole model against PyTorch (in the spirit of llm.c's test_gpt2): each
 * fixture under tests/fixtures/ was written by tests/make_fixture.py from a
 * PyTorch model built from the specification (float64 arithmetic on float32
 * weights). This suite loads the weights and inputs, runs the C model and
 * compares logits, loss, every parameter gradient and the losses of 5 AdamW
 * steps. Tolerances: logits and loss within 1e-5 absolute, each
 * gradient tensor within 1e-4 of its largest magnitude, 5-step losses within
 * 1e-4. The largest differences are printed. Run from the repository root.
 *
 * Fixtures written before learned positions, hashed n-grams and label
 * smoothing have no metadata for them and mean: sinusoidal positions, no
 * n-grams, plain cross-entropy. The forwards that a backward follows run with
 * train = 1 (dropout is 0, so nothing is random) so that the training loss,
 * label smoothing included, is the one compared. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attnctl/io.h"
#include "attnctl/mlm.h"
#include "attnctl/model.h"
#include "attnctl/nn.h"
#include "attnctl/optim.h"
#include "attnctl/rng.h"

#define FIXTURE_DIR "tests/fixtures/"
#define LOGIT_TOL 1e-5
#define LOSS_TOL 1e-5
#define GRAD_REL_TOL 1e-4
#define STEP_LOSS_TOL 1e-4
#define ADAMW_STEPS 5

typedef struct {
    ac_safetensors st;
    ac_model model;
    int B, T;
    int32_t *ids, *lengths, *labels;
    /* a masked-LM fixture: the predicted flat positions and their ids */
    int M;
    int32_t *positions, *targets;
} fixture;

/* The metadata value of key, or NULL when the fixture has none. */
static const char *meta_find(const ac_safetensors *st, const char *key)
{
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_keys[i], key) == 0)
            return st->meta_values[i];
    return NULL;
}

static const char *meta_get(const ac_safetensors *st, const char *key)
{
    const char *v = meta_find(st, key);
    ck_assert_msg(v != NULL, "fixture metadata has no key %s", key);
    return v;
}

static int meta_int(const ac_safetensors *st, const char *key)
{
    return atoi(meta_get(st, key));
}

/* The tensor `name` as F32 with exactly `numel` elements. */
static const float *tensor_f32(const ac_safetensors *st, const char *name, size_t numel,
                               const ac_st_tensor **info)
{
    const ac_st_tensor *t = ac_st_find(st, name);
    ck_assert_msg(t != NULL, "fixture has no tensor %s", name);
    ck_assert_msg(t->end - t->begin == numel * sizeof(float), "%s: %zu bytes, expected %zu floats",
                  name, t->end - t->begin, numel);
    const float *p = ac_st_f32(st, t);
    ck_assert_msg(p != NULL, "%s: not readable as F32", name);
    if (info)
        *info = t;
    return p;
}

/* Integers stored as F32 (exact below 2^24). */
static int32_t *int_tensor(const ac_safetensors *st, const char *name, size_t numel)
{
    const float *f = tensor_f32(st, name, numel, NULL);
    int32_t *out = malloc(numel * sizeof *out);
    ck_assert_ptr_nonnull(out);
    for (size_t i = 0; i < numel; i++) {
        ck_assert_msg(f[i] == floorf(f[i]), "%s[%zu] = %g is not an integer", name, i, (double)f[i]);
        out[i] = (int32_t)f[i];
    }
    return out;
}

/* Loads a fixture, builds the model from its metadata and copies the weights
 * (checking that the fixture's parameter set is exactly the model's table). */
static void fixture_load(fixture *fx, const char *file)
{
    memset(fx, 0, sizeof *fx);
    char path[256];
    snprintf(path, sizeof path, FIXTURE_DIR "%s", file);
    ac_err err;
    ck_assert_msg(ac_st_load(&fx->st, path, &err) == 0, "%s (run from the repository root)",
                  err.msg);
    const ac_safetensors *st = &fx->st;
    ac_model_config cfg = {
        .vocab_size = meta_int(st, "V"),
        .max_len = meta_int(st, "max_len"),
        .d_model = meta_int(st, "d"),
        .n_heads = meta_int(st, "heads"),
        .d_ff = meta_int(st, "ff"),
        .n_layers = meta_int(st, "n_layers"),
        .n_classes = meta_find(st, "C") ? meta_int(st, "C") : 0,
        .dropout = 0.0f,
        .ln_eps = (float)atof(meta_get(st, "ln_eps")),
        .positions = AC_POS_SINUSOIDAL,
        .ngram_order = 1,
        .ngram_buckets = 0,
        .temperature = 1.0f,
    };
    const char *v;
    if ((v = meta_find(st, "objective")) != NULL)
        ck_assert_msg(ac_objective_parse(v, &cfg.objective) == 0, "%s: objective %s", file, v);
    if (cfg.objective == AC_OBJECTIVE_CLASSIFICATION)
        ck_assert_int_eq(ac_pooling_parse(meta_get(st, "pooling"), &cfg.pooling), 0);
    if ((v = meta_find(st, "positions")) != NULL)
        ck_assert_msg(ac_positions_parse(v, &cfg.positions) == 0, "%s: positions %s", file, v);
    if ((v = meta_find(st, "ngram_order")) != NULL)
        cfg.ngram_order = atoi(v);
    if ((v = meta_find(st, "ngram_buckets")) != NULL)
        cfg.ngram_buckets = atoi(v);
    if ((v = meta_find(st, "ngram_hash")) != NULL)
        ck_assert_msg(strcmp(v, AC_NGRAM_HASH) == 0,
                      "%s: n-gram hash \"%s\", the model's is \"%s\"", file, v, AC_NGRAM_HASH);
    if ((v = meta_find(st, "wide_order")) != NULL)
        cfg.wide_order = atoi(v);
    if ((v = meta_find(st, "wide_buckets")) != NULL)
        cfg.wide_buckets = atoi(v);
    if ((v = meta_find(st, "wide_norm")) != NULL)
        cfg.wide_norm = (float)atof(v);
    if ((v = meta_find(st, "wide_hash")) != NULL)
        ck_assert_msg(strcmp(v, AC_WIDE_HASH) == 0, "%s: wide hash \"%s\", the model's is \"%s\"",
                      file, v, AC_WIDE_HASH);
    float smoothing = 0.0f;
    if ((v = meta_find(st, "label_smoothing")) != NULL)
        smoothing = (float)atof(v);
    ck_assert_msg(ac_model_create(&fx->model, &cfg, &err) == 0, "%s", err.msg);

    ac_model *m = &fx->model;
    m->label_smoothing = smoothing;
    int n_param_tensors = 0;
    for (int i = 0; i < st->n; i++)
        n_param_tensors += strncmp(st->tensors[i].name, "param.", 6) == 0;
    ck_assert_int_eq(n_param_tensors, m->n_tensors);
    for (int i = 0; i < m->n_tensors; i++) {
        const ac_param_info *p = &m->table[i];
        char name[AC_PARAM_NAME_LEN + 8];
        snprintf(name, sizeof name, "param.%s", p->name);
        const ac_st_tensor *t;
        const float *src = tensor_f32(st, name, p->numel, &t);
        ck_assert_int_eq(t->ndim, p->ndim);
        for (int k = 0; k < p->ndim; k++)
            ck_assert_int_eq(t->shape[k], p->shape[k]);
        memcpy(m->params + p->offset, src, p->numel * sizeof(float));
    }

    const ac_st_tensor *ids = ac_st_find(st, "ids");
    ck_assert_ptr_nonnull(ids);
    ck_assert_int_eq(ids->ndim, 2);
    fx->B = (int)ids->shape[0];
    fx->T = (int)ids->shape[1];
    fx->ids = int_tensor(st, "ids", (size_t)fx->B * fx->T);
    fx->lengths = int_tensor(st, "lengths", (size_t)fx->B);
    if (cfg.objective == AC_OBJECTIVE_MASKED_LM) {
        const ac_st_tensor *pos = ac_st_find(st, "positions");
        ck_assert_ptr_nonnull(pos);
        fx->M = (int)pos->shape[0];
        fx->positions = int_tensor(st, "positions", (size_t)fx->M);
        fx->targets = int_tensor(st, "targets", (size_t)fx->M);
    } else {
        fx->labels = int_tensor(st, "labels", (size_t)fx->B);
    }
    ck_assert_msg(ac_model_alloc_activations(m, fx->B, fx->T, &err) == 0, "%s", err.msg);
}

static void fixture_free(fixture *fx)
{
    ac_model_free(&fx->model);
    ac_st_free(&fx->st);
    free(fx->ids);
    free(fx->lengths);
    free(fx->labels);
    free(fx->positions);
    free(fx->targets);
}

/* Gradient tensors are reported by kind, with the layer index taken out
 * ("layers.1.attn.q.weight" -> "attn.q.weight"). */
static const char *group_of(const char *name)
{
    if (strncmp(name, "layers.", 7) == 0) {
        const char *dot = strchr(name + 7, '.');
        if (dot)
            return dot + 1;
    }
    return name;
}

typedef struct {
    char name[AC_PARAM_NAME_LEN];
    double worst_rel;   /* max |c - torch| / max |torch| over the group's tensors */
    double worst_abs;
    double scale;       /* max |torch| of the tensor with the worst relative error */
} grad_group;

/* The training forward (train = 1 for label smoothing; dropout is 0, so
 * nothing random happens) of a classifier, or of a masked LM with head h. */
static float fixture_forward(fixture *fx, ac_mlm *h)
{
    if (h)
        return ac_mlm_forward(&fx->model, h, fx->ids, fx->lengths, fx->B, fx->T, fx->positions,
                              fx->targets, fx->M, 1, 0);
    return ac_model_forward(&fx->model, fx->ids, fx->lengths, fx->labels, fx->B, fx->T, 1, 0);
}

static void fixture_backward(fixture *fx, ac_mlm *h)
{
    ac_model_zero_grad(&fx->model);
    if (h)
        ac_mlm_backward(&fx->model, h);
    else
        ac_model_backward(&fx->model);
}

static void check_fixture(const char *file)
{
    fixture fx;
    fixture_load(&fx, file);
    ac_model *m = &fx.model;
    const int B = fx.B, T = fx.T, C = m->cfg.n_classes;
    const int masked_lm = m->cfg.objective == AC_OBJECTIVE_MASKED_LM;
    ac_mlm head, *h = NULL;
    ac_err err;
    if (masked_lm) {
        ck_assert_msg(ac_mlm_alloc(&head, &m->cfg, B, T, 0.99, &err) == 0, "%s", err.msg);
        h = &head;
    }

    /* The fixture must exercise padding and a real batch. */
    int padded = 0;
    for (int b = 0; b < B; b++) {
        ck_assert(fx.lengths[b] >= 1 && fx.lengths[b] <= T);
        padded += fx.lengths[b] < T;
    }
    ck_assert_msg(padded > 0 && B >= 2 && (C >= 2 || (masked_lm && fx.M >= 2)),
                  "%s: fixture without padding", file);

    /* Forward: logits and the training loss (maps kept as a backward follows).
     * The masked-LM head leaves probabilities where its logits were: the
     * logits are recomputed from its hidden states, and the probabilities
     * are compared with the softmax of PyTorch's logits. */
    m->keep_attention = 1;
    float loss = fixture_forward(&fx, h);
    const int n_rows = masked_lm ? fx.M : B, width = masked_lm ? m->cfg.vocab_size : C;
    const size_t n_logits = (size_t)n_rows * width;
    const float *ref_logits = tensor_f32(&fx.st, "logits", n_logits, NULL);
    const float *ref_loss = tensor_f32(&fx.st, "loss", 1, NULL);
    const float *logits = m->act.logits;
    float *mlm_logits = NULL;
    double logit_diff = 0.0, prob_diff = 0.0;
    if (masked_lm) {
        mlm_logits = malloc(n_logits * sizeof *mlm_logits);
        ck_assert_ptr_nonnull(mlm_logits);
        linear_forward(mlm_logits, h->hidden, m->p.embed_w, m->p.mlm_bias, fx.M, m->cfg.d_model,
                       width);
        logits = mlm_logits;
        for (int r = 0; r < n_rows; r++) {
            const float *z = ref_logits + (size_t)r * width;
            double mx = z[0], sum = 0.0;
            for (int v = 1; v < width; v++)
                mx = fmax(mx, z[v]);
            for (int v = 0; v < width; v++)
                sum += exp(z[v] - mx);
            for (int v = 0; v < width; v++)
                prob_diff = fmax(prob_diff, fabs(h->logits[(size_t)r * width + v] -
                                                 exp(z[v] - mx) / sum));
        }
    }
    for (size_t i = 0; i < n_logits; i++)
        logit_diff = fmax(logit_diff, fabs((double)logits[i] - ref_logits[i]));
    double loss_diff = fabs((double)loss - ref_loss[0]);

    /* Backward: every parameter gradient. */
    fixture_backward(&fx, h);
    grad_group groups[64];
    int n_groups = 0;
    double worst_rel = 0.0;
    const char *worst_name = "";
    for (int i = 0; i < m->n_tensors; i++) {
        const ac_param_info *p = &m->table[i];
        char name[AC_PARAM_NAME_LEN + 8];
        snprintf(name, sizeof name, "grad.%s", p->name);
        const float *ref = tensor_f32(&fx.st, name, p->numel, NULL);
        const float *got = m->grads + p->offset;
        double scale = 0.0, diff = 0.0;
        for (size_t j = 0; j < p->numel; j++) {
            scale = fmax(scale, fabs(ref[j]));
            diff = fmax(diff, fabs((double)got[j] - ref[j]));
        }
        ck_assert_msg(scale > 0.0, "%s: reference gradient is all zero: checks nothing", p->name);
        double rel = diff / scale;
        ck_assert_msg(rel <= GRAD_REL_TOL, "%s: %s max |diff| %.3g = %.3g of max |g| %.3g", file,
                      p->name, diff, rel, scale);
        if (rel >= worst_rel) {
            worst_rel = rel;
            worst_name = p->name;
        }
        const char *g = group_of(p->name);
        int k = 0;
        while (k < n_groups && strcmp(groups[k].name, g) != 0)
            k++;
        if (k == n_groups) {
            ck_assert_int_lt(n_groups, 64);
            memset(&groups[k], 0, sizeof groups[k]);
            snprintf(groups[k].name, sizeof groups[k].name, "%s", g);
            n_groups++;
        }
        if (rel >= groups[k].worst_rel) {
            groups[k].worst_rel = rel;
            groups[k].scale = scale;
        }
        groups[k].worst_abs = fmax(groups[k].worst_abs, diff);
    }

    /* Five AdamW steps as the script takes them: lr 1e-2, decay 0.01 on matrices, no clipping. */
    ac_optim_config oc;
    ac_optim_config_defaults(&oc);
    oc.lr = 1e-2f;
    oc.weight_decay = 0.01f;
    oc.beta1 = 0.9f;
    oc.beta2 = 0.999f;
    oc.eps = 1e-8f;
    oc.clip_norm = 0.0f;
    oc.schedule = AC_SCHED_CONSTANT;
    float *m1 = calloc(m->n_params, sizeof(float)), *m2 = calloc(m->n_params, sizeof(float));
    ck_assert(m1 && m2);
    const float *ref_losses = tensor_f32(&fx.st, "losses_5", ADAMW_STEPS, NULL);
    double step_diff = 0.0;
    float step_losses[ADAMW_STEPS];
    for (int s = 0; s < ADAMW_STEPS; s++) {
        step_losses[s] = fixture_forward(&fx, h);
        step_diff = fmax(step_diff, fabs((double)step_losses[s] - ref_losses[s]));
        fixture_backward(&fx, h);
        ac_adamw_step(m, m->params, m->grads, m1, m2, &oc, ac_lr_at(&oc, s), s + 1);
    }
    /* The steps must have moved the loss, or the comparison proves little. */
    ck_assert_msg(ref_losses[ADAMW_STEPS - 1] < 0.9 * ref_losses[0], "%s: 5-step losses barely move",
                  file);

    printf("%s: B %d T %d lengths", file, B, T);
    for (int b = 0; b < B; b++)
        printf(" %d", fx.lengths[b]);
    if (m->cfg.positions != AC_POS_SINUSOIDAL || ac_model_has_ngrams(&m->cfg) ||
        m->label_smoothing != 0.0f)
        printf("; positions %s, ngram_order %d, %d buckets (%d touched), label smoothing %g",
               ac_positions_name(m->cfg.positions), m->cfg.ngram_order, m->cfg.ngram_buckets,
               m->sparse[AC_SPARSE_NGRAM].n_rows, (double)m->label_smoothing);
    if (m->p.wide_w)
        printf("; wide path n <= %d in %d buckets", m->cfg.wide_order, m->cfg.wide_buckets);
    if (masked_lm)
        printf("; masked LM, %d predicted positions, probabilities max|diff| %.3g", fx.M,
               prob_diff);
    printf("; logits max|diff| %.3g, loss %.8f vs %.8f (|diff| %.3g), 5-step losses max|diff| %.3g\n",
           logit_diff, (double)loss, (double)ref_loss[0], loss_diff, step_diff);
    printf("  gradients: worst %s at %.3g of its max |g|\n", worst_name, worst_rel);
    for (int k = 0; k < n_groups; k++)
        printf("  %-22s max|diff| %.3g  (%.3g of max |g| %.3g)\n", groups[k].name,
               groups[k].worst_abs, groups[k].worst_rel, groups[k].scale);

    ck_assert_msg(logit_diff <= LOGIT_TOL, "%s: logits differ by %.3g", file, logit_diff);
    ck_assert_msg(prob_diff <= LOGIT_TOL, "%s: probabilities differ by %.3g", file, prob_diff);
    ck_assert_msg(loss_diff <= LOSS_TOL, "%s: loss %.8f vs %.8f", file, (double)loss,
                  (double)ref_loss[0]);
    for (int s = 0; s < ADAMW_STEPS; s++)
        ck_assert_msg(fabs((double)step_losses[s] - ref_losses[s]) <= STEP_LOSS_TOL,
                      "%s: loss after %d AdamW steps %.8f vs PyTorch %.8f", file, s,
                      (double)step_losses[s], (double)ref_losses[s]);
    free(m1);
    free(m2);
    free(mlm_logits);
    if (h)
        ac_mlm_free(h);
    fixture_free(&fx);
}

START_TEST(test_fixture_l1_d32_max)
{
    check_fixture("ref_l1_d32_max.safetensors");
}
END_TEST

START_TEST(test_fixture_l2_d24_mean)
{
    check_fixture("ref_l2_d24_mean.safetensors");
}
END_TEST

START_TEST(test_fixture_l2_d16_cls)
{
    check_fixture("ref_l2_d16_cls.safetensors");
}
END_TEST

/* The pretraining model: the same encoder (learned positions, bigrams in 11
 * buckets, 2 layers) under the tied masked-LM head, on corrupted inputs
 * (<mask>, replaced and kept words) at 8 positions of 3 padded items. */
START_TEST(test_fixture_masked_lm)
{
    check_fixture("ref_mlm_l2_d16.safetensors");
}
END_TEST

/* Learned positions, bigrams + trigrams in 13 buckets, label smoothing 0.1. */
START_TEST(test_fixture_l1_d16_ngram)
{
    check_fixture("ref_l1_d16_ngram.safetensors");
}
END_TEST

/* The wide path (uni+bi+trigrams in 7 buckets, repeated phrases) over bigram
 * embeddings and learned positions, label smoothing 0.1. */
START_TEST(test_fixture_l1_d16_wide)
{
    check_fixture("ref_l1_d16_wide.safetensors");
}
END_TEST

/* The wide fixture tests its path: with the wide table zeroed the logits
 * move, and so does the loss. */
START_TEST(test_wide_fixture_features_matter)
{
    fixture fx;
    fixture_load(&fx, "ref_l1_d16_wide.safetensors");
    ac_model *m = &fx.model;
    ck_assert(ac_model_has_wide(&m->cfg) && m->cfg.wide_order == 3);
    const int C = m->cfg.n_classes;
    const float *ref = tensor_f32(&fx.st, "logits", (size_t)fx.B * C, NULL);
    const float *ref_loss = tensor_f32(&fx.st, "loss", 1, NULL);
    int w = ac_model_find_tensor(m, "head.wide.weight");
    memset(m->params + m->table[w].offset, 0, m->table[w].numel * sizeof(float));
    float loss = ac_model_forward(m, fx.ids, fx.lengths, fx.labels, fx.B, fx.T, 1, 0);
    ck_assert_msg(fabs((double)loss - ref_loss[0]) > 10 * LOSS_TOL,
                  "the loss without the wide path %.8f is the fixture's %.8f", (double)loss,
                  (double)ref_loss[0]);
    double moved = 0.0;
    for (int i = 0; i < fx.B * C; i++)
        moved = fmax(moved, fabs((double)m->act.logits[i] - ref[i]));
    ck_assert_msg(moved > 0.1, "the wide table changes the logits by only %.3g", moved);
    fixture_free(&fx);
}
END_TEST

/* The n-gram fixture really tests its features: a used n-gram row and a used
 * learned position change the logits, and without label smoothing (train = 0)
 * the loss is not the fixture's. Guards against a loader that drops them. */
START_TEST(test_ngram_fixture_features_matter)
{
    fixture fx;
    fixture_load(&fx, "ref_l1_d16_ngram.safetensors");
    ac_model *m = &fx.model;
    ck_assert(ac_model_has_ngrams(&m->cfg) && m->cfg.ngram_order == 3);
    ck_assert_int_eq(m->cfg.positions, AC_POS_LEARNED);
    ck_assert(m->label_smoothing > 0.0f);
    const int C = m->cfg.n_classes;
    const float *ref = tensor_f32(&fx.st, "logits", (size_t)fx.B * C, NULL);
    const float *ref_loss = tensor_f32(&fx.st, "loss", 1, NULL);

    float plain = ac_model_forward(m, fx.ids, fx.lengths, fx.labels, fx.B, fx.T, 0, 0);
    ck_assert_msg(fabs((double)plain - ref_loss[0]) > 10 * LOSS_TOL,
                  "the loss without label smoothing %.8f is the fixture's %.8f", (double)plain,
                  (double)ref_loss[0]);

    /* The bucket of the trigram ending at position 2 of item 0, and position 1. */
    const char *perturbed[] = {"embed.ngram.weight", "embed.pos.weight"};
    for (int k = 0; k < 2; k++) {
        int t = ac_model_find_tensor(m, perturbed[k]);
        ck_assert_int_ge(t, 0);
        size_t row;
        if (k == 0) {
            uint64_t h = 0;
            for (int i = 0; i < 3; i++)
                h = h * 116049371u + (uint64_t)fx.ids[i];
            row = (size_t)(h % (uint64_t)m->cfg.ngram_buckets);
        } else {
            row = 1;
        }
        float *w = m->params + m->table[t].offset + row * (size_t)m->cfg.d_model + 3;
        const float saved = *w;
        *w += 0.01f;
        ac_model_forward(m, fx.ids, fx.lengths, fx.labels, fx.B, fx.T, 1, 0);
        double diff = 0.0;
        for (int i = 0; i < fx.B * C; i++)
            diff = fmax(diff, fabs((double)m->act.logits[i] - ref[i]));
        ck_assert_msg(diff > 10 * LOGIT_TOL, "%s row %zu changed the logits by only %.3g",
                      perturbed[k], row, diff);
        *w = saved;
    }
    fixture_free(&fx);
}
END_TEST

/* A wrong weight must be caught: guards against a comparison that passes
 * whatever the model computes (e.g. reading the wrong tensor). */
START_TEST(test_fixture_detects_a_wrong_weight)
{
    fixture fx;
    fixture_load(&fx, "ref_l2_d24_mean.safetensors");
    ac_model *m = &fx.model;
    int t = ac_model_find_tensor(m, "layers.1.ffn.fc2.weight");
    ck_assert_int_ge(t, 0);
    m->params[m->table[t].offset + 5] += 0.01f;
    ac_model_forward(m, fx.ids, fx.lengths, fx.labels, fx.B, fx.T, 0, 0);
    const float *ref = tensor_f32(&fx.st, "logits", (size_t)fx.B * m->cfg.n_classes, NULL);
    double diff = 0.0;
    for (int i = 0; i < fx.B * m->cfg.n_classes; i++)
        diff = fmax(diff, fabs((double)m->act.logits[i] - ref[i]));
    ck_assert_msg(diff > 10 * LOGIT_TOL, "a perturbed weight changed the logits by only %.3g", diff);
    fixture_free(&fx);
}
END_TEST

/* --------------------------------------------------------- interoperability */

/* A python3 that has PyTorch, or NULL. */
static const char *python_with_torch(void)
{
    static const char *const candidates[] = {"/usr/bin/python3", "python3"};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import torch' >/dev/null 2>&1", candidates[i]);
        if (system(cmd) == 0)
            return candidates[i];
    }
    return NULL;
}

/* Saves m as an attnctl model directory through the library's own writer
 * (config.json, vocab.txt, model.safetensors) and checks that it loads back. */
static void write_model_dir(const char *dir, const ac_model *m)
{
    const ac_model_config *c = &m->cfg;
    char vocab_path[600];
    snprintf(vocab_path, sizeof vocab_path, "%s.vocab.txt", dir);
    FILE *f = fopen(vocab_path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < c->vocab_size; i++) {
        if (i < 3)
            fprintf(f, "%s\n", i == 0 ? "<pad>" : i == 1 ? "<unk>" : "<cls>");
        else
            fprintf(f, "word%d\n", i);
    }
    ck_assert_int_eq(fclose(f), 0);
    ac_err err;
    ac_vocab vocab;
    ck_assert_msg(ac_vocab_load(&vocab, vocab_path, &err) == 0, "%s", err.msg);
    unlink(vocab_path);

    ac_config cfg;
    ac_config_defaults(&cfg);
    cfg.model = *c;
    cfg.n_labels = c->n_classes;
    cfg.labels = calloc((size_t)c->n_classes, sizeof *cfg.labels);
    ck_assert_ptr_nonnull(cfg.labels);
    for (int k = 0; k < c->n_classes; k++) {
        char name[32];
        snprintf(name, sizeof name, "class%d", k);
        cfg.labels[k] = strdup(name);
        ck_assert_ptr_nonnull(cfg.labels[k]);
    }
    ck_assert_msg(ac_model_dir_save(dir, &cfg, &vocab, m, NULL, NULL, NULL, &err) == 0, "%s",
                  err.msg);
    ac_model_dir md;
    ck_assert_msg(ac_model_dir_load(&md, dir, &err) == 0, "%s", err.msg);
    ck_assert(memcmp(md.model.params, m->params, m->n_params * sizeof(float)) == 0);
    ac_model_dir_free(&md);
    ac_config_free(&cfg);
    ac_vocab_free(&vocab);
}

/* tests/make_fixture.py --model-dir reproduces the C model's logits and
 * probabilities from the saved directory (pads, a length-1 sequence and the
 * full max_len included), over the input features and the temperature:
 *   max pooling:  no positions, bigrams in 7 buckets;
 *   mean pooling: learned positions, bigrams + trigrams in 11 buckets, ids
 *                 from 1450 up (the uint64 hash wraps), temperature 1.7;
 *   cls pooling:  sinusoidal positions, no n-grams;
 *   and two with the wide path (a default model's head.wide.weight): uni- to
 *   trigrams normalised at wide_norm 0.5 over 40 tokens, and uni- and bigrams
 *   summed in 5 buckets. */
START_TEST(test_pytorch_reproduces_a_model_dir)
{
    const char *py = python_with_torch();
    if (!py) {
        printf("SKIP test_pytorch_reproduces_a_model_dir: no python3 with torch\n");
        return;
    }
    static const struct {
        const char *pooling;
        ac_positions positions;
        int ngram_order, ngram_buckets, vocab_size;
        float temperature;
        int wide_order, wide_buckets;
        float wide_norm;
        int max_len;
    } variants[] = {
        {"max", AC_POS_NONE, 2, 7, 23, 1.0f, 0, 0, 0.0f, 9},
        {"mean", AC_POS_LEARNED, 3, 11, 1500, 1.7f, 0, 0, 0.0f, 9},
        {"cls", AC_POS_SINUSOIDAL, 1, 0, 23, 1.0f, 0, 0, 0.0f, 9},
        /* the wide path: normalised (a text of more distinct n-grams than
         * AC_WIDE_NORM_FLOOR, and one of fewer), and a plain sum with collisions */
        {"mean", AC_POS_SINUSOIDAL, 1, 0, 1500, 1.3f, 3, 4099, 0.5f, 40},
        {"max", AC_POS_SINUSOIDAL, 2, 7, 23, 1.0f, 2, 5, 0.0f, 9},
    };
    for (int pi = 0; pi < (int)(sizeof variants / sizeof variants[0]); pi++) {
        ac_model_config cfg = {.vocab_size = variants[pi].vocab_size,
                               .max_len = variants[pi].max_len,
                               .d_model = 12, .n_heads = 3, .d_ff = 20, .n_layers = 2,
                               .n_classes = 3, .dropout = 0.1f, .ln_eps = 1e-6f,
                               .positions = variants[pi].positions,
                               .ngram_order = variants[pi].ngram_order,
                               .ngram_buckets = variants[pi].ngram_buckets,
                               .temperature = variants[pi].temperature,
                               .wide_order = variants[pi].wide_order,
                               .wide_buckets = variants[pi].wide_buckets,
                               .wide_norm = variants[pi].wide_norm};
        ck_assert_int_eq(ac_pooling_parse(variants[pi].pooling, &cfg.pooling), 0);
        ac_model m;
        ac_err err;
        ck_assert_msg(ac_model_create(&m, &cfg, &err) == 0, "%s", err.msg);
        ac_model_init_weights(&m, 77 + (uint64_t)pi);
        /* Larger than the init scale so every layer matters in the logits. */
        for (size_t i = 0; i < m.n_params; i++)
            m.params[i] *= 15.0f;
        for (int t = 0; t < m.n_tensors; t++)
            if (m.table[t].ndim == 1)
                for (size_t j = 0; j < m.table[t].numel; j++)
                    m.params[m.table[t].offset + j] += 0.05f * (float)((j * 7 + (size_t)t) % 5);
        /* The n-gram table starts at zero (a no-op): give it values of the
         * scale of the token embeddings. */
        int ngram = ac_model_find_tensor(&m, "embed.ngram.weight");
        ck_assert_int_eq(ngram >= 0, ac_model_has_ngrams(&cfg));
        if (ngram >= 0)
            for (size_t j = 0; j < m.table[ngram].numel; j++)
                m.params[m.table[ngram].offset + j] = 0.3f * ac_rng_normal(ac_rng_key(99, 0), j);
        /* So does the wide table: values of the logits' scale, so that a
         * bucket or a normalisation taken wrongly shows. */
        int wide = ac_model_find_tensor(&m, "head.wide.weight");
        ck_assert_int_eq(wide >= 0, variants[pi].wide_order > 0);
        if (wide >= 0)
            for (size_t j = 0; j < m.table[wide].numel; j++)
                m.params[m.table[wide].offset + j] = 3.0f * ac_rng_normal(ac_rng_key(98, 0), j);

        enum { B = 3, T_MAX = 40 };
        const int T = cfg.max_len;
        const int32_t lengths[B] = {5, 1, T};
        int32_t ids[B * T_MAX] = {0};
        for (int b = 0; b < B; b++)
            for (int t = 0; t < lengths[b]; t++) {
                ids[b * T + t] = t == 0 ? 2 : 1 + (b * 5 + t * 3) % 22;
                if (cfg.vocab_size >= 1500 && t % 3 == 1) /* ids * 116049371^2 >= 2^64 */
                    ids[b * T + t] = 1450 + (b * 7 + t) % 49;
            }
        ck_assert_msg(ac_model_alloc_activations(&m, B, T, &err) == 0, "%s", err.msg);
        ac_model_forward(&m, ids, lengths, NULL, B, T, 0, 0);

        char dir[] = "/tmp/attnctl_fixture_XXXXXX";
        ck_assert_ptr_nonnull(mkdtemp(dir));
        write_model_dir(dir, &m);
        char cmd[2048], out_path[600];
        snprintf(out_path, sizeof out_path, "%s/logits.json", dir);
        int n = snprintf(cmd, sizeof cmd, "%s tests/make_fixture.py --model-dir %s", py, dir);
        for (int b = 0; b < B; b++) {
            n += snprintf(cmd + n, sizeof cmd - (size_t)n, " --ids \"");
            for (int t = 0; t < lengths[b]; t++)
                n += snprintf(cmd + n, sizeof cmd - (size_t)n, "%d ", ids[b * T + t]);
            n += snprintf(cmd + n, sizeof cmd - (size_t)n, "\"");
        }
        snprintf(cmd + n, sizeof cmd - (size_t)n, " > %s", out_path);
        ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);

        /* {"logits": [[a, b, c], ...], ...}: the numbers after "logits". */
        FILE *f = fopen(out_path, "r");
        ck_assert_ptr_nonnull(f);
        char buf[4096];
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        char *p = strstr(buf, "\"logits\"");
        ck_assert_ptr_nonnull(p);
        p += strlen("\"logits\"");
        double worst = 0.0, spread = 0.0;
        for (int i = 0; i < B * cfg.n_classes; i++) {
            while (*p && !(*p == '-' || (*p >= '0' && *p <= '9')))
                p++;
            char *end;
            double v = strtod(p, &end);
            ck_assert_msg(end != p, "cannot read logit %d from %s", i, buf);
            p = end;
            worst = fmax(worst, fabs(v - m.act.logits[i]));
            spread = fmax(spread, fabs(v));
        }
        /* Probabilities: softmax(logits / temperature) on both sides; and,
         * with a temperature other than 1, not the plain softmax. */
        p = strstr(buf, "\"probabilities\"");
        ck_assert_ptr_nonnull(p);
        p += strlen("\"probabilities\"");
        double worst_prob = 0.0, from_plain = 0.0;
        for (int b = 0; b < B; b++) {
            const float *z = m.act.logits + (size_t)b * cfg.n_classes;
            double zmax = z[0], sum = 0.0;
            for (int c = 1; c < cfg.n_classes; c++)
                zmax = fmax(zmax, z[c]);
            for (int c = 0; c < cfg.n_classes; c++)
                sum += exp(z[c] - zmax);
            for (int c = 0; c < cfg.n_classes; c++) {
                while (*p && !(*p == '-' || (*p >= '0' && *p <= '9')))
                    p++;
                char *end;
                double v = strtod(p, &end);
                ck_assert_msg(end != p, "cannot read probability %d,%d from %s", b, c, buf);
                p = end;
                worst_prob = fmax(worst_prob,
                                  fabs(v - m.act.probs_out[(size_t)b * cfg.n_classes + c]));
                from_plain = fmax(from_plain, fabs(v - exp(z[c] - zmax) / sum));
            }
        }
        printf("model dir (%s pooling, positions %s, ngram_order %d, %d buckets, wide_order %d "
               "in %d buckets, wide_norm %g, temperature %g): PyTorch logits max|diff| %.3g (max "
               "|logit| %.3g), probabilities max|diff| %.3g\n",
               variants[pi].pooling, ac_positions_name(cfg.positions), cfg.ngram_order,
               cfg.ngram_buckets, cfg.wide_order, cfg.wide_buckets, (double)cfg.wide_norm,
               (double)cfg.temperature, worst, spread, worst_prob);
        ck_assert_msg(spread > 0.1, "logits too small to compare");
        ck_assert_msg(worst <= LOGIT_TOL * fmax(1.0, spread), "%s pooling: logits differ by %.3g",
                      variants[pi].pooling, worst);
        /* |d softmax(z / temp)| <= max |dz| / (2 temp): the logits' bound holds for them. */
        ck_assert_msg(worst_prob <= LOGIT_TOL * fmax(1.0, spread),
                      "%s pooling: probabilities differ by %.3g", variants[pi].pooling, worst_prob);
        if (cfg.temperature != 1.0f)
            ck_assert_msg(from_plain > 1e-3,
                          "temperature %g: probabilities within %.3g of the plain softmax",
                          (double)cfg.temperature, from_plain);

        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir); /* a mkdtemp name: no quotes inside */
        ck_assert_int_eq(system(cmd), 0);
        ac_model_free(&m);
    }
}
END_TEST

static Suite *fixture_suite(void)
{
    Suite *s = suite_create("fixture");
    TCase *tc = tcase_create("pytorch");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fixture_l1_d32_max);
    tcase_add_test(tc, test_fixture_l2_d24_mean);
    tcase_add_test(tc, test_fixture_l2_d16_cls);
    tcase_add_test(tc, test_fixture_l1_d16_ngram);
    tcase_add_test(tc, test_fixture_masked_lm);
    tcase_add_test(tc, test_ngram_fixture_features_matter);
    tcase_add_test(tc, test_fixture_l1_d16_wide);
    tcase_add_test(tc, test_wide_fixture_features_matter);
    tcase_add_test(tc, test_fixture_detects_a_wrong_weight);
    tcase_add_test(tc, test_pytorch_reproduces_a_model_dir);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(fixture_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
