/* Pooling over the valid positions of each sequence: [B, T, d] -> [B, d]. */
#include "attnctl/nn.h"

void pool_forward(float *out, int32_t *argmax, const float *in, const int32_t *lengths,
                  int B, int T, int d, ac_pooling mode)
{
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
        const float *x = in + (size_t)b * T * d;
        float *o = out + (size_t)b * d;
        int len = lengths[b];
        switch (mode) {
        case AC_POOL_MAX: {
            int32_t *am = argmax + (size_t)b * d;
            for (int i = 0; i < d; i++) {
                o[i] = x[i];
                am[i] = 0;
            }
            /* Strict '>' keeps the first position on ties. */
            for (int t = 1; t < len; t++) {
                const float *xt = x + (size_t)t * d;
                for (int i = 0; i < d; i++) {
                    if (xt[i] > o[i]) {
                        o[i] = xt[i];
                        am[i] = t;
                    }
                }
            }
            break;
        }
        case AC_POOL_MEAN:
            for (int i = 0; i < d; i++)
                o[i] = 0.0f;
            for (int t = 0; t < len; t++) {
                const float *xt = x + (size_t)t * d;
                for (int i = 0; i < d; i++)
                    o[i] += xt[i];
            }
            for (int i = 0; i < d; i++)
                o[i] /= (float)len;
            break;
        case AC_POOL_CLS:
        default:
            for (int i = 0; i < d; i++)
                o[i] = x[i];
            break;
        }
    }
}

void pool_backward(float *din, const float *dout, const int32_t *argmax, const int32_t *lengths,
                   int B, int T, int d, ac_pooling mode)
{
    if (!din)
        return;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
        float *dx = din + (size_t)b * T * d;
        const float *g = dout + (size_t)b * d;
        int len = lengths[b];
        switch (mode) {
        case AC_POOL_MAX: {
            const int32_t *am = argmax + (size_t)b * d;
            for (int i = 0; i < d; i++)
                dx[(size_t)am[i] * d + i] += g[i];
            break;
        }
        case AC_POOL_MEAN:
            for (int t = 0; t < len; t++) {
                float *dxt = dx + (size_t)t * d;
                for (int i = 0; i < d; i++)
                    dxt[i] += g[i] / (float)len;
            }
            break;
        case AC_POOL_CLS:
        default:
            for (int i = 0; i < d; i++)
                dx[i] += g[i];
            break;
        }
    }
}
