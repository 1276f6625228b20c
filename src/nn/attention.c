/* Multi-head scaled dot-product self-attention core with a key padding mask.
 * One task per (batch item, head): each task reads and writes only its own
 * column block of q/k/v/out rows of item b and its own [T, T] block of probs,
 * so there are no races and no reduction across tasks (thread-count
 * independent results). */
#include "attnctl/nn.h"

#include <math.h>
#include <string.h>

void attention_forward(float *out, float *probs, const float *q, const float *k, const float *v,
                       const int32_t *lengths, int B, int T, int d, int H, float scale)
{
    int dk = d / H;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        int len = lengths[b];
        size_t item = (size_t)b * T * d;
        const float *qb = q + item + (size_t)h * dk;
        const float *kb = k + item + (size_t)h * dk;
        const float *vb = v + item + (size_t)h * dk;
        float *ob = out + item + (size_t)h * dk;
        float *pb = probs + (size_t)bh * T * T;
        for (int t = 0; t < T; t++) {
            float *p = pb + (size_t)t * T;
            float *o = ob + (size_t)t * d;
            if (t >= len) { /* pad query: row left zero */
                memset(p, 0, sizeof(float) * (size_t)T);
                memset(o, 0, sizeof(float) * (size_t)dk);
                continue;
            }
            const float *qt = qb + (size_t)t * d;
            float maxval = -INFINITY;
            for (int s = 0; s < len; s++) {
                const float *ks = kb + (size_t)s * d;
                float dot = 0.0f;
                for (int i = 0; i < dk; i++)
                    dot += qt[i] * ks[i];
                dot *= scale;
                p[s] = dot;
                if (dot > maxval)
                    maxval = dot;
            }
            /* Subtracting the row max keeps expf from overflowing. */
            float sum = 0.0f;
            for (int s = 0; s < len; s++) {
                p[s] = expf(p[s] - maxval);
                sum += p[s];
            }
            float inv = 1.0f / sum;
            for (int s = 0; s < len; s++)
                p[s] *= inv;
            for (int s = len; s < T; s++) /* masked keys: exactly 0 */
                p[s] = 0.0f;
            for (int i = 0; i < dk; i++)
                o[i] = 0.0f;
            for (int s = 0; s < len; s++) {
                const float *vs = vb + (size_t)s * d;
                float ps = p[s];
                for (int i = 0; i < dk; i++)
                    o[i] += ps * vs[i];
            }
        }
    }
}

void attention_backward(float *dq, float *dk, float *dv, float *dprobs_scratch, const float *dout,
                        const float *q, const float *k, const float *v, const float *probs,
                        const int32_t *lengths, int B, int T, int d, int H, float scale)
{
    int hd = d / H; /* head dimension (dk would clash with the gradient name) */
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        int len = lengths[b];
        size_t item = (size_t)b * T * d;
        size_t col = (size_t)h * hd;
        const float *pb = probs + (size_t)bh * T * T;
        float *dpb = dprobs_scratch + (size_t)bh * T * T;
        /* Only valid queries (t < len) and valid keys (s < len) take part:
         * pad rows get no gradient. */
        for (int t = 0; t < len; t++) {
            const float *p = pb + (size_t)t * T;
            float *dp = dpb + (size_t)t * T;
            const float *go = dout + item + (size_t)t * d + col;
            const float *qt = q + item + (size_t)t * d + col;
            /* dprobs[s] = dout_t . v_s ; dv_s += p[s] * dout_t */
            for (int s = 0; s < len; s++) {
                const float *vs = v + item + (size_t)s * d + col;
                float dot = 0.0f;
                for (int i = 0; i < hd; i++)
                    dot += go[i] * vs[i];
                dp[s] = dot;
                if (dv) {
                    float *dvs = dv + item + (size_t)s * d + col;
                    float ps = p[s];
                    for (int i = 0; i < hd; i++)
                        dvs[i] += ps * go[i];
                }
            }
            if (!dq && !dk)
                continue;
            /* softmax backward: dscore[s] = p[s] * (dp[s] - sum_j p[j] dp[j]) */
            float pdp = 0.0f;
            for (int s = 0; s < len; s++)
                pdp += p[s] * dp[s];
            for (int s = 0; s < len; s++) {
                float dscore = p[s] * (dp[s] - pdp) * scale;
                const float *ks = k + item + (size_t)s * d + col;
                if (dq) {
                    float *dqt = dq + item + (size_t)t * d + col;
                    for (int i = 0; i < hd; i++)
                        dqt[i] += dscore * ks[i];
                }
                if (dk) {
                    float *dks = dk + item + (size_t)s * d + col;
                    for (int i = 0; i < hd; i++)
                        dks[i] += dscore * qt[i];
                }
            }
        }
    }
}
