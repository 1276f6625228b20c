/* The whole model: finite differences through every parameter (each pooling,
 * padding in the batch, dropout with a fixed key), the parameter table,
 * initialisation, the allocation-free training step, AdamW, gradient
 * clipping, the learning-rate schedule, thread-count determinism and a
 * training sanity check. */
#include <check.h>
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/attribution.h"
#include "attnctl/infer.h"
#include "attnctl/mlm.h"
#include "attnctl/model.h"
#include "attnctl/optim.h"
#include "attnctl/rng.h"

#include "gradcheck.h"

/* ------------------------------------------------------ allocation counting */

/* The training step must allocate nothing. malloc and friends are replaced
 * (glibc supports that) by wrappers around glibc's own allocator that count
 * calls while `counting` is set; every thread's malloc has to reach the
 * counter, so this test binary keeps two (the library has no such globals).
 * Each call is attributed by its caller's shared object: attnctl's code (in
 * this executable), OpenBLAS, libc on our behalf (strdup, fopen, ...) count as
 * the step's own allocations and must be zero; the OpenMP runtime's internal
 * bookkeeping is counted apart and only printed, because it depends on the
 * runtime and not on our code alone: LLVM's libomp allocates in nearly every
 * parallel region, and GNU libgomp allocates a team for every region it runs
 * with one thread (an `if` clause that is false, or 1 thread).
 * AddressSanitizer owns malloc, so the sanitizer build skips this test. */
#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
#define COUNT_ALLOCATIONS 0
#else
#define COUNT_ALLOCATIONS 1
#include <dlfcn.h>

static atomic_int counting;
static atomic_long own_allocations, runtime_allocations;

static void count_allocation(void *caller)
{
    if (!atomic_load(&counting))
        return;
    Dl_info info;
    if (dladdr(caller, &info) && info.dli_fname &&
        (strstr(info.dli_fname, "libgomp") || strstr(info.dli_fname, "libomp")))
        atomic_fetch_add(&runtime_allocations, 1);
    else
        atomic_fetch_add(&own_allocations, 1);
}

void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);
void __libc_free(void *p);

void *malloc(size_t n)
{
    count_allocation(__builtin_return_address(0));
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t size)
{
    count_allocation(__builtin_return_address(0));
    return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n)
{
    count_allocation(__builtin_return_address(0));
    return __libc_realloc(p, n);
}
void free(void *p)
{
    __libc_free(p);
}
void *aligned_alloc(size_t align, size_t n)
{
    count_allocation(__builtin_return_address(0));
    return __libc_memalign(align, n);
}
void *memalign(size_t align, size_t n)
{
    count_allocation(__builtin_return_address(0));
    return __libc_memalign(align, n);
}
int posix_memalign(void **out, size_t align, size_t n)
{
    count_allocation(__builtin_return_address(0));
    void *p = __libc_memalign(align, n);
    if (!p)
        return 12; /* ENOMEM */
    *out = p;
    return 0;
}
#endif

/* ------------------------------------------------------------------ helpers */

static ac_model_config small_config(ac_pooling pooling, float dropout)
{
    ac_model_config c = {.vocab_size = 20, .max_len = 6, .d_model = 8, .n_heads = 2, .d_ff = 12,
                         .n_layers = 2, .n_classes = 3, .pooling = pooling, .dropout = dropout,
                         .ln_eps = 1e-6f};
    return c;
}

/* Learned positions and hashed uni+bi+trigrams in a small table (so
 * n-grams share rows). */
static ac_model_config with_ngrams_and_positions(ac_model_config c)
{
    c.positions = AC_POS_LEARNED;
    c.ngram_order = 3;
    c.ngram_buckets = 13;
    return c;
}

static void model_make(ac_model *m, const ac_model_config *cfg, int B, int T)
{
    ac_err err;
    ck_assert_msg(ac_model_create(m, cfg, &err) == 0, "%s", err.msg);
    ck_assert_msg(ac_model_alloc_activations(m, B, T, &err) == 0, "%s", err.msg);
}

/* Weights far from the init scale so every gradient carries signal: matrices
 * normal(0, 0.3), LayerNorm gains 1 + normal(0, 0.2), biases normal(0, 0.1). */
static void randomize(ac_model *m, uint64_t seed)
{
    for (int i = 0; i < m->n_tensors; i++) {
        const ac_param_info *t = &m->table[i];
        size_t len = strlen(t->name);
        int gain = t->ndim == 1 && strcmp(t->name + len - 7, ".weight") == 0;
        uint64_t key = ac_rng_key(seed, (uint64_t)i);
        for (size_t j = 0; j < t->numel; j++) {
            float z = ac_rng_normal(key, j);
            m->params[t->offset + j] = t->ndim == 2 ? 0.3f * z : gain ? 1.0f + 0.2f * z : 0.1f * z;
        }
    }
}

/* A padded batch: item b has lengths[b] tokens drawn from 1..V-2; pads hold
 * token V-1, which appears nowhere else, so its embedding row must get no
 * gradient and must not change the loss. */
typedef struct {
    int B, T;
    int32_t ids[64 * 64], lengths[64], labels[64];
} batch;

static void batch_fill(batch *bt, int B, int T, const int32_t *lengths, int V, int C, uint64_t seed)
{
    bt->B = B;
    bt->T = T;
    for (int b = 0; b < B; b++) {
        bt->lengths[b] = lengths[b];
        bt->labels[b] = (int32_t)ac_rng_below(seed, 1000 + (uint64_t)b, (uint64_t)C);
        for (int t = 0; t < T; t++)
            bt->ids[b * T + t] = t < lengths[b]
                                     ? 1 + (int32_t)ac_rng_below(seed, (uint64_t)(b * T + t),
                                                                 (uint64_t)V - 2)
                                     : V - 1;
    }
}

/* --------------------------------------------------- whole-model gradients */

/* Step and tolerance of the whole-model check (gc_defaults(): atol 1e-4,
 * rtol 2e-3; h 3e-3). The forward runs in float, the loss (from the float
 * logits) and the difference quotient in double. Error sources of the slope:
 *  - float rounding: a perturbation moves every activation downstream, each
 *    rounded to ~1e-7 relative; logits of size 1-4 alone are off by up to
 *    ~2e-7 per evaluation, ~1e-4 in the slope at h 1e-3 (measured there: worst
 *    elements at 0.8x (gcc) and 0.96x (clang) of the tolerance: too close);
 *  - truncation, h^2/6 times the third derivative: at h 1e-2 it dominates for
 *    the largest gradients (0.38x on embed.weight, max pooling).
 * At h 3e-3 both are small: worst element ~0.3x of the tolerance.
 * Kinks (a ReLU input changing sign, another position winning a max pooling)
 * make central differences meaningless; they are not guessed from slopes but
 * detected exactly: the loss function records the ReLU sign pattern of the
 * rows that reach the loss and the max-pooling winners of each evaluation, and
 * an element whose two evaluations differ there is a kink, skipped and
 * counted (a handful at h 3e-3). A wrong backward term is off by O(gradient)
 * (1e-3..1e-1 here), tens to hundreds of times the tolerance. */
#define WHOLE_MODEL_H 3e-3

typedef struct {
    ac_model *m;
    const batch *bt;
    int train;
    uint64_t key;
    int calls;
    uint64_t pattern[2]; /* kink pattern of the last two evaluations */
    ac_mlm *mlm;         /* a masked-LM model: its head, masked input and targets (else NULL) */
    int n_masked;
} fd_ctx;

static uint64_t fnv_add(uint64_t h, uint64_t v)
{
    return (h ^ v) * 0x100000001b3ULL;
}

/* Which ReLU inputs are positive (valid rows) and which positions win the max
 * pooling, hashed. masked: the sorted flat positions a masked-LM head reads
 * (n_masked of them), the only rows of the last layer that reach its loss. */
static uint64_t kink_pattern(const ac_model *m, const batch *bt, const int32_t *masked,
                             int n_masked)
{
    const ac_model_config *c = &m->cfg;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int l = 0; l < c->n_layers; l++)
        for (int b = 0, next = 0; b < bt->B; b++)
            for (int t = 0; t < bt->lengths[b]; t++) {
                /* cls pooling reads only position 0 of the last layer */
                if (c->pooling == AC_POOL_CLS && l == c->n_layers - 1 && t > 0)
                    break;
                if (masked && l == c->n_layers - 1) {
                    if (next >= n_masked || masked[next] != b * bt->T + t)
                        continue;
                    next++;
                }
                const float *z = m->act.fc1[l] + ((size_t)b * bt->T + t) * c->d_ff;
                for (int i = 0; i < c->d_ff; i++)
                    h = fnv_add(h, z[i] > 0.0f);
            }
    if (c->pooling == AC_POOL_MAX)
        for (size_t i = 0; i < (size_t)bt->B * c->d_model; i++)
            h = fnv_add(h, (uint64_t)m->act.pool_argmax[i]);
    return h;
}

/* The masked-LM loss in double from the float hidden states at the masked
 * positions (the head's float logits are gone: overwritten in place). */
static double mlm_fd_loss(fd_ctx *c)
{
    ac_model *m = c->m;
    ac_mlm *h = c->mlm;
    float loss = ac_mlm_forward(m, h, h->masked_ids, c->bt->lengths, c->bt->B, c->bt->T,
                                h->positions, h->targets, c->n_masked, c->train, c->key);
    ck_assert(isfinite(loss));
    c->pattern[c->calls++ % 2] = kink_pattern(m, c->bt, h->positions, c->n_masked);
    const int d = m->cfg.d_model, V = m->cfg.vocab_size;
    double total = 0.0, z[64];
    ck_assert_int_le(V, 64);
    for (int r = 0; r < c->n_masked; r++) {
        double mx = -INFINITY, sum = 0.0;
        for (int v = 0; v < V; v++) {
            z[v] = m->p.mlm_bias[v];
            for (int k = 0; k < d; k++)
                z[v] += (double)h->hidden[(size_t)r * d + k] * m->p.embed_w[(size_t)v * d + k];
            mx = fmax(mx, z[v]);
        }
        for (int v = 0; v < V; v++)
            sum += exp(z[v] - mx);
        total += mx + log(sum) - z[h->targets[r]];
    }
    return total / c->n_masked;
}

/* Mean cross-entropy in double from the float logits (less rounding noise
 * than the float loss the forward returns). */
static double fd_loss(void *p)
{
    fd_ctx *c = p;
    if (c->mlm)
        return mlm_fd_loss(c);
    ac_model_forward(c->m, c->bt->ids, c->bt->lengths, NULL, c->bt->B, c->bt->T, c->train, c->key);
    c->pattern[c->calls++ % 2] = kink_pattern(c->m, c->bt, NULL, 0);
    const int C = c->m->cfg.n_classes;
    double total = 0.0;
    for (int b = 0; b < c->bt->B; b++) {
        const float *z = c->m->act.logits + (size_t)b * C;
        double mx = z[0];
        for (int k = 1; k < C; k++)
            mx = fmax(mx, z[k]);
        double s = 0.0;
        for (int k = 0; k < C; k++)
            s += exp((double)z[k] - mx);
        total += mx + log(s) - (double)z[c->bt->labels[b]];
    }
    return total / c->bt->B;
}

typedef struct {
    size_t checked, kinks;
    double worst_excess, worst_abs;
    char worst[320];
} fd_summary;

/* Analytic gradients of one forward/backward, then central differences over
 * every element of every parameter tensor (gc_check one element at a time, so
 * the kink pattern of its two evaluations can be compared). Every compared
 * element must be within the tolerance and every tensor must carry signal. */
static fd_summary whole_model_gradcheck_with(ac_model *m, const batch *bt, int train, uint64_t key,
                                             ac_mlm *mlm, int n_masked, const char *label)
{
    m->keep_attention = 1; /* a backward follows even when train == 0 */
    float loss = mlm ? ac_mlm_forward(m, mlm, mlm->masked_ids, bt->lengths, bt->B, bt->T,
                                      mlm->positions, mlm->targets, n_masked, train, key)
                     : ac_model_forward(m, bt->ids, bt->lengths, bt->labels, bt->B, bt->T, train,
                                        key);
    ck_assert(isfinite(loss));
    ac_model_zero_grad(m);
    if (mlm)
        ac_mlm_backward(m, mlm);
    else
        ac_model_backward(m);
    float *analytic = malloc(m->n_params * sizeof(float));
    ck_assert_ptr_nonnull(analytic);
    memcpy(analytic, m->grads, m->n_params * sizeof(float));

    /* The float loss and the double loss of the same forward agree. */
    fd_ctx ctx = {.m = m, .bt = bt, .train = train, .key = key, .mlm = mlm, .n_masked = n_masked};
    double loss_here = fd_loss(&ctx);
    ck_assert_msg(fabs(loss_here - loss) < 1e-5, "loss %g vs %g", (double)loss, loss_here);

    fd_summary s = {0};
    gc_options o = gc_defaults();
    o.h = WHOLE_MODEL_H;
    o.kink_tol = 0; /* kinks are detected exactly, below */
    for (int i = 0; i < m->n_tensors; i++) {
        const ac_param_info *t = &m->table[i];
        size_t failed = 0;
        double signal = 0.0;
        char first_failure[200] = "";
        for (size_t j = 0; j < t->numel; j++) {
            ctx.calls = 0;
            gc_result r = gc_check(m->params + t->offset + j, analytic + t->offset + j, 1, fd_loss,
                                   &ctx, o);
            ck_assert_int_eq(ctx.calls, 2);
            if (ctx.pattern[0] != ctx.pattern[1]) {
                s.kinks++;
                continue;
            }
            s.checked++;
            signal = fmax(signal, r.max_abs_numeric);
            s.worst_abs = fmax(s.worst_abs, r.max_abs_err);
            if (r.n_failed && !failed)
                snprintf(first_failure, sizeof first_failure, "[%zu] analytic %.8g numeric %.8g", j,
                         r.worst_analytic, r.worst_numeric);
            failed += r.n_failed;
            if (r.max_excess > s.worst_excess) {
                s.worst_excess = r.max_excess;
                snprintf(s.worst, sizeof s.worst, "%s[%zu]: analytic %.8g numeric %.8g", t->name, j,
                         r.worst_analytic, r.worst_numeric);
            }
        }
        ck_assert_msg(failed == 0, "%s: %s: %zu elements outside the tolerance, first %s", label,
                      t->name, failed, first_failure);
        ck_assert_msg(signal > 1e-3, "%s: %s: no gradient signal (max %.3g)", label, t->name, signal);
    }
    /* The parameters were put back exactly. */
    ck_assert(fd_loss(&ctx) == loss_here);
    printf("gradcheck %s: %zu elements, %zu kinks skipped, max |err| %.3g, worst %.2fx tolerance "
           "(%s)\n",
           label, s.checked, s.kinks, s.worst_abs, s.worst_excess, s.worst);
    free(analytic);
    return s;
}

static fd_summary whole_model_gradcheck(ac_model *m, const batch *bt, int train, uint64_t key,
                                        const char *label)
{
    return whole_model_gradcheck_with(m, bt, train, key, NULL, 0, label);
}

/* The masking of a batch for a masked-LM model whose ids 1..V-2 are words
 * (batch_fill), V-1 the pad filler and 2... here <mask> is id 1 (<unk>'s
 * place does not matter to the model). */
static int mask_for_test(ac_mlm *h, const ac_model *m, const batch *bt, double frac, uint64_t key)
{
    ac_mlm_masking spec = {.mask_frac = frac, .mask_id = 1, .first_word_id = 2,
                           .vocab_size = m->cfg.vocab_size - 1, .skip_first_id = -1};
    int M = ac_mlm_mask_batch(&spec, bt->ids, bt->lengths, bt->B, bt->T, key, h->masked_ids,
                              h->positions, h->targets, h->scratch);
    return M; /* no assertion here: Check allocates, and train_step runs in a counted window */
}

/* The pretraining model (encoder + tied output layer at the masked positions)
 * by finite differences through every tensor: learned positions, uni+bi+
 * trigrams, two layers, dropout with a fixed key, and a masking share of 0.5
 * so several positions of each item are predicted. The tied embedding gets
 * both its input and its output gradient. */
START_TEST(test_gradcheck_masked_lm)
{
    ac_model_config cfg = with_ngrams_and_positions(small_config(AC_POOL_MEAN, 0.2f));
    cfg.objective = AC_OBJECTIVE_MASKED_LM;
    cfg.n_classes = 0;
    cfg.vocab_size = 21; /* V - 1 = 20 is not a multiple of the 16 SIMD lanes */
    ac_model m;
    enum { B = 4, T = 6 };
    model_make(&m, &cfg, B, T);
    ck_assert_int_lt(ac_model_find_tensor(&m, "head.weight"), 0);
    ck_assert_int_ge(ac_model_find_tensor(&m, "mlm.bias"), 0);
    randomize(&m, 51);
    batch bt;
    const int32_t lengths[B] = {6, 4, 1, 3};
    batch_fill(&bt, B, T, lengths, cfg.vocab_size, 2, 13);
    ac_mlm h;
    ac_err err;
    ck_assert_msg(ac_mlm_alloc(&h, &cfg, B, T, 0.5, &err) == 0, "%s", err.msg);
    int M = mask_for_test(&h, &m, &bt, 0.5, 77);
    ck_assert_int_ge(M, 1);
    int replaced = 0;
    for (int i = 0; i < M; i++)
        replaced += h.masked_ids[h.positions[i]] != h.targets[i];
    ck_assert_msg(M >= 5 && replaced >= 3, "%d masked, %d replaced", M, replaced);
    fd_summary s = whole_model_gradcheck_with(&m, &bt, 1, 0xfeedULL, &h, M, "masked LM");
    /* Kinks are detected exactly (a ReLU sign that the loss reads flips
     * between the two evaluations), so skipping one is never wrong, only less
     * coverage. Here every ReLU row of layer 0 reaches the loss through
     * attention and dropout rescales rows: 27 of 1373 (2%) in this instance,
     * spread over 11 tensors; at most 3% keeps the check meaningful. */
    ck_assert_msg(s.kinks * 33 <= s.checked, "%zu kinks in %zu", s.kinks, s.checked);

    /* The classifier forward refuses a masked-LM model, and the head refuses
     * what would read out of bounds; nothing is left to differentiate. */
    ck_assert(isnan(ac_model_forward(&m, bt.ids, bt.lengths, NULL, B, T, 0, 0)));
    int32_t pad_position = 1 * T + 5; /* item 1 has 4 tokens */
    int32_t bad_target = cfg.vocab_size;
    struct { const int32_t *positions, *targets; int M; } bad[] = {
        {&pad_position, h.targets, 1}, {h.positions, &bad_target, 1}, {h.positions, h.targets, 0},
        {h.positions, h.targets, h.max_rows + 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ac_model_zero_grad(&m);
        ck_assert_msg(isnan(ac_mlm_forward(&m, &h, h.masked_ids, bt.lengths, B, T,
                                           bad[i].positions, bad[i].targets, bad[i].M, 1, 0)),
                      "case %zu", i);
        ac_mlm_backward(&m, &h);
        for (size_t j = 0; j < m.n_params; j++)
            ck_assert_msg(m.grads[j] == 0.0f, "case %zu: backward after a rejected forward", i);
    }
    ac_mlm_free(&h);
    ac_model_free(&m);
}
END_TEST

static void check_pooling(ac_pooling pooling, const char *label)
{
    ac_model_config cfg = small_config(pooling, 0.0f);
    ac_model m;
    enum { B = 4, T = 6 };
    model_make(&m, &cfg, B, T);
    randomize(&m, 11 + (uint64_t)pooling);
    batch bt;
    const int32_t lengths[B] = {6, 4, 1, 3};
    batch_fill(&bt, B, T, lengths, cfg.vocab_size, cfg.n_classes, 5);
    fd_summary s = whole_model_gradcheck(&m, &bt, 0, 0, label);
    /* Kinks are rare at this h; many would mean the check skipped what it
     * should test. */
    ck_assert_msg(s.kinks * 100 <= s.checked, "%s: %zu kinks in %zu", label, s.kinks, s.checked);

    /* The pad token's row: exactly no gradient. */
    const float *pad_row = m.g.embed_w + (size_t)(cfg.vocab_size - 1) * cfg.d_model;
    for (int i = 0; i < cfg.d_model; i++)
        ck_assert_msg(pad_row[i] == 0.0f, "pad token row got gradient %g", (double)pad_row[i]);
    ac_model_free(&m);
}

START_TEST(test_gradcheck_max_pooling)
{
    check_pooling(AC_POOL_MAX, "max pooling");
}
END_TEST

START_TEST(test_gradcheck_mean_pooling)
{
    check_pooling(AC_POOL_MEAN, "mean pooling");
}
END_TEST

START_TEST(test_gradcheck_cls_pooling)
{
    check_pooling(AC_POOL_CLS, "cls pooling");
}
END_TEST

/* Learned positions and n-grams, every tensor by finite differences. */
START_TEST(test_gradcheck_ngrams_learned_positions)
{
    ac_model_config cfg = with_ngrams_and_positions(small_config(AC_POOL_MEAN, 0.0f));
    ac_model m;
    enum { B = 4, T = 6 };
    model_make(&m, &cfg, B, T);
    ck_assert_int_ge(ac_model_find_tensor(&m, "embed.pos.weight"), 0);
    ck_assert_int_eq(ac_model_find_tensor(&m, "embed.ngram.weight"), m.n_tensors - 1);
    randomize(&m, 31);
    batch bt;
    const int32_t lengths[B] = {6, 4, 1, 3};
    batch_fill(&bt, B, T, lengths, cfg.vocab_size, cfg.n_classes, 9);
    fd_summary s = whole_model_gradcheck(&m, &bt, 0, 0, "n-grams + learned positions");
    ck_assert_msg(s.kinks * 100 <= s.checked, "%zu kinks in %zu", s.kinks, s.checked);
    ac_model_free(&m);
}
END_TEST

/* The wide path (a weight per class for each distinct n-gram, added to the
 * logits) with n-grams and learned positions: every tensor by finite
 * differences, the wide table a head tensor, zero at init. */
START_TEST(test_gradcheck_wide_path)
{
    ac_model_config cfg = with_ngrams_and_positions(small_config(AC_POOL_MEAN, 0.0f));
    cfg.wide_order = 3;
    cfg.wide_buckets = 7; /* n-grams share rows, and items share n-grams */
    cfg.wide_norm = 0.5f; /* each item's sum scaled by its own count of n-grams */
    ac_model m;
    enum { B = 4, T = 6 };
    model_make(&m, &cfg, B, T);
    int w = ac_model_find_tensor(&m, "head.wide.weight");
    ck_assert_int_ge(w, 0);
    ck_assert_int_eq(m.table[w].shape[0], 7);
    ck_assert_int_eq(m.table[w].shape[1], cfg.n_classes);
    /* row-sparse, after every dense tensor */
    ck_assert(m.table[w].sparse);
    ck_assert(m.table[w].offset >= m.dense_params);
    ck_assert_int_eq(m.sparse[AC_SPARSE_WIDE].tensor, w);
    ac_model_init_weights(&m, 5);
    for (size_t i = 0; i < m.table[w].numel; i++)
        ck_assert(m.p.wide_w[i] == 0.0f);
    randomize(&m, 37);
    batch bt;
    const int32_t lengths[B] = {6, 4, 1, 3};
    batch_fill(&bt, B, T, lengths, cfg.vocab_size, cfg.n_classes, 13);
    fd_summary s = whole_model_gradcheck(&m, &bt, 0, 0, "wide path + n-grams");
    ck_assert_msg(s.kinks * 100 <= s.checked, "%zu kinks in %zu", s.kinks, s.checked);
    /* A masked-LM model has no wide path, whatever its config says. */
    cfg.objective = AC_OBJECTIVE_MASKED_LM;
    cfg.n_classes = 0;
    ac_model mlm;
    model_make(&mlm, &cfg, B, T);
    ck_assert_int_lt(ac_model_find_tensor(&mlm, "head.wide.weight"), 0);
    ck_assert_ptr_null(mlm.p.wide_w);
    ac_model_free(&mlm);
    ac_model_free(&m);
}
END_TEST

/* The n-gram table's and the wide path's gradients are row-sparse: zeroing,
 * clipping and AdamW visit the touched rows only, and give what the dense
 * computation gives on them; untouched rows keep their values (lazy AdamW). */
START_TEST(test_sparse_rows_match_dense)
{
    ac_model_config cfg = small_config(AC_POOL_MEAN, 0.0f);
    cfg.ngram_order = 2;
    cfg.ngram_buckets = 64; /* more rows than the batch touches */
    cfg.wide_order = 2;
    cfg.wide_buckets = 64;
    enum { B = 3, T = 6 };
    ac_model sparse, dense;
    model_make(&sparse, &cfg, B, T);
    model_make(&dense, &cfg, B, T);
    randomize(&sparse, 41);
    memcpy(dense.params, sparse.params, sparse.n_params * sizeof(float));
    for (int k = 0; k < AC_SPARSE_TABLES; k++) /* the same model, updated densely */
        dense.table[dense.sparse[k].tensor].sparse = 0;
    batch bt;
    const int32_t lengths[B] = {6, 2, 4};
    batch_fill(&bt, B, T, lengths, cfg.vocab_size, cfg.n_classes, 13);
    size_t n = sparse.n_params;
    float *m1s = calloc(n, sizeof(float)), *m2s = calloc(n, sizeof(float));
    float *m1d = calloc(n, sizeof(float)), *m2d = calloc(n, sizeof(float));
    float *before = malloc(n * sizeof(float));
    ac_optim_config oc;
    ac_optim_config_defaults(&oc);
    oc.weight_decay = 0.1f;
    for (int step = 1; step <= 3; step++) {
        bt.lengths[1] = step + 1; /* other rows each step */
        memcpy(before, sparse.params, n * sizeof(float));
        ac_model_forward(&sparse, bt.ids, bt.lengths, bt.labels, B, T, 1, 0);
        ac_model_forward(&dense, bt.ids, bt.lengths, bt.labels, B, T, 1, 0);
        ac_model_zero_grad(&sparse);
        /* every gradient is zero after zero_grad, the old rows' included */
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(sparse.grads[i] == 0.0f, "grad %zu not zeroed", i);
        ac_model_zero_grad(&dense);
        memset(dense.grads, 0, n * sizeof(float));
        ac_model_backward(&sparse);
        ac_model_backward(&dense);
        ck_assert_int_eq(memcmp(sparse.grads, dense.grads, n * sizeof(float)), 0);
        /* the listed rows are exactly the rows with a gradient, each once */
        for (int k = 0; k < AC_SPARSE_TABLES; k++) {
            const ac_sparse_rows *t = &sparse.sparse[k];
            const size_t w = (size_t)t->width;
            int listed = 0;
            for (int r = 0; r < t->n_table_rows; r++) {
                int nonzero = 0;
                for (size_t j = 0; j < w; j++)
                    nonzero |= sparse.grads[t->offset + (size_t)r * w + j] != 0.0f;
                listed += t->mark[r];
                if (nonzero)
                    ck_assert_msg(t->mark[r], "table %d: row %d has a gradient but is not listed",
                                  k, r);
            }
            ck_assert_int_eq(listed, t->n_rows);
            ck_assert_int_gt(t->n_rows, 0);
            ck_assert_int_lt(t->n_rows, t->n_table_rows);
        }

        float norm_dense = ac_clip_grad_norm(dense.grads, n, 0.5f);
        float norm_sparse = ac_model_clip_grad_norm(&sparse, 0.5f);
        ck_assert_msg(fabsf(norm_dense - norm_sparse) <= 1e-5f * norm_dense, "norm %g vs %g",
                      (double)norm_sparse, (double)norm_dense);
        float lr = 1e-2f;
        ac_adamw_step(&sparse, sparse.params, sparse.grads, m1s, m2s, &oc, lr, step);
        ac_adamw_step(&dense, dense.params, dense.grads, m1d, m2d, &oc, lr, step);
        /* dense tensors: the same update */
        for (size_t i = 0; i < sparse.dense_params; i++)
            ck_assert_msg(fabsf(sparse.params[i] - dense.params[i]) <= 1e-6f, "param %zu", i);
        for (int k = 0; k < AC_SPARSE_TABLES; k++) {
            const ac_sparse_rows *t = &sparse.sparse[k];
            const size_t w = (size_t)t->width;
            for (int r = 0; r < t->n_table_rows; r++) {
                const size_t at = t->offset + (size_t)r * w;
                if (!t->mark[r]) {
                    ck_assert_msg(memcmp(sparse.params + at, before + at, w * sizeof(float)) == 0,
                                  "table %d: untouched row %d moved", k, r);
                } else {
                    const float *pd = dense.params + at;
                    ck_assert_msg(memcmp(sparse.params + at, before + at, w * sizeof(float)) != 0,
                                  "table %d: touched row %d kept", k, r);
                    for (size_t j = 0; j < w; j++)
                        ck_assert_msg(fabsf(sparse.params[at + j] - pd[j]) <= 1e-6f,
                                      "table %d: row %d differs from the dense update", k, r);
                }
            }
        }
        /* dense AdamW moves the untouched rows by decay alone; realign for the next step */
        memcpy(dense.params, sparse.params, n * sizeof(float));
        memcpy(m1d, m1s, n * sizeof(float));
        memcpy(m2d, m2s, n * sizeof(float));
    }
    free(m1s); free(m2s); free(m1d); free(m2d); free(before);
    ac_model_free(&sparse);
    ac_model_free(&dense);
}
END_TEST

/* Dropout on: with a fixed key the loss is a deterministic function of the
 * parameters (the masks depend only on key and position), so the same finite
 * differences hold through every dropout site. */
START_TEST(test_gradcheck_dropout_fixed_key)
{
    ac_model_config cfg = small_config(AC_POOL_MEAN, 0.25f);
    ac_model m;
    enum { B = 4, T = 6 };
    model_make(&m, &cfg, B, T);
    randomize(&m, 21);
    batch bt;
    const int32_t lengths[B] = {5, 6, 2, 1};
    batch_fill(&bt, B, T, lengths, cfg.vocab_size, cfg.n_classes, 6);
    const uint64_t key = 0x1234abcdULL;

    float l1 = ac_model_forward(&m, bt.ids, bt.lengths, bt.labels, B, T, 1, key);
    float l2 = ac_model_forward(&m, bt.ids, bt.lengths, bt.labels, B, T, 1, key);
    ck_assert_msg(memcmp(&l1, &l2, sizeof l1) == 0, "same key, losses %.9g and %.9g", (double)l1,
                  (double)l2);
    float other = ac_model_forward(&m, bt.ids, bt.lengths, bt.labels, B, T, 1, key + 1);
    ck_assert_msg(other != l1, "another key gave the same loss: masks do not depend on the key");
    float eval = ac_model_forward(&m, bt.ids, bt.lengths, bt.labels, B, T, 0, key);
    ck_assert_msg(eval != l1, "dropout had no effect in training mode");

    /* About p of the mask entries are dropped; kept ones are scaled by 1/(1-p). */
    size_t n = (size_t)B * T * cfg.d_model, dropped = 0;
    ac_model_forward(&m, bt.ids, bt.lengths, bt.labels, B, T, 1, key);
    for (size_t i = 0; i < n; i++) {
        float k = m.act.embed_mask[i];
        ck_assert(k == 0.0f || fabsf(k - 1.0f / 0.75f) < 1e-6f);
        dropped += k == 0.0f;
    }
    ck_assert_msg(dropped > n / 8 && dropped < n * 3 / 8, "%zu of %zu dropped at p 0.25", dropped, n);

    fd_summary s = whole_model_gradcheck(&m, &bt, 1, key, "dropout 0.25, fixed key");
    ck_assert_msg(s.kinks * 100 <= s.checked, "%zu kinks in %zu", s.kinks, s.checked);
    ac_model_free(&m);
}
END_TEST

/* Evaluation ignores dropout: a model with p > 0 in eval mode computes
 * exactly what the same weights with p = 0 compute. */
START_TEST(test_eval_mode_has_no_dropout)
{
    ac_model_config with = small_config(AC_POOL_MAX, 0.5f), without = small_config(AC_POOL_MAX, 0.0f);
    ac_model a, b;
    enum { B = 3, T = 6 };
    model_make(&a, &with, B, T);
    model_make(&b, &without, B, T);
    randomize(&a, 3);
    memcpy(b.params, a.params, a.n_params * sizeof(float));
    batch bt;
    const int32_t lengths[B] = {6, 2, 4};
    batch_fill(&bt, B, T, lengths, with.vocab_size, with.n_classes, 9);
    float la = ac_model_forward(&a, bt.ids, bt.lengths, bt.labels, B, T, 0, 99);
    float lb = ac_model_forward(&b, bt.ids, bt.lengths, bt.labels, B, T, 1, 99);
    ck_assert(memcmp(&la, &lb, sizeof la) == 0);
    ck_assert(memcmp(a.act.logits, b.act.logits, B * 3 * sizeof(float)) == 0);
    ac_model_free(&a);
    ac_model_free(&b);
}
END_TEST

/* Pads never matter: changing pad tokens changes no logit, and an item's
 * logits do not depend on how much padding its batch has. */
START_TEST(test_padding_is_invisible)
{
    static const ac_pooling poolings[] = {AC_POOL_MAX, AC_POOL_MEAN, AC_POOL_CLS};
    for (int pi = 0; pi < 3; pi++) {
        ac_model_config cfg = small_config(poolings[pi], 0.0f);
        ac_model m;
        enum { B = 3, T = 6 };
        model_make(&m, &cfg, B, T);
        randomize(&m, 40 + (uint64_t)pi);
        batch bt;
        const int32_t lengths[B] = {2, 6, 4};
        batch_fill(&bt, B, T, lengths, cfg.vocab_size, cfg.n_classes, 12);
        ac_model_forward(&m, bt.ids, bt.lengths, NULL, B, T, 0, 0);
        float before[B * 3];
        memcpy(before, m.act.logits, sizeof before);
        for (int b = 0; b < B; b++)
            for (int t = lengths[b]; t < T; t++)
                bt.ids[b * T + t] = (b + t) % cfg.vocab_size;
        ac_model_forward(&m, bt.ids, bt.lengths, NULL, B, T, 0, 0);
        ck_assert_msg(memcmp(before, m.act.logits, sizeof before) == 0, "%s: pad ids changed logits",
                      ac_pooling_name(poolings[pi]));

        /* Item 0 (length 2) alone in a batch of T = 2. */
        int32_t alone[2] = {bt.ids[0], bt.ids[1]};
        ac_model_forward(&m, alone, bt.lengths, NULL, 1, 2, 0, 0);
        for (int k = 0; k < 3; k++)
            ck_assert_msg(fabsf(m.act.logits[k] - before[k]) <= 1e-5f * (1.0f + fabsf(before[k])),
                          "%s: logit %d alone %g, padded %g", ac_pooling_name(poolings[pi]), k,
                          (double)m.act.logits[k], (double)before[k]);
        ac_model_free(&m);
    }
}
END_TEST

/* The inference loop (attnctl/infer.h): as one batch it returns the model's
 * own figures bit for bit (the trainer's validation depends on that); grouped
 * by length, every row gets the figures it gets alone, in batch order. */
START_TEST(test_inference_loop)
{
    ac_model_config cfg = small_config(AC_POOL_MEAN, 0.0f);
    cfg.temperature = 1.5f;
    ac_model m, ref;
    enum { B = 5, T = 6 };
    ac_err err;
    ck_assert_msg(ac_model_create(&m, &cfg, &err) == 0, "%s", err.msg);
    model_make(&ref, &cfg, B, T);
    randomize(&m, 60);
    memcpy(ref.params, m.params, m.n_params * sizeof *m.params);
    batch bt;
    const int32_t lengths[B] = {2, 6, 1, 6, 3};
    batch_fill(&bt, B, T, lengths, cfg.vocab_size, cfg.n_classes, 61);
    const int C = cfg.n_classes;

    ac_infer whole, grouped;
    ck_assert_msg(ac_infer_init(&whole, B, T, C, AC_INFER_AS_GIVEN, 1, &err) == 0, "%s", err.msg);
    ck_assert_msg(ac_infer_init(&grouped, B, T, C, AC_INFER_BY_LENGTH, 1, &err) == 0, "%s",
                  err.msg);
    /* The model's activations are grown by the loop: none allocated yet. */
    ck_assert_msg(ac_infer_run(&whole, &m, bt.ids, bt.lengths, bt.labels, B, T, &err) == 0, "%s",
                  err.msg);
    float loss = ac_model_forward(&ref, bt.ids, bt.lengths, bt.labels, B, T, 0, 0);
    ck_assert(memcmp(&loss, &whole.mean_loss, sizeof loss) == 0);
    ck_assert(memcmp(whole.logits, ref.act.logits, (size_t)B * C * sizeof(float)) == 0);
    ck_assert(memcmp(whole.probs, ref.act.probs_out, (size_t)B * C * sizeof(float)) == 0);
    ck_assert(memcmp(whole.losses, ref.act.losses, (size_t)B * sizeof(float)) == 0);

    ck_assert_msg(ac_infer_run(&grouped, &m, bt.ids, bt.lengths, bt.labels, B, T, &err) == 0,
                  "%s", err.msg);
    for (int b = 0; b < B; b++) {
        /* Row b alone, padded to its own length. */
        ac_model_forward(&ref, bt.ids + b * T, bt.lengths + b, bt.labels + b, 1, lengths[b], 0, 0);
        for (int c = 0; c < C; c++) {
            float want = ref.act.probs_out[c], got = ac_infer_probs(&grouped, b)[c];
            ck_assert_msg(fabsf(got - want) <= 1e-5f, "row %d class %d: %g grouped, %g alone", b,
                          c, (double)got, (double)want);
        }
        ck_assert(fabsf(grouped.losses[b] - ref.act.losses[0]) <= 1e-5f);
    }
    ck_assert(fabsf(grouped.mean_loss - whole.mean_loss) <= 1e-5f);
    /* Without labels: probabilities only, losses 0. */
    ck_assert_msg(ac_infer_run(&grouped, &m, bt.ids, bt.lengths, NULL, B, T, &err) == 0, "%s",
                  err.msg);
    ck_assert(grouped.losses[0] == 0.0f && grouped.mean_loss == 0.0f);
    /* A batch beyond the buffers is an error, not a write past them. */
    ck_assert_int_eq(ac_infer_run(&grouped, &m, bt.ids, bt.lengths, NULL, B + 1, T, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "outside"));
    ac_infer_free(&whole);
    ac_infer_free(&grouped);
    ac_model_free(&m);
    ac_model_free(&ref);
}
END_TEST

/* ------------------------------------------- gradients to the model's input */

/* The model split at embed_sum (ac_model_embed, ac_model_forward_embedded,
 * ac_model_backward_embedded), as the attributions use it. */
typedef struct {
    ac_model *m;
    const batch *bt;
    float *embed;    /* [B, T, d]: the input being perturbed */
    const float *R;  /* [B, C]: the scalar is sum(R * logits) */
    int calls;
    uint64_t pattern[2];
} input_fd_ctx;

static double input_fd_loss(void *p)
{
    input_fd_ctx *c = p;
    float loss = ac_model_forward_embedded(c->m, c->embed, c->bt->lengths, NULL, c->bt->B, c->bt->T);
    ck_assert(loss == 0.0f);
    c->pattern[c->calls++ % 2] = kink_pattern(c->m, c->bt, NULL, 0);
    return gc_dot(c->m->act.logits, c->R, (size_t)c->bt->B * c->m->cfg.n_classes);
}

/* d(sum R * logits)/d(embed_sum) from ac_model_backward_embedded against
 * central differences of ac_model_forward_embedded. The input is checked one
 * position at a time along DIRECTIONS random unit directions u of its d
 * features: numeric (L(x + h u) - L(x - h u)) / 2h against analytic
 * g . (x+ - x-) / 2h with the float values actually stored (a wrong element
 * shows in every direction, each has a component on it).
 * Tolerance: |analytic - numeric| <= 1e-4 (1 + |g_row|) + 2e-3 |numeric|.
 * The float rounding of the forward moves L by up to ~6e-7 here, ~1e-4 in a
 * slope at h 3e-3 (measured coordinate by coordinate on the max-pooling model:
 * the central difference of an element with gradient -0.3748 moved by 1.4e-4
 * between h 3.2e-3 and 6.4e-3), and it grows with how strongly L depends on
 * the row, hence the |g_row| term; a wrong backward is off by O(|g_row|).
 * A larger h meets more kinks (17 of 80 elements at h 1e-2 on the n-gram
 * model). Kinks are detected exactly, as in the whole-model check. Pad
 * positions must get exactly 0 and must not move the logits at all; m->grads
 * stays untouched. */
#define DIRECTIONS 4
static void check_input_gradient(const ac_model_config *cfg, uint64_t seed, const char *label)
{
    ac_model m;
    enum { B = 3, T = 6 };
    model_make(&m, cfg, B, T);
    randomize(&m, seed);
    batch bt;
    const int32_t lengths[B] = {6, 3, 1};
    batch_fill(&bt, B, T, lengths, cfg->vocab_size, cfg->n_classes, seed + 1);
    const int d = cfg->d_model, C = cfg->n_classes;
    const size_t n = (size_t)B * T * d;
    float *embed = malloc(n * sizeof(float)), *grad = calloc(n, sizeof(float));
    float R[B * 8], saved[64];
    ck_assert(embed && grad && C <= 8 && d <= 64);
    ck_assert_int_eq(ac_model_embed(&m, embed, bt.ids, bt.lengths, B, T), 0);
    for (int i = 0; i < B * C; i++)
        R[i] = ac_rng_normal(ac_rng_key(seed, 77), (uint64_t)i);

    ac_model_zero_grad(&m);
    ck_assert(isfinite(ac_model_forward_embedded(&m, embed, bt.lengths, NULL, B, T)));
    ck_assert_int_eq(ac_model_backward_embedded(&m, R, grad), 0);
    for (size_t j = 0; j < m.n_params; j++)
        ck_assert_msg(m.grads[j] == 0.0f, "%s: backward_embedded wrote a parameter gradient", label);

    input_fd_ctx ctx = {.m = &m, .bt = &bt, .embed = embed, .R = R};
    const double h = WHOLE_MODEL_H, atol = 1e-4, rtol = 2e-3;
    double base = input_fd_loss(&ctx);
    int checked = 0, kinks = 0, failed = 0;
    double signal = 0.0, worst = 0.0;
    char first_failure[200] = "", worst_msg[200] = "";
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *row = embed + ((size_t)b * T + t) * d;
            const float *g = grad + ((size_t)b * T + t) * d;
            int pad = t >= lengths[b];
            for (int j = 0; pad && j < d; j++)
                ck_assert_msg(g[j] == 0.0f, "%s: pad position b %d t %d got %g", label, b, t,
                              (double)g[j]);
            memcpy(saved, row, (size_t)d * sizeof(float));
            double row_norm = 0.0;
            for (int j = 0; j < d; j++)
                row_norm += (double)g[j] * g[j];
            row_norm = sqrt(row_norm);
            for (int k = 0; k < DIRECTIONS; k++) {
                double u[64], norm = 0.0;
                uint64_t key = ac_rng_key(seed, 1000 + (uint64_t)((b * T + t) * DIRECTIONS + k));
                for (int j = 0; j < d; j++) {
                    u[j] = ac_rng_normal(key, (uint64_t)j);
                    norm += u[j] * u[j];
                }
                float plus[64], minus[64];
                double analytic = 0.0;
                for (int j = 0; j < d; j++) {
                    plus[j] = (float)(saved[j] + h * u[j] / sqrt(norm));
                    minus[j] = (float)(saved[j] - h * u[j] / sqrt(norm));
                    analytic += (double)g[j] * ((double)plus[j] - (double)minus[j]) / (2 * h);
                }
                ctx.calls = 0;
                memcpy(row, plus, (size_t)d * sizeof(float));
                double lp = input_fd_loss(&ctx);
                memcpy(row, minus, (size_t)d * sizeof(float));
                double lm = input_fd_loss(&ctx);
                memcpy(row, saved, (size_t)d * sizeof(float));
                if (pad) {
                    ck_assert_msg(lp == base && lm == base, "%s: a pad position moved the logits",
                                  label);
                    continue;
                }
                if (ctx.pattern[0] != ctx.pattern[1]) {
                    kinks++;
                    continue;
                }
                double numeric = (lp - lm) / (2 * h);
                double excess =
                    fabs(analytic - numeric) / (atol * (1.0 + row_norm) + rtol * fabs(numeric));
                checked++;
                signal = fmax(signal, fabs(numeric));
                if (excess > worst) {
                    worst = excess;
                    snprintf(worst_msg, sizeof worst_msg, "b %d t %d: analytic %.8g numeric %.8g",
                             b, t, analytic, numeric);
                }
                if (excess > 1.0 && !failed++)
                    snprintf(first_failure, sizeof first_failure,
                             "b %d t %d direction %d: analytic %.8g numeric %.8g", b, t, k,
                             analytic, numeric);
            }
        }
    printf("input gradient %s: %d directions, %d kinks skipped, worst %.2fx tolerance (%s)\n", label,
           checked, kinks, worst, worst_msg);
    ck_assert_msg(failed == 0, "%s: %d directions outside the tolerance, first %s", label, failed,
                  first_failure);
    ck_assert_msg(signal > 1e-2, "%s: no gradient signal (max %.3g)", label, signal);
    /* Every input element feeds every ReLU of its row (through the LayerNorm)
     * and, through attention, those of the other rows, so kinks are likelier
     * than for one weight; a wrong backward fails on most remaining checks. */
    ck_assert_msg(kinks * 10 <= checked, "%s: %d kinks in %d", label, kinks, checked);
    ck_assert(input_fd_loss(&ctx) == base); /* the input was put back exactly */
    free(embed);
    free(grad);
    ac_model_free(&m);
}

START_TEST(test_input_gradient_finite_differences)
{
    ac_model_config max_cfg = small_config(AC_POOL_MAX, 0.0f);
    check_input_gradient(&max_cfg, 51, "max pooling");
    ac_model_config mean_cfg = small_config(AC_POOL_MEAN, 0.0f);
    mean_cfg.positions = AC_POS_LEARNED;
    mean_cfg.ngram_order = 3;
    mean_cfg.ngram_buckets = 13;
    check_input_gradient(&mean_cfg, 52, "mean pooling, n-grams, learned positions");
    /* dropout in the config: the embedded forward is inference, no dropout */
    ac_model_config cls_cfg = small_config(AC_POOL_CLS, 0.3f);
    cls_cfg.positions = AC_POS_NONE;
    check_input_gradient(&cls_cfg, 53, "cls pooling, no positions, dropout 0.3 configured");
}
END_TEST

/* The split model is the model: ac_model_embed writes what ac_model_forward
 * puts in act.embed_sum, the embedded forward gives the same logits, and the
 * gradient it returns, pushed through the embedding tables' own backward,
 * is what ac_model_backward gives those tables, bit for bit. */
START_TEST(test_split_model_matches_the_model)
{
    ac_model_config cfg = small_config(AC_POOL_MEAN, 0.0f);
    cfg.positions = AC_POS_LEARNED;
    cfg.ngram_order = 2;
    cfg.ngram_buckets = 11;
    ac_model m;
    enum { B = 4, T = 6 };
    model_make(&m, &cfg, B, T);
    randomize(&m, 61);
    batch bt;
    const int32_t lengths[B] = {6, 4, 1, 5};
    batch_fill(&bt, B, T, lengths, cfg.vocab_size, cfg.n_classes, 62);
    const int d = cfg.d_model, C = cfg.n_classes;
    const size_t n = (size_t)B * T * d;
    float *embed = malloc(n * sizeof(float)), *grad = calloc(n, sizeof(float));
    float *grad2 = calloc(n, sizeof(float)), logits[B * 3], dlogits[B * 3];
    ck_assert(embed && grad && grad2);

    m.keep_attention = 1;
    ac_model_zero_grad(&m);
    float loss = ac_model_forward(&m, bt.ids, bt.lengths, bt.labels, B, T, 0, 0);
    memcpy(logits, m.act.logits, sizeof logits);
    ac_model_backward(&m);
    /* the loss gradient at the logits, as ac_model_backward starts from it */
    memset(dlogits, 0, sizeof dlogits);
    crossentropy_backward(dlogits, m.act.probs_out, bt.labels, B, C, 0.0f);
    /* backward_embedded right after ac_model_forward */
    ck_assert_int_eq(ac_model_backward_embedded(&m, dlogits, grad2), 0);

    ck_assert_int_eq(ac_model_embed(&m, embed, bt.ids, bt.lengths, B, T), 0);
    ck_assert(memcmp(embed, m.act.embed_sum, n * sizeof(float)) == 0);
    float loss2 = ac_model_forward_embedded(&m, embed, bt.lengths, bt.labels, B, T);
    ck_assert(memcmp(&loss, &loss2, sizeof loss) == 0);
    ck_assert(memcmp(logits, m.act.logits, sizeof logits) == 0);
    ck_assert_int_eq(ac_model_backward_embedded(&m, dlogits, grad), 0);
    ck_assert(memcmp(grad, grad2, n * sizeof(float)) == 0);
    /* ac_model_backward needs ids: after an embedded forward it does nothing */
    float *before = malloc(m.n_params * sizeof(float));
    ck_assert_ptr_nonnull(before);
    memcpy(before, m.grads, m.n_params * sizeof(float));
    ac_model_backward(&m);
    ck_assert(memcmp(before, m.grads, m.n_params * sizeof(float)) == 0);

    /* The tables' backward applied to d(embed_sum). */
    float *dwte = calloc((size_t)cfg.vocab_size * d, sizeof(float));
    float *dpos = calloc((size_t)cfg.max_len * d, sizeof(float));
    float *dngram = calloc((size_t)cfg.ngram_buckets * d, sizeof(float));
    ck_assert(dwte && dpos && dngram);
    embedding_backward(dwte, grad, bt.ids, bt.lengths, B, T, d);
    positions_backward(dpos, grad, bt.lengths, B, T, d);
    ngram_backward(dngram, grad, m.act.ngram_ids, bt.lengths, B, T, d, cfg.ngram_order - 1);
    ck_assert(memcmp(dwte, m.g.embed_w, (size_t)cfg.vocab_size * d * sizeof(float)) == 0);
    ck_assert(memcmp(dpos, m.g.pos_w, (size_t)cfg.max_len * d * sizeof(float)) == 0);
    ck_assert(memcmp(dngram, m.g.ngram_w, (size_t)cfg.ngram_buckets * d * sizeof(float)) == 0);
    double norm = 0.0;
    for (size_t i = 0; i < (size_t)cfg.vocab_size * d; i++)
        norm += fabs(dwte[i]);
    ck_assert_msg(norm > 1e-3, "no signal (%g)", norm);

    /* Rejections: nothing to differentiate afterwards. */
    int32_t bad_lengths[B] = {6, 0, 1, 5};
    ck_assert(isnan(ac_model_forward_embedded(&m, embed, bad_lengths, NULL, B, T)));
    ck_assert_int_eq(ac_model_backward_embedded(&m, dlogits, grad), -1);
    ck_assert(isnan(ac_model_forward_embedded(&m, embed, bt.lengths, NULL, B + 1, T)));
    ck_assert_int_eq(ac_model_embed(&m, embed, bt.ids, bt.lengths, B, T + 1), -1);
    bt.ids[3] = cfg.vocab_size;
    ck_assert_int_eq(ac_model_embed(&m, embed, bt.ids, bt.lengths, B, T), -1);
    /* an evaluation forward keeps no attention maps: no backward from it */
    m.keep_attention = 0;
    bt.ids[3] = 1;
    ck_assert(isfinite(ac_model_forward(&m, bt.ids, bt.lengths, NULL, B, T, 0, 0)));
    ck_assert_int_eq(ac_model_backward_embedded(&m, dlogits, grad), -1);
    free(before);
    free(dwte);
    free(dpos);
    free(dngram);
    free(embed);
    free(grad);
    free(grad2);
    ac_model_free(&m);
}
END_TEST

/* -------------------------------------------------------- parameter table */

START_TEST(test_parameter_table)
{
    ac_model_config cfg = small_config(AC_POOL_MAX, 0.1f);
    ac_model m;
    ac_err err;
    ck_assert_msg(ac_model_create(&m, &cfg, &err) == 0, "%s", err.msg);
    const int V = 20, d = 8, ff = 12, C = 3;
    struct { const char *name; int ndim, r, c, decay; } want[] = {
        {"embed.weight", 2, V, d, 1}, {"embed.norm.weight", 1, d, 0, 0}, {"embed.norm.bias", 1, d, 0, 0},
        {"layers.0.attn.q.weight", 2, d, d, 1}, {"layers.0.attn.k.weight", 2, d, d, 1},
        {"layers.0.attn.v.weight", 2, d, d, 1}, {"layers.0.attn.out.weight", 2, d, d, 1},
        {"layers.0.attn.out.bias", 1, d, 0, 0}, {"layers.0.ln1.weight", 1, d, 0, 0},
        {"layers.0.ln1.bias", 1, d, 0, 0}, {"layers.0.ffn.fc1.weight", 2, ff, d, 1},
        {"layers.0.ffn.fc1.bias", 1, ff, 0, 0}, {"layers.0.ffn.fc2.weight", 2, d, ff, 1},
        {"layers.0.ffn.fc2.bias", 1, d, 0, 0}, {"layers.0.ln2.weight", 1, d, 0, 0},
        {"layers.0.ln2.bias", 1, d, 0, 0},
        {"layers.1.attn.q.weight", 2, d, d, 1}, {"layers.1.attn.k.weight", 2, d, d, 1},
        {"layers.1.attn.v.weight", 2, d, d, 1}, {"layers.1.attn.out.weight", 2, d, d, 1},
        {"layers.1.attn.out.bias", 1, d, 0, 0}, {"layers.1.ln1.weight", 1, d, 0, 0},
        {"layers.1.ln1.bias", 1, d, 0, 0}, {"layers.1.ffn.fc1.weight", 2, ff, d, 1},
        {"layers.1.ffn.fc1.bias", 1, ff, 0, 0}, {"layers.1.ffn.fc2.weight", 2, d, ff, 1},
        {"layers.1.ffn.fc2.bias", 1, d, 0, 0}, {"layers.1.ln2.weight", 1, d, 0, 0},
        {"layers.1.ln2.bias", 1, d, 0, 0},
        {"head.weight", 2, C, d, 1}, {"head.bias", 1, C, 0, 0},
    };
    const int n_want = (int)(sizeof want / sizeof want[0]);
    ck_assert_int_eq(m.n_tensors, n_want);
    size_t offset = 0;
    for (int i = 0; i < n_want; i++) {
        const ac_param_info *t = &m.table[i];
        ck_assert_str_eq(t->name, want[i].name);
        ck_assert_int_eq(t->ndim, want[i].ndim);
        ck_assert_int_eq(t->shape[0], want[i].r);
        if (t->ndim == 2)
            ck_assert_int_eq(t->shape[1], want[i].c);
        ck_assert_uint_eq(t->numel, (size_t)want[i].r * (size_t)(want[i].ndim == 2 ? want[i].c : 1));
        ck_assert_uint_eq(t->offset, offset); /* contiguous, in table order */
        ck_assert_int_eq(t->weight_decay, want[i].decay);
        ck_assert_int_eq(ac_model_find_tensor(&m, want[i].name), i);
        offset += t->numel;
    }
    ck_assert_uint_eq(m.n_params, offset);
    ck_assert_int_eq(ac_model_find_tensor(&m, "layers.2.ln1.bias"), -1);
    ck_assert_int_eq(ac_model_find_tensor(&m, "embed"), -1);

    /* The named views point at the table's offsets, in both buffers. */
#define AT(buf, name) ((buf) + m.table[ac_model_find_tensor(&m, name)].offset)
    ck_assert_ptr_eq(m.p.embed_w, AT(m.params, "embed.weight"));
    ck_assert_ptr_eq(m.p.embed_norm_b, AT(m.params, "embed.norm.bias"));
    ck_assert_ptr_eq(m.p.layers[1].q_w, AT(m.params, "layers.1.attn.q.weight"));
    ck_assert_ptr_eq(m.p.layers[1].out_b, AT(m.params, "layers.1.attn.out.bias"));
    ck_assert_ptr_eq(m.p.layers[0].fc2_w, AT(m.params, "layers.0.ffn.fc2.weight"));
    ck_assert_ptr_eq(m.p.layers[1].ln2_b, AT(m.params, "layers.1.ln2.bias"));
    ck_assert_ptr_eq(m.p.head_b, AT(m.params, "head.bias"));
    ck_assert_ptr_eq(m.g.layers[1].fc1_b, AT(m.grads, "layers.1.ffn.fc1.bias"));
    ck_assert_ptr_eq(m.g.head_w, AT(m.grads, "head.weight"));
    ck_assert_ptr_null(m.p.mlm_bias);
#undef AT
    ac_model_free(&m);

    /* A masked-LM model: mlm.bias [V] where the head was, nothing else changes. */
    cfg.objective = AC_OBJECTIVE_MASKED_LM;
    cfg.n_classes = 0;
    ac_model mlm;
    ck_assert_msg(ac_model_create(&mlm, &cfg, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(mlm.n_tensors, n_want - 1);
    for (int i = 0; i < n_want - 2; i++)
        ck_assert_str_eq(mlm.table[i].name, want[i].name);
    const ac_param_info *bias = &mlm.table[n_want - 2];
    ck_assert_str_eq(bias->name, "mlm.bias");
    ck_assert_int_eq(bias->ndim, 1);
    ck_assert_int_eq(bias->shape[0], V);
    ck_assert_int_eq(bias->weight_decay, 0);
    ck_assert_uint_eq(mlm.n_params, offset - (size_t)C * d - C + V);
    ck_assert_ptr_null(mlm.p.head_w);
    ck_assert_ptr_null(mlm.p.head_b);
    ck_assert_ptr_eq(mlm.p.mlm_bias, mlm.params + bias->offset);
    ck_assert_ptr_eq(mlm.g.mlm_bias, mlm.grads + bias->offset);
    ac_model_init_weights(&mlm, 5);
    for (int i = 0; i < V; i++)
        ck_assert(mlm.p.mlm_bias[i] == 0.0f);
    ac_model_free(&mlm);
}
END_TEST

/* Fine-tuning's start: a classifier gets every tensor of a pretrained
 * masked LM but the heads; shapes must match and no encoder tensor may be
 * missing. */
START_TEST(test_copy_encoder)
{
    ac_model_config mc = small_config(AC_POOL_MEAN, 0.1f);
    mc.objective = AC_OBJECTIVE_MASKED_LM;
    mc.n_classes = 0;
    mc.positions = AC_POS_LEARNED;
    mc.ngram_order = 2;
    mc.ngram_buckets = 11;
    ac_model_config cc = mc;
    cc.objective = AC_OBJECTIVE_CLASSIFICATION;
    cc.n_classes = 3;
    ac_model pre, cls;
    ac_err err;
    ck_assert_int_eq(ac_model_create(&pre, &mc, &err), 0);
    ck_assert_int_eq(ac_model_create(&cls, &cc, &err), 0);
    randomize(&pre, 61);
    randomize(&cls, 62);
    float head_before = cls.p.head_w[4];
    ck_assert_msg(ac_model_copy_encoder(&cls, &pre, &err) == 0, "%s", err.msg);
    for (int i = 0; i < cls.n_tensors; i++) {
        const ac_param_info *t = &cls.table[i];
        int j = ac_model_find_tensor(&pre, t->name);
        if (strncmp(t->name, "head.", 5) == 0) {
            ck_assert_int_lt(j, 0);
            continue;
        }
        ck_assert_int_ge(j, 0);
        ck_assert_msg(memcmp(cls.params + t->offset, pre.params + pre.table[j].offset,
                             t->numel * sizeof(float)) == 0,
                      "%s not copied", t->name);
    }
    ck_assert(cls.p.head_w[4] == head_before);
    ac_model_free(&cls);

    /* another width: a shape error naming the tensor */
    cc.d_model = 16;
    ck_assert_int_eq(ac_model_create(&cls, &cc, &err), 0);
    ck_assert_int_eq(ac_model_copy_encoder(&cls, &pre, &err), -1);
    ck_assert_msg(strstr(err.msg, "tensor \"embed.weight\": [20, 8] in the pretrained model, "
                                  "[20, 16] here"),
                  "%s", err.msg);
    ac_model_free(&cls);
    /* learned positions wanted, none pretrained: a missing tensor */
    mc.positions = AC_POS_SINUSOIDAL;
    ac_model_free(&pre);
    ck_assert_int_eq(ac_model_create(&pre, &mc, &err), 0);
    cc.d_model = 8;
    ck_assert_int_eq(ac_model_create(&cls, &cc, &err), 0);
    ck_assert_int_eq(ac_model_copy_encoder(&cls, &pre, &err), -1);
    ck_assert_msg(strstr(err.msg, "has no tensor \"embed.pos.weight\""), "%s", err.msg);
    ac_model_free(&cls);
    ac_model_free(&pre);
}
END_TEST

START_TEST(test_config_validation)
{
    ac_err err;
    ac_model_config c = small_config(AC_POOL_MAX, 0.1f);
    ck_assert_int_eq(ac_model_config_validate(&c, &err), 0);
    c.n_heads = 3;
    ck_assert_int_eq(ac_model_config_validate(&c, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "n_heads"));
    c = small_config(AC_POOL_MAX, 0.1f);
    c.n_classes = 1;
    ck_assert_int_eq(ac_model_config_validate(&c, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "n_classes"));
    c = small_config(AC_POOL_MAX, 1.0f);
    ck_assert_int_eq(ac_model_config_validate(&c, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "dropout"));
    c = small_config(AC_POOL_MAX, 0.1f);
    c.ln_eps = 0.0f;
    ck_assert_int_eq(ac_model_config_validate(&c, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "ln_eps"));
    ac_model m;
    c.ln_eps = 1e-6f;
    c.n_layers = AC_MAX_LAYERS + 1;
    ck_assert_int_eq(ac_model_create(&m, &c, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "n_layers"));

    /* the objective decides the class count: 0 for a masked LM, >= 2 otherwise */
    c = small_config(AC_POOL_MAX, 0.1f);
    c.objective = AC_OBJECTIVE_MASKED_LM;
    ck_assert_int_eq(ac_model_config_validate(&c, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.n_classes: must be 0 for a masked-LM model"));
    c.n_classes = 0;
    ck_assert_int_eq(ac_model_config_validate(&c, &err), 0);
    c.objective = AC_OBJECTIVE_CLASSIFICATION;
    ck_assert_int_eq(ac_model_config_validate(&c, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "n_classes"));
    c.objective = (ac_objective)7;
    ck_assert_int_eq(ac_model_config_validate(&c, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.objective"));
    ac_objective o;
    ck_assert_int_eq(ac_objective_parse("masked_lm", &o), 0);
    ck_assert_int_eq(o, AC_OBJECTIVE_MASKED_LM);
    ck_assert_str_eq(ac_objective_name(AC_OBJECTIVE_CLASSIFICATION), "classification");
    ck_assert_int_eq(ac_objective_parse("mlm", &o), -1);

    ac_pooling p;
    ck_assert_int_eq(ac_pooling_parse("mean", &p), 0);
    ck_assert_int_eq(p, AC_POOL_MEAN);
    ck_assert_str_eq(ac_pooling_name(AC_POOL_CLS), "cls");
    ck_assert_int_eq(ac_pooling_parse("avg", &p), -1);
}
END_TEST

/* Activations: sized once for the largest batch; forward refuses a larger one. */
START_TEST(test_activation_allocation)
{
    ac_model_config cfg = small_config(AC_POOL_MAX, 0.0f);
    ac_model m;
    ac_err err;
    model_make(&m, &cfg, 4, 6);
    float *mem = m.act.mem;
    ck_assert_int_eq(ac_model_alloc_activations(&m, 2, 3, &err), 0); /* smaller: kept */
    ck_assert_ptr_eq(m.act.mem, mem);
    ck_assert_int_eq(m.act.max_B, 4);
    ck_assert_int_eq(ac_model_alloc_activations(&m, 4, 7, &err), -1); /* > max_len */
    ck_assert_ptr_nonnull(strstr(err.msg, "max_len"));
    ck_assert_uint_eq(ac_model_activation_bytes(&cfg, 4, 6), m.act.n_floats * sizeof(float));
    ck_assert_uint_gt(ac_model_activation_bytes(&cfg, 8, 6), ac_model_activation_bytes(&cfg, 4, 6));
    int32_t ids[5 * 6] = {0}, lengths[5] = {1, 1, 1, 1, 1};
    ck_assert(isnan(ac_model_forward(&m, ids, lengths, NULL, 5, 6, 0, 0)));
    ck_assert_int_eq(ac_model_alloc_activations(&m, 5, 6, &err), 0);
    ck_assert(!isnan(ac_model_forward(&m, ids, lengths, NULL, 5, 6, 0, 0)));
    ac_model_free(&m);
}
END_TEST

/* Out-of-range inputs give NaN and touch nothing (they would read out of
 * bounds), and backward then has nothing to differentiate. */
START_TEST(test_forward_rejects_bad_batches)
{
    ac_model_config cfg = small_config(AC_POOL_MEAN, 0.0f);
    ac_model m;
    enum { B = 2, T = 4 };
    model_make(&m, &cfg, B, T);
    randomize(&m, 4);
    int32_t ids[B * T] = {3, 4, 5, 6, 7, 8, 0, 0}, lengths[B] = {4, 2}, labels[B] = {0, 2};
    ck_assert(isfinite(ac_model_forward(&m, ids, lengths, labels, B, T, 0, 0)));
    struct { int what, index, value; } bad[] = {
        {0, 1, 20}, {0, 7, -1}, {1, 0, 0}, {1, 1, 5}, {2, 1, 3}, {2, 0, -1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t *arr = bad[i].what == 0 ? ids : bad[i].what == 1 ? lengths : labels;
        int32_t saved = arr[bad[i].index];
        arr[bad[i].index] = bad[i].value;
        ac_model_zero_grad(&m);
        ck_assert_msg(isnan(ac_model_forward(&m, ids, lengths, labels, B, T, 1, 0)), "case %zu", i);
        ac_model_backward(&m);
        for (size_t j = 0; j < m.n_params; j++)
            ck_assert_msg(m.grads[j] == 0.0f, "case %zu: backward after a rejected forward", i);
        arr[bad[i].index] = saved;
    }
    /* An evaluation forward (train 0) does not keep the attention maps, so a
     * backward after it must not run on stale ones; with keep_attention it does. */
    ac_model_zero_grad(&m);
    ck_assert(isfinite(ac_model_forward(&m, ids, lengths, labels, B, T, 0, 0)));
    ac_model_backward(&m);
    for (size_t j = 0; j < m.n_params; j++)
        ck_assert_msg(m.grads[j] == 0.0f, "backward after an evaluation forward");
    m.keep_attention = 1;
    ck_assert(isfinite(ac_model_forward(&m, ids, lengths, labels, B, T, 0, 0)));
    ac_model_backward(&m);
    int nonzero = 0;
    for (size_t j = 0; j < m.n_params; j++)
        nonzero += m.grads[j] != 0.0f;
    ck_assert_int_gt(nonzero, 0);
    m.keep_attention = 0;
    /* Labels are not checked when there are none; lengths still are. */
    labels[0] = 7;
    ck_assert(isfinite(ac_model_forward(&m, ids, lengths, NULL, B, T, 0, 0)));
    ac_model_free(&m);
}
END_TEST

/* ----------------------------------------------------------- initialisation */

START_TEST(test_init_weights)
{
    ac_model_config cfg = {.vocab_size = 1000, .max_len = 8, .d_model = 64, .n_heads = 4,
                           .d_ff = 128, .n_layers = 2, .n_classes = 2, .pooling = AC_POOL_MAX,
                           .dropout = 0.1f, .ln_eps = 1e-6f};
    ac_model m, again, other;
    ac_err err;
    ck_assert_int_eq(ac_model_create(&m, &cfg, &err), 0);
    ck_assert_int_eq(ac_model_create(&again, &cfg, &err), 0);
    ck_assert_int_eq(ac_model_create(&other, &cfg, &err), 0);
    ac_model_init_weights(&m, 42);
    ac_model_init_weights(&again, 42);
    ac_model_init_weights(&other, 43);
    ck_assert(memcmp(m.params, again.params, m.n_params * sizeof(float)) == 0);
    ck_assert(memcmp(m.params, other.params, m.n_params * sizeof(float)) != 0);

    for (int i = 0; i < m.n_tensors; i++) {
        const ac_param_info *t = &m.table[i];
        const float *w = m.params + t->offset;
        size_t len = strlen(t->name);
        if (t->ndim == 2) {
            double sum = 0.0, sq = 0.0;
            size_t within = 0;
            for (size_t j = 0; j < t->numel; j++) {
                sum += w[j];
                sq += (double)w[j] * w[j];
                within += fabsf(w[j]) < 0.02f;
            }
            double n = (double)t->numel, mean = sum / n, sd = sqrt(sq / n - mean * mean);
            /* Bounds of about 5 standard errors for these sizes (>= 128 values). */
            ck_assert_msg(fabs(mean) < 5 * 0.02 / sqrt(n), "%s: mean %g", t->name, mean);
            ck_assert_msg(fabs(sd - 0.02) < 5 * 0.02 / sqrt(2 * n), "%s: std %g", t->name, sd);
            /* Normal, not uniform: about 68% within one standard deviation. */
            ck_assert_msg(fabs(within / n - 0.6827) < 5 * 0.47 / sqrt(n), "%s: %g within 1 sd",
                          t->name, within / n);
        } else if (strcmp(t->name + len - 7, ".weight") == 0) {
            for (size_t j = 0; j < t->numel; j++)
                ck_assert_msg(w[j] == 1.0f, "%s[%zu] = %g", t->name, j, (double)w[j]);
        } else {
            for (size_t j = 0; j < t->numel; j++)
                ck_assert_msg(w[j] == 0.0f, "%s[%zu] = %g", t->name, j, (double)w[j]);
        }
    }
    /* Different tensors draw different values. */
    ck_assert(memcmp(m.p.layers[0].q_w, m.p.layers[0].k_w, 64 * 64 * sizeof(float)) != 0);
    ck_assert(memcmp(m.p.layers[0].q_w, m.p.layers[1].q_w, 64 * 64 * sizeof(float)) != 0);
    ac_model_free(&m);
    ac_model_free(&again);
    ac_model_free(&other);
}
END_TEST

/* ------------------------------------------------------------ training step */

typedef struct {
    ac_model m;
    ac_optim_config oc;
    float *m1, *m2;
    long step;
    int masked_lm; /* the model is a masked LM: steps mask the batch and use the head below */
    ac_mlm mlm;
} trainer;

static void trainer_make(trainer *tr, const ac_model_config *cfg, int B, int T, uint64_t seed)
{
    tr->masked_lm = cfg->objective == AC_OBJECTIVE_MASKED_LM;
    if (tr->masked_lm) {
        ac_err err;
        ck_assert_msg(ac_mlm_alloc(&tr->mlm, cfg, B, T, AC_MLM_MASK_FRAC, &err) == 0, "%s",
                      err.msg);
    }
    model_make(&tr->m, cfg, B, T);
    ac_model_init_weights(&tr->m, seed);
    ac_optim_config_defaults(&tr->oc);
    tr->m1 = calloc(tr->m.n_params, sizeof(float));
    tr->m2 = calloc(tr->m.n_params, sizeof(float));
    ck_assert(tr->m1 && tr->m2);
    tr->step = 0;
}

static void trainer_free(trainer *tr)
{
    if (tr->masked_lm)
        ac_mlm_free(&tr->mlm);
    ac_model_free(&tr->m);
    free(tr->m1);
    free(tr->m2);
}

/* What src/train/trainer.c does per batch (for a masked LM: mask, then the
 * head's forward and backward). */
static float train_step(trainer *tr, const batch *bt, uint64_t key)
{
    ac_model *m = &tr->m;
    uint64_t step_key = ac_rng_key(key, (uint64_t)tr->step);
    float loss;
    if (tr->masked_lm) {
        ac_mlm *h = &tr->mlm;
        int M = mask_for_test(h, m, bt, AC_MLM_MASK_FRAC, step_key);
        loss = ac_mlm_forward(m, h, h->masked_ids, bt->lengths, bt->B, bt->T, h->positions,
                              h->targets, M, 1, step_key);
        ac_model_zero_grad(m);
        ac_mlm_backward(m, h);
    } else {
        loss = ac_model_forward(m, bt->ids, bt->lengths, bt->labels, bt->B, bt->T, 1, step_key);
        ac_model_zero_grad(m);
        ac_model_backward(m);
    }
    ac_clip_grad_norm(m->grads, m->n_params, tr->oc.clip_norm);
    float lr = ac_lr_at(&tr->oc, tr->step);
    ac_adamw_step(m, m->params, m->grads, tr->m1, tr->m2, &tr->oc, lr, tr->step + 1);
    tr->step++;
    return loss;
}

/* A batch big enough that the layers split their work into several blocks
 * and the optimizer meets tensors above and below its threading threshold. */
static ac_model_config step_config(int masked_lm)
{
    /* vocab * d above 16384: AdamW splits the embedding between threads */
    ac_model_config c = {.vocab_size = 700, .max_len = 24, .d_model = 32, .n_heads = 4,
                         .d_ff = 64, .n_layers = 2, .n_classes = 3, .pooling = AC_POOL_MAX,
                         .dropout = 0.1f, .ln_eps = 1e-6f};
    if (masked_lm) {
        c.objective = AC_OBJECTIVE_MASKED_LM;
        c.n_classes = 0;
        c.ngram_order = 2;
        c.ngram_buckets = 101;
    }
    return c;
}

START_TEST(test_training_step_allocates_nothing)
{
#if !COUNT_ALLOCATIONS
    printf("SKIP test_training_step_allocates_nothing: AddressSanitizer owns malloc "
           "(the plain build counts)\n");
#else
    openblas_set_num_threads(1); /* as the CLI runs it */
    omp_set_num_threads(2);
    for (int masked_lm = 0; masked_lm <= 1; masked_lm++) {
        ac_model_config cfg = step_config(masked_lm);
        trainer tr;
        enum { B = 6, T = 20 };
        trainer_make(&tr, &cfg, B, T, 1);
        tr.oc.warmup_steps = 2;
        tr.oc.total_steps = 10;
        batch bt;
        const int32_t lengths[B] = {20, 3, 17, 9, 1, 12};
        batch_fill(&bt, B, T, lengths, cfg.vocab_size, 3, 2);
        train_step(&tr, &bt, 7); /* warms up the thread pool and BLAS buffers */

        atomic_store(&own_allocations, 0);
        atomic_store(&runtime_allocations, 0);
        atomic_store(&counting, 1);
        for (int s = 0; s < 4; s++)
            train_step(&tr, &bt, 7);
        if (!masked_lm)
            ac_model_forward(&tr.m, bt.ids, bt.lengths, NULL, B, T, 0, 0); /* and inference */
        atomic_store(&counting, 0);
        long own = atomic_load(&own_allocations), runtime = atomic_load(&runtime_allocations);
        printf("%s: 4 training steps%s: %ld allocations by attnctl, %ld inside the OpenMP "
               "runtime\n",
               masked_lm ? "masked LM" : "classifier", masked_lm ? "" : " + 1 inference", own,
               runtime);

        /* The counter does count: a plain malloc in the window is seen as ours. */
        atomic_store(&counting, 1);
        void *volatile probe = malloc(16);
        atomic_store(&counting, 0);
        free(probe);
        ck_assert_int_eq(atomic_load(&own_allocations), own + 1);

        ck_assert_msg(own == 0, "4 training steps made %ld allocations", own);
        trainer_free(&tr);
    }
#endif
}
END_TEST

/* Explanations allocate at setup only: an attribution run (embed, embedded
 * forwards, a backward per class, IG's refinement batches) allocates nothing. */
START_TEST(test_attribution_allocates_nothing)
{
#if !COUNT_ALLOCATIONS
    printf("SKIP test_attribution_allocates_nothing: AddressSanitizer owns malloc\n");
#else
    openblas_set_num_threads(1);
    omp_set_num_threads(2);
    ac_model_config cfg = small_config(AC_POOL_MAX, 0.0f);
    cfg.max_len = 12;
    cfg.ngram_order = 2;
    cfg.ngram_buckets = 7;
    ac_model m;
    ac_err err;
    ck_assert_msg(ac_model_create(&m, &cfg, &err) == 0, "%s", err.msg);
    randomize(&m, 71);
    const int32_t ids[12] = {3, 9, 4, 17, 2, 2, 8, 11, 5, 6, 1, 13};
    ac_attribution ig, gxi;
    /* 1 starting step: far from complete on this model, so IG refines */
    ck_assert_msg(ac_attribution_setup(&ig, &m, AC_ATTR_IG, 12, 1, 64, &err) == 0, "%s", err.msg);
    ck_assert_msg(ac_attribution_setup(&gxi, &m, AC_ATTR_GRADXINPUT, 12, 0, 0, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(ac_attribution_run(&ig, ids, 12, &err), 0); /* warms up the thread pool */

    atomic_store(&own_allocations, 0);
    atomic_store(&counting, 1);
    int rc = ac_attribution_run(&ig, ids, 12, &err) | ac_attribution_run(&ig, ids, 7, &err) |
             ac_attribution_run(&gxi, ids, 12, &err);
    atomic_store(&counting, 0);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(ig.steps > 1, "IG did not refine (%d steps): the test would not cover it", ig.steps);
    long own = atomic_load(&own_allocations);
    ck_assert_msg(own == 0, "attribution runs made %ld allocations", own);
    ac_attribution_free(&ig);
    ac_attribution_free(&gxi);
    ac_model_free(&m);
#endif
}
END_TEST

/* Same seed, 1, 2 and 4 threads: byte-identical losses, weights and moments. */
START_TEST(test_thread_count_determinism)
{
    openblas_set_num_threads(1);
    ac_model_config cfg = step_config(_i);
    enum { B = 6, T = 20, STEPS = 4, RUNS = 3 };
    const int32_t lengths[B] = {20, 5, 16, 11, 2, 19};
    batch bt;
    batch_fill(&bt, B, T, lengths, cfg.vocab_size, 3, 3);
    const int threads[RUNS] = {1, 2, 4};
    trainer runs[RUNS];
    float losses[RUNS][STEPS];
    for (int r = 0; r < RUNS; r++) {
        omp_set_num_threads(threads[r]);
        trainer_make(&runs[r], &cfg, B, T, 5);
        runs[r].oc.warmup_steps = 1;
        runs[r].oc.total_steps = STEPS;
        runs[r].oc.lr = 3e-3f;
        for (int s = 0; s < STEPS; s++)
            losses[r][s] = train_step(&runs[r], &bt, 17);
    }
    omp_set_num_threads(2);
    size_t bytes = runs[0].m.n_params * sizeof(float);
    for (int r = 1; r < RUNS; r++) {
        ck_assert_msg(memcmp(losses[0], losses[r], sizeof losses[0]) == 0, "%d threads: losses",
                      threads[r]);
        ck_assert_msg(memcmp(runs[0].m.params, runs[r].m.params, bytes) == 0, "%d threads: weights",
                      threads[r]);
        ck_assert(memcmp(runs[0].m1, runs[r].m1, bytes) == 0);
        ck_assert(memcmp(runs[0].m2, runs[r].m2, bytes) == 0);
    }
    /* and the steps did something */
    trainer fresh;
    trainer_make(&fresh, &cfg, 1, 1, 5);
    ck_assert(memcmp(fresh.m.params, runs[0].m.params, bytes) != 0);
    trainer_free(&fresh);
    for (int r = 0; r < RUNS; r++)
        trainer_free(&runs[r]);
}
END_TEST

/* ---------------------------------------------------------------- optimizer */

/* Two AdamW steps on a tiny model checked against the formulas in double:
 * bias correction, decoupled decay on matrices only, lr changing per step. */
START_TEST(test_adamw_two_steps_by_hand)
{
    ac_model_config cfg = {.vocab_size = 2, .max_len = 1, .d_model = 2, .n_heads = 1, .d_ff = 1,
                           .n_layers = 0, .n_classes = 2, .pooling = AC_POOL_MEAN,
                           .dropout = 0.0f, .ln_eps = 1e-6f};
    ac_model m;
    ac_err err;
    ck_assert_int_eq(ac_model_create(&m, &cfg, &err), 0);
    /* embed.weight[4] embed.norm.weight[2] embed.norm.bias[2] head.weight[4] head.bias[2] */
    const size_t n = m.n_params;
    ck_assert_uint_eq(n, 14);
    float *g = calloc(n, sizeof(float)), *m1 = calloc(n, sizeof(float)), *m2 = calloc(n, sizeof(float));
    double *p = calloc(n, sizeof(double)), *em = calloc(n, sizeof(double)), *ev = calloc(n, sizeof(double));
    ck_assert(g && m1 && m2 && p && em && ev);
    for (size_t i = 0; i < n; i++) {
        m.params[i] = 0.5f + 0.25f * (float)i;
        p[i] = m.params[i];
    }
    ac_optim_config oc;
    ac_optim_config_defaults(&oc);
    oc.beta1 = 0.8f;
    oc.beta2 = 0.95f;
    oc.eps = 1e-3f; /* large enough to matter in the check */
    oc.weight_decay = 0.5f;
    const float lrs[2] = {0.1f, 0.05f};
    for (int t = 1; t <= 2; t++) {
        for (size_t i = 0; i < n; i++)
            g[i] = (i % 3 == 0) ? 0.0f : (float)(((int)i * 7 + t * 5) % 11 - 5) * 0.1f;
        ac_adamw_step(&m, m.params, g, m1, m2, &oc, lrs[t - 1], t);
        for (int ti = 0; ti < m.n_tensors; ti++) {
            const ac_param_info *info = &m.table[ti];
            for (size_t j = info->offset; j < info->offset + info->numel; j++) {
                double b1 = oc.beta1, b2 = oc.beta2, lr = lrs[t - 1];
                em[j] = b1 * em[j] + (1 - b1) * g[j];
                ev[j] = b2 * ev[j] + (1 - b2) * (double)g[j] * g[j];
                double mhat = em[j] / (1 - pow(b1, t)), vhat = ev[j] / (1 - pow(b2, t));
                if (info->ndim == 2)
                    p[j] *= 1 - lr * oc.weight_decay;
                p[j] -= lr * mhat / (sqrt(vhat) + oc.eps);
            }
        }
        for (size_t i = 0; i < n; i++) {
            ck_assert_msg(fabs(m.params[i] - p[i]) <= 2e-6 * fmax(1.0, fabs(p[i])),
                          "step %d param %zu: %.9g, by hand %.9g", t, i, (double)m.params[i], p[i]);
            ck_assert_msg(fabs(m1[i] - em[i]) <= 1e-6 && fabs(m2[i] - ev[i]) <= 1e-6,
                          "step %d moments of %zu", t, i);
        }
    }
    /* Zero-gradient elements: matrices only decay, the others stay exactly. */
    for (int ti = 0; ti < m.n_tensors; ti++) {
        const ac_param_info *info = &m.table[ti];
        for (size_t j = info->offset; j < info->offset + info->numel; j++) {
            if (j % 3 != 0)
                continue;
            float start = 0.5f + 0.25f * (float)j;
            if (info->ndim == 2)
                ck_assert_msg(m.params[j] < start, "%s: no decay", info->name);
            else
                ck_assert_msg(m.params[j] == start, "%s: decayed (%g -> %g)", info->name,
                              (double)start, (double)m.params[j]);
        }
    }
    free(g); free(m1); free(m2); free(p); free(em); free(ev);
    ac_model_free(&m);
}
END_TEST

START_TEST(test_clip_grad_norm)
{
    enum { N = 1000 };
    float *g = malloc(N * sizeof(float)), *g2 = malloc(N * sizeof(float));
    ck_assert(g && g2);
    double sq = 0.0;
    for (int i = 0; i < N; i++) {
        g[i] = ac_rng_normal(77, (uint64_t)i);
        sq += (double)g[i] * g[i];
    }
    memcpy(g2, g, N * sizeof(float));
    double norm = sqrt(sq);
    /* Below the threshold or disabled: reported, nothing changes. */
    ck_assert(fabs(ac_clip_grad_norm(g, N, (float)norm * 2) - norm) < 1e-5 * norm);
    ck_assert(memcmp(g, g2, N * sizeof(float)) == 0);
    ck_assert(fabs(ac_clip_grad_norm(g, N, 0.0f) - norm) < 1e-5 * norm);
    ck_assert(memcmp(g, g2, N * sizeof(float)) == 0);
    /* Above: scaled to the threshold, direction kept. */
    float before = ac_clip_grad_norm(g, N, 1.0f);
    ck_assert(fabs(before - norm) < 1e-5 * norm);
    double after = 0.0;
    for (int i = 0; i < N; i++) {
        after += (double)g[i] * g[i];
        ck_assert(fabs(g[i] - g2[i] / norm) < 1e-6);
    }
    ck_assert_msg(fabs(sqrt(after) - 1.0) < 1e-5, "norm after clipping %g", sqrt(after));
    /* The norm is the same bits for any thread count. */
    omp_set_num_threads(1);
    float n1 = ac_clip_grad_norm(g2, N, 0.0f);
    omp_set_num_threads(2);
    float n2 = ac_clip_grad_norm(g2, N, 0.0f);
    ck_assert(memcmp(&n1, &n2, sizeof n1) == 0);
    /* [3, 4] has norm 5. */
    float small[2] = {3.0f, 4.0f};
    ck_assert(ac_clip_grad_norm(small, 2, 1.0f) == 5.0f);
    ck_assert(fabsf(small[0] - 0.6f) < 1e-6f && fabsf(small[1] - 0.8f) < 1e-6f);
    free(g);
    free(g2);
}
END_TEST

START_TEST(test_lr_schedule)
{
    ac_optim_config c;
    ac_optim_config_defaults(&c);
    c.lr = 1.0f;
    c.warmup_steps = 10;
    c.total_steps = 110;
    c.min_lr_ratio = 0.0f;
    c.schedule = AC_SCHED_COSINE;
    const float tol = 1e-6f;
    /* Linear warmup: step s < 10 gives (s + 1) / 10. */
    ck_assert(fabsf(ac_lr_at(&c, 0) - 0.1f) < tol);
    ck_assert(fabsf(ac_lr_at(&c, 4) - 0.5f) < tol);
    ck_assert(fabsf(ac_lr_at(&c, 9) - 1.0f) < tol);
    /* Cosine from the peak at step 10 to 0 at step 110. */
    ck_assert(fabsf(ac_lr_at(&c, 10) - 1.0f) < tol);
    ck_assert(fabsf(ac_lr_at(&c, 35) - (float)(0.5 * (1 + cos(M_PI * 0.25)))) < tol);
    ck_assert(fabsf(ac_lr_at(&c, 60) - 0.5f) < tol);
    ck_assert(fabsf(ac_lr_at(&c, 85) - (float)(0.5 * (1 + cos(M_PI * 0.75)))) < tol);
    ck_assert(fabsf(ac_lr_at(&c, 110)) < tol);
    ck_assert(fabsf(ac_lr_at(&c, 500)) < tol);
    for (long s = 11; s < 110; s++)
        ck_assert(ac_lr_at(&c, s) < ac_lr_at(&c, s - 1));
    /* Linear decay, with a floor. */
    c.schedule = AC_SCHED_LINEAR;
    c.min_lr_ratio = 0.1f;
    ck_assert(fabsf(ac_lr_at(&c, 10) - 1.0f) < tol);
    ck_assert(fabsf(ac_lr_at(&c, 35) - 0.775f) < tol);
    ck_assert(fabsf(ac_lr_at(&c, 60) - 0.55f) < tol);
    ck_assert(fabsf(ac_lr_at(&c, 110) - 0.1f) < tol);
    ck_assert(fabsf(ac_lr_at(&c, 200) - 0.1f) < tol);
    /* Cosine with the floor: halfway is the middle of peak and floor. */
    c.schedule = AC_SCHED_COSINE;
    ck_assert(fabsf(ac_lr_at(&c, 60) - 0.55f) < tol);
    /* Constant after warmup; no warmup means the peak from step 0. */
    c.schedule = AC_SCHED_CONSTANT;
    ck_assert(fabsf(ac_lr_at(&c, 5) - 0.6f) < tol);
    ck_assert(fabsf(ac_lr_at(&c, 100) - 1.0f) < tol);
    c.schedule = AC_SCHED_COSINE;
    c.warmup_steps = 0;
    c.min_lr_ratio = 0.0f;
    c.total_steps = 100;
    ck_assert(fabsf(ac_lr_at(&c, 0) - 1.0f) < tol);
    ck_assert(fabsf(ac_lr_at(&c, 50) - 0.5f) < tol);

    ac_schedule_kind k;
    ck_assert_int_eq(ac_schedule_parse("linear", &k), 0);
    ck_assert_int_eq(k, AC_SCHED_LINEAR);
    ck_assert_str_eq(ac_schedule_name(AC_SCHED_COSINE), "cosine");
    ck_assert_int_eq(ac_schedule_parse("exp", &k), -1);
}
END_TEST

/* ----------------------------------------------------------- training sanity */

/* label = whether token 3 occurs anywhere in the sequence. */
static void presence_batch(batch *bt, int B, int T, int V, uint64_t key)
{
    bt->B = B;
    bt->T = T;
    for (int b = 0; b < B; b++) {
        int len = 3 + (int)ac_rng_below(key, (uint64_t)b, (uint64_t)(T - 2));
        int has = 0;
        bt->lengths[b] = len;
        for (int t = 0; t < T; t++) {
            int32_t id = t < len ? 2 + (int32_t)ac_rng_below(key, 1000 + (uint64_t)(b * T + t),
                                                             (uint64_t)V - 2)
                                 : 0;
            has |= t < len && id == 3;
            bt->ids[b * T + t] = id;
        }
        bt->labels[b] = has;
    }
}

START_TEST(test_learns_token_presence)
{
    ac_model_config cfg = {.vocab_size = 12, .max_len = 8, .d_model = 16, .n_heads = 2,
                           .d_ff = 32, .n_layers = 1, .n_classes = 2, .pooling = AC_POOL_MAX,
                           .dropout = 0.0f, .ln_eps = 1e-6f};
    enum { B = 32, T = 8, STEPS = 200, TEST_B = 64 };
    trainer tr;
    trainer_make(&tr, &cfg, TEST_B, T, 8);
    tr.oc.lr = 1e-2f;
    tr.oc.warmup_steps = 10;
    tr.oc.total_steps = STEPS;
    batch bt, test;
    presence_batch(&test, TEST_B, T, cfg.vocab_size, 999);
    float first = ac_model_forward(&tr.m, test.ids, test.lengths, test.labels, TEST_B, T, 0, 0);
    for (int s = 0; s < STEPS; s++) {
        presence_batch(&bt, B, T, cfg.vocab_size, ac_rng_key(123, (uint64_t)s));
        train_step(&tr, &bt, 5);
    }
    float last = ac_model_forward(&tr.m, test.ids, test.lengths, test.labels, TEST_B, T, 0, 0);
    int correct = 0;
    for (int b = 0; b < TEST_B; b++) {
        const float *p = tr.m.act.probs_out + 2 * b;
        correct += (p[1] > p[0]) == test.labels[b];
    }
    printf("token presence: held-out loss %.4f -> %.4f after %d steps, accuracy %d/%d\n",
           (double)first, (double)last, STEPS, correct, TEST_B);
    ck_assert_msg(last < 0.1f, "held-out loss %.4f after %d steps", (double)last, STEPS);
    ck_assert_int_ge(correct, TEST_B - 2);
    trainer_free(&tr);
}
END_TEST

/* The model can memorise a tiny fixed batch with arbitrary labels. */
START_TEST(test_overfits_a_tiny_batch)
{
    ac_model_config cfg = small_config(AC_POOL_MEAN, 0.0f);
    enum { B = 8, T = 6 };
    trainer tr;
    trainer_make(&tr, &cfg, B, T, 9);
    tr.oc.lr = 1e-2f;
    tr.oc.weight_decay = 0.0f;
    batch bt;
    const int32_t lengths[B] = {6, 5, 4, 3, 6, 2, 1, 5};
    batch_fill(&bt, B, T, lengths, cfg.vocab_size, cfg.n_classes, 31);
    float first = train_step(&tr, &bt, 1), last = first;
    for (int s = 1; s < 300; s++)
        last = train_step(&tr, &bt, 1);
    last = ac_model_forward(&tr.m, bt.ids, bt.lengths, bt.labels, B, T, 0, 0);
    printf("tiny batch: loss %.4f -> %.5f in 300 steps\n", (double)first, (double)last);
    ck_assert_msg(last < 0.01f, "loss %.5f after 300 steps", (double)last);
    trainer_free(&tr);
}
END_TEST

static Suite *model_suite(void)
{
    Suite *s = suite_create("model");
    TCase *grad = tcase_create("gradients");
    tcase_set_timeout(grad, 60);
    tcase_add_test(grad, test_gradcheck_max_pooling);
    tcase_add_test(grad, test_gradcheck_mean_pooling);
    tcase_add_test(grad, test_gradcheck_cls_pooling);
    tcase_add_test(grad, test_gradcheck_dropout_fixed_key);
    tcase_add_test(grad, test_gradcheck_ngrams_learned_positions);
    tcase_add_test(grad, test_gradcheck_wide_path);
    tcase_add_test(grad, test_gradcheck_masked_lm);
    tcase_add_test(grad, test_sparse_rows_match_dense);
    tcase_add_test(grad, test_eval_mode_has_no_dropout);
    tcase_add_test(grad, test_padding_is_invisible);
    tcase_add_test(grad, test_inference_loop);
    tcase_add_test(grad, test_input_gradient_finite_differences);
    tcase_add_test(grad, test_split_model_matches_the_model);
    suite_add_tcase(s, grad);

    TCase *layout = tcase_create("layout");
    tcase_add_test(layout, test_parameter_table);
    tcase_add_test(layout, test_config_validation);
    tcase_add_test(layout, test_copy_encoder);
    tcase_add_test(layout, test_activation_allocation);
    tcase_add_test(layout, test_forward_rejects_bad_batches);
    tcase_add_test(layout, test_init_weights);
    suite_add_tcase(s, layout);

    TCase *step = tcase_create("training");
    tcase_set_timeout(step, 60);
    tcase_add_test(step, test_training_step_allocates_nothing);
    tcase_add_test(step, test_attribution_allocates_nothing);
    tcase_add_loop_test(step, test_thread_count_determinism, 0, 2); /* classifier, masked LM */
    tcase_add_test(step, test_adamw_two_steps_by_hand);
    tcase_add_test(step, test_clip_grad_norm);
    tcase_add_test(step, test_lr_schedule);
    tcase_add_test(step, test_learns_token_presence);
    tcase_add_test(step, test_overfits_a_tiny_batch);
    suite_add_tcase(s, step);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(model_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
