#include "attnctl/rng.h"

#include <math.h>

float ac_rng_normal(uint64_t key, uint64_t index)
{
    /* Two independent uniforms from the same (key, index) via sub-streams. */
    double u1 = ((double)(ac_mix64(key ^ ac_mix64(2 * index)) >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
    double u2 = (double)(ac_mix64(key ^ ac_mix64(2 * index + 1)) >> 11) * 0x1.0p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

void ac_shuffle_i32(int32_t *idx, int64_t n, uint64_t key)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)ac_rng_below(key, (uint64_t)i, (uint64_t)i + 1);
        int32_t tmp = idx[i];
        idx[i] = idx[j];
        idx[j] = tmp;
    }
}
