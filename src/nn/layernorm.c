/* LayerNorm over the last dimension (after llm.c). */
#include "attnctl/nn.h"

#include <math.h>

#include "simd.h"

/* Columns of dw/db reduced by one task (a 64-byte cache line of floats). */
#define LAYERNORM_PARAM_CHUNK 16

void layernorm_forward(float *out, float *mean, float *rstd, const float *in, const float *w,
                       const float *b, int N, int d, float eps)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = in + (size_t)n * d;
        float *o = out + (size_t)n * d;
        float m = 0.0f;
        for (int i = 0; i < d; i++)
            m += x[i];
        m /= (float)d;
        /* Two-pass variance: no cancellation when |mean| >> std. */
        float v = 0.0f;
        for (int i = 0; i < d; i++) {
            float xc = x[i] - m;
            v += xc * xc;
        }
        v /= (float)d;
        float s = 1.0f / sqrtf(v + eps);
        for (int i = 0; i < d; i++)
            o[i] = (x[i] - m) * s * w[i] + b[i];
        mean[n] = m;
        rstd[n] = s;
    }
}

/* The same normalisation with the sums taken 16 lanes at a time and then
 * in a fixed tree (vf_sum): about 8x fewer dependent additions than the
 * sequential sums above, so a different rounding. Quantized models' inference
 * uses it; training and FP32 models keep layernorm_forward, so their outputs
 * keep their bits. Rows whose d is not a multiple of 16 take the sequential
 * sums. No thread count changes a row's result. */
void layernorm_forward_lanes(float *out, float *mean, float *rstd, const float *in, const float *w,
                             const float *b, int N, int d, float eps)
{
    if (d % VF_LANES != 0) {
        layernorm_forward(out, mean, rstd, in, w, b, N, d, eps);
        return;
    }
#pragma omp parallel for schedule(static) if (N >= 256)
    for (int n = 0; n < N; n++) {
        const float *x = in + (size_t)n * d;
        float *o = out + (size_t)n * d;
        vf16 acc = vf_splat(0.0f);
        for (int i = 0; i < d; i += VF_LANES)
            acc += vf_load(x + i);
        const float m = vf_sum(acc) / (float)d;
        const vf16 vm = vf_splat(m);
        acc = vf_splat(0.0f);
        for (int i = 0; i < d; i += VF_LANES) {
            vf16 xc = vf_load(x + i) - vm;
            acc += xc * xc;
        }
        const float s = 1.0f / sqrtf(vf_sum(acc) / (float)d + eps);
        const vf16 vs = vf_splat(s);
        for (int i = 0; i < d; i += VF_LANES)
            vf_store(o + i, (vf_load(x + i) - vm) * vs * vf_load(w + i) + vf_load(b + i));
        mean[n] = m;
        rstd[n] = s;
    }
}

void layernorm_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                        const float *w, const float *mean, const float *rstd, int N, int d)
{
    if (din) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = in + (size_t)n * d;
            const float *g = dout + (size_t)n * d;
            float *dx = din + (size_t)n * d;
            float m = mean[n], s = rstd[n];
            /* dx = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = w * g */
            float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
            for (int i = 0; i < d; i++) {
                float norm = (x[i] - m) * s;
                float dnorm = w[i] * g[i];
                dnorm_mean += dnorm;
                dnorm_norm_mean += dnorm * norm;
            }
            dnorm_mean /= (float)d;
            dnorm_norm_mean /= (float)d;
            for (int i = 0; i < d; i++) {
                float norm = (x[i] - m) * s;
                float dnorm = w[i] * g[i];
                dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
            }
        }
    }
    if (dw || db) {
        /* dw and db reduce over rows: each task owns a block of columns and sums
         * rows in ascending order, so the result is independent of thread count.
         * The sums live in locals until the end: tasks never write a shared
         * cache line row after row. */
        int n_chunks = (d + LAYERNORM_PARAM_CHUNK - 1) / LAYERNORM_PARAM_CHUNK;
#pragma omp parallel for schedule(static) if (n_chunks > 1)
        for (int c = 0; c < n_chunks; c++) {
            int i0 = c * LAYERNORM_PARAM_CHUNK;
            int width = d - i0 < LAYERNORM_PARAM_CHUNK ? d - i0 : LAYERNORM_PARAM_CHUNK;
            float sum_w[LAYERNORM_PARAM_CHUNK] = {0}, sum_b[LAYERNORM_PARAM_CHUNK] = {0};
            for (int n = 0; n < N; n++) {
                const float *x = in + (size_t)n * d + i0;
                const float *g = dout + (size_t)n * d + i0;
                float m = mean[n], s = rstd[n];
                for (int i = 0; i < width; i++) {
                    sum_w[i] += (x[i] - m) * s * g[i];
                    sum_b[i] += g[i];
                }
            }
            for (int i = 0; i < width; i++) {
                if (dw)
                    dw[i0 + i] += sum_w[i];
                if (db)
                    db[i0 + i] += sum_b[i];
            }
        }
    }
}
