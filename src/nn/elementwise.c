/* Element-wise layers: residual add, ReLU, inverted dropout. */
#include "attnctl/nn.h"
#include "attnctl/rng.h"

void residual_forward(float *out, const float *a, const float *b, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void residual_backward(float *da, float *db, const float *dout, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        if (da)
            da[i] += dout[i];
        if (db)
            db[i] += dout[i];
    }
}

void relu_forward(float *out, const float *in, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void relu_backward(float *din, const float *dout, const float *out, size_t n)
{
    if (!din)
        return;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        din[i] += out[i] > 0.0f ? dout[i] : 0.0f;
}

void dropout_forward(float *out, float *mask, const float *in, float p, size_t n, uint64_t key)
{
    if (p <= 0.0f) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            mask[i] = 1.0f;
            out[i] = in[i];
        }
        return;
    }
    /* p >= 1 keeps nothing (u < 1 always); avoid computing 1/0. */
    float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        /* Counter-based draw: element i gets the same mask for any thread count. */
        mask[i] = ac_rng_uniform(key, (uint64_t)i) >= p ? keep_scale : 0.0f;
        out[i] = in[i] * mask[i];
    }
}

void dropout_backward(float *din, const float *dout, const float *mask, size_t n)
{
    if (!din)
        return;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        din[i] += dout[i] * mask[i];
}
