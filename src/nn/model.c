/* The encoder classifier: parameter table, activation layout, batch forward
 * and backward (post-LN, see DESIGN.md). The layer math lives in the other
 * src/nn files; this file only wires the layers together. */
#include "attnctl/memory.h"
#include "attnctl/model.h"
#include "attnctl/rng.h"
#include "attnctl/util.h"

#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

_Static_assert(sizeof(int32_t) == sizeof(float), "pool_argmax shares the float activation block");

/* Field ranges: generous, but small enough that every size product below
 * fits comfortably in size_t and every dimension fits in int. */
#define MAX_VOCAB 50000000
#define MAX_LEN 1000000
#define MAX_DIM 65536
#define MAX_CLASSES 65536
#define MAX_NGRAM_BUCKETS 16777216
/* <unk>'s id (text.h's AC_UNK_ID; the model does not include the text layer).
 * <pad> (below it) and a leading <cls> are never dropped. */
#define AC_UNK_ID_MODEL 1

/* Dropout sites, each with its own key derived from the forward's key. */
#define DROP_SITE_EMBED 0
#define DROP_SITE_ATTN(l) (1 + 2 * (uint64_t)(l))
#define DROP_SITE_FFN(l) (2 + 2 * (uint64_t)(l))
#define DROP_SITE_POOLED (2 * (uint64_t)AC_MAX_LAYERS + 1)
#define DROP_SITE_TOKENS (2 * (uint64_t)AC_MAX_LAYERS + 2)

/* Each activation buffer starts on a 64-byte boundary. */
#define ACT_ALIGN_FLOATS 16

/* ------------------------------------------------------------- configuration */

static const ac_name POOLING_NAMES[] = {
    {AC_POOL_MAX, "max", 0},
    {AC_POOL_MEAN, "mean", 0},
    {AC_POOL_CLS, "cls", 0},
};
const ac_names ac_pooling_names = AC_NAMES(POOLING_NAMES);

const char *ac_pooling_name(ac_pooling v)
{
    return ac_names_name(&ac_pooling_names, (int)v);
}

int ac_pooling_parse(const char *s, ac_pooling *out)
{
    int v;
    if (ac_names_parse(&ac_pooling_names, s, &v))
        return -1;
    *out = (ac_pooling)v;
    return 0;
}

static const ac_name POSITIONS_NAMES[] = {
    {AC_POS_SINUSOIDAL, "sinusoidal", 0},
    {AC_POS_LEARNED, "learned", 0},
    {AC_POS_NONE, "none", 0},
};
const ac_names ac_positions_names = AC_NAMES(POSITIONS_NAMES);

const char *ac_positions_name(ac_positions v)
{
    return ac_names_name(&ac_positions_names, (int)v);
}

int ac_positions_parse(const char *s, ac_positions *out)
{
    int v;
    if (ac_names_parse(&ac_positions_names, s, &v))
        return -1;
    *out = (ac_positions)v;
    return 0;
}

static const ac_name OBJECTIVE_NAMES[] = {
    {AC_OBJECTIVE_CLASSIFICATION, "classification", 0},
    {AC_OBJECTIVE_MASKED_LM, "masked_lm", 0},
};
const ac_names ac_objective_names = AC_NAMES(OBJECTIVE_NAMES);

const char *ac_objective_name(ac_objective v)
{
    return ac_names_name(&ac_objective_names, (int)v);
}

int ac_objective_parse(const char *s, ac_objective *out)
{
    int v;
    if (ac_names_parse(&ac_objective_names, s, &v))
        return -1;
    *out = (ac_objective)v;
    return 0;
}

static int check_range(const char *field, int value, int lo, int hi, ac_err *err)
{
    if (value < lo || value > hi)
        return ac_err_set(err, "model.%s: must be between %d and %d (got %d)", field, lo, hi, value);
    return 0;
}

int ac_model_config_validate(const ac_model_config *cfg, ac_err *err)
{
    if (check_range("vocab_size", cfg->vocab_size, 2, MAX_VOCAB, err) ||
        check_range("max_len", cfg->max_len, 1, MAX_LEN, err) ||
        check_range("d_model", cfg->d_model, 1, MAX_DIM, err) ||
        check_range("n_heads", cfg->n_heads, 1, MAX_DIM, err) ||
        check_range("d_ff", cfg->d_ff, 1, MAX_DIM, err) ||
        check_range("n_layers", cfg->n_layers, 0, AC_MAX_LAYERS, err))
        return -1;
    if (cfg->objective != AC_OBJECTIVE_CLASSIFICATION && cfg->objective != AC_OBJECTIVE_MASKED_LM)
        return ac_err_set(err, "model.objective: must be classification or masked_lm");
    if (cfg->objective == AC_OBJECTIVE_MASKED_LM && cfg->n_classes != 0)
        return ac_err_set(err, "model.n_classes: must be 0 for a masked-LM model (got %d)",
                          cfg->n_classes);
    if (cfg->objective == AC_OBJECTIVE_CLASSIFICATION &&
        check_range("n_classes", cfg->n_classes, 2, MAX_CLASSES, err))
        return -1;
    if (cfg->d_model % cfg->n_heads != 0)
        return ac_err_set(err, "model.n_heads: must divide d_model (%d)", cfg->d_model);
    if (!ac_names_has(&ac_pooling_names, (int)cfg->pooling)) {
        char names[64];
        return ac_err_set(err, "model.pooling: must be %s",
                          ac_names_list(&ac_pooling_names, 0, names, sizeof names));
    }
    if (!(cfg->dropout >= 0.0f && cfg->dropout < 1.0f))
        return ac_err_set(err, "model.dropout: must be in [0, 1) (got %g)", (double)cfg->dropout);
    if (!(cfg->ln_eps > 0.0f && cfg->ln_eps < 1.0f))
        return ac_err_set(err, "model.ln_eps: must be in (0, 1) (got %g)", (double)cfg->ln_eps);
    if (cfg->positions != AC_POS_SINUSOIDAL && cfg->positions != AC_POS_LEARNED &&
        cfg->positions != AC_POS_NONE)
        return ac_err_set(err, "model.positions: must be sinusoidal, learned or none");
    if (check_range("ngram_order", cfg->ngram_order, 0, 3, err) ||
        check_range("ngram_buckets", cfg->ngram_buckets, 0, MAX_NGRAM_BUCKETS, err))
        return -1;
    if ((cfg->wide_order != AC_WIDE_ORDER_AUTO &&
         check_range("wide_order", cfg->wide_order, 0, 3, err)) ||
        (cfg->wide_buckets != AC_WIDE_BUCKETS_AUTO &&
         check_range("wide_buckets", cfg->wide_buckets, 0, MAX_NGRAM_BUCKETS, err)))
        return -1;
    if (!(cfg->wide_norm >= 0.0f && cfg->wide_norm <= 1.0f))
        return ac_err_set(err, "model.wide_norm: must be in [0, 1] (got %g)", (double)cfg->wide_norm);
    if (cfg->wide_order >= 1 && cfg->wide_buckets != AC_WIDE_BUCKETS_AUTO && cfg->wide_buckets < 1)
        return ac_err_set(err, "model.wide_buckets: must be at least 1 with wide_order %d",
                          cfg->wide_order);
    if (cfg->ngram_order >= 2 && cfg->ngram_buckets < 1)
        return ac_err_set(err, "model.ngram_buckets: must be at least 1 with ngram_order %d",
                          cfg->ngram_order);
    if (!(cfg->temperature >= 0.0f && cfg->temperature <= 1000.0f))
        return ac_err_set(err, "model.temperature: must be in [0, 1000], 0 meaning 1 (got %g)",
                          (double)cfg->temperature);
    return 0;
}

/* ----------------------------------------------------------- parameter table */

static void add_tensor(ac_model *m, size_t *offset, const char *name, int rows, int cols)
{
    ac_param_info *t = &m->table[m->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = cols > 0 ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols > 0 ? cols : 0;
    t->numel = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    t->offset = *offset;
    t->weight_decay = t->ndim == 2;
    t->sparse = 0;
    *offset += t->numel;
}

static void add_sparse_table(ac_model *m, size_t *offset, int kind, const char *name, int rows,
                             int width)
{
    ac_sparse_rows *r = &m->sparse[kind];
    r->tensor = m->n_tensors;
    r->offset = *offset;
    r->n_table_rows = rows;
    r->width = width;
    add_tensor(m, offset, name, rows, width);
    m->table[r->tensor].sparse = 1;
}

/* Fills the table in state_dict order; returns the parameter count. */
static size_t build_table(ac_model *m)
{
    const ac_model_config *c = &m->cfg;
    int d = c->d_model, ff = c->d_ff;
    size_t off = 0;
    char name[AC_PARAM_NAME_LEN];
    m->n_tensors = 0;
    add_tensor(m, &off, "embed.weight", c->vocab_size, d);
    if (c->positions == AC_POS_LEARNED)
        add_tensor(m, &off, "embed.pos.weight", c->max_len, d);
    add_tensor(m, &off, "embed.norm.weight", d, 0);
    add_tensor(m, &off, "embed.norm.bias", d, 0);
    for (int l = 0; l < c->n_layers; l++) {
        static const struct { const char *suffix; int kind; } layer_tensors[] = {
            {"attn.q.weight", 0}, {"attn.k.weight", 0}, {"attn.v.weight", 0},
            {"attn.out.weight", 0}, {"attn.out.bias", 1}, {"ln1.weight", 1}, {"ln1.bias", 1},
            {"ffn.fc1.weight", 2}, {"ffn.fc1.bias", 3}, {"ffn.fc2.weight", 4},
            {"ffn.fc2.bias", 1}, {"ln2.weight", 1}, {"ln2.bias", 1},
        };
        for (size_t i = 0; i < sizeof layer_tensors / sizeof layer_tensors[0]; i++) {
            snprintf(name, sizeof name, "layers.%d.%s", l, layer_tensors[i].suffix);
            switch (layer_tensors[i].kind) {
            case 0: add_tensor(m, &off, name, d, d); break;   /* [d, d] */
            case 1: add_tensor(m, &off, name, d, 0); break;   /* [d] */
            case 2: add_tensor(m, &off, name, ff, d); break;  /* [ff, d] */
            case 3: add_tensor(m, &off, name, ff, 0); break;  /* [ff] */
            default: add_tensor(m, &off, name, d, ff); break; /* [d, ff] */
            }
        }
    }
    if (c->objective == AC_OBJECTIVE_MASKED_LM) {
        add_tensor(m, &off, "mlm.bias", c->vocab_size, 0); /* the weight is embed.weight */
    } else {
        add_tensor(m, &off, "head.weight", c->n_classes, d);
        add_tensor(m, &off, "head.bias", c->n_classes, 0);
    }
    /* The row-sparse tables last, so that every dense tensor lies before
     * them in one block (the wide table first: the file's order since 0.2). */
    m->dense_params = off;
    for (int k = 0; k < AC_SPARSE_TABLES; k++)
        m->sparse[k].tensor = -1;
    if (ac_model_has_wide(c))
        add_sparse_table(m, &off, AC_SPARSE_WIDE, "head.wide.weight", c->wide_buckets,
                         c->n_classes);
    if (ac_model_has_ngrams(c))
        add_sparse_table(m, &off, AC_SPARSE_NGRAM, "embed.ngram.weight", c->ngram_buckets, d);
    return off;
}

/* Views in table order (the same order build_table uses). */
static void fill_ptrs(ac_param_ptrs *p, float *base, const ac_model *m)
{
    const ac_param_info *t = m->table;
    int i = 0;
    p->embed_w = base + t[i++].offset;
    p->pos_w = m->cfg.positions == AC_POS_LEARNED ? base + t[i++].offset : NULL;
    p->embed_norm_w = base + t[i++].offset;
    p->embed_norm_b = base + t[i++].offset;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        ac_layer_params *lp = &p->layers[l];
        lp->q_w = base + t[i++].offset;
        lp->k_w = base + t[i++].offset;
        lp->v_w = base + t[i++].offset;
        lp->out_w = base + t[i++].offset;
        lp->out_b = base + t[i++].offset;
        lp->ln1_w = base + t[i++].offset;
        lp->ln1_b = base + t[i++].offset;
        lp->fc1_w = base + t[i++].offset;
        lp->fc1_b = base + t[i++].offset;
        lp->fc2_w = base + t[i++].offset;
        lp->fc2_b = base + t[i++].offset;
        lp->ln2_w = base + t[i++].offset;
        lp->ln2_b = base + t[i++].offset;
    }
    const int mlm = m->cfg.objective == AC_OBJECTIVE_MASKED_LM;
    p->head_w = mlm ? NULL : base + t[i++].offset;
    p->head_b = mlm ? NULL : base + t[i++].offset;
    p->wide_w = ac_model_has_wide(&m->cfg) ? base + t[i++].offset : NULL;
    p->mlm_bias = mlm ? base + t[i++].offset : NULL;
    p->ngram_w = ac_model_has_ngrams(&m->cfg) ? base + t[i++].offset : NULL;
}

int ac_model_create(ac_model *m, const ac_model_config *cfg, ac_err *err)
{
    memset(m, 0, sizeof *m);
    if (ac_model_config_validate(cfg, err))
        return -1;
    if (cfg->wide_order == AC_WIDE_ORDER_AUTO)
        return ac_err_set(err, "model.wide_order: \"auto\" is chosen by training; a model needs "
                               "a number from 0 to 3");
    if (cfg->wide_buckets == AC_WIDE_BUCKETS_AUTO)
        return ac_err_set(err, "model.wide_buckets: \"auto\" is chosen by training; a model "
                               "needs a number");
    m->cfg = *cfg;
    int max_tensors = 5 + 13 * cfg->n_layers + 3;
    m->table = calloc((size_t)max_tensors, sizeof *m->table);
    if (!m->table)
        return ac_err_set(err, "model: out of memory for the parameter table");
    /* Ranges in validate keep V*d and T*d far below SIZE_MAX on 64-bit;
     * on 32-bit the calloc below fails cleanly instead of overflowing. */
    m->n_params = build_table(m);
    m->params = calloc(m->n_params, sizeof(float));
    m->grads = calloc(m->n_params, sizeof(float));
    m->pos_table = calloc((size_t)cfg->max_len * (size_t)cfg->d_model, sizeof(float));
    int lists_failed = 0;
    for (int k = 0; k < AC_SPARSE_TABLES; k++) {
        ac_sparse_rows *r = &m->sparse[k];
        if (r->tensor < 0)
            continue;
        r->mark = calloc((size_t)r->n_table_rows, 1);
        r->rows = malloc((size_t)r->n_table_rows * sizeof *r->rows);
        lists_failed |= !r->mark || !r->rows;
    }
    if (!m->params || !m->grads || !m->pos_table || lists_failed) {
        size_t n = m->n_params;
        ac_model_free(m);
        return ac_err_set(err, "model: out of memory for %zu parameters", n);
    }
    fill_ptrs(&m->p, m->params, m);
    fill_ptrs(&m->g, m->grads, m);
    if (cfg->positions == AC_POS_SINUSOIDAL)
        positions_table_fill(m->pos_table, cfg->max_len, cfg->d_model);
    return 0;
}

/* Matrices (Linear and embedding weights): normal(0, 0.02), tensor i drawing
 * element j from ac_rng_normal(ac_rng_key(seed, i), j), so every tensor's
 * values depend only on (seed, its index), not on the other shapes.
 * Biases: 0. LayerNorm gains: 1 (their biases are 1-D tensors named ".bias": 0). */
void ac_model_init_weights(ac_model *m, uint64_t seed)
{
    for (int i = 0; i < m->n_tensors; i++) {
        const ac_param_info *t = &m->table[i];
        float *w = m->params + t->offset;
        size_t len = strlen(t->name);
        int is_gain = t->ndim == 1 && len >= 7 && strcmp(t->name + len - 7, ".weight") == 0;
        if (t->sparse) {
            /* The row-sparse tables (n-grams, wide path) start as a no-op (as in fastText). */
            memset(w, 0, t->numel * sizeof *w);
        } else if (t->ndim == 2) {
            uint64_t key = ac_rng_key(seed, (uint64_t)i);
            for (size_t j = 0; j < t->numel; j++)
                w[j] = 0.02f * ac_rng_normal(key, j);
        } else {
            for (size_t j = 0; j < t->numel; j++)
                w[j] = is_gain ? 1.0f : 0.0f;
        }
    }
}

void ac_model_adopt_params(ac_model *m, float *params, void *mapping, size_t mapping_len)
{
    if (m->params_mapping)
        munmap(m->params_mapping, m->params_mapping_len);
    else
        free(m->params);
    m->params = params;
    m->params_mapping = mapping;
    m->params_mapping_len = mapping_len;
    fill_ptrs(&m->p, m->params, m);
}

void ac_model_view(ac_model *view, const ac_model *m)
{
    *view = *m;
    /* its own forward state; no gradients, no backward */
    view->grads = NULL;
    memset(&view->g, 0, sizeof view->g);
    for (int k = 0; k < AC_SPARSE_TABLES; k++) {
        view->sparse[k].mark = NULL;
        view->sparse[k].rows = NULL;
        view->sparse[k].n_rows = 0;
    }
    memset(&view->act, 0, sizeof view->act);
    memset(&view->profile, 0, sizeof view->profile);
    view->last_B = 0;
    view->last_ids = view->last_lengths = view->last_labels = NULL;
}

void ac_model_view_free(ac_model *view)
{
    if (!view)
        return;
    free(view->act.mem);
    memset(view, 0, sizeof *view);
}

int ac_model_find_tensor(const ac_model *m, const char *name)
{
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->table[i].name, name) == 0)
            return i;
    return -1;
}

void ac_model_free(ac_model *m)
{
    if (!m)
        return;
    free(m->table);
    if (m->params_mapping)
        munmap(m->params_mapping, m->params_mapping_len);
    else
        free(m->params);
    free(m->grads);
    free(m->pos_table);
    for (int k = 0; k < AC_SPARSE_TABLES; k++) {
        free(m->sparse[k].mark);
        free(m->sparse[k].rows);
    }
    free(m->act.mem);
    ac_quant_free(m->quant);
    memset(m, 0, sizeof *m);
}



/* --------------------------------------------------------------- activations */

/* Hands out aligned pieces of one block. With base == NULL it only counts,
 * so the size computation and the pointer assignment are the same code. */
typedef struct {
    float *base;
    size_t used;   /* floats */
    int overflow;
} carver;

static size_t mul_checked(size_t a, size_t b, int *overflow)
{
    if (a != 0 && b > SIZE_MAX / a) {
        *overflow = 1;
        return 0;
    }
    return a * b;
}

static float *carve(carver *c, size_t a, size_t b, size_t e)
{
    size_t n = mul_checked(mul_checked(a, b, &c->overflow), e, &c->overflow);
    size_t rounded = n + (ACT_ALIGN_FLOATS - n % ACT_ALIGN_FLOATS) % ACT_ALIGN_FLOATS;
    if (rounded < n || c->used > SIZE_MAX - rounded)
        c->overflow = 1;
    if (c->overflow)
        return NULL;
    float *p = c->base ? c->base + c->used : NULL;
    c->used += rounded;
    return p;
}

/* Lays out every activation buffer for (B, T); returns the float count or 0 on overflow. */
static size_t layout_activations(ac_activations *a, const ac_model_config *cfg, size_t B, size_t T,
                                 float *base)
{
    carver c = {base, 0, 0};
    size_t N = mul_checked(B, T, &c.overflow);
    size_t d = (size_t)cfg->d_model, ff = (size_t)cfg->d_ff, C = (size_t)cfg->n_classes;
    size_t BHTT = mul_checked(mul_checked(B, (size_t)cfg->n_heads, &c.overflow),
                              mul_checked(T, T, &c.overflow), &c.overflow);
    a->embed_sum = carve(&c, N, d, 1);
    a->dropped_ids = (int32_t *)(void *)carve(&c, N, 1, 1);
    a->ngram_ids = ac_model_has_ngrams(cfg)
                       ? (int32_t *)(void *)carve(&c, N, (size_t)(cfg->ngram_order - 1), 1)
                       : NULL;
    a->embed_ln = carve(&c, N, d, 1);
    a->embed_mean = carve(&c, N, 1, 1);
    a->embed_rstd = carve(&c, N, 1, 1);
    a->embed_out = carve(&c, N, d, 1);
    a->embed_mask = carve(&c, N, d, 1);
    for (int l = 0; l < cfg->n_layers; l++) {
        a->qkv[l] = carve(&c, N, 3 * d, 1);
        a->probs[l] = carve(&c, BHTT, 1, 1);
        a->attn[l] = carve(&c, N, d, 1);
        a->attn_proj[l] = carve(&c, N, d, 1);
        a->attn_mask[l] = carve(&c, N, d, 1);
        a->res1[l] = carve(&c, N, d, 1);
        a->ln1[l] = carve(&c, N, d, 1);
        a->ln1_mean[l] = carve(&c, N, 1, 1);
        a->ln1_rstd[l] = carve(&c, N, 1, 1);
        a->fc1[l] = carve(&c, N, ff, 1);
        a->relu[l] = carve(&c, N, ff, 1);
        a->fc2[l] = carve(&c, N, d, 1);
        a->ffn_mask[l] = carve(&c, N, d, 1);
        a->res2[l] = carve(&c, N, d, 1);
        a->ln2[l] = carve(&c, N, d, 1);
        a->ln2_mean[l] = carve(&c, N, 1, 1);
        a->ln2_rstd[l] = carve(&c, N, 1, 1);
    }
    a->pooled = carve(&c, B, d, 1);
    a->pool_argmax = (int32_t *)(void *)carve(&c, B, d, 1);
    a->pooled_drop = carve(&c, B, d, 1);
    a->pooled_mask = carve(&c, B, d, 1);
    a->logits = carve(&c, B, C, 1);
    a->probs_out = carve(&c, B, C, 1);
    a->losses = carve(&c, B, 1, 1);
    a->wide_ids = ac_model_has_wide(cfg)
                      ? (int32_t *)(void *)carve(&c, N, (size_t)cfg->wide_order, 1)
                      : NULL;
    a->wide_counts = ac_model_has_wide(cfg) ? (int32_t *)(void *)carve(&c, B, 1, 1) : NULL;
    a->scaled_logits = carve(&c, B, C, 1);
    a->grad_a = carve(&c, N, d, 1);
    a->grad_b = carve(&c, N, d, 1);
    a->grad_c = carve(&c, N, d, 1);
    a->grad_ff = carve(&c, N, ff, 1);
    a->grad_fc1 = carve(&c, N, ff, 1);
    a->grad_qkv = carve(&c, N, 3 * d, 1);
    a->attn_slots = omp_get_max_threads();
    a->attn_scratch =
        carve(&c, attention_scratch_floats((int)T, (int)d, cfg->n_heads, a->attn_slots), 1, 1);
    a->grad_pooled = carve(&c, B, d, 1);
    a->grad_logits = carve(&c, B, C, 1);
    return c.overflow ? 0 : c.used;
}

size_t ac_model_activation_bytes(const ac_model_config *cfg, int B, int T)
{
    if (B < 1 || T < 1 || cfg->n_layers < 0 || cfg->n_layers > AC_MAX_LAYERS)
        return SIZE_MAX;
    ac_activations scratch;
    size_t n = layout_activations(&scratch, cfg, (size_t)B, (size_t)T, NULL);
    if (n == 0 || n > SIZE_MAX / sizeof(float))
        return SIZE_MAX;
    return n * sizeof(float);
}

int ac_model_alloc_activations(ac_model *m, int B, int T, ac_err *err)
{
    if (B < 1)
        return ac_err_set(err, "model: batch size must be at least 1 (got %d)", B);
    if (T < 1 || T > m->cfg.max_len)
        return ac_err_set(err, "model: sequence length %d outside 1..max_len (%d)", T,
                          m->cfg.max_len);
    int want_B = B > m->act.max_B ? B : m->act.max_B;
    int want_T = T > m->act.max_T ? T : m->act.max_T;
    /* The layers index rows with int. */
    if ((size_t)want_B * (size_t)want_T > (size_t)INT_MAX)
        return ac_err_set(err, "model: batch %d x %d tokens is too large", want_B, want_T);
    if (m->act.mem && want_B == m->act.max_B && want_T == m->act.max_T)
        return 0;
    size_t bytes = ac_model_activation_bytes(&m->cfg, want_B, want_T);
    if (bytes == SIZE_MAX)
        return ac_err_set(err, "model: activations for batch %d x %d tokens overflow memory sizes",
                          want_B, want_T);
    /* bytes is a multiple of 64 (every piece is), as aligned_alloc wants. */
    float *mem = aligned_alloc(ACT_ALIGN_FLOATS * sizeof(float), bytes);
    if (!mem)
        return ac_err_set(err, "model: out of memory for activations (%.1f MiB for batch %d x %d)",
                          (double)bytes / 1048576.0, want_B, want_T);
    ac_advise_huge_pages(mem, bytes);
    free(m->act.mem);
    memset(&m->act, 0, sizeof m->act);
    m->act.n_floats = layout_activations(&m->act, &m->cfg, (size_t)want_B, (size_t)want_T, mem);
    m->act.mem = mem;
    m->act.max_B = want_B;
    m->act.max_T = want_T;
    /* A forward before the reallocation can no longer be back-propagated. */
    m->last_B = 0;
    return 0;
}

/* ------------------------------------------------------------------ profile */

static const char *const part_names[AC_N_PARTS] = {
    "embedding", "q/k/v projection", "attention", "output projection", "add & norm", "feed-forward",
    "pooling + head",
};

const char *ac_model_part_name(int part)
{
    return part >= 0 && part < AC_N_PARTS ? part_names[part] : "?";
}

static double prof_start(const ac_model *m) { return m->profile.enabled ? ac_now_s() : 0.0; }

/* Adds the time since *t to part and restarts the clock. */
static void prof_lap(ac_model *m, double *t, double *parts, int part)
{
    if (!m->profile.enabled)
        return;
    double t1 = ac_now_s();
    parts[part] += t1 - *t;
    *t = t1;
}

/* ------------------------------------------------------------------ forward */

static int dropout_active(const ac_model *m, int train)
{
    return train && m->cfg.dropout > 0.0f;
}

/* Input of layer l (the output of the embedding block for l == 0). */
static const float *layer_input(const ac_model *m, int l, int drop)
{
    if (l > 0)
        return m->act.ln2[l - 1];
    return drop ? m->act.embed_out : m->act.embed_ln;
}

static void add_into(float *out, const float *in, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] += in[i];
}

/* Zeroing in fixed pieces shared by the threads (these buffers are megabytes). */
#define ZERO_PIECE 65536
static void zero_floats(float *p, size_t n)
{
    long pieces = (long)((n + ZERO_PIECE - 1) / ZERO_PIECE);
#pragma omp parallel for schedule(static) if (pieces > 1)
    for (long i = 0; i < pieces; i++) {
        size_t begin = (size_t)i * ZERO_PIECE;
        memset(p + begin, 0, sizeof(float) * (n - begin < ZERO_PIECE ? n - begin : ZERO_PIECE));
    }
}

void ac_model_zero_grad(ac_model *m)
{
    zero_floats(m->grads, m->dense_params);
    for (int k = 0; k < AC_SPARSE_TABLES; k++) {
        ac_sparse_rows *r = &m->sparse[k];
        const size_t w = (size_t)r->width;
        for (int i = 0; i < r->n_rows; i++) {
            memset(m->grads + r->offset + (size_t)r->rows[i] * w, 0, w * sizeof(float));
            r->mark[r->rows[i]] = 0;
        }
        r->n_rows = 0;
    }
}

/* Lists the touched rows (serial, first-touch order). */
static void mark_rows(ac_sparse_rows *r, const int32_t *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!r->mark[rows[i]]) {
            r->mark[rows[i]] = 1;
            r->rows[r->n_rows++] = rows[i];
        }
}

/* The n-gram rows the last backward wrote. */
static void mark_ngram_rows(ac_model *m, const int32_t *lengths, int B, int T)
{
    const size_t per_pos = (size_t)m->cfg.ngram_order - 1;
    for (int b = 0; b < B; b++)
        mark_rows(&m->sparse[AC_SPARSE_NGRAM], m->act.ngram_ids + (size_t)b * T * per_pos,
                  (size_t)lengths[b] * per_pos);
}

/* The wide rows the last backward wrote: every item's distinct buckets. */
static void mark_wide_rows(ac_model *m, int B, int T)
{
    const size_t stride = (size_t)T * (size_t)m->cfg.wide_order;
    for (int b = 0; b < B; b++)
        mark_rows(&m->sparse[AC_SPARSE_WIDE], m->act.wide_ids + (size_t)b * stride,
                  (size_t)m->act.wide_counts[b]);
}

/* Every index the layers will use is in range: an id outside the vocabulary,
 * a length outside 1..T or a label outside 0..C-1 would read out of bounds. */
static int batch_valid(const ac_model_config *c, const int32_t *ids, const int32_t *lengths,
                       const int32_t *labels, int B, int T)
{
    for (size_t i = 0; ids && i < (size_t)B * (size_t)T; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            return 0;
    for (int b = 0; b < B; b++) {
        if (lengths[b] < 1 || lengths[b] > T)
            return 0;
        if (labels && (labels[b] < 0 || labels[b] >= c->n_classes))
            return 0;
    }
    return 1;
}

/* Token rows + positions (+ the hashed n-gram rows) of ids into out
 * [B, T, d]; the n-gram buckets land in act.ngram_ids (kept for backward). */
static void embed_ids(ac_model *m, float *out, const int32_t *ids, const int32_t *lengths, int B,
                      int T)
{
    const ac_model_config *c = &m->cfg;
    const int d = c->d_model;
    ac_model_quant_embed_rows(m, ids, (size_t)B * (size_t)T);
    embedding_forward(out, ids, m->p.embed_w, m->p.pos_w ? m->p.pos_w : m->pos_table, B, T, d);
    if (m->p.ngram_w) {
        ngram_buckets_compute(m->act.ngram_ids, ids, lengths, B, T, c->ngram_order,
                              c->ngram_buckets);
        ngram_forward(out, m->act.ngram_ids, m->p.ngram_w, lengths, B, T, d, c->ngram_order - 1);
    }
}

/* The classifier of a quantized model, [B, d] x [C, d]^T + bias in plain C
 * (a fixed order of sums: the same bits everywhere): so tiny a product
 * needs no OpenBLAS, which a quantized model's prediction then never loads
 * (ac_model_inference_needs_blas). */
static void head_forward_plain(float *out, const float *in, const float *w, const float *bias,
                               int B, int d, int C)
{
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            float sum = 0.0f;
            for (int k = 0; k < d; k++)
                sum += in[(size_t)b * d + k] * w[(size_t)c * d + k];
            out[(size_t)b * C + c] = sum + bias[c];
        }
}

int ac_model_inference_needs_blas(const ac_model *m)
{
    const ac_quant *q = m->quant;
    if (!q || m->cfg.objective != AC_OBJECTIVE_CLASSIFICATION || q->n_layers != m->cfg.n_layers)
        return 1;
    for (int l = 0; l < q->n_layers; l++)
        for (int k = 0; k < AC_QL_PER_LAYER; k++)
            if (!q->linear[l][k].packed)
                return 1;
    return 0;
}

static int quantized_layer(const ac_model *m, int l, int which)
{
    const ac_quant *q = m->quant;
    return q && l < q->n_layers && q->linear[l][which].packed;
}

/* Linear layer `which` (AC_QL_*) of encoder layer l: in int8 in a quantized
 * model (attnctl/quant.h), else the F32 layer. */
static void layer_linear(const ac_model *m, int l, int which, float *out, const float *in,
                         const float *w, const float *bias, int N, int in_dim, int out_dim)
{
    if (quantized_layer(m, l, which))
        ac_qlinear_forward(out, in, &m->quant->linear[l][which], bias, N, m->quant->kernel);
    else
        linear_forward(out, in, w, bias, N, in_dim, out_dim);
}

/* The same followed by a ReLU into relu_out. The F32 layer writes its
 * pre-activations to pre (kept for nothing else: relu_backward reads the
 * output); the int8 layer applies the ReLU as it writes and leaves pre. */
static void layer_linear_relu(const ac_model *m, int l, int which, float *relu_out, float *pre,
                              const float *in, const float *w, const float *bias, int N,
                              int in_dim, int out_dim)
{
    if (quantized_layer(m, l, which)) {
        ac_qlinear_relu_forward(relu_out, in, &m->quant->linear[l][which], bias, N,
                                m->quant->kernel);
    } else {
        linear_forward(pre, in, w, bias, N, in_dim, out_dim);
        relu_forward(relu_out, pre, (size_t)N * (size_t)out_dim);
    }
}

/* The encoder after act.embed_sum, shared by every objective: the embedding
 * LayerNorm (and dropout) and the layers; the output is layer_input(m, L,
 * drop). Records the forward's state for backward (no labels yet). *t is
 * the profile clock started by the caller. */
static void encoder_from_embed_sum(ac_model *m, const int32_t *ids, const int32_t *lengths, int B,
                                   int T, int train, uint64_t dropout_key, int maps, double *t_clock)
{
    const ac_model_config *c = &m->cfg;
    ac_activations *a = &m->act;
    const int d = c->d_model, H = c->n_heads, ff = c->d_ff, L = c->n_layers;
    const int N = B * T;
    const size_t Nd = (size_t)N * d;
    const float p = c->dropout;
    const int drop = dropout_active(m, train);
    const float scale = 1.0f / sqrtf((float)(d / H));
    double t = *t_clock;

    /* quantized models: the faster LayerNorm (another rounding) */
    void (*const layernorm)(float *, float *, float *, const float *, const float *,
                            const float *, int, int, float) =
        m->quant ? layernorm_forward_lanes : layernorm_forward;
    layernorm(a->embed_ln, a->embed_mean, a->embed_rstd, a->embed_sum, m->p.embed_norm_w,
                      m->p.embed_norm_b, N, d, c->ln_eps);
    if (drop)
        dropout_forward(a->embed_out, a->embed_mask, a->embed_ln, p, Nd,
                        ac_rng_key(dropout_key, DROP_SITE_EMBED));
    prof_lap(m, &t, m->profile.forward, AC_PART_EMBED);

    for (int l = 0; l < L; l++) {
        const ac_layer_params *w = &m->p.layers[l];
        const float *x = layer_input(m, l, drop);
        float *qkv = a->qkv[l];
        layer_linear(m, l, AC_QL_QKV, qkv, x, w->q_w, NULL, N, d, 3 * d);
        prof_lap(m, &t, m->profile.forward, AC_PART_QKV);
        if (m->quant && m->quant->n_layers > 0)
            attention_forward_int8(a->attn[l], maps ? a->probs[l] : NULL, a->attn_scratch,
                                   a->attn_slots, qkv, qkv + d, qkv + 2 * d, 3 * d, lengths, B,
                                   T, d, H, scale,
                                   ac_qkernel_attention(m->quant->kernel));
        else
            attention_forward(a->attn[l], maps ? a->probs[l] : NULL,
                              a->attn_scratch, a->attn_slots, qkv, qkv + d, qkv + 2 * d, 3 * d,
                              lengths, B, T, d, H, scale);
        prof_lap(m, &t, m->profile.forward, AC_PART_ATTENTION);
        layer_linear(m, l, AC_QL_OUT, a->attn_proj[l], a->attn[l], w->out_w, w->out_b, N, d, d);
        prof_lap(m, &t, m->profile.forward, AC_PART_ATTN_OUT);
        if (drop) {
            dropout_forward(a->res1[l], a->attn_mask[l], a->attn_proj[l], p, Nd,
                            ac_rng_key(dropout_key, DROP_SITE_ATTN(l)));
            add_into(a->res1[l], x, Nd);
        } else {
            residual_forward(a->res1[l], x, a->attn_proj[l], Nd);
        }
        layernorm(a->ln1[l], a->ln1_mean[l], a->ln1_rstd[l], a->res1[l], w->ln1_w,
                          w->ln1_b, N, d, c->ln_eps);
        prof_lap(m, &t, m->profile.forward, AC_PART_ADD_NORM);
        layer_linear_relu(m, l, AC_QL_FC1, a->relu[l], a->fc1[l], a->ln1[l], w->fc1_w,
                          w->fc1_b, N, d, ff);
        layer_linear(m, l, AC_QL_FC2, a->fc2[l], a->relu[l], w->fc2_w, w->fc2_b, N, ff, d);
        prof_lap(m, &t, m->profile.forward, AC_PART_FFN);
        if (drop) {
            dropout_forward(a->res2[l], a->ffn_mask[l], a->fc2[l], p, Nd,
                            ac_rng_key(dropout_key, DROP_SITE_FFN(l)));
            add_into(a->res2[l], a->ln1[l], Nd);
        } else {
            residual_forward(a->res2[l], a->ln1[l], a->fc2[l], Nd);
        }
        layernorm(a->ln2[l], a->ln2_mean[l], a->ln2_rstd[l], a->res2[l], w->ln2_w,
                          w->ln2_b, N, d, c->ln_eps);
        prof_lap(m, &t, m->profile.forward, AC_PART_ADD_NORM);
    }
    *t_clock = t;
    m->last_B = B;
    m->last_T = T;
    m->last_train = train;
    m->last_maps_kept = maps;
    m->last_ids = ids;
    m->last_lengths = lengths;
    m->last_labels = NULL;
}

/* The classifier's head on the encoder's output: pooling, the head and the
 * loss (with labels) or the probabilities. */
static float classifier_head_forward(ac_model *m, const int32_t *lengths, const int32_t *labels,
                                     int B, int T, int train, uint64_t dropout_key, double t)
{
    const ac_model_config *c = &m->cfg;
    ac_activations *a = &m->act;
    const int d = c->d_model, L = c->n_layers, C = c->n_classes;
    const float p = c->dropout;
    const int drop = dropout_active(m, train);

    pool_forward(a->pooled, a->pool_argmax, layer_input(m, L, drop), lengths, B, T, d, c->pooling);
    const float *head_in = a->pooled;
    if (drop) {
        dropout_forward(a->pooled_drop, a->pooled_mask, a->pooled, p, (size_t)B * d,
                        ac_rng_key(dropout_key, DROP_SITE_POOLED));
        head_in = a->pooled_drop;
    }
    if (m->quant)
        head_forward_plain(a->logits, head_in, m->p.head_w, m->p.head_b, B, d, C);
    else
        linear_forward(a->logits, head_in, m->p.head_w, m->p.head_b, B, d, C);
    /* Without ids (a forward from embed_sum) there are no n-grams: the
     * logits are the encoder's alone (see ac_model_forward_embedded). */
    if (m->p.wide_w && m->last_ids) {
        wide_buckets_compute(a->wide_ids, a->wide_counts, m->last_ids, lengths, B, T,
                             c->wide_order, c->wide_buckets);
        if (m->quant && m->quant->wide.present)
            ac_wide_sparse_forward(a->logits, &m->quant->wide, a->wide_ids, a->wide_counts, B, T,
                                   c->wide_order, c->wide_norm);
        else
            wide_forward(a->logits, a->wide_ids, a->wide_counts, m->p.wide_w, B, T,
                         c->wide_order, C, c->wide_norm);
    }
    m->last_labels = labels;
    float loss = 0.0f;
    /* Outside training, probabilities (and the loss) use the fitted temperature. */
    const float *scored = a->logits;
    if (!train && c->temperature > 0.0f && c->temperature != 1.0f) {
        for (int i = 0; i < B * C; i++)
            a->scaled_logits[i] = a->logits[i] / c->temperature;
        scored = a->scaled_logits;
    }
    if (labels)
        loss = crossentropy_forward(a->losses, a->probs_out, scored, labels, B, C,
                                    train ? m->label_smoothing : 0.0f);
    else
        softmax_rows(a->probs_out, scored, B, C);
    prof_lap(m, &t, m->profile.forward, AC_PART_HEAD);
    return loss;
}

/* The batch checked (-1 and nothing computed when it is out of range), token
 * dropout, the embeddings and the encoder: everything before a head. */
static int encoder_forward(ac_model *m, const int32_t *ids, const int32_t *lengths,
                           const int32_t *labels, int B, int T, int train, uint64_t dropout_key,
                           double *t)
{
    const ac_model_config *c = &m->cfg;
    ac_activations *a = &m->act;
    if (!a->mem || B < 1 || T < 1 || B > a->max_B || T > a->max_T ||
        !batch_valid(c, ids, lengths, labels, B, T)) {
        m->last_B = 0; /* nothing for backward to differentiate */
        return -1;
    }
    const int N = B * T;
    /* Attention maps (B*H*T*T floats a layer) are stored only when a backward
     * may follow or the caller asked for them: evaluation skips the traffic. */
    const int maps = train || m->keep_attention;

    if (train && m->token_dropout > 0.0f) {
        /* Token dropout: a share of the words become <unk> (their n-grams
         * change with them), so no single word or phrase carries a review. */
        uint64_t key = ac_rng_key(dropout_key, DROP_SITE_TOKENS);
        for (int i = 0; i < N; i++)
            a->dropped_ids[i] = ids[i] > AC_UNK_ID_MODEL &&
                                        !(c->pooling == AC_POOL_CLS && i % T == 0) &&
                                        ac_rng_uniform(key, (uint64_t)i) < m->token_dropout
                                    ? AC_UNK_ID_MODEL
                                    : ids[i];
        ids = a->dropped_ids;
    }
    embed_ids(m, a->embed_sum, ids, lengths, B, T);
    encoder_from_embed_sum(m, ids, lengths, B, T, train, dropout_key, maps, t);
    return 0;
}

float ac_model_forward(ac_model *m, const int32_t *ids, const int32_t *lengths,
                       const int32_t *labels, int B, int T, int train, uint64_t dropout_key)
{
    double t = prof_start(m);
    if (m->cfg.objective != AC_OBJECTIVE_CLASSIFICATION ||
        encoder_forward(m, ids, lengths, labels, B, T, train, dropout_key, &t) != 0) {
        m->last_B = 0; /* nothing for backward to differentiate */
        return NAN;
    }
    return classifier_head_forward(m, lengths, labels, B, T, train, dropout_key, t);
}

int ac_model_encoder_forward(ac_model *m, const int32_t *ids, const int32_t *lengths, int B, int T,
                             int train, uint64_t dropout_key)
{
    double t = prof_start(m);
    return encoder_forward(m, ids, lengths, NULL, B, T, train, dropout_key, &t);
}

const float *ac_model_encoder_output(const ac_model *m)
{
    return layer_input(m, m->cfg.n_layers, dropout_active(m, m->last_train));
}

int ac_model_embed(ac_model *m, float *out, const int32_t *ids, const int32_t *lengths, int B,
                   int T)
{
    const ac_activations *a = &m->act;
    if (!a->mem || B < 1 || T < 1 || B > a->max_B || T > a->max_T ||
        !batch_valid(&m->cfg, ids, lengths, NULL, B, T))
        return -1;
    m->last_B = 0; /* act.ngram_ids (and maybe act.embed_sum) no longer match the last forward */
    embed_ids(m, out, ids, lengths, B, T);
    return 0;
}

float ac_model_forward_embedded(ac_model *m, const float *embed_sum, const int32_t *lengths,
                                const int32_t *labels, int B, int T)
{
    ac_activations *a = &m->act;
    if (m->cfg.objective != AC_OBJECTIVE_CLASSIFICATION || !a->mem || B < 1 || T < 1 ||
        B > a->max_B || T > a->max_T || !batch_valid(&m->cfg, NULL, lengths, labels, B, T)) {
        m->last_B = 0;
        return NAN;
    }
    double t = prof_start(m);
    size_t n = (size_t)B * (size_t)T * (size_t)m->cfg.d_model;
    if (embed_sum != a->embed_sum)
        memmove(a->embed_sum, embed_sum, n * sizeof *embed_sum);
    encoder_from_embed_sum(m, NULL, lengths, B, T, 0, 0, 1, &t);
    return classifier_head_forward(m, lengths, labels, B, T, 0, 0, t);
}

/* ----------------------------------------------------------------- backward */

/* The encoder's backward, from dL/d(output) in act.grad_a (which it then
 * overwrites) down to the embedding block. g: where parameter gradients are
 * added (NULL: none are computed). d_embed_sum == NULL: the gradient of the
 * embedding sum is scattered into the token, position and n-gram tables of
 * g; else it is added into d_embed_sum [B, T, d] and the tables are left
 * alone.
 * Every scratch gradient is zeroed before a layer backward adds into it.
 * Pad positions: the heads send them no gradient, attention gives pad keys
 * probability 0 and pad queries zero rows, LayerNorm/Linear map a zero row to
 * a zero row, and the embedding backward skips pads, so pads add nothing. */
static void encoder_backward(ac_model *m, const ac_param_ptrs *g, float *d_embed_sum, double t)
{
    static const ac_layer_params no_layer_grads; /* all NULL */
    const ac_model_config *c = &m->cfg;
    ac_activations *a = &m->act;
    const int B = m->last_B, T = m->last_T;
    const int d = c->d_model, H = c->n_heads, ff = c->d_ff, L = c->n_layers;
    const int N = B * T;
    const size_t Nd = (size_t)N * d, Nff = (size_t)N * ff;
    const int drop = dropout_active(m, m->last_train);
    const float scale = 1.0f / sqrtf((float)(d / H));
    const int32_t *lengths = m->last_lengths;
    float *dx = a->grad_a; /* gradient w.r.t. the current layer's output */

    for (int l = L - 1; l >= 0; l--) {
        const ac_layer_params *w = &m->p.layers[l];
        const ac_layer_params *gw = g ? &g->layers[l] : &no_layer_grads;
        const float *x = layer_input(m, l, drop);
        float *dh = a->grad_b; /* gradient w.r.t. ln1 output (h), then reused */

        /* y = LN2(res2), res2 = h + dropout(fc2(relu(fc1(h)))) */
        zero_floats(dh, Nd);
        layernorm_backward(dh, gw->ln2_w, gw->ln2_b, dx, a->res2[l], w->ln2_w, a->ln2_mean[l],
                           a->ln2_rstd[l], N, d);
        const float *dfc2 = dh; /* the residual passes the same gradient to both branches */
        if (drop) {
            zero_floats(a->grad_c, Nd);
            dropout_backward(a->grad_c, dh, a->ffn_mask[l], Nd);
            dfc2 = a->grad_c;
        }
        prof_lap(m, &t, m->profile.backward, AC_PART_ADD_NORM);
        zero_floats(a->grad_ff, Nff);
        linear_backward(a->grad_ff, gw->fc2_w, gw->fc2_b, dfc2, a->relu[l], w->fc2_w, N, ff, d);
        zero_floats(a->grad_fc1, Nff);
        relu_backward(a->grad_fc1, a->grad_ff, a->relu[l], Nff);
        /* dh already holds the residual path; the FFN path adds to it. */
        linear_backward(dh, gw->fc1_w, gw->fc1_b, a->grad_fc1, a->ln1[l], w->fc1_w, N, d, ff);
        prof_lap(m, &t, m->profile.backward, AC_PART_FFN);

        /* h = LN1(res1), res1 = x + dropout(out(attention(q, k, v))) */
        float *dres1 = dx; /* dx of this layer's output is no longer needed */
        zero_floats(dres1, Nd);
        layernorm_backward(dres1, gw->ln1_w, gw->ln1_b, dh, a->res1[l], w->ln1_w, a->ln1_mean[l],
                           a->ln1_rstd[l], N, d);
        const float *dproj = dres1;
        if (drop) {
            zero_floats(a->grad_c, Nd);
            dropout_backward(a->grad_c, dres1, a->attn_mask[l], Nd);
            dproj = a->grad_c;
        }
        prof_lap(m, &t, m->profile.backward, AC_PART_ADD_NORM);
        float *dattn = a->grad_b; /* dh is consumed by LN1 backward above */
        zero_floats(dattn, Nd);
        linear_backward(dattn, gw->out_w, gw->out_b, dproj, a->attn[l], w->out_w, N, d, d);
        prof_lap(m, &t, m->profile.backward, AC_PART_ATTN_OUT);
        float *dqkv = a->grad_qkv;
        const float *qkv = a->qkv[l];
        zero_floats(dqkv, 3 * Nd);
        attention_backward(dqkv, dqkv + d, dqkv + 2 * d, a->attn_scratch, a->attn_slots, dattn,
                           qkv, qkv + d, qkv + 2 * d, 3 * d, a->probs[l], lengths, B, T, d, H,
                           scale);
        prof_lap(m, &t, m->profile.backward, AC_PART_ATTENTION);
        /* dres1 (= dx) keeps the residual path; the projections add theirs:
         * it becomes the gradient w.r.t. this layer's input. */
        linear_backward(dx, gw->q_w, NULL, dqkv, x, w->q_w, N, d, 3 * d);
        prof_lap(m, &t, m->profile.backward, AC_PART_QKV);
    }

    /* Embedding block: x0 = dropout(LN(emb + pos)). */
    const float *dln = dx;
    if (drop) {
        zero_floats(a->grad_b, Nd);
        dropout_backward(a->grad_b, dx, a->embed_mask, Nd);
        dln = a->grad_b;
    }
    if (d_embed_sum) {
        layernorm_backward(d_embed_sum, g ? g->embed_norm_w : NULL, g ? g->embed_norm_b : NULL,
                           dln, a->embed_sum, m->p.embed_norm_w, a->embed_mean, a->embed_rstd, N,
                           d);
        prof_lap(m, &t, m->profile.backward, AC_PART_EMBED);
        return;
    }
    zero_floats(a->grad_c, Nd);
    layernorm_backward(a->grad_c, g->embed_norm_w, g->embed_norm_b, dln, a->embed_sum,
                       m->p.embed_norm_w, a->embed_mean, a->embed_rstd, N, d);
    embedding_backward(g->embed_w, a->grad_c, m->last_ids, lengths, B, T, d);
    if (m->p.pos_w)
        positions_backward(g->pos_w, a->grad_c, lengths, B, T, d);
    if (m->p.ngram_w) {
        ngram_backward(g->ngram_w, a->grad_c, a->ngram_ids, lengths, B, T, d, c->ngram_order - 1);
        mark_ngram_rows(m, lengths, B, T);
    }
    prof_lap(m, &t, m->profile.backward, AC_PART_EMBED);
}

/* The classifier's backward from act.grad_logits (already filled): its head
 * and pooling into act.grad_a, then the encoder (g and d_embed_sum as for
 * encoder_backward). */
static void backward_from_logits(ac_model *m, const ac_param_ptrs *g, float *d_embed_sum, double t)
{
    const ac_model_config *c = &m->cfg;
    ac_activations *a = &m->act;
    const int B = m->last_B, T = m->last_T;
    const int d = c->d_model, C = c->n_classes;
    const size_t Nd = (size_t)B * T * d;
    const int drop = dropout_active(m, m->last_train);

    if (g && g->wide_w && m->last_ids) {
        wide_backward(g->wide_w, a->grad_logits, a->wide_ids, a->wide_counts, B, T, c->wide_order,
                      C, c->wide_norm);
        if (g == &m->g)
            mark_wide_rows(m, B, T);
    }
    zero_floats(a->grad_pooled, (size_t)B * d);
    if (drop) {
        zero_floats(a->grad_c, (size_t)B * d);
        linear_backward(a->grad_c, g ? g->head_w : NULL, g ? g->head_b : NULL, a->grad_logits,
                        a->pooled_drop, m->p.head_w, B, d, C);
        dropout_backward(a->grad_pooled, a->grad_c, a->pooled_mask, (size_t)B * d);
    } else {
        linear_backward(a->grad_pooled, g ? g->head_w : NULL, g ? g->head_b : NULL,
                        a->grad_logits, a->pooled, m->p.head_w, B, d, C);
    }
    zero_floats(a->grad_a, Nd);
    pool_backward(a->grad_a, a->grad_pooled, a->pool_argmax, m->last_lengths, B, T, d,
                  c->pooling);
    prof_lap(m, &t, m->profile.backward, AC_PART_HEAD);
    encoder_backward(m, g, d_embed_sum, t);
}

void ac_model_backward(ac_model *m)
{
    ac_activations *a = &m->act;
    if (m->last_B < 1 || !m->last_labels || !m->last_maps_kept || !m->last_ids)
        return; /* no forward with ids, labels and attention maps to differentiate */
    double t = prof_start(m);
    zero_floats(a->grad_logits, (size_t)m->last_B * m->cfg.n_classes);
    crossentropy_backward_of_mean(a->grad_logits, a->probs_out, m->last_labels, m->last_B,
                                  m->cfg.n_classes, m->last_train ? m->label_smoothing : 0.0f,
                                  m->mean_rows > 0 ? m->mean_rows : m->last_B);
    backward_from_logits(m, &m->g, NULL, t);
}

void ac_model_encoder_backward(ac_model *m, const float *d_output)
{
    if (m->last_B < 1 || !m->last_maps_kept || !m->last_ids)
        return; /* no forward from ids with attention maps to differentiate */
    if (d_output != m->act.grad_a)
        memcpy(m->act.grad_a, d_output,
               (size_t)m->last_B * m->last_T * m->cfg.d_model * sizeof *d_output);
    encoder_backward(m, &m->g, NULL, prof_start(m));
}

int ac_model_backward_embedded(ac_model *m, const float *dlogits, float *d_embed_sum)
{
    if (m->last_B < 1 || !m->last_maps_kept || m->cfg.objective != AC_OBJECTIVE_CLASSIFICATION)
        return -1;
    double t = prof_start(m);
    memcpy(m->act.grad_logits, dlogits, (size_t)m->last_B * m->cfg.n_classes * sizeof *dlogits);
    backward_from_logits(m, NULL, d_embed_sum, t);
    return 0;
}
