/* AdamW (PyTorch semantics), global gradient-norm clipping and the
 * learning-rate schedule, all over the model's flat parameter layout. */
#include "attnctl/optim.h"

#include <math.h>
#include <string.h>

#include "simd.h"

/* The squared norm is summed in this many contiguous chunks (fixed, not the
 * thread count), then the partial sums are added in order: the result is the
 * same bits for any number of threads. */
#define NORM_CHUNKS 64

void ac_optim_config_defaults(ac_optim_config *c)
{
    c->lr = 1e-3f;
    c->beta1 = 0.9f;
    c->beta2 = 0.999f;
    c->eps = 1e-8f;
    c->weight_decay = 0.01f;
    c->clip_norm = 1.0f;
    c->schedule = AC_SCHED_COSINE;
    c->warmup_steps = 0;
    c->total_steps = 0;
    c->min_lr_ratio = 0.0f;
}

static const ac_name SCHEDULE_NAMES[] = {
    {AC_SCHED_COSINE, "cosine", 0},
    {AC_SCHED_LINEAR, "linear", 0},
    {AC_SCHED_CONSTANT, "constant", 0},
};
const ac_names ac_schedule_names = AC_NAMES(SCHEDULE_NAMES);

const char *ac_schedule_name(ac_schedule_kind v)
{
    return ac_names_name(&ac_schedule_names, (int)v);
}

int ac_schedule_parse(const char *s, ac_schedule_kind *out)
{
    int v;
    if (ac_names_parse(&ac_schedule_names, s, &v))
        return -1;
    *out = (ac_schedule_kind)v;
    return 0;
}

/* Warmup: step s < W gives lr * (s + 1) / W (from lr/W up to lr).
 * Decay: from lr at step W to lr * min_lr_ratio at step total_steps
 * (cosine or linear in the progress (s - W) / (total - W)), constant after.
 * total_steps <= 0 means "unknown": no decay. The constant schedule keeps lr
 * after the warmup. */
float ac_lr_at(const ac_optim_config *c, long step)
{
    double peak = c->lr;
    if (step < 0)
        step = 0;
    if (c->warmup_steps > 0 && step < c->warmup_steps)
        return (float)(peak * (double)(step + 1) / (double)c->warmup_steps);
    if (c->schedule == AC_SCHED_CONSTANT || c->total_steps <= 0)
        return (float)peak;
    double floor_lr = peak * c->min_lr_ratio;
    long warmup = c->warmup_steps > 0 ? c->warmup_steps : 0;
    if (step >= c->total_steps)
        return (float)floor_lr;
    double progress = (double)(step - warmup) / (double)(c->total_steps - warmup);
    double factor = c->schedule == AC_SCHED_COSINE ? 0.5 * (1.0 + cos(M_PI * progress))
                                                   : 1.0 - progress;
    return (float)(floor_lr + (peak - floor_lr) * factor);
}

/* Sum of squares of x[0..n): 16 float lanes over blocks of NORM_BLOCK
 * elements, each block's sum added in double, all in a fixed order. */
#define NORM_BLOCK 1024
static double sum_of_squares(const float *x, size_t n)
{
    double total = 0.0;
    for (size_t b = 0; b < n; b += NORM_BLOCK) {
        size_t end = n - b < NORM_BLOCK ? n : b + NORM_BLOCK;
        vf16 acc = vf_splat(0.0f);
        size_t i = b;
        for (; i + VF_LANES <= end; i += VF_LANES) {
            vf16 v = vf_load(x + i);
            acc += v * v;
        }
        double block = vf_sum(acc);
        for (; i < end; i++)
            block += (double)x[i] * (double)x[i];
        total += block;
    }
    return total;
}

/* Sum of squares of x[0..n) in NORM_CHUNKS fixed chunks, added in order. */
static double chunked_sum_of_squares(const float *x, size_t n)
{
    double partial[NORM_CHUNKS];
#pragma omp parallel for schedule(static)
    for (int chunk = 0; chunk < NORM_CHUNKS; chunk++) {
        size_t begin = (size_t)((unsigned __int128)n * (unsigned)chunk / NORM_CHUNKS);
        size_t end = (size_t)((unsigned __int128)n * (unsigned)(chunk + 1) / NORM_CHUNKS);
        partial[chunk] = sum_of_squares(x + begin, end - begin);
    }
    double total = 0.0;
    for (int chunk = 0; chunk < NORM_CHUNKS; chunk++)
        total += partial[chunk];
    return total;
}

/* As torch.nn.utils.clip_grad_norm_: coefficient max_norm / (norm + 1e-6),
 * or 1 (no clipping). */
static float clip_coefficient(double norm, float clip_norm)
{
    if (clip_norm > 0.0f && norm > clip_norm)
        return (float)((double)clip_norm / (norm + 1e-6));
    return 1.0f;
}

static void scale_floats(float *x, size_t n, float coef)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] *= coef;
}

float ac_clip_grad_norm(float *grads, size_t n, float clip_norm)
{
    double norm = sqrt(chunked_sum_of_squares(grads, n));
    float coef = clip_coefficient(norm, clip_norm);
    if (coef != 1.0f)
        scale_floats(grads, n, coef);
    return (float)norm;
}

/* Sum of squares of the listed rows of a row-sparse table: fixed chunks of
 * the list, each summed in list order, then the chunks in order. */
static double rows_sum_of_squares(const float *grads, const ac_sparse_rows *r)
{
    const size_t w = (size_t)r->width;
    const float *g = grads + r->offset;
    double partial[NORM_CHUNKS];
#pragma omp parallel for schedule(static)
    for (int chunk = 0; chunk < NORM_CHUNKS; chunk++) {
        int begin = (int)((long long)r->n_rows * chunk / NORM_CHUNKS);
        int end = (int)((long long)r->n_rows * (chunk + 1) / NORM_CHUNKS);
        double sum = 0.0;
        for (int i = begin; i < end; i++)
            sum += sum_of_squares(g + (size_t)r->rows[i] * w, w);
        partial[chunk] = sum;
    }
    double total = 0.0;
    for (int chunk = 0; chunk < NORM_CHUNKS; chunk++)
        total += partial[chunk];
    return total;
}

float ac_model_clip_grad_norm(ac_model *m, float clip_norm)
{
    double sum = chunked_sum_of_squares(m->grads, m->dense_params);
    for (int k = 0; k < AC_SPARSE_TABLES; k++)
        sum += rows_sum_of_squares(m->grads, &m->sparse[k]);
    double norm = sqrt(sum);
    float coef = clip_coefficient(norm, clip_norm);
    if (coef != 1.0f) {
        scale_floats(m->grads, m->dense_params, coef);
        for (int k = 0; k < AC_SPARSE_TABLES; k++) {
            const ac_sparse_rows *r = &m->sparse[k];
            const size_t w = (size_t)r->width;
#pragma omp parallel for schedule(static)
            for (int i = 0; i < r->n_rows; i++) {
                float *row = m->grads + r->offset + (size_t)r->rows[i] * w;
                for (size_t j = 0; j < w; j++)
                    row[j] *= coef;
            }
        }
    }
    return (float)norm;
}

/* torch.optim.AdamW (single-tensor path):
 *   p *= 1 - lr * wd                      (decay tensors only)
 *   m = b1 m + (1 - b1) g ; v = b2 v + (1 - b2) g^2
 *   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
static void adamw_range(float *p, const float *g, float *mt, float *vt, size_t n, float b1,
                        float b2, float eps, float step_size, float bias2_sqrt, float decay)
{
    size_t i = 0;
    for (; i + VF_LANES <= n; i += VF_LANES) {
        vf16 gi = vf_load(g + i);
        vf16 mi = b1 * vf_load(mt + i) + (1.0f - b1) * gi;
        vf16 vi = b2 * vf_load(vt + i) + (1.0f - b2) * gi * gi;
        vf_store(mt + i, mi);
        vf_store(vt + i, vi);
        vf16 root = vi;
        for (int k = 0; k < VF_LANES; k++)
            root[k] = sqrtf(vi[k]);
        vf16 denom = root / bias2_sqrt + eps;
        vf_store(p + i, vf_load(p + i) * decay - step_size * mi / denom);
    }
    for (; i < n; i++) {
        float gi = g[i];
        float mi = b1 * mt[i] + (1.0f - b1) * gi;
        float vi = b2 * vt[i] + (1.0f - b2) * gi * gi;
        mt[i] = mi;
        vt[i] = vi;
        float denom = sqrtf(vi) / bias2_sqrt + eps;
        p[i] = p[i] * decay - step_size * mi / denom;
    }
}

/* Elements of a tensor updated by one task: big tensors (the embedding) are
 * split so both cores share them. Each element's update is independent, so
 * the split does not change the bits. */
#define ADAMW_TASK 16384

static const ac_sparse_rows *sparse_rows_of(const ac_model *m, int tensor)
{
    for (int k = 0; k < AC_SPARSE_TABLES; k++)
        if (m->sparse[k].tensor == tensor)
            return &m->sparse[k];
    return NULL;
}

void ac_adamw_step(const ac_model *m, float *params, const float *grads, float *m1, float *m2,
                   const ac_optim_config *c, float lr, long t)
{
    if (t < 1)
        t = 1;
    const float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
    const double bias1 = 1.0 - pow((double)b1, (double)t);
    const double bias2 = 1.0 - pow((double)b2, (double)t);
    const float step_size = (float)((double)lr / bias1);
    const float bias2_sqrt = (float)sqrt(bias2);
    const float decay_factor = 1.0f - lr * c->weight_decay;
    /* One parallel region for the whole step (not one per tensor): a region
     * per small tensor would cost a thread-team start each. */
#pragma omp parallel
    for (int ti = 0; ti < m->n_tensors; ti++) {
        const ac_param_info *info = &m->table[ti];
        const float decay = info->weight_decay ? decay_factor : 1.0f;
        const size_t n = info->numel, off = info->offset;
        const ac_sparse_rows *r = info->sparse ? sparse_rows_of(m, ti) : NULL;
        if (r) {
            /* Lazy AdamW: only the rows this batch touched move (their
             * moments too); the others keep their values until touched. */
            const size_t w = (size_t)info->shape[1];
#pragma omp for schedule(static) nowait
            for (int i = 0; i < r->n_rows; i++) {
                size_t at = off + (size_t)r->rows[i] * w;
                adamw_range(params + at, grads + at, m1 + at, m2 + at, w, b1, b2, eps, step_size,
                            bias2_sqrt, decay);
            }
            continue;
        }
        const long n_tasks = (long)((n + ADAMW_TASK - 1) / ADAMW_TASK);
#pragma omp for schedule(static) nowait
        for (long task = 0; task < n_tasks; task++) {
            size_t begin = (size_t)task * ADAMW_TASK;
            size_t len = n - begin < ADAMW_TASK ? n - begin : ADAMW_TASK;
            size_t at = off + begin;
            adamw_range(params + at, grads + at, m1 + at, m2 + at, len, b1, b2, eps, step_size,
                        bias2_sqrt, decay);
        }
    }
}
