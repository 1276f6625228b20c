/* Counter-based random numbers: every draw is a pure function of
 * (key, index), so results never depend on the thread count or on the order
 * in which threads run, and resuming only needs the step counter. */
#ifndef ATTNCTL_RNG_H
#define ATTNCTL_RNG_H

#include <stdint.h>

/* splitmix64 finaliser: a good 64-bit mixer. */
static inline uint64_t ac_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Derive a key for a named stream from a parent key (e.g. seed -> step -> site). */
static inline uint64_t ac_rng_key(uint64_t parent, uint64_t stream)
{
    return ac_mix64(parent ^ ac_mix64(stream + 0x632be59bd9b4e019ULL));
}

/* Uniform float in [0, 1) from (key, index): 24 random bits. */
static inline float ac_rng_uniform(uint64_t key, uint64_t index)
{
    return (float)(ac_mix64(key ^ ac_mix64(index)) >> 40) * (1.0f / 16777216.0f);
}

/* Standard normal from (key, index) by Box-Muller on two independent draws. */
float ac_rng_normal(uint64_t key, uint64_t index);

/* Uniform integer in [0, n) from (key, index) (n > 0; negligible bias for n < 2^32). */
static inline uint64_t ac_rng_below(uint64_t key, uint64_t index, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)ac_mix64(key ^ ac_mix64(index)) * n) >> 64);
}

/* Fisher-Yates shuffle of idx[0..n) driven by key. */
void ac_shuffle_i32(int32_t *idx, int64_t n, uint64_t key);

#endif
