/* Multi-head scaled dot-product self-attention core with a key padding mask.
 *
 * One task per (batch item, head): each task reads and writes only its own
 * column block of the q/k/v/out rows of item b and its own [T, T] block of
 * probs, so there are no races and no reduction across tasks (results do not
 * depend on the thread count). Workspace is one slot per thread, small
 * enough to stay in the core's cache from one task to the next.
 *
 * The products have one small dimension (the head size, 16 or 32 in the
 * usual configurations), where a general BLAS spends most of its time
 * packing. So each task packs its head once into zero-padded row-major
 * blocks and runs one register-blocked kernel, small_gemm, for all six
 * products; softmax, scaling and masking are one vectorised pass per row. */
#include "attnctl/nn.h"
#include "attnctl/quant.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "simd.h"

static int round_up(int n, int m) { return (n + m - 1) / m * m; }

/* One thread's workspace, in floats: five packed [Tp, hdp] or [hdp, Tp]
 * blocks and one [T, T] block (probabilities not kept, or their gradient),
 * then for the AMX kernel of attention_forward_int8 one float row and 16
 * rows of bf16 weights (T rounded up to 32). */
static size_t slot_floats(int T, int d, int H)
{
    size_t Tp = (size_t)round_up(T, VF_LANES), hdp = (size_t)round_up(d / H, VF_LANES);
    return 5 * Tp * hdp + (size_t)T * (size_t)T + Tp + 8 * (size_t)round_up(T, 32);
}

size_t attention_scratch_floats(int T, int d, int H, int slots)
{
    return (size_t)(slots > 0 ? slots : 1) * slot_floats(T, d, H);
}

/* Threads to run: no more than there are workspace slots. */
static int team_size(int slots)
{
    int n = omp_get_max_threads();
    return n < slots ? n : slots > 0 ? slots : 1;
}

/* ---------------------------------------------------------------- kernel */

#define MAX_ROWS 12
#define MAX_VECS 4

/* One block of C: R rows x NV vectors of 16 columns, accumulated in
 * registers over all of K (the compiler unrolls it for constant R and NV).
 * Only the first ncols columns are stored. */
static inline __attribute__((always_inline)) void
gemm_block(int R, int NV, int K, const float *A, size_t a_rs, size_t a_ks, const float *Bm,
           size_t ldb, float *C, size_t ldc, int ncols, int accumulate)
{
    vf16 acc[MAX_ROWS][MAX_VECS];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NV; v++)
            acc[r][v] = vf_splat(0.0f);
    for (int k = 0; k < K; k++) {
        const float *brow = Bm + (size_t)k * ldb;
        const float *acol = A + (size_t)k * a_ks;
        vf16 bv[MAX_VECS];
        for (int v = 0; v < NV; v++)
            bv[v] = vf_load(brow + v * VF_LANES);
        for (int r = 0; r < R; r++) {
            vf16 a = vf_splat(acol[(size_t)r * a_rs]);
            for (int v = 0; v < NV; v++)
                acc[r][v] += a * bv[v];
        }
    }
    for (int r = 0; r < R; r++) {
        float *c = C + (size_t)r * ldc;
        for (int v = 0; v < NV; v++) {
            int n = ncols - v * VF_LANES;
            if (n <= 0)
                break;
            vf16 x = acc[r][v];
            if (n >= VF_LANES) {
                if (accumulate)
                    x += vf_load(c + v * VF_LANES);
                vf_store(c + v * VF_LANES, x);
            } else { /* the last, partial vector of the row */
                float part[VF_LANES] = {0};
                size_t bytes = sizeof(float) * (size_t)n;
                if (accumulate) {
                    memcpy(part, c + v * VF_LANES, bytes);
                    x += vf_load(part);
                }
                vf_store(part, x);
                memcpy(c + v * VF_LANES, part, bytes);
            }
        }
    }
}

/* C[M, N] (+)= A[M, K] B[K, N]. A is read as A[r * a_rs + k * a_ks], so it
 * may be transposed; B is row-major with stride ldb and must be readable
 * (zero padded) up to N rounded up to 16 columns; C has stride ldc and only
 * its first N columns are written. Every element is one sum over k in
 * ascending order. */
static void small_gemm(int M, int N, int K, const float *A, size_t a_rs, size_t a_ks,
                       const float *Bm, size_t ldb, float *C, size_t ldc, int accumulate)
{
    for (int j = 0; j < N; j += MAX_VECS * VF_LANES) {
        int ncols = N - j < MAX_VECS * VF_LANES ? N - j : MAX_VECS * VF_LANES;
        int nv = (ncols + VF_LANES - 1) / VF_LANES;
        const float *Bj = Bm + j;
        float *Cj = C + j;
        /* Rows per block: enough independent accumulators to hide the FMA
         * latency, few enough to stay in the 32 vector registers. */
        int R = nv == 1 ? 12 : nv == 2 ? 8 : 6;
        int i = 0;
        for (; i + R <= M; i += R) {
            const float *Ai = A + (size_t)i * a_rs;
            float *Ci = Cj + (size_t)i * ldc;
            switch (nv) {
            case 1: gemm_block(12, 1, K, Ai, a_rs, a_ks, Bj, ldb, Ci, ldc, ncols, accumulate); break;
            case 2: gemm_block(8, 2, K, Ai, a_rs, a_ks, Bj, ldb, Ci, ldc, ncols, accumulate); break;
            case 3: gemm_block(6, 3, K, Ai, a_rs, a_ks, Bj, ldb, Ci, ldc, ncols, accumulate); break;
            default: gemm_block(6, 4, K, Ai, a_rs, a_ks, Bj, ldb, Ci, ldc, ncols, accumulate); break;
            }
        }
        for (; i < M; i++) {
            const float *Ai = A + (size_t)i * a_rs;
            float *Ci = Cj + (size_t)i * ldc;
            switch (nv) {
            case 1: gemm_block(1, 1, K, Ai, a_rs, a_ks, Bj, ldb, Ci, ldc, ncols, accumulate); break;
            case 2: gemm_block(1, 2, K, Ai, a_rs, a_ks, Bj, ldb, Ci, ldc, ncols, accumulate); break;
            case 3: gemm_block(1, 3, K, Ai, a_rs, a_ks, Bj, ldb, Ci, ldc, ncols, accumulate); break;
            default: gemm_block(1, 4, K, Ai, a_rs, a_ks, Bj, ldb, Ci, ldc, ncols, accumulate); break;
            }
        }
    }
}

/* ---------------------------------------------------------------- packing */

/* dst[t, 0..hdp) = src[t * ld + 0..hd), zero padded, for t < len. */
static void pack_rows(float *dst, const float *src, size_t ld, int len, int hd, int hdp)
{
    for (int t = 0; t < len; t++) {
        float *o = dst + (size_t)t * hdp;
        memcpy(o, src + (size_t)t * ld, sizeof(float) * (size_t)hd);
        memset(o + hd, 0, sizeof(float) * (size_t)(hdp - hd));
    }
}

/* dst[i, 0..Tp) = src[t * ld + i] (transposed), zero padded from len on. */
static void pack_transposed(float *dst, const float *src, size_t ld, int len, int hd, int Tp)
{
    for (int i = 0; i < hd; i++) {
        float *o = dst + (size_t)i * Tp;
        for (int t = 0; t < len; t++)
            o[t] = src[(size_t)t * ld + i];
        memset(o + len, 0, sizeof(float) * (size_t)(Tp - len));
    }
}

/* ---------------------------------------------------------------- softmax */

/* p[0..n) holds raw scores; on return softmax(scale * scores), scale > 0.
 * Fixed reduction order (16 lanes, then a fixed tree), so it is
 * reproducible. A NaN or infinite score makes the whole row NaN, so a
 * diverging model shows in the loss instead of being hidden. */
static void softmax_row(float *p, int n, float scale)
{
    int nv = n - n % VF_LANES;
    vf16 vmax = vf_splat(-INFINITY);
    vi16 nan = {0};
    for (int i = 0; i < nv; i += VF_LANES) {
        vf16 x = vf_load(p + i);
        nan |= x != x;
        vmax = vf_max(vmax, x);
    }
    float m = vf_hmax(vmax);
    int bad = 0;
    for (int i = 0; i < VF_LANES; i++)
        bad |= nan[i];
    for (int i = nv; i < n; i++) {
        bad |= p[i] != p[i];
        m = p[i] > m ? p[i] : m;
    }
    if (bad || !isfinite(m)) {
        for (int i = 0; i < n; i++)
            p[i] = NAN;
        return;
    }
    /* Subtracting the row max keeps every exponent <= 0. */
    vf16 shift = vf_splat(m * scale), vscale = vf_splat(scale);
    vf16 vsum = vf_splat(0.0f);
    for (int i = 0; i < nv; i += VF_LANES) {
        vf16 e = vf_exp_nonpositive(vf_load(p + i) * vscale - shift);
        vf_store(p + i, e);
        vsum += e;
    }
    if (nv < n) {
        float tail[VF_LANES];
        int rest = n - nv;
        for (int i = 0; i < VF_LANES; i++)
            tail[i] = i < rest ? p[nv + i] : m;
        vf16 e = vf_exp_nonpositive(vf_load(tail) * vscale - shift);
        for (int i = rest; i < VF_LANES; i++)
            e[i] = 0.0f;
        vsum += e;
        vf_store(tail, e);
        memcpy(p + nv, tail, sizeof(float) * (size_t)rest);
    }
    vf16 inv = vf_splat(1.0f / vf_sum(vsum));
    for (int i = 0; i < nv; i += VF_LANES)
        vf_store(p + i, vf_load(p + i) * inv);
    for (int i = nv; i < n; i++)
        p[i] *= inv[0];
}

/* Zeroes what the valid [len, len] block leaves out: masked keys of valid
 * rows and whole pad rows. */
static void zero_outside(float *pb, int len, int T)
{
    if (len == T)
        return;
    for (int t = 0; t < len; t++)
        memset(pb + (size_t)t * T + len, 0, sizeof(float) * (size_t)(T - len));
    memset(pb + (size_t)len * T, 0, sizeof(float) * (size_t)(T - len) * (size_t)T);
}

/* ---------------------------------------------------------------- layers */

void attention_forward(float *out, float *probs, float *scratch, int slots, const float *q,
                       const float *k, const float *v, int ld, const int32_t *lengths, int B,
                       int T, int d, int H, float scale)
{
    int hd = d / H, hdp = round_up(hd, VF_LANES), Tp = round_up(T, VF_LANES);
    size_t per_slot = slot_floats(T, d, H);
#pragma omp parallel for schedule(static) num_threads(team_size(slots))
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        int len = lengths[b];
        size_t item = (size_t)b * T, col = (size_t)h * hd;
        float *ob = out + item * d + col;
        float *kt = scratch + (size_t)omp_get_thread_num() * per_slot; /* [hdp, Tp] k^T */
        float *vp = kt + (size_t)hdp * Tp;                               /* [Tp, hdp] */
        float *pb = probs ? probs + (size_t)bh * T * T : vp + (size_t)Tp * hdp;
        pack_transposed(kt, k + item * ld + col, (size_t)ld, len, hd, Tp);
        pack_rows(vp, v + item * ld + col, (size_t)ld, len, hd, hdp);
        /* scores[t, s] = q_t . k_s */
        small_gemm(len, len, hd, q + item * ld + col, (size_t)ld, 1, kt, (size_t)Tp, pb,
                   (size_t)T, 0);
        for (int t = 0; t < len; t++)
            softmax_row(pb + (size_t)t * T, len, scale);
        if (probs)
            zero_outside(pb, len, T);
        /* out_t = sum_s p[t, s] v_s; pad query rows are zero */
        small_gemm(len, hd, len, pb, (size_t)T, 1, vp, (size_t)hdp, ob, (size_t)d, 0);
        for (int t = len; t < T; t++)
            memset(ob + (size_t)t * d, 0, sizeof(float) * (size_t)hd);
    }
}

/* ------------------------------------------------ int8 scores (quantized models) */

typedef uint8_t vb16 __attribute__((vector_size(16))); /* 16 bytes, for conversions */

/* Rows of x (stride ld, hd values) as int8 with a scale a row (symmetric,
 * max |row| / 127; 0 for a zero row, NaN for a row that is not finite), hd
 * padded to hd4 with zeros; `shift` (128 for the unsigned side of vpdpbusd,
 * else 0) is added to every byte. */
static void quantize_head_rows(uint8_t *dst, float *scales, const float *x, size_t ld, int len,
                               int hd, int hd4, int shift)
{
    const float magic = 12582912.0f; /* 1.5 x 2^23: adding it rounds to nearest even */
    if (hd == VF_LANES) {
        /* a head of 16: one vector a row, the same operations as below */
        for (int t = 0; t < len; t++) {
            vf16 xv = vf_load(x + (size_t)t * ld), a = vf_select(xv < 0.0f, -xv, xv);
            const int finite = !vi_any(~(a <= 3.4e38f));
            const float max = vf_hmax_nonan(a);
            if (!finite) { /* NaN scale; no NaN or infinity reaches the conversion */
                scales[t] = NAN;
                memset(dst + (size_t)t * hd4, shift, (size_t)hd4);
                continue;
            }
            scales[t] = max / 127.0f;
            const float inv = ac_quant_inverse(max);
            vf16 v = (xv * inv + magic) - magic;
            v = vf_min(vf_max(v, vf_splat(-127.0f)), vf_splat(127.0f));
            /* to bytes modulo 256: -127..127 as int8, or 1..255 with the shift */
            vb16 qb = __builtin_convertvector(__builtin_convertvector(v, vi16) + shift, vb16);
            memcpy(dst + (size_t)t * hd4, &qb, sizeof qb);
        }
        return;
    }
    for (int t = 0; t < len; t++) {
        const float *row = x + (size_t)t * ld;
        float max = 0.0f;
        int finite = 1;
        for (int i = 0; i < hd; i++) {
            const float a = fabsf(row[i]);
            max = a > max ? a : max;
            finite &= a <= 3.4e38f;
        }
        uint8_t *o = dst + (size_t)t * hd4;
        if (!finite) { /* NaN scale; no NaN or infinity reaches the conversion */
            scales[t] = NAN;
            memset(o, shift, (size_t)hd4);
            continue;
        }
        scales[t] = max / 127.0f;
        const float inv = ac_quant_inverse(max);
        for (int i = 0; i < hd4; i++) {
            float v = i < hd ? (row[i] * inv + magic) - magic : 0.0f;
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
            o[i] = (uint8_t)((int)v + shift);
        }
    }
}

/* acc[s] = sum_i qu[i] * kq[s][i] - kbias[s] for s < len rounded to 16: qu
 * one query row (unsigned, hd4 bytes), kq the keys as [len rounded to 16 /
 * 16][hd4 / 4][16][4] signed bytes (16 keys x 4 values a 64-byte block),
 * kbias the query's shift of 128 times each key's sum (taken back here). */
static void scores_c(int32_t *acc, const uint8_t *qu, const int8_t *kq, const int32_t *kbias,
                     int len, int hd4)
{
    const int j4 = hd4 / 4;
    for (int s = 0; s < round_up(len, 16); s++) { /* pad keys (zero) too, as scores_vnni */
        const int8_t *blk = kq + (size_t)(s / 16) * j4 * 64 + (s % 16) * 4;
        int32_t sum = -kbias[s];
        for (int j = 0; j < j4; j++)
            for (int e = 0; e < 4; e++)
                sum += (int32_t)qu[4 * j + e] * (int32_t)blk[(size_t)j * 64 + e];
        acc[s] = sum;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* Four blocks of 16 keys at a time: four independent accumulators hide the
 * latency of the dot-product instruction, and each query broadcast serves
 * all four. Integer sums: the same values in any order. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
scores_vnni(int32_t *acc, const uint8_t *qu, const int8_t *kq, const int32_t *kbias, int len,
            int hd4)
{
    const int j4 = hd4 / 4, blocks = round_up(len, 16) / 16;
    const size_t block_bytes = (size_t)j4 * 64;
    const __m512i zero = _mm512_setzero_si512();
    int b = 0;
    for (; b + 4 <= blocks; b += 4) {
        const int8_t *blk = kq + (size_t)b * block_bytes;
        __m512i a0 = _mm512_sub_epi32(zero, _mm512_loadu_si512((const void *)(kbias + 16 * b))),
                a1 = _mm512_sub_epi32(zero, _mm512_loadu_si512((const void *)(kbias + 16 * b + 16))),
                a2 = _mm512_sub_epi32(zero, _mm512_loadu_si512((const void *)(kbias + 16 * b + 32))),
                a3 = _mm512_sub_epi32(zero, _mm512_loadu_si512((const void *)(kbias + 16 * b + 48)));
        for (int j = 0; j < j4; j++) {
            int32_t four;
            memcpy(&four, qu + 4 * j, 4);
            const __m512i qv = _mm512_set1_epi32(four);
            const int8_t *kj = blk + (size_t)j * 64;
            a0 = _mm512_dpbusd_epi32(a0, qv, _mm512_loadu_si512((const void *)kj));
            a1 = _mm512_dpbusd_epi32(a1, qv, _mm512_loadu_si512((const void *)(kj + block_bytes)));
            a2 = _mm512_dpbusd_epi32(a2, qv,
                                     _mm512_loadu_si512((const void *)(kj + 2 * block_bytes)));
            a3 = _mm512_dpbusd_epi32(a3, qv,
                                     _mm512_loadu_si512((const void *)(kj + 3 * block_bytes)));
        }
        _mm512_storeu_si512((void *)(acc + 16 * b), a0);
        _mm512_storeu_si512((void *)(acc + 16 * (b + 1)), a1);
        _mm512_storeu_si512((void *)(acc + 16 * (b + 2)), a2);
        _mm512_storeu_si512((void *)(acc + 16 * (b + 3)), a3);
    }
    for (; b < blocks; b++) {
        const int8_t *blk = kq + (size_t)b * block_bytes;
        __m512i a = _mm512_sub_epi32(zero, _mm512_loadu_si512((const void *)(kbias + 16 * b)));
        for (int j = 0; j < j4; j++) {
            int32_t four;
            memcpy(&four, qu + 4 * j, 4);
            a = _mm512_dpbusd_epi32(a, _mm512_set1_epi32(four),
                                    _mm512_loadu_si512((const void *)(blk + (size_t)j * 64)));
        }
        _mm512_storeu_si512((void *)(acc + 16 * b), a); /* acc has room up to len rounded to 16 */
    }
}
#else
static void scores_vnni(int32_t *acc, const uint8_t *qu, const int8_t *kq, const int32_t *kbias,
                        int len, int hd4)
{
    scores_c(acc, qu, kq, kbias, len, hd4);
}
#endif

/* Lane-wise max for rows already checked for NaN separately (one
 * instruction where AVX-512 is there; vf_max's NaN rule is not needed). */
static inline vf16 row_max(vf16 a, vf16 b)
{
#if defined(__AVX512F__)
    return (vf16)_mm512_max_ps((__m512)a, (__m512)b);
#else
    return vf_max(a, b);
#endif
}

/* One row of attention weights from its integer scores, in base 2: y[s] =
 * acc[s] sq ks[s] (ks = the key's scale x the softmax scale x log2 e),
 * row[s] = 2^(y[s] - max y); returns 1 / the row's sum (the caller
 * normalises). Two passes, 16 lanes at a time, fixed order. `checked`: the
 * caller found sq and every sq ks[s] finite, so no y is NaN or infinite
 * and the first pass need not look; else a row that is not finite becomes
 * NaN. The same values either way. */
static inline __attribute__((always_inline)) float
exp_scores_body(float *row, const int32_t *acc, const float *ks, float sq, int len, int checked)
{
    vf16 vmax = vf_splat(-INFINITY);
    vi16 nan = {0};
    const vf16 vsq = vf_splat(sq);
    int s = 0;
    for (; s + VF_LANES <= len; s += VF_LANES) {
        vi16 a;
        memcpy(&a, acc + s, sizeof a);
        vf16 x = __builtin_convertvector(a, vf16) * (vsq * vf_load(ks + s));
        if (!checked)
            nan |= x != x;
        vmax = row_max(vmax, x);
        vf_store(row + s, x);
    }
    /* the last len % 16 keys as one vector: the arrays have room up to len
     * rounded to 16; lanes past len are set aside (-inf, then 0) */
    const int rest = len - s;
    vi16 lane_in = {0};
    vf16 tail = vf_splat(0.0f);
    if (rest > 0) {
        vi16 a;
        memcpy(&a, acc + s, sizeof a);
        for (int i = 0; i < VF_LANES; i++)
            lane_in[i] = i < rest ? -1 : 0;
        tail = vf_select(lane_in, __builtin_convertvector(a, vf16) * (vsq * vf_load(ks + s)),
                         vf_splat(-INFINITY));
        if (!checked)
            nan |= tail != tail;
        vmax = row_max(vmax, tail);
    }
    const float m = vf_hmax_nonan(vmax);
    if (!checked && (vi_any(nan) || !isfinite(m))) {
        for (int i = 0; i < len; i++)
            row[i] = NAN;
        return NAN;
    }
    const vf16 shift = vf_splat(m);
    vf16 vsum = vf_splat(0.0f);
    for (s = 0; s + VF_LANES <= len; s += VF_LANES) {
        vf16 e = vf_exp2_nonpositive_approx(vf_load(row + s) - shift);
        vf_store(row + s, e);
        vsum += e;
    }
    if (rest > 0) {
        vf16 e = vf_select(lane_in, vf_exp2_nonpositive_approx(tail - shift), vf_splat(0.0f));
        vsum += e;
        memcpy(row + s, &e, sizeof(float) * (size_t)rest);
    }
    return 1.0f / vf_sum(vsum);
}

static float exp_scores(float *row, const int32_t *acc, const float *ks, float ks_max, float sq,
                        int len)
{
    /* |acc| < 2^31: with sq ks_max finite and below 2^96 every y is finite */
    if (isfinite(ks_max) && isfinite(sq) && sq * ks_max < 0x1p96f)
        return exp_scores_body(row, acc, ks, sq, len, 1);
    return exp_scores_body(row, acc, ks, sq, len, 0);
}

/* ------------------------------------------ the weighted sum of values, AMX */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16")))

/* The tile configuration (palette 1): tiles 0-3 the sums of 16 query rows x
 * 16 values each, 4 the weights of 16 rows x 32 keys, 5 the values of 32
 * keys x 16 (pairs of keys a row). */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* RNE to bf16 of 16 floats (NaN stays NaN). */
static inline AMX_TARGET __m256i bf16_of(__m512 x) { return (__m256i)_mm512_cvtneps_pbh(x); }

/* vb: the values as bf16 pairs for tile 5: per chunk of 32 keys, 16 rows
 * (key pairs) of hdp x 2 bf16; keys past len are zero. */
static AMX_TARGET void pack_values_bf16(uint16_t *vb, const float *v, size_t ld, int len, int hd,
                                        int hdp)
{
    const int keys = round_up(len, 32);
    for (int s = 0; s < keys; s += 2) {
        uint16_t *row = vb + (size_t)(s / 2) * hdp * 2;
        for (int i0 = 0; i0 < hdp; i0 += 16) {
            float a[16] = {0}, b[16] = {0};
            for (int i = 0; i < 16 && i0 + i < hd; i++) {
                if (s < len)
                    a[i] = v[(size_t)s * ld + i0 + i];
                if (s + 1 < len)
                    b[i] = v[(size_t)(s + 1) * ld + i0 + i];
            }
            /* interleave: value i of key s, then of key s + 1 */
            const __m512i ia = (__m512i)_mm512_castsi256_si512(bf16_of(_mm512_loadu_ps(a)));
            const __m512i ib = (__m512i)_mm512_castsi256_si512(bf16_of(_mm512_loadu_ps(b)));
            const __m512i idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9,
                                                 40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33,
                                                 1, 32, 0);
            _mm512_storeu_si512((void *)(row + 2 * i0), _mm512_permutex2var_epi16(ia, idx, ib));
        }
    }
}

/* row[0..keys) as bf16, zero from len on (keys = len rounded up to 32). */
static AMX_TARGET void weights_bf16(uint16_t *dst, const float *row, int len)
{
    const int keys = round_up(len, 32);
    for (int s = 0; s < keys; s += 16) {
        const __mmask16 in = s + 16 <= len ? 0xffff : s < len ? (__mmask16)((1u << (len - s)) - 1) : 0;
        _mm256_storeu_si256((__m256i *)(void *)(dst + s), bf16_of(_mm512_maskz_loadu_ps(in, row + s)));
    }
}

/* The products of NB blocks of 16 values for one block of 16 query rows:
 * sums[r][16 b + i] = sum over the key chunks of w[r] . vb[, b]. */
static inline __attribute__((always_inline)) AMX_TARGET void
tiles_block(int NB, float sums[16][64], const uint16_t *w, int keys, const uint16_t *vb, int hdp)
{
    if (NB > 0) _tile_zero(0);
    if (NB > 1) _tile_zero(1);
    if (NB > 2) _tile_zero(2);
    if (NB > 3) _tile_zero(3);
    const size_t w_stride = (size_t)keys * 2, v_stride = (size_t)hdp * 4;
    for (int c = 0; c < keys; c += 32) {
        _tile_loadd(4, w + c, w_stride);
        const uint16_t *vc = vb + (size_t)(c / 2) * hdp * 2;
        _tile_loadd(5, vc, v_stride);
        _tile_dpbf16ps(0, 4, 5);
        if (NB > 1) {
            _tile_loadd(5, vc + 32, v_stride);
            _tile_dpbf16ps(1, 4, 5);
        }
        if (NB > 2) {
            _tile_loadd(5, vc + 64, v_stride);
            _tile_dpbf16ps(2, 4, 5);
        }
        if (NB > 3) {
            _tile_loadd(5, vc + 96, v_stride);
            _tile_dpbf16ps(3, 4, 5);
        }
    }
    _tile_stored(0, &sums[0][0], sizeof sums[0]);
    if (NB > 1) _tile_stored(1, &sums[0][16], sizeof sums[0]);
    if (NB > 2) _tile_stored(2, &sums[0][32], sizeof sums[0]);
    if (NB > 3) _tile_stored(3, &sums[0][48], sizeof sums[0]);
}

/* One head of attention_forward_int8 without the maps, on AMX: 16 query
 * rows at a time, each row's scores, softmax (exp_scores, in row, unnormalised) and bf16
 * weights, then the block's products on the tiles and the normalisation.
 * Heads of at most 64 values. */
static AMX_TARGET void head_amx(float *ob, size_t ldo, float *row, uint16_t *w, uint16_t *vb,
                                const float *v, size_t ld, const uint8_t *qu, const int8_t *kq,
                                const int32_t *ksum, const float *sk, float sk_max,
                                const float *sq, int32_t *acc, int len, int hd, int hdp, int hd4)
{
    const int keys = round_up(len, 32), NB = hdp / 16;
    amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 6; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    pack_values_bf16(vb, v, ld, len, hd, hdp);
    float inv[16];
    float sums[16][64];
    for (int t0 = 0; t0 < len; t0 += 16) {
        const int rows = len - t0 < 16 ? len - t0 : 16;
        for (int r = 0; r < 16; r++) {
            if (r < rows) {
                scores_vnni(acc, qu + (size_t)(t0 + r) * hd4, kq, ksum, len, hd4);
                inv[r] = exp_scores(row, acc, sk, sk_max, sq[t0 + r], len);
                weights_bf16(w + (size_t)r * keys, row, len);
            } else { /* rows past len: zeros (their sums are not used) */
                memset(w + (size_t)r * keys, 0, sizeof *w * (size_t)keys);
            }
        }
        switch (NB) {
        case 1: tiles_block(1, sums, w, keys, vb, hdp); break;
        case 2: tiles_block(2, sums, w, keys, vb, hdp); break;
        case 3: tiles_block(3, sums, w, keys, vb, hdp); break;
        default: tiles_block(4, sums, w, keys, vb, hdp); break;
        }
        for (int r = 0; r < rows; r++)
            for (int i = 0; i < hd; i++)
                ob[(size_t)(t0 + r) * ldo + i] = sums[r][i] * inv[r];
    }
    _tile_release();
}
#else
static void head_amx(float *ob, size_t ldo, float *row, uint16_t *w, uint16_t *vb, const float *v,
                     size_t ld, const uint8_t *qu, const int8_t *kq, const int32_t *ksum,
                     const float *sk, float sk_max, const float *sq, int32_t *acc, int len, int hd,
                     int hdp, int hd4)
{
    (void)ob; (void)ldo; (void)row; (void)w; (void)vb; (void)v; (void)ld; (void)qu; (void)kq;
    (void)ksum; (void)sk; (void)sk_max; (void)sq; (void)acc; (void)len; (void)hd; (void)hdp;
    (void)hd4; /* never called: the kernel is not available */
}
#endif

void attention_forward_int8(float *out, float *probs, float *scratch, int slots, const float *q,
                            const float *k, const float *v, int ld, const int32_t *lengths, int B,
                            int T, int d, int H, float scale, int kernel)
{
    int hd = d / H, hdp = round_up(hd, VF_LANES), Tp = round_up(T, VF_LANES);
    int hd4 = round_up(hd, 4);
    const int vnni = kernel >= 1, amx = kernel == 2 && !probs && hdp <= 64;
    size_t per_slot = slot_floats(T, d, H);
#pragma omp parallel for schedule(static) num_threads(team_size(slots))
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        int len = lengths[b];
        size_t item = (size_t)b * T, col = (size_t)h * hd;
        float *ob = out + item * d + col;
        float *vp = scratch + (size_t)omp_get_thread_num() * per_slot; /* [Tp, hdp] */
        float *pb = probs ? probs + (size_t)bh * T * T : vp + (size_t)Tp * hdp;
        /* after them (3 Tp hdp floats are left): the int8 keys and queries,
         * their scales, the keys' sums, one row of integer scores and the
         * rows' 1 / sums */
        unsigned char *bytes = (unsigned char *)(vp + (size_t)Tp * hdp + (size_t)T * T);
        int8_t *kq = (int8_t *)bytes;                          /* [Tp * hd4] */
        uint8_t *qu = (uint8_t *)(bytes + (size_t)Tp * hd4);   /* [Tp * hd4] */
        float *sq = (float *)(void *)(bytes + 2 * (size_t)Tp * hd4);
        float *sk = sq + Tp;
        int32_t *ksum = (int32_t *)(void *)(sk + Tp); /* 128 x each key's sum */
        int32_t *acc = ksum + Tp;
        if (!amx)
            pack_rows(vp, v + item * ld + col, (size_t)ld, len, hd, hdp);
        /* keys: int8 rows, then regrouped 16 keys x 4 values a block; pad keys are zero */
        quantize_head_rows(qu, sk, k + item * ld + col, (size_t)ld, len, hd, hd4, 0);
        memset(kq, 0, (size_t)Tp * hd4);
        for (int s = 0; s < len; s++) {
            const int8_t *row = (const int8_t *)qu + (size_t)s * hd4;
            int32_t sum = 0;
            for (int i = 0; i < hd4; i++)
                sum += row[i];
            for (int i = 0; i < hd4; i += 4)
                memcpy(kq + (size_t)(s / 16) * hd4 * 16 + (size_t)(i / 4) * 64 + (s % 16) * 4,
                       row + i, 4);
            ksum[s] = 128 * sum;
            sk[s] *= scale * 1.44269504088896341f; /* softmax scale, and base 2 */
        }
        for (int s = len; s < round_up(len, VF_LANES); s++) { /* read by exp_scores' last vector */
            ksum[s] = 0;
            sk[s] = 0.0f;
        }
        float sk_max = 0.0f; /* NaN when a key's scale is */
        for (int s = 0; s < len; s++)
            sk_max = sk[s] > sk_max || sk[s] != sk[s] ? sk[s] : sk_max;
        quantize_head_rows(qu, sq, q + item * ld + col, (size_t)ld, len, hd, hd4, 128);
        if (amx) { /* the row, then 16 rows of bf16 weights, after the bytes; the values in vp */
            float *row = vp + (size_t)Tp * hdp + (size_t)T * T + 3 * (size_t)Tp * hdp;
            head_amx(ob, (size_t)d, row, (uint16_t *)(void *)(row + Tp), (uint16_t *)(void *)vp,
                     v + item * ld + col, (size_t)ld, qu, kq, ksum, sk, sk_max, sq, acc, len, hd,
                     hdp, hd4);
            for (int t = len; t < T; t++)
                memset(ob + (size_t)t * d, 0, sizeof(float) * (size_t)hd);
            continue;
        }
        float *inv_sum = (float *)(void *)(acc + Tp); /* [Tp] */
        for (int t = 0; t < len; t++) {
            if (vnni)
                scores_vnni(acc, qu + (size_t)t * hd4, kq, ksum, len, hd4);
            else
                scores_c(acc, qu + (size_t)t * hd4, kq, ksum, len, hd4);
            /* the same code after either kernel: the same bits */
            inv_sum[t] = exp_scores(pb + (size_t)t * T, acc, sk, sk_max, sq[t], len);
        }
        if (probs) {
            for (int t = 0; t < len; t++)
                for (int s = 0; s < len; s++)
                    pb[(size_t)t * T + s] *= inv_sum[t];
            zero_outside(pb, len, T);
        }
        /* out_t = sum_s p[t, s] v_s (normalised after, when the maps are not kept) */
        small_gemm(len, hd, len, pb, (size_t)T, 1, vp, (size_t)hdp, ob, (size_t)d, 0);
        if (!probs)
            for (int t = 0; t < len; t++)
                for (int i = 0; i < hd; i++)
                    ob[(size_t)t * d + i] *= inv_sum[t];
        for (int t = len; t < T; t++)
            memset(ob + (size_t)t * d, 0, sizeof(float) * (size_t)hd);
    }
}

void attention_backward(float *dq, float *dk, float *dv, float *scratch, int slots,
                        const float *dout, const float *q, const float *k, const float *v, int ld,
                        const float *probs, const int32_t *lengths, int B, int T, int d, int H,
                        float scale)
{
    int hd = d / H, hdp = round_up(hd, VF_LANES), Tp = round_up(T, VF_LANES);
    size_t per_slot = slot_floats(T, d, H);
#pragma omp parallel for schedule(static) num_threads(team_size(slots))
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        int len = lengths[b];
        size_t item = (size_t)b * T, col = (size_t)h * hd;
        const float *pb = probs + (size_t)bh * T * T;
        float *packed_dout = scratch + (size_t)omp_get_thread_num() * per_slot; /* [Tp, hdp] */
        float *vt = packed_dout + (size_t)Tp * hdp;              /* [hdp, Tp] */
        float *kp = vt + (size_t)hdp * Tp;                       /* [Tp, hdp] */
        float *qp = kp + (size_t)Tp * hdp;                       /* [Tp, hdp] */
        float *dpb = qp + (size_t)Tp * hdp;                      /* [T, T] */
        /* Only valid queries and keys take part: pad rows get no gradient. */
        pack_rows(packed_dout, dout + item * d + col, (size_t)d, len, hd, hdp);
        if (dv) /* dv_s += sum_t p[t, s] dout_t */
            small_gemm(len, hd, len, pb, 1, (size_t)T, packed_dout, (size_t)hdp,
                       dv + item * ld + col, (size_t)ld, 1);
        if (!dq && !dk)
            continue;
        /* dprobs[t, s] = dout_t . v_s */
        pack_transposed(vt, v + item * ld + col, (size_t)ld, len, hd, Tp);
        small_gemm(len, len, hd, packed_dout, (size_t)hdp, 1, vt, (size_t)Tp, dpb, (size_t)T, 0);
        /* softmax backward, with the score scale folded in:
         * dscore[t, s] = scale * p[t, s] * (dprobs[t, s] - sum_j p[t, j] dprobs[t, j]) */
        int nv = len - len % VF_LANES;
        for (int t = 0; t < len; t++) {
            const float *p = pb + (size_t)t * T;
            float *dp = dpb + (size_t)t * T;
            vf16 acc = vf_splat(0.0f);
            for (int s = 0; s < nv; s += VF_LANES)
                acc += vf_load(p + s) * vf_load(dp + s);
            float pdp = vf_sum(acc);
            for (int s = nv; s < len; s++)
                pdp += p[s] * dp[s];
            vf16 vpdp = vf_splat(pdp);
            for (int s = 0; s < nv; s += VF_LANES)
                vf_store(dp + s, vf_load(p + s) * (vf_load(dp + s) - vpdp) * scale);
            for (int s = nv; s < len; s++)
                dp[s] = p[s] * (dp[s] - pdp) * scale;
        }
        if (dq) { /* dq_t += sum_s dscore[t, s] k_s */
            pack_rows(kp, k + item * ld + col, (size_t)ld, len, hd, hdp);
            small_gemm(len, hd, len, dpb, (size_t)T, 1, kp, (size_t)hdp, dq + item * ld + col,
                       (size_t)ld, 1);
        }
        if (dk) { /* dk_s += sum_t dscore[t, s] q_t */
            pack_rows(qp, q + item * ld + col, (size_t)ld, len, hd, hdp);
            small_gemm(len, hd, len, dpb, 1, (size_t)T, qp, (size_t)hdp, dk + item * ld + col,
                       (size_t)ld, 1);
        }
    }
}
