/* Token embedding plus the fixed sinusoidal position table. */
#include "attnctl/nn.h"

#include <math.h>

void positions_table_fill(float *pos_table, int max_len, int d)
{
    for (int p = 0; p < max_len; p++) {
        float *row = pos_table + (size_t)p * d;
        for (int col = 0; col < d; col += 2) {
            /* col = 2i, so the exponent 2i/d is col/d; computed in double so the
             * table is the same whatever the float rounding mode of callers. */
            double angle = (double)p / pow(10000.0, (double)col / (double)d);
            row[col] = (float)sin(angle);
            if (col + 1 < d)
                row[col + 1] = (float)cos(angle);
        }
    }
}

void embedding_forward(float *out, const int32_t *ids, const float *wte, const float *pos_table,
                       int B, int T, int d)
{
    int rows = B * T;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *tok = wte + (size_t)ids[r] * d;
        const float *pos = pos_table + (size_t)(r % T) * d;
        float *o = out + (size_t)r * d;
        for (int i = 0; i < d; i++)
            o[i] = tok[i] + pos[i];
    }
}

void embedding_backward(float *dwte, const float *dout, const int32_t *ids, const int32_t *lengths,
                        int B, int T, int d)
{
    if (!dwte)
        return;
    /* Serial on purpose: several positions may share a token id, and a fixed
     * (b, t) order keeps the sums bitwise reproducible. */
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < lengths[b]; t++) {
            size_t r = (size_t)b * T + t;
            float *g = dwte + (size_t)ids[r] * d;
            const float *go = dout + r * d;
            for (int i = 0; i < d; i++)
                g[i] += go[i];
        }
    }
}
