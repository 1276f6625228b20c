/* Softmax cross-entropy over C classes, mean over the batch. */
#include "attnctl/nn.h"

#include <math.h>

/* Stable softmax of one row; returns log(sum(exp(x - max))) and the row max
 * (logsumexp = max + that; kept apart for an accurate loss). The sum is 1
 * (the largest logit's term) plus the rest, and its log is log1p(rest): a
 * confident row's loss (rest below float's epsilon) stays a small positive
 * number instead of rounding to 0, so validation losses still rank models. */
static float softmax_row(float *p, const float *x, int C, float *row_max)
{
    int top = 0;
    for (int c = 1; c < C; c++)
        if (x[c] > x[top])
            top = c;
    const float maxval = x[top];
    float rest = 0.0f;
    for (int c = 0; c < C; c++) {
        p[c] = c == top ? 1.0f : expf(x[c] - maxval);
        if (c != top)
            rest += p[c];
    }
    float inv = 1.0f / (1.0f + rest);
    for (int c = 0; c < C; c++)
        p[c] *= inv;
    if (row_max)
        *row_max = maxval;
    return log1pf(rest);
}

float crossentropy_forward(float *losses, float *probs, const float *logits, const int32_t *labels,
                           int B, int C, float smoothing)
{
    double total = 0.0; /* serial, fixed order: reproducible */
    for (int b = 0; b < B; b++) {
        const float *x = logits + (size_t)b * C;
        float maxval;
        float log_sum = softmax_row(probs + (size_t)b * C, x, C, &maxval);
        /* -log softmax[label] = (max - x[label]) + log(sum(exp(x - max))):
         * finite even when the probability underflows to 0, and two
         * non-negative terms, so no cancellation. (logsumexp - x[label]
         * rounds logsumexp at the scale of the logits first: 2e-5 off at
         * logits near 1000.) */
        float nll = (maxval - x[labels[b]]) + log_sum;
        if (smoothing > 0.0f) {
            /* target (1 - s) onehot + s / C: add s times the mean of -log p_c */
            double mean_nll = 0.0;
            for (int c = 0; c < C; c++)
                mean_nll += (double)(maxval - x[c]) + (double)log_sum;
            nll = (1.0f - smoothing) * nll + smoothing * (float)(mean_nll / C);
        }
        losses[b] = nll;
        total += losses[b];
    }
    return B > 0 ? (float)(total / B) : 0.0f;
}

void crossentropy_backward(float *dlogits, const float *probs, const int32_t *labels, int B, int C,
                           float smoothing)
{
    crossentropy_backward_of_mean(dlogits, probs, labels, B, C, smoothing, B);
}

void crossentropy_backward_of_mean(float *dlogits, const float *probs, const int32_t *labels,
                                   int B, int C, float smoothing, int mean_rows)
{
    if (!dlogits)
        return;
    float inv_batch = 1.0f / (float)mean_rows;
    float off = smoothing / (float)C, on = 1.0f - smoothing + off;
    for (int b = 0; b < B; b++) {
        const float *p = probs + (size_t)b * C;
        float *g = dlogits + (size_t)b * C;
        for (int c = 0; c < C; c++) {
            float target = c == labels[b] ? on : off;
            g[c] += (p[c] - target) * inv_batch;
        }
    }
}

void softmax_rows(float *probs, const float *logits, int B, int C)
{
    for (int b = 0; b < B; b++)
        softmax_row(probs + (size_t)b * C, logits + (size_t)b * C, C, NULL);
}
