/* Portable SIMD for the hot loops: GCC/Clang vector extensions, 16 floats wide.
 * With AVX-512 one vf16 is one register; elsewhere the compiler splits it.
 * Every operation is element-wise IEEE arithmetic, so results do not depend
 * on how the compiler lowers it, and reductions have a fixed order. */
#ifndef ATTNCTL_SIMD_H
#define ATTNCTL_SIMD_H

#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define VF_LANES 16
typedef float vf16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));
typedef uint32_t vu16 __attribute__((vector_size(64))); /* bit work: wraps, never overflows */

static inline vf16 vf_load(const float *p)
{
    vf16 v;
    memcpy(&v, p, sizeof v); /* unaligned load */
    return v;
}

static inline void vf_store(float *p, vf16 v) { memcpy(p, &v, sizeof v); }

static inline vf16 vf_splat(float x)
{
    return (vf16){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
}

/* Lanes of a where mask is set, of b elsewhere. */
static inline vf16 vf_select(vi16 mask, vf16 a, vf16 b)
{
    return (vf16)((mask & (vi16)a) | (~mask & (vi16)b));
}

/* Lane-wise max/min; a NaN in a stays NaN (divergence must stay visible). */
static inline vf16 vf_max(vf16 a, vf16 b) { return vf_select(a < b, b, a); }

static inline vf16 vf_min(vf16 a, vf16 b) { return vf_select(a > b, b, a); }

/* Sum of the 16 lanes in a fixed order (a tree of halves). */
static inline float vf_sum(vf16 v)
{
    float s8[8], s4[4];
    for (int i = 0; i < 8; i++)
        s8[i] = v[i] + v[i + 8];
    for (int i = 0; i < 4; i++)
        s4[i] = s8[i] + s8[i + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

static inline float vf_hmax(vf16 v)
{
    float m = v[0];
    for (int i = 1; i < VF_LANES; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

/* The largest lane, for lanes known not to be NaN (the caller checks them):
 * one AVX-512 reduction where there is one. Ties of +0 and -0 may give
 * either zero. */
static inline float vf_hmax_nonan(vf16 v)
{
#if defined(__AVX512F__)
    return _mm512_reduce_max_ps((__m512)v);
#else
    return vf_hmax(v);
#endif
}

/* Whether any lane of a mask (lanes 0 or -1) is set. */
static inline int vi_any(vi16 m)
{
#if defined(__AVX512F__)
    return _mm512_test_epi32_mask((__m512i)m, (__m512i)m) != 0;
#else
    int any = 0;
    for (int i = 0; i < VF_LANES; i++)
        any |= m[i] != 0;
    return any;
#endif
}

/* exp(x) for x <= 0 (what a softmax needs), relative error about 2e-7;
 * x < -86 gives exactly 0. NaN lanes give unspecified values: callers check.
 * x = n ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2), e^r by the
 * Cephes minimax polynomial, 2^n put straight into the exponent bits. */
static inline vf16 vf_exp_nonpositive(vf16 x)
{
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    vi16 underflow = x < -86.0f;
    vf16 t = x * log2e + round_magic;
    vu16 n = (vu16)t - (vu16)vf_splat(round_magic); /* the integer, two's complement */
    vf16 nf = t - round_magic;
    vf16 r = x - nf * ln2_hi;
    r = r - nf * ln2_lo;
    vf16 p = 1.9875691500e-4f * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    /* For -86 <= x <= 0: n in [-124, 0] and p in [0.7, 1.42], so adding n to
     * the exponent field stays in the normal range. Other lanes are zeroed. */
    vu16 bits = (vu16)p + (n << 23);
    return (vf16)(~(vu16)underflow & bits);
}

/* 2^y for y <= 0, for the softmax of quantized models: relative error below
 * 3e-6 (a degree-4 polynomial for 2^f, |f| <= 1/2, fitted to the relative
 * error) and about half the work of vf_exp_nonpositive. y below -125 counts
 * as -125 (2^-125, still a normal float: the exponent bits are added without
 * a check), so a row's sum is never zero. NaN lanes give unspecified values:
 * callers check. */
static inline vf16 vf_exp2_nonpositive_approx(vf16 y)
{
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    y = vf_max(y, vf_splat(-125.0f));
    vf16 t = y + round_magic;
    vu16 n = (vu16)t - (vu16)vf_splat(round_magic);
    vf16 f = y - (t - round_magic);
    vf16 p = 0.009570102207362652f * f + 0.05591786280274391f;
    p = p * f + 0.240247443318367f;
    p = p * f + 0.6931217908859253f;
    p = p * f + 0.9999992847442627f;
    return (vf16)((vu16)p + (n << 23));
}

#endif
