/* Masked-LM pretraining: BERT masking of a batch, the layers of the head
 * (row gather, softmax cross-entropy over the vocabulary in place) and the
 * head wired onto the shared encoder. See include/attnctl/mlm.h. */
#include "attnctl/mlm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnctl/nn.h"
#include "attnctl/rng.h"
#include "simd.h"

/* Sub-streams of a sequence's key. */
enum { STREAM_COUNT = 1, STREAM_CHOOSE = 2, STREAM_KIND = 3, STREAM_WORD = 4 };
/* The stream of the one position forced when a batch drew none. */
#define STREAM_FORCED UINT64_MAX

/* ------------------------------------------------------------------ masking */

int ac_mlm_max_masked(int B, int T, double mask_frac)
{
    double per_row = ceil(mask_frac * (double)T);
    if (per_row < 1)
        per_row = 1;
    if (per_row > T)
        per_row = T;
    return B * (int)per_row;
}

/* Position t of sequence b becomes a prediction target. */
static void mask_position(const ac_mlm_masking *s, const int32_t *ids, int32_t *masked_ids,
                          size_t pos, uint64_t row_key, int t)
{
    float u = ac_rng_uniform(ac_rng_key(row_key, STREAM_KIND), (uint64_t)t);
    int32_t n_words = s->vocab_size - s->first_word_id;
    if (u < AC_MLM_SHARE_MASKED)
        masked_ids[pos] = s->mask_id;
    else if (u < AC_MLM_SHARE_MASKED + AC_MLM_SHARE_RANDOM && n_words > 0)
        masked_ids[pos] = s->first_word_id +
                          (int32_t)ac_rng_below(ac_rng_key(row_key, STREAM_WORD), (uint64_t)t,
                                                (uint64_t)n_words);
    else
        masked_ids[pos] = ids[pos];
}

static int first_eligible(const ac_mlm_masking *s, const int32_t *row, int length)
{
    return s->skip_first_id >= 0 && length > 0 && row[0] == s->skip_first_id ? 1 : 0;
}

/* How many positions of a row with n eligible tokens are masked:
 * floor(mask_frac * n + u), at most n and at most ceil(mask_frac * n) (which
 * that floor never exceeds: the cap only guards the buffers, and depends on
 * the row alone, not on the padded length of the batch it is in). */
static int row_mask_count(const ac_mlm_masking *spec, int n, uint64_t row_key)
{
    double want = spec->mask_frac * (double)n +
                  (double)ac_rng_uniform(ac_rng_key(row_key, STREAM_COUNT), 0);
    int k = (int)floor(want);
    int cap = ac_mlm_max_masked(1, n, spec->mask_frac);
    if (k > n)
        k = n;
    return k > cap ? cap : k;
}

int ac_mlm_count_masked(const ac_mlm_masking *spec, const int32_t *ids, const int32_t *lengths,
                        int B, int T, uint64_t key, int64_t first_row)
{
    int M = 0, any_eligible = 0;
    for (int b = 0; b < B; b++) {
        int n = lengths[b] - first_eligible(spec, ids + (size_t)b * T, lengths[b]);
        if (n <= 0)
            continue;
        any_eligible = 1;
        M += row_mask_count(spec, n, ac_rng_key(key, (uint64_t)(first_row + b)));
    }
    if (!any_eligible)
        return -1;
    return M > 0 ? M : 1;
}

int ac_mlm_mask_batch(const ac_mlm_masking *spec, const int32_t *ids, const int32_t *lengths,
                      int B, int T, uint64_t key, int32_t *masked_ids, int32_t *positions,
                      int32_t *targets, int32_t *scratch)
{
    return ac_mlm_mask_rows(spec, ids, lengths, B, T, key, 0, masked_ids, positions, targets,
                            scratch);
}

int ac_mlm_mask_rows(const ac_mlm_masking *spec, const int32_t *ids, const int32_t *lengths,
                     int B, int T, uint64_t key, int64_t first_row, int32_t *masked_ids,
                     int32_t *positions, int32_t *targets, int32_t *scratch)
{
    memcpy(masked_ids, ids, (size_t)B * (size_t)T * sizeof *ids);
    int M = 0, any_eligible = -1;
    for (int b = 0; b < B; b++) {
        const int32_t *row = ids + (size_t)b * T;
        int first = first_eligible(spec, row, lengths[b]);
        int n = lengths[b] - first;
        if (n <= 0)
            continue;
        if (any_eligible < 0)
            any_eligible = b;
        uint64_t row_key = ac_rng_key(key, (uint64_t)(first_row + b));
        int k = row_mask_count(spec, n, row_key);
    /* k of the n eligible positions: a partial Fisher-Yates shuffle. */
        for (int i = 0; i < n; i++)
            scratch[i] = first + i;
        uint64_t choose = ac_rng_key(row_key, STREAM_CHOOSE);
        for (int j = 0; j < k; j++) {
            int r = j + (int)ac_rng_below(choose, (uint64_t)j, (uint64_t)(n - j));
            int32_t tmp = scratch[j];
            scratch[j] = scratch[r];
            scratch[r] = tmp;
        }
        /* In ascending order (insertion sort: k is small). */
        for (int j = 1; j < k; j++) {
            int32_t v = scratch[j];
            int i = j - 1;
            while (i >= 0 && scratch[i] > v) {
                scratch[i + 1] = scratch[i];
                i--;
            }
            scratch[i + 1] = v;
        }
        for (int j = 0; j < k; j++) {
            size_t pos = (size_t)b * T + (size_t)scratch[j];
            mask_position(spec, ids, masked_ids, pos, row_key, scratch[j]);
            positions[M] = (int32_t)pos;
            targets[M] = ids[pos];
            M++;
        }
    }
    if (any_eligible < 0)
        return -1;
    if (M == 0) {
        int b = any_eligible;
        int first = first_eligible(spec, ids + (size_t)b * T, lengths[b]);
        /* One stream per group of rows (the rows of a micro-batch), far
         * from the row streams. */
        uint64_t forced = ac_rng_key(key, STREAM_FORCED - (uint64_t)first_row);
        int t = first + (int)ac_rng_below(forced, 0, (uint64_t)(lengths[b] - first));
        size_t pos = (size_t)b * T + (size_t)t;
        mask_position(spec, ids, masked_ids, pos, forced, t);
        positions[0] = (int32_t)pos;
        targets[0] = ids[pos];
        M = 1;
    }
    return M;
}

/* ------------------------------------------------------------------ layers */

void gather_rows_forward(float *out, const float *in, const int32_t *rows, int M, int d)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < M; i++)
        memcpy(out + (size_t)i * d, in + (size_t)rows[i] * d, (size_t)d * sizeof *out);
}

void gather_rows_backward(float *din, const float *dout, const int32_t *rows, int M, int d)
{
    if (!din)
        return;
    for (int i = 0; i < M; i++) {
        float *g = din + (size_t)rows[i] * d;
        const float *go = dout + (size_t)i * d;
        for (int k = 0; k < d; k++)
            g[k] += go[k];
    }
}

/* One row: softmax in place; returns -log p[target] and the argmax. The last
 * partial vector is padded with -inf, whose exponential is exactly 0. */
static float xent_row(float *x, int V, int32_t target, int32_t *argmax)
{
    int i = 0;
    vf16 vmax = vf_splat(-INFINITY);
    for (; i + VF_LANES <= V; i += VF_LANES)
        vmax = vf_max(vmax, vf_load(x + i));
    float mx = vf_hmax(vmax);
    for (int k = i; k < V; k++)
        mx = x[k] > mx ? x[k] : mx;
    int arg = 0;
    while (arg < V - 1 && !(x[arg] == mx))
        arg++;
    *argmax = arg;
    const float target_logit = x[target];
    const vf16 shift = vf_splat(mx);
    vf16 acc = vf_splat(0.0f);
    for (i = 0; i + VF_LANES <= V; i += VF_LANES) {
        vf16 e = vf_exp_nonpositive(vf_load(x + i) - shift);
        vf_store(x + i, e);
        acc += e;
    }
    if (i < V) {
        float tail[VF_LANES];
        for (int k = 0; k < VF_LANES; k++)
            tail[k] = i + k < V ? x[i + k] : -INFINITY;
        vf16 e = vf_exp_nonpositive(vf_load(tail) - shift);
        vf_store(tail, e);
        acc += e;
        memcpy(x + i, tail, (size_t)(V - i) * sizeof *x);
    }
    float sum = vf_sum(acc);
    const vf16 inv = vf_splat(1.0f / sum);
    for (i = 0; i + VF_LANES <= V; i += VF_LANES)
        vf_store(x + i, vf_load(x + i) * inv);
    for (; i < V; i++)
        x[i] *= inv[0];
    /* (max - x[target]) + log(sum): two non-negative terms (see crossentropy.c). */
    return (mx - target_logit) + logf(sum);
}

float softmax_xent_inplace_forward(float *logits, float *losses, int32_t *predicted,
                                   const int32_t *targets, int M, int V)
{
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; r++) {
        int32_t arg;
        losses[r] = xent_row(logits + (size_t)r * V, V, targets[r], &arg);
        if (predicted)
            predicted[r] = arg;
    }
    double total = 0.0;
    for (int r = 0; r < M; r++)
        total += losses[r];
    return M > 0 ? (float)(total / M) : 0.0f;
}

void softmax_xent_inplace_backward(float *probs, const int32_t *targets, int M, int V)
{
    softmax_xent_inplace_backward_of_mean(probs, targets, M, V, M);
}

void softmax_xent_inplace_backward_of_mean(float *probs, const int32_t *targets, int M, int V,
                                           int mean_rows)
{
    const float inv = 1.0f / (float)mean_rows;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; r++) {
        float *p = probs + (size_t)r * V;
        float p_target = p[targets[r]];
        int i = 0;
        for (; i + VF_LANES <= V; i += VF_LANES)
            vf_store(p + i, vf_load(p + i) * inv);
        for (; i < V; i++)
            p[i] *= inv;
        p[targets[r]] = (p_target - 1.0f) * inv;
    }
}

/* ------------------------------------------------------------------ the head */

typedef struct {
    size_t rows, d, V, BT, T;
} mlm_sizes;

/* Lays the buffers out in one block (base NULL: only counts bytes). */
static size_t mlm_layout(ac_mlm *h, const mlm_sizes *z, char *base)
{
    size_t off = 0;
#define MLM_PIECE(field, type, count)                                                              \
    do {                                                                                           \
        h->field = base ? (type *)(void *)(base + off) : NULL;                                     \
        off += ((count) * sizeof(type) + 63) / 64 * 64;                                            \
    } while (0)
    MLM_PIECE(masked_ids, int32_t, z->BT);
    MLM_PIECE(positions, int32_t, z->rows);
    MLM_PIECE(targets, int32_t, z->rows);
    MLM_PIECE(predicted, int32_t, z->rows);
    MLM_PIECE(scratch, int32_t, z->T);
    MLM_PIECE(hidden, float, z->rows * z->d);
    MLM_PIECE(logits, float, z->rows * z->V);
    MLM_PIECE(losses, float, z->rows);
    MLM_PIECE(grad_hidden, float, z->rows * z->d);
#undef MLM_PIECE
    return off;
}

static mlm_sizes sizes_of(const ac_model_config *cfg, int B, int T, double mask_frac)
{
    mlm_sizes z = {.rows = (size_t)ac_mlm_max_masked(B, T, mask_frac),
                   .d = (size_t)cfg->d_model,
                   .V = (size_t)cfg->vocab_size,
                   .BT = (size_t)B * (size_t)T,
                   .T = (size_t)T};
    return z;
}

size_t ac_mlm_bytes(const ac_model_config *cfg, int B, int T, double mask_frac)
{
    ac_mlm h;
    mlm_sizes z = sizes_of(cfg, B, T, mask_frac);
    return mlm_layout(&h, &z, NULL);
}

int ac_mlm_alloc(ac_mlm *h, const ac_model_config *cfg, int B, int T, double mask_frac,
                 ac_err *err)
{
    memset(h, 0, sizeof *h);
    if (B < 1 || T < 1 || !(mask_frac > 0.0 && mask_frac < 1.0))
        return ac_err_set(err, "masked LM: batch %d x %d with mask share %g is not possible", B, T,
                          mask_frac);
    mlm_sizes z = sizes_of(cfg, B, T, mask_frac);
    size_t bytes = mlm_layout(h, &z, NULL);
    char *mem = aligned_alloc(64, bytes);
    if (!mem)
        return ac_err_set(err, "masked LM: out of memory for the output layer (%.0f MiB for %zu "
                               "masked positions x %zu words)",
                          (double)bytes / 1048576.0, z.rows, z.V);
    mlm_layout(h, &z, mem);
    h->max_rows = (int)z.rows;
    h->max_B = B;
    h->max_T = T;
    return 0;
}

void ac_mlm_free(ac_mlm *h)
{
    if (!h)
        return;
    free(h->masked_ids); /* the start of the block */
    memset(h, 0, sizeof *h);
}

float ac_mlm_forward(ac_model *m, ac_mlm *h, const int32_t *input_ids, const int32_t *lengths,
                     int B, int T, const int32_t *positions, const int32_t *targets, int M,
                     int train, uint64_t dropout_key)
{
    const ac_model_config *c = &m->cfg;
    const int d = c->d_model, V = c->vocab_size;
    h->n_rows = 0;
    int ok = c->objective == AC_OBJECTIVE_MASKED_LM && M >= 1 && M <= h->max_rows && B >= 1 &&
             T >= 1 && B <= h->max_B && T <= h->max_T;
    for (int i = 0; ok && i < B; i++)
        ok = lengths[i] >= 1 && lengths[i] <= T;
    for (int i = 0; ok && i < M; i++)
        ok = positions[i] >= 0 && positions[i] < B * T &&
             positions[i] % T < lengths[positions[i] / T] && targets[i] >= 0 && targets[i] < V;
    if (!ok || ac_model_encoder_forward(m, input_ids, lengths, B, T, train, dropout_key) != 0)
        return NAN;
    gather_rows_forward(h->hidden, ac_model_encoder_output(m), positions, M, d);
    linear_forward(h->logits, h->hidden, m->p.embed_w, m->p.mlm_bias, M, d, V);
    float loss = softmax_xent_inplace_forward(h->logits, h->losses, h->predicted, targets, M, V);
    int correct = 0;
    for (int i = 0; i < M; i++)
        correct += h->predicted[i] == targets[i];
    h->n_correct = correct;
    h->n_rows = M;
    h->last_positions = positions;
    h->last_targets = targets;
    return loss;
}

void ac_mlm_backward(ac_model *m, ac_mlm *h)
{
    const int M = h->n_rows, d = m->cfg.d_model, V = m->cfg.vocab_size;
    if (M < 1 || m->last_B < 1 || !m->last_maps_kept)
        return;
    softmax_xent_inplace_backward_of_mean(h->logits, h->last_targets, M, V,
                                          h->mean_rows > 0 ? h->mean_rows : M);
    memset(h->grad_hidden, 0, (size_t)M * d * sizeof *h->grad_hidden);
    /* The output layer is the embedding: its gradient lands in embed.weight's. */
    linear_backward(h->grad_hidden, m->g.embed_w, m->g.mlm_bias, h->logits, h->hidden,
                    m->p.embed_w, M, d, V);
    float *d_output = m->act.grad_a;
    memset(d_output, 0, (size_t)m->last_B * m->last_T * d * sizeof *d_output);
    gather_rows_backward(d_output, h->grad_hidden, h->last_positions, M, d);
    ac_model_encoder_backward(m, d_output);
    h->n_rows = 0; /* the probabilities are gone: one backward per forward */
}
